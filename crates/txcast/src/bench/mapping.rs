//! A shared read-write mapping of a file, for the raw shared-memory baselines, and the
//! `/dev/shm` file through which the two processes meet.
//!
//! Rendezvous: the parent creates the file ([`ShmFile::create`]) and passes its path; the
//! partner maps it ([`Mapping::open_rendezvous`]) and sets [`Mapping::ready`]; the parent
//! waits for that ([`Mapping::wait_ready`]) and unlinks the file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How often the parent looks for the partner's `ready` during the rendezvous.
const READY_POLL: Duration = Duration::from_millis(1);

/// `len` bytes of a file mapped shared and read-write; unmapped on drop.
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access to it goes through atomics or
// through copies ordered by them, so it may move between threads.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file` (which must be at least that long).
    pub fn of(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of an open file; no Rust object aliases it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Mapping { base, len })
    }

    /// Maps the file named by the partner's rendezvous words (`<path>`), which must be `len`
    /// bytes long; `what` names the expected contents in the error otherwise.
    pub fn open_rendezvous(rendezvous: &[String], len: usize, what: &str) -> io::Result<Mapping> {
        let [path] = rendezvous else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "rendezvous: <path>",
            ));
        };
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() != len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path}: not a {len}-byte {what}"),
            ));
        }
        Mapping::of(&file, len)
    }

    /// The rendezvous word at offset 0: the partner sets it once it has mapped the file.
    pub fn ready(&self) -> &AtomicU32 {
        self.at(0)
    }

    /// Waits up to `timeout` for the partner to set [`Mapping::ready`]; false if it did not.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.ready().load(Ordering::Acquire) == 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(READY_POLL);
        }
        true
    }

    /// A reference to the `T` (an atomic) at `offset`.
    pub fn at<T>(&self, offset: usize) -> &T {
        assert!(
            offset + std::mem::size_of::<T>() <= self.len,
            "outside the mapping"
        );
        assert_eq!(offset % std::mem::align_of::<T>(), 0, "misaligned");
        // SAFETY: in bounds and aligned (asserted); the mapping outlives the reference, and the
        // callers only place atomics there.
        unsafe { &*self.base.as_ptr().add(offset).cast::<T>() }
    }

    /// A raw pointer to byte `offset` (in bounds).
    pub fn ptr(&self, offset: usize) -> *mut u8 {
        assert!(offset <= self.len, "outside the mapping");
        // SAFETY: in bounds (asserted).
        unsafe { self.base.as_ptr().add(offset) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `of` mapped; no references into it outlive `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A file in `/dev/shm` made for one rendezvous, while it still has a name; unlinked on drop
/// at the latest.
pub struct ShmFile {
    path: PathBuf,
    unlinked: bool,
}

impl ShmFile {
    /// Creates `/dev/shm/<prefix>-<pid>-<n>` (mode 0600, exclusive), sizes it to `len` bytes
    /// and maps it.
    pub fn create(prefix: &str, len: usize) -> io::Result<(ShmFile, Mapping)> {
        static SEQUENCE: AtomicU32 = AtomicU32::new(0);
        let path = PathBuf::from(format!(
            "/dev/shm/{prefix}-{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let named = ShmFile {
            path,
            unlinked: false,
        };
        file.set_len(len as u64)?;
        let mapping = Mapping::of(&file, len)?;
        Ok((named, mapping))
    }

    /// The path, as a word for the partner's command line.
    pub fn rendezvous(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// Removes the name (once the partner has mapped the file).
    pub fn unlink(&mut self) -> io::Result<()> {
        if !self.unlinked {
            self.unlinked = true;
            std::fs::remove_file(&self.path)?;
        }
        Ok(())
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        // Best effort on the error paths; the happy path unlinked already.
        let _ = self.unlink();
    }
}
