//! Failure detection and group rebuild (paper 003 §2.1, `ResetGroup`).
//!
//! Detection: the sequencer multicasts at least every heartbeat interval and members report to
//! it as often; a peer silent for `silence_timeout` is probed every `probe_interval`, and
//! declared dead after `probes_max` unanswered probes.
//!
//! Rebuild, started by whoever detected the failure (or by the application):
//! 1. the coordinator picks an epoch above any it has seen and invites every member of the
//!    old view; a member accepts the highest invitation it has seen, freezes (takes in no more
//!    records of the old epoch) and replies with how far it has received and consumed;
//! 2. after every member replied, or after `probes_max` rounds of invitations, the survivors
//!    are the members that replied. Too few (below the minimum): the reset fails, the group
//!    blocks and tries again later;
//! 3. otherwise the new sequencer is decided by rule, with no extra round: the survivor that
//!    received furthest (the lowest-ranked among equals). Everything up to that point, `H`,
//!    is accepted: the new sequencer has it all and the others fetch what they miss from it
//!    by NAK. The coordinator announces the view (epoch, survivors, sequencer, `H`); the new
//!    sequencer orders a View record at `H + 1`, accepted only once every member of the new
//!    view holds it, and the group goes on.
//!
//! A message whose send completed was held by r + 1 members; if at most r crashed, a
//! survivor holds it, so `H` covers it. A member that was left out learns so from the view
//! and stops (`Expelled`).

use super::history::Entry;
use super::msg::{Epoch, GroupHeader, RecordKind};
use super::{
    encode_view, Control, GroupConfig, GroupEvent, Member, MinMembers, Reset, State, Watch,
};
use crate::addr::Address;
use crate::time::Instant;
use std::collections::HashMap;

pub(super) enum Verdict {
    Fine,
    Probe,
    Dead,
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
    pub(super) fn failure_detected(&mut self, now: Instant, suspect: Address) {
        self.counters.failures_detected += 1;
        self.events.push_back(GroupEvent::Failure { suspect });
        match self.cfg.auto_reset {
            Some(min) => self.start_reset(now, min),
            None => self.state = State::Failed,
        }
    }

    /// Starts a rebuild with this member as coordinator.
    pub(super) fn start_reset(&mut self, now: Instant, min: MinMembers) {
        let (old_members, base) = match &self.reset {
            // A retry keeps the view being rebuilt.
            Some(r) if r.coordinator => (r.old_members.clone(), r.base),
            _ => (self.quorum_members(), self.epoch),
        };
        // Saturating: any message of the group raises `epoch_seen`, a corrupt one up to the
        // largest number.
        let epoch = Epoch {
            number: self.epoch_seen.max(self.epoch.number).saturating_add(1),
            coordinator: self.me,
        };
        self.epoch_seen = epoch.number;
        self.counters.resets_started += 1;
        let mut replies = HashMap::default();
        replies.insert(
            self.me,
            (self.consumed_upto, self.received_upto, self.history.base()),
        );
        let mut configs = HashMap::default();
        configs.insert(self.me, self.config_seq());
        self.reset = Some(Reset {
            epoch,
            base,
            configs,
            coordinator: true,
            min_members: min.of(old_members.len()),
            old_members,
            replies,
            invites_sent: 0,
            next_at: now,
        });
        self.enter_recovering();
        self.blocked_retry_at = None;
        self.reset_tick(now);
    }

    /// Stops taking part in the old epoch: no more ordering, no more records taken in.
    fn enter_recovering(&mut self) {
        self.state = State::Recovering;
        self.blocked_retry_at = None;
        self.nak_due = false;
        self.ack_due = false;
        self.retransmit.clear();
    }

    pub(super) fn on_invite(
        &mut self,
        now: Instant,
        hdr: GroupHeader,
        base: Epoch,
        config_seq: u64,
    ) {
        let e = hdr.epoch;
        if self.state == State::Left && !self.members.contains(&hdr.from) {
            // Left, still running: it may be the last the inviter knows of the group (the
            // others gone too). Our last view, if newer than its own and without it, tells it
            // it is out; otherwise it ignores it.
            self.push_control(hdr.from, Control::NewView);
            return;
        }
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return;
        }
        if base < self.epoch {
            // It rebuilds a view we have already left for a newer one, made by a majority of
            // that same view: answering would let it make a second successor. Show it ours.
            self.push_control(hdr.from, Control::NewView);
            return;
        }
        if e <= self.epoch || (self.state == State::Normal && !self.members.contains(&hdr.from)) {
            // An inviter that is behind, or not in our view at all: show it the view.
            if self.state == State::Normal {
                self.push_control(hdr.from, Control::NewView);
            }
            return;
        }
        if let Some((taken, coordinator)) = self.reset.as_ref().map(|r| (r.epoch, r.coordinator)) {
            if e == taken && !coordinator {
                // The coordinator invites again only the members it has not heard from: our
                // answer was lost. Without another, it counts us out, and losing one reply
                // per round can cost every rebuild its majority. (We took nothing in since
                // the first answer, so this one says the same.)
                self.push_control(hdr.from, Control::InviteReply { epoch: e });
            }
            if e <= taken {
                return;
            }
        }
        if e <= self.promised {
            return;
        }
        if config_seq < self.config_seq() && base == self.epoch && self.state != State::Departing {
            // We hold a join or leave the coordinator lacks: it cannot count the quorum (see
            // `decide_view`), and answering would only keep us waiting on it. Coordinate
            // ourselves, with a higher epoch; it will answer us.
            // (`epoch_seen` already counts the invitation's: the new epoch is above it.)
            let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
            self.reset = None;
            self.start_reset(now, min);
            return;
        }
        // Not Normal here: our own view may lag the inviter's (it applied joins we have not),
        // so any higher invitation is taken.
        self.promised = e;
        self.reset = Some(Reset {
            epoch: e,
            base,
            configs: HashMap::default(),
            coordinator: false,
            min_members: 0,
            old_members: Vec::new(),
            replies: HashMap::default(),
            invites_sent: 0,
            // Give the coordinator this long to finish before taking over.
            next_at: now + self.reset_patience(),
        });
        self.enter_recovering();
        self.push_control(hdr.from, Control::InviteReply { epoch: e });
    }

    /// How long a participant waits for the coordinator's view.
    fn reset_patience(&self) -> core::time::Duration {
        self.cfg.probe_interval * (self.cfg.probes_max + 2)
    }

    pub(super) fn on_invite_reply(
        &mut self,
        now: Instant,
        hdr: GroupHeader,
        (consumed, received, held_from): (u64, u64, u64),
        view: Epoch,
        config_seq: u64,
    ) {
        let Some(r) = self.reset.as_mut() else {
            return;
        };
        if !r.coordinator
            || hdr.epoch != r.epoch
            || !r.old_members.contains(&hdr.from)
            || view > r.base
        {
            // (A member in a newer view than ours refuses rather than answers.)
            return;
        }
        // A member of the view being rebuilt that never installed it (its announcement was
        // lost) is still in the view before, which that rebuild numbered anew after its
        // start: what it holds beyond the start is not this view's.
        let (received, config_seq) = if view < r.base {
            // (Its list is the view before's, which the base's own superseded.)
            (received.min(self.start_seq), 0)
        } else {
            (received, config_seq)
        };
        r.replies.insert(hdr.from, (consumed, received, held_from));
        r.configs.insert(hdr.from, config_seq);
        // (Our own answer is among the replies, but we may not be among the members: a
        // leaving sequencer rebuilds the view it leaves.)
        if r.old_members.iter().all(|m| r.replies.contains_key(m)) {
            self.decide_view(now);
        }
    }

    /// Coordinator and participant timers of a rebuild; a blocked group's retries.
    pub(super) fn reset_tick(&mut self, now: Instant) {
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return;
        }
        if let Some(at) = self.blocked_retry_at {
            if now >= at && self.state == State::Blocked {
                let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
                self.start_reset(now, min);
            }
            return;
        }
        let Some(r) = self.reset.as_mut() else {
            return;
        };
        if now < r.next_at {
            return;
        }
        if !r.coordinator {
            // The coordinator went quiet: take over.
            let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
            self.reset = None;
            self.start_reset(now, min);
            return;
        }
        if r.invites_sent > self.cfg.probes_max {
            self.decide_view(now);
            return;
        }
        r.invites_sent += 1;
        r.next_at = now + self.cfg.probe_interval;
        let (epoch, base, missing): (Epoch, Epoch, Vec<Address>) = (
            r.epoch,
            r.base,
            r.old_members
                .iter()
                .copied()
                .filter(|m| !r.replies.contains_key(m))
                .collect(),
        );
        for m in missing {
            self.push_control(m, Control::Invite { epoch, base });
        }
    }

    /// The coordinator has its answers: make the new view, or fail.
    fn decide_view(&mut self, now: Instant) {
        let r = self.reset.as_ref().expect("resetting");
        let answered: Vec<Address> = r
            .old_members
            .iter()
            .copied()
            .filter(|m| r.replies.contains_key(m))
            .collect();
        if answered.len() < r.min_members {
            let needed = r.min_members;
            self.reset_failed(now, answered.len(), needed);
            return;
        }
        let ours = r.configs.get(&self.me).copied().unwrap_or(0);
        if answered
            .iter()
            .any(|m| r.configs.get(m).is_some_and(|&c| c > ours))
        {
            // A member holds a join or leave we lack: our list, and so our quorum, is out of
            // date. Two coordinators whose lists differ by two changes could each find a
            // majority of their own; one that knows every change it hears of cannot. Let a
            // member that knows more coordinate (it retries as we do).
            self.counters.resets_behind += 1;
            let needed = r.min_members;
            self.reset_failed(now, answered.len(), needed);
            return;
        }
        // Every member kept must be able to fetch what it lacks, up to where the new
        // sequencer starts, from kept members that hold it. The new sequencer is the
        // candidate that keeps the most members, then the one that received furthest (then
        // the one holding the oldest records, then the lowest-ranked). Members that cannot
        // be brought up to date are left out (they may join again).
        type Score = (usize, u64, core::cmp::Reverse<u64>);
        let mut best: Option<(Score, Address, Vec<Address>)> = None;
        for &c in &answered {
            let start = r.replies[&c].1;
            let kept = coverable(&answered, start, &r.replies);
            if !kept.contains(&c) {
                continue;
            }
            let score = (kept.len(), start, core::cmp::Reverse(r.replies[&c].2));
            if best.as_ref().is_none_or(|b| score > b.0) {
                best = Some((score, c, kept));
            }
        }
        let (_, sequencer, survivors) = best.expect("a candidate can always serve itself");
        if survivors.len() < r.min_members {
            // Members that would be left out cannot make up the quorum: one of them, never
            // told, could count for another rebuild of the same view.
            let needed = r.min_members;
            self.reset_failed(now, survivors.len(), needed);
            return;
        }
        let start = r.replies[&sequencer].1;
        let donors: Vec<(Address, u64, u64)> = survivors
            .iter()
            .map(|&m| (m, r.replies[&m].2, r.replies[&m].1))
            .collect();
        let epoch = r.epoch;
        let old: Vec<Address> = r.old_members.clone();
        let me = self.me;
        for m in old.into_iter().filter(|&m| m != me) {
            // Members left out learn it from the view too.
            self.push_control(m, Control::NewView);
        }
        if !survivors.contains(&self.me) {
            // We cannot be brought up to date ourselves: announce the view, then stop.
            self.epoch = epoch;
            self.start_seq = start;
            self.sequencer = sequencer;
            self.members = survivors;
            self.view_donors = donors;
            self.expel();
            return;
        }
        self.install_view(now, epoch, start, sequencer, &donors);
        // The announcements above go out with the view just installed.
        self.counters.resets_completed += 1;
    }

    /// Too few for a view: the group blocks, and tries again after `reset_retry`.
    fn reset_failed(&mut self, now: Instant, survivors: usize, needed: usize) {
        self.counters.resets_failed += 1;
        self.events
            .push_back(GroupEvent::ResetFailed { survivors, needed });
        self.state = State::Blocked;
        self.blocked_retry_at = Some(now + self.cfg.reset_retry);
    }

    fn expel(&mut self) {
        self.retransmit.clear();
        self.state = State::Expelled;
        self.seqr = None;
        self.reset = None;
        self.blocked_retry_at = None;
        self.events.push_back(GroupEvent::Expelled);
    }

    pub(super) fn on_new_view(
        &mut self,
        now: Instant,
        from: Address,
        epoch: Epoch,
        start_seq: u64,
        sequencer: Address,
        survivors: &[(Address, u64, u64)],
    ) {
        let members: Vec<Address> = survivors.iter().map(|s| s.0).collect();
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return;
        }
        if epoch == self.epoch && self.leave_at.is_some() && !members.contains(&self.me) {
            // Our leave was applied, but its record never reached us (the sequencer that
            // ordered it is gone): the view without us says we are out.
            self.leave_done();
            return;
        }
        if epoch == self.epoch
            && from == sequencer
            && self.state != State::Departing
            && !members.contains(&self.me)
        {
            // The sequencer of our own view leaves us out. Its list is the view's (its View
            // record settles everyone's, and it orders every join and leave since), so the
            // rebuild kept us in its announcement but the new sequencer's more advanced list
            // had already dropped us (an earlier rebuild we never learned of left us out).
            // Its View record, which says so, is accepted without us and never reaches us.
            self.expel();
            return;
        }
        if epoch <= self.epoch {
            return;
        }
        if !members.contains(&self.me) {
            // Left out of a view that was made: whatever rebuild we take part in is moot.
            self.expel();
            return;
        }
        if epoch < self.promised {
            // We answered a later invitation with our state frozen; taking in an earlier
            // view's records now could contradict that answer. (Our own rebuild, still
            // undecided, is no such promise: a view a member shows us in refusing it wins.)
            return;
        }
        if sequencer == self.me
            && (start_seq > self.received_upto || start_seq.saturating_add(1) < self.history.base())
        {
            // A coordinator picks the new sequencer with the start it reported, so this view
            // was not made from our state (a corrupt or forged message): we could not order
            // from it (we lack records up to its start, or trimmed those after it).
            return;
        }
        self.install_view(now, epoch, start_seq, sequencer, survivors);
    }

    /// Enters a rebuilt view: everything up to `start_seq` is accepted and what follows is
    /// renumbered by the new sequencer.
    fn install_view(
        &mut self,
        now: Instant,
        epoch: Epoch,
        start_seq: u64,
        sequencer: Address,
        donors: &[(Address, u64, u64)],
    ) {
        let survivors: Vec<Address> = donors.iter().map(|d| d.0).collect();
        self.view_donors = donors.to_vec();
        self.nak_attempts = 0;
        self.reset = None;
        self.blocked_retry_at = None;
        self.state = State::Normal;
        self.epoch = epoch;
        self.epoch_seen = self.epoch_seen.max(epoch.number);
        self.start_seq = start_seq;
        self.sequencer = sequencer;
        self.seqr = None;
        self.watch = Watch::new(now);
        // Keep only what we received in order (and so reported): records held out of order
        // beyond it may be from an epoch the group has since renumbered. The coordinator may
        // have counted less of it (we were a view behind): keep only what it counted.
        let counted = donors
            .iter()
            .find(|d| d.0 == self.me && d.1 > 0)
            .map_or(u64::MAX, |d| d.2);
        self.received_upto = self.received_upto.min(start_seq).min(counted);
        self.history.truncate_after(self.received_upto);
        self.ordered_seen = start_seq;
        // Records up to the start stay tentative where they were: the new sequencer accepts
        // them as any other, once r members besides it hold them (the View record after them
        // once every member does), so a rebuild never delivers what only one member holds.
        self.accepted_upto = self.accepted_upto.min(start_seq);
        self.nak_at = None;
        self.resubmit_all();
        if self.received_upto < start_seq {
            self.nak_if_due(now);
        }
        // The member list as of the start (joins and leaves we hold but have not applied
        // included), less those the rebuild left out. The new sequencer holds everything up
        // to the start, so its list is the most advanced one, and its View record makes it
        // everyone's.
        let before = self.members_through(self.received_upto);
        self.members = before
            .iter()
            .copied()
            .filter(|m| survivors.contains(m))
            .collect();
        let members = self.members.clone();
        self.unordered.retain(|(s, _), _| members.contains(s));
        if sequencer == self.me {
            debug_assert_eq!(self.received_upto, start_seq);
            let removed: Vec<Address> = before
                .into_iter()
                .filter(|m| !members.contains(m))
                .collect();
            self.become_sequencer(now);
            self.order_view(now, epoch, &removed);
            // Survivors the coordinator kept but our list had already dropped (an earlier
            // rebuild left them out, and they never learned it) install this view believing
            // they are in; our View record, accepted without them, would never reach them.
            // Tell them they are out.
            for m in survivors.into_iter().filter(|m| !members.contains(m)) {
                self.push_control(m, Control::NewView);
            }
        }
    }

    /// The members a rebuild needs a majority of: the list as of the last record we hold,
    /// leaves included (a leaver is gone and will not answer), less joiners whose join we
    /// have not applied (not yet told they are in, they cannot answer either).
    fn quorum_members(&self) -> Vec<Address> {
        let mut m = self.members_through(self.received_upto);
        let applied = &self.members;
        for q in self.applied_upto + 1..=self.received_upto {
            if let Some(e) = self.history.get(q).filter(|e| e.kind == RecordKind::Join) {
                let who = super::addr_payload(e);
                if !applied.contains(&who) {
                    m.retain(|&x| x != who);
                }
            }
        }
        m
    }

    /// The sequence number of the last membership record we hold (applied or not).
    pub(super) fn config_seq(&self) -> u64 {
        (self.applied_upto + 1..=self.received_upto)
            .rev()
            .find(|&q| {
                self.history
                    .get(q)
                    .is_some_and(|e| e.kind != RecordKind::Message)
            })
            .unwrap_or(self.config_applied)
    }

    /// The member list after applying the joins and leaves held up to `upto`.
    fn members_through(&self, upto: u64) -> Vec<Address> {
        let mut m = self.members.clone();
        for seq in self.applied_upto + 1..=upto {
            let Some(e) = self.history.get(seq) else {
                break;
            };
            let who = super::addr_payload(e);
            match e.kind {
                RecordKind::Join if !m.contains(&who) => m.push(who),
                RecordKind::Leave => m.retain(|&x| x != who),
                RecordKind::View => m = super::view_payload(e).0,
                _ => {}
            }
        }
        m
    }

    /// The new sequencer's first record: the rebuilt view.
    fn order_view(&mut self, now: Instant, epoch: Epoch, removed: &[Address]) {
        let payload = encode_view(&self.members, removed);
        let s = self.seqr.as_mut().expect("sequencer");
        let seq = s.next_seq;
        s.next_seq += 1;
        s.barrier = Some(seq);
        s.oldest_unsent.get_or_insert(now);
        let e = Entry {
            sender: epoch.coordinator,
            msg_id: epoch.number,
            kind: RecordKind::View,
            payload: Some(payload),
            via_bb: false,
        };
        s.note_unsent(&e, self.me);
        assert_eq!(self.history.insert(seq, e), Ok(true));
        self.received_upto = seq;
        self.ordered_seen = seq;
        self.advance_accept(now);
    }

    pub(super) fn apply_view(&mut self, now: Instant, seq: u64) {
        if seq <= self.start_seq {
            // An earlier rebuild's record, caught up on: the current view already counts it.
            return;
        }
        // The new sequencer's list is the group's from here on.
        let (members, _) = super::view_payload(self.history.get(seq).expect("applied"));
        if !members.contains(&self.me) {
            self.expel();
            return;
        }
        self.members = members;
        if let Some(s) = self.seqr.as_mut() {
            if s.barrier == Some(seq) {
                s.barrier = None;
            }
            self.order_next(now);
        }
    }

    pub(super) fn reset_deadline(&self) -> Option<Instant> {
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return None;
        }
        if let Some(t) = self.blocked_retry_at {
            return Some(t);
        }
        self.reset.as_ref().map(|r| r.next_at)
    }
}

/// Whether a member that received up to `from` can get every record up to `to` from members
/// that hold `(oldest held, received up to)` ranges.
fn covered(from: u64, to: u64, held: &[(u64, u64)]) -> bool {
    let mut next = from + 1;
    while next <= to {
        let Some(upto) = held
            .iter()
            .filter(|&&(oldest, upto)| oldest <= next && next <= upto)
            .map(|&(_, upto)| upto)
            .max()
        else {
            return false;
        };
        next = upto + 1;
    }
    true
}

/// The members (of `answered`) that can be brought up to `start` by fetching from each other;
/// dropping one may take away records another needed, hence the repetition.
fn coverable(
    answered: &[Address],
    start: u64,
    replies: &HashMap<Address, (u64, u64, u64), crate::addr::AddressHash>,
) -> Vec<Address> {
    let mut kept = answered.to_vec();
    loop {
        let held: Vec<(u64, u64)> = kept.iter().map(|m| (replies[m].2, replies[m].1)).collect();
        let before = kept.len();
        kept.retain(|m| replies[m].1 <= start && covered(replies[m].1, start, &held));
        if kept.len() == before {
            return kept;
        }
    }
}
