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

use super::locality::{DEFAULT_EXPIRATION, LoadIndex, LocalityTable};
use super::{Algorithm, ListChange, SchedInput};
use crate::dest::{Dest, DestId};
use crate::time::Instant;

/// lblc state: the destination-address table and the load index.
#[derive(Debug)]
pub(crate) struct Lblc {
    table: LocalityTable<DestId>,
    load: LoadIndex,
}

impl Lblc {
    pub(crate) fn new() -> Self {
        Lblc::with_expiration(DEFAULT_EXPIRATION)
    }

    /// With another `lblc_expiration` (the sysctl; default 24 h).
    pub(crate) fn with_expiration(expiration: Duration) -> Self {
        Lblc {
            table: LocalityTable::new(expiration),
            load: LoadIndex::default(),
        }
    }
}

impl Algorithm for Lblc {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Lblc
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
        if let Some(en) = self.table.get_mut(&input.daddr) {
            en.lastuse = now;
            if let Some(p) = self.load.position(dests, en.value) {
                let d = &dests[p];
                if d.is_eligible() && !self.load.is_overloaded(d) {
                    return Some(p);
                }
            }
        }
        let p = self.load.wlc(dests)?;
        self.table.insert(input.daddr, dests[p].id, now);
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

    fn bind(s: &mut Lblc, d: &mut [Dest], p: usize, active: u32) {
        d[p].active = active;
        s.counts_changed(d, p);
    }

    #[test]
    fn sticks_to_cached_server_until_overloaded_rule() {
        let mut d = dests(&[2, 2]);
        let mut s = Lblc::new();
        s.update(&d, ListChange::Reset);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        // WLC would now say 1 for a new address, but address 1 sticks to 0.
        bind(&mut s, &mut d, 0, 2);
        assert_eq!(s.schedule(&d, &to(2), t), Some(1));
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        // active 3 > weight 2, and server 1 has 0*2 < 2: overloaded → WLC.
        bind(&mut s, &mut d, 0, 3);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
        // The entry now points at 1.
        bind(&mut s, &mut d, 0, 0);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
    }

    #[test]
    fn over_weight_is_fine_when_nobody_is_half_idle() {
        let mut d = dests(&[2, 2]);
        let mut s = Lblc::new();
        s.update(&d, ListChange::Reset);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        bind(&mut s, &mut d, 0, 5);
        // Server 1: 1*2 < 2 is false, so no server is half idle.
        bind(&mut s, &mut d, 1, 1);
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        bind(&mut s, &mut d, 1, 0);
        assert_eq!(s.schedule(&d, &to(1), t), Some(1));
    }

    #[test]
    fn cached_server_quiesced_overloaded_or_removed_is_replaced() {
        let mut d = dests(&[1, 1, 1]);
        let mut s = Lblc::new();
        s.update(&d, ListChange::Reset);
        let t = Instant::ZERO;
        assert_eq!(s.schedule(&d, &to(1), t), Some(0));
        d[0].overloaded = true;
        s.counts_changed(&d, 0);
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
        let mut s = Lblc::with_expiration(Duration::from_secs(60));
        s.update(&d, ListChange::Reset);
        assert_eq!(s.schedule(&d, &to(1), Instant::ZERO), Some(0));
        bind(&mut s, &mut d, 0, 1);
        bind(&mut s, &mut d, 1, 1);
        // Still cached (ties would otherwise also give 0: make 0 worse).
        d[0].inactive = 1;
        s.counts_changed(&d, 0);
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(10)), Some(0));
        // The full check at 30 min deletes the entry; WLC picks 1.
        assert_eq!(s.schedule(&d, &to(1), Instant::from_secs(1800)), Some(1));
    }
}
