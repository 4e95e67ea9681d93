//! The connection table (ip_vs_conn.c): every tracked flow and persistence
//! template, their hash lookups, and their expiry timers.
//!
//! # Layout
//! * A slab (`Vec<Conn>`) holds the entries; a [`ConnId`] is a slab index.
//!   Freed slots are chained in a free list (through the entry's timer link)
//!   and reused, so ids stay dense and the slab never fragments.
//! * Two `hashbrown::HashTable<u32>` indexes store slab indices only (4 bytes
//!   plus one control byte per bucket); the hash is recomputed from the entry
//!   when the table must rehash, so no key is stored twice.
//!   - the **forward** index: `(protocol, af, caddr, cport, vaddr, vport,
//!     template?, pe_data if template)` — what the kernel's `ip_vs_conn_in_get`
//!     and `ip_vs_ct_in_get` look up. Templates and connections share the index
//!     but never match each other; a SIP template (`--pe sip`) matches only the
//!     same Call-ID.
//!   - the **reply** index: `(protocol, af, daddr, dport, caddr, cport)` for
//!     NAT (MASQ) connections, whose replies come back through the director
//!     (`ip_vs_conn_out_get`). Other methods never see replies, so they are not
//!     indexed there.
//! * Hashing is foldhash seeded with the driver's random
//!   [`ConnTableConfig::hash_seed`], so a client cannot craft colliding tuples
//!   (the kernel uses a random `ip_vs_conn_rnd` for the same reason).
//!
//! # Memory
//! `Conn` is 96 bytes. [`ConnTable::new`] reserves the slab and both indexes
//! for the configured capacity **up front**: the bound is known at start-up,
//! memory use is predictable, and no insert ever pays for a rehash of millions
//! of entries (a 10M-entry rehash stalls the data plane for tens of
//! milliseconds, exactly during the flood that filled the table). Untouched
//! slab pages are not resident until used. Measured with the `conn_table`
//! bench (`memory_bytes() / len()` at a full table): about 117 bytes per entry
//! at 1M and 113 at 10M, slab and both indexes included. [`ConnTable::with_lazy_reserve`]
//! grows on demand instead (for small tables and tests); it was measured at
//! 122 bytes per entry at 1M and 178 at 10M (doubling steps leave slack), and
//! its inserts were 30% slower because of the rehashes.
//!
//! # Expiry
//! A hierarchical timing wheel: 6 levels × 64 slots, 1 ms ticks (level `L`
//! slot spans 64^L ms; the wheel spans 2^36 ms ≈ 2.2 years, later deadlines
//! are parked at the top level and re-filed when their slot comes round).
//! Each slot is an intrusive doubly-linked list through `u32` links inside the
//! entry; a 64-bit occupancy bitmap per level finds the next non-empty slot
//! without scanning. There are no per-connection timer objects and no scans
//! of the table.
//!
//! Refreshing a connection on every packet ([`ConnTable::touch`]) only writes
//! its deadline: the entry stays in its slot (lazy reinsertion). When a slot
//! fires, entries whose deadline has moved on are re-filed, entries that are
//! due are moved to a pending list that [`ConnTable::poll_expired`] drains one
//! at a time. An entry's slot never lies after its deadline (a deadline moved
//! earlier re-files the entry at once), so expiry is never late, and each
//! entry is touched by the wheel at most once per level plus once per lazy
//! refresh: `poll_expired` is amortised O(1).
//!
//! # Eviction policy
//! When the table is full, the director may evict instead of refusing the new
//! connection. [`ConnTable::eviction_candidate`] names the victim: the entry
//! with the **earliest deadline** — entries already due first, then the
//! earliest timer slot. Under a SYN flood the half-open entries (SYN_RECV,
//! 60 s) therefore go before established connections (900 s), and idle
//! entries before busy ones (a refreshed entry's deadline is later). The
//! choice is exact to the millisecond for deadlines less than 64 ms away and
//! exact to 1/64 of the remaining time beyond (the slot granularity), which
//! separates every pair of IPVS state timeouts. Templates that still control
//! connections (`n_control > 0`) and entries held by a proxy's live socket
//! ([`ConnFlags::HELD`]) are never named: the kernel keeps the former alive
//! too ("expire later"). The kernel itself has no hard bound; it drops random
//! entries under memory pressure (`drop_entry` defense), which is both less
//! predictable and blind to state.

use core::fmt;
use core::hash::{BuildHasher, Hasher};
use core::time::Duration;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use foldhash::fast::FixedState;
use hashbrown::HashTable;

use crate::model::AddrFamily;
use crate::time::Instant;

mod wheel;
use wheel::{
    Expiration, LEVELS, MAX_AHEAD, PENDING, SLOT_BITS, SLOTS, Wheel, level_for, slot_range,
};

/// A compact address: IPv4 in the first 4 bytes and the rest zero, IPv6 in
/// all 16. The address family is stored beside it (one byte per conn instead
/// of a tagged `IpAddr` per address).
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub [u8; 16]);

impl Addr {
    /// The compact form of an address.
    pub fn from_ip(ip: IpAddr) -> Addr {
        match ip {
            IpAddr::V4(v4) => Addr::from(v4),
            IpAddr::V6(v6) => Addr::from(v6),
        }
    }

    /// The address, read as family `af`.
    pub fn to_ip(self, af: AddrFamily) -> IpAddr {
        match af {
            AddrFamily::Inet => {
                let [a, b, c, d, ..] = self.0;
                IpAddr::V4(Ipv4Addr::new(a, b, c, d))
            }
            AddrFamily::Inet6 => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }

    /// The address as one 128-bit word (for hashing).
    const fn word(self) -> u128 {
        u128::from_ne_bytes(self.0)
    }
}

impl From<IpAddr> for Addr {
    fn from(ip: IpAddr) -> Addr {
        Addr::from_ip(ip)
    }
}

impl From<Ipv4Addr> for Addr {
    fn from(ip: Ipv4Addr) -> Addr {
        let mut b = [0u8; 16];
        let [o0, o1, o2, o3] = ip.octets();
        b[0] = o0;
        b[1] = o1;
        b[2] = o2;
        b[3] = o3;
        Addr(b)
    }
}

impl From<Ipv6Addr> for Addr {
    fn from(ip: Ipv6Addr) -> Addr {
        Addr(ip.octets())
    }
}

impl fmt::Debug for Addr {
    /// Shown as IPv4 when only the first four bytes are used, else as IPv6.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0[4..].iter().all(|b| *b == 0) {
            write!(f, "{}", self.to_ip(AddrFamily::Inet))
        } else {
            write!(f, "{}", self.to_ip(AddrFamily::Inet6))
        }
    }
}

/// Index of a connection in the table (stable while the entry lives; reused
/// after removal).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// Connection flags. The low 3 bits are the forwarding method, as the
/// kernel's `IP_VS_CONN_F_FWD_MASK`; the other bits use the kernel's
/// positions where it has them in 16 bits (`SYNC` 0x20, `NOOUTPUT` 0x80,
/// `INACTIVE` 0x100, `TEMPLATE` 0x1000, `ONE_PACKET` 0x2000) and 0x4000 for
/// `ASSURED` (a kernel flag above 16 bits).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConnFlags(pub u16);

impl ConnFlags {
    /// Mask of the forwarding-method field.
    pub const FWD_MASK: u16 = 0x0007;
    /// Forwarding method: NAT.
    pub const MASQ: u16 = 0;
    /// Forwarding method: the director itself.
    pub const LOCALNODE: u16 = 1;
    /// Forwarding method: IP tunnel.
    pub const TUNNEL: u16 = 2;
    /// Forwarding method: direct routing.
    pub const DROUTE: u16 = 3;
    /// Forwarding method: cache bypass.
    pub const BYPASS: u16 = 4;
    /// Forwarding method: full NAT.
    pub const FULLNAT: u16 = 5;
    /// Created from a sync message.
    pub const SYNC: ConnFlags = ConnFlags(0x0020);
    /// No reply seen yet (INPUT_ONLY state table).
    pub const NOOUTPUT: ConnFlags = ConnFlags(0x0080);
    /// Counted in the dest's inactive connections.
    pub const INACTIVE: ConnFlags = ConnFlags(0x0100);
    /// A persistence template.
    pub const TEMPLATE: ConnFlags = ConnFlags(0x1000);
    /// One-packet scheduling (`-o`, UDP).
    pub const ONE_PACKET: ConnFlags = ConnFlags(0x2000);
    /// A template whose connection reached ESTABLISHED.
    pub const ASSURED: ConnFlags = ConnFlags(0x4000);
    /// rvs: the entry belongs to a live socket of a proxy data plane, which
    /// removes it when the socket closes; timers re-arm it and eviction
    /// never picks it.
    pub const HELD: ConnFlags = ConnFlags(0x8000);

    /// Flags with forwarding method `fwd` (one of the method constants) and nothing else.
    pub const fn with_fwd(fwd: u16) -> ConnFlags {
        ConnFlags(fwd & Self::FWD_MASK)
    }

    /// The forwarding method field.
    pub const fn fwd(self) -> u16 {
        self.0 & Self::FWD_MASK
    }

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: ConnFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union of two flag sets.
    pub const fn union(self, other: ConnFlags) -> ConnFlags {
        ConnFlags(self.0 | other.0)
    }

    /// `self` with the bits of `other` set.
    pub fn insert(&mut self, other: ConnFlags) {
        self.0 |= other.0;
    }

    /// `self` with the bits of `other` cleared.
    pub fn remove(&mut self, other: ConnFlags) {
        self.0 &= !other.0;
    }
}

/// The forward lookup key of a connection or template.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConnKey {
    /// IP protocol number (0 for fwmark templates).
    pub protocol: u8,
    /// Address family.
    pub af: AddrFamily,
    /// Client address (masked for templates).
    pub caddr: Addr,
    /// Client port (0 for templates).
    pub cport: u16,
    /// Virtual address (the fwmark, as an IPv4 address, for fwmark templates).
    pub vaddr: Addr,
    /// Virtual port.
    pub vport: u16,
}

/// List-link value meaning "no entry".
const NIL: u32 = u32::MAX;
/// Link values above this name a list head (`HEAD_BASE - list`), not an entry.
const HEAD_BASE: u32 = u32::MAX - 1;
/// Largest usable slab index + 1 (keeps list-head sentinels apart).
const MAX_ENTRIES: usize = (u32::MAX - 1024) as usize;

const TAG_LIVE: u8 = 1;
const TAG_REPLY: u8 = 2;
const TAG_ARMED: u8 = 4;
const TAG_PENDING: u8 = 8;
const TAG_PE: u8 = 16;
const TAG_LOCAL: u8 = 32;

/// A tracked connection or persistence template.
///
/// Key fields (protocol, af, addresses, ports, the TEMPLATE flag and the
/// forwarding method) must not be changed while the entry is in a
/// [`ConnTable`] except through [`ConnTable::rekey`] or
/// [`ConnTable::invalidate_template`], which keep the indexes right.
#[derive(Clone, Debug)]
pub struct Conn {
    /// IP protocol number.
    pub protocol: u8,
    /// Address family.
    pub af: AddrFamily,
    /// Protocol state (`TcpState`/`SctpState`/`UdpState` as u8).
    pub state: u8,
    /// Flags.
    pub flags: ConnFlags,
    /// Client address.
    pub caddr: Addr,
    /// Client port.
    pub cport: u16,
    /// Virtual address.
    pub vaddr: Addr,
    /// Virtual port.
    pub vport: u16,
    /// Real server address.
    pub daddr: Addr,
    /// Real server port.
    pub dport: u16,
    /// Firewall mark of the service (0 if none).
    pub fwmark: u32,
    /// Current idle timeout in milliseconds.
    pub timeout_ms: u32,
    /// `DestId.0` of the real server, `u32::MAX` if none.
    pub dest: u32,
    /// `ConnId.0` of the controlling template, `u32::MAX` if none.
    pub control: u32,
    /// Number of connections this template controls.
    pub n_control: u32,
    deadline: u64,
    next: u32,
    prev: u32,
    tag: u8,
}

impl Conn {
    /// A new entry for `key` going to `daddr:dport`, state 0, no dest, no
    /// controlling template.
    pub fn new(
        key: &ConnKey,
        daddr: Addr,
        dport: u16,
        flags: ConnFlags,
        timeout: Duration,
    ) -> Conn {
        Conn {
            protocol: key.protocol,
            af: key.af,
            state: 0,
            flags,
            caddr: key.caddr,
            cport: key.cport,
            vaddr: key.vaddr,
            vport: key.vport,
            daddr,
            dport,
            fwmark: 0,
            timeout_ms: duration_ms(timeout),
            dest: u32::MAX,
            control: u32::MAX,
            n_control: 0,
            deadline: 0,
            next: NIL,
            prev: NIL,
            tag: 0,
        }
    }

    /// The forward key.
    pub fn key(&self) -> ConnKey {
        ConnKey {
            protocol: self.protocol,
            af: self.af,
            caddr: self.caddr,
            cport: self.cport,
            vaddr: self.vaddr,
            vport: self.vport,
        }
    }

    /// True for a persistence template.
    pub fn is_template(&self) -> bool {
        self.flags.contains(ConnFlags::TEMPLATE)
    }

    /// A template's state as `ipvsadm -Lcn` names it: `ASSURED` once a
    /// connection it controls was established (the kernel's
    /// `IP_VS_CTPL_S_ASSURED`), `NONE` before.
    pub fn template_state_name(&self) -> &'static str {
        if self.flags.contains(ConnFlags::ASSURED) {
            "ASSURED"
        } else {
            "NONE"
        }
    }

    fn live(&self) -> bool {
        self.tag & TAG_LIVE != 0
    }

    fn wants_reply_index(&self) -> bool {
        !self.is_template() && self.flags.fwd() == ConnFlags::MASQ
    }

    fn key_matches(&self, key: &ConnKey) -> bool {
        self.protocol == key.protocol
            && self.af == key.af
            && self.caddr == key.caddr
            && self.cport == key.cport
            && self.vaddr == key.vaddr
            && self.vport == key.vport
    }
}

fn duration_ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// Configuration of a [`ConnTable`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConnTableConfig {
    /// Hard bound on entries (connections + templates).
    pub capacity: usize,
    /// Random seed chosen by the driver, so clients cannot engineer collisions.
    pub hash_seed: u64,
}

/// The table is at capacity.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("connection table full")]
pub struct TableFull;

/// The connection table. See the module documentation.
#[derive(Clone)]
pub struct ConnTable {
    slab: Vec<Conn>,
    free_head: u32,
    len: usize,
    capacity: usize,
    hasher: FixedState,
    fwd: HashTable<u32>,
    reply: HashTable<u32>,
    pe: HashMap<u32, Box<[u8]>>,
    /// FULLNAT: the local address and port a connection's packets carry
    /// toward the real server (entries tagged `TAG_LOCAL`).
    local: HashMap<u32, (Addr, u16)>,
    wheel: Wheel,
}

impl fmt::Debug for ConnTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnTable")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// Hash of a 5-tuple-like key plus a discriminator, from 128-bit addresses.
fn hash_tuple(h: &FixedState, meta: u64, a: Addr, b: Addr, pe: Option<&[u8]>) -> u64 {
    let mut s = h.build_hasher();
    let (a, b) = (a.word(), b.word());
    s.write_u64(a as u64);
    s.write_u64((a >> 64) as u64);
    s.write_u64(b as u64);
    s.write_u64((b >> 64) as u64);
    s.write_u64(meta);
    if let Some(pe) = pe {
        s.write(pe);
    }
    s.finish()
}

fn af_bit(af: AddrFamily) -> u64 {
    match af {
        AddrFamily::Inet => 0,
        AddrFamily::Inet6 => 1,
    }
}

fn fwd_hash(h: &FixedState, key: &ConnKey, template: bool, pe: Option<&[u8]>) -> u64 {
    let meta = u64::from(key.protocol)
        | af_bit(key.af) << 8
        | u64::from(template) << 9
        | u64::from(key.cport) << 16
        | u64::from(key.vport) << 32;
    hash_tuple(
        h,
        meta,
        key.caddr,
        key.vaddr,
        if template { pe } else { None },
    )
}

fn reply_hash(
    h: &FixedState,
    protocol: u8,
    af: AddrFamily,
    src: Addr,
    sport: u16,
    dst: Addr,
    dport: u16,
) -> u64 {
    let meta =
        u64::from(protocol) | af_bit(af) << 8 | u64::from(sport) << 16 | u64::from(dport) << 32;
    hash_tuple(h, meta, src, dst, None)
}

fn entry_fwd_hash(h: &FixedState, pe: &HashMap<u32, Box<[u8]>>, i: u32, c: &Conn) -> u64 {
    let pe_data = if c.tag & TAG_PE != 0 {
        pe.get(&i).map(|b| &b[..])
    } else {
        None
    };
    fwd_hash(h, &c.key(), c.is_template(), pe_data)
}

fn entry_reply_hash(h: &FixedState, c: &Conn) -> u64 {
    reply_hash(h, c.protocol, c.af, c.daddr, c.dport, c.caddr, c.cport)
}

impl ConnTable {
    /// An empty table with slab and indexes reserved for `cfg.capacity`
    /// entries up front (see the module doc for why).
    pub fn new(cfg: ConnTableConfig) -> Self {
        Self::build(cfg, true)
    }

    /// An empty table that allocates as it grows (small tables, tests).
    pub fn with_lazy_reserve(cfg: ConnTableConfig) -> Self {
        Self::build(cfg, false)
    }

    fn build(cfg: ConnTableConfig, reserve: bool) -> Self {
        let capacity = cfg.capacity.min(MAX_ENTRIES);
        let n = if reserve { capacity } else { 0 };
        ConnTable {
            slab: Vec::with_capacity(n),
            free_head: NIL,
            len: 0,
            capacity,
            hasher: FixedState::with_seed(cfg.hash_seed),
            fwd: HashTable::with_capacity(n),
            reply: HashTable::with_capacity(n),
            pe: HashMap::new(),
            local: HashMap::new(),
            wheel: Wheel::new(),
        }
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hard bound on entries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Insert `conn` (with optional persistence-engine data, e.g. a SIP
    /// Call-ID) and arm its timer: deadline = `now` + `conn.timeout_ms`.
    ///
    /// The entry is indexed forward, and in the reply index when it is a NAT
    /// (MASQ) connection that is not a template. pe_data is part of a
    /// template's key; on a plain connection it is carried but not matched.
    /// Duplicate keys are not rejected (look up first).
    pub fn insert(
        &mut self,
        mut conn: Conn,
        pe_data: Option<&[u8]>,
        now: Instant,
    ) -> Result<ConnId, TableFull> {
        if self.len >= self.capacity {
            return Err(TableFull);
        }
        conn.tag = TAG_LIVE;
        conn.next = NIL;
        conn.prev = NIL;
        conn.deadline = now.as_millis().saturating_add(u64::from(conn.timeout_ms));
        let id = if self.free_head != NIL {
            let id = self.free_head;
            self.free_head = self.slab[id as usize].next;
            self.slab[id as usize] = conn;
            id
        } else {
            if self.slab.len() >= MAX_ENTRIES {
                return Err(TableFull);
            }
            let id = u32::try_from(self.slab.len()).map_err(|_| TableFull)?;
            self.slab.push(conn);
            id
        };
        if let Some(pe) = pe_data {
            self.pe.insert(id, pe.into());
            self.slab[id as usize].tag |= TAG_PE;
        }
        self.len += 1;
        self.index(id);
        self.arm(id);
        Ok(ConnId(id))
    }

    /// Add entry `id` to the forward (and, if it qualifies, reply) index.
    fn index(&mut self, id: u32) {
        let ConnTable {
            slab,
            hasher,
            fwd,
            reply,
            pe,
            ..
        } = self;
        let c = &slab[id as usize];
        let h = entry_fwd_hash(hasher, pe, id, c);
        fwd.insert_unique(h, id, |&i| entry_fwd_hash(hasher, pe, i, &slab[i as usize]));
        if c.wants_reply_index() {
            let h = entry_reply_hash(hasher, c);
            reply.insert_unique(h, id, |&i| entry_reply_hash(hasher, &slab[i as usize]));
            slab[id as usize].tag |= TAG_REPLY;
        }
    }

    /// Remove entry `id` from the indexes it is in.
    fn unindex(&mut self, id: u32) {
        let c = &self.slab[id as usize];
        let h = entry_fwd_hash(&self.hasher, &self.pe, id, c);
        if let Ok(e) = self.fwd.find_entry(h, |&i| i == id) {
            e.remove();
        }
        if c.tag & TAG_REPLY != 0 {
            let h = entry_reply_hash(&self.hasher, c);
            if let Ok(e) = self.reply.find_entry(h, |&i| i == id) {
                e.remove();
            }
            self.slab[id as usize].tag &= !TAG_REPLY;
        }
    }

    /// The non-template connection with this key.
    pub fn lookup(&self, key: &ConnKey) -> Option<ConnId> {
        let h = fwd_hash(&self.hasher, key, false, None);
        self.fwd
            .find(h, |&i| {
                let c = &self.slab[i as usize];
                !c.is_template() && c.key_matches(key)
            })
            .map(|&i| ConnId(i))
    }

    /// The template with this key and exactly this pe_data (`None` matches
    /// only templates without pe_data).
    pub fn lookup_template(&self, key: &ConnKey, pe_data: Option<&[u8]>) -> Option<ConnId> {
        let h = fwd_hash(&self.hasher, key, true, pe_data);
        self.fwd
            .find(h, |&i| {
                let c = &self.slab[i as usize];
                c.is_template() && c.key_matches(key) && self.pe_data(ConnId(i)) == pe_data
            })
            .map(|&i| ConnId(i))
    }

    /// The NAT connection a reply belongs to: `src:sport` is the real server
    /// (`daddr:dport`), `dst:dport` the client (`caddr:cport`).
    pub fn lookup_reply(
        &self,
        protocol: u8,
        af: AddrFamily,
        src: Addr,
        sport: u16,
        dst: Addr,
        dport: u16,
    ) -> Option<ConnId> {
        let h = reply_hash(&self.hasher, protocol, af, src, sport, dst, dport);
        self.reply
            .find(h, |&i| {
                let c = &self.slab[i as usize];
                c.protocol == protocol
                    && c.af == af
                    && c.daddr == src
                    && c.dport == sport
                    && c.caddr == dst
                    && c.cport == dport
            })
            .map(|&i| ConnId(i))
    }

    /// The entry `id`, if live.
    pub fn get(&self, id: ConnId) -> Option<&Conn> {
        self.slab.get(id.0 as usize).filter(|c| c.live())
    }

    /// Mutable access to entry `id`, if live. Callers must not change key
    /// fields (protocol, af, addresses, ports, TEMPLATE, forwarding method)
    /// through this: use [`ConnTable::rekey`].
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.slab.get_mut(id.0 as usize).filter(|c| c.live())
    }

    /// Change key fields of entry `id` with `f`, re-indexing it. Returns
    /// false if `id` is not live. The timer is not affected.
    pub fn rekey(&mut self, id: ConnId, f: impl FnOnce(&mut Conn)) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        self.unindex(id.0);
        f(&mut self.slab[id.0 as usize]);
        self.index(id.0);
        true
    }

    /// The persistence-engine data stored with entry `id`.
    pub fn pe_data(&self, id: ConnId) -> Option<&[u8]> {
        let c = self.get(id)?;
        if c.tag & TAG_PE == 0 {
            return None;
        }
        self.pe.get(&id.0).map(|b| &b[..])
    }

    /// Record the FULLNAT local address and port of entry `id` (what its
    /// packets carry as source toward the real server; `ipvsadm -Lcn`
    /// shows it). False when there is no such entry.
    pub fn set_local(&mut self, id: ConnId, addr: Addr, port: u16) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        self.local.insert(id.0, (addr, port));
        self.slab[id.0 as usize].tag |= TAG_LOCAL;
        true
    }

    /// The FULLNAT local address and port of entry `id`, if it has one.
    pub fn local(&self, id: ConnId) -> Option<(Addr, u16)> {
        let c = self.get(id)?;
        if c.tag & TAG_LOCAL == 0 {
            return None;
        }
        self.local.get(&id.0).copied()
    }

    /// Refresh entry `id`: deadline = `now` + its `timeout_ms`. O(1): the
    /// entry stays in its timer slot unless the deadline moved earlier (or
    /// the entry was detached by [`ConnTable::poll_expired`], which re-arms it).
    pub fn touch(&mut self, id: ConnId, now: Instant) {
        let Some(c) = self.get(id) else { return };
        let new = now.as_millis().saturating_add(u64::from(c.timeout_ms));
        self.set_deadline(id.0, new);
    }

    /// Set entry `id`'s timeout and deadline (`now + timeout`).
    pub fn set_timeout(&mut self, id: ConnId, timeout: Duration, now: Instant) {
        let Some(c) = self.get_mut(id) else { return };
        c.timeout_ms = duration_ms(timeout);
        let new = now.as_millis().saturating_add(u64::from(c.timeout_ms));
        self.set_deadline(id.0, new);
    }

    fn set_deadline(&mut self, id: u32, new: u64) {
        let c = &mut self.slab[id as usize];
        let old = c.deadline;
        c.deadline = new;
        let tag = c.tag;
        if tag & TAG_ARMED == 0 {
            self.arm(id);
        } else if new < old || tag & TAG_PENDING != 0 {
            // A slot must never lie after the deadline, and the pending list
            // holds only due entries: re-file.
            self.disarm(id);
            self.arm(id);
        }
    }

    /// Entry `id`'s deadline.
    pub fn deadline(&self, id: ConnId) -> Option<Instant> {
        self.get(id).map(|c| Instant::from_millis(c.deadline))
    }

    /// Make template `id` unmatchable (kernel `ip_vs_check_template`): it is
    /// re-hashed with `vport = dport = 0xffff` and `cport = 0`, and simply
    /// expires.
    pub fn invalidate_template(&mut self, id: ConnId) {
        self.rekey(id, |c| {
            c.vport = 0xffff;
            c.dport = 0xffff;
            c.cport = 0;
        });
    }

    /// Remove entry `id` and return it. Its slot is reused by later inserts.
    pub fn remove(&mut self, id: ConnId) -> Option<Conn> {
        self.get(id)?;
        let i = id.0;
        if self.slab[i as usize].tag & TAG_ARMED != 0 {
            self.disarm(i);
        }
        self.unindex(i);
        if self.slab[i as usize].tag & TAG_PE != 0 {
            self.pe.remove(&i);
        }
        if self.slab[i as usize].tag & TAG_LOCAL != 0 {
            self.local.remove(&i);
        }
        let c = &mut self.slab[i as usize];
        let mut out = c.clone();
        c.tag = 0;
        c.next = self.free_head;
        self.free_head = i;
        self.len -= 1;
        out.tag = 0;
        out.next = NIL;
        out.prev = NIL;
        Some(out)
    }

    /// A connection whose deadline is `<= now`, detached from the timer, or
    /// `None` when nothing is due. The caller must [`remove`](Self::remove)
    /// it or re-arm it with [`touch`](Self::touch) /
    /// [`set_timeout`](Self::set_timeout) (a template that still controls
    /// connections, say); an entry left detached never expires.
    /// Due entries come out in deadline order (entries due in the same
    /// millisecond in any order).
    pub fn poll_expired(&mut self, now: Instant) -> Option<ConnId> {
        let now = now.as_millis();
        loop {
            let head = self.wheel.heads[PENDING];
            if head != NIL {
                self.disarm(head);
                return Some(ConnId(head));
            }
            if !self.advance_one(now) {
                return None;
            }
        }
    }

    /// Fire the earliest slot if it starts at or before `now`; otherwise
    /// move the wheel's clock to `now` and return false.
    fn advance_one(&mut self, now: u64) -> bool {
        match self.wheel.next_expiration() {
            Some(exp) if exp.start <= now => {
                self.fire(exp);
                true
            }
            _ => {
                self.wheel.elapsed = self.wheel.elapsed.max(now);
                false
            }
        }
    }

    /// Take every entry of a slot and re-file it relative to the slot's
    /// start: due entries go to the pending list, refreshed ones to a later
    /// (usually finer) slot.
    fn fire(&mut self, exp: Expiration) {
        self.wheel.elapsed = self.wheel.elapsed.max(exp.start);
        let list = exp.level * SLOTS + exp.slot;
        let mut cur = self.wheel.heads[list];
        self.wheel.heads[list] = NIL;
        self.wheel.occupied[exp.level] &= !(1u64 << exp.slot);
        while cur != NIL {
            let next = self.slab[cur as usize].next;
            self.slab[cur as usize].tag &= !TAG_ARMED;
            self.arm(cur);
            cur = next;
        }
    }

    /// File entry `id` (not currently armed) by its deadline.
    fn arm(&mut self, id: u32) {
        let deadline = self.slab[id as usize].deadline;
        let elapsed = self.wheel.elapsed;
        let list = if deadline <= elapsed {
            self.slab[id as usize].tag |= TAG_PENDING;
            PENDING
        } else {
            let when = deadline.min(elapsed.saturating_add(MAX_AHEAD));
            let level = level_for(elapsed, when);
            let slot = ((when >> (SLOT_BITS as u64 * level as u64)) % SLOTS as u64) as usize;
            self.wheel.occupied[level] |= 1u64 << slot;
            level * SLOTS + slot
        };
        let head = self.wheel.heads[list];
        let c = &mut self.slab[id as usize];
        c.tag |= TAG_ARMED;
        c.prev = HEAD_BASE - list as u32;
        c.next = head;
        if head != NIL {
            self.slab[head as usize].prev = id;
        }
        self.wheel.heads[list] = id;
    }

    /// Unlink entry `id` (currently armed) from its timer list.
    fn disarm(&mut self, id: u32) {
        let c = &mut self.slab[id as usize];
        let (next, prev) = (c.next, c.prev);
        c.tag &= !(TAG_ARMED | TAG_PENDING);
        c.next = NIL;
        c.prev = NIL;
        if next != NIL {
            self.slab[next as usize].prev = prev;
        }
        if prev != NIL && prev >= HEAD_BASE - PENDING as u32 {
            let list = (HEAD_BASE - prev) as usize;
            self.wheel.heads[list] = next;
            if next == NIL && list < PENDING {
                self.wheel.occupied[list / SLOTS] &= !(1u64 << (list % SLOTS));
            }
        } else if prev != NIL {
            self.slab[prev as usize].next = next;
        }
    }

    /// The earliest pending deadline, or `None` with no armed entry. It may
    /// be earlier than any real deadline (slots of higher levels report
    /// their start, and refreshed entries are found late-filed), never later.
    /// When entries are already due it is at or before the last poll time.
    pub fn next_deadline(&self) -> Option<Instant> {
        let head = self.wheel.heads[PENDING];
        if head != NIL {
            return Some(Instant::from_millis(
                self.slab[head as usize].deadline.min(self.wheel.elapsed),
            ));
        }
        self.wheel
            .next_expiration()
            .map(|e| Instant::from_millis(e.start))
    }

    /// The eviction victim when the table is full (see "Eviction policy" in
    /// the module doc): the entry with the earliest deadline, skipping
    /// templates that still control connections. Does not remove it.
    pub fn eviction_candidate(&mut self, now: Instant) -> Option<ConnId> {
        // Move everything already due to the pending list first.
        let now = now.as_millis();
        while self.advance_one(now) {}
        // Bound on skipped busy templates, so a pathological table cannot
        // make one call expensive.
        let mut budget: u32 = 4096;
        let mut cur = self.wheel.heads[PENDING];
        while cur != NIL && budget > 0 {
            if !self.busy_template(cur) {
                return Some(ConnId(cur));
            }
            budget -= 1;
            cur = self.slab[cur as usize].next;
        }
        for level in 0..LEVELS {
            let mut skip = 0u32;
            while let Some(exp) = self.wheel.next_in_level(level, skip) {
                let now_slot = ((self.wheel.elapsed / slot_range(level)) % SLOTS as u64) as u32;
                skip = (exp.slot as u32 + SLOTS as u32 - now_slot) % SLOTS as u32 + 1;
                let end = exp.start.saturating_add(slot_range(level));
                let list = level * SLOTS + exp.slot;
                let mut best: Option<(u64, u32)> = None;
                let mut seen = 0u32;
                let mut cur = self.wheel.heads[list];
                while cur != NIL && budget > 0 && seen < 64 {
                    let next = self.slab[cur as usize].next;
                    let d = self.slab[cur as usize].deadline;
                    if d >= end {
                        // Refreshed since filed: re-file (to a later slot).
                        self.disarm(cur);
                        self.arm(cur);
                    } else if self.busy_template(cur) {
                        budget -= 1;
                    } else {
                        seen += 1;
                        if best.is_none_or(|(bd, _)| d < bd) {
                            best = Some((d, cur));
                        }
                    }
                    cur = next;
                }
                if let Some((_, id)) = best {
                    return Some(ConnId(id));
                }
                if budget == 0 {
                    return None;
                }
            }
        }
        None
    }

    /// Not evictable: a template still controlling connections, or an
    /// entry held by a proxy's live socket.
    fn busy_template(&self, id: u32) -> bool {
        let c = &self.slab[id as usize];
        (c.is_template() && c.n_control > 0) || c.flags.contains(ConnFlags::HELD)
    }

    /// Every live entry with its id, in slab order.
    pub fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.iter_slots(0, self.slab.len())
    }

    /// The live entries among slab positions `start..end` (clamped), for a
    /// walk of a large table a page at a time: positions are stable while
    /// an entry lives, so a walk from 0 to [`ConnTable::slots`] in pages sees
    /// every entry that lives throughout it.
    pub fn iter_slots(&self, start: usize, end: usize) -> impl Iterator<Item = (ConnId, &Conn)> {
        let end = end.min(self.slab.len());
        let start = start.min(end);
        self.slab[start..end]
            .iter()
            .enumerate()
            .filter(|(_, c)| c.live())
            .map(move |(i, c)| (ConnId((start + i) as u32), c))
    }

    /// Slab positions in use or free (the bound of [`ConnTable::iter_slots`]).
    pub fn slots(&self) -> usize {
        self.slab.len()
    }

    /// Bytes held by the slab, both indexes and the wheel (pe_data excluded).
    pub fn memory_bytes(&self) -> usize {
        self.slab.capacity() * core::mem::size_of::<Conn>()
            + self.fwd.allocation_size()
            + self.reply.allocation_size()
            + core::mem::size_of::<Wheel>()
    }
}

#[cfg(test)]
mod tests;
