//! The engine's core under simulated faults: each node is a port as the engine keeps it, a
//! [`LinkTable`] (bounded table of links, one timer wheel, back-pressure of a refused delivery)
//! behind the engine's packet rule (parse, [`PacketHeader::addressed_to`], route DATA and ACK
//! to the table), delivering into a bounded ring that a slow application drains. Ports send
//! both at once and deferred (queued, then flushed as a batch, as the module host does).
//!
//! Checked: every message taken from a ring was sent, unaltered, exactly once and in order per
//! pair of incarnations ([`Streams`]); a ring never holds more than its capacity; after a run,
//! a table's next deadline is later than now (else its engine would spin); packets that
//! name another port are refused; on some seeds an intruder that arrives when the tables are
//! full is refused and counted, and never delivered; after the network heals everything sent
//! is delivered (a full ring holds a link's deliveries back; room made lets them through).
//!
//! [`PacketHeader::addressed_to`]: txcast_proto::wire::PacketHeader::addressed_to

use crate::harness::{self, draw_restarts, min_opt, Run, RunOptions, Violation, World};
use crate::link_sim::draw_link_config;
use crate::net::{FaultConfig, NetCounters, Network};
use crate::streams::{message_len, Streams};
use crate::{node_address, NodeId};
use std::collections::VecDeque;
use txcast_proto::link::{
    LinkConfig, LinkCounters, LinkIo, LinkTable, TableRefusal, TableSendError,
};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::wire::{Kind, Packet};
use txcast_proto::Address;

const CLUSTER: u16 = 1;

/// Knobs of one engine-core simulation.
#[derive(Clone, Debug)]
pub struct EngineSimOptions {
    pub nodes: usize,
    /// Messages each node sends to each other node.
    pub messages_per_pair: u32,
    /// The phases, and the faults the seed may draw.
    pub run: RunOptions,
}

impl Default for EngineSimOptions {
    fn default() -> Self {
        EngineSimOptions {
            nodes: 4,
            messages_per_pair: 150,
            run: RunOptions::default(),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct EngineSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    /// Messages a ring holds at most.
    pub ring_capacity: usize,
    pub restarts: usize,
    pub intruder: bool,
    pub delivered: u64,
    /// Deliveries a full ring refused (held in their link until room was made).
    pub refused: u64,
    /// Packets refused because the table was full, or because they named another port.
    pub link_limit: u64,
    pub misaddressed: u64,
    pub net: NetCounters,
    pub links: LinkCounters,
    pub end_ns: u64,
    pub digest: u64,
}

/// A port: its links, its ring, and what its engine counted.
struct Port {
    table: LinkTable,
    ring: VecDeque<(NodeId, Vec<u8>)>,
    /// Peers with queued (deferred) messages to flush.
    deferred: Vec<Address>,
    refused: u64,
    link_limit: u64,
    misaddressed: u64,
    bad: u64,
}

impl Port {
    fn new(id: NodeId, cfg: &LinkConfig, incarnation: u32, links_max: usize) -> Port {
        Port {
            table: LinkTable::new(
                cfg.clone(),
                node_address(id),
                CLUSTER,
                incarnation as u64,
                None,
                links_max,
                Instant::ZERO,
            )
            .expect("drawn configuration is valid"),
            ring: VecDeque::new(),
            deferred: Vec::new(),
            refused: 0,
            link_limit: 0,
            misaddressed: 0,
            bad: 0,
        }
    }

    /// The engine's receive path for one datagram.
    fn handle_datagram(&mut self, me: NodeId, now: Instant, bytes: &[u8]) {
        let Ok(p) = Packet::parse(bytes, CLUSTER, None) else {
            self.bad += 1;
            return;
        };
        if !p.header.addressed_to(node_address(me)) {
            self.misaddressed += 1;
            return;
        }
        match p.header.kind {
            Kind::Data | Kind::Ack => match self.table.handle_packet(now, &p) {
                Ok(()) => {}
                Err(TableRefusal::LinkLimit) => self.link_limit += 1,
                Err(TableRefusal::Bad) => self.bad += 1,
            },
            _ => self.bad += 1,
        }
    }
}

/// A port's way out: deliveries into its bounded ring, packets to the network.
struct Io<'a> {
    ring: &'a mut VecDeque<(NodeId, Vec<u8>)>,
    capacity: usize,
    refused: &'a mut u64,
    out: &'a mut Vec<(NodeId, Vec<u8>)>,
}

impl LinkIo for Io<'_> {
    fn deliver(&mut self, peer: Address, msg: &[u8]) -> bool {
        if self.ring.len() >= self.capacity {
            *self.refused += 1;
            return false;
        }
        self.ring.push_back((peer.site as NodeId, msg.to_vec()));
        true
    }

    fn transmit(&mut self, peer: Address, packet: &[u8]) {
        self.out.push((peer.site as NodeId, packet.to_vec()));
    }
}

/// A link configuration drawn from the seed: small windows and packets sometimes.
fn link_config(rng: &mut Rng) -> LinkConfig {
    let cfg = draw_link_config(rng, 16, 32, 100);
    cfg.validate().expect("drawn configuration is valid");
    cfg
}

/// The simulation: the ports, the workload's state and the checker.
struct EngineWorld {
    opts: EngineSimOptions,
    n: usize,
    cfg: LinkConfig,
    rng: Rng,
    ring_capacity: usize,
    drain_every_ns: u64,
    deferred_share: f64,
    intruder: bool,
    intruder_sent: u32,
    ports: Vec<Port>,
    /// The intruder's port (node `n`).
    stranger: Port,
    streams: Streams,
    next_send_at: Vec<Instant>,
    next_drain_at: Vec<Instant>,
    msg: Vec<u8>,
    out: Vec<(NodeId, Vec<u8>)>,
    /// What ports that crashed had counted: refused deliveries, packets refused for the
    /// link limit and for their address, and their links' counters.
    dead: (u64, u64, u64, LinkCounters),
    faults: FaultConfig,
    restarts: usize,
}

impl EngineWorld {
    fn send_out(run: &mut Run, from: NodeId, out: &mut Vec<(NodeId, Vec<u8>)>) {
        for (to, bytes) in out.drain(..) {
            run.net.send(run.now, from, to, &bytes);
        }
    }

    /// Each node sends to a random peer that still has messages to get, at once or deferred;
    /// now and then a packet for another port is put on the wire.
    fn workload(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (now, n) = (run.now, self.n);
        for i in 0..n {
            if self.next_send_at[i] > now {
                continue;
            }
            self.next_send_at[i] = Instant(now.0 + self.rng.below(200_000));
            let j = (i + 1 + self.rng.below(n as u64 - 1) as usize) % n;
            if self.streams.sent[i][j] >= self.opts.messages_per_pair {
                continue;
            }
            let len = message_len(&mut self.rng);
            self.streams.next_message(i, j, len, &mut self.msg);
            let p = &mut self.ports[i];
            let mut io = Io {
                ring: &mut p.ring,
                capacity: self.ring_capacity,
                refused: &mut p.refused,
                out: &mut self.out,
            };
            let r = if self.rng.chance(self.deferred_share) {
                let r = p.table.queue(now, node_address(j), &self.msg);
                if r.is_ok() && !p.deferred.contains(&node_address(j)) {
                    p.deferred.push(node_address(j));
                }
                r
            } else {
                p.table
                    .send(now, node_address(j), &self.msg, &mut io)
                    .map(|_| ())
            };
            match r {
                Ok(()) => self.streams.sent_one(i, j),
                // Back-pressure, or a peer silent through `unreachable_after_timeouts`
                // retransmissions (a long partition or clog): the application tries later.
                Err(TableSendError::Full) | Err(TableSendError::Unreachable) => {}
                Err(e) => return Err(run.fail(format!("node {i}: send to {j} refused: {e:?}"))),
            }
            if self.rng.chance(0.01) {
                // A packet for another port: the receiver must refuse it.
                if let Some(bytes) = self.out.last().map(|(_, b)| b.clone()) {
                    if let Some(k) = (0..n).find(|&k| k != i && k != j) {
                        run.net.send(now, i, k, &bytes);
                    }
                }
            }
            Self::send_out(run, i, &mut self.out);
        }
        Ok(())
    }

    /// The intruder: once every table is full, it opens a link of its own to everyone.
    fn intrude(&mut self, run: &mut Run) {
        let n = self.n;
        if !self.intruder
            || self.intruder_sent >= 50
            || !self.ports.iter().all(|p| p.table.len() == n - 1)
        {
            return;
        }
        let j = self.rng.below(n as u64) as usize;
        let s = &mut self.stranger;
        let mut io = Io {
            ring: &mut s.ring,
            capacity: self.ring_capacity,
            refused: &mut s.refused,
            out: &mut self.out,
        };
        if s.table
            .send(run.now, node_address(j), &[0xEE; 24], &mut io)
            .is_ok()
        {
            self.intruder_sent += 1;
        }
        Self::send_out(run, n, &mut self.out);
    }

    /// The engine's duty cycle at each port: deferred batches flushed, links run.
    fn duty_cycle(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        for i in 0..=self.n {
            let p = if i < self.n {
                &mut self.ports[i]
            } else {
                &mut self.stranger
            };
            let mut io = Io {
                ring: &mut p.ring,
                capacity: self.ring_capacity,
                refused: &mut p.refused,
                out: &mut self.out,
            };
            for dest in p.deferred.drain(..) {
                p.table.flush_peer(now, dest, &mut io);
            }
            p.table.run(now, &mut io);
            // Nothing new since: a table that asks to run again at once would keep its
            // engine from ever parking.
            if let Some(t) = p.table.next_deadline().filter(|&t| t <= now) {
                return Err(run.fail(format!(
                    "node {i}: after a run its links ask to run again at {} ns",
                    t.0
                )));
            }
            if p.ring.len() > self.ring_capacity {
                return Err(run.fail(format!(
                    "node {i}: ring holds {} past its capacity {}",
                    p.ring.len(),
                    self.ring_capacity
                )));
            }
            Self::send_out(run, i, &mut self.out);
        }
        Ok(())
    }

    /// Applications take what their rings hold, now and then; the checker reads it.
    fn drain(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        for j in 0..self.n {
            if self.next_drain_at[j] > now {
                continue;
            }
            self.next_drain_at[j] = Instant(now.0 + self.rng.below(self.drain_every_ns));
            let p = &mut self.ports[j];
            let took = !p.ring.is_empty();
            while let Some((i, got)) = p.ring.pop_front() {
                if i >= self.n {
                    return Err(run.fail(format!("node {j} delivered the intruder's message")));
                }
                self.streams
                    .delivered(i, j, &got)
                    .map_err(|e| run.fail(e))?;
                run.digest.add_u64(now.0);
                run.digest.add(&got[..12.min(got.len())]);
            }
            if took && p.table.is_blocked() {
                p.table.room_made();
            }
        }
        Ok(())
    }

    fn all_delivered(&self) -> bool {
        let n = self.n;
        (0..n).all(|j| {
            (0..n).all(|i| {
                i == j
                    || self.ports[j]
                        .table
                        .get(node_address(i))
                        .is_none_or(|l| !l.has_pending_delivery())
            })
        })
    }
}

impl World for EngineWorld {
    type Report = EngineSimReport;

    fn restart(&mut self, run: &mut Run, k: NodeId) {
        if run.trace > 0 {
            eprintln!("{:>10} restart node {k}", run.ns());
        }
        self.streams.restart(k);
        let old = std::mem::replace(
            &mut self.ports[k],
            Port::new(k, &self.cfg, self.streams.incarnation[k], self.n - 1),
        );
        self.dead.0 += old.refused;
        self.dead.1 += old.link_limit;
        self.dead.2 += old.misaddressed;
        self.dead.3.add(&old.table.counters());
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        let p = if to < self.n {
            &mut self.ports[to]
        } else {
            &mut self.stranger
        };
        p.handle_datagram(to, run.now, &bytes);
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        self.workload(run)?;
        self.intrude(run);
        self.duty_cycle(run)?;
        self.drain(run)
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = run.next_restart();
        for p in self.ports.iter().chain(std::iter::once(&self.stranger)) {
            next = min_opt(next, p.table.next_deadline());
        }
        for j in 0..self.n {
            if !self.ports[j].ring.is_empty() {
                next = min_opt(next, Some(self.next_drain_at[j]));
            }
        }
        if !self.streams.all_sent(self.opts.messages_per_pair) {
            for &t in &self.next_send_at {
                next = min_opt(next, Some(t));
            }
        }
        next
    }

    fn done(&self, run: &Run) -> bool {
        let quiet = |p: &Port| p.table.is_idle() && p.ring.is_empty() && p.deferred.is_empty();
        run.healed
            && self.streams.all_sent(self.opts.messages_per_pair)
            && self.ports.iter().all(quiet)
            && self.all_delivered()
    }

    fn stalled(&self, _run: &Run) -> String {
        let n = self.n;
        let missing: Vec<String> = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| i != j)
            .filter(|&(i, j)| {
                self.ports[i]
                    .table
                    .get(node_address(j))
                    .is_some_and(|l| !l.is_idle())
                    || self.ports[j]
                        .table
                        .get(node_address(i))
                        .is_some_and(|l| l.has_pending_delivery())
                    || self.streams.sent[i][j] < self.opts.messages_per_pair
            })
            .map(|(i, j)| {
                format!(
                    "{i}->{j}: next {:?}/{}",
                    self.streams.expected(i, j),
                    self.streams.sent[i][j]
                )
            })
            .collect();
        format!(
            "not everything delivered after healing: {}",
            missing.join(", ")
        )
    }

    fn running(&self) -> Vec<NodeId> {
        (0..self.n).collect()
    }

    fn finish(self, run: &mut Run) -> Result<EngineSimReport, Violation> {
        let (mut refused, mut link_limit, mut misaddressed, mut links) = self.dead;
        for p in &self.ports {
            links.add(&p.table.counters());
            refused += p.refused;
            link_limit += p.link_limit;
            misaddressed += p.misaddressed;
        }
        if self.intruder_sent > 0 && link_limit == 0 {
            return Err(run.fail(format!(
                "the intruder sent {} messages into full tables and none was refused",
                self.intruder_sent
            )));
        }
        Ok(EngineSimReport {
            seed: run.seed,
            faults: self.faults,
            ring_capacity: self.ring_capacity,
            restarts: self.restarts,
            intruder: self.intruder,
            delivered: self.streams.delivered,
            refused,
            link_limit,
            misaddressed,
            net: run.net.counters.clone(),
            links,
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        })
    }
}

/// Runs one seed: its report, or the first rule broken.
pub fn run_engine(seed: u64, opts: &EngineSimOptions) -> Result<EngineSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = opts.run.fault_config(seed, &mut rng);
    let cfg = link_config(&mut rng);
    let n = opts.nodes.max(2);
    // Rings from tiny (every burst fills them) to roomy.
    let ring_capacity = [1, 2, 4, 16, 256][rng.below(5) as usize];
    // The application takes what its ring holds now and then, slowly on some seeds.
    let drain_every_ns = [10_000, 100_000, 2_000_000][rng.below(3) as usize];
    let deferred_share = rng.below(3) as f64 / 2.0;
    // An intruder (node n) on some seeds, once every table is full; then nobody restarts
    // (a restarted table would have room for it, and it could take a real peer's place).
    let intruder = opts.run.faults && rng.chance(0.25);
    let restarts = draw_restarts(
        &mut rng,
        opts.run.faults && !intruder,
        0.3,
        3,
        opts.run.safety_ns,
        n,
    );
    let slots = n + usize::from(intruder);
    let net = Network::new(slots, faults.clone(), rng.fork());
    let world = EngineWorld {
        opts: opts.clone(),
        n,
        ports: (0..n).map(|i| Port::new(i, &cfg, 1, n - 1)).collect(),
        stranger: Port::new(n, &cfg, 1, n),
        dead: (0, 0, 0, LinkCounters::default()),
        cfg,
        rng,
        ring_capacity,
        drain_every_ns,
        deferred_share,
        intruder,
        intruder_sent: 0,
        streams: Streams::new(n),
        next_send_at: vec![Instant::ZERO; n],
        next_drain_at: vec![Instant::ZERO; n],
        msg: Vec::new(),
        out: Vec::new(),
        faults,
        restarts: restarts.len(),
    };
    let plan = opts.run.plan("engine", seed, net, restarts);
    harness::run(world, plan)
}
