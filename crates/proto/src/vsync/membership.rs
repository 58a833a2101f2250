//! A member's life in the group: joining, leaving, installing views, learning a missed commit
//! or that it was left out, and reporting a view change that lasts too long.

use super::deliver::Pending;
use super::flush::JOINERS_MAX;
use super::msg::{self, Header, VsMsg};
use super::stability::Pinwheel;
use super::stream::Stream;
use super::timer::Timer;
use super::{
    Ballot, Dest, Proposal, ViewChange, ViewId, Vs, VsError, VsState, BLOCKED_AFTER_FLUSH_TIMEOUTS,
    COMMITS_KEPT, CONTROL_QUEUE_MAX,
};
use crate::addr::Address;
use crate::time::Instant;
use std::collections::VecDeque;

/// Joining and leaving, and what this member keeps about view changes: when the current one
/// began, and the recent commits, for members that missed them.
#[derive(Debug)]
pub(super) struct Membership {
    /// Joining: whom to ask, and how often we did.
    pub(super) contact: Address,
    pub(super) join_attempts: u32,
    pub(super) leaving: bool,
    /// When this member last asked a member of a later view for the commit it missed.
    pub(super) asked_commit_at: Option<Instant>,
    /// When the current view change began (the first flush message this view).
    pub(super) flushing_since: Option<Instant>,
    /// Recent commits kept, to tell members that missed them: (the view it ended, ballot,
    /// proposal).
    pub(super) commits: VecDeque<(ViewId, Ballot, Proposal)>,
}

impl Membership {
    pub(super) fn new(contact: Address) -> Membership {
        Membership {
            contact,
            join_attempts: 0,
            leaving: false,
            asked_commit_at: None,
            flushing_since: None,
            commits: VecDeque::new(),
        }
    }

    /// Keeps the commit that ended view `old` (the latest [`COMMITS_KEPT`]).
    pub(super) fn remember_commit(&mut self, old: ViewId, ballot: Ballot, p: Proposal) {
        if self.commits.iter().any(|(v, _, _)| *v == old) {
            return;
        }
        if self.commits.len() >= COMMITS_KEPT {
            self.commits.pop_front();
        }
        self.commits.push_back((old, ballot, p));
    }

    /// The commit that ended view `old`, if kept.
    fn commit_of(&self, old: ViewId) -> Option<(Ballot, Proposal)> {
        self.commits
            .iter()
            .find(|(v, _, _)| *v == old)
            .map(|(_, b, p)| (*b, p.clone()))
    }

    /// The latest kept view whose commit let `joiner` in.
    fn view_admitting(&self, joiner: Address) -> Option<ViewId> {
        self.commits
            .iter()
            .rev()
            .find(|(_, _, p)| p.members.contains(&joiner))
            .map(|(v, _, _)| *v)
    }
}

impl Vs {
    /// Leaves the group: the next view is made without this member.
    pub fn leave(&mut self, now: Instant) -> Result<(), VsError> {
        if !matches!(self.state, VsState::Normal | VsState::Flushing) {
            return Err(VsError::NotNormal(self.state));
        }
        if self.members.len() == 1 {
            self.state = VsState::Left;
            self.delivery.pending.push_back(Pending::Left);
            return Ok(());
        }
        self.ms.leaving = true;
        self.timers.stop(Timer::Leave);
        self.leave_tick(now);
        self.arm_flush();
        Ok(())
    }

    pub(super) fn join_tick(&mut self, now: Instant) {
        if self.timers.get(Timer::Join).is_some_and(|t| now < t) {
            return;
        }
        if self.ms.join_attempts >= self.cfg.join_attempts_max {
            self.state = VsState::Failed;
            self.timers.clear();
            self.delivery.pending.push_back(Pending::JoinFailed);
            return;
        }
        self.ms.join_attempts += 1;
        self.timers
            .set(Timer::Join, now + self.cfg.retransmit_timeout);
        let contact = self.ms.contact;
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
        self.reports.new_view(members.len());
        self.members = members.clone();
        self.out.new_view();
        self.set_unsent_since(None);
        self.detector.suspects.clear();
        self.pinwheel = Pinwheel::default();
        self.state = VsState::Normal;
        self.ms.flushing_since = None;
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
        self.delivery.pending.push_back(Pending::View(ViewChange {
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
        self.ms
            .flushing_since
            .map(|t| t + self.cfg.flush_timeout * BLOCKED_AFTER_FLUSH_TIMEOUTS)
    }

    /// The view change begins (or goes on).
    pub(super) fn enter_flushing(&mut self, now: Instant) {
        self.state = VsState::Flushing;
        if self.ms.flushing_since.is_none() {
            self.ms.flushing_since = Some(now);
            self.timers.set(
                Timer::Blocked,
                now + self.cfg.flush_timeout * BLOCKED_AFTER_FLUSH_TIMEOUTS,
            );
        }
        if self.pinwheel.token.is_none() {
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
            .filter(|a| !self.detector.suspects.contains(a))
            .count();
        self.delivery.pending.push_back(Pending::Blocked {
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
            .ms
            .asked_commit_at
            .is_some_and(|t| now < t + self.cfg.retransmit_timeout)
        {
            return;
        }
        self.ms.asked_commit_at = Some(now);
        let last = self
            .streams
            .get(self.rank)
            .map_or(0, |s| s.received.min(self.out.sent_upto));
        let received = self.received_report();
        self.queue(Dest::To(to), &VsMsg::Status { last, received });
    }

    /// This member is not in the next view: it is done (`Left` if it asked to leave).
    pub(super) fn left_out(&mut self) {
        self.state = if self.ms.leaving {
            VsState::Left
        } else {
            VsState::Expelled
        };
        self.delivery.pending.push_back(if self.ms.leaving {
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
            if let Some(old) = self.ms.view_admitting(joiner) {
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
        let Some((ballot, p)) = self.ms.commit_of(old) else {
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
            if self.out.control.len() < CONTROL_QUEUE_MAX {
                self.out.control.push_back((Dest::To(to), b));
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
