//! `sed`: shortest expected delay (ip_vs_sed.c).
//!
//! Like wlc but the cost is (active + 1) / weight: the delay a new connection
//! would see if every active connection were served in turn. Inactive
//! connections are ignored. The kernel's loop replaces its pick when
//! `(a_least + 1) × w(d) > (a_d + 1) × w(least)`, so ties go to the earliest
//! server; an [`ArgminTree`] reproduces it in O(1) per decision.

use super::argmin::{TreeScheduler, named_order};
use crate::dest::Dest;

named_order! {
    /// sed's order: smaller (active + 1) / weight is strictly better.
    SedOrder for Sed,
    better(right, left) { sed_better(right, left) }
}

/// `(a(left) + 1) × w(right) > (a(right) + 1) × w(left)`, exactly.
#[inline]
pub(crate) fn sed_better(right: &Dest, left: &Dest) -> bool {
    let cost = |d: &Dest| u128::from(d.active) + 1;
    cost(left) * u128::from(right.weight()) > cost(right) * u128::from(left.weight())
}

/// Shortest-expected-delay scheduling: the kernel's loop under [`SedOrder`], kept as a
/// tournament tree.
pub(crate) type ShortestExpectedDelay = TreeScheduler<SedOrder>;

#[cfg(test)]
mod tests {
    use super::super::Algorithm;
    use super::super::testutil::{counts, dests, reset, run};
    use super::*;

    #[test]
    fn active_plus_one_over_weight_inactive_ignored() {
        let mut d = dests(&[1, 3]);
        let mut s = reset(ShortestExpectedDelay::new(), &d);
        // (0+1)/1 = 1 vs (0+1)/3: the heavier server wins even when idle.
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        // (0+1)/1 = 1 vs (2+1)/3 = 1: tie, earliest.
        d[1].active = 2;
        d[0].inactive = 1000;
        s.counts_changed(&d, 1);
        s.counts_changed(&d, 0);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
        counts(&mut s, &mut d, 0, |x| x.active = 1);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
    }
}
