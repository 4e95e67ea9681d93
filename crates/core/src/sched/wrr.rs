//! `wrr`: weighted round robin (ip_vs_wrr.c).
//!
//! The kernel keeps a mark `{cl, cw, mw, di}`: a cursor, the current weight
//! threshold, the starting threshold and the step. A decision walks forward
//! from the cursor to the first server with weight ≥ cw; reaching the end of
//! the list lowers cw by di and starts again at the head. di is the gcd of
//! the positive weights and `mw = max weight − (di − 1)`, so the last pass
//! runs with cw = 1 and still reaches servers whose weight fell below di.
//! With weights 4, 3, 2 in list order a cycle is `A A B A B C A B C`.
//!
//! Every list change puts the cursor back at the head and recomputes di and
//! mw, keeping cw where it can (`cw > mw or cw == 0 → mw`, else with di > 1
//! `cw = (cw / di) × di + 1`). The termination bookkeeping (`last_pass`,
//! `restarted`, `stop`) follows the kernel so that an all-overloaded list
//! fails after every server was tried once with cw ≤ di.

use super::{Algorithm, ListChange, SchedInput};
use crate::dest::Dest;
use crate::time::Instant;

/// Weighted round-robin mark.
#[derive(Debug, Default)]
pub(crate) struct WeightedRoundRobin {
    /// Position of the last chosen server; `None` is the list head.
    cl: Option<usize>,
    /// Current weight threshold.
    cw: i64,
    /// Threshold of the first pass: max weight − (di − 1).
    mw: i64,
    /// Step: gcd of the positive weights (1 when there are none).
    di: i64,
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl WeightedRoundRobin {
    pub(crate) fn new() -> Self {
        WeightedRoundRobin {
            cl: None,
            cw: 0,
            mw: 0,
            di: 1,
        }
    }

    /// Recompute di and mw from the list (ip_vs_wrr_gcd_weight /
    /// ip_vs_wrr_max_weight).
    fn recompute(&mut self, dests: &[Dest]) {
        let g = dests
            .iter()
            .map(Dest::weight)
            .filter(|&w| w > 0)
            .fold(0, gcd);
        self.di = i64::from(g.max(1));
        let max = dests.iter().map(Dest::weight).max().unwrap_or(0);
        self.mw = i64::from(max) - (self.di - 1);
    }

    #[inline]
    fn matches(&self, d: &Dest) -> bool {
        d.is_eligible() && i64::from(d.weight()) >= self.cw
    }
}

impl Algorithm for WeightedRoundRobin {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Wrr
    }

    fn update(&mut self, dests: &[Dest], _change: ListChange) {
        self.cl = None;
        self.recompute(dests);
        if self.cw > self.mw || self.cw == 0 {
            self.cw = self.mw;
        } else if self.di > 1 {
            self.cw = (self.cw / self.di) * self.di + 1;
        }
    }

    fn schedule(&mut self, dests: &[Dest], _input: &SchedInput, _now: Instant) -> Option<usize> {
        if self.mw <= 0 {
            return None;
        }
        if self.cl.is_some_and(|c| c >= dests.len()) {
            self.cl = None;
        }
        let last = self.cl;
        let mut stop: Option<usize> = None;
        let mut last_pass = false;
        let mut restarted = false;
        let mut pos = self.cl.map_or(0, |c| c + 1);
        loop {
            while pos < dests.len() {
                if self.matches(&dests[pos]) {
                    self.cl = Some(pos);
                    return Some(pos);
                }
                if stop == Some(pos) {
                    // All destinations are overloaded.
                    self.cl = Some(pos);
                    return None;
                }
                pos += 1;
            }
            // Back at the head: next pass with a lower threshold.
            self.cw -= self.di;
            if self.cw <= 0 {
                self.cw = self.mw;
                // Either the previous pass already was a cw ≤ di pass over
                // every server, or this walk started at the head and so just
                // checked all of them with cw = 1.
                if last_pass || last.is_none() {
                    self.cl = None;
                    return None;
                }
                restarted = true;
            }
            last_pass = self.cw <= self.di;
            if last_pass && restarted && last.is_some() {
                // The first cw ≤ di pass only covered the servers after
                // `last`; cover those up to it now.
                stop = last;
            }
            pos = 0;
        }
    }
}

/// One cycle of a fresh scheduler: passes with `cw = mw, mw - di, ..` while
/// `cw > 0`, each taking in list order every server with weight ≥ cw.
/// Overload is a runtime condition, so overloaded servers stay in the
/// sequence (a data plane skips them when it meets them).
pub(super) fn cycle(dests: &[Dest]) -> Vec<u32> {
    let mut s = WeightedRoundRobin::new();
    s.recompute(dests);
    let mut out = Vec::new();
    let mut cw = s.mw;
    while cw > 0 {
        for (pos, d) in dests.iter().enumerate() {
            if i64::from(d.weight()) >= cw
                && let Ok(p) = u32::try_from(pos)
            {
                out.push(p);
            }
        }
        cw -= s.di;
    }
    out
}

/// The kernel's wrr mark as seen by a data plane that steps through one
/// cycle ([`super::wrr_sequence`]) with a shared cursor (the XDP program)
/// instead of running the stateful walk: the cursor stands for the mark's
/// position, and this keeps the current weight threshold `cw` across list
/// changes.
///
/// Every position of the cycle is a kernel state: the decision at a
/// position of the pass with threshold `t` leaves the mark at that server
/// with `cw = t`. A list change (`ip_vs_wrr_dest_changed`) puts the mark's
/// cursor back at the head and keeps `cw` (rounded as [`Algorithm::update`]
/// does); from the head, the kernel's next decision is the first server of
/// the pass with that threshold, so the data plane's cursor goes to that
/// pass's first position of the new cycle. Without this the cursor would
/// start the new cycle at its first pass, while the kernel, whose real
/// servers were added one by one (the threshold stays 1 through the adds),
/// first gives each server one connection in list order.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WrrMark {
    /// The kernel's `cw` (0: none yet, as `ip_vs_wrr_init_svc` leaves it).
    cw: i64,
}

/// The passes of the cycle of `dests`: each one's threshold and length,
/// first pass first.
fn passes(dests: &[Dest]) -> Vec<(i64, usize)> {
    let mut s = WeightedRoundRobin::new();
    s.recompute(dests);
    let mut out = Vec::new();
    let mut cw = s.mw;
    while cw > 0 {
        let n = dests.iter().filter(|d| i64::from(d.weight()) >= cw).count();
        out.push((cw, n));
        cw -= s.di;
    }
    out
}

impl WrrMark {
    /// The mark of a new service (no threshold yet).
    pub const NEW: WrrMark = WrrMark { cw: 0 };

    /// The mark after the decision at position `pos` of the cycle of
    /// `dests` (taken modulo the cycle's length): the threshold of the pass
    /// it belongs to. [`WrrMark::NEW`] for an empty cycle.
    pub fn after(dests: &[Dest], pos: usize) -> WrrMark {
        let passes = passes(dests);
        let len: usize = passes.iter().map(|p| p.1).sum();
        if len == 0 {
            return WrrMark::NEW;
        }
        let mut pos = pos % len;
        for (cw, n) in passes {
            if pos < n {
                return WrrMark { cw };
            }
            pos -= n;
        }
        WrrMark::NEW
    }

    /// The list became `dests` (a server added, removed or edited): the
    /// kernel's new mark (`ip_vs_wrr_dest_changed`: `cw` kept, rounded to
    /// the new step, or reset to the first pass's threshold). Its next
    /// decision is at [`WrrMark::start`].
    pub fn changed(self, dests: &[Dest]) -> WrrMark {
        let mut s = WeightedRoundRobin::new();
        s.cw = self.cw;
        s.update(dests, ListChange::Reset);
        WrrMark { cw: s.cw }
    }

    /// Where the kernel's next decision from the list head is, as a
    /// position in the cycle of `dests` ([`super::wrr_sequence`]): the
    /// first of the first pass whose threshold is at most this mark's
    /// (position 0 when there is none, or the cycle is empty).
    pub fn start(self, dests: &[Dest]) -> usize {
        let passes = passes(dests);
        let len: usize = passes.iter().map(|p| p.1).sum();
        let start = passes
            .into_iter()
            .take_while(|&(t, _)| t > self.cw)
            .map(|(_, n)| n)
            .sum::<usize>();
        if start >= len { 0 } else { start }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{dests, reset, run};
    use super::*;

    #[test]
    fn cycle_equals_the_stateful_walk() {
        for w in [
            &[4u32, 3, 2][..],
            &[8, 6, 4],
            &[3, 0, 9],
            &[1],
            &[5, 5, 1, 0, 7],
        ] {
            let d = dests(w);
            let c = cycle(&d);
            let mut s = reset(WeightedRoundRobin::new(), &d);
            let walk = run(&mut s, &d, c.len() * 3);
            let want: Vec<Option<usize>> = c
                .iter()
                .cycle()
                .take(c.len() * 3)
                .map(|&p| Some(p as usize))
                .collect();
            assert_eq!(walk, want, "weights {w:?}");
        }
        assert!(cycle(&dests(&[0, 0])).is_empty());
    }

    fn names(v: &[Option<usize>]) -> String {
        v.iter()
            .map(|p| p.map_or('-', |i| (b'A' + i as u8) as char))
            .collect()
    }

    #[test]
    fn weights_4_3_2_give_aababcabc() {
        let d = dests(&[4, 3, 2]);
        let mut s = reset(WeightedRoundRobin::new(), &d);
        assert_eq!(names(&run(&mut s, &d, 18)), "AABABCABCAABABCABC");
    }

    #[test]
    fn gcd_weights_step_by_gcd() {
        // gcd 2: di = 2, mw = 8 - 1 = 7, passes cw = 7, 5, 3, 1.
        let d = dests(&[8, 6, 4]);
        let mut s = reset(WeightedRoundRobin::new(), &d);
        assert_eq!(names(&run(&mut s, &d, 18)), "AABABCABCAABABCABC");
        // gcd 3 with a weight-0 server in the middle.
        let d = dests(&[3, 0, 9]);
        let mut s = reset(WeightedRoundRobin::new(), &d);
        assert_eq!(names(&run(&mut s, &d, 8)), "CCACCCAC");
    }

    #[test]
    fn update_keeps_threshold_rounded_to_the_new_step() {
        let mut d = dests(&[4, 3, 2]);
        let mut s = reset(WeightedRoundRobin::new(), &d);
        assert_eq!(names(&run(&mut s, &d, 4)), "AABA");
        assert_eq!(s.cw, 2);
        // New weights 6, 4, 2: di = 2, mw = 5, cw = (2/2)*2 + 1 = 3.
        d[0].config.weight = 6;
        d[1].config.weight = 4;
        s.update(&d, ListChange::Edited(0));
        assert_eq!((s.di, s.mw, s.cw), (2, 5, 3));
        // Cursor back at the head; pass cw = 3 gives A B, then cw = 1: A B C.
        assert_eq!(names(&run(&mut s, &d, 5)), "ABABC");
        // cw above the new max resets to mw.
        d[0].config.weight = 1;
        d[1].config.weight = 1;
        d[2].config.weight = 1;
        s.cw = 5;
        s.update(&d, ListChange::Edited(0));
        assert_eq!((s.di, s.mw, s.cw), (1, 1, 1));
    }

    #[test]
    fn overloaded_and_all_zero() {
        let mut d = dests(&[2, 1]);
        d[0].overloaded = true;
        let mut s = reset(WeightedRoundRobin::new(), &d);
        assert_eq!(names(&run(&mut s, &d, 3)), "BBB");
        d[1].overloaded = true;
        assert_eq!(names(&run(&mut s, &d, 2)), "--");
        d[0].overloaded = false;
        assert_eq!(names(&run(&mut s, &d, 2)), "AA");
        let d = dests(&[0, 0]);
        s.update(&d, ListChange::Reset);
        assert_eq!(run(&mut s, &d, 1), vec![None]);
    }

    /// A data plane that steps through the cycle with a cursor: `n`
    /// decisions from `*cursor`, the mark following the last one.
    fn plane(d: &[Dest], mark: &mut WrrMark, cursor: &mut usize, n: usize) -> Vec<Option<usize>> {
        let c = cycle(d);
        let out = (0..n)
            .map(|i| Some(c[(*cursor + i) % c.len()] as usize))
            .collect();
        *cursor += n;
        if n > 0 {
            *mark = WrrMark::after(d, *cursor - 1);
        }
        out
    }

    /// A data plane stepping through the cycle with a cursor, its start
    /// placed by [`WrrMark`] at every list change, makes the stateful
    /// walk's decisions: servers added one by one (the kernel's `ipvsadm
    /// -a` sequence), decisions between changes, a weight edited, a server
    /// removed, every weight doubled (another gcd), an edit that changes
    /// nothing (the kernel's mark restarts all the same).
    #[test]
    fn a_cursor_over_the_cycle_follows_the_kernel_through_changes() {
        // The list grows at the head: weights 1, 2, 3, 4, 5 added in turn.
        let all = [1u32, 2, 3, 4, 5];
        let mut s = WeightedRoundRobin::new();
        let (mut mark, mut cursor) = (WrrMark::NEW, 0usize);
        let mut d: Vec<Dest> = Vec::new();
        for i in 0..all.len() {
            let w: Vec<u32> = all[..=i].iter().rev().copied().collect();
            d = dests(&w);
            s.update(&d, ListChange::Added(0));
            mark = mark.changed(&d);
            cursor = mark.start(&d);
        }
        // The kernel's first decisions: each server once, in list order
        // (not the cycle's first pass, E alone).
        let first = run(&mut s, &d, 5);
        assert_eq!(names(&first), "ABCDE");
        assert_eq!(plane(&d, &mut mark, &mut cursor, 5), first);
        for (n, change) in [(7usize, 0), (3, 1), (11, 2), (4, 3), (6, 5), (16, 4)] {
            let want = run(&mut s, &d, n);
            assert_eq!(
                plane(&d, &mut mark, &mut cursor, n),
                want,
                "{n} before change {change}"
            );
            match change {
                0 => {
                    d[1].config.weight = 8;
                    s.update(&d, ListChange::Edited(1));
                }
                1 => {
                    d.remove(3);
                    s.update(&d, ListChange::Removed(3));
                }
                2 => {
                    for x in &mut d {
                        x.config.weight *= 2;
                    }
                    s.update(&d, ListChange::Edited(0));
                }
                3 => {
                    d[0].config.weight = 1;
                    s.update(&d, ListChange::Edited(0));
                }
                // `ipvsadm -e` that changes nothing: still upd_dest.
                5 => s.update(&d, ListChange::Edited(2)),
                _ => continue,
            }
            mark = mark.changed(&d);
            cursor = mark.start(&d);
        }
    }

    #[test]
    fn a_fresh_cycle_starts_where_a_fresh_kernel_mark_does() {
        // A service whose whole list arrives at once (cw 0 → mw): the
        // cycle from its first pass.
        let d = dests(&[4, 3, 2]);
        assert_eq!(WrrMark::NEW.changed(&d).start(&d), 0);
        // Threshold 1 kept: the last pass (every server once).
        let m = WrrMark::after(&d, 8).changed(&d);
        assert_eq!((m, m.start(&d)), (WrrMark { cw: 1 }, 6));
        let none = dests(&[0, 0]);
        assert_eq!(WrrMark::NEW.changed(&none), WrrMark::NEW);
        assert_eq!(WrrMark::NEW.start(&none), 0);
        assert_eq!(WrrMark::after(&dests(&[]), 3), WrrMark::NEW);
    }
}
