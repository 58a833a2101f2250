//! The local port: a shared-memory receive ring (paper 000, Figure 5; DESIGN.md §3).
//!
//! A port owner (the receiving process) creates a segment file, normally under
//! `/dev/shm/<instance>/`, holding a bounded ring of fixed-size receive slots with a length beside
//! each slot. Local senders — other processes of the same user, and threads of the owner — map the
//! segment and write messages straight into a slot: one copy, and no system call unless the
//! receiver is parked on its futex.
//!
//! The ring is a lock-free multi-producer single-consumer queue whose atomics live in the shared
//! memory (per-slot sequence numbers, as in a bounded MPMC queue):
//!
//! * a producer reserves position `p` by CAS on `tail` when slot `p % slot_count` carries sequence
//!   `p`, writes the bytes, the length and the record kind, then publishes sequence `p + 1` with
//!   Release;
//! * the consumer reads slot `head % slot_count` when its sequence is `head + 1` (Acquire),
//!   validates the length and kind, hands the bytes out in place, and releases the slot by storing
//!   sequence `head + slot_count`.
//!
//! Memory layout (all words native-endian; `LINE` = 128 bytes):
//!
//! ```text
//! offset    0  identity: magic, version, header_bytes, slot_count, slot_bytes, slot_stride,
//!              owner_pid, total_bytes, owner_start_time, closed, owner_uid
//! offset  128  tail        (producers CAS)
//! offset  256  head        (consumer; mirror for len())
//! offset  384  sleeping    (receiver futex word: 1 = about to park / parked)
//! offset  512  space_seq, space_waiters (back-pressure futex word + waiter count)
//! offset  640  producer counters: full_rejections, wakeups, sender_waits
//! offset  768  consumer counters: delivered, dropped_bad, skipped, parks, park_timeouts
//! offset 1024  slot[0] .. slot[slot_count-1], each `slot_stride` bytes (multiple of 64):
//!              seq: u64, len: u32, kind: u32, data: [u8; slot_bytes], padding
//! ```
//!
//! The memory is untrusted: any process of the same user may scribble on it. Every index is
//! derived from the configuration copied and validated at open time, every length read from a
//! slot is checked against `slot_bytes`, and bad records are dropped and counted (`dropped_bad`).
//! A scribbler can wedge the ring or lose messages, but cannot make this side read or write out
//! of bounds or panic; one that truncates the file breaks the ring for good, but kills nobody
//! (`sigbus`).

#[cfg(not(loom))]
mod futex;
mod layout;
mod liveness;
mod receiver;
mod reclaim;
mod segment;
mod sender;
#[cfg(not(loom))]
mod sigbus;
mod sync;

#[cfg(all(test, loom))]
mod loom;
#[cfg(all(test, not(loom)))]
mod tests;

pub use layout::{
    SEGMENT_BYTES_MAX, SLOT_BYTES_MAX, SLOT_BYTES_MIN, SLOT_COUNT_MAX, SLOT_COUNT_MIN,
};
pub use liveness::ensure_private_dir;
pub use receiver::{RingReceiver, RingWaker};
pub use reclaim::{reclaim_dead, survey, SegmentStatus};
pub(crate) use segment::send_doorbell;
pub use segment::DOORBELL;
pub use sender::{Claim, RingSender};

/// Shape of a ring, chosen by the owner at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingConfig {
    /// Number of receive slots; a power of two in `SLOT_COUNT_MIN..=SLOT_COUNT_MAX`.
    pub slot_count: u32,
    /// Largest message a slot holds, in bytes; in `SLOT_BYTES_MIN..=SLOT_BYTES_MAX`.
    pub slot_bytes: u32,
}

impl RingConfig {
    /// Checks the bounds (including the total segment size bound, `SEGMENT_BYTES_MAX`).
    pub fn validate(&self) -> Result<(), ShmError> {
        layout::Layout::compute(self.slot_count, self.slot_bytes)
            .map(|_| ())
            .map_err(ShmError::InvalidConfig)
    }

    /// Total size of a segment with this configuration, in bytes.
    pub fn segment_bytes(&self) -> Result<usize, ShmError> {
        layout::Layout::compute(self.slot_count, self.slot_bytes)
            .map(|l| l.total_bytes)
            .map_err(ShmError::InvalidConfig)
    }
}

/// Errors creating, opening or inspecting a segment.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The requested [`RingConfig`] breaks the named bound.
    #[error("invalid ring configuration: {0}")]
    InvalidConfig(&'static str),
    /// A live owner already holds a segment at this path.
    #[error("segment in use by a live owner")]
    InUse,
    /// No segment at this path.
    #[error("segment not found")]
    NotFound,
    /// The segment's contents break the named rule.
    #[error("bad segment: {0}")]
    BadSegment(&'static str),
    /// File ownership or mode breaks the named rule.
    #[error("segment permission: {0}")]
    Permission(&'static str),
    /// The process that created the segment is gone.
    #[error("segment owner is dead")]
    OwnerDead,
    /// The owner closed the segment.
    #[error("segment closed by its owner")]
    Closed,
    /// Any other operating-system error.
    #[error("segment I/O: {0}")]
    Io(#[source] std::io::Error),
}

impl From<std::io::Error> for ShmError {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::NotFound => ShmError::NotFound,
            _ => ShmError::Io(e),
        }
    }
}

/// Errors sending into a ring. All are expected conditions, not bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Every slot holds an unconsumed message (back-pressure).
    #[error("ring full")]
    Full,
    /// The message does not fit in a slot.
    #[error("message of {len} bytes exceeds slot of {max} bytes")]
    TooLong { len: usize, max: usize },
    /// The owner process died (detected while waiting for space, or at open).
    #[error("ring owner is dead")]
    OwnerDead,
    /// The owner closed the segment.
    #[error("ring closed")]
    Closed,
    /// `send_timeout` reached its deadline with the ring still full.
    #[error("timed out waiting for ring space")]
    Timeout,
}

pub use crate::idle::IdleStrategy;

/// A port's link counters (all its UDP peers, summed), as its engine last published them in
/// the port's segment: what `txcast stat` shows of another process's links. Untrusted memory,
/// like [`RingCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTotals {
    pub messages_sent: u64,
    pub messages_delivered: u64,
    /// DATA packets sent again (after a timeout or a NAK).
    pub retransmitted: u64,
    pub rto_fired: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub acks_sent: u64,
    /// DATA received twice (a retransmission whose first copy had arrived).
    pub duplicates_dropped: u64,
    pub beyond_window_dropped: u64,
    pub stale_incarnation_dropped: u64,
    pub peer_restarts: u64,
    pub unreachable_declared: u64,
}

impl LinkTotals {
    pub(crate) fn to_array(self) -> [u64; layout::LINK_STATS] {
        [
            self.messages_sent,
            self.messages_delivered,
            self.retransmitted,
            self.rto_fired,
            self.naks_sent,
            self.naks_received,
            self.acks_sent,
            self.duplicates_dropped,
            self.beyond_window_dropped,
            self.stale_incarnation_dropped,
            self.peer_restarts,
            self.unreachable_declared,
        ]
    }

    pub(crate) fn from_array(a: [u64; layout::LINK_STATS]) -> LinkTotals {
        let [messages_sent, messages_delivered, retransmitted, rto_fired, naks_sent, naks_received, acks_sent, duplicates_dropped, beyond_window_dropped, stale_incarnation_dropped, peer_restarts, unreachable_declared] =
            a;
        LinkTotals {
            messages_sent,
            messages_delivered,
            retransmitted,
            rto_fired,
            naks_sent,
            naks_received,
            acks_sent,
            duplicates_dropped,
            beyond_window_dropped,
            stale_incarnation_dropped,
            peer_restarts,
            unreachable_declared,
        }
    }
}

impl From<&txcast_proto::link::LinkCounters> for LinkTotals {
    fn from(c: &txcast_proto::link::LinkCounters) -> LinkTotals {
        LinkTotals {
            messages_sent: c.messages_sent,
            messages_delivered: c.messages_delivered,
            retransmitted: c.retransmitted,
            rto_fired: c.rto_fired,
            naks_sent: c.naks_sent,
            naks_received: c.naks_received,
            acks_sent: c.acks_sent,
            duplicates_dropped: c.duplicates_dropped,
            beyond_window_dropped: c.beyond_window_dropped,
            stale_incarnation_dropped: c.stale_incarnation_dropped,
            peer_restarts: c.peer_restarts,
            unreachable_declared: c.unreachable_declared,
        }
    }
}

/// Counters of a ring, read from the segment header (so they include every sender's work).
/// They live in untrusted memory: good for statistics, not for decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Messages handed to the receiver.
    pub delivered: u64,
    /// Slots skipped because their producer died between reserving and publishing them.
    pub dead_reservations: u64,
    /// `try_send` calls that found the ring full, and `send_timeout` calls that timed out.
    pub full_rejections: u64,
    /// Futex wake-ups issued by senders to a parked receiver.
    pub wakeups: u64,
    /// Times the receiver parked on its futex.
    pub parks: u64,
    /// Parks that ended by the futex timeout rather than a wake-up.
    pub park_timeouts: u64,
    /// Times a sender slept on the back-pressure futex.
    pub sender_waits: u64,
    /// Records dropped because their length or kind broke a rule.
    pub dropped_bad: u64,
    /// Skip records (claims dropped without commit) discarded.
    pub skipped: u64,
    /// Dead owners' segments this receiver reclaimed at its path when it was created.
    pub reclaimed: u64,
}
