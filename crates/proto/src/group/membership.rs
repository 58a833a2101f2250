//! Joins and leaves, as records in the group's total order.

use super::msg::GroupHeader;
use super::timer::Timer;
use super::{Control, GroupEvent, Member, State};
use crate::addr::Address;
use crate::time::Instant;
use std::collections::VecDeque;

/// Joining and leaving, and the membership records applied.
#[derive(Debug)]
pub(super) struct Membership {
    /// Joining: the member asked, and attempts so far (the next is [`Timer::Join`]).
    pub(super) join: Option<(Address, u32)>,
    /// Joining: the contact given to [`Member::join`], and the sequencer last named to us
    /// (the contact until a redirect), the two addresses asked in turn.
    pub(super) join_via: (Address, Address),
    /// Names this process's join in its requests.
    pub(super) join_id: u64,
    /// Departing sequencer: serve until everyone has this record, or [`Timer::Depart`].
    pub(super) depart: Option<u64>,
    /// The sequence number of the last membership record applied (or the join or rebuild
    /// that gave this member its list).
    pub(super) config_applied: u64,
    /// Recent joins (joiner, join id) from the join records applied here, handed to the
    /// sequencer role when this member takes it.
    pub(super) join_ids_seen: VecDeque<(Address, u64)>,
}

impl Membership {
    pub(super) fn new(me: Address) -> Membership {
        Membership {
            join: None,
            join_via: (me, me),
            join_id: 0,
            depart: None,
            config_applied: 0,
            join_ids_seen: VecDeque::new(),
        }
    }
}

impl Member {
    pub(super) fn on_join_request(&mut self, now: Instant, who: Address, join_id: u64) {
        if self.resend_welcome(who) {
            return;
        }
        match self.state {
            State::Normal if self.seqr.is_some() => self.queue_join(now, who, join_id),
            State::Normal => self.push_control(who, Control::Redirect(self.sequencer)),
            _ => {}
        }
    }

    /// Repeats the Welcome to a joiner this sequencer admitted and has not heard from. Also
    /// while a rebuild is under way: the joiner is a member of the view being rebuilt, and
    /// can answer the invitations (and so count among the survivors) only once it knows it.
    pub(super) fn resend_welcome(&mut self, who: Address) -> bool {
        let Some(s) = self.seqr.as_ref() else {
            return false;
        };
        let Some((_, seq, members)) = s.welcomes.iter().find(|w| w.0 == who) else {
            return false;
        };
        let c = Control::Welcome {
            join_seq: *seq,
            members: members.clone(),
        };
        self.push_control(who, c);
        true
    }

    pub(super) fn on_redirect(&mut self, now: Instant, sequencer: Address) {
        if self.state != State::Joining {
            return;
        }
        if let Some(j) = self.ms.join.as_mut() {
            self.ms.join_via.1 = sequencer;
            if j.0 != sequencer {
                j.0 = sequencer;
                self.timers
                    .set(Timer::Join, now + self.cfg.retransmit_timeout);
                self.push_control(sequencer, Control::JoinRequest);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_welcome(
        &mut self,
        now: Instant,
        hdr: GroupHeader,
        join_seq: u64,
        stable_upto: u64,
        resilience: u8,
        sequencer: Address,
        member_ids: &[(Address, u64)],
    ) {
        let members: Vec<Address> = member_ids.iter().map(|m| m.0).collect();
        if self.state != State::Joining
            || join_seq == 0
            || join_seq == u64::MAX
            || !members.contains(&self.me)
        {
            // (`u64::MAX`: no record could follow it, corrupt; the history never holds it.)
            return;
        }
        self.ms.join = None;
        self.timers.stop(Timer::Join);
        self.state = State::Normal;
        self.epoch = hdr.epoch;
        self.rec.epoch_seen = self.rec.epoch_seen.max(hdr.epoch.number);
        self.cfg.resilience = resilience;
        self.members = members;
        self.sequencer = sequencer;
        self.watch.heard(now, self.cfg.unreachable_silence);
        self.arm_watch();
        self.rx.history.reset(join_seq);
        let e = super::history::Entry {
            sender: sequencer,
            msg_id: 0,
            kind: super::RecordKind::Join,
            payload: Some(super::encode_addr(self.me)),
            via_bb: false,
        };
        assert_eq!(self.rx.history.insert(join_seq, e), Ok(true));
        self.rx.received_upto = join_seq;
        self.rx.accepted_upto = join_seq;
        self.rx.applied_upto = join_seq;
        self.ms.config_applied = join_seq;
        self.rx.ordered_seen = join_seq;
        self.rx.consumed_upto = join_seq - 1;
        self.rx.stable_upto = stable_upto.min(join_seq - 1);
        self.rec.start_seq = join_seq - 1;
        // Joins are ordered only after the view's View record is applied: it committed.
        self.note_committed();
        for &(m, id) in member_ids {
            self.rx.last_msg_id.insert(m, id);
        }
        self.out.ack_due = true;
        self.events
            .push_back(GroupEvent::JoinDone { seq: join_seq });
    }

    pub(super) fn apply_join(&mut self, now: Instant, seq: u64, who: Address) {
        let id = self
            .rx
            .history
            .get(seq)
            .and_then(|e| e.payload.as_deref())
            .and_then(|p| p.get(8..16))
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if let Some(id) = id {
            if self.ms.join_ids_seen.len() >= super::JOIN_IDS_SEEN_MAX {
                self.ms.join_ids_seen.pop_front();
            }
            self.ms.join_ids_seen.push_back((who, id));
        }
        self.rx.last_msg_id.insert(who, 0);
        self.rx.unordered.retain(|(s, _), _| *s != who);
        self.committed_view_applies(seq, |m| {
            if !m.contains(&who) {
                m.push(who);
            }
        });
        if seq <= self.rec.start_seq {
            // A record from before a rebuild, caught up on: the rebuilt view already counted
            // it, and its View record settles the member list; nobody is welcomed from here.
            return;
        }
        if !self.members.contains(&who) {
            self.members.push(who);
        }
        let members: Vec<(Address, u64)> = self
            .members
            .iter()
            .map(|&m| (m, self.rx.last_msg_id.get(&m).copied().unwrap_or(0)))
            .collect();
        if let Some(s) = self.seqr.as_mut() {
            s.acks.insert(who, (seq - 1, seq - 1));
            s.next_msg_id.insert(who, 1);
            s.watches.insert(who, super::Watch::new(now));
            s.welcomes.push((who, seq, members.clone()));
            self.arm_watches();
            let s = self.seqr.as_mut().expect("sequencer");
            if s.barrier == Some(seq) {
                s.barrier = None;
            }
            self.push_control(
                who,
                Control::Welcome {
                    join_seq: seq,
                    members,
                },
            );
            self.order_next(now);
        }
    }

    /// In a view not known committed, records up to its start (numbered in the last view
    /// known committed) change that view's list, which the rebuilt view did not: its own list
    /// already counted them, cut to its survivors (see `install_view`).
    fn committed_view_applies(&mut self, seq: u64, f: impl FnOnce(&mut Vec<Address>)) {
        if let Some(k) = self.rec.committed.as_mut() {
            if seq > k.start {
                f(&mut k.members);
            }
        }
    }

    pub(super) fn apply_leave(&mut self, now: Instant, seq: u64, who: Address) {
        self.rx.unordered.retain(|(s, _), _| *s != who);
        self.committed_view_applies(seq, |m| m.retain(|&x| x != who));
        if seq <= self.rec.start_seq {
            // From before a rebuild: the rebuilt view already counted it and named the
            // sequencer.
            if who == self.me {
                self.leave_done();
            }
            return;
        }
        self.members.retain(|&m| m != who);
        let was_sequencer = who == self.sequencer;
        if let Some(s) = self.seqr.as_mut() {
            if s.barrier == Some(seq) {
                s.barrier = None;
            }
            s.next_msg_id.remove(&who);
        }
        if self.seqr.is_some() {
            // What it submitted and we had not ordered goes with it.
            self.drop_waiting(who);
            let s = self.seqr.as_mut().expect("sequencer");
            if who != self.me {
                // Still watched until it has its leave record (or is found dead).
                s.departing.push((who, seq));
                // Records it had not acknowledged may need it no more: a lone sequencer has
                // no acknowledgement coming to accept them on.
                self.timers.set(Timer::Order, s.last_multicast_at);
            }
        }
        if who == self.me {
            // Report once more so the sequencer knows we have our leave record.
            self.out.ack_due = true;
            if self.seqr.is_some() && !self.members.is_empty() {
                self.timers.stop(Timer::Leave);
                self.events.push_back(GroupEvent::LeaveDone);
                self.state = State::Departing;
                self.ms.depart = Some(seq);
                self.timers
                    .set(Timer::Depart, now + self.cfg.silence_timeout);
            } else {
                self.leave_done();
            }
        }
        if was_sequencer && !self.members.is_empty() {
            self.sequencer = self.members[0];
            self.watch.heard(now, self.cfg.unreachable_silence);
            self.arm_watch();
            if self.sequencer == self.me {
                self.become_sequencer(now);
                self.order_next(now);
            } else {
                // Submissions in flight went to the old sequencer: send them again.
                self.resubmit_all();
            }
        }
        if self.seqr.is_some() && self.state == State::Normal {
            self.order_next(now);
        }
    }

    pub(super) fn leave_done(&mut self) {
        self.timers.stop(Timer::Leave);
        self.events.push_back(GroupEvent::LeaveDone);
        self.state = State::Left;
        self.seqr = None;
        self.end_reset();
        self.timers.stop(Timer::Blocked);
    }

    /// Joining and leaving retries; the departing sequencer's end.
    pub(super) fn membership_tick(&mut self, now: Instant) {
        if let Some((asked, attempts)) = self.ms.join {
            if self.timers.expired(Timer::Join, now) {
                if attempts >= self.cfg.join_attempts_max {
                    self.ms.join = None;
                    self.timers.stop(Timer::Join);
                    self.state = State::Left;
                    self.events.push_back(GroupEvent::JoinFailed);
                } else {
                    // The sequencer we were sent to may have failed since (it never answers)
                    // and the group rebuilt around another: every few attempts, turn to the
                    // other address we know. The contact, once in the rebuilt view, names the
                    // new sequencer; while it cannot answer (rebuilding, or failed too), the
                    // sequencer gets its turn again (it may have admitted us, and a recovering
                    // sequencer repeats its Welcome). One at a time, not both at once: a
                    // sequencer of the old view and one of the new, asked together, could
                    // both admit us.
                    let (given, named) = self.ms.join_via;
                    let to = if attempts % super::JOIN_ASK_TURN != 0 {
                        asked
                    } else if asked == named {
                        given
                    } else {
                        named
                    };
                    self.ms.join = Some((to, attempts + 1));
                    self.timers
                        .set(Timer::Join, now + self.cfg.retransmit_timeout);
                    self.push_control(to, Control::JoinRequest);
                }
            }
        }
        if self.timers.expired(Timer::Leave, now) {
            self.timers
                .set(Timer::Leave, now + self.cfg.retransmit_timeout);
            if self.state == State::Normal {
                self.push_control(self.sequencer, Control::LeaveRequest);
            }
        }
        if let Some(leave_seq) = self.ms.depart {
            // Done when the members have applied our leave (so one of them is the sequencer)
            // and the members that left before us have their leave records.
            let done = self.seqr.as_ref().is_none_or(|s| {
                s.departing.is_empty()
                    && self
                        .members
                        .iter()
                        .all(|m| s.acks.get(m).is_some_and(|a| a.0 >= leave_seq))
            });
            if done || self.timers.expired(Timer::Depart, now) {
                self.ms.depart = None;
                self.timers.stop(Timer::Depart);
                self.seqr = None;
                self.end_reset();
                self.timers.stop(Timer::Blocked);
                self.state = State::Left;
            }
        }
    }
}
