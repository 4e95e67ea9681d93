//! When checks are due: a fixed grid per checker with a deterministic phase.
//!
//! keepalived starts every checker's next run `delay_loop` after the
//! previous one ended, with no spreading beyond `warmup`, so checkers that
//! start together stay bunched and drift by their own duration. rvs
//! instead puts each checker on its own grid `anchor + k × interval`, where
//! the anchor is offset by [`phase`]: a hash of a stable key (e.g. the
//! checker's index or address) spread over the interval. Thousands of
//! checkers with the same `delay_loop` are thus spread evenly over it, the
//! same checker keeps the same slot across restarts (same key and seed),
//! and a slow check never shifts later ones.
//!
//! Sans-IO: time is always an argument. A runner sleeps until
//! [`Schedule::due`], runs the probe, then calls [`Schedule::advance`] with
//! the current time (or [`Schedule::defer`] for an off-grid retry, e.g.
//! after `delay_before_retry`).

use std::time::{Duration, Instant};

/// splitmix64: a small, well-mixing 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic offset in `[0, interval)` for `key` (with `seed`, so
/// different daemons can choose different spreads). Uniformly distributed
/// over the interval for distinct keys; zero for a zero interval.
pub fn phase(key: u64, seed: u64, interval: Duration) -> Duration {
    let nanos = interval.as_nanos();
    if nanos == 0 {
        return Duration::ZERO;
    }
    let h = u128::from(mix(key ^ mix(seed)));
    // Multiply-shift maps the 64-bit hash onto [0, nanos) without modulo bias
    // worth speaking of.
    let off = (h * nanos) >> 64;
    Duration::from_nanos(u64::try_from(off).unwrap_or(u64::MAX))
}

/// One checker's due times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    anchor: Instant,
    interval: Duration,
    due: Instant,
}

impl Schedule {
    /// A grid starting at `start + phase` (the first due time), then every
    /// `interval`. A zero interval is treated as 1 ms.
    pub fn new(start: Instant, interval: Duration, phase: Duration) -> Self {
        let anchor = start + phase;
        Self {
            anchor,
            interval: interval.max(Duration::from_millis(1)),
            due: anchor,
        }
    }

    /// When the next check should start.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// The grid interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// How late a check starting at `now` is against [`Self::due`].
    pub fn lateness(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.due)
    }

    /// Moves to the first grid slot after both the current due time and
    /// `now` (slots missed while a check ran long are skipped, not run in a
    /// burst) and returns it.
    pub fn advance(&mut self, now: Instant) -> Instant {
        let from = now.max(self.due);
        let since = from.saturating_duration_since(self.anchor).as_nanos();
        let step = self.interval.as_nanos();
        let k = since / step + 1;
        let offset = step.saturating_mul(k);
        let offset = Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX));
        self.due = self.anchor + offset;
        self.due
    }

    /// Sets an off-grid due time (a retry after `delay_before_retry`, a
    /// warmup delay); the grid is kept, so the next [`Self::advance`]
    /// returns to it.
    pub fn defer(&mut self, at: Instant) {
        self.due = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_spread_over_interval() {
        let iv = Duration::from_secs(1);
        let mut buckets = [0u32; 10];
        for key in 0..10_000u64 {
            let p = phase(key, 7, iv);
            assert!(p < iv);
            buckets[usize::try_from(p.as_millis() / 100).unwrap()] += 1;
        }
        // Each tenth of the interval gets about 1000 of 10000.
        for b in buckets {
            assert!((850..1150).contains(&b), "{buckets:?}");
        }
        assert_eq!(phase(42, 7, iv), phase(42, 7, iv));
        assert_ne!(phase(42, 7, iv), phase(42, 8, iv));
        assert_eq!(phase(1, 1, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn grid_advance_defer() {
        let t0 = Instant::now();
        let s_ = Duration::from_millis;
        let mut s = Schedule::new(t0, s_(1000), s_(250));
        assert_eq!(s.due(), t0 + s_(250));
        assert_eq!(s.lateness(t0 + s_(300)), s_(50));
        assert_eq!(s.lateness(t0), Duration::ZERO);
        // On time, or a bit late: next grid slot.
        assert_eq!(s.advance(t0 + s_(300)), t0 + s_(1250));
        // Check ran 2.5 intervals long: missed slots are skipped.
        assert_eq!(s.advance(t0 + s_(3700)), t0 + s_(4250));
        // A retry off the grid, then back onto it.
        s.defer(t0 + s_(4600));
        assert_eq!(s.due(), t0 + s_(4600));
        assert_eq!(s.advance(t0 + s_(4610)), t0 + s_(5250));
        // Advancing before the due time still moves one slot.
        assert_eq!(s.advance(t0 + s_(5000)), t0 + s_(6250));
    }
}
