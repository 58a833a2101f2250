//! The failure detector: a member silent for `silence_timeout` is suspected, and suspicions
//! go to the coordinator (the lowest-ranked member not suspected), which starts a view change.
//! A member whose host reported its port unreachable since it was last heard is suspected
//! once silent for `unreachable_silence` (a process killed on a live host).

use super::msg::{Header, VsMsg};
use super::timer::Timer;
use super::{Dest, Vs, VsState, SUSPECTED_KEPT};
use crate::addr::Address;
use crate::time::Instant;
use std::collections::{BTreeSet, VecDeque};

/// Whom this member suspects in the current view, and the suspicions not yet taken by the
/// layer above.
#[derive(Debug, Default)]
pub(super) struct Detector {
    pub(super) suspects: BTreeSet<Address>,
    /// Members suspected since the layer above last asked ([`Vs::take_suspected`]); the
    /// oldest are dropped past [`SUSPECTED_KEPT`].
    suspected: VecDeque<Address>,
}

impl Detector {
    /// Suspects `a`, and keeps it for the layer above; false if it was suspected already.
    pub(super) fn suspect(&mut self, a: Address) -> bool {
        if !self.suspects.insert(a) {
            return false;
        }
        self.note_suspected(a);
        true
    }

    fn note_suspected(&mut self, a: Address) {
        if self.suspected.len() >= SUSPECTED_KEPT {
            self.suspected.pop_front();
        }
        self.suspected.push_back(a);
    }

    /// The lowest-ranked of `members` not suspected.
    fn coordinator(&self, members: &[Address]) -> Option<Address> {
        members.iter().copied().find(|a| !self.suspects.contains(a))
    }
}

impl Vs {
    /// A message from the member at `rank` in this view: it is alive. A member heard again is
    /// no longer suspected (a clogged path healed), so every member names the same
    /// coordinator; not during a flush, where a coordinator whose round stalls still sends
    /// heartbeats and the next one must be able to take over.
    pub(super) fn heard(&mut self, now: Instant, rank: usize) {
        let s = &mut self.streams[rank];
        s.last_heard = now;
        // What the member sent before it died may be read after the report (a read takes
        // the reports before the datagrams that wait): only a message a whole
        // `unreachable_silence` after the report cancels it.
        if s.unreachable_at
            .is_some_and(|at| now >= at + self.cfg.unreachable_silence)
        {
            s.unreachable_at = None;
        }
        let from = self.streams[rank].addr;
        if self.state == VsState::Normal && self.detector.suspects.remove(&from) {
            self.fl.suspects_sent_at = None;
        }
        self.arm_silence();
    }

    /// The next member suspected since the last call, for the layer above to report.
    pub fn take_suspected(&mut self) -> Option<Address> {
        self.detector.suspected.pop_front()
    }

    /// The member that coordinates a view change: the lowest-ranked one not suspected.
    pub(super) fn coordinator(&self) -> Option<Address> {
        self.detector.coordinator(&self.members)
    }

    /// Failure detection: a member silent for `silence_timeout` is suspected.
    pub(super) fn detect(&mut self, now: Instant) {
        let mut new = Vec::new();
        for (i, s) in self.streams.iter().enumerate() {
            if i != self.rank
                && !self.detector.suspects.contains(&s.addr)
                && now >= s.last_heard + self.silence_of(s)
            {
                new.push(s.addr);
            }
        }
        for a in new {
            self.counters.suspicions += 1;
            self.detector.suspect(a);
        }
        self.arm_silence();
        if !self.detector.suspects.is_empty() {
            self.report_suspects(now);
        }
    }

    /// Sets the silence timer: when the first member not suspected has been silent for
    /// `silence_timeout`.
    pub(super) fn arm_silence(&mut self) {
        let t = self
            .streams
            .iter()
            .enumerate()
            .filter(|&(i, s)| i != self.rank && !self.detector.suspects.contains(&s.addr))
            .map(|(_, s)| s.last_heard + self.silence_of(s))
            .min();
        self.timers.put(Timer::Silence, t);
    }

    /// How long `s`'s member may be silent before it is suspected.
    fn silence_of(&self, s: &super::stream::Stream) -> std::time::Duration {
        if s.unreachable_at.is_some() {
            self.cfg.unreachable_silence.min(self.cfg.silence_timeout)
        } else {
            self.cfg.silence_timeout
        }
    }

    /// `who`'s host answered a datagram of ours with "port unreachable": it is suspected
    /// once silent for `unreachable_silence`, unless heard from first.
    pub fn peer_unreachable(&mut self, now: Instant, who: Address) {
        let Some(rank) = self.members.iter().position(|&a| a == who) else {
            return;
        };
        if rank == self.rank || self.streams.len() <= rank {
            return;
        }
        self.streams[rank].unreachable_at.get_or_insert(now);
        self.arm_silence();
    }

    pub(super) fn on_suspect_report(&mut self, now: Instant, h: &Header, who: Address) {
        if !self.in_view(h) || who == self.me || !self.members.contains(&who) {
            return;
        }
        if self.coordinator() == Some(self.me) && !self.fl.running() {
            // The flush finds out whether `who` is there: it stays if it answers.
            self.start_flush(now);
        }
    }

    /// Tells the coordinator what this member suspects (or starts the flush itself).
    pub(super) fn report_suspects(&mut self, now: Instant) {
        match self.coordinator() {
            Some(c) if c == self.me => self.start_flush_if_needed(now),
            Some(c) => {
                if self
                    .fl
                    .suspects_sent_at
                    .is_some_and(|t| now < t + self.cfg.retransmit_timeout)
                {
                    return;
                }
                self.fl.suspects_sent_at = Some(now);
                let who: Vec<Address> = self.detector.suspects.iter().copied().collect();
                for w in who {
                    self.queue(Dest::To(c), &VsMsg::Suspect { who: w });
                }
            }
            None => {}
        }
    }
}
