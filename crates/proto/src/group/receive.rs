//! The member side: taking in messages, gap detection and NAKs, applying accepted records in
//! order (membership, duplicate suppression, send completions), acknowledgements.

use super::history::History;
use super::history::{Entry, Refused};
use super::msg::{self, GroupHeader, Msg, OrderRecords, RecordKind, FLAG_BB, FLAG_SYNC};
use super::timer::Timer;
use super::{
    addr_payload, Control, GroupEvent, Member, State, ViewNews, NAK_SPAN_MAX, UNORDERED_MAX,
};
use crate::addr::{Address, AddressHash};
use crate::pack::PackMode;
use crate::time::Instant;
use std::collections::{HashMap, VecDeque};

/// A member's receiving side: the records it holds and how far it got with them.
#[derive(Debug)]
pub(super) struct Inbox {
    pub(super) history: History,
    pub(super) received_upto: u64,
    pub(super) accepted_upto: u64,
    /// Highest record applied to the protocol state (membership, dedup, completions).
    pub(super) applied_upto: u64,
    /// Highest record the application took.
    pub(super) consumed_upto: u64,
    pub(super) ordered_seen: u64,
    pub(super) stable_upto: u64,
    /// Last msg_id applied per sender.
    pub(super) last_msg_id: HashMap<Address, u64, AddressHash>,
    /// BB payloads held until their accept arrives.
    pub(super) unordered: HashMap<(Address, u64), Vec<u8>>,
    /// Retransmissions owed: (member, from, to).
    pub(super) retransmit: VecDeque<(Address, u64, u64)>,
    pub(super) nak_due: bool,
    pub(super) nak_attempts: u32,
}

impl Inbox {
    pub(super) fn new(history: History) -> Inbox {
        Inbox {
            history,
            received_upto: 0,
            accepted_upto: 0,
            applied_upto: 0,
            consumed_upto: 0,
            ordered_seen: 0,
            stable_upto: 0,
            last_msg_id: HashMap::default(),
            unordered: HashMap::new(),
            retransmit: VecDeque::new(),
            nak_due: false,
            nak_attempts: 0,
        }
    }
}

impl Member {
    /// Takes in one group message from the network. Malformed or foreign messages are
    /// dropped, counted, and reported as an error; nothing else changes.
    pub fn handle_message(
        &mut self,
        now: Instant,
        bytes: &[u8],
    ) -> Result<(), msg::GroupWireError> {
        let (hdr, m) = match msg::parse(
            bytes,
            self.cfg.message_bytes_max.max(msg::MEMBERS_MAX * 8 + 8),
        ) {
            Ok(x) => x,
            Err(e) => {
                self.counters.dropped_bad += 1;
                return Err(e);
            }
        };
        self.counters.packets_received += 1;
        if hdr.group != self.cfg.group {
            self.counters.dropped_other_group += 1;
            return Ok(());
        }
        if hdr.from == self.me {
            return Ok(());
        }
        self.rec.epoch_seen = self.rec.epoch_seen.max(hdr.epoch.number);
        match m {
            Msg::JoinRequest { join_id } => self.on_join_request(now, hdr.from, join_id),
            Msg::Redirect { sequencer } => self.on_redirect(now, sequencer),
            Msg::Welcome {
                join_seq,
                stable_upto,
                resilience,
                sequencer,
                members,
            } => self.on_welcome(
                now,
                hdr,
                join_seq,
                stable_upto,
                resilience,
                sequencer,
                &members.iter().collect::<Vec<_>>(),
            ),
            Msg::Invite { base, config_seq } => self.on_invite(now, hdr, base, config_seq),
            Msg::InviteReply {
                consumed,
                received,
                held_from,
                view,
                config_seq,
                accepted,
            } => self.on_invite_reply(
                now,
                hdr,
                (consumed, received, held_from),
                view,
                config_seq,
                accepted.map(|(ballot, v)| (ballot, ViewNews::from_value(&v, false))),
            ),
            Msg::Propose { value } => {
                self.on_propose(now, hdr, ViewNews::from_value(&value, false))
            }
            Msg::Accepted => self.on_accepted(now, hdr),
            Msg::NewView {
                start_seq,
                sequencer,
                quorum,
                committed,
                base,
                members,
            } => {
                let v = msg::ViewValue {
                    epoch: hdr.epoch,
                    start_seq,
                    sequencer,
                    quorum,
                    base,
                    members,
                };
                self.on_new_view(now, hdr.from, ViewNews::from_value(&v, committed))
            }
            _ => self.on_epoch_message(now, hdr, m),
        }
        Ok(())
    }

    /// Messages that belong to one epoch: only those of ours are taken in.
    fn on_epoch_message(&mut self, now: Instant, hdr: GroupHeader, m: Msg<'_>) {
        if !matches!(self.state, State::Normal | State::Departing | State::Failed) {
            self.counters.dropped_other_epoch += 1;
            return;
        }
        if hdr.epoch != self.epoch {
            self.counters.dropped_other_epoch += 1;
            if hdr.epoch < self.epoch && self.state == State::Normal {
                // The sender missed a rebuild: tell it the view (it learns whether it is in).
                self.push_control(hdr.from, Control::NewView);
            } else if hdr.epoch > self.epoch {
                // We missed one: ask the sender, which answers with the view.
                self.push_control(hdr.from, Control::Probe);
            }
            return;
        }
        if hdr.from == self.sequencer {
            self.watch.heard(now, self.cfg.unreachable_silence);
            self.arm_watch();
        }
        match m {
            Msg::Order {
                ordered_upto,
                accepted_upto,
                stable_upto,
                records,
            } => self.on_order(
                now,
                hdr.flags & FLAG_SYNC != 0,
                ordered_upto,
                accepted_upto,
                stable_upto,
                records,
            ),
            Msg::Submit {
                consumed,
                received,
                records,
            } => {
                let bb = hdr.flags & FLAG_BB != 0;
                if self.seqr.is_some() && self.state == State::Normal {
                    self.sequencer_note_ack(now, hdr.from, consumed, received);
                    // The ack may have applied our own leave (and ended our role).
                    if self.seqr.is_some() && self.state == State::Normal {
                        self.sequence_submit(now, hdr.from, records, bb);
                    }
                } else if bb {
                    for (id, p) in records.iter() {
                        self.hold_unordered(hdr.from, id, p);
                    }
                }
            }
            Msg::Ack { consumed, received } if self.seqr.is_some() => {
                self.sequencer_note_ack(now, hdr.from, consumed, received);
            }
            Msg::Nak {
                consumed,
                received,
                from,
                to,
            } => {
                self.counters.naks_received += 1;
                if self.seqr.is_some() {
                    self.sequencer_note_ack(now, hdr.from, consumed, received);
                }
                // Any member serves what it holds (after a rebuild, a member may fetch records
                // from whoever has them).
                self.queue_retransmit(hdr.from, from, to.min(from.saturating_add(NAK_SPAN_MAX)));
            }
            Msg::Probe => {
                if self.seqr.is_some() {
                    if let Some(s) = self.seqr.as_mut() {
                        s.heartbeat_due = true;
                    }
                } else {
                    self.push_control(hdr.from, Control::Ack);
                }
            }
            Msg::LeaveRequest if self.seqr.is_some() => self.queue_leave(now, hdr.from),
            _ => {}
        }
    }

    /// Keeps a BB payload until the sequencer's accept for it arrives.
    fn hold_unordered(&mut self, sender: Address, msg_id: u64, payload: &[u8]) {
        if self
            .rx
            .last_msg_id
            .get(&sender)
            .is_some_and(|&l| msg_id <= l)
        {
            self.counters.duplicates += 1;
            return;
        }
        if self.rx.unordered.len() >= UNORDERED_MAX {
            self.counters.dropped_beyond_window += 1;
            return;
        }
        self.rx
            .unordered
            .entry((sender, msg_id))
            .or_insert_with(|| payload.to_vec());
    }

    fn on_order(
        &mut self,
        now: Instant,
        sync: bool,
        ordered_upto: u64,
        accepted_upto: u64,
        stable_upto: u64,
        records: OrderRecords<'_>,
    ) {
        if self.seqr.is_some() && self.state == State::Normal {
            // Another member's copy of records we ordered (a departed sequencer's
            // retransmission): nothing to learn.
            return;
        }
        let before = self.rx.received_upto;
        // Whether this multicast brought a message of the sequencer's own application.
        let mut sequencers_own = false;
        if stable_upto > self.rx.stable_upto {
            // First: records that follow may need the room this frees.
            self.rx.stable_upto = stable_upto;
            self.trim_history();
        }
        for r in records.iter() {
            if r.seq <= self.rx.received_upto {
                self.counters.duplicates += 1;
                continue;
            }
            let payload = match r.payload {
                Some(p) => Some(p.to_vec()),
                None => self.bb_payload(r.sender, r.msg_id),
            };
            let e = Entry {
                sender: r.sender,
                msg_id: r.msg_id,
                kind: r.kind,
                payload,
                via_bb: r.payload.is_none(),
            };
            match self.rx.history.insert(r.seq, e) {
                Ok(true) => {
                    sequencers_own |= r.kind == RecordKind::Message && r.sender == self.sequencer;
                }
                Ok(false) | Err(Refused::Old) => self.counters.duplicates += 1,
                Err(Refused::Beyond) => self.counters.dropped_beyond_window += 1,
            }
            self.rx.ordered_seen = self.rx.ordered_seen.max(r.seq);
        }
        self.rx.ordered_seen = self.rx.ordered_seen.max(ordered_upto);
        self.rx.accepted_upto = self
            .rx
            .accepted_upto
            .max(accepted_upto.min(self.rx.ordered_seen));
        self.rx.received_upto = self.rx.history.contiguous_from(self.rx.received_upto + 1);
        // The sequencer lets its own messages run at most `send_window` ahead of what every
        // member reported received: report often enough that it never waits for a heartbeat.
        let every = (self.cfg.send_window as u64 / 4).max(1);
        // Adaptive packing: the sequencer holds its next messages of its own while one it
        // multicast is not known received by every member, so a member reports such a
        // message at once (its submission, if one goes out first, carries the report).
        // Reported only with heartbeats, the sequencer's next lone message waited
        // `delay_max` whenever the previous one had gone out less than a heartbeat before.
        let prompt = sequencers_own
            && self.rx.received_upto > before
            && matches!(self.cfg.pack, PackMode::Adaptive { delay_max } if !delay_max.is_zero());
        if sync
            || prompt
            || self.rx.received_upto >= self.out.last_ack.1.saturating_add(every)
            || (self.rx.received_upto > before
                && self.is_acker()
                && self.rx.received_upto > self.rx.accepted_upto)
        {
            self.out.ack_due = true;
        }
        if self.rx.received_upto < self.rx.ordered_seen {
            self.gap_seen(now);
        } else {
            self.timers.stop(Timer::Nak);
        }
        self.apply_ready(now);
        self.trim_history();
    }

    /// The payload of a BB message we hold (as its receiver or its sender).
    fn bb_payload(&mut self, sender: Address, msg_id: u64) -> Option<Vec<u8>> {
        if sender == self.me {
            let first = self.out.pending.front()?.msg_id;
            return msg_id
                .checked_sub(first)
                .and_then(|i| self.out.pending.get(i as usize))
                .map(|p| p.payload.clone());
        }
        self.rx.unordered.remove(&(sender, msg_id))
    }

    /// Whether this member acknowledges tentative records (one of the r lowest-ranked members
    /// besides the sequencer).
    pub(super) fn is_acker(&self) -> bool {
        let r = self.cfg.resilience as usize;
        r > 0
            && self
                .members
                .iter()
                .filter(|&&m| m != self.sequencer)
                .take(r)
                .any(|&m| m == self.me)
    }

    /// A record missing below one we hold, or one of a rebuild's records, is asked for at once.
    /// Records only announced (the watermark runs ahead of the records received) are usually
    /// the rest of a packed batch still on its way: they are asked for only if they have not
    /// come within a retransmission timeout. Asking at once made every multicast that split a
    /// batch cost a NAK and a retransmission of records already sent.
    fn gap_seen(&mut self, now: Instant) {
        if self.rx.received_upto < self.rec.start_seq
            || self.rx.history.holds_after(self.rx.received_upto)
        {
            self.nak_if_due(now);
        } else if !self.timers.is_set(Timer::Nak) {
            self.timers
                .set(Timer::Nak, now + self.cfg.retransmit_timeout);
        }
    }

    pub(super) fn nak_if_due(&mut self, now: Instant) {
        if self.timers.get(Timer::Nak).is_some_and(|t| now < t) {
            return;
        }
        self.timers
            .set(Timer::Nak, now + self.cfg.retransmit_timeout);
        self.rx.nak_due = true;
    }

    /// The NAK range to send now, and to whom: the sequencer, or while catching up on a
    /// rebuild's records, a member that held them (another one at each attempt).
    pub(super) fn nak_range(&mut self) -> Option<(Address, u64, u64)> {
        if self.rx.received_upto >= self.rx.ordered_seen {
            return None;
        }
        let from = self.rx.received_upto + 1;
        let mut to = self
            .rx
            .ordered_seen
            .min(from.saturating_add(NAK_SPAN_MAX - 1));
        let mut target = self.sequencer;
        if from <= self.rec.start_seq {
            let holders: Vec<(Address, u64)> = self
                .rec
                .view_donors
                .iter()
                .filter(|&&(a, held_from, upto)| a != self.me && held_from <= from && from <= upto)
                .map(|&(a, _, upto)| (a, upto))
                .collect();
            if !holders.is_empty() {
                let (a, upto) = holders[self.rx.nak_attempts as usize % holders.len()];
                target = a;
                to = to.min(upto);
            }
            self.rx.nak_attempts = self.rx.nak_attempts.wrapping_add(1);
        }
        Some((target, from, to))
    }

    /// Applies accepted, contiguous records in order.
    pub(super) fn apply_ready(&mut self, now: Instant) {
        while self.rx.applied_upto < self.rx.received_upto.min(self.rx.accepted_upto) {
            let seq = self.rx.applied_upto + 1;
            let e = self.rx.history.get(seq).expect("received records are held");
            let (kind, sender, msg_id) = (e.kind, e.sender, e.msg_id);
            let named = addr_payload(e);
            self.rx.applied_upto = seq;
            if kind != RecordKind::Message {
                self.ms.config_applied = seq;
            }
            match kind {
                RecordKind::Message => self.apply_message(sender, msg_id),
                RecordKind::Join => self.apply_join(now, seq, named),
                RecordKind::Leave => self.apply_leave(now, seq, named),
                RecordKind::View => self.apply_view(now, seq),
            }
        }
    }

    fn apply_message(&mut self, sender: Address, msg_id: u64) {
        self.rx.last_msg_id.insert(sender, msg_id);
        self.rx.unordered.remove(&(sender, msg_id));
        if sender == self.me {
            while self.out.pending.front().is_some_and(|p| p.msg_id <= msg_id) {
                let p = self.out.pending.pop_front().expect("front");
                if p.sent_at.is_some() {
                    self.out.sent_count = self.out.sent_count.saturating_sub(1);
                } else {
                    // Ordered without a submission of ours reaching it (we are, or were, the
                    // sequencer).
                    self.out.unsent_bytes = self
                        .out
                        .unsent_bytes
                        .saturating_sub(p.payload.len() + super::msg::SUBMIT_RECORD_BYTES);
                }
                self.events
                    .push_back(GroupEvent::SendDone { msg_id: p.msg_id });
            }
            self.arm_outbox();
        }
    }

    /// The application consumed a record: trim, and report progress now and then.
    pub(super) fn note_consumed(&mut self) {
        self.trim_history();
        let every = (self.cfg.history_max as u64 / 8).max(1);
        if self.rx.consumed_upto >= self.out.last_ack.0.saturating_add(every) {
            self.out.ack_due = true;
        }
        if self.seqr.is_some() {
            // The sequencer's own consumption bounds stability too.
            let before = self.rx.stable_upto;
            self.recompute_stable();
            if self.rx.stable_upto > before {
                // Only what still waits to be ordered needs the timer (messages already
                // ordered and not yet consumed do not).
                let due = self.own_queued();
                let s = self.seqr.as_mut().expect("sequencer");
                if due || s.waiting_len > 0 {
                    self.timers.set(Timer::Order, s.last_multicast_at);
                }
            }
        }
    }

    /// Drops records that are both stable and consumed here.
    pub(super) fn trim_history(&mut self) {
        let through = self.rx.stable_upto.min(self.rx.consumed_upto);
        if through >= self.rx.history.base() {
            self.rx.history.trim_through(through);
        }
    }

    /// Member timers: resend submissions, repeat NAKs, report to the sequencer, watch it.
    pub(super) fn member_tick(&mut self, now: Instant) {
        if self.rx.received_upto < self.rx.ordered_seen {
            self.nak_if_due(now);
        }
        if self.timers.expired(Timer::Report, now) {
            self.out.ack_due = true;
        }
        let verdict = self.cfg.detect(&mut self.watch, now);
        self.arm_watch();
        match verdict {
            super::detector::Verdict::Fine => {}
            super::detector::Verdict::Probe => {
                self.counters.probes_sent += 1;
                self.push_control(self.sequencer, Control::Probe);
            }
            super::detector::Verdict::Dead => {
                let s = self.sequencer;
                self.failure_detected(now, s);
            }
        }
    }
}
