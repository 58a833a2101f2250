//! The failure detector: a peer silent for `silence_timeout` is probed every
//! `probe_interval`, and declared dead after `probes_max` unanswered probes.

use super::timer::Timer;
use super::{GroupConfig, Member};
use crate::time::Instant;

/// The failure detector's judgement of one watched peer.
pub(super) enum Verdict {
    Fine,
    Probe,
    Dead,
}

/// Failure detector state for one watched peer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Watch {
    pub(super) last_heard: Instant,
    pub(super) probes: u32,
    pub(super) next_probe_at: Instant,
}

impl Watch {
    pub(super) fn new(now: Instant) -> Watch {
        Watch {
            last_heard: now,
            probes: 0,
            next_probe_at: now,
        }
    }

    pub(super) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.probes = 0;
    }
}

impl GroupConfig {
    /// The failure detector's judgement of one watched peer, and its probe bookkeeping.
    pub(super) fn detect(&self, w: &mut Watch, now: Instant) -> Verdict {
        if now.saturating_since(w.last_heard) < self.silence_timeout || now < w.next_probe_at {
            return Verdict::Fine;
        }
        if w.probes >= self.probes_max {
            return Verdict::Dead;
        }
        w.probes += 1;
        w.next_probe_at = now + self.probe_interval;
        Verdict::Probe
    }

    pub(super) fn next_check(&self, w: &Watch) -> Instant {
        (w.last_heard + self.silence_timeout).max(w.next_probe_at)
    }
}

impl Member {
    /// Arms the check of the sequencer's silence.
    pub(super) fn arm_watch(&mut self) {
        self.timers
            .set(Timer::Watch, self.cfg.next_check(&self.watch));
    }
}
