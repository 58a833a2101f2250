//! Long messages (paper 001 "LDG"): messages far longer than a datagram, cut into fragments
//! of a configurable size, sent within a bounded window, acknowledged selectively, and
//! reassembled with bounded memory.
//!
//! - [`Sender`] holds the messages being sent. Each goes as a *transfer*: its fragments leave
//!   while fewer than the window are unacknowledged. The window is the smaller of the
//!   receiver's and a congestion window that grows by one fragment per round trip and halves
//!   on a loss. A lost fragment is sent again, not the message: on a timeout (RTO estimated
//!   from the acknowledgements), or at once when three later fragments were acknowledged.
//!   A transfer ends when the receiver acknowledges the last fragment, or fails at its
//!   deadline.
//! - [`Receiver`] reassembles. It admits a transfer when its whole length fits the memory
//!   left (`reassembly_bytes_max`, reassembling and delivered-not-taken together). Until then
//!   it answers with a window of zero, and the sender probes. It acknowledges every
//!   `ack_every` fragments, or after `ack_delay`, at once on a gap or at the end, and frees a
//!   reassembly that gets no fragment for `reassembly_timeout`. Transfers it finished are
//!   remembered until their sender's deadline plus `packet_lifetime` (the sender sends nothing
//!   after its deadline), so late copies of their fragments are acknowledged again and never
//!   start the message over: a message is delivered at most once. When `completed_max` are
//!   remembered, new transfers wait (window 0) rather than any being forgotten early.
//!
//! Both are sans-IO (`handle_*`, `poll_transmit`, `poll_timeout`, time passed in).

pub mod msg;
mod recv;
mod send;
#[cfg(test)]
mod tests;

pub use recv::{Receiver, ReceiverCounters, ACK_BYTES_MAX};
pub use send::{Sender, SenderCounters, TransferId};

use core::time::Duration;

#[derive(Clone, Copy, Debug)]
pub struct LdgConfig {
    /// Bytes of message per fragment (1..=65000); the paper used 8000.
    pub fragment_bytes: usize,
    /// Longest message sent or taken.
    pub message_bytes_max: usize,
    /// Most fragments of one transfer unacknowledged at once.
    pub window_fragments_max: usize,
    /// Outgoing transfers at once.
    pub transfers_max: usize,
    /// Bytes of outgoing messages held at once.
    pub send_bytes_max: usize,
    /// Incoming transfers reassembling at once.
    pub reassemblies_max: usize,
    /// Bytes of incoming messages held at once (reassembling, or delivered and not taken).
    pub reassembly_bytes_max: usize,
    /// An incomplete reassembly that gets no fragment for this long is freed.
    pub reassembly_timeout: Duration,
    /// Longest deadline a transfer may have.
    pub deadline_max: Duration,
    /// The longest a datagram may be delayed in the network (a finished transfer is
    /// remembered this long past its sender's deadline).
    pub packet_lifetime: Duration,
    /// Transfers remembered as finished, at most.
    pub completed_max: usize,
    pub rto_initial: Duration,
    pub rto_min: Duration,
    pub rto_max: Duration,
    /// Acknowledge after this many fragments...
    pub ack_every: u32,
    /// ...or this long after the first unacknowledged one.
    pub ack_delay: Duration,
    /// Bytes of spent message buffers kept for reuse (at most [`POOL_BUFFERS_MAX`] of them;
    /// 0 keeps none). A reassembly written into memory already touched takes no page faults.
    pub pool_bytes_max: usize,
}

impl Default for LdgConfig {
    fn default() -> Self {
        LdgConfig {
            fragment_bytes: 8000,
            message_bytes_max: 64 << 20,
            window_fragments_max: 256,
            transfers_max: 16,
            send_bytes_max: 256 << 20,
            reassemblies_max: 64,
            reassembly_bytes_max: 256 << 20,
            reassembly_timeout: Duration::from_secs(2),
            deadline_max: Duration::from_secs(300),
            packet_lifetime: Duration::from_secs(2),
            // About 100 bytes each: finished transfers are remembered for their sender's
            // deadline, so this bounds transfers per deadline (see ARCHITECTURE).
            completed_max: 65_536,
            rto_initial: Duration::from_millis(20),
            // A spurious timeout collapses the window; on a busy two-processor host an
            // acknowledgement can take milliseconds without any loss.
            rto_min: Duration::from_millis(10),
            rto_max: Duration::from_secs(1),
            // Every second fragment, as TCP does: a sender whose window is small (after a loss,
            // or at the start) waits for no delayed acknowledgement.
            ack_every: 2,
            ack_delay: Duration::from_micros(200),
            pool_bytes_max: 64 << 20,
        }
    }
}

/// Hard bound on [`LdgConfig::message_bytes_max`].
pub const MESSAGE_BYTES_MAX: usize = 1 << 30;

impl LdgConfig {
    pub fn validate(&self) -> Result<(), LdgError> {
        let bad = |w| Err(LdgError::BadConfig(w));
        if self.fragment_bytes == 0 || self.fragment_bytes > msg::FRAGMENT_BYTES_MAX {
            return bad("fragment_bytes must be 1..=65000");
        }
        if self.message_bytes_max == 0 || self.message_bytes_max > MESSAGE_BYTES_MAX {
            return bad("message_bytes_max must be 1..=1 GiB");
        }
        if (self.message_bytes_max as u64).div_ceil(self.fragment_bytes as u64) > msg::FRAGMENTS_MAX
        {
            return bad("a longest message must be at most 2^24 fragments");
        }
        if self.window_fragments_max == 0 || self.window_fragments_max > 1 << 16 {
            return bad("window_fragments_max must be 1..=65536");
        }
        if self.transfers_max == 0 || self.reassemblies_max == 0 || self.completed_max == 0 {
            return bad("transfers_max, reassemblies_max and completed_max must be positive");
        }
        if self.send_bytes_max < self.message_bytes_max
            || self.reassembly_bytes_max < self.message_bytes_max
        {
            return bad("send_bytes_max and reassembly_bytes_max must hold a longest message");
        }
        if self.rto_min.is_zero()
            || self.rto_min > self.rto_initial
            || self.rto_initial > self.rto_max
        {
            return bad("rto_min <= rto_initial <= rto_max, rto_min positive");
        }
        if self.ack_every == 0 {
            return bad("ack_every must be positive");
        }
        if self.deadline_max.is_zero() || self.deadline_max.as_millis() > u32::MAX as u128 {
            return bad("deadline_max must be positive and below 49 days");
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LdgError {
    #[error("bad ldg configuration: {0}")]
    BadConfig(&'static str),
    /// The message is longer than `message_bytes_max`.
    #[error("message of {len} bytes exceeds the {max}-byte bound")]
    TooLong { len: usize, max: usize },
    /// `transfers_max` transfers, or `send_bytes_max` bytes, are outstanding.
    #[error("too many long messages outstanding (back-pressure)")]
    Full,
    /// The receiver refused the message as too long for it.
    #[error("the receiver refused the message as too long")]
    RefusedTooLong,
    /// The deadline passed before the receiver had every fragment.
    #[error("the deadline passed before every fragment was acknowledged")]
    DeadlinePassed,
    /// A deadline of zero, or beyond `deadline_max`.
    #[error("deadline must be positive and at most deadline_max")]
    BadDeadline,
    /// No such transfer.
    #[error("no such transfer")]
    Unknown,
}

/// Spent message buffers kept for reuse, at most.
pub const POOL_BUFFERS_MAX: usize = 8;

/// Spent message buffers kept for reuse: at most [`POOL_BUFFERS_MAX`] of them and
/// `bytes_max` bytes (of capacity) together.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
    bytes_max: usize,
}

impl Pool {
    pub(crate) fn new(bytes_max: usize) -> Pool {
        Pool {
            bufs: Vec::new(),
            bytes: 0,
            bytes_max,
        }
    }

    /// A buffer of `len` bytes: the smallest kept one that holds it (its bytes are whatever
    /// it held; the caller overwrites them all), or a new one.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        let best = self
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        let Some(i) = best else {
            return vec![0; len];
        };
        let mut b = self.bufs.swap_remove(i);
        self.bytes -= b.capacity();
        if b.len() >= len {
            b.truncate(len);
        } else {
            b.resize(len, 0);
        }
        b
    }

    /// Keeps `b` for reuse if there is room (else frees it, or frees a smaller one for it).
    pub(crate) fn give(&mut self, b: Vec<u8>) {
        let cap = b.capacity();
        if cap == 0 || cap > self.bytes_max {
            return;
        }
        // Make room by freeing smaller buffers: the large ones are the costly ones to fault in.
        while self.bufs.len() >= POOL_BUFFERS_MAX || self.bytes + cap > self.bytes_max {
            let Some((i, small)) = self
                .bufs
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, b)| (i, b.capacity()))
            else {
                break;
            };
            if small >= cap {
                return;
            }
            self.bufs.swap_remove(i);
            self.bytes -= small;
        }
        if self.bufs.len() < POOL_BUFFERS_MAX && self.bytes + cap <= self.bytes_max {
            self.bytes += cap;
            self.bufs.push(b);
        }
    }

    /// Bytes kept.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A set of fragment indices.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    pub(crate) fn new(n: u32) -> Bitset {
        Bitset {
            words: vec![0; (n as usize).div_ceil(64)],
        }
    }
    pub(crate) fn get(&self, i: u32) -> bool {
        self.words
            .get(i as usize / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
    /// Sets bit `i`; true if it was clear.
    pub(crate) fn set(&mut self, i: u32) -> bool {
        let w = &mut self.words[i as usize / 64];
        let m = 1 << (i % 64);
        let was = *w & m != 0;
        *w |= m;
        !was
    }
}
