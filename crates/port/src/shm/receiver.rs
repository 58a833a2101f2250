//! The owner side: create (or reclaim) a segment, consume messages in place, park, close.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
// The consumer's own bookkeeping (stall timing) stays on std's atomics: no other thread
// writes it, so the model checker need not follow it.
use std::sync::atomic::AtomicU64 as LocalU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::layout::{
    meta, meta_kind, meta_len, Layout, HEADER_BYTES, KIND_MESSAGE, KIND_RESERVED, KIND_SKIP, MAGIC,
    VERSION,
};
use super::liveness::ProcessIdentity;
use super::reclaim::{self, Verdict};
use super::segment::Segment;
use super::sender::{self, Claim, RingSender};
use super::sync::{fence, futex, pid_exists, AtomicU64, Ordering};
use super::{IdleStrategy, RingConfig, RingCounters, SendError, ShmError};
use crate::idle::{Backoff, Idle};

/// Attempts at `O_EXCL` creation when the path is taken by dead owners' segments (each attempt
/// reclaims one); past this, another creator is racing us and we report `InUse`.
const CREATE_ATTEMPTS: u32 = 4;

/// The receiving end of a local port: the only consumer of its ring. `Send` and `Sync` (all
/// `&self` methods are thread-safe); consuming needs `&mut self`.
pub struct RingReceiver {
    seg: Arc<Segment>,
    /// Next position to consume; authoritative here, mirrored to the header for `len()`.
    head: u64,
    path: PathBuf,
    /// (dev, ino) of the file we created, so close never unlinks a successor's file.
    file_id: (u64, u64),
    me: ProcessIdentity,
    reclaimed: u64,
    /// The position whose reserved slot stalls the head, and when that was first seen (ns
    /// since `born`); `stall_since_ns` 0: no stall seen. A stall at another position starts
    /// the clock again.
    stall_pos: LocalU64,
    stall_since_ns: LocalU64,
    /// Sightings of a reserved head by polls (`try_recv`), which look at the clock only on
    /// every `POLL_SIGHTINGS_PER_LOOK`th.
    stall_sightings: LocalU64,
    born: Instant,
}

/// How long a reserved, unpublished head slot may stay so before the consumer asks whether
/// its producer is still alive, and how long a park may last while it waits on one.
/// Under the model checker, at once: a stall is judged on its second sighting.
const STALL_CHECK: Duration = if cfg!(loom) {
    Duration::ZERO
} else {
    Duration::from_millis(10)
};
/// A poll finds the head reserved for the moment a live producer writes it nearly every time
/// it catches up with one; it looks at the clock (to time the stall) on every this many.
/// (Every time under the model checker.)
const POLL_SIGHTINGS_PER_LOOK: u64 = if cfg!(loom) { 1 } else { 8 };

/// A new segment's file while it is built: unnamed (`O_TMPFILE`) where the file system allows
/// it, so nothing is left if its creator dies; else under a name no other creator uses
/// (`.<port>.<pid>.<n>.building`, removed by `reclaim_dead` once its builder is gone).
enum Aside {
    Unnamed(File),
    Named(File, PathBuf),
}

impl Aside {
    fn open(path: &Path) -> Result<Aside, ShmError> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let unnamed = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .open(dir);
        match unnamed {
            Ok(file) => return Ok(Aside::Unnamed(file)),
            // File systems without O_TMPFILE.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {}
            Err(e) => return Err(ShmError::from(e)),
        }
        static NEXT: LocalU64 = LocalU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let named = reclaim::building_path(path, std::process::id(), n)
            .ok_or(ShmError::InvalidConfig("segment path must name a file"))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&named)
            .map_err(ShmError::from)?;
        Ok(Aside::Named(file, named))
    }

    fn file(&self) -> &File {
        match self {
            Aside::Unnamed(f) | Aside::Named(f, _) => f,
        }
    }

    /// Gives the file the name `path`; `AlreadyExists` if something has it.
    fn link_to(&self, path: &Path) -> io::Result<()> {
        match self {
            Aside::Named(_, named) => fs::hard_link(named, path),
            Aside::Unnamed(f) => {
                use std::os::unix::ffi::OsStrExt;
                let from = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
                    .expect("no NUL in a number");
                let to = std::ffi::CString::new(path.as_os_str().as_bytes())
                    .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
                // SAFETY: two NUL-terminated paths that outlive the call.
                let rc = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        from.as_ptr(),
                        libc::AT_FDCWD,
                        to.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
        }
    }

    /// Closes the file and removes its building name, if it has one.
    fn discard(self) {
        if let Aside::Named(_, named) = self {
            let _ = fs::remove_file(named);
        }
    }
}

impl RingReceiver {
    /// Creates the segment at `path`, mode 0600: built whole aside and linked into place, never
    /// replacing a file there (the parent directory must exist, see
    /// [`ensure_private_dir`](super::ensure_private_dir)). If a segment is already there and
    /// its owner is dead (or it was closed), it is unlinked and replaced, and
    /// [`reclaimed`](Self::reclaimed) reports it; a live owner's segment gives `InUse`.
    pub fn create(path: &Path, cfg: RingConfig) -> Result<RingReceiver, ShmError> {
        let layout =
            Layout::compute(cfg.slot_count, cfg.slot_bytes).map_err(ShmError::InvalidConfig)?;
        let me = ProcessIdentity::current().map_err(ShmError::Io)?;
        // Built whole aside, then linked into place: a creator that dies part way never leaves
        // a half-made segment at the port's path, which would block the address for good.
        let aside = Aside::open(path)?;
        let (seg, file_id) = match Self::initialize(aside.file(), layout, me) {
            Ok(built) => built,
            Err(e) => {
                aside.discard();
                return Err(e);
            }
        };
        let mut reclaimed = 0;
        let linked = (|| {
            for _ in 0..CREATE_ATTEMPTS {
                match aside.link_to(path) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        match reclaim::reclaim_if_dead(path)? {
                            Verdict::Alive => return Err(ShmError::InUse),
                            Verdict::Reclaimed => reclaimed += 1,
                            Verdict::Gone => {}
                        }
                    }
                    Err(e) => return Err(ShmError::from(e)),
                }
            }
            Err(ShmError::InUse)
        })();
        aside.discard();
        linked?;
        Ok(RingReceiver {
            seg: Arc::new(seg),
            head: 0,
            path: path.to_path_buf(),
            file_id,
            me,
            reclaimed,
            stall_pos: LocalU64::new(0),
            stall_since_ns: LocalU64::new(0),
            stall_sightings: LocalU64::new(0),
            born: Instant::now(),
        })
    }

    /// A receiver over a segment in ordinary memory, for the model checker (`shm::loom`).
    /// Its owner is this process; it has no file.
    #[cfg(all(test, loom))]
    pub(crate) fn model(cfg: RingConfig) -> RingReceiver {
        let layout = Layout::compute(cfg.slot_count, cfg.slot_bytes).expect("a valid shape");
        RingReceiver {
            seg: Arc::new(Segment::model(layout)),
            head: 0,
            path: PathBuf::new(),
            file_id: (0, 0),
            me: ProcessIdentity::current().expect("own identity"),
            reclaimed: 0,
            stall_pos: LocalU64::new(0),
            stall_since_ns: LocalU64::new(0),
            stall_sightings: LocalU64::new(0),
            born: Instant::now(),
        }
    }

    /// Sizes, maps and writes a new segment (its magic last); returns the mapping and the
    /// file's (dev, ino).
    fn initialize(
        file: &File,
        layout: Layout,
        me: ProcessIdentity,
    ) -> Result<(Segment, (u64, u64)), ShmError> {
        let mapped = (|| {
            // fchmod: the mode must be exactly 0600 whatever the umask.
            file.set_permissions(Permissions::from_mode(0o600))?;
            file.set_len(layout.total_bytes as u64)?;
            // Take the memory now: a tmpfs that runs out later would kill whoever first
            // writes an untouched page (SIGBUS), the owner or any sender.
            // SAFETY: a valid descriptor and a length within the file's new size.
            let rc = unsafe {
                libc::posix_fallocate(file.as_raw_fd(), 0, layout.total_bytes as libc::off_t)
            };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            let meta = file.metadata()?;
            let seg = Segment::map(file, layout.total_bytes, layout)?;
            Ok::<_, io::Error>((seg, (meta.dev(), meta.ino())))
        })();
        let (seg, file_id) = mapped.map_err(ShmError::Io)?;
        for pos in 0..layout.slot_count as u64 {
            let slot = seg.slot(pos);
            slot.meta.store(0, Ordering::Relaxed);
            slot.seq.store(pos, Ordering::Relaxed);
        }
        let id = &seg.header().id.0;
        id.version.store(VERSION, Ordering::Relaxed);
        id.header_bytes
            .store(HEADER_BYTES as u32, Ordering::Relaxed);
        id.slot_count.store(layout.slot_count, Ordering::Relaxed);
        id.slot_bytes.store(layout.slot_bytes, Ordering::Relaxed);
        id.slot_stride
            .store(layout.slot_stride as u32, Ordering::Relaxed);
        id.owner_pid.store(me.pid, Ordering::Relaxed);
        id.total_bytes
            .store(layout.total_bytes as u64, Ordering::Relaxed);
        id.owner_start_time.store(me.start_time, Ordering::Relaxed);
        id.closed.store(0, Ordering::Relaxed);
        // SAFETY: geteuid has no preconditions.
        id.owner_uid
            .store(unsafe { libc::geteuid() }, Ordering::Relaxed);
        // Last, with Release: an opener that sees the magic sees everything above.
        id.magic.store(MAGIC, Ordering::Release);
        Ok((seg, file_id))
    }

    /// True when creation replaced a dead owner's segment at the same path.
    /// The segment's file was truncated under the mapping (by another process of the user):
    /// the ring takes and delivers nothing any more (see `shm::sigbus`).
    pub fn is_broken(&self) -> bool {
        self.seg.is_broken()
    }

    pub fn reclaimed(&self) -> bool {
        self.reclaimed > 0
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `f` on the next message in place (zero-copy), then releases its slot. Skip
    /// records are discarded and bad records (length beyond the slot, unknown kind) are
    /// dropped and counted, up to one ring's worth per call. `None` when nothing is ready.
    #[inline]
    pub fn try_recv<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let seg = &*self.seg;
        // A segment truncated under us is zeros of our own from then on (`shm::sigbus`): no
        // slot's sequence matches its position, so nothing is ever ready; no check needed on
        // this path, which a spinning receiver runs for every poll.
        let slot_bytes = seg.slot_bytes();
        let consumer = &seg.header().consumer.0;
        for _ in 0..seg.layout.slot_count {
            let pos = self.head;
            let slot = seg.slot(pos);
            if slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
                // Unpublished. If it is reserved, its producer may have died writing it:
                // then only the consumer can move the ring on.
                if self.poll_found_reserved() {
                    continue;
                }
                return None;
            }
            let m = slot.meta.load(Ordering::Acquire);
            let (kind, len) = (meta_kind(m), meta_len(m) as usize);
            if kind == KIND_MESSAGE && len <= slot_bytes {
                let release = SlotRelease {
                    seg,
                    head: &mut self.head,
                };
                seg.note_read(pos);
                // SAFETY: the slot at `pos` is ready and ours until released (by `release`,
                // also if `f` panics); `len <= slot_bytes` keeps the slice inside the slot. The
                // higher-ranked `f` cannot keep the slice past the call.
                let bytes = unsafe { std::slice::from_raw_parts(seg.slot_data(pos), len) };
                let r = f(bytes);
                drop(release);
                bump(&consumer.delivered);
                return Some(r);
            }
            if kind == KIND_RESERVED {
                // Published sequence, reservation not yet replaced: its producer is between
                // its last two stores (or died there).
                if self.poll_found_reserved() {
                    continue;
                }
                return None;
            }
            if kind == KIND_SKIP {
                bump(&consumer.skipped);
            } else {
                bump(&consumer.dropped_bad);
            }
            drop(SlotRelease {
                seg,
                head: &mut self.head,
            });
        }
        None
    }

    /// Copies the next message into `buf` and returns its length. A message longer than `buf`
    /// is truncated to `buf.len()` bytes (the returned length tells); a buffer of
    /// `slot_bytes` never truncates.
    pub fn recv_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.try_recv(|msg| {
            let n = msg.len().min(buf.len());
            buf[..n].copy_from_slice(&msg[..n]);
            msg.len()
        })
    }

    /// True when the slot at the head is ready (a message, or a skip/bad record that
    /// `try_recv` will discard).
    pub fn has_ready(&self) -> bool {
        let slot = self.seg.slot(self.head);
        let published = slot.seq.load(Ordering::Acquire) == self.head.wrapping_add(1);
        let reserved = meta_kind(slot.meta.load(Ordering::Acquire)) == KIND_RESERVED;
        if published && !reserved {
            return true;
        }
        if reserved {
            return self.recover_dead_reservation(true);
        }
        false
    }

    /// For `try_recv`, out of its inlined body: if the head slot is reserved, sees whether its
    /// producer died (as `recover_dead_reservation`, on every `POLL_SIGHTINGS_PER_LOOK`th
    /// sighting); true if that made the head ready.
    #[inline(never)]
    fn poll_found_reserved(&self) -> bool {
        meta_kind(self.seg.slot(self.head).meta.load(Ordering::Relaxed)) == KIND_RESERVED
            && self.recover_dead_reservation(false)
    }

    /// The head slot is reserved but unpublished. Normally its producer is writing it; if it
    /// stays so for `STALL_CHECK` and the producer's process is gone, publish the slot as a
    /// skip record so the ring moves on. True if that made the head ready. A poll
    /// (`every_time` false) looks only on every `POLL_SIGHTINGS_PER_LOOK`th call.
    #[cold]
    #[inline(never)]
    fn recover_dead_reservation(&self, every_time: bool) -> bool {
        // A poll looks at once when a stall starts (so it has a start), then on every
        // `POLL_SIGHTINGS_PER_LOOK`th sighting.
        let timing = self.stall_since_ns.load(Ordering::Relaxed) != 0
            && self.stall_pos.load(Ordering::Relaxed) == self.head;
        if !every_time && timing {
            let n = self.stall_sightings.load(Ordering::Relaxed).wrapping_add(1);
            self.stall_sightings.store(n, Ordering::Relaxed);
            if !n.is_multiple_of(POLL_SIGHTINGS_PER_LOOK) {
                return false;
            }
        }
        let pos = self.head;
        let now = (self.born.elapsed().as_nanos() as u64).max(1);
        let since = self.stall_since_ns.load(Ordering::Relaxed);
        if since == 0 || self.stall_pos.load(Ordering::Relaxed) != pos {
            self.stall_pos.store(pos, Ordering::Relaxed);
            self.stall_since_ns.store(now, Ordering::Relaxed);
            return false;
        }
        // Saturating: two threads may look at once (`has_ready` takes `&self`), one storing a
        // later start than the other's reading of the clock.
        if now.saturating_sub(since) < STALL_CHECK.as_nanos() as u64 {
            return false;
        }
        self.stall_since_ns.store(now, Ordering::Relaxed);
        let slot = self.seg.slot(pos);
        // Kind and pid come from one load, so the pid is the reserving producer's own.
        let m = slot.meta.load(Ordering::Acquire);
        if meta_kind(m) != KIND_RESERVED || pid_exists(meta_len(m)) {
            return false;
        }
        // The producer is gone, so nothing else writes this word; the exchange still keeps us
        // off a slot whose owner turned out to be alive after all (a pid check is a snapshot).
        if slot
            .meta
            .compare_exchange(m, meta(KIND_SKIP, 0), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
        bump(&self.seg.header().consumer.0.dead_reservations);
        true
    }

    /// Idles until a record is ready (true), the timeout passes, or a [`RingWaker`] interrupts
    /// (false when nothing is ready). `timeout: None` waits indefinitely. After `true`,
    /// `try_recv` may still return `None` if the ready record was a skip or bad record.
    pub fn wait(&mut self, strategy: IdleStrategy, timeout: Option<Duration>) -> bool {
        if self.has_ready() {
            return true;
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait_until(strategy, deadline)
    }

    /// [`wait`](Self::wait) with an absolute deadline (`None`: no deadline), for callers that
    /// already hold one and should not read the clock again.
    pub fn wait_until(&mut self, strategy: IdleStrategy, deadline: Option<Instant>) -> bool {
        if self.has_ready() {
            return true;
        }
        let mut backoff = Backoff::for_strategy(strategy);
        loop {
            if self.has_ready() {
                return true;
            }
            if self.seg.interrupt.load(Ordering::Relaxed)
                && self.seg.interrupt.swap(false, Ordering::SeqCst)
            {
                return self.has_ready();
            }
            match backoff.idle(deadline) {
                Idle::Park => return self.park(deadline),
                Idle::Expired => return self.has_ready(),
                what => Backoff::pause(what),
            }
        }
    }

    /// Announce, re-check, sleep (Dekker pairing with `Segment::wake_receiver`): we store
    /// `sleeping = 1`, fence, re-check the ring and the interrupt flag, then FUTEX_WAIT while
    /// the word is still 1. A producer publishes, fences, and if it sees 1 swaps it to 0 and
    /// wakes us; either we see its message or it sees our flag, so no wake-up is lost.
    fn park(&mut self, deadline: Option<Instant>) -> bool {
        let header = self.seg.header();
        let sleeping = &header.sleeping.0;
        loop {
            let remaining = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return self.has_ready();
                    }
                    Some(d - now)
                }
                None => None,
            };
            // While the head waits on a reserved slot, wake now and then to check its producer.
            let remaining = if self.head_reserved() {
                Some(remaining.map_or(STALL_CHECK, |r| r.min(STALL_CHECK)))
            } else {
                remaining
            };
            sleeping.store(super::segment::SLEEPING_ON_FUTEX, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.has_ready() {
                sleeping.store(0, Ordering::Relaxed);
                return true;
            }
            if self.seg.interrupt.swap(false, Ordering::SeqCst) {
                sleeping.store(0, Ordering::Relaxed);
                return self.has_ready();
            }
            bump(&header.consumer.0.parks);
            if futex::wait(sleeping, 1, remaining) {
                bump(&header.consumer.0.park_timeouts);
            }
            sleeping.store(0, Ordering::Relaxed);
            if self.has_ready() {
                return true;
            }
            if self.seg.interrupt.swap(false, Ordering::SeqCst) {
                return self.has_ready();
            }
        }
    }

    fn head_reserved(&self) -> bool {
        meta_kind(self.seg.slot(self.head).meta.load(Ordering::Relaxed)) == KIND_RESERVED
    }

    /// Parks in poll(2) on `fds` (the port's sockets) until one is readable, a local sender
    /// rings the doorbell, or `timeout` passes; true if a record is ready afterwards. Senders
    /// see `SLEEPING_ON_SOCKET` and send a [`DOORBELL`](super::DOORBELL) datagram to the
    /// address they set with [`RingSender::set_doorbell`](super::RingSender::set_doorbell)
    /// instead of waking the futex. Same Dekker pairing as the futex park.
    pub fn park_on_sockets(&mut self, fds: &mut [libc::pollfd], timeout: Duration) -> bool {
        self.park_with(timeout, |t| crate::mmsg::ppoll_for(fds, t))
    }

    /// [`RingReceiver::park_on_sockets`] with the sleep itself left to `sleep` (called with
    /// how long it may last, unless a message or a wake-up is already there): senders see this
    /// receiver asleep on its socket for its duration and ring its doorbell.
    pub fn park_with(&mut self, timeout: Duration, sleep: impl FnOnce(Duration)) -> bool {
        let header = self.seg.header();
        let sleeping = &header.sleeping.0;
        sleeping.store(super::segment::SLEEPING_ON_SOCKET, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // An interruption ends the park before it starts, and stays marked for the caller's
        // `take_interrupt`.
        if self.has_ready() || self.seg.interrupt.load(Ordering::Relaxed) {
            sleeping.store(super::segment::SLEEPING_NO, Ordering::Relaxed);
            return self.has_ready();
        }
        bump(&header.consumer.0.parks);
        let timeout = if self.head_reserved() {
            timeout.min(STALL_CHECK)
        } else {
            timeout
        };
        sleep(timeout);
        sleeping.store(super::segment::SLEEPING_NO, Ordering::SeqCst);
        self.has_ready()
    }

    /// For a receiver whose thread sleeps elsewhere (an engine thread serving this port on
    /// its own sleep): marks it asleep on its socket, so senders ring its doorbell, and says
    /// whether a record is ready already (then it must not sleep). The same Dekker pairing as
    /// [`RingReceiver::park_with`]; [`RingReceiver::awake`] ends it.
    pub fn arm_socket_wake(&mut self) -> bool {
        let sleeping = &self.seg.header().sleeping.0;
        sleeping.store(super::segment::SLEEPING_ON_SOCKET, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.has_ready()
    }

    /// Marks this receiver awake (after [`RingReceiver::arm_socket_wake`]).
    pub fn awake(&mut self) {
        self.seg
            .header()
            .sleeping
            .0
            .store(super::segment::SLEEPING_NO, Ordering::SeqCst);
    }

    /// Wakes this receiver if it is parked (or makes its next park return at once).
    pub fn wake(&self) {
        wake_segment(&self.seg);
    }

    /// Whether a [`RingWaker`] (or [`RingReceiver::wake`]) interrupted this receiver since it
    /// last looked; clears the mark.
    pub fn take_interrupt(&self) -> bool {
        self.seg.interrupt.load(Ordering::Relaxed)
            && self.seg.interrupt.swap(false, Ordering::SeqCst)
    }

    /// A handle other threads can use to wake this receiver.
    pub fn waker(&self) -> RingWaker {
        RingWaker {
            seg: Arc::clone(&self.seg),
        }
    }

    /// An in-process producer over the same mapping (e.g. for an engine thread delivering
    /// remote messages into this port). It gets `Closed` once the receiver is closed.
    pub fn producer(&self) -> RingSender {
        RingSender::from_segment(Arc::clone(&self.seg), self.me)
    }

    /// In-process non-blocking send into this ring (same as `producer().try_send`).
    pub fn try_push(&self, msg: &[u8]) -> Result<(), SendError> {
        let r = self.seg.try_send(msg);
        if r == Err(SendError::Full) {
            self.seg.count_full();
        }
        r
    }

    /// In-process claim (same as `producer().claim`).
    pub fn claim(&self, len: usize) -> Result<Claim<'_>, SendError> {
        sender::claim_on(&self.seg, len)
    }

    /// Active records: reserved or published but not yet consumed.
    pub fn len(&self) -> usize {
        let tail = self.seg.header().tail.0.load(Ordering::Acquire);
        tail.wrapping_sub(self.head)
            .min(self.seg.layout.slot_count as u64) as usize
    }

    /// True when no record is active.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ring's shape.
    pub fn config(&self) -> RingConfig {
        RingConfig {
            slot_count: self.seg.layout.slot_count,
            slot_bytes: self.seg.layout.slot_bytes,
        }
    }

    /// Counters from the segment header, plus this receiver's reclaim count.
    pub fn counters(&self) -> RingCounters {
        let h = self.seg.header();
        let (p, c) = (&h.producer.0, &h.consumer.0);
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RingCounters {
            delivered: get(&c.delivered),
            dead_reservations: get(&c.dead_reservations),
            full_rejections: get(&p.full_rejections),
            wakeups: get(&p.wakeups),
            parks: get(&c.parks),
            park_timeouts: get(&c.park_timeouts),
            sender_waits: get(&p.sender_waits),
            dropped_bad: get(&c.dropped_bad),
            skipped: get(&c.skipped),
            reclaimed: self.reclaimed,
        }
    }

    /// Marks the ring closed (senders get `Closed`, blocked senders wake), and unlinks the
    /// file. Dropping the receiver does the same.
    pub fn close(self) {}

    #[cfg(all(test, not(loom)))]
    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }
}

impl Drop for RingReceiver {
    fn drop(&mut self) {
        // A model check that failed unwinds out of loom's scheduler, which then takes no more
        // atomic operations: touching the model here would abort the test binary.
        #[cfg(loom)]
        if std::thread::panicking() {
            return;
        }
        self.seg.header().id.0.closed.store(1, Ordering::Release);
        self.seg.wake_senders();
        let _ = reclaim::unlink_if_same(&self.path, self.file_id);
    }
}

/// Wakes a parked [`RingReceiver`] from another thread of the owner process.
#[derive(Clone)]
pub struct RingWaker {
    seg: Arc<Segment>,
}

impl RingWaker {
    /// Wakes the receiver if parked; otherwise its next `wait` returns at once.
    pub fn wake(&self) {
        wake_segment(&self.seg);
    }
}

fn wake_segment(seg: &Segment) {
    // An exchange, not a store: on x86 the same instruction (a SeqCst store is an xchg), and
    // loom 0.7 can let a plain store slip between the read and the write of the receiver's
    // concurrent `swap` (tokio-rs/loom#254), a lost interrupt that the hardware never shows.
    seg.interrupt.swap(true, Ordering::SeqCst);
    seg.wake_receiver();
}

/// Consumer-only counter: a plain load and store (no locked instruction).
fn bump(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Releases the slot at `*head` to producers (also on unwind out of a `try_recv` callback)
/// and advances the head.
struct SlotRelease<'a> {
    seg: &'a Segment,
    head: &'a mut u64,
}

impl Drop for SlotRelease<'_> {
    fn drop(&mut self) {
        // Producers reserve against the head alone, so the slot itself is not written: the
        // consumer never takes a producer's cache line for its own (its sequence word,
        // `pos + 1` now, cannot match a later lap's `pos + lap + 1`).
        let pos = *self.head;
        *self.head = pos.wrapping_add(1);
        self.seg
            .header()
            .head
            .0
            .store(*self.head, Ordering::Release);
        self.seg.wake_senders();
    }
}
