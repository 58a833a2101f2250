//! The one idle strategy of every loop that waits for work: the engine thread between duty
//! cycles, a port's receive (its ring, or the engine it drives in invoker mode), a group's
//! waits, a port's flush. A loop that found no work asks its [`Backoff`] what to do next:
//! spin, then yield the processor, then park; the park itself is the loop's own (a futex, a
//! poll of the sockets, a read of one socket), since what wakes it differs.

use std::time::{Duration, Instant};

/// How a port's receive idles while nothing is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleStrategy {
    /// Busy-poll until a message arrives or the timeout passes.
    Spin,
    /// Busy-poll `spins` times, then park.
    SpinThenPark { spins: u32 },
    /// Park at once.
    Park,
}

/// How long a phase of backing off (spinning, yielding) lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Forever,
    /// This many idle passes in the phase.
    Passes(u32),
    /// Until this long after the loop last found work.
    Time(Duration),
}

impl Phase {
    /// Whether a loop idle for `passes` passes in this phase, and since `since`, stays in it.
    #[inline]
    fn lasts(self, passes: u32, since: &mut Option<Instant>) -> bool {
        match self {
            Phase::Forever => true,
            Phase::Passes(n) => passes <= n,
            Phase::Time(t) => since.get_or_insert_with(Instant::now).elapsed() < t,
        }
    }
}

/// What an idle loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idle {
    /// Busy-poll again (after a spin-loop hint).
    Spin,
    /// Give the processor up once, then poll again.
    Yield,
    /// Sleep until woken, the loop's deadline, or the next timer.
    Park,
    /// The deadline passed.
    Expired,
}

/// Idle passes between two readings of the clock while spinning (a reading costs more than a
/// pass that finds nothing).
const PASSES_PER_CLOCK_READ: u32 = 64;

/// The state of one idle loop: how far it has backed off since it last found work.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    spin: Phase,
    yields: Phase,
    passes: u32,
    yielded: u32,
    idle_since: Option<Instant>,
}

impl Backoff {
    pub fn new(spin: Phase, yields: Phase) -> Backoff {
        Backoff {
            spin,
            yields,
            passes: 0,
            yielded: 0,
            idle_since: None,
        }
    }

    /// A port's receive: spin as `strategy` says, never yield, then park.
    pub fn for_strategy(strategy: IdleStrategy) -> Backoff {
        let spin = match strategy {
            IdleStrategy::Spin => Phase::Forever,
            IdleStrategy::SpinThenPark { spins } => Phase::Passes(spins),
            IdleStrategy::Park => Phase::Passes(0),
        };
        Backoff::new(spin, Phase::Passes(0))
    }

    /// Parks at once, every time.
    pub fn park_at_once() -> Backoff {
        Backoff::new(Phase::Passes(0), Phase::Passes(0))
    }

    /// The loop found work: the next idle pass starts over with spinning.
    #[inline]
    pub fn reset(&mut self) {
        self.passes = 0;
        self.yielded = 0;
        self.idle_since = None;
    }

    /// A pass found no work: what to do next. `deadline` is looked at every few spinning
    /// passes and before every yield or park.
    #[inline]
    pub fn idle(&mut self, deadline: Option<Instant>) -> Idle {
        self.passes = self.passes.saturating_add(1);
        if self.yielded == 0 && self.spin.lasts(self.passes, &mut self.idle_since) {
            if deadline.is_some()
                && self.passes.is_multiple_of(PASSES_PER_CLOCK_READ)
                && deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Idle::Expired;
            }
            return Idle::Spin;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Idle::Expired;
        }
        if self
            .yields
            .lasts(self.yielded.saturating_add(1), &mut self.idle_since)
        {
            self.yielded = self.yielded.saturating_add(1);
            return Idle::Yield;
        }
        Idle::Park
    }

    /// Runs the spin or yield `idle` said (nothing for a park or an expiry).
    #[inline]
    pub fn pause(what: Idle) {
        match what {
            Idle::Spin => std::hint::spin_loop(),
            Idle::Yield => std::thread::yield_now(),
            Idle::Park | Idle::Expired => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_then_yields_then_parks_and_starts_over_after_work() {
        let mut b = Backoff::new(Phase::Passes(3), Phase::Passes(2));
        let seq: Vec<Idle> = (0..7).map(|_| b.idle(None)).collect();
        use Idle::*;
        assert_eq!(seq, [Spin, Spin, Spin, Yield, Yield, Park, Park]);
        b.reset();
        assert_eq!(b.idle(None), Spin);
    }

    #[test]
    fn a_strategy_maps_to_its_backoff() {
        let mut spin = Backoff::for_strategy(IdleStrategy::Spin);
        assert!((0..10_000).all(|_| spin.idle(None) == Idle::Spin));
        let mut park = Backoff::for_strategy(IdleStrategy::Park);
        assert_eq!(park.idle(None), Idle::Park);
        let mut some = Backoff::for_strategy(IdleStrategy::SpinThenPark { spins: 2 });
        assert_eq!(
            [some.idle(None), some.idle(None), some.idle(None)],
            [Idle::Spin, Idle::Spin, Idle::Park]
        );
    }

    #[test]
    fn a_passed_deadline_ends_spinning_and_parking() {
        let past = Some(Instant::now());
        let mut spin = Backoff::for_strategy(IdleStrategy::Spin);
        let first_expired = (1..=1000).find(|_| spin.idle(past) == Idle::Expired);
        assert_eq!(first_expired, Some(PASSES_PER_CLOCK_READ));
        let mut park = Backoff::park_at_once();
        assert_eq!(park.idle(past), Idle::Expired);
        let future = Some(Instant::now() + Duration::from_secs(60));
        assert_eq!(park.idle(future), Idle::Park);
    }

    #[test]
    fn a_timed_spin_parks_once_its_time_is_up() {
        let mut b = Backoff::new(Phase::Time(Duration::from_millis(1)), Phase::Passes(0));
        assert_eq!(b.idle(None), Idle::Spin);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(b.idle(None), Idle::Park);
        b.reset();
        assert_eq!(b.idle(None), Idle::Spin);
    }

    #[test]
    fn a_timed_yield_phase_parks_once_its_time_is_up() {
        let mut b = Backoff::new(Phase::Passes(0), Phase::Time(Duration::from_millis(1)));
        assert_eq!(b.idle(None), Idle::Yield);
        assert_eq!(b.idle(None), Idle::Yield);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(b.idle(None), Idle::Park);
    }
}
