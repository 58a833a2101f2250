//! Transaction multicast under simulated faults.
//!
//! The proto crate has no state machine for it beyond the wire form: a MULTICAST packet
//! ([`PacketWriter::multicast`], [`MulticastBody`]) names a transaction and carries records,
//! and the engine's rule for one that arrives is: check the packet (checksum, cluster, MAC),
//! then hand every record to the application if the port joined the transaction, else drop it.
//! It is unreliable, as a datagram: nothing is resent or deduplicated without a key. With a
//! key (half the seeds) packets are numbered and the engine's replay guard
//! ([`txcast_proto::replay::ReplayGuard`]) decides, with its hello exchange and the copies kept
//! for peers not heard from. [`TxnPort`] is that rule, sans-IO, over the proto codec. Nodes
//! join and leave transactions and multicast 1 to 3 messages a packet to every other node;
//! some seeds send damaged packets and packets sealed with another cluster's key. On keyed
//! seeds an attacker also replays packets it captured, and ports restart (a new incarnation
//! that joins the same transactions again).
//!
//! Checkers, at every packet:
//! - **members only**: a node takes a transaction's message only while it has joined it;
//! - **integrity**: what it takes is a message its source multicast to that transaction,
//!   unaltered; a damaged or forged packet gives nothing;
//! - **at most once**: a node takes a message no more often than the network brought it a
//!   packet holding it, and once at most on seeds whose network does not duplicate; with a
//!   key, once at most whatever the network and the attacker do, across restarts;
//! - **liveness**: after healing, with membership settled, each node multicasts once more,
//!   and every member of the transaction but the sender takes it exactly once. With a key
//!   every node first multicasts once to each transaction (not checked): a receiver that
//!   restarted refuses its first multicast from a source that knew its old incarnation, as
//!   the engine does.

use crate::harness::{self, min_opt, Plan, Run, Violation, World};
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{node_address, Digest, Node, NodeId};
use std::collections::{BTreeSet, HashMap, VecDeque};
use txcast_proto::replay::{Arrival, ReplayGuard};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::wire::{
    ClusterKey, DatagramBody, KeyRing, Kind, MulticastBody, Numbering, Packet, PacketHeader,
    PacketWriter, FLAG_ACK_NOW, PACKET_BYTES_MAX,
};
use txcast_proto::{Address, TxnId};

const MS: u64 = 1_000_000;
const CLUSTER: u16 = 3;
/// Packets a port holds to send, at most.
const OUT_MAX: usize = 64;
/// Messages a port holds for its application, at most (more are dropped, as by a full ring).
const TAKEN_MAX: usize = 256;

/// Knobs of one transaction multicast simulation.
#[derive(Clone, Debug)]
pub struct TxnSimOptions {
    pub nodes: usize,
    pub txns: usize,
    /// Multicasts (packets) each node sends in the safety phase.
    pub packets_per_node: u32,
    pub safety_ns: u64,
    pub faults: bool,
    pub partitions: bool,
    pub clogs: bool,
}

impl Default for TxnSimOptions {
    fn default() -> Self {
        TxnSimOptions {
            nodes: 5,
            txns: 4,
            packets_per_node: 100,
            safety_ns: 2_000 * MS,
            faults: true,
            partitions: true,
            clogs: true,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct TxnSimReport {
    pub seed: u64,
    pub faults: String,
    pub net: NetCounters,
    /// Messages multicast.
    pub sent: u64,
    /// Messages taken by members.
    pub taken: u64,
    /// Packets dropped at a node that had not joined their transaction.
    pub not_joined: u64,
    /// Damaged or forged packets sent, and copies of them refused by the codec.
    pub damaged: u64,
    pub refused: u64,
    /// The seed runs with a cluster key (and the replay guards).
    pub keyed: bool,
    /// Keyed seeds: packets the attacker replayed, packets the replay guards refused, port
    /// restarts.
    pub replayed: u64,
    pub replays_refused: u64,
    pub restarts: u64,
    pub end_ns: u64,
    pub digest: u64,
}

/// A packet a port built: bytes, destinations, the (source, number) of its messages.
pub type Built = (Vec<u8>, Vec<NodeId>, Vec<(NodeId, u64)>);

/// A node's port as transaction multicast sees it: the transactions joined, and the engine's
/// rule for a MULTICAST packet.
pub struct TxnPort {
    me: NodeId,
    incarnation: u64,
    key: Option<KeyRing>,
    /// With a key: the replay guard, as the engine keeps one per port.
    guard: Option<ReplayGuard>,
    joined: BTreeSet<TxnId>,
    /// Packets to send: (destinations, bytes).
    out: VecDeque<(Vec<NodeId>, Vec<u8>)>,
    /// Every packet built since the world last looked (multicasts, hellos, kept copies sent
    /// again) with its destinations and the (source, number) of each message it holds.
    pub built: Vec<Built>,
    /// Messages for the application: (source, transaction, payload).
    taken: VecDeque<(Address, TxnId, Vec<u8>)>,
    pub not_joined: u64,
    pub refused: u64,
    pub replays_refused: u64,
}

impl TxnPort {
    /// Node `me`'s port of incarnation `incarnation`; with `key`, guarded against replays.
    pub fn new(me: NodeId, key: Option<KeyRing>, incarnation: u64) -> TxnPort {
        TxnPort {
            me,
            incarnation,
            guard: key.as_ref().map(|_| ReplayGuard::new(incarnation)),
            key,
            joined: BTreeSet::new(),
            out: VecDeque::new(),
            built: Vec::new(),
            taken: VecDeque::new(),
            not_joined: 0,
            refused: 0,
            replays_refused: 0,
        }
    }

    fn header(&self, kind: Kind, to: NodeId) -> PacketHeader {
        PacketHeader {
            kind,
            flags: 0,
            cluster: CLUSTER,
            incarnation: self.incarnation,
            source: node_address(self.me),
            destination: node_address(to),
        }
    }

    /// Queues a packet of `msgs` to `to`, and notes it in `built`.
    fn queue(&mut self, to: Vec<NodeId>, bytes: Vec<u8>, msgs: &[Vec<u8>]) {
        let ids = msgs.iter().filter_map(|m| id_of(m)).collect();
        self.built.push((bytes.clone(), to.clone(), ids));
        self.out.push_back((to, bytes));
    }

    /// A hello to node `to` of incarnation `dst_incarnation` (`ask`: asking for one back).
    fn hello(&mut self, to: NodeId, dst_incarnation: u64, ask: bool) {
        let Some(g) = self.guard.as_mut() else {
            return;
        };
        let n = g.number_hello(dst_incarnation);
        let mut buf = vec![0u8; 256];
        let mut w = PacketWriter::datagram_numbered(
            &mut buf,
            self.header(Kind::Datagram, to),
            self.key.as_ref().map(|k| &**k.send_key()),
            n,
        );
        if ask {
            w.set_flags(FLAG_ACK_NOW);
        }
        let len = w.finish();
        buf.truncate(len);
        self.queue(vec![to], buf, &[]);
    }

    /// Multicast packet of `msgs` for `txn` to `to`, numbered `n` when given.
    fn build(
        &self,
        txn: TxnId,
        msgs: &[Vec<u8>],
        to: NodeId,
        n: Option<Numbering>,
        key: Option<&KeyRing>,
    ) -> Option<Vec<u8>> {
        let header = self.header(Kind::Multicast, to);
        let key = key.map(|k| &**k.send_key());
        let mut buf = vec![0u8; PACKET_BYTES_MAX];
        let mut w = match n {
            Some(n) => PacketWriter::multicast_numbered(&mut buf, header, key, txn, n),
            None => PacketWriter::multicast(&mut buf, header, key, txn),
        };
        if !msgs.iter().all(|m| w.push(m)) {
            return None;
        }
        let len = w.finish();
        buf.truncate(len);
        Some(buf)
    }

    pub fn join(&mut self, txn: TxnId) {
        self.joined.insert(txn);
    }

    pub fn leave(&mut self, txn: TxnId) {
        self.joined.remove(&txn);
    }

    /// One packet of `msgs` for `txn` to the nodes `to`, sealed with `key`; its bytes, or
    /// `None` if the queue is full or the messages do not fit.
    pub fn multicast(
        &mut self,
        now: Instant,
        txn: TxnId,
        msgs: &[Vec<u8>],
        to: Vec<NodeId>,
        key: Option<&KeyRing>,
    ) -> Option<Vec<u8>> {
        if self.out.len() >= OUT_MAX {
            return None;
        }
        // Numbered only under the port's own key (a forger's port has none).
        let n = match (self.guard.as_mut(), key.is_some()) {
            (Some(g), true) => Some(g.number_multicast()),
            _ => None,
        };
        let buf = self.build(txn, msgs, 0, n, key)?;
        if let (Some(g), Some(_)) = (self.guard.as_mut(), n) {
            for &j in &to {
                for m in msgs {
                    g.keep_unless_known(now, node_address(j), txn, &[m]);
                }
            }
        }
        self.queue(to, buf.clone(), msgs);
        Some(buf)
    }

    /// The guard's word on an arrival (with a key): sends the hello it asks for and the
    /// copies it releases; true if the packet may be taken.
    fn fresh(&mut self, now: Instant, h: &PacketHeader, a: Arrival) -> bool {
        let Some(g) = self.guard.as_mut() else {
            return true;
        };
        let o = g.arrive(now, a);
        let from = h.source.site as NodeId;
        if let Some(ask) = o.hello {
            self.hello(from, h.incarnation, ask);
        }
        for k in o.kept {
            let Some(txn) = k.txn else {
                continue;
            };
            let n = self.guard.as_mut().map(|g| g.number_multicast());
            let msgs = [k.msg];
            if self.out.len() < OUT_MAX {
                if let Some(b) = self.build(txn, &msgs, from, n, self.key.as_ref()) {
                    self.queue(vec![from], b, &msgs);
                }
            }
        }
        if o.refused.is_some() {
            self.replays_refused += 1;
        }
        o.refused.is_none()
    }

    /// The next message for the application.
    pub fn poll_taken(&mut self) -> Option<(Address, TxnId, Vec<u8>)> {
        self.taken.pop_front()
    }
}

impl Node for TxnPort {
    fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        let mut bytes = bytes.to_vec();
        let Ok(p) = Packet::open(&mut bytes, CLUSTER, self.key.as_ref()) else {
            self.refused += 1;
            return;
        };
        let h = p.header;
        let arrival = |numbering, multicast, records| Arrival {
            source: h.source,
            incarnation: h.incarnation,
            numbering,
            multicast,
            records,
            ack_now: h.flags & FLAG_ACK_NOW != 0,
        };
        if h.kind == Kind::Datagram && self.guard.is_some() {
            // A hello: the guard's, nothing to take.
            match DatagramBody::parse(h.flags, p.body) {
                Ok(d) if d.count == 0 => {
                    self.fresh(now, &h, arrival(d.numbering, false, 0));
                }
                _ => self.refused += 1,
            }
            return;
        }
        let body = (h.kind == Kind::Multicast)
            .then(|| MulticastBody::parse_flags(h.flags, p.body).ok())
            .flatten();
        let Some(m) = body else {
            self.refused += 1;
            return;
        };
        let source = h.source;
        if !self.joined.contains(&m.txn) {
            self.not_joined += 1;
            return;
        }
        if !self.fresh(now, &h, arrival(m.numbering, true, m.count)) {
            return;
        }
        for r in m.records().flatten() {
            if self.taken.len() < TAKEN_MAX {
                self.taken.push_back((source, m.txn, r.payload.to_vec()));
            }
        }
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn poll_transmit(
        &mut self,
        _now: Instant,
        buf: &mut [u8],
        to: &mut Vec<NodeId>,
    ) -> Option<usize> {
        let (dests, bytes) = self.out.pop_front()?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        to.extend(dests);
        Some(bytes.len())
    }
}

/// Message `k` of `src` for `txn`: names all three, then a filler of a length drawn from them.
fn payload(src: NodeId, k: u64, txn: TxnId) -> Vec<u8> {
    let mut v = (src as u16).to_le_bytes().to_vec();
    v.extend_from_slice(&k.to_le_bytes());
    v.extend_from_slice(&txn.0.to_le_bytes());
    let len = (Digest::of(&v) % 200) as usize;
    v.extend((0..len).map(|i| (k as u8).wrapping_add(i as u8)));
    v
}

/// The (source, number) a payload names.
fn id_of(p: &[u8]) -> Option<(NodeId, u64)> {
    let src = u16::from_le_bytes(p.get(..2)?.try_into().ok()?) as NodeId;
    Some((src, u64::from_le_bytes(p.get(2..10)?.try_into().ok()?)))
}

struct TxnWorld {
    opts: TxnSimOptions,
    rng: Rng,
    faults: FaultConfig,
    key: Option<KeyRing>,
    txns: Vec<TxnId>,
    ports: Vec<TxnPort>,
    /// The membership the workload asked for (the checker's own record).
    member: Vec<BTreeSet<TxnId>>,
    next_at: Vec<u64>,
    packets_sent: Vec<u32>,
    /// Damaged and forged packets on some seeds.
    damage: f64,
    last_packet: Option<Vec<u8>>,
    next_k: Vec<u64>,
    /// (source, number) -> (transaction, payload digest).
    sent: HashMap<(NodeId, u64), (TxnId, u64)>,
    /// Packet digest -> the messages in it.
    packets: HashMap<u64, Vec<(NodeId, u64)>>,
    /// (node, source, number) -> copies the network brought, and copies taken.
    arrived: HashMap<(NodeId, NodeId, u64), u32>,
    took: HashMap<(NodeId, NodeId, u64), u32>,
    /// The liveness round: when it goes, and (node, source, number) each member must take.
    liveness_at: u64,
    owed: Option<Vec<(NodeId, NodeId, u64)>>,
    /// Keyed seeds: the warm-up round before the liveness round has gone.
    warmed: bool,
    /// Keyed seeds: each node's port incarnation, and packets the attacker captured (source,
    /// destinations, bytes; the last `CAPTURED_MAX`).
    incarnations: Vec<u64>,
    captured: VecDeque<(NodeId, Vec<NodeId>, Vec<u8>)>,
    r: TxnSimReport,
}

/// Packets the attacker of keyed seeds remembers.
const CAPTURED_MAX: usize = 256;
/// Keyed seeds, at each node's workload step: chances of a replay and of a port restart.
const REPLAY_CHANCE: f64 = 0.1;
const RESTART_CHANCE: f64 = 0.005;

/// Runs one seed; `Err` names the first rule broken.
pub fn run_txn(seed: u64, opts: &TxnSimOptions) -> Result<TxnSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = FaultConfig::for_seed(seed, &mut rng, opts.faults, opts.partitions, opts.clogs);
    let n = opts.nodes.max(2);
    let key = rng.chance(0.5).then(|| {
        let mut k = [0u8; 32];
        k.iter_mut().for_each(|b| *b = rng.below(256) as u8);
        KeyRing::from(ClusterKey(k))
    });
    let txns: Vec<TxnId> = (0..opts.txns.max(1))
        .map(|_| TxnId(1 + rng.below(u64::MAX - 1)))
        .collect();
    let damage = if opts.faults && rng.chance(0.5) {
        0.05
    } else {
        0.0
    };
    let liveness_at = opts.safety_ns + 500 * MS;
    let plan = Plan {
        buf_bytes: PACKET_BYTES_MAX,
        ..Plan::event(
            "txn",
            seed,
            Network::new(n, faults.clone(), rng.fork()),
            Vec::new(),
            opts.safety_ns,
            liveness_at + 2_000 * MS,
        )
    };
    let world = TxnWorld {
        opts: opts.clone(),
        faults: faults.clone(),
        ports: (0..n).map(|i| TxnPort::new(i, key.clone(), 1)).collect(),
        key,
        txns,
        member: vec![BTreeSet::new(); n],
        next_at: (0..n).map(|_| rng.below(5 * MS)).collect(),
        packets_sent: vec![0; n],
        rng,
        damage,
        last_packet: None,
        next_k: vec![0; n],
        sent: HashMap::new(),
        packets: HashMap::new(),
        arrived: HashMap::new(),
        took: HashMap::new(),
        liveness_at,
        owed: None,
        warmed: false,
        incarnations: vec![1; n],
        captured: VecDeque::new(),
        r: TxnSimReport {
            seed,
            faults: format!("{faults:?} damage {damage}"),
            ..TxnSimReport::default()
        },
    };
    harness::run(world, plan)
}

impl TxnWorld {
    /// Node `i` multicasts `count` messages for `txn` to every other node, in one packet.
    fn multicast(&mut self, now: Instant, i: NodeId, txn: TxnId, count: u64) -> Vec<(NodeId, u64)> {
        let ids: Vec<(NodeId, u64)> = (0..count).map(|c| (i, self.next_k[i] + c)).collect();
        let msgs: Vec<Vec<u8>> = ids.iter().map(|&(s, k)| payload(s, k, txn)).collect();
        let to: Vec<NodeId> = (0..self.ports.len()).filter(|&j| j != i).collect();
        let Some(bytes) = self.ports[i].multicast(now, txn, &msgs, to, self.key.as_ref()) else {
            return Vec::new();
        };
        self.note_built(i);
        self.next_k[i] += count;
        for (id, m) in ids.iter().zip(&msgs) {
            self.sent.insert(*id, (txn, Digest::of(m)));
        }
        self.r.sent += count;
        self.packets.insert(Digest::of(&bytes), ids.clone());
        self.last_packet = Some(bytes);
        ids
    }

    /// A damaged copy of the last packet (a byte changed, or cut short), or one sealed with
    /// another key, to a random node.
    fn damaged(&mut self, run: &mut Run, i: NodeId) {
        let n = self.ports.len();
        let j = (i + 1 + self.rng.below(n as u64 - 1) as usize) % n;
        let bytes = match self.rng.below(3) {
            0 | 1 => {
                let Some(mut b) = self.last_packet.clone() else {
                    return;
                };
                let k = self.rng.below(b.len() as u64) as usize;
                if self.rng.chance(0.5) {
                    b[k] ^= 1 + self.rng.below(255) as u8;
                } else {
                    b.truncate(k);
                }
                b
            }
            _ => {
                let txn = self.txns[0];
                let forged = KeyRing::from(ClusterKey([0x5a; 32]));
                let mut port = TxnPort::new(i, None, 1);
                let Some(b) = port.multicast(
                    run.now,
                    txn,
                    &[payload(i, u64::MAX, txn)],
                    vec![j],
                    Some(&forged),
                ) else {
                    return;
                };
                b
            }
        };
        self.r.damaged += 1;
        run.net.send(run.now, i, j, &bytes);
    }

    /// What node `j` took, through the checkers.
    fn check(&mut self, run: &mut Run, j: NodeId) -> Result<(), Violation> {
        while let Some((source, txn, p)) = self.ports[j].poll_taken() {
            let Some((s, k)) = id_of(&p) else {
                return Err(run.fail(format!("node {j} took {} bytes nobody sent", p.len())));
            };
            if !self.member[j].contains(&txn) {
                return Err(run.fail(format!("node {j} took {s}#{k} of {txn} without joining it")));
            }
            if self.sent.get(&(s, k)) != Some(&(txn, Digest::of(&p))) || source != node_address(s) {
                return Err(run.fail(format!(
                    "node {j} took {s}#{k} of {txn} from {source}: not what was multicast"
                )));
            }
            let copies = self.arrived.get(&(j, s, k)).copied().unwrap_or(0);
            let took = self.took.entry((j, s, k)).or_default();
            *took += 1;
            let once = self.faults.duplicate == 0.0 || self.key.is_some();
            if *took > copies || (*took > 1 && once) {
                return Err(run.fail(format!(
                    "node {j} took {s}#{k} {} times, the network brought it {copies}",
                    *took
                )));
            }
            self.r.taken += 1;
            run.digest.add_u64((j as u64) << 48 ^ (s as u64) << 40 ^ k);
        }
        Ok(())
    }

    /// Records what node `i`'s port built: the messages each packet holds (for the
    /// checkers), and on keyed seeds what the attacker captures.
    fn note_built(&mut self, i: NodeId) {
        for (bytes, to, ids) in std::mem::take(&mut self.ports[i].built) {
            self.packets.insert(Digest::of(&bytes), ids);
            if self.key.is_some() {
                if self.captured.len() >= CAPTURED_MAX {
                    self.captured.pop_front();
                }
                self.captured.push_back((i, to, bytes));
            }
        }
    }

    /// Keyed seeds: the attacker sends a captured packet again, from its source's address to
    /// one of its destinations.
    fn replay(&mut self, run: &mut Run) {
        if self.captured.is_empty() {
            return;
        }
        let pick = self.rng.below(self.captured.len() as u64) as usize;
        let (from, to, bytes) = &self.captured[pick];
        let Some(&dest) = to.get(self.rng.below(to.len().max(1) as u64) as usize) else {
            return;
        };
        self.r.replayed += 1;
        run.net.send(run.now, *from, dest, bytes);
    }

    /// Keyed seeds: node `i`'s port restarts (what it had queued is lost) with a new
    /// incarnation and joins its transactions again.
    fn restart(&mut self, i: NodeId) {
        self.incarnations[i] += 1;
        let mut port = TxnPort::new(i, self.key.clone(), self.incarnations[i]);
        for &t in &self.member[i] {
            port.join(t);
        }
        let old = std::mem::replace(&mut self.ports[i], port);
        self.r.not_joined += old.not_joined;
        self.r.refused += old.refused;
        self.r.replays_refused += old.replays_refused;
        self.r.restarts += 1;
    }

    /// Keyed seeds, after healing: every node multicasts once to each transaction, so that
    /// the receivers' replay windows exist before the liveness round.
    fn warm_up(&mut self, now: Instant) {
        for i in 0..self.ports.len() {
            for t in 0..self.txns.len() {
                let txn = self.txns[t];
                self.multicast(now, i, txn, 1);
            }
        }
        self.warmed = true;
    }

    /// The liveness round: every node multicasts once to a transaction; each member but the
    /// sender owes a delivery.
    fn liveness_round(&mut self, now: Instant) {
        let mut owed = Vec::new();
        for i in 0..self.ports.len() {
            let txn = self.txns[self.rng.below(self.txns.len() as u64) as usize];
            for (s, k) in self.multicast(now, i, txn, 1) {
                for j in (0..self.ports.len()).filter(|&j| j != i && self.member[j].contains(&txn))
                {
                    owed.push((j, s, k));
                }
            }
        }
        self.owed = Some(owed);
    }

    fn warm_up_at(&self) -> u64 {
        self.liveness_at - 250 * MS
    }

    fn missing(&self) -> Vec<&(NodeId, NodeId, u64)> {
        self.owed
            .iter()
            .flatten()
            .filter(|&&(j, s, k)| self.took.get(&(j, s, k)) != Some(&1))
            .collect()
    }
}

impl World for TxnWorld {
    type Report = TxnSimReport;

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        run.digest.add_u64(to as u64);
        run.digest.add(&bytes);
        let ours = self.packets.contains_key(&Digest::of(&bytes));
        for &(s, k) in self.packets.get(&Digest::of(&bytes)).into_iter().flatten() {
            *self.arrived.entry((to, s, k)).or_default() += 1;
        }
        let refused = self.ports[to].refused;
        self.ports[to].handle_message(run.now, &bytes);
        self.note_built(to);
        // A packet multicast as built is taken or dropped for its transaction; a damaged or
        // forged one is refused by the codec.
        if ours == (self.ports[to].refused > refused) {
            let what = if ours {
                "a good packet refused"
            } else {
                "a damaged packet accepted"
            };
            return Err(run.fail(format!("node {to}: {what}")));
        }
        self.check(run, to)
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (now, n) = (run.ns(), self.ports.len());
        for i in 0..n {
            if run.healed
                || now < self.next_at[i]
                || self.packets_sent[i] >= self.opts.packets_per_node
            {
                continue;
            }
            self.next_at[i] = now + self.rng.below(5 * MS);
            let txn = self.txns[self.rng.below(self.txns.len() as u64) as usize];
            if self.rng.chance(0.2) {
                // Join or leave: the port and the checker's record alike.
                if self.member[i].insert(txn) {
                    self.ports[i].join(txn);
                } else {
                    self.member[i].remove(&txn);
                    self.ports[i].leave(txn);
                }
                continue;
            }
            let count = 1 + self.rng.below(3);
            if !self.multicast(run.now, i, txn, count).is_empty() {
                self.packets_sent[i] += 1;
            }
            if self.damage > 0.0 && self.rng.chance(self.damage) {
                self.damaged(run, i);
            }
            if self.key.is_some() && self.opts.faults {
                if self.rng.chance(REPLAY_CHANCE) {
                    self.replay(run);
                }
                if self.rng.chance(RESTART_CHANCE) {
                    self.restart(i);
                }
            }
        }
        if self.key.is_some() && !self.warmed && now >= self.warm_up_at() {
            self.warm_up(run.now);
        }
        if self.owed.is_none() && now >= self.liveness_at {
            self.liveness_round(run.now);
        }
        for (i, port) in self.ports.iter_mut().enumerate() {
            run.transmit(i, port);
        }
        Ok(())
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = self.owed.is_none().then_some(Instant(self.liveness_at));
        if self.key.is_some() && !self.warmed {
            next = min_opt(next, Some(Instant(self.warm_up_at())));
        }
        for (i, &t) in self.next_at.iter().enumerate() {
            if !run.healed && self.packets_sent[i] < self.opts.packets_per_node {
                next = min_opt(next, Some(Instant(t)));
            }
        }
        next
    }

    fn done(&self, _run: &Run) -> bool {
        self.owed.is_some() && self.missing().is_empty()
    }

    fn stalled(&self, _run: &Run) -> String {
        format!(
            "after healing, (member, source, number) never taken: {:?}",
            self.missing()
        )
    }

    fn finish(self, run: &mut Run) -> Result<TxnSimReport, Violation> {
        let mut r = self.r;
        for p in &self.ports {
            r.not_joined += p.not_joined;
            r.refused += p.refused;
            r.replays_refused += p.replays_refused;
        }
        r.keyed = self.key.is_some();
        r.net = run.net.counters.clone();
        r.end_ns = run.ns();
        r.digest = run.digest.0;
        Ok(r)
    }
}
