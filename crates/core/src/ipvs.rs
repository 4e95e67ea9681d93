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
    ServiceConfig, ServiceKey,
};
use crate::pe_sip;
use crate::sched::{
    Algorithm, ListChange, SchedError, SchedInput, SchedParams, Scheduler, new_scheduler,
};
use crate::state::{Direction, SctpEvent, SctpState, TcpFlags, TcpState, Timeouts};
use crate::stats::{Counters, Estimator, QuicLbCounters, Rates};
use crate::time::Instant;

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
    /// Transport protocol.
    pub protocol: Protocol,
    /// Client address and port.
    pub client: std::net::SocketAddr,
    /// Virtual address and port the client used.
    pub vip: std::net::SocketAddr,
    /// The real server the data plane chose.
    pub dest: DestId,
    /// Protocol state (`TcpState`/`SctpState` as u8; 0 for UDP).
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
    // Control operations (ipvsadm commands)
    // ------------------------------------------------------------------

    /// `-A`: add a virtual service.
    pub fn add_service(&mut self, key: ServiceKey, config: ServiceConfig) -> Result<(), CtlError> {
        if self.by_key.contains_key(&key) {
            return Err(CtlError::ServiceExists);
        }
        config.check_quic_lb(&key).map_err(quic_err)?;
        let sched = self.make_scheduler(&config)?;
        let svc = Service {
            key,
            config,
            dests: Vec::new(),
            sched,
            stats: Counters::default(),
            est: Estimator::default(),
            laddrs: Vec::new(),
            quic_lb: QuicLbCounters::default(),
        };
        let idx = put_in_free_slot(&mut self.services, svc);
        self.by_key.insert(key, idx as u32);
        if key.is_fwmark() {
            self.fwmark_services += 1;
        }
        Ok(())
    }

    /// Add a service together with its real servers in one step, as a
    /// configuration file states them: `dests` in the order they would be
    /// added with `-a` (so the last one heads the list). All or nothing, and
    /// the scheduler builds its tables once instead of once per server.
    pub fn add_service_with(
        &mut self,
        key: ServiceKey,
        config: ServiceConfig,
        dests: &[DestConfig],
    ) -> Result<(), CtlError> {
        if self.by_key.contains_key(&key) {
            return Err(CtlError::ServiceExists);
        }
        for (i, d) in dests.iter().enumerate() {
            validate_dest(&key, d)?;
            if dests[..i]
                .iter()
                .any(|x| x.addr == d.addr && x.port == d.port)
            {
                return Err(CtlError::DestExists);
            }
        }
        check_dest_count(&config, dests.len())?;
        config.check_quic_lb(&key).map_err(quic_err)?;
        config.check_quic_server_ids(dests).map_err(quic_err)?;
        // Nothing below can fail once the service itself is accepted.
        self.add_service(key, config)?;
        let list: Vec<Dest> = dests
            .iter()
            .rev()
            .map(|d| {
                let id = self.alloc_dest_id();
                Dest::new(id, *d)
            })
            .collect();
        let idx = self.service_index(&key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        svc.dests = list;
        svc.sched.update(&svc.dests, ListChange::Reset);
        self.relocate(idx);
        Ok(())
    }

    /// `-E`: change a service's options; its real servers and connections stay.
    pub fn edit_service(
        &mut self,
        key: &ServiceKey,
        config: ServiceConfig,
    ) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        config.check_quic_lb(key).map_err(quic_err)?;
        config
            .check_quic_server_ids(self.service_at(idx).dests.iter().map(|d| &d.config))
            .map_err(quic_err)?;
        let new_sched = {
            let svc = self.service_at(idx);
            if svc.config.scheduler != config.scheduler
                || svc.config.flags != config.flags
                || svc.config.mh_table_size != config.mh_table_size
            {
                let mut s = self.make_scheduler(&config)?;
                check_dest_count(&config, svc.dests.len())?;
                s.update(&svc.dests, ListChange::Reset);
                Some(s)
            } else {
                None
            }
        };
        let svc = self.service_at_mut(idx);
        if let Some(s) = new_sched {
            svc.sched = s;
        }
        svc.config = config;
        Ok(())
    }

    /// `-D`: delete a service. Its real servers move to the trash while
    /// connections still use them.
    pub fn del_service(&mut self, key: &ServiceKey) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        self.by_key.remove(key);
        if key.is_fwmark() {
            self.fwmark_services -= 1;
        }
        let svc = self.services[idx].take();
        if let Some(svc) = svc {
            for dest in svc.dests {
                self.trash_dest(dest, svc.key);
            }
        }
        Ok(())
    }

    /// `-C`: delete every service. Connections stay until they expire.
    pub fn flush(&mut self) {
        let keys: Vec<ServiceKey> = self.by_key.keys().copied().collect();
        for k in keys {
            let _ = self.del_service(&k);
        }
    }

    /// `-a`: add a real server at the head of the service's list. A real
    /// server deleted earlier and still referenced by connections is
    /// resurrected with its counters.
    pub fn add_dest(&mut self, key: &ServiceKey, config: DestConfig) -> Result<DestId, CtlError> {
        validate_dest(key, &config)?;
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at(idx);
        if svc.find_dest(config.addr, config.port).is_some() {
            return Err(CtlError::DestExists);
        }
        check_dest_count(&svc.config, svc.dests.len() + 1)?;
        svc.config
            .check_quic_server_ids(svc.dests.iter().map(|d| &d.config).chain([&config]))
            .map_err(quic_err)?;
        let resurrect = self.trash.iter().position(|t| {
            t.as_ref().is_some_and(|t| {
                t.svc_key == *key
                    && t.dest.config.addr == config.addr
                    && t.dest.config.port == config.port
            })
        });
        let dest = match resurrect {
            Some(slot) => {
                let t = self.trash[slot].take().ok_or(CtlError::NoDest)?;
                let mut d = t.dest;
                d.available = true;
                d.apply_edit(config);
                self.dest_est[d.id.0 as usize] = t.est;
                d
            }
            None => {
                let id = self.alloc_dest_id();
                Dest::new(id, config)
            }
        };
        let id = dest.id;
        let svc = self.service_at_mut(idx);
        svc.dests.insert(0, dest);
        svc.sched.update(&svc.dests, ListChange::Added(0));
        self.relocate(idx);
        Ok(id)
    }

    /// `-e`: edit a real server's weight, method and thresholds.
    pub fn edit_dest(&mut self, key: &ServiceKey, config: DestConfig) -> Result<(), CtlError> {
        validate_dest(key, &config)?;
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        let pos = svc
            .find_dest(config.addr, config.port)
            .ok_or(CtlError::NoDest)?;
        svc.config
            .check_quic_server_ids(
                svc.dests.iter().enumerate().map(
                    |(i, d)| {
                        if i == pos { &config } else { &d.config }
                    },
                ),
            )
            .map_err(quic_err)?;
        svc.dests[pos].apply_edit(config);
        svc.sched.update(&svc.dests, ListChange::Edited(pos));
        Ok(())
    }

    /// `-d`: delete a real server. Connections keep referring to it (see
    /// [`Tunables::drain_deleted`] and `expire_nodest_conn`).
    pub fn del_dest(&mut self, key: &ServiceKey, addr: IpAddr, port: u16) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        let pos = svc.find_dest(addr, port).ok_or(CtlError::NoDest)?;
        let dest = svc.dests.remove(pos);
        svc.sched.update(&svc.dests, ListChange::Removed(pos));
        let svc_key = svc.key;
        self.relocate(idx);
        self.trash_dest(dest, svc_key);
        Ok(())
    }

    /// Record the FULLNAT local address and port of connection `id`, as
    /// the data plane that chose them reports it (for `ipvsadm -Lcn`).
    /// False when there is no such connection.
    pub fn set_conn_local(&mut self, id: ConnId, local: std::net::SocketAddr) -> bool {
        self.conns
            .set_local(id, Addr::from_ip(local.ip()), local.port())
    }

    /// `--add-laddr -z ADDR`: add an address or range to the service's
    /// FULLNAT local address pool. The pool is the service's, not its
    /// options': `-E` leaves it as it is. An entry of the other family, or
    /// one sharing an address with an entry, is refused.
    pub fn add_laddr(&mut self, key: &ServiceKey, range: LocalAddrRange) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let checked = LocalAddrRange::new(range.first, range.last)
            .map_err(|e| CtlError::Invalid(e.to_string()))?;
        let svc = self.service_at_mut(idx);
        if checked.af() != svc.key.af() {
            return Err(CtlError::Invalid(format!(
                "local address {checked} is not of the service's family"
            )));
        }
        if svc.laddrs.iter().any(|l| l.overlaps(&checked)) {
            return Err(CtlError::LaddrExists);
        }
        svc.laddrs.push(checked);
        Ok(())
    }

    /// `--del-laddr -z ADDR`: remove an entry of the pool, named exactly as
    /// it was added (a single address or the same range).
    pub fn del_laddr(&mut self, key: &ServiceKey, range: LocalAddrRange) -> Result<(), CtlError> {
        let idx = self.service_index(key).ok_or(CtlError::NoService)?;
        let svc = self.service_at_mut(idx);
        let pos = svc
            .laddrs
            .iter()
            .position(|l| *l == range)
            .ok_or(CtlError::NoLaddr)?;
        svc.laddrs.remove(pos);
        Ok(())
    }

    /// `-Z`: zero the counters of one service (and its real servers), or of
    /// everything.
    pub fn zero(&mut self, key: Option<&ServiceKey>) -> Result<(), CtlError> {
        let idxs: Vec<usize> = match key {
            Some(k) => vec![self.service_index(k).ok_or(CtlError::NoService)?],
            None => (0..self.services.len()).collect(),
        };
        for idx in idxs {
            let Some(svc) = self.services[idx].as_mut() else {
                continue;
            };
            svc.stats = Counters::default();
            svc.est.reset(&svc.stats);
            svc.quic_lb = QuicLbCounters::default();
            for d in &mut svc.dests {
                d.stats = Counters::default();
                self.dest_est[d.id.0 as usize].reset(&d.stats);
            }
        }
        if key.is_none() {
            self.total = Counters::default();
            self.total_est.reset(&self.total);
        }
        Ok(())
    }

    /// `--set tcp tcpfin udp` (seconds; 0 leaves a value unchanged).
    pub fn set_timeouts(&mut self, tcp: u32, tcpfin: u32, udp: u32) {
        self.timeouts.set_ipvsadm(tcp, tcpfin, udp);
    }

    /// The protocol timeouts in force.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Mutable access to every per-state timeout (keepalived's `lvs_timeouts`
    /// and rvs options go beyond the three of `--set`).
    pub fn timeouts_mut(&mut self) -> &mut Timeouts {
        &mut self.timeouts
    }

    /// The behaviour switches in force.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Change behaviour switches.
    pub fn set_tunables(&mut self, tunables: Tunables) {
        self.tunables = tunables;
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
    // Packet path
    // ------------------------------------------------------------------

    /// Decide what to do with one packet: a client packet of a known or new
    /// connection, a NAT reply, or neither.
    pub fn process(&mut self, now: Instant, pkt: &Packet<'_>) -> Verdict {
        let af = AddrFamily::of(&pkt.src);
        let proto = pkt.l4.protocol().number();
        let key = ConnKey {
            protocol: proto,
            af,
            caddr: Addr::from_ip(pkt.src),
            cport: pkt.sport,
            vaddr: Addr::from_ip(pkt.dst),
            vport: pkt.dport,
        };
        if let Some(id) = self.conns.lookup(&key) {
            return self.process_known(now, pkt, id);
        }
        let (src, dst) = (Addr::from_ip(pkt.src), Addr::from_ip(pkt.dst));
        if let Some(id) = self
            .conns
            .lookup_reply(proto, af, src, pkt.sport, dst, pkt.dport)
        {
            return self.process_reply(now, pkt, id);
        }
        self.process_new(now, pkt)
    }

    /// A client packet matching an existing connection.
    fn process_known(&mut self, now: Instant, pkt: &Packet<'_>, id: ConnId) -> Verdict {
        let Some(cp) = self.conns.get(id) else {
            return Verdict::Pass;
        };
        let (dest_id, controlled) = (cp.dest, cp.control != NONE);
        let dest = self.dest(DestId(dest_id));
        let dest_available = dest.is_some_and(|d| d.available);
        let dest_weight = dest.map_or(0, |d| d.weight());
        if is_new_conn(pkt) && !controlled {
            let reuse = self.tunables.expire_nodest_conn && dest_weight == 0
                || self.tunables.conn_reuse_mode != 0 && self.new_conn_expected(cp);
            if reuse {
                self.expire_now(id);
                return self.process_new(now, pkt);
            }
        }
        if !dest_available && !self.tunables.drain_deleted {
            if self.tunables.expire_nodest_conn {
                self.expire_now(id);
                return self.process_new(now, pkt);
            }
            return Verdict::Drop(DropReason::DestUnavailable);
        }
        let fwd = self.input_packet(now, pkt, id, false);
        Verdict::Forward(fwd)
    }

    /// `is_new_conn_expected`: the old connection is finished, so a new SYN
    /// (or SCTP INIT) with the same tuple starts a new connection.
    fn new_conn_expected(&self, cp: &Conn) -> bool {
        match Protocol::from_number(cp.protocol) {
            Some(Protocol::Tcp) => {
                let s = TcpState::from_u8(cp.state);
                matches!(s, Some(TcpState::TimeWait | TcpState::Close))
                    || (self.tunables.conn_reuse_mode & 2 != 0
                        && s == Some(TcpState::FinWait)
                        && cp.flags.contains(ConnFlags::NOOUTPUT))
            }
            Some(Protocol::Sctp) => SctpState::from_u8(cp.state) == Some(SctpState::Closed),
            _ => false,
        }
    }

    /// A NAT reply matching an existing connection.
    fn process_reply(&mut self, now: Instant, pkt: &Packet<'_>, id: ConnId) -> Verdict {
        let Some(cp) = self.conns.get_mut(id) else {
            return Verdict::Pass;
        };
        cp.flags.remove(ConnFlags::NOOUTPUT);
        let dest = DestId(cp.dest);
        self.transition(now, id, pkt, Direction::Output);
        self.count(dest, |c| c.count_out(u64::from(pkt.len)));
        match self.forward_of(id, false) {
            Some(f) => Verdict::Reply(f),
            None => Verdict::Pass,
        }
    }

    /// A packet of no known connection: find a service and schedule.
    fn process_new(&mut self, now: Instant, pkt: &Packet<'_>) -> Verdict {
        let Some(svc_idx) = self.find_service(pkt) else {
            return Verdict::Pass;
        };
        if !self.may_schedule(pkt) {
            return Verdict::Pass;
        }
        let svc = self.service_at(svc_idx);
        let persistent = svc.config.persistent.is_some();
        if !persistent && !svc.key.is_fwmark() && svc.key.port() != pkt.dport {
            // "Schedule: port zero only supported in persistent services"
            return Verdict::Reject;
        }
        let result = if persistent {
            self.schedule_persist(now, svc_idx, pkt)
        } else {
            self.schedule_plain(now, svc_idx, pkt)
        };
        match result {
            Ok(Some(fwd)) => Verdict::Forward(fwd),
            Ok(None) => Verdict::Reject,
            Err(reason) => Verdict::Drop(reason),
        }
    }

    /// TCP: SYN without RST (any non-RST with `sloppy_tcp`); SCTP: INIT
    /// (any non-ABORT with `sloppy_sctp`); UDP: always.
    fn may_schedule(&self, pkt: &Packet<'_>) -> bool {
        match pkt.l4 {
            L4::Tcp(f) => !f.rst && (f.syn || self.tunables.sloppy_tcp),
            L4::Udp => true,
            L4::Sctp(ev) => {
                ev == SctpEvent::Init || (self.tunables.sloppy_sctp && ev != SctpEvent::Abort)
            }
        }
    }

    fn sched_input(pkt: &Packet<'_>) -> SchedInput {
        SchedInput {
            protocol: pkt.l4.protocol(),
            saddr: pkt.src,
            sport: pkt.sport,
            daddr: pkt.dst,
            dport: pkt.dport,
        }
    }

    /// Run the service's scheduler: the chosen dest's id.
    fn run_scheduler(&mut self, now: Instant, svc_idx: usize, pkt: &Packet<'_>) -> Option<DestId> {
        let input = Self::sched_input(pkt);
        let svc = self.service_at_mut(svc_idx);
        let pos = svc.sched.schedule(&svc.dests, &input, now)?;
        svc.dests.get(pos).map(|d| d.id)
    }

    fn schedule_plain(
        &mut self,
        now: Instant,
        svc_idx: usize,
        pkt: &Packet<'_>,
    ) -> Result<Option<Forward>, DropReason> {
        let Some(dest) = self.run_scheduler(now, svc_idx, pkt) else {
            return Ok(None);
        };
        let dport = match self.dest(dest).map(|d| d.config.port) {
            Some(p) if p != 0 => p,
            _ => pkt.dport,
        };
        self.new_conn(now, svc_idx, pkt, dest, NONE, dport)
            .map(Some)
    }

    /// `ip_vs_sched_persist`: reuse the client's template or create one.
    fn schedule_persist(
        &mut self,
        now: Instant,
        svc_idx: usize,
        pkt: &Packet<'_>,
    ) -> Result<Option<Forward>, DropReason> {
        let svc = self.service_at(svc_idx);
        let af = svc.key.af();
        let snet = svc.config.netmask.apply(pkt.src);
        let timeout = Duration::from_secs(u64::from(svc.config.persistent.unwrap_or(0)));
        let svc_port_branch =
            !svc.key.is_fwmark() && pkt.dport == svc.key.port() && svc.key.port() != 0;
        let (protocol, vaddr, vport) = match svc.key {
            ServiceKey::Fwmark { mark, .. } => (0u8, fwmark_addr(mark), 0u16),
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => {
                let vport = if svc_port_branch && port != 21 {
                    port
                } else {
                    0
                };
                (protocol.number(), Addr::from_ip(addr), vport)
            }
        };
        let callid: Option<Vec<u8>> = match (svc.config.pe, pkt.l4) {
            (Some(PersistenceEngine::Sip), L4::Udp) => {
                pe_sip::call_id(pkt.payload).map(<[u8]>::to_vec)
            }
            _ => None,
        };
        let tkey = ConnKey {
            protocol,
            af,
            caddr: Addr::from_ip(snet),
            cport: 0,
            vaddr,
            vport,
        };
        let mut dest = None;
        let mut template = NONE;
        if let Some(ct) = self.conns.lookup_template(&tkey, callid.as_deref()) {
            if self.template_valid(ct) {
                let c = self.conns.get(ct).map(|c| c.dest);
                dest = c.map(DestId);
                template = ct.0;
                // Using a template restarts its timer.
                self.conns.set_timeout(ct, timeout, now);
            } else {
                self.conns.invalidate_template(ct);
            }
        }
        if dest.is_none() {
            let Some(d) = self.run_scheduler(now, svc_idx, pkt) else {
                return Ok(None);
            };
            let Some(dcfg) = self.dest(d).map(|x| x.config) else {
                return Ok(None);
            };
            let dport = if svc_port_branch { dcfg.port } else { 0 };
            let conn = Conn::new(
                &tkey,
                Addr::from_ip(dcfg.addr),
                dport,
                ConnFlags::TEMPLATE,
                timeout,
            );
            let ct = self.insert_conn(conn, callid.as_deref(), now)?;
            if let Some(c) = self.conns.get_mut(ct) {
                c.dest = d.0;
                c.fwmark = pkt.fwmark;
            }
            self.bind(d, ConnFlags::TEMPLATE);
            dest = Some(d);
            template = ct.0;
        }
        let Some(dest) = dest else { return Ok(None) };
        // `dport = (dst_port == svc.port && dest.port) ? dest.port : dst_port`
        let dport = match self.dest(dest).map(|d| d.config.port) {
            Some(p) if p != 0 && svc_port_branch => p,
            _ => pkt.dport,
        };
        // If this fails the template stays and simply expires unused.
        self.new_conn(now, svc_idx, pkt, dest, template, dport)
            .map(Some)
    }

    /// `ip_vs_check_template`.
    fn template_valid(&self, ct: ConnId) -> bool {
        let Some(c) = self.conns.get(ct) else {
            return false;
        };
        match self.dest(DestId(c.dest)) {
            Some(d) => d.available && !(self.tunables.expire_quiescent_template && d.weight() == 0),
            None => false,
        }
    }

    /// Create the connection entry for a scheduled packet and process the
    /// packet on it.
    fn new_conn(
        &mut self,
        now: Instant,
        svc_idx: usize,
        pkt: &Packet<'_>,
        dest_id: DestId,
        template: u32,
        dport: u16,
    ) -> Result<Forward, DropReason> {
        let svc = self.service_at(svc_idx);
        let one_packet = svc.config.one_packet && pkt.l4 == L4::Udp;
        let Some(dcfg) = self.dest(dest_id).map(|d| d.config) else {
            return Err(DropReason::DestUnavailable);
        };
        let mut flags = conn_flags_of(&dcfg.forward).union(ConnFlags::INACTIVE);
        if !dcfg.forward.sees_replies() {
            flags = flags.union(ConnFlags::NOOUTPUT);
        }
        if one_packet {
            // One-packet scheduling keeps no entry: count and forward.
            self.count(dest_id, |c| {
                c.conns += 1;
                c.count_in(u64::from(pkt.len));
            });
            return Ok(Forward {
                conn: None,
                dest: dest_id,
                daddr: dcfg.addr,
                dport,
                vaddr: pkt.dst,
                vport: pkt.dport,
                method: dcfg.forward,
                new: true,
            });
        }
        let key = ConnKey {
            protocol: pkt.l4.protocol().number(),
            af: AddrFamily::of(&pkt.src),
            caddr: Addr::from_ip(pkt.src),
            cport: pkt.sport,
            vaddr: Addr::from_ip(pkt.dst),
            vport: pkt.dport,
        };
        let initial = match pkt.l4 {
            L4::Tcp(_) => self.timeouts.tcp(TcpState::None),
            L4::Udp => self.timeouts.udp(),
            L4::Sctp(_) => self.timeouts.sctp(SctpState::None),
        };
        let mut conn = Conn::new(&key, Addr::from_ip(dcfg.addr), dport, flags, initial);
        conn.dest = dest_id.0;
        conn.fwmark = pkt.fwmark;
        conn.control = template;
        // Take the template's reference before inserting: a full table
        // evicts the entry closest to expiry, which must never be the
        // template this connection is about to hang from.
        self.adjust_control(template, true);
        let id = match self.insert_conn(conn, None, now) {
            Ok(id) => id,
            Err(e) => {
                self.adjust_control(template, false);
                return Err(e);
            }
        };
        self.bind(dest_id, flags);
        self.count(dest_id, |c| c.conns += 1);
        Ok(self.input_packet(now, pkt, id, true))
    }

    /// Count a connection in (or out of) its template's `n_control`.
    fn adjust_control(&mut self, template: u32, up: bool) {
        if template == NONE {
            return;
        }
        if let Some(t) = self.conns.get_mut(ConnId(template)) {
            t.n_control = if up {
                t.n_control + 1
            } else {
                t.n_control.saturating_sub(1)
            };
        }
    }

    /// Insert, evicting the documented victim when the table is full.
    fn insert_conn(
        &mut self,
        conn: Conn,
        pe: Option<&[u8]>,
        now: Instant,
    ) -> Result<ConnId, DropReason> {
        if self.conns.len() >= self.conns.capacity() {
            let victim = self
                .conns
                .eviction_candidate(now)
                .ok_or(DropReason::TableFull)?;
            self.remove_conn(victim, true);
            self.evictions += 1;
        }
        self.conns
            .insert(conn, pe, now)
            .map_err(|_| DropReason::TableFull)
    }

    /// A client→server packet on connection `id`: state, timer, counters.
    fn input_packet(&mut self, now: Instant, pkt: &Packet<'_>, id: ConnId, new: bool) -> Forward {
        let dir = match self.conns.get(id) {
            Some(c) if c.flags.contains(ConnFlags::NOOUTPUT) => Direction::InputOnly,
            _ => Direction::Input,
        };
        self.transition(now, id, pkt, dir);
        if let Some(dest) = self.conns.get(id).map(|c| DestId(c.dest)) {
            self.count(dest, |c| c.count_in(u64::from(pkt.len)));
        }
        self.forward_of(id, new).unwrap_or(Forward {
            conn: Some(id),
            dest: DestId(NONE),
            daddr: pkt.dst,
            dport: pkt.dport,
            vaddr: pkt.dst,
            vport: pkt.dport,
            method: ForwardMethod::Route,
            new,
        })
    }

    fn forward_of(&self, id: ConnId, new: bool) -> Option<Forward> {
        let c = self.conns.get(id)?;
        let dest = self.dest(DestId(c.dest))?;
        Some(Forward {
            conn: Some(id),
            dest: dest.id,
            daddr: c.daddr.to_ip(c.af),
            dport: c.dport,
            vaddr: c.vaddr.to_ip(c.af),
            vport: c.vport,
            method: dest.config.forward,
            new,
        })
    }

    /// Run the protocol state machine for one packet and re-arm the timer,
    /// moving the connection between the active and inactive counters.
    fn transition(&mut self, now: Instant, id: ConnId, pkt: &Packet<'_>, dir: Direction) {
        let Some(c) = self.conns.get(id) else { return };
        let (old, flags, dest, control) = (c.state, c.flags, DestId(c.dest), c.control);
        let (new_state, active, timeout) = match pkt.l4 {
            L4::Tcp(f) => {
                let s = TcpState::from_u8(old).unwrap_or(TcpState::None);
                let n = crate::state::tcp_next(s, dir, f, self.tunables.secure_tcp);
                (n as u8, n.is_active(), self.timeouts.tcp(n))
            }
            L4::Udp => (old, false, self.timeouts.udp()),
            L4::Sctp(ev) => {
                let s = SctpState::from_u8(old).unwrap_or(SctpState::None);
                let n = crate::state::sctp_next(s, dir, ev);
                (n as u8, n.is_active(), self.timeouts.sctp(n))
            }
        };
        let was_inactive = flags.contains(ConnFlags::INACTIVE);
        if let Some(c) = self.conns.get_mut(id) {
            c.state = new_state;
            if was_inactive && active {
                c.flags.remove(ConnFlags::INACTIVE);
            } else if !was_inactive && !active {
                c.flags.insert(ConnFlags::INACTIVE);
            }
        }
        self.conns.set_timeout(id, timeout, now);
        if was_inactive == active {
            self.with_dest(dest, |d| {
                if active {
                    d.inactive = d.inactive.saturating_sub(1);
                    d.active += 1;
                } else {
                    d.active = d.active.saturating_sub(1);
                    d.inactive += 1;
                }
            });
        }
        let established = match pkt.l4 {
            L4::Tcp(_) => new_state == TcpState::Established as u8,
            L4::Sctp(_) => new_state == SctpState::Established as u8,
            L4::Udp => false,
        };
        if established
            && control != NONE
            && let Some(t) = self.conns.get_mut(ConnId(control))
        {
            t.flags.insert(ConnFlags::ASSURED);
        }
    }

    // ------------------------------------------------------------------
    // Connection-oriented API (proxy data planes)
    // ------------------------------------------------------------------

    /// A proxy accepted a connection (TCP) or a new flow (UDP) from `client`
    /// to `vip`: schedule it as the packet that opens it would be, and hold
    /// the entry for the life of the proxy's socket (timers re-arm it,
    /// eviction skips it) until [`Ipvs::close`]. Persistence, thresholds,
    /// weight 0 and every scheduler apply exactly as on the packet path.
    /// `Err` carries the verdict that refused it (no service: `Pass`; no
    /// real server: `Reject`; table full of held entries: `Drop`).
    pub fn open(
        &mut self,
        now: Instant,
        protocol: Protocol,
        client: std::net::SocketAddr,
        vip: std::net::SocketAddr,
    ) -> Result<Forward, Verdict> {
        let l4 = match protocol {
            Protocol::Tcp => L4::Tcp(TcpFlags {
                syn: true,
                fin: false,
                ack: false,
                rst: false,
            }),
            Protocol::Udp => L4::Udp,
            Protocol::Sctp => L4::Sctp(SctpEvent::Init),
        };
        let pkt = Packet {
            src: client.ip(),
            sport: client.port(),
            dst: vip.ip(),
            dport: vip.port(),
            l4,
            fwmark: 0,
            len: 0,
            payload: &[],
        };
        self.clear_stale(&pkt)?;
        match self.process_new(now, &pkt) {
            Verdict::Forward(f) => {
                if let Some(c) = f.conn.and_then(|id| self.conns.get_mut(id)) {
                    c.flags.insert(ConnFlags::HELD);
                }
                Ok(f)
            }
            other => Err(other),
        }
    }

    /// A stale entry with the packet's tuple (a socket the proxy already
    /// closed but whose entry lingers) is not ours to reuse: expire it. A
    /// held one (a live socket of the proxy) refuses the new one.
    fn clear_stale(&mut self, pkt: &Packet<'_>) -> Result<(), Verdict> {
        let key = ConnKey {
            protocol: pkt.l4.protocol().number(),
            af: AddrFamily::of(&pkt.src),
            caddr: Addr::from_ip(pkt.src),
            cport: pkt.sport,
            vaddr: Addr::from_ip(pkt.dst),
            vport: pkt.dport,
        };
        if let Some(old) = self.conns.lookup(&key) {
            if self
                .conns
                .get(old)
                .is_some_and(|c| c.flags.contains(ConnFlags::HELD))
            {
                return Err(Verdict::Drop(DropReason::TableFull));
            }
            self.expire_now(old);
        }
        Ok(())
    }

    /// Like [`Ipvs::open`] for a UDP flow whose real server the data plane
    /// chose itself (QUIC-LB: the server ID in the connection ID names it):
    /// the held entry is bound to the service's real server `daddr:dport`
    /// without asking the scheduler or persistence. Its weight is not
    /// looked at (a quiesced server keeps the connections it has; choosing
    /// it is the caller's decision). `Err` as for [`Ipvs::open`]: no such
    /// service `Pass`, no such real server `Reject`, the client's tuple
    /// held by another live flow `Drop`.
    pub fn open_to(
        &mut self,
        now: Instant,
        client: std::net::SocketAddr,
        vip: std::net::SocketAddr,
        daddr: IpAddr,
        dport: u16,
    ) -> Result<Forward, Verdict> {
        let key = ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: vip.ip(),
            port: vip.port(),
        };
        let svc_idx = self.service_index(&key).ok_or(Verdict::Pass)?;
        let svc = self.service_at(svc_idx);
        let dest = svc
            .find_dest(daddr, dport)
            .map(|pos| svc.dests[pos].id)
            .ok_or(Verdict::Reject)?;
        let pkt = Packet {
            src: client.ip(),
            sport: client.port(),
            dst: vip.ip(),
            dport: vip.port(),
            l4: L4::Udp,
            fwmark: 0,
            len: 0,
            payload: &[],
        };
        self.clear_stale(&pkt)?;
        let port = if dport != 0 { dport } else { vip.port() };
        let f = self
            .new_conn(now, svc_idx, &pkt, dest, NONE, port)
            .map_err(Verdict::Drop)?;
        if let Some(c) = f.conn.and_then(|id| self.conns.get_mut(id)) {
            c.flags.insert(ConnFlags::HELD);
        }
        Ok(f)
    }

    /// Something happened on a held connection: `dir` is `Input` for the
    /// client's side and `Output` for the real server's; `l4` carries what
    /// the socket saw (SYN+ACK/ACK when connected, FIN on a half-close, RST
    /// on a reset); `bytes` were relayed in that direction (counted as one
    /// packet). Drives the state machine, the timers and the counters, so
    /// `-Lcn`, ActiveConn/InActConn and `--stats` follow the socket.
    pub fn conn_event(&mut self, now: Instant, id: ConnId, dir: Direction, l4: L4, bytes: u64) {
        let Some(c) = self.conns.get(id) else { return };
        let dest = DestId(c.dest);
        let pkt = Packet {
            src: c.caddr.to_ip(c.af),
            sport: c.cport,
            dst: c.vaddr.to_ip(c.af),
            dport: c.vport,
            l4,
            fwmark: 0,
            len: 0,
            payload: &[],
        };
        self.transition(now, id, &pkt, dir);
        if bytes > 0 {
            match dir {
                Direction::Output => self.count(dest, |s| s.count_out(bytes)),
                _ => self.count(dest, |s| s.count_in(bytes)),
            }
        }
    }

    /// Account relayed traffic without a state change (bulk data).
    pub fn conn_traffic(
        &mut self,
        id: ConnId,
        in_pkts: u64,
        in_bytes: u64,
        out_pkts: u64,
        out_bytes: u64,
    ) {
        let Some(dest) = self.conns.get(id).map(|c| DestId(c.dest)) else {
            return;
        };
        self.count(dest, |s| {
            s.inpkts = s.inpkts.wrapping_add(in_pkts);
            s.inbytes = s.inbytes.wrapping_add(in_bytes);
            s.outpkts = s.outpkts.wrapping_add(out_pkts);
            s.outbytes = s.outbytes.wrapping_add(out_bytes);
        });
    }

    /// The real server of a held connection could not be reached: forget
    /// the attempt and schedule the client again, leaving out that server
    /// and every server in `also_avoid` (earlier failures of the same
    /// attempt), with its persistence template invalidated — what IPVS
    /// cannot do and a proxy can. `Err` as for [`Ipvs::open`].
    pub fn retry_elsewhere(
        &mut self,
        now: Instant,
        id: ConnId,
        also_avoid: &[DestId],
        protocol: Protocol,
        client: std::net::SocketAddr,
        vip: std::net::SocketAddr,
    ) -> Result<Forward, Verdict> {
        let Some(c) = self.conns.get(id) else {
            return Err(Verdict::Pass);
        };
        let (failed, control) = (DestId(c.dest), c.control);
        if control != NONE {
            self.conns.invalidate_template(ConnId(control));
        }
        self.close(id);
        // Mark the servers to avoid overloaded for this one decision (every
        // scheduler skips overloaded servers), then restore the marks.
        let mut saved = Vec::new();
        for d in std::iter::once(failed).chain(also_avoid.iter().copied()) {
            if let Some(was) = self.dest(d).map(|x| x.overloaded)
                && !saved.iter().any(|(x, _)| *x == d)
            {
                saved.push((d, was));
                self.with_dest(d, |x| x.overloaded = true);
            }
        }
        let result = self.open(now, protocol, client, vip);
        for (d, was) in saved {
            self.with_dest(d, |x| x.overloaded = was);
        }
        result
    }

    /// The proxy's socket is gone: remove the entry now (counters follow).
    pub fn close(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            c.flags.remove(ConnFlags::HELD);
        }
        self.remove_conn(id, true);
    }

    // ------------------------------------------------------------------
    // Mirrored connections (packet data planes that schedule themselves)
    // ------------------------------------------------------------------

    /// A packet data plane that schedules and tracks flows itself (the XDP
    /// program) reports one of its flows, so `-Lcn`, ActiveConn/InActConn
    /// and expiry see it: the entry for the flow's tuple is created bound to
    /// `flow.dest` when absent (re-created when it names another real
    /// server), its state is set — moving it between the real server's
    /// active and inactive counts as a state change does — and its timer is
    /// set to `flow.idle_left`. Counters are not touched (the data plane
    /// reports traffic with [`Ipvs::add_counters`]). A connection's
    /// `flow.local`, when given, is recorded as its FULLNAT local address
    /// and port ([`Ipvs::set_conn_local`]). `None` when `flow.dest`
    /// is not a known real server or the table is full of entries that
    /// cannot be evicted.
    pub fn mirror_conn(&mut self, now: Instant, flow: &MirroredConn) -> Option<ConnId> {
        let id = self.mirror_conn_entry(now, flow)?;
        if let Some(local) = flow.local
            && !flow.template
        {
            self.set_conn_local(id, local);
        }
        Some(id)
    }

    fn mirror_conn_entry(&mut self, now: Instant, flow: &MirroredConn) -> Option<ConnId> {
        let dcfg = self.dest(flow.dest)?.config;
        let key = ConnKey {
            protocol: flow.protocol.number(),
            af: AddrFamily::of(&flow.client.ip()),
            caddr: Addr::from_ip(flow.client.ip()),
            cport: flow.client.port(),
            vaddr: Addr::from_ip(flow.vip.ip()),
            vport: flow.vip.port(),
        };
        if flow.template {
            return self.mirror_template(now, flow, key, dcfg);
        }
        let active = match flow.protocol {
            Protocol::Tcp => TcpState::from_u8(flow.state).is_some_and(TcpState::is_active),
            Protocol::Sctp => SctpState::from_u8(flow.state).is_some_and(SctpState::is_active),
            Protocol::Udp => false,
        };
        if let Some(id) = self.conns.lookup(&key) {
            let same = self.conns.get(id).is_some_and(|c| c.dest == flow.dest.0);
            if same {
                let mut was_inactive = false;
                if let Some(c) = self.conns.get_mut(id) {
                    was_inactive = c.flags.contains(ConnFlags::INACTIVE);
                    c.state = flow.state;
                    if active {
                        c.flags.remove(ConnFlags::INACTIVE);
                    } else {
                        c.flags.insert(ConnFlags::INACTIVE);
                    }
                    if flow.output_seen {
                        c.flags.remove(ConnFlags::NOOUTPUT);
                    }
                }
                if was_inactive == active {
                    self.with_dest(flow.dest, |d| {
                        if active {
                            d.inactive = d.inactive.saturating_sub(1);
                            d.active += 1;
                        } else {
                            d.active = d.active.saturating_sub(1);
                            d.inactive += 1;
                        }
                    });
                }
                self.conns.set_timeout(id, flow.idle_left, now);
                return Some(id);
            }
            self.remove_conn(id, true);
        }
        let mut flags = conn_flags_of(&dcfg.forward);
        if !active {
            flags = flags.union(ConnFlags::INACTIVE);
        }
        if !flow.output_seen {
            flags = flags.union(ConnFlags::NOOUTPUT);
        }
        let dport = if dcfg.port == 0 {
            flow.vip.port()
        } else {
            dcfg.port
        };
        let mut conn = Conn::new(&key, Addr::from_ip(dcfg.addr), dport, flags, flow.idle_left);
        conn.dest = flow.dest.0;
        conn.state = flow.state;
        let id = self.insert_conn(conn, None, now).ok()?;
        self.bind(flow.dest, flags);
        self.conns.set_timeout(id, flow.idle_left, now);
        Some(id)
    }

    fn mirror_template(
        &mut self,
        now: Instant,
        flow: &MirroredConn,
        key: ConnKey,
        dcfg: DestConfig,
    ) -> Option<ConnId> {
        if let Some(id) = self.conns.lookup_template(&key, None) {
            if self.conns.get(id).is_some_and(|c| c.dest == flow.dest.0) {
                self.conns.set_timeout(id, flow.idle_left, now);
                return Some(id);
            }
            self.remove_conn(id, true);
        }
        let dport = if key.vport == 0 { 0 } else { dcfg.port };
        let mut conn = Conn::new(
            &key,
            Addr::from_ip(dcfg.addr),
            dport,
            ConnFlags::TEMPLATE,
            flow.idle_left,
        );
        conn.dest = flow.dest.0;
        let id = self.insert_conn(conn, None, now).ok()?;
        self.bind(flow.dest, ConnFlags::TEMPLATE);
        self.conns.set_timeout(id, flow.idle_left, now);
        Some(id)
    }

    /// Add traffic a packet data plane counted (e.g. the per-CPU counters of
    /// the XDP program since its last report) to a real server, its service
    /// and the director total, as the packet path counts its own.
    pub fn add_counters(&mut self, dest: DestId, delta: &Counters) {
        self.count(dest, |c| c.add(delta));
    }

    /// Add the QUIC-LB routing counts a data plane made for a service since
    /// its last report. False when there is no such service (it was
    /// deleted meanwhile; the counts go with it).
    pub fn add_quic_lb_counters(&mut self, key: &ServiceKey, delta: &QuicLbCounters) -> bool {
        let Some(idx) = self.service_index(key) else {
            return false;
        };
        self.service_at_mut(idx).quic_lb.add(delta);
        true
    }

    // ------------------------------------------------------------------
    // Expiry
    // ------------------------------------------------------------------

    /// Expire every connection whose timer has passed. Returns how many
    /// entries were removed.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut removed = 0;
        while let Some(id) = self.conns.poll_expired(now) {
            let busy = self
                .conns
                .get(id)
                .is_some_and(|c| c.n_control > 0 || c.flags.contains(ConnFlags::HELD));
            if busy {
                // A template still controlling connections lives on, and so
                // does an entry a proxy's open socket holds.
                self.conns.touch(id, now);
            } else {
                self.remove_conn(id, false);
                removed += 1;
            }
        }
        removed
    }

    /// Expire a connection immediately (`ip_vs_conn_expire_now`).
    fn expire_now(&mut self, id: ConnId) {
        self.remove_conn(id, true);
    }

    /// Remove a connection: unbind it from its real server and from its
    /// template. `forced` = expired before its timer (timeout 0), which also
    /// drops a non-assured template it was the last user of.
    fn remove_conn(&mut self, id: ConnId, forced: bool) {
        // A template that still controls connections is never removed
        // (expiry re-arms it, eviction skips it), so no child is left with a
        // dangling `control`.
        if self.conns.get(id).is_none_or(|c| c.n_control > 0) {
            return;
        }
        let Some(c) = self.conns.remove(id) else {
            return;
        };
        self.unbind(DestId(c.dest), c.flags);
        if c.control != NONE {
            let ct = ConnId(c.control);
            let drop_template = match self.conns.get_mut(ct) {
                Some(t) => {
                    t.n_control = t.n_control.saturating_sub(1);
                    forced && t.n_control == 0 && !t.flags.contains(ConnFlags::ASSURED)
                }
                None => false,
            };
            if drop_template {
                self.remove_conn(ct, false);
            }
        }
    }

    /// Check internal consistency: every real server's active, inactive
    /// and persistent counts equal what the connection table holds, every
    /// template's `n_control` equals its controlled connections, the dest
    /// locator agrees with the lists, and no overload flag is set without an
    /// upper threshold. O(connections); for tests and fuzzing (feature
    /// `audit`).
    #[cfg(feature = "audit")]
    pub fn audit(&self) -> Result<(), String> {
        let mut counts: HashMap<u32, [u32; 3]> = HashMap::new();
        let mut controlled: HashMap<u32, u32> = HashMap::new();
        for (id, c) in self.conns.iter() {
            if c.dest != NONE {
                let e = counts.entry(c.dest).or_default();
                let i = if c.is_template() {
                    2
                } else if c.flags.contains(ConnFlags::INACTIVE) {
                    1
                } else {
                    0
                };
                e[i] += 1;
            }
            if c.control != NONE {
                match self.conns.get(ConnId(c.control)) {
                    Some(t) if t.is_template() => *controlled.entry(c.control).or_default() += 1,
                    _ => {
                        return Err(format!(
                            "conn {id:?} controlled by a non-template {}",
                            c.control
                        ));
                    }
                }
            }
        }
        for (id, c) in self.conns.iter() {
            let want = controlled.get(&id.0).copied().unwrap_or(0);
            if c.n_control != want {
                return Err(format!(
                    "template {id:?} n_control {} != {want}",
                    c.n_control
                ));
            }
        }
        let mut seen = 0usize;
        let mut check = |d: &Dest| -> Result<(), String> {
            seen += 1;
            let want = counts.remove(&d.id.0).unwrap_or_default();
            let got = [d.active, d.inactive, d.persist];
            if got != want {
                return Err(format!(
                    "dest {:?} counters {got:?} != table {want:?}",
                    d.id
                ));
            }
            if d.overloaded && d.config.u_threshold == 0 {
                return Err(format!("dest {:?} overloaded without a threshold", d.id));
            }
            Ok(())
        };
        for (si, svc) in self.services.iter().enumerate() {
            let Some(svc) = svc else { continue };
            for (pos, d) in svc.dests.iter().enumerate() {
                let loc = DestLoc::Service {
                    svc: si as u32,
                    pos: pos as u32,
                };
                if self.locator.get(d.id.0 as usize) != Some(&loc) {
                    return Err(format!("dest {:?} locator is stale", d.id));
                }
                check(d)?;
            }
        }
        for (slot, t) in self.trash.iter().enumerate() {
            let Some(t) = t else { continue };
            if self.locator.get(t.dest.id.0 as usize) != Some(&DestLoc::Trash { slot: slot as u32 })
            {
                return Err(format!("trashed dest {:?} locator is stale", t.dest.id));
            }
            if t.dest.active + t.dest.inactive + t.dest.persist == 0 {
                return Err(format!(
                    "trashed dest {:?} is unreferenced but kept",
                    t.dest.id
                ));
            }
            check(&t.dest)?;
        }
        if let Some((d, _)) = counts.into_iter().next() {
            return Err(format!("connections point at unknown dest {d}"));
        }
        let live = self.locator.iter().filter(|l| **l != DestLoc::Free).count();
        if live != seen {
            return Err(format!("{live} dest ids in use but {seen} dests exist"));
        }
        Ok(())
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
    if AddrFamily::of(&d.addr) != key.af() && !matches!(d.forward, ForwardMethod::Tunnel(_)) {
        return Err(CtlError::Invalid(
            "different address family is allowed only for tunneling servers".into(),
        ));
    }
    Ok(())
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
