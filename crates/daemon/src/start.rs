//! Starting and stopping the daemon: the data plane chosen and loaded, the
//! takeover of a running rvsd, the table restored, the tasks spawned, the
//! signal loop, and the orderly stop (resign, withdraw, drain, remove).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use rvs_control::dataplane::{DataPlane, NoDataPlane};
use rvs_control::state::Controller;
use rvs_core::ipvs::IpvsConfig;

use crate::daemon::Daemon;
use crate::source::Source;
use crate::{DataPlaneKind, Options, XdpMode, handle};
use crate::{
    announce, bgpwatch, demo, http, kubernetes, notify, routes, server, source, sync, table_file,
    takeover, vrrp,
};

/// `rvsd --remove`: withdraw the announced VIPs (`--announce-table`) and
/// forward for the drain grace, then remove the pinned XDP data plane of
/// the instance and its saved table, for an instance whose rvsd is not
/// running. What it did is printed on stdout.
pub fn remove(args: &Options) -> anyhow::Result<()> {
    if let Some(table) = args.announce_table {
        // Withdraw first, keep forwarding for the grace, then remove.
        let i = instance(args)?;
        let s = announce_settings(args, table, i.name())?;
        let n = announce::withdraw_all_blocking(&s).map_err(anyhow::Error::msg)?;
        let grace = removal_grace(args);
        println!(
            "rvsd: withdrew {n} VIP route(s) from table {table}; forwarding for {grace:?} before the removal"
        );
        std::thread::sleep(grace);
        let _ = std::fs::remove_file(&s.drained_file);
    }
    let i = instance(args)?;
    table_file::remove(&table_file::path(&args.state_dir, i.name()))
        .with_context(|| "removing the saved service table".to_string())?;
    if i.remove()? {
        println!(
            "rvsd: removed the XDP data plane of instance `{}`",
            i.name()
        );
    } else {
        println!("rvsd: instance `{}` has nothing pinned", i.name());
    }
    Ok(())
}

/// Parse `ADDR[/LEN]`.
fn parse_cidr(s: &str) -> anyhow::Result<(std::net::IpAddr, u8)> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: std::net::IpAddr = a
        .trim()
        .parse()
        .map_err(|e| anyhow::anyhow!("--proxy-protocol-from {s}: {e}"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| anyhow::anyhow!("--proxy-protocol-from {s}: bad prefix length"))?,
        None => max,
    };
    Ok((addr, len))
}

/// The announcement settings of `--announce-table TABLE` for `instance`.
fn announce_settings(
    args: &Options,
    table: u32,
    instance: &str,
) -> anyhow::Result<announce::Settings> {
    // 0 is no table; 253-255 are the kernel's default, main and local.
    if table == 0 || (253..=255).contains(&table) {
        anyhow::bail!(
            "--announce-table {table}: use a table of its own (not 0, 253 default, 254 main, 255 local)"
        );
    }
    Ok(announce::Settings {
        table,
        proto: announce::PROTO,
        drained_file: announce::drained_path(&args.state_dir, instance),
    })
}

/// How long the stop-and-remove forwards after withdrawing the VIPs.
fn removal_grace(args: &Options) -> std::time::Duration {
    args.drain_grace
        .and_then(|g| std::time::Duration::try_from_secs_f64(g).ok())
        .unwrap_or(std::time::Duration::from_secs(5))
}

/// The pin directory of this rvsd (`--instance`, else from `--socket`).
fn instance(args: &Options) -> anyhow::Result<rvs_xdp::pin::Instance> {
    let name = match &args.instance {
        Some(n) => n.clone(),
        None => rvs_xdp::pin::Instance::default_name(&args.socket),
    };
    rvs_xdp::pin::Instance::new(&name).map_err(|e| anyhow::anyhow!("--instance: {e}"))
}

/// A data plane and, for the proxy, its counters; for XDP, its SYN-flood
/// counters.
type PlaneAndStats = (
    Box<dyn DataPlane>,
    Option<Arc<rvs_proxy::ProxyStats>>,
    Option<Arc<rvs_xdp::plane::FloodStats>>,
    Option<rvs_sock::plane::SockStats>,
);

/// The data plane and, for the proxy, its counters; `handed` are the
/// sockets of the rvsd taken over (`--takeover`), for the same services.
fn data_plane(
    args: &Options,
    handed: Vec<(rvs_core::model::ServiceKey, std::os::fd::OwnedFd)>,
) -> anyhow::Result<PlaneAndStats> {
    if args.dataplane != DataPlaneKind::Proxy && !handed.is_empty() {
        tracing::warn!(
            sockets = handed.len(),
            "--takeover: --dataplane {:?} does not use the proxy's sockets it was handed; closed",
            args.dataplane
        );
    }
    if args.dataplane != DataPlaneKind::Proxy {
        for (set, flag) in [
            (args.no_splice, "--no-splice"),
            (args.reuse_port, "--reuse-port"),
        ] {
            if set {
                tracing::warn!(
                    "{flag}: a proxy option, ignored with --dataplane {:?}",
                    args.dataplane
                );
            }
        }
    }
    if let Some(w) = node_port_mode_warning(args) {
        tracing::warn!("{w}");
    }
    match args.dataplane {
        DataPlaneKind::None => Ok((Box::new(NoDataPlane), None, None, None)),
        DataPlaneKind::Proxy => {
            let secs = |x: f64, what: &str| {
                std::time::Duration::try_from_secs_f64(x)
                    .map_err(|e| anyhow::anyhow!("{what}: {e}"))
            };
            let config = rvs_proxy::ProxyConfig {
                connect_timeout: secs(args.connect_timeout, "--connect-timeout")?,
                connect_retries: args.connect_retries,
                drain_grace: args
                    .drain_grace
                    .map(|g| secs(g, "--drain-grace"))
                    .transpose()?,
                trusted_proxies: args
                    .proxy_protocol_from
                    .iter()
                    .map(|c| parse_cidr(c))
                    .collect::<anyhow::Result<_>>()?,
                splice: !args.no_splice && rvs_proxy::ProxyConfig::default().splice,
                reuse_port: args.reuse_port,
                ..rvs_proxy::ProxyConfig::default()
            };
            let mut plane = rvs_proxy::ProxyPlane::new(config);
            for (key, fd) in handed {
                plane
                    .adopt(key, fd)
                    .map_err(|e| anyhow::anyhow!("--takeover: {e}"))?;
            }
            let stats = plane.stats();
            Ok((Box::new(plane), Some(stats), None, None))
        }
        DataPlaneKind::Xdp => {
            let (plane, flood) = xdp_plane(args)?;
            attach_dsr_receiver(args)?;
            Ok((Box::new(plane), None, Some(flood), None))
        }
        DataPlaneKind::Sock => {
            let plane = sock_plane(args)?;
            let stats = plane.stats();
            Ok((Box::new(plane), None, None, Some(stats)))
        }
        DataPlaneKind::XdpSock => {
            // The sock plane first: it checks the cgroup and the kernel's
            // hooks without touching the interfaces, and is detached again
            // (dropped) when the XDP plane then fails.
            if args.interface.is_empty() {
                anyhow::bail!(
                    "--dataplane xdp,sock: the xdp plane needs --interface IF (where external clients' packets arrive)"
                );
            }
            let sock = sock_plane(args)?;
            let stats = sock.stats();
            let (xdp, flood) = xdp_plane(args)?;
            attach_dsr_receiver(args)?;
            let both = rvs_control::dataplane::Composite::new(
                "xdp,sock",
                vec![Box::new(xdp), Box::new(sock)],
            );
            Ok((Box::new(both), None, Some(flood), Some(stats)))
        }
    }
}

/// The warning `--node-port-mode dsr|hybrid` gets with the proxy plane: a
/// proxy opens its own connection to the endpoint whatever the forwarding
/// method, so the replies come back through it (SNAT in effect).
fn node_port_mode_warning(args: &Options) -> Option<String> {
    use clap::ValueEnum;
    let mode = args.k8s.node_port_mode;
    if !args.k8s.kubernetes
        || args.dataplane != DataPlaneKind::Proxy
        || mode == crate::NodePortMode::Snat
    {
        return None;
    }
    let name = mode.to_possible_value()?.get_name().to_owned();
    Some(format!(
        "--node-port-mode {name}: the proxy data plane proxies every connection whatever the forwarding method, so endpoints answer through it (no direct server return); DSR needs the XDP plane"
    ))
}

/// The interfaces that get the DSR option programs (`bpf/dsr_rs.c`): the
/// XDP plane's `--interface`s when this Kubernetes node receives DSR by IP
/// option ([`crate::KubernetesArgs::receives_dsr_option`]): the other
/// nodes' option packets to its pods arrive there and its pods' replies
/// leave there toward the clients. None on the other planes (the proxy
/// plane answers through itself) nor without `--kubernetes`.
fn dsr_receiver_interfaces(args: &Options) -> &[String] {
    let xdp = matches!(args.dataplane, DataPlaneKind::Xdp | DataPlaneKind::XdpSock);
    if xdp && args.k8s.receives_dsr_option() {
        &args.interface
    } else {
        &[]
    }
}

/// Attach the DSR option programs to [`dsr_receiver_interfaces`], as
/// `rvsd realserver --mode dsr-opt --interface IF` does: pinned, so they
/// outlive rvsd like the XDP program, and kept when already attached (a
/// restart keeps the open flows' services). A node that cannot attach them
/// would take DSR connections to its pods and answer from the pods'
/// addresses, so that is an error, not a warning.
fn attach_dsr_receiver(args: &Options) -> anyhow::Result<()> {
    use anyhow::Context;
    for interface in dsr_receiver_interfaces(args) {
        if rvs_xdp::dsr_rs::is_pinned(interface)? {
            tracing::info!(%interface, "DSR option programs kept (tc ingress and egress)");
            continue;
        }
        let mut p = rvs_xdp::dsr_rs::DsrRealServer::load()
            .context("--node-port-mode dsr|hybrid: the DSR option programs")?;
        p.attach_pinned(interface).with_context(|| {
            format!(
                "--node-port-mode dsr|hybrid: attaching the DSR option programs to {interface} (--dsr-dispatch geneve needs none)"
            )
        })?;
        tracing::info!(
            %interface,
            "DSR option programs attached (tc ingress and egress): options recorded and removed, replies sent from the service"
        );
    }
    Ok(())
}

/// Load the sock data plane's programs and attach them to --cgroup.
fn sock_plane(args: &Options) -> anyhow::Result<rvs_sock::plane::SockPlane> {
    let cgroup = args.cgroup.clone().unwrap_or_else(rvs_sock::default_cgroup);
    let plane = rvs_sock::plane::SockPlane::start(&cgroup).map_err(|e| match e {
        // Names the plane and the missing feature itself.
        rvs_sock::SockError::KernelLacks(_) => anyhow::anyhow!("{e}"),
        e => anyhow::anyhow!("--dataplane sock: {e}"),
    })?;
    tracing::info!(cgroup = %cgroup.display(), "sock data plane attached");
    Ok(plane)
}

/// Load and attach the XDP data plane. What the controller gets is a
/// handle: the maps are written by the plane's worker thread and
/// neighbours resolved by its resolver thread, so nothing the controller
/// calls under the daemon lock makes a syscall or waits (VRRP, health
/// checks and the control socket share this runtime).
fn xdp_plane(
    args: &Options,
) -> anyhow::Result<(rvs_xdp::plane::XdpPlane, Arc<rvs_xdp::plane::FloodStats>)> {
    use rvs_xdp::AttachMode;
    use rvs_xdp::plane::{XdpOptions, XdpPlane};
    if args.interface.is_empty() {
        anyhow::bail!(
            "--dataplane {}: the xdp plane needs --interface IF (where clients' packets arrive)",
            if args.dataplane == DataPlaneKind::XdpSock {
                "xdp,sock"
            } else {
                "xdp"
            }
        );
    }
    let mem = || {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_total(&m))
            .unwrap_or(u64::MAX)
    };
    let cpus = u32::try_from(rvs_sys::bpf::possible_cpus().unwrap_or(1)).unwrap_or(u32::MAX);
    let max_services = match args.max_services {
        Some(n) if n == 0 || n > rvs_xdp::maps::MAX_SERVICES => anyhow::bail!(
            "--max-services {n}: expected 1 to {}",
            rvs_xdp::maps::MAX_SERVICES
        ),
        Some(n) => n,
        None => {
            let mem = mem();
            let n = rvs_xdp::pin::default_max_services(mem, cpus);
            if n < rvs_xdp::maps::MAX_SERVICES {
                tracing::info!(
                    services = n,
                    cpus,
                    mem_total_mib = mem >> 20,
                    "service maps sized to this machine's memory and CPUs (--max-services sets \
                     them)"
                );
            }
            n
        }
    };
    let flow_table_size = match args.flow_table_size {
        Some(0) => anyhow::bail!("--flow-table-size must be at least 1"),
        Some(n) => n,
        None => {
            let mem = mem();
            let n = rvs_xdp::pin::default_flow_table_size(mem, cpus, max_services);
            if n < rvs_xdp::maps::FLOWS_DEFAULT {
                tracing::info!(
                    flows = n,
                    mem_total_mib = mem >> 20,
                    "flow tables sized to this machine's memory (--flow-table-size sets them)"
                );
            }
            n
        }
    };
    let pick = |v6: bool| {
        let mut it = args.tunnel_source.iter().filter(|a| a.is_ipv6() == v6);
        let first = it.next().copied();
        if it.next().is_some() {
            anyhow::bail!("--tunnel-source: one address per family");
        }
        Ok(first)
    };
    let mut prefix4 = None;
    let mut prefix6 = None;
    for cidr in &args.tunnel_source_prefix {
        let (addr, len) = cidr
            .split_once('/')
            .ok_or_else(|| anyhow::anyhow!("--tunnel-source-prefix {cidr}: expected ADDR/LEN"))?;
        let addr: std::net::IpAddr = addr
            .parse()
            .map_err(|e| anyhow::anyhow!("--tunnel-source-prefix {cidr}: {e}"))?;
        let len: u8 = len
            .parse()
            .map_err(|e| anyhow::anyhow!("--tunnel-source-prefix {cidr}: {e}"))?;
        let dup = match addr {
            std::net::IpAddr::V4(a) => prefix4.replace((a, len)).is_some(),
            std::net::IpAddr::V6(a) => prefix6.replace((a, len)).is_some(),
        };
        if dup
            || args
                .tunnel_source
                .iter()
                .any(|s| s.is_ipv6() == addr.is_ipv6())
        {
            anyhow::bail!("--tunnel-source-prefix {cidr}: one source or prefix per family");
        }
    }
    let opts = XdpOptions {
        interfaces: args.interface.clone(),
        mode: match args.xdp_mode {
            XdpMode::Auto => None,
            XdpMode::Native => Some(AttachMode::Driver),
            XdpMode::Skb => Some(AttachMode::Skb),
        },
        load: rvs_xdp::LoadOptions {
            flow_table_size,
            embryonic_table_size: args.embryonic_table_size,
            max_services,
            ..rvs_xdp::LoadOptions::default()
        },
        tun_src4: match pick(false)? {
            Some(std::net::IpAddr::V4(a)) => Some(a),
            _ => None,
        },
        tun_src6: match pick(true)? {
            Some(std::net::IpAddr::V6(a)) => Some(a),
            _ => None,
        },
        tun_src_prefix4: prefix4,
        tun_src_prefix6: prefix6,
        tun_mtu: args.tunnel_mtu,
        max_new_flows: args.max_new_flows,
        fnat_ports: match &args.fullnat_ports {
            None => None,
            Some(r) => Some(fullnat_ports(r)?),
        },
        pin: Some(instance(args)?),
        object: if args.xdp_upgrade_probe {
            rvs_xdp::Object::upgrade_probe().ok_or_else(|| {
                anyhow::anyhow!("--xdp-upgrade-probe: this build has no probe object")
            })?
        } else {
            rvs_xdp::Object::Director
        },
    };
    let (plane, modes, flood) = XdpPlane::start_reporting(&opts).map_err(|e| match e {
        // Names the plane and the missing feature itself.
        rvs_xdp::plane::PlaneError::Map(rvs_xdp::XdpError::KernelLacks(_)) => {
            anyhow::anyhow!("{e}")
        }
        e => anyhow::anyhow!("xdp: {e}"),
    })?;
    let pins = opts.pin.as_ref().map(|p| p.dir().display().to_string());
    for (interface, how) in opts.interfaces.iter().zip(modes) {
        match how {
            rvs_xdp::Attached::New(mode) => tracing::info!(
                %interface, ?mode, flows = flow_table_size, services = max_services, ?pins,
                "XDP program attached"
            ),
            rvs_xdp::Attached::Updated => tracing::info!(
                %interface, ?pins, "XDP program adopted and replaced (link update)"
            ),
            rvs_xdp::Attached::Kept => tracing::info!(
                %interface, ?pins, "XDP program adopted (the same program keeps running)"
            ),
        }
    }
    Ok((plane, flood))
}

/// `--fullnat-ports FIRST-LAST`.
fn fullnat_ports(r: &str) -> anyhow::Result<(u16, u16)> {
    let bad =
        || anyhow::anyhow!("--fullnat-ports {r}: expected FIRST-LAST, 1 <= FIRST <= LAST <= 65535");
    let (a, b) = r.split_once('-').ok_or_else(bad)?;
    let first: u16 = a.trim().parse().map_err(|_| bad())?;
    let last: u16 = b.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last {
        return Err(bad());
    }
    Ok((first, last))
}

/// `rvsd demo`'s settings: the whole load balancer on loopback,
/// unprivileged (see [`Demo::new`]).
#[derive(Clone, Debug)]
pub struct Demo {
    /// The virtual service's address on 127.0.0.1.
    pub vip: std::net::SocketAddr,
    /// Show the demonstration and stop instead of serving until Ctrl-C.
    pub once: bool,
    /// A private directory for the control socket (removed at the end by
    /// whoever made it).
    pub dir: PathBuf,
}

impl Demo {
    /// The demo on 127.0.0.1:`port` (any free port when it is taken or 0),
    /// its socket in a private directory under the temporary directory.
    pub fn new(port: u16, once: bool) -> Self {
        Demo {
            vip: demo_vip(port),
            once,
            dir: std::env::temp_dir().join(format!("rvs-demo-{}", std::process::id())),
        }
    }

    /// The control socket's path: in the private directory.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("rvsd.sock")
    }
}

/// 127.0.0.1:`port` if it is free, else any free port.
fn demo_vip(port: u16) -> std::net::SocketAddr {
    let want = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    if port != 0 && std::net::TcpListener::bind(want).is_ok() {
        return want;
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or(want)
}

/// Raise the soft RLIMIT_NOFILE to the hard limit, as HAProxy and Go
/// programs do: each proxied connection holds descriptors, and the proxy's
/// fd budget (the soft limit less a reserve) bounds its connections. A
/// service manager's soft default (1,024) would refuse connections long
/// before the hard limit allows. Best effort: what it could not do is logged.
fn raise_nofile_soft() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::debug!(soft, hard, "RLIMIT_NOFILE: soft limit raised to the hard"),
            Err(e) => tracing::warn!(
                soft,
                hard,
                "RLIMIT_NOFILE: cannot raise the soft limit: {e}"
            ),
        },
        Ok(_) => {}
        Err(e) => tracing::warn!("RLIMIT_NOFILE: cannot read it: {e}"),
    }
}

/// Run the daemon until it is stopped (SIGTERM, SIGINT), retired by a
/// successor (`--takeover`), asked to remove its data plane, or, for a
/// `--once` demo, done: `source` is its configuration file (loaded first:
/// a bad file stops the start), `demo` the demonstration to run inside it.
/// Builds its own (current-thread) tokio runtime.
pub fn run(args: Options, source: Option<Source>, demo: Option<Demo>) -> anyhow::Result<()> {
    // Before anything starts: writes on a public address need a token.
    let api_policy = crate::api::Policy::load(&args.api, args.http).map_err(anyhow::Error::msg)?;
    // And the TLS files are read: a bad one stops the start, naming it.
    let http_tls = crate::tls::server_config(&args.api)?;
    raise_nofile_soft();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let takeover_path = args
        .takeover
        .as_ref()
        .map(|p| p.clone().unwrap_or_else(|| args.socket.clone()));
    let mut taken = match &takeover_path {
        Some(path) => match rt.block_on(takeover::fetch(path)) {
            Ok(t) => {
                tracing::info!(
                    pid = t.pid,
                    sockets = t.services.len() + usize::from(t.http.is_some()),
                    "taking over the running rvsd"
                );
                Some(t)
            }
            Err(takeover::FetchError::NoDaemon(e)) if args.or_start => {
                tracing::info!(
                    "--takeover: no rvsd runs on {} ({e}); starting normally (--or-start)",
                    path.display()
                );
                None
            }
            Err(takeover::FetchError::NoDaemon(e)) => anyhow::bail!(
                "--takeover: no rvsd is running on {} ({e}); start it without --takeover, or add --or-start",
                path.display()
            ),
            Err(takeover::FetchError::Failed(e)) => {
                return Err(e.context(format!(
                    "--takeover: taking over the rvsd on {} failed; it keeps running unchanged",
                    path.display()
                )));
            }
        },
        None => None,
    };
    let handed = taken
        .as_mut()
        .map(|t| std::mem::take(&mut t.services))
        .unwrap_or_default();
    let http_handed = taken.as_mut().and_then(|t| t.http.take());
    let pins = instance(&args)?;
    if !args.dataplane.has_xdp() && demo.is_none() && pins.exists() {
        // An XDP program a previous rvsd of this instance left attached
        // would keep forwarding beside this data plane.
        pins.remove()?;
        tracing::warn!(
            instance = pins.name(),
            "removed the XDP data plane a previous rvsd left pinned"
        );
    }
    // An XDP rvsd without a configuration file keeps its table beside the
    // pins (see table_file); one that adopts a pinned plane loads it first.
    let table_path = table_file::path(&args.state_dir, pins.name());
    let keeps_table = args.dataplane.has_xdp() && source.is_none() && demo.is_none();
    let saved = if keeps_table && taken.is_none() && pins.exists() {
        table_file::load(&table_path).unwrap_or_else(|e| {
            tracing::warn!("{e}; starting with an empty table");
            None
        })
    } else {
        None
    };
    let (plane, proxy_stats, xdp_flood, sock_stats) = data_plane(&args, handed)?;
    let mut config = IpvsConfig {
        conn_capacity: args.conn_capacity,
        seed: random_seed(),
        ..IpvsConfig::default()
    };
    // A proxy lets connections of a deleted real server finish (optionally
    // bounded by --drain-grace) instead of cutting them like IPVS does.
    config.tunables.drain_deleted = proxy_stats.is_some();
    let ctl = Controller::new(config, plane);
    let mut daemon = Daemon::new(ctl, source.clone());
    if let Some(table) = args.announce_table {
        let s = announce_settings(&args, table, pins.name())?;
        let drained = announce::drained_at_start(&s.drained_file);
        if drained {
            tracing::warn!(
                file = %s.drained_file.display(),
                "the director is drained (rvsadm --undrain announces its VIPs again)"
            );
        }
        daemon.set_announce(s, drained);
    }
    daemon.set_proxy_stats(proxy_stats);
    daemon.set_xdp_flood(xdp_flood);
    daemon.set_sock_stats(sock_stats);
    if keeps_table {
        match table_file::Saver::spawn(table_path.clone()) {
            Ok(saver) => daemon.set_table_saver(saver),
            Err(e) => tracing::warn!(
                "cannot keep the service table in {}: {e}; a restart will prune it",
                table_path.display()
            ),
        }
    }
    // What the other tasks get from the daemon once, before its owner
    // task takes it.
    let health_wake = daemon.health_wake();
    let vrrp_specs = daemon.vrrp_specs();
    let vrrp_status = daemon.vrrp_status();
    let static_routes = daemon.static_routes();
    let remove = daemon.remove_requested();
    let announcing = daemon
        .announce()
        .settings()
        .cloned()
        .map(|s| (s, daemon.announce().wake()));

    rt.block_on(async move {
        // The owner task takes the daemon; the data plane gets its way back
        // to the director first, then the configuration is applied (inside
        // the runtime: a data plane may bind sockets as services appear).
        // A bad file stops the start.
        let daemon = handle::spawn(daemon);
        // A table handed over or saved by the previous rvsd was made by
        // rvsadm, or, on a Kubernetes node, by the Kubernetes source, whose
        // first table then reconciles it (an rvsd with --kubernetes keeps
        // no services of its own: docs/kubernetes.md).
        let restored_owner = if args.k8s.kubernetes {
            rvs_control::owner::Owner::Kubernetes
        } else {
            rvs_control::owner::Owner::Rvsadm
        };
        if let Some(src) = &source {
            let loaded = source::load(src);
            let n = loaded.as_ref().map(|l| l.defs.len()).unwrap_or(0);
            handle::load(&daemon, src.clone(), loaded)
                .await
                .map_err(anyhow::Error::msg)?;
            tracing::info!(source = %src.path().display(), services = n, "configuration loaded");
        } else if let Some(t) = &taken {
            // Started without a file: the old daemon's table, as it is.
            let change = rvs_control::owner::Change::Commands {
                commands: t.table.clone(),
                atomic: true,
            };
            daemon
                .submit(restored_owner, change)
                .await
                .ok_or_else(|| anyhow::anyhow!("the daemon stopped"))?
                .map_err(|e| anyhow::anyhow!("--takeover: the old daemon's table: {}", e.error))?;
            tracing::info!(commands = t.table.len(), "took the old daemon's service table");
        } else if let Some(table) = &saved {
            // The table the previous rvsd had (made with rvsadm), which the
            // adopted program has been forwarding by.
            let change = rvs_control::owner::Change::Commands {
                commands: table.clone(),
                atomic: true,
            };
            match daemon
                .submit(restored_owner, change)
                .await
                .ok_or_else(|| anyhow::anyhow!("the daemon stopped"))?
            {
                Ok(_) => tracing::info!(
                    file = %table_path.display(),
                    commands = table.len(),
                    "service table of the previous rvsd restored"
                ),
                Err(e) => tracing::warn!(
                    file = %table_path.display(),
                    "the saved service table does not apply ({}); starting with an empty table",
                    e.error
                ),
            }
        }
        if taken.is_some() {
            let unused = daemon
                .ask(|reply| handle::Msg::ReleaseHanded { reply })
                .await
                .unwrap_or_default();
            for key in unused {
                tracing::info!(service = ?key, "--takeover: not in this configuration; its socket closes when the old daemon exits");
            }
        }
        let checker = daemon.clone();
        tokio::spawn(rvs_check::runner::drive(
            move |results| {
                let checker = checker.clone();
                async move {
                    checker
                        .ask(|reply| handle::Msg::Health { results, reply })
                        .await
                }
            },
            health_wake,
        ));
        tokio::spawn(sync::follow_config(daemon.clone()));
        if let Some((settings, wake)) = announcing.clone() {
            tokio::spawn(announce::run(daemon.clone(), settings, wake));
        }
        if args.k8s.kubernetes {
            kubernetes::spawn(daemon.clone(), &args.k8s)?;
        }
        if let Some(spec) = &args.bgp_daemon {
            let spec = bgpwatch::Spec::parse(spec).map_err(anyhow::Error::msg)?;
            if let Some((s, _)) = &announcing {
                tokio::spawn(bgpwatch::run(daemon.clone(), spec, s.table, s.proto));
            }
        }
        let (vrrp_stop, vrrp_task) = vrrp::spawn(vrrp_specs, vrrp_status);
        let (statics_stop, statics_task) = routes::spawn(static_routes);
        // Signal handlers before the socket appears: whoever waits for the
        // socket to talk to rvsd may signal it at once.
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut usr2 = signal(SignalKind::user_defined2())?;
        let listener = if taken.is_some() && takeover_path.as_ref() == Some(&args.socket) {
            // Renamed over the old daemon's socket: never a moment without one.
            takeover::bind_over(&args.socket)?
        } else {
            server::bind(&args.socket)?
        };
        let _guard = server::SocketGuard::new(args.socket.clone());
        tracing::info!(socket = %args.socket.display(), dataplane = ?args.dataplane, "rvsd started");
        let handover = Arc::new(takeover::Handover::default());
        tokio::spawn(server::serve(listener, daemon.clone(), handover.clone()));
        if let Some(addr) = args.http {
            let d = daemon.clone();
            let std_l = match http_handed {
                Some((a, fd)) if a == addr => std::net::TcpListener::from(fd),
                _ => std::net::TcpListener::bind(addr)
                    .with_context(|| format!("--http {addr}"))?,
            };
            std_l.set_nonblocking(true)?;
            handover.set_http(addr, std::os::fd::OwnedFd::from(std_l.try_clone()?));
            let listener = tokio::net::TcpListener::from_std(std_l)?;
            tracing::info!(
                %addr,
                tls = http_tls.is_some(),
                client_ca = args.api.client_ca.is_some(),
                "HTTP endpoint listening"
            );
            let h = handover.clone();
            let app = http::router(d, api_policy, args.api.rate);
            tokio::spawn(http::serve(listener, http_tls, app, async move {
                h.retired().await
            }));
        }
        if let Some(t) = taken {
            if takeover::notify_main_pid() {
                // Let the service manager take the new main pid in before
                // the old main process may exit.
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            match takeover::retire_old(t).await {
                Ok(pid) => tracing::info!(
                    pid,
                    "took over: the old rvsd finishes its connections and exits"
                ),
                Err(e) => tracing::error!(
                    "--takeover: {e:#}; it still serves the shared sockets until it is stopped"
                ),
            }
        }
        // The owner ticks every second from now on ([`handle`]).
        daemon.send(handle::Msg::StartTicking).await;
        let mut removing = false;
        let mut demo_task = demo.map(|d| {
            let once = d.once;
            let (daemon, socket) = (daemon.clone(), args.socket.clone());
            (once, tokio::spawn(async move { demo::run(daemon, d.vip, &socket, once).await }))
        });
        let mut retiring = false;
        loop {
            tokio::select! {
                _ = handover.retired() => {
                    retiring = true;
                    break;
                }
                _ = hup.recv() => {
                    // Errors are logged (and counted) by the daemon.
                    let _ = handle::reload(&daemon).await;
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = usr2.recv() => match takeover::spawn_successor() {
                    Ok(pid) => tracing::info!(pid, "SIGUSR2: started the installed rvsd to take over"),
                    Err(e) => tracing::error!("SIGUSR2: {e:#}"),
                },
                _ = remove.notified() => {
                    removing = true;
                    break;
                }
                done = async { match demo_task.as_mut() { Some((_, t)) => t.await, None => std::future::pending().await } } => {
                    let once = demo_task.as_ref().is_some_and(|(o, _)| *o);
                    demo_task = None;
                    match done {
                        Ok(Ok(())) if once => break,
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => anyhow::bail!("demo: {e:#}"),
                        Err(e) => anyhow::bail!("demo: {e}"),
                    }
                }
            }
        }
        if retiring {
            // Taken over: stop accepting (the sockets stay open in the new
            // daemon), let the established connections finish.
            daemon.send(handle::Msg::RetirePlane).await;
            let bound = match args.drain_grace {
                Some(g) => std::time::Duration::try_from_secs_f64(g)
                    .unwrap_or(takeover::DEFAULT_RETIRE_BOUND),
                None => takeover::DEFAULT_RETIRE_BOUND,
            };
            tracing::info!(?bound, "taken over: no longer accepting; finishing the established connections");
            let (left, cut) = takeover::drain(&daemon, bound).await;
            tracing::info!(connections = left, cut, "retired");
        }
        if removing {
            // Withdraw first and keep forwarding for the grace (the BGP
            // daemon's routers move the flows elsewhere meanwhile).
            let settings = daemon
                .ask(|reply| handle::Msg::DrainForRemoval { reply })
                .await
                .flatten();
            if let Some(s) = settings {
                match announce::withdraw_all(&s).await {
                    Ok(n) => tracing::info!(routes = n, table = s.table, "VIPs withdrawn before the removal"),
                    Err(e) => tracing::error!("withdrawing the VIPs before the removal: {e}"),
                }
                let grace = removal_grace(&args);
                tracing::info!(?grace, "forwarding for the drain grace before the removal");
                tokio::time::sleep(grace).await;
                let _ = tokio::fs::remove_file(&s.drained_file).await;
            }
        }
        tracing::info!("rvsd stopping");
        // Masters resign (priority 0) and give their addresses up first.
        let _ = vrrp_stop.send(true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), vrrp_task).await;
        let _ = statics_stop.send(true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), statics_task).await;
        // The `omega` notifiers; the table file saved as it is now.
        if let Some(Some(writer)) = daemon.ask(|reply| handle::Msg::Shutdown { reply }).await {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
        // After the instances' STOP lines: FIFOs rvsd created go.
        notify::close_all();
        if removing {
            // Unpinned, the links go with this process's descriptors of
            // them when it exits a moment later; the maps with the program.
            pins.remove()?;
            table_file::remove(&table_path)?;
            tracing::info!(instance = pins.name(), "XDP data plane removed");
        }
        anyhow::Ok(())
    })
}

/// A seed for the connection hash, from the kernel's entropy pool (so
/// clients cannot predict collisions); falls back to the clock.
pub(crate) fn random_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

/// `MemTotal` of `/proc/meminfo`'s text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::mem_total;

    #[test]
    fn mem_total_reads_proc_meminfo() {
        let text = "MemTotal:        1012344 kB\nMemFree:          500000 kB\n";
        assert_eq!(mem_total(text), Some(1012344 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }

    use super::*;

    /// Options as rvsd's defaults give them, with `--kubernetes`.
    fn kubernetes_options(dataplane: DataPlaneKind, mode: crate::NodePortMode) -> Options {
        Options {
            socket: PathBuf::from("/run/rvs/test.sock"),
            dataplane,
            cgroup: None,
            proxy_protocol_from: Vec::new(),
            connect_timeout: 3.0,
            connect_retries: 2,
            drain_grace: None,
            announce_table: None,
            bgp_daemon: None,
            takeover: None,
            or_start: false,
            no_splice: false,
            reuse_port: false,
            interface: Vec::new(),
            xdp_mode: XdpMode::Auto,
            flow_table_size: None,
            max_services: None,
            embryonic_table_size: 0,
            tunnel_mtu: None,
            max_new_flows: 0,
            fullnat_ports: None,
            tunnel_source: Vec::new(),
            tunnel_source_prefix: Vec::new(),
            instance: None,
            state_dir: PathBuf::from("/run/rvs"),
            xdp_upgrade_probe: false,
            http: None,
            api: Default::default(),
            conn_capacity: 1 << 20,
            k8s: crate::KubernetesArgs {
                kubernetes: true,
                node_port_mode: mode,
                ..Default::default()
            },
        }
    }

    #[test]
    fn node_port_dsr_with_the_proxy_plane_is_warned_naming_the_option() {
        use crate::NodePortMode::{Dsr, Hybrid, Snat};
        for (mode, name) in [(Dsr, "dsr"), (Hybrid, "hybrid")] {
            let w = node_port_mode_warning(&kubernetes_options(DataPlaneKind::Proxy, mode))
                .expect("a warning");
            assert!(w.starts_with(&format!("--node-port-mode {name}: ")), "{w}");
        }
        // SNAT, or a plane that forwards packets: nothing to say.
        assert_eq!(
            node_port_mode_warning(&kubernetes_options(DataPlaneKind::Proxy, Snat)),
            None
        );
        assert_eq!(
            node_port_mode_warning(&kubernetes_options(DataPlaneKind::Xdp, Dsr)),
            None
        );
        let mut no_k8s = kubernetes_options(DataPlaneKind::Proxy, Dsr);
        no_k8s.k8s.kubernetes = false;
        assert_eq!(node_port_mode_warning(&no_k8s), None);
    }

    #[test]
    fn a_dsr_option_node_on_xdp_receives_on_its_interfaces() {
        use crate::NodePortMode::{Dsr, Hybrid, Snat};
        use crate::kubernetes::DsrDispatch::{Geneve, Opt};
        let eth0 = vec!["eth0".to_owned()];
        let with = |plane, mode, dispatch| {
            let mut o = kubernetes_options(plane, mode);
            o.interface = eth0.clone();
            o.k8s.dsr_dispatch = dispatch;
            o
        };
        for plane in [DataPlaneKind::Xdp, DataPlaneKind::XdpSock] {
            for mode in [Dsr, Hybrid] {
                let o = with(plane, mode, Opt);
                assert_eq!(dsr_receiver_interfaces(&o), eth0, "{plane:?} {mode:?}");
            }
        }
        // SNAT, Geneve, a plane that answers through itself, no Kubernetes:
        // nothing to attach.
        for o in [
            with(DataPlaneKind::Xdp, Snat, Opt),
            with(DataPlaneKind::Xdp, Dsr, Geneve),
            with(DataPlaneKind::Proxy, Dsr, Opt),
            with(DataPlaneKind::Sock, Dsr, Opt),
        ] {
            assert!(dsr_receiver_interfaces(&o).is_empty(), "{o:?}");
        }
        let mut no_k8s = with(DataPlaneKind::Xdp, Dsr, Opt);
        no_k8s.k8s.kubernetes = false;
        assert!(dsr_receiver_interfaces(&no_k8s).is_empty());
    }
}
