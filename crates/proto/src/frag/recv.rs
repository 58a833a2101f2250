//! The receiving side of long messages: admission, reassembly, acknowledgements, expiry.

use super::msg::{self, AckHeader, AckStatus, DataHeader, BITMAP_BYTES_MAX};
use super::{Bitset, LdgConfig, Pool};
use crate::addr::Address;
use crate::time::Instant;
use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiverCounters {
    pub fragments: u64,
    pub duplicates: u64,
    pub delivered: u64,
    pub acks_sent: u64,
    /// Transfers refused as longer than `message_bytes_max`.
    pub refused_too_long: u64,
    /// Fragments of transfers not admitted for lack of memory or room (answered window 0).
    pub not_admitted: u64,
    /// Incomplete reassemblies freed after `reassembly_timeout`.
    pub expired: u64,
    /// Reassemblies freed because their sender gave up.
    pub aborted: u64,
    /// Fragments that disagree with their transfer's first (length, fragment size).
    pub inconsistent: u64,
}

crate::counters_sum!(ReceiverCounters {
    fragments,
    duplicates,
    delivered,
    acks_sent,
    refused_too_long,
    not_admitted,
    expired,
    aborted,
    inconsistent,
});

type Key = (Address, u64, u64);

/// The longest acknowledgement (header and a full bitmap).
pub const ACK_BYTES_MAX: usize = msg::ACK_HEADER_BYTES + BITMAP_BYTES_MAX;

struct Reassembly {
    /// Its number among this receiver's reassemblies.
    number: u64,
    fragment_bytes: u32,
    count: u32,
    buf: Vec<u8>,
    got: Bitset,
    got_count: u32,
    cumulative: u32,
    highest: u32,
    last_at: Instant,
    /// Its sender sends nothing after this (its deadline plus a packet lifetime).
    until: Instant,
    unacked: u32,
    ack_at: Option<Instant>,
    ack_queued: bool,
}

#[derive(Clone, Copy)]
enum AckOut {
    /// The reassembly's state.
    Progress(Key),
    Complete(Key, u32, u64),
    TooLong(Key),
    /// Not admitted: window 0.
    Closed(Key),
}

pub struct Receiver {
    cfg: LdgConfig,
    incarnation: u64,
    reassemblies_begun: u64,
    reassemblies: BTreeMap<Key, Reassembly>,
    /// Finished transfers: key -> (forgotten at, fragment count, reassembly number).
    completed: HashMap<Key, (Instant, u32, u64)>,
    completed_order: BinaryHeap<Reverse<(Instant, Key)>>,
    ready: VecDeque<(Address, Vec<u8>)>,
    bytes_held: usize,
    acks: VecDeque<AckOut>,
    /// Buffers for reassemblies, recycled (see [`Receiver::recycle`]).
    pool: Pool,
    pub counters: ReceiverCounters,
}

impl Receiver {
    /// A receiver that names itself `incarnation` in its acknowledgements (a new one for
    /// every restart, so senders know it forgot).
    pub fn new(cfg: LdgConfig, incarnation: u64) -> Result<Receiver, super::LdgError> {
        cfg.validate()?;
        Ok(Receiver {
            cfg,
            incarnation,
            reassemblies_begun: 0,
            reassemblies: BTreeMap::new(),
            completed: HashMap::new(),
            completed_order: BinaryHeap::new(),
            ready: VecDeque::new(),
            bytes_held: 0,
            acks: VecDeque::new(),
            pool: Pool::new(cfg.pool_bytes_max),
            counters: ReceiverCounters::default(),
        })
    }

    /// Bytes held: reassembling, and delivered but not taken.
    pub fn bytes_held(&self) -> usize {
        self.bytes_held
    }

    /// Transfers reassembling.
    pub fn reassembling(&self) -> usize {
        self.reassemblies.len()
    }

    fn queue_ack(&mut self, a: AckOut) {
        // Drained after every input; the bound only guards a caller that never drains.
        if self.acks.len() < self.cfg.reassemblies_max + self.cfg.completed_max {
            self.acks.push_back(a);
        }
    }

    /// A fragment arrived from `from`.
    pub fn handle_data(&mut self, now: Instant, from: Address, h: &DataHeader, payload: &[u8]) {
        self.counters.fragments += 1;
        let key = (from, h.incarnation, h.transfer);
        if let Some(&(_, count, number)) = self.completed.get(&key) {
            self.counters.duplicates += 1;
            self.queue_ack(AckOut::Complete(key, count, number));
            return;
        }
        if !self.reassemblies.contains_key(&key) {
            if h.total_len > self.cfg.message_bytes_max as u64 {
                self.counters.refused_too_long += 1;
                self.queue_ack(AckOut::TooLong(key));
                return;
            }
            let len = h.total_len as usize;
            if self.completed.len() >= self.cfg.completed_max {
                self.forget_completed(now);
            }
            if self.reassemblies.len() >= self.cfg.reassemblies_max
                || self.bytes_held + len > self.cfg.reassembly_bytes_max
                || self.completed.len() >= self.cfg.completed_max
            {
                self.counters.not_admitted += 1;
                self.queue_ack(AckOut::Closed(key));
                return;
            }
            let count = h.count();
            self.bytes_held += len;
            self.reassemblies_begun += 1;
            self.reassemblies.insert(
                key,
                Reassembly {
                    number: self.reassemblies_begun,
                    fragment_bytes: h.fragment_bytes,
                    count,
                    buf: self.pool.take(len),
                    got: Bitset::new(count),
                    got_count: 0,
                    cumulative: 0,
                    highest: 0,
                    last_at: now,
                    until: now,
                    unacked: 0,
                    ack_at: None,
                    ack_queued: false,
                },
            );
        }
        let r = self.reassemblies.get_mut(&key).expect("present");
        if r.fragment_bytes != h.fragment_bytes || r.buf.len() as u64 != h.total_len {
            self.counters.inconsistent += 1;
            return;
        }
        r.last_at = now;
        // A sender's deadline beyond ours is taken as ours: memory is not held for a stranger's
        // whim (every node of a cluster is meant to share deadline_max).
        let left = Duration::from_millis(h.deadline_ms as u64).min(self.cfg.deadline_max);
        r.until = r.until.max(now + left + self.cfg.packet_lifetime);
        if !r.got.set(h.index) {
            self.counters.duplicates += 1;
            // The sender missed an acknowledgement: say where we are.
            if !r.ack_queued {
                r.ack_queued = true;
                self.queue_ack(AckOut::Progress(key));
            }
            return;
        }
        let start = h.index as usize * r.fragment_bytes as usize;
        r.buf[start..start + payload.len()].copy_from_slice(payload);
        r.got_count += 1;
        r.highest = r.highest.max(h.index);
        while r.cumulative < r.count && r.got.get(r.cumulative) {
            r.cumulative += 1;
        }
        r.unacked += 1;
        if r.got_count == r.count {
            let r = self.reassemblies.remove(&key).expect("present");
            self.counters.delivered += 1;
            self.ready.push_back((from, r.buf));
            self.remember(key, r.until, r.count, r.number);
            self.queue_ack(AckOut::Complete(key, r.count, r.number));
            return;
        }
        let gap = h.index > r.cumulative;
        if gap || r.unacked >= self.cfg.ack_every {
            r.unacked = 0;
            r.ack_at = None;
            if !r.ack_queued {
                r.ack_queued = true;
                self.queue_ack(AckOut::Progress(key));
            }
        } else if r.ack_at.is_none() {
            r.ack_at = Some(now + self.cfg.ack_delay);
        }
    }

    /// Remembers a finished transfer until `until` (its sender is quiet by then).
    fn remember(&mut self, key: Key, until: Instant, count: u32, number: u64) {
        self.completed.insert(key, (until, count, number));
        self.completed_order.push(Reverse((until, key)));
    }

    fn forget_completed(&mut self, now: Instant) {
        while let Some(&Reverse((t, k))) = self.completed_order.peek() {
            if t > now {
                break;
            }
            self.completed_order.pop();
            if self.completed.get(&k).is_some_and(|&(u, _, _)| u == t) {
                self.completed.remove(&k);
            }
        }
    }

    /// The sender of transfer (`incarnation`, `transfer`) at `from` gave it up.
    pub fn handle_abort(&mut self, from: Address, incarnation: u64, transfer: u64) {
        if let Some(r) = self.reassemblies.remove(&(from, incarnation, transfer)) {
            self.bytes_held -= r.buf.len();
            self.counters.aborted += 1;
            self.pool.give(r.buf);
        }
    }

    /// Gives back a message buffer the application is done with (one [`Receiver::poll_message`]
    /// returned, or any other): a later reassembly may reuse it, up to `pool_bytes_max`.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.give(buf);
    }

    /// A buffer of `len` bytes from the recycled ones (or a new one); its bytes are not
    /// cleared.
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.pool.take(len)
    }

    /// Bytes of recycled buffers kept (at most `pool_bytes_max`).
    pub fn pooled_bytes(&self) -> usize {
        self.pool.bytes()
    }

    /// Whether a complete message waits to be taken.
    pub fn has_message(&self) -> bool {
        !self.ready.is_empty()
    }

    /// A message complete: its sender and bytes.
    pub fn poll_message(&mut self) -> Option<(Address, Vec<u8>)> {
        let m = self.ready.pop_front()?;
        self.bytes_held -= m.1.len();
        Some(m)
    }

    /// When [`Receiver::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.completed_order.peek().map(|Reverse((t, _))| *t);
        for r in self.reassemblies.values() {
            let x = r
                .ack_at
                .unwrap_or(r.last_at + self.cfg.reassembly_timeout)
                .min(r.last_at + self.cfg.reassembly_timeout);
            t = Some(t.map_or(x, |y| y.min(x)));
        }
        t
    }

    /// Delayed acknowledgements, expired reassemblies, forgotten transfers.
    pub fn handle_timeout(&mut self, now: Instant) {
        let timeout = self.cfg.reassembly_timeout;
        let mut expired = Vec::new();
        let mut due = Vec::new();
        for (k, r) in self.reassemblies.iter_mut() {
            if r.last_at + timeout <= now {
                expired.push(*k);
            } else if r.ack_at.is_some_and(|t| t <= now) {
                r.ack_at = None;
                r.unacked = 0;
                if !r.ack_queued {
                    r.ack_queued = true;
                    due.push(*k);
                }
            }
        }
        for k in expired {
            let r = self.reassemblies.remove(&k).expect("listed");
            self.bytes_held -= r.buf.len();
            self.counters.expired += 1;
            self.pool.give(r.buf);
        }
        for k in due {
            self.queue_ack(AckOut::Progress(k));
        }
        self.forget_completed(now);
    }

    /// The next acknowledgement: its destination and length in `buf` (at least [`ACK_BYTES_MAX`] bytes; nothing is taken from a smaller one).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(Address, usize)> {
        if buf.len() < ACK_BYTES_MAX {
            // Too small for an acknowledgement: leave them queued rather than lose one.
            return None;
        }
        let window = self.cfg.window_fragments_max as u32;
        while let Some(a) = self.acks.pop_front() {
            let mut bitmap = [0u8; BITMAP_BYTES_MAX];
            let (key, number, header_bits) = match a {
                AckOut::Progress(k) => {
                    let Some(r) = self.reassemblies.get_mut(&k) else {
                        continue;
                    };
                    r.ack_queued = false;
                    // Fragments past the cumulative point that arrived, up to the highest.
                    let mut len = 0;
                    if r.highest > r.cumulative {
                        let span = ((r.highest - r.cumulative) as usize).min(BITMAP_BYTES_MAX * 8);
                        for bit in 0..span {
                            if r.got.get(r.cumulative + 1 + bit as u32) {
                                bitmap[bit / 8] |= 1 << (bit % 8);
                                len = bit / 8 + 1;
                            }
                        }
                    }
                    (k, r.number, (AckStatus::Partial, window, r.cumulative, len))
                }
                AckOut::Complete(k, count, number) => {
                    (k, number, (AckStatus::Complete, window, count, 0))
                }
                AckOut::TooLong(k) => (k, 0, (AckStatus::TooLong, 0, 0, 0)),
                AckOut::Closed(k) => (k, 0, (AckStatus::Partial, 0, 0, 0)),
            };
            let (status, window, cumulative, len) = header_bits;
            let a = AckHeader {
                status,
                window,
                incarnation: key.1,
                receiver_incarnation: self.incarnation,
                reassembly: number,
                transfer: key.2,
                cumulative,
                bitmap: &bitmap[..len],
            };
            let n = msg::write_ack(&a, buf)?;
            self.counters.acks_sent += 1;
            return Some((key.0, n));
        }
        None
    }
}
