//! The director's TOA insertion (`bpf/lib/toa_insert.h`, through the fixture
//! `bpf/toa_insert_test.c`) with BPF_PROG_TEST_RUN: IPv4 and IPv6 frames,
//! with and without TCP options, IPv4 options, a VLAN tag and payload. Each
//! output is checked byte by byte against the input: the option is the
//! bytes `rvs_wire::toa` encodes, placed right after the fixed TCP header;
//! the lengths, data offset and both checksums are recomputed here (not by
//! the program); everything else is unchanged. Refusals leave the frame
//! unchanged. Needs root (skips with a message).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use common::{inet_csum, root_or_skip};
use rvs_wire::checksum::l4_checksum;
use rvs_wire::frame::{Ip, Tcp, ethernet, octets};
use rvs_wire::toa::{self, Toa};
use rvs_xdp::toa_insert::{ToaInsertTest, code};

const SRC4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 7);
const DST4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 9);
const SRC6: Ipv6Addr = Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 7);
const DST6: Ipv6Addr = Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, 0, 9);
const MTU: u16 = 1500;

/// The TCP options a Linux SYN carries: MSS 1460, SACK-permitted,
/// timestamps, window scale 7 (20 bytes).
const LINUX_SYN_OPTS: [u8; 20] = [
    2, 4, 0x05, 0xb4, // MSS 1460
    4, 2, // SACK permitted
    8, 10, 0, 0, 0x12, 0x34, 0, 0, 0, 0, // timestamps
    1, // NOP
    3, 3, 7, // window scale 7
];

/// An ACK's options: NOP NOP timestamps (12 bytes).
const ACK_OPTS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0x12, 0x35, 0, 0, 0x56, 0x78];

/// What goes into a test frame.
#[derive(Clone)]
struct Spec {
    v6: bool,
    vlan: bool,
    ip_opts: Vec<u8>,
    tcp_opts: Vec<u8>,
    flags: u8,
    payload: Vec<u8>,
    /// Ethernet padding after the IP packet.
    pad: usize,
}

impl Spec {
    fn new(v6: bool) -> Self {
        Spec {
            v6,
            vlan: false,
            ip_opts: Vec::new(),
            tcp_opts: Vec::new(),
            flags: 0x10,
            payload: Vec::new(),
            pad: 0,
        }
    }
}

/// Where the parts of a frame lie.
#[derive(Debug, Clone, Copy)]
struct Layout {
    l3: usize,
    l4: usize,
    /// The TCP header's length.
    thl: usize,
    /// The IP packet's end.
    ip_end: usize,
}

/// The TCP checksum of the segment `seg` between `src` and `dst`,
/// computed from scratch (pseudo-header of RFC 793 / RFC 8200 § 8.1).
fn tcp_csum(src: IpAddr, dst: IpAddr, seg: &[u8]) -> u16 {
    l4_checksum(&octets(src), &octets(dst), 6, seg)
}

fn addrs(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (SRC6.into(), DST6.into())
    } else {
        (SRC4.into(), DST4.into())
    }
}

/// Build the frame: Ethernet (+ 802.1Q), IPv4 (+ options) or IPv6, TCP
/// (+ options, a multiple of 4 bytes), payload, padding; both checksums
/// right.
fn frame(s: &Spec) -> Vec<u8> {
    let (src, dst) = addrs(s.v6);
    let ip = Ip {
        id: 0x1234,
        flow_label: 0x1_2345,
        options: s.ip_opts.clone(),
        ..Ip::new(src, dst)
    };
    let tcp = Tcp {
        seq: 0x0102_0304,
        ack: 0x0a0b_0c0d,
        window: 0xfaf0,
        options: s.tcp_opts.clone(),
        ..Tcp::new(40000, 8080, s.flags)
    };
    let mut f = ethernet(
        [0x02, 0, 0, 0, 0, 0x02],
        [0x02, 0, 0, 0, 0, 0x01],
        s.vlan.then_some(42),
        &ip.tcp(&tcp, &s.payload),
    );
    f.extend(std::iter::repeat_n(0u8, s.pad));
    f
}

/// Read the layout of a frame `frame` built (checks the IP version too).
fn layout(f: &[u8]) -> Layout {
    let l3 = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
    let (l4, ip_end) = match f[l3] >> 4 {
        4 => {
            let ihl = usize::from(f[l3] & 0xf) * 4;
            let tot = usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]));
            (l3 + ihl, l3 + tot)
        }
        6 => {
            let pl = usize::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]));
            (l3 + 40, l3 + 40 + pl)
        }
        v => panic!("IP version {v}"),
    };
    assert!(ip_end <= f.len(), "IP length past the frame");
    let thl = usize::from(f[l4 + 12] >> 4) * 4;
    Layout {
        l3,
        l4,
        thl,
        ip_end,
    }
}

/// Every check of an inserted frame: `out` is `inp` with the TOA for
/// `client` after the fixed TCP header, lengths and data offset grown,
/// both checksums verifying (computed here), all else byte-identical.
fn check_inserted(inp: &[u8], out: &[u8], client: SocketAddr) {
    let want_opt = Toa::new(client).to_bytes();
    let n = want_opt.len();
    let li = layout(inp);
    let lo = layout(out);
    assert_eq!(out.len(), inp.len() + n, "frame grew by the option");
    assert_eq!((lo.l3, lo.l4), (li.l3, li.l4), "headers keep their offsets");
    assert_eq!(lo.thl, li.thl + n, "data offset grew");
    assert_eq!(lo.ip_end, li.ip_end + n, "IP length grew");
    // Link header unchanged.
    assert_eq!(out[..li.l3], inp[..li.l3]);
    // IP header: unchanged but for the length (and the IPv4 checksum).
    let (src, dst);
    if out[li.l3] >> 4 == 4 {
        let hl = li.l4 - li.l3;
        let (o, i) = (&out[li.l3..li.l4], &inp[li.l3..li.l4]);
        assert_eq!(o[..2], i[..2]);
        assert_eq!(o[4..10], i[4..10]);
        assert_eq!(o[12..hl], i[12..hl], "addresses and IP options unchanged");
        assert_eq!(inet_csum(o), 0, "IPv4 header checksum verifies");
        src = IpAddr::from(<[u8; 4]>::try_from(&o[12..16]).unwrap());
        dst = IpAddr::from(<[u8; 4]>::try_from(&o[16..20]).unwrap());
    } else {
        let (o, i) = (&out[li.l3..li.l4], &inp[li.l3..li.l4]);
        assert_eq!(o[..4], i[..4]);
        assert_eq!(o[6..], i[6..]);
        src = IpAddr::from(<[u8; 16]>::try_from(&o[8..24]).unwrap());
        dst = IpAddr::from(<[u8; 16]>::try_from(&o[24..40]).unwrap());
    }
    // TCP: ports, sequence numbers, flags, window, urgent unchanged.
    let (o, i) = (&out[lo.l4..], &inp[li.l4..]);
    assert_eq!(o[..12], i[..12]);
    assert_eq!(o[12] & 0x0f, i[12] & 0x0f, "reserved bits / NS unchanged");
    assert_eq!(o[13..16], i[13..16]);
    assert_eq!(o[18..20], i[18..20]);
    let seg = &out[lo.l4..lo.ip_end];
    assert_eq!(tcp_csum(src, dst, seg), 0, "TCP checksum verifies");
    // The option first, byte-identical to the codec's, then the options
    // that were there, then the payload and any padding.
    assert_eq!(o[20..20 + n], want_opt[..], "the codec's bytes");
    assert_eq!(o[20 + n..], i[20..], "options, payload, padding unchanged");
    let opts = &out[lo.l4 + 20..lo.l4 + lo.thl];
    assert_eq!(
        toa::find(opts).expect("options parse"),
        Some(Toa::new(client)),
        "the option decodes to the client"
    );
    // And an independent parser takes the frame.
    let p = etherparse::SlicedPacket::from_ethernet(out).expect("etherparse parses the output");
    match p.transport {
        Some(etherparse::TransportSlice::Tcp(t)) => {
            assert_eq!(t.options(), opts);
            // etherparse reads every option but TOA, whose kind it does
            // not know (and says so, rather than failing on its length).
            for o in t.options_iterator() {
                match o {
                    Ok(_) => {}
                    Err(etherparse::TcpOptionReadError::UnknownId(toa::KIND)) => {}
                    Err(e) => panic!("etherparse cannot read the options: {e:?}"),
                }
            }
        }
        other => panic!("not TCP: {other:?}"),
    }
}

fn fixture(test: &str) -> Option<ToaInsertTest> {
    if !root_or_skip(test) {
        return None;
    }
    Some(ToaInsertTest::load().expect("the fixture loads (verifier)"))
}

fn client4() -> SocketAddr {
    "198.51.100.23:51234".parse().unwrap()
}

fn client6() -> SocketAddr {
    "[2001:db8::17:23]:51235".parse().unwrap()
}

/// Insert into `s`'s frame for `client` and check everything.
fn inserts(t: &mut ToaInsertTest, s: &Spec, client: SocketAddr) {
    let f = frame(s);
    let r = t.insert(&f, client, MTU).expect("test run");
    assert_eq!(r.action, code::OK, "inserted");
    check_inserted(&f, &r.data, client);
}

/// `s`'s frame is refused with `want` and comes out unchanged.
fn refused(t: &mut ToaInsertTest, f: &[u8], client: SocketAddr, mtu: u16, want: u32) {
    let r = t.insert(f, client, mtu).expect("test run");
    assert_eq!(r.action, want, "refused with the right code");
    assert_eq!(r.data, f, "a refused frame is unchanged");
}

#[test]
fn inserts_into_bare_segments_v4_and_v6() {
    let Some(mut t) = fixture("inserts_into_bare_segments_v4_and_v6") else {
        return;
    };
    for v6 in [false, true] {
        let client = if v6 { client6() } else { client4() };
        inserts(&mut t, &Spec::new(v6), client);
    }
}

#[test]
fn inserts_before_existing_options() {
    let Some(mut t) = fixture("inserts_before_existing_options") else {
        return;
    };
    for v6 in [false, true] {
        let client = if v6 { client6() } else { client4() };
        // The handshake's ACK (timestamps), and a Linux SYN (MSS,
        // SACK-permitted, timestamps, window scale).
        let mut s = Spec::new(v6);
        s.tcp_opts = ACK_OPTS.to_vec();
        inserts(&mut t, &s, client);
        s.tcp_opts = LINUX_SYN_OPTS.to_vec();
        s.flags = 0x02;
        inserts(&mut t, &s, client);
    }
}

#[test]
fn inserts_with_payload_of_every_parity() {
    let Some(mut t) = fixture("inserts_with_payload_of_every_parity") else {
        return;
    };
    for v6 in [false, true] {
        let client = if v6 { client6() } else { client4() };
        for len in [1usize, 2, 3, 17, 100, 1001] {
            let mut s = Spec::new(v6);
            s.tcp_opts = ACK_OPTS.to_vec();
            s.flags = 0x18;
            s.payload = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            inserts(&mut t, &s, client);
        }
    }
}

#[test]
fn inserts_behind_ipv4_options_and_a_vlan_tag() {
    let Some(mut t) = fixture("inserts_behind_ipv4_options_and_a_vlan_tag") else {
        return;
    };
    for ip_opts in [4usize, 8, 40] {
        for vlan in [false, true] {
            let mut s = Spec::new(false);
            // NOPs then EOL: harmless IPv4 options of any length.
            s.ip_opts = vec![1; ip_opts];
            s.ip_opts[ip_opts - 1] = 0;
            s.vlan = vlan;
            s.tcp_opts = LINUX_SYN_OPTS.to_vec();
            s.flags = 0x02;
            s.payload = b"abc".to_vec();
            inserts(&mut t, &s, client4());
        }
    }
    // The longest head that moves: VLAN + 60-byte IPv4 header + TCP.
    let mut s = Spec::new(false);
    s.vlan = true;
    s.ip_opts = vec![1; 40];
    s.tcp_opts = vec![1; 32];
    inserts(&mut t, &s, client4());
    // IPv6 behind a VLAN tag.
    let mut s = Spec::new(true);
    s.vlan = true;
    s.tcp_opts = ACK_OPTS.to_vec();
    inserts(&mut t, &s, client6());
}

#[test]
fn ethernet_padding_stays_behind_the_packet() {
    let Some(mut t) = fixture("ethernet_padding_stays_behind_the_packet") else {
        return;
    };
    // A bare IPv4 ACK is 54 bytes; on the wire it arrives padded to 60.
    let mut s = Spec::new(false);
    s.pad = 6;
    inserts(&mut t, &s, client4());
}

#[test]
fn an_ipv4_client_of_an_ipv6_server_goes_v4_mapped() {
    let Some(mut t) = fixture("an_ipv4_client_of_an_ipv6_server_goes_v4_mapped") else {
        return;
    };
    let mapped = SocketAddr::new(
        IpAddr::V6(Ipv4Addr::new(198, 51, 100, 23).to_ipv6_mapped()),
        51234,
    );
    let mut s = Spec::new(true);
    s.tcp_opts = ACK_OPTS.to_vec();
    inserts(&mut t, &s, mapped);
    // And an IPv6 client's 20-byte form travels in an IPv4 packet too.
    let mut s = Spec::new(false);
    s.tcp_opts = ACK_OPTS.to_vec();
    inserts(&mut t, &s, client6());
}

#[test]
fn the_40_byte_option_limit() {
    let Some(mut t) = fixture("the_40_byte_option_limit") else {
        return;
    };
    for (client, n) in [(client4(), 8usize), (client6(), 20)] {
        for v6 in [false, true] {
            // Exactly 40 after insertion: accepted.
            let mut s = Spec::new(v6);
            s.tcp_opts = vec![1; 40 - n];
            inserts(&mut t, &s, client);
            // 4 more: refused, unchanged.
            s.tcp_opts = vec![1; 40 - n + 4];
            refused(&mut t, &frame(&s), client, MTU, code::NOROOM);
            // Already full.
            s.tcp_opts = vec![1; 40];
            refused(&mut t, &frame(&s), client, MTU, code::NOROOM);
        }
    }
}

#[test]
fn the_mtu_limit() {
    let Some(mut t) = fixture("the_mtu_limit") else {
        return;
    };
    for (v6, client, n) in [(false, client4(), 8u16), (true, client6(), 20)] {
        let mut s = Spec::new(v6);
        s.tcp_opts = ACK_OPTS.to_vec();
        s.payload = vec![0x55; 1000];
        let f = frame(&s);
        let ip_len = (f.len() - 14) as u16;
        // Exactly the MTU after insertion: accepted.
        let r = t.insert(&f, client, ip_len + n).expect("test run");
        assert_eq!(r.action, code::OK);
        check_inserted(&f, &r.data, client);
        // One byte over: refused, unchanged.
        refused(&mut t, &f, client, ip_len + n - 1, code::MTU);
    }
}

#[test]
fn refuses_what_is_not_a_well_formed_tcp_segment() {
    let Some(mut t) = fixture("refuses_what_is_not_a_well_formed_tcp_segment") else {
        return;
    };
    let c = client4();
    let good = frame(&Spec::new(false));
    // Data offset below 5.
    let mut f = good.clone();
    f[14 + 20 + 12] = 0x40;
    refused(&mut t, &f, c, MTU, code::PKT);
    // IP total length shorter than the TCP header.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&30u16.to_be_bytes());
    common::fix_ip4_csum(&mut f, 14);
    refused(&mut t, &f, c, MTU, code::PKT);
    // IP total length past the end of the frame.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&100u16.to_be_bytes());
    common::fix_ip4_csum(&mut f, 14);
    refused(&mut t, &f, c, MTU, code::PKT);
    // Options the data offset claims but the frame lacks.
    let mut f = good.clone();
    f[14 + 20 + 12] = 0x80;
    refused(&mut t, &f, c, MTU, code::PKT);
    // UDP: parsed, but not TCP.
    let u = common::udp_frame(SRC4.into(), 5000, DST4.into(), 53, b"q");
    refused(&mut t, &u, c, MTU, code::PKT);
    // Not IP: the parser does not take it.
    let mut arp = good.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    refused(&mut t, &arp, c, MTU, code::NOT_PARSED);
}

/// A SYN with `opts`; the clamp's expected result.
fn clamp_case(
    t: &mut ToaInsertTest,
    v6: bool,
    opts: &[u8],
    reduce: u16,
) -> (u32, Vec<u8>, Vec<u8>) {
    let mut s = Spec::new(v6);
    s.flags = 0x12; // a SYN-ACK (the real server's, as DPVS clamps it)
    s.tcp_opts = opts.to_vec();
    let f = frame(&s);
    let r = t.mss_clamp(&f, reduce).expect("test run");
    (r.action, f, r.data)
}

/// `out` is `inp` with the MSS at option offset `at` set to `mss`, and
/// the TCP checksum verifying.
fn check_clamped(inp: &[u8], out: &[u8], at: usize, mss: u16) {
    let l = layout(inp);
    assert_eq!(out.len(), inp.len());
    let mut want = inp.to_vec();
    let m = l.l4 + 20 + at + 2;
    want[m..m + 2].copy_from_slice(&mss.to_be_bytes());
    // Everything but the checksum as expected…
    let mut o = out.to_vec();
    o[l.l4 + 16..l.l4 + 18].copy_from_slice(&want[l.l4 + 16..l.l4 + 18]);
    assert_eq!(o, want);
    // …and the checksum verifies.
    let (src, dst) = addrs(inp[l.l3] >> 4 == 6);
    assert_eq!(
        tcp_csum(src, dst, &out[l.l4..l.ip_end]),
        0,
        "TCP checksum verifies"
    );
}

#[test]
fn mss_clamp_is_exact() {
    let Some(mut t) = fixture("mss_clamp_is_exact") else {
        return;
    };
    for v6 in [false, true] {
        for reduce in [8u16, 20] {
            // MSS first (its value at an even offset of the header).
            let (rc, f, out) = clamp_case(&mut t, v6, &LINUX_SYN_OPTS, reduce);
            assert_eq!(rc, code::OK);
            check_clamped(&f, &out, 0, 1460 - reduce);
            // Behind a NOP (its value at an odd offset), then others.
            let mut opts = vec![1u8, 2, 4, 0x23, 0x45, 4, 2, 1];
            opts.extend_from_slice(&[1, 1, 1, 0]);
            let (rc, f, out) = clamp_case(&mut t, v6, &opts, reduce);
            assert_eq!(rc, code::OK);
            check_clamped(&f, &out, 1, 0x2345 - reduce);
            // Behind window scale (3 bytes: odd again) and timestamps.
            let mut opts = vec![3u8, 3, 7];
            opts.extend_from_slice(&[8, 10, 1, 2, 3, 4, 5, 6, 7, 8]);
            opts.extend_from_slice(&[2, 4, 0x05, 0x8c]);
            opts.extend_from_slice(&[0, 0, 0]);
            let (rc, f, out) = clamp_case(&mut t, v6, &opts, reduce);
            assert_eq!(rc, code::OK);
            check_clamped(&f, &out, 13, 1420 - reduce);
        }
        // The floor: exactly 88 after is fine, below is refused.
        let (rc, f, out) = clamp_case(&mut t, v6, &[2, 4, 0, 96], 8);
        assert_eq!(rc, code::OK);
        check_clamped(&f, &out, 0, 88);
        let (rc, f, out) = clamp_case(&mut t, v6, &[2, 4, 0, 95], 8);
        assert_eq!(rc, code::NOROOM);
        assert_eq!(out, f);
    }
}

#[test]
fn mss_clamp_leaves_what_it_cannot_clamp() {
    let Some(mut t) = fixture("mss_clamp_leaves_what_it_cannot_clamp") else {
        return;
    };
    for v6 in [false, true] {
        // No MSS option.
        let (rc, f, out) = clamp_case(&mut t, v6, &ACK_OPTS, 8);
        assert_eq!(rc, code::MSS_NONE);
        assert_eq!(out, f);
        // No options.
        let (rc, f, out) = clamp_case(&mut t, v6, &[], 8);
        assert_eq!(rc, code::MSS_NONE);
        assert_eq!(out, f);
        // An MSS behind EOL does not count.
        let (rc, f, out) = clamp_case(&mut t, v6, &[0, 0, 0, 0, 2, 4, 5, 0xb4], 8);
        assert_eq!(rc, code::MSS_NONE);
        assert_eq!(out, f);
        // A zero option length: malformed.
        let (rc, f, out) = clamp_case(&mut t, v6, &[4, 0, 2, 4, 5, 0xb4, 1, 1], 8);
        assert_eq!(rc, code::PKT);
        assert_eq!(out, f);
        // An option running past the header.
        let (rc, f, out) = clamp_case(&mut t, v6, &[1, 1, 8, 10], 8);
        assert_eq!(rc, code::PKT);
        assert_eq!(out, f);
        // An MSS of the wrong length.
        let (rc, f, out) = clamp_case(&mut t, v6, &[2, 3, 5, 1], 8);
        assert_eq!(rc, code::PKT);
        assert_eq!(out, f);
        // Not a SYN.
        let mut s = Spec::new(v6);
        s.tcp_opts = LINUX_SYN_OPTS.to_vec();
        let f = frame(&s);
        let r = t.mss_clamp(&f, 8).expect("test run");
        assert_eq!(r.action, code::PKT);
        assert_eq!(r.data, f);
    }
}

// ------------------------------------------------------------------------
// The real kernel: the inserted segments reach a real TCP socket, and the
// real server's TOA reader (bpf/toa.c) returns the inserted address.

/// The marker of the child's report lines (libtest prints its own).
const MARK: &str = "RVS_TOAINS ";
const LIVE_PORT: u16 = 8080;

/// Kills and reaps a child on drop (also when the test fails).
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next report line of the child (panics when it ends first).
fn report(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> String {
    for l in lines {
        let l = l.expect("reading the child's stdout");
        if let Some(at) = l.find(MARK) {
            return l[at + MARK.len()..].to_owned();
        }
    }
    panic!("the child exited without reporting");
}

/// Not a test: the server the live tests start in their namespace and
/// cgroup (`RVS_TOAINS_CHILD=ADDR`): listens on ADDR, reports `listen`,
/// accepts one connection, reports `peer ADDR` (getpeername), echoes one
/// read back and exits.
#[test]
#[ignore = "the child process of the live toa_insert tests, which run it with --ignored --exact"]
fn toa_insert_child() {
    use std::io::{Read, Write};
    let Ok(addr) = std::env::var("RVS_TOAINS_CHILD") else {
        panic!("run by the live toa_insert tests only (RVS_TOAINS_CHILD unset)");
    };
    let addr: SocketAddr = addr.parse().expect("an address");
    let l = std::net::TcpListener::bind(addr).expect("bind");
    println!("{MARK}listen");
    let (mut s, _) = l.accept().expect("accept");
    println!("{MARK}peer {}", s.peer_addr().expect("getpeername"));
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("read");
    s.write_all(&buf[..n]).expect("echo");
}

/// The fixture inserts the TOA for `client` into the segments to the
/// server at `server` (on the loopback of a namespace of this test's); the
/// server runs in a cgroup with the TOA reader: its getpeername() returns
/// `client`, and the connection carries data both ways.
fn live(test: &str, server: SocketAddr, client: SocketAddr) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::time::Duration;

    if !root_or_skip(test) {
        return;
    }
    if rvs_testbed::cgroup::unified_root().is_none() {
        rvs_testbed::skip_or_fail(test, "no cgroup v2 hierarchy mounted");
        return;
    }
    if let Err(e) = rvs_xdp::toa::probe() {
        rvs_testbed::skip_or_fail(test, e);
        return;
    }
    let ns = rvs_testbed::Netns::new("rvti");
    let cg = rvs_testbed::Cgroup::new("rvs-toains-");
    let mut reader = rvs_xdp::toa::ToaReader::load().expect("the TOA reader loads");
    reader.attach(cg.path()).expect("the TOA reader attaches");
    let mut t = ns.run(move || {
        let mut t = ToaInsertTest::load().expect("the fixture loads");
        t.attach_live("lo", client, MTU, LIVE_PORT)
            .expect("the fixture attaches to the namespace's loopback");
        t
    });

    let me = std::env::current_exe().expect("the test binary's path");
    // Into the cgroup first: `ip netns exec` mounts a sysfs of the
    // namespace's, which hides the cgroup hierarchy under /sys/fs/cgroup.
    let mut child = std::process::Command::new("sh");
    child
        .arg("-c")
        .arg(r#"echo $$ > "$0/cgroup.procs" && shift && exec "$@""#)
        .arg(cg.path())
        .arg("--")
        .args(["ip", "netns", "exec", ns.name()])
        .arg(&me)
        .args([
            "--ignored",
            "--exact",
            "toa_insert_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RVS_TOAINS_CHILD", server.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    let mut child = Reap(child.spawn().expect("spawning the server"));
    let out = child.0.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(out).lines();
    assert_eq!(report(&mut lines), "listen");

    let echoed = ns.run(move || {
        let mut s =
            std::net::TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(b"ping through the TOA").expect("write");
        let mut back = Vec::new();
        s.read_to_end(&mut back).expect("read the echo");
        back
    });
    let peer = report(&mut lines);
    let codes = t.live_codes().expect("the fixture's counters");
    let st = reader.stats().expect("the reader's counters");
    let why = format!("fixture codes {codes:?}, reader {st:?}");
    assert_eq!(peer, format!("peer {client}"), "{why}");
    assert_eq!(echoed, b"ping through the TOA");
    // At least the SYN and the handshake's ACK got the option.
    assert!(codes[code::OK as usize] >= 2, "{why}");
    assert!(st.from_ack + st.from_syn >= 1, "{why}");
}

#[test]
fn live_v4_getpeername_returns_the_inserted_address() {
    live(
        "live_v4_getpeername_returns_the_inserted_address",
        SocketAddr::new(Ipv4Addr::LOCALHOST.into(), LIVE_PORT),
        client4(),
    );
}

#[test]
fn live_v6_getpeername_returns_the_inserted_address() {
    live(
        "live_v6_getpeername_returns_the_inserted_address",
        SocketAddr::new(Ipv6Addr::LOCALHOST.into(), LIVE_PORT),
        client6(),
    );
}
