//! Failure detection and group rebuild (paper 003 §2.1, `ResetGroup`).
//!
//! Detection: the sequencer multicasts at least every heartbeat interval and members report to
//! it as often; a peer silent for `silence_timeout` is probed every `probe_interval`, and
//! declared dead after `probes_max` unanswered probes.
//!
//! Rebuild, started by whoever detected the failure (or by the application):
//! 1. the coordinator picks an epoch above any it has seen and invites every member of the
//!    last view it knows committed (its *base*); a member accepts the highest invitation it has seen, freezes (takes in no more
//!    records of the old epoch) and replies with how far it has received and consumed;
//! 2. after every member replied, or after `probes_max` rounds of invitations, the survivors
//!    are the members that replied. Too few (below the minimum): the reset fails, the group
//!    blocks and tries again later;
//! 3. otherwise the new sequencer is decided by rule, with no extra round: the survivor that
//!    received furthest (the lowest-ranked among equals). Everything up to that point, `H`,
//!    is accepted: the new sequencer has it all and the others fetch what they miss from it
//!    by NAK. The coordinator announces the view (epoch, survivors, sequencer, `H`); the new
//!    sequencer orders a View record at `H + 1`, accepted only once a quorum of the new
//!    view holds it (so that no round on the old view can succeed any more), and the group
//!    goes on.
//!
//! Which view succeeds the base is decided as in Paxos, epochs being ballots: holding a
//! rebuilt view's View record is accepting that view in the round that made it; answers carry
//! the highest-ballot view their member accepted; a round whose answers carry one proposes
//! that view again instead of making a new one (`Propose`, `Accepted`), and a view accepted in
//! one round by `chosen_quorum` members of the base is the group's. A view that never
//! committed is never the base of a rebuild: a majority of its own members need not meet the
//! quorum of a later round on the same base.
//!
//! A message whose send completed was held by r + 1 members; if at most r crashed, a
//! survivor holds it, so `H` covers it. A member that was left out learns so from the view
//! and stops (`Expelled`).

use super::history::Entry;
use super::msg::{Epoch, GroupHeader, RecordKind};
use super::timer::Timer;
use super::{encode_view, msg, Control, GroupEvent, Member, MinMembers, State, Watch};
use crate::addr::{Address, AddressHash};
use crate::time::Instant;
use std::collections::HashMap;

/// A rebuild round in progress.
#[derive(Debug)]
pub(super) struct Reset {
    pub(super) epoch: Epoch,
    /// The coordinator's: the view being rebuilt (its last known committed one), and its start.
    pub(super) base: Epoch,
    pub(super) base_start: u64,
    /// The coordinator's: how recent each answer's member list is (see `config_seq`).
    pub(super) configs: HashMap<Address, u64, AddressHash>,
    pub(super) coordinator: bool,
    pub(super) min_members: usize,
    pub(super) old_members: Vec<Address>,
    /// Per member that answered: (consumed, received, oldest record held).
    pub(super) replies: HashMap<Address, (u64, u64, u64), AddressHash>,
    pub(super) invites_sent: u32,
    /// The coordinator's: the highest-ballot successor of the base accepted by a member
    /// that answered (ourselves included), with its ballot.
    pub(super) best: Option<(Epoch, ViewNews)>,
    /// The coordinator's, in the second phase: the view proposed, and who accepted it.
    pub(super) proposal: Option<ViewNews>,
    pub(super) accepts: Vec<Address>,
    /// The coordinator's: the member whose death started the round (it went unanswered
    /// through the silence timeout and every probe). The round decides once every other old
    /// member answered, without waiting for it through the invitation rounds.
    pub(super) dead: Option<Address>,
}

impl ViewNews {
    pub(super) fn from_value(v: &msg::ViewValue<'_>, committed: bool) -> ViewNews {
        let donors: Vec<(Address, u64, u64)> = v.members.iter().collect();
        // (A quorum outside 1..=members is corrupt; clamped, it is at worst "all".)
        let quorum = usize::try_from(v.quorum)
            .unwrap_or(usize::MAX)
            .clamp(1, donors.len().max(1));
        ViewNews {
            epoch: v.epoch,
            start: v.start_seq,
            sequencer: v.sequencer,
            quorum,
            committed,
            base: v.base,
            donors,
        }
    }
}

/// A rebuilt view as its announcement (`NewView`) describes it.
#[derive(Clone, Debug)]
pub(super) struct ViewNews {
    pub(super) epoch: Epoch,
    pub(super) start: u64,
    pub(super) sequencer: Address,
    /// How many of its members must hold its View record for it to commit.
    pub(super) quorum: usize,
    /// The sender knows it committed.
    pub(super) committed: bool,
    /// The view the round that made it was on (it is a successor of that one).
    pub(super) base: Epoch,
    /// Its members as the rebuild announced them (see `Recovery::view_donors`).
    pub(super) donors: Vec<(Address, u64, u64)>,
}

/// A view known to have committed (see `Recovery::committed`).
#[derive(Clone, Debug)]
pub(super) struct Committed {
    pub(super) epoch: Epoch,
    pub(super) start: u64,
    /// Its member list as applied here (as `Member::members` is): the list it had when it
    /// was left, and the joins and leaves numbered in it applied since. (The newer view's
    /// list is cut down to that view's survivors, which do not count for a round on this
    /// one.)
    pub(super) members: Vec<Address>,
    pub(super) sequencer: Address,
}

/// Rebuilds: the views known committed and accepted, the round in progress.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// Highest epoch number seen anywhere (a coordinator picks a higher one).
    pub(super) epoch_seen: u64,
    /// The highest rebuild this member answered for another coordinator: it installs no
    /// view of a lower epoch, since that coordinator may make its view from the answer.
    pub(super) promised: Epoch,
    /// `Some` while the view this member is in is not known to have committed (its View
    /// record not yet applied here): the last view it knows committed, which every rebuild
    /// it takes part in is a round on. `None`: the current view is known committed (applied
    /// its View record, or created or joined it).
    pub(super) committed: Option<Committed>,
    /// Views this member accepted in a round that proposed them, each with that round's
    /// epoch (its ballot); at most one per base, the highest ballot's, and at most
    /// `ACCEPTED_MAX`.
    pub(super) accepted: Vec<(Epoch, ViewNews)>,
    /// The base of the round that made the current view, if this member took part in it.
    pub(super) view_base: Epoch,
    /// The sequence number a rebuilt view started after (its `start_seq`).
    pub(super) start_seq: u64,
    /// After a rebuild: each survivor with the oldest record it held and how far it had
    /// received, to fetch records from. Also the view's members as the rebuild announced
    /// them, while it is not known committed.
    pub(super) view_donors: Vec<(Address, u64, u64)>,
    /// How many members of the current view must hold its View record (its sequencer among
    /// them) for the view to be chosen.
    pub(super) view_quorum: usize,
    /// The round in progress; its next step is [`Timer::Rebuild`].
    pub(super) reset: Option<Reset>,
    /// The member just declared dead, for the rebuild it starts (see `Reset::dead`).
    pub(super) declared_dead: Option<Address>,
}

impl Recovery {
    pub(super) fn new() -> Recovery {
        Recovery {
            view_quorum: 1,
            ..Recovery::default()
        }
    }
}

impl Member {
    pub(super) fn failure_detected(&mut self, now: Instant, suspect: Address) {
        self.counters.failures_detected += 1;
        self.events.push_back(GroupEvent::Failure { suspect });
        match self.cfg.auto_reset {
            Some(min) => {
                self.rec.declared_dead = Some(suspect);
                self.start_reset(now, min)
            }
            None => self.state = State::Failed,
        }
    }

    /// Starts a rebuild with this member as coordinator.
    pub(super) fn start_reset(&mut self, now: Instant, min: MinMembers) {
        let declared_dead = self.rec.declared_dead.take();
        let (old_members, base, base_start) = match &self.rec.reset {
            // A retry keeps the view being rebuilt.
            Some(r) if r.coordinator => (r.old_members.clone(), r.base, r.base_start),
            // Only a view known to have committed is rebuilt (see `rebuild_base`).
            _ => {
                let (base, start, members) = self.rebuild_base();
                (members, base, start)
            }
        };
        // Saturating: any message of the group raises `epoch_seen`, a corrupt one up to the
        // largest number.
        let epoch = Epoch {
            number: self.rec.epoch_seen.max(self.epoch.number).saturating_add(1),
            coordinator: self.me,
        };
        self.rec.epoch_seen = epoch.number;
        self.counters.resets_started += 1;
        let (received, _, config_seq) = self.reported();
        let mut replies = HashMap::default();
        replies.insert(
            self.me,
            (self.rx.consumed_upto, received, self.rx.history.base()),
        );
        let mut configs = HashMap::default();
        configs.insert(self.me, config_seq);
        // Our own round binds us as any other: we accept no successor of the base from a
        // lower one (we count our own answer).
        self.rec.promised = self.rec.promised.max(epoch);
        self.rec.reset = Some(Reset {
            epoch,
            base,
            base_start,
            configs,
            coordinator: true,
            min_members: min.of(old_members.len()),
            old_members,
            replies,
            invites_sent: 0,
            best: self.accepted_value(base),
            proposal: None,
            accepts: Vec::new(),
            dead: declared_dead,
        });
        self.timers.set(Timer::Rebuild, now);
        self.enter_recovering();
        self.timers.stop(Timer::Blocked);
        self.reset_tick(now);
    }

    /// Stops taking part in the old epoch: no more ordering, no more records taken in.
    fn enter_recovering(&mut self) {
        self.state = State::Recovering;
        self.timers.stop(Timer::Blocked);
        self.rx.nak_due = false;
        self.out.ack_due = false;
        self.rx.retransmit.clear();
    }

    pub(super) fn on_invite(
        &mut self,
        now: Instant,
        hdr: GroupHeader,
        base: Epoch,
        config_seq: u64,
    ) {
        let e = hdr.epoch;
        if base == self.epoch && self.rec.committed.is_some() {
            // Only a view its coordinator knows committed is rebuilt: ours has. A round of our
            // own on the view before is moot (its members that learnt it refuse it).
            self.note_committed();
            if self
                .rec
                .reset
                .as_ref()
                .is_some_and(|r| r.coordinator && r.base < base)
            {
                if e <= self.rec.promised {
                    // (Our round raised our promise above this one: we would not answer it,
                    // and would wait for nothing. Rebuild our view ourselves.)
                    self.round_on_newer_base(now, base);
                    return;
                }
                self.end_reset();
            }
        }
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
        let (k_epoch, k_members) = match &self.rec.committed {
            Some(k) => (k.epoch, k.members.as_slice()),
            None => (self.epoch, self.members.as_slice()),
        };
        if base < k_epoch {
            // It rebuilds a view older than the last we know committed, whose successor a
            // majority of that same view made: answering would let it make a second one.
            // Show it ours. (A base above it is a view the coordinator knows committed and we
            // did not learn of; our answer counts from the view before, see
            // `on_invite_reply`.) Our answer, which names that view as the last we know
            // committed, does not count for the round: a coordinator in it learns so.
            let shown = match &self.rec.committed {
                Some(k) => Control::Announce(ViewNews {
                    epoch: k.epoch,
                    start: k.start,
                    sequencer: k.sequencer,
                    quorum: 1,
                    committed: true,
                    // (Not known here, and of no use for a view known committed.)
                    base: Epoch::default(),
                    donors: k.members.iter().map(|&m| (m, 0, 0)).collect(),
                }),
                None => Control::NewView,
            };
            self.push_control(hdr.from, shown);
            self.push_control(hdr.from, Control::InviteReply { epoch: e, base });
            return;
        }
        if e <= self.epoch || (self.state == State::Normal && !k_members.contains(&hdr.from)) {
            // An inviter that is behind, or not in our view at all: show it the view.
            if self.state == State::Normal {
                self.push_control(hdr.from, Control::NewView);
            }
            return;
        }
        if let Some((taken, coordinator)) =
            self.rec.reset.as_ref().map(|r| (r.epoch, r.coordinator))
        {
            if e == taken && !coordinator {
                // The coordinator invites again only the members it has not heard from: our
                // answer was lost. Without another, it counts us out, and losing one reply
                // per round can cost every rebuild its majority. (We took nothing in since
                // the first answer, so this one says the same.)
                self.push_control(hdr.from, Control::InviteReply { epoch: e, base });
            }
            if e <= taken {
                return;
            }
        }
        if e <= self.rec.promised {
            return;
        }
        if config_seq < self.reported().2 && base == k_epoch && self.state != State::Departing {
            // We hold a join or leave the coordinator lacks: it cannot count the quorum (see
            // `decide_view`), and answering would only keep us waiting on it. Coordinate
            // ourselves, with a higher epoch; it will answer us.
            // (`epoch_seen` already counts the invitation's: the new epoch is above it.)
            let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
            self.end_reset();
            self.start_reset(now, min);
            return;
        }
        // Not Normal here: our own view may lag the inviter's (it applied joins we have not),
        // so any higher invitation is taken.
        self.rec.promised = e;
        self.rec.reset = Some(Reset {
            epoch: e,
            base,
            base_start: 0,
            configs: HashMap::default(),
            coordinator: false,
            min_members: 0,
            old_members: Vec::new(),
            replies: HashMap::default(),
            invites_sent: 0,
            best: None,
            proposal: None,
            accepts: Vec::new(),
            dead: None,
        });
        // Give the coordinator this long to finish before taking over.
        self.timers.set(Timer::Rebuild, now + self.reset_patience());
        self.enter_recovering();
        self.push_control(hdr.from, Control::InviteReply { epoch: e, base });
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
        accepted: Option<(Epoch, ViewNews)>,
    ) {
        if view == self.epoch
            && self.rec.committed.is_some()
            && self
                .rec
                .reset
                .as_ref()
                .is_some_and(|r| r.coordinator && hdr.epoch == r.epoch && r.base < view)
        {
            // A member knows our view committed (it applied its View record): rebuild it, not
            // the view before.
            self.note_committed();
            self.end_reset();
            let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
            self.start_reset(now, min);
            return;
        }
        let Some(r) = self.rec.reset.as_mut() else {
            return;
        };
        if !r.coordinator
            || hdr.epoch != r.epoch
            || !r.old_members.contains(&hdr.from)
            || view > r.base
            || r.proposal.is_some()
        {
            // (A member in a newer view than ours refuses rather than answers.)
            return;
        }
        // A member of the view being rebuilt that never installed it (its announcement was
        // lost) is still in the view before, which that rebuild numbered anew after its
        // start: what it holds beyond the start is not this view's.
        let (received, config_seq) = if view < r.base {
            if consumed > r.base_start {
                // It delivered records of the view before that the base numbered anew (they
                // were accepted without the members that made the base): it cannot be part
                // of the group's order any more. Not counted, it is left out.
                return;
            }
            // (Its list is the view before's, which the base's own superseded.)
            (received.min(r.base_start), 0)
        } else {
            (received, config_seq)
        };
        r.replies.insert(hdr.from, (consumed, received, held_from));
        r.configs.insert(hdr.from, config_seq);
        if let Some((ballot, v)) = accepted.filter(|a| a.1.base == r.base && a.0 < r.epoch) {
            // (Accepted as a successor of our base, in an earlier round; whatever view the
            // member names as its own, which may be older: it answered that round all the
            // same.)
            if r.best.as_ref().is_none_or(|b| ballot > b.0) {
                r.best = Some((ballot, v));
            }
        }
        // (Our own answer is among the replies, but we may not be among the members: a
        // leaving sequencer rebuilds the view it leaves.)
        if r.old_members
            .iter()
            .all(|m| r.replies.contains_key(m) || r.dead == Some(*m))
        {
            self.decide_view(now);
        }
    }

    /// Second phase: a member that answered our round asks to accept `value`.
    pub(super) fn on_propose(&mut self, now: Instant, hdr: GroupHeader, value: ViewNews) {
        let e = hdr.epoch;
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return;
        }
        let known = self.rec.committed.as_ref().map_or(self.epoch, |k| k.epoch);
        if e < self.rec.promised || value.epoch <= known {
            // A later round has our promise, or the proposal is no successor of the last view
            // we know committed.
            return;
        }
        self.rec.promised = e;
        self.accept(e, value);
        let patience = self.reset_patience();
        if self
            .rec
            .reset
            .as_ref()
            .is_some_and(|r| !r.coordinator && r.epoch == e)
        {
            // (The coordinator is alive: give it as long again.)
            self.timers.set(Timer::Rebuild, now + patience);
        }
        self.push_control(hdr.from, Control::Accepted { epoch: e });
    }

    /// Second phase: a member accepted our proposal.
    pub(super) fn on_accepted(&mut self, now: Instant, hdr: GroupHeader) {
        let Some(r) = self.rec.reset.as_mut() else {
            return;
        };
        if !r.coordinator || hdr.epoch != r.epoch || !r.old_members.contains(&hdr.from) {
            return;
        }
        let Some(v) = r.proposal.clone() else {
            return;
        };
        if !r.accepts.contains(&hdr.from) {
            r.accepts.push(hdr.from);
        }
        if r.accepts.len() >= chosen_quorum(r) {
            self.adopt(now, v);
        }
    }

    /// A successor of our base was chosen: it is the group's. Everyone in the round learns it;
    /// we enter it (or are out of it), and rebuild it at once (its sequencer may be gone, and
    /// its members froze for our round).
    fn adopt(&mut self, now: Instant, mut v: ViewNews) {
        v.committed = true;
        let old = self
            .rec
            .reset
            .take()
            .map(|r| r.old_members)
            .unwrap_or_default();
        let me = self.me;
        for m in old.into_iter().filter(|&m| m != me) {
            self.push_control(m, Control::Announce(v.clone()));
        }
        if !v.donors.iter().any(|d| d.0 == me) {
            self.expel();
            return;
        }
        let from = v.sequencer;
        let epoch = v.epoch;
        self.on_new_view(now, from, v);
        if self.epoch == epoch && self.rec.committed.is_some() {
            // (We were in it already, not knowing it committed.)
            self.note_committed();
        }
        if self.rec.committed.is_none()
            && self.epoch == epoch
            && matches!(self.state, State::Normal | State::Recovering)
        {
            let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
            self.start_reset(now, min);
        } else if self.rec.reset.is_none() && self.state == State::Recovering {
            // (We could not enter it: try again later.)
            self.reset_failed(now, 0, 0);
        }
    }

    /// Coordinator and participant timers of a rebuild; a blocked group's retries.
    pub(super) fn reset_tick(&mut self, now: Instant) {
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return;
        }
        if let Some(at) = self.timers.get(Timer::Blocked) {
            if now >= at && self.state == State::Blocked {
                let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
                self.start_reset(now, min);
            }
            return;
        }
        let Some(r) = self.rec.reset.as_mut() else {
            return;
        };
        if !self.timers.expired(Timer::Rebuild, now) {
            return;
        }
        if !r.coordinator {
            // The coordinator went quiet: take over.
            let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
            self.end_reset();
            self.start_reset(now, min);
            return;
        }
        if let Some(v) = r.proposal.clone() {
            // Second phase: ask again whoever answered and has not accepted, a bounded number
            // of times.
            if r.invites_sent > self.cfg.probes_max {
                let (have, needed) = (r.accepts.len(), chosen_quorum(r));
                self.reset_failed(now, have, needed);
                return;
            }
            r.invites_sent += 1;
            self.timers
                .set(Timer::Rebuild, now + self.cfg.probe_interval);
            let epoch = r.epoch;
            let missing: Vec<Address> = r
                .replies
                .keys()
                .copied()
                .filter(|m| !r.accepts.contains(m))
                .collect();
            for m in missing {
                self.push_control(
                    m,
                    Control::Propose {
                        epoch,
                        value: v.clone(),
                    },
                );
            }
            return;
        }
        if r.invites_sent > self.cfg.probes_max {
            self.decide_view(now);
            return;
        }
        r.invites_sent += 1;
        self.timers
            .set(Timer::Rebuild, now + self.cfg.probe_interval);
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
        let r = self.rec.reset.as_ref().expect("resetting");
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
        if let Some((_, v)) = r.best.clone() {
            // A member that answered accepted a successor of the base in an earlier round: it
            // may have been chosen (accepted by enough members that every round since meets
            // one of them), so this round may only propose it again (Paxos). Once enough
            // members accept it in this round, it is the group's.
            let me = self.me;
            let epoch = r.epoch;
            let r = self.rec.reset.as_mut().expect("resetting");
            r.proposal = Some(v.clone());
            // (Our own acceptance counts only if we are a member of the base: a leaver
            // coordinating the view it leaves is none, and counts for no later round.)
            r.accepts = if r.old_members.contains(&me) {
                vec![me]
            } else {
                Vec::new()
            };
            r.invites_sent = 0;
            self.timers.set(Timer::Rebuild, now);
            let chosen = r.accepts.len() >= chosen_quorum(r);
            self.accept(epoch, v.clone());
            if chosen {
                self.adopt(now, v);
            } else {
                self.reset_tick(now);
            }
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
        let (epoch, base) = (r.epoch, r.base);
        // The new view is chosen once this many of its members hold its View record: every
        // later round on the base, which needs `min_members` answers, then hears from one of
        // them (see `chosen_quorum`).
        let quorum = (r.old_members.len() + 1)
            .saturating_sub(r.min_members)
            .clamp(1, survivors.len());
        let old: Vec<Address> = r.old_members.clone();
        let me = self.me;
        for m in old.into_iter().filter(|&m| m != me) {
            // Members left out learn it from the view too.
            self.push_control(m, Control::NewView);
        }
        if !survivors.contains(&self.me) {
            // We cannot be brought up to date ourselves: announce the view, then stop.
            // (Our announcement must not say the new view committed.)
            self.keep_committed_view();
            self.rec.view_quorum = quorum;
            self.rec.view_base = base;
            self.epoch = epoch;
            self.rec.start_seq = start;
            self.sequencer = sequencer;
            self.members = survivors;
            self.rec.view_donors = donors;
            self.expel();
            return;
        }
        self.install_view(now, epoch, start, sequencer, &donors, quorum);
        self.rec.view_base = base;
        // The announcements above go out with the view just installed, and name its members
        // as our list has them (a survivor an earlier rebuild left out is not among them).
        let members = &self.members;
        self.rec.view_donors.retain(|d| members.contains(&d.0));
        // (The survivors our list drops left, or an earlier rebuild left them out: they
        // answer no round on the base, so the quorum need not count them.)
        self.rec.view_quorum = self.rec.view_quorum.min(self.rec.view_donors.len()).max(1);
        if self.seqr.is_some() {
            // As the new sequencer, we may be the whole quorum now.
            self.advance_accept(now);
        }
        self.counters.resets_completed += 1;
    }

    /// Too few for a view: the group blocks, and tries again after `reset_retry`.
    fn reset_failed(&mut self, now: Instant, survivors: usize, needed: usize) {
        self.counters.resets_failed += 1;
        self.events
            .push_back(GroupEvent::ResetFailed { survivors, needed });
        self.state = State::Blocked;
        self.timers.set(Timer::Blocked, now + self.cfg.reset_retry);
    }

    fn expel(&mut self) {
        self.rx.retransmit.clear();
        self.state = State::Expelled;
        self.seqr = None;
        self.end_reset();
        self.timers.stop(Timer::Blocked);
        self.events.push_back(GroupEvent::Expelled);
    }

    pub(super) fn on_new_view(&mut self, now: Instant, from: Address, v: ViewNews) {
        let members: Vec<Address> = v.donors.iter().map(|s| s.0).collect();
        let (epoch, start_seq, sequencer) = (v.epoch, v.start, v.sequencer);
        if matches!(self.state, State::Joining | State::Left | State::Expelled) {
            return;
        }
        if v.committed && epoch == self.epoch && self.rec.committed.is_some() {
            // Our view committed, which we had not learnt: a round of ours on the view
            // before is moot, and one on ours replaces it.
            self.note_committed();
            if self.round_on_newer_base(now, epoch) {
                return;
            }
        }
        if epoch == self.epoch && self.timers.is_set(Timer::Leave) && !members.contains(&self.me) {
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
        if v.committed
            && epoch == self.rec.view_base
            && self.rec.committed.as_ref().is_some_and(|k| k.epoch < epoch)
        {
            // The view our current one was made from, by a round we took part in, committed
            // (we never learnt it there): rebuilds are rounds on it from now on.
            self.rec.committed = Some(Committed {
                epoch,
                start: start_seq,
                members,
                sequencer,
            });
            self.rec.accepted.retain(|a| a.1.base >= epoch);
            self.round_on_newer_base(now, epoch);
            return;
        }
        // A view that committed, older than ours but newer than the view the round that made
        // ours was on: ours lost (it is no successor of the committed lineage), and we take
        // this one, or are out.
        let ours_lost = v.committed
            && epoch < self.epoch
            && epoch > self.rec.view_base
            && self.rec.committed.as_ref().is_some_and(|k| k.epoch < epoch);
        if epoch <= self.epoch && !ours_lost {
            return;
        }
        if !members.contains(&self.me) {
            if v.committed {
                // Left out of a view that was chosen: whatever rebuild we take part in is moot.
                self.expel();
            }
            // (One that was only made may still lose, and we may count for the round that
            // decides instead: we learn of it when it is chosen, or our own round finds out.)
            return;
        }
        if epoch < self.rec.promised && !v.committed {
            // We answered a later invitation with our state frozen; taking in an earlier
            // view's records now could contradict that answer. (Our own rebuild, still
            // undecided, is no such promise. And a view that committed is the successor of
            // the one that round is on, which can then never succeed: we enter it.)
            return;
        }
        let counted = self.counted_in(&v.donors);
        if sequencer == self.me
            && (start_seq > self.rx.received_upto.min(counted)
                || start_seq.saturating_add(1) < self.rx.history.base())
        {
            // A coordinator picks the new sequencer with the start it reported, so this view
            // was not made from our state (a corrupt or forged message): we could not order
            // from it (we lack records up to its start, or trimmed those after it).
            return;
        }
        if start_seq == u64::MAX {
            // (No record could follow it: corrupt.)
            return;
        }
        if self.rx.applied_upto > start_seq.min(counted) {
            // We applied (and may have delivered) records the view numbers anew: they were
            // accepted in a view its base superseded without them (we were cut off with a
            // sequencer that accepted them alone). We cannot be part of it.
            self.expel();
            return;
        }
        self.install_view(now, epoch, start_seq, sequencer, &v.donors, v.quorum);
        self.rec.view_base = v.base;
        if v.committed {
            self.note_committed();
        }
    }

    /// How far a rebuild's announcement counted our history (`u64::MAX` if it does not say).
    fn counted_in(&self, donors: &[(Address, u64, u64)]) -> u64 {
        donors
            .iter()
            .find(|d| d.0 == self.me && d.1 > 0)
            .map_or(u64::MAX, |d| d.2)
    }

    /// Leaving a view known committed for one that is not: it is the one rebuilds are rounds
    /// on until the new one is known committed too (its list as a rebuild of it would count
    /// it).
    fn keep_committed_view(&mut self) {
        if self.rec.committed.is_none() {
            self.rec.committed = Some(Committed {
                epoch: self.epoch,
                start: self.rec.start_seq,
                members: self.members.clone(),
                sequencer: self.sequencer,
            });
        }
    }

    /// `epoch` is now the last view we know committed: a round we coordinate on an older one
    /// is moot, and one on it replaces it. Returns whether it did.
    fn round_on_newer_base(&mut self, now: Instant, epoch: Epoch) -> bool {
        if !self
            .rec
            .reset
            .as_ref()
            .is_some_and(|r| r.coordinator && r.base < epoch)
        {
            return false;
        }
        self.end_reset();
        let min = self.cfg.auto_reset.unwrap_or(MinMembers::Majority);
        self.start_reset(now, min);
        true
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
        quorum: usize,
    ) {
        self.keep_committed_view();
        // The list the new view starts from: the last committed view's, with the records we
        // hold numbered in it (not the list of a view we leave uncommitted, cut down to its
        // own survivors, which are no longer the question).
        let base_list = self
            .rec
            .committed
            .as_ref()
            .map(|k| k.members.clone())
            .expect("set above");
        let survivors: Vec<Address> = donors.iter().map(|d| d.0).collect();
        self.rec.view_donors = donors.to_vec();
        self.rec.view_quorum = quorum;
        self.rx.nak_attempts = 0;
        self.end_reset();
        self.timers.stop(Timer::Blocked);
        self.state = State::Normal;
        self.epoch = epoch;
        self.rec.epoch_seen = self.rec.epoch_seen.max(epoch.number);
        self.rec.start_seq = start_seq;
        self.sequencer = sequencer;
        self.seqr = None;
        self.watch = Watch::new(now);
        self.arm_watch();
        // Keep only what we received in order (and so reported): records held out of order
        // beyond it may be from an epoch the group has since renumbered. The coordinator may
        // have counted less of it (we were a view behind): keep only what it counted.
        let counted = self.counted_in(donors);
        self.rx.received_upto = self.rx.received_upto.min(start_seq).min(counted);
        // Stability known in a view given up does not hold for this one, which may count a
        // member that view left out (a round on the last committed view brings it back): no
        // member is assumed to have consumed beyond what it received (its donor entry) until
        // it reports, or its records could be trimmed everywhere before it fetches them.
        let floor = donors.iter().map(|d| d.2).min().unwrap_or(0);
        self.rx.stable_upto = self.rx.stable_upto.min(floor);
        self.rx.history.truncate_after(self.rx.received_upto);
        self.rx.ordered_seen = start_seq;
        // Records up to the start stay tentative where they were: the new sequencer accepts
        // them as any other, once r members besides it hold them (the View record after them
        // once a quorum of the view does), so a rebuild never delivers what only one member
        // holds.
        self.rx.accepted_upto = self.rx.accepted_upto.min(start_seq);
        self.timers.stop(Timer::Nak);
        self.resubmit_all();
        if self.rx.received_upto < start_seq {
            self.nak_if_due(now);
        }
        // The member list as of the start (joins and leaves we hold but have not applied
        // included), less those the rebuild left out. The new sequencer holds everything up
        // to the start, so its list is the most advanced one, and its View record makes it
        // everyone's.
        let before = self.members_through_from(&base_list, self.rx.received_upto);
        self.members = before
            .iter()
            .copied()
            .filter(|m| survivors.contains(m))
            .collect();
        let members = self.members.clone();
        self.rx.unordered.retain(|(s, _), _| members.contains(s));
        if sequencer == self.me {
            debug_assert_eq!(self.rx.received_upto, start_seq);
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

    /// The successor of view `base` we accepted in the highest round, if any: holding a
    /// rebuilt view's View record is accepting it in the round that made it.
    pub(super) fn accepted_value(&self, base: Epoch) -> Option<(Epoch, ViewNews)> {
        let holding = (self.rec.committed.is_some()
            && self.rx.received_upto > self.rec.start_seq
            && self.rec.view_base == base)
            .then(|| (self.epoch, self.view_news()));
        let explicit = self
            .rec
            .accepted
            .iter()
            .filter(|a| a.1.base == base)
            .max_by_key(|a| a.0)
            .cloned();
        match (holding, explicit) {
            (Some(h), Some(a)) => Some(if a.0 > h.0 { a } else { h }),
            (h, a) => h.or(a),
        }
    }

    /// Accepts `value` in round `ballot`: it replaces what we accepted for the same base in an
    /// earlier round.
    pub(super) fn accept(&mut self, ballot: Epoch, value: ViewNews) {
        let base = value.base;
        self.rec.accepted.retain(|a| a.1.base != base);
        self.rec.accepted.push((ballot, value));
        if self.rec.accepted.len() > super::ACCEPTED_MAX {
            // (Bounded: the oldest base goes, the new one if it is the oldest; a round on it
            // is long stale.)
            if let Some(i) =
                (0..self.rec.accepted.len()).min_by_key(|&i| self.rec.accepted[i].1.base)
            {
                self.rec.accepted.remove(i);
            }
        }
    }

    /// The current view is known committed: it is the base of every rebuild from now on, and
    /// what was accepted as a successor of an older one no longer matters.
    pub(super) fn note_committed(&mut self) {
        self.rec.committed = None;
        let epoch = self.epoch;
        self.rec.accepted.retain(|a| a.1.base >= epoch);
    }

    /// The current view as a `NewView` announces it. Not known committed, its members are
    /// those its commit is counted in: the View record's list, if we hold it, or else the
    /// rebuild's announcement.
    pub(super) fn view_news(&self) -> ViewNews {
        let donor = |m: Address| {
            let d = self.rec.view_donors.iter().find(|d| d.0 == m);
            d.copied().unwrap_or((m, 0, 0))
        };
        let donors = match &self.rec.committed {
            None => self.members.iter().map(|&m| donor(m)).collect(),
            Some(_) => match self.rx.history.get(self.rec.start_seq.saturating_add(1)) {
                Some(e)
                    if self.rx.received_upto > self.rec.start_seq && e.kind == RecordKind::View =>
                {
                    let (members, _) = super::view_payload(e);
                    members.into_iter().map(donor).collect()
                }
                _ => self.rec.view_donors.clone(),
            },
        };
        ViewNews {
            epoch: self.epoch,
            start: self.rec.start_seq,
            sequencer: self.sequencer,
            quorum: self.rec.view_quorum,
            committed: self.rec.committed.is_none(),
            base: self.rec.view_base,
            donors,
        }
    }

    /// The members a rebuild needs a majority of: the list as of the last record we hold,
    /// leaves included (a leaver is gone and will not answer), less joiners whose join we
    /// have not applied (not yet told they are in, they cannot answer either).
    fn quorum_members(&self) -> Vec<Address> {
        self.quorum_members_from(&self.members, self.rx.received_upto)
    }

    /// `quorum_members` from an applied list `applied`, counting records up to `upto`.
    fn quorum_members_from(&self, applied: &[Address], upto: u64) -> Vec<Address> {
        let mut m = self.members_through_from(applied, upto);
        for q in self.rx.applied_upto + 1..=upto {
            if let Some(e) = self
                .rx
                .history
                .get(q)
                .filter(|e| e.kind == RecordKind::Join)
            {
                let who = super::addr_payload(e);
                if !applied.contains(&who) {
                    m.retain(|&x| x != who);
                }
            }
        }
        m
    }

    /// The view a rebuild this member coordinates is a round on: the last view it knows
    /// committed (epoch, start, the members whose majority the round needs). A view that has
    /// not committed is never rebuilt: a majority of it need not meet the quorum of a higher
    /// round that made a sibling of it from the same committed view (Viewstamped Replication
    /// rebuilds only committed views for the same reason).
    pub(super) fn rebuild_base(&self) -> (Epoch, u64, Vec<Address>) {
        match &self.rec.committed {
            Some(k) => {
                let upto = self.rx.received_upto.min(self.rec.start_seq);
                (k.epoch, k.start, self.quorum_members_from(&k.members, upto))
            }
            None => (self.epoch, self.rec.start_seq, self.quorum_members()),
        }
    }

    /// What this member reports in a rebuild, in the numbering of its last view known
    /// committed: how far it received, that view, and how recent its member list is. In a
    /// view not known committed it holds nothing of that view beyond its View record (the
    /// record is a barrier, and anything after it comes with the accept that makes this
    /// member apply it), so it reports up to the view's start.
    pub(super) fn reported(&self) -> (u64, Epoch, u64) {
        match &self.rec.committed {
            None => (self.rx.received_upto, self.epoch, self.config_seq()),
            Some(k) => {
                let upto = self.rx.received_upto.min(self.rec.start_seq);
                (upto, k.epoch, self.config_seq_upto(upto))
            }
        }
    }

    /// The sequence number of the last membership record we hold (applied or not).
    pub(super) fn config_seq(&self) -> u64 {
        self.config_seq_upto(self.rx.received_upto)
    }

    /// The sequence number of the last membership record we hold up to `upto`.
    fn config_seq_upto(&self, upto: u64) -> u64 {
        (self.rx.applied_upto + 1..=upto)
            .rev()
            .find(|&q| {
                self.rx
                    .history
                    .get(q)
                    .is_some_and(|e| e.kind != RecordKind::Message)
            })
            .unwrap_or(self.ms.config_applied)
    }

    /// The member list after applying the joins and leaves held up to `upto` to the applied
    /// list `applied`.
    fn members_through_from(&self, applied: &[Address], upto: u64) -> Vec<Address> {
        let mut m = applied.to_vec();
        for seq in self.rx.applied_upto + 1..=upto {
            let Some(e) = self.rx.history.get(seq) else {
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
        self.arm_multicast();
        let s = self.seqr.as_mut().expect("sequencer");
        let e = Entry {
            sender: epoch.coordinator,
            msg_id: epoch.number,
            kind: RecordKind::View,
            payload: Some(payload),
            via_bb: false,
        };
        s.note_unsent(&e, self.me);
        assert_eq!(self.rx.history.insert(seq, e), Ok(true));
        self.rx.received_upto = seq;
        self.rx.ordered_seen = seq;
        self.advance_accept(now);
    }

    pub(super) fn apply_view(&mut self, now: Instant, seq: u64) {
        if seq <= self.rec.start_seq {
            // An earlier rebuild's record, caught up on: the current view already counts it.
            return;
        }
        // The new sequencer's list is the group's from here on.
        let (members, _) = super::view_payload(self.rx.history.get(seq).expect("applied"));
        if !members.contains(&self.me) {
            self.expel();
            return;
        }
        self.members = members;
        // Its View record is accepted only once its quorum holds it: the view committed.
        self.note_committed();
        if let Some(s) = self.seqr.as_mut() {
            if s.barrier == Some(seq) {
                s.barrier = None;
            }
            self.order_next(now);
        }
    }

    /// The round is over (or abandoned).
    pub(super) fn end_reset(&mut self) {
        self.rec.reset = None;
        self.timers.stop(Timer::Rebuild);
    }
}

/// How many members of the base must accept a proposal in one round for it to be chosen: as
/// many as make every round's `min_members` answers include one of them.
fn chosen_quorum(r: &Reset) -> usize {
    (r.old_members.len() + 1)
        .saturating_sub(r.min_members)
        .max(1)
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
