//! Remote procedure calls over a port (paper 001 §2.3): the sans-IO [`Client`] and [`Server`]
//! of `txcast-proto`, run on the calling thread over the port's datagrams, local (the
//! destination's shared-memory ring) or remote (UDP) the same way.
//!
//! An [`Rpc`] owns its port: every message on it is an RPC request or reply (anything else is
//! dropped and counted). Like a [`Port`], it is driven by the thread that uses it: a call
//! that waits, [`Rpc::wait`], [`Rpc::poll`] and [`Rpc::serve`] move its traffic, and a
//! request's handler runs on whichever of those threads takes the request in. A process that
//! serves on one thread and calls on others opens one `Rpc` (one port) per thread.
//!
//! Requests and replies longer than a datagram ride on long messages over the same port when
//! [`RpcConfig::long_bytes_max`] is set (see `Long` below).

use crate::port::{Port, PortError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use txcast_proto::frag::msg::{LdgMsg, DATA_HEADER_BYTES};
use txcast_proto::frag::{LdgConfig, Receiver, Sender, TransferId};
use txcast_proto::rpc::msg::{self, RpcHeader, RPC_HEADER_BYTES};
use txcast_proto::rpc::{
    CallId, Client, ClientCounters, Completion, End, Outcome, RemoteError, RpcConfig, RpcError,
    Server, ServerCounters, Status, Verdict,
};
use txcast_proto::wire::{HEADER_BYTES, RECORD_HEADER_BYTES, TRAILER_BYTES_MAX};
use txcast_proto::{Address, Instant, TxnId};

/// A request handler: the caller's address and the request's payload in, the result (or a
/// failure message for the caller) out.
pub type Handler = Box<dyn FnMut(Address, &[u8]) -> Result<Vec<u8>, String> + Send>;

/// A forwarder: says, for a request (its caller and payload), which server to hand it on to
/// (`forward_request`), or `None` to run it here.
pub type Forwarder = Box<dyn FnMut(Address, &[u8]) -> Option<Address> + Send>;

/// The servers a call to a transaction group goes to: those like `template` (its instance,
/// type and server instance) at each of `sites` that joined `txn`.
#[derive(Clone, Copy, Debug)]
pub struct TxnGroup<'a> {
    pub txn: TxnId,
    pub template: Address,
    pub sites: &'a [u16],
}

enum Target<'a> {
    List(&'a [Address]),
    Txn(&'a TxnGroup<'a>),
}

/// Requests and replies longer than a datagram ride on long messages (paper 001's LDG) over
/// the same port: fragments of a datagram's size, a window, fragments lost sent again. A long
/// request is sent whole once per server; while its transfer is under way its call's
/// retransmissions to that server are skipped (the transfer retransmits its own fragments),
/// and once the server has it they go as *probes* (the header alone): the server answers a
/// probe from its memory, or asks for the whole request again (`Status::Resend`) if it does
/// not know the call. A long reply goes once per copy asked for, not again while one is on
/// its way.
struct Long {
    sender: Sender,
    receiver: Receiver,
    /// Long requests per (call, server): the transfer on its way, or `None` once delivered.
    requests: HashMap<(CallId, Address), Option<TransferId>>,
    /// What each transfer carries: a request (call, server), or a reply (its key).
    transfers: HashMap<TransferId, Carries>,
    /// Long replies on their way: (client, the reply's incarnation and call id).
    replies: HashMap<(Address, [u8; 16]), TransferId>,
    sent: u64,
    probes: u64,
    skipped: u64,
}

enum Carries {
    Request(CallId, Address),
    Reply((Address, [u8; 16])),
}

impl Long {
    fn new(cfg: &RpcConfig, incarnation: u64) -> Result<Long, RpcCallError> {
        let ldg = LdgConfig {
            fragment_bytes: cfg.message_bytes_max.saturating_sub(DATA_HEADER_BYTES),
            message_bytes_max: cfg.long_bytes_max,
            transfers_max: 64,
            // Reassembly buffers kept for reuse: a few long messages' worth, not 64 MiB.
            pool_bytes_max: cfg.long_bytes_max.min(8 << 20),
            deadline_max: cfg.deadline_max,
            packet_lifetime: cfg.packet_lifetime,
            ..LdgConfig::default()
        };
        let bad = |e: txcast_proto::frag::LdgError| {
            RpcCallError::Rpc(RpcError::BadConfig(match e {
                txcast_proto::frag::LdgError::BadConfig(w) => w,
                _ => "long messages",
            }))
        };
        Ok(Long {
            sender: Sender::new(ldg, incarnation).map_err(bad)?,
            receiver: Receiver::new(ldg, incarnation).map_err(bad)?,
            requests: HashMap::new(),
            transfers: HashMap::new(),
            replies: HashMap::new(),
            sent: 0,
            probes: 0,
            skipped: 0,
        })
    }

    /// Starts a transfer of `bytes` to `to` until `until`; `None` if it cannot start now (the
    /// copy is lost, as a datagram may be: a retransmission tries again).
    fn start(
        &mut self,
        now: Instant,
        to: Address,
        bytes: &[u8],
        until: Option<Instant>,
    ) -> Option<TransferId> {
        let left = until.map_or(Duration::from_secs(1), |u| u.saturating_since(now));
        if left.is_zero() {
            return None;
        }
        let left = left.min(self.sender.config().deadline_max);
        let t = self.sender.send(now, to, bytes.to_vec(), left).ok()?;
        self.sent += 1;
        Some(t)
    }

    /// A transfer ended: a request delivered is probed from now on; one that failed is sent
    /// whole again by the next retransmission.
    fn ended(&mut self, id: TransferId, ok: bool) {
        match self.transfers.remove(&id) {
            Some(Carries::Request(call, to)) => {
                if ok {
                    if let Some(t) = self.requests.get_mut(&(call, to)) {
                        *t = None;
                    }
                } else {
                    self.requests.remove(&(call, to));
                }
            }
            Some(Carries::Reply(key)) => {
                self.replies.remove(&key);
            }
            None => {}
        }
    }

    /// Call `id` ended: its transfers still on their way to servers that did not answer are
    /// given up (one that answered has the request: its transfer ends on its own, and what it
    /// learned of the path is kept).
    fn call_ended(&mut self, id: CallId, answered: &[Address]) {
        let sender = &mut self.sender;
        let transfers = &mut self.transfers;
        self.requests.retain(|&(call, to), t| {
            if call != id {
                return true;
            }
            if let Some(t) = t.take() {
                if !answered.contains(&to) {
                    let _ = sender.cancel(t);
                    transfers.remove(&t);
                }
            }
            false
        });
    }
}

/// Runs a handler (or forwarder): on the engine's thread a panic in it is caught, as an
/// answer `Failed` (it must not take the engine and every other port down); on the
/// application's own thread it unwinds that thread, as any panic.
fn run_handler<R>(on_engine: bool, f: impl FnOnce() -> R) -> Result<R, ()> {
    if on_engine {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| ())
    } else {
        Ok(f())
    }
}

/// A handle that tells an [`Rpc`] endpoint to forget what it knew of a server's incarnation
/// (see [`Rpc::incarnation_resets`]); cheap to clone, usable from a handler.
#[derive(Clone, Default)]
pub struct IncarnationResets {
    pending: Arc<Mutex<Vec<Address>>>,
    any: Arc<std::sync::atomic::AtomicBool>,
}

impl IncarnationResets {
    /// A new process serves at `server` and the old one is gone: calls started from now on do
    /// not name the old incarnation (they would be refused `Restarted`).
    pub fn forget(&self, server: Address) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded: past this, the oldest are dropped (a call then answers `Restarted` once).
        if p.len() >= RESETS_PENDING_MAX {
            p.remove(0);
        }
        p.push(server);
        self.any.store(true, std::sync::atomic::Ordering::Release);
    }
}

const RESETS_PENDING_MAX: usize = 1024;

/// Requests an engine-served endpoint takes in per duty cycle at most.
const ENGINE_BATCH: usize = 64;

impl crate::extension::Service for Rpc {
    fn step(&mut self, _now: Instant) -> usize {
        self.engine_step()
    }

    fn next_deadline(&self) -> Option<Instant> {
        // A repeated call (a lease renewal) is due on the wall clock: in engine time, from now.
        let repeat = self.repeat.as_ref().map(|r| {
            let left = r.next.saturating_duration_since(std::time::Instant::now());
            self.now() + left
        });
        self.next_timer().into_iter().chain(repeat).min()
    }

    fn arm(&mut self) -> bool {
        self.port.arm_socket_wake()
    }

    fn awake(&mut self) {
        self.port.ring_awake()
    }
}

/// An RPC endpoint served by its engine's thread ([`Rpc::serve_on_engine`]).
pub struct EngineServer {
    served: std::sync::Arc<crate::extension::Served<Rpc>>,
    engine: crate::engine::Engine,
}

impl EngineServer {
    /// Takes the endpoint back from the engine (its handlers run on the caller's thread
    /// again, in [`Rpc::serve`]).
    pub fn stop(self) -> Rpc {
        self.take().expect("served until stopped")
    }

    /// The endpoint's counters (taken while the engine is not in it).
    pub fn counters(&self) -> RpcCounters {
        self.with(|r| r.counters())
    }

    /// Runs `f` on the endpoint, between two of the engine's steps (to register a handler,
    /// or read a counter).
    ///
    /// The engine goes on meanwhile (it does not wait for the endpoint), so `f` may make a
    /// call, or open a port.
    pub fn with<R>(&self, f: impl FnOnce(&mut Rpc) -> R) -> R {
        let r = self.served.with(f).expect("served until stopped");
        // What `f` armed (a timer, a call) is the engine's to run now.
        self.engine.wake();
        r
    }

    fn take(&self) -> Option<Rpc> {
        let mut rpc = self.served.take()?;
        self.engine.wake();
        rpc.on_engine = false;
        Some(rpc)
    }
}

impl Drop for EngineServer {
    fn drop(&mut self) {
        // The endpoint (and its port) close with the server.
        drop(self.take());
    }
}

/// Why an RPC call failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcCallError {
    /// Refused before anything was sent (bad arguments, too many calls...).
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The port failed.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The deadline passed without the answers the call needed.
    #[error("deadline passed with {} answers; no answer from {:?}", .0.replies.len(), .0.missing)]
    DeadlinePassed(Outcome),
    /// The server answered with an error (a call to one server).
    #[error("the server answered: {0}")]
    Remote(#[source] RemoteError),
    /// A wait's own timeout passed; the call goes on.
    #[error("wait timed out (the call goes on)")]
    WaitTimeout,
    /// No such call outstanding or finished and not yet collected.
    #[error("no such call")]
    Unknown,
    /// The engine would not serve the endpoint (another service consumes the port's ring).
    #[error(transparent)]
    Service(crate::extension::ServiceClash),
}

/// Counters of an [`Rpc`] endpoint.
#[derive(Clone, Debug, Default)]
pub struct RpcCounters {
    pub client: ClientCounters,
    pub server: ServerCounters,
    /// Messages on the port that are not RPC messages, or malformed ones.
    pub dropped_bad: u64,
    /// Sends the port refused (the destination full, gone, unknown...): retried by the call's
    /// retransmission like a loss.
    pub send_failures: u64,
    /// Long messages (requests or replies longer than a datagram).
    pub long: LongCounters,
}

/// What the long-message path did (see [`RpcConfig::long_bytes_max`]).
#[derive(Clone, Debug, Default)]
pub struct LongCounters {
    /// Requests and replies sent whole as long messages.
    pub sent: u64,
    /// Copies of a long request sent as a probe (the server had the request).
    pub probes: u64,
    /// Copies skipped while the same message was on its way.
    pub skipped: u64,
    pub sender: txcast_proto::frag::SenderCounters,
    pub receiver: txcast_proto::frag::ReceiverCounters,
}

/// An RPC endpoint: a port, the calls it makes and the requests it serves.
pub struct Rpc {
    port: Port,
    client: Client,
    server: Server,
    handlers: HashMap<u16, Handler>,
    forwarders: HashMap<u16, Forwarder>,
    /// Finished calls not yet collected (at most `calls_max`: a call counts against the limit
    /// until collected).
    finished: HashMap<CallId, Outcome>,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    dropped_bad: u64,
    send_failures: u64,
    /// Served on the engine's thread ([`Rpc::serve_on_engine`]).
    on_engine: bool,
    /// Servers whose incarnation to forget before the next call ([`IncarnationResets`]).
    resets: IncarnationResets,
    /// Calls to a transaction group outstanding: their copies carry the transaction, so
    /// only members take them in.
    txn_calls: HashMap<CallId, TxnId>,
    /// Requests and replies longer than a datagram (when `long_bytes_max` is set).
    long: Option<Long>,
    /// A call repeated on its own (a lease renewal): destination, type, payload, period,
    /// when next, and the last copy's id while it is outstanding.
    repeat: Option<Repeat>,
}

struct Repeat {
    /// Where it goes: the first of these that answers (a copy without an answer moves the
    /// next one on to the next destination).
    dests: Vec<Address>,
    at: usize,
    request_type: u16,
    payload: Vec<u8>,
    every: Duration,
    next: std::time::Instant,
    last: Option<CallId>,
    /// Given each successful answer.
    on_answer: Option<AnswerHook>,
}

/// What a repeated call does with its answers.
pub type AnswerHook = Box<dyn FnMut(&[u8]) + Send>;

impl Rpc {
    /// Makes `port` an RPC endpoint. `cfg.message_bytes_max` is lowered to what the port can
    /// carry (its ring slots, and one datagram).
    pub fn new(port: Port, mut cfg: RpcConfig) -> Result<Rpc, RpcCallError> {
        let datagram = port.engine().config().link.packet_bytes_max
            - HEADER_BYTES
            - RECORD_HEADER_BYTES
            - TRAILER_BYTES_MAX;
        cfg.message_bytes_max = cfg
            .message_bytes_max
            .min(port.message_bytes_max())
            .min(datagram);
        let client = Client::new(cfg, port.incarnation())?;
        let mut server = Server::with_incarnation(cfg, port.incarnation())?;
        if port.engine().shared.keys.is_some() {
            // Packets are authenticated, so every request was sent by a client once, but any
            // may be a copy captured and sent again: refuse those (issue 23).
            server.guard_replays();
        }
        let long = if cfg.long_bytes_max > 0 {
            Some(Long::new(&cfg, port.incarnation())?)
        } else {
            None
        };
        Ok(Rpc {
            recv_buf: vec![0; port.message_bytes_max()],
            send_buf: vec![0; cfg.message_bytes_max],
            port,
            client,
            server,
            handlers: HashMap::new(),
            forwarders: HashMap::new(),
            txn_calls: HashMap::new(),
            on_engine: false,
            resets: IncarnationResets::default(),
            long,
            finished: HashMap::new(),
            dropped_bad: 0,
            send_failures: 0,
            repeat: None,
        })
    }

    /// Makes the call (`dest`, `request_type`, `payload`) every `every` from now on, while
    /// this endpoint's traffic moves (its answers are not kept): a lease renewal that needs no
    /// help from the application. Replaces the previous one; `None` stops it.
    pub fn repeat_call(&mut self, call: Option<(Address, u16, Vec<u8>)>, every: Duration) {
        self.repeat_call_with(call, every, None);
    }

    /// [`Rpc::repeat_call`] whose successful answers are handed to `on_answer` (an oracle
    /// client corrects its cache from each lease renewal's answer).
    pub fn repeat_call_with(
        &mut self,
        call: Option<(Address, u16, Vec<u8>)>,
        every: Duration,
        on_answer: Option<AnswerHook>,
    ) {
        self.repeat_call_to_any(call.map(|(d, t, p)| (vec![d], t, p)), every, on_answer);
    }

    /// [`Rpc::repeat_call_with`] to the first of several servers that answers (an oracle and
    /// its standbys): a copy no server answered in its period moves the next copy on to the
    /// next server of the list, round and round.
    pub fn repeat_call_to_any(
        &mut self,
        call: Option<(Vec<Address>, u16, Vec<u8>)>,
        every: Duration,
        on_answer: Option<AnswerHook>,
    ) {
        self.repeat = call
            .filter(|c| !c.0.is_empty())
            .map(|(dests, request_type, payload)| Repeat {
                dests,
                at: 0,
                request_type,
                payload,
                every: every.max(Duration::from_millis(1)),
                next: crate::engine::deadline_after(every),
                last: None,
                on_answer,
            });
    }

    /// Starts the repeated call if it is due; forgets the last copy's outcome.
    fn run_repeat(&mut self) {
        let Some(r) = self.repeat.as_mut() else {
            return;
        };
        if let Some(id) = r.last {
            if let Some(o) = self.finished.remove(&id) {
                r.last = None;
                match (r.on_answer.as_mut(), o.replies.first()) {
                    (Some(hook), Some((_, Ok(answer)))) => hook(answer),
                    (_, None) => r.at = (r.at + 1) % r.dests.len(),
                    _ => {}
                }
            } else if !self.client.is_outstanding(id) {
                r.last = None;
            }
        }
        let now = std::time::Instant::now();
        if r.next > now || r.last.is_some() {
            return;
        }
        r.next = crate::engine::deadline_after(r.every);
        let (dest, t, payload, deadline) =
            (r.dests[r.at], r.request_type, r.payload.clone(), r.every);
        if let Ok(id) = self.multicast_async(&[dest], t, &payload, Completion::First, deadline) {
            if let Some(r) = self.repeat.as_mut() {
                r.last = Some(id);
            }
        }
    }

    pub fn address(&self) -> Address {
        self.port.address()
    }

    /// The limits in force (after [`Rpc::new`] fitted them to the port).
    pub fn config(&self) -> &RpcConfig {
        self.client.config()
    }

    /// Serves requests of `request_type` with `handler` (replacing any earlier one).
    pub fn register(
        &mut self,
        request_type: u16,
        handler: impl FnMut(Address, &[u8]) -> Result<Vec<u8>, String> + Send + 'static,
    ) {
        self.handlers.insert(request_type, Box::new(handler));
    }

    /// Hands requests of `request_type` on when `forwarder` names another server
    /// (`ForwardRequest` of paper 003): that server runs the request and answers the caller
    /// itself; its answer counts as this server's. Requests it does not hand on run here.
    pub fn register_forwarder(
        &mut self,
        request_type: u16,
        forwarder: impl FnMut(Address, &[u8]) -> Option<Address> + Send + 'static,
    ) {
        self.forwarders.insert(request_type, Box::new(forwarder));
    }

    /// Calls `dest` and waits for its answer, at most `deadline`.
    pub fn call(
        &mut self,
        dest: Address,
        request_type: u16,
        payload: &[u8],
        deadline: Duration,
    ) -> Result<Vec<u8>, RpcCallError> {
        let id = self.call_async(dest, request_type, payload, deadline)?;
        let mut o = self.wait(id, None)?;
        match o.end {
            End::Complete => match o.replies.pop() {
                Some((_, Ok(bytes))) => Ok(bytes),
                Some((_, Err(e))) => Err(RpcCallError::Remote(e)),
                None => Err(RpcCallError::DeadlinePassed(o)),
            },
            _ => Err(RpcCallError::DeadlinePassed(o)),
        }
    }

    /// Starts a call to `dest`; collect it with [`Rpc::wait`] or [`Rpc::poll`], or end it
    /// with [`Rpc::cancel`].
    pub fn call_async(
        &mut self,
        dest: Address,
        request_type: u16,
        payload: &[u8],
        deadline: Duration,
    ) -> Result<CallId, RpcCallError> {
        self.multicast_async(&[dest], request_type, payload, Completion::First, deadline)
    }

    /// Calls every server in `dests` at once and waits until `completion` holds or `deadline`
    /// passes. Returns the answers and the servers that did not answer either way; it is an
    /// error only if the call could not start.
    pub fn multicast(
        &mut self,
        dests: &[Address],
        request_type: u16,
        payload: &[u8],
        completion: Completion,
        deadline: Duration,
    ) -> Result<Outcome, RpcCallError> {
        let id = self.multicast_async(dests, request_type, payload, completion, deadline)?;
        self.wait(id, None)
    }

    /// Starts a multicast call (see [`Rpc::multicast`]).
    pub fn multicast_async(
        &mut self,
        dests: &[Address],
        request_type: u16,
        payload: &[u8],
        completion: Completion,
        deadline: Duration,
    ) -> Result<CallId, RpcCallError> {
        let call = (request_type, payload, completion, deadline);
        self.start(Target::List(dests), call)
    }

    /// A handle to make this endpoint forget a server's incarnation (an oracle client's
    /// notification handler uses it when a server moved or recovered: a new process serves
    /// there).
    pub fn incarnation_resets(&self) -> IncarnationResets {
        self.resets.clone()
    }

    /// Joins transaction `txn`'s group ([`Port::join_txn`]): calls to the group reach this
    /// endpoint's handlers from now on.
    pub fn join_txn(&mut self, txn: TxnId) -> Result<(), RpcCallError> {
        self.port.join_txn(txn).map_err(RpcCallError::Port)
    }

    /// Leaves transaction `txn`'s group ([`Port::leave_txn`]).
    pub fn leave_txn(&mut self, txn: TxnId) -> Result<(), RpcCallError> {
        self.port.leave_txn(txn).map_err(RpcCallError::Port)
    }

    /// Calls the members of a transaction's group ([`TxnGroup`]: the servers like its
    /// template at its sites that joined the transaction, [`Rpc::join_txn`]) and waits until
    /// `completion` holds or `deadline` passes. The request leaves as one transaction
    /// multicast ([`Port::multicast`]: IP multicast, or one batched send to all); copies sent
    /// again go to each member that has not answered, and carry the transaction too, so a
    /// server that did not join never takes one in. A server at one of the sites that did not
    /// join does not answer, and is reported missing. With IP multicast on, the first copy
    /// reaches every server like the template that joined, at any site; answers from servers
    /// not at `sites` are dropped (counted as strangers).
    pub fn multicast_txn(
        &mut self,
        group: &TxnGroup<'_>,
        request_type: u16,
        payload: &[u8],
        completion: Completion,
        deadline: Duration,
    ) -> Result<Outcome, RpcCallError> {
        let id = self.multicast_txn_async(group, request_type, payload, completion, deadline)?;
        self.wait(id, None)
    }

    /// Starts a call to a transaction group (see [`Rpc::multicast_txn`]).
    pub fn multicast_txn_async(
        &mut self,
        group: &TxnGroup<'_>,
        request_type: u16,
        payload: &[u8],
        completion: Completion,
        deadline: Duration,
    ) -> Result<CallId, RpcCallError> {
        let call = (request_type, payload, completion, deadline);
        self.start(Target::Txn(group), call)
    }

    fn start(
        &mut self,
        target: Target<'_>,
        (request_type, payload, completion, deadline): (u16, &[u8], Completion, Duration),
    ) -> Result<CallId, RpcCallError> {
        if self.client.outstanding() + self.finished.len() >= self.client.config().calls_max {
            return Err(RpcError::TooManyCalls.into());
        }
        let members: Vec<Address>;
        let dests = match target {
            Target::List(d) => d,
            Target::Txn(g) => {
                members = g
                    .sites
                    .iter()
                    .map(|&site| Address { site, ..g.template })
                    .collect();
                &members
            }
        };
        let datagram = self.client.config().message_bytes_max;
        if matches!(target, Target::Txn(_)) && RPC_HEADER_BYTES + payload.len() > datagram {
            // A transaction's multicast is one datagram.
            return Err(RpcError::TooLong {
                len: payload.len(),
                max: datagram - RPC_HEADER_BYTES,
            }
            .into());
        }
        // A load first: no locked operation on a call's path while there is nothing to forget.
        let resets = &self.resets.any;
        if resets.load(std::sync::atomic::Ordering::Acquire)
            && resets.swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            let pending = std::mem::take(
                &mut *self
                    .resets
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            for a in pending {
                self.client.forget_server(a);
            }
        }
        let now = self.now();
        let id = self
            .client
            .call(now, dests, request_type, payload, completion, deadline)?;
        if let Target::Txn(g) = target {
            // One copy for all, as the transaction's multicast.
            self.txn_calls.insert(id, g.txn);
            let mut buf = std::mem::take(&mut self.send_buf);
            if let Some(n) = self.client.encode_first(id, now, &mut buf) {
                if (self.port)
                    .multicast(g.txn, g.template, g.sites, &buf[..n])
                    .is_err()
                {
                    // The call goes on: its copies are sent again to each member.
                    self.send_failures += 1;
                }
            }
            self.send_buf = buf;
        }
        self.transmit();
        Ok(id)
    }

    /// The outcome of call `id` if it has ended (moving this endpoint's traffic once first).
    pub fn poll(&mut self, id: CallId) -> Result<Option<Outcome>, RpcCallError> {
        self.known(id)?;
        self.drive(Some(Duration::ZERO), |r| r.finished.contains_key(&id))?;
        Ok(self.finished.remove(&id))
    }

    /// Waits for call `id` to end, at most `timeout` (the call's own deadline ends it anyway).
    pub fn wait(&mut self, id: CallId, timeout: Option<Duration>) -> Result<Outcome, RpcCallError> {
        self.known(id)?;
        self.drive(timeout, |r| r.finished.contains_key(&id))?;
        self.finished.remove(&id).ok_or(RpcCallError::WaitTimeout)
    }

    /// Ends call `id` now with what it has (a finished call not yet collected is returned as
    /// it ended).
    pub fn cancel(&mut self, id: CallId) -> Result<Outcome, RpcCallError> {
        if let Some(o) = self.finished.remove(&id) {
            return Ok(o);
        }
        let o = self.client.cancel(id).map_err(|_| RpcCallError::Unknown)?;
        self.ended(id, &o);
        self.transmit();
        Ok(o)
    }

    /// Forgets what the transport keeps for call `id`, which ended with `o`.
    fn ended(&mut self, id: CallId, o: &Outcome) {
        self.txn_calls.remove(&id);
        if let Some(long) = self.long.as_mut() {
            let answered: Vec<Address> = o.replies.iter().map(|r| r.0).collect();
            long.call_ended(id, &answered);
        }
    }

    fn known(&self, id: CallId) -> Result<(), RpcCallError> {
        if self.finished.contains_key(&id) || self.client.is_outstanding(id) {
            Ok(())
        } else {
            Err(RpcCallError::Unknown)
        }
    }

    /// Hands this endpoint to its engine's thread, which from now on takes its requests in and
    /// runs their handlers in its own loop, next to the network, with no hand-off to another
    /// thread and no wake-up of one (paper 000's extension modules; handlers "on the engine
    /// loop"). Remote requests are handled in the duty cycle that reads them; local senders
    /// ring the port's socket, so the engine wakes for theirs too.
    ///
    /// Handlers then run on the engine thread: they must be short and must not block, call
    /// out (an `Rpc` call waits for the engine), or open or close ports; the whole process's
    /// traffic waits while one runs. [`EngineServer::stop`] gives the endpoint back.
    ///
    /// With an invoker engine (no engine thread) this is refused, and the endpoint is given
    /// back: there the thread calling [`Rpc::serve`] already runs the engine and the handlers
    /// together.
    pub fn serve_on_engine(self) -> Result<EngineServer, (RpcCallError, Box<Rpc>)> {
        if self.port.engine().is_invoker() {
            return Err((
                RpcCallError::Rpc(RpcError::BadConfig(
                    "an invoker engine has no thread to serve on: call serve() instead",
                )),
                Box::new(self),
            ));
        }
        let ep = self.port.endpoint().clone();
        let engine = self.port.engine().clone();
        let mut rpc = self;
        rpc.on_engine = true;
        match crate::extension::Served::serve(&ep.extensions, rpc) {
            Ok(served) => {
                engine.wake();
                Ok(EngineServer { served, engine })
            }
            Err((clash, mut rpc)) => {
                rpc.on_engine = false;
                Err((RpcCallError::Service(clash), Box::new(rpc)))
            }
        }
    }

    /// Runs the timers that are due; how many ran.
    fn run_timers(&mut self, now: Instant) -> usize {
        let mut ran = 0;
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
            ran += 1;
        }
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            self.server.handle_timeout(now);
            ran += 1;
        }
        if let Some(long) = self.long.as_mut() {
            if long.sender.poll_timeout().is_some_and(|t| t <= now) {
                long.sender.handle_timeout(now);
                ran += 1;
            }
            if long.receiver.poll_timeout().is_some_and(|t| t <= now) {
                long.receiver.handle_timeout(now);
                ran += 1;
            }
        }
        ran
    }

    /// The earliest timer.
    fn next_timer(&self) -> Option<Instant> {
        let long = self.long.as_ref();
        [
            self.client.poll_timeout(),
            self.server.poll_timeout(),
            long.and_then(|l| l.sender.poll_timeout()),
            long.and_then(|l| l.receiver.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// One step on the engine thread: what the ring holds (a bounded batch), timers, sends.
    fn engine_step(&mut self) -> usize {
        let now = self.now();
        let mut work = self.run_timers(now);
        let mut buf = std::mem::take(&mut self.recv_buf);
        // Bounded, so that one busy port does not hold the engine from the others.
        for _ in 0..ENGINE_BATCH {
            let Some(m) = self.port.try_recv(&mut buf) else {
                break;
            };
            self.handle(m.source, &buf[..m.len]);
            work += 1;
        }
        self.recv_buf = buf;
        self.transmit();
        self.collect();
        self.run_repeat();
        work
    }

    /// Serves requests (and moves the traffic of calls of ours) for `timeout`; returns how
    /// many requests were executed.
    pub fn serve(&mut self, timeout: Duration) -> Result<u64, RpcCallError> {
        let before = self.server.counters.executed;
        self.drive(Some(timeout), |_| false)?;
        Ok(self.server.counters.executed - before)
    }

    pub fn counters(&self) -> RpcCounters {
        RpcCounters {
            client: self.client.counters.clone(),
            server: self.server.counters.clone(),
            dropped_bad: self.dropped_bad,
            send_failures: self.send_failures,
            long: self
                .long
                .as_ref()
                .map_or_else(LongCounters::default, |l| LongCounters {
                    sent: l.sent,
                    probes: l.probes,
                    skipped: l.skipped,
                    sender: l.sender.counters.clone(),
                    receiver: l.receiver.counters.clone(),
                }),
        }
    }

    fn now(&self) -> Instant {
        self.port.engine().now()
    }

    /// The engine this endpoint's port runs on.
    pub fn engine(&self) -> &crate::engine::Engine {
        self.port.engine()
    }

    /// Moves traffic until `done` holds or `timeout` passes (`None`: until `done`).
    fn drive(
        &mut self,
        timeout: Option<Duration>,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<(), RpcCallError> {
        // A timeout too long to represent is no end.
        let end = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        loop {
            let now = self.now();
            self.run_timers(now);
            self.transmit();
            self.collect();
            self.run_repeat();
            if done(self) {
                return Ok(());
            }
            // Wait for traffic until the next timer or the end of this drive.
            let repeat = self
                .repeat
                .as_ref()
                .map(|r| r.next.saturating_duration_since(std::time::Instant::now()));
            let timer = self
                .next_timer()
                .map(|t| t.saturating_since(now))
                .into_iter()
                .chain(repeat)
                .min();
            let left = end.map(|e| e.saturating_duration_since(std::time::Instant::now()));
            let wait = match (timer, left) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(Duration::from_secs(1)),
            };
            let mut buf = std::mem::take(&mut self.recv_buf);
            let r = if wait.is_zero() {
                self.port.try_recv(&mut buf).ok_or(PortError::Timeout)
            } else {
                self.port.recv_timeout(&mut buf, Some(wait))
            };
            let r = match r {
                Ok(m) => {
                    self.handle(m.source, &buf[..m.len]);
                    Ok(())
                }
                Err(PortError::Timeout) => Ok(()),
                Err(e) => Err(e),
            };
            self.recv_buf = buf;
            r?;
            // Out of time, even with traffic still coming (a busy server must not keep a
            // drive of 20 ms going for ever).
            if end.is_some_and(|e| std::time::Instant::now() >= e) {
                self.transmit();
                self.collect();
                return Ok(());
            }
        }
    }

    fn handle(&mut self, from: Address, bytes: &[u8]) {
        if !msg::is_rpc(bytes) {
            self.handle_long(from, bytes);
            return;
        }
        let Ok((header, payload)) = msg::decode(bytes) else {
            self.dropped_bad += 1;
            return;
        };
        let now = self.now();
        let verdict = match header {
            RpcHeader::Reply(r) => {
                self.resend_asked(from, r.status, r.call_id);
                self.client.handle_reply(from, &r, payload);
                None
            }
            RpcHeader::ForwardedReply(r, called) => {
                self.resend_asked(called, r.status, r.call_id);
                self.client
                    .handle_forwarded_reply(from, called, &r, payload);
                None
            }
            RpcHeader::Probe(r) => Some(self.server.handle_probe(now, from, &r)),
            RpcHeader::Request(r) => {
                let v = self.server.handle_request(now, from, &r);
                if let Verdict::Execute {
                    token,
                    request_type,
                    ..
                } = v
                {
                    let on_engine = self.on_engine;
                    let to = self
                        .forwarders
                        .get_mut(&request_type)
                        .and_then(|f| run_handler(on_engine, || f(from, payload)).ok().flatten());
                    if let Some(to) = to.filter(|&t| t != self.port.address()) {
                        // Copies name the incarnation of `to` we know (from calls of ours).
                        let to_inc = self.client.server_incarnation(to).unwrap_or(0);
                        self.server.forward(
                            token,
                            to,
                            to_inc,
                            request_type,
                            r.deadline_us,
                            payload,
                        );
                        self.transmit();
                        return;
                    }
                }
                Some(v)
            }
            RpcHeader::Forwarded(r, client) => {
                Some(self.server.handle_forwarded(now, from, client, &r))
            }
        };
        // The caller (the original one, for a call handed on to us) is the token's client.
        if let Some(Verdict::Execute {
            token,
            request_type,
            deadline,
        }) = verdict
        {
            let caller = token.client;
            let (status, result) = if self.now() > deadline {
                (Status::DeadlinePassed, Vec::new())
            } else {
                let on_engine = self.on_engine;
                match self.handlers.get_mut(&request_type) {
                    None => (Status::NoHandler, Vec::new()),
                    Some(h) => match run_handler(on_engine, || h(caller, payload)) {
                        Ok(Ok(out)) => (Status::Ok, out),
                        Ok(Err(m)) => (Status::Failed, m.into_bytes()),
                        Err(()) => (Status::Failed, b"the handler panicked".to_vec()),
                    },
                }
            };
            self.server.reply(token, status, &result);
        }
        self.transmit();
    }

    /// A fragment, acknowledgement or abort of a long message (or garbage); a long message
    /// complete is handled as any RPC message.
    fn handle_long(&mut self, from: Address, bytes: &[u8]) {
        let now = self.now();
        let Some(long) = self.long.as_mut() else {
            self.dropped_bad += 1;
            return;
        };
        match txcast_proto::frag::msg::parse(bytes) {
            Ok(LdgMsg::Data(h, p)) => long.receiver.handle_data(now, from, &h, p),
            Ok(LdgMsg::Ack(a)) => long.sender.handle_ack(now, from, &a),
            Ok(LdgMsg::Abort {
                incarnation,
                transfer,
            }) => long.receiver.handle_abort(from, incarnation, transfer),
            Err(_) => self.dropped_bad += 1,
        }
        while let Some((from, message)) = self.long.as_mut().and_then(|l| l.receiver.poll_message())
        {
            if msg::is_rpc(&message) {
                self.handle(from, &message);
            } else {
                self.dropped_bad += 1;
            }
        }
        self.transmit();
    }

    /// A server answered a probe of call `call_id` with `Resend`: the next copy to it carries
    /// the whole request.
    fn resend_asked(&mut self, server: Address, status: Status, call_id: u64) {
        if let (Status::Resend, Some(long)) = (status, self.long.as_mut()) {
            let key = (CallId(call_id), server);
            if long.requests.get(&key).is_some_and(|t| t.is_none()) {
                long.requests.remove(&key);
            }
        }
    }

    /// Sends what the client and the server have to send.
    fn transmit(&mut self) {
        let now = self.now();
        let mut buf = std::mem::take(&mut self.send_buf);
        while let Some((to, n, until)) = self.server.poll_transmit_until(&mut buf) {
            let sent = if n > self.client.config().message_bytes_max {
                self.send_long_reply(now, to, &buf[..n], until)
            } else {
                self.port.queue_datagram(to, &buf[..n])
            };
            if sent.is_err() {
                self.send_failures += 1;
            }
        }
        while let Some((id, to, n)) = self.client.poll_transmit_call(now, &mut buf) {
            if n > self.client.config().message_bytes_max {
                if self.send_long_request(now, id, to, &buf[..n]).is_err() {
                    self.send_failures += 1;
                }
                continue;
            }
            let sent = match self.txn_calls.get(&id) {
                Some(&txn) => self.port.send_datagram_txn(to, txn, &buf[..n]),
                // The copies of a call to several servers leave in one system call.
                None => self.port.queue_datagram(to, &buf[..n]),
            };
            if sent.is_err() {
                self.send_failures += 1;
            }
        }
        self.port.flush_datagrams();
        self.transmit_long(now, &mut buf);
        self.send_buf = buf;
    }

    /// A copy of a long request: sent whole if the server does not have it, skipped while
    /// its transfer is on its way, a probe once it was delivered.
    fn send_long_request(
        &mut self,
        now: Instant,
        id: CallId,
        to: Address,
        bytes: &[u8],
    ) -> Result<(), PortError> {
        let until = self.client.deadline(id);
        let Some(long) = self.long.as_mut() else {
            return Err(PortError::TooLong {
                len: bytes.len(),
                max: self.client.config().message_bytes_max,
            });
        };
        match long.requests.get(&(id, to)) {
            Some(Some(_)) => {
                long.skipped += 1;
                Ok(())
            }
            Some(None) => {
                long.probes += 1;
                let mut probe = [0u8; RPC_HEADER_BYTES];
                probe.copy_from_slice(&bytes[..RPC_HEADER_BYTES]);
                probe[1] = msg::RpcKind::Probe as u8;
                self.port.send_datagram(to, &probe)
            }
            None => match long.start(now, to, bytes, until) {
                Some(t) => {
                    long.requests.insert((id, to), Some(t));
                    long.transfers.insert(t, Carries::Request(id, to));
                    Ok(())
                }
                None => Err(PortError::Timeout),
            },
        }
    }

    /// A long reply (or a long request handed on): sent unless the same is on its way.
    fn send_long_reply(
        &mut self,
        now: Instant,
        to: Address,
        bytes: &[u8],
        until: Option<Instant>,
    ) -> Result<(), PortError> {
        let Some(long) = self.long.as_mut() else {
            return Err(PortError::TooLong {
                len: bytes.len(),
                max: self.client.config().message_bytes_max,
            });
        };
        let mut id = [0u8; 16];
        id.copy_from_slice(&bytes[8..24]);
        let key = (to, id);
        if long.replies.contains_key(&key) {
            long.skipped += 1;
            return Ok(());
        }
        let t = long
            .start(now, to, bytes, until)
            .ok_or(PortError::Timeout)?;
        long.replies.insert(key, t);
        long.transfers.insert(t, Carries::Reply(key));
        Ok(())
    }

    /// Moves long messages: acknowledgements, fragments, transfers that ended.
    fn transmit_long(&mut self, now: Instant, buf: &mut Vec<u8>) {
        let Some(long) = self.long.as_mut() else {
            return;
        };
        let room = txcast_proto::frag::ACK_BYTES_MAX.max(DATA_HEADER_BYTES);
        if buf.len() < room {
            buf.resize(room, 0);
        }
        while let Some((to, n)) = long.receiver.poll_transmit(buf) {
            if self.port.send_datagram(to, &buf[..n]).is_err() {
                self.send_failures += 1;
            }
        }
        // Fragments leave straight from the message (scatter-gather).
        while let Some((to, n, fragment)) = long.sender.poll_transmit_gather(now, buf) {
            if self
                .port
                .send_datagram_gather(to, &[&buf[..n], fragment])
                .is_err()
            {
                self.send_failures += 1;
            }
        }
        while let Some((t, r)) = long.sender.poll_event() {
            long.ended(t, r.is_ok());
        }
        // Messages of ended transfers go to the receiver's pool (bounded), or are dropped.
        while let Some(spent) = long.sender.poll_spent() {
            long.receiver.recycle(spent);
        }
    }

    fn collect(&mut self) {
        while let Some((id, o)) = self.client.poll_event() {
            self.ended(id, &o);
            self.finished.insert(id, o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::PortConfig;

    /// Found in review: a cancelled call to a transaction group stayed in `txn_calls` (only
    /// the end of a call, which a cancelled call does not raise, removed it).
    #[test]
    fn a_cancelled_call_forgets_its_transport_state() {
        let port = Port::open(Address::new(20, 0, 1, 0), PortConfig::default()).unwrap();
        let cfg = RpcConfig {
            long_bytes_max: 1 << 20,
            ..RpcConfig::default()
        };
        let mut rpc = Rpc::new(port, cfg).unwrap();
        let group = TxnGroup {
            txn: TxnId(0x20_0001),
            template: Address::new(20, 0, 2, 0),
            sites: &[0, 1],
        };
        let long = vec![0u8; 100_000];
        for _ in 0..100 {
            let d = Duration::from_secs(5);
            let id = rpc
                .multicast_txn_async(&group, 1, b"x", Completion::All, d)
                .unwrap();
            rpc.cancel(id).unwrap();
            let id = rpc
                .call_async(Address::new(20, 1, 2, 0), 1, &long, d)
                .unwrap();
            rpc.cancel(id).unwrap();
        }
        assert!(rpc.txn_calls.is_empty());
        let l = rpc.long.as_ref().unwrap();
        assert!(l.requests.is_empty() && l.transfers.is_empty());
        assert_eq!(l.sender.outstanding(), 0, "their transfers were given up");
    }

    /// Found in review: the long sender keeps the messages of ended transfers for reuse
    /// (`Sender::poll_spent`, up to 8 of any size, beyond `pool_bytes_max`), and nothing here
    /// takes them: an endpoint keeps its first 8 long requests or replies (up to 8 x 64 MiB)
    /// for the rest of its life.
    #[test]
    fn ended_long_transfers_leave_no_message_buffers_behind() {
        let port = Port::open(Address::new(20, 0, 3, 0), PortConfig::default()).unwrap();
        let cfg = RpcConfig {
            long_bytes_max: 4 << 20,
            ..RpcConfig::default()
        };
        let mut rpc = Rpc::new(port, cfg).unwrap();
        let long = vec![0u8; 3 << 20];
        for _ in 0..10 {
            let id = rpc
                .call_async(Address::new(20, 1, 2, 0), 1, &long, Duration::from_secs(5))
                .unwrap();
            rpc.cancel(id).unwrap();
            let _ = rpc.poll(id);
        }
        let l = rpc.long.as_mut().unwrap();
        let mut held = 0;
        while let Some(b) = l.sender.poll_spent() {
            held += b.capacity();
        }
        assert_eq!(held, 0, "bytes of ended transfers' messages still held");
    }
}
