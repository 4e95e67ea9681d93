//! The director: virtual services, their real servers, the connection table
//! and persistence, driven by packets and control operations — the sans-IO
//! equivalent of the kernel's `ip_vs_core.c` + `ip_vs_ctl.c` + `ip_vs_conn.c`.
//!
//! A data plane hands every packet's metadata to [`Ipvs::process`] and acts
//! on the [`Verdict`]; the control plane calls the operations that mirror
//! `ipvsadm -A -E -D -C -a -e -d -Z --set`. Time is always an argument, and
//! [`Ipvs::expire`] must be called when [`Ipvs::next_deadline`] passes.
//!
//! Behaviour follows the kernel (spec §1.15, §2.4, §3) with these documented
//! differences:
//! * No netfilter conntrack exists here, so reusing a client port of a
//!   TIME_WAIT connection reschedules at once instead of dropping the first
//!   SYN for a second (spec §8.1).
//! * [`Tunables::drain_deleted`] (rvs extension, off by default) keeps
//!   forwarding established connections of a deleted real server until they
//!   end, instead of dropping their packets (spec §8.3).
//! * The connection table has a capacity bound; when it is full the entry
//!   with the earliest deadline is evicted and counted ([`Ipvs::evictions`]).
//! * FTP helpers and `cache_bypass` are not implemented.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::conn::{Addr, Conn, ConnFlags, ConnId, ConnKey, ConnTable, ConnTableConfig};
use crate::dest::{Dest, DestId};
use crate::model::{
    AddrFamily, DestConfig, ForwardMethod, LocalAddrRange, PersistenceEngine, Protocol,
    ServiceConfig, ServiceKey, check_family,
};
use crate::pe_sip;
use crate::sched::{
    Algorithm, ListChange, SchedError, SchedInput, SchedParams, Scheduler, new_scheduler,
};
use crate::state::{Direction, SctpEvent, SctpState, TcpFlags, TcpState, Timeouts};
use crate::stats::{Counters, Estimator, QuicLbCounters, Rates};
use crate::time::Instant;

mod control;
mod expiry;
mod mirror;
mod packet;
mod proxied;

/// Sentinel for "no dest" / "no controlling template" in [`Conn`].
const NONE: u32 = u32::MAX;

/// Why a control operation failed. The state is unchanged whenever one of
/// these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum CtlError {
    /// `-A` of a service that exists (ipvsadm: "Service already exists").
    #[error("Service already exists")]
    ServiceExists,
    /// The service named does not exist (ipvsadm: "No such service" /
    /// "Service not defined").
    #[error("No such service")]
    NoService,
    /// `-a` of a real server already in the service.
    #[error("Destination already exists")]
    DestExists,
    /// `-e`/`-d` of a real server not in the service.
    #[error("No such destination")]
    NoDest,
    /// Unknown scheduler or persistence engine.
    #[error("Scheduler or persistence engine not found")]
    SchedulerNotFound,
    /// A value out of range (weight > 65535, lower threshold above upper).
    #[error("{0}")]
    Range(String),
    /// The request is invalid for this service (e.g. more real servers than
    /// Maglev slots, or a real server of another family that is not a tunnel).
    #[error("Invalid operation: {0}")]
    Invalid(String),
    /// The data plane in use cannot carry this (e.g. a fwmark service on the
    /// XDP data plane); the text says why.
    #[error("Not supported by this data plane: {0}")]
    Unsupported(String),
    /// `--add-laddr` of an address the service's local address pool already
    /// holds (or a range overlapping one of its entries).
    #[error("Local address already exists")]
    LaddrExists,
    /// `--del-laddr` of an entry the service's pool does not hold.
    #[error("No such local address")]
    NoLaddr,
    /// The service belongs to another source of desired state (a
    /// configuration file, the Kubernetes watcher, the HTTP API), which
    /// alone changes it; the text names the service and its owner.
    #[error("{0}")]
    Owned(String),
}

impl From<SchedError> for CtlError {
    fn from(e: SchedError) -> Self {
        match e {
            SchedError::NotFound(_) => CtlError::SchedulerNotFound,
            other => CtlError::Invalid(other.to_string()),
        }
    }
}

/// The sysctls of `net.ipv4.vs.*` that change the packet path, plus rvs
/// extensions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// `expire_nodest_conn`: expire a connection whose real server is gone
    /// (or quiesced, for a new-connection packet) and reschedule.
    pub expire_nodest_conn: bool,
    /// `expire_quiescent_template`: a persistence template pointing at a
    /// weight-0 server is invalid, so persistence is broken on quiescing.
    pub expire_quiescent_template: bool,
    /// `conn_reuse_mode` (default 1): bit 0 reschedules a SYN that hits a
    /// TIME_WAIT/CLOSE connection, bit 1 also FIN_WAIT without output (DR).
    pub conn_reuse_mode: u8,
    /// `sloppy_tcp`: create connections on any non-RST TCP packet.
    pub sloppy_tcp: bool,
    /// `sloppy_sctp`: create connections on any non-ABORT SCTP packet.
    pub sloppy_sctp: bool,
    /// `secure_tcp`: use the SYN-flood hardened TCP state table.
    pub secure_tcp: bool,
    /// rvs: keep forwarding packets of connections whose real server was
    /// deleted, so they can finish (the kernel drops them).
    pub drain_deleted: bool,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            expire_nodest_conn: false,
            expire_quiescent_template: false,
            conn_reuse_mode: 1,
            sloppy_tcp: false,
            sloppy_sctp: false,
            secure_tcp: false,
            drain_deleted: false,
        }
    }
}

/// Configuration of a director instance.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IpvsConfig {
    /// Maximum tracked connections (templates included).
    pub conn_capacity: usize,
    /// Seed for the connection hash and the `twos` generator; choose it at
    /// random in production so clients cannot engineer collisions.
    pub seed: u64,
    /// Sysctl-like behaviour switches.
    pub tunables: Tunables,
    /// Reserve the connection table for `conn_capacity` entries up front
    /// (steadier latency and fewer bytes per entry at scale, see the `conn`
    /// module) instead of growing it on demand.
    pub preallocate: bool,
}

impl Default for IpvsConfig {
    fn default() -> Self {
        IpvsConfig {
            conn_capacity: 1 << 20,
            seed: 0x5EED_F1B5,
            tunables: Tunables::default(),
            preallocate: false,
        }
    }
}

/// Transport-specific facts of a packet that drive the state machines.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP with its flags.
    Tcp(TcpFlags),
    /// UDP.
    Udp,
    /// SCTP with the event its first chunk maps to.
    Sctp(SctpEvent),
}

impl L4 {
    fn protocol(&self) -> Protocol {
        match self {
            L4::Tcp(_) => Protocol::Tcp,
            L4::Udp => Protocol::Udp,
            L4::Sctp(_) => Protocol::Sctp,
        }
    }
}

/// What the director needs to know about one packet.
#[derive(Copy, Clone, Debug)]
pub struct Packet<'a> {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// Transport protocol facts.
    pub l4: L4,
    /// Firewall mark, 0 for none.
    pub fwmark: u32,
    /// Length in bytes, for the byte counters.
    pub len: u32,
    /// Transport payload (needed only by persistence engines; may be empty).
    pub payload: &'a [u8],
}

impl Packet<'_> {
    /// The forward lookup key of the connection this packet would belong to
    /// if it came from a client.
    pub(crate) fn conn_key(&self) -> ConnKey {
        ConnKey {
            protocol: self.l4.protocol().number(),
            af: AddrFamily::of(&self.src),
            caddr: Addr::from_ip(self.src),
            cport: self.sport,
            vaddr: Addr::from_ip(self.dst),
            vport: self.dport,
        }
    }
}

/// Where to send a packet and how.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The connection entry (`None` for one-packet scheduling, which keeps no entry).
    pub conn: Option<ConnId>,
    /// The real server.
    pub dest: DestId,
    /// Real server address.
    pub daddr: IpAddr,
    /// Real server port (rewrite target for NAT).
    pub dport: u16,
    /// The virtual address and port the client used (rewrite source for NAT replies).
    pub vaddr: IpAddr,
    /// See `vaddr`.
    pub vport: u16,
    /// Forwarding method.
    pub method: ForwardMethod,
    /// True when this packet created the connection.
    pub new: bool,
}

/// One flow of a packet data plane that schedules by itself, as it reports
/// it to [`Ipvs::mirror_conn`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MirroredConn {
    /// Transport protocol (a fwmark service's template is keyed by
    /// protocol 0, IPPROTO_IP, whatever this says).
    pub protocol: Protocol,
    /// Client address and port.
    pub client: std::net::SocketAddr,
    /// Virtual address and port the client used.
    pub vip: std::net::SocketAddr,
    /// The real server the data plane chose.
    pub dest: DestId,
    /// Protocol state (`TcpState`/`SctpState` as u8; 0 for UDP); for a
    /// template, 1 when it is assured (the kernel's template state
    /// `IP_VS_CTPL_S_ASSURED`), else 0.
    pub state: u8,
    /// A reply was seen (NAT): the connection leaves the INPUT-ONLY table.
    pub output_seen: bool,
    /// Time left before the flow expires if idle.
    pub idle_left: Duration,
    /// A persistence template (`client` is the masked client network with
    /// port 0; `vip`'s port is 0 for a port-zero service).
    pub template: bool,
    /// FULLNAT: the local address and port the flow reaches its real
    /// server from, when known (a synced flow carries its master's pair,
    /// which the backup keeps: `-Lcn` shows it, the data plane reuses it).
    /// `None` leaves an entry's recorded pair as it is.
    pub local: Option<std::net::SocketAddr>,
}

/// Why a packet was dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The connection's real server was deleted (kernel default behaviour).
    DestUnavailable,
    /// The connection table is full and nothing could be evicted.
    TableFull,
}

/// The decision for one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Client → real server: forward with `method`.
    Forward(Forward),
    /// Real server → client reply of a NAT connection: rewrite the source to
    /// `vaddr:vport` and send to the client.
    Reply(Forward),
    /// Not for a virtual service (or not a packet that may start a
    /// connection): let the host stack have it.
    Pass,
    /// Drop it.
    Drop(DropReason),
    /// A virtual service matched but no real server is available: drop and
    /// answer with ICMP port unreachable (`ip_vs_leave`).
    Reject,
}

/// A virtual service with its real servers in IPVS list order.
#[derive(Debug)]
pub struct Service {
    key: ServiceKey,
    config: ServiceConfig,
    dests: Vec<Dest>,
    sched: Box<dyn Algorithm>,
    stats: Counters,
    est: Estimator,
    laddrs: Vec<LocalAddrRange>,
    quic_lb: QuicLbCounters,
}

impl Service {
    /// The FULLNAT local address pool, in the order entries were added.
    pub fn laddrs(&self) -> &[LocalAddrRange] {
        &self.laddrs
    }
    /// The service's identity.
    pub fn key(&self) -> &ServiceKey {
        &self.key
    }
    /// The service's options.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }
    /// Real servers in list order (newest first).
    pub fn dests(&self) -> &[Dest] {
        &self.dests
    }
    /// Cumulative counters.
    pub fn stats(&self) -> &Counters {
        &self.stats
    }
    /// Estimated rates.
    pub fn rates(&self) -> Rates {
        self.est.rates()
    }
    /// How its datagrams were routed by QUIC-LB (zero without configs).
    pub fn quic_lb_counters(&self) -> &QuicLbCounters {
        &self.quic_lb
    }
    fn find_dest(&self, addr: IpAddr, port: u16) -> Option<usize> {
        self.dests
            .iter()
            .position(|d| d.config.addr == addr && d.config.port == port)
    }
}

/// Where a [`DestId`] lives now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum DestLoc {
    /// In `services[svc].dests[pos]`.
    Service { svc: u32, pos: u32 },
    /// Deleted but still referenced by connections: `trash[slot]`.
    Trash { slot: u32 },
    /// Unused id.
    Free,
}

#[derive(Debug)]
struct Trashed {
    dest: Dest,
    /// The service it was deleted from, so re-adding it resurrects it.
    svc_key: ServiceKey,
    /// Estimator of the dest (kept so a resurrected dest keeps its history).
    est: Estimator,
}

/// The director state.
#[derive(Debug)]
pub struct Ipvs {
    services: Vec<Option<Service>>,
    dest_est: Vec<Estimator>,
    /// Service index by key. foldhash: keys are configured, not chosen by
    /// clients, and this map is read for every new connection.
    by_key: HashMap<ServiceKey, u32, foldhash::fast::FixedState>,
    fwmark_services: usize,
    locator: Vec<DestLoc>,
    free_ids: Vec<u32>,
    trash: Vec<Option<Trashed>>,
    conns: ConnTable,
    timeouts: Timeouts,
    tunables: Tunables,
    seed: u64,
    total: Counters,
    total_est: Estimator,
    evictions: u64,
}

impl Ipvs {
    /// An empty director.
    pub fn new(config: IpvsConfig) -> Self {
        Ipvs {
            services: Vec::new(),
            dest_est: Vec::new(),
            by_key: HashMap::with_hasher(foldhash::fast::FixedState::default()),
            fwmark_services: 0,
            locator: Vec::new(),
            free_ids: Vec::new(),
            trash: Vec::new(),
            conns: {
                let cfg = ConnTableConfig {
                    capacity: config.conn_capacity,
                    hash_seed: config.seed,
                };
                if config.preallocate {
                    ConnTable::new(cfg)
                } else {
                    ConnTable::with_lazy_reserve(cfg)
                }
            },
            timeouts: Timeouts::default(),
            tunables: config.tunables,
            seed: config.seed,
            total: Counters::default(),
            total_est: Estimator::default(),
            evictions: 0,
        }
    }

    // ------------------------------------------------------------------
    // Queries
    // ------------------------------------------------------------------

    /// Every service, in no particular order (front ends sort as ipvsadm does).
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.iter().flatten()
    }

    /// One service.
    pub fn service(&self, key: &ServiceKey) -> Option<&Service> {
        self.service_index(key).map(|i| self.service_at(i))
    }

    /// A real server by id, wherever it is (in a service or in the trash).
    pub fn dest(&self, id: DestId) -> Option<&Dest> {
        match *self.locator.get(id.0 as usize)? {
            DestLoc::Service { svc, pos } => self.services[svc as usize]
                .as_ref()?
                .dests
                .get(pos as usize),
            DestLoc::Trash { slot } => self.trash[slot as usize].as_ref().map(|t| &t.dest),
            DestLoc::Free => None,
        }
    }

    /// Rates of a real server.
    pub fn dest_rates(&self, id: DestId) -> Rates {
        self.dest_est
            .get(id.0 as usize)
            .map(Estimator::rates)
            .unwrap_or_default()
    }

    /// Director-wide counters.
    pub fn total_stats(&self) -> &Counters {
        &self.total
    }

    /// Director-wide rates.
    pub fn total_rates(&self) -> Rates {
        self.total_est.rates()
    }

    /// The connection table (for `-Lc` listings and sync).
    pub fn conns(&self) -> &ConnTable {
        &self.conns
    }

    /// Connections evicted because the table was full.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// When [`Ipvs::expire`] has work next.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns.next_deadline()
    }

    /// Run the rate estimators (call at least every 2 s).
    pub fn update_estimators(&mut self, now: Instant) {
        for svc in self.services.iter_mut().flatten() {
            svc.est.update(now, &svc.stats);
            for d in &svc.dests {
                self.dest_est[d.id.0 as usize].update(now, &d.stats);
            }
        }
        self.total_est.update(now, &self.total);
    }

    // ------------------------------------------------------------------
    // Internals
    // ------------------------------------------------------------------

    fn make_scheduler(&self, config: &ServiceConfig) -> Result<Box<dyn Algorithm>, CtlError> {
        let params = SchedParams {
            flags: config.flags,
            mh_table_size: config.mh_table_size,
            seed: self.seed,
        };
        Ok(new_scheduler(config.scheduler, &params)?)
    }

    fn service_index(&self, key: &ServiceKey) -> Option<usize> {
        self.by_key.get(key).map(|&i| i as usize)
    }

    fn service_at(&self, idx: usize) -> &Service {
        self.services[idx]
            .as_ref()
            .expect("service index from by_key is live")
    }

    fn service_at_mut(&mut self, idx: usize) -> &mut Service {
        self.services[idx]
            .as_mut()
            .expect("service index from by_key is live")
    }

    /// Service lookup order of `ip_vs_service_find`: fwmark, exact, port zero.
    fn find_service(&self, pkt: &Packet<'_>) -> Option<usize> {
        let af = AddrFamily::of(&pkt.dst);
        if pkt.fwmark != 0
            && self.fwmark_services > 0
            && let Some(i) = self.service_index(&ServiceKey::Fwmark {
                mark: pkt.fwmark,
                af,
            })
        {
            return Some(i);
        }
        let protocol = pkt.l4.protocol();
        self.service_index(&ServiceKey::Addr {
            protocol,
            addr: pkt.dst,
            port: pkt.dport,
        })
        .or_else(|| {
            self.service_index(&ServiceKey::Addr {
                protocol,
                addr: pkt.dst,
                port: 0,
            })
        })
    }

    fn alloc_dest_id(&mut self) -> DestId {
        match self.free_ids.pop() {
            Some(i) => DestId(i),
            None => {
                self.locator.push(DestLoc::Free);
                self.dest_est.push(Estimator::default());
                DestId(self.locator.len() as u32 - 1)
            }
        }
    }

    /// Refresh the locator entries of a service after its list changed.
    fn relocate(&mut self, svc_idx: usize) {
        let Some(svc) = self.services[svc_idx].as_ref() else {
            return;
        };
        for (pos, d) in svc.dests.iter().enumerate() {
            self.locator[d.id.0 as usize] = DestLoc::Service {
                svc: svc_idx as u32,
                pos: pos as u32,
            };
        }
    }

    fn trash_dest(&mut self, mut dest: Dest, svc_key: ServiceKey) {
        dest.available = false;
        let id = dest.id;
        if dest.active + dest.inactive + dest.persist == 0 {
            self.free_dest(id);
            return;
        }
        let est = std::mem::take(&mut self.dest_est[id.0 as usize]);
        let t = Trashed { dest, svc_key, est };
        let slot = put_in_free_slot(&mut self.trash, t);
        self.locator[id.0 as usize] = DestLoc::Trash { slot: slot as u32 };
    }

    fn free_dest(&mut self, id: DestId) {
        self.locator[id.0 as usize] = DestLoc::Free;
        self.dest_est[id.0 as usize] = Estimator::default();
        self.free_ids.push(id.0);
    }

    /// A connection to `id` turned active (`active`) or inactive: move it
    /// from one of the server's counters to the other.
    fn move_between_counts(&mut self, id: DestId, active: bool) {
        self.with_dest(id, |d| {
            if active {
                d.inactive = d.inactive.saturating_sub(1);
                d.active += 1;
            } else {
                d.active = d.active.saturating_sub(1);
                d.inactive += 1;
            }
        });
    }

    /// Mutate a dest wherever it lives, then let its scheduler re-index it;
    /// a trashed dest nobody references any more is freed.
    fn with_dest(&mut self, id: DestId, f: impl FnOnce(&mut Dest)) {
        match self.locator.get(id.0 as usize).copied() {
            Some(DestLoc::Service { svc, pos }) => {
                if let Some(s) = self.services[svc as usize].as_mut() {
                    f(&mut s.dests[pos as usize]);
                    s.sched.counts_changed(&s.dests, pos as usize);
                }
            }
            Some(DestLoc::Trash { slot }) => {
                let done = match self.trash[slot as usize].as_mut() {
                    Some(t) => {
                        f(&mut t.dest);
                        t.dest.active + t.dest.inactive + t.dest.persist == 0
                    }
                    None => false,
                };
                if done {
                    self.trash[slot as usize] = None;
                    self.free_dest(id);
                }
            }
            _ => {}
        }
    }

    /// `ip_vs_bind_dest`.
    fn bind(&mut self, id: DestId, flags: ConnFlags) {
        self.with_dest(id, |d| {
            if flags.contains(ConnFlags::TEMPLATE) {
                d.persist += 1;
            } else if flags.contains(ConnFlags::INACTIVE) {
                d.inactive += 1;
            } else {
                d.active += 1;
            }
            d.after_bind();
        });
    }

    /// `ip_vs_unbind_dest`.
    fn unbind(&mut self, id: DestId, flags: ConnFlags) {
        self.with_dest(id, |d| {
            if flags.contains(ConnFlags::TEMPLATE) {
                d.persist = d.persist.saturating_sub(1);
            } else if flags.contains(ConnFlags::INACTIVE) {
                d.inactive = d.inactive.saturating_sub(1);
            } else {
                d.active = d.active.saturating_sub(1);
            }
            d.after_unbind();
        });
    }

    /// Count traffic on a dest, its service and the director total.
    fn count(&mut self, id: DestId, f: impl Fn(&mut Counters)) {
        f(&mut self.total);
        match self.locator.get(id.0 as usize).copied() {
            Some(DestLoc::Service { svc, pos }) => {
                if let Some(s) = self.services[svc as usize].as_mut() {
                    f(&mut s.stats);
                    f(&mut s.dests[pos as usize].stats);
                }
            }
            Some(DestLoc::Trash { slot }) => {
                if let Some(t) = self.trash[slot as usize].as_mut() {
                    f(&mut t.dest.stats);
                }
            }
            _ => {}
        }
    }
}

/// The forwarding-method bits of a connection to a real server.
fn conn_flags_of(method: &ForwardMethod) -> ConnFlags {
    ConnFlags::with_fwd(match method {
        ForwardMethod::Masq => ConnFlags::MASQ,
        ForwardMethod::Local => ConnFlags::LOCALNODE,
        ForwardMethod::Route => ConnFlags::DROUTE,
        ForwardMethod::Tunnel(_) => ConnFlags::TUNNEL,
        ForwardMethod::FullNat => ConnFlags::FULLNAT,
    })
}

/// `is_new_conn`: a TCP SYN or an SCTP INIT.
fn is_new_conn(pkt: &Packet<'_>) -> bool {
    match pkt.l4 {
        L4::Tcp(f) => f.syn,
        L4::Sctp(ev) => ev == SctpEvent::Init,
        L4::Udp => false,
    }
}

/// Store `v` in the first empty slot of `slots` (appending one when none
/// is empty) and return its index: services and trashed dests keep their
/// index for life, so freed slots are reused rather than compacted.
fn put_in_free_slot<T>(slots: &mut Vec<Option<T>>, v: T) -> usize {
    match slots.iter().position(Option::is_none) {
        Some(i) => {
            slots[i] = Some(v);
            i
        }
        None => {
            slots.push(Some(v));
            slots.len() - 1
        }
    }
}

/// Fwmark templates carry the mark as their "virtual address".
fn fwmark_addr(mark: u32) -> Addr {
    Addr::from_ip(IpAddr::V4(Ipv4Addr::from(mark)))
}

fn validate_dest(key: &ServiceKey, d: &DestConfig) -> Result<(), CtlError> {
    if d.weight > 65535 {
        return Err(CtlError::Range("server weight out of range".into()));
    }
    if d.l_threshold > d.u_threshold {
        return Err(CtlError::Range(
            "lower threshold is higher than upper threshold".into(),
        ));
    }
    // The family rule in rvsadm's words (CtlError::Invalid adds
    // "Invalid operation: ").
    check_family(key.af(), d.addr, &d.forward).map_err(|e| CtlError::Invalid(e.to_string()))
}

fn quic_err(e: crate::model::QuicLbError) -> CtlError {
    CtlError::Invalid(e.to_string())
}

fn check_dest_count(config: &ServiceConfig, n: usize) -> Result<(), CtlError> {
    if config.scheduler == Scheduler::Mh && n > config.mh_table_size as usize {
        return Err(CtlError::Invalid(format!(
            "mh: {n} real servers exceed the table size {}",
            config.mh_table_size
        )));
    }
    Ok(())
}
