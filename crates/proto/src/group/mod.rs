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

mod history;
mod membership;
pub mod msg;
mod receive;
mod recovery;
mod sequencer;
mod transmit;

#[cfg(test)]
mod tests;

use crate::addr::{Address, AddressHash};
pub use crate::member::{
    ConfigError, Delivered, Delivery, Dest, Epoch, GroupCounters, GroupError, GroupEvent, GroupId,
    GroupInfo, MinMembers, State,
};
use crate::pack::{PackMode, Packer};
use crate::time::Instant;
use core::time::Duration;
use history::History;
pub use msg::{GroupWireError, RecordKind};
use std::collections::{HashMap, VecDeque};

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

/// A message this member sent and has not yet seen delivered.
#[derive(Debug)]
struct Pending {
    msg_id: u64,
    payload: Vec<u8>,
    /// Last transmission (None: not yet sent).
    sent_at: Option<Instant>,
}

/// A control message waiting for `poll_transmit`.
#[derive(Clone, Debug)]
enum Control {
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

/// Most control messages queued; more are dropped and counted (their senders retry).
const CONTROL_QUEUE_MAX: usize = 1024;
/// Most BB payloads held before their accept arrives.
const UNORDERED_MAX: usize = 8192;
/// Most records one NAK asks for.
const NAK_SPAN_MAX: u64 = 1024;
/// Joins remembered from the join records (see `Member::join_ids_seen`).
const JOIN_IDS_SEEN_MAX: usize = 256;
/// Bases a member keeps an accepted proposal for.
const ACCEPTED_MAX: usize = 8;
/// Join attempts at one address before a joiner turns to the other it knows.
const JOIN_ASK_TURN: u32 = 8;

/// Failure detector state for one watched peer.
#[derive(Clone, Copy, Debug)]
struct Watch {
    last_heard: Instant,
    probes: u32,
    next_probe_at: Instant,
}

/// The sequencer role (present while this member is the sequencer).
#[derive(Debug)]
struct Sequencer {
    next_seq: u64,
    /// Per member (and departing member): (consumed, received) as last reported.
    acks: HashMap<Address, (u64, u64), AddressHash>,
    /// Members whose leave was applied, until they have their leave record.
    departing: Vec<(Address, u64)>,
    /// Next msg_id expected from each sender (duplicate suppression, FIFO).
    next_msg_id: HashMap<Address, u64, AddressHash>,
    /// Records `multicast_from..next_seq` are ordered but not yet multicast.
    multicast_from: u64,
    /// Of those: their bytes as records in an Order (see [`Entry::wire_bytes`]), and how many
    /// are not our own application's messages (kept as records are ordered and sent, so the
    /// packing decision costs nothing per call).
    unsent_bytes: usize,
    unsent_foreign: usize,
    oldest_unsent: Option<Instant>,
    /// A membership record ordered and not yet applied: nothing is ordered after it.
    barrier: Option<u64>,
    /// Joiners waiting to be ordered, with their join ids.
    joins: VecDeque<(Address, u64)>,
    leaves: VecDeque<Address>,
    /// Submissions accepted (in order per sender) that wait for room in the history:
    /// (msg_id, payload, via BB) by sender.
    waiting: HashMap<Address, VecDeque<WaitingSubmit>, AddressHash>,
    /// Senders with messages waiting (our own address: our application's), in the order
    /// they are served, one message per turn.
    turns: VecDeque<Address>,
    waiting_len: usize,
    /// Sequence numbers of our own messages that some member has not yet reported received:
    /// at most `send_window` of them, the same window every other sender has.
    own_in_flight: VecDeque<u64>,
    waiting_bytes: usize,
    /// Recent joins by (address, join id).
    join_ids: VecDeque<(Address, u64)>,
    /// Joiners admitted, until they acknowledge: (joiner, join seq, members at the join).
    welcomes: Vec<Welcome>,
    last_multicast_at: Instant,
    sync_at: Option<Instant>,
    watches: HashMap<Address, Watch, AddressHash>,
    /// The accept or stable watermark changed since the last multicast.
    accept_news: bool,
    /// Our own consumption freed history while something waits to be ordered, or a leave
    /// changed which members acceptance waits for: accept and order at the next timer (the
    /// application's `poll_delivery` has no clock, and a leave is applied while accepting).
    order_due: bool,
    /// The stable watermark as of the last multicast.
    stable_told: u64,
    /// Ask every member for an ack in the next multicast (the history is full).
    sync_due: bool,
    heartbeat_due: bool,
}

/// A submission waiting for room in the history: (msg_id, payload, via BB).
type WaitingSubmit = (u64, Vec<u8>, bool);

/// A joiner admitted and not yet heard from: its join record and the members as of it, each
/// with its last ordered msg_id.
type Welcome = (Address, u64, Vec<(Address, u64)>);

/// Recovery in progress (see `recovery`).
#[derive(Debug)]
struct Reset {
    epoch: Epoch,
    /// The coordinator's: the view being rebuilt (its last known committed one), and its start.
    base: Epoch,
    base_start: u64,
    /// The coordinator's: how recent each answer's member list is (see `config_seq`).
    configs: HashMap<Address, u64, AddressHash>,
    coordinator: bool,
    min_members: usize,
    old_members: Vec<Address>,
    /// Per member that answered: (consumed, received, oldest record held).
    replies: HashMap<Address, (u64, u64, u64), AddressHash>,
    invites_sent: u32,
    next_at: Instant,
    /// The coordinator's: the highest-ballot successor of the base accepted by a member
    /// that answered (ourselves included), with its ballot.
    best: Option<(Epoch, ViewNews)>,
    /// The coordinator's, in the second phase: the view proposed, and who accepted it.
    proposal: Option<ViewNews>,
    accepts: Vec<Address>,
    /// The coordinator's: the member whose death started the round (it went unanswered
    /// through the silence timeout and every probe). The round decides once every other old
    /// member answered, without waiting for it through the invitation rounds.
    dead: Option<Address>,
}

impl ViewNews {
    fn from_value(v: &msg::ViewValue<'_>, committed: bool) -> ViewNews {
        let donors: Vec<(Address, u64, u64)> = v.members.iter().collect();
        // (A quorum outside 1..=members is corrupt; clamped, it is at worst "all".)
        let quorum = usize::try_from(v.quorum)
            .unwrap_or(usize::MAX)
            .clamp(1, donors.len().max(1));
        ViewNews {
            epoch: v.epoch,
            start: v.start_seq,
            sequencer: v.sequencer,
            quorum,
            committed,
            base: v.base,
            donors,
        }
    }
}

/// A rebuilt view as its announcement (`NewView`) describes it.
#[derive(Clone, Debug)]
struct ViewNews {
    epoch: Epoch,
    start: u64,
    sequencer: Address,
    /// How many of its members must hold its View record for it to commit.
    quorum: usize,
    /// The sender knows it committed.
    committed: bool,
    /// The view the round that made it was on (it is a successor of that one).
    base: Epoch,
    /// Its members as the rebuild announced them (see `Member::view_donors`).
    donors: Vec<(Address, u64, u64)>,
}

/// A view known to have committed (see `Member::committed`).
#[derive(Clone, Debug)]
struct Committed {
    epoch: Epoch,
    start: u64,
    /// Its member list as applied here (as `Member::members` is): the list it had when it
    /// was left, and the joins and leaves numbered in it applied since. (The newer view's
    /// list is cut down to that view's survivors, which do not count for a round on this
    /// one.)
    members: Vec<Address>,
    sequencer: Address,
}

/// One process's membership in one group.
pub struct Member {
    cfg: GroupConfig,
    me: Address,
    state: State,
    epoch: Epoch,
    /// Highest epoch number seen anywhere (a coordinator picks a higher one).
    epoch_seen: u64,
    /// The highest rebuild this member answered for another coordinator: it installs no
    /// view of a lower epoch, since that coordinator may make its view from the answer.
    promised: Epoch,
    /// The member the last multicast goes to first ([`Member::fanout`]).
    fanout_first: Option<Address>,
    /// The sequence number of the last membership record applied (or the join or rebuild
    /// that gave this member its list).
    config_applied: u64,
    /// Recent joins (joiner, join id) from the join records applied here, handed to the
    /// sequencer role when this member takes it.
    join_ids_seen: VecDeque<(Address, u64)>,
    /// The sequence number a rebuilt view started after (its `start_seq`).
    start_seq: u64,
    /// `Some` while the view this member is in is not known to have committed (its View
    /// record not yet applied here): the last view it knows committed, which every rebuild
    /// it takes part in is a round on (see `recovery`). `None`: the current view is known
    /// committed (applied its View record, or created or joined it).
    committed: Option<Committed>,
    /// Views this member accepted in a round that proposed them (see `recovery`), each with
    /// that round's epoch (its ballot); at most one per base, the highest ballot's, and at
    /// most `ACCEPTED_MAX`.
    accepted: Vec<(Epoch, ViewNews)>,
    /// The base of the round that made the current view, if this member took part in it.
    view_base: Epoch,
    members: Vec<Address>,
    sequencer: Address,
    history: History,
    received_upto: u64,
    accepted_upto: u64,
    /// Highest record applied to the protocol state (membership, dedup, completions).
    applied_upto: u64,
    /// Highest record the application took.
    consumed_upto: u64,
    ordered_seen: u64,
    stable_upto: u64,
    next_msg_id: u64,
    pending: VecDeque<Pending>,
    /// How many of `pending` (from the front) went out at least once.
    sent_count: usize,
    /// Bytes of the submission records of `pending` not yet sent.
    unsent_bytes: usize,
    /// Last msg_id applied per sender.
    last_msg_id: HashMap<Address, u64, AddressHash>,
    unordered: HashMap<(Address, u64), Vec<u8>>,
    seqr: Option<Sequencer>,
    /// Retransmissions owed: (member, from, to).
    retransmit: VecDeque<(Address, u64, u64)>,
    /// After a rebuild: each survivor with the oldest record it held and how far it had
    /// received, to fetch records from. Also the view's members as the rebuild announced
    /// them, while it is not known committed.
    view_donors: Vec<(Address, u64, u64)>,
    /// How many members of the current view must hold its View record (its sequencer among
    /// them) for the view to be chosen.
    view_quorum: usize,
    nak_attempts: u32,
    /// This member watching the sequencer.
    watch: Watch,
    reset: Option<Reset>,
    control: VecDeque<(Address, Control)>,
    events: VecDeque<GroupEvent>,
    ack_due: bool,
    nak_due: bool,
    last_ack: (u64, u64),
    last_to_sequencer: Instant,
    nak_at: Option<Instant>,
    /// Joining: the member asked, attempts so far, next attempt.
    join: Option<(Address, u32, Instant)>,
    /// Joining: the contact given to [`Member::join`], and the sequencer last named to us
    /// (the contact until a redirect), the two addresses asked in turn.
    join_via: (Address, Address),
    /// Names this process's join in its requests.
    join_id: u64,
    leave_at: Option<Instant>,
    /// Departing sequencer: serve until everyone has this record, or this deadline.
    depart: Option<(u64, Instant)>,
    blocked_retry_at: Option<Instant>,
    /// The member just declared dead, for the rebuild it starts (see `Reset::dead`).
    declared_dead: Option<Address>,
    packer: Packer,
    counters: GroupCounters,
    /// Submissions not yet transmitted since the oldest was queued (for packing).
    oldest_unsubmitted: Option<Instant>,
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
        m.epoch_seen = 1;
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
        m.join = Some((contact, 1, now + m.cfg.retransmit_timeout));
        m.join_via = (contact, contact);
        m.join_id = now.0.wrapping_add(1);
        m.push_control(contact, Control::JoinRequest);
        Ok(m)
    }

    fn blank(cfg: GroupConfig, me: Address, now: Instant) -> Result<Member, GroupError> {
        cfg.validate().map_err(GroupError::Config)?;
        let history = History::new(1, cfg.history_max * 2);
        let packer = Packer::new(cfg.pack);
        Ok(Member {
            cfg,
            me,
            state: State::Joining,
            epoch: Epoch::default(),
            epoch_seen: 0,
            promised: Epoch::default(),
            fanout_first: None,
            config_applied: 0,
            join_ids_seen: VecDeque::new(),
            start_seq: 0,
            committed: None,
            accepted: Vec::new(),
            view_base: Epoch::default(),
            members: Vec::new(),
            sequencer: me,
            history,
            received_upto: 0,
            accepted_upto: 0,
            applied_upto: 0,
            consumed_upto: 0,
            ordered_seen: 0,
            stable_upto: 0,
            next_msg_id: 1,
            pending: VecDeque::new(),
            sent_count: 0,
            unsent_bytes: 0,
            last_msg_id: HashMap::default(),
            unordered: HashMap::new(),
            seqr: None,
            retransmit: VecDeque::new(),
            view_donors: Vec::new(),
            view_quorum: 1,
            nak_attempts: 0,
            watch: Watch::new(now),
            reset: None,
            control: VecDeque::new(),
            events: VecDeque::new(),
            ack_due: false,
            nak_due: false,
            last_ack: (0, 0),
            last_to_sequencer: now,
            nak_at: None,
            join: None,
            join_id: 0,
            join_via: (me, me),
            leave_at: None,
            depart: None,
            blocked_retry_at: None,
            declared_dead: None,
            packer,
            counters: GroupCounters::default(),
            oldest_unsubmitted: None,
        })
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
            self.fanout_first
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
        self.packer.histogram()
    }

    pub fn info(&self) -> GroupInfo {
        GroupInfo {
            state: self.state,
            epoch: self.epoch,
            members: self.members.clone(),
            sequencer: self.sequencer,
            resilience: self.cfg.resilience,
            received_upto: self.received_upto,
            consumed_upto: self.consumed_upto,
            stable_upto: self.stable_upto,
            counters: self.counters.clone(),
        }
    }

    /// Messages this member sent that are not yet delivered back to it.
    pub fn sends_pending(&self) -> usize {
        self.pending.len()
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
        if self.pending.len() >= self.cfg.send_queue_max {
            return Err(GroupError::Full);
        }
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        self.pending.push_back(Pending {
            msg_id,
            payload: payload.to_vec(),
            sent_at: None,
        });
        self.unsent_bytes += payload.len() + msg::SUBMIT_RECORD_BYTES;
        self.oldest_unsubmitted.get_or_insert(now);
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
            self.leave_at = Some(now + self.cfg.retransmit_timeout);
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
        let seq = self.consumed_upto + 1;
        if seq > self.applied_upto {
            return None;
        }
        let e = self
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
        self.consumed_upto = seq;
        self.counters.delivered += 1;
        self.note_consumed();
        Some(r)
    }

    /// Whether a delivery is waiting.
    pub fn has_delivery(&self) -> bool {
        self.consumed_upto < self.applied_upto
    }

    /// Everything pending goes out again from the start (the sequencer changed).
    fn resubmit_all(&mut self) {
        for p in self.pending.iter_mut() {
            if p.sent_at.take().is_some() {
                self.unsent_bytes += p.payload.len() + msg::SUBMIT_RECORD_BYTES;
            }
        }
        self.sent_count = 0;
    }

    fn push_control(&mut self, to: Address, c: Control) {
        if self.control.len() >= CONTROL_QUEUE_MAX {
            self.counters.dropped_control_full += 1;
            return;
        }
        self.control.push_back((to, c));
    }
}

impl Watch {
    fn new(now: Instant) -> Watch {
        Watch {
            last_heard: now,
            probes: 0,
            next_probe_at: now,
        }
    }

    fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.probes = 0;
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
        self.pending.len()
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
