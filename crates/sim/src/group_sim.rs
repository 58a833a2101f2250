//! Groups under simulated faults, with checkers for the guarantees of paper 003 and DESIGN §5:
//! total order and agreement (one record per sequence number, wherever it is delivered),
//! integrity (no duplicates, nothing invented), FIFO per sender without gaps, no loss of a
//! completed send while at most r members crash, and convergence after the faults heal.
//!
//! Processes are slots: a crashed process is gone for good, and a restart is a new process
//! (a new address) that joins through a live member, as a restarted server would.

use crate::group_world::{self, GroupBase, GroupSim};
use crate::harness::{Run, Violation};
use crate::net::NetCounters;
use crate::schedule::{draw_pack, GroupOptions, GroupSeed};
use crate::{Digest, NodeId};
use std::collections::{BTreeMap, HashMap, HashSet};
use txcast_proto::group::{
    Delivered, Dest, GroupConfig, GroupEvent, Member, Method, MinMembers, State,
};
use txcast_proto::time::Instant;
use txcast_proto::Address;

/// Knobs of one group simulation.
#[derive(Clone, Debug)]
pub struct GroupSimOptions {
    /// With `faults`, the seed draws the method, r and packing too.
    pub group: GroupOptions,
    /// Messages each process sends at most.
    pub messages_per_member: u32,
}

impl Default for GroupSimOptions {
    fn default() -> Self {
        GroupSimOptions {
            group: GroupOptions::default(),
            messages_per_member: 60,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct GroupSimReport {
    pub seed: u64,
    pub config: String,
    pub faults: String,
    pub net: NetCounters,
    pub sent: u64,
    pub completed: u64,
    pub delivered: u64,
    pub crashes: u32,
    pub leaves: u32,
    pub joins: u32,
    /// Times the network was cut in two.
    pub partitions: u32,
    /// Paths clogged.
    pub clogs: u32,
    pub resets: u64,
    pub final_members: usize,
    pub highest_seq: u64,
    pub digest: u64,
}

/// What a delivered record is, for comparing deliveries across processes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rec {
    Msg(Address, u64, u64),
    Joined(Address),
    Left(Address),
    Rebuilt(u64, Vec<Address>),
}

#[derive(Default)]
struct Proc {
    addr: Address,
    m: Option<Member>,
    /// Sent and not yet complete.
    sends_left: u32,
    next_send_at: u64,
    /// Last seq delivered here, and last msg_id per sender.
    last_seq: u64,
    last_id: HashMap<Address, u64>,
    seen: HashSet<(Address, u64)>,
    leaving: bool,
    done: bool,
    /// Everything delivered here, in order.
    log: Vec<(u64, Rec)>,
    /// The seq of the join record that made this process a member (0: it created the group).
    joined_at: u64,
}

crate::schedule::group_process!(Proc, Member, m, State, Dest, GroupConfig);

fn payload_for(addr: Address, k: u64) -> Vec<u8> {
    let mut v = format!("{addr}#{k}#").into_bytes();
    // Vary the length so packing and BB-by-size both get exercised.
    v.resize(v.len() + (k as usize * 37) % 300, b'x');
    v
}

#[derive(Default)]
struct Sim {
    opts: GroupSimOptions,
    cfg: GroupConfig,
    base: GroupBase<Proc>,
    /// seq -> the record delivered there by processes that did not crash (built at the end).
    global: BTreeMap<u64, Rec>,
    /// What crashed processes delivered before they crashed.
    crashed_logs: Vec<(Address, Vec<(u64, Rec)>)>,
    /// (sender, msg_id) -> payload hash, for everything handed to `send`.
    sent: HashMap<(Address, u64), u64>,
    completed: Vec<(Address, u64)>,
}

/// Runs one seed; `Err` names the first guarantee broken.
pub fn run_group(seed: u64, opts: &GroupSimOptions) -> Result<GroupSimReport, Violation> {
    let mut draw = GroupSeed::new(seed);
    let cfg_rng = &mut draw.cfg_rng;
    let mut cfg = GroupConfig {
        group: 7,
        history_max: 64,
        send_window: 16,
        send_queue_max: 64,
        message_bytes_max: 2048,
        packet_bytes_max: 8192,
        retransmit_timeout: std::time::Duration::from_millis(10),
        heartbeat_interval: std::time::Duration::from_millis(20),
        silence_timeout: std::time::Duration::from_millis(400),
        unreachable_silence: std::time::Duration::from_millis(60),
        probe_interval: std::time::Duration::from_millis(60),
        probes_max: 3,
        auto_reset: Some(MinMembers::Majority),
        reset_retry: std::time::Duration::from_millis(200),
        ..GroupConfig::default()
    };
    if opts.group.faults {
        cfg.resilience = cfg_rng.below(opts.group.members as u64) as u8;
        cfg.method = match cfg_rng.below(3) {
            0 => Method::Pb,
            1 => Method::Bb,
            _ => Method::BySize { bb_from_bytes: 150 },
        };
        cfg.pack = draw_pack(cfg_rng);
    }
    group_world::run::<Sim>(draw, "group", String::new(), opts, cfg)
}

impl GroupSim for Sim {
    group_world::group_fields!(Proc, GroupSimReport, GroupSimOptions);

    fn new_proc(&mut self, run: &Run, addr: Address) -> Proc {
        Proc {
            addr,
            sends_left: self.opts.messages_per_member,
            next_send_at: self.base.first_send_at(run),
            ..Proc::default()
        }
    }

    fn in_group(m: &Member) -> bool {
        !matches!(m.state(), State::Left | State::Expelled)
    }

    fn fallback_contact(&self, _i: usize) -> bool {
        true
    }

    /// Takes the member's deliveries and events through the checkers.
    fn drain(&mut self, run: &mut Run, i: usize) -> Result<(), Violation> {
        if self.base.transmit(run, i).is_none() {
            return Ok(());
        }
        while let Some((seq, sender, rec)) = self.base.member_mut(i).poll_delivery(|d| {
            let rec = match d.what {
                Delivered::Message { msg_id, payload } => {
                    Rec::Msg(d.sender, msg_id, Digest::of(payload))
                }
                Delivered::Joined(a) => Rec::Joined(a),
                Delivered::Left(a) => Rec::Left(a),
                Delivered::Rebuilt { epoch, members, .. } => Rec::Rebuilt(epoch.number, members),
            };
            (d.seq, d.sender, rec)
        }) {
            self.check_delivery(run, i, seq, sender, rec)?;
        }
        while let Some(ev) = self.base.member_mut(i).poll_event() {
            let addr = self.base.procs[i].addr;
            if run.trace > 0 {
                eprintln!(
                    "{:>10} {addr} event {ev:?} {:?}",
                    run.ns(),
                    self.base.procs[i].m.as_ref().map(|m| m.info().epoch)
                );
            }
            match ev {
                GroupEvent::SendDone { msg_id } => self.completed.push((addr, msg_id)),
                GroupEvent::JoinFailed => {
                    // Try again through someone else.
                    self.base.procs[i].m = None;
                    self.spawn_joiner(run);
                    return Ok(());
                }
                GroupEvent::LeaveDone => self.base.procs[i].done = true,
                GroupEvent::JoinDone { seq } => self.base.procs[i].joined_at = seq,
                GroupEvent::Expelled => {
                    // Left out of a rebuilt view: to the group it failed (what it delivered
                    // alone may be lost, as for a crash); it starts again as a new process.
                    let log = std::mem::take(&mut self.base.procs[i].log);
                    self.crashed_logs.push((addr, log));
                    self.base.churn.expulsions += 1;
                    self.spawn_joiner(run);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn workload(&mut self, run: &mut Run) -> Result<(), Violation> {
        let now = run.now;
        for i in 0..self.base.procs.len() {
            let p = &mut self.base.procs[i];
            let Some(m) = p.m.as_mut() else {
                continue;
            };
            if m.state() == State::Normal
                && !p.leaving
                && p.sends_left > 0
                && run.ns() >= p.next_send_at
            {
                let k = (self.opts.messages_per_member - p.sends_left + 1) as u64;
                let payload = payload_for(p.addr, k);
                // A refused send (queue full, too few members for r) is tried again later.
                if let Ok(id) = m.send(now, &payload) {
                    p.sends_left -= 1;
                    self.sent.insert((p.addr, id), Digest::of(&payload));
                }
                p.next_send_at = run.ns() + self.base.rng.below(8_000_000);
                self.drain(run, i)?;
            }
        }
        Ok(())
    }

    /// What a crashed process delivered is checked with the survivors' at the end.
    fn crashed(&mut self, i: usize) {
        let log = std::mem::take(&mut self.base.procs[i].log);
        self.crashed_logs.push((self.base.procs[i].addr, log));
    }

    fn done(&self, _run: &Run) -> bool {
        self.converged()
    }

    fn stalled(&self, run: &Run) -> String {
        let due = self.base.due(run, |p, m| {
            format!(
                "{} {:?} seqr={} {}",
                p.addr,
                m.state(),
                m.is_sequencer(),
                m.debug_timers()
            )
        });
        due.join("; ")
    }

    fn finish(mut self, run: &mut Run) -> Result<GroupSimReport, Violation> {
        self.check_order(run)?;
        self.check_final(run)?;
        let counters = || {
            self.base
                .procs
                .iter()
                .filter_map(|p| p.m.as_ref())
                .map(|m| m.counters())
        };
        let cfg = &self.cfg;
        Ok(GroupSimReport {
            seed: run.seed,
            config: format!(
                "r={} method={:?} pack={:?}",
                cfg.resilience, cfg.method, cfg.pack
            ),
            faults: self.base.faults.clone(),
            net: run.net.counters.clone(),
            sent: self.sent.len() as u64,
            completed: self.completed.len() as u64,
            delivered: counters().map(|c| c.delivered).sum(),
            crashes: self.base.churn.crashes,
            leaves: self.base.churn.leaves,
            joins: self.base.churn.joins,
            partitions: run.faults.cuts,
            clogs: run.faults.clogged,
            resets: counters().map(|c| c.resets_completed).sum(),
            final_members: self.live().count(),
            highest_seq: self.global.keys().next_back().copied().unwrap_or(0),
            digest: run.digest.0,
        })
    }
}

impl Sim {
    /// Processes the group lost: crashed, or left out of a rebuilt view.
    fn failures(&self) -> u32 {
        self.base.churn.crashes + self.base.churn.expulsions
    }

    fn describe(&self, run: &Run) -> String {
        format!(
            "r={} method={:?} pack={:?} crashes {} leaves {} joins {} partitions {} clogs {}",
            self.cfg.resilience,
            self.cfg.method,
            self.cfg.pack,
            self.base.churn.crashes,
            self.base.churn.leaves,
            self.base.churn.joins,
            run.faults.cuts,
            run.faults.clogged
        )
    }

    fn check_delivery(
        &mut self,
        run: &mut Run,
        i: usize,
        seq: u64,
        sender: Address,
        rec: Rec,
    ) -> Result<(), Violation> {
        let who = self.base.procs[i].addr;
        if run.trace > 0 {
            eprintln!("{:>10} {who} deliver {seq} {rec:?}", run.ns());
        }
        run.digest.add_u64(seq);
        let p = &mut self.base.procs[i];
        if p.last_seq != 0 && seq != p.last_seq + 1 {
            return Err(run.fail(format!(
                "{who} delivered seq {seq} after {}",
                self.base.procs[i].last_seq
            )));
        }
        p.last_seq = seq;
        if let Rec::Msg(s, id, h) = &rec {
            if !p.seen.insert((*s, *id)) {
                return Err(run.fail(format!("{who} delivered {s}#{id} twice")));
            }
            // The first message seen from a sender may follow ones ordered before this process
            // joined; after that, each is the next.
            let prev = p.last_id.insert(*s, *id).unwrap_or(*id - 1);
            if *id != prev + 1 {
                return Err(run.fail(format!("{who}: FIFO from {s} broken: {id} after {prev}")));
            }
            match self.sent.get(&(*s, *id)) {
                Some(x) if x == h => {}
                Some(_) => return Err(run.fail(format!("{who} delivered {s}#{id} altered"))),
                None => return Err(run.fail(format!("{who} delivered {s}#{id}, never sent"))),
            }
            let _ = sender;
        }
        self.base.procs[i].log.push((seq, rec));
        Ok(())
    }

    /// Total order and agreement. Processes that did not crash agree on the record at every
    /// sequence number. With at most r crashes, so do the crashed ones. With more, a crashed
    /// process may have delivered records no survivor got, and the survivors renumber what
    /// follows (total order is not uniform beyond r crashes, as in paper 003).
    fn check_order(&mut self, run: &mut Run) -> Result<(), Violation> {
        // Processes that left are checked with the failed ones, below: a leaver stops taking
        // part, so what it delivered is exactly as durable as a crashed process's deliveries
        // (held by r more members, and by one even with r = 0).
        for p in self.base.procs.iter().filter(|p| !p.done) {
            for (seq, rec) in &p.log {
                match self.global.get(seq) {
                    Some(r) if r != rec => {
                        return Err(run.fail(format!(
                            "total order: {} delivered {rec:?} at seq {seq}, others {r:?}",
                            p.addr
                        )))
                    }
                    Some(_) => {}
                    None => {
                        self.global.insert(*seq, rec.clone());
                    }
                }
            }
        }
        // With at most r crashes, nothing a crashed process delivered was renumbered: where a
        // survivor delivered the same sequence number, it delivered the same record. (That
        // nothing it delivered is lost is the no-loss check on completed sends.)
        let r = self.cfg.resilience as u32;
        let left = self
            .base
            .procs
            .iter()
            .filter(|p| p.done)
            .map(|p| (p.addr, &p.log));
        if self.failures() <= r {
            for (who, log) in self.crashed_logs.iter().map(|(a, l)| (*a, l)).chain(left) {
                for (seq, rec) in log {
                    if let Some(other) = self.global.get(seq).filter(|&o| o != rec) {
                        return Err(run.fail(format!(
                            "failed {who} delivered {rec:?} at {seq}; the survivors have {other:?} ({} failures, r = {r})",
                            self.failures()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    fn members_in_normal(&self) -> Vec<usize> {
        self.live()
            .filter(|&i| {
                self.base.procs[i]
                    .m
                    .as_ref()
                    .is_some_and(|m| m.state() == State::Normal)
            })
            .collect()
    }

    fn converged(&self) -> bool {
        let live: Vec<usize> = self.live().collect();
        if live.is_empty() {
            return true;
        }
        let normal = self.members_in_normal();
        if normal.len() != live.len() {
            return false;
        }
        let first = self.base.procs[normal[0]].m.as_ref().expect("live");
        let info = first.info();
        normal.iter().all(|&i| {
            let m = self.base.procs[i].m.as_ref().expect("live");
            let x = m.info();
            x.epoch == info.epoch
                && x.members == info.members
                && x.consumed_upto == info.consumed_upto
                && x.received_upto == info.received_upto
                && m.sends_pending() == 0
                && !m.has_delivery()
        }) && info.members.len() == normal.len()
    }

    /// Whether the group cannot recover: fewer than a majority of its newest committed view
    /// (as the live processes know it) are still running. The protocol must then block, not
    /// converge. The crash schedule avoids this, but a partition can keep a rebuild from
    /// finishing between two crashes it allowed.
    ///
    /// Committed, not installed: a rebuild is always a round on the last view its coordinator
    /// knows committed (its View record applied), and needs a majority of that view's list, as
    /// in Viewstamped Replication. A newer view that never committed is never rebuilt itself
    /// (a majority of it need not meet the quorum of a sibling made from the same committed
    /// view, which split the group in seed 131578), so the group blocks once the committed
    /// view's majority is gone even if the uncommitted one's survives. The newest committed
    /// view the live processes know of is the one whose members refuse rounds on older ones;
    /// of its lists, the most recent counts (a coordinator with an older one gives way, see
    /// `decide_view`).
    fn majority_lost(&self) -> bool {
        let newest = self
            .live()
            .filter_map(|i| self.base.procs[i].m.as_ref())
            .map(|m| m.committed_view())
            .max_by_key(|v| (v.0, v.1));
        let Some((_, _, view)) = newest else {
            return false;
        };
        let running = view
            .iter()
            .filter(|&&a| self.live().any(|i| self.base.procs[i].addr == a))
            .count();
        running * 2 <= view.len()
    }

    fn check_final(&self, run: &Run) -> Result<(), Violation> {
        if !self.converged() && self.majority_lost() {
            // Blocked, as it must be; what a recovery would have delivered cannot be checked.
            return Ok(());
        }
        if !self.converged() {
            let states: Vec<String> = self
                .live()
                .map(|i| {
                    let m = self.base.procs[i].m.as_ref().expect("live");
                    let x = m.info();
                    format!(
                        "{}: {:?} epoch {} members {:?} seq {} recv {} consumed {} pending {}\n      {}",
                        self.base.procs[i].addr,
                        x.state,
                        x.epoch,
                        x.members.iter().map(|a| a.site).collect::<Vec<_>>(),
                        x.sequencer,
                        x.received_upto,
                        x.consumed_upto,
                        m.sends_pending(),
                        m.debug_timers()
                    )
                })
                .collect();
            return Err(run.fail(format!(
                "no convergence after healing ({}):\n  {}",
                self.describe(run),
                states.join("\n  ")
            )));
        }
        // No loss: a completed send is delivered by every process still in the group that
        // was a member when it was ordered, if its sender is still in the group or at most r
        // processes crashed.
        let r = self.cfg.resilience as u32;
        let live: HashSet<Address> = self.live().map(|i| self.base.procs[i].addr).collect();
        let mut ordered_at: HashMap<(Address, u64), u64> = HashMap::new();
        let left = self.base.procs.iter().filter(|p| p.done).map(|p| &p.log);
        let crashed = self
            .crashed_logs
            .iter()
            .map(|(_, l)| l)
            .chain(left)
            .flat_map(|l| l.iter());
        for (q, rec) in self.global.iter().chain(crashed.map(|(q, r)| (q, r))) {
            if let Rec::Msg(a, id, _) = rec {
                ordered_at.entry((*a, *id)).or_insert(*q);
            }
        }
        for (s, id) in &self.completed {
            if self.failures() > r && !live.contains(s) {
                continue;
            }
            let Some(&q) = ordered_at.get(&(*s, *id)) else {
                return Err(run.fail(format!("completed send {s}#{id} delivered nowhere")));
            };
            for i in self.live() {
                let p = &self.base.procs[i];
                if p.joined_at < q && !p.seen.contains(&(*s, *id)) {
                    return Err(run.fail(format!(
                        "completed send {s}#{id} (seq {q}) lost: {} never delivered it ({} failures, r = {r})",
                        p.addr,
                        self.failures()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// For the simulator's `NodeId` users: which slot an address is (the site number).
pub fn slot(a: Address) -> NodeId {
    a.site as usize
}
