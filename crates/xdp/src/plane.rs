//! The XDP data plane's control side: [`Plane`] turns every accepted
//! [`Command`] into map writes and reports what the program carried back to
//! the control plane's director.
//!
//! # What runs where (and why nothing blocks the control plane)
//! rvsd's control plane — VRRP, health checks, the control socket — runs on
//! one current-thread runtime under one daemon lock, and calls
//! [`DataPlane::apply`](rvs_control::dataplane::DataPlane::apply) under
//! that lock. So the XDP plane is three parts, none of which makes a
//! syscall or waits while that lock is held:
//! * [`Plane`] is sans-IO: its decisions are plain functions over
//!   [`MapOps`] and plain data. It holds no resolver: it says which
//!   neighbours it wants ([`Plane::wanted`]) and takes what is learnt as
//!   events ([`Plane::on_neighbour`]). Its report is three phases
//!   ([`Plane::report_read`], [`Plane::report_decide`],
//!   [`Plane::report_write`]): read the maps, decide with the director,
//!   write.
//! * The resolver task ([`resolver`], its own thread) owns the netlink
//!   socket: it solicits and polls unresolved neighbours with a backoff
//!   and re-checks next hops in use every second. Hundreds of addresses
//!   that never answer cost it a look-up each per second, nobody else
//!   anything.
//! * The plane worker ([`PlaneHandle`], its own thread) owns the
//!   `Plane<KernelMaps>`: the handle's `apply` only queues the command;
//!   the worker applies commands in order and reports every second,
//!   borrowing the director ([`DirectorHandle`](rvs_control::dataplane::DirectorHandle))
//!   for the pure phase only.
//!
//! Convergence rule: a report re-applies what the model has and the maps
//! lack (after a failed write) only when every command the control plane
//! sent has been applied — counted under the daemon lock on both sides —
//! so it never repeats a change still in the queue.
//!
//! # Map writes
//! Every write goes through [`MapOps`], one small trait in front of the BPF
//! syscalls (the seam aya itself puts in front of its syscalls for its
//! tests): [`KernelMaps`] is the loaded program, `MemMaps` an in-memory
//! implementation with the same bounds and key rules, so the whole sync
//! logic is unit-tested without a kernel, including failures injected at
//! every write.
//!
//! * Services get an index in `svc_info` (from a free list); the `services`
//!   hash maps the (protocol, VIP, port) key to it.
//! * Real servers get an index in `dests`; a real server deleted while flows
//!   still use it keeps its index, marked `UNAVAILABLE` (its flows' packets
//!   are dropped and a new SYN is rescheduled, as IPVS does without
//!   `expire_nodest_conn`), and is resurrected with the same index when it is
//!   added back; the index is freed once no flow refers to it.
//! * Scheduling data (the real-server list, then the sh/dh/mh table or the
//!   wrr cycle) lives in a region of `slots`. A change writes a fresh region,
//!   then flips the service's `svc_info` element (one atomic element write),
//!   and frees the old region only after a grace period: two reports later
//!   (at least one full report interval, a second in rvsd), far longer than
//!   any program run that may still read the old region. Freed `svc_info`
//!   indexes wait the same way.
//! * A real server whose MAC is not known yet (DR: its own; TUN: the next
//!   hop's, see [`crate::neigh`]) is left out of its service's scheduling
//!   data, so no new flow goes to it, until it is resolved; then the service
//!   is republished. NAT real servers need no MAC (the program routes with
//!   `bpf_fib_lookup`).
//! * The program's per-CPU flow caches (`flow_cache` in front of `flows4`,
//!   `flow6_cache` in front of `flows`, see `fast_established` and
//!   `fast_established6` in xdp_lb.c) need nothing from this side beyond
//!   the epoch bump of [`crate::Loaded::set_flow`]. Every
//!   write here that a cached packet depends on is read by the cached path
//!   itself: a real server's element (`UNAVAILABLE`, method, MAC, a freed
//!   index cleared to zero) on every packet. Flows are only removed here
//!   once expired, and an expired flow has no valid cache entry: the program
//!   caches a flow only when its timeout is longer than the cache's bound
//!   (`FLOW_CACHE_JIFFIES`), stamps the flow whenever it fills the entry,
//!   and an entry is valid for that bound only. A freed real-server index is
//!   reused two reports (at least a second) after the last flow using it
//!   went, far past that bound. What the bound does cover: a shortened
//!   timeout (`config`) reaches a cached flow within it, and so does a flow
//!   removed here between this side's read and its delete that the program
//!   had just renewed (a race as old as the sweep).
//!
//! * A QUIC-LB service (`--quic-lb`, see [`crate::quic_lb`]) has its key in
//!   `quic_services` instead of `services`, its configurations in `quic_lb`
//!   (every live one: during a key rotation two codepoints, written in one
//!   element), and its real servers' server IDs in `quic_sids`, synced
//!   whenever its real servers change (added, edited, deleted, resolved):
//!   every installed, ready real server with a server ID is there whatever
//!   its weight (weight 0 drains: its QUIC connections stay, as in the
//!   proxy plane); a deleted one's ID goes, so its datagrams take the
//!   fallback hash. An edit turning QUIC-LB on or off adds the key to its
//!   new map before removing it from the old one (`xdp_lb` looks
//!   `services` up first, so no packet finds neither). Its counters
//!   (`quic_stats`) reach the director from a baseline taken when it
//!   became a QUIC-LB service at its index.
//!
//! A control operation that fails leaves the maps and this side's books as
//! they were (each step undoes the previous ones). The control plane keeps
//! the change in its model; the next report compares the model with what
//! is installed and applies the difference, so the data plane converges.
//! A service the maps have no room for is refused once (`no room in
//! svc_info`); commands about it are then ignored, and the report after
//! room is freed (an index or a region past its grace period, a deleted
//! real server's index given back) installs it with its real servers —
//! the oldest waiting first, as many as the freed room holds; a report
//! with nothing freed retries nothing. A real server or an edit of an
//! installed service that finds no room waits the same way.
//!
//! What the XDP program cannot do is refused with a clear error: fwmark
//! services (XDP runs before the skb exists, so there is no packet mark),
//! `Local` real servers, FULLNAT pools the program cannot hold, QUIC-LB on
//! a port-zero service or with four-pass configurations (the program
//! decodes plaintext and single-pass CIDs), FULLNAT real servers under
//! QUIC-LB (see [`admit`], [`check_quic_dests`]). FULLNAT runs in the tail-called `xdp_fnat` (bpf/lib/fnat.h).
//! Every scheduler of the core runs in the program.
//!
//! # Reporting
//! [`Plane::report_to`] mirrors the program's state into the control plane's
//! director, so every front end (`rvsadm -Ln`, `--stats`, `--rate`, `-Lcn`,
//! metrics) works unchanged:
//! * the per-CPU counters of every real server are summed and the growth
//!   since the previous report is added to the director
//!   ([`Ipvs::add_counters`], which also feeds the service, the total and so
//!   the rate estimators; `-Z` zeroes the director's side only, and later
//!   growth adds to zero);
//! * every live flow and persistence template is mirrored into the
//!   director's connection table ([`Ipvs::mirror_conn`]: state, real server,
//!   time left), and entries whose flow is gone or expired are removed. So
//!   ActiveConn/InActConn, the persistent count and `-Lcn` are the
//!   program's, at most one report old;
//! * the same pass is the program's sweep: expired flows and templates are
//!   deleted, and `dest_conns` (the ActiveConn/InActConn the program keeps
//!   for lc/wlc/sed/nq/ovf/lblc/lblcr) is corrected from the live flows,
//!   repairing what the program never subtracts (flows the sweep deletes
//!   as expired, flows the LRU evicted). The program's count is the truth
//!   and the walk's a correction for that drift: a real server's count is
//!   set to the walk's only if the program left it unchanged while the walk
//!   ran (a walk spans reports and would miss flows made meanwhile); one
//!   the program changed during `report::BUSY_WALKS` walks in a row
//!   gets the walk's count plus the program's change during the last;
//! * connection thresholds (`-x`/`-y`): the director decides overload from
//!   the mirrored connections with IPVS's hysteresis, and the real server's
//!   `OVERLOADED` flag follows;
//! * timeouts set on the director directly (keepalived.conf) reach `config`.
//!
//! The flow table is read with `BPF_MAP_LOOKUP_BATCH` (4096 entries per
//! syscall), one page of [`MIRROR_PAGE`] flows per report: a table larger
//! than a page is walked over several reports, so a report's work is
//! bounded however many flows there are (`report_cost_with_many_flows`
//! prints it), and of that work only the mirroring of the page into the
//! director holds the control plane's lock (phase 2). What needs the whole table —
//! removing the entries of flows that are gone, setting `dest_conns`,
//! giving a deleted real server's index back — happens when a walk
//! completes. The price: with a table of N pages, `-Lcn` and the counts
//! are up to N reports old, and an entry whose time left ran out in the
//! director before the walk came back to it disappears from the view until
//! then (only short-lived states: SYN_RECV, CLOSE, FIN_WAIT…).
//!
//! Mirroring (rather than giving the view a second source of connections)
//! keeps one connection table with one set of invariants: counts per real
//! server, expiry, the trash of deleted real servers and the audit all stay
//! the core's.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use rvs_control::protocol::Command;
use rvs_core::conn::ConnId;
use rvs_core::dest::Dest as CoreDest;
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::{
    DestConfig, ForwardMethod, PersistMask, Protocol, ServiceConfig, ServiceKey, TunnelCsum,
    TunnelType,
};
use rvs_core::sched::SchedParams;
use rvs_core::state::{TcpState, Timeouts};
use rvs_core::stats::Counters;

use crate::XdpError;
pub use crate::maps::KernelMaps;
#[cfg(any(test, feature = "mem-maps"))]
pub use crate::maps::MemMaps;
use crate::maps::{
    self, Config, DestConns, Flow, FlowKey, Fnat, FnatKey, Nat, NatKey, Persist, PersistKey, Stats,
    Svc, SvcKey,
};
pub use crate::maps::{MapOps, WalkCursor};
use crate::neigh::L2;
use crate::quic_lb::{QuicCfg, QuicSidKey, QuicStats, QuicSvc};
use crate::tables::{TableError, scheduling_table};

mod admission;
mod adopt;
mod alloc;
mod apply;
mod flood;
mod fnat;
pub mod forwarding;
mod l2;
mod report;
pub mod resolver;
mod retry;
mod room;
mod startup;
mod synced;
#[cfg(test)]
mod tests;
mod worker;

pub use l2::{REPLY_HOP_REPORTS, REPLY_HOPS_MAX, Wanted};
pub use report::{ReportRead, ReportWrites};
pub use worker::{DRAIN_EVERY, PlaneHandle, REPORT_EVERY};

use alloc::{IndexAlloc, Region, Retired, SlotAlloc};
pub use flood::FloodStats;

pub use admission::{admit, check_pool_sizes, check_quic_dests};
pub use startup::{XdpOptions, XdpPlane};
pub use synced::SyncedFlow;

/// Why the XDP data plane could not apply a change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaneError {
    /// A map operation failed (the change was undone).
    #[error(transparent)]
    Map(#[from] XdpError),
    /// The XDP program cannot carry this configuration.
    #[error("{0}")]
    Refused(String),
    /// The scheduling table could not be built.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A map is full.
    #[error("no room in `{0}`")]
    Full(&'static str),
    /// A command names a service this data plane does not have.
    #[error("no such service in the xdp data plane: {0:?}")]
    NoService(ServiceKey),
}

/// An installed real server.
#[derive(Clone, Debug)]
struct DestState {
    index: u32,
    /// Configuration and last non-zero weight, as the core keeps them.
    core: CoreDest,
    /// The resolved link layer (the next hop); `None` while not known.
    /// DR/TUN need it; NAT uses it when known (else the kernel's FIB).
    l2: Option<L2>,
}

impl DestState {
    fn needs_l2(&self) -> bool {
        !self.is_nat() && !matches!(self.core.config.forward, ForwardMethod::FullNat)
    }
    fn is_nat(&self) -> bool {
        matches!(self.core.config.forward, ForwardMethod::Masq)
    }
    fn ready(&self) -> bool {
        !self.needs_l2() || self.l2.is_some()
    }
}

/// An installed service.
#[derive(Debug)]
struct SvcState {
    index: u32,
    config: ServiceConfig,
    /// IPVS list order (newest first), as the core keeps it.
    dests: Vec<DestState>,
    region: Option<Region>,
    svc: Svc,
    /// The FULLNAT local address pool, as the core keeps it.
    laddrs: Vec<rvs_core::model::LocalAddrRange>,
    /// QUIC-LB: the server IDs `quic_sids` holds for this service, with
    /// their real server's dest index (what the last sync wrote).
    sids: HashMap<QuicSidKey, u32>,
    /// The client source ranges `src_ranges` holds for this service (what
    /// the last sync wrote).
    ranges: Vec<rvs_core::model::SourceRange>,
    /// Where the wrr cursor stands in the kernel's terms (`None`: not known,
    /// a service adopted from an earlier rvsd: its cursor is left alone).
    wrr: Option<WrrState>,
}

/// A wrr service's cursor as the kernel's mark (`rvs_core::sched::WrrMark`).
/// The mark follows the configured list, as the kernel's follows its
/// destinations; the cursor steps through the cycle of the ready real
/// servers (the same list once every next hop is known).
#[derive(Clone, Debug, Default)]
struct WrrState {
    /// The mark that holds while the cursor is at `base`.
    mark: rvs_core::sched::WrrMark,
    /// The cursor value last written.
    base: u64,
    /// The configured list: address, port, weight of each real server.
    all: Vec<(IpAddr, u16, u32)>,
    /// The ready real servers the cycle was built from.
    ready: Vec<CoreDest>,
}

/// A deleted real server whose index flows may still use.
#[derive(Debug)]
struct Trashed {
    service: ServiceKey,
    dest: DestState,
    /// Report generation when it was deleted.
    since: u64,
}

/// The sync logic of the XDP data plane over any [`MapOps`]: no I/O but
/// the map operations, no clock, no neighbour resolution (see the module
/// doc).
#[derive(Debug)]
pub struct Plane<M: MapOps> {
    maps: M,
    services: HashMap<ServiceKey, SvcState>,
    /// Services refused (fwmark, unsupported scheduler): commands about
    /// them are ignored; an edit makes them candidates again.
    refused: HashSet<ServiceKey>,
    /// Services the maps had no room for (the service itself: commands
    /// about it are ignored, its refusal was the service's; or a change of
    /// an installed one): retried from the model, with their real servers,
    /// by the report after room is freed — not at every report.
    room: room::RoomWait,
    svc_idx: IndexAlloc,
    dest_idx: IndexAlloc,
    slots: SlotAlloc,
    retired: Vec<(u64, Retired)>,
    trash: Vec<Trashed>,
    generation: u64,
    timeouts: Timeouts,
    config: Config,
    /// Tunnel source addresses given by the operator (else from the route).
    tun_src: (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>),
    /// Host bits of the tunnel sources varied per flow (IPv4, IPv6).
    tun_vary: (u8, u8),
    /// Last read counters per dest index.
    baselines: HashMap<u32, Stats>,
    /// The walk of the flow tables in progress (one page per report).
    flow_walk: Walk,
    /// The walk of the persistence templates in progress.
    persist_walk: Walk,
    /// What the last complete walk of each found.
    flows_done: Option<WalkDone>,
    persist_done: Option<WalkDone>,
    /// Entries per table per report (see [`Plane::set_mirror_page`]).
    mirror_page: usize,
    /// Real-server indexes whose `dest_conns` the program changed during
    /// the last flow walks, with how many walks in a row (see
    /// `report::conns_fix`).
    conns_busy: HashMap<u32, u32>,
    /// Connection entries mirrored from flows by the last complete walk.
    mirrored_flows: HashSet<ConnId>,
    /// Connection entries mirrored from templates by the last complete walk.
    mirrored_templates: HashSet<ConnId>,
    /// Services whose map writes failed: compared with the model at the
    /// next report that converges (see [`retry`]).
    dirty: retry::Retry,
    /// Services convergence compared with the model, for
    /// [`Plane::diffed`].
    diffed: u64,
    /// Commands the reports replayed from the model (convergence and
    /// services let in when room was freed), for [`Plane::replayed`].
    replayed: u64,
    /// The interfaces the program is attached to, and the MACs it acts on
    /// there (as written in the own-MAC table): followed by the resolver
    /// task, so a VRRP `use_vmac` macvlan's virtual MAC or a changed
    /// interface MAC reaches the program within a second.
    links: Vec<u32>,
    own: crate::own_mac::OwnMacs,
    /// State adopted from maps a previous instance left pinned, until the
    /// configuration claimed it (see `adopt`).
    adopted: Option<adopt::Adopted>,
    /// Real-server indexes found in the adopted maps that no service
    /// claims: held while flows use them.
    orphans: Vec<adopt::Orphan>,
    /// The SYN-flood counters the reports publish, and their baselines.
    flood: std::sync::Arc<FloodStats>,
    flood_base: flood::FloodBase,
    /// Next hops the program found without a neighbour entry (NAT replies
    /// toward clients, after a failover), with the reports each stays
    /// wanted (see [`Plane::take_missing_hops`]).
    reply_hops: std::collections::BTreeMap<std::net::IpAddr, u32>,
    /// `nh_missing_full` at the last report.
    missing_full: u64,
    /// QUIC-LB counters (`quic_stats`) of each QUIC-LB service as last
    /// read, with the index they were read at: a service's counts start
    /// from what its index held when it became a QUIC-LB service there.
    quic_base: HashMap<ServiceKey, (u32, QuicStats)>,
    /// A `quic_sids` write failed: the next report syncs every QUIC-LB
    /// service's server IDs again.
    quic_resync: bool,
    /// Server IDs of deleted services (or services no longer QUIC-LB)
    /// whose removal from `quic_sids` failed: retried by every report (a
    /// reused service index must not inherit them).
    quic_stale: Vec<QuicSidKey>,
    /// The sweep of FULLNAT translations whose flow is gone.
    fnat_sweep: fnat::FnatSweep,
    /// The local ports FULLNAT pools hand out (first, last).
    fnat_ports: (u16, u16),
    /// Synced FULLNAT flows whose local address and port another live
    /// flow held here: not loaded (see [`Plane::load_synced`]).
    synced_pairs_taken: u64,
}

/// Flows (and templates) mirrored per report by default: a report holds the
/// control plane's lock for a bounded time however large the tables are.
pub const MIRROR_PAGE: usize = 65_536;

/// A walk of a table, one page per report, and what it found so far.
#[derive(Debug, Default)]
struct Walk {
    cursor: WalkCursor,
    /// Report generation the walk began at.
    start: Option<u64>,
    /// Live entries per real-server index (counted for flows).
    users: HashMap<u32, DestConns>,
    /// The flow walk: `dest_conns` of every real-server index in use when
    /// it began (see `report::conns_fix`).
    conns_start: HashMap<u32, DestConns>,
    /// Connection entries mirrored by the walk.
    seen: HashSet<ConnId>,
}

/// What a complete walk found.
#[derive(Debug)]
struct WalkDone {
    /// Report generation it began at.
    start: u64,
    /// Real-server indexes in use.
    users: HashSet<u32>,
}

fn persist_mask(m: &PersistMask) -> [u8; 16] {
    let mut out = [0u8; 16];
    match m {
        PersistMask::V4(a) => out[..4].copy_from_slice(&a.octets()),
        PersistMask::V6(p) => {
            let p = u32::from((*p).min(128));
            let v = if p == 0 { 0 } else { u128::MAX << (128 - p) };
            out = v.to_be_bytes();
        }
    }
    out
}

/// The program's forwarding method, GUE port and real-server flags of `f`
/// (`RVS_FWD_*`, host order, `RVS_DEST_F_TUN_CSUM`), or why the program
/// cannot carry it.
fn method_of(f: &ForwardMethod) -> Result<(u8, u16, u32), PlaneError> {
    match f {
        ForwardMethod::Masq => Ok((maps::fwd::NAT, 0, 0)),
        ForwardMethod::Route => Ok((maps::fwd::DR, 0, 0)),
        ForwardMethod::FullNat => Ok((maps::fwd::FNAT, 0, 0)),
        ForwardMethod::Tunnel(t) => {
            let csum = match t.csum {
                TunnelCsum::NoCsum => 0,
                TunnelCsum::Csum => maps::dest_flags::TUN_CSUM,
                TunnelCsum::RemCsum => {
                    return Err(PlaneError::Refused(format!(
                        "{} tunnel with remote checksum offload (--tun-remcsum): the xdp data \
                         plane sends --tun-csum or --tun-nocsum",
                        t.kind.name()
                    )));
                }
            };
            match t.kind {
                // IPIP has no checksum option (ipvsadm refuses one).
                TunnelType::Ipip => Ok((maps::fwd::TUN_IPIP, 0, 0)),
                TunnelType::Gue if t.port != 0 => Ok((maps::fwd::TUN_GUE, t.port, csum)),
                TunnelType::Gue => Err(PlaneError::Refused(
                    "GUE tunnel without a port (--tun-port)".into(),
                )),
                TunnelType::Gre => Ok((maps::fwd::TUN_GRE, 0, csum)),
                TunnelType::Geneve => Ok((maps::fwd::TUN_GENEVE, 0, csum)),
                // No outer header: nothing to checksum.
                TunnelType::Opt => Ok((maps::fwd::TUN_OPT, 0, 0)),
            }
        }
        other => Err(PlaneError::Refused(format!(
            "forwarding method {} is not supported by the xdp data plane",
            other.name()
        ))),
    }
}

fn svc_key(key: &ServiceKey) -> Result<SvcKey, PlaneError> {
    match key {
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => match protocol {
            // Port 0: the program looks it up when no service has the
            // packet's port (IPVS's catch-all).
            Protocol::Tcp | Protocol::Udp => Ok(SvcKey::new(protocol.number(), *addr, *port)),
            Protocol::Sctp => Err(PlaneError::Refused(
                "SCTP services are not supported by the xdp data plane".into(),
            )),
        },
        ServiceKey::Fwmark { mark, .. } => Err(PlaneError::Refused(format!(
            "fwmark service {mark}: the xdp data plane cannot match firewall marks \
             (XDP runs before the kernel allocates the packet's skb, so there is no mark); \
             use protocol/address/port services"
        ))),
    }
}

fn sched_params(c: &ServiceConfig) -> SchedParams {
    SchedParams {
        flags: c.flags,
        mh_table_size: c.mh_table_size,
        ..SchedParams::default()
    }
}

/// Whether a service routes by QUIC-LB connection ID: its key goes in
/// `quic_services` (not `services`), its configurations in `quic_lb`, its
/// real servers' server IDs in `quic_sids`.
fn is_quic(c: &ServiceConfig) -> bool {
    !c.quic_lb.is_empty()
}

/// The program's form of a service's QUIC-LB configurations (`quic_lb`).
fn quic_value(c: &ServiceConfig) -> QuicSvc {
    let cfgs: Vec<(u8, QuicCfg)> = c
        .quic_lb
        .iter()
        .map(|q| {
            (
                q.rotation,
                QuicCfg::new(q.server_id_len, q.nonce_len, q.key.as_ref()),
            )
        })
        .collect();
    QuicSvc::new(&cfgs)
}

/// Refuse, before anything changes, the QUIC-LB services the program
/// cannot carry: a port-zero one (`xdp_lb` looks `quic_services` up by
/// the packet's exact port only) and four-pass configurations (the program
/// decodes plaintext and single-pass CIDs only: every four-pass CID would
/// take the fallback hash, and a migrated connection would break).
fn check_quic(key: &ServiceKey, c: &ServiceConfig) -> Result<(), PlaneError> {
    if !is_quic(c) {
        return Ok(());
    }
    if let ServiceKey::Addr { port: 0, .. } = key {
        return Err(PlaneError::Refused(
            "QUIC-LB on a port-zero service: the xdp data plane routes QUIC-LB services by \
             their exact port only; give the service its port, or use the proxy data plane"
                .into(),
        ));
    }
    if let Some(q) = c
        .quic_lb
        .iter()
        .find(|q| q.mode() == rvs_core::model::QuicLbMode::FourPass)
    {
        return Err(PlaneError::Refused(format!(
            "QUIC-LB config {}: four-pass connection IDs (sid + nonce != 16 with a key) \
             are not decoded by the xdp data plane (plaintext and single-pass are); use \
             sid + nonce = 16, or the proxy data plane",
            redacted_spec(q)
        )));
    }
    Ok(())
}

/// A QUIC-LB config's spec without its key (for messages).
fn redacted_spec(q: &rvs_core::model::QuicLbConfig) -> String {
    let mut s = format!(
        "cr={},sid={},nonce={}",
        q.rotation, q.server_id_len, q.nonce_len
    );
    if let Some(fp) = q.key_fingerprint() {
        s.push_str(&format!(",key=fp:{fp}"));
    }
    s
}

/// Refuse a FULLNAT real server under a QUIC-LB service: `xdp_quic`
/// forwards by DR, TUN and NAT only (FULLNAT's translation is per flow,
/// and QUIC-LB routing keeps no flow).
fn check_quic_dest(service: &ServiceKey, dest: &DestConfig) -> Result<(), PlaneError> {
    if matches!(dest.forward, ForwardMethod::FullNat) {
        return Err(PlaneError::Refused(format!(
            "FULLNAT real server {} under the QUIC-LB service {service:?}: the xdp data \
             plane's QUIC-LB routing forwards by DR, TUN or NAT (it keeps no flow for \
             FULLNAT's translation)",
            dest.addr
        )));
    }
    Ok(())
}

/// Refuse schedulers the program does not run (yet).
fn check_scheduler(c: &ServiceConfig) -> Result<u8, PlaneError> {
    let id = maps::sched::id(c.scheduler);
    scheduling_table(c.scheduler, &sched_params(c), &[], &[]).map_err(|e| match e {
        TableError::Unsupported(_) => PlaneError::Refused(format!(
            "scheduler `{}` is not run by the xdp data plane yet",
            c.scheduler
        )),
        other => PlaneError::Table(other),
    })?;
    Ok(id)
}

fn stats_delta(now: &Stats, then: &Stats) -> Counters {
    Counters {
        conns: now.conns.wrapping_sub(then.conns),
        inpkts: now.inpkts.wrapping_sub(then.inpkts),
        outpkts: now.outpkts.wrapping_sub(then.outpkts),
        inbytes: now.inbytes.wrapping_sub(then.inbytes),
        outbytes: now.outbytes.wrapping_sub(then.outbytes),
    }
}

impl<M: MapOps> Plane<M> {
    /// A plane over `maps` (freshly loaded: everything zero). Writes the
    /// default configuration.
    pub fn new(mut maps: M) -> Result<Self, PlaneError> {
        let timeouts = Timeouts::default();
        let mut config = Config::ipvs_defaults();
        fill_timeouts(&mut config, &timeouts);
        maps.set_config(&config)?;
        let mut plane = Plane::blank(maps);
        plane.config = config;
        Ok(plane)
    }

    /// Empty books over `maps`, nothing written.
    fn blank(maps: M) -> Self {
        let timeouts = Timeouts::default();
        let mut config = Config::ipvs_defaults();
        fill_timeouts(&mut config, &timeouts);
        let slots = SlotAlloc::new(maps.slots_len());
        let svc_idx = IndexAlloc::new(maps.services_len());
        Plane {
            maps,
            services: HashMap::new(),
            refused: HashSet::new(),
            room: room::RoomWait::default(),
            svc_idx,
            dest_idx: IndexAlloc::new(maps::MAX_DESTS),
            slots,
            retired: Vec::new(),
            trash: Vec::new(),
            generation: 0,
            timeouts,
            config,
            tun_src: (None, None),
            tun_vary: (0, 0),
            baselines: HashMap::new(),
            flow_walk: Walk::default(),
            persist_walk: Walk::default(),
            flows_done: None,
            persist_done: None,
            mirror_page: MIRROR_PAGE,
            conns_busy: HashMap::new(),
            mirrored_flows: HashSet::new(),
            mirrored_templates: HashSet::new(),
            dirty: retry::Retry::default(),
            diffed: 0,
            replayed: 0,
            links: Vec::new(),
            own: crate::own_mac::OwnMacs::default(),
            adopted: None,
            orphans: Vec::new(),
            flood: std::sync::Arc::default(),
            flood_base: flood::FloodBase::default(),
            reply_hops: std::collections::BTreeMap::new(),
            missing_full: 0,
            quic_base: HashMap::new(),
            quic_resync: false,
            quic_stale: Vec::new(),
            fnat_sweep: fnat::FnatSweep::default(),
            fnat_ports: (maps::FNAT_PORT_MIN, maps::FNAT_PORT_MAX),
            synced_pairs_taken: 0,
        }
    }

    /// Commands the reports have replayed from the director's model since
    /// the plane started (convergence after a failed write, services let
    /// in when room was freed): the work a report did beyond its reads.
    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// Services the reports compared with the director's model since the
    /// plane started, to converge after failed writes (only the services
    /// whose writes failed are compared): the work convergence did.
    pub fn diffed(&self) -> u64 {
        self.diffed
    }

    /// The maps (tests look at them).
    pub fn maps(&mut self) -> &mut M {
        &mut self.maps
    }

    /// Outer source addresses of tunnelled packets; without them the
    /// preferred source of the route to the first tunnel real server of the
    /// family is used.
    pub fn set_tunnel_sources(
        &mut self,
        v4: Option<std::net::Ipv4Addr>,
        v6: Option<std::net::Ipv6Addr>,
    ) -> Result<(), PlaneError> {
        self.tun_src = (v4, v6);
        self.tun_vary = (0, 0);
        self.write_config()
    }

    /// Outer tunnel sources varied per flow: a prefix per family whose host
    /// bits come from the flow hash, so a real server's RSS spreads
    /// tunnelled flows over its queues (one outer source would put them all
    /// on one). IPv4 prefixes of /16 to /32, IPv6 /96 to /128. The real
    /// servers must accept any source of the prefix (rvs's decapsulator
    /// checks only the inner destination; `rvsd realserver` relaxes
    /// `rp_filter`). A family without a prefix keeps its fixed source.
    pub fn set_tunnel_source_prefixes(
        &mut self,
        v4: Option<(std::net::Ipv4Addr, u8)>,
        v6: Option<(std::net::Ipv6Addr, u8)>,
    ) -> Result<(), PlaneError> {
        let mut vary = (0, 0);
        let mut src = self.tun_src;
        if let Some((a, len)) = v4 {
            if !(16..=32).contains(&len) {
                return Err(PlaneError::Refused(format!(
                    "tunnel source prefix {a}/{len}: an IPv4 prefix must be /16 to /32"
                )));
            }
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            src.0 = Some(std::net::Ipv4Addr::from(u32::from(a) & mask));
            vary.0 = 32 - len;
        }
        if let Some((a, len)) = v6 {
            if !(96..=128).contains(&len) {
                return Err(PlaneError::Refused(format!(
                    "tunnel source prefix {a}/{len}: an IPv6 prefix must be /96 to /128"
                )));
            }
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            src.1 = Some(std::net::Ipv6Addr::from(u128::from(a) & mask));
            vary.1 = 128 - len;
        }
        self.tun_src = src;
        self.tun_vary = vary;
        self.write_config()
    }

    /// Flows, and templates, mirrored per report (default [`MIRROR_PAGE`];
    /// at least 1).
    pub fn set_mirror_page(&mut self, flows: usize) {
        self.mirror_page = flows.max(1);
    }

    /// The largest tunnelled packet (0: no check) and the SYN-flood guard's
    /// new flows per CPU per second (0: off), see [`Config`].
    pub fn set_limits(&mut self, tun_mtu: u32, max_new_flows: u32) -> Result<(), PlaneError> {
        let mut c = self.config;
        c.tun_mtu = tun_mtu;
        c.max_new_flows = max_new_flows;
        self.maps.set_config(&c)?;
        self.config = c;
        Ok(())
    }

    /// The local ports every FULLNAT pool hands out, `first..=last`
    /// (refused unless 1 <= first <= last; default
    /// [`maps::FNAT_PORT_MIN`]..=[`maps::FNAT_PORT_MAX`]): the pools
    /// already installed are rewritten. A narrower range leaves the pairs
    /// live flows hold outside it alone (they end with their flows).
    pub fn set_fnat_ports(&mut self, first: u16, last: u16) -> Result<(), PlaneError> {
        if first == 0 || first > last {
            return Err(PlaneError::Refused(format!(
                "FULLNAT local ports {first}-{last}: expected FIRST-LAST with 1 <= FIRST <= LAST"
            )));
        }
        self.fnat_ports = (first, last);
        let laddrs = self.all_laddrs();
        let keys: Vec<ServiceKey> = self
            .services
            .iter()
            .filter(|(_, s)| !s.laddrs.is_empty())
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.write_pool(&k, &laddrs)?;
        }
        Ok(())
    }

    /// The `svc_info` index of an installed service.
    pub fn service_index(&self, key: &ServiceKey) -> Option<u32> {
        self.services.get(key).map(|s| s.index)
    }

    /// The real-server address and port of every NAT real server by its
    /// `dests` index (installed or deleted but still referenced): what
    /// the reply entry of a NAT flow is keyed by.
    fn nat_dests(&self) -> HashMap<u32, (IpAddr, u16)> {
        let installed = self.services.values().flat_map(|s| s.dests.iter());
        installed
            .chain(self.trash.iter().map(|t| &t.dest))
            .filter(|d| d.is_nat())
            .map(|d| (d.index, (d.core.config.addr, d.core.config.port)))
            .collect()
    }

    /// The `dests` indexes of FULLNAT real servers (installed or deleted
    /// but still referenced).
    fn fnat_dests(&self) -> HashSet<u32> {
        let installed = self.services.values().flat_map(|s| s.dests.iter());
        installed
            .chain(self.trash.iter().map(|t| &t.dest))
            .filter(|d| matches!(d.core.config.forward, ForwardMethod::FullNat))
            .map(|d| d.index)
            .collect()
    }

    /// The `dests` index of an installed (or deleted but still referenced)
    /// real server.
    pub fn dest_index(&self, key: &ServiceKey, addr: IpAddr, port: u16) -> Option<u32> {
        let hit = |d: &DestState| d.core.config.addr == addr && d.core.config.port == port;
        self.services
            .get(key)
            .and_then(|s| s.dests.iter().find(|d| hit(d)).map(|d| d.index))
            .or_else(|| {
                self.trash
                    .iter()
                    .find(|t| t.service == *key && hit(&t.dest))
                    .map(|t| t.dest.index)
            })
    }

    /// Free entries of `slots`, as the allocator sees them.
    pub fn free_slots(&self) -> u64 {
        self.slots.free_total()
    }
}

/// The `nat_rev` key of the replies of flow `k` forwarded to the real
/// server `raddr:rport` (port 0: the VIP's port, as the program does).
fn nat_key(k: &FlowKey, raddr: IpAddr, rport: u16) -> NatKey {
    NatKey {
        raddr: maps::addr16(raddr),
        caddr: k.caddr,
        rport: if rport == 0 { k.vport } else { rport.to_be() },
        cport: k.cport,
        proto: k.proto,
        family: k.family,
        ..NatKey::default()
    }
}

fn same(a: &DestConfig, b: &DestConfig) -> bool {
    a.addr == b.addr && a.port == b.port
}

/// `-e` on the core's copy: the weight rules of `__ip_vs_update_dest`
/// (the last non-zero weight is what Maglev keeps using when quiesced).
fn edit_core(d: &mut CoreDest, cfg: &DestConfig) {
    if cfg.u_threshold == 0 || cfg.u_threshold > d.config.u_threshold {
        d.overloaded = false;
    }
    if cfg.weight != 0 {
        d.last_weight = cfg.weight;
    }
    d.config = *cfg;
}

fn fill_timeouts(c: &mut Config, t: &Timeouts) {
    for s in TcpState::ALL {
        if let Some(slot) = c.tcp_timeouts.get_mut(s as usize) {
            *slot = u32::try_from(t.tcp(s).as_secs()).unwrap_or(u32::MAX);
        }
    }
    c.udp_timeout = u32::try_from(t.udp().as_secs()).unwrap_or(u32::MAX);
}
