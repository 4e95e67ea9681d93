//! `lblcr`: locality-based least connection with replication (ip_vs_lblcr.c).
//!
//! Like lblc, but each destination address (`SchedInput::daddr`) maps to a
//! *set* of servers, so a hot address can be served by several. A hit
//! refreshes `lastuse` and takes the WLC minimum of the set (only usable
//! members; ties to the earliest in set order, newest member first, as the
//! kernel adds at the head). Then, if the set has more than one member and
//! has not changed for the expiration time (`now > lastmod + expiration`,
//! sysctl `lblcr_expiration`, default 24 h), the member with the *highest*
//! overhead / weight is dropped (weight > 0 required, ties to the earliest).
//! If the set gave a server that is not overloaded in lblc's sense (more
//! active connections than weight while some server has `active × 2 <
//! weight`) it is used; otherwise WLC over the whole service picks one and it
//! joins the set (only a new member updates `lastmod`). A miss creates the
//! entry with the WLC pick.
//!
//! Sets name servers by [`DestId`]. A member no longer in the service list
//! is skipped by the minimum and, unlike the kernel (which still sees the
//! deleted server's counters), never chosen as the maximum; it leaves with
//! its entry. Sets are tiny, so they are plain vectors; the service-wide WLC
//! and the half-loaded count are O(1) (see [`super::locality::LoadIndex`]).

use core::time::Duration;

use super::locality::{DEFAULT_EXPIRATION, LoadIndex, LocalityTable};
use super::wlc::wlc_better;
use super::{Algorithm, ListChange, SchedInput};
use crate::dest::{Dest, DestId};
use crate::time::Instant;

/// A destination address's server set.
#[derive(Debug, Clone)]
struct DestSet {
    /// Members, newest first.
    members: Vec<DestId>,
    /// Last time a member was added or removed.
    lastmod: Instant,
}

impl DestSet {
    /// `ip_vs_dest_set_min`: WLC minimum over usable members.
    fn min(&self, load: &LoadIndex, dests: &[Dest]) -> Option<usize> {
        let mut least: Option<usize> = None;
        for &id in &self.members {
            let Some(p) = load.position(dests, id) else {
                continue;
            };
            let d = &dests[p];
            if !d.is_eligible() {
                continue;
            }
            match least {
                Some(l) if !wlc_better(d, &dests[l]) => {}
                _ => least = Some(p),
            }
        }
        least
    }

    /// `ip_vs_dest_set_max`: index in `members` of the member with the
    /// highest overhead / weight among those with weight > 0.
    fn max(&self, load: &LoadIndex, dests: &[Dest]) -> Option<usize> {
        let mut most: Option<(usize, &Dest)> = None;
        for (i, &id) in self.members.iter().enumerate() {
            let Some(p) = load.position(dests, id) else {
                continue;
            };
            let d = &dests[p];
            if d.weight() == 0 {
                continue;
            }
            match most {
                // Replace when overhead(m)/w(m) < overhead(d)/w(d).
                Some((_, m)) if !wlc_better(m, d) => {}
                _ => most = Some((i, d)),
            }
        }
        most.map(|(i, _)| i)
    }

    /// Add at the head unless present (`ip_vs_dest_set_insert` with check).
    fn insert(&mut self, id: DestId, now: Instant) {
        if !self.members.contains(&id) {
            self.members.insert(0, id);
            self.lastmod = now;
        }
    }
}

/// lblcr state: the destination-address table of server sets and the load
/// index.
#[derive(Debug)]
pub(crate) struct Lblcr {
    table: LocalityTable<DestSet>,
    load: LoadIndex,
    expiration: Duration,
}

impl Lblcr {
    pub(crate) fn new() -> Self {
        Lblcr::with_expiration(DEFAULT_EXPIRATION)
    }

    /// With another `lblcr_expiration` (the sysctl; default 24 h). It both
    /// expires unused entries and paces the shrinking of sets.
    pub(crate) fn with_expiration(expiration: Duration) -> Self {
        Lblcr {
            table: LocalityTable::new(expiration),
            load: LoadIndex::default(),
            expiration,
        }
    }
}

impl Algorithm for Lblcr {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Lblcr
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
        let Some(en) = self.table.get_mut(&input.daddr) else {
            let p = self.load.wlc(dests)?;
            let set = DestSet {
                members: vec![dests[p].id],
                lastmod: now,
            };
            self.table.insert(input.daddr, set, now);
            return Some(p);
        };
        en.lastuse = now;
        let set = &mut en.value;
        let least = set.min(&self.load, dests);
        if set.members.len() > 1
            && now > set.lastmod + self.expiration
            && let Some(i) = set.max(&self.load, dests)
        {
            set.members.remove(i);
            set.lastmod = now;
        }
        if let Some(p) = least
            && !self.load.is_overloaded(&dests[p])
        {
            return Some(p);
        }
        let p = self.load.wlc(dests)?;
        set.insert(dests[p].id, now);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{dests, input};
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn to(daddr: u8) -> SchedInput {
        SchedInput {
            daddr: IpAddr::V4(Ipv4Addr::new(192, 0, 2, daddr)),
            ..input(1, 1000)
        }
    }

    fn set_active(s: &mut Lblcr, d: &mut [Dest], p: usize, active: u32) {
        d[p].active = active;
        s.counts_changed(d, p);
    }

    fn members(s: &mut Lblcr, daddr: u8) -> Vec<u32> {
        let addr = to(daddr).daddr;
        s.table
            .get_mut(&addr)
            .map(|e| e.value.members.iter().map(|id| id.0).collect())
            .unwrap_or_default()
    }

    #[test]
    fn set_grows_under_overload_and_shrinks_after_expiration() {
        let mut d = dests(&[2, 2, 2]);
        let mut s = Lblcr::with_expiration(Duration::from_secs(100));
        s.update(&d, ListChange::Reset);
        let t0 = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t0), Some(0));
        assert_eq!(members(&mut s, 1), vec![0]);
        // Server 0 over its weight while others are idle: replicate to WLC pick.
        set_active(&mut s, &mut d, 0, 3);
        assert_eq!(s.schedule(&d, &to(1), t0), Some(1));
        assert_eq!(members(&mut s, 1), vec![1, 0]);
        // Set minimum: 1 (0 active) beats 0.
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(50)), Some(1));
        // Ties in the set go to the newest member (set order).
        set_active(&mut s, &mut d, 0, 0);
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(60)), Some(1));
        // After lastmod + 100 s: the most loaded member (0: 3 active) leaves,
        // but this decision still uses the minimum found before.
        set_active(&mut s, &mut d, 0, 3);
        set_active(&mut s, &mut d, 1, 1);
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(101)), Some(1));
        assert_eq!(members(&mut s, 1), vec![1]);
        // A single member is never removed.
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(500)), Some(1));
        assert_eq!(members(&mut s, 1), vec![1]);
    }

    #[test]
    fn unusable_set_falls_back_to_wlc_and_joins() {
        let mut d = dests(&[1, 1]);
        let mut s = Lblcr::new();
        s.update(&d, ListChange::Reset);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        d[0].overloaded = true;
        s.counts_changed(&d, 0);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
        assert_eq!(members(&mut s, 1), vec![1, 0]);
        d[1].config.weight = 0;
        s.update(&d, ListChange::Edited(1));
        assert_eq!(s.schedule(&d, &to(1), t), None);
        // Other addresses have their own sets.
        d[0].overloaded = false;
        s.counts_changed(&d, 0);
        assert_eq!(s.schedule(&d, &to(2), t), Some(0));
        assert_eq!(members(&mut s, 2), vec![0]);
    }
}
