//! Protocol time: a value passed in, never read from the OS inside `proto`.

use core::ops::{Add, Sub};
use core::time::Duration;

/// Nanoseconds since an arbitrary origin chosen by the caller (the engine's start, or the
/// simulator's virtual clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);
    pub fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, other: Instant) -> Duration {
        self.saturating_since(other)
    }
}
