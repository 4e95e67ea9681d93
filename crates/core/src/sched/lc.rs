//! `lc`: least connection (ip_vs_lc.c).
//!
//! The server with the smallest overhead (active × 256 + inactive) wins;
//! weights only matter as zero / non-zero. The kernel compares with a strict
//! `<` while walking the list, so ties go to the earliest server in list
//! order. Instead of walking all N servers per connection, the choice is kept
//! in an [`ArgminTree`] (O(1) per decision, O(log N) per counter change).

use super::argmin::{TreeScheduler, named_order};

named_order! {
    /// lc's order: smaller overhead is strictly better.
    LcOrder for Lc,
    better(right, left) { right.overhead() < left.overhead() }
}

/// Least-connection scheduling: the kernel's loop under [`LcOrder`], kept as a
/// tournament tree.
pub(crate) type LeastConn = TreeScheduler<LcOrder>;

#[cfg(test)]
mod tests {
    use super::super::testutil::{dests, run};
    use super::super::{Algorithm, ListChange};
    use super::*;

    #[test]
    fn least_overhead_wins_ties_earliest_weight_ignored() {
        let mut d = dests(&[1, 5, 1, 0]);
        let mut s = LeastConn::new();
        s.update(&d, ListChange::Reset);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
        // 1 active = 256 > 255 inactive.
        d[0].active = 1;
        s.counts_changed(&d, 0);
        d[1].inactive = 255;
        s.counts_changed(&d, 1);
        d[2].inactive = 255;
        s.counts_changed(&d, 2);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        d[1].inactive = 256;
        s.counts_changed(&d, 1);
        assert_eq!(run(&mut s, &d, 1), vec![Some(2)]);
        // The weight-0 server with no connections is never picked.
        d[2].overloaded = true;
        s.counts_changed(&d, 2);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
    }
}
