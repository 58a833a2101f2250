//! Byte layout of a segment: the header lines, the slot records, and the validation of both.

use super::sync::{AtomicU32, AtomicU64, Ordering};
use std::mem::{offset_of, size_of};

/// "TXCSHMR1" — first word of every segment.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"TXCSHMR1");
/// 2: a slot's length and kind share one word (`SlotHeader::meta`), and a publish writes
/// the sequence before that word.
pub(crate) const VERSION: u32 = 2;

/// Alignment of each hot header word: two cache lines, so the adjacent-line prefetcher does
/// not couple them either.
pub(crate) const LINE: usize = 128;
/// Bytes before the first slot.
pub(crate) const HEADER_BYTES: usize = 8 * LINE;
/// Bytes of the record header at the front of each slot (`seq`, `meta`).
pub(crate) const SLOT_HEADER_BYTES: usize = 16;
/// Slot strides are rounded up to this.
pub(crate) const SLOT_ALIGN: usize = 64;

/// Fewest slots in a ring.
pub const SLOT_COUNT_MIN: u32 = 2;
/// Most slots in a ring.
pub const SLOT_COUNT_MAX: u32 = 1 << 20;
/// Smallest slot payload, in bytes.
pub const SLOT_BYTES_MIN: u32 = 16;
/// Largest slot payload, in bytes.
pub const SLOT_BYTES_MAX: u32 = 1 << 20;
/// Largest segment (header plus slots), in bytes.
pub const SEGMENT_BYTES_MAX: usize = 1 << 30;

/// Record kind of a committed message.
pub(crate) const KIND_MESSAGE: u32 = 0x6d73_6701;
/// Record kind of a claim dropped without commit: the receiver discards it.
pub(crate) const KIND_SKIP: u32 = 0x6d73_6702;
/// A producer reserved the slot and has not published yet; the length half of `meta` holds its
/// pid meanwhile, so the consumer can tell a producer that died holding the slot from one still
/// writing. Kind and pid are one word, read in one load: a consumer never pairs a reservation
/// with the length of the message that replaced it.
pub(crate) const KIND_RESERVED: u32 = 0x6d73_6703;

/// A header word on its own pair of cache lines.
#[repr(C, align(128))]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct Padded<T>(pub T);

/// Written once by the owner at creation (except `closed`), read by everyone.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct Identity {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub header_bytes: AtomicU32,
    pub slot_count: AtomicU32,
    pub slot_bytes: AtomicU32,
    pub slot_stride: AtomicU32,
    pub owner_pid: AtomicU32,
    pub total_bytes: AtomicU64,
    pub owner_start_time: AtomicU64,
    pub closed: AtomicU32,
    pub owner_uid: AtomicU32,
}

/// Back-pressure: senders blocked on a full ring sleep on `seq`; the consumer bumps it when it
/// frees a slot while `waiters` is non-zero.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct SpaceWait {
    pub seq: AtomicU32,
    pub waiters: AtomicU32,
}

#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct ProducerCounters {
    pub full_rejections: AtomicU64,
    pub wakeups: AtomicU64,
    pub sender_waits: AtomicU64,
}

#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct ConsumerCounters {
    pub delivered: AtomicU64,
    /// Slots skipped because their producer died between reserving and publishing.
    pub dead_reservations: AtomicU64,
    pub dropped_bad: AtomicU64,
    pub skipped: AtomicU64,
    pub parks: AtomicU64,
    pub park_timeouts: AtomicU64,
}

#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct Header {
    pub id: Padded<Identity>,
    pub tail: Padded<AtomicU64>,
    pub head: Padded<AtomicU64>,
    pub sleeping: Padded<AtomicU32>,
    pub space: Padded<SpaceWait>,
    pub producer: Padded<ProducerCounters>,
    pub consumer: Padded<ConsumerCounters>,
    /// The port's link counters, published by its engine (zero in segments of older builds,
    /// which left this line unused).
    pub links: Padded<LinkStats>,
}

/// How many link counters the header holds (`super::LinkTotals`).
pub(crate) const LINK_STATS: usize = 12;

/// The link counters of the port (all its UDP peers), as its engine last published them.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct LinkStats {
    pub values: [AtomicU64; LINK_STATS],
}

/// Front of every slot; the payload follows.
///
/// A producer takes the slot (CAS on the tail), writes `meta = (KIND_RESERVED, pid)`, the
/// payload, then `seq = pos + 1` (Release), then `meta = (kind, len)` (Release). The consumer
/// takes a slot whose `seq` is `pos + 1` and whose `meta` is no longer a reservation, so a
/// producer that dies at any point after writing its reservation leaves a slot the consumer
/// can recover. The consumer frees a slot by advancing the header's `head` (producers reserve
/// against it); it writes nothing into the slot, so slot lines only travel from producer to
/// consumer.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub(crate) struct SlotHeader {
    pub seq: AtomicU64,
    /// Kind in the high half, length (or a reserving producer's pid) in the low half.
    pub meta: AtomicU64,
}

/// The `meta` word of a record.
pub(crate) const fn meta(kind: u32, len: u32) -> u64 {
    ((kind as u64) << 32) | len as u64
}

/// The kind half of a `meta` word.
pub(crate) const fn meta_kind(m: u64) -> u32 {
    (m >> 32) as u32
}

/// The length (or pid) half of a `meta` word.
pub(crate) const fn meta_len(m: u64) -> u32 {
    m as u32
}

// The model checker's atomics are larger than the real ones; under loom the header and slots
// live in ordinary heap memory (`Segment::model`), not at these offsets.
#[cfg(not(loom))]
const _: () = assert!(size_of::<Identity>() <= LINE);
#[cfg(not(loom))]
const _: () = assert!(size_of::<Header>() <= HEADER_BYTES);
const _: () = assert!(HEADER_BYTES.is_multiple_of(SLOT_ALIGN));
#[cfg(not(loom))]
const _: () = assert!(size_of::<SlotHeader>() == SLOT_HEADER_BYTES);
const _: () = assert!(SLOT_COUNT_MIN.is_power_of_two() && SLOT_COUNT_MAX.is_power_of_two());
const _: () = assert!(SLOT_BYTES_MIN as usize >= SLOT_HEADER_BYTES);
// The smallest ring must fit under the segment bound.
const _: () = assert!(
    HEADER_BYTES + SLOT_COUNT_MIN as usize * (SLOT_HEADER_BYTES + SLOT_BYTES_MAX as usize)
        <= SEGMENT_BYTES_MAX
);
// Lengths are stored as u32.
const _: () = assert!((SLOT_BYTES_MAX as u64) < u32::MAX as u64);

/// Geometry of a ring, computed from a validated configuration. Once built it is the only
/// source of indices: the header copy in shared memory is never consulted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub slot_count: u32,
    pub slot_bytes: u32,
    pub slot_stride: usize,
    pub total_bytes: usize,
    pub mask: u64,
}

impl Layout {
    /// Checks the bounds and computes the geometry; the error names the broken rule.
    pub fn compute(slot_count: u32, slot_bytes: u32) -> Result<Layout, &'static str> {
        if !(SLOT_COUNT_MIN..=SLOT_COUNT_MAX).contains(&slot_count) {
            return Err("slot_count must be in 2..=1048576");
        }
        if !slot_count.is_power_of_two() {
            return Err("slot_count must be a power of two");
        }
        if !(SLOT_BYTES_MIN..=SLOT_BYTES_MAX).contains(&slot_bytes) {
            return Err("slot_bytes must be in 16..=1048576");
        }
        let slot_stride = (SLOT_HEADER_BYTES + slot_bytes as usize).next_multiple_of(SLOT_ALIGN);
        // Both factors are bounded above (2^20 and < 2^21), so this cannot overflow a u64.
        let total = HEADER_BYTES as u64 + slot_count as u64 * slot_stride as u64;
        if total > SEGMENT_BYTES_MAX as u64 {
            return Err("segment size must be at most 1 GiB");
        }
        Ok(Layout {
            slot_count,
            slot_bytes,
            slot_stride,
            total_bytes: total as usize,
            mask: slot_count as u64 - 1,
        })
    }

    /// Byte offset of slot `index` (already masked).
    #[cfg_attr(loom, allow(dead_code))]
    pub fn slot_offset(&self, index: usize) -> usize {
        debug_assert!(index < self.slot_count as usize);
        HEADER_BYTES + index * self.slot_stride
    }
}

/// A snapshot of the identity words, from a mapping or from bytes read with `pread`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IdentityValues {
    pub magic: u64,
    pub version: u32,
    pub header_bytes: u32,
    pub slot_count: u32,
    pub slot_bytes: u32,
    pub slot_stride: u32,
    pub owner_pid: u32,
    pub total_bytes: u64,
    pub owner_start_time: u64,
    pub closed: u32,
    pub owner_uid: u32,
}

/// Bytes to read for [`IdentityValues::from_bytes`].
pub(crate) const IDENTITY_BYTES: usize = size_of::<Identity>();

impl IdentityValues {
    pub fn load(id: &Identity) -> IdentityValues {
        IdentityValues {
            magic: id.magic.load(Ordering::Acquire),
            version: id.version.load(Ordering::Relaxed),
            header_bytes: id.header_bytes.load(Ordering::Relaxed),
            slot_count: id.slot_count.load(Ordering::Relaxed),
            slot_bytes: id.slot_bytes.load(Ordering::Relaxed),
            slot_stride: id.slot_stride.load(Ordering::Relaxed),
            owner_pid: id.owner_pid.load(Ordering::Relaxed),
            total_bytes: id.total_bytes.load(Ordering::Relaxed),
            owner_start_time: id.owner_start_time.load(Ordering::Relaxed),
            closed: id.closed.load(Ordering::Acquire),
            owner_uid: id.owner_uid.load(Ordering::Relaxed),
        }
    }

    pub fn from_bytes(b: &[u8; IDENTITY_BYTES]) -> IdentityValues {
        let u32_at = |off: usize| u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
        let u64_at = |off: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[off..off + 8]);
            u64::from_ne_bytes(w)
        };
        IdentityValues {
            magic: u64_at(offset_of!(Identity, magic)),
            version: u32_at(offset_of!(Identity, version)),
            header_bytes: u32_at(offset_of!(Identity, header_bytes)),
            slot_count: u32_at(offset_of!(Identity, slot_count)),
            slot_bytes: u32_at(offset_of!(Identity, slot_bytes)),
            slot_stride: u32_at(offset_of!(Identity, slot_stride)),
            owner_pid: u32_at(offset_of!(Identity, owner_pid)),
            total_bytes: u64_at(offset_of!(Identity, total_bytes)),
            owner_start_time: u64_at(offset_of!(Identity, owner_start_time)),
            closed: u32_at(offset_of!(Identity, closed)),
            owner_uid: u32_at(offset_of!(Identity, owner_uid)),
        }
    }

    /// A segment of another version of txcast (its magic, another version number). Only its
    /// identity words can be trusted (they sit at the same offsets in every version so far),
    /// which is enough to tell whether its owner still lives and to reclaim it if not.
    pub fn other_version(&self) -> bool {
        self.magic == MAGIC && self.version != VERSION
    }

    /// Checks the header against the rules and the file size; the error names the broken rule.
    pub fn validate(&self, file_bytes: u64) -> Result<Layout, &'static str> {
        if self.magic != MAGIC {
            return Err("magic must be TXCSHMR1 (not a segment, or still being created)");
        }
        if self.version != VERSION {
            return Err("version must be 2");
        }
        if self.header_bytes as usize != HEADER_BYTES {
            return Err("header_bytes must be 1024");
        }
        let layout = Layout::compute(self.slot_count, self.slot_bytes)?;
        if self.slot_stride as usize != layout.slot_stride {
            return Err("slot_stride must match slot_bytes");
        }
        if self.total_bytes != layout.total_bytes as u64 {
            return Err("total_bytes must match slot_count and slot_stride");
        }
        if file_bytes != self.total_bytes {
            return Err("file size must equal total_bytes");
        }
        Ok(layout)
    }
}
