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
//! (every insert evicts the least recently used entry); the rows with
//! the embryonic tables armed (any run of more than 4,096 SYNs arms them)
//! and unarmed (`max_new_flows` never reached). Last the "short
//! connections" table (see [`short`]); `new` as the fourth argument runs
//! these new-flow tables alone.

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
#[path = "../../tests/common/mod.rs"]
mod common;
use common::quic as quic_frames;

mod fnat;
mod many_flows;
mod quic;
mod short;
mod tunnels;

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
            ..LoadOptions::default()
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

/// A bare LRU floor program (`BenchLru`, `BenchLruHit`, `BenchLruCycle`)
/// with a flow table of `table` entries.
fn bench_lru(object: Object, table: u32) -> Result<Loaded, Box<dyn Error>> {
    let opts = LoadOptions {
        flow_table_size: table,
        slots: 1,
        ..LoadOptions::default()
    };
    Ok(Loaded::load(object, &opts)?)
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
        return tunnels::tunnels(&syn, &ack, repeat, table, rounds);
    }
    if mode.as_deref() == Some("quic") {
        return quic::quic(repeat, table, rounds);
    }
    if mode.as_deref() == Some("fnat") {
        return fnat::fnat(repeat, rounds);
    }
    let (syn6, ack6) = (frame_of(true, true), frame_of(false, true));
    let tx = rvs_xdp::action::TX;
    let new_only = mode.as_deref() == Some("new");
    if new_only {
        return new_flows(&syn, &ack, repeat, table, rounds);
    }

    // The established-flow figures and their floors: every program loaded
    // once, then measured `rounds` times in turn (a noisy neighbour hits
    // all of them alike), medians reported.
    let mut tx_prog = Loaded::load(Object::BenchTx, &LoadOptions::default())?;
    let mut hit_prog = bench_lru(Object::BenchLruHit, table)?;
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
    many_flows::many_flows(&ack, &syn, repeat, table, rounds)?;
    if established_only {
        return Ok(());
    }
    tunnels::tunnels(&syn, &ack, repeat.min(tunnels::TUNNEL_CALLS), table, rounds)?;
    new_flows(&syn, &ack, repeat, table, rounds)
}

/// The new-flow rows (bare LRU insert floors, each scheduler, the guard,
/// the embryonic tables unarmed) and the short-connections table.
fn new_flows(
    syn: &[u8],
    ack: &[u8],
    repeat: u32,
    table: u32,
    rounds: usize,
) -> Result<(), Box<dyn Error>> {
    let tx = rvs_xdp::action::TX;
    let mut lru = bench_lru(Object::BenchLru, table)?;
    let lru_fill = ns(&mut lru, syn, repeat, tx)?;
    let lru_full = ns(&mut lru, syn, repeat, tx)?;
    drop(lru);

    // Each new-flow row is the median of `rounds` fresh loads (one load's
    // figure moves with the LRU's state and the machine's noise).
    let mut newf = Vec::new();
    for sched in ["mh", "rr", "wlc", "twos", "lblc", "lblcr"] {
        let (mut fills, mut fulls) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut l = director(Object::DirectorBench, sched, table)?;
            fills.push(ns(&mut l, syn, repeat, tx)?);
            fulls.push(ns(&mut l, syn, repeat, tx)?);
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
        guards.push(ns(&mut l, syn, repeat, tx)?);
    }
    let guarded = median(&mut guards);
    // The embryonic tables never armed (max_new_flows never reached): the
    // SYN's flow goes to the flow table and the embryonic tables are not
    // looked up. The rows above arm them after 4,096 SYNs.
    let (mut ufills, mut ufulls) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut l = director(Object::DirectorBench, "mh", table)?;
        l.set_config(&Config {
            max_new_flows: u32::MAX,
            ..Config::ipvs_defaults()
        })?;
        ufills.push(ns(&mut l, syn, repeat, tx)?);
        ufulls.push(ns(&mut l, syn, repeat, tx)?);
    }
    let (ufill, ufull) = (median(&mut ufills), median(&mut ufulls));

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
    println!(
        "| new flow (mh), embryonic tables unarmed, filling | {ufill:.0} | {:.2} × bare LRU insert |",
        ufill / lru_fill
    );
    println!(
        "| new flow (mh), embryonic tables unarmed, full (evicting) | {ufull:.0} | {:.2} × bare LRU insert |",
        ufull / lru_full
    );
    short::short(syn, ack, table, rounds)?;
    Ok(())
}
