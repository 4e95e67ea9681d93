//! [`SockPlane`]: the sock data plane's control side.
//!
//! The handle rvsd holds only queues commands (no syscall under the daemon
//! lock); a worker thread owns the [`Loaded`] programs and `Tables`, the
//! books of what is installed, applies the commands in order and, every
//! [`REPORT_EVERY`], reads the per-real-server counters (`sock_stats`, in
//! batches of 4096 per syscall) and passes on only those that changed
//! since the previous read: the snapshot is updated in place and the
//! changes wait for [`DataPlane::report`] to add them to the director.
//! An idle table of 10,000 services costs a few syscalls and a
//! comparison per second, nothing per service in the director.
//!
//! Publishing a service writes a fresh region of `slots` (its schedulable
//! list, then its table), then its `services` element (one element write,
//! which the programs see whole), and frees the old region two reports
//! later, long after any program run that read it. A deleted real server's
//! element is marked not present at once (no new socket gets it; an
//! unconnected UDP socket that had it re-schedules at its next send), and
//! its index is reused only once no open socket counts on it. The connected
//! UDP sockets the programs gave it are destroyed right then, on the worker
//! (see `Tables::abort_udp`): their owners see `ECONNABORTED` and connect
//! again, to a live real server.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_control::dataplane::{Applied, DataPlane, DataPlaneError};
use rvs_control::protocol::Command;
use rvs_control::room::{Region, SlotAlloc};
use rvs_control::warnings::NoRoom;
use rvs_core::dest::DestId;
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::{DestConfig, Protocol, ServiceConfig, ServiceKey, SourceRange};
use rvs_core::state::TcpState;
use rvs_core::stats::Counters;
use rvs_core::time::Instant;
use rvs_sys::bpf::{BpfMap, OwnedBpfMap};
use rvs_sys::netlink::Netlink;
use rvs_sys::sockdiag::SockDiag;
use zerocopy::{FromBytes, IntoBytes};

use crate::maps::{self, DestStats, EventCounts, SockRec, SrcKey, Svc, SvcKey, cap, name};
use crate::{Loaded, SockError};

mod read;

/// How often the worker reads the counters.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Services with source ranges whose node verdict (the route's source
/// toward the VIP, [`maps::node_allowed`]) the worker asks the kernel again
/// at each report, in turn: a route that changes is followed within
/// (ranged services / this) reports, at most this many route lookups a
/// second.
pub const RECHECK_PER_REPORT: usize = 64;

/// One real server's counters as last read, by service and address.
pub type Snapshot = HashMap<(ServiceKey, IpAddr, u16), DestStats>;

/// What the worker shares of the counters: every live real server's as
/// last read, and those changed since [`DataPlane::report`] last took them.
#[derive(Debug, Default)]
struct Counts {
    all: Snapshot,
    changed: Snapshot,
}

/// One open socket the programs gave a real server (`-Lcn`'s material).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SocketEntry {
    /// The kernel's socket cookie.
    pub cookie: u64,
    /// Protocol.
    pub protocol: Protocol,
    /// The VIP and port the socket asked for.
    pub vip: std::net::SocketAddr,
    /// The real server it was given.
    pub dest: std::net::SocketAddr,
    /// The socket's own address, once known (TCP from its SYN, UDP from
    /// its first receive).
    pub client: Option<std::net::SocketAddr>,
}

/// How long a mirrored socket lives in the director without a report
/// renewing it (three reports).
pub const MIRROR_TTL: Duration = Duration::from_secs(3);

enum Msg {
    Apply(Command),
    Stop,
}

/// What the sock plane last read of its maps, for rvsd's metrics: a cheap
/// clone of the plane's shared snapshots (read every [`REPORT_EVERY`] by
/// the worker; reading them takes no syscall).
#[derive(Clone, Debug)]
pub struct SockStats {
    snapshot: Arc<Mutex<Counts>>,
    sockets: Arc<Mutex<Vec<SocketEntry>>>,
    events: Arc<Mutex<EventCounts>>,
    refused: Arc<Mutex<Vec<(&'static str, u64)>>>,
}

impl SockStats {
    /// Per real server: open sockets and sockets ever given it.
    pub fn per_dest(&self) -> Snapshot {
        self.snapshot
            .lock()
            .map(|s| s.all.clone())
            .unwrap_or_default()
    }

    /// The programs' event counters (sockets scheduled, UDP sessions,
    /// refusals for want of a real server).
    pub fn events(&self) -> EventCounts {
        self.events.lock().map(|e| *e).unwrap_or_default()
    }

    /// Commands the plane refused for want of room since it started, per
    /// map (`services`, `dests`, `slots`), as of the last report.
    pub fn refused(&self) -> Vec<(&'static str, u64)> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Open sockets the programs gave a real server, TCP and UDP, as last
    /// listed (every entry of `sock_socks`, with or without its own
    /// address known yet).
    pub fn open_sockets(&self) -> (u64, u64) {
        self.sockets
            .lock()
            .map(|s| {
                let tcp = s.iter().filter(|e| e.protocol == Protocol::Tcp).count() as u64;
                (tcp, s.len() as u64 - tcp)
            })
            .unwrap_or_default()
    }
}

/// The sock data plane as rvsd drives it.
pub struct SockPlane {
    tx: Sender<Msg>,
    sent: u64,
    processed: Arc<AtomicU64>,
    snapshot: Arc<Mutex<Counts>>,
    sockets: Arc<Mutex<Vec<SocketEntry>>>,
    events: Arc<Mutex<EventCounts>>,
    refused: Arc<Mutex<Vec<(&'static str, u64)>>>,
    /// Per admitted service: family is IPv6, number of real servers.
    admitted: HashMap<ServiceKey, (bool, usize)>,
    /// Per service, per real server: the `total` last added to the
    /// director (forgotten with the server).
    reported: HashMap<ServiceKey, HashMap<(IpAddr, u16), u64>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SockPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SockPlane")
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl SockPlane {
    /// Load the programs, attach them to `cgroup` and start the worker.
    /// Fails (nothing left attached) when the kernel or the cgroup lacks
    /// the hooks.
    pub fn start(cgroup: &std::path::Path) -> Result<Self, SockError> {
        let mut loaded = Loaded::load()?;
        loaded.attach(cgroup)?;
        let (tx, rx) = channel();
        let processed = Arc::new(AtomicU64::new(0));
        let snapshot = Arc::new(Mutex::new(Counts::default()));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(EventCounts::default()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let mut tables = Tables::new(loaded)?;
        let shared = SockStats {
            snapshot: snapshot.clone(),
            sockets: sockets.clone(),
            events: events.clone(),
            refused: refused.clone(),
        };
        let p = processed.clone();
        let worker = std::thread::Builder::new()
            .name("rvs-sock".into())
            .spawn(move || tables.run(&rx, &p, &shared))
            .map_err(|e| SockError::Load(format!("starting the worker thread: {e}")))?;
        Ok(SockPlane {
            tx,
            sent: 0,
            processed,
            snapshot,
            sockets,
            events,
            refused,
            admitted: HashMap::new(),
            reported: HashMap::new(),
            worker: Some(worker),
        })
    }

    /// The real servers' counters as last read (every [`REPORT_EVERY`]).
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot
            .lock()
            .map(|s| s.all.clone())
            .unwrap_or_default()
    }

    /// The open sockets the programs gave a real server, as last read.
    pub fn sockets(&self) -> Vec<SocketEntry> {
        self.sockets.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// A handle on what the plane reads of its maps (for metrics; it
    /// outlives being moved into the control plane).
    pub fn stats(&self) -> SockStats {
        SockStats {
            snapshot: self.snapshot.clone(),
            sockets: self.sockets.clone(),
            events: self.events.clone(),
            refused: self.refused.clone(),
        }
    }
}

impl Drop for SockPlane {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Why the sock plane cannot carry a command (see [`DataPlane::admit`]).
fn refuse(what: String) -> Result<(), String> {
    Err(format!("sock data plane: {what}"))
}

fn admit_service(key: &ServiceKey, config: &ServiceConfig) -> Result<(), String> {
    match key {
        ServiceKey::Fwmark { .. } => {
            return refuse(
                "fwmark services cannot be matched at connect() (no packet, no mark)".into(),
            );
        }
        ServiceKey::Addr { protocol, port, .. } => {
            if *protocol == Protocol::Sctp {
                return refuse("SCTP services are not handled (TCP and UDP only)".into());
            }
            if *port == 0 {
                return refuse("port-zero (all ports) services are not handled".into());
            }
        }
    }
    if config.source_ranges.len() > cap::SRC_RANGES as usize {
        return refuse(format!(
            "{} client source ranges in one service: the programs hold {} in all",
            config.source_ranges.len(),
            cap::SRC_RANGES
        ));
    }
    maps::sched_id(config.scheduler)
        .map(drop)
        .map_err(|e| e.to_string())
}

impl DataPlane for SockPlane {
    fn name(&self) -> &'static str {
        "sock"
    }

    /// Yes: a socket of the cgroup reaches a service with source ranges
    /// only from inside them: bound to a source in a range
    /// (`sock_src_ranges`), or unbound while the source the kernel picks by
    /// route toward the VIP is in one (the worker asks the kernel); any
    /// other `connect`/`sendmsg` fails with `EPERM` and is counted.
    fn enforces_source_ranges(&self) -> bool {
        true
    }

    fn admit(&self, command: &Command) -> Result<(), String> {
        match command {
            Command::AddService { key, config } | Command::EditService { key, config } => {
                admit_service(key, config)
            }
            Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
                let Some(&(v6, n)) = self.admitted.get(service) else {
                    return Ok(());
                };
                if dest.addr.is_ipv6() != v6 {
                    return refuse("a real server of the other address family than the VIP".into());
                }
                if matches!(command, Command::AddDest { .. }) && n >= cap::LIST {
                    return refuse(format!("more than {} real servers in a service", cap::LIST));
                }
                Ok(())
            }
            // A local address pool (FULLNAT, Kubernetes' SNAT from the
            // node's address) is met at connect() by construction: the
            // client is a process on this host, so its own socket reaches
            // the real server from an address of this host, which is what
            // the pool gives the wire path. Nothing to program.
            Command::AddLaddr { .. } => Ok(()),
            _ => Ok(()),
        }
    }

    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError> {
        match command {
            Command::AddService { key, .. } => {
                self.admitted.insert(*key, (key_is_v6(key), 0));
            }
            Command::DelService { key } => {
                self.admitted.remove(key);
                self.reported.remove(key);
            }
            Command::Clear => {
                self.admitted.clear();
                self.reported.clear();
            }
            Command::AddDest { service, .. } => {
                if let Some(e) = self.admitted.get_mut(service) {
                    e.1 += 1;
                }
            }
            Command::DelDest {
                service,
                addr,
                port,
            } => {
                if let Some(e) = self.admitted.get_mut(service) {
                    e.1 = e.1.saturating_sub(1);
                }
                if let Some(r) = self.reported.get_mut(service) {
                    r.remove(&(*addr, *port));
                }
            }
            _ => {}
        }
        self.tx
            .send(Msg::Apply(command.clone()))
            .map_err(|_| DataPlaneError {
                plane: "sock",
                message: "the sock worker thread is gone".into(),
            })?;
        self.sent += 1;
        Ok(())
    }

    fn applied(&self) -> Option<Applied> {
        Some(Applied::new(self.sent, self.processed.clone()))
    }

    fn report(&mut self, now: Instant, ipvs: &mut Ipvs) {
        for s in self.sockets() {
            let Some(client) = s.client else { continue };
            let key = ServiceKey::Addr {
                protocol: s.protocol,
                addr: s.vip.ip(),
                port: s.vip.port(),
            };
            let Some(dest) = dest_id(ipvs, &key, s.dest.ip(), s.dest.port()) else {
                continue;
            };
            ipvs.mirror_conn(
                now,
                &MirroredConn {
                    protocol: s.protocol,
                    client,
                    vip: s.vip,
                    dest,
                    state: if s.protocol == Protocol::Tcp {
                        TcpState::Established as u8
                    } else {
                        0
                    },
                    output_seen: true,
                    idle_left: MIRROR_TTL,
                    template: false,
                    local: None,
                },
            );
        }
        // Only the real servers whose counters changed since the last
        // report: nothing per idle server.
        let changed = self
            .snapshot
            .lock()
            .map(|mut s| std::mem::take(&mut s.changed))
            .unwrap_or_default();
        for (k, st) in &changed {
            if !self.admitted.contains_key(&k.0) {
                continue;
            }
            let last = self
                .reported
                .entry(k.0)
                .or_default()
                .entry((k.1, k.2))
                .or_insert(0);
            // A smaller total: the index was reused for a new real server.
            let delta = st.total.checked_sub(*last).unwrap_or(st.total);
            *last = st.total;
            if delta == 0 {
                continue;
            }
            let Some(id) = dest_id(ipvs, &k.0, k.1, k.2) else {
                continue;
            };
            ipvs.add_counters(
                id,
                &Counters {
                    conns: delta,
                    ..Counters::default()
                },
            );
        }
    }
}

/// The indexes whose counters differ between `last` (as last read) and
/// `now` (read just now), in order; `last` is brought up to `now`. An
/// index `last` has not seen yet counts as read at zero.
fn diff_stats(last: &mut Vec<DestStats>, now: &[DestStats]) -> Vec<u32> {
    if last.len() < now.len() {
        last.resize(now.len(), DestStats::default());
    }
    let mut out = Vec::new();
    for (i, (l, n)) in last.iter_mut().zip(now).enumerate() {
        if l != n {
            *l = *n;
            out.push(i as u32);
        }
    }
    out
}

fn is_udp(key: &ServiceKey) -> bool {
    matches!(
        key,
        ServiceKey::Addr {
            protocol: Protocol::Udp,
            ..
        }
    )
}

fn key_is_v6(key: &ServiceKey) -> bool {
    match key {
        ServiceKey::Addr { addr, .. } => addr.is_ipv6(),
        ServiceKey::Fwmark { af, .. } => *af == rvs_core::model::AddrFamily::Inet6,
    }
}

/// The id of real server `addr`:`port` of service `key` in `ipvs`.
fn dest_id(ipvs: &Ipvs, key: &ServiceKey, addr: IpAddr, port: u16) -> Option<DestId> {
    let svc = ipvs.service(key)?;
    let d = svc
        .dests()
        .iter()
        .find(|d| d.config.addr == addr && d.config.port == port)?;
    Some(d.id)
}

/// One installed service.
#[derive(Debug)]
struct Book {
    id: u32,
    key: SvcKey,
    config: ServiceConfig,
    /// Real servers in list order, with their `dests` index.
    dests: Vec<(DestConfig, u32)>,
    /// Its region of `slots` (offset, length).
    region: Option<(u32, u32)>,
    /// The client source ranges `sock_src_ranges` holds for it.
    ranges: Vec<SourceRange>,
    /// Its `sock_services` element as last written.
    svc: Option<Svc>,
}

/// The worker's books: what is installed where.
struct Tables {
    /// The programs and their maps: attached while the worker lives (the
    /// maps are used through `handles`).
    _loaded: Loaded,
    /// A handle on each map, its sizes asked once (a write is then one
    /// `bpf()` call, not two).
    handles: HashMap<&'static str, OwnedBpfMap>,
    services: HashMap<ServiceKey, Book>,
    free_svc: Vec<u32>,
    next_svc: u32,
    free_dest: Vec<u32>,
    next_dest: u32,
    /// Deleted real servers' indexes, reused once no socket counts on them.
    deleted: Vec<u32>,
    /// Free ranges of `slots`.
    free_slots: SlotAlloc,
    /// Regions and service ids waiting out the grace period: (tick freed).
    retired_regions: Vec<(u64, u32, u32)>,
    retired_svc: Vec<(u64, u32)>,
    tick: u64,
    /// The sock_diag socket that destroys connected UDP sockets (opened at
    /// the first deletion that needs it).
    diag: Option<SockDiag>,
    /// The live real server at each `dests` index.
    owner: HashMap<u32, (ServiceKey, IpAddr, u16)>,
    /// `sock_stats` as last read, by index (up to `next_dest`).
    last: Vec<DestStats>,
    /// Since the last read: real servers added (their indexes) and gone.
    fresh: Vec<u32>,
    gone: Vec<(ServiceKey, IpAddr, u16)>,
    /// The commands refused for want of room: named, counted, summed up.
    no_room: NoRoom,
    /// The rtnetlink socket that asks the kernel for the source toward a
    /// ranged service's VIP (opened at the first such service).
    netlink: Option<Netlink>,
    /// Where the next report's node-verdict re-check starts.
    recheck: usize,
}

fn map_err(map: &'static str) -> impl FnOnce(std::io::Error) -> SockError {
    move |source| SockError::Map { map, source }
}

impl Tables {
    fn new(loaded: Loaded) -> Result<Self, SockError> {
        let names = [
            name::SERVICES,
            name::DESTS,
            name::SLOTS,
            name::STATS,
            name::CURSOR,
            name::SOCKS,
            name::COUNTERS,
            name::SRC_RANGES,
        ];
        let mut handles = HashMap::new();
        for n in names {
            let h = OwnedBpfMap::new(loaded.map_fd(n)?).map_err(map_err(n))?;
            handles.insert(n, h);
        }
        Ok(Tables {
            _loaded: loaded,
            handles,
            services: HashMap::new(),
            free_svc: Vec::new(),
            next_svc: 0,
            free_dest: Vec::new(),
            next_dest: 0,
            deleted: Vec::new(),
            free_slots: SlotAlloc::new(cap::SLOTS),
            retired_regions: Vec::new(),
            retired_svc: Vec::new(),
            tick: 0,
            diag: None,
            owner: HashMap::new(),
            last: Vec::new(),
            fresh: Vec::new(),
            gone: Vec::new(),
            no_room: NoRoom::default(),
            netlink: None,
            recheck: 0,
        })
    }

    /// Apply commands in order and read the maps every [`REPORT_EVERY`]
    /// into `shared`, until told to stop. Commands refused for want of room
    /// go through [`NoRoom`] (the first of each map named, the rest
    /// counted and summed up at a later report); other errors are logged
    /// one by one.
    fn run(&mut self, rx: &Receiver<Msg>, processed: &AtomicU64, shared: &SockStats) {
        let mut next = std::time::Instant::now() + REPORT_EVERY;
        loop {
            let wait = next.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Msg::Apply(cmd)) => {
                    self.no_room.given(&cmd);
                    match self.apply(&cmd) {
                        Ok(()) => {}
                        Err(SockError::Full(map)) => {
                            for line in self.no_room.refused(&cmd, map) {
                                tracing::warn!(target: "rvs::sock", "sock data plane: {line}");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(target: "rvs::sock", command = ?cmd, "sock data plane: {e}");
                        }
                    }
                    processed.fetch_add(1, Ordering::Release);
                }
                Ok(Msg::Stop) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            if std::time::Instant::now() >= next {
                next = std::time::Instant::now() + REPORT_EVERY;
                self.tick += 1;
                self.collect();
                self.recheck_node();
                for line in self.no_room.tick() {
                    tracing::warn!(target: "rvs::sock", "sock data plane: {line}");
                }
                if let Ok(mut g) = shared.refused.lock() {
                    *g = self.no_room.totals();
                }
                if let Err(e) = self.read_stats(&shared.snapshot) {
                    tracing::warn!(target: "rvs::sock", "reading counters: {e}");
                }
                match self.read_sockets() {
                    Ok(s) => {
                        if let Ok(mut g) = shared.sockets.lock() {
                            *g = s;
                        }
                    }
                    Err(e) => tracing::warn!(target: "rvs::sock", "reading sockets: {e}"),
                }
                match self.read_events() {
                    Ok(c) => {
                        if let Ok(mut g) = shared.events.lock() {
                            *g = c;
                        }
                    }
                    Err(e) => tracing::warn!(target: "rvs::sock", "reading event counters: {e}"),
                }
            }
        }
    }

    fn map(&self, name: &'static str) -> Result<BpfMap<'_>, SockError> {
        self.handles
            .get(name)
            .map(OwnedBpfMap::map)
            .ok_or(SockError::MissingMap(name))
    }

    fn put<K: IntoBytes + zerocopy::Immutable, V: IntoBytes + zerocopy::Immutable>(
        &self,
        name: &'static str,
        k: &K,
        v: &V,
    ) -> Result<(), SockError> {
        self.map(name)?
            .update(k.as_bytes(), v.as_bytes(), 0)
            .map_err(map_err(name))
    }

    fn get<K: IntoBytes + zerocopy::Immutable, V: FromBytes + IntoBytes + Default>(
        &self,
        name: &'static str,
        k: &K,
    ) -> Result<Option<V>, SockError> {
        let mut v = V::default();
        let found = self
            .map(name)?
            .lookup(k.as_bytes(), v.as_mut_bytes())
            .map_err(map_err(name))?;
        Ok(found.then_some(v))
    }

    fn apply(&mut self, cmd: &Command) -> Result<(), SockError> {
        match cmd {
            Command::AddService { key, config } => self.add_service(key, config),
            Command::EditService { key, config } => {
                if let Some(b) = self.services.get_mut(key) {
                    b.config = config.clone();
                }
                self.publish(key)
            }
            Command::DelService { key } => self.del_service(key),
            Command::Clear => {
                let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
                for k in keys {
                    self.del_service(&k)?;
                }
                Ok(())
            }
            Command::AddDest { service, dest } => {
                if !self.services.contains_key(service) {
                    return Ok(());
                }
                let index = self.alloc_dest()?;
                self.put(name::STATS, &index, &DestStats::default())?;
                self.put(name::DESTS, &index, &maps::Dest::of(dest, true))?;
                if let Some(b) = self.services.get_mut(service) {
                    b.dests.push((*dest, index));
                }
                self.owner.insert(index, (*service, dest.addr, dest.port));
                if let Some(l) = self.last.get_mut(index as usize) {
                    *l = DestStats::default();
                }
                self.fresh.push(index);
                self.publish(service)
            }
            Command::EditDest { service, dest } => {
                let Some(index) = self.services.get_mut(service).and_then(|b| {
                    let e = b
                        .dests
                        .iter_mut()
                        .find(|(d, _)| d.addr == dest.addr && d.port == dest.port)?;
                    e.0 = *dest;
                    Some(e.1)
                }) else {
                    return Ok(());
                };
                self.put(name::DESTS, &index, &maps::Dest::of(dest, true))?;
                self.publish(service)
            }
            Command::DelDest {
                service,
                addr,
                port,
            } => {
                let Some((cfg, index)) = self.services.get_mut(service).and_then(|b| {
                    let p = b
                        .dests
                        .iter()
                        .position(|(d, _)| d.addr == *addr && d.port == *port)?;
                    Some(b.dests.remove(p))
                }) else {
                    return Ok(());
                };
                self.put(name::DESTS, &index, &maps::Dest::of(&cfg, false))?;
                self.deleted.push(index);
                self.owner.remove(&index);
                self.gone.push((*service, cfg.addr, cfg.port));
                let published = self.publish(service);
                if is_udp(service) {
                    self.abort_udp(index, &cfg);
                }
                published
            }
            // Met by the client's own address (see `admit`).
            Command::AddLaddr { .. } | Command::DelLaddr { .. } => Ok(()),
            Command::Zero { .. } | Command::SetTimeouts { .. } => Ok(()),
        }
    }

    fn add_service(&mut self, key: &ServiceKey, config: &ServiceConfig) -> Result<(), SockError> {
        let ServiceKey::Addr {
            protocol,
            addr,
            port,
        } = *key
        else {
            return Ok(());
        };
        let id = match self.free_svc.pop() {
            Some(i) => i,
            None if self.next_svc < cap::SERVICES => {
                self.next_svc += 1;
                self.next_svc - 1
            }
            None => return Err(SockError::Full("services")),
        };
        self.put(name::CURSOR, &id, &0u64)?;
        self.services.insert(
            *key,
            Book {
                id,
                key: SvcKey::new(protocol, addr, port),
                config: config.clone(),
                dests: Vec::new(),
                region: None,
                ranges: Vec::new(),
                svc: None,
            },
        );
        self.publish(key)
    }

    fn del_service(&mut self, key: &ServiceKey) -> Result<(), SockError> {
        let Some(b) = self.services.remove(key) else {
            return Ok(());
        };
        let m = self.map(name::SERVICES)?;
        m.delete(b.key.as_bytes())
            .map_err(map_err(name::SERVICES))?;
        // Its id is reused after the grace period: its ranges go now (the
        // element that looked them up is gone). One that cannot be removed
        // is logged: a later service of the id could admit it.
        for r in &b.ranges {
            if let Err(e) = self.set_range(b.id, r, false) {
                tracing::warn!(target: "rvs::sock", range = %r, "removing a deleted service's source range: {e}");
            }
        }
        for (cfg, index) in &b.dests {
            self.put(name::DESTS, index, &maps::Dest::of(cfg, false))?;
            self.deleted.push(*index);
            self.owner.remove(index);
            self.gone.push((*key, cfg.addr, cfg.port));
        }
        if is_udp(key) {
            for (cfg, index) in &b.dests {
                self.abort_udp(*index, cfg);
            }
        }
        if let Some((off, len)) = b.region {
            self.retired_regions.push((self.tick, off, len));
        }
        self.retired_svc.push((self.tick, b.id));
        Ok(())
    }

    /// Write the service's region and element (see the module doc).
    fn publish(&mut self, key: &ServiceKey) -> Result<(), SockError> {
        let Some(b) = self.services.get(key) else {
            return Ok(());
        };
        let layout = maps::layout(&b.config, &b.dests).map_err(|e| SockError::Program {
            program: "sock_services",
            what: "publish",
            message: e.to_string(),
        })?;
        let len = (layout.list.len() + layout.table.len()) as u32;
        let region = if len == 0 {
            None
        } else {
            Some((self.alloc_slots(len)?, len))
        };
        let off = region.map_or(0, |r| r.0);
        let write = |t: &Tables| -> Result<(), SockError> {
            let slots = t.map(name::SLOTS)?;
            for (i, v) in layout.list.iter().chain(&layout.table).enumerate() {
                slots
                    .update((off + i as u32).as_bytes(), v.as_bytes(), 0)
                    .map_err(map_err(name::SLOTS))?;
            }
            Ok(())
        };
        if let Err(e) = write(self) {
            if let Some((o, l)) = region {
                self.free_range(o, l);
            }
            return Err(e);
        }
        // Source ranges: the new ones before the element that flags them,
        // the old ones out after it. One that cannot be added leaves the
        // service flagged with those that could (closed to the rest, never
        // open), and the error is returned once the element is written.
        let node_ok = self.node_verdict(key);
        let Some(b) = self.services.get(key) else {
            return Ok(());
        };
        let (id, want) = (b.id, b.config.source_ranges.clone());
        let mut ranges = b.ranges.clone();
        let mut ranges_err = None;
        for r in want.iter().filter(|r| !b.ranges.contains(r)) {
            match self.set_range(id, r, true) {
                Ok(()) => ranges.push(*r),
                Err(e) => {
                    ranges_err = Some(e);
                    break;
                }
            }
        }
        if let Some(b) = self.services.get_mut(key) {
            b.ranges.clone_from(&ranges);
        }
        let Some(b) = self.services.get(key) else {
            return Ok(());
        };
        let svc = Svc {
            id: b.id,
            sched: maps::sched_id(b.config.scheduler).unwrap_or(maps::sched::RR),
            flags: maps::svc_flags(&b.config, node_ok),
            list_off: off,
            list_len: layout.list.len() as u32,
            table_off: off + layout.list.len() as u32,
            table_len: layout.table.len() as u32,
            persist_secs: b.config.persistent.unwrap_or(0),
        };
        let svc_key = b.key;
        if let Err(e) = self.put(name::SERVICES, &svc_key, &svc) {
            if let Some((o, l)) = region {
                self.free_range(o, l);
            }
            return Err(e);
        }
        // A range that cannot be removed stays listed (removed with the
        // service, or by a later publish).
        let kept: Vec<SourceRange> = ranges
            .into_iter()
            .filter(|r| {
                want.contains(r)
                    || self
                        .set_range(id, r, false)
                        .inspect_err(|e| tracing::warn!(target: "rvs::sock", range = %r, "removing a source range: {e}"))
                        .is_err()
            })
            .collect();
        let old = match self.services.get_mut(key) {
            Some(b) => {
                b.ranges = kept;
                b.svc = Some(svc);
                std::mem::replace(&mut b.region, region)
            }
            None => None,
        };
        if let Some((o, l)) = old {
            self.retired_regions.push((self.tick, o, l));
        }
        ranges_err.map_or(Ok(()), Err)
    }

    /// Add (`present`) or remove range `r` of service `id` in
    /// `sock_src_ranges`; a full trie is [`SockError::Full`].
    fn set_range(&self, id: u32, r: &SourceRange, present: bool) -> Result<(), SockError> {
        let k = SrcKey::of(id, r);
        let m = self.map(name::SRC_RANGES)?;
        if present {
            m.update(k.as_bytes(), 1u8.as_bytes(), 0).map_err(|e| {
                let full = [nix::errno::Errno::ENOSPC, nix::errno::Errno::E2BIG].map(|n| n as i32);
                if e.raw_os_error().is_some_and(|n| full.contains(&n)) {
                    SockError::Full("src_ranges")
                } else {
                    map_err(name::SRC_RANGES)(e)
                }
            })
        } else {
            m.delete(k.as_bytes())
                .map(drop)
                .map_err(map_err(name::SRC_RANGES))
        }
    }

    /// Whether an unbound socket may reach service `key`
    /// ([`maps::node_allowed`] of its ranges and of the source the kernel
    /// gives a socket toward its VIP, `RTM_GETROUTE`); false without
    /// ranges (the flag means nothing then) and when the kernel cannot be
    /// asked (closed, logged).
    fn node_verdict(&mut self, key: &ServiceKey) -> bool {
        let (ServiceKey::Addr { addr, .. }, Some(b)) = (key, self.services.get(key)) else {
            return false;
        };
        if b.config.source_ranges.is_empty() {
            return false;
        }
        let ranges = b.config.source_ranges.clone();
        if self.netlink.is_none() {
            match Netlink::open() {
                Ok(n) => self.netlink = Some(n),
                Err(e) => {
                    tracing::warn!(target: "rvs::sock", "rtnetlink: {e}: unbound sockets are refused by services with source ranges");
                    return false;
                }
            }
        }
        let source = match self.netlink.as_mut().map(|n| n.route(*addr)) {
            Some(Ok(r)) => r.prefsrc,
            Some(Err(e)) => {
                tracing::debug!(target: "rvs::sock", vip = %addr, "no route's source toward the VIP: {e}");
                None
            }
            None => None,
        };
        maps::node_allowed(&ranges, source)
    }

    /// Ask the kernel again for the node verdict of up to
    /// [`RECHECK_PER_REPORT`] services with source ranges (in turn), and
    /// rewrite the element of each whose verdict changed (a route or an
    /// address changed since).
    fn recheck_node(&mut self) {
        let ranged: Vec<ServiceKey> = self
            .services
            .iter()
            .filter(|(_, b)| !b.config.source_ranges.is_empty() && b.svc.is_some())
            .map(|(k, _)| *k)
            .collect();
        if ranged.is_empty() {
            return;
        }
        let n = ranged.len();
        let take = n.min(RECHECK_PER_REPORT);
        for i in 0..take {
            let key = ranged[(self.recheck + i) % n];
            let ok = self.node_verdict(&key);
            let Some(b) = self.services.get(&key) else {
                continue;
            };
            let Some(mut svc) = b.svc else { continue };
            let flags = maps::svc_flags(&b.config, ok);
            if svc.flags == flags {
                continue;
            }
            svc.flags = flags;
            let svc_key = b.key;
            match self.put(name::SERVICES, &svc_key, &svc) {
                Ok(()) => {
                    if let Some(b) = self.services.get_mut(&key) {
                        b.svc = Some(svc);
                    }
                    tracing::info!(target: "rvs::sock", service = ?key, allowed = ok, "unbound local sockets' verdict changed with the route toward the VIP");
                }
                Err(e) => {
                    tracing::warn!(target: "rvs::sock", service = ?key, "node verdict: {e}");
                }
            }
        }
        self.recheck = (self.recheck + take) % n;
    }

    /// Destroy the connected UDP sockets the programs gave real server
    /// `index` (just deleted, `dest` its configuration): Cilium leaves them
    /// on the deleted backend (cilium#48096), where an application that
    /// connected once waits for answers that never come. Only the sockets
    /// `sock_socks` records on that index are touched (the programs
    /// translated their connect), so a socket that connected to the real
    /// server's address itself is left alone. Each is destroyed through
    /// sock_diag (`SOCK_DESTROY`): its next receive fails with
    /// `ECONNABORTED` and the socket is disconnected; connecting it again
    /// schedules it anew. Sockets of other network namespaces than rvsd's
    /// are not seen by sock_diag and stay (a limit). Failures are logged:
    /// the deletion itself is done.
    fn abort_udp(&mut self, index: u32, dest: &DestConfig) {
        let cookies = match self.udp_cookies(index) {
            Ok(c) if c.is_empty() => return,
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(target: "rvs::sock", "connected UDP sockets of a deleted real server: {e}");
                return;
            }
        };
        if self.diag.is_none() {
            match SockDiag::open() {
                Ok(d) => self.diag = Some(d),
                Err(e) => {
                    tracing::warn!(target: "rvs::sock", "sock_diag: {e}: connected UDP sockets stay on deleted real servers");
                    return;
                }
            }
        }
        let Some(diag) = self.diag.as_mut() else {
            return;
        };
        let peer = SocketAddr::new(dest.addr, dest.port);
        // An IPv4 real server may be reached by dual-stack IPv6 sockets too.
        let families: &[bool] = if peer.is_ipv4() {
            &[false, true]
        } else {
            &[true]
        };
        let mut destroyed = 0usize;
        for &ipv6 in families {
            let listed = match diag.connected_udp(ipv6) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(target: "rvs::sock", "sock_diag: listing UDP sockets: {e}");
                    continue;
                }
            };
            for s in listed {
                if s.peer_unmapped() != peer || !cookies.contains(&s.cookie) {
                    continue;
                }
                match diag.destroy_udp(&s) {
                    Ok(true) => destroyed += 1,
                    // Closed or connected elsewhere meanwhile.
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(target: "rvs::sock", socket = %s.local, "sock_diag: destroying a UDP socket: {e}");
                    }
                }
            }
        }
        if destroyed > 0 {
            tracing::info!(target: "rvs::sock", real_server = %peer, destroyed, "connected UDP sockets of a deleted real server destroyed");
        }
    }

    /// The cookies of the UDP sockets `sock_socks` records on real server
    /// `index` (a walk bounded by the map's capacity).
    fn udp_cookies(&self, index: u32) -> Result<HashSet<u64>, SockError> {
        let socks = self.map(name::SOCKS)?;
        let mut out = HashSet::new();
        let mut key: Option<u64> = None;
        let mut next = 0u64;
        let mut seen = 0usize;
        while socks
            .next_key(key.as_ref().map(|k| k.as_bytes()), next.as_mut_bytes())
            .map_err(map_err(name::SOCKS))?
        {
            key = Some(next);
            seen += 1;
            let mut rec = SockRec::default();
            if socks
                .lookup(next.as_bytes(), rec.as_mut_bytes())
                .map_err(map_err(name::SOCKS))?
                && rec.dest == index
                && rec.vip.proto == Protocol::Udp.number()
            {
                out.insert(next);
            }
            if seen >= cap::SOCKS as usize {
                break;
            }
        }
        Ok(out)
    }

    fn alloc_dest(&mut self) -> Result<u32, SockError> {
        if let Some(i) = self.free_dest.pop() {
            return Ok(i);
        }
        if self.next_dest < cap::DESTS {
            self.next_dest += 1;
            return Ok(self.next_dest - 1);
        }
        Err(SockError::Full("dests"))
    }

    /// First fit in the free ranges.
    fn alloc_slots(&mut self, len: u32) -> Result<u32, SockError> {
        self.free_slots
            .alloc(len)
            .map(|r| r.off)
            .ok_or(SockError::Full("slots"))
    }

    fn free_range(&mut self, off: u32, len: u32) {
        self.free_slots.release(Region { off, len });
    }

    /// Free what waited out the grace period (two reports), and deleted
    /// real servers' indexes no open socket counts on.
    fn collect(&mut self) {
        let tick = self.tick;
        let (ready, keep): (Vec<_>, Vec<_>) = self
            .retired_regions
            .drain(..)
            .partition(|&(t, _, _)| t + 2 <= tick);
        self.retired_regions = keep;
        for (_, o, l) in ready {
            self.free_range(o, l);
        }
        let (ready, keep): (Vec<_>, Vec<_>) = self
            .retired_svc
            .drain(..)
            .partition(|&(t, _)| t + 2 <= tick);
        self.retired_svc = keep;
        self.free_svc.extend(ready.into_iter().map(|(_, i)| i));
        let deleted = std::mem::take(&mut self.deleted);
        for index in deleted {
            match self.get::<u32, DestStats>(name::STATS, &index) {
                Ok(Some(st)) if st.active > 0 => self.deleted.push(index),
                _ => self.free_dest.push(index),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(active: u64, total: u64) -> DestStats {
        DestStats { active, total }
    }

    #[test]
    fn more_source_ranges_than_the_trie_holds_are_refused() {
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "192.0.2.1".parse().unwrap(),
            port: 80,
        };
        let mut config = ServiceConfig::new(rvs_core::model::AddrFamily::Inet);
        config.source_ranges = (0..=cap::SRC_RANGES)
            .map(|i| SourceRange::new(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), 32).unwrap())
            .collect();
        let e = admit_service(&key, &config).unwrap_err();
        assert!(e.contains("16385 client source ranges"), "{e}");
        config.source_ranges.pop();
        assert_eq!(admit_service(&key, &config), Ok(()));
    }

    #[test]
    fn only_changed_counters_are_passed_on() {
        let mut last = Vec::new();
        // First read: what is not zero.
        let now = vec![st(0, 0), st(1, 5), st(0, 0)];
        assert_eq!(diff_stats(&mut last, &now), [1]);
        assert_eq!(last, now);
        // Nothing moved: nothing passed on.
        assert!(diff_stats(&mut last, &now).is_empty());
        // A socket closed on 1, one opened on 2, and a new index 3.
        let now = vec![st(0, 0), st(0, 5), st(1, 1), st(0, 0), st(2, 2)];
        assert_eq!(diff_stats(&mut last, &now), [1, 2, 4]);
        assert_eq!(last, now);
    }
}
