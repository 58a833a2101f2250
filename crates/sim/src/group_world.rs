//! The [`World`] the group simulators (`group`, `vs`, `order`) run on: process slots of
//! members, the packets and timers that drive them, the crash and leave churn, and the new
//! processes that join in place of the ones gone. A simulator implements [`GroupSim`] (its
//! members, workload and checkers) and runs a seed with [`run`].
//!
//! At each instant: packets to their members (each member drained after its packet), then
//! reports of unreachable ports that are due, then due timers (drained), then the workload,
//! then, during the safety phase, the churn's crash or leave, each followed by a new process
//! joining.
//!
//! Reports of unreachable ports: a crashed process's host answers what the survivors send it
//! with "port unreachable", so each survivor hears of it, [`REPORT_CHANCE`] of the time (the
//! answer may be lost or rate-limited), within a heartbeat or so of the crash (possibly
//! before the dead member's last packets arrive). And during the safety phase, now and then,
//! a forged report names a live member ([`FORGED_PER_STEP`]): safety must hold regardless.

use crate::harness::{self, Plan, Run, Violation, World};
use crate::net::FaultConfig;
use crate::schedule::{
    fire, next_timer, receive, Churn, Down, GroupOptions, GroupSeed, Process, Standing, MAX_SLOTS,
};
use crate::{Node, NodeId};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// What every group simulator keeps alike: the process slots, the seed's generator, the
/// churn and the group options.
pub struct GroupBase<P> {
    /// The process slots: slot `i` holds the process of site `i`.
    pub procs: Vec<P>,
    /// The workload's and the churn's generator.
    pub rng: Rng,
    pub churn: Churn,
    /// The seed's fault mix and churn rates, for the report.
    pub faults: String,
    pub opts: GroupOptions,
}

/// An empty base with generator seed 0: what a simulator's `Default` (for filling its own
/// fields with `..Default::default()`) puts in place of the seed's.
impl<P> Default for GroupBase<P> {
    fn default() -> Self {
        GroupBase {
            procs: Vec::new(),
            rng: Rng::new(0),
            churn: Churn::default(),
            faults: String::new(),
            opts: GroupOptions::default(),
        }
    }
}

/// The latest a new process makes its first send, in ns after it starts.
const FIRST_SEND_MAX_NS: u64 = 20_000_000;

impl<P> GroupBase<P> {
    /// Once the configuration is drawn from `draw`: no processes yet, and the plan of
    /// simulator `sim` (see [`GroupSeed::start`]).
    pub fn start(
        draw: GroupSeed,
        sim: &'static str,
        opts: &GroupOptions,
        replay: String,
    ) -> (GroupBase<P>, Plan) {
        let start = draw.start(sim, opts, replay);
        let base = GroupBase {
            procs: Vec::new(),
            rng: start.rng,
            churn: start.churn,
            faults: start.faults,
            opts: opts.clone(),
        };
        (base, start.plan)
    }

    /// When a process started now makes its first send (drawn from the generator).
    pub fn first_send_at(&mut self, run: &Run) -> u64 {
        run.ns() + self.rng.below(FIRST_SEND_MAX_NS)
    }
}

impl<P: Process<Member: Node>> GroupBase<P> {
    /// Slot `i`'s member, which it runs.
    pub fn member_mut(&mut self, i: usize) -> &mut P::Member {
        self.procs[i].member_mut().expect("live")
    }

    /// `describe` of each member with a timer due now (for a stuck-time violation).
    pub fn due(&self, run: &Run, describe: impl Fn(&P, &P::Member) -> String) -> Vec<String> {
        self.procs
            .iter()
            .filter_map(|p| p.member().filter(|m| run.due(*m)).map(|m| describe(p, m)))
            .collect()
    }

    /// Puts what slot `i`'s member has to send on the network: whether it sent anything, or
    /// `None` if the slot runs no member.
    pub fn transmit(&mut self, run: &mut Run, i: usize) -> Option<bool> {
        let m = self.procs[i].member_mut()?;
        Some(run.transmit(i, m))
    }
}

/// A member type a group simulator runs: made from its configuration, creating the group or
/// joining it through a contact.
pub trait Joinable: Node + Standing + Sized {
    type Config: Clone;
    fn create(cfg: Self::Config, addr: Address, now: Instant) -> Result<Self, String>;
    fn join(cfg: Self::Config, addr: Address, contact: Address, now: Instant) -> Self;
}

/// The member type of group simulator `S`.
pub type MemberOf<S> = <<S as GroupSim>::Proc as Process>::Member;

/// The types and accessors of [`GroupSim`] for a simulator whose slots hold `$proc`, whose
/// report is a `$report`, and whose fields `base`, `cfg` and `opts` are its [`GroupBase`],
/// its members' configuration and its options (a `$opts`, with the [`GroupOptions`] in field
/// `group`).
macro_rules! group_fields {
    ($proc:ty, $report:ty, $opts:ty) => {
        type Proc = $proc;
        type Report = $report;
        type Options = $opts;
        fn group_options(opts: &$opts) -> &$crate::schedule::GroupOptions {
            &opts.group
        }
        fn set_up(
            &mut self,
            base: $crate::group_world::GroupBase<$proc>,
            opts: &$opts,
            cfg: <$crate::group_world::MemberOf<Self> as $crate::group_world::Joinable>::Config,
        ) {
            self.base = base;
            self.opts = opts.clone();
            self.cfg = cfg;
        }
        fn base(&self) -> &$crate::group_world::GroupBase<Self::Proc> {
            &self.base
        }
        fn base_mut(&mut self) -> &mut $crate::group_world::GroupBase<Self::Proc> {
            &mut self.base
        }
        fn config(
            &self,
        ) -> &<$crate::group_world::MemberOf<Self> as $crate::group_world::Joinable>::Config {
            &self.cfg
        }
    };
}
pub(crate) use group_fields;

/// A group simulator: its members, workload and checkers, over slots of processes.
pub trait GroupSim: Sized + Default {
    type Proc: Process<Member: Joinable>;
    type Report;
    type Options;

    /// The group part of the simulator's options.
    fn group_options(opts: &Self::Options) -> &GroupOptions;
    /// The simulator (a default one) gets its base, options and configuration.
    fn set_up(
        &mut self,
        base: GroupBase<Self::Proc>,
        opts: &Self::Options,
        cfg: <MemberOf<Self> as Joinable>::Config,
    );

    /// The slots, generator, churn and options the world shares with the simulator
    /// ([`group_fields`] writes these three, the two above and the types).
    fn base(&self) -> &GroupBase<Self::Proc>;
    fn base_mut(&mut self) -> &mut GroupBase<Self::Proc>;
    /// The members' configuration.
    fn config(&self) -> &<MemberOf<Self> as Joinable>::Config;
    /// A new process at `addr`, with no member yet.
    fn new_proc(&mut self, run: &Run, addr: Address) -> Self::Proc;
    /// A broken rule, with what the simulator says of the run.
    fn fail(&self, run: &Run, what: String) -> Violation {
        run.fail(what)
    }
    /// The first member, which creates the group.
    fn create(&self, run: &Run, addr: Address) -> Result<MemberOf<Self>, Violation> {
        Joinable::create(self.config().clone(), addr, run.now).map_err(|e| self.fail(run, e))
    }
    /// A member at `addr` that joins through `contact`.
    fn join(&self, run: &Run, addr: Address, contact: Address) -> MemberOf<Self> {
        Joinable::join(self.config().clone(), addr, contact, run.now)
    }
    /// Whether a member is (or is becoming) one of the group, not done with it.
    fn in_group(m: &MemberOf<Self>) -> bool;
    /// Whether live slot `i` may be a joiner's contact when no member is in a settled view.
    fn fallback_contact(&self, i: usize) -> bool;
    /// Sends what slot `i`'s member has to send and takes its output through the checkers.
    fn drain(&mut self, run: &mut Run, i: usize) -> Result<(), Violation>;
    /// The instant's workload (the churn follows it).
    fn workload(&mut self, run: &mut Run) -> Result<(), Violation>;
    /// Slot `i` crashed (its member is dropped already): the simulator's records of it.
    fn crashed(&mut self, _i: usize) {}
    /// The earliest instant a step is needed for, besides packets.
    fn next_wakeup(&self) -> Option<Instant> {
        next_timer(&self.base().procs)
    }
    /// Packet `bytes` for slot `to`, before its member takes it (for the trace).
    fn trace_packet(&self, _run: &Run, _to: NodeId, _bytes: &[u8]) {}
    /// The liveness phase starts: healed links carry every packet after the minimum delay of
    /// a network without faults.
    fn heal(&mut self, run: &mut Run) {
        run.net.faults = FaultConfig::none();
    }
    /// Converged after healing.
    fn done(&self, run: &Run) -> bool;
    /// What is still open, for a stuck-time violation.
    fn stalled(&self, run: &Run) -> String;
    /// The end-of-run checks and the report.
    fn finish(self, run: &mut Run) -> Result<Self::Report, Violation>;

    /// Slots whose members are (or are becoming) ones of the group.
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        self.base()
            .procs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.member().filter(|m| Self::in_group(m)).map(|_| i))
    }

    /// The slot of a new process, if there is one free.
    fn add_proc(&mut self, run: &Run) -> Option<usize> {
        let i = self.base().procs.len();
        if i >= MAX_SLOTS {
            return None;
        }
        let p = self.new_proc(run, Address::new(1, i as u16, 1, 0));
        self.base_mut().procs.push(p);
        Some(i)
    }

    /// A new process joins through a live member. A restarted server would be told of a
    /// member (by configuration or the oracle), not of another process still joining: the
    /// contacts are members in a settled view or, when there is none right now, the live
    /// ones the simulator accepts ([`GroupSim::fallback_contact`]).
    fn spawn_joiner(&mut self, run: &mut Run) {
        let addr = |s: &Self, i: usize| s.base().procs[i].addr();
        let mut contacts: Vec<Address> = self
            .live()
            .filter(|&i| self.base().procs[i].member().is_some_and(|m| m.settled()))
            .map(|i| addr(self, i))
            .collect();
        if contacts.is_empty() {
            contacts = self
                .live()
                .filter(|&i| self.fallback_contact(i))
                .map(|i| addr(self, i))
                .collect();
        }
        if contacts.is_empty() {
            return;
        }
        let Some(i) = self.add_proc(run) else {
            return;
        };
        let contact = contacts[self.base_mut().rng.below(contacts.len() as u64) as usize];
        let me = addr(self, i);
        if run.trace > 0 {
            eprintln!("{:>10} SPAWN {me} via {contact}", run.ns());
        }
        let m = self.join(run, me, contact);
        let b = self.base_mut();
        b.procs[i].set_member(Some(m));
        b.churn.joins += 1;
    }
}

/// Runs simulator `name` with options `opts` and members' configuration `cfg` on the seed
/// drawn in `draw` to its end: the report, or the first rule broken. `replay` is what the
/// replay hint adds (see [`GroupBase::start`]).
pub fn run<S: GroupSim>(
    draw: GroupSeed,
    name: &'static str,
    replay: String,
    opts: &S::Options,
    cfg: <MemberOf<S> as Joinable>::Config,
) -> Result<S::Report, Violation> {
    let (base, plan) = GroupBase::start(draw, name, S::group_options(opts), replay);
    let mut sim = S::default();
    sim.set_up(base, opts, cfg);
    harness::run(
        Group {
            sim,
            reports: Vec::new(),
        },
        plan,
    )
}

/// A survivor hears that a crashed member's port is unreachable this often.
pub const REPORT_CHANCE: f64 = 0.8;
/// A forged report of a live member's port is made in a step this often (safety phase).
pub const FORGED_PER_STEP: f64 = 0.002;
/// The latest a report comes after the crash, in ns (a survivor's next packet to the dead
/// member and the host's answer).
const REPORT_DELAY_MAX_NS: u64 = 30_000_000;

/// A [`GroupSim`] as the harness runs it, and the reports of unreachable ports on their way:
/// (when, to slot, the member named).
struct Group<S> {
    sim: S,
    reports: Vec<(Instant, usize, Address)>,
}

impl<S: GroupSim> Group<S> {
    /// During the safety phase, this step's crash or leave, and a new process in its place.
    fn churn(&mut self, run: &mut Run) -> Result<(), Violation> {
        let s = &mut self.sim;
        if run.healed {
            return Ok(());
        }
        let running: Vec<usize> = s.live().collect();
        let GroupBase {
            procs, rng, churn, ..
        } = s.base_mut();
        match churn.step(procs, running.clone(), rng, run) {
            Some(Down::Crash(victim)) => {
                procs[victim].set_member(None);
                let gone = procs[victim].addr();
                for i in running.iter().copied().filter(|&i| i != victim) {
                    if rng.chance(REPORT_CHANCE) {
                        let at = Instant(run.now.0 + 1 + rng.below(REPORT_DELAY_MAX_NS));
                        self.reports.push((at, i, gone));
                    }
                }
                s.crashed(victim);
                s.spawn_joiner(run);
            }
            Some(Down::Leave(who)) => {
                s.drain(run, who)?;
                s.spawn_joiner(run);
            }
            None => {}
        }
        Ok(())
    }
}

impl<S: GroupSim> Group<S> {
    /// Hands the reports that are due to their members (one that crashed meanwhile has
    /// none), and during the safety phase now and then forges one about a live member.
    fn reports_due(&mut self, run: &mut Run) -> Result<(), Violation> {
        if !run.healed {
            let live: Vec<usize> = self.sim.live().collect();
            let GroupBase { procs, rng, .. } = self.sim.base_mut();
            if live.len() >= 2 && rng.chance(FORGED_PER_STEP) {
                let to = live[rng.below(live.len() as u64) as usize];
                let named = live[rng.below(live.len() as u64) as usize];
                if to != named {
                    self.reports.push((run.now, to, procs[named].addr()));
                }
            }
        }
        let mut k = 0;
        while k < self.reports.len() {
            let (at, to, who) = self.reports[k];
            if at > run.now {
                k += 1;
                continue;
            }
            self.reports.swap_remove(k);
            if let Some(m) = self.sim.base_mut().procs[to].member_mut() {
                m.unreachable(run.now, who);
                self.sim.drain(run, to)?;
            }
        }
        Ok(())
    }
}

impl<S: GroupSim> World for Group<S> {
    type Report = S::Report;

    fn start(&mut self, run: &mut Run) -> Result<(), Violation> {
        let s = &mut self.sim;
        let first = s.add_proc(run).expect("slot");
        let m = s.create(run, s.base().procs[first].addr())?;
        s.base_mut().procs[first].set_member(Some(m));
        s.drain(run, first)?;
        for _ in 1..s.base().opts.members {
            s.spawn_joiner(run);
        }
        Ok(())
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.sim.trace_packet(run, to, &bytes);
        receive(&mut self.sim.base_mut().procs, run, to, &bytes);
        self.sim.drain(run, to)
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        self.reports_due(run)?;
        for i in 0..self.sim.base().procs.len() {
            if fire(&mut self.sim.base_mut().procs[i], run) {
                self.sim.drain(run, i)?;
            }
        }
        self.sim.workload(run)?;
        self.churn(run)
    }

    fn next_wakeup(&self, _run: &Run) -> Option<Instant> {
        let report = self.reports.iter().map(|r| r.0).min();
        crate::harness::min_opt(self.sim.next_wakeup(), report)
    }

    fn heal(&mut self, run: &mut Run) {
        self.sim.heal(run);
    }

    fn done(&self, run: &Run) -> bool {
        self.sim.done(run)
    }

    fn stalled(&self, run: &Run) -> String {
        self.sim.stalled(run)
    }

    fn running(&self) -> Vec<NodeId> {
        self.sim.live().collect()
    }

    fn address(&self, node: NodeId) -> Address {
        self.sim.base().procs[node].addr()
    }

    fn finish(self, run: &mut Run) -> Result<S::Report, Violation> {
        self.sim.finish(run)
    }
}
