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

use crate::net::{FaultConfig, NetCounters, Network};
use crate::{Digest, NodeId};
use std::collections::{HashMap, HashSet};
use txcast_proto::addr::Address;
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
}

impl Default for FragSimOptions {
    fn default() -> Self {
        FragSimOptions {
            nodes: 3,
            messages_per_node: 12,
            safety_ns: 4_000 * MS,
            faults: true,
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

fn address(node: NodeId) -> Address {
    Address::new(0, node as u16, 1, 0)
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

pub fn run_frag(seed: u64, opts: &FragSimOptions) -> Result<FragSimReport, String> {
    let fail = |what: String| {
        format!("frag simulation seed {seed}: {what}\n  replay: cargo run --release -- sim frag --seed {seed}")
    };
    let mut rng = Rng::new(seed);
    let faults = if opts.faults {
        FaultConfig::swarm(&mut rng).with_clogs(&mut Rng::new(seed ^ 0xc10c_c10c))
    } else {
        FaultConfig::none()
    };
    let cfg = config(&mut rng);
    // Messages whose fragments are one byte stay short.
    let len_max = if cfg.fragment_bytes == 1 {
        2000
    } else {
        300_000
    };
    let slow_taker = rng.chance(0.5);
    let n = opts.nodes;
    let mut net = Network::new(n, faults.clone(), rng.fork());
    let new_node = |inc: u64| Node {
        sender: Sender::new(cfg, inc).expect("config"),
        receiver: Receiver::new(cfg, inc).expect("config"),
        incarnation: inc,
        started: 0,
        next_send_at: Instant::ZERO,
        transfers: HashMap::new(),
        taking: true,
    };
    let mut nodes: Vec<Node> = (0..n).map(|_| new_node(1)).collect();
    let mut crashes: Vec<(u64, NodeId)> = Vec::new();
    if opts.faults && rng.chance(0.4) {
        for _ in 0..1 + rng.below(3) {
            crashes.push((rng.below(opts.safety_ns), rng.below(n as u64) as usize));
        }
        crashes.sort_unstable();
    }
    let crash_count = crashes.len();
    // Messages sent: (sender, incarnation, number) -> (length, destination).
    let mut sent_msgs: HashMap<(NodeId, u64, u64), (usize, NodeId)> = HashMap::new();
    // Deliveries: (receiver, receiver incarnation, sender, sender incarnation, number).
    let mut delivered_set: HashSet<(NodeId, u64, NodeId, u64, u64)> = HashSet::new();
    // Transfers their sender saw complete: (receiver, its incarnation when the transfer
    // began, sender, sender incarnation, number); each must have been delivered.
    let mut acknowledged: Vec<(NodeId, u64, NodeId, u64, u64)> = Vec::new();
    let mut next_msg = vec![0u64; n];
    let (mut sent, mut delivered, mut failed) = (0u64, 0u64, 0u64);
    let mut digest = Digest::default();
    let mut buf = vec![
        0u8;
        (msg::DATA_HEADER_BYTES + cfg.fragment_bytes)
            .max(txcast_proto::frag::ACK_BYTES_MAX)
    ];
    let mut now = Instant::ZERO;
    let mut healed = false;
    // After healing and a spell for what is in flight to end, each node sends one more
    // message, which must arrive.
    let liveness_at = opts.safety_ns + 1_500 * MS;
    let mut liveness_started = false;
    let end_ns = liveness_at + 20_000 * MS;
    loop {
        if !healed && now.0 >= opts.safety_ns {
            net.heal();
            healed = true;
            for node in nodes.iter_mut() {
                node.taking = true;
            }
        }
        if !healed {
            net.step_partitions();
            net.step_clogs(now);
        }
        while crashes.first().is_some_and(|&(t, _)| t <= now.0) {
            let (_, k) = crashes.remove(0);
            digest.add_u64(now.0 ^ k as u64);
            let inc = nodes[k].incarnation + 1;
            nodes[k] = new_node(inc);
        }
        while let Some((to, bytes)) = net.pop_due(now) {
            let (from, m) = (bytes[bytes.len() - 1] as usize, &bytes[..bytes.len() - 1]);
            let node = &mut nodes[to];
            match msg::parse(m) {
                Ok(LdgMsg::Data(h, p)) => node.receiver.handle_data(now, address(from), &h, p),
                Ok(LdgMsg::Ack(a)) => node.sender.handle_ack(now, address(from), &a),
                Ok(LdgMsg::Abort {
                    incarnation,
                    transfer,
                }) => node
                    .receiver
                    .handle_abort(address(from), incarnation, transfer),
                Err(e) => return Err(fail(format!("node {to} got a malformed message: {e}"))),
            }
        }
        for node in nodes.iter_mut() {
            if node.sender.poll_timeout().is_some_and(|t| t <= now) {
                node.sender.handle_timeout(now);
            }
            if node.receiver.poll_timeout().is_some_and(|t| t <= now) {
                node.receiver.handle_timeout(now);
            }
        }
        // New transfers.
        let liveness_now = !liveness_started && now.0 >= liveness_at;
        for i in 0..n {
            let due = if liveness_now {
                true
            } else {
                !healed && nodes[i].started < opts.messages_per_node && nodes[i].next_send_at <= now
            };
            if !due {
                continue;
            }
            let j = (i + 1 + rng.below(n as u64 - 1) as usize) % n;
            let len = ID_BYTES + rng.below(len_max as u64 + 1) as usize;
            let k = next_msg[i];
            let deadline = if liveness_now {
                std::time::Duration::from_secs(15)
            } else {
                std::time::Duration::from_millis(50 + rng.below(3000))
            };
            let receiver_inc = nodes[j].incarnation;
            let node = &mut nodes[i];
            node.next_send_at = Instant(now.0 + rng.below(300 * MS));
            match node
                .sender
                .send(now, address(j), body(i, node.incarnation, k, len), deadline)
            {
                Ok(id) => {
                    next_msg[i] += 1;
                    sent += 1;
                    node.started += 1;
                    node.transfers
                        .insert(id, (j, k, receiver_inc, liveness_now));
                    sent_msgs.insert((i, node.incarnation, k), (len, j));
                }
                Err(LdgError::Full) if !liveness_now => {}
                Err(e) => return Err(fail(format!("node {i}: send refused: {e}"))),
            }
        }
        if liveness_now {
            liveness_started = true;
        }
        // Applications take messages (slowly on some seeds until healing).
        for (r, node) in nodes.iter_mut().enumerate() {
            if slow_taker && !healed {
                if rng.chance(0.01) {
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
                        && sent_msgs.get(&(snd, inc, k)) == Some(&(m.len(), r))
                        && body(snd, inc, k, m.len()) == m
                });
                let Some((snd, inc, k)) = genuine else {
                    return Err(fail(format!(
                        "node {r} delivered {} bytes from node {s} that it never sent",
                        m.len()
                    )));
                };
                if !delivered_set.insert((r, node.incarnation, snd, inc, k)) {
                    return Err(fail(format!(
                        "node {r} delivered message {k} of node {snd} twice"
                    )));
                }
                delivered += 1;
                digest.add_u64(k ^ now.0);
                // Reused for a later reassembly: its stale bytes must all be overwritten
                // (the check above finds any that are not).
                node.receiver.recycle(m);
            }
            if node.receiver.bytes_held() > cfg.reassembly_bytes_max {
                return Err(fail(format!("node {r} holds more than its bound")));
            }
            if node.receiver.pooled_bytes() > cfg.pool_bytes_max {
                return Err(fail(format!("node {r} pools more than its bound")));
            }
        }
        // Transfers that ended.
        for (i, node) in nodes.iter_mut().enumerate() {
            while let Some(b) = node.sender.poll_spent() {
                node.receiver.recycle(b);
            }
            while let Some((id, r)) = node.sender.poll_event() {
                let Some((j, k, j_inc, late)) = node.transfers.remove(&id) else {
                    return Err(fail(format!(
                        "node {i}: an event for unknown transfer {id:?}"
                    )));
                };
                match r {
                    Ok(()) => acknowledged.push((j, j_inc, i, node.incarnation, k)),
                    Err(e) => {
                        failed += 1;
                        if late {
                            return Err(fail(format!(
                                "liveness: node {i}'s message to node {j} after healing failed: {e}"
                            )));
                        }
                    }
                }
            }
        }
        // Output.
        for (i, node) in nodes.iter_mut().enumerate() {
            while let Some((to, len)) = node.receiver.poll_transmit(&mut buf) {
                let mut m = buf[..len].to_vec();
                m.push(i as u8);
                net.send(now, i, to.site as usize, &m);
            }
            while let Some((to, len)) = node.sender.poll_transmit(now, &mut buf) {
                let mut m = buf[..len].to_vec();
                m.push(i as u8);
                net.send(now, i, to.site as usize, &m);
            }
        }
        let quiet = liveness_started
            && nodes
                .iter()
                .all(|x| x.transfers.is_empty() && x.receiver.reassembling() == 0);
        if quiet {
            break;
        }
        if now.0 > end_ns {
            let open: Vec<String> = nodes
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
            return Err(fail(format!("liveness: never quiet: {}", open.join("; "))));
        }
        // Next event.
        let mut next = net.next_arrival();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |x: Instant| x.min(t)));
            }
        };
        for node in &nodes {
            consider(node.sender.poll_timeout());
            consider(node.receiver.poll_timeout());
            if !healed && node.started < opts.messages_per_node {
                consider(Some(node.next_send_at));
            }
        }
        if let Some(&(t, _)) = crashes.first() {
            consider(Some(Instant(t)));
        }
        if !healed {
            consider(Some(Instant(opts.safety_ns)));
            if slow_taker {
                consider(Some(Instant(now.0 + MS)));
            }
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
    // A transfer its sender saw complete was delivered, unless its receiver crashed since.
    for &(j, j_inc, i, inc, k) in &acknowledged {
        let crashed = nodes[j].incarnation != j_inc;
        if !crashed && !delivered_set.contains(&(j, j_inc, i, inc, k)) {
            return Err(fail(format!(
                "node {i}'s message {k} was acknowledged complete but node {j} never delivered it"
            )));
        }
    }
    let mut sender = SenderCounters::default();
    let mut receiver = ReceiverCounters::default();
    for node in &nodes {
        sender.add(&node.sender.counters);
        receiver.add(&node.receiver.counters);
    }
    digest.add_u64(net.digest.0);
    Ok(FragSimReport {
        seed,
        faults,
        crashes: crash_count,
        sent,
        delivered,
        failed,
        sender,
        receiver,
        net: net.counters.clone(),
        end_ns: now.0,
        digest: digest.0,
    })
}
