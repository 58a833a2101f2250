//! `txcast bench multicast`: the sender's cost of sending one message to 1..16 destinations
//! (paper 000 §3.3 Figure 3: "send a 20 byte message to the set of destinations and return";
//! paper 001 §3.2 Table 4).
//!
//! Methods ([`Method`]): a naive loop of `sendto` (the user-level simulated multicast the papers
//! start from), one `sendmmsg` from the caller's thread, txcast's `Port::multicast` fanned out by
//! the engine thread, and IP multicast to the transaction's group.
//!
//! Each row opens the sender ([`sender::open`]) in this process and starts the partner
//! (`txcast __bench-child multicast <method> <dests> <bytes> <calls> <cpus>`,
//! [`partner::serve`]) that holds every receiver (raw UDP sockets, or txcast ports that joined
//! the transaction, all on one engine that parks when idle). The calling thread runs on one CPU,
//! the partner on the others ([`cpu`]). The timed region is the multicast call alone; after it
//! the parent waits, untimed, until the partner reports how many destinations got that message,
//! so no queue ever fills and every loss is counted; txcast calls also wait, untimed, for the
//! sender's engine thread to park ([`sender::Sender::settle`]), so every call starts from the
//! same state. CPU per multicast is the calling thread's CPU inside the call (thread CPU
//! clock) plus the CPU of the process's other threads over the row (`getrusage` SELF minus
//! THREAD): what the engine thread does for the caller is counted, not hidden.

mod cpu;
mod partner;
mod sender;

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::machine::{cpus, cpus_busy, load_average, show, BUSY_SAMPLE};
use super::stats::{bench_json, micros, rounded, Report, Samples, Summary, Table};
use super::{
    finish_child, iterations_and_warmup, parse_u64, plan_or_exit, usize_list_in, CHILD_SUBCOMMAND,
    EXIT_FAILED,
};
use crate::progress::Progress;
use txcast_proto::{Address, TxnId};

pub use partner::serve as child;

/// Timed calls per row unless `--iterations` says otherwise. Each call is followed by an
/// untimed hand-shake with the partner (and, for txcast, a wait for the engine to park) that
/// costs 100-500 µs on a small shared machine; 40 rows of 5,000 keep the default run near a
/// minute.
pub const ITERATIONS_DEFAULT: u64 = 5_000;
/// Untimed calls before the timed ones unless `--warmup` says otherwise.
pub const WARMUP_DEFAULT: u64 = 250;
/// Bound on `--iterations` (samples are preallocated: 8 bytes each).
pub const ITERATIONS_MAX: u64 = 10_000_000;
/// Message sizes unless `--bytes` says otherwise (paper 000 Figure 3 used 20 bytes).
pub const BYTES_DEFAULT: &[u64] = &[20, 1000];
/// Destination counts unless `--dests` says otherwise.
pub const DESTS_DEFAULT: &[u64] = &[1, 2, 4, 8, 16];
/// Most destinations: sites 1..=16, loopback addresses 127.0.0.2..=127.0.0.17.
pub const DESTS_MAX: u16 = 16;
/// Shortest message: room for the call's sequence number.
pub const MESSAGE_BYTES_MIN: usize = 8;
/// Longest message: one txcast multicast packet of the default 1472 bytes holds it.
pub const MESSAGE_BYTES_MAX: usize = 1400;
/// The acceptance target: with txcast, 16 destinations cost at most this many times one.
pub const FANOUT_TARGET: f64 = 3.0;

/// First txcast instance number of the bench (one per method: 35..=39, see
/// [`Method::instance`]). With the default numbering (`20000 + (instance * 16 + type) * 64 +
/// server`) instances above 44 fall outside the UDP port range; 35..=39 are clear of the demo
/// (0), the port tests (1..=13) and `bench rtt` (40..=43).
pub const INSTANCE_BASE: u16 = 35;
/// Server type of the sending port.
pub const SENDER_TYPE: u16 = 1;
/// Server type of every receiving port or socket (the multicast template's type).
pub const RECEIVER_TYPE: u16 = 3;
/// The transaction every receiver joins.
pub const TXN: TxnId = TxnId(0x6d75_6c74_6963_6173);

/// How long either side waits for the other (ready, an acknowledgement, the exit).
pub const PARTNER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a receiver waits for one call's message before counting it lost.
pub const LOSS_WAIT: Duration = Duration::from_millis(200);

/// One way of sending a message to a set of destinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// A loop of `sendto` on one UDP socket, one per destination.
    NaiveSendto,
    /// One `sendmmsg` (`txcast_port::mmsg::send_same_to_many`) from the caller's thread.
    SendmmsgInline,
    /// `Port::multicast`: the caller builds the packet once and queues it; the engine thread
    /// (default idle strategy: spins 50 µs after work) sends it with `sendmmsg`.
    TxcastFanout,
    /// As `TxcastFanout` with an engine that parks as soon as it is idle (`idle_spin` 0), to
    /// tell the fan-out's own CPU from the engine's idle spinning.
    TxcastFanoutPark,
    /// `Port::multicast` with IP multicast on: one `sendto` to the transaction's group.
    IpMulticast,
}

/// What holds the receivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receivers {
    /// Plain UDP sockets.
    Raw,
    /// txcast ports that joined [`TXN`]; `ip_multicast`: the cluster uses IP multicast.
    Ports { ip_multicast: bool },
}

impl Method {
    pub const ALL: [Method; 5] = [
        Method::NaiveSendto,
        Method::SendmmsgInline,
        Method::TxcastFanout,
        Method::TxcastFanoutPark,
        Method::IpMulticast,
    ];
    /// Methods run unless `--methods` says otherwise.
    pub const DEFAULT: [Method; 4] = [
        Method::NaiveSendto,
        Method::SendmmsgInline,
        Method::TxcastFanout,
        Method::IpMulticast,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::NaiveSendto => "naive-sendto",
            Method::SendmmsgInline => "sendmmsg-inline",
            Method::TxcastFanout => "txcast-fanout",
            Method::TxcastFanoutPark => "txcast-fanout-park",
            Method::IpMulticast => "ip-multicast",
        }
    }

    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn receivers(self) -> Receivers {
        match self {
            Method::NaiveSendto | Method::SendmmsgInline => Receivers::Raw,
            Method::TxcastFanout | Method::TxcastFanoutPark => Receivers::Ports {
                ip_multicast: false,
            },
            Method::IpMulticast => Receivers::Ports { ip_multicast: true },
        }
    }

    /// The txcast instance of this method's addresses: distinct per method, so a row never
    /// meets a straggler of another.
    pub fn instance(self) -> u16 {
        let index = Method::ALL
            .iter()
            .position(|&m| m == self)
            .expect("every method is in ALL");
        INSTANCE_BASE + index as u16
    }

    /// The sending port (txcast methods).
    pub fn sender_address(self) -> Address {
        Address::new(self.instance(), 0, SENDER_TYPE, 0)
    }

    /// The receiver at `site` (1..=[`DESTS_MAX`]); also the multicast template at any site.
    pub fn receiver_address(self, site: u16) -> Address {
        Address::new(self.instance(), site, RECEIVER_TYPE, 0)
    }

    /// How many destinations a successful call reports it handed the message to.
    pub fn handed(self, dests: usize) -> usize {
        match self {
            Method::IpMulticast => 1,
            _ => dests,
        }
    }
}

/// Sites of the first `dests` receivers.
pub fn sites(dests: usize) -> Vec<u16> {
    (1..=dests as u16).collect()
}

/// Fills `message` with the pattern of call `seq`: the sequence number (little-endian) in the
/// first 8 bytes, then bytes that depend on their position.
pub fn fill_message(message: &mut [u8], seq: u64) {
    for (i, b) in message.iter_mut().enumerate().skip(8) {
        *b = (i * 31 + 7) as u8;
    }
    stamp(message, seq);
}

/// Writes the sequence number into a message already filled by [`fill_message`].
#[inline]
pub fn stamp(message: &mut [u8], seq: u64) {
    message[..8].copy_from_slice(&seq.to_le_bytes());
}

/// The sequence number of a message of at least 8 bytes.
pub fn seq_of(message: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(message.get(..8)?.try_into().ok()?))
}

/// What `txcast bench multicast` measures.
#[derive(Debug, Clone)]
pub struct Plan {
    pub methods: Vec<Method>,
    pub bytes: Vec<usize>,
    pub dests: Vec<usize>,
    pub warmup: u64,
    pub iterations: u64,
    pub json: bool,
}

// The options of `txcast bench multicast` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
#[command(after_help = after_help())]
pub struct Args {
    /// Calls timed per method, size and destination count
    #[arg(long, default_value_t = ITERATIONS_DEFAULT, value_parser = parse_u64)]
    pub iterations: u64,
    /// Calls before the timed ones [default: 250, at most --iterations]
    #[arg(long, value_parser = parse_u64)]
    pub warmup: Option<u64>,
    /// Message sizes in bytes (8 to 1400)
    #[arg(long, value_delimiter = ',', default_values_t = BYTES_DEFAULT.to_vec(), value_parser = parse_u64)]
    pub bytes: Vec<u64>,
    /// Destination counts (1 to 16)
    #[arg(long, value_delimiter = ',', default_values_t = DESTS_DEFAULT.to_vec(), value_parser = parse_u64)]
    pub dests: Vec<u64>,
    /// The methods to measure (see below)
    #[arg(long, value_delimiter = ',', default_values_t = Method::DEFAULT.map(|m| m.name().to_string()))]
    pub methods: Vec<String>,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

/// The methods, for `txcast bench multicast --help`.
fn after_help() -> String {
    format!("methods: {}", known())
}

pub fn plan(options: &Args) -> Result<Plan, String> {
    let (iterations, warmup) = iterations_and_warmup(
        options.iterations,
        options.warmup,
        WARMUP_DEFAULT,
        ITERATIONS_MAX,
    )?;
    let bytes = usize_list_in(
        "bytes",
        &options.bytes,
        MESSAGE_BYTES_MIN..=MESSAGE_BYTES_MAX,
    )?;
    let dests = usize_list_in("dests", &options.dests, 1..=DESTS_MAX as usize)?;
    let mut methods = Vec::new();
    for name in options.methods.iter().filter(|n| !n.is_empty()) {
        let method = Method::from_name(name)
            .ok_or_else(|| format!("--methods: unknown method {name:?} (known: {})", known()))?;
        methods.push(method);
    }
    if methods.is_empty() || bytes.is_empty() || dests.is_empty() {
        return Err("nothing to measure".to_string());
    }
    Ok(Plan {
        methods,
        bytes,
        dests,
        warmup,
        iterations,
        json: options.json,
    })
}

fn known() -> String {
    Method::ALL.map(Method::name).join(" ")
}

/// One row's measurements.
#[derive(Debug, Clone)]
pub struct RowResult {
    pub method: Method,
    pub dests: usize,
    pub bytes: usize,
    pub latency: Summary,
    /// CPU time of the calling thread inside the timed calls (thread CPU clock, less the
    /// clock reads' own cost).
    pub call_cpu_ns: u64,
    /// CPU time of the whole sending process over the timed calls and their hand-shakes.
    pub process_cpu_ns: u64,
    /// CPU time of the calling thread over the same span (calls and hand-shakes).
    pub caller_cpu_ns: u64,
    /// Deliveries the partner counted, and how many there should have been.
    pub delivered: u64,
    pub expected: u64,
}

impl RowResult {
    pub fn case(&self) -> String {
        case_name(self.method, self.dests)
    }

    pub fn calls(&self) -> u64 {
        self.latency.count
    }

    /// CPU of the process's other threads (the engine thread) per call.
    pub fn other_threads_ns_per_call(&self) -> f64 {
        self.process_cpu_ns.saturating_sub(self.caller_cpu_ns) as f64 / self.calls() as f64
    }

    /// CPU of the calling thread in one call.
    pub fn call_cpu_ns_per_call(&self) -> f64 {
        self.call_cpu_ns as f64 / self.calls() as f64
    }

    /// The sender's CPU per multicast: the call itself plus what the process's other threads
    /// did for it.
    pub fn cpu_ns_per_call(&self) -> f64 {
        self.call_cpu_ns_per_call() + self.other_threads_ns_per_call()
    }

    pub fn process_ns_per_call(&self) -> f64 {
        self.process_cpu_ns as f64 / self.calls() as f64
    }
}

pub fn case_name(method: Method, dests: usize) -> String {
    format!("{}/{dests}", method.name())
}

/// `txcast bench multicast [options]`.
pub fn run(args: &Args) -> i32 {
    let plan = match plan_or_exit("multicast", plan(args)) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let load_at_start = load_average();
    let placement = Placement::of_this_thread();
    let busy_before = cpus_busy();
    let baselines = [
        case_name(Method::NaiveSendto, 1),
        case_name(Method::TxcastFanout, 1),
    ];
    let mut report = Report::new("multicast", &baselines.each_ref().map(String::as_str));
    let mut results = Vec::new();
    let mut failures = 0;
    let total = plan.methods.len() * plan.bytes.len() * plan.dests.len();
    let width = total.to_string().len();
    let mut index = 0;
    let progress = Progress::points("multicast", total as u64);
    for &bytes in &plan.bytes {
        for &method in &plan.methods {
            for &dests in &plan.dests {
                index += 1;
                let head = format!(
                    "multicast [{index:>width$}/{total}] {:<21} {bytes:>4} B: {} + {} calls ... ",
                    case_name(method, dests),
                    plan.warmup,
                    plan.iterations
                );
                progress.point_start(&head);
                let started = Instant::now();
                let spec = RowSpec {
                    method,
                    dests,
                    bytes,
                    warmup: plan.warmup,
                    iterations: plan.iterations,
                };
                match measure_row(spec, placement.as_ref()) {
                    Ok(row) => {
                        let tail = format!(
                            "{:.2} s, p50 {:.3} µs, p99 {:.3} µs, cpu {:.2} µs/call, {}",
                            started.elapsed().as_secs_f64(),
                            row.latency.p50_ns as f64 / 1000.0,
                            row.latency.p99_ns as f64 / 1000.0,
                            row.cpu_ns_per_call() / 1000.0,
                            losses_text(row.delivered, row.expected)
                        );
                        progress.point_done(&head, &tail);
                        report.push_latency(&row.case(), bytes as u64, row.latency);
                        results.push(row);
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
    let heading = format!(
        "multicast: the sender's cost of one multicast call (start of the call until it \
         returns), {} timed after {} warm-up per row (µs)\n\
         machine: {} CPUs, {} of them busy in the {:.2} s before the run, 1-minute load \
         average {} at start, {} at end; {}\n\
         on loopback the sender's system calls also run the kernel's receive path (and the \
         wake-up of the receiver) for every copy; txcast calls start with the sender's engine \
         thread parked (as between spaced multicasts) and pay its wake-up\n",
        plan.iterations,
        plan.warmup,
        cpus(),
        show(busy_before),
        BUSY_SAMPLE.as_secs_f64(),
        show(load_at_start),
        show(load_average()),
        match &placement {
            Some(p) => format!(
                "calling thread on CPU {}, partner on CPUs {}, sender's engine thread anywhere",
                p.caller,
                cpus_word(Some(&p.partner))
            ),
            None => "one CPU: sender and partner share it".to_string(),
        }
    );
    let scaling = scaling(&results);
    let body = format!(
        "{heading}{}\n{}\n{}",
        report.table(),
        cpu_table(&results),
        scaling_table(&scaling)
    );
    if plan.json {
        eprint!("{body}");
        print!("{}", report.json_lines());
        for row in &results {
            println!("{}", cpu_json(row));
        }
        for s in &scaling {
            println!("{}", scaling_json(s));
        }
    } else {
        print!("{body}");
    }
    let lost: u64 = results.iter().map(|r| r.expected - r.delivered).sum();
    if failures > 0 || lost > 0 {
        eprintln!(
            "txcast bench multicast: {failures} of {total} rows failed, {lost} deliveries lost"
        );
        EXIT_FAILED
    } else {
        0
    }
}

fn losses_text(delivered: u64, expected: u64) -> String {
    if delivered == expected {
        format!("all {expected} delivered")
    } else {
        format!(
            "LOST {} of {expected} deliveries",
            expected.saturating_sub(delivered)
        )
    }
}

/// One row of the plan.
#[derive(Debug, Clone, Copy)]
pub struct RowSpec {
    pub method: Method,
    pub dests: usize,
    pub bytes: usize,
    pub warmup: u64,
    pub iterations: u64,
}

/// Where the calling thread and the partner run (see [`cpu`]).
#[derive(Debug, Clone)]
pub struct Placement {
    /// Every CPU the bench may use, restored on the calling thread after each row.
    pub allowed: Vec<usize>,
    pub caller: usize,
    pub partner: Vec<usize>,
}

impl Placement {
    /// The calling thread on the first allowed CPU, the partner on the others; `None` on a
    /// single CPU.
    pub fn of_this_thread() -> Option<Placement> {
        let allowed = cpu::allowed_cpus().ok()?;
        let (caller, partner) = cpu::split_cpus(&allowed)?;
        Some(Placement {
            allowed,
            caller,
            partner,
        })
    }
}

/// Words for the partner's command line naming its CPUs (`-`: anywhere).
pub fn cpus_word(cpus: Option<&[usize]>) -> String {
    match cpus {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".to_string(),
    }
}

/// Parses [`cpus_word`]'s output.
pub fn parse_cpus(word: &str) -> Option<Vec<usize>> {
    if word == "-" {
        return Some(Vec::new());
    }
    word.split(',').map(|c| c.parse().ok()).collect()
}

/// Measures one row: opens the sender (its engine thread may run on any CPU), starts the
/// partner on the partner's CPUs, moves the calling thread to its own CPU, runs the calls.
pub fn measure_row(spec: RowSpec, placement: Option<&Placement>) -> io::Result<RowResult> {
    let mut sender = sender::open(spec.method, spec.dests)?;
    let partner_cpus = placement.map(|p| p.partner.as_slice());
    let mut partner = Partner::spawn(spec, spec.warmup + spec.iterations, partner_cpus)?;
    let measured = partner.ready(spec.dests).and_then(|()| {
        if let Some(p) = placement {
            cpu::pin_thread(&[p.caller])?;
        }
        let r = timed_calls(sender.as_mut(), &mut partner, spec);
        if let Some(p) = placement {
            cpu::pin_thread(&p.allowed)?;
        }
        r
    });
    drop(sender);
    finish_child(&mut partner.child, measured, PARTNER_TIMEOUT)
}

/// Clock-pair samples taken to calibrate the per-call CPU bracket.
const BRACKET_CALIBRATION_SAMPLES: usize = 2_000;

fn timed_calls(
    sender: &mut dyn sender::Sender,
    partner: &mut Partner,
    spec: RowSpec,
) -> io::Result<RowResult> {
    let RowSpec {
        method,
        dests,
        bytes,
        warmup,
        iterations,
    } = spec;
    let capacity = usize::try_from(iterations)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many iterations"))?;
    let mut samples = Samples::with_capacity(capacity);
    let mut message = vec![0u8; bytes];
    fill_message(&mut message, 0);
    let handed_expected = method.handed(dests);
    let bracket_ns = cpu::bracket_overhead_ns(BRACKET_CALIBRATION_SAMPLES);
    let (mut process_start, mut caller_start) = (0, 0);
    let mut delivered = 0u64;
    let mut call_cpu_ns = 0u64;
    for seq in 0..warmup + iterations {
        if seq == warmup {
            process_start = cpu::rusage_ns(libc::RUSAGE_SELF)?;
            caller_start = cpu::rusage_ns(libc::RUSAGE_THREAD)?;
        }
        stamp(&mut message, seq);
        sender.settle()?;
        let cpu_start = cpu::thread_cpu_ns();
        let start = Instant::now();
        let handed = sender.send(&message);
        let elapsed = start.elapsed();
        let cpu_ns = cpu::thread_cpu_ns() - cpu_start;
        let handed = handed?;
        if handed != handed_expected {
            return Err(io::Error::other(format!(
                "call {seq}: handed to {handed} destinations, not {handed_expected}"
            )));
        }
        let got = partner.acknowledgement(dests)?;
        if seq >= warmup {
            samples.record(elapsed);
            call_cpu_ns += cpu_ns.saturating_sub(bracket_ns);
            delivered += u64::from(got);
        }
    }
    let process_cpu_ns = cpu::rusage_ns(libc::RUSAGE_SELF)? - process_start;
    let caller_cpu_ns = cpu::rusage_ns(libc::RUSAGE_THREAD)? - caller_start;
    let latency = samples
        .summary()
        .ok_or_else(|| io::Error::other("no samples"))?;
    Ok(RowResult {
        method,
        dests,
        bytes,
        latency,
        call_cpu_ns,
        process_cpu_ns,
        caller_cpu_ns,
        delivered,
        expected: iterations * dests as u64,
    })
}

/// The partner process and the pipe on which it reports.
struct Partner {
    child: Child,
    reports: ChildStdout,
}

impl Partner {
    fn spawn(spec: RowSpec, calls: u64, cpus: Option<&[usize]>) -> io::Result<Partner> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(CHILD_SUBCOMMAND)
            .args([
                "multicast".to_string(),
                spec.method.name().to_string(),
                spec.dests.to_string(),
                spec.bytes.to_string(),
                calls.to_string(),
                cpus_word(cpus),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let reports = child.stdout.take().expect("stdout is piped");
        Ok(Partner { child, reports })
    }

    /// Waits for the partner's word that its `dests` receivers are open (and joined).
    fn ready(&mut self, dests: usize) -> io::Result<()> {
        let word = read_u32(&mut self.reports, PARTNER_TIMEOUT)?;
        if word as usize != dests {
            return Err(io::Error::other(format!(
                "partner opened {word} receivers, not {dests}"
            )));
        }
        Ok(())
    }

    /// Waits for the partner's count of the destinations that got the last call's message.
    fn acknowledgement(&mut self, dests: usize) -> io::Result<u32> {
        let got = read_u32(
            &mut self.reports,
            PARTNER_TIMEOUT + LOSS_WAIT * dests as u32,
        )?;
        if got as usize > dests {
            return Err(io::Error::other(format!(
                "partner counted {got} deliveries of one call to {dests} destinations"
            )));
        }
        Ok(got)
    }
}

/// Reads one little-endian u32 from the pipe, waiting at most `timeout` for it.
fn read_u32(pipe: &mut ChildStdout, timeout: Duration) -> io::Result<u32> {
    let mut word = [0u8; 4];
    let mut have = 0;
    let deadline = Instant::now() + timeout;
    while have < word.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no word from the partner for {timeout:?}"),
            ));
        }
        let mut fd = libc::pollfd {
            fd: pipe.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut fd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            continue;
        }
        match pipe.read(&mut word[have..])? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the partner exited before reporting",
                ))
            }
            n => have += n,
        }
    }
    Ok(u32::from_le_bytes(word))
}

/// Cost at the most destinations over cost at the fewest, per method and size.
#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    pub method: Method,
    pub bytes: usize,
    pub from_dests: usize,
    pub to_dests: usize,
    pub p50_from_ns: u64,
    pub p50_to_ns: u64,
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    pub ratio_cpu: f64,
}

impl Scaling {
    /// The target applies to txcast's fan-out from 1 to 16 destinations.
    pub fn target(&self) -> Option<f64> {
        let fanout = matches!(self.method, Method::TxcastFanout | Method::TxcastFanoutPark);
        (fanout && self.from_dests == 1 && self.to_dests == DESTS_MAX as usize)
            .then_some(FANOUT_TARGET)
    }

    pub fn met(&self) -> Option<bool> {
        self.target().map(|t| self.ratio_p50 <= t)
    }
}

/// For each method and size measured at two or more destination counts: the ratios between
/// the most and the fewest destinations.
pub fn scaling(rows: &[RowResult]) -> Vec<Scaling> {
    let mut out: Vec<Scaling> = Vec::new();
    for row in rows {
        if out
            .iter()
            .any(|s| s.method == row.method && s.bytes == row.bytes)
        {
            continue;
        }
        let same: Vec<&RowResult> = rows
            .iter()
            .filter(|r| r.method == row.method && r.bytes == row.bytes)
            .collect();
        let from = same.iter().min_by_key(|r| r.dests).expect("row itself");
        let to = same.iter().max_by_key(|r| r.dests).expect("row itself");
        if from.dests == to.dests {
            continue;
        }
        let ratio = |a: f64, b: f64| a / b;
        out.push(Scaling {
            method: row.method,
            bytes: row.bytes,
            from_dests: from.dests,
            to_dests: to.dests,
            p50_from_ns: from.latency.p50_ns,
            p50_to_ns: to.latency.p50_ns,
            ratio_p50: ratio(to.latency.p50_ns as f64, from.latency.p50_ns as f64),
            ratio_p99: ratio(to.latency.p99_ns as f64, from.latency.p99_ns as f64),
            ratio_cpu: ratio(to.cpu_ns_per_call(), from.cpu_ns_per_call()),
        });
    }
    out
}

fn ratio_text(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}")
    } else {
        "-".to_string()
    }
}

fn cpu_table(rows: &[RowResult]) -> String {
    let mut table = Table::new([
        "case",
        "bytes",
        "call cpu µs",
        "engine µs/call",
        "cpu µs/call",
        "rusage µs/call",
        "delivered",
        "lost",
    ]);
    for r in rows {
        table.push(vec![
            r.case(),
            r.bytes.to_string(),
            micros(r.call_cpu_ns_per_call()),
            micros(r.other_threads_ns_per_call()),
            micros(r.cpu_ns_per_call()),
            micros(r.process_ns_per_call()),
            r.delivered.to_string(),
            (r.expected - r.delivered).to_string(),
        ]);
    }
    let mut out = String::from(
        "CPU of the sending process per multicast = call cpu (the calling thread inside the \
         call, thread CPU clock) + engine (the process's other threads: getrusage SELF - \
         THREAD over the row); the fan-out's work moves to the engine thread, it does not go \
         away\n",
    );
    out.push_str(&table.render());
    out.push_str(
        "rusage = getrusage(RUSAGE_SELF) over the row / calls: includes the caller's untimed \
         wait for the partner's acknowledgement after every call\n",
    );
    out
}

fn scaling_table(scaling: &[Scaling]) -> String {
    let mut table = Table::new([
        "method",
        "bytes",
        "dests",
        "p50 from µs",
        "p50 to µs",
        "p50 ratio",
        "p99 ratio",
        "cpu ratio",
        "target",
    ]);
    for s in scaling {
        table.push(vec![
            s.method.name().to_string(),
            s.bytes.to_string(),
            format!("{}->{}", s.from_dests, s.to_dests),
            micros(s.p50_from_ns as f64),
            micros(s.p50_to_ns as f64),
            ratio_text(s.ratio_p50),
            ratio_text(s.ratio_p99),
            ratio_text(s.ratio_cpu),
            match (s.target(), s.met()) {
                (Some(t), Some(true)) => format!("<= {t}: met"),
                (Some(t), _) => format!("<= {t}: MISSED"),
                _ => "-".to_string(),
            },
        ]);
    }
    let mut out = String::from(
        "scaling: cost(most dests) / cost(fewest dests), same method and size, same run \
         (target: txcast-fanout 16/1 p50 <= 3; the naive loop is expected near 16)\n",
    );
    out.push_str(&table.render());
    out
}

fn cpu_json(r: &RowResult) -> String {
    bench_json! {
        bench: "multicast",
        kind: "cpu",
        case: r.case(),
        method: r.method.name(),
        dests: r.dests,
        bytes: r.bytes,
        calls: r.calls(),
        call_cpu_ns: rounded(r.call_cpu_ns_per_call(), 1),
        engine_ns_per_call: rounded(r.other_threads_ns_per_call(), 1),
        cpu_ns_per_call: rounded(r.cpu_ns_per_call(), 1),
        rusage_self_ns_per_call: rounded(r.process_ns_per_call(), 1),
        delivered: r.delivered,
        expected: r.expected,
    }
}

fn scaling_json(s: &Scaling) -> String {
    bench_json! {
        bench: "multicast",
        kind: "scaling",
        method: s.method.name(),
        bytes: s.bytes,
        from_dests: s.from_dests,
        to_dests: s.to_dests,
        p50_from_ns: s.p50_from_ns,
        p50_to_ns: s.p50_to_ns,
        ratio_p50: rounded(s.ratio_p50, 4),
        ratio_p99: rounded(s.ratio_p99, 4),
        ratio_cpu: rounded(s.ratio_cpu, 4),
        target: s.target().and_then(|t| rounded(t, 1)),
        met: s.met(),
    }
}

#[cfg(test)]
mod tests;
