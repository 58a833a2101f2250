//! Total ordering protocols of paper 002 over the virtually synchronous stack
//! ([`crate::vsync`]): `totem`, `total`, `dynseq` and `dynord`, each with packing off, fixed or
//! adaptive (the stack's [`PackMode`]), selected per group by [`OrderConfig::protocol`].
//!
//! A [`Member`] is a sans-IO state machine with the same interface for every protocol:
//! [`Member::send`], [`Member::handle_message`], [`Member::handle_timeout`], then
//! [`Member::poll_transmit`], [`Member::poll_delivery`], [`Member::poll_event`] and
//! [`Member::poll_timeout`].
//!
//! **One ordering rule for all four: a chain of runs.** Within a view, one member at a time
//! holds the *role* (the token in `totem` and `total`, the sequencer in `dynseq`, the orderer
//! in `dynord`), starting with the lowest rank. Only the holder casts *run* records (messages,
//! orders, the pass of the role); others cast *side* records (token requests, `dynord`'s
//! messages). The total order is the holder's run records in its FIFO stream up to the one
//! that passes the role, then the next holder's, and so on; every member follows the chain
//! through the casts it receives, so no extra agreement is needed. A member casts run records
//! only after it has followed the chain to the pass that gave it the role.
//! - `totem`: the token goes round by rank; the holder casts up to `visit_max` buffered
//!   messages, the last carrying the token to the next rank (or a bare pass if it has none).
//!   An idle token (no message delivered for `token_idle_hold`) waits that long at each
//!   member rather than spin the network.
//! - `total`: a member with messages and no token casts a request (once, until it gets the
//!   token). The holder casts what it has and keeps the token while nobody asks; when someone
//!   asked it passes it to the next requester by rank, piggybacked on its last message, with a
//!   request of its own if it still has messages.
//! - `dynseq`: members hand their messages to the sequencer (directs, packed into one when
//!   packing is on, resent until delivered); the sequencer casts them in order, its own
//!   straight away. The role moves to a member whose messages made 3/4 of the last
//!   `migrate_every` ordered.
//! - `dynord`: members cast their messages at once; the orderer casts orders naming, per
//!   member, how far its messages go, in the order the orderer received them (its own are
//!   ordered as it sees them come back). The role moves as in `dynseq`.
//!
//! **View changes** (paper 002 §3.1). At the flush the stack delivers every cast of the old
//! view up to the agreed cut to every survivor. The chain is followed as far as those casts
//! take it; the messages left (a holder's run cut off by its crash, `dynord` messages never
//! ordered) are delivered by the deterministic rule of the paper: by their sender's rank in
//! the old view, each sender's in the order it sent them. Then the new view is delivered and
//! the role starts again at its lowest rank. Every member that stays delivers the same
//! messages in the old view, in the same order. A message not yet cast when the flush began
//! (buffered waiting for the token, or handed to a sequencer that did not order it) is sent
//! in the next view, before any later message of its sender: nothing is lost or reordered,
//! and the buffers are not pushed through a window that may be full.

mod member;
pub mod record;
#[cfg(test)]
mod tests;

use crate::addr::{Address, AddressHash};
use crate::pack::PackMode;
use crate::time::Instant;
use crate::vsync::{Dest, Upcall, ViewChange, ViewId, Vs, VsConfig, VsConfigError, VsState};
use core::fmt;
use core::time::Duration;
use record::{Head, Kind, Record, FLAG_PASS, FLAG_REQUEST, HEAD_BYTES};
use std::collections::{HashMap, VecDeque};

/// The ordering protocol of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    Totem,
    Total,
    Dynseq,
    Dynord,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Totem,
        Protocol::Total,
        Protocol::Dynseq,
        Protocol::Dynord,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Totem => "totem",
            Protocol::Total => "total",
            Protocol::Dynseq => "dynseq",
            Protocol::Dynord => "dynord",
        }
    }

    pub fn from_name(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// A group's parameters; every member must use the same.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderConfig {
    pub protocol: Protocol,
    /// The stack below: window, packing, stability, timers.
    pub vs: VsConfig,
    /// Messages a member holds that are not yet delivered (sent ones included); past it
    /// [`Member::send`] fails with `Full`.
    pub send_queue_max: usize,
    /// `totem`: messages a token holder casts per visit.
    pub visit_max: usize,
    /// `totem`: an idle token waits this long at each member.
    pub token_idle_hold: Duration,
    /// `dynseq`: messages handed to the sequencer and not yet delivered.
    pub submit_window: usize,
    /// `dynseq`, `dynord`: how many ordered messages between checks for a more active member
    /// to take the role (0: the role never moves).
    pub migrate_every: u32,
}

impl Default for OrderConfig {
    fn default() -> Self {
        OrderConfig {
            protocol: Protocol::Totem,
            vs: VsConfig::default(),
            send_queue_max: 8192,
            visit_max: 256,
            token_idle_hold: Duration::from_millis(1),
            submit_window: 512,
            migrate_every: 512,
        }
    }
}

impl OrderConfig {
    pub fn validate(&self) -> Result<(), VsConfigError> {
        self.vs.validate()?;
        if self.vs.cast_bytes_max <= HEAD_BYTES + record::SUBMIT_ENTRY_BYTES {
            return Err(VsConfigError("cast_bytes_max must exceed a record's head"));
        }
        if self.send_queue_max == 0 || self.visit_max == 0 || self.submit_window == 0 {
            return Err(VsConfigError(
                "send_queue_max, visit_max and submit_window must be at least 1",
            ));
        }
        Ok(())
    }

    /// Longest application message.
    pub fn message_bytes_max(&self) -> usize {
        self.vs.cast_bytes_max - HEAD_BYTES - record::SUBMIT_ENTRY_BYTES
    }

    /// The configuration of `protocol` with packing `pack`, the rest default.
    pub fn with(protocol: Protocol, pack: PackMode) -> OrderConfig {
        OrderConfig {
            protocol,
            vs: VsConfig {
                pack,
                ..VsConfig::default()
            },
            ..OrderConfig::default()
        }
    }
}

/// Why a call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("not a member ({0:?})")]
    NotMember(VsState),
    /// `send_queue_max` messages are waiting (back-pressure).
    #[error("send queue full")]
    Full,
    #[error("message of {len} bytes > {max}")]
    TooLong { len: usize, max: usize },
}

/// One message of the total order.
#[derive(Debug, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub sender: Address,
    /// The sender's number for it (1, 2, 3... for the sender's life).
    pub msg_id: u64,
    pub payload: &'a [u8],
}

/// What the ordered stream holds: messages, and views in their place (after the last
/// message of the previous view, before the first of their own).
#[derive(Debug, PartialEq, Eq)]
pub enum Delivered<'a> {
    Message(Delivery<'a>),
    View(ViewChange),
}

/// An entry of the ordered stream, waiting for the application (a message as its whole
/// record, the payload from [`HEAD_BYTES`]).
#[derive(Debug)]
enum Ready {
    Message(Address, u64, Vec<u8>),
    View(ViewChange),
}

/// Events outside the ordered stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderEvent {
    /// This member's message is delivered here.
    SendDone {
        msg_id: u64,
    },
    Left,
    Expelled,
    JoinFailed,
    /// A view change has lasted [`crate::vsync::BLOCKED_AFTER_FLUSH_TIMEOUTS`] flush
    /// timeouts: this member most likely cannot reach a majority of its view, and delivers
    /// nothing until a view is installed or it learns it was left out. Once per view change;
    /// `reachable` members of the view are not suspected (this one included), `needed` is a
    /// majority.
    Blocked {
        reachable: usize,
        needed: usize,
    },
}

/// What a member counted (the stack's counters are in [`Member::vs_counters`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderCounters {
    pub sent: u64,
    pub delivered: u64,
    /// Delivered at a view change by the rank rule.
    pub delivered_by_rank: u64,
    pub passes: u64,
    pub requests: u64,
    pub submits_sent: u64,
    pub submits_resent: u64,
    pub submits_dropped: u64,
    pub orders: u64,
    pub migrations: u64,
    pub duplicates: u64,
    pub dropped_bad: u64,
}

crate::counters_sum!(OrderCounters {
    sent,
    delivered,
    delivered_by_rank,
    passes,
    requests,
    submits_sent,
    submits_resent,
    submits_dropped,
    orders,
    migrations,
    duplicates,
    dropped_bad,
});

/// Most deliveries waiting for the application; past it the member takes nothing more from
/// the stack until the application catches up (back-pressure, see `process`).
pub const DELIVERIES_MAX: usize = 1 << 16;

/// A run record waiting for the chain (a message keeps its whole record: the payload starts
/// at [`HEAD_BYTES`], so it is not copied again).
#[derive(Debug)]
enum Run {
    Msg(Head, Vec<u8>),
    Pass(Head),
    Order(Vec<(u16, u64)>),
}

/// A `dynord` message cast at once: (its cast number in its sender's stream, head, the whole
/// record).
type Data = (u64, Head, Vec<u8>);

/// `dynseq`: one of this member's messages on its way through the sequencer.
#[derive(Debug)]
struct Submitted {
    vseq: u32,
    msg_id: u64,
    payload: Vec<u8>,
    /// Cast by this member as sequencer.
    cast: bool,
}

/// What an upcall asks of us, taken out of the stack's borrow.
enum Up {
    Cast(usize, u64, Vec<u8>),
    Direct(Address, Vec<u8>),
    Flush,
    View(ViewChange),
    Left,
    Expelled,
    JoinFailed,
    Blocked { reachable: usize, needed: usize },
    Ignore,
}

/// One process's membership in one totally ordered group.
pub struct Member {
    cfg: OrderConfig,
    vs: Vs,
    me: Address,
    next_msg_id: u64,
    /// Messages not yet cast or handed to the sequencer.
    pending: VecDeque<(u64, Vec<u8>)>,
    /// `dynseq`: handed on (or cast), not yet delivered.
    in_flight: VecDeque<Submitted>,
    submitted_at: Option<Instant>,
    /// `dynseq`: the last `unsubmitted` of `in_flight` were never handed on (held for
    /// packing), how many bytes they take in a submit, and since when the oldest waits.
    unsubmitted: usize,
    unsubmitted_bytes: usize,
    unsubmitted_since: Option<Instant>,
    next_vseq: u32,
    /// The view's members, in rank order, and this member's rank.
    members: Vec<Address>,
    rank: usize,
    /// Rank of the role's holder, as far as the chain has been followed.
    holder: usize,
    holder_since: Instant,
    /// This member cast the pass of its role and the chain has not reached it yet.
    passed: bool,
    runq: Vec<VecDeque<Run>>,
    /// Last cast number handed up per stream.
    cast_seen: Vec<u64>,
    /// `dynord`: messages not yet ordered, and how far each stream's are ordered.
    data_q: Vec<VecDeque<Data>>,
    ordered_data: Vec<u64>,
    order_cursor: VecDeque<(u16, u64)>,
    /// `dynord` orderer: received, not yet in an order it cast.
    unordered: VecDeque<(u16, u64)>,
    /// `total`: requests seen and tokens passed, per rank; this member's requests.
    requests_seen: Vec<u32>,
    served: Vec<u32>,
    my_requests: u32,
    /// `dynseq` sequencer: submits to cast, and the next `vseq` due from each member.
    to_relay: VecDeque<(Address, u32, u64, Vec<u8>)>,
    expected_vseq: HashMap<Address, u32, AddressHash>,
    relayed_vseq: HashMap<Address, u32, AddressHash>,
    /// Messages ordered per rank since the last migration check.
    activity: Vec<u32>,
    activity_total: u32,
    /// Deliveries waiting for the application, and the highest delivered per sender.
    ready: VecDeque<Ready>,
    delivered_upto: HashMap<Address, u64, AddressHash>,
    events: VecDeque<OrderEvent>,
    last_delivery_at: Instant,
    counters: OrderCounters,
    scratch: Vec<u8>,
    /// For the [`crate::member::GroupMember`] interface: entries of the ordered stream the
    /// application took, the entry of the last view it took, and whether a join is still to
    /// be reported.
    taken: u64,
    view_taken: u64,
    join_pending: bool,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Member {{ {:?}, {:?}, holder {} passed {} pending {} in_flight {} }}",
            self.cfg.protocol,
            self.vs,
            self.holder,
            self.passed,
            self.pending.len(),
            self.in_flight.len()
        )
    }
}

impl Member {
    /// Starts a group of one.
    pub fn create(cfg: OrderConfig, me: Address, now: Instant) -> Result<Member, VsConfigError> {
        cfg.validate()?;
        let vs = Vs::create(cfg.vs.clone(), me, now)?;
        let mut m = Member::new(cfg, vs, me, now);
        m.process(now);
        Ok(m)
    }

    /// Asks `contact`, a member, to let this process in.
    pub fn join(
        cfg: OrderConfig,
        me: Address,
        contact: Address,
        now: Instant,
    ) -> Result<Member, VsConfigError> {
        cfg.validate()?;
        let vs = Vs::join(cfg.vs.clone(), me, contact, now)?;
        let mut m = Member::new(cfg, vs, me, now);
        m.join_pending = true;
        Ok(m)
    }

    fn new(cfg: OrderConfig, vs: Vs, me: Address, now: Instant) -> Member {
        Member {
            cfg,
            vs,
            me,
            next_msg_id: 1,
            pending: VecDeque::new(),
            in_flight: VecDeque::new(),
            submitted_at: None,
            unsubmitted: 0,
            unsubmitted_bytes: 0,
            unsubmitted_since: None,
            next_vseq: 1,
            members: Vec::new(),
            rank: 0,
            holder: 0,
            holder_since: now,
            passed: false,
            runq: Vec::new(),
            cast_seen: Vec::new(),
            data_q: Vec::new(),
            ordered_data: Vec::new(),
            order_cursor: VecDeque::new(),
            unordered: VecDeque::new(),
            requests_seen: Vec::new(),
            served: Vec::new(),
            my_requests: 0,
            to_relay: VecDeque::new(),
            expected_vseq: HashMap::default(),
            relayed_vseq: HashMap::default(),
            activity: Vec::new(),
            activity_total: 0,
            ready: VecDeque::new(),
            delivered_upto: HashMap::default(),
            events: VecDeque::new(),
            last_delivery_at: Instant::ZERO,
            counters: OrderCounters::default(),
            scratch: Vec::new(),
            taken: 0,
            view_taken: 0,
            join_pending: false,
        }
    }

    pub fn address(&self) -> Address {
        self.me
    }

    pub fn config(&self) -> &OrderConfig {
        &self.cfg
    }

    pub fn state(&self) -> VsState {
        self.vs.state()
    }

    /// Whether a view change has lasted long enough to call this member blocked (see
    /// [`OrderEvent::Blocked`]).
    pub fn blocked(&self, now: Instant) -> bool {
        self.vs.blocked(now)
    }

    pub fn view(&self) -> ViewId {
        self.vs.view()
    }

    pub fn members(&self) -> &[Address] {
        self.vs.members()
    }

    pub fn counters(&self) -> &OrderCounters {
        &self.counters
    }

    pub fn vs_counters(&self) -> &crate::vsync::VsCounters {
        self.vs.counters()
    }

    /// The stack below (read-only: its stability and windows).
    pub fn vs(&self) -> &Vs {
        &self.vs
    }

    /// The rank holding the role (token, sequencer, orderer) as this member follows it.
    pub fn holder(&self) -> Option<Address> {
        self.members.get(self.holder).copied()
    }

    /// Messages sent and not yet delivered here.
    pub fn sends_pending(&self) -> usize {
        self.pending.len() + self.in_flight.len()
    }

    /// Whether every message sent here is delivered and nothing waits to be ordered or
    /// delivered (a `totem` token may still be on its way round).
    pub fn idle(&self) -> bool {
        self.pending.is_empty()
            && self.in_flight.is_empty()
            && self.ready.is_empty()
            && self.runq.iter().all(|q| q.is_empty())
            && self.data_q.iter().all(|q| q.is_empty())
            && self.order_cursor.is_empty()
            && !self.vs.has_upcall()
    }

    /// Sends `payload` to the group in total order; returns its `msg_id`.
    pub fn send(&mut self, now: Instant, payload: &[u8]) -> Result<u64, OrderError> {
        if !matches!(self.vs.state(), VsState::Normal | VsState::Flushing) {
            return Err(OrderError::NotMember(self.vs.state()));
        }
        let max = self.cfg.message_bytes_max();
        if payload.len() > max {
            return Err(OrderError::TooLong {
                len: payload.len(),
                max,
            });
        }
        if self.sends_pending() >= self.cfg.send_queue_max {
            return Err(OrderError::Full);
        }
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        self.pending.push_back((id, payload.to_vec()));
        self.counters.sent += 1;
        self.process(now);
        Ok(id)
    }

    pub fn leave(&mut self, now: Instant) -> Result<(), OrderError> {
        self.vs
            .leave(now)
            .map_err(|_| OrderError::NotMember(self.vs.state()))?;
        self.process(now);
        Ok(())
    }

    pub fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        self.vs.handle_message(now, bytes);
        self.process(now);
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.vs.poll_timeout().is_some_and(|t| t <= now) {
            self.vs.handle_timeout(now);
        }
        self.process(now);
    }

    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        self.vs.poll_transmit(now, buf)
    }

    /// Other members (for `Dest::All`).
    pub fn fanout(&self) -> impl Iterator<Item = Address> + '_ {
        self.vs.fanout()
    }

    /// The next entry of the ordered stream.
    pub fn poll_delivery<R>(&mut self, f: impl FnOnce(Delivered<'_>) -> R) -> Option<R> {
        Some(match self.ready.pop_front()? {
            Ready::Message(sender, msg_id, record) => f(Delivered::Message(Delivery {
                sender,
                msg_id,
                payload: &record[HEAD_BYTES..],
            })),
            Ready::View(v) => f(Delivered::View(v)),
        })
    }

    pub fn has_delivery(&self) -> bool {
        !self.ready.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<OrderEvent> {
        self.events.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.vs.poll_timeout();
        let mut at = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if self.ready.len() < DELIVERIES_MAX && self.vs.has_upcall() {
            // What was held back while the application's deliveries were full: due now.
            at(Instant::ZERO);
        }
        if self.vs.state() == VsState::Normal {
            // With the window full the holder waits for stability (an input), not for time:
            // a deadline it cannot act on would stay due.
            if self.cfg.protocol == Protocol::Totem
                && self.holder == self.rank
                && !self.passed
                && self.members.len() > 1
                && self.room() > 0
            {
                at(self.holder_since + self.cfg.token_idle_hold);
            }
            // The sequencer casts its own messages; it does not submit them to itself.
            if let Some(s) = self.submitted_at.filter(|_| !self.is_holder()) {
                if self.in_flight.len() > self.unsubmitted {
                    at(s + self.cfg.vs.retransmit_timeout);
                }
            }
            if self.unsubmitted > 0 {
                if let Some(t) = self.submit_due() {
                    at(t);
                }
            }
        }
        t
    }

    /// Takes the stack's upcalls, follows the chain, and casts what the protocol says, until
    /// nothing changes.
    fn process(&mut self, now: Instant) {
        for _ in 0..1_000_000 {
            if self.ready.len() >= DELIVERIES_MAX {
                // The application is not taking its deliveries: leave the rest with the stack
                // (which holds at most a window per member, and whose senders then wait).
                self.pump(now);
                return;
            }
            let members = &self.members;
            let Some(up) = self.vs.poll_upcall(|u| match u {
                Upcall::Cast {
                    sender,
                    seq,
                    payload,
                } => match members.iter().position(|&a| a == sender) {
                    Some(r) => Up::Cast(r, seq, payload.to_vec()),
                    None => Up::Ignore,
                },
                Upcall::Direct { from, payload } => Up::Direct(from, payload.to_vec()),
                Upcall::Flush => Up::Flush,
                Upcall::View(v) => Up::View(v),
                Upcall::Left => Up::Left,
                Upcall::Expelled => Up::Expelled,
                Upcall::JoinFailed => Up::JoinFailed,
                Upcall::Blocked { reachable, needed } => Up::Blocked { reachable, needed },
            }) else {
                self.follow_chain(now);
                let before = self.vs.counters().casts;
                self.pump(now);
                if self.vs.counters().casts == before && !self.vs.has_upcall() {
                    return;
                }
                continue;
            };
            match up {
                Up::Cast(r, seq, payload) => self.on_cast(r, seq, payload),
                Up::Direct(from, payload) => self.on_direct(from, &payload),
                Up::Flush => self.vs.flush_ready(now),
                Up::View(v) => self.on_view(now, v),
                Up::Left => self.events.push_back(OrderEvent::Left),
                Up::Expelled => self.events.push_back(OrderEvent::Expelled),
                Up::JoinFailed => self.events.push_back(OrderEvent::JoinFailed),
                Up::Blocked { reachable, needed } => self
                    .events
                    .push_back(OrderEvent::Blocked { reachable, needed }),
                Up::Ignore => {}
            }
            self.follow_chain(now);
        }
        debug_assert!(false, "process did not settle");
    }

    fn on_cast(&mut self, r: usize, seq: u64, payload: Vec<u8>) {
        self.cast_seen[r] = seq;
        let rec = match record::parse(&payload) {
            Ok(x) => x,
            Err(_) => {
                self.counters.dropped_bad += 1;
                return;
            }
        };
        match rec {
            Record::Msg(h, _) => {
                self.note_request(r, &h);
                self.runq[r].push_back(Run::Msg(h, payload));
            }
            Record::Pass(h) => {
                self.note_request(r, &h);
                self.runq[r].push_back(Run::Pass(h));
            }
            Record::Request(h) => self.note_request(r, &h),
            Record::Data(h, _) => {
                if self.is_holder() && self.cfg.protocol == Protocol::Dynord {
                    push_range(&mut self.unordered, r as u16, seq);
                }
                self.data_q[r].push_back((seq, h, payload));
            }
            Record::Order(entries) => self.runq[r].push_back(Run::Order(entries)),
            Record::Submit(_) => self.counters.dropped_bad += 1,
        }
    }

    fn note_request(&mut self, r: usize, h: &Head) {
        if h.flags & FLAG_REQUEST != 0 {
            self.requests_seen[r] = self.requests_seen[r].max(h.request);
        }
    }

    /// `dynseq`: a member's messages for the sequencer.
    fn on_direct(&mut self, from: Address, payload: &[u8]) {
        let Ok(Record::Submit(entries)) = record::parse(payload) else {
            self.counters.dropped_bad += 1;
            return;
        };
        if self.cfg.protocol != Protocol::Dynseq || !self.is_holder() {
            self.counters.submits_dropped += entries.len() as u64;
            return;
        }
        for (vseq, msg_id, p) in entries {
            let next = self.next_relay_vseq(from);
            if vseq == next {
                self.relayed_vseq.insert(from, vseq);
                self.to_relay.push_back((from, vseq, msg_id, p.to_vec()));
            } else {
                // Old (a copy sent again) or early (one before it was lost): its sender
                // sends it again.
                self.counters.submits_dropped += 1;
            }
        }
    }

    fn next_relay_vseq(&self, from: Address) -> u32 {
        let ordered = self.expected_vseq.get(&from).copied().unwrap_or(1);
        let relayed = self.relayed_vseq.get(&from).map_or(1, |v| v + 1);
        ordered.max(relayed)
    }

    fn is_holder(&self) -> bool {
        self.holder == self.rank && !self.passed && self.vs.state() == VsState::Normal
    }

    /// Follows the chain of runs as far as the casts here allow.
    fn follow_chain(&mut self, now: Instant) {
        if self.members.is_empty() {
            return;
        }
        loop {
            if let Some(&(r, upto)) = self.order_cursor.front() {
                if !self.deliver_data(now, r as usize, upto) {
                    return;
                }
                self.order_cursor.pop_front();
                continue;
            }
            let h = self.holder;
            let Some(run) = self.runq[h].pop_front() else {
                return;
            };
            match run {
                Run::Msg(head, payload) => {
                    self.deliver(now, head.origin, head.msg_id, head.vseq, payload, false);
                    if head.flags & FLAG_PASS != 0 {
                        self.pass_to(now, head.next);
                    }
                }
                Run::Pass(head) => self.pass_to(now, head.next),
                Run::Order(entries) => {
                    let n = self.members.len();
                    self.order_cursor
                        .extend(entries.into_iter().filter(|(r, _)| (*r as usize) < n));
                }
            }
        }
    }

    /// `dynord`: delivers stream `r`'s messages up to cast `upto`; false if some have not
    /// arrived yet.
    fn deliver_data(&mut self, now: Instant, r: usize, upto: u64) -> bool {
        while let Some((seq, _, _)) = self.data_q[r].front() {
            if *seq > upto {
                break;
            }
            let (seq, h, p) = self.data_q[r].pop_front().expect("front");
            self.ordered_data[r] = seq;
            let origin = self.members[r];
            self.deliver(now, origin, h.msg_id, h.vseq, p, false);
        }
        if self.cast_seen[r] >= upto {
            self.ordered_data[r] = self.ordered_data[r].max(upto);
            return true;
        }
        false
    }

    fn pass_to(&mut self, now: Instant, next: Address) {
        let Some(r) = self.members.iter().position(|&a| a == next) else {
            self.counters.dropped_bad += 1;
            return;
        };
        if self.holder == self.rank {
            self.passed = false;
        }
        self.holder = r;
        self.served[r] = self.served[r].saturating_add(1);
        self.holder_since = now;
        self.counters.passes += 1;
        self.activity.iter_mut().for_each(|x| *x = 0);
        self.activity_total = 0;
        if r == self.rank {
            self.took_role();
        }
    }

    /// This member now holds the role.
    fn took_role(&mut self) {
        match self.cfg.protocol {
            Protocol::Dynord => {
                // Order everything received and not yet ordered.
                self.unordered.clear();
                for r in 0..self.members.len() {
                    if let Some((seq, _, _)) = self.data_q[r].back() {
                        let from = self.ordered_data[r];
                        if *seq > from {
                            self.unordered.push_back((r as u16, *seq));
                        }
                    }
                }
            }
            Protocol::Dynseq => {
                self.relayed_vseq.clear();
                self.to_relay.clear();
                // Our own messages not yet ordered are cast by us now (see `pump_dynseq`).
                self.unsubmitted = 0;
                self.unsubmitted_bytes = 0;
                self.unsubmitted_since = None;
            }
            _ => {}
        }
    }

    /// Hands a message to the application (once).
    fn deliver(
        &mut self,
        now: Instant,
        origin: Address,
        msg_id: u64,
        vseq: u32,
        payload: Vec<u8>,
        by_rank: bool,
    ) {
        let upto = self.delivered_upto.entry(origin).or_insert(0);
        if msg_id <= *upto {
            self.counters.duplicates += 1;
            return;
        }
        *upto = msg_id;
        let e = self.expected_vseq.entry(origin).or_insert(1);
        *e = (*e).max(vseq.saturating_add(1));
        if let Some(r) = self.members.iter().position(|&a| a == origin) {
            self.activity[r] = self.activity[r].saturating_add(1);
            self.activity_total = self.activity_total.saturating_add(1);
        }
        self.counters.delivered += 1;
        if by_rank {
            self.counters.delivered_by_rank += 1;
        }
        self.last_delivery_at = now;
        if origin == self.me {
            while self.in_flight.front().is_some_and(|s| s.msg_id <= msg_id) {
                self.in_flight.pop_front();
            }
            self.events.push_back(OrderEvent::SendDone { msg_id });
        }
        self.ready
            .push_back(Ready::Message(origin, msg_id, payload));
    }

    /// The end of a view and the start of the next.
    fn on_view(&mut self, now: Instant, v: ViewChange) {
        self.end_of_view(now);
        self.members = v.members.clone();
        self.rank = self
            .members
            .iter()
            .position(|&a| a == self.me)
            .expect("views hold their member");
        let n = self.members.len();
        self.holder = 0;
        self.holder_since = now;
        self.passed = false;
        self.runq = (0..n).map(|_| VecDeque::new()).collect();
        self.cast_seen = vec![0; n];
        self.data_q = (0..n).map(|_| VecDeque::new()).collect();
        self.ordered_data = vec![0; n];
        self.order_cursor.clear();
        self.unordered.clear();
        self.requests_seen = vec![0; n];
        self.served = vec![0; n];
        self.my_requests = 0;
        self.to_relay.clear();
        self.expected_vseq.clear();
        self.relayed_vseq.clear();
        self.activity = vec![0; n];
        self.activity_total = 0;
        // Messages handed to a sequencer that did not order them go again, first.
        self.next_vseq = 1;
        let mut again: VecDeque<(u64, Vec<u8>)> = self
            .in_flight
            .drain(..)
            .map(|s| (s.msg_id, s.payload))
            .collect();
        again.extend(self.pending.drain(..));
        self.pending = again;
        self.submitted_at = None;
        self.unsubmitted = 0;
        self.unsubmitted_bytes = 0;
        self.unsubmitted_since = None;
        if self.rank == 0 {
            self.took_role();
        }
        self.ready.push_back(Ready::View(v));
    }

    /// Delivers what the chain of the ending view did not reach, by the rank rule.
    fn end_of_view(&mut self, now: Instant) {
        let mut left: Vec<(usize, u64, u32, Address, Vec<u8>)> = Vec::new();
        for (r, q) in self.runq.iter_mut().enumerate() {
            for run in q.drain(..) {
                if let Run::Msg(h, p) = run {
                    let rank = self
                        .members
                        .iter()
                        .position(|&a| a == h.origin)
                        .unwrap_or(r);
                    left.push((rank, h.msg_id, h.vseq, h.origin, p));
                }
            }
        }
        for (r, q) in self.data_q.iter_mut().enumerate() {
            for (_, h, p) in q.drain(..) {
                left.push((r, h.msg_id, h.vseq, self.members[r], p));
            }
        }
        left.sort_by_key(|x| (x.0, x.1));
        for (_, msg_id, vseq, origin, p) in left {
            self.deliver(now, origin, msg_id, vseq, p, true);
        }
    }

    /// Casts what the protocol says now.
    fn pump(&mut self, now: Instant) {
        if self.vs.state() != VsState::Normal || self.members.is_empty() {
            return;
        }
        let before = self.vs.counters().casts;
        let passed = self.passed;
        match self.cfg.protocol {
            Protocol::Totem => self.pump_totem(now),
            Protocol::Total => self.pump_total(now),
            Protocol::Dynseq => self.pump_dynseq(now),
            Protocol::Dynord => self.pump_dynord(now),
        }
        // A token holder's visit goes out as one packed message at once (the paper's Tomfc),
        // and so does a pass of the role: nobody else may cast in the run meanwhile.
        let token = matches!(self.cfg.protocol, Protocol::Totem | Protocol::Total);
        if (token && self.vs.counters().casts > before) || self.passed != passed {
            self.vs.push();
        }
    }

    /// Casts of this member the stack's window takes now.
    fn room(&self) -> usize {
        self.cfg.vs.window.saturating_sub(self.vs.unstable())
    }

    fn next_rank_addr(&self) -> Address {
        self.members[(self.rank + 1) % self.members.len()]
    }

    /// Casts `k` pending messages as `Msg` records; the last carries `pass` (and a request).
    fn cast_pending(&mut self, now: Instant, k: usize, pass: Option<(Address, bool)>) {
        for i in 0..k {
            let Some((msg_id, p)) = self.pending.pop_front() else {
                return;
            };
            let mut h = Head {
                msg_id,
                origin: self.me,
                ..Head::default()
            };
            if i + 1 == k {
                if let Some((next, request)) = pass {
                    h.flags |= FLAG_PASS;
                    h.next = next;
                    if request {
                        self.my_requests += 1;
                        h.flags |= FLAG_REQUEST;
                        h.request = self.my_requests;
                    }
                }
            }
            record::write_head(&mut self.scratch, Kind::Msg, &h, &p);
            if self.vs.cast(now, &self.scratch).is_err() {
                // The room was counted: only a bug gets here. Keep the message.
                self.pending.push_front((msg_id, p));
                debug_assert!(false, "cast refused after counting room");
                return;
            }
            if h.flags & FLAG_PASS != 0 {
                self.passed = true;
            }
        }
    }

    fn cast_pass(&mut self, now: Instant, next: Address, request: bool) {
        let mut h = Head {
            next,
            origin: self.me,
            ..Head::default()
        };
        if request {
            self.my_requests += 1;
            h.flags |= FLAG_REQUEST;
            h.request = self.my_requests;
        }
        record::write_head(&mut self.scratch, Kind::Pass, &h, &[]);
        if self.vs.cast(now, &self.scratch).is_ok() {
            self.passed = true;
        }
    }

    fn pump_totem(&mut self, now: Instant) {
        if !self.is_holder() {
            return;
        }
        let room = self.room();
        let alone = self.members.len() == 1;
        let k = self.pending.len().min(self.cfg.visit_max).min(room);
        if alone {
            self.cast_pending(now, k, None);
            return;
        }
        if room == 0 || (k == 0 && !self.pending.is_empty()) {
            return;
        }
        let busy = now < self.last_delivery_at + self.cfg.token_idle_hold;
        if k == 0 && !busy && now < self.holder_since + self.cfg.token_idle_hold {
            return;
        }
        let next = self.next_rank_addr();
        if k == 0 {
            self.cast_pass(now, next, false);
        } else {
            self.cast_pending(now, k, Some((next, false)));
        }
    }

    fn pump_total(&mut self, now: Instant) {
        let n = self.members.len();
        if !self.is_holder() {
            let asked = self.my_requests > self.served[self.rank];
            if !self.pending.is_empty() && !asked && !self.passed && self.room() > 0 {
                self.my_requests += 1;
                let h = Head {
                    flags: FLAG_REQUEST,
                    request: self.my_requests,
                    origin: self.me,
                    ..Head::default()
                };
                record::write_head(&mut self.scratch, Kind::Request, &h, &[]);
                if self.vs.cast(now, &self.scratch).is_ok() {
                    self.counters.requests += 1;
                } else {
                    self.my_requests -= 1;
                }
            }
            return;
        }
        let room = self.room();
        let next = (1..n)
            .map(|d| (self.rank + d) % n)
            .find(|&r| self.requests_seen[r] > self.served[r]);
        let k = self.pending.len().min(self.cfg.visit_max).min(room);
        match next {
            None => self.cast_pending(now, k, None),
            Some(r) => {
                if room == 0 {
                    return;
                }
                let more = self.pending.len() > k;
                let next = self.members[r];
                if k == 0 {
                    self.cast_pass(now, next, more);
                } else {
                    self.cast_pending(now, k, Some((next, more)));
                }
            }
        }
    }

    fn pump_dynseq(&mut self, now: Instant) {
        if self.is_holder() {
            // Own messages: those handed to an earlier sequencer and not ordered, then new.
            while self.room() > 0 {
                let own_unsent = self.in_flight.iter().position(|s| !s.cast);
                let entry = match own_unsent {
                    Some(i) => {
                        let s = &mut self.in_flight[i];
                        let ordered = self.expected_vseq.get(&self.me).copied().unwrap_or(1);
                        if s.vseq < ordered {
                            s.cast = true;
                            continue;
                        }
                        s.cast = true;
                        (s.vseq, s.msg_id, s.payload.clone())
                    }
                    None => {
                        if self.in_flight.len() >= self.cfg.submit_window {
                            break;
                        }
                        let Some((msg_id, p)) = self.pending.pop_front() else {
                            break;
                        };
                        let vseq = self.next_vseq;
                        self.next_vseq += 1;
                        self.in_flight.push_back(Submitted {
                            vseq,
                            msg_id,
                            payload: p.clone(),
                            cast: true,
                        });
                        (vseq, msg_id, p)
                    }
                };
                let h = Head {
                    vseq: entry.0,
                    msg_id: entry.1,
                    origin: self.me,
                    ..Head::default()
                };
                self.relayed_vseq.insert(self.me, entry.0);
                record::write_head(&mut self.scratch, Kind::Msg, &h, &entry.2);
                if self.vs.cast(now, &self.scratch).is_err() {
                    break;
                }
            }
            while self.room() > 0 {
                let Some((origin, vseq, msg_id, p)) = self.to_relay.pop_front() else {
                    break;
                };
                let h = Head {
                    vseq,
                    msg_id,
                    origin,
                    ..Head::default()
                };
                record::write_head(&mut self.scratch, Kind::Msg, &h, &p);
                if self.vs.cast(now, &self.scratch).is_err() {
                    self.to_relay.push_front((origin, vseq, msg_id, p));
                    break;
                }
            }
            self.maybe_migrate(now);
            return;
        }
        // Not the sequencer: hand messages on, and again when they are not delivered in time.
        let Some(seq) = self.holder() else {
            return;
        };
        while self.in_flight.len() < self.cfg.submit_window {
            let Some((msg_id, p)) = self.pending.pop_front() else {
                break;
            };
            let vseq = self.next_vseq;
            self.next_vseq += 1;
            self.unsubmitted_bytes += record::submit_entry_bytes(p.len());
            self.in_flight.push_back(Submitted {
                vseq,
                msg_id,
                payload: p,
                cast: false,
            });
            self.unsubmitted += 1;
            self.unsubmitted_since.get_or_insert(now);
        }
        let due = self
            .submitted_at
            .is_some_and(|t| now >= t + self.cfg.vs.retransmit_timeout);
        let from = if due && !self.in_flight.is_empty() {
            self.counters.submits_resent += (self.in_flight.len() - self.unsubmitted) as u64;
            0
        } else if self.unsubmitted > 0 && self.submit_now(now) {
            self.in_flight.len() - self.unsubmitted
        } else {
            return;
        };
        self.submit(seq, from);
        self.submitted_at = Some(now);
        self.unsubmitted = 0;
        self.unsubmitted_bytes = 0;
        self.unsubmitted_since = None;
    }

    /// `dynseq`: whether the messages not yet handed to the sequencer go now. The packing
    /// mode decides, as it does for casts: at once with packing off, or when nothing handed
    /// on is outstanding (adaptive); otherwise when they fill a direct or the oldest has
    /// waited the delay. A submit is outstanding until it is delivered here: its
    /// acknowledgement is the sequencer's cast, which the stack sends at once when the
    /// sequencer's earlier casts are acknowledged (promptly, see `Vs::poll_ack`), so a
    /// member that sends once a round finds nothing outstanding, as a caster does.
    fn submit_now(&self, now: Instant) -> bool {
        let outstanding = self.in_flight.len() > self.unsubmitted;
        let full = self.unsubmitted_bytes >= self.cfg.vs.cast_bytes_max / 2;
        let since = self.unsubmitted_since.unwrap_or(now);
        match self.cfg.vs.pack {
            PackMode::Off => true,
            PackMode::Adaptive { delay_max } => !outstanding || full || now >= since + delay_max,
            PackMode::Fixed { delay } => full || now >= since + delay,
        }
    }

    /// When held submits are due (see [`Member::submit_now`]).
    fn submit_due(&self) -> Option<Instant> {
        let since = self.unsubmitted_since?;
        match self.cfg.vs.pack {
            PackMode::Off => Some(since),
            PackMode::Adaptive { delay_max: d } | PackMode::Fixed { delay: d } => Some(since + d),
        }
    }

    /// Sends `in_flight[from..]` to the sequencer, packed into as few directs as fit (one
    /// message each with packing off).
    fn submit(&mut self, to: Address, from: usize) {
        let room = self.cfg.vs.cast_bytes_max;
        let per = if self.cfg.vs.pack == PackMode::Off {
            1
        } else {
            record::ENTRIES_MAX
        };
        let mut i = from;
        while i < self.in_flight.len() {
            let mut bytes = 4;
            let mut j = i;
            while j < self.in_flight.len() && j - i < per {
                let add = record::submit_entry_bytes(self.in_flight[j].payload.len());
                if j > i && bytes + add > room {
                    break;
                }
                bytes += add;
                j += 1;
            }
            let entries = self
                .in_flight
                .range(i..j)
                .map(|s| (s.vseq, s.msg_id, s.payload.as_slice()));
            record::write_submit(&mut self.scratch, entries);
            if self.vs.send_direct(to, &self.scratch).is_ok() {
                self.counters.submits_sent += (j - i) as u64;
            }
            i = j;
        }
    }

    fn pump_dynord(&mut self, now: Instant) {
        while self.room() > 0 {
            let Some((msg_id, p)) = self.pending.pop_front() else {
                break;
            };
            let h = Head {
                msg_id,
                origin: self.me,
                ..Head::default()
            };
            record::write_head(&mut self.scratch, Kind::Data, &h, &p);
            if self.vs.cast(now, &self.scratch).is_err() {
                self.pending.push_front((msg_id, p));
                break;
            }
        }
        if self.is_holder() && !self.unordered.is_empty() && self.room() > 0 {
            let max = ((self.cfg.vs.cast_bytes_max - 4) / record::ORDER_ENTRY_BYTES)
                .min(record::ENTRIES_MAX);
            let k = self.unordered.len().min(max);
            let entries: Vec<(u16, u64)> = self.unordered.drain(..k).collect();
            record::write_order(&mut self.scratch, &entries);
            if self.vs.cast(now, &self.scratch).is_ok() {
                self.counters.orders += 1;
            } else {
                for e in entries.into_iter().rev() {
                    self.unordered.push_front(e);
                }
            }
        }
        if self.is_holder() {
            self.maybe_migrate(now);
        }
    }

    /// `dynseq`, `dynord`: hands the role to a member whose messages made 3/4 of the last
    /// `migrate_every` ordered.
    fn maybe_migrate(&mut self, now: Instant) {
        let every = self.cfg.migrate_every;
        if every == 0 || self.activity_total < every || self.room() == 0 {
            return;
        }
        let (r, &top) = self
            .activity
            .iter()
            .enumerate()
            .max_by_key(|(_, &x)| x)
            .expect("members");
        let total = self.activity_total;
        self.activity.iter_mut().for_each(|x| *x = 0);
        self.activity_total = 0;
        if r != self.rank && top as u64 * 4 >= total as u64 * 3 {
            if self.cfg.protocol == Protocol::Dynord && !self.unordered.is_empty() {
                // Order what we have first: the next orderer starts after our last order.
                return;
            }
            self.counters.migrations += 1;
            let next = self.members[r];
            self.cast_pass(now, next, false);
        }
    }
}

/// Appends cast `seq` of stream `r` to an order, merging with the last entry of the same
/// stream.
fn push_range(q: &mut VecDeque<(u16, u64)>, r: u16, seq: u64) {
    if let Some(last) = q.back_mut() {
        if last.0 == r {
            last.1 = seq;
            return;
        }
    }
    q.push_back((r, seq));
}
