//! `raw-shm-spin` and `raw-shm-futex`: the floors. Two mailboxes in a shared mapping of a file
//! in `/dev/shm`, one per direction, each on its own cache lines:
//!
//! ```text
//! offset 0                      header: ready (u32, set by the partner once mapped)
//! offset 128                    mailbox parent -> partner
//! offset 128 + MAILBOX_BYTES    mailbox partner -> parent
//! mailbox: seq AtomicU64 @0 | waiters AtomicU32 @8 | len AtomicU32 @12 | payload @16
//! ```
//!
//! The sender copies the payload in, stores `len`, then bumps `seq` with Release; the receiver
//! waits for `seq` to move (Acquire), then copies `len` bytes out. Ping-pong guarantees a
//! mailbox is never written while its reader is still copying out.
//!
//! Waiting: `raw-shm-spin` spins on `seq`. `raw-shm-futex` parks at once on a (non-private)
//! futex on the low 32 bits of `seq`, after announcing itself in `waiters`; the sender calls
//! FUTEX_WAKE only when `waiters` is set. Both sides use SeqCst for the seq store / waiters
//! load and waiters store / seq load pairs, so a wake cannot be lost; FUTEX_WAIT rechecks the
//! word in the kernel in any case.
//!
//! Rendezvous: the parent creates the file (mode 0600, exclusive), sizes and maps it, and
//! passes its path; the partner maps it and sets `ready`; the parent then unlinks it.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::super::mapping::{Mapping, ShmFile};
use super::{partner_gone, spin_until, Echo, Listener, PingPong, MESSAGE_BYTES_MAX};

/// Distance between independently written fields: two cache lines, so the adjacent-line
/// prefetcher does not couple them either.
const SEPARATION: usize = 128;
const HEADER_BYTES: usize = SEPARATION;
const PAYLOAD_OFFSET: usize = 16;
const PAYLOAD_BYTES_MAX: usize = MESSAGE_BYTES_MAX;
const MAILBOX_BYTES: usize = (PAYLOAD_OFFSET + PAYLOAD_BYTES_MAX).div_ceil(SEPARATION) * SEPARATION;
const MAPPING_BYTES: usize = HEADER_BYTES + 2 * MAILBOX_BYTES;
const TO_PARTNER_OFFSET: usize = HEADER_BYTES;
const TO_PARENT_OFFSET: usize = HEADER_BYTES + MAILBOX_BYTES;

const _: () = assert!(
    PAYLOAD_OFFSET >= 16,
    "payload overlaps seq, waiters and len"
);
const _: () = assert!(MAILBOX_BYTES / SEPARATION * SEPARATION == MAILBOX_BYTES);
const _: () = assert!(TO_PARENT_OFFSET - TO_PARTNER_OFFSET >= PAYLOAD_OFFSET + PAYLOAD_BYTES_MAX);
const _: () = assert!(TO_PARENT_OFFSET + PAYLOAD_OFFSET + PAYLOAD_BYTES_MAX <= MAPPING_BYTES);
const _: () = assert!(PAYLOAD_BYTES_MAX <= u32::MAX as usize);

/// The futex word is the low half of the 64-bit `seq`.
#[cfg(target_endian = "little")]
const FUTEX_WORD_OFFSET: usize = 0;
#[cfg(target_endian = "big")]
const FUTEX_WORD_OFFSET: usize = 4;

/// How long one FUTEX_WAIT may sleep before the waiter looks at the clock again.
const FUTEX_WAIT_SLICE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Spin,
    Futex,
}

/// The two mailboxes inside the shared mapping.
trait Mailboxes {
    fn mailbox(&self, offset: usize) -> Mailbox;
}

impl Mailboxes for Mapping {
    fn mailbox(&self, offset: usize) -> Mailbox {
        debug_assert!(offset + MAILBOX_BYTES <= MAPPING_BYTES);
        debug_assert_eq!(
            offset / SEPARATION * SEPARATION,
            offset,
            "mailbox alignment"
        );
        Mailbox {
            base: self.ptr(offset),
        }
    }
}

/// One direction's mailbox inside a [`Mapping`] (which must outlive it).
#[derive(Clone, Copy)]
struct Mailbox {
    base: *mut u8,
}

impl Mailbox {
    fn seq(&self) -> &AtomicU64 {
        // SAFETY: 128-aligned, in the mapping, accessed only atomically.
        unsafe { &*self.base.cast::<AtomicU64>() }
    }

    fn waiters(&self) -> &AtomicU32 {
        // SAFETY: as `seq`, at offset 8.
        unsafe { &*self.base.add(8).cast::<AtomicU32>() }
    }

    fn len(&self) -> &AtomicU32 {
        // SAFETY: as `seq`, at offset 12.
        unsafe { &*self.base.add(12).cast::<AtomicU32>() }
    }

    fn futex_word(&self) -> *mut u32 {
        // SAFETY: within `seq`.
        unsafe { self.base.add(FUTEX_WORD_OFFSET).cast::<u32>() }
    }

    fn payload(&self) -> *mut u8 {
        // SAFETY: in the mapping; PAYLOAD_BYTES_MAX bytes follow.
        unsafe { self.base.add(PAYLOAD_OFFSET) }
    }
}

/// One side of the connection: sends into `outbox`, receives from `inbox`.
struct ShmEndpoint {
    outbox: Mailbox,
    inbox: Mailbox,
    sent: u64,
    received: u64,
    wait: Wait,
    buffer: Vec<u8>,
    // Last: the mailboxes point into it.
    _mapping: Mapping,
}

// SAFETY: the mailboxes point into the mapping owned by the same value.
unsafe impl Send for ShmEndpoint {}

impl ShmEndpoint {
    fn new(mapping: Mapping, outbox: usize, inbox: usize, wait: Wait, bytes: usize) -> Self {
        ShmEndpoint {
            outbox: mapping.mailbox(outbox),
            inbox: mapping.mailbox(inbox),
            sent: 0,
            received: 0,
            wait,
            buffer: vec![0; bytes],
            _mapping: mapping,
        }
    }

    fn send(&mut self, message: &[u8]) -> io::Result<()> {
        if message.len() > PAYLOAD_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "message too long",
            ));
        }
        // SAFETY: the payload area holds PAYLOAD_BYTES_MAX bytes and the reader is not
        // looking at it (it has answered the previous message, or there was none).
        unsafe {
            std::ptr::copy_nonoverlapping(message.as_ptr(), self.outbox.payload(), message.len())
        };
        self.outbox
            .len()
            .store(message.len() as u32, Ordering::Relaxed);
        self.sent += 1;
        match self.wait {
            Wait::Spin => self.outbox.seq().store(self.sent, Ordering::Release),
            Wait::Futex => {
                self.outbox.seq().store(self.sent, Ordering::SeqCst);
                if self.outbox.waiters().load(Ordering::SeqCst) != 0 {
                    futex_wake(self.outbox.futex_word());
                }
            }
        }
        Ok(())
    }

    fn receive(&mut self, into: &mut [u8]) -> io::Result<usize> {
        let expected = self.received + 1;
        let seq = self.inbox.seq();
        let arrived = match self.wait {
            Wait::Spin => {
                let mut arrived = 0;
                spin_until(|| {
                    arrived = seq.load(Ordering::Acquire);
                    Ok(arrived != self.received)
                })?;
                arrived
            }
            Wait::Futex => self.park_until_moved()?,
        };
        if arrived != expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("mailbox seq {arrived}, expected {expected}"),
            ));
        }
        self.received = expected;
        let len = self.inbox.len().load(Ordering::Relaxed) as usize;
        if len > PAYLOAD_BYTES_MAX || len > into.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message of {len} bytes, room for {}", into.len()),
            ));
        }
        // SAFETY: the Acquire/SeqCst load of `seq` ordered the sender's copy before this one,
        // and the sender does not write again until we answer.
        unsafe { std::ptr::copy_nonoverlapping(self.inbox.payload(), into.as_mut_ptr(), len) };
        Ok(len)
    }

    /// Waits on the futex until `seq` moves past `received`; returns the new `seq`.
    fn park_until_moved(&self) -> io::Result<u64> {
        let seq = self.inbox.seq();
        let waiters = self.inbox.waiters();
        let deadline = Instant::now() + super::PARTNER_TIMEOUT;
        waiters.store(1, Ordering::SeqCst);
        let result = loop {
            let now = seq.load(Ordering::SeqCst);
            if now != self.received {
                break Ok(now);
            }
            if Instant::now() >= deadline {
                break Err(partner_gone());
            }
            futex_wait(
                self.inbox.futex_word(),
                self.received as u32,
                FUTEX_WAIT_SLICE,
            );
        };
        waiters.store(0, Ordering::Relaxed);
        result
    }
}

/// FUTEX_WAIT (shared, not private: the other side is another process) while `*word ==
/// expected`, for at most `timeout`. Spurious returns are fine: the caller rechecks.
fn futex_wait(word: *mut u32, expected: u32, timeout: Duration) {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is an aligned u32 inside a live shared mapping; the kernel only reads it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT,
            expected,
            &timeout as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn futex_wake(word: *mut u32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE does not even read the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE,
            1i32,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

struct ShmListener {
    file: ShmFile,
    mapping: Option<Mapping>,
    wait: Wait,
}

pub fn listen_spin(bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(bytes, Wait::Spin)
}

pub fn listen_futex(bytes: usize) -> io::Result<Box<dyn Listener>> {
    listen(bytes, Wait::Futex)
}

pub fn connect_spin(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>> {
    connect(rendezvous, bytes, Wait::Spin)
}

pub fn connect_futex(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>> {
    connect(rendezvous, bytes, Wait::Futex)
}

fn listen(_bytes: usize, wait: Wait) -> io::Result<Box<dyn Listener>> {
    let (file, mapping) = ShmFile::create("txcast-bench", MAPPING_BYTES)?;
    Ok(Box::new(ShmListener {
        file,
        mapping: Some(mapping),
        wait,
    }))
}

fn connect(rendezvous: &[String], bytes: usize, wait: Wait) -> io::Result<Box<dyn Echo>> {
    let mapping = Mapping::open_rendezvous(rendezvous, MAPPING_BYTES, "rtt mapping")?;
    mapping.ready().store(1, Ordering::Release);
    let endpoint = ShmEndpoint::new(mapping, TO_PARENT_OFFSET, TO_PARTNER_OFFSET, wait, bytes);
    Ok(Box::new(endpoint))
}

impl Listener for ShmListener {
    fn rendezvous(&self) -> Vec<String> {
        vec![self.file.rendezvous()]
    }

    fn accept(mut self: Box<Self>) -> io::Result<Box<dyn PingPong>> {
        let mapping = self
            .mapping
            .take()
            .ok_or_else(|| io::Error::other("no mapping"))?;
        if !mapping.wait_ready(super::PARTNER_TIMEOUT) {
            return Err(partner_gone());
        }
        self.file.unlink()?;
        let endpoint = ShmEndpoint::new(mapping, TO_PARTNER_OFFSET, TO_PARENT_OFFSET, self.wait, 0);
        Ok(Box::new(endpoint))
    }
}

impl PingPong for ShmEndpoint {
    fn ping(&mut self, message: &[u8], reply: &mut [u8]) -> io::Result<usize> {
        self.send(message)?;
        self.receive(reply)
    }
}

impl Echo for ShmEndpoint {
    fn serve(&mut self, round_trips: u64) -> io::Result<()> {
        let mut buffer = std::mem::take(&mut self.buffer);
        for _ in 0..round_trips {
            let n = self.receive(&mut buffer)?;
            self.send(&buffer[..n])?;
        }
        self.buffer = buffer;
        Ok(())
    }
}
