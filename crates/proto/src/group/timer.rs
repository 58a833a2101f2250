//! The member's timers: one deadline per kind, set where the event that arms it happens;
//! [`super::Member::poll_timeout`] is the earliest of those that count in the member's role
//! and state.

use super::{Member, State};
use crate::time::Instant;
use crate::timer::Deadlines;

/// What a deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Joining: ask again (or give up).
    Join,
    /// Leaving: ask the sequencer again.
    Leave,
    /// Departing sequencer: stop serving.
    Depart,
    /// A blocked group tries to rebuild again.
    Blocked,
    /// The rebuild's next round of invitations or proposals, or (a participant) the
    /// coordinator counts as quiet.
    Rebuild,
    /// Sequencer: multicast a heartbeat.
    Heartbeat,
    /// Sequencer: repeat the sync request.
    Sync,
    /// Sequencer: accept and order at once (own consumption freed history, or a leave changed
    /// what acceptance waits for). Armed at the last multicast's instant, already past; while
    /// armed it stands for the sequencer's other timers but the multicast hold.
    Order,
    /// Sequencer: the earliest check of a watched member.
    Watches,
    /// Sequencer: the packer's hold on the records not yet multicast ends.
    Multicast,
    /// Member: report to the sequencer.
    Report,
    /// Member: check the sequencer's silence.
    Watch,
    /// Member: repeat the NAK (counts only while records are missing).
    Nak,
    /// Member: resend the oldest submission not yet ordered.
    Resend,
    /// Member: the packer's hold on the submissions not yet sent ends (counts only while
    /// some within the send window are unsent).
    Submit,
}

impl Timer {
    const COUNT: usize = 15;

    /// Count in every state (each is armed only while it applies).
    const ALWAYS: [Timer; 3] = [Timer::Join, Timer::Leave, Timer::Depart];
    /// Count while this member is the sequencer and `Order` is not armed (`Watches` not
    /// while it departs).
    const SEQUENCER: [Timer; 3] = [Timer::Heartbeat, Timer::Sync, Timer::Watches];
    /// Count while this member is a member in the normal state, not the sequencer.
    const MEMBER: [Timer; 4] = [Timer::Report, Timer::Watch, Timer::Resend, Timer::Submit];
}

impl From<Timer> for usize {
    fn from(t: Timer) -> usize {
        t as usize
    }
}

/// One deadline per [`Timer`].
pub(super) type Timers = Deadlines<Timer, { Timer::COUNT }>;

impl Member {
    /// When [`Member::handle_timeout`] should run next: the earliest deadline that counts in
    /// this member's role and state.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = &self.timers;
        let mut next = t.next_of(&Timer::ALWAYS);
        let mut at = |x: Option<Instant>| {
            if let Some(x) = x {
                next = Some(next.map_or(x, |n| n.min(x)));
            }
        };
        if !matches!(self.state, State::Joining | State::Left | State::Expelled) {
            // A blocked group's retry holds the round's own timer back.
            at(t.get(Timer::Blocked).or(t.get(Timer::Rebuild)));
        }
        match self.state {
            State::Normal | State::Departing if self.seqr.is_some() => {
                let n = if self.state == State::Departing {
                    Timer::SEQUENCER.len() - 1
                } else {
                    Timer::SEQUENCER.len()
                };
                at(t.get(Timer::Order).or(t.next_of(&Timer::SEQUENCER[..n])));
                at(t.get(Timer::Multicast));
            }
            State::Normal => {
                at(t.next_of(&Timer::MEMBER));
                if self.rx.received_upto < self.rx.ordered_seen {
                    at(t.get(Timer::Nak));
                }
            }
            _ => {}
        }
        next
    }

    /// Runs every timer that is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.membership_tick(now);
        self.reset_tick(now);
        match self.state {
            State::Normal if self.seqr.is_some() => {
                self.sequencer_tick(now);
                self.resend_view(now);
            }
            State::Normal => self.member_tick(now),
            State::Departing => self.sequencer_tick(now),
            _ => {}
        }
    }

    /// The timers and queues, for diagnosing a stuck simulation.
    #[doc(hidden)]
    pub fn debug_timers(&self) -> String {
        format!(
            "timers {:?} seqr {:?} pending {:?} ordered_id {:?} recv {} seen {} acc {} applied {} ctl {} ack_due {} nak_due {} base {} stable {} retx {}",
            self.timers,
            self.seqr.as_ref().map(|s| (s.oldest_unsent, s.multicast_from, s.next_seq, s.barrier, s.watches.iter().map(|(a, w)| (a.site, self.cfg.next_check(w).0 / 1_000_000)).collect::<Vec<_>>(), s.acks.iter().map(|(a, x)| (a.site, *x)).collect::<Vec<_>>())),
            self.out.pending.iter().take(3).map(|p| (p.msg_id, p.sent_at)).collect::<Vec<_>>(),
            self.rx.last_msg_id.get(&self.me),
            self.rx.received_upto,
            self.rx.ordered_seen,
            self.rx.accepted_upto,
            self.rx.applied_upto,
            self.out.control.len(),
            self.out.ack_due,
            self.rx.nak_due,
            self.rx.history.base(),
            self.rx.stable_upto,
            self.rx.retransmit.len(),
        )
    }
}
