//! `txcast bench throughput`: one sender streaming 64-byte messages to a receiver in a second
//! process, as fast as it can.
//!
//! Cases, each measured in the same run as its baseline:
//!
//! * `raw-spsc-ring`: a raw single-producer single-consumer ring in a `/dev/shm` mapping, both
//!   sides spinning: the floor for local messages ([`ring`]);
//! * `txcast-local`: `Port::send` to a port on the same site, whose owner takes the messages
//!   with `Port::try_recv`/`recv_timeout` spinning ([`txcast`]);
//! * `txcast-remote-pack-off` and `txcast-remote-pack-on`: the same to a port at another site
//!   (another loopback address), so UDP through the reliable link, with packing off and
//!   adaptive ([`txcast`]).
//!
//! The parent process is the sender; the partner (`txcast __bench-child throughput ...`) is the
//! receiver. Every message carries its sequence number, which the receiver checks, and (every
//! `latency_every`-th timed message) its send time from `CLOCK_MONOTONIC`, which both processes
//! share; the receiver records the one-way latency of those. The first `warmup` messages are
//! not timed: messages/s runs from the receipt of the last warm-up message to the receipt of
//! the last message, so exactly `messages` messages arrive in the measured interval. The
//! receiver writes its [`Outcome`] as one line into a result file the parent created (mode
//! 0600) and reads after the partner exits.

mod ring;
mod txcast;

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::machine::{clock_ns, cpus, load_average, show};
use super::stats::{bench_json, messages_per_second, rounded, InOrder, Report, Samples, Summary};
use super::{finish_child, parse_u64, plan_or_exit, spawn_child, EXIT_FAILED};
use crate::progress::Progress;
use txcast_port::IdleStrategy;

/// Bytes per message: sequence number (8), send time (8), filler.
pub const MESSAGE_BYTES: usize = 64;
/// Where the sequence number and the send time sit in a message.
const SEQ_OFFSET: usize = 0;
const STAMP_OFFSET: usize = 8;
const _: () = assert!(STAMP_OFFSET + 8 <= MESSAGE_BYTES);

/// Timed messages of the shared-memory cases unless `--messages` says otherwise.
pub const MESSAGES_DEFAULT: u64 = 2_000_000;
/// Timed messages of the remote cases unless `--remote-messages` says otherwise.
pub const REMOTE_MESSAGES_DEFAULT: u64 = 500_000;
/// Untimed messages ahead of the timed ones unless `--warmup` says otherwise.
pub const WARMUP_DEFAULT: u64 = 10_000;
/// Bound on the message counts (latency samples are preallocated, 8 bytes each).
pub const MESSAGES_MAX: u64 = 100_000_000;
/// Latency sampling of the shared-memory cases: every 16th timed message, so that the two
/// clock reads per sample stay a small part of a message's cost there.
pub const LATENCY_EVERY_LOCAL_DEFAULT: u64 = 16;
/// Latency sampling of the remote cases: every message (a clock read is noise next to a
/// datagram, and sampling every k-th could alias with the packing).
pub const LATENCY_EVERY_REMOTE_DEFAULT: u64 = 1;
/// Runs of every case unless `--repeat` says otherwise; the run with the median messages/s
/// is reported, so one run disturbed by another program on a shared machine does not decide.
pub const REPEAT_DEFAULT: u64 = 3;
/// Bound on `--repeat`.
pub const REPEAT_MAX: u64 = 99;
/// Packing delay of `txcast-remote-pack-on` unless `--delay-us` says otherwise.
pub const DELAY_US_DEFAULT: u64 = 50;
/// Bound on `--delay-us`.
pub const DELAY_US_MAX: u64 = 100_000;
/// How long the partner may take to finish after the sender's last message.
const FINISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Targets of the issue: local at least 0.7x the raw ring; remote packing on at least 10x
/// packing off in messages/s, with p99 latency no worse.
pub const TARGET_LOCAL_VS_RING: f64 = 0.7;
pub const TARGET_PACK_SPEEDUP: f64 = 10.0;
pub const TARGET_PACK_P99: f64 = 1.0;

/// Cases every other case is compared with in the table.
pub const BASELINES: &[&str] = &["raw-spsc-ring", "txcast-remote-pack-off"];

/// One measured stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    RawSpscRing,
    TxcastLocal,
    TxcastRemotePackOff,
    TxcastRemotePackOn,
}

impl Case {
    pub const ALL: [Case; 4] = [
        Case::RawSpscRing,
        Case::TxcastLocal,
        Case::TxcastRemotePackOff,
        Case::TxcastRemotePackOn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::RawSpscRing => "raw-spsc-ring",
            Case::TxcastLocal => "txcast-local",
            Case::TxcastRemotePackOff => "txcast-remote-pack-off",
            Case::TxcastRemotePackOn => "txcast-remote-pack-on",
        }
    }

    pub fn from_name(name: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|case| case.name() == name)
    }

    /// Over UDP through the reliable link (another site).
    pub fn remote(self) -> bool {
        matches!(self, Case::TxcastRemotePackOff | Case::TxcastRemotePackOn)
    }
}

/// What the sender sends and the receiver expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    /// Untimed messages first.
    pub warmup: u64,
    /// Timed messages after them.
    pub messages: u64,
    /// Every this many timed messages, one carries its send time and is sampled.
    pub latency_every: u64,
}

impl Stream {
    pub fn total(&self) -> u64 {
        self.warmup + self.messages
    }

    /// Whether message `seq` carries its send time and has its latency recorded.
    #[inline]
    pub fn sampled(&self, seq: u64) -> bool {
        seq >= self.warmup && (seq - self.warmup).is_multiple_of(self.latency_every)
    }

    /// Latency samples the receiver records.
    pub fn samples(&self) -> u64 {
        self.messages.div_ceil(self.latency_every)
    }

    fn to_args(self) -> [String; 3] {
        [
            self.warmup.to_string(),
            self.messages.to_string(),
            self.latency_every.to_string(),
        ]
    }

    fn from_args(args: &[String]) -> Result<Stream, String> {
        let [warmup, messages, every] = args else {
            return Err("need <warmup> <messages> <latency every>".to_string());
        };
        let number = |s: &String| s.parse::<u64>().map_err(|_| format!("not a count: {s:?}"));
        let stream = Stream {
            warmup: number(warmup)?,
            messages: number(messages)?,
            latency_every: number(every)?,
        };
        stream.validate()?;
        Ok(stream)
    }

    fn validate(&self) -> Result<(), String> {
        if self.warmup == 0 {
            return Err("warmup must be at least 1 (its last message starts the clock)".into());
        }
        if !(1..=MESSAGES_MAX).contains(&self.messages) || self.warmup > MESSAGES_MAX {
            return Err(format!("message counts must be 1..={MESSAGES_MAX}"));
        }
        if self.latency_every == 0 {
            return Err("latency sampling interval must be at least 1".into());
        }
        Ok(())
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for both processes of the machine.
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Writes the sequence number and send time (zero: not sampled) into a message.
#[inline]
fn stamp(message: &mut [u8; MESSAGE_BYTES], seq: u64, sent_ns: u64) {
    message[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    message[STAMP_OFFSET..STAMP_OFFSET + 8].copy_from_slice(&sent_ns.to_le_bytes());
}

/// Reads the sequence number and send time of a message; `None` if it is not one of ours.
#[inline]
fn unstamp(message: &[u8]) -> Option<(u64, u64)> {
    if message.len() != MESSAGE_BYTES {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(message[at..at + 8].try_into().expect("8 bytes"));
    Some((word(SEQ_OFFSET), word(STAMP_OFFSET)))
}

/// The sender's loop: every message of `stream`, in order, through `send`.
pub fn send_stream(
    stream: &Stream,
    mut send: impl FnMut(&[u8; MESSAGE_BYTES]) -> io::Result<()>,
) -> io::Result<()> {
    let mut message = [0u8; MESSAGE_BYTES];
    for (i, byte) in message.iter_mut().enumerate() {
        *byte = (i * 31 + 7) as u8;
    }
    for seq in 0..stream.total() {
        let sent_ns = if stream.sampled(seq) {
            monotonic_ns()
        } else {
            0
        };
        stamp(&mut message, seq, sent_ns);
        send(&message)?;
    }
    Ok(())
}

/// The receiver's bookkeeping: checks sequence numbers, starts the clock at the last warm-up
/// message, records sampled latencies, stops the clock at the last message.
pub struct Tally {
    stream: Stream,
    expected: u64,
    started_ns: u64,
    finished_ns: u64,
    samples: Samples,
}

impl Tally {
    pub fn new(stream: Stream) -> io::Result<Tally> {
        let capacity = usize::try_from(stream.samples())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many samples"))?;
        Ok(Tally {
            stream,
            expected: 0,
            started_ns: 0,
            finished_ns: 0,
            samples: Samples::with_capacity(capacity),
        })
    }

    /// Takes one message; `Ok(true)` once the last one has arrived.
    #[inline]
    pub fn on_message(&mut self, message: &[u8]) -> io::Result<bool> {
        let Some((seq, sent_ns)) = unstamp(message) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "message {} has {} bytes, expected {MESSAGE_BYTES}",
                    self.expected,
                    message.len()
                ),
            ));
        };
        if seq != self.expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "message with sequence number {seq}, expected {}",
                    self.expected
                ),
            ));
        }
        self.expected += 1;
        let last = self.expected == self.stream.total();
        if self.stream.sampled(seq) {
            let now = monotonic_ns();
            self.samples.record_ns(now.saturating_sub(sent_ns));
            if last {
                self.finished_ns = now;
            }
        } else if last {
            self.finished_ns = monotonic_ns();
        }
        if self.expected == self.stream.warmup {
            self.started_ns = monotonic_ns();
        }
        Ok(last)
    }

    /// The result once every message has arrived.
    pub fn outcome(mut self) -> io::Result<Outcome> {
        if self.expected != self.stream.total() {
            return Err(io::Error::other(format!(
                "only {} of {} messages arrived",
                self.expected,
                self.stream.total()
            )));
        }
        Ok(Outcome {
            messages: self.stream.messages,
            elapsed_ns: self.finished_ns.saturating_sub(self.started_ns),
            latency: self.samples.summary(),
        })
    }
}

/// What the receiver measured: `messages` arrived within `elapsed_ns`, with these one-way
/// latencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub messages: u64,
    pub elapsed_ns: u64,
    pub latency: Option<Summary>,
}

impl Outcome {
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns)
    }

    pub fn messages_per_second(&self) -> f64 {
        messages_per_second(self.messages, self.elapsed())
    }

    /// One line of `key=value` words (the result file's format).
    pub fn to_line(&self) -> String {
        let mut line = format!("messages={} elapsed_ns={}", self.messages, self.elapsed_ns);
        match &self.latency {
            None => line.push_str(" samples=0"),
            Some(s) => {
                let _ = write!(
                    line,
                    " samples={} min_ns={} p50_ns={} p90_ns={} p99_ns={} max_ns={} mean_ns={}",
                    s.count, s.min_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns, s.mean_ns
                );
            }
        }
        line
    }

    /// Parses [`Outcome::to_line`]'s format; names the missing or bad word.
    pub fn parse(line: &str) -> Result<Outcome, String> {
        let mut pairs = Vec::new();
        for word in line.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("not key=value: {word:?}"))?;
            pairs.push((key, value));
        }
        let text = |key: &str| -> Result<&str, String> {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("no {key}"))
        };
        let number = |key: &str| -> Result<u64, String> {
            let value = text(key)?;
            value
                .parse()
                .map_err(|_| format!("{key}: not a count: {value:?}"))
        };
        let count = number("samples")?;
        let latency = if count == 0 {
            None
        } else {
            let (min_ns, p50_ns, p90_ns) =
                (number("min_ns")?, number("p50_ns")?, number("p90_ns")?);
            let (p99_ns, max_ns) = (number("p99_ns")?, number("max_ns")?);
            let mean = text("mean_ns")?;
            let mean_ns = mean
                .parse()
                .map_err(|_| format!("mean_ns: not a number: {mean:?}"))?;
            Some(Summary {
                count,
                min_ns,
                p50_ns,
                p90_ns,
                p99_ns,
                max_ns,
                mean_ns,
            })
        };
        Ok(Outcome {
            messages: number("messages")?,
            elapsed_ns: number("elapsed_ns")?,
            latency,
        })
    }
}

/// What the sender saw of its link (remote cases): from `Port::counters()`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Packing {
    pub messages_sent: u64,
    pub data_packets_sent: u64,
    pub retransmitted: u64,
    pub send_full: u64,
    /// Packets that carried k messages, k = index (last bin: that many or more).
    pub histogram: Vec<u64>,
}

impl Packing {
    /// Messages per packet over first transmissions (the histogram counts those only).
    pub fn mean_messages_per_packet(&self) -> f64 {
        let packets: u64 = self.histogram.iter().sum();
        if packets == 0 {
            f64::NAN
        } else {
            self.messages_sent as f64 / packets as f64
        }
    }

    /// The `top` fullest bins as `k:packets`, most packets first.
    pub fn histogram_text(&self, top: usize) -> String {
        let mut bins: Vec<(usize, u64)> = self
            .histogram
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, n)| n > 0)
            .collect();
        bins.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let last = self.histogram.len().saturating_sub(1);
        let words: Vec<String> = bins
            .iter()
            .take(top)
            .map(|&(k, n)| {
                let plus = if k == last { "+" } else { "" };
                format!("{k}{plus}:{n}")
            })
            .collect();
        if words.is_empty() {
            "-".to_string()
        } else {
            words.join(" ")
        }
    }
}

/// One case's figures.
#[derive(Clone, Debug)]
pub struct Measured {
    pub case: Case,
    pub outcome: Outcome,
    pub packing: Option<Packing>,
}

/// A target of the issue, checked against this run's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub name: &'static str,
    /// `None` when a case it needs was not measured.
    pub value: Option<f64>,
    pub bound: f64,
    /// Met when `value >= bound` (else when `value <= bound`).
    pub at_least: bool,
}

impl Target {
    pub fn met(&self) -> Option<bool> {
        self.value.map(|v| {
            if self.at_least {
                v >= self.bound
            } else {
                v <= self.bound
            }
        })
    }
}

/// The three targets from the measured cases.
pub fn targets(measured: &[Measured]) -> Vec<Target> {
    let find = |case: Case| measured.iter().find(|m| m.case == case);
    let rate = |case: Case| find(case).map(|m| m.outcome.messages_per_second());
    let p99 = |case: Case| {
        find(case)
            .and_then(|m| m.outcome.latency)
            .map(|s| s.p99_ns as f64)
    };
    let divide = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    vec![
        Target {
            name: "txcast-local / raw-spsc-ring msg/s",
            value: divide(rate(Case::TxcastLocal), rate(Case::RawSpscRing)),
            bound: TARGET_LOCAL_VS_RING,
            at_least: true,
        },
        Target {
            name: "remote pack-on / pack-off msg/s",
            value: divide(
                rate(Case::TxcastRemotePackOn),
                rate(Case::TxcastRemotePackOff),
            ),
            bound: TARGET_PACK_SPEEDUP,
            at_least: true,
        },
        Target {
            name: "remote pack-on / pack-off p99 latency",
            value: divide(
                p99(Case::TxcastRemotePackOn),
                p99(Case::TxcastRemotePackOff),
            ),
            bound: TARGET_PACK_P99,
            at_least: false,
        },
    ]
}

/// How the receiving application thread of the remote cases waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteIdle {
    Spin,
    Park,
    /// No engine threads: each side's application thread drives its engine and spins
    /// (two busy threads in all, one per core).
    Invoker,
}

impl RemoteIdle {
    fn name(self) -> &'static str {
        match self {
            RemoteIdle::Spin => "spin",
            RemoteIdle::Park => "park",
            RemoteIdle::Invoker => "invoker",
        }
    }

    fn from_name(name: &str) -> Option<RemoteIdle> {
        match name {
            "spin" => Some(RemoteIdle::Spin),
            "park" => Some(RemoteIdle::Park),
            "invoker" => Some(RemoteIdle::Invoker),
            _ => None,
        }
    }

    fn strategy(self) -> IdleStrategy {
        match self {
            RemoteIdle::Spin | RemoteIdle::Invoker => IdleStrategy::Spin,
            RemoteIdle::Park => IdleStrategy::Park,
        }
    }
}

/// Default for the remote cases: invoker engines, so each process has one busy thread and the
/// two fit the two cores. `park` (engine threads, parked receiver) and `spin` (engine threads,
/// spinning receiver) are there to compare; on two cores they pay for the extra threads.
pub const REMOTE_IDLE_DEFAULT: RemoteIdle = RemoteIdle::Invoker;

/// What one `txcast bench throughput` run measures.
#[derive(Clone, Debug)]
pub struct Plan {
    pub cases: Vec<Case>,
    pub local: Stream,
    pub remote: Stream,
    pub delay_us: u64,
    pub remote_idle: RemoteIdle,
    pub repeat: u64,
    pub json: bool,
}

impl Plan {
    fn stream(&self, case: Case) -> Stream {
        if case.remote() {
            self.remote
        } else {
            self.local
        }
    }
}

// The options of `txcast bench throughput` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
#[command(after_help = after_help())]
pub struct Args {
    /// Messages timed per run of a shared-memory case
    #[arg(long, default_value_t = MESSAGES_DEFAULT, value_parser = parse_u64)]
    pub messages: u64,
    /// Messages timed per run of a remote case
    #[arg(long, default_value_t = REMOTE_MESSAGES_DEFAULT, value_parser = parse_u64)]
    pub remote_messages: u64,
    /// Messages before the timed ones
    #[arg(long, default_value_t = WARMUP_DEFAULT, value_parser = parse_u64)]
    pub warmup: u64,
    /// Sample the latency of every K-th message [default: 16 local, 1 remote; given, both]
    #[arg(long, value_name = "K", value_parser = parse_u64)]
    pub latency_every: Option<u64>,
    /// Packing delay of txcast-remote-pack-on, µs
    #[arg(long, default_value_t = DELAY_US_DEFAULT, value_parser = parse_u64)]
    pub delay_us: u64,
    /// How the receiver of the remote cases waits
    #[arg(long, default_value_t = REMOTE_IDLE_DEFAULT.name().to_string(),
          value_parser = ["spin", "park", "invoker"])]
    pub remote_idle: String,
    /// Runs of every case; the run with the median messages/s is reported
    #[arg(long, default_value_t = REPEAT_DEFAULT, value_parser = parse_u64)]
    pub repeat: u64,
    /// The cases to measure (see below) [default: all]
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// The cluster key the txcast cases run under: none, a MAC on every packet, or every
    /// packet encrypted
    #[arg(long, value_enum, default_value_t = super::KeyMode::None)]
    pub key: super::KeyMode,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

/// The cases, for `txcast bench throughput --help`.
fn after_help() -> String {
    let names: Vec<&str> = Case::ALL.iter().map(|case| case.name()).collect();
    format!("cases: {}", names.join(" "))
}

fn plan(options: &Args) -> Result<Plan, String> {
    let warmup = options.warmup;
    let local = Stream {
        warmup,
        messages: options.messages,
        latency_every: options.latency_every.unwrap_or(LATENCY_EVERY_LOCAL_DEFAULT),
    };
    let remote = Stream {
        warmup,
        messages: options.remote_messages,
        latency_every: options
            .latency_every
            .unwrap_or(LATENCY_EVERY_REMOTE_DEFAULT),
    };
    local.validate()?;
    remote.validate()?;
    let delay_us = options.delay_us;
    if delay_us > DELAY_US_MAX {
        return Err(format!("--delay-us must be at most {DELAY_US_MAX}"));
    }
    let repeat = options.repeat;
    if !(1..=REPEAT_MAX).contains(&repeat) {
        return Err(format!("--repeat must be 1..={REPEAT_MAX}"));
    }
    let remote_idle = RemoteIdle::from_name(&options.remote_idle).ok_or_else(|| {
        format!(
            "--remote-idle: {:?} is not spin, park or invoker",
            options.remote_idle
        )
    })?;
    let all: Vec<String> = Case::ALL
        .iter()
        .map(|case| case.name().to_string())
        .collect();
    let names = if options.cases.is_empty() {
        &all
    } else {
        &options.cases
    };
    let mut cases = Vec::new();
    for name in names {
        let case = Case::from_name(name)
            .ok_or_else(|| format!("--cases: unknown case {name:?} (known: {})", all.join(" ")))?;
        if !cases.contains(&case) {
            cases.push(case);
        }
    }
    if cases.is_empty() {
        return Err("nothing to measure".to_string());
    }
    Ok(Plan {
        cases,
        local,
        remote,
        delay_us,
        remote_idle,
        repeat,
        json: options.json,
    })
}

/// `txcast bench throughput [options]`.
pub fn run(args: &Args) -> i32 {
    super::set_key_mode(args.key);
    let plan = match plan_or_exit("throughput", plan(args)) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let load_at_start = load_average();
    let mut runs: Vec<Vec<Measured>> = vec![Vec::new(); plan.cases.len()];
    // msg/s by case and round, for ratios within a round (see `paired_text`).
    let mut rates: Vec<Vec<Option<f64>>> = vec![vec![None; plan.repeat as usize]; plan.cases.len()];
    let mut failures = 0;
    let total = plan.cases.len() as u64 * plan.repeat;
    let mut index = 0;
    let progress = Progress::points("throughput", total);
    // Round by round, so each case runs close in time to its baseline.
    for round in 1..=plan.repeat {
        for (case_index, &case) in plan.cases.iter().enumerate() {
            index += 1;
            let stream = plan.stream(case);
            let head = format!(
                "throughput [{index}/{total}] run {round} {:<22}: {} + {} messages ... ",
                case.name(),
                stream.warmup,
                stream.messages
            );
            progress.point_start(&head);
            let started = Instant::now();
            match measure(case, &stream, &plan) {
                Ok(m) => {
                    let (p50, p99) = m
                        .outcome
                        .latency
                        .map_or((f64::NAN, f64::NAN), |s| (s.p50_ns as f64, s.p99_ns as f64));
                    let tail = format!(
                        "{:.2} s, {:.0} msg/s, p50 {:.1} µs, p99 {:.1} µs",
                        started.elapsed().as_secs_f64(),
                        m.outcome.messages_per_second(),
                        p50 / 1000.0,
                        p99 / 1000.0
                    );
                    progress.point_done(&head, &tail);
                    rates[case_index][round as usize - 1] = Some(m.outcome.messages_per_second());
                    runs[case_index].push(m);
                }
                Err(error) => {
                    progress.point_done(&head, &format!("FAILED: {error}"));
                    failures += 1;
                }
            }
        }
    }
    progress.finish();
    let measured: Vec<Measured> = runs.iter().filter_map(|r| median_run(r)).collect();
    let heading = heading(&plan, load_at_start);
    let (mut table, json) = render(&measured);
    table.push_str(&runs_text(&runs));
    table.push_str(&paired_text(&plan.cases, &rates));
    if plan.json {
        eprint!("{heading}{table}");
        print!("{json}");
    } else {
        print!("{heading}{table}");
    }
    if failures > 0 {
        eprintln!("txcast bench throughput: {failures} of {total} measurements failed");
        EXIT_FAILED
    } else {
        0
    }
}

fn heading(plan: &Plan, load_at_start: Option<f64>) -> String {
    format!(
        "throughput: one sender streaming {MESSAGE_BYTES}-byte messages to a receiver in \
         another process; msg/s from the receipt of the last of {} warm-up messages to the \
         receipt of the last message, median of {} runs; one-way latency (send to receipt, CLOCK_MONOTONIC) of \
         1 in {} timed messages local, 1 in {} remote\nremote: {}, packing {} µs at most \
         (pack-on); machine: {} CPUs, 1-minute load average {} at start, {} at end\n",
        plan.local.warmup,
        plan.repeat,
        plan.local.latency_every,
        plan.remote.latency_every,
        match plan.remote_idle {
            RemoteIdle::Invoker => "no engine threads, each application thread drives its engine (invoker) and spins",
            RemoteIdle::Spin => "engine threads on both sides, receiving thread spins",
            RemoteIdle::Park => "engine threads on both sides, receiving thread parks",
        },
        plan.delay_us,
        cpus(),
        show(load_at_start),
        show(load_average())
    )
}

/// The run with the median messages/s (the lower middle one of an even count).
pub fn median_run(runs: &[Measured]) -> Option<Measured> {
    let mut sorted: Vec<&Measured> = runs.iter().collect();
    sorted.sort_by(|a, b| {
        a.outcome
            .messages_per_second()
            .total_cmp(&b.outcome.messages_per_second())
    });
    sorted
        .get(sorted.len().checked_sub(1)? / 2)
        .map(|m| (*m).clone())
}

/// Messages/s of every run, per case (the tables show the median run).
fn runs_text(runs: &[Vec<Measured>]) -> String {
    let mut out = String::from("\nruns (msg/s, in order; the tables show the median run)\n");
    for case_runs in runs {
        let Some(first) = case_runs.first() else {
            continue;
        };
        let rates: Vec<String> = case_runs
            .iter()
            .map(|m| format!("{:.0}", m.outcome.messages_per_second()))
            .collect();
        let _ = writeln!(out, "  {:<22} {}", first.case.name(), rates.join(" "));
    }
    out
}

/// Ratios within each round: a case against its baseline measured just before it (see
/// `stats::paired_line`).
fn paired_text(cases: &[Case], rates: &[Vec<Option<f64>>]) -> String {
    let mut out = String::new();
    let pairs = [
        (Case::TxcastLocal, Case::RawSpscRing),
        (Case::TxcastRemotePackOn, Case::TxcastRemotePackOff),
    ];
    for (case, base) in pairs {
        let (Some(c), Some(b)) = (
            cases.iter().position(|&x| x == case),
            cases.iter().position(|&x| x == base),
        ) else {
            continue;
        };
        let label = format!("{} / {}", case.name(), base.name());
        if let Some(line) = super::stats::paired_line(&label, &rates[c], &rates[b]) {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// The human tables and the JSON lines of the measured cases.
fn render(measured: &[Measured]) -> (String, String) {
    let mut report = Report::new("throughput", BASELINES);
    for m in measured {
        let name = m.case.name();
        let bytes = MESSAGE_BYTES as u64;
        report.push_throughput(name, bytes, m.outcome.messages, m.outcome.elapsed());
        if let Some(summary) = m.outcome.latency {
            report.push_latency(name, bytes, summary);
        }
    }
    let mut table = report.table();
    let mut json = report.json_lines();
    let packed: Vec<&Measured> = measured.iter().filter(|m| m.packing.is_some()).collect();
    if !packed.is_empty() {
        table.push_str("\npacking (sender's link; histogram: messages per packet:packets)\n");
        for m in packed {
            let p = m.packing.as_ref().expect("filtered");
            let _ = writeln!(
                table,
                "  {:<22} {} messages in {} data packets ({} retransmitted messages), {:.2} \
                 per packet, send buffer full {} times; top bins {}",
                m.case.name(),
                p.messages_sent,
                p.data_packets_sent,
                p.retransmitted,
                p.mean_messages_per_packet(),
                p.send_full,
                p.histogram_text(6)
            );
            let bins = p
                .histogram
                .iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(|(k, &n)| (k.to_string(), n))
                .collect();
            json.push_str(&bench_json! {
                bench: "throughput",
                kind: "packing",
                case: m.case.name(),
                messages_sent: p.messages_sent,
                data_packets_sent: p.data_packets_sent,
                retransmitted: p.retransmitted,
                send_full: p.send_full,
                mean_messages_per_packet: rounded(p.mean_messages_per_packet(), 4),
                histogram: InOrder(bins),
            });
            json.push('\n');
        }
    }
    let targets = targets(measured);
    table.push_str("\ntargets\n");
    for t in &targets {
        let relation = if t.at_least { ">=" } else { "<=" };
        let (value, verdict) = match (t.value, t.met()) {
            (Some(v), Some(met)) => (format!("{v:.3}"), if met { "met" } else { "MISSED" }),
            _ => ("-".to_string(), "not measured"),
        };
        let _ = writeln!(
            table,
            "  {:<40} {value:>8}  (target {relation} {}) {verdict}",
            t.name, t.bound
        );
        json.push_str(&bench_json! {
            bench: "throughput",
            kind: "target",
            name: t.name,
            value: t.value.and_then(|v| rounded(v, 4)),
            bound: rounded(t.bound, 4),
            relation: relation,
            met: t.met(),
        });
        json.push('\n');
    }
    (table, json)
}

/// The application-level stream of unpacked remote messages (`txcast-remote-pack-off` with
/// the default options), for benchmarks that compare with it.
pub fn measure_remote_pack_off(messages: u64) -> io::Result<Outcome> {
    let plan = plan(&super::parse(&[]).map_err(io::Error::other)?).map_err(io::Error::other)?;
    let stream = Stream {
        warmup: WARMUP_DEFAULT,
        messages,
        latency_every: LATENCY_EVERY_REMOTE_DEFAULT,
    };
    measure(Case::TxcastRemotePackOff, &stream, &plan).map(|m| m.outcome)
}

/// Runs one case with the receiver in a second process.
fn measure(case: Case, stream: &Stream, plan: &Plan) -> io::Result<Measured> {
    let result = ResultFile::create()?;
    let mut args = vec!["throughput".to_string(), case.name().to_string()];
    args.extend(stream.to_args());
    args.push(result.path.to_string_lossy().into_owned());
    let packing = match case {
        Case::RawSpscRing => {
            ring::send(stream, args)?;
            None
        }
        Case::TxcastLocal | Case::TxcastRemotePackOff | Case::TxcastRemotePackOn => {
            let setup = txcast::Setup {
                case,
                delay_us: plan.delay_us,
                remote_idle: plan.remote_idle,
            };
            txcast::send(&setup, stream, args)?
        }
    };
    let outcome = result.read()?;
    if outcome.messages != stream.messages {
        return Err(io::Error::other(format!(
            "the partner reports {} messages, {} were sent",
            outcome.messages, stream.messages
        )));
    }
    Ok(Measured {
        case,
        outcome,
        packing,
    })
}

/// Starts the partner with `args`, runs `sender` (which must see the partner's rendezvous,
/// then send), then waits for the partner to finish; kills the partner if the sender fails.
fn with_partner<T>(args: &[String], sender: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let mut partner = spawn_child(args)?;
    let sent = sender();
    finish_child(&mut partner, sent, FINISH_TIMEOUT)
}

/// The file the partner writes its [`Outcome`] into; removed on drop.
struct ResultFile {
    path: PathBuf,
}

impl ResultFile {
    fn create() -> io::Result<ResultFile> {
        static SEQUENCE: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "txcast-throughput-{}-{}.result",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        Ok(ResultFile { path })
    }

    fn read(&self) -> io::Result<Outcome> {
        let text = std::fs::read_to_string(&self.path)?;
        Outcome::parse(text.trim()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("partner's result {:?}: {e}", text.trim()),
            )
        })
    }
}

impl Drop for ResultFile {
    fn drop(&mut self) {
        // Best effort: a leftover file in the temp directory is harmless.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the outcome into the file the parent created (which must exist: we never create
/// files at paths we are handed).
fn write_result(path: &Path, outcome: &Outcome) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).truncate(true).open(path)?;
    writeln!(file, "{}", outcome.to_line())
}

/// `txcast __bench-child throughput <case> <warmup> <messages> <latency every> <result file>
/// <rendezvous...>`: the receiver.
pub fn child(args: &[String]) -> io::Result<()> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let [name, warmup, messages, every, result, rendezvous @ ..] = args else {
        return Err(invalid(
            "usage: throughput <case> <warmup> <messages> <latency every> <result file> \
             <rendezvous...>"
                .to_string(),
        ));
    };
    let case = Case::from_name(name).ok_or_else(|| invalid(format!("unknown case {name:?}")))?;
    let stream =
        Stream::from_args(&[warmup.clone(), messages.clone(), every.clone()]).map_err(invalid)?;
    let outcome = match case {
        Case::RawSpscRing => ring::receive(&stream, rendezvous)?,
        _ => txcast::receive(case, &stream, rendezvous)?,
    };
    write_result(Path::new(result), &outcome)
}

#[cfg(test)]
mod tests {
    use super::super::strings;
    use super::*;

    #[test]
    fn paired_ratios_skip_rounds_missing_either_side() {
        let cases = [Case::RawSpscRing, Case::TxcastLocal];
        let rates = vec![
            vec![Some(10.0), Some(20.0), None, Some(8.0)],
            vec![Some(5.0), Some(4.0), Some(3.0), Some(6.0)],
        ];
        assert_eq!(
            paired_text(&cases, &rates),
            "paired by round, txcast-local / raw-spsc-ring: 0.50 0.20 0.75 (median 0.50)\n"
        );
        assert_eq!(paired_text(&cases[..1], &rates[..1]), "");
    }

    #[test]
    fn outcome_round_trips_through_its_line() {
        let with = Outcome {
            messages: 2_000_000,
            elapsed_ns: 123_456_789,
            latency: Some(Summary {
                count: 125_000,
                min_ns: 80,
                p50_ns: 400,
                p90_ns: 900,
                p99_ns: 2_500,
                max_ns: 1_000_000,
                mean_ns: 512.3456789,
            }),
        };
        assert_eq!(Outcome::parse(&with.to_line()), Ok(with));
        let without = Outcome {
            messages: 5,
            elapsed_ns: 9,
            latency: None,
        };
        assert_eq!(Outcome::parse(&without.to_line()), Ok(without));
    }

    #[test]
    fn outcome_parse_names_what_is_wrong() {
        assert_eq!(
            Outcome::parse("messages=1 samples=0"),
            Err("no elapsed_ns".to_string())
        );
        assert!(Outcome::parse("messages=1 elapsed_ns=x samples=0")
            .unwrap_err()
            .contains("elapsed_ns"));
        assert!(Outcome::parse("messages=1 elapsed_ns=2 samples=3 min_ns=1")
            .unwrap_err()
            .contains("p50_ns"));
        assert!(Outcome::parse("garbage").unwrap_err().contains("key=value"));
    }

    #[test]
    fn messages_carry_sequence_and_stamp() {
        let mut message = [0u8; MESSAGE_BYTES];
        stamp(&mut message, 42, 7);
        assert_eq!(unstamp(&message), Some((42, 7)));
        assert_eq!(unstamp(&message[..10]), None);
    }

    #[test]
    fn sampling_skips_warmup_and_keeps_every_kth() {
        let stream = Stream {
            warmup: 3,
            messages: 10,
            latency_every: 4,
        };
        let sampled: Vec<u64> = (0..stream.total()).filter(|&s| stream.sampled(s)).collect();
        assert_eq!(sampled, vec![3, 7, 11]);
        assert_eq!(stream.samples(), 3);
    }

    #[test]
    fn tally_checks_order_and_counts_the_timed_messages() {
        let stream = Stream {
            warmup: 2,
            messages: 5,
            latency_every: 2,
        };
        let mut tally = Tally::new(stream).unwrap();
        let mut done = false;
        send_stream(&stream, |m| {
            done = tally.on_message(m)?;
            Ok(())
        })
        .unwrap();
        assert!(done);
        let outcome = tally.outcome().unwrap();
        assert_eq!(outcome.messages, 5);
        assert_eq!(outcome.latency.unwrap().count, 3);

        let mut tally = Tally::new(stream).unwrap();
        let mut message = [0u8; MESSAGE_BYTES];
        stamp(&mut message, 1, 0);
        assert!(tally.on_message(&message).is_err());
        assert!(Tally::new(stream).unwrap().outcome().is_err());
    }

    fn measured(case: Case, messages: u64, elapsed_ns: u64, p99_ns: u64) -> Measured {
        Measured {
            case,
            outcome: Outcome {
                messages,
                elapsed_ns,
                latency: Some(Summary {
                    count: 1,
                    min_ns: p99_ns,
                    p50_ns: p99_ns,
                    p90_ns: p99_ns,
                    p99_ns,
                    max_ns: p99_ns,
                    mean_ns: p99_ns as f64,
                }),
            },
            packing: None,
        }
    }

    #[test]
    fn targets_compare_the_right_cases() {
        let all = [
            measured(Case::RawSpscRing, 1000, 1_000, 10),
            measured(Case::TxcastLocal, 800, 1_000, 10),
            measured(Case::TxcastRemotePackOff, 100, 1_000, 200),
            measured(Case::TxcastRemotePackOn, 900, 1_000, 300),
        ];
        let t = targets(&all);
        assert_eq!(t.len(), 3);
        assert!((t[0].value.unwrap() - 0.8).abs() < 1e-9);
        assert_eq!(t[0].met(), Some(true));
        assert!((t[1].value.unwrap() - 9.0).abs() < 1e-9);
        assert_eq!(t[1].met(), Some(false));
        assert!((t[2].value.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(t[2].met(), Some(false));
        let some = targets(&all[..2]);
        assert_eq!(some[1].value, None);
        assert_eq!(some[1].met(), None);
    }

    #[test]
    fn median_run_picks_the_middle_rate() {
        let runs = [
            measured(Case::TxcastLocal, 300, 1_000, 1),
            measured(Case::TxcastLocal, 100, 1_000, 2),
            measured(Case::TxcastLocal, 200, 1_000, 3),
        ];
        assert_eq!(median_run(&runs).unwrap().outcome.messages, 200);
        assert_eq!(median_run(&runs[..2]).unwrap().outcome.messages, 100);
        assert!(median_run(&[]).is_none());
    }

    #[test]
    fn packing_summarises_its_histogram() {
        let mut histogram = vec![0u64; 64];
        histogram[1] = 5;
        histogram[20] = 10;
        histogram[63] = 1;
        let p = Packing {
            messages_sent: 5 + 200 + 70,
            histogram,
            ..Packing::default()
        };
        assert!((p.mean_messages_per_packet() - 275.0 / 16.0).abs() < 1e-9);
        assert_eq!(p.histogram_text(2), "20:10 1:5");
        assert_eq!(p.histogram_text(5), "20:10 1:5 63+:1");
        assert_eq!(Packing::default().histogram_text(3), "-");
    }

    #[test]
    fn plan_parses_defaults_and_rejects_nonsense() {
        let try_plan = |words: &[&str]| super::plan(&super::super::parse::<Args>(words)?);
        let plan = try_plan(&[]).unwrap();
        assert_eq!(plan.cases, Case::ALL.to_vec());
        assert_eq!(plan.local.messages, MESSAGES_DEFAULT);
        assert_eq!(plan.remote.messages, REMOTE_MESSAGES_DEFAULT);
        assert_eq!(plan.local.latency_every, LATENCY_EVERY_LOCAL_DEFAULT);
        assert_eq!(plan.remote.latency_every, LATENCY_EVERY_REMOTE_DEFAULT);
        assert_eq!(plan.remote_idle, REMOTE_IDLE_DEFAULT);
        assert_eq!(plan.repeat, REPEAT_DEFAULT);
        let small = try_plan(&[
            "--messages",
            "10k",
            "--latency-every",
            "4",
            "--cases",
            "txcast-local,raw-spsc-ring",
            "--remote-idle",
            "spin",
        ])
        .unwrap();
        assert_eq!(small.cases, vec![Case::TxcastLocal, Case::RawSpscRing]);
        assert_eq!(small.local.messages, 10_000);
        assert_eq!(
            (small.local.latency_every, small.remote.latency_every),
            (4, 4)
        );
        assert_eq!(small.remote_idle, RemoteIdle::Spin);
        for bad in [
            &["--cases", "carrier-pigeon"][..],
            &["--messages", "0"],
            &["--warmup", "0"],
            &["--latency-every", "0"],
            &["--delay-us", "1000000"],
            &["--remote-idle", "nap"],
            &["--repeat", "0"],
            &["extra"],
        ] {
            assert!(try_plan(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stream_arguments_round_trip() {
        let stream = Stream {
            warmup: 7,
            messages: 9,
            latency_every: 3,
        };
        assert_eq!(Stream::from_args(&stream.to_args()), Ok(stream));
        assert!(Stream::from_args(&strings(&["1", "2"])).is_err());
        assert!(Stream::from_args(&strings(&["1", "x", "3"])).is_err());
    }
}
