//! Totally ordered groups (paper 002's `totem`, `total`, `dynseq` and `dynord` over the
//! virtually synchronous stack, [`txcast_proto::order`]) under simulated faults, with checkers:
//! - total order: any two processes deliver the messages they both delivered in the same
//!   relative order (over the whole run, crashed and expelled processes included);
//! - virtual synchrony: views form one chain (a view has one successor wherever it is
//!   installed, with the same members), and processes that install the same two consecutive
//!   views deliver the same messages, in the same order, between them; every message is
//!   delivered in a view that has its sender;
//! - integrity: nothing delivered twice or invented, payloads intact (each names its sender
//!   and number), FIFO per sender, with gaps only in the messages of a sender that failed;
//! - no loss: every message of a sender still in the group at the end is delivered by that
//!   sender (`SendDone`) and by every process still in the group that installed the view it
//!   was delivered in;
//! - liveness: once the faults heal, the live processes end in one view with everything
//!   delivered and idle, unless a majority of the newest view is gone (then they must block);
//! - bounds: `sends_pending() <= send_queue_max` and the stack's unstable casts `<= window`.
//!
//! Processes are slots: a crash is permanent, a restart is a new process (a new address) that
//! joins through a live member, as in [`crate::group_sim`]. Protocol, packing, stability and
//! the group's parameters are drawn from the seed unless fixed by [`OrderSimOptions`].

use crate::group_world::{self, GroupBase, GroupSim};
use crate::harness::{Run, Violation};
use crate::net::NetCounters;
use crate::schedule::{GroupOptions, GroupSeed};
use crate::Digest;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use txcast_proto::order::{Delivered, Member, OrderConfig, OrderEvent, Protocol};
use txcast_proto::pack::PackMode;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_proto::vsync::{Dest, Stability, ViewId, VsConfig, VsState};
use txcast_proto::Address;

/// Knobs of one ordered-group simulation.
#[derive(Clone, Debug)]
pub struct OrderSimOptions {
    pub group: GroupOptions,
    pub messages_per_member: u32,
    /// Fixed protocol, packing, stability (else drawn from the seed).
    pub protocol: Option<Protocol>,
    pub pack: Option<PackMode>,
    pub stability: Option<Stability>,
}

impl Default for OrderSimOptions {
    fn default() -> Self {
        OrderSimOptions {
            group: GroupOptions::default(),
            messages_per_member: 80,
            protocol: None,
            pack: None,
            stability: None,
        }
    }
}

/// The three packing modes, with the parameters the simulator uses.
pub fn pack_modes() -> [PackMode; 3] {
    [
        PackMode::Off,
        PackMode::Adaptive {
            delay_max: Duration::from_micros(500),
        },
        PackMode::Fixed {
            delay: Duration::from_millis(1),
        },
    ]
}

/// `--protocol`, `--pack` and `--stability` options naming `cfg`'s.
fn replay_args(cfg: &OrderConfig) -> String {
    let pack = match cfg.vs.pack {
        PackMode::Off => "off",
        PackMode::Adaptive { .. } => "adaptive",
        PackMode::Fixed { .. } => "fixed",
    };
    let stability = match cfg.vs.stability {
        Stability::Piggyback => "piggyback",
        Stability::Pinwheel => "pinwheel",
    };
    format!(
        "--protocol {} --pack {pack} --stability {stability}",
        cfg.protocol.name()
    )
}

/// Parses `off`, `adaptive` or `fixed`.
pub fn pack_from_name(s: &str) -> Option<PackMode> {
    let m = pack_modes();
    match s {
        "off" => Some(m[0]),
        "adaptive" => Some(m[1]),
        "fixed" => Some(m[2]),
        _ => None,
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct OrderSimReport {
    pub seed: u64,
    pub config: String,
    pub faults: String,
    pub net: NetCounters,
    pub sent: u64,
    pub completed: u64,
    pub delivered: u64,
    pub crashes: u32,
    pub expulsions: u32,
    pub leaves: u32,
    pub joins: u32,
    pub partitions: u32,
    pub clogs: u32,
    /// Highest view number installed.
    pub views: u64,
    pub final_members: usize,
    /// The group blocked because a majority of its newest view was gone.
    pub blocked: bool,
    /// Live processes left blocked in a view whose majority is gone (see `orphan`).
    pub orphans: usize,
    pub digest: u64,
}

/// One entry of a process's ordered stream.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    View(ViewId),
    Msg(Address, u64),
}

/// How a process ended (if it did).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Fate {
    #[default]
    Running,
    Crashed,
    Expelled,
    Left,
    JoinFailed,
}

#[derive(Default)]
struct Proc {
    addr: Address,
    m: Option<Member>,
    fate: Fate,
    /// Messages sent (the next payload's number is `sent + 1`, which is also its msg_id).
    sent: u64,
    next_send_at: u64,
    leaving: bool,
    log: Vec<Entry>,
    seen: HashSet<(Address, u64)>,
    last_id: HashMap<Address, u64>,
    /// FIFO gaps seen: (sender, last delivered, delivered next).
    gaps: Vec<(Address, u64, u64)>,
    done: Vec<u64>,
    view: Option<ViewId>,
    view_members: Vec<Address>,
    /// `OrderEvent::Blocked` came since the last view.
    blocked_reported: bool,
}

impl Proc {
    /// What this process delivered that the total order covers: everything, except for a
    /// process that failed (crashed, expelled) what it delivered in its last view. Virtual
    /// synchrony binds the processes that install the next view; a failed one may have
    /// delivered by its own chain (a `dynord` order or a token holder's run that never left
    /// it) what the survivors deliver by the rank rule in another order (seed 254: an orderer
    /// delivered by its own order, then crashed). The order is not uniform.
    fn ordered_log(&self) -> &[Entry] {
        // A leaver too: one the flush went on without (it did not answer in time) is as a
        // failed process (seed 101 with --protocol dynord --pack fixed --stability pinwheel).
        if matches!(self.fate, Fate::Crashed | Fate::Expelled | Fate::Left) {
            let last = self
                .log
                .iter()
                .rposition(|e| matches!(e, Entry::View(_)))
                .unwrap_or(0);
            &self.log[..last]
        } else {
            &self.log
        }
    }
}

crate::schedule::group_process!(Proc, Member, m, VsState, Dest, OrderConfig);

/// Message `k` of `addr`: names its sender and number, then a filler of a length that varies
/// from none to the longest allowed.
fn payload_for(addr: Address, k: u64, max: usize) -> Vec<u8> {
    let mut v = format!("{addr}#{k}#").into_bytes();
    let len = match k % 11 {
        0 => max,
        1 | 2 => v.len(),
        _ => v.len() + ((k * 97 + addr.site as u64 * 31) as usize % (max / 4 + 1)),
    }
    .min(max);
    let base = (k as u8).wrapping_mul(7);
    while v.len() < len {
        v.push(base.wrapping_add(v.len() as u8));
    }
    v
}

#[derive(Default)]
struct Sim {
    opts: OrderSimOptions,
    cfg: OrderConfig,
    base: GroupBase<Proc>,
    /// (sender, msg_id) -> payload hash, for everything `send` took.
    sent: HashMap<(Address, u64), u64>,
    /// Every view installed anywhere, with its members.
    views: HashMap<ViewId, Vec<Address>>,
}

/// The group's configuration for a seed: protocol, packing and stability from the options or
/// the seed, and small windows and queues so back-pressure and view changes under load happen.
fn config_for(rng: &mut Rng, opts: &OrderSimOptions) -> OrderConfig {
    // Drawn even when fixed, so fixing one replays a seed's other parameters unchanged.
    let protocol = Protocol::ALL[rng.below(4) as usize];
    let pack = pack_modes()[rng.below(3) as usize];
    let stability = if rng.chance(0.5) {
        Stability::Piggyback
    } else {
        Stability::Pinwheel
    };
    let protocol = opts.protocol.unwrap_or(protocol);
    let pack = opts.pack.unwrap_or(pack);
    let stability = opts.stability.unwrap_or(stability);
    let cast_bytes_max = [256, 1024, 4000][rng.below(3) as usize];
    OrderConfig {
        protocol,
        vs: VsConfig {
            group: 9,
            window: [4, 8, 16, 64][rng.below(4) as usize],
            cast_bytes_max,
            packet_bytes_max: 8192,
            pack,
            stability,
            retransmit_timeout: Duration::from_millis(10),
            heartbeat_interval: Duration::from_millis(20),
            silence_timeout: Duration::from_millis(300),
            unreachable_silence: Duration::from_millis(60),
            flush_timeout: Duration::from_millis(100),
            join_attempts_max: 60,
        },
        send_queue_max: [4, 16, 64][rng.below(3) as usize],
        visit_max: [1, 4, 64][rng.below(3) as usize],
        token_idle_hold: Duration::from_millis(1 + rng.below(4)),
        submit_window: [2, 8, 64][rng.below(3) as usize],
        migrate_every: [0, 8, 32][rng.below(3) as usize],
    }
}

/// Runs one seed; `Err` names the first guarantee broken.
pub fn run_order(seed: u64, opts: &OrderSimOptions) -> Result<OrderSimReport, Violation> {
    let mut draw = GroupSeed::new(seed);
    let cfg = config_for(&mut draw.cfg_rng, opts);
    if let Err(e) = cfg.validate() {
        let mut v = Violation::at_start("order", seed, format!("configuration: {e}"));
        v.replay = replay_args(&cfg);
        return Err(v);
    }
    // Fixing the protocol, packing and stability the seed drew replays it unchanged.
    let replay = format!(" {}", replay_args(&cfg));
    group_world::run::<Sim>(draw, "order", replay, opts, cfg)
}

impl GroupSim for Sim {
    group_world::group_fields!(Proc, OrderSimReport, OrderSimOptions);

    fn new_proc(&mut self, run: &Run, addr: Address) -> Proc {
        Proc {
            addr,
            next_send_at: self.base.first_send_at(run),
            ..Proc::default()
        }
    }

    fn fail(&self, run: &Run, what: String) -> Violation {
        run.fail(format!("{what}\n  {}", self.describe(run)))
    }

    /// Every process that runs a member (one that is done drops it).
    fn in_group(_m: &Member) -> bool {
        true
    }

    /// One in a view.
    fn fallback_contact(&self, i: usize) -> bool {
        self.base.procs[i].view.is_some()
    }

    /// Takes the member's deliveries and events through the checkers, and checks its bounds.
    fn drain(&mut self, run: &mut Run, i: usize) -> Result<(), Violation> {
        if self.base.transmit(run, i).is_none() {
            return Ok(());
        }
        enum D {
            Msg(Address, u64, Vec<u8>),
            View(ViewId, Vec<Address>),
        }
        while let Some(d) = self.base.member_mut(i).poll_delivery(|d| match d {
            Delivered::Message(d) => D::Msg(d.sender, d.msg_id, d.payload.to_vec()),
            Delivered::View(v) => D::View(v.id, v.members),
        }) {
            match d {
                D::Msg(s, id, p) => self.check_message(run, i, s, id, &p)?,
                D::View(v, members) => {
                    self.base.procs[i].blocked_reported = false;
                    self.check_view(run, i, v, members)?
                }
            }
        }
        while let Some(ev) = self.base.member_mut(i).poll_event() {
            let addr = self.base.procs[i].addr;
            if run.trace > 0 {
                eprintln!("{:>10} {addr} event {ev:?}", run.ns());
            }
            let fate = match ev {
                OrderEvent::SendDone { msg_id } => {
                    let p = &mut self.base.procs[i];
                    if !p.seen.contains(&(addr, msg_id))
                        || p.done.last().is_some_and(|&d| d >= msg_id)
                    {
                        let what = format!(
                            "{addr}: SendDone {msg_id} out of place (done {:?})",
                            p.done.last()
                        );
                        return Err(self.fail(run, what));
                    }
                    p.done.push(msg_id);
                    continue;
                }
                OrderEvent::Blocked { reachable, needed } => {
                    let m = self.base.procs[i].m.as_ref().expect("live");
                    if m.state() != VsState::Flushing || reachable > m.members().len() {
                        let what = format!(
                            "{addr}: Blocked ({reachable} of {needed}) outside a view change"
                        );
                        return Err(self.fail(run, what));
                    }
                    self.base.procs[i].blocked_reported = true;
                    continue;
                }
                OrderEvent::JoinFailed => Fate::JoinFailed,
                OrderEvent::Left => {
                    self.leaves_done(run, i);
                    Fate::Left
                }
                OrderEvent::Expelled => {
                    self.base.churn.expulsions += 1;
                    Fate::Expelled
                }
            };
            // The process is done; a new one takes its place.
            self.base.procs[i].m = None;
            self.base.procs[i].fate = fate;
            self.spawn_joiner(run);
            return Ok(());
        }
        let m = self.base.procs[i].m.as_ref().expect("live");
        if m.sends_pending() > self.cfg.send_queue_max {
            let what = format!(
                "{}: {} sends pending > send_queue_max {}",
                self.base.procs[i].addr,
                m.sends_pending(),
                self.cfg.send_queue_max
            );
            return Err(self.fail(run, what));
        }
        if m.vs().unstable() > self.cfg.vs.window {
            let what = format!(
                "{}: {} casts unstable > window {}",
                self.base.procs[i].addr,
                m.vs().unstable(),
                self.cfg.vs.window
            );
            return Err(self.fail(run, what));
        }
        Ok(())
    }

    fn workload(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        let max = self.cfg.message_bytes_max();
        for i in 0..self.base.procs.len() {
            let burst = 1 + self.base.rng.below(6);
            let p = &mut self.base.procs[i];
            let Some(m) = p.m.as_mut() else {
                continue;
            };
            if p.leaving
                || p.sent >= self.opts.messages_per_member as u64
                || run.ns() < p.next_send_at
                || !matches!(m.state(), VsState::Normal | VsState::Flushing)
            {
                continue;
            }
            for _ in 0..burst {
                if p.sent >= self.opts.messages_per_member as u64 {
                    break;
                }
                let payload = payload_for(p.addr, p.sent + 1, max);
                match m.send(now, &payload) {
                    Ok(id) => {
                        p.sent += 1;
                        if id != p.sent {
                            let what =
                                format!("{} send returned msg_id {id}, not {}", p.addr, p.sent);
                            return Err(self.fail(run, what));
                        }
                        self.sent.insert((p.addr, id), Digest::of(&payload));
                    }
                    // Full: back-pressure, try again later.
                    Err(_) => break,
                }
            }
            p.next_send_at = run.ns() + self.base.rng.below(8_000_000);
            self.drain(run, i)?;
        }
        Ok(())
    }

    fn crashed(&mut self, i: usize) {
        self.base.procs[i].fate = Fate::Crashed;
    }

    fn done(&self, run: &Run) -> bool {
        self.converged(run)
    }

    fn stalled(&self, run: &Run) -> String {
        let due = self.base.due(run, |p, m| {
            format!(
                "{} (vs due {:?}): {m:?}\n    {}",
                p.addr,
                m.vs().poll_timeout(),
                m.vs().debug_state()
            )
        });
        format!("\n  {}", due.join("\n  "))
    }

    fn finish(self, run: &mut Run) -> Result<OrderSimReport, Violation> {
        let blocked = self.check_final(run)?;
        self.check_order(run)?;
        self.check_virtual_synchrony(run)?;
        self.check_fifo(run)?;
        if !blocked {
            self.check_no_loss(run)?;
        }
        let live: Vec<usize> = self.live().collect();
        Ok(OrderSimReport {
            seed: run.seed,
            config: self.describe_config(),
            faults: self.base.faults.clone(),
            net: run.net.counters.clone(),
            sent: self.sent.len() as u64,
            completed: self.base.procs.iter().map(|p| p.done.len() as u64).sum(),
            delivered: self
                .base
                .procs
                .iter()
                .map(|p| p.log.iter().filter(|e| matches!(e, Entry::Msg(..))).count() as u64)
                .sum(),
            crashes: self.base.churn.crashes,
            expulsions: self.base.churn.expulsions,
            leaves: self.base.churn.leaves,
            joins: self.base.churn.joins,
            partitions: run.faults.cuts,
            clogs: run.faults.clogged,
            views: self.views.keys().map(|v| v.number).max().unwrap_or(0),
            final_members: live.len(),
            orphans: live.iter().filter(|&&i| self.orphan(i)).count(),
            blocked,
            digest: run.digest.0,
        })
    }
}

impl Sim {
    fn describe_config(&self) -> String {
        let c = &self.cfg;
        format!(
            "{} pack={:?} stability={:?} window={} cast_bytes_max={} send_queue_max={} visit_max={} idle_hold={:?} submit_window={} migrate_every={}",
            c.protocol.name(),
            c.vs.pack,
            c.vs.stability,
            c.vs.window,
            c.vs.cast_bytes_max,
            c.send_queue_max,
            c.visit_max,
            c.token_idle_hold,
            c.submit_window,
            c.migrate_every
        )
    }

    fn describe(&self, run: &Run) -> String {
        format!(
            "{}; crashes {} expulsions {} leaves {} joins {} partitions {} clogs {}",
            self.describe_config(),
            self.base.churn.crashes,
            self.base.churn.expulsions,
            self.base.churn.leaves,
            self.base.churn.joins,
            run.faults.cuts,
            run.faults.clogged
        )
    }

    fn slot_of(&self, a: Address) -> Option<usize> {
        crate::schedule::slot_of(&self.base.procs, a)
    }

    fn leaves_done(&mut self, run: &mut Run, i: usize) {
        if run.trace > 0 {
            eprintln!("{:>10} {} left", run.ns(), self.base.procs[i].addr);
        }
    }

    fn check_view(
        &mut self,
        run: &mut Run,
        i: usize,
        v: ViewId,
        members: Vec<Address>,
    ) -> Result<(), Violation> {
        let who = self.base.procs[i].addr;
        if run.trace > 0 {
            eprintln!(
                "{:>10} {who} view {v} {:?}",
                run.ns(),
                members.iter().map(|a| a.site).collect::<Vec<_>>()
            );
        }
        run.digest.add_u64(v.number);
        if !members.contains(&who) {
            return Err(self.fail(run, format!("{who} installed view {v} without itself")));
        }
        if let Some(old) = self.base.procs[i].view {
            if v <= old {
                return Err(self.fail(run, format!("{who} installed view {v} after {old}")));
            }
        }
        match self.views.get(&v) {
            Some(m) if *m != members => {
                return Err(self.fail(
                    run,
                    format!("view {v}: {who} has members {members:?}, others {m:?}"),
                ))
            }
            Some(_) => {}
            None => {
                self.views.insert(v, members.clone());
            }
        }
        let p = &mut self.base.procs[i];
        p.view = Some(v);
        p.view_members = members;
        p.log.push(Entry::View(v));
        Ok(())
    }

    fn check_message(
        &mut self,
        run: &mut Run,
        i: usize,
        s: Address,
        id: u64,
        payload: &[u8],
    ) -> Result<(), Violation> {
        let who = self.base.procs[i].addr;
        if run.trace > 0 {
            eprintln!("{:>10} {who} deliver {s}#{id}", run.ns());
        }
        run.digest.add_u64(s.site as u64);
        run.digest.add_u64(id);
        let p = &self.base.procs[i];
        let Some(v) = p.view else {
            return Err(self.fail(run, format!("{who} delivered {s}#{id} before any view")));
        };
        if !p.view_members.contains(&s) {
            return Err(self.fail(
                run,
                format!("{who} delivered {s}#{id} in view {v}, which {s} is not in"),
            ));
        }
        if p.seen.contains(&(s, id)) {
            return Err(self.fail(run, format!("{who} delivered {s}#{id} twice")));
        }
        match self.sent.get(&(s, id)) {
            Some(&h) if h == Digest::of(payload) => {}
            Some(_) => return Err(self.fail(run, format!("{who} delivered {s}#{id} altered"))),
            None => return Err(self.fail(run, format!("{who} delivered {s}#{id}, never sent"))),
        }
        if !payload.starts_with(format!("{s}#{id}#").as_bytes()) {
            return Err(self.fail(
                run,
                format!("{who} delivered {s}#{id} with another's payload"),
            ));
        }
        let p = &mut self.base.procs[i];
        if let Some(&last) = p.last_id.get(&s) {
            if id <= last {
                return Err(self.fail(
                    run,
                    format!("{who}: FIFO from {s} broken: {id} after {last}"),
                ));
            }
            if id > last + 1 {
                p.gaps.push((s, last, id));
            }
        }
        p.last_id.insert(s, id);
        p.seen.insert((s, id));
        p.log.push(Entry::Msg(s, id));
        Ok(())
    }

    /// Whether live process `i` is cut off for good: it is not in a settled view and fewer
    /// than a majority of its view run. It must block (a view needs a majority of the one
    /// before), and nobody in the group talks to it (it is not in their view): blocking is
    /// right for it, and liveness is about the others (seed 9498 before a pinwheel fix: a
    /// member of a view it never installed was excluded from the next, and the two others
    /// of its view were expelled since).
    fn orphan(&self, i: usize) -> bool {
        let Some(m) = self.base.procs[i].m.as_ref() else {
            return false;
        };
        if m.state() == VsState::Normal || m.members().is_empty() {
            return false;
        }
        let running = m
            .members()
            .iter()
            .filter(|&&a| {
                self.slot_of(a)
                    .is_some_and(|j| self.base.procs[j].m.is_some())
            })
            .count();
        running * 2 <= m.members().len()
    }

    /// Live processes that are not orphans: those liveness is about.
    fn settled(&self) -> Vec<usize> {
        self.live().filter(|&i| !self.orphan(i)).collect()
    }

    fn converged(&self, run: &Run) -> bool {
        // An orphan takes a few flush timeouts to say it is blocked: wait for that too.
        let now = run.now;
        if self.live().any(|i| {
            self.orphan(i)
                && !(self.base.procs[i].blocked_reported
                    && self.base.procs[i]
                        .m
                        .as_ref()
                        .is_some_and(|m| m.blocked(now)))
        }) {
            return false;
        }
        let live = self.settled();
        if live.is_empty() {
            return true;
        }
        let first = self.base.procs[live[0]].m.as_ref().expect("live");
        let view = first.view();
        // Idle is about this member; casts may still be on their way to others: every member
        // has received the same casts (and handed them all up, see `idle`).
        let received = first.vs().received_vector();
        let mut addrs: Vec<Address> = live.iter().map(|&i| self.base.procs[i].addr).collect();
        addrs.sort();
        let mut members = first.members().to_vec();
        members.sort();
        members == addrs
            && live.iter().all(|&i| {
                let p = &self.base.procs[i];
                let m = p.m.as_ref().expect("live");
                m.state() == VsState::Normal
                    && m.view() == view
                    && m.vs().received_vector() == received
                    && m.idle()
                    && m.sends_pending() == 0
                    && !p.leaving
                    && p.sent >= self.opts.messages_per_member as u64
            })
    }

    /// Whether a majority of the newest view installed anywhere is gone: the group must then
    /// block (a view needs a majority of the one before), not converge.
    fn majority_lost(&self) -> bool {
        let Some((_, members)) = self.views.iter().max_by_key(|(v, _)| **v) else {
            return false;
        };
        let running = members
            .iter()
            .filter(|&&a| {
                self.slot_of(a)
                    .is_some_and(|j| self.base.procs[j].m.is_some())
            })
            .count();
        running * 2 <= members.len()
    }

    /// Liveness; returns whether the group blocked (correctly).
    fn check_final(&self, run: &Run) -> Result<bool, Violation> {
        // An orphan blocks, correctly, and says so.
        for i in self.live().filter(|&i| self.orphan(i)) {
            let p = &self.base.procs[i];
            let m = p.m.as_ref().expect("live");
            if !(m.blocked(run.now) && p.blocked_reported) {
                return Err(self.fail(
                    run,
                    format!(
                    "{} is cut off from a majority of its view but does not say it is blocked: {}",
                    p.addr,
                    m.vs().debug_state()
                ),
                ));
            }
        }
        if self.converged(run) {
            return Ok(false);
        }
        if self.majority_lost() {
            return Ok(true);
        }
        let states: Vec<String> = self
            .settled()
            .into_iter()
            .map(|i| {
                let p = &self.base.procs[i];
                let m = p.m.as_ref().expect("live");
                format!(
                    "{}: {:?} view {} members {:?} idle {} pending {} sent {} leaving {} holder {:?}\n      {:?}\n      {}",
                    p.addr,
                    m.state(),
                    m.view(),
                    m.members().iter().map(|a| a.site).collect::<Vec<_>>(),
                    m.idle(),
                    m.sends_pending(),
                    p.sent,
                    p.leaving,
                    m.holder().map(|a| a.site),
                    m,
                    m.vs().debug_state()
                )
            })
            .collect();
        Err(self.fail(
            run,
            format!("no convergence after healing:\n  {}", states.join("\n  ")),
        ))
    }

    /// Any two processes deliver the messages both delivered in the same relative order.
    fn check_order(&self, run: &Run) -> Result<(), Violation> {
        let logs: Vec<&[Entry]> = self.base.procs.iter().map(|p| p.ordered_log()).collect();
        let pos: Vec<HashMap<(Address, u64), usize>> = logs
            .iter()
            .map(|log| {
                log.iter()
                    .filter_map(|e| match e {
                        Entry::Msg(a, id) => Some((*a, *id)),
                        Entry::View(_) => None,
                    })
                    .enumerate()
                    .map(|(k, x)| (x, k))
                    .collect()
            })
            .collect();
        for (i, p) in self.base.procs.iter().enumerate() {
            for (j, q) in self.base.procs.iter().enumerate().skip(i + 1) {
                let mut last: Option<((Address, u64), usize)> = None;
                for e in logs[i] {
                    let Entry::Msg(a, id) = e else {
                        continue;
                    };
                    let Some(&k) = pos[j].get(&(*a, *id)) else {
                        continue;
                    };
                    if let Some((prev, pk)) = last {
                        if k < pk {
                            return Err(self.fail(run, format!(
                                "total order: {} ({:?}) delivered {}#{} before {a}#{id}, {} ({:?}) after",
                                p.addr, p.fate, prev.0, prev.1, q.addr, q.fate
                            )));
                        }
                    }
                    last = Some(((*a, *id), k));
                }
            }
        }
        Ok(())
    }

    /// Views form one chain, and processes that install the same two consecutive views
    /// deliver the same messages between them.
    fn check_virtual_synchrony(&self, run: &Run) -> Result<(), Violation> {
        type Between = (ViewId, Vec<(Address, u64)>, Address);
        let mut next: HashMap<ViewId, (ViewId, Address)> = HashMap::new();
        let mut between: HashMap<(ViewId, ViewId), Between> = HashMap::new();
        for p in &self.base.procs {
            let mut cur: Option<ViewId> = None;
            let mut msgs: Vec<(Address, u64)> = Vec::new();
            for e in &p.log {
                match e {
                    Entry::Msg(a, id) => msgs.push((*a, *id)),
                    Entry::View(v) => {
                        if let Some(c) = cur {
                            match next.get(&c) {
                                Some((n, who)) if n != v => {
                                    return Err(self.fail(
                                        run,
                                        format!(
                                    "views fork: {who} installed {n} after {c}, {} installed {v}",
                                    p.addr
                                ),
                                    ))
                                }
                                Some(_) => {}
                                None => {
                                    next.insert(c, (*v, p.addr));
                                }
                            }
                            match between.get(&(c, *v)) {
                                Some((_, m, who)) if *m != msgs => {
                                    let diff = first_difference(m, &msgs);
                                    return Err(self.fail(run, format!(
                                        "virtual synchrony: between views {c} and {v}, {who} delivered {} messages, {} delivered {} ({diff})",
                                        m.len(),
                                        p.addr,
                                        msgs.len()
                                    )));
                                }
                                Some(_) => {}
                                None => {
                                    between.insert((c, *v), (c, msgs.clone(), p.addr));
                                }
                            }
                        }
                        cur = Some(*v);
                        msgs.clear();
                    }
                }
            }
        }
        Ok(())
    }

    /// FIFO gaps only in the messages of a sender that failed.
    fn check_fifo(&self, run: &Run) -> Result<(), Violation> {
        for p in &self.base.procs {
            for &(s, last, got) in &p.gaps {
                let failed = self.slot_of(s).is_some_and(|j| {
                    matches!(self.base.procs[j].fate, Fate::Crashed | Fate::Expelled)
                });
                if !failed {
                    return Err(self.fail(
                        run,
                        format!(
                            "{}: FIFO from {s} broken: {got} after {last} ({s} did not fail)",
                            p.addr
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every message of a sender still in the group is delivered by it (`SendDone`) and by
    /// every process still in the group that installed the view it was delivered in.
    fn check_no_loss(&self, run: &Run) -> Result<(), Violation> {
        let live = self.settled();
        for &i in &live {
            let s = &self.base.procs[i];
            let mut view_of: HashMap<u64, ViewId> = HashMap::new();
            let mut cur = None;
            for e in &s.log {
                match e {
                    Entry::View(v) => cur = Some(*v),
                    Entry::Msg(a, id) if *a == s.addr => {
                        view_of.insert(*id, cur.expect("a view first"));
                    }
                    Entry::Msg(..) => {}
                }
            }
            let done: HashSet<u64> = s.done.iter().copied().collect();
            for id in 1..=s.sent {
                let Some(v) = view_of.get(&id) else {
                    return Err(self.fail(
                        run,
                        format!("{}#{id} lost: its sender never delivered it", s.addr),
                    ));
                };
                if !done.contains(&id) {
                    return Err(
                        self.fail(run, format!("{}#{id}: delivered but no SendDone", s.addr))
                    );
                }
                for &j in &live {
                    let q = &self.base.procs[j];
                    if q.log.contains(&Entry::View(*v)) && !q.seen.contains(&(s.addr, id)) {
                        return Err(self.fail(run, format!(
                            "{}#{id} (delivered in view {v}) lost: {} installed that view and never delivered it",
                            s.addr, q.addr
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

fn first_difference(a: &[(Address, u64)], b: &[(Address, u64)]) -> String {
    let k = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    format!(
        "first difference at {k}: {:?} vs {:?}",
        a.get(k).map(|(s, id)| format!("{s}#{id}")),
        b.get(k).map(|(s, id)| format!("{s}#{id}"))
    )
}
