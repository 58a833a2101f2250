//! `txcast bench rtt`: round-trip latency between two processes, one case per transport.
//!
//! The parent process opens its end of the transport ([`Case::listen`]), starts the partner
//! (`txcast __bench-child rtt <case> <bytes> <round trips> <rendezvous...>`), which opens the
//! other end ([`Case::connect`]) and echoes every message back ([`Echo::serve`]). The parent
//! sends warm-up messages, then times each of N round trips ([`PingPong::ping`]) with the
//! monotonic clock, and checks every echo byte for byte outside the timed region.
//!
//! Adding a transport means writing a [`Listener`], a [`PingPong`] and an [`Echo`] and one
//! [`Case`] entry in [`CASES`].

mod pipe;
mod shm;
mod txcast;
mod udp;
mod unix;

use crate::progress::Progress;
use std::io;
use std::time::{Duration, Instant};

use super::machine::{cpus, cpus_busy, load_average, show, BUSY_SAMPLE};
use super::stats::{paired_line, Report, Samples, Summary};
use super::{
    finish_child, iterations_and_warmup, parse_u64, plan_or_exit, spawn_child, usize_list_in,
    EXIT_FAILED,
};
use std::collections::BTreeMap;
use txcast_port::shm::{SLOT_COUNT_MAX, SLOT_COUNT_MIN};

/// How long either side waits for the other (hello, an echo, the partner's exit) before
/// deciding it is gone.
pub const PARTNER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a busy-polling side spins before it starts yielding the CPU between polls.
pub const SPIN_YIELD_AFTER: Duration = Duration::from_micros(50);

/// Largest message any case is asked to carry (fits a UDP datagram on loopback).
pub const MESSAGE_BYTES_MAX: usize = 65_000;

/// Round trips timed per case and size unless `--iterations` says otherwise.
pub const ITERATIONS_DEFAULT: u64 = 20_000;
/// Untimed round trips before the timed ones unless `--warmup` says otherwise.
pub const WARMUP_DEFAULT: u64 = 2_000;
/// Bound on `--iterations` (the samples are preallocated: 8 bytes each).
pub const ITERATIONS_MAX: u64 = 50_000_000;
/// Message sizes measured unless `--bytes` says otherwise.
pub const BYTES_DEFAULT: &[u64] = &[64, 1000];
/// Cases every other case is compared with.
pub const BASELINES: &[&str] = &["raw-udp-blocking", "raw-shm-spin"];
/// Bound on `--repeat`.
pub const REPEAT_MAX: u64 = 99;
/// Each txcast case against the raw case its target names, for the "paired by round" lines.
pub const PAIRS: &[(&str, &str)] = &[
    ("txcast-local-spin", "raw-shm-spin"),
    ("txcast-local-park", "raw-udp-blocking"),
    ("txcast-remote-spin", "raw-udp-busypoll"),
    ("txcast-remote-spin", "raw-udp-busypoll-unconnected"),
    ("txcast-remote-park", "raw-udp-blocking"),
];

/// Parent side of a connected transport.
pub trait PingPong {
    /// Sends `message` to the partner and waits for its echo, written into the front of
    /// `reply` (at least as long as `message`); returns the echo's length.
    fn ping(&mut self, message: &[u8], reply: &mut [u8]) -> io::Result<usize>;
}

/// Partner side of a connected transport.
pub trait Echo {
    /// Receives `round_trips` messages, sending each straight back, then returns.
    fn serve(&mut self, round_trips: u64) -> io::Result<()>;
}

/// Parent side of a transport before the partner has connected.
pub trait Listener {
    /// Words for the partner's command line telling it how to reach us (a port, a path,
    /// inherited descriptor numbers...); handed to [`Case::connect`] unchanged.
    fn rendezvous(&self) -> Vec<String>;

    /// Called once the partner process has been started (or failed to start): release what
    /// was only opened for the partner to inherit. Not called when the partner is a thread
    /// of this process (tests).
    fn partner_started(&mut self) {}

    /// Waits (at most [`PARTNER_TIMEOUT`]) for the partner's hello and returns the connected
    /// parent side.
    fn accept(self: Box<Self>) -> io::Result<Box<dyn PingPong>>;
}

/// Opens the parent side of a case for messages of `bytes` bytes.
pub type Listen = fn(bytes: usize) -> io::Result<Box<dyn Listener>>;
/// Opens the partner side of a case from the parent's [`Listener::rendezvous`] words.
pub type Connect = fn(rendezvous: &[String], bytes: usize) -> io::Result<Box<dyn Echo>>;

/// One transport measured by `txcast bench rtt`.
pub struct Case {
    /// Name on the command line and in the report.
    pub name: &'static str,
    /// Both sides spin on a core while waiting.
    pub busy_polls: bool,
    /// Opens the parent side for messages of `bytes` bytes.
    pub listen: Listen,
    /// Opens the partner side from the parent's [`Listener::rendezvous`] words.
    pub connect: Connect,
}

/// Every case, in the order they run by default.
pub const CASES: &[Case] = &[
    Case {
        name: "raw-udp-blocking",
        busy_polls: false,
        listen: udp::listen_blocking,
        connect: udp::connect_blocking,
    },
    Case {
        name: "raw-udp-busypoll",
        busy_polls: true,
        listen: udp::listen_busy_poll,
        connect: udp::connect_busy_poll,
    },
    Case {
        name: "raw-udp-busypoll-unconnected",
        busy_polls: true,
        listen: udp::listen_busy_poll_unconnected,
        connect: udp::connect_busy_poll_unconnected,
    },
    Case {
        name: "unix-dgram",
        busy_polls: false,
        listen: unix::listen,
        connect: unix::connect,
    },
    Case {
        name: "pipe",
        busy_polls: false,
        listen: pipe::listen,
        connect: pipe::connect,
    },
    Case {
        name: "raw-shm-spin",
        busy_polls: true,
        listen: shm::listen_spin,
        connect: shm::connect_spin,
    },
    Case {
        name: "raw-shm-futex",
        busy_polls: false,
        listen: shm::listen_futex,
        connect: shm::connect_futex,
    },
    Case {
        name: "txcast-local-spin",
        busy_polls: true,
        listen: txcast::listen_local_spin,
        connect: txcast::connect,
    },
    Case {
        name: "txcast-local-park",
        busy_polls: false,
        listen: txcast::listen_local_park,
        connect: txcast::connect,
    },
    Case {
        name: "txcast-remote-spin",
        busy_polls: true,
        listen: txcast::listen_remote_spin,
        connect: txcast::connect,
    },
    Case {
        name: "txcast-remote-park",
        busy_polls: false,
        listen: txcast::listen_remote_park,
        connect: txcast::connect,
    },
];

pub fn find_case(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|case| case.name == name)
}

/// What one `txcast bench rtt` run measures.
#[derive(Debug, Clone)]
pub struct Plan {
    pub cases: Vec<&'static Case>,
    pub bytes: Vec<usize>,
    pub warmup: u64,
    pub iterations: u64,
    /// Rounds: the whole list of cases and sizes is measured this many times in turn.
    pub repeat: u64,
    /// Receive slots of the txcast cases' ports (`--slot-count`).
    pub slot_count: u32,
    pub json: bool,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("busy_polls", &self.busy_polls)
            .finish()
    }
}

// The options of `txcast bench rtt` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
#[command(after_help = after_help())]
pub struct Args {
    /// Round trips timed per case and size
    #[arg(long, default_value_t = ITERATIONS_DEFAULT, value_parser = parse_u64)]
    pub iterations: u64,
    /// Round trips before the timed ones [default: 2000, at most --iterations]
    #[arg(long, value_parser = parse_u64)]
    pub warmup: Option<u64>,
    /// Message sizes in bytes
    #[arg(long, value_delimiter = ',', default_values_t = BYTES_DEFAULT.to_vec(), value_parser = parse_u64)]
    pub bytes: Vec<u64>,
    /// The cases to measure (see below) [default: all]
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Rounds of every case, in turn; each txcast case's p50 is printed against its
    /// baseline's of the same round
    #[arg(long, default_value_t = 1, value_parser = parse_u64)]
    pub repeat: u64,
    /// Receive slots of the txcast ports' rings (a power of two)
    #[arg(long, default_value_t = u64::from(txcast::slot_count_default()), value_parser = parse_u64)]
    pub slot_count: u64,
    /// The cluster key the txcast cases run under: none, a MAC on every packet, or every
    /// packet encrypted
    #[arg(long, value_enum, default_value_t = super::KeyMode::None)]
    pub key: super::KeyMode,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

/// The cases and baselines, for `txcast bench rtt --help`.
fn after_help() -> String {
    let names: Vec<&str> = CASES.iter().map(|case| case.name).collect();
    format!(
        "cases: {}\nbaselines: {}",
        names.join(" "),
        BASELINES.join(" ")
    )
}

fn plan(options: &Args) -> Result<Plan, String> {
    let (iterations, warmup) = iterations_and_warmup(
        options.iterations,
        options.warmup,
        WARMUP_DEFAULT,
        ITERATIONS_MAX,
    )?;
    let bytes = usize_list_in("bytes", &options.bytes, 1..=MESSAGE_BYTES_MAX)?;
    let all: Vec<String> = CASES.iter().map(|case| case.name.to_string()).collect();
    let names = if options.cases.is_empty() {
        &all
    } else {
        &options.cases
    };
    let mut cases = Vec::new();
    for name in names {
        let case = find_case(name)
            .ok_or_else(|| format!("--cases: unknown case {name:?} (known: {})", all.join(" ")))?;
        cases.push(case);
    }
    if cases.is_empty() || bytes.is_empty() {
        return Err("nothing to measure".to_string());
    }
    let repeat = options.repeat;
    if !(1..=REPEAT_MAX).contains(&repeat) {
        return Err(format!("--repeat must be 1..={REPEAT_MAX}"));
    }
    let slot_count = u32::try_from(options.slot_count)
        .ok()
        .filter(|n| n.is_power_of_two() && (SLOT_COUNT_MIN..=SLOT_COUNT_MAX).contains(n))
        .ok_or_else(|| {
            format!("--slot-count must be a power of two in {SLOT_COUNT_MIN}..={SLOT_COUNT_MAX}")
        })?;
    Ok(Plan {
        cases,
        bytes,
        warmup,
        iterations,
        repeat,
        slot_count,
        json: options.json,
    })
}

/// `txcast bench rtt [options]`.
pub fn run(args: &Args) -> i32 {
    super::set_key_mode(args.key);
    let plan = match plan_or_exit("rtt", plan(args)) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    txcast::set_slot_count(plan.slot_count);
    let load_at_start = load_average();
    let busy_before = cpus_busy();
    let mut report = Report::new("rtt", BASELINES);
    let mut failures = 0;
    let total = plan.cases.len() * plan.bytes.len() * plan.repeat as usize;
    let mut index = 0;
    // p50 by (case, size) and round, for the "paired by round" lines.
    let mut p50s: BTreeMap<(&str, usize), Vec<Option<f64>>> = BTreeMap::new();
    let progress = Progress::points("rtt", total as u64);
    for round in 0..plan.repeat as usize {
        for &bytes in &plan.bytes {
            for case in &plan.cases {
                index += 1;
                let slot = p50s
                    .entry((case.name, bytes))
                    .or_insert_with(|| vec![None; plan.repeat as usize]);
                slot[round] = None;
                let width = total.to_string().len();
                let head = format!(
                    "rtt [{index:>width$}/{total}] {:<18} {bytes:>5} B: {} + {} round trips ... ",
                    case.name, plan.warmup, plan.iterations
                );
                progress.point_start(&head);
                let started = Instant::now();
                match measure_in_processes(case, bytes, plan.warmup, plan.iterations) {
                    Ok(summary) => {
                        let tail = format!(
                            "{:.2} s, p50 {:.3} µs, p99 {:.3} µs",
                            started.elapsed().as_secs_f64(),
                            summary.p50_ns as f64 / 1000.0,
                            summary.p99_ns as f64 / 1000.0
                        );
                        progress.point_done(&head, &tail);
                        slot[round] = Some(summary.p50_ns as f64);
                        report.push_latency(case.name, bytes as u64, summary);
                    }
                    Err(error) => {
                        progress.point_done(&head, &format!("FAILED: {error}"));
                        failures += 1;
                    }
                }
            }
        }
    }
    progress.finish();
    let mut heading = format!(
        "rtt: round trip between two processes, {} timed after {} warm-up per row \
         (latencies in µs); txcast ports with {} receive slots\n{}\n",
        plan.iterations,
        plan.warmup,
        plan.slot_count,
        machine_note(load_at_start, load_average(), busy_before)
    );
    if plan.cases.iter().any(|case| case.busy_polls) && machine_busy(busy_before) {
        heading.push_str(
            "warning: the CPUs were not idle before the run: the busy-polling cases may share \
             cores, and their figures would then be distorted\n",
        );
    }
    let paired = paired_text(&plan.bytes, &p50s);
    if plan.json {
        eprint!("{heading}{}{paired}", report.table());
        print!("{}", report.json_lines());
    } else {
        print!("{heading}{}{paired}", report.table());
    }
    if failures > 0 {
        eprintln!("txcast bench rtt: {failures} of {total} measurements failed");
        EXIT_FAILED
    } else {
        0
    }
}

/// p50 ratios within each round, for each of `PAIRS` measured (see `stats::paired_line`);
/// empty unless there were several rounds.
fn paired_text(sizes: &[usize], p50s: &BTreeMap<(&str, usize), Vec<Option<f64>>>) -> String {
    let mut out = String::new();
    for &bytes in sizes {
        for (case, base) in PAIRS {
            let (Some(c), Some(b)) = (p50s.get(&(*case, bytes)), p50s.get(&(*base, bytes))) else {
                continue;
            };
            if c.len() < 2 {
                continue;
            }
            let label = format!("{bytes} B, p50 {case} / {base}");
            if let Some(line) = paired_line(&label, c, b) {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    out
}

/// A busy-polling pair needs two CPUs to itself.
fn machine_busy(cpus_busy: Option<f64>) -> bool {
    cpus_busy.is_some_and(|busy| busy + 2.0 > cpus() as f64 + 0.2)
}

fn machine_note(start: Option<f64>, end: Option<f64>, busy: Option<f64>) -> String {
    format!(
        "machine: {} CPUs, {} of them busy in the {:.2} s before the run; 1-minute load \
         average {} at start, {} at end",
        cpus(),
        show(busy),
        BUSY_SAMPLE.as_secs_f64(),
        show(start),
        show(end)
    )
}

/// `txcast __bench-child rtt <case> <bytes> <round trips> <rendezvous...>`.
pub fn child(args: &[String]) -> io::Result<()> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let [name, bytes, round_trips, rendezvous @ ..] = args else {
        return Err(invalid(
            "usage: rtt <case> <bytes> <round trips> <rendezvous...>",
        ));
    };
    let case = find_case(name).ok_or_else(|| invalid("unknown case"))?;
    let bytes: usize = bytes.parse().map_err(|_| invalid("bad byte count"))?;
    let round_trips: u64 = round_trips
        .parse()
        .map_err(|_| invalid("bad round-trip count"))?;
    let mut echo = (case.connect)(rendezvous, bytes)?;
    echo.serve(round_trips)
}

/// Measures one case at one size with the partner in a second process.
pub fn measure_in_processes(
    case: &Case,
    bytes: usize,
    warmup: u64,
    iterations: u64,
) -> io::Result<Summary> {
    let mut listener = (case.listen)(bytes)?;
    let mut args = vec![
        "rtt".to_string(),
        case.name.to_string(),
        bytes.to_string(),
        (warmup + iterations).to_string(),
    ];
    args.extend(listener.rendezvous());
    let spawned = spawn_child(&args);
    listener.partner_started();
    let mut partner = spawned?;
    let measured = listener
        .accept()
        .and_then(|mut pp| ping_pong(pp.as_mut(), bytes, warmup, iterations));
    finish_child(&mut partner, measured, PARTNER_TIMEOUT)?
        .summary()
        .ok_or_else(|| io::Error::other("no samples"))
}

/// The parent's loop: `warmup` untimed then `iterations` timed round trips of `bytes`-byte
/// messages. Each message carries its sequence number in its first bytes; every echo is
/// checked byte for byte after the clock has been read.
pub fn ping_pong(
    pp: &mut dyn PingPong,
    bytes: usize,
    warmup: u64,
    iterations: u64,
) -> io::Result<Samples> {
    let capacity = usize::try_from(iterations)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many iterations"))?;
    let mut samples = Samples::with_capacity(capacity);
    let mut message: Vec<u8> = (0..bytes).map(|i| (i * 31 + 7) as u8).collect();
    let mut reply = vec![0u8; bytes];
    for i in 0..warmup + iterations {
        let stamp = i.to_le_bytes();
        let stamped = stamp.len().min(bytes);
        message[..stamped].copy_from_slice(&stamp[..stamped]);
        let start = Instant::now();
        let n = pp.ping(&message, &mut reply)?;
        let elapsed = start.elapsed();
        if i >= warmup {
            samples.record(elapsed);
        }
        if reply.get(..n) != Some(&message[..]) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("round trip {i}: the echo ({n} bytes) differs from the message"),
            ));
        }
    }
    Ok(samples)
}

/// Spins until `ready()` says yes; an error after [`PARTNER_TIMEOUT`]. For the busy-polling
/// cases. A wait that has already lasted [`SPIN_YIELD_AFTER`] means the partner is not on a
/// core (the machine is oversubscribed), so from then on each clock check also yields the
/// CPU, which may be just what the partner needs to run. A reply that comes while spinning
/// is never delayed by this; only the tail of an oversubscribed run is.
#[inline]
pub fn spin_until(mut ready: impl FnMut() -> io::Result<bool>) -> io::Result<()> {
    const SPINS_PER_CLOCK_CHECK: u32 = 256;
    let mut started: Option<Instant> = None;
    loop {
        for _ in 0..SPINS_PER_CLOCK_CHECK {
            if ready()? {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let now = Instant::now();
        let waited = now - *started.get_or_insert(now);
        if waited >= PARTNER_TIMEOUT {
            return Err(partner_gone());
        }
        if waited >= SPIN_YIELD_AFTER {
            std::thread::yield_now();
        }
    }
}

pub fn partner_gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no word from the partner for {PARTNER_TIMEOUT:?}"),
    )
}

/// Runs `round_trips` echoes with the partner on a second thread of this process (for tests:
/// it needs no `txcast` binary). Errors on either side are returned.
#[cfg(test)]
pub fn measure_in_threads(case: &Case, bytes: usize, round_trips: u64) -> io::Result<Samples> {
    let listener = (case.listen)(bytes)?;
    let rendezvous = listener.rendezvous();
    let connect = case.connect;
    let partner = std::thread::spawn(move || -> io::Result<()> {
        connect(&rendezvous, bytes)?.serve(round_trips)
    });
    let measured = listener
        .accept()
        .and_then(|mut pp| ping_pong(pp.as_mut(), bytes, 0, round_trips));
    let served = partner
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("partner thread panicked")));
    let samples = measured?;
    served?;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ping-pong tests take turns, so at most two threads spin at a time on a small machine.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn echo_case(name: &str) {
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let case = find_case(name).unwrap();
        for bytes in [1, 7, 64, 1000] {
            let samples = measure_in_threads(case, bytes, 300)
                .unwrap_or_else(|e| panic!("{name} {bytes} B: {e}"));
            assert_eq!(samples.len(), 300);
        }
    }

    #[test]
    fn raw_udp_blocking_echoes_every_byte() {
        echo_case("raw-udp-blocking");
    }

    #[test]
    fn raw_shm_spin_echoes_every_byte() {
        echo_case("raw-shm-spin");
    }

    /// The remaining cases.
    #[test]
    fn other_cases_echo_every_byte() {
        for name in ["raw-udp-busypoll", "unix-dgram", "pipe", "raw-shm-futex"] {
            echo_case(name);
        }
    }

    #[test]
    fn plan_parses_defaults_and_rejects_nonsense() {
        let try_plan = |words: &[&str]| super::plan(&super::super::parse::<Args>(words)?);
        let plan = try_plan(&[]).unwrap();
        assert_eq!(plan.cases.len(), CASES.len());
        assert_eq!(plan.bytes, vec![64, 1000]);
        assert_eq!(plan.iterations, ITERATIONS_DEFAULT);
        let small = try_plan(&["--iterations", "10", "--cases", "pipe"]).unwrap();
        assert_eq!(
            (small.iterations, small.warmup, small.cases.len()),
            (10, 10, 1)
        );
        assert!(try_plan(&["--cases", "carrier-pigeon"]).is_err());
        assert!(try_plan(&["--bytes", "0"]).is_err());
        assert!(try_plan(&["--bytes", "65001"]).is_err());
        assert!(try_plan(&["--iterations", "0"]).is_err());
        assert!(try_plan(&["extra"]).is_err());
        assert_eq!(plan.repeat, 1);
        let rounds = try_plan(&["--repeat", "3"]).unwrap();
        assert_eq!(rounds.repeat, 3);
        assert!(try_plan(&["--repeat", "0"]).is_err());
        assert!(try_plan(&["--repeat", "100"]).is_err());
        assert!(try_plan(&["--repeat", "many"]).is_err());
        assert_eq!(plan.slot_count, txcast::slot_count_default());
        let slots = try_plan(&["--slot-count", "16"]).unwrap();
        assert_eq!(slots.slot_count, 16);
        for bad in ["12", "1", "0", "2097152", "4294967312"] {
            assert!(try_plan(&["--slot-count", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn paired_lines_take_each_pair_per_size_and_skip_single_rounds() {
        let mut p50s = BTreeMap::new();
        p50s.insert(("raw-shm-spin", 64), vec![Some(100.0), Some(200.0), None]);
        p50s.insert(
            ("txcast-local-spin", 64),
            vec![Some(150.0), Some(220.0), Some(1.0)],
        );
        p50s.insert(
            ("raw-udp-blocking", 64),
            vec![Some(1.0), Some(1.0), Some(1.0)],
        );
        p50s.insert(("raw-shm-spin", 1000), vec![Some(100.0)]);
        p50s.insert(("txcast-local-spin", 1000), vec![Some(120.0)]);
        assert_eq!(
            paired_text(&[64, 1000], &p50s),
            "paired by round, 64 B, p50 txcast-local-spin / raw-shm-spin: 1.50 1.10 (median 1.30)\n"
        );
    }
}
