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
    /// Node crashes and restarts in the run.
    pub restarts: usize,
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
        Self::with_incarnation(id, nodes, cfg, 1)
    }

    /// A node as it comes back after a crash: no memory of any link, a newer incarnation.
    pub fn with_incarnation(id: NodeId, nodes: usize, cfg: &LinkConfig, incarnation: u64) -> Self {
        let links = (0..nodes)
            .map(|j| {
                (j != id).then(|| {
                    Link::new(
                        cfg.clone(),
                        address(id),
                        address(j),
                        CLUSTER,
                        incarnation,
                        None,
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
fn message(
    from: NodeId,
    to: NodeId,
    incarnation: u32,
    counter: u32,
    len: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&(from as u16).to_le_bytes());
    out.extend_from_slice(&(to as u16).to_le_bytes());
    out.extend_from_slice(&counter.to_le_bytes());
    out.extend_from_slice(&incarnation.to_le_bytes());
    let mut x = (from as u32) << 24 ^ (to as u32) << 16 ^ counter ^ incarnation << 8;
    while out.len() < len.max(12) {
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
        FaultConfig::swarm(&mut rng).with_clogs(&mut Rng::new(seed ^ 0xc10c_c10c))
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
    // Crashes and restarts on some seeds: a node loses every link's state and comes back with
    // a newer incarnation.
    let mut restarts: Vec<(u64, NodeId)> = Vec::new();
    if opts.faults && rng.chance(0.3) {
        for _ in 0..1 + rng.below(3) {
            restarts.push((rng.below(opts.safety_ns), rng.below(n as u64) as usize));
        }
        restarts.sort_unstable();
    }
    let restart_count = restarts.len();
    let mut incarnation = vec![1u32; n];
    let mut net = Network::new(n, faults.clone(), rng.fork());
    let mut nodes: Vec<LinkNode> = (0..n).map(|i| LinkNode::new(i, n, &cfg)).collect();
    let mut sent = vec![vec![0u32; n]; n];
    // The checker's view of each stream i -> j: the sender incarnation last delivered, the
    // counter due next from it (`None` right after the receiver restarted: a new receiver may
    // start anywhere), and the counters a crashed receiver may have acknowledged without its
    // application taking them (below `skip_limit`, a gap is loss by that crash, not a bug).
    let mut seen_inc = vec![vec![0u32; n]; n];
    let mut next_expected: Vec<Vec<Option<u32>>> = vec![vec![Some(0); n]; n];
    let mut skip_limit = vec![vec![0u32; n]; n];
    // first_sent[i][j][k]: the first counter incarnation k+1 of i sent to j.
    let mut first_sent: Vec<Vec<Vec<u32>>> = vec![vec![vec![0]; n]; n];
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
            net.step_clogs(now);
        }
        while restarts.first().is_some_and(|&(t, _)| t <= now.0) {
            let (_, k) = restarts.remove(0);
            if std::env::var_os("TXCAST_SIM_TRACE").is_some() {
                eprintln!("t={} restart node {k}; sent {:?}", now.0, sent);
            }
            incarnation[k] += 1;
            nodes[k] = LinkNode::with_incarnation(k, n, &cfg, incarnation[k] as u64);
            for other in 0..n {
                next_expected[other][k] = None;
                seen_inc[other][k] = 0;
                skip_limit[other][k] = sent[other][k];
                first_sent[k][other].push(sent[k][other]);
            }
            digest.add_u64(now.0 ^ k as u64);
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
                message(i, j, incarnation[i], sent[i][j], len, &mut msg);
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
                    let got = nodes[j].link(i).poll_delivery(|m| m.to_vec());
                    let Some(got) = got else { break };
                    let word = |at: usize| {
                        u32::from_le_bytes(
                            got.get(at..at + 4)
                                .and_then(|b| b.try_into().ok())
                                .unwrap_or([0xff; 4]),
                        )
                    };
                    let (counter, inc) = (word(4), word(8));
                    if counter >= sent[i][j] || inc == 0 || inc > incarnation[i] {
                        return Err(fail(format!(
                            "node {j} got #{counter} (incarnation {inc}) from {i}, which was never sent"
                        )));
                    }
                    message(i, j, inc, counter, got.len(), &mut expect);
                    if got != expect {
                        return Err(fail(format!("node {j} from {i}: #{counter} corrupted")));
                    }
                    let seen = seen_inc[i][j];
                    if inc < seen {
                        return Err(fail(format!(
                            "node {j} from {i}: #{counter} of incarnation {inc} after incarnation {seen}"
                        )));
                    }
                    if inc > seen {
                        // A new stream: it starts at its first message, or later only past
                        // messages a crashed receiver may have acknowledged.
                        let first = first_sent[i][j][inc as usize - 1];
                        let ok =
                            counter == first || (counter > first && counter - 1 < skip_limit[i][j]);
                        if !ok {
                            return Err(fail(format!(
                                "node {j} from {i}: incarnation {inc} starts at #{counter}, its first message was #{first}"
                            )));
                        }
                    } else if let Some(want) = next_expected[i][j] {
                        let lost_by_crash = counter > want && counter - 1 < skip_limit[i][j];
                        if counter != want && !lost_by_crash {
                            return Err(fail(format!(
                                "node {j} from {i}: got #{counter}, expected #{want} (order/duplicate/loss)"
                            )));
                        }
                    }
                    if std::env::var_os("TXCAST_SIM_TRACE").is_some()
                        && (counter % 50 == 0 || next_expected[i][j] != Some(counter))
                    {
                        eprintln!(
                            "t={} {i}->{j} #{counter} inc {inc} (expected {:?} of inc {seen})",
                            now.0, next_expected[i][j]
                        );
                    }
                    seen_inc[i][j] = inc;
                    next_expected[i][j] = Some(counter + 1);
                    digest.add_u64(now.0);
                    digest.add(&got[..12]);
                    delivered += 1;
                }
            }
        }
        // Done when everything was sent, every sender's link is idle (all acknowledged by
        // the receiver's current incarnation or a crashed one), and no receiver holds a
        // message its application has not taken.
        let all_sent = sent.iter().flatten().sum::<u32>() == total as u32;
        if healed
            && all_sent
            && (0..n).all(|i| {
                (0..n).all(|j| {
                    i == j
                        || (nodes[i].link(j).is_idle() && !nodes[j].link(i).has_pending_delivery())
                })
            })
        {
            break;
        }
        if now.0 > opts.safety_ns + opts.liveness_ns {
            let missing: Vec<String> = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter(|&(i, j)| {
                    i != j
                        && (!nodes[i].link_ref(j).is_idle()
                            || nodes[j].link_ref(i).has_pending_delivery())
                })
                .map(|(i, j)| {
                    format!(
                        "{i}->{j}: next {:?}/{} (sender {}; receiver {})",
                        next_expected[i][j],
                        sent[i][j],
                        nodes[i].link_ref(j).debug_state(),
                        nodes[j].link_ref(i).debug_state()
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
        if !all_sent {
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
        restarts: restart_count,
        delivered,
        net: net.counters.clone(),
        links,
        end_ns: now.0,
        digest: digest.0,
    })
}

/// The earlier of two optional instants.
pub(crate) fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}
