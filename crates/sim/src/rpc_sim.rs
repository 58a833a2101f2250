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

use crate::net::{FaultConfig, NetCounters, Network};
use crate::{Digest, NodeId};
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

fn address(node: NodeId) -> Address {
    Address::new(0, node as u16, 1, 0)
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

pub fn run_rpc(seed: u64, opts: &RpcSimOptions) -> Result<RpcSimReport, String> {
    let fail = |what: String| {
        format!("rpc simulation seed {seed}: {what}\n  replay: cargo run --release -- sim rpc --seed {seed}")
    };
    let mut rng = Rng::new(seed);
    let faults = if opts.faults {
        FaultConfig::swarm(&mut rng).with_clogs(&mut Rng::new(seed ^ 0xc10c_c10c))
    } else {
        FaultConfig::none()
    };
    if faults.delay_max_ns + faults.clog_max_ns >= 100 * MS {
        return Err(fail(
            "the network's delays exceed the packet lifetime".into(),
        ));
    }
    // Forwarding draws from its own generator, so the rest of a seed's run draws as it did
    // before forwarding existed.
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
    let mut net = Network::new(n, faults.clone(), rng.fork());
    let mut servers: Vec<SimServer> = (0..ns)
        .map(|_| SimServer {
            server: Server::with_incarnation(cfg, 1).expect("config"),
            incarnation: 1,
            running: Vec::new(),
        })
        .collect();
    let mut clients: Vec<SimClient> = (0..nc)
        .map(|_| SimClient {
            client: Client::new(cfg, 1).expect("config"),
            incarnation: 1,
            started: 0,
            next_call_at: Instant(rng.below(10 * MS)),
            calls: HashMap::new(),
        })
        .collect();
    // Crashes: (time, node), servers and clients alike.
    let mut crashes: Vec<(u64, NodeId)> = Vec::new();
    if opts.faults && rng.chance(0.4) {
        for _ in 0..1 + rng.below(4) {
            crashes.push((rng.below(opts.safety_ns), rng.below(n as u64) as usize));
        }
        crashes.sort_unstable();
    }
    let crash_count = crashes.len();
    // Checker state.
    // (server, server incarnation, server called, client address, client incarnation, call id)
    // executed: the server called is the executing one, or the one that handed the call on.
    type Run = (NodeId, u32, Address, Address, u64, u64);
    let mut executed: HashSet<Run> = HashSet::new();
    // (server called, client address, client incarnation, call id) executed by any server or
    // incarnation.
    let mut executed_any: HashSet<(Address, Address, u64, u64)> = HashSet::new();
    let mut executed_after_restart = 0u64;
    // What a client's request named at the forwarder, per call handed on: (client, client
    // incarnation, call id, forwarder).
    // and the incarnation of the target the forwarder was told to name.
    let mut forwarded_named: HashMap<(Address, u64, u64, Address), (u64, u64)> = HashMap::new();
    // (client node, incarnation, call id, server node) of requests a server got whole.
    let mut delivered_whole: HashSet<(NodeId, u64, u64, NodeId)> = HashSet::new();
    let mut executions = 0u64;
    let (mut calls, mut complete, mut timed_out) = (0u64, 0u64, 0u64);
    let mut digest = Digest::default();
    let mut buf = vec![0u8; cfg.message_bytes_max];
    let mut now = Instant::ZERO;
    let mut healed = false;
    let end_ns = opts.safety_ns + 2_000 * MS;
    // Liveness: after healing and a quiet spell, each client calls every server once more.
    let liveness_at = opts.safety_ns + 500 * MS;
    let mut liveness_calls: HashMap<(usize, u64), ()> = HashMap::new();
    let mut liveness_started = false;
    loop {
        if !healed && now.0 >= opts.safety_ns {
            net.heal();
            healed = true;
        }
        if !healed {
            net.step_partitions();
            net.step_clogs(now);
        }
        while crashes.first().is_some_and(|&(t, _)| t <= now.0) {
            let (_, k) = crashes.remove(0);
            digest.add_u64(now.0 ^ k as u64);
            if k < ns {
                let s = &mut servers[k];
                s.incarnation += 1;
                s.server = Server::with_incarnation(cfg, s.incarnation as u64).expect("config");
                s.running.clear();
            } else {
                let c = &mut clients[k - ns];
                c.incarnation += 1;
                c.client = Client::new(cfg, c.incarnation).expect("config");
                c.calls.clear();
            }
        }
        // Arrivals.
        while let Some((to, bytes)) = net.pop_due(now) {
            let incarnations: Vec<u64> = servers.iter().map(|s| s.incarnation as u64).collect();
            let (from, body) = unstamp(&bytes);
            let Ok((header, payload)) = msg::decode(body) else {
                return Err(fail(format!("node {to} got a malformed message")));
            };
            match header {
                RpcHeader::Request(r) => {
                    if to >= ns {
                        return Err(fail("a request reached a client".into()));
                    }
                    // As a long request's transfer completing: its next copies may be probes.
                    delivered_whole.insert((from.site as usize, r.incarnation, r.call_id, to));
                    let s = &mut servers[to];
                    if let Verdict::Execute {
                        token,
                        deadline,
                        request_type,
                    } = s.server.handle_request(now, from, &r)
                    {
                        // Some servers hand some calls on to another (forward_request).
                        if ns > 1 && forward > 0.0 && forward_rng.chance(forward) {
                            let other = (to + 1 + forward_rng.below(ns as u64 - 1) as usize) % ns;
                            // The forwarder names the target's incarnation (as one that
                            // called it before knows it).
                            let key = (token.client, token.incarnation, token.call_id, address(to));
                            forwarded_named
                                .insert(key, (r.server_incarnation, incarnations[other]));
                            s.server.forward(
                                token,
                                address(other),
                                incarnations[other],
                                request_type,
                                r.deadline_us,
                                payload,
                            );
                            continue;
                        }
                        let at = if slow > 0.0 && rng.chance(slow) {
                            Instant(now.0 + rng.below(30 * MS))
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
                        return Err(fail("a probe reached a client".into()));
                    }
                    // A probe never executes anything.
                    let v = servers[to].server.handle_probe(now, from, &r);
                    if matches!(v, Verdict::Execute { .. }) {
                        return Err(fail("a probe was executed".into()));
                    }
                }
                RpcHeader::Forwarded(r, client) => {
                    if to >= ns {
                        return Err(fail("a forwarded request reached a client".into()));
                    }
                    let s = &mut servers[to];
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
                            forwarded_named.get(&key).copied().unwrap_or((0, 0));
                        let named = if client_named == 0 { 0 } else { told };
                        s.running
                            .push((now, token, deadline, payload.to_vec(), named));
                    }
                }
                RpcHeader::Reply(r) => {
                    if to < ns {
                        return Err(fail("a reply reached a server".into()));
                    }
                    if r.status == Status::Resend {
                        delivered_whole.remove(&(to, r.incarnation, r.call_id, from.site as usize));
                    }
                    clients[to - ns].client.handle_reply(from, &r, payload);
                }
                RpcHeader::ForwardedReply(r, called) => {
                    if to < ns {
                        return Err(fail("a reply reached a server".into()));
                    }
                    if r.status == Status::Resend {
                        let server = called.site as usize;
                        delivered_whole.remove(&(to, r.incarnation, r.call_id, server));
                    }
                    clients[to - ns]
                        .client
                        .handle_forwarded_reply(from, called, &r, payload);
                }
            }
        }
        // Handlers that finish now.
        for (k, s) in servers.iter_mut().enumerate() {
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
                    let called = token.called.unwrap_or(address(k));
                    let key = (
                        k,
                        s.incarnation,
                        called,
                        token.client,
                        token.incarnation,
                        token.call_id,
                    );
                    if !executed.insert(key) {
                        return Err(fail(format!(
                            "server {k} (incarnation {}) executed call {} of {} (incarnation {}) twice",
                            s.incarnation, token.call_id, token.client, token.incarnation
                        )));
                    }
                    executions += 1;
                    if !executed_any.insert((
                        called,
                        token.client,
                        token.incarnation,
                        token.call_id,
                    )) {
                        executed_after_restart += 1;
                        // Allowed only for a call started before its client heard from this
                        // server at all (its requests name no incarnation).
                        if named != 0 {
                            return Err(fail(format!(
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
        // Timers.
        for s in servers.iter_mut() {
            if s.server.poll_timeout().is_some_and(|t| t <= now) {
                s.server.handle_timeout(now);
            }
        }
        for c in clients.iter_mut() {
            if c.client.poll_timeout().is_some_and(|t| t <= now) {
                c.client.handle_timeout(now);
            }
        }
        // New calls.
        for (k, c) in clients.iter_mut().enumerate() {
            let me = address(ns + k);
            if !healed && c.started < opts.calls_per_client && c.next_call_at <= now {
                c.next_call_at = Instant(now.0 + rng.below(8 * MS));
                let m = 1 + rng.below(ns as u64) as usize;
                let mut dests: Vec<Address> = (0..ns).map(address).collect();
                for i in (1..dests.len()).rev() {
                    dests.swap(i, rng.below(i as u64 + 1) as usize);
                }
                dests.truncate(m);
                let completion = match rng.below(3) {
                    0 => Completion::First,
                    1 => Completion::Quorum(1 + rng.below(m as u64) as usize),
                    _ => Completion::All,
                };
                let need = match completion {
                    Completion::First => 1,
                    Completion::Quorum(q) => q,
                    Completion::All => m,
                };
                let deadline = (5 + rng.below(200)) * MS;
                let mut payload = vec![rng.below(256) as u8; 1 + rng.below(40) as usize];
                payload.extend_from_slice(&me.site.to_le_bytes());
                if let Ok(id) = c.client.call(
                    now,
                    &dests,
                    rng.below(4) as u16,
                    &payload,
                    completion,
                    std::time::Duration::from_nanos(deadline),
                ) {
                    c.started += 1;
                    calls += 1;
                    c.calls
                        .insert(id.0, (dests, need, now, Instant(now.0 + deadline), payload));
                }
            }
            if !liveness_started && now.0 >= liveness_at {
                let all: Vec<Address> = (0..ns).map(address).collect();
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
                    .map_err(|e| fail(format!("liveness call refused: {e}")))?;
                c.calls.insert(
                    id.0,
                    (all, ns, now, Instant(now.0 + 1000 * MS), vec![1, 2, 3]),
                );
                liveness_calls.insert((k, id.0), ());
                calls += 1;
            }
        }
        if !liveness_started && now.0 >= liveness_at {
            liveness_started = true;
        }
        // Outcomes and the checker.
        for (k, c) in clients.iter_mut().enumerate() {
            let me = address(ns + k);
            while let Some((CallId(id), o)) = c.client.poll_event() {
                let Some((dests, need, start, deadline, payload)) = c.calls.remove(&id) else {
                    return Err(fail(format!(
                        "client {k}: an outcome for unknown call {id}"
                    )));
                };
                let mut answered = HashSet::new();
                for (from, r) in &o.replies {
                    let Some(s) = dests.iter().position(|d| d == from) else {
                        return Err(fail(format!(
                            "client {k}: call {id} answered by {from}, not asked"
                        )));
                    };
                    if !answered.insert(*from) {
                        return Err(fail(format!(
                            "client {k}: call {id} answered twice by {from}"
                        )));
                    }
                    debug_assert_eq!(*from, dests[s]);
                    let ran = executed_any.contains(&(*from, me, c.incarnation, id));
                    match r {
                        Ok(bytes) => {
                            if !ran || fails(&payload) || *bytes != result_of(&payload) {
                                return Err(fail(format!(
                                    "client {k}: call {id} got a result from {from} it never computed"
                                )));
                            }
                        }
                        Err(RemoteError::Failed(m)) => {
                            if !ran || !fails(&payload) || m != "refused" {
                                return Err(fail(format!(
                                    "client {k}: call {id} got a failure from {from} it never reported"
                                )));
                            }
                        }
                        Err(RemoteError::DeadlinePassed) => {}
                        // The server restarted since the client last heard from it (or the
                        // one it handed the call on to did).
                        Err(RemoteError::Restarted) => {
                            if servers.iter().all(|s| s.incarnation < 2) {
                                return Err(fail(format!(
                                    "client {k}: call {id}: Restarted from {from}, never restarted"
                                )));
                            }
                        }
                        Err(e) => {
                            return Err(fail(format!("client {k}: call {id}: unexpected {e}")));
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
                    return Err(fail(format!("client {k}: call {id}: wrong missing list")));
                }
                match o.end {
                    End::Complete => {
                        complete += 1;
                        if o.replies.len() < need {
                            return Err(fail(format!(
                                "client {k}: call {id} complete with too few answers"
                            )));
                        }
                    }
                    End::DeadlinePassed => {
                        timed_out += 1;
                        if o.replies.len() >= need || now < deadline {
                            return Err(fail(format!(
                                "client {k}: call {id} out of time wrongly ({} answers, at {} of {})",
                                o.replies.len(),
                                now.0 - start.0,
                                deadline.0 - start.0
                            )));
                        }
                        if liveness_calls.contains_key(&(k, id)) {
                            return Err(fail(format!(
                                "liveness: client {k}'s call to every server got no answer from {:?}",
                                o.missing
                            )));
                        }
                    }
                    End::Cancelled => {
                        return Err(fail("a cancelled call raised an event".into()));
                    }
                }
                liveness_calls.remove(&(k, id));
                digest.add_u64(id ^ now.0);
            }
            if let Some((id, _)) = c.calls.iter().find(|(_, v)| v.3 .0 + MS < now.0) {
                return Err(fail(format!("client {k}: call {id} outlived its deadline")));
            }
        }
        // Output.
        for (k, s) in servers.iter_mut().enumerate() {
            while let Some((to, len)) = s.server.poll_transmit(&mut buf) {
                let dst = to.site as usize;
                // To a client (an answer), or to another server (a call handed on).
                if dst >= n || dst == k {
                    return Err(fail(format!("server {k} answered {to}")));
                }
                let m = stamp(&buf[..len], k);
                net.send(now, k, dst, &m);
            }
        }
        for (k, c) in clients.iter_mut().enumerate() {
            while let Some((to, len)) = c.client.poll_transmit(now, &mut buf) {
                let dst = to.site as usize;
                // Some copies of requests the server got whole go as probes (the header alone,
                // as for a request whose payload went as a long message): the server answers
                // them from memory or asks for the whole request.
                let key = (
                    ns + k,
                    u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
                    u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes")),
                    dst,
                );
                let len =
                    if probe > 0.0 && delivered_whole.contains(&key) && forward_rng.chance(probe) {
                        buf[1] = 5;
                        RPC_HEADER_BYTES
                    } else {
                        len
                    };
                let m = stamp(&buf[..len], ns + k);
                net.send(now, ns + k, dst, &m);
            }
        }
        if liveness_started
            && liveness_calls.is_empty()
            && clients.iter().all(|c| c.calls.is_empty())
        {
            break;
        }
        if now.0 > end_ns {
            return Err(fail(format!(
                "liveness: {} calls to every server never ended",
                liveness_calls.len()
            )));
        }
        // Next event.
        let mut next = net.next_arrival();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |x: Instant| x.min(t)));
            }
        };
        for s in &servers {
            consider(s.server.poll_timeout());
            for r in &s.running {
                consider(Some(r.0));
            }
        }
        for c in &clients {
            consider(c.client.poll_timeout());
            if !healed && c.started < opts.calls_per_client {
                consider(Some(c.next_call_at));
            }
        }
        if let Some(&(t, _)) = crashes.first() {
            consider(Some(Instant(t)));
        }
        if !healed {
            consider(Some(Instant(opts.safety_ns)));
        }
        if !liveness_started {
            consider(Some(Instant(liveness_at)));
        }
        now = match next {
            Some(t) if t > now => t,
            Some(_) => Instant(now.0 + 1),
            None => Instant(now.0 + MS),
        };
    }
    let mut client = ClientCounters::default();
    for c in &clients {
        client.add(&c.client.counters);
    }
    let mut server = ServerCounters::default();
    for s in &servers {
        server.add(&s.server.counters);
    }
    digest.add_u64(net.digest.0);
    Ok(RpcSimReport {
        seed,
        faults,
        crashes: crash_count,
        calls,
        complete,
        timed_out,
        executions,
        executed_after_restart,
        client,
        server,
        net: net.counters.clone(),
        end_ns: now.0,
        digest: digest.0,
    })
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
    (address(from), &bytes[..n - 2])
}
