//! Control-plane scale: 10,000 services × 10 real servers.
//!
//! * `load` — an empty director takes the whole table (what `rvsd -f` does
//!   after parsing; the parse itself is measured by rvs-config's bench);
//! * `reload_one_change` — the table is replaced by one that differs in one
//!   real server's weight (what SIGHUP does after parsing): difference,
//!   validation of the changed service, application;
//! * `exec_one_command` — a single `-e` through the controller;
//! * baseline `rebuild_all` — building the whole table from scratch, which is
//!   what applying a change costs without a difference (kube-proxy-style full
//!   sync).
//!
//! * `file_load` / `file_reload_one_change` — the same from a keepalived.conf
//!   on disk, parsing included (rvs-config), i.e. what `rvsd -f` and SIGHUP
//!   cost end to end.
//!
//! Run: `taskset -c 1 cargo bench -p rvs-control --bench reload`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rvs_control::dataplane::NoDataPlane;
use rvs_control::owner::{Change, Owner};
use rvs_control::protocol::Command;
use rvs_control::state::{Controller, ServiceDef, build};
use rvs_core::ipvs::IpvsConfig;
use rvs_core::model::{AddrFamily, DestConfig, ForwardMethod, Protocol, ServiceConfig, ServiceKey};

const SERVICES: u32 = 10_000;
const DESTS: u32 = 10;

fn table() -> Vec<ServiceDef> {
    (0..SERVICES)
        .map(|i| ServiceDef {
            key: ServiceKey::Addr {
                protocol: Protocol::Tcp,
                addr: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
                port: 80,
            },
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Wlc),
            dests: (0..DESTS)
                .map(|j| {
                    DestConfig::new(IpAddr::V4(Ipv4Addr::from(0xac10_0000 + i * 16 + j)), 8080)
                        .forward(ForwardMethod::Masq)
                })
                .collect(),
            laddrs: Vec::new(),
        })
        .collect()
}

fn config() -> IpvsConfig {
    IpvsConfig {
        conn_capacity: 1 << 16,
        ..IpvsConfig::default()
    }
}

/// A reload through the control plane's entry point (the table is cloned
/// for it, as a file's freshly parsed table would be moved in).
fn replace(ctl: &mut Controller, defs: &[ServiceDef]) -> bool {
    let change = Change::Replace {
        services: defs.to_vec(),
        partial: false,
    };
    ctl.submit(Owner::File, change).is_ok()
}

fn bench(c: &mut Criterion) {
    let defs = table();
    let mut g = c.benchmark_group("control_10k_x_10");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));

    g.bench_function("load", |b| {
        b.iter_batched(
            || Controller::new(config(), Box::new(NoDataPlane)),
            |mut ctl| {
                replace(&mut ctl, black_box(&defs));
                ctl
            },
            BatchSize::PerIteration,
        )
    });

    g.bench_function("baseline_rebuild_all", |b| {
        b.iter(|| black_box(build(black_box(&defs), config()).ok()))
    });

    let mut ctl = Controller::new(config(), Box::new(NoDataPlane));
    replace(&mut ctl, &defs);
    let mut changed = defs.clone();
    changed[5000].dests[3].weight = 7;
    let mut flip = false;
    g.bench_function("reload_one_change", |b| {
        b.iter(|| {
            flip = !flip;
            let t = if flip { &changed } else { &defs };
            black_box(replace(&mut ctl, black_box(t)))
        })
    });

    let svc = defs[5000].key;
    let mut w = 1;
    g.bench_function("exec_one_command", |b| {
        b.iter(|| {
            w = 3 - w;
            let dest = defs[5000].dests[3].weight(w);
            black_box(
                ctl.submit(
                    Owner::Rvsadm,
                    Change::Commands {
                        commands: vec![Command::EditDest { service: svc, dest }],
                        atomic: false,
                    },
                )
                .ok(),
            )
        })
    });
    g.finish();
}

/// keepalived.conf text for the same table; `bump` changes one weight.
fn keepalived_conf(bump: bool) -> String {
    let mut out = String::with_capacity(16 << 20);
    for i in 0..SERVICES {
        let vip = Ipv4Addr::from(0x0a00_0000 + i);
        out.push_str(&format!(
            "virtual_server {vip} 80 {{\n    delay_loop 5\n    lb_algo wlc\n    lb_kind NAT\n    protocol TCP\n"
        ));
        for j in 0..DESTS {
            let rs = Ipv4Addr::from(0xac10_0000 + i * 16 + j);
            let w = if bump && i == 5000 && j == 3 { 7 } else { 1 };
            out.push_str(&format!(
                "    real_server {rs} 8080 {{\n        weight {w}\n        TCP_CHECK {{\n            connect_timeout 3\n        }}\n    }}\n"
            ));
        }
        out.push_str("}\n");
    }
    out
}

fn parse(path: &std::path::Path) -> Vec<ServiceDef> {
    let loaded = rvs_config::load(path, &rvs_config::LoadOptions::default()).expect("valid config");
    loaded
        .config
        .lvs_services()
        .expect("valid services")
        .into_iter()
        .map(ServiceDef::from)
        .collect()
}

fn bench_files(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("rvs-bench-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let a = dir.join("a.conf");
    let b = dir.join("b.conf");
    std::fs::write(&a, keepalived_conf(false)).expect("write");
    std::fs::write(&b, keepalived_conf(true)).expect("write");
    let mut g = c.benchmark_group("control_10k_x_10_file");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("file_load", |bch| {
        bch.iter(|| {
            let mut ctl = Controller::new(config(), Box::new(NoDataPlane));
            replace(&mut ctl, &parse(&a));
            ctl
        })
    });
    let mut ctl = Controller::new(config(), Box::new(NoDataPlane));
    replace(&mut ctl, &parse(&a));
    let mut flip = false;
    g.bench_function("file_reload_one_change", |bch| {
        bch.iter(|| {
            flip = !flip;
            let defs = parse(if flip { &b } else { &a });
            black_box(replace(&mut ctl, &defs))
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench, bench_files);
criterion_main!(benches);
