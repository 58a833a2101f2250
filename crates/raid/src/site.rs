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
//! 2. AC + RC (read-one-write-all): the origin sends `PREPARE` to every other site. Each
//!    locks the same tuples, appends a prepare record, and once it is durable votes yes.
//! 3. AC: on every yes the origin appends its commit record (the decision, with its own
//!    redo); once durable it applies the writes, releases its locks, answers the client, and
//!    sends `DECIDE` commit. Each participant applies, releases, appends a committed record,
//!    and acknowledges once that is durable; with every acknowledgement the origin forgets.
//!    A no vote, or no vote by the deadline, aborts (presumed abort: no record), and the
//!    transaction is retried with its first timestamp after a backoff.
//!
//! Failures: a participant in doubt (prepared, no decision) asks the coordinator until it
//! answers; a coordinator answers from its commit records (kept until every participant has
//! acknowledged), and any transaction it has no record of is aborted. A restarted site
//! rebuilds its copy from its log ([`Site::recover`]): committed work redone, prepared work
//! locked again and resolved by asking, its own unacknowledged commits sent again.
//!
//! Write-all means every site takes part in every transaction: while one is down or cut off,
//! transactions time out and retry, and go on when it is back. (Excluding failed sites from
//! the write set, with catch-up on return, is the next step: see `docs/ARCHITECTURE.md`.)

use crate::db::{Db, DbError, HistoryRow, Key, Op, Scale, Write};
use crate::lock::{Grant, LockTable, Mode, Ts};
use crate::msg::{decode_packet, put_header, Header, Msg, MsgError, Record, Vote, Work};
use crate::TxnId;
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use thiserror::Error;
use txcast_proto::codec::Writer;
use txcast_proto::timer::TimerWheel;
use txcast_proto::Instant;

/// Sites a database may have (votes and acknowledgements are bit sets).
pub const SITES_MAX: u16 = 64;
/// The timer wheel: 1 ms ticks, a second around, and room for every timer of a site's
/// bounded tables many times over (stale entries are dropped when the wheel fills).
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
    /// Transactions of other sites prepared here at once; more are voted `Busy`.
    pub prepared_max: usize,
    /// Commit decisions kept until every participant acknowledged; while full, no new
    /// transaction starts here.
    pub decided_max: usize,
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
            decided_max: 16384,
            vote_timeout: Duration::from_millis(500),
            resend: Duration::from_millis(50),
            backoff: Duration::from_micros(200),
            backoff_max: Duration::from_millis(20),
            attempts_max: 1000,
            packet_bytes: 1400,
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
    /// This site's log failed while the transfer's commit record was being written: it may
    /// or may not be on disk, and the transfer is decided by what the site finds there when
    /// it restarts. Not acknowledged.
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
    pub recovered_in_doubt: u64,
    /// Logs compacted ([`Site::compact`]).
    pub compactions: u64,
    pub recovered_decided: u64,
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
    Logging,
}

struct Coord {
    client: Client,
    work: Option<Work>,
    phase: CPhase,
    yes: u64,
    deadline: Instant,
    timer: Instant,
}

struct Decided {
    acked: u64,
    timer: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PPhase {
    Locking,
    Logging,
    Voted,
    Acking,
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
    Decided(TxnId),
    Part(TxnId),
}

#[derive(Clone, Copy, Debug)]
enum LogWait {
    CoordCommit(TxnId),
    PartVote(TxnId),
    PartAck(TxnId),
}

pub struct Site {
    cfg: SiteConfig,
    db: Db,
    locks: LockTable,
    next_seq: u64,
    coord: HashMap<TxnId, Coord>,
    decided: HashMap<TxnId, Decided>,
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
    /// Whether each peer has shown it knows this site's incarnation (a packet written for
    /// it); hellos go to those that have not, every `resend`.
    known_by: Vec<bool>,
    hello_at: Instant,
    counters: Counters,
}

fn bit(site: u16) -> u64 {
    1u64 << site
}

fn locks_of(writes: &[Write]) -> Vec<(Key, Mode)> {
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
            decided: HashMap::default(),
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
            known_by: vec![false; n],
            hello_at: Instant::ZERO,
            counters: Counters::default(),
        })
    }

    /// A restarted site: its copy rebuilt from the records of its log (the bodies of the
    /// whole frames, in order; all of them durable). Committed work is redone; work prepared
    /// with no decision is locked again and resolved by asking its coordinator; this site's
    /// own commits not yet acknowledged by every participant are sent again.
    pub fn recover<'a>(
        cfg: SiteConfig,
        now: Instant,
        records: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Site, ConfigError> {
        let mut s = Site::new(cfg)?;
        let mut prepared: BTreeMap<TxnId, Work> = BTreeMap::new();
        let mut decided: BTreeMap<TxnId, ()> = BTreeMap::new();
        for (index, body) in records.into_iter().enumerate() {
            let rec = Record::decode(body).map_err(|error| ConfigError::Log { index, error })?;
            s.lsn += 1;
            match rec {
                Record::Prepare(w) => {
                    prepared.insert(w.txn, w);
                }
                Record::Commit(w) => {
                    s.db.apply(&w.writes, w.row.as_ref())?;
                    if s.cfg.sites > 1 {
                        decided.insert(w.txn, ());
                    }
                }
                Record::Committed(t) => {
                    if let Some(w) = prepared.remove(&t) {
                        s.db.apply(&w.writes, w.row.as_ref())?;
                    }
                }
                Record::Aborted(t) => {
                    prepared.remove(&t);
                }
                Record::End(t) => {
                    decided.remove(&t);
                }
                Record::Image(b) => {
                    s.db = Db::decode_image(s.cfg.scale, &b)?;
                }
                Record::Decided(t) => {
                    decided.insert(t, ());
                }
            }
        }
        s.durable = s.lsn;
        s.taken = s.lsn;
        for (txn, w) in prepared {
            if s.locks.request(txn, w.ts, &locks_of(&w.writes)) != Grant::Granted {
                // Prepared transactions held their locks together before the crash.
                s.counters.unexpected += 1;
            }
            s.counters.recovered_in_doubt += 1;
            s.parts.insert(
                txn,
                Part {
                    work: w,
                    phase: PPhase::Voted,
                    deadline: now,
                    timer: now,
                },
            );
            s.arm(now, TimerKey::Part(txn));
        }
        for (txn, ()) in decided {
            s.counters.recovered_decided += 1;
            s.decided.insert(
                txn,
                Decided {
                    acked: 0,
                    timer: now,
                },
            );
            s.arm(now, TimerKey::Decided(txn));
        }
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

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Transactions this site coordinates (running or waiting to retry).
    pub fn coordinating(&self) -> usize {
        self.coord.len() + self.retries.len()
    }

    /// Whether nothing is under way here: no transaction, no lock, no decision to deliver,
    /// no record to write.
    pub fn is_quiet(&self) -> bool {
        self.coord.is_empty()
            && self.retries.is_empty()
            && self.decided.is_empty()
            && self.parts.is_empty()
            && self.locks.is_empty()
            && self.log_out.is_empty()
            && self.log_waits.is_empty()
    }

    /// What is under way, for a report.
    pub fn describe(&self) -> String {
        format!(
            "site {}: coordinating {} (+{} to retry), decided {} unacknowledged, prepared {}, locks {}, log {} to write {} waiting",
            self.cfg.site,
            self.coord.len(),
            self.retries.len(),
            self.decided.len(),
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

    fn start(&mut self, now: Instant, mut client: Client) {
        if self.decided.len() >= self.cfg.decided_max {
            // Wait for acknowledgements before deciding more.
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
            yes: 0,
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
        let Some(c) = self.coord.get_mut(&txn) else {
            return;
        };
        let t = c.client.transfer;
        let acct = Key::account(t.account);
        let balance = self.db.balance(acct).unwrap_or(0).wrapping_add(t.delta);
        let work = Work {
            txn,
            ts: c.client.ts,
            writes: vec![
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
        if self.cfg.sites == 1 {
            c.phase = CPhase::Logging;
            let mut b = Vec::with_capacity(128);
            Record::encode_work(true, &work, &mut b);
            c.work = Some(work);
            self.push_record(b, Some(LogWait::CoordCommit(txn)));
            return;
        }
        c.phase = CPhase::Voting;
        c.timer = (now + self.cfg.resend).min(c.deadline);
        let timer = c.timer;
        // One encoding of the prepare for every peer.
        let mut m = std::mem::take(&mut self.scratch);
        m.clear();
        Msg::put_prepare(&mut Writer::new(&mut m), &work);
        c.work = Some(work);
        for s in self.others().collect::<Vec<_>>() {
            self.send_encoded(s, &m);
        }
        self.scratch = m;
        self.arm(timer, TimerKey::Coord(txn));
    }

    /// Schedules `key` at `at`. A full wheel first drops the entries no entity waits for.
    fn arm(&mut self, at: Instant, key: TimerKey) {
        if self.timers.schedule(at, key).is_ok() {
            return;
        }
        let (coord, decided, parts) = (&self.coord, &self.decided, &self.parts);
        self.timers.retain(|d, k| match k {
            TimerKey::Coord(t) => coord.get(&t).is_some_and(|c| c.timer == d),
            TimerKey::Decided(t) => decided.get(&t).is_some_and(|c| c.timer == d),
            TimerKey::Part(t) => parts.get(&t).is_some_and(|c| c.timer == d),
        });
        if self.timers.schedule(at, key).is_err() {
            // More live timers than the tables can hold: cannot happen with their bounds.
            self.counters.unexpected += 1;
        }
    }

    fn append(&mut self, rec: Record, wait: Option<LogWait>) {
        let mut b = Vec::with_capacity(128);
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

    /// Queues `msg` for site `to`, in the packet being filled for it. A peer whose incarnation
    /// is not known yet gets nothing (what matters is sent again once it is).
    fn send(&mut self, to: u16, msg: &Msg) {
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
        let buf = &mut self.out[to as usize];
        if buf.is_empty() {
            put_header(&mut Writer::new(buf), header);
        }
        let mark = buf.len();
        buf.extend_from_slice(msg);
        if buf.len() > self.cfg.packet_bytes && mark > crate::msg::PACKET_HEADER {
            let tail = buf.split_off(mark);
            let full = std::mem::take(buf);
            put_header(&mut Writer::new(buf), header);
            buf.extend_from_slice(&tail);
            self.tx.push_back((to, full));
            self.counters.packets_out += 1;
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

    fn all_others(&self) -> u64 {
        self.others().fold(0, |m, s| m | bit(s))
    }

    /// An attempt failed: retried after a backoff, or given up.
    fn retry(&mut self, now: Instant, client: Client, cause: Cause) {
        match cause {
            Cause::Conflict => self.counters.retries_conflict += 1,
            Cause::Busy => self.counters.retries_busy += 1,
            Cause::Timeout => self.counters.retries_timeout += 1,
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
            for s in self.others().collect::<Vec<_>>() {
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
        let (h, msgs) = match decode_packet(bytes) {
            Ok(p) => p,
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
        for m in msgs {
            self.handle_msg(now, h, m);
        }
        self.grant_waiters(now);
        Ok(())
    }

    fn handle_msg(&mut self, now: Instant, from: Header, m: Msg) {
        let me = self.cfg.site;
        match m {
            Msg::Prepare(work) => {
                if work.txn.site != from.site || work.txn.incarnation != from.incarnation {
                    self.counters.unexpected += 1;
                    return;
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
                if let Some(d) = self.decided.get_mut(&txn) {
                    d.acked |= bit(from.site);
                    if d.acked == self.all_others() {
                        self.decided.remove(&txn);
                        self.append(Record::End(txn), None);
                    }
                }
            }
            Msg::Query { txn } => {
                if txn.site != me {
                    self.counters.unexpected += 1;
                    return;
                }
                if self.decided.contains_key(&txn) {
                    self.send(from.site, &Msg::Decide { txn, commit: true });
                } else if !self.coord.contains_key(&txn) && !self.uncertain.contains(&txn) {
                    // No record of it: never committed (presumed abort).
                    self.send(from.site, &Msg::Decide { txn, commit: false });
                }
            }
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
        let all = self.all_others();
        let Some(c) = self.coord.get_mut(&txn) else {
            if vote == Vote::Yes && !self.uncertain.contains(&txn) {
                // A vote for a decided or forgotten transaction: the decision again.
                let commit = self.decided.contains_key(&txn);
                self.send(from, &Msg::Decide { txn, commit });
            }
            return;
        };
        if c.phase != CPhase::Voting {
            return;
        }
        let cause = match vote {
            Vote::Yes => {
                c.yes |= bit(from);
                if c.yes == all {
                    c.phase = CPhase::Logging;
                    let work = c.work.as_ref().expect("a voting transaction has its work");
                    let mut b = Vec::with_capacity(128);
                    Record::encode_work(true, work, &mut b);
                    self.push_record(b, Some(LogWait::CoordCommit(txn)));
                }
                return;
            }
            Vote::Conflict => Cause::Conflict,
            Vote::Busy => Cause::Busy,
            Vote::Broken => Cause::Broken,
            Vote::BadKey => Cause::BadKey,
        };
        self.abort_coord(now, txn, cause);
    }

    fn on_decide(&mut self, now: Instant, from: u16, txn: TxnId, commit: bool) {
        let Some(p) = self.parts.get_mut(&txn) else {
            if commit {
                // Applied and acknowledged before (its record is durable): again.
                self.send(from, &Msg::Ack { txn });
            }
            return;
        };
        match (commit, p.phase) {
            (_, PPhase::Acking) => {}
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
                            p.timer = p.deadline;
                            let timer = p.timer;
                            self.arm(timer, TimerKey::Part(txn));
                            self.vote(txn.site, txn, Vote::Yes);
                        }
                    }
                }
                LogWait::PartAck(txn) => {
                    if self.parts.remove(&txn).is_some() {
                        self.send(txn.site, &Msg::Ack { txn });
                    }
                }
            }
        }
        self.grant_waiters(now);
    }

    /// The coordinator's commit record is durable: apply, release, answer, tell.
    fn committed(&mut self, now: Instant, txn: TxnId) {
        let Some(c) = self.coord.remove(&txn) else {
            return;
        };
        let work = c.work.expect("a committing transaction has its work");
        if self.db.apply(&work.writes, work.row.as_ref()).is_err() {
            self.counters.unexpected += 1;
        }
        self.locks.release(txn);
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
        if self.cfg.sites > 1 {
            let msg = Msg::Decide { txn, commit: true };
            for s in self.others().collect::<Vec<_>>() {
                self.send(s, &msg);
            }
            let timer = now + self.cfg.resend;
            self.decided.insert(txn, Decided { acked: 0, timer });
            self.arm(timer, TimerKey::Decided(txn));
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
            let phase = self.coord[&txn].phase;
            if phase == CPhase::Logging {
                // Its commit record may or may not be on disk: the participants learn the
                // outcome when this site recovers; the client only that it is unknown.
                let c = self.coord.remove(&txn).expect("listed");
                self.locks.release(txn);
                self.uncertain.insert(txn);
                self.counters.unknown += 1;
                self.events.push_back(Event::Unknown {
                    tag: c.client.tag,
                    attempts: c.client.attempts,
                });
            } else {
                self.abort_coord(now, txn, Cause::Broken);
            }
        }
        for (_, c) in std::mem::take(&mut self.retries) {
            self.give_up(c, Cause::Broken);
        }
    }

    /// Timers due: lock waits and vote deadlines, prepares, decisions and queries sent
    /// again, retries started.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self
            .known_by
            .iter()
            .enumerate()
            .any(|(s, &k)| !k && s != self.cfg.site as usize)
        {
            self.hellos(now);
        }
        let mut fired = std::mem::take(&mut self.fired);
        self.timers.expire(now, |at, key| fired.push((at, key)));
        for &(at, key) in &fired {
            match key {
                TimerKey::Coord(txn) => self.coord_timer(now, at, txn),
                TimerKey::Decided(txn) => {
                    let resend = self.cfg.resend;
                    let all = self.all_others();
                    let Some(d) = self.decided.get_mut(&txn) else {
                        continue;
                    };
                    if d.timer != at {
                        continue;
                    }
                    d.timer = now + resend;
                    let (timer, acked) = (d.timer, d.acked);
                    self.arm(timer, TimerKey::Decided(txn));
                    for s in self.others().collect::<Vec<_>>() {
                        if all & acked & bit(s) == 0 {
                            self.counters.resent += 1;
                            self.send(s, &Msg::Decide { txn, commit: true });
                        }
                    }
                }
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
        self.grant_waiters(now);
    }

    fn coord_timer(&mut self, now: Instant, at: Instant, txn: TxnId) {
        let Some(c) = self.coord.get_mut(&txn) else {
            return;
        };
        if c.timer != at {
            return;
        }
        match c.phase {
            CPhase::Logging => {}
            CPhase::Locking => {
                if now >= c.deadline {
                    self.abort_coord(now, txn, Cause::Timeout);
                }
            }
            CPhase::Voting => {
                if now >= c.deadline {
                    return self.abort_coord(now, txn, Cause::Timeout);
                }
                c.timer = (now + self.cfg.resend).min(c.deadline);
                let (timer, yes) = (c.timer, c.yes);
                let mut m = std::mem::take(&mut self.scratch);
                m.clear();
                Msg::put_prepare(&mut Writer::new(&mut m), c.work.as_ref().expect("voting"));
                self.arm(timer, TimerKey::Coord(txn));
                for s in self.others().collect::<Vec<_>>() {
                    if yes & bit(s) == 0 {
                        self.counters.resent += 1;
                        self.send_encoded(s, &m);
                    }
                }
                self.scratch = m;
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
            PPhase::Voted => {
                p.timer = now + resend;
                let timer = p.timer;
                self.arm(timer, TimerKey::Part(txn));
                self.counters.queries += 1;
                self.send(txn.site, &Msg::Query { txn });
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
        let t = self.timers.next_deadline();
        let t = match (t, hello) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let r = self.retries.first_key_value().map(|(&(at, _), _)| at);
        match (t, r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next packet to send: (site, bytes). Messages batched for a peer go out when no
    /// full packet is left.
    pub fn poll_transmit(&mut self) -> Option<(u16, Vec<u8>)> {
        if self.tx.is_empty() {
            for (s, buf) in self.out.iter_mut().enumerate() {
                if !buf.is_empty() {
                    self.tx.push_back((s as u16, std::mem::take(buf)));
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
    /// as an image, the prepares it holds in doubt, its commits not yet acknowledged by
    /// every participant), to replace the whole log once durable. Only when the log is
    /// settled ([`Site::log_settled`]). Records not yet taken from [`Site::poll_log`] come
    /// after them: their effects are not in the image, except a participant's commit, applied
    /// already, whose prepare is then left out (its committed record finds no prepare). The
    /// records count as the whole log from here on.
    pub fn compact(&mut self) -> Option<Vec<Vec<u8>>> {
        if !self.log_settled() {
            return None;
        }
        let mut image = Vec::new();
        self.db.encode_image(&mut image);
        let mut recs = vec![Record::Image(image)];
        let mut prepared: Vec<&Part> = self
            .parts
            .values()
            .filter(|p| p.phase == PPhase::Voted)
            .collect();
        prepared.sort_by_key(|p| p.work.txn);
        recs.extend(
            prepared
                .into_iter()
                .map(|p| Record::Prepare(p.work.clone())),
        );
        let mut decided: Vec<TxnId> = self.decided.keys().copied().collect();
        decided.sort();
        recs.extend(decided.into_iter().map(Record::Decided));
        let out: Vec<Vec<u8>> = recs
            .iter()
            .map(|r| {
                let mut b = Vec::new();
                r.encode(&mut b);
                b
            })
            .collect();
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
