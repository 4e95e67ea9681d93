//! `nq`: never queue (ip_vs_nq.c).
//!
//! The kernel walks the list and returns the *first* eligible server with no
//! active connection at once, whatever its weight; when every eligible server
//! is busy it picks by the SED rule, (active + 1) / weight, ties to the
//! earliest.
//!
//! That loop is the argmin of a total preorder: every idle server ranks
//! equal and above every busy one, busy ones rank by their SED cost. The
//! earliest best element is then the first idle server if there is one, else
//! the earliest SED minimum — exactly the loop's answer — so an
//! [`ArgminTree`] with this order gives it in O(1).

use super::argmin::{TreeScheduler, named_order};
use super::sed::sed_better;

named_order! {
    /// nq's order: idle beats busy; among busy, SED.
    NqOrder for Nq,
    better(right, left) {
        match (left.active == 0, right.active == 0) {
            // Among idle servers the earliest wins: never strictly better.
            (true, _) => false,
            (false, true) => true,
            (false, false) => sed_better(right, left),
        }
    }
}

/// Never-queue scheduling: the kernel's loop under [`NqOrder`], kept as a
/// tournament tree.
pub(crate) type NeverQueue = TreeScheduler<NqOrder>;

#[cfg(test)]
mod tests {
    use super::super::Algorithm;
    use super::super::testutil::{counts, dests, reset, run};
    use super::*;

    #[test]
    fn first_idle_wins_regardless_of_weight() {
        let mut d = dests(&[100, 1, 50]);
        d[0].active = 1;
        // Inactive connections do not make a server busy.
        d[1].inactive = 500;
        let mut s = reset(NeverQueue::new(), &d);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        counts(&mut s, &mut d, 1, |x| x.active = 1);
        assert_eq!(run(&mut s, &d, 1), vec![Some(2)]);
        // Everyone busy: SED. (1+1)/100 < (1+1)/1, (3+1)/50.
        counts(&mut s, &mut d, 2, |x| x.active = 3);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
        // (3+1)/100 = 0.04 vs (1+1)/50 = 0.04: tie, earliest.
        d[0].active = 3;
        d[2].active = 1;
        s.counts_changed(&d, 0);
        s.counts_changed(&d, 2);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
    }

    #[test]
    fn idle_but_overloaded_or_quiesced_is_skipped() {
        let mut d = dests(&[0, 1, 1, 1]);
        d[1].overloaded = true;
        d[2].active = 5;
        let mut s = reset(NeverQueue::new(), &d);
        assert_eq!(run(&mut s, &d, 1), vec![Some(3)]);
    }
}
