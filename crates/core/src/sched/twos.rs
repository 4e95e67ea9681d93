//! `twos`: power of two choices (ip_vs_twos.c, Linux 6.x).
//!
//! Two servers are drawn at random with probability proportional to their
//! weight, and the one with the smaller overhead / weight wins (the first
//! draw on ties). The kernel draws `r = rand32 % (total + 1)` where total is
//! the sum of the eligible weights, then walks the list subtracting weights
//! and takes the first eligible server at which `r` drops to ≤ 0 — that is,
//! the first eligible position whose prefix sum of eligible weights reaches
//! `r` (for `r = 0`, the first eligible server).
//!
//! Here the prefix sums live in a Fenwick tree over the eligible weights
//! (0 for an ineligible server), so a draw is an O(log N) descent instead of
//! an O(N) walk; [`Algorithm::counts_changed`] refreshes a server's entry
//! when its overload flag changes. The core reads no entropy: the random
//! numbers come from a SplitMix64 generator seeded by the driver.

use super::{Algorithm, ListChange, SchedInput};
use crate::dest::Dest;
use crate::time::Instant;

/// SplitMix64: small, fast, and good enough to pick servers.
#[derive(Debug, Clone)]
pub(super) struct SplitMix64(pub(super) u64);

impl SplitMix64 {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The kernel's `prandom_u32()` / `get_random_u32()`.
    pub(super) fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

/// Fenwick (binary indexed) tree of the eligible weights in list order.
#[derive(Debug, Default)]
struct Fenwick {
    /// The value at each position (eligible weight or 0).
    vals: Vec<u64>,
    /// 1-based Fenwick array; `tree[0]` is unused.
    tree: Vec<u64>,
    /// Sum of all values.
    total: u64,
}

impl Fenwick {
    fn value(d: &Dest) -> u64 {
        if d.is_eligible() {
            u64::from(d.weight())
        } else {
            0
        }
    }

    fn rebuild(&mut self, dests: &[Dest]) {
        let n = dests.len();
        self.vals.clear();
        self.vals.extend(dests.iter().map(Fenwick::value));
        self.tree.clear();
        self.tree.resize(n + 1, 0);
        self.total = 0;
        for i in 1..=n {
            self.total += self.vals[i - 1];
            self.tree[i] += self.vals[i - 1];
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                self.tree[parent] += self.tree[i];
            }
        }
    }

    fn set(&mut self, dests: &[Dest], pos: usize) {
        if dests.len() != self.vals.len() || pos >= dests.len() {
            self.rebuild(dests);
            return;
        }
        let new = Fenwick::value(&dests[pos]);
        let old = self.vals[pos];
        if new == old {
            return;
        }
        self.vals[pos] = new;
        self.total = self.total - old + new;
        let mut i = pos + 1;
        while i < self.tree.len() {
            // Each node covers a range containing `pos`, so it holds at least
            // `old` and the arithmetic cannot wrap.
            self.tree[i] = self.tree[i] - old + new;
            i += i & i.wrapping_neg();
        }
    }

    /// Smallest position whose prefix sum is ≥ `target` (1 ≤ target ≤ total).
    fn lower_bound(&self, target: u64) -> usize {
        let n = self.tree.len() - 1;
        let mut pos = 0;
        let mut rem = target;
        let mut step = if n == 0 { 0 } else { 1 << n.ilog2() };
        while step > 0 {
            let next = pos + step;
            if next <= n && self.tree[next] < rem {
                pos = next;
                rem -= self.tree[next];
            }
            step >>= 1;
        }
        // 1-based answer is pos + 1, i.e. 0-based position `pos`.
        pos
    }
}

/// Power-of-two-choices state: the weight index and the generator.
#[derive(Debug)]
pub(crate) struct TwoChoices {
    weights: Fenwick,
    rng: SplitMix64,
}

impl TwoChoices {
    pub(crate) fn new(seed: u64) -> Self {
        TwoChoices {
            weights: Fenwick::default(),
            rng: SplitMix64(seed),
        }
    }

    /// The server the kernel's walk stops at for the draw `r`.
    fn pick(&self, r: u64) -> usize {
        self.weights.lower_bound(r.max(1))
    }
}

impl Algorithm for TwoChoices {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Twos
    }

    fn update(&mut self, dests: &[Dest], _change: ListChange) {
        self.weights.rebuild(dests);
    }

    fn counts_changed(&mut self, dests: &[Dest], pos: usize) {
        self.weights.set(dests, pos);
    }

    fn schedule(&mut self, dests: &[Dest], _input: &SchedInput, _now: Instant) -> Option<usize> {
        if dests.len() != self.weights.vals.len() {
            self.weights.rebuild(dests);
        }
        if self.weights.total == 0 {
            return None;
        }
        let total = self.weights.total.saturating_add(1);
        let r1 = u64::from(self.rng.next_u32()) % total;
        let r2 = u64::from(self.rng.next_u32()) % total;
        let c1 = self.pick(r1);
        let c2 = self.pick(r2);
        let (d1, d2) = (dests.get(c1)?, dests.get(c2)?);
        // Second choice wins only when strictly less loaded per weight.
        let second_better = u128::from(d2.weight()) * u128::from(d1.overhead())
            > u128::from(d1.weight()) * u128::from(d2.overhead());
        Some(if second_better { c2 } else { c1 })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{counts, dests, reset, run};
    use super::*;

    /// The kernel's walk, for comparison with the Fenwick descent.
    fn walk(d: &[Dest], r: u64) -> Option<usize> {
        let mut r = r as i128;
        for (i, x) in d.iter().enumerate() {
            if !x.is_eligible() {
                continue;
            }
            r -= i128::from(x.weight());
            if r <= 0 {
                return Some(i);
            }
        }
        None
    }

    #[test]
    fn descent_equals_the_kernel_walk_for_every_draw() {
        let mut d = dests(&[0, 3, 1, 0, 2, 5, 0]);
        d[4].overloaded = true;
        let mut s = reset(TwoChoices::new(1), &d);
        // total = 3 + 1 + 5 = 9; draws are 0..=9.
        assert_eq!(s.weights.total, 9);
        for r in 0..=9 {
            assert_eq!(Some(s.pick(r)), walk(&d, r), "r = {r}");
        }
        assert_eq!(s.pick(0), 1);
        assert_eq!(s.pick(4), 2);
        assert_eq!(s.pick(5), 5);
        counts(&mut s, &mut d, 4, |x| x.overloaded = false);
        for r in 0..=11 {
            assert_eq!(Some(s.pick(r)), walk(&d, r), "r = {r}");
        }
    }

    #[test]
    fn picks_less_loaded_of_two_and_never_ineligible() {
        let mut d = dests(&[1, 0, 1]);
        d[0].active = 10;
        let mut s = reset(TwoChoices::new(42), &d);
        let got = run(&mut s, &d, 200);
        assert!(got.iter().all(|p| matches!(p, Some(0) | Some(2))));
        // Server 2 is idle, so whenever it is drawn it wins: it must get the
        // most (P = 1 - (2/3)^2 = 5/9: the +1 in the draw favours server 0).
        let twos = got.iter().filter(|p| **p == Some(2)).count();
        assert!(twos > 85, "{twos}");
        d[2].overloaded = true;
        d[0].overloaded = true;
        s.counts_changed(&d, 2);
        s.counts_changed(&d, 0);
        assert_eq!(run(&mut s, &d, 1), vec![None]);
    }

    #[test]
    fn same_seed_same_sequence() {
        let d = dests(&[1, 2, 3, 4]);
        let mut a = TwoChoices::new(7);
        let mut b = TwoChoices::new(7);
        a.update(&d, ListChange::Reset);
        b.update(&d, ListChange::Reset);
        assert_eq!(run(&mut a, &d, 50), run(&mut b, &d, 50));
    }
}
