//! Maglev (`mh`) table build time: a full rebuild, as done on every change
//! of a service's server list. Target: ≤ 1 ms at M = 65537, N = 1000.
//! Each size is also run through the literal kernel loop as the baseline.
//!
//! Run: `cargo bench -p rvs-core --bench maglev`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use rvs_core::dest::{Dest, DestId};
use rvs_core::model::{DestConfig, SchedFlags};
use rvs_core::sched::{ListChange, SchedParams, Scheduler, mh_reference_table, new_scheduler};

/// `n` equal-weight real servers 10.0.0.1:80, 10.0.0.2:80, ...
fn servers(n: u32) -> Vec<Dest> {
    (0..n)
        .map(|i| {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + i));
            Dest::new(DestId(i), DestConfig::new(ip, 80))
        })
        .collect()
}

fn build(c: &mut Criterion) {
    for (m, n) in [(65_537u32, 100u32), (65_537, 1000), (4093, 100)] {
        let params = SchedParams {
            flags: SchedFlags::default(),
            mh_table_size: m,
            ..SchedParams::default()
        };
        let Ok(mut s) = new_scheduler(Scheduler::Mh, &params) else {
            panic!("mh with M={m} must be accepted");
        };
        let d = servers(n);
        c.bench_function(&format!("maglev_build M={m} N={n}"), |b| {
            b.iter(|| s.update(black_box(&d), ListChange::Reset))
        });
        // Baseline in the same run: the kernel's populate loop transcribed
        // literally (it yields the identical table, see mh tests).
        c.bench_function(&format!("maglev_build_kernel_loop M={m} N={n}"), |b| {
            b.iter(|| black_box(mh_reference_table(black_box(&d), m)))
        });
    }
}

criterion_group!(benches, build);
criterion_main!(benches);
