//! The reliable link under simulated faults, with its checker: every message sent is delivered
//! exactly once, in order, unaltered, and nothing is invented.

use crate::harness::{self, min_opt, Plan, Run, RunOptions, Violation, World};
use crate::net::{FaultConfig, NetCounters, Network};
use crate::streams::{message_len, Streams};
use crate::{node_address, Node, NodeId};
use txcast_proto::link::{Link, LinkConfig, LinkCounters, LinkSendError};
use txcast_proto::pack::PackMode;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::wire::{ClusterKey, KeyRing, Packet, PacketKey};

const CLUSTER: u16 = 1;

/// Knobs of one link simulation.
#[derive(Clone, Debug)]
pub struct LinkSimOptions {
    pub nodes: usize,
    /// Messages each node sends to each other node.
    pub messages_per_pair: u32,
    /// The phases, and the faults the seed may draw.
    pub run: RunOptions,
}

impl Default for LinkSimOptions {
    fn default() -> Self {
        LinkSimOptions {
            nodes: 3,
            messages_per_pair: 300,
            run: RunOptions::default(),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct LinkSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    /// Probability that the application refuses a delivery (a slow consumer).
    pub stall: f64,
    /// Node crashes and restarts in the run.
    pub restarts: usize,
    pub delivered: u64,
    pub net: NetCounters,
    pub links: LinkCounters,
    pub end_ns: u64,
    /// Digest of every packet put on the wire and every delivery: equal digests, equal runs.
    pub digest: u64,
}

/// A node with one link to every other node.
pub struct LinkNode {
    id: NodeId,
    links: Vec<Option<Link>>,
    next_link: usize,
    pub malformed_dropped: u64,
    /// The cluster key packets are sealed and checked with, if any.
    key: Option<KeyRing>,
}

impl LinkNode {
    pub fn new(id: NodeId, nodes: usize, cfg: &LinkConfig) -> Self {
        Self::with_incarnation(id, nodes, cfg, 1)
    }

    /// A node as it comes back after a crash: no memory of any link, a newer incarnation.
    pub fn with_incarnation(id: NodeId, nodes: usize, cfg: &LinkConfig, incarnation: u64) -> Self {
        Self::with_key(id, nodes, cfg, incarnation, None)
    }

    /// A node whose links seal and check every packet with `key`.
    pub fn with_key(
        id: NodeId,
        nodes: usize,
        cfg: &LinkConfig,
        incarnation: u64,
        key: Option<KeyRing>,
    ) -> Self {
        let links = (0..nodes)
            .map(|j| {
                (j != id).then(|| {
                    Link::new(
                        cfg.clone(),
                        node_address(id),
                        node_address(j),
                        CLUSTER,
                        incarnation,
                        key.as_ref().map(|k| k.send_key().clone()),
                    )
                    .expect("valid config")
                })
            })
            .collect();
        LinkNode {
            id,
            links,
            next_link: 0,
            malformed_dropped: 0,
            key,
        }
    }

    pub fn link(&mut self, peer: NodeId) -> &mut Link {
        self.links[peer].as_mut().expect("no link to self")
    }

    pub fn link_ref(&self, peer: NodeId) -> &Link {
        self.links[peer].as_ref().expect("no link to self")
    }
}

impl Node for LinkNode {
    fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        let mut bytes = bytes.to_vec();
        match Packet::open(&mut bytes, CLUSTER, self.key.as_ref()) {
            Ok(p) => {
                let from = p.header.source.site as usize;
                match self.links.get_mut(from).and_then(|l| l.as_mut()) {
                    Some(l) => {
                        if l.handle_packet(now, &p).is_err() {
                            self.malformed_dropped += 1;
                        }
                    }
                    None => self.malformed_dropped += 1,
                }
            }
            Err(_) => self.malformed_dropped += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        for l in self.links.iter_mut().flatten() {
            if l.poll_timeout().is_some_and(|t| t <= now) {
                l.handle_timeout(now);
            }
        }
    }

    fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        to: &mut Vec<NodeId>,
    ) -> Option<usize> {
        let n = self.links.len();
        for k in 0..n {
            let j = (self.next_link + k) % n;
            if let Some(l) = self.links[j].as_mut() {
                if let Some(len) = l.poll_transmit(now, buf) {
                    self.next_link = (j + 1) % n;
                    to.push(j);
                    return Some(len);
                }
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.links
            .iter()
            .flatten()
            .filter_map(|l| l.poll_timeout())
            .min()
    }
}

/// A link configuration drawn from the seed: small buffers and packets sometimes, to exercise
/// back-pressure and fragmentation at the edges, and a packing mode.
fn link_config(rng: &mut Rng) -> LinkConfig {
    let mut cfg = draw_link_config(rng, 32, 64, 200);
    cfg.pack = match rng.below(3) {
        0 => PackMode::Off,
        1 => PackMode::Adaptive {
            delay_max: core::time::Duration::from_micros(rng.below(500)),
        },
        _ => PackMode::default(),
    };
    cfg.validate().expect("drawn configuration is valid");
    cfg
}

/// The parts of a link configuration the link and engine simulators draw alike: packets of
/// 512 to 2011 bytes on half the seeds, on half a window of `window` and a receive buffer of
/// `recv` messages, each up to `spread` more; messages up to 12 000 bytes. Not validated.
pub(crate) fn draw_link_config(rng: &mut Rng, window: u32, recv: u32, spread: u64) -> LinkConfig {
    let mut cfg = LinkConfig::default();
    if rng.chance(0.5) {
        cfg.packet_bytes_max = 512 + rng.below(1500) as usize;
    }
    if rng.chance(0.5) {
        cfg.window_msgs = window + rng.below(spread) as u32;
        cfg.recv_buffer_msgs = recv + rng.below(spread) as u32;
        cfg.send_buffer_msgs = cfg.window_msgs.max(cfg.recv_buffer_msgs) + 64;
    }
    cfg.message_bytes_max = 12_000;
    cfg
}

struct LinkWorld {
    opts: LinkSimOptions,
    cfg: LinkConfig,
    rng: Rng,
    faults: FaultConfig,
    stall: f64,
    restarts: usize,
    nodes: Vec<LinkNode>,
    s: Streams,
    next_send_at: Vec<Instant>,
    msg: Vec<u8>,
    total: u32,
    key: Option<KeyRing>,
}

/// Runs one seed; `Err` describes the first violation, with the replay command.
pub fn run_link(seed: u64, opts: &LinkSimOptions) -> Result<LinkSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = opts.run.fault_config(seed, &mut rng);
    let cfg = link_config(&mut rng);
    // A slow application on some seeds: deliveries are refused at random, so the receive
    // buffers fill, credit closes, and the window must reopen when the application catches up.
    let stall = if rng.chance(0.3) {
        rng.below(900) as f64 / 1000.0
    } else {
        0.0
    };
    let n = opts.nodes;
    // Crashes and restarts on some seeds: a node loses every link's state and comes back with
    // a newer incarnation.
    let restarts = opts.run.restarts(&mut rng, 0.3, 3, n);
    let plan = Plan {
        buf_bytes: cfg.packet_bytes_max,
        ..opts.run.plan(
            "link",
            seed,
            Network::new(n, faults.clone(), rng.fork()),
            restarts.clone(),
        )
    };
    // Odd seeds run with a cluster key (links then take up a stream only from DATA that names
    // the receiver's incarnation: one more round trip at first contact and after restarts).
    // Chosen by the seed, not drawn, so the other seeds' runs stay as they were.
    // Seeds 3 mod 4 seal (encrypt) their packets, 1 mod 4 only MAC them.
    let key = (seed % 2 == 1).then(|| {
        let k = ClusterKey::from_passphrase("link sim");
        KeyRing::new(PacketKey::new(0, k, seed % 4 == 3))
    });
    let world = LinkWorld {
        opts: opts.clone(),
        nodes: (0..n)
            .map(|i| LinkNode::with_key(i, n, &cfg, 1, key.clone()))
            .collect(),
        key,
        cfg,
        rng,
        faults,
        stall,
        restarts: restarts.len(),
        s: Streams::new(n),
        next_send_at: vec![Instant::ZERO; n],
        msg: Vec::new(),
        total: (n * (n - 1)) as u32 * opts.messages_per_pair,
    };
    harness::run(world, plan)
}

impl LinkWorld {
    fn all_sent(&self) -> bool {
        self.s.sent.iter().flatten().sum::<u32>() == self.total
    }

    /// Whether stream i -> j has nothing left: the sender's link idle, nothing held for the
    /// receiver's application.
    fn stream_done(&self, i: NodeId, j: NodeId) -> bool {
        i == j
            || (self.nodes[i].link_ref(j).is_idle()
                && !self.nodes[j].link_ref(i).has_pending_delivery())
    }

    /// The application at `j` takes what the link from `i` delivers; each through the checker.
    fn take(&mut self, run: &mut Run, i: NodeId, j: NodeId) -> Result<(), Violation> {
        loop {
            if !run.healed && self.stall > 0.0 && self.rng.chance(self.stall) {
                return Ok(());
            }
            let Some(got) = self.nodes[j].link(i).poll_delivery(|m| m.to_vec()) else {
                return Ok(());
            };
            let want = self.s.expected(i, j);
            self.s.delivered(i, j, &got).map_err(|e| run.fail(e))?;
            let counter = self.s.expected(i, j).map_or(0, |c| c - 1);
            if run.trace > 0 && (counter.is_multiple_of(50) || want != Some(counter)) {
                eprintln!("t={} {i}->{j} #{counter} (expected {want:?})", run.ns());
            }
            run.digest.add_u64(run.ns());
            run.digest.add(&got[..12]);
        }
    }
}

impl World for LinkWorld {
    type Report = LinkSimReport;

    fn restart(&mut self, run: &mut Run, k: NodeId) {
        let n = self.nodes.len();
        if run.trace > 0 {
            eprintln!("t={} restart node {k}; sent {:?}", run.ns(), self.s.sent);
        }
        self.s.restart(k);
        let incarnation = self.s.incarnation[k] as u64;
        self.nodes[k] = LinkNode::with_key(k, n, &self.cfg, incarnation, self.key.clone());
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.nodes[to].handle_message(run.now, &bytes);
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (n, now) = (self.nodes.len(), run.now);
        for node in self.nodes.iter_mut() {
            if run.due(node) {
                node.handle_timeout(now);
            }
        }
        // Workload: each node sends to a random peer that still has messages to get (through
        // the liveness phase too, so a run slowed by back-pressure still sends everything).
        for i in 0..n {
            if self.next_send_at[i] > now {
                continue;
            }
            let j = (i + 1 + self.rng.below(n as u64 - 1) as usize) % n;
            if self.s.sent[i][j] < self.opts.messages_per_pair {
                let len = message_len(&mut self.rng);
                self.s.next_message(i, j, len, &mut self.msg);
                match self.nodes[i].link(j).send(now, &self.msg) {
                    Ok(()) => self.s.sent_one(i, j),
                    Err(LinkSendError::Full) => {}
                    Err(e) => return Err(run.fail(format!("send refused: {e}"))),
                }
            }
            self.next_send_at[i] = Instant(now.0 + self.rng.below(200_000));
        }
        for (i, node) in self.nodes.iter_mut().enumerate() {
            run.transmit(i, node);
        }
        for j in 0..n {
            for i in (0..n).filter(|&i| i != j) {
                self.take(run, i, j)?;
            }
        }
        Ok(())
    }

    fn next_wakeup(&self, _run: &Run) -> Option<Instant> {
        let mut next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
        if !self.all_sent() {
            next = min_opt(next, self.next_send_at.iter().copied().min());
        }
        next
    }

    /// Done when everything was sent, every sender's link is idle (all acknowledged by the
    /// receiver's current incarnation or a crashed one), and no receiver holds a message its
    /// application has not taken.
    fn done(&self, run: &Run) -> bool {
        let n = self.nodes.len();
        run.healed && self.all_sent() && (0..n).all(|i| (0..n).all(|j| self.stream_done(i, j)))
    }

    fn stalled(&self, _run: &Run) -> String {
        let n = self.nodes.len();
        let missing: Vec<String> = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| !self.stream_done(i, j))
            .map(|(i, j)| {
                format!(
                    "{i}->{j}: next {:?}/{} (sender {}; receiver {})",
                    self.s.expected(i, j),
                    self.s.sent[i][j],
                    self.nodes[i].link_ref(j).debug_state(),
                    self.nodes[j].link_ref(i).debug_state()
                )
            })
            .collect();
        format!(
            "not everything delivered after healing: {}",
            missing.join(", ")
        )
    }

    fn finish(mut self, run: &mut Run) -> Result<LinkSimReport, Violation> {
        let mut links = LinkCounters::default();
        for node in self.nodes.iter_mut() {
            for j in 0..node.links.len() {
                if j != node.id {
                    links.add(node.link(j).counters());
                }
            }
        }
        Ok(LinkSimReport {
            seed: run.seed,
            faults: self.faults,
            stall: self.stall,
            restarts: self.restarts,
            delivered: self.s.delivered,
            net: run.net.counters.clone(),
            links,
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        })
    }
}
