//! The bench-only cycling builds of the director (bpf/bench_cycle.h, used
//! by the many-flows rows of examples/xdp_bench.rs): every run takes the
//! next client address of the cycle, in the fast path and the general path
//! alike; the cache-miss build writes entries that are never valid; and
//! none of it is in the production object.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::*;
use object::{Object as _, ObjectSymbol};
use rvs_xdp::maps::{self, Flow4Key, FlowKey, PROTO_TCP, SvcKey, fwd};
use rvs_xdp::{Object, action};

const VPORT: u16 = 80;
const CPORT: u16 = 40000;

/// Key `i` of the cycle (RVS_BENCH_CYCLE_BASE + i).
fn key_client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn key(i: u32) -> FlowKey {
    FlowKey::new(PROTO_TCP, key_client(i), CPORT, vip(false), VPORT)
}

/// The symbol names of an object's ELF file.
fn symbols(object: Object) -> Option<Vec<String>> {
    let bytes = match object.bytes() {
        Ok(b) => b,
        Err(e) => {
            rvs_testbed::skip_or_fail(&format!("symbols of {object:?}"), e);
            return None;
        }
    };
    let elf = object::File::parse(bytes).expect("object parses");
    Some(
        elf.symbols()
            .filter_map(|s| s.name().ok().map(str::to_owned))
            .collect(),
    )
}

#[test]
fn production_director_has_no_benchmark_map() {
    let Some(prod) = symbols(Object::Director) else {
        return;
    };
    for bench in ["bench_cycle", "bench_seq"] {
        assert!(
            !prod.iter().any(|s| s == bench),
            "the production director has `{bench}`"
        );
    }
    // The check can see the maps where they are.
    for object in [
        Object::DirectorCycle,
        Object::DirectorCycleMiss,
        Object::BenchLruCycle,
    ] {
        let syms = symbols(object).expect("built like the director");
        assert!(
            syms.iter().any(|s| s == "bench_cycle"),
            "{object:?} has no bench_cycle map"
        );
    }
}

fn cycling_lb(test: &str, object: Object) -> Option<Lb> {
    let mut lb = Lb::with_object(test, object)?;
    let rs: Vec<Rs> = (1..=4)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
        .collect();
    lb.service(0, SvcKey::new(PROTO_TCP, vip(false), VPORT), "mh", 0, &rs);
    // A repeated test run runs on the previous run's output, sent to a real
    // server's MAC: owned too, so every run is a frame to the director.
    for i in 1..=4 {
        lb.l.add_own_mac(INGRESS, rs_mac(i)).expect("own MAC");
    }
    Some(lb)
}

#[test]
fn cycle_build_gives_each_run_the_next_client_by_the_stride() {
    let Some(mut lb) = cycling_lb(
        "cycle_build_gives_each_run_the_next_client_by_the_stride",
        Object::DirectorCycle,
    ) else {
        return;
    };
    let own = client(false, 7);
    let syn = tcp_frame(own, CPORT, vip(false), VPORT, Flags::Syn, b"");
    let ack = tcp_frame(own, CPORT, vip(false), VPORT, Flags::Ack, b"");

    // Bad cycles are refused.
    assert!(lb.l.set_bench_cycle(4, 2).is_err(), "stride not coprime");
    assert!(lb.l.set_bench_cycle(4, 5).is_err(), "stride above n");
    assert!(
        lb.l.set_bench_cycle((1 << 24) + 1, 1).is_err(),
        "above 2^24"
    );

    // 5 keys, stride 2: runs take keys 0, 2, 4, 1, 3.
    lb.l.set_bench_cycle(5, 2).unwrap();
    assert_eq!(lb.l.run_on(&syn, 3, INGRESS).unwrap().action, action::TX);
    let present: Vec<bool> = (0..5)
        .map(|i| lb.l.flow(&key(i)).unwrap().is_some())
        .collect();
    assert_eq!(present, [true, false, true, false, true]);
    assert!(
        lb.l.flow(&FlowKey::new(PROTO_TCP, own, CPORT, vip(false), VPORT))
            .unwrap()
            .is_none()
    );
    lb.l.run_on(&syn, 2, INGRESS).unwrap();
    assert!((0..5).all(|i| lb.l.flow(&key(i)).unwrap().is_some()));
    assert_eq!(lb.l.svc_stats(0).unwrap().conns, 5);

    // The ACKs of the general path (SYN_RECV -> ESTABLISHED) ...
    lb.l.run_on(&ack, 5, INGRESS).unwrap();
    for i in 0..5 {
        assert_eq!(lb.l.flow(&key(i)).unwrap().unwrap().state, 1, "key {i}");
    }
    // ... and of the fast path: ten more, every one forwarded to the
    // flow's real server.
    let r = lb.l.run_on(&ack, 10, INGRESS).unwrap();
    assert_eq!(r.action, action::TX);
    assert_eq!(lb.l.svc_stats(0).unwrap().inpkts, 20);
    assert_eq!(lb.l.svc_stats(0).unwrap().conns, 5);
    // The last run took key 3 (run 20 of the cycle 0, 2, 4, 1, 3): the frame
    // left for that flow's real server, with the key's address.
    let d = lb.l.flow(&key(3)).unwrap().unwrap().dest;
    let p = (d - Lb::dest_index(0, 0)) as u8 + 1;
    assert_eq!(r.data[0..6], rs_mac(p));
    assert_eq!(r.data[26..30], [10, 0, 0, 3]);

    // Cycle off: the frame's own client again. Its ACK has no flow; the
    // service is hash-scheduled (mh), so the program adopts it mid-flow
    // (forwarded by the hash, issue 14) instead of passing it.
    lb.l.set_bench_cycle(0, 0).unwrap();
    assert_eq!(lb.l.run_on(&ack, 1, INGRESS).unwrap().action, action::TX);
    lb.l.run_on(&syn, 1, INGRESS).unwrap();
    assert!(
        lb.l.flow(&FlowKey::new(PROTO_TCP, own, CPORT, vip(false), VPORT))
            .unwrap()
            .is_some()
    );
}

/// Both cycling builds fill this CPU's cache entry on an established ACK
/// that missed it; the cache-miss build's entry is already too old to
/// serve, the other's is fresh (and serves the next packet).
#[test]
fn cache_miss_build_fills_entries_that_never_serve() {
    let test = "cache_miss_build_fills_entries_that_never_serve";
    if !root_or_skip(test) {
        return;
    }
    let cpu = 0;
    assert!(pin_to_cpu(cpu), "no CPU 0");
    for (object, fresh) in [
        (Object::DirectorCycle, true),
        (Object::DirectorCycleMiss, false),
    ] {
        let mut lb = cycling_lb(test, object).expect("root");
        let own = client(false, 7);
        let syn = tcp_frame(own, CPORT, vip(false), VPORT, Flags::Syn, b"");
        let ack = tcp_frame(own, CPORT, vip(false), VPORT, Flags::Ack, b"");
        lb.l.set_bench_cycle(1, 0).unwrap();
        lb.l.run_on(&syn, 1, INGRESS).unwrap();
        lb.l.run_on(&ack, 1, INGRESS).unwrap(); // ESTABLISHED, general path
        let before = rvs_xdp::jiffies_now().unwrap();
        assert_eq!(lb.l.run_on(&ack, 1, INGRESS).unwrap().action, action::TX);
        let after = rvs_xdp::jiffies_now().unwrap();
        let k4 = Flow4Key::of(&key(0)).unwrap();
        let e = lb.l.flow_cache(&k4).unwrap()[cpu];
        assert_eq!(e.key, k4, "{object:?}: the entry was written");
        if fresh {
            assert!(e.stamp >= before && e.stamp <= after, "{object:?}: {e:?}");
        } else {
            assert!(
                after - e.stamp >= maps::FLOW_CACHE_JIFFIES,
                "{object:?}: an entry that can serve: {e:?}, now {after}"
            );
        }
    }
}
