//! The real-server decapsulator (`bpf/decap.c`) through BPF_PROG_TEST_RUN:
//! the director's own IPIP/GUE/GRE/Geneve output (v4 and v6) decapsulates back to the
//! client's packet; everything that is not a tunnel packet for a local VIP
//! passes byte for byte unchanged. Needs root (skips with a message).

mod common;

use std::net::IpAddr;

use common::*;
use rvs_xdp::action;
use rvs_xdp::decap::{Decap, DecapStats};
use rvs_xdp::maps::{self, PROTO_TCP, SvcKey, fwd};

const GUE_PORT: u16 = 6080;

fn decap(test: &str, vips: &[IpAddr]) -> Option<Decap> {
    if !root_or_skip(test) {
        return None;
    }
    let mut d = Decap::load().expect("decap loads");
    for v in vips {
        d.add_vip(*v).expect("vip");
    }
    d.set_gue_port(GUE_PORT).expect("gue port");
    Some(d)
}

/// What the director sends for a SYN from client 9 with `method`.
fn encapsulated(v6: bool, method: u8, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
    encapsulated_with(v6, method, 0, payload)
}

/// [`encapsulated`] with real-server `flags` (the tunnel checksum).
fn encapsulated_with(v6: bool, method: u8, flags: u32, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lb = Lb::new("decap-director").expect("root checked by caller");
    let mut rs = Rs::new(rs_addr(v6, 3), method, rs_mac(3));
    rs.gue_port = GUE_PORT;
    rs.flags = flags;
    lb.service(0, SvcKey::new(PROTO_TCP, vip(v6), 80), "rr", 0, &[rs]);
    let f = tcp_frame(client(v6, 9), 40001, vip(v6), 80, Flags::Syn, payload);
    let r = lb.run(&f);
    assert_eq!(r.action, action::TX);
    (f, r.data)
}

/// The director's `method` output (with real-server `flags`) of a SYN
/// carrying "hello" decapsulates back to the client's packet, addressed
/// (L2) as the director sent it, and is counted under its tunnel.
fn round_trip(v6: bool, method: u8, flags: u32) {
    let Some(mut d) = decap("round_trip", &[vip(v6)]) else {
        return;
    };
    if method == fwd::TUN_GRE || method == fwd::TUN_GENEVE {
        d.set_geneve_port(maps::GENEVE_PORT).expect("geneve port");
    }
    let (original, wire) = encapsulated_with(v6, method, flags, b"hello");
    assert!(wire.len() > original.len());
    let r = d.run(&wire, 1).expect("run");
    assert_eq!(r.action, action::PASS);
    assert_eq!(r.data, with_macs(&original, rs_mac(3), DIR_MAC));
    let mut want = DecapStats::default();
    *match method {
        fwd::TUN_GUE => &mut want.gue,
        fwd::TUN_GRE => &mut want.gre,
        fwd::TUN_GENEVE => &mut want.geneve,
        _ => &mut want.ipip,
    } = 1;
    assert_eq!(d.stats().expect("stats"), want);
}

cases! { round_trip;
    decap_ipip_v4(false, fwd::TUN_IPIP, 0),
    decap_ipip_v6(true, fwd::TUN_IPIP, 0),
    decap_gue_v4(false, fwd::TUN_GUE, 0),
    decap_gue_v6(true, fwd::TUN_GUE, 0),
    decap_gre_v4(false, fwd::TUN_GRE, 0),
    decap_gre_v6(true, fwd::TUN_GRE, 0),
    decap_gre_csum_v4(false, fwd::TUN_GRE, maps::dest_flags::TUN_CSUM),
    decap_gre_csum_v6(true, fwd::TUN_GRE, maps::dest_flags::TUN_CSUM),
    decap_geneve_v4(false, fwd::TUN_GENEVE, 0),
    decap_geneve_v6(true, fwd::TUN_GENEVE, 0),
    decap_geneve_csum_v4(false, fwd::TUN_GENEVE, maps::dest_flags::TUN_CSUM),
}

fn passes_unchanged(d: &mut Decap, frame: &[u8]) {
    let r = d.run(frame, 1).expect("run");
    assert_eq!(r.action, action::PASS);
    assert_eq!(r.data, frame);
}

#[test]
fn decap_passes_other_inner_destinations() {
    // A tunnel packet whose inner destination is not a VIP of this host.
    let Some(mut d) = decap(
        "decap_passes_other_inner_destinations",
        &[rs_addr(false, 9)],
    ) else {
        return;
    };
    for m in [fwd::TUN_IPIP, fwd::TUN_GUE] {
        let (_, wire) = encapsulated(false, m, b"");
        passes_unchanged(&mut d, &wire);
    }
    assert_eq!(d.stats().unwrap().not_vip, 2);
    // After removing the VIP nothing is stripped either.
    let Some(mut d) = decap("decap_passes_other_inner_destinations", &[vip(false)]) else {
        return;
    };
    d.remove_vip(vip(false)).unwrap();
    d.remove_vip(vip(false)).unwrap(); // absent: no error
    let (_, wire) = encapsulated(false, fwd::TUN_IPIP, b"");
    passes_unchanged(&mut d, &wire);
}

#[test]
fn decap_passes_plain_traffic() {
    let Some(mut d) = decap("decap_passes_plain_traffic", &[vip(false), vip(true)]) else {
        return;
    };
    // The client's own packets to the VIP (DR), TCP and UDP, v4 and v6.
    for v6 in [false, true] {
        passes_unchanged(
            &mut d,
            &tcp_frame(client(v6, 1), 1000, vip(v6), 80, Flags::Syn, b""),
        );
        passes_unchanged(
            &mut d,
            &udp_frame(client(v6, 1), 1000, vip(v6), 53, b"query"),
        );
        // UDP to another port than GUE's, carrying what looks like GUE.
        let (_, mut wire) = encapsulated(v6, fwd::TUN_GUE, b"");
        let udp = 14 + if v6 { 40 } else { 20 };
        wire[udp + 2..udp + 4].copy_from_slice(&6081u16.to_be_bytes());
        passes_unchanged(&mut d, &wire);
    }
    // Non-IP (ARP).
    let mut arp = with_macs(&[0u8; 60], [0xff; 6], CLIENT_MAC);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    passes_unchanged(&mut d, &arp);
    assert_eq!(d.stats().unwrap(), DecapStats::default());
}

#[test]
fn decap_gue_off_passes_gue() {
    let Some(mut d) = decap("decap_gue_off_passes_gue", &[vip(false)]) else {
        return;
    };
    d.set_gue_port(0).unwrap();
    let (_, wire) = encapsulated(false, fwd::TUN_GUE, b"");
    passes_unchanged(&mut d, &wire);
}

#[test]
fn decap_truncated_frames_pass() {
    let Some(mut d) = decap("decap_truncated_frames_pass", &[vip(false), vip(true)]) else {
        return;
    };
    for v6 in [false, true] {
        for m in [fwd::TUN_IPIP, fwd::TUN_GUE] {
            let (_, wire) = encapsulated(v6, m, b"");
            // Cut inside every header: Ethernet, outer IP, UDP, GUE, inner IP.
            let inner_ip = 14 + if v6 { 40 } else { 20 } + if m == fwd::TUN_GUE { 12 } else { 0 };
            let inner_min = inner_ip + if v6 { 40 } else { 20 };
            for len in 0..inner_min {
                if len < 14 {
                    // BPF_PROG_TEST_RUN wants at least an Ethernet header.
                    continue;
                }
                passes_unchanged(&mut d, &wire[..len]);
            }
        }
    }
    assert_eq!(d.stats().unwrap().ipip + d.stats().unwrap().gue, 0);
}

#[test]
fn decap_outer_fragments_and_gue_control_pass() {
    let Some(mut d) = decap("decap_outer_fragments_and_gue_control_pass", &[vip(false)]) else {
        return;
    };
    let (_, wire) = encapsulated(false, fwd::TUN_IPIP, b"");
    // More-fragments bit on the outer header.
    let mut f = wire.clone();
    f[14 + 6] |= 0x20;
    fix_ip4_csum(&mut f, 14);
    passes_unchanged(&mut d, &f);
    // A fragment offset.
    let mut f = wire.clone();
    f[14 + 7] = 1;
    fix_ip4_csum(&mut f, 14);
    passes_unchanged(&mut d, &f);
    // GUE control message (C bit), and GUE version 2 (unknown).
    let (_, wire) = encapsulated(false, fwd::TUN_GUE, b"");
    let gue = 14 + 20 + 8;
    for first in [0x20u8, 0x80] {
        let mut f = wire.clone();
        f[gue] = first;
        passes_unchanged(&mut d, &f);
    }
    // GUE whose protocol is not IP: counted as bad, passed.
    let mut f = wire.clone();
    f[gue + 1] = 17;
    passes_unchanged(&mut d, &f);
    assert_eq!(d.stats().unwrap().bad, 1);
}

#[test]
fn decap_gue_optional_fields_and_direct_ip() {
    let Some(mut d) = decap("decap_gue_optional_fields_and_direct_ip", &[vip(false)]) else {
        return;
    };
    let (original, wire) = encapsulated(false, fwd::TUN_GUE, b"x");
    let want = with_macs(&original, rs_mac(3), DIR_MAC);
    let gue = 14 + 20 + 8;
    // hlen = 2: eight bytes of optional fields after the GUE header.
    let mut f = wire[..gue].to_vec();
    f.extend_from_slice(&[0x02, 4, 0, 0]);
    f.extend_from_slice(&[0xaa; 8]);
    f.extend_from_slice(&wire[gue + 4..]);
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
    // Variant 1: the inner IPv4 header right after UDP.
    let mut f = wire[..gue].to_vec();
    f.extend_from_slice(&wire[gue + 4..]);
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
}

#[test]
fn decap_keeps_a_vlan_tag() {
    let Some(mut d) = decap("decap_keeps_a_vlan_tag", &[vip(true)]) else {
        return;
    };
    let (original, wire) = encapsulated(true, fwd::TUN_IPIP, b"");
    let tag = |f: &[u8]| {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 42]);
        t.extend_from_slice(&f[12..]);
        t
    };
    let r = d.run(&tag(&wire), 1).unwrap();
    assert_eq!(r.action, action::PASS);
    assert_eq!(r.data, tag(&with_macs(&original, rs_mac(3), DIR_MAC)));
}

#[test]
fn decap_geneve_off_passes_geneve() {
    let Some(mut d) = decap("decap_geneve_off_passes_geneve", &[vip(false)]) else {
        return;
    };
    let (_, wire) = encapsulated(false, fwd::TUN_GENEVE, b"");
    passes_unchanged(&mut d, &wire);
    // On another port than the one configured, too.
    d.set_geneve_port(6082).unwrap();
    passes_unchanged(&mut d, &wire);
    assert_eq!(d.stats().unwrap(), DecapStats::default());
    // Setting Geneve's port keeps GUE's.
    d.set_geneve_port(maps::GENEVE_PORT).unwrap();
    let (original, wire) = encapsulated(false, fwd::TUN_GUE, b"");
    let r = d.run(&wire, 1).unwrap();
    assert_eq!(r.data, with_macs(&original, rs_mac(3), DIR_MAC));
}

/// GRE's optional fields (RFC 2890 key and sequence number, the checksum)
/// are skipped; the routing bit, version 1 (PPTP) and a non-IP protocol
/// pass; an inner Ethernet header (0x6558, gretap) is stripped too.
#[test]
fn decap_gre_optional_fields_versions_and_teb() {
    let Some(mut d) = decap("decap_gre_optional_fields_versions_and_teb", &[vip(false)]) else {
        return;
    };
    let (original, wire) = encapsulated(false, fwd::TUN_GRE, b"x");
    let want = with_macs(&original, rs_mac(3), DIR_MAC);
    let gre = 14 + 20;
    let with_gre = |hdr: &[u8], rest: &[u8]| {
        let mut f = wire[..gre].to_vec();
        f.extend_from_slice(hdr);
        f.extend_from_slice(rest);
        let total = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        fix_ip4_csum(&mut f, 14);
        f
    };
    let inner = &wire[gre + 4..];
    // C + K + S: checksum/reserved1, key, sequence number.
    let f = with_gre(
        &[0xb0, 0, 0x08, 0x00, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 9],
        inner,
    );
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
    // Key only.
    let f = with_gre(&[0x20, 0, 0x08, 0x00, 1, 2, 3, 4], inner);
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
    // Transparent Ethernet bridging: an inner Ethernet header carrying IP.
    let mut teb = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    teb.extend_from_slice(inner);
    let f = with_gre(&[0, 0, 0x65, 0x58], &teb);
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
    assert_eq!(d.stats().unwrap().gre, 3);
    // Routing bit, version 1, an unknown protocol: passed untouched.
    for hdr in [[0x40u8, 0, 0x08, 0x00], [0, 1, 0x08, 0x00]] {
        passes_unchanged(&mut d, &with_gre(&hdr, inner));
    }
    passes_unchanged(&mut d, &with_gre(&[0, 0, 0x88, 0x47], inner));
    assert_eq!(d.stats().unwrap().bad, 1);
    assert_eq!(d.stats().unwrap().gre, 3);
}

/// Geneve options are skipped; OAM frames (O), critical options (C) and
/// other versions pass; an inner Ethernet header (0x6558, what Linux, OVN
/// and Cilium Geneve devices send) is stripped too.
#[test]
fn decap_geneve_options_flags_and_teb() {
    let Some(mut d) = decap("decap_geneve_options_flags_and_teb", &[vip(true)]) else {
        return;
    };
    d.set_geneve_port(maps::GENEVE_PORT).unwrap();
    let (original, wire) = encapsulated(true, fwd::TUN_GENEVE, b"x");
    let want = with_macs(&original, rs_mac(3), DIR_MAC);
    let gnv = 14 + 40 + 8;
    let with_geneve = |hdr: &[u8], rest: &[u8]| {
        let mut f = wire[..gnv].to_vec();
        f.extend_from_slice(hdr);
        f.extend_from_slice(rest);
        let ulen = (f.len() - 14 - 40) as u16;
        f[18..20].copy_from_slice(&ulen.to_be_bytes());
        f[14 + 40 + 4..14 + 40 + 6].copy_from_slice(&ulen.to_be_bytes());
        f
    };
    let inner = &wire[gnv + 8..];
    // Two 4-byte words of options (class, type, length 1, data).
    let f = with_geneve(
        &[
            2, 0, 0x86, 0xdd, 0, 0, 7, 0, 0x01, 0x4b, 0x01, 0x01, 9, 9, 9, 9,
        ],
        inner,
    );
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
    let mut teb = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    teb.extend_from_slice(inner);
    let f = with_geneve(&[0, 0, 0x65, 0x58, 0, 0, 1, 0], &teb);
    let r = d.run(&f, 1).unwrap();
    assert_eq!((r.action, &r.data), (action::PASS, &want));
    assert_eq!(d.stats().unwrap().geneve, 2);
    // O bit, C bit, version 1.
    for hdr in [
        [0u8, 0x80, 0x86, 0xdd, 0, 0, 0, 0],
        [0, 0x40, 0x86, 0xdd, 0, 0, 0, 0],
        [0x40, 0, 0x86, 0xdd, 0, 0, 0, 0],
    ] {
        passes_unchanged(&mut d, &with_geneve(&hdr, inner));
    }
    // Inner Ethernet carrying ARP: bad, passed.
    let mut arp = teb.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    passes_unchanged(&mut d, &with_geneve(&[0, 0, 0x65, 0x58, 0, 0, 1, 0], &arp));
    assert_eq!(d.stats().unwrap().bad, 1);
    assert_eq!(d.stats().unwrap().geneve, 2);
}

#[test]
fn decap_gre_geneve_truncated_frames_pass() {
    let Some(mut d) = decap(
        "decap_gre_geneve_truncated_frames_pass",
        &[vip(false), vip(true)],
    ) else {
        return;
    };
    d.set_geneve_port(maps::GENEVE_PORT).unwrap();
    for v6 in [false, true] {
        for (m, flags, extra) in [
            (fwd::TUN_GRE, 0, 4),
            (fwd::TUN_GRE, maps::dest_flags::TUN_CSUM, 8),
            (fwd::TUN_GENEVE, 0, 16),
        ] {
            let (_, wire) = encapsulated_with(v6, m, flags, b"");
            let inner_min = 14 + if v6 { 80 } else { 40 } + extra;
            for len in 14..inner_min {
                passes_unchanged(&mut d, &wire[..len]);
            }
        }
    }
    let st = d.stats().unwrap();
    assert_eq!((st.gre, st.geneve), (0, 0));
}
