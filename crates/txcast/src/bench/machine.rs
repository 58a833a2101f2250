//! The machine under the benchmarks: its clocks, and what it was doing around a run (CPU
//! count, load average, how busy the CPUs were just before) for the headings.

use std::time::Duration;

/// How long a run watches the CPUs before it starts, to tell whether they are idle.
pub const BUSY_SAMPLE: Duration = Duration::from_millis(250);

/// Clock `clock` (`libc::CLOCK_MONOTONIC`, `libc::CLOCK_THREAD_CPUTIME_ID`, ...) in
/// nanoseconds.
#[inline]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into valid memory; the callers pass clocks
    // that always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPUs this process may use (1 if the system does not tell).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The 1-minute load average, if the system tells.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// How many CPUs' worth of time was spent not idle over the next [`BUSY_SAMPLE`] (from
/// `/proc/stat`), if the system tells.
pub fn cpus_busy() -> Option<f64> {
    let (total_before, idle_before) = stat_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
    std::thread::sleep(BUSY_SAMPLE);
    let (total_after, idle_after) = stat_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let total = total_after.checked_sub(total_before)?;
    let idle = idle_after.checked_sub(idle_before)?;
    (total > 0).then(|| (total - idle.min(total)) as f64 / total as f64 * cpus() as f64)
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

/// A load or busy figure with two decimals, `?` when unknown.
pub fn show(figure: Option<f64>) -> String {
    figure.map_or("?".to_string(), |f| format!("{f:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_parses() {
        assert_eq!(
            stat_ticks("cpu  10 0 5 100 3 0 2 0 0 0\ncpu0 1 2 3 4\n"),
            Some((120, 103))
        );
        assert_eq!(stat_ticks("intr 1 2"), None);
    }

    #[test]
    fn figures_show_two_decimals_or_a_question_mark() {
        assert_eq!(show(Some(1.234)), "1.23");
        assert_eq!(show(None), "?");
    }
}
