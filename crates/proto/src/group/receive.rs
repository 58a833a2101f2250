//! The member side: taking in messages, gap detection and NAKs, applying accepted records in
//! order (membership, duplicate suppression, send completions), acknowledgements.

use super::history::{Entry, Refused};
use super::msg::{self, GroupHeader, Msg, OrderRecords, RecordKind, FLAG_BB, FLAG_SYNC};
use super::{
    addr_payload, Control, GroupEvent, Member, State, ViewNews, NAK_SPAN_MAX, UNORDERED_MAX,
};
use crate::addr::Address;
use crate::pack::PackMode;
use crate::time::Instant;

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
        self.epoch_seen = self.epoch_seen.max(hdr.epoch.number);
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
            self.watch.heard(now);
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
        if self.last_msg_id.get(&sender).is_some_and(|&l| msg_id <= l) {
            self.counters.duplicates += 1;
            return;
        }
        if self.unordered.len() >= UNORDERED_MAX {
            self.counters.dropped_beyond_window += 1;
            return;
        }
        self.unordered
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
        let before = self.received_upto;
        // Whether this multicast brought a message of the sequencer's own application.
        let mut sequencers_own = false;
        if stable_upto > self.stable_upto {
            // First: records that follow may need the room this frees.
            self.stable_upto = stable_upto;
            self.trim_history();
        }
        for r in records.iter() {
            if r.seq <= self.received_upto {
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
            match self.history.insert(r.seq, e) {
                Ok(true) => {
                    sequencers_own |= r.kind == RecordKind::Message && r.sender == self.sequencer;
                }
                Ok(false) | Err(Refused::Old) => self.counters.duplicates += 1,
                Err(Refused::Beyond) => self.counters.dropped_beyond_window += 1,
            }
            self.ordered_seen = self.ordered_seen.max(r.seq);
        }
        self.ordered_seen = self.ordered_seen.max(ordered_upto);
        self.accepted_upto = self.accepted_upto.max(accepted_upto.min(self.ordered_seen));
        self.received_upto = self.history.contiguous_from(self.received_upto + 1);
        // The sequencer lets its own messages run at most `send_window` ahead of what every
        // member reported received: report often enough that it never waits for a heartbeat.
        let every = (self.cfg.send_window as u64 / 4).max(1);
        // Adaptive packing: the sequencer holds its next messages of its own while one it
        // multicast is not known received by every member, so a member reports such a
        // message at once (its submission, if one goes out first, carries the report).
        // Reported only with heartbeats, the sequencer's next lone message waited
        // `delay_max` whenever the previous one had gone out less than a heartbeat before.
        let prompt = sequencers_own
            && self.received_upto > before
            && matches!(self.cfg.pack, PackMode::Adaptive { delay_max } if !delay_max.is_zero());
        if sync
            || prompt
            || self.received_upto >= self.last_ack.1 + every
            || (self.received_upto > before
                && self.is_acker()
                && self.received_upto > self.accepted_upto)
        {
            self.ack_due = true;
        }
        if self.received_upto < self.ordered_seen {
            self.gap_seen(now);
        } else {
            self.nak_at = None;
        }
        self.apply_ready(now);
        self.trim_history();
    }

    /// The payload of a BB message we hold (as its receiver or its sender).
    fn bb_payload(&mut self, sender: Address, msg_id: u64) -> Option<Vec<u8>> {
        if sender == self.me {
            let first = self.pending.front()?.msg_id;
            return msg_id
                .checked_sub(first)
                .and_then(|i| self.pending.get(i as usize))
                .map(|p| p.payload.clone());
        }
        self.unordered.remove(&(sender, msg_id))
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
        if self.received_upto < self.start_seq || self.history.holds_after(self.received_upto) {
            self.nak_if_due(now);
        } else if self.nak_at.is_none() {
            self.nak_at = Some(now + self.cfg.retransmit_timeout);
        }
    }

    pub(super) fn nak_if_due(&mut self, now: Instant) {
        if self.nak_at.is_some_and(|t| now < t) {
            return;
        }
        self.nak_at = Some(now + self.cfg.retransmit_timeout);
        self.nak_due = true;
    }

    /// The NAK range to send now, and to whom: the sequencer, or while catching up on a
    /// rebuild's records, a member that held them (another one at each attempt).
    pub(super) fn nak_range(&mut self) -> Option<(Address, u64, u64)> {
        if self.received_upto >= self.ordered_seen {
            return None;
        }
        let from = self.received_upto + 1;
        let mut to = self.ordered_seen.min(from + NAK_SPAN_MAX - 1);
        let mut target = self.sequencer;
        if from <= self.start_seq {
            let holders: Vec<(Address, u64)> = self
                .view_donors
                .iter()
                .filter(|&&(a, held_from, upto)| a != self.me && held_from <= from && from <= upto)
                .map(|&(a, _, upto)| (a, upto))
                .collect();
            if !holders.is_empty() {
                let (a, upto) = holders[self.nak_attempts as usize % holders.len()];
                target = a;
                to = to.min(upto);
            }
            self.nak_attempts = self.nak_attempts.wrapping_add(1);
        }
        Some((target, from, to))
    }

    /// Applies accepted, contiguous records in order.
    pub(super) fn apply_ready(&mut self, now: Instant) {
        while self.applied_upto < self.received_upto.min(self.accepted_upto) {
            let seq = self.applied_upto + 1;
            let e = self.history.get(seq).expect("received records are held");
            let (kind, sender, msg_id) = (e.kind, e.sender, e.msg_id);
            let named = addr_payload(e);
            self.applied_upto = seq;
            if kind != RecordKind::Message {
                self.config_applied = seq;
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
        self.last_msg_id.insert(sender, msg_id);
        self.unordered.remove(&(sender, msg_id));
        if sender == self.me {
            while self.pending.front().is_some_and(|p| p.msg_id <= msg_id) {
                let p = self.pending.pop_front().expect("front");
                if p.sent_at.is_some() {
                    self.sent_count = self.sent_count.saturating_sub(1);
                } else {
                    // Ordered without a submission of ours reaching it (we are, or were, the
                    // sequencer).
                    self.unsent_bytes = self
                        .unsent_bytes
                        .saturating_sub(p.payload.len() + super::msg::SUBMIT_RECORD_BYTES);
                }
                self.events
                    .push_back(GroupEvent::SendDone { msg_id: p.msg_id });
            }
        }
    }

    /// The application consumed a record: trim, and report progress now and then.
    pub(super) fn note_consumed(&mut self) {
        self.trim_history();
        let every = (self.cfg.history_max as u64 / 8).max(1);
        if self.consumed_upto >= self.last_ack.0 + every {
            self.ack_due = true;
        }
        if self.seqr.is_some() {
            // The sequencer's own consumption bounds stability too.
            let before = self.stable_upto;
            self.recompute_stable();
            if self.stable_upto > before {
                // Only what still waits to be ordered needs the timer (messages already
                // ordered and not yet consumed do not).
                let due = self.own_queued();
                let s = self.seqr.as_mut().expect("sequencer");
                if due || s.waiting_len > 0 {
                    s.order_due = true;
                }
            }
        }
    }

    /// Drops records that are both stable and consumed here.
    pub(super) fn trim_history(&mut self) {
        let through = self.stable_upto.min(self.consumed_upto);
        if through >= self.history.base() {
            self.history.trim_through(through);
        }
    }

    /// Member timers: resend submissions, repeat NAKs, report to the sequencer, watch it.
    pub(super) fn member_tick(&mut self, now: Instant) {
        if self.received_upto < self.ordered_seen {
            self.nak_if_due(now);
        }
        if now.saturating_since(self.last_to_sequencer) >= self.cfg.heartbeat_interval {
            self.ack_due = true;
        }
        match self.cfg.detect(&mut self.watch, now) {
            super::recovery::Verdict::Fine => {}
            super::recovery::Verdict::Probe => {
                self.counters.probes_sent += 1;
                self.push_control(self.sequencer, Control::Probe);
            }
            super::recovery::Verdict::Dead => {
                let s = self.sequencer;
                self.failure_detected(now, s);
            }
        }
    }

    pub(super) fn member_deadline(&self) -> Instant {
        let mut t = self.last_to_sequencer + self.cfg.heartbeat_interval;
        t = t.min(self.cfg.next_check(&self.watch));
        if let Some(n) = self.nak_at {
            if self.received_upto < self.ordered_seen {
                t = t.min(n);
            }
        }
        t
    }
}
