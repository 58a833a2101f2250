//! The member's timers: one deadline per kind, set where the event that arms it happens;
//! [`super::Vs::poll_timeout`] is the earliest.

use crate::time::Instant;

/// What a deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Joining: ask the contact again (or give up).
    Join,
    /// Say something to the group (a heartbeat if nothing else).
    Heartbeat,
    /// The packer's hold on the oldest own cast not yet sent ends.
    Pack,
    /// The earliest NAK due, over the streams with a gap.
    Nak,
    /// The earliest member not suspected to fall silent for `silence_timeout`.
    Silence,
    /// Pinwheel: pass the held token on, or (rank 0, no token) make a new one.
    Token,
    /// Leaving: ask the coordinator again.
    Leave,
    /// Report the view change as blocked.
    Blocked,
    /// The flush's next retry, end of its first phase's wait, or suspicion of a quiet
    /// coordinator.
    Flush,
}

impl Timer {
    const COUNT: usize = 9;

    pub(super) const ALL: [Timer; Timer::COUNT] = [
        Timer::Join,
        Timer::Heartbeat,
        Timer::Pack,
        Timer::Nak,
        Timer::Silence,
        Timer::Token,
        Timer::Leave,
        Timer::Blocked,
        Timer::Flush,
    ];
}

/// One deadline per [`Timer`], or none when it is not armed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Timers {
    at: [Option<Instant>; Timer::COUNT],
}

impl Timers {
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.at[t as usize] = Some(at);
    }

    pub fn stop(&mut self, t: Timer) {
        self.at[t as usize] = None;
    }

    /// Arms `t` at `at`, or stops it when `at` is `None`.
    pub fn put(&mut self, t: Timer, at: Option<Instant>) {
        self.at[t as usize] = at;
    }

    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.at[t as usize]
    }

    /// Whether `t` is armed and due at `now`.
    pub fn expired(&self, t: Timer, now: Instant) -> bool {
        self.get(t).is_some_and(|at| now >= at)
    }

    pub fn clear(&mut self) {
        self.at = [None; Timer::COUNT];
    }

    /// The earliest deadline armed.
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().copied().min()
    }
}
