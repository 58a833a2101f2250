//! The casts a member holds of one sender's stream until they are stable.
//!
//! Casts arrive in order almost always, and leave in order (as they become stable), so the
//! held ones live in one byte buffer, appended at the back and dropped from the front, with
//! a queue of spans indexed by sequence number: no allocation and no tree walk per cast. A
//! cast that comes early (after a loss, before the ones it follows) waits in a small map
//! until the gap is filled.

use std::collections::{BTreeMap, VecDeque};

/// Dropped bytes at the front of the buffer are reclaimed once they are at least this many
/// and at least half the buffer.
const COMPACT_BYTES_MIN: usize = 64 * 1024;

#[derive(Debug)]
pub(super) struct Held {
    /// Sequence number of the first span.
    base: u64,
    /// Where casts `base`, `base + 1`, ... lie: (offset counted from the first byte ever
    /// appended, length).
    spans: VecDeque<(u64, usize)>,
    bytes: Vec<u8>,
    /// The offset (same count) of `bytes[0]`.
    origin: u64,
    /// Casts past the contiguous ones.
    early: BTreeMap<u64, Vec<u8>>,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            base: 1,
            spans: VecDeque::new(),
            bytes: Vec::new(),
            origin: 0,
            early: BTreeMap::new(),
        }
    }
}

impl Held {
    /// The sequence number after the contiguous casts: the next one to append.
    pub fn end(&self) -> u64 {
        self.base + self.spans.len() as u64
    }

    /// How many casts are held.
    pub fn len(&self) -> usize {
        self.spans.len() + self.early.len()
    }

    pub fn contains(&self, seq: u64) -> bool {
        (self.base..self.end()).contains(&seq) || self.early.contains_key(&seq)
    }

    pub fn get(&self, seq: u64) -> Option<&[u8]> {
        if (self.base..self.end()).contains(&seq) {
            let (at, len) = self.spans[(seq - self.base) as usize];
            let start = (at - self.origin) as usize;
            return Some(&self.bytes[start..start + len]);
        }
        self.early.get(&seq).map(Vec::as_slice)
    }

    /// Holds cast `seq` (not held already, and past the stable ones); then takes in every
    /// early cast that now follows on.
    pub fn insert(&mut self, seq: u64, payload: &[u8]) {
        debug_assert!(!self.contains(seq) && seq >= self.base);
        if seq != self.end() {
            self.early.insert(seq, payload.to_vec());
            return;
        }
        self.append(payload);
        while let Some(p) = self.early.remove(&self.end()) {
            self.append(&p);
        }
    }

    fn append(&mut self, payload: &[u8]) {
        let at = self.origin + self.bytes.len() as u64;
        self.bytes.extend_from_slice(payload);
        self.spans.push_back((at, payload.len()));
    }

    /// Drops every cast up to `upto`, which must not pass the contiguous ones.
    pub fn drop_upto(&mut self, upto: u64) {
        debug_assert!(upto < self.end());
        while self.base <= upto {
            self.spans.pop_front();
            self.base += 1;
        }
        let Some(&(first, _)) = self.spans.front() else {
            self.origin += self.bytes.len() as u64;
            self.bytes.clear();
            return;
        };
        let dead = (first - self.origin) as usize;
        if dead >= COMPACT_BYTES_MIN && dead * 2 >= self.bytes.len() {
            self.bytes.drain(..dead);
            self.origin = first;
        }
    }

    /// Drops every cast past `last`.
    pub fn truncate_after(&mut self, last: u64) {
        let _ = self.early.split_off(&(last + 1));
        if last < self.base {
            self.spans.clear();
        } else {
            self.spans.truncate((last + 1 - self.base) as usize);
        }
        if let Some(&(at, len)) = self.spans.back() {
            self.bytes.truncate((at - self.origin) as usize + len);
        } else {
            self.origin += self.bytes.len() as u64;
            self.bytes.clear();
        }
    }

    /// The contiguous casts from `from` to before `to`, in order.
    pub fn range(&self, from: u64, to: u64) -> impl Iterator<Item = &[u8]> {
        let first = from.max(self.base);
        let last = to.min(self.end());
        (first..last.max(first)).map(|seq| self.get(seq).expect("contiguous"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast(seq: u64) -> Vec<u8> {
        vec![seq as u8; (seq % 7) as usize]
    }

    #[test]
    fn in_order_early_and_dropped_casts() {
        let mut h = Held::default();
        h.insert(1, &cast(1));
        h.insert(3, &cast(3));
        h.insert(4, &cast(4));
        assert_eq!((h.end(), h.len()), (2, 3));
        assert!(h.contains(3) && !h.contains(2) && !h.contains(5));
        assert_eq!(h.get(4), Some(&cast(4)[..]));
        h.insert(2, &cast(2));
        assert_eq!((h.end(), h.len()), (5, 4));
        let got: Vec<Vec<u8>> = h.range(2, 10).map(<[u8]>::to_vec).collect();
        assert_eq!(got, vec![cast(2), cast(3), cast(4)]);
        h.drop_upto(2);
        assert!(!h.contains(2) && h.contains(3));
        assert_eq!(h.get(3), Some(&cast(3)[..]));
        h.drop_upto(4);
        assert_eq!((h.end(), h.len()), (5, 0));
        h.insert(5, &cast(5));
        assert_eq!(h.get(5), Some(&cast(5)[..]));
    }

    #[test]
    fn a_long_run_stays_compact_and_readable() {
        let mut h = Held::default();
        for seq in 1..=200_000u64 {
            h.insert(seq, &[seq as u8; 40]);
            if seq > 100 {
                h.drop_upto(seq - 100);
            }
            assert_eq!(h.get(seq), Some(&[seq as u8; 40][..]));
        }
        assert_eq!(h.len(), 100);
        assert!(h.bytes.len() <= 2 * COMPACT_BYTES_MIN + 100 * 40);
        assert_eq!(h.get(199_901), Some(&[199_901u64 as u8; 40][..]));
    }

    #[test]
    fn truncate_keeps_up_to_the_cut() {
        let mut h = Held::default();
        for seq in [1, 2, 3, 6] {
            h.insert(seq, &cast(seq));
        }
        h.truncate_after(2);
        assert_eq!((h.end(), h.len()), (3, 2));
        assert_eq!(h.get(2), Some(&cast(2)[..]));
        h.drop_upto(1);
        h.truncate_after(0);
        assert_eq!(h.len(), 0);
    }
}
