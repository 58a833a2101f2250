//! CRMem's messages between nodes. Each travels as one control message over a reliable,
//! in-order channel (a module message on the link). Little-endian; every decoder checks
//! lengths and refuses what does not parse with the rule it broke.
//!
//! - `WRITE` (a part of a remote atomic write, §3.4): origin's commit sequence number, part
//!   index and count, then ranges `(segment u16, offset u32, len u32, bytes)`. The backup
//!   applies a commit only when its last part has come.
//! - `ACK`: the commit sequence number the backup applied.
//! - `SNAP_REQ`: a restarted node asks a live replica for its segments, naming the request
//!   (a nonce: pieces of a snapshot sent to an earlier request, or to the node's previous
//!   incarnation and retransmitted by the link to this one, are not taken for this one's).
//! - `DROPPED`: the primary tells a backup it stopped counting on it (it took it for dead);
//!   the backup recovers through a snapshot before it counts again.
//! - `CATCH_UP`: a backup whose primary died asks the successor for the commits it lacks,
//!   naming the request (a nonce, as `SNAP_REQ`), the last commit it holds and the primary
//!   it followed.
//! - `RESUME`: the successor's answer: undo the commits above `from` (the old primary's
//!   that the successor never had), then apply the WRITE parts that follow up to `to`.
//! - `DURABLE`: the primary tells its backups that every backup holds its commits up to
//!   `seq` (now and then): they drop those from the tail they keep for a catch-up.
//! - `SNAP`: a piece of one segment (`segment, offset, bytes`) for request `nonce`, flagged
//!   last on the final piece of the final segment, with the commit sequence number the
//!   snapshot covers.
//! - `BUNDLE` (either configuration): several messages to one node in one control message,
//!   each as `len u16, bytes`, handled in order as if each had come alone. A node bundles
//!   what it queued for a peer between two drains (commits shipped while the engine was busy,
//!   the acknowledgements of a bundle's commits); the module, link and packet costs are then
//!   paid once a bundle instead of once a message.

use std::collections::VecDeque;
use thiserror::Error;
use txcast_proto::codec::{CodecError, Reader, Writer};

pub const MAGIC: u8 = 0xC7;
pub const WRITE: u8 = 1;
pub const ACK: u8 = 2;
pub const SNAP_REQ: u8 = 3;
pub const SNAP: u8 = 4;
pub const DROPPED: u8 = 5;
pub const CATCH_UP: u8 = 6;
pub const RESUME: u8 = 7;
pub const DURABLE: u8 = 8;
/// Outside both configurations' kinds (the mirror's 1..=8, the symmetric's 16..=25).
pub const BUNDLE: u8 = 63;

/// A WRITE part's fixed fields: magic, kind, seq, part, parts, ranges.
pub const WRITE_HEADER: usize = 2 + 8 + 2 + 2 + 2;
/// One range's fixed fields: segment, offset, length.
pub const RANGE_HEADER: usize = 2 + 4 + 4;
/// A SNAP piece's fixed fields: magic, kind, last, nonce, seq, segment, offset.
pub const SNAP_HEADER: usize = 2 + 1 + 8 + 8 + 2 + 4;
/// A bundle's fixed fields: magic, kind.
pub const BUNDLE_HEADER: usize = 2;
/// The length before each message in a bundle.
pub const BUNDLE_ITEM_HEADER: usize = 2;
/// Bytes of a bundle at most by default: a module control message's body at most, as a
/// WRITE part's.
pub const BUNDLE_BYTES: usize = 1024;

/// Why a message was refused.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum MsgError {
    #[error("message shorter than its fixed fields")]
    Short,
    #[error("not a CRMem message (magic)")]
    Magic,
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("a range runs past the end of the message")]
    RangeTruncated,
    #[error("bytes after the last range")]
    Trailing,
    #[error("part {part} of {parts}: not a valid part index")]
    Part { part: u16, parts: u16 },
    #[error("resume from commit {from} to {to}: the first above the second")]
    Order { from: u64, to: u64 },
    #[error("a bundle is empty, runs past its end, or holds a bundle or a runt")]
    Bundle,
}

/// A decoded message, borrowing the datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg<'a> {
    Write(WritePart<'a>),
    Ack {
        seq: u64,
    },
    SnapReq {
        nonce: u64,
    },
    Snap(SnapPiece<'a>),
    Dropped,
    /// A backup whose primary (`primary`) died asks the successor for what it lacks: it
    /// holds that primary's commits up to `seq`.
    CatchUp {
        nonce: u64,
        seq: u64,
        primary: u16,
    },
    /// The successor's answer: undo the commits above `from`, then apply the WRITE parts that
    /// follow, up to `to`; a backup at `to` again.
    Resume {
        nonce: u64,
        from: u64,
        to: u64,
    },
    /// The primary's word that every backup holds its commits up to `seq`: a backup's tail
    /// need not keep them.
    Durable {
        seq: u64,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub struct WritePart<'a> {
    pub seq: u64,
    pub part: u16,
    pub parts: u16,
    count: u16,
    body: &'a [u8],
}

/// One range of a WRITE part.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Range<'a> {
    pub segment: u16,
    pub offset: u32,
    pub bytes: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
pub struct SnapPiece<'a> {
    pub last: bool,
    pub nonce: u64,
    pub seq: u64,
    pub segment: u16,
    pub offset: u32,
    pub bytes: &'a [u8],
}

impl From<CodecError> for MsgError {
    fn from(e: CodecError) -> MsgError {
        match e {
            CodecError::Short { .. } | CodecError::Count { .. } => MsgError::Short,
            CodecError::Trailing(_) => MsgError::Trailing,
        }
    }
}

impl<'a> Msg<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Msg<'a>, MsgError> {
        let mut r = Reader::new(b);
        r.need(2)?;
        if r.u8()? != MAGIC {
            return Err(MsgError::Magic);
        }
        // A message of fixed size with more bytes is refused as `Short`, like one with fewer.
        let fixed = |r: Reader<'_>| r.finish().map_err(|_| MsgError::Short);
        match r.u8()? {
            WRITE => {
                let seq = r.u64()?;
                let (part, parts, count) = (r.u16()?, r.u16()?, r.u16()?);
                if parts == 0 || part >= parts {
                    return Err(MsgError::Part { part, parts });
                }
                let w = WritePart {
                    seq,
                    part,
                    parts,
                    count,
                    body: r.rest(),
                };
                // Walk the ranges once now, so that `ranges` cannot fail later.
                let mut body = Reader::new(w.body);
                for _ in 0..w.count {
                    read_range(&mut body).map_err(|_| MsgError::RangeTruncated)?;
                }
                body.finish()?;
                Ok(Msg::Write(w))
            }
            ACK => {
                let seq = r.u64()?;
                fixed(r)?;
                Ok(Msg::Ack { seq })
            }
            SNAP_REQ => {
                let nonce = r.u64()?;
                fixed(r)?;
                Ok(Msg::SnapReq { nonce })
            }
            SNAP => Ok(Msg::Snap(SnapPiece {
                last: r.u8()? != 0,
                nonce: r.u64()?,
                seq: r.u64()?,
                segment: r.u16()?,
                offset: r.u32()?,
                bytes: r.rest(),
            })),
            DROPPED => {
                fixed(r)?;
                Ok(Msg::Dropped)
            }
            CATCH_UP => {
                let (nonce, seq, primary) = (r.u64()?, r.u64()?, r.u16()?);
                fixed(r)?;
                Ok(Msg::CatchUp {
                    nonce,
                    seq,
                    primary,
                })
            }
            DURABLE => {
                let seq = r.u64()?;
                fixed(r)?;
                Ok(Msg::Durable { seq })
            }
            RESUME => {
                let (nonce, from, to) = (r.u64()?, r.u64()?, r.u64()?);
                fixed(r)?;
                if from > to {
                    return Err(MsgError::Order { from, to });
                }
                Ok(Msg::Resume { nonce, from, to })
            }
            k => Err(MsgError::Kind(k)),
        }
    }
}

/// The messages of a BUNDLE, in order (framing checked by [`unbundle`]).
#[derive(Clone, Debug)]
pub struct Bundle<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Bundle<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.rest.split_first_chunk::<BUNDLE_ITEM_HEADER>()?;
        let len = u16::from_le_bytes(*len) as usize;
        let (m, rest) = rest.split_at_checked(len)?;
        self.rest = rest;
        Some(m)
    }
}

/// `None` if `b` is not a BUNDLE; else its messages, once the framing is checked whole
/// (every length within the bundle, at least one message, each at least a magic and a kind,
/// none of them a bundle), so that a broken bundle is refused before any of its messages is
/// handled.
pub fn unbundle(b: &[u8]) -> Option<Result<Bundle<'_>, MsgError>> {
    if b.len() < BUNDLE_HEADER || b[0] != MAGIC || b[1] != BUNDLE {
        return None;
    }
    let all = Bundle {
        rest: &b[BUNDLE_HEADER..],
    };
    let (mut n, mut used) = (0usize, BUNDLE_HEADER);
    for m in all.clone() {
        if m.len() < 2 || m[1] == BUNDLE {
            return Some(Err(MsgError::Bundle));
        }
        n += 1;
        used += BUNDLE_ITEM_HEADER + m.len();
    }
    if n == 0 || used != b.len() {
        return Some(Err(MsgError::Bundle));
    }
    Some(Ok(all))
}

/// Queues an ACK of `seq` for `to`, or raises the one queued last if it is an ACK for `to`
/// (acknowledgements are cumulative: a bundle's commits get one).
pub fn queue_ack(out: &mut VecDeque<(u16, Vec<u8>)>, to: u16, seq: u64) {
    match out.back_mut() {
        Some((k, m)) if *k == to && m.len() == 10 && m[0] == MAGIC && m[1] == ACK => {
            m[2..].copy_from_slice(&seq.to_le_bytes())
        }
        _ => {
            let mut m = Vec::with_capacity(10);
            ack(seq, &mut m);
            out.push_back((to, m));
        }
    }
}

/// Moves the messages queued in `out` to `ready`, those to one node in bundles of at most
/// `max` bytes (a message alone stays as it is). Each node's messages keep their order;
/// messages to `alone` (a pseudo-node that reads them one by one), and any longer than a
/// quarter of `max`, go as they are: the link packs such messages into its packets as tightly
/// as their bundle would go, and bundles of two or three of them leave most of a packet
/// empty behind each (TpcB's 406-byte WRITEs: two a bundle, one bundle a packet, against
/// three a packet alone). Returns how many bundles it made, and of how many messages.
#[must_use]
pub fn bundle_queue(
    out: &mut VecDeque<(u16, Vec<u8>)>,
    ready: &mut VecDeque<(u16, Vec<u8>)>,
    max: usize,
    alone: Option<u16>,
) -> (u64, u64) {
    // Per node with something open: its first message, the bundle once a second came, and
    // how many it holds.
    struct Open {
        to: u16,
        first: Vec<u8>,
        bundle: Option<Vec<u8>>,
        count: u64,
    }
    if out.len() < 2 {
        // Nothing to share a bundle with (the usual case one commit at a time).
        ready.extend(out.drain(..));
        return (0, 0);
    }
    let (mut bundles, mut bundled) = (0u64, 0u64);
    let mut close = |ready: &mut VecDeque<(u16, Vec<u8>)>, o: Open| {
        if o.count > 1 {
            bundles += 1;
            bundled += o.count;
        }
        ready.push_back((o.to, o.bundle.unwrap_or(o.first)));
    };
    let mut open: Vec<Open> = Vec::new();
    for (to, m) in out.drain(..) {
        let at = open.iter().position(|o| o.to == to);
        let item = BUNDLE_ITEM_HEADER + m.len();
        if Some(to) == alone || 4 * m.len() > max || BUNDLE_HEADER + item > max {
            if let Some(i) = at {
                close(ready, open.swap_remove(i));
            }
            ready.push_back((to, m));
            continue;
        }
        let fresh = |m| Open {
            to,
            first: m,
            bundle: None,
            count: 1,
        };
        let Some(i) = at else {
            open.push(fresh(m));
            continue;
        };
        let o = &mut open[i];
        let used = match &o.bundle {
            Some(b) => b.len(),
            None => BUNDLE_HEADER + BUNDLE_ITEM_HEADER + o.first.len(),
        };
        if used + item > max {
            let full = std::mem::replace(o, fresh(m));
            close(ready, full);
            continue;
        }
        let first = &o.first;
        let b = o.bundle.get_or_insert_with(|| {
            let mut b = Vec::with_capacity(max);
            b.extend_from_slice(&[MAGIC, BUNDLE]);
            b.extend_from_slice(&(first.len() as u16).to_le_bytes());
            b.extend_from_slice(first);
            b
        });
        b.extend_from_slice(&(m.len() as u16).to_le_bytes());
        b.extend_from_slice(&m);
        o.count += 1;
    }
    for o in open {
        close(ready, o);
    }
    (bundles, bundled)
}

/// One range: segment, offset, length, bytes.
fn read_range<'a>(r: &mut Reader<'a>) -> Result<Range<'a>, CodecError> {
    let segment = r.u16()?;
    let offset = r.u32()?;
    let len = r.u32()? as usize;
    Ok(Range {
        segment,
        offset,
        bytes: r.take(len)?,
    })
}

impl<'a> WritePart<'a> {
    /// The part's ranges (checked by `parse`).
    pub fn ranges(&self) -> impl Iterator<Item = Range<'a>> + 'a {
        let mut r = Reader::new(self.body);
        (0..self.count).map_while(move |_| read_range(&mut r).ok())
    }
}

/// Builds a WRITE part into `out`: call [`WriteBuilder::range`] for each range, then
/// [`WriteBuilder::finish`].
pub struct WriteBuilder<'o> {
    out: &'o mut Vec<u8>,
    count: u16,
}

/// Where the range count sits in a WRITE part.
const COUNT_AT: usize = WRITE_HEADER - 2;

impl<'o> WriteBuilder<'o> {
    pub fn new(out: &'o mut Vec<u8>, seq: u64, part: u16, parts: u16) -> WriteBuilder<'o> {
        out.clear();
        Writer::new(out)
            .u8(MAGIC)
            .u8(WRITE)
            .u64(seq)
            .u16(part)
            .u16(parts)
            .u16(0);
        WriteBuilder { out, count: 0 }
    }

    pub fn range(&mut self, segment: u16, offset: u32, bytes: &[u8]) {
        Writer::new(self.out)
            .u16(segment)
            .u32(offset)
            .u32(bytes.len() as u32)
            .bytes(bytes);
        self.count += 1;
    }

    pub fn finish(self) {
        Writer::new(self.out).set_u16(COUNT_AT, self.count);
    }
}

pub fn ack(seq: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(ACK).u64(seq);
}

pub fn dropped(out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(DROPPED);
}

pub fn catch_up(nonce: u64, seq: u64, primary: u16, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out)
        .u8(MAGIC)
        .u8(CATCH_UP)
        .u64(nonce)
        .u64(seq)
        .u16(primary);
}

pub fn durable(seq: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(DURABLE).u64(seq);
}

pub fn resume(nonce: u64, from: u64, to: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out)
        .u8(MAGIC)
        .u8(RESUME)
        .u64(nonce)
        .u64(from)
        .u64(to);
}

pub fn snap_req(nonce: u64, out: &mut Vec<u8>) {
    out.clear();
    Writer::new(out).u8(MAGIC).u8(SNAP_REQ).u64(nonce);
}

/// A SNAP piece (see the module comment).
pub struct SnapFields {
    pub last: bool,
    pub nonce: u64,
    pub seq: u64,
    pub segment: u16,
    pub offset: u32,
}

pub fn snap(f: SnapFields, bytes: &[u8], out: &mut Vec<u8>) {
    let SnapFields {
        last,
        nonce,
        seq,
        segment,
        offset,
    } = f;
    out.clear();
    Writer::new(out)
        .u8(MAGIC)
        .u8(SNAP)
        .u8(u8::from(last))
        .u64(nonce)
        .u64(seq)
        .u16(segment)
        .u32(offset)
        .bytes(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_parts_round_trip_and_bad_ones_are_refused() {
        let mut out = Vec::new();
        let mut w = WriteBuilder::new(&mut out, 7, 1, 3);
        w.range(2, 100, b"abc");
        w.range(0, 0, b"");
        w.finish();
        let Ok(Msg::Write(p)) = Msg::parse(&out) else {
            panic!("no parse");
        };
        assert_eq!((p.seq, p.part, p.parts), (7, 1, 3));
        let r: Vec<_> = p.ranges().collect();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].segment, r[0].offset, r[0].bytes),
            (2, 100, &b"abc"[..])
        );
        assert_eq!(r[1].bytes, b"");
        // Every truncation is refused, never a panic.
        for n in 0..out.len() {
            assert!(Msg::parse(&out[..n]).is_err(), "{n}");
        }
        let mut long = out.clone();
        long.push(0);
        assert_eq!(Msg::parse(&long), Err(MsgError::Trailing));
        let mut bad = out.clone();
        bad[10..12].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(Msg::parse(&bad), Err(MsgError::Part { part: 3, parts: 3 }));
        bad = out.clone();
        bad[0] = 0;
        assert_eq!(Msg::parse(&bad), Err(MsgError::Magic));
        bad = out;
        bad[1] = 99;
        assert_eq!(Msg::parse(&bad), Err(MsgError::Kind(99)));
    }

    #[test]
    fn ack_and_snapshot_round_trip() {
        let mut out = Vec::new();
        ack(42, &mut out);
        assert_eq!(Msg::parse(&out), Ok(Msg::Ack { seq: 42 }));
        out.pop();
        assert_eq!(Msg::parse(&out), Err(MsgError::Short));
        let f = SnapFields {
            last: true,
            nonce: 5,
            seq: 9,
            segment: 3,
            offset: 4096,
        };
        snap(f, b"xy", &mut out);
        let Ok(Msg::Snap(s)) = Msg::parse(&out) else {
            panic!("no parse");
        };
        assert_eq!(s.nonce, 5);
        assert_eq!(
            (s.last, s.seq, s.segment, s.offset, s.bytes),
            (true, 9, 3, 4096, &b"xy"[..])
        );
        snap_req(77, &mut out);
        assert_eq!(Msg::parse(&out), Ok(Msg::SnapReq { nonce: 77 }));
    }

    fn queued(items: &[(u16, &[u8])]) -> VecDeque<(u16, Vec<u8>)> {
        items.iter().map(|&(k, m)| (k, m.to_vec())).collect()
    }

    /// `ready` unbundled again: each node's messages in the order they came out.
    fn per_node(ready: &VecDeque<(u16, Vec<u8>)>, k: u16) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for (to, m) in ready.iter().filter(|(to, _)| *to == k) {
            assert_eq!(*to, k);
            match unbundle(m) {
                None => v.push(m.clone()),
                Some(b) => v.extend(b.expect("a bundle built here parses").map(<[u8]>::to_vec)),
            }
        }
        v
    }

    #[test]
    fn bundles_keep_each_nodes_order_within_their_bound() {
        let a = [MAGIC, ACK, 1, 0, 0, 0, 0, 0, 0, 0];
        let mut out = queued(&[
            (1, &a[..]),
            (2, &[1, 2, 3]),
            (1, &[7; 14]),
            (9, &[4, 4]),
            (1, &[5, 5]),
            (2, &[6, 6]),
            (1, &[8; 16]),
            (9, &[8]),
            (3, &[9]),
            (1, &[6; 16]),
        ]);
        let mut ready = VecDeque::new();
        // Node 1's first four and node 2's two.
        assert_eq!(bundle_queue(&mut out, &mut ready, 64, Some(9)), (2, 6));
        assert!(out.is_empty());
        assert_eq!(
            per_node(&ready, 1),
            vec![
                a.to_vec(),
                vec![7; 14],
                vec![5, 5],
                vec![8; 16],
                vec![6; 16]
            ]
        );
        assert_eq!(per_node(&ready, 2), vec![vec![1, 2, 3], vec![6, 6]]);
        assert_eq!(per_node(&ready, 3), vec![vec![9]]);
        // Node 9's messages go alone, in order.
        let nine: Vec<_> = ready.iter().filter(|(k, _)| *k == 9).collect();
        assert_eq!(nine.len(), 2);
        assert!(nine.iter().all(|(_, m)| unbundle(m).is_none()));
        // Within the bound: node 1's first four make a bundle of 52 bytes, the fifth (18 more)
        // goes on its own; a message left alone stays as it was.
        for (_, m) in &ready {
            assert!(m.len() <= 64, "{}", m.len());
        }
        assert_eq!(ready.iter().filter(|(k, _)| *k == 1).count(), 2);
        assert_eq!(ready.iter().find(|(k, _)| *k == 3).unwrap().1, vec![9]);
        // A message longer than a quarter of the bound goes alone, after what was queued
        // before it.
        let mut out = queued(&[(1, &[1]), (1, &[2; 17]), (1, &[3])]);
        let mut ready = VecDeque::new();
        assert_eq!(bundle_queue(&mut out, &mut ready, 64, None), (0, 0));
        let got: Vec<_> = ready.iter().map(|(_, m)| m.clone()).collect();
        assert_eq!(got, vec![vec![1], vec![2; 17], vec![3]]);
    }

    #[test]
    fn broken_bundles_are_refused_whole() {
        let mut out = queued(&[
            (1, &[MAGIC, ACK, 0, 0, 0, 0, 0, 0, 0, 0]),
            (1, &[MAGIC, DROPPED]),
        ]);
        let mut ready = VecDeque::new();
        assert_eq!(bundle_queue(&mut out, &mut ready, 1024, None), (1, 2));
        let b = ready.pop_front().unwrap().1;
        assert_eq!(unbundle(&b).unwrap().unwrap().count(), 2);
        // Cut anywhere inside an item, or with a byte more: refused.
        for n in 2..b.len() {
            if n == BUNDLE_HEADER + BUNDLE_ITEM_HEADER + 10 {
                continue; // a whole first message: a valid bundle of one
            }
            assert_eq!(
                unbundle(&b[..n]).unwrap().err(),
                Some(MsgError::Bundle),
                "{n}"
            );
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(unbundle(&long).unwrap().err(), Some(MsgError::Bundle));
        // Empty, or holding a bundle.
        assert_eq!(
            unbundle(&[MAGIC, BUNDLE]).unwrap().err(),
            Some(MsgError::Bundle)
        );
        let mut nested = vec![MAGIC, BUNDLE];
        nested.extend_from_slice(&(b.len() as u16).to_le_bytes());
        nested.extend_from_slice(&b);
        assert_eq!(unbundle(&nested).unwrap().err(), Some(MsgError::Bundle));
        // A message shorter than a magic and a kind.
        let runt = [MAGIC, BUNDLE, 1, 0, MAGIC, 2, 0, MAGIC, DROPPED];
        assert_eq!(unbundle(&runt).unwrap().err(), Some(MsgError::Bundle));
        // Not a bundle at all.
        assert!(unbundle(&[MAGIC, ACK]).is_none());
        assert!(unbundle(&[MAGIC]).is_none());
    }

    #[test]
    fn an_ack_still_queued_is_raised_not_repeated() {
        let mut out = VecDeque::new();
        queue_ack(&mut out, 1, 5);
        queue_ack(&mut out, 1, 6);
        assert_eq!(out.len(), 1);
        assert_eq!(Msg::parse(&out[0].1), Ok(Msg::Ack { seq: 6 }));
        // Another node's, or another message in between: a new one.
        queue_ack(&mut out, 2, 7);
        out.push_back((1, vec![MAGIC, DROPPED]));
        queue_ack(&mut out, 1, 8);
        assert_eq!(out.len(), 4);
        assert_eq!(Msg::parse(&out[3].1), Ok(Msg::Ack { seq: 8 }));
    }
}
