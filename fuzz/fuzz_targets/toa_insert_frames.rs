//! The director's TOA insertion (`bpf/lib/toa_insert.h` through the fixture
//! `bpf/toa_insert_test.c`) under arbitrary frames, run in the kernel
//! through BPF_PROG_TEST_RUN (needs root and a build with clang; it says
//! why and does nothing otherwise — but under CI, or with
//! RVS_REQUIRE_PRIVILEGED=1, it fails: bpf_setup.rs).
//!
//! Frames start from TCP segments (IPv4 with and without options, IPv6, a
//! VLAN tag or not, TCP options, payload) and are mutated and cut; the
//! client, the MTU and the MSS reduction come from the input too. Either
//! the frame comes out UNCHANGED with a refusal code, or: for an
//! insertion, the option (the codec's bytes) sits after the fixed TCP
//! header with everything behind it unchanged, and checksums that
//! verified before verify after; for the MSS clamp, only the MSS value and
//! the TCP checksum changed. The "moved" code (a bounds check failing
//! after the frame grew) never comes.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rvs_wire::checksum::{checksum, l4_checksum_under};
use rvs_wire::frame::{Ip, Tcp, ethernet, tcp_flags};
use rvs_wire::toa::Toa;
use rvs_xdp::toa_insert::{ToaInsertTest, code};

#[path = "bpf_setup.rs"]
mod bpf_setup;

static FIXTURE: OnceLock<Option<Mutex<ToaInsertTest>>> = OnceLock::new();

fn setup() -> Option<Mutex<ToaInsertTest>> {
    match bpf_setup::forced_refusal()
        .and_then(|()| ToaInsertTest::load().map_err(|e| e.to_string()))
    {
        Ok(t) => Some(Mutex::new(t)),
        Err(e) => {
            bpf_setup::setup_failed("toa_insert_frames", &e);
            None
        }
    }
}

/// Where the IP header, the TCP header and the IP packet's end are, if
/// the frame is a consistent TCP segment.
fn layout(f: &[u8]) -> Option<(usize, usize, usize)> {
    let tagged = matches!(f.get(12..14)?, [0x81, 0x00] | [0x88, 0xa8]);
    let l3 = if tagged { 18 } else { 14 };
    let et = f.get(l3 - 2..l3)?;
    let (l4, end) = match et {
        [0x08, 0x00] => {
            let ihl = usize::from(f.get(l3)? & 0xf) * 4;
            (
                l3 + ihl,
                l3 + usize::from(u16::from_be_bytes([*f.get(l3 + 2)?, *f.get(l3 + 3)?])),
            )
        }
        [0x86, 0xdd] => (
            l3 + 40,
            l3 + 40 + usize::from(u16::from_be_bytes([*f.get(l3 + 4)?, *f.get(l3 + 5)?])),
        ),
        _ => return None,
    };
    let thl = usize::from(f.get(l4 + 12)? >> 4) * 4;
    (thl >= 20 && l4 + thl <= end && end <= f.len()).then_some((l3, l4, end))
}

/// The TCP header's offset, whatever the IP length says (the MSS clamp
/// needs only the TCP header and its options in the frame).
fn tcp_offset(f: &[u8]) -> usize {
    let l3 = if matches!(f[12..14], [0x81, 0x00] | [0x88, 0xa8]) {
        18
    } else {
        14
    };
    if f[l3 - 2..l3] == [0x86, 0xdd] {
        l3 + 40
    } else {
        l3 + usize::from(f[l3] & 0xf) * 4
    }
}

/// The TCP checksum over the segment, verified: 0 when it is right.
fn tcp_check(f: &[u8], l3: usize, l4: usize, end: usize) -> u16 {
    l4_checksum_under(&f[l3..l4], 6, &f[l4..end]).unwrap_or(1)
}

/// A TCP segment: family, VLAN, IPv4 options, TCP options, payload.
fn template(v6: bool, vlan: bool, ip_opts: usize, tcp_opts: &[u8], payload: &[u8]) -> Vec<u8> {
    let ip = if v6 {
        Ip::new(
            Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 7).into(),
            Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, 0, 9).into(),
        )
    } else {
        Ip {
            id: 1,
            options: vec![1; ip_opts],
            ..Ip::new(
                Ipv4Addr::new(10, 1, 0, 7).into(),
                Ipv4Addr::new(10, 2, 0, 9).into(),
            )
        }
    };
    let tcp = Tcp {
        seq: 1,
        ack: 2,
        options: tcp_opts.to_vec(),
        ..Tcp::new(40000, 8080, tcp_flags::SYN | tcp_flags::ACK)
    };
    let packet = ip.tcp(&tcp, payload);
    ethernet(
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        vlan.then_some(42),
        &packet,
    )
}

const SYN_OPTS: [u8; 20] = [
    2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
];

fuzz_target!(init: {
    // Before fuzzing: under CI a program that cannot load ends the run.
    FIXTURE.get_or_init(setup);
}, |data: &[u8]| {
    let Some(t) = FIXTURE.get_or_init(setup) else {
        return;
    };
    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let v6 = b(0) & 1 == 1;
    let opts: Vec<u8> = match b(1) % 4 {
        0 => Vec::new(),
        1 => SYN_OPTS.to_vec(),
        2 => vec![1; 32],
        _ => vec![1; 40],
    };
    let payload = vec![0x5a; usize::from(b(2) % 64)];
    let ip_opts = usize::from(b(3) % 11) * 4;
    let mut f = template(v6, b(0) & 2 == 2, ip_opts, &opts, &payload);
    // Mutate: (offset, value) pairs, then maybe cut.
    let mut i = 8;
    while i + 1 < data.len() && i < 40 {
        let at = usize::from(data[i]) % f.len();
        f[at] = data[i + 1];
        i += 2;
    }
    if b(4) & 0x80 != 0 {
        // BPF_PROG_TEST_RUN wants at least an Ethernet header.
        f.truncate(usize::from(b(5)).max(14).min(f.len()));
    }
    let client = if b(6) & 1 == 0 {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, b(7))), 51234)
    } else {
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(b(7)))),
            51235,
        )
    };
    let before = layout(&f);

    if b(6) & 2 == 0 {
        let mtu = 1000 + u16::from(b(5)) * 2;
        let r = t.insert(&f, client, mtu).expect("test run");
        let out = &r.data;
        match r.action {
            code::OK => {
                let (l3, l4, end) = before.expect("inserted into an inconsistent frame");
                let opt = Toa::new(client).to_bytes();
                let n = opt.len();
                assert_eq!(out.len(), f.len() + n);
                assert!(end + n <= usize::from(mtu) + l3);
                assert_eq!(out[..l3], f[..l3], "link header");
                assert_eq!(out[l4..l4 + 12], f[l4..l4 + 12], "ports, sequence numbers");
                assert_eq!(out[l4 + 20..l4 + 20 + n], opt[..], "the codec's bytes");
                assert_eq!(out[l4 + 20 + n..], f[l4 + 20..], "the rest unchanged");
                assert_eq!(layout(out), Some((l3, l4, end + n)), "lengths grew");
                if f[l3] >> 4 == 4 && checksum(&f[l3..l4]) == 0 {
                    assert_eq!(checksum(&out[l3..l4]), 0, "IPv4 checksum still verifies");
                }
                if tcp_check(&f, l3, l4, end) == 0 {
                    assert_eq!(
                        tcp_check(out, l3, l4, end + n),
                        0,
                        "TCP checksum still verifies"
                    );
                }
            }
            code::NOROOM | code::MTU | code::PKT | code::NOT_PARSED => {
                assert_eq!(out[..], f[..], "a refused frame is unchanged");
            }
            c => panic!("unexpected code {c}"),
        }
    } else {
        let reduce = u16::from(b(5) % 32);
        let r = t.mss_clamp(&f, reduce).expect("test run");
        let out = &r.data;
        match r.action {
            code::OK => {
                let l4 = tcp_offset(&f);
                assert_eq!(out.len(), f.len());
                let diff: Vec<usize> = (0..f.len()).filter(|&i| out[i] != f[i]).collect();
                // The checksum and at most two MSS bytes in the options.
                assert!(
                    diff.iter().all(|&i| i == l4 + 16
                        || i == l4 + 17
                        || (i >= l4 + 20 && i < l4 + usize::from(f[l4 + 12] >> 4) * 4)),
                    "changed {diff:?}"
                );
                if let Some((l3, _, end)) = before
                    && tcp_check(&f, l3, l4, end) == 0
                {
                    assert_eq!(
                        tcp_check(out, l3, l4, end),
                        0,
                        "TCP checksum still verifies"
                    );
                }
            }
            code::NOROOM | code::MSS_NONE | code::PKT | code::NOT_PARSED => {
                assert_eq!(out[..], f[..], "an unclamped frame is unchanged");
            }
            c => panic!("unexpected code {c}"),
        }
    }
});
