//! `txcast bench burst`: the two experiments of paper 002 §4 (Figures 1–4), every member its
//! own process on loopback, for every ordering protocol with packing off and on:
//! - `all`: all-to-all. In each round every member sends a burst of `m` messages and waits
//!   until it has delivered every member's burst of that round;
//! - `one`: one sender. The parent sends a burst of `m` and waits for an acknowledgement
//!   (a group message) from every other member.
//!
//! For each burst length it prints the throughput (messages delivered per second at the
//! parent) and the latency of a round (median and p99), and the ratio of packing on to off.
//! `--svg DIR` draws the paper's four figures. A point that does not finish in
//! `--point-seconds` is reported as collapsed (the paper's Dynseq collapsed past 60).

use super::stats::{bench_json, rounded, whole};
use super::{kill_child, parse_u64, spawn_child, wait_child, EXIT_FAILED};
use crate::progress::Progress;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::process::Child;
use std::time::{Duration, Instant};
use txcast_port::{Group, GroupSpec, Port, PortConfig};
use txcast_proto::group::{Delivered, GroupConfig, Method};
use txcast_proto::order::{OrderConfig, Protocol};
use txcast_proto::pack::PackMode;
use txcast_proto::vsync::VsConfig;
use txcast_proto::Address;

const INSTANCE: u16 = 40;
const TYPE: u16 = 4;
const GROUP_ID: u32 = 21;
const CONTROL: u8 = 1;
const ACK: u8 = 2;
const QUIT: u8 = 3;
/// Messages a point aims to move (its rounds are chosen from it).
const POINT_MESSAGES: u64 = 20_000;
const ROUNDS_MIN: u64 = 3;
const ROUNDS_MAX: u64 = 100;

// The options of `txcast bench burst` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The ordering protocols
    #[arg(long, value_delimiter = ',', default_values_t = ["sequencer".to_string(), "totem".to_string(), "total".to_string(), "dynseq".to_string(), "dynord".to_string()])]
    pub protocols: Vec<String>,
    /// The packings: off, adaptive (send at once when idle, pack while busy, at most 1 ms), fixed (1 ms)
    #[arg(long, value_delimiter = ',', default_values_t = ["off".to_string(), "adaptive".to_string()])]
    pub packs: Vec<String>,
    /// The experiments: all (every member sends) and one (one sender)
    #[arg(long, value_delimiter = ',', default_values_t = ["all".to_string(), "one".to_string()])]
    pub experiments: Vec<String>,
    /// Burst lengths (1 to 100000)
    #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 100, 1000, 5000], value_parser = parse_u64)]
    pub m: Vec<u64>,
    /// Member processes (2 to 16)
    #[arg(long, default_value_t = 3, value_parser = parse_u64)]
    pub members: u64,
    /// Message size in bytes (1 to 1024)
    #[arg(long, default_value_t = 64, value_parser = parse_u64)]
    pub bytes: u64,
    /// Seconds measured per point
    #[arg(long, default_value_t = 20.0, value_parser = crate::dc::seconds)]
    pub point_seconds: f64,
    /// Write the paper's four figures as SVG into DIR
    #[arg(long, value_name = "DIR")]
    pub svg: Option<String>,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Experiment {
    All,
    One,
}

impl Experiment {
    fn name(self) -> &'static str {
        match self {
            Experiment::All => "all",
            Experiment::One => "one",
        }
    }
}

fn pack_of(s: &str) -> Option<PackMode> {
    match s {
        "off" => Some(PackMode::Off),
        "adaptive" => Some(PackMode::Adaptive {
            delay_max: Duration::from_millis(1),
        }),
        "fixed" => Some(PackMode::Fixed {
            delay: Duration::from_millis(1),
        }),
        _ => None,
    }
}

fn spec(protocol: &str, pack: PackMode) -> Option<GroupSpec> {
    if protocol == "sequencer" {
        return Some(
            GroupConfig {
                group: GROUP_ID,
                method: Method::Pb,
                pack,
                send_queue_max: 16_384,
                send_window: 1024,
                silence_timeout: Duration::from_secs(2),
                heartbeat_interval: Duration::from_millis(200),
                ..GroupConfig::default()
            }
            .into(),
        );
    }
    Some(
        OrderConfig {
            protocol: Protocol::from_name(protocol)?,
            vs: VsConfig {
                group: GROUP_ID,
                pack,
                window: 2048,
                silence_timeout: Duration::from_secs(2),
                heartbeat_interval: Duration::from_millis(100),
                flush_timeout: Duration::from_millis(500),
                ..VsConfig::default()
            },
            send_queue_max: 16_384,
            submit_window: 2048,
            ..OrderConfig::default()
        }
        .into(),
    )
}

fn addr(site: u16) -> Address {
    Address::new(INSTANCE, site, TYPE, 0)
}

/// One engine per process, without a thread by default (the waiting thread runs it, as in
/// `bench group`); `TXCAST_BENCH_ENGINE=thread` for an engine thread.
fn open(site: u16) -> io::Result<Port> {
    let engine = txcast_port::Engine::start(txcast_port::EngineConfig {
        mode: super::engine_mode(),
        ..txcast_port::EngineConfig::default()
    })?;
    Port::open_on(&engine, addr(site), PortConfig::default()).map_err(io::Error::other)
}

/// A member's view of a run: messages delivered per sender since the last control message,
/// acknowledgements, and the control messages themselves.
struct Member {
    g: Group,
    counts: HashMap<Address, u64>,
    acks: u64,
    /// The last control delivered: (experiment, m, rounds), not yet taken.
    control: Option<(Experiment, u64, u64)>,
    quit: bool,
    payload: Vec<u8>,
}

impl Member {
    fn new(g: Group, bytes: usize) -> Member {
        let mut payload = vec![b'x'; bytes.max(1)];
        payload[0] = 0;
        Member {
            g,
            counts: HashMap::new(),
            acks: 0,
            control: None,
            quit: false,
            payload,
        }
    }

    /// Counts one delivered message.
    fn account(&mut self, sender: Address, payload: &[u8]) {
        match payload.first().copied().unwrap_or(0) {
            0 => *self.counts.entry(sender).or_insert(0) += 1,
            ACK => self.acks += 1,
            QUIT => self.quit = true,
            CONTROL if payload.len() == 18 => {
                let b = &payload[1..];
                let exp = if b[0] == 0 {
                    Experiment::All
                } else {
                    Experiment::One
                };
                let m = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
                let rounds = u64::from_le_bytes(b[9..17].try_into().expect("8 bytes"));
                // What follows belongs to the next point: nothing more is taken in until the
                // control is taken (`take_control`).
                self.control = Some((exp, m, rounds));
            }
            _ => {}
        }
    }

    /// Starts the point a control message announced: counts from zero.
    fn take_control(&mut self) -> Option<(Experiment, u64, u64)> {
        let c = self.control.take()?;
        self.counts.clear();
        self.acks = 0;
        Some(c)
    }

    /// Takes what has been delivered, up to a control message; waits up to `wait` for the
    /// first if nothing is there.
    fn pump(&mut self, wait: Duration) -> io::Result<()> {
        let mut took = false;
        while self.control.is_none() {
            // Data messages are counted without copying them; the rest are short.
            let r = self.g.try_receive_with(|d| match d.what {
                Delivered::Message { payload, .. } => {
                    let mut head = [0u8; 18];
                    let n = payload.len().min(18);
                    head[..n].copy_from_slice(&payload[..n]);
                    Some((d.sender, head, payload.len()))
                }
                _ => None,
            });
            let Some(r) = r else {
                break;
            };
            took = true;
            if let Some((sender, head, len)) = r {
                self.account(sender, &head[..len.min(18)]);
            }
        }
        if !took && !wait.is_zero() && self.control.is_none() {
            // Nothing yet: sleep in the group's wait until something comes.
            match self.g.receive(Some(wait)) {
                Ok(d) => {
                    if let txcast_port::GroupRecord::Message { payload, .. } = d.what {
                        self.account(d.sender, &payload);
                    }
                }
                Err(txcast_port::GroupCallError::Timeout) => {}
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok(())
    }

    /// Sends `msg`, taking deliveries in while the send queue is full.
    fn send(&mut self, msg: &[u8], deadline: Instant) -> io::Result<()> {
        loop {
            match self.g.send_async(msg) {
                Ok(_) => return Ok(()),
                Err(txcast_port::GroupCallError::Group(txcast_proto::group::GroupError::Full)) => {
                    if Instant::now() > deadline {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "send queue stuck"));
                    }
                    self.pump(Duration::from_millis(1))?;
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
    }

    fn burst(&mut self, m: u64, deadline: Instant) -> io::Result<()> {
        let p = std::mem::take(&mut self.payload);
        for _ in 0..m {
            if let Err(e) = self.send(&p, deadline) {
                self.payload = p;
                return Err(e);
            }
        }
        self.payload = p;
        Ok(())
    }

    /// Waits until `done` holds, taking deliveries in.
    fn until(&mut self, deadline: Instant, done: impl Fn(&Member) -> bool) -> io::Result<()> {
        while !done(self) {
            if Instant::now() > deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "round not done"));
            }
            self.pump(Duration::from_millis(2))?;
        }
        Ok(())
    }

    /// Round `k` of an all-to-all point: every member's `k * m` messages are here.
    fn all_in(&self, members: &[Address], k: u64, m: u64) -> bool {
        members
            .iter()
            .all(|a| self.counts.get(a).copied().unwrap_or(0) >= k * m)
    }
}

/// The child side: joins, then follows the parent's control messages until told to quit.
pub fn child(args: &[String]) -> io::Result<()> {
    let bad = |w: &str| io::Error::new(io::ErrorKind::InvalidInput, w.to_string());
    let [protocol, pack, site, bytes, point_seconds] = args else {
        return Err(bad("arguments"));
    };
    let pack = pack_of(pack).ok_or_else(|| bad("pack"))?;
    let site: u16 = site.parse().map_err(|_| bad("site"))?;
    let bytes: usize = bytes.parse().map_err(|_| bad("bytes"))?;
    let point = Duration::from_secs_f64(point_seconds.parse().map_err(|_| bad("seconds"))?);
    let spec = spec(protocol, pack).ok_or_else(|| bad("protocol"))?;
    let port = open(site)?;
    let g = port
        .join_group(spec, addr(0), Some(Duration::from_secs(10)))
        .map_err(|e| io::Error::other(format!("join: {e}")))?;
    let mut me = Member::new(g, bytes);
    let parent = addr(0);
    let started = Instant::now();
    while !me.quit {
        if started.elapsed() > Duration::from_secs(3600) {
            return Err(io::Error::other("no quit"));
        }
        me.pump(Duration::from_millis(50))?;
        let Some((exp, m, rounds)) = me.take_control() else {
            continue;
        };
        let deadline = Instant::now() + point;
        let members = me.g.info().members;
        let r = (|| -> io::Result<()> {
            for k in 1..=rounds {
                match exp {
                    Experiment::All => {
                        me.burst(m, deadline)?;
                        me.until(deadline, |x| x.all_in(&members, k, m))?;
                    }
                    Experiment::One => {
                        me.until(deadline, |x| {
                            x.counts.get(&parent).copied().unwrap_or(0) >= k * m
                        })?;
                        let mut ack = vec![ACK];
                        ack.extend_from_slice(&k.to_le_bytes());
                        me.send(&ack, deadline)?;
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            // The parent reports the collapse; wait for its next word.
            eprintln!("  burst child {site}: {e}");
            if std::env::var("TXCAST_BENCH_VERBOSE").is_ok() {
                eprintln!(
                    "    pending {} counts {:?} info {:?}",
                    me.g.sends_pending(),
                    me.counts,
                    me.g.info()
                );
            }
        }
    }
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        me.pump(Duration::from_millis(20))?;
    }
    Ok(())
}

/// One point's outcome.
#[derive(Clone, Debug)]
struct Point {
    protocol: String,
    pack: String,
    exp: Experiment,
    m: u64,
    rounds: u64,
    /// None: collapsed.
    msgs_per_s: Option<f64>,
    round_p50_us: f64,
    round_p99_us: f64,
    /// At the parent during the point: casts per data message, and the data messages,
    /// heartbeats and prompt reports (acknowledgements) it sent.
    records_per_packet: f64,
    packets: u64,
    heartbeats: u64,
    acks: u64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Plan {
    experiments: Vec<Experiment>,
    ms: Vec<u64>,
    members: usize,
    bytes: usize,
    point: Duration,
}

/// Runs every point of one protocol and packing mode on one group.
fn run_cluster(
    protocol: &str,
    pack_name: &str,
    plan: &Plan,
    progress: &Progress,
) -> io::Result<Vec<Point>> {
    let pack = pack_of(pack_name).expect("checked");
    let spec = spec(protocol, pack).expect("checked");
    let port = open(0)?;
    let g = port
        .create_group(spec)
        .map_err(|e| io::Error::other(format!("create: {e}")))?;
    let mut children: Vec<Child> = Vec::new();
    let result = (|| -> io::Result<Vec<Point>> {
        for site in 1..plan.members as u16 {
            children.push(spawn_child(&[
                "burst".into(),
                protocol.into(),
                pack_name.into(),
                site.to_string(),
                plan.bytes.to_string(),
                plan.point.as_secs_f64().to_string(),
            ])?);
        }
        let mut me = Member::new(g, plan.bytes);
        let deadline = Instant::now() + Duration::from_secs(30);
        while me.g.info().members.len() < plan.members {
            if Instant::now() > deadline {
                return Err(io::Error::other("the group never filled"));
            }
            me.pump(Duration::from_millis(5))?;
        }
        let mut out = Vec::new();
        let mut collapsed = false;
        for &exp in &plan.experiments {
            for &m in &plan.ms {
                let senders = if exp == Experiment::All {
                    plan.members as u64
                } else {
                    1
                };
                let rounds = (POINT_MESSAGES / (m * senders)).clamp(ROUNDS_MIN, ROUNDS_MAX);
                let mut p = Point {
                    protocol: protocol.into(),
                    pack: pack_name.into(),
                    exp,
                    m,
                    rounds,
                    msgs_per_s: None,
                    round_p50_us: 0.0,
                    round_p99_us: 0.0,
                    records_per_packet: 0.0,
                    packets: 0,
                    heartbeats: 0,
                    acks: 0,
                };
                if collapsed {
                    out.push(p);
                    progress.advance();
                    continue;
                }
                let c0 = me.g.info().counters;
                let r = point(&mut me, exp, m, rounds, plan);
                let c1 = me.g.info().counters;
                p.packets = c1.packets_sent.saturating_sub(c0.packets_sent);
                p.heartbeats = c1.heartbeats.saturating_sub(c0.heartbeats);
                p.acks = c1.acks_sent.saturating_sub(c0.acks_sent);
                p.records_per_packet = c1.records_multicast.saturating_sub(c0.records_multicast)
                    as f64
                    / p.packets.max(1) as f64;
                match r {
                    Ok((rate, mut lat)) => {
                        lat.sort_by(f64::total_cmp);
                        p.msgs_per_s = Some(rate);
                        p.round_p50_us = percentile(&lat, 0.5);
                        p.round_p99_us = percentile(&lat, 0.99);
                    }
                    Err(e) => {
                        progress.println(&format!(
                            "  {protocol}/{pack_name} {} m={m}: collapsed ({e})",
                            exp.name()
                        ));
                        // The group may be wedged: the remaining points are not run.
                        collapsed = true;
                    }
                }
                progress.println(&format!(
                    "  {:<9} {:<8} {:<3} m={:<5} {}",
                    protocol,
                    pack_name,
                    exp.name(),
                    m,
                    p.msgs_per_s.map_or("collapsed".into(), |r| format!(
                        "{:>12.0} msg/s  round p50 {:>9.0} µs  p99 {:>9.0} µs  \
                         rec/pkt {:>6.1}  pkts {:>6}  hb {:>6}  acks {:>6}",
                        r,
                        p.round_p50_us,
                        p.round_p99_us,
                        p.records_per_packet,
                        p.packets,
                        p.heartbeats,
                        p.acks
                    ))
                ));
                progress.advance();
                out.push(p);
            }
        }
        let _ = me.g.send_async(&[QUIT]);
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            me.pump(Duration::from_millis(10))?;
        }
        Ok(out)
    })();
    for c in &mut children {
        if result.is_ok() {
            if wait_child(c, Duration::from_secs(10)).is_err() {
                kill_child(c);
            }
        } else {
            kill_child(c);
        }
    }
    result
}

/// One point at the parent: the control message, then `rounds` rounds; returns messages
/// delivered per second and each round's latency in µs.
fn point(
    me: &mut Member,
    exp: Experiment,
    m: u64,
    rounds: u64,
    plan: &Plan,
) -> io::Result<(f64, Vec<f64>)> {
    let deadline = Instant::now() + plan.point;
    let mut ctl = vec![CONTROL, if exp == Experiment::All { 0 } else { 1 }];
    ctl.extend_from_slice(&m.to_le_bytes());
    ctl.extend_from_slice(&rounds.to_le_bytes());
    me.send(&ctl, deadline)?;
    me.until(deadline, |x| x.control.is_some())?;
    me.take_control();
    let members = me.g.info().members;
    let others = members.len() as u64 - 1;
    let mut lat = Vec::with_capacity(rounds as usize);
    let start = Instant::now();
    for k in 1..=rounds {
        let t = Instant::now();
        me.burst(m, deadline)?;
        match exp {
            Experiment::All => me.until(deadline, |x| x.all_in(&members, k, m))?,
            Experiment::One => me.until(deadline, |x| x.acks >= k * others)?,
        }
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let secs = start.elapsed().as_secs_f64();
    let delivered = match exp {
        Experiment::All => m * rounds * members.len() as u64,
        Experiment::One => m * rounds,
    };
    Ok((delivered as f64 / secs, lat))
}

pub fn run(opts: &Args) -> i32 {
    let usage = |e: String| crate::usage_error(&["bench", "burst"], &e);
    let (protocols, packs) = (opts.protocols.clone(), opts.packs.clone());
    for p in &protocols {
        if spec(p, PackMode::Off).is_none() {
            return usage(format!("--protocols: unknown protocol {p}"));
        }
    }
    for p in &packs {
        if pack_of(p).is_none() {
            return usage(format!("--packs: unknown pack {p}"));
        }
    }
    let mut experiments = Vec::new();
    for e in &opts.experiments {
        experiments.push(match e.as_str() {
            "all" => Experiment::All,
            "one" => Experiment::One,
            _ => return usage(format!("--experiments: unknown experiment {e}")),
        });
    }
    let ms = opts.m.clone();
    if ms.is_empty() || !ms.iter().all(|m| (1..=100_000).contains(m)) {
        return usage("--m: burst lengths 1..=100000".to_string());
    }
    let (members, bytes) = match (opts.members, opts.bytes) {
        (n, b) if (2..=16).contains(&n) && (1..=1024).contains(&b) => (n as usize, b as usize),
        _ => return usage("--members 2..=16, --bytes 1..=1024".to_string()),
    };
    let point_s = opts.point_seconds;
    if point_s <= 0.0 {
        return usage("--point-seconds: a positive number of seconds".to_string());
    }
    let plan = Plan {
        experiments,
        ms,
        members,
        bytes,
        point: Duration::from_secs_f64(point_s.max(0.1)),
    };
    eprintln!(
        "burst: paper 002 §4, {members} member processes on loopback, {bytes}-byte messages; \
         throughput = messages delivered per second at one member"
    );
    let mut points = Vec::new();
    let total = protocols.len() * packs.len() * plan.experiments.len() * plan.ms.len();
    let progress = Progress::points("burst", total as u64);
    for p in &protocols {
        for k in &packs {
            match run_cluster(p, k, &plan, &progress) {
                Ok(v) => points.extend(v),
                Err(e) => {
                    progress.finish();
                    eprintln!("txcast bench burst: {p}/{k}: {e}");
                    return EXIT_FAILED;
                }
            }
        }
    }
    progress.finish();
    print_summary(&points, &packs);
    if opts.json {
        for p in &points {
            let line = bench_json! {
                bench: "burst",
                protocol: &p.protocol,
                pack: &p.pack,
                experiment: p.exp.name(),
                m: p.m,
                members: members,
                bytes: bytes,
                rounds: p.rounds,
                msgs_per_s: p.msgs_per_s.and_then(whole),
                round_p50_us: rounded(p.round_p50_us, 1),
                round_p99_us: rounded(p.round_p99_us, 1),
                records_per_packet: rounded(p.records_per_packet, 2),
                packets: p.packets,
                heartbeats: p.heartbeats,
                acks: p.acks,
            };
            println!("{line}");
        }
    }
    if let Some(dir) = opts.svg.as_deref() {
        if let Err(e) = write_figures(dir, &points, members, bytes) {
            eprintln!("txcast bench burst: --svg {dir}: {e}");
            return EXIT_FAILED;
        }
        eprintln!("figures written to {dir}/burst-fig{{1,2,3,4}}.svg");
    }
    0
}

/// Packing's gain: throughput with each packing mode against off, per protocol and m.
fn print_summary(points: &[Point], packs: &[String]) {
    let Some(base) = packs.iter().find(|p| p.as_str() == "off") else {
        return;
    };
    eprintln!("\nthroughput with packing / without, same protocol, experiment and m:");
    for p in points.iter().filter(|p| &p.pack != base) {
        let off = points
            .iter()
            .find(|q| q.protocol == p.protocol && &q.pack == base && q.exp == p.exp && q.m == p.m);
        let ratio = match (p.msgs_per_s, off.and_then(|q| q.msgs_per_s)) {
            (Some(a), Some(b)) => format!("{:.1}×", a / b),
            (Some(_), None) => "off collapsed".into(),
            _ => "collapsed".into(),
        };
        eprintln!(
            "  {:<9} {:<8} {:<3} m={:<5} {}",
            p.protocol,
            p.pack,
            p.exp.name(),
            p.m,
            ratio
        );
    }
}

/// The paper's Figures 1–4 as SVG line charts (log-log), one line per protocol and packing.
fn write_figures(dir: &str, points: &[Point], members: usize, bytes: usize) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let figs = [
        (1, Experiment::All, true, "Message throughput, all-to-all"),
        (2, Experiment::All, false, "Round latency, all-to-all"),
        (3, Experiment::One, true, "Message throughput, one sender"),
        (4, Experiment::One, false, "Round latency, one sender"),
    ];
    for (n, exp, throughput, title) in figs {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for p in points.iter().filter(|p| p.exp == exp) {
            let name = format!("{} {}", p.protocol, p.pack);
            let Some(rate) = p.msgs_per_s else {
                continue;
            };
            let y = if throughput {
                rate
            } else {
                p.round_p50_us / 1000.0
            };
            match series.iter_mut().find(|s| s.0 == name) {
                Some(s) => s.1.push((p.m as f64, y)),
                None => series.push((name, vec![(p.m as f64, y)])),
            }
        }
        let ylabel = if throughput {
            "messages/s delivered at one member"
        } else {
            "round latency, median (ms)"
        };
        let svg = svg_chart(
            &format!("Figure {n}: {title} ({members} members, {bytes}-byte messages)"),
            "burst length m",
            ylabel,
            &series,
        );
        std::fs::write(format!("{dir}/burst-fig{n}.svg"), svg)?;
    }
    Ok(())
}

/// A log-log line chart.
fn svg_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let (w, h) = (760.0, 480.0);
    let (l, r, t, b) = (80.0, 200.0, 40.0, 50.0);
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    let lo = |v: f64| v.max(1e-9).log10();
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(lo(p.0).floor()), b.max(lo(p.0).ceil()))
    });
    let (y0, y1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(lo(p.1).floor()), b.max(lo(p.1).ceil()))
    });
    let (x0, x1) = if x0 >= x1 { (0.0, 1.0) } else { (x0, x1) };
    let (y0, y1) = if y0 >= y1 {
        (y0.min(0.0), y0.min(0.0) + 1.0)
    } else {
        (y0, y1)
    };
    let px = |x: f64| l + (lo(x) - x0) / (x1 - x0) * (w - l - r);
    let py = |y: f64| h - b - (lo(y) - y0) / (y1 - y0) * (h - t - b);
    let colors = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf",
    ];
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{title}</text>",
        w / 2.0
    );
    for d in x0 as i32..=x1 as i32 {
        let x = px(10f64.powi(d));
        let _ = write!(
            s,
            "<line x1=\"{x}\" y1=\"{t}\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">1e{d}</text>",
            h - b,
            h - b + 16.0
        );
    }
    for d in y0 as i32..=y1 as i32 {
        let y = py(10f64.powi(d));
        let _ = write!(
            s,
            "<line x1=\"{l}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">1e{d}</text>",
            w - r,
            l - 6.0,
            y + 4.0
        );
    }
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{xlabel}</text>\
         <text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{ylabel}</text>",
        (l + w - r) / 2.0,
        h - 12.0,
        h / 2.0,
        h / 2.0
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let dash = if name.ends_with(" off") {
            " stroke-dasharray=\"5,4\""
        } else {
            ""
        };
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            path.join(" ")
        );
        for &(x, y) in pts {
            let _ = write!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"/>",
                px(x),
                py(y)
            );
        }
        let ly = t + 16.0 * i as f64 + 10.0;
        let _ = write!(
            s,
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2\"{dash}/><text x=\"{}\" y=\"{}\">{name}</text>",
            w - r + 10.0,
            w - r + 34.0,
            w - r + 40.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}
