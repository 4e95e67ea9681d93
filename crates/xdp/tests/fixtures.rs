//! Packet fixtures through BPF_PROG_TEST_RUN, as Katran's tester does: an
//! input frame gives the expected XDP action and the expected output bytes.
//! Needs root (skips with a message otherwise).

mod common;

use std::net::IpAddr;

use common::*;
use rvs_xdp::action;
use rvs_xdp::maps::{self, FlowKey, PROTO_TCP, PROTO_UDP, SvcKey, fwd, svc_flags};

const VPORT: u16 = 80;

fn dr_service(lb: &mut Lb, v6: bool, n: u8) {
    let rs: Vec<Rs> = (0..n)
        .map(|i| Rs::new(rs_addr(v6, i), fwd::DR, rs_mac(i)))
        .collect();
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &rs);
}

fn dr(v6: bool) {
    let Some(mut lb) = Lb::new("dr") else { return };
    dr_service(&mut lb, v6, 1);
    let c = client(v6, 7);
    let f = tcp_frame(c, 40000, vip(v6), VPORT, Flags::Syn, b"");
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&f, rs_mac(0), DIR_MAC));
    // Data on the established flow goes the same way, payload untouched.
    let f = tcp_frame(
        c,
        40000,
        vip(v6),
        VPORT,
        Flags::Ack,
        b"GET / HTTP/1.0\r\n\r\n",
    );
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&f, rs_mac(0), DIR_MAC));
    let st = lb.l.dest_stats(Lb::dest_index(0, 0)).unwrap();
    assert_eq!((st.conns, st.inpkts), (1, 2));
    let ip_len = (f.len() - 14) as u64;
    let syn_len = if v6 { 40 + 20 } else { 20 + 20 };
    assert_eq!(st.inbytes, ip_len + syn_len);
}

#[test]
fn dr_v4() {
    dr(false);
}

#[test]
fn dr_v6() {
    dr(true);
}

#[test]
fn dr_keeps_a_vlan_tag() {
    let Some(mut lb) = Lb::new("dr_keeps_a_vlan_tag") else {
        return;
    };
    dr_service(&mut lb, false, 1);
    let f = tcp_frame(client(false, 1), 40000, vip(false), VPORT, Flags::Syn, b"");
    // Insert an 802.1Q tag (VLAN 42) after the MAC addresses.
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 42]);
    tagged.extend_from_slice(&f[12..]);
    let r = lb.run(&tagged);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&tagged, rs_mac(0), DIR_MAC));
}

fn tunnel(v6: bool, method: u8) {
    let Some(mut lb) = Lb::new("tunnel") else {
        return;
    };
    let mut rs = Rs::new(rs_addr(v6, 3), method, rs_mac(3));
    rs.gue_port = 6080;
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[rs]);
    let c = client(v6, 9);
    let f = tcp_frame(c, 40001, vip(v6), VPORT, Flags::Syn, b"hello");
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    let inner = &f[14..];
    let mut want = with_macs(&f[..14], rs_mac(3), DIR_MAC);
    let gue = method == fwd::TUN_GUE;
    let extra = if gue { 8 + 4 } else { 0 };
    match rs_addr(v6, 3) {
        IpAddr::V4(a) => want.extend(outer4(inner, if gue { 17 } else { 4 }, extra, a)),
        IpAddr::V6(a) => want.extend(outer6(inner, if gue { 17 } else { 41 }, extra, a)),
    }
    if gue {
        want.extend_from_slice(&gue_sport(c, 40001, VPORT, PROTO_TCP).to_be_bytes());
        want.extend_from_slice(&6080u16.to_be_bytes());
        want.extend_from_slice(&((inner.len() + 12) as u16).to_be_bytes());
        want.extend_from_slice(&[0, 0]); // zero UDP checksum
        want.extend_from_slice(&[0, if v6 { 41 } else { 4 }, 0, 0]);
    }
    want.extend_from_slice(inner);
    assert_eq!(r.data, want);
}

cases! { tunnel;
    ipip_v4(false, fwd::TUN_IPIP),
    ipip_v6(true, fwd::TUN_IPIP),
    gue_v4(false, fwd::TUN_GUE),
    gue_v6(true, fwd::TUN_GUE),
}

/// The frame the director sends for a TCP packet with `payload` from
/// client 9 over GRE or Geneve (`method`), with or without the checksum;
/// asserts every header byte and that the checksum is the Internet
/// checksum of what it covers (computed here, not by the program).
fn gre_geneve(v6: bool, method: u8, csum: bool, payload: &[u8]) {
    let Some(mut lb) = Lb::new("gre_geneve") else {
        return;
    };
    gre_geneve_on(&mut lb, v6, method, csum, payload);
}

fn gre_geneve_on(lb: &mut Lb, v6: bool, method: u8, csum: bool, payload: &[u8]) {
    let mut rs = Rs::new(rs_addr(v6, 3), method, rs_mac(3));
    if csum {
        rs.flags = maps::dest_flags::TUN_CSUM;
    }
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[rs]);
    let c = client(v6, 9);
    let f = tcp_frame(c, 40001, vip(v6), VPORT, Flags::Syn, payload);
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    let inner = &f[14..];
    let ethertype: [u8; 2] = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    let geneve = method == fwd::TUN_GENEVE;
    let (proto, extra) = if geneve {
        (17, 8 + 8)
    } else {
        (47, 4 + if csum { 4 } else { 0 })
    };
    let mut want = with_macs(&f[..14], rs_mac(3), DIR_MAC);
    let outer = match rs_addr(v6, 3) {
        IpAddr::V4(a) => outer4(inner, proto, extra, a),
        IpAddr::V6(a) => outer6(inner, proto, extra, a),
    };
    want.extend_from_slice(&outer);
    let tun_at = want.len();
    if geneve {
        want.extend_from_slice(&gue_sport(c, 40001, VPORT, PROTO_TCP).to_be_bytes());
        want.extend_from_slice(&6081u16.to_be_bytes());
        want.extend_from_slice(&((inner.len() + 16) as u16).to_be_bytes());
        want.extend_from_slice(&[0, 0]); // checksum, filled below
        // Version 0, no options, O = C = 0, protocol, VNI 0, reserved.
        want.extend_from_slice(&[0, 0]);
        want.extend_from_slice(&ethertype);
        want.extend_from_slice(&[0, 0, 0, 0]);
    } else {
        want.extend_from_slice(&[if csum { 0x80 } else { 0 }, 0]);
        want.extend_from_slice(&ethertype);
        if csum {
            want.extend_from_slice(&[0, 0, 0, 0]); // checksum, reserved1
        }
    }
    want.extend_from_slice(inner);
    if csum {
        let covered = &want[tun_at..];
        let sum = if geneve {
            // The UDP pseudo-header: outer addresses, protocol, length.
            let mut ph = Vec::new();
            let (src, dst) = if v6 {
                (22..38, 38..54)
            } else {
                (26..30, 30..34)
            };
            ph.extend_from_slice(&want[src]);
            ph.extend_from_slice(&want[dst]);
            ph.extend_from_slice(&[0, 17]);
            ph.extend_from_slice(&(covered.len() as u16).to_be_bytes());
            ph.extend_from_slice(covered);
            inet_csum(&ph)
        } else {
            inet_csum(covered)
        };
        let at = tun_at + if geneve { 6 } else { 4 };
        want[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        assert_ne!(sum, 0, "a checksum computed to 0 is sent as 0xffff");
    }
    assert_eq!(r.data, want);
}

#[test]
fn gre_v4() {
    gre_geneve(false, fwd::TUN_GRE, false, b"hello");
}

#[test]
fn gre_v6() {
    gre_geneve(true, fwd::TUN_GRE, false, b"hello");
}

#[test]
fn gre_csum_v4() {
    gre_geneve(false, fwd::TUN_GRE, true, b"hello");
}

#[test]
fn gre_csum_v6() {
    gre_geneve(true, fwd::TUN_GRE, true, b"hello");
}

#[test]
fn geneve_v4() {
    gre_geneve(false, fwd::TUN_GENEVE, false, b"hello");
}

#[test]
fn geneve_v6() {
    gre_geneve(true, fwd::TUN_GENEVE, false, b"hello");
}

#[test]
fn geneve_csum_v4() {
    gre_geneve(false, fwd::TUN_GENEVE, true, b"hello");
}

#[test]
fn geneve_csum_v6() {
    gre_geneve(true, fwd::TUN_GENEVE, true, b"hello");
}

/// The checksum sums the packet in 512-byte chunks: payload lengths around
/// the chunk boundaries, odd ones, and a full-size frame.
#[test]
fn tunnel_csum_across_chunks() {
    let Some(mut lb) = Lb::new("tunnel_csum_across_chunks") else {
        return;
    };
    for len in [
        0usize, 1, 3, 431, 432, 433, 435, 436, 437, 443, 444, 445, 943, 944, 945, 1400, 1440,
    ] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        for v6 in [false, true] {
            for csum in [false, true] {
                gre_geneve_on(&mut lb, v6, fwd::TUN_GRE, csum, &payload);
                gre_geneve_on(&mut lb, v6, fwd::TUN_GENEVE, csum, &payload);
            }
        }
    }
}

/// An IP total length longer than the frame or shorter than the header
/// (which the kernel's ip_rcv drops) is dropped, not tunnelled with
/// lengths and a checksum made from it.
#[test]
fn tunnel_drops_a_bad_total_length() {
    let Some(mut lb) = Lb::new("tunnel_drops_a_bad_total_length") else {
        return;
    };
    for method in [fwd::TUN_GRE, fwd::TUN_GENEVE, fwd::TUN_IPIP] {
        let mut rs = Rs::new(rs_addr(false, 3), method, rs_mac(3));
        rs.flags = maps::dest_flags::TUN_CSUM;
        lb.service(0, SvcKey::new(PROTO_TCP, vip(false), VPORT), "rr", 0, &[rs]);
        for len in [0xfff7u16, 19] {
            let mut f = tcp_frame(client(false, 9), 40001, vip(false), VPORT, Flags::Syn, b"x");
            f[16..18].copy_from_slice(&len.to_be_bytes());
            fix_ip4_csum(&mut f, 14);
            let r = lb.run(&f);
            assert_ne!(r.action, action::TX, "method {method}, length {len}");
        }
    }
}

/// GUE with --tun-csum carries the outer UDP checksum too.
#[test]
fn gue_csum() {
    let Some(mut lb) = Lb::new("gue_csum") else {
        return;
    };
    for v6 in [false, true] {
        let mut rs = Rs::new(rs_addr(v6, 3), fwd::TUN_GUE, rs_mac(3));
        rs.gue_port = 6080;
        rs.flags = maps::dest_flags::TUN_CSUM;
        lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[rs]);
        let f = tcp_frame(client(v6, 9), 40001, vip(v6), VPORT, Flags::Syn, b"odd");
        let r = lb.run(&f);
        assert_eq!(r.action, action::TX);
        let udp = 14 + if v6 { 40 } else { 20 };
        let (src, dst) = if v6 {
            (22..38, 38..54)
        } else {
            (26..30, 30..34)
        };
        let mut ph = r.data[src].to_vec();
        ph.extend_from_slice(&r.data[dst]);
        ph.extend_from_slice(&[0, 17]);
        ph.extend_from_slice(&((r.data.len() - udp) as u16).to_be_bytes());
        ph.extend_from_slice(&r.data[udp..]);
        assert_ne!(&r.data[udp + 6..udp + 8], &[0, 0], "a checksum is present");
        assert_eq!(inet_csum(&ph), 0, "the UDP checksum verifies");
        assert_eq!(&r.data[udp + 8 + 4..], &f[14..]);
    }
}

#[test]
fn gue_source_port_follows_the_flow() {
    let Some(mut lb) = Lb::new("gue_source_port_follows_the_flow") else {
        return;
    };
    let mut rs = Rs::new(rs_addr(false, 0), fwd::TUN_GUE, rs_mac(0));
    rs.gue_port = 6080;
    lb.service(0, SvcKey::new(PROTO_TCP, vip(false), VPORT), "rr", 0, &[rs]);
    let mut ports = std::collections::HashSet::new();
    for i in 0..64u32 {
        let f = tcp_frame(
            client(false, i),
            30000 + i as u16,
            vip(false),
            VPORT,
            Flags::Syn,
            b"",
        );
        let r = lb.run(&f);
        assert_eq!(r.action, action::TX);
        let sport = u16::from_be_bytes([r.data[34], r.data[35]]);
        assert!(sport >= 0x8000);
        ports.insert(sport);
    }
    assert!(
        ports.len() > 48,
        "flows spread over source ports: {}",
        ports.len()
    );
}

#[test]
fn non_vip_traffic_passes_untouched() {
    let Some(mut lb) = Lb::new("non_vip_traffic_passes_untouched") else {
        return;
    };
    dr_service(&mut lb, false, 2);
    let other: IpAddr = "10.77.0.99".parse().unwrap();
    let frames = vec![
        // another address, another port, another protocol on the VIP
        tcp_frame(client(false, 1), 1000, other, VPORT, Flags::Syn, b""),
        tcp_frame(client(false, 1), 1000, vip(false), 81, Flags::Syn, b""),
        udp_frame(client(false, 1), 1000, vip(false), VPORT, b"x"),
        tcp_frame(client(true, 1), 1000, vip(true), VPORT, Flags::Syn, b""),
        // ARP
        {
            let mut f = with_macs(&[0u8; 14], [0xff; 6], CLIENT_MAC);
            f[12..14].copy_from_slice(&[0x08, 0x06]);
            f.extend_from_slice(&[0u8; 28]);
            f
        },
    ];
    for f in frames {
        let r = lb.run(&f);
        assert_eq!(r.action, action::PASS);
        assert_eq!(r.data, f);
    }
}

#[test]
fn truncated_frames_pass_at_every_boundary() {
    let Some(mut lb) = Lb::new("truncated_frames_pass_at_every_boundary") else {
        return;
    };
    dr_service(&mut lb, false, 1);
    dr_service(&mut lb, true, 1);
    for v6 in [false, true] {
        let f = tcp_frame(client(v6, 5), 2000, vip(v6), VPORT, Flags::Syn, b"");
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 7]);
        tagged.extend_from_slice(&f[12..]);
        for full in [&f, &tagged] {
            // The kernel refuses test frames shorter than an Ethernet header.
            for len in 14..full.len() {
                let cut = &full[..len];
                let r = lb.run(cut);
                assert_eq!(r.action, action::PASS, "v6 {v6} len {len}");
                assert_eq!(r.data, cut);
            }
            let key = FlowKey::new(PROTO_TCP, client(v6, 5), 2000, vip(v6), VPORT);
            assert_eq!(lb.l.flow(&key).unwrap(), None, "no flow from a cut frame");
            // The whole frame is forwarded.
            assert_eq!(lb.run(full).action, action::TX);
            lb.l.remove_flow(&key).unwrap();
        }
    }
}

#[test]
fn malformed_ip_headers_pass() {
    let Some(mut lb) = Lb::new("malformed_ip_headers_pass") else {
        return;
    };
    dr_service(&mut lb, false, 1);
    let f = tcp_frame(client(false, 5), 2000, vip(false), VPORT, Flags::Syn, b"");
    // IHL 4 (< 5), wrong version, IHL 15 beyond the frame.
    for (i, byte) in [0x44u8, 0x65, 0x4f].into_iter().enumerate() {
        let mut m = f.clone();
        m[14] = byte;
        let r = lb.run(&m);
        assert_eq!(r.action, action::PASS, "case {i}");
        assert_eq!(r.data, m);
    }
}

#[test]
fn ipv4_options_are_skipped_by_ihl() {
    let Some(mut lb) = Lb::new("ipv4_options_are_skipped_by_ihl") else {
        return;
    };
    let mut rs = Rs::new(rs_addr(false, 0), fwd::TUN_IPIP, rs_mac(0));
    rs.gue_port = 0;
    lb.service(0, SvcKey::new(PROTO_TCP, vip(false), VPORT), "rr", 0, &[rs]);
    let f = tcp_frame(client(false, 2), 3000, vip(false), VPORT, Flags::Syn, b"");
    // 8 bytes of options (NOP x3, then a Router Alert 94 04 00 00, EOL):
    // read as ports they would not match the service.
    let mut o = f[..34].to_vec();
    o.extend_from_slice(&[0x01, 0x01, 0x01, 0x94, 0x04, 0x00, 0x00, 0x00]);
    o.extend_from_slice(&f[34..]);
    o[14] = 0x47;
    let tot = u16::from_be_bytes([o[16], o[17]]) + 8;
    o[16..18].copy_from_slice(&tot.to_be_bytes());
    fix_ip4_csum(&mut o, 14);
    let r = lb.run(&o);
    assert_eq!(r.action, action::TX);
    let inner = &o[14..];
    let mut want = with_macs(&o[..14], rs_mac(0), DIR_MAC);
    let IpAddr::V4(a) = rs_addr(false, 0) else {
        unreachable!()
    };
    want.extend(outer4(inner, 4, 0, a));
    want.extend_from_slice(inner);
    assert_eq!(r.data, want);
}

#[test]
fn ipv4_fragments_pass_to_the_kernel() {
    let Some(mut lb) = Lb::new("ipv4_fragments_pass_to_the_kernel") else {
        return;
    };
    let rs = [Rs::new(rs_addr(false, 0), fwd::DR, rs_mac(0))];
    lb.service(0, SvcKey::new(PROTO_UDP, vip(false), VPORT), "rr", 0, &rs);
    let f = udp_frame(client(false, 3), 4000, vip(false), VPORT, &[7u8; 64]);
    // First fragment (MF), a middle one (MF + offset), the last (offset).
    for frag in [0x2000u16, 0x2010, 0x0010] {
        let mut m = f.clone();
        m[20..22].copy_from_slice(&frag.to_be_bytes());
        fix_ip4_csum(&mut m, 14);
        let r = lb.run(&m);
        assert_eq!(r.action, action::PASS, "frag {frag:#x}");
        assert_eq!(r.data, m);
    }
    // Unfragmented with DF: forwarded.
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
}

#[test]
fn tcp_without_syn_for_an_unknown_flow_passes() {
    let Some(mut lb) = Lb::new("tcp_without_syn_for_an_unknown_flow_passes") else {
        return;
    };
    dr_service(&mut lb, false, 2);
    for flags in [Flags::Ack, Flags::Fin, Flags::Rst, Flags::SynRst] {
        let f = tcp_frame(client(false, 4), 5000, vip(false), VPORT, flags, b"");
        let r = lb.run(&f);
        assert_eq!(r.action, action::PASS, "{flags:?}");
        assert_eq!(r.data, f);
        let key = FlowKey::new(PROTO_TCP, client(false, 4), 5000, vip(false), VPORT);
        assert_eq!(lb.l.flow(&key).unwrap(), None);
    }
}

#[test]
fn flow_hit_reuses_the_real_server_and_tracks_tcp_state() {
    let Some(mut lb) = Lb::new("flow_hit_reuses_the_real_server_and_tracks_tcp_state") else {
        return;
    };
    dr_service(&mut lb, false, 3);
    let (c, v) = (client(false, 10), vip(false));
    let key = FlowKey::new(PROTO_TCP, c, 6000, v, VPORT);
    let r = lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Syn, b""));
    assert_eq!(r.data[..6], rs_mac(0));
    let flow = lb.l.flow(&key).unwrap().unwrap();
    assert_eq!((flow.dest, flow.state), (Lb::dest_index(0, 0), 3)); // SYN_RECV
    assert_eq!(flow.flags, maps::FLOW_F_NOOUTPUT);
    // Other clients move the rr cursor on.
    for i in 0..2 {
        let r = lb.run(&tcp_frame(
            client(false, 20 + i),
            6000,
            v,
            VPORT,
            Flags::Syn,
            b"",
        ));
        assert_eq!(r.data[..6], rs_mac(1 + i as u8));
    }
    // The first client's packets still go to server 0; states follow
    // IPVS's INPUT_ONLY table: ACK -> ESTABLISHED, FIN -> FIN_WAIT.
    for (flags, state) in [
        (Flags::Ack, 1),
        (Flags::Ack, 1),
        (Flags::Fin, 4),
        (Flags::Ack, 4),
    ] {
        let r = lb.run(&tcp_frame(c, 6000, v, VPORT, flags, b"data"));
        assert_eq!(r.action, action::TX);
        assert_eq!(r.data[..6], rs_mac(0));
        assert_eq!(lb.l.flow(&key).unwrap().unwrap().state, state, "{flags:?}");
    }
    // RST closes; a new SYN on a closed flow is scheduled afresh (rr: next
    // server is 0 again after 0, 1, 2).
    lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Rst, b""));
    assert_eq!(lb.l.flow(&key).unwrap().unwrap().state, 6); // CLOSE
    let r = lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Syn, b""));
    assert_eq!(r.data[..6], rs_mac(0));
    assert_eq!(lb.l.svc_stats(0).unwrap().conns, 4);
}

#[test]
fn unavailable_server_drops_its_flows_and_quiesced_keeps_them() {
    let Some(mut lb) = Lb::new("unavailable_server_drops_its_flows_and_quiesced_keeps_them") else {
        return;
    };
    dr_service(&mut lb, false, 2);
    let (c, v) = (client(false, 11), vip(false));
    lb.run(&tcp_frame(c, 7000, v, VPORT, Flags::Syn, b""));
    // Quiesce server 0 (weight 0): the flow continues.
    let mut rs: Vec<Rs> = (0..2)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
        .collect();
    rs[0].weight = 0;
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "rr", 0, &rs);
    let r = lb.run(&tcp_frame(c, 7000, v, VPORT, Flags::Ack, b""));
    assert_eq!(
        (r.action, r.data[..6].to_vec()),
        (action::TX, rs_mac(0).to_vec())
    );
    // New clients avoid it.
    for i in 0..3 {
        let r = lb.run(&tcp_frame(
            client(false, 30 + i),
            7000,
            v,
            VPORT,
            Flags::Syn,
            b"",
        ));
        assert_eq!(r.data[..6], rs_mac(1));
    }
    // Deleted (unavailable): its flows are dropped, a new SYN is rescheduled.
    rs[0].flags = maps::dest_flags::UNAVAILABLE;
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "rr", 0, &rs);
    let f = tcp_frame(c, 7000, v, VPORT, Flags::Ack, b"");
    assert_eq!(lb.run(&f).action, action::DROP);
    let r = lb.run(&tcp_frame(c, 7000, v, VPORT, Flags::Syn, b""));
    assert_eq!(r.data[..6], rs_mac(1));
}

#[test]
fn no_available_server_passes() {
    let Some(mut lb) = Lb::new("no_available_server_passes") else {
        return;
    };
    let rs = [Rs::new(rs_addr(false, 0), fwd::DR, rs_mac(0)).weight(0)];
    lb.service(0, SvcKey::new(PROTO_TCP, vip(false), VPORT), "rr", 0, &rs);
    let f = tcp_frame(client(false, 1), 1, vip(false), VPORT, Flags::Syn, b"");
    let r = lb.run(&f);
    assert_eq!((r.action, r.data), (action::PASS, f));
}

#[test]
fn udp_one_packet_scheduling_keeps_no_flow() {
    let Some(mut lb) = Lb::new("udp_one_packet_scheduling_keeps_no_flow") else {
        return;
    };
    let rs: Vec<Rs> = (0..2)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
        .collect();
    let key = SvcKey::new(PROTO_UDP, vip(false), 53);
    lb.service(0, key, "rr", svc_flags::ONEPACKET, &rs);
    let c = client(false, 1);
    let macs: Vec<u8> = (0..4)
        .map(|_| lb.run(&udp_frame(c, 9999, vip(false), 53, b"q")).data[5])
        .collect();
    assert_eq!(macs, vec![0, 1, 0, 1]);
    let fk = FlowKey::new(PROTO_UDP, c, 9999, vip(false), 53);
    assert_eq!(lb.l.flow(&fk).unwrap(), None);
    // Without -o the datagrams of one client tuple stick to one server.
    lb.service(0, key, "rr", 0, &rs);
    let macs: Vec<u8> = (0..4)
        .map(|_| lb.run(&udp_frame(c, 9999, vip(false), 53, b"q")).data[5])
        .collect();
    assert!(macs.iter().all(|&m| m == macs[0]));
    assert!(lb.l.flow(&fk).unwrap().is_some());
}

#[test]
fn expired_flows_follow_the_state_timeouts() {
    let Some(mut lb) = Lb::new("expired_flows_follow_the_state_timeouts") else {
        return;
    };
    // ESTABLISHED lasts 900 s, SYN_RECV 0 s: a half-open flow expires at
    // once (the coarse clock ticks within milliseconds).
    let mut cfg = maps::Config::ipvs_defaults();
    cfg.tcp_timeouts[3] = 0;
    cfg.udp_timeout = 0;
    lb.l.set_config(&cfg).unwrap();
    dr_service(&mut lb, false, 2);
    let rs: Vec<Rs> = (0..2)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
        .collect();
    lb.service(1, SvcKey::new(PROTO_UDP, vip(false), 53), "rr", 0, &rs);
    let (c, v) = (client(false, 12), vip(false));
    assert_eq!(
        lb.run(&tcp_frame(c, 8000, v, VPORT, Flags::Syn, b"")).data[5],
        0
    );
    assert_eq!(lb.run(&udp_frame(c, 8000, v, 53, b"q")).data[5], 0);
    // A flow that reached ESTABLISHED stays.
    assert_eq!(
        lb.run(&tcp_frame(c, 8001, v, VPORT, Flags::Syn, b"")).data[5],
        1
    );
    assert_eq!(
        lb.run(&tcp_frame(c, 8001, v, VPORT, Flags::Ack, b"")).data[5],
        1
    );
    std::thread::sleep(std::time::Duration::from_millis(30));
    // Expired: a non-SYN is unknown to the director and passes ...
    let f = tcp_frame(c, 8000, v, VPORT, Flags::Ack, b"");
    assert_eq!(lb.run(&f).action, action::PASS);
    // ... a SYN is scheduled afresh at once (no one-second SYN drop), and
    // a UDP datagram too.
    assert_eq!(
        lb.run(&tcp_frame(c, 8000, v, VPORT, Flags::Syn, b"")).data[5],
        0
    );
    assert_eq!(lb.run(&udp_frame(c, 8000, v, 53, b"q")).data[5], 1);
    // The established flow is untouched by the short SYN_RECV timeout.
    let r = lb.run(&tcp_frame(c, 8001, v, VPORT, Flags::Ack, b""));
    assert_eq!((r.action, r.data[5]), (action::TX, 1));
}

#[test]
fn flow_ages_are_jiffies_at_the_measured_hz() {
    let Some(mut lb) = Lb::new("flow_ages_are_jiffies_at_the_measured_hz") else {
        return;
    };
    let hz = rvs_xdp::kernel_hz().unwrap();
    assert!([100, 250, 300, 1000].contains(&hz), "hz {hz}");
    dr_service(&mut lb, false, 1);
    let (c, v) = (client(false, 13), vip(false));
    let key = FlowKey::new(PROTO_TCP, c, 9000, v, VPORT);
    // Each stamp is bracketed by clock reads, so a thread descheduled
    // around a run (a loaded machine) widens the bounds instead of failing.
    let t0a = std::time::Instant::now();
    lb.run(&tcp_frame(c, 9000, v, VPORT, Flags::Syn, b""));
    let t0b = std::time::Instant::now();
    let j0 = lb.l.flow(&key).unwrap().unwrap().last_seen;
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t1a = std::time::Instant::now();
    lb.run(&tcp_frame(c, 9000, v, VPORT, Flags::Ack, b""));
    let t1b = std::time::Instant::now();
    let j1 = lb.l.flow(&key).unwrap().unwrap().last_seen;
    let hz = f64::from(hz);
    let (least, most) = (
        (t1a - t0b).as_secs_f64() * hz - 1.0,
        (t1b - t0a).as_secs_f64() * hz + 1.0,
    );
    let got = (j1 - j0) as f64;
    assert!(
        got >= least && got <= most,
        "{got} jiffies, expected {least:.1}..={most:.1}"
    );
}

#[test]
fn syn_flood_guard_forwards_hashed_flows_without_entries() {
    let Some(mut lb) = Lb::new("syn_flood_guard_forwards_hashed_flows_without_entries") else {
        return;
    };
    let mut cfg = maps::Config::ipvs_defaults();
    cfg.max_new_flows = 3;
    lb.l.set_config(&cfg).unwrap();
    let rs: Vec<Rs> = (0..4)
        .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
        .collect();
    let v = vip(false);
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "mh", 0, &rs);
    lb.service(1, SvcKey::new(PROTO_TCP, v, 8080), "rr", 0, &rs);
    let (mut core, dests) = lb.core_scheduler(0);
    // Within one second (the window is per CPU; the test runs on one).
    let mut with_entry = 0;
    for i in 0..8u32 {
        let c = client(false, 100 + i);
        let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, 1000, v, VPORT))
            .map(|d| rs_mac((d % 1000) as u8));
        let r = lb.run(&tcp_frame(c, 1000, v, VPORT, Flags::Syn, b""));
        assert_eq!(
            (r.action, Some(r.data[..6].try_into().unwrap())),
            (action::TX, want)
        );
        let has = lb.flow_dest(PROTO_TCP, c, 1000, v, VPORT).is_some();
        with_entry += usize::from(has);
        // Stateless or not, the client's next segment reaches the same server.
        let r = lb.run(&tcp_frame(c, 1000, v, VPORT, Flags::Ack, b"x"));
        assert_eq!(
            (r.action, Some(r.data[..6].try_into().unwrap())),
            (action::TX, want)
        );
    }
    assert!(
        (3..8).contains(&with_entry),
        "entries only up to the limit (unless the second turned): {with_entry}"
    );
    // rr needs its entries whatever the rate.
    let c = client(false, 200);
    lb.run(&tcp_frame(c, 1000, v, 8080, Flags::Syn, b""));
    assert!(lb.flow_dest(PROTO_TCP, c, 1000, v, 8080).is_some());
    // Without the guard a non-SYN for an unknown flow of the mh service is
    // adopted (an entry on the hash's server); rr's passes, as in IPVS.
    lb.l.set_config(&maps::Config::ipvs_defaults()).unwrap();
    let c = client(false, 300);
    let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, 1000, v, VPORT));
    let f = tcp_frame(c, 1000, v, VPORT, Flags::Ack, b"");
    assert_eq!(lb.run(&f).action, action::TX);
    assert_eq!(lb.flow_dest(PROTO_TCP, c, 1000, v, VPORT), want);
    let f = tcp_frame(c, 1000, v, 8080, Flags::Ack, b"");
    assert_eq!(lb.run(&f).action, action::PASS);
}

/// A TCP segment without SYN of no known flow (ECMP moved the flow here
/// from another director of the fleet) of a hash-scheduled service is
/// forwarded to the server the hash names and adopted: it gets an
/// ESTABLISHED entry in the flow table (not the embryonic one), counted, so
/// a later change of the real servers keeps it on its server. A RST is
/// forwarded without an entry; a non-hash service's segment passes.
#[test]
fn hashed_services_adopt_unknown_mid_flow_segments() {
    for sched in ["mh", "sh"] {
        let Some(mut lb) = Lb::new("hashed_services_adopt_unknown_mid_flow_segments") else {
            return;
        };
        let rs: Vec<Rs> = (0..4)
            .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
            .collect();
        let v = vip(false);
        lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), sched, 0, &rs);
        lb.service(1, SvcKey::new(PROTO_TCP, v, 8080), "wlc", 0, &rs);
        let (mut core, dests) = lb.core_scheduler(0);
        let mut adopted = Vec::new();
        for i in 0..16u32 {
            let c = client(false, 100 + i);
            let cport = 2000 + i as u16;
            let want = Lb::core_choice(core.as_mut(), &dests, 0, &sched_input(c, cport, v, VPORT))
                .expect("a server");
            let r = lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Ack, b"mid"));
            assert_eq!(
                (r.action, &r.data[..6]),
                (action::TX, &rs_mac((want % 1000) as u8)[..]),
                "{sched}: forwarded by the hash"
            );
            let key = FlowKey::new(PROTO_TCP, c, cport, v, VPORT);
            assert_eq!(lb.l.table_flow(&key, true).unwrap(), None, "not embryonic");
            let e = lb.l.table_flow(&key, false).unwrap().expect("adopted");
            assert_eq!((e.dest, e.state), (want, 1), "{sched}: ESTABLISHED");
            adopted.push((c, cport, want));
        }
        let fl = lb.l.svc_flood(0).unwrap();
        assert_eq!(
            (fl.adopted, fl.unknown, fl.embryonic),
            (16, 0, 0),
            "{sched}"
        );
        let active: u32 = (0..4)
            .map(|p| lb.l.dest_conns(Lb::dest_index(0, p)).unwrap().active)
            .sum();
        assert_eq!(active, 16, "{sched}: counted as active flows");
        // A new real server changes the hash; the adopted flows stay.
        let more: Vec<Rs> = (0..6)
            .map(|i| Rs::new(rs_addr(false, i), fwd::DR, rs_mac(i)))
            .collect();
        lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), sched, 0, &more);
        for &(c, cport, want) in &adopted {
            let r = lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Ack, b"more"));
            assert_eq!(
                (r.action, &r.data[..6]),
                (action::TX, &rs_mac((want % 1000) as u8)[..]),
                "{sched}: kept on its server"
            );
        }
        // A RST of no known flow: forwarded, no entry.
        let c = client(false, 250);
        let r = lb.run(&tcp_frame(c, 3000, v, VPORT, Flags::Rst, b""));
        assert_eq!(r.action, action::TX, "{sched}");
        assert_eq!(lb.flow_dest(PROTO_TCP, c, 3000, v, VPORT), None);
        // wlc: no hash to go by, passed and counted.
        let r = lb.run(&tcp_frame(c, 3001, v, 8080, Flags::Ack, b""));
        assert_eq!(r.action, action::PASS, "{sched}");
        assert_eq!(lb.flow_dest(PROTO_TCP, c, 3001, v, 8080), None);
        let fl = lb.l.svc_flood(1).unwrap();
        assert_eq!((fl.adopted, fl.unknown), (0, 1));
        assert_eq!(lb.l.svc_flood(0).unwrap().adopted, 16);
    }
}

/// Unarmed (new flows slower than the arming rate), a SYN's flow goes
/// straight to the flow table (SYN_RECV, one insert) and the ACK that
/// completes the handshake makes it ESTABLISHED there, on the fast path:
/// nothing in the embryonic table, nothing
/// promoted. Once new flows come faster than `max_new_flows` the embryonic
/// tables are armed: a SYN makes an entry there only, its ACK moves it to
/// the flow table, and a flood of SYNs from more clients than the embryonic
/// table holds churns that table alone: the established flows keep their
/// entries and servers, and the counters say what happened (IPv4 and IPv6).
#[test]
fn syn_flood_churns_only_the_embryonic_table() {
    for v6 in [false, true] {
        let Some(mut lb) = Lb::new("syn_flood_churns_only_the_embryonic_table") else {
            return;
        };
        dr_service(&mut lb, v6, 3);
        let v = vip(v6);
        let (c, d0) = (client(v6, 10), Lb::dest_index(0, 0));
        let key = FlowKey::new(PROTO_TCP, c, 6000, v, VPORT);
        lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Syn, b""));
        assert_eq!(lb.l.table_flow(&key, true).unwrap(), None, "v6 {v6}");
        let e = lb.l.table_flow(&key, false).unwrap().expect("flow entry");
        assert_eq!((e.dest, e.state), (d0, 3)); // SYN_RECV
        // SYN_RECV is active, as in IPVS.
        assert_eq!(lb.l.dest_conns(d0).unwrap().active, 1);
        let r = lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Ack, b""));
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
        let f = lb.l.table_flow(&key, false).unwrap().expect("flow entry");
        assert_eq!((f.dest, f.state), (d0, 1)); // ESTABLISHED
        assert_eq!(lb.l.dest_conns(d0).unwrap().active, 1);
        let r = lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Ack, b"data"));
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
        let fl = lb.l.svc_flood(0).unwrap();
        assert_eq!((fl.embryonic, fl.promoted, fl.guarded), (0, 0, 0));
        // The client's FIN of a second such flow (IPv4: on the fast path):
        // FIN_WAIT, active to inactive.
        let c3 = client(v6, 12);
        let key3 = FlowKey::new(PROTO_TCP, c3, 6002, v, VPORT);
        for flags in [Flags::Syn, Flags::Ack, Flags::Ack, Flags::Fin] {
            assert_eq!(
                lb.run(&tcp_frame(c3, 6002, v, VPORT, flags, b"")).action,
                action::TX
            );
        }
        let f3 = lb.l.table_flow(&key3, false).unwrap().expect("flow entry");
        assert_eq!(f3.state, 4); // FIN_WAIT
        assert_ne!(f3.dest, d0, "rr");
        let n = lb.l.dest_conns(f3.dest).unwrap();
        assert_eq!((n.active, n.inactive), (0, 1));

        // Armed: more than one new flow per CPU per second (rr: no guard).
        lb.set_max_new_flows(1);
        // 4096 spoofed SYNs (the embryonic table holds 1024, the flow
        // table 4096). The first may come before the table is armed (a
        // new second after the flow above).
        for i in 0..4096u32 {
            let src = client(v6, 1000 + i);
            lb.run(&tcp_frame(src, 1000 + i as u16, v, VPORT, Flags::Syn, b""));
        }
        // A legitimate handshake while armed: embryonic, then promoted.
        let c2 = client(v6, 11);
        let key2 = FlowKey::new(PROTO_TCP, c2, 6001, v, VPORT);
        lb.run(&tcp_frame(c2, 6001, v, VPORT, Flags::Syn, b""));
        assert_eq!(lb.l.table_flow(&key2, false).unwrap(), None, "v6 {v6}");
        let e =
            lb.l.table_flow(&key2, true)
                .unwrap()
                .expect("embryonic entry");
        assert_eq!(e.state, 3); // SYN_RECV
        let r = lb.run(&tcp_frame(c2, 6001, v, VPORT, Flags::Ack, b""));
        assert_eq!(r.action, action::TX);
        assert_eq!(lb.l.table_flow(&key2, true).unwrap(), None, "promoted");
        let f2 = lb.l.table_flow(&key2, false).unwrap().expect("flow entry");
        assert_eq!(f2.state, 1);
        assert_eq!(&r.data[..6], &rs_mac(f2.dest as u8)[..]); // service 0
        let f1 =
            lb.l.table_flow(&key, false)
                .unwrap()
                .expect("still established");
        assert_eq!((f1.dest, f1.state), (d0, 1));
        let r = lb.run(&tcp_frame(c, 6000, v, VPORT, Flags::Ack, b"data"));
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
        for i in (97..4096u32).step_by(97) {
            let k = FlowKey::new(PROTO_TCP, client(v6, 1000 + i), 1000 + i as u16, v, VPORT);
            assert_eq!(
                lb.l.table_flow(&k, false).unwrap(),
                None,
                "no SYN in the flow table"
            );
        }
        let fl = lb.l.svc_flood(0).unwrap();
        assert!(fl.embryonic >= 4096 && fl.embryonic <= 4097, "{fl:?}");
        assert_eq!((fl.promoted, fl.guarded), (1, 0));
        // An ACK of no known flow is passed, and counted.
        let gone = tcp_frame(client(v6, 90_000), 1000, v, VPORT, Flags::Ack, b"");
        assert_eq!(lb.run(&gone).action, action::PASS);
        assert_eq!(lb.l.svc_flood(0).unwrap().unknown, 1);
    }
}

/// New connections whose handshakes complete do not arm the embryonic
/// tables, however fast they come (without `max_new_flows`): 3 × 4,097
/// handshakes (SYN, then the ACK; more than the arming rate in one second
/// on a CPU whatever the clock does in between) all go straight to the flow
/// table, nothing embryonic, nothing promoted. SYNs that are not followed by
/// their ACK (half-open: a SYN flood) still arm them (IPv4 and IPv6: the
/// fast paths count the handshakes of each family).
#[test]
fn completed_handshakes_do_not_arm_the_embryonic_tables() {
    const N: u32 = 3 * 4097;
    for v6 in [false, true] {
        let Some(mut lb) = Lb::new("completed_handshakes_do_not_arm_the_embryonic_tables") else {
            return;
        };
        dr_service(&mut lb, v6, 3);
        let v = vip(v6);
        for i in 0..N {
            let (c, port) = (client(v6, i), 1000 + (i >> 8) as u16);
            for flags in [Flags::Syn, Flags::Ack] {
                let r = lb.run(&tcp_frame(c, port, v, VPORT, flags, b""));
                assert_eq!(r.action, action::TX, "v6 {v6}: flow {i}");
            }
        }
        let fl = lb.l.svc_flood(0).unwrap();
        assert_eq!((fl.embryonic, fl.promoted), (0, 0), "v6 {v6}: {fl:?}");
        // The last flow (the flow table holds 4,096: earlier ones evicted).
        let (c, port) = (client(v6, N - 1), 1000 + ((N - 1) >> 8) as u16);
        let key = FlowKey::new(PROTO_TCP, c, port, v, VPORT);
        assert_eq!(
            lb.l.table_flow(&key, false).unwrap().map(|f| f.state),
            Some(1),
            "v6 {v6}: ESTABLISHED in the flow table"
        );
        // Half-open: SYNs alone, from other ports.
        for i in 0..N {
            let r = lb.run(&tcp_frame(client(v6, i), 60000, v, VPORT, Flags::Syn, b""));
            assert_eq!(r.action, action::TX, "v6 {v6}: SYN {i}");
        }
        let fl = lb.l.svc_flood(0).unwrap();
        assert!(fl.embryonic > 0, "v6 {v6}: a SYN flood arms them: {fl:?}");
    }
}

/// While no embryonic entry can be live (none written, by any CPU, for
/// longer than the longest TCP timeout: `embryonic_seen`), a SYN or later
/// packet of a flow not in the flow table does not look in the embryonic
/// tables: an expired entry left there is not even looked at (with the
/// lookup, the SYN would find it and make its entry there, in its place).
/// An entry made while the tables were armed is still found after the
/// arming ends, and after a restart (the stamp unknown) until it expires.
#[test]
fn embryonic_tables_looked_up_only_while_an_entry_can_be_live() {
    for v6 in [false, true] {
        let Some(mut lb) = Lb::new("embryonic_tables_looked_up_only_while_an_entry_can_be_live")
        else {
            return;
        };
        dr_service(&mut lb, v6, 3);
        let v = vip(v6);
        let hz = u64::from(rvs_xdp::kernel_hz().expect("HZ"));
        let longest = u64::from(*Lb::config().tcp_timeouts.iter().max().expect("timeouts"));
        let now = rvs_xdp::jiffies_now().expect("jiffies");
        assert_eq!(lb.l.embryonic_seen().unwrap(), 0, "fresh: never written");
        // An embryonic entry (SYN_RECV, real server 2) written, and stamped,
        // longer ago than any timeout: expired.
        let old = now - (longest + 5) * hz;
        let stale = maps::Flow {
            last_seen: old,
            dest: Lb::dest_index(0, 2),
            svc: 0,
            state: 3,
            flags: maps::FLOW_F_NOOUTPUT,
            ..maps::Flow::default()
        };
        let (c, d0) = (client(v6, 20), Lb::dest_index(0, 0));
        let key = FlowKey::new(PROTO_TCP, c, 7000, v, VPORT);
        lb.l.set_table_flow(&key, &stale, true).unwrap();
        lb.l.set_embryonic_seen(old).unwrap();
        let r = lb.run(&tcp_frame(c, 7000, v, VPORT, Flags::Syn, b""));
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
        let f = lb.l.table_flow(&key, false).unwrap();
        assert_eq!(
            f.map(|f| (f.dest, f.state)),
            Some((d0, 3)),
            "v6 {v6}: the SYN's flow in the flow table"
        );
        assert_eq!(
            lb.l.table_flow(&key, true).unwrap(),
            Some(stale),
            "v6 {v6}: the expired embryonic entry untouched"
        );
        assert_eq!(lb.l.embryonic_seen().unwrap(), old);
        assert_eq!(lb.l.svc_flood(0).unwrap().embryonic, 0);

        // Armed (more than one new flow per CPU per second): a SYN's flow
        // goes to the embryonic table, which is stamped.
        lb.set_max_new_flows(1);
        for i in 0..3u32 {
            lb.run(&tcp_frame(
                client(v6, 100 + i),
                7100,
                v,
                VPORT,
                Flags::Syn,
                b"",
            ));
        }
        let c2 = client(v6, 21);
        let key2 = FlowKey::new(PROTO_TCP, c2, 7001, v, VPORT);
        lb.run(&tcp_frame(c2, 7001, v, VPORT, Flags::Syn, b""));
        assert!(lb.l.table_flow(&key2, true).unwrap().is_some(), "v6 {v6}");
        assert!(lb.l.embryonic_seen().unwrap() >= now, "stamped");
        // The arming over (a quiet minute on every CPU): its handshake's
        // ACK still finds it, and promotes it.
        lb.set_max_new_flows(0);
        lb.l.reset_flood().unwrap();
        let r = lb.run(&tcp_frame(c2, 7001, v, VPORT, Flags::Ack, b""));
        assert_eq!(r.action, action::TX, "v6 {v6}");
        assert_eq!(lb.l.table_flow(&key2, true).unwrap(), None, "promoted");
        assert_eq!(
            lb.l.table_flow(&key2, false).unwrap().map(|f| f.state),
            Some(1)
        );
        assert_eq!(lb.l.svc_flood(0).unwrap().promoted, 1);

        // A restart (the loader writes "unknown"): a live entry the program
        // before made without a stamp is found, and the first look stamps.
        let c3 = client(v6, 22);
        let key3 = FlowKey::new(PROTO_TCP, c3, 7002, v, VPORT);
        let live = maps::Flow {
            last_seen: rvs_xdp::jiffies_now().expect("jiffies"),
            ..stale
        };
        lb.l.set_table_flow(&key3, &live, true).unwrap();
        lb.l.set_embryonic_seen(maps::EMBRYONIC_SEEN_UNKNOWN)
            .unwrap();
        let r = lb.run(&tcp_frame(c3, 7002, v, VPORT, Flags::Ack, b""));
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(2)[..]));
        assert_eq!(
            lb.l.table_flow(&key3, false).unwrap().map(|f| f.state),
            Some(1)
        );
        let seen = lb.l.embryonic_seen().unwrap();
        assert!(seen >= live.last_seen && seen != maps::EMBRYONIC_SEEN_UNKNOWN);
    }
}

/// The ACK that completes a handshake in the flow table (the embryonic
/// tables unarmed) bumps no epoch (no CPU can hold a valid cache entry of a
/// flow that was not ESTABLISHED); the client's FIN (leaving ESTABLISHED)
/// bumps it.
#[test]
fn handshake_ack_bumps_no_epoch() {
    for v6 in [false, true] {
        let Some(mut lb) = Lb::new("handshake_ack_bumps_no_epoch") else {
            return;
        };
        dr_service(&mut lb, v6, 3);
        let v = vip(v6);
        let c = client(v6, 30);
        let key = FlowKey::new(PROTO_TCP, c, 7200, v, VPORT);
        lb.run(&tcp_frame(c, 7200, v, VPORT, Flags::Syn, b""));
        let e0 = lb.l.flow_key_epoch(&key).unwrap();
        let r = lb.run(&tcp_frame(c, 7200, v, VPORT, Flags::Ack, b""));
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
        assert_eq!(
            lb.l.table_flow(&key, false).unwrap().map(|f| f.state),
            Some(1)
        );
        assert_eq!(lb.l.flow_key_epoch(&key).unwrap(), e0, "v6 {v6}: no bump");
        let r = lb.run(&tcp_frame(c, 7200, v, VPORT, Flags::Fin, b""));
        assert_eq!(r.action, action::TX);
        assert_eq!(
            lb.l.table_flow(&key, false).unwrap().map(|f| f.state),
            Some(4)
        );
        assert_ne!(lb.l.flow_key_epoch(&key).unwrap(), e0, "v6 {v6}: FIN bumps");
    }
}

#[test]
fn ipv6_extension_headers_pass_to_the_kernel() {
    let Some(mut lb) = Lb::new("ipv6_extension_headers_pass_to_the_kernel") else {
        return;
    };
    dr_service(&mut lb, true, 1);
    let f = tcp_frame(client(true, 3), 4000, vip(true), VPORT, Flags::Syn, b"");
    // A fragment header (44) and a hop-by-hop header (0) before TCP.
    for (next, ext) in [
        (44u8, [6u8, 0, 0, 0, 0, 0, 0, 1]),
        (0u8, [6u8, 0, 1, 4, 0, 0, 0, 0]),
    ] {
        let mut m = f[..54].to_vec();
        m[20] = next;
        let plen = u16::from_be_bytes([m[18], m[19]]) + 8;
        m[18..20].copy_from_slice(&plen.to_be_bytes());
        m.extend_from_slice(&ext);
        m.extend_from_slice(&f[54..]);
        let r = lb.run(&m);
        assert_eq!(
            (r.action, &r.data),
            (action::PASS, &m),
            "next header {next}"
        );
    }
    assert_eq!(lb.run(&f).action, action::TX);
}

/// An ICMP error from router `from` to the VIP quoting the real server's
/// reply (VIP:VPORT -> client:cport) — e.g. "fragmentation needed".
fn icmp_error_frame(v6: bool, from: IpAddr, c: IpAddr, cport: u16) -> Vec<u8> {
    use etherparse::{Icmpv4Type, Icmpv6Type, icmpv4::DestUnreachableHeader};
    // The quoted packet: what the real server sent (from the VIP).
    let quoted = tcp_frame(vip(v6), VPORT, c, cport, Flags::Ack, b"")[14..].to_vec();
    let quoted = &quoted[..if v6 { 40 + 8 } else { 20 + 8 }];
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 9, 9], DIR_MAC);
    let mut out = Vec::new();
    match (from, vip(v6)) {
        (IpAddr::V4(f), IpAddr::V4(v)) => b
            .ipv4(f.octets(), v.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(
                DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
            ))
            .write(&mut out, quoted)
            .unwrap(),
        (IpAddr::V6(f), IpAddr::V6(v)) => b
            .ipv6(f.octets(), v.octets(), 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu: 1400 })
            .write(&mut out, quoted)
            .unwrap(),
        _ => unreachable!(),
    }
    out
}

#[test]
fn icmp_errors_reach_the_flows_real_server() {
    for v6 in [false, true] {
        let Some(mut lb) = Lb::new("icmp_errors_reach_the_flows_real_server") else {
            return;
        };
        dr_service(&mut lb, v6, 3);
        let router: IpAddr = if v6 {
            "fd79::1".parse().unwrap()
        } else {
            "10.79.0.1".parse().unwrap()
        };
        // Three clients on servers 0, 1, 2 (rr).
        for i in 0..3u32 {
            let c = client(v6, 40 + i);
            lb.run(&tcp_frame(c, 4444, vip(v6), VPORT, Flags::Syn, b""));
        }
        for i in (0..3u32).rev() {
            let f = icmp_error_frame(v6, router, client(v6, 40 + i), 4444);
            let r = lb.run(&f);
            assert_eq!(r.action, action::TX, "v6 {v6}");
            assert_eq!(r.data, with_macs(&f, rs_mac(i as u8), DIR_MAC));
        }
        // About a flow the director does not know: the kernel's.
        let f = icmp_error_frame(v6, router, client(v6, 99), 4444);
        let r = lb.run(&f);
        assert_eq!((r.action, r.data), (action::PASS, f));
    }
}

fn persistence(v6: bool) {
    let Some(mut lb) = Lb::new("persistence") else {
        return;
    };
    let rs: Vec<Rs> = (0..3)
        .map(|i| Rs::new(rs_addr(v6, i), fwd::DR, rs_mac(i)))
        .collect();
    let v = vip(v6);
    let key = SvcKey::new(PROTO_TCP, v, VPORT);
    lb.service(0, key, "rr", svc_flags::PERSISTENT, &rs);
    // -p 300 -M 255.255.255.0 (IPv6: /64).
    let mut svc = maps::Svc {
        sched: maps::sched::RR,
        family: key.family,
        flags: svc_flags::PERSISTENT,
        table_off: 0,
        table_len: 0,
        dests_off: SLOT_REGION / 2,
        dests_len: 3,
        persist_timeout: 300,
        ..maps::Svc::default()
    };
    svc.persist_mask = if v6 {
        maps::prefix_mask(64)
    } else {
        maps::addr16("255.255.255.0".parse().unwrap())
    };
    lb.l.set_svc(0, &svc).unwrap();
    let net = |host: u16, sub: u16| -> IpAddr {
        if v6 {
            std::net::Ipv6Addr::new(0xfd78, 0, 0, sub, 0, 0, 0, host).into()
        } else {
            std::net::Ipv4Addr::new(10, 78, sub as u8, host as u8).into()
        }
    };
    let mac = |lb: &mut Lb, c: IpAddr, port: u16| {
        lb.run(&tcp_frame(c, port, v, VPORT, Flags::Syn, b"")).data[5]
    };
    // One client network sticks to the first choice across ports and hosts;
    // another network gets the next rr choice.
    assert_eq!(mac(&mut lb, net(5, 0), 1000), 0);
    assert_eq!(mac(&mut lb, net(5, 0), 1001), 0);
    assert_eq!(mac(&mut lb, net(77, 0), 1), 0);
    assert_eq!(mac(&mut lb, net(5, 1), 1000), 1);
    assert_eq!(mac(&mut lb, net(6, 1), 1000), 1);
    // Quiesced: persistence holds; deleted: the network is rescheduled.
    let mut rs2 = rs.clone();
    rs2[0].weight = 0;
    lb.service(0, key, "rr", svc_flags::PERSISTENT, &rs2);
    lb.l.set_svc(0, &svc).unwrap();
    assert_eq!(mac(&mut lb, net(5, 0), 1002), 0);
    rs2[0].flags = maps::dest_flags::UNAVAILABLE;
    lb.service(0, key, "rr", svc_flags::PERSISTENT, &rs2);
    lb.l.set_svc(0, &svc).unwrap();
    let m = mac(&mut lb, net(5, 0), 1003);
    assert_ne!(m, 0);
    assert_eq!(mac(&mut lb, net(9, 0), 1004), m, "the new template holds");
    // Expired templates (timeout 0 after a tick) are replaced.
    svc.persist_timeout = 0;
    lb.l.set_svc(0, &svc).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    let a = mac(&mut lb, net(5, 1), 2000);
    std::thread::sleep(std::time::Duration::from_millis(30));
    let b = mac(&mut lb, net(5, 1), 2001);
    assert_ne!(a, b, "no persistence once templates expire at once");
}

#[test]
fn persistence_v4() {
    persistence(false);
}

#[test]
fn persistence_v6() {
    persistence(true);
}

/// A port-zero service takes the VIP's other ports (IPVS's catch-all after
/// the exact port), and its persistence template covers every port of the
/// VIP (IPVS's `<caddr, 0, vaddr, 0>` template).
fn port_zero(v6: bool) {
    let Some(mut lb) = Lb::new("port_zero") else {
        return;
    };
    let rs: Vec<Rs> = (0..3)
        .map(|i| Rs::new(rs_addr(v6, i), fwd::DR, rs_mac(i)))
        .collect();
    let v = vip(v6);
    // Port 80 to rs 0; every other TCP port to rs 1 or 2, persistent.
    lb.service(0, SvcKey::new(PROTO_TCP, v, VPORT), "rr", 0, &rs[..1]);
    let any = SvcKey::new(PROTO_TCP, v, 0);
    lb.service(1, any, "rr", svc_flags::PERSISTENT, &rs[1..]);
    let mut svc = maps::Svc {
        sched: maps::sched::RR,
        family: any.family,
        flags: svc_flags::PERSISTENT,
        dests_off: SLOT_REGION + SLOT_REGION / 2,
        dests_len: 2,
        persist_timeout: 300,
        ..maps::Svc::default()
    };
    svc.persist_mask = if v6 {
        maps::prefix_mask(128)
    } else {
        maps::addr16("255.255.255.255".parse().unwrap())
    };
    lb.l.set_svc(1, &svc).unwrap();
    let syn = |lb: &mut Lb, c: IpAddr, port: u16| {
        let r = lb.run(&tcp_frame(c, 40000, v, port, Flags::Syn, b""));
        assert_eq!(r.action, action::TX, "port {port}");
        r.data[5]
    };
    let (a, b) = (client(v6, 31), client(v6, 32));
    assert_eq!(syn(&mut lb, a, VPORT), 0, "the exact port's service first");
    let first = syn(&mut lb, a, 8080);
    assert!(first == 1 || first == 2, "{first}");
    assert_eq!(syn(&mut lb, a, 9090), first, "one template for all ports");
    assert_eq!(syn(&mut lb, a, 22), first);
    assert_eq!(syn(&mut lb, b, 8080), 3 - first, "another client: rr");
    let t =
        lb.l.persist(&maps::PersistKey {
            caddr: maps::addr16(a),
            vaddr: maps::addr16(v),
            vport: 0,
            proto: PROTO_TCP,
            family: maps::family(a),
        })
        .unwrap()
        .expect("a port-zero template");
    assert_eq!(t.svc, 1);
    // The flows keep their own ports; established packets follow them.
    let ack = lb.run(&tcp_frame(a, 40000, v, 9090, Flags::Ack, b"x"));
    assert_eq!((ack.action, ack.data[5]), (action::TX, first));
    // No UDP service: UDP to the VIP is not ours.
    let u = lb.run(&udp_frame(a, 5000, v, 53, b"q"));
    assert_eq!(u.action, action::PASS);
}

#[test]
fn port_zero_v4() {
    port_zero(false);
}

#[test]
fn port_zero_v6() {
    port_zero(true);
}

fn too_big(v6: bool) {
    let Some(mut lb) = Lb::new("too_big") else {
        return;
    };
    let mut cfg = maps::Config::ipvs_defaults();
    cfg.tun_src4 = TUN4.octets();
    cfg.tun_src6 = TUN6.octets();
    cfg.tun_mtu = if v6 { 200 } else { 100 };
    lb.l.set_config(&cfg).unwrap();
    let rs = Rs::new(rs_addr(v6, 0), fwd::TUN_IPIP, rs_mac(0));
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[rs]);
    let c = client(v6, 21);
    let hdr = if v6 { 40 } else { 20 };
    // Small enough: tunnelled.
    let small = tcp_frame(c, 3000, vip(v6), VPORT, Flags::Syn, b"");
    assert_eq!(lb.run(&small).data.len(), small.len() + hdr);
    // Too big with DF (IPv6: always): ICMP back to the client.
    let mut f = tcp_frame(c, 3000, vip(v6), VPORT, Flags::Ack, &[0x55; 200]);
    if !v6 {
        f[20] |= 0x40;
        fix_ip4_csum(&mut f, 14);
    }
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    let mut want = with_macs(&f[..14], CLIENT_MAC, DIR_MAC);
    let quote = &f[14..14 + hdr + 8];
    let mtu = cfg.tun_mtu - hdr as u32;
    match (vip(v6), c) {
        (IpAddr::V4(v), IpAddr::V4(cl)) => {
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + 8 + quote.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0, 0, 64, 1, 0, 0]);
            ip.extend_from_slice(&v.octets());
            ip.extend_from_slice(&cl.octets());
            let ck = inet_csum(&ip);
            ip[10..12].copy_from_slice(&ck.to_be_bytes());
            let mut icmp = vec![3, 4, 0, 0, 0, 0];
            icmp.extend_from_slice(&(mtu as u16).to_be_bytes());
            icmp.extend_from_slice(quote);
            let ck = inet_csum(&icmp);
            icmp[2..4].copy_from_slice(&ck.to_be_bytes());
            want.extend(ip);
            want.extend(icmp);
        }
        (IpAddr::V6(v), IpAddr::V6(cl)) => {
            let len = (8 + quote.len()) as u16;
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&len.to_be_bytes());
            ip.extend_from_slice(&[58, 64]);
            ip.extend_from_slice(&v.octets());
            ip.extend_from_slice(&cl.octets());
            let mut icmp = vec![2, 0, 0, 0];
            icmp.extend_from_slice(&mtu.to_be_bytes());
            icmp.extend_from_slice(quote);
            let mut pseudo = v.octets().to_vec();
            pseudo.extend_from_slice(&cl.octets());
            pseudo.extend_from_slice(&u32::from(len).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 58]);
            pseudo.extend_from_slice(&icmp);
            let ck = inet_csum(&pseudo);
            icmp[2..4].copy_from_slice(&ck.to_be_bytes());
            want.extend(ip);
            want.extend(icmp);
        }
        _ => unreachable!(),
    }
    assert_eq!(r.data, want);
    if !v6 {
        // Without DF the packet may be fragmented on the way: tunnelled.
        f[20] &= !0x40;
        fix_ip4_csum(&mut f, 14);
        let r = lb.run(&f);
        assert_eq!((r.action, r.data.len()), (action::TX, f.len() + 20));
    }
}

#[test]
fn tunnel_too_big_answers_fragmentation_needed_v4() {
    too_big(false);
}

#[test]
fn tunnel_too_big_answers_packet_too_big_v6() {
    too_big(true);
}

/// `--tunnel-source-prefix`: the outer source is the prefix with its host
/// bits from the flow hash (top bits), the same for every packet of a flow,
/// spread over flows; the rest of the frame is the IPIP / GUE fixture's.
fn tunnel_source_prefix(v6: bool, method: u8) {
    let Some(mut lb) = Lb::new("tunnel_source_prefix") else {
        return;
    };
    let mut cfg = maps::Config::ipvs_defaults();
    // 10.77.128.0/20 (12 bits vary), fd77::1:0:0/96 (32 bits vary).
    let p4 = std::net::Ipv4Addr::new(10, 77, 128, 0);
    let p6 = std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 1, 0, 0);
    cfg.tun_src4 = p4.octets();
    cfg.tun_src6 = p6.octets();
    cfg.tun_vary4 = 12;
    cfg.tun_vary6 = 32;
    lb.l.set_config(&cfg).unwrap();
    let mut rs = Rs::new(rs_addr(v6, 3), method, rs_mac(3));
    rs.gue_port = 6080;
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), VPORT), "rr", 0, &[rs]);
    let gue = method == fwd::TUN_GUE;
    let extra = if gue { 8 + 4 } else { 0 };
    let mut sources = std::collections::HashSet::new();
    for i in 0..64u32 {
        let (c, cport) = (client(v6, i * 7919), 20000 + i as u16);
        let h = flow_hash(c, cport, VPORT, PROTO_TCP);
        for flags in [Flags::Syn, Flags::Ack] {
            let f = tcp_frame(c, cport, vip(v6), VPORT, flags, b"x");
            let r = lb.run(&f);
            assert_eq!(r.action, action::TX);
            let inner = &f[14..];
            let mut want = with_macs(&f[..14], rs_mac(3), DIR_MAC);
            let src: IpAddr = match rs_addr(v6, 3) {
                IpAddr::V4(a) => {
                    want.extend(outer4(inner, if gue { 17 } else { 4 }, extra, a));
                    let s = std::net::Ipv4Addr::from(u32::from(p4) | (h >> 20));
                    want[26..30].copy_from_slice(&s.octets());
                    fix_ip4_csum(&mut want, 14);
                    s.into()
                }
                IpAddr::V6(a) => {
                    want.extend(outer6(inner, if gue { 17 } else { 41 }, extra, a));
                    let s = std::net::Ipv6Addr::from(u128::from(p6) | u128::from(h));
                    want[22..38].copy_from_slice(&s.octets());
                    s.into()
                }
            };
            if gue {
                want.extend_from_slice(&gue_sport(c, cport, VPORT, PROTO_TCP).to_be_bytes());
                want.extend_from_slice(&6080u16.to_be_bytes());
                want.extend_from_slice(&((inner.len() + 12) as u16).to_be_bytes());
                want.extend_from_slice(&[0, 0, 0, if v6 { 41 } else { 4 }, 0, 0]);
            }
            want.extend_from_slice(inner);
            assert_eq!(r.data, want, "flow {i} {flags:?} method {method}");
            sources.insert(src);
        }
    }
    assert!(sources.len() > 56, "sources spread: {}", sources.len());
}

#[test]
fn tunnel_source_prefix_varies_the_outer_source_v4() {
    tunnel_source_prefix(false, fwd::TUN_IPIP);
    tunnel_source_prefix(false, fwd::TUN_GUE);
}

#[test]
fn tunnel_source_prefix_varies_the_outer_source_v6() {
    tunnel_source_prefix(true, fwd::TUN_IPIP);
    tunnel_source_prefix(true, fwd::TUN_GUE);
}

/// The established-flow fast path (untagged IPv4, TCP ACK on an
/// ESTABLISHED flow or UDP, DR) and the general path give the same frames,
/// counts and flow entries; what the fast path leaves (a VLAN tag, a
/// tunnel, an expired flow, a state change) takes the general path.
#[test]
fn established_fast_path_agrees_with_the_general_path() {
    let Some(mut lb) = Lb::new("established_fast_path_agrees_with_the_general_path") else {
        return;
    };
    dr_service(&mut lb, false, 1);
    let tun = Rs::new(rs_addr(false, 5), fwd::TUN_IPIP, rs_mac(5));
    lb.service(1, SvcKey::new(PROTO_TCP, vip(false), 81), "rr", 0, &[tun]);
    let rs = [Rs::new(rs_addr(false, 0), fwd::DR, rs_mac(0))];
    lb.service(2, SvcKey::new(PROTO_UDP, vip(false), 53), "rr", 0, &rs);
    let (c, v) = (client(false, 40), vip(false));
    let key = FlowKey::new(PROTO_TCP, c, 5000, v, VPORT);
    lb.run(&tcp_frame(c, 5000, v, VPORT, Flags::Syn, b""));
    // SYN_RECV -> ESTABLISHED: the general path.
    lb.run(&tcp_frame(c, 5000, v, VPORT, Flags::Ack, b""));
    let flow = lb.l.flow(&key).unwrap().unwrap();
    assert_eq!(flow.state, 1);
    let before = lb.l.dest_stats(Lb::dest_index(0, 0)).unwrap();
    let conns = lb.l.dest_conns(Lb::dest_index(0, 0)).unwrap();
    // ESTABLISHED + ACK: the fast path.
    let f = tcp_frame(c, 5000, v, VPORT, Flags::Ack, b"payload");
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&f, rs_mac(0), DIR_MAC));
    // The same flow with a VLAN tag: the general path, the same result.
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 42]);
    tagged.extend_from_slice(&f[12..]);
    let r = lb.run(&tagged);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&tagged, rs_mac(0), DIR_MAC));
    let after = lb.l.dest_stats(Lb::dest_index(0, 0)).unwrap();
    let ip_len = (f.len() - 14) as u64;
    assert_eq!(after.inpkts - before.inpkts, 2);
    assert_eq!(after.inbytes - before.inbytes, 2 * ip_len);
    assert_eq!(after.conns, before.conns);
    assert_eq!(lb.l.svc_stats(0).unwrap().inpkts, after.inpkts);
    assert_eq!(lb.l.dest_conns(Lb::dest_index(0, 0)).unwrap(), conns);
    // The entry lives in flows4 and is stamped again once the flow cache
    // sends the packet back to it (at most the cache's bound later).
    assert!(lb.l.flows().unwrap().iter().any(|(k, _)| *k == key));
    assert_eq!(maps::Flow4Key::of(&key).unwrap().widen(), key);
    std::thread::sleep(flow_cache_window());
    lb.run(&f);
    let stamped = lb.l.flow(&key).unwrap().unwrap();
    assert!(stamped.last_seen > flow.last_seen);
    assert_eq!((stamped.state, stamped.dest), (1, flow.dest));

    // A tunnelled flow: its ESTABLISHED ACKs take the general path with
    // the fast path's lookup, encapsulated like the first.
    lb.run(&tcp_frame(c, 5001, v, 81, Flags::Syn, b""));
    let f = tcp_frame(c, 5001, v, 81, Flags::Ack, b"x");
    let first = lb.run(&f);
    let second = lb.run(&f);
    assert_eq!(first.action, action::TX);
    assert_eq!(first.data[14 + 9], 4, "IPIP outer header");
    assert_eq!(first.data, second.data);

    // UDP: the second datagram of a flow takes the fast path.
    let d = udp_frame(c, 5353, v, 53, b"q");
    let a = lb.run(&d);
    let b = lb.run(&d);
    assert_eq!((a.action, b.action), (action::TX, action::TX));
    assert_eq!(a.data, b.data);
    assert_eq!(lb.l.svc_stats(2).unwrap().inpkts, 2);

    // ESTABLISHED expiring at once: the fast path leaves the packet to the
    // general path, where a non-SYN of an unknown flow passes (once the
    // flow-cache entry, which does not read the config, is older than its
    // bound: a shortened timeout reaches a cached flow within it).
    let mut cfg = maps::Config::ipvs_defaults();
    cfg.tcp_timeouts[1] = 0;
    lb.l.set_config(&cfg).unwrap();
    std::thread::sleep(flow_cache_window() + std::time::Duration::from_millis(30));
    let f = tcp_frame(c, 5000, v, VPORT, Flags::Ack, b"");
    assert_eq!(lb.run(&f).action, action::PASS);
    // A FIN on a live flow changes its state (the general path).
    lb.l.set_config(&maps::Config::ipvs_defaults()).unwrap();
    lb.run(&tcp_frame(c, 5002, v, VPORT, Flags::Syn, b""));
    lb.run(&tcp_frame(c, 5002, v, VPORT, Flags::Ack, b""));
    lb.run(&tcp_frame(c, 5002, v, VPORT, Flags::Fin, b""));
    let k2 = FlowKey::new(PROTO_TCP, c, 5002, v, VPORT);
    assert_eq!(lb.l.flow(&k2).unwrap().unwrap().state, 4);
}

// ------------------------------------------------------------ flow cache
//
// The per-CPU flow cache in front of flows4: BPF_PROG_TEST_RUN runs the
// program on the caller's CPU, so each test pins its thread (on a thread
// of its own) and inspects that CPU's cache entry.

/// Run `f` on a new thread (the pins stay off the test harness's threads).
fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::spawn(f).join() {
        std::panic::resume_unwind(e);
    }
}

fn jiffies() -> u64 {
    rvs_xdp::jiffies_now().unwrap()
}

/// What a flow-cache entry (IPv4 `flow_cache` or IPv6 `flow6_cache`)
/// says about its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    dest: u32,
    svc: u32,
    epoch: u32,
    stamp: u64,
}

/// This CPU's cache entry of `key` (of its family's cache) when it holds
/// that key.
fn cached(lb: &mut Lb, cpu: usize, key: &FlowKey) -> Option<Entry> {
    match maps::Flow4Key::of(key) {
        Some(k4) => {
            let e = lb.l.flow_cache(&k4).unwrap()[cpu];
            (e.key == k4).then_some(Entry {
                dest: e.dest,
                svc: e.svc,
                epoch: e.epoch,
                stamp: e.stamp,
            })
        }
        None => {
            let e = lb.l.flow6_cache(key).unwrap()[cpu];
            (e.key == *key).then_some(Entry {
                dest: e.dest,
                svc: e.svc,
                epoch: e.epoch,
                stamp: e.stamp,
            })
        }
    }
}

/// SYN then ACK (SYN_RECV -> ESTABLISHED, the general path, which does
/// not fill the cache).
fn establish(lb: &mut Lb, c: IpAddr, cport: u16) {
    let v = vip(c.is_ipv6());
    lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Syn, b""));
    lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Ack, b""));
}

/// An established flow's ACKs and a UDP flow's datagrams come out of the
/// cache byte for byte as they came out of the flows4 lookup, counted the
/// same; the cache entry names the flow's key, real server, service and
/// epoch, and while it is valid the packets need no flows4 entry at all
/// (one removed behind the cache's back still goes on, for at most the
/// cache's bound; then the flow is unknown and its ACK passes).
fn flow_cache_forwards_the_same_bytes_as_the_flow_table(v6: bool) {
    let Some(mut lb) = Lb::new("flow_cache_forwards_the_same_bytes_as_the_flow_table") else {
        return;
    };
    on_own_thread(move || {
        assert!(pin_to_cpu(0));
        dr_service(&mut lb, v6, 2);
        let rs = [Rs::new(rs_addr(v6, 1), fwd::DR, rs_mac(1))];
        lb.service(1, SvcKey::new(PROTO_UDP, vip(v6), 53), "rr", 0, &rs);
        let (c, v) = (client(v6, 50), vip(v6));
        let mut attempt = 0;
        loop {
            attempt += 1;
            assert!(attempt <= 5, "never ran within the cache's bound");
            let cport = 6100 + attempt;
            let key = FlowKey::new(PROTO_TCP, c, cport, v, VPORT);
            lb.l.set_cursor(0, 0).unwrap(); // rr: server 0 on every attempt
            let f = tcp_frame(c, cport, v, VPORT, Flags::Ack, b"GET / HTTP/1.0\r\n\r\n");
            // SYN, then this ACK: SYN_RECV -> ESTABLISHED, the general path.
            lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Syn, b""));
            let general = lb.run(&f);
            assert!(cached(&mut lb, 0, &key).is_none(), "general path filled");
            let st0 = lb.l.dest_stats(Lb::dest_index(0, 0)).unwrap();
            let miss = lb.run(&f); // flows4, fills the cache
            let flow = lb.l.flow(&key).unwrap().unwrap();
            let e = cached(&mut lb, 0, &key).expect("cache entry filled");
            assert_eq!(
                (e.dest, e.svc, e.epoch, e.stamp),
                (
                    flow.dest,
                    0,
                    lb.l.flow_key_epoch(&key).unwrap(),
                    flow.last_seen
                )
            );
            let hit = lb.run(&f);
            let j = jiffies();
            if j - e.stamp >= maps::FLOW_CACHE_JIFFIES {
                eprintln!("descheduled past the cache's bound; again");
                continue;
            }
            assert_eq!(general.action, action::TX);
            assert_eq!(general.data, with_macs(&f, rs_mac(0), DIR_MAC));
            assert_eq!((miss.action, &miss.data), (general.action, &general.data));
            assert_eq!((hit.action, &hit.data), (miss.action, &miss.data));
            let st1 = lb.l.dest_stats(Lb::dest_index(0, 0)).unwrap();
            let ip_len = (f.len() - 14) as u64;
            assert_eq!(st1.inpkts - st0.inpkts, 2);
            assert_eq!(st1.inbytes - st0.inbytes, 2 * ip_len);
            assert_eq!(st1.conns, st0.conns);
            // The hit did not touch flows4 (not even last_seen)...
            assert_eq!(lb.l.flow(&key).unwrap().unwrap(), flow);
            assert_eq!(cached(&mut lb, 0, &key), Some(e));
            // ... and needs no entry there while the cache entry is valid.
            lb.l.remove_flow(&key).unwrap();
            let r = lb.run(&f);
            if jiffies() - e.stamp >= maps::FLOW_CACHE_JIFFIES {
                eprintln!("descheduled past the cache's bound; again");
                continue;
            }
            assert_eq!((r.action, &r.data), (miss.action, &miss.data));
            std::thread::sleep(flow_cache_window());
            assert_eq!(lb.run(&f).action, action::PASS);
            break;
        }
        // UDP: the second datagram fills, the third hits; same bytes (12
        // bytes of payload or more: the fast path reads a TCP header's worth).
        let d = udp_frame(c, 5353, v, 53, b"a DNS query.");
        let first = lb.run(&d);
        let (fill, hit) = (lb.run(&d), lb.run(&d));
        assert_eq!(first.action, action::TX);
        assert_eq!(first.data, with_macs(&d, rs_mac(1), DIR_MAC));
        assert_eq!((fill.data, hit.data), (first.data.clone(), first.data));
        let ukey = FlowKey::new(PROTO_UDP, c, 5353, v, 53);
        assert!(cached(&mut lb, 0, &ukey).is_some());
        assert_eq!(lb.l.svc_stats(1).unwrap().inpkts, 3);
    });
}

#[test]
fn flow_cache_forwards_the_same_bytes_as_the_flow_table_v4() {
    flow_cache_forwards_the_same_bytes_as_the_flow_table(false);
}

#[test]
fn flow_cache_forwards_the_same_bytes_as_the_flow_table_v6() {
    flow_cache_forwards_the_same_bytes_as_the_flow_table(true);
}

/// State changes and new flows made on one CPU invalidate the cache entry
/// another CPU holds: after a FIN the next ACK on the other CPU takes the
/// general path (flows4's last_seen is stamped, the state stays FIN_WAIT);
/// after a RST and a new SYN scheduled to another real server, the other
/// CPU's still-young entry for the old server is not used.
fn flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows(v6: bool) {
    let Some(mut lb) =
        Lb::new("flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows")
    else {
        return;
    };
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        rvs_testbed::skip_or_fail(
            "flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows",
            "needs two CPUs (one cache entry per CPU)",
        );
        return;
    }
    on_own_thread(move || {
        dr_service(&mut lb, v6, 2);
        let (c, v) = (client(v6, 51), vip(v6));
        let ack = |cport| tcp_frame(c, cport, v, VPORT, Flags::Ack, b"data");
        let mut attempt = 0;
        loop {
            attempt += 1;
            assert!(attempt <= 5, "never ran within the cache's bound");
            let cport = 6200 + attempt * 3;
            let key = FlowKey::new(PROTO_TCP, c, cport, v, VPORT);
            // CPU 0 caches the flow (rr: the first flow goes to server 0).
            assert!(pin_to_cpu(0));
            lb.l.set_cursor(0, 0).unwrap();
            establish(&mut lb, c, cport);
            assert_eq!(lb.run(&ack(cport)).data[..6], rs_mac(0));
            let e0 = cached(&mut lb, 0, &key).expect("CPU 0 cached the flow");
            // CPU 1 sees a FIN: FIN_WAIT.
            assert!(pin_to_cpu(1));
            assert_eq!(lb.run(&ack(cport)).data[..6], rs_mac(0));
            lb.run(&tcp_frame(c, cport, v, VPORT, Flags::Fin, b""));
            let fin = lb.l.flow(&key).unwrap().unwrap();
            assert_eq!(fin.state, 4);
            // A jiffy later CPU 0 gets an ACK: its entry is young, same key,
            // but the epoch moved, so the general path runs and stamps.
            let j = jiffies();
            while jiffies() == j {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(pin_to_cpu(0));
            assert_eq!(cached(&mut lb, 0, &key), Some(e0));
            assert_ne!(e0.epoch, lb.l.flow_key_epoch(&key).unwrap());
            let r = lb.run(&ack(cport));
            let young = jiffies() - e0.stamp < maps::FLOW_CACHE_JIFFIES;
            assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
            let after = lb.l.flow(&key).unwrap().unwrap();
            assert_eq!(after.state, 4);
            assert!(after.last_seen > fin.last_seen, "general path stamped");
            // A second flow cached on CPU 0 (server 1) ends on CPU 1, by a
            // RST (a state change) or by leaving flows4 silently (an LRU
            // eviction or the control side's removal), and its new SYN is
            // scheduled there to server 0. CPU 0's entry for server 1 is
            // still young and holds the key; its next ACK must go to
            // server 0 all the same.
            let mut in_bound = young;
            for (n, evict) in [(1, false), (2, true)] {
                let cport2 = cport + n;
                let key2 = FlowKey::new(PROTO_TCP, c, cport2, v, VPORT);
                assert!(pin_to_cpu(0));
                lb.l.set_cursor(0, 1).unwrap();
                establish(&mut lb, c, cport2);
                assert_eq!(lb.run(&ack(cport2)).data[..6], rs_mac(1));
                let e2 = cached(&mut lb, 0, &key2).expect("CPU 0 cached the flow");
                assert_eq!(e2.dest, Lb::dest_index(0, 1));
                assert!(pin_to_cpu(1));
                if evict {
                    lb.l.remove_flow(&key2).unwrap();
                } else {
                    lb.run(&tcp_frame(c, cport2, v, VPORT, Flags::Rst, b""));
                    assert_eq!(lb.l.flow(&key2).unwrap().unwrap().state, 6);
                }
                lb.l.set_cursor(0, 0).unwrap();
                let syn = lb.run(&tcp_frame(c, cport2, v, VPORT, Flags::Syn, b""));
                assert_eq!(syn.data[..6], rs_mac(0), "rescheduled to server 0");
                assert!(pin_to_cpu(0));
                assert_eq!(cached(&mut lb, 0, &key2), Some(e2));
                let r = lb.run(&ack(cport2));
                let r2 = lb.run(&ack(cport2));
                in_bound &= jiffies() - e2.stamp < maps::FLOW_CACHE_JIFFIES;
                if !in_bound {
                    break;
                }
                let how = if evict { "evicted" } else { "closed" };
                assert_eq!(
                    (r.action, &r.data[..6]),
                    (action::TX, &rs_mac(0)[..]),
                    "{how}"
                );
                assert_eq!(
                    (r2.action, &r2.data[..6]),
                    (action::TX, &rs_mac(0)[..]),
                    "{how}"
                );
                let flow2 = lb.l.flow(&key2).unwrap().unwrap();
                assert_eq!((flow2.dest, flow2.state), (Lb::dest_index(0, 0), 1));
                // ... and CPU 0 now caches the new binding.
                let e = cached(&mut lb, 0, &key2).expect("refilled");
                assert_eq!(e.dest, Lb::dest_index(0, 0));
            }
            if !in_bound {
                eprintln!("descheduled past the cache's bound; again");
                continue;
            }
            break;
        }
    });
}

#[test]
fn flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows_v4() {
    flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows(false);
}

#[test]
fn flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows_v6() {
    flow_cache_entries_on_other_cpus_follow_state_changes_and_new_flows(true);
}

/// A cached flow's real server keeps today's semantics: quiesced (weight
/// 0) it keeps the flow, served from the cache; made unavailable, its
/// flows' packets are dropped at once; switched to a tunnel, they are
/// encapsulated at once; deleted (its element cleared, as the control side
/// does when it frees the index), they are dropped.
fn flow_cache_follows_real_server_changes_at_once(v6: bool) {
    let Some(mut lb) = Lb::new("flow_cache_follows_real_server_changes_at_once") else {
        return;
    };
    on_own_thread(move || {
        assert!(pin_to_cpu(0));
        let (c, v) = (client(v6, 52), vip(v6));
        let svc = SvcKey::new(PROTO_TCP, v, VPORT);
        let mut rs: Vec<Rs> = (0..2)
            .map(|i| Rs::new(rs_addr(v6, i), fwd::DR, rs_mac(i)))
            .collect();
        lb.service(0, svc, "rr", 0, &rs);
        let key = FlowKey::new(PROTO_TCP, c, 6300, v, VPORT);
        let f = tcp_frame(c, 6300, v, VPORT, Flags::Ack, b"x");
        establish(&mut lb, c, 6300);
        assert_eq!(lb.run(&f).data[..6], rs_mac(0));
        let e = cached(&mut lb, 0, &key).expect("cached");
        // Quiesced: the flow continues (and stays cached).
        rs[0].weight = 0;
        lb.service(0, svc, "rr", 0, &rs);
        let r = lb.run(&f);
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
        assert_eq!(cached(&mut lb, 0, &key).map(|x| x.dest), Some(e.dest));
        // Unavailable: dropped.
        rs[0].flags = maps::dest_flags::UNAVAILABLE;
        lb.service(0, svc, "rr", 0, &rs);
        assert_eq!(lb.run(&f).action, action::DROP);
        // Back, then switched to IPIP: encapsulated.
        rs[0].flags = 0;
        lb.service(0, svc, "rr", 0, &rs);
        assert_eq!(lb.run(&f).data[..6], rs_mac(0));
        rs[0].method = fwd::TUN_IPIP;
        lb.service(0, svc, "rr", 0, &rs);
        let r = lb.run(&f);
        // The outer header's protocol / next header: IPIP (4) or IPv6 (41).
        let outer = if v6 {
            (r.data[14 + 6], 41)
        } else {
            (r.data[14 + 9], 4)
        };
        assert_eq!((r.action, outer.0), (action::TX, outer.1), "IPIP");
        // DR again, then deleted: the element is cleared, packets dropped.
        rs[0].method = fwd::DR;
        lb.service(0, svc, "rr", 0, &rs);
        assert_eq!(lb.run(&f).data[..6], rs_mac(0));
        lb.l.set_dest(e.dest, &maps::Dest::default()).unwrap();
        assert_eq!(lb.run(&f).action, action::DROP);
    });
}

#[test]
fn flow_cache_follows_real_server_changes_at_once_v4() {
    flow_cache_follows_real_server_changes_at_once(false);
}

#[test]
fn flow_cache_follows_real_server_changes_at_once_v6() {
    flow_cache_follows_real_server_changes_at_once(true);
}

/// An entry older than the cache's bound is checked against flows4 again:
/// flows4's last_seen of a flow served from the cache is never more than
/// the bound behind its packets, and is stamped only about once per bound
/// (a hit stamps nothing).
fn flow_cache_revalidates_after_its_bound_and_keeps_last_seen_fresh(v6: bool) {
    let Some(mut lb) = Lb::new("flow_cache_revalidates_after_its_bound_and_keeps_last_seen_fresh")
    else {
        return;
    };
    on_own_thread(move || {
        assert!(pin_to_cpu(0));
        dr_service(&mut lb, v6, 1);
        let (c, v) = (client(v6, 53), vip(v6));
        let key = FlowKey::new(PROTO_TCP, c, 6400, v, VPORT);
        let f = tcp_frame(c, 6400, v, VPORT, Flags::Ack, b"x");
        establish(&mut lb, c, 6400);
        lb.run(&f);
        let r = maps::FLOW_CACHE_JIFFIES;
        let start = jiffies();
        let mut stamps = std::collections::BTreeSet::new();
        let mut last_jiffy = start;
        for _ in 0..10_000 {
            let before = jiffies();
            assert_eq!(lb.run(&f).action, action::TX);
            let flow = lb.l.flow(&key).unwrap().unwrap();
            assert!(
                before < flow.last_seen + r,
                "last_seen {} lags {before} by the cache's bound or more",
                flow.last_seen
            );
            stamps.insert(flow.last_seen);
            last_jiffy = jiffies();
            if last_jiffy - start > 3 * r {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let elapsed = last_jiffy - start;
        assert!(elapsed > 3 * r, "ran {elapsed} jiffies");
        // Re-validated at least every bound, and not much more often.
        assert!(stamps.len() >= 3, "{stamps:?}");
        assert!(
            stamps.len() as u64 <= elapsed / r + 2,
            "{} stamps in {elapsed} jiffies: {stamps:?}",
            stamps.len()
        );
        // Idle longer than the bound: the next packet re-validates.
        std::thread::sleep(flow_cache_window());
        let before = jiffies();
        lb.run(&f);
        let flow = lb.l.flow(&key).unwrap().unwrap();
        assert!(flow.last_seen >= before);
        let e = cached(&mut lb, 0, &key).expect("cached");
        assert_eq!(e.stamp, flow.last_seen);
    });
}

#[test]
fn flow_cache_revalidates_after_its_bound_and_keeps_last_seen_fresh_v4() {
    flow_cache_revalidates_after_its_bound_and_keeps_last_seen_fresh(false);
}

#[test]
fn flow_cache_revalidates_after_its_bound_and_keeps_last_seen_fresh_v6() {
    flow_cache_revalidates_after_its_bound_and_keeps_last_seen_fresh(true);
}

/// A flow the control side writes (`set_flow`, e.g. a connection synced
/// from a peer director) is bound to its new real server at once on every
/// CPU: the write bumps the key's epoch slot, which the cache entry of the
/// old binding no longer matches.
fn flow_cache_yields_to_a_flow_written_by_the_control_side(v6: bool) {
    let Some(mut lb) = Lb::new("flow_cache_yields_to_a_flow_written_by_the_control_side") else {
        return;
    };
    on_own_thread(move || {
        assert!(pin_to_cpu(0));
        dr_service(&mut lb, v6, 2);
        let (c, v) = (client(v6, 54), vip(v6));
        let key = FlowKey::new(PROTO_TCP, c, 6500, v, VPORT);
        let f = tcp_frame(c, 6500, v, VPORT, Flags::Ack, b"x");
        establish(&mut lb, c, 6500);
        assert_eq!(lb.run(&f).data[..6], rs_mac(0));
        let e = cached(&mut lb, 0, &key).expect("cached");
        let epoch = lb.l.flow_key_epoch(&key).unwrap();
        let mut flow = lb.l.flow(&key).unwrap().unwrap();
        flow.dest = Lb::dest_index(0, 1);
        lb.l.set_flow(&key, &flow).unwrap();
        assert_ne!(lb.l.flow_key_epoch(&key).unwrap(), epoch);
        let r = lb.run(&f);
        assert!(
            jiffies() - e.stamp < maps::FLOW_CACHE_JIFFIES,
            "descheduled past the cache's bound"
        );
        assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(1)[..]));
        assert_eq!(
            cached(&mut lb, 0, &key).map(|x| x.dest),
            Some(Lb::dest_index(0, 1))
        );
    });
}

#[test]
fn flow_cache_yields_to_a_flow_written_by_the_control_side_v4() {
    flow_cache_yields_to_a_flow_written_by_the_control_side(false);
}

#[test]
fn flow_cache_yields_to_a_flow_written_by_the_control_side_v6() {
    flow_cache_yields_to_a_flow_written_by_the_control_side(true);
}

/// The cache index of a key in its family's cache.
fn cache_index(key: &FlowKey) -> u32 {
    match maps::Flow4Key::of(key) {
        Some(k4) => maps::flow_cache_index(&k4),
        None => maps::flow6_cache_index(key),
    }
}

/// Two flows sharing one cache entry (same index, different keys) never
/// take each other's real server: the entry serves only the key it holds.
/// Both flows go through the same state changes, so their epoch slots can
/// hold equal values: the key comparison is what keeps them apart.
fn flow_cache_keeps_colliding_flows_apart(v6: bool) {
    let Some(mut lb) = Lb::new("flow_cache_keeps_colliding_flows_apart") else {
        return;
    };
    on_own_thread(move || {
        assert!(pin_to_cpu(0));
        dr_service(&mut lb, v6, 2);
        let v = vip(v6);
        // Two client ports of one client whose keys share an index (a
        // bounded search: 16384 or 65536 entries, 20000 ports).
        let c = client(v6, 55);
        let mut seen = std::collections::HashMap::new();
        let (pa, pb) = (7000..27000u16)
            .find_map(|p| {
                let i = cache_index(&FlowKey::new(PROTO_TCP, c, p, v, VPORT));
                seen.insert(i, p).map(|q| (q, p))
            })
            .expect("two colliding ports");
        let (ka, kb) = (
            FlowKey::new(PROTO_TCP, c, pa, v, VPORT),
            FlowKey::new(PROTO_TCP, c, pb, v, VPORT),
        );
        lb.l.set_cursor(0, 0).unwrap();
        establish(&mut lb, c, pa);
        establish(&mut lb, c, pb);
        assert_eq!(lb.l.flow(&ka).unwrap().unwrap().dest, Lb::dest_index(0, 0));
        assert_eq!(lb.l.flow(&kb).unwrap().unwrap().dest, Lb::dest_index(0, 1));
        let ack = |p| tcp_frame(c, p, v, VPORT, Flags::Ack, b"x");
        for _ in 0..3 {
            let (a, b) = (lb.run(&ack(pa)), lb.run(&ack(pb)));
            assert_eq!((a.action, &a.data[..6]), (action::TX, &rs_mac(0)[..]));
            assert_eq!((b.action, &b.data[..6]), (action::TX, &rs_mac(1)[..]));
        }
        // The last fill was b's: the entry holds b's key.
        assert!(cached(&mut lb, 0, &kb).is_some());
        assert!(cached(&mut lb, 0, &ka).is_none());
    });
}

#[test]
fn flow_cache_keeps_colliding_flows_apart_v4() {
    flow_cache_keeps_colliding_flows_apart(false);
}

#[test]
fn flow_cache_keeps_colliding_flows_apart_v6() {
    flow_cache_keeps_colliding_flows_apart(true);
}

/// A flow whose timeout is not longer than the cache's bound (in jiffies)
/// is forwarded by the fast path but never cached (it could expire while
/// its entry is valid); one jiffy longer and it is.
fn flow_cache_skips_flows_that_may_expire_within_its_bound(v6: bool) {
    let Some(mut lb) = Lb::new("flow_cache_skips_flows_that_may_expire_within_its_bound") else {
        return;
    };
    on_own_thread(move || {
        assert!(pin_to_cpu(0));
        dr_service(&mut lb, v6, 1);
        let (c, v) = (client(v6, 56), vip(v6));
        // HZ given as 1: timeouts in seconds are then jiffies.
        let mut cfg = maps::Config::ipvs_defaults();
        cfg.hz = 1;
        for (cport, timeout, cache) in [(7100, 32, false), (7101, 33, true)] {
            assert_eq!(u64::from(timeout) <= maps::FLOW_CACHE_JIFFIES, !cache);
            cfg.tcp_timeouts[1] = timeout;
            lb.l.set_config(&cfg).unwrap();
            let key = FlowKey::new(PROTO_TCP, c, cport, v, VPORT);
            establish(&mut lb, c, cport);
            let f = tcp_frame(c, cport, v, VPORT, Flags::Ack, b"x");
            let r = lb.run(&f);
            assert_eq!((r.action, &r.data[..6]), (action::TX, &rs_mac(0)[..]));
            assert_eq!(
                cached(&mut lb, 0, &key).is_some(),
                cache,
                "timeout {timeout}"
            );
        }
    });
}

#[test]
fn flow_cache_skips_flows_that_may_expire_within_its_bound_v4() {
    flow_cache_skips_flows_that_may_expire_within_its_bound(false);
}

#[test]
fn flow_cache_skips_flows_that_may_expire_within_its_bound_v6() {
    flow_cache_skips_flows_that_may_expire_within_its_bound(true);
}

/// Only frames sent to the director are its own (bpf/lib/own_mac.h): to its
/// MAC on the ingress interface, forwarded; to another host's unicast MAC
/// (a bridge flooding, a promiscuous NIC), multicast or broadcast: passed
/// to the kernel unchanged, no flow created, the unicast ones counted; to
/// an extra MAC owned there (a VRRP virtual MAC), forwarded with that MAC
/// as the source on XDP_TX.
fn own_mac(v6: bool) {
    let Some(mut lb) = Lb::new("own_mac") else {
        return;
    };
    dr_service(&mut lb, v6, 1);
    let (c, cport) = (client(v6, 9), 40001);
    let other = [0x02, 0, 0, 0, 0, 0x99];
    let syn = tcp_frame(c, cport, vip(v6), VPORT, Flags::Syn, b"");
    let ack = tcp_frame(c, cport, vip(v6), VPORT, Flags::Ack, b"data");
    let pass_unchanged = |lb: &mut Lb, f: &[u8], what: &str| {
        let r = lb.run(f);
        assert_eq!(r.action, action::PASS, "{what}");
        assert_eq!(r.data, f, "{what}: changed");
    };

    let foreign = with_macs(&syn, other, CLIENT_MAC);
    pass_unchanged(&mut lb, &foreign, "SYN to another host");
    assert_eq!(lb.l.foreign_frames().unwrap(), 1);
    assert_eq!(lb.flow_dest(PROTO_TCP, c, cport, vip(v6), VPORT), None);
    for group in [
        [0xff; 6],
        [0x01, 0, 0x5e, 0, 0, 1],
        [0x33, 0x33, 0, 0, 0, 1],
    ] {
        pass_unchanged(&mut lb, &with_macs(&syn, group, CLIENT_MAC), "group MAC");
    }
    assert_eq!(
        lb.l.foreign_frames().unwrap(),
        1,
        "group frames are not foreign"
    );

    // The director's own: scheduled and forwarded.
    let r = lb.run(&syn);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&syn, rs_mac(0), DIR_MAC));
    // The established flow's ACK (the fast path) to another host: passed.
    pass_unchanged(
        &mut lb,
        &with_macs(&ack, other, CLIENT_MAC),
        "ACK to another host",
    );
    assert_eq!(lb.l.foreign_frames().unwrap(), 2);
    let r = lb.run(&ack);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&ack, rs_mac(0), DIR_MAC));

    // The VRRP virtual MAC: not the director's until it is owned on the
    // ingress interface; owned on another interface it is still not.
    let vmac = rvs_xdp::own_mac::vrrp_vmac(51);
    let to_vmac = with_macs(&ack, vmac, CLIENT_MAC);
    pass_unchanged(&mut lb, &to_vmac, "ACK to a VRRP MAC not owned");
    assert!(lb.l.add_own_mac(INGRESS + 1000, vmac).unwrap());
    pass_unchanged(&mut lb, &to_vmac, "ACK to a VRRP MAC owned elsewhere");
    assert!(lb.l.add_own_mac(INGRESS, vmac).unwrap());
    let r = lb.run(&to_vmac);
    assert_eq!(r.action, action::TX);
    assert_eq!(r.data, with_macs(&ack, rs_mac(0), vmac));
    assert!(lb.l.remove_own_mac(INGRESS, vmac).unwrap());
    pass_unchanged(&mut lb, &to_vmac, "ACK to a VRRP MAC no longer owned");
    assert_eq!(lb.l.foreign_frames().unwrap(), 5);

    let st = lb.l.dest_stats(Lb::dest_index(0, 0)).unwrap();
    assert_eq!(
        (st.conns, st.inpkts),
        (1, 3),
        "passed frames are not counted"
    );

    // A director whose table is empty (never attached) acts on any frame,
    // as before the filter.
    lb.l.set_own_macs(&rvs_xdp::own_mac::OwnMacs::new())
        .unwrap();
    let r = lb.run(&with_macs(&ack, other, CLIENT_MAC));
    assert_eq!(r.action, action::TX);
}

#[test]
fn own_mac_v4() {
    own_mac(false);
}

#[test]
fn own_mac_v6() {
    own_mac(true);
}
