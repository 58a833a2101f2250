//! One CRMem node in the symmetric configuration (Roşu & Schwan, *Support for Recoverable
//! Memory in the Distributed Virtual Communication Machine*, §3), sans-IO: transactions run on
//! every node; every node holds a replica of every segment and backs up every other.
//!
//! **Locks.** Every segment has a home node (configured per segment; when it is not in the
//! view, the next live node after it). `set_range` maps the range to its locks and takes them
//! in this node's lock table, then, when the home is another node, asks the home for them in
//! one batched LOCK request (at most [`LOCKS_PER_MESSAGE`] locks a message; a larger set is cut
//! into parts the home assembles and takes all or none). The home's table is shared by its
//! own transactions and the other nodes: a home grants a request's locks to the requester's
//! node, which holds them (in its `cache`) until it gives them back with a RETURN. A wait,
//! local or remote, past the transaction's deadline aborts it with [`SymAbort::LockTimeout`];
//! its requests not granted yet are withdrawn with a RELEASE. A waiter (a transaction here,
//! or a remote request at its home) is filed under one lock that keeps it out and tried
//! again when that lock is released or its hold changes, the lock's waiters in the order
//! they came.
//!
//! **Kept locks.** A node gives a lock back once none of its transactions holds it, at once
//! by default; with [`Config::cache_locks`] it keeps it for its next transactions, which
//! then take it with no message, until the home recalls it (RECALL: a transaction of the
//! home or of another node waits for it). A recalled lock is taken by no new transaction
//! of the node and goes back when the last holder there is done. A RETURN names the node's
//! last commit (the next holder's dependency) and the last GRANT number the node had seen:
//! the home frees only what grants up to that number gave, so a RETURN that crossed a
//! later grant of the same lock frees nothing, and a RECALL of a lock the node does not
//! hold (given back already, or granted to a transaction that ended before the grant came)
//! is answered with a RETURN at once. Keeping locks saves the LOCK/GRANT round trip of a
//! node that uses the same locks again, as when each node runs its own branches' TpcB
//! transactions; when nodes take turns on the same locks, each turn costs a RECALL/RETURN
//! round trip more, and the home's own transactions wait for it.
//!
//! **Commit.** The write set goes to every other live node as a remote atomic write (SWRITE
//! parts, applied only when the last has come, acknowledged); every node's commit log is thus
//! replicated on all the others. All, not one: every replica must hold every write before a
//! conflicting transaction elsewhere may read it, so the write set reaches every node anyway,
//! and any survivor can then complete a dead node's log. The locks are released at commit,
//! here, and the ones of other homes go back (or are kept) as above, the RETURN after the
//! commit's SWRITE on the channel; the commit completes (in this node's log order) when
//! every live node has acknowledged it.
//!
//! **Dependencies.** A home keeps per origin the last commit a RETURN named, and its own
//! last commit (`released`), and names those in every GRANT; the grantee uses its locks only
//! once it has applied them (`TxnState::WaitApply`), and its own commit carries what its
//! grants named: a replica applies a commit only after those. A transaction that takes a
//! kept lock depends on the highest commits any grant to its node named (`granted_deps`):
//! the grant that brought the lock may have gone to a transaction that ended before it
//! applied them. Replicas thus apply conflicting writes in the order the locks were granted,
//! and a transaction finds every write made under its locks in its own replica.
//!
//! **Replicated logs.** Each node keeps, per origin, the commits it applied that the origin
//! has not yet declared complete everywhere (each SWRITE carries the origin's complete mark),
//! bounded by the log size.
//!
//! **View changes** ([`SymNode::view_change`], told to every member with the same view, by
//! the driver's membership or the application):
//! open transactions are aborted ([`SymAbort::ViewChange`]); every lock a node holds of
//! another home is freed at the home and forgotten by the node (the commits made under them
//! complete before the view serves); each survivor relays to every other the dead node's commits it has whole
//! (applied, or waiting for a dependency), with their dependencies, so all reach the same
//! prefix of the dead node's log; each then waits for its own commits to complete and sends FLUSH; when a node has every
//! member's FLUSH, no commit is in flight, every lock is free, and a dead node's commit still
//! waiting for a dependency (which no survivor has) is dropped, so the homes may move ([`SymEvent::HomeMoved`]) and it serves again
//! ([`SymEvent::Ready`]). A restarted node joins through a view change: when the barrier
//! ends, the lowest surviving member sends it every segment and the commit number it covers
//! per origin (SEQS, then SNAP pieces); commits that reach it first are held and applied
//! after. It serves once the snapshot is in ([`SymEvent::Recovered`]). What its previous
//! process sent and the link delivers late, after the view that admits the new process but
//! before the new process's RECOVER (the first thing it sends each node), is refused: the
//! new process numbers its commits from 1 again, and an old commit would pass for its own.

use crate::lock::{LockId, LockMapping, LockState, LOCKS_PER_RANGE_MAX};
use crate::msg::{self, Msg, MsgError, WriteBuilder, MAGIC, RANGE_HEADER, WRITE_HEADER};
use crate::node::{
    plan_lens, Config, Counters, CrError, Lock, Mode, NodeId, SegmentId, TxnId, MESSAGE_BYTES_MAX,
};
use crate::txmem::{self, take_into, Held, Segment, SetRange, Undo};
use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};
use txcast_proto::codec::{Reader, Writer};
use txcast_proto::time::Instant;

/// Locks one LOCK message names at most (the paper's implementation: 39, what fit in its
/// control message); fewer when the configured message size is smaller.
pub const LOCKS_PER_MESSAGE: usize = 39;
/// Nodes of a symmetric database at most.
pub const NODES_MAX: usize = 64;
/// Ranges one [`SymNode::set_ranges`] declares at most.
pub const RANGES_PER_CALL: usize = 64;
/// Requests of one transaction a home keeps (assembling or waiting) at most.
const REQUESTS_MAX: usize = RANGES_PER_CALL;
/// What a commit costs the log at least (a read-only one, which ships nothing).
const PENDING_COST: usize = 64;

/// SWRITE: `durable u64`, deps, then a whole WRITE part (msg.rs): a part of the sender's
/// commit; `durable`, the sender's last commit every live node holds. Deps (`count u8,
/// (origin u16, seq u64)*`): the commits it must be applied after.
pub const SWRITE: u8 = 16;
/// RELAY: `origin u16`, deps, then a whole WRITE part: a dead origin's commit, passed on.
pub const RELAY: u8 = 17;
/// LOCK: `view u64, txn u64, req u32, part u16, parts u16, segment u16, write u8, count u16`,
/// locks. A home takes requests of its own view only (a request of an earlier view, or to
/// an earlier process of the home, was released with that view).
pub const LOCK: u8 = 18;
/// GRANT: `txn u64, req u32, no u64`, deps: the request's locks are the receiver's; `no`
/// numbers the grant (rising on the channel); deps, the commits the grantee must have
/// applied before it uses the locks.
pub const GRANT: u8 = 19;
/// RELEASE: `txn u64`: the transaction ended (aborted) with requests at this home not
/// granted yet: the home forgets them.
pub const RELEASE: u8 = 20;
/// FLUSH: `view u64`: the sender's commits are complete and its relays sent.
pub const FLUSH: u8 = 21;
/// SEQS: `view u64, incarnation u64, count u16, (node u16, seq u64)*`: the snapshot that
/// follows, for the joining process of that incarnation, covers these.
pub const SEQS: u8 = 22;
/// RECOVER: `incarnation u64`: a restarted process, waiting for its snapshot, names itself.
pub const RECOVER: u8 = 23;
/// RECALL: `view u64, segment u16, count u16`, locks: a home wants these locks of the
/// receiver back (another transaction waits for them).
pub const RECALL: u8 = 24;
/// RETURN: `view u64, seq u64, got u64, segment u16, count u16`, locks: the sender holds
/// these locks of the receiver's no more, as of the grants up to number `got` (a later
/// grant, in flight, gives them again); `seq`, its last commit then, is what the next
/// holder depends on.
pub const RETURN: u8 = 25;

const LOCK_HEADER: usize = 2 + 8 + 8 + 4 + 2 + 2 + 2 + 1 + 2;
/// RETURN's header (RECALL's is 16 bytes shorter).
const RETURN_HEADER: usize = 2 + 8 + 8 + 8 + 2 + 2;
/// One dependency on the wire: origin, seq.
const DEP_BYTES: usize = 2 + 8;
/// Write-set bytes an SWRITE part carries at least.
const PART_BYTES_MIN: usize = 32;

/// The smallest message a node of `n` takes for [`Config::message_bytes`]: an SWRITE part
/// naming a dependency on every node still carries [`PART_BYTES_MIN`] bytes of its write set.
fn message_bytes_min(n: usize) -> usize {
    let envelope = 2 + 8 + 1 + DEP_BYTES * n;
    (envelope + WRITE_HEADER + RANGE_HEADER + PART_BYTES_MIN).max(64)
}

/// The commits a commit or a grant depends on, as they came (`(origin u16, seq u64)*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deps<'a>(&'a [u8]);

impl<'a> Deps<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Deps<'a>, MsgError> {
        let count = r.u8()? as usize;
        if count > NODES_MAX {
            return Err(MsgError::RangeTruncated);
        }
        Ok(Deps(r.take(count * DEP_BYTES)?))
    }

    pub fn iter(&self) -> impl Iterator<Item = (NodeId, u64)> + 'a {
        self.0.chunks_exact(DEP_BYTES).map(|c| {
            let mut r = Reader::new(c);
            (r.u16().unwrap_or(0), r.u64().unwrap_or(0))
        })
    }

    pub fn len(&self) -> usize {
        self.0.len() / DEP_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn write_deps(w: &mut Writer<'_>, deps: &[(NodeId, u64)]) {
    w.u8(deps.len() as u8);
    for &(o, s) in deps {
        w.u16(o).u64(s);
    }
}

/// Merges `(origin, seq)` into `deps`, keeping the highest seq per origin.
fn merge_dep(deps: &mut Vec<(NodeId, u64)>, (o, s): (NodeId, u64)) {
    if s == 0 {
        return;
    }
    match deps.iter_mut().find(|d| d.0 == o) {
        Some(d) => d.1 = d.1.max(s),
        None => deps.push((o, s)),
    }
}

/// A symmetric message, decoded (borrowing the datagram). ACK and SNAP are msg.rs's.
#[derive(Debug, PartialEq, Eq)]
pub enum SymMsg<'a> {
    Write {
        durable: u64,
        deps: Deps<'a>,
        seq: u64,
        part: u16,
        parts: u16,
        inner: &'a [u8],
    },
    Relay {
        origin: u16,
        deps: Deps<'a>,
        seq: u64,
        part: u16,
        parts: u16,
        inner: &'a [u8],
    },
    Lock {
        view: u64,
        txn: u64,
        req: u32,
        part: u16,
        parts: u16,
        segment: u16,
        write: bool,
        locks: &'a [u8],
    },
    Grant {
        txn: u64,
        req: u32,
        no: u64,
        deps: Deps<'a>,
    },
    Release {
        txn: u64,
    },
    Flush {
        view: u64,
    },
    Seqs {
        view: u64,
        incarnation: u64,
        seqs: Vec<(NodeId, u64)>,
    },
    Recover {
        incarnation: u64,
    },
    Recall {
        view: u64,
        segment: u16,
        locks: &'a [u8],
    },
    Return {
        view: u64,
        seq: u64,
        got: u64,
        segment: u16,
        locks: &'a [u8],
    },
    Ack {
        seq: u64,
    },
    Snap(msg::SnapPiece<'a>),
}

impl<'a> SymMsg<'a> {
    pub fn parse(b: &'a [u8]) -> Result<SymMsg<'a>, MsgError> {
        let mut r = Reader::new(b);
        r.need(2)?;
        if r.u8()? != MAGIC {
            return Err(MsgError::Magic);
        }
        let inner_write = |inner: &'a [u8]| match Msg::parse(inner)? {
            Msg::Write(w) => Ok((w.seq, w.part, w.parts)),
            _ => Err(MsgError::Kind(inner.get(1).copied().unwrap_or(0))),
        };
        match r.u8()? {
            SWRITE => {
                let durable = r.u64()?;
                let deps = Deps::read(&mut r)?;
                let inner = r.rest();
                let (seq, part, parts) = inner_write(inner)?;
                Ok(SymMsg::Write {
                    durable,
                    deps,
                    seq,
                    part,
                    parts,
                    inner,
                })
            }
            RELAY => {
                let origin = r.u16()?;
                let deps = Deps::read(&mut r)?;
                let inner = r.rest();
                let (seq, part, parts) = inner_write(inner)?;
                Ok(SymMsg::Relay {
                    origin,
                    deps,
                    seq,
                    part,
                    parts,
                    inner,
                })
            }
            LOCK => {
                let (view, txn, req) = (r.u64()?, r.u64()?, r.u32()?);
                let (part, parts, segment) = (r.u16()?, r.u16()?, r.u16()?);
                let write = r.u8()? != 0;
                let count = r.u16()? as usize;
                if parts == 0 || part >= parts {
                    return Err(MsgError::Part { part, parts });
                }
                if count > LOCKS_PER_MESSAGE {
                    return Err(MsgError::RangeTruncated);
                }
                let locks = r.take(count * 4)?;
                r.finish()?;
                Ok(SymMsg::Lock {
                    view,
                    txn,
                    req,
                    part,
                    parts,
                    segment,
                    write,
                    locks,
                })
            }
            GRANT => {
                let (txn, req, no) = (r.u64()?, r.u32()?, r.u64()?);
                let deps = Deps::read(&mut r)?;
                r.finish()?;
                Ok(SymMsg::Grant { txn, req, no, deps })
            }
            RELEASE => {
                let txn = r.u64()?;
                r.finish().map_err(|_| MsgError::Short)?;
                Ok(SymMsg::Release { txn })
            }
            FLUSH => {
                let view = r.u64()?;
                r.finish().map_err(|_| MsgError::Short)?;
                Ok(SymMsg::Flush { view })
            }
            SEQS => {
                let (view, incarnation) = (r.u64()?, r.u64()?);
                let count = r.u16()? as usize;
                if count > NODES_MAX {
                    return Err(MsgError::RangeTruncated);
                }
                let mut seqs = Vec::with_capacity(count);
                for _ in 0..count {
                    seqs.push((r.u16()?, r.u64()?));
                }
                r.finish()?;
                Ok(SymMsg::Seqs {
                    view,
                    incarnation,
                    seqs,
                })
            }
            RECOVER => {
                let incarnation = r.u64()?;
                r.finish().map_err(|_| MsgError::Short)?;
                Ok(SymMsg::Recover { incarnation })
            }
            kind @ (RECALL | RETURN) => {
                let view = r.u64()?;
                let (seq, got) = if kind == RETURN {
                    (r.u64()?, r.u64()?)
                } else {
                    (0, 0)
                };
                let segment = r.u16()?;
                let count = r.u16()? as usize;
                if count == 0 || count > LOCKS_PER_MESSAGE {
                    return Err(MsgError::RangeTruncated);
                }
                let locks = r.take(count * 4)?;
                r.finish()?;
                Ok(if kind == RETURN {
                    SymMsg::Return {
                        view,
                        seq,
                        got,
                        segment,
                        locks,
                    }
                } else {
                    SymMsg::Recall {
                        view,
                        segment,
                        locks,
                    }
                })
            }
            _ => match Msg::parse(b)? {
                Msg::Ack { seq } => Ok(SymMsg::Ack { seq }),
                Msg::Snap(s) => Ok(SymMsg::Snap(s)),
                _ => Err(MsgError::Kind(b[1])),
            },
        }
    }
}

fn lock_msg(
    out: &mut Vec<u8>,
    view: u64,
    (txn, req, part, parts): (u64, u32, u16, u16),
    segment: u16,
    write: bool,
    locks: &[LockId],
) {
    out.clear();
    let mut w = Writer::new(out);
    w.u8(MAGIC)
        .u8(LOCK)
        .u64(view)
        .u64(txn)
        .u32(req)
        .u16(part)
        .u16(parts)
        .u16(segment)
        .u8(u8::from(write))
        .u16(locks.len() as u16);
    for &l in locks {
        w.u32(l);
    }
}

/// RECALL (`ret` None) or RETURN (`ret`: seq, got) messages for `locks` of `segment`, at
/// most [`LOCKS_PER_MESSAGE`] (and what `message_bytes` holds) a message, to `to`.
fn lock_list_msgs(
    out: &mut VecDeque<(NodeId, Vec<u8>)>,
    to: NodeId,
    (view, ret, message_bytes): (u64, Option<(u64, u64)>, usize),
    segment: SegmentId,
    locks: &[LockId],
) {
    let per = LOCKS_PER_MESSAGE
        .min(message_bytes.saturating_sub(RETURN_HEADER) / 4)
        .max(1);
    for c in locks.chunks(per) {
        let mut m = Vec::with_capacity(RETURN_HEADER + 4 * c.len());
        let mut w = Writer::new(&mut m);
        w.u8(MAGIC)
            .u8(if ret.is_some() { RETURN } else { RECALL })
            .u64(view);
        if let Some((seq, got)) = ret {
            w.u64(seq).u64(got);
        }
        w.u16(segment).u16(c.len() as u16);
        for &l in c {
            w.u32(l);
        }
        out.push_back((to, m));
    }
}

fn lock_ids(locks: &[u8]) -> impl Iterator<Item = LockId> + '_ {
    locks
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

fn small(kind: u8, a: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    Writer::new(&mut out).u8(MAGIC).u8(kind).u64(a);
    out
}

fn grant_msg(txn: u64, req: u32, no: u64, deps: &[(NodeId, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(23 + DEP_BYTES * deps.len());
    let mut w = Writer::new(&mut out);
    w.u8(MAGIC).u8(GRANT).u64(txn).u32(req).u64(no);
    write_deps(&mut w, deps);
    out
}

/// SWRITE's head (`durable`) or RELAY's (`origin`), then the deps.
fn head(durable: Option<u64>, origin: NodeId, deps: &[(NodeId, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + DEP_BYTES * deps.len());
    let mut w = Writer::new(&mut out);
    match durable {
        Some(d) => w.u64(d),
        None => w.u16(origin),
    };
    write_deps(&mut w, deps);
    out
}

fn envelope(kind: u8, head: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + head.len() + inner.len());
    out.extend_from_slice(&[MAGIC, kind]);
    out.extend_from_slice(head);
    out.extend_from_slice(inner);
    out
}

/// Why CRMem aborted a transaction itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymAbort {
    /// Its locks (here or at the home) did not come by its deadline.
    LockTimeout,
    /// The view changed (a node died or joined): open transactions are rolled back.
    ViewChange,
}

/// What the application hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymEvent {
    /// A waiting `set_range` got its locks.
    Granted(TxnId),
    /// The transaction is on every live node.
    Committed(TxnId),
    /// The transaction was rolled back.
    Aborted(TxnId, SymAbort),
    /// A node left the view.
    NodeLost(NodeId),
    /// A segment's locks are held by another node now.
    HomeMoved { segment: SegmentId, home: NodeId },
    /// The view change is over: transactions may begin again.
    Ready,
    /// The snapshot is in: this restarted node serves.
    Recovered,
}

/// Where a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Serving,
    /// In a view change, waiting for the members' FLUSH.
    Changing,
    /// Restarted: waits for its snapshot.
    Recovering,
}

/// A segment and its configured home.
struct Homed {
    seg: Segment,
    home: NodeId,
}

impl std::ops::Deref for Homed {
    type Target = Segment;
    fn deref(&self) -> &Segment {
        &self.seg
    }
}

impl std::ops::DerefMut for Homed {
    fn deref_mut(&mut self) -> &mut Segment {
        &mut self.seg
    }
}

impl std::borrow::Borrow<Segment> for Homed {
    fn borrow(&self) -> &Segment {
        &self.seg
    }
}

impl std::borrow::BorrowMut<Segment> for Homed {
    fn borrow_mut(&mut self) -> &mut Segment {
        &mut self.seg
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TxnState {
    Active,
    /// For locks in this node's table.
    WaitLocal,
    /// For the homes' grants of its requests.
    WaitHome,
    /// Granted its locks, for the commits written under them to be applied here.
    WaitApply,
}

struct Txn {
    state: TxnState,
    deadline: Instant,
    ranges: Vec<SetRange>,
    /// Ranges declared, in order, whose local locks are not taken yet.
    todo: Vec<SetRange>,
    /// Ranges whose local locks are taken, usable once their homes' grants are in.
    taken: Vec<SetRange>,
    undo: Undo,
    held: Held,
    /// Requests sent to homes (numbered from 1), those not granted yet, and their home.
    req: u32,
    asked: Vec<u32>,
    asking: NodeId,
    /// The locks of the requests not granted yet: (request, segment, lock, write).
    asked_locks: Vec<(u32, SegmentId, LockId, bool)>,
    /// The commits its grants named: applied here before it touches the ranges, and
    /// before its own commit anywhere.
    deps: Vec<(NodeId, u64)>,
    /// While it waits for a lock in this node's table: the lock whose release tries it again.
    blocked_on: Option<(SegmentId, LockId)>,
}

struct Pending {
    seq: u64,
    txn: TxnId,
    bytes: usize,
    missing: Vec<NodeId>,
}

/// A remote transaction's requests at this home: being assembled (the last) or waiting,
/// granted in order. What it is granted, its node holds.
#[derive(Default)]
struct Remote {
    from: NodeId,
    wants: VecDeque<Want>,
    /// While its first request waits: the lock whose release tries it again.
    blocked_on: Option<(SegmentId, LockId)>,
}

/// What waits for a lock in this node's table: a transaction of this node, or (at its
/// home) a remote transaction's first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiter {
    Local(TxnId),
    Remote(TxnId),
}

/// A lock of this home another node holds (its mode is the lock table's): the last GRANT
/// that gave it (a RETURN covers the grants its sender had received), and whether it was
/// recalled.
#[derive(Clone, Copy)]
struct Hold {
    grant: u64,
    recalled: bool,
}

/// A lock of another home this node holds: in which mode, and whether the home recalled it
/// (it goes back when this node's transactions holding it are done).
#[derive(Clone, Copy)]
struct Cached {
    write: bool,
    recalled: bool,
}

/// The owner of the locks node `k` holds in a home's lock table: no transaction of the
/// home's own has this id (theirs carry the home's number in the top bits).
fn node_owner(k: NodeId) -> u64 {
    (k as u64) << 48 | 0xFFFF_FFFF_FFFF
}

struct Want {
    req: u32,
    got: u16,
    parts: u16,
    segment: SegmentId,
    write: bool,
    locks: Vec<LockId>,
}

/// A commit of an origin, whole: its number, WRITE parts, bytes and dependencies.
struct Whole {
    seq: u64,
    parts: Vec<Vec<u8>>,
    bytes: usize,
    deps: Vec<(NodeId, u64)>,
}

/// An origin's commits as this replica has them.
#[derive(Default)]
struct Origin {
    applied: u64,
    /// The last commit assembled (applied, or waiting in `blocked`).
    received: u64,
    asm: Option<(Whole, u16)>,
    /// Whole commits waiting, in order, for the commits they depend on.
    blocked: VecDeque<Whole>,
    blocked_bytes: usize,
    /// Applied commits the origin has not declared complete.
    tail: VecDeque<Whole>,
    tail_bytes: usize,
}

struct Recovery {
    source: Option<(NodeId, u64)>,
    seqs: Vec<(NodeId, u64)>,
    next: (SegmentId, u32),
    held: VecDeque<(NodeId, Vec<u8>)>,
    held_bytes: usize,
}

/// A symmetric CRMem node (see the module comment).
pub struct SymNode {
    cfg: Config,
    n: usize,
    live: Vec<NodeId>,
    view: u64,
    phase: Phase,
    /// Per node, the highest incarnation a RECOVER named; the joining node a snapshot is
    /// owed to in this view, and the incarnation it was sent to (0: none yet).
    recovers: Vec<u64>,
    owed: Option<(NodeId, u64)>,
    /// Per node: whether the last message it sent here was a RECOVER (its stream is a new
    /// process's, which sends nothing else before its snapshot), and whether what comes
    /// from it now is an earlier process's than the one the view admitted (refused until
    /// the new process's RECOVER, which the link delivers after the old process's last
    /// message).
    recover_last: Vec<bool>,
    stale: Vec<bool>,
    /// While changing: members whose FLUSH has not come, whether ours is sent, who joins.
    flush_wait: Vec<NodeId>,
    flushed: bool,
    joining: Option<NodeId>,
    early_flush: Vec<(NodeId, u64)>,
    recovery: Option<Recovery>,
    segments: Vec<Homed>,
    txns: FxHashMap<TxnId, Txn>,
    next_txn: u64,
    /// Transactions waiting, local or at a home, by deadline.
    waiting: BTreeSet<(Instant, TxnId)>,
    /// Those of them waiting for commits to be applied here.
    apply_waiting: Vec<TxnId>,
    /// Per lock of this node's table, what waits for it, in the order they came: each
    /// waiter is filed under one lock that keeps it out, and tried again when that lock is
    /// released (or its hold changes), not on every event.
    lock_waiters: FxHashMap<(SegmentId, LockId), Vec<Waiter>>,
    /// Locks with waiters released since the last [`SymNode::grant_waiting`].
    woken: Vec<(SegmentId, LockId)>,
    /// Every remote request waiting is tried at the next [`SymNode::grant_waiting`] (a view
    /// change freed every lock other nodes held).
    rescan: bool,
    remote: FxHashMap<TxnId, Remote>,
    /// As a home: its locks other nodes hold, by segment, lock and node; the number of the
    /// last GRANT sent (numbered across all nodes, rising on every channel).
    holds: FxHashMap<(SegmentId, LockId, NodeId), Hold>,
    grants: u64,
    /// Per home, the number of the last GRANT it sent here (a RETURN names it).
    grant_seen: Vec<u64>,
    /// The locks of other homes this node holds.
    cache: FxHashMap<(SegmentId, LockId), Cached>,
    /// Per origin, the highest commit a grant to this node named: a transaction using a lock
    /// this node held before it began applies these first (the grant that brought the lock
    /// may have gone to a transaction that aborted before it applied them).
    granted_deps: Vec<u64>,
    /// Locks to give back, by home and segment, gathered while locks are released.
    returning: Vec<(NodeId, SegmentId, LockId)>,
    seq: u64,
    durable: u64,
    log_used: usize,
    pending: VecDeque<Pending>,
    origins: Vec<Origin>,
    /// As a home: per origin, the last commit whose locks were released here (the
    /// dependency a grant names).
    released: Vec<u64>,
    out: VecDeque<(NodeId, Vec<u8>)>,
    /// Bundled out of `out`, for `poll_transmit`.
    ready: VecDeque<(NodeId, Vec<u8>)>,
    events: VecDeque<SymEvent>,
    counters: Counters,
    /// Lock ids of the range being mapped (kept to spare an allocation per range).
    scratch: Vec<LockId>,
    scratch_deps: Vec<(NodeId, u64)>,
    /// The vectors of ended transactions, emptied, for the next ones (at most
    /// [`SPARE_TXNS`]): a transaction on the lock path allocates nothing else of its own.
    spare: Vec<TxnVecs>,
}

/// Ended transactions' vectors kept for reuse at most.
const SPARE_TXNS: usize = 64;

/// A transaction's vectors, empty, for reuse.
#[derive(Default)]
struct TxnVecs {
    ranges: Vec<SetRange>,
    todo: Vec<SetRange>,
    taken: Vec<SetRange>,
    held: Held,
    asked: Vec<u32>,
    asked_locks: Vec<(u32, SegmentId, LockId, bool)>,
    deps: Vec<(NodeId, u64)>,
}

impl SymNode {
    /// Node `cfg.node` of `nodes` nodes (0..nodes), all live. `recovering`: a restarted
    /// process, which waits for a snapshot before it serves.
    pub fn new(mut cfg: Config, nodes: usize, recovering: bool) -> SymNode {
        let n = nodes.clamp(1, NODES_MAX);
        cfg.message_bytes = cfg
            .message_bytes
            .clamp(message_bytes_min(n), MESSAGE_BYTES_MAX);
        if cfg.bundle_bytes != 0 {
            cfg.bundle_bytes = cfg.bundle_bytes.clamp(64, MESSAGE_BYTES_MAX);
        }
        SymNode {
            n,
            live: if recovering {
                Vec::new()
            } else {
                (0..n as NodeId).collect()
            },
            view: 0,
            phase: if recovering {
                Phase::Recovering
            } else {
                Phase::Serving
            },
            flush_wait: Vec::new(),
            flushed: false,
            joining: None,
            early_flush: Vec::new(),
            recovery: recovering.then(|| Recovery {
                source: None,
                seqs: Vec::new(),
                next: (0, 0),
                held: VecDeque::new(),
                held_bytes: 0,
            }),
            segments: Vec::new(),
            txns: FxHashMap::default(),
            next_txn: 1,
            waiting: BTreeSet::new(),
            apply_waiting: Vec::new(),
            lock_waiters: FxHashMap::default(),
            woken: Vec::new(),
            rescan: false,
            remote: FxHashMap::default(),
            holds: FxHashMap::default(),
            grants: 0,
            grant_seen: vec![0; n],
            cache: FxHashMap::default(),
            granted_deps: vec![0; n],
            returning: Vec::new(),
            seq: 0,
            durable: 0,
            log_used: 0,
            pending: VecDeque::new(),
            origins: (0..n).map(|_| Origin::default()).collect(),
            released: vec![0; n],
            recovers: vec![0; n],
            recover_last: vec![false; n],
            stale: vec![false; n],
            owed: None,
            out: if recovering {
                // Whoever sends the snapshot names this process: a snapshot of an earlier
                // admission, sent to a previous process and delivered to this one, is not
                // taken for its own.
                let m = small(RECOVER, cfg.incarnation);
                (0..n as NodeId)
                    .filter(|&k| k != cfg.node)
                    .map(|k| (k, m.clone()))
                    .collect()
            } else {
                VecDeque::new()
            },
            ready: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            scratch: Vec::new(),
            scratch_deps: Vec::new(),
            spare: Vec::new(),
            cfg,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The nodes of the current view (empty while recovering).
    pub fn live(&self) -> &[NodeId] {
        &self.live
    }

    /// This node's last commit number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The last commit of `origin` applied here.
    pub fn applied(&self, origin: NodeId) -> u64 {
        self.origins.get(origin as usize).map_or(0, |o| o.applied)
    }

    /// Commits in flight, open transactions, and remote transactions holding or asking
    /// locks at this home.
    pub fn open_counts(&self) -> (usize, usize, usize) {
        (self.pending.len(), self.txns.len(), self.remote.len())
    }

    /// What waits here, for a stall report: each waiting transaction's state, the ranges it
    /// has not got yet with their locks' state here, whether this node keeps them (write,
    /// recalled); each remote transaction's first request; the locks of this home other
    /// nodes hold (node, grant, recalled).
    pub fn describe_waits(&self) -> String {
        let mut out = Vec::new();
        let mut ids = Vec::new();
        for (txn, t) in self
            .waiting
            .iter()
            .filter_map(|(_, w)| Some((w, self.txns.get(w)?)))
        {
            let ranges: Vec<String> = t
                .todo
                .iter()
                .chain(&t.taken)
                .map(|r| {
                    let g = &self.segments[r.segment as usize];
                    g.mapping.map(r.offset, r.len, &mut ids);
                    let locks: Vec<String> = ids
                        .iter()
                        .map(|&l| {
                            let kept = self
                                .cache
                                .get(&(r.segment, l))
                                .map(|c| (c.write, c.recalled));
                            format!("{l}:{:?}/{kept:?}", g.locks.state(l))
                        })
                        .collect();
                    format!("s{}[{}]", r.segment, locks.join(" "))
                })
                .collect();
            out.push(format!(
                "txn {txn:x} {:?} asking {} {:?} blocked on {:?}: {}",
                t.state,
                t.asking,
                t.asked,
                t.blocked_on,
                ranges.join(" ")
            ));
        }
        let mut remote: Vec<_> = self.remote.iter().collect();
        remote.sort_unstable_by_key(|(&txn, _)| txn);
        for (txn, rm) in remote {
            if let Some(w) = rm.wants.front().filter(|w| w.got == w.parts) {
                out.push(format!(
                    "remote {txn:x} s{} {:?} write {} blocked on {:?}",
                    w.segment, w.locks, w.write, rm.blocked_on
                ));
            }
        }
        let mut holds: Vec<String> = self
            .holds
            .iter()
            .filter(|(_, h)| h.recalled)
            .map(|((s, l, k), h)| format!("s{s}:{l} by {k} (grant {})", h.grant))
            .collect();
        holds.sort();
        if !holds.is_empty() {
            out.push(format!("recalled {}", holds.join(", ")));
        }
        out.join("; ")
    }

    /// Whether no commit is in flight, no lock held or asked here, and nothing is left
    /// filed as waiting.
    pub fn is_quiet(&self) -> bool {
        self.pending.is_empty()
            && self.txns.is_empty()
            && self.remote.is_empty()
            && self.waiting.is_empty()
            && self.apply_waiting.is_empty()
            && self.lock_waiters.is_empty()
    }

    /// Adds a segment of `bytes` zeroed bytes, its lock mapping and its home node. Every
    /// replica adds the same segments in the same order.
    pub fn add_segment(
        &mut self,
        bytes: usize,
        mapping: LockMapping,
        home: NodeId,
    ) -> Result<SegmentId, CrError> {
        if home as usize >= self.n {
            return Err(CrError::BadSegment);
        }
        let seg = Segment::new(self.segments.len(), bytes, mapping)?;
        self.segments.push(Homed { seg, home });
        Ok((self.segments.len() - 1) as SegmentId)
    }

    pub fn segment(&self, s: SegmentId) -> Option<&[u8]> {
        self.segments.get(s as usize).map(|g| &g.mem[..])
    }

    /// The node holding segment `s`'s locks in the current view.
    pub fn home(&self, s: SegmentId) -> Option<NodeId> {
        let h = self.segments.get(s as usize)?.home;
        Some(self.home_in(h, &self.live))
    }

    fn home_in(&self, h: NodeId, live: &[NodeId]) -> NodeId {
        if live.is_empty() || live.contains(&h) {
            return h;
        }
        live.iter().copied().find(|&k| k > h).unwrap_or(live[0])
    }

    pub fn begin(&mut self, deadline: Instant) -> Result<TxnId, CrError> {
        if self.phase != Phase::Serving {
            return Err(CrError::NotServing);
        }
        if self.txns.len() >= self.cfg.txns_max {
            return Err(CrError::TooManyTxns);
        }
        // Unique across this node's incarnations too: a stale RELEASE names no new one.
        let id =
            (self.cfg.node as u64) << 48 | (self.cfg.incarnation & 0xFFFF) << 32 | self.next_txn;
        self.next_txn = (self.next_txn + 1) & 0xFFFF_FFFF;
        let v = self.spare.pop().unwrap_or_default();
        self.txns.insert(
            id,
            Txn {
                state: TxnState::Active,
                deadline,
                ranges: v.ranges,
                todo: v.todo,
                taken: v.taken,
                undo: Vec::new(),
                held: v.held,
                req: 0,
                asked: v.asked,
                asking: 0,
                asked_locks: v.asked_locks,
                deps: v.deps,
                blocked_on: None,
            },
        );
        self.counters.begun += 1;
        Ok(id)
    }

    /// Declares the use of `len` bytes at `offset` of `segment` in `mode`: its locks here,
    /// then at the segment's home (see the module comment).
    pub fn set_range(
        &mut self,
        txn: TxnId,
        segment: SegmentId,
        offset: u32,
        len: u32,
        mode: Mode,
    ) -> Result<Lock, CrError> {
        self.set_ranges(txn, &[(segment, offset, len, mode)])
    }

    /// Declares several ranges at once: their locks are taken here in order, and each home
    /// is asked as soon as a range's local locks are held, without waiting for the grants of
    /// the ranges before it (one round trip for all, where [`SymNode::set_range`] after
    /// [`SymNode::set_range`] costs one each). [`Lock::Granted`] when every range is usable;
    /// on [`Lock::Waiting`], one [`SymEvent::Granted`] says they all are. Every range is
    /// checked before any lock is taken.
    pub fn set_ranges(
        &mut self,
        txn: TxnId,
        ranges: &[(SegmentId, u32, u32, Mode)],
    ) -> Result<Lock, CrError> {
        let t = self.txns.get(&txn).ok_or(CrError::UnknownTxn)?;
        if t.state != TxnState::Active {
            return Err(CrError::NotActive);
        }
        if ranges.is_empty() || ranges.len() > RANGES_PER_CALL {
            return Err(CrError::TooManyLocks);
        }
        for &(segment, offset, len, _) in ranges {
            let g = self
                .segments
                .get(segment as usize)
                .ok_or(CrError::UnknownSegment)?;
            g.map_range(offset, len, &mut self.scratch)?;
        }
        let homes: Vec<NodeId> = ranges
            .iter()
            .map(|&(segment, ..)| self.home_in(self.segments[segment as usize].home, &self.live))
            .collect();
        let t = self.txns.get_mut(&txn).expect("checked");
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        // Taken in one order every node uses (home, then segment and offset): two
        // transactions that declare together never each hold what the other waits for.
        order.sort_by_key(|&i| (homes[i], ranges[i].0, ranges[i].1));
        t.todo.extend(order.into_iter().map(|i| {
            let (segment, offset, len, mode) = ranges[i];
            SetRange {
                segment,
                offset,
                len,
                mode,
            }
        }));
        if self.proceed(txn) {
            return Ok(Lock::Granted);
        }
        let deadline = self.txns[&txn].deadline;
        self.waiting.insert((deadline, txn));
        self.counters.lock_waits += 1;
        Ok(Lock::Waiting)
    }

    /// Moves `txn`'s declared ranges on, in order: local locks, then the home's, the
    /// requests to one home sent together; a range of another home waits until the first
    /// home's grants are in (so locks are taken in the declared order). True when every
    /// range is usable.
    fn proceed(&mut self, txn: TxnId) -> bool {
        if let Some(k) = self.txns.get_mut(&txn).and_then(|t| t.blocked_on.take()) {
            self.unfile(k, Waiter::Local(txn));
        }
        let mut ids = std::mem::take(&mut self.scratch);
        while let Some(&r) = self.txns[&txn].todo.first() {
            let home = self.home_in(self.segments[r.segment as usize].home, &self.live);
            let t = self.txns.get_mut(&txn).expect("caller checked");
            if !t.asked.is_empty() && t.asking != home {
                break;
            }
            let g = &mut self.segments[r.segment as usize];
            ids.clear();
            g.mapping.map(r.offset, r.len, &mut ids);
            let write = r.mode == Mode::Write;
            // A lock its home recalled goes back once this node's holders are done: no new
            // holder here takes it meanwhile (it asks the home again after).
            let recalled = |l: &LockId| {
                self.cache.get(&(r.segment, *l)).is_some_and(|c| c.recalled)
                    && !t
                        .held
                        .iter()
                        .any(|&(s, h, x)| s == r.segment && h == *l && (x || !write))
            };
            // A kept lock is held at its home already: taken while a request for an earlier
            // range waits there, it would be held out of the order every node takes locks
            // in (and the home's transaction waiting for it may hold what that request
            // waits for). The range waits for the grants first.
            if home != self.cfg.node
                && !t.asked.is_empty()
                && ids
                    .iter()
                    .any(|l| self.cache.contains_key(&(r.segment, *l)))
            {
                break;
            }
            let taken = if home != self.cfg.node && ids.iter().any(recalled) {
                None
            } else {
                take_into(&mut g.locks, txn, r.segment, &ids, write, &mut t.held)
            };
            let Some(new) = taken else {
                t.state = TxnState::WaitLocal;
                // Filed under a lock that keeps it out: tried again when that one changes.
                // Held here by `txn` in exclusive mode (`Some(true)`) or shared.
                let held = |x: LockId| {
                    t.held
                        .iter()
                        .find(|&&(s, h, _)| s == r.segment && h == x)
                        .map(|&(_, _, m)| m)
                };
                let blocker = ids
                    .iter()
                    .copied()
                    .find(|&l| {
                        let enough = held(l).is_some_and(|m| m || !write);
                        let kept_out =
                            self.cache.get(&(r.segment, l)).is_some_and(|c| c.recalled) && !enough;
                        (home != self.cfg.node && kept_out)
                            || !g
                                .locks
                                .can_take(txn, &[l], write, |x| held(x) == Some(false))
                    })
                    .or_else(|| ids.first().copied())
                    .unwrap_or(0);
                t.blocked_on = Some((r.segment, blocker));
                self.file((r.segment, blocker), Waiter::Local(txn));
                if home == self.cfg.node {
                    self.recall_blockers(r.segment, &ids, write, None);
                }
                self.scratch = ids;
                return false;
            };
            let t = self.txns.get_mut(&txn).expect("caller checked");
            t.todo.remove(0);
            t.taken.push(r);
            if !new {
                continue;
            }
            if home == self.cfg.node {
                // Every write released here before must be in this replica first.
                for (o, &sq) in self.released.iter().enumerate() {
                    merge_dep(&mut t.deps, (o as NodeId, sq));
                }
                continue;
            }
            // What this node holds already needs no request; the writes made under it
            // elsewhere before it came are those its grants named.
            // A range some of whose locks it holds but not all asks for all of them: the
            // ones it holds go back on a recall while the request waits (`in_use`), and
            // come again with its grant.
            let all_kept = ids.iter().all(|&l| {
                self.cache
                    .get(&(r.segment, l))
                    .is_some_and(|c| c.write || !write)
            });
            if all_kept {
                for (o, &sq) in self.granted_deps.iter().enumerate() {
                    merge_dep(&mut t.deps, (o as NodeId, sq));
                }
                self.counters.cache_hits += 1;
                continue;
            }
            self.ask(txn, home, (r.segment, write), &ids);
        }
        self.scratch = ids;
        let t = self.txns.get_mut(&txn).expect("caller checked");
        if !t.asked.is_empty() {
            t.state = TxnState::WaitHome;
            return false;
        }
        self.granted_if_applied(txn)
    }

    /// Whether a transaction here holds lock `l` of `seg` and needs this node's hold of it:
    /// it may use the lock (a usable range maps to it), or holds it for a range not usable
    /// yet that it asked no home for. A transaction that asked its home for the lock (for
    /// a range with another lock not held here, or to write what this node holds to read)
    /// gets it back through that request's grant, and has not touched it: keeping it for
    /// that one could hold it out of the order locks are taken in.
    fn in_use(&self, seg: SegmentId, l: LockId) -> bool {
        if self.segments[seg as usize].locks.is_free(l) {
            return false;
        }
        let mapping = &self.segments[seg as usize].mapping;
        let mut ids = Vec::new();
        self.txns.values().any(|t| {
            if !t.held.iter().any(|&(s, h, _)| s == seg && h == l) {
                return false;
            }
            let asked = t.asked_locks.iter().any(|a| (a.1, a.2) == (seg, l));
            !asked
                || t.ranges.iter().filter(|r| r.segment == seg).any(|r| {
                    mapping.map(r.offset, r.len, &mut ids);
                    ids.contains(&l)
                })
        })
    }

    /// Asks `home` for locks `ids` of `seg` for `txn`: one request, in LOCK parts.
    fn ask(&mut self, txn: TxnId, home: NodeId, (seg, write): (SegmentId, bool), ids: &[LockId]) {
        let per = LOCKS_PER_MESSAGE
            .min((self.cfg.message_bytes - LOCK_HEADER) / 4)
            .max(1);
        let t = self.txns.get_mut(&txn).expect("caller checked");
        t.req += 1;
        t.asked.push(t.req);
        t.asking = home;
        let req = t.req;
        t.asked_locks
            .extend(ids.iter().map(|&l| (req, seg, l, write)));
        let parts = ids.len().div_ceil(per).max(1) as u16;
        for (i, c) in ids.chunks(per).enumerate() {
            let mut m = Vec::with_capacity(LOCK_HEADER + 4 * c.len());
            lock_msg(
                &mut m,
                self.view,
                (txn, req, i as u16, parts),
                seg,
                write,
                c,
            );
            self.out.push_back((home, m));
        }
    }

    /// Keeps an ended transaction's vectors, emptied, for the next ones.
    fn recycle(&mut self, t: Txn) {
        if self.spare.len() < SPARE_TXNS {
            let mut v = TxnVecs {
                ranges: t.ranges,
                todo: t.todo,
                taken: t.taken,
                held: t.held,
                asked: t.asked,
                asked_locks: t.asked_locks,
                deps: t.deps,
            };
            v.asked.clear();
            v.asked_locks.clear();
            v.ranges.clear();
            v.todo.clear();
            v.taken.clear();
            v.held.clear();
            v.deps.clear();
            self.spare.push(v);
        }
    }

    /// Whether this replica has applied every commit in `deps`.
    fn applied_all(&self, deps: &[(NodeId, u64)]) -> bool {
        deps.iter().all(|&(o, s)| {
            if o == self.cfg.node {
                s <= self.seq
            } else {
                self.origins.get(o as usize).is_some_and(|g| g.applied >= s)
            }
        })
    }

    /// `txn` holds its pending range's locks everywhere: granted now if the commits written
    /// under them are here (true), else it waits for them.
    fn granted_if_applied(&mut self, txn: TxnId) -> bool {
        let t = &self.txns[&txn];
        if self.applied_all(&t.deps) {
            self.grant(txn);
            return true;
        }
        let t = self.txns.get_mut(&txn).expect("checked");
        if t.state != TxnState::WaitApply {
            t.state = TxnState::WaitApply;
            self.apply_waiting.push(txn);
            self.counters.apply_waits += 1;
        }
        false
    }

    /// `txn` holds its declared ranges' locks everywhere: the ranges are usable.
    fn grant(&mut self, txn: TxnId) {
        let t = self.txns.get_mut(&txn).expect("caller checked");
        t.state = TxnState::Active;
        for r in t.taken.drain(..) {
            if r.mode == Mode::Write {
                t.undo.push(self.segments[r.segment as usize].image(&r));
            }
            t.ranges.push(r);
        }
    }

    fn covered(
        &self,
        txn: TxnId,
        s: SegmentId,
        off: u32,
        len: u32,
        w: bool,
    ) -> Result<(), CrError> {
        let t = self.txns.get(&txn).ok_or(CrError::UnknownTxn)?;
        if t.state != TxnState::Active {
            return Err(CrError::NotActive);
        }
        txmem::covered(&t.ranges, s, off, len, w)
    }

    pub fn range(&self, txn: TxnId, s: SegmentId, off: u32, len: u32) -> Result<&[u8], CrError> {
        self.covered(txn, s, off, len, false)?;
        let a = off as usize;
        Ok(&self.segments[s as usize].mem[a..a + len as usize])
    }

    pub fn range_mut(
        &mut self,
        txn: TxnId,
        s: SegmentId,
        off: u32,
        len: u32,
    ) -> Result<&mut [u8], CrError> {
        self.covered(txn, s, off, len, true)?;
        let a = off as usize;
        Ok(&mut self.segments[s as usize].mem[a..a + len as usize])
    }

    /// Rolls `txn` back: old contents back, locks released here and at its homes.
    pub fn abort(&mut self, txn: TxnId) -> Result<(), CrError> {
        let t = self.txns.remove(&txn).ok_or(CrError::UnknownTxn)?;
        self.roll_back(txn, t);
        self.grant_waiting();
        Ok(())
    }

    fn roll_back(&mut self, txn: TxnId, mut t: Txn) {
        txmem::restore(&mut self.segments, std::mem::take(&mut t.undo));
        // Requests not granted yet are withdrawn; what was granted, this node holds.
        if !t.asked.is_empty() && t.asking != self.cfg.node && self.live.contains(&t.asking) {
            self.out.push_back((t.asking, small(RELEASE, txn)));
        }
        if let Some(k) = t.blocked_on.take() {
            self.unfile(k, Waiter::Local(txn));
        }
        self.release(&t.held);
        if t.state != TxnState::Active {
            self.waiting.remove(&(t.deadline, txn));
            if t.state == TxnState::WaitApply {
                self.apply_waiting.retain(|&w| w != txn);
            }
        }
        self.counters.aborted += 1;
        self.recycle(t);
    }

    /// Frees a transaction's locks here. A lock of another home that no transaction here
    /// holds now goes back to its home if the home recalled it, or if this node keeps no
    /// locks ([`Config::cache_locks`]); a recalled one also when the transactions holding
    /// it here wait for it from the home anyway (`in_use`).
    fn release(&mut self, held: &Held) {
        txmem::release(&mut self.segments, held);
        for &(s, l, _) in held {
            self.touch(s, l);
            let Some(&c) = self.cache.get(&(s, l)) else {
                continue;
            };
            let free = self.segments[s as usize].locks.is_free(l);
            if (!self.cfg.cache_locks && free) || (c.recalled && !self.in_use(s, l)) {
                self.cache.remove(&(s, l));
                let home = self.home_in(self.segments[s as usize].home, &self.live);
                self.returning.push((home, s, l));
            }
        }
        self.send_returns();
    }

    /// Sends what `returning` gathered, one RETURN (or more) per home and segment, naming
    /// this node's last commit: every write made here under those locks is in it or before.
    fn send_returns(&mut self) {
        if self.returning.is_empty() {
            return;
        }
        let mut r = std::mem::take(&mut self.returning);
        r.sort_unstable();
        let mut ids = std::mem::take(&mut self.scratch);
        for run in r.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (home, seg, _) = run[0];
            if home == self.cfg.node || !self.live.contains(&home) {
                continue;
            }
            ids.clear();
            ids.extend(run.iter().map(|x| x.2));
            let how = (
                self.view,
                Some((self.seq, self.grant_seen[home as usize])),
                self.cfg.message_bytes,
            );
            lock_list_msgs(&mut self.out, home, how, seg, &ids);
        }
        self.scratch = ids;
        r.clear();
        self.returning = r;
    }

    /// As the home of `seg`: asks the nodes holding any of `ids` in a mode that keeps a
    /// transaction (of node `asker`, or of this node) from taking them in mode `write` to
    /// give them back, once each.
    fn recall_blockers(
        &mut self,
        seg: SegmentId,
        ids: &[LockId],
        write: bool,
        asker: Option<NodeId>,
    ) {
        let table = &self.segments[seg as usize].locks;
        for &l in ids {
            // A reader keeps out only a writer; a writer every other node.
            let holders = match table.state(l) {
                LockState::Exclusive(o) => {
                    let k = (o >> 48) as NodeId;
                    if o == node_owner(k) {
                        k..k + 1
                    } else {
                        0..0
                    }
                }
                LockState::Shared(_) if write => 0..self.n as NodeId,
                _ => 0..0,
            };
            for k in holders.filter(|&k| Some(k) != asker) {
                if let Some(h) = self.holds.get_mut(&(seg, l, k)) {
                    if !h.recalled {
                        h.recalled = true;
                        self.returning.push((k, seg, l));
                    }
                }
            }
        }
        if self.returning.is_empty() {
            return;
        }
        let mut r = std::mem::take(&mut self.returning);
        r.sort_unstable();
        for run in r.chunk_by(|a, b| a.0 == b.0) {
            let k = run[0].0;
            let ids: Vec<LockId> = run.iter().map(|x| x.2).collect();
            self.counters.recalls += ids.len() as u64;
            lock_list_msgs(
                &mut self.out,
                k,
                (self.view, None, self.cfg.message_bytes),
                seg,
                &ids,
            );
        }
        r.clear();
        self.returning = r;
    }

    /// Files `w` under lock `k`: tried again when `k` is released or its hold changes.
    fn file(&mut self, k: (SegmentId, LockId), w: Waiter) {
        self.lock_waiters.entry(k).or_default().push(w);
    }

    /// Takes `w` out of lock `k`'s waiters.
    fn unfile(&mut self, k: (SegmentId, LockId), w: Waiter) {
        if let Some(ws) = self.lock_waiters.get_mut(&k) {
            ws.retain(|&x| x != w);
            if ws.is_empty() {
                self.lock_waiters.remove(&k);
            }
        }
    }

    /// Lock `l` of `s` was released here, or its hold changed: what waits for it is tried
    /// at the next [`SymNode::grant_waiting`].
    fn touch(&mut self, s: SegmentId, l: LockId) {
        if self.lock_waiters.contains_key(&(s, l)) {
            self.woken.push((s, l));
        }
    }

    /// Waiting transactions take what is free now: those waiting for commits to be applied
    /// here, then (after a view change, every remote request) the waiters of the locks
    /// released since the last call, each lock's in the order they came.
    fn grant_waiting(&mut self) {
        if !self.apply_waiting.is_empty() {
            let mut list = std::mem::take(&mut self.apply_waiting);
            list.retain(|&txn| {
                let Some(t) = self.txns.get(&txn) else {
                    return false;
                };
                if t.state != TxnState::WaitApply {
                    return false;
                }
                if !self.applied_all(&t.deps) {
                    return true;
                }
                self.waiting.remove(&(t.deadline, txn));
                self.grant(txn);
                self.events.push_back(SymEvent::Granted(txn));
                false
            });
            list.append(&mut self.apply_waiting);
            self.apply_waiting = list;
        }
        if self.phase != Phase::Serving {
            // No transaction of this node is open; the remote requests wait for the view.
            self.woken.clear();
            return;
        }
        if std::mem::take(&mut self.rescan) {
            let mut all: Vec<TxnId> = self.remote.keys().copied().collect();
            all.sort_unstable();
            for txn in all {
                self.try_remote(txn);
            }
        }
        let mut i = 0;
        while i < self.woken.len() {
            let k = self.woken[i];
            i += 1;
            let Some(ws) = self.lock_waiters.remove(&k) else {
                continue;
            };
            let mut ws = ws.into_iter();
            while let Some(w) = ws.next() {
                match w {
                    Waiter::Local(txn) => {
                        let Some(t) = self.txns.get_mut(&txn) else {
                            continue;
                        };
                        if t.blocked_on != Some(k) || t.state != TxnState::WaitLocal {
                            continue;
                        }
                        t.blocked_on = None;
                        let deadline = t.deadline;
                        if self.proceed(txn) {
                            self.waiting.remove(&(deadline, txn));
                            self.events.push_back(SymEvent::Granted(txn));
                        }
                    }
                    Waiter::Remote(txn) => {
                        let Some(rm) = self.remote.get_mut(&txn) else {
                            continue;
                        };
                        if rm.blocked_on != Some(k) {
                            continue;
                        }
                        rm.blocked_on = None;
                        self.try_remote(txn);
                    }
                }
                if self.held_by_own_txn(k) {
                    // Taken alone by a transaction of this node (the waiter just tried, or
                    // one that came first): no later waiter gets it before that one ends,
                    // whose end wakes the lock again. They keep their places, behind those
                    // filed again in this pass (which came before them).
                    let rest: Vec<Waiter> = ws.collect();
                    if !rest.is_empty() {
                        self.lock_waiters.entry(k).or_default().extend(rest);
                    }
                    break;
                }
            }
        }
        self.woken.clear();
    }

    /// Whether lock `k` is held here in exclusive mode by a transaction of this node (its
    /// id carries this node's number, as no other node's [`node_owner`] does), not by another
    /// node, whose kept lock a waiter's retry would recall.
    fn held_by_own_txn(&self, (s, l): (SegmentId, LockId)) -> bool {
        matches!(
            self.segments[s as usize].locks.state(l),
            LockState::Exclusive(o) if o >> 48 == self.cfg.node as u64
        )
    }

    /// Grants remote `txn`'s assembled requests, in order, while their locks are free here;
    /// one that waits is filed under a lock that keeps it out.
    fn try_remote(&mut self, txn: TxnId) {
        while self.grant_remote(txn) {}
        if self.remote.get(&txn).is_some_and(|rm| rm.wants.is_empty()) {
            self.remote.remove(&txn);
        }
    }

    /// Grants remote `txn`'s first request to its node if it is assembled and its locks are
    /// free for that node here; recalls them from the nodes holding them if not.
    fn grant_remote(&mut self, txn: TxnId) -> bool {
        let Some(rm) = self.remote.get_mut(&txn) else {
            return false;
        };
        let Some(w) = rm.wants.front().filter(|w| w.got == w.parts) else {
            return false;
        };
        let (from, seg, write) = (rm.from, w.segment, w.write);
        let table = &mut self.segments[seg as usize].locks;
        let holds = &self.holds;
        let mine = |l: LockId| holds.contains_key(&(seg, l, from));
        let blocker = w.locks.iter().copied().find(|&l| match table.state(l) {
            LockState::Free => false,
            LockState::Exclusive(o) => o != node_owner(from),
            LockState::Shared(n) => write && !(n == 1 && mine(l)),
        });
        if let Some(b) = blocker {
            let old = rm.blocked_on.replace((seg, b));
            let locks = std::mem::take(&mut rm.wants.front_mut().expect("front").locks);
            self.recall_blockers(seg, &locks, write, Some(from));
            if let Some(w) = self.remote.get_mut(&txn).and_then(|r| r.wants.front_mut()) {
                w.locks = locks;
            }
            // Filed once: a request still kept out by the same lock keeps its place.
            if old != Some((seg, b)) {
                if let Some(k) = old {
                    self.unfile(k, Waiter::Remote(txn));
                }
                self.file((seg, b), Waiter::Remote(txn));
            }
            return false;
        }
        if let Some(k) = rm.blocked_on.take() {
            self.unfile(k, Waiter::Remote(txn));
        }
        let table = &mut self.segments[seg as usize].locks;
        let rm = self.remote.get_mut(&txn).expect("checked");
        let w = rm.wants.front().expect("checked");
        self.grants += 1;
        let no = self.grants;
        for &l in &w.locks {
            let h = self.holds.entry((seg, l, from)).or_insert(Hold {
                grant: no,
                recalled: false,
            });
            let held = h.grant != no;
            h.grant = no;
            match table.state(l) {
                LockState::Exclusive(_) => continue,
                LockState::Shared(_) if held && !write => continue,
                _ => {}
            }
            table.take(node_owner(from), l, write);
        }
        let req = w.req;
        rm.wants.pop_front();
        // The grantee uses the locks once it has every write released here before.
        let mut deps = std::mem::take(&mut self.scratch_deps);
        deps.clear();
        deps.extend(
            self.released
                .iter()
                .enumerate()
                .filter(|&(o, &s)| s > 0 && o != from as usize)
                .map(|(o, &s)| (o as NodeId, s)),
        );
        self.out.push_back((from, grant_msg(txn, req, no, &deps)));
        self.scratch_deps = deps;
        true
    }

    /// Commits of this node up to this number are held by every live node.
    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// Commits `txn`: ships its writes to every other live node and releases its locks, here
    /// and at its homes; [`SymEvent::Committed`] when every live node has acknowledged. Its
    /// commit number.
    pub fn commit(&mut self, txn: TxnId) -> Result<u64, CrError> {
        let t = self.txns.get(&txn).ok_or(CrError::UnknownTxn)?;
        if t.state != TxnState::Active {
            return Err(CrError::NotActive);
        }
        // SWRITE's envelope: magic, kind, durable, the deps.
        let env = 2 + 8 + 1 + DEP_BYTES * t.deps.len();
        if self.cfg.message_bytes < env + WRITE_HEADER + RANGE_HEADER + 1 {
            return Err(CrError::TooLarge);
        }
        let room = self
            .cfg
            .message_bytes
            .saturating_sub(WRITE_HEADER + RANGE_HEADER + env)
            .max(1);
        let mb = self.cfg.message_bytes - env;
        // Only the bytes that changed travel (and take room in the log).
        let (writes, declared) = txmem::changed(&self.segments, &t.ranges, &t.undo);
        let (parts, bytes) = plan_lens(writes.iter().map(|r| r.len), room, mb);
        if bytes > self.cfg.log_bytes || parts > u16::MAX as usize {
            return Err(CrError::TooLarge);
        }
        let bytes = bytes.max(PENDING_COST);
        if self.log_used + bytes > self.cfg.log_bytes {
            return Err(CrError::LogFull);
        }
        let t = self.txns.remove(&txn).expect("checked above");
        self.counters.write_declared += declared;
        self.counters.write_shipped += writes.iter().map(|r| r.len as u64).sum::<u64>();
        let others: Vec<NodeId> = self
            .live
            .iter()
            .copied()
            .filter(|&k| k != self.cfg.node)
            .collect();
        let seq = if writes.is_empty() {
            self.seq
        } else {
            self.seq += 1;
            let h = head(Some(self.durable), 0, &t.deps);
            self.ship(self.seq, &writes, (parts as u16, room, mb), &h, &others);
            self.released[self.cfg.node as usize] = self.seq;
            self.seq
        };
        // The writes are on their way to every replica, and whoever takes the locks next
        // waits until it has applied them: the locks go now, not when the commit is
        // complete (to a home with the RETURN that names this commit).
        self.release(&t.held);
        self.recycle(t);
        self.log_used += bytes;
        self.pending.push_back(Pending {
            seq,
            txn,
            bytes,
            missing: if writes.is_empty() {
                Vec::new()
            } else {
                others
            },
        });
        self.complete();
        self.grant_waiting();
        Ok(seq)
    }

    fn ship(
        &mut self,
        seq: u64,
        writes: &[SetRange],
        (parts, room, mb): (u16, usize, usize),
        head: &[u8],
        to: &[NodeId],
    ) {
        let mut part = 0u16;
        let mut m = Vec::with_capacity(mb);
        let mut b = WriteBuilder::new(&mut m, seq, part, parts);
        let mut used = WRITE_HEADER;
        let send = |m: &Vec<u8>, out: &mut VecDeque<(NodeId, Vec<u8>)>| {
            let e = envelope(SWRITE, head, m);
            for &k in to {
                out.push_back((k, e.clone()));
            }
        };
        for r in writes {
            let mem = &self.segments[r.segment as usize].mem;
            let (mut off, end) = (r.offset as usize, (r.offset + r.len) as usize);
            while off < end {
                if used + RANGE_HEADER >= mb {
                    b.finish();
                    send(&m, &mut self.out);
                    part += 1;
                    b = WriteBuilder::new(&mut m, seq, part, parts);
                    used = WRITE_HEADER;
                }
                let n = (end - off).min(mb - used - RANGE_HEADER).min(room);
                b.range(r.segment, off as u32, &mem[off..off + n]);
                used += RANGE_HEADER + n;
                off += n;
            }
        }
        b.finish();
        send(&m, &mut self.out);
    }

    /// Commits at the head of the log that every live node holds complete, in order.
    fn complete(&mut self) {
        while self.pending.front().is_some_and(|p| p.missing.is_empty()) {
            let p = self.pending.pop_front().expect("front");
            self.log_used -= p.bytes;
            self.durable = self.durable.max(p.seq);
            self.counters.committed += 1;
            self.events.push_back(SymEvent::Committed(p.txn));
        }
        self.maybe_flush();
    }

    fn maybe_flush(&mut self) {
        if self.phase != Phase::Changing || self.flushed || !self.pending.is_empty() {
            return;
        }
        self.flushed = true;
        for &k in &self.live {
            if k != self.cfg.node && Some(k) != self.joining {
                self.out.push_back((k, small(FLUSH, self.view)));
            }
        }
        self.maybe_ready();
    }

    fn maybe_ready(&mut self) {
        if self.phase != Phase::Changing || !self.flushed || !self.flush_wait.is_empty() {
            return;
        }
        // Every relay is in. A dead origin's commit still waiting depends on one no survivor
        // has, so no survivor applied it, nor anything written after it: it goes, and the
        // homes name no more of a dead origin than is applied.
        for (o, g) in self.origins.iter_mut().enumerate() {
            if !self.live.contains(&(o as NodeId)) {
                self.counters.refused += g.blocked.len() as u64;
                g.blocked.clear();
                g.blocked_bytes = 0;
                g.received = g.applied;
                g.asm = None;
                self.released[o] = self.released[o].min(g.applied);
            }
        }
        self.phase = Phase::Serving;
        if let Some(k) = self.joining.take() {
            let source = self.live.iter().copied().find(|&i| i != k);
            if source == Some(self.cfg.node) {
                // For the process that said it recovers; if none has yet, or a newer one
                // says so later, the snapshot goes then (`owed`).
                let inc = self.recovers[k as usize];
                if inc > 0 {
                    self.send_snapshot(k, inc);
                }
                self.owed = Some((k, inc));
            }
        }
        self.events.push_back(SymEvent::Ready);
        self.grant_waiting();
    }

    /// The view is now `live` (sorted or not; `joining`, if any, is in it and restarted).
    /// Told to every member of the new view but the joining node, at the same view number.
    pub fn view_change(&mut self, view: u64, live: &[NodeId], joining: Option<NodeId>) {
        if self.phase == Phase::Recovering || view <= self.view {
            return;
        }
        let mut live: Vec<NodeId> = live
            .iter()
            .copied()
            .filter(|&k| (k as usize) < self.n)
            .collect();
        live.sort_unstable();
        live.dedup();
        let old = std::mem::replace(&mut self.live, live);
        self.owed = None;
        let dead: Vec<NodeId> = old
            .iter()
            .copied()
            .filter(|k| !self.live.contains(k))
            .collect();
        self.view = view;
        for &d in &dead {
            self.events.push_back(SymEvent::NodeLost(d));
            for p in self.pending.iter_mut() {
                if p.missing.contains(&d) {
                    p.missing.retain(|&k| k != d);
                    if p.missing.is_empty() {
                        self.counters.degraded += 1;
                    }
                }
            }
        }
        // Every lock held across nodes is free again (the homes may move; commits made under
        // them complete before the view serves), and what this node held of other homes is
        // theirs.
        for (s, l, _) in std::mem::take(&mut self.holds).into_keys() {
            let g = &mut self.segments[s as usize].locks;
            let x = matches!(g.state(l), LockState::Exclusive(_));
            g.release(l, x);
        }
        self.cache.clear();
        self.granted_deps.fill(0);
        // Requests of nodes that are dead, or that rejoin as a new process, go.
        let gone: Vec<TxnId> = {
            let mut v: Vec<TxnId> = self
                .remote
                .iter()
                .filter(|(_, r)| dead.contains(&r.from) || Some(r.from) == joining)
                .map(|(&t, _)| t)
                .collect();
            v.sort_unstable();
            v
        };
        for t in gone {
            self.drop_remote(t);
        }
        if let Some(k) = joining {
            if let Some(o) = self.origins.get_mut(k as usize) {
                *o = Origin::default();
                // The new process numbers its commits and grants from 1.
                self.released[k as usize] = 0;
                self.grant_seen[k as usize] = 0;
                // Until the new process's RECOVER, what comes from `k` is its previous
                // process's (sent before it died, delivered late): a commit of it would be
                // taken for the new process's commit of the same number, an ACK for the new
                // process's.
                self.stale[k as usize] = !self.recover_last[k as usize];
            }
        }
        let mut open: Vec<TxnId> = self.txns.keys().copied().collect();
        open.sort_unstable();
        for txn in open {
            let t = self.txns.remove(&txn).expect("listed");
            self.roll_back(txn, t);
            self.events
                .push_back(SymEvent::Aborted(txn, SymAbort::ViewChange));
        }
        self.waiting.clear();
        self.apply_waiting.clear();
        // The locks other nodes held are free: the remote requests left are tried when the
        // view serves.
        self.rescan = true;
        for s in 0..self.segments.len() {
            let h = self.segments[s].home;
            let (was, now) = (self.home_in(h, &old), self.home_in(h, &self.live));
            if was != now {
                self.events.push_back(SymEvent::HomeMoved {
                    segment: s as SegmentId,
                    home: now,
                });
            }
        }
        let members: Vec<NodeId> = self
            .live
            .iter()
            .copied()
            .filter(|&k| k != self.cfg.node && Some(k) != joining)
            .collect();
        for &d in &dead {
            let Some(o) = self.origins.get(d as usize) else {
                continue;
            };
            // Applied, then whole and waiting: a survivor may apply what waits here only after
            // these relays are sent, and another survivor may not have it.
            for w in o.tail.iter().chain(&o.blocked) {
                let h = head(None, d, &w.deps);
                for p in &w.parts {
                    let e = envelope(RELAY, &h, p);
                    for &k in &members {
                        self.out.push_back((k, e.clone()));
                    }
                }
            }
        }
        self.flush_wait = members;
        let early = std::mem::take(&mut self.early_flush);
        for (k, v) in early {
            if v == view {
                self.flush_wait.retain(|&m| m != k);
            }
        }
        self.flushed = false;
        self.joining = joining;
        self.phase = Phase::Changing;
        self.complete();
    }

    /// Forgets remote `txn`'s requests not granted yet.
    fn drop_remote(&mut self, txn: TxnId) {
        if let Some(k) = self.remote.remove(&txn).and_then(|rm| rm.blocked_on) {
            self.unfile(k, Waiter::Remote(txn));
        }
    }

    /// Frees what node `k` holds of `ids` of `seg` here by the grants up to number `got`. A
    /// lock a later grant gave it again stays its (and may be recalled again).
    fn drop_holds(
        &mut self,
        k: NodeId,
        seg: SegmentId,
        ids: impl Iterator<Item = LockId>,
        got: u64,
    ) {
        let Some(g) = self.segments.get_mut(seg as usize) else {
            return;
        };
        for l in ids {
            let Some(h) = self.holds.get_mut(&(seg, l, k)) else {
                continue;
            };
            if h.grant > got {
                // Its waiters recall it again.
                h.recalled = false;
            } else {
                self.holds.remove(&(seg, l, k));
                let x = matches!(g.locks.state(l), LockState::Exclusive(_));
                g.locks.release(l, x);
            }
            if self.lock_waiters.contains_key(&(seg, l)) {
                self.woken.push((seg, l));
            }
        }
    }

    /// Sends every segment to `to` with the commit number it covers per origin.
    fn send_snapshot(&mut self, to: NodeId, incarnation: u64) {
        self.counters.snapshots_sent += 1;
        let mut m = Vec::new();
        let mut w = Writer::new(&mut m);
        w.u8(MAGIC).u8(SEQS).u64(self.view).u64(incarnation);
        let seqs: Vec<(NodeId, u64)> = self
            .live
            .iter()
            .filter(|&&k| k != to)
            .map(|&k| {
                let s = if k == self.cfg.node {
                    self.seq
                } else {
                    self.origins[k as usize].applied
                };
                (k, s)
            })
            .collect();
        w.u16(seqs.len() as u16);
        for (k, s) in seqs {
            w.u16(k).u64(s);
        }
        self.out.push_back((to, m));
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
                nonce: self.view,
                seq: 0,
                segment: 0,
                offset: 0,
            };
            msg::snap(f, &[], &mut m);
            self.out.push_back((to, m));
            return;
        }
        for s in 0..n {
            let img = &self.segments[s].mem;
            let mut off = 0;
            loop {
                let end = (off + piece).min(img.len());
                let f = msg::SnapFields {
                    last: s + 1 == n && end == img.len(),
                    nonce: self.view,
                    seq: 0,
                    segment: s as SegmentId,
                    offset: off as u32,
                };
                let mut m = Vec::new();
                msg::snap(f, &img[off..end], &mut m);
                self.out.push_back((to, m));
                off = end;
                if off >= img.len() {
                    break;
                }
            }
        }
    }

    /// Lock deadlines: transactions still waiting past theirs are aborted.
    pub fn handle_timeout(&mut self, now: Instant) {
        let late: Vec<TxnId> = self
            .waiting
            .iter()
            .take_while(|&&(d, _)| d <= now)
            .map(|&(_, txn)| txn)
            .collect();
        for txn in late {
            let t = self
                .txns
                .remove(&txn)
                .expect("waiting transactions are open");
            self.roll_back(txn, t);
            self.counters.lock_timeouts += 1;
            self.events
                .push_back(SymEvent::Aborted(txn, SymAbort::LockTimeout));
        }
        self.grant_waiting();
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.waiting.first().map(|&(d, _)| d)
    }

    pub fn poll_transmit(&mut self) -> Option<(NodeId, Vec<u8>)> {
        if self.cfg.bundle_bytes == 0 {
            return self.out.pop_front();
        }
        if self.ready.is_empty() {
            let (b, m) =
                msg::bundle_queue(&mut self.out, &mut self.ready, self.cfg.bundle_bytes, None);
            self.counters.bundles += b;
            self.counters.bundled += m;
        }
        self.ready.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<SymEvent> {
        self.events.pop_front()
    }

    /// A message from node `from` (a BUNDLE's messages in order). What does not parse, or
    /// breaks the protocol, is refused and counted.
    pub fn handle_message(&mut self, from: NodeId, bytes: &[u8]) {
        match msg::unbundle(bytes) {
            None => {
                if self.handle(from, bytes).is_none() {
                    self.counters.refused += 1;
                }
            }
            Some(Ok(all)) => {
                for m in all {
                    if self.handle(from, m).is_none() {
                        self.counters.refused += 1;
                    }
                }
            }
            Some(Err(_)) => self.counters.refused += 1,
        }
    }

    fn handle(&mut self, from: NodeId, bytes: &[u8]) -> Option<()> {
        if from as usize >= self.n || from == self.cfg.node {
            return None;
        }
        let m = SymMsg::parse(bytes).ok()?;
        if let SymMsg::Recover { incarnation } = m {
            let r = &mut self.recovers[from as usize];
            if incarnation <= *r {
                return None;
            }
            *r = incarnation;
            self.recover_last[from as usize] = true;
            self.stale[from as usize] = false;
            // A snapshot owed to `from` in this view went to an older process, or to none.
            if let Some((k, sent)) = self.owed {
                if k == from && sent < incarnation && self.phase == Phase::Serving {
                    self.send_snapshot(k, incarnation);
                    self.owed = Some((k, incarnation));
                }
            }
            return Some(());
        }
        if self.stale[from as usize] {
            return None;
        }
        self.recover_last[from as usize] = false;
        if self.phase == Phase::Recovering {
            return self.while_recovering(from, m, bytes);
        }
        if !self.live.contains(&from) {
            return None;
        }
        match m {
            SymMsg::Write {
                durable,
                deps,
                seq,
                part,
                parts,
                inner,
            } => {
                let whole = self.on_write(from, seq, (part, parts), deps, inner)?;
                let o = &mut self.origins[from as usize];
                while o.tail.front().is_some_and(|w| w.seq <= durable) {
                    let w = o.tail.pop_front().expect("front");
                    o.tail_bytes -= w.bytes;
                }
                if whole {
                    self.apply_ready();
                }
                Some(())
            }
            SymMsg::Relay {
                origin,
                deps,
                seq,
                part,
                parts,
                inner,
            } => {
                if origin as usize >= self.n || self.live.contains(&origin) {
                    return None;
                }
                if self.on_write(origin, seq, (part, parts), deps, inner)? {
                    self.apply_ready();
                }
                Some(())
            }
            SymMsg::Ack { seq } => {
                for p in self.pending.iter_mut().take_while(|p| p.seq <= seq) {
                    p.missing.retain(|&k| k != from);
                }
                self.complete();
                Some(())
            }
            SymMsg::Flush { view } => {
                if view == self.view && self.phase == Phase::Changing {
                    self.flush_wait.retain(|&k| k != from);
                    self.maybe_ready();
                } else if view > self.view && self.early_flush.len() < self.n {
                    self.early_flush.push((from, view));
                } else {
                    return None;
                }
                Some(())
            }
            m => self.on_locks(from, m),
        }
    }

    /// LOCK, GRANT and RELEASE.
    fn on_locks(&mut self, from: NodeId, m: SymMsg<'_>) -> Option<()> {
        match m {
            SymMsg::Lock {
                view,
                txn,
                req,
                part,
                parts,
                segment,
                write,
                locks,
            } => {
                let g = self.segments.get(segment as usize)?;
                if view != self.view
                    || txn >> 48 != from as u64
                    || self.home_in(g.home, &self.live) != self.cfg.node
                {
                    return None;
                }
                let count = g.locks.len();
                let ids: Vec<LockId> = locks
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect();
                if ids.iter().any(|&l| l as usize >= count) {
                    return None;
                }
                if !self.remote.contains_key(&txn) {
                    if self.remote.len() >= self.cfg.txns_max * self.n {
                        return None;
                    }
                    self.remote.insert(
                        txn,
                        Remote {
                            from,
                            ..Remote::default()
                        },
                    );
                }
                let rm = self.remote.get_mut(&txn).expect("inserted");
                let assembling = rm.wants.back().is_some_and(|w| w.got < w.parts);
                let room =
                    rm.wants.len() < REQUESTS_MAX && rm.wants.back().is_none_or(|w| w.req < req);
                match rm.wants.back_mut() {
                    Some(w)
                        if assembling
                            && w.req == req
                            && w.got == part
                            && w.parts == parts
                            && w.segment == segment
                            && w.write == write
                            && w.locks.len() + ids.len() <= LOCKS_PER_RANGE_MAX =>
                    {
                        w.locks.extend(ids);
                        w.got += 1;
                    }
                    // A new request, after the transaction's others (granted in order).
                    _ if !assembling && part == 0 && room => {
                        rm.wants.push_back(Want {
                            req,
                            got: 1,
                            parts,
                            segment,
                            write,
                            locks: ids,
                        });
                    }
                    _ => {
                        self.drop_remote(txn);
                        return None;
                    }
                }
                // While the view changes, every request is tried when it is over.
                let whole = rm.wants.front().is_some_and(|w| w.got == w.parts);
                if whole && self.phase == Phase::Serving {
                    self.try_remote(txn);
                }
                Some(())
            }
            SymMsg::Grant { txn, req, no, deps } => {
                if txn >> 48 != self.cfg.node as u64
                    || deps.iter().any(|(o, _)| o as usize >= self.n)
                {
                    return None;
                }
                // Counted even for a transaction gone: the home takes the locks for this
                // node's until a RETURN names this grant or a later one.
                let seen = &mut self.grant_seen[from as usize];
                *seen = (*seen).max(no);
                // A grant for a transaction aborted since is stale: its RELEASE follows it.
                let Some(t) = self.txns.get_mut(&txn) else {
                    return Some(());
                };
                let i = t.asked.iter().position(|&a| a == req)?;
                t.asked.swap_remove(i);
                for d in deps.iter() {
                    merge_dep(&mut t.deps, d);
                    let g = &mut self.granted_deps[d.0 as usize];
                    *g = (*g).max(d.1);
                }
                // This node holds the locks now, beyond the transaction if it keeps them.
                for &(_, s, l, w) in t.asked_locks.iter().filter(|a| a.0 == req) {
                    self.cache
                        .entry((s, l))
                        .and_modify(|c| c.write |= w)
                        .or_insert(Cached {
                            write: w,
                            recalled: false,
                        });
                }
                t.asked_locks.retain(|a| a.0 != req);
                // Waits on: more grants, or local locks of a later range.
                if t.state != TxnState::WaitHome || !t.asked.is_empty() {
                    return Some(());
                }
                let deadline = t.deadline;
                if self.proceed(txn) {
                    self.waiting.remove(&(deadline, txn));
                    self.events.push_back(SymEvent::Granted(txn));
                }
                Some(())
            }
            SymMsg::Release { txn } => {
                if txn >> 48 != from as u64 {
                    return None;
                }
                self.drop_remote(txn);
                Some(())
            }
            SymMsg::Recall {
                view,
                segment,
                locks,
            } => {
                let g = self.segments.get(segment as usize)?;
                if self.home_in(g.home, &self.live) != from
                    || lock_ids(locks).any(|l| l as usize >= g.locks.len())
                {
                    return None;
                }
                // A recall of an earlier view: the view change freed what it recalls.
                if view != self.view {
                    return Some(());
                }
                for l in lock_ids(locks) {
                    // Not held (given back already, or granted to a transaction that ended
                    // before the grant came), or needed by no transaction here: back at once.
                    let back = !self.cache.contains_key(&(segment, l)) || !self.in_use(segment, l);
                    if !back {
                        if let Some(c) = self.cache.get_mut(&(segment, l)) {
                            c.recalled = true;
                        }
                    }
                    if back {
                        self.cache.remove(&(segment, l));
                        self.touch(segment, l);
                        self.returning.push((from, segment, l));
                    }
                }
                self.send_returns();
                // A transaction here kept out of a recalled lock now asks its home for it.
                self.grant_waiting();
                Some(())
            }
            SymMsg::Return {
                view,
                seq,
                got,
                segment,
                locks,
            } => {
                let g = self.segments.get(segment as usize)?;
                // The commits it names came ahead of it on the channel.
                if lock_ids(locks).any(|l| l as usize >= g.locks.len())
                    || seq > self.origins[from as usize].received
                {
                    return None;
                }
                // Of an earlier view: the view change freed those locks, and every commit
                // made under them is on every replica.
                if view != self.view {
                    return Some(());
                }
                let r = &mut self.released[from as usize];
                *r = (*r).max(seq);
                self.drop_holds(from, segment, lock_ids(locks), got);
                self.grant_waiting();
                Some(())
            }
            _ => None,
        }
    }

    /// A part of origin `o`'s commit `seq`, assembled: `Some(true)` when this part made the
    /// commit whole (it waits in the origin's queue for [`SymNode::apply_ready`]),
    /// `Some(false)` when it waits for more parts or was had already, `None` when out of
    /// protocol.
    fn on_write(
        &mut self,
        o: NodeId,
        seq: u64,
        (part, parts): (u16, u16),
        deps: Deps<'_>,
        inner: &[u8],
    ) -> Option<bool> {
        let log_bytes = self.cfg.log_bytes;
        let (n, me, my_seq) = (self.n, self.cfg.node, self.seq);
        let org = &mut self.origins[o as usize];
        if seq <= org.received {
            self.counters.duplicates += 1;
            return Some(false);
        }
        let fresh = part == 0 && seq == org.received + 1;
        match &mut org.asm {
            Some((w, ps)) if w.seq == seq && w.parts.len() == part as usize && *ps == parts => {
                w.bytes += inner.len();
                if w.bytes > log_bytes {
                    org.asm = None;
                    return None;
                }
                w.parts.push(inner.to_vec());
            }
            _ if fresh => {
                // A commit cannot depend on a later one of its own origin, nor on one of
                // this node's it has not made.
                let bad = |(d, s): (NodeId, u64)| {
                    d as usize >= n || d == o && s >= seq || d == me && s > my_seq
                };
                if deps.iter().any(bad) {
                    org.asm = None;
                    return None;
                }
                let w = Whole {
                    seq,
                    parts: vec![inner.to_vec()],
                    bytes: inner.len(),
                    deps: deps.iter().filter(|&(d, _)| d != o).collect(),
                };
                org.asm = Some((w, parts));
            }
            _ => {
                org.asm = None;
                return None;
            }
        }
        if org
            .asm
            .as_ref()
            .is_some_and(|(w, ps)| w.parts.len() < *ps as usize)
        {
            return Some(false);
        }
        let (w, _) = org.asm.take().expect("set above");
        let segs = &self.segments;
        let fits = |r: &msg::Range<'_>| {
            segs.get(r.segment as usize)
                .is_some_and(|g| r.offset as usize + r.bytes.len() <= g.mem.len())
        };
        let all_fit = w.parts.iter().all(|m| match Msg::parse(m) {
            Ok(Msg::Write(w)) => w.ranges().all(|r| fits(&r)),
            _ => false,
        });
        if !all_fit {
            return None;
        }
        let waits = !self.applied_all(&w.deps);
        let org = &mut self.origins[o as usize];
        // The origin's log bounds what it has in flight; past twice it (a broken origin) the
        // commit is refused.
        if org.blocked_bytes + w.bytes > 2 * log_bytes {
            return None;
        }
        if waits || !org.blocked.is_empty() {
            self.counters.commits_held += 1;
        }
        org.received = seq;
        org.blocked_bytes += w.bytes;
        org.blocked.push_back(w);
        Some(true)
    }

    /// Applies every whole commit whose dependencies are here, each origin's in order, until
    /// none is left that can go; acknowledges the live origins' and lets waiting
    /// transactions whose grants named them use their locks.
    fn apply_ready(&mut self) {
        let log_bytes = self.cfg.log_bytes;
        let mut any = false;
        loop {
            let mut progress = false;
            for o in 0..self.n {
                let mut last = None;
                while let Some(w) = self.origins[o].blocked.front() {
                    if !self.applied_all(&w.deps) {
                        break;
                    }
                    let org = &mut self.origins[o];
                    let w = org.blocked.pop_front().expect("front");
                    org.blocked_bytes -= w.bytes;
                    for m in &w.parts {
                        if let Ok(Msg::Write(p)) = Msg::parse(m) {
                            for r in p.ranges() {
                                let a = r.offset as usize;
                                self.segments[r.segment as usize].mem[a..a + r.bytes.len()]
                                    .copy_from_slice(r.bytes);
                            }
                        }
                    }
                    let org = &mut self.origins[o];
                    org.applied = w.seq;
                    last = Some(w.seq);
                    org.tail_bytes += w.bytes;
                    org.tail.push_back(w);
                    // Past twice the log (an origin that never declares its commits
                    // complete) the oldest go.
                    while org.tail_bytes > 2 * log_bytes {
                        let old = org.tail.pop_front().expect("non-empty while over");
                        org.tail_bytes -= old.bytes;
                    }
                    self.counters.applied += 1;
                }
                if let Some(seq) = last {
                    progress = true;
                    if self.live.contains(&(o as NodeId)) {
                        msg::queue_ack(&mut self.out, o as NodeId, seq);
                    }
                }
            }
            if !progress {
                break;
            }
            any = true;
        }
        if any {
            self.grant_waiting();
        }
    }

    fn while_recovering(&mut self, from: NodeId, m: SymMsg<'_>, bytes: &[u8]) -> Option<()> {
        let rc = self.recovery.as_mut()?;
        match m {
            SymMsg::Seqs {
                view,
                incarnation,
                seqs,
            } if rc.source.is_none() => {
                if incarnation != self.cfg.incarnation
                    || seqs
                        .iter()
                        .any(|&(k, _)| k as usize >= self.n || k == self.cfg.node)
                {
                    return None;
                }
                rc.source = Some((from, view));
                rc.seqs = seqs;
                Some(())
            }
            // Held, in order, until the snapshot says which view this node is in.
            SymMsg::Write { .. } | SymMsg::Lock { .. } | SymMsg::Release { .. } => {
                if rc.held_bytes + bytes.len() > self.cfg.log_bytes * self.n {
                    return None;
                }
                rc.held_bytes += bytes.len();
                rc.held.push_back((from, bytes.to_vec()));
                Some(())
            }
            SymMsg::Snap(s) => {
                let (src, view) = rc.source?;
                if from != src || s.nonce != view {
                    return None;
                }
                let (seg, off) = rc.next;
                let empty = self.segments.is_empty();
                if (seg, off) != (s.segment, s.offset) && !(empty && s.last) {
                    return None;
                }
                if !empty {
                    let g = self.segments.get_mut(s.segment as usize)?;
                    let a = s.offset as usize;
                    g.mem
                        .get_mut(a..a + s.bytes.len())?
                        .copy_from_slice(s.bytes);
                    let end = off + s.bytes.len() as u32;
                    rc.next = if end as usize == g.mem.len() {
                        (seg + 1, 0)
                    } else {
                        (seg, end)
                    };
                }
                let whole = empty || rc.next == (self.segments.len() as SegmentId, 0);
                if s.last != whole {
                    return None;
                }
                if s.last {
                    self.recovered(view);
                }
                Some(())
            }
            _ => None,
        }
    }

    /// The snapshot is in: take the view, then the commits that came before it.
    fn recovered(&mut self, view: u64) {
        let rc = self.recovery.take().expect("recovering");
        let mut live: Vec<NodeId> = rc.seqs.iter().map(|&(k, _)| k).collect();
        live.push(self.cfg.node);
        live.sort_unstable();
        live.dedup();
        for &(k, s) in &rc.seqs {
            self.origins[k as usize] = Origin {
                applied: s,
                received: s,
                ..Origin::default()
            };
        }
        self.live = live;
        self.view = view;
        self.phase = Phase::Serving;
        self.events.push_back(SymEvent::Recovered);
        for (from, m) in rc.held {
            self.handle_message(from, &m);
        }
        self.grant_waiting();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAR: Instant = Instant(u64::MAX);

    /// Nodes on in-order channels; `cut` drops what a node sends to another (a crash in
    /// the middle of a send).
    struct Net {
        nodes: Vec<SymNode>,
        cut: Vec<(NodeId, NodeId)>,
        /// Channels whose messages wait in `late` (in order) until `deliver_late`.
        slow: Vec<(NodeId, NodeId)>,
        late: Vec<(NodeId, NodeId, Vec<u8>)>,
        sent: Vec<(NodeId, NodeId, u8)>,
    }

    /// Node `cfg.node` of `n`, with a segment homed at each of `homes` (a restarted process
    /// when `recovering`).
    fn test_node(cfg: Config, n: usize, recovering: bool, homes: &[NodeId]) -> SymNode {
        let mut s = SymNode::new(cfg, n, recovering);
        for &h in homes {
            s.add_segment(
                1000,
                LockMapping::Uniform {
                    locks: 100,
                    granule: 10,
                },
                h,
            )
            .unwrap();
        }
        s
    }

    impl Net {
        fn new(n: usize, homes: &[NodeId]) -> Net {
            Net::with(n, homes, false)
        }

        /// `n` nodes that keep the locks their homes grant them (`cache`) or not.
        fn with(n: usize, homes: &[NodeId], cache: bool) -> Net {
            let nodes = (0..n)
                .map(|i| {
                    let cfg = Config {
                        node: i as NodeId,
                        cache_locks: cache,
                        ..Config::default()
                    };
                    test_node(cfg, n, false, homes)
                })
                .collect();
            Net {
                nodes,
                cut: Vec::new(),
                slow: Vec::new(),
                late: Vec::new(),
                sent: Vec::new(),
            }
        }

        /// Delivers what the slow channels held, in order, and opens them.
        fn deliver_late(&mut self) {
            self.slow.clear();
            for (from, to, m) in std::mem::take(&mut self.late) {
                self.nodes[to as usize].handle_message(from, &m);
            }
            self.pump();
        }

        fn pump(&mut self) {
            loop {
                let mut any = false;
                for i in 0..self.nodes.len() {
                    while let Some((to, m)) = self.nodes[i].poll_transmit() {
                        any = true;
                        // The kinds of a bundle's messages, as if each had gone alone.
                        match msg::unbundle(&m) {
                            Some(Ok(b)) => self.sent.extend(b.map(|x| (i as NodeId, to, x[1]))),
                            _ => self.sent.push((i as NodeId, to, m[1])),
                        }
                        if self.slow.contains(&(i as NodeId, to)) {
                            self.late.push((i as NodeId, to, m));
                        } else if !self.cut.contains(&(i as NodeId, to)) {
                            self.nodes[to as usize].handle_message(i as NodeId, &m);
                        }
                    }
                }
                if !any {
                    return;
                }
            }
        }

        fn events(&mut self, k: usize) -> Vec<SymEvent> {
            std::iter::from_fn(|| self.nodes[k].poll_event()).collect()
        }

        /// Writes `v` at `off` of segment `s` on node `k`, committed.
        fn write(&mut self, k: usize, s: SegmentId, off: u32, v: u8) -> TxnId {
            let t = self.nodes[k].begin(FAR).unwrap();
            let l = self.nodes[k].set_range(t, s, off, 4, Mode::Write).unwrap();
            if l == Lock::Waiting {
                self.pump();
                assert!(self.events(k).contains(&SymEvent::Granted(t)));
            }
            self.nodes[k].range_mut(t, s, off, 4).unwrap().fill(v);
            self.nodes[k].commit(t).unwrap();
            t
        }
    }

    #[test]
    fn remote_lock_commit_reaches_every_replica_and_returns_the_lock_to_its_home() {
        let mut net = Net::new(3, &[0]);
        let t = net.write(1, 0, 20, 7);
        net.pump();
        assert!(net.events(1).contains(&SymEvent::Committed(t)));
        assert_everywhere(&net, 0, 20, 7);
        // The home asked once; the lock went back with a RETURN once the commit was made.
        assert!(net.sent.contains(&(1, 0, LOCK)));
        assert!(net.sent.contains(&(1, 0, RETURN)));
        assert!(!net.sent.contains(&(1, 0, RELEASE)));
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
        assert!(net.nodes[0].holds.is_empty());
        assert_eq!(net.nodes[0].released[1], 1);
        // A transaction that wrote nothing returns its locks the same way.
        net.sent.clear();
        let r = net.nodes[1].begin(FAR).unwrap();
        assert!(waits_then_granted(&mut net, 1, r, (0, 20, 4, Mode::Read)));
        net.nodes[1].commit(r).unwrap();
        net.pump();
        assert!(net.sent.contains(&(1, 0, RETURN)));
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
        assert!(net.nodes[0].holds.is_empty());
    }

    /// `t` on node `k` declares a range and waits for it; whether it is granted once every
    /// message is delivered.
    fn waits_then_granted(
        net: &mut Net,
        k: usize,
        t: TxnId,
        (s, off, len, mode): (SegmentId, u32, u32, Mode),
    ) -> bool {
        assert_eq!(
            net.nodes[k].set_range(t, s, off, len, mode),
            Ok(Lock::Waiting)
        );
        net.pump();
        net.events(k).contains(&SymEvent::Granted(t))
    }

    /// Every node's replica holds `v` in the 4 bytes at `off` of segment `s`.
    fn assert_everywhere(net: &Net, s: SegmentId, off: usize, v: u8) {
        for (k, n) in net.nodes.iter().enumerate() {
            assert_eq!(&n.segment(s).unwrap()[off..off + 4], &[v; 4], "node {k}");
        }
    }

    /// How many messages of `kind` node `from` sent `to`.
    fn count(net: &Net, from: NodeId, to: NodeId, kind: u8) -> usize {
        net.sent.iter().filter(|&&m| m == (from, to, kind)).count()
    }

    #[test]
    fn a_kept_lock_serves_the_next_transactions_without_asking_the_home() {
        let mut net = Net::with(3, &[0], true);
        net.write(1, 0, 20, 7);
        net.pump();
        net.write(1, 0, 20, 8);
        net.write(1, 0, 24, 9);
        net.pump();
        // Offsets 20 and 24 are under lock 2: asked once, never given back.
        assert_eq!(count(&net, 1, 0, LOCK), 1);
        assert_eq!(count(&net, 1, 0, RETURN), 0);
        assert_eq!(net.nodes[1].counters().cache_hits, 2);
        for k in 0..3 {
            let m = &net.nodes[k].segment(0).unwrap()[20..28];
            assert_eq!(m, &[8, 8, 8, 8, 9, 9, 9, 9], "node {k}");
        }
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
    }

    #[test]
    fn a_kept_lock_goes_back_when_another_node_or_the_home_wants_it() {
        let mut net = Net::with(3, &[0], true);
        net.write(1, 0, 20, 7);
        net.pump();
        // Node 1 holds lock 2 in a transaction when node 2 asks for it: the home recalls
        // it, and node 1 gives it back once that transaction is committed.
        let a = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(a, 0, 20, 4, Mode::Write),
            Ok(Lock::Granted)
        );
        net.nodes[1].range_mut(a, 0, 20, 4).unwrap().fill(1);
        let b = net.nodes[2].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[2].set_range(b, 0, 20, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        assert_eq!(count(&net, 0, 1, RECALL), 1);
        assert_eq!(count(&net, 1, 0, RETURN), 0);
        assert!(net.events(2).is_empty(), "b waits for a");
        // A new transaction of node 1 waits behind the recall instead of taking the lock.
        let c = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(c, 0, 20, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.nodes[1].commit(a).unwrap();
        net.pump();
        assert_eq!(count(&net, 1, 0, RETURN), 1);
        assert!(net.events(2).contains(&SymEvent::Granted(b)));
        // b reads what a wrote: node 1's commit was named by the grant.
        assert_eq!(net.nodes[2].range(b, 0, 20, 4).unwrap(), &[1; 4]);
        net.nodes[2].range_mut(b, 0, 20, 4).unwrap().fill(2);
        net.nodes[2].commit(b).unwrap();
        net.pump();
        // Then node 1 asks again (c), and the home's own transaction after it.
        assert!(net.events(1).contains(&SymEvent::Granted(c)));
        assert_eq!(net.nodes[1].range(c, 0, 20, 4).unwrap(), &[2; 4]);
        net.nodes[1].range_mut(c, 0, 20, 4).unwrap().fill(3);
        net.nodes[1].commit(c).unwrap();
        net.pump();
        let d = net.write(0, 0, 20, 4);
        net.pump();
        assert!(net.events(0).contains(&SymEvent::Committed(d)));
        assert_everywhere(&net, 0, 20, 4);
        assert!(net.nodes[0].counters().recalls >= 3);
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
    }

    #[test]
    fn a_grant_that_came_after_its_transaction_aborted_is_given_back_when_recalled() {
        let mut net = Net::with(3, &[0], true);
        net.slow.push((0, 1));
        let a = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(a, 0, 20, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        net.nodes[1].abort(a).unwrap();
        net.pump();
        // The GRANT comes for a transaction that is gone; the home counts node 1 a holder.
        net.deliver_late();
        assert!(net.nodes[1].cache.is_empty());
        assert!(!net.nodes[0].holds.is_empty());
        let t = net.write(2, 0, 20, 5);
        net.pump();
        assert!(net.events(2).contains(&SymEvent::Committed(t)));
        assert_eq!(count(&net, 1, 0, RETURN), 1);
        assert_everywhere(&net, 0, 20, 5);
    }

    #[test]
    fn a_return_that_crossed_a_recall_does_not_free_the_lock_granted_again() {
        let mut net = Net::new(2, &[0]);
        let t1 = net.nodes[1].begin(FAR).unwrap();
        assert!(waits_then_granted(&mut net, 1, t1, (0, 20, 4, Mode::Write)));
        // The home's own transaction wants the lock: its RECALL is held on the way.
        net.slow.push((0, 1));
        let w = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(w, 0, 20, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        // Node 1 gives the lock back at its commit, asks it again for t2, and the home
        // grants it once w is done; the grant waits behind the recall.
        net.nodes[1].range_mut(t1, 0, 20, 4).unwrap().fill(1);
        net.nodes[1].commit(t1).unwrap();
        net.pump();
        assert!(net.events(0).contains(&SymEvent::Granted(w)));
        let t2 = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(t2, 0, 20, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        net.nodes[0].commit(w).unwrap();
        net.pump();
        // The recall reaches node 1 before the grant: it answers for the lock it gave back,
        // and that answer must not free the lock granted since.
        net.deliver_late();
        assert!(net.events(1).contains(&SymEvent::Granted(t2)));
        let x = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(x, 0, 20, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        assert!(
            !net.events(0).contains(&SymEvent::Granted(x)),
            "x must wait for t2"
        );
        net.nodes[1].range_mut(t2, 0, 20, 4).unwrap().fill(2);
        net.nodes[1].commit(t2).unwrap();
        net.pump();
        assert!(net.events(0).contains(&SymEvent::Granted(x)));
        assert_eq!(net.nodes[0].range(x, 0, 20, 4).unwrap(), &[2; 4]);
    }

    #[test]
    fn a_kept_lock_is_taken_in_order_behind_a_request_that_waits() {
        // Segments 0 and 1 both homed at node 0; their lock 0 is taken before their lock 1
        // by every node (segment order).
        let mut net = Net::with(2, &[0, 0], true);
        net.write(1, 1, 0, 1);
        net.pump();
        assert!(net.nodes[1].cache.contains_key(&(1, 0)));
        // The home's transaction holds segment 0's lock; node 1's declares both ranges.
        let x = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(x, 0, 0, 4, Mode::Write),
            Ok(Lock::Granted)
        );
        let y = net.nodes[1].begin(FAR).unwrap();
        let both = [(0, 0, 4, Mode::Write), (1, 0, 4, Mode::Write)];
        assert_eq!(net.nodes[1].set_ranges(y, &both), Ok(Lock::Waiting));
        net.pump();
        // x now wants segment 1's lock, which node 1 keeps: y does not hold it while it
        // waits for segment 0's, so it comes back and x goes on.
        assert!(waits_then_granted(&mut net, 0, x, (1, 0, 4, Mode::Write)));
        net.nodes[0].range_mut(x, 1, 0, 4).unwrap().fill(2);
        net.nodes[0].commit(x).unwrap();
        net.pump();
        assert!(net.events(1).contains(&SymEvent::Granted(y)));
        assert_eq!(net.nodes[1].range(y, 1, 0, 4).unwrap(), &[2; 4]);
    }

    #[test]
    fn a_kept_lock_of_a_range_that_waits_for_another_goes_back_when_recalled() {
        // Offsets 0 and 10 are under locks 0 and 1 of segment 0 (home 0).
        let mut net = Net::with(3, &[0], true);
        net.write(1, 0, 10, 1);
        net.pump();
        assert!(net.nodes[1].cache.contains_key(&(0, 1)));
        // Node 2's w holds lock 0; node 1's t declares both locks: it keeps lock 1 and asks
        // for both.
        let w = net.nodes[2].begin(FAR).unwrap();
        assert!(waits_then_granted(&mut net, 2, w, (0, 0, 4, Mode::Write)));
        let t = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(t, 0, 0, 20, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        // w wants lock 1 too: node 1 gives it back (t waits for it from the home anyway),
        // so w goes on rather than both waiting for ever.
        assert!(waits_then_granted(&mut net, 2, w, (0, 10, 4, Mode::Write)));
        net.nodes[2].range_mut(w, 0, 10, 4).unwrap().fill(2);
        net.nodes[2].commit(w).unwrap();
        net.pump();
        assert!(net.events(1).contains(&SymEvent::Granted(t)));
        assert_eq!(net.nodes[1].range(t, 0, 10, 4).unwrap(), &[2; 4]);
        net.nodes[1].commit(t).unwrap();
        net.pump();
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
    }

    #[test]
    fn two_nodes_keeping_a_lock_to_read_both_write_it_in_turn() {
        let mut net = Net::with(3, &[0], true);
        for k in [1, 2] {
            let r = net.nodes[k].begin(FAR).unwrap();
            assert_eq!(
                net.nodes[k].set_range(r, 0, 20, 4, Mode::Read),
                Ok(Lock::Waiting)
            );
            net.pump();
            assert!(net.events(k).contains(&SymEvent::Granted(r)));
            net.nodes[k].commit(r).unwrap();
            net.pump();
            assert!(net.nodes[k].cache.contains_key(&(0, 2)));
        }
        // Both now write it: each asks the home to write what it holds to read.
        let (a, b) = (
            net.nodes[1].begin(FAR).unwrap(),
            net.nodes[2].begin(FAR).unwrap(),
        );
        for (k, t) in [(1, a), (2, b)] {
            assert_eq!(
                net.nodes[k].set_range(t, 0, 20, 4, Mode::Write),
                Ok(Lock::Waiting)
            );
        }
        net.pump();
        let first = if net.events(1).contains(&SymEvent::Granted(a)) {
            (1, a)
        } else {
            assert!(
                net.events(2).contains(&SymEvent::Granted(b)),
                "neither writes"
            );
            (2, b)
        };
        net.nodes[first.0]
            .range_mut(first.1, 0, 20, 4)
            .unwrap()
            .fill(5);
        net.nodes[first.0].commit(first.1).unwrap();
        net.pump();
        let (k, t) = if first.0 == 1 { (2, b) } else { (1, a) };
        assert!(net.events(k).contains(&SymEvent::Granted(t)));
        assert_eq!(net.nodes[k].range(t, 0, 20, 4).unwrap(), &[5; 4]);
    }

    #[test]
    fn a_view_change_frees_every_kept_lock() {
        let mut net = Net::with(3, &[0], true);
        net.write(1, 0, 20, 7);
        net.pump();
        assert!(!net.nodes[1].cache.is_empty());
        for k in 0..3 {
            net.nodes[k].view_change(1, &[0, 1, 2], None);
        }
        net.pump();
        assert!(net.nodes[1].cache.is_empty());
        assert!(net.nodes[0].holds.is_empty());
        net.sent.clear();
        net.write(2, 0, 20, 8);
        net.pump();
        assert_eq!(count(&net, 0, 1, RECALL), 0);
        assert_everywhere(&net, 0, 20, 8);
    }

    #[test]
    fn conflicting_transactions_serialize_at_the_home() {
        let mut net = Net::new(2, &[0]);
        let a = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(a, 0, 0, 4, Mode::Write),
            Ok(Lock::Granted)
        );
        net.nodes[0].range_mut(a, 0, 0, 4).unwrap().fill(1);
        let b = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(b, 0, 0, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        assert!(net.events(1).is_empty(), "b must wait for a");
        net.nodes[0].commit(a).unwrap();
        // Granted once a has committed (its write applied on node 1, which reads it).
        net.pump();
        assert_eq!(net.events(1), [SymEvent::Granted(b)]);
        assert_eq!(net.nodes[1].range(b, 0, 0, 4).unwrap(), &[1; 4]);
        net.nodes[1].range_mut(b, 0, 0, 4).unwrap()[0] = 2;
        net.nodes[1].commit(b).unwrap();
        net.pump();
        assert_eq!(&net.nodes[0].segment(0).unwrap()[..4], &[2, 1, 1, 1]);
    }

    /// With the smallest messages, a commit that names a dependency on every node still
    /// ships (its write set in as many parts as it takes) and reaches every replica.
    #[test]
    fn small_messages_still_carry_a_commit_with_every_dependency() {
        let n = 4;
        let mut net = Net::new(n, &[0]);
        for (i, node) in net.nodes.iter_mut().enumerate() {
            let cfg = Config {
                node: i as NodeId,
                message_bytes: 64,
                ..Config::default()
            };
            *node = test_node(cfg, n, false, &[0]);
        }
        // Every node writes under the home's locks in turn: the home's grants, and its
        // own commits, then name all of them.
        for k in [1, 2, 3, 0] {
            net.write(k, 0, 0, k as u8 + 1);
            net.pump();
            for m in 0..n {
                net.events(m);
            }
        }
        let t = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(t, 0, 0, 300, Mode::Write),
            Ok(Lock::Granted)
        );
        assert!(
            net.nodes[0].txns[&t].deps.len() >= 3,
            "a dependency on every writer"
        );
        net.nodes[0].range_mut(t, 0, 0, 300).unwrap().fill(9);
        net.nodes[0].commit(t).expect("fits in parts");
        net.pump();
        assert!(net.events(0).contains(&SymEvent::Committed(t)));
        for (k, node) in net.nodes.iter().enumerate() {
            assert_eq!(&node.segment(0).unwrap()[..300], &[9; 300], "node {k}");
        }
    }

    /// The transactions waiting for one lock, the home's own and other nodes', take it in
    /// the order they asked, each reading what the one before it wrote.
    #[test]
    fn waiters_of_a_lock_take_it_in_the_order_they_came() {
        let mut net = Net::new(3, &[0]);
        let a = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(a, 0, 0, 4, Mode::Write),
            Ok(Lock::Granted)
        );
        // b (home), r (node 1), c (home), s (node 2), in this order.
        let mut order = vec![(0, a)];
        for k in [0, 1, 0, 2] {
            let t = net.nodes[k].begin(FAR).unwrap();
            assert_eq!(
                net.nodes[k].set_range(t, 0, 0, 4, Mode::Write),
                Ok(Lock::Waiting)
            );
            net.pump();
            order.push((k, t));
        }
        let mut granted = vec![a];
        for (i, &(k, t)) in order.iter().enumerate() {
            for m in 0..3 {
                granted.extend(net.events(m).into_iter().filter_map(|e| match e {
                    SymEvent::Granted(x) => Some(x),
                    _ => None,
                }));
            }
            let so_far: Vec<TxnId> = order[..=i].iter().map(|&(_, x)| x).collect();
            assert_eq!(
                granted,
                so_far,
                "granted once waiter {} ended",
                i.max(1) - 1
            );
            assert_eq!(net.nodes[k].range(t, 0, 0, 4).unwrap(), &[i as u8; 4]);
            net.nodes[k]
                .range_mut(t, 0, 0, 4)
                .unwrap()
                .fill(i as u8 + 1);
            net.nodes[k].commit(t).unwrap();
            net.pump();
        }
        assert_everywhere(&net, 0, 0, order.len() as u8);
    }

    /// The home frees a lock when its writer commits; the next holder waits until the
    /// write is applied in its own replica.
    #[test]
    fn a_lock_released_at_commit_is_used_once_its_write_is_here() {
        let mut net = Net::new(3, &[0]);
        net.slow.push((2, 1));
        let a = net.write(2, 0, 0, 7);
        net.pump();
        // Node 0 (the home) has the write, which freed the lock there; node 1 has not.
        assert_eq!(&net.nodes[0].segment(0).unwrap()[..4], &[7; 4]);
        assert!(net.nodes[0].is_quiet());
        let b = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(b, 0, 0, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        assert!(net.sent.contains(&(0, 1, GRANT)));
        assert!(net.events(1).is_empty(), "granted before a's write is here");
        assert_eq!(net.nodes[1].counters().apply_waits, 1);
        assert_eq!(
            net.nodes[1].range(b, 0, 0, 4),
            Err(CrError::NotActive),
            "the range is not usable yet"
        );
        net.deliver_late();
        assert_eq!(net.events(1), [SymEvent::Granted(b)]);
        assert_eq!(net.nodes[1].range(b, 0, 0, 4).unwrap(), &[7; 4]);
        net.nodes[1].abort(b).unwrap();
        net.pump();
        assert!(net.events(2).contains(&SymEvent::Committed(a)));
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
    }

    /// A commit written under a lock another node's commit released waits, on a replica
    /// that has not that commit yet, until it has: the writes apply in their order.
    #[test]
    fn a_commit_waits_for_the_commit_it_read_from() {
        let mut net = Net::new(4, &[0]);
        net.slow.push((2, 3));
        let a = net.write(2, 0, 0, 7);
        net.pump();
        // Node 1 reads a's write at once (its grant names it, and it has it), and writes.
        let b = net.write(1, 0, 0, 9);
        net.pump();
        // Node 3 has b's commit, not a's: it holds b's, and acknowledges neither.
        assert_eq!(net.nodes[3].counters().commits_held, 1);
        assert_eq!(&net.nodes[3].segment(0).unwrap()[..4], &[0; 4]);
        assert!(!net.events(1).contains(&SymEvent::Committed(b)));
        net.deliver_late();
        for k in 0..4 {
            assert_eq!(&net.nodes[k].segment(0).unwrap()[..4], &[9; 4], "node {k}");
        }
        assert!(net.events(2).contains(&SymEvent::Committed(a)));
        assert!(net.events(1).contains(&SymEvent::Committed(b)));
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
    }

    /// `set_ranges` takes the ranges by home, asking each home once for all of its ranges,
    /// and the transaction is granted once, when all are in; a local conflict holds the
    /// ranges after it back.
    #[test]
    fn ranges_declared_together_ask_each_home_once() {
        let mut net = Net::new(3, &[0, 0, 2, 1]);
        let t = net.nodes[1].begin(FAR).unwrap();
        let all = [
            (0, 0, 4, Mode::Write),
            (1, 10, 4, Mode::Write),
            (2, 20, 4, Mode::Read),
            (3, 30, 4, Mode::Write),
        ];
        assert_eq!(net.nodes[1].set_ranges(t, &all), Ok(Lock::Waiting));
        let locks: Vec<NodeId> = net.nodes[1]
            .out
            .iter()
            .filter(|(_, m)| m[1] == LOCK)
            .map(|(to, _)| *to)
            .collect();
        // Home 0's two ranges first; node 1's own (segment 3) and node 2's once they are in.
        assert_eq!(locks, [0, 0]);
        net.pump();
        let to_2 = net.sent.iter().filter(|s| (s.0, s.1, s.2) == (1, 2, LOCK));
        assert_eq!(to_2.count(), 1);
        assert_eq!(net.events(1), [SymEvent::Granted(t)]);
        for &(s, off, len, mode) in &all {
            assert!(net.nodes[1].range(t, s, off, len).is_ok());
            assert_eq!(
                net.nodes[1].range_mut(t, s, off, len).is_ok(),
                mode == Mode::Write
            );
        }
        net.nodes[1].range_mut(t, 3, 30, 4).unwrap().fill(5);
        net.nodes[1].commit(t).unwrap();
        net.pump();
        assert_eq!(&net.nodes[2].segment(3).unwrap()[30..34], &[5; 4]);
        assert_eq!(net.events(1), [SymEvent::Committed(t)]);

        // Another transaction of node 1 holds segment 1's lock here: the first range's home
        // is asked, the rest wait for the local lock.
        let a = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(a, 1, 10, 4, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.pump();
        assert_eq!(net.events(1), [SymEvent::Granted(a)]);
        let b = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(net.nodes[1].set_ranges(b, &all[..3]), Ok(Lock::Waiting));
        net.pump();
        assert!(net.events(1).is_empty());
        assert_eq!(net.nodes[1].counters().refused, 0);
        net.nodes[1].abort(a).unwrap();
        net.pump();
        assert_eq!(net.events(1), [SymEvent::Granted(b)]);
        net.nodes[1].abort(b).unwrap();
        net.pump();
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
        // Nothing declared, or too much, is refused as such.
        let c = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(net.nodes[1].set_ranges(c, &[]), Err(CrError::TooManyLocks));
        assert_eq!(
            net.nodes[1].set_ranges(c, &[(9, 0, 4, Mode::Read)]),
            Err(CrError::UnknownSegment)
        );
    }

    #[test]
    fn a_remote_wait_past_its_deadline_aborts_and_frees_the_home() {
        let mut net = Net::new(2, &[0]);
        let a = net.nodes[0].begin(FAR).unwrap();
        net.nodes[0].set_range(a, 0, 0, 4, Mode::Write).unwrap();
        let b = net.nodes[1].begin(Instant(1000)).unwrap();
        net.nodes[1].set_range(b, 0, 0, 4, Mode::Write).unwrap();
        net.pump();
        assert_eq!(net.nodes[1].poll_timeout(), Some(Instant(1000)));
        net.nodes[1].handle_timeout(Instant(999));
        assert!(net.events(1).is_empty());
        net.nodes[1].handle_timeout(Instant(1000));
        assert_eq!(net.events(1), [SymEvent::Aborted(b, SymAbort::LockTimeout)]);
        net.pump();
        net.nodes[0].abort(a).unwrap();
        net.pump();
        // The home forgot b's request: nothing is held or queued.
        assert!(net.nodes.iter().all(|n| n.is_quiet()));
        assert_eq!(net.nodes[1].counters().lock_timeouts, 1);
    }

    #[test]
    fn a_large_lock_set_goes_in_batches_taken_all_or_none() {
        let mut net = Net::new(2, &[0]);
        let t = net.nodes[1].begin(FAR).unwrap();
        // 100 units of 10 bytes: 100 locks, three LOCK messages of at most 39.
        assert_eq!(
            net.nodes[1].set_range(t, 0, 0, 1000, Mode::Read),
            Ok(Lock::Waiting)
        );
        net.pump();
        let locks = net.sent.iter().filter(|s| s.2 == LOCK).count();
        assert_eq!(locks, 100usize.div_ceil(LOCKS_PER_MESSAGE));
        assert_eq!(net.events(1), [SymEvent::Granted(t)]);
        // A writer at the home now waits for every one of them.
        let w = net.nodes[0].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[0].set_range(w, 0, 990, 10, Mode::Write),
            Ok(Lock::Waiting)
        );
        net.nodes[1].commit(t).unwrap();
        net.pump();
        assert_eq!(net.events(0), [SymEvent::Granted(w)]);
    }

    #[test]
    fn malformed_messages_are_refused_and_counted() {
        let mut net = Net::new(2, &[0]);
        let t = net.nodes[1].begin(FAR).unwrap();
        net.nodes[1].set_range(t, 0, 0, 20, Mode::Write).unwrap();
        let mut msgs = Vec::new();
        while let Some((_, m)) = net.nodes[1].poll_transmit() {
            msgs.push(m);
        }
        msgs.push(grant_msg(t, 1, 1, &[(0, 1)]));
        msgs.push(small(RELEASE, t));
        let mut lists = VecDeque::new();
        lock_list_msgs(&mut lists, 0, (0, None, 1400), 0, &[1, 2]);
        lock_list_msgs(&mut lists, 0, (0, Some((0, 0)), 1400), 0, &[1, 2]);
        msgs.extend(lists.into_iter().map(|(_, m)| m));
        msgs.push(small(FLUSH, 1));
        msgs.push(small(RECOVER, 1));
        let mut w = Vec::new();
        let mut b = WriteBuilder::new(&mut w, 1, 0, 1);
        b.range(0, 0, b"abcd");
        b.finish();
        msgs.push(envelope(SWRITE, &head(Some(0), 0, &[(0, 0)]), &w));
        msgs.push(envelope(RELAY, &head(None, 1, &[]), &w));
        let mut refused = 0;
        for m in &msgs {
            for n in 0..m.len() {
                net.nodes[0].handle_message(1, &m[..n]);
                refused += 1;
                assert_eq!(net.nodes[0].counters().refused, refused, "{m:?} cut at {n}");
            }
        }
        // Out of protocol: a lock id past the segment's, a txn not of the sender's.
        let mut m = Vec::new();
        lock_msg(&mut m, 0, (t, 9, 0, 1), 0, true, &[100]);
        net.nodes[0].handle_message(1, &m);
        lock_msg(&mut m, 0, (5, 9, 0, 1), 0, true, &[1]);
        net.nodes[0].handle_message(1, &m);
        // A request of another view.
        lock_msg(&mut m, 7, (t, 9, 0, 1), 0, true, &[1]);
        net.nodes[0].handle_message(1, &m);
        // A node that does not exist, a range past the segment.
        net.nodes[0].handle_message(9, &msgs[0]);
        let mut w = Vec::new();
        let mut b = WriteBuilder::new(&mut w, 1, 0, 1);
        b.range(0, 998, b"abcd");
        b.finish();
        net.nodes[0].handle_message(1, &envelope(SWRITE, &head(Some(0), 0, &[]), &w));
        // A RETURN naming a commit not sent, a lock past the segment's; a RECALL from a
        // node that is not the segment's home.
        let mut l = VecDeque::new();
        lock_list_msgs(&mut l, 0, (0, Some((5, 0)), 1400), 0, &[1]);
        lock_list_msgs(&mut l, 0, (0, Some((0, 0)), 1400), 0, &[100]);
        lock_list_msgs(&mut l, 0, (0, None, 1400), 0, &[1]);
        for (_, m) in l {
            net.nodes[0].handle_message(1, &m);
        }
        assert_eq!(net.nodes[0].counters().refused, refused + 8);
        assert_eq!(net.nodes[0].segment(0).unwrap()[998..], [0, 0]);
    }

    #[test]
    fn a_dead_nodes_commit_reaches_every_survivor_and_its_homes_move() {
        let mut net = Net::new(3, &[2, 0]);
        // Node 2 commits; its write reaches node 0 only, then it dies.
        net.cut.push((2, 1));
        let t = net.nodes[2].begin(FAR).unwrap();
        net.nodes[2].set_range(t, 1, 0, 4, Mode::Write).unwrap();
        net.pump();
        assert_eq!(net.events(2), [SymEvent::Granted(t)]);
        net.nodes[2].range_mut(t, 1, 0, 4).unwrap().fill(9);
        net.nodes[2].commit(t).unwrap();
        net.pump();
        assert_eq!(net.nodes[0].applied(2), 1);
        assert_eq!(net.nodes[1].applied(2), 0);
        // A transaction on node 1 waits for a lock node 2 holds at node 0 (home of 1).
        let w = net.nodes[1].begin(FAR).unwrap();
        assert_eq!(
            net.nodes[1].set_range(w, 1, 0, 4, Mode::Read),
            Ok(Lock::Waiting)
        );
        net.pump();
        let dead = net.nodes.pop().unwrap();
        drop(dead);
        net.cut.clear();
        for k in 0..2 {
            net.nodes[k].view_change(1, &[0, 1], None);
        }
        net.pump();
        for k in 0..2 {
            let ev = net.events(k);
            assert!(ev.contains(&SymEvent::NodeLost(2)), "{k}: {ev:?}");
            assert!(
                ev.contains(&SymEvent::HomeMoved {
                    segment: 0,
                    home: 0
                }),
                "{ev:?}"
            );
            assert!(ev.contains(&SymEvent::Ready), "{ev:?}");
            assert_eq!(net.nodes[k].phase(), Phase::Serving);
            assert_eq!(net.nodes[k].applied(2), 1, "node {k}");
            assert_eq!(&net.nodes[k].segment(1).unwrap()[..4], &[9; 4]);
            assert!(net.nodes[k].is_quiet(), "node {k}");
        }
        assert_eq!(net.nodes[0].home(0), Some(0));
        // Segment 0's locks are at node 0 now.
        net.write(1, 0, 0, 3);
        net.pump();
        assert_eq!(&net.nodes[0].segment(0).unwrap()[..4], &[3; 4]);
    }

    /// What a node's dead process sent, late on its link, reaches a survivor after the
    /// view that admits the restarted process and before that process's RECOVER: it is the
    /// old process's, and refused (taken, the old commit 1 would pass for the new process's
    /// commit 1, which would then be dropped as had).
    #[test]
    fn a_dead_processs_late_commit_is_not_its_restarted_processs() {
        let mut net = Net::new(3, &[0, 1]);
        net.slow.push((1, 2));
        net.write(1, 0, 0, 7);
        net.pump();
        // Node 1 dies with its commit late on the way to node 2; node 0 relays it.
        for k in [0, 2] {
            net.nodes[k].view_change(1, &[0, 2], None);
        }
        net.pump();
        assert_eq!(net.nodes[2].applied(1), 1);
        let cfg = Config {
            node: 1,
            incarnation: 2,
            ..Config::default()
        };
        net.nodes[1] = test_node(cfg, 3, true, &[0, 1]);
        // The new process's RECOVER waits while the old commit arrives.
        let hello: Vec<_> = std::iter::from_fn(|| net.nodes[1].poll_transmit()).collect();
        for k in [0, 2] {
            net.nodes[k].view_change(2, &[0, 1, 2], Some(1));
        }
        let refused = net.nodes[2].counters().refused;
        net.deliver_late();
        assert_eq!(net.nodes[2].counters().refused, refused + 1);
        assert_eq!(net.nodes[2].applied(1), 0);
        for (to, m) in hello {
            net.nodes[to as usize].handle_message(1, &m);
        }
        net.pump();
        assert!(net.events(1).contains(&SymEvent::Recovered));
        // The new process's commit 1 is applied everywhere.
        net.write(1, 1, 0, 9);
        net.pump();
        assert_eq!(net.nodes[1].seq(), 1);
        for k in 0..3 {
            if k != 1 {
                assert_eq!(net.nodes[k].applied(1), 1, "node {k}");
            }
            assert_eq!(&net.nodes[k].segment(1).unwrap()[..4], &[9; 4], "node {k}");
            assert_eq!(net.nodes[k].segment(0), net.nodes[0].segment(0));
        }
    }

    #[test]
    fn a_restarted_node_recovers_then_serves() {
        let mut net = Net::new(2, &[0, 1]);
        net.write(0, 0, 0, 1);
        net.write(1, 1, 0, 2);
        net.pump();
        for k in 0..2 {
            net.nodes[k].view_change(1, &[0], None);
        }
        net.pump();
        let cfg = Config {
            node: 1,
            incarnation: 2,
            ..Config::default()
        };
        net.nodes[1] = test_node(cfg, 2, true, &[0, 1]);
        net.write(0, 1, 8, 5);
        net.pump();
        assert_eq!(net.nodes[1].begin(FAR), Err(CrError::NotServing));
        // A snapshot of an earlier admission, for the previous process, is not this one's.
        let mut stale = Vec::new();
        Writer::new(&mut stale)
            .u8(MAGIC)
            .u8(SEQS)
            .u64(1)
            .u64(1)
            .u16(0);
        net.nodes[1].handle_message(0, &stale);
        assert_eq!(net.nodes[1].counters().refused, 1);
        assert_eq!(net.nodes[1].phase(), Phase::Recovering);
        net.nodes[0].view_change(2, &[0, 1], Some(1));
        // A commit of node 0 right after the barrier: it follows the snapshot to node 1.
        net.write(0, 0, 40, 6);
        net.pump();
        assert!(net.events(1).contains(&SymEvent::Recovered));
        assert_eq!(net.nodes[1].phase(), Phase::Serving);
        assert_eq!(net.nodes[0].segment(0), net.nodes[1].segment(0));
        assert_eq!(net.nodes[0].segment(1), net.nodes[1].segment(1));
        assert_eq!(&net.nodes[1].segment(0).unwrap()[40..44], &[6; 4]);
        // Segment 1 is homed at node 1 again; its transactions run there.
        assert_eq!(net.nodes[0].home(1), Some(1));
        net.write(0, 1, 100, 4);
        net.pump();
        assert_eq!(&net.nodes[1].segment(1).unwrap()[100..104], &[4; 4]);
    }
}
