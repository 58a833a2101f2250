//! CPU time and CPU placement for `bench multicast`.
//!
//! On loopback a send wakes the receiver, and a receiver woken on the sender's core preempts
//! the sender inside its system call, so the call's wall time would include the receiver's
//! work. The bench therefore keeps the calling thread on one CPU and the partner on the others
//! ([`split_cpus`]), and measures the caller's CPU in each call with the thread CPU clock.

use std::io;

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
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into the live timespec we pass; the clock id is valid on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

/// How long the run watches the CPUs before it starts, to tell whether they are idle.
pub const BUSY_SAMPLE: std::time::Duration = std::time::Duration::from_millis(250);

/// How many CPUs' worth of time was spent not idle over the next [`BUSY_SAMPLE`] (from
/// `/proc/stat`), if the system tells.
pub fn cpus_busy() -> Option<f64> {
    let (total_before, idle_before) = stat_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
    std::thread::sleep(BUSY_SAMPLE);
    let (total_after, idle_after) = stat_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let total = total_after.checked_sub(total_before)?;
    let idle = idle_after.checked_sub(idle_before)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (total > 0).then(|| (total - idle.min(total)) as f64 / total as f64 * cpus as f64)
}

/// Total and idle (idle + iowait) ticks of the `cpu ` line of `/proc/stat`.
pub fn stat_ticks(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some((total, idle))
}
