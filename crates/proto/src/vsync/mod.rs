//! The virtually synchronous group stack of paper 002 (§2, §3.1): the layers under its
//! ordering protocols, `MBRSHIP:NAK` in the paper's `protocol:MBRSHIP:FRAG:NAK:COM`.
//!
//! A [`Vs`] is one process's membership in one group, as a sans-IO state machine. It gives the
//! layer above (an ordering protocol, see [`crate::order`]):
//! - **casts**: reliable FIFO multicast to the members of the current view. Each member's
//!   casts are numbered from 1 in each view; receivers find gaps and send negative
//!   acknowledgements to the sender (or, if it is suspected, to another member); every member
//!   keeps the casts it received until they are *stable* (received by every member), so any
//!   member can send them again;
//! - **directs**: best-effort messages to one member (the layer above retries);
//! - **views**: a totally ordered sequence of membership views. A view change (a suspected
//!   failure, a join, a leave) runs the *flush*: every member stops casting, the survivors
//!   agree on a cut (how far each member's stream of the old view goes), every survivor
//!   obtains every cast up to the cut, delivers exactly those, and then installs the new view.
//!   So members that are in two consecutive views deliver the same casts between them
//!   (virtual synchrony), and every cast of the old view is delivered before the new view.
//!
//! The agreement on the new view and its cut is Paxos over the old view's members: the
//! coordinator (the lowest-ranked member not suspected) sends `Flush` with a ballot (phase
//! one: members freeze their delivery and report what they hold, and any proposal they
//! accepted), proposes the members and the cut (phase two), and commits once a majority of the
//! old view accepted. A member accepts only once it holds every cast up to the cut, so a later
//! coordinator that adopts an accepted proposal can always complete it. A view needs a
//! majority of the previous one (primary partition): a minority blocks rather than fork.
//!
//! Stability (§3.1) comes in two kinds, chosen per group: [`Stability::Piggyback`] (the
//! paper's STABLE: every data message and heartbeat carries the sender's received vector) and
//! [`Stability::Pinwheel`] (a token rotates through the members collecting the minimum).
//! Either way a member never has more than `window` of its own casts unstable, so every buffer
//! is bounded.
//!
//! Packing: a member's casts waiting to go out leave together in one `Data` message, under the
//! configured [`PackMode`] (off, fixed delay, adaptive). Adaptive packing holds casts while
//! the member's earlier ones are in flight (not yet known received by everyone); with
//! piggybacked stability members then report what arrived at once (a `Status` to its sender)
//! when no data message of theirs carries it, so in-flight ends within a round trip.
//!
//! Output is drained in this order after every input: [`Vs::poll_transmit`] (messages),
//! [`Vs::poll_upcall`] (casts, directs, flush and view events, in order), and
//! [`Vs::poll_timeout`].
//!
//! Each sub-protocol has its own file, holding its part of the member's state (a struct that
//! `Vs` owns) and its `impl Vs`: `stream` (casts, packing, receiving, NAKs and resends; the
//! `Outbox`), `stability` (reports, heartbeats, the pinwheel token; `Reports`, `Pinwheel`),
//! `detector` (suspicions; `Detector`), `flush` (the view change; `Flush`), `membership`
//! (join, leave, install; `Membership`), `deliver` (handing up; `Delivery`). The view, the
//! streams, the previous view's casts, the counters and the deadlines stay on `Vs`: every
//! sub-protocol uses them. The deadlines sit in one table (`timer`), each entry set where the
//! event that arms it happens.

mod deliver;
mod detector;
mod flush;
mod held;
mod membership;
pub mod msg;
mod stability;
mod stream;
#[cfg(test)]
mod tests;
mod timer;

use crate::addr::Address;
pub use crate::member::Dest;
use crate::pack::{PackMode, Packer};
use crate::time::Instant;
use core::fmt;
use core::time::Duration;
use msg::{Header, VsMsg};
use timer::{Timer, Timers};

/// A view: its number and the coordinator that made it, compared in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ViewId {
    pub number: u64,
    pub coordinator: Address,
}

impl fmt::Display for ViewId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.number, self.coordinator)
    }
}

/// A round of the view agreement, compared by number, then coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ballot {
    pub number: u64,
    pub coordinator: Address,
}

/// What a view change decides: the next view's members, in rank order, and the cut that
/// closes the current view (for each of its members, by rank, the last cast delivered in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// The coordinator that first proposed it: the next view's id names it. Not the ballot's
    /// coordinator: a later round that adopts an accepted proposal commits the same view, and
    /// naming that round's coordinator made two ids for one view, whose members then dropped
    /// each other's messages as another view's.
    pub coordinator: Address,
    pub members: Vec<Address>,
    pub cut: Vec<u64>,
}

/// How members learn that casts are stable (paper 002 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// STABLE: received vectors ride on data messages and heartbeats (and, with adaptive
    /// packing, on prompt reports to the casts' senders).
    Piggyback,
    /// PINWHEEL: a token rotates through the members collecting the minimum.
    Pinwheel,
}

/// A group's parameters; every member must use the same.
#[derive(Clone, Debug, PartialEq)]
pub struct VsConfig {
    pub group: u32,
    /// A member's casts that may be unstable at once (its retransmission buffer), and the
    /// most a receiver holds of one stream beyond what it delivered.
    pub window: usize,
    pub cast_bytes_max: usize,
    /// Largest message this member builds.
    pub packet_bytes_max: usize,
    pub pack: PackMode,
    pub stability: Stability,
    /// Repeat a NAK, a flush message or a join after this long.
    pub retransmit_timeout: Duration,
    /// Say something to the group at least this often (a heartbeat if nothing else).
    pub heartbeat_interval: Duration,
    /// A member silent this long is suspected.
    pub silence_timeout: Duration,
    /// A member whose host answered one of our datagrams with "port unreachable" (its
    /// process is gone) is suspected once silent this long (at most `silence_timeout`).
    /// Longer than `heartbeat_interval`, so a live member named in a forged report is heard
    /// from before it runs out.
    pub unreachable_silence: Duration,
    /// A flush phase waits this long for answers before it goes on without the silent.
    pub flush_timeout: Duration,
    pub join_attempts_max: u32,
}

impl Default for VsConfig {
    fn default() -> Self {
        VsConfig {
            group: 1,
            window: 1024,
            cast_bytes_max: 8 * 1024,
            packet_bytes_max: 16_000,
            pack: PackMode::Adaptive {
                delay_max: Duration::from_millis(1),
            },
            stability: Stability::Piggyback,
            retransmit_timeout: Duration::from_millis(20),
            heartbeat_interval: Duration::from_millis(50),
            silence_timeout: Duration::from_millis(500),
            unreachable_silence: Duration::from_millis(100),
            flush_timeout: Duration::from_millis(200),
            join_attempts_max: 100,
        }
    }
}

/// A configuration that cannot work, with the rule it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VsConfigError(pub &'static str);

/// Room for the largest control message: a `FlushOk` with its frozen vector and an accepted
/// proposal, each of `MEMBERS_MAX` (two ballots, the proposal's coordinator, three counts, two
/// vectors and a member list). It said 64 + 16 a member, short of a full `FlushOk`.
const CONTROL_BYTES_MAX: usize = msg::HEADER_BYTES
    + 2 * (8 + crate::addr::ADDRESS_BYTES)
    + crate::addr::ADDRESS_BYTES
    + 3 * 2
    + msg::MEMBERS_MAX * (8 + 8 + crate::addr::ADDRESS_BYTES);

impl VsConfig {
    pub fn validate(&self) -> Result<(), VsConfigError> {
        if self.window < 4 || self.window > 1 << 20 {
            return Err(VsConfigError("window must be 4 to 2^20"));
        }
        if self.packet_bytes_max > 65_000 || self.packet_bytes_max < CONTROL_BYTES_MAX {
            return Err(VsConfigError(
                "packet_bytes_max must fit a UDP datagram and hold a commit of MEMBERS_MAX members",
            ));
        }
        let one = msg::data_bytes(msg::MEMBERS_MAX, std::iter::once(self.cast_bytes_max));
        if one > self.packet_bytes_max {
            return Err(VsConfigError(
                "packet_bytes_max must hold one cast of cast_bytes_max with a full vector",
            ));
        }
        if self.silence_timeout <= self.heartbeat_interval * 2 {
            return Err(VsConfigError(
                "silence_timeout must exceed two heartbeat intervals",
            ));
        }
        if self.retransmit_timeout.is_zero() || self.flush_timeout.is_zero() {
            return Err(VsConfigError("timeouts must not be zero"));
        }
        Ok(())
    }
}

/// Where a member is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VsState {
    Joining,
    Normal,
    /// A view change is under way: casting has stopped (or will once the layer above is
    /// ready, see [`Vs::flush_ready`]).
    Flushing,
    Left,
    /// A view was installed without this member (it was suspected, or a minority).
    Expelled,
    /// Joining failed.
    Failed,
}

/// Why a call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VsError {
    /// Not in a state to cast (joining, flushing, gone).
    #[error("cannot cast now ({0:?})")]
    NotNormal(VsState),
    /// `window` casts of this member are unstable: try again later (back-pressure).
    #[error("window of unstable casts full")]
    WindowFull,
    #[error("cast of {len} bytes > {max}")]
    TooLong { len: usize, max: usize },
    #[error("{0} is not a member of the view")]
    NotMember(Address),
}

/// A view as installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChange {
    pub id: ViewId,
    /// In rank order.
    pub members: Vec<Address>,
    pub joined: Vec<Address>,
    /// Members of the previous view not in this one (failed, or left).
    pub removed: Vec<Address>,
}

/// What the layer above must handle, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Upcall<'a> {
    /// The next cast of `sender`'s stream in the current view.
    Cast {
        sender: Address,
        seq: u64,
        payload: &'a [u8],
    },
    Direct {
        from: Address,
        payload: &'a [u8],
    },
    /// A view change started: cast what must be in this view now, then call
    /// [`Vs::flush_ready`]; no cast is accepted after that until the next view.
    Flush,
    /// Every cast of the previous view has been handed up; this view is now installed.
    View(ViewChange),
    /// This member's leave is done.
    Left,
    /// A view was installed without this member.
    Expelled,
    JoinFailed,
    /// The view change has lasted [`BLOCKED_AFTER_FLUSH_TIMEOUTS`] flush timeouts: this
    /// member most likely cannot reach a majority of its view (it is in a minority, or cut
    /// off), and it delivers nothing until a view change completes (a `View`) or it learns
    /// it was left out (`Expelled`). Once per view change. `reachable` counts this view's
    /// members it does not suspect, itself included; `needed` is a majority of the view.
    Blocked {
        reachable: usize,
        needed: usize,
    },
}

/// A view change that lasts this many flush timeouts is reported as blocked
/// ([`Upcall::Blocked`], [`Vs::blocked`]). A flush that loses no one ends within about one;
/// a stalled coordinator is replaced after three.
pub const BLOCKED_AFTER_FLUSH_TIMEOUTS: u32 = 5;

/// What a member counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VsCounters {
    pub casts: u64,
    pub data_sent: u64,
    pub records_sent: u64,
    pub data_received: u64,
    pub records_received: u64,
    pub records_retransmitted: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub duplicates: u64,
    pub dropped_bad: u64,
    pub dropped_other_group: u64,
    pub dropped_other_view: u64,
    pub dropped_beyond_window: u64,
    pub dropped_control_full: u64,
    pub heartbeats: u64,
    /// Prompt reports of what arrived (adaptive packing, piggybacked stability).
    pub acks: u64,
    /// Told by a member of a later view that this one's view is over without it.
    pub gone: u64,
    pub tokens: u64,
    pub directs_sent: u64,
    pub directs_received: u64,
    pub suspicions: u64,
    pub flushes_started: u64,
    pub views_installed: u64,
}

crate::counters_sum!(VsCounters {
    casts,
    data_sent,
    records_sent,
    data_received,
    records_received,
    records_retransmitted,
    naks_sent,
    naks_received,
    duplicates,
    dropped_bad,
    dropped_other_group,
    dropped_other_view,
    dropped_beyond_window,
    dropped_control_full,
    heartbeats,
    acks,
    gone,
    tokens,
    directs_sent,
    directs_received,
    suspicions,
    flushes_started,
    views_installed,
});

/// Most control messages queued; more are dropped and counted (their senders retry).
const CONTROL_QUEUE_MAX: usize = 1024;
/// Most casts one NAK asks for (and one answer sends).
const NAK_SPAN_MAX: u64 = 256;
/// Recent commits kept, to tell members that missed them.
const COMMITS_KEPT: usize = 8;
/// Suspicions kept for [`Vs::take_suspected`] until the layer above asks.
const SUSPECTED_KEPT: usize = 64;

/// One process's membership in one group.
pub struct Vs {
    cfg: VsConfig,
    me: Address,
    state: VsState,
    view: ViewId,
    members: Vec<Address>,
    rank: usize,
    streams: Vec<stream::Stream>,
    /// Sending: own casts on their way out (the packer), control messages, NAKs owed.
    out: stream::Outbox,
    /// The previous view's casts up to its cut, kept to answer the NAKs of members that have
    /// the commit but not yet every cast up to the cut (see [`stream::Prev`]).
    prev: Option<stream::Prev>,
    /// Handing up: queued events, and the round-robin over the streams' casts.
    delivery: deliver::Delivery,
    /// Piggybacked stability: the members' received vectors, and what this member told them.
    reports: stability::Reports,
    /// Pinwheel stability: the token.
    pinwheel: stability::Pinwheel,
    /// Suspicions.
    detector: detector::Detector,
    /// The view change under way.
    fl: flush::Flush,
    /// Joining, leaving, the view change's start, the commits kept.
    ms: membership::Membership,
    /// Every deadline of the member, one per kind.
    timers: Timers,
    counters: VsCounters,
}

impl fmt::Debug for Vs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Vs {{ me: {}, state: {:?}, view: {}, members: {:?} }}",
            self.me, self.state, self.view, self.members
        )
    }
}

impl Vs {
    /// Starts a group of one.
    pub fn create(cfg: VsConfig, me: Address, now: Instant) -> Result<Vs, VsConfigError> {
        cfg.validate()?;
        let mut vs = Vs::new(cfg, me, me);
        vs.install(
            now,
            ViewId {
                number: 1,
                coordinator: me,
            },
            vec![me],
            Vec::new(),
        );
        Ok(vs)
    }

    /// Asks `contact`, a member, to let this process in: the first [`Vs::handle_timeout`]
    /// sends the request.
    pub fn join(
        cfg: VsConfig,
        me: Address,
        contact: Address,
        _now: Instant,
    ) -> Result<Vs, VsConfigError> {
        cfg.validate()?;
        Ok(Vs::new(cfg, me, contact))
    }

    fn new(cfg: VsConfig, me: Address, contact: Address) -> Vs {
        let packer = Packer::new(cfg.pack);
        let mut timers = Timers::default();
        timers.set(Timer::Join, Instant::ZERO);
        Vs {
            cfg,
            me,
            state: VsState::Joining,
            view: ViewId::default(),
            members: Vec::new(),
            rank: 0,
            streams: Vec::new(),
            out: stream::Outbox::new(packer),
            prev: None,
            delivery: deliver::Delivery::default(),
            reports: stability::Reports::default(),
            pinwheel: stability::Pinwheel::default(),
            detector: detector::Detector::default(),
            fl: flush::Flush::default(),
            ms: membership::Membership::new(contact),
            timers,
            counters: VsCounters::default(),
        }
    }

    pub fn address(&self) -> Address {
        self.me
    }

    pub fn state(&self) -> VsState {
        self.state
    }

    pub fn config(&self) -> &VsConfig {
        &self.cfg
    }

    pub fn view(&self) -> ViewId {
        self.view
    }

    /// The current view's members, in rank order.
    pub fn members(&self) -> &[Address] {
        &self.members
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn counters(&self) -> &VsCounters {
        &self.counters
    }

    pub fn pack_histogram(&self) -> &[u64; crate::pack::PACK_HISTOGRAM_BINS] {
        self.out.packer.histogram()
    }

    /// The other members, for `Dest::All`.
    pub fn fanout(&self) -> impl Iterator<Item = Address> + '_ {
        self.members.iter().copied().filter(move |&a| a != self.me)
    }

    /// Whether a cast would be accepted now (not flushing, window open).
    pub fn can_cast(&self) -> bool {
        self.cast_check(0).is_ok()
    }

    /// Whether anything is waiting to go out or be handed up.
    pub fn idle(&self) -> bool {
        self.out.control.is_empty()
            && self.out.resend.is_empty()
            && self.delivery.pending.is_empty()
            && self.streams.iter().all(|s| s.delivered == s.received)
            && self
                .streams
                .get(self.rank)
                .is_none_or(|s| self.out.sent_upto == s.received)
    }

    fn cast_check(&self, len: usize) -> Result<(), VsError> {
        let casting = self.state == VsState::Normal
            || (self.state == VsState::Flushing && !self.fl.frozen_set());
        if !casting || self.leaving_done() {
            return Err(VsError::NotNormal(self.state));
        }
        if len > self.cfg.cast_bytes_max {
            return Err(VsError::TooLong {
                len,
                max: self.cfg.cast_bytes_max,
            });
        }
        let own = &self.streams[self.rank];
        if own.received - own.stable >= self.cfg.window as u64 {
            return Err(VsError::WindowFull);
        }
        Ok(())
    }

    fn leaving_done(&self) -> bool {
        matches!(self.state, VsState::Left | VsState::Expelled)
    }

    /// Sends `payload` to one member, best effort.
    pub fn send_direct(&mut self, to: Address, payload: &[u8]) -> Result<(), VsError> {
        if !self.members.contains(&to) {
            return Err(VsError::NotMember(to));
        }
        if payload.len() > self.cfg.cast_bytes_max {
            return Err(VsError::TooLong {
                len: payload.len(),
                max: self.cfg.cast_bytes_max,
            });
        }
        if to == self.me {
            self.delivery.direct(self.me, payload);
            return Ok(());
        }
        self.counters.directs_sent += 1;
        self.queue(Dest::To(to), &VsMsg::Direct { payload });
        Ok(())
    }

    fn header(&self) -> Header {
        Header {
            group: self.cfg.group,
            view: self.view,
            from: self.me,
        }
    }

    /// Whether `h` comes from a member of this member's current view, in that view.
    fn in_view(&self, h: &Header) -> bool {
        h.view == self.view && self.members.contains(&h.from)
    }

    /// Queues a control message (dropped and counted past the bound: senders retry).
    fn queue(&mut self, dest: Dest, m: &VsMsg<'_>) {
        if self.out.control.len() >= CONTROL_QUEUE_MAX {
            self.counters.dropped_control_full += 1;
            return;
        }
        let mut b = vec![0u8; self.cfg.packet_bytes_max];
        let h = self.header();
        match msg::write(&mut b, &h, m) {
            Some(n) => {
                b.truncate(n);
                if dest == Dest::All {
                    self.note_to_all();
                }
                self.out.control.push_back((dest, b));
            }
            None => debug_assert!(false, "control message does not fit: {m:?}"),
        }
    }

    fn note_to_all(&mut self) {
        self.reports.unreported = 0;
    }

    /// Handles one message from another member.
    pub fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        self.on_message(now, bytes);
        self.arm_flush();
    }

    fn on_message(&mut self, now: Instant, bytes: &[u8]) {
        let (h, m) = match msg::parse(bytes) {
            Ok(x) => x,
            Err(_) => {
                self.counters.dropped_bad += 1;
                return;
            }
        };
        if h.group != self.cfg.group {
            self.counters.dropped_other_group += 1;
            return;
        }
        if h.from == self.me || self.leaving_done() || self.state == VsState::Failed {
            return;
        }
        if h.view > self.view
            && matches!(self.state, VsState::Normal | VsState::Flushing)
            && !matches!(m, VsMsg::Commit { .. } | VsMsg::Join { .. } | VsMsg::Gone)
        {
            self.ask_commit(now, h.from);
        }
        // View changes and joins first: they are about views, not within one.
        match m {
            VsMsg::Join { joiner } => return self.on_join(now, &h, joiner),
            VsMsg::Leave => return self.on_leave(now, &h),
            VsMsg::Suspect { who } => return self.on_suspect_report(now, &h, who),
            VsMsg::Flush { ballot } => return self.on_flush(now, &h, ballot),
            VsMsg::FlushOk {
                ballot,
                frozen,
                accepted,
            } => return self.on_flush_ok(now, &h, ballot, frozen, accepted),
            VsMsg::Propose { ballot, proposal } => {
                return self.on_propose(now, &h, ballot, proposal)
            }
            VsMsg::Accept { ballot } => return self.on_accept(now, &h, ballot),
            VsMsg::Commit { ballot, proposal } => return self.on_commit(now, &h, ballot, proposal),
            VsMsg::Gone => return self.on_gone(&h),
            _ => {}
        }
        if let VsMsg::Nak { stream, from, to } = m {
            if self.prev.as_ref().is_some_and(|p| p.view == h.view) {
                return self.on_prev_nak(&h, stream, from, to);
            }
        }
        if h.view != self.view {
            self.counters.dropped_other_view += 1;
            if h.view < self.view {
                self.tell_commit(h.from, h.view);
            }
            return;
        }
        let Some(from_rank) = self.members.iter().position(|&a| a == h.from) else {
            self.counters.dropped_other_view += 1;
            return;
        };
        self.heard(now, from_rank);
        match m {
            VsMsg::Data {
                stream,
                first,
                received,
                records,
            } => self.on_data(now, from_rank, stream, first, &received, &records),
            VsMsg::Status { last, received } => self.on_status(from_rank, last, &received),
            VsMsg::Nak { stream, from, to } => self.on_nak(h.from, stream, from, to),
            VsMsg::Direct { payload } => {
                self.counters.directs_received += 1;
                self.delivery.direct(h.from, payload);
            }
            VsMsg::Token { round, acc, stable } => self.on_token(now, round, acc, stable),
            _ => {}
        }
    }

    /// A one-line account of the timers and the flush, for a simulator's failure reports.
    pub fn debug_state(&self) -> String {
        let ms = |t: Instant| t.0 / 1_000_000;
        let timers: Vec<String> = Timer::ALL
            .iter()
            .filter_map(|&t| Some(format!("{t:?} {}", self.timers.get(t)?.0)))
            .collect();
        format!(
            "{} {:?} view {} rank {} due {:?} timers [{}] unsent_since {:?} sent_upto {} suspects {:?} streams [{}] token {:?} flush {}",
            self.me,
            self.state,
            self.view,
            self.rank,
            self.poll_timeout().map(|t| t.0),
            timers.join(", "),
            self.out.unsent_since.map(|t| t.0),
            self.out.sent_upto,
            self.detector.suspects.iter().map(|a| a.site).collect::<Vec<_>>(),
            self.streams
                .iter()
                .map(|s| format!(
                    "{}: recv {} dlv {} stable {} known {} held {} heard {} nak {}",
                    s.addr.site,
                    s.received,
                    s.delivered,
                    s.stable,
                    s.highest_known,
                    s.held.len(),
                    ms(s.last_heard),
                    s.nak_after.0
                ))
                .collect::<Vec<_>>()
                .join("; "),
            self.pinwheel.token.as_ref().map(|t| t.round),
            self.fl.debug(),
        )
    }

    /// Builds the next message to send into `buf`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)> {
        if let Some((dest, b)) = self.out.control.pop_front() {
            let n = b.len();
            buf.get_mut(..n)?.copy_from_slice(&b);
            return Some((dest, n));
        }
        if let Some(x) = self.poll_resend(buf) {
            return Some(x);
        }
        if let Some(x) = self.poll_data(now, buf) {
            return Some(x);
        }
        if self.state == VsState::Normal || self.state == VsState::Flushing {
            if let Some(x) = self.poll_report(now, buf) {
                return Some(x);
            }
        }
        None
    }

    /// When [`Vs::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            VsState::Joining | VsState::Normal | VsState::Flushing => self.timers.next(),
            _ => None,
        }
    }

    /// Runs what is due: NAKs, failure detection, joins, leaves, the flush's retries.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.on_timeout(now);
        self.arm_flush();
    }

    fn on_timeout(&mut self, now: Instant) {
        match self.state {
            VsState::Joining => return self.join_tick(now),
            VsState::Normal | VsState::Flushing => {}
            _ => return,
        }
        self.nak_tick(now);
        self.detect(now);
        if self.ms.leaving {
            self.leave_tick(now);
        }
        self.flush_tick(now);
        self.blocked_tick(now);
    }
}
