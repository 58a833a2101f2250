//! Long messages in the simulator: every node sends messages of random lengths (empty to a few
//! hundred kilobytes, fragment sizes and windows drawn per seed) to the others over the seeded
//! network, nodes crash and restart, and receivers are sometimes slow to take what arrived
//! (so memory runs short and windows close).
//!
//! Checkers, after every step:
//! - **integrity**: a message delivered is one its sender sent, whole and unchanged;
//! - **at most once**: no receiver incarnation delivers one transfer twice;
//! - **success means delivery**: a transfer its sender saw complete was delivered by the
//!   receiver (before any crash of it);
//! - **bounded memory**: no receiver holds more than `reassembly_bytes_max`.
//!
//! Liveness: after healing (no faults, no crashes), every transfer started then completes, and
//! every receiver frees what it was reassembling.

use crate::harness::{self, draw_restarts, min_opt, Plan, Run, Violation, World};
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{node_address, Digest, NodeId};
use std::collections::{HashMap, HashSet};
use txcast_proto::frag::msg::{self, LdgMsg};
use txcast_proto::frag::{
    LdgConfig, LdgError, Receiver, ReceiverCounters, Sender, SenderCounters, TransferId,
};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct FragSimOptions {
    pub nodes: usize,
    /// Messages each node starts in the safety phase.
    pub messages_per_node: u32,
    pub safety_ns: u64,
    pub faults: bool,
    /// With `faults`, let the seed cut the network in two now and then.
    pub partitions: bool,
    /// With `faults`, let the seed clog paths now and then.
    pub clogs: bool,
}

impl Default for FragSimOptions {
    fn default() -> Self {
        FragSimOptions {
            nodes: 3,
            messages_per_node: 12,
            safety_ns: 4_000 * MS,
            faults: true,
            partitions: true,
            clogs: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct FragSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    pub crashes: usize,
    pub sent: u64,
    pub delivered: u64,
    pub failed: u64,
    pub sender: SenderCounters,
    pub receiver: ReceiverCounters,
    pub net: NetCounters,
    pub end_ns: u64,
    pub digest: u64,
}

/// Every message starts with its identity: sender, sender incarnation, message number.
const ID_BYTES: usize = 24;

/// The bytes of message `k` of `from`'s incarnation `inc`, `len` (at least 24) long.
fn body(from: NodeId, inc: u64, k: u64, len: usize) -> Vec<u8> {
    let mut d = Digest::default();
    d.add_u64(from as u64 ^ (inc << 8) ^ (k << 24));
    let seed = d.0;
    let mut m: Vec<u8> = (0..len)
        .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
        .collect();
    m[..8].copy_from_slice(&(from as u64).to_le_bytes());
    m[8..16].copy_from_slice(&inc.to_le_bytes());
    m[16..24].copy_from_slice(&k.to_le_bytes());
    m
}

/// The identity a message claims (sender, incarnation, number).
fn identity(m: &[u8]) -> Option<(NodeId, u64, u64)> {
    let word = |i: usize| u64::from_le_bytes(m.get(i..i + 8)?.try_into().ok()?).into();
    let w: [Option<u64>; 3] = [word(0), word(8), word(16)];
    Some((w[0]? as NodeId, w[1]?, w[2]?))
}

struct Node {
    sender: Sender,
    receiver: Receiver,
    incarnation: u64,
    started: u32,
    next_send_at: Instant,
    /// Transfers outstanding: id -> (destination, message number, destination's incarnation
    /// when it began, a liveness-phase transfer).
    transfers: HashMap<TransferId, (NodeId, u64, u64, bool)>,
    /// Whether the application takes complete messages now.
    taking: bool,
}

fn config(rng: &mut Rng) -> LdgConfig {
    let fragment_bytes = [1, 100, 1000, 1400, 8000][rng.below(5) as usize];
    LdgConfig {
        fragment_bytes,
        message_bytes_max: 400_000,
        window_fragments_max: 4 + rng.below(128) as usize,
        transfers_max: 2 + rng.below(6) as usize,
        send_bytes_max: 2_000_000,
        reassemblies_max: 2 + rng.below(6) as usize,
        reassembly_bytes_max: 400_000 + rng.below(1_000_000) as usize,
        reassembly_timeout: std::time::Duration::from_millis(300 + rng.below(700)),
        deadline_max: std::time::Duration::from_secs(20),
        // Longer than any delay the network gives a packet (delay and clogs).
        packet_lifetime: std::time::Duration::from_millis(100),
        completed_max: 64,
        rto_initial: std::time::Duration::from_millis(5 + rng.below(30)),
        rto_min: std::time::Duration::from_millis(1),
        rto_max: std::time::Duration::from_millis(200),
        ack_every: 1 + rng.below(16) as u32,
        ack_delay: std::time::Duration::from_micros(100 + rng.below(2000)),
        pool_bytes_max: [0, 100_000, 1_000_000][rng.below(3) as usize],
    }
}

struct FragWorld {
    opts: FragSimOptions,
    cfg: LdgConfig,
    rng: Rng,
    faults: FaultConfig,
    /// Longest message body drawn.
    len_max: usize,
    /// Applications stop taking messages now and then, until healing.
    slow_taker: bool,
    crashes: usize,
    nodes: Vec<Node>,
    /// Messages sent: (sender, incarnation, number) -> (length, destination).
    sent_msgs: HashMap<(NodeId, u64, u64), (usize, NodeId)>,
    /// Deliveries: (receiver, receiver incarnation, sender, sender incarnation, number).
    delivered_set: HashSet<(NodeId, u64, NodeId, u64, u64)>,
    /// Transfers their sender saw complete: (receiver, its incarnation when the transfer
    /// began, sender, sender incarnation, number); each must have been delivered.
    acknowledged: Vec<(NodeId, u64, NodeId, u64, u64)>,
    next_msg: Vec<u64>,
    sent: u64,
    delivered: u64,
    failed: u64,
    buf: Vec<u8>,
    /// After healing and a spell for what is in flight to end, each node sends one more
    /// message, which must arrive.
    liveness_at: u64,
    liveness_started: bool,
}

fn new_node(cfg: LdgConfig, inc: u64) -> Node {
    Node {
        sender: Sender::new(cfg, inc).expect("config"),
        receiver: Receiver::new(cfg, inc).expect("config"),
        incarnation: inc,
        started: 0,
        next_send_at: Instant::ZERO,
        transfers: HashMap::new(),
        taking: true,
    }
}

pub fn run_frag(seed: u64, opts: &FragSimOptions) -> Result<FragSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = FaultConfig::for_seed(seed, &mut rng, opts.faults, opts.partitions, opts.clogs);
    let cfg = config(&mut rng);
    // Messages whose fragments are one byte stay short.
    let len_max = if cfg.fragment_bytes == 1 {
        2000
    } else {
        300_000
    };
    let slow_taker = rng.chance(0.5);
    let n = opts.nodes;
    let net = Network::new(n, faults.clone(), rng.fork());
    let restarts = draw_restarts(&mut rng, opts.faults, 0.4, 3, opts.safety_ns, n);
    let liveness_at = opts.safety_ns + 1_500 * MS;
    let plan = Plan::event(
        "frag",
        seed,
        net,
        restarts.clone(),
        opts.safety_ns,
        liveness_at + 20_000 * MS,
    );
    let world = FragWorld {
        opts: opts.clone(),
        rng,
        faults,
        len_max,
        slow_taker,
        crashes: restarts.len(),
        nodes: (0..n).map(|_| new_node(cfg, 1)).collect(),
        sent_msgs: HashMap::new(),
        delivered_set: HashSet::new(),
        acknowledged: Vec::new(),
        next_msg: vec![0; n],
        sent: 0,
        delivered: 0,
        failed: 0,
        buf: vec![
            0u8;
            (msg::DATA_HEADER_BYTES + cfg.fragment_bytes)
                .max(txcast_proto::frag::ACK_BYTES_MAX)
        ],
        cfg,
        liveness_at,
        liveness_started: false,
    };
    harness::run(world, plan)
}

impl FragWorld {
    /// New transfers: during the safety phase as each node's schedule says, and one from
    /// every node when the liveness phase's transfers start.
    fn start_transfers(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (n, now) = (self.nodes.len(), run.now);
        let liveness_now = !self.liveness_started && now.0 >= self.liveness_at;
        for i in 0..n {
            let due = if liveness_now {
                true
            } else {
                !run.healed
                    && self.nodes[i].started < self.opts.messages_per_node
                    && self.nodes[i].next_send_at <= now
            };
            if !due {
                continue;
            }
            let rng = &mut self.rng;
            let j = (i + 1 + rng.below(n as u64 - 1) as usize) % n;
            let len = ID_BYTES + rng.below(self.len_max as u64 + 1) as usize;
            let k = self.next_msg[i];
            let deadline = if liveness_now {
                std::time::Duration::from_secs(15)
            } else {
                std::time::Duration::from_millis(50 + rng.below(3000))
            };
            let receiver_inc = self.nodes[j].incarnation;
            let node = &mut self.nodes[i];
            node.next_send_at = Instant(now.0 + rng.below(300 * MS));
            match node.sender.send(
                now,
                node_address(j),
                body(i, node.incarnation, k, len),
                deadline,
            ) {
                Ok(id) => {
                    self.next_msg[i] += 1;
                    self.sent += 1;
                    node.started += 1;
                    node.transfers
                        .insert(id, (j, k, receiver_inc, liveness_now));
                    self.sent_msgs.insert((i, node.incarnation, k), (len, j));
                }
                Err(LdgError::Full) if !liveness_now => {}
                Err(e) => return Err(run.fail(format!("node {i}: send refused: {e}"))),
            }
        }
        if liveness_now {
            self.liveness_started = true;
        }
        Ok(())
    }

    /// Applications take messages (slowly on some seeds until healing); each through the
    /// checker.
    fn take(&mut self, run: &mut Run) -> Result<(), Violation> {
        for (r, node) in self.nodes.iter_mut().enumerate() {
            if self.slow_taker && !run.healed {
                if self.rng.chance(0.01) {
                    node.taking = !node.taking;
                }
                if !node.taking {
                    continue;
                }
            }
            while let Some((from, m)) = node.receiver.poll_message() {
                let s = from.site as usize;
                let genuine = identity(&m).filter(|&(snd, inc, k)| {
                    snd == s
                        && self.sent_msgs.get(&(snd, inc, k)) == Some(&(m.len(), r))
                        && body(snd, inc, k, m.len()) == m
                });
                let Some((snd, inc, k)) = genuine else {
                    return Err(run.fail(format!(
                        "node {r} delivered {} bytes from node {s} that it never sent",
                        m.len()
                    )));
                };
                if !self
                    .delivered_set
                    .insert((r, node.incarnation, snd, inc, k))
                {
                    return Err(run.fail(format!(
                        "node {r} delivered message {k} of node {snd} twice"
                    )));
                }
                self.delivered += 1;
                run.digest.add_u64(k ^ run.ns());
                // Reused for a later reassembly: its stale bytes must all be overwritten
                // (the check above finds any that are not).
                node.receiver.recycle(m);
            }
            if node.receiver.bytes_held() > self.cfg.reassembly_bytes_max {
                return Err(run.fail(format!("node {r} holds more than its bound")));
            }
            if node.receiver.pooled_bytes() > self.cfg.pool_bytes_max {
                return Err(run.fail(format!("node {r} pools more than its bound")));
            }
        }
        Ok(())
    }

    /// Transfers that ended: a success is owed a delivery; a liveness-phase one must succeed.
    fn ended(&mut self, run: &mut Run) -> Result<(), Violation> {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            while let Some(b) = node.sender.poll_spent() {
                node.receiver.recycle(b);
            }
            while let Some((id, r)) = node.sender.poll_event() {
                let Some((j, k, j_inc, late)) = node.transfers.remove(&id) else {
                    return Err(run.fail(format!("node {i}: an event for unknown transfer {id:?}")));
                };
                match r {
                    Ok(()) => self.acknowledged.push((j, j_inc, i, node.incarnation, k)),
                    Err(e) => {
                        self.failed += 1;
                        if late {
                            return Err(run.fail(format!(
                                "liveness: node {i}'s message to node {j} after healing failed: {e}"
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl World for FragWorld {
    type Report = FragSimReport;

    fn restart(&mut self, _run: &mut Run, k: NodeId) {
        let inc = self.nodes[k].incarnation + 1;
        self.nodes[k] = new_node(self.cfg, inc);
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        // The sender's node rides in the last byte (a real port knows it from the header).
        let Some((&from, m)) = bytes.split_last() else {
            return Err(run.fail(format!("node {to} got an empty datagram")));
        };
        let (from, now, node) = (node_address(from as NodeId), run.now, &mut self.nodes[to]);
        match msg::parse(m) {
            Ok(LdgMsg::Data(h, p)) => node.receiver.handle_data(now, from, &h, p),
            Ok(LdgMsg::Ack(a)) => node.sender.handle_ack(now, from, &a),
            Ok(LdgMsg::Abort {
                incarnation,
                transfer,
            }) => node.receiver.handle_abort(from, incarnation, transfer),
            Err(e) => return Err(run.fail(format!("node {to} got a malformed message: {e}"))),
        }
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        for node in self.nodes.iter_mut() {
            if node.sender.poll_timeout().is_some_and(|t| t <= now) {
                node.sender.handle_timeout(now);
            }
            if node.receiver.poll_timeout().is_some_and(|t| t <= now) {
                node.receiver.handle_timeout(now);
            }
        }
        self.start_transfers(run)?;
        self.take(run)?;
        self.ended(run)?;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let buf = &mut self.buf;
            while let Some((to, len)) = node.receiver.poll_transmit(buf) {
                let mut m = buf[..len].to_vec();
                m.push(i as u8);
                run.net.send(now, i, to.site as usize, &m);
            }
            while let Some((to, len)) = node.sender.poll_transmit(now, buf) {
                let mut m = buf[..len].to_vec();
                m.push(i as u8);
                run.net.send(now, i, to.site as usize, &m);
            }
        }
        Ok(())
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = run.next_restart();
        for node in &self.nodes {
            next = min_opt(next, node.sender.poll_timeout());
            next = min_opt(next, node.receiver.poll_timeout());
            if !run.healed && node.started < self.opts.messages_per_node {
                next = min_opt(next, Some(node.next_send_at));
            }
        }
        if !run.healed && self.slow_taker {
            next = min_opt(next, Some(Instant(run.ns() + MS)));
        }
        if !self.liveness_started {
            next = min_opt(next, Some(Instant(self.liveness_at)));
        }
        next
    }

    fn done(&self, _run: &Run) -> bool {
        self.liveness_started
            && self
                .nodes
                .iter()
                .all(|x| x.transfers.is_empty() && x.receiver.reassembling() == 0)
    }

    fn stalled(&self, _run: &Run) -> String {
        let open: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, x)| {
                format!(
                    "node {i}: {} transfers, {} reassembling",
                    x.transfers.len(),
                    x.receiver.reassembling()
                )
            })
            .collect();
        format!("never quiet: {}", open.join("; "))
    }

    fn finish(self, run: &mut Run) -> Result<FragSimReport, Violation> {
        // A transfer its sender saw complete was delivered, unless its receiver crashed since.
        for &(j, j_inc, i, inc, k) in &self.acknowledged {
            let crashed = self.nodes[j].incarnation != j_inc;
            if !crashed && !self.delivered_set.contains(&(j, j_inc, i, inc, k)) {
                return Err(run.fail(format!(
                    "node {i}'s message {k} was acknowledged complete but node {j} never delivered it"
                )));
            }
        }
        let mut sender = SenderCounters::default();
        let mut receiver = ReceiverCounters::default();
        for node in &self.nodes {
            sender.add(&node.sender.counters);
            receiver.add(&node.receiver.counters);
        }
        Ok(FragSimReport {
            seed: run.seed,
            faults: self.faults,
            crashes: self.crashes,
            sent: self.sent,
            delivered: self.delivered,
            failed: self.failed,
            sender,
            receiver,
            net: run.net.counters.clone(),
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        })
    }
}
