//! What sites say to each other, and what the access manager writes to its log. Little-endian,
//! read and written with `txcast_proto::codec`; a decoder refuses bad input with the rule it
//! broke and changes nothing.
//!
//! A packet: magic, version, the sender's site and incarnation, the incarnation of the
//! receiver it was written for (0: not known yet), then messages to its end, each a kind
//! byte and its fields. A packet of messages is taken only by the incarnation it was written
//! for, so nothing meant for a site's previous life (a link may deliver what it still held
//! for it) reaches the new one; a packet with no message is a hello, by which sites learn
//! each other's incarnations. Many messages share a packet: a site batches what it has
//! for a peer in one step (the coordinator's prepares and decisions, the participant's votes
//! and acknowledgements).
//!
//! Transactions (within one view, see [`crate::site`]):
//! - `PREPARE` (coordinator → participant): the view's ballot, the transaction, its
//!   timestamp, its write set and its history row. The participant locks, logs, then votes.
//! - `VOTE`: yes, or no with the cause.
//! - `DECIDE`: commit or abort.
//! - `ACK`: the participant applied the commit and its record is durable.
//! - `END`: every participant acknowledged; the participant may forget the transaction.
//! - `QUERY`: a participant asks the coordinator about a transaction (in doubt, or applied
//!   with no `END` yet).
//!
//! Views (the replication controller's membership, agreed by a majority of the sites):
//! - `JOIN`: a site outside every live view asks to be let in (with the ballot of the view
//!   its copy is synced to).
//! - `PROPOSE` / `PROMISE` / `NACK`: a proposer asks the sites of a new view to promise it
//!   (no smaller ballot taken after); a promise carries the promiser's synced ballot.
//! - `INSTALL` / `INSTALLED`: the new view, with the donor whose copy every other member
//!   takes.
//! - `VIEW`: the sender's view, told to a site that is not in it or is behind.
//! - `SNAPGET` / `SNAPDATA`: a member pulls the donor's snapshot in chunks.
//! - `SYNCED`: the sender's copy is durably synced to the view (asking for the receiver's
//!   `SYNCED` back when it has not heard it yet).
//!
//! Log records (framed by [`crate::log`]): `PREPARE` as above (a participant's), `COMMIT`
//! with the data (the coordinator's: its decision and its own redo), `COMMITTED` (a
//! participant's decision on a prepared transaction), `ABORTED`, `IMAGE` (a whole copy: a
//! compacted log starts with one, a member that took a snapshot writes one), `PROMISE` (the
//! ballot promised) and `SYNCED` (the ballot of the view the copy is synced to).

use crate::db::{HistoryRow, Key, Op, Write};
use crate::lock::Ts;
use crate::TxnId;
use thiserror::Error;
use txcast_proto::codec::{CodecError, Reader, Writer};

pub const MAGIC: u8 = 0xDC;
pub const VERSION: u8 = 2;
/// Magic, version, site, incarnation, receiver's incarnation.
pub const PACKET_HEADER: usize = 1 + 1 + 2 + 4 + 4;
/// Writes a transaction may have.
pub const WRITES_MAX: usize = 16;
/// A transaction id on the wire: site, incarnation, sequence.
pub const TXN_BYTES: usize = 2 + 4 + 8;
/// One write: key, op, value.
pub const WRITE_BYTES: usize = 4 + 1 + 8;

pub const PREPARE: u8 = 1;
pub const VOTE: u8 = 2;
pub const DECIDE: u8 = 3;
pub const ACK: u8 = 4;
pub const QUERY: u8 = 5;
pub const END: u8 = 6;
pub const JOIN: u8 = 7;
pub const PROPOSE: u8 = 8;
pub const PROMISE: u8 = 9;
pub const NACK: u8 = 10;
pub const INSTALL: u8 = 11;
pub const INSTALLED: u8 = 12;
pub const VIEW: u8 = 13;
pub const SNAPGET: u8 = 14;
pub const SNAPDATA: u8 = 15;
pub const SYNCED: u8 = 16;

/// Bytes of snapshot in one `SNAPDATA`.
pub const CHUNK: usize = 1024;
/// A member of a view on the wire: site, incarnation.
pub const MEMBER_BYTES: usize = 2 + 4;

pub const REC_PREPARE: u8 = 1;
pub const REC_COMMIT: u8 = 2;
pub const REC_COMMITTED: u8 = 3;
pub const REC_ABORTED: u8 = 4;
pub const REC_IMAGE: u8 = 6;
pub const REC_PROMISE: u8 = 8;
pub const REC_SYNCED: u8 = 9;

#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum MsgError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("not a Raid packet (magic {0:#x})")]
    Magic(u8),
    #[error("Raid packet version {0}, this site speaks {VERSION}")]
    Version(u8),
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("unknown write op {0}")]
    Op(u8),
    #[error("unknown vote {0}")]
    Vote(u8),
    #[error("a key of no relation: {0:#x}")]
    Key(u32),
    #[error("view members must be distinct sites below {max}, in order")]
    Members { max: u16 },
    #[error("a snapshot chunk of {len} bytes at {offset} of {total}")]
    Chunk { offset: u32, len: usize, total: u32 },
}

/// A participant's answer to a prepare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vote {
    Yes,
    /// It would have waited for an older transaction (wait-die).
    Conflict,
    /// Its table of prepared transactions is full.
    Busy,
    /// Its log failed: it takes no more work.
    Broken,
    /// A tuple of the write set does not exist there.
    BadKey,
}

impl Vote {
    fn code(self) -> u8 {
        match self {
            Vote::Yes => 0,
            Vote::Conflict => 1,
            Vote::Busy => 2,
            Vote::Broken => 3,
            Vote::BadKey => 4,
        }
    }
    fn from_code(c: u8) -> Result<Vote, MsgError> {
        Ok(match c {
            0 => Vote::Yes,
            1 => Vote::Conflict,
            2 => Vote::Busy,
            3 => Vote::Broken,
            4 => Vote::BadKey,
            c => return Err(MsgError::Vote(c)),
        })
    }
}

/// A write set: DebitCredit's three writes are kept inline, without an allocation.
pub type Writes = smallvec::SmallVec<[Write; 4]>;

/// A transaction's work: what a participant prepares and a log redoes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Work {
    pub txn: TxnId,
    pub ts: Ts,
    pub writes: Writes,
    pub row: Option<HistoryRow>,
}

fn put_txn(w: &mut Writer, t: TxnId) {
    w.u16(t.site).u32(t.incarnation).u64(t.seq);
}

fn get_txn(r: &mut Reader) -> Result<TxnId, MsgError> {
    Ok(TxnId {
        site: r.u16()?,
        incarnation: r.u32()?,
        seq: r.u64()?,
    })
}

impl Work {
    pub fn put(&self, w: &mut Writer) {
        put_txn(w, self.txn);
        w.u64(self.ts.time).u16(self.ts.site).u64(self.ts.seq);
        w.u16(self.writes.len() as u16);
        for wr in &self.writes {
            let (op, v) = match wr.op {
                Op::Set(v) => (0, v),
                Op::Add(v) => (1, v),
            };
            w.u32(wr.key.0).u8(op).i64(v);
        }
        match &self.row {
            None => {
                w.u8(0);
            }
            Some(r) => {
                w.u8(1)
                    .u32(r.account)
                    .u32(r.teller)
                    .u32(r.branch)
                    .i64(r.delta);
            }
        }
    }

    pub fn get(r: &mut Reader) -> Result<Work, MsgError> {
        let txn = get_txn(r)?;
        let ts = Ts {
            time: r.u64()?,
            site: r.u16()?,
            seq: r.u64()?,
        };
        let n = r.count(WRITES_MAX, WRITE_BYTES)?;
        let mut writes = Writes::with_capacity(n);
        for _ in 0..n {
            let key = Key(r.u32()?);
            if key.table().is_none() {
                return Err(MsgError::Key(key.0));
            }
            let op = match r.u8()? {
                0 => Op::Set(r.i64()?),
                1 => Op::Add(r.i64()?),
                o => return Err(MsgError::Op(o)),
            };
            writes.push(Write { key, op });
        }
        let row = match r.u8()? {
            0 => None,
            1 => Some(HistoryRow {
                txn,
                account: r.u32()?,
                teller: r.u32()?,
                branch: r.u32()?,
                delta: r.i64()?,
            }),
            o => return Err(MsgError::Op(o)),
        };
        Ok(Work {
            txn,
            ts,
            writes,
            row,
        })
    }
}

/// One message between sites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Prepare {
        ballot: u64,
        work: Work,
    },
    Vote {
        txn: TxnId,
        vote: Vote,
    },
    Decide {
        txn: TxnId,
        commit: bool,
    },
    Ack {
        txn: TxnId,
    },
    Query {
        txn: TxnId,
    },
    End {
        txn: TxnId,
    },
    Join {
        synced: u64,
    },
    Propose {
        ballot: u64,
        members: Vec<Member>,
    },
    Promise {
        ballot: u64,
        synced: u64,
    },
    Nack {
        ballot: u64,
        promised: u64,
    },
    Install {
        ballot: u64,
        donor: u16,
        /// The ballot the donor's copy is synced to.
        synced: u64,
        /// The donor's copy's fingerprint, when the donor installed before sending (a member
        /// whose copy has the same one takes no snapshot).
        fingerprint: Option<u64>,
        members: Vec<Member>,
    },
    Installed {
        ballot: u64,
    },
    View {
        ballot: u64,
        members: Vec<Member>,
    },
    SnapGet {
        ballot: u64,
        offset: u32,
    },
    SnapData {
        ballot: u64,
        offset: u32,
        total: u32,
        data: Vec<u8>,
    },
    Synced {
        ballot: u64,
        ask: bool,
    },
}

/// A site of a view, in the incarnation that took part in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub site: u16,
    pub incarnation: u32,
}

fn put_members(w: &mut Writer, members: &[Member]) {
    w.u16(members.len() as u16);
    for m in members {
        w.u16(m.site).u32(m.incarnation);
    }
}

fn get_members(r: &mut Reader) -> Result<Vec<Member>, MsgError> {
    let max = crate::site::SITES_MAX;
    let n = r.count(max as usize, MEMBER_BYTES)?;
    let mut out: Vec<Member> = Vec::with_capacity(n);
    for _ in 0..n {
        let m = Member {
            site: r.u16()?,
            incarnation: r.u32()?,
        };
        if m.site >= max || out.last().is_some_and(|l| l.site >= m.site) {
            return Err(MsgError::Members { max });
        }
        out.push(m);
    }
    Ok(out)
}

impl Msg {
    /// A `PREPARE` of `work` in the view of `ballot`, from a reference (the coordinator
    /// keeps its work).
    pub fn put_prepare(w: &mut Writer, ballot: u64, work: &Work) {
        w.u8(PREPARE).u64(ballot);
        work.put(w);
    }

    pub fn put(&self, w: &mut Writer) {
        match self {
            Msg::Prepare { ballot, work } => Msg::put_prepare(w, *ballot, work),
            Msg::Vote { txn, vote } => {
                w.u8(VOTE);
                put_txn(w, *txn);
                w.u8(vote.code());
            }
            Msg::Decide { txn, commit } => {
                w.u8(DECIDE);
                put_txn(w, *txn);
                w.u8(*commit as u8);
            }
            Msg::Ack { txn } => {
                w.u8(ACK);
                put_txn(w, *txn);
            }
            Msg::Query { txn } => {
                w.u8(QUERY);
                put_txn(w, *txn);
            }
            Msg::End { txn } => {
                w.u8(END);
                put_txn(w, *txn);
            }
            Msg::Join { synced } => {
                w.u8(JOIN).u64(*synced);
            }
            Msg::Propose { ballot, members } => {
                w.u8(PROPOSE).u64(*ballot);
                put_members(w, members);
            }
            Msg::Promise { ballot, synced } => {
                w.u8(PROMISE).u64(*ballot).u64(*synced);
            }
            Msg::Nack { ballot, promised } => {
                w.u8(NACK).u64(*ballot).u64(*promised);
            }
            Msg::Install {
                ballot,
                donor,
                synced,
                fingerprint,
                members,
            } => {
                w.u8(INSTALL).u64(*ballot).u16(*donor).u64(*synced);
                match fingerprint {
                    None => w.u8(0),
                    Some(f) => w.u8(1).u64(*f),
                };
                put_members(w, members);
            }
            Msg::Installed { ballot } => {
                w.u8(INSTALLED).u64(*ballot);
            }
            Msg::View { ballot, members } => {
                w.u8(VIEW).u64(*ballot);
                put_members(w, members);
            }
            Msg::SnapGet { ballot, offset } => {
                w.u8(SNAPGET).u64(*ballot).u32(*offset);
            }
            Msg::SnapData {
                ballot,
                offset,
                total,
                data,
            } => {
                w.u8(SNAPDATA)
                    .u64(*ballot)
                    .u32(*offset)
                    .u32(*total)
                    .u16(data.len() as u16)
                    .bytes(data);
            }
            Msg::Synced { ballot, ask } => {
                w.u8(SYNCED).u64(*ballot).u8(*ask as u8);
            }
        }
    }

    pub fn get(r: &mut Reader) -> Result<Msg, MsgError> {
        Ok(match r.u8()? {
            PREPARE => Msg::Prepare {
                ballot: r.u64()?,
                work: Work::get(r)?,
            },
            VOTE => Msg::Vote {
                txn: get_txn(r)?,
                vote: Vote::from_code(r.u8()?)?,
            },
            DECIDE => Msg::Decide {
                txn: get_txn(r)?,
                commit: match r.u8()? {
                    0 => false,
                    1 => true,
                    v => return Err(MsgError::Vote(v)),
                },
            },
            ACK => Msg::Ack { txn: get_txn(r)? },
            QUERY => Msg::Query { txn: get_txn(r)? },
            END => Msg::End { txn: get_txn(r)? },
            JOIN => Msg::Join { synced: r.u64()? },
            PROPOSE => Msg::Propose {
                ballot: r.u64()?,
                members: get_members(r)?,
            },
            PROMISE => Msg::Promise {
                ballot: r.u64()?,
                synced: r.u64()?,
            },
            NACK => Msg::Nack {
                ballot: r.u64()?,
                promised: r.u64()?,
            },
            INSTALL => Msg::Install {
                ballot: r.u64()?,
                donor: r.u16()?,
                synced: r.u64()?,
                fingerprint: match r.u8()? {
                    0 => None,
                    1 => Some(r.u64()?),
                    v => return Err(MsgError::Vote(v)),
                },
                members: get_members(r)?,
            },
            INSTALLED => Msg::Installed { ballot: r.u64()? },
            VIEW => Msg::View {
                ballot: r.u64()?,
                members: get_members(r)?,
            },
            SNAPGET => Msg::SnapGet {
                ballot: r.u64()?,
                offset: r.u32()?,
            },
            SNAPDATA => {
                let (ballot, offset, total) = (r.u64()?, r.u32()?, r.u32()?);
                let len = r.count(CHUNK, 1)?;
                let data = r.take(len)?.to_vec();
                let ok = (offset as usize).is_multiple_of(CHUNK)
                    && (offset as usize) < total as usize
                    && len == CHUNK.min(total as usize - offset as usize);
                if !ok {
                    return Err(MsgError::Chunk { offset, len, total });
                }
                Msg::SnapData {
                    ballot,
                    offset,
                    total,
                    data,
                }
            }
            SYNCED => Msg::Synced {
                ballot: r.u64()?,
                ask: match r.u8()? {
                    0 => false,
                    1 => true,
                    v => return Err(MsgError::Vote(v)),
                },
            },
            k => return Err(MsgError::Kind(k)),
        })
    }
}

/// A packet's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub site: u16,
    pub incarnation: u32,
    /// The receiver's incarnation the packet was written for (0: not known).
    pub to: u32,
}

pub fn put_header(w: &mut Writer, h: Header) {
    w.u8(MAGIC)
        .u8(VERSION)
        .u16(h.site)
        .u32(h.incarnation)
        .u32(h.to);
}

/// Decodes a whole packet: its header and every message, or the first error (then nothing of
/// it is used).
pub fn decode_packet(bytes: &[u8]) -> Result<(Header, Vec<Msg>), MsgError> {
    let mut msgs = Vec::new();
    let h = decode_packet_into(bytes, &mut msgs)?;
    Ok((h, msgs))
}

/// [`decode_packet`] into `msgs` (cleared first; a receiver reuses one vector for every
/// packet). On an error `msgs` holds nothing to act on: the packet is refused whole.
pub fn decode_packet_into(bytes: &[u8], msgs: &mut Vec<Msg>) -> Result<Header, MsgError> {
    msgs.clear();
    let r = decode_into(bytes, msgs);
    if r.is_err() {
        msgs.clear();
    }
    r
}

fn decode_into(bytes: &[u8], msgs: &mut Vec<Msg>) -> Result<Header, MsgError> {
    let mut r = Reader::new(bytes);
    let magic = r.u8()?;
    if magic != MAGIC {
        return Err(MsgError::Magic(magic));
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(MsgError::Version(version));
    }
    let h = Header {
        site: r.u16()?,
        incarnation: r.u32()?,
        to: r.u32()?,
    };
    while r.left() > 0 {
        msgs.push(Msg::get(&mut r)?);
    }
    Ok(h)
}

fn put_work_record(w: &mut Writer, commit: bool, work: &Work) {
    w.u8(if commit { REC_COMMIT } else { REC_PREPARE });
    work.put(w);
}

/// One record of the access manager's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A participant prepared (its vote is yes once this is durable).
    Prepare(Work),
    /// A coordinator decided commit; its own site's redo.
    Commit(Work),
    /// A participant learned commit.
    Committed(TxnId),
    /// A participant learned abort.
    Aborted(TxnId),
    /// The copy as a whole ([`crate::Db::encode_image`]): it replaces what the records
    /// before it built, and settles every prepare before it.
    Image(Vec<u8>),
    /// The site promised this ballot: it takes part in no view of a smaller one.
    Promise(u64),
    /// The copy is synced to the view of this ballot.
    Synced(u64),
}

impl Record {
    /// A `PREPARE` (`commit` false) or `COMMIT` record of `work`, from a reference.
    pub fn encode_work(commit: bool, work: &Work, out: &mut Vec<u8>) {
        put_work_record(&mut Writer::new(out), commit, work);
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        match self {
            Record::Prepare(work) => put_work_record(&mut w, false, work),
            Record::Commit(work) => put_work_record(&mut w, true, work),
            Record::Committed(t) => {
                w.u8(REC_COMMITTED);
                put_txn(&mut w, *t);
            }
            Record::Aborted(t) => {
                w.u8(REC_ABORTED);
                put_txn(&mut w, *t);
            }
            Record::Image(b) => {
                w.u8(REC_IMAGE).bytes(b);
            }
            Record::Promise(b) => {
                w.u8(REC_PROMISE).u64(*b);
            }
            Record::Synced(b) => {
                w.u8(REC_SYNCED).u64(*b);
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, MsgError> {
        let mut r = Reader::new(bytes);
        let rec = match r.u8()? {
            REC_PREPARE => Record::Prepare(Work::get(&mut r)?),
            REC_COMMIT => Record::Commit(Work::get(&mut r)?),
            REC_COMMITTED => Record::Committed(get_txn(&mut r)?),
            REC_ABORTED => Record::Aborted(get_txn(&mut r)?),
            REC_IMAGE => Record::Image(r.take(r.left())?.to_vec()),
            REC_PROMISE => Record::Promise(r.u64()?),
            REC_SYNCED => Record::Synced(r.u64()?),
            k => return Err(MsgError::Kind(k)),
        };
        r.finish()?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work() -> Work {
        let txn = TxnId {
            site: 2,
            incarnation: 7,
            seq: 99,
        };
        Work {
            txn,
            ts: Ts {
                time: 5,
                site: 2,
                seq: 98,
            },
            writes: smallvec::smallvec![
                Write {
                    key: Key::account(4),
                    op: Op::Set(-3),
                },
                Write {
                    key: Key::teller(1),
                    op: Op::Add(12),
                },
            ],
            row: Some(HistoryRow {
                txn,
                account: 4,
                teller: 1,
                branch: 0,
                delta: 12,
            }),
        }
    }

    #[test]
    fn packets_and_records_round_trip() {
        let members = vec![
            Member {
                site: 0,
                incarnation: 3,
            },
            Member {
                site: 2,
                incarnation: 1,
            },
        ];
        let msgs = vec![
            Msg::Prepare {
                ballot: 9,
                work: work(),
            },
            Msg::Vote {
                txn: work().txn,
                vote: Vote::Conflict,
            },
            Msg::Decide {
                txn: work().txn,
                commit: true,
            },
            Msg::Ack { txn: work().txn },
            Msg::Query { txn: work().txn },
            Msg::End { txn: work().txn },
            Msg::Join { synced: 4 },
            Msg::Propose {
                ballot: 5,
                members: members.clone(),
            },
            Msg::Promise {
                ballot: 5,
                synced: 4,
            },
            Msg::Nack {
                ballot: 5,
                promised: 6,
            },
            Msg::Install {
                ballot: 5,
                donor: 2,
                synced: 4,
                fingerprint: Some(77),
                members: members.clone(),
            },
            Msg::Installed { ballot: 5 },
            Msg::View {
                ballot: 5,
                members: members.clone(),
            },
            Msg::SnapGet {
                ballot: 5,
                offset: 2048,
            },
            Msg::SnapData {
                ballot: 5,
                offset: 2048,
                total: 2051,
                data: vec![7, 8, 9],
            },
            Msg::Synced {
                ballot: 5,
                ask: true,
            },
        ];
        let mut b = Vec::new();
        let mut w = Writer::new(&mut b);
        put_header(
            &mut w,
            Header {
                site: 1,
                incarnation: 3,
                to: 4,
            },
        );
        for m in &msgs {
            m.put(&mut w);
        }
        let (h, got) = decode_packet(&b).unwrap();
        assert_eq!(h.site, 1);
        assert_eq!(got, msgs);
        // A truncation is refused, or (cut between messages) is the messages before the cut.
        for cut in 0..b.len() {
            if let Ok((_, got)) = decode_packet(&b[..cut]) {
                assert!(
                    got.len() < msgs.len() && got[..] == msgs[..got.len()],
                    "cut at {cut}"
                );
            }
        }
        let mut bad = b.clone();
        bad[0] = 0;
        assert_eq!(decode_packet(&bad), Err(MsgError::Magic(0)));

        for rec in [
            Record::Prepare(work()),
            Record::Commit(work()),
            Record::Committed(work().txn),
            Record::Aborted(work().txn),
            Record::Image(vec![1, 2, 3]),
            Record::Promise(5),
            Record::Synced(4),
        ] {
            let mut b = Vec::new();
            rec.encode(&mut b);
            assert_eq!(Record::decode(&b).unwrap(), rec);
            b.push(0);
            // An image is every byte after its kind (the database checks its length).
            assert_eq!(
                Record::decode(&b).is_err(),
                !matches!(rec, Record::Image(_)),
                "{rec:?}"
            );
        }
    }

    #[test]
    fn views_and_chunks_out_of_rule_are_refused() {
        let decode = |m: &Msg| {
            let mut b = Vec::new();
            m.put(&mut Writer::new(&mut b));
            Msg::get(&mut Reader::new(&b))
        };
        let m = |site, incarnation| Member { site, incarnation };
        // Members must be distinct sites in order, below SITES_MAX.
        for members in [
            vec![m(2, 1), m(1, 1)],
            vec![m(1, 1), m(1, 2)],
            vec![m(crate::site::SITES_MAX, 1)],
        ] {
            let v = Msg::View { ballot: 3, members };
            assert!(matches!(decode(&v), Err(MsgError::Members { .. })), "{v:?}");
        }
        // A chunk at a multiple of CHUNK, inside the snapshot, and of the length left.
        let chunk = |offset: u32, total: u32, len: usize| Msg::SnapData {
            ballot: 1,
            offset,
            total,
            data: vec![0; len],
        };
        assert!(decode(&chunk(0, 10, 10)).is_ok());
        assert!(decode(&chunk(CHUNK as u32, CHUNK as u32 + 1, 1)).is_ok());
        for bad in [
            chunk(1, 10, 9),
            chunk(0, 10, 9),
            chunk(CHUNK as u32, CHUNK as u32, 0),
            chunk(0, 5000, CHUNK - 1),
        ] {
            assert!(
                matches!(decode(&bad), Err(MsgError::Chunk { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x1234_5678;
        for len in 0..400usize {
            let mut b = vec![MAGIC, VERSION];
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(x as u8);
            }
            let _ = decode_packet(&b);
            let _ = Record::decode(&b[2..]);
        }
    }
}
