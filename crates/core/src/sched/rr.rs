//! `rr`: round robin (ip_vs_rr.c).
//!
//! A cursor remembers the last chosen server; the next decision walks forward
//! from it (wrapping) to the first eligible server. Weights only matter as
//! zero / non-zero.

use super::{Algorithm, ListChange, SchedInput};
use crate::dest::Dest;
use crate::time::Instant;

/// Round-robin state: the position of the last chosen server, `None` for the
/// list head (before the first server).
#[derive(Debug, Default)]
pub(crate) struct RoundRobin {
    cursor: Option<usize>,
}

impl RoundRobin {
    pub(crate) fn new() -> Self {
        RoundRobin::default()
    }
}

impl Algorithm for RoundRobin {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Rr
    }

    fn update(&mut self, dests: &[Dest], change: ListChange) {
        self.cursor = match (change, self.cursor) {
            (_, None) => None,
            // A new server at the head pushes the cursor's server down one.
            (ListChange::Added(p), Some(c)) if p <= c => Some(c + 1),
            // Deleting the cursor's server moves the cursor to the previous
            // node (the head when it was the first), as ip_vs_rr_del_dest does.
            (ListChange::Removed(p), Some(c)) if p == c => c.checked_sub(1),
            (ListChange::Removed(p), Some(c)) if p < c => Some(c - 1),
            (ListChange::Reset, Some(_)) => None,
            (_, c) => c,
        };
        if self.cursor.is_some_and(|c| c >= dests.len()) {
            self.cursor = None;
        }
    }

    fn schedule(&mut self, dests: &[Dest], _input: &SchedInput, _now: Instant) -> Option<usize> {
        let n = dests.len();
        if n == 0 {
            return None;
        }
        let start = self.cursor.map_or(0, |c| c + 1);
        for k in 0..n {
            let pos = (start + k) % n;
            if dests[pos].is_eligible() {
                self.cursor = Some(pos);
                return Some(pos);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{dests, reset, run};
    use super::*;

    #[test]
    fn cycles_in_list_order_and_skips_weight_zero() {
        let d = dests(&[1, 0, 5]);
        let mut s = reset(RoundRobin::new(), &d);
        let got = run(&mut s, &d, 4);
        assert_eq!(got, vec![Some(0), Some(2), Some(0), Some(2)]);
    }

    #[test]
    fn deleting_cursor_moves_it_back() {
        let mut d = dests(&[1, 1, 1]);
        let mut s = reset(RoundRobin::new(), &d);
        assert_eq!(run(&mut s, &d, 2), vec![Some(0), Some(1)]);
        // cursor at 1; delete it: cursor becomes 0, so next is old #2 (now 1).
        d.remove(1);
        s.update(&d, ListChange::Removed(1));
        assert_eq!(run(&mut s, &d, 1), vec![Some(1)]);
    }

    #[test]
    fn all_overloaded_gives_none() {
        let mut d = dests(&[1, 1]);
        for x in &mut d {
            x.overloaded = true;
        }
        let mut s = RoundRobin::new();
        assert_eq!(run(&mut s, &d, 1), vec![None]);
    }
}
