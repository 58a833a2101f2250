//! Transaction multicast under simulated faults.
//!
//! The proto crate has no state machine for it beyond the wire form: a MULTICAST packet
//! ([`PacketWriter::multicast`], [`MulticastBody`]) names a transaction and carries records,
//! and the engine's rule for one that arrives is: check the packet (checksum, cluster, MAC),
//! then hand every record to the application if the port joined the transaction, else drop it.
//! It is unreliable, as a datagram: nothing is resent or deduplicated. [`TxnPort`] is that
//! rule, sans-IO, over the proto codec. Nodes join and leave transactions and multicast 1 to 3
//! messages a packet to every other node; some seeds send damaged packets and packets sealed
//! with another cluster's key.
//!
//! Checkers, at every packet:
//! - **members only**: a node takes a transaction's message only while it has joined it;
//! - **integrity**: what it takes is a message its source multicast to that transaction,
//!   unaltered; a damaged or forged packet gives nothing;
//! - **at most once**: a node takes a message no more often than the network brought it a
//!   packet holding it, and once at most on seeds whose network does not duplicate;
//! - **liveness**: after healing, with membership settled, each node multicasts once more,
//!   and every member of the transaction but the sender takes it exactly once.

use crate::harness::{self, min_opt, Plan, Run, Violation, World};
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{node_address, Digest, Node, NodeId};
use std::collections::{BTreeSet, HashMap, VecDeque};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::wire::{
    ClusterKey, KeyRing, Kind, MulticastBody, Packet, PacketHeader, PacketWriter, PACKET_BYTES_MAX,
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
    pub end_ns: u64,
    pub digest: u64,
}

/// A node's port as transaction multicast sees it: the transactions joined, and the engine's
/// rule for a MULTICAST packet.
pub struct TxnPort {
    me: NodeId,
    key: Option<KeyRing>,
    joined: BTreeSet<TxnId>,
    /// Packets to send: (destinations, bytes).
    out: VecDeque<(Vec<NodeId>, Vec<u8>)>,
    /// Messages for the application: (source, transaction, payload).
    taken: VecDeque<(Address, TxnId, Vec<u8>)>,
    pub not_joined: u64,
    pub refused: u64,
}

impl TxnPort {
    pub fn new(me: NodeId, key: Option<KeyRing>) -> TxnPort {
        TxnPort {
            me,
            key,
            joined: BTreeSet::new(),
            out: VecDeque::new(),
            taken: VecDeque::new(),
            not_joined: 0,
            refused: 0,
        }
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
        txn: TxnId,
        msgs: &[Vec<u8>],
        to: Vec<NodeId>,
        key: Option<&KeyRing>,
    ) -> Option<Vec<u8>> {
        if self.out.len() >= OUT_MAX {
            return None;
        }
        let header = PacketHeader {
            kind: Kind::Multicast,
            flags: 0,
            cluster: CLUSTER,
            incarnation: 1,
            source: node_address(self.me),
            destination: node_address(0),
        };
        let mut buf = vec![0u8; PACKET_BYTES_MAX];
        let mut w = PacketWriter::multicast(&mut buf, header, key.map(|k| &**k.send_key()), txn);
        if !msgs.iter().all(|m| w.push(m)) {
            return None;
        }
        let len = w.finish();
        buf.truncate(len);
        self.out.push_back((to, buf.clone()));
        Some(buf)
    }

    /// The next message for the application.
    pub fn poll_taken(&mut self) -> Option<(Address, TxnId, Vec<u8>)> {
        self.taken.pop_front()
    }
}

impl Node for TxnPort {
    fn handle_message(&mut self, _now: Instant, bytes: &[u8]) {
        let mut bytes = bytes.to_vec();
        let body = Packet::open(&mut bytes, CLUSTER, self.key.as_ref())
            .ok()
            .filter(|p| p.header.kind == Kind::Multicast)
            .and_then(|p| Some((p.header.source, MulticastBody::parse(p.body).ok()?)));
        let Some((source, m)) = body else {
            self.refused += 1;
            return;
        };
        if !self.joined.contains(&m.txn) {
            self.not_joined += 1;
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
    r: TxnSimReport,
}

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
        ports: (0..n).map(|i| TxnPort::new(i, key.clone())).collect(),
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
    fn multicast(&mut self, i: NodeId, txn: TxnId, count: u64) -> Vec<(NodeId, u64)> {
        let ids: Vec<(NodeId, u64)> = (0..count).map(|c| (i, self.next_k[i] + c)).collect();
        let msgs: Vec<Vec<u8>> = ids.iter().map(|&(s, k)| payload(s, k, txn)).collect();
        let to: Vec<NodeId> = (0..self.ports.len()).filter(|&j| j != i).collect();
        let Some(bytes) = self.ports[i].multicast(txn, &msgs, to, self.key.as_ref()) else {
            return Vec::new();
        };
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
                let mut port = TxnPort::new(i, None);
                let Some(b) =
                    port.multicast(txn, &[payload(i, u64::MAX, txn)], vec![j], Some(&forged))
                else {
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
            if *took > copies || (*took > 1 && self.faults.duplicate == 0.0) {
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

    /// The liveness round: every node multicasts once to a transaction; each member but the
    /// sender owes a delivery.
    fn liveness_round(&mut self) {
        let mut owed = Vec::new();
        for i in 0..self.ports.len() {
            let txn = self.txns[self.rng.below(self.txns.len() as u64) as usize];
            for (s, k) in self.multicast(i, txn, 1) {
                for j in (0..self.ports.len()).filter(|&j| j != i && self.member[j].contains(&txn))
                {
                    owed.push((j, s, k));
                }
            }
        }
        self.owed = Some(owed);
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
        let ours = self.packets.get(&Digest::of(&bytes));
        for &(s, k) in ours.into_iter().flatten() {
            *self.arrived.entry((to, s, k)).or_default() += 1;
        }
        let refused = self.ports[to].refused;
        self.ports[to].handle_message(run.now, &bytes);
        // A packet multicast as built is taken or dropped for its transaction; a damaged or
        // forged one is refused by the codec.
        if ours.is_some() == (self.ports[to].refused > refused) {
            let what = if ours.is_some() {
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
            if !self.multicast(i, txn, count).is_empty() {
                self.packets_sent[i] += 1;
            }
            if self.damage > 0.0 && self.rng.chance(self.damage) {
                self.damaged(run, i);
            }
        }
        if self.owed.is_none() && now >= self.liveness_at {
            self.liveness_round();
        }
        for (i, port) in self.ports.iter_mut().enumerate() {
            run.transmit(i, port);
        }
        Ok(())
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = self.owed.is_none().then_some(Instant(self.liveness_at));
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
        }
        r.net = run.net.counters.clone();
        r.end_ns = run.ns();
        r.digest = run.digest.0;
        Ok(r)
    }
}
