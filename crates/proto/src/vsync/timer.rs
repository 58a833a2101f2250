//! The member's timers: one deadline per kind, set where the event that arms it happens;
//! [`super::Vs::poll_timeout`] is the earliest.

use crate::timer::Deadlines;

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

impl From<Timer> for usize {
    fn from(t: Timer) -> usize {
        t as usize
    }
}

/// One deadline per [`Timer`].
pub(super) type Timers = Deadlines<Timer, { Timer::COUNT }>;
