//! Shared fixture helpers: load the director, install services from
//! rvs-core's tables, build frames with etherparse, run them through
//! BPF_PROG_TEST_RUN.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::PacketBuilder;
use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::{DestConfig, Protocol, SchedFlags};
use rvs_core::sched::{SchedInput, SchedParams, new_scheduler};
use rvs_core::time::Instant;
use rvs_xdp::maps::{self, Config, Dest, FlowKey, Svc, SvcKey};
use rvs_xdp::{LoadOptions, Loaded, Object, RunResult, tables};

/// One `#[test]` a case of a test function written once:
/// `cases! { f; name(args…), … }` is `#[test] fn name() { f(args…) }` for
/// each. (Not every test file that shares this module has cases.)
#[allow(unused_macros)]
macro_rules! cases {
    ($f:ident; $($name:ident($($arg:expr),* $(,)?)),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $f($($arg),*);
            }
        )+
    };
}
#[allow(unused_imports)]
pub(crate) use cases;

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const DIR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
pub const TUN4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
pub const TUN6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);
pub const SLOT_REGION: u32 = 16384;
/// The fixtures' ingress interface: the loopback device (ifindex 1 in every
/// network namespace), where the director owns [`DIR_MAC`].
pub const INGRESS: u32 = 1;

/// The MAC of real server `i`.
pub fn rs_mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 1, i]
}

/// Real server `i` (IPv4 10.77.0.(11+i), IPv6 fd77::(11+i)).
pub fn rs_addr(v6: bool, i: u8) -> IpAddr {
    if v6 {
        Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x11 + u16::from(i)).into()
    } else {
        Ipv4Addr::new(10, 77, 0, 11 + i).into()
    }
}

/// Client `i` (IPv4 10.78.x.y, IPv6 fd78::x:y).
pub fn client(v6: bool, i: u32) -> IpAddr {
    if v6 {
        Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, (i >> 16) as u16, i as u16).into()
    } else {
        Ipv4Addr::from(0x0a4e_0000 | (i & 0xffff)).into()
    }
}

pub fn vip(v6: bool) -> IpAddr {
    if v6 { VIP6.into() } else { VIP4.into() }
}

/// True when running as root with the compiled objects; otherwise skip
/// with the reason ([`rvs_testbed::skip_or_fail`]: under CI a failure).
pub fn root_or_skip(test: &str) -> bool {
    if !rvs_testbed::require_root(test, "loading BPF programs needs root") {
        return false;
    }
    if let Err(e) = Object::Director.bytes() {
        rvs_testbed::skip_or_fail(test, e);
        return false;
    }
    true
}

/// `test` cannot run here because of `reason`: skip, or fail under CI
/// ([`rvs_testbed::skip_or_fail`]).
pub fn skip(test: &str, reason: impl std::fmt::Display) {
    rvs_testbed::skip_or_fail(test, reason);
}

/// One real server of a fixture service.
#[derive(Clone, Debug)]
pub struct Rs {
    pub addr: IpAddr,
    pub port: u16,
    pub weight: u32,
    /// The weight before a quiesce (mh keeps its slots).
    pub last_weight: u32,
    pub method: u8,
    pub mac: [u8; 6],
    pub gue_port: u16,
    pub flags: u32,
}

impl Rs {
    pub fn new(addr: IpAddr, method: u8, mac: [u8; 6]) -> Self {
        Rs {
            addr,
            port: 0,
            weight: 1,
            last_weight: 1,
            method,
            mac,
            gue_port: 0,
            flags: 0,
        }
    }

    pub fn weight(mut self, w: u32) -> Self {
        self.weight = w;
        self.last_weight = w;
        self
    }
}

/// A loaded director with a default config.
pub struct Lb {
    pub l: Loaded,
    /// Per service index: the core's view (for vectors).
    pub core: Vec<(u32, rvs_core::sched::Scheduler, SchedParams, Vec<CoreDest>)>,
}

impl Lb {
    pub fn new(test: &str) -> Option<Lb> {
        Lb::with_object(test, Object::Director)
    }

    /// [`Lb::new`] with another build of the director (a benchmark one).
    pub fn with_object(test: &str, object: Object) -> Option<Lb> {
        if !root_or_skip(test) {
            return None;
        }
        let mut l = Loaded::load(
            object,
            &LoadOptions {
                flow_table_size: 4096,
                slots: 8 * SLOT_REGION,
                ..LoadOptions::default()
            },
        )
        .expect("director loads");
        l.set_config(&Lb::config()).expect("config");
        // As attach does for the interface it attaches to: the director
        // owns its MAC on the ingress interface, and only frames sent to it
        // are its own. A test run's ingress (given in the context, as the
        // wire gives it) is the loopback device, whose MAC is zero: the
        // fixtures' director MAC is owned on it.
        l.add_own_mac(INGRESS, DIR_MAC).expect("own MAC");
        Some(Lb {
            l,
            core: Vec::new(),
        })
    }

    /// The fixtures' configuration: IPVS's defaults, the tunnel sources,
    /// NAT on.
    pub fn config() -> Config {
        let mut cfg = Config::ipvs_defaults();
        cfg.tun_src4 = TUN4.octets();
        cfg.tun_src6 = TUN6.octets();
        cfg.flags = maps::CFG_F_NAT;
        cfg
    }

    /// [`Lb::config`] with the SYN-flood guard's `max_new_flows` (which
    /// also arms the embryonic tables above it).
    pub fn set_max_new_flows(&mut self, n: u32) {
        let mut cfg = Lb::config();
        cfg.max_new_flows = n;
        self.l.set_config(&cfg).expect("config");
    }

    /// Dest index of position `p` of service `svc`.
    pub fn dest_index(svc: u32, p: usize) -> u32 {
        svc * 1000 + p as u32
    }

    /// Install service `svc` on `key` with scheduler `sched`, `flags` and
    /// real servers `rs` (IPVS list order), tables from rvs-core.
    pub fn service(&mut self, svc: u32, key: SvcKey, sched: &str, flags: u32, rs: &[Rs]) {
        let sched: rvs_core::sched::Scheduler = sched.parse().expect("known scheduler");
        let core: Vec<CoreDest> = rs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut d = CoreDest::new(
                    DestId(i as u32),
                    DestConfig::new(r.addr, r.port).weight(r.last_weight),
                );
                d.config.weight = r.weight;
                d.last_weight = r.last_weight;
                d.overloaded = r.flags & maps::dest_flags::OVERLOADED != 0;
                d.available = r.flags & maps::dest_flags::UNAVAILABLE == 0;
                d
            })
            .collect();
        let params = SchedParams {
            flags: SchedFlags(flags & (maps::svc_flags::SCHED1 | maps::svc_flags::SCHED2)),
            ..SchedParams::default()
        };
        let index_of: Vec<u32> = (0..rs.len()).map(|p| Lb::dest_index(svc, p)).collect();
        let table = tables::scheduling_table(sched, &params, &core, &index_of).expect("table");
        for (p, r) in rs.iter().enumerate() {
            let d = Dest {
                addr: maps::addr16(r.addr),
                port: r.port.to_be(),
                family: maps::family(r.addr),
                method: r.method,
                flags: r.flags,
                weight: r.weight,
                ifindex: 0,
                mac: r.mac,
                smac: DIR_MAC,
                gue_port: r.gue_port.to_be(),
                pad0: 0,
            };
            self.l.set_dest(index_of[p], &d).expect("dest");
        }
        let base = svc * SLOT_REGION;
        self.l.set_slots(base, &table).expect("table slots");
        self.l
            .set_slots(base + SLOT_REGION / 2, &index_of)
            .expect("list slots");
        self.l
            .set_svc(
                svc,
                &Svc {
                    sched: maps::sched::id(sched),
                    family: key.family,
                    flags,
                    table_off: base,
                    table_len: table.len() as u32,
                    dests_off: base + SLOT_REGION / 2,
                    dests_len: rs.len() as u32,
                    ..Svc::default()
                },
            )
            .expect("svc");
        self.l.set_cursor(svc, 0).expect("cursor");
        self.l.set_service(&key, svc).expect("service");
        self.core.retain(|c| c.0 != svc);
        self.core.push((svc, sched.to_owned(), params, core));
    }

    /// One run of `frame` as if it arrived on [`INGRESS`].
    pub fn run(&mut self, frame: &[u8]) -> RunResult {
        self.l.run_on(frame, 1, INGRESS).expect("test run")
    }

    /// The dest index the flow of this client tuple is bound to.
    pub fn flow_dest(
        &mut self,
        proto: u8,
        c: IpAddr,
        cport: u16,
        v: IpAddr,
        vport: u16,
    ) -> Option<u32> {
        self.l
            .flow(&FlowKey::new(proto, c, cport, v, vport))
            .expect("flow lookup")
            .map(|f| f.dest)
    }

    /// The core's choice for service `svc` as a dest index (a fresh
    /// stateless scheduler for hashing ones; `state` keeps rr/wrr state).
    pub fn core_choice(
        sched: &mut dyn rvs_core::sched::Algorithm,
        dests: &[CoreDest],
        svc: u32,
        input: &SchedInput,
    ) -> Option<u32> {
        sched
            .schedule(dests, input, Instant::ZERO)
            .map(|p| Lb::dest_index(svc, p))
    }

    /// A scheduler of the core for service `svc`, updated with its list.
    pub fn core_scheduler(&self, svc: u32) -> (Box<dyn rvs_core::sched::Algorithm>, Vec<CoreDest>) {
        let (_, name, params, dests) = self.core.iter().find(|c| c.0 == svc).expect("service");
        let mut s = new_scheduler(*name, params).expect("core scheduler");
        s.update(dests, rvs_core::sched::ListChange::Reset);
        (s, dests.clone())
    }
}

pub fn sched_input(c: IpAddr, cport: u16, v: IpAddr, vport: u16) -> SchedInput {
    SchedInput {
        protocol: Protocol::Tcp,
        saddr: c,
        sport: cport,
        daddr: v,
        dport: vport,
    }
}

/// TCP flags for [`tcp_frame`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Flags {
    Syn,
    Ack,
    Fin,
    Rst,
    SynRst,
}

/// Ethernet (client → director) + IP + TCP with `payload`.
pub fn tcp_frame(
    c: IpAddr,
    cport: u16,
    v: IpAddr,
    vport: u16,
    flags: Flags,
    payload: &[u8],
) -> Vec<u8> {
    tcp_frame_macs(CLIENT_MAC, DIR_MAC, c, cport, v, vport, flags, payload)
}

#[allow(clippy::too_many_arguments)]
pub fn tcp_frame_macs(
    smac: [u8; 6],
    dmac: [u8; 6],
    c: IpAddr,
    cport: u16,
    v: IpAddr,
    vport: u16,
    flags: Flags,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(smac, dmac);
    let b = match (c, v) {
        (IpAddr::V4(c), IpAddr::V4(v)) => b.ipv4(c.octets(), v.octets(), 64),
        (IpAddr::V6(c), IpAddr::V6(v)) => b.ipv6(c.octets(), v.octets(), 64),
        _ => panic!("mixed families"),
    };
    let t = b.tcp(cport, vport, 1000, 65535);
    let t = match flags {
        Flags::Syn => t.syn(),
        Flags::Ack => t.ack(1),
        Flags::Fin => t.fin().ack(1),
        Flags::Rst => t.rst(),
        Flags::SynRst => t.syn().rst(),
    };
    let mut out = Vec::new();
    t.write(&mut out, payload).expect("frame");
    out
}

/// Ethernet + IP + UDP.
pub fn udp_frame(c: IpAddr, cport: u16, v: IpAddr, vport: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, DIR_MAC);
    let b = match (c, v) {
        (IpAddr::V4(c), IpAddr::V4(v)) => b.ipv4(c.octets(), v.octets(), 64),
        (IpAddr::V6(c), IpAddr::V6(v)) => b.ipv6(c.octets(), v.octets(), 64),
        _ => panic!("mixed families"),
    };
    let mut out = Vec::new();
    b.udp(cport, vport).write(&mut out, payload).expect("frame");
    out
}

/// The Internet checksum of `b` (rvs-wire's, independent of the program's
/// code).
pub use rvs_wire::checksum::checksum as inet_csum;

/// Recompute the IPv4 header checksum of a frame whose IP header starts at `l3`.
pub fn fix_ip4_csum(f: &mut [u8], l3: usize) {
    let hl = usize::from(f[l3] & 0xf) * 4;
    f[l3 + 10] = 0;
    f[l3 + 11] = 0;
    let c = inet_csum(&f[l3..l3 + hl]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// The MAC of the director's link (`rvsa`) in the NAT/FULLNAT bed ([`nat_bed`]).
pub const VETH_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
/// The MAC of the clients' gateway in that bed.
pub const GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
/// The real servers' port in the NAT and FULLNAT fixtures.
pub const RPORT: u16 = 8080;

/// The namespace NAT and FULLNAT run in (BPF_PROG_TEST_RUN looks routes up
/// in the caller's namespace, so no traffic leaves it): the director's link
/// `rvsa` (10.77.0.2/24 and fd77::2/64, the real servers' subnet, with
/// permanent neighbours for real servers 0 and 1 of [`rs_addr`]) and
/// routes to the clients (10.78.0.0/16, fd78::/16) via a gateway with a
/// permanent neighbour; forwarding on. Deleted on drop.
pub fn nat_bed(tag: &str) -> rvs_testbed::Netns {
    let ns = rvs_testbed::Netns::new(tag);
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let neigh = |addr: &str, m: [u8; 6]| {
        format!("neigh add {addr} lladdr {} dev rvsa nud permanent", mac(m))
    };
    let mut cmds = vec![
        format!(
            "link add rvsa address {} type veth peer name rvsb",
            mac(VETH_MAC)
        ),
        "link set rvsa up".to_owned(),
        "link set rvsb up".to_owned(),
        "addr add 10.77.0.2/24 dev rvsa".to_owned(),
        "addr add fd77::2/64 dev rvsa nodad".to_owned(),
        neigh("10.77.0.254", GW_MAC),
        neigh("fd77::fe", GW_MAC),
        "route add 10.78.0.0/16 via 10.77.0.254".to_owned(),
        "route add fd78::/16 via fd77::fe".to_owned(),
    ];
    for i in 0..2 {
        for v6 in [false, true] {
            cmds.push(neigh(&rs_addr(v6, i).to_string(), rs_mac(i)));
        }
    }
    for cmd in cmds {
        let mut args = vec!["ip", "-n", ns.name()];
        args.extend(cmd.split_whitespace());
        rvs_testbed::sh(&args);
    }
    ns.sysctl("ipv4/ip_forward", "1");
    ns.sysctl("ipv6/conf/all/forwarding", "1");
    ns
}

/// Runs `f` inside a fresh [`nat_bed`], unless `test` is skipped for want
/// of root.
pub fn in_nat_bed(test: &str, f: impl FnOnce() + Send + 'static) {
    if root_or_skip(test) {
        nat_bed(&format!("rvsxdp-{test}")).run(f);
    }
}

/// Set the TTL / hop limit of a frame (fixing the IPv4 checksum).
pub fn with_ttl(mut f: Vec<u8>, ttl: u8) -> Vec<u8> {
    if f[12..14] == [0x08, 0x00] {
        f[22] = ttl;
        fix_ip4_csum(&mut f, 14);
    } else {
        f[21] = ttl;
    }
    f
}

/// `frame` with its Ethernet addresses replaced.
pub fn with_macs(frame: &[u8], dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f
}

/// The outer IPv4 header a tunnel puts in front of `inner` (an IPv4
/// packet): tos and DF copied, TTL 64, id 0.
pub fn outer4(inner: &[u8], proto: u8, extra: usize, dst: Ipv4Addr) -> Vec<u8> {
    let total = (inner.len() + 20 + extra) as u16;
    let mut h = vec![0x45, inner[1]];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, inner[6] & 0x40, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&TUN4.octets());
    h.extend_from_slice(&dst.octets());
    let c = inet_csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// The outer IPv6 header a tunnel puts in front of `inner` (an IPv6 packet).
pub fn outer6(inner: &[u8], next: u8, extra: usize, dst: Ipv6Addr) -> Vec<u8> {
    let mut h = inner[0..4].to_vec();
    h.extend_from_slice(&((inner.len() + extra) as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&TUN6.octets());
    h.extend_from_slice(&dst.octets());
    h
}

/// The flow hash behind the GUE source port and the varied tunnel source
/// (xdp_lb.c: `hash_32(fold(caddr) ^ (cport << 16 | vport) ^ proto, 32)`).
pub fn flow_hash(c: IpAddr, cport: u16, vport: u16, proto: u8) -> u32 {
    let fold = match c {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(a) => {
            let x = u128::from(a);
            (x as u32) ^ ((x >> 32) as u32) ^ ((x >> 64) as u32) ^ ((x >> 96) as u32)
        }
    };
    let h = fold ^ ((u32::from(cport) << 16) | u32::from(vport));
    (h ^ u32::from(proto)).wrapping_mul(0x61C8_8647)
}

/// The GUE source port the program derives from the client tuple (the
/// formula documented in xdp_lb.c's `flow_sport`).
pub fn gue_sport(c: IpAddr, cport: u16, vport: u16, proto: u8) -> u16 {
    0x8000 | (flow_hash(c, cport, vport, proto) >> 17) as u16
}

/// Run `f` on a thread of its own inside the network namespace at `path`
/// (`setns` applies per thread), returning its result or its panic.
pub fn in_netns<T: Send + 'static>(path: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    rvs_testbed::in_netns_path(path, f)
}

/// How long a flow-cache entry serves packets without a look at `flows4`
/// (`FLOW_CACHE_JIFFIES` at the kernel's HZ, plus a jiffy for the tick the
/// entry was stamped in).
pub fn flow_cache_window() -> std::time::Duration {
    let hz = u64::from(rvs_xdp::kernel_hz().expect("kernel HZ"));
    std::time::Duration::from_millis((maps::FLOW_CACHE_JIFFIES + 1) * 1000 / hz)
}

/// Pin the calling thread to `cpu` (BPF_PROG_TEST_RUN runs the program on
/// the caller's CPU, so per-CPU state follows the pin); false when the
/// machine has no such CPU.
pub fn pin_to_cpu(cpu: usize) -> bool {
    rvs_sys::sched::pin_to_cpu(cpu).is_ok()
}
pub mod quic;
