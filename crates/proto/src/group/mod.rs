//! Groups (paper 003): reliable, totally ordered multicast with Amoeba's sequencer protocol.
//!
//! A [`Member`] is one process's membership in one group, as a sans-IO state machine:
//! - input: [`Member::handle_message`] (bytes from another member), [`Member::handle_timeout`],
//!   and application calls ([`Member::send`], [`Member::leave`], [`Member::reset`]);
//! - output: [`Member::poll_transmit`] (bytes and a [`Dest`]), [`Member::poll_delivery`] (the
//!   ordered stream: messages, joins, leaves, rebuilt views), [`Member::poll_event`]
//!   (completions and failures), [`Member::poll_timeout`].
//!
//! The protocol (paper 003 §2–§3.1):
//! - a sender hands its message to the sequencer (PB: point to point; BB: multicast to all, and
//!   the sequencer multicasts only a short accept); the sequencer gives it the next sequence
//!   number and multicasts it, packing several records into one packet under load;
//! - members detect gaps and send negative acknowledgements; acknowledgements ride on every
//!   message a member sends to the sequencer (with adaptive packing a member also reports the
//!   sequencer's own messages at once: see `transmit`); every member keeps a bounded history of
//!   records until the sequencer reports them stable (received and consumed by every member).
//!   When the history fills, the sequencer stops ordering and asks every member for its state
//!   (sync);
//! - resilience degree r: records are tentative until the r lowest-ranked members besides the
//!   sequencer hold them; a send completes when the sender delivers its own message, which is
//!   after r other members hold it;
//! - joins, leaves and rebuilt views are records in the same total order;
//! - a failure detector (heartbeats, then a bounded number of probes) declares a silent member
//!   or sequencer dead; recovery rebuilds the group from the survivors (see `recovery`).

mod detector;
mod history;
mod membership;
pub mod msg;
mod receive;
mod recovery;
mod sequencer;
mod timer;
mod transmit;

#[cfg(test)]
mod tests;

use crate::addr::Address;
pub use crate::member::{
    ConfigError, Delivered, Delivery, Dest, Epoch, GroupCounters, GroupError, GroupEvent, GroupId,
    GroupInfo, MinMembers, State,
};
use crate::pack::{PackMode, Packer};
use crate::time::Instant;
use core::time::Duration;
use detector::Watch;
use history::History;
pub use msg::{GroupWireError, RecordKind};
use recovery::ViewNews;
use sequencer::Sequencer;
use std::collections::VecDeque;
use timer::{Timer, Timers};
use transmit::{Control, Pending};

/// How a sender's message reaches the members (paper 003 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Point to point to the sequencer, which multicasts it with its sequence number.
    Pb,
    /// Multicast by the sender; the sequencer multicasts a short accept.
    Bb,
    /// BB for payloads of at least `bb_from_bytes`, PB below.
    BySize { bb_from_bytes: usize },
}

/// A group's parameters. Every member must use the same `group`, `resilience` (a joiner takes
/// the group's from its welcome) and compatible bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupConfig {
    pub group: GroupId,
    /// Resilience degree r: a send completes only once r members besides the sequencer hold
    /// the message, so it survives r crashes.
    pub resilience: u8,
    pub method: Method,
    /// Records the sequencer may have ordered beyond the last stable one (its history), and so
    /// the most each member holds.
    pub history_max: usize,
    /// A member's sends in flight to the sequencer at once.
    pub send_window: usize,
    /// A member's sends queued (in flight included); past it `send` fails with `Full`.
    pub send_queue_max: usize,
    pub message_bytes_max: usize,
    /// Largest group message this member builds.
    pub packet_bytes_max: usize,
    pub pack: PackMode,
    /// Resend an unordered submission, repeat a NAK, retry a join or leave after this long.
    pub retransmit_timeout: Duration,
    /// The sequencer multicasts, and members report to it, at least this often.
    pub heartbeat_interval: Duration,
    /// Silence after which a member (or the sequencer) is probed.
    pub silence_timeout: Duration,
    pub probe_interval: Duration,
    /// A peer whose host answered one of our datagrams with "port unreachable" (its process
    /// is gone) is declared dead, without probes, once silent this long (at most
    /// `silence_timeout`). Longer than `heartbeat_interval`, so a live peer named in a forged
    /// report is heard from before it runs out.
    pub unreachable_silence: Duration,
    /// Unanswered probes (and invitations) before a peer is declared dead.
    pub probes_max: u32,
    /// `Some`: recover on a detected failure without waiting for [`Member::reset`].
    pub auto_reset: Option<MinMembers>,
    /// A failed recovery (too few survivors) is retried this often.
    pub reset_retry: Duration,
    /// Join attempts (one per `retransmit_timeout`) before a join fails. A joiner admitted
    /// just before a failure is welcomed only after the rebuild, so this should outlast the
    /// failure detector and a rebuild (see [`GroupConfig::validate`]).
    pub join_attempts_max: u32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            group: 1,
            resilience: 0,
            method: Method::BySize {
                bb_from_bytes: 2048,
            },
            history_max: 4096,
            send_window: 256,
            send_queue_max: 4096,
            message_bytes_max: 8 * 1024,
            packet_bytes_max: 16_000,
            pack: PackMode::Adaptive {
                delay_max: Duration::from_millis(1),
            },
            retransmit_timeout: Duration::from_millis(20),
            heartbeat_interval: Duration::from_millis(50),
            silence_timeout: Duration::from_millis(500),
            probe_interval: Duration::from_millis(100),
            unreachable_silence: Duration::from_millis(100),
            probes_max: 3,
            auto_reset: Some(MinMembers::Majority),
            reset_retry: Duration::from_millis(500),
            join_attempts_max: 250,
        }
    }
}

impl GroupConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let one_record = msg::GROUP_HEADER_BYTES
            + msg::ORDER_FIXED_BYTES
            + msg::order_record_bytes(self.message_bytes_max);
        if one_record > self.packet_bytes_max {
            return Err(ConfigError(
                "packet_bytes_max must hold one order record of message_bytes_max",
            ));
        }
        if self.packet_bytes_max > 65_000 {
            return Err(ConfigError("packet_bytes_max must fit a UDP datagram"));
        }
        if self.packet_bytes_max < msg::REBUILD_MSG_MAX {
            // (A rebuild's answer that did not fit would never be sent: its member could
            // never count.)
            return Err(ConfigError(
                "packet_bytes_max must hold a rebuild's answer naming MEMBERS_MAX members",
            ));
        }
        if self.history_max < 4 || self.send_window == 0 || self.send_queue_max < self.send_window {
            return Err(ConfigError(
                "history_max >= 4, send_window >= 1 and send_queue_max >= send_window",
            ));
        }
        let detect_and_rebuild = self.silence_timeout
            + self.probe_interval * (2 * self.probes_max + 4)
            + self.reset_retry;
        if self.retransmit_timeout * self.join_attempts_max < detect_and_rebuild {
            return Err(ConfigError(
                "join_attempts_max × retransmit_timeout must outlast failure detection and a rebuild",
            ));
        }
        if self.probes_max == 0 || self.silence_timeout <= self.heartbeat_interval {
            return Err(ConfigError(
                "probes_max >= 1 and silence_timeout longer than heartbeat_interval",
            ));
        }
        Ok(())
    }

    fn use_bb(&self, len: usize) -> bool {
        match self.method {
            Method::Pb => false,
            Method::Bb => true,
            Method::BySize { bb_from_bytes } => len >= bb_from_bytes,
        }
    }
}

/// Most control messages queued; more are dropped and counted (their senders retry).
const CONTROL_QUEUE_MAX: usize = 1024;
/// Most BB payloads held before their accept arrives.
const UNORDERED_MAX: usize = 8192;
/// Most records one NAK asks for.
const NAK_SPAN_MAX: u64 = 1024;
/// Joins remembered from the join records (see `Membership::join_ids_seen`).
const JOIN_IDS_SEEN_MAX: usize = 256;
/// Bases a member keeps an accepted proposal for.
const ACCEPTED_MAX: usize = 8;
/// Join attempts at one address before a joiner turns to the other it knows.
const JOIN_ASK_TURN: u32 = 8;

/// One process's membership in one group: the view it is in, and one part per sub-protocol.
pub struct Member {
    cfg: GroupConfig,
    me: Address,
    state: State,
    epoch: Epoch,
    members: Vec<Address>,
    sequencer: Address,
    /// Sending: this member's messages, control messages and reports on their way out.
    out: transmit::Outbox,
    /// Receiving: the history, the watermarks, NAKs and retransmissions owed.
    rx: receive::Inbox,
    /// The sequencer role (present while this member is the sequencer).
    seqr: Option<Sequencer>,
    /// This member watching the sequencer.
    watch: Watch,
    /// Joining, leaving, and the membership records applied.
    ms: membership::Membership,
    /// Rebuilds and the views they make.
    rec: recovery::Recovery,
    /// Every deadline, by kind.
    timers: Timers,
    events: VecDeque<GroupEvent>,
    counters: GroupCounters,
}

impl Member {
    /// Creates a group with this process as its only member and sequencer.
    pub fn create(cfg: GroupConfig, me: Address, now: Instant) -> Result<Member, GroupError> {
        let mut m = Member::blank(cfg, me, now)?;
        m.state = State::Normal;
        m.members = vec![me];
        m.sequencer = me;
        m.epoch = Epoch {
            number: 1,
            coordinator: me,
        };
        m.rec.epoch_seen = 1;
        m.become_sequencer(now);
        Ok(m)
    }

    /// Starts joining the group through `contact`, any member (it redirects to the
    /// sequencer). [`GroupEvent::JoinDone`] or [`GroupEvent::JoinFailed`] follows.
    pub fn join(
        cfg: GroupConfig,
        me: Address,
        contact: Address,
        now: Instant,
    ) -> Result<Member, GroupError> {
        let mut m = Member::blank(cfg, me, now)?;
        m.state = State::Joining;
        m.ms.join = Some((contact, 1));
        m.timers.set(Timer::Join, now + m.cfg.retransmit_timeout);
        m.ms.join_via = (contact, contact);
        m.ms.join_id = now.0.wrapping_add(1);
        m.push_control(contact, Control::JoinRequest);
        Ok(m)
    }

    fn blank(cfg: GroupConfig, me: Address, now: Instant) -> Result<Member, GroupError> {
        cfg.validate().map_err(GroupError::Config)?;
        let history = History::new(1, cfg.history_max * 2);
        let packer = Packer::new(cfg.pack);
        let mut m = Member {
            out: transmit::Outbox::new(packer),
            rx: receive::Inbox::new(history),
            seqr: None,
            watch: Watch::new(now),
            ms: membership::Membership::new(me),
            rec: recovery::Recovery::new(),
            cfg,
            me,
            state: State::Joining,
            epoch: Epoch::default(),
            members: Vec::new(),
            sequencer: me,
            timers: Timers::default(),
            events: VecDeque::new(),
            counters: GroupCounters::default(),
        };
        m.timers.set(Timer::Report, now + m.cfg.heartbeat_interval);
        m.arm_watch();
        Ok(m)
    }

    pub fn address(&self) -> Address {
        self.me
    }

    pub fn config(&self) -> &GroupConfig {
        &self.cfg
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn is_sequencer(&self) -> bool {
        self.seqr.is_some()
    }

    pub fn members(&self) -> &[Address] {
        &self.members
    }

    /// The epoch of the view this member is in (it changes when a rebuilt view is installed).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The last view this member knows to have committed, how recent its list of that view's
    /// members is (the sequence number of the last membership record it holds), and the
    /// members a rebuild it coordinates would need a majority of.
    #[doc(hidden)]
    pub fn committed_view(&self) -> (Epoch, u64, Vec<Address>) {
        let (epoch, _, members) = self.rebuild_base();
        (epoch, self.reported().2, members)
    }

    /// Where [`Dest::All`] goes: every member of the view but this one, the one on the
    /// critical path first (with one system call for all, the first copy is on its way while
    /// the kernel builds the others, and on a busy host that member is woken first). The
    /// sequencer's multicast goes first to the sender of the oldest message it carries, whose
    /// `send` may be waiting on it; a member's BB multicast goes first to the sequencer,
    /// which orders it.
    pub fn fanout(&self) -> impl Iterator<Item = Address> + '_ {
        let first = if self.seqr.is_some() {
            self.out.fanout_first
        } else {
            Some(self.sequencer)
        };
        let first = first.filter(|&a| a != self.me && self.members.contains(&a));
        first.into_iter().chain(
            self.members
                .iter()
                .copied()
                .filter(move |&a| a != self.me && Some(a) != first),
        )
    }

    pub fn counters(&self) -> &GroupCounters {
        &self.counters
    }

    pub fn pack_histogram(&self) -> &[u64; crate::pack::PACK_HISTOGRAM_BINS] {
        self.out.packer.histogram()
    }

    pub fn info(&self) -> GroupInfo {
        GroupInfo {
            state: self.state,
            epoch: self.epoch,
            members: self.members.clone(),
            sequencer: self.sequencer,
            resilience: self.cfg.resilience,
            received_upto: self.rx.received_upto,
            consumed_upto: self.rx.consumed_upto,
            stable_upto: self.rx.stable_upto,
            counters: self.counters.clone(),
        }
    }

    /// Messages this member sent that are not yet delivered back to it.
    pub fn sends_pending(&self) -> usize {
        self.out.pending.len()
    }

    /// Queues a message for the group; returns its `msg_id`. It is complete when
    /// [`GroupEvent::SendDone`] with that id comes out.
    pub fn send(&mut self, now: Instant, payload: &[u8]) -> Result<u64, GroupError> {
        if self.state != State::Normal {
            return Err(GroupError::NotMember(self.state));
        }
        if payload.len() > self.cfg.message_bytes_max {
            return Err(GroupError::TooLong {
                len: payload.len(),
                max: self.cfg.message_bytes_max,
            });
        }
        let needed = self.cfg.resilience as usize + 1;
        if self.members.len() < needed {
            return Err(GroupError::TooFewMembers {
                needed,
                have: self.members.len(),
            });
        }
        if self.out.pending.len() >= self.cfg.send_queue_max {
            return Err(GroupError::Full);
        }
        let msg_id = self.out.next_msg_id;
        self.out.next_msg_id += 1;
        self.out.pending.push_back(Pending {
            msg_id,
            payload: payload.to_vec(),
            sent_at: None,
        });
        self.out.unsent_bytes += payload.len() + msg::SUBMIT_RECORD_BYTES;
        self.out.oldest_unsubmitted.get_or_insert(now);
        self.arm_outbox();
        self.counters.sent += 1;
        if self.seqr.is_some() {
            // Through the same queue as everyone's: submissions that waited go first.
            self.order_next(now);
        }
        Ok(msg_id)
    }

    /// Asks to leave; [`GroupEvent::LeaveDone`] follows once the leave record is delivered.
    pub fn leave(&mut self, now: Instant) -> Result<(), GroupError> {
        if self.state != State::Normal {
            return Err(GroupError::NotMember(self.state));
        }
        if self.seqr.is_some() {
            self.queue_leave(now, self.me);
        } else {
            self.push_control(self.sequencer, Control::LeaveRequest);
            self.timers
                .set(Timer::Leave, now + self.cfg.retransmit_timeout);
        }
        Ok(())
    }

    /// Rebuilds the group from the members that answer (paper 003 `ResetGroup`), needing at
    /// least `min_members` of them, this one included.
    pub fn reset(&mut self, now: Instant, min_members: MinMembers) -> Result<(), GroupError> {
        match self.state {
            State::Normal | State::Failed | State::Blocked | State::Recovering => {
                self.start_reset(now, min_members);
                Ok(())
            }
            s => Err(GroupError::NotMember(s)),
        }
    }

    pub fn poll_event(&mut self) -> Option<GroupEvent> {
        self.events.pop_front()
    }

    /// Hands the next record of the ordered stream to `f`.
    pub fn poll_delivery<R>(&mut self, f: impl FnOnce(Delivery<'_>) -> R) -> Option<R> {
        let seq = self.rx.consumed_upto + 1;
        if seq > self.rx.applied_upto {
            return None;
        }
        let e = self
            .rx
            .history
            .get(seq)
            .expect("applied records stay until consumed");
        let what = match e.kind {
            RecordKind::Message => Delivered::Message {
                msg_id: e.msg_id,
                payload: e.payload.as_deref().expect("applied records are complete"),
            },
            RecordKind::Join => Delivered::Joined(addr_payload(e)),
            RecordKind::Leave => Delivered::Left(addr_payload(e)),
            RecordKind::View => {
                let (members, removed) = view_payload(e);
                Delivered::Rebuilt {
                    epoch: Epoch {
                        number: e.msg_id,
                        coordinator: e.sender,
                    },
                    members,
                    removed,
                }
            }
        };
        let r = f(Delivery {
            seq,
            sender: e.sender,
            what,
        });
        self.rx.consumed_upto = seq;
        self.counters.delivered += 1;
        self.note_consumed();
        Some(r)
    }

    /// Whether a delivery is waiting.
    pub fn has_delivery(&self) -> bool {
        self.rx.consumed_upto < self.rx.applied_upto
    }

    /// Everything pending goes out again from the start (the sequencer changed).
    fn resubmit_all(&mut self) {
        for p in self.out.pending.iter_mut() {
            if p.sent_at.take().is_some() {
                self.out.unsent_bytes += p.payload.len() + msg::SUBMIT_RECORD_BYTES;
            }
        }
        self.out.sent_count = 0;
        self.arm_outbox();
    }

    fn push_control(&mut self, to: Address, c: Control) {
        if self.out.control.len() >= CONTROL_QUEUE_MAX {
            self.counters.dropped_control_full += 1;
            return;
        }
        self.out.control.push_back((to, c));
    }
}

/// The address a Join or Leave record names.
fn addr_payload(e: &history::Entry) -> Address {
    let p = e.payload.as_deref().unwrap_or(&[]);
    if p.len() >= 8 {
        Address::read_from(p)
    } else {
        e.sender
    }
}

/// A View record's payload: `[members count u32][removed count u32][addresses...]`.
fn view_payload(e: &history::Entry) -> (Vec<Address>, Vec<Address>) {
    let p = e.payload.as_deref().unwrap_or(&[]);
    if p.len() < 8 {
        return (Vec::new(), Vec::new());
    }
    let n = u32::from_le_bytes(p[0..4].try_into().expect("4")) as usize;
    let k = u32::from_le_bytes(p[4..8].try_into().expect("4")) as usize;
    let addrs: Vec<Address> = p[8..].chunks_exact(8).map(Address::read_from).collect();
    if addrs.len() != n + k {
        return (Vec::new(), Vec::new());
    }
    (addrs[..n].to_vec(), addrs[n..].to_vec())
}

fn encode_view(members: &[Address], removed: &[Address]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + 8 * (members.len() + removed.len()));
    p.extend_from_slice(&(members.len() as u32).to_le_bytes());
    p.extend_from_slice(&(removed.len() as u32).to_le_bytes());
    for a in members.iter().chain(removed) {
        let mut b = [0u8; 8];
        a.write_to(&mut b);
        p.extend_from_slice(&b);
    }
    p
}

fn encode_addr(a: Address) -> Vec<u8> {
    let mut b = vec![0u8; 8];
    a.write_to(&mut b);
    b
}

impl crate::member::GroupMember for Member {
    fn address(&self) -> Address {
        self.me
    }

    fn state(&self) -> State {
        self.state
    }

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn members(&self) -> &[Address] {
        &self.members
    }

    fn info(&self, _now: Instant) -> GroupInfo {
        Member::info(self)
    }

    fn send(&mut self, now: Instant, payload: &[u8]) -> Result<u64, GroupError> {
        Member::send(self, now, payload)
    }

    fn sends_pending(&self) -> usize {
        self.out.pending.len()
    }

    fn leave(&mut self, now: Instant) -> Result<(), GroupError> {
        Member::leave(self, now)
    }

    fn reset(&mut self, now: Instant, min_members: MinMembers) -> Result<(), GroupError> {
        Member::reset(self, now, min_members)
    }

    fn handle_message(&mut self, now: Instant, bytes: &[u8]) -> bool {
        Member::handle_message(self, now, bytes).is_ok()
    }

    fn handle_timeout(&mut self, now: Instant) {
        Member::handle_timeout(self, now)
    }

    fn peer_unreachable(&mut self, now: Instant, who: Address) {
        Member::peer_unreachable(self, now, who)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Member::poll_timeout(self)
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        Member::poll_transmit(self, now, buf)
    }

    fn fanout(&self, to: &mut dyn FnMut(Address)) {
        Member::fanout(self).for_each(to)
    }

    fn poll_delivery(&mut self, f: &mut dyn FnMut(Delivery<'_>)) -> bool {
        Member::poll_delivery(self, f).is_some()
    }

    fn has_delivery(&self) -> bool {
        Member::has_delivery(self)
    }

    fn poll_event(&mut self) -> Option<GroupEvent> {
        self.events.pop_front()
    }
}
