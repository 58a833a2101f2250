//! Output: control messages, retransmissions, the sequencer's packed multicasts, members'
//! packed submissions, NAKs and acks, in that order; timers.

use super::msg::{
    MsgKind, MsgWriter, OrderRecord, RecordKind, FLAG_BB, FLAG_SYNC, GROUP_HEADER_BYTES,
    ORDER_FIXED_BYTES, SUBMIT_RECORD_BYTES,
};
use super::timer::Timer;
use super::{Address, Dest, Epoch, Member, State, ViewNews};
use crate::pack::{PackDecision, Packer};
use crate::time::Instant;
use std::collections::VecDeque;

/// A message this member sent and has not yet seen delivered.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) msg_id: u64,
    pub(super) payload: Vec<u8>,
    /// Last transmission (None: not yet sent).
    pub(super) sent_at: Option<Instant>,
}

/// A control message waiting for `poll_transmit`.
#[derive(Clone, Debug)]
pub(super) enum Control {
    Probe,
    Ack,
    JoinRequest,
    LeaveRequest,
    Redirect(Address),
    Welcome {
        join_seq: u64,
        members: Vec<(Address, u64)>,
    },
    Invite {
        epoch: Epoch,
        base: Epoch,
    },
    InviteReply {
        epoch: Epoch,
        /// The invitation's base (the answer carries what we accepted as its successor).
        base: Epoch,
    },
    /// The round `epoch` proposes `value` (see `recovery`).
    Propose {
        epoch: Epoch,
        value: ViewNews,
    },
    Accepted {
        epoch: Epoch,
    },
    /// A view that committed, not necessarily ours (see `recovery`).
    Announce(ViewNews),
    /// The current view, to a member that is behind (or the coordinator's announcement).
    NewView,
}

/// A member's sending side: its messages not yet delivered back, control messages, and its
/// reports to the sequencer.
#[derive(Debug)]
pub(super) struct Outbox {
    pub(super) next_msg_id: u64,
    pub(super) pending: VecDeque<Pending>,
    /// How many of `pending` (from the front) went out at least once.
    pub(super) sent_count: usize,
    /// Bytes of the submission records of `pending` not yet sent.
    pub(super) unsent_bytes: usize,
    /// Submissions not yet transmitted since the oldest was queued (for packing).
    pub(super) oldest_unsubmitted: Option<Instant>,
    pub(super) control: VecDeque<(Address, Control)>,
    pub(super) ack_due: bool,
    pub(super) last_ack: (u64, u64),
    pub(super) packer: Packer,
    /// The member the last multicast goes to first ([`Member::fanout`]).
    pub(super) fanout_first: Option<Address>,
}

impl Outbox {
    pub(super) fn new(packer: Packer) -> Outbox {
        Outbox {
            next_msg_id: 1,
            pending: VecDeque::new(),
            sent_count: 0,
            unsent_bytes: 0,
            oldest_unsubmitted: None,
            control: VecDeque::new(),
            ack_due: false,
            last_ack: (0, 0),
            packer,
            fanout_first: None,
        }
    }
}

impl Member {
    /// The next message to send, written into `buf`: its destination and length.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let n = buf.len().min(self.cfg.packet_bytes_max);
        let buf = &mut buf[..n];
        while let Some((to, c)) = self.out.control.pop_front() {
            // Only a message that carries this member's progress counts as its report to the
            // sequencer: a leaver's repeated LeaveRequests (or probes) must not hold back the
            // acks the sequencer needs to accept records and to hear that it lives.
            let report = matches!(c, Control::Ack);
            if let Some(len) = self.write_control(buf, c) {
                self.counters.packets_sent += 1;
                if report && to == self.sequencer {
                    self.reported_to_sequencer(now);
                }
                return Some((Dest::To(to), len));
            }
        }
        let out = if self.seqr.is_some() {
            self.write_retransmit(buf)
                .or_else(|| self.write_multicast(now, buf))
        } else {
            self.write_retransmit(buf)
                .or_else(|| self.write_member(now, buf))
        };
        if out.is_some() {
            self.counters.packets_sent += 1;
        }
        out
    }

    fn write_control(&mut self, buf: &mut [u8], c: Control) -> Option<usize> {
        let (g, me) = (self.cfg.group, self.me);
        let mut epoch = self.epoch;
        let kind = match &c {
            Control::Probe => MsgKind::Probe,
            Control::Ack => MsgKind::Ack,
            Control::JoinRequest => MsgKind::JoinRequest,
            Control::LeaveRequest => MsgKind::LeaveRequest,
            Control::Redirect(_) => MsgKind::Redirect,
            Control::Welcome { .. } => MsgKind::Welcome,
            Control::Invite { epoch: e, .. } => {
                epoch = *e;
                MsgKind::Invite
            }
            Control::InviteReply { epoch: e, .. } => {
                epoch = *e;
                MsgKind::InviteReply
            }
            Control::Propose { epoch: e, .. } => {
                epoch = *e;
                MsgKind::Propose
            }
            Control::Accepted { epoch: e } => {
                epoch = *e;
                MsgKind::Accepted
            }
            Control::NewView => MsgKind::NewView,
            Control::Announce(v) => {
                epoch = v.epoch;
                MsgKind::NewView
            }
        };
        let mut w = MsgWriter::start(buf, kind, 0, g, epoch, me)?;
        let ok = match c {
            Control::JoinRequest => w.u64(self.ms.join_id),
            Control::Probe | Control::LeaveRequest => true,
            Control::Invite { base, .. } => w.epoch(base) && w.u64(self.reported().2),
            Control::Ack => {
                // A member whose leave is applied needs nothing more from the group: its last
                // report counts every record it applied (its leave record included) as
                // consumed, so the sequencer stops holding stability back for it now, not
                // once its application happens to have taken those records (which this
                // report, written before they are handed out, would not say).
                let consumed = if self.state == State::Left {
                    self.rx.consumed_upto.max(self.rx.applied_upto)
                } else {
                    self.rx.consumed_upto
                };
                self.out.ack_due = false;
                self.out.last_ack = (consumed, self.rx.received_upto);
                self.counters.acks_sent += 1;
                w.u64(consumed) && w.u64(self.rx.received_upto)
            }
            Control::InviteReply { base, .. } => {
                let (received, view, config_seq) = self.reported();
                // (Applied, not only delivered: what we applied is ours whether or not the
                // application took it yet.)
                w.u64(self.rx.consumed_upto.max(self.rx.applied_upto))
                    && w.u64(received)
                    && w.u64(self.rx.history.base())
                    && w.epoch(view)
                    && w.u64(config_seq)
                    && self
                        .accepted_value(base)
                        .is_none_or(|(ballot, v)| w.epoch(ballot) && write_value(&mut w, &v))
            }
            Control::Propose { value: v, .. } => write_value(&mut w, &v),
            Control::Accepted { .. } => true,
            Control::Redirect(a) => w.address(a),
            Control::Welcome { join_seq, members } => {
                w.u64(join_seq)
                    && w.u64(self.rx.stable_upto)
                    && w.bytes(&[self.cfg.resilience, 0, 0, 0, 0, 0, 0, 0])
                    && w.address(self.me)
                    && w.member_ids(&members)
            }
            Control::NewView | Control::Announce(_) => {
                let v = match c {
                    Control::Announce(v) => v,
                    _ => self.view_news(),
                };
                w.u64(v.start)
                    && w.address(v.sequencer)
                    && w.u64(v.quorum as u64)
                    && w.u64(u64::from(v.committed))
                    && w.epoch(v.base)
                    && w.survivors(&v.donors)
            }
        };
        ok.then(|| w.finish())
    }

    fn order_writer<'b>(&self, buf: &'b mut [u8], flags: u8) -> Option<MsgWriter<'b>> {
        // A member serving a retransmission speaks only for what it holds.
        let ordered = self
            .seqr
            .as_ref()
            .map_or(self.rx.received_upto, |s| s.next_seq - 1);
        let mut w = MsgWriter::start(
            buf,
            MsgKind::Order,
            flags,
            self.cfg.group,
            self.epoch,
            self.me,
        )?;
        let accepted = self.rx.accepted_upto.min(ordered);
        let ok = w.u64(ordered) && w.u64(accepted) && w.u64(self.rx.stable_upto);
        ok.then_some(w)
    }

    /// Records owed to one member after its NAK (always with their payloads).
    fn write_retransmit(&mut self, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let (to, lo, hi) = self.rx.retransmit.pop_front()?;
        let mut w = self.order_writer(buf, 0)?;
        let mut seq = lo.max(self.rx.history.base());
        let mut n = 0u64;
        while seq <= hi {
            let Some(e) = self.rx.history.get(seq) else {
                seq += 1;
                continue;
            };
            let r = OrderRecord {
                seq,
                sender: e.sender,
                msg_id: e.msg_id,
                kind: e.kind,
                payload: e.payload.as_deref(),
            };
            if !w.order_record(&r) {
                break;
            }
            n += 1;
            seq += 1;
        }
        let len = w.finish();
        if seq <= hi {
            self.rx.retransmit.push_front((to, seq, hi));
        }
        self.counters.records_retransmitted += n;
        Some((Dest::To(to), len))
    }

    /// The sequencer's multicast: newly ordered records, packed, with the watermarks; or an
    /// empty one as heartbeat, sync request or accept notice.
    fn write_multicast(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let s = self.seqr.as_ref().expect("sequencer");
        let waiting = s.multicast_from < s.next_seq;
        if self.members.len() <= 1 {
            let s = self.seqr.as_mut().expect("sequencer");
            s.multicast_from = s.next_seq;
            s.unsent_bytes = 0;
            s.unsent_foreign = 0;
            s.oldest_unsent = None;
            s.heartbeat_due = false;
            s.accept_news = false;
            s.sync_due = false;
            self.multicast_sent(now);
            return None;
        }
        if waiting {
            let oldest = s.oldest_unsent.unwrap_or(now);
            let full = s.unsent_bytes + GROUP_HEADER_BYTES + ORDER_FIXED_BYTES >= buf.len();
            // The sequencer sends what a batch of input ordered at once. Its own messages come
            // one call at a time, so while earlier ones of its own are in flight (multicast and
            // not yet reported received by every member) they wait for company, as a member's
            // submissions wait while earlier ones are in flight; a fixed delay holds
            // everything. (Busy used to mean "a multicast went out less than `delay_max` ago":
            // any multicast, the one that carried another member's message included, so a
            // lone message sent in answer to one was held `delay_max`.) Members report such
            // records at once (see `Member::on_order`), so in flight lasts a round trip.
            let own_only = s.unsent_foreign == 0;
            let busy = own_only && self.own_multicast_in_flight();
            let s = self.seqr.as_ref().expect("sequencer");
            if let PackDecision::HoldUntil(t) = self.out.packer.decide(oldest, full, busy) {
                if now < t && !s.sync_due && !s.heartbeat_due {
                    return None;
                }
            }
        } else if !(s.heartbeat_due || s.accept_news || s.sync_due) {
            return None;
        }
        let sync = self.seqr.as_ref().expect("sequencer").sync_due;
        let mut w = self.order_writer(buf, if sync { FLAG_SYNC } else { 0 })?;
        let s = self.seqr.as_ref().expect("sequencer");
        let (mut seq, end) = (s.multicast_from, s.next_seq);
        let cap = self.out.packer.messages_per_packet_max();
        let mut n = 0usize;
        let (mut sent_bytes, mut sent_foreign) = (0usize, 0usize);
        let mut first = None;
        while seq < end && n < cap {
            let e = self
                .rx
                .history
                .get(seq)
                .expect("records not yet multicast are held");
            let r = OrderRecord {
                seq,
                sender: e.sender,
                msg_id: e.msg_id,
                kind: e.kind,
                payload: if e.via_bb { None } else { e.payload.as_deref() },
            };
            if !w.order_record(&r) {
                break;
            }
            sent_bytes += e.wire_bytes();
            let foreign = !e.is_message_of(self.me);
            if foreign && first.is_none() && e.kind == RecordKind::Message {
                first = Some(e.sender);
            }
            sent_foreign += usize::from(foreign);
            n += 1;
            seq += 1;
        }
        let len = w.finish();
        self.out.fanout_first = first;
        let s = self.seqr.as_mut().expect("sequencer");
        s.multicast_from = seq;
        s.unsent_bytes -= sent_bytes;
        s.unsent_foreign -= sent_foreign;
        s.oldest_unsent = (seq < end).then_some(now);
        if s.heartbeat_due && n == 0 {
            self.counters.heartbeats += 1;
        }
        s.heartbeat_due = false;
        s.accept_news = false;
        s.stable_told = self.rx.stable_upto;
        if sync {
            s.sync_due = false;
            self.timers
                .set(Timer::Sync, now + self.cfg.retransmit_timeout);
        }
        self.multicast_sent(now);
        if n > 0 {
            self.out.packer.record(n);
            self.counters.records_multicast += n as u64;
        }
        Some((Dest::All, len))
    }

    /// A member's submissions (packed), then its NAK, then its ack.
    fn write_member(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        if self.state == State::Normal {
            if let Some(x) = self.write_submit(now, buf) {
                return Some(x);
            }
            if self.rx.nak_due {
                self.rx.nak_due = false;
                if let Some((target, from, to)) = self.nak_range() {
                    let mut w = MsgWriter::start(
                        buf,
                        MsgKind::Nak,
                        0,
                        self.cfg.group,
                        self.epoch,
                        self.me,
                    )?;
                    let ok = w.u64(self.rx.consumed_upto)
                        && w.u64(self.rx.received_upto)
                        && w.u64(from)
                        && w.u64(to);
                    if ok {
                        self.counters.naks_sent += 1;
                        if target == self.sequencer {
                            self.reported_to_sequencer(now);
                        }
                        return Some((Dest::To(target), w.finish()));
                    }
                }
            }
        }
        if self.out.ack_due && matches!(self.state, State::Normal | State::Left) {
            let len = self.write_control(buf, Control::Ack)?;
            self.reported_to_sequencer(now);
            return Some((Dest::To(self.sequencer), len));
        }
        None
    }

    /// Sends (or resends, after the timeout) the oldest unordered messages, packed.
    ///
    /// `pending` holds, in msg_id order, our messages not yet delivered back: the first
    /// `sent_count` went out at least once, the rest not yet. A resend starts from the front,
    /// as the sequencer takes submissions only in order.
    fn write_submit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        let rto = self.cfg.retransmit_timeout;
        let window = self.cfg.send_window.min(self.out.pending.len());
        let resend = self
            .out
            .pending
            .front()
            .and_then(|p| p.sent_at)
            .is_some_and(|t| now.saturating_since(t) >= rto);
        let first = if resend { 0 } else { self.out.sent_count };
        if first >= window {
            return None;
        }
        let bb = self.cfg.use_bb(self.out.pending[first].payload.len());
        if !resend {
            if let Some(t) = self.out.oldest_unsubmitted {
                // Adaptive packing: at once when nothing of ours is in flight, otherwise hold
                // new messages (at most `delay_max`, or until a packet fills) so they leave
                // together when the sequencer answers.
                let room = buf.len().saturating_sub(GROUP_HEADER_BYTES + 16);
                let full = self.out.unsent_bytes >= room;
                if let PackDecision::HoldUntil(t) =
                    self.out.packer.decide(t, full, self.out.sent_count > 0)
                {
                    if now < t {
                        return None;
                    }
                }
            }
        }
        let mut w = MsgWriter::start(
            buf,
            MsgKind::Submit,
            if bb { FLAG_BB } else { 0 },
            self.cfg.group,
            self.epoch,
            self.me,
        )?;
        if !(w.u64(self.rx.consumed_upto) && w.u64(self.rx.received_upto)) {
            return None;
        }
        let cap = self.out.packer.messages_per_packet_max();
        let mut n = 0usize;
        for p in self.out.pending.range_mut(first..window) {
            if n >= cap || self.cfg.use_bb(p.payload.len()) != bb {
                break;
            }
            if !w.submit_record(p.msg_id, &p.payload) {
                break;
            }
            if p.sent_at.is_some() {
                self.counters.submits_resent += 1;
            } else {
                self.out.unsent_bytes = self
                    .out
                    .unsent_bytes
                    .saturating_sub(p.payload.len() + SUBMIT_RECORD_BYTES);
            }
            p.sent_at = Some(now);
            n += 1;
        }
        if n == 0 {
            return None;
        }
        self.out.sent_count = self.out.sent_count.max(first + n);
        self.counters.submits_sent += n as u64;
        self.out.packer.record(n);
        self.out.oldest_unsubmitted = (self.out.sent_count < self.out.pending.len()).then_some(now);
        self.out.ack_due = false;
        self.out.last_ack = (self.rx.consumed_upto, self.rx.received_upto);
        self.reported_to_sequencer(now);
        self.arm_outbox();
        let dest = if bb {
            Dest::All
        } else {
            Dest::To(self.sequencer)
        };
        Some((dest, w.finish()))
    }

    /// This member's progress went to the sequencer: the next report is due a heartbeat later.
    fn reported_to_sequencer(&mut self, now: Instant) {
        self.timers
            .set(Timer::Report, now + self.cfg.heartbeat_interval);
    }

    /// Arms the resend of the oldest submission in flight, and the packer's hold on the
    /// submissions not yet sent while some within the send window are.
    pub(super) fn arm_outbox(&mut self) {
        let o = &self.out;
        let resend = o.pending.front().and_then(|p| p.sent_at);
        self.timers.put(
            Timer::Resend,
            resend.map(|t| t + self.cfg.retransmit_timeout),
        );
        let unsent = o.sent_count < o.pending.len().min(self.cfg.send_window);
        let hold = match (o.oldest_unsubmitted, self.cfg.pack.hold_max()) {
            (Some(t), Some(d)) if unsent => Some(t + d),
            _ => None,
        };
        self.timers.put(Timer::Submit, hold);
    }

    /// The new sequencer repeats the view to members that have not acknowledged its View
    /// record, once per heartbeat.
    pub(super) fn resend_view(&mut self, now: Instant) {
        let s = self.seqr.as_ref().expect("sequencer");
        let Some(b) = s.barrier else {
            return;
        };
        if !s.heartbeat_due
            || !self
                .rx
                .history
                .get(b)
                .is_some_and(|e| e.kind == super::RecordKind::View)
        {
            return;
        }
        let _ = now;
        let lagging: Vec<_> = self
            .members
            .iter()
            .copied()
            .filter(|&m| m != self.me && s.acks.get(&m).is_none_or(|a| a.1 < b))
            .collect();
        for m in lagging {
            self.push_control(m, Control::NewView);
        }
    }
}

/// A view as the value of a proposal or an answer.
fn write_value(w: &mut MsgWriter<'_>, v: &super::ViewNews) -> bool {
    w.view_value_parts(
        v.epoch,
        v.start,
        v.sequencer,
        v.quorum as u64,
        v.base,
        &v.donors,
    )
}
