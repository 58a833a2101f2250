//! The history buffer: ordered records by sequence number, from the oldest one still needed
//! (not yet stable or not yet consumed) to the newest received. Every member keeps one, so any
//! member can serve retransmissions once it becomes the sequencer.

use super::msg::RecordKind;
use crate::addr::Address;
use std::collections::VecDeque;

/// One ordered record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub sender: Address,
    pub msg_id: u64,
    pub kind: RecordKind,
    /// `None` until a BB message's payload is known.
    pub payload: Option<Vec<u8>>,
    /// The sender multicast the payload itself (BB): the sequencer's multicast carries only the
    /// accept.
    pub via_bb: bool,
}

impl Entry {
    pub fn is_complete(&self) -> bool {
        self.payload.is_some()
    }

    /// Whether it is an application message sent by `who`.
    pub fn is_message_of(&self, who: Address) -> bool {
        self.kind == RecordKind::Message && self.sender == who
    }

    /// Roughly what it takes in an Order message: a record header and the payload.
    pub fn wire_bytes(&self) -> usize {
        32 + self.payload.as_ref().map_or(0, |p| p.len())
    }
}

/// Records `base..base + slots.len()`, each slot empty until its record arrives.
#[derive(Debug)]
pub struct History {
    base: u64,
    slots: VecDeque<Option<Entry>>,
    /// Most slots held (a bound on memory, checked at insert).
    capacity: usize,
}

/// Why a record was not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Already trimmed (stable, consumed): a duplicate.
    Old,
    /// Beyond the window: the buffer would grow past its bound.
    Beyond,
}

impl History {
    /// An empty history whose next record is `first`.
    pub fn new(first: u64, capacity: usize) -> History {
        assert!(first >= 1 && capacity >= 1);
        History {
            base: first,
            slots: VecDeque::with_capacity(capacity.min(4096)),
            capacity,
        }
    }

    /// The first sequence number the buffer holds (or would hold).
    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn get(&self, seq: u64) -> Option<&Entry> {
        let i = seq.checked_sub(self.base)? as usize;
        self.slots.get(i)?.as_ref()
    }

    /// Stores `e` at `seq` unless a record is already there. Returns whether it was new.
    /// The last sequence number, `u64::MAX`, is never stored (no record could follow it: only a
    /// corrupt or forged message names it), so everything counted up to a record held here
    /// can still be followed by `+ 1`.
    pub fn insert(&mut self, seq: u64, e: Entry) -> Result<bool, Refused> {
        let Some(i) = seq.checked_sub(self.base) else {
            return Err(Refused::Old);
        };
        let i = i as usize;
        if i >= self.capacity || seq == u64::MAX {
            return Err(Refused::Beyond);
        }
        while self.slots.len() <= i {
            self.slots.push_back(None);
        }
        match &mut self.slots[i] {
            Some(old) => {
                // A retransmission may complete a BB accept that arrived without its payload.
                if old.payload.is_none() && e.payload.is_some() {
                    old.payload = e.payload;
                    return Ok(true);
                }
                Ok(false)
            }
            slot @ None => {
                *slot = Some(e);
                Ok(true)
            }
        }
    }

    /// The highest `s >= from - 1` such that every record `from..=s` is present and complete.
    pub fn contiguous_from(&self, from: u64) -> u64 {
        let mut s = from.saturating_sub(1);
        while self.get(s + 1).is_some_and(Entry::is_complete) {
            s += 1;
        }
        s
    }

    /// Whether a slot after `seq` has been filled: a record beyond `seq` has arrived.
    pub fn holds_after(&self, seq: u64) -> bool {
        self.base + self.slots.len() as u64 > seq.saturating_add(1)
    }

    /// Drops every record up to and including `seq`.
    pub fn trim_through(&mut self, seq: u64) {
        while self.base <= seq {
            if self.slots.pop_front().is_none() {
                self.base = seq + 1;
                return;
            }
            self.base += 1;
        }
    }

    /// Drops every record after `seq` (a new epoch renumbers what follows).
    pub fn truncate_after(&mut self, seq: u64) {
        let keep = seq.saturating_add(1).saturating_sub(self.base) as usize;
        self.slots.truncate(keep);
    }

    /// Restarts an empty history at `first` (a joiner's).
    pub fn reset(&mut self, first: u64) {
        self.slots.clear();
        self.base = first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u64, payload: Option<&[u8]>) -> Entry {
        Entry {
            sender: Address::new(1, 2, 3, 4),
            msg_id: id,
            kind: RecordKind::Message,
            payload: payload.map(<[u8]>::to_vec),
            via_bb: false,
        }
    }

    #[test]
    fn contiguity_trim_and_bounds() {
        let mut h = History::new(1, 4);
        assert_eq!(h.insert(1, e(1, Some(b"a"))), Ok(true));
        assert_eq!(h.insert(3, e(3, Some(b"c"))), Ok(true));
        assert_eq!(h.contiguous_from(1), 1);
        assert_eq!(h.insert(2, e(2, None)), Ok(true));
        assert_eq!(
            h.contiguous_from(1),
            1,
            "an accept without payload is not complete"
        );
        assert_eq!(h.insert(2, e(2, Some(b"b"))), Ok(true));
        assert_eq!(h.contiguous_from(1), 3);
        assert_eq!(h.insert(2, e(2, Some(b"b"))), Ok(false));
        assert_eq!(h.insert(5, e(5, Some(b"e"))), Err(Refused::Beyond));
        h.trim_through(2);
        assert_eq!(h.base(), 3);
        assert_eq!(h.insert(2, e(2, Some(b"b"))), Err(Refused::Old));
        assert_eq!(h.insert(6, e(6, Some(b"f"))), Ok(true));
        h.truncate_after(3);
        assert!(h.get(6).is_none() && h.get(3).is_some());
        h.trim_through(10);
        assert_eq!(h.base(), 11);
        assert!(h.get(11).is_none());
    }
}
