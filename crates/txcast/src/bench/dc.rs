//! `txcast bench dc`: DebitCredit on Raid against PostgreSQL's pgbench (TPC-B-like), the same
//! machine, the same durability (an `fdatasync` before a commit is acknowledged), TPC-B's
//! scale 1, in turns within one run: Raid with 3 sites against PostgreSQL with a synchronous
//! streaming standby, and Raid with 1 site against PostgreSQL alone. Each round measures the
//! four in turn; the ratios are taken round by round and their median reported.

use super::pgbench::{run_pgbench, PgOptions, NOT_FOUND};
use super::stats::{bench_json, rounded, whole};
use crate::progress::Progress;
use std::time::Duration;
use txcast_raid::cluster::{run_embedded, DcReport};
use txcast_raid::driver::{ClusterConfig, Load};
use txcast_raid::Scale;

// The options of `txcast bench dc` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Per round: Raid 3 sites, Raid 1 site (--clients closed-loop clients per site, --seconds
after a 1 s warm-up), pgbench -c 8 -j 2 -T --pg-seconds alone and with a synchronous
standby; --rounds rounds; ratios per round, medians at the end.

--failover: 3 sites under load; site 2 stops (its port closes, as a crash looks to the
others), then starts again on its log: how long sites 0 and 1 stall, and how long site 2
takes to commit again (a view change without it, then one with it and its snapshot).

--paper: one transaction at a time (the papers' concurrency level) on 1, 2 and 5 sites:
commit latency and CPU per transaction, beside Bhargava, Mafla & Riedl's Table 3.")]
pub struct Args {
    /// Seconds of Raid load per measurement
    #[arg(long, default_value_t = 5.0, value_parser = crate::dc::seconds)]
    pub seconds: f64,
    /// Closed-loop clients per site [default: 256, 64 with --failover]
    #[arg(long)]
    pub clients: Option<usize>,
    /// Rounds of the measurements
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Seconds of each pgbench run
    #[arg(long, default_value_t = 20)]
    pub pg_seconds: u32,
    /// Leave PostgreSQL out
    #[arg(long)]
    pub no_pg: bool,
    /// The failover measurement instead
    #[arg(long, conflicts_with = "paper")]
    pub failover: bool,
    /// One transaction at a time on 1, 2 and 5 sites, beside the paper's Table 3
    #[arg(long)]
    pub paper: bool,
    /// --failover: the sites' vote timeout, ms (10 to 600000) [default: 500]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub vote_timeout: Option<u64>,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

fn raid(sites: u16, clients: usize, seconds: f64) -> Result<DcReport, String> {
    let dir = std::env::temp_dir().join(format!(
        "txcast-bench-dc-{}-{sites}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let mut cluster = ClusterConfig::new(sites, Scale::tpcb(1), dir.clone());
    cluster.site.coordinated_max = clients.max(64);
    let load = Load {
        clients,
        warmup: Duration::from_secs(1),
        measure: Duration::from_secs_f64(seconds),
        seed: 11,
    };
    let r = run_embedded(&cluster, &load, |_, _| {});
    let _ = std::fs::remove_dir_all(&dir);
    let r = r.map_err(|e| e.to_string())?;
    if !(r.conserved && r.identical) {
        return Err(format!(
            "Raid {sites} sites failed its checks: {:?}",
            r.totals
        ));
    }
    Ok(r)
}

fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(u.ru_utime), s(u.ru_stime))
}

/// The papers' setting: one transaction at a time, 1, 2 and 5 sites.
fn paper(seconds: f64, json: bool) -> i32 {
    if !json {
        println!("one DebitCredit transfer at a time (1 client), ROWA, fdatasync on; paper 001 Table 3 (Sun 3/50s, 10 Mbps Ethernet): update one tuple 100 ms on 1 site, 120 ms on 2 sites (LAN)");
    }
    for sites in [1u16, 2, 5] {
        let before = cpu_seconds();
        let r = match raid(sites, 1, seconds) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("txcast bench dc --paper: {e}");
                return super::EXIT_FAILED;
            }
        };
        let after = cpu_seconds();
        // CPU of the whole run (warm-up and end included) per transaction committed in it.
        let n = r
            .per_site
            .iter()
            .map(|s| s.counters.committed)
            .sum::<u64>()
            .max(1) as f64;
        let (user, sys) = (
            (after.0 - before.0) / n * 1e6,
            (after.1 - before.1) / n * 1e6,
        );
        let (p50, p99) = (
            r.latency_us.quantile(0.5) as f64 / 1000.0,
            r.latency_us.quantile(0.99) as f64 / 1000.0,
        );
        let paper_ms = match sites {
            1 => "100",
            2 => "120",
            _ => "-",
        };
        if json {
            let line = bench_json! {
                bench: "dc-paper",
                sites: sites,
                tps: whole(r.tps),
                p50_ms: rounded(p50, 3),
                p99_ms: rounded(p99, 3),
                user_us_per_txn: rounded(user, 1),
                sys_us_per_txn: rounded(sys, 1),
                paper_ms: paper_ms,
            };
            println!("{line}");
        } else {
            println!("  {sites} site(s): {:>7.0} txn/s   p50 {p50:>6.2} ms   p99 {p99:>6.2} ms   CPU per transaction: user {user:>6.1} us, system {sys:>6.1} us   (paper: {paper_ms} ms)", r.tps);
        }
    }
    0
}

/// What one failover round measured.
struct Failover {
    /// Committed per second by sites 0 and 1 before the stop.
    before_tps: f64,
    /// The longest time without a commit at sites 0 and 1 after site 2 stopped, and after it
    /// started again.
    stall_stop: Duration,
    stall_join: Duration,
    /// From site 2's start to its first commit.
    rejoin: Duration,
    snapshots: u64,
    views: u64,
    identical: bool,
}

/// The longest time without a new commit in `samples` (time, committed so far) within
/// `[from, to)`.
fn longest_gap(samples: &[(Duration, u64)], from: Duration, to: Duration) -> Duration {
    let mut last = from;
    let mut prev: Option<u64> = None;
    let mut gap = Duration::ZERO;
    for &(t, c) in samples.iter().filter(|(t, _)| *t >= from && *t < to) {
        if prev.is_some_and(|p| c > p) {
            gap = gap.max(t - last);
            last = t;
        }
        prev = Some(c);
    }
    gap.max(to.saturating_sub(last))
}

fn failover_round(clients: usize, vote: Option<Duration>) -> Result<Failover, String> {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use txcast_raid::driver::{run_site, RunControl};
    let dir = std::env::temp_dir().join(format!(
        "txcast-bench-failover-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let mut cluster = ClusterConfig::new(3, Scale::tpcb(1), dir.clone());
    cluster.site.coordinated_max = clients.max(64);
    if let Some(v) = vote {
        cluster.site.vote_timeout = v;
    }
    // Sites 0 and 1 run 8 s; site 2 runs 2 s, is stopped, and runs again from 5 s to 8 s.
    let (stop_at, start_at, end_at) = (2.0, 5.0, 8.0);
    let load = |secs: f64, seed| Load {
        clients,
        warmup: Duration::ZERO,
        measure: Duration::from_secs_f64(secs),
        seed,
    };
    let group = |mask: u64| {
        let c = Arc::new(RunControl::new());
        c.local.store(mask, Ordering::SeqCst);
        c
    };
    let (c01, c2, c2b) = (group(0b011), group(0b100), group(0b100));
    c2.end_when_quiet.store(false, Ordering::SeqCst);
    let spawn = |s: u16, l: Load, c: Arc<RunControl>| {
        let cl = cluster.clone();
        std::thread::spawn(move || run_site(&cl, s, Some(l), c))
    };
    let started = std::time::Instant::now();
    let t01: Vec<_> = [0u16, 1]
        .into_iter()
        .map(|s| spawn(s, load(end_at, s as u64), c01.clone()))
        .collect();
    let first2 = spawn(2, load(60.0, 2), c2.clone());
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut second2 = None;
    let mut joined: Option<Duration> = None;
    let (mut stopped, mut restarted) = (Duration::ZERO, Duration::ZERO);
    while !t01.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(2));
        let t = started.elapsed();
        samples.push((t, c01.committed.load(Ordering::Relaxed)));
        if stopped.is_zero() && t.as_secs_f64() >= stop_at {
            c2.stop.store(true, Ordering::SeqCst);
            stopped = t;
        }
        if second2.is_none() && t.as_secs_f64() >= start_at {
            restarted = t;
            second2 = Some(spawn(2, load(end_at - start_at, 22), c2b.clone()));
        }
        if second2.is_some() && joined.is_none() && c2b.committed.load(Ordering::Relaxed) > 0 {
            joined = Some(t - restarted);
        }
        if t > Duration::from_secs_f64(end_at + 60.0) {
            c01.stop.store(true, Ordering::SeqCst);
            c2b.stop.store(true, Ordering::SeqCst);
        }
    }
    let mut reports = Vec::new();
    for t in t01 {
        reports.push(
            t.join()
                .map_err(|_| "a site panicked")?
                .map_err(|e| e.to_string())?,
        );
    }
    first2
        .join()
        .map_err(|_| "site 2 panicked")?
        .map_err(|e| e.to_string())?;
    let r2 = second2
        .ok_or("site 2 never started again")?
        .join()
        .map_err(|_| "site 2 panicked")?
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let count_at = |t: Duration| {
        samples
            .iter()
            .take_while(|(s, _)| *s <= t)
            .last()
            .map_or(0, |(_, c)| *c)
    };
    let one = Duration::from_secs(1);
    let before_tps =
        (count_at(stopped) - count_at(one)) as f64 / (stopped.as_secs_f64() - 1.0).max(0.1);
    Ok(Failover {
        before_tps,
        stall_stop: longest_gap(&samples, stopped, restarted),
        stall_join: longest_gap(&samples, restarted, restarted + 2 * one),
        rejoin: joined.unwrap_or(Duration::MAX),
        snapshots: r2.counters.snapshots,
        views: reports[0].counters.views,
        identical: reports.iter().all(|r| r.digest == r2.digest)
            && reports.iter().chain([&r2]).all(|r| r.totals.conserved()),
    })
}

/// A site stopped and started again under load, `rounds` times.
fn failover(clients: usize, rounds: u32, json: bool, vote_timeout: Option<Duration>) -> i32 {
    if !json {
        let vote = vote_timeout
            .unwrap_or(txcast_raid::SiteConfig::new(0, 3, 1, Scale::tpcb(1)).vote_timeout);
        println!("3 sites, {clients} clients per site, TPC-B scale 1, fdatasync on, vote timeout {} ms: site 2 stops at 2 s and starts again at 5 s", vote.as_millis());
    }
    for round in 1..=rounds.max(1) {
        let f = match failover_round(clients, vote_timeout) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("txcast bench dc --failover: {e}");
                return super::EXIT_FAILED;
            }
        };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        if json {
            let line = bench_json! {
                bench: "dc-failover",
                round: round,
                before_tps: whole(f.before_tps),
                stall_stop_ms: rounded(ms(f.stall_stop), 1),
                stall_join_ms: rounded(ms(f.stall_join), 1),
                rejoin_ms: rounded(ms(f.rejoin), 1),
                snapshots: f.snapshots,
                views: f.views,
                identical: f.identical,
            };
            println!("{line}");
        } else {
            println!("  round {round}: sites 0-1 {:.0} txn/s before; no commit for {:.0} ms after the stop, {:.0} ms at the join; site 2 committed again {:.0} ms after its start ({} snapshot, {} views at site 0); copies {}", f.before_tps, ms(f.stall_stop), ms(f.stall_join), ms(f.rejoin), f.snapshots, f.views, if f.identical { "identical, money conserved" } else { "DIFFER" });
        }
        if !f.identical {
            return super::EXIT_FAILED;
        }
    }
    0
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(args: &Args) -> i32 {
    let (seconds, rounds, pg_seconds, json) =
        (args.seconds, args.rounds, args.pg_seconds, args.json);
    if args.paper {
        return paper(seconds, json);
    }
    if args.failover {
        let clients = args.clients.unwrap_or(64);
        let vote = args.vote_timeout.map(Duration::from_millis);
        return failover(clients, rounds, json, vote);
    }
    let clients = args.clients.unwrap_or(256);
    let mut pg = !args.no_pg;
    let (mut r3, mut r1, mut p1, mut p2, mut q3, mut q1) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut p99_3, mut p99_1) = (vec![], vec![]);
    // Points: per round the two Raid runs, and the two pgbench runs unless skipped.
    let per_round = if pg { 4 } else { 2 };
    let progress = Progress::points("dc", u64::from(rounds.max(1)) * per_round);
    let fail = |what: String| {
        progress.finish();
        eprintln!("txcast bench dc: {what}");
        super::EXIT_FAILED
    };
    for round in 1..=rounds.max(1) {
        progress.note(&format!("round {round} raid 3 sites"));
        let a = match raid(3, clients, seconds) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        progress.advance();
        progress.note(&format!("round {round} raid 1 site"));
        let b = match raid(1, clients, seconds) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        progress.advance();
        // Raid reports p50 and p99 of its commits; pgbench reports a mean latency.
        let line = |case: &str, tps: f64, p50: f64, p99: Option<f64>| {
            match (json, p99) {
                (true, Some(p99)) => println!(
                    "{}",
                    bench_json! {
                        bench: "dc",
                        round: round,
                        case: case,
                        tps: whole(tps),
                        p50_ms: rounded(p50, 3),
                        p99_ms: rounded(p99, 3),
                    }
                ),
                (true, None) => println!(
                    "{}",
                    bench_json! {
                        bench: "dc",
                        round: round,
                        case: case,
                        tps: whole(tps),
                        mean_ms: rounded(p50, 3),
                    }
                ),
                (false, Some(p99)) => println!(
                    "  round {round}  {case:<28} {tps:>10.0} txn/s   p50  {p50:>7.2} ms   p99 {p99:>7.2} ms"
                ),
                (false, None) => println!(
                    "  round {round}  {case:<28} {tps:>10.0} txn/s   mean {p50:>7.2} ms"
                ),
            }
        };
        let ms = |us: u64| us as f64 / 1000.0;
        progress.suspend(|| {
            line(
                "raid 3 sites",
                a.tps,
                ms(a.latency_us.quantile(0.5)),
                Some(ms(a.latency_us.quantile(0.99))),
            );
            line(
                "raid 1 site",
                b.tps,
                ms(b.latency_us.quantile(0.5)),
                Some(ms(b.latency_us.quantile(0.99))),
            );
        });
        r3.push(a.tps);
        r1.push(b.tps);
        p99_3.push(ms(a.latency_us.quantile(0.99)));
        p99_1.push(ms(b.latency_us.quantile(0.99)));
        if !pg {
            continue;
        }
        let opts = PgOptions {
            seconds: pg_seconds,
            ..PgOptions::default()
        };
        progress.note(&format!("round {round} pgbench"));
        let single = match run_pgbench(&opts) {
            Ok(r) => r,
            Err(e) if e.starts_with(NOT_FOUND) => {
                progress.suspend(|| println!("  pgbench skipped: {e}"));
                pg = false;
                continue;
            }
            Err(e) => return fail(format!("pgbench: {e}")),
        };
        progress.advance();
        progress.note(&format!("round {round} pgbench --standby"));
        let standby = match run_pgbench(&PgOptions {
            standby: true,
            ..opts
        }) {
            Ok(r) => r,
            Err(e) => return fail(format!("pgbench --standby: {e}")),
        };
        progress.advance();
        progress.suspend(|| {
            line(
                "pgbench (postgres alone)",
                single.tps,
                single.latency_ms,
                None,
            );
            line(
                "pgbench (sync standby)",
                standby.tps,
                standby.latency_ms,
                None,
            );
        });
        p1.push(single.tps);
        p2.push(standby.tps);
        q3.push(a.tps / standby.tps);
        q1.push(b.tps / single.tps);
    }
    let summary = format!(
        "medians over {} round(s): raid 3 sites {:.0} txn/s (p99 {:.2} ms), raid 1 site {:.0} txn/s (p99 {:.2} ms){}",
        r3.len(),
        median(&mut r3),
        median(&mut p99_3),
        median(&mut r1),
        median(&mut p99_1),
        if q3.is_empty() {
            String::new()
        } else {
            format!(
                "; pgbench alone {:.0}, with a sync standby {:.0}; ratios (per round, median): raid 3 sites / pg with standby {:.1}x, raid 1 site / pg alone {:.1}x",
                median(&mut p1),
                median(&mut p2),
                median(&mut q3),
                median(&mut q1)
            )
        }
    );
    progress.finish();
    if json {
        println!("{}", bench_json! { bench: "dc", summary: summary });
    } else {
        println!("{summary}");
    }
    0
}
