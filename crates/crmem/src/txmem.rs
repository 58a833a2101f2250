//! Transaction memory both configurations share (node.rs, the mirror; symmetric.rs): a
//! segment's bytes, mapping and lock table; the ranges a transaction declared, their undo
//! images and its write set; the locks it holds.

use crate::lock::{LockId, LockMapping, LockTable, LOCKS_PER_RANGE_MAX};
use crate::node::{CrError, Mode, SegmentId, SEGMENTS_MAX};
use std::borrow::BorrowMut;

/// Two runs of changed bytes at most this many unchanged bytes apart ship as one range: a
/// range costs its receiver more than its 10 header bytes (the synthetic benchmark's record,
/// two changed fields 15 bytes apart, lost 10-14 % of its rate shipped as two ranges).
pub(crate) const RUN_GAP_MAX: usize = 32;

pub(crate) struct Segment {
    pub(crate) mem: Vec<u8>,
    pub(crate) mapping: LockMapping,
    pub(crate) locks: LockTable,
}

impl Segment {
    /// A segment of `bytes` zeroed bytes, the `count + 1`-th of its node, within the limits.
    pub(crate) fn new(
        count: usize,
        bytes: usize,
        mapping: LockMapping,
    ) -> Result<Segment, CrError> {
        if count >= SEGMENTS_MAX || bytes > u32::MAX as usize || !mapping.is_valid() {
            return Err(CrError::BadSegment);
        }
        let locks = LockTable::new(mapping.lock_count(bytes));
        Ok(Segment {
            mem: vec![0; bytes],
            mapping,
            locks,
        })
    }

    /// The locks of `len` bytes at `offset` into `out`, the range and the locks checked.
    pub(crate) fn map_range(
        &self,
        offset: u32,
        len: u32,
        out: &mut Vec<LockId>,
    ) -> Result<(), CrError> {
        if len == 0 || offset as usize + len as usize > self.mem.len() {
            return Err(CrError::OutOfRange);
        }
        self.mapping.map(offset, len, out);
        if out.len() > LOCKS_PER_RANGE_MAX || out.iter().any(|&l| l as usize >= self.locks.len()) {
            return Err(CrError::TooManyLocks);
        }
        Ok(())
    }

    /// The contents of range `r` now: its undo image.
    pub(crate) fn image(&self, r: &SetRange) -> (SegmentId, u32, Vec<u8>) {
        let (a, b) = (r.offset as usize, (r.offset + r.len) as usize);
        (r.segment, r.offset, self.mem[a..b].to_vec())
    }
}

/// A range a transaction declared.
#[derive(Clone, Copy)]
pub(crate) struct SetRange {
    pub(crate) segment: SegmentId,
    pub(crate) offset: u32,
    pub(crate) len: u32,
    pub(crate) mode: Mode,
}

/// Locks held: (segment, lock, exclusive).
pub(crate) type Held = Vec<(SegmentId, LockId, bool)>;
/// Old contents of every write range, in the order taken.
pub(crate) type Undo = Vec<(SegmentId, u32, Vec<u8>)>;

/// Whether `ranges` cover `len` bytes at `off` of `s` (for writing, if `write`).
pub(crate) fn covered(
    ranges: &[SetRange],
    s: SegmentId,
    off: u32,
    len: u32,
    write: bool,
) -> Result<(), CrError> {
    let end = off as u64 + len as u64;
    let ok = ranges.iter().any(|r| {
        r.segment == s
            && r.offset <= off
            && end <= r.offset as u64 + r.len as u64
            && (!write || r.mode == Mode::Write)
    });
    ok.then_some(()).ok_or(CrError::NotSet)
}

/// The write set: the ranges declared for writing, in order.
pub(crate) fn writes(ranges: &[SetRange]) -> Vec<SetRange> {
    ranges
        .iter()
        .filter(|r| r.mode == Mode::Write)
        .copied()
        .collect()
}

/// The bytes a transaction changed, as ranges to ship, and how many bytes its write ranges
/// declared: for each range of `ranges` declared for writing (whose undo images are `undo`,
/// one each in the same order), the runs of bytes that differ from the image now, two runs
/// at most [`RUN_GAP_MAX`] bytes apart shipped as one. What is shipped is what a replica
/// needs: it held the images' bytes already (replicas agree at transaction boundaries), and
/// a byte written back to its old value needs nothing. A byte covered by several write
/// ranges has its value before the transaction in the first one's image, so every byte that
/// changed is in some run. Write ranges and images that do not pair up (not made by this
/// crate) are shipped whole.
pub(crate) fn changed<S: std::borrow::Borrow<Segment>>(
    segments: &[S],
    ranges: &[SetRange],
    undo: &Undo,
) -> (Vec<SetRange>, u64) {
    let whole = || {
        let w = writes(ranges);
        let declared = w.iter().map(|r| r.len as u64).sum();
        (w, declared)
    };
    let mut out = Vec::with_capacity(undo.len());
    let mut declared = 0u64;
    let mut images = undo.iter();
    for r in ranges.iter().filter(|r| r.mode == Mode::Write) {
        declared += r.len as u64;
        match images.next() {
            Some((s, off, old))
                if *s == r.segment && *off == r.offset && old.len() == r.len as usize =>
            {
                let a = r.offset as usize;
                let now = &segments[r.segment as usize].borrow().mem[a..a + old.len()];
                runs(now, old, |start, end| out.push(sub(r, start, end)));
            }
            _ => return whole(),
        }
    }
    if images.next().is_some() {
        return whole();
    }
    (out, declared)
}

/// The runs `start..end` of bytes where `now` and `old` (of one length) differ, two runs at
/// most [`RUN_GAP_MAX`] bytes apart given as one. Eight bytes at a time: equal words are
/// skipped, and in a word that differs the span from its first differing byte to its last
/// joins the run (the bytes between are fewer than the gap).
fn runs(now: &[u8], old: &[u8], mut out: impl FnMut(usize, usize)) {
    let mut run: Option<(usize, usize)> = None;
    let mut add = |first: usize, end: usize| {
        run = match run {
            Some((s, e)) if first - e <= RUN_GAP_MAX => Some((s, end)),
            Some((s, e)) => {
                out(s, e);
                Some((first, end))
            }
            None => Some((first, end)),
        };
    };
    let words = now.len() / 8 * 8;
    for (i, (x, y)) in now[..words]
        .chunks_exact(8)
        .zip(old[..words].chunks_exact(8))
        .enumerate()
    {
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("eight bytes"));
        let d = word(x) ^ word(y);
        if d != 0 {
            let at = i * 8;
            add(
                at + (d.trailing_zeros() / 8) as usize,
                at + 8 - (d.leading_zeros() / 8) as usize,
            );
        }
    }
    for i in words..now.len() {
        if now[i] != old[i] {
            add(i, i + 1);
        }
    }
    if let Some((s, e)) = run {
        out(s, e);
    }
}

/// Bytes `start..end` of range `r`.
fn sub(r: &SetRange, start: usize, end: usize) -> SetRange {
    SetRange {
        offset: r.offset + start as u32,
        len: (end - start) as u32,
        ..*r
    }
}

/// Puts the undo images back, the last taken first.
pub(crate) fn restore<S: BorrowMut<Segment>>(segments: &mut [S], undo: Undo) {
    for (s, off, old) in undo.into_iter().rev() {
        let a = off as usize;
        segments[s as usize].borrow_mut().mem[a..a + old.len()].copy_from_slice(&old);
    }
}

/// Releases the locks in `held`.
pub(crate) fn release<S: BorrowMut<Segment>>(segments: &mut [S], held: &Held) {
    for &(s, l, x) in held {
        segments[s as usize].borrow_mut().locks.release(l, x);
    }
}

/// Takes `ids` of `seg` in `locks` for `owner` (all or none), tracking them in `held`.
/// `None`: some are taken by others; `Some(new)`: whether any was newly taken. A lock held
/// already in this mode (or exclusive) is not taken twice: a second shared count would keep
/// it from ever upgrading.
pub(crate) fn take_into(
    locks: &mut LockTable,
    owner: u64,
    seg: SegmentId,
    ids: &[LockId],
    write: bool,
    held: &mut Held,
) -> Option<bool> {
    let hs = |l: LockId| held.iter().any(|&(s, h, x)| s == seg && h == l && !x);
    if !locks.can_take(owner, ids, write, hs) {
        return None;
    }
    let mut new = false;
    for &l in ids {
        let h = held.iter().position(|&(s, h, _)| s == seg && h == l);
        if h.is_some_and(|i| held[i].2 || !write) {
            continue;
        }
        new = true;
        match (locks.take(owner, l, write), h) {
            (Some(true), Some(i)) => held[i].2 = true,
            (Some(_), _) => held.push((seg, l, write)),
            (None, _) => {}
        }
    }
    Some(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs, found a byte at a time.
    fn bytewise(now: &[u8], old: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut run: Option<(usize, usize)> = None;
        for i in 0..now.len() {
            if now[i] == old[i] {
                continue;
            }
            run = match run {
                Some((s, e)) if i - e <= RUN_GAP_MAX => Some((s, i + 1)),
                Some(r) => {
                    out.push(r);
                    Some((i, i + 1))
                }
                None => Some((i, i + 1)),
            };
        }
        out.extend(run);
        out
    }

    #[test]
    fn the_runs_of_changed_bytes_are_those_found_a_byte_at_a_time() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..20_000 {
            let len = (next() % 80) as usize;
            let old: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut now = old.clone();
            // Sparse changes, clusters, or none; some written back to the same value.
            let changes = next() % 8;
            for _ in 0..changes {
                if len == 0 {
                    break;
                }
                let at = (next() % len as u64) as usize;
                let n = 1 + (next() % 4) as usize;
                for b in now.iter_mut().skip(at).take(n) {
                    *b = if next() % 4 == 0 { *b } else { next() as u8 };
                }
            }
            let mut got = Vec::new();
            runs(&now, &old, |s, e| got.push((s, e)));
            assert_eq!(got, bytewise(&now, &old), "case {case}: {old:?} -> {now:?}");
        }
    }
}
