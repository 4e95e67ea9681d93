//! The XDP director's packet parser under arbitrary frames, run in the
//! kernel through BPF_PROG_TEST_RUN (needs root and a build with clang; it
//! says why and does nothing otherwise — but under CI, or with
//! RVS_REQUIRE_PRIVILEGED=1, it fails: bpf_setup.rs).
//!
//! The verifier already proves the program reads no memory out of bounds;
//! this target checks what the verifier cannot: with DR real servers behind
//! the IPv4 TCP service, Geneve (with the UDP checksum) behind the UDP one,
//! GRE (with its checksum) behind the IPv6 one and DR behind a QUIC-LB
//! service (UDP 443: plaintext and single-pass configs, xdp_quic; QUIC
//! short- and long-header templates), every frame either
//! passes to the kernel UNCHANGED, is dropped, or goes back out (XDP_TX) to
//! a configured real server's MAC with nothing changed but the two MAC
//! addresses (DR) or inside outer headers whose checksums verify, the
//! frame after its L2 header unchanged (the tunnels). The program never
//! aborts.
//!
//! FULLNAT (the tail-called xdp_fnat) behind IPv4 and IPv6 UDP services,
//! with one flow of each made at setup, so that the templates include ICMP
//! errors about those flows from both sides (to the local address quoting
//! laddr:lport -> RS:rport; to the VIP quoting VIP:vport -> client:cport)
//! and their mutations: a frame FULLNAT rewrote may pass (the FIB of the
//! fuzzing host has no route for it) or be redirected; it keeps its length
//! and its L2 header, and every checksum that verified in the input
//! verifies in the output (IPv4 header and TCP/UDP; for an ICMP error, every
//! checksum rvs-wire's ICMP reader checks, quoted ones included).
//!
//! FULLNAT over TCP too, behind IPv4 and IPv6 services whose pools have two
//! local addresses and a narrow port range (the pool walk, and its
//! exhaustion once the fuzzer's SYNs have taken every pair): one flow of
//! each family is made at setup, its real server's SYN-ACK clamped (MSS
//! lowered by the TOA's length, which setup checks) and the TOA armed.
//! Templates: a client's SYN (a new flow: the pool walk), the setup flow's
//! client ACK with data (the TOA inserted) and its real server's SYN-ACK
//! (the MSS clamp, re-arming the TOA). A frame that grew is a TCP segment
//! that grew by exactly the TOA (8 bytes IPv4, 20 IPv6), which sits right
//! after the fixed TCP header and carries the client's port and address,
//! with the input's options and payload after it unchanged.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::DestConfig;
use rvs_core::sched::SchedParams;
use rvs_wire::checksum::{checksum, l4_checksum, l4_checksum_under};
use rvs_wire::frame::{Ip, Tcp, ethernet, tcp_flags};
use rvs_xdp::maps::{self, Config, Dest, Svc, SvcKey};
use rvs_xdp::quic_lb::{QuicCfg, QuicSidKey, QuicSvc};
use rvs_xdp::{LoadOptions, Loaded, Object, action, tables};

#[path = "bpf_setup.rs"]
mod bpf_setup;
#[path = "input_rng.rs"]
mod input_rng;
use input_rng::{input_rng, mutate};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x100);
const DIR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The source MAC of the templates.
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const RS_MACS: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 0x11], [2, 0, 0, 0, 0, 0x12]];
/// The QUIC-LB service's port and its real servers' server IDs.
const QUIC_PORT: u16 = 443;
const SIDS: [[u8; 3]; 2] = [[0x0a, 0, 1], [0x0a, 0, 2]];
const QUIC_KEY: [u8; 16] = [
    0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f,
];

/// The FULLNAT services' port (IPv4 and IPv6 UDP).
const FNAT_PORT: u16 = 5353;
/// The client port of the FULLNAT flows made at setup.
const FNAT_CPORT: u16 = 41000;
/// The TCP FULLNAT services' port (IPv4 and IPv6).
const FNAT_TCP_PORT: u16 = 8443;
/// The TCP FULLNAT pools' ports: two addresses times these, so that the
/// fuzzer's new flows walk the pool and exhaust it.
const FNAT_TCP_PORTS: (u16, u16) = (20000, 20063);
/// The sequence numbers of the TCP flows made at setup: the client's SYN
/// and the real server's SYN-ACK.
const CLIENT_ISN: u32 = 1000;
const SERVER_ISN: u32 = 7000;

/// One family's FULLNAT flow made at setup: the client, the local address
/// and port the director gave it, the real server.
#[derive(Clone, Copy)]
struct FnatFlow {
    client: IpAddr,
    laddr: IpAddr,
    lport: u16,
    rs: IpAddr,
}

struct Fuzz {
    l: Loaded,
    /// IPv4 and IPv6 FULLNAT flows.
    fnat: [FnatFlow; 2],
    /// IPv4 and IPv6 TCP FULLNAT flows (TOA armed at setup).
    tcp: [FnatFlow; 2],
}

static LB: OnceLock<Option<Mutex<Fuzz>>> = OnceLock::new();

fn setup() -> Option<Mutex<Fuzz>> {
    match bpf_setup::forced_refusal()
        .and_then(|()| configure())
        .and_then(|mut l| {
            let fnat = [fnat_flow(&mut l, false)?, fnat_flow(&mut l, true)?];
            let tcp = [tcp_flow(&mut l, false)?, tcp_flow(&mut l, true)?];
            Ok(Fuzz { l, fnat, tcp })
        }) {
        Ok(l) => Some(Mutex::new(l)),
        Err(e) => {
            bpf_setup::setup_failed("xdp_frames", &e);
            None
        }
    }
}

fn configure() -> Result<Loaded, String> {
    let mut l = Loaded::load(
        Object::Director,
        &LoadOptions {
            flow_table_size: 4096,
            // Eight services, a region of 1 << 18 slots each.
            slots: 1 << 21,
            ..LoadOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut cfg = Config::ipvs_defaults();
    cfg.flags |= maps::CFG_F_FNAT;
    l.set_config(&cfg).map_err(|e| e.to_string())?;
    let mut svc_index = 0u32;
    let (v4, v6) = (IpAddr::V4(VIP4), IpAddr::V6(VIP6));
    let (tcp, udp) = (maps::PROTO_TCP, maps::PROTO_UDP);
    use maps::fwd::{DR, FNAT, TUN_GENEVE, TUN_GRE};
    for (vip, proto, port, method) in [
        (v4, tcp, 80u16, DR),
        (v4, udp, 53, TUN_GENEVE),
        (v6, tcp, 80, TUN_GRE),
        (v4, udp, FNAT_PORT, FNAT),
        (v6, udp, FNAT_PORT, FNAT),
        (v4, udp, QUIC_PORT, DR),
        (v4, tcp, FNAT_TCP_PORT, FNAT),
        (v6, tcp, FNAT_TCP_PORT, FNAT),
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
        let key = SvcKey {
            proto,
            family: maps::family(vip),
            port: port.to_be(),
            vip: maps::addr16(vip),
        };
        if port == QUIC_PORT {
            // A QUIC-LB service lives in quic_services, not services.
            l.set_quic_service(&key, svc_index)
                .map_err(|e| e.to_string())?;
            let q = QuicSvc::new(&[
                (0, QuicCfg::new(3, 5, None)),
                (1, QuicCfg::new(3, 13, Some(&QUIC_KEY))),
            ]);
            l.set_quic_lb(svc_index, &q).map_err(|e| e.to_string())?;
            for (p, sid) in SIDS.iter().enumerate() {
                let k = QuicSidKey::new(svc_index, sid).ok_or("server ID")?;
                l.set_quic_sid(&k, index_of[p]).map_err(|e| e.to_string())?;
            }
        } else {
            l.set_service(&key, svc_index).map_err(|e| e.to_string())?;
        }
        if method == maps::fwd::FNAT {
            let v6 = vip.is_ipv6();
            let (addrs, (port_min, port_max)) = if proto == maps::PROTO_TCP {
                (tcp_laddrs(v6).to_vec(), FNAT_TCP_PORTS)
            } else {
                (vec![laddr(v6)], (1024, 65535))
            };
            let mut pool = maps::FnatPool {
                count: addrs.len() as u32,
                port_min,
                port_max,
                family: maps::family(vip),
                ..maps::FnatPool::default()
            };
            for (i, la) in addrs.iter().enumerate() {
                pool.addrs[i] = maps::addr16(*la);
                l.add_fnat_laddr(*la).map_err(|e| e.to_string())?;
            }
            l.set_fnat_pool(svc_index, &pool)
                .map_err(|e| e.to_string())?;
        }
        svc_index += 1;
    }
    Ok(l)
}

/// The FULLNAT services' local address.
fn laddr(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x50))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 77, 0, 50))
    }
}

/// The TCP FULLNAT services' two local addresses.
fn tcp_laddrs(v6: bool) -> [IpAddr; 2] {
    if v6 {
        [
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x60)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x61)),
        ]
    } else {
        [
            IpAddr::V4(Ipv4Addr::new(10, 77, 0, 60)),
            IpAddr::V4(Ipv4Addr::new(10, 77, 0, 61)),
        ]
    }
}

/// Make the family's FULLNAT flow (a datagram of the FULLNAT template) and
/// read the translation the director chose from its output.
fn fnat_flow(l: &mut Loaded, v6: bool) -> Result<FnatFlow, String> {
    let flow = translation(l, v6, &template(if v6 { 8 } else { 5 }, None))?;
    if flow.laddr != laddr(v6) {
        return Err(format!("the FULLNAT flow's source is {}", flow.laddr));
    }
    Ok(flow)
}

/// Make the family's TCP FULLNAT flow: the client's SYN, then its real
/// server's SYN-ACK, whose MSS must come out lowered by the TOA's length
/// (the clamp, which arms the TOA).
fn tcp_flow(l: &mut Loaded, v6: bool) -> Result<FnatFlow, String> {
    let flow = translation(l, v6, &tcp_template(v6, 0, None))?;
    if !tcp_laddrs(v6).contains(&flow.laddr) {
        return Err(format!("the TCP FULLNAT flow's source is {}", flow.laddr));
    }
    let syn_ack = tcp_template(v6, 2, Some(&flow));
    let r = l.run(&syn_ack, 1).map_err(|e| e.to_string())?;
    let l4 = if v6 { 54 } else { 34 };
    let want = 1460 - toa_len(v6);
    let mss = r.data.get(l4 + 20..l4 + 24);
    if r.action == action::DROP || mss != Some(&[2, 4, (want >> 8) as u8, want as u8][..]) {
        return Err(format!(
            "the TCP FULLNAT SYN-ACK was not clamped to MSS {want} (action {}, options {mss:?})",
            r.action
        ));
    }
    Ok(flow)
}

/// The TOA's length: kind, length, port and the client's address.
fn toa_len(v6: bool) -> u16 {
    if v6 { 20 } else { 8 }
}

/// Run `f`, a FULLNAT flow's first packet, and read the translation the
/// director chose from its output.
fn translation(l: &mut Loaded, v6: bool, f: &[u8]) -> Result<FnatFlow, String> {
    let r = l.run(f, 1).map_err(|e| e.to_string())?;
    let d = &r.data;
    let (src, dst, sport) = if v6 {
        (22..38, 38..54, 54)
    } else {
        (26..30, 30..34, 34)
    };
    if d.len() < sport + 2 || r.action == action::DROP {
        return Err(format!(
            "the FULLNAT flow was not made (action {})",
            r.action
        ));
    }
    let ip = |b: &[u8]| -> IpAddr {
        match <[u8; 16]>::try_from(b) {
            Ok(a) => IpAddr::V6(a.into()),
            Err(_) => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
        }
    };
    Ok(FnatFlow {
        client: ip(&f[src.clone()]),
        laddr: ip(&d[src]),
        lport: u16::from_be_bytes([d[sport], d[sport + 1]]),
        rs: ip(&d[dst]),
    })
}

/// The IP packet (no L2) of a TCP segment `src:sport -> dst:dport` with
/// sequence number `seq`, `ack` (the ACK flag when given), SYN when `syn`,
/// the options `opts` (a multiple of 4 bytes) and its checksum.
#[allow(clippy::too_many_arguments)]
fn tcp_packet(
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    opts: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let flags = if syn { tcp_flags::SYN } else { 0 }
        | if ack.is_some() { tcp_flags::ACK } else { 0 }
        | if data.is_empty() { 0 } else { tcp_flags::PSH };
    let tcp = Tcp {
        seq,
        ack: ack.unwrap_or(0),
        options: opts.to_vec(),
        ..Tcp::new(sport, dport, flags)
    };
    ip_fields(src, dst).tcp(&tcp, data)
}

/// A SYN's options: MSS 1460, SACK-permitted, NOPs, window scale 7.
const SYN_OPTS: [u8; 12] = [2, 4, 0x05, 0xb4, 4, 2, 1, 1, 1, 3, 3, 7];
/// Timestamps (with two NOPs), the options of the segments after the SYN.
const TS_OPTS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];

/// A TCP FULLNAT frame of the family: `t` 0, the client's SYN to the VIP
/// (a new flow; the setup flow's when `flow` is `None`, else another
/// client port); 1, the client's ACK with data of the setup flow (the TOA
/// is armed: it gets it); 2, the real server's SYN-ACK to the local address
/// of the setup flow (the MSS clamp).
fn tcp_template(v6: bool, t: u8, flow: Option<&FnatFlow>) -> Vec<u8> {
    let vip = if v6 {
        IpAddr::V6(VIP6)
    } else {
        IpAddr::V4(VIP4)
    };
    let client = if v6 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x20))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 77, 0, 20))
    };
    let ip = match (t, flow) {
        (1, Some(fl)) => tcp_packet(
            fl.client,
            FNAT_CPORT,
            vip,
            FNAT_TCP_PORT,
            CLIENT_ISN + 1,
            Some(SERVER_ISN + 1),
            false,
            &TS_OPTS,
            b"GET / HTTP/1.0\r\n\r\n",
        ),
        (2, Some(fl)) => tcp_packet(
            fl.rs,
            FNAT_TCP_PORT,
            fl.laddr,
            fl.lport,
            SERVER_ISN,
            Some(CLIENT_ISN + 1),
            true,
            &SYN_OPTS,
            b"",
        ),
        (_, fl) => tcp_packet(
            client,
            FNAT_CPORT + u16::from(fl.is_some()),
            vip,
            FNAT_TCP_PORT,
            CLIENT_ISN,
            None,
            true,
            &SYN_OPTS,
            b"",
        ),
    };
    l2(&ip)
}

/// The frame of the IP packet `ip` to the director.
fn l2(ip: &[u8]) -> Vec<u8> {
    ethernet(DIR_MAC, CLIENT_MAC, None, ip)
}

/// The templates' IP header fields from `src` to `dst` (identification 1).
fn ip_fields(src: IpAddr, dst: IpAddr) -> Ip {
    Ip {
        id: 1,
        ..Ip::new(src, dst)
    }
}

/// The IP packet (no L2) of a UDP datagram `src:sport -> dst:dport` with its
/// checksum.
fn udp_packet(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, data: &[u8]) -> Vec<u8> {
    ip_fields(src, dst).udp(sport, dport, data)
}

/// An ICMP(v6) port unreachable (no L2) from `src` to `dst` quoting `quoted`.
fn icmp_unreach(src: IpAddr, dst: IpAddr, quoted: &[u8]) -> Vec<u8> {
    let (kind, code) = if src.is_ipv6() { (1, 4) } else { (3, 3) };
    ip_fields(src, dst).icmp(kind, code, [0; 4], quoted)
}

/// A well-formed frame for template `t` (0, 1: IPv4 TCP SYN / ACK to the
/// VIP; 2: IPv4 UDP; 3, 4: IPv6 TCP SYN / ACK; 5, 8: IPv4 / IPv6 UDP to
/// the FULLNAT service from the setup flow's client; 6, 9: the real
/// server's port unreachable about that flow, to the local address; 7,
/// 10: a port unreachable from the client's side about its reply, to the
/// VIP), so mutations start from inside the paths worth exploring. The
/// ICMP templates need the setup's flows (`fnat`).
fn template(t: u8, fnat: Option<&[FnatFlow; 2]>) -> Vec<u8> {
    if (5..=10).contains(&t) {
        let v6 = t >= 8;
        let (vip, client, router) = if v6 {
            (
                IpAddr::V6(VIP6),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x10)),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 1)),
            )
        } else {
            (
                IpAddr::V4(VIP4),
                IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10)),
                IpAddr::V4(Ipv4Addr::new(10, 78, 0, 1)),
            )
        };
        let flow = fnat.map(|f| f[usize::from(v6)]);
        let ip = match (t - if v6 { 8 } else { 5 }, flow) {
            (1, Some(fl)) => icmp_unreach(
                fl.rs,
                fl.laddr,
                &udp_packet(fl.laddr, fl.lport, fl.rs, FNAT_PORT, b"query"),
            ),
            (2, Some(fl)) => icmp_unreach(
                router,
                vip,
                &udp_packet(vip, FNAT_PORT, fl.client, FNAT_CPORT, b"answer"),
            ),
            _ => udp_packet(client, FNAT_CPORT, vip, FNAT_PORT, b"query"),
        };
        return l2(&ip);
    }
    template_vip(t)
}

/// Templates 0 to 4 (see [`template`]).
fn template_vip(t: u8) -> Vec<u8> {
    let v6 = t % 5 >= 3;
    let ip = if v6 {
        ip_fields(
            Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x10).into(),
            VIP6.into(),
        )
    } else {
        ip_fields(Ipv4Addr::new(10, 77, 0, 10).into(), VIP4.into())
    };
    let packet = if t % 5 == 2 {
        ip.udp(40000, 53, b"rvs!")
    } else {
        // SYN for t = 0 and 3, ACK for t = 1 and 4 (an established-flow
        // packet once a SYN of the same flow has been seen).
        let flags = if t % 5 == 1 || t % 5 == 4 {
            tcp_flags::ACK
        } else {
            tcp_flags::SYN
        };
        ip.tcp(
            &Tcp {
                seq: 1,
                ..Tcp::new(40000, 80, flags)
            },
            b"",
        )
    };
    l2(&packet)
}

/// A QUIC datagram to the QUIC-LB service: a short header whose DCID is a
/// plaintext config-0 CID of the first real server (`long` false), or a
/// version-1 Initial with a client-chosen DCID.
fn quic_template(long: bool) -> Vec<u8> {
    let mut quic = Vec::new();
    if long {
        quic.extend_from_slice(&[0xc0, 0, 0, 0, 1, 8]);
        quic.extend_from_slice(&[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        quic.extend_from_slice(&[0, 0, 0x41, 0]);
        quic.resize(64, 0);
    } else {
        quic.push(0x40);
        // Config 0 (first octet 0b000xxxxx), server ID, 5-octet nonce.
        quic.push(0x08);
        quic.extend_from_slice(&SIDS[0]);
        quic.extend_from_slice(&[1, 2, 3, 4, 5]);
        quic.extend_from_slice(&[0x5a; 24]);
    }
    l2(&udp_packet(
        Ipv4Addr::new(10, 77, 0, 10).into(),
        40001,
        VIP4.into(),
        QUIC_PORT,
        &quic,
    ))
}

fuzz_target!(init: {
    // Before fuzzing: under CI a program that cannot load ends the run.
    LB.get_or_init(setup);
}, |data: &[u8]| {
    let Some(lb) = LB.get_or_init(setup) else {
        return;
    };
    // Code coverage cannot see inside the BPF program, so the fuzzer gets
    // little guidance from it: each input seeds a generator that makes a
    // frame — a template to the VIP (or random bytes) with random flips and
    // a random cut — and the input's own bytes are flipped in as well.
    let mut rng = input_rng(data);
    let Ok(mut lb) = lb.lock() else { return };
    let pick = rng() % 20;
    let mut frame = match pick {
        11 => {
            let n = (rng() % 160) as usize;
            (0..n).map(|_| rng() as u8).collect()
        }
        12 | 13 => quic_template(pick == 13),
        14..=19 => {
            let v6 = pick >= 17;
            tcp_template(v6, (pick - 14) as u8 % 3, Some(&lb.tcp[usize::from(v6)]))
        }
        _ => template(pick as u8, Some(&lb.fnat)),
    };
    if !frame.is_empty() {
        mutate(&mut frame, data, &mut rng, 6, 0);
    }
    if frame.is_empty() {
        return;
    }
    let r = match lb.l.run(&frame, 1) {
        Ok(r) => r,
        // The kernel refuses frames below an Ethernet header's length.
        Err(_) if frame.len() < 14 => return,
        Err(e) => panic!("test run failed on a {}-byte frame: {e}", frame.len()),
    };
    match r.action {
        action::PASS if r.data == frame => {}
        action::PASS | action::REDIRECT => translated(&frame, &r.data),
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

/// Which checksums of the IP packet `ip` verify: the IPv4 header's, then
/// the TCP/UDP checksum (IPv4 UDP without one counts as right) or, for an
/// ICMP error, all those rvs-wire's reader checks. `None`: not such a
/// packet (or not whole).
fn checksums_ok(ip: &[u8]) -> Option<bool> {
    let v = ip.first()? >> 4;
    let (hlen, total, proto) = match v {
        4 => {
            let hl = usize::from(ip.get(0)? & 0xf) * 4;
            (
                hl,
                usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])),
                *ip.get(9)?,
            )
        }
        6 => (
            40,
            40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?])),
            *ip.get(6)?,
        ),
        _ => return None,
    };
    if hlen < 20 || total < hlen || ip.len() < total {
        return None;
    }
    let hdr_ok = v == 6 || checksum(&ip[..hlen]) == 0;
    let l4 = &ip[hlen..total];
    match proto {
        1 | 58 => Some(
            rvs_wire::icmp::parse(&ip[..total])
                .ok()?
                .checksums
                .all_valid()
                && hdr_ok,
        ),
        6 if l4.len() >= 20 => Some(hdr_ok && l4_checksum_under(&ip[..hlen], 6, l4) == Some(0)),
        17 if l4.len() >= 8 => Some(
            hdr_ok
                && ((v == 4 && l4[6..8] == [0, 0])
                    || l4_checksum_under(&ip[..hlen], 17, l4) == Some(0)),
        ),
        _ => None,
    }
}

/// A frame FULLNAT rewrote (passed: the fuzzing host's FIB had no route;
/// or redirected): the same length (or a TCP segment grown by the TOA,
/// see [`toa_inserted`]) and L2 header, and every checksum that verified
/// in the input verifies in the output.
fn translated(frame: &[u8], out: &[u8]) {
    let l2 = if matches!(frame[12..14], [0x81, 0x00] | [0x88, 0xa8]) {
        18
    } else {
        14
    };
    if out.len() != frame.len() {
        toa_inserted(&frame[l2..], &out[l2..]);
    }
    assert_eq!(out[12..l2], frame[12..l2], "the L2 header changed");
    if checksums_ok(&frame[l2..]) == Some(true) {
        assert_eq!(
            checksums_ok(&out[l2..]),
            Some(true),
            "a checksum the input had right is wrong in the output"
        );
    }
}

/// The IP packets `ip` (in) and `out` of a frame that changed its length:
/// a TCP segment grown by exactly the TOA, which sits right after the
/// fixed TCP header with the input's source port and address, the input's
/// options and payload after it.
fn toa_inserted(ip: &[u8], out: &[u8]) {
    let v6 = ip[0] >> 4 == 6;
    let grown = out.len().checked_sub(ip.len());
    assert_eq!(
        grown,
        Some(usize::from(toa_len(v6))),
        "a translated frame changed its length by other than a TOA"
    );
    let grown = usize::from(toa_len(v6));
    let (hl_in, hl_out, proto, src) = if v6 {
        (40, 40, ip[6], &ip[8..24])
    } else {
        (
            usize::from(ip[0] & 0xf) * 4,
            usize::from(out[0] & 0xf) * 4,
            ip[9],
            &ip[12..16],
        )
    };
    assert_eq!(proto, 6, "a translated non-TCP packet grew");
    let total = |p: &[u8]| {
        if v6 {
            40 + usize::from(u16::from_be_bytes([p[4], p[5]]))
        } else {
            usize::from(u16::from_be_bytes([p[2], p[3]]))
        }
    };
    assert_eq!(
        total(out),
        total(ip) + grown,
        "the IP length grew by the TOA"
    );
    let (t_in, t_out) = (&ip[hl_in..total(ip)], &out[hl_out..total(out)]);
    let mut toa = vec![254, grown as u8, t_in[0], t_in[1]];
    toa.extend_from_slice(src);
    assert_eq!(
        t_out[20..20 + grown],
        toa[..],
        "the TOA after the fixed header"
    );
    assert_eq!(
        t_out[12] >> 4,
        (t_in[12] >> 4) + grown as u8 / 4,
        "the data offset grew by the TOA"
    );
    assert_eq!(
        t_out[20 + grown..],
        t_in[20..],
        "the options and payload after the TOA"
    );
}

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
            assert_eq!(checksum(&ip[..20]), 0, "outer IPv4 header checksum");
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
            assert_eq!(checksum(l4), 0, "GRE checksum");
        }
        17 => {
            assert_eq!(u16::from_be_bytes([l4[2], l4[3]]), 6081, "Geneve's port");
            assert_ne!(l4[6..8], [0, 0], "a UDP checksum");
            assert_eq!(
                l4_checksum(src, dst, 17, l4),
                0,
                "UDP checksum of the Geneve packet"
            );
        }
        p => panic!("outer protocol {p}"),
    }
}
