//! View changes: a suspected failure, a join or a leave makes the coordinator (the
//! lowest-ranked member not suspected) run the flush, Paxos over the old view:
//! 1. `Flush(ballot)`: every member hands up a [`super::Upcall::Flush`] (the layer above casts
//!    what must still be in this view), then freezes its delivery at what it has received and
//!    answers `FlushOk` with that vector and any proposal it accepted;
//! 2. once every member not suspected answered (or a majority did, after `flush_timeout`), the
//!    coordinator proposes: the proposal accepted with the highest ballot if there is one,
//!    else the members that answered (less leavers, plus joiners) and the cut, for each
//!    stream the most any answer holds. It fetches every cast up to the cut, then sends
//!    `Propose`; a member accepts once it holds every cast up to the cut;
//! 3. once a majority of the old view accepted, `Commit`: each member of the next view hands
//!    up every cast up to the cut and nothing past it, and installs the view. Members left
//!    out learn that they are (`Expelled`, or `Left` after a leave).
//!
//! A member that misses the commit keeps talking in the old view; whoever hears that and kept
//! the commit sends it again.

use super::deliver::Pending;
use super::msg::{Header, VsMsg};
use super::timer::Timer;
use super::{Ballot, Dest, Proposal, ViewId, Vs, VsState};
use crate::addr::Address;
use crate::time::Instant;
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

/// Most joiners admitted at once (the rest wait for a later view).
pub(super) const JOINERS_MAX: usize = 16;

#[derive(Debug, Default)]
pub(super) struct Flush {
    /// Coordinator: joins and leaves waiting for the next view change.
    pub joiners: BTreeSet<Address>,
    pub leavers: BTreeSet<Address>,
    /// Acceptor: the highest ballot promised in this view.
    promised: Option<Ballot>,
    /// Acceptor: delivery stops here (by rank) once the first flush of the view was answered.
    frozen: Option<Vec<u64>>,
    /// Acceptor: a flush to answer once the layer above is ready.
    awaiting_ready: Option<(Ballot, Address)>,
    accepted: Option<(Ballot, Proposal)>,
    /// Acceptor: a proposal to accept once every cast up to its cut is here.
    to_accept: Option<(Ballot, Proposal, Address)>,
    /// A commit to install once every cast up to its cut is here.
    to_commit: Option<(Ballot, Proposal, Address)>,
    /// When `to_commit` came: a member that cannot get the casts up to the cut for long
    /// gives up (see `flush_tick`).
    commit_since: Option<Instant>,
    /// The last flush message from a coordinator (a stalled one is suspected).
    touched: Option<Instant>,
    /// Suspicions last reported to the coordinator.
    pub suspects_sent_at: Option<Instant>,
    round: Option<Round>,
}

/// A round's first-phase answers: each member's frozen vector and accepted proposal.
type Answers = BTreeMap<Address, (Vec<u64>, Option<(Ballot, Proposal)>)>;

#[derive(Debug)]
struct Round {
    ballot: Ballot,
    started: Instant,
    last_sent: Instant,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    Prepare {
        answers: Answers,
    },
    /// The coordinator gathers every cast up to the cut; `sources[s]` holds stream `s`'s.
    Fetch {
        proposal: Proposal,
        acceptors: Vec<Address>,
        sources: Vec<Address>,
    },
    Accept {
        proposal: Proposal,
        acceptors: Vec<Address>,
        accepted: BTreeSet<Address>,
    },
}

impl Flush {
    pub fn frozen_set(&self) -> bool {
        self.frozen.is_some()
    }

    /// Whether this member coordinates a round.
    pub fn running(&self) -> bool {
        self.round.is_some()
    }

    /// For [`Vs::debug_state`].
    pub fn debug(&self) -> String {
        let round = self.round.as_ref().map(|r| {
            let phase = match &r.phase {
                Phase::Prepare { answers } => format!(
                    "prepare answers {:?}",
                    answers.keys().map(|a| a.site).collect::<Vec<_>>()
                ),
                Phase::Fetch { proposal, .. } => format!("fetch cut {:?}", proposal.cut),
                Phase::Accept {
                    proposal, accepted, ..
                } => format!(
                    "accept cut {:?} accepted {:?}",
                    proposal.cut,
                    accepted.iter().map(|a| a.site).collect::<Vec<_>>()
                ),
            };
            format!(
                "ballot {}@{} started {} last_sent {} {phase}",
                r.ballot.number, r.ballot.coordinator.site, r.started.0, r.last_sent.0
            )
        });
        format!(
            "round {:?} promised {:?} frozen {:?} awaiting_ready {} accepted {:?} to_accept {:?} to_commit {:?} touched {:?} joiners {} leavers {}",
            round,
            self.promised.map(|b| (b.number, b.coordinator.site)),
            self.frozen,
            self.awaiting_ready.is_some(),
            self.accepted.as_ref().map(|(b, p)| (b.number, b.coordinator.site, p.cut.clone())),
            self.to_accept.as_ref().map(|(b, p, _)| (b.number, p.cut.clone())),
            self.to_commit.as_ref().map(|(b, p, _)| (b.number, p.cut.clone())),
            self.touched.map(|t| t.0),
            self.joiners.len(),
            self.leavers.len()
        )
    }

    /// Delivery limit of stream `r` while frozen.
    pub fn deliver_limit(&self, r: usize) -> Option<u64> {
        self.frozen.as_ref().map(|f| f.get(r).copied().unwrap_or(0))
    }

    /// Casts of stream `r` past this are never delivered in this view (a commit's cut).
    pub fn receive_limit(&self, r: usize) -> Option<u64> {
        self.to_commit
            .as_ref()
            .map(|(_, p, _)| p.cut.get(r).copied().unwrap_or(0))
    }

    /// Where to fetch stream `r`'s casts during a view change.
    pub fn fetch_from(&self, r: usize) -> Option<Address> {
        if let Some(Round {
            phase: Phase::Fetch { sources, .. },
            ..
        }) = &self.round
        {
            return sources.get(r).copied();
        }
        self.to_commit
            .as_ref()
            .or(self.to_accept.as_ref())
            .map(|(_, _, from)| *from)
    }

    /// Who sent the commit this member waits to install, if any.
    pub fn commit_source(&self) -> Option<Address> {
        self.to_commit.as_ref().map(|(_, _, from)| *from)
    }

    /// Whether a view change waits on casts (so arrivals should be checked against it).
    pub fn fetching(&self) -> bool {
        self.to_commit.is_some()
            || self.to_accept.is_some()
            || matches!(
                self.round,
                Some(Round {
                    phase: Phase::Fetch { .. } | Phase::Prepare { .. },
                    ..
                })
            )
    }

    /// When the flush wants [`Vs::handle_timeout`]: the next retry, the end of the first
    /// phase's wait, or when a quiet coordinator is suspected.
    pub fn timeout(&self, retry: Duration, wait: Duration, flushing: bool) -> Option<Instant> {
        let give_up = self
            .commit_since
            .filter(|_| self.to_commit.is_some())
            .map(|t| t + wait * 3);
        let t = self.timeout_of_round(retry, wait, flushing);
        match (t, give_up) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn timeout_of_round(&self, retry: Duration, wait: Duration, flushing: bool) -> Option<Instant> {
        if let Some(r) = &self.round {
            let t = r.last_sent + retry;
            // The end of the first phase's wait, until a tick at or after it (which sends the
            // silent the flush again): past it, it stayed due for good and the caller spun.
            return Some(match r.phase {
                Phase::Prepare { .. } if r.last_sent < r.started + wait => t.min(r.started + wait),
                _ => t,
            });
        }
        if flushing {
            return Some(self.touched.map_or(Instant::ZERO, |t| t + wait * 3));
        }
        None
    }
}

impl Vs {
    /// The layer above has cast what it must in this view: freeze and answer the flush.
    pub fn flush_ready(&mut self, now: Instant) {
        let Some((ballot, coord)) = self.fl.awaiting_ready.take() else {
            return;
        };
        if self.fl.frozen.is_none() {
            self.fl.frozen = Some(self.received_vector());
        }
        self.answer_flush(now, ballot, coord);
        self.arm_flush();
    }

    fn answer_flush(&mut self, now: Instant, ballot: Ballot, coord: Address) {
        let frozen = self.fl.frozen.clone().expect("frozen before answering");
        let accepted = self.fl.accepted.clone();
        if coord == self.me {
            let h = self.header();
            self.on_flush_ok(now, &h, ballot, frozen, accepted);
        } else {
            self.queue(
                Dest::To(coord),
                &VsMsg::FlushOk {
                    ballot,
                    frozen,
                    accepted,
                },
            );
        }
    }

    pub(super) fn on_flush(&mut self, now: Instant, h: &Header, ballot: Ballot) {
        if h.view < self.view {
            return self.tell_commit(h.from, h.view);
        }
        if !matches!(self.state, VsState::Normal | VsState::Flushing)
            || !self.in_view(h) && h.from != self.me
            || self.fl.promised.is_some_and(|p| ballot < p)
        {
            return;
        }
        self.fl.promised = Some(ballot);
        self.fl.touched = Some(now);
        self.enter_flushing(now);
        if self.fl.frozen.is_some() {
            return self.answer_flush(now, ballot, h.from);
        }
        if self.fl.awaiting_ready.is_none() {
            self.delivery.pending.push_back(Pending::Flush);
        }
        self.fl.awaiting_ready = Some((ballot, h.from));
    }

    pub(super) fn on_flush_ok(
        &mut self,
        now: Instant,
        h: &Header,
        ballot: Ballot,
        frozen: Vec<u64>,
        accepted: Option<(Ballot, Proposal)>,
    ) {
        let n = self.members.len();
        if !(self.in_view(h) || h.from == self.me) || frozen.len() != n {
            return;
        }
        if accepted.as_ref().is_some_and(|(_, p)| p.cut.len() != n) {
            self.counters.dropped_bad += 1;
            return;
        }
        let Some(round) = self.fl.round.as_mut() else {
            return;
        };
        if round.ballot != ballot {
            return;
        }
        if let Phase::Prepare { answers } = &mut round.phase {
            answers.insert(h.from, (frozen, accepted));
        }
        self.advance(now);
    }

    pub(super) fn on_propose(&mut self, now: Instant, h: &Header, ballot: Ballot, p: Proposal) {
        if h.view < self.view {
            return self.tell_commit(h.from, h.view);
        }
        if !self.in_view(h)
            || p.cut.len() != self.members.len()
            || self.fl.promised.is_some_and(|x| ballot < x)
            || self.fl.frozen.is_none()
        {
            return;
        }
        self.fl.promised = Some(ballot);
        self.fl.touched = Some(now);
        self.enter_flushing(now);
        self.fl.to_accept = Some((ballot, p, h.from));
        self.flush_progress(now);
    }

    pub(super) fn on_accept(&mut self, now: Instant, h: &Header, ballot: Ballot) {
        if !(self.in_view(h) || h.from == self.me) {
            return;
        }
        if let Some(Round {
            ballot: b,
            phase:
                Phase::Accept {
                    acceptors,
                    accepted,
                    ..
                },
            ..
        }) = self.fl.round.as_mut()
        {
            if *b == ballot && acceptors.contains(&h.from) {
                accepted.insert(h.from);
            }
        }
        self.advance(now);
    }

    pub(super) fn on_commit(&mut self, now: Instant, h: &Header, ballot: Ballot, p: Proposal) {
        if self.state == VsState::Joining {
            // The view it installs is numbered one past the Commit's, and must itself have a
            // successor (a view change names `number + 1`): a Commit numbered near `u64::MAX`
            // is corrupt or forged, ignored.
            let number = h.view.number.checked_add(1).filter(|&n| n < u64::MAX);
            if let Some(number) = number.filter(|_| {
                p.members.contains(&self.me) && p.members.len() <= super::msg::MEMBERS_MAX
            }) {
                let id = ViewId {
                    number,
                    coordinator: p.coordinator,
                };
                // Kept, like every member's, to tell members of the old view that missed it:
                // a joiner may be the only one left who has it (its coordinator left with
                // the view change, and the other commits were lost).
                self.ms.remember_commit(h.view, ballot, p.clone());
                self.install(now, id, p.members, Vec::new());
            }
            return;
        }
        if h.view != self.view || p.cut.len() != self.members.len() {
            return;
        }
        if self.view.number == u64::MAX {
            // The last view number has no successor to install: a member there stays put.
            self.counters.dropped_bad += 1;
            return;
        }
        if !p.members.contains(&self.me) {
            // Left out: what this member delivered past the cut is its own.
            self.ms.remember_commit(self.view, ballot, p);
            return self.left_out();
        }
        if self.fl.frozen.is_none() {
            // In the next view without having answered a flush of this one: cannot happen
            // (the members come from the answers), so the message is not to be trusted.
            self.counters.dropped_bad += 1;
            return;
        }
        self.fl.touched = Some(now);
        if self.fl.to_commit.is_none() {
            self.fl.commit_since = Some(now);
        }
        self.fl.to_commit = Some((ballot, p, h.from));
        self.flush_progress(now);
    }

    /// Whether every cast up to `cut` is here.
    fn holds(&self, cut: &[u64]) -> bool {
        self.streams.iter().zip(cut).all(|(s, &c)| s.received >= c)
    }

    /// Makes the NAK machinery ask for every cast up to `cut`.
    fn want(&mut self, cut: &[u64]) {
        for (s, &c) in self.streams.iter_mut().zip(cut) {
            s.highest_known = s.highest_known.max(c);
        }
        self.arm_nak();
    }

    /// Completes what waited for casts: an acceptance, a commit, the coordinator's fetch.
    pub(super) fn flush_progress(&mut self, now: Instant) {
        if let Some((ballot, p, from)) = self.fl.to_commit.clone() {
            if self.holds(&p.cut) {
                self.fl.to_commit = None;
                return self.apply_commit(now, ballot, p, from);
            }
            self.want(&p.cut);
        }
        if let Some((ballot, p, from)) = self.fl.to_accept.clone() {
            if self.fl.promised.is_some_and(|x| ballot < x) {
                // Promised a higher ballot while the casts came in: accepting now would break
                // that promise (the `FlushOk` to it said nothing was accepted, so its round
                // may propose another view, and two could commit). Paxos; unit test
                // `no_accept_of_a_lower_ballot_after_a_higher_promise`.
                self.fl.to_accept = None;
            } else if self.holds(&p.cut) {
                self.fl.to_accept = None;
                self.fl.accepted = Some((ballot, p));
                if from == self.me {
                    let h = self.header();
                    self.on_accept(now, &h, ballot);
                } else {
                    self.queue(Dest::To(from), &VsMsg::Accept { ballot });
                }
            } else {
                self.want(&p.cut);
            }
        }
        self.advance(now);
    }

    /// Coordinator: moves the round on when it can.
    fn advance(&mut self, now: Instant) {
        let Some(round) = self.fl.round.as_mut() else {
            return;
        };
        let n = self.members.len();
        let majority = n / 2 + 1;
        match &mut round.phase {
            Phase::Prepare { answers } => {
                let waiting = self
                    .members
                    .iter()
                    .any(|a| !self.detector.suspects.contains(a) && !answers.contains_key(a));
                let timed_out = now >= round.started + self.cfg.flush_timeout;
                if answers.len() < majority || (waiting && !timed_out) {
                    return;
                }
                let answers = std::mem::take(answers);
                let (proposal, sources) = self.make_proposal(&answers);
                let acceptors: Vec<Address> = answers.keys().copied().collect();
                let round = self.fl.round.as_mut().expect("round");
                round.phase = Phase::Fetch {
                    proposal,
                    acceptors,
                    sources,
                };
                round.last_sent = Instant::ZERO;
                self.advance(now)
            }
            Phase::Fetch {
                proposal,
                acceptors,
                ..
            } => {
                if !self
                    .streams
                    .iter()
                    .zip(&proposal.cut)
                    .all(|(s, &c)| s.received >= c)
                {
                    let cut = proposal.cut.clone();
                    self.want(&cut);
                    return;
                }
                let proposal = proposal.clone();
                let acceptors = std::mem::take(acceptors);
                let ballot = round.ballot;
                round.phase = Phase::Accept {
                    proposal: proposal.clone(),
                    acceptors: acceptors.clone(),
                    accepted: BTreeSet::new(),
                };
                round.last_sent = now;
                for a in acceptors {
                    if a == self.me {
                        let h = self.header();
                        self.on_propose(now, &h, ballot, proposal.clone());
                    } else {
                        self.queue(
                            Dest::To(a),
                            &VsMsg::Propose {
                                ballot,
                                proposal: proposal.clone(),
                            },
                        );
                    }
                }
            }
            Phase::Accept {
                proposal, accepted, ..
            } => {
                let old = accepted.iter().filter(|a| self.members.contains(a)).count();
                if old < majority {
                    return;
                }
                let proposal = proposal.clone();
                let ballot = round.ballot;
                self.fl.round = None;
                self.decide(now, ballot, proposal);
            }
        }
    }

    /// The proposal of a round whose first phase is done, and where to fetch each stream.
    fn make_proposal(&self, answers: &Answers) -> (Proposal, Vec<Address>) {
        let adopted = answers
            .iter()
            .filter_map(|(a, (_, acc))| acc.as_ref().map(|(b, p)| (*b, p, *a)))
            .max_by_key(|(b, _, _)| *b);
        if let Some((_, p, holder)) = adopted {
            // Whoever accepted it holds every cast up to its cut.
            return (p.clone(), vec![holder; self.members.len()]);
        }
        let n = self.members.len();
        let mut cut = vec![0u64; n];
        let mut sources = vec![self.me; n];
        for (a, (frozen, _)) in answers {
            for s in 0..n {
                if frozen[s] > cut[s] {
                    cut[s] = frozen[s];
                    sources[s] = *a;
                }
            }
        }
        let mut members: Vec<Address> = self
            .members
            .iter()
            .copied()
            .filter(|a| answers.contains_key(a) && !self.fl.leavers.contains(a))
            .collect();
        for &j in self.fl.joiners.iter().take(JOINERS_MAX) {
            if !members.contains(&j) && members.len() < super::msg::MEMBERS_MAX {
                members.push(j);
            }
        }
        if members.is_empty() {
            // Everyone is leaving: the lowest-ranked answer stays, alone.
            members.extend(answers.keys().next().copied());
        }
        (
            Proposal {
                coordinator: self.me,
                members,
                cut,
            },
            sources,
        )
    }

    /// A majority accepted: tell everyone, and install.
    fn decide(&mut self, now: Instant, ballot: Ballot, p: Proposal) {
        let mut to: BTreeSet<Address> = self.members.iter().copied().collect();
        to.extend(p.members.iter().copied());
        to.remove(&self.me);
        for a in to {
            self.queue(
                Dest::To(a),
                &VsMsg::Commit {
                    ballot,
                    proposal: p.clone(),
                },
            );
        }
        let h = self.header();
        self.on_commit(now, &h, ballot, p);
    }

    /// Every cast up to the cut is here: hand them up, then install the next view.
    fn apply_commit(&mut self, now: Instant, ballot: Ballot, p: Proposal, _from: Address) {
        // `on_commit` refuses a commit of the last view number, so this is always there.
        let Some(number) = self.view.number.checked_add(1) else {
            return;
        };
        for (r, &c) in p.cut.iter().enumerate() {
            let s = &mut self.streams[r];
            while s.delivered < c {
                let seq = s.delivered + 1;
                let payload = s.held.get(seq).expect("held up to the cut").to_vec();
                s.delivered = seq;
                self.delivery.pending.push_back(Pending::Cast {
                    sender: s.addr,
                    seq,
                    payload,
                });
            }
        }
        let old = self.view;
        let held = self
            .streams
            .iter_mut()
            .zip(&p.cut)
            .map(|(s, &c)| {
                let mut h = std::mem::take(&mut s.held);
                h.truncate_after(c);
                h
            })
            .collect();
        self.prev = Some(super::stream::Prev {
            view: old,
            members: self.members.clone(),
            held,
        });
        self.ms.remember_commit(old, ballot, p.clone());
        let removed: Vec<Address> = self
            .members
            .iter()
            .copied()
            .filter(|a| !p.members.contains(a))
            .collect();
        let joiners = std::mem::take(&mut self.fl.joiners);
        let leavers = std::mem::take(&mut self.fl.leavers);
        self.fl = Flush::default();
        // Joins and leaves that missed this view wait for the next.
        self.fl.joiners = joiners
            .into_iter()
            .filter(|a| !p.members.contains(a))
            .collect();
        self.fl.leavers = leavers
            .into_iter()
            .filter(|a| p.members.contains(a))
            .collect();
        let id = ViewId {
            number,
            coordinator: p.coordinator,
        };
        self.install(now, id, p.members, removed);
    }

    pub(super) fn start_flush_if_needed(&mut self, now: Instant) {
        let wanted = !self.detector.suspects.is_empty()
            || !self.fl.joiners.is_empty()
            || !self.fl.leavers.is_empty();
        // Another coordinator's round was heard from lately: let it finish. Without this
        // wait, members that suspected one another each started a higher ballot the moment
        // theirs was beaten, and no round ever finished.
        let other_round_alive = self.fl.promised.is_some_and(|p| p.coordinator != self.me)
            && self
                .fl
                .touched
                .is_some_and(|t| now < t + self.cfg.flush_timeout * 3);
        if wanted
            && !other_round_alive
            && self.fl.round.is_none()
            && self.coordinator() == Some(self.me)
            && matches!(self.state, VsState::Normal | VsState::Flushing)
            && self.view.number < u64::MAX
        {
            self.start_flush(now);
        }
    }

    pub(super) fn start_flush(&mut self, now: Instant) {
        let number = self
            .fl
            .promised
            .map_or(0, |b| b.number)
            .max(self.fl.accepted.as_ref().map_or(0, |(b, _)| b.number))
            .saturating_add(1);
        let ballot = Ballot {
            number,
            coordinator: self.me,
        };
        self.counters.flushes_started += 1;
        self.fl.round = Some(Round {
            ballot,
            started: now,
            last_sent: now,
            phase: Phase::Prepare {
                answers: BTreeMap::new(),
            },
        });
        let others: Vec<Address> = self.fanout().collect();
        for a in others {
            self.queue(Dest::To(a), &VsMsg::Flush { ballot });
        }
        let h = self.header();
        self.on_flush(now, &h, ballot);
    }

    /// Sets the flush's timer from the state of the view change.
    pub(super) fn arm_flush(&mut self) {
        let flushing = self.state == VsState::Flushing;
        let t = self.fl.timeout(
            self.cfg.retransmit_timeout,
            self.cfg.flush_timeout,
            flushing,
        );
        self.timers.put(Timer::Flush, t);
    }

    /// Retries and timeouts of a view change.
    pub(super) fn flush_tick(&mut self, now: Instant) {
        // A round beaten by a higher ballot this member promised itself is over: its
        // messages are ignored everywhere, and while it lasted this member started no round
        // of its own. When the winner then died before it committed, every survivor kept a
        // beaten round and the view change never ended. Dropped, the
        // stalled-coordinator rule below lets the next coordinator start a higher ballot.
        if let (Some(r), Some(p)) = (&self.fl.round, self.fl.promised) {
            if r.ballot < p {
                self.fl.round = None;
            }
        }
        self.flush_progress(now);
        if self.fl.to_commit.is_some()
            && self
                .fl
                .commit_since
                .is_some_and(|t| now >= t + self.cfg.flush_timeout * 3)
        {
            // A commit names this member, but the casts up to its cut are not to be had
            // (whoever held them moved on to a later view, and dropped them). It cannot
            // install the view without them: it gives up, as if it had failed, and the others
            // flush it out. Before this it stayed in the old view for good. It never installed the
            // next view, so what it delivered in the old one (no more than its frozen vector,
            // within the cut) breaks no promise.
            return self.left_out();
        }
        let retry = self.cfg.retransmit_timeout;
        let wait = self.cfg.flush_timeout;
        if let Some(round) = self.fl.round.as_mut() {
            let wait_over = matches!(round.phase, Phase::Prepare { .. })
                && now >= round.started + wait
                && round.last_sent < round.started + wait;
            if now >= round.last_sent + retry || wait_over {
                round.last_sent = now;
                let ballot = round.ballot;
                let again: Vec<(Address, VsMsg<'static>)> = match &round.phase {
                    Phase::Prepare { answers } => self
                        .members
                        .iter()
                        .filter(|a| **a != self.me && !answers.contains_key(a))
                        .map(|&a| (a, VsMsg::Flush { ballot }))
                        .collect(),
                    Phase::Fetch { .. } => Vec::new(),
                    Phase::Accept {
                        proposal,
                        acceptors,
                        accepted,
                    } => acceptors
                        .iter()
                        .filter(|a| **a != self.me && !accepted.contains(a))
                        .map(|&a| {
                            (
                                a,
                                VsMsg::Propose {
                                    ballot,
                                    proposal: proposal.clone(),
                                },
                            )
                        })
                        .collect(),
                };
                for (a, m) in again {
                    self.queue(Dest::To(a), &m);
                }
            }
            self.advance(now);
        } else if self.state == VsState::Flushing {
            // A coordinator that went quiet mid-flush is suspected; the next one takes over
            // with a higher ballot.
            let stalled = self
                .fl
                .touched
                .is_none_or(|t| now >= t + self.cfg.flush_timeout * 3);
            if stalled {
                if let Some(c) = self.fl.promised.map(|b| b.coordinator) {
                    if c != self.me && self.detector.suspect(c) {
                        self.counters.suspicions += 1;
                        self.arm_silence();
                    }
                }
                self.fl.touched = Some(now);
                self.report_suspects(now);
            }
        }
        self.start_flush_if_needed(now);
    }
}
