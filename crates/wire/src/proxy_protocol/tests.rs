//! Unit and property tests for the PROXY protocol. Literal vectors come from
//! the spec's text (§2.1 examples) or are assembled by hand from its §2.2
//! layout, never from this crate's own builder.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;

use super::*;

fn v4(a: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(a), port))
}

fn v6(s: &str, port: u16) -> SocketAddr {
    let ip: Ipv6Addr = s.parse().unwrap();
    SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0))
}

fn complete(buf: &[u8]) -> (ProxyHeader, usize) {
    match parse(buf) {
        Ok(Parsed::Complete { header, consumed }) => (header, consumed),
        other => panic!("expected Complete for {buf:?}, got {other:?}"),
    }
}

fn err(buf: &[u8]) -> ParseError {
    match parse(buf) {
        Err(e) => e,
        other => panic!(
            "expected Err for {:?}, got {other:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

fn sig_with(rest: &[u8]) -> Vec<u8> {
    let mut v = V2_SIGNATURE.to_vec();
    v.extend_from_slice(rest);
    v
}

/// The v2 header [`write_v2`] writes for these (which must build).
fn written_v2(
    command: Command,
    transport: Transport,
    addrs: Option<(SocketAddr, SocketAddr)>,
    tlvs: &[Tlv],
) -> Vec<u8> {
    let mut out = Vec::new();
    write_v2(command, transport, addrs, tlvs, &mut out).unwrap();
    out
}

// ---------------------------------------------------------------- CRC32C

#[test]
fn crc32c_check_vectors() {
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    // RFC 3720 §B.4 iSCSI vectors: 32 zero bytes, 32 0xFF bytes.
    assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
    assert_eq!(crc32c(b""), 0);
}

// ---------------------------------------------------------------- v1

#[test]
fn v1_spec_example_tcp4_followed_by_http() {
    let line = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
    let mut buf = line.to_vec();
    buf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n");
    let (h, consumed) = complete(&buf);
    assert_eq!(consumed, line.len());
    assert_eq!(&buf[consumed..consumed + 3], b"GET");
    assert_eq!(
        h,
        ProxyHeader {
            version: Version::V1,
            command: Command::Proxy,
            transport: Transport::Stream,
            family: Family::Inet,
            addresses: Some((v4([192, 168, 0, 1], 56324), v4([192, 168, 0, 11], 443))),
            tlvs: vec![],
        }
    );
}

#[test]
fn v1_write_matches_spec_example() {
    let (src, dst) = (v4([192, 168, 0, 1], 56324), v4([192, 168, 0, 11], 443));
    let mut out = b"prefix".to_vec();
    write_v1(src, dst, &mut out);
    assert_eq!(
        &out[..],
        b"prefixPROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    );
    assert_eq!(v1_buffer_len(src, dst), out.len() - 6);
}

#[test]
fn v1_spec_maximum_lengths() {
    let tcp4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
    assert_eq!(tcp4.len(), 56);
    assert_eq!(complete(tcp4).1, 56);
    let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let tcp6 = format!("PROXY TCP6 {f} {f} 65535 65535\r\n");
    assert_eq!(tcp6.len(), 104);
    let (h, n) = complete(tcp6.as_bytes());
    assert_eq!(n, 104);
    assert_eq!(h.addresses, Some((v6(f, 65535), v6(f, 65535))));
    assert_eq!(
        v1_buffer_len(v6(f, 65535), v6(f, 65535)),
        104,
        "builder worst case"
    );
    // The §2.1 worst case is exactly the 107-byte limit.
    let worst = format!("PROXY UNKNOWN {f} {f} 65535 65535\r\n");
    assert_eq!(worst.len(), V1_MAX_LEN);
    let (h, n) = complete(worst.as_bytes());
    assert_eq!(n, 107);
    assert_eq!(h.addresses, None);
    assert_eq!(h.family, Family::Unspec);
}

#[test]
fn v1_unknown_short_form() {
    let mut out = Vec::new();
    write_v1_unknown(&mut out);
    assert_eq!(out, b"PROXY UNKNOWN\r\n");
    let (h, n) = complete(b"PROXY UNKNOWN\r\nSSH-2.0-x\r\n");
    assert_eq!(n, 15);
    assert_eq!(
        h,
        ProxyHeader {
            version: Version::V1,
            command: Command::Proxy,
            transport: Transport::Unspec,
            family: Family::Unspec,
            addresses: None,
            tlvs: vec![],
        }
    );
    assert_eq!(h.buffer_len(), 15);
}

#[test]
fn v1_line_of_108_bytes_is_too_long() {
    // 107 bytes: accepted; 108: refused (CRLF not within the first 107).
    let ok = format!("PROXY UNKNOWN {}\r\n", "x".repeat(107 - 16));
    assert_eq!(ok.len(), 107);
    assert_eq!(complete(ok.as_bytes()).1, 107);
    let long = format!("PROXY UNKNOWN {}\r\n", "x".repeat(108 - 16));
    assert_eq!(long.len(), 108);
    assert_eq!(err(long.as_bytes()), ParseError::V1TooLong);
    // Without the CRLF at all: incomplete below 107 bytes, an error at 107.
    let open = format!("PROXY UNKNOWN {}", "x".repeat(92));
    assert_eq!(open.len(), 106);
    assert!(matches!(
        parse(open.as_bytes()),
        Ok(Parsed::Incomplete { .. })
    ));
    let open = format!("{open}x");
    assert_eq!(err(open.as_bytes()), ParseError::V1TooLong);
}

#[test]
fn v1_mixed_families_use_tcp6_with_mapped_ipv4() {
    let (src, dst) = (v4([10, 0, 0, 1], 1000), v6("2001:db8::1", 80));
    let mut out = Vec::new();
    write_v1(src, dst, &mut out);
    assert_eq!(out, b"PROXY TCP6 ::ffff:10.0.0.1 2001:db8::1 1000 80\r\n");
    let (h, _) = complete(&out);
    assert_eq!(
        h.addresses,
        Some((v6("::ffff:10.0.0.1", 1000), v6("2001:db8::1", 80)))
    );
    assert_eq!(h.family, Family::Inet6);
}

#[test]
fn v1_rejects_malformed_lines() {
    let bad_field = |field| ParseError::V1BadField { field };
    let cases: &[(&[u8], ParseError)] = &[
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 0443 80\r\n",
            bad_field("source port"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 443 65536\r\n",
            bad_field("destination port"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 443 100000\r\n",
            bad_field("destination port"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 443 \r\n",
            bad_field("destination port"),
        ),
        (
            b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
            bad_field("source address"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.256 1 2\r\n",
            bad_field("destination address"),
        ),
        (
            b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
            bad_field("source address"),
        ),
        (
            b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n",
            bad_field("source address"),
        ),
        (
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            bad_field("source address"),
        ),
        (
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            bad_field("source address"),
        ),
        (
            b"PROXY TCP6 ::1 ::g 1 2\r\n",
            ParseError::V1BadByte {
                offset: 17,
                byte: b'g',
            },
        ),
        (
            b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
            bad_field("field count"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
            bad_field("field count"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            bad_field("field count"),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
            ParseError::V1BadByte {
                offset: 27,
                byte: b'+',
            },
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
            ParseError::V1BareCrOrLf { offset: 30 },
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
            ParseError::V1BareCrOrLf { offset: 30 },
        ),
        (b"PROXY UNKNOWN\n", ParseError::V1BareCrOrLf { offset: 13 }),
        (
            b"PROXY UNKNOWN foo\nbar\r\n",
            ParseError::V1BareCrOrLf { offset: 17 },
        ),
        (b"PROXY UDP4 ", ParseError::V1BadProtocol),
        (b"PROXY TCP5", ParseError::V1BadProtocol),
        (b"PROXY TCP4\r\n", ParseError::V1BadProtocol),
        (b"PROXY UNKNOWNX\r\n", ParseError::V1BadProtocol),
        (b"PROXY  TCP4", ParseError::V1BadProtocol),
        (b"proxy TCP4", ParseError::NotProxy { offset: 0 }),
        (b"PROXYTCP4", ParseError::NotProxy { offset: 5 }),
    ];
    for (input, want) in cases {
        assert_eq!(&err(input), want, "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn v1_zero_port_and_zero_octets_are_accepted() {
    let (h, _) = complete(b"PROXY TCP4 0.0.0.0 10.0.0.1 0 65535\r\n");
    assert_eq!(
        h.addresses,
        Some((v4([0, 0, 0, 0], 0), v4([10, 0, 0, 1], 65535)))
    );
}

// ---------------------------------------------------------------- v2 vectors

/// §2.2 by hand: TCP over IPv4, 192.168.0.1:56324 -> 192.168.0.11:443.
const V2_TCP4: [u8; 28] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, // signature
    0x21, // version 2, PROXY
    0x11, // AF_INET, STREAM
    0x00, 0x0C, // 12 address bytes
    192, 168, 0, 1, // src
    192, 168, 0, 11, // dst
    0xDC, 0x04, // 56324
    0x01, 0xBB, // 443
];

#[test]
fn v2_tcp4_vector_parses_and_builds_byte_exact() {
    let (h, n) = complete(&V2_TCP4);
    assert_eq!(n, 28);
    let addrs = (v4([192, 168, 0, 1], 56324), v4([192, 168, 0, 11], 443));
    assert_eq!(
        h,
        ProxyHeader {
            version: Version::V2,
            command: Command::Proxy,
            transport: Transport::Stream,
            family: Family::Inet,
            addresses: Some(addrs),
            tlvs: vec![],
        }
    );
    let out = written_v2(Command::Proxy, Transport::Stream, Some(addrs), &[]);
    assert_eq!(out, V2_TCP4);
    assert_eq!(
        v2_buffer_len(Command::Proxy, Transport::Stream, Some(addrs), &[]),
        28
    );
}

#[test]
fn v2_udp6_vector_with_tlvs() {
    let mut v = sig_with(&[0x21, 0x22, 0x00, 36 + 5 + 14 + 4]);
    v.extend_from_slice(&[
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
    ]);
    v.extend_from_slice(&[
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
    ]);
    v.extend_from_slice(&[0x13, 0x88, 0x00, 0x35]); // 5000 -> 53
    v.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']); // ALPN "h2"
    v.extend_from_slice(&[0x02, 0x00, 0x0B]); // AUTHORITY
    v.extend_from_slice(b"example.com");
    v.extend_from_slice(&[0xE0, 0x00, 0x01, 0x7F]); // custom type
    let (h, n) = complete(&v);
    assert_eq!(n, v.len());
    let addrs = (v6("2001:db8::1", 5000), v6("2001:db8::2", 53));
    assert_eq!(h.addresses, Some(addrs));
    assert_eq!(
        (h.family, h.transport),
        (Family::Inet6, Transport::Datagram)
    );
    let tlvs = vec![
        Tlv::new(TlvType::Alpn, &b"h2"[..]),
        Tlv::new(TlvType::Authority, &b"example.com"[..]),
        Tlv {
            kind: 0xE0,
            value: vec![0x7F],
        },
    ];
    assert_eq!(h.tlvs, tlvs);
    assert_eq!(h.tlvs[0].known_type(), Some(TlvType::Alpn));
    assert_eq!(h.tlvs[2].known_type(), None);
    let out = written_v2(Command::Proxy, Transport::Datagram, Some(addrs), &tlvs);
    assert_eq!(out, v);
}

#[test]
fn v2_mixed_families_map_ipv4_into_ipv6() {
    let (src, dst) = (v4([10, 1, 2, 3], 4000), v6("2001:db8::9", 443));
    let out = written_v2(Command::Proxy, Transport::Stream, Some((src, dst)), &[]);
    let mut want = sig_with(&[0x21, 0x21, 0x00, 36]);
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 1, 2, 3]);
    want.extend_from_slice(&[
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x09,
    ]);
    want.extend_from_slice(&[0x0F, 0xA0, 0x01, 0xBB]);
    assert_eq!(out, want);
}

#[test]
fn v2_local_health_check() {
    let v = sig_with(&[0x20, 0x00, 0x00, 0x00]);
    let (h, n) = complete(&v);
    assert_eq!(n, 16);
    let local = ProxyHeader {
        version: Version::V2,
        command: Command::Local,
        transport: Transport::Unspec,
        family: Family::Unspec,
        addresses: None,
        tlvs: vec![],
    };
    assert_eq!(h, local);
    // The builder ignores addresses for LOCAL and writes the UNSPEC byte.
    let addrs = (v4([1, 2, 3, 4], 1), v4([5, 6, 7, 8], 2));
    let out = written_v2(Command::Local, Transport::Stream, Some(addrs), &[]);
    assert_eq!(out, v);
    // A LOCAL header that still carries an AF_INET block: skipped, ignored.
    let mut v = sig_with(&[0x20, 0x11, 0x00, 12 + 4]);
    v.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
    v.extend_from_slice(&[0x04, 0x00, 0x01, 0x00]); // NOOP
    let (h, n) = complete(&v);
    assert_eq!(n, 32);
    assert_eq!(h.addresses, None);
    assert_eq!(h.tlvs, vec![Tlv::new(TlvType::Noop, vec![0])]);
}

#[test]
fn v2_unix_addresses_are_skipped() {
    let mut v = sig_with(&[0x21, 0x31, 0x00, 216]);
    v.extend(std::iter::repeat_n(b'/', 216));
    v.extend_from_slice(b"app data");
    let (h, n) = complete(&v);
    assert_eq!(n, 232);
    assert_eq!(
        (h.family, h.transport, h.addresses),
        (Family::Unix, Transport::Stream, None)
    );
    // Re-encoding keeps the family (with a zeroed address block).
    let mut out = Vec::new();
    h.emit(&mut out).unwrap();
    assert_eq!(out.len(), 232);
    assert_eq!(complete(&out).0, h);
}

#[test]
fn v2_unspec_transport_ignores_addresses() {
    let mut v = sig_with(&[0x21, 0x10, 0x00, 12]);
    v.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
    let (h, n) = complete(&v);
    assert_eq!(n, 28);
    assert_eq!(
        (h.family, h.transport, h.addresses),
        (Family::Inet, Transport::Unspec, None)
    );
}

#[test]
fn v2_rejects_bad_fixed_fields() {
    assert_eq!(
        err(&sig_with(&[0x11])),
        ParseError::V2BadVersion { version: 1 }
    );
    assert_eq!(
        err(&sig_with(&[0x31])),
        ParseError::V2BadVersion { version: 3 }
    );
    assert_eq!(
        err(&sig_with(&[0x22])),
        ParseError::V2BadCommand { command: 2 }
    );
    assert_eq!(
        err(&sig_with(&[0x21, 0x41])),
        ParseError::V2BadFamily { family: 4 }
    );
    assert_eq!(
        err(&sig_with(&[0x21, 0x13])),
        ParseError::V2BadTransport { transport: 3 }
    );
    // Address blocks (all zeros) shorter than their family needs.
    for (byte, family, len, needed) in [(0x11, Family::Inet, 8, 12), (0x21, Family::Inet6, 12, 36)]
    {
        let mut v = sig_with(&[0x21, byte, 0x00, len as u8]);
        v.resize(v.len() + len, 0);
        assert_eq!(
            err(&v),
            ParseError::V2AddressesTruncated {
                family,
                len,
                needed
            }
        );
    }
}

#[test]
fn v2_length_limit_is_enforced_from_the_fixed_part() {
    // 16 + 5000 > 4096: refused with only the 16 fixed bytes in hand.
    let v = sig_with(&[0x21, 0x11, 0x13, 0x88]);
    assert_eq!(
        parse_with_limit(&v, 4096),
        Err(ParseError::V2TooLong {
            len: 5016,
            limit: 4096
        })
    );
    // Under the default (protocol maximum) limit it is just incomplete.
    assert_eq!(
        parse(&v),
        Ok(Parsed::Incomplete {
            needed_hint: Some(5000)
        })
    );
    // Exactly at the limit is fine.
    let mut v = sig_with(&[0x21, 0x11, 0x00, 12]);
    v.extend_from_slice(&[0; 12]);
    assert!(matches!(
        parse_with_limit(&v, 28),
        Ok(Parsed::Complete { .. })
    ));
    assert!(matches!(
        parse_with_limit(&v, 27),
        Err(ParseError::V2TooLong { .. })
    ));
}

#[test]
fn v2_tlv_overrun_is_rejected() {
    // A TLV announcing 10 value bytes with only 2 inside the header length.
    let mut v = sig_with(&[0x21, 0x11, 0x00, 12 + 5]);
    v.extend_from_slice(&[0; 12]);
    v.extend_from_slice(&[0x01, 0x00, 0x0A, b'h', b'2']);
    v.extend_from_slice(&[b'x'; 20]); // application data must not be read as TLV
    assert_eq!(err(&v), ParseError::V2TlvOverrun { offset: 28 });
    // Two stray bytes cannot even hold a TLV header.
    let mut v = sig_with(&[0x21, 0x11, 0x00, 12 + 2]);
    v.extend_from_slice(&[0; 12]);
    v.extend_from_slice(&[0x04, 0x00]);
    assert_eq!(err(&v), ParseError::V2TlvOverrun { offset: 28 });
}

#[test]
fn v2_crc32c_is_computed_and_verified() {
    let addrs = (v4([192, 168, 0, 1], 56324), v4([192, 168, 0, 11], 443));
    let tlvs = [
        Tlv::new(TlvType::Crc32c, vec![0xAA; 4]), // value replaced by the builder
        Tlv::new(TlvType::UniqueId, &b"conn-42"[..]),
    ];
    let out = written_v2(Command::Proxy, Transport::Stream, Some(addrs), &tlvs);
    assert_eq!(out.len(), 28 + 7 + 10);
    assert_eq!(&out[14..16], &[0x00, 12 + 7 + 10]);
    assert_eq!(&out[28..31], &[0x03, 0x00, 0x04]);
    // Independently: CRC32C of the header with the field zeroed, big-endian.
    let mut zeroed = out.clone();
    zeroed[31..35].fill(0);
    assert_eq!(&out[31..35], &crc32c(&zeroed).to_be_bytes());
    let (h, _) = complete(&out);
    assert_eq!(h.tlvs[0].value, out[31..35].to_vec());
    assert_eq!(h.tlvs[1], tlvs[1]);

    // Any flipped bit, in the addresses or in a TLV, is caught.
    for at in [20, 40] {
        let mut bad = out.clone();
        bad[at] ^= 0x01;
        assert!(
            matches!(err(&bad), ParseError::V2Crc32cMismatch { .. }),
            "byte {at}"
        );
    }
    // Wrong CRC length and duplicates are refused.
    let mut v = sig_with(&[0x21, 0x00, 0x00, 6]);
    v.extend_from_slice(&[0x03, 0x00, 0x03, 0, 0, 0]);
    assert_eq!(err(&v), ParseError::V2BadCrc32cLength { len: 3 });
    let two = [
        Tlv::new(TlvType::Crc32c, vec![]),
        Tlv::new(TlvType::Crc32c, vec![]),
    ];
    let mut out = Vec::new();
    assert_eq!(
        write_v2(Command::Proxy, Transport::Stream, None, &two, &mut out),
        Err(BuildError::DuplicateCrc32c)
    );
    assert!(out.is_empty());
}

#[test]
fn v2_crc32c_hand_built_vector() {
    // LOCAL, no addresses, one CRC32C TLV: the checksum is over these 23
    // bytes with the last four zeroed.
    let mut v = sig_with(&[0x20, 0x00, 0x00, 0x07, 0x03, 0x00, 0x04, 0, 0, 0, 0]);
    let sum = crc32c(&v);
    v[19..23].copy_from_slice(&sum.to_be_bytes());
    let (h, n) = complete(&v);
    assert_eq!(n, 23);
    assert_eq!(h.command, Command::Local);
    let out = written_v2(
        Command::Local,
        Transport::Unspec,
        None,
        &[Tlv::new(TlvType::Crc32c, vec![])],
    );
    assert_eq!(out, v);
}

#[test]
fn builder_refuses_oversized_tlvs_and_leaves_out_untouched() {
    let mut out = vec![1, 2, 3];
    let big = [Tlv::new(TlvType::Noop, vec![0; 65536])];
    assert_eq!(
        write_v2(Command::Proxy, Transport::Stream, None, &big, &mut out),
        Err(BuildError::TlvTooLong {
            kind: 4,
            len: 65536
        })
    );
    let many = vec![Tlv::new(TlvType::Noop, vec![0; 40000]); 2];
    assert_eq!(
        write_v2(Command::Proxy, Transport::Stream, None, &many, &mut out),
        Err(BuildError::HeaderTooLong { len: 80006 })
    );
    assert_eq!(out, [1, 2, 3]);
    assert_eq!(
        v2_buffer_len(Command::Proxy, Transport::Stream, None, &many),
        80022
    );
    // The largest encodable header parses back under the default limit.
    let max = [Tlv::new(TlvType::Noop, vec![7; 65535 - 3])];
    write_v2(Command::Proxy, Transport::Stream, None, &max, &mut out).unwrap();
    assert_eq!(out.len(), 3 + V2_MAX_LEN);
    match parse(&out[3..]) {
        Ok(Parsed::Complete { consumed, .. }) => assert_eq!(consumed, V2_MAX_LEN),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- streaming

#[test]
fn non_proxy_data_is_rejected_at_the_first_impossible_byte() {
    assert_eq!(
        err(b"GET / HTTP/1.1\r\n"),
        ParseError::NotProxy { offset: 0 }
    );
    assert_eq!(err(b"G"), ParseError::NotProxy { offset: 0 });
    assert_eq!(err(&[0x16, 0x03]), ParseError::NotProxy { offset: 0 }); // TLS ClientHello
    assert_eq!(err(&[0x16]), ParseError::NotProxy { offset: 0 });
    assert_eq!(
        err(b"SSH-2.0-OpenSSH\r\n"),
        ParseError::NotProxy { offset: 0 }
    );
    assert_eq!(
        err(b"PUT / HTTP/1.1\r\n"),
        ParseError::NotProxy { offset: 1 }
    );
    assert_eq!(err(b"PROXX"), ParseError::NotProxy { offset: 4 });
    assert_eq!(err(b"POST"), ParseError::NotProxy { offset: 1 });
    // "\r\n\r\n" followed by anything but NUL: an HTTP-ish blank line.
    assert_eq!(err(b"\r\n\r\nX"), ParseError::NotProxy { offset: 4 });
    let mut v = V2_SIGNATURE;
    v[11] = b'X';
    assert_eq!(err(&v), ParseError::NotProxy { offset: 11 });
    assert_eq!(
        parse(&[]),
        Ok(Parsed::Incomplete {
            needed_hint: Some(15)
        })
    );
}

/// Every valid header used by the split tests: (bytes, expected header).
fn valid_headers() -> Vec<Vec<u8>> {
    let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let mut v = vec![
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(),
        format!("PROXY TCP6 {f} ::1 65535 0\r\n").into_bytes(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        format!("PROXY UNKNOWN {f} {f} 65535 65535\r\n").into_bytes(),
        V2_TCP4.to_vec(),
        sig_with(&[0x20, 0x00, 0x00, 0x00]),
    ];
    let tlvs = [
        Tlv::new(TlvType::Alpn, &b"http/1.1"[..]),
        Tlv::new(TlvType::Crc32c, vec![]),
        Tlv::new(TlvType::NetNs, &b"blue"[..]),
    ];
    let addrs = (v6("2001:db8::1", 1), v6("2001:db8::2", 2));
    v.push(written_v2(
        Command::Proxy,
        Transport::Datagram,
        Some(addrs),
        &tlvs,
    ));
    let mut unix = sig_with(&[0x21, 0x32, 0x00, 216]);
    unix.resize(16 + 216, 0);
    v.push(unix);
    v
}

#[test]
fn every_split_point_is_incomplete_then_complete() {
    for full in valid_headers() {
        let (want, n) = complete(&full);
        assert_eq!(n, full.len());
        for k in 0..full.len() {
            match parse(&full[..k]) {
                Ok(Parsed::Incomplete { needed_hint }) => {
                    if let Some(h) = needed_hint {
                        assert!(
                            h >= 1 && k + h <= full.len(),
                            "hint {h} at {k} of {}",
                            full.len()
                        );
                    }
                }
                other => panic!(
                    "prefix {k} of {:?}: {other:?}",
                    String::from_utf8_lossy(&full)
                ),
            }
        }
        let mut with_data = full.clone();
        with_data.extend_from_slice(b"\r\n\0GET / HTTP/1.1\r\n");
        let (h, consumed) = complete(&with_data);
        assert_eq!((h, consumed), (want, full.len()));
    }
}

#[test]
fn v2_hint_is_exact_once_the_length_is_known() {
    assert_eq!(
        parse(&V2_TCP4[..3]),
        Ok(Parsed::Incomplete {
            needed_hint: Some(13)
        })
    );
    assert_eq!(
        parse(&V2_TCP4[..16]),
        Ok(Parsed::Incomplete {
            needed_hint: Some(12)
        })
    );
    assert_eq!(
        parse(&V2_TCP4[..27]),
        Ok(Parsed::Incomplete {
            needed_hint: Some(1)
        })
    );
}

// ---------------------------------------------------------------- round trips

#[test]
fn round_trip_matrix() {
    let pairs = [
        (v4([10, 0, 0, 1], 40000), v4([10, 0, 0, 2], 80)),
        (v6("fe80::1", 40000), v6("2001:db8::2", 443)),
    ];
    for (src, dst) in pairs {
        // v1 carries TCP only.
        let mut out = Vec::new();
        write_v1(src, dst, &mut out);
        let (h, n) = complete(&out);
        assert_eq!(n, out.len());
        assert_eq!(h.addresses, Some((src, dst)));
        assert_eq!((h.version, h.transport), (Version::V1, Transport::Stream));
        for transport in [Transport::Stream, Transport::Datagram] {
            let mut out = Vec::new();
            write_v2(Command::Proxy, transport, Some((src, dst)), &[], &mut out).unwrap();
            let (h, n) = complete(&out);
            assert_eq!(n, out.len());
            assert_eq!(h.addresses, Some((src, dst)));
            assert_eq!((h.version, h.transport), (Version::V2, transport));
            let mut again = Vec::new();
            h.emit(&mut again).unwrap();
            assert_eq!(again, out);
            assert_eq!(h.buffer_len(), out.len());
        }
    }
}

// ---------------------------------------------------------------- proptest

fn arb_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(a, p)| v4(a, p)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(a),
            p,
            0,
            0
        ))),
    ]
}

fn arb_transport() -> impl Strategy<Value = Transport> {
    prop_oneof![
        Just(Transport::Unspec),
        Just(Transport::Stream),
        Just(Transport::Datagram)
    ]
}

fn arb_tlvs() -> impl Strategy<Value = Vec<Tlv>> {
    let tlv = (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40))
        .prop_filter_map("one CRC at most, added below", |(kind, value)| {
            (kind != TlvType::Crc32c.code()).then_some(Tlv { kind, value })
        });
    (
        proptest::collection::vec(tlv, 0..5),
        any::<Option<prop::sample::Index>>(),
    )
        .prop_map(|(mut tlvs, crc)| {
            if let Some(i) = crc {
                tlvs.insert(i.index(tlvs.len() + 1), Tlv::new(TlvType::Crc32c, vec![]));
            }
            tlvs
        })
}

fn mapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(s) => {
            SocketAddr::V6(SocketAddrV6::new(s.ip().to_ipv6_mapped(), s.port(), 0, 0))
        }
        v6 => v6,
    }
}

/// CRC values differ by construction; compare everything else.
fn without_crc_values(mut h: ProxyHeader) -> ProxyHeader {
    for t in &mut h.tlvs {
        if t.kind == TlvType::Crc32c.code() {
            t.value = vec![0; 4];
        }
    }
    h
}

proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&bytes);
        let _ = parse_with_limit(&bytes, 64);
    }

    #[test]
    fn parse_never_panics_after_a_valid_prefix(
        v2 in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut buf = if v2 { V2_SIGNATURE.to_vec() } else { b"PROXY ".to_vec() };
        buf.extend_from_slice(&bytes);
        if let Ok(Parsed::Complete { header, consumed }) = parse(&buf) {
            prop_assert!(consumed <= buf.len());
            let mut out = Vec::new();
            header.emit(&mut out).unwrap();
            let (again, n) = complete(&out);
            prop_assert_eq!(n, out.len());
            prop_assert_eq!(without_crc_values(again), without_crc_values(header));
        }
    }

    #[test]
    fn v1_round_trip(src in arb_addr(), dst in arb_addr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut out = Vec::new();
        write_v1(src, dst, &mut out);
        prop_assert_eq!(out.len(), v1_buffer_len(src, dst));
        prop_assert!(out.len() <= V1_MAX_LEN);
        let len = out.len();
        out.extend_from_slice(&tail);
        let (h, n) = complete(&out);
        prop_assert_eq!(n, len);
        let want = match (src, dst) {
            (SocketAddr::V4(_), SocketAddr::V4(_)) => (Family::Inet, (src, dst)),
            _ => (Family::Inet6, (mapped(src), mapped(dst))),
        };
        prop_assert_eq!((h.family, h.addresses), (want.0, Some(want.1)));
    }

    #[test]
    fn v2_round_trip(
        local in any::<bool>(),
        transport in arb_transport(),
        addrs in proptest::option::of((arb_addr(), arb_addr())),
        tlvs in arb_tlvs(),
        tail in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let command = if local { Command::Local } else { Command::Proxy };
        let mut out = Vec::new();
        write_v2(command, transport, addrs, &tlvs, &mut out).unwrap();
        prop_assert_eq!(out.len(), v2_buffer_len(command, transport, addrs, &tlvs));
        let len = out.len();
        out.extend_from_slice(&tail);
        let (h, n) = complete(&out);
        prop_assert_eq!(n, len);
        let (transport, family, addresses) = match (command, transport, addrs) {
            (Command::Local, ..) | (_, Transport::Unspec, _) => (Transport::Unspec, Family::Unspec, None),
            (_, t, None) => (t, Family::Unspec, None),
            (_, t, Some((s @ SocketAddr::V4(_), d @ SocketAddr::V4(_)))) => (t, Family::Inet, Some((s, d))),
            (_, t, Some((s, d))) => (t, Family::Inet6, Some((mapped(s), mapped(d)))),
        };
        let want = ProxyHeader { version: Version::V2, command, transport, family, addresses, tlvs };
        prop_assert_eq!(without_crc_values(h.clone()), without_crc_values(want));
        // And the parsed header re-encodes to the very same bytes.
        let mut again = Vec::new();
        h.emit(&mut again).unwrap();
        prop_assert_eq!(&again[..], &out[..len]);
    }
}
