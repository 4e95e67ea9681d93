//! `rvsd`: the rvs daemon. Owns the desired state (services, real servers,
//! timeouts), drives a data plane, and serves `rvsadm` over a Unix socket and
//! Prometheus over HTTP. This binary parses the command line and wires it
//! to the control plane's driver, the `rvs-daemon` library.

#![forbid(unsafe_code)]

mod args;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use rvs_daemon::{DataPlaneKind, Demo, Options, Source, realserver};

use crate::args::{Args, Sub};

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
        toa,
        cgroup,
        undo,
    }) = &args.command
    {
        let spec = realserver::Spec {
            vips: vip.clone(),
            mode: *mode,
            toa: toa.then(|| cgroup.clone()),
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
            let demo = Demo::new(port, once);
            args.socket = demo.socket();
            args.dataplane = DataPlaneKind::Proxy;
            if args.log_level == "info" {
                args.log_level = "warn".into();
            }
            Some(demo)
        }
        Some(Sub::Realserver { .. }) | None => None,
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    rvs_daemon::set_keepalived_options(rvs_config::LoadOptions {
        config_ids: if args.config_id.is_empty() {
            rvs_daemon::default_config_id().into_iter().collect()
        } else {
            args.config_id.clone()
        },
        strict: args.strict,
        // `${_RANDOM}`: seeded from the clock, as keepalived seeds it.
        random_seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        ..Default::default()
    });
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
        return match rvs_daemon::check(&src) {
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
    // keepalived's `net_namespace`: entered here, before the runtime and
    // any other thread start (they inherit it), and before `--remove`
    // withdraws announced routes (they are in that namespace too).
    if let Some(src) = &source
        && let Err(e) = rvs_daemon::enter_namespace(src)
    {
        eprintln!("rvsd: {e}");
        return ExitCode::FAILURE;
    }
    let options = options(&args);
    if args.remove {
        return match rvs_daemon::remove(&options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rvsd --remove: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let dir = demo.as_ref().map(|d| d.dir.clone());
    let result = rvs_daemon::run(options, source, demo);
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

/// The daemon's settings from the command line.
fn options(args: &Args) -> Options {
    Options {
        socket: args.socket.clone(),
        dataplane: args.dataplane,
        cgroup: args.cgroup.clone(),
        proxy_protocol_from: args.proxy_protocol_from.clone(),
        connect_timeout: args.connect_timeout,
        connect_retries: args.connect_retries,
        drain_grace: args.drain_grace,
        announce_table: args.announce_table,
        bgp_daemon: args.bgp_daemon.clone(),
        takeover: args.takeover.clone(),
        or_start: args.or_start,
        no_splice: args.no_splice,
        reuse_port: args.reuse_port,
        interface: args.interface.clone(),
        xdp_mode: args.xdp_mode,
        flow_table_size: args.flow_table_size,
        max_services: args.max_services,
        embryonic_table_size: args.embryonic_table_size,
        tunnel_mtu: args.tunnel_mtu,
        max_new_flows: args.max_new_flows,
        fullnat_ports: args.fullnat_ports.clone(),
        tunnel_source: args.tunnel_source.clone(),
        tunnel_source_prefix: args.tunnel_source_prefix.clone(),
        instance: args.instance.clone(),
        state_dir: args.state_dir.clone(),
        xdp_upgrade_probe: args.xdp_upgrade_probe,
        http: args.http,
        api: rvs_daemon::ApiOptions {
            token_file: args.api_token_file.clone(),
            writes: args.api_writes,
            reads: args.api_reads,
            rate: args.api_rate,
            tls_cert: args.http_tls_cert.clone(),
            tls_key: args.http_tls_key.clone(),
            client_ca: args.api_client_ca.clone(),
        },
        conn_capacity: args.conn_capacity,
        k8s: args.k8s.clone(),
    }
}
