//! The one runner every simulator is written on (DESIGN §5).
//!
//! A simulator is a [`World`]: its nodes, workload and checkers. The runner owns what every
//! simulator shares: virtual time and the step loop, the seeded [`Network`], the seed's fault
//! schedule (partitions and clogs, crashes and restarts), the safety phase and the healing
//! that starts the liveness phase, the trace digest, and the [`Violation`] a broken rule
//! becomes (seed, virtual time, the rule, and the command that replays it). [`sweep`] runs a
//! range of seeds on threads.
//!
//! Two clocks, as the simulators had before the runner (each seed replays the run it always
//! did):
//! - [`Clock::Event`]: process the current instant, then jump to the next event (a packet, a
//!   timer, or what the world asks to be woken for); the run ends when the world says it is
//!   done, and not being done by the deadline is a liveness violation.
//! - [`Clock::Tick`]: jump first (to the next event, at most one tick on), then process; the
//!   run ends at the deadline or when the world has converged after healing, and the world's
//!   `finish` judges liveness. Time that stops advancing (a timer that stays due) is a
//!   violation.

use crate::faults::Faults;
use crate::net::{FaultConfig, Network};
use crate::{Digest, Node, NodeId};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// A broken rule, with what replays it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{sim} simulation seed {seed}, at {} ms: {what}\n  replay: cargo run --release -- sim {sim} --seed {seed}{replay} --trace", .at_ns / 1_000_000)]
pub struct Violation {
    /// The simulator (`txcast sim <sim>`).
    pub sim: &'static str,
    pub seed: u64,
    /// Virtual time of the violation, in ns.
    pub at_ns: u64,
    /// The rule broken, and how.
    pub what: String,
    /// Options beyond `--seed` that replay the run (the seed's drawn fixed choices).
    pub replay: String,
}

impl Violation {
    /// A violation found before the run starts (a configuration drawn from the seed).
    pub fn at_start(sim: &'static str, seed: u64, what: impl Into<String>) -> Violation {
        Violation {
            sim,
            seed,
            at_ns: 0,
            what: what.into(),
            replay: String::new(),
        }
    }
}

/// How virtual time moves (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    Event,
    /// Jumps of at most this many ns.
    Tick(u64),
}

/// A simulation: nodes, workload and checkers. The runner calls, at each instant: `restart`
/// for restarts due, `deliver` for each packet due, then `step` (timers, workload, outputs,
/// checkers).
pub trait World {
    type Report;
    /// At time 0, before the first step.
    fn start(&mut self, _run: &mut Run) -> Result<(), Violation> {
        Ok(())
    }
    /// Node `node` crashed and comes back with no memory (the runner adds it to the digest).
    fn restart(&mut self, _run: &mut Run, _node: NodeId) {}
    /// A packet arrived at `to`.
    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation>;
    /// The rest of an instant: timers, workload, outputs, checkers.
    fn step(&mut self, run: &mut Run) -> Result<(), Violation>;
    /// The earliest instant the world needs a step for (besides packets).
    fn next_wakeup(&self, run: &Run) -> Option<Instant>;
    /// The liveness phase starts: the world's part (the runner heals the network after it).
    fn heal(&mut self, _run: &mut Run) {}
    /// Done: converged after healing ([`Clock::Tick`]), or finished ([`Clock::Event`]).
    fn done(&self, run: &Run) -> bool;
    /// What is still open, for a liveness or stuck-time violation.
    fn stalled(&self, run: &Run) -> String;
    /// Nodes running now, candidates for a clogged path.
    fn running(&self) -> Vec<NodeId> {
        Vec::new()
    }
    /// A node's address, for the trace.
    fn address(&self, node: NodeId) -> Address {
        crate::node_address(node)
    }
    /// The end-of-run checks and the report.
    fn finish(self, run: &mut Run) -> Result<Self::Report, Violation>;
}

/// One run's setting: what the world drew from its seed for the runner.
pub struct Plan {
    pub sim: &'static str,
    pub seed: u64,
    pub clock: Clock,
    pub net: Network,
    /// Partitions and clogs on their own schedules (group simulators).
    pub faults: Faults,
    /// Crashes and restarts: (time in ns, node), sorted.
    pub restarts: Vec<(u64, NodeId)>,
    pub safety_ns: u64,
    /// [`Clock::Event`]: past this, not done is a liveness violation. [`Clock::Tick`]: the run
    /// stops here.
    pub end_ns: u64,
    /// Steps one run may take, at most.
    pub steps_max: Option<u64>,
    /// Scratch buffer for outgoing packets, in bytes.
    pub buf_bytes: usize,
    /// Options beyond `--seed` that replay the run.
    pub replay: String,
}

impl Plan {
    /// A [`Clock::Event`] run on `net` with these restarts, no fault schedules, no step bound,
    /// no packet buffer and no replay options (set them on the result where needed).
    pub fn event(
        sim: &'static str,
        seed: u64,
        net: Network,
        restarts: Vec<(u64, NodeId)>,
        safety_ns: u64,
        end_ns: u64,
    ) -> Plan {
        Plan {
            sim,
            seed,
            clock: Clock::Event,
            net,
            faults: Faults::none(),
            restarts,
            safety_ns,
            end_ns,
            steps_max: None,
            buf_bytes: 0,
            replay: String::new(),
        }
    }
}

/// The state the runner shares with the world at each step.
pub struct Run {
    pub sim: &'static str,
    pub seed: u64,
    pub now: Instant,
    pub net: Network,
    pub faults: Faults,
    /// Digest of the run's events, as each world adds them.
    pub digest: Digest,
    /// 0: quiet; 1: events; 2: also every message (`TXCAST_SIM_TRACE` or `--trace`).
    pub trace: u8,
    /// The liveness phase has begun.
    pub healed: bool,
    pub safety_ns: u64,
    pub replay: String,
    restarts: Vec<(u64, NodeId)>,
    buf: Vec<u8>,
    to: Vec<NodeId>,
}

impl Run {
    /// A violation of `what`, now.
    pub fn fail(&self, what: impl Into<String>) -> Violation {
        Violation {
            sim: self.sim,
            seed: self.seed,
            at_ns: self.now.0,
            what: what.into(),
            replay: self.replay.clone(),
        }
    }

    /// Virtual time in ns.
    pub fn ns(&self) -> u64 {
        self.now.0
    }

    /// When the next crash and restart comes.
    pub fn next_restart(&self) -> Option<Instant> {
        self.restarts.first().map(|&(t, _)| Instant(t))
    }

    /// Whether `node`'s timer is due.
    pub fn due<N: Node + ?Sized>(&self, node: &N) -> bool {
        node.poll_timeout().is_some_and(|t| t <= self.now)
    }

    /// Puts on the network everything `node` (node `from`) has to send; true if it sent any.
    pub fn transmit<N: Node + ?Sized>(&mut self, from: NodeId, node: &mut N) -> bool {
        let mut any = false;
        let mut to = std::mem::take(&mut self.to);
        let nodes = self.net.nodes();
        loop {
            to.clear();
            let Some(len) = node.poll_transmit(self.now, &mut self.buf, &mut to) else {
                break;
            };
            any = true;
            for &j in to.iter().filter(|&&j| j < nodes) {
                self.net.send(self.now, from, j, &self.buf[..len]);
            }
        }
        self.to = to;
        any
    }

    /// The run's digest with the network's folded in (for worlds whose digest covers the
    /// wire as well as their own events).
    pub fn digest_with_net(&mut self) -> u64 {
        self.digest.add_u64(self.net.digest.0);
        self.digest.0
    }

    fn heal<W: World>(&mut self, world: &mut W) {
        world.heal(self);
        self.net.heal();
        self.faults.on = false;
        self.healed = true;
        if self.trace > 0 {
            eprintln!("{:>10} HEAL", self.now.0);
        }
    }

    /// Partitions and clogs due now, during the safety phase.
    fn step_faults<W: World>(&mut self, world: &W) {
        if self.healed {
            return;
        }
        if self.faults.has_schedule() {
            let running = world.running();
            let slots = self.net.nodes();
            self.faults.step(
                self.now.0,
                &mut self.net,
                slots,
                &running,
                |i| world.address(i),
                self.trace > 0,
            );
        }
        self.net.step_partitions();
        self.net.step_clogs(self.now);
    }

    /// Restarts due now, then packets due now, then the world's step.
    fn process<W: World>(&mut self, world: &mut W) -> Result<(), Violation> {
        while self.restarts.first().is_some_and(|&(t, _)| t <= self.now.0) {
            let (_, k) = self.restarts.remove(0);
            self.digest.add_u64(self.now.0 ^ k as u64);
            world.restart(self, k);
        }
        while let Some((to, bytes)) = self.net.pop_due(self.now) {
            world.deliver(self, to, bytes)?;
        }
        world.step(self)
    }
}

/// Where `TXCAST_SIM_TRACE` is not set, the trace level `--trace` asked for.
static TRACE: AtomicU8 = AtomicU8::new(0);

/// Sets the trace level of runs that follow (`--trace`).
pub fn set_trace(level: u8) {
    TRACE.store(level, Ordering::Relaxed);
}

/// The trace level: `TXCAST_SIM_TRACE` (`1` events, `2` also messages), else `--trace`.
pub fn trace_level() -> u8 {
    match std::env::var("TXCAST_SIM_TRACE").as_deref() {
        Ok("0") => 0,
        Ok("2") => 2,
        Ok(_) => 1,
        Err(_) => TRACE.load(Ordering::Relaxed),
    }
}

/// Runs `world` on `plan` to its end: the report, or the first rule broken.
pub fn run<W: World>(mut world: W, plan: Plan) -> Result<W::Report, Violation> {
    let mut run = Run {
        sim: plan.sim,
        seed: plan.seed,
        now: Instant::ZERO,
        net: plan.net,
        faults: plan.faults,
        digest: Digest::default(),
        trace: trace_level(),
        healed: false,
        safety_ns: plan.safety_ns,
        replay: plan.replay,
        restarts: plan.restarts,
        buf: vec![0; plan.buf_bytes],
        to: Vec::new(),
    };
    world.start(&mut run)?;
    let mut steps = 0u64;
    match plan.clock {
        Clock::Event => loop {
            steps += 1;
            if plan.steps_max.is_some_and(|m| steps > m) {
                return Err(run.fail(format!("{steps} steps without an end")));
            }
            if !run.healed && run.now.0 >= plan.safety_ns {
                run.heal(&mut world);
            }
            run.step_faults(&world);
            run.process(&mut world)?;
            if world.done(&run) {
                break;
            }
            if run.now.0 > plan.end_ns {
                return Err(run.fail(format!("liveness: {}", world.stalled(&run))));
            }
            let mut next = min_opt(run.net.next_arrival(), world.next_wakeup(&run));
            if !run.healed {
                next = min_opt(next, Some(Instant(plan.safety_ns)));
            }
            run.now = match next {
                Some(t) if t > run.now => t,
                Some(_) => Instant(run.now.0 + 1),
                None => Instant(run.now.0 + 1_000_000),
            };
        },
        Clock::Tick(tick) => {
            let mut stuck = 0u32;
            loop {
                let mut next = run.now.0 + tick;
                if let Some(t) = min_opt(run.net.next_arrival(), world.next_wakeup(&run)) {
                    next = next.min(t.0);
                }
                if next <= run.now.0 {
                    stuck += 1;
                    if stuck > 100_000 {
                        return Err(run.fail(format!(
                            "virtual time stopped: a timer stays due: {}",
                            world.stalled(&run)
                        )));
                    }
                } else {
                    stuck = 0;
                }
                run.now = Instant(next.max(run.now.0));
                run.step_faults(&world);
                run.process(&mut world)?;
                if !run.healed {
                    if run.now.0 >= plan.safety_ns {
                        run.heal(&mut world);
                    }
                } else if world.done(&run) {
                    break;
                }
                if run.healed && run.now.0 >= plan.end_ns {
                    break;
                }
            }
        }
    }
    world.finish(&mut run)
}

/// The length of a run's two phases and the faults its seed may draw: the options the
/// simulators that are not group simulators share (those have [`crate::schedule::GroupOptions`]).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Virtual time with faults on.
    pub safety_ns: u64,
    /// Virtual time allowed, after healing, for everything to settle.
    pub liveness_ns: u64,
    /// Draw the fault mix (and crashes) from the seed; otherwise run fault-free.
    pub faults: bool,
    /// With `faults`, let the seed cut the network in two now and then.
    pub partitions: bool,
    /// With `faults`, let the seed clog paths now and then.
    pub clogs: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            safety_ns: 2_000_000_000,
            liveness_ns: 60_000_000_000,
            faults: true,
            partitions: true,
            clogs: true,
        }
    }
}

impl RunOptions {
    /// The seed's network faults (see [`FaultConfig::for_seed`]).
    pub fn fault_config(&self, seed: u64, rng: &mut Rng) -> FaultConfig {
        FaultConfig::for_seed(seed, rng, self.faults, self.partitions, self.clogs)
    }

    /// The seed's crashes and restarts (see [`draw_restarts`]) during the safety phase.
    pub fn restarts(&self, rng: &mut Rng, p: f64, most: u64, nodes: usize) -> Vec<(u64, NodeId)> {
        draw_restarts(rng, self.faults, p, most, self.safety_ns, nodes)
    }

    /// A [`Clock::Event`] plan of these phases (see [`Plan::event`]).
    pub fn plan(
        &self,
        sim: &'static str,
        seed: u64,
        net: Network,
        restarts: Vec<(u64, NodeId)>,
    ) -> Plan {
        Plan::event(
            sim,
            seed,
            net,
            restarts,
            self.safety_ns,
            self.safety_ns + self.liveness_ns,
        )
    }
}

/// Crashes and restarts for a seed: with probability `p` (and `on`), 1 to `most` of them at
/// random times of the safety phase, each of a random node of `nodes`; sorted by time.
pub fn draw_restarts(
    rng: &mut Rng,
    on: bool,
    p: f64,
    most: u64,
    safety_ns: u64,
    nodes: usize,
) -> Vec<(u64, NodeId)> {
    let mut v = Vec::new();
    if on && rng.chance(p) {
        for _ in 0..1 + rng.below(most) {
            v.push((rng.below(safety_ns), rng.below(nodes as u64) as usize));
        }
        v.sort_unstable();
    }
    v
}

/// The earlier of two optional instants.
pub fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// What a [`sweep`] reports as it goes.
pub enum SweepNote<'a> {
    /// A seed failed: its violation (a panic counts as one), with the replay command.
    Failed(&'a str),
    /// One more seed is done: how many so far, and how many of them failed.
    Done { done: u64, failures: u64 },
}

/// Runs seeds `first..first + seeds` of simulator `sim` on `threads` threads (seeds
/// interleaved), telling `note` of each failure and each seed done (from any thread);
/// returns how many failed.
pub fn sweep(
    sim: &str,
    first: u64,
    seeds: u64,
    threads: u64,
    run: impl Fn(u64) -> Result<(), Violation> + Sync,
    note: impl Fn(SweepNote<'_>) + Sync,
) -> u64 {
    let threads = threads.clamp(1, 64);
    let done = AtomicU64::new(0);
    let failures = AtomicU64::new(0);
    let one = |seed: u64| {
        let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed))) {
            Ok(Ok(())) => None,
            Ok(Err(v)) => Some(v.to_string()),
            Err(_) => Some(format!(
                "{sim} simulation seed {seed}: panicked\n  replay: cargo run --release -- sim {sim} --seed {seed}"
            )),
        };
        let failed = if let Some(e) = err {
            note(SweepNote::Failed(&e));
            failures.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            failures.load(Ordering::Relaxed)
        };
        let k = done.fetch_add(1, Ordering::Relaxed) + 1;
        note(SweepNote::Done {
            done: k,
            failures: failed,
        });
    };
    std::thread::scope(|scope| {
        for t in 0..threads {
            let one = &one;
            scope.spawn(move || {
                let mut seed = first + t;
                while seed < first + seeds {
                    one(seed);
                    seed += threads;
                }
            });
        }
    });
    failures.into_inner()
}
