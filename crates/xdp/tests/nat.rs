//! NAT fixtures: inbound destination rewrite and the reply path's source
//! rewrite, with incremental checksums and next hops from the kernel's FIB
//! (`bpf_fib_lookup`). BPF_PROG_TEST_RUN looks routes up in the network
//! namespace of the calling thread, so each test runs in a namespace it
//! creates (routes and permanent neighbours, no traffic leaves it) and
//! deletes on drop. Needs root.

mod common;

use std::net::IpAddr;

use common::*;
use rvs_xdp::action;
use rvs_xdp::maps::{self, FlowKey, NatKey, PROTO_TCP, PROTO_UDP, SvcKey, fwd};

/// A NAT director on the bed's link `rvsa`, whose MAC it owns as attach
/// does (the real servers' replies are sent to it), with service 0 on
/// `proto` VIP:80 scheduled by `sched` to real server `rs` on [`RPORT`].
fn nat_director(name: &str, v6: bool, proto: u8, sched: &str, rs: u8) -> Lb {
    let mut lb = Lb::new(name).expect("root checked");
    lb.l.add_own_mac(INGRESS, VETH_MAC).expect("own MAC");
    let mut dest = Rs::new(rs_addr(v6, rs), fwd::NAT, [0; 6]);
    dest.port = RPORT;
    lb.service(0, SvcKey::new(proto, vip(v6), 80), sched, 0, &[dest]);
    lb
}

fn nat(v6: bool, udp: bool) {
    in_nat_bed("nat", move || {
        let proto = if udp { PROTO_UDP } else { PROTO_TCP };
        let mut lb = nat_director("nat", v6, proto, "rr", 0);
        let (c, v, r) = (client(v6, 0x0102), vip(v6), rs_addr(v6, 0));
        let mk = |src: IpAddr,
                  sport: u16,
                  dst: IpAddr,
                  dport: u16,
                  smac: [u8; 6],
                  dmac: [u8; 6],
                  payload: &[u8]| {
            if udp {
                let mut f = udp_frame(src, sport, dst, dport, payload);
                f[0..6].copy_from_slice(&dmac);
                f[6..12].copy_from_slice(&smac);
                f
            } else {
                tcp_frame_macs(smac, dmac, src, sport, dst, dport, Flags::Syn, payload)
            }
        };

        // Inbound: destination VIP:80 -> real server:8080, routed by the FIB.
        let f = mk(c, 33000, v, 80, CLIENT_MAC, DIR_MAC, b"request");
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(
            out.data,
            mk(c, 33000, r, RPORT, VETH_MAC, rs_mac(0), b"request")
        );
        let nk = NatKey {
            raddr: maps::addr16(r),
            caddr: maps::addr16(c),
            rport: RPORT.to_be(),
            cport: 33000u16.to_be(),
            proto,
            family: maps::family(r),
            pad0: 0,
        };
        let n = lb.l.nat(&nk).unwrap().expect("reply entry");
        assert_eq!((n.vaddr, u16::from_be(n.vport)), (maps::addr16(v), 80));

        // Reply: source real server:8080 -> VIP:80, TTL decremented, routed
        // to the client's gateway.
        let f = mk(r, RPORT, c, 33000, rs_mac(0), VETH_MAC, b"response!");
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = with_ttl(mk(v, 80, c, 33000, VETH_MAC, GW_MAC, b"response!"), 63);
        assert_eq!(out.data, want);
        let st = lb.l.svc_stats(0).unwrap();
        assert_eq!((st.conns, st.inpkts, st.outpkts), (1, 1, 1));
        let flow =
            lb.l.flow(&FlowKey::new(proto, c, 33000, v, 80))
                .unwrap()
                .expect("flow");
        assert_eq!(flow.flags & maps::FLOW_F_NOOUTPUT, 0, "a reply was seen");

        // A reply from a tuple the director never scheduled passes.
        let f = mk(r, RPORT, c, 33001, rs_mac(0), VETH_MAC, b"x");
        let out = lb.run(&f);
        assert_eq!((out.action, out.data), (action::PASS, f));
    });
}

#[test]
fn nat_tcp_v4() {
    nat(false, false);
}

#[test]
fn nat_tcp_v6() {
    nat(true, false);
}

#[test]
fn nat_udp_v4() {
    nat(false, true);
}

#[test]
fn nat_udp_v6() {
    nat(true, true);
}

/// A NAT real server whose next hop the control plane resolved
/// (`NEXTHOP`) is sent there without a FIB lookup when that next hop is on
/// the link the packet came in on; on another link the FIB decides.
#[test]
fn nat_uses_the_resolved_next_hop_on_the_same_link() {
    in_nat_bed("nat_uses_the_resolved_next_hop_on_the_same_link", || {
        let mut lb = nat_director("nat", false, PROTO_TCP, "rr", 0);
        let idx = Lb::dest_index(0, 0);
        // Test runs come in on the namespace's lo (ifindex 1); a MAC the
        // FIB would not give, to tell the two paths apart.
        let mut d = maps::Dest {
            addr: maps::addr16(rs_addr(false, 0)),
            port: RPORT.to_be(),
            family: maps::AF_INET,
            method: fwd::NAT,
            flags: maps::dest_flags::NEXTHOP,
            weight: 1,
            ifindex: 1,
            mac: rs_mac(7),
            smac: VETH_MAC,
            gue_port: 0,
            pad0: 0,
        };
        lb.l.set_dest(idx, &d).unwrap();
        let c = client(false, 0x0203);
        let (v, r) = (vip(false), rs_addr(false, 0));
        // A SYN from `cport` leaves by `action` from `smac` to `dmac`.
        let syn_leaves = |lb: &mut Lb, cport: u16, action: u32, smac, dmac| {
            let out = lb.run(&tcp_frame(c, cport, v, 80, Flags::Syn, b""));
            assert_eq!(out.action, action);
            let want = tcp_frame_macs(smac, dmac, c, cport, r, RPORT, Flags::Syn, b"");
            assert_eq!(out.data, want);
        };
        syn_leaves(&mut lb, 33000, action::TX, DIR_MAC, rs_mac(7));
        // The resolved next hop on another link: the FIB's answer.
        d.ifindex = 2;
        lb.l.set_dest(idx, &d).unwrap();
        syn_leaves(&mut lb, 33001, action::REDIRECT, VETH_MAC, rs_mac(0));
    });
}

#[test]
fn nat_without_a_resolved_neighbour_passes_the_rewritten_packet() {
    in_nat_bed(
        "nat_without_a_resolved_neighbour_passes_the_rewritten_packet",
        || {
            // Real server 5 (10.77.0.16) has no neighbour entry.
            let mut lb = nat_director("nat", false, PROTO_TCP, "rr", 5);
            let c = client(false, 9);
            let f = tcp_frame(c, 1234, vip(false), 80, Flags::Syn, b"");
            let out = lb.run(&f);
            assert_eq!(out.action, action::PASS);
            assert_eq!(
                out.data,
                tcp_frame(c, 1234, rs_addr(false, 5), RPORT, Flags::Syn, b"")
            );
            // The missing next hop is reported once for the control plane to
            // resolve (issue 13), and gone once taken.
            let again = lb.run(&f);
            assert_eq!(again.action, action::PASS);
            let hops = lb.l.take_missing_hops(16).expect("nh_missing");
            assert_eq!(hops, vec![rs_addr(false, 5)]);
            assert!(lb.l.take_missing_hops(16).expect("nh_missing").is_empty());
            assert_eq!(lb.l.missing_hops_full().expect("nh_missing_full"), 0);
        },
    );
}

#[test]
fn nat_tracks_tcp_state_in_both_directions() {
    in_nat_bed("nat_tracks_tcp_state_in_both_directions", || {
        let mut lb = nat_director("nat", false, PROTO_TCP, "wlc", 0);
        let (c, v, r) = (client(false, 77), vip(false), rs_addr(false, 0));
        let key = FlowKey::new(PROTO_TCP, c, 5555, v, 80);
        let inb = |f| tcp_frame(c, 5555, v, 80, f, b"");
        let out = |f| tcp_frame_macs(rs_mac(0), VETH_MAC, r, RPORT, c, 5555, f, b"");
        let mut step = |frame: Vec<u8>, state: u8, nooutput: bool| {
            assert_eq!(lb.run(&frame).action, action::REDIRECT);
            let fl = lb.l.flow(&key).unwrap().expect("flow");
            assert_eq!(fl.state, state);
            assert_eq!(fl.flags & maps::FLOW_F_NOOUTPUT != 0, nooutput);
        };
        step(inb(Flags::Syn), 3, true); // SYN_RECV, no reply yet
        step(out(Flags::Ack), 1, false); // the real server answers: ESTABLISHED
        step(inb(Flags::Ack), 1, false);
        // NAT uses the INPUT table once a reply was seen: a client FIN in
        // ESTABLISHED is CLOSE_WAIT (DR/TUN would say FIN_WAIT).
        step(inb(Flags::Fin), 7, false);
        step(out(Flags::Fin), 5, false); // OUTPUT fin in CLOSE_WAIT: TIME_WAIT
        let c = lb.l.dest_conns(Lb::dest_index(0, 0)).unwrap();
        assert_eq!((c.active, c.inactive), (0, 1));
    });
}

/// A mid-flow segment of an unknown NAT flow of a hash-scheduled service
/// (ECMP moved the flow here) is adopted with its reply entry: the key of
/// the reply (real server, client) follows from the packet and the hash's
/// choice, so the real server's replies are rewritten back to the VIP.
#[test]
fn nat_adopts_a_hashed_flow_mid_stream_with_its_reply_entry() {
    in_nat_bed(
        "nat_adopts_a_hashed_flow_mid_stream_with_its_reply_entry",
        || {
            let mut lb = nat_director("nat", false, PROTO_TCP, "mh", 0);
            let (c, v, r) = (client(false, 78), vip(false), rs_addr(false, 0));
            let key = FlowKey::new(PROTO_TCP, c, 5556, v, 80);
            let r1 = lb.run(&tcp_frame(c, 5556, v, 80, Flags::Ack, b"mid"));
            assert_eq!(r1.action, action::REDIRECT, "forwarded by the hash");
            let fl = lb.l.flow(&key).unwrap().expect("adopted");
            assert_eq!(fl.state, 1); // ESTABLISHED
            let nk = NatKey {
                raddr: maps::addr16(r),
                caddr: maps::addr16(c),
                rport: RPORT.to_be(),
                cport: 5556u16.to_be(),
                proto: PROTO_TCP,
                family: maps::family(r),
                pad0: 0,
            };
            let nat = lb.l.nat(&nk).unwrap().expect("reply entry");
            assert_eq!((nat.vaddr, u16::from_be(nat.vport)), (maps::addr16(v), 80));
            assert_eq!(lb.l.svc_flood(0).unwrap().adopted, 1);
            // The real server's reply leaves with the VIP as its source.
            let reply = tcp_frame_macs(rs_mac(0), VETH_MAC, r, RPORT, c, 5556, Flags::Ack, b"ok");
            let out = lb.run(&reply);
            assert_eq!(out.action, action::REDIRECT);
            assert_eq!(&out.data[26..30], &maps::addr16(v)[..4], "source rewritten");
            assert_eq!(
                &out.data[34..36],
                &80u16.to_be_bytes(),
                "source port rewritten"
            );
        },
    );
}

#[test]
fn attach_prefers_native_mode_and_falls_back_to_generic() {
    in_nat_bed(
        "attach_prefers_native_mode_and_falls_back_to_generic",
        || {
            let mut lb = Lb::new("attach").expect("root checked");
            // veth has native XDP; loopback has not (generic/skb mode).
            assert_eq!(
                lb.l.attach("rvsa", None).unwrap(),
                rvs_xdp::AttachMode::Driver
            );
            let mut other = Lb::new("attach").expect("root checked");
            assert_eq!(
                other.l.attach("lo", None).unwrap(),
                rvs_xdp::AttachMode::Skb
            );
            // A forced mode that the device cannot do is an error naming it.
            let mut third = Lb::new("attach").expect("root checked");
            let err = third
                .l
                .attach("lo", Some(rvs_xdp::AttachMode::Driver))
                .unwrap_err();
            assert!(err.to_string().contains("attach"), "{err}");
        },
    );
}

/// An ICMP error frame (IPv4 "fragmentation needed" / IPv6 "packet too
/// big", MTU 1400) from `src` to `dst` with TTL `ttl`, quoting `quoted`.
fn icmp_error(
    smac: [u8; 6],
    dmac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    quoted: &[u8],
) -> Vec<u8> {
    use etherparse::{Icmpv4Type, Icmpv6Type, icmpv4::DestUnreachableHeader};
    let b = etherparse::PacketBuilder::ethernet2(smac, dmac);
    let mut out = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b
            .ipv4(s.octets(), d.octets(), ttl)
            .icmpv4(Icmpv4Type::DestinationUnreachable(
                DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
            ))
            .write(&mut out, quoted)
            .unwrap(),
        (IpAddr::V6(s), IpAddr::V6(d)) => b
            .ipv6(s.octets(), d.octets(), ttl)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu: 1400 })
            .write(&mut out, quoted)
            .unwrap(),
        _ => unreachable!(),
    }
    out
}

/// ICMP errors about NAT flows (IPVS's ip_vs_in_icmp / ip_vs_out_icmp):
/// from the client's side about a reply, the error goes to the real server
/// with the outer destination, the quoted source address and port rewritten
/// to the real server's; from the real server's side about a forwarded
/// packet, it goes to the client from the VIP, quoting what the client
/// sent. Every checksum (outer IPv4, quoted IPv4 header, quoted TCP/UDP,
/// ICMP / ICMPv6 with its pseudo-header) equals a from-scratch computation
/// of the expected frame.
fn nat_icmp(v6: bool, udp: bool) {
    in_nat_bed("nat_icmp", move || {
        let proto = if udp { PROTO_UDP } else { PROTO_TCP };
        let mut lb = nat_director("nat_icmp", v6, proto, "rr", 0);
        let (c, v, r) = (client(v6, 0x0203), vip(v6), rs_addr(v6, 0));
        // A whole packet as IP would carry it (quoted in full).
        let ip = |src: IpAddr, sport: u16, dst: IpAddr, dport: u16| {
            if udp {
                udp_frame(src, sport, dst, dport, b"data")[14..].to_vec()
            } else {
                tcp_frame(src, sport, dst, dport, Flags::Ack, b"data")[14..].to_vec()
            }
        };
        let first = if udp {
            udp_frame(c, 33000, v, 80, b"q")
        } else {
            tcp_frame(c, 33000, v, 80, Flags::Syn, b"")
        };
        assert_eq!(lb.run(&first).action, action::REDIRECT);
        let router: IpAddr = if v6 {
            "fd78::1".parse().unwrap()
        } else {
            "10.78.200.1".parse().unwrap()
        };

        // Client side: "too big" about the reply VIP:80 -> client.
        let f = icmp_error(CLIENT_MAC, DIR_MAC, router, v, 64, &ip(v, 80, c, 33000));
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT, "v6 {v6} udp {udp}");
        let want = icmp_error(VETH_MAC, rs_mac(0), router, r, 64, &ip(r, RPORT, c, 33000));
        assert_eq!(out.data, want, "to the real server, v6 {v6} udp {udp}");

        // Real-server side: "too big" about client -> real server:8080.
        let f = icmp_error(rs_mac(0), VETH_MAC, r, c, 64, &ip(c, 33000, r, RPORT));
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = icmp_error(VETH_MAC, GW_MAC, v, c, 63, &ip(c, 33000, v, 80));
        assert_eq!(out.data, want, "to the client, v6 {v6} udp {udp}");
        let st = lb.l.svc_stats(0).unwrap();
        assert_eq!((st.inpkts, st.outpkts), (2, 1));

        // A quote truncated after the ports (no L4 checksum in it): the
        // addresses, ports and the ICMP checksum still follow.
        let cut = if v6 { 40 + 4 } else { 20 + 4 };
        let f = icmp_error(
            CLIENT_MAC,
            DIR_MAC,
            router,
            v,
            64,
            &ip(v, 80, c, 33000)[..cut],
        );
        let out = lb.run(&f);
        assert_eq!(out.action, action::REDIRECT);
        let want = icmp_error(
            VETH_MAC,
            rs_mac(0),
            router,
            r,
            64,
            &ip(r, RPORT, c, 33000)[..cut],
        );
        assert_eq!(out.data, want, "truncated quote, v6 {v6} udp {udp}");

        // About flows the director does not know: the kernel's.
        for f in [
            icmp_error(CLIENT_MAC, DIR_MAC, router, v, 64, &ip(v, 80, c, 33001)),
            icmp_error(rs_mac(0), VETH_MAC, r, c, 64, &ip(c, 33001, r, RPORT)),
        ] {
            let out = lb.run(&f);
            assert_eq!((out.action, out.data), (action::PASS, f));
        }
    });
}

#[test]
fn nat_icmp_errors_follow_the_flow_v4() {
    nat_icmp(false, false);
    nat_icmp(false, true);
}

#[test]
fn nat_icmp_errors_follow_the_flow_v6() {
    nat_icmp(true, false);
    nat_icmp(true, true);
}
