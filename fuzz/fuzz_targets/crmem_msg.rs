//! CRMem's messages between nodes: `msg::Msg::parse` (the mirror configuration's WRITE, ACK,
//! SNAP_REQ, SNAP, DROPPED) and `symmetric::SymMsg::parse` (SWRITE, RELAY, LOCK, GRANT,
//! RELEASE, FLUSH, SEQS, RECOVER, RECALL, RETURN, and ACK/SNAP) on arbitrary bytes, and a WRITE part built from the
//! same bytes read as fields.
//!
//! Properties checked besides "never panics":
//! - an accepted `Msg` re-encodes with msg.rs's encoders to the bytes it came from (but for a
//!   SNAP's `last` flag, any non-zero byte of which reads as true), and that encoding parses
//!   back to the same message;
//! - an accepted WRITE part's ranges tile its body, and cutting its last byte is refused;
//! - an accepted `SymMsg` has the length its layout (symmetric.rs's comments) gives, its
//!   SWRITE/RELAY carries a WRITE part with the same numbers, its counts are within
//!   `LOCKS_PER_MESSAGE` and `NODES_MAX`; written again with that layout it gives back the
//!   bytes (the LOCK's `write` flag and SNAP's `last` flag normalized) and parses back equal;
//! - a WRITE part built with `WriteBuilder` from fuzzer-chosen ranges parses back to exactly
//!   those ranges;
//! - an accepted BUNDLE's messages tile its body, none is a bundle, and bundling them again
//!   (`bundle_queue`, one node) gives back the same bytes when each may share a bundle; fuzzer-cut messages bundled to two
//!   nodes come back out in each node's order, every bundle within its bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;
use txcast_crmem::msg::{
    self, Msg, SnapFields, WriteBuilder, MAGIC, RANGE_HEADER, SNAP_HEADER, WRITE_HEADER,
};
use txcast_crmem::symmetric::{
    Deps, SymMsg, FLUSH, GRANT, LOCK, NODES_MAX, RECALL, RECOVER, RELAY, RELEASE, RETURN, SEQS,
    SWRITE,
};
use txcast_crmem::LOCKS_PER_MESSAGE;

/// A LOCK message's fixed fields: magic, kind, view, txn, req, part, parts, segment, write,
/// count.
const LOCK_HEADER: usize = 2 + 8 + 8 + 4 + 2 + 2 + 2 + 1 + 2;

fn encode(m: &Msg<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    match m {
        Msg::Write(w) => {
            let mut b = WriteBuilder::new(&mut out, w.seq, w.part, w.parts);
            for r in w.ranges() {
                b.range(r.segment, r.offset, r.bytes);
            }
            b.finish();
        }
        Msg::Ack { seq } => msg::ack(*seq, &mut out),
        Msg::SnapReq { nonce } => msg::snap_req(*nonce, &mut out),
        Msg::Snap(s) => msg::snap(
            SnapFields {
                last: s.last,
                nonce: s.nonce,
                seq: s.seq,
                segment: s.segment,
                offset: s.offset,
            },
            s.bytes,
            &mut out,
        ),
        Msg::Dropped => msg::dropped(&mut out),
        Msg::CatchUp {
            nonce,
            seq,
            primary,
        } => msg::catch_up(*nonce, *seq, *primary, &mut out),
        Msg::Resume { nonce, from, to } => msg::resume(*nonce, *from, *to, &mut out),
        Msg::Durable { seq } => msg::durable(*seq, &mut out),
    }
    out
}

/// Dependencies as symmetric.rs lays them out: `count u8, (origin u16, seq u64)*`.
fn deps_encode(deps: &Deps<'_>, out: &mut Vec<u8>) {
    out.push(deps.len() as u8);
    for (o, s) in deps.iter() {
        out.extend_from_slice(&o.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
    }
}

/// A symmetric message written with the layouts of symmetric.rs's comments.
fn sym_encode(m: &SymMsg<'_>) -> Vec<u8> {
    let mut out = vec![MAGIC];
    match m {
        SymMsg::Write {
            durable,
            deps,
            inner,
            ..
        } => {
            out.push(SWRITE);
            out.extend_from_slice(&durable.to_le_bytes());
            deps_encode(deps, &mut out);
            out.extend_from_slice(inner);
        }
        SymMsg::Relay {
            origin,
            deps,
            inner,
            ..
        } => {
            out.push(RELAY);
            out.extend_from_slice(&origin.to_le_bytes());
            deps_encode(deps, &mut out);
            out.extend_from_slice(inner);
        }
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
            out.push(LOCK);
            out.extend_from_slice(&view.to_le_bytes());
            out.extend_from_slice(&txn.to_le_bytes());
            out.extend_from_slice(&req.to_le_bytes());
            out.extend_from_slice(&part.to_le_bytes());
            out.extend_from_slice(&parts.to_le_bytes());
            out.extend_from_slice(&segment.to_le_bytes());
            out.push(u8::from(*write));
            out.extend_from_slice(&((locks.len() / 4) as u16).to_le_bytes());
            out.extend_from_slice(locks);
        }
        SymMsg::Grant {
            txn,
            req,
            no,
            deps,
        } => {
            out.push(GRANT);
            out.extend_from_slice(&txn.to_le_bytes());
            out.extend_from_slice(&req.to_le_bytes());
            out.extend_from_slice(&no.to_le_bytes());
            deps_encode(deps, &mut out);
        }
        SymMsg::Recall {
            view,
            segment,
            locks,
        } => {
            out.push(RECALL);
            out.extend_from_slice(&view.to_le_bytes());
            out.extend_from_slice(&segment.to_le_bytes());
            out.extend_from_slice(&((locks.len() / 4) as u16).to_le_bytes());
            out.extend_from_slice(locks);
        }
        SymMsg::Return {
            view,
            seq,
            got,
            segment,
            locks,
        } => {
            out.push(RETURN);
            out.extend_from_slice(&view.to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&got.to_le_bytes());
            out.extend_from_slice(&segment.to_le_bytes());
            out.extend_from_slice(&((locks.len() / 4) as u16).to_le_bytes());
            out.extend_from_slice(locks);
        }
        SymMsg::Release { txn } => {
            out.push(RELEASE);
            out.extend_from_slice(&txn.to_le_bytes());
        }
        SymMsg::Flush { view } => {
            out.push(FLUSH);
            out.extend_from_slice(&view.to_le_bytes());
        }
        SymMsg::Seqs {
            view,
            incarnation,
            seqs,
        } => {
            out.push(SEQS);
            out.extend_from_slice(&view.to_le_bytes());
            out.extend_from_slice(&incarnation.to_le_bytes());
            out.extend_from_slice(&(seqs.len() as u16).to_le_bytes());
            for (node, seq) in seqs {
                out.extend_from_slice(&node.to_le_bytes());
                out.extend_from_slice(&seq.to_le_bytes());
            }
        }
        SymMsg::Recover { incarnation } => {
            out.push(RECOVER);
            out.extend_from_slice(&incarnation.to_le_bytes());
        }
        SymMsg::Ack { seq } => {
            out.clear();
            msg::ack(*seq, &mut out);
        }
        SymMsg::Snap(s) => {
            out = encode(&Msg::Snap(msg::SnapPiece {
                last: s.last,
                nonce: s.nonce,
                seq: s.seq,
                segment: s.segment,
                offset: s.offset,
                bytes: s.bytes,
            }));
        }
    }
    out
}

/// `got` equals `want` but for flag bytes at `flags`, where `want` has a non-zero byte and
/// `got` has 1.
fn same_but_flags(got: &[u8], want: &[u8], flags: &[usize]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .enumerate()
            .all(|(i, (g, w))| g == w || (flags.contains(&i) && *w != 0 && *g == 1))
}

fn check_msg(data: &[u8]) {
    let Ok(m) = Msg::parse(data) else {
        return;
    };
    let again = encode(&m);
    let snap_flag: &[usize] = if matches!(m, Msg::Snap(_)) { &[2] } else { &[] };
    assert!(
        same_but_flags(&again, data, snap_flag),
        "{m:?} re-encodes differently"
    );
    assert_eq!(
        Msg::parse(&again).as_ref(),
        Ok(&m),
        "re-encoding parses differently"
    );
    match &m {
        Msg::Write(w) => {
            let body: usize = w.ranges().map(|r| RANGE_HEADER + r.bytes.len()).sum();
            assert_eq!(
                WRITE_HEADER + body,
                data.len(),
                "ranges do not tile the part"
            );
            assert!(
                Msg::parse(&data[..data.len() - 1]).is_err(),
                "a cut WRITE parsed"
            );
        }
        Msg::Snap(s) => assert_eq!(SNAP_HEADER + s.bytes.len(), data.len()),
        _ => assert!(
            Msg::parse(&data[..data.len() - 1]).is_err(),
            "a cut {m:?} parsed"
        ),
    }
}

fn check_sym(data: &[u8]) {
    let Ok(m) = SymMsg::parse(data) else {
        return;
    };
    let mut flags: &[usize] = &[];
    match &m {
        SymMsg::Write {
            seq,
            part,
            parts,
            inner,
            deps,
            ..
        }
        | SymMsg::Relay {
            seq,
            part,
            parts,
            inner,
            deps,
            ..
        } => {
            assert!(deps.len() <= NODES_MAX);
            let head = if matches!(m, SymMsg::Write { .. }) {
                10
            } else {
                4
            };
            let at = head + 1 + deps.len() * 10;
            assert_eq!(*inner, &data[at..]);
            let Ok(Msg::Write(w)) = Msg::parse(inner) else {
                panic!("{m:?}: its inner part is no WRITE");
            };
            assert_eq!((w.seq, w.part, w.parts), (*seq, *part, *parts));
            assert!(part < parts);
        }
        SymMsg::Lock {
            part, parts, locks, ..
        } => {
            assert!(part < parts);
            assert_eq!(locks.len() % 4, 0);
            assert!(locks.len() / 4 <= LOCKS_PER_MESSAGE);
            assert_eq!(data.len(), LOCK_HEADER + locks.len());
            flags = &[28];
        }
        SymMsg::Grant { deps, .. } => {
            assert!(deps.len() <= NODES_MAX);
            assert_eq!(data.len(), 2 + 8 + 4 + 8 + 1 + deps.len() * 10);
        }
        SymMsg::Recall { locks, .. } | SymMsg::Return { locks, .. } => {
            let n = locks.len() / 4;
            assert!(n >= 1 && n <= LOCKS_PER_MESSAGE && locks.len() % 4 == 0);
            let head = if matches!(m, SymMsg::Return { .. }) {
                2 + 8 + 8 + 8 + 2 + 2
            } else {
                2 + 8 + 2 + 2
            };
            assert_eq!(data.len(), head + locks.len());
        }
        SymMsg::Release { .. } | SymMsg::Flush { .. } | SymMsg::Recover { .. } => {
            assert_eq!(data.len(), 2 + 8)
        }
        SymMsg::Seqs { seqs, .. } => {
            assert!(seqs.len() <= NODES_MAX);
            assert_eq!(data.len(), 2 + 8 + 8 + 2 + seqs.len() * 10);
        }
        SymMsg::Ack { seq } => assert_eq!(Msg::parse(data), Ok(Msg::Ack { seq: *seq })),
        SymMsg::Snap(s) => {
            assert!(matches!(Msg::parse(data), Ok(Msg::Snap(ref p)) if p == s));
            flags = &[2];
        }
    }
    let again = sym_encode(&m);
    assert!(
        same_but_flags(&again, data, flags),
        "{m:?} written again differs"
    );
    assert_eq!(SymMsg::parse(&again).as_ref(), Ok(&m));
}

/// Builds a WRITE part from `data` read as fields: seq u64, part u16, parts u16, then ranges
/// `segment u16, offset u32, len u8, bytes`; checks that it parses back to them.
fn check_builder(data: &[u8]) {
    if data.len() < 12 {
        return;
    }
    let seq = u64::from_le_bytes(data[0..8].try_into().expect("8"));
    let parts = u16::from_le_bytes([data[10], data[11]]).max(1);
    let part = u16::from_le_bytes([data[8], data[9]]) % parts;
    let mut rest = &data[12..];
    let mut want = Vec::new();
    while rest.len() >= 7 {
        let segment = u16::from_le_bytes([rest[0], rest[1]]);
        let offset = u32::from_le_bytes(rest[2..6].try_into().expect("4"));
        let len = (rest[6] as usize).min(rest.len() - 7);
        want.push((segment, offset, &rest[7..7 + len]));
        rest = &rest[7 + len..];
    }
    let mut out = Vec::new();
    let mut b = WriteBuilder::new(&mut out, seq, part, parts);
    for &(segment, offset, bytes) in &want {
        b.range(segment, offset, bytes);
    }
    b.finish();
    let Ok(Msg::Write(w)) = Msg::parse(&out) else {
        panic!("a built WRITE part does not parse");
    };
    assert_eq!((w.seq, w.part, w.parts), (seq, part, parts));
    let got: Vec<_> = w.ranges().map(|r| (r.segment, r.offset, r.bytes)).collect();
    assert_eq!(got, want);
}

/// The bundle properties of the module comment.
fn check_bundle(data: &[u8]) {
    if let Some(Ok(b)) = msg::unbundle(data) {
        let items: Vec<&[u8]> = b.collect();
        let tiled: usize = items.iter().map(|m| 2 + m.len()).sum();
        assert_eq!(msg::BUNDLE_HEADER + tiled, data.len());
        assert!(items.iter().all(|m| m.len() >= 2 && msg::unbundle(m).is_none()));
        // Bundled again with its own length as the bound: the same bytes, if every message is
        // short enough to share a bundle (a quarter of the bound).
        if items.len() > 1 && items.iter().all(|m| 4 * m.len() <= data.len()) {
            let mut out: VecDeque<(u16, Vec<u8>)> = items.iter().map(|m| (1, m.to_vec())).collect();
            let mut ready = VecDeque::new();
            let made = msg::bundle_queue(&mut out, &mut ready, data.len(), None);
            assert_eq!(made, (1, items.len() as u64));
            assert_eq!(ready.len(), 1);
            assert_eq!(ready[0].1, data);
        }
    }
    // Messages cut from the input at its bytes' values, for node 1 or 2 by their first byte.
    let (max, rest) = match data.split_first() {
        Some((&m, rest)) => (64 + m as usize * 4, rest),
        None => return,
    };
    let mut out = VecDeque::new();
    let mut r = rest;
    while let Some((&len, tail)) = r.split_first() {
        let (m, tail) = tail.split_at(tail.len().min(len as usize));
        let to = 1 + u16::from(m.first().is_some_and(|b| b & 1 == 1));
        // A node never queues a bundle of its own, nor less than a magic and a kind.
        if m.len() >= 2 && m[1] != msg::BUNDLE {
            out.push_back((to, m.to_vec()));
        }
        r = tail;
    }
    let want: Vec<_> = out.iter().cloned().collect();
    let mut ready = VecDeque::new();
    let (bundles, bundled) = msg::bundle_queue(&mut out, &mut ready, max, None);
    let made = ready.iter().filter(|(_, m)| msg::unbundle(m).is_some());
    assert_eq!(made.clone().count() as u64, bundles);
    let inside: usize = made.map(|(_, m)| msg::unbundle(m).unwrap().unwrap().count()).sum();
    assert_eq!(inside as u64, bundled);
    for k in [1u16, 2] {
        let mut got = Vec::new();
        for (_, m) in ready.iter().filter(|(to, _)| *to == k) {
            match msg::unbundle(m) {
                None => got.push(m.clone()),
                Some(b) => {
                    assert!(m.len() <= max);
                    got.extend(b.expect("a bundle built here parses").map(<[u8]>::to_vec));
                }
            }
        }
        let sent: Vec<_> = want.iter().filter(|(to, _)| *to == k).map(|(_, m)| m.clone()).collect();
        assert_eq!(got, sent);
    }
}

fuzz_target!(|data: &[u8]| {
    check_bundle(data);
    check_msg(data);
    check_sym(data);
    check_builder(data);
});
