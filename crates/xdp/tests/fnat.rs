//! FULLNAT fixtures (the tail-called `xdp_fnat`, bpf/lib/fnat.h): inbound
//! client:cport -> VIP:vport becomes laddr:lport -> RS:rport, the reply
//! RS:rport -> laddr:lport becomes VIP:vport -> client:cport, exact bytes
//! both ways against frames etherparse builds (so every checksum is checked
//! independently of the program's incremental updates), IPv4/IPv6 and
//! TCP/UDP; the pool's port choice (predicted by
//! `rvs_xdp::maps::fnat_candidate`), collision avoidance, exhaustion, and a
//! failed tail call. BPF_PROG_TEST_RUN looks routes up in the namespace of
//! the calling thread: each test runs in a namespace it creates and deletes
//! on drop. Needs root.

mod common;

use std::net::IpAddr;

use common::*;
use rvs_xdp::action;
use rvs_xdp::maps::{self, FlowKey, FnatKey, FnatPool, PROTO_TCP, PROTO_UDP, SvcKey, fwd};

/// Local address `i` of the pool (10.77.0.(50+i), fd77::(50+i)).
fn laddr(v6: bool, i: u8) -> IpAddr {
    if v6 {
        std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x50 + u16::from(i)).into()
    } else {
        std::net::Ipv4Addr::new(10, 77, 0, 50 + i).into()
    }
}

/// A frame `src:sport -> dst:dport` between `smac` and `dmac` (TCP SYN or
/// UDP).
#[allow(clippy::too_many_arguments)]
fn mk(
    udp: bool,
    flags: Flags,
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    smac: [u8; 6],
    dmac: [u8; 6],
    payload: &[u8],
) -> Vec<u8> {
    if udp {
        let mut f = udp_frame(src, sport, dst, dport, payload);
        f[0..6].copy_from_slice(&dmac);
        f[6..12].copy_from_slice(&smac);
        f
    } else {
        tcp_frame_macs(smac, dmac, src, sport, dst, dport, flags, payload)
    }
}

/// A director in `ns` with service 0 on VIP:80 (`proto`) to FULLNAT real
/// servers `rs` (port RPORT) and a pool of `n` local addresses with ports
/// `port_min..=port_max`.
fn director(v6: bool, proto: u8, rs: &[u8], n: u8, port_min: u16, port_max: u16) -> Lb {
    let mut lb = Lb::new("fnat").expect("root checked");
    lb.l.add_own_mac(INGRESS, VETH_MAC).expect("own MAC");
    let mut cfg = maps::Config::ipvs_defaults();
    cfg.flags = maps::CFG_F_NAT | maps::CFG_F_FNAT;
    lb.l.set_config(&cfg).expect("config");
    let servers: Vec<Rs> = rs
        .iter()
        .map(|&i| {
            let mut r = Rs::new(rs_addr(v6, i), fwd::FNAT, [0; 6]);
            r.port = RPORT;
            r
        })
        .collect();
    lb.service(0, SvcKey::new(proto, vip(v6), 80), "rr", 0, &servers);
    let mut pool = FnatPool {
        count: u32::from(n),
        port_min,
        port_max,
        family: maps::family(vip(v6)),
        ..FnatPool::default()
    };
    for i in 0..n {
        pool.addrs[usize::from(i)] = maps::addr16(laddr(v6, i));
        lb.l.add_fnat_laddr(laddr(v6, i)).expect("laddr");
    }
    lb.l.set_fnat_pool(0, &pool).expect("pool");
    lb
}

fn rev_key(proto: u8, r: IpAddr, l: IpAddr, lport: u16) -> FnatKey {
    FnatKey {
        raddr: maps::addr16(r),
        laddr: maps::addr16(l),
        rport: RPORT.to_be(),
        lport: lport.to_be(),
        proto,
        family: maps::family(r),
        pad0: 0,
    }
}

fn fnat(v6: bool, udp: bool) {
    in_nat_bed("fnat", move || {
        let proto = if udp { PROTO_UDP } else { PROTO_TCP };
        let mut lb = director(v6, proto, &[0], 2, 1024, 65535);
        let (c, v, r) = (client(v6, 0x0102), vip(v6), rs_addr(v6, 0));
        let (ai, lport) = maps::fnat_candidate(c, 33000, 80, 2, 1024, 65535, 0);
        let l = laddr(v6, ai as u8);
        let syn = if udp { Flags::Ack } else { Flags::Syn };

        // Inbound: client:33000 -> VIP:80 becomes laddr:lport -> RS:8080,
        // routed by the FIB (TTL untouched, as for NAT).
        let f = mk(udp, syn, c, 33000, v, 80, CLIENT_MAC, DIR_MAC, b"request");
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(
            out.data,
            mk(
                udp,
                syn,
                l,
                lport,
                r,
                RPORT,
                VETH_MAC,
                rs_mac(0),
                b"request"
            )
        );
        let rk = rev_key(proto, r, l, lport);
        let n = lb.l.fnat(&rk).unwrap().expect("reverse entry");
        assert_eq!(
            (
                n.caddr,
                u16::from_be(n.cport),
                n.vaddr,
                u16::from_be(n.vport)
            ),
            (maps::addr16(c), 33000, maps::addr16(v), 80)
        );
        let fk = FlowKey::new(proto, c, 33000, v, 80);
        assert_eq!(lb.l.fnat_of(&fk).unwrap(), Some(rk));

        // Reply: RS:8080 -> laddr:lport becomes VIP:80 -> client:33000,
        // TTL decremented, routed to the client's gateway.
        let ack = Flags::Ack;
        let f = mk(
            udp,
            ack,
            r,
            RPORT,
            l,
            lport,
            rs_mac(0),
            VETH_MAC,
            b"response!",
        );
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = with_ttl(
            mk(udp, ack, v, 80, c, 33000, VETH_MAC, GW_MAC, b"response!"),
            63,
        );
        assert_eq!(out.data, want);
        let flow = lb.l.flow(&fk).unwrap().expect("flow");
        assert_eq!(flow.flags & maps::FLOW_F_NOOUTPUT, 0, "a reply was seen");

        // The flow's next packet keeps its pair.
        let f = mk(
            udp,
            Flags::Ack,
            c,
            33000,
            v,
            80,
            CLIENT_MAC,
            DIR_MAC,
            b"more",
        );
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(
            out.data,
            mk(
                udp,
                Flags::Ack,
                l,
                lport,
                r,
                RPORT,
                VETH_MAC,
                rs_mac(0),
                b"more"
            )
        );
        let st = lb.l.svc_stats(0).unwrap();
        assert_eq!((st.conns, st.inpkts, st.outpkts), (1, 2, 1));
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (1, 0));
        if !udp {
            // SYN (SYN_RECV), then the server's ACK seen in OUTPUT.
            assert_eq!(flow.state, 1, "ESTABLISHED after the reply");
        }

        // A packet to the local address that no flow owns is the kernel's.
        let f = mk(
            udp,
            ack,
            r,
            RPORT,
            l,
            lport.wrapping_add(1),
            rs_mac(0),
            VETH_MAC,
            b"x",
        );
        let out = lb.run(&f);
        assert_eq!((out.action, out.data), (action::PASS, f));

        // The established packet above recorded the pair in the flow
        // entry (IPv4; an IPv6 flow keeps taking xdp_fnat's path), so the
        // next ones are rewritten by xdp_lb alone: with fnat_prog emptied
        // an IPv4 one still leaves translated and nothing is counted
        // missed; an IPv6 one is passed untouched and counted.
        let flow = lb.l.flow(&fk).unwrap().expect("flow");
        let la = maps::addr16(l);
        let want_rec = if v6 {
            (0, 0)
        } else {
            (
                lport.to_be(),
                u32::from_ne_bytes([la[0], la[1], la[2], la[3]]),
            )
        };
        assert_eq!((flow.fnat_lport, flow.fnat_laddr), want_rec);
        lb.l.clear_fnat_prog().expect("clear");
        let f = mk(
            udp,
            Flags::Ack,
            c,
            33000,
            v,
            80,
            CLIENT_MAC,
            DIR_MAC,
            b"again",
        );
        let out = lb.run(&f);
        if v6 {
            assert_eq!((out.action, out.data), (action::PASS, f));
            assert_eq!(lb.l.fnat_missed().unwrap(), 1);
        } else {
            assert_eq!(out.action, action::REDIRECT);
            assert_eq!(
                out.data,
                mk(
                    udp,
                    Flags::Ack,
                    l,
                    lport,
                    r,
                    RPORT,
                    VETH_MAC,
                    rs_mac(0),
                    b"again"
                )
            );
            assert_eq!(lb.l.fnat_missed().unwrap(), 0);
        }
    });
}

#[test]
fn fnat_tcp_v4() {
    fnat(false, false);
}

#[test]
fn fnat_tcp_v6() {
    fnat(true, false);
}

#[test]
fn fnat_udp_v4() {
    fnat(false, true);
}

#[test]
fn fnat_udp_v6() {
    fnat(true, true);
}

/// Two clients whose hash picks the same (laddr, lport) toward the same
/// real server get different pairs; each one's replies reach its client.
/// Toward another real server the same pair is free again.
#[test]
fn fnat_two_clients_with_the_same_first_choice_get_different_ports() {
    in_nat_bed(
        "fnat_two_clients_with_the_same_first_choice_get_different_ports",
        || {
            // A narrow range makes a shared first choice easy to find.
            let (lo, hi) = (20000u16, 20007u16);
            let mut lb = director(false, PROTO_TCP, &[0], 1, lo, hi);
            let (v, r, l) = (vip(false), rs_addr(false, 0), laddr(false, 0));
            let c1 = client(false, 1);
            let first = maps::fnat_candidate(c1, 40000, 80, 1, lo, hi, 0);
            let (c2, p2) = (2..5000u32)
                .flat_map(|i| [(client(false, i), 40000u16), (client(false, i), 40001)])
                .find(|(c, p)| maps::fnat_candidate(*c, *p, 80, 1, lo, hi, 0) == first)
                .expect("a client with the same first choice");
            let out1 = lb.run(&tcp_frame(c1, 40000, v, 80, Flags::Syn, b""));
            assert_eq!(out1.action, action::REDIRECT);
            let out2 = lb.run(&tcp_frame(c2, p2, v, 80, Flags::Syn, b""));
            assert_eq!(out2.action, action::REDIRECT);
            let port_of = |f: &[u8]| u16::from_be_bytes([f[34], f[35]]);
            let (lp1, lp2) = (port_of(&out1.data), port_of(&out2.data));
            assert_eq!(lp1, first.1, "the first client got its first choice");
            assert_ne!(lp1, lp2, "the second client's pair differs");
            assert!((lo..=hi).contains(&lp2));
            assert_eq!(
                out2.data,
                tcp_frame_macs(VETH_MAC, rs_mac(0), l, lp2, r, RPORT, Flags::Syn, b"")
            );
            for (c, cport, lp) in [(c1, 40000, lp1), (c2, p2, lp2)] {
                let f = tcp_frame_macs(rs_mac(0), VETH_MAC, r, RPORT, l, lp, Flags::Ack, b"");
                let out = lb.run(&f);
                assert_eq!(out.action, action::REDIRECT);
                assert_eq!(
                    out.data,
                    with_ttl(
                        tcp_frame_macs(VETH_MAC, GW_MAC, v, 80, c, cport, Flags::Ack, b""),
                        63
                    )
                );
            }
            assert_eq!(lb.l.fnat_stats(0).unwrap().exhausted, 0);
        },
    );
}

/// A pool with one (address, port) pair: the second live flow to the same
/// real server finds it taken, is dropped and counted (once, whatever the
/// number of SYNs it sends); a flow to another real server may use the
/// same pair (its tuple differs at the server).
#[test]
fn fnat_exhaustion_is_counted_and_dropped() {
    in_nat_bed("fnat_exhaustion_is_counted_and_dropped", || {
        let mut lb = director(false, PROTO_TCP, &[0, 1], 1, 5000, 5000);
        let (v, l) = (vip(false), laddr(false, 0));
        // rr: the first two flows go to different servers, the third to
        // the first one's again.
        let mut first = None;
        for (i, cport) in [(1u32, 1111u16), (2, 2222)] {
            let out = lb.run(&tcp_frame(client(false, i), cport, v, 80, Flags::Syn, b""));
            assert_eq!(out.action, action::REDIRECT);
            let s = if out.data[0..6] == rs_mac(0) { 0 } else { 1 };
            first.get_or_insert(s);
            assert_eq!(
                out.data,
                tcp_frame_macs(
                    VETH_MAC,
                    rs_mac(s),
                    l,
                    5000,
                    rs_addr(false, s),
                    RPORT,
                    Flags::Syn,
                    b""
                )
            );
        }
        let first = first.expect("two flows");
        let f = tcp_frame(client(false, 3), 3333, v, 80, Flags::Syn, b"");
        let out = lb.run(&f);
        assert_eq!(out.action, action::DROP);
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (2, 1));
        // Its retransmitted SYNs are refused too, the connection counted
        // once.
        for _ in 0..3 {
            assert_eq!(lb.run(&f).action, action::DROP);
        }
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (2, 1));
        // The first flow still owns the pair.
        let n =
            lb.l.fnat(&rev_key(PROTO_TCP, rs_addr(false, first), l, 5000))
                .unwrap()
                .expect("entry");
        assert_eq!(n.caddr, maps::addr16(client(false, 1)));
    });
}

/// With `fnat_prog` empty the tail call fails: the packet passes untouched
/// and is counted.
#[test]
fn fnat_failed_tail_call_passes_and_counts() {
    in_nat_bed("fnat_failed_tail_call_passes_and_counts", || {
        let mut lb = director(false, PROTO_TCP, &[0], 1, 1024, 65535);
        lb.l.clear_fnat_prog().expect("clear");
        let f = tcp_frame(client(false, 9), 999, vip(false), 80, Flags::Syn, b"");
        let out = lb.run(&f);
        assert_eq!((out.action, out.data), (action::PASS, f));
        assert_eq!(lb.l.fnat_missed().unwrap(), 1);
        assert_eq!(lb.l.fnat_stats(0).unwrap().allocated, 0);
    });
}

/// A TCP frame `src:sport -> dst:dport` between `smac` and `dmac` with
/// sequence `seq`, acknowledgment `ack` (None: no ACK flag), SYN or not, the
/// raw TCP `options` (a multiple of 4 bytes) and `payload`; etherparse
/// computes both checksums.
#[allow(clippy::too_many_arguments)]
fn seg(
    (smac, dmac): ([u8; 6], [u8; 6]),
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    (seq, ack, syn): (u32, Option<u32>, bool),
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(smac, dmac);
    let b = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
        _ => panic!("mixed families"),
    };
    let mut t = b.tcp(sport, dport, seq, 65535);
    if syn {
        t = t.syn();
    }
    if let Some(a) = ack {
        t = t.ack(a);
    }
    let t = t.options_raw(options).expect("options");
    let mut out = Vec::new();
    t.write(&mut out, payload).expect("frame");
    out
}

/// The TOA the director inserts for client `c:cport` (kind 254; the IPv4
/// form, 8 bytes, or the IPv6 form, 20 bytes).
fn toa_opt(c: IpAddr, cport: u16) -> Vec<u8> {
    let a = match c {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut o = vec![254, (4 + a.len()) as u8];
    o.extend_from_slice(&cport.to_be_bytes());
    o.extend_from_slice(&a);
    o
}

/// A SYN's options: MSS `mss`, SACK-permitted, three NOPs, window scale 7
/// (12 bytes).
fn syn_opts(mss: u16) -> Vec<u8> {
    let m = mss.to_be_bytes();
    vec![2, 4, m[0], m[1], 4, 2, 1, 1, 1, 3, 3, 7]
}

/// The TOA on a FULLNAT TCP handshake: the real server's SYN-ACK gets its
/// MSS lowered by the TOA's length (counted) and arms the TOA; the client's
/// handshake ACK and its data sent before the server answered get the
/// option (right after the fixed header, lengths and both checksums as
/// etherparse computes them for the expected frame); the server's next
/// segment disarms it; a flow whose ACK has 36 bytes of options already is
/// forwarded without it and counted as no room.
fn fnat_toa(v6: bool) {
    in_nat_bed("fnat_toa", move || {
        let mut lb = director(v6, PROTO_TCP, &[0], 2, 1024, 65535);
        let (c, v, r) = (client(v6, 0x0304), vip(v6), rs_addr(v6, 0));
        let cport = 34000;
        let (ai, lport) = maps::fnat_candidate(c, cport, 80, 2, 1024, 65535, 0);
        let l = laddr(v6, ai as u8);
        let toa_len: u16 = if v6 { 20 } else { 8 };
        let cin = (CLIENT_MAC, DIR_MAC);
        let rsout = (VETH_MAC, rs_mac(0));
        let rsin = (rs_mac(0), VETH_MAC);
        let cout = (VETH_MAC, GW_MAC);

        // The client's SYN: translated, its MSS untouched, no TOA.
        let opts = syn_opts(1460);
        let f = seg(cin, c, cport, v, 80, (1000, None, true), &opts, b"");
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = seg(rsout, l, lport, r, RPORT, (1000, None, true), &opts, b"");
        assert_eq!(out.data, want);
        let rk = rev_key(PROTO_TCP, r, l, lport);
        assert_eq!(lb.l.fnat(&rk).unwrap().expect("entry").toa_ack, 0);

        // The server's SYN-ACK: MSS 1460 becomes 1460 - the TOA's length.
        let f = seg(
            rsin,
            r,
            RPORT,
            l,
            lport,
            (7000, Some(1001), true),
            &opts,
            b"",
        );
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = with_ttl(
            seg(
                cout,
                v,
                80,
                c,
                cport,
                (7000, Some(1001), true),
                &syn_opts(1460 - toa_len),
                b"",
            ),
            63,
        );
        assert_eq!(out.data, want);
        assert_eq!(
            lb.l.fnat(&rk).unwrap().expect("entry").toa_ack,
            7001u32.to_be()
        );
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.mss_clamped, fs.toa_inserted), (1, 0));
        // Armed: the flow's client segments take xdp_fnat's path.
        let fk = FlowKey::new(PROTO_TCP, c, cport, v, 80);
        let flow = lb.l.flow(&fk).unwrap().expect("flow");
        assert_ne!(flow.flags & maps::FLOW_F_TOA, 0, "TOA armed in the flow");
        // ... and an IPv4 flow has its pair recorded by that SYN-ACK.
        let rec = if v6 { 0 } else { lport.to_be() };
        assert_eq!(flow.fnat_lport, rec);

        // The handshake's ACK gets the TOA; so does data sent before the
        // server answered; both carry the timestamps behind it.
        let ts = [1u8, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let mut with_toa = toa_opt(c, cport);
        with_toa.extend_from_slice(&ts);
        for (i, payload) in [&b""[..], &b"GET / HTTP/1.0\r\n\r\n"[..]]
            .iter()
            .enumerate()
        {
            let f = seg(
                cin,
                c,
                cport,
                v,
                80,
                (1001, Some(7001), false),
                &ts,
                payload,
            );
            let out = lb.run(&f);
            assert_eq!(out.action, action::REDIRECT);
            let want = seg(
                rsout,
                l,
                lport,
                r,
                RPORT,
                (1001, Some(7001), false),
                &with_toa,
                payload,
            );
            assert_eq!(out.data, want, "segment {i} gains the TOA");
            assert_eq!(lb.l.fnat_stats(0).unwrap().toa_inserted, i as u64 + 1);
        }

        // The server answers: the TOA is disarmed; a later client segment
        // that still acknowledges 7001 goes without it.
        let f = seg(
            rsin,
            r,
            RPORT,
            l,
            lport,
            (7001, Some(1019), false),
            &ts,
            b"",
        );
        assert_eq!(lb.run(&f).action, action::REDIRECT);
        assert_eq!(lb.l.fnat(&rk).unwrap().expect("entry").toa_ack, 0);
        // Disarmed in the IPv4 flow that recorded this pair (an IPv6 flow
        // records none and keeps taking xdp_fnat's path).
        if !v6 {
            let flow = lb.l.flow(&fk).unwrap().expect("flow");
            assert_eq!(flow.flags & maps::FLOW_F_TOA, 0, "TOA disarmed in the flow");
            assert_eq!(flow.fnat_lport, lport.to_be());
        }
        let f = seg(cin, c, cport, v, 80, (1019, Some(7001), false), &ts, b"x");
        let out = lb.run(&f);
        let want = seg(
            rsout,
            l,
            lport,
            r,
            RPORT,
            (1019, Some(7001), false),
            &ts,
            b"x",
        );
        assert_eq!((out.action, out.data), (action::REDIRECT, want));
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!(
            (fs.toa_inserted, fs.toa_noroom, fs.toa_mtu, fs.toa_error),
            (2, 0, 0, 0)
        );

        // Another flow whose ACK has 36 bytes of options: no room for the
        // TOA (40 at most): forwarded without it, counted.
        let cport2 = 34001;
        let (ai2, lport2) = maps::fnat_candidate(c, cport2, 80, 2, 1024, 65535, 0);
        let l2 = laddr(v6, ai2 as u8);
        let f = seg(cin, c, cport2, v, 80, (500, None, true), &opts, b"");
        assert_eq!(lb.run(&f).action, action::REDIRECT);
        let f = seg(
            rsin,
            r,
            RPORT,
            l2,
            lport2,
            (9000, Some(501), true),
            &opts,
            b"",
        );
        assert_eq!(lb.run(&f).action, action::REDIRECT);
        let full = [1u8; 36];
        let f = seg(cin, c, cport2, v, 80, (501, Some(9001), false), &full, b"");
        let out = lb.run(&f);
        let want = seg(
            rsout,
            l2,
            lport2,
            r,
            RPORT,
            (501, Some(9001), false),
            &full,
            b"",
        );
        assert_eq!((out.action, out.data), (action::REDIRECT, want));
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.toa_inserted, fs.toa_noroom, fs.mss_clamped), (2, 1, 2));
    });
}

#[test]
fn fnat_toa_v4() {
    fnat_toa(false);
}

#[test]
fn fnat_toa_v6() {
    fnat_toa(true);
}

/// The pool walk finds the last free pair: a pool of 2 addresses x 32
/// ports (64 pairs) toward one real server takes 64 connections, each on
/// its own pair; the 65th is refused and counted once however often it
/// resends its SYN; when one pair comes free, the 65th's next SYN gets
/// exactly that pair. (16 random candidates, the allocator before, refuse
/// connections long before the pool is full.)
#[test]
fn fnat_walk_hands_out_every_pair_and_only_free_ones() {
    in_nat_bed("fnat_walk_hands_out_every_pair_and_only_free_ones", || {
        let (lo, hi) = (20000u16, 20031u16);
        let mut lb = director(false, PROTO_TCP, &[0], 2, lo, hi);
        let (v, r) = (vip(false), rs_addr(false, 0));
        let pair_of = |f: &[u8]| {
            let a: [u8; 4] = f[26..30].try_into().expect("source");
            (IpAddr::from(a), u16::from_be_bytes([f[34], f[35]]))
        };
        let mut held = std::collections::BTreeMap::new();
        for i in 0..64u32 {
            let c = client(false, 100 + i);
            let out = lb.run(&tcp_frame(c, 5555, v, 80, Flags::Syn, b""));
            assert_eq!(out.action, action::REDIRECT, "connection {i}");
            let (l, lp) = pair_of(&out.data);
            assert!(l == laddr(false, 0) || l == laddr(false, 1), "{l}");
            assert!((lo..=hi).contains(&lp), "{lp}");
            assert!(held.insert((l, lp), c).is_none(), "pair {l}:{lp} twice");
        }
        assert_eq!(held.len(), 64);
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (64, 0));
        let probes = fs.probes;
        let late = tcp_frame(client(false, 999), 5555, v, 80, Flags::Syn, b"");
        for _ in 0..4 {
            assert_eq!(lb.run(&late).action, action::DROP);
        }
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (64, 1), "refused once");
        // The client gives up; a new connection from the same port (its
        // own initial sequence number) is refused and counted again, once
        // over its resent SYNs too.
        let again = syn_with_seq(client(false, 999), 5555, v, 80, 77_777);
        for _ in 0..3 {
            assert_eq!(lb.run(&again).action, action::DROP);
        }
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (64, 2), "a new connection");
        // A walk that found the pool full is not repeated for a quarter
        // second (fnat_full): these seven SYNs, sent within microseconds
        // of each other, walked the 64 pairs far fewer than seven times.
        eprintln!("seven refused SYNs: {} pairs looked at", fs.probes - probes);
        assert!(
            fs.probes - probes < 7 * 64,
            "seven refused SYNs looked at {} pairs",
            fs.probes - probes
        );
        // One connection ends (its translation freed as rvsd's report
        // does): the refused one's next SYN, once the quarter second has
        // passed, takes exactly its pair.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let ((l, lp), c) = held.iter().nth(17).map(|(k, c)| (*k, *c)).expect("a pair");
        let rk = rev_key(PROTO_TCP, r, l, lp);
        lb.l.remove_fnat_of(&FlowKey::new(PROTO_TCP, c, 5555, v, 80), &rk)
            .expect("free");
        let out = lb.run(&late);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(pair_of(&out.data), (l, lp));
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!((fs.allocated, fs.exhausted), (65, 2));
        assert!(fs.probes >= 65, "probes {}", fs.probes);
    });
}

/// A client's IPv4 SYN with initial sequence number `seq` (tcp_frame's is
/// 1000).
fn syn_with_seq(c: IpAddr, cport: u16, v: IpAddr, vport: u16, seq: u32) -> Vec<u8> {
    let (IpAddr::V4(c), IpAddr::V4(v)) = (c, v) else {
        panic!("IPv4 only");
    };
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, DIR_MAC)
        .ipv4(c.octets(), v.octets(), 64)
        .tcp(cport, vport, seq, 65535)
        .syn()
        .write(&mut out, b"")
        .expect("frame");
    out
}

/// The pool walk of `xdp_fnat` by itself (the director's maps, only the
/// FULLNAT program loaded, what `xdp_lb` hands it written into
/// `fnat_tmp` before each run): 64 connections take the 64 pairs of a
/// pool of 2 addresses x 32 ports toward one real server, all different;
/// the 65th is refused and counted once over four SYNs; when one pair is
/// freed the 65th's next SYN gets exactly that pair. Runs where the
/// kernel's verifier refuses `xdp_lb` too.
#[test]
fn fnat_alone_walk_hands_out_every_pair_and_counts_refusals_once() {
    in_nat_bed(
        "fnat_alone_walk_hands_out_every_pair_and_counts_refusals_once",
        || {
            let (lo, hi) = (20000u16, 20031u16);
            let mut l = rvs_xdp::Loaded::load_fnat_alone(&rvs_xdp::LoadOptions {
                flow_table_size: 4096,
                slots: 4096,
                ..rvs_xdp::LoadOptions::default()
            })
            .expect("xdp_fnat loads");
            let (v, r) = (vip(false), rs_addr(false, 0));
            let dest = maps::Dest {
                addr: maps::addr16(r),
                port: RPORT.to_be(),
                family: maps::AF_INET,
                method: fwd::FNAT,
                ..maps::Dest::default()
            };
            l.set_dest(0, &dest).expect("dest");
            let mut pool = FnatPool {
                count: 2,
                port_min: lo,
                port_max: hi,
                family: maps::AF_INET,
                ..FnatPool::default()
            };
            for i in 0..2u8 {
                pool.addrs[usize::from(i)] = maps::addr16(laddr(false, i));
            }
            l.set_fnat_pool(0, &pool).expect("pool");
            let syn = |l: &mut rvs_xdp::Loaded, c: IpAddr| {
                l.set_fnat_tmp(&maps::FnatTmp {
                    kind: maps::FNAT_INBOUND,
                    dest: 0,
                    svc: 0,
                    laddr: 0,
                    lport: 0,
                    table: maps::FNAT_REC_NONE,
                    flags: 0,
                    pad0: 0,
                })
                .expect("fnat_tmp");
                l.run_on(&tcp_frame(c, 5555, v, 80, Flags::Syn, b""), 1, INGRESS)
                    .expect("test run")
            };
            let pair_of = |f: &[u8]| {
                let a: [u8; 4] = f[26..30].try_into().expect("source");
                (IpAddr::from(a), u16::from_be_bytes([f[34], f[35]]))
            };
            let mut held = std::collections::BTreeMap::new();
            for i in 0..64u32 {
                let c = client(false, 100 + i);
                let out = syn(&mut l, c);
                assert_eq!(out.action, action::REDIRECT, "connection {i}");
                let (la, lp) = pair_of(&out.data);
                assert!(la == laddr(false, 0) || la == laddr(false, 1), "{la}");
                assert!((lo..=hi).contains(&lp), "{lp}");
                assert!(held.insert((la, lp), c).is_none(), "pair {la}:{lp} twice");
                if i == 0 {
                    // The first pair is the one the mirror predicts.
                    let (ai, p) = maps::fnat_candidate(c, 5555, 80, 2, lo, hi, 0);
                    assert_eq!((laddr(false, ai as u8), p), (la, lp));
                }
            }
            let fs = l.fnat_stats(0).unwrap();
            assert_eq!((fs.allocated, fs.exhausted), (64, 0));
            let late = client(false, 999);
            for _ in 0..4 {
                assert_eq!(syn(&mut l, late).action, action::DROP);
            }
            let fs = l.fnat_stats(0).unwrap();
            assert_eq!((fs.allocated, fs.exhausted), (64, 1), "refused once");
            let ((la, lp), c) = held.iter().nth(17).map(|(k, c)| (*k, *c)).expect("a pair");
            l.remove_fnat_of(
                &FlowKey::new(PROTO_TCP, c, 5555, v, 80),
                &rev_key(PROTO_TCP, r, la, lp),
            )
            .expect("free");
            // After fnat_full's quarter second.
            std::thread::sleep(std::time::Duration::from_millis(300));
            let out = syn(&mut l, late);
            assert_eq!(out.action, action::REDIRECT);
            assert_eq!(pair_of(&out.data), (la, lp), "the freed pair");
            let fs = l.fnat_stats(0).unwrap();
            assert_eq!((fs.allocated, fs.exhausted), (65, 1));
            eprintln!("probes for 65 pairs of 64: {}", fs.probes);
        },
    );
}
/// The ICMP errors the FULLNAT tests send: IPv4 / ICMPv6 port unreachable,
/// fragmentation needed / packet too big with an MTU, time exceeded.
#[derive(Clone, Copy, Debug)]
enum IcmpKind {
    PortUnreachable,
    TooBig(u16),
    TimeExceeded,
}

/// An ICMP error `kind` from `src` to `dst` with TTL `ttl` between `smac`
/// and `dmac`, quoting `quoted`; etherparse computes every checksum of the
/// outer packet (the quote's are those of the packet quoted).
fn icmp_frame(
    kind: IcmpKind,
    (smac, dmac): ([u8; 6], [u8; 6]),
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    quoted: &[u8],
) -> Vec<u8> {
    use etherparse::{
        Icmpv4Type, Icmpv6Type,
        icmpv4::{DestUnreachableHeader, TimeExceededCode},
        icmpv6::{DestUnreachableCode, TimeExceededCode as Te6},
    };
    let b = etherparse::PacketBuilder::ethernet2(smac, dmac);
    let mut out = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let t =
                match kind {
                    IcmpKind::PortUnreachable => {
                        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port)
                    }
                    IcmpKind::TooBig(mtu) => Icmpv4Type::DestinationUnreachable(
                        DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu },
                    ),
                    IcmpKind::TimeExceeded => {
                        Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit)
                    }
                };
            b.ipv4(s.octets(), d.octets(), ttl)
                .icmpv4(t)
                .write(&mut out, quoted)
                .expect("frame")
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let t = match kind {
                IcmpKind::PortUnreachable => {
                    Icmpv6Type::DestinationUnreachable(DestUnreachableCode::Port)
                }
                IcmpKind::TooBig(mtu) => Icmpv6Type::PacketTooBig {
                    mtu: u32::from(mtu),
                },
                IcmpKind::TimeExceeded => Icmpv6Type::TimeExceeded(Te6::HopLimitExceeded),
            };
            b.ipv6(s.octets(), d.octets(), ttl)
                .icmpv6(t)
                .write(&mut out, quoted)
                .expect("frame")
        }
        _ => panic!("mixed families"),
    }
    out
}

/// Check a produced frame with rvs-wire's ICMP reader (independent of both
/// the program and etherparse): every checksum present verifies, and the
/// outer and quoted addresses are the expected ones.
fn wire_check(frame: &[u8], src: IpAddr, dst: IpAddr, qsrc: (IpAddr, u16), qdst: (IpAddr, u16)) {
    let m = rvs_wire::icmp::parse(&frame[14..]).expect("rvs-wire parses the error");
    assert!(m.checksums.all_valid(), "checksums {:?}", m.checksums);
    assert_eq!((m.src, m.dst), (src, dst), "outer addresses");
    assert_eq!(
        (m.quoted_src, m.quoted_dst),
        (qsrc.into(), qdst.into()),
        "quoted addresses and ports"
    );
}

/// ICMP errors about FULLNAT flows, translated both ways (bpf/lib/fnat.h):
/// - from the real server's side (the real server itself, or a router on
///   its side) to the local address, quoting laddr:lport -> RS:rport: to
///   the client from the VIP, quoting client:cport -> VIP:vport, TTL
///   decremented;
/// - from the client's side to the VIP, quoting VIP:vport -> client:cport:
///   to the real server from the local address, quoting RS:rport ->
///   laddr:lport.
///
/// Whole frames compared byte for byte with frames etherparse builds (every
/// checksum computed from scratch), and read back by rvs-wire's ICMP parser
/// (every checksum verified); for port unreachable, frag-needed / packet too
/// big and time exceeded, whole and cut quotes. Counted per service; errors
/// about unknown flows pass untouched. TCP: a too-big error toward the
/// client while the flow's TOA is armed has its MTU lowered by the TOA's
/// length.
fn fnat_icmp(v6: bool, udp: bool) {
    in_nat_bed("fnat_icmp", move || {
        let proto = if udp { PROTO_UDP } else { PROTO_TCP };
        let mut lb = director(v6, proto, &[0], 2, 1024, 65535);
        let (c, v, r) = (client(v6, 0x0506), vip(v6), rs_addr(v6, 0));
        let cport = 35000;
        let (ai, lport) = maps::fnat_candidate(c, cport, 80, 2, 1024, 65535, 0);
        let l = laddr(v6, ai as u8);
        // The client's first packet makes the flow.
        let first = mk(udp, Flags::Syn, c, cport, v, 80, CLIENT_MAC, DIR_MAC, b"");
        assert_eq!(lb.run(&first).action, action::REDIRECT);
        // A whole packet as IP carries it (quoted in full, or cut).
        let ip = |src: IpAddr, sport: u16, dst: IpAddr, dport: u16| {
            if udp {
                udp_frame(src, sport, dst, dport, b"data")[14..].to_vec()
            } else {
                tcp_frame(src, sport, dst, dport, Flags::Ack, b"data")[14..].to_vec()
            }
        };
        let router: IpAddr = if v6 {
            "fd77::fe".parse().unwrap()
        } else {
            "10.77.0.254".parse().unwrap()
        };
        let far: IpAddr = if v6 {
            "fd78::1".parse().unwrap()
        } else {
            "10.78.200.1".parse().unwrap()
        };
        let cut = if v6 { 40 + 4 } else { 20 + 4 };
        let kinds = [
            IcmpKind::PortUnreachable,
            IcmpKind::TooBig(1400),
            IcmpKind::TimeExceeded,
        ];
        let mut to_client = 0;
        let mut to_rs = 0;
        for kind in kinds {
            for whole in [true, false] {
                let n = if whole { usize::MAX } else { cut };
                let q = |b: Vec<u8>| b[..n.min(b.len())].to_vec();
                // The real server's side (the real server, a router).
                for from in [r, router] {
                    let f = icmp_frame(
                        kind,
                        (rs_mac(0), VETH_MAC),
                        from,
                        l,
                        64,
                        &q(ip(l, lport, r, RPORT)),
                    );
                    let out = lb.run(&f);
                    assert_eq!(out.action, action::REDIRECT, "{kind:?} from {from}");
                    let want =
                        icmp_frame(kind, (VETH_MAC, GW_MAC), v, c, 63, &q(ip(c, cport, v, 80)));
                    assert_eq!(
                        out.data, want,
                        "to the client: {kind:?} from {from}, whole {whole}"
                    );
                    wire_check(&out.data, v, c, (c, cport), (v, 80));
                    to_client += 1;
                }
                // The client's side, about a reply VIP -> client.
                let f = icmp_frame(
                    kind,
                    (CLIENT_MAC, DIR_MAC),
                    far,
                    v,
                    64,
                    &q(ip(v, 80, c, cport)),
                );
                let out = lb.run(&f);
                assert_eq!(
                    out.action,
                    action::REDIRECT,
                    "{kind:?} from the client's side"
                );
                let want = icmp_frame(
                    kind,
                    (VETH_MAC, rs_mac(0)),
                    l,
                    r,
                    64,
                    &q(ip(r, RPORT, l, lport)),
                );
                assert_eq!(
                    out.data, want,
                    "to the real server: {kind:?}, whole {whole}"
                );
                wire_check(&out.data, l, r, (r, RPORT), (l, lport));
                to_rs += 1;
            }
        }
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!(
            (fs.icmp_to_client, fs.icmp_to_rs, fs.icmp_mtu_lowered),
            (to_client, to_rs, 0)
        );
        let st = lb.l.svc_stats(0).unwrap();
        assert_eq!((st.inpkts, st.outpkts), (1 + to_rs, to_client));

        // About packets of no flow: the kernel's, untouched.
        for f in [
            icmp_frame(
                IcmpKind::PortUnreachable,
                (rs_mac(0), VETH_MAC),
                r,
                l,
                64,
                &ip(l, lport.wrapping_add(1), r, RPORT),
            ),
            icmp_frame(
                IcmpKind::PortUnreachable,
                (CLIENT_MAC, DIR_MAC),
                far,
                v,
                64,
                &ip(v, 80, c, cport + 1),
            ),
        ] {
            let out = lb.run(&f);
            assert_eq!((out.action, out.data), (action::PASS, f));
        }
        assert_eq!(lb.l.fnat_stats(0).unwrap().icmp_to_client, to_client);

        if udp {
            return;
        }
        // TCP: the real server's SYN-ACK arms the flow's TOA; a too-big
        // error toward the client then says the MTU less the TOA's length
        // (the client's segments that get it grow by that much); any other
        // error is unchanged.
        let toa_len: u16 = if v6 { 20 } else { 8 };
        let synack = seg(
            (rs_mac(0), VETH_MAC),
            r,
            RPORT,
            l,
            lport,
            (7000, Some(1), true),
            &syn_opts(1460),
            b"",
        );
        assert_eq!(lb.run(&synack).action, action::REDIRECT);
        let mtu = 1400;
        let f = icmp_frame(
            IcmpKind::TooBig(mtu),
            (rs_mac(0), VETH_MAC),
            router,
            l,
            64,
            &ip(l, lport, r, RPORT),
        );
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = icmp_frame(
            IcmpKind::TooBig(mtu - toa_len),
            (VETH_MAC, GW_MAC),
            v,
            c,
            63,
            &ip(c, cport, v, 80),
        );
        assert_eq!(out.data, want, "the MTU less the TOA");
        wire_check(&out.data, v, c, (c, cport), (v, 80));
        let fs = lb.l.fnat_stats(0).unwrap();
        assert_eq!(fs.icmp_mtu_lowered, 1);
        // Never below the family's minimum MTU.
        let floor = if v6 { 1280 } else { 68 };
        let f = icmp_frame(
            IcmpKind::TooBig(floor + 1),
            (rs_mac(0), VETH_MAC),
            router,
            l,
            64,
            &ip(l, lport, r, RPORT),
        );
        let out = lb.run(&f);
        let want = icmp_frame(
            IcmpKind::TooBig(floor),
            (VETH_MAC, GW_MAC),
            v,
            c,
            63,
            &ip(c, cport, v, 80),
        );
        assert_eq!((out.action, out.data), (action::REDIRECT, want));
        let f = icmp_frame(
            IcmpKind::PortUnreachable,
            (rs_mac(0), VETH_MAC),
            r,
            l,
            64,
            &ip(l, lport, r, RPORT),
        );
        let out = lb.run(&f);
        let want = icmp_frame(
            IcmpKind::PortUnreachable,
            (VETH_MAC, GW_MAC),
            v,
            c,
            63,
            &ip(c, cport, v, 80),
        );
        assert_eq!((out.action, out.data), (action::REDIRECT, want));
        assert_eq!(lb.l.fnat_stats(0).unwrap().icmp_mtu_lowered, 2);
    });
}

#[test]
fn fnat_icmp_tcp_v4() {
    fnat_icmp(false, false);
}

#[test]
fn fnat_icmp_tcp_v6() {
    fnat_icmp(true, false);
}

#[test]
fn fnat_icmp_udp_v4() {
    fnat_icmp(false, true);
}

#[test]
fn fnat_icmp_udp_v6() {
    fnat_icmp(true, true);
}

/// A FULLNAT connection synced from another director
/// (`Plane::load_synced_flow` with its master's pair, not one this pool
/// would choose first): its client segments leave from that laddr:lport —
/// IPv4 by xdp_lb alone from the pair recorded in the flow entry, IPv6 by
/// xdp_fnat from `fnat_fwd`/`fnat_rev` — with nothing allocated, and the
/// real server's replies to that pair go back to the client.
fn synced(v6: bool) {
    use rvs_control::protocol::Command;
    use rvs_core::ipvs::{Ipvs, IpvsConfig, MirroredConn};
    use rvs_core::model::{
        AddrFamily, DestConfig, ForwardMethod, LocalAddrRange, Protocol, ServiceConfig, ServiceKey,
    };
    use rvs_xdp::plane::{KernelMaps, Plane};
    in_nat_bed("fnat_synced", move || {
        let maps = KernelMaps::load(&rvs_xdp::LoadOptions {
            flow_table_size: 4096,
            slots: 1 << 16,
            ..rvs_xdp::LoadOptions::default()
        })
        .expect("load");
        let mut plane = Plane::new(maps).expect("plane");
        for m in [VETH_MAC, DIR_MAC] {
            plane
                .maps()
                .director()
                .add_own_mac(INGRESS, m)
                .expect("own MAC");
        }
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        let (c, v, r, l) = (client(v6, 0x0102), vip(v6), rs_addr(v6, 0), laddr(v6, 0));
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: v,
            port: 80,
        };
        let af = if v6 {
            AddrFamily::Inet6
        } else {
            AddrFamily::Inet
        };
        for cmd in [
            Command::AddService {
                key,
                config: ServiceConfig::new(af),
            },
            Command::AddLaddr {
                service: key,
                laddr: LocalAddrRange::parse(&l.to_string()).expect("range"),
            },
            Command::AddDest {
                service: key,
                dest: DestConfig::new(r, RPORT).forward(ForwardMethod::FullNat),
            },
        ] {
            rvs_control::state::apply(&mut ipvs, &cmd).expect("model");
            plane.apply_command(&cmd).expect("plane");
        }
        let dest = ipvs.service(&key).expect("service").dests()[0].id;
        // Not the pool's first candidate for this client tuple.
        let first =
            maps::fnat_candidate(c, 33000, 80, 1, maps::FNAT_PORT_MIN, maps::FNAT_PORT_MAX, 0).1;
        let lport = if first == 40000 { 40001 } else { 40000 };
        let synced = MirroredConn {
            protocol: Protocol::Tcp,
            client: std::net::SocketAddr::new(c, 33000),
            vip: std::net::SocketAddr::new(v, 80),
            dest,
            state: rvs_core::state::TcpState::Established as u8,
            output_seen: true,
            idle_left: std::time::Duration::from_secs(900),
            template: false,
            local: Some(std::net::SocketAddr::new(l, lport)),
        };
        plane.load_synced_flow(&ipvs, &synced).expect("load synced");
        // IPv4: recorded in the flow entry, as xdp_fnat records it.
        let fk = FlowKey::new(PROTO_TCP, c, 33000, v, 80);
        let flow = plane
            .maps()
            .director()
            .flow(&fk)
            .expect("flow read")
            .expect("flow loaded");
        let la = maps::addr16(l);
        let want = if v6 {
            (0, 0)
        } else {
            (
                lport.to_be(),
                u32::from_ne_bytes([la[0], la[1], la[2], la[3]]),
            )
        };
        assert_eq!((flow.fnat_lport, flow.fnat_laddr), want);
        let run = |plane: &mut Plane<KernelMaps>, f: &[u8]| {
            plane
                .maps()
                .director()
                .run_on(f, 1, INGRESS)
                .expect("test run")
        };

        // The client's next segment leaves from the synced pair.
        let f = mk(
            false,
            Flags::Ack,
            c,
            33000,
            v,
            80,
            CLIENT_MAC,
            DIR_MAC,
            b"after failover",
        );
        let out = run(&mut plane, &f);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(
            out.data,
            mk(
                false,
                Flags::Ack,
                l,
                lport,
                r,
                RPORT,
                VETH_MAC,
                rs_mac(0),
                b"after failover"
            )
        );
        // The real server's reply to it reaches the client.
        let f = mk(
            false,
            Flags::Ack,
            r,
            RPORT,
            l,
            lport,
            rs_mac(0),
            VETH_MAC,
            b"reply",
        );
        let out = run(&mut plane, &f);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(
            out.data,
            with_ttl(
                mk(
                    false,
                    Flags::Ack,
                    v,
                    80,
                    c,
                    33000,
                    VETH_MAC,
                    GW_MAC,
                    b"reply"
                ),
                63
            )
        );
        // And again, the pair kept; nothing was allocated here.
        let f = mk(
            false,
            Flags::Ack,
            c,
            33000,
            v,
            80,
            CLIENT_MAC,
            DIR_MAC,
            b"more",
        );
        let out = run(&mut plane, &f);
        assert_eq!(
            out.data,
            mk(
                false,
                Flags::Ack,
                l,
                lport,
                r,
                RPORT,
                VETH_MAC,
                rs_mac(0),
                b"more"
            )
        );
        let svc = plane.service_index(&key).expect("index");
        let fs = plane.maps().director().fnat_stats(svc).expect("stats");
        assert_eq!((fs.allocated, fs.exhausted), (0, 0));
        assert_eq!(plane.synced_pairs_taken(), 0);
    });
}

#[test]
fn fnat_synced_v4() {
    synced(false);
}

#[test]
fn fnat_synced_v6() {
    synced(true);
}
