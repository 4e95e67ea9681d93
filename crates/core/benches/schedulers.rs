//! ns per scheduling decision for every scheduler at N = 10, 100, 1000 real
//! servers. One iteration is what a new connection costs the scheduler: the
//! decision, then binding the connection to the chosen server (its inactive
//! counter grows and the scheduler is told, as the director does), so the
//! least-connection family pays for keeping its index current.
//!
//! `wlc_kernel_scan` is the kernel's O(N) wlc loop, measured in the same run
//! as the baseline for the least-connection family.
//!
//! Run: `cargo bench -p rvs-core --bench schedulers`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rvs_core::dest::{Dest, DestId};
use rvs_core::model::{DestConfig, Protocol};
use rvs_core::sched::{ListChange, SchedInput, SchedParams, Scheduler, new_scheduler};
use rvs_core::time::Instant;

fn dests(n: usize) -> Vec<Dest> {
    (0..n)
        .map(|i| {
            let ip = Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8);
            // Mixed weights 1..=5 so weighted schedulers do real work.
            let cfg = DestConfig::new(IpAddr::V4(ip), 80).weight(1 + (i as u32 % 5));
            Dest::new(DestId(i as u32), cfg)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("schedule");
    g.warm_up_time(std::time::Duration::from_millis(300));
    g.measurement_time(std::time::Duration::from_secs(1));
    for sched in Scheduler::all() {
        let name = sched.name();
        for n in [10usize, 100, 1000] {
            let params = SchedParams {
                mh_table_size: 65537,
                ..SchedParams::default()
            };
            let Ok(mut s) = new_scheduler(sched, &params) else {
                continue;
            };
            let mut d = dests(n);
            s.update(&d, ListChange::Reset);
            let mut i: u32 = 0;
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    i = i.wrapping_add(0x9E37_79B1);
                    let input = SchedInput {
                        protocol: Protocol::Tcp,
                        saddr: IpAddr::V4(Ipv4Addr::from(i)),
                        sport: i as u16,
                        daddr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, (i >> 24) as u8)),
                        dport: 80,
                    };
                    let pos = s.schedule(&d, black_box(&input), Instant::ZERO);
                    if let Some(p) = pos {
                        d[p].inactive += 1;
                        s.counts_changed(&d, p);
                    }
                    black_box(pos)
                })
            });
        }
    }
    // Baseline in the same run: the kernel's wlc, a scan of every server per
    // decision (ip_vs_wlc.c), with the same bind step.
    for n in [10usize, 100, 1000] {
        let mut d = dests(n);
        let mut i: u32 = 0;
        g.bench_with_input(BenchmarkId::new("wlc_kernel_scan", n), &n, |b, _| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let pos = kernel_wlc(black_box(&d));
                if let Some(p) = pos {
                    d[p].inactive += 1;
                }
                black_box(pos)
            })
        });
    }
    g.finish();
}

/// ip_vs_wlc.c's loop: first eligible server, replaced by any later one
/// with a strictly smaller overhead/weight (cross-multiplied).
fn kernel_wlc(d: &[Dest]) -> Option<usize> {
    let mut least: Option<usize> = None;
    for (i, x) in d.iter().enumerate() {
        if !x.is_eligible() {
            continue;
        }
        match least {
            None => least = Some(i),
            Some(l) => {
                let lo = d[l].overhead() * u64::from(x.weight());
                if lo > x.overhead() * u64::from(d[l].weight()) {
                    least = Some(i);
                }
            }
        }
    }
    least
}

criterion_group!(benches, bench);
criterion_main!(benches);
