//! The oracle (paper 001 "The Raid Oracle") over RPC: [`OracleServer`] runs the registry of
//! `txcast-proto` on a port, keeps it in a small file across its own restarts, and sends
//! notifications; [`OracleClient`] registers a server with its notifier set, renews its lease
//! on its own, answers lookups, and applies notifications to the engine without the
//! application's help: a server that moved is reached at its new location from then on (the
//! pure address mapping is overridden for it, and only for it).
//!
//! Clients find the oracle from the cluster configuration (`oracle = "i.s.t.n"`, default
//! `0.0.15.0`), never by searching the network.

use crate::engine::Engine;
use crate::port::{Port, PortConfig};
use crate::rpc::{Rpc, RpcCallError};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use txcast_proto::oracle::{
    decode_list, decode_pattern, encode_list, encode_pattern, request, Change, Notification,
    Pattern, Register, Registry,
};
use txcast_proto::rpc::{CallId, RpcConfig};
use txcast_proto::Address;

/// Servers one oracle registers, at most.
pub const SERVERS_MAX: usize = 4096;
/// Notifications outstanding at once; more wait for the next serve.
const NOTIFICATIONS_IN_FLIGHT_MAX: usize = 256;
/// How long a notification is retried.
const NOTIFY_DEADLINE: Duration = Duration::from_secs(2);
/// How long an oracle call is retried.
const CALL_DEADLINE: Duration = Duration::from_secs(2);

/// Why an oracle call failed.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("oracle call failed: {0}")]
    Call(#[from] RpcCallError),
    /// The oracle's answer did not decode.
    #[error("oracle answer malformed: {0}")]
    BadAnswer(String),
    /// The oracle's state file could not be read, written or understood.
    #[error("oracle state file: {0}")]
    State(String),
}

#[derive(Clone, Debug, Default)]
pub struct OracleServerCounters {
    pub registrations: u64,
    pub notifications_sent: u64,
    /// Notifications given up (no room to send, or not answered in time).
    pub notifications_dropped: u64,
    pub state_writes: u64,
    pub state_write_failures: u64,
    /// Changes sent to the other replicas, and applied from them.
    pub replicated_out: u64,
    pub replicated_in: u64,
    /// Changes not sent to the other replicas (no room, or the group refused them): the
    /// next lease renewal carries them again.
    pub replication_dropped: u64,
}

/// The oracle server.
pub struct OracleServer {
    rpc: Rpc,
    registry: Arc<Mutex<Registry>>,
    /// Replicas of this oracle, over a group (see [`OracleServer::open_replica`]).
    replication: Option<Replication>,
    state_path: Option<PathBuf>,
    queued: VecDeque<(Address, Notification)>,
    in_flight: Vec<CallId>,
    counters: OracleServerCounters,
}

/// The oracle's replicas form a txcast group. Each applies what its own clients send it (a
/// registration, a renewal, a leave) and sends it to the group; it applies what the others
/// sent. Every replica answers lookups, keeps leases and sends notifications, so clients may
/// use any of them, and a standby carries on when the oracle fails.
///
/// The registry is soft state: a lease renewal is a registration again, so a change lost with
/// a failed replica, or not yet seen by a replica that joined late, is repaired by the next
/// renewal (within a third of the lease). Notifications may come from more than one replica;
/// they say where a server is, so a second copy changes nothing.
struct Replication {
    group: crate::group::Group,
    /// Changes applied here, waiting to go to the group.
    outbox: Arc<Mutex<VecDeque<Vec<u8>>>>,
}

/// Changes waiting to go to the other replicas, at most.
const OUTBOX_MAX: usize = 4096;

/// A change as replicas send it: kind (1 register, 2 unregister), the server, its payload.
fn change(kind: u8, from: Address, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(1 + txcast_proto::addr::ADDRESS_BYTES + payload.len());
    m.push(kind);
    let mut a = [0u8; txcast_proto::addr::ADDRESS_BYTES];
    from.write_to(&mut a);
    m.extend_from_slice(&a);
    m.extend_from_slice(payload);
    m
}

/// Applies a registration of `from` (checked like one from the network) to the registry and
/// the engine's locations; the live servers its notifier set matches.
fn apply_register(
    registry: &Mutex<Registry>,
    engine: &Engine,
    from: Address,
    payload: &[u8],
) -> Result<Vec<(Address, SocketAddrV4)>, String> {
    let reg = Register::decode(payload).map_err(|e| e.to_string())?;
    let mut r = registry.lock().expect("registry lock");
    let seen = r
        .register(engine.now(), from, &reg)
        .map_err(|e| e.to_string())?;
    // Accepted: its answer, and what we send it from now on, go where it is.
    engine.set_location(from, SocketAddr::V4(reg.location));
    for gone in r.take_evicted() {
        if let Ok(mapped) = engine.config().cluster.socket_addr(gone) {
            engine.set_location(gone, mapped);
        }
    }
    Ok(seen)
}

fn v4(a: SocketAddr) -> Option<SocketAddrV4> {
    match a {
        SocketAddr::V4(v) => Some(v),
        SocketAddr::V6(_) => None,
    }
}

impl OracleServer {
    /// Opens the oracle at `addr` on `engine`. With `state_path`, the registry is restored
    /// from that file if it exists (every live server gets a fresh lease) and written back on
    /// every change.
    pub fn open(
        engine: &Engine,
        addr: Address,
        state_path: Option<&Path>,
    ) -> Result<OracleServer, OracleError> {
        OracleServer::open_with(engine, addr, state_path, None)
    }

    /// Opens a replica of the oracle at `addr`: the first one creates group `group` (with no
    /// `contact`), the others join it through any replica (`contact`), waiting at most
    /// `join_timeout`. Clients list the replicas (`oracle` and `oracle_standbys` in the
    /// cluster configuration) and use the first that answers. See `Replication`.
    pub fn open_replica(
        engine: &Engine,
        addr: Address,
        state_path: Option<&Path>,
        group: u32,
        contact: Option<Address>,
        join_timeout: Duration,
    ) -> Result<OracleServer, OracleError> {
        OracleServer::open_with(
            engine,
            addr,
            state_path,
            Some((group, contact, join_timeout)),
        )
    }

    fn open_with(
        engine: &Engine,
        addr: Address,
        state_path: Option<&Path>,
        replica: Option<(u32, Option<Address>, Duration)>,
    ) -> Result<OracleServer, OracleError> {
        let registry = match state_path {
            Some(p) if p.exists() => {
                let bytes = std::fs::read(p).map_err(|e| OracleError::State(e.to_string()))?;
                Registry::restore(&bytes, engine.now(), SERVERS_MAX)
                    .map_err(|e| OracleError::State(format!("{}: {e}", p.display())))?
            }
            _ => Registry::new(SERVERS_MAX),
        };
        let port = Port::open_on(
            engine,
            addr,
            PortConfig {
                trust_moved_sources: true,
                ..PortConfig::default()
            },
        )
        .map_err(|e| OracleError::Call(RpcCallError::Port(e)))?;
        let replication = match replica {
            None => None,
            Some((group, contact, timeout)) => {
                let cfg = txcast_proto::group::GroupConfig {
                    group,
                    // A replica left alone goes on (soft state: see `Replication`).
                    auto_reset: Some(txcast_proto::group::MinMembers::Absolute(1)),
                    ..txcast_proto::group::GroupConfig::default()
                };
                let g = match contact {
                    None => port.create_group(cfg),
                    Some(c) => port.join_group(cfg, c, Some(timeout)),
                }
                .map_err(|e| OracleError::State(format!("oracle group: {e}")))?;
                Some(Replication {
                    group: g,
                    outbox: Arc::new(Mutex::new(VecDeque::new())),
                })
            }
        };
        let outbox = replication.as_ref().map(|r| r.outbox.clone());
        let send_on = move |m: Vec<u8>| {
            if let Some(o) = &outbox {
                let mut o = o.lock().expect("outbox lock");
                if o.len() < OUTBOX_MAX {
                    o.push_back(m);
                }
            }
        };
        let send_on2 = send_on.clone();
        let mut rpc = Rpc::new(port, RpcConfig::default())?;
        let registry = Arc::new(Mutex::new(registry));
        let (r, e) = (registry.clone(), engine.clone());
        rpc.register(request::REGISTER, move |from, payload| {
            if from == addr {
                return Err("the oracle's own address is not registered".into());
            }
            let seen = apply_register(&r, &e, from, payload)?;
            send_on(change(1, from, payload));
            Ok(encode_list(&seen))
        });
        let r = registry.clone();
        rpc.register(request::UNREGISTER, move |from, _| {
            r.lock().expect("registry lock").unregister(from);
            send_on2(change(2, from, &[]));
            Ok(Vec::new())
        });
        let r = registry.clone();
        rpc.register(request::LOOKUP, move |_, payload| {
            let a = decode_address(payload)?;
            let found = r.lock().expect("registry lock").lookup(a);
            Ok(encode_list(
                &found.map(|l| (a, l)).into_iter().collect::<Vec<_>>(),
            ))
        });
        let r = registry.clone();
        rpc.register(request::FIND_PARTNER, move |_, payload| {
            let p = decode_pattern(payload).map_err(|e| e.to_string())?;
            let found = r.lock().expect("registry lock").find_partner(&p);
            Ok(encode_list(&found.into_iter().collect::<Vec<_>>()))
        });
        let r = registry.clone();
        rpc.register(request::FIND_ALL, move |_, payload| {
            let p = decode_pattern(payload).map_err(|e| e.to_string())?;
            Ok(encode_list(&r.lock().expect("registry lock").find_all(&p)))
        });
        let s = OracleServer {
            rpc,
            registry,
            replication,
            state_path: state_path.map(Path::to_path_buf),
            queued: VecDeque::new(),
            in_flight: Vec::new(),
            counters: OracleServerCounters::default(),
        };
        // Where restored servers are, for our answers to reach them (all of them).
        let entries = s.registry.lock().expect("registry lock").locations();
        for (a, l) in entries {
            engine.set_location(a, SocketAddr::V4(l));
        }
        Ok(s)
    }

    pub fn address(&self) -> Address {
        self.rpc.address()
    }

    pub fn counters(&self) -> OracleServerCounters {
        let mut c = self.counters.clone();
        c.registrations = self.rpc.counters().server.executed;
        c
    }

    /// Sends this replica's changes to the group and applies the others'.
    fn replicate(&mut self) {
        let Some(rep) = self.replication.as_ref() else {
            return;
        };
        let pending: Vec<Vec<u8>> = rep.outbox.lock().expect("outbox lock").drain(..).collect();
        for m in pending {
            match rep.group.send_async(&m) {
                Ok(_) => self.counters.replicated_out += 1,
                Err(_) => self.counters.replication_dropped += 1,
            }
        }
        let me = self.rpc.address();
        let engine = self.rpc.engine().clone();
        let registry = self.registry.clone();
        let mut applied = 0;
        // Bounded: a busy group does not keep the oracle from its clients.
        for _ in 0..1024 {
            let got = rep.group.try_receive_with(|d| {
                let txcast_proto::group::Delivered::Message { payload, .. } = d.what else {
                    return false;
                };
                if d.sender == me || payload.len() < 1 + txcast_proto::addr::ADDRESS_BYTES {
                    return false;
                }
                let from = Address::read_from(&payload[1..9]);
                match payload[0] {
                    1 => apply_register(&registry, &engine, from, &payload[9..]).is_ok(),
                    2 => {
                        registry.lock().expect("registry lock").unregister(from);
                        true
                    }
                    _ => false,
                }
            });
            match got {
                Some(true) => applied += 1,
                Some(false) => {}
                None => break,
            }
        }
        self.counters.replicated_in += applied;
    }

    /// Serves for `timeout`: requests, lease expiries, notifications, the state file.
    pub fn serve(&mut self, timeout: Duration) -> Result<(), OracleError> {
        let end = crate::engine::deadline_after(timeout);
        loop {
            self.replicate();
            let now = self.rpc.engine().now();
            let next = {
                let mut r = self.registry.lock().expect("registry lock");
                r.handle_timeout(now);
                self.queued.extend(r.take_notifications());
                r.poll_timeout()
            };
            self.notify()?;
            self.save();
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let step = next
                .map(|t| t.saturating_since(now))
                .unwrap_or(left)
                .min(left)
                .min(Duration::from_millis(50))
                .max(Duration::from_micros(100));
            self.rpc.serve(step)?;
            let mut r = self.registry.lock().expect("registry lock");
            self.queued.extend(r.take_notifications());
        }
    }

    fn notify(&mut self) -> Result<(), OracleError> {
        let rpc = &mut self.rpc;
        let mut still = Vec::new();
        for id in self.in_flight.drain(..) {
            match rpc.poll(id) {
                Ok(Some(o)) => {
                    if o.end != txcast_proto::rpc::End::Complete {
                        self.counters.notifications_dropped += 1;
                    }
                }
                Ok(None) => still.push(id),
                Err(_) => {}
            }
        }
        self.in_flight = still;
        while self.in_flight.len() < NOTIFICATIONS_IN_FLIGHT_MAX {
            let Some((to, n)) = self.queued.pop_front() else {
                break;
            };
            match rpc.call_async(to, request::NOTIFY, &n.encode(), NOTIFY_DEADLINE) {
                Ok(id) => {
                    self.counters.notifications_sent += 1;
                    self.in_flight.push(id);
                }
                Err(_) => self.counters.notifications_dropped += 1,
            }
        }
        Ok(())
    }

    /// Writes the registry to the state file if it changed (a new file renamed over the old,
    /// synced first, so a crash leaves one or the other whole).
    fn save(&mut self) {
        let Some(path) = self.state_path.clone() else {
            return;
        };
        let bytes = {
            let mut r = self.registry.lock().expect("registry lock");
            if !r.dirty() {
                return;
            }
            r.snapshot()
        };
        let tmp = path.with_extension("tmp");
        let r = (|| -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        match r {
            Ok(()) => self.counters.state_writes += 1,
            Err(_) => {
                self.counters.state_write_failures += 1;
                // Try again at the next change.
                self.registry.lock().expect("registry lock").mark_dirty();
            }
        }
    }
}

fn decode_address(b: &[u8]) -> Result<Address, String> {
    if b.len() != txcast_proto::addr::ADDRESS_BYTES {
        return Err("an address is 8 bytes".into());
    }
    Ok(Address::read_from(b))
}

/// What a client knows of the servers it watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub location: SocketAddrV4,
    pub alive: bool,
}

/// Servers a client's cache holds, at most.
const KNOWN_MAX: usize = 4096;

/// The oracle's client side, on an application's [`Rpc`] endpoint.
pub struct OracleClient {
    /// The oracle and its standbys, in order; `current` is the one that answered last.
    oracles: Vec<Address>,
    current: usize,
    known: Arc<Mutex<HashMap<Address, Known>>>,
}

/// Applies what the oracle said of `server` to the cache and the engine's locations; true if
/// it is alive somewhere it was not (moved, or back from a failure).
fn apply(
    engine: &Engine,
    known: &Mutex<HashMap<Address, Known>>,
    server: Address,
    location: SocketAddrV4,
    alive: bool,
) -> bool {
    let mut k = known.lock().expect("known lock");
    if k.len() >= KNOWN_MAX && !k.contains_key(&server) {
        return false;
    }
    // A failure at a location other than where it is known alive is news about a place it
    // left (a replica that has not seen the move yet): not about it.
    if !alive
        && k.get(&server)
            .is_some_and(|was| was.alive && was.location != location)
    {
        return false;
    }
    let new = alive
        && k.get(&server)
            .is_some_and(|was| !was.alive || was.location != location);
    k.insert(server, Known { location, alive });
    if alive {
        // Overrides the pure mapping only where they differ (clears it where they agree).
        engine.set_location(server, SocketAddr::V4(location));
    }
    new
}

impl OracleClient {
    /// The client of the oracle the cluster configuration names, on `rpc` (which from now on
    /// takes notifications).
    pub fn new(rpc: &mut Rpc) -> Result<OracleClient, OracleError> {
        let oracles = rpc
            .engine()
            .config()
            .cluster
            .oracles()
            .map_err(|e| OracleError::State(e.to_string()))?;
        Ok(OracleClient::with_oracles(rpc, &oracles))
    }

    /// The client of the oracle at `oracle`, on `rpc`.
    pub fn with_oracle(rpc: &mut Rpc, oracle: Address) -> OracleClient {
        OracleClient::with_oracles(rpc, &[oracle])
    }

    /// The client of an oracle and its standbys (`oracles`, in order; at least one), on
    /// `rpc`: a call goes to the one that answered last, and to the next when it does not
    /// answer; notifications are taken from any of them.
    pub fn with_oracles(rpc: &mut Rpc, oracles: &[Address]) -> OracleClient {
        assert!(!oracles.is_empty(), "an oracle client needs an oracle");
        let known = Arc::new(Mutex::new(HashMap::new()));
        let (k, e) = (known.clone(), rpc.engine().clone());
        let from_oracle = oracles.to_vec();
        let resets = rpc.incarnation_resets();
        rpc.register(request::NOTIFY, move |from, payload| {
            if !from_oracle.contains(&from) {
                return Err("notifications come from the oracle".into());
            }
            let n = Notification::decode(payload).map_err(|e| e.to_string())?;
            let alive = n.change != Change::Failed;
            // Registered, moved or recovered: a new process (the old one's lease ran out, or
            // it never was); calls from now on do not name the old one's incarnation.
            if apply(&e, &k, n.server, n.location, alive) || n.change != Change::Failed {
                resets.forget(n.server);
            }
            Ok(Vec::new())
        });
        OracleClient {
            oracles: oracles.to_vec(),
            current: 0,
            known,
        }
    }

    /// The oracle (or standby) calls go to now.
    pub fn oracle(&self) -> Address {
        self.oracles[self.current]
    }

    /// Calls the oracle that answered last, then the others in turn while none answers.
    fn call(
        &mut self,
        rpc: &mut Rpc,
        request_type: u16,
        payload: &[u8],
    ) -> Result<Vec<u8>, OracleError> {
        let mut last = None;
        let mut restarted = false;
        for _ in 0..self.oracles.len() + 1 {
            match rpc.call(self.oracle(), request_type, payload, CALL_DEADLINE) {
                Ok(answer) => return Ok(answer),
                // A new process: its answer taught its incarnation, and every oracle call is
                // idempotent, so once more to it.
                Err(RpcCallError::Remote(txcast_proto::rpc::RemoteError::Restarted))
                    if !restarted =>
                {
                    restarted = true;
                }
                Err(e @ RpcCallError::DeadlinePassed(_))
                | Err(e @ RpcCallError::Remote(txcast_proto::rpc::RemoteError::Restarted)) => {
                    // Not there: the next one.
                    last = Some(e);
                    self.current = (self.current + 1) % self.oracles.len();
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last
            .unwrap_or(RpcCallError::Remote(
                txcast_proto::rpc::RemoteError::Restarted,
            ))
            .into())
    }

    /// Registers `rpc`'s server with `notifiers` (patterns of the servers it talks to) and a
    /// lease, renewed from now on every third of it while `rpc`'s traffic moves. Returns the
    /// live servers its notifier set matches (also in the cache).
    pub fn register_self(
        &mut self,
        rpc: &mut Rpc,
        notifiers: &[Pattern],
        lease: Duration,
    ) -> Result<Vec<(Address, SocketAddrV4)>, OracleError> {
        let me = rpc.address();
        let location = rpc
            .engine()
            .socket_addr(me)
            .ok()
            .and_then(v4)
            .ok_or_else(|| OracleError::State("only IPv4 locations are registered".into()))?;
        let payload = Register {
            lease,
            location,
            notifiers: notifiers.to_vec(),
        }
        .encode();
        let answer = self.call(rpc, request::REGISTER, &payload)?;
        let seen = decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))?;
        for &(a, l) in &seen {
            if apply(rpc.engine(), &self.known, a, l, true) {
                rpc.incarnation_resets().forget(a);
            }
        }
        // Every renewal's answer lists the watched servers as the oracle knows them now: a
        // notification lost or overtaken by an older one is corrected by the next renewal.
        let (k, e) = (self.known.clone(), rpc.engine().clone());
        let resets = rpc.incarnation_resets();
        let correct: crate::rpc::AnswerHook = Box::new(move |answer: &[u8]| {
            if let Ok(list) = decode_list(answer) {
                let live: std::collections::HashSet<Address> =
                    list.iter().map(|&(a, _)| a).collect();
                for &(a, l) in &list {
                    if apply(&e, &k, a, l, true) {
                        resets.forget(a);
                    }
                }
                // Watched servers it no longer lists have failed.
                let mut known = k.lock().expect("known lock");
                for (a, v) in known.iter_mut() {
                    if !live.contains(a) && list.len() < txcast_proto::oracle::LIST_MAX {
                        v.alive = false;
                    }
                }
            }
        });
        // Renewals go to the oracle that answered, and on to the others when it does not.
        let mut order = self.oracles.clone();
        order.rotate_left(self.current);
        rpc.repeat_call_to_any(
            Some((order, request::REGISTER, payload)),
            lease / 3,
            Some(correct),
        );
        Ok(seen)
    }

    /// Leaves the oracle (watchers are told this server failed) and stops renewing.
    pub fn unregister(&mut self, rpc: &mut Rpc) -> Result<(), OracleError> {
        rpc.repeat_call_with(None, Duration::ZERO, None);
        self.call(rpc, request::UNREGISTER, &[])?;
        Ok(())
    }

    /// Where `server` is, if it is registered and alive.
    pub fn lookup(
        &mut self,
        rpc: &mut Rpc,
        server: Address,
    ) -> Result<Option<SocketAddrV4>, OracleError> {
        let mut b = [0u8; txcast_proto::addr::ADDRESS_BYTES];
        server.write_to(&mut b);
        let answer = self.call(rpc, request::LOOKUP, &b)?;
        let list = decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))?;
        Ok(list.first().map(|&(_, l)| l))
    }

    /// One live server matching `pattern`.
    pub fn find_partner(
        &mut self,
        rpc: &mut Rpc,
        pattern: &Pattern,
    ) -> Result<Option<(Address, SocketAddrV4)>, OracleError> {
        let answer = self.call(rpc, request::FIND_PARTNER, &encode_pattern(pattern))?;
        let list = decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))?;
        Ok(list.first().copied())
    }

    /// Every live server matching `pattern` (at most 90).
    pub fn find_all(
        &mut self,
        rpc: &mut Rpc,
        pattern: &Pattern,
    ) -> Result<Vec<(Address, SocketAddrV4)>, OracleError> {
        let answer = self.call(rpc, request::FIND_ALL, &encode_pattern(pattern))?;
        decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))
    }

    /// What the cache holds of `server`.
    pub fn known(&self, server: Address) -> Option<Known> {
        self.known.lock().expect("known lock").get(&server).copied()
    }
}
