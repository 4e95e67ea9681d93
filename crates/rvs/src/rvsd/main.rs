//! `rvsd`: the rvs daemon. Owns the desired state (services, real servers,
//! timeouts), drives a data plane, and serves `rvsadm` over a Unix socket and
//! Prometheus over HTTP.

mod daemon;
mod http;
mod metrics;
mod rules;
mod server;
mod source;
mod view;

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
    /// keepalived.conf-syntax configuration file (virtual_server, real_server,
    /// checkers and vrrp_instance blocks, FULLNAT extensions).
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

    /// Data plane.
    #[arg(long, value_enum, default_value_t = DataPlaneKind::None)]
    dataplane: DataPlaneKind,

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
    match run(args, source) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("rvsd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn data_plane(kind: DataPlaneKind) -> anyhow::Result<Box<dyn DataPlane>> {
    match kind {
        DataPlaneKind::None => Ok(Box::new(NoDataPlane)),
        other => anyhow::bail!(
            "the {other:?} data plane is not part of this build yet; use --dataplane none"
        ),
    }
}

fn run(args: Args, source: Option<Source>) -> anyhow::Result<()> {
    let plane = data_plane(args.dataplane)?;
    let config = IpvsConfig {
        conn_capacity: args.conn_capacity,
        seed: random_seed(),
        ..IpvsConfig::default()
    };
    let ctl = Controller::new(config, plane);
    let daemon = Arc::new(Mutex::new(Daemon::new(ctl, source.clone())));

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
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    // Errors are logged (and counted) by the daemon.
                    let _ = daemon::reload(&daemon).await;
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        tracing::info!("rvsd stopping");
        anyhow::Ok(())
    })
}

/// A seed for the connection hash, from the kernel's entropy pool (so
/// clients cannot predict collisions); falls back to the clock.
fn random_seed() -> u64 {
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
