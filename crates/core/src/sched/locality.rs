//! What lblc and lblcr share (ip_vs_lblc.c, ip_vs_lblcr.c): the table keyed
//! by the packet's destination address, its garbage collection, and the
//! service-wide load index (WLC fallback and the `is_overloaded` rule).
//!
//! **Garbage collection without timers.** The kernel arms a 60 s timer per
//! service. Each run either does a *full check* (every 30th run counted
//! since the last full check, only counting runs that found the table within
//! its maximum size: "no partial expiration check in a half hour") deleting
//! entries unused for the expiration time (sysctl, default 24 h), or — when
//! the table holds more than `max_size` = 1024 × 16 entries — a *partial
//! check* deleting entries idle for 6 minutes, bucket by bucket from a
//! rotating rover, until `min((entries − max) × 4/3, max/2)` are gone.
//!
//! Being sans-IO, [`LocalityTable::collect`] replays those runs lazily at the
//! start of every decision: the 60 s grid starts at the first decision, and
//! every grid point ≤ now runs as the kernel's timer would have, at its own
//! time. Runs that cannot change anything (the table is within its size and
//! no full check is due) are skipped arithmetically, and consecutive full
//! checks with nothing in between collapse into the last one (a later full
//! check deletes a superset), so a long idle gap costs O(entries), not
//! O(gap). Bucket order for the rover uses the kernel's hash
//! (`hash_32(ntohl(addr), 10)`, IPv6 folded by XOR), so which idle entries a
//! partial check removes first matches the kernel.

use core::time::Duration;
use std::net::IpAddr;

use hashbrown::HashMap;

use super::argmin::ArgminTree;
use super::wlc::WlcOrder;
use super::{Algorithm, ListChange, SchedInput, Scheduler};
use crate::dest::{Dest, DestId};
use crate::time::Instant;

/// Buckets of the kernel's table (`CONFIG_IP_VS_LBLC_TAB_BITS` = 10).
const TAB_BITS: u32 = 10;
/// Number of buckets.
const TAB_SIZE: u32 = 1 << TAB_BITS;
/// Entries beyond which the partial check runs (TAB_SIZE × 16).
pub(crate) const MAX_SIZE: usize = (TAB_SIZE as usize) * 16;
/// Period of the kernel's GC timer.
const CHECK_INTERVAL_MS: u64 = 60_000;
/// Idle time after which the partial check may delete an entry.
const ENTRY_TIMEOUT_MS: u64 = 6 * 60_000;
/// Full check every this many quiet runs.
const COUNT_FOR_FULL: u32 = 30;
/// Default of the `lblc_expiration` / `lblcr_expiration` sysctls.
pub(crate) const DEFAULT_EXPIRATION: Duration = Duration::from_secs(24 * 60 * 60);

/// What sets lblc and lblcr apart: what a destination address maps to and
/// how a decision uses the table. The table, the load index and their upkeep
/// are the same for both and live in [`Locality`].
pub(crate) trait LocalityRule: Send + core::fmt::Debug {
    /// What the table keeps per destination address.
    type Value: Send + core::fmt::Debug;
    /// The scheduler this rule is.
    const SCHEDULER: Scheduler;

    /// The rule for a table whose entries expire after `expiration` unused.
    fn new(expiration: Duration) -> Self;

    /// Pick a server for the decision `cx`.
    fn choose(&self, cx: Decision<'_, Self::Value>) -> Option<usize>;
}

/// One decision of a locality scheduler: its table, already collected, and
/// its load index, in sync with `dests`.
pub(crate) struct Decision<'a, V> {
    pub(crate) table: &'a mut LocalityTable<V>,
    pub(crate) load: &'a mut LoadIndex,
    pub(crate) dests: &'a [Dest],
    /// The new connection's destination address: the table's key.
    pub(crate) daddr: IpAddr,
    pub(crate) now: Instant,
}

/// A locality-based scheduler: the destination-address table and the load
/// index, kept up to date for `R`, which decides.
#[derive(Debug)]
pub(crate) struct Locality<R: LocalityRule> {
    pub(super) table: LocalityTable<R::Value>,
    load: LoadIndex,
    rule: R,
}

impl<R: LocalityRule> Locality<R> {
    pub(crate) fn new() -> Self {
        Self::with_expiration(DEFAULT_EXPIRATION)
    }

    /// With another expiration (the `lblc_expiration` / `lblcr_expiration`
    /// sysctl; default 24 h).
    pub(crate) fn with_expiration(expiration: Duration) -> Self {
        Locality {
            table: LocalityTable::new(expiration),
            load: LoadIndex::default(),
            rule: R::new(expiration),
        }
    }
}

impl<R: LocalityRule> Algorithm for Locality<R> {
    fn scheduler(&self) -> Scheduler {
        R::SCHEDULER
    }

    fn update(&mut self, dests: &[Dest], change: ListChange) {
        self.load.list_changed(dests, change);
    }

    fn counts_changed(&mut self, dests: &[Dest], pos: usize) {
        self.load.changed(dests, pos);
    }

    fn schedule(&mut self, dests: &[Dest], input: &SchedInput, now: Instant) -> Option<usize> {
        self.table.collect(now);
        self.load.sync(dests);
        self.rule.choose(Decision {
            table: &mut self.table,
            load: &mut self.load,
            dests,
            daddr: input.daddr,
            now,
        })
    }
}

/// The kernel's bucket for a destination address.
pub(crate) fn bucket_of(addr: &IpAddr) -> u32 {
    let folded = match addr {
        IpAddr::V4(a) => u32::from(*a),
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            w(0) ^ w(4) ^ w(8) ^ w(12)
        }
    };
    folded.wrapping_mul(0x61C8_8647) >> (32 - TAB_BITS)
}

/// One table entry.
#[derive(Debug, Clone)]
pub(crate) struct Entry<V> {
    /// lblc: the server; lblcr: the server set.
    pub(crate) value: V,
    /// Last time a decision looked this entry up.
    pub(crate) lastuse: Instant,
}

/// Destination address → entry, with the kernel's GC.
#[derive(Debug)]
pub(crate) struct LocalityTable<V> {
    map: HashMap<IpAddr, Entry<V>, foldhash::fast::RandomState>,
    /// Unused-entry lifetime for the full check.
    expiration_ms: u64,
    /// Next GC grid point; `None` before the first decision.
    next_gc: Option<u64>,
    /// The kernel's `counter` (starts at 1).
    counter: u32,
    /// The kernel's `rover` (last bucket visited).
    rover: u32,
}

impl<V> LocalityTable<V> {
    /// An empty table with this expiration.
    pub(crate) fn new(expiration: Duration) -> Self {
        LocalityTable {
            map: HashMap::default(),
            expiration_ms: u64::try_from(expiration.as_millis()).unwrap_or(u64::MAX),
            next_gc: None,
            counter: 1,
            rover: 0,
        }
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The entry for `addr`.
    pub(crate) fn get_mut(&mut self, addr: &IpAddr) -> Option<&mut Entry<V>> {
        self.map.get_mut(addr)
    }

    /// Insert or replace the entry for `addr`.
    pub(crate) fn insert(&mut self, addr: IpAddr, value: V, now: Instant) {
        self.map.insert(
            addr,
            Entry {
                value,
                lastuse: now,
            },
        );
    }

    /// Run every GC timer tick due at or before `now`.
    pub(crate) fn collect(&mut self, now: Instant) {
        let now = now.as_millis();
        let Some(mut t) = self.next_gc else {
            self.next_gc = Some(now.saturating_add(CHECK_INTERVAL_MS));
            return;
        };
        while t <= now {
            if self.counter.is_multiple_of(COUNT_FOR_FULL) {
                self.full_check(t);
                self.counter = 1;
                t = t.saturating_add(CHECK_INTERVAL_MS);
                continue;
            }
            if self.map.len() <= MAX_SIZE {
                // Quiet ticks only count up until the next full check.
                let quiet = u64::from(COUNT_FOR_FULL - self.counter % COUNT_FOR_FULL);
                let due = (now - t) / CHECK_INTERVAL_MS + 1;
                if due <= quiet {
                    // `due` ≤ 29, so the counter stays small.
                    self.counter += due as u32;
                    t = t.saturating_add(due * CHECK_INTERVAL_MS);
                    break;
                }
                self.counter += quiet as u32;
                t = t.saturating_add(quiet * CHECK_INTERVAL_MS);
                // From here full checks recur every 30 ticks with only quiet
                // ticks in between (a full check never grows the table), and
                // the last one deletes a superset of the earlier ones.
                let period = u64::from(COUNT_FOR_FULL) * CHECK_INTERVAL_MS;
                t = t.saturating_add((now - t) / period * period);
                continue;
            }
            self.partial_check(t);
            t = t.saturating_add(CHECK_INTERVAL_MS);
        }
        self.next_gc = Some(t);
    }

    /// Delete entries unused for the expiration time (kernel: keep while
    /// `now < lastuse + expiration`). Visits every bucket, so the rover ends
    /// where it started.
    fn full_check(&mut self, t: u64) {
        let exp = self.expiration_ms;
        self.map
            .retain(|_, e| t < e.lastuse.as_millis().saturating_add(exp));
    }

    /// The kernel's partial check at time `t`.
    fn partial_check(&mut self, t: u64) {
        let excess = self.map.len().saturating_sub(MAX_SIZE);
        let mut goal = (excess.saturating_mul(4) / 3).min(MAX_SIZE / 2);
        // Idle entries by their distance from the rover in visiting order.
        let rover = self.rover;
        let mut idle: Vec<(u32, IpAddr)> = self
            .map
            .iter()
            .filter(|(_, e)| t >= e.lastuse.as_millis().saturating_add(ENTRY_TIMEOUT_MS))
            .map(|(a, _)| {
                let dist = bucket_of(a).wrapping_sub(rover).wrapping_sub(1) & (TAB_SIZE - 1);
                (dist, *a)
            })
            .collect();
        idle.sort_unstable_by_key(|&(dist, _)| dist);
        // A whole bucket is cleared before the goal is checked.
        let mut i = 0;
        let mut visited_all = true;
        while i < idle.len() {
            let dist = idle[i].0;
            while i < idle.len() && idle[i].0 == dist {
                self.map.remove(&idle[i].1);
                goal = goal.saturating_sub(1);
                i += 1;
            }
            if goal == 0 {
                self.rover = rover.wrapping_add(dist).wrapping_add(1) & (TAB_SIZE - 1);
                visited_all = false;
                break;
            }
        }
        if visited_all {
            // All 1024 buckets visited: j ends back at the rover.
            self.rover = rover;
        }
    }
}

/// Service-wide load index for lblc / lblcr: the WLC argmin tree, the
/// position of each server id, and how many servers are less than half
/// loaded (`active × 2 < weight`), so `is_overloaded` is O(1).
#[derive(Debug, Default)]
pub(crate) struct LoadIndex {
    wlc: ArgminTree<WlcOrder>,
    pos: HashMap<DestId, usize, foldhash::fast::RandomState>,
    half: Vec<bool>,
    half_count: usize,
    len: usize,
}

fn half_loaded(d: &Dest) -> bool {
    u64::from(d.active) * 2 < u64::from(d.weight())
}

impl LoadIndex {
    /// Rebuild everything, O(N).
    pub(crate) fn rebuild(&mut self, dests: &[Dest]) {
        self.wlc.rebuild(dests);
        self.pos.clear();
        self.pos
            .extend(dests.iter().enumerate().map(|(i, d)| (d.id, i)));
        self.half.clear();
        self.half.extend(dests.iter().map(half_loaded));
        self.half_count = self.half.iter().filter(|&&h| h).count();
        self.len = dests.len();
    }

    /// Follow a list change.
    pub(crate) fn list_changed(&mut self, dests: &[Dest], change: ListChange) {
        match change {
            ListChange::Edited(p) => self.changed(dests, p),
            _ => self.rebuild(dests),
        }
    }

    /// `dests[pos]`'s counters, flags or weight changed, O(log N).
    pub(crate) fn changed(&mut self, dests: &[Dest], pos: usize) {
        if dests.len() != self.len || pos >= dests.len() {
            self.rebuild(dests);
            return;
        }
        self.wlc.fix(dests, pos);
        let h = half_loaded(&dests[pos]);
        if h != self.half[pos] {
            self.half[pos] = h;
            if h {
                self.half_count += 1;
            } else {
                self.half_count -= 1;
            }
        }
    }

    /// Make sure the index describes `dests` (rebuild if the length changed
    /// without notice).
    pub(crate) fn sync(&mut self, dests: &[Dest]) {
        if dests.len() != self.len {
            self.rebuild(dests);
        }
    }

    /// WLC over the whole service.
    pub(crate) fn wlc(&mut self, dests: &[Dest]) -> Option<usize> {
        self.wlc.best(dests)
    }

    /// Current position of a server, if it is in the list.
    pub(crate) fn position(&self, dests: &[Dest], id: DestId) -> Option<usize> {
        self.pos
            .get(&id)
            .copied()
            .filter(|&p| dests.get(p).is_some_and(|d| d.id == id))
    }

    /// The kernel's `is_overloaded`: more active connections than weight
    /// while some server of the service has `active × 2 < weight`.
    pub(crate) fn is_overloaded(&self, d: &Dest) -> bool {
        d.active > d.weight() && self.half_count > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
    }

    #[test]
    fn bucket_is_hash_32() {
        assert_eq!(
            bucket_of(&ip(0)),
            0x0a00_0000u32.wrapping_mul(0x61C8_8647) >> 22
        );
        let v6: IpAddr = "2001:db8::1".parse().unwrap_or(ip(0));
        let f = 0x2001_0db8u32 ^ 1;
        assert_eq!(bucket_of(&v6), f.wrapping_mul(0x61C8_8647) >> 22);
    }

    #[test]
    fn full_check_after_thirty_quiet_minutes() {
        let mut t: LocalityTable<()> = LocalityTable::new(Duration::from_secs(600));
        t.collect(Instant::ZERO); // grid starts: first tick at 60 s
        t.insert(ip(1), (), Instant::ZERO);
        t.insert(ip(2), (), Instant::from_secs(1300));
        // Ticks at 60 s .. 1740 s are quiet (counter 1 → 30); 1800 s is full.
        t.collect(Instant::from_secs(1799));
        assert_eq!(t.len(), 2);
        t.collect(Instant::from_secs(1800));
        assert_eq!(t.len(), 1);
        // Next full check at 3600 s: entry 2 (lastuse 1300 s) expired at 1900 s.
        t.collect(Instant::from_secs(3599));
        assert_eq!(t.len(), 1);
        t.collect(Instant::from_secs(3600));
        assert_eq!(t.len(), 0);
        // A long idle gap collapses the full checks into the last one due.
        t.insert(ip(3), (), Instant::from_secs(3600));
        t.collect(Instant::from_secs(100_000));
        assert_eq!(t.len(), 0);
        assert_eq!(t.counter, 1 + (100_000 - 3600 - 1800 * 53) / 60);
    }

    #[test]
    fn partial_check_trims_idle_entries_when_over_size() {
        let mut t: LocalityTable<()> = LocalityTable::new(DEFAULT_EXPIRATION);
        t.collect(Instant::ZERO);
        for i in 0..(MAX_SIZE as u32 + 300) {
            t.insert(ip(i), (), Instant::ZERO);
        }
        // Tick at 60 s: nothing idle for 6 min yet.
        t.collect(Instant::from_secs(60));
        assert_eq!(t.len(), MAX_SIZE + 300);
        // Tick at 360 s: goal = 300 × 4/3 = 400, whole buckets at a time.
        t.collect(Instant::from_secs(360));
        let left = t.len();
        assert!(left <= MAX_SIZE + 300 - 400, "{left}");
        // ... stopping in the bucket that reached the goal.
        assert!(left > MAX_SIZE + 300 - 400 - 64, "{left}");
        // The deleted ones are exactly the buckets after the old rover (0)
        // up to and including the new rover.
        let rover = t.rover;
        assert!(rover > 0);
        for i in 0..(MAX_SIZE as u32 + 300) {
            let b = bucket_of(&ip(i));
            let deleted = (1..=rover).contains(&b);
            assert_eq!(t.map.contains_key(&ip(i)), !deleted, "{i} bucket {b}");
        }
        // Then at 420 s the table is within its size: quiet.
        t.collect(Instant::from_secs(420));
        assert_eq!(t.len(), left);
    }
}
