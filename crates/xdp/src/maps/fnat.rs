//! FULLNAT's maps (`bpf/lib/fnat.h`): the per-service local-address pools,
//! the `fnat_rev`/`fnat_fwd` translations, the tail call's scratch, the
//! counters, and the constants shared with the program (pool bounds, port
//! range, record kinds, the allocator's walk).

use super::*;

/// Local addresses one service's pool may hold in the program
/// (`RVS_FNAT_POOL_MAX`; ranges are expanded, a bigger pool is refused).
pub const FNAT_POOL_MAX: usize = 16;
/// First local port a pool hands out by default.
pub const FNAT_PORT_MIN: u16 = 1024;
/// Last local port a pool hands out by default.
pub const FNAT_PORT_MAX: u16 = 65535;
/// `fnat_prog`'s slot of `xdp_fnat`.
pub const FNAT_PROG: u32 = 0;
/// `fnat_tmp.kind`: a packet of a FULLNAT flow, client -> VIP.
pub const FNAT_INBOUND: u32 = 1;
/// `fnat_tmp.kind`: a packet to a local address.
pub const FNAT_REPLY: u32 = 2;
/// `fnat_tmp.table`: the flow's pair is not recorded (a new flow's first
/// packet).
pub const FNAT_REC_NONE: u8 = 0;
/// `fnat_tmp.table`: the flow's pair is recorded in its `flows4` entry.
pub const FNAT_REC_FLOWS: u8 = 1;
/// `fnat_tmp.table`: the flow's pair is recorded in its `embryonic4` entry.
pub const FNAT_REC_EMBRYONIC: u8 = 2;
/// `fnat_tmp.kind`: an ICMP error from the client's side about a reply of a
/// FULLNAT flow (VIP -> client), translated toward the real server.
pub const FNAT_ICMP_IN: u32 = 3;
/// `fnat_tmp.kind`: an ICMP error to a local address about a packet of a
/// FULLNAT flow (local address -> real server), translated toward the
/// client.
pub const FNAT_ICMP_OUT: u32 = 4;
/// Entries of `fnat_laddrs` (every service's local addresses together).
pub const FNAT_LADDRS_MAX: u32 = 4096;
/// Entries of `fnat_full` (`RVS_FNAT_FULL_MAX`): the (service, real server)
/// pairs whose last pool walk found every pair taken, each with the
/// jiffies of that walk; a new flow toward one within a quarter second is
/// refused without another walk (an LRU: the oldest go first).
pub const FNAT_FULL_MAX: u32 = 4096;
/// The pool hash's seed (`RVS_FNAT_SEED`, bpf/lib/fnat.h).
pub const FNAT_SEED: u64 = 0x5256_535f_666e_6174;
/// The pool hash's multiplier (`RVS_FNAT_MUL`).
pub const FNAT_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// The prime whose residue modulo a pool's size steps the walk over its
/// pairs (`RVS_FNAT_STEP_PRIME`): above any pool's size, so the residue is
/// coprime to it and the walk visits every pair once.
pub const FNAT_STEP_PRIME: u32 = 2_654_435_761;

/// `fnat_pools[service index]`: the service's local addresses and port
/// range (`struct rvs_fnat_pool`).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FnatPool {
    /// Addresses in use, from the first; 0 = no pool.
    pub count: u32,
    /// First local port (host order).
    pub port_min: u16,
    /// Last local port (host order).
    pub port_max: u16,
    /// Family of every address.
    pub family: u8,
    /// Zero.
    pub pad0: [u8; 3],
    /// The addresses, see [`addr16`].
    pub addrs: [[u8; 16]; FNAT_POOL_MAX],
}

impl Default for FnatPool {
    fn default() -> Self {
        FnatPool {
            count: 0,
            port_min: FNAT_PORT_MIN,
            port_max: FNAT_PORT_MAX,
            family: 0,
            pad0: [0; 3],
            addrs: [[0; 16]; FNAT_POOL_MAX],
        }
    }
}

/// `fnat_rev` key: a FULLNAT flow as its real server sees it (the reply's
/// source and destination; `struct rvs_fnat_key`). Also `fnat_fwd`'s value.
#[repr(C)]
#[derive(
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    FromBytes,
    IntoBytes,
    Immutable,
    KnownLayout,
)]
pub struct FnatKey {
    /// Real server address.
    pub raddr: [u8; 16],
    /// Local address.
    pub laddr: [u8; 16],
    /// Real server port, network order.
    pub rport: u16,
    /// Local port, network order.
    pub lport: u16,
    /// Protocol.
    pub proto: u8,
    /// Family.
    pub family: u8,
    /// Zero.
    pub pad0: u16,
}

/// `fnat_rev` value: the client side of the flow (`struct rvs_fnat`).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Fnat {
    /// Client address.
    pub caddr: [u8; 16],
    /// VIP.
    pub vaddr: [u8; 16],
    /// Client port, network order.
    pub cport: u16,
    /// VIP port, network order.
    pub vport: u16,
    /// Service index.
    pub svc: u32,
    /// Real-server index.
    pub dest: u32,
    /// TOA: the acknowledgment number (network order) of the client
    /// segments that get the client's address as a TCP option (the real
    /// server's SYN-ACK sequence + 1); 0 = none. Set and cleared by the
    /// program (bpf/lib/fnat.h); userspace writes 0.
    pub toa_ack: u32,
}

/// `fnat_tmp[0]` (per CPU): what `xdp_lb` hands `xdp_fnat` across the tail
/// call (`struct rvs_fnat_tmp`).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct FnatTmp {
    /// [`FNAT_INBOUND`], [`FNAT_REPLY`], [`FNAT_ICMP_IN`] or
    /// [`FNAT_ICMP_OUT`].
    pub kind: u32,
    /// Real-server index.
    pub dest: u32,
    /// Service index.
    pub svc: u32,
    /// [`FNAT_INBOUND`]: the flow entry's `fnat_laddr` as `xdp_lb` read it.
    pub laddr: u32,
    /// [`FNAT_INBOUND`]: the flow entry's `fnat_lport`.
    pub lport: u16,
    /// [`FNAT_INBOUND`]: where `xdp_fnat` records the flow's pair
    /// ([`FNAT_REC_NONE`], [`FNAT_REC_FLOWS`], [`FNAT_REC_EMBRYONIC`]).
    pub table: u8,
    /// [`FNAT_INBOUND`]: the flow entry's [`FLOW_F_TOA`].
    pub flags: u8,
    /// Zero.
    pub pad0: u32,
}

/// `fnat_stats[service index]` (per CPU; `struct rvs_fnat_stats`).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct FnatStats {
    /// Connections refused: every (local address, port) toward their real
    /// server was taken, or `fnat_rev`/`fnat_fwd` was full. Each connection
    /// once, whatever the number of SYNs it sends while refused.
    pub exhausted: u64,
    /// (local address, port) pairs handed out.
    pub allocated: u64,
    /// Client handshake segments that got the TOA (the client's address).
    pub toa_inserted: u64,
    /// Client handshake segments sent on without the TOA: their TCP
    /// options left no room for it (40 bytes).
    pub toa_noroom: u64,
    /// Client handshake segments sent on without the TOA: it would have
    /// pushed them past the MTU toward the real servers.
    pub toa_mtu: u64,
    /// Client handshake segments the TOA failed on otherwise (malformed
    /// header, no headroom in the frame).
    pub toa_error: u64,
    /// Real servers' SYN-ACKs whose MSS option was lowered by the TOA's
    /// length (so client data carrying it still fits the path).
    pub mss_clamped: u64,
    /// Pairs the pool walk looked at, claimed or not (`probes /
    /// allocated`: the search's mean length).
    pub probes: u64,
    /// ICMP errors from the client's side about the service's FULLNAT
    /// flows, translated and sent to the real server.
    pub icmp_to_rs: u64,
    /// ICMP errors from the real servers' side about the service's FULLNAT
    /// flows, translated and sent to the client.
    pub icmp_to_client: u64,
    /// Of those, frag-needed / packet-too-big errors whose MTU was lowered
    /// by the TOA's length (the flow's TOA was armed).
    pub icmp_mtu_lowered: u64,
}

impl FnatStats {
    /// The counters of `self` minus those of `base` (wrapping), for the
    /// per-service baseline a rebuilt service starts from.
    pub fn since(&self, base: &FnatStats) -> FnatStats {
        FnatStats {
            exhausted: self.exhausted.wrapping_sub(base.exhausted),
            allocated: self.allocated.wrapping_sub(base.allocated),
            toa_inserted: self.toa_inserted.wrapping_sub(base.toa_inserted),
            toa_noroom: self.toa_noroom.wrapping_sub(base.toa_noroom),
            toa_mtu: self.toa_mtu.wrapping_sub(base.toa_mtu),
            toa_error: self.toa_error.wrapping_sub(base.toa_error),
            mss_clamped: self.mss_clamped.wrapping_sub(base.mss_clamped),
            probes: self.probes.wrapping_sub(base.probes),
            icmp_to_rs: self.icmp_to_rs.wrapping_sub(base.icmp_to_rs),
            icmp_to_client: self.icmp_to_client.wrapping_sub(base.icmp_to_client),
            icmp_mtu_lowered: self.icmp_mtu_lowered.wrapping_sub(base.icmp_mtu_lowered),
        }
    }

    /// The sum of two CPUs' counters.
    pub fn plus(&self, o: &FnatStats) -> FnatStats {
        FnatStats {
            exhausted: self.exhausted + o.exhausted,
            allocated: self.allocated + o.allocated,
            toa_inserted: self.toa_inserted + o.toa_inserted,
            toa_noroom: self.toa_noroom + o.toa_noroom,
            toa_mtu: self.toa_mtu + o.toa_mtu,
            toa_error: self.toa_error + o.toa_error,
            mss_clamped: self.mss_clamped + o.mss_clamped,
            probes: self.probes + o.probes,
            icmp_to_rs: self.icmp_to_rs + o.icmp_to_rs,
            icmp_to_client: self.icmp_to_client + o.icmp_to_client,
            icmp_mtu_lowered: self.icmp_mtu_lowered + o.icmp_mtu_lowered,
        }
    }
}

/// The `i`-th (local address index, local port) pair the program's pool
/// walk tries for a new FULLNAT flow from `caddr:cport` to port `vport`
/// (host order ports) with a pool of `count` addresses and ports
/// `port_min..=port_max`: the formula of bpf/lib/fnat.h (`fnat_hash`,
/// `struct fnat_walk`), so tests can predict and provoke collisions. Pair
/// `j` of the pool's `count * range` is address `j % count`, port
/// `port_min + j / count`; the walk starts at the hash modulo the size and
/// steps by [`FNAT_STEP_PRIME`] modulo the size: `i` in `0..size` visits
/// every pair once.
pub fn fnat_candidate(
    caddr: IpAddr,
    cport: u16,
    vport: u16,
    count: u32,
    port_min: u16,
    port_max: u16,
    i: u32,
) -> (u32, u16) {
    let a = addr16(caddr);
    let word = |j: usize| u32::from_ne_bytes([a[j], a[j + 1], a[j + 2], a[j + 3]]);
    let w = word(0) ^ word(4) ^ word(8) ^ word(12);
    let sport = u64::from(u16::from_ne_bytes(cport.to_be_bytes()));
    let dport = u64::from(u16::from_ne_bytes(vport.to_be_bytes()));
    let h = ((u64::from(w) << 32) | (sport << 16) | dport) ^ FNAT_SEED;
    let h = h.wrapping_mul(FNAT_MUL);
    let h = (h ^ (h >> 32)) as u32;
    let count = count.max(1);
    let range = (u32::from(port_max).saturating_sub(u32::from(port_min)) + 1).max(1);
    let size = u64::from(count * range);
    let step = u64::from(FNAT_STEP_PRIME) % size;
    let j = ((u64::from(h) % size + u64::from(i) * step) % size) as u32;
    (j % count, (u32::from(port_min) + j / count) as u16)
}
