//! A seed's partitions and clogged paths on their own schedules (the group simulators' faults,
//! run by the harness during the safety phase). Each is drawn from a generator of its own, so
//! turning one off replays a seed's other faults unchanged.

use crate::net::Network;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// Some seeds (40 %) cut the network in two at random times, for anything from a blip the
/// failure detector never notices to longer than a view change takes.
pub struct Partitions {
    next_at: u64,
    cut: bool,
    rng: Rng,
}

impl Partitions {
    /// The schedule of `seed`, if it has one (and `enabled`); the first cut comes in the
    /// first half of the safety phase.
    pub fn for_seed(seed: u64, enabled: bool, safety_ns: u64) -> Option<Partitions> {
        let mut rng = Rng::new(seed ^ 0x7061_7274_6974_696f);
        (enabled && rng.chance(0.4)).then(|| Partitions {
            next_at: rng.below(safety_ns / 2),
            cut: false,
            rng,
        })
    }

    /// Cuts or heals the network of `slots` nodes when the schedule says so; true if it cut.
    pub fn step(&mut self, now: u64, net: &mut Network, slots: usize, trace: bool) -> bool {
        if now < self.next_at {
            return false;
        }
        if self.cut {
            self.cut = false;
            self.next_at = now + 100_000_000 + self.rng.below(1_500_000_000);
            net.heal_partition();
            if trace {
                eprintln!("{now:>10} partition healed");
            }
            return false;
        }
        self.cut = true;
        self.next_at = now + 10_000_000 + self.rng.below(1_500_000_000);
        let sides: Vec<bool> = (0..slots).map(|_| self.rng.chance(0.5)).collect();
        if trace {
            eprintln!("{now:>10} partition cut: {sides:?}");
        }
        net.cut_partition(|a| sides[a]);
        true
    }
}

/// Some seeds (40 %) clog one path between two running processes now and then, one way:
/// everything sent on it is held for 1 ms up to 0.6 s (longer than the failure detectors'
/// silence), then arrives in a burst.
pub struct Clogs {
    next_at: u64,
    rng: Rng,
}

impl Clogs {
    pub fn for_seed(seed: u64, enabled: bool) -> Option<Clogs> {
        let mut rng = Rng::new(seed ^ 0xc10c_c10c);
        (enabled && rng.chance(0.4)).then(|| Clogs {
            next_at: rng.below(300_000_000),
            rng,
        })
    }

    /// Clogs a path between two of `running` (slots; `name` gives their addresses for the
    /// trace) when the schedule says so; true if it did.
    pub fn step(
        &mut self,
        now: u64,
        net: &mut Network,
        running: &[usize],
        name: impl Fn(usize) -> Address,
        trace: bool,
    ) -> bool {
        if now < self.next_at || running.len() < 2 {
            return false;
        }
        self.next_at = now + 20_000_000 + self.rng.below(300_000_000);
        let a = running[self.rng.below(running.len() as u64) as usize];
        let b = running[self.rng.below(running.len() as u64) as usize];
        if a == b {
            return false;
        }
        let until = now + 1_000_000 + self.rng.below(600_000_000);
        if trace {
            eprintln!(
                "{now:>10} clog {} -> {} for {} ms",
                name(a),
                name(b),
                (until - now) / 1_000_000
            );
        }
        net.clog(a, b, Instant(until));
        true
    }
}

/// A seed's partitions and clogs, and how many of each happened. The group simulators turn
/// them off (`on`) when a run's safety phase ends.
pub struct Faults {
    pub on: bool,
    partitions: Option<Partitions>,
    clogs: Option<Clogs>,
    /// Partitions cut so far.
    pub cuts: u32,
    /// Paths clogged so far.
    pub clogged: u32,
}

impl Faults {
    /// The schedules of `seed`, each if enabled (and the seed has one).
    pub fn for_seed(seed: u64, partitions: bool, clogs: bool, safety_ns: u64) -> Faults {
        Faults {
            on: true,
            partitions: Partitions::for_seed(seed, partitions, safety_ns),
            clogs: Clogs::for_seed(seed, clogs),
            cuts: 0,
            clogged: 0,
        }
    }

    /// No schedules (simulators whose faults are all in the network's mix).
    pub fn none() -> Faults {
        Faults::for_seed(0, false, false, 0)
    }

    /// Whether there is a schedule to step.
    pub fn has_schedule(&self) -> bool {
        self.on && (self.partitions.is_some() || self.clogs.is_some())
    }

    /// Cuts or heals the network of `slots` nodes, then clogs a path between two of `running`,
    /// when the schedules say so (see `Partitions::step` and `Clogs::step`).
    pub fn step(
        &mut self,
        now: u64,
        net: &mut Network,
        slots: usize,
        running: &[usize],
        name: impl Fn(usize) -> Address,
        trace: bool,
    ) {
        if !self.on {
            return;
        }
        if let Some(p) = self.partitions.as_mut() {
            if p.step(now, net, slots, trace) {
                self.cuts += 1;
            }
        }
        if let Some(c) = self.clogs.as_mut() {
            if c.step(now, net, running, name, trace) {
                self.clogged += 1;
            }
        }
    }
}
