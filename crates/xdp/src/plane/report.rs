//! The periodic report, in three phases so that the control plane's lock
//! is held only for the part that needs the director, and no syscall runs
//! under it:
//! 1. [`Plane::report_read`] reads the maps (a page of flows and of
//!    templates, in batches; the counters; the clock) — no director;
//! 2. [`Plane::report_decide`] with the director lent: mirror the page into
//!    it, add the counters' growth, decide overload flags, timeouts,
//!    convergence and what the completed walks free — pure, no map access;
//!    it returns the writes to make;
//! 3. [`Plane::report_write`] makes them — no director.
//!
//! [`Plane::report_to`] runs the three in a row (tests, tools).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rvs_control::protocol::Command;
use rvs_control::state::{ServiceDef, current_defs, diff};
use rvs_core::conn::ConnId;
use rvs_core::dest::DestId;
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::{Protocol, ServiceKey};
use rvs_core::state::{TcpState, Timeouts};
use rvs_core::stats::Counters;
use rvs_core::time::Instant;

use super::alloc::Retired;
use super::retry::Due;
use super::room::Fit;
use super::{DestState, Plane, PlaneError, Trashed, WalkDone, nat_key, same, stats_delta};
use crate::maps::{
    self, Dest, DestConns, Flow, FlowKey, MapOps, NatKey, Persist, PersistKey, Stats,
};

/// What phase 1 of a report read from the maps.
#[derive(Debug, Default)]
pub struct ReportRead {
    /// Counters per real-server index (summed over CPUs).
    stats: Vec<(u32, Stats)>,
    /// Live flows of this page, with their time left.
    flows: Vec<(FlowKey, Flow, Duration)>,
    /// Expired flows of this page (to delete), with the reply entry of
    /// those of NAT real servers.
    expired: Vec<(FlowKey, Option<NatKey>)>,
    /// The local address and port of this page's live FULLNAT flows.
    locals: HashMap<FlowKey, SocketAddr>,
    /// Expired FULLNAT flows of this page with their translation (freed
    /// with the flow, so the pair comes back).
    expired_fnat: Vec<(FlowKey, maps::FnatKey)>,
    /// FULLNAT translations whose flow is gone (the orphan sweep).
    fnat_orphans: Vec<super::fnat::FnatOrphan>,
    /// The flow walk completed with this page.
    flows_done: bool,
    /// Report generation the flow walk began at.
    flow_start: u64,
    /// Live templates of this page, with their time left.
    templates: Vec<(PersistKey, Persist, Duration)>,
    /// Expired templates of this page (to delete).
    stale: Vec<PersistKey>,
    /// The template walk completed with this page.
    persist_done: bool,
    /// Report generation the template walk began at.
    persist_start: u64,
    /// QUIC-LB services' counters (`quic_stats`) with their index.
    quic: Vec<(rvs_core::model::ServiceKey, u32, crate::quic_lb::QuicStats)>,
}

/// What a completed flow walk found of one real server's connections.
#[derive(Clone, Copy, Debug)]
struct ConnsCount {
    /// Its index.
    index: u32,
    /// `dest_conns` when the walk began (`None`: the index was not in use
    /// then).
    start: Option<DestConns>,
    /// The live flows the walk counted.
    counted: DestConns,
}

/// How many completed flow walks in a row may leave a real server's
/// `dest_conns` alone because the program changed it while they ran (see
/// [`conns_fix`]). About as many seconds (one walk per report while the
/// table fits in a page).
const BUSY_WALKS: u32 = 8;

/// What a completed flow walk writes to one real server's `dest_conns`,
/// and how many walks in a row the program has now been changing it (the
/// next call's `busy`).
///
/// The program's count (`end`, read right before the write) is the truth
/// but drifts: it never subtracts flows the sweep deletes as expired nor
/// flows the LRU evicts. The walk's count (`counted`) corrects that drift
/// but is no snapshot: it spans reports and misses flows made, or sees
/// states changed, while it ran. So the walk's count replaces the
/// program's only when the program left it unchanged meanwhile (`end ==
/// start`, both fields); otherwise it is left alone and a later, quiet walk
/// corrects it. A real server so busy that no walk is quiet would keep its
/// drift for good: after [`BUSY_WALKS`] busy walks in a row it gets the
/// walk's count plus the program's change during this walk (`end - start`),
/// which may count twice a flow made during the walk that the walk saw, an
/// error bounded by one walk's activity instead of a drift that grows. An
/// index not in use when the walk began (`start` is `None`: installed
/// meanwhile, its count started at zero then) is left alone. A correction
/// equal to what the program holds (`end`) is no write: a quiet plane's
/// walks write nothing.
fn conns_fix(
    start: Option<DestConns>,
    end: DestConns,
    counted: DestConns,
    busy: u32,
) -> (Option<DestConns>, u32) {
    let Some(start) = start else {
        return (None, 0);
    };
    let write = |v: DestConns| (v != end).then_some(v);
    if start == end {
        return (write(counted), 0);
    }
    let busy = busy.saturating_add(1);
    if busy < BUSY_WALKS {
        return (None, busy);
    }
    // The program's change as a signed difference (its counters are
    // updated with atomic adds and may wrap).
    let plus = |w: u32, e: u32, s: u32| {
        let delta = i64::from(e.wrapping_sub(s) as i32);
        (i64::from(w) + delta).clamp(0, i64::from(u32::MAX)) as u32
    };
    let fixed = DestConns {
        active: plus(counted.active, end.active, start.active),
        inactive: plus(counted.inactive, end.inactive, start.inactive),
    };
    (write(fixed), 0)
}

/// The writes phase 2 of a report decided on, for phase 3.
#[derive(Debug, Default)]
pub struct ReportWrites {
    /// Expired templates to delete.
    stale: Vec<PersistKey>,
    /// Expired flows to delete, with their NAT reply entries.
    expired: Vec<(FlowKey, Option<NatKey>)>,
    /// FULLNAT translations of expired flows to delete.
    expired_fnat: Vec<(FlowKey, maps::FnatKey)>,
    /// FULLNAT translations whose flow is gone, to free.
    fnat_orphans: Vec<super::fnat::FnatOrphan>,
    /// `dest_conns` corrections from a completed flow walk, made (or
    /// not) by [`conns_fix`] against what the program counts by then.
    dest_conns: Vec<ConnsCount>,
    /// Real servers whose `OVERLOADED` flag changed (the plane's books
    /// already say so; undone if the write fails).
    overload: Vec<DestState>,
    /// Deleted real servers whose index is given back.
    free: Vec<Trashed>,
    /// Timeouts set on the director directly, for `config`.
    timeouts: Option<Timeouts>,
    /// Commands that bring the maps to the model (convergence).
    converge: Vec<Command>,
}

impl<M: MapOps> Plane<M> {
    /// Periodic work with the control plane's director (see the module
    /// doc): grace periods, timeouts, convergence, counters and
    /// connections — the three phases in a row, converging when needed.
    pub fn report_to(&mut self, now: Instant, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        let read = self.report_read()?;
        let writes = self.report_decide(read, now, ipvs, true);
        self.report_write(writes);
        Ok(())
    }

    /// Phase 1 of a report: grace periods end, and the maps are read (the
    /// next page of each walk, the counters, the clock). No director.
    pub fn report_read(&mut self) -> Result<ReportRead, PlaneError> {
        self.generation += 1;
        let g = self.generation;
        let (due, keep): (Vec<_>, Vec<_>) = self.retired.drain(..).partition(|(at, _)| g >= at + 2);
        self.retired = keep;
        for (_, r) in due {
            self.room.freed();
            match r {
                Retired::Region(r) => self.slots.release(r),
                Retired::Svc(i) => self.svc_idx.release(i),
            }
        }
        self.read_flood();
        let mut read = ReportRead::default();
        for index in self.indexes() {
            read.stats.push((index, self.maps.dest_stats(index)?));
        }
        for (key, st) in &self.services {
            if super::is_quic(&st.config) {
                read.quic
                    .push((*key, st.index, self.maps.quic_stats(st.index)?));
            }
        }
        let (jiffies, hz) = self.maps.clock()?;
        let hz = u64::from(hz.max(1));
        let config = self.config;
        if self.flow_walk.start.is_none() {
            // The flow walk begins: what the program counts now, to tell
            // at its end whether it changed meanwhile (`conns_fix`), in
            // one batched read.
            self.flow_walk.conns_start = self.maps.dest_conns_of(&self.indexes())?;
        }
        read.flow_start = *self.flow_walk.start.get_or_insert(g);
        read.persist_start = *self.persist_walk.start.get_or_insert(g);
        let nat_dests = self.nat_dests();
        let users = &mut self.flow_walk.users;
        let (flows, expired) = (&mut read.flows, &mut read.expired);
        read.flows_done =
            self.maps
                .flows_page(&mut self.flow_walk.cursor, self.mirror_page, &mut |k, f| {
                    let timeout = config.flow_timeout(k.proto, f.state);
                    let age = jiffies.saturating_sub(f.last_seen);
                    let limit = u64::from(timeout) * hz;
                    if age > limit {
                        let nat = nat_dests.get(&f.dest).map(|&(a, p)| nat_key(k, a, p));
                        expired.push((*k, nat));
                        return;
                    }
                    let c = users.entry(f.dest).or_default();
                    let tcp_active = TcpState::from_u8(f.state).is_some_and(TcpState::is_active);
                    if k.proto == maps::PROTO_TCP && tcp_active {
                        c.active += 1;
                    } else {
                        c.inactive += 1;
                    }
                    flows.push((*k, *f, Duration::from_millis((limit - age) * 1000 / hz)));
                })?;
        // FULLNAT flows: the pair each live one holds (for -Lcn), and the
        // translations of expired ones (freed with them).
        let fnat_dests = self.fnat_dests();
        if !fnat_dests.is_empty() {
            for (k, f, _) in &read.flows {
                if fnat_dests.contains(&f.dest)
                    && let Some(r) = self.maps.fnat_of(k)?
                {
                    read.locals.insert(*k, fnat_local(&r));
                }
            }
            for (k, _) in &read.expired {
                if let Some(r) = self.maps.fnat_of(k)? {
                    read.expired_fnat.push((*k, r));
                }
            }
        }
        // Translations whose flow is gone (fnat_rev and fnat_fwd are plain
        // hashes: nothing else frees them). A failed read skips this
        // report's page, no more.
        match self.fnat_sweep_read() {
            Ok(o) => read.fnat_orphans = o,
            Err(e) => tracing::warn!(error = %e, "FULLNAT sweep: reading the translations"),
        }
        // Persistence templates: live ones are mirrored (and keep their real
        // server's index from being reused), expired ones go.
        let timeouts: HashMap<u32, u32> = self
            .services
            .values()
            .map(|s| (s.index, s.config.persistent.unwrap_or(0)))
            .collect();
        let users = &mut self.persist_walk.users;
        let (templates, stale) = (&mut read.templates, &mut read.stale);
        read.persist_done = self.maps.persist_page(
            &mut self.persist_walk.cursor,
            self.mirror_page,
            &mut |k, t| {
                let limit = timeouts.get(&t.svc).map_or(0, |&secs| u64::from(secs) * hz);
                let age = jiffies.saturating_sub(t.last_seen);
                if age > limit {
                    stale.push(*k);
                    return;
                }
                users.entry(t.dest).or_default();
                templates.push((*k, *t, Duration::from_millis((limit - age) * 1000 / hz)));
            },
        )?;
        Ok(read)
    }

    /// Phase 2 of a report, with the director: counters, the mirror of
    /// `read`'s page, overload flags, timeouts, what completed walks free,
    /// and — when `converge` and a write failed earlier — the commands that
    /// bring the maps to the model. Touches no map: returns the writes.
    ///
    /// `converge` must be false while commands the director has already
    /// applied are still on their way to this plane (the difference would
    /// repeat them out of order).
    pub fn report_decide(
        &mut self,
        read: ReportRead,
        now: Instant,
        ipvs: &mut Ipvs,
        converge: bool,
    ) -> ReportWrites {
        let mut w = ReportWrites::default();
        if *ipvs.timeouts() != self.timeouts {
            w.timeouts = Some(ipvs.timeouts().clone());
        }
        if converge {
            self.settle_adoption();
        }
        if self.dirty.any() && converge {
            w.converge = self.converge(ipvs);
        }
        if converge {
            let let_in = self.let_in(ipvs);
            w.converge.extend(let_in);
        }
        self.count(&read.stats, ipvs);
        self.count_quic(&read.quic, ipvs);
        self.mirror(read, now, ipvs, &mut w);
        w.overload = self.sync_overload(ipvs);
        w
    }

    /// Phase 3 of a report: the writes phase 2 decided. Failures are
    /// retried by later reports.
    pub fn report_write(&mut self, w: ReportWrites) {
        for k in &w.stale {
            let _ = self.maps.remove_persist(k);
        }
        // Expired entries go (the program already treats them as absent;
        // this frees their room). Failures are retried next time.
        for (k, nat) in &w.expired {
            let _ = self.maps.remove_flow(k);
            if let Some(n) = nat {
                let _ = self.maps.remove_nat(n);
            }
        }
        for (k, r) in &w.expired_fnat {
            let _ = self.maps.remove_fnat(k, r);
        }
        self.fnat_sweep_write(&w.fnat_orphans);
        self.fix_conns(&w.dest_conns);
        for d in w.overload {
            let v = self.dest_value(&d, 0);
            if self.maps.set_dest(d.index, &v).is_err() {
                // Seen again at the next report.
                for st in self.services.values_mut() {
                    for x in st.dests.iter_mut().filter(|x| x.index == d.index) {
                        x.core.overloaded = !d.core.overloaded;
                    }
                }
            }
        }
        for t in w.free {
            if self.maps.set_dest(t.dest.index, &Dest::default()).is_ok() {
                self.dest_idx.release(t.dest.index);
                self.room.freed();
                self.baselines.remove(&t.dest.index);
            } else {
                self.trash.push(t);
            }
        }
        if let Some(t) = w.timeouts {
            let old = std::mem::replace(&mut self.timeouts, t);
            if self.write_config().is_err() {
                self.timeouts = old;
            }
        }
        for c in &w.converge {
            // Errors record their service in `dirty` again: the next
            // report retries it.
            self.replayed += 1;
            let _ = self.apply_command(c);
        }
        self.resync_quic();
    }

    /// Phase 3 of a completed flow walk: every real server's `dest_conns`
    /// read again (one batched read) and, right after, corrected as
    /// [`conns_fix`] decides. A failed read or write leaves the counts as
    /// the program has them (a later walk corrects them).
    fn fix_conns(&mut self, counts: &[ConnsCount]) {
        if counts.is_empty() {
            return;
        }
        let indexes: Vec<u32> = counts.iter().map(|c| c.index).collect();
        let ends = match self.maps.dest_conns_of(&indexes) {
            Ok(ends) => ends,
            Err(e) => {
                tracing::warn!(error = %e, "flow walk: reading dest_conns");
                // Nothing corrected; the busy counts stay as they were.
                return;
            }
        };
        let mut busy = HashMap::new();
        for c in counts {
            let was = self.conns_busy.get(&c.index).copied().unwrap_or(0);
            let Some(&end) = ends.get(&c.index) else {
                continue;
            };
            let (write, now) = conns_fix(c.start, end, c.counted, was);
            if now > 0 {
                busy.insert(c.index, now);
            }
            if let Some(v) = write
                && let Err(e) = self.maps.set_dest_conns(c.index, &v)
            {
                tracing::warn!(index = c.index, error = %e, "flow walk: writing dest_conns");
            }
        }
        // Indexes no longer in use drop out.
        self.conns_busy = busy;
    }

    /// The growth of each QUIC-LB service's counters since the last read
    /// (or since it became a QUIC-LB service at its index) goes to the
    /// director, as the proxy plane reports its own: `rvsadm -Ln
    /// --quic-lb` and the metrics show it.
    fn count_quic(
        &mut self,
        read: &[(rvs_core::model::ServiceKey, u32, crate::quic_lb::QuicStats)],
        ipvs: &mut Ipvs,
    ) {
        for (key, index, cur) in read {
            let base = match self.quic_base.insert(*key, (*index, *cur)) {
                Some((i, b)) if i == *index => b,
                // First read at this index: counting starts here.
                _ => *cur,
            };
            let delta = rvs_core::stats::QuicLbCounters {
                by_cid: cur.by_cid.wrapping_sub(base.by_cid),
                by_fallback: cur.by_fallback.wrapping_sub(base.by_fallback),
                undecodable: cur.undecodable.wrapping_sub(base.undecodable),
            };
            if delta != rvs_core::stats::QuicLbCounters::default() {
                ipvs.add_quic_lb_counters(key, &delta);
            }
        }
    }

    /// Every real-server index in use: installed, and deleted but still
    /// referenced.
    fn indexes(&self) -> Vec<u32> {
        self.services
            .values()
            .flat_map(|s| s.dests.iter().map(|d| d.index))
            .chain(self.trash.iter().map(|t| t.dest.index))
            .collect()
    }

    /// The commands that make what is installed of the services whose
    /// writes failed the model (every service after a failure no single
    /// service owns), but for the services waiting for room
    /// ([`Plane::let_in`] retries those when room is freed).
    fn converge(&mut self, ipvs: &Ipvs) -> Vec<Command> {
        let (installed, target): (Vec<ServiceDef>, Vec<ServiceDef>) = match self.dirty.take() {
            Due::None => return Vec::new(),
            Due::All => (
                self.services
                    .keys()
                    .filter(|k| !self.room.waits(k))
                    .filter_map(|k| self.installed_def(k))
                    .collect(),
                current_defs(ipvs)
                    .into_iter()
                    .filter(|d| !self.refused.contains(&d.key) && !self.room.waits(&d.key))
                    .collect(),
            ),
            Due::Some(keys) => {
                let keys: Vec<ServiceKey> =
                    keys.into_iter().filter(|k| !self.room.waits(k)).collect();
                (
                    keys.iter().filter_map(|k| self.installed_def(k)).collect(),
                    keys.iter()
                        .filter(|k| !self.refused.contains(k))
                        .filter_map(|k| current_def(ipvs, k))
                        .collect(),
                )
            }
        };
        let compared: HashSet<&ServiceKey> =
            installed.iter().chain(&target).map(|d| &d.key).collect();
        self.diffed += compared.len() as u64;
        match diff(&installed, &target) {
            Ok((cmds, _)) => cmds,
            Err(_) => Vec::new(),
        }
    }

    /// What is installed of `key`, as the director would define it.
    fn installed_def(&self, key: &ServiceKey) -> Option<ServiceDef> {
        let s = self.services.get(key)?;
        Some(ServiceDef {
            key: *key,
            config: s.config.clone(),
            dests: s.dests.iter().rev().map(|d| d.core.config).collect(),
            laddrs: s.laddrs.clone(),
        })
    }

    /// Room was freed since the last time: the commands that bring the
    /// services waiting for room to the model, the oldest first, as many
    /// as the free `svc_info` and `dests` indexes hold (`slots` is not
    /// counted: a service that finds none waits again). Nothing when no
    /// room was freed: a full plane does no work for its waiting services
    /// at a report that freed nothing.
    fn let_in(&mut self, ipvs: &Ipvs) -> Vec<Command> {
        let (mut svcs, mut dests) = (self.svc_idx.available(), self.dest_idx.available());
        let (services, trash) = (&self.services, &self.trash);
        let due = self.room.take(|key, roomless| {
            let Some(svc) = ipvs.service(key) else {
                return Fit::Gone;
            };
            // Real servers without an index here (a deleted one still in
            // the trash comes back with its own).
            let has = |c: &rvs_core::model::DestConfig| {
                services
                    .get(key)
                    .is_some_and(|s| s.dests.iter().any(|d| same(&d.core.config, c)))
                    || trash
                        .iter()
                        .any(|t| t.service == *key && same(&t.dest.core.config, c))
            };
            let need_svc = u32::from(roomless);
            let need_dests = svc.dests().iter().filter(|d| !has(&d.config)).count() as u32;
            if need_svc > svcs || need_dests > dests {
                return Fit::No;
            }
            svcs -= need_svc;
            dests -= need_dests;
            Fit::Yes
        });
        let mut cmds = Vec::new();
        for key in due {
            let Some(target) = current_def(ipvs, &key) else {
                continue;
            };
            let installed: Vec<ServiceDef> = self.installed_def(&key).into_iter().collect();
            if let Ok((c, _)) = diff(&installed, &[target]) {
                cmds.extend(c);
            }
        }
        cmds
    }

    /// The director's id of a dest index, with its service.
    fn dest_ids(&self, ipvs: &Ipvs) -> HashMap<u32, DestId> {
        let mut out = HashMap::new();
        for (key, st) in &self.services {
            let Some(svc) = ipvs.service(key) else {
                continue;
            };
            for d in &st.dests {
                if let Some(x) = svc.dests().iter().find(|x| same(&x.config, &d.core.config)) {
                    out.insert(d.index, x.id);
                }
            }
        }
        // Deleted ones: the id they had when last seen live.
        for t in &self.trash {
            let id = t.dest.core.id;
            if ipvs
                .dest(id)
                .is_some_and(|x| same(&x.config, &t.dest.core.config) && !x.available)
            {
                out.insert(t.dest.index, id);
            }
        }
        out
    }

    fn count(&mut self, stats: &[(u32, Stats)], ipvs: &mut Ipvs) {
        // Remember the director's ids of live real servers for when they
        // are deleted (the id is what the director's trash keeps).
        let ids = self.dest_ids(ipvs);
        for st in self.services.values_mut() {
            for d in &mut st.dests {
                if let Some(id) = ids.get(&d.index) {
                    d.core.id = *id;
                }
            }
        }
        for (index, cur) in stats {
            let base = self.baselines.insert(*index, *cur).unwrap_or_default();
            let delta = stats_delta(cur, &base);
            if delta != Counters::default()
                && let Some(id) = ids.get(index)
            {
                ipvs.add_counters(*id, &delta);
            }
        }
    }

    /// Connection thresholds (`-x`/`-y`): the director decides overload
    /// from the mirrored connections, with IPVS's hysteresis; the program
    /// skips a real server flagged `OVERLOADED` for new flows. Returns the
    /// real servers to rewrite.
    fn sync_overload(&mut self, ipvs: &Ipvs) -> Vec<DestState> {
        let mut changed = Vec::new();
        for st in self.services.values_mut() {
            for d in &mut st.dests {
                let Some(core) = ipvs.dest(d.core.id) else {
                    continue;
                };
                if same(&core.config, &d.core.config) && core.overloaded != d.core.overloaded {
                    d.core.overloaded = core.overloaded;
                    changed.push(d.clone());
                }
            }
        }
        changed
    }

    fn mirror(&mut self, read: ReportRead, now: Instant, ipvs: &mut Ipvs, w: &mut ReportWrites) {
        let ids = self.dest_ids(ipvs);
        for (k, t, left) in read.templates {
            let Some(dest) = ids.get(&t.dest) else {
                continue;
            };
            let Some(m) = template_of(&k, *dest, left) else {
                continue;
            };
            if let Some(id) = ipvs.mirror_conn(now, &m) {
                self.persist_walk.seen.insert(id);
            }
        }
        for (k, f, left) in read.flows {
            let Some(dest) = ids.get(&f.dest) else {
                continue;
            };
            let Some(m) = mirrored_of(&k, &f, *dest, left) else {
                continue;
            };
            if let Some(id) = ipvs.mirror_conn(now, &m) {
                self.flow_walk.seen.insert(id);
                if let Some(local) = read.locals.get(&k) {
                    ipvs.set_conn_local(id, *local);
                }
            }
        }
        w.stale = read.stale;
        w.expired = read.expired;
        w.expired_fnat = read.expired_fnat;
        w.fnat_orphans = read.fnat_orphans;
        // A complete walk: entries the previous walk of that table mirrored
        // and this one did not see are gone.
        if read.persist_done {
            let walk = std::mem::take(&mut self.persist_walk);
            let other = [&self.mirrored_flows, &self.flow_walk.seen];
            close_gone(ipvs, &self.mirrored_templates, &walk.seen, other);
            self.mirrored_templates = walk.seen;
            self.persist_done = Some(WalkDone {
                start: read.persist_start,
                users: walk.users.into_keys().collect(),
            });
        }
        if read.flows_done {
            let walk = std::mem::take(&mut self.flow_walk);
            let other = [&self.mirrored_templates, &self.persist_walk.seen];
            close_gone(ipvs, &self.mirrored_flows, &walk.seen, other);
            self.mirrored_flows = walk.seen;
            // The ActiveConn/InActConn the program keeps for the
            // least-connection schedulers are corrected from what the live
            // flows say (flows deleted as expired, or evicted, were never
            // subtracted), in phase 3, unless the program changed them
            // while the walk ran (`conns_fix`).
            w.dest_conns = self
                .indexes()
                .into_iter()
                .map(|index| ConnsCount {
                    index,
                    start: walk.conns_start.get(&index).copied(),
                    counted: walk.users.get(&index).copied().unwrap_or_default(),
                })
                .collect();
            self.flows_done = Some(WalkDone {
                start: read.flow_start,
                users: walk.users.into_keys().collect(),
            });
        }
        if read.flows_done || read.persist_done {
            w.free = self.free_trash();
        }
    }

    /// Deleted real servers no flow or template uses any more give their
    /// index back: the last whole walk of each table began two reports
    /// after the deletion, when no new flow or template could be given
    /// that index any more, and met none using it. Returns them, out of
    /// the trash (phase 3 clears their element and frees the index).
    fn free_trash(&mut self) -> Vec<Trashed> {
        let (Some(flows), Some(persist)) = (&self.flows_done, &self.persist_done) else {
            return Vec::new();
        };
        let (free, keep): (Vec<_>, Vec<_>) = self.trash.drain(..).partition(|t| {
            let i = t.dest.index;
            flows.start >= t.since + 2
                && persist.start >= t.since + 2
                && !flows.users.contains(&i)
                && !persist.users.contains(&i)
        });
        self.trash = keep;
        // Adopted indexes no service claimed, no longer used: free.
        let (gone, held): (Vec<_>, Vec<_>) = self.orphans.drain(..).partition(|o| {
            flows.start >= o.since + 2
                && persist.start >= o.since + 2
                && !flows.users.contains(&o.index)
                && !persist.users.contains(&o.index)
        });
        self.orphans = held;
        for o in gone {
            if self.maps.set_dest(o.index, &Dest::default()).is_ok() {
                self.dest_idx.release(o.index);
                self.room.freed();
            } else {
                self.orphans.push(o);
            }
        }
        free
    }
}

/// Close the director's entries a table's previous walk mirrored and its
/// last one did not see, unless the other table's mirroring holds them.
fn close_gone(
    ipvs: &mut Ipvs,
    before: &HashSet<ConnId>,
    seen: &HashSet<ConnId>,
    other: [&HashSet<ConnId>; 2],
) {
    for id in before.difference(seen) {
        if !other.iter().any(|o| o.contains(id)) {
            ipvs.close(*id);
        }
    }
}

/// The director's view of one BPF flow.
fn mirrored_of(k: &FlowKey, f: &Flow, dest: DestId, left: Duration) -> Option<MirroredConn> {
    let ip = |b: &[u8; 16]| -> IpAddr {
        if k.family == maps::AF_INET {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(*b)
        }
    };
    let protocol = Protocol::from_number(k.proto)?;
    Some(MirroredConn {
        protocol,
        client: SocketAddr::new(ip(&k.caddr), u16::from_be(k.cport)),
        vip: SocketAddr::new(ip(&k.vaddr), u16::from_be(k.vport)),
        dest,
        state: if protocol == Protocol::Tcp {
            f.state
        } else {
            0
        },
        output_seen: f.flags & maps::FLOW_F_NOOUTPUT == 0,
        idle_left: left,
        template: false,
        // Recorded by the caller from `fnat_fwd` (`set_conn_local`).
        local: None,
    })
}

/// The director's view of one persistence template.
fn template_of(k: &PersistKey, dest: DestId, left: Duration) -> Option<MirroredConn> {
    let ip = |b: &[u8; 16]| -> IpAddr {
        if k.family == maps::AF_INET {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(*b)
        }
    };
    Some(MirroredConn {
        protocol: Protocol::from_number(k.proto)?,
        client: SocketAddr::new(ip(&k.caddr), 0),
        vip: SocketAddr::new(ip(&k.vaddr), u16::from_be(k.vport)),
        dest,
        state: 0,
        output_seen: false,
        idle_left: left,
        template: true,
        local: None,
    })
}

/// The local address and port of a FULLNAT translation.
fn fnat_local(r: &maps::FnatKey) -> SocketAddr {
    let ip: IpAddr = if r.family == maps::AF_INET6 {
        std::net::Ipv6Addr::from(r.laddr).into()
    } else {
        let [a, b, c, d, ..] = r.laddr;
        std::net::Ipv4Addr::new(a, b, c, d).into()
    };
    SocketAddr::new(ip, u16::from_be(r.lport))
}

/// The director's definition of `key` (one service of
/// [`current_defs`]).
fn current_def(ipvs: &Ipvs, key: &ServiceKey) -> Option<ServiceDef> {
    let s = ipvs.service(key)?;
    Some(ServiceDef {
        key: *key,
        config: s.config().clone(),
        dests: s.dests().iter().rev().map(|d| d.config).collect(),
        laddrs: s.laddrs().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::{BUSY_WALKS, conns_fix};
    use crate::maps::DestConns;

    fn c(active: u32, inactive: u32) -> DestConns {
        DestConns { active, inactive }
    }

    #[test]
    fn increments_the_program_made_during_the_walk_are_kept() {
        // Two flows when the walk began, a third made after the walk
        // passed its place: the walk counted two, the program three.
        assert_eq!(conns_fix(Some(c(2, 0)), c(3, 0), c(2, 0), 0), (None, 1));
        // A move (ESTABLISHED to FIN_WAIT) the walk did not see.
        assert_eq!(conns_fix(Some(c(2, 1)), c(1, 2), c(2, 1), 0), (None, 1));
        // A change undone meanwhile is no change: the walk's count goes.
        assert_eq!(
            conns_fix(Some(c(2, 1)), c(2, 1), c(1, 1), 3),
            (Some(c(1, 1)), 0)
        );
    }

    #[test]
    fn drift_without_activity_is_corrected() {
        // Flows deleted as expired or evicted, never subtracted: the
        // program says 5/7, the live flows 1/2.
        assert_eq!(
            conns_fix(Some(c(5, 7)), c(5, 7), c(1, 2), 0),
            (Some(c(1, 2)), 0)
        );
        // A deleted real server (in the trash) no flow uses any more.
        assert_eq!(
            conns_fix(Some(c(0, 4)), c(0, 4), c(0, 0), 0),
            (Some(c(0, 0)), 0)
        );
    }

    #[test]
    fn a_count_the_program_already_holds_is_not_written() {
        // A quiet server whose count is right: nothing to write.
        assert_eq!(conns_fix(Some(c(3, 1)), c(3, 1), c(3, 1), 0), (None, 0));
        assert_eq!(conns_fix(Some(c(0, 0)), c(0, 0), c(0, 0), 2), (None, 0));
        // A busy server whose walk count plus the program's change is
        // what the program holds: no write, and it is busy no more.
        assert_eq!(
            conns_fix(Some(c(2, 0)), c(3, 0), c(2, 0), BUSY_WALKS),
            (None, 0)
        );
    }

    #[test]
    fn an_index_put_in_use_during_the_walk_is_left_alone() {
        // Installed (its count reset to zero) or reused after the walk
        // began: what the walk counted under that index may be anyone's.
        assert_eq!(conns_fix(None, c(1, 0), c(0, 0), 0), (None, 0));
        assert_eq!(conns_fix(None, c(0, 0), c(3, 3), 5), (None, 0));
    }

    #[test]
    fn a_server_busy_in_every_walk_is_corrected_after_busy_walks() {
        // Drift of 10 inactive (expired flows) on a server the program
        // changes in every walk: left alone BUSY_WALKS - 1 times, then the
        // walk's count plus the program's change during the last walk.
        let mut busy = 0;
        for n in 1..BUSY_WALKS {
            let (w, b) = conns_fix(Some(c(3, 10)), c(4, 10), c(3, 0), busy);
            assert_eq!((w, b), (None, n));
            busy = b;
        }
        assert_eq!(
            conns_fix(Some(c(3, 10)), c(4, 10), c(3, 0), busy),
            (Some(c(4, 0)), 0)
        );
        // Decrements too, never below zero.
        let (w, _) = conns_fix(Some(c(3, 5)), c(1, 5), c(1, 0), BUSY_WALKS);
        assert_eq!(w, Some(c(0, 0)));
        // The program's counters wrap (atomic adds): 0 - 1 is -1.
        let (w, _) = conns_fix(Some(c(0, 2)), c(u32::MAX, 2), c(4, 2), BUSY_WALKS);
        assert_eq!(w, Some(c(3, 2)));
    }
}
