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

use super::locality::{Decision, LoadIndex, Locality, LocalityRule};
use super::wlc::wlc_better;
use crate::dest::{Dest, DestId};
use crate::time::Instant;

/// A destination address's server set.
#[derive(Debug, Clone)]
pub(crate) struct DestSet {
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

/// lblcr's rule: a server set per destination address, shrunk after
/// `expiration` without change.
#[derive(Debug)]
pub(crate) struct LblcrRule {
    expiration: Duration,
}

/// lblcr state: the destination-address table of server sets and the load
/// index.
pub(crate) type Lblcr = Locality<LblcrRule>;

impl LocalityRule for LblcrRule {
    type Value = DestSet;
    const SCHEDULER: super::Scheduler = super::Scheduler::Lblcr;

    /// `expiration` also paces the shrinking of sets.
    fn new(expiration: Duration) -> Self {
        LblcrRule { expiration }
    }

    fn choose(&self, cx: Decision<'_, Self::Value>) -> Option<usize> {
        let Some(en) = cx.table.get_mut(&cx.daddr) else {
            let p = cx.load.wlc(cx.dests)?;
            let set = DestSet {
                members: vec![cx.dests[p].id],
                lastmod: cx.now,
            };
            cx.table.insert(cx.daddr, set, cx.now);
            return Some(p);
        };
        en.lastuse = cx.now;
        let set = &mut en.value;
        let least = set.min(cx.load, cx.dests);
        if set.members.len() > 1
            && cx.now > set.lastmod + self.expiration
            && let Some(i) = set.max(cx.load, cx.dests)
        {
            set.members.remove(i);
            set.lastmod = cx.now;
        }
        if let Some(p) = least
            && !cx.load.is_overloaded(&cx.dests[p])
        {
            return Some(p);
        }
        let p = cx.load.wlc(cx.dests)?;
        set.insert(cx.dests[p].id, cx.now);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{counts, dests, reset, set_active, to};
    use super::super::{Algorithm, ListChange};
    use super::*;

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
        let mut s = reset(Lblcr::with_expiration(Duration::from_secs(100)), &d);
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
        let mut s = reset(Lblcr::new(), &d);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        counts(&mut s, &mut d, 0, |x| x.overloaded = true);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
        assert_eq!(members(&mut s, 1), vec![1, 0]);
        d[1].config.weight = 0;
        s.update(&d, ListChange::Edited(1));
        assert_eq!(s.schedule(&d, &to(1), t), None);
        // Other addresses have their own sets.
        counts(&mut s, &mut d, 0, |x| x.overloaded = false);
        assert_eq!(s.schedule(&d, &to(2), t), Some(0));
        assert_eq!(members(&mut s, 2), vec![0]);
    }
}
