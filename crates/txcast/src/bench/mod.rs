//! Benchmarks (DESIGN.md §7 item 9): programs that print a human table and JSON lines, with
//! medians, p99 and the baseline measured in the same run.
//!
//! `txcast bench <what> [options]` lands in [`run`]; the partner process of a two-process
//! benchmark is the same executable re-run as `txcast __bench-child <what> ...`, which lands in
//! [`child`]. [`spawn_child`] and [`wait_child`] do the re-executing; [`Options`] parses
//! `--key value` options.

pub mod burst;
pub mod crmem;
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

const USAGE: &str = "\
usage: txcast bench <what> [options]

  rtt         round-trip latency between two processes, per transport
              [--iterations N] [--warmup N] [--bytes 64,1000] [--cases a,b,c] [--json]
              cases: raw-udp-blocking raw-udp-busypoll unix-dgram pipe raw-shm-spin raw-shm-futex
  multicast   sender's cost of one message to 1..16 destinations: naive sendto loop,
              sendmmsg, txcast fan-out (engine thread), IP multicast; CPU per call
              [--iterations N] [--warmup N] [--bytes 20,1000] [--dests 1,2,4,8,16]
              [--methods a,b] [--json]
              methods: naive-sendto sendmmsg-inline txcast-fanout ip-multicast
                       (opt-in: txcast-fanout-park)
  throughput  messages/s and one-way latency of a stream of 64-byte messages between two
              processes: txcast local vs a raw shared-memory ring, remote packing off vs on
              [--messages N] [--remote-messages N] [--warmup N] [--latency-every K]
              [--delay-us D] [--remote-idle spin|park] [--repeat R] [--cases a,b,c] [--json]
              cases: raw-spsc-ring txcast-local txcast-remote-pack-off txcast-remote-pack-on
  group       paper 003 §4: send delay vs group size and message size (PB, BB), throughput
              with every member sending (packing off, on), parallel groups, delay vs r;
              every member a process; raw UDP round trip as the yardstick
              [--cases delay,throughput,parallel,resilience] [--sizes 2,3,4,8,16]
              [--bytes 0,1024,4096,8000] [--methods pb,bb] [--iterations N] [--seconds S]
  rpc         null RPC round trip local and remote against the raw UDP round trip and
              txcast's port round trips; multicast RPC to n servers, first / majority / all
              [--cases null,multicast] [--servers 1,2,4,8,16] [--iterations N]
              [--multicast-iterations N]
  long        round trips of long messages, 64 B to 8 MB: txcast local and remote (8,000- and
              60,000-byte fragments), raw UDP, TCP over loopback (the yardstick)
              [--bytes 64,...,8000000] [--cases a,b,c] [--iterations-max N]
  burst       paper 002 §4: bursts of m messages, all-to-all and one sender, for every
              ordering protocol with packing off and on; throughput and round latency
              against m, and the paper's four figures as SVG
              [--protocols sequencer,totem,total,dynseq,dynord] [--packs off,adaptive]
              [--experiments all,one] [--m 1,10,100,1000,5000] [--members 3] [--bytes 64]
              [--point-seconds 20] [--svg DIR]

  modules     extension modules (paper 004 §2) and Push programs (paper 001 Table 4): module
              PING/PONG round trip against raw busy-polling UDP and the parked application
              round trip; module stream rate against unpacked application messages; the
              Appendix B multicast program against native fan-out and a loop of sends
              [--sections latency,rate,push] [--bytes 8,64,256,1000] [--exchanges N]
              [--messages N] [--dests 1,2,4,8,16] [--invokes N] [--repeat R]

  crmem       CRMem (paper 004 §3), mirror with one backup in another process: commit
              latency against the remote port round trip; synthetic and TpcB transactions
              per second by parallelism (Figures 7 and 8)
              [--sections commit,synthetic,tpcb] [--commits N] [--parallel 1,2,4,8,16]
              [--seconds S]

  pgbench     PostgreSQL's pgbench (TPC-B-like) on a throwaway cluster, fsync and synchronous
              commit on, optionally with a synchronous streaming standby: the DebitCredit
              yardstick; skipped when PostgreSQL is not installed
              [--clients 8] [--threads 2] [--seconds 20] [--scale 1] [--standby]

  dc          DebitCredit on Raid (3 sites, 1 site) against PostgreSQL's pgbench alone and
              with a synchronous standby, same machine, fdatasync on every side
              [--seconds S] [--clients N] [--rounds R] [--pg-seconds S] [--no-pg]

  --json      JSON lines on stdout, the human table on stderr
";

/// `txcast bench <args>`: runs one benchmark, returns the process exit code.
pub fn run(args: &[String]) -> i32 {
    let Some(what) = args.first() else {
        eprint!("{USAGE}");
        return EXIT_USAGE;
    };
    match what.as_str() {
        "rtt" => rtt::run(&args[1..]),
        "throughput" => throughput::run(&args[1..]),
        "multicast" => multicast::run(&args[1..]),
        "group" => group::run(&args[1..]),
        "rpc" => rpc::run(&args[1..]),
        "long" => long::run(&args[1..]),
        "burst" => burst::run(&args[1..]),
        "modules" => modules::run(&args[1..]),
        "crmem" => crmem::run(&args[1..]),
        "dc" => dc::run(&args[1..]),
        "pgbench" => pgbench::run(&args[1..]),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            0
        }
        other => {
            eprintln!("txcast bench: unknown benchmark {other:?}");
            eprint!("{USAGE}");
            EXIT_USAGE
        }
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

/// Command-line options of a benchmark: positional words, `--key value` pairs and bare
/// `--flag`s. Which keys are bare flags must be declared, so `--bytes 64` and `--json` parse
/// unambiguously; `--key=value` is accepted too.
#[derive(Debug, Default, Clone)]
pub struct Options {
    pub positional: Vec<String>,
    values: Vec<(String, String)>,
    flags: Vec<String>,
}

impl Options {
    /// Parses `args`; `valued` are the keys that take a value, `flags` the bare flags (names
    /// without the leading `--`). Anything else starting with `--` is an error.
    pub fn parse(args: &[String], valued: &[&str], flags: &[&str]) -> Result<Options, String> {
        let mut options = Options::default();
        let mut words = args.iter();
        while let Some(word) = words.next() {
            let Some(key) = word.strip_prefix("--") else {
                options.positional.push(word.clone());
                continue;
            };
            if let Some((key, value)) = key.split_once('=') {
                if !valued.contains(&key) {
                    return Err(format!("unknown option --{key}"));
                }
                options.values.push((key.to_string(), value.to_string()));
            } else if flags.contains(&key) {
                options.flags.push(key.to_string());
            } else if valued.contains(&key) {
                let value = words
                    .next()
                    .ok_or_else(|| format!("option --{key} needs a value"))?;
                options.values.push((key.to_string(), value.clone()));
            } else {
                return Err(format!("unknown option --{key}"));
            }
        }
        Ok(options)
    }

    /// The last value given for `key`.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, key: &str) -> bool {
        self.flags.iter().any(|f| f == key)
    }

    /// The value of `key` as a number, or `default` when absent.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.value(key) {
            None => Ok(default),
            Some(text) => parse_u64(text).map_err(|e| format!("--{key}: {e}")),
        }
    }

    /// The comma-separated list given for `key`, or `default` when absent.
    pub fn list_or(&self, key: &str, default: &[&str]) -> Vec<String> {
        match self.value(key) {
            None => default.iter().map(|s| s.to_string()).collect(),
            Some(text) => text
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }

    /// The comma-separated numbers given for `key`, or `default` when absent.
    pub fn u64_list_or(&self, key: &str, default: &[u64]) -> Result<Vec<u64>, String> {
        match self.value(key) {
            None => Ok(default.to_vec()),
            Some(_) => self
                .list_or(key, &[])
                .iter()
                .map(|s| parse_u64(s).map_err(|e| format!("--{key}: {e}")))
                .collect(),
        }
    }
}

/// The plan of `txcast bench <bench>`, or the exit code when there is nothing to run: 0 after
/// `--help` (`Ok(None)`; the usage on stdout), [`EXIT_USAGE`] after a bad command line (the
/// complaint and the usage on stderr).
pub fn plan_or_exit<P>(
    bench: &str,
    planned: Result<Option<P>, String>,
    usage: impl FnOnce() -> String,
) -> Result<P, i32> {
    match planned {
        Ok(Some(plan)) => Ok(plan),
        Ok(None) => {
            print!("{}", usage());
            Err(0)
        }
        Err(message) => {
            eprintln!("txcast bench {bench}: {message}");
            eprint!("{}", usage());
            Err(EXIT_USAGE)
        }
    }
}

/// A benchmark's command line: the `valued` keys, the `--json` and `--help` flags, no
/// positional words. `None` when `--help` was asked for.
pub fn bench_options(args: &[String], valued: &[&str]) -> Result<Option<Options>, String> {
    let options = Options::parse(args, valued, &["json", "help"])?;
    if options.flag("help") {
        return Ok(None);
    }
    if let Some(word) = options.positional.first() {
        return Err(format!("unexpected argument {word:?}"));
    }
    Ok(Some(options))
}

/// `--iterations` (1..=`max`, default `iterations_default`) and `--warmup` (at most `max`,
/// default the lesser of `warmup_default` and the iterations), in that order.
pub fn iterations_and_warmup(
    options: &Options,
    iterations_default: u64,
    warmup_default: u64,
    max: u64,
) -> Result<(u64, u64), String> {
    let iterations = options.u64_or("iterations", iterations_default)?;
    if !(1..=max).contains(&iterations) {
        return Err(format!("--iterations must be 1..={max}"));
    }
    let warmup = options.u64_or("warmup", warmup_default.min(iterations))?;
    if warmup > max {
        return Err(format!("--warmup must be at most {max}"));
    }
    Ok((iterations, warmup))
}

/// The comma-separated numbers given for `key` (or `default`), each within `range`.
pub fn usize_list_in(
    options: &Options,
    key: &str,
    default: &[u64],
    range: RangeInclusive<usize>,
) -> Result<Vec<usize>, String> {
    options
        .u64_list_or(key, default)?
        .into_iter()
        .map(|n| match usize::try_from(n) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_values_flags_and_positionals() {
        let args = strings(&["a", "--bytes", "64,1000", "--json", "--iterations=5k", "b"]);
        let options = Options::parse(&args, &["bytes", "iterations"], &["json"]).unwrap();
        assert_eq!(options.positional, strings(&["a", "b"]));
        assert!(options.flag("json"));
        assert!(!options.flag("help"));
        assert_eq!(options.u64_list_or("bytes", &[1]).unwrap(), vec![64, 1000]);
        assert_eq!(options.u64_or("iterations", 7).unwrap(), 5000);
        assert_eq!(options.u64_or("warmup", 7).unwrap(), 7);
        assert_eq!(options.list_or("cases", &["x"]), strings(&["x"]));
    }

    #[test]
    fn options_reject_unknown_and_missing_values() {
        assert!(Options::parse(&strings(&["--nope"]), &[], &[]).is_err());
        assert!(Options::parse(&strings(&["--bytes"]), &["bytes"], &[]).is_err());
        assert!(Options::parse(&strings(&["--json=1"]), &[], &["json"]).is_err());
        let options = Options::parse(&strings(&["--n", "x"]), &["n"], &[]).unwrap();
        assert!(options.u64_or("n", 0).is_err());
    }

    #[test]
    fn bench_options_take_json_and_help_but_no_words() {
        let options = bench_options(&strings(&["--json", "--n", "3"]), &["n"]).unwrap();
        assert!(options.unwrap().flag("json"));
        assert!(bench_options(&strings(&["--help"]), &[]).unwrap().is_none());
        assert!(bench_options(&strings(&["extra"]), &[]).is_err());
    }

    #[test]
    fn iterations_bound_warmup_by_default() {
        let counts = |words: &[&str]| {
            let options = Options::parse(&strings(words), &["iterations", "warmup"], &[]).unwrap();
            iterations_and_warmup(&options, 100, 20, 1000)
        };
        assert_eq!(counts(&[]), Ok((100, 20)));
        assert_eq!(counts(&["--iterations", "5"]), Ok((5, 5)));
        assert_eq!(
            counts(&["--iterations", "5", "--warmup", "50"]),
            Ok((5, 50))
        );
        assert!(counts(&["--iterations", "0"]).is_err());
        assert!(counts(&["--warmup", "1001"]).is_err());
    }

    #[test]
    fn usize_lists_stay_in_range() {
        let options = Options::parse(&strings(&["--dests", "1,17"]), &["dests"], &[]).unwrap();
        assert_eq!(
            usize_list_in(&options, "dests", &[], 1..=16),
            Err("--dests: 17 not in 1..=16".to_string())
        );
        assert_eq!(usize_list_in(&options, "bytes", &[8], 8..=9), Ok(vec![8]));
    }

    #[test]
    fn counts_parse_with_suffixes() {
        assert_eq!(parse_u64("20_000"), Ok(20_000));
        assert_eq!(parse_u64("2m"), Ok(2_000_000));
        assert!(parse_u64("").is_err());
        assert!(parse_u64("-1").is_err());
        assert!(parse_u64("99999999999999999999k").is_err());
    }
}
