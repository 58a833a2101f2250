//! CRMem in the mirror configuration (`txcast_crmem::Node`) over reliable links under
//! simulated faults, running a small TpcB: clients at the primary move money between an
//! account, its teller and its branch and record it in a history ring with a running total,
//! with their locks taken in random order (so deadlocks happen and deadlines break them),
//! some aborting on purpose, some auditing the branches. Crashes restart a node as a new
//! process that recovers from the primary; a crashed primary is replaced by its first backup,
//! the others resync from it. The world plays the failure detector: it tells the survivors
//! of a crash when it happens (a second crash while a node is still recovering would be a
//! double failure, which mirroring does not cover: it is skipped and counted).
//!
//! Checked: commit numbers are consecutive; every acknowledged commit survives a failover
//! (the successor's log reaches it); every replica's memory is, at each failover and at the
//! end, exactly the committed transactions replayed in commit order (so aborts leave no trace
//! and no update is lost: serializability); audits see the TpcB invariant; at the end the
//! invariant holds everywhere (accounts = tellers = branches = history total), all replicas
//! agree, and every client finished its transactions (liveness after healing).

use crate::crmem_disk::SimDisk;
use crate::harness::{self, min_opt, Plan, Run, RunOptions, Violation, World};
use crate::link_sim::LinkNode;
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{Node as SimNodeTrait, NodeId};
use std::collections::{HashMap, VecDeque};
use txcast_crmem::{
    Config, Counters, CrError, Event, Lock, LockMapping, Mode, Node, Role, SegmentId, TxnId,
};
use txcast_proto::link::{LinkConfig, LinkSendError};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;

pub(crate) const ACCOUNTS: u32 = 1000;
pub(crate) const TELLERS: u32 = 64;
pub(crate) const BRANCHES: u32 = 8;
pub(crate) const HISTORY: u32 = 100;
pub(crate) const RECORD: u32 = 100;
pub(crate) const HISTORY_RECORD: u32 = 50;
/// The history ring's tail: count of transactions, then their total.
pub(crate) const TAIL: u32 = HISTORY * HISTORY_RECORD;
pub(crate) const ACC: SegmentId = 0;
pub(crate) const TEL: SegmentId = 1;
pub(crate) const BR: SegmentId = 2;
pub(crate) const HIST: SegmentId = 3;
pub(crate) const STEPS_MAX: u64 = 20_000_000;

/// Knobs of one CRMem simulation.
#[derive(Clone, Debug)]
pub struct CrmemSimOptions {
    /// The primary and its backups.
    pub nodes: usize,
    /// Transactions each client runs to the end (commit or its own abort).
    pub txns_per_client: u32,
    /// The phases, and the faults the seed may draw.
    pub run: RunOptions,
    /// The symmetric configuration (crmem_sym_sim.rs) instead of the mirror.
    pub symmetric: bool,
    /// Mirror only: the primary logs to a simulated disk (group commit), and every node
    /// may crash at once; the node whose disk reaches furthest restarts as primary from it.
    pub disk: bool,
    /// Symmetric only: whether the nodes keep the locks their homes grant them
    /// (`Config::cache_locks`); `None`, half the seeds (by the seed).
    pub cache_locks: Option<bool>,
    /// Both: the nodes' `Config::bundle_bytes`; `None`, drawn by the seed (a quarter of the
    /// seeds send each message alone, a quarter bundle in 256 bytes, half in the default,
    /// the mirror's WRITE parts of 64 bytes in half of those: a commit in several parts,
    /// bundled).
    pub bundle_bytes: Option<usize>,
}

impl CrmemSimOptions {
    /// The nodes' bundle bound for `seed`, and the mirror's `message_bytes` (`None`: the
    /// default).
    pub(crate) fn bundle_bytes(&self, seed: u64) -> (usize, Option<usize>) {
        let draw = seed.wrapping_mul(0xA24B_AED4_963E_E407) >> 62;
        let bound = match draw {
            0 => 0,
            1 => 256,
            _ => txcast_crmem::msg::BUNDLE_BYTES,
        };
        match self.bundle_bytes {
            Some(b) => (b, None),
            None => (bound, (draw == 2).then_some(64)),
        }
    }

    /// A client's pause between transactions, drawn below this: its transactions spread
    /// over the safety phase, where the crashes are.
    pub(crate) fn think_ns(&self) -> u64 {
        (2 * self.run.safety_ns / self.txns_per_client.max(1) as u64).max(1)
    }
}

impl Default for CrmemSimOptions {
    fn default() -> Self {
        CrmemSimOptions {
            nodes: 3,
            txns_per_client: 60,
            run: RunOptions::default(),
            symmetric: false,
            disk: false,
            cache_locks: None,
            bundle_bytes: None,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct CrmemSimReport {
    pub seed: u64,
    pub faults: FaultConfig,
    pub clients: usize,
    pub committed: u64,
    pub aborted_on_purpose: u64,
    pub timeouts: u64,
    pub audits: u64,
    pub failovers: u64,
    pub restarts: u64,
    pub skipped_crashes: u64,
    /// Crashes of every node at once (`disk`), and the disk syncs.
    pub total_crashes: u64,
    pub disk_syncs: u64,
    pub net: NetCounters,
    pub nodes: Counters,
    pub end_ns: u64,
    pub digest: u64,
}

/// A committed transaction's effect, to replay.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Delta {
    pub account: u32,
    pub teller: u32,
    pub branch: u32,
    pub amount: i64,
}

pub(crate) fn i64_at(m: &[u8], at: u32) -> i64 {
    i64::from_le_bytes(m[at as usize..at as usize + 8].try_into().expect("8 bytes"))
}

pub(crate) fn add_i64(m: &mut [u8], at: u32, d: i64) {
    let v = i64_at(m, at).wrapping_add(d);
    m[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
}

/// The segments as a fresh replica has them.
fn segments(n: &mut Node) {
    let rec = |per_lock| LockMapping::Records {
        record_bytes: RECORD,
        per_lock,
    };
    n.add_segment((ACCOUNTS * RECORD) as usize, rec(10))
        .expect("accounts");
    n.add_segment((TELLERS * RECORD) as usize, rec(2))
        .expect("tellers");
    n.add_segment((BRANCHES * RECORD) as usize, rec(1))
        .expect("branches");
    n.add_segment(
        (TAIL + 16) as usize,
        LockMapping::Records {
            record_bytes: HISTORY_RECORD,
            per_lock: 1,
        },
    )
    .expect("history");
}

/// The four segments after replaying `deltas` from zero.
pub(crate) fn replay(deltas: &[Delta]) -> [Vec<u8>; 4] {
    let mut s = [
        vec![0u8; (ACCOUNTS * RECORD) as usize],
        vec![0u8; (TELLERS * RECORD) as usize],
        vec![0u8; (BRANCHES * RECORD) as usize],
        vec![0u8; (TAIL + 16) as usize],
    ];
    for d in deltas {
        add_i64(&mut s[0], d.account * RECORD, d.amount);
        add_i64(&mut s[1], d.teller * RECORD, d.amount);
        add_i64(&mut s[2], d.branch * RECORD, d.amount);
        let count = i64_at(&s[3], TAIL) as u32;
        let slot = (count % HISTORY) * HISTORY_RECORD;
        write_history(&mut s[3], slot, d);
        add_i64(&mut s[3], TAIL, 1);
        add_i64(&mut s[3], TAIL + 8, d.amount);
    }
    s
}

pub(crate) fn write_history(h: &mut [u8], slot: u32, d: &Delta) {
    let s = slot as usize;
    h[s..s + 8].copy_from_slice(&d.amount.to_le_bytes());
    h[s + 8..s + 12].copy_from_slice(&d.account.to_le_bytes());
    h[s + 12..s + 16].copy_from_slice(&d.teller.to_le_bytes());
    h[s + 16..s + 20].copy_from_slice(&d.branch.to_le_bytes());
}

/// A replica's TpcB invariant: accounts, tellers, branches and the history total agree.
fn invariant(n: &Node) -> Result<(), String> {
    let sum = |s: SegmentId, count: u32| -> i64 {
        let m = n.segment(s).expect("segment");
        (0..count).map(|i| i64_at(m, i * RECORD)).sum()
    };
    let (a, t, b) = (sum(ACC, ACCOUNTS), sum(TEL, TELLERS), sum(BR, BRANCHES));
    let h = i64_at(n.segment(HIST).expect("history"), TAIL + 8);
    if a == t && t == b && b == h {
        Ok(())
    } else {
        Err(format!(
            "TpcB invariant: accounts {a}, tellers {t}, branches {b}, history {h}"
        ))
    }
}

/// A client's next transaction: whether it audits (the branches and the history's count),
/// whether it aborts on purpose, its transfer (none for an audit), and the ranges it takes,
/// in order, into `order` (the transfer's three in random order, then the history's count).
pub(crate) fn draw_txn(
    rng: &mut Rng,
    order: &mut Vec<(SegmentId, u32, u32)>,
) -> (bool, bool, Option<Delta>) {
    let audit = rng.chance(0.1);
    let abort_on_purpose = !audit && rng.chance(0.05);
    order.clear();
    if audit {
        order.push((BR, 0, BRANCHES * RECORD));
        order.push((HIST, TAIL, 16));
        return (audit, abort_on_purpose, None);
    }
    let account = rng.below(ACCOUNTS as u64) as u32;
    let teller = rng.below(TELLERS as u64) as u32;
    let delta = Delta {
        account,
        teller,
        branch: teller % BRANCHES,
        amount: rng.below(2_000) as i64 - 1_000,
    };
    let mut v = vec![
        (ACC, account * RECORD, RECORD),
        (TEL, teller * RECORD, RECORD),
        (BR, (teller % BRANCHES) * RECORD, RECORD),
    ];
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
    *order = v;
    order.push((HIST, TAIL, 16));
    (audit, abort_on_purpose, Some(delta))
}

/// Declares [`Core`] with the methods listed and implements it for each type listed by that
/// type's own methods of the same names and signatures.
macro_rules! core_trait {
    ([$($t:ty),+] $methods:tt) => {
        core_trait!(@trait $methods);
        $(core_trait!(@impl $t, $methods);)+
    };
    (@trait { $(
        fn $name:ident(&$r:ident $($s:ident)? $(, $a:ident: $at:ty)*) $(-> $ret:ty)?;
    )+ }) => {
        /// What a simulated node and its clients need of a CRMem core, mirror ([`Node`]) or
        /// symmetric ([`txcast_crmem::SymNode`]).
        pub(crate) trait Core {
            $(fn $name(&$r $($s)? $(, $a: $at)*) $(-> $ret)?;)+
        }
    };
    (@impl $t:ty, { $(
        fn $name:ident(&$r:ident $($s:ident)? $(, $a:ident: $at:ty)*) $(-> $ret:ty)?;
    )+ }) => {
        impl Core for $t {
            $(fn $name(&$r $($s)? $(, $a: $at)*) $(-> $ret)? {
                <$t>::$name(core_trait!(@self $r $($s)?) $(, $a)*)
            })+
        }
    };
    // The receiver's `self` (of `self` or `mut self`).
    (@self $s:ident) => { $s };
    (@self $m:ident $s:ident) => { $s };
}
core_trait!([Node, txcast_crmem::SymNode] {
    fn handle_message(&mut self, from: u16, bytes: &[u8]);
    fn poll_transmit(&mut self) -> Option<(u16, Vec<u8>)>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn set_range(&mut self, txn: TxnId, s: SegmentId, off: u32, len: u32, mode: Mode) -> Result<Lock, CrError>;
    fn range(&self, txn: TxnId, s: SegmentId, off: u32, len: u32) -> Result<&[u8], CrError>;
    fn range_mut(&mut self, txn: TxnId, s: SegmentId, off: u32, len: u32) -> Result<&mut [u8], CrError>;
    fn abort(&mut self, txn: TxnId) -> Result<(), CrError>;
    fn counters(&self) -> &Counters;
});

/// The start of a step: the links' and cores' due timeouts, then every node pumped.
pub(crate) fn tick<C: Core>(nodes: &mut [SimNode<C>], run: &Run) {
    let (n, now) = (nodes.len(), run.now);
    for nd in nodes.iter_mut() {
        if run.due(&nd.links) {
            nd.links.handle_timeout(now);
        }
        if nd.cr.poll_timeout().is_some_and(|t| t <= now) {
            nd.cr.handle_timeout(now);
        }
    }
    for (k, nd) in nodes.iter_mut().enumerate() {
        nd.pump(now, k, n);
    }
}

/// The end of a step: every node pumped, then what its links send on the network.
pub(crate) fn pump_and_transmit<C: Core>(nodes: &mut [SimNode<C>], run: &mut Run) {
    let (n, now) = (nodes.len(), run.now);
    for (k, nd) in nodes.iter_mut().enumerate() {
        nd.pump(now, k, n);
    }
    for (i, nd) in nodes.iter_mut().enumerate() {
        run.transmit(i, &mut nd.links);
    }
}

/// The earliest deadline of the nodes' links and cores.
pub(crate) fn nodes_wakeup<C: Core>(nodes: &[SimNode<C>]) -> Option<Instant> {
    let mut next = None;
    for nd in nodes {
        next = min_opt(next, nd.links.poll_timeout());
        next = min_opt(next, nd.cr.poll_timeout());
    }
    next
}

/// Nothing in any node's outbox or on any of its links.
pub(crate) fn nodes_idle<C>(nodes: &[SimNode<C>]) -> bool {
    let n = nodes.len();
    nodes.iter().all(|nd| nd.outbox.is_empty())
        && (0..n).all(|k| (0..n).all(|j| j == k || nodes[k].links.link_ref(j).is_idle()))
}

/// A node: its links and its CRMem core, and what the links would not take yet.
pub(crate) struct SimNode<C> {
    pub(crate) links: LinkNode,
    pub(crate) cr: C,
    pub(crate) outbox: VecDeque<(NodeId, Vec<u8>)>,
    /// Parts the core shipped to its disk log (`txcast_crmem::node::DISK`).
    pub(crate) disk_out: Vec<Vec<u8>>,
}

impl<C: Core> SimNode<C> {
    pub(crate) fn with_core(
        id: NodeId,
        n: usize,
        cfg: &LinkConfig,
        incarnation: u64,
        cr: C,
    ) -> SimNode<C> {
        SimNode {
            links: LinkNode::with_incarnation(id, n, cfg, incarnation),
            cr,
            outbox: VecDeque::new(),
            disk_out: Vec::new(),
        }
    }

    /// Link deliveries into the core, the core's messages into the links.
    pub(crate) fn pump(&mut self, now: Instant, me: NodeId, n: usize) {
        for i in (0..n).filter(|&i| i != me) {
            let cr = &mut self.cr;
            while self
                .links
                .link(i)
                .poll_delivery(|m| cr.handle_message(i as u16, m))
                .is_some()
            {}
        }
        while let Some(m) = self.cr.poll_transmit() {
            if m.0 == txcast_crmem::node::DISK {
                self.disk_out.push(m.1);
            } else {
                self.outbox.push_back((m.0 as NodeId, m.1));
            }
        }
        while let Some((to, m)) = self.outbox.front() {
            match self.links.link(*to).send(now, m) {
                Err(LinkSendError::Full) => break,
                _ => {
                    self.outbox.pop_front();
                }
            }
        }
    }
}

/// A mirror node with the TpcB segments.
fn mirror_node(
    id: NodeId,
    n: usize,
    cfg: &LinkConfig,
    incarnation: u64,
    role: Role,
    disk_log: bool,
    bundle: (usize, Option<usize>),
) -> SimNode<Node> {
    let mut cr = Node::new(
        Config {
            node: id as u16,
            incarnation,
            disk_log,
            // With a disk, write sets of two parts and more, so that a crash tears commits.
            message_bytes: if disk_log {
                160
            } else {
                bundle.1.unwrap_or(Config::default().message_bytes)
            },
            bundle_bytes: bundle.0,
            ..Config::default()
        },
        role,
    );
    segments(&mut cr);
    SimNode::with_core(id, n, cfg, incarnation, cr)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step<C> {
    /// Between transactions.
    Idle,
    /// Taking range `k` of the transaction's list.
    Take(usize),
    /// Waiting for the locks of range `k`.
    Wait(usize),
    /// Committed; waiting for the acknowledgement (the mirror: the commit number; the
    /// symmetric configuration: the index of the issued transaction).
    Committing(C),
}

/// A client: where it runs (`N`: its node in the symmetric configuration, nothing in the
/// mirror's, whose clients run at the primary) and its transaction.
pub(crate) struct Client<C, N> {
    pub(crate) node: N,
    pub(crate) txn: Option<TxnId>,
    pub(crate) step: Step<C>,
    pub(crate) next_at: Instant,
    pub(crate) done: u32,
    pub(crate) audit: bool,
    pub(crate) abort_on_purpose: bool,
    /// The transaction's ranges in the order it takes them: (segment, offset, len).
    pub(crate) order: Vec<(SegmentId, u32, u32)>,
    pub(crate) delta: Delta,
}

impl<C, N> Client<C, N> {
    /// What the client does once its pause is over: start a transaction (`Some(true)`, then
    /// take its first ranges) or take its next ranges (`Some(false)`); `None` while it waits
    /// for locks or a commit, or is done.
    pub(crate) fn next_move(&self, txns_per_client: u32) -> Option<bool> {
        match self.step {
            Step::Idle if self.done < txns_per_client => Some(true),
            Step::Take(_) => Some(false),
            _ => None,
        }
    }

    pub(crate) fn new(node: N) -> Client<C, N> {
        Client {
            node,
            txn: None,
            step: Step::Idle,
            next_at: Instant::ZERO,
            done: 0,
            audit: false,
            abort_on_purpose: false,
            order: Vec::new(),
            delta: Delta {
                account: 0,
                teller: 0,
                branch: 0,
                amount: 0,
            },
        }
    }
}

impl<C, N> Client<C, N> {
    /// Transaction `txn` has begun: what it does is drawn, and it takes its first range next.
    pub(crate) fn begun(&mut self, txn: TxnId, rng: &mut Rng) {
        self.txn = Some(txn);
        let (audit, abort_on_purpose, delta) = draw_txn(rng, &mut self.order);
        (self.audit, self.abort_on_purpose) = (audit, abort_on_purpose);
        if let Some(d) = delta {
            self.delta = d;
        }
        self.step = Step::Take(0);
    }

    /// Takes the client's ranges of `txn` at `cr` as far as it can now: `Ok(true)` once it
    /// holds them all, `Ok(false)` while it works a while or waits for a lock. `taken` sees
    /// each answer, with the range's number and segment (for the trace).
    pub(crate) fn take_ranges<K: Core>(
        &mut self,
        cr: &mut K,
        txn: TxnId,
        rng: &mut Rng,
        run: &Run,
        mut taken: impl FnMut(usize, SegmentId, &Result<Lock, CrError>),
    ) -> Result<bool, CrError> {
        loop {
            let Step::Take(k) = self.step else {
                return Ok(false);
            };
            if k >= self.order.len() {
                return Ok(true);
            }
            let (s, off, len) = self.order[k];
            let mode = if self.audit { Mode::Read } else { Mode::Write };
            let got = cr.set_range(txn, s, off, len, mode);
            taken(k, s, &got);
            match got? {
                Lock::Granted => {
                    self.step = Step::Take(k + 1);
                    // Mostly the client works a while before its next range, so
                    // transactions overlap and contend.
                    if rng.chance(0.7) {
                        self.next_at = Instant(run.ns() + 1 + rng.below(300_000));
                        return Ok(false);
                    }
                }
                Lock::Waiting => {
                    self.step = Step::Wait(k);
                    return Ok(false);
                }
            }
        }
    }

    /// Every range of `txn` is held at `cr`: the TpcB work. An audit checks that the branches
    /// sum to the history's total (`at` names where, in the violation); a transfer moves its
    /// amount through account, teller and branch and takes the next history slot. Returns the
    /// history count the transfer read (0 for an audit), or `None` for a transaction that
    /// aborts on purpose: it is aborted, and the client is done with it.
    pub(crate) fn work<K: Core>(
        &mut self,
        cr: &mut K,
        txn: TxnId,
        run: &Run,
        at: &str,
    ) -> Result<Option<u32>, Violation> {
        let mut count = 0;
        if self.audit {
            let b = cr.range(txn, BR, 0, BRANCHES * RECORD).expect("declared");
            let sum: i64 = (0..BRANCHES).map(|i| i64_at(b, i * RECORD)).sum();
            let total = i64_at(cr.range(txn, HIST, TAIL, 16).expect("declared"), 8);
            if sum != total {
                return Err(run.fail(format!(
                    "audit{at}: branches sum to {sum}, the history total is {total}"
                )));
            }
        } else {
            let d = self.delta;
            for (s, rec) in [(ACC, d.account), (TEL, d.teller), (BR, d.branch)] {
                let m = cr
                    .range_mut(txn, s, rec * RECORD, RECORD)
                    .expect("declared");
                add_i64(m, 0, d.amount);
            }
            let tail = cr.range_mut(txn, HIST, TAIL, 16).expect("declared");
            count = i64_at(tail, 0) as u32;
            add_i64(tail, 0, 1);
            add_i64(tail, 8, d.amount);
            let slot = (count % HISTORY) * HISTORY_RECORD;
            if cr.set_range(txn, HIST, slot, HISTORY_RECORD, Mode::Write) != Ok(Lock::Granted) {
                // The slot's lock is free: only the holder of the tail's lock takes slots.
                return Err(run.fail("a history slot's lock was not free"));
            }
            write_history(
                cr.range_mut(txn, HIST, slot, HISTORY_RECORD)
                    .expect("declared"),
                0,
                &d,
            );
        }
        if self.abort_on_purpose {
            cr.abort(txn)
                .map_err(|e| run.fail(format!("abort refused: {e}")))?;
            self.txn = None;
            self.step = Step::Idle;
            self.done += 1;
            return Ok(None);
        }
        Ok(Some(count))
    }

    /// A lock the client waited for is granted: it takes its next range.
    pub(crate) fn granted(&mut self, run: &Run) -> Result<(), Violation> {
        let Step::Wait(i) = self.step else {
            return Err(run.fail("granted a transaction that was not waiting"));
        };
        self.step = Step::Take(i + 1);
        Ok(())
    }

    /// The transaction is over, `committed` or aborted: the client is idle until `next_at`.
    pub(crate) fn ended(&mut self, committed: bool, next_at: Instant) {
        self.txn = None;
        self.step = Step::Idle;
        self.done += u32::from(committed);
        self.next_at = next_at;
    }

    /// The commit of `txn` found the log full (it waits for the backups): the transaction is
    /// given up, and the client tries again a little later.
    pub(crate) fn log_full<K: Core>(
        &mut self,
        cr: &mut K,
        txn: TxnId,
        run: &Run,
    ) -> Result<(), Violation> {
        cr.abort(txn)
            .map_err(|e| run.fail(format!("abort refused: {e}")))?;
        self.txn = None;
        self.step = Step::Idle;
        self.next_at = Instant(run.ns() + 1_000_000);
        Ok(())
    }
}

/// The earliest time a client that starts or takes a range wants to go on, folded into
/// `next`.
pub(crate) fn clients_wakeup<C, N>(
    clients: &[Client<C, N>],
    txns_per_client: u32,
    mut next: Option<Instant>,
) -> Option<Instant> {
    for cl in clients {
        if cl.next_move(txns_per_client).is_some() {
            next = min_opt(next, Some(cl.next_at));
        }
    }
    next
}

/// Each client of world `w` (its `clients`) whose pause is over, while `serving`, starts its
/// next transaction (`start`, then its first ranges) or takes its next ranges (`advance`),
/// in client order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn move_clients<W, C, N>(
    w: &mut W,
    run: &mut Run,
    txns_per_client: u32,
    clients: impl Fn(&W) -> &[Client<C, N>],
    serving: impl Fn(&W) -> bool,
    start: impl Fn(&mut W, &mut Run, usize) -> Result<(), Violation>,
    advance: impl Fn(&mut W, &mut Run, usize) -> Result<(), Violation>,
) -> Result<(), Violation> {
    for c in 0..clients(w).len() {
        let cl = &clients(w)[c];
        if cl.next_at > run.now || !serving(w) {
            continue;
        }
        let Some(first) = cl.next_move(txns_per_client) else {
            continue;
        };
        if first {
            start(w, run, c)?;
        }
        advance(w, run, c)?;
    }
    Ok(())
}

/// A CRMem world's start, drawn from its seed: the generator, the fault mix, the link
/// configuration, how many nodes and clients, and the plan.
pub(crate) struct SeedStart {
    pub(crate) rng: Rng,
    pub(crate) faults: FaultConfig,
    pub(crate) cfg: LinkConfig,
    pub(crate) n: usize,
    pub(crate) clients: usize,
    pub(crate) plan: Plan,
}

/// Draws `seed`'s start as both configurations do: the faults, the clients, the restarts,
/// then the network's generator. `opts.nodes` is clamped to 2..=`nodes_max`; `replay`
/// gives the options beyond `--seed` for that many nodes.
pub(crate) fn seed_start(
    seed: u64,
    opts: &CrmemSimOptions,
    nodes_max: usize,
    replay: impl FnOnce(usize) -> String,
) -> SeedStart {
    let mut rng = Rng::new(seed);
    let faults = opts.run.fault_config(seed, &mut rng);
    let cfg = LinkConfig {
        message_bytes_max: txcast_crmem::MESSAGE_BYTES_MAX,
        ..LinkConfig::default()
    };
    let n = opts.nodes.clamp(2, nodes_max);
    let clients = 1 + rng.below(8) as usize;
    let restarts = opts.run.restarts(&mut rng, 0.6, 3, n);
    let plan = Plan {
        steps_max: Some(STEPS_MAX),
        buf_bytes: cfg.packet_bytes_max,
        replay: replay(n),
        ..opts.run.plan(
            "crmem",
            seed,
            Network::new(n, faults.clone(), rng.fork()),
            restarts,
        )
    };
    SeedStart {
        rng,
        faults,
        cfg,
        n,
        clients,
        plan,
    }
}

/// What both configurations count for the report.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) aborted_on_purpose: u64,
    pub(crate) timeouts: u64,
    pub(crate) audits: u64,
    pub(crate) restarts: u64,
    /// Crashes the world skipped (ones its replication does not cover).
    pub(crate) skipped: u64,
    /// The counters of node processes that crashed.
    pub(crate) counters: Counters,
}

impl Tally {
    /// The report at the end of `run`, with the counters of `nodes` added; the world fills in
    /// `clients`, `committed`, `failovers`, `total_crashes` and `disk_syncs` (0 here).
    pub(crate) fn report<C: Core>(
        mut self,
        run: &mut Run,
        faults: FaultConfig,
        nodes: &[SimNode<C>],
    ) -> CrmemSimReport {
        for nd in nodes {
            add_counters(&mut self.counters, nd.cr.counters());
        }
        CrmemSimReport {
            seed: run.seed,
            faults,
            clients: 0,
            committed: 0,
            aborted_on_purpose: self.aborted_on_purpose,
            timeouts: self.timeouts,
            audits: self.audits,
            failovers: 0,
            restarts: self.restarts,
            skipped_crashes: self.skipped,
            total_crashes: 0,
            disk_syncs: 0,
            net: run.net.counters.clone(),
            nodes: self.counters,
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        }
    }
}

struct CrmemWorld {
    opts: CrmemSimOptions,
    /// The nodes' `Config::bundle_bytes` and `message_bytes`, restarted ones' too.
    bundle_bytes: (usize, Option<usize>),
    cfg: LinkConfig,
    rng: Rng,
    faults: FaultConfig,
    nodes: Vec<SimNode<Node>>,
    incarnation: Vec<u64>,
    primary: NodeId,
    clients: Vec<Client<u64, ()>>,
    /// Committed write transactions by commit number (index = seq - 1).
    log: Vec<Delta>,
    /// The highest commit number whose completion a client heard.
    acked: u64,
    /// Commit numbers of transactions in flight: txn -> seq.
    in_flight: HashMap<TxnId, u64>,
    tally: Tally,
    failovers: u64,
    /// Each node's disk log directory (`disk`).
    disks: Vec<SimDisk>,
    /// When every node crashes at once (`disk`), if it does.
    total_crash_at: Option<u64>,
    /// The commits as they stood when each node last stopped being primary (`disk`): what
    /// its log may restore.
    primary_logs: Vec<Option<Vec<Delta>>>,
    total_crashes: u64,
}

/// Runs one seed: its report, or the first rule broken.
pub fn run_crmem(seed: u64, opts: &CrmemSimOptions) -> Result<CrmemSimReport, Violation> {
    if opts.symmetric {
        return crate::crmem_sym_sim::run_symmetric(seed, opts);
    }
    let SeedStart {
        mut rng,
        faults,
        cfg,
        n,
        clients,
        plan,
    } = seed_start(seed, opts, 5, |_| {
        if opts.disk {
            " --disk".into()
        } else {
            String::new()
        }
    });
    let bundle_bytes = opts.bundle_bytes(seed);
    let nodes = (0..n)
        .map(|i| {
            let role = if i == 0 {
                Role::Primary {
                    backups: (1..n as u16).collect(),
                }
            } else {
                Role::Backup { primary: 0 }
            };
            mirror_node(i, n, &cfg, 1, role, opts.disk, bundle_bytes)
        })
        .collect();
    // Drawn after everything else, so that the runs without a disk stay as they were.
    let total_crash_at = (opts.disk && rng.chance(0.8)).then(|| rng.below(opts.run.safety_ns));
    let world = CrmemWorld {
        opts: opts.clone(),
        cfg,
        rng,
        faults,
        nodes,
        incarnation: vec![1; n],
        primary: 0,
        clients: (0..clients).map(|_| Client::new(())).collect(),
        log: Vec::new(),
        acked: 0,
        in_flight: HashMap::new(),
        tally: Tally::default(),
        failovers: 0,
        disks: (0..n).map(|_| SimDisk::default()).collect(),
        total_crash_at,
        primary_logs: vec![None; n],
        total_crashes: 0,
        bundle_bytes,
    };
    harness::run(world, plan)
}

impl CrmemWorld {
    fn n(&self) -> usize {
        self.nodes.len()
    }

    /// Checks that node `k`'s memory is the log replayed to its commit number.
    fn check_replica(&self, run: &Run, k: NodeId, why: &str) -> Result<(), Violation> {
        let cr = &self.nodes[k].cr;
        let seq = cr.seq() as usize;
        if seq > self.log.len() {
            return Err(run.fail(format!(
                "{why}: node {k} applied commit {seq}, the log has {}",
                self.log.len()
            )));
        }
        let want = replay(&self.log[..seq]);
        for (s, w) in want.iter().enumerate() {
            if cr.segment(s as SegmentId).expect("segment") != &w[..] {
                return Err(run.fail(format!(
                    "{why}: node {k}'s segment {s} is not the {seq} committed transactions replayed"
                )));
            }
        }
        invariant(cr).map_err(|e| run.fail(format!("{why}: node {k}: {e}")))
    }

    fn start(&mut self, run: &mut Run, c: usize) -> Result<(), Violation> {
        let now = run.now;
        let deadline = Instant(now.0 + 1_000_000 + self.rng.below(20_000_000));
        let p = self.primary;
        let Ok(txn) = self.nodes[p].cr.begin(deadline) else {
            return Err(run.fail("begin refused at the primary"));
        };
        self.clients[c].begun(txn, &mut self.rng);
        Ok(())
    }

    /// Client `c` goes as far as it can now.
    fn advance(&mut self, run: &mut Run, c: usize) -> Result<(), Violation> {
        let p = self.primary;
        let cl = &mut self.clients[c];
        let txn = cl.txn.expect("a running client has a transaction");
        match cl.take_ranges(&mut self.nodes[p].cr, txn, &mut self.rng, run, |_, _, _| {}) {
            Ok(true) => self.finish_txn(run, c, txn),
            Ok(false) => Ok(()),
            Err(e) => Err(run.fail(format!("set_range refused: {e}"))),
        }
    }

    /// Every range is held: do the work, then commit (or abort on purpose).
    fn finish_txn(&mut self, run: &mut Run, c: usize, txn: TxnId) -> Result<(), Violation> {
        let p = self.primary;
        let cr = &mut self.nodes[p].cr;
        let cl = &mut self.clients[c];
        let worked = cl.work(cr, txn, run, "")?;
        if cl.audit {
            self.tally.audits += 1;
        }
        if worked.is_none() {
            self.tally.aborted_on_purpose += 1;
            return Ok(());
        }
        match cr.commit(txn) {
            Ok(seq) => {
                if !cl.audit {
                    if seq != self.log.len() as u64 + 1 {
                        return Err(run.fail(format!(
                            "commit number {seq} after {}: not consecutive",
                            self.log.len()
                        )));
                    }
                    self.log.push(cl.delta);
                }
                self.in_flight.insert(txn, seq);
                cl.step = Step::Committing(seq);
                Ok(())
            }
            Err(CrError::LogFull) => cl.log_full(cr, txn, run),
            Err(e) => Err(run.fail(format!("commit refused: {e}"))),
        }
    }

    /// The primary's events, to the clients they concern.
    fn route_events(&mut self, run: &mut Run) -> Result<(), Violation> {
        for k in 0..self.n() {
            while let Some(e) = self.nodes[k].cr.poll_event() {
                if run.trace > 1 {
                    eprintln!("{:>10} node {k}: {e:?}", run.ns());
                }
                let c = match e {
                    Event::Granted(t) | Event::Committed(t) | Event::Aborted(t, _) => {
                        if k != self.primary {
                            return Err(run.fail(format!("node {k}, not the primary, said {e:?}")));
                        }
                        self.clients.iter().position(|cl| cl.txn == Some(t))
                    }
                    Event::Promoted if self.opts.disk => {
                        // The promoted backup's log starts from what it holds now.
                        // Its term: the time it became primary, after every earlier one.
                        let c = self.nodes[k].cr.checkpoint();
                        let term = run.ns().max(1);
                        self.disks[k].write_checkpoint(&mut self.rng, run.now, term, c);
                        None
                    }
                    _ => None,
                };
                let Some(c) = c else { continue };
                let think = self.opts.think_ns();
                let cl = &mut self.clients[c];
                match e {
                    Event::Granted(_) => {
                        cl.granted(run)?;
                        self.advance(run, c)?;
                    }
                    Event::Committed(t) => {
                        let seq = self.in_flight.remove(&t).unwrap_or(0);
                        self.acked = self.acked.max(seq);
                        cl.ended(true, Instant(run.ns() + self.rng.below(think)));
                    }
                    Event::Aborted(..) => {
                        self.tally.timeouts += 1;
                        cl.ended(false, Instant(run.ns() + self.rng.below(1_000_000)));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The disks whose sync is due sync, and their nodes hear how far; now and then the
    /// primary's log is replaced by a checkpoint, as the driver does when it grows.
    fn sync_disks(&mut self, run: &mut Run) {
        for k in 0..self.n() {
            let Some(mut seq) = self.disks[k].sync_if_due(run.now) else {
                continue;
            };
            if k == self.primary && self.rng.chance(0.1) {
                let c = self.nodes[k].cr.checkpoint();
                seq = seq.max(c.0);
                self.disks[k].checkpoint_now(c);
            }
            self.nodes[k].cr.disk_synced(seq);
        }
    }

    /// Every node crashes at once (a power failure): each disk keeps what was synced and a
    /// random part of the rest; the node whose disk has the highest term, then the most
    /// commits, comes back as primary from it, the others recover from it. It must hold
    /// every commit a client heard of, and exactly its history replayed to its number (the
    /// current one, or the one of its own time as primary if a successor's checkpoint never
    /// reached disk).
    fn total_crash(&mut self, run: &mut Run) -> Result<(), Violation> {
        let n = self.n();
        self.total_crashes += 1;
        for k in 0..n {
            self.disks[k].crash(&mut self.rng);
            add_counters(&mut self.tally.counters, self.nodes[k].cr.counters());
            self.incarnation[k] += 1;
        }
        // (term, commit, is the last primary), the node, the node restored.
        type Candidate = ((u64, u64, bool), NodeId, SimNode<Node>);
        let mut best: Option<Candidate> = None;
        for k in 0..n {
            let backups = (0..n as u16).filter(|&i| i as usize != k).collect();
            let mut nd = mirror_node(
                k,
                n,
                &self.cfg,
                self.incarnation[k],
                Role::Primary { backups },
                true,
                self.bundle_bytes,
            );
            let (term, seq) = match self.disks[k].restore_into(&mut nd.cr) {
                Ok(pos) => pos,
                Err(e) => return Err(run.fail(format!("total crash: node {k}'s disk: {e}"))),
            };
            let rank = (term, seq, k == self.primary);
            if best.as_ref().is_none_or(|b| rank > b.0) {
                best = Some((rank, k, nd));
            }
        }
        let ((term, seq, _), p, nd) = best.expect("at least two nodes");
        if run.trace > 0 {
            eprintln!(
                "{:>10} every node crashes; node {p} restarts as primary from its disk at term {term}, commit {seq}",
                run.ns()
            );
        }
        if seq < self.acked {
            return Err(run.fail(format!(
                "durability: after every node crashed, the furthest disk (node {p}) restores commits to {seq}, clients heard of {}",
                self.acked
            )));
        }
        if p != self.primary {
            match self.primary_logs[p].take() {
                Some(l) => self.log = l,
                None => {
                    return Err(run.fail(format!(
                        "total crash: node {p} restores its disk's log but was never primary"
                    )))
                }
            }
        }
        self.nodes[p] = nd;
        self.primary = p;
        self.check_replica(run, p, "restored from disk")?;
        // Commits the disks never got were never acknowledged: they are gone.
        self.log.truncate(seq as usize);
        for k in (0..n).filter(|&k| k != p) {
            self.nodes[k] = mirror_node(
                k,
                n,
                &self.cfg,
                self.incarnation[k],
                Role::Recovering { from: p as u16 },
                true,
                self.bundle_bytes,
            );
        }
        for cl in &mut self.clients {
            cl.txn = None;
            cl.step = Step::Idle;
        }
        self.in_flight.clear();
        Ok(())
    }

    /// Whether any node is still catching up.
    fn recovering(&self) -> bool {
        self.nodes
            .iter()
            .any(|nd| matches!(nd.cr.role(), Role::Recovering { .. }))
    }
}

impl World for CrmemWorld {
    type Report = CrmemSimReport;

    fn restart(&mut self, run: &mut Run, k: NodeId) {
        // Mirroring covers one failure at a time: a crash while a node still recovers (or
        // with no backup to take over) is skipped.
        let n = self.n();
        let successor =
            (0..n).find(|&i| i != k && matches!(self.nodes[i].cr.role(), Role::Backup { .. }));
        if self.recovering() || (k == self.primary && successor.is_none()) {
            self.tally.skipped += 1;
            return;
        }
        self.tally.restarts += 1;
        self.incarnation[k] += 1;
        let old = &self.nodes[k].cr;
        add_counters(&mut self.tally.counters, old.counters());
        if k == self.primary {
            if self.opts.disk {
                self.primary_logs[k] = Some(self.log.clone());
            }
            let s = successor.expect("checked above");
            let live: Vec<u16> = (0..n as u16).filter(|&i| i as usize != k).collect();
            for i in (0..n).filter(|&i| i != k) {
                self.nodes[i].cr.primary_down(s as u16, &live);
            }
            self.primary = s;
            self.failovers += 1;
            // Open transactions died with the primary; the clients start again there.
            for cl in &mut self.clients {
                cl.txn = None;
                cl.step = Step::Idle;
            }
            self.in_flight.clear();
        } else {
            let p = self.primary;
            self.nodes[p].cr.peer_down(k as u16);
        }
        let from = self.primary as u16;
        self.nodes[k] = mirror_node(
            k,
            n,
            &self.cfg,
            self.incarnation[k],
            Role::Recovering { from },
            self.opts.disk,
            self.bundle_bytes,
        );

        if run.trace > 0 {
            eprintln!(
                "{:>10} crash of node {k}; primary {}",
                run.ns(),
                self.primary
            );
        }
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.nodes[to].links.handle_message(run.now, &bytes);
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        if self.total_crash_at.is_some_and(|t| t <= run.ns()) {
            self.total_crash_at = None;
            self.total_crash(run)?;
        }
        tick(&mut self.nodes, run);
        if self.opts.disk {
            self.sync_disks(run);
        }
        // A failover is checked once the successor is the primary: it holds every commit a
        // client heard of, and exactly the log replayed to its number.
        let p = self.primary;
        if matches!(self.nodes[p].cr.role(), Role::Primary { .. }) {
            let seq = self.nodes[p].cr.seq();
            if (seq as usize) < self.log.len() {
                if seq < self.acked {
                    return Err(run.fail(format!(
                        "durability: the new primary {p} has commits to {seq}, clients heard of {}",
                        self.acked
                    )));
                }
                self.check_replica(run, p, "failover")?;
                // Commits it never got were never acknowledged: they are gone.
                self.log.truncate(seq as usize);
            }
        }
        self.route_events(run)?;
        let quota = self.opts.txns_per_client;
        move_clients(
            self,
            run,
            quota,
            |w| &w.clients,
            |w| matches!(w.nodes[w.primary].cr.role(), Role::Primary { .. }),
            Self::start,
            Self::advance,
        )?;
        self.route_events(run)?;
        pump_and_transmit(&mut self.nodes, run);
        for k in 0..self.n() {
            for part in std::mem::take(&mut self.nodes[k].disk_out) {
                self.disks[k].write(&mut self.rng, run.now, part, 1_000_000);
            }
        }
        Ok(())
    }

    fn next_wakeup(&self, run: &Run) -> Option<Instant> {
        let mut next = nodes_wakeup(&self.nodes);
        for d in &self.disks {
            next = min_opt(next, d.poll_timeout());
        }
        if let Some(t) = self.total_crash_at {
            next = min_opt(next, Some(Instant(t.max(run.ns()))));
        }
        clients_wakeup(&self.clients, self.opts.txns_per_client, next)
    }

    fn done(&self, run: &Run) -> bool {
        let seq = self.nodes[self.primary].cr.seq();
        run.healed
            && self
                .clients
                .iter()
                .all(|c| c.done >= self.opts.txns_per_client)
            && !self.recovering()
            && self.nodes.iter().all(|nd| nd.cr.seq() == seq)
            && nodes_idle(&self.nodes)
    }

    fn stalled(&self, _run: &Run) -> String {
        let clients: Vec<String> = self
            .clients
            .iter()
            .map(|c| format!("{}/{} {:?}", c.done, self.opts.txns_per_client, c.step))
            .collect();
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|nd| format!("{:?} seq {}", nd.cr.role(), nd.cr.seq()))
            .collect();
        format!(
            "primary {}; clients {}; nodes {}",
            self.primary,
            clients.join(", "),
            nodes.join("; ")
        )
    }

    fn finish(self, run: &mut Run) -> Result<CrmemSimReport, Violation> {
        for k in 0..self.n() {
            self.check_replica(run, k, "end")?;
            if self.nodes[k].cr.seq() != self.log.len() as u64 {
                return Err(run.fail(format!(
                    "end: node {k} at commit {}, the log has {}",
                    self.nodes[k].cr.seq(),
                    self.log.len()
                )));
            }
        }
        Ok(CrmemSimReport {
            clients: self.clients.len(),
            committed: self.log.len() as u64,
            failovers: self.failovers,
            total_crashes: self.total_crashes,
            disk_syncs: self.disks.iter().map(|d| d.syncs).sum(),
            ..self.tally.report(run, self.faults, &self.nodes)
        })
    }
}

pub(crate) fn add_counters(a: &mut Counters, b: &Counters) {
    a.begun += b.begun;
    a.committed += b.committed;
    a.aborted += b.aborted;
    a.lock_waits += b.lock_waits;
    a.lock_timeouts += b.lock_timeouts;
    a.applied += b.applied;
    a.refused += b.refused;
    a.duplicates += b.duplicates;
    a.degraded += b.degraded;
    a.caught_up += b.caught_up;
    a.snapshots_sent += b.snapshots_sent;
    a.undone += b.undone;
    a.apply_waits += b.apply_waits;
    a.commits_held += b.commits_held;
    a.cache_hits += b.cache_hits;
    a.recalls += b.recalls;
    a.bundles += b.bundles;
    a.bundled += b.bundled;
}
