//! A member's life in the group: joining, leaving, installing views, learning a missed commit
//! or that it was left out, and reporting a view change that lasts too long.

use super::flush::JOINERS_MAX;
use super::msg::{self, Header, VsMsg};
use super::stream::Stream;
use super::timer::Timer;
use super::{
    Dest, Pending, ViewChange, ViewId, Vs, VsError, VsState, BLOCKED_AFTER_FLUSH_TIMEOUTS,
    CONTROL_QUEUE_MAX,
};
use crate::addr::Address;
use crate::time::Instant;

impl Vs {
    /// Leaves the group: the next view is made without this member.
    pub fn leave(&mut self, now: Instant) -> Result<(), VsError> {
        if !matches!(self.state, VsState::Normal | VsState::Flushing) {
            return Err(VsError::NotNormal(self.state));
        }
        if self.members.len() == 1 {
            self.state = VsState::Left;
            self.upcalls.push_back(Pending::Left);
            return Ok(());
        }
        self.leaving = true;
        self.timers.stop(Timer::Leave);
        self.leave_tick(now);
        self.arm_flush();
        Ok(())
    }

    pub(super) fn join_tick(&mut self, now: Instant) {
        if self.timers.get(Timer::Join).is_some_and(|t| now < t) {
            return;
        }
        if self.join_attempts >= self.cfg.join_attempts_max {
            self.state = VsState::Failed;
            self.timers.clear();
            self.upcalls.push_back(Pending::JoinFailed);
            return;
        }
        self.join_attempts += 1;
        self.timers
            .set(Timer::Join, now + self.cfg.retransmit_timeout);
        let contact = self.contact;
        self.queue(Dest::To(contact), &VsMsg::Join { joiner: self.me });
    }

    pub(super) fn leave_tick(&mut self, now: Instant) {
        if self.timers.get(Timer::Leave).is_some_and(|t| now < t) {
            return;
        }
        self.timers
            .set(Timer::Leave, now + self.cfg.retransmit_timeout);
        match self.coordinator() {
            Some(c) if c == self.me => {
                self.fl.leavers.insert(self.me);
                self.start_flush_if_needed(now);
            }
            Some(c) => self.queue(Dest::To(c), &VsMsg::Leave),
            None => {}
        }
    }

    /// Installs a view: fresh streams, numbering from 1.
    pub(super) fn install(
        &mut self,
        now: Instant,
        id: ViewId,
        members: Vec<Address>,
        removed: Vec<Address>,
    ) {
        let joined: Vec<Address> = members
            .iter()
            .copied()
            .filter(|a| *a != self.me && !self.members.contains(a))
            .collect();
        self.view = id;
        self.rank = members
            .iter()
            .position(|&a| a == self.me)
            .expect("installed views hold this member");
        self.streams = members.iter().map(|&a| Stream::new(a, now)).collect();
        self.reports = vec![vec![0; members.len()]; members.len()];
        self.acked = vec![0; members.len()];
        self.members = members.clone();
        self.sent_upto = 0;
        self.set_unsent_since(None);
        self.unsent_bytes = 0;
        self.push_upto = 0;
        self.suspects.clear();
        self.resend.clear();
        self.token = None;
        self.token_round_seen = 0;
        self.token_passed_vector = Vec::new();
        self.token_passed_round = 0;
        self.token_passed_stable = Vec::new();
        self.state = VsState::Normal;
        self.flushing_since = None;
        self.timers.stop(Timer::Join);
        self.timers.stop(Timer::Blocked);
        self.timers.set(
            Timer::Heartbeat,
            Instant::ZERO + self.cfg.heartbeat_interval,
        );
        self.arm_nak();
        self.arm_silence();
        self.token_none(now);
        self.arm_flush();
        self.counters.views_installed += 1;
        self.upcalls.push_back(Pending::View(ViewChange {
            id,
            members,
            joined,
            removed,
        }));
    }

    /// Whether a view change has been under way for [`BLOCKED_AFTER_FLUSH_TIMEOUTS`] flush
    /// timeouts (see [`Upcall::Blocked`]).
    pub fn blocked(&self, now: Instant) -> bool {
        self.state == VsState::Flushing && self.blocked_at().is_some_and(|t| now >= t)
    }

    pub(super) fn blocked_at(&self) -> Option<Instant> {
        self.flushing_since
            .map(|t| t + self.cfg.flush_timeout * BLOCKED_AFTER_FLUSH_TIMEOUTS)
    }

    /// The view change begins (or goes on).
    pub(super) fn enter_flushing(&mut self, now: Instant) {
        self.state = VsState::Flushing;
        if self.flushing_since.is_none() {
            self.flushing_since = Some(now);
            self.timers.set(
                Timer::Blocked,
                now + self.cfg.flush_timeout * BLOCKED_AFTER_FLUSH_TIMEOUTS,
            );
        }
        if self.token.is_none() {
            // No token is made during a flush.
            self.timers.stop(Timer::Token);
        }
    }

    /// Reports a view change that has lasted too long, once.
    pub(super) fn blocked_tick(&mut self, now: Instant) {
        if !self.timers.expired(Timer::Blocked, now) {
            return;
        }
        self.timers.stop(Timer::Blocked);
        let reachable = self
            .members
            .iter()
            .filter(|a| !self.suspects.contains(a))
            .count();
        self.upcalls.push_back(Pending::Blocked {
            reachable,
            needed: self.members.len() / 2 + 1,
        });
    }

    /// `to` talks in a later view: this member missed a commit. Commits are told to members
    /// heard in an old view, and members of the new view no longer send to this one in the
    /// old view; when the commit's other holders were gone (a leaver that coordinated its own
    /// leave, and members left out), nobody told it, and it stayed in the old view for good.
    /// It says something in its view to `to`, who answers with the
    /// commit if it kept it (at most once a retransmission timeout).
    pub(super) fn ask_commit(&mut self, now: Instant, to: Address) {
        if self
            .asked_commit_at
            .is_some_and(|t| now < t + self.cfg.retransmit_timeout)
        {
            return;
        }
        self.asked_commit_at = Some(now);
        let last = self
            .streams
            .get(self.rank)
            .map_or(0, |s| s.received.min(self.sent_upto));
        let received = self.received_report();
        self.queue(Dest::To(to), &VsMsg::Status { last, received });
    }

    /// This member is not in the next view: it is done (`Left` if it asked to leave).
    pub(super) fn left_out(&mut self) {
        self.state = if self.leaving {
            VsState::Left
        } else {
            VsState::Expelled
        };
        self.upcalls.push_back(if self.leaving {
            Pending::Left
        } else {
            Pending::Expelled
        });
    }

    pub(super) fn on_join(&mut self, now: Instant, h: &Header, joiner: Address) {
        if !matches!(self.state, VsState::Normal | VsState::Flushing) {
            return;
        }
        if self.members.contains(&joiner) {
            // In already: it missed the commit that let it in.
            let old = self
                .commits
                .iter()
                .rev()
                .find(|(_, _, p)| p.members.contains(&joiner))
                .map(|(v, _, _)| *v);
            if let Some(old) = old {
                self.tell_commit(joiner, old);
            }
            return;
        }
        match self.coordinator() {
            Some(c) if c == self.me => {
                if self.fl.joiners.len() < JOINERS_MAX {
                    self.fl.joiners.insert(joiner);
                }
                self.start_flush_if_needed(now);
            }
            Some(c) if h.from == joiner => self.queue(Dest::To(c), &VsMsg::Join { joiner }),
            _ => {}
        }
    }

    pub(super) fn on_leave(&mut self, now: Instant, h: &Header) {
        if !self.in_view(h) || self.coordinator() != Some(self.me) {
            return;
        }
        self.fl.leavers.insert(h.from);
        self.start_flush_if_needed(now);
    }

    /// The group is at `h.view`, past this member's view, and this member is not in it.
    pub(super) fn on_gone(&mut self, h: &Header) {
        if h.view > self.view && matches!(self.state, VsState::Normal | VsState::Flushing) {
            self.counters.gone += 1;
            self.left_out();
        }
    }

    /// Sends `to`, still in view `old`, the commit that ended it, if this member kept it.
    pub(super) fn tell_commit(&mut self, to: Address, old: ViewId) {
        let Some((_, ballot, p)) = self.commits.iter().find(|(v, _, _)| *v == old).cloned() else {
            return self.tell_gone(to, old);
        };
        let h = Header {
            group: self.cfg.group,
            view: old,
            from: self.me,
        };
        let mut b = vec![0u8; self.cfg.packet_bytes_max];
        if let Some(n) = msg::write(
            &mut b,
            &h,
            &VsMsg::Commit {
                ballot,
                proposal: p,
            },
        ) {
            b.truncate(n);
            if self.control.len() < CONTROL_QUEUE_MAX {
                self.control.push_back((Dest::To(to), b));
            }
        }
    }

    /// `to` speaks in view `old`, whose commit this member does not keep (more than
    /// `COMMITS_KEPT` views ago, or before it joined). If `to` is not in this member's view
    /// either, it was left out somewhere since `old` and can never catch up: say so, and it
    /// takes itself out (`Expelled`) rather than flush alone for good.
    pub(super) fn tell_gone(&mut self, to: Address, old: ViewId) {
        if old >= self.view
            || self.members.contains(&to)
            || !matches!(self.state, VsState::Normal | VsState::Flushing)
        {
            return;
        }
        self.queue(Dest::To(to), &VsMsg::Gone);
    }
}
