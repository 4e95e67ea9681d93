//! QUIC-LB through `rvsd --dataplane proxy`: connections survive client
//! migration when the service routes by connection ID, and break without.
//!
//! Three quinn servers on loopback issue QUIC-LB connection IDs with
//! rvs-quiclb's generator (server IDs 0a0001..0a0003). One rvsd carries two
//! UDP services over the same three servers: `quic` with `--quic-lb` and
//! each real server's `--quic-sid`, `plain` without (round robin over the
//! 4-tuple). For each service, clients connect one after another, exchange
//! data, then migrate (`Endpoint::rebind` to a new local UDP socket: a new
//! source port) and exchange again. The servers record which connection
//! (quinn's stable id) carried each payload, so the test asserts from their
//! side that every migrated QUIC-LB connection stayed on its server and
//! completed, and counts the plain service's broken migrations (> 0: with
//! four clients over three round-robin servers, every migrated flow is
//! scheduled to another server). The QUIC-LB counters are read back with
//! `rvsadm -Ln --quic-lb`. Plaintext, single-pass and four-pass configs.
//!
//! Loopback only; every wait is bounded (10 s a step, 3 s idle timeout for
//! the broken connections). The servers and clients are `quic_common`'s,
//! shared with the XDP namespace test (`quic_xdp.rs`).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};

use rvs_quiclb::Codec;

use crate::harness::Rvsd;
use crate::quic_common::{
    KEY, SIDS, Served, assert_kept, broken, cert, clients, codec, counters, server,
};

const CLIENTS: usize = 4;

fn local() -> StdUdpSocket {
    StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind")
}

fn run(spec: &str, codec: Codec) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let d = Rvsd::start_proxy("quic-lb", &[]);
    let cert = cert();
    let served: Served = Served::default();
    let _guard = rt.enter();
    let servers: Vec<(quinn::Endpoint, SocketAddr)> = SIDS
        .iter()
        .map(|s| {
            let socket = local();
            let addr = socket.local_addr().expect("addr");
            (server(&codec, s, &cert, socket, served.clone()), addr)
        })
        .collect();
    let port = |s: StdUdpSocket| s.local_addr().expect("addr").port();
    let quic_vip = SocketAddr::from(([127, 0, 0, 1], port(local())));
    let plain_vip = SocketAddr::from(([127, 0, 0, 1], port(local())));
    d.ok(&format!("-A -u {quic_vip} -s rr --quic-lb {spec}"));
    d.ok(&format!("-A -u {plain_vip} -s rr"));
    for ((_, addr), sid) in servers.iter().zip(SIDS) {
        d.ok(&format!("-a -u {quic_vip} -r {addr} -m --quic-sid {sid}"));
        d.ok(&format!("-a -u {plain_vip} -r {addr} -m"));
    }

    // One migration each: a new local port.
    let socket = |_: usize, _: usize| local();
    let quic = rt.block_on(clients(quic_vip, "q", &cert, CLIENTS, 1, &socket));
    let plain = rt.block_on(clients(plain_vip, "p", &cert, CLIENTS, 1, &socket));
    for (ep, _) in &servers {
        ep.close(0u32.into(), b"");
    }

    // From the servers' side: each QUIC-LB client's payloads were served
    // by one server, on one connection.
    assert_kept(spec, "q", &quic, &served);
    let broken = broken(spec, &plain);
    eprintln!(
        "{spec}: QUIC-LB {CLIENTS}/{CLIENTS} migrations kept; plain 4-tuple scheduling broke {broken}/{CLIENTS}"
    );
    assert!(
        broken > 0,
        "{spec}: plain UDP scheduling kept every migration: {plain:?}"
    );

    // The counters, as rvsadm lists them: the clients' Initials went by the
    // fallback, everything after by CID.
    let mut last = String::new();
    d.eventually("QUIC-LB counters in -Ln --quic-lb", || {
        last = d.ok("-Ln --quic-lb");
        counters(&last, quic_vip).is_some_and(|n| n[0] > 0 && n[1] > 0)
    });
    assert!(
        !last.contains(&plain_vip.to_string()),
        "only QUIC-LB services listed: {last}"
    );
    for sid in SIDS {
        assert!(last.contains(sid), "server IDs listed: {last}");
    }
    if let Some(k) = spec.split("key=").nth(1) {
        assert!(!last.contains(k), "the key is not listed: {last}");
        assert!(last.contains("key=fp:"), "{last}");
    }
    // -S saves the configs and server IDs; the rules restore.
    let saved = d.ok("-Sn");
    assert!(saved.contains(&format!("--quic-lb {spec}")), "{saved}");
    assert!(saved.contains("--quic-sid 0a0002"), "{saved}");
}

#[test]
fn quic_lb_plaintext_keeps_migrated_connections_on_their_servers() {
    run("cr=0,sid=3,nonce=6", codec(0, 3, 6, None));
}

#[test]
fn quic_lb_single_pass_keeps_migrated_connections_on_their_servers() {
    run(
        "cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f",
        codec(1, 3, 13, Some(KEY)),
    );
}

#[test]
fn quic_lb_four_pass_keeps_migrated_connections_on_their_servers() {
    run(
        "cr=2,sid=3,nonce=8,key=8f95f09245765f80256934e50c66207f",
        codec(2, 3, 8, Some(KEY)),
    );
}
