//! RPC in the simulator: clients calling servers (one or several at once, complete on the
//! first, k or all answers) over the seeded network, with crashes and restarts of both, slow
//! and failing handlers, and small reply caches.
//!
//! Safety phase (faults on), then a liveness phase (faults healed, no crashes): each client
//! calls every live server and must get every answer. Checkers, after every step:
//! - **at most once**: no server incarnation executes one call (client incarnation, call id)
//!   twice; a restarted server's new incarnation runs a call again only if its requests name
//!   no server incarnation (its client had not heard from that server when it started it;
//!   see docs/ARCHITECTURE.md), and those are counted apart;
//! - **integrity**: every result a client gets is the function of the request its server
//!   computes, from a server the call went to, for a call that server executed; every failure
//!   is one the server reported;
//! - **outcomes**: each server answers a call at most once in its outcome; `missing` is
//!   exactly the servers that did not answer; a call complete has enough answers, one out of
//!   time has too few and ended at its deadline, not before; no call outlives its deadline.

use crate::harness::{self, draw_restarts, min_opt, Plan, Run, Violation, World};
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{node_address, Digest, NodeId};
use std::collections::{HashMap, HashSet};
use txcast_proto::addr::Address;
use txcast_proto::rng::Rng;
use txcast_proto::rpc::msg::{self, RpcHeader, RPC_HEADER_BYTES};
use txcast_proto::rpc::{
    CallId, Client, ClientCounters, Completion, End, RemoteError, RpcConfig, Server,
    ServerCounters, Status, Token, Verdict,
};
use txcast_proto::time::Instant;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct RpcSimOptions {
    pub servers: usize,
    pub clients: usize,
    /// Calls each client starts in the safety phase.
    pub calls_per_client: u32,
    pub safety_ns: u64,
    pub faults: bool,
    /// With `faults`, let the seed cut the network in two now and then.
    pub partitions: bool,
    /// With `faults`, let the seed clog paths now and then.
    pub clogs: bool,
    /// Some handlers take up to 30 ms (and so outlive short deadlines).
    pub slow_handlers: bool,
}

impl Default for RpcSimOptions {
    fn default() -> Self {
        RpcSimOptions {
            servers: 3,
            clients: 3,
            calls_per_client: 120,
            safety_ns: 3_000 * MS,
            faults: true,
            partitions: true,
            clogs: true,
            slow_handlers: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RpcSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    pub crashes: usize,
    pub calls: u64,
    pub complete: u64,
    pub timed_out: u64,
    pub executions: u64,
    /// Calls executed again by a restarted server (its memory lost in the crash).
    pub executed_after_restart: u64,
    pub client: ClientCounters,
    pub server: ServerCounters,
    pub net: NetCounters,
    pub end_ns: u64,
    pub digest: u64,
}

/// What a server answers to `payload`: a digest of it, so the checker can recompute it.
fn result_of(payload: &[u8]) -> Vec<u8> {
    let mut d = Digest::default();
    d.add(payload);
    d.0.to_le_bytes().to_vec()
}

/// Whether the handler fails this request (decided by its bytes, so it is checkable).
fn fails(payload: &[u8]) -> bool {
    payload.first().is_some_and(|b| b % 7 == 0)
}

struct SimServer {
    server: Server,
    incarnation: u32,
    /// Calls whose handler is still "running": (reply at, token, deadline, payload, the
    /// server incarnation the request that started it named).
    running: Vec<(Instant, Token, Instant, Vec<u8>, u64)>,
}

/// A call as the checker knows it: destinations, answers needed, start, deadline, payload.
type CallRecord = (Vec<Address>, usize, Instant, Instant, Vec<u8>);

struct SimClient {
    client: Client,
    incarnation: u64,
    started: u32,
    next_call_at: Instant,
    /// Outstanding calls: id -> (destinations, need, start, deadline, payload).
    calls: HashMap<u64, CallRecord>,
}

/// Limits drawn per seed. A server remembers at least `shares` calls and client records of
/// every client (one, or one per server when servers hand calls on to each other): with
/// fewer, a client can be refused (`Busy`) for as long as the others' calls stay in their
/// windows, past the liveness phase's deadline, as the bounds intend.
fn rpc_config(rng: &mut Rng, clients: usize, shares: usize) -> RpcConfig {
    let retry_initial = (1 + rng.below(20)) * MS;
    RpcConfig {
        calls_max: 1 + rng.below(8) as usize,
        destinations_max: 8,
        retry_initial: std::time::Duration::from_nanos(retry_initial),
        retry_max: std::time::Duration::from_nanos(retry_initial * (1 + rng.below(8))),
        replies_max: clients * shares + rng.below(40) as usize,
        clients_max: clients * shares + rng.below(4) as usize,
        // Longer than any delay the network can give a packet (delay and clogs): the
        // assumption at-most-once rests on.
        packet_lifetime: std::time::Duration::from_millis(100),
        ..RpcConfig::default()
    }
}

/// (server, server incarnation, server called, client address, client incarnation, call id)
/// executed: the server called is the executing one, or the one that handed the call on.
type Run1 = (NodeId, u32, Address, Address, u64, u64);

struct RpcWorld {
    opts: RpcSimOptions,
    cfg: RpcConfig,
    /// Servers guard against replays (`Server::guard_replays`, as with a cluster key).
    guard: bool,
    rng: Rng,
    /// Forwarding and probes draw from their own generator, so the rest of a seed's run draws
    /// as it did before they existed.
    forward_rng: Rng,
    forward: f64,
    probe: f64,
    slow: f64,
    faults: FaultConfig,
    crashes: usize,
    servers: Vec<SimServer>,
    clients: Vec<SimClient>,
    executed: HashSet<Run1>,
    /// (server called, client address, client incarnation, call id) executed by any server
    /// or incarnation.
    executed_any: HashSet<(Address, Address, u64, u64)>,
    executed_after_restart: u64,
    /// Per call handed on, (client, client incarnation, call id, forwarder) -> what the
    /// client's request named at the forwarder, and the incarnation of the target the
    /// forwarder was told to name.
    forwarded_named: HashMap<(Address, u64, u64, Address), (u64, u64)>,
    /// (client node, incarnation, call id, server node) of requests a server got whole.
    delivered_whole: HashSet<(NodeId, u64, u64, NodeId)>,
    executions: u64,
    calls: u64,
    complete: u64,
    timed_out: u64,
    buf: Vec<u8>,
    /// Liveness: after healing and a quiet spell, each client calls every server once more.
    liveness_at: u64,
    liveness_calls: HashSet<(usize, u64)>,
    liveness_started: bool,
}

pub fn run_rpc(seed: u64, opts: &RpcSimOptions) -> Result<RpcSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = FaultConfig::for_seed(seed, &mut rng, opts.faults, opts.partitions, opts.clogs);
    if faults.delay_max_ns + faults.clog_max_ns >= 100 * MS {
        return Err(Violation::at_start(
            "rpc",
            seed,
            "the network's delays exceed the packet lifetime",
        ));
    }
    let mut forward_rng = Rng::new(seed ^ 0xf0f0_f0f0);
    let forward = if forward_rng.chance(0.4) {
        forward_rng.below(400) as f64 / 1000.0
    } else {
        0.0
    };
    let probe = if forward_rng.chance(0.3) {
        forward_rng.below(600) as f64 / 1000.0
    } else {
        0.0
    };
    let shares = if forward > 0.0 { opts.servers } else { 1 };
    let mut cfg = rpc_config(&mut rng, opts.clients, shares);
    // Now and then a packet lifetime just above the network's longest delay, so that copies
    // arriving late (one hop, or two for a call handed on) test the bound at-most-once rests
    // on.
    if forward_rng.chance(0.3) {
        cfg.packet_lifetime =
            std::time::Duration::from_nanos(faults.delay_max_ns + faults.clog_max_ns + MS);
    }
    let slow = if rng.chance(0.5) && opts.slow_handlers {
        rng.below(500) as f64 / 1000.0
    } else {
        0.0
    };
    let (ns, nc) = (opts.servers, opts.clients);
    let n = ns + nc;
    let net = Network::new(n, faults.clone(), rng.fork());
    // Odd seeds run the servers with the replay guard (chosen by the seed, not drawn, so the
    // other seeds' runs stay as they were).
    let guard = seed % 2 == 1;
    let servers = (0..ns)
        .map(|_| SimServer {
            server: new_server(cfg, 1, guard),
            incarnation: 1,
            running: Vec::new(),
        })
        .collect();
    let clients = (0..nc)
        .map(|_| SimClient {
            client: Client::new(cfg, 1).expect("config"),
            incarnation: 1,
            started: 0,
            next_call_at: Instant(rng.below(10 * MS)),
            calls: HashMap::new(),
        })
        .collect();
    // Crashes: servers and clients alike.
    let restarts = draw_restarts(&mut rng, opts.faults, 0.4, 4, opts.safety_ns, n);
    let plan = Plan::event(
        "rpc",
        seed,
        net,
        restarts.clone(),
        opts.safety_ns,
        opts.safety_ns + 2_000 * MS,
    );
    let world = RpcWorld {
        opts: opts.clone(),
        guard,
        rng,
        forward_rng,
        forward,
        probe,
        slow,
        faults,
        crashes: restarts.len(),
        servers,
        clients,
        executed: HashSet::new(),
        executed_any: HashSet::new(),
        executed_after_restart: 0,
        forwarded_named: HashMap::new(),
        delivered_whole: HashSet::new(),
        executions: 0,
        calls: 0,
        complete: 0,
        timed_out: 0,
        buf: vec![0u8; cfg.message_bytes_max],
        cfg,
        liveness_at: opts.safety_ns + 500 * MS,
        liveness_calls: HashSet::new(),
        liveness_started: false,
    };
    harness::run(world, plan)
}

/// The fixed part of the run: an arrival, handlers, timers, calls, outcomes and outputs.
impl RpcWorld {
    fn arrival(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        let (now, ns) = (run.now, self.opts.servers);
        let incarnations: Vec<u64> = self.servers.iter().map(|s| s.incarnation as u64).collect();
        let (from, body) = unstamp(&bytes);
        let Ok((header, payload)) = msg::decode(body) else {
            return Err(run.fail(format!("node {to} got a malformed message")));
        };
        match header {
            RpcHeader::Request(r) => {
                if to >= ns {
                    return Err(run.fail("a request reached a client"));
                }
                // As a long request's transfer completing: its next copies may be probes.
                self.delivered_whole
                    .insert((from.site as usize, r.incarnation, r.call_id, to));
                let s = &mut self.servers[to];
                if let Verdict::Execute {
                    token,
                    deadline,
                    request_type,
                } = s.server.handle_request(now, from, &r)
                {
                    // Some servers hand some calls on to another (forward_request).
                    if ns > 1 && self.forward > 0.0 && self.forward_rng.chance(self.forward) {
                        let other = (to + 1 + self.forward_rng.below(ns as u64 - 1) as usize) % ns;
                        // The forwarder names the target's incarnation (as one that
                        // called it before knows it).
                        let key = (
                            token.client,
                            token.incarnation,
                            token.call_id,
                            node_address(to),
                        );
                        self.forwarded_named
                            .insert(key, (r.server_incarnation, incarnations[other]));
                        s.server.forward(
                            token,
                            node_address(other),
                            incarnations[other],
                            request_type,
                            r.deadline_us,
                            payload,
                        );
                        return Ok(());
                    }
                    let at = if self.slow > 0.0 && self.rng.chance(self.slow) {
                        Instant(now.0 + self.rng.below(30 * MS))
                    } else {
                        now
                    };
                    let named = r.server_incarnation;
                    s.running
                        .push((at, token, deadline, payload.to_vec(), named));
                }
            }
            RpcHeader::Probe(r) => {
                if to >= ns {
                    return Err(run.fail("a self.probe reached a client"));
                }
                // A probe never executes anything.
                let v = self.servers[to].server.handle_probe(now, from, &r);
                if matches!(v, Verdict::Execute { .. }) {
                    return Err(run.fail("a self.probe was self.executed"));
                }
            }
            RpcHeader::Forwarded(r, client) => {
                if to >= ns {
                    return Err(run.fail("a forwarded request reached a client"));
                }
                let s = &mut self.servers[to];
                if let Verdict::Execute {
                    token, deadline, ..
                } = s.server.handle_forwarded(now, from, client, &r)
                {
                    // Protected only if the client named the forwarder's incarnation and
                    // the forwarder named ours.
                    // (What the server put in the header is not trusted: what it was told
                    // to name is.)
                    let key = (token.client, token.incarnation, token.call_id, from);
                    let (client_named, told) =
                        self.forwarded_named.get(&key).copied().unwrap_or((0, 0));
                    let named = if client_named == 0 { 0 } else { told };
                    s.running
                        .push((now, token, deadline, payload.to_vec(), named));
                }
            }
            RpcHeader::Reply(r) => {
                if to < ns {
                    return Err(run.fail("a reply reached a server"));
                }
                if r.status == Status::Resend {
                    self.delivered_whole.remove(&(
                        to,
                        r.incarnation,
                        r.call_id,
                        from.site as usize,
                    ));
                }
                self.clients[to - ns].client.handle_reply(from, &r, payload);
            }
            RpcHeader::ForwardedReply(r, called) => {
                if to < ns {
                    return Err(run.fail("a reply reached a server"));
                }
                if r.status == Status::Resend {
                    let server = called.site as usize;
                    self.delivered_whole
                        .remove(&(to, r.incarnation, r.call_id, server));
                }
                self.clients[to - ns]
                    .client
                    .handle_forwarded_reply(from, called, &r, payload);
            }
        }
        Ok(())
    }

    fn handlers(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        // Handlers that finish now.
        for (k, s) in self.servers.iter_mut().enumerate() {
            let mut i = 0;
            while i < s.running.len() {
                if s.running[i].0 > now {
                    i += 1;
                    continue;
                }
                let (_, token, deadline, payload, named) = s.running.swap_remove(i);
                let (status, out) = if now > deadline {
                    (Status::DeadlinePassed, Vec::new())
                } else {
                    let called = token.called.unwrap_or(node_address(k));
                    let key = (
                        k,
                        s.incarnation,
                        called,
                        token.client,
                        token.incarnation,
                        token.call_id,
                    );
                    if !self.executed.insert(key) {
                        return Err(run.fail(format!(
                            "server {k} (incarnation {}) self.executed call {} of {} (incarnation {}) twice",
                            s.incarnation, token.call_id, token.client, token.incarnation
                        )));
                    }
                    self.executions += 1;
                    if !self.executed_any.insert((
                        called,
                        token.client,
                        token.incarnation,
                        token.call_id,
                    )) {
                        self.executed_after_restart += 1;
                        // Allowed only for a call started before its client heard from this
                        // server at all (its requests name no incarnation).
                        if named != 0 {
                            return Err(run.fail(format!(
                                "server {k} (incarnation {}) ran call {} of {} again, though \
                                 its request named incarnation {named}",
                                s.incarnation, token.call_id, token.client
                            )));
                        }
                    }
                    if fails(&payload) {
                        (Status::Failed, b"refused".to_vec())
                    } else {
                        (Status::Ok, result_of(&payload))
                    }
                };
                s.server.reply(token, status, &out);
            }
        }
        Ok(())
    }

    fn timers(&mut self, run: &mut Run) {
        let now = run.now;
        // Timers.
        for s in self.servers.iter_mut() {
            if s.server.poll_timeout().is_some_and(|t| t <= now) {
                s.server.handle_timeout(now);
            }
        }
        for c in self.clients.iter_mut() {
            if c.client.poll_timeout().is_some_and(|t| t <= now) {
                c.client.handle_timeout(now);
            }
        }
    }

    fn new_calls(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (now, ns) = (run.now, self.opts.servers);
        // New calls.
        for (k, c) in self.clients.iter_mut().enumerate() {
            let me = node_address(ns + k);
            if !run.healed && c.started < self.opts.calls_per_client && c.next_call_at <= now {
                c.next_call_at = Instant(now.0 + self.rng.below(8 * MS));
                let m = 1 + self.rng.below(ns as u64) as usize;
                let mut dests: Vec<Address> = (0..ns).map(node_address).collect();
                for i in (1..dests.len()).rev() {
                    dests.swap(i, self.rng.below(i as u64 + 1) as usize);
                }
                dests.truncate(m);
                let completion = match self.rng.below(3) {
                    0 => Completion::First,
                    1 => Completion::Quorum(1 + self.rng.below(m as u64) as usize),
                    _ => Completion::All,
                };
                let need = match completion {
                    Completion::First => 1,
                    Completion::Quorum(q) => q,
                    Completion::All => m,
                };
                let deadline = (5 + self.rng.below(200)) * MS;
                let mut payload = vec![self.rng.below(256) as u8; 1 + self.rng.below(40) as usize];
                payload.extend_from_slice(&me.site.to_le_bytes());
                if let Ok(id) = c.client.call(
                    now,
                    &dests,
                    self.rng.below(4) as u16,
                    &payload,
                    completion,
                    std::time::Duration::from_nanos(deadline),
                ) {
                    c.started += 1;
                    self.calls += 1;
                    c.calls
                        .insert(id.0, (dests, need, now, Instant(now.0 + deadline), payload));
                }
            }
            if !self.liveness_started && now.0 >= self.liveness_at {
                let all: Vec<Address> = (0..ns).map(node_address).collect();
                let id = c
                    .client
                    .call(
                        now,
                        &all,
                        0,
                        &[1, 2, 3],
                        Completion::All,
                        std::time::Duration::from_millis(1000),
                    )
                    .map_err(|e| run.fail(format!("liveness call refused: {e}")))?;
                c.calls.insert(
                    id.0,
                    (all, ns, now, Instant(now.0 + 1000 * MS), vec![1, 2, 3]),
                );
                self.liveness_calls.insert((k, id.0));
                self.calls += 1;
            }
        }
        if !self.liveness_started && now.0 >= self.liveness_at {
            self.liveness_started = true;
        }
        Ok(())
    }

    fn outcomes(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (now, ns) = (run.now, self.opts.servers);
        // Outcomes and the checker.
        for (k, c) in self.clients.iter_mut().enumerate() {
            let me = node_address(ns + k);
            while let Some((CallId(id), o)) = c.client.poll_event() {
                let Some((dests, need, start, deadline, payload)) = c.calls.remove(&id) else {
                    return Err(run.fail(format!("client {k}: an outcome for unknown call {id}")));
                };
                let mut answered = HashSet::new();
                for (from, r) in &o.replies {
                    let Some(s) = dests.iter().position(|d| d == from) else {
                        return Err(run.fail(format!(
                            "client {k}: call {id} answered by {from}, not asked"
                        )));
                    };
                    if !answered.insert(*from) {
                        return Err(
                            run.fail(format!("client {k}: call {id} answered twice by {from}"))
                        );
                    }
                    debug_assert_eq!(*from, dests[s]);
                    let ran = self.executed_any.contains(&(*from, me, c.incarnation, id));
                    match r {
                        Ok(bytes) => {
                            if !ran || fails(&payload) || *bytes != result_of(&payload) {
                                return Err(run.fail(format!(
                                    "client {k}: call {id} got a result from {from} it never computed"
                                )));
                            }
                        }
                        Err(RemoteError::Failed(m)) => {
                            if !ran || !fails(&payload) || m != "refused" {
                                return Err(run.fail(format!(
                                    "client {k}: call {id} got a failure from {from} it never reported"
                                )));
                            }
                        }
                        Err(RemoteError::DeadlinePassed) => {}
                        // The server restarted since the client last heard from it (or the
                        // one it handed the call on to did).
                        Err(RemoteError::Restarted) => {
                            if self.servers.iter().all(|s| s.incarnation < 2) {
                                return Err(run.fail(format!(
                                    "client {k}: call {id}: Restarted from {from}, never restarted"
                                )));
                            }
                        }
                        Err(e) => {
                            return Err(run.fail(format!("client {k}: call {id}: unexpected {e}")));
                        }
                    }
                }
                let missing: HashSet<Address> = dests
                    .iter()
                    .filter(|d| !answered.contains(d))
                    .copied()
                    .collect();
                if o.missing.iter().copied().collect::<HashSet<_>>() != missing
                    || o.missing.len() != missing.len()
                {
                    return Err(run.fail(format!("client {k}: call {id}: wrong missing list")));
                }
                match o.end {
                    End::Complete => {
                        self.complete += 1;
                        if o.replies.len() < need {
                            return Err(run.fail(format!(
                                "client {k}: call {id} self.complete with too few answers"
                            )));
                        }
                    }
                    End::DeadlinePassed => {
                        self.timed_out += 1;
                        if o.replies.len() >= need || now < deadline {
                            return Err(run.fail(format!(
                                "client {k}: call {id} out of time wrongly ({} answers, at {} of {})",
                                o.replies.len(),
                                now.0 - start.0,
                                deadline.0 - start.0
                            )));
                        }
                        if self.liveness_calls.contains(&(k, id)) {
                            return Err(run.fail(format!(
                                "liveness: client {k}'s call to every server got no answer from {:?}",
                                o.missing
                            )));
                        }
                    }
                    End::Cancelled => {
                        return Err(run.fail("a cancelled call raised an event"));
                    }
                }
                self.liveness_calls.remove(&(k, id));
                run.digest.add_u64(id ^ now.0);
            }
            if let Some((id, _)) = c.calls.iter().find(|(_, v)| v.3 .0 + MS < now.0) {
                return Err(run.fail(format!("client {k}: call {id} outlived its deadline")));
            }
        }
        Ok(())
    }

    fn output(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (now, ns) = (run.now, self.opts.servers);
        let n = ns + self.opts.clients;
        // Output.
        for (k, s) in self.servers.iter_mut().enumerate() {
            while let Some((to, len)) = s.server.poll_transmit(&mut self.buf) {
                let dst = to.site as usize;
                // To a client (an answer), or to another server (a call handed on).
                if dst >= n || dst == k {
                    return Err(run.fail(format!("server {k} answered {to}")));
                }
                let m = stamp(&self.buf[..len], k);
                run.net.send(now, k, dst, &m);
            }
        }
        for (k, c) in self.clients.iter_mut().enumerate() {
            while let Some((to, len)) = c.client.poll_transmit(now, &mut self.buf) {
                let dst = to.site as usize;
                // Some copies of requests the server got whole go as probes (the header alone,
                // as for a request whose payload went as a long message): the server answers
                // them from memory or asks for the whole request.
                let key = (
                    ns + k,
                    u64::from_le_bytes(self.buf[8..16].try_into().expect("8 bytes")),
                    u64::from_le_bytes(self.buf[16..24].try_into().expect("8 bytes")),
                    dst,
                );
                let len = if self.probe > 0.0
                    && self.delivered_whole.contains(&key)
                    && self.forward_rng.chance(self.probe)
                {
                    self.buf[1] = 5;
                    RPC_HEADER_BYTES
                } else {
                    len
                };
                let m = stamp(&self.buf[..len], ns + k);
                run.net.send(now, ns + k, dst, &m);
            }
        }
        Ok(())
    }
}

impl World for RpcWorld {
    type Report = RpcSimReport;

    fn restart(&mut self, _run: &mut Run, k: NodeId) {
        let ns = self.opts.servers;
        if k < ns {
            let s = &mut self.servers[k];
            s.incarnation += 1;
            s.server = new_server(self.cfg, s.incarnation as u64, self.guard);
            s.running.clear();
        } else {
            let c = &mut self.clients[k - ns];
            c.incarnation += 1;
            c.client = Client::new(self.cfg, c.incarnation).expect("config");
            c.calls.clear();
        }
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.arrival(run, to, bytes)
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        self.handlers(run)?;
        self.timers(run);
        self.new_calls(run)?;
        self.outcomes(run)?;
        self.output(run)
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = run.next_restart();
        for s in &self.servers {
            next = min_opt(next, s.server.poll_timeout());
            for r in &s.running {
                next = min_opt(next, Some(r.0));
            }
        }
        for c in &self.clients {
            next = min_opt(next, c.client.poll_timeout());
            if !run.healed && c.started < self.opts.calls_per_client {
                next = min_opt(next, Some(c.next_call_at));
            }
        }
        if !self.liveness_started {
            next = min_opt(next, Some(Instant(self.liveness_at)));
        }
        next
    }

    fn done(&self, _run: &Run) -> bool {
        self.liveness_started
            && self.liveness_calls.is_empty()
            && self.clients.iter().all(|c| c.calls.is_empty())
    }

    fn stalled(&self, _run: &Run) -> String {
        format!(
            "{} calls to every server never ended",
            self.liveness_calls.len()
        )
    }

    fn finish(self, run: &mut Run) -> Result<RpcSimReport, Violation> {
        let mut client = ClientCounters::default();
        for c in &self.clients {
            client.add(&c.client.counters);
        }
        let mut server = ServerCounters::default();
        for s in &self.servers {
            server.add(&s.server.counters);
        }
        Ok(RpcSimReport {
            seed: run.seed,
            faults: self.faults,
            crashes: self.crashes,
            calls: self.calls,
            complete: self.complete,
            timed_out: self.timed_out,
            executions: self.executions,
            executed_after_restart: self.executed_after_restart,
            client,
            server,
            net: run.net.counters.clone(),
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        })
    }
}

/// The simulated network carries bytes only: the sender's node rides in a trailer the receiving
/// side strips (a real port knows its datagrams' source from the packet header).
fn stamp(m: &[u8], from: NodeId) -> Vec<u8> {
    let mut v = m.to_vec();
    v.extend_from_slice(&(from as u16).to_le_bytes());
    v
}

/// The sender's address and the message, from a stamped datagram.
fn unstamp(bytes: &[u8]) -> (Address, &[u8]) {
    let n = bytes.len();
    let from = u16::from_le_bytes([bytes[n - 2], bytes[n - 1]]) as usize;
    (node_address(from), &bytes[..n - 2])
}

/// A server of `incarnation`, guarding against replays if `guard`.
fn new_server(cfg: RpcConfig, incarnation: u64, guard: bool) -> Server {
    let mut s = Server::with_incarnation(cfg, incarnation).expect("config");
    if guard {
        s.guard_replays();
    }
    s
}
