//! The layouts `bpf/sock_lb.c` shares with this side (`bpf/sock.h` is their
//! one definition; crates/xdp/tests/layout.rs checks every mirror here and
//! every `RVS_SOCK_*` constant against the object's BTF and the header), and the pure part of
//! publishing a service: which real servers may be chosen and the
//! scheduling table, as `slots` values.
//!
//! Addresses and ports are kept in network byte order, as the kernel hands
//! them to the programs (`bpf_sock_addr.user_ip4` / `user_port`).

use std::net::IpAddr;

use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::{DestConfig, Protocol, SchedFlags, ServiceConfig, SourceRange};
use rvs_core::sched::{ListChange, SchedParams, Scheduler, new_scheduler, wrr_sequence};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Map names in `sock_lb.o`.
pub mod name {
    /// (VIP, port, protocol) → [`super::Svc`].
    pub const SERVICES: &str = "sock_services";
    /// Real-server index → [`super::Dest`].
    pub const DESTS: &str = "sock_dests";
    /// The services' lists and tables (real-server indexes).
    pub const SLOTS: &str = "sock_slots";
    /// Real-server index → [`super::DestStats`].
    pub const STATS: &str = "sock_stats";
    /// Service id → the rr/wrr position (one atomic counter).
    pub const CURSOR: &str = "sock_cursor";
    /// Socket cookie → [`super::SockRec`].
    pub const SOCKS: &str = "sock_socks";
    /// Per-CPU event counters, indexed by [`super::counter`].
    pub const COUNTERS: &str = "sock_counters";
    /// [`super::SrcKey`] → 1: the client source ranges of the services
    /// flagged [`super::SVC_F_SRC_RANGES`] (LPM trie).
    pub const SRC_RANGES: &str = "sock_src_ranges";
}

/// Indexes of `sock_counters`, as in `bpf/sock.h` (`RVS_SOCK_CNT_*`).
pub mod counter {
    /// TCP sockets given a real server at connect().
    pub const TCP: u32 = 0;
    /// UDP sockets given a real server (connect or first sendmsg to a
    /// VIP, or a new one after theirs was deleted): UDP sessions.
    pub const UDP: u32 = 1;
    /// UDP sends to a VIP that kept the real server the socket had.
    pub const UDP_KEPT: u32 = 2;
    /// connect()/sendmsg() to a VIP refused with EPERM: no real server
    /// to give (none schedulable).
    pub const NO_DEST: u32 = 3;
    /// connect()/sendmsg() to a VIP refused with EPERM: the client's
    /// source is outside the service's source ranges.
    pub const REFUSED_SOURCE: u32 = 4;
    /// Number of counters.
    pub const COUNT: u32 = 5;
}

/// The programs' event counters, summed over the CPUs (see [`counter`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// [`counter::TCP`].
    pub tcp: u64,
    /// [`counter::UDP`].
    pub udp: u64,
    /// [`counter::UDP_KEPT`].
    pub udp_kept: u64,
    /// [`counter::NO_DEST`].
    pub no_dest: u64,
    /// [`counter::REFUSED_SOURCE`].
    pub refused_source: u64,
}

impl EventCounts {
    /// Set counter `index` (see [`counter`]); other indexes are ignored.
    pub fn set(&mut self, index: u32, v: u64) {
        match index {
            counter::TCP => self.tcp = v,
            counter::UDP => self.udp = v,
            counter::UDP_KEPT => self.udp_kept = v,
            counter::NO_DEST => self.no_dest = v,
            counter::REFUSED_SOURCE => self.refused_source = v,
            _ => {}
        }
    }
}

/// The sum of a per-CPU `u64` value as a lookup returns it (one 8-byte
/// value per possible CPU).
pub fn sum_per_cpu(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .fold(0u64, u64::wrapping_add)
}

/// Capacities, as in `bpf/sock.h`.
pub mod cap {
    /// Open sockets the programs remember (`sock_socks`, LRU).
    pub const SOCKS: u32 = 262_144;
    /// Persistence templates (`sock_persist`, LRU).
    pub const PERSIST: u32 = 65_536;
    /// Services: Cilium's default service map size, enough for a cluster
    /// of Kubernetes scale. Fixed, not sized at load as the director's: no
    /// map of this plane is per-CPU, so `sock_services` (a preallocated
    /// hash, 104 bytes an element) and `sock_cursor` take about 7 MiB
    /// whatever the machine.
    pub const SERVICES: u32 = 65_536;
    /// Real servers (all services).
    pub const DESTS: u32 = 65536;
    /// `slots` elements.
    pub const SLOTS: u32 = 1 << 20;
    /// The longest real-server list the least-connection walk reads.
    pub const LIST: usize = 1024;
    /// Client source ranges, all services together (`sock_src_ranges`;
    /// the director's `RVS_SRC_RANGES_MAX`).
    pub const SRC_RANGES: u32 = 16_384;
}

/// `slots` value for an empty table slot.
pub const EMPTY: u32 = u32::MAX;

/// Schedulers as the program numbers them: the director's ids (`bpf/rvs.h`
/// `RVS_SCHED_*`, 1 + the index in rvs-core's scheduler names), since the
/// programs run the director's schedulers (`bpf/lib/sched_pick.h`);
/// crates/xdp/tests/layout.rs checks them against rvs-xdp's.
pub mod sched {
    /// rr.
    pub const RR: u32 = 1;
    /// wrr.
    pub const WRR: u32 = 2;
    /// lc.
    pub const LC: u32 = 3;
    /// wlc.
    pub const WLC: u32 = 4;
    /// dh.
    pub const DH: u32 = 7;
    /// sh.
    pub const SH: u32 = 8;
    /// sed.
    pub const SED: u32 = 9;
    /// nq.
    pub const NQ: u32 = 10;
    /// mh.
    pub const MH: u32 = 13;
}

/// Service flag: sh-fallback / mh-fallback.
pub const SVC_F_FALLBACK: u32 = 0x1;
/// Service flag: sh-port / mh-port.
pub const SVC_F_PORT: u32 = 0x2;
/// Service flag: the service has client source ranges (the programs look
/// a bound source up in `sock_src_ranges`).
pub const SVC_F_SRC_RANGES: u32 = 0x4;
/// Service flag (with [`SVC_F_SRC_RANGES`]): an unbound socket may connect
/// (the source the kernel picks toward the VIP is in a range).
pub const SVC_F_NODE_OK: u32 = 0x8;
/// Real-server flag: in its service (cleared when deleted).
pub const DEST_F_PRESENT: u8 = 0x1;

/// `RVS_AF_INET`.
pub const AF_INET: u8 = 2;
/// `RVS_AF_INET6`.
pub const AF_INET6: u8 = 10;

/// `struct rvs_sock_svc_key`.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SvcKey {
    /// Address, network order (IPv4 in the first word).
    pub addr: [u32; 4],
    /// Port, network order.
    pub port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Address family (2 or 10).
    pub family: u8,
}

/// An address as the program stores it, and its family.
pub fn addr_words(ip: IpAddr) -> ([u32; 4], u8) {
    match ip {
        IpAddr::V4(a) => ([u32::from_ne_bytes(a.octets()), 0, 0, 0], AF_INET),
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            ([w(0), w(4), w(8), w(12)], AF_INET6)
        }
    }
}

/// The address back from [`addr_words`].
pub fn words_addr(words: [u32; 4], family: u8) -> Option<IpAddr> {
    match family {
        AF_INET => Some(IpAddr::from(words[0].to_ne_bytes())),
        AF_INET6 => {
            let mut o = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                o[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            Some(IpAddr::from(o))
        }
        _ => None,
    }
}

/// A port as the program stores it (network order in memory).
pub fn port_net(port: u16) -> u16 {
    u16::from_ne_bytes(port.to_be_bytes())
}

/// The port back from [`port_net`].
pub fn port_host(port: u16) -> u16 {
    u16::from_be_bytes(port.to_ne_bytes())
}

impl SvcKey {
    /// The key of service `addr:port` over `protocol`.
    pub fn new(protocol: Protocol, addr: IpAddr, port: u16) -> Self {
        let (addr, family) = addr_words(addr);
        SvcKey {
            addr,
            port: port_net(port),
            proto: protocol.number(),
            family,
        }
    }
}

/// `struct rvs_sock_svc`.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Svc {
    /// Index into `sock_cursor`, part of the persistence key.
    pub id: u32,
    /// One of [`sched`].
    pub sched: u32,
    /// [`SVC_F_FALLBACK`], [`SVC_F_PORT`].
    pub flags: u32,
    /// The schedulable real servers in `slots`.
    pub list_off: u32,
    /// Their number.
    pub list_len: u32,
    /// The sh/dh/mh table or wrr cycle in `slots`.
    pub table_off: u32,
    /// Its length.
    pub table_len: u32,
    /// Persistence timeout, seconds (0: none).
    pub persist_secs: u32,
}

/// `struct rvs_sock_dest`.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Dest {
    /// Address, network order.
    pub addr: [u32; 4],
    /// Port, network order.
    pub port: u16,
    /// Address family.
    pub family: u8,
    /// [`DEST_F_PRESENT`].
    pub flags: u8,
    /// Weight (0: drained, no new sockets).
    pub weight: u32,
}

impl Dest {
    /// The element of real server `c`.
    pub fn of(c: &DestConfig, present: bool) -> Self {
        let (addr, family) = addr_words(c.addr);
        Dest {
            addr,
            port: port_net(c.port),
            family,
            flags: if present { DEST_F_PRESENT } else { 0 },
            weight: c.weight,
        }
    }
}

/// `struct rvs_sock_dest_stats`.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DestStats {
    /// Open sockets given this real server.
    pub active: u64,
    /// Sockets ever given it.
    pub total: u64,
}

/// `struct rvs_sock_rec`: what one socket was given.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SockRec {
    /// The service it asked for.
    pub vip: SvcKey,
    /// The real server's index.
    pub dest: u32,
    /// The socket's own address, network order, once known.
    pub client: [u32; 4],
    /// Its port, network order (0 while not known: TCP before its SYN,
    /// UDP before its first receive).
    pub client_port: u16,
    /// Padding.
    pub pad: u16,
}

/// `struct rvs_sock_persist_key`: a client of a service in `sock_persist`
/// (only the programs write that map; mirrored so its layout is checked).
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PersistKey {
    /// The service's id ([`Svc::id`]).
    pub svc: u32,
    /// The client's bound source address, network order (zero: unbound).
    pub client: [u32; 4],
}

/// `struct rvs_sock_persist`: the real server a client keeps.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Persist {
    /// The real server's index.
    pub dest: u32,
    /// Padding.
    pub pad: u32,
    /// When the template ends (`bpf_ktime_get_ns`).
    pub expires_ns: u64,
}

/// `struct rvs_src_key` (`bpf/rvs.h`, the director's key, which the sock
/// programs use for `sock_src_ranges`): one client source range of a
/// service. The prefix covers `svc` (always whole), then `addr`.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SrcKey {
    /// 32 (the service id) + the range's prefix length.
    pub prefixlen: u32,
    /// The service's id ([`Svc::id`]).
    pub svc: u32,
    /// The range's address, network order (IPv4 in the first 4 bytes).
    pub addr: [u8; 16],
}

impl SrcKey {
    /// The key of `range` of the service of id `svc`.
    pub fn of(svc: u32, range: &SourceRange) -> SrcKey {
        let mut addr = [0u8; 16];
        match range.addr() {
            IpAddr::V4(a) => addr[..4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => addr = a.octets(),
        }
        SrcKey {
            prefixlen: 32 + u32::from(range.prefix()),
            svc,
            addr,
        }
    }
}

/// Whether an unbound local socket may reach a service with `ranges`
/// ([`SVC_F_NODE_OK`]): the kernel gives it `source`, the source address of
/// its route toward the VIP (`None`: no route, so none), and that source
/// must lie in a range, as kube-proxy's firewall chain judges a node-local
/// client by the source its packet leaves with. A service without ranges
/// admits everyone.
pub fn node_allowed(ranges: &[SourceRange], source: Option<IpAddr>) -> bool {
    if ranges.is_empty() {
        return true;
    }
    source.is_some_and(|s| SourceRange::admits(ranges, s))
}

/// Why a service cannot be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The scheduler decides per packet or on state the socket level does
    /// not have.
    #[error(
        "scheduler `{0}` is not run by the sock data plane (it runs rr, wrr, lc, wlc, sed, nq, fo, sh, dh, mh)"
    )]
    Unsupported(Scheduler),
    /// The core refused the scheduler's parameters.
    #[error("{0}")]
    Sched(String),
}

/// The program's scheduler number for `s` (fo runs as rr over the one
/// highest-weight server), or why it cannot run it.
pub fn sched_id(s: Scheduler) -> Result<u32, LayoutError> {
    use Scheduler as S;
    Ok(match s {
        S::Rr | S::Fo => sched::RR,
        S::Wrr => sched::WRR,
        S::Lc => sched::LC,
        S::Wlc => sched::WLC,
        S::Sed => sched::SED,
        S::Nq => sched::NQ,
        S::Sh => sched::SH,
        S::Dh => sched::DH,
        S::Mh => sched::MH,
        other => return Err(LayoutError::Unsupported(other)),
    })
}

/// The program's flags for a service; `node_ok`: whether the source the
/// kernel picks toward the VIP is in its ranges (see [`node_allowed`]).
pub fn svc_flags(c: &ServiceConfig, node_ok: bool) -> u32 {
    let mut f = 0;
    if !c.source_ranges.is_empty() {
        f |= SVC_F_SRC_RANGES;
        if node_ok {
            f |= SVC_F_NODE_OK;
        }
    }
    if c.flags.contains(SchedFlags::FLAG1) {
        f |= SVC_F_FALLBACK;
    }
    if c.flags.contains(SchedFlags::FLAG2) {
        f |= SVC_F_PORT;
    }
    f
}

/// What a service's region of `slots` holds: the real servers a new socket
/// may be given (`list`, as `dests` indexes, IPVS list order) and the
/// scheduling table (`table`: sh/dh 256 buckets, the mh table, one wrr
/// cycle; empty for the others).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Schedulable real servers.
    pub list: Vec<u32>,
    /// Scheduling table.
    pub table: Vec<u32>,
}

/// The layout of a service whose real servers are `dests` (configuration,
/// `dests` index), in list order. Only real servers with a weight above 0
/// are in `list` (weight 0 drains: no new sockets); `fo` lists only the
/// first of the highest weight. The tables are rvs-core's schedulers' own.
pub fn layout(c: &ServiceConfig, dests: &[(DestConfig, u32)]) -> Result<Layout, LayoutError> {
    use Scheduler as S;
    sched_id(c.scheduler)?;
    let mut list: Vec<u32> = dests
        .iter()
        .filter(|(d, _)| d.weight > 0)
        .map(|&(_, i)| i)
        .collect();
    if c.scheduler == S::Fo {
        let best =
            dests
                .iter()
                .filter(|(d, _)| d.weight > 0)
                .fold(None::<&(DestConfig, u32)>, |b, x| match b {
                    Some(b) if b.0.weight >= x.0.weight => Some(b),
                    _ => Some(x),
                });
        list = best.map(|&(_, i)| vec![i]).unwrap_or_default();
    }
    list.truncate(cap::LIST);
    let core: Vec<CoreDest> = dests
        .iter()
        .enumerate()
        .map(|(p, (d, _))| CoreDest::new(DestId(p as u32), *d))
        .collect();
    let index_of = |p: u32| dests.get(p as usize).map_or(EMPTY, |&(_, i)| i);
    let table = match c.scheduler {
        S::Wrr => wrr_sequence(&core).into_iter().map(index_of).collect(),
        S::Sh | S::Dh | S::Mh => {
            let params = SchedParams {
                flags: c.flags,
                mh_table_size: c.mh_table_size,
                ..SchedParams::default()
            };
            let mut s = new_scheduler(c.scheduler, &params)
                .map_err(|e| LayoutError::Sched(e.to_string()))?;
            s.update(&core, ListChange::Reset);
            s.lookup_table()
                .ok_or(LayoutError::Unsupported(c.scheduler))?
                .into_iter()
                .map(|p| p.map_or(EMPTY, index_of))
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(Layout { list, table })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::AddrFamily;
    use std::net::Ipv4Addr;

    fn dests(weights: &[u32]) -> Vec<(DestConfig, u32)> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
                (DestConfig::new(ip, 80).weight(w), 100 + i as u32)
            })
            .collect()
    }

    fn cfg(s: Scheduler) -> ServiceConfig {
        ServiceConfig {
            scheduler: s,
            ..ServiceConfig::new(AddrFamily::Inet)
        }
    }

    #[test]
    fn drained_servers_leave_the_list_and_fo_keeps_the_heaviest() {
        let d = dests(&[1, 0, 3, 3]);
        assert_eq!(
            layout(&cfg(Scheduler::Rr), &d).unwrap().list,
            [100, 102, 103]
        );
        assert_eq!(layout(&cfg(Scheduler::Fo), &d).unwrap().list, [102]);
        assert!(
            layout(&cfg(Scheduler::Fo), &dests(&[0]))
                .unwrap()
                .list
                .is_empty()
        );
    }

    #[test]
    fn wrr_cycle_counts_follow_the_weights() {
        let t = layout(&cfg(Scheduler::Wrr), &dests(&[1, 2, 3]))
            .unwrap()
            .table;
        let n = |i| t.iter().filter(|&&x| x == i).count();
        assert_eq!((n(100), n(101), n(102)), (1, 2, 3));
    }

    #[test]
    fn hash_tables_have_the_kernel_sizes() {
        let d = dests(&[1, 1]);
        assert_eq!(layout(&cfg(Scheduler::Sh), &d).unwrap().table.len(), 256);
        assert_eq!(layout(&cfg(Scheduler::Dh), &d).unwrap().table.len(), 256);
        let mh = layout(&cfg(Scheduler::Mh), &d).unwrap().table;
        assert!(!mh.is_empty() && mh.iter().all(|&x| x == 100 || x == 101));
    }

    #[test]
    fn per_packet_schedulers_are_refused() {
        assert!(layout(&cfg(Scheduler::Lblc), &dests(&[1])).is_err());
        assert!(layout(&cfg(Scheduler::Ovf), &dests(&[1])).is_err());
    }

    #[test]
    fn addresses_and_ports_round_trip_in_network_order() {
        for ip in ["192.0.2.7", "2001:db8::1"] {
            let ip: IpAddr = ip.parse().unwrap();
            let (w, f) = addr_words(ip);
            assert_eq!(words_addr(w, f), Some(ip));
        }
        let k = SvcKey::new(Protocol::Tcp, "192.0.2.7".parse().unwrap(), 0x1234);
        assert_eq!(k.port.to_ne_bytes(), [0x12, 0x34]);
        assert_eq!(k.addr[0].to_ne_bytes(), [192, 0, 2, 7]);
        assert_eq!(port_host(k.port), 0x1234);
    }

    #[test]
    fn the_node_is_allowed_by_its_routes_source_only() {
        let r = |a: &str, p| SourceRange::new(a.parse().unwrap(), p).unwrap();
        let ip = |a: &str| Some(a.parse::<IpAddr>().unwrap());
        let ranges = [r("10.81.0.0", 29), r("2001:db8::", 64)];
        assert!(node_allowed(&ranges, ip("10.81.0.1")));
        assert!(node_allowed(&ranges, ip("2001:db8::7")));
        assert!(!node_allowed(&ranges, ip("10.81.0.9")));
        // No route toward the VIP: no source, refused.
        assert!(!node_allowed(&ranges, None));
        // No ranges: open.
        assert!(node_allowed(&[], None));
        // The flags: the node bit only with ranges.
        let mut c = cfg(Scheduler::Rr);
        assert_eq!(svc_flags(&c, true), 0);
        c.source_ranges = ranges.to_vec();
        assert_eq!(svc_flags(&c, false), SVC_F_SRC_RANGES);
        assert_eq!(svc_flags(&c, true), SVC_F_SRC_RANGES | SVC_F_NODE_OK);
    }

    #[test]
    fn source_range_keys_cover_the_service_then_the_block() {
        let k = SrcKey::of(
            7,
            &SourceRange::new("10.81.0.48".parse().unwrap(), 29).unwrap(),
        );
        assert_eq!((k.prefixlen, k.svc), (61, 7));
        assert_eq!(&k.addr[..5], &[10, 81, 0, 48, 0]);
        assert_eq!(std::mem::size_of::<SrcKey>(), 24);
    }

    #[test]
    fn per_cpu_values_are_summed_and_counters_set_by_index() {
        let mut bytes = Vec::new();
        for v in [3u64, 0, 40, u64::MAX] {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        // Wrapping, as the programs' per-CPU adds do.
        assert_eq!(sum_per_cpu(&bytes), 42);
        let mut e = EventCounts::default();
        for i in 0..counter::COUNT {
            e.set(i, u64::from(i) + 1);
        }
        e.set(counter::COUNT, 99);
        assert_eq!(
            e,
            EventCounts {
                tcp: 1,
                udp: 2,
                udp_kept: 3,
                no_dest: 4,
                refused_source: 5
            }
        );
    }
}
