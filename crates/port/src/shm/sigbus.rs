//! Surviving a segment truncated under its mappings (issue 23).
//!
//! A segment is a file any process of the user may truncate; a touch of a mapped page past
//! the file's new end is a SIGBUS, which would kill the owner and every sender. The files
//! cannot be sealed (only a `memfd` can, and a `memfd` cannot be opened by path). So every
//! mapping is registered here, and a SIGBUS handler that finds the faulting address in one
//! maps anonymous zeroed memory over the whole of it (`MAP_FIXED`, the same address and
//! length) and marks it broken: the faulting access is retried on the new pages and goes
//! on, and the ring's operations check the mark and refuse the segment from then on (a
//! sender gets `Closed`, the receiver nothing). A fault anywhere else goes to the handler
//! that was installed before (the standard library's stack-overflow check, or the default
//! action). Compositors serving `wl_shm` pools do the same with clients' pools.
//!
//! The handler only loads atomics and calls `mmap`, a plain system call with no lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Mappings guarded at once; past it a mapping works unguarded (`register` says so).
pub const GUARDED_MAX: usize = 4096;

struct Range {
    /// Start address; 0 while the entry is free or being filled.
    start: AtomicUsize,
    /// Length; non-zero while the entry is taken.
    len: AtomicUsize,
    broken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Range = Range {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    broken: AtomicBool::new(false),
};

static RANGES: [Range; GUARDED_MAX] = [FREE; GUARDED_MAX];

/// The SIGBUS disposition before ours, set once before ours is installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Guards the mapping `[start, start + len)`; its entry, or `None` if the table is full or
/// the handler could not be installed.
pub(crate) fn register(start: usize, len: usize) -> Option<usize> {
    if len == 0 || !install() {
        return None;
    }
    for (i, r) in RANGES.iter().enumerate() {
        if r.len
            .compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            r.broken.store(false, Ordering::Relaxed);
            r.start.store(start, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Stops guarding entry `i` (before its mapping is unmapped).
pub(crate) fn unregister(i: usize) {
    let r = &RANGES[i];
    r.start.store(0, Ordering::Release);
    r.len.store(0, Ordering::Release);
}

/// Whether the mapping of entry `i` lost its file's pages (and now holds zeros of its own).
pub(crate) fn is_broken(i: usize) -> bool {
    RANGES[i].broken.load(Ordering::Acquire)
}

/// Installs the handler once; whether it is in place.
fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: reading the current disposition into a zeroed struct, then installing ours
        // with a valid handler and an empty mask.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return false;
            }
            let _ = PREVIOUS.set(old);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) == 0
        }
    })
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for r in RANGES.iter() {
        let start = r.start.load(Ordering::Acquire);
        if start == 0 {
            continue;
        }
        let len = r.len.load(Ordering::Acquire);
        if addr < start || addr - start >= len {
            continue;
        }
        // SAFETY: replaces exactly a mapping of ours (registered until just before it is
        // unmapped) with private anonymous memory of the same size at the same address.
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            r.broken.store(true, Ordering::Release);
            return;
        }
    }
    // Not ours: what was there before.
    match PREVIOUS.get() {
        Some(old) if old.sa_flags & libc::SA_SIGINFO != 0 && old.sa_sigaction > 1 => {
            // SAFETY: a SA_SIGINFO handler installed by someone else, called as the kernel
            // would have.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig, info, ctx);
        }
        Some(old) if old.sa_sigaction > 1 => {
            // SAFETY: a plain handler installed by someone else.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig);
        }
        _ => {
            // The default action: restore it; the access faults again and ends the process.
            // SAFETY: resetting a signal's disposition.
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        }
    }
}
