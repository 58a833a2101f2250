//! The layered protocols behind the one group interface ([`GroupMember`]): their states,
//! errors and events in the interface's terms, and every view an entry of the ordered stream.

use super::{Delivered as Entry, Member, OrderError, OrderEvent, Ready};
use crate::addr::Address;
use crate::member::{
    Delivered, Delivery, Dest, Epoch, GroupCounters, GroupError, GroupEvent, GroupInfo,
    GroupMember, MinMembers, State,
};
use crate::time::Instant;
use crate::vsync::VsState;

/// The layered stack's states, as the interface names them.
fn state_of(s: VsState) -> State {
    match s {
        VsState::Joining => State::Joining,
        VsState::Normal => State::Normal,
        VsState::Flushing => State::Recovering,
        VsState::Left => State::Left,
        VsState::Expelled | VsState::Failed => State::Expelled,
    }
}

impl From<OrderError> for GroupError {
    fn from(e: OrderError) -> Self {
        match e {
            OrderError::NotMember(s) => GroupError::NotMember(state_of(s)),
            OrderError::Full => GroupError::Full,
            OrderError::TooLong { len, max } => GroupError::TooLong { len, max },
        }
    }
}

impl Member {
    fn epoch_now(&self) -> Epoch {
        let v = self.view();
        Epoch {
            number: v.number,
            coordinator: v.coordinator,
        }
    }

    /// The entry number of the latest view in the ordered stream (taken or waiting).
    fn last_view_entry(&self) -> u64 {
        match self.ready.iter().rposition(|r| matches!(r, Ready::View(_))) {
            Some(i) => self.taken + i as u64 + 1,
            None => self.view_taken,
        }
    }
}

impl GroupMember for Member {
    fn address(&self) -> Address {
        self.me
    }

    fn state(&self) -> State {
        state_of(self.vs.state())
    }

    fn epoch(&self) -> Epoch {
        self.epoch_now()
    }

    fn members(&self) -> &[Address] {
        self.vs.members()
    }

    /// `resilience` is 0: a message is delivered once received in its place, and the
    /// survivors of a view agree on its messages at the flush. `received_upto` counts the
    /// entries ordered here, `consumed_upto` those the application took, and `stable_upto`
    /// runs to the latest view: by virtual synchrony every member of that view delivered
    /// every entry before it.
    fn info(&self, now: Instant) -> GroupInfo {
        let c = &self.counters;
        let vc = self.vs.counters();
        GroupInfo {
            state: if self.vs.blocked(now) {
                State::Blocked
            } else {
                state_of(self.vs.state())
            },
            epoch: self.epoch_now(),
            members: self.vs.members().to_vec(),
            sequencer: self.holder().unwrap_or_default(),
            resilience: 0,
            received_upto: self.taken + self.ready.len() as u64,
            consumed_upto: self.taken,
            stable_upto: self.last_view_entry(),
            counters: GroupCounters {
                sent: c.sent,
                submits_sent: c.submits_sent,
                submits_resent: c.submits_resent,
                delivered: c.delivered,
                packets_sent: vc.data_sent + vc.directs_sent,
                packets_received: vc.data_received + vc.directs_received,
                records_multicast: vc.records_sent,
                records_retransmitted: vc.records_retransmitted,
                naks_sent: vc.naks_sent,
                naks_received: vc.naks_received,
                duplicates: vc.duplicates + c.duplicates,
                dropped_bad: vc.dropped_bad + c.dropped_bad,
                heartbeats: vc.heartbeats,
                acks_sent: vc.acks,
                failures_detected: vc.suspicions,
                resets_started: vc.flushes_started,
                resets_completed: vc.views_installed,
                ..GroupCounters::default()
            },
        }
    }

    fn send(&mut self, now: Instant, payload: &[u8]) -> Result<u64, GroupError> {
        Ok(Member::send(self, now, payload)?)
    }

    fn sends_pending(&self) -> usize {
        Member::sends_pending(self)
    }

    fn leave(&mut self, now: Instant) -> Result<(), GroupError> {
        Ok(Member::leave(self, now)?)
    }

    fn reset(&mut self, _now: Instant, _min_members: MinMembers) -> Result<(), GroupError> {
        Ok(())
    }

    fn handle_message(&mut self, now: Instant, bytes: &[u8]) -> bool {
        let bad = self.vs.counters().dropped_bad + self.counters.dropped_bad;
        Member::handle_message(self, now, bytes);
        self.vs.counters().dropped_bad + self.counters.dropped_bad == bad
    }

    fn handle_timeout(&mut self, now: Instant) {
        Member::handle_timeout(self, now)
    }

    fn peer_unreachable(&mut self, now: Instant, who: Address) {
        self.vs.peer_unreachable(now, who)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Member::poll_timeout(self)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        Member::poll_transmit(self, now, buf)
    }

    fn fanout(&self, to: &mut dyn FnMut(Address)) {
        self.vs.fanout().for_each(to)
    }

    fn poll_delivery(&mut self, f: &mut dyn FnMut(Delivery<'_>)) -> bool {
        let seq = self.taken + 1;
        let me = self.me;
        let mut view = false;
        let took = Member::poll_delivery(self, |d| match d {
            Entry::Message(d) => f(Delivery {
                seq,
                sender: d.sender,
                what: Delivered::Message {
                    msg_id: d.msg_id,
                    payload: d.payload,
                },
            }),
            Entry::View(v) => {
                view = true;
                f(Delivery {
                    seq,
                    sender: me,
                    what: Delivered::Rebuilt {
                        epoch: Epoch {
                            number: v.id.number,
                            coordinator: v.id.coordinator,
                        },
                        members: v.members,
                        removed: v.removed,
                    },
                })
            }
        });
        if took.is_some() {
            self.taken = seq;
            if view {
                self.view_taken = seq;
            }
        }
        took.is_some()
    }

    fn has_delivery(&self) -> bool {
        Member::has_delivery(self)
    }

    /// A join completes when this member is first in a view (its `seq` is that view's entry);
    /// every suspicion of the stack is a [`GroupEvent::Failure`]; a view change that cannot
    /// reach a majority is reported as a rebuild that found too few members.
    fn poll_event(&mut self) -> Option<GroupEvent> {
        if self.join_pending && self.vs.state() == VsState::Normal {
            self.join_pending = false;
            let first_view = self.ready.iter().position(|r| matches!(r, Ready::View(_)));
            let seq = first_view.map_or(self.view_taken, |i| self.taken + i as u64 + 1);
            return Some(GroupEvent::JoinDone { seq });
        }
        if let Some(suspect) = self.vs.take_suspected() {
            return Some(GroupEvent::Failure { suspect });
        }
        Some(match Member::poll_event(self)? {
            OrderEvent::SendDone { msg_id } => GroupEvent::SendDone { msg_id },
            OrderEvent::Left => GroupEvent::LeaveDone,
            OrderEvent::Expelled => GroupEvent::Expelled,
            OrderEvent::JoinFailed => GroupEvent::JoinFailed,
            OrderEvent::Blocked { reachable, needed } => GroupEvent::ResetFailed {
                survivors: reachable,
                needed,
            },
        })
    }
}
