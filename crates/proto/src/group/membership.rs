//! Joins and leaves, as records in the group's total order.

use super::msg::GroupHeader;
use super::{Control, GroupEvent, Member, State};
use crate::addr::Address;
use crate::time::Instant;

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
        if let Some(j) = self.join.as_mut() {
            self.join_via.1 = sequencer;
            if j.0 != sequencer {
                j.0 = sequencer;
                j.2 = now + self.cfg.retransmit_timeout;
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
        if self.state != State::Joining || join_seq == 0 || !members.contains(&self.me) {
            return;
        }
        self.join = None;
        self.state = State::Normal;
        self.epoch = hdr.epoch;
        self.epoch_seen = self.epoch_seen.max(hdr.epoch.number);
        self.cfg.resilience = resilience;
        self.members = members;
        self.sequencer = sequencer;
        self.watch.heard(now);
        self.history.reset(join_seq);
        let e = super::history::Entry {
            sender: sequencer,
            msg_id: 0,
            kind: super::RecordKind::Join,
            payload: Some(super::encode_addr(self.me)),
            via_bb: false,
        };
        assert_eq!(self.history.insert(join_seq, e), Ok(true));
        self.received_upto = join_seq;
        self.accepted_upto = join_seq;
        self.applied_upto = join_seq;
        self.config_applied = join_seq;
        self.ordered_seen = join_seq;
        self.consumed_upto = join_seq - 1;
        self.stable_upto = stable_upto.min(join_seq - 1);
        self.start_seq = join_seq - 1;
        // Joins are ordered only after the view's View record is applied: it committed.
        self.note_committed();
        for &(m, id) in member_ids {
            self.last_msg_id.insert(m, id);
        }
        self.ack_due = true;
        self.events
            .push_back(GroupEvent::JoinDone { seq: join_seq });
    }

    pub(super) fn apply_join(&mut self, now: Instant, seq: u64, who: Address) {
        let id = self
            .history
            .get(seq)
            .and_then(|e| e.payload.as_deref())
            .and_then(|p| p.get(8..16))
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if let Some(id) = id {
            if self.join_ids_seen.len() >= super::JOIN_IDS_SEEN_MAX {
                self.join_ids_seen.pop_front();
            }
            self.join_ids_seen.push_back((who, id));
        }
        self.last_msg_id.insert(who, 0);
        self.unordered.retain(|(s, _), _| *s != who);
        self.committed_view_applies(seq, |m| {
            if !m.contains(&who) {
                m.push(who);
            }
        });
        if seq <= self.start_seq {
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
            .map(|&m| (m, self.last_msg_id.get(&m).copied().unwrap_or(0)))
            .collect();
        if let Some(s) = self.seqr.as_mut() {
            s.acks.insert(who, (seq - 1, seq - 1));
            s.next_msg_id.insert(who, 1);
            s.watches.insert(who, super::Watch::new(now));
            s.welcomes.push((who, seq, members.clone()));
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
        if let Some(k) = self.committed.as_mut() {
            if seq > k.start {
                f(&mut k.members);
            }
        }
    }

    pub(super) fn apply_leave(&mut self, now: Instant, seq: u64, who: Address) {
        self.unordered.retain(|(s, _), _| *s != who);
        self.committed_view_applies(seq, |m| m.retain(|&x| x != who));
        if seq <= self.start_seq {
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
                s.order_due = true;
            }
        }
        if who == self.me {
            // Report once more so the sequencer knows we have our leave record.
            self.ack_due = true;
            if self.seqr.is_some() && !self.members.is_empty() {
                self.leave_at = None;
                self.events.push_back(GroupEvent::LeaveDone);
                self.state = State::Departing;
                self.depart = Some((seq, now + self.cfg.silence_timeout));
            } else {
                self.leave_done();
            }
        }
        if was_sequencer && !self.members.is_empty() {
            self.sequencer = self.members[0];
            self.watch.heard(now);
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
        self.leave_at = None;
        self.events.push_back(GroupEvent::LeaveDone);
        self.state = State::Left;
        self.seqr = None;
        self.reset = None;
        self.blocked_retry_at = None;
    }

    /// Joining and leaving retries; the departing sequencer's end.
    pub(super) fn membership_tick(&mut self, now: Instant) {
        if let Some((asked, attempts, at)) = self.join {
            if now >= at {
                if attempts >= self.cfg.join_attempts_max {
                    self.join = None;
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
                    let (given, named) = self.join_via;
                    let to = if attempts % super::JOIN_ASK_TURN != 0 {
                        asked
                    } else if asked == named {
                        given
                    } else {
                        named
                    };
                    self.join = Some((to, attempts + 1, now + self.cfg.retransmit_timeout));
                    self.push_control(to, Control::JoinRequest);
                }
            }
        }
        if let Some(at) = self.leave_at {
            if now >= at {
                self.leave_at = Some(now + self.cfg.retransmit_timeout);
                if self.state == State::Normal {
                    self.push_control(self.sequencer, Control::LeaveRequest);
                }
            }
        }
        if let Some((leave_seq, until)) = self.depart {
            // Done when the members have applied our leave (so one of them is the sequencer)
            // and the members that left before us have their leave records.
            let done = self.seqr.as_ref().is_none_or(|s| {
                s.departing.is_empty()
                    && self
                        .members
                        .iter()
                        .all(|m| s.acks.get(m).is_some_and(|a| a.0 >= leave_seq))
            });
            if done || now >= until {
                self.depart = None;
                self.seqr = None;
                self.reset = None;
                self.blocked_retry_at = None;
                self.state = State::Left;
            }
        }
    }

    pub(super) fn membership_deadline(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |y: Instant| y.min(x)));
        if let Some((_, _, x)) = self.join {
            at(x);
        }
        if let Some(x) = self.leave_at {
            at(x);
        }
        if let Some((_, x)) = self.depart {
            at(x);
        }
        t
    }
}
