//! What a group member offers, whichever protocol orders its messages: the one interface
//! ([`GroupMember`]) that both group stacks implement, and the types they share.
//!
//! - Amoeba's sequencer protocol ([`crate::group::Member`]; Kaashoek & Tanenbaum, *An
//!   Evaluation of the Amoeba Group Communication System*);
//! - the ordering protocols `totem`, `total`, `dynseq` and `dynord` over the virtually
//!   synchronous stack ([`crate::order::Member`]; Friedman & van Renesse, *Packing Messages as
//!   a Tool for Boosting the Performance of Total Ordering Protocols*).
//!
//! A member is a sans-IO state machine. In: application calls ([`GroupMember::send`],
//! [`GroupMember::leave`], [`GroupMember::reset`]), bytes from other members
//! ([`GroupMember::handle_message`]) and time ([`GroupMember::handle_timeout`]). Out: bytes
//! with their [`Dest`] ([`GroupMember::poll_transmit`]), the ordered stream of messages and
//! membership changes ([`GroupMember::poll_delivery`]), completions and failures
//! ([`GroupMember::poll_event`]) and the next deadline ([`GroupMember::poll_timeout`]).
//! [`crate::stack::GroupSpec::start`] makes a member of the chosen stack.

use crate::addr::Address;
use crate::time::Instant;
use core::fmt;

/// The epoch of a view: a number and the coordinator that made it, compared in that order,
/// so two coordinators racing with the same number still make distinct, ordered epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch {
    pub number: u64,
    pub coordinator: Address,
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.number, self.coordinator)
    }
}

/// Identifies a group among the groups of a cluster.
pub type GroupId = u32;

/// When recovery starts and how many members it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinMembers {
    /// At least this many survivors, counting the coordinator.
    Absolute(usize),
    /// More than half of the view being rebuilt.
    Majority,
}

impl MinMembers {
    pub(crate) fn of(self, view: usize) -> usize {
        match self {
            MinMembers::Absolute(n) => n.max(1),
            MinMembers::Majority => view / 2 + 1,
        }
    }
}

/// A configuration that cannot work, with the rule it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub &'static str);

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    To(Address),
    /// Every other member of the view ([`GroupMember::fanout`]); IP multicast where there is one.
    All,
}

/// One record of the ordered stream, as the application sees it.
#[derive(Debug, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub seq: u64,
    pub sender: Address,
    pub what: Delivered<'a>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Delivered<'a> {
    Message {
        msg_id: u64,
        payload: &'a [u8],
    },
    Joined(Address),
    Left(Address),
    /// The group was rebuilt after a failure: its members now, and those it lost.
    Rebuilt {
        epoch: Epoch,
        members: Vec<Address>,
        removed: Vec<Address>,
    },
}

/// Completions and failures, outside the ordered stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// This member's message `msg_id` is delivered here, so it is ordered and held by r
    /// members besides the sequencer.
    SendDone {
        msg_id: u64,
    },
    /// This process is a member (its join record is `seq`).
    JoinDone {
        seq: u64,
    },
    JoinFailed,
    /// This member's leave record was delivered: it is no longer a member.
    LeaveDone,
    /// A member or the sequencer was declared dead; without `auto_reset` the group waits for
    /// [`GroupMember::reset`].
    Failure {
        suspect: Address,
    },
    /// Recovery found too few survivors; the group is blocked and will try again.
    ResetFailed {
        survivors: usize,
        needed: usize,
    },
    /// A rebuilt view left this member out.
    Expelled,
}

/// Where a member is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Joining,
    Normal,
    /// A failure was detected and recovery waits for [`GroupMember::reset`].
    Failed,
    Recovering,
    /// Recovery found too few survivors.
    Blocked,
    /// The old sequencer after its own leave, serving retransmissions until the others have
    /// everything up to its leave record.
    Departing,
    Left,
    Expelled,
}

/// Why an application call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The member is not in a state to do this.
    #[error("not a member in a working group ({0:?})")]
    NotMember(State),
    /// Resilience r needs r + 1 members; the view has fewer.
    #[error("resilience needs {needed} members, the group has {have}")]
    TooFewMembers { needed: usize, have: usize },
    /// The send queue is full (back-pressure).
    #[error("send queue full")]
    Full,
    #[error("message of {len} bytes > {max}")]
    TooLong { len: usize, max: usize },
    #[error("bad group configuration: {0}")]
    Config(#[source] ConfigError),
}

/// What a member counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupCounters {
    pub sent: u64,
    pub submits_sent: u64,
    pub submits_resent: u64,
    pub ordered: u64,
    pub delivered: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub records_multicast: u64,
    pub records_retransmitted: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub acks_sent: u64,
    pub duplicates: u64,
    pub dropped_bad: u64,
    pub dropped_other_group: u64,
    pub dropped_other_epoch: u64,
    pub dropped_beyond_window: u64,
    pub dropped_control_full: u64,
    pub history_full: u64,
    /// Times the sequencer held its own messages back: `send_window` of them were not yet
    /// received by every member.
    pub own_window_full: u64,
    pub syncs: u64,
    pub heartbeats: u64,
    pub probes_sent: u64,
    pub failures_detected: u64,
    pub resets_started: u64,
    pub resets_completed: u64,
    pub resets_failed: u64,
    /// Rebuilds this member coordinated and gave up because another member's list of
    /// members was more recent.
    pub resets_behind: u64,
}

/// A snapshot for `get_info_group`.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupInfo {
    pub state: State,
    pub epoch: Epoch,
    pub members: Vec<Address>,
    pub sequencer: Address,
    pub resilience: u8,
    /// Highest sequence number received contiguously.
    pub received_upto: u64,
    /// Highest sequence number delivered to the application.
    pub consumed_upto: u64,
    pub stable_upto: u64,
    pub counters: GroupCounters,
}

/// One process's membership in one totally ordered group, whichever protocol orders it.
///
/// The ordered stream ([`GroupMember::poll_delivery`]) holds the messages and the membership
/// changes in one total order: every member that delivers two entries delivers them in the same
/// order. Its `seq` numbers this member's entries 1, 2, 3...: for the sequencer protocol the
/// group-wide sequence number; for the layered protocols this member's own count (a joiner's
/// first entry is its view), where every view is a [`Delivered::Rebuilt`] entry.
pub trait GroupMember: Send {
    fn address(&self) -> Address;
    fn state(&self) -> State;
    /// The view this member is in: its number and the member that made it.
    fn epoch(&self) -> Epoch;
    fn members(&self) -> &[Address];
    /// A snapshot for `get_info_group`, with this stack's counters.
    fn info(&self, now: Instant) -> GroupInfo;
    /// Queues `payload` for the group; returns its `msg_id`. [`GroupEvent::SendDone`] with that
    /// id follows once this member delivers it.
    fn send(&mut self, now: Instant, payload: &[u8]) -> Result<u64, GroupError>;
    /// Messages sent here and not yet delivered back here.
    fn sends_pending(&self) -> usize;
    /// Asks to leave; [`GroupEvent::LeaveDone`] follows.
    fn leave(&mut self, now: Instant) -> Result<(), GroupError>;
    /// Rebuilds the group from the members that answer. A stack that installs new views by
    /// itself (the layered one) has nothing to start and returns `Ok`.
    fn reset(&mut self, now: Instant, min_members: MinMembers) -> Result<(), GroupError>;
    /// Takes a message from another member; `false` if it was refused as malformed (it is
    /// counted in [`GroupCounters::dropped_bad`]).
    fn handle_message(&mut self, now: Instant, bytes: &[u8]) -> bool;
    fn handle_timeout(&mut self, now: Instant);
    /// The host of member `who` answered a datagram sent to it with "port unreachable": no
    /// process holds its port now. The failure detector may then suspect it after a shorter
    /// silence than usual (the stack's `unreachable_silence`); a message from it first
    /// cancels the report.
    fn peer_unreachable(&mut self, now: Instant, who: Address);
    fn poll_timeout(&self) -> Option<Instant>;
    /// The next message to send, written into `buf`: where it goes and its length.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Dest, usize)>;
    /// Where [`Dest::All`] goes: every other member of the view, the one on the critical path
    /// first where the protocol has one.
    fn fanout(&self, to: &mut dyn FnMut(Address));
    /// Hands the next entry of the ordered stream to `f`; `false` if none is waiting.
    fn poll_delivery(&mut self, f: &mut dyn FnMut(Delivery<'_>)) -> bool;
    fn has_delivery(&self) -> bool;
    fn poll_event(&mut self) -> Option<GroupEvent>;
}

impl dyn GroupMember {
    /// [`GroupMember::poll_delivery`] with a closure that returns a value.
    pub fn take_delivery<R>(&mut self, f: impl FnOnce(Delivery<'_>) -> R) -> Option<R> {
        let mut f = Some(f);
        let mut r = None;
        self.poll_delivery(&mut |d| {
            if let Some(f) = f.take() {
                r = Some(f(d));
            }
        });
        r
    }
}
