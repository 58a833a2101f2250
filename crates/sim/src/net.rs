//! The simulated network: seeded loss, duplication, reordering, delay, capacity, partitions.

use crate::{Digest, NodeId};
use std::collections::BinaryHeap;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;

/// The fault mix of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfig {
    pub loss: f64,
    pub duplicate: f64,
    /// Probability that a packet takes an extra random delay (and so overtakes or is overtaken).
    pub reorder: f64,
    pub delay_min_ns: u64,
    pub delay_max_ns: u64,
    /// Most packets in flight on one path; more are dropped (a full queue).
    pub path_capacity: usize,
    /// Probability per step that a partition is cut (or healed when one is in force).
    pub partition_flip: f64,
    /// Probability per step that one path clogs: everything sent on it is held until the clog
    /// clears (up to `clog_max_ns` later), then arrives in a burst.
    pub clog: f64,
    pub clog_max_ns: u64,
}

impl FaultConfig {
    /// No faults: every packet arrives once after the minimum delay.
    pub fn none() -> Self {
        FaultConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            delay_min_ns: 10_000,
            delay_max_ns: 10_000,
            path_capacity: usize::MAX,
            partition_flip: 0.0,
            clog: 0.0,
            clog_max_ns: 0,
        }
    }

    /// Adds path clogging, drawn from its own generator.
    pub fn with_clogs(mut self, rng: &mut Rng) -> Self {
        if rng.chance(0.5) {
            self.clog = (rng.below(1000) as f64 / 1000.0) * 0.002;
            self.clog_max_ns = 1_000_000 + rng.below(50_000_000);
        }
        self
    }

    /// The fault mix of an event-clocked simulator's seed (`on`, else none): [`Self::swarm`]
    /// from `rng`, clogs from a generator of their own, and partitions unless
    /// `partitions` is off (turning either off replays the seed's other faults unchanged).
    pub fn for_seed(seed: u64, rng: &mut Rng, on: bool, partitions: bool, clogs: bool) -> Self {
        if !on {
            return FaultConfig::none();
        }
        let mut f = FaultConfig::swarm(rng);
        if clogs {
            f = f.with_clogs(&mut Rng::new(seed ^ 0xc10c_c10c));
        }
        if !partitions {
            f.partition_flip = 0.0;
        }
        f
    }

    /// The network faults of a group simulator's seed: [`Self::swarm`] without partitions
    /// (they come from their own schedule, in virtual time) and with delays of at most 2 ms.
    pub fn for_group(rng: &mut Rng) -> Self {
        let mut f = FaultConfig::swarm(rng);
        f.partition_flip = 0.0;
        f.delay_max_ns = f.delay_max_ns.min(f.delay_min_ns + 2_000_000);
        f
    }

    /// A fault mix drawn from `rng`: each fault is on or off, and its strength random.
    pub fn swarm(rng: &mut Rng) -> Self {
        let pick = |rng: &mut Rng, max: f64| {
            if rng.chance(0.5) {
                (rng.below(1000) as f64 / 1000.0) * max
            } else {
                0.0
            }
        };
        let delay_min_ns = 1_000 + rng.below(50_000);
        FaultConfig {
            loss: pick(rng, 0.3),
            duplicate: pick(rng, 0.2),
            reorder: pick(rng, 0.5),
            delay_min_ns,
            delay_max_ns: delay_min_ns + rng.below(2_000_000),
            path_capacity: if rng.chance(0.5) {
                4 + rng.below(200) as usize
            } else {
                usize::MAX
            },
            partition_flip: pick(rng, 0.002),
            // Drawn separately (`with_clogs`), so adding clogs did not change the other
            // faults of any existing seed.
            clog: 0.0,
            clog_max_ns: 0,
        }
    }
}

#[derive(PartialEq, Eq)]
struct InFlight {
    at: Instant,
    order: u64,
    from: NodeId,
    to: NodeId,
    bytes: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // A min-heap on (time, order).
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Counts of what the network did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetCounters {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub over_capacity: u64,
    pub partitioned: u64,
    pub clogged: u64,
}

pub struct Network {
    pub faults: FaultConfig,
    rng: Rng,
    queue: BinaryHeap<InFlight>,
    order: u64,
    in_flight: Vec<Vec<usize>>,
    /// `cut[a]` is the side of node `a` while a partition is in force.
    side: Vec<bool>,
    partitioned: bool,
    /// `clogged_until[a][b]`: the path a -> b holds its packets until then.
    clogged_until: Vec<Vec<u64>>,
    pub counters: NetCounters,
    pub digest: Digest,
}

impl Network {
    pub fn new(nodes: usize, faults: FaultConfig, rng: Rng) -> Self {
        Network {
            faults,
            rng,
            queue: BinaryHeap::new(),
            order: 0,
            in_flight: vec![vec![0; nodes]; nodes],
            side: vec![false; nodes],
            partitioned: false,
            clogged_until: vec![vec![0; nodes]; nodes],
            counters: NetCounters::default(),
            digest: Digest::default(),
        }
    }

    /// Nodes on the network.
    pub fn nodes(&self) -> usize {
        self.side.len()
    }

    /// Turns every fault off and heals partitions (the liveness phase).
    pub fn heal(&mut self) {
        let delay = self.faults.delay_min_ns;
        self.faults = FaultConfig {
            delay_min_ns: delay,
            delay_max_ns: delay,
            ..FaultConfig::none()
        };
        self.partitioned = false;
        for row in self.clogged_until.iter_mut() {
            row.iter_mut().for_each(|t| *t = 0);
        }
    }

    /// Maybe clogs a path (`now`: the current virtual time).
    pub fn step_clogs(&mut self, now: Instant) {
        if self.faults.clog > 0.0 && self.rng.chance(self.faults.clog) {
            let n = self.side.len() as u64;
            let a = self.rng.below(n) as usize;
            let b = self.rng.below(n) as usize;
            if a != b {
                let until = now.0 + self.rng.below(self.faults.clog_max_ns + 1);
                self.clogged_until[a][b] = self.clogged_until[a][b].max(until);
            }
        }
    }

    /// Clogs the path `from -> to` until `until`: what is sent on it meanwhile arrives then.
    pub fn clog(&mut self, from: NodeId, to: NodeId, until: Instant) {
        let c = &mut self.clogged_until[from][to];
        *c = (*c).max(until.0);
    }

    /// Cuts the network in two: `side(a)` says which side node `a` is on.
    pub fn cut_partition(&mut self, side: impl Fn(NodeId) -> bool) {
        for (a, s) in self.side.iter_mut().enumerate() {
            *s = side(a);
        }
        self.partitioned = true;
    }

    /// Heals a partition cut by [`Network::cut_partition`] (other faults stay).
    pub fn heal_partition(&mut self) {
        self.partitioned = false;
    }

    /// Maybe cuts or heals a partition.
    pub fn step_partitions(&mut self) {
        if self.faults.partition_flip > 0.0 && self.rng.chance(self.faults.partition_flip) {
            self.partitioned = !self.partitioned;
            if self.partitioned {
                for s in self.side.iter_mut() {
                    *s = self.rng.chance(0.5);
                }
            }
        }
    }

    fn cut(&self, a: NodeId, b: NodeId) -> bool {
        self.partitioned && self.side[a] != self.side[b]
    }

    pub fn send(&mut self, now: Instant, from: NodeId, to: NodeId, bytes: &[u8]) {
        self.counters.sent += 1;
        self.digest.add_u64(now.as_nanos());
        self.digest.add_u64((from * 1000 + to) as u64);
        self.digest.add(bytes);
        if self.cut(from, to) {
            self.counters.partitioned += 1;
            return;
        }
        if self.rng.chance(self.faults.loss) {
            self.counters.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate) {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if self.in_flight[from][to] >= self.faults.path_capacity {
                self.counters.over_capacity += 1;
                continue;
            }
            let f = &self.faults;
            let mut delay = f.delay_min_ns;
            if self.rng.chance(f.reorder) {
                self.counters.reordered += 1;
                delay += self.rng.below(f.delay_max_ns - f.delay_min_ns + 1);
            }
            let mut at = now.0 + delay;
            if self.clogged_until[from][to] > at {
                self.counters.clogged += 1;
                at = self.clogged_until[from][to];
            }
            self.in_flight[from][to] += 1;
            self.order += 1;
            self.queue.push(InFlight {
                at: Instant(at),
                order: self.order,
                from,
                to,
                bytes: bytes.to_vec(),
            });
        }
    }

    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.peek().map(|p| p.at)
    }

    /// The next packet due at or before `now`: (destination, bytes).
    pub fn pop_due(&mut self, now: Instant) -> Option<(NodeId, Vec<u8>)> {
        // A loop, not a recursion per packet the partition drops: a long partition can drop
        // tens of thousands in a row, past a sweep thread's stack.
        while self.queue.peek().is_some_and(|p| p.at <= now) {
            let p = self.queue.pop().expect("peeked");
            self.in_flight[p.from][p.to] -= 1;
            if self.cut(p.from, p.to) {
                self.counters.partitioned += 1;
                continue;
            }
            self.counters.delivered += 1;
            return Some((p.to, p.bytes));
        }
        None
    }
}
