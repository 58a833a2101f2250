//! The calling side: outstanding calls, their retransmissions, deadlines and completion.

use super::msg::{self, ReplyHeader, RequestHeader, RpcHeader, Status};
use super::{Completion, End, Outcome, RemoteError, RpcConfig, RpcError};
use crate::addr::Address;
use crate::time::Instant;
use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

/// Calls to more destinations than this find a replying server by binary search.
const LINEAR_SEARCH_MAX: usize = 16;

/// A call's id, unique among the calls of one client incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    pub calls: u64,
    pub requests_sent: u64,
    pub requests_resent: u64,
    pub replies: u64,
    /// Replies to a call already finished (late, or a second copy).
    pub replies_late: u64,
    /// Replies for another incarnation of this client.
    pub replies_foreign: u64,
    /// Replies from a server the call did not go to.
    pub replies_stranger: u64,
    pub busy: u64,
    /// Probes answered `Resend`.
    pub resend_asked: u64,
    /// Calls sent again naming the server's incarnation after a server that guards against
    /// replays refused them for naming none.
    pub named_again: u64,
    pub completed: u64,
    pub timed_out: u64,
    pub cancelled: u64,
}

crate::counters_sum!(ClientCounters {
    calls,
    requests_sent,
    requests_resent,
    replies,
    replies_late,
    replies_foreign,
    replies_stranger,
    busy,
    resend_asked,
    named_again,
    completed,
    timed_out,
    cancelled,
});

#[derive(Clone, Copy)]
struct PerDest {
    answered: bool,
    /// The server incarnation known when the call started (0: none).
    expected: u64,
    /// Sent again naming the incarnation a server told in its refusal (see `take_reply`).
    renamed: bool,
}

struct Call {
    request_type: u16,
    payload: Vec<u8>,
    destinations: Vec<Address>,
    /// (destination, its index), sorted, for calls to many (empty otherwise).
    sorted: Vec<(Address, usize)>,
    /// Per destination (in `destinations`' order).
    per_dest: Vec<PerDest>,
    need: usize,
    deadline: Instant,
    next_retry: Instant,
    retry: Duration,
    /// Copies of the request queued and not yet taken by `poll_transmit`.
    queued: usize,
    replies: Vec<(Address, Result<Vec<u8>, RemoteError>)>,
}

impl Call {
    fn due(&self) -> Instant {
        self.next_retry.min(self.deadline)
    }

    fn index_of(&self, a: Address) -> Option<usize> {
        if self.sorted.is_empty() {
            self.destinations.iter().position(|&d| d == a)
        } else {
            let i = self.sorted.binary_search_by_key(&a, |&(d, _)| d).ok()?;
            Some(self.sorted[i].1)
        }
    }
}

pub struct Client {
    cfg: RpcConfig,
    incarnation: u64,
    next_id: u64,
    calls: BTreeMap<u64, Call>,
    /// (destination, call) of every outstanding call: a request tells its server which of
    /// this client's calls to it are finished (all below the lowest outstanding one), so a
    /// slow call to one server holds back no other server's memory.
    by_destination: BTreeSet<(Address, u64)>,
    /// (call, destination, a retransmission)
    transmit: VecDeque<(u64, Address, bool)>,
    /// One live entry per call at its due time; entries of finished calls are skipped.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    events: VecDeque<(CallId, Outcome)>,
    /// The incarnation of each server this client heard from (at most `SERVERS_KNOWN_MAX`).
    servers: HashMap<Address, u64>,
    pub counters: ClientCounters,
}

/// Servers whose incarnation a client remembers; past it, new ones are not remembered (their
/// requests expect none, as before the first answer).
const SERVERS_KNOWN_MAX: usize = 4096;

impl Client {
    /// A client whose calls are told apart from its predecessors' by `incarnation` (a server
    /// keys what it remembers by the client's address and incarnation).
    pub fn new(cfg: RpcConfig, incarnation: u64) -> Result<Client, RpcError> {
        cfg.validate()?;
        Ok(Client {
            cfg,
            incarnation,
            next_id: 1,
            calls: BTreeMap::new(),
            by_destination: BTreeSet::new(),
            transmit: VecDeque::new(),
            timers: BinaryHeap::new(),
            events: VecDeque::new(),
            servers: HashMap::new(),
            counters: ClientCounters::default(),
        })
    }

    pub fn config(&self) -> &RpcConfig {
        &self.cfg
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Calls outstanding.
    pub fn outstanding(&self) -> usize {
        self.calls.len()
    }

    /// Starts a call of `request_type` with `payload` to `destinations`, complete per
    /// `completion`, ending at `now + deadline` at the latest.
    pub fn call(
        &mut self,
        now: Instant,
        destinations: &[Address],
        request_type: u16,
        payload: &[u8],
        completion: Completion,
        deadline: Duration,
    ) -> Result<CallId, RpcError> {
        let n = destinations.len();
        if n == 0 {
            return Err(RpcError::NoDestinations);
        }
        if n > self.cfg.destinations_max {
            return Err(RpcError::TooManyDestinations {
                max: self.cfg.destinations_max,
            });
        }
        let mut sorted = Vec::new();
        if n <= LINEAR_SEARCH_MAX {
            for (i, a) in destinations.iter().enumerate() {
                if destinations[..i].contains(a) {
                    return Err(RpcError::DuplicateDestination(*a));
                }
            }
        } else {
            sorted = destinations.iter().copied().zip(0..).collect();
            sorted.sort_unstable();
            if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(RpcError::DuplicateDestination(w[0].0));
            }
        }
        let need = match completion {
            Completion::First => 1,
            Completion::All => n,
            Completion::Quorum(k) if (1..=n).contains(&k) => k,
            Completion::Quorum(k) => return Err(RpcError::BadQuorum { k, destinations: n }),
        };
        let max = self.cfg.payload_bytes_max();
        if payload.len() > max {
            return Err(RpcError::TooLong {
                len: payload.len(),
                max,
            });
        }
        if deadline.is_zero()
            || deadline > self.cfg.deadline_max
            || deadline < Duration::from_micros(1)
        {
            return Err(RpcError::BadDeadline);
        }
        if self.calls.len() >= self.cfg.calls_max {
            return Err(RpcError::TooManyCalls);
        }
        let id = self.next_id;
        self.next_id += 1;
        let call = Call {
            request_type,
            payload: payload.to_vec(),
            destinations: destinations.to_vec(),
            sorted,
            per_dest: destinations
                .iter()
                .map(|d| PerDest {
                    answered: false,
                    expected: self.servers.get(d).copied().unwrap_or(0),
                    renamed: false,
                })
                .collect(),
            need,
            deadline: now + deadline,
            next_retry: now + self.cfg.retry_initial,
            retry: self.cfg.retry_initial,
            queued: n,
            replies: Vec::new(),
        };
        for &d in destinations {
            self.transmit.push_back((id, d, false));
            self.by_destination.insert((d, id));
        }
        self.push_timer(call.due(), id);
        self.calls.insert(id, call);
        self.counters.calls += 1;
        Ok(CallId(id))
    }

    /// Takes the first copies of call `id` (one per destination, not yet sent) and gives one
    /// copy for all its destinations instead, for the caller to send to all of them at once
    /// (a transaction group's multicast); `acked_below` is the lowest of theirs. Copies sent
    /// again, to the destinations that have not answered, come from `poll_transmit` as for
    /// any call. Its length in `buf`, or `None` if the call is not outstanding, is out of
    /// time, or does not fit `buf`.
    pub fn encode_first(&mut self, id: CallId, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        let call = self.calls.get_mut(&id.0)?;
        let before = self.transmit.len();
        self.transmit.retain(|&(i, _, resent)| i != id.0 || resent);
        call.queued -= before - self.transmit.len();
        let call = &self.calls[&id.0];
        let left = call.deadline.saturating_since(now).as_micros();
        if left == 0 {
            return None;
        }
        let acked_below = call
            .destinations
            .iter()
            .map(|&d| self.acked_below(d))
            .min()
            .unwrap_or(id.0);
        let header = RpcHeader::Request(RequestHeader {
            request_type: call.request_type,
            deadline_us: left.min(u32::MAX as u128) as u32,
            incarnation: self.incarnation,
            call_id: id.0,
            acked_below,
            // One copy for several servers: none expected.
            server_incarnation: 0,
        });
        let n = msg::encode_vec(&header, &call.payload, buf)?;
        self.counters.requests_sent += 1;
        Some(n)
    }

    fn push_timer(&mut self, at: Instant, id: u64) {
        self.timers.push(Reverse((at, id)));
        // Entries of finished calls stay until they surface: rebuild when they pile up.
        if self.timers.len() > 2 * self.cfg.calls_max + 16 {
            self.timers = self
                .calls
                .iter()
                .map(|(&id, c)| Reverse((c.due(), id)))
                .collect();
        }
    }

    /// The next request to send: its destination and length in `buf`, which is made longer if
    /// a long request needs it.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(Address, usize)> {
        self.poll_transmit_call(now, buf).map(|(_, to, n)| (to, n))
    }

    /// As [`Client::poll_transmit`], naming the call the request is of.
    pub fn poll_transmit_call(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
    ) -> Option<(CallId, Address, usize)> {
        while let Some((id, to, resent)) = self.transmit.pop_front() {
            let acked_below = self.acked_below(to);
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            // What the client knew of the server when the call started: a server that
            // restarted since does not run a copy its predecessor may have run, even if the
            // client has heard from the new one since (on another call).
            let server_incarnation = call.index_of(to).map_or(0, |i| call.per_dest[i].expected);
            call.queued = call.queued.saturating_sub(1);
            let left = call.deadline.saturating_since(now).as_micros();
            if left == 0 {
                continue;
            }
            let header = RpcHeader::Request(RequestHeader {
                request_type: call.request_type,
                deadline_us: left.min(u32::MAX as u128) as u32,
                incarnation: self.incarnation,
                call_id: id,
                acked_below,
                server_incarnation,
            });
            let n = msg::encode_vec(&header, &call.payload, buf)?;
            self.counters.requests_sent += 1;
            if resent {
                self.counters.requests_resent += 1;
            }
            return Some((CallId(id), to, n));
        }
        None
    }

    /// Every call to `to` below this id is finished.
    fn acked_below(&self, to: Address) -> u64 {
        self.by_destination
            .range((to, 0)..=(to, u64::MAX))
            .next()
            .map_or(self.next_id, |&(_, id)| id)
    }

    /// A reply arrived from `from` (decoded by [`msg::decode`]).
    pub fn handle_reply(&mut self, from: Address, reply: &ReplyHeader, payload: &[u8]) {
        if self.take_reply(from, reply, payload) && reply.server_incarnation != 0 {
            // Incarnations grow: a late reply from a predecessor does not undo what a later
            // one taught. But a `Restarted` answer is the server as it is now, even if its
            // incarnation is smaller (a clock behind, or stepped back): taken as it is, or the
            // client would be refused for ever.
            let known = self.servers.get(&from).copied().unwrap_or(0);
            let take = reply.status == Status::Restarted || reply.server_incarnation > known;
            if take && (self.servers.len() < SERVERS_KNOWN_MAX || known != 0) {
                self.servers.insert(from, reply.server_incarnation);
            }
        }
    }

    /// The incarnation of the server at `a` this client last heard from, if any: its
    /// requests to `a` expect it.
    pub fn server_incarnation(&self, a: Address) -> Option<u64> {
        self.servers.get(&a).copied()
    }

    /// Forgets the incarnation of the server at `a`: calls started from now on name none (the
    /// client learned by other means, an oracle's notification, that a new process serves
    /// there, and that the old one is gone). Calls already started keep what they named.
    pub fn forget_server(&mut self, a: Address) {
        self.servers.remove(&a);
    }

    /// The answer to a call that server `called` handed on to `from` (`forward_request`):
    /// counted as `called`'s answer.
    pub fn handle_forwarded_reply(
        &mut self,
        _from: Address,
        called: Address,
        reply: &ReplyHeader,
        payload: &[u8],
    ) {
        // Its server incarnation is the answering server's, not the called one's.
        self.take_reply(called, reply, payload);
    }

    /// Takes a reply in; true if it was for a call of this client to `from` (outstanding, or
    /// answered already by it).
    fn take_reply(&mut self, from: Address, reply: &ReplyHeader, payload: &[u8]) -> bool {
        let ReplyHeader {
            status,
            incarnation,
            call_id,
            ..
        } = *reply;
        if incarnation != self.incarnation {
            self.counters.replies_foreign += 1;
            return false;
        }
        let Some(call) = self.calls.get_mut(&call_id) else {
            self.counters.replies_late += 1;
            return false;
        };
        let Some(i) = call.index_of(from) else {
            self.counters.replies_stranger += 1;
            return false;
        };
        if call.per_dest[i].answered {
            self.counters.replies_late += 1;
            return true;
        }
        let result = match status {
            Status::Busy => {
                // Not executed: the next retransmission asks again.
                self.counters.busy += 1;
                return true;
            }
            Status::Resend => {
                // A probe the server could not answer: the next retransmission carries the
                // whole request (the transport decides what a copy carries).
                self.counters.resend_asked += 1;
                return true;
            }
            Status::Ok => Ok(payload.to_vec()),
            Status::Restarted
                if call.per_dest[i].expected == 0
                    && reply.server_incarnation != 0
                    && !call.per_dest[i].renamed =>
            {
                // A server that guards against replays executes no request naming none of
                // its incarnations (so nobody executed this one): send it again, naming the
                // one it told. Once: a second refusal is the server restarting again.
                call.per_dest[i].expected = reply.server_incarnation;
                call.per_dest[i].renamed = true;
                call.queued += 1;
                self.transmit.push_back((call_id, from, true));
                self.counters.named_again += 1;
                return true;
            }
            Status::Restarted
                if call.per_dest[i].renamed
                    && reply.server_incarnation == call.per_dest[i].expected =>
            {
                // The refusal of another copy that named none (a retransmission, or one the
                // network duplicated): the copies naming it are on their way.
                return true;
            }
            Status::NoHandler => Err(RemoteError::NoHandler),
            Status::DeadlinePassed => Err(RemoteError::DeadlinePassed),
            Status::Failed => Err(RemoteError::Failed(
                String::from_utf8_lossy(payload).into_owned(),
            )),
            Status::ReplyTooLong => Err(RemoteError::ReplyTooLong),
            Status::Restarted => Err(RemoteError::Restarted),
        };
        self.counters.replies += 1;
        call.per_dest[i].answered = true;
        call.replies.push((from, result));
        if call.replies.len() >= call.need {
            self.finish(call_id, End::Complete);
        }
        true
    }

    /// Drops finished calls' timers from the top of the heap, so that [`Client::poll_timeout`]
    /// names a live one (a caller sleeping until a dead timer wakes for nothing).
    fn prune_timers(&mut self) {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if self.calls.get(&id).is_some_and(|c| c.due() == t) {
                return;
            }
            self.timers.pop();
        }
    }

    fn finish(&mut self, id: u64, end: End) -> Option<Outcome> {
        let call = self.calls.remove(&id)?;
        for &d in &call.destinations {
            self.by_destination.remove(&(d, id));
        }
        self.prune_timers();
        match end {
            End::Complete => self.counters.completed += 1,
            End::DeadlinePassed => self.counters.timed_out += 1,
            End::Cancelled => self.counters.cancelled += 1,
        }
        let missing = call
            .destinations
            .iter()
            .zip(&call.per_dest)
            .filter(|(_, p)| !p.answered)
            .map(|(&d, _)| d)
            .collect();
        let outcome = Outcome {
            replies: call.replies,
            missing,
            end,
        };
        if end != End::Cancelled {
            self.events.push_back((CallId(id), outcome.clone()));
        }
        Some(outcome)
    }

    /// Ends call `id` now; returns what it had.
    pub fn cancel(&mut self, id: CallId) -> Result<Outcome, RpcError> {
        self.finish(id.0, End::Cancelled).ok_or(RpcError::Unknown)
    }

    /// When call `id` ends at the latest, if it is outstanding.
    pub fn deadline(&self, id: CallId) -> Option<Instant> {
        self.calls.get(&id.0).map(|c| c.deadline)
    }

    /// Whether call `id` is still outstanding.
    pub fn is_outstanding(&self, id: CallId) -> bool {
        self.calls.contains_key(&id.0)
    }

    /// A finished call (complete or out of time; not the cancelled ones).
    pub fn poll_event(&mut self) -> Option<(CallId, Outcome)> {
        self.events.pop_front()
    }

    /// When [`Client::handle_timeout`] has work (perhaps none: finished calls' timers).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Retransmits requests not answered in time; ends calls whose deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            if call.due() != t {
                // Superseded (the call's timer moved); its live entry is elsewhere.
                continue;
            }
            if call.deadline <= now {
                self.finish(id, End::DeadlinePassed);
                continue;
            }
            if call.queued == 0 {
                for (d, p) in call.destinations.iter().zip(&call.per_dest) {
                    if !p.answered {
                        self.transmit.push_back((id, *d, true));
                        call.queued += 1;
                    }
                }
            }
            call.retry = (call.retry * 2).min(self.cfg.retry_max);
            call.next_retry = now + call.retry;
            let due = call.due();
            self.push_timer(due, id);
        }
    }
}
