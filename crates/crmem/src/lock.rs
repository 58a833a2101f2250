//! A segment's locks and its lock-mapping function (paper 004 §3.2): a range of the segment
//! maps to the set of locks a transaction must hold before it touches the range.

use std::sync::Arc;

/// Locks one range may map to, at most (a mapping that yields more is refused).
pub const LOCKS_PER_RANGE_MAX: usize = 1024;

/// A lock of a segment, by index.
pub type LockId = u32;

/// An application's lock-mapping function: the locks of `(offset, len)` pushed on the vector.
pub type MapFn = Arc<dyn Fn(u32, u32, &mut Vec<LockId>) + Send + Sync>;

/// How a range maps to locks. Chosen when the segment is made; every replica uses the same.
#[derive(Clone)]
pub enum LockMapping {
    /// No concurrency control: the application serializes its transactions itself.
    None,
    /// `locks` locks spread over the segment's `granule`-byte units round-robin: unit `u`
    /// is under lock `u % locks` (the paper's uniform function).
    Uniform { locks: u32, granule: u32 },
    /// Records of `record_bytes`, `per_lock` consecutive records under one lock (the
    /// simplified TpcB's accounts: ten to a lock).
    Records { record_bytes: u32, per_lock: u32 },
    /// The application's function: the locks of `(offset, len)` pushed on the vector.
    Custom { locks: u32, map: MapFn },
}

impl std::fmt::Debug for LockMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockMapping::None => write!(f, "None"),
            LockMapping::Uniform { locks, granule } => {
                write!(f, "Uniform {{ locks: {locks}, granule: {granule} }}")
            }
            LockMapping::Records {
                record_bytes,
                per_lock,
            } => write!(
                f,
                "Records {{ record_bytes: {record_bytes}, per_lock: {per_lock} }}"
            ),
            LockMapping::Custom { locks, .. } => write!(f, "Custom {{ locks: {locks} }}"),
        }
    }
}

impl LockMapping {
    /// How many locks the segment has under this mapping for `segment_bytes` of memory.
    pub fn lock_count(&self, segment_bytes: usize) -> u32 {
        match *self {
            LockMapping::None => 0,
            LockMapping::Uniform { locks, .. } => locks,
            LockMapping::Records {
                record_bytes,
                per_lock,
            } => {
                let records = segment_bytes.div_ceil(record_bytes.max(1) as usize);
                records.div_ceil(per_lock.max(1) as usize) as u32
            }
            LockMapping::Custom { locks, .. } => locks,
        }
    }

    /// Whether the mapping's parameters make sense (no zero divisor).
    pub fn is_valid(&self) -> bool {
        match *self {
            LockMapping::None | LockMapping::Custom { .. } => true,
            LockMapping::Uniform { locks, granule } => locks > 0 && granule > 0,
            LockMapping::Records {
                record_bytes,
                per_lock,
            } => record_bytes > 0 && per_lock > 0,
        }
    }

    /// The locks of `len` bytes at `offset`, sorted and without repeats, into `out`.
    /// `len` is at least 1 (the caller checked the range).
    pub fn map(&self, offset: u32, len: u32, out: &mut Vec<LockId>) {
        out.clear();
        let last = offset as u64 + len as u64 - 1;
        match *self {
            LockMapping::None => {}
            LockMapping::Uniform { locks, granule } => {
                let (first_unit, last_unit) =
                    (offset as u64 / granule as u64, last / granule as u64);
                let units = last_unit - first_unit + 1;
                if units >= locks as u64 {
                    out.extend(0..locks);
                } else {
                    out.extend((first_unit..=last_unit).map(|u| (u % locks as u64) as LockId));
                }
            }
            LockMapping::Records {
                record_bytes,
                per_lock,
            } => {
                let group = record_bytes as u64 * per_lock as u64;
                out.extend((offset as u64 / group) as LockId..=(last / group) as LockId);
            }
            LockMapping::Custom { ref map, .. } => map(offset, len, out),
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// The state of one lock: free, shared by some readers, or held by one writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockState {
    Free,
    Shared(u32),
    Exclusive(u64),
}

/// A segment's locks.
#[derive(Debug)]
pub(crate) struct LockTable {
    locks: Vec<LockState>,
}

impl LockTable {
    pub fn new(count: u32) -> LockTable {
        LockTable {
            locks: vec![LockState::Free; count as usize],
        }
    }

    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether transaction `txn` could take every lock in `ids` in the mode asked, all or
    /// none; `holds_shared(l)` says whether it holds `l` in shared mode already (it may then
    /// upgrade if it is the only reader).
    pub fn can_take(
        &self,
        txn: u64,
        ids: &[LockId],
        write: bool,
        holds_shared: impl Fn(LockId) -> bool,
    ) -> bool {
        ids.iter().all(|&l| match self.locks[l as usize] {
            LockState::Free => true,
            LockState::Exclusive(t) => t == txn,
            LockState::Shared(n) => !write || (n == 1 && holds_shared(l)),
        })
    }

    /// Takes `l` for `txn`; the caller checked [`Self::can_take`]. What `txn` newly holds:
    /// `None` if it held it already in this mode or stronger, `Some(upgraded)` otherwise.
    pub fn take(&mut self, txn: u64, l: LockId, write: bool) -> Option<bool> {
        let s = &mut self.locks[l as usize];
        match (*s, write) {
            (LockState::Exclusive(_), _) => None,
            (LockState::Free, true) => {
                *s = LockState::Exclusive(txn);
                Some(false)
            }
            (LockState::Free, false) => {
                *s = LockState::Shared(1);
                Some(false)
            }
            (LockState::Shared(_), true) => {
                *s = LockState::Exclusive(txn);
                Some(true)
            }
            (LockState::Shared(n), false) => {
                *s = LockState::Shared(n + 1);
                Some(false)
            }
        }
    }

    /// Releases `txn`'s hold of `l`.
    pub fn release(&mut self, l: LockId, write: bool) {
        let s = &mut self.locks[l as usize];
        *s = match (*s, write) {
            (LockState::Shared(n), false) if n > 1 => LockState::Shared(n - 1),
            _ => LockState::Free,
        };
    }

    pub fn state(&self, l: LockId) -> LockState {
        self.locks[l as usize]
    }

    pub fn is_free(&self, l: LockId) -> bool {
        self.locks[l as usize] == LockState::Free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_give_the_papers_locks() {
        let mut v = Vec::new();
        // Uniform: 1,000 locks over 12-byte records; one record is one lock.
        let u = LockMapping::Uniform {
            locks: 1000,
            granule: 12,
        };
        u.map(12 * 1001, 12, &mut v);
        assert_eq!(v, [1]);
        u.map(12 * 999, 24, &mut v);
        assert_eq!(v, [0, 999]);
        u.map(0, 12 * 5000, &mut v);
        assert_eq!(v.len(), 1000);
        // TpcB accounts: 100-byte records, ten to a lock.
        let r = LockMapping::Records {
            record_bytes: 100,
            per_lock: 10,
        };
        assert_eq!(r.lock_count(10_000 * 100), 1000);
        r.map(100 * 19, 100, &mut v);
        assert_eq!(v, [1]);
        r.map(100 * 19, 200, &mut v);
        assert_eq!(v, [1, 2]);
        LockMapping::None.map(0, 10, &mut v);
        assert!(v.is_empty());
        let c = LockMapping::Custom {
            locks: 2,
            map: Arc::new(|off, _, out| out.push(off % 2)),
        };
        c.map(3, 1, &mut v);
        assert_eq!(v, [1]);
        assert!(!LockMapping::Uniform {
            locks: 0,
            granule: 1
        }
        .is_valid());
    }

    #[test]
    fn shared_exclusive_and_upgrade() {
        let mut t = LockTable::new(2);
        assert!(t.can_take(1, &[0], false, |_| false));
        t.take(1, 0, false);
        assert!(t.can_take(2, &[0], false, |_| false));
        t.take(2, 0, false);
        // Two readers: neither may upgrade.
        assert!(!t.can_take(1, &[0], true, |l| l == 0));
        t.release(0, false);
        // One reader left: it may upgrade, another may not write.
        assert!(!t.can_take(3, &[0], true, |_| false));
        assert!(t.can_take(2, &[0], true, |l| l == 0));
        assert_eq!(t.take(2, 0, true), Some(true));
        assert_eq!(t.state(0), LockState::Exclusive(2));
        assert!(!t.can_take(1, &[0, 1], false, |_| false));
        t.release(0, true);
        assert_eq!(t.state(0), LockState::Free);
    }
}
