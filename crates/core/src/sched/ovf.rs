//! `ovf`: weighted overflow (ip_vs_ovf.c).
//!
//! A server takes new connections while its *active* connections do not
//! exceed its weight (`active <= weight`); among those the highest weight
//! wins, ties to the earliest server. Only active connections count, which is
//! why the kernel's documentation warns it "might not be suitable for UDP".
//! Eligibility depends on the counters, so the choice lives in an
//! [`ArgminTree`] refreshed by [`Algorithm::counts_changed`].

use super::argmin::{TreeScheduler, named_order};

named_order! {
    /// ovf's order: only servers with `active <= weight`; higher weight is
    /// strictly better.
    OvfOrder for Ovf,
    eligible(d) { d.is_eligible() && d.active <= d.weight() }
    better(right, left) { right.weight() > left.weight() }
}

/// Weighted-overflow scheduling: the kernel's loop under [`OvfOrder`], kept as a
/// tournament tree.
pub(crate) type WeightedOverflow = TreeScheduler<OvfOrder>;

#[cfg(test)]
mod tests {
    use super::super::Algorithm;
    use super::super::testutil::{counts, dests, reset, run};
    use super::*;

    #[test]
    fn overflows_when_active_exceeds_weight_ties_earliest() {
        let mut d = dests(&[1, 3, 3]);
        let mut s = reset(WeightedOverflow::new(), &d);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        // active == weight is still fine.
        counts(&mut s, &mut d, 1, |x| x.active = 3);
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
        counts(&mut s, &mut d, 1, |x| x.active = 4);
        assert_eq!(run(&mut s, &d, 1), vec![Some(2)]);
        d[2].active = 4;
        // Inactive connections do not count.
        d[0].inactive = 1000;
        s.counts_changed(&d, 2);
        s.counts_changed(&d, 0);
        assert_eq!(run(&mut s, &d, 1), vec![Some(0)]);
        counts(&mut s, &mut d, 0, |x| x.active = 2);
        assert_eq!(run(&mut s, &d, 1), vec![None]);
    }
}
