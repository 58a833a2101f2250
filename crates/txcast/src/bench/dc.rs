//! `txcast bench dc`: DebitCredit on Raid against PostgreSQL's pgbench (TPC-B-like), the same
//! machine, the same durability (an `fdatasync` before a commit is acknowledged), TPC-B's
//! scale 1, in turns within one run: Raid with 3 sites against PostgreSQL with a synchronous
//! streaming standby, and Raid with 1 site against PostgreSQL alone. Each round measures the
//! four in turn; the ratios are taken round by round and their median reported.

use super::pgbench::{run_pgbench, PgOptions, NOT_FOUND};
use std::time::Duration;
use txcast_raid::cluster::{run_embedded, DcReport};
use txcast_raid::driver::{ClusterConfig, Load};
use txcast_raid::Scale;

const USAGE: &str = "\
usage: txcast bench dc [--seconds S] [--clients N] [--rounds R] [--pg-seconds S] [--no-pg] [--json]
  per round: Raid 3 sites, Raid 1 site (N closed-loop clients per site, default 256, S
  seconds, default 5, after a 1 s warm-up), pgbench -c 8 -j 2 -T S (default 20) alone and
  with a synchronous standby; R rounds (default 1); ratios per round, medians at the end";

fn value<T: std::str::FromStr>(args: &[String], key: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == key) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("{key}: a value is needed")),
    }
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

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    let known = ["--seconds", "--clients", "--rounds", "--pg-seconds"];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if known.contains(&a) {
            i += 2;
        } else if a == "--no-pg" || a == "--json" {
            i += 1;
        } else {
            eprintln!("txcast bench dc: unknown option {a:?}\n{USAGE}");
            return super::EXIT_USAGE;
        }
    }
    let parsed = (|| -> Result<(f64, usize, u32, u32), String> {
        Ok((
            value(args, "--seconds")?.unwrap_or(5.0),
            value(args, "--clients")?.unwrap_or(256),
            value(args, "--rounds")?.unwrap_or(1),
            value(args, "--pg-seconds")?.unwrap_or(20),
        ))
    })();
    let (seconds, clients, rounds, pg_seconds) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("txcast bench dc: {e}\n{USAGE}");
            return super::EXIT_USAGE;
        }
    };
    let json = args.iter().any(|a| a == "--json");
    let mut pg = !args.iter().any(|a| a == "--no-pg");
    let (mut r3, mut r1, mut p1, mut p2, mut q3, mut q1) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut p99_3, mut p99_1) = (vec![], vec![]);
    for round in 1..=rounds.max(1) {
        let a = match raid(3, clients, seconds) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("txcast bench dc: {e}");
                return super::EXIT_FAILED;
            }
        };
        let b = match raid(1, clients, seconds) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("txcast bench dc: {e}");
                return super::EXIT_FAILED;
            }
        };
        // Raid reports p50 and p99 of its commits; pgbench reports a mean latency.
        let line = |case: &str, tps: f64, p50: f64, p99: Option<f64>| {
            match (json, p99) {
                (true, Some(p99)) => println!(
                    "{{\"bench\":\"dc\",\"round\":{round},\"case\":\"{case}\",\"tps\":{tps:.0},\"p50_ms\":{p50:.3},\"p99_ms\":{p99:.3}}}"
                ),
                (true, None) => println!(
                    "{{\"bench\":\"dc\",\"round\":{round},\"case\":\"{case}\",\"tps\":{tps:.0},\"mean_ms\":{p50:.3}}}"
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
        let single = match run_pgbench(&opts) {
            Ok(r) => r,
            Err(e) if e.starts_with(NOT_FOUND) => {
                println!("  pgbench skipped: {e}");
                pg = false;
                continue;
            }
            Err(e) => {
                eprintln!("txcast bench dc: pgbench: {e}");
                return super::EXIT_FAILED;
            }
        };
        let standby = match run_pgbench(&PgOptions {
            standby: true,
            ..opts
        }) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("txcast bench dc: pgbench --standby: {e}");
                return super::EXIT_FAILED;
            }
        };
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
    if json {
        println!(
            "{{\"bench\":\"dc\",\"summary\":{}}}",
            super::stats::json_string(&summary)
        );
    } else {
        println!("{summary}");
    }
    0
}
