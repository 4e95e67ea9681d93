//! `lblc`: locality-based least connection (ip_vs_lblc.c).
//!
//! Built for cache clusters: connections for the same *destination* address
//! (`SchedInput::daddr`) keep going to the same server while it copes. A
//! table maps each destination address to a server; a hit refreshes the
//! entry's `lastuse` and reuses the server unless it is unusable or
//! "overloaded" in lblc's own sense — more active connections than its
//! weight while some server of the service has `active × 2 < weight`. Then,
//! and on a miss, WLC over the whole service picks a server and the entry is
//! (re)written.
//!
//! Differences from the kernel, on purpose: a cached server with the
//! OVERLOAD flag (connection threshold) is not reused — the kernel's hit path
//! only checks AVAILABLE, weight and `is_overloaded`, but rvs never hands a
//! new connection to an OVERLOAD server. Entries name servers by [`DestId`];
//! one no longer in the list counts as unavailable.
//!
//! Cost: the WLC fallback is an [`super::argmin::ArgminTree`] and the
//! "some server is less than half loaded" test an O(1) counter, both kept up
//! to date by [`Algorithm::counts_changed`]. Table GC (see
//! [`super::locality`]) runs lazily at the start of a decision.

use core::time::Duration;

use super::locality::{Decision, Locality, LocalityRule};
use crate::dest::DestId;

/// lblc's rule: one server per destination address.
#[derive(Debug)]
pub(crate) struct LblcRule;

/// lblc state: the destination-address table and the load index.
pub(crate) type Lblc = Locality<LblcRule>;

impl LocalityRule for LblcRule {
    type Value = DestId;
    const SCHEDULER: super::Scheduler = super::Scheduler::Lblc;

    fn new(_expiration: Duration) -> Self {
        LblcRule
    }

    fn choose(&self, cx: Decision<'_, Self::Value>) -> Option<usize> {
        if let Some(en) = cx.table.get_mut(&cx.daddr) {
            en.lastuse = cx.now;
            if let Some(p) = cx.load.position(cx.dests, en.value) {
                let d = &cx.dests[p];
                if d.is_eligible() && !cx.load.is_overloaded(d) {
                    return Some(p);
                }
            }
        }
        let p = cx.load.wlc(cx.dests)?;
        cx.table.insert(cx.daddr, cx.dests[p].id, cx.now);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{counts, dests, reset, set_active, to};
    use super::super::{Algorithm, ListChange};
    use super::*;
    use crate::time::Instant;

    #[test]
    fn sticks_to_cached_server_until_overloaded_rule() {
        let mut d = dests(&[2, 2]);
        let mut s = reset(Lblc::new(), &d);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        // WLC would now say 1 for a new address, but address 1 sticks to 0.
        set_active(&mut s, &mut d, 0, 2);
        assert_eq!(s.schedule(&d, &to(2), t), Some(1));
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        // active 3 > weight 2, and server 1 has 0*2 < 2: overloaded → WLC.
        set_active(&mut s, &mut d, 0, 3);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
        // The entry now points at 1.
        set_active(&mut s, &mut d, 0, 0);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
    }

    #[test]
    fn over_weight_is_fine_when_nobody_is_half_idle() {
        let mut d = dests(&[2, 2]);
        let mut s = reset(Lblc::new(), &d);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        set_active(&mut s, &mut d, 0, 5);
        // Server 1: 1*2 < 2 is false, so no server is half idle.
        set_active(&mut s, &mut d, 1, 1);
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        set_active(&mut s, &mut d, 1, 0);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
    }

    #[test]
    fn cached_server_quiesced_overloaded_or_removed_is_replaced() {
        let mut d = dests(&[1, 1, 1]);
        let mut s = reset(Lblc::new(), &d);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        counts(&mut s, &mut d, 0, |x| x.overloaded = true);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
        d[1].config.weight = 0;
        s.update(&d, ListChange::Edited(1));
        assert_eq!(s.schedule(&d, &to(1), t), Some(2));
        d.remove(2);
        s.update(&d, ListChange::Removed(2));
        assert_eq!(s.schedule(&d, &to(1), t), None);
    }

    #[test]
    fn entries_expire() {
        let mut d = dests(&[1, 1]);
        let mut s = reset(Lblc::with_expiration(Duration::from_secs(60)), &d);
        assert_eq!(s.schedule(&d, &to(1), Instant::ZERO), Some(0));
        set_active(&mut s, &mut d, 0, 1);
        set_active(&mut s, &mut d, 1, 1);
        // Still cached (ties would otherwise also give 0: make 0 worse).
        counts(&mut s, &mut d, 0, |x| x.inactive = 1);
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(10)), Some(0));
        // The full check at 30 min deletes the entry; WLC picks 1.
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(1800)), Some(1));
    }
}
