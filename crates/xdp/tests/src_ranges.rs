//! Client source ranges (Kubernetes' `loadBalancerSourceRanges`,
//! bpf/lib/src_range.h) through BPF_PROG_TEST_RUN: a new flow of a service
//! flagged with ranges is forwarded only for a client inside one of them;
//! one from outside is dropped and counted (`svc_flood.refused`); a service
//! without ranges on the same VIP is unaffected; IPv4 and IPv6. Needs root
//! (skips otherwise).

mod common;

use common::*;
use rvs_core::model::SourceRange;
use rvs_xdp::action;
use rvs_xdp::maps::{PROTO_TCP, SrcKey, SvcKey, fwd, svc_flags};

/// The service with ranges.
const RANGED: u16 = 80;
/// The one without, same VIP.
const OPEN: u16 = 81;

fn ranges(v6: bool) {
    let Some(mut lb) = Lb::new("src_ranges") else {
        return;
    };
    let rs = [Rs::new(rs_addr(v6, 0), fwd::DR, rs_mac(0))];
    let key = |port| SvcKey::new(PROTO_TCP, vip(v6), port);
    lb.service(0, key(RANGED), "rr", svc_flags::SRC_RANGES, &rs);
    lb.service(1, key(OPEN), "rr", 0, &rs);
    // Clients 10.78.1.0/24 (fd78::100/120), and one single address of
    // another block.
    let (inside, single, outside) = (client(v6, 0x0107), client(v6, 0x0209), client(v6, 0x0307));
    let block = SourceRange::new(client(v6, 0x0100), if v6 { 120 } else { 24 }).expect("range");
    let host = SourceRange::new(single, if v6 { 128 } else { 32 }).expect("range");
    for r in [block, host] {
        lb.l.set_src_range(&SrcKey::of(0, &r), true)
            .expect("src_ranges");
    }
    // Another service's range admits no one here.
    let other = SourceRange::new(outside, if v6 { 128 } else { 32 }).expect("range");
    lb.l.set_src_range(&SrcKey::of(1, &other), true)
        .expect("src_ranges");

    let syn = |c, port| tcp_frame(c, 40000, vip(v6), port, Flags::Syn, b"");
    for c in [inside, single] {
        let f = syn(c, RANGED);
        let r = lb.run(&f);
        assert_eq!(r.action, action::TX, "{c} is inside");
        assert_eq!(r.data, with_macs(&f, rs_mac(0), DIR_MAC));
    }
    let r = lb.run(&syn(outside, RANGED));
    assert_eq!(r.action, action::DROP, "{outside} is outside");
    assert_eq!(
        lb.flow_dest(PROTO_TCP, outside, 40000, vip(v6), RANGED),
        None,
        "no flow for a refused client"
    );
    assert_eq!(lb.l.svc_flood(0).expect("svc_flood").refused, 1);
    // The service without ranges takes every client.
    for c in [inside, outside] {
        let r = lb.run(&syn(c, OPEN));
        assert_eq!(r.action, action::TX, "{c} to the open service");
    }
    assert_eq!(lb.l.svc_flood(1).expect("svc_flood").refused, 0);

    // A range removed: its clients are refused from then on; the flow
    // already made goes on (established flows are not looked at).
    lb.l.set_src_range(&SrcKey::of(0, &block), false)
        .expect("src_ranges");
    let r = lb.run(&syn(client(v6, 0x0108), RANGED));
    assert_eq!(r.action, action::DROP, "the block is gone");
    let f = tcp_frame(inside, 40000, vip(v6), RANGED, Flags::Ack, b"data");
    assert_eq!(lb.run(&f).action, action::TX, "the established flow");
    assert_eq!(lb.l.svc_flood(0).expect("svc_flood").refused, 2);
}

#[test]
fn src_ranges_v4() {
    ranges(false);
}

#[test]
fn src_ranges_v6() {
    ranges(true);
}
