//! The failure detector: a peer silent for `silence_timeout` is probed every
//! `probe_interval`, and declared dead after `probes_max` unanswered probes. A peer whose
//! host reported its port unreachable since it was last heard is declared dead once silent
//! for `unreachable_silence`, without probes: the kernel has answered what they would ask.

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
    /// Its host said its port is unreachable, at this time, after it was last heard.
    pub(super) unreachable_at: Option<Instant>,
}

impl Watch {
    pub(super) fn new(now: Instant) -> Watch {
        Watch {
            last_heard: now,
            probes: 0,
            next_probe_at: now,
            unreachable_at: None,
        }
    }

    /// A message from the peer. It cancels a report of its port unreachable only once a
    /// whole `unreachable_silence` has passed since the report: what the peer sent before it
    /// died may be read after the report (a read takes the reports before the datagrams that
    /// wait), and must not cancel it.
    pub(super) fn heard(&mut self, now: Instant, unreachable_silence: std::time::Duration) {
        self.last_heard = now;
        self.probes = 0;
        if self
            .unreachable_at
            .is_some_and(|at| now >= at + unreachable_silence)
        {
            self.unreachable_at = None;
        }
    }

    /// Its host reported its port unreachable.
    pub(super) fn unreachable(&mut self, now: Instant) {
        self.unreachable_at.get_or_insert(now);
    }
}

impl GroupConfig {
    /// The failure detector's judgement of one watched peer, and its probe bookkeeping.
    pub(super) fn detect(&self, w: &mut Watch, now: Instant) -> Verdict {
        if w.unreachable_at.is_some() && now >= w.last_heard + self.unreachable_wait() {
            return Verdict::Dead;
        }
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
        let silent = (w.last_heard + self.silence_timeout).max(w.next_probe_at);
        match w.unreachable_at {
            Some(_) => silent.min(w.last_heard + self.unreachable_wait()),
            None => silent,
        }
    }

    fn unreachable_wait(&self) -> std::time::Duration {
        self.unreachable_silence.min(self.silence_timeout)
    }
}

impl Member {
    /// `who`'s host answered a datagram of ours with "port unreachable": if this member
    /// watches it (the sequencer, or as the sequencer a member), it is declared dead once
    /// silent for `unreachable_silence`.
    pub fn peer_unreachable(&mut self, now: Instant, who: crate::addr::Address) {
        if let Some(s) = self.seqr.as_mut() {
            if let Some(w) = s.watches.get_mut(&who) {
                w.unreachable(now);
                self.arm_watches();
            }
        } else if who == self.sequencer && who != self.me {
            self.watch.unreachable(now);
            self.arm_watch();
        }
    }

    /// Arms the check of the sequencer's silence.
    pub(super) fn arm_watch(&mut self) {
        self.timers
            .set(Timer::Watch, self.cfg.next_check(&self.watch));
    }
}
