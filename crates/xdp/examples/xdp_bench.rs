//! ns per packet of the director program through BPF_PROG_TEST_RUN, with
//! the floors measured in the same run: a bare XDP_TX program and a bare
//! LRU insert into a flow table of the same size.
//!
//! `cargo run -p rvs-xdp --example xdp_bench -- [REPEAT] [FLOW_TABLE] [ROUNDS] [established]`
//! (root; defaults 1000000, 1048576 and 3). The established-flow figures and
//! their floors are the median of ROUNDS measurements taken in turn; every
//! run repeats one flow's ACK on one CPU, so the established rows measure a
//! hit in the per-CPU flow cache (the common packet of a busy flow), and the
//! "flow cache miss" row the same flow with the cache never filled (its
//! flows4 lookup on every packet: the cost of a flow's first packet on a
//! CPU, or of one whose cache slot another flow took); the "IPv6" rows the
//! same for an IPv6 flow (`flow6_cache` in front of `flows`); the "own-MAC
//! filter off" rows the same flows with the own-MAC table empty (what the
//! MAC filter costs is the difference);
//! Then the "many flows" table: the same ACK cycling over N established
//! flows (N = 1, 1024, 65536, 1048576, at most FLOW_TABLE) through the
//! bench-only cycling builds (bpf/bench_cycle.h), with the flow cache as it
//! is and with every packet missing it, and the bare parse + LRU hit floor
//! over the same N keys (see [`many_flows`]).
//! `established` stops after them. `quic` as the fourth argument runs the
//! QUIC-LB table alone (see [`quic`]), `fnat` the FULLNAT table (see
//! [`fnat`]; REPEAT being its calls per round). Then the "tunnels" table (see
//! [`tunnels`]; `tunnels` as the fourth argument runs it alone, REPEAT
//! being its calls per round). New-flow figures are given twice:
//! while the table fills (empty -> REPEAT entries) and when it is full
//! (every insert evicts the least recently used entry).

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::PacketBuilder;
use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::DestConfig;
use rvs_core::sched::SchedParams;
use rvs_xdp::maps::{self, Config, Dest, Flow4Key, FlowKey, PROTO_TCP, Svc, SvcKey};
use rvs_xdp::{LoadOptions, Loaded, Object, tables};

/// The frame tests' fixtures: frame builders, the service installer
/// (`Lb::service`) and the QUIC-LB codecs, server IDs and datagrams.
#[path = "../tests/common/mod.rs"]
mod common;
use common::quic as quic_frames;

const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
const SERVERS: usize = 64;
/// The client port of the benchmark's frames.
const CPORT: u16 = 40000;
/// `RVS_TCP_S_ESTABLISHED`.
const TCP_ESTABLISHED: u8 = 1;
/// `RVS_BENCH_CYCLE_BASE` (bpf/bench_cycle.h): key i is this address + i.
const CYCLE_BASE: u32 = 0x0a00_0000;
/// The benchmark's ingress interface (given in the test run's context, as
/// the wire gives it): the loopback device, ifindex 1 in every namespace.
const INGRESS: u32 = 1;
/// The director's MAC: the destination of the benchmark's frames, owned on
/// [`INGRESS`] as attach owns an interface's MAC. The real servers have it
/// too: a repeated BPF_PROG_TEST_RUN runs on the previous run's output
/// frame, whose destination is the real server's MAC, and that frame must
/// still be one sent to the director (else the MAC filter passes it), with
/// the table's first entry matching as the interface's own MAC does.
const DIR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn frame(syn: bool) -> Vec<u8> {
    frame_of(syn, false)
}

/// The benchmark's SYN or ACK, IPv4 or IPv6 (client fd78::1 to `VIP6`).
fn frame_of(syn: bool, v6: bool) -> Vec<u8> {
    let e = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], DIR_MAC);
    let b = if v6 {
        let c = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 1);
        e.ipv6(c.octets(), VIP6.octets(), 64)
    } else {
        e.ipv4([10, 78, 0, 1], VIP.octets(), 64)
    }
    .tcp(CPORT, 80, 1, 65535);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut out = Vec::new();
    // A 64-byte frame with payload, like a small request.
    b.write(&mut out, &[0u8; 10]).expect("frame");
    out
}

/// One TCP service on VIP:80 with `SERVERS` DR real servers.
fn director(object: Object, sched: &str, table: u32) -> Result<Loaded, Box<dyn Error>> {
    director_of(object, sched, table, false)
}

/// [`director`], IPv4 (`VIP`) or IPv6 (`VIP6`, IPv6 real servers).
fn director_of(
    object: Object,
    sched: &str,
    table: u32,
    v6: bool,
) -> Result<Loaded, Box<dyn Error>> {
    let sched: rvs_core::sched::Scheduler = sched.parse()?;
    let family = if v6 { maps::AF_INET6 } else { maps::AF_INET };
    let mut l = Loaded::load(
        object,
        &LoadOptions {
            flow_table_size: table,
            slots: 1 << 16,
            // Every SYN of `populate` (all sent before their ACKs) and of
            // the new-flow rows has room, as in the flow table.
            embryonic_table_size: table,
        },
    )?;
    l.set_config(&Config::ipvs_defaults())?;
    l.add_own_mac(INGRESS, DIR_MAC)?;
    let core: Vec<CoreDest> = (0..SERVERS)
        .map(|i| {
            let a = if v6 {
                IpAddr::V6(Ipv6Addr::new(0xfd77, 1, 0, 0, 0, 0, 0, i as u16 + 1))
            } else {
                IpAddr::V4(Ipv4Addr::new(10, 77, 1, i as u8 + 1))
            };
            CoreDest::new(DestId(i as u32), DestConfig::new(a, 80).weight(1))
        })
        .collect();
    let index_of: Vec<u32> = (0..SERVERS as u32).collect();
    let t = tables::scheduling_table(sched, &SchedParams::default(), &core, &index_of)?;
    for (i, d) in core.iter().enumerate() {
        l.set_dest(
            i as u32,
            &Dest {
                addr: maps::addr16(d.config.addr),
                family,
                method: maps::fwd::DR,
                weight: 1,
                mac: DIR_MAC,
                ..Dest::default()
            },
        )?;
    }
    l.set_slots(0, &t)?;
    l.set_slots(1 << 15, &index_of)?;
    l.set_svc(
        0,
        &Svc {
            sched: maps::sched::id(sched),
            family,
            table_off: 0,
            table_len: t.len() as u32,
            dests_off: 1 << 15,
            dests_len: SERVERS as u32,
            ..Svc::default()
        },
    )?;
    l.set_cursor(0, 0)?;
    let vip: IpAddr = if v6 { VIP6.into() } else { VIP.into() };
    l.set_service(&SvcKey::new(PROTO_TCP, vip, 80), 0)?;
    Ok(l)
}

fn ns(l: &mut Loaded, f: &[u8], repeat: u32, want: u32) -> Result<f64, Box<dyn Error>> {
    let r = l.run_on(f, repeat, INGRESS)?;
    if r.action != want {
        return Err(format!("action {} instead of {want}", r.action).into());
    }
    Ok(r.duration.as_nanos() as f64)
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let repeat: u32 = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let table: u32 = args.next().map_or(Ok(1 << 20), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let mode = args.next();
    let established_only = mode.as_deref() == Some("established");
    let rounds = rounds.max(1);
    let (syn, ack) = (frame(true), frame(false));
    if mode.as_deref() == Some("tunnels") {
        return tunnels(&syn, &ack, repeat, table, rounds);
    }
    if mode.as_deref() == Some("quic") {
        return quic(repeat, table, rounds);
    }
    if mode.as_deref() == Some("fnat") {
        return fnat(repeat, rounds);
    }
    let (syn6, ack6) = (frame_of(true, true), frame_of(false, true));
    let tx = rvs_xdp::action::TX;

    // The established-flow figures and their floors: every program loaded
    // once, then measured `rounds` times in turn (a noisy neighbour hits
    // all of them alike), medians reported.
    let mut tx_prog = Loaded::load(Object::BenchTx, &LoadOptions::default())?;
    let mut hit_prog = Loaded::load(
        Object::BenchLruHit,
        &LoadOptions {
            flow_table_size: table,
            slots: 1,
            ..LoadOptions::default()
        },
    )?;
    // (row, program, IPv6 frames).
    let mut est_progs = Vec::new();
    for sched in ["mh", "rr"] {
        let mut l = director(Object::Director, sched, table)?;
        ns(&mut l, &syn, 1, tx)?;
        est_progs.push((sched, l, false));
    }
    // The program caches a flow only when its timeout is longer than the
    // cache's bound (FLOW_CACHE_JIFFIES): with HZ given as 1 and a 32 s
    // ESTABLISHED timeout it never does, and every ACK looks up flows4
    // (the flow stays live while it runs: it is stamped every jiffy; between
    // rounds it expires, and a SYN starts it again).
    // The same two for an IPv6 flow.
    for (row, v6) in [
        ("mh, flow cache miss", false),
        ("IPv6, mh", true),
        ("IPv6, mh, flow cache miss", true),
    ] {
        let mut l = director_of(Object::Director, "mh", table, v6)?;
        if row.contains("miss") {
            let mut cfg = Config::ipvs_defaults();
            cfg.hz = 1;
            cfg.tcp_timeouts[1] = maps::FLOW_CACHE_JIFFIES as u32;
            l.set_config(&cfg)?;
        }
        ns(&mut l, if v6 { &syn6 } else { &syn }, 1, tx)?;
        est_progs.push((row, l, v6));
    }
    // The MAC filter's cost: the same flows with the own-MAC table empty
    // (the filter off: one load and a compare), measured in the same
    // rounds as the rows above.
    for (row, v6) in [
        ("mh, own-MAC filter off", false),
        ("IPv6, mh, own-MAC filter off", true),
    ] {
        let mut l = director_of(Object::Director, "mh", table, v6)?;
        l.set_own_macs(&rvs_xdp::own_mac::OwnMacs::new())?;
        ns(&mut l, if v6 { &syn6 } else { &syn }, 1, tx)?;
        est_progs.push((row, l, v6));
    }
    let mut floor_tx = Vec::new();
    let mut floor_hit = Vec::new();
    let mut est: Vec<Vec<f64>> = vec![Vec::new(); est_progs.len()];
    for _ in 0..rounds {
        floor_tx.push(ns(&mut tx_prog, &ack, repeat, tx)?);
        floor_hit.push(ns(&mut hit_prog, &ack, repeat, tx)?);
        for (i, (s, l, v6)) in est_progs.iter_mut().enumerate() {
            let (syn, ack) = if *v6 { (&syn6, &ack6) } else { (&syn, &ack) };
            if s.contains("miss") {
                ns(l, syn, 1, tx)?;
            }
            est[i].push(ns(l, ack, repeat, tx)?);
        }
    }
    drop((tx_prog, hit_prog));
    let floor_tx = median(&mut floor_tx);
    let floor_hit = median(&mut floor_hit);
    let est: Vec<(&str, f64)> = est_progs
        .iter()
        .map(|(s, _, _)| *s)
        .zip(est.iter_mut().map(|v| median(v)))
        .collect();
    drop(est_progs);

    println!(
        "BPF_PROG_TEST_RUN, repeat {repeat}, flow table {table} entries, {SERVERS} DR real servers, established: median of {rounds}; established rows: one flow repeated on one CPU = a flow-cache hit"
    );
    println!("| path | ns/packet | ratio |");
    println!("|---|---|---|");
    println!("| floor: XDP_TX only | {floor_tx:.0} | 1.00 × XDP_TX |");
    println!(
        "| floor: bare parse + LRU hit | {floor_hit:.0} | {:.2} × XDP_TX |",
        floor_hit / floor_tx
    );
    for (s, v) in &est {
        println!(
            "| established flow ({s}) | {v:.0} | {:.2} × XDP_TX, {:.2} × parse + LRU hit |",
            v / floor_tx,
            v / floor_hit
        );
    }
    many_flows(&ack, &syn, repeat, table, rounds)?;
    if established_only {
        return Ok(());
    }
    tunnels(&syn, &ack, repeat.min(TUNNEL_CALLS), table, rounds)?;

    let mut lru = Loaded::load(
        Object::BenchLru,
        &LoadOptions {
            flow_table_size: table,
            slots: 1,
            ..LoadOptions::default()
        },
    )?;
    let lru_fill = ns(&mut lru, &syn, repeat, tx)?;
    let lru_full = ns(&mut lru, &syn, repeat, tx)?;
    drop(lru);

    // Each new-flow row is the median of `rounds` fresh loads (one load's
    // figure moves with the LRU's state and the machine's noise).
    let mut newf = Vec::new();
    for sched in ["mh", "rr", "wlc", "twos", "lblc", "lblcr"] {
        let (mut fills, mut fulls) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut l = director(Object::DirectorBench, sched, table)?;
            fills.push(ns(&mut l, &syn, repeat, tx)?);
            fulls.push(ns(&mut l, &syn, repeat, tx)?);
        }
        newf.push((sched, median(&mut fills), median(&mut fulls)));
    }
    // The SYN-flood guard on (limit 1 new flow per CPU per second): mh flows
    // of DR services are forwarded by the hash without a flow entry.
    // The median of `rounds` fresh loads, like the rows above.
    let mut guards = Vec::new();
    for _ in 0..rounds {
        let mut l = director(Object::DirectorBench, "mh", table)?;
        l.set_config(&Config {
            max_new_flows: 1,
            ..Config::ipvs_defaults()
        })?;
        guards.push(ns(&mut l, &syn, repeat, tx)?);
    }
    let guarded = median(&mut guards);

    println!("| floor: bare LRU insert, filling | {lru_fill:.0} | |");
    println!("| floor: bare LRU insert, full (evicting) | {lru_full:.0} | |");
    for (s, fill, full) in &newf {
        println!(
            "| new flow ({s}), filling | {fill:.0} | {:.2} × bare LRU insert |",
            fill / lru_fill
        );
        println!(
            "| new flow ({s}), full (evicting) | {full:.0} | {:.2} × bare LRU insert |",
            full / lru_full
        );
    }
    println!(
        "| new flow (mh), SYN-flood guard on (no insert) | {guarded:.0} | {:.2} × bare LRU insert (full) |",
        guarded / lru_full
    );
    Ok(())
}

/// The client address of key `i` of the cycling builds.
fn cycle_client(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(CYCLE_BASE + i)
}

/// A step through `n` keys that visits all of them and puts successive runs
/// far apart: the coprime of `n` nearest above n / golden ratio.
fn cycle_stride(n: u32) -> u32 {
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
fn many_flows(
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
        let mut lru = Loaded::load(
            Object::BenchLruCycle,
            &LoadOptions {
                flow_table_size: table,
                slots: 1,
                ..LoadOptions::default()
            },
        )?;
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

/// Most single-run calls per round of the tunnel table in a full run.
const TUNNEL_CALLS: u32 = 20_000;

/// The GUE destination port of the tunnel rows.
const GUE_PORT: u16 = 6080;

/// Outer source address of the tunnel rows' IPv4 tunnels.
const TUN_SRC4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// [`director`] (mh) with every real server on `method` (a [`maps::fwd`]
/// tunnel or DR) and `flags` ([`maps::dest_flags::TUN_CSUM`]).
fn tunnel_director(method: u8, flags: u32, table: u32) -> Result<Loaded, Box<dyn Error>> {
    let mut l = director(Object::Director, "mh", table)?;
    let mut cfg = Config::ipvs_defaults();
    cfg.tun_src4 = TUN_SRC4.octets();
    l.set_config(&cfg)?;
    for i in 0..SERVERS {
        l.set_dest(
            i as u32,
            &Dest {
                addr: maps::addr16(IpAddr::V4(Ipv4Addr::new(10, 77, 1, i as u8 + 1))),
                family: maps::AF_INET,
                method,
                flags,
                weight: 1,
                mac: DIR_MAC,
                gue_port: GUE_PORT.to_be(),
                ..Dest::default()
            },
        )?;
    }
    Ok(l)
}

/// Mean ns of one run over `calls` BPF_PROG_TEST_RUN calls of one run
/// each (repeat 1: each call starts from a fresh copy of `f`), as the
/// kernel timed each run, checking every call's action.
fn single_runs(l: &mut Loaded, f: &[u8], calls: u32, want: u32) -> Result<f64, Box<dyn Error>> {
    let mut sum = 0.0;
    for _ in 0..calls {
        sum += ns(l, f, 1, want)?;
    }
    Ok(sum / f64::from(calls.max(1)))
}

/// The tunnel table: an established flow's ACK forwarded DR, IPIP, GUE,
/// GRE, GRE with its checksum and Geneve, in one run, ratios to DR.
///
/// A repeated BPF_PROG_TEST_RUN cannot measure an encapsulation: for XDP
/// the kernel (net/bpf/test_run.c, `bpf_test_run`) runs the program
/// `repeat` times on the same buffer, so the second run sees the first
/// run's output (an outer header to a real server: passed, or encapsulated
/// again until the headroom is spent), and the live-frames mode
/// (`BPF_F_TEST_XDP_LIVE_FRAMES`) resets only the buffer's pointers, not
/// the bytes the program wrote, and sends XDP_TX frames out of the ingress
/// device. So each figure here is one run per call (repeat 1: the kernel
/// copies the frame in afresh for every call) timed by the kernel (its
/// `ktime_get_ns` pair around that run), summed over `calls` calls; the
/// per-run overhead that timing adds (the clock reads, `local_bh_*`, the
/// dispatcher) is the bare XDP_TX program measured the same way in the
/// same round and subtracted ("net" columns). A round interleaves the
/// programs, 500 calls each in turn, so the machine's noise falls on all
/// rows alike. Every call's action is
/// checked (XDP_TX), and each row's output once (the outer header's
/// length). Median of `rounds` rounds taken in turn. The DR row is also
/// given by the repeated method, for comparison.
fn tunnels(
    syn: &[u8],
    ack: &[u8],
    calls: u32,
    table: u32,
    rounds: usize,
) -> Result<(), Box<dyn Error>> {
    use maps::dest_flags::TUN_CSUM;
    let tx = rvs_xdp::action::TX;
    let udp = 8;
    let rows: [(&str, u8, u32, usize); 6] = [
        ("DR", maps::fwd::DR, 0, 0),
        ("IPIP", maps::fwd::TUN_IPIP, 0, 20),
        ("GUE", maps::fwd::TUN_GUE, 0, 20 + udp + maps::GUE_HDR_LEN),
        ("GRE", maps::fwd::TUN_GRE, 0, 20 + maps::GRE_HDR_LEN),
        (
            "GRE + checksum",
            maps::fwd::TUN_GRE,
            TUN_CSUM,
            20 + maps::GRE_HDR_LEN + maps::GRE_CSUM_LEN,
        ),
        (
            "Geneve",
            maps::fwd::TUN_GENEVE,
            0,
            20 + udp + maps::GENEVE_HDR_LEN,
        ),
    ];
    let mut floor = Loaded::load(Object::BenchTx, &LoadOptions::default())?;
    let mut progs = Vec::new();
    for (name, method, flags, outer) in rows {
        let mut l = tunnel_director(method, flags, table)?;
        ns(&mut l, syn, 1, tx)?;
        let r = l.run_on(ack, 1, INGRESS)?;
        if r.action != tx || r.data.len() != ack.len() + outer {
            return Err(format!(
                "{name}: action {} and {} bytes out of {}, not XDP_TX and {} more",
                r.action,
                r.data.len(),
                ack.len(),
                outer
            )
            .into());
        }
        progs.push((name, l));
    }
    let mut floor_v = Vec::new();
    let mut v: Vec<Vec<f64>> = vec![Vec::new(); progs.len()];
    let mut dr_repeat = Vec::new();
    let mut tx_repeat = Vec::new();
    // Each round interleaves the programs in slices of `SLICE` calls, so
    // a burst of other work on the machine falls on all rows alike.
    const SLICE: u32 = 500;
    let slices = calls.div_ceil(SLICE);
    let calls = slices * SLICE;
    for _ in 0..rounds {
        let mut floor_sum = 0.0;
        let mut sums = vec![0.0; progs.len()];
        for _ in 0..slices {
            floor_sum += single_runs(&mut floor, ack, SLICE, tx)?;
            for (i, (_, l)) in progs.iter_mut().enumerate() {
                sums[i] += single_runs(l, ack, SLICE, tx)?;
            }
        }
        floor_v.push(floor_sum / f64::from(slices));
        for (i, sum) in sums.iter().enumerate() {
            v[i].push(sum / f64::from(slices));
        }
        tx_repeat.push(ns(&mut floor, ack, calls, tx)?);
        dr_repeat.push(ns(&mut progs[0].1, ack, calls, tx)?);
    }
    let floor_m = median(&mut floor_v);
    let got: Vec<(&str, f64)> = progs
        .iter()
        .map(|(n, _)| *n)
        .zip(v.iter_mut().map(|x| median(x)))
        .collect();
    let dr_net = got[0].1 - floor_m;
    println!();
    println!(
        "Tunnels: an established flow's 64-byte ACK, mh, {SERVERS} real servers, flow table {table}; one run per BPF_PROG_TEST_RUN call (repeat 1, a fresh frame each), {calls} calls per round, median of {rounds} rounds; net = minus the bare XDP_TX program timed the same way"
    );
    println!("| path | ns/packet as timed | net ns/packet | net ratio to DR |");
    println!("|---|---|---|---|");
    println!("| floor: XDP_TX only, one run per call | {floor_m:.0} | 0 | |");
    for (name, t) in &got {
        let net = t - floor_m;
        println!(
            "| established flow, {name} | {t:.0} | {net:.0} | {:.2} × DR |",
            net / dr_net
        );
    }
    let (txr, drr) = (median(&mut tx_repeat), median(&mut dr_repeat));
    println!(
        "| (DR by the repeated method: {calls} runs on one buffer) | {drr:.0} | {:.0} (minus XDP_TX repeated, {txr:.0}) | |",
        drr - txr
    );
    Ok(())
}

/// The QUIC-LB service's port.
const QUIC_PORT: u16 = 443;

/// A UDP datagram client:`CPORT` -> `VIP`:[`QUIC_PORT`] with `payload`,
/// sent to the director's MAC.
fn udp_to_vip(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], DIR_MAC)
        .ipv4([10, 78, 0, 1], VIP.octets(), 64)
        .udp(CPORT, QUIC_PORT)
        .write(&mut out, payload)
        .expect("frame");
    out
}

/// [`director`] (mh, `SERVERS` DR real servers) with its service also on
/// UDP `VIP`:[`QUIC_PORT`]: a plain UDP service (`services`, scheduled
/// once per flow, then the flow table) or, with `quic_lb`, a QUIC-LB one
/// (`quic_services`, the tail-called `xdp_quic`) with the frame tests'
/// three configurations (plaintext, single-pass, four-pass) and server
/// IDs `SIDS` on the first three real servers.
fn quic_director(table: u32, quic_lb: bool) -> Result<Loaded, Box<dyn Error>> {
    use rvs_xdp::quic_lb::{QuicCfg, QuicSidKey, QuicSvc};
    let mut l = director(Object::Director, "mh", table)?;
    let key = SvcKey::new(maps::PROTO_UDP, VIP.into(), QUIC_PORT);
    if !quic_lb {
        l.set_service(&key, 0)?;
        return Ok(l);
    }
    l.set_quic_service(&key, 0)?;
    let k = &quic_frames::KEY;
    l.set_quic_lb(
        0,
        &QuicSvc::new(&[
            (0, QuicCfg::new(3, 5, None)),
            (1, QuicCfg::new(3, 13, Some(k))),
            (2, QuicCfg::new(3, 6, Some(k))),
        ]),
    )?;
    for (i, sid) in quic_frames::SIDS.iter().enumerate() {
        let sk = QuicSidKey::new(0, sid).ok_or("server ID key")?;
        l.set_quic_sid(&sk, i as u32)?;
    }
    Ok(l)
}

/// The QUIC-LB table: a 1-RTT (short header) datagram to a QUIC-LB service
/// routed by a plaintext CID, by a single-pass AES-128 CID, and one whose
/// DCID does not decode (codepoint 7: no configuration) routed by the DCID
/// hash, beside a plain UDP flow of the same size to the same VIP (flow
/// table and flow cache), all DR with `SERVERS` real servers, in one run.
///
/// DR leaves the frame as it found it but for the destination MAC, which is
/// the director's own here ([`DIR_MAC`]), so the repeated method measures
/// it (each run sees the same datagram); QUIC-LB keeps no flow state, so
/// each run decodes the CID again. Each figure is the median of `rounds`
/// runs of `repeat` packets taken in turn; the QUIC-LB counters must
/// account for every packet on the path its row names.
fn quic(repeat: u32, table: u32, rounds: usize) -> Result<(), Box<dyn Error>> {
    use rvs_xdp::quic_lb::QuicStats;
    let tx = rvs_xdp::action::TX;
    let codecs = quic_frames::codecs();
    let sid = &quic_frames::SIDS[1];
    let plain = codecs[0].encode(sid, &[1, 2, 3, 4, 5], 0)?;
    let single = codecs[1].encode(sid, &[7; 13], 0)?;
    // The plaintext and single-pass CIDs are 9 and 17 octets: the fallback
    // row's DCID (codepoint 7: no configuration, so it does not decode; the
    // header parses, so it counts `by_fallback`) is 17 like the
    // single-pass one.
    let mut undecodable = [0u8; 17];
    undecodable[0] = 0xe0;
    let plain_p = quic_frames::short(plain.as_bytes());
    let single_p = quic_frames::short(single.as_bytes());
    let undec_p = quic_frames::short(&undecodable);
    // The plain UDP flow carries the longest of the datagrams.
    let udp_p = vec![0x40; single_p.len()];
    let rows: [(&str, Vec<u8>, bool); 4] = [
        (
            "plain UDP flow (no QUIC-LB), established",
            udp_to_vip(&udp_p),
            false,
        ),
        (
            "QUIC-LB, plaintext CID (9 octets)",
            udp_to_vip(&plain_p),
            true,
        ),
        (
            "QUIC-LB, single-pass AES CID (17 octets)",
            udp_to_vip(&single_p),
            true,
        ),
        (
            "QUIC-LB, DCID that does not decode -> DCID-hash fallback",
            udp_to_vip(&undec_p),
            true,
        ),
    ];
    let mut tx_prog = Loaded::load(Object::BenchTx, &LoadOptions::default())?;
    let mut progs = Vec::new();
    for (name, f, q) in &rows {
        let mut l = quic_director(table, *q)?;
        // The plain flow's first packet creates it (unmeasured).
        ns(&mut l, f, 1, tx)?;
        progs.push((*name, l, f));
    }
    let mut floor = Vec::new();
    let mut v: Vec<Vec<f64>> = vec![Vec::new(); progs.len()];
    for _ in 0..rounds {
        floor.push(ns(&mut tx_prog, &rows[0].1, repeat, tx)?);
        for (i, (_, l, f)) in progs.iter_mut().enumerate() {
            v[i].push(ns(l, f, repeat, tx)?);
        }
    }
    let n = 1 + rounds as u64 * u64::from(repeat);
    let want = [
        QuicStats::default(),
        QuicStats {
            by_cid: n,
            ..QuicStats::default()
        },
        QuicStats {
            by_cid: n,
            ..QuicStats::default()
        },
        QuicStats {
            by_cid: 0,
            by_fallback: n,
            undecodable: 0,
        },
    ];
    for ((name, l, _), w) in progs.iter_mut().zip(want) {
        let got = l.quic_stats(0)?;
        if got != w {
            return Err(format!("{name}: QUIC-LB counters {got:?}, not {w:?}").into());
        }
    }
    let floor = median(&mut floor);
    let got: Vec<(&str, f64)> = progs
        .iter()
        .map(|p| p.0)
        .zip(v.iter_mut().map(|x| median(x)))
        .collect();
    let base = got[0].1;
    println!();
    println!(
        "QUIC-LB: a {}-byte short-header datagram to UDP VIP:{QUIC_PORT}, DR, {SERVERS} real servers, mh, flow table {table}; repeat {repeat}, median of {rounds} rounds",
        rows[2].1.len()
    );
    println!("| path | ns/packet | ratio to the plain UDP flow | minus XDP_TX, ratio |");
    println!("|---|---|---|---|");
    println!("| floor: XDP_TX only | {floor:.0} | | |");
    for (name, t) in &got {
        println!(
            "| {name} | {t:.0} | {:.2} × | {:.2} × |",
            t / base,
            (t - floor) / (base - floor)
        );
    }
    Ok(())
}

/// The MAC of the FULLNAT/NAT bed's director link (`rvsa`).
const BED_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
/// The MAC of the clients' gateway in that bed.
const BED_GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
/// The real servers' port in the FULLNAT/NAT rows.
const BED_RPORT: u16 = 8080;

/// The namespace of the NAT and FULLNAT rows (BPF_PROG_TEST_RUN looks
/// routes up in the caller's namespace): the director's link `rvsa`
/// (10.77.0.2/24, the real servers' subnet, with permanent neighbours for
/// real servers 0 and 1 of [`common::rs_addr`]) and a route to the clients
/// (10.78.0.0/16) via a gateway with a permanent neighbour, as
/// tests/fnat.rs sets up. Deleted on drop.
fn nat_bed_netns() -> rvs_testbed::Netns {
    let ns = rvs_testbed::Netns::new("rvsxdp-bench");
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut cmds = vec![
        format!(
            "link add rvsa address {} type veth peer name rvsb",
            mac(BED_MAC)
        ),
        "link set rvsa up".to_owned(),
        "link set rvsb up".to_owned(),
        "addr add 10.77.0.2/24 dev rvsa".to_owned(),
        format!(
            "neigh add 10.77.0.254 lladdr {} dev rvsa nud permanent",
            mac(BED_GW_MAC)
        ),
        "route add 10.78.0.0/16 via 10.77.0.254".to_owned(),
    ];
    for i in 0..2u8 {
        cmds.push(format!(
            "neigh add {} lladdr {} dev rvsa nud permanent",
            common::rs_addr(false, i),
            mac(common::rs_mac(i))
        ));
    }
    for cmd in cmds {
        let mut args = vec!["ip", "-n", ns.name()];
        args.extend(cmd.split_whitespace());
        rvs_testbed::sh(&args);
    }
    ns.sysctl("ipv4/ip_forward", "1");
    ns
}

/// FULLNAT local address `i` of the bench's pool (10.77.0.(50+i)).
fn bench_laddr(i: u8) -> IpAddr {
    Ipv4Addr::new(10, 77, 0, 50 + i).into()
}

/// A director (run it inside [`nat_bed_netns`]) with service 0 on TCP
/// `VIP`:80, rr, to one real server (0) on port [`BED_RPORT`] by `method`
/// ([`maps::fwd::NAT`] or [`maps::fwd::FNAT`]; FULLNAT with a pool of two
/// local addresses, ports 1024-65535), flow table `table`. Reusable for
/// any FULLNAT or NAT row.
fn nat_bed_director(method: u8, table: u32) -> Result<common::Lb, Box<dyn Error>> {
    let mut l = Loaded::load(
        Object::Director,
        &LoadOptions {
            flow_table_size: table,
            slots: 8 * common::SLOT_REGION,
            embryonic_table_size: table,
        },
    )?;
    let mut cfg = Config::ipvs_defaults();
    cfg.flags = maps::CFG_F_NAT | maps::CFG_F_FNAT;
    l.set_config(&cfg)?;
    l.add_own_mac(INGRESS, DIR_MAC)?;
    l.add_own_mac(INGRESS, BED_MAC)?;
    let mut lb = common::Lb {
        l,
        core: Vec::new(),
    };
    let mut rs = common::Rs::new(common::rs_addr(false, 0), method, [0; 6]);
    rs.port = BED_RPORT;
    lb.service(0, SvcKey::new(PROTO_TCP, VIP.into(), 80), "rr", 0, &[rs]);
    if method == maps::fwd::FNAT {
        let mut pool = maps::FnatPool {
            count: 2,
            port_min: 1024,
            port_max: 65535,
            family: maps::AF_INET,
            ..maps::FnatPool::default()
        };
        for i in 0..2u8 {
            pool.addrs[usize::from(i)] = maps::addr16(bench_laddr(i));
            lb.l.add_fnat_laddr(bench_laddr(i))?;
        }
        lb.l.set_fnat_pool(0, &pool)?;
    }
    Ok(lb)
}

/// One established flow client 10.78.0.1:`cport` -> `VIP`:80 through
/// `lb` (SYN, the real server's SYN-ACK, the client's ACK: ESTABLISHED):
/// returns the client's next data packet and the real server's reply as
/// they reach the director (the reply from RS:[`BED_RPORT`] to what the
/// SYN's output frame was addressed from: the client, or FULLNAT's local
/// address and port).
fn nat_bed_flow(lb: &mut common::Lb, cport: u16) -> Result<(Vec<u8>, Vec<u8>), Box<dyn Error>> {
    use common::{Flags, tcp_frame_macs};
    let redirect = rvs_xdp::action::REDIRECT;
    let c: IpAddr = Ipv4Addr::new(10, 78, 0, 1).into();
    let (v, r) = (IpAddr::from(VIP), common::rs_addr(false, 0));
    let to_vip = |flags| {
        tcp_frame_macs(
            common::CLIENT_MAC,
            DIR_MAC,
            c,
            cport,
            v,
            80,
            flags,
            b"0123456789",
        )
    };
    let out = lb.l.run_on(&to_vip(Flags::Syn), 1, INGRESS)?;
    if out.action != redirect || out.data.len() < 38 {
        return Err(format!("SYN: action {} ({} bytes)", out.action, out.data.len()).into());
    }
    let d = &out.data;
    let src = IpAddr::from([d[26], d[27], d[28], d[29]]);
    let sport = u16::from_be_bytes([d[34], d[35]]);
    let reply = tcp_frame_macs(
        common::rs_mac(0),
        BED_MAC,
        r,
        BED_RPORT,
        src,
        sport,
        Flags::Ack,
        b"0123456789",
    );
    ns(&mut lb.l, &reply, 1, redirect)?;
    let ack = to_vip(Flags::Ack);
    ns(&mut lb.l, &ack, 1, redirect)?;
    let k = FlowKey::new(PROTO_TCP, c, cport, v, 80);
    match lb.l.flow(&k)? {
        Some(f) if f.state == TCP_ESTABLISHED => Ok((ack, reply)),
        other => Err(format!("flow after the handshake: {other:?}").into()),
    }
}

/// A TCP segment `src:sport -> dst:dport` between `macs`, sequence `seq`,
/// acknowledgment `ack` (None: no ACK flag), SYN or not; a SYN carries
/// the MSS option (1460), which FULLNAT's SYN-ACK path lowers by the TOA's
/// length.
fn hs_seg(
    macs: ([u8; 6], [u8; 6]),
    (src, sport): (IpAddr, u16),
    (dst, dport): (IpAddr, u16),
    (seq, ack, syn): (u32, Option<u32>, bool),
) -> Result<Vec<u8>, Box<dyn Error>> {
    let b = PacketBuilder::ethernet2(macs.0, macs.1);
    let b = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
        _ => return Err("mixed families".into()),
    };
    let mut t = b.tcp(sport, dport, seq, 65535);
    if syn {
        t = t.syn().options_raw(&[2, 4, 0x05, 0xb4])?;
    }
    if let Some(a) = ack {
        t = t.ack(a);
    }
    let mut out = Vec::new();
    t.write(&mut out, &[])?;
    Ok(out)
}

/// The handshake of a new flow client `c:cport` -> `VIP`:80 through `lb`:
/// its SYN and the real server's SYN-ACK (with MSS, sequence 7000) run
/// unmeasured; returns the client's ACK that completes it (sequence 1001,
/// acknowledging 7001: for FULLNAT the segment the armed TOA goes into),
/// not yet run.
fn nat_bed_handshake(
    lb: &mut common::Lb,
    c: IpAddr,
    cport: u16,
) -> Result<Vec<u8>, Box<dyn Error>> {
    let redirect = rvs_xdp::action::REDIRECT;
    let (v, r) = (IpAddr::from(VIP), common::rs_addr(false, 0));
    let cin = (common::CLIENT_MAC, DIR_MAC);
    let syn = hs_seg(cin, (c, cport), (v, 80), (1000, None, true))?;
    let out = lb.l.run_on(&syn, 1, INGRESS)?;
    if out.action != redirect || out.data.len() < 38 {
        return Err(format!("SYN: action {} ({} bytes)", out.action, out.data.len()).into());
    }
    let d = &out.data;
    let src = IpAddr::from([d[26], d[27], d[28], d[29]]);
    let sport = u16::from_be_bytes([d[34], d[35]]);
    let synack = hs_seg(
        (common::rs_mac(0), BED_MAC),
        (r, BED_RPORT),
        (src, sport),
        (7000, Some(1001), true),
    )?;
    ns(&mut lb.l, &synack, 1, redirect)?;
    hs_seg(cin, (c, cport), (v, 80), (1001, Some(7001), false))
}

/// The FULLNAT table: an established FULLNAT flow's client packet (to the
/// VIP; its pair recorded in the flow entry, so `xdp_lb` rewrites it
/// without the tail call into `xdp_fnat`) and its reply (RS to the local
/// address), beside the NAT path's established packet and reply, a new
/// flow's SYN both ways (FULLNAT: the pool's port allocation) and the ACK
/// that completes a new flow's handshake both ways (FULLNAT: the TOA
/// inserted), TCP over IPv4, in one run inside a namespace with the routes
/// the FIB lookups need.
///
/// NAT and FULLNAT rewrite the frame, so, as in [`tunnels`], each figure
/// is one run per BPF_PROG_TEST_RUN call (a fresh frame each), the
/// kernel's timing summed over `calls` calls, minus the bare XDP_TX
/// program timed the same way; the rows interleave in slices of 500 calls;
/// median of `rounds` rounds. Every call's action is checked (REDIRECT).
/// The SYN rows send each call a SYN of a new client port (`calls` x
/// `rounds` distinct flows, so each is a new flow); `calls` is at most
/// 12000 / `rounds`. The handshake rows do the same with the ACK that
/// completes a new flow's handshake (its SYN and the real server's SYN-ACK
/// run unmeasured before each call: [`nat_bed_handshake`]): for FULLNAT the
/// segment that gets the TOA (checked: every one counted in
/// `toa_inserted`), for NAT the same segment rewritten as usual; both
/// promote the flow from the embryonic table.
fn fnat(calls: u32, rounds: usize) -> Result<(), Box<dyn Error>> {
    use common::{Flags, tcp_frame_macs};
    // At most 12000 new flows in all: the pool (2 addresses x 64512 ports
    // toward the one real server) stays below 10 % use, so the port
    // allocation's bounded probing finds a free pair at once, as on a
    // director whose pool is sized for its load (a fuller pool makes it
    // probe longer and then refuse: tests/fnat.rs shows exhaustion).
    let calls = calls.clamp(500, 12_000 / rounds.max(1) as u32);
    const SLICE: u32 = 500;
    let slices = calls.div_ceil(SLICE);
    let calls = slices * SLICE;
    let table = 1 << 18;
    let netns = nat_bed_netns();
    netns.run(move || -> Result<(), String> {
        let e = |e: Box<dyn Error>| e.to_string();
        let tx = rvs_xdp::action::TX;
        let redirect = rvs_xdp::action::REDIRECT;
        let mut floor = Loaded::load(Object::BenchTx, &LoadOptions::default()).map_err(|e| e.to_string())?;
        let mut est = Vec::new();
        for (name, method) in [("NAT", maps::fwd::NAT), ("FULLNAT", maps::fwd::FNAT)] {
            let mut lb = nat_bed_director(method, table).map_err(e)?;
            let (ack, reply) = nat_bed_flow(&mut lb, 1000).map_err(e)?;
            est.push((name, lb, ack, reply));
        }
        // New flows: their own directors (so the established rows' tables
        // stay small), client ports 2000.. one per call.
        let c: IpAddr = Ipv4Addr::new(10, 78, 0, 2).into();
        let syns: Vec<Vec<u8>> = (0..calls * rounds as u32)
            .map(|i| {
                let (addr, port) = (i / 60000, 2000 + (i % 60000) as u16);
                let c = match c {
                    IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + addr)),
                    x => x,
                };
                tcp_frame_macs(common::CLIENT_MAC, DIR_MAC, c, port, VIP.into(), 80, Flags::Syn, b"")
            })
            .collect();
        let mut newf = Vec::new();
        for (name, method) in [("NAT", maps::fwd::NAT), ("FULLNAT", maps::fwd::FNAT)] {
            newf.push((name, nat_bed_director(method, table).map_err(e)?));
        }
        // Handshakes: their own directors too, clients 10.78.1.0.. (one
        // flow per call, as for the SYN rows).
        let mut hs = Vec::new();
        for (name, method) in [("NAT", maps::fwd::NAT), ("FULLNAT", maps::fwd::FNAT)] {
            hs.push((name, nat_bed_director(method, table).map_err(e)?));
        }
        let hs_client = |i: u32| -> (IpAddr, u16) {
            let a = u32::from(Ipv4Addr::new(10, 78, 1, 0)) + i / 60000;
            (Ipv4Addr::from(a).into(), 2000 + (i % 60000) as u16)
        };
        // floor, 4 established rows, 2 new-flow rows, 2 handshake rows.
        let mut v: Vec<Vec<f64>> = vec![Vec::new(); 9];
        let mut next_syn = 0usize;
        for _ in 0..rounds {
            let mut sums = [0.0f64; 9];
            for _ in 0..slices {
                sums[0] += single_runs(&mut floor, &est[0].2, SLICE, tx).map_err(e)?;
                for (i, (name, lb, ack, reply)) in est.iter_mut().enumerate() {
                    sums[1 + 2 * i] += single_runs(&mut lb.l, ack, SLICE, redirect)
                        .map_err(|x| format!("{name} established: {x}"))?;
                    sums[2 + 2 * i] += single_runs(&mut lb.l, reply, SLICE, redirect)
                        .map_err(|x| format!("{name} reply: {x}"))?;
                }
                for (i, (name, lb)) in newf.iter_mut().enumerate() {
                    let mut sum = 0.0;
                    for f in &syns[next_syn..next_syn + SLICE as usize] {
                        sum += ns(&mut lb.l, f, 1, redirect)
                            .map_err(|x| format!("{name} new flow: {x}"))?;
                    }
                    sums[5 + i] += sum / f64::from(SLICE);
                }
                for (i, (name, lb)) in hs.iter_mut().enumerate() {
                    let mut sum = 0.0;
                    for k in next_syn..next_syn + SLICE as usize {
                        let (c, cport) = hs_client(k as u32);
                        let ack = nat_bed_handshake(lb, c, cport)
                            .map_err(|x| format!("{name} handshake: {x}"))?;
                        sum += ns(&mut lb.l, &ack, 1, redirect)
                            .map_err(|x| format!("{name} handshake ACK: {x}"))?;
                    }
                    sums[7 + i] += sum / f64::from(SLICE);
                }
                next_syn += SLICE as usize;
            }
            for (i, s) in sums.iter().enumerate() {
                v[i].push(s / f64::from(slices));
            }
        }
        for (name, lb) in &mut newf {
            let st = lb.l.svc_stats(0).map_err(|e| e.to_string())?;
            if st.conns != syns.len() as u64 {
                return Err(format!("{name} new flows: {} connections, not {}", st.conns, syns.len()));
            }
        }
        if let Some((_, lb)) = newf.get_mut(1) {
            let fs = lb.l.fnat_stats(0).map_err(|e| e.to_string())?;
            if fs.allocated != syns.len() as u64 || fs.exhausted != 0 {
                return Err(format!("FULLNAT new flows: pool stats {fs:?}"));
            }
        }
        // The established FULLNAT row took xdp_lb's own rewrite: its flow
        // has its pair recorded (bpf/lib/fnat.h, fnat_established).
        if let Some((_, lb, _, _)) = est.get_mut(1) {
            let k = FlowKey::new(PROTO_TCP, Ipv4Addr::new(10, 78, 0, 1).into(), 1000, VIP.into(), 80);
            let f = lb.l.flow(&k).map_err(|e| e.to_string())?;
            if f.is_none_or(|f| f.fnat_lport == 0 || f.flags & maps::FLOW_F_TOA != 0) {
                return Err(format!("FULLNAT established flow without its pair recorded: {f:?}"));
            }
        }
        // Every handshake made a connection and completed it (ESTABLISHED,
        // moved out of the embryonic table); every FULLNAT one had its
        // SYN-ACK's MSS lowered and its ACK got the TOA.
        let n = syns.len() as u64;
        for (name, lb) in &mut hs {
            let st = lb.l.svc_stats(0).map_err(|e| e.to_string())?;
            let (c, cport) = hs_client(0);
            let k = FlowKey::new(PROTO_TCP, c, cport, VIP.into(), 80);
            let state = lb.l.flow(&k).map_err(|e| e.to_string())?.map(|f| f.state);
            if st.conns != n || state != Some(TCP_ESTABLISHED) {
                return Err(format!(
                    "{name} handshakes: {} connections, not {n}; first flow's state {state:?}",
                    st.conns
                ));
            }
        }
        if let Some((_, lb)) = hs.get_mut(1) {
            let fs = lb.l.fnat_stats(0).map_err(|e| e.to_string())?;
            if fs.toa_inserted != n || fs.mss_clamped != n || fs.toa_noroom + fs.toa_mtu + fs.toa_error != 0 {
                return Err(format!("FULLNAT handshakes: TOA counters {fs:?}, not {n} inserted"));
            }
        }
        let m: Vec<f64> = v.iter_mut().map(|x| median(x)).collect();
        let net = |i: usize| m[i] - m[0];
        println!();
        println!(
            "FULLNAT and NAT: TCP over IPv4, one real server, rr, flow table {table}; one run per BPF_PROG_TEST_RUN call (repeat 1, a fresh frame each), {calls} calls per row per round, median of {rounds} rounds; net = minus the bare XDP_TX program timed the same way"
        );
        println!("| path | ns/packet as timed | net ns/packet | net ratio FULLNAT / NAT |");
        println!("|---|---|---|---|");
        println!("| floor: XDP_TX only, one run per call | {:.0} | 0 | |", m[0]);
        let rows = [
            ("established, client -> VIP", 1, 3),
            ("established, reply RS -> client / local address", 2, 4),
            ("new flow SYN (FULLNAT: port allocation)", 5, 6),
            ("handshake-completing ACK (FULLNAT: TOA inserted)", 7, 8),
        ];
        for (what, n, f) in rows {
            println!("| NAT {what} | {:.0} | {:.0} | |", m[n], net(n));
            println!("| FULLNAT {what} | {:.0} | {:.0} | {:.2} × NAT |", m[f], net(f), net(f) / net(n));
        }
        Ok(())
    })?;
    Ok(())
}
