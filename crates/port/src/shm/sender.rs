//! The producer side: open and validate a segment, send, block for space, claim/commit.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::layout::{IdentityValues, Layout, HEADER_BYTES, KIND_MESSAGE, KIND_SKIP};
use super::liveness::ProcessIdentity;
use super::segment::Segment;
use super::sync::{fence, futex, spin_loop, Ordering};
use super::{SendError, ShmError, SEGMENT_BYTES_MAX};

/// Busy retries of a full ring before a sender sleeps on the back-pressure futex (one under
/// the model checker, where each retry multiplies the interleavings to explore).
const SEND_SPINS: u32 = if cfg!(loom) { 1 } else { 256 };
/// Longest single sleep of a blocked sender; between sleeps it checks the owner is alive.
const SEND_PARK_SLICE: Duration = Duration::from_millis(20);

/// A producer handle on a ring. Many senders (processes and threads) may send concurrently;
/// a `RingSender` is `Send + Sync` and cheap to clone.
#[derive(Clone)]
pub struct RingSender {
    seg: Arc<Segment>,
    owner: ProcessIdentity,
}

impl RingSender {
    /// Writes the port's link counters into its segment's header, for `txcast stat`.
    pub fn publish_links(&self, totals: &super::LinkTotals) {
        let line = &self.seg.header().links.0.values;
        for (slot, value) in line.iter().zip(totals.to_array()) {
            slot.store(value, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(crate) fn from_segment(seg: Arc<Segment>, owner: ProcessIdentity) -> RingSender {
        RingSender { seg, owner }
    }

    /// Opens the segment at `path` and validates it: a regular file owned by our effective uid
    /// with mode exactly 0600, the magic and version, a configuration in bounds and a size
    /// consistent with the header; then that it is open and its owner alive. A segment still
    /// being created (empty, or its magic not yet written) is `NotFound`, as before it exists.
    pub fn open(path: &Path) -> Result<RingSender, ShmError> {
        let file = open_segment_file(path)?;
        let meta = file.metadata().map_err(ShmError::Io)?;
        if !meta.file_type().is_file() {
            return Err(ShmError::BadSegment("segment must be a regular file"));
        }
        check_owner_and_mode(&meta)?;
        let file_bytes = meta.len();
        if file_bytes == 0 {
            // Created this moment by the port's owner, not yet sized: no port there yet.
            return Err(ShmError::NotFound);
        }
        if file_bytes < HEADER_BYTES as u64 {
            return Err(ShmError::BadSegment(
                "file must be at least one header long",
            ));
        }
        if file_bytes > SEGMENT_BYTES_MAX as u64 {
            return Err(ShmError::BadSegment("file must be at most 1 GiB"));
        }
        // Map only the header first: the geometry is not trusted until validated.
        let probe = Layout {
            slot_count: 0,
            slot_bytes: 0,
            slot_stride: 0,
            total_bytes: HEADER_BYTES,
            mask: 0,
        };
        let values = {
            let head = Segment::map(&file, HEADER_BYTES, probe).map_err(ShmError::Io)?;
            IdentityValues::load(&head.header().id.0)
        };
        if values.magic == 0 {
            // Sized but its header not yet written (the owner writes the magic last): no
            // port there yet, as for a path not yet created.
            return Err(ShmError::NotFound);
        }
        if values.other_version() {
            // Not one we can talk to; if its owner is gone, it is the leftover of a dead
            // process of another version, to be replaced when the port opens again.
            let owner = ProcessIdentity {
                pid: values.owner_pid,
                start_time: values.owner_start_time,
            };
            return Err(if owner.alive() {
                ShmError::BadSegment("version must be 2 (a port of another txcast version)")
            } else {
                ShmError::OwnerDead
            });
        }
        let layout = values.validate(file_bytes).map_err(ShmError::BadSegment)?;
        let seg = Segment::map(&file, layout.total_bytes, layout).map_err(ShmError::Io)?;
        // Re-read through the full mapping: the words must not have changed under us.
        if IdentityValues::load(&seg.header().id.0).validate(file_bytes) != Ok(layout) {
            return Err(ShmError::BadSegment("header changed while opening"));
        }
        if values.closed != 0 {
            return Err(ShmError::Closed);
        }
        let owner = ProcessIdentity {
            pid: values.owner_pid,
            start_time: values.owner_start_time,
        };
        if !owner.alive() {
            return Err(ShmError::OwnerDead);
        }
        Ok(RingSender {
            seg: Arc::new(seg),
            owner,
        })
    }

    /// Non-blocking send: `Full` when every slot holds an unconsumed message.
    #[inline]
    pub fn try_send(&self, msg: &[u8]) -> Result<(), SendError> {
        self.try_send_prefixed(&[], msg)
    }

    /// [`try_send`](Self::try_send) of `prefix` followed by `msg` as one message (a header
    /// before a payload, with no copy to join them first).
    #[inline]
    pub fn try_send_prefixed(&self, prefix: &[u8], msg: &[u8]) -> Result<(), SendError> {
        let r = self.seg.try_send_prefixed(prefix, msg);
        if r == Err(SendError::Full) {
            self.seg.count_full();
        }
        r
    }

    /// Sends, blocking while the ring is full (spin briefly, then sleep on the back-pressure
    /// futex). `Timeout` at the deadline; `OwnerDead` if the owner dies while we wait.
    pub fn send_timeout(&self, msg: &[u8], timeout: Duration) -> Result<(), SendError> {
        let deadline = Instant::now().checked_add(timeout);
        self.send_until(msg, deadline)
    }

    fn send_until(&self, msg: &[u8], deadline: Option<Instant>) -> Result<(), SendError> {
        for _ in 0..SEND_SPINS {
            match self.seg.try_send(msg) {
                Err(SendError::Full) => spin_loop(),
                other => return other,
            }
        }
        let mut last_owner_check = Instant::now();
        loop {
            match self.wait_for_space(msg, deadline) {
                Err(SendError::Full) => {}
                other => return other,
            }
            if last_owner_check.elapsed() >= SEND_PARK_SLICE {
                if !self.owner.alive() {
                    return Err(SendError::OwnerDead);
                }
                last_owner_check = Instant::now();
            }
        }
    }

    /// Blocks until a slot may be free (the caller retries its claim), the deadline passes
    /// (`Timeout`), or one `SEND_PARK_SLICE` elapses (`Full`: check the owner, then call again).
    /// For callers that build messages with [`claim`](Self::claim) rather than `send_timeout`.
    pub fn wait_for_room(&self, deadline: Option<Instant>) -> Result<(), SendError> {
        if self.seg.is_closed() {
            return Err(SendError::Closed);
        }
        // A consumer at work frees a slot within a fraction of a microsecond: look a few
        // times before paying for a sleep and the consumer's wake-up call.
        for _ in 0..SEND_SPINS {
            if self.seg.has_room() {
                return Ok(());
            }
            spin_loop();
        }
        let room = || {
            if self.seg.has_room() {
                Ok(())
            } else {
                Err(SendError::Full)
            }
        };
        match self.sleep_for_space(deadline, room) {
            Err(SendError::Full) => room(),
            r => r,
        }
    }

    /// One try of a send after it failed for want of space (the message, retried).
    fn wait_for_space(&self, msg: &[u8], deadline: Option<Instant>) -> Result<(), SendError> {
        self.sleep_for_space(deadline, || self.seg.try_send(msg))
    }

    /// One sleep on the back-pressure futex (at most `SEND_PARK_SLICE`): announces us in
    /// `waiters`, reads `seq`, then runs `attempt`, and sleeps only if it still finds the ring
    /// full, so a slot freed in between is never missed (Dekker pairing with
    /// `Segment::wake_senders`).
    fn sleep_for_space<R>(
        &self,
        deadline: Option<Instant>,
        attempt: impl FnOnce() -> Result<R, SendError>,
    ) -> Result<R, SendError> {
        let remaining = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    self.seg.count_full();
                    return Err(SendError::Timeout);
                }
                (d - now).min(SEND_PARK_SLICE)
            }
            None => SEND_PARK_SLICE,
        };
        let header = self.seg.header();
        let space = &header.space.0;
        space.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let seen = space.seq.load(Ordering::SeqCst);
        let r = attempt();
        if matches!(r, Err(SendError::Full)) {
            header
                .producer
                .0
                .sender_waits
                .fetch_add(1, Ordering::Relaxed);
            futex::wait(&space.seq, seen, Some(remaining));
        }
        space.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Reserves a slot and lends its first `len` bytes for building a message in place.
    /// [`Claim::commit`] publishes it; dropping the claim publishes a skip record instead.
    #[inline]
    pub fn claim(&self, len: usize) -> Result<Claim<'_>, SendError> {
        claim_on(&self.seg, len)
    }

    /// Where to send the doorbell datagram when the receiver parks on its socket (the
    /// receiving port's UDP address). Set once; later calls are ignored.
    /// For the receiver's own thread, awake after sleeping on its socket: clears the
    /// receiver's "asleep" mark, so that what it delivers into its ring itself rings no
    /// doorbell. (Any message published after this is seen by the receiver's re-check of the
    /// ring once its park returns.)
    pub(crate) fn receiver_awake(&self) {
        self.seg
            .header()
            .sleeping
            .0
            .store(super::segment::SLEEPING_NO, Ordering::SeqCst);
    }

    pub fn set_doorbell(&self, to: std::net::SocketAddr) {
        let _ = self.seg.doorbell.set(to);
    }

    /// Whether a claim would likely find a free slot now.
    pub fn has_room(&self) -> bool {
        self.seg.has_room()
    }

    /// Largest message a slot holds.
    pub fn slot_bytes(&self) -> usize {
        self.seg.slot_bytes()
    }

    /// True while the owner process is alive (a system call and a `/proc` read: not for the
    /// per-message path).
    pub fn owner_alive(&self) -> bool {
        self.owner.alive()
    }

    /// True once the owner has closed the ring.
    pub fn is_closed(&self) -> bool {
        self.seg.is_closed()
    }
}

#[inline]
pub(crate) fn claim_on(seg: &Segment, len: usize) -> Result<Claim<'_>, SendError> {
    let max = seg.slot_bytes();
    if len > max {
        return Err(SendError::TooLong { len, max });
    }
    match seg.reserve() {
        Ok(pos) => Ok(Claim {
            seg,
            pos,
            len,
            published: false,
        }),
        Err(e) => {
            if e == SendError::Full {
                seg.count_full();
            }
            Err(e)
        }
    }
}

fn open_segment_file(path: &Path) -> Result<File, ShmError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ShmError::NotFound,
            io::ErrorKind::PermissionDenied => {
                ShmError::Permission("segment must be readable and writable by us")
            }
            _ if e.raw_os_error() == Some(libc::ELOOP) => {
                ShmError::Permission("segment path must not be a symlink")
            }
            _ => ShmError::Io(e),
        })
}

pub(crate) fn check_owner_and_mode(meta: &std::fs::Metadata) -> Result<(), ShmError> {
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(ShmError::Permission(
            "segment must be owned by our effective uid",
        ));
    }
    if meta.mode() & 0o7777 != 0o600 {
        return Err(ShmError::Permission("segment mode must be exactly 0600"));
    }
    Ok(())
}

/// A reserved slot being built in place. Derefs to the first `len` bytes of the slot (their
/// prior contents are unspecified). Publish with [`commit`](Claim::commit) or
/// [`commit_len`](Claim::commit_len); dropping it unpublished releases the slot as a skip
/// record the receiver discards, so the ring never wedges.
pub struct Claim<'a> {
    seg: &'a Segment,
    pos: u64,
    len: usize,
    published: bool,
}

impl Claim<'_> {
    /// Publishes all `len` claimed bytes.
    #[inline]
    pub fn commit(self) {
        let len = self.len;
        self.commit_len(len);
    }

    /// Publishes only the first `n` bytes. Panics if `n` exceeds the claimed length (a bug).
    #[inline]
    pub fn commit_len(mut self, n: usize) {
        assert!(n <= self.len, "commit_len({n}) beyond claimed {}", self.len);
        self.published = true;
        self.seg.publish(self.pos, n, KIND_MESSAGE);
    }

    /// Claimed length.
    pub fn capacity(&self) -> usize {
        self.len
    }
}

impl Deref for Claim<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: the slot at `pos` is reserved by this claim until published; its payload has
        // slot_bytes >= len valid bytes inside the mapping, which `seg` keeps alive.
        unsafe { std::slice::from_raw_parts(self.seg.slot_data(self.pos), self.len) }
    }
}

impl DerefMut for Claim<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference into the slot.
        unsafe { std::slice::from_raw_parts_mut(self.seg.slot_data(self.pos), self.len) }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.seg.publish(self.pos, 0, KIND_SKIP);
        }
    }
}
