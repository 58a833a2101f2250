//! The serving side: which requests to execute, the reply cache that makes execution
//! at-most-once, and its bounds.

use super::msg::{self, ReplyHeader, RequestHeader, RpcHeader, Status};
use super::RpcConfig;
use crate::addr::Address;
use crate::time::Instant;
use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

/// One call at one server: the client, its incarnation and the call's id, and for a call
/// another server handed on to this one (`forward_request`), the server the client called.
/// A multicast call to both F and X, where F hands its share on to X, is two calls at X.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    pub client: Address,
    pub incarnation: u64,
    pub call_id: u64,
    pub called: Option<Address>,
}

/// What to do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A new call: run it, then [`Server::reply`] (with [`Status::DeadlinePassed`] instead if
    /// `deadline` has passed when it would start).
    Execute {
        token: Token,
        request_type: u16,
        deadline: Instant,
    },
    /// A copy of a call already answered: the reply is sent again.
    Answered,
    /// A copy of a call still running, or of one its client finished: nothing to do.
    Dropped,
    /// No room to remember another call or client: answered [`Status::Busy`], not executed.
    Busy,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerCounters {
    pub requests: u64,
    /// Calls run here (not those handed on).
    pub executed: u64,
    /// Copies answered from the reply cache.
    pub duplicates_answered: u64,
    /// Copies of a call still running.
    pub duplicates_running: u64,
    /// Calls handed on to another server.
    pub forwarded: u64,
    /// Copies of a handed-on call, handed on again.
    pub duplicates_forwarded: u64,
    /// Copies of calls their client already finished.
    pub duplicates_finished: u64,
    /// Probes for calls not known here (answered `Resend`).
    pub probes_unknown: u64,
    /// Requests for another incarnation of this server (answered `Restarted`, not executed).
    pub other_incarnation: u64,
    pub busy: u64,
    pub deadline_passed: u64,
    pub replies_sent: u64,
    /// Replies for calls no longer remembered (their window closed while they ran).
    pub replies_unknown: u64,
    pub forgotten: u64,
    /// With the replay guard: requests naming no incarnation of this server (answered
    /// `Restarted`, not executed; the client sends them again naming it).
    pub unnamed: u64,
    /// With the replay guard: copies of calls executed and forgotten, and requests of a
    /// client older than one heard from at the same address (dropped, not executed).
    pub replays_refused: u64,
    /// With the replay guard: what was kept of clients, dropped to make room (a copy of
    /// one of their calls could run again).
    pub retired_evicted: u64,
}

crate::counters_sum!(ServerCounters {
    requests,
    executed,
    duplicates_answered,
    duplicates_running,
    forwarded,
    duplicates_forwarded,
    duplicates_finished,
    probes_unknown,
    other_incarnation,
    busy,
    deadline_passed,
    replies_sent,
    replies_unknown,
    forgotten,
    unnamed,
    replays_refused,
    retired_evicted,
});

struct Entry {
    reply: Option<(Status, Vec<u8>)>,
    expires: Instant,
    /// Handed on to another server (`forward_request`): to whom, and what to hand on again
    /// when a copy of the request comes.
    forwarded: Option<Forwarded>,
}

impl Entry {
    /// Bytes it holds (counted against `reply_bytes_max`).
    fn bytes(&self) -> usize {
        self.reply.as_ref().map_or(0, |r| r.1.len())
            + self.forwarded.as_ref().map_or(0, |f| f.payload.len())
    }
}

struct Forwarded {
    to: Address,
    /// The incarnation of `to` the forwarder knew when it handed the call on: every copy names
    /// it, so a successor of `to` does not run a copy its predecessor may have run.
    to_incarnation: u64,
    request_type: u16,
    deadline_us: u32,
    payload: Vec<u8>,
}

/// A client's calls at this server: its address and incarnation, and for calls handed on to
/// us, the server it called. The client's `acked_below` is per destination, so each server a
/// client called has its own floor.
type ClientKey = (Address, u64, Option<Address>);

impl Token {
    fn key(&self) -> ClientKey {
        (self.client, self.incarnation, self.called)
    }
}

struct ClientRecord {
    /// Every call below this id is finished at the client.
    floor: u64,
    expires: Instant,
    calls: BTreeSet<u64>,
    /// With the replay guard: the calls executed at or above `floor` (kept when their
    /// replies are forgotten).
    executed: BTreeSet<u64>,
}

/// With the replay guard, what a server keeps of a client it forgot: enough to refuse
/// copies of the calls it executed for it.
struct Retired {
    /// Its place in `Guard::order`.
    generation: u64,
    floor: u64,
    executed: BTreeSet<u64>,
}

/// The replay guard (see [`Server::guard_replays`]).
#[derive(Default)]
struct Guard {
    retired: HashMap<ClientKey, Retired>,
    /// Retired clients, oldest first, by generation (entries of clients that came back are
    /// skipped when they surface).
    order: VecDeque<(u64, ClientKey)>,
    generation: u64,
    /// The newest client incarnation heard from at each address, and the order they came in.
    newest: HashMap<Address, u64>,
    newest_order: VecDeque<Address>,
}

/// Clients a guarded server keeps after forgetting their replies, per client it remembers
/// in full (`RpcConfig::clients_max`); the same bound holds for the addresses whose newest
/// client incarnation it keeps.
pub const RETIRED_PER_CLIENT: usize = 64;

enum Out {
    /// The reply remembered for this call.
    Cached(Token),
    /// A reply not remembered (Busy).
    Bare(Token, Status),
    /// The call, handed on to another server.
    Forward(Token),
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expiry {
    Call(Token),
    Client(ClientKey),
}

pub struct Server {
    cfg: RpcConfig,
    entries: HashMap<Token, Entry>,
    clients: HashMap<ClientKey, ClientRecord>,
    transmit: VecDeque<Out>,
    expiries: BinaryHeap<Reverse<(Instant, Expiry)>>,
    /// Bytes the entries hold.
    bytes: usize,
    /// This server's incarnation (0: none, requests are not checked).
    incarnation: u64,
    /// Set by [`Server::guard_replays`].
    guard: Option<Guard>,
    pub counters: ServerCounters,
}

impl Server {
    pub fn new(cfg: RpcConfig) -> Result<Server, super::RpcError> {
        cfg.validate()?;
        Ok(Server {
            cfg,
            entries: HashMap::new(),
            clients: HashMap::new(),
            transmit: VecDeque::new(),
            expiries: BinaryHeap::new(),
            bytes: 0,
            incarnation: 0,
            guard: None,
            counters: ServerCounters::default(),
        })
    }

    /// A server of incarnation `incarnation` (non-zero, larger for each restart: a port's
    /// incarnation). Its replies carry it, clients' requests name the incarnation they last
    /// heard from, and a request naming another is answered [`Status::Restarted`] and not
    /// executed: a copy of a call the predecessor may have executed does not run again.
    pub fn with_incarnation(cfg: RpcConfig, incarnation: u64) -> Result<Server, super::RpcError> {
        let mut s = Server::new(cfg)?;
        s.incarnation = incarnation;
        Ok(s)
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Refuses replayed requests, for a cluster whose packets are authenticated (where every
    /// request that arrives was sent by a client once, but may be a copy captured and sent
    /// again at any time). Without it, a server forgets a call a packet lifetime after its
    /// deadline and would execute a copy arriving later; and a server executes requests that
    /// name no incarnation of it, so a restarted one would run a copy of a client's first
    /// call to its predecessor. With it:
    /// - a request naming no incarnation of this server is answered `Restarted` (carrying
    ///   ours) and not executed; the client sends it again naming ours (never executed
    ///   anywhere, so that is safe). A call handed on by another server is exempt (the
    ///   forwarder may not know us; see docs/ARCHITECTURE.md);
    /// - what the server executed for a client is kept after its replies are forgotten (its
    ///   floor and the calls above it), for up to `RETIRED_PER_CLIENT * clients_max` clients,
    ///   so a copy arriving later is dropped;
    /// - a request from a client incarnation older than one heard from at the same address
    ///   (a predecessor of the client, gone) is dropped.
    ///
    /// Needs a non-zero incarnation ([`Server::with_incarnation`]).
    pub fn guard_replays(&mut self) {
        if self.incarnation != 0 && self.guard.is_none() {
            self.guard = Some(Guard::default());
        }
    }

    /// Calls remembered (running or answered).
    pub fn remembered(&self) -> usize {
        self.entries.len()
    }

    /// Clients remembered.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Bytes of replies (and requests kept to hand on) remembered.
    pub fn bytes_held(&self) -> usize {
        self.bytes
    }

    /// A request arrived from `from` (decoded by [`msg::decode`]).
    pub fn handle_request(&mut self, now: Instant, from: Address, r: &RequestHeader) -> Verdict {
        self.take_request(now, from, r, None, false)
    }

    /// A probe arrived from `from`: a copy of a request without its payload (its payload came
    /// as a long message). Handled as a copy of the call if it is known here; otherwise it is
    /// answered [`Status::Resend`] and nothing is executed ([`Verdict::Dropped`]).
    pub fn handle_probe(&mut self, now: Instant, from: Address, r: &RequestHeader) -> Verdict {
        self.take_request(now, from, r, None, true)
    }

    fn forget(&mut self, token: &Token) -> bool {
        match self.entries.remove(token) {
            Some(e) => {
                self.bytes -= e.bytes();
                true
            }
            None => false,
        }
    }

    /// A request server `via` handed on to us, from `client`: as [`Server::handle_request`],
    /// and the answer goes to the client naming `via`.
    pub fn handle_forwarded(
        &mut self,
        now: Instant,
        via: Address,
        client: Address,
        r: &RequestHeader,
    ) -> Verdict {
        self.take_request(now, client, r, Some(via), false)
    }

    fn take_request(
        &mut self,
        now: Instant,
        from: Address,
        r: &RequestHeader,
        called: Option<Address>,
        probe: bool,
    ) -> Verdict {
        let RequestHeader {
            request_type,
            deadline_us,
            incarnation,
            call_id,
            acked_below,
            server_incarnation,
        } = *r;
        self.counters.requests += 1;
        // What is out of its window goes first: nothing below may then remove the record this
        // request uses.
        self.expire(now);
        let token = Token {
            client: from,
            incarnation,
            call_id,
            called,
        };
        if server_incarnation != 0
            && self.incarnation != 0
            && server_incarnation != self.incarnation
        {
            // A copy of a call to our predecessor, which may have executed it.
            self.counters.other_incarnation += 1;
            self.queue(Out::Bare(token, Status::Restarted));
            return Verdict::Dropped;
        }
        let key = token.key();
        if self.guard.is_some() && server_incarnation == 0 && called.is_none() && !probe {
            // Nobody executes a request naming none of our incarnations, so this one was
            // never executed anywhere: the client may send it again naming ours.
            self.counters.unnamed += 1;
            self.queue(Out::Bare(token, Status::Restarted));
            return Verdict::Dropped;
        }
        let mut revived = None;
        if let Some(g) = self.guard.as_mut() {
            if !g.admit_client(from, incarnation, self.cfg.clients_max * RETIRED_PER_CLIENT) {
                self.counters.replays_refused += 1;
                return Verdict::Dropped;
            }
            if !self.clients.contains_key(&key) {
                if let Some(r) = g.retired.get(&key) {
                    if call_id < r.floor || r.executed.contains(&call_id) {
                        self.counters.replays_refused += 1;
                        return Verdict::Dropped;
                    }
                    revived = Some((r.floor, r.executed.clone()));
                }
            }
        }
        if !self.clients.contains_key(&key) {
            if self.clients.len() >= self.cfg.clients_max
                || self.entries.len() >= self.cfg.replies_max
            {
                // A new client whose call could not be remembered takes no place either.
                return self.busy(token);
            }
            // Forgotten after a packet lifetime unless a call it makes keeps it longer.
            let expires = now + self.cfg.packet_lifetime;
            let (floor, executed) = revived.unwrap_or_default();
            if let Some(g) = self.guard.as_mut() {
                g.retired.remove(&key);
            }
            self.clients.insert(
                key,
                ClientRecord {
                    floor,
                    expires,
                    calls: BTreeSet::new(),
                    executed,
                },
            );
            self.expiries.push(Reverse((expires, Expiry::Client(key))));
        }
        let record = self.clients.get_mut(&key).expect("present");
        if acked_below > record.floor {
            record.floor = acked_below;
            let keep = record.calls.split_off(&acked_below);
            let done = std::mem::replace(&mut record.calls, keep);
            record.executed = record.executed.split_off(&acked_below);
            for call_id in done {
                let t = Token { call_id, ..token };
                if self.forget(&t) {
                    self.counters.forgotten += 1;
                }
            }
            self.prune_expiries();
        }
        let record = self.clients.get(&key).expect("present");
        if call_id < record.floor {
            self.counters.duplicates_finished += 1;
            return Verdict::Dropped;
        }
        if let Some(e) = self.entries.get_mut(&token) {
            return if e.reply.is_some() {
                self.counters.duplicates_answered += 1;
                self.queue(Out::Cached(token));
                Verdict::Answered
            } else if let Some(f) = e.forwarded.as_mut() {
                // Handed on: hand the copy on too (the other server answers it, once).
                f.deadline_us = deadline_us;
                self.counters.duplicates_forwarded += 1;
                self.queue(Out::Forward(token));
                Verdict::Dropped
            } else {
                self.counters.duplicates_running += 1;
                Verdict::Dropped
            };
        }
        if self.guard.is_some() && record.executed.contains(&call_id) {
            // Executed here, its reply forgotten since: a copy sent again.
            self.counters.replays_refused += 1;
            return Verdict::Dropped;
        }
        if probe {
            // The payload is not here: the client sends the whole request again.
            self.counters.probes_unknown += 1;
            self.queue(Out::Bare(token, Status::Resend));
            return Verdict::Dropped;
        }
        if self.entries.len() >= self.cfg.replies_max || self.bytes >= self.cfg.reply_bytes_max {
            return self.busy(token);
        }
        let deadline = now + Duration::from_micros(deadline_us as u64);
        // No copy of this request can arrive after this (see the module's "At most once"). A
        // copy handed on to us took two hops, each up to a packet lifetime: the client sent it
        // before the deadline, the forwarder handed it on within a lifetime of that, and it
        // took up to another to come here.
        let hops = if called.is_some() { 2 } else { 1 };
        let expires = deadline + self.cfg.packet_lifetime * hops;
        self.entries.insert(
            token,
            Entry {
                reply: None,
                expires,
                forwarded: None,
            },
        );
        let record = self.clients.get_mut(&key).expect("present");
        record.calls.insert(call_id);
        if self.guard.is_some() {
            record.executed.insert(call_id);
        }
        self.expiries.push(Reverse((expires, Expiry::Call(token))));
        if expires > record.expires {
            record.expires = expires;
            self.expiries.push(Reverse((expires, Expiry::Client(key))));
        }
        self.compact_expiries();
        self.counters.executed += 1;
        Verdict::Execute {
            token,
            request_type,
            deadline,
        }
    }

    fn busy(&mut self, token: Token) -> Verdict {
        self.counters.busy += 1;
        self.queue(Out::Bare(token, Status::Busy));
        Verdict::Busy
    }

    fn queue(&mut self, out: Out) {
        // Drained after every input; the bound only guards a caller that never drains.
        if self.transmit.len() < self.cfg.replies_max + self.cfg.clients_max {
            self.transmit.push_back(out);
        }
    }

    fn compact_expiries(&mut self) {
        if self.expiries.len() > 2 * (self.cfg.replies_max + self.cfg.clients_max) + 16 {
            let calls = self
                .entries
                .iter()
                .map(|(t, e)| Reverse((e.expires, Expiry::Call(*t))));
            let clients = self
                .clients
                .iter()
                .map(|(&k, r)| Reverse((r.expires, Expiry::Client(k))));
            self.expiries = calls.chain(clients).collect();
        }
    }

    /// The answer to call `token` (an [`Verdict::Execute`]): a result (`Status::Ok`), a
    /// failure (`Status::Failed`, the payload its message), or `Status::DeadlinePassed` or
    /// `Status::NoHandler` for a call not run. A result longer than a reply may be is
    /// answered `Status::ReplyTooLong`. Remembered, so copies of the request get it again.
    /// False if the call is no longer remembered (its window closed while it ran), or was
    /// answered already or handed on ([`Server::forward`]).
    pub fn reply(&mut self, token: Token, status: Status, payload: &[u8]) -> bool {
        let max = self.cfg.payload_bytes_max();
        let Some(e) = self.entries.get_mut(&token) else {
            self.counters.replies_unknown += 1;
            return false;
        };
        if e.reply.is_some() || e.forwarded.is_some() {
            // Answered already, or handed on: the server it went to answers.
            return false;
        }
        let (status, payload) = if payload.len() > max {
            (Status::ReplyTooLong, &[][..])
        } else {
            (status, payload)
        };
        if status == Status::DeadlinePassed {
            self.counters.deadline_passed += 1;
        }
        self.bytes += payload.len();
        e.reply = Some((status, payload.to_vec()));
        self.queue(Out::Cached(token));
        true
    }

    /// Hands call `token` (an [`Verdict::Execute`] of ours, not answered) on to server `to`
    /// (`forward_request`, paper 003): it answers the caller itself. The request is kept, to
    /// hand copies of it on too. Every copy names `to_incarnation`, the incarnation of `to`
    /// this server knows (0: none). False if the call is not ours to hand on.
    pub fn forward(
        &mut self,
        token: Token,
        to: Address,
        to_incarnation: u64,
        request_type: u16,
        deadline_us: u32,
        payload: &[u8],
    ) -> bool {
        let Some(e) = self.entries.get_mut(&token) else {
            return false;
        };
        if e.reply.is_some() || e.forwarded.is_some() || token.called.is_some() {
            return false;
        }
        e.forwarded = Some(Forwarded {
            to,
            to_incarnation,
            request_type,
            deadline_us: deadline_us.max(1),
            payload: payload.to_vec(),
        });
        self.bytes += payload.len();
        // Counted as handed on, not as run here.
        self.counters.executed -= 1;
        self.counters.forwarded += 1;
        self.queue(Out::Forward(token));
        true
    }

    /// The next message to send (a reply, or a call handed on): its destination and length in
    /// `buf`, which is made longer if a long reply needs it.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<(Address, usize)> {
        self.poll_transmit_until(buf).map(|(to, n, _)| (to, n))
    }

    /// As [`Server::poll_transmit`], with the time after which the message is of no use (the
    /// call's deadline; now-ish for a `Busy` or `Resend` answer): how long a transport may
    /// keep trying to deliver it.
    pub fn poll_transmit_until(
        &mut self,
        buf: &mut Vec<u8>,
    ) -> Option<(Address, usize, Option<Instant>)> {
        let lifetime = self.cfg.packet_lifetime;
        while let Some(out) = self.transmit.pop_front() {
            if let Out::Forward(t) = out {
                let Some(e) = self.entries.get(&t) else {
                    continue;
                };
                let Some(f) = e.forwarded.as_ref() else {
                    continue;
                };
                let until = Some(before(e.expires, lifetime));
                // What the client told us of its calls to us, the other server needs for the
                // calls we hand on.
                let acked_below = self.clients.get(&t.key()).map_or(0, |r| r.floor);
                let header = RpcHeader::Forwarded(
                    RequestHeader {
                        request_type: f.request_type,
                        deadline_us: f.deadline_us,
                        incarnation: t.incarnation,
                        call_id: t.call_id,
                        acked_below,
                        server_incarnation: f.to_incarnation,
                    },
                    t.client,
                );
                let Some(n) = msg::encode_vec(&header, &f.payload, buf) else {
                    continue;
                };
                return Some((f.to, n, until));
            }
            let (token, status, payload, until): (Token, Status, &[u8], Option<Instant>) =
                match &out {
                    Out::Cached(t) => match self.entries.get(t) {
                        Some(Entry {
                            reply: Some((s, p)),
                            expires,
                            ..
                        }) => (*t, *s, p, Some(before(*expires, lifetime))),
                        _ => continue,
                    },
                    Out::Bare(t, s) => (*t, *s, &[], None),
                    Out::Forward(_) => unreachable!("handled above"),
                };
            let reply = ReplyHeader {
                status,
                incarnation: token.incarnation,
                call_id: token.call_id,
                server_incarnation: self.incarnation,
            };
            let header = match token.called {
                Some(v) => RpcHeader::ForwardedReply(reply, v),
                None => RpcHeader::Reply(reply),
            };
            let Some(n) = msg::encode_vec(&header, payload, buf) else {
                continue;
            };
            self.counters.replies_sent += 1;
            return Some((token.client, n, until));
        }
        None
    }

    /// When [`Server::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.expiries.peek().map(|Reverse((t, _))| *t)
    }

    /// Forgets calls and clients whose window closed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire(now);
        self.prune_expiries();
    }

    /// Drops forgotten calls' and clients' expiries from the top of the heap, so that
    /// [`Server::poll_timeout`] names a live one.
    fn prune_expiries(&mut self) {
        while let Some(&Reverse((t, what))) = self.expiries.peek() {
            let live = match what {
                Expiry::Call(token) => self.entries.get(&token).is_some_and(|e| e.expires == t),
                Expiry::Client(k) => self.clients.get(&k).is_some_and(|r| r.expires == t),
            };
            if live {
                return;
            }
            self.expiries.pop();
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&Reverse((t, what))) = self.expiries.peek() {
            if t > now {
                break;
            }
            self.expiries.pop();
            match what {
                Expiry::Call(token) => {
                    if self.entries.get(&token).is_some_and(|e| e.expires == t) {
                        self.forget(&token);
                        self.counters.forgotten += 1;
                        if let Some(r) = self.clients.get_mut(&token.key()) {
                            r.calls.remove(&token.call_id);
                        }
                    }
                }
                Expiry::Client(k) => {
                    // Its calls expire no later than it does, so it holds none by now.
                    if self.clients.get(&k).is_some_and(|r| r.expires == t) {
                        let mut r = self.clients.remove(&k).expect("present");
                        if let Some(g) = self.guard.as_mut() {
                            let max = self.cfg.clients_max * RETIRED_PER_CLIENT;
                            let executed = std::mem::take(&mut r.executed);
                            self.counters.retired_evicted += g.retire(k, r.floor, executed, max);
                        }
                        let (client, incarnation, called) = k;
                        for call_id in r.calls {
                            let token = Token {
                                client,
                                incarnation,
                                call_id,
                                called,
                            };
                            self.forget(&token);
                        }
                    }
                }
            }
        }
    }
}

/// `d` before `t` (not before time 0).
fn before(t: Instant, d: Duration) -> Instant {
    Instant(t.0.saturating_sub(d.as_nanos().min(u64::MAX as u128) as u64))
}

impl Guard {
    /// Whether a request of client incarnation `incarnation` at `client` may be taken: not if
    /// a newer incarnation was heard from there. Remembers the newest (at most `max`
    /// addresses, the oldest dropped first).
    fn admit_client(&mut self, client: Address, incarnation: u64, max: usize) -> bool {
        match self.newest.get_mut(&client) {
            Some(n) if incarnation < *n => return false,
            Some(n) => *n = incarnation,
            None => {
                while self.newest.len() >= max {
                    let Some(a) = self.newest_order.pop_front() else {
                        break;
                    };
                    self.newest.remove(&a);
                }
                self.newest.insert(client, incarnation);
                self.newest_order.push_back(client);
            }
        }
        true
    }

    /// Keeps what was executed for client `key`, whose record is being forgotten; how many
    /// retired clients were dropped to stay within `max`.
    fn retire(&mut self, key: ClientKey, floor: u64, executed: BTreeSet<u64>, max: usize) -> u64 {
        self.generation += 1;
        let generation = self.generation;
        self.retired.insert(
            key,
            Retired {
                generation,
                floor,
                executed,
            },
        );
        self.order.push_back((generation, key));
        let mut evicted = 0;
        while self.retired.len() > max {
            let Some((g, k)) = self.order.pop_front() else {
                break;
            };
            if self.retired.get(&k).is_some_and(|r| r.generation == g) {
                self.retired.remove(&k);
                evicted += 1;
            }
        }
        // Entries of clients that came back (and left again) pile up: rebuild now and then.
        if self.order.len() > 2 * max + 16 {
            let mut live: Vec<(u64, ClientKey)> = self
                .retired
                .iter()
                .map(|(k, r)| (r.generation, *k))
                .collect();
            live.sort_unstable();
            self.order = live.into();
        }
        evicted
    }
}
