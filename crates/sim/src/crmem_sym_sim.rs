//! CRMem in the symmetric configuration (`txcast_crmem::SymNode`) over reliable links under
//! simulated faults, running the small TpcB of crmem_sim.rs on every node at once: each
//! client is on one node and moves money between an account, its teller and its branch and
//! records it in the history ring, taking its locks in random order (local, then at the
//! segment's home), one range at a time or (half the transactions, by id) all in one
//! `set_ranges`; some abort on purpose, some audit the branches. The four segments have
//! their homes spread over the nodes. In half the seeds (by the seed) the nodes keep the
//! locks their homes grant them until recalled (`Config::cache_locks`). A crash restarts a node as a new process: the world
//! plays the failure detector and tells the survivors of a view without it at once, then,
//! when they all serve again, of a view with it back (the restarted node recovers from a
//! survivor's snapshot). A crash while a view change is still open would be a second failure,
//! which replication on every node covers but this world does not draw: it is skipped and
//! counted.
//!
//! Every write transaction reads and increments the history's count under its one lock, so
//! the count a transaction read is its place in the serial order. Checked:
//! - serializability: the counts committed transactions read are each the next one (a
//!   count read twice by transactions that both survive is a lost update: a cycle), and at
//!   the end every replica is exactly the surviving transactions replayed in count order;
//!   audits see the TpcB invariant;
//! - durability across a single failure: no transaction reads the count of one whose commit
//!   was acknowledged (that commit would be lost), and every acknowledged commit is in the
//!   final replay;
//! - abort atomicity: aborted transactions are not in the replay, and the replicas equal it;
//! - the TpcB invariant on every replica at the end;
//! - liveness after healing: every client finishes its transactions and every node serves.

use crate::crmem_sim::{
    add_counters, clients_wakeup, i64_at, move_clients, nodes_idle, nodes_wakeup,
    pump_and_transmit, replay, seed_start, tick, CrmemSimOptions, CrmemSimReport, Delta, SeedStart,
    SimNode, Step, Tally, ACCOUNTS, BRANCHES, HIST, RECORD, TAIL, TELLERS,
};
use crate::harness::{self, Run, Violation, World};
use crate::net::FaultConfig;
use crate::{Node as SimNodeTrait, NodeId};
use txcast_crmem::{
    Config, CrError, Lock, LockMapping, Mode, Phase, SegmentId, SymEvent, SymNode, TxnId,
};
use txcast_proto::link::LinkConfig;
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;

/// The segments as every replica has them, with their homes spread over `n` nodes. The
/// history (ring and tail) is under one lock: a transaction that holds the tail takes its
/// slot with no second round trip.
fn segments(s: &mut SymNode, n: usize) {
    let rec = |per_lock| LockMapping::Records {
        record_bytes: RECORD,
        per_lock,
    };
    let home = |i: usize| (i % n) as u16;
    s.add_segment((ACCOUNTS * RECORD) as usize, rec(10), home(0))
        .expect("accounts");
    s.add_segment((TELLERS * RECORD) as usize, rec(2), home(1))
        .expect("tellers");
    s.add_segment((BRANCHES * RECORD) as usize, rec(1), home(2))
        .expect("branches");
    let hist = TAIL + 16;
    s.add_segment(
        hist as usize,
        LockMapping::Records {
            record_bytes: hist,
            per_lock: 1,
        },
        home(3),
    )
    .expect("history");
}

/// A symmetric node with the TpcB segments, homes spread over the `n` nodes.
fn sym_node(
    id: NodeId,
    n: usize,
    cfg: &LinkConfig,
    incarnation: u64,
    recovering: bool,
    (cache_locks, (bundle_bytes, message_bytes)): (bool, (usize, usize)),
) -> SimNode<SymNode> {
    let mut cr = SymNode::new(
        Config {
            node: id as u16,
            incarnation,
            cache_locks,
            bundle_bytes,
            message_bytes,
            ..Config::default()
        },
        n,
        recovering,
    );
    segments(&mut cr, n);
    SimNode::with_core(id, n, cfg, incarnation, cr)
}

/// A client at its node; `Committing` names the issued transaction.
type Client = crate::crmem_sim::Client<usize, NodeId>;

/// A write transaction whose commit was called: the count it read, what it did, whether
/// its commit was acknowledged.
struct Issued {
    count: u32,
    delta: Delta,
    acked: bool,
}

struct SymWorld {
    opts: CrmemSimOptions,
    cfg: LinkConfig,
    rng: Rng,
    faults: FaultConfig,
    nodes: Vec<SimNode<SymNode>>,
    /// The nodes keep the locks their homes grant them (half the seeds, by the seed).
    cache_locks: bool,
    /// The nodes' `Config::bundle_bytes` and `Config::message_bytes` (by the seed; the
    /// message size drawn small, the nodes take their least, and commits go in parts).
    sizes: (usize, usize),
    /// A quarter of the seeds (by the seed): every transaction declares its ranges in one
    /// `set_ranges` (locks taken in the order every node uses) and waits with no deadline in
    /// the run, so a cycle of waits is a stall the harness reports.
    long_waits: bool,
    incarnation: Vec<u64>,
    view: u64,
    /// The live nodes of the current view.
    live: Vec<u16>,
    /// A restarted node that joins when the survivors serve again.
    join: Option<NodeId>,
    clients: Vec<Client>,
    issued: Vec<Issued>,
    /// For each count, the latest issued transaction that read it.
    chain: Vec<usize>,
    tally: Tally,
    views: u64,
}

/// Runs one seed of the symmetric configuration.
pub fn run_symmetric(seed: u64, opts: &CrmemSimOptions) -> Result<CrmemSimReport, Violation> {
    let SeedStart {
        rng,
        faults,
        cfg,
        n,
        clients,
        plan,
    } = seed_start(seed, opts, 4, |n| {
        format!(" --config symmetric --nodes {n}")
    });
    let cache_locks = match opts.cache_locks {
        Some(c) => c,
        None => seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 63 == 1,
    };
    let long_waits = seed.wrapping_mul(0xD1B5_4A32_D192_ED03) >> 62 == 0;
    let (bundle_bytes, small) = opts.bundle_bytes(seed);
    let sizes = (
        bundle_bytes,
        small.unwrap_or(Config::default().message_bytes),
    );
    let world = SymWorld {
        opts: opts.clone(),
        nodes: (0..n)
            .map(|i| sym_node(i, n, &cfg, 1, false, (cache_locks, sizes)))
            .collect(),
        cache_locks,
        sizes,
        long_waits,
        cfg,
        rng,
        faults,
        incarnation: vec![1; n],
        view: 0,
        live: (0..n as u16).collect(),
        join: None,
        clients: (0..clients).map(|c| Client::new(c % n)).collect(),
        issued: Vec::new(),
        chain: Vec::new(),
        tally: Tally::default(),
        views: 0,
    };
    harness::run(world, plan)
}

impl SymWorld {
    fn n(&self) -> usize {
        self.nodes.len()
    }

    fn start(&mut self, run: &mut Run, c: usize) -> Result<(), Violation> {
        let mut deadline = Instant(run.ns() + 1_000_000 + self.rng.below(20_000_000));
        if self.long_waits {
            deadline = Instant(run.ns() + 3_600_000_000_000);
        }
        let k = self.clients[c].node;
        let txn = match self.nodes[k].cr.begin(deadline) {
            Ok(t) => t,
            Err(CrError::NotServing) => {
                // The node recovers or changes its view: try again a little later.
                self.clients[c].next_at = Instant(run.ns() + 1_000_000);
                return Ok(());
            }
            Err(e) => return Err(run.fail(format!("begin refused at node {k}: {e}"))),
        };
        self.clients[c].begun(txn, &mut self.rng);
        Ok(())
    }

    fn advance(&mut self, run: &mut Run, c: usize) -> Result<(), Violation> {
        let k = self.clients[c].node;
        let cl = &mut self.clients[c];
        let Some(txn) = cl.txn else { return Ok(()) };
        let trace = |i: usize, s: SegmentId, got: &Result<Lock, CrError>| {
            if run.trace > 1 {
                eprintln!(
                    "{:>10} client {c}: set_range {i} of {txn} (segment {s}): {got:?}",
                    run.ns()
                );
            }
        };
        // Half the transactions (by their id, so the seed's draws stay as they were) declare
        // every range in one `set_ranges`; the rest take them one by one.
        let batch = self.long_waits || txn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 63 == 1;
        if batch && matches!(cl.step, Step::Take(0)) && !cl.order.is_empty() {
            let mode = if cl.audit { Mode::Read } else { Mode::Write };
            let all: Vec<_> = cl.order.iter().map(|&(s, o, l)| (s, o, l, mode)).collect();
            let got = self.nodes[k].cr.set_ranges(txn, &all);
            trace(0, all[0].0, &got);
            let last = cl.order.len() - 1;
            return match got {
                Ok(Lock::Granted) => {
                    cl.step = Step::Take(last + 1);
                    self.finish_txn(run, c, txn)
                }
                // Granted: the client goes on to its last range, held already.
                Ok(Lock::Waiting) => {
                    cl.step = Step::Wait(last);
                    Ok(())
                }
                Err(CrError::UnknownTxn) => Ok(()),
                Err(e) => Err(run.fail(format!(
                    "set_ranges of client {c}'s transaction {txn} at node {k} refused: {e}"
                ))),
            };
        }
        match cl.take_ranges(&mut self.nodes[k].cr, txn, &mut self.rng, run, trace) {
            Ok(true) => self.finish_txn(run, c, txn),
            Ok(false) => Ok(()),
            // Aborted since its last event (a view change): the Aborted event that follows
            // resets the client.
            Err(CrError::UnknownTxn) => Ok(()),
            Err(e) => Err(run.fail(format!(
                "set_range of client {c}'s transaction {txn} at node {k} refused: {e}"
            ))),
        }
    }

    fn finish_txn(&mut self, run: &mut Run, c: usize, txn: TxnId) -> Result<(), Violation> {
        let k = self.clients[c].node;
        let cr = &mut self.nodes[k].cr;
        let cl = &mut self.clients[c];
        // Rolled back (a view change) after its last grant was filed: the Aborted event that
        // follows resets the client.
        if let Some(&(s, off, len)) = cl.order.first() {
            if matches!(cr.range(txn, s, off, len), Err(CrError::UnknownTxn)) {
                return Ok(());
            }
        }
        let worked = cl.work(cr, txn, run, &format!(" at node {k}"))?;
        if cl.audit {
            self.tally.audits += 1;
        }
        let Some(count) = worked else {
            self.tally.aborted_on_purpose += 1;
            return Ok(());
        };
        match cr.commit(txn) {
            Ok(_) => {
                if cl.audit {
                    cl.step = Step::Committing(usize::MAX);
                    return Ok(());
                }
                let d = cl.delta;
                cl.step = Step::Committing(self.issued.len());
                self.issue(run, count, d)
            }
            Err(CrError::LogFull) => cl.log_full(cr, txn, run),
            Err(e) => Err(run.fail(format!("commit refused: {e}"))),
        }
    }

    /// A write transaction committed having read `count`: it must be the next count, or
    /// one whose transaction was lost (never acknowledged) in a failure.
    fn issue(&mut self, run: &mut Run, count: u32, delta: Delta) -> Result<(), Violation> {
        let c = count as usize;
        if c > self.chain.len() {
            return Err(run.fail(format!(
                "serializability: a transaction read count {c}, only {} were committed",
                self.chain.len()
            )));
        }
        if c < self.chain.len() {
            if let Some(&i) = self.chain[c..].iter().find(|&&i| self.issued[i].acked) {
                return Err(run.fail(format!(
                    "durability: a transaction read count {c}, the acknowledged commit of count {} is lost",
                    self.issued[i].count
                )));
            }
            // The earlier transaction that read it must have died with its node; the end
            // checks that it is in no replica.
            self.chain.truncate(c);
        }
        self.chain.push(self.issued.len());
        self.issued.push(Issued {
            count,
            delta,
            acked: false,
        });
        Ok(())
    }

    fn route_events(&mut self, run: &mut Run) -> Result<(), Violation> {
        for k in 0..self.n() {
            while let Some(e) = self.nodes[k].cr.poll_event() {
                if run.trace > 1 {
                    eprintln!("{:>10} node {k}: {e:?}", run.ns());
                }
                let t = match e {
                    SymEvent::Granted(t) | SymEvent::Committed(t) | SymEvent::Aborted(t, _) => t,
                    _ => continue,
                };
                let Some(c) = self
                    .clients
                    .iter()
                    .position(|cl| cl.node == k && cl.txn == Some(t))
                else {
                    return Err(run.fail(format!("node {k} said {e:?} of no client's transaction")));
                };
                let think = self.opts.think_ns();
                let cl = &mut self.clients[c];
                match e {
                    SymEvent::Granted(_) => {
                        cl.granted(run)?;
                        self.advance(run, c)?;
                    }
                    SymEvent::Committed(_) => {
                        let Step::Committing(i) = cl.step else {
                            return Err(run.fail("a commit completed that was not asked"));
                        };
                        if let Some(is) = self.issued.get_mut(i) {
                            is.acked = true;
                        }
                        cl.ended(true, Instant(run.ns() + self.rng.below(think)));
                    }
                    SymEvent::Aborted(..) => {
                        if matches!(cl.step, Step::Committing(_)) {
                            return Err(run.fail("a committed transaction was aborted"));
                        }
                        self.tally.timeouts += 1;
                        cl.ended(false, Instant(run.ns() + self.rng.below(1_000_000)));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn settled(&self) -> bool {
        self.join.is_none() && self.nodes.iter().all(|nd| nd.cr.phase() == Phase::Serving)
    }

    /// Checks node `k`'s memory against the surviving transactions replayed in count order.
    fn check_replica(&self, run: &Run, k: NodeId) -> Result<(), Violation> {
        let cr = &self.nodes[k].cr;
        let count = i64_at(cr.segment(HIST).expect("history"), TAIL) as usize;
        if count != self.chain.len() {
            return Err(run.fail(format!(
                "end: node {k} has {count} transactions, {} survive",
                self.chain.len()
            )));
        }
        let deltas: Vec<Delta> = self.chain.iter().map(|&i| self.issued[i].delta).collect();
        let want = replay(&deltas);
        for (s, w) in want.iter().enumerate() {
            if cr.segment(s as SegmentId).expect("segment") != &w[..] {
                return Err(run.fail(format!(
                    "end: node {k}'s segment {s} is not the {count} surviving transactions replayed in order"
                )));
            }
        }
        Ok(())
    }
}

impl World for SymWorld {
    type Report = CrmemSimReport;

    fn restart(&mut self, run: &mut Run, k: NodeId) {
        if !self.settled() {
            self.tally.skipped += 1;
            return;
        }
        self.tally.restarts += 1;
        self.incarnation[k] += 1;
        add_counters(&mut self.tally.counters, self.nodes[k].cr.counters());
        self.view += 1;
        self.views += 1;
        self.live.retain(|&i| i as usize != k);
        for &i in &self.live {
            self.nodes[i as usize]
                .cr
                .view_change(self.view, &self.live, None);
        }
        for cl in self.clients.iter_mut().filter(|cl| cl.node == k) {
            cl.txn = None;
            cl.step = Step::Idle;
        }
        let n = self.n();
        self.nodes[k] = sym_node(
            k,
            n,
            &self.cfg,
            self.incarnation[k],
            true,
            (self.cache_locks, self.sizes),
        );
        self.join = Some(k);
        if run.trace > 0 {
            eprintln!("{:>10} crash of node {k}; view {}", run.ns(), self.view);
        }
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.nodes[to].links.handle_message(run.now, &bytes);
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        tick(&mut self.nodes, run);
        let (n, now) = (self.n(), run.now);
        // The restarted node joins once every survivor serves again.
        if let Some(k) = self.join {
            let ready = self
                .live
                .iter()
                .all(|&i| self.nodes[i as usize].cr.phase() == Phase::Serving);
            if ready {
                self.view += 1;
                self.views += 1;
                self.live.push(k as u16);
                self.live.sort_unstable();
                for &i in self.live.iter().filter(|&&i| i as usize != k) {
                    self.nodes[i as usize]
                        .cr
                        .view_change(self.view, &self.live, Some(k as u16));
                }
                self.join = None;
                for k in 0..n {
                    self.nodes[k].pump(now, k, n);
                }
            }
        }
        self.route_events(run)?;
        let quota = self.opts.txns_per_client;
        move_clients(
            self,
            run,
            quota,
            |w| &w.clients,
            |_| true,
            Self::start,
            Self::advance,
        )?;
        self.route_events(run)?;
        pump_and_transmit(&mut self.nodes, run);
        Ok(())
    }

    fn next_wakeup(&self, _run: &Run) -> Option<Instant> {
        let next = nodes_wakeup(&self.nodes);
        clients_wakeup(&self.clients, self.opts.txns_per_client, next)
    }

    fn done(&self, run: &Run) -> bool {
        run.healed
            && self.settled()
            && self
                .clients
                .iter()
                .all(|c| c.done >= self.opts.txns_per_client)
            && self.nodes.iter().all(|nd| nd.cr.is_quiet())
            && nodes_idle(&self.nodes)
    }

    fn stalled(&self, _run: &Run) -> String {
        let clients: Vec<String> = self
            .clients
            .iter()
            .map(|c| {
                format!(
                    "@{} {}/{} {:?}",
                    c.node, c.done, self.opts.txns_per_client, c.step
                )
            })
            .collect();
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|nd| {
                format!(
                    "{:?} live {:?} seq {} (pending, open, remote) {:?} waits: {}",
                    nd.cr.phase(),
                    nd.cr.live(),
                    nd.cr.seq(),
                    nd.cr.open_counts(),
                    nd.cr.describe_waits()
                )
            })
            .collect();
        format!(
            "view {} join {:?}; clients {}; nodes {}",
            self.view,
            self.join,
            clients.join(", "),
            nodes.join("; ")
        )
    }

    fn finish(mut self, run: &mut Run) -> Result<CrmemSimReport, Violation> {
        // The last transactions committed may have died with their node, unacknowledged and
        // read by no one after: then no replica has them (checked next, on every node).
        let held = i64_at(self.nodes[0].cr.segment(HIST).expect("history"), TAIL) as usize;
        if held < self.chain.len() && self.chain[held..].iter().all(|&i| !self.issued[i].acked) {
            self.chain.truncate(held);
        }
        for k in 0..self.n() {
            self.check_replica(run, k)?;
        }
        // Every acknowledged commit survives: it is the transaction of its count.
        for (i, is) in self.issued.iter().enumerate() {
            if is.acked && self.chain.get(is.count as usize) != Some(&i) {
                return Err(run.fail(format!(
                    "durability: the acknowledged transaction of count {} is not in the replicas",
                    is.count
                )));
            }
        }
        Ok(CrmemSimReport {
            clients: self.clients.len(),
            committed: self.chain.len() as u64,
            failovers: self.views,
            ..self.tally.report(run, self.faults, &self.nodes)
        })
    }
}
