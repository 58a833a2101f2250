//! The concurrency controller's lock table: strict two-phase locking with three modes, and
//! wait-die to keep it free of deadlock and starvation across sites.
//!
//! - Modes: `Shared` (reads), `Exclusive` (a value set), `Increment` (a delta added: two
//!   increments commute, so they share the lock; anything else conflicts with them). This is
//!   what lets DebitCredit's transactions, which all add to one of a few branches and tellers,
//!   run concurrently: only transactions on the same account conflict.
//! - A transaction asks for all its locks at once (DebitCredit's access set is known before
//!   it starts). Queues are FIFO: a request is granted when it is compatible with the holders
//!   and with every waiter ahead of it, so a waiting exclusive request is not overtaken for
//!   ever by a stream of increments.
//! - Wait-die: a request that would wait behind a conflicting transaction older than itself
//!   (a smaller timestamp) dies instead, and the coordinator retries it with the same
//!   timestamp. Every wait is of an older transaction for a younger one, on every site alike,
//!   so no cycle forms; a retried transaction grows older until none conflicting is older,
//!   so none starves.
//!
//! Bounded by the transactions a site admits (its coordinator and participant tables).
//!
//! Holders are kept per mode in hash maps: granting and releasing cost the same whether a key
//! has one holder or thousands (a branch's increment lock has every transaction in flight).
//! The oldest conflicting holder is found by a scan, and only for a request that cannot be
//! granted at once. Queues live in a slab that keeps its slots (as many as keys were ever
//! locked at once), so a key locked and released again takes no allocation.

use crate::db::Key;
use crate::TxnId;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Shared,
    Exclusive,
    Increment,
}

impl Mode {
    pub fn compatible(self, other: Mode) -> bool {
        matches!(
            (self, other),
            (Mode::Shared, Mode::Shared) | (Mode::Increment, Mode::Increment)
        )
    }
}

/// A transaction's age for wait-die: the time its first attempt started at its origin, then
/// the origin and a per-origin number to break ties. Smaller is older.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts {
    pub time: u64,
    pub site: u16,
    pub seq: u64,
}

/// The answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Every lock is held.
    Granted,
    /// Some locks are queued; [`LockTable::poll_granted`] names the transaction when it has
    /// them all.
    Waiting,
    /// It would wait for an older transaction: refused, nothing held.
    Die,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    txn: TxnId,
    ts: Ts,
    mode: Mode,
}

const MODES: [Mode; 3] = [Mode::Shared, Mode::Exclusive, Mode::Increment];

fn slot(m: Mode) -> usize {
    match m {
        Mode::Shared => 0,
        Mode::Exclusive => 1,
        Mode::Increment => 2,
    }
}

/// One key's holders by mode (with their ages), and its FIFO of waiters.
#[derive(Default, Debug)]
struct Queue {
    held: [FxHashMap<TxnId, Ts>; 3],
    waiters: VecDeque<Entry>,
}

/// The locks a transaction asked for (DebitCredit's three fit inline).
pub type Locks = SmallVec<[(Key, Mode); 4]>;

impl Queue {
    fn holders_compatible(&self, mode: Mode) -> bool {
        MODES
            .iter()
            .all(|&m| m.compatible(mode) || self.held[slot(m)].is_empty())
    }

    fn grantable(&self, mode: Mode) -> bool {
        self.holders_compatible(mode) && self.waiters.iter().all(|w| w.mode.compatible(mode))
    }

    /// Whether a holder or waiter that conflicts with `mode` is older than `ts`.
    fn older_conflict(&self, mode: Mode, ts: Ts) -> bool {
        MODES
            .iter()
            .any(|&m| !m.compatible(mode) && self.held[slot(m)].values().any(|&t| t < ts))
            || self
                .waiters
                .iter()
                .any(|w| !w.mode.compatible(mode) && w.ts < ts)
    }

    fn hold(&mut self, e: Entry) {
        self.held[slot(e.mode)].insert(e.txn, e.ts);
    }

    fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.held.iter().all(|h| h.is_empty())
    }
}

#[derive(Debug)]
struct Held {
    locks: Locks,
    missing: usize,
}

#[derive(Default, Debug)]
pub struct LockTable {
    /// Each locked key's queue, as an index into `queues`: the map stays small and dense
    /// (it is probed for every lock), and a key's queue is not moved when it comes and goes.
    keys: FxHashMap<Key, u32>,
    queues: Vec<Queue>,
    /// Slots of `queues` free for the next key, the last freed first (warm in the cache;
    /// its maps keep their room).
    free: Vec<u32>,
    txns: FxHashMap<TxnId, Held>,
    granted: VecDeque<TxnId>,
    pub waits: u64,
    pub deaths: u64,
}

impl LockTable {
    pub fn new() -> LockTable {
        LockTable::default()
    }

    /// The queue of `key`, made if it has none.
    fn queue(&mut self, key: Key) -> u32 {
        let (queues, free) = (&mut self.queues, &mut self.free);
        *self.keys.entry(key).or_insert_with(|| match free.pop() {
            Some(i) => i,
            None => {
                queues.push(Queue::default());
                (queues.len() - 1) as u32
            }
        })
    }

    /// Drops `key`'s queue if nothing holds or waits for it.
    fn settle_key(&mut self, key: Key, i: u32) {
        if self.queues[i as usize].is_empty() {
            self.keys.remove(&key);
            self.free.push(i);
        }
    }

    /// Asks for `locks` (distinct keys) for `txn`. A transaction asks once; asking again
    /// while it holds or waits is answered from what it has.
    pub fn request(&mut self, txn: TxnId, ts: Ts, locks: &[(Key, Mode)]) -> Grant {
        if let Some(h) = self.txns.get(&txn) {
            return if h.missing == 0 {
                Grant::Granted
            } else {
                Grant::Waiting
            };
        }
        // One pass: each lock is held or queued as it is looked at; a request that must
        // die undoes what it did on the keys before.
        let mut missing = 0;
        for (n, &(key, mode)) in locks.iter().enumerate() {
            let i = self.queue(key);
            let q = &mut self.queues[i as usize];
            let e = Entry { txn, ts, mode };
            if q.grantable(mode) {
                q.hold(e);
            } else if q.older_conflict(mode, ts) {
                self.settle_key(key, i);
                for &(k, m) in &locks[..n] {
                    self.drop_entry(txn, k, m);
                }
                self.deaths += 1;
                return Grant::Die;
            } else {
                q.waiters.push_back(e);
                missing += 1;
            }
        }
        self.txns.insert(
            txn,
            Held {
                locks: Locks::from_slice(locks),
                missing,
            },
        );
        if missing == 0 {
            Grant::Granted
        } else {
            self.waits += 1;
            Grant::Waiting
        }
    }

    /// Takes `txn`'s hold or wait on `key` away (nothing else changes).
    fn drop_entry(&mut self, txn: TxnId, key: Key, mode: Mode) {
        let Some(&i) = self.keys.get(&key) else {
            return;
        };
        let q = &mut self.queues[i as usize];
        if q.held[slot(mode)].remove(&txn).is_none() {
            q.waiters.retain(|e| e.txn != txn);
        }
        self.settle_key(key, i);
    }

    /// Whether `txn` holds every lock it asked for.
    pub fn holds_all(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|h| h.missing == 0)
    }

    /// Releases everything `txn` holds or waits for, and grants what that frees.
    pub fn release(&mut self, txn: TxnId) {
        let Some(held) = self.txns.remove(&txn) else {
            return;
        };
        for (key, mode) in held.locks {
            let Some(&i) = self.keys.get(&key) else {
                continue;
            };
            let q = &mut self.queues[i as usize];
            if q.held[slot(mode)].remove(&txn).is_none() {
                q.waiters.retain(|e| e.txn != txn);
            }
            // Waiters at the front join the holders while they are compatible with them.
            while let Some(w) = q.waiters.front().copied() {
                if !q.holders_compatible(w.mode) {
                    break;
                }
                q.waiters.pop_front();
                q.hold(w);
                if let Some(h) = self.txns.get_mut(&w.txn) {
                    h.missing -= 1;
                    if h.missing == 0 {
                        self.granted.push_back(w.txn);
                    }
                }
            }
            self.settle_key(key, i);
        }
    }

    /// A transaction that now holds all its locks.
    pub fn poll_granted(&mut self) -> Option<TxnId> {
        while let Some(t) = self.granted.pop_front() {
            if self.holds_all(t) {
                return Some(t);
            }
        }
        None
    }

    /// Transactions holding or waiting for locks.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seq: u64) -> TxnId {
        TxnId {
            site: 0,
            incarnation: 1,
            seq,
        }
    }
    fn ts(time: u64) -> Ts {
        Ts {
            time,
            site: 0,
            seq: time,
        }
    }
    const A: Key = Key(2 << 30);
    const B: Key = Key(0);

    #[test]
    fn increments_share_and_exclusive_waits_in_order() {
        let mut l = LockTable::new();
        let inc = [(B, Mode::Increment)];
        assert_eq!(l.request(t(1), ts(5), &inc), Grant::Granted);
        assert_eq!(l.request(t(2), ts(6), &inc), Grant::Granted);
        // An older exclusive request waits behind both increments.
        assert_eq!(
            l.request(t(3), ts(1), &[(B, Mode::Exclusive)]),
            Grant::Waiting
        );
        // A younger increment would wait behind the older exclusive: it dies.
        assert_eq!(l.request(t(4), ts(7), &inc), Grant::Die);
        // An even older increment waits behind the exclusive (FIFO), it does not overtake.
        assert_eq!(l.request(t(5), ts(0), &inc), Grant::Waiting);
        l.release(t(1));
        assert_eq!(l.poll_granted(), None);
        l.release(t(2));
        assert_eq!(l.poll_granted(), Some(t(3)));
        assert_eq!(l.poll_granted(), None);
        l.release(t(3));
        assert_eq!(l.poll_granted(), Some(t(5)));
        l.release(t(5));
        assert!(l.is_empty());
        assert!(l.keys.is_empty());
    }

    #[test]
    fn all_or_waiting_and_release_of_a_waiter() {
        let mut l = LockTable::new();
        assert_eq!(
            l.request(t(1), ts(9), &[(A, Mode::Exclusive)]),
            Grant::Granted
        );
        // Older: takes B now, waits for A.
        let both = [(A, Mode::Exclusive), (B, Mode::Increment)];
        assert_eq!(l.request(t(2), ts(3), &both), Grant::Waiting);
        assert!(!l.holds_all(t(2)));
        // Asking again is answered from what it has.
        assert_eq!(l.request(t(2), ts(3), &both), Grant::Waiting);
        // A waiter that gives up (its coordinator aborted) leaves no trace.
        l.release(t(2));
        l.release(t(1));
        assert_eq!(l.poll_granted(), None);
        assert!(l.keys.is_empty());
        assert_eq!(l.request(t(3), ts(4), &both), Grant::Granted);
        assert_eq!(l.deaths, 0);
    }

    #[test]
    fn a_request_that_dies_undoes_what_it_took_on_earlier_keys() {
        let mut l = LockTable::new();
        assert_eq!(
            l.request(t(1), ts(1), &[(B, Mode::Exclusive)]),
            Grant::Granted
        );
        // Takes A, then meets the older holder of B: dies, and A is free again.
        let both = [(A, Mode::Exclusive), (B, Mode::Exclusive)];
        assert_eq!(l.request(t(2), ts(9), &both), Grant::Die);
        assert_eq!(l.deaths, 1);
        assert!(!l.holds_all(t(2)));
        assert_eq!(l.len(), 1);
        assert_eq!(
            l.request(t(3), ts(10), &[(A, Mode::Exclusive)]),
            Grant::Granted
        );
        l.release(t(3));
        l.release(t(1));
        assert!(l.keys.is_empty());
        // The freed queues are used again.
        assert_eq!(l.request(t(2), ts(9), &both), Grant::Granted);
        assert_eq!(l.queues.len(), 2);
    }
}
