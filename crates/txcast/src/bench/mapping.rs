//! A shared read-write mapping of a file, for the raw shared-memory baselines.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

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

    /// The rendezvous word at offset 0: the partner sets it once it has mapped the file.
    pub fn ready(&self) -> &AtomicU32 {
        self.at(0)
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
