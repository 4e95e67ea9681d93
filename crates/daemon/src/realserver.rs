//! `rvsd realserver`: prepare (or, with `--undo`, unprepare) this host as a
//! real server of a DR or TUN virtual service, the steps seeds 000 and 003
//! describe operators doing by hand:
//!
//! - every VIP on `lo` as a /32 (/128): the host accepts packets for the VIP
//!   without owning it on the wire. Adding an address that is already there
//!   (EEXIST) is not an error, so the command is idempotent;
//! - `arp_ignore=1` and `arp_announce=2` on `all` and on the interface: the
//!   host never answers ARP for the VIP nor uses it as an ARP source, so the
//!   segment keeps sending VIP traffic to the director. (IPv6 needs nothing:
//!   Linux answers neighbour solicitations only for addresses of the
//!   receiving interface.)
//! - TUN: `rp_filter=0` on `all` and the interface (a decapsulated packet's
//!   source is the client, which the reverse path need not lead to), and
//!   rvs's decapsulator (`bpf/decap.c`) attached to the interface — this
//!   kernel has no ipip/fou/ip_gre/geneve module, and a BPF decap is cheaper
//!   anyway (IPIP and GRE are always stripped; GUE and Geneve on their UDP
//!   ports, when `--tun-type` names them). The
//!   program is attached with netlink, so it stays after this command exits.
//!   It strips tunnel packets whose inner destination is any non-loopback
//!   address on `lo` (the VIPs), so a second run with more VIPs replaces it
//!   with one that knows all of them.
//!
//! - `--mode dsr-opt --interface IF` (no `--vip`): the node of real
//!   servers (pods, or the node's own processes) that a director reaches
//!   with `--tun-type opt`. rvs's tc programs (`bpf/dsr_rs.c`) on IF record
//!   each flow's service from the IP option (IPv4) / destination option
//!   (IPv6), remove the option before the server sees the packet, and
//!   rewrite the replies' source to the service address:port on their way
//!   out of IF, straight to the client. Their TCX links and flow map are
//!   pinned under /sys/fs/bpf/rvs/dsr, so they stay after this command
//!   exits; a second run keeps the attached ones (replacing them would
//!   forget the open flows); `--undo` detaches them. Nothing else changes
//!   (no address, no sysctl).
//!
//! - `--toa`: rvs's TOA reader (`bpf/toa.c`) on a cgroup v2 (the root by
//!   default): for connections whose handshake carries the TOA option a
//!   FULLNAT director adds, accept(2) and getpeername(2) return the client's
//!   address instead of the director's, the job of the out-of-tree toa.ko
//!   done with BPF only. Its links are pinned under /sys/fs/bpf/rvs/toa, so
//!   it stays attached after this command exits; a second run keeps the one
//!   attached (replacing it would lose the addresses of open connections);
//!   `--toa --undo` detaches it. A kernel without the hooks is refused with
//!   the reason before anything changes.
//!
//! The sysctl values found before the first run are kept in
//! `/run/rvs/realserver-<netns inode>.json`; `--undo` removes the given VIPs
//! and, when no VIP is left on `lo`, detaches the decapsulator and restores
//! those values (the kernel defaults when the file is missing).

use rvs_sys::netlink::Netlink;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};

/// The forwarding method the real server receives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Direct routing: packets arrive with the VIP as destination.
    Dr,
    /// Tunnelling: packets arrive inside IPIP, GUE, GRE or Geneve.
    Tun,
    /// DSR by IP option (the director's `--tun-type opt`): packets arrive
    /// addressed to the real server (a pod, or this host) with the service
    /// address:port in an IPv4 option / IPv6 destination option. No VIP:
    /// tc programs on `--interface` record and remove the option and send
    /// the replies from the service address.
    DsrOpt,
}

/// The tunnel the director uses (TUN mode).
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TunType {
    /// IPv4-in-IPv4 / IPv6-in-IPv6.
    Ipip,
    /// Generic UDP Encapsulation to `--gue-port`.
    Gue,
    /// GRE (IPv4 in IPv4, IPv6 in IPv6; optional checksum, key and
    /// sequence fields skipped).
    Gre,
    /// Geneve on UDP port 6081 (rvs's director sends IP directly; an inner
    /// Ethernet header is accepted too).
    Geneve,
}

/// What `rvsd realserver` was asked to do.
#[derive(Clone, Debug)]
pub struct Spec {
    /// `--vip`: the virtual addresses.
    pub vips: Vec<IpAddr>,
    /// Needed with `vips`.
    pub mode: Option<Mode>,
    /// `--toa`: `Some(cgroup)` (`None` inside: the default cgroup).
    pub toa: Option<Option<PathBuf>>,
    /// `--tun-type`: the tunnel the director uses.
    pub tun_type: TunType,
    /// `--gue-port`: GUE's UDP destination port.
    pub gue_port: u16,
    /// `--interface`: the interface facing the director.
    pub interface: Option<String>,
    /// `--undo`: reverse the preparation.
    pub undo: bool,
}

/// Run the preparation (or its undo); returns what was done, one line each.
pub fn run(spec: &Spec) -> anyhow::Result<Vec<String>> {
    if spec.mode == Some(Mode::DsrOpt) {
        return dsr_opt(spec);
    }
    let mode = match (spec.vips.is_empty(), spec.mode) {
        (false, None) => bail!("--vip needs --mode dr|tun"),
        (true, Some(_)) => bail!("--mode needs --vip ADDR"),
        (_, m) => m,
    };
    if spec.vips.is_empty() && spec.toa.is_none() {
        bail!("--vip ADDR (with --mode dr|tun) or --toa: nothing to do");
    }
    // Everything the TOA part needs is checked before anything changes.
    let cgroup = match &spec.toa {
        Some(cg) => {
            let cg = cg.clone().unwrap_or_else(rvs_xdp::toa::default_cgroup);
            if !spec.undo {
                rvs_xdp::toa::probe().context("--toa")?;
            }
            rvs_xdp::toa::pin_dir(&cg).with_context(|| format!("--cgroup {}", cg.display()))?;
            // Loaded (verified) before the VIP part changes anything.
            let reader = if spec.undo || rvs_xdp::toa::is_pinned(&cg)? {
                None
            } else {
                Some(rvs_xdp::toa::ToaReader::load().context("--toa")?)
            };
            Some((cg, reader))
        }
        None => None,
    };
    let mut done = Vec::new();
    if let Some(mode) = mode {
        done = vips(spec, mode)?;
    }
    if let Some((cg, reader)) = cgroup {
        done.push(toa(&cg, reader, spec.undo)?);
    }
    Ok(done)
}

/// Attach `reader` (or with `undo`, detach the pinned one) on `cgroup`;
/// no reader: one is pinned there already.
fn toa(
    cgroup: &std::path::Path,
    reader: Option<rvs_xdp::toa::ToaReader>,
    undo: bool,
) -> anyhow::Result<String> {
    let shown = cgroup.display();
    if undo {
        let was = rvs_xdp::toa::detach_pinned(cgroup)
            .with_context(|| format!("detaching the TOA reader from {shown}"))?;
        return Ok(if was {
            format!("TOA reader detached from cgroup {shown}")
        } else {
            format!("absent: no TOA reader on cgroup {shown}")
        });
    }
    let Some(mut r) = reader else {
        return Ok(format!("kept the TOA reader on cgroup {shown}"));
    };
    if !r
        .attach_pinned(cgroup)
        .with_context(|| format!("attaching the TOA reader to {shown}"))?
    {
        return Ok(format!("kept the TOA reader on cgroup {shown}"));
    }
    Ok(format!(
        "TOA reader on cgroup {shown}: accept/getpeername return the TOA client address"
    ))
}

/// `--mode dsr-opt`: attach (or detach) the DSR option programs on
/// `--interface`, then the TOA part if asked for too.
fn dsr_opt(spec: &Spec) -> anyhow::Result<Vec<String>> {
    if !spec.vips.is_empty() {
        bail!(
            "--mode dsr-opt takes no --vip: packets arrive addressed to the real server, the service address rides in the IP option"
        );
    }
    let Some(ifname) = spec.interface.as_deref() else {
        bail!("--mode dsr-opt needs --interface IF (where the tc programs are attached)");
    };
    rvs_sys::iface::ifindex(ifname).with_context(|| format!("--interface {ifname}"))?;
    let mut done = Vec::new();
    if spec.undo {
        let was = rvs_xdp::dsr_rs::detach_pinned(ifname)
            .with_context(|| format!("detaching the DSR option programs from {ifname}"))?;
        done.push(if was {
            format!("DSR option programs detached from {ifname}")
        } else {
            format!("absent: no DSR option programs on {ifname}")
        });
    } else if rvs_xdp::dsr_rs::is_pinned(ifname)? {
        done.push(format!("kept the DSR option programs on {ifname}"));
    } else {
        let mut p = rvs_xdp::dsr_rs::DsrRealServer::load().context("--mode dsr-opt")?;
        p.attach_pinned(ifname)
            .with_context(|| format!("attaching the DSR option programs to {ifname}"))?;
        done.push(format!(
            "DSR option programs on {ifname} (tc ingress and egress): options recorded and removed, replies sent from the service"
        ));
    }
    if spec.toa.is_some() {
        let toa_only = Spec {
            mode: None,
            ..spec.clone()
        };
        done.extend(run(&toa_only)?);
    }
    Ok(done)
}

/// The VIP part: `spec.vips` non-empty and `mode` given.
fn vips(spec: &Spec, mode: Mode) -> anyhow::Result<Vec<String>> {
    if mode == Mode::Tun && spec.interface.is_none() {
        bail!("--mode tun needs --interface IF (where the decapsulator is attached)");
    }
    if spec.tun_type == TunType::Gue && spec.gue_port == 0 {
        bail!("--tun-type gue needs --gue-port N");
    }
    if let Some(ifname) = &spec.interface {
        // In this namespace (not /sys, which may show another one).
        rvs_sys::iface::ifindex(ifname).with_context(|| format!("--interface {ifname}"))?;
    }
    if spec.undo { undo(spec) } else { apply(spec) }
}

/// The sysctls this command sets: `(path under net/ipv4/conf, value)`.
fn sysctls(spec: &Spec) -> Vec<(String, u32)> {
    let mut ifs = vec!["all".to_owned()];
    ifs.extend(spec.interface.clone());
    let mut out = Vec::new();
    for i in &ifs {
        out.push((format!("{i}/arp_ignore"), 1));
        out.push((format!("{i}/arp_announce"), 2));
        if spec.mode == Some(Mode::Tun) {
            out.push((format!("{i}/rp_filter"), 0));
        }
    }
    out
}

fn sysctl_path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys/net/ipv4/conf").join(key)
}

fn read_sysctl(key: &str) -> anyhow::Result<u32> {
    let p = sysctl_path(key);
    let s = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    s.trim()
        .parse()
        .with_context(|| format!("{}: not a number", p.display()))
}

fn write_sysctl(key: &str, value: u32) -> anyhow::Result<()> {
    let p = sysctl_path(key);
    std::fs::write(&p, format!("{value}\n")).with_context(|| format!("writing {}", p.display()))
}

/// Where the previous sysctl values of this network namespace are kept.
fn state_file() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata("/proc/self/ns/net")
        .context("reading /proc/self/ns/net")?
        .ino();
    Ok(PathBuf::from("/run/rvs").join(format!("realserver-{ino}.json")))
}

fn load_state() -> anyhow::Result<BTreeMap<String, u32>> {
    let p = state_file()?;
    match std::fs::read_to_string(&p) {
        Ok(s) => serde_json::from_str(&s).with_context(|| format!("parsing {}", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

fn save_state(state: &BTreeMap<String, u32>) -> anyhow::Result<()> {
    let p = state_file()?;
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&p, serde_json::to_string_pretty(state)?)
        .with_context(|| format!("writing {}", p.display()))
}

/// The netlink socket (rvs-sys, blocking: this is a one-shot command).
fn netlink() -> anyhow::Result<Netlink> {
    Netlink::open().context("opening a netlink socket")
}

/// The index of `lo`.
fn lo() -> anyhow::Result<u32> {
    rvs_sys::iface::ifindex("lo").context("interface lo")
}

fn prefix(vip: &IpAddr) -> String {
    match vip {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

/// Host prefix length of `vip` (/32, /128).
fn host_len(vip: &IpAddr) -> u8 {
    if vip.is_ipv4() { 32 } else { 128 }
}

/// The non-loopback addresses on `lo`: the VIPs this host serves.
fn lo_vips() -> anyhow::Result<Vec<IpAddr>> {
    Ok(netlink()?
        .addresses(lo()?)
        .context("listing the addresses of lo")?
        .into_iter()
        .map(|(a, _)| a)
        .filter(|a| !a.is_loopback())
        .collect())
}

fn apply(spec: &Spec) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let (mut nl, lo) = (netlink()?, lo()?);
    nl.set_link_up(lo).context("setting lo up")?;
    for vip in &spec.vips {
        // IPv6 addresses are added without duplicate address detection, or
        // they stay tentative for a moment (DAD runs from a work queue even
        // on lo) and binding to them fails.
        let added = nl
            .add_address(lo, *vip, host_len(vip))
            .with_context(|| format!("adding {} to lo", prefix(vip)))?;
        done.push(format!(
            "{} {} on lo",
            if added { "added" } else { "kept" },
            prefix(vip)
        ));
    }
    // Remember what the sysctls were before rvs first touched them.
    let mut state = load_state()?;
    let mut changed_state = false;
    for (key, value) in sysctls(spec) {
        if !state.contains_key(&key) {
            state.insert(key.clone(), read_sysctl(&key)?);
            changed_state = true;
        }
        write_sysctl(&key, value)?;
        done.push(format!("net.ipv4.conf.{} = {value}", key.replace('/', ".")));
    }
    if changed_state {
        save_state(&state)?;
    }
    if spec.mode == Some(Mode::Tun) {
        let ifname = spec.interface.as_deref().unwrap_or_default();
        let vips = lo_vips()?;
        let (gue, geneve) = udp_ports(spec);
        let mode = attach_decap(ifname, &vips, gue, geneve)?;
        done.push(format!(
            "decapsulator on {ifname} ({mode:?} mode) for {} VIP(s){}{}",
            vips.len(),
            if gue != 0 {
                format!(", GUE on UDP port {gue}")
            } else {
                String::new()
            },
            if geneve != 0 {
                format!(", Geneve on UDP port {geneve}")
            } else {
                String::new()
            }
        ));
    }
    Ok(done)
}

/// The UDP ports the decapsulator strips (GUE, Geneve; 0 = off).
fn udp_ports(spec: &Spec) -> (u16, u16) {
    match spec.tun_type {
        TunType::Gue => (spec.gue_port, 0),
        TunType::Geneve => (0, rvs_xdp::maps::GENEVE_PORT),
        TunType::Ipip | TunType::Gre => (0, 0),
    }
}

fn attach_decap(
    ifname: &str,
    vips: &[IpAddr],
    gue_port: u16,
    geneve_port: u16,
) -> anyhow::Result<String> {
    let mut d = rvs_xdp::decap::Decap::load()?;
    for v in vips {
        d.add_vip(*v)?;
    }
    d.set_gue_port(gue_port)?;
    d.set_geneve_port(geneve_port)?;
    let mode = d.attach_persistent(ifname)?;
    Ok(format!("{mode:?}"))
}

fn undo(spec: &Spec) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let (mut nl, lo) = (netlink()?, lo()?);
    for vip in &spec.vips {
        let removed = nl
            .del_address(lo, *vip, host_len(vip))
            .with_context(|| format!("removing {} from lo", prefix(vip)))?;
        done.push(format!(
            "{} {} on lo",
            if removed { "removed" } else { "absent:" },
            prefix(vip)
        ));
    }
    let left = lo_vips()?;
    if let (Some(Mode::Tun), Some(ifname)) = (spec.mode, spec.interface.as_deref()) {
        if left.is_empty() {
            rvs_xdp::decap::detach_persistent(ifname)?;
            done.push(format!("decapsulator detached from {ifname}"));
        } else {
            let (gue, geneve) = udp_ports(spec);
            let mode = attach_decap(ifname, &left, gue, geneve)?;
            done.push(format!(
                "decapsulator on {ifname} ({mode} mode) for the {} VIP(s) left",
                left.len()
            ));
        }
    }
    if left.is_empty() {
        let state = load_state()?;
        for (key, _) in sysctls(spec) {
            // Kernel defaults when rvs has no record of the value before.
            let old = state.get(&key).copied().unwrap_or(match key.as_str() {
                k if k.ends_with("rp_filter") => read_sysctl(k)?,
                _ => 0,
            });
            write_sysctl(&key, old)?;
            done.push(format!("net.ipv4.conf.{} = {old}", key.replace('/', ".")));
        }
        let p = state_file()?;
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", p.display())),
        }
    } else {
        done.push(format!(
            "{} VIP(s) still on lo: sysctls left as they are",
            left.len()
        ));
    }
    Ok(done)
}
