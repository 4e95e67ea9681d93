//! `fo`: weighted failover (ip_vs_fo.c).
//!
//! Every new connection goes to the eligible server with the highest weight;
//! the kernel's strict `>` sends ties to the earliest server in list order.
//! Connection counts are not looked at, but the OVERLOAD flag is, so the
//! choice is kept in an [`ArgminTree`] that [`Algorithm::counts_changed`]
//! refreshes in O(log N).

use super::argmin::{TreeScheduler, named_order};

named_order! {
    /// fo's order: a higher weight is strictly better.
    FoOrder for Fo,
    better(right, left) { right.weight() > left.weight() }
}

/// Weighted-failover scheduling: the kernel's loop under [`FoOrder`], kept as a
/// tournament tree.
pub(crate) type WeightedFailover = TreeScheduler<FoOrder>;

#[cfg(test)]
mod tests {
    use super::super::testutil::{counts, dests, reset, run};
    use super::super::{Algorithm, ListChange};
    use super::*;

    #[test]
    fn highest_weight_ties_earliest_fails_over_on_overload() {
        let mut d = dests(&[2, 5, 5, 3]);
        d[1].active = 1000;
        let mut s = reset(WeightedFailover::new(), &d);
        assert_eq!(run(&mut s, &d, 3), vec![Some(1), Some(1), Some(1)]);
        counts(&mut s, &mut d, 1, |x| x.overloaded = true);
        assert_eq!(run(&mut s, &d, 1), vec![Some(2)]);
        d[2].config.weight = 0;
        s.update(&d, ListChange::Edited(2));
        assert_eq!(run(&mut s, &d, 1), vec![Some(3)]);
    }
}
