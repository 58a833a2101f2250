//! CPU time and CPU placement for `bench multicast`.
//!
//! On loopback a send wakes the receiver, and a receiver woken on the sender's core preempts
//! the sender inside its system call, so the call's wall time would include the receiver's
//! work. The bench therefore keeps the calling thread on one CPU and the partner on the others
//! ([`split_cpus`]), and measures the caller's CPU in each call with the thread CPU clock.

use std::io;

use super::super::machine::clock_ns;

/// CPU time (user + system) of this process (`libc::RUSAGE_SELF`) or of the calling thread
/// (`libc::RUSAGE_THREAD`), in nanoseconds.
pub fn rusage_ns(who: libc::c_int) -> io::Result<u64> {
    // SAFETY: rusage is plain old data, zero is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the live struct we pass.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Ok(ns(usage.ru_utime) + ns(usage.ru_stime))
}

/// CPU time of the calling thread in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
#[inline]
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The median CPU time the thread clock charges to an empty bracket (two clock reads and the
/// two monotonic-clock reads of the timed region), to subtract from each call's share.
pub fn bracket_overhead_ns(samples: usize) -> u64 {
    let mut deltas: Vec<u64> = (0..samples.max(1))
        .map(|_| {
            let c0 = thread_cpu_ns();
            let start = std::time::Instant::now();
            std::hint::black_box(start.elapsed());
            thread_cpu_ns() - c0
        })
        .collect();
    deltas.sort_unstable();
    deltas[deltas.len() / 2]
}

/// The CPUs this thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data, zero is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: fills the live set we pass, of the size we pass.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set within its bounds (CPU_SETSIZE).
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Restricts the calling thread (and the threads it starts later) to `cpus`.
pub fn pin_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain old data, zero is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET writes within the set's bounds for cpu < CPU_SETSIZE.
        if cpu < libc::CPU_SETSIZE as usize {
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
    }
    // SAFETY: passes the live set and its size.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's CPU (the first allowed) and the partner's (the rest); `None` when
/// fewer than two CPUs are allowed.
pub fn split_cpus(allowed: &[usize]) -> Option<(usize, Vec<usize>)> {
    match allowed {
        [first, rest @ ..] if !rest.is_empty() => Some((*first, rest.to_vec())),
        _ => None,
    }
}
