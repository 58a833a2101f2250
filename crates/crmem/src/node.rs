//! One CRMem node, sans-IO: the application's calls in (`begin`, `set_range`, `range_mut`,
//! `commit`, `abort`), messages from the other nodes in, time in; messages out
//! (`poll_transmit`) and events out (`poll_event`). The channel under it is reliable and in
//! order per pair of nodes (a module's control messages over the link); a node that dies is
//! reported with [`Node::peer_down`].
//!
//! This is the mirror configuration (§3): the primary runs every transaction and is the home
//! node of every segment, so its locks are all local; each backup keeps a replica of every
//! segment and of the primary's commit log.
//!
//! **Commit.** `commit` ships the transaction's write set to every backup as a remote atomic
//! write: one or more WRITE parts, applied by a backup only when the last has come, then
//! acknowledged. The transaction's commit record takes its place in the commit log (a byte
//! budget: a record that does not fit is refused with [`CrError::LogFull`]) and its locks are
//! released at once; the application hears [`Event::Committed`] when every backup has
//! acknowledged it and every earlier commit. Releasing before the acknowledgement is safe:
//! a transaction that saw this one's writes commits after it in the log, every backup applies
//! the log in order, and commits complete in log order, so it can never be durable while this
//! one is lost. A read-only transaction completes behind the commits before it for the same
//! reason.
//!
//! **Failover.** Every backup keeps the commits it applied that its primary has not yet
//! told durable (DURABLE every 16 commits), with the bytes each overwrote: when the primary
//! dies the backups hold prefixes of its log that differ by at most the commits in flight,
//! so a backup follows the successor by
//! undoing the commits the successor lacks and applying those it lacks itself, without a
//! snapshot of the segments (see [`Node::primary_down`]).

use crate::lock::{LockId, LockMapping, LOCKS_PER_RANGE_MAX};
use crate::msg::{self, Msg, WriteBuilder, RANGE_HEADER, WRITE_HEADER};
use crate::txmem::{self, take_into, Held, Segment, SetRange, Undo};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use thiserror::Error;
use txcast_proto::time::Instant;

/// A node of the cluster.
pub type NodeId = u16;
/// A transaction, unique at its node.
pub type TxnId = u64;
/// A segment, by the order in which every replica added it.
pub type SegmentId = u16;

/// Segments a node holds at most.
pub const SEGMENTS_MAX: usize = 256;
/// The pseudo-node a primary with a disk log ships its write sets to: their WRITE parts come
/// out of `poll_transmit` addressed to it, for the driver to append to the log, and
/// [`Node::disk_synced`] acknowledges them once they are on disk.
pub const DISK: NodeId = NodeId::MAX;
/// Bytes of a message at most (a module message's body).
pub const MESSAGE_BYTES_MAX: usize = 1024;
/// What a commit costs the log at least (a read-only one, which ships nothing).
const PENDING_COST: usize = 64;
/// A recovering node asks again when its snapshot makes no progress for this long.
const SNAPSHOT_RETRY_NS: u64 = 200_000_000;
/// CATCH_UP requests a backup keeps for a promotion of its own that has not happened yet.
const EARLY_CATCH_UPS_MAX: usize = 16;
/// The primary tells its backups how far its commits are durable every this many commits
/// (so their tails hold about this many more than the commits in flight).
const DURABLE_EVERY: u64 = 16;
/// Emptied undo buffers of commits dropped from the tail, kept for the next ones at most.
const SPARE_UNDO: usize = 64;

/// A node's limits.
#[derive(Clone, Debug)]
pub struct Config {
    pub node: NodeId,
    /// This process's incarnation (the port's): names its snapshot requests, so a snapshot
    /// sent to an earlier incarnation and retransmitted to this one is not taken.
    pub incarnation: u64,
    /// Transactions open at once at most.
    pub txns_max: usize,
    /// The commit log: bytes of write sets sent and not yet acknowledged by every backup.
    pub log_bytes: usize,
    /// Bytes of one message at most (WRITE parts are cut to fit); 64 at least, and for a
    /// symmetric node what an SWRITE part naming every node needs with room for writes.
    pub message_bytes: usize,
    /// A primary also logs every commit to disk ([`DISK`]): a commit completes when its
    /// backups hold it and the disk does.
    pub disk_log: bool,
    /// Symmetric: a node keeps the locks a home granted it after its transactions end, for
    /// its next transactions, until the home recalls them (the mirror ignores it).
    pub cache_locks: bool,
    /// Messages queued for one node between two `poll_transmit` calls go in BUNDLEs of at
    /// most this many bytes ([`msg::BUNDLE_BYTES`] by default; 0: each message alone).
    pub bundle_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            node: 0,
            incarnation: 0,
            txns_max: 1024,
            log_bytes: 4 << 20,
            message_bytes: MESSAGE_BYTES_MAX,
            disk_log: false,
            cache_locks: false,
            bundle_bytes: msg::BUNDLE_BYTES,
        }
    }
}

/// What a node is in the mirror configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Runs the transactions; ships commits to these backups.
    Primary { backups: Vec<NodeId> },
    /// Holds a replica; applies the primary's commits.
    Backup { primary: NodeId },
    /// Restarted, dropped, or following a new primary: waits for a snapshot from `from`, or
    /// catches up from it, before it serves.
    Recovering { from: NodeId },
}

/// Read or write access to a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

/// What `set_range` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// The locks are held: the range may be used.
    Granted,
    /// Another transaction holds some: [`Event::Granted`] comes when they are free, or
    /// [`Event::Aborted`] at the deadline.
    Waiting,
}

/// Why a transaction was aborted by CRMem itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// Its locks did not come by its deadline.
    LockTimeout,
}

/// What the application hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A waiting `set_range` got its locks.
    Granted(TxnId),
    /// The transaction is on every backup (or on every one still alive).
    Committed(TxnId),
    /// The transaction was rolled back.
    Aborted(TxnId, AbortReason),
    /// This backup became the primary (its primary died).
    Promoted,
    /// The snapshot came, or the catch-up ended: this node is a backup now.
    Recovered,
    /// A backup died; commits go on to the others (none left: the primary alone holds them).
    BackupLost(NodeId),
}

/// A call refused.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum CrError {
    #[error("no such transaction")]
    UnknownTxn,
    #[error("no such segment")]
    UnknownSegment,
    #[error("range outside the segment or empty")]
    OutOfRange,
    #[error("range not declared with set_range in that mode")]
    NotSet,
    #[error("the transaction waits for locks or is committing")]
    NotActive,
    #[error("too many transactions open")]
    TooManyTxns,
    #[error("the range maps to more than {LOCKS_PER_RANGE_MAX} locks")]
    TooManyLocks,
    #[error("only the primary runs transactions")]
    NotPrimary,
    #[error("the commit log is full until backups acknowledge")]
    LogFull,
    #[error("the write set does not fit the commit log")]
    TooLarge,
    #[error("segment limits: at most {SEGMENTS_MAX} segments of at most 4 GiB, a valid mapping")]
    BadSegment,
    #[error("the node is recovering or changing its view: no transaction may start")]
    NotServing,
}

/// What a node counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub begun: u64,
    pub committed: u64,
    pub aborted: u64,
    pub lock_waits: u64,
    pub lock_timeouts: u64,
    /// Commits applied as a backup.
    pub applied: u64,
    /// Messages that did not parse, came from a node with no business sending them, or broke
    /// the protocol (a part out of order, a range outside a segment): dropped.
    pub refused: u64,
    /// WRITE parts of commits applied already (a retransmission after failover).
    pub duplicates: u64,
    /// Commits that completed with fewer backups than configured.
    pub degraded: u64,
    /// Times this backup followed a new primary by catching up from its tail (no snapshot).
    pub caught_up: u64,
    /// Snapshots this node sent (to restarted nodes, and to backups it could not catch up).
    pub snapshots_sent: u64,
    /// Commits a backup undid while catching up: its dead primary's, which the successor
    /// never had (none of them acknowledged).
    pub undone: u64,
    /// Symmetric: transactions granted their locks before the commits written under them
    /// were applied here, which waited for them.
    pub apply_waits: u64,
    /// Symmetric: commits that came whole before a commit they depend on, and waited.
    pub commits_held: u64,
    /// Symmetric: ranges of other homes whose locks this node held already (cached), for
    /// which it asked no home.
    pub cache_hits: u64,
    /// Symmetric: locks this home recalled from the nodes holding them.
    pub recalls: u64,
    /// BUNDLEs sent, and the messages they carried (`Config::bundle_bytes`).
    pub bundles: u64,
    pub bundled: u64,
    /// Bytes of the ranges committed transactions declared for writing, and of those the
    /// bytes that had changed, which are all a commit ships (`txmem::changed`).
    pub write_declared: u64,
    pub write_shipped: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TxnState {
    Active,
    Waiting,
}

struct Txn {
    state: TxnState,
    deadline: Instant,
    ranges: Vec<SetRange>,
    undo: Undo,
    held: Held,
}

/// A commit sent and not yet complete.
struct Pending {
    seq: u64,
    txn: TxnId,
    bytes: usize,
    missing: Vec<NodeId>,
}

/// A recent commit as this node applied it (a backup: with the old bytes it overwrote) or
/// shipped it (a primary whose backups catch up).
struct TailEntry {
    seq: u64,
    /// Its WRITE parts as they travel.
    parts: Vec<Vec<u8>>,
    /// The ranges it overwrote, `(segment, offset, len)`, and their bytes before it, one
    /// after the other, to undo it (`None`: it cannot be undone here).
    undo: Option<Undone>,
    cost: usize,
}

/// A remote atomic write being received.
struct Assembly {
    seq: u64,
    parts: u16,
    got: Vec<Vec<u8>>,
    bytes: usize,
}

/// One CRMem node (see the module comment).
pub struct Node {
    cfg: Config,
    role: Role,
    segments: Vec<Segment>,
    txns: FxHashMap<TxnId, Txn>,
    next_txn: TxnId,
    waiting: VecDeque<TxnId>,
    /// Commit sequence numbers: the last one given (primary), the last one applied (backup).
    seq: u64,
    /// The highest commit number complete, in order (primary).
    durable: u64,
    log_used: usize,
    pending: VecDeque<Pending>,
    assembling: Option<Assembly>,
    out: VecDeque<(NodeId, Vec<u8>)>,
    /// Bundled out of `out`, for `poll_transmit`.
    ready: VecDeque<(NodeId, Vec<u8>)>,
    events: VecDeque<Event>,
    counters: Counters,
    scratch: Vec<LockId>,
    buf: Vec<u8>,
    /// The snapshot this node asked for (while recovering): its nonce, how many it asked
    /// for in this incarnation, and where the next piece must start.
    snap_nonce: u64,
    snap_asked: u64,
    snap_next: (SegmentId, u32),
    /// When the snapshot last made progress (`None`: not yet seen by a clock).
    snap_heard: Option<Instant>,
    /// Per node, the nonce of the last snapshot request answered: a piece of an earlier
    /// snapshot still waiting to leave is dropped (the node takes only the latest).
    snap_sent: FxHashMap<NodeId, u64>,
    /// Recent commits, oldest first, consecutive: a backup keeps those not yet told durable
    /// (every commit another backup may lack, or hold alone, when the primary dies), at most
    /// twice the log budget; a new primary adds its own while backups catch up.
    tail: VecDeque<TailEntry>,
    tail_cost: usize,
    /// The commit number at which this node became the primary, and the primary it followed
    /// until then (`None`: the first primary, or restored from disk).
    promoted_at: u64,
    promoted_from: Option<NodeId>,
    /// Backups of this new primary that have not caught up yet: its commits wait for them
    /// but are not shipped to them until their CATCH_UP (or snapshot request) is answered.
    syncing: Vec<NodeId>,
    /// CATCH_UP requests that came while this node was still a backup: (from, nonce, seq,
    /// primary), answered if it is promoted.
    early: Vec<(NodeId, u64, u64, NodeId)>,
    /// Recovering by catching up (CATCH_UP sent) rather than by a snapshot: the dead
    /// primary this node followed.
    catching: Option<NodeId>,
    /// While catching up: the commit number the successor's RESUME said to reach.
    resume_to: Option<u64>,
    /// A primary: the durable number last told to its backups.
    durable_told: u64,
    /// Undo buffers of commits dropped from the tail, emptied, for the next ones.
    spare_undo: Vec<Undone>,
}

/// A commit's undo: the ranges it overwrote and their old bytes (see [`TailEntry`]).
type Undone = (Vec<(SegmentId, u32, u32)>, Vec<u8>);

impl Node {
    /// A node; `cfg.message_bytes`, and `cfg.bundle_bytes` unless 0, are kept within
    /// 64..=[`MESSAGE_BYTES_MAX`].
    pub fn new(mut cfg: Config, role: Role) -> Node {
        cfg.message_bytes = cfg.message_bytes.clamp(64, MESSAGE_BYTES_MAX);
        if cfg.bundle_bytes != 0 {
            cfg.bundle_bytes = cfg.bundle_bytes.clamp(64, MESSAGE_BYTES_MAX);
        }
        let mut n = Node {
            cfg,
            role,
            segments: Vec::new(),
            txns: FxHashMap::default(),
            next_txn: 1,
            waiting: VecDeque::new(),
            seq: 0,
            durable: 0,
            log_used: 0,
            pending: VecDeque::new(),
            assembling: None,
            out: VecDeque::new(),
            ready: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            scratch: Vec::new(),
            buf: Vec::new(),
            snap_nonce: 0,
            snap_asked: 0,
            snap_next: (0, 0),
            snap_heard: None,
            snap_sent: FxHashMap::default(),
            tail: VecDeque::new(),
            tail_cost: 0,
            promoted_at: 0,
            promoted_from: None,
            syncing: Vec::new(),
            early: Vec::new(),
            catching: None,
            resume_to: None,
            durable_told: 0,
            spare_undo: Vec::new(),
        };
        if let Role::Recovering { from } = n.role {
            n.ask_snapshot(from);
        }
        n
    }

    /// Becomes a node recovering from `from` under a new request nonce.
    fn recover_from(&mut self, from: NodeId) {
        self.snap_asked += 1;
        self.snap_nonce = self.cfg.incarnation << 20 | (self.snap_asked & 0xF_FFFF);
        self.snap_next = (0, 0);
        self.snap_heard = None;
        self.role = Role::Recovering { from };
        self.resume_to = None;
        // Requests held for a promotion of this node: another node is the successor.
        self.early.clear();
    }

    /// Becomes a node recovering from `from`, and asks it for a snapshot.
    fn ask_snapshot(&mut self, from: NodeId) {
        self.recover_from(from);
        self.catching = None;
        let mut m = Vec::new();
        msg::snap_req(self.snap_nonce, &mut m);
        self.out.push_back((from, m));
    }

    /// Becomes a backup catching up from `from`, the successor of its dead primary `old`:
    /// asks for the commits it lacks (see [`Node::primary_down`]).
    fn ask_catch_up(&mut self, from: NodeId, old: NodeId) {
        self.recover_from(from);
        self.catching = Some(old);
        let mut m = Vec::new();
        msg::catch_up(self.snap_nonce, self.seq, old, &mut m);
        self.out.push_back((from, m));
    }

    /// Keeps a commit at the tail's end, and drops the oldest beyond the budget.
    fn keep(&mut self, e: TailEntry) {
        self.tail_cost += e.cost;
        self.tail.push_back(e);
        while self.tail_cost > 2 * self.cfg.log_bytes {
            let Some(old) = self.tail.pop_front() else {
                break;
            };
            self.tail_cost -= old.cost;
        }
    }

    fn clear_tail(&mut self) {
        self.tail.clear();
        self.tail_cost = 0;
    }

    pub fn role(&self) -> &Role {
        &self.role
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The last commit sequence number given (primary) or applied (backup).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Commits kept for a backup's catch-up after a failover: at a backup, those its primary
    /// has not yet told durable (in flight, and up to 16 more); at a new primary, while
    /// backups catch up.
    pub fn tail_commits(&self) -> usize {
        self.tail.len()
    }

    /// Commits up to this number are complete (on every live backup), at the primary.
    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// Adds a segment of `bytes` zeroed bytes with its lock mapping. Every replica adds the
    /// same segments in the same order.
    pub fn add_segment(
        &mut self,
        bytes: usize,
        mapping: LockMapping,
    ) -> Result<SegmentId, CrError> {
        self.segments
            .push(Segment::new(self.segments.len(), bytes, mapping)?);
        Ok((self.segments.len() - 1) as SegmentId)
    }

    /// A segment's memory as it is (committed and in-flight writes alike), for inspection.
    pub fn segment(&self, s: SegmentId) -> Option<&[u8]> {
        self.segments.get(s as usize).map(|g| &g.mem[..])
    }

    /// Locks of a segment (its mapping's count).
    pub fn lock_count(&self, s: SegmentId) -> Option<usize> {
        self.segments.get(s as usize).map(|g| g.locks.len())
    }

    /// Starts a transaction that must have its locks by `deadline`.
    pub fn begin(&mut self, deadline: Instant) -> Result<TxnId, CrError> {
        if !matches!(self.role, Role::Primary { .. }) {
            return Err(CrError::NotPrimary);
        }
        if self.txns.len() >= self.cfg.txns_max {
            return Err(CrError::TooManyTxns);
        }
        let id = self.next_txn;
        self.next_txn += 1;
        self.txns.insert(
            id,
            Txn {
                state: TxnState::Active,
                deadline,
                ranges: Vec::new(),
                undo: Vec::new(),
                held: Vec::new(),
            },
        );
        self.counters.begun += 1;
        Ok(id)
    }

    /// Declares that `txn` will use `len` bytes at `offset` of `segment` in `mode`: takes the
    /// locks the segment's mapping gives (all or none), and for a write keeps the range's old
    /// contents for `abort`.
    pub fn set_range(
        &mut self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        mode: Mode,
    ) -> Result<Lock, CrError> {
        let t = self.txns.get(&txn).ok_or(CrError::UnknownTxn)?;
        if t.state != TxnState::Active {
            return Err(CrError::NotActive);
        }
        let g = self
            .segments
            .get(segment as usize)
            .ok_or(CrError::UnknownSegment)?;
        g.map_range(offset, len, &mut self.scratch)?;
        let r = SetRange {
            segment,
            offset,
            len,
            mode,
        };
        if self.try_take(txn, r) {
            return Ok(Lock::Granted);
        }
        let t = self.txns.get_mut(&txn).expect("checked above");
        t.state = TxnState::Waiting;
        t.ranges.push(r);
        self.waiting.push_back(txn);
        self.counters.lock_waits += 1;
        Ok(Lock::Waiting)
    }

    /// Takes `r`'s locks (in `self.scratch`) for `txn` if all are free to it, and records
    /// the range.
    fn try_take(&mut self, txn: TxnId, r: SetRange) -> bool {
        let t = self.txns.get_mut(&txn).expect("caller checked");
        let g = &mut self.segments[r.segment as usize];
        let write = r.mode == Mode::Write;
        if take_into(
            &mut g.locks,
            txn,
            r.segment,
            &self.scratch,
            write,
            &mut t.held,
        )
        .is_none()
        {
            return false;
        }
        if write {
            t.undo.push(g.image(&r));
        }
        t.ranges.push(r);
        true
    }

    fn covered(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        write: bool,
    ) -> Result<(), CrError> {
        let t = self.txns.get(&txn).ok_or(CrError::UnknownTxn)?;
        if t.state != TxnState::Active {
            return Err(CrError::NotActive);
        }
        txmem::covered(&t.ranges, segment, offset, len, write)
    }

    /// The bytes of a range `txn` declared (in either mode), read in place.
    pub fn range(
        &self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
    ) -> Result<&[u8], CrError> {
        self.covered(txn, segment, offset, len, false)?;
        let (a, b) = (offset as usize, offset as usize + len as usize);
        Ok(&self.segments[segment as usize].mem[a..b])
    }

    /// The bytes of a range `txn` declared for writing, written in place.
    pub fn range_mut(
        &mut self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
    ) -> Result<&mut [u8], CrError> {
        self.covered(txn, segment, offset, len, true)?;
        let (a, b) = (offset as usize, offset as usize + len as usize);
        Ok(&mut self.segments[segment as usize].mem[a..b])
    }

    /// Rolls `txn` back: every written range gets its old contents, its locks go.
    pub fn abort(&mut self, txn: TxnId) -> Result<(), CrError> {
        let t = self.txns.remove(&txn).ok_or(CrError::UnknownTxn)?;
        self.roll_back(txn, t);
        self.grant_waiting();
        Ok(())
    }

    fn roll_back(&mut self, txn: TxnId, t: Txn) {
        txmem::restore(&mut self.segments, t.undo);
        txmem::release(&mut self.segments, &t.held);
        if t.state == TxnState::Waiting {
            self.waiting.retain(|&w| w != txn);
        }
        self.counters.aborted += 1;
    }

    /// Waiting transactions whose locks are free now take them, first come first served.
    fn grant_waiting(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            let txn = self.waiting[i];
            let Some(t) = self.txns.get_mut(&txn) else {
                self.waiting.remove(i);
                continue;
            };
            let r = t
                .ranges
                .pop()
                .expect("a waiting transaction has its range last");
            self.segments[r.segment as usize]
                .mapping
                .map(r.offset, r.len, &mut self.scratch);
            if self.try_take(txn, r) {
                self.txns.get_mut(&txn).expect("present").state = TxnState::Active;
                self.waiting.remove(i);
                self.events.push_back(Event::Granted(txn));
            } else {
                self.txns.get_mut(&txn).expect("present").ranges.push(r);
                i += 1;
            }
        }
    }

    /// Commits `txn`: its write set goes to every backup as a remote atomic write, its locks
    /// are released; [`Event::Committed`] says when it is on every backup. The commit's
    /// sequence number.
    pub fn commit(&mut self, txn: TxnId) -> Result<u64, CrError> {
        let backups = match &self.role {
            Role::Primary { backups } => backups.clone(),
            _ => return Err(CrError::NotPrimary),
        };
        let t = self.txns.get(&txn).ok_or(CrError::UnknownTxn)?;
        if t.state != TxnState::Active {
            return Err(CrError::NotActive);
        }
        let room = self
            .cfg
            .message_bytes
            .saturating_sub(WRITE_HEADER + RANGE_HEADER)
            .max(1);
        // Only the bytes that changed travel (and take room in the log).
        let (writes, declared) = txmem::changed(&self.segments, &t.ranges, &t.undo);
        let (parts, bytes) = plan_parts(&writes, room, self.cfg.message_bytes);
        if bytes > self.cfg.log_bytes || parts > u16::MAX as usize {
            return Err(CrError::TooLarge);
        }
        // Every entry costs something, so read-only commits behind a slow backup are bounded
        // by the log too.
        let bytes = bytes.max(PENDING_COST);
        if self.log_used + bytes > self.cfg.log_bytes {
            return Err(CrError::LogFull);
        }
        let t = self.txns.remove(&txn).expect("checked above");
        self.counters.write_declared += declared;
        self.counters.write_shipped += writes.iter().map(|r| r.len as u64).sum::<u64>();
        let seq = if writes.is_empty() {
            self.seq
        } else {
            self.seq += 1;
            self.seq
        };
        let mut backups = backups;
        if self.cfg.disk_log {
            backups.push(DISK);
        }
        // Backups still catching up get this commit from the tail, after what they lack.
        let recording = !self.syncing.is_empty();
        if !writes.is_empty() && (!backups.is_empty() || recording) {
            let kept = if recording {
                let syncing = &self.syncing;
                let to: Vec<NodeId> = backups
                    .iter()
                    .copied()
                    .filter(|k| !syncing.contains(k))
                    .collect();
                self.ship(seq, &writes, parts as u16, room, &to, true)
            } else {
                self.ship(seq, &writes, parts as u16, room, &backups, false)
            };
            if recording {
                let cost = kept.iter().map(Vec::len).sum::<usize>().max(PENDING_COST);
                self.keep(TailEntry {
                    seq,
                    parts: kept,
                    undo: None,
                    cost,
                });
            }
        }
        txmem::release(&mut self.segments, &t.held);
        self.log_used += bytes;
        self.pending.push_back(Pending {
            seq,
            txn,
            bytes,
            missing: if writes.is_empty() {
                Vec::new()
            } else {
                backups
            },
        });
        self.complete();
        self.grant_waiting();
        Ok(seq)
    }

    /// Sends commit `seq`'s write ranges to `backups` in `parts` WRITE messages; returns
    /// them too if `keep`.
    fn ship(
        &mut self,
        seq: u64,
        writes: &[SetRange],
        parts: u16,
        room: usize,
        backups: &[NodeId],
        keep: bool,
    ) -> Vec<Vec<u8>> {
        let mut kept = Vec::new();
        if self.durable >= self.durable_told + DURABLE_EVERY {
            self.durable_told = self.durable;
            msg::durable(self.durable, &mut self.buf);
            for &k in backups.iter().filter(|&&k| k != DISK) {
                self.out.push_back((k, self.buf.clone()));
            }
        }
        let mut part = 0u16;
        let mut m = Vec::with_capacity(self.cfg.message_bytes);
        let mut b = WriteBuilder::new(&mut m, seq, part, parts);
        let mut used = WRITE_HEADER;
        for r in writes {
            let mem = &self.segments[r.segment as usize].mem;
            let (mut off, end) = (r.offset as usize, (r.offset + r.len) as usize);
            while off < end {
                if used + RANGE_HEADER >= self.cfg.message_bytes {
                    b.finish();
                    for &k in backups {
                        self.out.push_back((k, m.clone()));
                    }
                    if keep {
                        kept.push(m.clone());
                    }
                    part += 1;
                    b = WriteBuilder::new(&mut m, seq, part, parts);
                    used = WRITE_HEADER;
                }
                let n = (end - off)
                    .min(self.cfg.message_bytes - used - RANGE_HEADER)
                    .min(room);
                b.range(r.segment, off as u32, &mem[off..off + n]);
                used += RANGE_HEADER + n;
                off += n;
            }
        }
        b.finish();
        debug_assert_eq!(part + 1, parts);
        for &k in backups {
            self.out.push_back((k, m.clone()));
        }
        if keep {
            kept.push(m);
        }
        kept
    }

    /// `from` holds every commit up to `seq` (acknowledgements are cumulative: a backup
    /// applies in order, the disk log is written in order).
    fn acked(&mut self, from: NodeId, seq: u64) {
        for p in self.pending.iter_mut().take_while(|p| p.seq <= seq) {
            p.missing.retain(|&k| k != from);
        }
        self.complete();
    }

    /// The disk log holds every commit up to `seq` (written and synced).
    pub fn disk_synced(&mut self, seq: u64) {
        if matches!(self.role, Role::Primary { .. }) {
            self.acked(DISK, seq);
        }
    }

    /// A checkpoint for the disk log: the commit number it covers and every segment as it is
    /// with every open transaction rolled back.
    pub fn checkpoint(&self) -> (u64, Vec<Vec<u8>>) {
        let images = (0..self.segments.len()).map(|s| self.image(s)).collect();
        (self.seq, images)
    }

    /// Starts from a checkpoint (before any transaction): `images` must match the segments
    /// added, in number and size. False, and nothing changed, if they do not.
    pub fn restore(&mut self, seq: u64, images: &[Vec<u8>]) -> bool {
        if images.len() != self.segments.len()
            || images
                .iter()
                .zip(&self.segments)
                .any(|(i, g)| i.len() != g.mem.len())
        {
            return false;
        }
        for (g, i) in self.segments.iter_mut().zip(images) {
            g.mem.copy_from_slice(i);
        }
        self.seq = seq;
        self.durable = seq;
        self.promoted_at = seq;
        true
    }

    /// Applies a WRITE part read back from the disk log, as a backup applies one from its
    /// primary (a commit when its last part has come, whole or not at all; commits at or
    /// below the node's number are skipped). False if it was refused.
    pub fn replay(&mut self, bytes: &[u8]) -> bool {
        let refused = self.counters.refused;
        match Msg::parse(bytes) {
            Ok(Msg::Write(w)) => self.on_write(DISK, w.seq, w.part, w.parts, bytes),
            _ => self.counters.refused += 1,
        }
        // The acknowledgement it queued is for nobody.
        self.out.retain(|(to, _)| *to != DISK);
        self.durable = self.seq;
        self.counters.refused == refused
    }

    /// Commits at the head of the log whose backups have all acknowledged complete, in order.
    fn complete(&mut self) {
        while self.pending.front().is_some_and(|p| p.missing.is_empty()) {
            let p = self.pending.pop_front().expect("front");
            self.log_used -= p.bytes;
            self.durable = self.durable.max(p.seq);
            self.counters.committed += 1;
            self.events.push_back(Event::Committed(p.txn));
        }
    }

    /// Lock deadlines: waiting transactions past theirs are aborted.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Role::Recovering { from } = self.role {
            // A request can be refused (the successor not promoted yet) or its pieces lost
            // with a restart: ask again when nothing came for a while.
            match self.snap_heard {
                None => self.snap_heard = Some(now),
                Some(t) if now.0 >= t.0 + SNAPSHOT_RETRY_NS => {
                    // A catch-up not answered yet (nothing undone) is asked again; one cut
                    // short after its RESUME falls back to a snapshot.
                    match (self.catching, self.resume_to) {
                        (Some(old), None) => self.ask_catch_up(from, old),
                        _ => self.ask_snapshot(from),
                    }
                    self.snap_heard = Some(now);
                }
                _ => {}
            }
        }
        let late: Vec<TxnId> = self
            .waiting
            .iter()
            .copied()
            .filter(|w| self.txns.get(w).is_some_and(|t| t.deadline <= now))
            .collect();
        for txn in late {
            let t = self
                .txns
                .remove(&txn)
                .expect("waiting transactions are open");
            self.roll_back(txn, t);
            self.counters.lock_timeouts += 1;
            self.events
                .push_back(Event::Aborted(txn, AbortReason::LockTimeout));
        }
        self.grant_waiting();
    }

    /// The earliest lock deadline of a waiting transaction.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let snap = match (&self.role, self.snap_heard) {
            (Role::Recovering { .. }, None) => Some(Instant::ZERO),
            (Role::Recovering { .. }, Some(t)) => Some(Instant(t.0 + SNAPSHOT_RETRY_NS)),
            _ => None,
        };
        self.waiting
            .iter()
            .filter_map(|w| self.txns.get(w).map(|t| t.deadline))
            .chain(snap)
            .min()
    }

    pub fn poll_transmit(&mut self) -> Option<(NodeId, Vec<u8>)> {
        if self.cfg.bundle_bytes == 0 {
            return self.out.pop_front();
        }
        if self.ready.is_empty() {
            let (b, m) = msg::bundle_queue(
                &mut self.out,
                &mut self.ready,
                self.cfg.bundle_bytes,
                Some(DISK),
            );
            self.counters.bundles += b;
            self.counters.bundled += m;
        }
        self.ready.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether `m`, taken from [`Node::poll_transmit`] for node `to` and not sent yet, is a
    /// piece of a snapshot a later request of `to` superseded (its sender may drop it: `to`
    /// refuses it).
    pub fn superseded(&self, to: NodeId, m: &[u8]) -> bool {
        if m.get(1) != Some(&msg::SNAP) {
            return false;
        }
        match (Msg::parse(m), self.snap_sent.get(&to)) {
            (Ok(Msg::Snap(s)), Some(&latest)) => s.nonce != latest,
            _ => false,
        }
    }

    /// A message from node `from` (a BUNDLE's messages in order).
    pub fn handle_message(&mut self, from: NodeId, bytes: &[u8]) {
        match msg::unbundle(bytes) {
            None => self.handle_one(from, bytes),
            Some(Ok(all)) => all.for_each(|m| self.handle_one(from, m)),
            Some(Err(_)) => self.counters.refused += 1,
        }
    }

    fn handle_one(&mut self, from: NodeId, bytes: &[u8]) {
        let Ok(m) = Msg::parse(bytes) else {
            self.counters.refused += 1;
            return;
        };
        match (m, self.role.clone()) {
            (Msg::Write(w), Role::Backup { primary }) if from == primary => {
                self.on_write(from, w.seq, w.part, w.parts, bytes)
            }
            (Msg::Write(w), Role::Recovering { from: src })
                if from == src && self.resume_to.is_some() =>
            {
                // What the successor's RESUME announced, up to its commit `to`.
                let before = self.seq;
                self.on_write(from, w.seq, w.part, w.parts, bytes);
                if self.seq != before {
                    self.snap_heard = None;
                }
                if self.resume_to == Some(self.seq) {
                    self.caught_up(src);
                }
            }
            (Msg::Ack { seq }, Role::Primary { .. }) if from != DISK => self.acked(from, seq),
            (Msg::Durable { seq }, Role::Backup { primary }) if from == primary => {
                // Every backup holds these: no catch-up needs them.
                while self.tail.front().is_some_and(|e| e.seq <= seq) {
                    let e = self.tail.pop_front().expect("front");
                    self.tail_cost -= e.cost;
                    if let Some((mut index, mut old)) = e.undo {
                        if self.spare_undo.len() < SPARE_UNDO {
                            index.clear();
                            old.clear();
                            self.spare_undo.push((index, old));
                        }
                    }
                }
            }
            (Msg::SnapReq { nonce }, Role::Primary { .. }) => {
                // Requests repeated while a partition lasted come together: the pieces of
                // the earlier ones not sent yet go, and only the last is answered whole.
                self.snap_sent.insert(from, nonce);
                let earlier =
                    |(k, m): &(NodeId, Vec<u8>)| *k == from && m.get(1) == Some(&msg::SNAP);
                self.out.retain(|x| !earlier(x));
                self.ready.retain(|x| !earlier(x));
                self.send_snapshot(from, nonce);
                self.synced(from);
            }
            (
                Msg::CatchUp {
                    nonce,
                    seq,
                    primary,
                },
                Role::Primary { .. },
            ) => self.answer_catch_up(from, nonce, seq, primary),
            (
                Msg::CatchUp {
                    nonce,
                    seq,
                    primary,
                },
                Role::Backup { .. },
            ) => {
                // The others took this node for the successor before it knew: answered if it
                // is promoted (else the asker retries, or asks its snapshot elsewhere).
                self.early.retain(|e| e.0 != from);
                if self.early.len() < EARLY_CATCH_UPS_MAX {
                    self.early.push((from, nonce, seq, primary));
                }
            }
            (Msg::Resume { nonce, from: r, to }, Role::Recovering { from: src })
                if from == src
                    && self.catching.is_some()
                    && nonce == self.snap_nonce
                    && self.resume_to.is_none() =>
            {
                self.snap_heard = None;
                if !self.rewind(r) {
                    // Its tail does not reach back that far (or it cannot undo what it has).
                    self.ask_snapshot(src);
                } else if self.seq == to {
                    self.caught_up(src);
                } else {
                    self.resume_to = Some(to);
                }
            }
            (Msg::Dropped, Role::Backup { primary }) if from == primary => {
                // The primary stopped counting on this replica (it took it for dead): it must
                // not serve, nor take over, from what it has; it recovers first.
                self.assembling = None;
                self.ask_snapshot(from);
            }
            (Msg::Snap(s), Role::Recovering { from: src })
                if from == src && s.nonce == self.snap_nonce =>
            {
                // Pieces come in order and cover every segment whole.
                let (seg, off) = self.snap_next;
                let empty = self.segments.is_empty();
                if (seg, off) != (s.segment, s.offset) && !(empty && s.last && s.bytes.is_empty()) {
                    self.counters.refused += 1;
                    return;
                }
                let ok = empty
                    || self
                        .segments
                        .get_mut(s.segment as usize)
                        .and_then(|g| {
                            let a = s.offset as usize;
                            g.mem.get_mut(a..a + s.bytes.len())
                        })
                        .map(|dst| dst.copy_from_slice(s.bytes))
                        .is_some();
                if !ok {
                    self.counters.refused += 1;
                    return;
                }
                // The memory is the snapshot's now: what the tail would undo is gone.
                self.catching = None;
                self.clear_tail();
                if !empty {
                    let end = off + s.bytes.len() as u32;
                    self.snap_next = if end as usize == self.segments[seg as usize].mem.len() {
                        (seg + 1, 0)
                    } else {
                        (seg, end)
                    };
                }
                let whole = empty || self.snap_next == (self.segments.len() as SegmentId, 0);
                if s.last != whole {
                    self.counters.refused += 1;
                    return;
                }
                if s.last {
                    self.seq = s.seq;
                    self.role = Role::Backup { primary: from };
                    self.events.push_back(Event::Recovered);
                    // The primary's commits up to the snapshot wait for this.
                    msg::ack(s.seq, &mut self.buf);
                    self.out.push_back((from, self.buf.clone()));
                }
                self.snap_heard = None;
            }
            _ => self.counters.refused += 1,
        }
    }

    fn on_write(&mut self, from: NodeId, seq: u64, part: u16, parts: u16, bytes: &[u8]) {
        if seq <= self.seq {
            self.counters.duplicates += 1;
            return;
        }
        let fresh = part == 0 && seq == self.seq + 1;
        match &mut self.assembling {
            Some(a) if a.seq == seq && a.got.len() == part as usize && a.parts == parts => {
                a.bytes += bytes.len();
                if a.bytes > self.cfg.log_bytes {
                    self.assembling = None;
                    self.counters.refused += 1;
                    return;
                }
                a.got.push(bytes.to_vec());
            }
            _ if fresh => {
                self.assembling = Some(Assembly {
                    seq,
                    parts,
                    got: vec![bytes.to_vec()],
                    bytes: bytes.len(),
                })
            }
            _ => {
                // Out of order on an in-order channel: a broken or hostile sender.
                self.assembling = None;
                self.counters.refused += 1;
                return;
            }
        }
        let a = self.assembling.as_ref().expect("set above");
        if a.got.len() < a.parts as usize {
            return;
        }
        let a = self.assembling.take().expect("set above");
        // Check every range before writing any: a commit is applied whole or not at all.
        let fits = |r: &msg::Range<'_>| {
            self.segments
                .get(r.segment as usize)
                .is_some_and(|g| r.offset as usize + r.bytes.len() <= g.mem.len())
        };
        let all_fit = a.got.iter().all(|m| match Msg::parse(m) {
            Ok(Msg::Write(w)) => w.ranges().all(|r| fits(&r)),
            _ => false,
        });
        if !all_fit {
            self.counters.refused += 1;
            return;
        }
        // A backup keeps the commit and the bytes it overwrites (a disk replay does not).
        let keep = from != DISK;
        let (mut index, mut old) = if keep {
            self.spare_undo.pop().unwrap_or_default()
        } else {
            Default::default()
        };
        for m in &a.got {
            if let Ok(Msg::Write(w)) = Msg::parse(m) {
                for r in w.ranges() {
                    let o = r.offset as usize;
                    let dst = &mut self.segments[r.segment as usize].mem[o..o + r.bytes.len()];
                    if keep {
                        index.push((r.segment, r.offset, r.bytes.len() as u32));
                        old.extend_from_slice(dst);
                    }
                    dst.copy_from_slice(r.bytes);
                }
            }
        }
        self.seq = seq;
        self.counters.applied += 1;
        if keep {
            let cost = (a.bytes + old.len()).max(PENDING_COST);
            self.keep(TailEntry {
                seq,
                parts: a.got,
                undo: Some((index, old)),
                cost,
            });
        }
        msg::queue_ack(&mut self.out, from, seq);
    }

    /// Undoes the tail's commits above `r`, newest first. False if the tail does not hold
    /// them all, or holds one it cannot undo (the memory is then in between: the caller
    /// takes a snapshot).
    fn rewind(&mut self, r: u64) -> bool {
        while self.seq > r {
            let Some(e) = self.tail.pop_back() else {
                return false;
            };
            self.tail_cost -= e.cost;
            let Some((index, old)) = e.undo.filter(|_| e.seq == self.seq) else {
                return false;
            };
            let mut end = old.len();
            for &(seg, off, len) in index.iter().rev() {
                let (o, n) = (off as usize, len as usize);
                self.segments[seg as usize].mem[o..o + n].copy_from_slice(&old[end - n..end]);
                end -= n;
            }
            self.seq -= 1;
            self.counters.undone += 1;
        }
        true
    }

    /// Caught up with the successor `src`: a backup of it again.
    fn caught_up(&mut self, src: NodeId) {
        self.counters.caught_up += 1;
        self.role = Role::Backup { primary: src };
        self.catching = None;
        self.resume_to = None;
        self.snap_heard = None;
        self.events.push_back(Event::Recovered);
        // The new primary's commits up to here wait for this.
        msg::ack(self.seq, &mut self.buf);
        self.out.push_back((src, self.buf.clone()));
    }

    /// Backup `k` has (or is sent) everything up to now: commits are shipped to it again.
    fn synced(&mut self, k: NodeId) {
        if let Role::Primary { backups } = &mut self.role {
            if !backups.contains(&k) {
                backups.push(k);
            }
        }
        self.syncing.retain(|&b| b != k);
        if self.syncing.is_empty() {
            // Kept only for the backups catching up.
            self.clear_tail();
        }
    }

    /// Backup `from`, which held commits up to `seq` of `old` (the primary this node
    /// followed until its promotion), asks for what it lacks. Both held a prefix of `old`'s
    /// commits, so they agree up to the smaller of `seq` and this node's promotion point:
    /// the backup undoes what it has above that (`old`'s commits this node never had, none
    /// of them acknowledged) and applies this node's commits from there, from the tail. A
    /// tail that does not reach back that far, or another history, takes a snapshot.
    fn answer_catch_up(&mut self, from: NodeId, nonce: u64, seq: u64, old: NodeId) {
        let r = seq.min(self.promoted_at);
        let reaches = r == self.seq
            || (self.tail.front().is_some_and(|e| e.seq <= r + 1)
                && self.tail.back().is_some_and(|e| e.seq == self.seq));
        if self.promoted_from == Some(old) && reaches {
            let mut m = Vec::new();
            msg::resume(nonce, r, self.seq, &mut m);
            self.out.push_back((from, m));
            for e in self.tail.iter().filter(|e| e.seq > r) {
                for p in &e.parts {
                    self.out.push_back((from, p.clone()));
                }
            }
        } else {
            self.send_snapshot(from, nonce);
        }
        self.synced(from);
    }

    /// Sends every segment to `to` as it would be with every open transaction rolled back,
    /// and the commit sequence number it covers. Commits after it follow on the same
    /// in-order channel.
    fn send_snapshot(&mut self, to: NodeId, nonce: u64) {
        self.counters.snapshots_sent += 1;
        let piece = self
            .cfg
            .message_bytes
            .saturating_sub(msg::SNAP_HEADER)
            .max(1);
        let n = self.segments.len();
        if n == 0 {
            let mut m = Vec::new();
            let f = msg::SnapFields {
                last: true,
                nonce,
                seq: self.seq,
                segment: 0,
                offset: 0,
            };
            msg::snap(f, &[], &mut m);
            self.out.push_back((to, m));
            return;
        }
        for s in 0..n {
            let img = self.image(s);
            let mut off = 0;
            loop {
                let end = (off + piece).min(img.len());
                let last = s + 1 == n && end == img.len();
                let mut m = Vec::new();
                let f = msg::SnapFields {
                    last,
                    nonce,
                    seq: self.seq,
                    segment: s as SegmentId,
                    offset: off as u32,
                };
                msg::snap(f, &img[off..end], &mut m);
                self.out.push_back((to, m));
                off = end;
                if off >= img.len() {
                    break;
                }
            }
        }
    }

    /// Segment `s` as it would be with every open transaction rolled back.
    fn image(&self, s: usize) -> Vec<u8> {
        let mut img = self.segments[s].mem.clone();
        for t in self.txns.values() {
            for (us, off, old) in t.undo.iter().rev() {
                if *us as usize == s {
                    let a = *off as usize;
                    img[a..a + old.len()].copy_from_slice(old);
                }
            }
        }
        img
    }

    /// Backup `k` is dead (the failure detector or the transport said so): commits stop
    /// waiting for it. A backup restarted later comes back through a snapshot.
    pub fn peer_down(&mut self, k: NodeId) {
        let Role::Primary { mut backups } = self.role.clone() else {
            return;
        };
        if !backups.contains(&k) {
            return;
        }
        backups.retain(|&b| b != k);
        self.syncing.retain(|&b| b != k);
        if self.syncing.is_empty() {
            self.clear_tail();
        }
        for p in self.pending.iter_mut() {
            if p.missing.contains(&k) {
                p.missing.retain(|&b| b != k);
                if p.missing.is_empty() {
                    self.counters.degraded += 1;
                }
            }
        }
        self.role = Role::Primary { backups };
        self.events.push_back(Event::BackupLost(k));
        self.complete();
    }

    /// Tells node `k`, which this primary dropped as dead ([`Node::peer_down`]) but which
    /// still speaks, that it is out: it recovers through a snapshot and is counted again.
    pub fn tell_dropped(&mut self, k: NodeId) {
        let mut m = Vec::new();
        msg::dropped(&mut m);
        self.out.push_back((k, m));
    }

    /// Whether `k` is one of this primary's backups.
    pub fn has_backup(&self, k: NodeId) -> bool {
        matches!(&self.role, Role::Primary { backups } if backups.contains(&k))
    }

    /// This backup's primary is dead and `successor` takes over (the backups agree on it,
    /// e.g. the lowest live node of the configuration). If that is this node it becomes the
    /// primary; otherwise it catches up from the successor, whose log may hold a prefix of
    /// the old primary's other than this node's: it sends CATCH_UP with its last commit;
    /// the successor answers RESUME (undo the old primary's commits above the point where
    /// the two agree, none of them acknowledged) and the commits it lacks from its tail, or
    /// a snapshot when its tail does not reach back that far. A commit whose last part never
    /// came was never acknowledged: it is dropped.
    ///
    /// `live` are the other nodes believed alive: a new primary makes them its backups, so
    /// its commits wait until they have caught up (acknowledged) rather than complete on one
    /// replica; it ships them nothing until then, and sends its own commits meanwhile after
    /// what they lack. A node still recovering from the dead primary asks the successor for
    /// a snapshot instead.
    pub fn primary_down(&mut self, successor: NodeId, live: &[NodeId]) {
        let old = match self.role {
            Role::Backup { primary } => primary,
            Role::Recovering { from } if from != successor && successor != self.cfg.node => {
                self.ask_snapshot(successor);
                return;
            }
            _ => return,
        };
        // A commit whose last part never came was never acknowledged.
        self.assembling = None;
        if successor == self.cfg.node {
            self.durable = self.seq;
            let backups: Vec<NodeId> = live
                .iter()
                .copied()
                .filter(|&k| k != self.cfg.node)
                .collect();
            self.promoted_at = self.seq;
            self.promoted_from = Some(old);
            self.syncing = backups.clone();
            self.role = Role::Primary { backups };
            self.events.push_back(Event::Promoted);
            for (k, nonce, seq, p) in std::mem::take(&mut self.early) {
                if self.syncing.contains(&k) {
                    self.answer_catch_up(k, nonce, seq, p);
                }
            }
            if self.syncing.is_empty() {
                self.clear_tail();
            }
        } else {
            self.ask_catch_up(successor, old);
        }
    }
}

/// How many WRITE parts the ranges take, and the bytes of the commit record.
fn plan_parts(writes: &[SetRange], room: usize, message_bytes: usize) -> (usize, usize) {
    plan_lens(writes.iter().map(|r| r.len), room, message_bytes)
}

/// [`plan_parts`] for ranges of these lengths.
pub(crate) fn plan_lens(
    lens: impl Iterator<Item = u32>,
    room: usize,
    message_bytes: usize,
) -> (usize, usize) {
    let mut parts = 1usize;
    let mut used = WRITE_HEADER;
    let mut bytes = 0usize;
    for len in lens {
        let mut left = len as usize;
        while left > 0 {
            if used + RANGE_HEADER >= message_bytes {
                parts += 1;
                used = WRITE_HEADER;
            }
            let n = left.min(message_bytes - used - RANGE_HEADER).min(room);
            used += RANGE_HEADER + n;
            bytes += RANGE_HEADER + n;
            left -= n;
        }
    }
    (parts, bytes)
}
