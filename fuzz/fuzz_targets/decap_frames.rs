//! The real-server decapsulator (`bpf/decap.c`) under arbitrary frames, run
//! in the kernel through BPF_PROG_TEST_RUN (needs root and a build with
//! clang; it says why and does nothing otherwise — but under CI, or with
//! RVS_REQUIRE_PRIVILEGED=1, it fails: bpf_setup.rs).
//!
//! Frames start from IPIP, GUE, GRE (with and without its checksum, key
//! and sequence fields, and with an inner Ethernet header) and Geneve
//! (with options, with an inner Ethernet header) packets to the host's
//! VIPs, IPv4 and IPv6, and are mutated and cut. Every frame is passed to
//! the kernel, either UNCHANGED or with outer headers removed: the MAC
//! addresses (and a VLAN tag) kept, the ethertype the inner packet's, what
//! follows a suffix of the frame, an IP packet to one of the VIPs.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rvs_wire::frame::{Ip, Tcp, ethernet, tcp_flags};
use rvs_xdp::action;
use rvs_xdp::decap::Decap;

#[path = "bpf_setup.rs"]
mod bpf_setup;
#[path = "input_rng.rs"]
mod input_rng;
use input_rng::{input_rng, mutate};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x100);
const GUE_PORT: u16 = 6080;
const GENEVE_PORT: u16 = 6081;

static DECAP: OnceLock<Option<Mutex<Decap>>> = OnceLock::new();

fn setup() -> Option<Mutex<Decap>> {
    let r = (|| -> Result<Decap, String> {
        bpf_setup::forced_refusal()?;
        let mut d = Decap::load().map_err(|e| e.to_string())?;
        for v in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
            d.add_vip(v).map_err(|e| e.to_string())?;
        }
        d.set_gue_port(GUE_PORT).map_err(|e| e.to_string())?;
        d.set_geneve_port(GENEVE_PORT).map_err(|e| e.to_string())?;
        Ok(d)
    })();
    match r {
        Ok(d) => Some(Mutex::new(d)),
        Err(e) => {
            bpf_setup::setup_failed("decap_frames", &e);
            None
        }
    }
}

/// An inner packet to the VIP: a TCP SYN (a 20-byte header, no payload).
fn inner(v6: bool) -> Vec<u8> {
    let ip = if v6 {
        Ip::new(
            Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 1).into(),
            VIP6.into(),
        )
    } else {
        Ip::new(Ipv4Addr::new(10, 78, 0, 1).into(), VIP4.into())
    };
    ip.tcp(
        &Tcp {
            seq: 1,
            ..Tcp::new(40000, 80, tcp_flags::SYN)
        },
        b"",
    )
}

/// Template `t`: the tunnel (IPIP, GUE, GRE, GRE with C+K+S, GRE with
/// inner Ethernet, Geneve, Geneve with options, Geneve with inner
/// Ethernet) of `inner`, outer family = inner family, optionally tagged.
fn template(t: u8, v6: bool, tagged: bool) -> Vec<u8> {
    let ethertype: [u8; 2] = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    let teb = |p: &[u8]| {
        let mut e = vec![2, 0, 0, 0, 0, 5, 2, 0, 0, 0, 0, 6];
        e.extend_from_slice(&ethertype);
        e.extend_from_slice(p);
        e
    };
    let inner = inner(v6);
    let (proto, tun): (u8, Vec<u8>) = match t % 8 {
        0 => (if v6 { 41 } else { 4 }, inner),
        1 => {
            let mut u = udp(GUE_PORT, 4 + inner.len());
            u.extend_from_slice(&[0, if v6 { 41 } else { 4 }, 0, 0]);
            u.extend_from_slice(&inner);
            (17, u)
        }
        2 => (47, [&[0u8, 0][..], &ethertype, &inner].concat()),
        3 => (
            47,
            [
                &[0xb0u8, 0][..],
                &ethertype,
                &[0; 4],
                &[1, 2, 3, 4],
                &[0, 0, 0, 7],
                &inner,
            ]
            .concat(),
        ),
        4 => (47, [&[0u8, 0, 0x65, 0x58][..], &teb(&inner)].concat()),
        t => {
            let (hdr, body): (Vec<u8>, Vec<u8>) = match t {
                5 => ([&[0u8, 0][..], &ethertype, &[0, 0, 1, 0]].concat(), inner),
                6 => (
                    [
                        &[2u8, 0][..],
                        &ethertype,
                        &[0, 0, 1, 0],
                        &[1, 0x4b, 1, 1, 9, 9, 9, 9],
                    ]
                    .concat(),
                    inner,
                ),
                _ => (vec![0, 0, 0x65, 0x58, 0, 0, 1, 0], teb(&inner)),
            };
            let mut u = udp(GENEVE_PORT, hdr.len() + body.len());
            u.extend_from_slice(&hdr);
            u.extend_from_slice(&body);
            (17, u)
        }
    };
    let outer = if v6 {
        Ip::new(
            Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2).into(),
            Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x11).into(),
        )
    } else {
        Ip::new(
            Ipv4Addr::new(10, 77, 0, 2).into(),
            Ipv4Addr::new(10, 77, 0, 11).into(),
        )
    };
    ethernet(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        tagged.then_some(42),
        &outer.packet(proto, &tun),
    )
}

/// A UDP header (no checksum) to `port` for `payload` bytes after it.
fn udp(port: u16, payload: usize) -> Vec<u8> {
    let mut u = vec![0x80, 0x01];
    u.extend_from_slice(&port.to_be_bytes());
    u.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u
}

fuzz_target!(init: {
    // Before fuzzing: under CI a program that cannot load ends the run.
    DECAP.get_or_init(setup);
}, |data: &[u8]| {
    let Some(d) = DECAP.get_or_init(setup) else {
        return;
    };
    let mut rng = input_rng(data);
    let r0 = rng();
    let mut frame = template(r0 as u8, r0 & 0x100 != 0, r0 & 0x200 != 0);
    // A cut keeps the Ethernet header (BPF_PROG_TEST_RUN wants one).
    mutate(&mut frame, data, &mut rng, 4, 14);
    let Ok(mut d) = d.lock() else { return };
    let r = match d.run(&frame, 1) {
        Ok(r) => r,
        Err(e) => panic!("test run failed on a {}-byte frame: {e}", frame.len()),
    };
    assert_eq!(r.action, action::PASS, "the decapsulator only passes");
    if r.data == frame {
        return;
    }
    assert!(r.data.len() < frame.len(), "a stripped frame grew");
    let l2 = if matches!(frame[12..14], [0x81, 0x00] | [0x88, 0xa8]) {
        18
    } else {
        14
    };
    assert_eq!(r.data[..l2 - 2], frame[..l2 - 2], "the L2 header changed");
    let rest = &r.data[l2..];
    assert!(frame.ends_with(rest), "what follows is not the frame's own");
    let want = match rest[0] >> 4 {
        4 => {
            assert_eq!(rest[16..20], VIP4.octets(), "stripped for another address");
            [0x08, 0x00]
        }
        6 => {
            assert_eq!(rest[24..40], VIP6.octets(), "stripped for another address");
            [0x86, 0xdd]
        }
        v => panic!("stripped to IP version {v}"),
    };
    assert_eq!(r.data[l2 - 2..l2], want, "the ethertype is the inner packet's");
});
