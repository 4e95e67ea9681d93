//! Connection table: insert, lookup (hit) and expire (poll_expired + remove)
//! per operation at 1M and 10M entries, plus bytes per entry.
//!
//! Run: `cargo bench -p rvs-core --bench conn_table -- --quick`
//! (10M needs ~1.3 GiB per table; setup takes a few seconds per size).

use std::collections::HashMap;
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant as StdInstant};

use criterion::{Criterion, criterion_group, criterion_main};
use rvs_core::conn::{Addr, Conn, ConnFlags, ConnKey, ConnTable, ConnTableConfig};
use rvs_core::model::AddrFamily;
use rvs_core::time::Instant;

fn key(i: u32) -> ConnKey {
    ConnKey {
        protocol: 6,
        af: AddrFamily::Inet,
        caddr: Addr::from(Ipv4Addr::from(0x0a00_0000 | (i >> 8))),
        cport: 1024 + (i & 0xff) as u16,
        vaddr: Addr::from(Ipv4Addr::new(192, 0, 2, 1)),
        vport: 80,
    }
}

fn conn(i: u32) -> Conn {
    let mut c = Conn::new(
        &key(i),
        Addr::from(Ipv4Addr::new(172, 16, 0, (i % 200) as u8 + 1)),
        8080,
        ConnFlags::with_fwd(ConnFlags::MASQ),
        Duration::ZERO,
    );
    // Spread deadlines over 15 minutes, as a mix of states would.
    c.timeout_ms = 1 + i.wrapping_mul(2_654_435_761) % 900_000;
    c
}

fn filled(n: u32, lazy: bool) -> ConnTable {
    let cfg = ConnTableConfig {
        capacity: n as usize,
        hash_seed: 0x5eed,
    };
    let mut t = if lazy {
        ConnTable::with_lazy_reserve(cfg)
    } else {
        ConnTable::new(cfg)
    };
    for i in 0..n {
        let _ = t.insert(conn(i), None, Instant::ZERO);
    }
    t
}

fn bench_size(c: &mut Criterion, n: u32, samples: usize) {
    let label = if n >= 10_000_000 { "10M" } else { "1M" };
    let mut g = c.benchmark_group(format!("conn_table_{label}"));
    g.sample_size(samples);

    // Bytes per entry, reserved up front vs lazily grown, and the fill time.
    for lazy in [false, true] {
        let t0 = StdInstant::now();
        let t = filled(n, lazy);
        let fill = t0.elapsed();
        println!(
            "{label} {}: {} entries, {:.1} bytes/entry, fill {:.1} ns/insert",
            if lazy { "lazy" } else { "up-front" },
            t.len(),
            t.memory_bytes() as f64 / t.len() as f64,
            fill.as_nanos() as f64 / f64::from(n)
        );
    }

    // Insert into a table holding n-1 entries... measured as: remove one
    // random entry, insert a new one (keeps the table at size n).
    let mut t = filled(n, false);
    let mut i = 0u32;
    g.bench_function("insert", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                i = i.wrapping_add(1);
                let victim = rvs_core::conn::ConnId(i.wrapping_mul(2_654_435_761) % n);
                t.remove(victim);
                let c = conn(n.wrapping_add(i));
                let s = StdInstant::now();
                black_box(t.insert(c, None, Instant::ZERO).ok());
                total += s.elapsed();
            }
            total
        })
    });
    drop(t);

    let t = filled(n, false);
    let mut j = 0u32;
    g.bench_function("lookup_hit", |b| {
        b.iter(|| {
            j = j.wrapping_add(1);
            let k = key(j.wrapping_mul(2_654_435_761) % n);
            black_box(t.lookup(&k))
        })
    });

    // Expire: advance a virtual clock and pop+remove due entries; refill
    // when drained. Cost per expired entry, wheel cascades included.
    let mut t = t;
    let mut now = 0u64;
    g.bench_function("expire", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0u64;
            while done < iters {
                if t.is_empty() {
                    t = filled(n, false);
                    now = 0;
                }
                now += 1_000;
                let s = StdInstant::now();
                while done < iters {
                    match t.poll_expired(Instant::from_millis(now)) {
                        Some(id) => {
                            black_box(t.remove(id));
                            done += 1;
                        }
                        None => break,
                    }
                }
                total += s.elapsed();
            }
            total
        })
    });
    drop(t);

    // Baseline in the same run: std's HashMap keyed by the tuple, holding
    // the same 96-byte entries (what a straightforward table would be).
    let mut h: HashMap<ConnKey, Conn> = HashMap::with_capacity(n as usize);
    for i in 0..n {
        h.insert(key(i), conn(i));
    }
    let per = std::mem::size_of::<(ConnKey, Conn)>() + 1;
    println!(
        "{label} std HashMap baseline: {:.1} bytes/entry (no timer, no reply index)",
        (h.capacity() * per) as f64 / h.len() as f64
    );
    let mut j = 0u32;
    g.bench_function("baseline_std_hashmap_lookup_hit", |b| {
        b.iter(|| {
            j = j.wrapping_add(1);
            let k = key(j.wrapping_mul(2_654_435_761) % n);
            black_box(h.get(&k).map(|c| c.dport))
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_size(c, 1_000_000, 20);
    if std::env::var_os("RVS_BENCH_SKIP_10M").is_none() {
        bench_size(c, 10_000_000, 10);
    }
}

criterion_group!(conn_benches, benches);
criterion_main!(conn_benches);
