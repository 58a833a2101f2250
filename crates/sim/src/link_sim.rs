//! The reliable link under simulated faults, with its checker: every message sent is delivered
//! exactly once, in order, unaltered, and nothing is invented.

use crate::net::{FaultConfig, NetCounters, Network};
use crate::{Digest, Node, NodeId};
use txcast_proto::link::{Link, LinkConfig, LinkCounters, LinkSendError};
use txcast_proto::pack::PackMode;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::wire::Packet;
use txcast_proto::Address;

const CLUSTER: u16 = 1;

/// Knobs of one link simulation.
#[derive(Clone, Debug)]
pub struct LinkSimOptions {
    pub nodes: usize,
    /// Messages each node sends to each other node.
    pub messages_per_pair: u32,
    /// Virtual time with faults on.
    pub safety_ns: u64,
    /// Virtual time allowed, after healing, for everything to arrive.
    pub liveness_ns: u64,
    /// Draw the fault mix from the seed; otherwise run fault-free.
    pub faults: bool,
}

impl Default for LinkSimOptions {
    fn default() -> Self {
        LinkSimOptions {
            nodes: 3,
            messages_per_pair: 300,
            safety_ns: 2_000_000_000,
            liveness_ns: 60_000_000_000,
            faults: true,
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
    pub delivered: u64,
    pub net: NetCounters,
    pub links: LinkCounters,
    pub end_ns: u64,
    /// Digest of every packet put on the wire and every delivery: equal digests, equal runs.
    pub digest: u64,
}

fn address(node: NodeId) -> Address {
    Address::new(0, node as u16, 1, 0)
}

/// A node with one link to every other node.
pub struct LinkNode {
    id: NodeId,
    links: Vec<Option<Link>>,
    next_link: usize,
    pub malformed_dropped: u64,
}

impl LinkNode {
    pub fn new(id: NodeId, nodes: usize, cfg: &LinkConfig) -> Self {
        let links = (0..nodes)
            .map(|j| {
                (j != id).then(|| {
                    Link::new(cfg.clone(), address(id), address(j), CLUSTER, 1, None)
                        .expect("valid config")
                })
            })
            .collect();
        LinkNode {
            id,
            links,
            next_link: 0,
            malformed_dropped: 0,
        }
    }

    pub fn link(&mut self, peer: NodeId) -> &mut Link {
        self.links[peer].as_mut().expect("no link to self")
    }
}

impl Node for LinkNode {
    fn handle_datagram(&mut self, now: Instant, bytes: &[u8]) {
        match Packet::parse(bytes, CLUSTER, None) {
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

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(NodeId, usize)> {
        let n = self.links.len();
        for k in 0..n {
            let j = (self.next_link + k) % n;
            if let Some(l) = self.links[j].as_mut() {
                if let Some(len) = l.poll_transmit(now, buf) {
                    self.next_link = (j + 1) % n;
                    return Some((j, len));
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

/// The bytes of message `counter` from `from` to `to`: a header the checker reads back and a
/// filler that depends on all three, so any corruption or mix-up is caught.
fn message(from: NodeId, to: NodeId, counter: u32, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(from as u16).to_le_bytes());
    out.extend_from_slice(&(to as u16).to_le_bytes());
    out.extend_from_slice(&counter.to_le_bytes());
    let mut x = (from as u32) << 24 ^ (to as u32) << 16 ^ counter;
    while out.len() < len.max(8) {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        out.push((x >> 16) as u8);
    }
}

fn message_len(rng: &mut Rng) -> usize {
    match rng.below(20) {
        0 => 2000 + rng.below(9000) as usize, // fragmented
        1..=3 => 500 + rng.below(1500) as usize,
        _ => 8 + rng.below(120) as usize,
    }
}

/// A link configuration drawn from the seed: small buffers and packets sometimes, to exercise
/// back-pressure and fragmentation at the edges.
fn link_config(rng: &mut Rng) -> LinkConfig {
    let mut cfg = LinkConfig::default();
    if rng.chance(0.5) {
        cfg.packet_bytes_max = 512 + rng.below(1500) as usize;
    }
    if rng.chance(0.5) {
        cfg.window_msgs = 32 + rng.below(200) as u32;
        cfg.recv_buffer_msgs = 64 + rng.below(200) as u32;
        cfg.send_buffer_msgs = cfg.window_msgs.max(cfg.recv_buffer_msgs) + 64;
    }
    cfg.message_bytes_max = 12_000;
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

/// Runs one seed; `Err` describes the first violation, with the replay command.
pub fn run_link(seed: u64, opts: &LinkSimOptions) -> Result<LinkSimReport, String> {
    let fail = |what: String| {
        format!("link simulation seed {seed}: {what}\n  replay: cargo run --release -- sim link --seed {seed}")
    };
    let mut rng = Rng::new(seed);
    let faults = if opts.faults {
        FaultConfig::swarm(&mut rng)
    } else {
        FaultConfig::none()
    };
    let cfg = link_config(&mut rng);
    // A slow application on some seeds: deliveries are refused at random, so the receive
    // buffers fill, credit closes, and the window must reopen when the application catches up.
    let stall = if rng.chance(0.3) {
        rng.below(900) as f64 / 1000.0
    } else {
        0.0
    };
    let n = opts.nodes;
    let mut net = Network::new(n, faults.clone(), rng.fork());
    let mut nodes: Vec<LinkNode> = (0..n).map(|i| LinkNode::new(i, n, &cfg)).collect();
    let mut sent = vec![vec![0u32; n]; n];
    let mut received = vec![vec![0u32; n]; n];
    let mut next_send_at = vec![Instant::ZERO; n];
    let mut digest = Digest::default();
    let mut buf = vec![0u8; cfg.packet_bytes_max];
    let mut msg = Vec::new();
    let mut expect = Vec::new();
    let mut now = Instant::ZERO;
    let total = (n * (n - 1)) as u64 * opts.messages_per_pair as u64;
    let mut delivered = 0u64;
    let mut healed = false;
    loop {
        if !healed && now.0 >= opts.safety_ns {
            net.heal();
            healed = true;
        }
        if !healed {
            net.step_partitions();
        }
        while let Some((to, bytes)) = net.pop_due(now) {
            nodes[to].handle_datagram(now, &bytes);
        }
        for node in nodes.iter_mut() {
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
        }
        // Workload: each node sends to a random peer that still has messages to get (through
        // the liveness phase too, so a run slowed by back-pressure still sends everything).
        for i in 0..n {
            if next_send_at[i] > now {
                continue;
            }
            let j = (i + 1 + rng.below(n as u64 - 1) as usize) % n;
            if sent[i][j] < opts.messages_per_pair {
                let len = message_len(&mut rng);
                message(i, j, sent[i][j], len, &mut msg);
                match nodes[i].link(j).send(now, &msg) {
                    Ok(()) => sent[i][j] += 1,
                    Err(LinkSendError::Full) => {}
                    Err(e) => return Err(fail(format!("send refused: {e}"))),
                }
            }
            next_send_at[i] = Instant(now.0 + rng.below(200_000));
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            while let Some((to, len)) = node.poll_transmit(now, &mut buf) {
                net.send(now, i, to, &buf[..len]);
            }
        }
        // Deliveries and the checker.
        for j in 0..n {
            for i in 0..n {
                if i == j {
                    continue;
                }
                loop {
                    if !healed && stall > 0.0 && rng.chance(stall) {
                        break;
                    }
                    let want = received[i][j];
                    let got = nodes[j].link(i).poll_delivery(|m| m.to_vec());
                    let Some(got) = got else { break };
                    if want >= sent[i][j] {
                        return Err(fail(format!(
                            "node {j} got a message from {i} that was never sent (#{want})"
                        )));
                    }
                    let counter = u32::from_le_bytes(got[4..8].try_into().unwrap_or([0; 4]));
                    message(i, j, counter, got.len(), &mut expect);
                    if counter != want {
                        return Err(fail(format!(
                            "node {j} from {i}: got #{counter}, expected #{want} (order/duplicate)"
                        )));
                    }
                    if got != expect {
                        return Err(fail(format!("node {j} from {i}: #{counter} corrupted")));
                    }
                    digest.add_u64(now.0);
                    digest.add(&got[..8]);
                    received[i][j] += 1;
                    delivered += 1;
                }
            }
        }
        if healed && delivered == total {
            break;
        }
        if now.0 > opts.safety_ns + opts.liveness_ns {
            let missing: Vec<String> = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter(|&(i, j)| i != j && received[i][j] < sent[i][j])
                .map(|(i, j)| {
                    format!(
                        "{i}->{j}: {}/{} (sender {}; receiver {})",
                        received[i][j],
                        sent[i][j],
                        nodes[i].link(j).debug_state(),
                        nodes[j].link(i).debug_state()
                    )
                })
                .collect();
            return Err(fail(format!(
                "liveness: not everything delivered after healing: {}",
                missing.join(", ")
            )));
        }
        // Advance virtual time to the next event.
        let mut next = net.next_arrival();
        for node in &nodes {
            next = min_opt(next, node.poll_timeout());
        }
        if sent.iter().flatten().sum::<u32>() < total as u32 {
            for &t in &next_send_at {
                next = min_opt(next, Some(t));
            }
        }
        if !healed {
            next = min_opt(next, Some(Instant(opts.safety_ns)));
        }
        now = match next {
            Some(t) if t > now => t,
            Some(_) => Instant(now.0 + 1),
            None => Instant(now.0 + 1_000_000),
        };
    }
    let mut links = LinkCounters::default();
    for node in nodes.iter_mut() {
        for j in 0..n {
            if j != node.id {
                links.add(node.link(j).counters());
            }
        }
    }
    digest.add_u64(net.digest.0);
    Ok(LinkSimReport {
        seed,
        faults,
        stall,
        delivered,
        net: net.counters.clone(),
        links,
        end_ns: now.0,
        digest: digest.0,
    })
}

fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}
