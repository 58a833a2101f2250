//! `txcast dc`: DebitCredit on Raid. With no cluster named, an embedded cluster of `--sites`
//! sites on loopback in this process (each site its own port, log file and threads), a
//! closed-loop load of `--clients` per site, a progress line, and the report: transactions
//! per second, commit latency, retries and give-ups by cause, and the conservation check
//! (sum of accounts = tellers = branches = history, the same copy on every site).

use crate::progress::Progress;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use txcast_raid::cluster::{run_embedded, DcReport};
use txcast_raid::driver::{ClusterConfig, Load};
use txcast_raid::Scale;

/// What `txcast dc --help` says after the options.
const AFTER_HELP: &str = "\
An embedded cluster of --sites sites on loopback runs DebitCredit (TPC-B's scale: per branch
10 tellers and 100,000 accounts) with --clients closed-loop clients per site for --seconds
after a --warmup; the logs go to --data (default a temporary directory, removed after).

--connect: the load generator against a running cluster (txcast node --site S ...):
--clients transfers in flight per site from this process, then an audit of every site; its
client of site S is on S's host unless --from-site F puts them all on the host the cluster
file names for site F (the generator's own, a site number no node uses); a request
unanswered for --reply-timeout seconds (its site crashed) counts as unanswered.";

/// The options of `txcast dc` (its load: 32 clients per site, 5 s after 1 s of warm-up).
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct DcArgs {
    /// Closed-loop clients per site (with --connect: transfers in flight per site), 1 to 4096
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub clients: u16,
    /// Seconds of measured load (at least 0.1)
    #[arg(long, default_value_t = 5.0, value_parser = seconds)]
    pub seconds: f64,
    /// Seconds of load before the measurement
    #[arg(long, default_value_t = 1.0, value_parser = seconds)]
    pub warmup: f64,
    #[command(flatten)]
    pub shared: DcShared,
}

/// The options of `txcast demo` (DebitCredit with a short load: 512 clients per site, 3 s
/// after 0.5 s of warm-up), or its `comm` subcommand.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, after_help = AFTER_HELP)]
pub struct DemoArgs {
    #[command(subcommand)]
    pub command: Option<DemoCommand>,
    /// Closed-loop clients per site (with --connect: transfers in flight per site), 1 to 4096
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub clients: u16,
    /// Seconds of measured load (at least 0.1)
    #[arg(long, default_value_t = 3.0, value_parser = seconds)]
    pub seconds: f64,
    /// Seconds of load before the measurement
    #[arg(long, default_value_t = 0.5, value_parser = seconds)]
    pub warmup: f64,
    #[command(flatten)]
    pub shared: DcShared,
}

#[derive(Subcommand, Debug)]
pub enum DemoCommand {
    /// The communication demo: a 3-site cluster in four processes exchanging local, remote
    /// and transaction-multicast traffic
    Comm(crate::demo::CommArgs),
}

/// The options `txcast dc` and `txcast demo` share.
#[derive(Args, Debug)]
pub struct DcShared {
    /// Sites in the cluster, 1 to 16
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub sites: u16,
    /// Branches of the database (TPC-B scale), 1 to 100
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub branches: u32,
    /// Directory of the sites' logs [default: a temporary directory, removed after]
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// A site silent this long (ms, 10 to 600000) is left out of the view [default: 500]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub vote_timeout: Option<u64>,
    /// Skip fdatasync (to measure its cost only)
    #[arg(long)]
    pub no_sync: bool,
    /// The report as JSON on stdout
    #[arg(long)]
    pub json: bool,
    /// Drive a running cluster (txcast node --site S ...) instead of an embedded one
    #[arg(long)]
    pub connect: bool,
    /// --connect: the cluster's instance number
    #[arg(long, default_value_t = 7)]
    pub instance: u16,
    /// --connect: the cluster file naming the sites' hosts
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// --connect: the site (0 to 255) whose host in the cluster file the generator runs on
    #[arg(long, value_name = "F", value_parser = clap::value_parser!(u16).range(0..=255))]
    pub from_site: Option<u16>,
    /// --connect: seconds a request waits for its reply before it counts as unanswered
    /// (at least 0.1)
    #[arg(long, default_value_t = 5.0, value_parser = timeout_seconds)]
    pub reply_timeout: f64,
}

/// A number of seconds: finite and not negative.
pub fn seconds(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{text:?} is not a number of seconds"))
}

/// A timeout in seconds: at least 0.1 (a shorter one would count every request as lost).
fn timeout_seconds(text: &str) -> Result<f64, String> {
    seconds(text)?;
    text.parse::<f64>()
        .ok()
        .filter(|v| *v >= 0.1)
        .ok_or_else(|| format!("{text:?} is below the least timeout, 0.1 s"))
}

/// The options of a run.
pub struct DcOptions {
    pub sites: u16,
    pub clients: usize,
    pub seconds: f64,
    pub warmup: f64,
    pub branches: u32,
    pub data: Option<PathBuf>,
    pub sync: bool,
    pub json: bool,
    /// Drive a running cluster instead of an embedded one.
    pub connect: bool,
    pub instance: u16,
    pub config: Option<PathBuf>,
    /// `--connect`: the site (in the cluster file) whose host the generator runs on.
    pub from_site: Option<u16>,
    /// `--connect`: seconds a request waits for its reply before it counts as unanswered.
    pub reply_timeout: f64,
    /// The sites' vote timeout (suspicion), ms.
    pub vote_timeout_ms: Option<u64>,
}

impl DcOptions {
    /// The clients each site runs (or the generator keeps in flight per site).
    pub fn load(&self) -> Load {
        Load {
            clients: self.clients,
            warmup: Duration::from_secs_f64(self.warmup),
            measure: Duration::from_secs_f64(self.seconds),
            seed: std::process::id() as u64,
        }
    }

    /// The options of a run with this load and the shared options.
    fn new(clients: u16, seconds: f64, warmup: f64, s: &DcShared) -> DcOptions {
        DcOptions {
            sites: s.sites,
            clients: usize::from(clients),
            seconds: seconds.max(0.1),
            warmup,
            branches: s.branches,
            data: s.data.clone(),
            sync: !s.no_sync,
            json: s.json,
            connect: s.connect,
            instance: s.instance,
            config: s.config.clone(),
            from_site: s.from_site,
            reply_timeout: s.reply_timeout,
            vote_timeout_ms: s.vote_timeout,
        }
    }
}

/// `txcast demo`: the DebitCredit run with a short load (its own defaults, see [`DemoArgs`]).
pub fn demo(a: &DemoArgs) -> i32 {
    run_with(&DcOptions::new(a.clients, a.seconds, a.warmup, &a.shared))
}

/// `txcast dc`.
pub fn run(a: &DcArgs) -> i32 {
    run_with(&DcOptions::new(a.clients, a.seconds, a.warmup, &a.shared))
}

/// Runs DebitCredit with these options and prints the report; the exit code says whether
/// the run held its checks.
pub fn run_with(o: &DcOptions) -> i32 {
    if o.connect {
        return connect(o);
    }
    let scale = Scale::tpcb(o.branches);
    let (dir, temporary) = match &o.data {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "txcast-dc-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            )),
            true,
        ),
    };
    let mut cluster = ClusterConfig::new(o.sites, scale, dir.clone());
    cluster.sync = o.sync;
    cluster.site.coordinated_max = o.clients.max(64);
    if let Some(ms) = o.vote_timeout_ms {
        cluster.site.vote_timeout = Duration::from_millis(ms);
    }
    let load = o.load();
    if !o.json {
        println!(
            "DebitCredit on Raid: {} site{} on loopback in this process, {} clients per site, {} branch{} ({} tellers, {} accounts), fdatasync {}, logs in {}",
            o.sites,
            if o.sites == 1 { "" } else { "s" },
            o.clients,
            o.branches,
            if o.branches == 1 { "" } else { "es" },
            scale.tellers(),
            scale.accounts(),
            if o.sync { "on" } else { "OFF" },
            dir.display()
        );
    }
    let progress = Progress::timed("dc", load.warmup + load.measure);
    let mut last = 0u64;
    let result = run_embedded(&cluster, &load, |el, committed| {
        if o.json {
            return;
        }
        let rate = (committed - last.min(committed)) * 2;
        last = committed;
        let warm = if el < load.warmup { "  (warm-up)" } else { "" };
        if progress.is_bar() {
            progress.tick(el, format!("{committed} committed, ~{rate} txn/s{warm}"));
        } else {
            eprintln!(
                "  {:5.1} s  {committed:>10} committed  ~{rate} txn/s{warm}",
                el.as_secs_f64()
            );
        }
    });
    progress.finish();
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    match result {
        Ok(r) => {
            print_report(&r, o.json);
            let failed: Vec<&str> = r
                .per_site
                .iter()
                .filter_map(|s| s.log_error.as_deref())
                .collect();
            if !failed.is_empty() {
                eprintln!("txcast dc: log failed: {}", failed.join("; "));
                return 1;
            }
            if r.conserved && r.identical {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("txcast dc: {e}");
            1
        }
    }
}

/// `--connect`: the load generator against running sites, then their audit.
fn connect(o: &DcOptions) -> i32 {
    let mut cluster = ClusterConfig::new(o.sites, Scale::tpcb(o.branches), PathBuf::new());
    cluster.instance = o.instance;
    if let Some(path) = &o.config {
        let naming = match txcast_port::ClusterConfig::load(path) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("txcast dc: {}: {e}", path.display());
                return 2;
            }
        };
        match txcast_port::Engine::start(txcast_raid::driver::engine_config(naming)) {
            Ok(e) => cluster.engine = Some(e),
            Err(e) => {
                eprintln!("txcast dc: engine: {e}");
                return 1;
            }
        }
    }
    let load = o.load();
    if !o.json {
        println!(
            "DebitCredit against a running cluster: {} sites of instance {}, {} transfers in flight per site",
            o.sites, o.instance, o.clients
        );
    }
    let gen = txcast_raid::remote::Generator {
        from: o.from_site,
        reply_timeout: Duration::from_secs_f64(o.reply_timeout),
    };
    let r = match txcast_raid::remote::run_remote_with(&cluster, gen, &load, |el, n| {
        if !o.json {
            eprintln!("  {:5.1} s  {n:>10} committed", el.as_secs_f64());
        }
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("txcast dc: {e}");
            return 1;
        }
    };
    print_report(&r, o.json);
    if r.conserved && r.identical {
        0
    } else {
        1
    }
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// The report's first two lines: what committed, and its latency.
fn print_rate(committed: u64, measured: Duration, tps: f64, h: &txcast_raid::stats::Histogram) {
    println!(
        "  committed  {committed} in {:.2} s: {tps:.0} transactions/s",
        measured.as_secs_f64()
    );
    println!(
        "  latency    p50 {}  p99 {}  p999 {}  max {}",
        ms(h.quantile(0.5)),
        ms(h.quantile(0.99)),
        ms(h.quantile(0.999)),
        ms(h.max())
    );
}

/// A report as one JSON object (`--json`).
#[derive(serde::Serialize)]
struct ReportJson {
    bench: &'static str,
    sites: u16,
    clients_per_site: usize,
    seconds: f64,
    committed: u64,
    tps: f64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    retries: std::collections::BTreeMap<&'static str, u64>,
    given_up: std::collections::BTreeMap<String, u64>,
    refused: u64,
    unknown: u64,
    unanswered: u64,
    unreachable: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    packets_per_txn: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    records_per_txn: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    syncs_per_txn: Option<f64>,
    conserved: bool,
    identical: bool,
    /// `dc --connect`: every acknowledged transfer found in the copies (`null`: not checked).
    #[serde(skip_serializing_if = "Option::is_none")]
    acknowledged_present: Option<Option<bool>>,
    totals: TotalsJson,
}

/// Site 0's totals, as the JSON report gives them.
#[derive(serde::Serialize)]
struct TotalsJson {
    accounts: i64,
    tellers: i64,
    branches: i64,
    history: i64,
    history_rows: u64,
}

/// The report of a run, embedded (`dc`) or against a running cluster (`dc --connect`: no
/// retries or per-transfer costs, which only the sites know).
pub fn print_report(r: &DcReport, json: bool) {
    let h = &r.latency_us;
    let embedded = !r.per_site.is_empty();
    let t = embedded.then(|| r.traffic());
    if json {
        let j = ReportJson {
            bench: if embedded { "dc" } else { "dc-connect" },
            sites: r.sites,
            clients_per_site: r.clients_per_site,
            seconds: r.measured.as_secs_f64(),
            committed: r.committed,
            tps: r.tps.round(),
            p50_us: h.quantile(0.5),
            p99_us: h.quantile(0.99),
            p999_us: h.quantile(0.999),
            max_us: h.max(),
            retries: r.retries.iter().copied().collect(),
            given_up: r
                .given_up
                .iter()
                .map(|(c, n)| (format!("{c:?}"), *n))
                .collect(),
            refused: r.refused,
            unknown: r.unknown,
            unanswered: r.unanswered,
            unreachable: r.unreachable,
            packets_per_txn: t.map(|t| t.packets),
            records_per_txn: t.map(|t| t.records),
            syncs_per_txn: t.map(|t| t.batches),
            conserved: r.conserved,
            identical: r.identical,
            acknowledged_present: r.accounting.map(|a| a.accounted),
            totals: TotalsJson {
                accounts: r.totals.accounts,
                tellers: r.totals.tellers,
                branches: r.totals.branches,
                history: r.totals.history,
                history_rows: r.totals.history_rows,
            },
        };
        match serde_json::to_string(&j) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("txcast dc: the report as JSON: {e}"),
        }
        return;
    }
    print_rate(r.committed, r.measured, r.tps, h);
    if embedded {
        let retries: Vec<String> = r.retries.iter().map(|(c, n)| format!("{c} {n}")).collect();
        println!("  retries    {}", retries.join(", "));
    }
    let mut g: Vec<String> = r
        .given_up
        .iter()
        .map(|(c, n)| format!("{c:?} {n}"))
        .collect();
    for (what, n) in [
        ("refused", r.refused),
        ("unknown", r.unknown),
        ("unanswered", r.unanswered),
        ("not sent (unreachable)", r.unreachable),
    ] {
        if n > 0 {
            g.push(format!("{what} {n}"));
        }
    }
    println!(
        "  given up   {}",
        if g.is_empty() {
            "none".to_string()
        } else {
            g.join(", ")
        }
    );
    if let Some(c) = t {
        println!(
            "  per txn    {:.2} packets between sites, {:.2} log records, {:.3} log syncs (all sites, warm-up included)",
            c.packets, c.records, c.batches
        );
    }
    let t = r.totals;
    println!(
        "  check      {}: accounts {} tellers {} branches {} history {} ({} rows); {}",
        if r.conserved {
            "money conserved on every site"
        } else {
            "MONEY NOT CONSERVED"
        },
        t.accounts,
        t.tellers,
        t.branches,
        t.history,
        t.history_rows,
        if r.identical {
            format!("all {} copies identical", r.audits.len())
        } else {
            "COPIES DIFFER".to_string()
        }
    );
    if let Some(a) = r.accounting {
        // The accounts' gain against the acknowledged transfers (assumes this generator
        // was the only load).
        println!(
            "  acked      {} transfers acknowledged, {} uncertain: {}",
            a.acknowledged,
            a.uncertain,
            match a.accounted {
                Some(true) => "every acknowledged transfer is in the copies",
                Some(false) => "ACKNOWLEDGED TRANSFERS MISSING (or another load ran)",
                None => "not checked (too many uncertain)",
            }
        );
    }
}
