//! A mapped segment: the mapping itself, typed access to the header and slots, and the producer
//! half of the ring (reserve, publish, wake the receiver), shared by remote senders and the
//! owner's in-process producers.

use std::fs::File;
use std::io;
use std::ptr::NonNull;

use super::layout::{meta, Header, Layout, SlotHeader, KIND_MESSAGE, KIND_RESERVED};
#[cfg(not(loom))]
use super::layout::{HEADER_BYTES, SLOT_HEADER_BYTES};
use super::sync::{fence, futex, my_pid, AtomicBool, AtomicU64, Ordering};
use super::SendError;

/// One `mmap` of a whole segment file, with the geometry validated when it was mapped.
pub(crate) struct Segment {
    /// The mapping's first byte: header at offset 0, slots after it.
    #[cfg(not(loom))]
    base: NonNull<u8>,
    /// The mapping itself (shared, read-write), unmapped when dropped.
    #[cfg(not(loom))]
    _map: memmap2::MmapRaw,
    /// Its entry among the mappings guarded against truncation (`super::sigbus`).
    #[cfg(not(loom))]
    guard: Option<usize>,
    /// Under the model checker, the same words in ordinary memory.
    #[cfg(loom)]
    model: ModelMemory,
    pub layout: Layout,
    /// Process-local: set by [`RingWaker::wake`](super::RingWaker) so a parked receiver returns.
    pub interrupt: AtomicBool,
    /// Process-local: where to ring a receiver that parks in poll(2) on its socket rather than
    /// on the futex (see [`SLEEPING_ON_SOCKET`]).
    pub doorbell: std::sync::OnceLock<std::net::SocketAddr>,
    /// Process-local: the consumer's head as last read from the header. Producers reserve
    /// against it and read the header's copy (a line the consumer writes) only when it says
    /// the ring is full, so a send does not wait on a cache line from the consumer's core.
    cached_head: AtomicU64,
}

/// `sleeping` word values: awake, parked on the futex, parked in poll(2) on a socket.
pub(crate) const SLEEPING_NO: u32 = 0;
pub(crate) const SLEEPING_ON_FUTEX: u32 = 1;
pub(crate) const SLEEPING_ON_SOCKET: u32 = 2;

/// The datagram that wakes a receiver parked on its socket. Not a txcast packet (too short
/// for a header); receivers recognise and discard it.
pub const DOORBELL: &[u8; 4] = b"TXDB";

/// Sends a doorbell datagram to `to` (a port's socket) from this process's doorbell socket.
pub(crate) fn send_doorbell(to: std::net::SocketAddr) {
    if let Some(sock) = doorbell_socket() {
        let _ = sock.send_to(DOORBELL, to);
    }
}

fn doorbell_socket() -> Option<&'static std::net::UdpSocket> {
    static SOCKET: std::sync::OnceLock<Option<std::net::UdpSocket>> = std::sync::OnceLock::new();
    SOCKET
        .get_or_init(|| {
            let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).ok()?;
            s.set_nonblocking(true).ok()?;
            Some(s)
        })
        .as_ref()
}

// SAFETY: the mapping is plain shared memory; all access to the shared words goes through
// atomics, and payload bytes are only touched by the holder of a reserved or ready slot.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` only exposes atomic operations and slot access governed by the
// ring protocol.
unsafe impl Sync for Segment {}

impl Segment {
    /// Maps `map_bytes` of `file` read-write and shared. `layout` must describe at most
    /// `map_bytes` bytes.
    #[cfg(not(loom))]
    pub fn map(file: &File, map_bytes: usize, layout: Layout) -> io::Result<Segment> {
        assert!(map_bytes >= HEADER_BYTES && layout.total_bytes <= map_bytes);
        let map = memmap2::MmapOptions::new().len(map_bytes).map_raw(file)?;
        let base = NonNull::new(map.as_mut_ptr()).expect("mmap returned null");
        Ok(Segment {
            base,
            guard: super::sigbus::register(base.as_ptr() as usize, map_bytes),
            _map: map,
            layout,
            interrupt: AtomicBool::new(false),
            doorbell: std::sync::OnceLock::new(),
            cached_head: AtomicU64::new(0),
        })
    }

    #[cfg(loom)]
    pub fn map(_file: &File, _map_bytes: usize, _layout: Layout) -> io::Result<Segment> {
        Err(io::Error::other("a segment is not mapped under loom"))
    }

    /// A segment in ordinary memory for the model checker, initialized as
    /// `RingReceiver::create` initializes a new mapping.
    #[cfg(loom)]
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn model(layout: Layout) -> Segment {
        let slots: Box<[SlotHeader]> = (0..layout.slot_count as u64)
            .map(|pos| SlotHeader {
                seq: AtomicU64::new(pos),
                meta: AtomicU64::new(0),
            })
            .collect();
        let data_bytes = layout.slot_count as usize * layout.slot_bytes as usize;
        let data = Box::into_raw(vec![0u8; data_bytes].into_boxed_slice());
        Segment {
            model: ModelMemory {
                header: Box::default(),
                slots,
                data: NonNull::new(data.cast::<u8>()).expect("a box is not null"),
                data_bytes,
                access: (0..layout.slot_count)
                    .map(|_| loom::cell::UnsafeCell::new(()))
                    .collect(),
            },
            layout,
            interrupt: AtomicBool::new(false),
            doorbell: std::sync::OnceLock::new(),
            cached_head: AtomicU64::new(0),
        }
    }

    #[cfg(not(loom))]
    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned and at least HEADER_BYTES long; Header consists of
        // atomics, valid for any bit pattern.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    #[cfg(loom)]
    pub fn header(&self) -> &Header {
        &self.model.header
    }

    /// The record header of the slot holding position `pos`.
    #[cfg(not(loom))]
    pub fn slot(&self, pos: u64) -> &SlotHeader {
        let offset = self.layout.slot_offset((pos & self.layout.mask) as usize);
        // SAFETY: offset + stride <= total_bytes <= map_bytes by the layout; the offset is a
        // multiple of 64, so the SlotHeader atomics are aligned.
        unsafe { &*self.base.as_ptr().add(offset).cast::<SlotHeader>() }
    }

    #[cfg(loom)]
    pub fn slot(&self, pos: u64) -> &SlotHeader {
        &self.model.slots[(pos & self.layout.mask) as usize]
    }

    /// Start of the payload of the slot holding position `pos`; `slot_bytes` bytes are valid.
    #[cfg(not(loom))]
    pub fn slot_data(&self, pos: u64) -> *mut u8 {
        let offset = self.layout.slot_offset((pos & self.layout.mask) as usize);
        // SAFETY: offset + SLOT_HEADER_BYTES + slot_bytes <= offset + stride <= map_bytes.
        unsafe { self.base.as_ptr().add(offset + SLOT_HEADER_BYTES) }
    }

    #[cfg(loom)]
    pub fn slot_data(&self, pos: u64) -> *mut u8 {
        let index = (pos & self.layout.mask) as usize;
        // SAFETY: index < slot_count, so the slot's payload lies inside `data`.
        unsafe {
            self.model
                .data
                .as_ptr()
                .add(index * self.layout.slot_bytes as usize)
        }
    }

    /// The producer holding position `pos` writes its payload from here on. Nothing in
    /// production; under loom, a write access to the slot that loom checks is ordered after
    /// every earlier access (a data race on the payload otherwise).
    #[inline(always)]
    pub fn note_write(&self, _pos: u64) {
        #[cfg(loom)]
        self.model.access[(_pos & self.layout.mask) as usize].with_mut(|_| ());
    }

    /// The consumer reads the payload at `pos` from here on: as `note_write`, a read access.
    #[inline(always)]
    pub fn note_read(&self, _pos: u64) {
        #[cfg(loom)]
        self.model.access[(_pos & self.layout.mask) as usize].with(|_| ());
    }

    pub fn slot_bytes(&self) -> usize {
        self.layout.slot_bytes as usize
    }

    pub fn is_closed(&self) -> bool {
        self.header().id.0.closed.load(Ordering::Acquire) != 0
    }

    /// The file was truncated under the mapping, whose pages are now zeros of this process's
    /// own (see `super::sigbus`): nothing written or read here reaches anyone.
    #[cfg(not(loom))]
    pub fn is_broken(&self) -> bool {
        self.guard.is_some_and(super::sigbus::is_broken)
    }

    #[cfg(loom)]
    pub fn is_broken(&self) -> bool {
        false
    }

    /// Whether a slot is free (a claim would likely succeed now).
    pub fn has_room(&self) -> bool {
        let header = self.header();
        let pos = header.tail.0.load(Ordering::Relaxed);
        pos.wrapping_sub(header.head.0.load(Ordering::Acquire)) < self.layout.slot_count as u64
    }

    /// Reserves the next position for a producer: `Full` when every slot holds a message the
    /// consumer has not released. The consumer publishes its head after releasing a slot, so a
    /// position less than one lap past a head we read is free.
    #[inline]
    pub fn reserve(&self) -> Result<u64, SendError> {
        if self.is_closed() || self.is_broken() {
            return Err(SendError::Closed);
        }
        let header = self.header();
        let tail = &header.tail.0;
        let lap = self.layout.slot_count as u64;
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            // Acquire (here and on the header's head): the consumer's release of the slot one
            // lap back happens before our writes into it.
            if pos.wrapping_sub(self.cached_head.load(Ordering::Acquire)) >= lap {
                let head = header.head.0.load(Ordering::Acquire);
                self.cached_head.store(head, Ordering::Release);
                if pos.wrapping_sub(head) >= lap {
                    // Full, unless our view of the tail is stale (other producers moved it
                    // on, and the consumer with it). A scribbled head makes this Full for
                    // good, never a spin.
                    let current = tail.load(Ordering::Relaxed);
                    if current == pos {
                        return Err(SendError::Full);
                    }
                    pos = current;
                    continue;
                }
            }
            match tail.compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.slot(pos)
                        .meta
                        .store(meta(KIND_RESERVED, my_pid()), Ordering::Release);
                    self.note_write(pos);
                    return Ok(pos);
                }
                Err(current) => pos = current,
            }
        }
    }

    /// Publishes the record at the reserved position `pos` and wakes a parked receiver.
    pub fn publish(&self, pos: u64, len: usize, kind: u32) {
        debug_assert!(len <= self.slot_bytes());
        self.note_write(pos);
        let slot = self.slot(pos);
        // The sequence first: until `meta` follows, the consumer sees a published slot that
        // is still reserved and waits (or, if we die here, recovers it by our pid).
        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
        slot.meta.store(meta(kind, len as u32), Ordering::Release);
        self.wake_receiver();
    }

    /// Dekker pairing with [`RingReceiver::park`](super::RingReceiver): the publish (or the
    /// interrupt flag) is ordered before the read of `sleeping` by a SeqCst fence, and the
    /// receiver orders its store of `sleeping` before its re-check of the ring the same way, so
    /// at least one side sees the other.
    pub fn wake_receiver(&self) {
        fence(Ordering::SeqCst);
        let header = self.header();
        let sleeping = &header.sleeping.0;
        if sleeping.load(Ordering::Relaxed) == SLEEPING_NO {
            return;
        }
        match sleeping.swap(SLEEPING_NO, Ordering::SeqCst) {
            SLEEPING_NO => {}
            SLEEPING_ON_SOCKET => {
                header.producer.0.wakeups.fetch_add(1, Ordering::Relaxed);
                match (self.doorbell.get(), doorbell_socket()) {
                    (Some(to), Some(sock)) => {
                        // Lost only if the socket buffer is full, and then the receiver has
                        // datagrams to wake it anyway.
                        let _ = sock.send_to(DOORBELL, to);
                    }
                    _ => futex::wake(sleeping, 1),
                }
            }
            _ => {
                header.producer.0.wakeups.fetch_add(1, Ordering::Relaxed);
                futex::wake(sleeping, 1);
            }
        }
    }

    /// Wakes every sender blocked on a full ring (after the consumer freed a slot or on close),
    /// but only when someone is waiting. Dekker pairing with `RingSender::wait_for_space`.
    pub fn wake_senders(&self) {
        fence(Ordering::SeqCst);
        let space = &self.header().space.0;
        if space.waiters.load(Ordering::Relaxed) != 0 {
            space.seq.fetch_add(1, Ordering::SeqCst);
            futex::wake(&space.seq, i32::MAX);
        }
    }

    /// Non-blocking send of one message (one copy, no system call unless the receiver parks).
    pub fn try_send(&self, msg: &[u8]) -> Result<(), SendError> {
        self.try_send_prefixed(&[], msg)
    }

    /// Non-blocking send of `prefix` followed by `msg` as one message.
    #[inline]
    pub fn try_send_prefixed(&self, prefix: &[u8], msg: &[u8]) -> Result<(), SendError> {
        let max = self.slot_bytes();
        let len = prefix.len() + msg.len();
        if len > max {
            return Err(SendError::TooLong { len, max });
        }
        let pos = self.reserve()?;
        let data = self.slot_data(pos);
        // SAFETY: the reserved slot's payload is ours until publish; it has slot_bytes >= len
        // bytes, and the sources are distinct Rust slices.
        unsafe {
            std::ptr::copy_nonoverlapping(prefix.as_ptr(), data, prefix.len());
            std::ptr::copy_nonoverlapping(msg.as_ptr(), data.add(prefix.len()), msg.len());
        }
        self.publish(pos, len, KIND_MESSAGE);
        Ok(())
    }

    pub fn count_full(&self) {
        self.header()
            .producer
            .0
            .full_rejections
            .fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(not(loom))]
impl Drop for Segment {
    fn drop(&mut self) {
        // Before the mapping goes (the fields drop after this).
        if let Some(i) = self.guard {
            super::sigbus::unregister(i);
        }
    }
}

/// A segment's words and payload in ordinary memory, for the model checker.
#[cfg(loom)]
struct ModelMemory {
    header: Box<Header>,
    slots: Box<[SlotHeader]>,
    /// `slot_count * slot_bytes` payload bytes, from a boxed slice freed on drop.
    data: NonNull<u8>,
    data_bytes: usize,
    /// One per slot: stands for its payload in loom's data-race check.
    access: Box<[loom::cell::UnsafeCell<()>]>,
}

#[cfg(loom)]
impl Drop for ModelMemory {
    fn drop(&mut self) {
        let data = std::ptr::slice_from_raw_parts_mut(self.data.as_ptr(), self.data_bytes);
        // SAFETY: `data` came from `Box::into_raw` of a slice of this length, freed only here.
        drop(unsafe { Box::from_raw(data) });
    }
}
