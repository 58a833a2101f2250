//! What the group simulators (`group`, `vs`, `order`) share besides their world
//! ([`crate::group_world`]): their options, their seed's generators and plan (the fault
//! schedules of [`crate::faults`]), the crash and leave churn, and receiving, firing and timers
//! over slots of members.

use crate::faults::Faults;
use crate::harness::{Clock, Plan, Run};
use crate::net::{FaultConfig, Network};
use crate::Node;
use std::time::Duration;
use txcast_proto::pack::PackMode;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// A packing mode drawn from `rng` (the `group` and `vs` simulators' three).
pub fn draw_pack(rng: &mut Rng) -> PackMode {
    match rng.below(3) {
        0 => PackMode::Off,
        1 => PackMode::Adaptive {
            delay_max: Duration::from_micros(700),
        },
        _ => PackMode::Fixed {
            delay: Duration::from_micros(500),
        },
    }
}

/// Process slots of a group simulator, at most (restarts are new processes).
pub const MAX_SLOTS: usize = 24;
/// A group simulator's clock tick ([`crate::Clock::Tick`]): the workload's time step.
pub const STEP_NS: u64 = 1_000_000;
/// A group simulator's packet buffer.
pub const BUF_BYTES: usize = 65536;

/// A group member as the crash and leave schedule sees it.
pub trait Standing {
    /// Still joining: not yet a candidate to crash or leave.
    fn joining(&self) -> bool;
    /// In a settled view: counts toward the majority a crash or a leave must leave behind.
    fn settled(&self) -> bool;
    /// The members of its view.
    fn view(&self) -> &[Address];
    /// Starts leaving the group; false if it cannot now.
    fn begin_leave(&mut self, now: Instant) -> bool;
    /// The host of member `who` reported its port unreachable.
    fn unreachable(&mut self, now: Instant, who: Address);
}

/// A process slot of a group simulator: its address, its member while it runs one, and
/// whether it is leaving. Slot `i` holds the addresses of site `i`.
pub trait Process {
    type Member: Standing;
    fn addr(&self) -> Address;
    fn member(&self) -> Option<&Self::Member>;
    fn member_mut(&mut self) -> Option<&mut Self::Member>;
    /// Starts running `m` (a process that joins), or drops its member (`None`: crashed).
    fn set_member(&mut self, m: Option<Self::Member>);
    fn leaving(&self) -> bool;
    fn set_leaving(&mut self);
}

/// Implements [`Standing`] for a member type `$member` (whose `state()` is a `$state`, with
/// `Joining` and `Normal`) and [`Process`] for a slot type `$proc` holding it in
/// `$field: Option<$member>`, with `addr` and `leaving` fields; and [`crate::Node`] (see
/// [`crate::member_node`]: its `poll_transmit` names a `$dest`) and
/// [`crate::group_world::Joinable`] (made from a `$config`) for the member type.
macro_rules! group_process {
    ($proc:ty, $member:ty, $field:ident, $state:ident, $dest:ident, $config:ty) => {
        $crate::member_node!($member, $dest);

        impl $crate::group_world::Joinable for $member {
            type Config = $config;
            fn create(cfg: $config, addr: Address, now: Instant) -> Result<Self, String> {
                <$member>::create(cfg, addr, now).map_err(|e| e.to_string())
            }
            fn join(cfg: $config, addr: Address, contact: Address, now: Instant) -> Self {
                <$member>::join(cfg, addr, contact, now).expect("valid config")
            }
        }

        impl $crate::schedule::Standing for $member {
            fn joining(&self) -> bool {
                self.state() == $state::Joining
            }
            fn settled(&self) -> bool {
                self.state() == $state::Normal
            }
            fn view(&self) -> &[Address] {
                self.members()
            }
            fn begin_leave(&mut self, now: Instant) -> bool {
                self.leave(now).is_ok()
            }
            fn unreachable(&mut self, now: Instant, who: Address) {
                #[allow(unused_imports)]
                use txcast_proto::member::GroupMember as _;
                self.peer_unreachable(now, who)
            }
        }

        impl $crate::schedule::Process for $proc {
            type Member = $member;
            fn addr(&self) -> Address {
                self.addr
            }
            fn member(&self) -> Option<&$member> {
                self.$field.as_ref()
            }
            fn member_mut(&mut self) -> Option<&mut $member> {
                self.$field.as_mut()
            }
            fn set_member(&mut self, m: Option<$member>) {
                self.$field = m;
            }
            fn leaving(&self) -> bool {
                self.leaving
            }
            fn set_leaving(&mut self) {
                self.leaving = true;
            }
        }
    };
}
pub(crate) use group_process;

/// The slot of `a` among `procs`, if a process there has that address.
pub fn slot_of<P: Process>(procs: &[P], a: Address) -> Option<usize> {
    let i = a.site as usize;
    (i < procs.len() && procs[i].addr() == a).then_some(i)
}

/// A crash or a leave drawn for this step.
pub enum Down {
    Crash(usize),
    Leave(usize),
}

/// Draws this step's crash (at rate `crash_p`) or leave (`leave_p`) among the `running`
/// slots whose members have joined. Neither may cost any member's view its majority: the group
/// would block for good, as crashed processes never come back in these simulators. So one is
/// drawn only while more than two members are up and every member's view (they differ while
/// joins and leaves are in flight) keeps a majority of members in good standing (settled, not
/// leaving), counting one more going down.
pub fn choose_down<P: Process>(
    procs: &[P],
    running: impl Iterator<Item = usize>,
    rng: &mut Rng,
    crash_p: f64,
    leave_p: f64,
) -> Option<Down> {
    let live: Vec<usize> = running
        .filter(|&i| procs[i].member().is_some_and(|m| !m.joining()))
        .collect();
    let steady = |a: Address| {
        slot_of(procs, a).is_some_and(|j| {
            let p = &procs[j];
            !p.leaving() && p.member().is_some_and(|m| m.settled())
        })
    };
    let budget = live.len() > 2
        && live.iter().all(|&i| {
            procs[i].member().is_none_or(|m| {
                let v = m.view();
                v.iter().filter(|&&a| steady(a)).count() > v.len() / 2 + 1
            })
        });
    let pick = |rng: &mut Rng| live[rng.below(live.len() as u64) as usize];
    if budget && rng.chance(crash_p) {
        Some(Down::Crash(pick(rng)))
    } else if budget && rng.chance(leave_p) {
        Some(Down::Leave(pick(rng)))
    } else {
        None
    }
}

/// Starts `p` leaving its group, unless it is already leaving or its member refuses; true if
/// it did. `clock` and `trace` are for the trace line.
pub fn begin_leave<P: Process>(p: &mut P, now: Instant, clock: u64, trace: bool) -> bool {
    if p.leaving() || !p.member_mut().is_some_and(|m| m.begin_leave(now)) {
        return false;
    }
    if trace {
        eprintln!("{clock:>10} LEAVE {}", p.addr());
    }
    p.set_leaving();
    true
}

/// A group simulator's churn: the seed's crash and leave rates, and what happened.
#[derive(Clone, Copy, Debug, Default)]
pub struct Churn {
    pub crash_p: f64,
    pub leave_p: f64,
    pub crashes: u32,
    /// Members left out of a view (to the group, they failed).
    pub expulsions: u32,
    pub leaves: u32,
    pub joins: u32,
}

impl Churn {
    /// The rates of a seed with faults: crashes on 60 % of seeds, leaves on 30 %.
    pub fn draw(rng: &mut Rng) -> Churn {
        let crash_p = if rng.chance(0.6) { 0.002 } else { 0.0 };
        let leave_p = if rng.chance(0.3) { 0.001 } else { 0.0 };
        Churn {
            crash_p,
            leave_p,
            ..Churn::default()
        }
    }

    /// This step's crash or leave among `running` (see [`choose_down`]), counted and traced; a
    /// leave has begun. The simulator does the rest (a crashed member is dropped, a leaver
    /// drained, and either is replaced by a new process).
    pub fn step<P: Process>(
        &mut self,
        procs: &mut [P],
        running: Vec<usize>,
        rng: &mut Rng,
        run: &mut Run,
    ) -> Option<Down> {
        match choose_down(procs, running.into_iter(), rng, self.crash_p, self.leave_p)? {
            Down::Crash(v) => {
                if run.trace > 0 {
                    eprintln!("{:>10} CRASH {}", run.ns(), procs[v].addr());
                }
                self.crashes += 1;
                run.digest.add_u64(0xdead ^ v as u64);
                Some(Down::Crash(v))
            }
            Down::Leave(w) if begin_leave(&mut procs[w], run.now, run.ns(), run.trace > 0) => {
                self.leaves += 1;
                Some(Down::Leave(w))
            }
            Down::Leave(_) => None,
        }
    }
}

/// The options every group simulator has.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// Members at the start.
    pub members: usize,
    /// Virtual time with faults (and crashes, leaves, joins) on.
    pub safety_ns: u64,
    /// Virtual time, after healing, for the group to converge.
    pub liveness_ns: u64,
    /// Draw the fault mix and the crash and leave rates (and the configuration, where the
    /// simulator draws it only then) from the seed; otherwise a perfect network.
    pub faults: bool,
    /// With `faults`, let the seed also cut the network in two now and then (drawn from a
    /// generator of its own, so turning this off replays a seed's other faults unchanged).
    pub partitions: bool,
    /// With `faults`, let the seed also clog paths between members now and then, one way:
    /// everything sent on the path is held, for 1 ms up to 0.6 s (longer than the failure
    /// detector's silence), then arrives in a burst. Drawn from a generator of its own.
    pub clogs: bool,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            members: 4,
            safety_ns: 3_000_000_000,
            liveness_ns: 12_000_000_000,
            faults: true,
            partitions: true,
            clogs: true,
        }
    }
}

/// A group simulator's seed: its generators, forked in a fixed order so a seed replays.
pub struct GroupSeed {
    pub seed: u64,
    /// The configuration's generator; the churn rates are drawn from it after the
    /// configuration.
    pub cfg_rng: Rng,
    rng: Rng,
    fault_rng: Rng,
}

/// What a group simulator's run starts with.
pub struct GroupStart {
    pub plan: Plan,
    /// The workload's and the churn's generator.
    pub rng: Rng,
    pub churn: Churn,
    /// The fault mix and the churn rates, for the report.
    pub faults: String,
}

impl GroupSeed {
    pub fn new(seed: u64) -> GroupSeed {
        let mut rng = Rng::new(seed);
        let cfg_rng = rng.fork();
        let fault_rng = rng.fork();
        GroupSeed {
            seed,
            cfg_rng,
            rng,
            fault_rng,
        }
    }

    /// Once the configuration is drawn: with `opts.faults` the seed's fault mix and churn
    /// rates (else none), and the plan of simulator `sim` (`replay`: its options beyond
    /// `--seed`): ticks of [`STEP_NS`], [`MAX_SLOTS`] slots, and partitions and clogs on
    /// their own schedules where the options allow them.
    pub fn start(mut self, sim: &'static str, opts: &GroupOptions, replay: String) -> GroupStart {
        let (faults, churn) = if opts.faults {
            let f = FaultConfig::for_group(&mut self.fault_rng);
            (f, Churn::draw(&mut self.cfg_rng))
        } else {
            (FaultConfig::none(), Churn::default())
        };
        let on = opts.faults;
        let plan = Plan {
            sim,
            seed: self.seed,
            clock: Clock::Tick(STEP_NS),
            net: Network::new(MAX_SLOTS, faults.clone(), self.rng.fork()),
            faults: Faults::for_seed(
                self.seed,
                on && opts.partitions,
                on && opts.clogs,
                opts.safety_ns,
            ),
            restarts: Vec::new(),
            safety_ns: opts.safety_ns,
            end_ns: opts.safety_ns + opts.liveness_ns,
            steps_max: None,
            buf_bytes: BUF_BYTES,
            replay,
        };
        GroupStart {
            plan,
            rng: self.rng,
            faults: format!(
                "{faults:?} crash_p={} leave_p={}",
                churn.crash_p, churn.leave_p
            ),
            churn,
        }
    }
}

/// A packet for slot `to`: into the trace digest, then to its member if it runs one.
pub fn receive<P: Process>(procs: &mut [P], run: &mut Run, to: usize, bytes: &[u8])
where
    P::Member: Node,
{
    run.digest.add_u64(to as u64);
    run.digest.add(bytes);
    if let Some(m) = procs.get_mut(to).and_then(|p| p.member_mut()) {
        m.handle_message(run.now, bytes);
    }
}

/// Fires `p`'s member's timers if they are due; true if it did.
pub fn fire<P: Process>(p: &mut P, run: &Run) -> bool
where
    P::Member: Node,
{
    let Some(m) = p.member_mut().filter(|m| run.due(&**m)) else {
        return false;
    };
    m.handle_timeout(run.now);
    true
}

/// The earliest timer of any member.
pub fn next_timer<P: Process>(procs: &[P]) -> Option<Instant>
where
    P::Member: Node,
{
    procs
        .iter()
        .filter_map(|p| p.member().and_then(|m| m.poll_timeout()))
        .min()
}
