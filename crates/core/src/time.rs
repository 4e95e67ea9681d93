//! Time as an argument.
//!
//! The core never reads a clock: every operation that depends on time takes a
//! [`Instant`] chosen by the driver (a data plane, the daemon, or a test with a
//! virtual clock). An `Instant` is a count of milliseconds since an arbitrary
//! epoch picked by that driver; only differences between instants matter.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, in milliseconds since a driver-chosen epoch.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    /// An instant `s` seconds after the epoch.
    pub const fn from_secs(s: u64) -> Self {
        Instant(s.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// `d` in whole milliseconds, saturating (the clock's resolution; a
/// duration beyond u64 milliseconds is as good as forever).
fn whole_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(whole_millis(d)))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(whole_millis(d)))
    }
}
