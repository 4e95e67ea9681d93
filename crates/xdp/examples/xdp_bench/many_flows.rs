//! The "many flows" table: established flows cycled over N keys through
//! the bench-only cycling builds (bpf/bench_cycle.h).

use super::*;

/// The client address of key `i` of the cycling builds.
fn cycle_client(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(CYCLE_BASE + i)
}

/// A step through `n` keys that visits all of them and puts successive runs
/// far apart: the coprime of `n` nearest above n / golden ratio.
pub(crate) fn cycle_stride(n: u32) -> u32 {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    if n <= 2 {
        return n.saturating_sub(1);
    }
    let mut s = ((f64::from(n) * 0.618_033_988_7) as u32).max(1);
    while gcd(n, s) != 1 {
        s += 1;
    }
    s
}

/// The share of the `n` cycled flows alone in their flow-cache slot: when
/// each flow's packets come once per cycle, these hit the cache and every
/// other one misses (its slot last held another flow).
fn cache_alone(n: u32) -> f64 {
    let mut per_slot = vec![0u32; maps::FLOW_CACHE_SIZE as usize];
    let key = |i: u32| Flow4Key {
        caddr: cycle_client(i).octets(),
        vaddr: VIP.octets(),
        cport: CPORT.to_be(),
        vport: 80u16.to_be(),
        proto: PROTO_TCP,
        ..Flow4Key::default()
    };
    for i in 0..n {
        per_slot[maps::flow_cache_index(&key(i)) as usize] += 1;
    }
    let alone = (0..n)
        .filter(|&i| per_slot[maps::flow_cache_index(&key(i)) as usize] == 1)
        .count();
    alone as f64 / f64::from(n)
}

/// Populate `n` established flows in a cycling director: one SYN per key
/// (key order), then one ACK per key (SYN_RECV -> ESTABLISHED). Checks that
/// every ACK found its flow (the service counted 2n packets: an ACK without
/// a flow is passed uncounted) and that a sample of the flows is
/// ESTABLISHED.
fn populate(l: &mut Loaded, syn: &[u8], ack: &[u8], n: u32) -> Result<(), Box<dyn Error>> {
    let tx = rvs_xdp::action::TX;
    l.set_bench_cycle(n, u32::from(n > 1))?;
    ns(l, syn, n, tx)?;
    ns(l, ack, n, tx)?;
    let st = l.svc_stats(0)?;
    if st.conns != u64::from(n) || st.inpkts != 2 * u64::from(n) {
        return Err(format!(
            "populating {n} flows: {} connections and {} packets counted, not {n} and {}",
            st.conns,
            st.inpkts,
            2 * u64::from(n)
        )
        .into());
    }
    let step = (n / 1000).max(1);
    for i in (0..n).step_by(step as usize) {
        let k = FlowKey::new(PROTO_TCP, cycle_client(i).into(), CPORT, VIP.into(), 80);
        match l.flow(&k)? {
            Some(f) if f.state == TCP_ESTABLISHED => {}
            other => return Err(format!("flow {i} of {n}: {other:?}").into()),
        }
    }
    Ok(())
}

/// The "many flows" table: for each N, a director with the flow cache
/// (DirectorCycle), one whose cache entries are all born stale
/// (DirectorCycleMiss) and the bare parse + LRU hit floor (BenchLruCycle),
/// each loaded fresh with N flows, then ACKs cycling over the N keys with a
/// stride of about N / 1.618 (successive packets belong to unrelated flows,
/// created far apart), after one unmeasured pass over all of them. Each
/// figure is the median of `rounds` runs of max(`repeat`, N) packets taken
/// in turn. The service's packet counter must account for every packet
/// (no flow lost to an LRU eviction on the way).
pub(crate) fn many_flows(
    ack: &[u8],
    syn: &[u8],
    repeat: u32,
    table: u32,
    rounds: usize,
) -> Result<(), Box<dyn Error>> {
    let tx = rvs_xdp::action::TX;
    let mut rows = Vec::new();
    for n in [1u32, 1 << 10, 1 << 16, 1 << 20] {
        if n > table {
            break;
        }
        let t0 = std::time::Instant::now();
        let mut progs = Vec::new();
        for object in [Object::DirectorCycle, Object::DirectorCycleMiss] {
            let mut l = director(object, "mh", table)?;
            populate(&mut l, syn, ack, n)?;
            progs.push(l);
        }
        let mut lru = bench_lru(Object::BenchLruCycle, table)?;
        lru.set_bench_cycle(n, u32::from(n > 1))?;
        ns(&mut lru, ack, n, tx)?;
        progs.push(lru);
        let stride = cycle_stride(n);
        let runs = repeat.max(n);
        for l in &mut progs {
            l.set_bench_cycle(n, stride)?;
            ns(l, ack, n.max(1000), tx)?;
        }
        let mut v: Vec<Vec<f64>> = vec![Vec::new(); progs.len()];
        for _ in 0..rounds {
            for (i, l) in progs.iter_mut().enumerate() {
                v[i].push(ns(l, ack, runs, tx)?);
            }
        }
        let want = 2 * u64::from(n) + u64::from(n.max(1000)) + rounds as u64 * u64::from(runs);
        for l in &mut progs[..2] {
            let got = l.svc_stats(0)?.inpkts;
            if got != want {
                return Err(format!("{n} flows: {got} packets forwarded, not {want}").into());
            }
        }
        let [hit, miss, floor] = [0, 1, 2].map(|i| median(&mut v[i]));
        rows.push((n, cache_alone(n), hit, miss, floor, t0.elapsed()));
    }
    println!();
    println!(
        "Many flows: ACKs cycling over N established flows (stride ~N/1.618), mh, {SERVERS} DR real servers, flow table {table}, max(repeat, N) packets per run, median of {rounds}"
    );
    println!(
        "| flows N | alone in their cache slot | established, flow cache as is | established, every packet a cache miss | floor: bare parse + LRU hit, same N keys | as is / floor | miss / floor |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (n, alone, hit, miss, floor, _) in &rows {
        println!(
            "| {n} | {:.1} % | {hit:.0} | {miss:.0} | {floor:.0} | {:.2} | {:.2} |",
            alone * 100.0,
            hit / floor,
            miss / floor
        );
    }
    let took: Vec<String> = rows
        .iter()
        .map(|r| format!("N={}: {:.1} s", r.0, r.5.as_secs_f64()))
        .collect();
    println!(
        "(time per N, loading and populating included: {})",
        took.join(", ")
    );
    Ok(())
}
