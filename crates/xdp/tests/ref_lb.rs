//! The wire benchmark's reference balancer (`bpf/ref_lb.c`) through
//! BPF_PROG_TEST_RUN: a SYN to the VIP gets one of its three real servers'
//! MAC (and the director's as source) and XDP_TX; every later packet of the
//! flow the same real server; flows spread over all three; anything else is
//! passed. The floor `ref_pass` passes everything. And the kernel's
//! run-time statistics (rvs-sys) count the runs.

mod common;

use std::collections::BTreeSet;

use common::{CLIENT_MAC, DIR_MAC, Flags, client, rs_mac, tcp_frame, udp_frame, vip};
use rvs_xdp::{LoadOptions, Loaded, Object, action, ref_lb};

const PORT: u16 = 80;

/// The reference program with one TCP service on VIP:80 (either family)
/// and real servers `rs_mac(0..3)`, or None (skipped: not root, no clang).
fn reference(test: &str) -> Option<Loaded> {
    if !common::root_or_skip(test) {
        return None;
    }
    let opts = LoadOptions {
        flow_table_size: 4096,
        ..LoadOptions::default()
    };
    let mut lb = match Loaded::load(Object::RefLb, &opts) {
        Ok(lb) => lb,
        Err(e) => {
            common::skip(test, e);
            return None;
        }
    };
    for v6 in [false, true] {
        ref_lb::set_vip(&mut lb, vip(v6), PORT, false).expect("vip");
    }
    for i in 0..ref_lb::REALS {
        ref_lb::set_real(&mut lb, i, rs_mac(i as u8)).expect("real");
    }
    Some(lb)
}

/// The real server (index) a forwarded frame went to; asserts XDP_TX, the
/// director's MAC as source, and the rest of the frame untouched.
fn forwarded(lb: &mut Loaded, frame: &[u8]) -> u8 {
    let r = lb.run(frame, 1).expect("test run");
    assert_eq!(r.action, action::TX, "XDP_TX");
    assert_eq!(&r.data[6..12], &DIR_MAC, "source MAC: the director's");
    assert_eq!(&r.data[12..], &frame[12..], "only the MACs change");
    (0..ref_lb::REALS as u8)
        .find(|&i| r.data[..6] == rs_mac(i))
        .unwrap_or_else(|| panic!("destination MAC {:02x?} is no real server's", &r.data[..6]))
}

#[test]
fn ref_lb_syn_gets_a_real_server_and_the_flow_keeps_it() {
    let Some(mut lb) = reference("ref_lb_syn_gets_a_real_server_and_the_flow_keeps_it") else {
        return;
    };
    // `ref_flows` is a per-CPU LRU (flows stay on their CPU with RSS): an
    // entry made on one CPU reads 0 on another, so a test thread that
    // migrated between a flow's packets saw real server 0 (a CI run did).
    // The flows' packets run on one CPU, as RSS keeps them.
    assert!(common::pin_to_cpu(0), "no CPU 0");
    for v6 in [false, true] {
        let mut used = BTreeSet::new();
        for i in 0..64u16 {
            let c = client(v6, u32::from(i));
            let syn = tcp_frame(c, 40000 + i, vip(v6), PORT, Flags::Syn, b"");
            let rs = forwarded(&mut lb, &syn);
            for flags in [Flags::Ack, Flags::Ack, Flags::Fin] {
                let f = tcp_frame(
                    c,
                    40000 + i,
                    vip(v6),
                    PORT,
                    flags,
                    b"GET / HTTP/1.0\r\n\r\n",
                );
                assert_eq!(
                    forwarded(&mut lb, &f),
                    rs,
                    "v6 {v6} flow {i} keeps its server"
                );
            }
            used.insert(rs);
        }
        assert_eq!(
            used.len(),
            3,
            "v6 {v6}: 64 flows over all three real servers"
        );
    }
}

#[test]
fn ref_lb_passes_what_is_not_a_service() {
    let Some(mut lb) = reference("ref_lb_passes_what_is_not_a_service") else {
        return;
    };
    let c = client(false, 1);
    for frame in [
        tcp_frame(c, 40000, vip(false), PORT + 1, Flags::Syn, b""),
        udp_frame(c, 40000, vip(false), PORT, b"x"),
        tcp_frame(c, 40000, client(false, 2), PORT, Flags::Syn, b""),
    ] {
        let r = lb.run(&frame, 1).expect("test run");
        assert_eq!(r.action, action::PASS);
        assert_eq!(r.data, frame, "passed untouched");
    }
    let mut arp = tcp_frame(c, 40000, vip(false), PORT, Flags::Syn, b"");
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(lb.run(&arp, 1).expect("test run").action, action::PASS);
    assert_eq!(&arp[..6], &DIR_MAC);
    assert_eq!(&arp[6..12], &CLIENT_MAC);
}

#[test]
fn ref_pass_passes_and_the_kernel_counts_its_runs() {
    let test = "ref_pass_passes_and_the_kernel_counts_its_runs";
    if !common::root_or_skip(test) {
        return;
    }
    let mut floor = match Loaded::load(Object::RefPass, &LoadOptions::default()) {
        Ok(l) => l,
        Err(e) => return common::skip(test, e),
    };
    let stats = match rvs_sys::bpf::RunTimeStats::enable() {
        Ok(s) => s,
        Err(e) => return common::skip(test, e),
    };
    let runs = || -> u64 {
        rvs_sys::bpf::program_stats()
            .iter()
            .filter(|p| p.xdp && p.name == "ref_pass")
            .map(|p| p.run_count)
            .sum()
    };
    let before = runs();
    let syn = tcp_frame(client(false, 1), 40000, vip(false), PORT, Flags::Syn, b"");
    for _ in 0..10 {
        assert_eq!(floor.run(&syn, 1).expect("test run").action, action::PASS);
    }
    assert!(
        runs() >= before + 10,
        "10 runs counted: {before} -> {}",
        runs()
    );
    drop(stats);
}
