//! `txcast bench group`: the experiments of paper 003 §4 on this machine, every member its own
//! process on loopback, with the raw UDP round trip between two blocking processes measured in
//! the same run as the yardstick.
//!
//! - `delay`: `send` (blocking until delivered back, r = 0) by a member that is not the
//!   sequencer, against group size and message size, PB and BB (Figures 1 and 3);
//! - `throughput`: every member sends 64-byte messages (`--throughput-bytes`) as fast as it
//!   can; messages delivered per second at one member, packing off and on, for each group
//!   size of `--throughput-sizes` (3 unless given) and each method of `--methods` (PB unless
//!   given) (Figures 4 and 5; PB rows are `group-n{N}-pack-{off,on}`, BB rows
//!   `group-bb-n{N}-pack-{off,on}`);
//! - `parallel`: several groups of 2 at once, every member sending (Figure 6);
//! - `resilience`: `send` delay against r, with groups of r + 1, for each message size of
//!   `--resilience-bytes` (0 unless given) (Figures 7 and 8).
//!
//! Every member process waits in the kernel (invoker engine, no spin unless
//! `TXCAST_BENCH_SPIN_US` asks for it), so groups larger than the CPUs share them rather than
//! starve each other.

mod fanout;

use super::rtt::{find_case, measure_in_processes};
use super::stats::{Report, Samples};
use super::{kill_child, parse_u64, spawn_child, wait_child, EXIT_FAILED, EXIT_USAGE};
use crate::progress::Progress;
use std::io;
use std::process::Child;
use std::time::{Duration, Instant};
use txcast_port::{Group, GroupRecord, Port, PortConfig};
use txcast_proto::group::{GroupConfig, Method};
use txcast_proto::pack::PackMode;
use txcast_proto::Address;

const INSTANCE: u16 = 40;
const TYPE: u16 = 3;
const QUIT: &[u8] = b"\0QUIT";
const CHILD_DEADLINE: Duration = Duration::from_secs(300);
/// The largest group and message accepted from the command line (sites are numbered from 1 in
/// a u16; a message is one allocation).
const MAX_MEMBERS: u64 = 64;
const MAX_BYTES: u64 = 1 << 20;
/// Packing on: adaptive, holding new messages while earlier ones are in flight, at most 1 ms.
const PACK_ON: PackMode = PackMode::Adaptive {
    delay_max: Duration::from_millis(1),
};

// The options of `txcast bench group` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The parts to run: delay, throughput, parallel, resilience
    #[arg(long, value_delimiter = ',', default_values_t = ["delay".to_string(), "throughput".to_string(), "parallel".to_string(), "resilience".to_string()])]
    pub cases: Vec<String>,
    /// Group sizes of the delay case
    #[arg(long, value_delimiter = ',', default_values_t = [2, 3, 4, 8, 16], value_parser = parse_u64)]
    pub sizes: Vec<u64>,
    /// Message sizes in bytes of the delay case and the raw UDP yardsticks
    #[arg(long, value_delimiter = ',', default_values_t = [0, 1024, 4096, 8000], value_parser = parse_u64)]
    pub bytes: Vec<u64>,
    /// The methods: pb (point-to-point, then broadcast) and bb (broadcast, then broadcast);
    /// unless given, both for delay and pb alone for throughput
    #[arg(long, value_delimiter = ',')]
    pub methods: Vec<String>,
    /// Sends timed per point
    #[arg(long, default_value_t = 2000, value_parser = parse_u64)]
    pub iterations: u64,
    /// Sends before the timed ones
    #[arg(long, default_value_t = 200, value_parser = parse_u64)]
    pub warmup: u64,
    /// Seconds of every member sending, per throughput point
    #[arg(long, default_value_t = 2, value_parser = parse_u64)]
    pub seconds: u64,
    /// Group sizes of the throughput case (every member sends)
    #[arg(long, value_delimiter = ',', default_values_t = [3], value_parser = parse_u64)]
    pub throughput_sizes: Vec<u64>,
    /// Message sizes in bytes of the throughput case
    #[arg(long, value_delimiter = ',', default_values_t = [64], value_parser = parse_u64)]
    pub throughput_bytes: Vec<u64>,
    /// Packing in the throughput case: off, on (adaptive, at most 1 ms)
    #[arg(long, value_delimiter = ',', default_values_t = ["off".to_string(), "on".to_string()])]
    pub packing: Vec<String>,
    /// Counts of parallel groups
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4], value_parser = parse_u64)]
    pub parallel: Vec<u64>,
    /// Resilience degrees r
    #[arg(long, value_delimiter = ',', default_values_t = [0, 1, 2, 3], value_parser = parse_u64)]
    pub resilience: Vec<u64>,
    /// Message sizes in bytes of the resilience case
    #[arg(long, value_delimiter = ',', default_values_t = [0], value_parser = parse_u64)]
    pub resilience_bytes: Vec<u64>,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

fn member_cfg(group: u32, method: Method, r: u8, pack: PackMode) -> GroupConfig {
    GroupConfig {
        group,
        resilience: r,
        method,
        pack,
        // The library's defaults unless TXCAST_BENCH_HISTORY / TXCAST_BENCH_WINDOW say
        // otherwise (a window of 64 capped each sender at 64 messages per round trip).
        history_max: env_or("TXCAST_BENCH_HISTORY", GroupConfig::default().history_max),
        send_window: env_or("TXCAST_BENCH_WINDOW", GroupConfig::default().send_window),
        send_queue_max: 8192,
        silence_timeout: Duration::from_secs(2),
        heartbeat_interval: Duration::from_millis(200),
        ..GroupConfig::default()
    }
}

/// The value of environment variable `name`, or `default` if unset or unreadable.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Pb => "pb",
        Method::Bb => "bb",
        Method::BySize { .. } => "size",
    }
}

fn parse_method(s: &str) -> Option<Method> {
    match s {
        "pb" => Some(Method::Pb),
        "bb" => Some(Method::Bb),
        _ => None,
    }
}

fn pack_name(p: PackMode) -> &'static str {
    match p {
        PackMode::Off => "off",
        _ => "on",
    }
}

fn parse_pack(s: &str) -> Option<PackMode> {
    match s {
        "off" => Some(PackMode::Off),
        "on" => Some(PACK_ON),
        _ => None,
    }
}

fn addr(site: u16) -> Address {
    Address::new(INSTANCE, site, TYPE, 0)
}

/// Every process of the benchmark runs one engine. By default without a thread of its own
/// (invoker): the member's application thread, waiting in `send` or `receive`, reads the
/// socket itself, so a message costs one wake-up per hop as with a blocking socket
/// (`TXCAST_BENCH_ENGINE=thread` for an engine thread, `TXCAST_BENCH_SPIN_US` for its spin).
fn open(site: u16) -> io::Result<Port> {
    static ENGINE: std::sync::OnceLock<txcast_port::Engine> = std::sync::OnceLock::new();
    let spin = env_or("TXCAST_BENCH_SPIN_US", 0);
    let engine = match ENGINE.get() {
        Some(e) => e.clone(),
        None => {
            let e = txcast_port::Engine::start(txcast_port::EngineConfig {
                idle_spin: Duration::from_micros(spin),
                mode: super::engine_mode(),
                ..txcast_port::EngineConfig::default()
            })?;
            ENGINE.get_or_init(|| e).clone()
        }
    };
    Port::open_on(&engine, addr(site), PortConfig::default()).map_err(io::Error::other)
}

/// Members of one experiment: `creator` makes the group, the other children join it; the
/// parent joins last as `parent_site`.
struct Cluster {
    children: Vec<Child>,
}

impl Cluster {
    #[allow(clippy::too_many_arguments)]
    fn start(
        group: u32,
        first_site: u16,
        children: usize,
        method: Method,
        r: u8,
        pack: PackMode,
        role: &str,
        seconds: f64,
        bytes: usize,
    ) -> io::Result<Cluster> {
        let mut out = Vec::new();
        for k in 0..children {
            let site = first_site + k as u16;
            let args: Vec<String> = vec![
                "group".into(),
                role.into(),
                group.to_string(),
                site.to_string(),
                first_site.to_string(),
                method_name(method).into(),
                r.to_string(),
                pack_name(pack).into(),
                seconds.to_string(),
                bytes.to_string(),
            ];
            match spawn_child(&args) {
                Ok(c) => out.push(c),
                Err(e) => {
                    for mut c in out {
                        kill_child(&mut c);
                    }
                    return Err(e);
                }
            }
            if k == 0 {
                // The creator first, so the others find the group.
                std::thread::sleep(Duration::from_millis(150));
            }
        }
        Ok(Cluster { children: out })
    }

    fn finish(mut self, ok: bool) -> io::Result<()> {
        let mut result = Ok(());
        for c in &mut self.children {
            if ok {
                if let Err(e) = wait_child(c, Duration::from_secs(20)) {
                    result = Err(e);
                }
            } else {
                kill_child(c);
            }
        }
        self.children.clear();
        result
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            kill_child(c);
        }
    }
}

fn join(port: &Port, cfg: GroupConfig, contact: Address, members: usize) -> io::Result<Group> {
    let g = port
        .join_group(cfg, contact, Some(Duration::from_secs(10)))
        .map_err(|e| io::Error::other(format!("join: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while g.info().members.len() < members {
        if Instant::now() > deadline {
            return Err(io::Error::other("the group never filled"));
        }
        let _ = g.receive(Some(Duration::from_millis(5)));
    }
    Ok(g)
}

/// Delay of `send` by the parent (not the sequencer) in a group of `size`.
#[allow(clippy::too_many_arguments)]
fn delay(
    group_id: u32,
    size: usize,
    method: Method,
    r: u8,
    bytes: &[u64],
    warmup: u64,
    iterations: u64,
    report: &mut Report,
    case_prefix: &str,
    progress: &Progress,
) -> io::Result<()> {
    let first = 1u16;
    let cluster = Cluster::start(
        group_id,
        first,
        size - 1,
        method,
        r,
        PACK_ON,
        "receive",
        0.0,
        0,
    )?;
    let port = open(0)?;
    let cfg = member_cfg(group_id, method, r, PACK_ON);
    let g = join(&port, cfg, addr(first), size)?;
    let result = (|| {
        for &b in bytes {
            progress.note(&format!("{case_prefix} n={size} {b} B"));
            let msg = vec![0x5au8; b as usize];
            let mut samples = Samples::with_capacity(iterations as usize);
            for i in 0..warmup + iterations {
                let t = Instant::now();
                g.send(&msg, Some(Duration::from_secs(5)))
                    .map_err(|e| io::Error::other(format!("send: {e}")))?;
                if i >= warmup {
                    samples.record(t.elapsed());
                }
                // Keep our own stream drained so the history stays stable.
                while g.try_receive_with(|_| ()).is_some() {}
            }
            let s = samples
                .summary()
                .ok_or_else(|| io::Error::other("no samples"))?;
            progress.println(&format!(
                "  {case_prefix} n={size} {b:>5} B: p50 {:.1} µs p99 {:.1} µs",
                s.p50_ns as f64 / 1e3,
                s.p99_ns as f64 / 1e3
            ));
            progress.advance();
            report.push_latency(&format!("{case_prefix}-n{size}"), b, s);
        }
        g.send(QUIT, Some(Duration::from_secs(5)))
            .map_err(|e| io::Error::other(format!("send: {e}")))?;
        Ok(())
    })();
    let ok = result.is_ok();
    drop(g);
    let finished = cluster.finish(ok);
    result.and(finished)
}

/// Every member sends `bytes`-byte messages with `method` for `seconds`; messages/s delivered
/// at the parent.
#[allow(clippy::too_many_arguments)]
fn throughput(
    group_id: u32,
    size: usize,
    method: Method,
    pack: PackMode,
    bytes: usize,
    seconds: f64,
    report: &mut Report,
    progress: &Progress,
) -> io::Result<()> {
    let first = 1u16;
    let cluster = Cluster::start(
        group_id,
        first,
        size - 1,
        method,
        0,
        pack,
        "send",
        seconds,
        bytes,
    )?;
    let port = open(0)?;
    let g = join(
        &port,
        member_cfg(group_id, method, 0, pack),
        addr(first),
        size,
    )?;
    let result = blast_counted(&g, seconds, bytes);
    let c = g.info().counters;
    progress.println(&format!(
        "    at this member: {} packets sent, {} received, {} submissions ({} resent), {} records multicast, {} syncs, {} history full",
        c.packets_sent, c.packets_received, c.submits_sent, c.submits_resent, c.records_multicast, c.syncs, c.history_full
    ));
    let ok = result.is_ok();
    let (delivered, elapsed, fewest) = result?;
    progress.println(&format!(
        "  throughput {} n={size} {bytes} B pack {}: {delivered} delivered in {:.2} s = {:.0}/s; the slowest sender got {:.0}/s through",
        method_name(method),
        pack_name(pack),
        elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64(),
        fewest as f64 / elapsed.as_secs_f64()
    ));
    // PB keeps the names it had before the method was a choice.
    let case = match method {
        Method::Pb => format!("group-n{size}-pack-{}", pack_name(pack)),
        m => format!("group-{}-n{size}-pack-{}", method_name(m), pack_name(pack)),
    };
    report.push_throughput(&case, bytes as u64, delivered, elapsed);
    report.push_throughput(
        &format!("{case}-slowest-sender"),
        bytes as u64,
        fewest,
        elapsed,
    );
    drop(g);
    cluster.finish(ok)
}

/// Sends `bytes`-byte messages as fast as the group takes them for `seconds` while counting
/// the messages delivered (in all, and from the sender that got the fewest through); then
/// drains until every member's QUIT arrived.
fn blast(g: &Group, seconds: f64, bytes: usize) -> io::Result<(u64, Duration)> {
    blast_counted(g, seconds, bytes).map(|(d, e, _)| (d, e))
}

fn blast_counted(g: &Group, seconds: f64, bytes: usize) -> io::Result<(u64, Duration, u64)> {
    let msg = vec![0x33u8; bytes];
    let members = g.info().members.clone();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let mut by_sender: std::collections::HashMap<Address, u64> = std::collections::HashMap::new();
    let mut counting = true;
    let mut elapsed = Duration::ZERO;
    let mut quits = 0usize;
    let mut sent_quit = false;
    let deadline = end + Duration::from_secs(30);
    loop {
        let now = Instant::now();
        if now > deadline {
            return Err(io::Error::other("members did not finish"));
        }
        if counting && now >= end {
            counting = false;
            elapsed = now - start;
        }
        if counting {
            while g.sends_pending() < 256 {
                if g.send_async(&msg).is_err() {
                    break;
                }
            }
        } else if !sent_quit {
            g.send_async(QUIT)
                .map_err(|e| io::Error::other(format!("send: {e}")))?;
            sent_quit = true;
        }
        let mut got = 0;
        let mut note = |sender: Address, quit: bool, message: bool| {
            if quit {
                quits += 1;
            } else if counting && message {
                *by_sender.entry(sender).or_insert(0) += 1;
            }
        };
        // A bounded batch, then back to sending: at the sequencer deliveries never run dry
        // under load, and an application that only drained them would never send.
        while got < 256 {
            let Some((sender, quit, message)) = g.try_receive_with(|d| match d.what {
                txcast_proto::group::Delivered::Message { payload, .. } => {
                    (d.sender, payload == QUIT, true)
                }
                _ => (d.sender, false, false),
            }) else {
                break;
            };
            got += 1;
            note(sender, quit, message);
        }
        if got == 0 {
            if let Ok(d) = g.receive(Some(Duration::from_micros(200))) {
                let message = matches!(d.what, GroupRecord::Message { .. });
                let quit =
                    matches!(&d.what, GroupRecord::Message { payload, .. } if payload == QUIT);
                note(d.sender, quit, message);
            }
        }
        if sent_quit && quits >= members.len() {
            if std::env::var("TXCAST_BENCH_VERBOSE").is_ok() {
                eprintln!("    delivered by sender: {by_sender:?}");
            }
            let delivered = by_sender.values().sum();
            let fewest = members
                .iter()
                .map(|m| by_sender.get(m).copied().unwrap_or(0))
                .min()
                .unwrap_or(0);
            return Ok((delivered, elapsed, fewest));
        }
    }
}

/// `txcast __bench-child group <role> <group> <site> <creator site> <method> <r> <pack>
/// <seconds> <bytes>`: one member; `receive` waits for the parent's QUIT, `send` blasts
/// `bytes`-byte messages like the parent.
pub fn child(args: &[String]) -> io::Result<()> {
    match args.first().map(String::as_str) {
        Some("fanout-relay") => return fanout::relay(&args[1..]),
        Some("fanout-receiver") => return fanout::receiver(&args[1..]),
        _ => {}
    }
    let bad = |w: &str| io::Error::new(io::ErrorKind::InvalidInput, w.to_string());
    let [role, group, site, creator, method, r, pack, seconds, bytes] = args else {
        return Err(bad("arguments"));
    };
    let group: u32 = group.parse().map_err(|_| bad("group"))?;
    let site: u16 = site.parse().map_err(|_| bad("site"))?;
    let creator: u16 = creator.parse().map_err(|_| bad("creator"))?;
    let method = parse_method(method).ok_or_else(|| bad("method"))?;
    let r: u8 = r.parse().map_err(|_| bad("r"))?;
    let pack = parse_pack(pack).ok_or_else(|| bad("pack"))?;
    let seconds: f64 = seconds.parse().map_err(|_| bad("seconds"))?;
    let bytes: usize = bytes.parse().map_err(|_| bad("bytes"))?;
    if !seconds.is_finite() || seconds < 0.0 || bytes as u64 > MAX_BYTES {
        return Err(bad("seconds or bytes out of range"));
    }
    let port = open(site)?;
    let cfg = member_cfg(group, method, r, pack);
    let g = if site == creator {
        port.create_group(cfg)
            .map_err(|e| io::Error::other(format!("create: {e}")))?
    } else {
        port.join_group(cfg, addr(creator), Some(Duration::from_secs(10)))
            .map_err(|e| io::Error::other(format!("join: {e}")))?
    };
    let started = Instant::now();
    match role.as_str() {
        "receive" => loop {
            if started.elapsed() > CHILD_DEADLINE {
                return Err(io::Error::other("no QUIT"));
            }
            if let Ok(d) = g.receive(Some(Duration::from_secs(1))) {
                if matches!(&d.what, GroupRecord::Message { payload, .. } if payload == QUIT) {
                    // Stay a moment: the others may still need our acknowledgements.
                    let until = Instant::now() + Duration::from_millis(300);
                    while Instant::now() < until {
                        let _ = g.receive(Some(Duration::from_millis(20)));
                    }
                    return Ok(());
                }
            }
        },
        "send" => {
            // Wait for the parent (the last to join), then go.
            let members: usize = env_or("TXCAST_BENCH_MEMBERS", 0);
            let deadline = Instant::now() + Duration::from_secs(20);
            while g.info().members.len() < members.max(2) {
                if Instant::now() > deadline {
                    return Err(io::Error::other("the group never filled"));
                }
                let _ = g.receive(Some(Duration::from_millis(5)));
            }
            blast(&g, seconds, bytes)?;
            if std::env::var("TXCAST_BENCH_VERBOSE").is_ok() {
                let c = g.info().counters;
                eprintln!(
                    "    site {site}: {} app sends, {} packets sent, {} submissions ({} resent), {} ordered, {} records multicast, {} syncs, {} history full, {} own window full, {} dups, {} acks, {} naks sent, {} received",
                    c.sent, c.packets_sent, c.submits_sent, c.submits_resent, c.ordered, c.records_multicast, c.syncs, c.history_full, c.own_window_full, c.duplicates, c.acks_sent, c.naks_sent, c.naks_received
                );
            }
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until {
                let _ = g.receive(Some(Duration::from_millis(20)));
            }
            Ok(())
        }
        _ => Err(bad("role")),
    }
}

pub fn run(opts: &Args) -> i32 {
    // Names are checked before anything runs.
    let known = ["delay", "throughput", "parallel", "resilience"];
    if let Some(c) = opts.cases.iter().find(|c| !known.contains(&c.as_str())) {
        return crate::usage_error(
            &["bench", "group"],
            &format!("--cases: unknown case {c:?} (known: {})", known.join(" ")),
        );
    }
    if let Some(m) = opts.methods.iter().find(|m| parse_method(m).is_none()) {
        return crate::usage_error(
            &["bench", "group"],
            &format!("--methods: unknown method {m:?} (known: pb bb)"),
        );
    }
    if let Some(p) = opts.packing.iter().find(|p| parse_pack(p).is_none()) {
        return crate::usage_error(
            &["bench", "group"],
            &format!("--packing: unknown value {p:?} (known: off on)"),
        );
    }
    for (name, list, max) in [
        ("--sizes", &opts.sizes, MAX_MEMBERS),
        ("--throughput-sizes", &opts.throughput_sizes, MAX_MEMBERS),
        ("--resilience", &opts.resilience, MAX_MEMBERS - 1),
        ("--bytes", &opts.bytes, MAX_BYTES),
        ("--throughput-bytes", &opts.throughput_bytes, MAX_BYTES),
        ("--resilience-bytes", &opts.resilience_bytes, MAX_BYTES),
    ] {
        if let Some(v) = list.iter().find(|&&v| v > max) {
            return crate::usage_error(
                &["bench", "group"],
                &format!("{name}: {v} is more than {max}"),
            );
        }
    }
    let (cases, sizes, bytes) = (opts.cases.clone(), opts.sizes.clone(), opts.bytes.clone());
    // Unless given: both methods for the delay, PB alone (as before there was a choice) for
    // the throughput.
    let given = |default: &[&str]| -> Vec<String> {
        if opts.methods.is_empty() {
            default.iter().map(|m| m.to_string()).collect()
        } else {
            opts.methods.clone()
        }
    };
    let methods = given(&["pb", "bb"]);
    let throughput_methods = given(&["pb"]);
    let (iterations, warmup, seconds) = (opts.iterations, opts.warmup, opts.seconds);
    let (parallel, rs) = (opts.parallel.clone(), opts.resilience.clone());
    let mut report = Report::new("group", &["raw-udp-blocking"]);
    let mut failures = 0;
    let mut group_id = 100u32;
    let mut next_id = || {
        group_id += 1;
        group_id
    };
    // One point per byte count of each sweep (a throughput point per packing too).
    let n_cases = |name: &str| cases.iter().filter(|c| *c == name).count() as u64;
    let packs = opts.packing.len() as u64;
    let total =
        if cases.iter().any(|c| c == "delay" || c == "resilience") {
            bytes.len() as u64
        } else {
            0
        } + n_cases("delay") * (methods.len() as u64 + 1) * sizes.len() as u64 * bytes.len() as u64
            + n_cases("throughput")
                * throughput_methods.len() as u64
                * opts.throughput_sizes.len() as u64
                * opts.throughput_bytes.len() as u64
                * packs
            + n_cases("parallel") * parallel.len() as u64
            + n_cases("resilience") * rs.len() as u64 * opts.resilience_bytes.len() as u64;
    let progress = Progress::points("group", total);
    // The yardstick, at each size.
    if cases.iter().any(|c| c == "delay" || c == "resilience") {
        let case = find_case("raw-udp-blocking").expect("case exists");
        for &b in &bytes {
            let b = b.max(16) as usize;
            progress.note(&format!("raw-udp-blocking {b} B"));
            match measure_in_processes(case, b, warmup, iterations) {
                Ok(s) => {
                    progress.println(&format!(
                        "  raw-udp-blocking {b:>5} B: p50 {:.1} µs p99 {:.1} µs",
                        s.p50_ns as f64 / 1e3,
                        s.p99_ns as f64 / 1e3
                    ));
                    // Recorded under the group's byte count, so ratios line up (0 B → 16 B).
                    let key = if b == 16 { 0 } else { b as u64 };
                    report.push_latency("raw-udp-blocking", key, s);
                }
                Err(e) => {
                    progress.println(&format!("  raw-udp-blocking {b} B FAILED: {e}"));
                    failures += 1;
                }
            }
            progress.advance();
        }
    }
    for case in &cases {
        match case.as_str() {
            "delay" => {
                for m in &methods {
                    let Some(method) = parse_method(m) else {
                        progress.finish();
                        eprintln!("unknown method {m}");
                        return EXIT_USAGE;
                    };
                    for &n in &sizes {
                        let n = n.max(2) as usize;
                        // The same pattern in raw UDP, at each size, once (not per method).
                        if m == &methods[0] {
                            failures += fanout_yardstick(
                                n,
                                &bytes,
                                warmup,
                                iterations,
                                &mut report,
                                &progress,
                            );
                        } else {
                            // The yardstick's points, counted for every method.
                            (0..bytes.len()).for_each(|_| progress.advance());
                        }
                        let r = delay(
                            next_id(),
                            n,
                            method,
                            0,
                            &bytes,
                            warmup,
                            iterations,
                            &mut report,
                            &format!("group-{m}"),
                            &progress,
                        );
                        if let Err(e) = r {
                            progress.println(&format!("  delay {m} n={n} FAILED: {e}"));
                            failures += 1;
                        }
                    }
                }
            }
            "throughput" => {
                for m in &throughput_methods {
                    let Some(method) = parse_method(m) else {
                        progress.finish();
                        return EXIT_USAGE;
                    };
                    for &n in &opts.throughput_sizes {
                        let n = n.max(2);
                        // The children wait for the whole group before sending.
                        std::env::set_var("TXCAST_BENCH_MEMBERS", n.to_string());
                        for &b in &opts.throughput_bytes {
                            for pack in opts.packing.iter().filter_map(|p| parse_pack(p)) {
                                progress.note(&format!(
                                    "throughput {m} n={n} {b} B pack {}",
                                    pack_name(pack)
                                ));
                                let r = throughput(
                                    next_id(),
                                    n as usize,
                                    method,
                                    pack,
                                    b as usize,
                                    seconds as f64,
                                    &mut report,
                                    &progress,
                                );
                                if let Err(e) = r {
                                    progress.println(&format!(
                                        "  throughput {m} n={n} {b} B pack {} FAILED: {e}",
                                        pack_name(pack)
                                    ));
                                    failures += 1;
                                }
                                progress.advance();
                            }
                        }
                    }
                }
            }
            "parallel" => {
                for &k in &parallel {
                    progress.note(&format!("parallel {k}"));
                    match parallel_groups(&mut next_id, k as usize, seconds as f64) {
                        Ok((delivered, elapsed)) => {
                            progress.println(&format!(
                                "  parallel {k} groups of 2: {:.0} deliveries/s in all",
                                delivered as f64 / elapsed.as_secs_f64()
                            ));
                            report.push_throughput(
                                &format!("parallel-{k}x2"),
                                64,
                                delivered,
                                elapsed,
                            );
                        }
                        Err(e) => {
                            progress.println(&format!("  parallel {k} FAILED: {e}"));
                            failures += 1;
                        }
                    }
                    progress.advance();
                }
            }
            "resilience" => {
                for &r in &rs {
                    // A group of r + 1 (paper 003 Figure 7); for r = 0 a group of 2, so the
                    // sender is still not the sequencer.
                    let res = delay(
                        next_id(),
                        (r as usize + 1).max(2),
                        Method::Pb,
                        r as u8,
                        &opts.resilience_bytes,
                        warmup,
                        iterations,
                        &mut report,
                        &format!("resilience-r{r}"),
                        &progress,
                    );
                    if let Err(e) = res {
                        progress.println(&format!("  resilience r={r} FAILED: {e}"));
                        failures += 1;
                    }
                }
            }
            other => {
                progress.finish();
                eprintln!("txcast bench group: unknown case {other}");
                return EXIT_USAGE;
            }
        }
    }
    progress.finish();
    let heading = format!(
        "group: paper 003 §4 on loopback, every member a process; delay = blocking send by a \
         member that is not the sequencer ({iterations} timed after {warmup}); \
         raw-udp-fanout-nN = the same pattern in raw UDP (sender -> relay -> one sendmmsg to \
         the sender and N - 2 parked receivers), no protocol; throughput = messages \
         delivered per second at one member while every member sends for {seconds} s \
         (latencies in µs)\n"
    );
    let fanout_ratios = fanout_ratios(&report);
    if opts.json {
        eprint!("{heading}{}", report.table());
        print!("{}", report.json_lines());
    } else {
        print!("{heading}{}", report.table());
    }
    // Under --json stdout carries the JSON lines alone; the ratios go with the table.
    if opts.json {
        eprint!("{fanout_ratios}");
    } else {
        print!("{fanout_ratios}");
    }
    if failures > 0 {
        EXIT_FAILED
    } else {
        0
    }
}

/// Measures `raw-udp-fanout-n{size}` at every byte count; returns how many failed.
fn fanout_yardstick(
    size: usize,
    bytes: &[u64],
    warmup: u64,
    iterations: u64,
    report: &mut Report,
    progress: &Progress,
) -> usize {
    let mut failures = 0;
    for &b in bytes {
        progress.note(&format!("raw-udp-fanout n={size} {b} B"));
        // As the two-process yardstick: at least 16 bytes, recorded under the group's count.
        match fanout::measure(size, (b as usize).max(16), warmup, iterations) {
            Ok(mut samples) => match samples.summary() {
                Some(s) => {
                    progress.println(&format!(
                        "  raw-udp-fanout n={size} {b:>5} B: p50 {:.1} µs p99 {:.1} µs",
                        s.p50_ns as f64 / 1e3,
                        s.p99_ns as f64 / 1e3
                    ));
                    report.push_latency(&format!("raw-udp-fanout-n{size}"), b, s);
                }
                None => failures += 1,
            },
            Err(e) => {
                progress.println(&format!("  raw-udp-fanout n={size} {b} B FAILED: {e}"));
                failures += 1;
            }
        }
        progress.advance();
    }
    failures
}

/// Lines giving each group delay row against the raw fan-out of its size, same bytes.
fn fanout_ratios(report: &Report) -> String {
    let mut out = String::new();
    for row in &report.rows {
        let Some(size) = row
            .case
            .strip_prefix("group-")
            .and_then(|c| c.rsplit_once("-n"))
            .map(|(_, n)| n)
        else {
            continue;
        };
        let base = format!("raw-udp-fanout-n{size}");
        let Some(yard) = report
            .rows
            .iter()
            .find(|r| r.case == base && r.bytes == row.bytes)
        else {
            continue;
        };
        if let (Some(a), Some(b)) = (row.latency(), yard.latency()) {
            out.push_str(&format!(
                "{} {} B / {base}: p50 {:.2}, p99 {:.2}\n",
                row.case,
                row.bytes,
                a.p50_ns as f64 / b.p50_ns.max(1) as f64,
                a.p99_ns as f64 / b.p99_ns.max(1) as f64
            ));
        }
    }
    out
}

/// `k` groups of 2 members each, every member sending: deliveries per second, all groups
/// together, counted at the parent's member of each group (times two).
fn parallel_groups(
    next_id: &mut impl FnMut() -> u32,
    k: usize,
    seconds: f64,
) -> io::Result<(u64, Duration)> {
    std::env::set_var("TXCAST_BENCH_MEMBERS", "2");
    let mut clusters = Vec::new();
    let mut ports = Vec::new();
    let mut groups = Vec::new();
    for i in 0..k {
        let id = next_id();
        let site = 1 + i as u16;
        clusters.push(Cluster::start(
            id,
            site,
            1,
            Method::Pb,
            0,
            PACK_ON,
            "send",
            seconds,
            64,
        )?);
        let port = open(100 + i as u16)?;
        let g = join(&port, member_cfg(id, Method::Pb, 0, PACK_ON), addr(site), 2)?;
        ports.push(port);
        groups.push(g);
    }
    let results: Vec<io::Result<(u64, Duration)>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .map(|g| s.spawn(move || blast(g, seconds, 64)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("panicked")))
            })
            .collect()
    });
    let mut delivered = 0;
    let mut longest = Duration::ZERO;
    for r in results {
        let (d, e) = r?;
        delivered += d * 2;
        longest = longest.max(e);
    }
    drop(groups);
    for c in clusters {
        c.finish(true)?;
    }
    Ok((delivered, longest))
}
