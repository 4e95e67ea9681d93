//! `#[repr(C)]` mirrors of the map keys and values defined in `bpf/rvs.h`,
//! and the constants shared with the BPF programs.
//!
//! `bpf/rvs.h` is the single source of truth. Every struct here has the same
//! field names, fixed-width integers and explicit padding fields (always
//! zero: hash keys compare padding bytes). Sizes are asserted at compile
//! time; `crates/xdp/tests/layout.rs` requires a mirror for every struct of
//! the compiled object's BTF and compares its size and every member's offset,
//! width and signedness, and requires a Rust counterpart with the same value
//! for every `RVS_*` constant of the headers under `bpf/`.
//!
//! Byte order: addresses are 16 bytes in network order (IPv4 in the first
//! four); fields named `*port` hold the port in network order (use the
//! constructors, which take host-order ports).
//!
//! The control side's access to the maps is [`MapOps`] ([`ops`]), served
//! by the loaded program ([`KernelMaps`], [`kernel`]) or, in tests, by
//! in-memory maps with the kernel's rules (`MemMaps`, feature `mem-maps`).

use std::net::IpAddr;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

mod fnat;
pub mod kernel;
#[cfg(any(test, feature = "mem-maps"))]
mod mem;
pub mod ops;
pub mod typed;

pub use fnat::{
    FNAT_FULL_MAX, FNAT_ICMP_IN, FNAT_ICMP_OUT, FNAT_INBOUND, FNAT_LADDRS_MAX, FNAT_MUL,
    FNAT_POOL_MAX, FNAT_PORT_MAX, FNAT_PORT_MIN, FNAT_PROG, FNAT_REC_EMBRYONIC, FNAT_REC_FLOWS,
    FNAT_REC_NONE, FNAT_REPLY, FNAT_SEED, FNAT_STEP_PRIME, Fnat, FnatKey, FnatPool, FnatStats,
    FnatTmp, fnat_candidate,
};
pub use kernel::KernelMaps;
#[cfg(any(test, feature = "mem-maps"))]
pub use mem::MemMaps;
pub use ops::{FnatEntry, Installed, MapOps, WalkCursor};

/// Size of the services map and of the arrays indexed by service
/// (`svc_info`, `svc_flood`, `rr_cursor`, `svc_stats`, `fnat_pools`,
/// `fnat_stats`, `quic_stats`) in the object, and the default and largest
/// [`crate::LoadOptions::max_services`]: Cilium's default service map size.
/// The loader sets the sizes (four of these maps are per-CPU: 200 bytes a
/// service per CPU, 825 MiB for 65,536 services on 64 CPUs, so a small
/// machine gets fewer: [`crate::pin::default_max_services`]).
pub const MAX_SERVICES: u32 = 65_536;
/// Size of the dests map (and of `dest_stats`).
pub const MAX_DESTS: u32 = 65536;
/// Default number of `slots` (u32 entries holding scheduling tables).
pub const SLOTS_DEFAULT: u32 = 1 << 20;
/// Default flow-table (and NAT reply table) size.
pub const FLOWS_DEFAULT: u32 = 1 << 20;
/// Entries of each embryonic table in the object (the loader sizes them
/// from [`crate::LoadOptions::embryonic_entries`]).
pub const EMBRYONIC_DEFAULT: u32 = 1 << 18;
/// Longest real-server list / wrr sequence walk of one rr/wrr decision.
pub const MAX_SVC_DESTS: u32 = 256;
/// Entries of the `locality` map (lblc/lblcr, all services, LRU).
pub const LOCALITY_MAX: u32 = 65536;
/// Members of one lblcr server set in the `locality` map.
pub const LBLCR_SET_MAX: usize = 8;
/// Marks an empty bucket in `slots`.
pub const SLOT_EMPTY: u32 = 0xffff_ffff;
/// Scheduling's answer (inside the program) for a client outside the
/// service's source ranges: the packet is dropped.
pub const SLOT_REFUSED: u32 = 0xffff_fffe;
/// Entries of the `src_ranges` trie (the client source ranges of all
/// services).
pub const SRC_RANGES_MAX: u32 = 16384;

/// Address family IPv4 (`AF_INET`).
pub const AF_INET: u8 = 2;
/// Address family IPv6 (`AF_INET6`).
pub const AF_INET6: u8 = 10;
/// IP protocol TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol UDP.
pub const PROTO_UDP: u8 = 17;

/// Scheduler ids (`RVS_SCHED_*`): the program's number for each of
/// rvs-core's [`Scheduler`](rvs_core::sched::Scheduler)s.
pub mod sched {
    use rvs_core::sched::Scheduler;

    /// No scheduler: the `svc_info` slot is unused.
    pub const NONE: u8 = 0;
    /// Round robin.
    pub const RR: u8 = 1;
    /// Weighted round robin (a precomputed sequence).
    pub const WRR: u8 = 2;
    /// Least connection (counters in `dest_conns`).
    pub const LC: u8 = 3;
    /// Weighted least connection.
    pub const WLC: u8 = 4;
    /// Locality-based least connection (the `locality` map).
    pub const LBLC: u8 = 5;
    /// LBLC with replication (server sets in the `locality` map).
    pub const LBLCR: u8 = 6;
    /// Destination hashing (256-bucket table).
    pub const DH: u8 = 7;
    /// Source hashing (256-bucket table).
    pub const SH: u8 = 8;
    /// Shortest expected delay.
    pub const SED: u8 = 9;
    /// Never queue.
    pub const NQ: u8 = 10;
    /// Weighted failover.
    pub const FO: u8 = 11;
    /// Weighted overflow.
    pub const OVF: u8 = 12;
    /// Maglev hashing (M-slot table).
    pub const MH: u8 = 13;
    /// Power of two choices (`bpf_get_prandom_u32`).
    pub const TWOS: u8 = 14;

    /// The program's id of scheduler `s` (every scheduler of the core has
    /// one; the layout test checks them against the `RVS_SCHED_*` defines).
    pub const fn id(s: Scheduler) -> u8 {
        match s {
            Scheduler::Rr => RR,
            Scheduler::Wrr => WRR,
            Scheduler::Lc => LC,
            Scheduler::Wlc => WLC,
            Scheduler::Lblc => LBLC,
            Scheduler::Lblcr => LBLCR,
            Scheduler::Dh => DH,
            Scheduler::Sh => SH,
            Scheduler::Sed => SED,
            Scheduler::Nq => NQ,
            Scheduler::Fo => FO,
            Scheduler::Ovf => OVF,
            Scheduler::Mh => MH,
            Scheduler::Twos => TWOS,
        }
    }
}

/// Forwarding methods.
pub mod fwd {
    /// NAT (`-m`): destination rewrite; replies rewritten back.
    pub const NAT: u8 = 1;
    /// Direct routing (`-g`): MAC rewrite on the same segment.
    pub const DR: u8 = 2;
    /// Tunnel, IPIP (IPv4 in IPv4, IPv6 in IPv6).
    pub const TUN_IPIP: u8 = 3;
    /// Tunnel, GUE (outer IP/UDP + 4-byte GUE header).
    pub const TUN_GUE: u8 = 4;
    /// FULLNAT: source -> a local address and port of the service's pool,
    /// destination -> the real server (the tail-called `xdp_fnat`).
    pub const FNAT: u8 = 5;
    /// Tunnel, GRE (outer IP + GRE header, RFC 2784).
    pub const TUN_GRE: u8 = 6;
    /// Tunnel, Geneve (outer IP/UDP 6081 + 8-byte Geneve header, RFC 8926).
    pub const TUN_GENEVE: u8 = 7;
    /// DSR by IP option: destination -> the real server, the service in an
    /// IPv4 option / IPv6 Destination Options header (bpf/lib/dsr_opt.h).
    pub const TUN_OPT: u8 = 8;
}

/// The option [`fwd::TUN_OPT`] inserts (`RVS_DSR_OPT*` of bpf/rvs.h; the
/// wire format of Cilium's NodePort DSR).
pub mod dsr_opt {
    /// IPv4 option type (copied, class 0, number 26).
    pub const TYPE4: u8 = 0x9a;
    /// IPv4 option length: type, length, port, address.
    pub const LEN4: u8 = 8;
    /// IPv6 Destination Options option type (skipped when unknown).
    pub const TYPE6: u8 = 0x1b;
    /// The whole IPv6 Destination Options header.
    pub const LEN6: u8 = 24;
    /// The IPv6 option's data length: address, port, two Pad1.
    pub const OPTLEN6: u8 = 20;
    /// `dsr_prog`'s slot of `xdp_dsr_opt`, the program that inserts it
    /// (tail-called by the director for such real servers).
    pub const PROG: u32 = 0;
}

/// Service flags (IPVS's `IP_VS_SVC_F_*` bits).
pub mod svc_flags {
    /// Persistent service (`-p`).
    pub const PERSISTENT: u32 = 0x0001;
    /// Hashed (kernel bookkeeping bit; unused by the program).
    pub const HASHED: u32 = 0x0002;
    /// One-packet scheduling (`-o`, UDP): no flow entry.
    pub const ONEPACKET: u32 = 0x0004;
    /// `sh-fallback` / `mh-fallback`.
    pub const SCHED1: u32 = 0x0008;
    /// `sh-port` / `mh-port`.
    pub const SCHED2: u32 = 0x0010;
    /// New flows only from the service's client source ranges
    /// (`src_ranges`; Kubernetes' `loadBalancerSourceRanges`).
    pub const SRC_RANGES: u32 = 0x0020;
}

/// Real-server flags.
pub mod dest_flags {
    /// Deleted: never chosen, its existing flows are dropped.
    pub const UNAVAILABLE: u32 = 0x0001;
    /// Above its upper connection threshold: not chosen for new flows.
    pub const OVERLOADED: u32 = 0x0002;
    /// NAT: `mac`/`smac`/`ifindex` hold the next hop the control plane
    /// resolved (DR/TUN always use them).
    pub const NEXTHOP: u32 = 0x0004;
    /// TUN with `--tun-csum`: GUE/Geneve carry the outer UDP checksum, GRE
    /// its checksum (C bit).
    pub const TUN_CSUM: u32 = 0x0100;
}

/// Config flag: some real server uses NAT, so the program looks up replies.
pub const CFG_F_NAT: u32 = 0x0001;
/// Config flag: some service has local addresses (FULLNAT), so packets to
/// them are looked up in `fnat_laddrs` and handed to `xdp_fnat`.
pub const CFG_F_FNAT: u32 = 0x0002;
/// Flow flag: no reply seen (always set for DR/TUN flows).
pub const FLOW_F_NOOUTPUT: u8 = 0x01;
/// Flow flag (FULLNAT): the real server's SYN-ACK armed the TOA, so the
/// client's segments take `xdp_fnat`'s full path (which inserts it).
pub const FLOW_F_TOA: u8 = 0x02;
/// Number of IPVS TCP states (`NONE` .. `SYNACK`).
pub const TCP_S_LAST: usize = 11;
/// Length of the GUE header the program writes.
pub const GUE_HDR_LEN: usize = 4;
/// Length of the GRE header without its optional fields.
pub const GRE_HDR_LEN: usize = 4;
/// Length of GRE's checksum field and reserved1 (the C bit).
pub const GRE_CSUM_LEN: usize = 4;
/// Length of the Geneve header the program writes (no options).
pub const GENEVE_HDR_LEN: usize = 8;
/// Geneve's UDP destination port.
pub const GENEVE_PORT: u16 = rvs_core::model::GENEVE_PORT;
/// Bytes the tunnel checksum sums per helper call (`RVS_CSUM_CHUNK`).
pub const CSUM_CHUNK: usize = 512;
/// Most chunks a tunnel checksum sums (`RVS_CSUM_CHUNKS`).
pub const CSUM_CHUNKS: usize = 8;
/// TTL / hop limit of the outer header of tunnelled packets.
pub const TUN_TTL: u8 = 64;
/// First client address (IPv4, host order) of the benchmark objects that
/// cycle through N flows (`RVS_BENCH_CYCLE_BASE` of bpf/bench_cycle.h):
/// key `i` comes from this address + `i`.
#[cfg(feature = "bench")]
pub const BENCH_CYCLE_BASE: u32 = 0x0a00_0000;

/// An address as the maps store it: 16 bytes, network order, IPv4 in the
/// first four bytes.
pub fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address family constant of an address.
pub fn family(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    }
}

/// `services` key: a virtual service (protocol, VIP, port).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct SvcKey {
    /// [`PROTO_TCP`] or [`PROTO_UDP`].
    pub proto: u8,
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u8,
    /// VIP port, network order.
    pub port: u16,
    /// VIP, see [`addr16`].
    pub vip: [u8; 16],
}

impl SvcKey {
    /// The key of a service on `vip:port` (host-order port).
    pub fn new(proto: u8, vip: IpAddr, port: u16) -> Self {
        SvcKey {
            proto,
            family: family(vip),
            port: port.to_be(),
            vip: addr16(vip),
        }
    }
}

/// `svc_info` value: how one service schedules.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Svc {
    /// Scheduler id ([`sched`]); [`sched::NONE`] = unused slot.
    pub sched: u8,
    /// Family of the VIP.
    pub family: u8,
    /// Padding, zero.
    pub pad0: u16,
    /// [`svc_flags`].
    pub flags: u32,
    /// Start of the bucket table / wrr sequence in `slots`.
    pub table_off: u32,
    /// Its length (256 for sh/dh, M for mh, the cycle for wrr).
    pub table_len: u32,
    /// Start of the real-server list (dest indexes) in `slots`.
    pub dests_off: u32,
    /// Its length.
    pub dests_len: u32,
    /// Persistence timeout in seconds.
    pub persist_timeout: u32,
    /// Persistence netmask as a byte mask.
    pub persist_mask: [u8; 16],
}

/// `dests` value: one real server.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Dest {
    /// Address, see [`addr16`].
    pub addr: [u8; 16],
    /// Port, network order; 0 = the VIP's port.
    pub port: u16,
    /// Family of `addr`.
    pub family: u8,
    /// Forwarding method ([`fwd`]).
    pub method: u8,
    /// [`dest_flags`].
    pub flags: u32,
    /// Weight; 0 = quiesced.
    pub weight: u32,
    /// Egress interface; 0 or the ingress interface = XDP_TX.
    pub ifindex: u32,
    /// DR: the real server's MAC; TUN: the next hop's MAC.
    pub mac: [u8; 6],
    /// Source MAC used when redirecting to `ifindex`.
    pub smac: [u8; 6],
    /// GUE: UDP destination port, network order.
    pub gue_port: u16,
    /// Padding, zero.
    pub pad0: u16,
}

/// A flow's key: the client-side 5-tuple as the client sent it. The
/// program keeps IPv6 flows under this key in `flows` and IPv4 flows under
/// the shorter [`Flow4Key`] in `flows4`; the control side speaks of every
/// flow with this type ([`Flow4Key::of`] and [`Flow4Key::widen`] convert).
#[repr(C)]
#[derive(
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    FromBytes,
    IntoBytes,
    Immutable,
    KnownLayout,
)]
pub struct FlowKey {
    /// Client address.
    pub caddr: [u8; 16],
    /// VIP.
    pub vaddr: [u8; 16],
    /// Client port, network order.
    pub cport: u16,
    /// VIP port, network order.
    pub vport: u16,
    /// Protocol.
    pub proto: u8,
    /// Family.
    pub family: u8,
    /// Padding, zero.
    pub pad0: u16,
}

impl FlowKey {
    /// The key of a flow from `client` to `vip` (host-order ports).
    pub fn new(proto: u8, client: IpAddr, cport: u16, vip: IpAddr, vport: u16) -> Self {
        FlowKey {
            caddr: addr16(client),
            vaddr: addr16(vip),
            cport: cport.to_be(),
            vport: vport.to_be(),
            proto,
            family: family(vip),
            pad0: 0,
        }
    }
}

/// `flows4` key: an IPv4 flow's 5-tuple in 16 bytes (the kernel hashes and
/// compares the whole key on every packet; 16 bytes cost ~6 ns less per
/// lookup than the 40 of [`FlowKey`]).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Flow4Key {
    /// Client address.
    pub caddr: [u8; 4],
    /// VIP.
    pub vaddr: [u8; 4],
    /// Client port, network order.
    pub cport: u16,
    /// VIP port, network order.
    pub vport: u16,
    /// Protocol.
    pub proto: u8,
    /// Padding, zero.
    pub pad0: u8,
    /// Padding, zero.
    pub pad1: u16,
}

impl Flow4Key {
    /// The `flows4` key of an IPv4 flow; `None` for an IPv6 one (it lives in
    /// `flows`).
    pub fn of(k: &FlowKey) -> Option<Self> {
        if k.family != AF_INET {
            return None;
        }
        let mut caddr = [0; 4];
        let mut vaddr = [0; 4];
        caddr.copy_from_slice(&k.caddr[..4]);
        vaddr.copy_from_slice(&k.vaddr[..4]);
        Some(Flow4Key {
            caddr,
            vaddr,
            cport: k.cport,
            vport: k.vport,
            proto: k.proto,
            pad0: 0,
            pad1: 0,
        })
    }

    /// The same flow as a [`FlowKey`].
    pub fn widen(&self) -> FlowKey {
        let mut caddr = [0; 16];
        let mut vaddr = [0; 16];
        caddr[..4].copy_from_slice(&self.caddr);
        vaddr[..4].copy_from_slice(&self.vaddr);
        FlowKey {
            caddr,
            vaddr,
            cport: self.cport,
            vport: self.vport,
            proto: self.proto,
            family: AF_INET,
            pad0: 0,
        }
    }
}

/// `flows` and `flows4` value.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Flow {
    /// Jiffies (`bpf_jiffies64`) of the last packet; see [`Config::hz`].
    pub last_seen: u64,
    /// Real-server index.
    pub dest: u32,
    /// Service index.
    pub svc: u32,
    /// IPVS TCP state (or 0 for UDP).
    pub state: u8,
    /// [`FLOW_F_NOOUTPUT`], [`FLOW_F_TOA`].
    pub flags: u8,
    /// FULLNAT over IPv4: the local port of the flow's pair as the program
    /// recorded it from `fnat_fwd`/`fnat_rev` (network order), so that its
    /// established packets skip both look-ups; 0 = none recorded (the
    /// program then finds the pair itself). The control side writes one
    /// only for a synced flow whose pair it claimed in `fnat_rev` and
    /// `fnat_fwd` first (`Plane::load_synced`).
    pub fnat_lport: u16,
    /// FULLNAT over IPv4: the local address of that pair (network order,
    /// as it lies in memory); meaningful only with `fnat_lport` set.
    pub fnat_laddr: u32,
}

/// Entries of the per-CPU flow cache (`flow_cache`) on each CPU.
pub const FLOW_CACHE_SIZE: u32 = 1 << 16;
/// Entries of the per-CPU IPv6 flow cache (`flow6_cache`) on each CPU.
pub const FLOW6_CACHE_SIZE: u32 = 1 << 14;
/// Slots of `flow_epochs`, the shared epochs that invalidate cache entries.
pub const FLOW_EPOCHS: u32 = 1 << 16;
/// Jiffies a flow-cache entry serves packets after it was last checked
/// against `flows4` (the staleness bound of everything the epochs do not
/// cover: LRU evictions, removals by the control side, shortened timeouts).
pub const FLOW_CACHE_JIFFIES: u64 = 32;
/// Seed of the flow cache's hash.
pub const FLOW_CACHE_SEED: u64 = 0x5256_535f_6361_6368;
/// Multiplier of the flow cache's hash.
pub const FLOW_CACHE_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// The flow cache's hash of an IPv4 flow key, as the program computes it
/// (`flow_cache_hash` in xdp_lb.c): the control side needs it to find a
/// key's cache entry and to bump its epoch slot when it writes the flow.
pub fn flow_cache_hash(k: &Flow4Key) -> u64 {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&k.caddr);
    b[4..8].copy_from_slice(&k.vaddr);
    b[8..10].copy_from_slice(&k.cport.to_ne_bytes());
    b[10..12].copy_from_slice(&k.vport.to_ne_bytes());
    b[12] = k.proto;
    b[13] = k.pad0;
    b[14..16].copy_from_slice(&k.pad1.to_ne_bytes());
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    let w0 = u64::from_le_bytes(w);
    w.copy_from_slice(&b[8..]);
    let w1 = u64::from_le_bytes(w);
    let h = (w0 ^ FLOW_CACHE_SEED).wrapping_mul(FLOW_CACHE_MUL);
    let h = (h ^ (h >> 32) ^ w1).wrapping_mul(FLOW_CACHE_MUL);
    h ^ (h >> 32)
}

/// The flow cache's hash over little-endian 64-bit words (the formula in
/// rvs.h: two words for an IPv4 key, five for an IPv6 one).
fn cache_hash_words(b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(8).map(|c| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        u64::from_le_bytes(w)
    });
    let mut h = (words.next().unwrap_or(0) ^ FLOW_CACHE_SEED).wrapping_mul(FLOW_CACHE_MUL);
    for w in words {
        h = (h ^ (h >> 32) ^ w).wrapping_mul(FLOW_CACHE_MUL);
    }
    h ^ (h >> 32)
}

/// The IPv6 flow cache's hash of a 40-byte flow key, as the program
/// computes it (`flow6_cache_hash` in xdp_lb.c): the control side needs it
/// to find a key's cache entry and to bump its epoch slot.
pub fn flow6_cache_hash(k: &FlowKey) -> u64 {
    let mut b = [0u8; 40];
    b[..16].copy_from_slice(&k.caddr);
    b[16..32].copy_from_slice(&k.vaddr);
    b[32..34].copy_from_slice(&k.cport.to_ne_bytes());
    b[34..36].copy_from_slice(&k.vport.to_ne_bytes());
    b[36] = k.proto;
    b[37] = k.family;
    b[38..40].copy_from_slice(&k.pad0.to_ne_bytes());
    cache_hash_words(&b)
}

/// The `flow6_cache` index of an IPv6 key (the hash's low bits).
pub fn flow6_cache_index(k: &FlowKey) -> u32 {
    flow6_cache_hash(k) as u32 & (FLOW6_CACHE_SIZE - 1)
}

/// The `flow_epochs` slot of a flow key of either family (an IPv4 one
/// hashed as its 16-byte `flows4` key, an IPv6 one as the 40-byte key).
pub fn flow_key_epoch_slot(k: &FlowKey) -> u32 {
    match Flow4Key::of(k) {
        Some(k4) => flow_epoch_slot(&k4),
        None => (flow6_cache_hash(k) >> 16) as u32 & (FLOW_EPOCHS - 1),
    }
}

/// The `flow_cache` index of a key (the hash's low bits).
pub fn flow_cache_index(k: &Flow4Key) -> u32 {
    flow_cache_hash(k) as u32 & (FLOW_CACHE_SIZE - 1)
}

/// The `flow_epochs` slot of a key (the hash's bits 16 and up).
pub fn flow_epoch_slot(k: &Flow4Key) -> u32 {
    (flow_cache_hash(k) >> 16) as u32 & (FLOW_EPOCHS - 1)
}

/// `flow_cache` value: one CPU's cached established IPv4 DR flow.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct FlowCache {
    /// The flow's key.
    pub key: Flow4Key,
    /// Jiffies when the entry was last checked against `flows4`.
    pub stamp: u64,
    /// Real-server index.
    pub dest: u32,
    /// Service index.
    pub svc: u32,
    /// The key's `flow_epochs` slot when it was checked.
    pub epoch: u32,
    /// Padding, zero.
    pub pad0: u32,
}

/// `flow6_cache` value: one CPU's cached established IPv6 DR flow.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Flow6Cache {
    /// The flow's key.
    pub key: FlowKey,
    /// Jiffies when the entry was last checked against `flows`.
    pub stamp: u64,
    /// Real-server index.
    pub dest: u32,
    /// Service index.
    pub svc: u32,
    /// The key's `flow_epochs` slot when it was checked.
    pub epoch: u32,
    /// Padding, zero.
    pub pad0: u32,
}

/// `nat_rev` key: a reply from a real server to a client.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct NatKey {
    /// Real-server address.
    pub raddr: [u8; 16],
    /// Client address.
    pub caddr: [u8; 16],
    /// Real-server port, network order.
    pub rport: u16,
    /// Client port, network order.
    pub cport: u16,
    /// Protocol.
    pub proto: u8,
    /// Family.
    pub family: u8,
    /// Padding, zero.
    pub pad0: u16,
}

/// `nat_rev` value: what a reply's source is rewritten to.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Nat {
    /// The VIP.
    pub vaddr: [u8; 16],
    /// The VIP port, network order.
    pub vport: u16,
    /// Padding, zero.
    pub pad0: u16,
    /// Service index.
    pub svc: u32,
    /// Real-server index.
    pub dest: u32,
}

/// `svc_stats` / `dest_stats` value (per CPU): IPVS's counters.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Stats {
    /// Connections scheduled.
    pub conns: u64,
    /// Packets client → real server.
    pub inpkts: u64,
    /// Packets real server → client (NAT only).
    pub outpkts: u64,
    /// Bytes (IP total length) in.
    pub inbytes: u64,
    /// Bytes out.
    pub outbytes: u64,
}

/// `config[0]`: the director's own settings.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Config {
    /// Outer source address of IPv4 tunnels.
    pub tun_src4: [u8; 4],
    /// Outer source address of IPv6 tunnels.
    pub tun_src6: [u8; 16],
    /// Timeout in seconds per IPVS TCP state.
    pub tcp_timeouts: [u32; TCP_S_LAST],
    /// UDP timeout in seconds.
    pub udp_timeout: u32,
    /// [`CFG_F_NAT`].
    pub flags: u32,
    /// The kernel's HZ (jiffies per second), which turns the timeouts into
    /// jiffies; [`crate::Loaded::set_config`] fills it in when 0.
    pub hz: u32,
    /// SYN-flood guard: new flows per CPU per second above which flows of
    /// hash-scheduled (sh/dh/mh) DR/TUN services get no flow entry (the
    /// hash sends their next packets to the same server); 0 = no limit.
    pub max_new_flows: u32,
    /// Largest outer packet a tunnel may send; bigger ones that may not be
    /// fragmented get ICMP "fragmentation needed" / "packet too big" with
    /// this minus the tunnel headers. 0 = no check.
    pub tun_mtu: u32,
    /// Low bits of the outer IPv4 tunnel source taken from the flow hash
    /// (`tun_src4` is then the prefix), so a receiver's RSS spreads flows;
    /// 0 = the fixed source; at most 16.
    pub tun_vary4: u8,
    /// The same for IPv6 (`tun_src6`'s last 32 bits); at most 32.
    pub tun_vary6: u8,
    /// Explicit padding.
    pub pad0: u16,
    /// lblc/lblcr: seconds after which an unused destination-address entry
    /// is gone and an unchanged lblcr set may shed its most loaded member
    /// (the `lblc_expiration` / `lblcr_expiration` sysctls); 0 = never.
    pub locality_expiration: u32,
}

/// `src_ranges` key (an LPM trie): one client source range of a service.
/// The prefix covers `svc` (always whole) and then `addr`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SrcKey {
    /// 32 (the service index) + the range's prefix length.
    pub prefixlen: u32,
    /// The service's index (`svc_info`).
    pub svc: u32,
    /// The range's address, network order (IPv4 in the first 4 bytes).
    pub addr: [u8; 16],
}

impl SrcKey {
    /// The key of `range` of service `svc`.
    pub fn of(svc: u32, range: &rvs_core::model::SourceRange) -> SrcKey {
        let mut addr = [0u8; 16];
        match range.addr() {
            std::net::IpAddr::V4(a) => addr[..4].copy_from_slice(&a.octets()),
            std::net::IpAddr::V6(a) => addr = a.octets(),
        }
        SrcKey {
            prefixlen: 32 + u32::from(range.prefix()),
            svc,
            addr,
        }
    }
}

/// `persist` key: a persistence template's client network and service.
#[repr(C)]
#[derive(
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    FromBytes,
    IntoBytes,
    Immutable,
    KnownLayout,
)]
pub struct PersistKey {
    /// Client address masked with the service's `persist_mask`.
    pub caddr: [u8; 16],
    /// VIP.
    pub vaddr: [u8; 16],
    /// VIP port, network order.
    pub vport: u16,
    /// Protocol.
    pub proto: u8,
    /// Family.
    pub family: u8,
}

/// `persist` value: the real server a client network sticks to.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Persist {
    /// Jiffies of the last new flow that used the template.
    pub last_seen: u64,
    /// Real-server index.
    pub dest: u32,
    /// Service index.
    pub svc: u32,
}

/// `locality` key: a service and a packet destination address (lblc,
/// lblcr).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct LocalityKey {
    /// Service index.
    pub svc: u32,
    /// Family of `daddr`.
    pub family: u8,
    /// Explicit padding (zero).
    pub pad0: [u8; 3],
    /// The packets' destination address.
    pub daddr: [u8; 16],
}

impl LocalityKey {
    /// The key of `daddr` in service `svc`.
    pub fn new(svc: u32, daddr: IpAddr) -> Self {
        LocalityKey {
            svc,
            family: family(daddr),
            pad0: [0; 3],
            daddr: addr16(daddr),
        }
    }
}

/// `locality` value: the real server (lblc: `members[0]`) or server set
/// (lblcr: newest first) of a destination address.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Locality {
    /// Jiffies of the last decision that looked the entry up.
    pub lastuse: u64,
    /// lblcr: jiffies of the last member added or removed.
    pub lastmod: u64,
    /// Members in use.
    pub count: u32,
    /// Real-server indexes.
    pub members: [u32; LBLCR_SET_MAX],
    /// Explicit padding.
    pub pad0: u32,
}

impl Locality {
    /// The members in use.
    pub fn members(&self) -> &[u32] {
        &self.members[..(self.count as usize).min(LBLCR_SET_MAX)]
    }
}

/// The `persist_mask` of an IPv6 `-M` prefix length (0..=128); for IPv4
/// the netmask goes through [`addr16`].
pub fn prefix_mask(prefix_len: u8) -> [u8; 16] {
    let bits = u32::from(prefix_len.min(128));
    let m = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    m.to_be_bytes()
}

/// Entries of `nh_missing` (`RVS_NH_MISSING_MAX`).
pub const NH_MISSING_MAX: u32 = 256;

/// `nh_missing` key: a next hop a NAT-rewritten packet found without a
/// neighbour entry (`struct rvs_nh_key`), for the control plane to resolve.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct NhKey {
    /// The address in network order (IPv4 in the first 4 bytes).
    pub addr: [u8; 16],
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// Zero.
    pub pad0: [u8; 3],
}

impl NhKey {
    /// The key of `addr` (the form `fnat_laddrs` uses too).
    pub fn of(addr: std::net::IpAddr) -> Self {
        NhKey {
            addr: addr16(addr),
            family: family(addr),
            pad0: [0; 3],
        }
    }

    /// The next hop's address; `None` for an unknown family.
    pub fn addr(&self) -> Option<std::net::IpAddr> {
        match self.family {
            AF_INET => {
                let [a, b, c, d, ..] = self.addr;
                Some(std::net::Ipv4Addr::new(a, b, c, d).into())
            }
            AF_INET6 => Some(std::net::Ipv6Addr::from(self.addr).into()),
            _ => None,
        }
    }
}

/// `dest_conns` value: a real server's ActiveConn / InActConn as the
/// program keeps them.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DestConns {
    /// Flows in ESTABLISHED, SYN_SENT, SYN_RECV or SYNACK.
    pub active: u32,
    /// Every other flow (all UDP flows).
    pub inactive: u32,
}

/// `flood[0]` (per CPU): this CPU's new flows per second, the SYN-flood
/// guard's current window and whether the embryonic tables are armed.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Flood {
    /// `jiffies / hz` of the window.
    pub second: u64,
    /// New flows seen in it on this CPU.
    pub count: u32,
    /// TCP handshakes completed in it on this CPU (`count - completed`:
    /// the half-open new flows that arm the embryonic tables).
    pub completed: u32,
    /// The last second (`jiffies / hz`) in which new TCP flows start in
    /// the embryonic tables (0: never armed); see
    /// [`EMBRYONIC_ARM_RATE`].
    pub armed_until: u64,
}

/// `RVS_EMBRYONIC_ARM_RATE`: half-open new flows (new flows less the
/// handshakes completed) per CPU per second above which (new flows above
/// `max_new_flows` when that is set) new TCP flows start in the embryonic
/// tables, for [`EMBRYONIC_ARM_SECS`] seconds after the last such second;
/// below it a SYN's flow goes straight to the flow table. Legitimate new
/// connections, whose handshakes complete, do not arm the tables.
pub const EMBRYONIC_ARM_RATE: u64 = 4096;
/// `RVS_EMBRYONIC_ARM_SECS` (see [`EMBRYONIC_ARM_RATE`]).
pub const EMBRYONIC_ARM_SECS: u64 = 60;

/// `RVS_EMBRYONIC_SEEN_UNKNOWN`: the value of `embryonic_seen[0]` (the
/// latest jiffy at which the program wrote an embryonic entry, 0 for never)
/// that says "not known": the plane writes it when it starts over pinned
/// maps and replaces the program that ran on them (an upgrade or a
/// downgrade: that program may have written embryonic entries without
/// stamping), and the program's first look replaces it with the jiffy of
/// that look, so the embryonic tables are looked up until every entry made
/// before then has expired.
pub const EMBRYONIC_SEEN_UNKNOWN: u64 = u64::MAX;

/// `svc_flood[service index]` (per CPU): what the SYN-flood defences did
/// with the service's new TCP flows (`struct rvs_svc_flood`).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct SvcFlood {
    /// SYNs that made an entry in the embryonic table.
    pub embryonic: u64,
    /// Embryonic flows whose handshake completed (moved to the flow table).
    pub promoted: u64,
    /// New flows forwarded by the hash without an entry (the guard).
    pub guarded: u64,
    /// TCP segments without SYN of no known flow, passed to the kernel.
    pub unknown: u64,
    /// TCP segments without SYN of no known flow of a hash-scheduled
    /// service that got a flow entry: flows adopted mid-stream (ECMP moved
    /// them here from another director of the fleet, or their entry was
    /// lost), forwarded to the real server the hash names.
    pub adopted: u64,
    /// New flows dropped: the client was outside the service's source
    /// ranges ([`svc_flags::SRC_RANGES`]).
    pub refused: u64,
}

impl SvcFlood {
    /// The sum of two (CPUs, services).
    pub fn add(&self, o: &SvcFlood) -> SvcFlood {
        SvcFlood {
            embryonic: self.embryonic.wrapping_add(o.embryonic),
            promoted: self.promoted.wrapping_add(o.promoted),
            guarded: self.guarded.wrapping_add(o.guarded),
            unknown: self.unknown.wrapping_add(o.unknown),
            adopted: self.adopted.wrapping_add(o.adopted),
            refused: self.refused.wrapping_add(o.refused),
        }
    }
}

impl Config {
    /// IPVS's default timeouts (ESTABLISHED 900 s, ..., UDP 300 s), no
    /// tunnel sources, no NAT.
    pub fn ipvs_defaults() -> Self {
        Config {
            tcp_timeouts: [2, 900, 120, 60, 120, 120, 10, 60, 30, 120, 120],
            udp_timeout: 300,
            locality_expiration: 24 * 60 * 60,
            ..Config::default()
        }
    }

    /// The timeout in seconds of a flow of `proto` in `state` (a TCP state,
    /// or UDP's one), as the program applies it; 0 for an unknown state.
    pub fn flow_timeout(&self, proto: u8, state: u8) -> u32 {
        if proto == PROTO_TCP {
            self.tcp_timeouts
                .get(usize::from(state))
                .copied()
                .unwrap_or(0)
        } else {
            self.udp_timeout
        }
    }
}

const _: () = assert!(size_of::<SvcKey>() == 20);
const _: () = assert!(size_of::<Svc>() == 44);
const _: () = assert!(size_of::<Dest>() == 48);
const _: () = assert!(size_of::<FlowKey>() == 40);
const _: () = assert!(size_of::<Flow>() == 24);
const _: () = assert!(size_of::<NatKey>() == 40);
const _: () = assert!(size_of::<Flow4Key>() == 16);
const _: () = assert!(size_of::<FlowCache>() == 40);
const _: () = assert!(size_of::<Flow6Cache>() == 64);
const _: () = assert!(size_of::<Nat>() == 28);
const _: () = assert!(size_of::<Stats>() == 40);
const _: () = assert!(size_of::<Config>() == 92);
const _: () = assert!(size_of::<Flood>() == 24);
const _: () = assert!(size_of::<SvcFlood>() == 48);
const _: () = assert!(size_of::<SrcKey>() == 24);
const _: () = assert!(size_of::<DestConns>() == 8);
const _: () = assert!(size_of::<PersistKey>() == 36);
const _: () = assert!(size_of::<Persist>() == 16);
const _: () = assert!(size_of::<LocalityKey>() == 24);
const _: () = assert!(size_of::<Locality>() == 56);
