use super::*;
use proptest::prelude::*;

/// RFC 1071 checksum of the concatenation of `parts` (reference, written
/// out here rather than shared with the parser).
fn csum(parts: &[&[u8]]) -> u16 {
    let all: Vec<u8> = parts.concat();
    let mut s: u32 = 0;
    let mut i = 0;
    while i < all.len() {
        let hi = u32::from(all[i]) << 8;
        let lo = all.get(i + 1).map_or(0, |b| u32::from(*b));
        s += hi | lo;
        i += 2;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0x40, 0, ttl, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(&[&h]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn ip6(src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[proto, 64]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

fn pseudo_hdr(src: &[u8], dst: &[u8], proto: u8, len: usize) -> Vec<u8> {
    let mut p = src.to_vec();
    p.extend_from_slice(dst);
    if src.len() == 4 {
        p.extend_from_slice(&[0, proto]);
        p.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        p.extend_from_slice(&(len as u32).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, proto]);
    }
    p
}

/// A UDP datagram `sport -> dport` with its checksum.
fn udp(src: &[u8], dst: &[u8], sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    let c = csum(&[&pseudo_hdr(src, dst, 17, u.len()), &u]);
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

const C4: [u8; 4] = [10, 0, 0, 1];
const V4: [u8; 4] = [10, 0, 0, 100];
const R4: [u8; 4] = [10, 0, 1, 7];

/// Port unreachable from R4 to C4 quoting C4:5000 -> V4:53 (UDP, whole).
fn port_unreach4() -> Vec<u8> {
    let quoted = ip4(C4, V4, 17, 64, &udp(&C4, &V4, 5000, 53, b"query"));
    let mut m = vec![3, 3, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&quoted);
    let c = csum(&[&m]);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ip4(R4, C4, 1, 63, &m)
}

/// Packet too big (MTU 1400) quoting `src:4000 -> dst:80` (UDP, cut to
/// `cut` bytes of the quoted packet).
fn ptb6(cut: usize) -> Vec<u8> {
    let (s, d, r) = (
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3],
    );
    let quoted = ip6(s, d, 17, &udp(&s, &d, 4000, 80, &[7u8; 64]));
    let quoted = &quoted[..cut.min(quoted.len())];
    let mut m = vec![2, 0, 0, 0];
    m.extend_from_slice(&1400u32.to_be_bytes());
    m.extend_from_slice(quoted);
    let c = csum(&[&pseudo_hdr(&r, &s, 58, m.len()), &m]);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ip6(r, s, 58, &m)
}

#[test]
fn v4_port_unreachable_parses_with_every_checksum_valid() {
    let m = parse(&port_unreach4()).expect("parses");
    assert_eq!((m.icmp_type, m.code, m.mtu, m.ttl), (3, 3, None, 63));
    assert_eq!(m.src, IpAddr::from(R4));
    assert_eq!(m.dst, IpAddr::from(C4));
    assert_eq!(m.proto, PROTO_UDP);
    assert_eq!(m.quoted_src, SocketAddr::new(C4.into(), 5000));
    assert_eq!(m.quoted_dst, SocketAddr::new(V4.into(), 53));
    assert_eq!(
        m.checksums,
        Checksums {
            outer_ip: Some(true),
            icmp: true,
            quoted_ip: Some(true),
            quoted_l4: Some(true),
        }
    );
    assert!(m.checksums.all_valid());
}

#[test]
fn v6_packet_too_big_parses_whole_and_cut_quotes() {
    let m = parse(&ptb6(usize::MAX)).expect("parses");
    assert_eq!((m.icmp_type, m.mtu), (2, Some(1400)));
    assert_eq!(m.quoted_src.port(), 4000);
    assert_eq!(m.checksums.outer_ip, None);
    assert_eq!(m.checksums.quoted_l4, Some(true));
    assert!(m.checksums.all_valid());
    // Cut after the ports: the UDP checksum cannot be checked.
    let m = parse(&ptb6(44)).expect("parses");
    assert_eq!(m.checksums.quoted_l4, None);
    assert!(m.checksums.all_valid());
}

/// A changed byte anywhere in a checksummed field is caught by the checksum
/// that covers it (the same change in the checksum field itself is too).
#[test]
fn a_changed_byte_fails_the_checksum_that_covers_it() {
    let good = port_unreach4();
    // Outer header, ICMP header, quoted IP header, quoted UDP, payload.
    for (at, which) in [
        (12usize, "outer"),
        (20 + 4, "icmp"),
        (28 + 12, "quoted ip"),
        (48 + 1, "quoted l4"),
        (48 + 8, "quoted l4"),
    ] {
        let mut f = good.clone();
        f[at] ^= 0x10;
        let c = parse(&f).expect("still parses").checksums;
        assert!(!c.all_valid(), "byte {at} ({which}) changed unnoticed");
        match which {
            "outer" => assert_eq!(c.outer_ip, Some(false)),
            "quoted ip" => assert_eq!(c.quoted_ip, Some(false)),
            "quoted l4" => assert_eq!(c.quoted_l4, Some(false)),
            _ => assert!(!c.icmp),
        }
    }
    // The ICMPv6 checksum covers the outer addresses (pseudo-header).
    let mut f = ptb6(usize::MAX);
    f[8] ^= 1;
    assert!(!parse(&f).expect("parses").checksums.icmp);
}

#[test]
fn malformed_messages_are_errors() {
    let good = port_unreach4();
    for n in 0..48 {
        assert!(parse(&good[..n]).is_err(), "{n} bytes");
    }
    let mut echo = good.clone();
    echo[20] = 8;
    assert_eq!(parse(&echo), Err(IcmpError::NotAnError(8)));
    let mut tcp = good.clone();
    tcp[9] = 6;
    assert_eq!(parse(&tcp), Err(IcmpError::NotIcmp(6)));
    let mut q = good.clone();
    q[28 + 9] = 47;
    assert_eq!(parse(&q), Err(IcmpError::QuotedProto(47)));
    let mut v = good;
    v[28] = 0x65;
    assert_eq!(parse(&v), Err(IcmpError::Version(6)));
}

proptest! {
    #[test]
    fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&b);
    }

    #[test]
    fn never_panics_near_a_valid_message(flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..6),
                                         cut in 0usize..200) {
        let mut f = port_unreach4();
        for (at, x) in flips {
            let n = f.len();
            f[at % n] ^= x;
        }
        f.truncate(cut.max(1));
        let _ = parse(&f);
    }
}
