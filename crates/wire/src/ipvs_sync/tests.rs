//! Tests for the IPVS sync messages. Three kinds of vectors:
//! * datagrams written out byte by byte in hex from the layout tables of
//!   IPVS.md §5 (the kernel's `struct ip_vs_sync_mesg*`, `ip_vs_sync_conn_v0`,
//!   `ip_vs_sync_v4/v6`), each field annotated, parsed and, where the
//!   builder can produce them, compared byte for byte with its output;
//! * one test per receive rule of `ip_vs_process_message` (record skipped,
//!   rest of the datagram dropped, header rejected);
//! * property tests: random connection lists round-trip through both
//!   builders under random datagram limits, random bytes never panic.
//!
//! No captured kernel datagram was found in the stored public material
//! (searched web pages and code for IPVS sync captures and the Wireshark
//! `ipvs-syncd` dissector's samples), and this machine's kernel has no IPVS,
//! so there is no live-capture fixture.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::test_util::hex;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A v1 datagram: the 8-byte header (size computed) and `body`.
fn v1(syncid: u8, nr_conns: u8, body: &[u8]) -> Vec<u8> {
    let size = (8 + body.len()) as u16;
    let mut d = vec![0, syncid];
    d.extend_from_slice(&size.to_be_bytes());
    d.extend_from_slice(&[nr_conns, 1, 0, 0]);
    d.extend_from_slice(body);
    d
}

/// A v0 datagram: the 4-byte header (size computed) and `body`.
fn v0(nr_conns: u8, syncid: u8, body: &[u8]) -> Vec<u8> {
    let size = (4 + body.len()) as u16;
    let mut d = vec![nr_conns, syncid];
    d.extend_from_slice(&size.to_be_bytes());
    d.extend_from_slice(body);
    d
}

/// A v1 IPv4 record assembled field by field from the §5.2 table:
/// TCP, ESTABLISHED, DR, 10.0.0.1:1000 → 10.1.0.1:80 → 10.2.0.1:80, timeout
/// 900, then `opts` (the ver_size counts them; no padding added).
fn rec4(cport: u16, opts: &[u8]) -> Vec<u8> {
    let mut r = vec![0, 6];
    r.extend_from_slice(&((36 + opts.len()) as u16).to_be_bytes());
    r.extend_from_slice(&3u32.to_be_bytes()); // flags: DROUTE
    r.extend_from_slice(&1u16.to_be_bytes()); // ESTABLISHED
    r.extend_from_slice(&cport.to_be_bytes());
    r.extend_from_slice(&80u16.to_be_bytes());
    r.extend_from_slice(&80u16.to_be_bytes());
    r.extend_from_slice(&0u32.to_be_bytes()); // fwmark
    r.extend_from_slice(&900u32.to_be_bytes()); // timeout
    r.extend_from_slice(&[10, 0, 0, 1, 10, 1, 0, 1, 10, 2, 0, 1]);
    r.extend_from_slice(opts);
    r
}

/// A connection with only its addresses set (flags, state, fwmark 0; no
/// timeout, sequence or PE data): the base the vectors' connections fill in.
fn conn(protocol: u8, client: &str, vip: &str, dest: &str) -> SyncConn {
    SyncConn {
        protocol,
        client: sa(client),
        vip: sa(vip),
        dest: sa(dest),
        flags: 0,
        state: 0,
        fwmark: 0,
        timeout_s: None,
        seq: None,
        pe_name: None,
        pe_data: None,
        local: None,
        bulk: None,
    }
}

/// `bytes` parses as a `version` message of `syncid` with just `expected`
/// in it, and that version's builder writes `bytes` back from it.
fn one_record_round_trip(bytes: Vec<u8>, version: u8, syncid: u8, expected: SyncConn) {
    let m = parse(&bytes).unwrap();
    assert_eq!((m.version, m.syncid, m.skipped), (version, syncid, 0));
    assert_eq!(m.conns, vec![expected.clone()]);
    let build = if version == 0 { build_v0 } else { build_v1 };
    assert_eq!(build(syncid, &[expected], 1472).unwrap(), vec![bytes]);
}

/// The connection [`rec4`] describes (without options).
fn conn4(cport: u16) -> SyncConn {
    SyncConn {
        flags: FWD_DROUTE,
        state: 1,
        timeout_s: Some(900),
        ..conn(
            IPPROTO_TCP,
            &format!("10.0.0.1:{cport}"),
            "10.1.0.1:80",
            "10.2.0.1:80",
        )
    }
}

fn ports(m: &SyncMessage) -> Vec<u16> {
    m.conns.iter().map(|c| c.client.port()).collect()
}

// ---------------------------------------------------------------- constants

#[test]
fn constants_match_the_kernel_headers() {
    assert_eq!(SYNC_PORT, 8848);
    assert_eq!(u32::from(SYNC_GROUP_V4), 0xe000_0051);
    assert_eq!(FLAG_NOOUTPUT, 0x0080);
    assert_eq!(FLAG_SEQ_MASK, FLAG_IN_SEQ | FLAG_OUT_SEQ);
    // FWD_MASK | NOOUTPUT | INACTIVE | SEQ_MASK | NO_CPORT | TEMPLATE
    assert_eq!(
        BACKUP_MASK,
        0x0007 | 0x0080 | 0x0100 | 0x0600 | 0x0800 | 0x1000
    );
    assert_eq!(BACKUP_MASK, 0x1f87);
    assert_eq!(BACKUP_UPD_MASK, 0x0700);
    assert_eq!(OPT_F_OPTIONAL, 1 << (7 - 1));
}

#[test]
fn a_bulk_request_is_16_bytes_that_a_kernel_backup_reads_as_an_empty_v0_message() {
    let req = BulkRequest {
        syncid: 7,
        nonce: 0x0102_0304,
    };
    let b = build_bulk_request(&req);
    assert_eq!(b.to_vec(), hex("00070010005200007276734201020304"));
    assert_eq!(parse_bulk_request(&b), Some(req));
    // What the kernel (and parse, which follows it) makes of it: the
    // version byte is not 1, so the v0 path, whose count (byte 0) is 0.
    let m = parse(&b).unwrap();
    assert_eq!(
        (m.version, m.syncid, m.conns.len(), m.skipped),
        (0, 7, 0, 0)
    );
    // Anything else is not a request: ordinary messages, a wrong length,
    // a field changed.
    let ordinary = build_v1(7, &[conn4(1000)], 1472).unwrap();
    assert_eq!(parse_bulk_request(&ordinary[0]), None);
    assert_eq!(parse_bulk_request(&b[..15]), None);
    let mut long = b.to_vec();
    long.push(0);
    long[3] = 17;
    assert_eq!(parse_bulk_request(&long), None);
    for (at, v) in [(0, 1), (3, 15), (4, 1), (5, 1), (6, 1), (7, 1), (8, b'R')] {
        let mut x = b;
        x[at] = v;
        assert_eq!(parse_bulk_request(&x), None, "byte {at} = {v}");
    }
}

#[test]
fn a_bulk_answer_marks_its_records_and_ends_with_20_bytes_a_kernel_reads_as_empty() {
    let done = BulkDone {
        syncid: 7,
        answer: 0x0a0b_0c0d,
        entries: 3,
    };
    let b = build_bulk_done(&done);
    assert_eq!(b.to_vec(), hex("0007001400520000727673440a0b0c0d00000003"));
    assert_eq!(parse_bulk_done(&b), Some(done));
    assert_eq!(parse_bulk_request(&b), None);
    let m = parse(&b).unwrap();
    assert_eq!(
        (m.version, m.syncid, m.conns.len(), m.skipped),
        (0, 7, 0, 0)
    );
    for (at, v) in [(0, 1), (3, 19), (4, 1), (5, 1), (6, 1), (7, 1), (8, b'R')] {
        let mut x = b;
        x[at] = v;
        assert_eq!(parse_bulk_done(&x), None, "byte {at} = {v}");
    }
    assert_eq!(parse_bulk_done(&b[..19]), None);
    // A marked record: the option after the kernel's, 10 bytes more, and
    // back as it went; a kernel skips it as an unknown optional option.
    let mut c = conn4(1000);
    let plain = build_v1(7, std::slice::from_ref(&c), 1472).unwrap();
    c.bulk = Some(BulkMark {
        answer: 0x0a0b_0c0d,
        index: 41,
    });
    let marked = build_v1(7, std::slice::from_ref(&c), 1472).unwrap();
    assert_eq!(marked[0].len(), plain[0].len() + 10);
    assert_eq!(
        &marked[0][plain[0].len()..],
        &hex("73080a0b0c0d00000029")[..]
    );
    assert_eq!(parse(&marked[0]).unwrap().conns, vec![c.clone()]);
    // A mark of another length is ignored, the record applied.
    let mut short = marked[0].clone();
    let at = plain[0].len() + 1;
    short[at] = 4;
    short.truncate(at + 5);
    let n = u16::try_from(short.len()).unwrap();
    short[2..4].copy_from_slice(&n.to_be_bytes());
    let rec = 8;
    let rl = u16::try_from(short.len() - rec).unwrap();
    short[rec + 2..rec + 4].copy_from_slice(&rl.to_be_bytes());
    let got = parse(&short).unwrap();
    assert_eq!(got.conns.len(), 1);
    assert_eq!(got.conns[0].bulk, None);
}

#[test]
fn received_flags_masks_v1_but_only_clears_hashed_in_v0() {
    let wire = FLAG_HASHED | FLAG_ONE_PACKET | FLAG_INACTIVE | FWD_TUNNEL | 0x0001_0000;
    assert_eq!(
        received_flags(1, wire),
        FLAG_INACTIVE | FWD_TUNNEL | FLAG_SYNC
    );
    assert_eq!(
        received_flags(0, wire),
        FLAG_ONE_PACKET | FLAG_INACTIVE | FWD_TUNNEL | 0x0001_0000 | FLAG_SYNC
    );
}

#[test]
fn num_states_per_protocol() {
    assert_eq!(num_states(IPPROTO_TCP), Some(11));
    assert_eq!(num_states(IPPROTO_UDP), Some(1));
    assert_eq!(num_states(IPPROTO_SCTP), Some(14));
    assert_eq!(num_states(IPPROTO_AH), Some(1));
    assert_eq!(num_states(IPPROTO_ESP), Some(1));
    assert_eq!(num_states(0), None);
    assert_eq!(num_states(1), None);
}

// ------------------------------------------------------ hand-built vectors

/// v0, one TCP record without sequence data.
const V0_PLAIN: &str = "
    01 07 001c                  nr_conns 1, syncid 7, size 28
    00 06                       reserved, protocol TCP
    9c40 0050 1f90              cport 40000, vport 80, dport 8080
    0a000001                    caddr 10.0.0.1
    c0a80a01                    vaddr 192.168.10.1
    0a000102                    daddr 10.0.1.2
    0003 0001                   flags DROUTE, state ESTABLISHED";

#[test]
fn v0_record_without_seq_block() {
    let expected = SyncConn {
        flags: FWD_DROUTE,
        state: 1,
        ..conn(
            IPPROTO_TCP,
            "10.0.0.1:40000",
            "192.168.10.1:80",
            "10.0.1.2:8080",
        )
    };
    one_record_round_trip(table(V0_PLAIN), 0, 7, expected);
}

/// Strips the annotations (two or more spaces then text) from a hex table.
fn table(s: &str) -> Vec<u8> {
    hex(&s
        .lines()
        .map(|l| l.trim_start().split("  ").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" "))
}

/// v0: a masqueraded TCP record with IN_SEQ|OUT_SEQ and its 24-byte block
/// in little-endian (x86 host) order, then a UDP record without.
const V0_SEQ: &str = "
    02 00 004c                  nr_conns 2, syncid 0, size 76
    00 06 d431 0015 0015        TCP, cport 54321, vport 21, dport 21
    ac100001 ac100002 ac100003  172.16.0.1 172.16.0.2 172.16.0.3
    0600 0001                   flags IN_SEQ|OUT_SEQ (MASQ), ESTABLISHED
    44332211 05000000 feffffff  in_seq: init 0x11223344, delta 5, prev -2
    ddccbbaa 00000000 01000000  out_seq: init 0xaabbccdd, delta 0, prev 1
    00 11 0035 0035 0035        UDP, ports 53
    ac100001 ac100002 ac100003
    0000 0000                   flags MASQ, state NORMAL";

#[test]
fn v0_seq_block_is_little_endian_and_sized_by_the_flags() {
    let bytes = table(V0_SEQ);
    let m = parse(&bytes).unwrap();
    assert_eq!((m.version, m.syncid, m.skipped), (0, 0, 0));
    assert_eq!(m.conns.len(), 2);
    let tcp = &m.conns[0];
    assert_eq!(tcp.flags, FLAG_SEQ_MASK);
    assert_eq!(
        tcp.seq,
        Some(SeqData {
            in_seq: [0x1122_3344, 5, 0xffff_fffe],
            out_seq: [0xaabb_ccdd, 0, 1],
        })
    );
    assert_eq!(tcp.client, sa("172.16.0.1:54321"));
    let udp = &m.conns[1];
    assert_eq!((udp.protocol, udp.state, udp.seq), (IPPROTO_UDP, 0, None));
    assert_eq!(udp.dest, sa("172.16.0.3:53"));
    assert_eq!(build_v0(0, &m.conns, 1472).unwrap(), vec![bytes]);
}

/// v1, one IPv4 record, no options.
const V1_V4: &str = "
    00 2a 002c 01 01 0000       reserved, syncid 42, size 44, 1 conn, version 1, spare
    00 06 0024                  type IPv4, TCP, record version 0 / length 36
    00000103                    flags INACTIVE|DROUTE
    0002                        state SYN_SENT
    c350 01bb 01bb              cport 50000, vport 443, dport 443
    00000000                    fwmark 0
    00000078                    timeout 120 s
    c6336401 cb007101 0a000203  198.51.100.1 203.0.113.1 10.0.2.3";

#[test]
fn v1_ipv4_record() {
    let expected = SyncConn {
        flags: FLAG_INACTIVE | FWD_DROUTE,
        state: 2,
        timeout_s: Some(120),
        ..conn(
            IPPROTO_TCP,
            "198.51.100.1:50000",
            "203.0.113.1:443",
            "10.0.2.3:443",
        )
    };
    one_record_round_trip(table(V1_V4), 1, 42, expected);
}

/// v1, one IPv6 record (fwmark service, UDP), no options.
const V1_V6: &str = "
    00 05 0050 01 01 0000       syncid 5, size 80, 1 conn
    01 11 0048                  type IPv6, UDP, length 72
    00000002                    flags TUNNEL
    0000                        state NORMAL
    1388 0035 0035              cport 5000, vport 53, dport 53
    0000002a                    fwmark 42
    0000012c                    timeout 300 s
    20010db8000000000000000000000001  caddr 2001:db8::1
    20010db8000100000000000000000053  vaddr 2001:db8:1::53
    fd000000000000000000000000000002  daddr fd00::2";

#[test]
fn v1_ipv6_record() {
    let expected = SyncConn {
        flags: FWD_TUNNEL,
        fwmark: 42,
        timeout_s: Some(300),
        ..conn(
            IPPROTO_UDP,
            "[2001:db8::1]:5000",
            "[2001:db8:1::53]:53",
            "[fd00::2]:53",
        )
    };
    one_record_round_trip(table(V1_V6), 1, 5, expected);
}

/// v1, two IPv4 records with options: the first has sequence data (length
/// 36 + 26 = 62, so 2 bytes of padding follow it), the second is a SIP
/// persistence template with PE data then PE name (36 + 5 + 5 = 46, the
/// last record: no padding after it).
const V1_OPTIONS: &str = "
    00 01 0076 02 01 0000       syncid 1, size 118, 2 conns
    00 06 003e                  IPv4, TCP, length 62
    00000600                    flags IN_SEQ|OUT_SEQ
    0001 0401 0015 0015         ESTABLISHED, cport 1025, ports 21
    00000000 00000384           fwmark 0, timeout 900
    0a000001 0a000064 0a000065
    01 18                       option SEQ_DATA, 24 bytes, big endian:
    11223344 00000005 fffffffe  in_seq
    aabbccdd 00000000 00000001  out_seq
    0000                        padding to 4-byte alignment
    00 11 002e                  IPv4, UDP, length 46
    00001000                    flags TEMPLATE
    0000 13c4 13c4 13c4         state 0, ports 5060
    00000000 000000b4           fwmark 0, timeout 180
    0a000001 0a000064 0a000065
    02 03 616263                option PE_DATA, 3 bytes: abc
    03 03 736970                option PE_NAME, 3 bytes: sip";

fn v1_options_conns() -> Vec<SyncConn> {
    vec![
        SyncConn {
            flags: FLAG_SEQ_MASK,
            state: 1,
            timeout_s: Some(900),
            seq: Some(SeqData {
                in_seq: [0x1122_3344, 5, 0xffff_fffe],
                out_seq: [0xaabb_ccdd, 0, 1],
            }),
            ..conn(
                IPPROTO_TCP,
                "10.0.0.1:1025",
                "10.0.0.100:21",
                "10.0.0.101:21",
            )
        },
        SyncConn {
            flags: FLAG_TEMPLATE,
            timeout_s: Some(180),
            pe_name: Some("sip".into()),
            pe_data: Some(b"abc".to_vec()),
            ..conn(
                IPPROTO_UDP,
                "10.0.0.1:5060",
                "10.0.0.100:5060",
                "10.0.0.101:5060",
            )
        },
    ]
}

#[test]
fn v1_options_and_padding_before_the_next_record() {
    let bytes = table(V1_OPTIONS);
    assert_eq!(bytes.len(), 118);
    let m = parse(&bytes).unwrap();
    assert_eq!((m.version, m.syncid, m.skipped), (1, 1, 0));
    assert_eq!(m.conns, v1_options_conns());
    assert_eq!(build_v1(1, &v1_options_conns(), 1472).unwrap(), vec![bytes]);
}

#[test]
fn v1_timeout_zero_means_state_default() {
    let mut r = rec4(1000, &[]);
    r[20..24].copy_from_slice(&[0, 0, 0, 0]);
    let m = parse(&v1(0, 1, &r)).unwrap();
    assert_eq!(m.conns[0].timeout_s, None);
    // And None / Some(0) are written as 0.
    let mut c = conn4(1000);
    for t in [None, Some(0)] {
        c.timeout_s = t;
        let d = build_v1(0, std::slice::from_ref(&c), 1472).unwrap();
        assert_eq!(&d[0][8 + 20..8 + 24], &[0, 0, 0, 0]);
    }
}

// ------------------------------------------------------------ header rules

#[test]
fn header_too_short_is_an_error() {
    for len in 0..4 {
        assert_eq!(parse(&vec![0; len]), Err(SyncError::TooShort(len)));
    }
}

#[test]
fn size_field_must_equal_datagram_length() {
    let mut bytes = table(V1_V4);
    bytes.push(0);
    assert_eq!(
        parse(&bytes),
        Err(SyncError::SizeMismatch {
            field: 44,
            actual: 45
        })
    );
    bytes.truncate(40);
    assert_eq!(
        parse(&bytes),
        Err(SyncError::SizeMismatch {
            field: 44,
            actual: 40
        })
    );
}

#[test]
fn empty_messages_parse() {
    let m = parse(&[0, 9, 0, 4]).unwrap();
    assert_eq!(
        (m.version, m.syncid, m.conns.len(), m.skipped),
        (0, 9, 0, 0)
    );
    let m = parse(&v1(3, 0, &[])).unwrap();
    assert_eq!(
        (m.version, m.syncid, m.conns.len(), m.skipped),
        (1, 3, 0, 0)
    );
}

#[test]
fn v1_needs_version_1_reserved_0_and_spare_0_else_v0() {
    let good = v1(0, 1, &rec4(1000, &[]));
    assert_eq!(parse(&good).unwrap().version, 1);
    // version 2, spare non-zero (either byte): read as v0, whose nr_conns is
    // byte 0 = 0 here, so no records.
    for (at, val) in [(5, 2), (6, 1), (7, 1)] {
        let mut d = good.clone();
        d[at] = val;
        let m = parse(&d).unwrap();
        assert_eq!(
            (m.version, m.conns.len(), m.skipped),
            (0, 0, 0),
            "byte {at}"
        );
    }
    // reserved non-zero: v0 with that many records expected.
    let mut d = good.clone();
    d[0] = 1;
    let m = parse(&d).unwrap();
    assert_eq!(m.version, 0);
    // A 4..7-byte datagram cannot hold the v1 header: v0.
    let m = parse(&[0, 1, 0, 6, 0, 1]).unwrap();
    assert_eq!(m.version, 0);
}

// ------------------------------------------------------------ record rules

/// Three v1 records with ports 1000, 1001, 1002 where the middle one is
/// `mid`, padded to 4 bytes after it.
fn three_with(mid: &[u8]) -> Vec<u8> {
    let mut body = rec4(1000, &[]);
    body.extend_from_slice(mid);
    body.resize(body.len().div_ceil(4) * 4, 0);
    body.extend_from_slice(&rec4(1002, &[]));
    v1(0, 3, &body)
}

/// The middle record is dropped alone.
fn assert_skipped_alone(mid: &[u8]) {
    let m = parse(&three_with(mid)).unwrap();
    assert_eq!(ports(&m), vec![1000, 1002], "{mid:02x?}");
    assert_eq!(m.skipped, 1);
}

/// The middle record ends the datagram: the first is kept.
fn assert_rest_dropped(mid: &[u8]) {
    let m = parse(&three_with(mid)).unwrap();
    assert_eq!(ports(&m), vec![1000], "{mid:02x?}");
    assert_eq!(m.skipped, 2);
}

#[test]
fn sanity_of_the_three_record_fixture() {
    let m = parse(&three_with(&rec4(1001, &[]))).unwrap();
    assert_eq!(ports(&m), vec![1000, 1001, 1002]);
    assert_eq!(m.skipped, 0);
    assert_eq!(m.conns[1], conn4(1001));
}

#[test]
fn record_version_nibble_must_be_0() {
    let mut r = rec4(1001, &[]);
    r[2] |= 0x10;
    assert_rest_dropped(&r);
}

#[test]
fn record_type_neither_ipv4_nor_ipv6_drops_the_rest() {
    let mut r = rec4(1001, &[]);
    r[0] = 2;
    assert_rest_dropped(&r);
    // Any type with bit 0 is IPv6 (the kernel tests the bit alone).
    let mut r6 = table(V1_V6)[8..].to_vec();
    r6[0] = 0x03;
    let m = parse(&v1(0, 1, &r6)).unwrap();
    assert_eq!(m.conns.len(), 1);
}

#[test]
fn record_length_shorter_than_fixed_part_drops_the_rest() {
    let mut r = rec4(1001, &[]);
    r[3] = 32; // 32 < 36
    r.truncate(32);
    assert_rest_dropped(&r);
    // IPv6 type bit on a 36-byte record: shorter than 72.
    let mut r = rec4(1001, &[]);
    r[0] = 1;
    assert_rest_dropped(&r);
}

#[test]
fn record_length_past_the_datagram_drops_the_rest() {
    let mut body = rec4(1000, &[]);
    let mut r = rec4(1001, &[]);
    r[3] = 40; // 4 bytes beyond what follows
    body.extend_from_slice(&r);
    let m = parse(&v1(0, 2, &body)).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000], 1));
}

#[test]
fn fewer_bytes_than_an_ipv4_record_drops_the_rest() {
    // nr_conns says 3, the datagram holds 1 record and 20 stray bytes.
    let mut body = rec4(1000, &[]);
    body.extend_from_slice(&[0; 20]);
    let m = parse(&v1(0, 3, &body)).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000], 2));
}

#[test]
fn bytes_after_the_announced_records_are_ignored() {
    let mut body = rec4(1000, &[]);
    body.extend_from_slice(&rec4(1001, &[]));
    let m = parse(&v1(0, 1, &body)).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000], 0));
}

#[test]
fn option_with_zero_length_drops_the_rest() {
    assert_rest_dropped(&rec4(1001, &[0x45, 0]));
    assert_rest_dropped(&rec4(1001, &[OPT_PE_DATA, 0]));
}

#[test]
fn option_running_past_the_record_drops_the_rest() {
    // Header of 2 announces 3 data bytes, 2 present.
    assert_rest_dropped(&rec4(1001, &[0x45, 3, 1, 2]));
    // A lone type byte: no room for the length.
    assert_rest_dropped(&rec4(1001, &[0x45]));
}

fn seq_opt(ty: u8) -> Vec<u8> {
    let mut o = vec![ty, 24];
    o.extend((0u8..24).collect::<Vec<_>>());
    o
}

#[test]
fn duplicate_options_drop_the_rest() {
    let mut o = seq_opt(OPT_SEQ_DATA);
    o.extend(seq_opt(OPT_SEQ_DATA));
    assert_rest_dropped(&rec4(1001, &o));
    assert_rest_dropped(&rec4(1001, &[2, 1, b'x', 2, 1, b'y', 3, 1, b's']));
    assert_rest_dropped(&rec4(1001, &[2, 1, b'x', 3, 1, b's', 3, 1, b's']));
    // The optional bit does not make a second copy acceptable.
    let mut o = seq_opt(OPT_SEQ_DATA);
    o.extend(seq_opt(OPT_SEQ_DATA | OPT_F_OPTIONAL));
    assert_rest_dropped(&rec4(1001, &o));
}

#[test]
fn seq_option_must_be_24_bytes() {
    let mut o = seq_opt(OPT_SEQ_DATA);
    o[1] = 23;
    o.pop();
    assert_rest_dropped(&rec4(1001, &o));
}

#[test]
fn pe_name_over_16_bytes_drops_the_rest() {
    let mut o = vec![2, 1, b'x', 3, 17];
    o.extend([b'a'; 17]);
    assert_rest_dropped(&rec4(1001, &o));
}

#[test]
fn unknown_mandatory_option_skips_the_record_only() {
    assert_skipped_alone(&rec4(1001, &[5, 2, 0, 0]));
    // Checked in order: a malformed option after it is never reached.
    assert_skipped_alone(&rec4(1001, &[5, 2, 0, 0, 0x45, 0]));
    // ...but one before it ends the datagram.
    assert_rest_dropped(&rec4(1001, &[0x45, 0, 5, 2, 0, 0]));
}

#[test]
fn unknown_optional_option_is_ignored() {
    let m = parse(&three_with(&rec4(1001, &[0x45, 3, 1, 2, 3]))).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000, 1001, 1002], 0));
    assert_eq!(m.conns[1], conn4(1001));
}

/// The rvs local-address option of `local` (type 0x72, then the address
/// and the port in network order).
fn local_opt(local: SocketAddr) -> Vec<u8> {
    let mut o = vec![0x72];
    match local.ip() {
        IpAddr::V4(a) => {
            o.push(6);
            o.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            o.push(18);
            o.extend_from_slice(&a.octets());
        }
    }
    o.extend_from_slice(&local.port().to_be_bytes());
    o
}

#[test]
fn local_option_is_optional_and_outside_the_kernels_types() {
    assert_eq!(OPT_RVS_LOCAL, 0x72);
    assert_ne!(OPT_RVS_LOCAL & OPT_F_OPTIONAL, 0, "kernel backups skip it");
    // The kernel switches on `type & ~IPVS_OPT_F_PARAM`: 1, 2, 3 are its
    // options and 7 is IPVS_OPT_PARAM; ours must be none of them.
    assert!(![1, 2, 3, 7].contains(&(OPT_RVS_LOCAL & !OPT_F_OPTIONAL)));
}

/// v1, one IPv4 record of [`rec4`]'s connection with rvs's local-address
/// option.
const V1_V4_LOCAL: &str = "
    00 00 0038 01 01 0000       syncid 0, size 56, 1 conn
    00 06 0030                  type IPv4, TCP, length 36 + 12 = 48
    00000003                    flags DROUTE
    0001                        state ESTABLISHED
    03e8 0050 0050              cport 1000, vport 80, dport 80
    00000000                    fwmark 0
    00000384                    timeout 900 s
    0a000001 0a010001 0a020001  caddr, vaddr, daddr
    72 06 0a030001 9c40         rvs local (optional): 10.3.0.1:40000
    45 02 abcd                  (not in the built one; see the test)";

#[test]
fn v1_ipv4_record_with_the_local_address_byte_by_byte() {
    let expected = SyncConn {
        local: Some(sa("10.3.0.1:40000")),
        ..conn4(1000)
    };
    assert_eq!(expected.v1_len(), Some(44));
    // With an unknown optional option after it: read, that one ignored.
    let m = parse(&table(V1_V4_LOCAL)).unwrap();
    assert_eq!((m.version, m.skipped), (1, 0));
    assert_eq!(m.conns, vec![expected.clone()]);
    // The builder writes exactly the record without that option.
    let mut bytes = table(V1_V4_LOCAL);
    bytes.truncate(bytes.len() - 4);
    bytes[3] = 0x34; // size 52
    bytes[11] = 0x2c; // length 44
    one_record_round_trip(bytes, 1, 0, expected);
}

#[test]
fn local_option_round_trips_v4_and_v6_after_the_kernels_options() {
    let v6 = SyncConn {
        local: Some(sa("[fd00::3:1]:1025")),
        seq: Some(SeqData {
            in_seq: [1, 2, 3],
            out_seq: [4, 5, 6],
        }),
        pe_name: Some("sip".into()),
        pe_data: Some(b"call".to_vec()),
        ..conn(
            IPPROTO_UDP,
            "[fd00::1]:5060",
            "[fd00::2]:5060",
            "[fd00::9]:5060",
        )
    };
    let v4 = SyncConn {
        local: Some(sa("10.3.0.2:65535")),
        ..conn4(1001)
    };
    // A local address of the other family than the record's is carried as
    // such (the length says which).
    let mixed = SyncConn {
        local: Some(sa("[fd00::3:2]:2000")),
        ..conn4(1002)
    };
    let conns = vec![v6.clone(), v4, mixed];
    let d = build_v1(7, &conns, 1472).unwrap();
    assert_eq!(d.len(), 1);
    let m = parse(&d[0]).unwrap();
    assert_eq!((m.skipped, &m.conns), (0, &conns));
    // The option comes last, after the kernel's (seq, PE data, PE name).
    let rec = &d[0][8..8 + v6.v1_len().unwrap()];
    assert_eq!(
        &rec[rec.len() - 20..],
        &local_opt(sa("[fd00::3:1]:1025"))[..]
    );
}

#[test]
fn local_option_is_read_by_the_path_that_skips_unknown_optional_options() {
    // Between other options, with an unknown optional one before it: the
    // record is applied with its local address.
    let mut opts = vec![0x45, 3, 1, 2, 3];
    opts.extend(local_opt(sa("10.3.0.1:40000")));
    opts.extend(seq_opt(1));
    let m = parse(&three_with(&rec4(1001, &opts))).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000, 1001, 1002], 0));
    assert_eq!(m.conns[1].local, Some(sa("10.3.0.1:40000")));
    assert!(m.conns[1].seq.is_some());
    // A kernel ignores it whatever it holds: a length that is neither 6
    // nor 18 leaves the record without a local address (not skipped), and
    // a second one is ignored (the first is kept).
    let m = parse(&three_with(&rec4(1001, &[0x72, 5, 1, 2, 3, 4, 5]))).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000, 1001, 1002], 0));
    assert_eq!(m.conns[1], conn4(1001));
    let mut twice = local_opt(sa("10.3.0.1:40000"));
    twice.extend(local_opt(sa("10.3.0.9:9")));
    let m = parse(&three_with(&rec4(1001, &twice))).unwrap();
    assert_eq!((ports(&m), m.skipped), (vec![1000, 1001, 1002], 0));
    assert_eq!(m.conns[1].local, Some(sa("10.3.0.1:40000")));
    // Its body still obeys the option framing every option does.
    assert_rest_dropped(&rec4(1001, &[0x72, 0]));
    assert_rest_dropped(&rec4(1001, &[0x72, 6, 10, 3, 0, 1]));
    // Without the optional bit the same number is an unknown mandatory
    // option: what a kernel does with it (the record is dropped).
    let mut mandatory = local_opt(sa("10.3.0.1:40000"));
    mandatory[0] &= !OPT_F_OPTIONAL;
    assert_skipped_alone(&rec4(1001, &mandatory));
}

#[test]
fn optional_bit_on_a_known_option_still_means_that_option() {
    let m = parse(&three_with(&rec4(1001, &seq_opt(0x41)))).unwrap();
    let seq = m.conns[1].seq.unwrap();
    assert_eq!(seq.in_seq[0], 0x0001_0203);
    assert_eq!(seq.out_seq[2], 0x1415_1617);
    let m = parse(&three_with(&rec4(
        1001,
        &[0x42, 1, b'x', 0x43, 3, b's', b'i', b'p'],
    )))
    .unwrap();
    assert_eq!(m.conns[1].pe_name.as_deref(), Some("sip"));
    assert_eq!(m.conns[1].pe_data.as_deref(), Some(&b"x"[..]));
}

#[test]
fn pe_data_without_pe_name_skips_the_record() {
    assert_skipped_alone(&rec4(1001, &[2, 2, b'i', b'd']));
}

#[test]
fn pe_name_without_pe_data_is_ignored() {
    let m = parse(&three_with(&rec4(1001, &[3, 3, b's', b'i', b'p']))).unwrap();
    assert_eq!(m.conns[1], conn4(1001));
}

#[test]
fn pe_name_is_cut_at_nul_and_must_name_something() {
    let m = parse(&three_with(&rec4(
        1001,
        &[2, 1, b'x', 3, 5, b's', b'i', b'p', 0, b'z'],
    )))
    .unwrap();
    assert_eq!(m.conns[1].pe_name.as_deref(), Some("sip"));
    assert_skipped_alone(&rec4(1001, &[2, 1, b'x', 3, 2, 0, b's']));
    assert_skipped_alone(&rec4(1001, &[2, 1, b'x', 3, 2, 0xff, 0xfe]));
}

#[test]
fn unknown_protocol_or_state_out_of_range_skips_the_record() {
    let with = |proto: u8, state: u16, flags: u32| {
        let mut r = rec4(1001, &[]);
        r[1] = proto;
        r[4..8].copy_from_slice(&flags.to_be_bytes());
        r[8..10].copy_from_slice(&state.to_be_bytes());
        r
    };
    for (proto, state) in [
        (0, 0),
        (1, 0),
        (6, 11),
        (17, 1),
        (132, 14),
        (50, 1),
        (51, 1),
    ] {
        assert_skipped_alone(&with(proto, state, 0));
    }
    for (proto, state) in [(6, 10), (17, 0), (132, 13), (50, 0), (51, 0)] {
        let m = parse(&three_with(&with(proto, state, 0))).unwrap();
        assert_eq!((m.conns[1].protocol, m.conns[1].state), (proto, state));
    }
    // Templates: neither protocol nor state is checked; kept as sent.
    let m = parse(&three_with(&with(0, 77, FLAG_TEMPLATE))).unwrap();
    assert_eq!(
        (m.conns[1].protocol, m.conns[1].state, m.conns[1].flags),
        (0, 77, FLAG_TEMPLATE)
    );
}

#[test]
fn v1_flags_are_returned_unmasked() {
    let mut r = rec4(1001, &[]);
    r[4..8].copy_from_slice(&0xffff_efffu32.to_be_bytes()); // all but TEMPLATE
    let m = parse(&three_with(&r)).unwrap();
    assert_eq!(m.conns[1].flags, 0xffff_efff);
}

// -------------------------------------------------------------- v0 rules

#[test]
fn v0_truncated_record_or_seq_block_drops_the_rest() {
    let bytes = table(V0_SEQ);
    // Announce 3 records: the third is missing.
    let mut d = bytes.clone();
    d[0] = 3;
    let m = parse(&d).unwrap();
    assert_eq!((m.conns.len(), m.skipped), (2, 1));
    // The first record's seq block cut short: nothing survives.
    let body = &bytes[4..4 + 24 + 20];
    let m = parse(&v0(1, 0, body)).unwrap();
    assert_eq!((m.conns.len(), m.skipped), (0, 1));
}

#[test]
fn v0_unknown_protocol_or_bad_state_skips_the_record() {
    let mut bytes = table(V0_SEQ);
    bytes[4 + 1] = 99; // first record: protocol 99
    let m = parse(&bytes).unwrap();
    assert_eq!((m.conns.len(), m.skipped), (1, 1));
    assert_eq!(m.conns[0].protocol, IPPROTO_UDP);
    let mut bytes = table(V0_SEQ);
    bytes[4 + 48 + 23] = 1; // second record: UDP state 1
    let m = parse(&bytes).unwrap();
    assert_eq!((m.conns.len(), m.skipped), (1, 1));
    assert_eq!(m.conns[0].protocol, IPPROTO_TCP);
}

// ---------------------------------------------------------------- builders

#[test]
fn build_splits_at_maxlen_with_padding_only_between_records() {
    // Record lengths 62 (seq option) and 36, repeated: 8 + 62 + 2 + 36 = 108.
    let mut a = conn4(1);
    a.seq = Some(SeqData::default());
    let b = conn4(2);
    let conns = vec![a.clone(), b.clone(), a, b];
    let d = build_v1(0, &conns, 108).unwrap();
    assert_eq!(d.len(), 2);
    for dg in &d {
        assert_eq!(dg.len(), 108);
        assert_eq!(&dg[8 + 62..8 + 64], &[0, 0]);
        assert_eq!(u16::from_be_bytes([dg[2], dg[3]]), 108);
        assert_eq!(dg[4], 2);
    }
    // One byte less: [a] alone (70: no padding after the last record), then
    // [b, a] fits (44 is aligned, 44 + 62 = 106), then [b].
    let d = build_v1(0, &conns, 107).unwrap();
    assert_eq!(
        d.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![70, 106, 44]
    );
    let back: Vec<SyncConn> = d.iter().flat_map(|g| parse(g).unwrap().conns).collect();
    assert_eq!(back, conns);
}

#[test]
fn build_caps_records_per_datagram_at_255() {
    let conns: Vec<SyncConn> = (0..300).map(conn4).collect();
    let d = build_v1(0, &conns, 65535).unwrap();
    assert_eq!(d.iter().map(|g| g[4]).collect::<Vec<_>>(), vec![255, 45]);
    assert_eq!(d[0].len(), 8 + 255 * 36);
    let d0 = build_v0(0, &conns, 100_000).unwrap();
    assert_eq!(d0.iter().map(|g| g[0]).collect::<Vec<_>>(), vec![255, 45]);
    let back: Vec<SyncConn> = d0.iter().flat_map(|g| parse(g).unwrap().conns).collect();
    assert_eq!(back.len(), 300);
}

#[test]
fn build_of_nothing_is_no_datagram() {
    assert_eq!(build_v1(0, &[], 1472).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(build_v0(0, &[], 1472).unwrap(), Vec::<Vec<u8>>::new());
}

#[test]
fn build_rejects_a_conn_that_does_not_fit_alone() {
    let conns = vec![conn4(1), conn4(2)];
    assert_eq!(
        build_v1(0, &conns, 43),
        Err(SyncError::ConnTooLarge {
            index: 0,
            needed: 44,
            maxlen: 43
        })
    );
    assert_eq!(build_v1(0, &conns, 44).unwrap().len(), 2);
    assert_eq!(
        build_v0(0, &conns, 27),
        Err(SyncError::ConnTooLarge {
            index: 0,
            needed: 28,
            maxlen: 27
        })
    );
}

#[test]
fn build_v1_rejects_inconsistent_conns() {
    let mut c = conn4(1);
    c.dest = sa("[fd00::1]:80");
    assert_eq!(
        build_v1(0, &[conn4(0), c], 1472),
        Err(SyncError::MixedFamily { index: 1 })
    );
    let mut c = conn4(1);
    c.pe_name = Some("sip".into());
    assert_eq!(
        build_v1(0, &[c.clone()], 1472),
        Err(SyncError::PeIncomplete { index: 0 })
    );
    c.pe_name = None;
    c.pe_data = Some(vec![1]);
    assert_eq!(
        build_v1(0, &[c.clone()], 1472),
        Err(SyncError::PeIncomplete { index: 0 })
    );
    for name in ["", "a-name-of-17-byte", "s\0p"] {
        c.pe_name = Some(name.into());
        assert_eq!(
            build_v1(0, &[c.clone()], 1472),
            Err(SyncError::BadPeName { index: 0 })
        );
    }
    c.pe_name = Some("sip".into());
    for len in [0, 256] {
        c.pe_data = Some(vec![7; len]);
        assert_eq!(
            build_v1(0, &[c.clone()], 1472),
            Err(SyncError::BadPeData { index: 0, len })
        );
    }
    c.pe_data = Some(vec![7; 255]);
    c.pe_name = Some("a-name-of-16-byt".into());
    let d = build_v1(0, &[c.clone()], 1472).unwrap();
    assert_eq!(parse(&d[0]).unwrap().conns, vec![c]);
}

#[test]
fn build_v0_writes_only_what_v0_carries() {
    let mut c = conn4(1);
    c.fwmark = 5;
    c.pe_name = Some("sip".into());
    c.pe_data = Some(vec![1]);
    c.flags = 0x0001_0000 | FLAG_IN_SEQ; // bit 16 does not exist in v0
    c.seq = None; // zeros are sent
    let d = build_v0(3, &[c], 1472).unwrap();
    assert_eq!(d[0].len(), 4 + 48);
    let m = parse(&d[0]).unwrap();
    let got = &m.conns[0];
    assert_eq!(
        (got.flags, got.fwmark, got.timeout_s),
        (FLAG_IN_SEQ, 0, None)
    );
    assert_eq!((&got.pe_name, &got.pe_data), (&None, &None));
    assert_eq!(got.seq, Some(SeqData::default()));
    // Nor the FULLNAT local address (an option: v1 only).
    let mut c = conn4(1);
    c.local = Some(sa("10.3.0.1:40000"));
    let d = build_v0(3, &[c], 1472).unwrap();
    assert_eq!(d[0].len(), 4 + 24);
    assert_eq!(parse(&d[0]).unwrap().conns[0].local, None);
    // seq without the flags is not sent.
    let mut c = conn4(1);
    c.seq = Some(SeqData {
        in_seq: [1, 2, 3],
        out_seq: [4, 5, 6],
    });
    let d = build_v0(3, &[c], 1472).unwrap();
    assert_eq!(d[0].len(), 4 + 24);
    // IPv6 cannot be sent.
    let mut c = conn4(1);
    c.client = sa("[::1]:1");
    assert_eq!(
        build_v0(0, &[c], 1472),
        Err(SyncError::Ipv6InV0 { index: 0 })
    );
}

#[test]
fn build_caps_maxlen_at_the_size_field() {
    let conns: Vec<SyncConn> = (0..255).map(conn4).collect();
    let d = build_v1(0, &conns, usize::MAX).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(parse(&d[0]).unwrap().conns.len(), 255);
}

// -------------------------------------------------------------- properties

fn arb_ip(v6: bool) -> BoxedStrategy<IpAddr> {
    if v6 {
        any::<[u8; 16]>()
            .prop_map(|o| IpAddr::V6(Ipv6Addr::from(o)))
            .boxed()
    } else {
        any::<[u8; 4]>()
            .prop_map(|o| IpAddr::V4(Ipv4Addr::from(o)))
            .boxed()
    }
}

fn arb_endpoints(v6: bool) -> impl Strategy<Value = (SocketAddr, SocketAddr, SocketAddr)> {
    (
        (arb_ip(v6), any::<u16>()),
        (arb_ip(v6), any::<u16>()),
        (arb_ip(v6), any::<u16>()),
    )
        .prop_map(|((c, cp), (v, vp), (d, dp))| {
            (
                SocketAddr::new(c, cp),
                SocketAddr::new(v, vp),
                SocketAddr::new(d, dp),
            )
        })
}

/// Protocol, state and flags a backup accepts: a connection of a known
/// protocol in range, or a template with anything.
fn arb_proto_state_flags() -> impl Strategy<Value = (u8, u16, u32)> {
    prop_oneof![
        (
            prop_oneof![
                (Just(IPPROTO_TCP), 0u16..11),
                (Just(IPPROTO_UDP), Just(0u16)),
                (Just(IPPROTO_SCTP), 0u16..14),
                (Just(IPPROTO_AH), Just(0u16)),
                (Just(IPPROTO_ESP), Just(0u16)),
            ],
            any::<u32>()
        )
            .prop_map(|((p, s), f)| (p, s, f & !FLAG_TEMPLATE)),
        (any::<u8>(), any::<u16>(), any::<u32>()).prop_map(|(p, s, f)| (p, s, f | FLAG_TEMPLATE)),
    ]
}

fn arb_seq() -> impl Strategy<Value = SeqData> {
    (any::<[u32; 3]>(), any::<[u32; 3]>()).prop_map(|(in_seq, out_seq)| SeqData { in_seq, out_seq })
}

fn arb_conn_v1() -> impl Strategy<Value = SyncConn> {
    (
        any::<bool>().prop_flat_map(arb_endpoints),
        arb_proto_state_flags(),
        any::<u32>(),
        prop::option::of(1u32..),
        prop::option::of(arb_seq()),
        prop::option::of(("[a-z_]{1,16}", prop::collection::vec(any::<u8>(), 1..=255))),
        prop::option::of(
            (any::<bool>().prop_flat_map(arb_ip), any::<u16>())
                .prop_map(|(a, p)| SocketAddr::new(a, p)),
        ),
        prop::option::of(
            (any::<u32>(), any::<u32>()).prop_map(|(answer, index)| BulkMark { answer, index }),
        ),
    )
        .prop_map(
            |(
                (client, vip, dest),
                (protocol, state, flags),
                fwmark,
                timeout_s,
                seq,
                pe,
                local,
                bulk,
            )| {
                SyncConn {
                    protocol,
                    client,
                    vip,
                    dest,
                    flags,
                    state,
                    fwmark,
                    timeout_s,
                    seq,
                    pe_name: pe.as_ref().map(|p| p.0.clone()),
                    pe_data: pe.map(|p| p.1),
                    local,
                    bulk,
                }
            },
        )
}

fn arb_conn_v0() -> impl Strategy<Value = SyncConn> {
    (arb_endpoints(false), arb_proto_state_flags(), arb_seq()).prop_map(
        |((client, vip, dest), (protocol, state, flags), seq)| {
            let flags = flags & 0xffff;
            SyncConn {
                protocol,
                client,
                vip,
                dest,
                flags,
                state,
                fwmark: 0,
                timeout_s: None,
                seq: (flags & FLAG_SEQ_MASK != 0).then_some(seq),
                pe_name: None,
                pe_data: None,
                local: None,
                bulk: None,
            }
        },
    )
}

/// Walks a v1 datagram's records as the kernel does; checks each starts
/// 4-byte aligned, the padding is zero and nothing follows the last record.
fn check_v1_layout(d: &[u8]) -> Result<(), TestCaseError> {
    let mut p = 8;
    for i in 0..d[4] {
        prop_assert_eq!(p % 4, 0);
        let size = usize::from(u16::from_be_bytes([d[p + 2], d[p + 3]]) & 0x0fff);
        let end = p + size;
        if i + 1 < d[4] {
            let next = p + size.div_ceil(4) * 4;
            prop_assert!(d[end..next].iter().all(|&b| b == 0));
            p = next;
        } else {
            prop_assert_eq!(end, d.len());
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn v1_round_trip(
        conns in prop::collection::vec(arb_conn_v1(), 0..40),
        maxlen in 401usize..3000,
        syncid in any::<u8>(),
    ) {
        let dgrams = build_v1(syncid, &conns, maxlen).unwrap();
        let mut back = Vec::new();
        for d in &dgrams {
            prop_assert!(d.len() <= maxlen);
            check_v1_layout(d)?;
            let m = parse(d).unwrap();
            prop_assert_eq!((m.version, m.syncid, m.skipped), (1, syncid, 0));
            prop_assert!(!m.conns.is_empty());
            back.extend(m.conns);
        }
        prop_assert_eq!(back, conns);
    }

    #[test]
    fn v0_round_trip(
        conns in prop::collection::vec(arb_conn_v0(), 0..80),
        maxlen in 52usize..2000,
        syncid in any::<u8>(),
    ) {
        let dgrams = build_v0(syncid, &conns, maxlen).unwrap();
        let mut back = Vec::new();
        for d in &dgrams {
            prop_assert!(d.len() <= maxlen);
            let m = parse(d).unwrap();
            prop_assert_eq!((m.version, m.syncid, m.skipped), (0, syncid, 0));
            back.extend(m.conns);
        }
        prop_assert_eq!(back, conns);
    }

    #[test]
    fn parse_never_panics_and_what_parses_rebuilds(
        mut bytes in prop::collection::vec(any::<u8>(), 0..600),
        fix_size in any::<bool>(),
        v1_header in any::<bool>(),
    ) {
        if bytes.len() >= 8 && v1_header {
            bytes[0] = 0;
            bytes[5] = 1;
            bytes[6] = 0;
            bytes[7] = 0;
        }
        if bytes.len() >= 4 && fix_size {
            let n = bytes.len() as u16;
            bytes[2..4].copy_from_slice(&n.to_be_bytes());
        }
        if let Ok(m) = parse(&bytes) {
            let dgrams = build_v1(m.syncid, &m.conns, 1472).unwrap();
            let back: Vec<SyncConn> =
                dgrams.iter().flat_map(|d| parse(d).unwrap().conns).collect();
            prop_assert_eq!(back, m.conns);
        }
    }
}
