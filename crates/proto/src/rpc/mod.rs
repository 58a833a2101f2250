//! Remote procedure calls (paper 001 §2.3 "Remote Procedure Calls"): request and reply as
//! datagrams between ports, with the call's own retransmission and at-most-once execution.
//!
//! - [`Client`] makes calls: to one server, or the same request to several at once (multicast
//!   RPC), complete on the first reply, on k replies, or on all ([`Completion`]). Every call
//!   has a deadline; it ends with the replies that came and the servers that did not answer
//!   ([`Outcome`]). Requests not answered are sent again with exponential backoff until the
//!   deadline.
//! - [`Server`] decides, for each request that arrives, whether to execute it, answer it from
//!   its reply cache (a duplicate of a call already executed), or drop it (a duplicate of one
//!   still running, or of one the client already finished). A request whose deadline passed
//!   is answered [`Status::DeadlinePassed`] and not executed. A server may hand a call on to
//!   another ([`Server::forward`], paper 003's `ForwardRequest`), which answers the caller
//!   in the called server's name; every copy of the request is handed on too.
//!
//! **At most once.** The server remembers every call it executed, with its reply, until no copy
//! of the request can arrive any more: until the request's deadline plus
//! [`RpcConfig::packet_lifetime`] (the longest a datagram may wander in the network). A copy
//! arriving after that would be out of time and is not executed anyway. The memory is bounded
//! ([`RpcConfig::replies_max`] calls, [`RpcConfig::reply_bytes_max`] bytes of replies,
//! [`RpcConfig::clients_max`] clients):
//! when it is full a new call is answered [`Status::Busy`] and not executed (the client tries
//! again), never by forgetting a call still in its window. Clients say in every request which
//! of their calls are finished (`acked_below`), so the server forgets those early.
//!
//! A copy sent on purpose after the window (a replay, which a cluster key does not stop: the
//! packet is genuine) would be executed again; a server with [`Server::guard_replays`] (what
//! a keyed cluster runs) keeps, for longer and in less room, which calls it executed, and
//! executes no request of a client that does not name its incarnation.
//!
//! Both sides are sans-IO: `handle_*` for input, `poll_transmit` / `poll_event` /
//! `poll_timeout` for output, time passed in.

mod client;
pub mod msg;
mod server;
#[cfg(test)]
mod tests;

pub use client::{CallId, Client, ClientCounters};
pub use msg::{ReplyHeader, RequestHeader, RpcHeader, RpcWireError, Status, RPC_HEADER_BYTES};
pub use server::{Server, ServerCounters, Token, Verdict};

use crate::addr::{Address, ADDRESS_BYTES};
use core::time::Duration;

/// Limits and timers of an RPC endpoint (both sides).
#[derive(Clone, Copy, Debug)]
pub struct RpcConfig {
    /// Calls a client has outstanding at once.
    pub calls_max: usize,
    /// Servers one call goes to.
    pub destinations_max: usize,
    /// Longest deadline a call may have (at most 71 minutes: the wire carries microseconds
    /// in 32 bits). A server remembers a call until its deadline plus `packet_lifetime`,
    /// whatever its own `deadline_max`.
    pub deadline_max: Duration,
    /// First retransmission of an unanswered request after this long; then twice as long
    /// each time, up to `retry_max`.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Longest message (header included) the transport carries in one datagram.
    pub message_bytes_max: usize,
    /// Longest request or reply (header included) when longer ones ride on long messages
    /// (paper 001's LDG); 0: none longer than `message_bytes_max`.
    pub long_bytes_max: usize,
    /// Bytes of replies (and of requests kept to hand on) a server remembers at once; a new
    /// call is answered `Busy` while they reach it. Calls running when it is reached may add
    /// one reply each beyond it.
    pub reply_bytes_max: usize,
    /// Calls a server remembers at once (running, or answered and still in their window); with
    /// their replies at most `replies_max × message_bytes_max` bytes.
    pub replies_max: usize,
    /// Clients a server remembers at once. A client whose calls other servers hand on to
    /// this one (`forward_request`) counts once more for each of them.
    pub clients_max: usize,
    /// The longest a datagram may be delayed in the network (a server remembers a call this
    /// long past its deadline).
    pub packet_lifetime: Duration,
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            calls_max: 1024,
            destinations_max: 64,
            deadline_max: Duration::from_secs(300),
            retry_initial: Duration::from_millis(20),
            retry_max: Duration::from_secs(1),
            message_bytes_max: 1400,
            long_bytes_max: 0,
            reply_bytes_max: 64 << 20,
            replies_max: 4096,
            clients_max: 1024,
            packet_lifetime: Duration::from_secs(2),
        }
    }
}

impl RpcConfig {
    /// Checks the relations between the limits.
    pub fn validate(&self) -> Result<(), RpcError> {
        let bad = |what: &'static str| Err(RpcError::BadConfig(what));
        if self.calls_max == 0 || self.calls_max > CALLS_MAX {
            return bad("calls_max must be 1..=65536");
        }
        if self.destinations_max == 0 || self.destinations_max > DESTINATIONS_MAX {
            return bad("destinations_max must be 1..=1024");
        }
        if self.message_bytes_max <= RPC_HEADER_BYTES + ADDRESS_BYTES {
            return bad("message_bytes_max must exceed the 48-byte headers");
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            return bad("retry_initial must be positive and at most retry_max");
        }
        if self.deadline_max.is_zero() || self.deadline_max.as_micros() > u32::MAX as u128 {
            return bad("deadline_max must be positive and below 71 minutes");
        }
        if self.replies_max == 0 || self.replies_max > REPLIES_MAX || self.clients_max == 0 {
            return bad("replies_max must be 1..=1048576 and clients_max positive");
        }
        if self.message_bytes_max > MESSAGE_BYTES_MAX {
            return bad("message_bytes_max must be at most 65507 (a UDP datagram)");
        }
        if self.long_bytes_max != 0
            && (self.long_bytes_max < self.message_bytes_max
                || self.long_bytes_max > LONG_BYTES_MAX)
        {
            return bad("long_bytes_max must be 0, or message_bytes_max..=64 MiB");
        }
        if self.reply_bytes_max == 0 {
            return bad("reply_bytes_max must be positive");
        }
        Ok(())
    }

    /// Longest payload a request or reply carries (on long messages when `long_bytes_max` is
    /// set): what fits a message after the header and the address a call handed on, or its
    /// answer, carries (`forward_request`).
    pub fn payload_bytes_max(&self) -> usize {
        self.message_bytes_max.max(self.long_bytes_max) - RPC_HEADER_BYTES - ADDRESS_BYTES
    }
}

/// Hard bound on [`RpcConfig::calls_max`].
pub const CALLS_MAX: usize = 1 << 16;
/// Hard bound on [`RpcConfig::replies_max`].
pub const REPLIES_MAX: usize = 1 << 20;
/// Hard bound on [`RpcConfig::long_bytes_max`].
pub const LONG_BYTES_MAX: usize = 64 << 20;
/// Hard bound on [`RpcConfig::message_bytes_max`].
pub const MESSAGE_BYTES_MAX: usize = 65_507;
/// Hard bound on [`RpcConfig::destinations_max`].
pub const DESTINATIONS_MAX: usize = 1024;

/// When a call to several servers is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The first answer.
    First,
    /// `k` answers (a quorum).
    Quorum(usize),
    /// Every server's answer.
    All,
}

/// A server's answer that is not a result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The server has no handler for the request type (not executed).
    #[error("no handler for the request type")]
    NoHandler,
    /// The deadline passed before the request could run (not executed).
    #[error("deadline passed before it could run")]
    DeadlinePassed,
    /// The handler failed, with its message.
    #[error("handler failed: {0}")]
    Failed(String),
    /// Executed, but the result was longer than a reply may be.
    #[error("the result is longer than a reply may be")]
    ReplyTooLong,
    /// The server restarted since this client last heard from it: this incarnation did not
    /// execute the call; its predecessor may have.
    #[error(
        "the server restarted since the last answer: not executed by it, perhaps by its predecessor"
    )]
    Restarted,
}

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The answers, in the order they came.
    pub replies: Vec<(Address, Result<Vec<u8>, RemoteError>)>,
    /// The servers that had not answered when the call ended.
    pub missing: Vec<Address>,
    /// Why it ended.
    pub end: End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The completion rule was met.
    Complete,
    /// The deadline passed first.
    DeadlinePassed,
    /// The caller cancelled it.
    Cancelled,
}

/// Why a call or a reply was refused locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    #[error("bad rpc configuration: {0}")]
    BadConfig(&'static str),
    /// `calls_max` calls are outstanding.
    #[error("too many calls outstanding")]
    TooManyCalls,
    #[error("a call needs at least one destination")]
    NoDestinations,
    #[error("a call goes to at most {max} destinations")]
    TooManyDestinations { max: usize },
    /// A destination is listed twice.
    #[error("destination {0} listed twice")]
    DuplicateDestination(Address),
    /// A quorum of 0, or larger than the destinations.
    #[error("quorum {k} must be 1..={destinations}")]
    BadQuorum { k: usize, destinations: usize },
    /// The payload does not fit a message.
    #[error("payload of {len} bytes exceeds the {max}-byte bound")]
    TooLong { len: usize, max: usize },
    /// The deadline is zero or beyond `deadline_max`.
    #[error("deadline must be positive and at most deadline_max")]
    BadDeadline,
    /// No call (or request) with that id is outstanding.
    #[error("no such call outstanding")]
    Unknown,
}
