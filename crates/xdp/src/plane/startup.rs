//! Start-up: [`XdpPlane`] and its [`XdpOptions`], loading and attaching the
//! program, writing its default configuration, adopting pinned maps, and
//! spawning the plane worker and the resolver task.

use super::*;

/// The XDP data plane of rvsd: the program attached to its interfaces,
/// its maps kept in sync by the plane worker, kernel neighbour resolution
/// by the resolver task (see the module doc).
pub type XdpPlane = PlaneHandle<KernelMaps>;

/// What [`XdpPlane::start`] needs.
#[derive(Clone, Debug)]
pub struct XdpOptions {
    /// The interfaces to attach to: where clients' packets arrive, and
    /// for NAT also where real servers' replies arrive (the first one's MTU
    /// is the default tunnel MTU).
    pub interfaces: Vec<String>,
    /// Attach mode; `None`: native, else generic.
    pub mode: Option<crate::AttachMode>,
    /// Map sizes.
    pub load: crate::LoadOptions,
    /// Outer IPv4 source of tunnels (default: the route's preferred source).
    pub tun_src4: Option<std::net::Ipv4Addr>,
    /// Outer IPv6 source of tunnels (default: the route's preferred source).
    pub tun_src6: Option<std::net::Ipv6Addr>,
    /// Outer IPv4 tunnel source varied per flow within this prefix
    /// (address, length /16../32); replaces `tun_src4`.
    pub tun_src_prefix4: Option<(std::net::Ipv4Addr, u8)>,
    /// Outer IPv6 tunnel source varied per flow within this prefix
    /// (address, length /96../128); replaces `tun_src6`.
    pub tun_src_prefix6: Option<(std::net::Ipv6Addr, u8)>,
    /// Largest tunnelled packet (default: the interface's MTU); bigger ones
    /// that may not be fragmented get "fragmentation needed".
    pub tun_mtu: Option<u32>,
    /// SYN-flood guard: new flows per CPU per second above which
    /// hash-scheduled DR/TUN flows get no flow entry; 0 = off.
    pub max_new_flows: u32,
    /// The local ports FULLNAT pools hand out (first, last; default
    /// [`maps::FNAT_PORT_MIN`]..=[`maps::FNAT_PORT_MAX`]).
    pub fnat_ports: Option<(u16, u16)>,
    /// Pin the program's links and maps in this instance's directory (see
    /// [`crate::pin`]), adopting what a previous rvsd left there: the
    /// program then outlives this process. `None`: nothing pinned, the
    /// program is detached when the plane is dropped.
    pub pin: Option<crate::pin::Instance>,
    /// The director object to load ([`crate::Object::Director`]; another
    /// only for tests of upgrades).
    pub object: crate::Object,
}

impl XdpPlane {
    /// [`Plane::start`], then the plane worker and the resolver task over
    /// what it gave. Dropping the handle stops both; the program is
    /// detached unless it was pinned ([`XdpOptions::pin`]).
    pub fn start(opts: &XdpOptions) -> Result<(Self, Vec<crate::Attached>), PlaneError> {
        let (plane, modes, _) = Self::start_reporting(opts)?;
        Ok((plane, modes))
    }

    /// [`XdpPlane::start`], also returning the SYN-flood counters the
    /// plane's reports publish (for metrics).
    #[allow(clippy::type_complexity)]
    pub fn start_reporting(
        opts: &XdpOptions,
    ) -> Result<(Self, Vec<crate::Attached>, std::sync::Arc<FloodStats>), PlaneError> {
        let (plane, resolver, modes) = Plane::start(opts)?;
        let flood = plane.flood_stats();
        Ok((PlaneHandle::spawn(plane, resolver)?, modes, flood))
    }
}

impl Plane<KernelMaps> {
    /// Load the director program, write its default configuration, attach
    /// it to every interface of `opts` (the modes it got, in order) and open
    /// the netlink socket for MAC resolution (returned, for the resolver
    /// task). Dropping the plane detaches the program unless it was
    /// pinned ([`XdpOptions::pin`]: then it keeps running, and a later
    /// start over the same instance adopts it).
    /// With `opts.pin`, a start that fails over an instance with nothing
    /// pinned leaves nothing pinned; one that fails over pins a previous
    /// rvsd left leaves them (and the program they keep running) alone.
    #[allow(clippy::type_complexity)]
    pub fn start(
        opts: &XdpOptions,
    ) -> Result<(Self, crate::neigh::NeighResolver, Vec<crate::Attached>), PlaneError> {
        let fresh = opts.pin.as_ref().filter(|i| i.is_empty());
        let r = Self::start_inner(opts);
        if r.is_err()
            && let Some(inst) = fresh
        {
            let _ = inst.remove();
        }
        r
    }

    #[allow(clippy::type_complexity)]
    fn start_inner(
        opts: &XdpOptions,
    ) -> Result<(Self, crate::neigh::NeighResolver, Vec<crate::Attached>), PlaneError> {
        let Some(first) = opts.interfaces.first() else {
            return Err(PlaneError::Refused("no interface to attach to".into()));
        };
        let not_root = || !nix::unistd::geteuid().is_root();
        let loaded = match &opts.pin {
            None => {
                KernelMaps::load_object(opts.object, &opts.load).map(|m| (m, false, Vec::new()))
            }
            Some(inst) => crate::pin::load_director(inst, opts.object, &opts.load).map(|l| {
                (
                    KernelMaps::from_loaded(l.director, &opts.load),
                    l.adopted,
                    l.migrating,
                )
            }),
        };
        let (maps, adopted, migrating) = loaded.map_err(|e| {
            if not_root() {
                PlaneError::Refused(format!(
                    "the xdp data plane needs root (CAP_BPF and CAP_NET_ADMIN) to load its \
                     program: {e}"
                ))
            } else {
                PlaneError::Map(e)
            }
        })?;
        let mut resolver = crate::neigh::NeighResolver::new()
            .map_err(|e| PlaneError::Refused(format!("opening the netlink socket: {e}")))?;
        let tun_mtu = match opts.tun_mtu {
            Some(m) => m,
            None => {
                let idx = rvs_sys::iface::ifindex(first).map_err(|e| {
                    PlaneError::Refused(format!(
                        "no interface `{first}` in this network namespace ({e})"
                    ))
                })?;
                resolver
                    .link_mtu(idx)
                    .map_err(|e| PlaneError::Refused(format!("MTU of `{first}`: {e}")))?
            }
        };
        let mut plane = if adopted {
            Plane::adopt(maps)?
        } else {
            Plane::new(maps)?
        };
        plane.set_limits(tun_mtu, opts.max_new_flows)?;
        if let Some((first, last)) = opts.fnat_ports {
            plane.set_fnat_ports(first, last)?;
        }
        plane.set_tunnel_sources(opts.tun_src4, opts.tun_src6)?;
        if opts.tun_src_prefix4.is_some() || opts.tun_src_prefix6.is_some() {
            plane.set_tunnel_source_prefixes(opts.tun_src_prefix4, opts.tun_src_prefix6)?;
        }
        // The running program is kept only when its tail-call arrays are
        // pinned and filled and it runs on every interface: else every
        // interface gets this director's program, whose arrays are pinned
        // after (see crate::pin).
        let keep = opts.pin.as_ref().is_some_and(|i| {
            i.tails_pinned() && opts.interfaces.iter().all(|f| i.link_path(f).exists())
        });
        let swap = !migrating.is_empty() || !keep;
        let mut modes = Vec::new();
        for name in &opts.interfaces {
            let d = plane.maps.director();
            let r = match &opts.pin {
                Some(inst) => d.attach_pinned(name, opts.mode, &inst.link_path(name), swap),
                None => d.attach(name, opts.mode).map(crate::Attached::New),
            };
            let mode = r.map_err(|e| {
                PlaneError::Refused(format!("attaching to interface `{name}`: {e}"))
            })?;
            modes.push(mode);
        }
        if let Some(inst) = &opts.pin {
            crate::pin::finish_migration(inst, plane.maps.director(), migrating, &opts.load)?;
            // Over adopted maps, unless the running program was kept (this
            // build's, which stamps them): the program before (an older
            // build, or one of a downgrade) may have left live embryonic
            // entries unstamped, so this one looks them up until they have
            // expired (maps::EMBRYONIC_SEEN_UNKNOWN).
            if adopted && modes.iter().any(|m| *m != crate::Attached::Kept) {
                plane
                    .maps
                    .director()
                    .set_embryonic_seen(crate::maps::EMBRYONIC_SEEN_UNKNOWN)?;
            }
            if modes.iter().any(|m| *m != crate::Attached::Kept) {
                plane.maps.director().pin_tails(inst)?;
            }
            // Links of interfaces no longer configured go (detached).
            for ifname in inst.linked_interfaces() {
                if !opts.interfaces.contains(&ifname) {
                    inst.unpin_link(&ifname).map_err(XdpError::from)?;
                    tracing::info!(interface = %ifname, "XDP link of an interface no longer configured removed");
                }
            }
        }
        // What attach owns (each interface's MAC); the resolver task then
        // follows the interfaces' MACs and their macvlans'.
        let own = plane.maps.director().own_macs()?;
        let mut links: Vec<u32> = own.entries().iter().map(|(i, _)| *i).collect();
        links.dedup();
        plane.set_links(links, own);
        Ok((plane, resolver, modes))
    }
}
