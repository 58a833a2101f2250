//! The oracle's registry ([`txcast_proto::oracle::Registry`]) under simulated faults: node 0
//! runs the registry, nodes 1..=N are servers that register with a notifier set and a lease,
//! renew it, look others up, crash (their lease runs out) and come back, sometimes at another
//! location or as a new process (a new address, so the registry fills with failed entries and
//! must evict them), unregister now and then, and send malformed requests. The oracle itself
//! crashes and restarts from its last snapshot. Requests and notifications travel as
//! unreliable datagrams (`[op u8][request u64][node u16][address 8][body]`: the node asking,
//! and the server the request is about) over the seeded network.
//!
//! Checkers:
//! - **registry**: after every request and lease timeout, what the registry answered (accepted
//!   or refused and why, the list of watched servers, lookups, lists) and the notifications it
//!   queued (who is told what, in order) are those of a reference model of paper 001's rules:
//!   a first registration is `Registered`, one after failing `Recovered`, one from another
//!   place once the old lease ran out `Moved`, a live server is not moved by another's word,
//!   a lease that runs out is `Failed`; every live server whose notifier set matches is told,
//!   and nobody else;
//! - **snapshot**: a restored snapshot snapshots to the same bytes; a damaged one is refused
//!   or read, never a panic;
//! - **bad input**: a malformed request is refused and changes nothing;
//! - **integrity** at the servers: every reply answers a request sent, every notification is
//!   one the oracle sent to that server;
//! - **liveness**: after healing, every server is registered, alive and found where it is, and
//!   its view of the servers it watches (from its renewals and notifications) is the
//!   registry's.

use crate::harness::{self, draw_restarts, min_opt, Plan, Run, Violation, World};
use crate::net::{FaultConfig, NetCounters, Network};
use crate::NodeId;
use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;
use txcast_proto::addr::ADDRESS_BYTES;
use txcast_proto::oracle::{
    decode_list, decode_pattern, encode_list, encode_pattern, Change, Notification, Pattern,
    Register, Registry, RegistryError,
};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::Address;

const MS: u64 = 1_000_000;
const HEADER_BYTES: usize = 1 + 8 + 2 + ADDRESS_BYTES;

/// Requests (server to oracle) and answers (oracle to server).
mod op {
    pub const REGISTER: u8 = 1;
    pub const UNREGISTER: u8 = 2;
    pub const LOOKUP: u8 = 3;
    pub const FIND_ALL: u8 = 4;
    pub const ACCEPTED: u8 = 0x81;
    pub const REFUSED: u8 = 0x82;
    pub const FOUND: u8 = 0x83;
    pub const LIST: u8 = 0x84;
    pub const MALFORMED: u8 = 0x85;
    pub const NOTIFY: u8 = 0x90;
}

/// Knobs of one oracle simulation.
#[derive(Clone, Debug)]
pub struct OracleSimOptions {
    pub servers: usize,
    pub safety_ns: u64,
    pub faults: bool,
    pub partitions: bool,
    pub clogs: bool,
}

impl Default for OracleSimOptions {
    fn default() -> Self {
        OracleSimOptions {
            servers: 6,
            safety_ns: 4_000 * MS,
            faults: true,
            partitions: true,
            clogs: true,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct OracleSimReport {
    pub seed: u64,
    pub faults: String,
    pub net: NetCounters,
    pub requests: u64,
    pub registered: u64,
    pub refused: u64,
    pub malformed: u64,
    pub notifications: u64,
    pub evicted: u64,
    pub oracle_restarts: usize,
    pub end_ns: u64,
    pub digest: u64,
}

/// A registration as the reference model keeps it.
#[derive(Clone, Debug)]
struct Entry {
    location: SocketAddrV4,
    notifiers: Vec<Pattern>,
    lease: Duration,
    until: Instant,
    alive: bool,
}

/// The reference model of the registry's rules (paper 001), against which every answer and
/// notification is checked.
#[derive(Clone, Default)]
struct Model {
    entries: BTreeMap<Address, Entry>,
    max: usize,
}

type Told = Vec<(Address, Notification)>;

impl Model {
    /// Live servers other than `except` that a notifier set matches, in address order.
    fn matching(&self, notifiers: &[Pattern], except: Address) -> Vec<(Address, SocketAddrV4)> {
        self.entries
            .iter()
            .filter(|(a, e)| **a != except && e.alive && notifiers.iter().any(|p| p.matches(**a)))
            .map(|(a, e)| (*a, e.location))
            .collect()
    }

    /// Who is told of `change` to `server`: every other live server watching it.
    fn tell(&self, change: Change, server: Address, location: SocketAddrV4, out: &mut Told) {
        let n = Notification {
            change,
            server,
            location,
        };
        for (a, e) in &self.entries {
            if *a != server && e.alive && e.notifiers.iter().any(|p| p.matches(server)) {
                out.push((*a, n));
            }
        }
    }

    /// What registering `server` with `r` at `now` must do: the reply, and who is told what.
    fn register(
        &mut self,
        now: Instant,
        server: Address,
        r: &Register,
        told: &mut Told,
    ) -> Result<Vec<(Address, SocketAddrV4)>, RegistryError> {
        let change = match self.entries.get(&server) {
            None => Some(Change::Registered),
            Some(e) if !e.alive => Some(Change::Recovered),
            Some(e) if e.location != r.location && now < e.until => {
                return Err(RegistryError::LiveElsewhere)
            }
            Some(e) if e.location != r.location => Some(Change::Moved),
            Some(e) if e.notifiers != r.notifiers => None,
            Some(_) => {
                let e = self.entries.get_mut(&server).expect("present");
                (e.lease, e.until) = (r.lease, now + r.lease);
                return Ok(self.matching(&r.notifiers, server));
            }
        };
        if !self.entries.contains_key(&server) && self.entries.len() >= self.max {
            // Room is made by forgetting the failed entry whose lease ran out first.
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| !e.alive)
                .min_by_key(|(a, e)| (e.until, **a))
                .map(|(a, _)| *a)
                .ok_or(RegistryError::Full)?;
            self.entries.remove(&victim);
        }
        let e = Entry {
            location: r.location,
            notifiers: r.notifiers.clone(),
            lease: r.lease,
            until: now + r.lease,
            alive: true,
        };
        self.entries.insert(server, e);
        if let Some(c) = change {
            self.tell(c, server, r.location, told);
        }
        Ok(self.matching(&r.notifiers, server))
    }

    /// Leases run out at `now`, in address order, each told as it fails.
    fn expire(&mut self, now: Instant, told: &mut Told) {
        let due: Vec<Address> = self
            .entries
            .iter()
            .filter(|(_, e)| e.alive && e.until <= now)
            .map(|(a, _)| *a)
            .collect();
        for a in due {
            let e = self.entries.get_mut(&a).expect("listed");
            e.alive = false;
            let l = e.location;
            self.tell(Change::Failed, a, l, told);
        }
    }

    fn unregister(&mut self, server: Address, told: &mut Told) {
        if let Some(e) = self.entries.remove(&server) {
            if e.alive {
                self.tell(Change::Failed, server, e.location, told);
            }
        }
    }

    fn lookup(&self, a: Address) -> Option<SocketAddrV4> {
        self.entries.get(&a).filter(|e| e.alive).map(|e| e.location)
    }

    /// The model as the registry restores it from a snapshot at `now`: leases start again.
    fn restored(&self, now: Instant) -> Model {
        let mut m = self.clone();
        for e in m.entries.values_mut() {
            e.until = now + e.lease;
        }
        m
    }
}

struct Oracle {
    registry: Registry,
    model: Model,
    /// The last snapshot taken, and the model as of then.
    snapshot: Vec<u8>,
    snapshot_model: Model,
}

struct Server {
    /// Address of the current process at this site.
    addr: Address,
    reg: Register,
    up: bool,
    /// Down until then (a crash), or back then after unregistering.
    back_at: u64,
    next_renew: u64,
    next_query: u64,
    /// The servers it watches: the list of its first registration's answer, then what the
    /// notifications tell it.
    view: BTreeMap<Address, SocketAddrV4>,
    /// Takes its view from the answer to the first registration asked after this request
    /// (at the start, when it comes back, at healing).
    resync_after: Option<u64>,
    /// Requests sent (any copy of an answer must answer one).
    asked: HashSet<u64>,
}

struct OracleWorld {
    rng: Rng,
    faults: String,
    oracle: Oracle,
    servers: Vec<Server>,
    lease_ms: u64,
    /// Sends malformed requests now and then.
    garbage: f64,
    crash_p: f64,
    /// Notifications the oracle sent, each with its recipient.
    sent_notes: HashSet<(Address, Vec<u8>)>,
    next_req: u64,
    oracle_restarts: usize,
    /// When every view starts again: once what was sent before healing has arrived (the
    /// longest delay and clog are far shorter), from an answer to a request made since, so a
    /// notification lost before counts for nothing, and one wrong or missing after is caught.
    resync_at: Option<u64>,
    /// The liveness phase ends here.
    settled_at: u64,
    r: OracleSimReport,
}

fn location(site: usize, generation: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, site as u8), 7000 + generation)
}

/// A notifier set: patterns on server type or site, or everyone.
fn notifiers(rng: &mut Rng, servers: usize) -> Vec<Pattern> {
    let any = Pattern {
        instance: None,
        site: None,
        server_type: None,
        server_instance: None,
    };
    (0..1 + rng.below(3))
        .map(|_| match rng.below(4) {
            0 => any,
            1 => Pattern {
                site: Some(1 + rng.below(servers as u64) as u16),
                ..any
            },
            _ => Pattern {
                server_type: Some(1 + rng.below(3) as u16),
                ..any
            },
        })
        .collect()
}

/// Runs one seed; `Err` names the first rule broken.
pub fn run_oracle(seed: u64, opts: &OracleSimOptions) -> Result<OracleSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = FaultConfig::for_seed(seed, &mut rng, opts.faults, opts.partitions, opts.clogs);
    let n = opts.servers.clamp(1, 200);
    let lease_ms = 100 + rng.below(400);
    let max = n + rng.below(3) as usize;
    let servers = (1..=n)
        .map(|i| {
            let reg = Register {
                lease: Duration::from_millis(lease_ms),
                location: location(i, 0),
                notifiers: notifiers(&mut rng, n),
            };
            Server {
                addr: Address::new(1, i as u16, 1 + (i % 3) as u16, 0),
                reg,
                up: true,
                back_at: 0,
                next_renew: rng.below(50 * MS),
                next_query: rng.below(50 * MS),
                view: BTreeMap::new(),
                resync_after: Some(0),
                asked: HashSet::new(),
            }
        })
        .collect();
    let garbage = if rng.chance(0.5) { 0.02 } else { 0.0 };
    let crash_p = if opts.faults { 0.002 } else { 0.0 };
    // Restarts of the oracle (node 0) only: servers crash by the workload's schedule.
    let restarts = draw_restarts(&mut rng, opts.faults, 0.5, 3, opts.safety_ns, 1);
    let settle = 3 * lease_ms * MS + 200 * MS;
    let plan = Plan {
        steps_max: Some(20_000_000),
        ..Plan::event(
            "oracle",
            seed,
            Network::new(n + 1, faults.clone(), rng.fork()),
            restarts,
            opts.safety_ns,
            opts.safety_ns + settle + 1_000 * MS,
        )
    };
    let model = Model {
        entries: BTreeMap::new(),
        max,
    };
    let mut registry = Registry::new(max);
    let world = OracleWorld {
        rng,
        faults: format!("{faults:?} lease {lease_ms} ms entries_max {max} garbage {garbage}"),
        oracle: Oracle {
            snapshot: registry.snapshot(),
            registry,
            snapshot_model: model.clone(),
            model,
        },
        servers,
        lease_ms,
        garbage,
        crash_p,
        sent_notes: HashSet::new(),
        next_req: 0,
        oracle_restarts: 0,
        resync_at: Some(opts.safety_ns + 100 * MS),
        settled_at: opts.safety_ns + settle,
        r: OracleSimReport::default(),
    };
    harness::run(world, plan)
}

fn envelope(op: u8, req: u64, node: NodeId, a: Address, body: &[u8]) -> Vec<u8> {
    let mut m = vec![op];
    m.extend_from_slice(&req.to_le_bytes());
    m.extend_from_slice(&(node as u16).to_le_bytes());
    let mut b = [0u8; ADDRESS_BYTES];
    a.write_to(&mut b);
    m.extend_from_slice(&b);
    m.extend_from_slice(body);
    m
}

/// A datagram's header and body.
struct Opened<'a> {
    op: u8,
    req: u64,
    node: NodeId,
    addr: Address,
    body: &'a [u8],
}

/// A datagram, if it has a whole header.
fn open(m: &[u8]) -> Option<Opened<'_>> {
    let head = m.get(..HEADER_BYTES)?;
    Some(Opened {
        op: head[0],
        req: u64::from_le_bytes(head[1..9].try_into().ok()?),
        node: u16::from_le_bytes([head[9], head[10]]) as NodeId,
        addr: Address::read_from(&head[11..]),
        body: &m[HEADER_BYTES..],
    })
}

impl OracleWorld {
    /// Lease timeouts due, checked against the model.
    fn expire(&mut self, run: &mut Run) -> Result<(), Violation> {
        let o = &mut self.oracle;
        if o.registry.poll_timeout().is_some_and(|t| t <= run.now) {
            o.registry.handle_timeout(run.now);
            let mut told = Vec::new();
            o.model.expire(run.now, &mut told);
            self.notify(run, told, "leases ran out")?;
        }
        Ok(())
    }

    /// The registry's queued notifications must be `told`, in order; they go out.
    fn notify(&mut self, run: &mut Run, told: Told, why: &str) -> Result<(), Violation> {
        let got = self.oracle.registry.take_notifications();
        if got != told {
            return Err(run.fail(format!(
                "notifications after {why}: the registry told {got:?}, the rules {told:?}"
            )));
        }
        for (to, n) in got {
            let body = n.encode();
            self.sent_notes.insert((to, body.clone()));
            self.r.notifications += 1;
            let m = envelope(op::NOTIFY, 0, 0, to, &body);
            run.net.send(run.now, 0, to.site as usize, &m);
        }
        Ok(())
    }

    /// The oracle takes one request from node `from`.
    fn request(&mut self, run: &mut Run, m: &[u8]) -> Result<(), Violation> {
        self.expire(run)?;
        self.r.requests += 1;
        let now = run.now;
        let Some(Opened {
            op: kind,
            req,
            node: from,
            addr: a,
            body,
        }) = open(m).filter(|o| (1..=self.servers.len()).contains(&o.node))
        else {
            return Err(run.fail("a request from no server reached the oracle"));
        };
        let reply = |op: u8, body: &[u8]| envelope(op, req, 0, a, body);
        let o = &mut self.oracle;
        let mut told = Vec::new();
        let out = match kind {
            op::REGISTER => match Register::decode(body) {
                Err(_) => None,
                Ok(r) => {
                    let got = o.registry.register(now, a, &r);
                    let want = o.model.register(now, a, &r, &mut told);
                    self.r.evicted += o.registry.take_evicted().len() as u64;
                    if got != want {
                        return Err(run.fail(format!(
                            "register {a} at {}: the registry answered {got:?}, the rules {want:?}",
                            r.location
                        )));
                    }
                    Some(match got {
                        Ok(list) => {
                            self.r.registered += 1;
                            reply(op::ACCEPTED, &encode_list(&list))
                        }
                        Err(e) => {
                            self.r.refused += 1;
                            let code = u8::from(e == RegistryError::LiveElsewhere);
                            reply(op::REFUSED, &[code])
                        }
                    })
                }
            },
            op::UNREGISTER if body.is_empty() => {
                o.registry.unregister(a);
                o.model.unregister(a, &mut told);
                Some(reply(op::ACCEPTED, &encode_list(&[])))
            }
            op::LOOKUP if body.is_empty() => {
                let (got, want) = (o.registry.lookup(a), o.model.lookup(a));
                if got != want {
                    return Err(run.fail(format!(
                        "lookup {a}: the registry answered {got:?}, the rules {want:?}"
                    )));
                }
                let mut b = Vec::new();
                if let Some(l) = got {
                    b = encode_list(&[(a, l)]);
                }
                Some(reply(op::FOUND, &b))
            }
            op::FIND_ALL => match decode_pattern(body) {
                Err(_) => None,
                Ok(p) => {
                    let got = o.registry.find_all(&p);
                    // No server has the address 0.0.0.0: nobody is left out.
                    let mut want = o.model.matching(&[p], Address::new(0, 0, 0, 0));
                    want.truncate(txcast_proto::oracle::LIST_MAX);
                    if got != want {
                        return Err(run.fail(format!(
                            "find_all {p}: the registry answered {got:?}, the rules {want:?}"
                        )));
                    }
                    Some(reply(op::LIST, &encode_list(&got)))
                }
            },
            _ => None,
        };
        let out = out.unwrap_or_else(|| {
            self.r.malformed += 1;
            reply(op::MALFORMED, &[])
        });
        run.net.send(now, 0, from, &out);
        self.notify(run, told, "a request")
    }

    /// Server `i` takes a datagram from the oracle.
    fn answer(&mut self, run: &mut Run, i: usize, m: &[u8]) -> Result<(), Violation> {
        let s = &mut self.servers[i - 1];
        let Some(Opened {
            op: kind,
            req,
            addr: a,
            body,
            ..
        }) = open(m)
        else {
            return Err(run.fail(format!("server {i} got a datagram shorter than a header")));
        };
        if kind == op::NOTIFY {
            if !self.sent_notes.contains(&(a, body.to_vec())) {
                return Err(run.fail(format!(
                    "server {i} got a notification for {a} the oracle never sent"
                )));
            }
            let Ok(n) = Notification::decode(body) else {
                return Err(run.fail(format!("server {i}: a notification it cannot read")));
            };
            if a == s.addr && s.up {
                match n.change {
                    Change::Failed => s.view.remove(&n.server),
                    _ => s.view.insert(n.server, n.location),
                };
            }
            return Ok(());
        }
        if !s.asked.contains(&req) {
            return Err(run.fail(format!(
                "server {i} got an answer to request {req}, never sent"
            )));
        }
        // A registration's answer lists every live server it watches: the view starts there.
        if kind == op::ACCEPTED && a == s.addr && s.up && s.resync_after.is_some_and(|r| req > r) {
            s.resync_after = None;
            let Ok(list) = decode_list(body) else {
                return Err(run.fail(format!("server {i}: a list it cannot read")));
            };
            s.view = list.into_iter().collect();
        }
        Ok(())
    }

    /// Server `i` sends request `kind` about `a` with `body`.
    fn ask(&mut self, run: &mut Run, i: usize, kind: u8, a: Address, body: &[u8]) {
        self.next_req += 1;
        self.servers[i - 1].asked.insert(self.next_req);
        let m = envelope(kind, self.next_req, i, a, body);
        run.net.send(run.now, i, 0, &m);
    }

    /// The servers' workload: renewals, lookups, crashes and returns, leaving, bad requests.
    fn workload(&mut self, run: &mut Run) {
        let (now, n) = (run.ns(), self.servers.len());
        if self.resync_at.is_some_and(|t| now >= t) {
            self.resync_at = None;
            for s in self.servers.iter_mut() {
                s.resync_after = Some(self.next_req);
            }
        }
        for i in 1..=n {
            let rng = &mut self.rng;
            let s = &mut self.servers[i - 1];
            if !s.up {
                if now >= s.back_at {
                    // Back: at another place now and then, or as a new process.
                    s.up = true;
                    if rng.chance(0.5) {
                        s.reg.location = location(i, s.reg.location.port() - 6999);
                    }
                    if rng.chance(0.3) {
                        s.addr.server_instance += 1;
                    }
                    s.view.clear();
                    s.resync_after = Some(self.next_req);
                    s.next_renew = now;
                }
                continue;
            }
            if !run.healed && rng.chance(self.crash_p) {
                s.up = false;
                s.back_at = now + 200 * MS + rng.below(1_300 * MS);
                if rng.chance(0.3) {
                    let a = s.addr;
                    self.ask(run, i, op::UNREGISTER, a, &[]);
                }
                continue;
            }
            if now >= s.next_renew {
                s.next_renew = now + self.lease_ms * MS / 3;
                let (a, body) = (s.addr, s.reg.encode());
                self.ask(run, i, op::REGISTER, a, &body);
            }
            let s = &mut self.servers[i - 1];
            if now >= s.next_query {
                s.next_query = now + self.rng.below(30 * MS);
                let other = Address::new(1, 1 + self.rng.below(n as u64) as u16, 1, 0);
                if self.rng.chance(0.5) {
                    self.ask(run, i, op::LOOKUP, other, &[]);
                } else {
                    let p = notifiers(&mut self.rng, n)[0];
                    self.ask(run, i, op::FIND_ALL, other, &encode_pattern(&p));
                }
            }
            if !run.healed && self.garbage > 0.0 && self.rng.chance(self.garbage) {
                // A malformed request: random bytes, or a registration cut or lengthened.
                let a = self.servers[i - 1].addr;
                let mut body = self.servers[i - 1].reg.encode();
                match self.rng.below(3) {
                    0 => body.truncate(self.rng.below(body.len() as u64) as usize),
                    1 => body.push(self.rng.below(256) as u8),
                    _ => {
                        body = (0..self.rng.below(40))
                            .map(|_| self.rng.below(256) as u8)
                            .collect()
                    }
                }
                let kind = [op::REGISTER, op::FIND_ALL, op::LOOKUP][self.rng.below(3) as usize];
                self.ask(run, i, kind, a, &body);
            }
        }
    }
}

impl World for OracleWorld {
    type Report = OracleSimReport;

    /// The oracle crashes and restarts from its last snapshot; a damaged copy of it must be
    /// refused or read, and the restored registry must snapshot to the same bytes.
    fn restart(&mut self, run: &mut Run, _node: NodeId) {
        let o = &mut self.oracle;
        let mut bad = o.snapshot.clone();
        let k = self.rng.below(bad.len() as u64) as usize;
        bad[k] ^= 1 + self.rng.below(255) as u8;
        let _ = Registry::restore(&bad, run.now, o.model.max);
        let _ = Registry::restore(&o.snapshot[..k], run.now, o.model.max);
        o.registry = Registry::restore(&o.snapshot, run.now, o.model.max).expect("own snapshot");
        o.model = o.snapshot_model.restored(run.now);
        self.oracle_restarts += 1;
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        run.digest.add_u64(to as u64);
        run.digest.add(&bytes);
        if to == 0 {
            self.request(run, &bytes)
        } else {
            self.answer(run, to, &bytes)
        }
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        self.expire(run)?;
        self.workload(run);
        let o = &mut self.oracle;
        if o.registry.dirty() {
            o.snapshot = o.registry.snapshot();
            o.snapshot_model = o.model.clone();
            let again = Registry::restore(&o.snapshot, run.now, o.model.max)
                .map(|mut r| r.snapshot())
                .map_err(|e| run.fail(format!("the registry's own snapshot is refused: {e}")))?;
            if again != o.snapshot {
                return Err(run.fail("a restored snapshot snapshots to other bytes"));
            }
        }
        Ok(())
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = min_opt(run.next_restart(), self.oracle.registry.poll_timeout());
        next = min_opt(next, self.resync_at.map(Instant));
        for s in &self.servers {
            let t = if s.up {
                s.next_renew.min(s.next_query)
            } else {
                s.back_at
            };
            next = min_opt(next, Some(Instant(t)));
        }
        next
    }

    fn heal(&mut self, run: &mut Run) {
        // Servers down come back now: liveness is about every one of them.
        for s in self.servers.iter_mut().filter(|s| !s.up) {
            s.back_at = run.ns();
        }
    }

    fn done(&self, run: &Run) -> bool {
        run.healed && run.ns() >= self.settled_at
    }

    fn stalled(&self, _run: &Run) -> String {
        "the run did not settle".into()
    }

    fn finish(self, run: &mut Run) -> Result<OracleSimReport, Violation> {
        let o = &self.oracle;
        for (k, s) in self.servers.iter().enumerate() {
            let i = k + 1;
            if o.registry.lookup(s.addr) != Some(s.reg.location) {
                return Err(run.fail(format!(
                    "liveness: server {i} ({}) is not found at {} after healing",
                    s.addr, s.reg.location
                )));
            }
            let want: BTreeMap<Address, SocketAddrV4> = o
                .model
                .matching(&s.reg.notifiers, s.addr)
                .into_iter()
                .collect();
            if s.view != want {
                return Err(run.fail(format!(
                    "liveness: server {i} sees {:?}, the registry has {want:?}",
                    s.view
                )));
            }
        }
        let mut r = self.r;
        r.seed = run.seed;
        r.faults = self.faults;
        r.net = run.net.counters.clone();
        r.oracle_restarts = self.oracle_restarts;
        r.end_ns = run.ns();
        r.digest = run.digest.0;
        Ok(r)
    }
}
