//! One Raid site, sans-IO: its action drivers' transactions, atomicity controller (AC),
//! concurrency controller (CC), access manager (AM) and replication controller (RC), as one
//! state machine (Bhargava, Mafla & Riedl's "multi-server per process": the servers of a site
//! share an address space and talk by calls; sites talk by messages). The driver moves its
//! packets, appends its log records to disk, and tells it the time.
//!
//! A DebitCredit transaction submitted at a site (its origin) goes:
//! 1. AD + CC: the origin locks the account exclusively and the teller and branch for
//!    increment (all at once, wait-die, [`crate::lock`]), reads the account (read one: the
//!    local copy) and builds the write set: the account's new balance, the deltas of teller
//!    and branch, the history row.
//! 2. AC + RC (read-one-write-all-available): the origin sends `PREPARE` to every other
//!    member of its view. Each locks the same tuples, appends a prepare record, and once it
//!    is durable votes yes.
//! 3. AC: on every yes the origin appends its commit record (the decision, with its own
//!    redo), applies it, and sends `DECIDE` commit. Each participant applies, releases,
//!    appends a committed record, and acknowledges once that is durable. With its own record
//!    durable the origin releases its locks; with every acknowledgement too it answers the
//!    client and sends `END`, on which participants forget. A no vote, or no vote by the
//!    deadline, aborts (presumed abort: no record), and the transaction is retried with its
//!    first timestamp after a backoff.
//!
//! A client is answered only once every member of the view holds the commit durably, so a
//! committed transfer survives any failure that leaves one member of the view's successor
//! able to give its copy (see [`view`]).
//!
//! Views ([`view`]): the sites that take part in transactions are a view, agreed by a
//! majority of all sites with ballots (a site promises a ballot durably before it answers).
//! A site that does not vote or acknowledge in time is suspected, and a view without it is
//! proposed; a restarted site (a new incarnation) or a site left out asks to join, and a
//! view with it is proposed. A new view settles everything of the old one without its
//! coordinators: the proposer picks as donor the member whose copy is synced to the latest
//! view, and every other member takes the donor's copy (a snapshot pulled in chunks) with
//! the list of the old view's transactions applied there, from which a coordinator learns
//! which of its own committed. Transactions run only within an installed view whose members
//! all hold the same copy.
//!
//! A restarted site rebuilds its copy from its log ([`Site::recover`]) and joins: as the
//! donor if its copy is synced to the latest view, otherwise by taking a snapshot.

use crate::db::{Db, DbError, HistoryRow, Key, Op, Scale, Write};
use crate::lock::{Grant, LockTable, Mode, Ts};
use crate::msg::{
    decode_packet_into, put_header, Header, Member, Msg, MsgError, Record, Vote, Work,
};
use crate::TxnId;
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use thiserror::Error;
use txcast_proto::codec::Writer;
use txcast_proto::timer::TimerWheel;
use txcast_proto::Instant;

mod view;
pub use view::View;
use view::{Phase, Proposal, Sync};

/// Sites a database may have (votes and acknowledgements are bit sets).
pub const SITES_MAX: u16 = 64;
/// The timer wheel: 1 ms ticks, a second around, and room for every timer of a site's
/// bounded tables many times over (stale entries are dropped when the wheel fills).
/// Record and packet buffers a site keeps for reuse (see [`Site::recycle_record`]).
pub const SPARE_BUFFERS: usize = 1024;
const TIMER_TICK_NS: u64 = 1_000_000;
const TIMER_SLOTS: usize = 1024;
const TIMERS_MAX: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct SiteConfig {
    pub site: u16,
    pub sites: u16,
    /// This process's life: a restarted site takes a larger one (transaction ids and packets
    /// of an earlier life are told apart by it).
    pub incarnation: u32,
    pub scale: Scale,
    /// Transactions this site coordinates at once (running or waiting to retry); `submit`
    /// refuses more.
    pub coordinated_max: usize,
    /// Transactions of other sites prepared (or applied, until their `END`) here at once;
    /// more are voted `Busy`.
    pub prepared_max: usize,
    /// A coordinator aborts a transaction not locked or voted on by then; a participant gives
    /// up a lock wait by then, and asks the coordinator once in doubt that long.
    pub vote_timeout: Duration,
    /// Prepares, decisions and queries go again this often until answered.
    pub resend: Duration,
    /// The first retry's backoff; it doubles with each retry up to `backoff_max`.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// Attempts of one transaction before it is given up.
    pub attempts_max: u32,
    /// Bytes of a packet to a peer (messages are batched up to this).
    pub packet_bytes: usize,
    /// A proposer waits this long for promises and installs; a site fenced by a promise, or
    /// pulling a snapshot with no progress, this long before it proposes again.
    pub view_timeout: Duration,
    /// Snapshot chunks a member asks for at once.
    pub sync_window: usize,
}

impl SiteConfig {
    pub fn new(site: u16, sites: u16, incarnation: u32, scale: Scale) -> SiteConfig {
        SiteConfig {
            site,
            sites,
            incarnation,
            scale,
            coordinated_max: 4096,
            prepared_max: 16384,
            vote_timeout: Duration::from_millis(500),
            resend: Duration::from_millis(50),
            backoff: Duration::from_micros(200),
            backoff_max: Duration::from_millis(20),
            attempts_max: 1000,
            packet_bytes: 1400,
            view_timeout: Duration::from_millis(300),
            sync_window: 64,
        }
    }
}

/// DebitCredit's one transaction: move `delta` into an account, its teller and branch, and
/// record it in the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub account: u32,
    pub teller: u32,
    pub branch: u32,
    pub delta: i64,
}

/// Why an attempt aborted (retried) or a transaction was given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Wait-die: it would have waited for an older transaction.
    Conflict,
    /// A participant's table was full.
    Busy,
    /// Not locked or voted on in time (a site down or cut off).
    Timeout,
    /// Ended by a view change before it could commit.
    View,
    /// A log write or `fdatasync` failed at a site.
    Broken,
    /// A tuple does not exist at a participant.
    BadKey,
    /// Restarted too many times.
    Attempts,
}

/// Adds `n` to the count of `cause` in a list of counts by cause.
pub fn count_cause(counts: &mut Vec<(Cause, u64)>, cause: Cause, n: u64) {
    match counts.iter_mut().find(|(c, _)| *c == cause) {
        Some(e) => e.1 += n,
        None => counts.push((cause, n)),
    }
}

/// What the site tells its clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Durable here and decided: the account's balance after the transfer.
    Committed {
        tag: u64,
        txn: TxnId,
        balance: i64,
        attempts: u32,
        submitted: Instant,
    },
    /// Given up, with nothing of it applied anywhere.
    Aborted {
        tag: u64,
        cause: Cause,
        attempts: u32,
    },
    /// The outcome cannot be told: this site's log failed while the transfer's commit
    /// record was being written, or the site was left out of the view while the commit was
    /// under way. The transfer is applied everywhere or nowhere; which, the site cannot
    /// say. Not acknowledged.
    Unknown { tag: u64, attempts: u32 },
}

#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    #[error("this site coordinates {0} transactions already (its bound)")]
    Full(usize),
    #[error("this site's log failed: it takes no more transactions")]
    Broken,
    #[error("no tuple {0:?} in this database")]
    BadKey(Key),
    #[error("the delta must not be i64::MIN")]
    BadDelta,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("site {site} of {sites}: sites must be 1..={SITES_MAX} and site below it")]
    Sites { site: u16, sites: u16 },
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("log record {index} does not decode: {error}")]
    Log { index: usize, error: MsgError },
}

/// What a site counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub submitted: u64,
    pub committed: u64,
    pub given_up: u64,
    /// Transfers whose outcome this site could not tell its client (its log failed while
    /// their commit record was being written).
    pub unknown: u64,
    pub retries_conflict: u64,
    pub retries_busy: u64,
    pub retries_timeout: u64,
    pub prepared: u64,
    pub votes_no: u64,
    pub resent: u64,
    pub queries: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    pub dropped_malformed: u64,
    /// Packets of an earlier life of their sender, or written for an earlier life of this
    /// site.
    pub dropped_stale: u64,
    /// Messages not sent because the peer's incarnation was not known yet.
    pub unsent_unknown: u64,
    pub hellos: u64,
    pub dropped_foreign: u64,
    pub unexpected: u64,
    pub log_records: u64,
    pub log_bytes: u64,
    pub lock_waits: u64,
    /// Prepares without an outcome found by recovery (settled by the next view).
    pub recovered_in_doubt: u64,
    /// Logs compacted ([`Site::compact`]).
    pub compactions: u64,
    pub retries_view: u64,
    /// Views proposed by this site, views installed here, and of those as the donor.
    pub proposals: u64,
    pub views: u64,
    pub donated: u64,
    /// Snapshots taken, and their chunks received; installs that needed none (the copy had
    /// the donor's fingerprint).
    pub snapshots: u64,
    pub snapshots_spared: u64,
    pub snapshot_chunks: u64,
    /// Sites this site suspected (no vote, acknowledgement or answer in time).
    pub suspicions: u64,
    /// Times this site found itself left out of the view.
    pub left_out: u64,
    /// Messages of a view this site is not in, or of another ballot, ignored.
    pub dropped_view: u64,
}

struct Client {
    tag: u64,
    transfer: Transfer,
    ts: Ts,
    attempts: u32,
    submitted: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CPhase {
    Locking,
    Voting,
    /// Decided commit: record appended and applied, `DECIDE` sent; waiting for the record
    /// to be durable and for every acknowledgement.
    Committing,
    /// Committing when a view change came to a site that is not its donor: the outcome is
    /// whether the donor's copy has it.
    Resolving,
}

struct Coord {
    client: Client,
    work: Option<Work>,
    phase: CPhase,
    /// Participants (the view's other members when it executed), their yes votes, their
    /// acknowledgements.
    parts: u64,
    yes: u64,
    acked: u64,
    /// The commit record is durable.
    logged: bool,
    /// Resolving: the ballot of the view whose donor's copy tells the outcome, and whether
    /// that copy has it (then it is answered once that view is complete: every member
    /// durably synced to it, so every later view's copy descends from it).
    resolve: u64,
    known: bool,
    deadline: Instant,
    timer: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PPhase {
    Locking,
    Logging,
    Voted,
    /// Applied; the committed record is being made durable.
    Acking,
    /// Applied and acknowledged: kept until `END` (a view change asks what was applied).
    Applied,
}

struct Part {
    work: Work,
    phase: PPhase,
    deadline: Instant,
    timer: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKey {
    Coord(TxnId),
    Part(TxnId),
}

#[derive(Clone, Copy, Debug)]
enum LogWait {
    CoordCommit(TxnId),
    PartVote(TxnId),
    PartAck(TxnId),
    /// A promise of this ballot is durable: answer its proposer.
    Promise(u64),
    /// The snapshot of this ballot's view is durable here.
    Synced(u64),
}

pub struct Site {
    cfg: SiteConfig,
    db: Db,
    locks: LockTable,
    next_seq: u64,
    coord: HashMap<TxnId, Coord>,
    parts: HashMap<TxnId, Part>,
    retries: BTreeMap<(Instant, u64), Client>,
    retry_uniq: u64,
    /// Every transaction's next timer (entries of finished or rescheduled ones are skipped
    /// when they come up: each entity keeps the time it is waiting for).
    timers: TimerWheel<TimerKey>,
    fired: Vec<(Instant, TimerKey)>,
    /// Records emitted; the driver has made `durable` of them durable.
    lsn: u64,
    taken: u64,
    durable: u64,
    log_out: VecDeque<Vec<u8>>,
    log_waits: VecDeque<(u64, LogWait)>,
    broken: bool,
    /// Transactions whose commit record was being written when the log failed: it may be on
    /// disk, so no abort is answered for them (the restarted site will know).
    uncertain: rustc_hash::FxHashSet<TxnId>,
    out: Vec<Vec<u8>>,
    tx: VecDeque<(u16, Vec<u8>)>,
    events: VecDeque<Event>,
    /// Each peer's incarnation as last heard (0: not heard from yet).
    peer_inc: Vec<u32>,
    /// A message being encoded (kept to reuse its allocation).
    scratch: Vec<u8>,
    /// The messages of the packet being handled (kept to reuse its allocation).
    rx: Vec<Msg>,
    /// Buffers of records and packets the driver gave back, for the next ones.
    spare_records: Vec<Vec<u8>>,
    spare_packets: Vec<Vec<u8>>,
    /// Whether each peer has shown it knows this site's incarnation (a packet written for
    /// it); hellos go to those that have not, every `resend`.
    known_by: Vec<bool>,
    hello_at: Instant,
    counters: Counters,
    /// Views: what this site is (out of every view, taking a snapshot, or a member), the
    /// view installed last, the ballot promised, the ballot its copy is synced to.
    phase: Phase,
    view: View,
    promised: u64,
    synced: u64,
    /// When the promise went above the view (a view change under way).
    fenced_at: Instant,
    proposal: Option<Proposal>,
    /// As the donor of a view: its ballot and the snapshot (applied list and image).
    snapshot: Option<(u64, Vec<u8>)>,
    sync: Option<Sync>,
    /// The next step of the view machinery.
    view_at: Instant,
    /// Joins heard: each site's incarnation, synced ballot and when.
    joins: Vec<Option<(u32, u64, Instant)>>,
    /// A member proposes the joiners it heard at this time (spread by rank).
    join_due: Option<Instant>,
    /// When this site last heard of a live view it is not in, and since when it is out.
    live_seen: Option<Instant>,
    out_since: Instant,
    /// When each peer was last told this site's view.
    told: Vec<Instant>,
    /// Messages to this site itself (a proposer is a member of its proposal).
    local: VecDeque<Msg>,
    /// The highest ballot heard of (a proposal goes above it).
    seen: u64,
    /// The log position of the last promise (answered once durable).
    promise_lsn: u64,
    installed_at: Instant,
    /// A member tells every site its view at this time.
    gossip_at: Instant,
    /// Members of the view known to be durably synced to it (this site's bit once its own
    /// sync is durable): with all of them the view is complete.
    complete: u64,
}

fn bit(site: u16) -> u64 {
    1u64 << site
}

/// The sites of a bit set, lowest first.
fn sites_of(set: u64) -> impl Iterator<Item = u16> {
    (0..SITES_MAX).filter(move |&s| set & bit(s) != 0)
}

fn locks_of(writes: &[Write]) -> crate::lock::Locks {
    writes
        .iter()
        .map(|w| {
            let m = match w.op {
                Op::Set(_) => Mode::Exclusive,
                Op::Add(_) => Mode::Increment,
            };
            (w.key, m)
        })
        .collect()
}

impl Site {
    /// A fresh site with an empty log.
    pub fn new(cfg: SiteConfig) -> Result<Site, ConfigError> {
        if cfg.sites == 0 || cfg.sites > SITES_MAX || cfg.site >= cfg.sites {
            return Err(ConfigError::Sites {
                site: cfg.site,
                sites: cfg.sites,
            });
        }
        let db = Db::new(cfg.scale)?;
        let n = cfg.sites as usize;
        Ok(Site {
            cfg,
            db,
            locks: LockTable::new(),
            next_seq: 0,
            coord: HashMap::default(),
            parts: HashMap::default(),
            retries: BTreeMap::new(),
            retry_uniq: 0,
            timers: TimerWheel::new(TIMER_TICK_NS, TIMER_SLOTS, TIMERS_MAX, Instant::ZERO),
            fired: Vec::new(),
            lsn: 0,
            taken: 0,
            durable: 0,
            log_out: VecDeque::new(),
            log_waits: VecDeque::new(),
            broken: false,
            uncertain: Default::default(),
            out: vec![Vec::new(); n],
            tx: VecDeque::new(),
            events: VecDeque::new(),
            peer_inc: vec![0; n],
            scratch: Vec::new(),
            rx: Vec::new(),
            spare_records: Vec::new(),
            spare_packets: Vec::new(),
            known_by: vec![false; n],
            hello_at: Instant::ZERO,
            counters: Counters::default(),
            phase: Phase::Out,
            view: View::default(),
            promised: 0,
            synced: 0,
            fenced_at: Instant::ZERO,
            proposal: None,
            snapshot: None,
            sync: None,
            view_at: Instant::ZERO,
            joins: vec![None; n],
            join_due: None,
            live_seen: None,
            out_since: Instant::ZERO,
            told: vec![Instant::ZERO; n],
            local: VecDeque::new(),
            seen: 0,
            promise_lsn: 0,
            installed_at: Instant::ZERO,
            gossip_at: Instant::ZERO,
            complete: 0,
        })
    }

    /// A restarted site: its copy rebuilt from the records of its log (the bodies of the
    /// whole frames, in order; all of them durable). Committed work is redone; work prepared
    /// with no outcome is dropped (the view the site joins settles it: its donor's copy is
    /// the outcome). The site starts out of every view and asks to join.
    pub fn recover<'a>(
        cfg: SiteConfig,
        now: Instant,
        records: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Site, ConfigError> {
        let mut s = Site::new(cfg)?;
        let mut prepared: BTreeMap<TxnId, Work> = BTreeMap::new();
        for (index, body) in records.into_iter().enumerate() {
            let rec = Record::decode(body).map_err(|error| ConfigError::Log { index, error })?;
            s.lsn += 1;
            match rec {
                Record::Prepare(w) => {
                    prepared.insert(w.txn, w);
                }
                Record::Commit(w) => {
                    s.db.apply(&w.writes, w.row.as_ref())?;
                }
                Record::Committed(t) => {
                    if let Some(w) = prepared.remove(&t) {
                        s.db.apply(&w.writes, w.row.as_ref())?;
                    }
                }
                Record::Aborted(t) => {
                    prepared.remove(&t);
                }
                Record::Image(b) => {
                    s.db = Db::decode_image(s.cfg.scale, &b)?;
                    prepared.clear();
                }
                Record::Promise(b) => s.promised = s.promised.max(b),
                Record::Synced(b) => {
                    s.synced = b;
                    s.promised = s.promised.max(b);
                }
            }
        }
        s.durable = s.lsn;
        s.taken = s.lsn;
        s.counters.recovered_in_doubt = prepared.len() as u64;
        s.out_since = now;
        s.view_at = now;
        Ok(s)
    }

    pub fn config(&self) -> &SiteConfig {
        &self.cfg
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The counters, without a copy (for a driver that looks at a few of them often).
    pub fn counters_ref(&self) -> &Counters {
        &self.counters
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Transactions this site coordinates (running or waiting to retry).
    pub fn coordinating(&self) -> usize {
        self.coord.len() + self.retries.len()
    }

    /// Whether nothing is under way here: no transaction, no lock, no decision to deliver,
    /// no record to write, no view change.
    pub fn is_quiet(&self) -> bool {
        self.coord.is_empty()
            && self.retries.is_empty()
            && self.parts.is_empty()
            && self.locks.is_empty()
            && self.log_out.is_empty()
            && self.log_waits.is_empty()
            && self.proposal.is_none()
            && self.phase == Phase::Normal
    }

    /// The view this site is a member of, synced (none while out or taking a snapshot).
    pub fn view(&self) -> Option<&View> {
        (self.phase == Phase::Normal).then_some(&self.view)
    }

    /// The ballot this site's copy is synced to.
    pub fn synced(&self) -> u64 {
        self.synced
    }

    /// What is under way, for a report.
    pub fn describe(&self) -> String {
        format!(
            "site {} ({:?}, view {:#x} of {:?}, promised {:#x}, synced {:#x}{}): coordinating {} (+{} to retry), prepared {}, locks {}, log {} to write {} waiting",
            self.cfg.site,
            self.phase,
            self.view.ballot,
            self.view.members.iter().map(|m| m.site).collect::<Vec<_>>(),
            self.promised,
            self.synced,
            if self.proposal.is_some() { ", proposing" } else { "" },
            self.coord.len(),
            self.retries.len(),
            self.parts.len(),
            self.locks.len(),
            self.log_out.len(),
            self.log_waits.len()
        )
    }

    /// Starts a transfer for the client's `tag`; its outcome comes as an [`Event`].
    pub fn submit(&mut self, now: Instant, tag: u64, t: Transfer) -> Result<(), SubmitError> {
        if self.broken {
            return Err(SubmitError::Broken);
        }
        for key in [
            Key::account(t.account),
            Key::teller(t.teller),
            Key::branch(t.branch),
        ] {
            if !self.db.has(key) {
                return Err(SubmitError::BadKey(key));
            }
        }
        if t.delta == i64::MIN {
            return Err(SubmitError::BadDelta);
        }
        if self.coordinating() >= self.cfg.coordinated_max {
            return Err(SubmitError::Full(self.cfg.coordinated_max));
        }
        self.counters.submitted += 1;
        let seq = self.next_seq;
        let client = Client {
            tag,
            transfer: t,
            ts: Ts {
                time: now.0,
                site: self.cfg.site,
                seq,
            },
            attempts: 0,
            submitted: now,
        };
        self.start(now, client);
        Ok(())
    }

    /// Whether transactions may start here: a synced member of a view no change is under
    /// way from.
    fn can_run(&self) -> bool {
        self.phase == Phase::Normal && self.promised == self.view.ballot && !self.broken
    }

    fn start(&mut self, now: Instant, mut client: Client) {
        if !self.can_run() {
            // Waits for the view (retries start once it is there).
            self.backoff(now, client);
            return;
        }
        client.attempts += 1;
        let txn = TxnId {
            site: self.cfg.site,
            incarnation: self.cfg.incarnation,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        let t = client.transfer;
        let locks = [
            (Key::account(t.account), Mode::Exclusive),
            (Key::teller(t.teller), Mode::Increment),
            (Key::branch(t.branch), Mode::Increment),
        ];
        let ts = client.ts;
        let deadline = now + self.cfg.vote_timeout;
        let c = Coord {
            client,
            work: None,
            phase: CPhase::Locking,
            parts: 0,
            yes: 0,
            acked: 0,
            logged: false,
            resolve: 0,
            known: false,
            deadline,
            timer: deadline,
        };
        match self.locks.request(txn, ts, &locks) {
            Grant::Die => self.retry(now, c.client, Cause::Conflict),
            Grant::Granted => {
                self.coord.insert(txn, c);
                self.execute(now, txn);
            }
            Grant::Waiting => {
                self.counters.lock_waits += 1;
                self.coord.insert(txn, c);
                self.arm(deadline, TimerKey::Coord(txn));
            }
        }
    }

    /// The origin holds its locks: read, build the write set, prepare everywhere else.
    fn execute(&mut self, now: Instant, txn: TxnId) {
        let parts = self.view_others();
        let Some(c) = self.coord.get_mut(&txn) else {
            return;
        };
        let t = c.client.transfer;
        let acct = Key::account(t.account);
        let balance = self.db.balance(acct).unwrap_or(0).wrapping_add(t.delta);
        let work = Work {
            txn,
            ts: c.client.ts,
            writes: smallvec::smallvec![
                Write {
                    key: acct,
                    op: Op::Set(balance),
                },
                Write {
                    key: Key::teller(t.teller),
                    op: Op::Add(t.delta),
                },
                Write {
                    key: Key::branch(t.branch),
                    op: Op::Add(t.delta),
                },
            ],
            row: Some(HistoryRow {
                txn,
                account: t.account,
                teller: t.teller,
                branch: t.branch,
                delta: t.delta,
            }),
        };
        c.work = Some(work);
        c.parts = parts;
        if parts == 0 {
            return self.decide_commit(now, txn);
        }
        c.phase = CPhase::Voting;
        c.timer = (now + self.cfg.resend).min(c.deadline);
        let timer = c.timer;
        // One encoding of the prepare for every participant.
        let mut m = std::mem::take(&mut self.scratch);
        m.clear();
        Msg::put_prepare(
            &mut Writer::new(&mut m),
            self.view.ballot,
            c.work.as_ref().expect("set above"),
        );
        for s in sites_of(parts) {
            self.send_encoded(s, &m);
        }
        self.scratch = m;
        self.arm(timer, TimerKey::Coord(txn));
    }

    /// Every participant voted yes: the commit record appended and applied (in the log's
    /// order, so the copy is always what the log redoes), the decision sent.
    fn decide_commit(&mut self, now: Instant, txn: TxnId) {
        let Some(c) = self.coord.get_mut(&txn) else {
            return;
        };
        c.phase = CPhase::Committing;
        c.deadline = now + self.cfg.vote_timeout;
        c.timer = now + self.cfg.resend;
        let (timer, parts) = (c.timer, c.parts);
        let work = c
            .work
            .as_ref()
            .expect("a committing transaction has its work");
        let mut b = Vec::with_capacity(128);
        Record::encode_work(true, work, &mut b);
        if self.db.apply(&work.writes, work.row.as_ref()).is_err() {
            self.counters.unexpected += 1;
        }
        self.push_record(b, Some(LogWait::CoordCommit(txn)));
        if parts != 0 {
            let msg = Msg::Decide { txn, commit: true };
            for s in sites_of(parts) {
                self.send(s, &msg);
            }
            self.arm(timer, TimerKey::Coord(txn));
        }
    }

    /// A committing transaction with its record durable and every acknowledgement: the
    /// client answered, the participants told to forget.
    fn maybe_finish(&mut self, txn: TxnId) {
        let done = self.coord.get(&txn).is_some_and(|c| {
            c.phase == CPhase::Committing && c.logged && c.acked & c.parts == c.parts
        });
        if !done {
            return;
        }
        let c = self.coord.remove(&txn).expect("checked");
        let work = c.work.expect("a committing transaction has its work");
        let balance = match work.writes[0].op {
            Op::Set(v) => v,
            Op::Add(v) => v,
        };
        self.counters.committed += 1;
        self.events.push_back(Event::Committed {
            tag: c.client.tag,
            txn,
            balance,
            attempts: c.client.attempts,
            submitted: c.client.submitted,
        });
        for s in sites_of(c.parts) {
            self.send(s, &Msg::End { txn });
        }
    }

    /// Schedules `key` at `at`. A full wheel first drops the entries no entity waits for.
    fn arm(&mut self, at: Instant, key: TimerKey) {
        if self.timers.schedule(at, key).is_ok() {
            return;
        }
        let (coord, parts) = (&self.coord, &self.parts);
        self.timers.retain(|d, k| match k {
            TimerKey::Coord(t) => coord.get(&t).is_some_and(|c| c.timer == d),
            TimerKey::Part(t) => parts.get(&t).is_some_and(|c| c.timer == d),
        });
        if self.timers.schedule(at, key).is_err() {
            // More live timers than the tables can hold: cannot happen with their bounds.
            self.counters.unexpected += 1;
        }
    }

    fn append(&mut self, rec: Record, wait: Option<LogWait>) {
        let mut b = self
            .spare_records
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(128));
        rec.encode(&mut b);
        self.push_record(b, wait);
    }

    /// Queues an encoded record for the log, and what waits for it to be durable.
    fn push_record(&mut self, b: Vec<u8>, wait: Option<LogWait>) {
        if self.broken {
            // Nothing more is written, or waited for, on a failed log.
            return;
        }
        self.counters.log_records += 1;
        self.counters.log_bytes += b.len() as u64;
        self.log_out.push_back(b);
        self.lsn += 1;
        if let Some(w) = wait {
            self.log_waits.push_back((self.lsn, w));
        }
    }

    /// Queues `msg` for site `to`, in the packet being filled for it; a message to this
    /// site itself is handled after the current step. A peer whose incarnation is not known
    /// yet gets nothing (what matters is sent again once it is).
    fn send(&mut self, to: u16, msg: &Msg) {
        if to == self.cfg.site {
            self.local.push_back(msg.clone());
            return;
        }
        let mut m = std::mem::take(&mut self.scratch);
        m.clear();
        msg.put(&mut Writer::new(&mut m));
        self.send_encoded(to, &m);
        self.scratch = m;
    }

    /// Queues an encoded message (see [`Site::send`]).
    fn send_encoded(&mut self, to: u16, msg: &[u8]) {
        let peer = self.peer_inc[to as usize];
        if peer == 0 {
            self.counters.unsent_unknown += 1;
            return;
        }
        let header = Header {
            site: self.cfg.site,
            incarnation: self.cfg.incarnation,
            to: peer,
        };
        let room = self.cfg.packet_bytes;
        let buf = &mut self.out[to as usize];
        // A message that would take the packet past `packet_bytes` starts the next one (a
        // message longer than that goes alone).
        if buf.len() > crate::msg::PACKET_HEADER && buf.len() + msg.len() > room {
            let next = self
                .spare_packets
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(room));
            let full = std::mem::replace(buf, next);
            self.tx.push_back((to, full));
            self.counters.packets_out += 1;
        }
        let buf = &mut self.out[to as usize];
        if buf.is_empty() {
            put_header(&mut Writer::new(buf), header);
        }
        buf.extend_from_slice(msg);
    }

    /// Gives back a record's buffer taken from [`Site::poll_log`] once it is written, for a
    /// later record (at most [`SPARE_BUFFERS`] are kept).
    pub fn recycle_record(&mut self, mut b: Vec<u8>) {
        if self.spare_records.len() < SPARE_BUFFERS {
            b.clear();
            self.spare_records.push(b);
        }
    }

    /// Gives back a packet's buffer taken from [`Site::poll_transmit`] once it is sent (at
    /// most [`SPARE_BUFFERS`] are kept).
    pub fn recycle_packet(&mut self, mut b: Vec<u8>) {
        if self.spare_packets.len() < SPARE_BUFFERS {
            b.clear();
            self.spare_packets.push(b);
        }
    }

    /// A hello (a packet with no message) to each peer that has not shown it knows this
    /// site's incarnation.
    fn hellos(&mut self, now: Instant) {
        if now < self.hello_at {
            return;
        }
        self.hello_at = now + self.cfg.resend;
        for s in self.others().collect::<Vec<_>>() {
            if !self.known_by[s as usize] {
                let mut b = Vec::with_capacity(crate::msg::PACKET_HEADER);
                put_header(
                    &mut Writer::new(&mut b),
                    Header {
                        site: self.cfg.site,
                        incarnation: self.cfg.incarnation,
                        to: self.peer_inc[s as usize],
                    },
                );
                self.tx.push_back((s, b));
                self.counters.hellos += 1;
            }
        }
    }

    fn others(&self) -> impl Iterator<Item = u16> {
        let me = self.cfg.site;
        (0..self.cfg.sites).filter(move |&s| s != me)
    }

    /// The other members of this site's view, as a bit set.
    fn view_others(&self) -> u64 {
        let me = self.cfg.site;
        self.view
            .members
            .iter()
            .filter(|m| m.site != me)
            .fold(0, |a, m| a | bit(m.site))
    }

    /// An attempt failed: retried after a backoff, or given up.
    fn retry(&mut self, now: Instant, client: Client, cause: Cause) {
        match cause {
            Cause::Conflict => self.counters.retries_conflict += 1,
            Cause::Busy => self.counters.retries_busy += 1,
            Cause::Timeout => self.counters.retries_timeout += 1,
            Cause::View => self.counters.retries_view += 1,
            Cause::Broken | Cause::BadKey | Cause::Attempts => {
                return self.give_up(client, cause);
            }
        }
        if client.attempts >= self.cfg.attempts_max {
            return self.give_up(client, Cause::Attempts);
        }
        self.backoff(now, client);
    }

    fn backoff(&mut self, now: Instant, client: Client) {
        let base = self.cfg.backoff.as_nanos() as u64;
        let exp = base.saturating_mul(1 << client.attempts.min(16));
        let cap = exp.min(self.cfg.backoff_max.as_nanos() as u64).max(1);
        // Spread retries of colliding transactions: half to one and a half times the cap,
        // by a hash of the transaction's timestamp and attempt (no randomness in the core).
        let mut h =
            client.ts.time ^ client.ts.seq.rotate_left(17) ^ ((client.attempts as u64) << 40);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        let wait = cap / 2 + h % cap;
        self.retry_uniq += 1;
        self.retries.insert(
            (Instant(now.0.saturating_add(wait)), self.retry_uniq),
            client,
        );
    }

    fn give_up(&mut self, client: Client, cause: Cause) {
        self.counters.given_up += 1;
        self.events.push_back(Event::Aborted {
            tag: client.tag,
            cause,
            attempts: client.attempts,
        });
    }

    /// Aborts a coordinated attempt: locks released, participants told, the client retried.
    fn abort_coord(&mut self, now: Instant, txn: TxnId, cause: Cause) {
        let Some(c) = self.coord.remove(&txn) else {
            return;
        };
        self.locks.release(txn);
        if c.phase == CPhase::Voting {
            let msg = Msg::Decide { txn, commit: false };
            for s in sites_of(c.parts) {
                self.send(s, &msg);
            }
        }
        self.retry(now, c.client, cause);
        self.grant_waiters(now);
    }

    /// Transactions whose locks were freed go on.
    fn grant_waiters(&mut self, now: Instant) {
        while let Some(txn) = self.locks.poll_granted() {
            if self
                .coord
                .get(&txn)
                .is_some_and(|c| c.phase == CPhase::Locking)
            {
                self.execute(now, txn);
            } else if self
                .parts
                .get(&txn)
                .is_some_and(|p| p.phase == PPhase::Locking)
            {
                self.prepared(txn);
            }
        }
    }

    /// A participant holds its locks: log the prepare, vote once durable.
    fn prepared(&mut self, txn: TxnId) {
        let Some(p) = self.parts.get_mut(&txn) else {
            return;
        };
        p.phase = PPhase::Logging;
        let mut b = Vec::with_capacity(128);
        Record::encode_work(false, &p.work, &mut b);
        self.counters.prepared += 1;
        self.push_record(b, Some(LogWait::PartVote(txn)));
    }

    fn vote(&mut self, to: u16, txn: TxnId, vote: Vote) {
        if vote != Vote::Yes {
            self.counters.votes_no += 1;
        }
        self.send(to, &Msg::Vote { txn, vote });
    }

    /// A packet from a peer. Malformed packets, packets of an earlier life of their sender,
    /// and packets claiming to be from this site or from no site of the database are dropped
    /// and counted.
    pub fn handle_packet(&mut self, now: Instant, bytes: &[u8]) -> Result<(), MsgError> {
        let mut msgs = std::mem::take(&mut self.rx);
        let r = self.handle_decoded(now, bytes, &mut msgs);
        msgs.clear();
        self.rx = msgs;
        r
    }

    fn handle_decoded(
        &mut self,
        now: Instant,
        bytes: &[u8],
        msgs: &mut Vec<Msg>,
    ) -> Result<(), MsgError> {
        let h = match decode_packet_into(bytes, msgs) {
            Ok(h) => h,
            Err(e) => {
                self.counters.dropped_malformed += 1;
                return Err(e);
            }
        };
        if h.site >= self.cfg.sites || h.site == self.cfg.site {
            self.counters.dropped_foreign += 1;
            return Ok(());
        }
        let from = h.site as usize;
        if h.incarnation < self.peer_inc[from] {
            self.counters.dropped_stale += 1;
            return Ok(());
        }
        if h.incarnation > self.peer_inc[from] {
            // A peer's new life: it does not know this site yet.
            self.peer_inc[from] = h.incarnation;
            self.known_by[from] = false;
        }
        if h.to == self.cfg.incarnation {
            self.known_by[from] = true;
        } else if !msgs.is_empty() {
            // Written for an earlier life of this site (or before the peer knew it).
            self.counters.dropped_stale += 1;
            return Ok(());
        }
        self.counters.packets_in += 1;
        for m in msgs.drain(..) {
            self.handle_msg(now, h, m);
        }
        self.settle(now);
        Ok(())
    }

    /// After a step: lock waiters granted, messages to itself handled.
    fn settle(&mut self, now: Instant) {
        loop {
            self.grant_waiters(now);
            let Some(m) = self.local.pop_front() else {
                break;
            };
            let me = Header {
                site: self.cfg.site,
                incarnation: self.cfg.incarnation,
                to: self.cfg.incarnation,
            };
            self.handle_msg(now, me, m);
        }
    }

    /// Whether `from` is a member of this site's view, in that incarnation.
    fn is_member(&self, from: Header) -> bool {
        self.view
            .members
            .iter()
            .any(|m| m.site == from.site && m.incarnation == from.incarnation)
    }

    fn handle_msg(&mut self, now: Instant, from: Header, m: Msg) {
        let me = self.cfg.site;
        match m {
            Msg::Prepare { ballot, work } => {
                if work.txn.site != from.site || work.txn.incarnation != from.incarnation {
                    self.counters.unexpected += 1;
                    return;
                }
                if ballot != self.view.ballot
                    || self.phase != Phase::Normal
                    || !self.is_member(from)
                {
                    self.counters.dropped_view += 1;
                    if ballot < self.view.ballot && self.phase == Phase::Normal {
                        self.tell_view(now, from.site);
                    }
                    return;
                }
                if self.promised != ballot {
                    // A view change is under way: nothing new is prepared.
                    return self.vote(from.site, work.txn, Vote::Busy);
                }
                self.on_prepare(now, from.site, work);
            }
            Msg::Vote { txn, vote } => {
                if txn.site != me {
                    self.counters.unexpected += 1;
                    return;
                }
                self.on_vote(now, from.site, txn, vote);
            }
            Msg::Decide { txn, commit } => {
                if txn.site != from.site {
                    self.counters.unexpected += 1;
                    return;
                }
                self.on_decide(now, from.site, txn, commit);
            }
            Msg::Ack { txn } => {
                if txn.site != me {
                    self.counters.unexpected += 1;
                    return;
                }
                if let Some(c) = self.coord.get_mut(&txn) {
                    if c.phase == CPhase::Committing {
                        c.acked |= bit(from.site) & c.parts;
                        self.maybe_finish(txn);
                    }
                }
            }
            Msg::End { txn } => {
                if txn.site != from.site {
                    self.counters.unexpected += 1;
                    return;
                }
                if self
                    .parts
                    .get(&txn)
                    .is_some_and(|p| p.phase == PPhase::Applied)
                {
                    self.parts.remove(&txn);
                }
            }
            Msg::Query { txn } => {
                if txn.site != me || txn.incarnation != self.cfg.incarnation {
                    // An earlier life's transaction: the view change settles it.
                    return;
                }
                match self.coord.get(&txn).map(|c| c.phase) {
                    Some(CPhase::Committing) => {
                        self.send(from.site, &Msg::Decide { txn, commit: true })
                    }
                    Some(_) => {}
                    None if self.uncertain.contains(&txn) => {}
                    // No record of it: never committed (presumed abort), or committed,
                    // acknowledged by all and forgotten (then the asker only waits for END).
                    None => self.send(from.site, &Msg::Decide { txn, commit: false }),
                }
            }
            Msg::Join { synced } => self.on_join(now, from, synced),
            Msg::Propose { ballot, members } => self.on_propose(now, from, ballot, members),
            Msg::Promise { ballot, synced } => self.on_promise(now, from, ballot, synced),
            Msg::Nack { ballot, promised } => self.on_nack(now, ballot, promised),
            Msg::Install {
                ballot,
                donor,
                synced,
                fingerprint,
                members,
            } => self.on_install(
                now,
                from,
                view::Install {
                    ballot,
                    donor,
                    synced,
                    fingerprint,
                    members,
                },
            ),
            Msg::Installed { ballot } => self.on_installed(now, from, ballot),
            Msg::View { ballot, members } => self.on_view(now, from, ballot, members),
            Msg::SnapGet { ballot, offset } => self.on_snap_get(from, ballot, offset),
            Msg::SnapData {
                ballot,
                offset,
                total,
                data,
            } => self.on_snap_data(now, from, ballot, offset, total, data),
            Msg::Synced { ballot, ask } => self.on_synced(now, from, ballot, ask),
        }
    }

    fn on_prepare(&mut self, now: Instant, from: u16, work: Work) {
        let txn = work.txn;
        if let Some(p) = self.parts.get(&txn) {
            if p.phase == PPhase::Voted {
                self.vote(from, txn, Vote::Yes);
            }
            return;
        }
        if self.broken {
            return self.vote(from, txn, Vote::Broken);
        }
        if work.writes.iter().any(|w| !self.db.has(w.key)) {
            return self.vote(from, txn, Vote::BadKey);
        }
        if self.parts.len() >= self.cfg.prepared_max {
            return self.vote(from, txn, Vote::Busy);
        }
        match self.locks.request(txn, work.ts, &locks_of(&work.writes)) {
            Grant::Die => self.vote(from, txn, Vote::Conflict),
            g => {
                let deadline = now + self.cfg.vote_timeout;
                self.parts.insert(
                    txn,
                    Part {
                        work,
                        phase: PPhase::Locking,
                        deadline,
                        timer: deadline,
                    },
                );
                if g == Grant::Granted {
                    self.prepared(txn);
                } else {
                    self.counters.lock_waits += 1;
                    self.arm(deadline, TimerKey::Part(txn));
                }
            }
        }
    }

    fn on_vote(&mut self, now: Instant, from: u16, txn: TxnId, vote: Vote) {
        let Some(c) = self.coord.get_mut(&txn) else {
            if vote == Vote::Yes
                && txn.incarnation == self.cfg.incarnation
                && !self.uncertain.contains(&txn)
            {
                // A vote for a forgotten transaction (aborted, or ended): it did not commit
                // in the voter's lifetime of it.
                self.send(from, &Msg::Decide { txn, commit: false });
            }
            return;
        };
        if c.parts & bit(from) == 0 {
            return;
        }
        match c.phase {
            CPhase::Voting => {}
            CPhase::Committing if vote == Vote::Yes && c.acked & bit(from) == 0 => {
                // Its decision was lost: again.
                return self.send(from, &Msg::Decide { txn, commit: true });
            }
            _ => return,
        }
        let cause = match vote {
            Vote::Yes => {
                c.yes |= bit(from);
                if c.yes == c.parts {
                    self.decide_commit(now, txn);
                }
                return;
            }
            Vote::Conflict => Cause::Conflict,
            Vote::Busy => Cause::Busy,
            Vote::Broken => {
                // A participant whose log failed: a view without it goes on.
                self.suspect(now, bit(from));
                Cause::View
            }
            Vote::BadKey => Cause::BadKey,
        };
        self.abort_coord(now, txn, cause);
    }

    fn on_decide(&mut self, now: Instant, from: u16, txn: TxnId, commit: bool) {
        let Some(p) = self.parts.get_mut(&txn) else {
            return;
        };
        match (commit, p.phase) {
            (_, PPhase::Acking) => {}
            (true, PPhase::Applied) => self.send(from, &Msg::Ack { txn }),
            (false, PPhase::Applied) => {
                // The coordinator forgot it: every participant acknowledged.
                self.parts.remove(&txn);
            }
            (true, PPhase::Locking) => {
                // A commit needs this site's yes vote, which needs its locks.
                self.counters.unexpected += 1;
            }
            (true, _) => {
                p.phase = PPhase::Acking;
                if self.db.apply(&p.work.writes, p.work.row.as_ref()).is_err() {
                    self.counters.unexpected += 1;
                }
                self.locks.release(txn);
                self.append(Record::Committed(txn), Some(LogWait::PartAck(txn)));
            }
            (false, phase) => {
                self.parts.remove(&txn);
                self.locks.release(txn);
                if phase != PPhase::Locking {
                    self.append(Record::Aborted(txn), None);
                }
            }
        }
        self.grant_waiters(now);
    }

    /// The driver made the first `upto` records of the log durable (see [`Site::taken`]).
    pub fn logged(&mut self, now: Instant, upto: u64) {
        if upto <= self.durable || self.broken {
            return;
        }
        self.durable = upto.min(self.taken);
        while let Some(&(lsn, wait)) = self.log_waits.front() {
            if lsn > self.durable {
                break;
            }
            self.log_waits.pop_front();
            match wait {
                LogWait::CoordCommit(txn) => self.committed(now, txn),
                LogWait::PartVote(txn) => {
                    if let Some(p) = self.parts.get_mut(&txn) {
                        if p.phase == PPhase::Logging {
                            p.phase = PPhase::Voted;
                            p.deadline = now + self.cfg.vote_timeout;
                            p.timer = now + self.cfg.resend;
                            let timer = p.timer;
                            self.arm(timer, TimerKey::Part(txn));
                            self.vote(txn.site, txn, Vote::Yes);
                        }
                    }
                }
                LogWait::PartAck(txn) => {
                    if let Some(p) = self.parts.get_mut(&txn) {
                        if p.phase == PPhase::Acking {
                            p.phase = PPhase::Applied;
                            p.timer = now + self.cfg.vote_timeout;
                            let timer = p.timer;
                            self.arm(timer, TimerKey::Part(txn));
                            self.send(txn.site, &Msg::Ack { txn });
                        }
                    }
                }
                LogWait::Promise(ballot) => self.promise_durable(now, ballot),
                LogWait::Synced(ballot) => self.synced_durable(now, ballot),
            }
        }
        self.settle(now);
    }

    /// The coordinator's commit record is durable: its locks released; answered once every
    /// participant acknowledged too.
    fn committed(&mut self, now: Instant, txn: TxnId) {
        let Some(c) = self.coord.get_mut(&txn) else {
            return;
        };
        c.logged = true;
        if c.phase == CPhase::Committing {
            self.locks.release(txn);
            self.maybe_finish(txn);
            self.grant_waiters(now);
        }
    }

    /// The log cannot be written (a full disk, a failed `fdatasync`): nothing waiting on it
    /// is acknowledged, this site's transactions are given up, and it takes no more work.
    pub fn log_failed(&mut self, now: Instant) {
        if self.broken {
            return;
        }
        self.broken = true;
        self.log_waits.clear();
        self.log_out.clear();
        let txns: Vec<TxnId> = self.coord.keys().copied().collect();
        for txn in txns {
            let c = &self.coord[&txn];
            match c.phase {
                CPhase::Committing if c.logged => {
                    // Durable and applied here: it finishes with its acknowledgements.
                }
                CPhase::Committing | CPhase::Resolving => {
                    // Its commit record may or may not be on disk (or its outcome is the
                    // donor's, which this site cannot take now): the client learns only
                    // that it is unknown.
                    let c = self.coord.remove(&txn).expect("listed");
                    self.locks.release(txn);
                    self.uncertain.insert(txn);
                    self.counters.unknown += 1;
                    self.events.push_back(Event::Unknown {
                        tag: c.client.tag,
                        attempts: c.client.attempts,
                    });
                }
                CPhase::Locking | CPhase::Voting => self.abort_coord(now, txn, Cause::Broken),
            }
        }
        for (_, c) in std::mem::take(&mut self.retries) {
            self.give_up(c, Cause::Broken);
        }
        self.settle(now);
    }

    /// Timers due: lock waits and vote deadlines, prepares, decisions and queries sent
    /// again, retries started, the view machinery.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self
            .known_by
            .iter()
            .enumerate()
            .any(|(s, &k)| !k && s != self.cfg.site as usize)
        {
            self.hellos(now);
        }
        if self.view_due().is_some_and(|t| now >= t) {
            self.view_tick(now);
        }
        let mut fired = std::mem::take(&mut self.fired);
        self.timers.expire(now, |at, key| fired.push((at, key)));
        for &(at, key) in &fired {
            match key {
                TimerKey::Coord(txn) => self.coord_timer(now, at, txn),
                TimerKey::Part(txn) => self.part_timer(now, at, txn),
            }
        }
        fired.clear();
        self.fired = fired;
        while let Some((&(at, uniq), _)) = self.retries.first_key_value() {
            if at > now || self.coord.len() >= self.cfg.coordinated_max {
                break;
            }
            let c = self.retries.remove(&(at, uniq)).expect("first");
            if self.broken {
                self.give_up(c, Cause::Broken);
            } else {
                self.start(now, c);
            }
        }
        self.settle(now);
    }

    fn coord_timer(&mut self, now: Instant, at: Instant, txn: TxnId) {
        let Some(c) = self.coord.get_mut(&txn) else {
            return;
        };
        if c.timer != at {
            return;
        }
        match c.phase {
            CPhase::Resolving => {}
            CPhase::Locking => {
                if now >= c.deadline {
                    self.abort_coord(now, txn, Cause::Timeout);
                }
            }
            CPhase::Voting => {
                if now >= c.deadline {
                    let silent = c.parts & !c.yes;
                    self.suspect(now, silent);
                    return self.abort_coord(now, txn, Cause::Timeout);
                }
                c.timer = (now + self.cfg.resend).min(c.deadline);
                let (timer, missing) = (c.timer, c.parts & !c.yes);
                let mut m = std::mem::take(&mut self.scratch);
                m.clear();
                Msg::put_prepare(
                    &mut Writer::new(&mut m),
                    self.view.ballot,
                    c.work.as_ref().expect("voting"),
                );
                self.arm(timer, TimerKey::Coord(txn));
                for s in sites_of(missing) {
                    self.counters.resent += 1;
                    self.send_encoded(s, &m);
                }
                self.scratch = m;
            }
            CPhase::Committing => {
                let missing = c.parts & !c.acked;
                if missing == 0 {
                    return;
                }
                c.timer = now + self.cfg.resend;
                let timer = c.timer;
                let late = now >= c.deadline;
                if late {
                    c.deadline = now + self.cfg.vote_timeout;
                }
                self.arm(timer, TimerKey::Coord(txn));
                for s in sites_of(missing) {
                    self.counters.resent += 1;
                    self.send(s, &Msg::Decide { txn, commit: true });
                }
                if late {
                    self.suspect(now, missing);
                }
            }
        }
    }

    fn part_timer(&mut self, now: Instant, at: Instant, txn: TxnId) {
        let resend = self.cfg.resend;
        let Some(p) = self.parts.get_mut(&txn) else {
            return;
        };
        if p.timer != at {
            return;
        }
        match p.phase {
            PPhase::Locking => {
                // Its coordinator may be gone: give the wait up and say no.
                self.parts.remove(&txn);
                self.locks.release(txn);
                self.vote(txn.site, txn, Vote::Conflict);
            }
            PPhase::Voted | PPhase::Applied => {
                let late = p.phase == PPhase::Voted && now >= p.deadline;
                if late {
                    p.deadline = now + self.cfg.vote_timeout;
                }
                p.timer = now
                    + if p.phase == PPhase::Voted {
                        resend
                    } else {
                        self.cfg.vote_timeout
                    };
                let timer = p.timer;
                self.arm(timer, TimerKey::Part(txn));
                self.counters.queries += 1;
                self.send(txn.site, &Msg::Query { txn });
                if late {
                    // In doubt this long: its coordinator is suspected.
                    self.suspect(now, bit(txn.site));
                }
            }
            PPhase::Logging | PPhase::Acking => {}
        }
    }

    /// When the site next needs [`Site::handle_timeout`].
    pub fn next_deadline(&self) -> Option<Instant> {
        let me = self.cfg.site as usize;
        let hello = self
            .known_by
            .iter()
            .enumerate()
            .any(|(s, &k)| !k && s != me)
            .then_some(self.hello_at);
        let mut t = self.timers.next_deadline();
        for other in [
            hello,
            self.view_due(),
            self.retries.first_key_value().map(|(&(at, _), _)| at),
        ] {
            t = match (t, other) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        t
    }

    /// The next packet to send: (site, bytes). Messages batched for a peer go out when no
    /// full packet is left.
    pub fn poll_transmit(&mut self) -> Option<(u16, Vec<u8>)> {
        if self.tx.is_empty() {
            for (s, buf) in self.out.iter_mut().enumerate() {
                if !buf.is_empty() {
                    let next = self.spare_packets.pop().unwrap_or_default();
                    self.tx.push_back((s as u16, std::mem::replace(buf, next)));
                    self.counters.packets_out += 1;
                }
            }
        }
        self.tx.pop_front()
    }

    /// Whether every record taken from [`Site::poll_log`] is durable: the moment a log can
    /// be compacted (records not taken yet follow the compacted log).
    pub fn log_settled(&self) -> bool {
        self.durable == self.taken && !self.broken
    }

    /// The log compacted: records that recover this site as its durable log does (the copy
    /// as an image, the prepares it holds, the ballot promised and the one synced to), to
    /// replace the whole log once durable. Only when the log is settled
    /// ([`Site::log_settled`]). Records not yet taken from [`Site::poll_log`] come after
    /// them. The copy applies a record when it is appended, so the image already holds
    /// their effects: a waiting coordinator's commit record becomes a committed record of
    /// no prepare (redoing nothing, still durable at its place for what waits on it), and a
    /// participant's commit finds its prepare left out of the compacted log. The records
    /// count as the whole log from here on.
    pub fn compact(&mut self) -> Option<Vec<Vec<u8>>> {
        if !self.log_settled() {
            return None;
        }
        let mut image = Vec::new();
        self.db.encode_image(&mut image);
        let mut recs = vec![
            Record::Image(image),
            Record::Promise(self.promised),
            Record::Synced(self.synced),
        ];
        let mut prepared: Vec<&Part> = self
            .parts
            .values()
            .filter(|p| matches!(p.phase, PPhase::Logging | PPhase::Voted))
            .collect();
        prepared.sort_by_key(|p| p.work.txn);
        recs.extend(
            prepared
                .into_iter()
                .map(|p| Record::Prepare(p.work.clone())),
        );
        let out: Vec<Vec<u8>> = recs
            .iter()
            .map(|r| {
                let mut b = Vec::new();
                r.encode(&mut b);
                b
            })
            .collect();
        for b in self.log_out.iter_mut() {
            if b.first() == Some(&crate::msg::REC_COMMIT) {
                if let Ok(Record::Commit(w)) = Record::decode(b) {
                    b.clear();
                    Record::Committed(w.txn).encode(b);
                }
            }
        }
        let n = out.len() as u64;
        // Records waiting to be taken keep their order after the compacted ones.
        let old_taken = self.taken;
        for (lsn, _) in self.log_waits.iter_mut() {
            *lsn = n + (*lsn - old_taken);
        }
        self.lsn = n + self.log_out.len() as u64;
        (self.taken, self.durable) = (n, n);
        self.counters.compactions += 1;
        Some(out)
    }

    /// The next log record to append (unframed), in order.
    pub fn poll_log(&mut self) -> Option<Vec<u8>> {
        let r = self.log_out.pop_front()?;
        self.taken += 1;
        Some(r)
    }

    /// Records of the log so far: those recovered and those taken from [`Site::poll_log`].
    /// Once all of these are durable, the driver says so with [`Site::logged`].
    pub fn taken(&self) -> u64 {
        self.taken
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
