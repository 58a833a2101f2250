//! Benchmarks (DESIGN.md §7 item 9): programs that print a human table and JSON lines, with
//! medians, p99 and the baseline measured in the same run.
//!
//! `txcast bench <what> [options]` lands in [`run`]; the partner process of a two-process
//! benchmark is the same executable re-run as `txcast __bench-child <what> ...`, which lands in
//! [`child`]. [`spawn_child`] and [`wait_child`] do the re-executing. Each benchmark's options
//! are a clap struct in its module, gathered in [`Bench`].

pub mod burst;
pub mod crmem;
pub mod crmem_common;
pub mod crmem_locks;
pub mod crmem_sym;
pub mod dc;
pub mod group;
pub mod long;
mod machine;
mod mapping;
pub mod modules;
pub mod multicast;
pub mod pgbench;
pub mod rpc;
pub mod rtt;
pub mod stats;
pub mod throughput;

use std::io;
use std::ops::RangeInclusive;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Hidden subcommand under which the partner process of a benchmark runs.
pub const CHILD_SUBCOMMAND: &str = "__bench-child";

/// Exit code for a bad command line or a benchmark that does not exist yet.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for a benchmark that failed while running.
pub const EXIT_FAILED: i32 = 1;

/// The options of `txcast bench`: which benchmark, with its options.
#[derive(clap::Args, Debug)]
#[command(after_help = "--json (every benchmark): JSON lines on stdout, the human table on stderr")]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: Bench,
}

#[derive(clap::Subcommand, Debug)]
pub enum Bench {
    /// Round-trip latency between two processes, per transport
    Rtt(rtt::Args),
    /// Sender's cost of one message to 1..16 destinations: naive sendto loop, sendmmsg,
    /// txcast fan-out (engine thread), IP multicast; CPU per call
    Multicast(multicast::Args),
    /// Messages/s and one-way latency of a stream of 64-byte messages between two processes:
    /// txcast local vs a raw shared-memory ring, remote packing off vs on
    Throughput(throughput::Args),
    /// Paper 003 §4: send delay vs group size and message size (PB, BB), throughput with
    /// every member sending vs group size (PB, BB; packing off, on), parallel groups, delay vs
    /// r and message size; every member a process; raw UDP round trip as the yardstick
    Group(group::Args),
    /// Null RPC round trip local and remote against the raw UDP round trip and txcast's port
    /// round trips; multicast RPC to n servers, first / majority / all
    Rpc(rpc::Args),
    /// Round trips of long messages, 64 B to 8 MB: txcast local and remote (8,000- and
    /// 60,000-byte fragments), raw UDP, TCP over loopback (the yardstick)
    Long(long::Args),
    /// Paper 002 §4: bursts of m messages, all-to-all and one sender, for every ordering
    /// protocol with packing off and on; throughput and round latency against m, and the
    /// paper's four figures as SVG
    Burst(burst::Args),
    /// Extension modules (paper 004 §2) and Push programs (paper 001 Table 4): module
    /// round trip, module stream rate, the Appendix B multicast program
    Modules(modules::Args),
    /// CRMem (paper 004 §3): remote lock acquire + release against the lock count (Figure 6,
    /// symmetric, home in another process); mirror with one backup in another process: commit latency;
    /// synthetic and TpcB transactions per second by parallelism (Figures 7 and 8);
    /// `--config symmetric`: TpcB on 2 and 4 nodes, one process each, each node drawing over
    /// all the rows or (`--affinity branch`) running its own branches' transactions, giving
    /// the locks of other homes back after each transaction or (`--lock-keeping kept`)
    /// keeping them until recalled
    Crmem(crmem::Args),
    /// PostgreSQL's pgbench (TPC-B-like) on a throwaway cluster, fsync and synchronous
    /// commit on, optionally with a synchronous streaming standby; skipped without PostgreSQL
    Pgbench(pgbench::Args),
    /// DebitCredit on Raid (3 sites, 1 site) against PostgreSQL's pgbench alone and with a
    /// synchronous standby, same machine, fdatasync on every side
    Dc(dc::Args),
}

/// `--key` of `bench rtt` and `bench throughput`: the cluster key the txcast cases run under.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyMode {
    /// No key: no MAC, no encryption (the default)
    #[default]
    None,
    /// A cluster key: every packet carries a keyed BLAKE3 MAC
    Mac,
    /// A cluster key with `encrypt`: every packet body is encrypted (XChaCha20-Poly1305)
    Encrypt,
}

/// Carries `--key` to the partner process, which inherits the environment.
const KEY_ENV: &str = "TXCAST_BENCH_KEY";

/// Runs this process's (and its partners') txcast cases under `mode`.
pub fn set_key_mode(mode: KeyMode) {
    let name = match mode {
        KeyMode::None => "none",
        KeyMode::Mac => "mac",
        KeyMode::Encrypt => "encrypt",
    };
    std::env::set_var(KEY_ENV, name);
}

/// The cluster of the txcast cases: the default one, with the key `--key` asked for.
pub fn bench_cluster() -> txcast_port::ClusterConfig {
    let c = txcast_port::ClusterConfig::default();
    match std::env::var(KEY_ENV).as_deref() {
        Ok("mac") => c.with_key("txcast bench key", false),
        Ok("encrypt") => c.with_key("txcast bench key", true),
        _ => c,
    }
}

/// `txcast bench <what>`: runs one benchmark, returns the process exit code.
pub fn run(args: BenchArgs) -> i32 {
    match &args.what {
        Bench::Rtt(a) => rtt::run(a),
        Bench::Throughput(a) => throughput::run(a),
        Bench::Multicast(a) => multicast::run(a),
        Bench::Group(a) => group::run(a),
        Bench::Rpc(a) => rpc::run(a),
        Bench::Long(a) => long::run(a),
        Bench::Burst(a) => burst::run(a),
        Bench::Modules(a) => modules::run(a),
        Bench::Crmem(a) => crmem::run(a),
        Bench::Dc(a) => dc::run(a),
        Bench::Pgbench(a) => pgbench::run(a),
    }
}

/// `txcast __bench-child <args>`: the partner side of a two-process benchmark.
/// `TXCAST_BENCH_CHILD_CPU=N` pins it to CPU N (with `taskset -c M` on the benchmark, the
/// parent's side runs alone on M: in paper 003 every member had a machine of its own).
pub fn child(args: &[String]) -> i32 {
    if let Some(cpu) = std::env::var("TXCAST_BENCH_CHILD_CPU")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        if let Err(e) = pin_to_cpu(cpu) {
            eprintln!("txcast {CHILD_SUBCOMMAND}: cannot pin to CPU {cpu}: {e}");
            return EXIT_FAILED;
        }
    }
    let result = match args.first().map(String::as_str) {
        Some("rtt") => rtt::child(&args[1..]),
        Some("multicast") => multicast::child(&args[1..]),
        Some("throughput") => throughput::child(&args[1..]),
        Some("group") => group::child(&args[1..]),
        Some("rpc") => rpc::child(&args[1..]),
        Some("long") => long::child(&args[1..]),
        Some("burst") => burst::child(&args[1..]),
        Some("modules") => modules::child(&args[1..]),
        Some("crmem") => crmem::child(&args[1..]),
        Some("crmem-sym") => crmem_sym::child(&args[1..]),
        Some("crmem-locks") => crmem_locks::child(&args[1..]),
        other => {
            eprintln!("txcast {CHILD_SUBCOMMAND}: unknown benchmark {other:?}");
            return EXIT_USAGE;
        }
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("txcast {CHILD_SUBCOMMAND} {}: {error}", args.join(" "));
            EXIT_FAILED
        }
    }
}

/// Restricts this process to one CPU.
fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::other("CPU number out of range"));
    }
    // SAFETY: `set` is a plain bit set, zeroed and then set through the libc helpers, and
    // sched_setaffinity reads exactly `size_of::<cpu_set_t>()` bytes of it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The engine mode of a benchmark's processes: `Invoker` (the waiting thread runs the engine)
/// unless `TXCAST_BENCH_ENGINE=thread` asks for an engine thread.
pub fn engine_mode() -> txcast_port::EngineMode {
    if std::env::var("TXCAST_BENCH_ENGINE").as_deref() == Ok("thread") {
        txcast_port::EngineMode::Thread
    } else {
        txcast_port::EngineMode::Invoker
    }
}

/// Starts the partner process: this executable re-run as `__bench-child <args>`. Its stdin is
/// closed; stdout and stderr are inherited so its complaints reach the terminal.
pub fn spawn_child(args: &[String]) -> io::Result<Child> {
    let exe = std::env::current_exe()?;
    Command::new(exe)
        .arg(CHILD_SUBCOMMAND)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
}

/// Waits up to `timeout` for the partner to exit; kills it past the timeout. A non-zero exit
/// status is an error.
pub fn wait_child(child: &mut Child, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return check_status(status);
        }
        if Instant::now() >= deadline {
            // The kill can fail only if the child already exited; the wait reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("partner process did not exit within {timeout:?}; killed"),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Kills and reaps a partner that is no longer wanted (after an error on our side).
pub fn kill_child(child: &mut Child) {
    // Both fail only if the child is already gone, which is what we want anyway.
    let _ = child.kill();
    let _ = child.wait();
}

/// Ends a partner whose parent side has finished: on success waits up to `timeout` for it
/// to exit (see [`wait_child`]) and returns `outcome`; on failure gives it
/// `PARTNER_GRACE` to exit, then kills it, and returns the failure.
pub fn finish_child<T>(
    child: &mut Child,
    outcome: io::Result<T>,
    timeout: Duration,
) -> io::Result<T> {
    match outcome {
        Ok(value) => {
            wait_child(child, timeout)?;
            Ok(value)
        }
        Err(error) => {
            // Our failure is often the partner's: a partner that failed closed its port
            // first. Give it a moment to exit and print its own complaint before the kill.
            let _ = wait_child(child, PARTNER_GRACE);
            Err(error)
        }
    }
}

/// How long a failed parent lets its partner finish on its own (see [`finish_child`]).
const PARTNER_GRACE: Duration = Duration::from_millis(500);

fn check_status(status: ExitStatus) -> io::Result<()> {
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "partner process failed: {status}"
        )))
    }
}

/// The plan of `txcast bench <bench>`, or the exit code when its options do not make one: a
/// check clap could not make failed (a range, a name in a list), said as clap says its own.
pub fn plan_or_exit<P>(bench: &str, planned: Result<P, String>) -> Result<P, i32> {
    planned.map_err(|message| crate::usage_error(&["bench", bench], &message))
}

/// `--iterations` (1..=`max`) and `--warmup` (at most `max`, default the lesser of
/// `warmup_default` and the iterations), in that order.
pub fn iterations_and_warmup(
    iterations: u64,
    warmup: Option<u64>,
    warmup_default: u64,
    max: u64,
) -> Result<(u64, u64), String> {
    if !(1..=max).contains(&iterations) {
        return Err(format!("--iterations must be 1..={max}"));
    }
    let warmup = warmup.unwrap_or(warmup_default.min(iterations));
    if warmup > max {
        return Err(format!("--warmup must be at most {max}"));
    }
    Ok((iterations, warmup))
}

/// The numbers given for `--key`, each within `range`.
pub fn usize_list_in(
    key: &str,
    values: &[u64],
    range: RangeInclusive<usize>,
) -> Result<Vec<usize>, String> {
    values
        .iter()
        .map(|&n| match usize::try_from(n) {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(format!(
                "--{key}: {n} not in {}..={}",
                range.start(),
                range.end()
            )),
        })
        .collect()
}

/// Parses a count, allowing `_` separators and a `k`/`m` suffix (`20k`, `1_000_000`, `2m`).
pub fn parse_u64(text: &str) -> Result<u64, String> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (digits, scale) = match cleaned.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1_000),
        None => match cleaned.strip_suffix(['m', 'M']) {
            Some(d) => (d, 1_000_000),
            None => (cleaned.as_str(), 1),
        },
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("not a count: {text:?}"))
}

/// Owned copies of `words`, as a command line arrives.
#[cfg(test)]
pub fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// A benchmark's options struct parsed from `words`, as clap parses them after
/// `txcast bench <what>`; clap's complaint as the error. `parse(&[])` gives the defaults.
pub fn parse<A: clap::Args>(words: &[&str]) -> Result<A, String> {
    let command = A::augment_args(clap::Command::new("bench"));
    let matches = command
        .try_get_matches_from(std::iter::once("bench").chain(words.iter().copied()))
        .map_err(|e| e.to_string())?;
    A::from_arg_matches(&matches).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterations_bound_warmup_by_default() {
        assert_eq!(iterations_and_warmup(100, None, 20, 1000), Ok((100, 20)));
        assert_eq!(iterations_and_warmup(5, None, 20, 1000), Ok((5, 5)));
        assert_eq!(iterations_and_warmup(5, Some(50), 20, 1000), Ok((5, 50)));
        assert!(iterations_and_warmup(0, None, 20, 1000).is_err());
        assert!(iterations_and_warmup(5, Some(1001), 20, 1000).is_err());
    }

    #[test]
    fn usize_lists_stay_in_range() {
        assert_eq!(
            usize_list_in("dests", &[1, 17], 1..=16),
            Err("--dests: 17 not in 1..=16".to_string())
        );
        assert_eq!(usize_list_in("bytes", &[8], 8..=9), Ok(vec![8]));
    }

    #[test]
    fn counts_parse_with_suffixes() {
        assert_eq!(parse_u64("20_000"), Ok(20_000));
        assert_eq!(parse_u64("2m"), Ok(2_000_000));
        assert!(parse_u64("").is_err());
        assert!(parse_u64("-1").is_err());
        assert!(parse_u64("99999999999999999999k").is_err());
    }

    #[test]
    fn counts_and_lists_parse_through_clap() {
        let a: rtt::Args = parse(&["--iterations=5k", "--bytes", "64,1000", "--json"]).unwrap();
        assert_eq!(
            (a.iterations, a.bytes, a.json),
            (5000, vec![64, 1000], true)
        );
        assert!(parse::<rtt::Args>(&["--nope"]).is_err());
        assert!(parse::<rtt::Args>(&["--bytes"]).is_err());
        assert!(parse::<rtt::Args>(&["--json=1"]).is_err());
        assert!(parse::<rtt::Args>(&["--iterations", "x"]).is_err());
        assert!(parse::<rtt::Args>(&["extra"]).is_err());
    }
}
