//! The serving side: which requests to execute, the reply cache that makes execution
//! at-most-once, and its bounds.

use super::msg::{self, ReplyHeader, RequestHeader, RpcHeader, Status};
use super::RpcConfig;
use crate::addr::Address;
use crate::time::Instant;
use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

/// One call at one server: the client, its incarnation and the call's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    pub client: Address,
    pub incarnation: u64,
    pub call_id: u64,
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
    pub executed: u64,
    /// Copies answered from the reply cache.
    pub duplicates_answered: u64,
    /// Copies of a call still running.
    pub duplicates_running: u64,
    /// Copies of calls their client already finished.
    pub duplicates_finished: u64,
    pub busy: u64,
    pub deadline_passed: u64,
    pub replies_sent: u64,
    /// Replies for calls no longer remembered (their window closed while they ran).
    pub replies_unknown: u64,
    pub forgotten: u64,
}

struct Entry {
    reply: Option<(Status, Vec<u8>)>,
    expires: Instant,
}

struct ClientRecord {
    /// Every call below this id is finished at the client.
    floor: u64,
    expires: Instant,
    calls: BTreeSet<u64>,
}

enum Out {
    /// The reply remembered for this call.
    Cached(Token),
    /// A reply not remembered (Busy).
    Bare(Token, Status),
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expiry {
    Call(Token),
    Client(Address, u64),
}

pub struct Server {
    cfg: RpcConfig,
    entries: HashMap<Token, Entry>,
    clients: HashMap<(Address, u64), ClientRecord>,
    transmit: VecDeque<Out>,
    expiries: BinaryHeap<Reverse<(Instant, Expiry)>>,
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
            counters: ServerCounters::default(),
        })
    }

    /// Calls remembered (running or answered).
    pub fn remembered(&self) -> usize {
        self.entries.len()
    }

    /// Clients remembered.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// A request arrived from `from` (decoded by [`msg::decode`]).
    pub fn handle_request(&mut self, now: Instant, from: Address, r: &RequestHeader) -> Verdict {
        let RequestHeader {
            request_type,
            deadline_us,
            incarnation,
            call_id,
            acked_below,
        } = *r;
        self.counters.requests += 1;
        // What is out of its window goes first: nothing below may then remove the record this
        // request uses.
        self.expire(now);
        let token = Token {
            client: from,
            incarnation,
            call_id,
        };
        let key = (from, incarnation);
        if !self.clients.contains_key(&key) {
            if self.clients.len() >= self.cfg.clients_max
                || self.entries.len() >= self.cfg.replies_max
            {
                // A new client whose call could not be remembered takes no place either.
                return self.busy(token);
            }
            // Forgotten after a packet lifetime unless a call it makes keeps it longer.
            let expires = now + self.cfg.packet_lifetime;
            self.clients.insert(
                key,
                ClientRecord {
                    floor: 0,
                    expires,
                    calls: BTreeSet::new(),
                },
            );
            self.expiries
                .push(Reverse((expires, Expiry::Client(from, incarnation))));
        }
        let record = self.clients.get_mut(&key).expect("present");
        if acked_below > record.floor {
            record.floor = acked_below;
            let keep = record.calls.split_off(&acked_below);
            let done = std::mem::replace(&mut record.calls, keep);
            for id in done {
                let t = Token {
                    call_id: id,
                    ..token
                };
                if self.entries.remove(&t).is_some() {
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
        if let Some(e) = self.entries.get(&token) {
            return if e.reply.is_some() {
                self.counters.duplicates_answered += 1;
                self.queue(Out::Cached(token));
                Verdict::Answered
            } else {
                self.counters.duplicates_running += 1;
                Verdict::Dropped
            };
        }
        if self.entries.len() >= self.cfg.replies_max {
            return self.busy(token);
        }
        let deadline = now + Duration::from_micros(deadline_us as u64);
        // No copy of this request can arrive after this (see the module's "At most once").
        let expires = deadline + self.cfg.packet_lifetime;
        self.entries.insert(
            token,
            Entry {
                reply: None,
                expires,
            },
        );
        let record = self.clients.get_mut(&key).expect("present");
        record.calls.insert(call_id);
        self.expiries.push(Reverse((expires, Expiry::Call(token))));
        if expires > record.expires {
            record.expires = expires;
            self.expiries
                .push(Reverse((expires, Expiry::Client(from, incarnation))));
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
                .map(|(&(a, i), r)| Reverse((r.expires, Expiry::Client(a, i))));
            self.expiries = calls.chain(clients).collect();
        }
    }

    /// The answer to call `token` (an [`Verdict::Execute`]): a result (`Status::Ok`), a
    /// failure (`Status::Failed`, the payload its message), or `Status::DeadlinePassed` or
    /// `Status::NoHandler` for a call not run. A result longer than a reply may be is
    /// answered `Status::ReplyTooLong`. Remembered, so copies of the request get it again.
    /// False if the call is no longer remembered (its window closed while it ran).
    pub fn reply(&mut self, token: Token, status: Status, payload: &[u8]) -> bool {
        let max = self.cfg.payload_bytes_max();
        let Some(e) = self.entries.get_mut(&token) else {
            self.counters.replies_unknown += 1;
            return false;
        };
        if e.reply.is_some() {
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
        e.reply = Some((status, payload.to_vec()));
        self.queue(Out::Cached(token));
        true
    }

    /// The next reply to send: its destination and length in `buf` (at least
    /// `message_bytes_max` long).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(Address, usize)> {
        while let Some(out) = self.transmit.pop_front() {
            let (token, status, payload): (Token, Status, &[u8]) = match &out {
                Out::Cached(t) => match self.entries.get(t).and_then(|e| e.reply.as_ref()) {
                    Some((s, p)) => (*t, *s, p),
                    None => continue,
                },
                Out::Bare(t, s) => (*t, *s, &[]),
            };
            let header = RpcHeader::Reply(ReplyHeader {
                status,
                incarnation: token.incarnation,
                call_id: token.call_id,
            });
            let n = msg::encode(&header, payload, buf)?;
            self.counters.replies_sent += 1;
            return Some((token.client, n));
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
                Expiry::Client(a, i) => self.clients.get(&(a, i)).is_some_and(|r| r.expires == t),
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
                        self.entries.remove(&token);
                        self.counters.forgotten += 1;
                        if let Some(r) = self.clients.get_mut(&(token.client, token.incarnation)) {
                            r.calls.remove(&token.call_id);
                        }
                    }
                }
                Expiry::Client(a, i) => {
                    // Its calls expire no later than it does, so it holds none by now.
                    if self.clients.get(&(a, i)).is_some_and(|r| r.expires == t) {
                        let r = self.clients.remove(&(a, i)).expect("present");
                        for id in r.calls {
                            let token = Token {
                                client: a,
                                incarnation: i,
                                call_id: id,
                            };
                            self.entries.remove(&token);
                        }
                    }
                }
            }
        }
    }
}
