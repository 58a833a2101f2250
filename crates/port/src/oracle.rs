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
#[derive(Debug)]
pub enum OracleError {
    Call(RpcCallError),
    /// The oracle's answer did not decode.
    BadAnswer(String),
    /// The oracle's state file could not be read, written or understood.
    State(String),
}

impl std::fmt::Display for OracleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OracleError::Call(e) => write!(f, "oracle call failed: {e}"),
            OracleError::BadAnswer(e) => write!(f, "oracle answer malformed: {e}"),
            OracleError::State(e) => write!(f, "oracle state file: {e}"),
        }
    }
}

impl std::error::Error for OracleError {}

impl From<RpcCallError> for OracleError {
    fn from(e: RpcCallError) -> Self {
        OracleError::Call(e)
    }
}

#[derive(Clone, Debug, Default)]
pub struct OracleServerCounters {
    pub registrations: u64,
    pub notifications_sent: u64,
    /// Notifications given up (no room to send, or not answered in time).
    pub notifications_dropped: u64,
    pub state_writes: u64,
    pub state_write_failures: u64,
}

/// The oracle server.
pub struct OracleServer {
    rpc: Rpc,
    registry: Arc<Mutex<Registry>>,
    state_path: Option<PathBuf>,
    queued: VecDeque<(Address, Notification)>,
    in_flight: Vec<CallId>,
    counters: OracleServerCounters,
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
        let mut rpc = Rpc::new(port, RpcConfig::default())?;
        let registry = Arc::new(Mutex::new(registry));
        let (r, e) = (registry.clone(), engine.clone());
        rpc.register(request::REGISTER, move |from, payload| {
            if from == addr {
                return Err("the oracle's own address is not registered".into());
            }
            let reg = Register::decode(payload).map_err(|e| e.to_string())?;
            let mut r = r.lock().expect("registry lock");
            let seen = r.register(e.now(), from, &reg).map_err(|e| e.to_string())?;
            // Accepted: its answer, and what we send it from now on, go where it is.
            e.set_location(from, SocketAddr::V4(reg.location));
            for gone in r.take_evicted() {
                if let Ok(mapped) = e.config().cluster.socket_addr(gone) {
                    e.set_location(gone, mapped);
                }
            }
            Ok(encode_list(&seen))
        });
        let r = registry.clone();
        rpc.register(request::UNREGISTER, move |from, _| {
            r.lock().expect("registry lock").unregister(from);
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

    /// Serves for `timeout`: requests, lease expiries, notifications, the state file.
    pub fn serve(&mut self, timeout: Duration) -> Result<(), OracleError> {
        let end = std::time::Instant::now() + timeout;
        loop {
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
    oracle: Address,
    known: Arc<Mutex<HashMap<Address, Known>>>,
}

/// Applies what the oracle said of `server` to the cache and the engine's locations.
fn apply(
    engine: &Engine,
    known: &Mutex<HashMap<Address, Known>>,
    server: Address,
    location: SocketAddrV4,
    alive: bool,
) {
    let mut k = known.lock().expect("known lock");
    if k.len() >= KNOWN_MAX && !k.contains_key(&server) {
        return;
    }
    k.insert(server, Known { location, alive });
    if alive {
        // Overrides the pure mapping only where they differ (clears it where they agree).
        engine.set_location(server, SocketAddr::V4(location));
    }
}

impl OracleClient {
    /// The client of the oracle the cluster configuration names, on `rpc` (which from now on
    /// takes notifications).
    pub fn new(rpc: &mut Rpc) -> Result<OracleClient, OracleError> {
        let oracle = rpc
            .engine()
            .config()
            .cluster
            .oracle()
            .map_err(|e| OracleError::State(e.to_string()))?;
        Ok(OracleClient::with_oracle(rpc, oracle))
    }

    /// The client of the oracle at `oracle`, on `rpc`.
    pub fn with_oracle(rpc: &mut Rpc, oracle: Address) -> OracleClient {
        let known = Arc::new(Mutex::new(HashMap::new()));
        let (k, e) = (known.clone(), rpc.engine().clone());
        rpc.register(request::NOTIFY, move |from, payload| {
            if from != oracle {
                return Err("notifications come from the oracle".into());
            }
            let n = Notification::decode(payload).map_err(|e| e.to_string())?;
            let alive = n.change != Change::Failed;
            apply(&e, &k, n.server, n.location, alive);
            Ok(Vec::new())
        });
        OracleClient { oracle, known }
    }

    pub fn oracle(&self) -> Address {
        self.oracle
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
        let answer = rpc.call(self.oracle, request::REGISTER, &payload, CALL_DEADLINE)?;
        let seen = decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))?;
        for &(a, l) in &seen {
            apply(rpc.engine(), &self.known, a, l, true);
        }
        // Every renewal's answer lists the watched servers as the oracle knows them now: a
        // notification lost or overtaken by an older one is corrected by the next renewal.
        let (k, e) = (self.known.clone(), rpc.engine().clone());
        let correct: crate::rpc::AnswerHook = Box::new(move |answer: &[u8]| {
            if let Ok(list) = decode_list(answer) {
                let live: std::collections::HashSet<Address> =
                    list.iter().map(|&(a, _)| a).collect();
                for &(a, l) in &list {
                    apply(&e, &k, a, l, true);
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
        rpc.repeat_call_with(
            Some((self.oracle, request::REGISTER, payload)),
            lease / 3,
            Some(correct),
        );
        Ok(seen)
    }

    /// Leaves the oracle (watchers are told this server failed) and stops renewing.
    pub fn unregister(&mut self, rpc: &mut Rpc) -> Result<(), OracleError> {
        rpc.repeat_call_with(None, Duration::ZERO, None);
        rpc.call(self.oracle, request::UNREGISTER, &[], CALL_DEADLINE)?;
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
        let answer = rpc.call(self.oracle, request::LOOKUP, &b, CALL_DEADLINE)?;
        let list = decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))?;
        Ok(list.first().map(|&(_, l)| l))
    }

    /// One live server matching `pattern`.
    pub fn find_partner(
        &mut self,
        rpc: &mut Rpc,
        pattern: &Pattern,
    ) -> Result<Option<(Address, SocketAddrV4)>, OracleError> {
        let answer = rpc.call(
            self.oracle,
            request::FIND_PARTNER,
            &encode_pattern(pattern),
            CALL_DEADLINE,
        )?;
        let list = decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))?;
        Ok(list.first().copied())
    }

    /// Every live server matching `pattern` (at most 90).
    pub fn find_all(
        &mut self,
        rpc: &mut Rpc,
        pattern: &Pattern,
    ) -> Result<Vec<(Address, SocketAddrV4)>, OracleError> {
        let answer = rpc.call(
            self.oracle,
            request::FIND_ALL,
            &encode_pattern(pattern),
            CALL_DEADLINE,
        )?;
        decode_list(&answer).map_err(|e| OracleError::BadAnswer(e.to_string()))
    }

    /// What the cache holds of `server`.
    pub fn known(&self, server: Address) -> Option<Known> {
        self.known.lock().expect("known lock").get(&server).copied()
    }
}
