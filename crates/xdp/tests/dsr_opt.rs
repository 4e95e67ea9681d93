//! DSR by IP option through BPF_PROG_TEST_RUN: the director's insertion
//! (`--tun-type opt`, bpf/lib/dsr_opt.h) and the real server's node
//! programs (bpf/dsr_rs.c) that take the option out and send the replies
//! from the service. Every expected frame is built independently with
//! etherparse and rvs-wire's checksum, so a wrong checksum, length or
//! offset fails the byte comparison. Needs root (skips otherwise).

mod common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use etherparse::{PacketBuilder, TcpOptionElement};
use rvs_xdp::action;
use rvs_xdp::dsr_rs::{DsrKey, DsrRealServer, DsrSvc};
use rvs_xdp::maps::{self, PROTO_TCP, PROTO_UDP, SvcKey, dsr_opt, fwd};

const VPORT: u16 = 80;
/// The real server's (pod's) port: the director rewrites VPORT to it.
const BPORT: u16 = 8080;
const CPORT: u16 = 40123;
/// What the tc programs return for every packet: TC_ACT_UNSPEC (-1), TCX's
/// "next".
const TC_OK: u32 = u32::MAX;

/// A frame `src` -> `dst` (TCP with `flags` or UDP) with `payload`, from
/// `smac` to `dmac`, all checksums right (etherparse).
#[allow(clippy::too_many_arguments)]
fn frame(
    smac: [u8; 6],
    dmac: [u8; 6],
    proto: u8,
    src: SocketAddr,
    dst: SocketAddr,
    syn: bool,
    mss: Option<u16>,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(smac, dmac);
    let b = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
        _ => panic!("mixed families"),
    };
    let mut out = Vec::new();
    if proto == PROTO_TCP {
        let t = b.tcp(src.port(), dst.port(), 1000, 65535);
        let t = if syn { t.syn() } else { t.ack(1) };
        let t = match mss {
            Some(m) => t
                .options(&[TcpOptionElement::MaximumSegmentSize(m)])
                .expect("options"),
            None => t,
        };
        t.write(&mut out, payload).expect("frame");
    } else {
        b.udp(src.port(), dst.port())
            .write(&mut out, payload)
            .expect("frame");
    }
    out
}

/// `plain` (a frame without IP options) with the DSR option for `svc`
/// inserted after its IP header, the IP header fixed as the option needs.
fn with_option(plain: &[u8], svc: SocketAddr) -> Vec<u8> {
    let mut f = plain[..14].to_vec();
    match svc.ip() {
        IpAddr::V4(a) => {
            let mut ip = plain[14..34].to_vec();
            ip[0] = 0x47;
            let len = u16::from_be_bytes([ip[2], ip[3]]) + u16::from(dsr_opt::LEN4);
            ip[2..4].copy_from_slice(&len.to_be_bytes());
            ip.extend_from_slice(&[dsr_opt::TYPE4, dsr_opt::LEN4]);
            ip.extend_from_slice(&svc.port().to_be_bytes());
            ip.extend_from_slice(&a.octets());
            f.extend_from_slice(&ip);
            fix_ip4_csum(&mut f, 14);
            f.extend_from_slice(&plain[34..]);
        }
        IpAddr::V6(a) => {
            let mut ip = plain[14..54].to_vec();
            let next = ip[6];
            ip[6] = 60;
            let len = u16::from_be_bytes([ip[4], ip[5]]) + u16::from(dsr_opt::LEN6);
            ip[4..6].copy_from_slice(&len.to_be_bytes());
            f.extend_from_slice(&ip);
            f.extend_from_slice(&[
                next,
                dsr_opt::LEN6 / 8 - 1,
                dsr_opt::TYPE6,
                dsr_opt::OPTLEN6,
            ]);
            f.extend_from_slice(&a.octets());
            f.extend_from_slice(&svc.port().to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            f.extend_from_slice(&plain[54..]);
        }
    }
    f
}

struct Case {
    client: SocketAddr,
    service: SocketAddr,
    backend: SocketAddr,
}

fn case(v6: bool) -> Case {
    Case {
        client: SocketAddr::new(client(v6, 5), CPORT),
        service: SocketAddr::new(vip(v6), VPORT),
        backend: SocketAddr::new(rs_addr(v6, 4), BPORT),
    }
}

/// The director: the client's packet leaves for the real server's next hop
/// with the destination rewritten and the service in the option.
fn director(v6: bool, proto: u8) {
    let Some(mut lb) = Lb::new("dsr_opt director") else {
        return;
    };
    let c = case(v6);
    let mut rs = Rs::new(c.backend.ip(), fwd::TUN_OPT, rs_mac(4));
    rs.port = BPORT;
    lb.service(0, SvcKey::new(proto, vip(v6), VPORT), "rr", 0, &[rs]);
    let payload = b"the service address rides along";
    for syn in [true, false] {
        let f = frame(
            CLIENT_MAC, DIR_MAC, proto, c.client, c.service, syn, None, payload,
        );
        let r = lb.run(&f);
        assert_eq!(r.action, action::TX, "v6 {v6} proto {proto} syn {syn}");
        let plain = frame(
            DIR_MAC,
            rs_mac(4),
            proto,
            c.client,
            c.backend,
            syn,
            None,
            payload,
        );
        assert_eq!(
            r.data,
            with_option(&plain, c.service),
            "v6 {v6} proto {proto} syn {syn}"
        );
        if proto == PROTO_UDP {
            break;
        }
    }
}

#[test]
fn director_inserts_the_option_v4_tcp() {
    director(false, PROTO_TCP);
}

#[test]
fn director_inserts_the_option_v4_udp() {
    director(false, PROTO_UDP);
}

#[test]
fn director_inserts_the_option_v6_tcp() {
    director(true, PROTO_TCP);
}

#[test]
fn director_inserts_the_option_v6_udp() {
    director(true, PROTO_UDP);
}

/// A packet that would outgrow the MTU with the option is answered with
/// ICMP "fragmentation needed" / "packet too big" carrying the MTU minus
/// the option's length.
fn too_big(v6: bool) {
    let Some(mut lb) = Lb::new("dsr_opt too_big") else {
        return;
    };
    let mut cfg = maps::Config::ipvs_defaults();
    cfg.tun_mtu = 300;
    lb.l.set_config(&cfg).expect("config");
    let c = case(v6);
    let mut rs = Rs::new(c.backend.ip(), fwd::TUN_OPT, rs_mac(4));
    rs.port = BPORT;
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[rs]);
    let grow = if v6 { dsr_opt::LEN6 } else { dsr_opt::LEN4 };
    let hdr = if v6 { 40 } else { 20 };
    // Fits with the option: forwarded.
    let fits = 300 - hdr - 20 - usize::from(grow);
    let f = frame(
        CLIENT_MAC,
        DIR_MAC,
        PROTO_TCP,
        c.client,
        c.service,
        true,
        None,
        &vec![7; fits],
    );
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data.len(), f.len() + usize::from(grow));
    // One byte more (IPv4 with DF): ICMP back to the client.
    let mut f = frame(
        CLIENT_MAC,
        DIR_MAC,
        PROTO_TCP,
        c.client,
        c.service,
        false,
        None,
        &vec![7; fits + 1],
    );
    if !v6 {
        f[20] |= 0x40;
        fix_ip4_csum(&mut f, 14);
    }
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    assert_eq!(&r.data[0..6], &CLIENT_MAC, "back to the client");
    let (icmp, mtu) = if v6 {
        assert_eq!(r.data[20], 58, "ICMPv6");
        (
            &r.data[54..],
            u32::from_be_bytes([r.data[58], r.data[59], r.data[60], r.data[61]]),
        )
    } else {
        assert_eq!(r.data[23], 1, "ICMP");
        (
            &r.data[34..],
            u32::from(u16::from_be_bytes([r.data[40], r.data[41]])),
        )
    };
    assert_eq!(icmp[0], if v6 { 2 } else { 3 }, "too big / unreachable");
    assert_eq!(mtu, 300 - u32::from(grow));
}

#[test]
fn too_big_for_the_option_v4() {
    too_big(false);
}

#[test]
fn too_big_for_the_option_v6() {
    too_big(true);
}

fn real_server(test: &str) -> Option<DsrRealServer> {
    if !root_or_skip(test) {
        return None;
    }
    Some(DsrRealServer::load().expect("load the DSR real-server programs"))
}

/// The real server's node: ingress records the flow and strips the option
/// (the server gets exactly the plain packet), egress sends the reply from
/// the service.
fn node(v6: bool, proto: u8) {
    let Some(mut rs) = real_server("dsr_opt node") else {
        return;
    };
    let c = case(v6);
    let payload = b"question";
    let plain = frame(
        DIR_MAC,
        rs_mac(4),
        proto,
        c.client,
        c.backend,
        false,
        None,
        payload,
    );
    let r = rs
        .run_ingress(&with_option(&plain, c.service))
        .expect("run");
    assert_eq!(r.action, TC_OK);
    assert_eq!(r.data, plain, "v6 {v6} proto {proto}: the option taken out");
    let key = DsrKey::new(proto, c.client, c.backend);
    assert_eq!(rs.flow(&key).expect("flow"), Some(DsrSvc::new(c.service)));
    // A packet without the option passes untouched, recording nothing.
    let other = SocketAddr::new(client(v6, 6), CPORT);
    let plain2 = frame(
        DIR_MAC,
        rs_mac(4),
        proto,
        other,
        c.backend,
        false,
        None,
        payload,
    );
    let r = rs.run_ingress(&plain2).expect("run");
    assert_eq!((r.action, &r.data), (TC_OK, &plain2));
    assert_eq!(
        rs.flow(&DsrKey::new(proto, other, c.backend))
            .expect("flow"),
        None
    );
    // The reply leaves from the service, checksums right.
    let reply = b"answer";
    let f = frame(
        rs_mac(4),
        CLIENT_MAC,
        proto,
        c.backend,
        c.client,
        false,
        None,
        reply,
    );
    let r = rs.run_egress(&f).expect("run");
    assert_eq!(r.action, TC_OK);
    let want = frame(
        rs_mac(4),
        CLIENT_MAC,
        proto,
        c.service,
        c.client,
        false,
        None,
        reply,
    );
    assert_eq!(
        r.data, want,
        "v6 {v6} proto {proto}: the reply from the service"
    );
    // A reply to the other client (no flow) keeps the server's address.
    let f = frame(
        rs_mac(4),
        CLIENT_MAC,
        proto,
        c.backend,
        other,
        false,
        None,
        reply,
    );
    assert_eq!(rs.run_egress(&f).expect("run").data, f);
    let s = rs.stats().expect("stats");
    assert_eq!((s.stripped, s.replied, s.failed), (1, 1, 0));
}

#[test]
fn node_strips_and_replies_v4_tcp() {
    node(false, PROTO_TCP);
}

#[test]
fn node_strips_and_replies_v4_udp() {
    node(false, PROTO_UDP);
}

#[test]
fn node_strips_and_replies_v6_tcp() {
    node(true, PROTO_TCP);
}

#[test]
fn node_strips_and_replies_v6_udp() {
    node(true, PROTO_UDP);
}

/// The SYN-ACK leaves with its MSS lowered by the option's length (the
/// client's segments then fit once the director adds the option).
fn syn_ack_mss(v6: bool) {
    let Some(mut rs) = real_server("dsr_opt syn_ack_mss") else {
        return;
    };
    let c = case(v6);
    rs.insert_flow(
        DsrKey::new(PROTO_TCP, c.client, c.backend),
        DsrSvc::new(c.service),
    )
    .expect("flow");
    let f = frame(
        rs_mac(4),
        CLIENT_MAC,
        PROTO_TCP,
        c.backend,
        c.client,
        true,
        Some(1460),
        b"",
    );
    let r = rs.run_egress(&f).expect("run");
    let grow = if v6 { dsr_opt::LEN6 } else { dsr_opt::LEN4 };
    let want = frame(
        rs_mac(4),
        CLIENT_MAC,
        PROTO_TCP,
        c.service,
        c.client,
        true,
        Some(1460 - u16::from(grow)),
        b"",
    );
    assert_eq!(r.data, want);
    assert_eq!(rs.stats().expect("stats").mss, 1);
}

#[test]
fn syn_ack_mss_lowered_v4() {
    syn_ack_mss(false);
}

#[test]
fn syn_ack_mss_lowered_v6() {
    syn_ack_mss(true);
}

/// The director's output, through the node's ingress, is the packet the
/// client would have sent to the real server directly.
#[test]
fn director_then_node_is_the_plain_packet() {
    let Some(mut lb) = Lb::new("dsr_opt end to end") else {
        return;
    };
    let Some(mut rs) = real_server("dsr_opt end to end") else {
        return;
    };
    for v6 in [false, true] {
        let c = case(v6);
        let mut d = Rs::new(c.backend.ip(), fwd::TUN_OPT, rs_mac(4));
        d.port = BPORT;
        lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[d]);
        let f = frame(
            CLIENT_MAC,
            DIR_MAC,
            PROTO_TCP,
            c.client,
            c.service,
            true,
            Some(1460),
            b"",
        );
        let out = lb.run(&f);
        assert_eq!(out.action, action::TX);
        let r = rs.run_ingress(&out.data).expect("run");
        let plain = frame(
            DIR_MAC,
            rs_mac(4),
            PROTO_TCP,
            c.client,
            c.backend,
            true,
            Some(1460),
            b"",
        );
        assert_eq!(r.data, plain, "v6 {v6}");
    }
}
