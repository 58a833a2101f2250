//! Raid (`txcast_raid::Site`) over reliable links under simulated faults: every site runs
//! DebitCredit clients against a small database (few accounts, so transactions conflict),
//! with two-phase commit read-one-write-all-available across the members of a view, and
//! view changes (suspicions, joins, snapshots) when sites crash, restart or are cut off. Each site's log is a simulated
//! disk: records reach it when a simulated `fdatasync` completes; a crash keeps what was
//! durable plus a random prefix of what was written but not yet synced, and the site restarts
//! from it as a new incarnation (its clients' open transactions end unknown to them). Now
//! and then a site's disk fails before one of its restarts: every sync fails from then on,
//! the site is told (`log_failed`), and the restart repairs it. When nothing is in flight to
//! a disk, its log is now and then compacted (`Site::compact`), so restarts also recover
//! from a compacted log.
//!
//! Every transfer has a delta of its own, so a history row names the transfer it records.
//! Checked:
//! - conservation on every site, during the run and at the end;
//! - atomicity and identical copies: at the end every site has applied the same transfers
//!   (history rows) and holds the same tuples;
//! - durability: every transfer a client heard committed is there, with the id it was told;
//! - no transfer is applied twice (its retries are attempts of one transaction), and none
//!   given up is applied;
//! - serializability: replaying each site's history in its order, every account's running
//!   balance equals the balance the committing client was told, and the final tuples equal
//!   the replay;
//! - each site's copy is what its log redoes (the copy a restart would recover);
//! - liveness: after healing, every client finishes, every site is a member of one view of
//!   all sites with its copy synced to it, and every site is quiet.

use crate::harness::{self, min_opt, Plan, Run, RunOptions, Violation, World};
use crate::link_sim::LinkNode;
use crate::net::{FaultConfig, NetCounters, Network};
use crate::{Node as _, NodeId};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use txcast_proto::link::{LinkConfig, LinkSendError};
use txcast_proto::rng::Rng;
use txcast_proto::time::Instant;
use txcast_raid::{Counters, Event, Key, Scale, Site, SiteConfig, Transfer, TxnId};

const STEPS_MAX: u64 = 30_000_000;

/// Knobs of one Raid simulation.
#[derive(Clone, Debug)]
pub struct RaidSimOptions {
    /// Sites; 0 draws 1 to 4 from the seed.
    pub sites: usize,
    /// Transfers each client runs to the end (committed, given up, or lost in a crash).
    pub txns_per_client: u32,
    /// The phases, and the faults the seed may draw.
    pub run: RunOptions,
}

impl Default for RaidSimOptions {
    fn default() -> Self {
        RaidSimOptions {
            sites: 0,
            txns_per_client: 25,
            run: RunOptions::default(),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RaidSimReport {
    pub seed: u64,
    pub sites: usize,
    pub faults: FaultConfig,
    pub clients: usize,
    pub committed: u64,
    pub given_up: u64,
    pub lost_in_crash: u64,
    pub restarts: u64,
    /// Sites whose disk failed (and were repaired by their restart).
    pub disk_failures: u64,
    pub net: NetCounters,
    pub counters: Counters,
    pub end_ns: u64,
    pub digest: u64,
}

/// A site's log on a simulated disk.
#[derive(Default)]
struct Disk {
    /// Records on disk for sure.
    durable: Vec<Vec<u8>>,
    /// Written, not yet synced.
    pending: Vec<Vec<u8>>,
    /// The sync under way: how many of `pending` it covers, and when it ends.
    sync: Option<(usize, Instant)>,
    /// From this time every sync fails (a full disk, an I/O error), until the site restarts.
    fail_at: Option<Instant>,
}

struct SimSite {
    links: LinkNode,
    site: Site,
    disk: Disk,
    outbox: VecDeque<(NodeId, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Idle,
    Running,
}

struct Client {
    site: NodeId,
    step: Step,
    next_at: Instant,
    done: u32,
    tag: u64,
}

/// What became of a transfer, by its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Running,
    Committed { txn: TxnId, balance: i64 },
    GivenUp,
    Unknown,
}

struct RaidWorld {
    opts: RaidSimOptions,
    link_cfg: LinkConfig,
    site_cfg: SiteConfig,
    rng: Rng,
    faults: FaultConfig,
    sites: Vec<SimSite>,
    incarnation: Vec<u32>,
    clients: Vec<Client>,
    /// Tag -> the transfer submitted under it, and its fate.
    transfers: HashMap<u64, (Transfer, Fate)>,
    next_tag: u64,
    restarts: u64,
    disk_failures: u64,
    steps: u64,
    /// A client's pause between transfers is drawn below this.
    think_ns: u64,
    counters: Counters,
}

/// Runs one seed: its report, or the first rule broken.
pub fn run_raid(seed: u64, opts: &RaidSimOptions) -> Result<RaidSimReport, Violation> {
    let mut rng = Rng::new(seed);
    let faults = opts.run.fault_config(seed, &mut rng);
    let n = if opts.sites == 0 {
        1 + rng.below(4) as usize
    } else {
        opts.sites.clamp(1, 8)
    };
    let link_cfg = LinkConfig::default();
    let clients_per_site = 1 + rng.below(4) as usize;
    let total = (n * clients_per_site) as u32 * opts.txns_per_client;
    let scale = Scale {
        branches: 1 + rng.below(3) as u32,
        tellers_per_branch: 1 + rng.below(4) as u32,
        accounts_per_branch: 2 + rng.below(30) as u32,
        history_rows: total + 16,
    };
    let mut site_cfg = SiteConfig::new(0, n as u16, 1, scale);
    site_cfg.vote_timeout = Duration::from_millis(20 + rng.below(300));
    site_cfg.resend = Duration::from_millis(5 + rng.below(50));
    site_cfg.packet_bytes = 200 + rng.below(1200) as usize;
    site_cfg.attempts_max = 1_000_000;
    let restarts = opts.run.restarts(&mut rng, 0.6, 4, n);
    // Spread over the safety phase, or busy (many transfers in flight when a site crashes).
    let spread = (2 * opts.run.safety_ns / opts.txns_per_client.max(1) as u64).max(1);
    let think_ns = if rng.chance(0.5) {
        spread
    } else {
        1 + rng.below(spread / 20 + 1)
    };
    // Now and then a site's disk fails some time before one of its restarts (which repairs
    // it): its syncs fail from then on.
    let mut disk_fail = vec![None; n];
    if opts.run.faults && !restarts.is_empty() && rng.chance(0.3) {
        let (t, k) = restarts[rng.below(restarts.len() as u64) as usize];
        disk_fail[k] = Some(Instant(rng.below(t.max(1))));
    }
    let plan = Plan {
        steps_max: Some(STEPS_MAX),
        buf_bytes: link_cfg.packet_bytes_max,
        ..opts.run.plan(
            "raid",
            seed,
            Network::new(n, faults.clone(), rng.fork()),
            restarts,
        )
    };
    let mut sites = Vec::new();
    for (k, &fail_at) in disk_fail.iter().enumerate() {
        let cfg = SiteConfig {
            site: k as u16,
            ..site_cfg.clone()
        };
        let site = Site::new(cfg).map_err(|e| Violation::at_start("raid", seed, e.to_string()))?;
        sites.push(SimSite {
            links: LinkNode::with_incarnation(k, n, &link_cfg, 1),
            site,
            disk: Disk {
                fail_at,
                ..Disk::default()
            },
            outbox: VecDeque::new(),
        });
    }
    let clients = (0..n * clients_per_site)
        .map(|i| Client {
            site: i % n,
            step: Step::Idle,
            next_at: Instant::ZERO,
            done: 0,
            tag: 0,
        })
        .collect();
    let world = RaidWorld {
        opts: opts.clone(),
        link_cfg,
        site_cfg,
        rng,
        faults,
        sites,
        incarnation: vec![1; n],
        clients,
        transfers: HashMap::new(),
        next_tag: 1,
        restarts: 0,
        disk_failures: disk_fail.iter().filter(|f| f.is_some()).count() as u64,
        steps: 0,
        think_ns,
        counters: Counters::default(),
    };
    harness::run(world, plan)
}

impl SimSite {
    /// Link deliveries into the site, its packets into the links, its records onto the disk.
    fn pump(&mut self, now: Instant, me: NodeId, n: usize, rng: &mut Rng) {
        for i in (0..n).filter(|&i| i != me) {
            let site = &mut self.site;
            while self
                .links
                .link(i)
                .poll_delivery(|m| {
                    let _ = site.handle_packet(now, m);
                })
                .is_some()
            {}
        }
        if self.site.next_deadline().is_some_and(|t| t <= now) {
            self.site.handle_timeout(now);
        }
        // The disk: a sync that ended makes its records durable, or fails.
        if let Some((k, at)) = self.disk.sync {
            if at <= now && self.disk.fail_at.is_some_and(|f| f <= at) {
                self.disk.sync = None;
                self.site.log_failed(now);
            } else if at <= now {
                let synced: Vec<Vec<u8>> = self.disk.pending.drain(..k).collect();
                self.disk.durable.extend(synced);
                self.disk.sync = None;
                self.site.logged(now, self.disk.durable.len() as u64);
            }
        }
        // Now and then, when nothing is in flight to the disk, the log is compacted: the
        // records that recover the site as it is replace the whole log at once (the driver
        // writes them aside and renames them over it).
        if self.disk.sync.is_none()
            && self.disk.pending.is_empty()
            && self.site.log_settled()
            && rng.chance(0.01)
        {
            if let Some(recs) = self.site.compact() {
                self.disk.durable = recs;
            }
        }
        while let Some(r) = self.site.poll_log() {
            self.disk.pending.push(r);
        }
        if self.disk.sync.is_none() && !self.disk.pending.is_empty() && !self.site.is_broken() {
            let at = Instant(now.0 + 20_000 + rng.below(2_000_000));
            self.disk.sync = Some((self.disk.pending.len(), at));
        }
        while let Some((to, m)) = self.site.poll_transmit() {
            self.outbox.push_back((to as NodeId, m));
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

impl RaidWorld {
    fn n(&self) -> usize {
        self.sites.len()
    }

    fn scale(&self) -> Scale {
        self.site_cfg.scale
    }

    /// Routes each site's events to the transfers they concern.
    fn route_events(&mut self, run: &mut Run) -> Result<(), Violation> {
        for k in 0..self.n() {
            while let Some(e) = self.sites[k].site.poll_event() {
                if run.trace > 1 {
                    eprintln!("{:>10} site {k}: {e:?}", run.ns());
                }
                let (tag, fate) = match e {
                    Event::Committed {
                        tag, txn, balance, ..
                    } => (tag, Fate::Committed { txn, balance }),
                    Event::Aborted { tag, .. } => (tag, Fate::GivenUp),
                    Event::Unknown { tag, .. } => (tag, Fate::Unknown),
                };
                let Some(entry) = self.transfers.get_mut(&tag) else {
                    return Err(run.fail(format!("site {k} answered unknown tag {tag}")));
                };
                if entry.1 != Fate::Running {
                    return Err(run.fail(format!(
                        "site {k} answered tag {tag} twice: {:?} then {fate:?}",
                        entry.1
                    )));
                }
                if let Fate::Committed { txn, .. } = fate {
                    if txn.site as usize != k {
                        return Err(run.fail(format!("site {k} committed {txn:?} of another site")));
                    }
                }
                entry.1 = fate;
                let think = self.rng.below(self.think_ns());
                if let Some(c) = self.clients.iter_mut().find(|c| c.tag == tag) {
                    c.step = Step::Idle;
                    c.done += 1;
                    c.next_at = Instant(run.ns() + think);
                }
            }
        }
        Ok(())
    }

    fn think_ns(&self) -> u64 {
        self.think_ns
    }

    fn submit(&mut self, run: &mut Run, c: usize) -> Result<(), Violation> {
        let sc = self.scale();
        let tag = self.next_tag;
        self.next_tag += 1;
        let teller = self.rng.below(sc.tellers() as u64) as u32;
        // Mostly the teller's branch, now and then another (as TPC-B's remote accounts).
        let branch = teller / sc.tellers_per_branch;
        let account_branch = if self.rng.chance(0.85) {
            branch
        } else {
            self.rng.below(sc.branches as u64) as u32
        };
        let account = account_branch * sc.accounts_per_branch
            + self.rng.below(sc.accounts_per_branch as u64) as u32;
        // The delta names the transfer: its tag, signed.
        let delta = if self.rng.chance(0.5) {
            tag as i64
        } else {
            -(tag as i64)
        };
        let t = Transfer {
            account,
            teller,
            branch,
            delta,
        };
        let k = self.clients[c].site;
        match self.sites[k].site.submit(run.now, tag, t) {
            Ok(()) => {
                self.transfers.insert(tag, (t, Fate::Running));
                let cl = &mut self.clients[c];
                cl.tag = tag;
                cl.step = Step::Running;
                Ok(())
            }
            Err(txcast_raid::SubmitError::Broken) => {
                // The site's disk failed: its clients wait for its repair (a restart).
                self.clients[c].next_at = Instant(run.ns() + 10_000_000);
                Ok(())
            }
            Err(e) => Err(run.fail(format!("site {k} refused a transfer: {e}"))),
        }
    }

    /// Conservation on every site.
    fn check_conservation(&self, run: &Run, why: &str) -> Result<(), Violation> {
        for (k, s) in self.sites.iter().enumerate() {
            let t = s.site.db().totals();
            if !t.conserved() {
                return Err(run.fail(format!("{why}: site {k} does not conserve money: {t:?}")));
            }
        }
        Ok(())
    }

    /// The end-of-run checks (see the module comment).
    fn check_end(&self, run: &Run) -> Result<u64, Violation> {
        self.check_conservation(run, "end")?;
        let sc = self.scale();
        let mut first: Option<(Vec<u64>, u64)> = None;
        for (k, s) in self.sites.iter().enumerate() {
            let db = s.site.db();
            // Replay this site's history in its order.
            let mut acct = vec![0i64; sc.accounts() as usize];
            let mut tel = vec![0i64; sc.tellers() as usize];
            let mut br = vec![0i64; sc.branches as usize];
            let mut tags = Vec::new();
            for row in db.history() {
                let tag = row.delta.unsigned_abs();
                let Some((t, fate)) = self.transfers.get(&tag) else {
                    return Err(
                        run.fail(format!("site {k}: a history row of no transfer: {row:?}"))
                    );
                };
                if (t.account, t.teller, t.branch, t.delta)
                    != (row.account, row.teller, row.branch, row.delta)
                {
                    return Err(run.fail(format!(
                        "site {k}: history row {row:?} is not transfer {tag} {t:?}"
                    )));
                }
                acct[t.account as usize] += t.delta;
                tel[t.teller as usize] += t.delta;
                br[t.branch as usize] += t.delta;
                match *fate {
                    Fate::GivenUp => {
                        return Err(run.fail(format!(
                            "site {k} applied transfer {tag}, which was given up"
                        )))
                    }
                    Fate::Running => {
                        return Err(run.fail(format!(
                            "site {k} applied transfer {tag}, still running at the end"
                        )))
                    }
                    Fate::Committed { txn, balance } => {
                        if row.txn != txn {
                            return Err(run.fail(format!(
                                "site {k} applied transfer {tag} as {:?}, its client was told {txn:?}",
                                row.txn
                            )));
                        }
                        if acct[t.account as usize] != balance {
                            return Err(run.fail(format!(
                                "serializability: at site {k} transfer {tag} leaves account {} at {}, its client was told {balance}",
                                t.account, acct[t.account as usize]
                            )));
                        }
                    }
                    Fate::Unknown => {}
                }
                tags.push(tag);
            }
            if db.history_count() as usize != tags.len() {
                return Err(run.fail(format!(
                    "site {k}: {} history rows appended, {} kept (the ring is too small)",
                    db.history_count(),
                    tags.len()
                )));
            }
            let tuples = |key: fn(u32) -> Key, v: &[i64]| {
                v.iter()
                    .enumerate()
                    .all(|(i, &b)| db.balance(key(i as u32)) == Ok(b))
            };
            if !tuples(Key::account, &acct)
                || !tuples(Key::teller, &tel)
                || !tuples(Key::branch, &br)
            {
                return Err(run.fail(format!("site {k}: the tuples are not its history replayed")));
            }
            let mut sorted = tags.clone();
            sorted.sort_unstable();
            if sorted.windows(2).any(|w| w[0] == w[1]) {
                return Err(run.fail(format!("site {k} applied a transfer twice")));
            }
            match &first {
                None => first = Some((sorted, db.digest())),
                Some((tags0, digest0)) => {
                    if *tags0 != sorted {
                        return Err(run.fail(format!(
                            "atomicity: site {k} applied {} transfers, site 0 {}, not the same",
                            sorted.len(),
                            tags0.len()
                        )));
                    }
                    if *digest0 != db.digest() {
                        return Err(run.fail(format!("site {k}'s copy differs from site 0's")));
                    }
                }
            }
        }
        // Each copy is what its log redoes.
        for (k, s) in self.sites.iter().enumerate() {
            let cfg = s.site.config().clone();
            let again = Site::recover(cfg, run.now, s.disk.durable.iter().map(|r| &r[..]))
                .map_err(|e| run.fail(format!("site {k}'s log does not recover: {e}")))?;
            if again.db().digest() != s.site.db().digest() {
                return Err(run.fail(format!("site {k}'s copy is not what its log redoes")));
            }
        }
        let applied = first.map(|(t, _)| t).unwrap_or_default();
        for (tag, (_, fate)) in &self.transfers {
            if matches!(fate, Fate::Committed { .. }) && applied.binary_search(tag).is_err() {
                return Err(run.fail(format!(
                    "durability: transfer {tag} was acknowledged and is on no site"
                )));
            }
        }
        Ok(applied.len() as u64)
    }
}

fn add_counters(a: &mut Counters, b: Counters) {
    a.submitted += b.submitted;
    a.committed += b.committed;
    a.given_up += b.given_up;
    a.unknown += b.unknown;
    a.retries_conflict += b.retries_conflict;
    a.retries_busy += b.retries_busy;
    a.retries_timeout += b.retries_timeout;
    a.prepared += b.prepared;
    a.votes_no += b.votes_no;
    a.resent += b.resent;
    a.queries += b.queries;
    a.packets_in += b.packets_in;
    a.packets_out += b.packets_out;
    a.dropped_malformed += b.dropped_malformed;
    a.dropped_stale += b.dropped_stale;
    a.unsent_unknown += b.unsent_unknown;
    a.hellos += b.hellos;
    a.dropped_foreign += b.dropped_foreign;
    a.unexpected += b.unexpected;
    a.log_records += b.log_records;
    a.log_bytes += b.log_bytes;
    a.lock_waits += b.lock_waits;
    a.recovered_in_doubt += b.recovered_in_doubt;
    a.compactions += b.compactions;
    a.retries_view += b.retries_view;
    a.proposals += b.proposals;
    a.views += b.views;
    a.donated += b.donated;
    a.snapshots += b.snapshots;
    a.snapshot_chunks += b.snapshot_chunks;
    a.snapshots_spared += b.snapshots_spared;
    a.suspicions += b.suspicions;
    a.left_out += b.left_out;
    a.dropped_view += b.dropped_view;
}

impl World for RaidWorld {
    type Report = RaidSimReport;

    fn restart(&mut self, run: &mut Run, k: NodeId) {
        self.restarts += 1;
        self.incarnation[k] += 1;
        let n = self.n();
        let old = &mut self.sites[k];
        add_counters(&mut self.counters, old.site.counters());
        // What reached the disk: the durable records and some of those written since.
        let mut disk = std::mem::take(&mut old.disk);
        let kept = self.rng.below(disk.pending.len() as u64 + 1) as usize;
        disk.durable.extend(disk.pending.drain(..kept));
        let cfg = SiteConfig {
            site: k as u16,
            incarnation: self.incarnation[k],
            ..self.site_cfg.clone()
        };
        let site = Site::recover(cfg, run.now, disk.durable.iter().map(|r| &r[..]))
            .expect("a log of whole records recovers");
        if run.trace > 0 {
            eprintln!(
                "{:>10} crash of site {k}: {} records kept ({kept} not synced); {}",
                run.ns(),
                disk.durable.len(),
                site.describe()
            );
        }
        self.sites[k] = SimSite {
            links: LinkNode::with_incarnation(k, n, &self.link_cfg, self.incarnation[k] as u64),
            site,
            disk: Disk {
                durable: disk.durable,
                ..Disk::default()
            },
            outbox: VecDeque::new(),
        };
        // The site's clients lose their open transfers: committed or not, they cannot tell.
        for c in self.clients.iter_mut().filter(|c| c.site == k) {
            if c.step == Step::Running {
                if let Some(e) = self.transfers.get_mut(&c.tag) {
                    e.1 = Fate::Unknown;
                }
                c.step = Step::Idle;
                c.done += 1;
            }
        }
    }

    fn deliver(&mut self, run: &mut Run, to: NodeId, bytes: Vec<u8>) -> Result<(), Violation> {
        self.sites[to].links.handle_message(run.now, &bytes);
        Ok(())
    }

    fn step(&mut self, run: &mut Run) -> Result<(), Violation> {
        let (n, now) = (self.n(), run.now);
        for nd in self.sites.iter_mut() {
            if run.due(&nd.links) {
                nd.links.handle_timeout(now);
            }
        }
        for k in 0..n {
            self.sites[k].pump(now, k, n, &mut self.rng);
        }
        self.route_events(run)?;
        for c in 0..self.clients.len() {
            let cl = &self.clients[c];
            if cl.step == Step::Idle && cl.done < self.opts.txns_per_client && cl.next_at <= now {
                self.submit(run, c)?;
            }
        }
        for k in 0..n {
            self.sites[k].pump(now, k, n, &mut self.rng);
        }
        self.route_events(run)?;
        for (i, nd) in self.sites.iter_mut().enumerate() {
            run.transmit(i, &mut nd.links);
        }
        self.steps += 1;
        if self.steps.is_multiple_of(512) {
            self.check_conservation(run, "during the run")?;
        }
        Ok(())
    }

    fn next_wakeup(&self, _run: &Run) -> Option<Instant> {
        let mut next = None;
        for nd in &self.sites {
            next = min_opt(next, nd.links.poll_timeout());
            next = min_opt(next, nd.site.next_deadline());
            next = min_opt(next, nd.disk.sync.map(|(_, at)| at));
        }
        for cl in &self.clients {
            if cl.step == Step::Idle && cl.done < self.opts.txns_per_client {
                next = min_opt(next, Some(cl.next_at));
            }
        }
        next
    }

    fn done(&self, run: &Run) -> bool {
        let n = self.n();
        run.healed
            && self
                .clients
                .iter()
                .all(|c| c.done >= self.opts.txns_per_client)
            && self.sites.iter().all(|s| {
                // One view of every site, every copy synced to it.
                s.site
                    .view()
                    .is_some_and(|v| v.members.len() == n && Some(v) == self.sites[0].site.view())
                    && s.site.is_quiet()
                    && s.outbox.is_empty()
                    && s.disk.pending.is_empty()
                    && s.disk.sync.is_none()
            })
            && (0..n).all(|k| (0..n).all(|j| j == k || self.sites[k].links.link_ref(j).is_idle()))
    }

    fn stalled(&self, _run: &Run) -> String {
        let clients: Vec<String> = self
            .clients
            .iter()
            .map(|c| format!("{}/{} {:?}", c.done, self.opts.txns_per_client, c.step))
            .collect();
        let sites: Vec<String> = self.sites.iter().map(|s| s.site.describe()).collect();
        format!("clients {}; {}", clients.join(", "), sites.join("; "))
    }

    fn finish(mut self, run: &mut Run) -> Result<RaidSimReport, Violation> {
        let committed = self.check_end(run)?;
        for s in &self.sites {
            add_counters(&mut self.counters, s.site.counters());
            run.digest.add_u64(s.site.db().digest());
        }
        let count =
            |f: fn(&Fate) -> bool| self.transfers.values().filter(|(_, x)| f(x)).count() as u64;
        Ok(RaidSimReport {
            seed: run.seed,
            sites: self.n(),
            faults: self.faults.clone(),
            clients: self.clients.len(),
            committed,
            given_up: count(|f| *f == Fate::GivenUp),
            lost_in_crash: count(|f| *f == Fate::Unknown),
            restarts: self.restarts,
            disk_failures: self.disk_failures,
            net: run.net.counters.clone(),
            counters: self.counters,
            end_ns: run.ns(),
            digest: run.digest_with_net(),
        })
    }
}
