//! The virtually synchronous stack ([`txcast_proto::vsync::Vs`]) under simulated faults, with
//! checkers for what it promises (paper 002 §2, §3.1):
//! - integrity: every delivered cast was cast by its sender, with that payload, in that view;
//!   nothing twice; each sender's casts in a view come in order from 1 without gaps;
//! - view agreement: a view id names one member list; each process's views go up one number
//!   at a time; one view per number (primary partition: a view is committed by a majority of
//!   the one before, so there is never a second view with the same number);
//! - virtual synchrony: processes that install the same two consecutive views delivered the
//!   same casts in the first;
//! - self-delivery: a process that moves on from a view delivered all its own casts of it;
//! - bounded buffers: no member has more than `window` own casts unstable;
//! - liveness: once the faults heal, every live process reaches one view of exactly the live
//!   processes, every cast of that view is delivered everywhere, and everything becomes stable
//!   (unless a majority of the newest view is gone: then blocking is right).
//!
//! Processes are slots: a crash is for good, and a restart is a new process (a new address)
//! that joins through a live member, as in `group_sim`.

use crate::group_world::{self, GroupBase, GroupSim};
use crate::harness::{min_opt, Run, Violation};
use crate::net::NetCounters;
use crate::schedule::{draw_pack, GroupOptions, GroupSeed};
use crate::{Digest, NodeId};
use std::collections::{BTreeMap, HashMap, HashSet};
use txcast_proto::pack::PackMode;
use txcast_proto::time::Instant;
use txcast_proto::vsync::{Dest, Stability, Upcall, ViewId, Vs, VsConfig, VsState};
use txcast_proto::Address;

/// Knobs of one simulation of the virtually synchronous stack.
#[derive(Clone, Debug)]
pub struct VsSimOptions {
    /// With `faults`, the seed draws the stability, packing and window too.
    pub group: GroupOptions,
    /// Casts each process makes at most.
    pub casts_per_member: u32,
}

impl Default for VsSimOptions {
    fn default() -> Self {
        VsSimOptions {
            group: GroupOptions::default(),
            casts_per_member: 150,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct VsSimReport {
    pub seed: u64,
    pub config: String,
    pub faults: String,
    pub net: NetCounters,
    pub casts: u64,
    /// Casts made between a flush upcall and `flush_ready`.
    pub flush_casts: u64,
    pub delivered: u64,
    pub crashes: u32,
    pub leaves: u32,
    pub joins: u32,
    pub expulsions: u32,
    pub partitions: u32,
    pub clogs: u32,
    /// Distinct views installed.
    pub views: u64,
    pub final_view: u64,
    pub final_members: usize,
    /// The run ended blocked, correctly (a majority of the newest view is gone).
    pub blocked: bool,
    pub end_ns: u64,
    pub digest: u64,
}

/// One process's part in the current view, as the checkers follow it.
#[derive(Clone, Debug, Default)]
struct InView {
    id: ViewId,
    members: Vec<Address>,
    /// Casts delivered here in this view, by sender rank: the last seq (FIFO without gaps).
    delivered: Vec<u64>,
    /// Own casts made in this view.
    own: u64,
}

#[derive(Default)]
struct Proc {
    addr: Address,
    vs: Option<Vs>,
    casts_left: u32,
    next_cast_at: u64,
    /// Flush upcall taken: call `flush_ready` at this time, after this many more casts.
    flush_at: Option<(u64, u32)>,
    view: Option<InView>,
    /// (sender, k) of every cast delivered here.
    seen: HashSet<(Address, u64)>,
    leaving: bool,
    /// `Upcall::Blocked` came during the current view change.
    blocked_reported: bool,
}

/// What a cast was, when it was made.
struct CastRec {
    view: ViewId,
    seq: u64,
    hash: u64,
}

crate::schedule::group_process!(Proc, Vs, vs, VsState, Dest, VsConfig);

/// The `k`th cast of `addr`: it names both, and its length varies (packing gets exercised).
fn payload_for(addr: Address, k: u64) -> Vec<u8> {
    let mut v = format!("{addr}#{k}#").into_bytes();
    v.resize(
        v.len() + (k as usize * 37 + addr.site as usize * 11) % 400,
        b'x',
    );
    v
}

/// The sender and number a payload names.
fn parse_payload(p: &[u8]) -> Option<(String, u64)> {
    let s = std::str::from_utf8(p).ok()?;
    let mut it = s.splitn(3, '#');
    let a = it.next()?.to_string();
    let k = it.next()?.parse().ok()?;
    Some((a, k))
}

#[derive(Default)]
struct Sim {
    opts: VsSimOptions,
    cfg: VsConfig,
    base: GroupBase<Proc>,
    casts: HashMap<(Address, u64), CastRec>,
    flush_casts: u64,
    delivered: u64,
    /// Every view installed anywhere: its members.
    views: BTreeMap<ViewId, Vec<Address>>,
    /// View number -> the one view id installed with it.
    numbers: HashMap<u64, ViewId>,
    /// (view, next view) -> what the first process to install both delivered in the first.
    synchrony: HashMap<(ViewId, ViewId), (Address, Vec<u64>)>,
}

/// Runs one seed; `Err` names the first guarantee broken.
pub fn run_vs(seed: u64, opts: &VsSimOptions) -> Result<VsSimReport, Violation> {
    let mut draw = GroupSeed::new(seed);
    let cfg_rng = &mut draw.cfg_rng;
    let mut cfg = VsConfig {
        group: 9,
        window: 32,
        cast_bytes_max: 2048,
        packet_bytes_max: 8192,
        pack: PackMode::Adaptive {
            delay_max: std::time::Duration::from_micros(700),
        },
        stability: Stability::Piggyback,
        retransmit_timeout: std::time::Duration::from_millis(10),
        heartbeat_interval: std::time::Duration::from_millis(20),
        silence_timeout: std::time::Duration::from_millis(400),
        unreachable_silence: std::time::Duration::from_millis(60),
        flush_timeout: std::time::Duration::from_millis(150),
        join_attempts_max: 100,
    };
    if opts.group.faults {
        cfg.stability = if cfg_rng.chance(0.5) {
            Stability::Piggyback
        } else {
            Stability::Pinwheel
        };
        cfg.pack = draw_pack(cfg_rng);
        cfg.window = 16 + cfg_rng.below(49) as usize;
    }
    cfg.validate()
        .map_err(|e| Violation::at_start("vs", seed, format!("configuration: {e}")))?;
    group_world::run::<Sim>(draw, "vs", String::new(), opts, cfg)
}

impl GroupSim for Sim {
    group_world::group_fields!(Proc, VsSimReport, VsSimOptions);

    fn new_proc(&mut self, run: &Run, addr: Address) -> Proc {
        Proc {
            addr,
            casts_left: self.opts.casts_per_member,
            next_cast_at: self.base.first_send_at(run),
            ..Proc::default()
        }
    }

    fn fail(&self, run: &Run, what: String) -> Violation {
        run.fail(format!("({}): {what}", self.describe(run)))
    }

    fn in_group(vs: &Vs) -> bool {
        matches!(
            vs.state(),
            VsState::Joining | VsState::Normal | VsState::Flushing
        )
    }

    /// One in a view, settled or changing.
    fn fallback_contact(&self, i: usize) -> bool {
        self.base.procs[i]
            .vs
            .as_ref()
            .is_some_and(|v| matches!(v.state(), VsState::Normal | VsState::Flushing))
    }

    /// Takes the member's upcalls through the checkers, and checks its bound on unstable casts.
    fn drain(&mut self, run: &mut Run, i: usize) -> Result<(), Violation> {
        loop {
            let mut busy = false;
            let Some(sent) = self.base.transmit(run, i) else {
                return Ok(());
            };
            busy |= sent;
            loop {
                let Some(vs) = self.base.procs[i].vs.as_mut() else {
                    return Ok(());
                };
                let Some(up) = vs.poll_upcall(|u| match u {
                    Upcall::Cast {
                        sender,
                        seq,
                        payload,
                    } => Up::Cast(sender, seq, payload.to_vec()),
                    Upcall::View(v) => Up::View(v.id, v.members),
                    Upcall::Flush => Up::Flush,
                    Upcall::Left => Up::Left,
                    Upcall::Expelled => Up::Expelled,
                    Upcall::JoinFailed => Up::JoinFailed,
                    Upcall::Blocked { .. } => Up::Blocked,
                    Upcall::Direct { .. } => Up::Other,
                }) else {
                    break;
                };
                busy = true;
                self.upcall(run, i, up)?;
            }
            if let Some(vs) = self.base.procs[i].vs.as_ref() {
                let unstable = vs.unstable();
                if unstable > self.cfg.window {
                    return Err(self.fail(
                        run,
                        format!(
                            "{}: {unstable} casts unstable > window {}",
                            self.base.procs[i].addr, self.cfg.window
                        ),
                    ));
                }
            }
            if !busy {
                return Ok(());
            }
        }
    }

    /// The layer above's flushes, then casts.
    fn workload(&mut self, run: &mut Run) -> Result<(), Violation> {
        self.flushes(run)?;
        for i in 0..self.base.procs.len() {
            if self.base.procs[i].vs.is_none() || run.ns() < self.base.procs[i].next_cast_at {
                continue;
            }
            if self.cast(run, i)? {
                self.base.procs[i].next_cast_at = run.ns() + self.base.rng.below(8_000_000);
                self.drain(run, i)?;
            }
        }
        Ok(())
    }

    /// Timers, and flushes the layer above finishes.
    fn next_wakeup(&self) -> Option<Instant> {
        let mut next = None;
        for p in &self.base.procs {
            next = min_opt(next, p.vs.as_ref().and_then(|v| v.poll_timeout()));
            if let Some((t, _)) = p.flush_at.filter(|_| p.vs.is_some()) {
                next = min_opt(next, Some(Instant(t)));
            }
        }
        next
    }

    fn trace_packet(&self, run: &Run, to: NodeId, bytes: &[u8]) {
        if run.trace > 1 {
            if let Ok((h, m)) = txcast_proto::vsync::msg::parse(bytes) {
                let m = match m {
                        txcast_proto::vsync::msg::VsMsg::Data {
                            stream,
                            first,
                            received,
                            records,
                        } => format!(
                            "Data {{ stream: {stream}, first: {first}, received: {received:?}, records: {} }}",
                            records.len()
                        ),
                        m => format!("{m:?}"),
                    };
                eprintln!(
                    "{:>10} {} -> {} in {}: {m}",
                    run.ns(),
                    h.from,
                    self.base.procs[to].addr,
                    h.view
                );
            }
        }
    }

    /// Healed links carry every packet after the seed's minimum delay (the runner's healing
    /// alone).
    fn heal(&mut self, _run: &mut Run) {}

    fn done(&self, run: &Run) -> bool {
        self.converged(run)
    }

    fn stalled(&self, run: &Run) -> String {
        let due = self.base.due(run, |_, v| v.debug_state());
        format!("{due:?}")
    }

    fn finish(self, run: &mut Run) -> Result<VsSimReport, Violation> {
        let blocked = self.check_final(run)?;
        let last = self.views.keys().next_back().copied().unwrap_or_default();
        let cfg = &self.cfg;
        Ok(VsSimReport {
            seed: run.seed,
            config: format!(
                "window={} stability={:?} pack={:?}",
                cfg.window, cfg.stability, cfg.pack
            ),
            faults: self.base.faults.clone(),
            net: run.net.counters.clone(),
            casts: self.casts.len() as u64,
            flush_casts: self.flush_casts,
            delivered: self.delivered,
            crashes: self.base.churn.crashes,
            leaves: self.base.churn.leaves,
            joins: self.base.churn.joins,
            expulsions: self.base.churn.expulsions,
            partitions: run.faults.cuts,
            clogs: run.faults.clogged,
            views: self.views.len() as u64,
            final_view: last.number,
            final_members: self.live().count(),
            blocked,
            end_ns: run.ns(),
            digest: run.digest.0,
        })
    }
}

impl Sim {
    fn describe(&self, run: &Run) -> String {
        format!(
            "window={} {:?} {:?}; crashes {} leaves {} joins {} expulsions {} partitions {} clogs {}",
            self.cfg.window,
            self.cfg.stability,
            self.cfg.pack,
            self.base.churn.crashes,
            self.base.churn.leaves,
            self.base.churn.joins,
            self.base.churn.expulsions,
            run.faults.cuts,
            run.faults.clogged
        )
    }

    fn slot_of(&self, a: Address) -> Option<usize> {
        crate::schedule::slot_of(&self.base.procs, a)
    }

    /// Makes the `k`th cast of process `i` if its member takes it now.
    fn cast(&mut self, run: &mut Run, i: usize) -> Result<bool, Violation> {
        let now = run.now;
        let p = &mut self.base.procs[i];
        let Some(vs) = p.vs.as_mut() else {
            return Ok(false);
        };
        if p.casts_left == 0 || !vs.can_cast() {
            return Ok(false);
        }
        let k = (self.opts.casts_per_member - p.casts_left + 1) as u64;
        let payload = payload_for(p.addr, k);
        let seq = match vs.cast(now, &payload) {
            Ok(seq) => seq,
            Err(e) => {
                let who = p.addr;
                return Err(self.fail(run, format!("{who}: can_cast() but cast refused: {e}")));
            }
        };
        p.casts_left -= 1;
        let addr = p.addr;
        let Some(v) = p.view.as_mut() else {
            return Err(self.fail(run, format!("{addr} cast before it installed a view")));
        };
        v.own += 1;
        let view = v.id;
        if seq != v.own {
            let own = v.own;
            return Err(self.fail(
                run,
                format!("{addr}: cast numbered {seq}, its cast number {own} in view {view}"),
            ));
        }
        if run.trace > 0 {
            eprintln!("{:>10} {addr} cast #{k} = {view} seq {seq}", run.ns());
        }
        self.casts.insert(
            (addr, k),
            CastRec {
                view,
                seq,
                hash: Digest::of(&payload),
            },
        );
        Ok(true)
    }

    /// The layer above's part in a flush: some casts, then `flush_ready`.
    fn flushes(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        for i in 0..self.base.procs.len() {
            let Some((at, extra)) = self.base.procs[i].flush_at else {
                continue;
            };
            if self.base.procs[i].vs.is_none() {
                self.base.procs[i].flush_at = None;
                continue;
            }
            if at > run.ns() {
                continue;
            }
            for _ in 0..extra {
                if self.cast(run, i)? {
                    self.flush_casts += 1;
                }
            }
            self.base.procs[i].flush_at = None;
            if run.trace > 0 {
                eprintln!("{:>10} {} flush_ready", run.ns(), self.base.procs[i].addr);
            }
            self.base.procs[i]
                .vs
                .as_mut()
                .expect("live")
                .flush_ready(now);
            self.drain(run, i)?;
        }
        Ok(())
    }

    fn upcall(&mut self, run: &mut Run, i: usize, up: Up) -> Result<(), Violation> {
        let who = self.base.procs[i].addr;
        match up {
            Up::Cast(sender, seq, payload) => self.check_cast(run, i, sender, seq, &payload)?,
            Up::View(id, members) => {
                self.base.procs[i].blocked_reported = false;
                self.check_view(run, i, id, members)?
            }
            Up::Blocked => {
                let p = &self.base.procs[i];
                let flushing =
                    p.vs.as_ref()
                        .is_some_and(|vs| vs.state() == VsState::Flushing);
                if !flushing || p.blocked_reported {
                    return Err(self.fail(
                        run,
                        format!("{who}: Blocked outside a view change, or twice in one"),
                    ));
                }
                self.base.procs[i].blocked_reported = true;
            }
            Up::Flush => {
                if run.trace > 0 {
                    eprintln!("{:>10} {who} flush upcall", run.ns());
                }
                // The layer above may take a while, and cast a little, before it is ready.
                let delay = if self.base.rng.chance(0.5) {
                    0
                } else {
                    self.base.rng.below(5_000_000)
                };
                let extra = self.base.rng.below(4) as u32;
                self.base.procs[i].flush_at = Some((run.ns() + delay, extra));
            }
            Up::Left => {
                if run.trace > 0 {
                    eprintln!("{:>10} {who} LEFT", run.ns());
                }
                if !self.base.procs[i].leaving {
                    return Err(self.fail(run, format!("{who} left without asking")));
                }
                self.base.procs[i].vs = None;
            }
            Up::Expelled => {
                if run.trace > 0 {
                    eprintln!("{:>10} {who} EXPELLED", run.ns());
                }
                // Left out of a view: to the group it failed; it starts again as a new process.
                self.base.procs[i].vs = None;
                self.base.churn.expulsions += 1;
                self.spawn_joiner(run);
            }
            Up::JoinFailed => {
                if run.trace > 0 {
                    eprintln!("{:>10} {who} JOIN FAILED", run.ns());
                }
                self.base.procs[i].vs = None;
                self.spawn_joiner(run);
            }
            Up::Other => {}
        }
        Ok(())
    }

    fn check_cast(
        &mut self,
        run: &mut Run,
        i: usize,
        sender: Address,
        seq: u64,
        payload: &[u8],
    ) -> Result<(), Violation> {
        let who = self.base.procs[i].addr;
        run.digest.add_u64(i as u64);
        run.digest.add_u64(seq);
        run.digest.add(payload);
        self.delivered += 1;
        let Some(v) = self.base.procs[i].view.as_mut() else {
            return Err(self.fail(run, format!("{who} delivered a cast before any view")));
        };
        let view = v.id;
        let Some(r) = v.members.iter().position(|&a| a == sender) else {
            return Err(self.fail(
                run,
                format!("{who} delivered a cast of {sender}, not in its view {view}"),
            ));
        };
        if seq != v.delivered[r] + 1 {
            let last = v.delivered[r];
            return Err(self.fail(
                run,
                format!("{who}: FIFO from {sender} in view {view} broken: seq {seq} after {last}"),
            ));
        }
        v.delivered[r] = seq;
        let Some((a, k)) = parse_payload(payload) else {
            return Err(self.fail(
                run,
                format!("{who} delivered a payload never cast: {payload:?}"),
            ));
        };
        if a != sender.to_string() {
            return Err(self.fail(
                run,
                format!("{who} delivered {a}#{k} as a cast of {sender}"),
            ));
        }
        match self.casts.get(&(sender, k)) {
            None => return Err(self.fail(run, format!("{who} delivered {sender}#{k}, never cast"))),
            Some(c) if c.hash != Digest::of(payload) => {
                return Err(self.fail(run, format!("{who} delivered {sender}#{k} altered")))
            }
            Some(c) if c.view != view || c.seq != seq => {
                return Err(self.fail(
                    run,
                    format!(
                "{who} delivered {sender}#{k} as seq {seq} in view {view}; it was cast as {} in {}",
                c.seq, c.view
            ),
                ))
            }
            Some(_) => {}
        }
        if !self.base.procs[i].seen.insert((sender, k)) {
            return Err(self.fail(run, format!("{who} delivered {sender}#{k} twice")));
        }
        Ok(())
    }

    fn check_view(
        &mut self,
        run: &mut Run,
        i: usize,
        id: ViewId,
        members: Vec<Address>,
    ) -> Result<(), Violation> {
        let who = self.base.procs[i].addr;
        if run.trace > 0 {
            eprintln!(
                "{:>10} {who} VIEW {id} {:?}",
                run.ns(),
                members.iter().map(|a| a.site).collect::<Vec<_>>()
            );
        }
        run.digest.add_u64(id.number);
        if !members.contains(&who) {
            return Err(self.fail(
                run,
                format!("{who} installed {id} without itself: {members:?}"),
            ));
        }
        match self.views.get(&id) {
            Some(m) if *m != members => {
                return Err(self.fail(
                    run,
                    format!("view agreement: {who} installed {id} as {members:?}, others as {m:?}"),
                ))
            }
            Some(_) => {}
            None => {
                self.views.insert(id, members.clone());
            }
        }
        match self.numbers.get(&id.number) {
            Some(other) if *other != id => {
                return Err(self.fail(
                    run,
                    format!(
                    "primary partition: {who} installed {id}, others {other} with the same number"
                ),
                ))
            }
            Some(_) => {}
            None => {
                self.numbers.insert(id.number, id);
            }
        }
        if let Some(old) = self.base.procs[i].view.take() {
            if id.number != old.id.number + 1 {
                return Err(self.fail(
                    run,
                    format!("{who} went from view {} to {id}, not the next", old.id),
                ));
            }
            // Self-delivery: every own cast of the view is delivered before the next.
            let me = old.members.iter().position(|&a| a == who).expect("member");
            if old.delivered[me] != old.own {
                return Err(self.fail(
                    run,
                    format!(
                        "self-delivery: {who} cast {} in {} and delivered {} of them before {id}",
                        old.own, old.id, old.delivered[me]
                    ),
                ));
            }
            // Virtual synchrony: the same casts in the view at all who go on to the same next.
            match self.synchrony.get(&(old.id, id)) {
                Some((other, d)) if *d != old.delivered => {
                    return Err(self.fail(run, format!(
                        "virtual synchrony: from {} to {id}, {who} delivered {:?} and {other} {d:?} (by rank of {:?})",
                        old.id,
                        old.delivered,
                        old.members.iter().map(|a| a.site).collect::<Vec<_>>()
                    )))
                }
                Some(_) => {}
                None => {
                    self.synchrony
                        .insert((old.id, id), (who, old.delivered.clone()));
                }
            }
        }
        let n = members.len();
        self.base.procs[i].view = Some(InView {
            id,
            members,
            delivered: vec![0; n],
            own: 0,
        });
        Ok(())
    }

    /// Every live process is in one view of exactly the live processes, has delivered every
    /// cast of it, has nothing unstable, and is done casting.
    /// A live member left flushing a view whose majority is gone: cut off when the others
    /// moved on, and every member that could tell it so has since left, failed or been
    /// expelled (seed 80652). It blocks, correctly, and must say so; liveness is about the
    /// others.
    fn orphan(&self, i: usize) -> bool {
        let Some(vs) = self.base.procs[i].vs.as_ref() else {
            return false;
        };
        if vs.state() != VsState::Flushing || vs.members().is_empty() {
            return false;
        }
        let running = vs
            .members()
            .iter()
            .filter(|&&a| self.live().any(|j| self.base.procs[j].addr == a))
            .count();
        running * 2 <= vs.members().len()
    }

    /// An orphan (or a member of a newest view whose majority is gone) that does not say it
    /// is blocked.
    fn check_blocked(&self, run: &Run, i: usize) -> Result<(), Violation> {
        let p = &self.base.procs[i];
        let vs = p.vs.as_ref().expect("live");
        if vs.blocked(run.now) && p.blocked_reported {
            return Ok(());
        }
        Err(self.fail(
            run,
            format!(
                "{} is cut off from a majority of its view but does not say it is blocked: {}",
                p.addr,
                vs.debug_state()
            ),
        ))
    }

    fn converged(&self, run: &Run) -> bool {
        // An orphan takes a few flush timeouts to say it is blocked: wait for that too.
        if self
            .live()
            .any(|i| self.orphan(i) && self.check_blocked(run, i).is_err())
        {
            return false;
        }
        let live: Vec<usize> = self.live().filter(|&i| !self.orphan(i)).collect();
        if live.is_empty() {
            return true;
        }
        let first = &self.base.procs[live[0]];
        let Some(v0) = first.view.as_ref() else {
            return false;
        };
        let mut addrs: Vec<Address> = live.iter().map(|&i| self.base.procs[i].addr).collect();
        addrs.sort();
        let mut members = v0.members.clone();
        members.sort();
        if members != addrs {
            return false;
        }
        // What each member cast in the view.
        let own: Vec<u64> = v0
            .members
            .iter()
            .map(|&a| {
                self.slot_of(a)
                    .and_then(|j| self.base.procs[j].view.as_ref())
                    .map_or(u64::MAX, |v| v.own)
            })
            .collect();
        live.iter().all(|&i| {
            let p = &self.base.procs[i];
            let vs = p.vs.as_ref().expect("live");
            p.casts_left == 0
                && !p.leaving
                && p.flush_at.is_none()
                && vs.state() == VsState::Normal
                && vs.unstable() == 0
                && vs.idle()
                && p.view
                    .as_ref()
                    .is_some_and(|v| v.id == v0.id && v.delivered == own)
        })
    }

    /// Whether the group cannot recover: a majority of the newest view installed anywhere
    /// (every next view needs a majority of it) no longer runs. Blocking is then right.
    fn majority_lost(&self) -> bool {
        let Some((_, members)) = self.views.iter().next_back() else {
            return false;
        };
        let running = members
            .iter()
            .filter(|&&a| self.live().any(|i| self.base.procs[i].addr == a))
            .count();
        running * 2 <= members.len()
    }

    /// Convergence after healing, or a justified block; `Ok(true)` for the latter.
    fn check_final(&self, run: &Run) -> Result<bool, Violation> {
        for i in self.live().filter(|&i| self.orphan(i)) {
            self.check_blocked(run, i)?;
        }
        if self.converged(run) {
            return Ok(false);
        }
        if self.majority_lost() {
            // Cut off from a majority for good: every live member of the newest view says
            // it is blocked (it did, once, through `Upcall::Blocked`).
            let (_, members) = self.views.iter().next_back().expect("a view");
            for i in self.live() {
                let p = &self.base.procs[i];
                let vs = p.vs.as_ref().expect("live");
                if members.contains(&p.addr)
                    && matches!(vs.state(), VsState::Normal | VsState::Flushing)
                {
                    self.check_blocked(run, i)?;
                }
            }
            return Ok(true);
        }
        let states: Vec<String> = self
            .live()
            .map(|i| {
                let p = &self.base.procs[i];
                let vs = p.vs.as_ref().expect("live");
                format!(
                    "{}\n    unstable {} idle {} left to cast {} leaving {} delivered {:?} own {:?} received {:?} stable {:?}",
                    vs.debug_state(),
                    vs.unstable(),
                    vs.idle(),
                    p.casts_left,
                    p.leaving,
                    p.view.as_ref().map(|v| v.delivered.clone()),
                    p.view.as_ref().map(|v| v.own),
                    vs.received_vector(),
                    vs.stable_vector()
                )
            })
            .collect();
        Err(self.fail(
            run,
            format!("no convergence after healing:\n  {}", states.join("\n  ")),
        ))
    }
}

/// An upcall, copied out of the member.
enum Up {
    Cast(Address, u64, Vec<u8>),
    View(ViewId, Vec<Address>),
    Flush,
    Left,
    Expelled,
    JoinFailed,
    Blocked,
    Other,
}
