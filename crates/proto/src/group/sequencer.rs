//! The sequencer role: ordering, the accept watermark for resilience r, stability and history
//! trimming, retransmissions on NAK, sync rounds when the history fills.

use super::history::Entry;
use super::msg::{RecordKind, SubmitRecords};
use super::timer::Timer;
use super::{addr_payload, encode_addr, Member, State, Watch};
use crate::addr::{Address, AddressHash};
use crate::time::Instant;
use std::collections::{HashMap, VecDeque};

/// Most retransmission requests queued at the sequencer.
const RETRANSMIT_QUEUE_MAX: usize = 256;
/// Most joins and leaves waiting to be ordered.
const MEMBERSHIP_QUEUE_MAX: usize = 64;
/// Most accepted submissions (and their bytes) waiting for room in the history.
const WAITING_MAX: usize = 8192;
/// Joins remembered (address, join id) so a late duplicate request is not a new join.
const JOIN_IDS_MAX: usize = 256;
const WAITING_BYTES_MAX: usize = 8 << 20;

/// The sequencer role (present while this member is the sequencer).
#[derive(Debug)]
pub(super) struct Sequencer {
    pub(super) next_seq: u64,
    /// Per member (and departing member): (consumed, received) as last reported.
    pub(super) acks: HashMap<Address, (u64, u64), AddressHash>,
    /// Members whose leave was applied, until they have their leave record.
    pub(super) departing: Vec<(Address, u64)>,
    /// Next msg_id expected from each sender (duplicate suppression, FIFO).
    pub(super) next_msg_id: HashMap<Address, u64, AddressHash>,
    /// Records `multicast_from..next_seq` are ordered but not yet multicast.
    pub(super) multicast_from: u64,
    /// Of those: their bytes as records in an Order (see [`Entry::wire_bytes`]), and how many
    /// are not our own application's messages (kept as records are ordered and sent, so the
    /// packing decision costs nothing per call).
    pub(super) unsent_bytes: usize,
    pub(super) unsent_foreign: usize,
    pub(super) oldest_unsent: Option<Instant>,
    /// A membership record ordered and not yet applied: nothing is ordered after it.
    pub(super) barrier: Option<u64>,
    /// Joiners waiting to be ordered, with their join ids.
    pub(super) joins: VecDeque<(Address, u64)>,
    pub(super) leaves: VecDeque<Address>,
    /// Submissions accepted (in order per sender) that wait for room in the history:
    /// (msg_id, payload, via BB) by sender.
    pub(super) waiting: HashMap<Address, VecDeque<WaitingSubmit>, AddressHash>,
    /// Senders with messages waiting (our own address: our application's), in the order
    /// they are served, one message per turn.
    pub(super) turns: VecDeque<Address>,
    pub(super) waiting_len: usize,
    /// Sequence numbers of our own messages that some member has not yet reported received:
    /// at most `send_window` of them, the same window every other sender has.
    pub(super) own_in_flight: VecDeque<u64>,
    pub(super) waiting_bytes: usize,
    /// Recent joins by (address, join id).
    pub(super) join_ids: VecDeque<(Address, u64)>,
    /// Joiners admitted, until they acknowledge: (joiner, join seq, members at the join).
    pub(super) welcomes: Vec<Welcome>,
    /// When the last multicast went (or the role was taken).
    pub(super) last_multicast_at: Instant,
    pub(super) watches: HashMap<Address, Watch, AddressHash>,
    /// The accept or stable watermark changed since the last multicast.
    pub(super) accept_news: bool,
    /// The stable watermark as of the last multicast.
    pub(super) stable_told: u64,
    /// Ask every member for an ack in the next multicast (the history is full).
    pub(super) sync_due: bool,
    pub(super) heartbeat_due: bool,
}

/// A submission waiting for room in the history: (msg_id, payload, via BB).
pub(super) type WaitingSubmit = (u64, Vec<u8>, bool);

/// A joiner admitted and not yet heard from: its join record and the members as of it, each
/// with its last ordered msg_id.
pub(super) type Welcome = (Address, u64, Vec<(Address, u64)>);

impl Member {
    /// Takes the sequencer role: the next record is `received_upto + 1`, and every member's
    /// state is assumed no further than what is known stable until it reports.
    pub(super) fn become_sequencer(&mut self, now: Instant) {
        let floor = self.rx.stable_upto;
        let mut acks = HashMap::default();
        let mut watches = HashMap::default();
        let mut next_msg_id = HashMap::default();
        // What each sender had ordered: applied records, and those held but not yet applied
        // (a rebuild's tentative ones).
        let mut last = self.rx.last_msg_id.clone();
        for seq in self.rx.applied_upto + 1..=self.rx.received_upto {
            if let Some(e) = self.rx.history.get(seq) {
                if e.kind == RecordKind::Message {
                    let l = last.entry(e.sender).or_insert(0);
                    *l = (*l).max(e.msg_id);
                }
            }
        }
        for &m in &self.members {
            // Saturating: a record claiming the largest message id (forged) leaves that
            // sender nothing new to order, rather than overflowing.
            next_msg_id.insert(m, last.get(&m).copied().unwrap_or(0).saturating_add(1));
            if m != self.me {
                acks.insert(m, (floor, floor));
                watches.insert(m, Watch::new(now));
            }
        }
        let next_seq = self.rx.received_upto + 1;
        self.sequencer = self.me;
        self.seqr = Some(Sequencer {
            next_seq,
            acks,
            departing: Vec::new(),
            next_msg_id,
            multicast_from: next_seq,
            unsent_bytes: 0,
            unsent_foreign: 0,
            oldest_unsent: None,
            barrier: None,
            joins: VecDeque::new(),
            leaves: VecDeque::new(),
            waiting: HashMap::default(),
            turns: VecDeque::new(),
            own_in_flight: VecDeque::new(),
            waiting_len: 0,
            waiting_bytes: 0,
            // Joins admitted so far, as every member learned them from the join records: a
            // joiner still asking under an id already admitted (a rebuild may have left it
            // out since) is not admitted a second time.
            join_ids: self.ms.join_ids_seen.clone(),
            welcomes: Vec::new(),
            last_multicast_at: now,
            watches,
            accept_news: true,
            stable_told: 0,
            sync_due: false,
            heartbeat_due: true,
        });
        self.multicast_sent(now);
        self.timers.stop(Timer::Sync);
        self.timers.stop(Timer::Order);
        self.arm_watches();
    }

    /// Whether the sequencer may order one more record now.
    fn can_order(&mut self) -> bool {
        if !matches!(self.state, State::Normal) {
            return false;
        }
        let s = self.seqr.as_ref().expect("sequencer");
        if s.barrier.is_some() {
            return false;
        }
        let limit = self.rx.stable_upto.min(self.rx.consumed_upto) + self.cfg.history_max as u64;
        if s.next_seq > limit || s.next_seq - self.rx.history.base() >= self.cfg.history_max as u64
        {
            self.counters.history_full += 1;
            self.request_sync_round();
            return false;
        }
        true
    }

    fn request_sync_round(&mut self) {
        let s = self.seqr.as_mut().expect("sequencer");
        if !s.sync_due && !self.timers.is_set(Timer::Sync) {
            s.sync_due = true;
            self.counters.syncs += 1;
        }
    }

    /// Gives `payload` the next sequence number.
    fn order(&mut self, now: Instant, e: Entry) -> u64 {
        let s = self.seqr.as_mut().expect("sequencer");
        let seq = s.next_seq;
        s.next_seq += 1;
        if matches!(
            e.kind,
            RecordKind::Join | RecordKind::Leave | RecordKind::View
        ) {
            s.barrier = Some(seq);
        }
        s.oldest_unsent.get_or_insert(now);
        s.note_unsent(&e, self.me);
        self.arm_multicast();
        let fresh = self.rx.history.insert(seq, e);
        assert_eq!(fresh, Ok(true), "the sequencer orders into its own window");
        self.rx.received_upto = seq;
        self.rx.ordered_seen = seq;
        self.counters.ordered += 1;
        seq
    }

    /// Gives an application message the next sequence number.
    fn order_message(
        &mut self,
        now: Instant,
        sender: Address,
        msg_id: u64,
        payload: Vec<u8>,
        via_bb: bool,
    ) {
        self.order(
            now,
            Entry {
                sender,
                msg_id,
                kind: RecordKind::Message,
                payload: Some(payload),
                via_bb,
            },
        );
    }

    /// Orders what waits at the sequencer: joins and leaves first, then messages.
    pub(super) fn order_next(&mut self, now: Instant) {
        if self.seqr.is_none() {
            return;
        }
        loop {
            let s = self.seqr.as_mut().expect("sequencer");
            let (kind, who, join_id) = if let Some(&a) = s.leaves.front() {
                (RecordKind::Leave, a, None)
            } else if let Some(&(a, id)) = s.joins.front() {
                (RecordKind::Join, a, Some(id))
            } else {
                break;
            };
            if !self.can_order() {
                return;
            }
            let s = self.seqr.as_mut().expect("sequencer");
            if join_id.is_some() {
                s.joins.pop_front();
            } else {
                s.leaves.pop_front();
            }
            // The record waits for a member to hold it (see `advance_accept`): ask for acks.
            s.sync_due = true;
            // A join record names the joiner and its join id.
            let mut payload = encode_addr(who);
            if let Some(id) = join_id {
                payload.extend_from_slice(&id.to_le_bytes());
            }
            self.order(
                now,
                Entry {
                    sender: self.me,
                    msg_id: 0,
                    kind,
                    payload: Some(payload),
                    via_bb: false,
                },
            );
        }
        self.order_turns(now);
        self.out.oldest_unsubmitted = None;
        self.arm_outbox();
        self.advance_accept(now);
    }

    /// The lowest record every other member has reported received.
    fn received_by_all(&self) -> u64 {
        let s = self.seqr.as_ref().expect("sequencer");
        self.members
            .iter()
            .filter(|&&m| m != self.me)
            .map(|m| s.acks.get(m).map_or(0, |a| a.1))
            .min()
            .unwrap_or(s.next_seq - 1)
    }

    /// Whether the sequencer's own next message may be ordered: one is queued and fewer than
    /// `send_window` of ours are ahead of what every member has received. A remote sender
    /// has that many in flight per round trip; without the same bound the sequencer's own
    /// application would fill the history and starve everyone else.
    fn own_ready(&mut self) -> bool {
        let done = self.received_by_all();
        let window = self.cfg.send_window;
        let s = self.seqr.as_mut().expect("sequencer");
        while s.own_in_flight.front().is_some_and(|&q| q <= done) {
            s.own_in_flight.pop_front();
        }
        let queued = self.own_queued();
        let s = self.seqr.as_ref().expect("sequencer");
        if queued && s.own_in_flight.len() >= window {
            self.counters.own_window_full += 1;
            return false;
        }
        queued
    }

    /// Whether a message of the sequencer's own application that went out in a multicast is
    /// not yet reported received by every other member (what adaptive packing calls in
    /// flight for the sequencer's own messages).
    pub(super) fn own_multicast_in_flight(&mut self) -> bool {
        let done = self.received_by_all();
        let s = self.seqr.as_mut().expect("sequencer");
        while s.own_in_flight.front().is_some_and(|&q| q <= done) {
            s.own_in_flight.pop_front();
        }
        s.own_in_flight
            .front()
            .is_some_and(|&q| q < s.multicast_from)
    }

    /// Whether the sequencer's own application has a message not yet ordered.
    pub(super) fn own_queued(&self) -> bool {
        let s = self.seqr.as_ref().expect("sequencer");
        let next = s.next_msg_id.get(&self.me).copied().unwrap_or(1);
        self.out.pending.back().is_some_and(|p| p.msg_id >= next)
    }

    /// Orders the sequencer's own next queued message.
    fn order_one_own(&mut self, now: Instant) {
        let s = self.seqr.as_mut().expect("sequencer");
        let next = s.next_msg_id.get(&self.me).copied().unwrap_or(1);
        // Our msg_ids in `pending` are consecutive from its front.
        let Some(p) = self
            .out
            .pending
            .front()
            .and_then(|f| next.checked_sub(f.msg_id))
            .and_then(|i| self.out.pending.get(i as usize))
        else {
            return;
        };
        let payload = p.payload.clone();
        s.next_msg_id.insert(self.me, next.saturating_add(1));
        let seq = s.next_seq;
        s.own_in_flight.push_back(seq);
        self.order_message(now, self.me, next, payload, false);
    }

    /// Orders queued messages while the history has room, one per sender in turn (the
    /// sequencer's own application is one of the senders), so every sender gets an equal
    /// share of the history when it is the bottleneck.
    fn order_turns(&mut self, now: Instant) {
        if self.own_ready() {
            let me = self.me;
            let s = self.seqr.as_mut().expect("sequencer");
            if !s.turns.contains(&me) {
                s.turns.push_back(me);
            }
        }
        loop {
            if self.seqr.as_ref().expect("sequencer").turns.is_empty() || !self.can_order() {
                return;
            }
            let s = self.seqr.as_mut().expect("sequencer");
            let who = s.turns.pop_front().expect("not empty");
            if who == self.me {
                // Back in line after its message; dropped at its next turn if by then it has
                // nothing it may order.
                if self.own_ready() {
                    self.order_one_own(now);
                    self.seqr.as_mut().expect("sequencer").turns.push_back(who);
                }
                continue;
            }
            let Some(q) = s.waiting.get_mut(&who) else {
                continue;
            };
            let Some((msg_id, payload, bb)) = q.pop_front() else {
                s.waiting.remove(&who);
                continue;
            };
            if q.is_empty() {
                s.waiting.remove(&who);
            } else {
                s.turns.push_back(who);
            }
            s.waiting_len -= 1;
            s.waiting_bytes -= payload.len();
            self.order_message(now, who, msg_id, payload, bb);
        }
    }

    /// Drops what `who` submitted and we had not ordered (it left).
    pub(super) fn drop_waiting(&mut self, who: Address) {
        let s = self.seqr.as_mut().expect("sequencer");
        if let Some(q) = s.waiting.remove(&who) {
            s.waiting_len -= q.len();
            s.waiting_bytes -= q.iter().map(|w| w.1.len()).sum::<usize>();
        }
        s.turns.retain(|&a| a != who);
    }

    /// A submission reached the sequencer.
    pub(super) fn sequence_submit(
        &mut self,
        now: Instant,
        from: Address,
        records: SubmitRecords<'_>,
        bb: bool,
    ) {
        for (msg_id, payload) in records.iter() {
            let s = self.seqr.as_mut().expect("sequencer");
            let Some(&expected) = s.next_msg_id.get(&from) else {
                self.counters.dropped_other_epoch += 1;
                return;
            };
            if msg_id < expected {
                self.counters.duplicates += 1;
                continue;
            }
            if msg_id > expected {
                // A gap (an earlier submission was lost): the sender resends in order.
                return;
            }
            if !s.waiting.contains_key(&from) && self.can_order() {
                let s = self.seqr.as_mut().expect("sequencer");
                s.next_msg_id.insert(from, expected.saturating_add(1));
                self.order_message(now, from, msg_id, payload.to_vec(), bb);
                continue;
            }
            // No room in the history: accept it into the bounded waiting queue of its sender
            // (served in turn with the others) rather than make the sender time out.
            let s = self.seqr.as_mut().expect("sequencer");
            if s.waiting_len >= WAITING_MAX || s.waiting_bytes + payload.len() > WAITING_BYTES_MAX {
                self.counters.history_full += 1;
                return;
            }
            s.next_msg_id.insert(from, expected.saturating_add(1));
            s.waiting_len += 1;
            s.waiting_bytes += payload.len();
            let q = s.waiting.entry(from).or_default();
            if q.is_empty() {
                s.turns.push_back(from);
            }
            q.push_back((msg_id, payload.to_vec(), bb));
        }
        self.advance_accept(now);
    }

    /// A member's report of how far it has received and consumed.
    pub(super) fn sequencer_note_ack(
        &mut self,
        now: Instant,
        from: Address,
        consumed: u64,
        received: u64,
    ) {
        let s = self.seqr.as_mut().expect("sequencer");
        if let Some(w) = s.watches.get_mut(&from) {
            w.heard(now, self.cfg.unreachable_silence);
            self.arm_watches();
        }
        let s = self.seqr.as_mut().expect("sequencer");
        let Some(a) = s.acks.get_mut(&from) else {
            return;
        };
        let cap = s.next_seq - 1;
        a.0 = a.0.max(consumed.min(cap));
        a.1 = a.1.max(received.min(cap));
        let (consumed, received) = *a;
        if s.departing
            .iter()
            .any(|&(d, leave)| d == from && consumed >= leave)
        {
            // A departed member has delivered its leave record: it is gone.
            s.departing.retain(|&(d, _)| d != from);
            s.watches.remove(&from);
            self.arm_watches();
        }
        let s = self.seqr.as_mut().expect("sequencer");
        s.welcomes
            .retain(|(j, seq, _)| *j != from || received < *seq);
        let members = &self.members;
        let departing = &s.departing;
        s.acks
            .retain(|m, _| members.contains(m) || departing.iter().any(|(d, _)| d == m));
        self.recompute_stable();
        self.advance_accept(now);
        self.order_next(now);
    }

    /// Stable: the lowest record consumed by every member (and departing member).
    pub(super) fn recompute_stable(&mut self) {
        let s = self.seqr.as_mut().expect("sequencer");
        let stable = s
            .acks
            .values()
            .map(|&(c, _)| c)
            .chain(std::iter::once(self.rx.consumed_upto))
            .min()
            .unwrap_or(self.rx.consumed_upto);
        if stable > self.rx.stable_upto {
            if stable >= s.multicast_from {
                // Everyone already has these (retransmitted on NAK while a packed multicast
                // was held back): no need to multicast them.
                for q in s.multicast_from..=stable.min(s.next_seq - 1) {
                    if let Some(e) = self.rx.history.get(q) {
                        s.note_sent(e, self.me);
                    }
                }
                s.multicast_from = stable + 1;
                if s.multicast_from >= s.next_seq {
                    s.oldest_unsent = None;
                    self.timers.stop(Timer::Multicast);
                }
            }
            self.rx.stable_upto = stable;
            // Members learn it from the next multicast; it needs one of its own only when
            // their histories would otherwise hold much more than needed while we are idle.
            if stable >= s.stable_told + self.cfg.history_max as u64 / 2 {
                s.accept_news = true;
            }
            self.timers.stop(Timer::Sync);
            self.trim_history();
        }
    }

    /// Moves the accept watermark: a record is accepted once the r lowest-ranked members
    /// besides the sequencer hold it (all members, for the record that starts a rebuilt
    /// view). Accepted records are applied here at once.
    pub(super) fn advance_accept(&mut self, now: Instant) {
        let Some(s) = self.seqr.as_ref() else {
            return;
        };
        let ordered = s.next_seq - 1;
        let r = self.cfg.resilience as usize;
        let mut cand = ordered;
        let mut view_committed = false;
        let others = self.members.iter().filter(|&&m| m != self.me);
        for m in others.clone().take(r) {
            cand = cand.min(s.acks.get(m).map_or(0, |a| a.1));
        }
        if let Some(b) = s.barrier.filter(|&b| b <= cand) {
            let e = self.rx.history.get(b);
            let holds = |m: &Address| s.acks.get(m).is_some_and(|a| a.1 >= b);
            if e.is_some_and(|e| e.kind == RecordKind::View) {
                let holding = 1 + others.clone().filter(|m| holds(m)).count();
                // Its quorum holds it: the view is chosen (see `recovery`), whether or not the
                // r members besides us that acceptance also waits for are among them.
                view_committed = holding >= self.rec.view_quorum;
                if !view_committed {
                    // A rebuilt view commits when its quorum of members (us included) hold its
                    // View record, and so everything before it: no round on the view before
                    // can succeed then (see `recovery`). Until then nothing more is accepted,
                    // not even the old records up to the start: a member that alone held them
                    // could be cut off, and the next rebuild would number other records in
                    // their place.
                    cand = cand.min(self.rx.accepted_upto);
                }
            } else if let Some(who) = e
                .filter(|e| matches!(e.kind, RecordKind::Join | RecordKind::Leave))
                .map(addr_payload)
            {
                // A join or leave, even with r = 0, waits until a member besides us and the
                // one it names holds it. The joiner's history starts there and the leaver's
                // ends there; were we alone to hold it and then cut off, a rebuild would
                // number something else in its place, and the two would disagree with the
                // group about their own first or last record.
                // Our own leave takes one more: we are gone once it is applied, so the r
                // failures it must survive are all among the others.
                let needed = if who == self.me { r + 1 } else { r.max(1) };
                let mut holders = others.clone().filter(|&&m| m != who).take(needed);
                // And a majority of the list it makes must hold it (a joiner counts: it is
                // told at once), so the next change is ordered only once most of the group
                // knows this one. A rebuild's coordinator then cannot miss a change that has
                // a successor (see `decide_view`).
                let joining = e.is_some_and(|e| e.kind == RecordKind::Join);
                let after = self.members.len() + usize::from(joining) - usize::from(!joining);
                let knowing = usize::from(joining)
                    + usize::from(who != self.me)
                    + others.clone().filter(|&&m| m != who && holds(&m)).count();
                if !holders.all(holds) || knowing * 2 <= after {
                    cand = b - 1;
                }
            }
        }
        if view_committed {
            self.note_committed();
        }
        if cand > self.rx.accepted_upto {
            self.rx.accepted_upto = cand;
            self.seqr.as_mut().expect("sequencer").accept_news = true;
            self.apply_ready(now);
        }
    }

    /// A member asked for records again: queue what this member holds of them.
    pub(super) fn queue_retransmit(&mut self, to: Address, from: u64, upto: u64) {
        if !matches!(self.state, State::Normal | State::Departing) {
            return;
        }
        let held = match self.seqr.as_ref() {
            Some(s) => s.next_seq - 1,
            None => self.rx.received_upto,
        };
        let hi = upto.min(held);
        let lo = from.max(self.rx.history.base());
        if lo > hi {
            return;
        }
        if let Some(r) = self.rx.retransmit.iter_mut().find(|r| r.0 == to) {
            r.1 = r.1.min(lo);
            r.2 = r.2.max(hi);
            return;
        }
        if self.rx.retransmit.len() < RETRANSMIT_QUEUE_MAX {
            self.rx.retransmit.push_back((to, lo, hi));
        }
    }

    /// Whether the membership record ordered and not yet applied is about `who`.
    fn barrier_names(&self, who: Address) -> bool {
        let s = self.seqr.as_ref().expect("sequencer");
        s.barrier
            .and_then(|b| self.rx.history.get(b))
            .is_some_and(|e| e.kind != RecordKind::View && super::addr_payload(e) == who)
    }

    pub(super) fn queue_join(&mut self, now: Instant, who: Address, join_id: u64) {
        // (A joiner already admitted had its Welcome repeated by `on_join_request`.)
        let s = self.seqr.as_mut().expect("sequencer");
        if self.members.contains(&who)
            || s.joins.iter().any(|j| j.0 == who)
            || s.join_ids.contains(&(who, join_id))
        {
            // A member already, queued, or a request of a join that completed (and perhaps
            // ended in a leave) still in flight.
            return;
        }
        if self.barrier_names(who) {
            return;
        }
        let s = self.seqr.as_mut().expect("sequencer");
        if s.joins.len() < MEMBERSHIP_QUEUE_MAX {
            s.joins.push_back((who, join_id));
            if s.join_ids.len() >= JOIN_IDS_MAX {
                s.join_ids.pop_front();
            }
            s.join_ids.push_back((who, join_id));
        }
        self.order_next(now);
    }

    pub(super) fn queue_leave(&mut self, now: Instant, who: Address) {
        let s = self.seqr.as_mut().expect("sequencer");
        if let Some(&(_, leave)) = s.departing.iter().find(|d| d.0 == who) {
            let from = s.acks.get(&who).map_or(leave, |a| (a.1 + 1).min(leave));
            self.queue_retransmit(who, from, leave);
            return;
        }
        if !self.members.contains(&who) || s.leaves.contains(&who) || self.state != State::Normal {
            return;
        }
        if self.barrier_names(who) {
            return;
        }
        let s = self.seqr.as_mut().expect("sequencer");
        if s.leaves.len() < MEMBERSHIP_QUEUE_MAX {
            s.leaves.push_back(who);
        }
        self.order_next(now);
    }

    /// Sequencer timers: heartbeats, sync retries, the failure detector on every member.
    pub(super) fn sequencer_tick(&mut self, now: Instant) {
        let s = self.seqr.as_mut().expect("sequencer");
        if self.timers.expired(Timer::Heartbeat, now) {
            s.heartbeat_due = true;
        }
        if self.timers.expired(Timer::Sync, now) {
            self.timers.stop(Timer::Sync);
            s.sync_due = true;
        }
        if self.timers.take(Timer::Order) && self.state == State::Normal {
            self.advance_accept(now);
            self.order_next(now);
        }
        // (Before the earliest watch's check, the detector finds every member fine.)
        if self.state == State::Departing || !self.timers.expired(Timer::Watches, now) {
            return;
        }
        let s = self.seqr.as_mut().expect("sequencer");
        let mut dead = None;
        let watched: Vec<Address> = s.watches.keys().copied().collect();
        for m in watched {
            let verdict = {
                let s = self.seqr.as_mut().expect("sequencer");
                let w = s.watches.get_mut(&m).expect("watched");
                self.cfg.detect(w, now)
            };
            match verdict {
                super::detector::Verdict::Fine => {}
                super::detector::Verdict::Probe => {
                    self.counters.probes_sent += 1;
                    self.push_control(m, super::Control::Probe);
                }
                super::detector::Verdict::Dead => dead = Some(m),
            }
        }
        self.arm_watches();
        if let Some(m) = dead {
            let s = self.seqr.as_mut().expect("sequencer");
            s.watches.remove(&m);
            self.arm_watches();
            let s = self.seqr.as_mut().expect("sequencer");
            if s.departing.iter().any(|d| d.0 == m) {
                // A member that already left: forget it rather than rebuild. Its last report
                // may have been all that held stability back, and with the history full
                // nothing else recomputes it.
                s.departing.retain(|d| d.0 != m);
                s.acks.remove(&m);
                self.recompute_stable();
                self.order_next(now);
                return;
            }
            self.failure_detected(now, m);
        }
    }

    /// Arms the check of the earliest watched member.
    pub(super) fn arm_watches(&mut self) {
        let s = self.seqr.as_ref().expect("sequencer");
        let t = s.watches.values().map(|w| self.cfg.next_check(w)).min();
        self.timers.put(Timer::Watches, t);
    }

    /// Arms the end of the packer's hold on the records ordered and not yet multicast.
    pub(super) fn arm_multicast(&mut self) {
        let s = self.seqr.as_ref().expect("sequencer");
        let t = match (s.oldest_unsent, self.cfg.pack.hold_max()) {
            (Some(o), Some(d)) => Some(o + d),
            _ => None,
        };
        self.timers.put(Timer::Multicast, t);
    }

    /// A multicast went out (or had no one to go to): the next heartbeat is due
    /// `heartbeat_interval` later.
    pub(super) fn multicast_sent(&mut self, now: Instant) {
        self.seqr.as_mut().expect("sequencer").last_multicast_at = now;
        self.timers
            .set(Timer::Heartbeat, now + self.cfg.heartbeat_interval);
        if self.timers.is_set(Timer::Order) {
            self.timers.set(Timer::Order, now);
        }
        self.arm_multicast();
    }
}

impl Sequencer {
    /// A record joins those ordered and not yet multicast.
    pub(super) fn note_unsent(&mut self, e: &Entry, me: Address) {
        self.unsent_bytes += e.wire_bytes();
        self.unsent_foreign += usize::from(!e.is_message_of(me));
    }

    /// A record left those ordered and not yet multicast.
    pub(super) fn note_sent(&mut self, e: &Entry, me: Address) {
        self.unsent_bytes -= e.wire_bytes();
        self.unsent_foreign -= usize::from(!e.is_message_of(me));
    }
}
