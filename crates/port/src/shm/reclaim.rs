//! Inspecting existing segments and unlinking those whose owner died.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::layout::{IdentityValues, HEADER_BYTES, IDENTITY_BYTES};
use super::liveness::ProcessIdentity;
use super::ShmError;

/// What [`reclaim_if_dead`] found.
pub(crate) enum Verdict {
    /// The owner is alive and the segment open: left alone.
    Alive,
    /// The owner was dead (or the segment closed): unlinked.
    Reclaimed,
    /// The file vanished or was replaced while we looked.
    Gone,
}

/// Reads and validates the identity of the segment at `path` without mapping it. Returns the
/// identity and the file's (dev, ino).
fn inspect(path: &Path) -> Result<(IdentityValues, (u64, u64)), ShmError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => ShmError::Permission("segment path must not be a symlink"),
            Some(libc::EACCES) => ShmError::Permission("segment must be readable by us"),
            _ => ShmError::from(e),
        })?;
    let meta = file.metadata().map_err(ShmError::Io)?;
    if !meta.file_type().is_file() {
        return Err(ShmError::BadSegment("segment must be a regular file"));
    }
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(ShmError::Permission(
            "segment must be owned by our effective uid",
        ));
    }
    if meta.len() < HEADER_BYTES as u64 {
        return Err(ShmError::BadSegment(
            "file must be at least one header long (or is still being created)",
        ));
    }
    let mut bytes = [0u8; IDENTITY_BYTES];
    file.read_exact_at(&mut bytes, 0).map_err(ShmError::from)?;
    let values = IdentityValues::from_bytes(&bytes);
    // Another version's segment is judged by its owner alone: after an upgrade, the files a
    // killed process of the old version left behind must not block its address for good.
    if !values.other_version() {
        values.validate(meta.len()).map_err(ShmError::BadSegment)?;
    }
    Ok((values, (meta.dev(), meta.ino())))
}

/// Unlinks the segment at `path` if it is valid and its owner is dead or it was closed.
/// A segment that does not validate is left alone and reported (it might be mid-creation).
pub(crate) fn reclaim_if_dead(path: &Path) -> Result<Verdict, ShmError> {
    let (values, file_id) = match inspect(path) {
        Ok(found) => found,
        Err(ShmError::NotFound) => return Ok(Verdict::Gone),
        Err(e) => return Err(e),
    };
    let owner = ProcessIdentity {
        pid: values.owner_pid,
        start_time: values.owner_start_time,
    };
    if values.closed == 0 && owner.alive() {
        return Ok(Verdict::Alive);
    }
    if values.closed == 0 {
        mark_closed(path, file_id, &values);
    }
    match unlink_if_same(path, file_id).map_err(ShmError::Io)? {
        true => Ok(Verdict::Reclaimed),
        false => Ok(Verdict::Gone),
    }
}

/// Marks the dead owner's segment at `path` (if it still is the file `(dev, ino)`) closed,
/// as its owner would have on a clean close: senders that still hold it mapped then get
/// `Closed` and look the port up again, reaching its successor, instead of filling a ring
/// nobody reads. Best effort: a sender that misses it finds the ring full and the owner dead.
fn mark_closed(path: &Path, file_id: (u64, u64), seen: &IdentityValues) {
    use super::layout::Identity;
    let Ok(file) = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    else {
        return;
    };
    if !file.metadata().is_ok_and(|m| (m.dev(), m.ino()) == file_id) {
        return;
    }
    // Still the dead owner's segment, not a successor's that got the same inode number.
    let mut bytes = [0u8; IDENTITY_BYTES];
    if file.read_exact_at(&mut bytes, 0).is_err() {
        return;
    }
    let now = IdentityValues::from_bytes(&bytes);
    if (now.magic, now.owner_pid, now.owner_start_time)
        != (seen.magic, seen.owner_pid, seen.owner_start_time)
    {
        return;
    }
    // The identity words sit at the same offsets in every version, `closed` among them.
    let at = std::mem::offset_of!(Identity, closed) as u64;
    let _ = file.write_all_at(&1u32.to_ne_bytes(), at);
}

/// Unlinks `path` only if it still names the file `(dev, ino)`; true when it did.
pub(crate) fn unlink_if_same(path: &Path, file_id: (u64, u64)) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == file_id => match fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        },
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Suffix of the name a segment is built under (`.<port file>.<pid>.<n>.building`) on a file
/// system without unnamed files, before its creator links it into place.
const BUILDING: &str = "building";

/// The `n`th name process `pid` builds a segment for `path` under: in the same directory (so
/// it can be linked into place), hidden, naming its builder, and its own.
pub(crate) fn building_path(path: &Path, pid: u32, n: u64) -> Option<std::path::PathBuf> {
    let name = path.file_name()?.to_str()?;
    Some(path.with_file_name(format!(".{name}.{pid}.{n}.{BUILDING}")))
}

/// The pid in a name `building_path` made, if it is one.
fn builder_of(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix('.')?
        .strip_suffix(BUILDING)?
        .strip_suffix('.')?;
    let (rest, n) = rest.rsplit_once('.')?;
    n.parse::<u64>().ok()?;
    rest.rsplit_once('.')?.1.parse().ok()
}

/// Scans `dir` and unlinks every segment whose owner is dead (or that was closed but not
/// removed), and every segment a process that has died left half built. Files that are not
/// segments of ours are left alone. Returns how many files were unlinked.
pub fn reclaim_dead(dir: &Path) -> io::Result<usize> {
    let mut reclaimed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let builder = entry.file_name().to_str().and_then(builder_of);
        match builder {
            Some(pid) if !super::liveness::pid_exists(pid) => {
                if fs::remove_file(entry.path()).is_ok() {
                    reclaimed += 1;
                }
            }
            Some(_) => {}
            None => {
                if let Ok(Verdict::Reclaimed) = reclaim_if_dead(&entry.path()) {
                    reclaimed += 1;
                }
            }
        }
    }
    Ok(reclaimed)
}

/// What `survey` reads of one segment, without opening it as a sender.
#[derive(Clone, Debug)]
pub struct SegmentStatus {
    pub path: std::path::PathBuf,
    pub owner_pid: u32,
    pub owner_alive: bool,
    pub closed: bool,
    pub slot_count: u32,
    pub slot_bytes: u32,
    /// Messages written and not yet taken.
    pub queued: u64,
    pub counters: super::RingCounters,
    /// The port's link counters as its engine last published them.
    pub links: super::LinkTotals,
}

/// Reads the header of every segment in `dir` (for `txcast stat`). Files that are not valid
/// segments of ours are skipped.
pub fn survey(dir: &Path) -> io::Result<Vec<SegmentStatus>> {
    use super::layout::{ConsumerCounters, Header, ProducerCounters};
    use std::mem::offset_of;
    let mut out = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let building = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(builder_of);
        if building.is_some() {
            continue;
        }
        let Ok((values, _)) = inspect(&path) else {
            continue;
        };
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        let mut header = vec![0u8; HEADER_BYTES];
        if file.read_exact_at(&mut header, 0).is_err() {
            continue;
        }
        let u64_at = |at: usize| u64::from_ne_bytes(header[at..at + 8].try_into().expect("8"));
        let producer = offset_of!(Header, producer);
        let consumer = offset_of!(Header, consumer);
        let tail = u64_at(offset_of!(Header, tail));
        let head = u64_at(offset_of!(Header, head));
        let owner = ProcessIdentity {
            pid: values.owner_pid,
            start_time: values.owner_start_time,
        };
        out.push(SegmentStatus {
            path,
            owner_pid: values.owner_pid,
            owner_alive: owner.alive(),
            closed: values.closed != 0,
            slot_count: values.slot_count,
            slot_bytes: values.slot_bytes,
            queued: tail.saturating_sub(head),
            counters: super::RingCounters {
                delivered: u64_at(consumer + offset_of!(ConsumerCounters, delivered)),
                dead_reservations: u64_at(
                    consumer + offset_of!(ConsumerCounters, dead_reservations),
                ),
                full_rejections: u64_at(producer + offset_of!(ProducerCounters, full_rejections)),
                wakeups: u64_at(producer + offset_of!(ProducerCounters, wakeups)),
                parks: u64_at(consumer + offset_of!(ConsumerCounters, parks)),
                park_timeouts: u64_at(consumer + offset_of!(ConsumerCounters, park_timeouts)),
                sender_waits: u64_at(producer + offset_of!(ProducerCounters, sender_waits)),
                dropped_bad: u64_at(consumer + offset_of!(ConsumerCounters, dropped_bad)),
                skipped: u64_at(consumer + offset_of!(ConsumerCounters, skipped)),
                reclaimed: 0,
            },
            links: {
                let at = offset_of!(Header, links);
                super::LinkTotals::from_array(std::array::from_fn(|i| u64_at(at + 8 * i)))
            },
        });
    }
    Ok(out)
}
