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
    use super::super::testutil::{counts, dests, reset, run};

    use super::*;

    #[test]
    fn least_overhead_wins_ties_earliest_weight_ignored() {
        let mut d = dests(&[1, 5, 1, 0]);
        let mut s = reset(LeastConn::new(), &d);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
        // 1 active = 256 > 255 inactive.
        counts(&mut s, &mut d, 0, |x| x.active = 1);
        counts(&mut s, &mut d, 1, |x| x.inactive = 255);
        counts(&mut s, &mut d, 2, |x| x.inactive = 255);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        counts(&mut s, &mut d, 1, |x| x.inactive = 256);
        assert_eq!(run(&mut s, &d, 1), vec![Some(2)]);
        // The weight-0 server with no connections is never picked.
        counts(&mut s, &mut d, 2, |x| x.overloaded = true);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
    }
}
