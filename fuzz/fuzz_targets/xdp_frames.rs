//! The XDP director's packet parser under arbitrary frames, run in the
//! kernel through BPF_PROG_TEST_RUN (needs root and a build with clang; it
//! says why and does nothing otherwise).
//!
//! The verifier already proves the program reads no memory out of bounds;
//! this target checks what the verifier cannot: with DR real servers behind
//! the IPv4 TCP service, Geneve (with the UDP checksum) behind the UDP one
//! and GRE (with its checksum) behind the IPv6 one, every frame either
//! passes to the kernel UNCHANGED, is dropped, or goes back out (XDP_TX) to
//! a configured real server's MAC with nothing changed but the two MAC
//! addresses (DR) or inside outer headers whose checksums verify, the
//! frame after its L2 header unchanged (the tunnels). The program never
//! aborts.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::DestConfig;
use rvs_core::sched::SchedParams;
use rvs_xdp::maps::{self, Config, Dest, Svc, SvcKey};
use rvs_xdp::{LoadOptions, Loaded, Object, action, tables};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x100);
const DIR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const RS_MACS: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 0x11], [2, 0, 0, 0, 0, 0x12]];

static LB: OnceLock<Option<Mutex<Loaded>>> = OnceLock::new();

fn setup() -> Option<Mutex<Loaded>> {
    match configure() {
        Ok(l) => Some(Mutex::new(l)),
        Err(e) => {
            eprintln!("xdp_frames: not fuzzing the BPF program: {e} (needs root and clang)");
            None
        }
    }
}

fn configure() -> Result<Loaded, String> {
    let mut l = Loaded::load(
        Object::Director,
        &LoadOptions {
            flow_table_size: 4096,
            slots: 1 << 20,
            ..LoadOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    l.set_config(&Config::ipvs_defaults())
        .map_err(|e| e.to_string())?;
    let mut svc_index = 0u32;
    for (vip, proto, port, method) in [
        (IpAddr::V4(VIP4), maps::PROTO_TCP, 80u16, maps::fwd::DR),
        (IpAddr::V4(VIP4), maps::PROTO_UDP, 53, maps::fwd::TUN_GENEVE),
        (IpAddr::V6(VIP6), maps::PROTO_TCP, 80, maps::fwd::TUN_GRE),
    ] {
        let rs: Vec<IpAddr> = match vip {
            IpAddr::V4(_) => vec![
                IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11)),
                IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12)),
            ],
            IpAddr::V6(_) => vec![
                "fd00:77::11"
                    .parse()
                    .map_err(|e: std::net::AddrParseError| e.to_string())?,
                "fd00:77::12"
                    .parse()
                    .map_err(|e: std::net::AddrParseError| e.to_string())?,
            ],
        };
        let core: Vec<CoreDest> = rs
            .iter()
            .enumerate()
            .map(|(i, a)| CoreDest::new(DestId(i as u32), DestConfig::new(*a, 0)))
            .collect();
        let base = svc_index * 1024;
        let index_of: Vec<u32> = (0..rs.len() as u32).map(|p| base + p).collect();
        let table = tables::scheduling_table(
            rvs_core::sched::Scheduler::Mh,
            &SchedParams::default(),
            &core,
            &index_of,
        )
        .map_err(|e| e.to_string())?;
        for (p, a) in rs.iter().enumerate() {
            let d = Dest {
                addr: maps::addr16(*a),
                port: 0,
                family: maps::family(*a),
                method,
                flags: if method == maps::fwd::DR {
                    0
                } else {
                    maps::dest_flags::TUN_CSUM
                },
                weight: 1,
                ifindex: 0,
                mac: RS_MACS[p],
                smac: DIR_MAC,
                gue_port: 0,
                pad0: 0,
            };
            l.set_dest(index_of[p], &d).map_err(|e| e.to_string())?;
        }
        // Each service's region: its bucket table, then its list.
        let slots = svc_index * (1 << 18);
        l.set_slots(slots, &table).map_err(|e| e.to_string())?;
        l.set_slots(slots + (1 << 17), &index_of)
            .map_err(|e| e.to_string())?;
        l.set_svc(
            svc_index,
            &Svc {
                sched: maps::sched::id(rvs_core::sched::Scheduler::Mh),
                family: maps::family(vip),
                table_off: slots,
                table_len: table.len() as u32,
                dests_off: slots + (1 << 17),
                dests_len: rs.len() as u32,
                ..Svc::default()
            },
        )
        .map_err(|e| e.to_string())?;
        l.set_service(
            &SvcKey {
                proto,
                family: maps::family(vip),
                port: port.to_be(),
                vip: maps::addr16(vip),
            },
            svc_index,
        )
        .map_err(|e| e.to_string())?;
        svc_index += 1;
    }
    Ok(l)
}

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A well-formed frame to a VIP for template `t` (0, 1: IPv4 TCP SYN /
/// ACK; 2: IPv4 UDP; 3, 4: IPv6 TCP SYN / ACK), so mutations start from
/// inside the paths worth exploring.
fn template(t: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&DIR_MAC);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    let v6 = t % 5 >= 3;
    let udp = t % 5 == 2;
    let l4len = if udp { 8 + 4 } else { 20 };
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4len as u16).to_be_bytes());
        f.push(6);
        f.push(64);
        f.extend_from_slice(
            &"fd00:77::10"
                .parse::<Ipv6Addr>()
                .map(|a| a.octets())
                .unwrap_or([0; 16]),
        );
        f.extend_from_slice(&VIP6.octets());
    } else {
        f.extend_from_slice(&[0x08, 0x00]);
        let l3 = f.len();
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + l4len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, if udp { 17 } else { 6 }, 0, 0]);
        f.extend_from_slice(&[10, 77, 0, 10]);
        f.extend_from_slice(&VIP4.octets());
        let c = csum(&f[l3..l3 + 20]);
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    if udp {
        f.extend_from_slice(&[0x9c, 0x40, 0, 53, 0, 12, 0, 0, b'r', b'v', b's', b'!']);
    } else {
        // SYN for t = 0 and 3, ACK for t = 1 and 4 (an established-flow
        // packet once a SYN of the same flow has been seen).
        let flags = if t % 5 == 1 || t % 5 == 4 { 0x10 } else { 0x02 };
        f.extend_from_slice(&[0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags]);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    }
    f
}

fuzz_target!(|data: &[u8]| {
    let Some(lb) = LB.get_or_init(setup) else {
        return;
    };
    // Code coverage cannot see inside the BPF program, so the fuzzer gets
    // little guidance from it: each input seeds a generator that makes a
    // frame — a template to the VIP (or random bytes) with random flips and
    // a random cut — and the input's own bytes are flipped in as well.
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        x = (x ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pick = rng() % 6;
    let mut frame = if pick == 5 {
        let n = (rng() % 160) as usize;
        (0..n).map(|_| rng() as u8).collect()
    } else {
        template(pick as u8)
    };
    if !frame.is_empty() {
        for _ in 0..rng() % 6 {
            let at = (rng() as usize) % frame.len();
            frame[at] ^= (rng() >> 8) as u8;
        }
        for pair in data.chunks_exact(2) {
            let at = usize::from(pair[0]) % frame.len();
            frame[at] ^= pair[1];
        }
        if rng() % 4 == 0 {
            let keep = (rng() as usize) % frame.len();
            frame.truncate(keep);
        }
    }
    if frame.is_empty() {
        return;
    }
    let Ok(mut l) = lb.lock() else { return };
    let r = match l.run(&frame, 1) {
        Ok(r) => r,
        // The kernel refuses frames below an Ethernet header's length.
        Err(_) if frame.len() < 14 => return,
        Err(e) => panic!("test run failed on a {}-byte frame: {e}", frame.len()),
    };
    match r.action {
        action::PASS => assert_eq!(r.data, frame, "a passed frame was changed"),
        action::DROP => {}
        action::TX if r.data.len() == frame.len() => {
            assert!(
                RS_MACS.iter().any(|m| r.data[..6] == m[..]),
                "TX to an unknown MAC"
            );
            assert_eq!(r.data[12..], frame[12..], "DR changed more than the MACs");
        }
        action::TX => tunnelled(&frame, &r.data),
        other => panic!("unexpected XDP action {other}"),
    }
});

/// A frame the director sent into a GRE or Geneve tunnel: to a real
/// server's MAC, the L2 header (tag included) kept, the original frame after
/// it unchanged behind the outer headers, and the tunnel checksum valid.
fn tunnelled(frame: &[u8], out: &[u8]) {
    assert!(out.len() > frame.len(), "a tunnel shrank the frame");
    assert!(
        RS_MACS.iter().any(|m| out[..6] == m[..]),
        "TX to an unknown MAC"
    );
    let l2 = if matches!(frame[12..14], [0x81, 0x00] | [0x88, 0xa8]) {
        18
    } else {
        14
    };
    let hdrs = out.len() - frame.len();
    assert_eq!(out[12..l2], frame[12..l2], "the L2 header changed");
    assert_eq!(out[l2 + hdrs..], frame[l2..], "the inner packet changed");
    let ip = &out[l2..];
    let (proto, src, dst, l4) = match ip[0] >> 4 {
        4 => {
            assert_eq!(csum(&ip[..20]), 0, "outer IPv4 header checksum");
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            (ip[9], &ip[12..16], &ip[16..20], &ip[20..total])
        }
        6 => {
            let total = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            (ip[6], &ip[8..24], &ip[24..40], &ip[40..total])
        }
        v => panic!("outer IP version {v}"),
    };
    match proto {
        47 => {
            assert_eq!(l4[0], 0x80, "GRE with the checksum bit");
            assert_eq!(csum(l4), 0, "GRE checksum");
        }
        17 => {
            assert_eq!(u16::from_be_bytes([l4[2], l4[3]]), 6081, "Geneve's port");
            assert_ne!(l4[6..8], [0, 0], "a UDP checksum");
            let mut ph = src.to_vec();
            ph.extend_from_slice(dst);
            ph.extend_from_slice(&[0, 17]);
            ph.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            ph.extend_from_slice(l4);
            assert_eq!(csum(&ph), 0, "UDP checksum of the Geneve packet");
        }
        p => panic!("outer protocol {p}"),
    }
}
