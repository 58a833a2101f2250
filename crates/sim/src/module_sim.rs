//! The module host (`txcast_proto::module`) over reliable links under simulated faults, with
//! its checker: control messages reach handlers once and in order per pair of incarnations,
//! only the incarnation they were meant for takes them, nothing is invented, timeouts fire once
//! and never early, and after healing a module whose peer restarted learns it, so a message
//! sent then reaches the peer's current incarnation.

use crate::harness::{self, draw_restarts, min_opt, Plan, Run, Violation, World};
use crate::link_sim::LinkNode;
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{node_address, Node, NodeId};
use std::collections::HashMap;
use std::time::Duration;
use txcast_proto::link::{LinkConfig, LinkSendError};
use txcast_proto::module::{
    Context, Control, Host, HostCounters, Instruction, InstructionId, Module, Registration,
};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::Address;

const MODULE: u16 = 5;
const KEY: u64 = 0xab;
const SEND: u16 = 1;
const NUMBER: u16 = 0x300;
/// Steps one run may take; a run past it is stuck (time no longer advances).
const STEPS_MAX: u64 = 20_000_000;

/// Knobs of one module simulation.
#[derive(Clone, Debug)]
pub struct ModuleSimOptions {
    pub nodes: usize,
    /// Instructions each node issues during the safety phase (each sends one message).
    pub messages_per_node: u32,
    pub safety_ns: u64,
    pub liveness_ns: u64,
    pub faults: bool,
    /// With `faults`, let the seed cut the network in two now and then.
    pub partitions: bool,
    /// With `faults`, let the seed clog paths now and then.
    pub clogs: bool,
}

impl Default for ModuleSimOptions {
    fn default() -> Self {
        ModuleSimOptions {
            nodes: 3,
            messages_per_node: 300,
            safety_ns: 2_000_000_000,
            liveness_ns: 30_000_000_000,
            faults: true,
            partitions: true,
            clogs: true,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct ModuleSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    pub restarts: usize,
    pub delivered: u64,
    pub net: NetCounters,
    pub hosts: HostCounters,
    pub end_ns: u64,
    pub digest: u64,
}

/// One message as the checker sees it: sent by `from` (incarnation `inc`) to `to`, number
/// `counter` of that pair, meant for `to`'s incarnation `meant` (0: whichever).
#[derive(Clone, Copy, Debug)]
struct Sent {
    meant: u64,
}

enum Heard {
    /// Message `counter` from `from` (running `incarnation`), meant for our incarnation `meant`.
    Message {
        from: NodeId,
        incarnation: u64,
        counter: u32,
        meant: u64,
    },
    /// `on_peer_restart`.
    Restart { peer: NodeId, incarnation: u64 },
}

/// The simulated module: each instruction sends one numbered message to the peer named in
/// its arguments and arms a timer; it logs what arrives, what fires and the restarts it hears.
#[derive(Default)]
struct Numbered {
    me: NodeId,
    /// Next counter per destination node.
    next: Vec<u32>,
    /// What the handlers heard, in order.
    heard: Vec<Heard>,
    /// (token, fired at).
    fired: Vec<(u64, Instant)>,
    /// (to node, counter, meant) of every message sent.
    sent: Vec<(NodeId, u32, u64)>,
}

impl Module for Numbered {
    fn registration(&self) -> Registration {
        Registration {
            name: "numbered",
            instructions: &[SEND],
            controls: &[NUMBER],
        }
    }

    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let to = ins.args[0] as NodeId;
        let token = u64::from_le_bytes(ins.args[1..9].try_into().expect("9 bytes"));
        let delay = u64::from_le_bytes(ins.args[9..17].try_into().expect("17 bytes"));
        let meant = cx.peer_incarnation(node_address(to)).unwrap_or(0);
        let counter = self.next[to];
        let mut body = [0u8; 12];
        body[..4].copy_from_slice(&counter.to_le_bytes());
        body[4..].copy_from_slice(&meant.to_le_bytes());
        if cx.send(node_address(to), NUMBER, &body).is_ok() {
            self.next[to] += 1;
            self.sent.push((to, counter, meant));
        }
        let _ = cx.arm(cx.now() + Duration::from_nanos(delay), token);
        let _ = cx.complete(ins.id, 0, &[]);
    }

    fn on_control(&mut self, _cx: &mut Context<'_>, m: Control<'_>) {
        let counter = u32::from_le_bytes(m.body[..4].try_into().expect("checked below"));
        let meant = u64::from_le_bytes(m.body[4..12].try_into().expect("12 bytes"));
        self.heard.push(Heard::Message {
            from: m.from.site as NodeId,
            incarnation: m.incarnation,
            counter,
            meant,
        });
    }

    fn on_timeout(&mut self, cx: &mut Context<'_>, token: u64) {
        self.fired.push((token, cx.now()));
    }

    fn on_peer_restart(&mut self, _cx: &mut Context<'_>, peer: Address, incarnation: u64) {
        self.heard.push(Heard::Restart {
            peer: peer.site as NodeId,
            incarnation,
        });
    }
}

struct SimNode {
    links: LinkNode,
    host: Host,
}

impl SimNode {
    fn new(id: NodeId, n: usize, cfg: &LinkConfig, incarnation: u64, now: Instant) -> SimNode {
        let mut host = Host::new(node_address(id), incarnation, now);
        let module = Numbered {
            me: id,
            next: vec![0; n],
            ..Numbered::default()
        };
        host.load(MODULE, KEY, Box::new(module))
            .expect("one module");
        SimNode {
            links: LinkNode::with_incarnation(id, n, cfg, incarnation),
            host,
        }
    }

    fn module(&mut self) -> &mut Numbered {
        self.host.module_mut::<Numbered>(MODULE).expect("loaded")
    }

    /// Link deliveries into the host, the host's messages into the links.
    fn pump(&mut self, now: Instant, n: usize) {
        let me = self.module().me;
        for i in (0..n).filter(|&i| i != me) {
            let host = &mut self.host;
            while self
                .links
                .link(i)
                .poll_delivery(|m| {
                    let _ = host.handle_message(now, node_address(i), m);
                })
                .is_some()
            {}
        }
        while let Some((to, bytes)) = self.host.peek_transmit() {
            match self.links.link(to.site as NodeId).send(now, bytes) {
                Err(LinkSendError::Full) => break,
                _ => self.host.pop_transmit(),
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        min_opt(self.links.poll_timeout(), self.host.poll_timeout())
    }
}

/// The checker's state, indexed by node (`[j][i]`: what j knows of i).
struct ModuleWorld {
    opts: ModuleSimOptions,
    cfg: LinkConfig,
    rng: Rng,
    faults: FaultConfig,
    restarts: usize,
    nodes: Vec<SimNode>,
    incarnation: Vec<u64>,
    /// `sent[i][inc-1][j]`: every message incarnation inc of i sent to j, by counter.
    sent: Vec<Vec<Vec<Vec<Sent>>>>,
    /// `last[j][i]`: (incarnation of i, counter) last received by j's current incarnation.
    last: Vec<Vec<Option<(u64, u32)>>>,
    /// `believed[j][i]`: the incarnation of i that j's module last heard from or was told of.
    believed: Vec<Vec<Option<u64>>>,
    /// Timers armed: (node, incarnation, token) -> deadline.
    armed: HashMap<(NodeId, u64, u64), Instant>,
    issued: Vec<u32>,
    next_issue: Vec<Instant>,
    delivered: u64,
    token: u64,
    instruction: u64,
    /// After healing: two final rounds, each a message from every node to every other. The
    /// first may meet restarts its senders have not heard of (they learn them); the second
    /// must reach every current incarnation.
    final_at: [u64; 2],
    finals_sent: usize,
    /// (round, from, to, counter) of the final messages.
    finals: Vec<(usize, NodeId, NodeId, u32)>,
}

/// Runs one seed; `Err` describes the first violation, with the replay command.
pub fn run_module(seed: u64, opts: &ModuleSimOptions) -> Result<ModuleSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = FaultConfig::for_seed(seed, &mut rng, opts.faults, opts.partitions, opts.clogs);
    let mut cfg = LinkConfig {
        message_bytes_max: txcast_proto::module::msg::HEADER_BYTES
            + txcast_proto::module::msg::CONTROL_BODY_MAX,
        ..LinkConfig::default()
    };
    if rng.chance(0.5) {
        cfg.window_msgs = 16 + rng.below(100) as u32;
        cfg.recv_buffer_msgs = 32 + rng.below(100) as u32;
        cfg.send_buffer_msgs = cfg.window_msgs.max(cfg.recv_buffer_msgs) + 32;
    }
    cfg.validate()
        .map_err(|e| Violation::at_start("module", seed, format!("config: {e:?}")))?;
    let n = opts.nodes;
    let restarts = draw_restarts(&mut rng, opts.faults, 0.5, 3, opts.safety_ns, n);
    let settle = 2_000_000_000;
    let plan = Plan {
        steps_max: Some(STEPS_MAX),
        buf_bytes: cfg.packet_bytes_max,
        ..Plan::event(
            "module",
            seed,
            Network::new(n, faults.clone(), rng.fork()),
            restarts.clone(),
            opts.safety_ns,
            opts.safety_ns + opts.liveness_ns,
        )
    };
    let world = ModuleWorld {
        opts: opts.clone(),
        nodes: (0..n)
            .map(|i| SimNode::new(i, n, &cfg, 1, Instant::ZERO))
            .collect(),
        cfg,
        rng,
        faults,
        restarts: restarts.len(),
        incarnation: vec![1; n],
        sent: vec![vec![vec![Vec::new(); n]]; n],
        last: vec![vec![None; n]; n],
        believed: vec![vec![None; n]; n],
        armed: HashMap::new(),
        issued: vec![0; n],
        next_issue: vec![Instant::ZERO; n],
        delivered: 0,
        token: 0,
        instruction: 0,
        final_at: [opts.safety_ns + settle, opts.safety_ns + 2 * settle],
        finals_sent: 0,
        finals: Vec::new(),
    };
    harness::run(world, plan)
}

impl ModuleWorld {
    /// Node `i` is told to send a message to `to` and arm timer `token` `delay` ns on.
    fn issue(&mut self, now: Instant, i: NodeId, to: NodeId, delay: u64) {
        self.instruction += 1;
        self.token += 1;
        let mut args = [0u8; 17];
        args[0] = to as u8;
        args[1..9].copy_from_slice(&self.token.to_le_bytes());
        args[9..17].copy_from_slice(&delay.to_le_bytes());
        let host = &mut self.nodes[i].host;
        host.instruct(
            now,
            InstructionId(self.instruction),
            MODULE,
            KEY,
            SEND,
            &args,
        )
        .expect("instruction taken");
        while host.poll_event().is_some() {}
        self.armed
            .insert((i, self.incarnation[i], self.token), Instant(now.0 + delay));
    }

    /// What node `j`'s module sent, heard and fired since the last step, through the checker.
    fn check(&mut self, run: &mut Run, j: NodeId) -> Result<(), Violation> {
        let r = self.incarnation[j];
        let m = self.nodes[j].module();
        for (to, counter, meant) in m.sent.drain(..) {
            let list = &mut self.sent[j][r as usize - 1][to];
            debug_assert_eq!(list.len() as u32, counter);
            list.push(Sent { meant });
        }
        let heard: Vec<_> = m.heard.drain(..).collect();
        let fired: Vec<_> = m.fired.drain(..).collect();
        for h in heard {
            let (i, s, counter, meant) = match h {
                Heard::Restart { peer, incarnation } => {
                    if self.believed[j][peer].is_some_and(|k| incarnation <= k) {
                        return Err(run.fail(format!(
                            "node {j}.{r} told that {peer} restarted as {incarnation}, not newer than it knew"
                        )));
                    }
                    self.believed[j][peer] = Some(incarnation);
                    continue;
                }
                Heard::Message {
                    from,
                    incarnation,
                    counter,
                    meant,
                } => (from, incarnation, counter, meant),
            };
            match self.believed[j][i] {
                Some(k) if s > k => {
                    return Err(run.fail(format!(
                        "node {j}.{r}: a message from {i}.{s} before the module was told {i}.{k} was gone"
                    )))
                }
                Some(k) if s < k => {
                    return Err(run.fail(format!(
                        "node {j}.{r}: a message from {i}.{s} after {i}.{k} was heard"
                    )))
                }
                _ => self.believed[j][i] = Some(s),
            }
            let Some(msg) = self.sent[i]
                .get(s as usize - 1)
                .and_then(|v| v[j].get(counter as usize))
            else {
                return Err(run.fail(format!(
                    "node {j} got #{counter} from {i} (incarnation {s}), never sent"
                )));
            };
            if msg.meant != meant || (meant != 0 && meant != r) {
                return Err(run.fail(format!(
                    "node {j} (incarnation {r}) took #{counter} from {i}.{s} meant for {meant}"
                )));
            }
            if let Some((ls, lc)) = self.last[j][i] {
                if s < ls || (s == ls && counter <= lc) {
                    return Err(run.fail(format!(
                        "node {j}.{r} from {i}: #{counter} of {s} after #{lc} of {ls} (order or duplicate)"
                    )));
                }
                if s == ls {
                    for g in lc + 1..counter {
                        let skipped = self.sent[i][s as usize - 1][j][g as usize];
                        if skipped.meant == 0 || skipped.meant == r {
                            return Err(run.fail(format!(
                                "node {j}.{r} from {i}.{s}: #{g} (meant for {}) lost between #{lc} and #{counter}",
                                skipped.meant
                            )));
                        }
                    }
                }
            }
            self.last[j][i] = Some((s, counter));
            run.digest
                .add_u64(run.ns() ^ (i as u64) << 32 ^ counter as u64);
            self.delivered += 1;
        }
        for (tok, at) in fired {
            match self.armed.remove(&(j, r, tok)) {
                Some(deadline) if at >= deadline => {}
                Some(deadline) => {
                    return Err(run.fail(format!(
                        "node {j}: timer {tok} fired at {} before its deadline {}",
                        at.0, deadline.0
                    )))
                }
                None => {
                    return Err(run.fail(format!(
                        "node {j}: timer {tok} fired twice or was never armed"
                    )))
                }
            }
        }
        Ok(())
    }
}

impl World for ModuleWorld {
    type Report = ModuleSimReport;

    fn restart(&mut self, run: &mut Run, k: NodeId) {
        let n = self.nodes.len();
        self.incarnation[k] += 1;
        self.nodes[k] = SimNode::new(k, n, &self.cfg, self.incarnation[k], run.now);
        self.sent[k].push(vec![Vec::new(); n]);
        for other in 0..n {
            self.last[k][other] = None;
            self.believed[k][other] = None;
        }
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.nodes[to].links.handle_message(run.now, &bytes);
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (n, now) = (self.nodes.len(), run.now);
        for node in self.nodes.iter_mut() {
            if run.due(&node.links) {
                node.links.handle_timeout(now);
            }
            if node.host.poll_timeout().is_some_and(|t| t <= now) {
                node.host.handle_timeout(now);
            }
        }
        // Workload: instructions during the safety phase, then the final rounds.
        for i in 0..n {
            if !run.healed
                && self.issued[i] < self.opts.messages_per_node
                && self.next_issue[i] <= now
            {
                let j = (i + 1 + self.rng.below(n as u64 - 1) as usize) % n;
                let delay = self.rng.below(50_000_000);
                self.issue(now, i, j, delay);
                self.issued[i] += 1;
                self.next_issue[i] = Instant(now.0 + self.rng.below(4_000_000));
            }
        }
        if self.finals_sent < 2 && now.0 >= self.final_at[self.finals_sent] {
            for i in 0..n {
                for j in (0..n).filter(|&j| j != i) {
                    let counter = self.nodes[i].module().next[j];
                    self.issue(now, i, j, 1);
                    if self.nodes[i].module().next[j] == counter {
                        return Err(run.fail(format!(
                            "final round {}: node {i} could not send to {j}",
                            self.finals_sent
                        )));
                    }
                    self.finals.push((self.finals_sent, i, j, counter));
                }
            }
            self.finals_sent += 1;
        }
        for node in self.nodes.iter_mut() {
            node.pump(now, n);
        }
        for (i, node) in self.nodes.iter_mut().enumerate() {
            run.transmit(i, &mut node.links);
        }
        for j in 0..n {
            self.check(run, j)?;
        }
        Ok(())
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
        for i in 0..self.nodes.len() {
            if !run.healed && self.issued[i] < self.opts.messages_per_node {
                next = min_opt(next, Some(self.next_issue[i]));
            }
        }
        if self.finals_sent < 2 {
            next = min_opt(next, Some(Instant(self.final_at[self.finals_sent])));
        }
        next
    }

    fn done(&self, run: &Run) -> bool {
        let quiet = self.nodes.iter().all(|nd| {
            (0..self.nodes.len()).all(|j| j == nd.module_ref_me() || nd.links.link_ref(j).is_idle())
                && nd.host.outbox_len() == 0
        });
        self.finals_sent == 2 && quiet && run.ns() > self.final_at[1]
    }

    fn stalled(&self, _run: &Run) -> String {
        "the links did not go quiet after healing".to_string()
    }

    fn finish(self, run: &mut Run) -> Result<ModuleSimReport, Violation> {
        // Every timer of a live incarnation fired; the second final round reached everyone.
        if let Some(((node, inc, tok), _)) = self
            .armed
            .iter()
            .find(|((k, inc, _), _)| self.incarnation[*k] == *inc)
        {
            return Err(run.fail(format!("node {node}.{inc}: timer {tok} never fired")));
        }
        for &(round, i, j, counter) in &self.finals {
            let got =
                self.last[j][i].is_some_and(|(s, c)| s == self.incarnation[i] && c >= counter);
            if round == 1 && !got {
                return Err(run.fail(format!(
                    "liveness: node {i}'s final message #{counter} never reached node {j}.{}",
                    self.incarnation[j]
                )));
            }
        }
        let mut hosts = HostCounters::default();
        for node in &self.nodes {
            hosts.add(node.host.counters());
        }
        Ok(ModuleSimReport {
            seed: run.seed,
            faults: self.faults,
            restarts: self.restarts,
            delivered: self.delivered,
            net: run.net.counters.clone(),
            hosts,
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        })
    }
}

impl SimNode {
    fn module_ref_me(&self) -> NodeId {
        self.host.address().site as NodeId
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_pass() {
        let opts = ModuleSimOptions::default();
        for seed in 0..200 {
            if let Err(e) = run_module(seed, &opts) {
                panic!("{e}");
            }
        }
    }

    #[test]
    fn same_seed_same_run() {
        let opts = ModuleSimOptions::default();
        let a = run_module(3, &opts).unwrap();
        let b = run_module(3, &opts).unwrap();
        assert_eq!(a.digest, b.digest);
        assert!(a.delivered > 0);
    }
}
