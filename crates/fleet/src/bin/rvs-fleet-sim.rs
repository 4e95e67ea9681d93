//! `rvs-fleet-sim`: run the fleet model (rvs-fleet) for every combination of
//! the given director and real-server counts and print markdown tables:
//! flows broken per event and policy under both ECMP models, then the
//! memory and sync traffic of each policy. Deterministic for a seed.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rvs_core::sched::Scheduler;
use rvs_fleet::cost::{CostInput, cost, records_per_datagram};
use rvs_fleet::ecmp::{Ecmp, EcmpKind};
use rvs_fleet::sim::{Event, FleetConfig, Outcome, Policy, flows_per_director, run_event};

/// Simulate a fleet of rvs directors behind ECMP: flows broken per event and
/// policy, memory and sync traffic per policy.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Director counts to simulate (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "3,10,100")]
    directors: Vec<u16>,
    /// Real-server counts to simulate (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10,1000")]
    reals: Vec<u32>,
    /// Live flows at the event.
    #[arg(long, default_value_t = 1_000_000)]
    flows: u32,
    /// Schedulers of the service (ipvsadm names, comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "mh,wlc,rr")]
    schedulers: Vec<Scheduler>,
    /// Buckets of the resilient nexthop group (FRR allows 1..=256).
    #[arg(long, default_value_t = 256)]
    buckets: u32,
    /// New flows per second across the fleet.
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
    /// Seconds until a new flow's synced copy is on every peer.
    #[arg(long, default_value_t = 1.0)]
    sync_delay: f64,
    /// Seconds between refreshes of a live flow's synced copy (rvsd: 30).
    #[arg(long, default_value_t = 30.0)]
    refresh: f64,
    /// IP MTU of the sync link.
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// Seed of the flow generator.
    #[arg(long, default_value_t = 14)]
    seed: u64,
    /// Maglev table size (a prime).
    #[arg(long, default_value_t = rvs_core::model::DEFAULT_MH_TABLE_SIZE)]
    mh_table_size: u32,
}

/// rvsd's userspace copy of a flow (its rvs-core connection and the
/// report's bookkeeping): about 120 bytes, as measured for the SYN-flood
/// figures in docs/benchmarks-history.md.
const USERSPACE_CONN_BYTES: u64 = 120;

fn pct(n: u32, of: u32) -> String {
    if n == 0 {
        "0".to_owned()
    } else {
        let p = 100.0 * f64::from(n) / f64::from(of.max(1));
        if p >= 0.1 {
            format!("{p:.1} %")
        } else {
            format!("{p:.3} %")
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rvs-fleet-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let kinds = [
        EcmpKind::HashThreshold,
        EcmpKind::Resilient { buckets: a.buckets },
    ];
    for &d in &a.directors {
        for &r in &a.reals {
            let t = Instant::now();
            println!(
                "### D = {d} directors, R = {r} real servers, F = {} flows\n",
                a.flows
            );
            for kind in kinds {
                if let EcmpKind::Resilient { buckets } = kind
                    && (buckets as usize) < usize::from(d) + 1
                {
                    println!("{kind}: fewer buckets than directors, skipped\n");
                    continue;
                }
                let held = flows_per_director(&FleetConfig {
                    ecmp: kind,
                    seed: a.seed,
                    ..FleetConfig::new(d, r, a.flows)
                })?;
                let max = held.iter().copied().max().unwrap_or(0);
                println!(
                    "ECMP {kind} (the fullest director holds {:.2} % of the flows, fair share {:.2} %). \
                     Broken flows, % of live flows:\n",
                    100.0 * f64::from(max) / f64::from(a.flows.max(1)),
                    100.0 / f64::from(d)
                );
                print_header("| event | sched | moved |");
                println!("|---|---|---|---|---|---|---|---|---|");
                for ev in Event::ALL.into_iter().filter(|e| e.is_director_event()) {
                    for &s in &a.schedulers {
                        let o = run_event(&a.config(d, r, s, kind), ev)?;
                        print!("| {} | {s} | {} |", ev.label(), pct(o.moved, o.live));
                        print_broken(&o);
                        println!(" – |");
                    }
                }
                println!();
            }
            real_server_table(a, d, r)?;
            eprintln!("D={d} R={r}: {:.1} s", t.elapsed().as_secs_f64());
        }
        cost_table(a, d)?;
    }
    eprintln!("total: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

impl Args {
    /// The fleet of `d` directors and `r` real servers under scheduler `s`
    /// behind ECMP `ecmp`, with the rest from the command line.
    fn config(&self, d: u16, r: u32, s: Scheduler, ecmp: EcmpKind) -> FleetConfig {
        FleetConfig {
            scheduler: s,
            ecmp,
            new_flow_rate: self.rate,
            sync_delay_s: self.sync_delay,
            seed: self.seed,
            mh_table_size: self.mh_table_size,
            ..FleetConfig::new(d, r, self.flows)
        }
    }
}

/// A table's header: `first` columns, one per policy, then the stateless
/// director's.
fn print_header(first: &str) {
    print!("{first}");
    for p in Policy::ALL {
        print!(" {} |", p.label());
    }
    println!(" director without state |");
}

/// The broken flows of each policy, % of live flows, as table cells.
fn print_broken(o: &Outcome) {
    for p in Policy::ALL {
        print!(" {} |", pct(o.broken(p), o.live));
    }
}

/// Real-server events leave the ECMP group alone: one table per fleet.
fn real_server_table(a: &Args, d: u16, r: u32) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "Real-server events (the ECMP group does not change). Broken flows, % of live flows; \
         the last column is what a director holding no state would break:\n"
    );
    print_header("| event | sched |");
    println!("|---|---|---|---|---|---|---|---|");
    for ev in Event::ALL.into_iter().filter(|e| !e.is_director_event()) {
        for &s in &a.schedulers {
            let o = run_event(&a.config(d, r, s, EcmpKind::HashThreshold), ev)?;
            print!("| {} | {s} |", ev.label());
            print_broken(&o);
            println!(" {} |", pct(o.stateless, o.live));
        }
    }
    println!();
    Ok(())
}

fn cost_table(a: &Args, d: u16) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = FleetConfig {
        seed: a.seed,
        ..FleetConfig::new(d, 1, a.flows)
    };
    let local = flows_per_director(&cfg)?;
    let max_local = u64::from(local.iter().copied().max().unwrap_or(0));
    let c = CostInput {
        directors: d,
        flows: u64::from(a.flows),
        max_local_flows: max_local,
        new_flow_rate: a.rate,
        refresh_s: a.refresh,
        mtu: a.mtu,
    };
    let ids: Vec<u16> = (0..d).collect();
    let history = Ecmp::new(EcmpKind::HashThreshold, &ids)?.members().len() * 4;
    println!(
        "Cost with D = {d}: {} live flows, {} new flows/s, refresh every {} s, \
         {} sync records per {}-byte datagram (fullest director holds {} flows):\n",
        a.flows,
        a.rate,
        a.refresh,
        records_per_datagram(a.mtu),
        a.mtu,
        max_local
    );
    println!(
        "| policy | flow entries / director | flow + embryonic table / director | rvsd's copies (~{USERSPACE_CONN_BYTES} B each) | sync records/s (fleet) | sync datagrams/s (fleet) | sync rx / director | peer-flow installs/s / director | other cost |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in Policy::ALL {
        let k = cost(p, &c);
        let other = match p {
            Policy::NoState => "–".to_owned(),
            Policy::HashOnly => "table headroom for adopted moved flows".to_owned(),
            Policy::Sync => "every flow on every director".to_owned(),
            Policy::Rvs => "as (c): rvsd syncs every service".to_owned(),
            Policy::SecondChance => format!(
                "previous group kept ({history} B); every packet of a moved flow crosses two directors until it ends"
            ),
        };
        println!(
            "| {} | {} | {:.1} MiB | {:.1} MiB | {:.0} | {:.0} | {:.2} Mbit/s | {:.0} | {} |",
            p.label(),
            k.entries_per_director,
            k.table_bytes_per_director as f64 / (1024.0 * 1024.0),
            (k.entries_per_director * USERSPACE_CONN_BYTES) as f64 / (1024.0 * 1024.0),
            k.sync_records_per_s,
            k.sync_datagrams_per_s,
            k.sync_rx_bytes_per_s_per_director * 8.0 / 1e6,
            k.sync_installs_per_s_per_director,
            other
        );
    }
    println!();
    Ok(())
}
