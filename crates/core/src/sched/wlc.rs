//! `wlc`: weighted least connection (ip_vs_wlc.c), ipvsadm's default.
//!
//! The server with the smallest overhead / weight wins. The kernel compares
//! `overhead(least) × w(d) > overhead(d) × w(least)` in 64 bits while walking
//! the list, so ties go to the earliest server; here the products are taken in
//! u128 so they cannot overflow whatever the counters are. Because the
//! cross-multiplied comparison is exact, it orders the rationals
//! overhead / weight totally, and an [`ArgminTree`] reproduces the loop in
//! O(1) per decision.

use super::argmin::{TreeScheduler, named_order};
use crate::dest::Dest;

named_order! {
    /// wlc's order: smaller overhead / weight is strictly better. Also the
    /// fallback of lblc and lblcr.
    WlcOrder for Wlc,
    better(right, left) { wlc_better(right, left) }
}

/// `overhead(left) × w(right) > overhead(right) × w(left)`, exactly.
#[inline]
pub(crate) fn wlc_better(right: &Dest, left: &Dest) -> bool {
    u128::from(left.overhead()) * u128::from(right.weight())
        > u128::from(right.overhead()) * u128::from(left.weight())
}

/// Weighted least-connection scheduling: the kernel's loop under [`WlcOrder`], kept as a
/// tournament tree.
pub(crate) type WeightedLeastConn = TreeScheduler<WlcOrder>;

#[cfg(test)]
mod tests {
    use super::super::Algorithm;
    use super::super::testutil::{counts, dests, reset, run};
    use super::*;

    #[test]
    fn ratio_wins_ties_earliest() {
        let mut d = dests(&[1, 3, 2]);
        let mut s = reset(WeightedLeastConn::new(), &d);
        // All zero: tie, earliest.
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
        // overheads 256/1, 600/3=200, 400/2=200: 1 and 2 tie, 1 is earlier.
        d[0].active = 1;
        d[1].inactive = 600;
        d[2].inactive = 400;
        for p in 0..3 {
            s.counts_changed(&d, p);
        }
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        counts(&mut s, &mut d, 1, |x| x.inactive = 601);
        assert_eq!(run(&mut s, &d, 1), vec![Some(2)]);
    }

    #[test]
    fn weight_zero_never_wins_even_when_idle() {
        let mut d = dests(&[0, 1]);
        d[1].active = 1000;
        let mut s = reset(WeightedLeastConn::new(), &d);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        counts(&mut s, &mut d, 1, |x| x.overloaded = true);
        assert_eq!(run(&mut s, &d, 1), vec![None]);
    }

    #[test]
    fn huge_counters_do_not_overflow() {
        let mut d = dests(&[u32::MAX, u32::MAX - 1]);
        d[0].active = u32::MAX;
        d[0].inactive = u32::MAX;
        d[1].active = u32::MAX - 1;
        let mut s = reset(WeightedLeastConn::new(), &d);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
    }
}
