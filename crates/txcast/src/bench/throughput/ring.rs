//! `raw-spsc-ring`: the floor for local throughput. A single-producer single-consumer ring of
//! fixed slots in a shared mapping of a file in `/dev/shm`:
//!
//! ```text
//! offset   0   ready (u32, set by the receiver once it has mapped the file)
//! offset 128   head  (u64: messages published; written by the producer only)
//! offset 256   tail  (u64: messages consumed; written by the consumer only)
//! offset 384   slot[0] .. slot[SLOT_COUNT - 1], SLOT_STRIDE bytes each:
//!              len u32 @0 | payload @8 (at most SLOT_PAYLOAD_MAX bytes)
//! ```
//!
//! The producer writes slot `head % SLOT_COUNT` (payload, then `len`) and publishes it by
//! storing `head + 1` with Release; the consumer loads `head` with Acquire, copies the slot out
//! and frees it by storing `tail + 1` with Release. Each side keeps a cached copy of the other's
//! counter and reloads it only when the ring looks full (producer) or empty (consumer). Both
//! sides spin: the producer while the ring is full, the consumer while it is empty.
//!
//! Rendezvous: the sender creates the file (mode 0600, exclusive), sizes and maps it, passes
//! its path; the receiver maps it and sets `ready`; the sender then unlinks it and streams.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::mapping::{Mapping, ShmFile};
use super::super::rtt::{partner_gone, spin_until, PARTNER_TIMEOUT};
use super::{send_stream, with_partner, Outcome, Stream, Tally, MESSAGE_BYTES};

/// Slots in the ring: as many as a txcast port's ring has by default.
const SLOT_COUNT: u64 = 1024;
/// Bytes from one slot to the next: two cache lines, like a txcast slot holding 64 bytes.
const SLOT_STRIDE: usize = 128;
const SLOT_PAYLOAD_OFFSET: usize = 8;
const SLOT_PAYLOAD_MAX: usize = SLOT_STRIDE - SLOT_PAYLOAD_OFFSET;
/// Distance between independently written words (adjacent-line prefetch included).
const SEPARATION: usize = 128;
// The rendezvous word (`Mapping::ready`) sits at offset 0, before the head.
const HEAD_OFFSET: usize = SEPARATION;
const TAIL_OFFSET: usize = 2 * SEPARATION;
const SLOTS_OFFSET: usize = 3 * SEPARATION;
const MAPPING_BYTES: usize = SLOTS_OFFSET + SLOT_COUNT as usize * SLOT_STRIDE;

const _: () = assert!(SLOT_COUNT.is_power_of_two());
const _: () = assert!(MESSAGE_BYTES <= SLOT_PAYLOAD_MAX);
const _: () = assert!(SLOT_STRIDE.is_multiple_of(64) && SLOTS_OFFSET.is_multiple_of(64));

/// The ring's words and slots inside the shared mapping.
trait RingView {
    fn head(&self) -> &AtomicU64;
    fn tail(&self) -> &AtomicU64;
    fn slot(&self, position: u64) -> *mut u8;
}

// The baseline's hot path uses unchecked offsets, as a hand-written ring would: they are
// constants (and an index below SLOT_COUNT) inside MAPPING_BYTES.
impl RingView for Mapping {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: HEAD_OFFSET + 8 <= MAPPING_BYTES, 128-aligned, only accessed atomically.
        unsafe { &*self.ptr(0).add(HEAD_OFFSET).cast::<AtomicU64>() }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as `head`.
        unsafe { &*self.ptr(0).add(TAIL_OFFSET).cast::<AtomicU64>() }
    }

    /// The slot of position `position`.
    #[inline]
    fn slot(&self, position: u64) -> *mut u8 {
        let index = (position & (SLOT_COUNT - 1)) as usize;
        // SAFETY: index < SLOT_COUNT, so the slot lies inside the mapping.
        unsafe { self.ptr(0).add(SLOTS_OFFSET + index * SLOT_STRIDE) }
    }
}

/// The producing side.
struct Producer {
    mapping: Mapping,
    head: u64,
    tail_seen: u64,
}

impl Producer {
    #[inline]
    fn push(&mut self, message: &[u8]) -> io::Result<()> {
        debug_assert!(message.len() <= SLOT_PAYLOAD_MAX);
        if self.head - self.tail_seen == SLOT_COUNT {
            let tail = self.mapping.tail();
            let head = self.head;
            let mut seen = self.tail_seen;
            spin_until(|| {
                seen = tail.load(Ordering::Acquire);
                Ok(head - seen < SLOT_COUNT)
            })?;
            self.tail_seen = seen;
        }
        let slot = self.mapping.slot(self.head);
        // SAFETY: the slot is free (head - tail < SLOT_COUNT, the Acquire load of `tail` saw
        // the consumer finish with it) and only this producer writes it until `head` moves.
        unsafe {
            std::ptr::copy_nonoverlapping(
                message.as_ptr(),
                slot.add(SLOT_PAYLOAD_OFFSET),
                message.len(),
            );
            slot.cast::<u32>().write(message.len() as u32);
        }
        self.head += 1;
        self.mapping.head().store(self.head, Ordering::Release);
        Ok(())
    }
}

/// The consuming side.
struct Consumer {
    mapping: Mapping,
    tail: u64,
    head_seen: u64,
}

impl Consumer {
    /// Waits for the next message and copies it into `into`; returns its length.
    #[inline]
    fn pop(&mut self, into: &mut [u8; SLOT_PAYLOAD_MAX]) -> io::Result<usize> {
        if self.tail == self.head_seen {
            let head = self.mapping.head();
            let tail = self.tail;
            let mut seen = self.head_seen;
            spin_until(|| {
                seen = head.load(Ordering::Acquire);
                Ok(seen != tail)
            })?;
            self.head_seen = seen;
        }
        let slot = self.mapping.slot(self.tail);
        // SAFETY: the Acquire load of `head` ordered the producer's writes to this slot before
        // these reads, and it does not write the slot again until `tail` moves past it.
        let len = unsafe { slot.cast::<u32>().read() } as usize;
        if len > SLOT_PAYLOAD_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("slot length {len}"),
            ));
        }
        // SAFETY: as above; len is within the slot.
        unsafe {
            std::ptr::copy_nonoverlapping(slot.add(SLOT_PAYLOAD_OFFSET), into.as_mut_ptr(), len)
        };
        self.tail += 1;
        self.mapping.tail().store(self.tail, Ordering::Release);
        Ok(len)
    }
}

/// The sender: creates the ring, starts the receiver with `args` plus the ring's path, and
/// streams once the receiver has mapped it.
pub fn send(stream: &Stream, mut args: Vec<String>) -> io::Result<()> {
    let (mut named, mapping) = ShmFile::create("txcast-bench-throughput", MAPPING_BYTES)?;
    args.push(named.rendezvous());
    with_partner(&args, || {
        if !mapping.wait_ready(PARTNER_TIMEOUT) {
            return Err(partner_gone());
        }
        named.unlink()?;
        let mut producer = Producer {
            mapping,
            head: 0,
            tail_seen: 0,
        };
        send_stream(stream, |message| producer.push(message))
    })
}

/// The receiver: maps the ring at `rendezvous[0]`, says ready, takes every message.
pub fn receive(stream: &Stream, rendezvous: &[String]) -> io::Result<Outcome> {
    let mapping = Mapping::open_rendezvous(rendezvous, MAPPING_BYTES, "ring")?;
    let mut tally = Tally::new(*stream)?;
    mapping.ready().store(1, Ordering::Release);
    let mut consumer = Consumer {
        mapping,
        tail: 0,
        head_seen: 0,
    };
    let mut buffer = [0u8; SLOT_PAYLOAD_MAX];
    loop {
        let len = consumer.pop(&mut buffer)?;
        if tally.on_message(&buffer[..len])? {
            return tally.outcome();
        }
    }
}
