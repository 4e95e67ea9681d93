//! The fleet model: `D` directors behind one ECMP group, one virtual
//! service with `R` real servers scheduled by rvs-core's own scheduler
//! (one [`Algorithm`] instance per director, driven through the trait the
//! daemon uses), `F` live flows; then one event, and for every policy the
//! number of live flows that break.
//!
//! # Steady state
//! Flow `i` (a seeded 5-tuple, see [`flow`]) is born at `i / rate` seconds;
//! the event happens at `F / rate`, so flow `i`'s age is `(F - i) / rate`
//! and the last `rate × sync_delay` flows are younger than the sync delay.
//! Flows arrive in birth order at the director the ECMP group picks; that
//! director's scheduler picks the real server and counts the connection as
//! active (what wlc reads). Every flow is still alive at the event. After
//! it, the flows' next packets arrive interleaved ([`arrival_order`]).
//!
//! # When a flow breaks
//! A flow breaks when, after the event, its packets reach a real server
//! other than the one holding its connection, or are dropped. The receiving
//! director after the event is the new ECMP group's choice:
//! * it is the flow's director before the event: it has the flow's state —
//!   fine under every policy;
//! * it is another one (the flow *moved*): the policy decides
//!   ([`Policy`]). "Scheduled as new" means the receiving director's own
//!   scheduler (with the counters and cursor its own flows gave it) is asked,
//!   and the flow is then counted on the chosen server as an adopted flow
//!   would be.
//!
//! Real-server events keep every flow on its server wherever its director
//! has its state — under every policy here every flow's director has it, so
//! they break nothing (rvs today). The [`Outcome::stateless`] count says what
//! a director *without* state (restarted without its pinned maps, an LRU
//! eviction, a flood guard that forwards statelessly) would break: the
//! flows its freshly built scheduler sends elsewhere after the change —
//! Maglev's minimal disruption against wlc's and rr's history dependence.
//!
//! A director's flow state is two arrays (each flow's director and real
//! server), not rvs-core's connection table: with sync, 100 directors would
//! hold 100 million connections, and the table's timers and state machines
//! do not change whether a flow breaks.
//!
//! Deliberate simplifications (stated in docs/benchmarks-history.md too): one service;
//! equal director and (but for the weight event) real-server weights; a
//! flow younger than the sync delay breaks at its first moved packet (TCP
//! would retransmit, and might find the copy arrived by then); a synced
//! copy, once there, is always fresh (refreshes are not lost); the joining
//! director got every peer's table by bulk resync before it is announced.

use std::net::{IpAddr, Ipv4Addr};

use rvs_core::dest::{Dest, DestId};
use rvs_core::model::{DestConfig, Protocol};
use rvs_core::sched::{
    Algorithm, ListChange, SchedError, SchedInput, SchedParams, Scheduler, new_scheduler,
};
use rvs_core::time::Instant;

use crate::ecmp::{Ecmp, EcmpError, EcmpKind};
use crate::rng::{SplitMix64, mix64};

/// The VIP of the simulated service.
pub const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// Its port.
pub const VPORT: u16 = 80;

/// What a director does with a packet of a flow it holds no state for
/// (mid-flow, after ECMP moved the flow to it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// (a) Drop it: the flow breaks (IPVS without sync; rvs before issue
    /// 14 without the flood guard).
    NoState,
    /// (b) Schedule it as new with the service's scheduler: right when the
    /// scheduler is a pure function of the flow and the table (mh, sh, dh)
    /// and every director has the same table.
    HashOnly,
    /// (c) N-way sync: every director holds every flow older than the sync
    /// delay; a younger moved flow breaks.
    Sync,
    /// (d) rvs's design (issue 14): every director syncs with every other
    /// one, and a packet of a hash-scheduled service without state is
    /// scheduled by the hash; other services rely on sync alone.
    Rvs,
    /// (e) Second chance (GLB/Beamer style, at the director layer): the
    /// packet is handed to the flow's previous director in the ECMP
    /// history, which forwards it with its state; when that director is
    /// gone the receiving one schedules it as new.
    SecondChance,
}

impl Policy {
    /// Every policy, in the order of the tables.
    pub const ALL: [Policy; 5] = [
        Policy::NoState,
        Policy::HashOnly,
        Policy::Sync,
        Policy::Rvs,
        Policy::SecondChance,
    ];

    /// A short label for tables.
    pub const fn label(self) -> &'static str {
        match self {
            Policy::NoState => "(a) no state",
            Policy::HashOnly => "(b) hash only",
            Policy::Sync => "(c) N-way sync",
            Policy::Rvs => "(d) rvs: hash + sync",
            Policy::SecondChance => "(e) second chance",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One change to the fleet or the service, applied to a steady state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A director joins the ECMP group (its address sorts last).
    DirectorAdded,
    /// The director in the middle of the group withdraws the VIP; it keeps
    /// its state and forwards what still reaches it.
    DirectorDrained,
    /// The director in the middle of the group dies: withdrawn (BGP hold
    /// timer or BFD) and its state lost.
    DirectorCrashed,
    /// A real server is added (at the head of the list, as IPVS adds).
    RealAdded,
    /// The real server in the middle of the list is removed from the
    /// service (it still runs: flows with state keep reaching it).
    RealRemoved,
    /// The real server in the middle of the list gets weight 2 (all others
    /// have 1).
    WeightChanged,
}

impl Event {
    /// Every event, in the order of the tables.
    pub const ALL: [Event; 6] = [
        Event::DirectorAdded,
        Event::DirectorDrained,
        Event::DirectorCrashed,
        Event::RealAdded,
        Event::RealRemoved,
        Event::WeightChanged,
    ];

    /// A short label for tables.
    pub const fn label(self) -> &'static str {
        match self {
            Event::DirectorAdded => "director added",
            Event::DirectorDrained => "director drained",
            Event::DirectorCrashed => "director crashed",
            Event::RealAdded => "real server added",
            Event::RealRemoved => "real server removed",
            Event::WeightChanged => "weight 1→2",
        }
    }

    /// True for the events that change the ECMP group.
    pub const fn is_director_event(self) -> bool {
        matches!(
            self,
            Event::DirectorAdded | Event::DirectorDrained | Event::DirectorCrashed
        )
    }
}

/// The parameters of one simulated fleet.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FleetConfig {
    /// Directors in the ECMP group before the event (1..=1000).
    pub directors: u16,
    /// Real servers of the service (1..=65535).
    pub reals: u32,
    /// Live flows at the event.
    pub flows: u32,
    /// The service's scheduler.
    pub scheduler: Scheduler,
    /// The upstream router's ECMP algorithm.
    pub ecmp: EcmpKind,
    /// Seed of the 5-tuple generator.
    pub seed: u64,
    /// Distinct client addresses the flows come from.
    pub clients: u32,
    /// New flows per second across the fleet (sets the flows' ages).
    pub new_flow_rate: f64,
    /// Seconds from a flow's first packet until every peer holds its
    /// synced copy.
    pub sync_delay_s: f64,
    /// Maglev table size (a prime; rvs's default is 4093).
    pub mh_table_size: u32,
}

impl FleetConfig {
    /// A fleet with the defaults of the report: wlc, hash-threshold ECMP,
    /// clients = flows / 8, 10,000 new flows/s, 1 s sync delay, M = 4093.
    pub fn new(directors: u16, reals: u32, flows: u32) -> Self {
        FleetConfig {
            directors,
            reals,
            flows,
            scheduler: Scheduler::Wlc,
            ecmp: EcmpKind::HashThreshold,
            seed: 14,
            clients: (flows / 8).max(1),
            new_flow_rate: 10_000.0,
            sync_delay_s: 1.0,
            mh_table_size: rvs_core::model::DEFAULT_MH_TABLE_SIZE,
        }
    }

    /// Flows younger than the sync delay at the event (the last ones born).
    pub fn young_flows(&self) -> u32 {
        let y = (self.new_flow_rate * self.sync_delay_s).round();
        if y.is_finite() && y > 0.0 {
            (y as u64).min(u64::from(self.flows)) as u32
        } else {
            0
        }
    }
}

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The ECMP group could not be built or changed.
    #[error("ECMP: {0}")]
    Ecmp(#[from] EcmpError),
    /// The scheduler could not be built.
    #[error("scheduler: {0}")]
    Sched(#[from] SchedError),
    /// A parameter is out of range.
    #[error("invalid fleet: {0}")]
    Invalid(&'static str),
    /// The scheduler found no real server for a new flow.
    #[error("the scheduler found no real server for flow {0}")]
    NoServer(u32),
}

/// What one event did to the live flows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The event.
    pub event: Event,
    /// Live flows at the event.
    pub live: u32,
    /// Flows the ECMP change sent to another director.
    pub moved: u32,
    /// Of the moved flows, those whose previous director is the changed
    /// one (added: 0; drained/crashed: all its flows).
    pub moved_from_changed: u32,
    /// Flows younger than the sync delay.
    pub young: u32,
    /// Broken flows per policy, in [`Policy::ALL`] order.
    pub broken: [u32; 5],
    /// Flows a director without any state would send to another real
    /// server after the event (its scheduler built afresh): real-server
    /// events only, 0 for director events.
    pub stateless: u32,
}

impl Outcome {
    /// Broken flows of `p`.
    pub fn broken(&self, p: Policy) -> u32 {
        self.broken[p.index()]
    }
}

/// True for the schedulers whose choice is a pure function of the flow and
/// of a table every director with the same configuration builds alike.
pub const fn is_hash_scheduler(s: Scheduler) -> bool {
    matches!(s, Scheduler::Mh | Scheduler::Sh | Scheduler::Dh)
}

/// Flow `i` of the run seeded `seed`: its first packet as the scheduler sees
/// it, and the router's 31-bit ECMP hash of its 5-tuple.
pub fn flow(seed: u64, clients: u32, i: u32) -> (SchedInput, u32) {
    let mut r = SplitMix64::new(seed ^ mix64(u64::from(i)));
    // Clients in 100.64.0.0/10 (shared address space), ports 1024..65535.
    let saddr = 0x6440_0000u32.wrapping_add(r.below(clients.max(1)));
    let sport = 1024 + r.below(64_512) as u16;
    let input = SchedInput {
        protocol: Protocol::Tcp,
        saddr: IpAddr::V4(Ipv4Addr::from(saddr)),
        sport,
        daddr: IpAddr::V4(VIP),
        dport: VPORT,
    };
    let tuple = (u64::from(saddr) << 32)
        ^ (u64::from(sport) << 16)
        ^ u64::from(VPORT)
        ^ (u64::from(u32::from(VIP)).rotate_left(24))
        ^ 6;
    let hash = (mix64(tuple ^ seed.rotate_left(17)) >> 33) as u32;
    (input, hash)
}

/// Real server `i`: 10.100.0.0 + i + 1, port 80, weight 1.
fn real(i: u32) -> Dest {
    let ip = Ipv4Addr::from(0x0a64_0001u32.wrapping_add(i));
    Dest::new(DestId(i), DestConfig::new(IpAddr::V4(ip), 80))
}

/// One director's view of the service: its own copy of the real-server list
/// and its own scheduler state, as each rvsd holds them.
struct Director {
    dests: Vec<Dest>,
    algo: Box<dyn Algorithm>,
}

impl Director {
    fn new(cfg: &FleetConfig) -> Result<Self, FleetError> {
        let params = SchedParams {
            mh_table_size: cfg.mh_table_size,
            ..SchedParams::default()
        };
        let dests: Vec<Dest> = (0..cfg.reals).map(real).collect();
        let mut algo = new_scheduler(cfg.scheduler, &params)?;
        algo.update(&dests, ListChange::Reset);
        Ok(Director { dests, algo })
    }

    /// Schedule a new flow and count it on its server as established.
    fn schedule(&mut self, input: &SchedInput) -> Option<DestId> {
        let p = self.algo.schedule(&self.dests, input, Instant::ZERO)?;
        let d = self.dests.get_mut(p)?;
        d.active = d.active.saturating_add(1);
        self.algo.counts_changed(&self.dests, p);
        Some(self.dests[p].id)
    }

    /// Apply a real-server event to the list, as `ipvsadm -a/-d/-e` does.
    fn apply(&mut self, event: Event, reals: u32) {
        let mid = (reals / 2) as usize;
        match event {
            Event::RealAdded => {
                self.dests.insert(0, real(reals));
                self.algo.update(&self.dests, ListChange::Added(0));
            }
            Event::RealRemoved if mid < self.dests.len() => {
                self.dests.remove(mid);
                self.algo.update(&self.dests, ListChange::Removed(mid));
            }
            Event::WeightChanged if mid < self.dests.len() => {
                let d = &mut self.dests[mid];
                d.config.weight = 2;
                d.last_weight = 2;
                self.algo.update(&self.dests, ListChange::Edited(mid));
            }
            _ => {}
        }
    }
}

/// The fleet at the event: every director (plus a spare that joins on
/// [`Event::DirectorAdded`]), the group, each flow's director and server.
struct Steady {
    directors: Vec<Director>,
    ecmp: Ecmp,
    owner: Vec<u16>,
    rs: Vec<DestId>,
}

fn steady(cfg: &FleetConfig) -> Result<Steady, FleetError> {
    let ids: Vec<u16> = (0..cfg.directors).collect();
    let ecmp = Ecmp::new(cfg.ecmp, &ids)?;
    let mut directors = (0..=cfg.directors)
        .map(|_| Director::new(cfg))
        .collect::<Result<Vec<_>, _>>()?;
    let mut owner = Vec::with_capacity(cfg.flows as usize);
    let mut rs = Vec::with_capacity(cfg.flows as usize);
    for i in 0..cfg.flows {
        let (input, hash) = flow(cfg.seed, cfg.clients, i);
        let d = ecmp.select(hash);
        let s = directors[usize::from(d)]
            .schedule(&input)
            .ok_or(FleetError::NoServer(i))?;
        owner.push(d);
        rs.push(s);
    }
    Ok(Steady {
        directors,
        ecmp,
        owner,
        rs,
    })
}

fn validate(cfg: &FleetConfig) -> Result<(), FleetError> {
    if cfg.directors == 0 || cfg.directors > 1000 {
        return Err(FleetError::Invalid("directors must be 1..=1000"));
    }
    if cfg.reals == 0 || cfg.reals > 65_535 {
        return Err(FleetError::Invalid("real servers must be 1..=65535"));
    }
    if !(cfg.new_flow_rate >= 0.0 && cfg.sync_delay_s >= 0.0) {
        return Err(FleetError::Invalid("rate and sync delay must be >= 0"));
    }
    Ok(())
}

/// The order in which the first packets after the event arrive: every flow
/// once, interleaved rather than in birth order (`i × stride mod F` with a
/// stride coprime with `F` near `0.618 F`). The order matters to the
/// history-dependent schedulers (rr's cursor, wlc's counters) that schedule
/// flows as new after the event.
pub fn arrival_order(flows: u32) -> impl Iterator<Item = u32> {
    let f = u64::from(flows.max(1));
    let mut stride = (f * 618 / 1000) | 1;
    while gcd(stride, f) != 1 {
        stride += 2;
    }
    (0..u64::from(flows)).map(move |k| (k * stride % f) as u32)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The director the drain and crash events take out: the middle one.
pub fn changed_director(cfg: &FleetConfig, event: Event) -> u16 {
    match event {
        Event::DirectorAdded => cfg.directors,
        _ => cfg.directors / 2,
    }
}

/// Build the steady state of `cfg`, apply `event`, and count the flows each
/// policy breaks.
pub fn run_event(cfg: &FleetConfig, event: Event) -> Result<Outcome, FleetError> {
    validate(cfg)?;
    let young = cfg.young_flows();
    let first_young = cfg.flows - young;
    let mut base = steady(cfg)?;
    let mut out = Outcome {
        event,
        live: cfg.flows,
        moved: 0,
        moved_from_changed: 0,
        young,
        broken: [0; 5],
        stateless: 0,
    };
    if !event.is_director_event() {
        // Every flow's director holds its state: under every policy the
        // packets keep going to the server of the connection, whatever the
        // table says now. Directors without state: built afresh, changed.
        let mut fresh = (0..cfg.directors)
            .map(|_| Director::new(cfg))
            .collect::<Result<Vec<_>, _>>()?;
        for d in &mut fresh {
            d.apply(event, cfg.reals);
        }
        for i in arrival_order(cfg.flows) {
            let (input, _) = flow(cfg.seed, cfg.clients, i);
            let o = usize::from(base.owner[i as usize]);
            if fresh[o].schedule(&input) != Some(base.rs[i as usize]) {
                out.stateless += 1;
            }
        }
        return Ok(out);
    }
    if cfg.directors == 1 && event != Event::DirectorAdded {
        return Err(FleetError::Invalid("cannot take out the only director"));
    }
    let changed = changed_director(cfg, event);
    let after = match event {
        Event::DirectorAdded => base.ecmp.with_added(changed)?,
        _ => base.ecmp.with_removed(changed)?,
    };
    let dead = (event == Event::DirectorCrashed).then_some(changed);
    let hash_svc = is_hash_scheduler(cfg.scheduler);
    // Independent copies of the directors' scheduler state for the
    // policies that schedule moved flows as new (each adopts its own set).
    let mut for_b = steady(cfg)?.directors;
    let mut for_e = match dead {
        Some(_) => Some(steady(cfg)?.directors),
        None => None,
    };
    for i in arrival_order(cfg.flows) {
        let (input, hash) = flow(cfg.seed, cfg.clients, i);
        let n = after.select(hash);
        let o = base.owner[i as usize];
        if n == o {
            continue;
        }
        let rs = Some(base.rs[i as usize]);
        let n = usize::from(n);
        out.moved += 1;
        if o == changed {
            out.moved_from_changed += 1;
        }
        let is_young = i >= first_young;
        out.broken[Policy::NoState.index()] += 1;
        if for_b[n].schedule(&input) != rs {
            out.broken[Policy::HashOnly.index()] += 1;
        }
        if is_young {
            out.broken[Policy::Sync.index()] += 1;
            if !hash_svc || base.directors[n].schedule(&input) != rs {
                out.broken[Policy::Rvs.index()] += 1;
            }
        }
        if let (Some(d), Some(e)) = (dead, for_e.as_mut())
            && o == d
            && e[n].schedule(&input) != rs
        {
            out.broken[Policy::SecondChance.index()] += 1;
        }
    }
    Ok(out)
}

/// The flows each director holds in the steady state of `cfg` (index =
/// director id): what its flow table must hold without sync.
pub fn flows_per_director(cfg: &FleetConfig) -> Result<Vec<u32>, FleetError> {
    validate(cfg)?;
    let ids: Vec<u16> = (0..cfg.directors).collect();
    let ecmp = Ecmp::new(cfg.ecmp, &ids)?;
    let mut n = vec![0u32; usize::from(cfg.directors)];
    for i in 0..cfg.flows {
        let (_, hash) = flow(cfg.seed, cfg.clients, i);
        n[usize::from(ecmp.select(hash))] += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: u32 = 20_000;

    fn cfg(d: u16, r: u32, s: Scheduler, ecmp: EcmpKind) -> FleetConfig {
        FleetConfig {
            scheduler: s,
            ecmp,
            ..FleetConfig::new(d, r, F)
        }
    }

    /// The ECMP groups before and after a director event, built here from
    /// the group API rather than taken from the simulation.
    fn groups(c: &FleetConfig, ev: Event) -> (Ecmp, Ecmp) {
        let ids: Vec<u16> = (0..c.directors).collect();
        let a = Ecmp::new(c.ecmp, &ids).unwrap();
        let b = match ev {
            Event::DirectorAdded => a.with_added(c.directors).unwrap(),
            _ => a.with_removed(c.directors / 2).unwrap(),
        };
        (a, b)
    }

    /// Within `k` binomial standard deviations of `p × n`.
    fn near(count: u32, n: u32, p: f64, k: f64) -> bool {
        let sd = (p * (1.0 - p) * f64::from(n)).sqrt().max(1.0);
        (f64::from(count) - p * f64::from(n)).abs() <= k * sd
    }

    #[test]
    fn hash_threshold_moves_what_the_ranges_predict() {
        for (d, ev) in [
            (3, Event::DirectorAdded),
            (3, Event::DirectorDrained),
            (10, Event::DirectorAdded),
            (10, Event::DirectorCrashed),
        ] {
            let c = cfg(d, 10, Scheduler::Mh, EcmpKind::HashThreshold);
            let (a, b) = groups(&c, ev);
            let expect = 1.0 - a.kept_share(&b).unwrap();
            let o = run_event(&c, ev).unwrap();
            assert!(
                near(o.moved, F, expect, 5.0),
                "{d} {ev:?}: {o:?} vs {expect}"
            );
        }
        // Appending the 4th of 4 moves half, not 3/4 (hash % D would).
        let o = run_event(
            &cfg(3, 10, Scheduler::Mh, EcmpKind::HashThreshold),
            Event::DirectorAdded,
        )
        .unwrap();
        assert!(near(o.moved, F, 0.5, 5.0), "{o:?}");
        assert_eq!(o.moved_from_changed, 0);
    }

    #[test]
    fn resilient_moves_only_the_changed_directors_flows() {
        let kind = EcmpKind::Resilient { buckets: 256 };
        let c = cfg(10, 10, Scheduler::Wlc, kind);
        let held = flows_per_director(&c).unwrap()[5];
        let o = run_event(&c, Event::DirectorCrashed).unwrap();
        assert_eq!(o.moved, o.moved_from_changed);
        assert_eq!(o.moved, held);
        let o = run_event(&c, Event::DirectorAdded).unwrap();
        let (a, b) = groups(&c, Event::DirectorAdded);
        assert!(near(o.moved, F, 1.0 - a.kept_share(&b).unwrap(), 5.0));
        assert!(near(o.moved, F, b.share_of(10), 5.0));
    }

    /// The events that change the ECMP group of directors.
    const DIRECTOR_EVENTS: [Event; 3] = [
        Event::DirectorAdded,
        Event::DirectorDrained,
        Event::DirectorCrashed,
    ];

    #[test]
    fn no_state_breaks_exactly_the_moved_flows() {
        for ev in DIRECTOR_EVENTS {
            let o = run_event(&cfg(4, 10, Scheduler::Rr, EcmpKind::HashThreshold), ev).unwrap();
            assert!(o.moved > 0);
            assert_eq!(o.broken(Policy::NoState), o.moved, "{ev:?}");
        }
    }

    #[test]
    fn hash_only_keeps_every_mh_flow_and_few_wlc_or_rr_flows() {
        for ev in DIRECTOR_EVENTS {
            let o = run_event(&cfg(5, 10, Scheduler::Mh, EcmpKind::HashThreshold), ev).unwrap();
            assert!(o.moved > 0);
            assert_eq!(o.broken(Policy::HashOnly), 0, "{ev:?}");
            assert_eq!(o.broken(Policy::Rvs), 0, "{ev:?}");
            assert_eq!(o.broken(Policy::SecondChance), 0, "{ev:?}");
            // The history-dependent schedulers pick the same server for a
            // moved flow about once in R.
            for s in [Scheduler::Wlc, Scheduler::Rr] {
                let o = run_event(&cfg(5, 10, s, EcmpKind::HashThreshold), ev).unwrap();
                let b = o.broken(Policy::HashOnly);
                assert!(near(b, o.moved, 0.9, 6.0), "{s} {ev:?}: {o:?}");
            }
        }
    }

    #[test]
    fn sync_breaks_exactly_the_moved_flows_younger_than_the_delay() {
        let mut c = cfg(4, 10, Scheduler::Wlc, EcmpKind::HashThreshold);
        c.new_flow_rate = 1000.0;
        c.sync_delay_s = 0.5;
        assert_eq!(c.young_flows(), 500);
        for ev in DIRECTOR_EVENTS {
            let (a, b) = groups(&c, ev);
            let young_moved = (F - 500..F)
                .filter(|&i| {
                    let (_, h) = flow(c.seed, c.clients, i);
                    a.select(h) != b.select(h)
                })
                .count() as u32;
            assert!(young_moved > 0);
            let o = run_event(&c, ev).unwrap();
            assert_eq!(o.broken(Policy::Sync), young_moved, "{ev:?}");
            // wlc is not a hash service: rvs's design is sync alone.
            assert_eq!(o.broken(Policy::Rvs), young_moved, "{ev:?}");
        }
        // With every flow synced, a crash breaks nothing.
        c.sync_delay_s = 0.0;
        let o = run_event(&c, Event::DirectorCrashed).unwrap();
        assert!(o.moved > 0);
        assert_eq!(o.broken(Policy::Sync), 0);
        assert_eq!(o.broken(Policy::Rvs), 0);
    }

    #[test]
    fn second_chance_needs_the_previous_director_alive() {
        let c = cfg(4, 10, Scheduler::Wlc, EcmpKind::HashThreshold);
        for ev in [Event::DirectorAdded, Event::DirectorDrained] {
            assert_eq!(run_event(&c, ev).unwrap().broken(Policy::SecondChance), 0);
        }
        let o = run_event(&c, Event::DirectorCrashed).unwrap();
        // The crashed director's flows are scheduled as new: ~9 in 10 break;
        // the flows moved between live directors are kept.
        let b = o.broken(Policy::SecondChance);
        assert!(near(b, o.moved_from_changed, 0.9, 6.0), "{o:?}");
        assert!(o.moved > o.moved_from_changed);
    }

    #[test]
    fn real_server_events_keep_flows_with_state_and_show_mh_minimal_disruption() {
        for ev in [Event::RealAdded, Event::RealRemoved, Event::WeightChanged] {
            let mh = run_event(&cfg(3, 10, Scheduler::Mh, EcmpKind::HashThreshold), ev).unwrap();
            assert_eq!(mh.moved, 0);
            assert_eq!(mh.broken, [0; 5]);
            let wlc = run_event(&cfg(3, 10, Scheduler::Wlc, EcmpKind::HashThreshold), ev).unwrap();
            assert_eq!(wlc.broken, [0; 5]);
            // Without state, Maglev moves a small share (one server's
            // worth plus its disruption); wlc reshuffles nearly everything.
            assert!(mh.stateless > 0 && mh.stateless < F / 4, "{ev:?} {mh:?}");
            assert!(wlc.stateless > F / 2, "{ev:?} {wlc:?}");
        }
        // Removing one of 10 servers: at least its tenth must move.
        let o = run_event(
            &cfg(3, 10, Scheduler::Mh, EcmpKind::HashThreshold),
            Event::RealRemoved,
        )
        .unwrap();
        assert!(o.stateless as f64 >= 0.08 * f64::from(F), "{o:?}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        let c = cfg(1, 10, Scheduler::Mh, EcmpKind::HashThreshold);
        assert!(run_event(&c, Event::DirectorCrashed).is_err());
        assert!(run_event(&c, Event::DirectorAdded).is_ok());
        let c = cfg(0, 10, Scheduler::Mh, EcmpKind::HashThreshold);
        assert!(run_event(&c, Event::RealAdded).is_err());
        let mut c = cfg(2, 10, Scheduler::Mh, EcmpKind::HashThreshold);
        c.mh_table_size = 100;
        assert!(matches!(
            run_event(&c, Event::RealAdded),
            Err(FleetError::Sched(_))
        ));
        let c = cfg(3, 10, Scheduler::Mh, EcmpKind::Resilient { buckets: 2 });
        assert!(matches!(
            run_event(&c, Event::RealAdded),
            Err(FleetError::Ecmp(_))
        ));
    }

    #[test]
    fn arrival_order_is_a_permutation() {
        for f in [1u32, 2, 10, 1000, 1024, 20_000] {
            let mut seen: Vec<u32> = arrival_order(f).collect();
            // Interleaved, not birth order.
            assert!(f < 3 || seen.windows(2).any(|w| w[1] != w[0] + 1), "F={f}");
            seen.sort_unstable();
            assert_eq!(seen, (0..f).collect::<Vec<_>>(), "F={f}");
        }
    }

    #[test]
    fn runs_are_deterministic_for_a_seed() {
        let c = cfg(3, 10, Scheduler::Rr, EcmpKind::HashThreshold);
        let a = run_event(&c, Event::DirectorCrashed).unwrap();
        assert_eq!(a, run_event(&c, Event::DirectorCrashed).unwrap());
        let mut d = c;
        d.seed = 15;
        assert_ne!(a, run_event(&d, Event::DirectorCrashed).unwrap());
    }
}
