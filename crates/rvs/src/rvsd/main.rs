//! `rvsd`: the rvs daemon. Owns the desired state (services, real servers,
//! timeouts), drives a data plane, and serves `rvsadm` over a Unix socket and
//! Prometheus over HTTP.

#![forbid(unsafe_code)]

mod daemon;
mod demo;
mod http;
mod metrics;
mod realserver;
mod rules;
mod server;
mod source;
mod sync;
mod view;
mod vrrp;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{CommandFactory, Parser, ValueEnum};
use rvs_control::dataplane::{DataPlane, NoDataPlane};
use rvs_control::protocol::DEFAULT_SOCKET;
use rvs_control::state::Controller;
use rvs_core::ipvs::IpvsConfig;

use crate::daemon::Daemon;
use crate::source::Source;

/// Which data plane carries the traffic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum DataPlaneKind {
    /// The control plane alone: state, rvsadm and metrics, no traffic.
    None,
    /// Userspace TCP/UDP proxy (unprivileged).
    Proxy,
    /// XDP packet path (root).
    Xdp,
}

/// `--xdp-mode`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum XdpModeArg {
    /// Native (driver) mode, else generic.
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode only.
    Skb,
}

/// rvs daemon: an IPVS-class layer-4 load balancer.
///
/// rvsd owns the service table. Configure it from a keepalived.conf file
/// (-f), an ipvsadm-save rules file (--rules), or at run time with rvsadm,
/// which takes ipvsadm's command line. SIGHUP (or `rvsadm --reload`)
/// re-reads the file and applies only the difference; a file with errors is
/// rejected and the running state stays as it was.
#[derive(Parser, Debug)]
#[command(name = "rvsd", version, about, long_about)]
struct Args {
    /// keepalived.conf-syntax configuration file (virtual_server, real_server
    /// and their health checkers, which rvsd runs with keepalived's rules;
    /// vrrp_instance blocks, which rvsd runs as keepalived's VRRP does;
    /// FULLNAT extensions).
    #[arg(short = 'f', long = "config-file", value_name = "FILE")]
    config: Option<PathBuf>,

    /// ipvsadm-save rules file (the lines `ipvsadm -S` prints).
    #[arg(long = "rules", value_name = "FILE", conflicts_with = "config")]
    rules: Option<PathBuf>,

    /// Validate the configuration file and exit (0 = valid). Judges the file,
    /// not this machine: nothing is touched, missing interfaces or scripts are
    /// warnings.
    #[arg(long)]
    check: bool,

    /// Control socket path.
    #[arg(long, env = "RVS_SOCKET", value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,

    /// Data plane: `proxy` (userspace TCP/UDP proxy, unprivileged), `none`
    /// (control plane alone), `xdp` (the XDP program on --interface; root;
    /// no fwmark services: XDP runs before the packet has a mark).
    #[arg(long, value_enum, default_value_t = DataPlaneKind::Proxy)]
    dataplane: DataPlaneKind,

    /// proxy: accept PROXY protocol headers (v1/v2) from these upstream
    /// balancers (CIDRs or addresses, comma-separated or repeated) and use
    /// the client address they carry; their connections must start with one.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    proxy_protocol_from: Vec<String>,

    /// proxy: seconds to wait for a real server to accept a connection.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    connect_timeout: f64,

    /// proxy: other real servers to try when one cannot be reached.
    #[arg(long, value_name = "N", default_value_t = 2)]
    connect_retries: u32,

    /// proxy: close connections of a deleted real server this many seconds
    /// after its deletion (default: let them finish however long they take).
    #[arg(long, value_name = "SECS")]
    drain_grace: Option<f64>,

    /// proxy: relay with a buffered copy instead of splice(2).
    #[arg(long)]
    no_splice: bool,

    /// xdp: the interfaces to attach the program to (comma-separated or
    /// repeated; required with `--dataplane xdp`): where clients' packets
    /// arrive and, for NAT real servers on another segment, where their
    /// replies arrive.
    #[arg(long, value_name = "IF", value_delimiter = ',')]
    interface: Vec<String>,

    /// xdp: attach mode: `native` (driver), `skb` (generic) or `auto`
    /// (native, else generic).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = XdpModeArg::Auto)]
    xdp_mode: XdpModeArg,

    /// xdp: entries of the flow table, for each family (IPv4 and IPv6
    /// flows have a table each), and of the NAT reply table; the least
    /// recently used entry is evicted when a table is full.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    flow_table_size: u32,

    /// xdp: entries of each embryonic table (IPv4, IPv6): TCP flows live
    /// there from their SYN until the ACK that completes the handshake, so
    /// a SYN flood evicts only half-open flows, never an established one
    /// (counted in the rvs_xdp_* metrics). Default (0): a quarter of
    /// --flow-table-size. Under a flood of R SYNs per second an embryonic
    /// entry lasts about N / R seconds: keep that above the clients'
    /// handshake round trip.
    #[arg(long, value_name = "N", default_value_t = 0)]
    embryonic_table_size: u32,

    /// xdp: largest tunnelled packet (default: the interface's MTU); a
    /// bigger one that may not be fragmented is answered with ICMP
    /// "fragmentation needed" / "packet too big".
    #[arg(long, value_name = "BYTES")]
    tunnel_mtu: Option<u32>,

    /// xdp: SYN-flood guard: above this many new flows per CPU per second,
    /// flows of hash-scheduled (sh/dh/mh) DR/TUN services are forwarded by
    /// the hash without a flow entry (0 = off; counted in
    /// rvs_xdp_guarded_flows_total).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_new_flows: u32,

    /// xdp: outer source address of tunnelled packets, one per family
    /// (default: the preferred source of the route to the real server).
    #[arg(long, value_name = "ADDR")]
    tunnel_source: Vec<std::net::IpAddr>,

    /// xdp: vary the outer source of tunnelled packets per flow within this
    /// prefix (IPv4 /16../32, IPv6 /96../128; one per family), so the real
    /// servers' RSS spreads flows over their queues, as Katran does. The
    /// real servers must accept any source of the prefix (rvs's
    /// decapsulator checks only the inner destination; `rvsd realserver`
    /// relaxes rp_filter). Default: the one --tunnel-source.
    #[arg(long, value_name = "CIDR")]
    tunnel_source_prefix: Vec<String>,

    /// Log level or tracing filter (error, warn, info, debug, trace).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: String,

    /// Serve Prometheus /metrics and a JSON view on this address (off by default).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,

    /// Maximum tracked connections; when full, the entry closest to expiry is evicted.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    conn_capacity: usize,

    /// Print a shell completion script and exit.
    #[arg(long, value_name = "SHELL")]
    completions: Option<clap_complete::Shell>,

    /// Print the man page (roff) and exit.
    #[arg(long)]
    man: bool,

    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Run a demonstration on loopback: three local backends behind a
    /// virtual service through the proxy data plane, unprivileged, with
    /// nothing else installed.
    Demo {
        /// Virtual service port on 127.0.0.1 (0 = any free port).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Show the demonstration and exit instead of serving until Ctrl-C.
        #[arg(long)]
        once: bool,
    },
    /// Prepare this host as a real server of DR or TUN services (root):
    /// the VIPs on lo as /32 (/128), arp_ignore=1 and arp_announce=2 (all
    /// and the interface), and for TUN rp_filter=0 and rvs's XDP
    /// decapsulator on the interface (it stays attached after this command
    /// exits). Idempotent; `--undo` reverses it.
    Realserver {
        /// Virtual addresses, comma-separated or repeated.
        #[arg(long, value_name = "ADDR", value_delimiter = ',', required = true)]
        vip: Vec<std::net::IpAddr>,
        /// How the director forwards to this host.
        #[arg(long, value_enum)]
        mode: realserver::Mode,
        /// TUN: the encapsulation the director uses.
        #[arg(long, value_enum, default_value_t = realserver::TunType::Ipip)]
        tun_type: realserver::TunType,
        /// TUN with GUE: the UDP destination port.
        #[arg(long, value_name = "N", default_value_t = 0)]
        gue_port: u16,
        /// The interface facing the director (needed for TUN; for DR its
        /// ARP sysctls are set too).
        #[arg(long, value_name = "IF")]
        interface: Option<String>,
        /// Reverse the preparation.
        #[arg(long)]
        undo: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(shell) = args.completions {
        clap_complete::generate(shell, &mut Args::command(), "rvsd", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    if args.man {
        let man = clap_mangen::Man::new(Args::command());
        return match man.render(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rvsd: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut args = args;
    if let Some(Sub::Realserver {
        vip,
        mode,
        tun_type,
        gue_port,
        interface,
        undo,
    }) = &args.command
    {
        let spec = realserver::Spec {
            vips: vip.clone(),
            mode: *mode,
            tun_type: *tun_type,
            gue_port: *gue_port,
            interface: interface.clone(),
            undo: *undo,
        };
        return match realserver::run(&spec) {
            Ok(lines) => {
                for l in lines {
                    println!("{l}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rvsd realserver: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let demo = match args.command.take() {
        Some(Sub::Demo { port, once }) => {
            // Unprivileged and self-contained: a private socket, the proxy.
            let dir = std::env::temp_dir().join(format!("rvs-demo-{}", std::process::id()));
            args.socket = dir.join("rvsd.sock");
            args.dataplane = DataPlaneKind::Proxy;
            if args.log_level == "info" {
                args.log_level = "warn".into();
            }
            Some(DemoSpec {
                vip: demo_vip(port),
                once,
                dir,
            })
        }
        Some(Sub::Realserver { .. }) | None => None,
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    let source = match (&args.config, &args.rules) {
        (Some(p), _) => Some(Source::Keepalived(p.clone())),
        (None, Some(p)) => Some(Source::Rules(p.clone())),
        (None, None) => None,
    };
    if args.check {
        let Some(src) = source else {
            eprintln!("rvsd: --check needs a file (-f FILE or --rules FILE)");
            return ExitCode::from(2);
        };
        return match source::check(&src) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        };
    }
    let dir = demo.as_ref().map(|d| d.dir.clone());
    let result = run(args, source, demo);
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("rvsd: {e:#}");
            ExitCode::FAILURE
        }
    }
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

/// A data plane and, for the proxy, its counters; for XDP, its SYN-flood
/// counters.
type PlaneAndStats = (
    Box<dyn DataPlane>,
    Option<Arc<rvs_proxy::ProxyStats>>,
    Option<Arc<rvs_xdp::plane::FloodStats>>,
);

/// The data plane and, for the proxy, its counters.
fn data_plane(args: &Args) -> anyhow::Result<PlaneAndStats> {
    match args.dataplane {
        DataPlaneKind::None => Ok((Box::new(NoDataPlane), None, None)),
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
                ..rvs_proxy::ProxyConfig::default()
            };
            let plane = rvs_proxy::ProxyPlane::new(config);
            let stats = plane.stats();
            Ok((Box::new(plane), Some(stats), None))
        }
        DataPlaneKind::Xdp => {
            let (plane, flood) = xdp_plane(args)?;
            Ok((Box::new(plane), None, Some(flood)))
        }
    }
}

/// Load and attach the XDP data plane. What the controller gets is a
/// handle: the maps are written by the plane's worker thread and
/// neighbours resolved by its resolver thread, so nothing the controller
/// calls under the daemon lock makes a syscall or waits (VRRP, health
/// checks and the control socket share this runtime).
fn xdp_plane(
    args: &Args,
) -> anyhow::Result<(rvs_xdp::plane::XdpPlane, Arc<rvs_xdp::plane::FloodStats>)> {
    use rvs_xdp::AttachMode;
    use rvs_xdp::plane::{XdpOptions, XdpPlane};
    if args.interface.is_empty() {
        anyhow::bail!("--dataplane xdp needs --interface IF (where clients' packets arrive)");
    }
    if args.flow_table_size == 0 {
        anyhow::bail!("--flow-table-size must be at least 1");
    }
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
            XdpModeArg::Auto => None,
            XdpModeArg::Native => Some(AttachMode::Driver),
            XdpModeArg::Skb => Some(AttachMode::Skb),
        },
        load: rvs_xdp::LoadOptions {
            flow_table_size: args.flow_table_size,
            embryonic_table_size: args.embryonic_table_size,
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
    };
    let (plane, modes, flood) =
        XdpPlane::start_reporting(&opts).map_err(|e| anyhow::anyhow!("xdp: {e}"))?;
    for (interface, mode) in opts.interfaces.iter().zip(modes) {
        tracing::info!(%interface, ?mode, flows = args.flow_table_size, "XDP program attached");
    }
    Ok((plane, flood))
}

/// `rvsd demo`'s settings.
struct DemoSpec {
    vip: std::net::SocketAddr,
    once: bool,
    dir: PathBuf,
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

fn run(args: Args, source: Option<Source>, demo: Option<DemoSpec>) -> anyhow::Result<()> {
    let (plane, proxy_stats, xdp_flood) = data_plane(&args)?;
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
    daemon.set_proxy_stats(proxy_stats);
    daemon.set_xdp_flood(xdp_flood);
    let daemon = Arc::new(Mutex::new(daemon));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        // The data plane gets its way back to the director first, then the
        // configuration is applied (inside the runtime: a data plane may
        // bind sockets as services appear). A bad file stops the start.
        Daemon::attach_director(&daemon);
        if let Some(src) = &source {
            let loaded = source::load(src);
            let n = loaded.as_ref().map(|l| l.defs.len()).unwrap_or(0);
            daemon
                .lock()
                .map_err(|_| anyhow::anyhow!("daemon state poisoned"))?
                .apply_loaded(src, loaded)
                .map_err(anyhow::Error::msg)?;
            tracing::info!(source = %src.path().display(), services = n, "configuration loaded");
        }
        let wake = daemon
            .lock()
            .map_err(|_| anyhow::anyhow!("daemon state poisoned"))?
            .health_wake();
        tokio::spawn(rvs_check::runner::run(daemon.clone(), wake));
        tokio::spawn(sync::follow_config(Arc::downgrade(&daemon)));
        let (vrrp_stop, vrrp_task) = {
            let d = daemon
                .lock()
                .map_err(|_| anyhow::anyhow!("daemon state poisoned"))?;
            vrrp::spawn(d.vrrp_specs(), d.vrrp_status())
        };
        // Signal handlers before the socket appears: whoever waits for the
        // socket to talk to rvsd may signal it at once.
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let listener = server::bind(&args.socket)?;
        let _guard = server::SocketGuard(args.socket.clone());
        tracing::info!(socket = %args.socket.display(), dataplane = ?args.dataplane, "rvsd started");
        tokio::spawn(server::serve(listener, daemon.clone()));
        if let Some(addr) = args.http {
            let d = daemon.clone();
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(%addr, "HTTP endpoint listening");
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, http::router(d)).await {
                    tracing::error!("HTTP endpoint: {e}");
                }
            });
        }
        let ticker = daemon.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                every.tick().await;
                if let Ok(mut d) = ticker.lock() {
                    d.tick();
                }
            }
        });
        let mut demo_task = demo.map(|d| {
            let once = d.once;
            let (daemon, socket) = (daemon.clone(), args.socket.clone());
            (once, tokio::spawn(async move { demo::run(daemon, d.vip, &socket, once).await }))
        });
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    // Errors are logged (and counted) by the daemon.
                    let _ = daemon::reload(&daemon).await;
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
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
        tracing::info!("rvsd stopping");
        // Masters resign (priority 0) and give their addresses up first.
        let _ = vrrp_stop.send(true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), vrrp_task).await;
        if let Ok(mut d) = daemon.lock() {
            d.shutdown_health();
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
