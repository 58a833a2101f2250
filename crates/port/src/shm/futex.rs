//! Shared (non-private) futex calls: the words live in memory mapped by several processes, so
//! `FUTEX_PRIVATE_FLAG` must not be used.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, for at most `timeout` (forever when `None`). Returns on a
/// wake-up, a value mismatch, the timeout, or a signal; callers re-check their condition.
/// Returns true when the timeout expired.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call (it lives in a mapping
    // the caller keeps alive); FUTEX_WAIT only reads it. `ts_ptr` is null or points to `ts`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// Wakes up to `count` waiters on `word`.
pub(crate) fn wake(word: &AtomicU32, count: i32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access memory through the
    // unused pointer arguments.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            count,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
