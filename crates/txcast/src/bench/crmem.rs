//! `txcast bench crmem`: CRMem in the mirror configuration (`--config symmetric`:
//! crmem_sym.rs) (Roşu & Schwan §3.6), the primary
//! in this process and one backup in a partner process at another site (UDP and the
//! reliable link on loopback), remote operations on the engine's extension modules (the
//! paper's *CoProcessor* implementation).
//!
//! - **locks** (Figure 6): remote lock acquire + release against the number of locks, in the
//!   symmetric configuration with the home in a partner process (crmem_locks.rs), against
//!   the remote port round trip of the same run.
//! - **commit**: commit latency of a one-record transaction at parallelism 1, against the
//!   remote port round trip (`bench rtt`'s `txcast-remote-spin` and `txcast-remote-park`)
//!   measured in the same run.
//! - **synthetic** (Figure 7): 10,000 three-field records in one segment, 1,000 locks,
//!   uniform mapping; each transaction picks a record and stores the sum of its first two
//!   fields in the third. Transactions per second at parallelism 1..16 (application threads
//!   each waiting for its commit), then one thread with 1..256 commits in flight
//!   (`commit_async`, `wait_durable`).
//! - **tpcb** (Figure 8, mirror): 10,000 accounts (ten to a lock), 256 tellers (two to a
//!   lock), 32 branches, a 100-record history (one lock each); each transaction moves an
//!   amount on an account, its teller and the teller's branch and writes a history record.
//!   At the end the accounts, tellers and branches must sum to the same total on both nodes.

use super::crmem_common::{
    self as common, add_i64, err, i64_at, serve_until, tpcb_segments, Affinity, Impl, Tpcb,
};
use super::crmem_sym::Locks;
use super::stats::{bench_json, whole, Samples, Summary};
use super::{parse_u64, plan_or_exit, spawn_child, usize_list_in, EXIT_FAILED};
use crate::progress::Progress;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use txcast_crmem::{Crmem, CrmemConfig, LockMapping, Mode};
use txcast_proto::rng::Rng;
use txcast_proto::Address;

/// Server type of the benchmark's nodes (none of the other benchmarks' addresses).
const HOST_TYPE: u16 = 15;
const PARTNER_LIFE: Duration = Duration::from_secs(600);
const WAIT: Duration = Duration::from_secs(10);

const RECORDS: u32 = 10_000;
const FIELDS: u32 = 24;
/// Segments: the synthetic records, then TpcB's accounts, tellers, branches, history.
const SYN: u16 = 0;
const ACC: u16 = 1;
const TEL: u16 = 2;
const BR: u16 = 3;
const HIST: u16 = 4;

struct Plan {
    sections: Vec<String>,
    commits: u64,
    warmup: u64,
    parallel: Vec<usize>,
    locks: Vec<usize>,
    depths: Vec<usize>,
    seconds: f64,
    json: bool,
    handlers: Vec<Impl>,
    disk: Option<std::path::PathBuf>,
}

/// A line of the human table: on stdout, or on stderr under `--json` (stdout has the JSON).
/// With the progress bar, if drawn, out of the way.
macro_rules! say {
    ($plan:expr, $progress:expr, $($t:tt)*) => {
        $progress.suspend(|| if $plan.json { eprintln!($($t)*) } else { println!($($t)*) })
    };
}

// The options of `txcast bench crmem` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The parts to run: locks, commit, synthetic, tpcb
    #[arg(long, value_delimiter = ',', default_values_t = ["locks".to_string(), "commit".to_string(), "synthetic".to_string(), "tpcb".to_string()])]
    pub sections: Vec<String>,
    /// Remote locks per request, per point of the locks section (1 to 256)
    #[arg(long, value_delimiter = ',', default_values_t = super::crmem_locks::default_counts(), value_parser = parse_u64)]
    pub locks: Vec<u64>,
    /// Commits timed, and lock acquire + release pairs per point (clamped to 1..=10000000)
    #[arg(long, default_value_t = 10_000, value_parser = parse_u64)]
    pub commits: u64,
    /// Commits before the timed ones (clamped to 1..=1000000)
    #[arg(long, default_value_t = 1_000, value_parser = parse_u64)]
    pub warmup: u64,
    /// Parallelism of the transaction rates (1 to 64)
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16], value_parser = parse_u64)]
    pub parallel: Vec<u64>,
    /// Commits in flight on one thread, per pipelined point (1 to 4096)
    #[arg(long, value_delimiter = ',', default_values_t = [1, 16, 64, 256], value_parser = parse_u64)]
    pub depths: Vec<u64>,
    /// Seconds per point (clamped to 1..=600)
    #[arg(long, default_value_t = 2, value_parser = parse_u64)]
    pub seconds: u64,
    /// JSON lines on stdout (one per point), the human table on stderr
    #[arg(long)]
    pub json: bool,
    /// The configuration: mirror (primary here, one backup in a partner process) or
    /// symmetric (TpcB on every node, one process each; sections other than tpcb ignored)
    #[arg(long, value_enum, default_value_t = Config::Mirror)]
    pub config: Config,
    /// Where the remote operations run, one pass per value: engine (on the engine thread,
    /// the paper's CoProcessor), polled (the application's threads poll: CPU Polling),
    /// interrupt (a thread woken per message: CPU Interrupt). Default: all three for the
    /// mirror, engine for symmetric
    #[arg(long, value_enum, value_delimiter = ',')]
    pub handlers: Vec<Impl>,
    /// A directory for the primary's disk log (group commit): commits then complete when
    /// the backup and the disk hold them. Emptied before each implementation's pass
    #[arg(long)]
    pub disk: Option<std::path::PathBuf>,
    /// Node counts of the symmetric configuration (2 to 8)
    #[arg(long, value_delimiter = ',', default_values_t = [2, 4], value_parser = parse_u64)]
    pub nodes: Vec<u64>,
    /// Which transactions each node runs in the symmetric configuration, one pass per value:
    /// uniform (teller, account and history slot drawn over all), branch (TPC-B's locality:
    /// node k of n runs the branches b with b % n == k, the account in the teller's branch
    /// 85 % of the time, the history slots s with s % n == k)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Affinity::Uniform])]
    pub affinity: Vec<Affinity>,
    /// What a symmetric node does with the locks another home granted it once its
    /// transactions are done, one pass per value: returned (given back at once), kept (kept
    /// for its next transactions until the home recalls them)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Locks::Returned])]
    pub lock_keeping: Vec<Locks>,
}

/// A CRMem configuration (`--config`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    Mirror,
    Symmetric,
}

fn plan(o: &Args) -> Result<Plan, String> {
    let sections = o.sections.clone();
    if let Some(s) = sections
        .iter()
        .find(|s| !["locks", "commit", "synthetic", "tpcb"].contains(&s.as_str()))
    {
        return Err(format!("--sections: unknown section {s:?}"));
    }
    let seconds = o.seconds.clamp(1, 600) as f64;
    Ok(Plan {
        sections,
        commits: o.commits.clamp(1, 10_000_000),
        warmup: o.warmup.clamp(1, 1_000_000),
        parallel: usize_list_in("parallel", &o.parallel, 1..=64)?,
        locks: usize_list_in("locks", &o.locks, 1..=super::crmem_locks::RECORDS as usize)?,
        depths: usize_list_in("depths", &o.depths, 1..=4096)?,
        seconds,
        json: o.json,
        handlers: match o.handlers.as_slice() {
            [] => vec![Impl::Engine, Impl::Polled, Impl::Interrupt],
            h => h.to_vec(),
        },
        disk: o.disk.clone(),
    })
}

fn nodes() -> Vec<Address> {
    vec![
        Address::new(0, 0, HOST_TYPE, 0),
        Address::new(0, 1, HOST_TYPE, 0),
    ]
}

fn segments() -> Vec<(usize, LockMapping)> {
    let mut v = vec![(
        (RECORDS * FIELDS) as usize,
        LockMapping::Uniform {
            locks: 1000,
            granule: FIELDS,
        },
    )];
    v.extend(tpcb_segments());
    v
}

fn open(me: u16, how: Impl, disk: Option<&Path>) -> io::Result<Crmem> {
    let cfg = CrmemConfig {
        handlers: how.handlers(),
        disk: disk.map(Path::to_path_buf),
        ..CrmemConfig::new(nodes(), me)
    };
    Crmem::open(cfg, &segments()).map_err(|e| io::Error::other(e.to_string()))
}

/// The backup: serves until `stop` exists, then writes its TpcB sums into `stop.sums`.
pub fn child(args: &[String]) -> io::Result<()> {
    let [stop, how] = args else {
        return Err(io::Error::other(
            "usage: crmem <stop file> <engine|polled|interrupt>",
        ));
    };
    let how = Impl::parse(how)?;
    let c = open(1, how, None)?;
    let stop = Path::new(stop);
    let drive = || c.drive();
    let polled = (how == Impl::Polled).then_some(&drive as &dyn Fn() -> usize);
    serve_until(stop, PARTNER_LIFE, polled);
    let sums = tpcb_sums(&c).map(|(a, t, b)| format!("{a} {t} {b} {}", c.seq()));
    std::fs::write(stop.with_extension("sums"), sums.unwrap_or_default())?;
    Ok(())
}

/// Sums of the accounts', tellers' and branches' balances as the node has them.
fn tpcb_sums(c: &Crmem) -> Option<(i64, i64, i64)> {
    let seg = |s| c.snapshot_segment(s);
    Some(common::tpcb_sums(&seg(ACC)?, &seg(TEL)?, &seg(BR)?))
}

pub fn run(args: &Args) -> i32 {
    let plan = match plan_or_exit("crmem", plan(args)) {
        Ok(p) => p,
        Err(code) => return code,
    };
    if args.config == Config::Symmetric {
        let nodes = match plan_or_exit("crmem", usize_list_in("nodes", &args.nodes, 2..=8)) {
            Ok(n) => n,
            Err(code) => return code,
        };
        use super::crmem_sym::Point;
        let points: Vec<Point> = plan
            .parallel
            .iter()
            .map(|&p| Point::Threads(p))
            .chain(plan.depths.iter().map(|&d| Point::InFlight(d)))
            .collect();
        let hows = match args.handlers.as_slice() {
            [] => vec![Impl::Engine],
            h => h.to_vec(),
        };
        return super::crmem_sym::run(
            &nodes,
            &hows,
            (&args.affinity, &args.lock_keeping),
            &points,
            plan.seconds,
            plan.json,
        );
    }
    match bench(&plan) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("txcast bench crmem: {e}");
            EXIT_FAILED
        }
    }
}

fn bench(plan: &Plan) -> io::Result<()> {
    let has = |s: &str| plan.sections.iter().any(|x| x == s);
    // One point for the yardsticks, one per lock count, one for the commit latency, one per
    // parallelism and per depth of the throughput sections.
    let mut total = 0;
    if has("commit") || has("locks") {
        total += 1;
    }
    let mut each = 0;
    if has("locks") {
        each += plan.locks.len();
    }
    if has("commit") {
        each += 1;
    }
    for s in ["synthetic", "tpcb"] {
        if has(s) {
            each += plan.parallel.len() + plan.depths.len();
        }
    }
    total += each * plan.handlers.len();
    let progress = Progress::points("crmem", total as u64);
    let r = sections(plan, &progress);
    progress.finish();
    r
}

fn sections(plan: &Plan, progress: &Progress) -> io::Result<()> {
    let has = |s: &str| plan.sections.iter().any(|x| x == s);
    // The yardsticks first, with nothing else running.
    let (spin, park) = if has("commit") || has("locks") {
        progress.note("remote port round trips");
        let (spin, park) = super::crmem_locks::yardsticks(plan.commits, plan.warmup)?;
        progress.advance();
        (Some(spin), Some(park))
    } else {
        (None, None)
    };
    for &how in &plan.handlers {
        mirror(plan, progress, how, spin.as_ref(), park.as_ref())?;
    }
    Ok(())
}

/// The sections with CRMem's remote operations run as `how` says.
fn mirror(
    plan: &Plan,
    progress: &Progress,
    how: Impl,
    spin: Option<&Summary>,
    park: Option<&Summary>,
) -> io::Result<()> {
    let has = |s: &str| plan.sections.iter().any(|x| x == s);
    if let (true, Some(spin), Some(park)) = (has("locks"), spin, park) {
        let out = super::crmem_locks::Out {
            json: plan.json,
            progress,
        };
        super::crmem_locks::measure(
            &out,
            how,
            &plan.locks,
            plan.commits,
            plan.warmup,
            spin,
            park,
        )?;
    }
    if !["commit", "synthetic", "tpcb"].iter().any(|s| has(s)) {
        return Ok(());
    }
    say!(
        plan,
        progress,
        "mirror with one backup, remote operations: {} ({}){}",
        how.name(),
        how.paper(),
        if plan.disk.is_some() {
            ", primary's disk log on"
        } else {
            ""
        }
    );
    let stop = std::env::temp_dir().join(format!("txcast-bench-crmem-{}.stop", std::process::id()));
    let _ = std::fs::remove_file(&stop);
    let _ = std::fs::remove_file(stop.with_extension("sums"));
    let mut partner = spawn_child(&[
        "crmem".to_string(),
        stop.to_string_lossy().into_owned(),
        how.name().to_string(),
    ])?;
    if let Some(d) = &plan.disk {
        // A fresh log for each pass: a primary restores what its directory holds.
        let _ = std::fs::remove_dir_all(d);
    }
    let r = (|| -> io::Result<()> {
        let c = open(0, how, plan.disk.as_deref())?;
        // Warm up: the link comes up, the backup answers.
        for i in 0..plan.warmup {
            synthetic_txn(&c, (i % RECORDS as u64) as u32)?;
        }
        if let (true, Some(spin), Some(park)) = (has("commit"), spin, park) {
            progress.note(&format!("commit latency, {}", how.name()));
            commit_latency(plan, progress, &c, how, spin, park)?;
            progress.advance();
        }
        if has("synthetic") {
            throughput(plan, progress, &c, how, "synthetic", |c, rng| {
                synthetic_txn(c, rng.below(RECORDS as u64) as u32)
            })?;
            pipelined(plan, progress, &c, how, "synthetic", |c, rng| {
                synthetic(c, rng.below(RECORDS as u64) as u32, End::Async)
            })?;
        }
        if has("tpcb") {
            throughput(plan, progress, &c, how, "tpcb", tpcb_txn)?;
            pipelined(plan, progress, &c, how, "tpcb", |c, rng| {
                tpcb(c, rng, End::Async)
            })?;
            let mine = tpcb_sums(&c).ok_or_else(|| io::Error::other("no segments"))?;
            std::fs::write(&stop, b"")?;
            super::wait_child(&mut partner, Duration::from_secs(30))?;
            let theirs = std::fs::read_to_string(stop.with_extension("sums"))?;
            let want = format!("{} {} {} {}", mine.0, mine.1, mine.2, c.seq());
            let ok = mine.0 == mine.1 && mine.1 == mine.2 && theirs.trim() == want;
            say!(
                plan,
                progress,
                "tpcb check: primary sums (accounts tellers branches, commit) {want}, backup {}: {}",
                theirs.trim(),
                if ok { "consistent" } else { "INCONSISTENT" }
            );
            if !ok {
                return Err(io::Error::other("TpcB sums differ"));
            }
        }
        say!(plan, progress, "counters: {:?}", c.counters());
        if plan.disk.is_some() {
            let syncs = c.disk_syncs();
            say!(
                plan,
                progress,
                "disk log: {syncs} syncs for {} commits ({:.1} commits a sync)",
                c.seq(),
                c.seq() as f64 / syncs.max(1) as f64
            );
        }
        Ok(())
    })();
    let _ = std::fs::write(&stop, b"");
    let r = super::finish_child(&mut partner, r, Duration::from_secs(30));
    let _ = std::fs::remove_file(&stop);
    let _ = std::fs::remove_file(stop.with_extension("sums"));
    r
}

/// How a benchmark transaction ends: `commit` (waits until the backup has it) or
/// `commit_async` (returns at once; the caller waits for durability in batches).
#[derive(Clone, Copy)]
enum End {
    Wait,
    Async,
}

fn end(c: &Crmem, t: u64, how: End) -> io::Result<u64> {
    match how {
        End::Wait => c.commit(t, WAIT).map_err(err),
        End::Async => c.commit_async(t).map_err(err),
    }
}

/// One synthetic transaction on `record`: field 3 = field 1 + field 2, field 1 += 1.
fn synthetic_txn(c: &Crmem, record: u32) -> io::Result<()> {
    synthetic(c, record, End::Wait).map(|_| ())
}

fn synthetic(c: &Crmem, record: u32, how: End) -> io::Result<u64> {
    let t = c.begin(WAIT).map_err(err)?;
    let off = record * FIELDS;
    c.set_range(t, SYN, off, FIELDS, Mode::Write).map_err(err)?;
    c.write(t, SYN, off, FIELDS, |m| {
        let s = i64_at(m, 0).wrapping_add(i64_at(m, 8));
        m[16..24].copy_from_slice(&s.to_le_bytes());
        add_i64(m, 0, 1);
    })
    .map_err(err)?;
    end(c, t, how)
}

/// One TpcB transaction.
fn tpcb_txn(c: &Crmem, rng: &mut Rng) -> io::Result<()> {
    tpcb(c, rng, End::Wait).map(|_| ())
}

fn tpcb(c: &Crmem, rng: &mut Rng, how: End) -> io::Result<u64> {
    let x = Tpcb::draw(rng);
    let t = c.begin(WAIT).map_err(err)?;
    for (s, row, len) in x.ranges([ACC, TEL, BR, HIST]) {
        if let Err(e) = c.set_range(t, s, row, len, Mode::Write) {
            let _ = c.abort(t);
            return Err(err(e));
        }
        c.write(t, s, row, len, |m| x.apply(s == HIST, m))
            .map_err(err)?;
    }
    end(c, t, how)
}

/// One application thread keeping up to `depth` commits in flight (`commit_async`, then
/// `wait_durable` on the oldest): the parallelism of the paper's figures without a thread
/// per transaction.
fn pipelined(
    plan: &Plan,
    progress: &Progress,
    c: &Crmem,
    how: Impl,
    name: &str,
    txn: impl Fn(&Crmem, &mut Rng) -> io::Result<u64>,
) -> io::Result<()> {
    say!(
        plan,
        progress,
        "{name}, one thread with commits in flight: transactions per second, {} s a point",
        plan.seconds
    );
    say!(
        plan,
        progress,
        "{:>11} {:>14} {:>12}",
        "in flight",
        "txn/s",
        "transactions"
    );
    for &depth in &plan.depths {
        progress.note(&format!("{name} {depth} in flight, {}", how.name()));
        let mut rng = Rng::new(depth as u64);
        let mut flight = std::collections::VecDeque::with_capacity(depth);
        let started = Instant::now();
        let until = started + Duration::from_secs_f64(plan.seconds);
        let mut n = 0u64;
        while Instant::now() < until {
            if flight.len() >= depth {
                let oldest = flight.pop_front().expect("in flight");
                c.wait_durable(oldest, WAIT).map_err(err)?;
            }
            flight.push_back(txn(c, &mut rng)?);
            n += 1;
        }
        if let Some(&last) = flight.back() {
            c.wait_durable(last, WAIT).map_err(err)?;
        }
        let rate = n as f64 / started.elapsed().as_secs_f64();
        say!(plan, progress, "{depth:>11} {rate:>14.0} {n:>12}");
        if plan.json {
            let line = bench_json! {
                bench: "crmem",
                section: name,
                handlers: how.name(),
                disk: plan.disk.is_some(),
                mode: "in-flight",
                depth: depth,
                txn_per_s: whole(rate),
                transactions: n,
            };
            progress.suspend(|| println!("{line}"));
        }
        progress.advance();
    }
    Ok(())
}

fn commit_latency(
    plan: &Plan,
    progress: &Progress,
    c: &Crmem,
    how: Impl,
    spin: &Summary,
    park: &Summary,
) -> io::Result<()> {
    let mut s = Samples::with_capacity(plan.commits as usize);
    let mut rng = Rng::new(7);
    for _ in 0..plan.commits {
        let rec = rng.below(RECORDS as u64) as u32;
        let t0 = Instant::now();
        synthetic_txn(c, rec)?;
        s.record(t0.elapsed());
    }
    let m = s.summary().ok_or_else(|| io::Error::other("no samples"))?;
    let us = |s: &Summary| format!("{:.1}/{:.1}", s.p50_ns as f64 / 1e3, s.p99_ns as f64 / 1e3);
    let ratio = |a: &Summary, b: &Summary| a.p50_ns as f64 / b.p50_ns.max(1) as f64;
    if plan.json {
        let line = bench_json! {
            bench: "crmem",
            section: "commit",
            handlers: how.name(),
            disk: plan.disk.is_some(),
            commit_p50_ns: m.p50_ns,
            commit_p99_ns: m.p99_ns,
            remote_spin_p50_ns: spin.p50_ns,
            remote_park_p50_ns: park.p50_ns,
        };
        progress.suspend(|| println!("{line}"));
    }
    say!(
        plan,
        progress,
        "commit latency, {}, parallelism 1, {} commits (p50/p99 us): crmem {}, remote port round trip spinning {}, parked {}; crmem/spinning {:.2}, crmem/parked {:.2} (target <= 1.5 against the round trip)",
        how.name(),
        plan.commits,
        us(&m),
        us(spin),
        us(park),
        ratio(&m, spin),
        ratio(&m, park)
    );
    Ok(())
}

fn throughput(
    plan: &Plan,
    progress: &Progress,
    c: &Crmem,
    how: Impl,
    name: &str,
    txn: impl Fn(&Crmem, &mut Rng) -> io::Result<()> + Sync,
) -> io::Result<()> {
    say!(
        plan,
        progress,
        "{name}: transactions per second, mirror with one backup, {} s a point",
        plan.seconds
    );
    say!(
        plan,
        progress,
        "{:>11} {:>14} {:>12}",
        "parallelism",
        "txn/s",
        "transactions"
    );
    for &p in &plan.parallel {
        progress.note(&format!("{name} parallelism {p}, {}", how.name()));
        let done = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let failed: std::sync::Mutex<Option<io::Error>> = std::sync::Mutex::new(None);
        let started = Instant::now();
        std::thread::scope(|s| {
            for k in 0..p {
                let (done, stop, failed, txn) = (&done, &stop, &failed, &txn);
                s.spawn(move || {
                    let mut rng = Rng::new(k as u64 + 1);
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = txn(c, &mut rng) {
                            *failed.lock().expect("lock") = Some(e);
                            stop.store(true, Ordering::Relaxed);
                            return;
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            std::thread::sleep(Duration::from_secs_f64(plan.seconds));
            stop.store(true, Ordering::Relaxed);
        });
        if let Some(e) = failed.into_inner().expect("lock") {
            return Err(e);
        }
        let n = done.load(Ordering::Relaxed);
        let rate = n as f64 / started.elapsed().as_secs_f64();
        say!(plan, progress, "{p:>11} {rate:>14.0} {n:>12}");
        if plan.json {
            let line = bench_json! {
                bench: "crmem",
                section: name,
                handlers: how.name(),
                disk: plan.disk.is_some(),
                mode: "threads",
                parallel: p,
                txn_per_s: whole(rate),
                transactions: n,
            };
            progress.suspend(|| println!("{line}"));
        }
        progress.advance();
    }
    Ok(())
}
