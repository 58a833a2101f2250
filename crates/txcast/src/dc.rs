//! `txcast dc`: DebitCredit on Raid. With no cluster named, an embedded cluster of `--sites`
//! sites on loopback in this process (each site its own port, log file and threads), a
//! closed-loop load of `--clients` per site, a progress line, and the report: transactions
//! per second, commit latency, retries and give-ups by cause, and the conservation check
//! (sum of accounts = tellers = branches = history, the same copy on every site).

use crate::opt;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;
use txcast_raid::cluster::{run_embedded, DcReport};
use txcast_raid::driver::{ClusterConfig, Load};
use txcast_raid::Scale;

pub const USAGE: &str = "\
usage: txcast dc [--sites N] [--clients N] [--seconds S] [--warmup S] [--branches N]
                 [--data DIR] [--vote-timeout MS] [--no-sync] [--json]
       txcast dc --connect [--sites N] [--instance I] [--config FILE] [--from-site F]
                 [--reply-timeout S] [--branches N] [--clients N] [--seconds S] [--warmup S]
  --connect: the load generator against a running cluster (txcast node --site S ...):
  N transfers in flight per site from this process, then an audit of every site; its
  client of site S is on S's host unless --from-site F puts them all on the host the
  cluster file names for site F (the generator's own, a site number no node uses); a
  request unanswered for S seconds (default 5: its site crashed) counts as unanswered
  an embedded cluster of N sites (default 3) on loopback runs DebitCredit (TPC-B's scale:
  per branch 10 tellers and 100,000 accounts) with N closed-loop clients per site (default
  32) for S seconds (default 5) after a warm-up (default 1); the logs go to DIR (default a
  temporary directory, removed after); --no-sync skips fdatasync (to measure its cost only);
  --vote-timeout MS (default 500): a site silent that long is left out of the view";

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

    pub fn parse(args: &[String]) -> Result<DcOptions, String> {
        let known = [
            "--sites",
            "--clients",
            "--seconds",
            "--warmup",
            "--branches",
            "--data",
            "--instance",
            "--config",
            "--from-site",
            "--reply-timeout",
            "--vote-timeout",
        ];
        let flags = ["--no-sync", "--json", "--connect"];
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            if known.contains(&a) {
                if args.get(i + 1).is_none() {
                    return Err(format!("{a} needs a value"));
                }
                i += 2;
            } else if flags.contains(&a) {
                i += 1;
            } else {
                return Err(format!("unknown option {a:?}"));
            }
        }
        let num = |k: &str| -> Result<Option<f64>, String> {
            match args.iter().rposition(|a| a == k) {
                None => Ok(None),
                Some(i) => args[i + 1]
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(Some)
                    .ok_or_else(|| format!("{k} {:?}: not a number", args[i + 1])),
            }
        };
        let sites = num("--sites")?.unwrap_or(3.0);
        if !(1.0..=16.0).contains(&sites) || sites.fract() != 0.0 {
            return Err("--sites: 1 to 16".into());
        }
        let clients = num("--clients")?.unwrap_or(32.0);
        if !(1.0..=4096.0).contains(&clients) || clients.fract() != 0.0 {
            return Err("--clients: 1 to 4096 per site".into());
        }
        let from_site = match num("--from-site")? {
            None => None,
            Some(f) if f.fract() == 0.0 && f < 256.0 => Some(f as u16),
            Some(_) => return Err("--from-site: a site number 0 to 255".into()),
        };
        let branches = num("--branches")?.unwrap_or(1.0);
        if !(1.0..=100.0).contains(&branches) || branches.fract() != 0.0 {
            return Err("--branches: 1 to 100".into());
        }
        Ok(DcOptions {
            sites: sites as u16,
            clients: clients as usize,
            seconds: num("--seconds")?.unwrap_or(5.0).max(0.1),
            warmup: num("--warmup")?.unwrap_or(1.0),
            branches: branches as u32,
            data: opt::<PathBuf>(args, "--data"),
            sync: !args.iter().any(|a| a == "--no-sync"),
            json: args.iter().any(|a| a == "--json"),
            connect: args.iter().any(|a| a == "--connect"),
            instance: num("--instance")?.map_or(7, |v| v as u16),
            config: opt::<PathBuf>(args, "--config"),
            from_site,
            reply_timeout: num("--reply-timeout")?.unwrap_or(5.0).max(0.1),
            vote_timeout_ms: match num("--vote-timeout")? {
                None => None,
                Some(ms) if (10.0..=600_000.0).contains(&ms) => Some(ms as u64),
                Some(_) => return Err("--vote-timeout: 10 to 600000 ms".into()),
            },
        })
    }
}

/// `txcast demo`: the DebitCredit run with a short load (3 s after a 0.5 s warm-up, 128
/// clients per site) unless options say otherwise.
pub fn demo(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    let mut a = vec![
        "--seconds".to_string(),
        "3".into(),
        "--warmup".into(),
        "0.5".into(),
        "--clients".into(),
        "128".into(),
    ];
    // Later options win: the caller's come after the defaults.
    a.extend(args.iter().cloned());
    match DcOptions::parse(&a) {
        Ok(o) => run_with(&o),
        Err(e) => {
            eprintln!("txcast demo: {e}\n{USAGE}");
            2
        }
    }
}

pub fn run(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    match DcOptions::parse(args) {
        Ok(o) => run_with(&o),
        Err(e) => {
            eprintln!("txcast dc: {e}\n{USAGE}");
            2
        }
    }
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
    let tty = std::io::stderr().is_terminal();
    let mut last = 0u64;
    let result = run_embedded(&cluster, &load, |el, committed| {
        if o.json {
            return;
        }
        let rate = (committed - last.min(committed)) * 2;
        last = committed;
        let line = format!(
            "  {:5.1} s  {committed:>10} committed  ~{rate} txn/s{}",
            el.as_secs_f64(),
            if el < load.warmup { "  (warm-up)" } else { "" }
        );
        if tty {
            eprint!("\r{line}   ");
        } else {
            eprintln!("{line}");
        }
    });
    if tty && !o.json {
        eprintln!();
    }
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
    let h = &r.latency_us;
    if o.json {
        println!(
            "{{\"bench\":\"dc-connect\",\"sites\":{},\"clients_per_site\":{},\"committed\":{},\"tps\":{:.0},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"refused\":{},\"unknown\":{},\"unanswered\":{},\"unreachable\":{},\"conserved\":{},\"identical\":{}}}",
            r.sites, r.clients_per_site, r.committed, r.tps, h.quantile(0.5), h.quantile(0.99),
            h.quantile(0.999), r.refused, r.unknown, r.unanswered, r.unreachable, r.conserved, r.identical
        );
    } else {
        print_rate(r.committed, r.measured, r.tps, h);
        println!(
            "  given up   {:?}; refused {}; unknown {}; unanswered {}; not sent (unreachable) {}",
            r.given_up, r.refused, r.unknown, r.unanswered, r.unreachable
        );
        let t = r.audits.first().map(|a| a.0);
        println!(
            "  audit      {}; {}; site 0: {:?}",
            if r.conserved {
                "money conserved on every site"
            } else {
                "MONEY NOT CONSERVED"
            },
            if r.identical {
                "all copies identical"
            } else {
                "COPIES DIFFER"
            },
            t
        );
    }
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

pub fn print_report(r: &DcReport, json: bool) {
    let h = &r.latency_us;
    if json {
        let given: Vec<String> = r
            .given_up
            .iter()
            .map(|(c, n)| format!("\"{c:?}\":{n}"))
            .collect();
        let retries: Vec<String> = r
            .retries
            .iter()
            .map(|(c, n)| format!("\"{c}\":{n}"))
            .collect();
        println!(
            "{{\"bench\":\"dc\",\"sites\":{},\"clients_per_site\":{},\"seconds\":{:.3},\"committed\":{},\"tps\":{:.0},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"retries\":{{{}}},\"given_up\":{{{}}},\"conserved\":{},\"identical\":{}}}",
            r.sites, r.clients_per_site, r.measured.as_secs_f64(), r.committed, r.tps,
            h.quantile(0.5), h.quantile(0.99), h.quantile(0.999), h.max(),
            retries.join(","), given.join(","), r.conserved, r.identical
        );
        return;
    }
    print_rate(r.committed, r.measured, r.tps, h);
    let retries: Vec<String> = r.retries.iter().map(|(c, n)| format!("{c} {n}")).collect();
    println!("  retries    {}", retries.join(", "));
    if r.given_up.is_empty() {
        println!("  given up   none");
    } else {
        let g: Vec<String> = r
            .given_up
            .iter()
            .map(|(c, n)| format!("{c:?} {n}"))
            .collect();
        println!("  given up   {}", g.join(", "));
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
            format!("all {} copies identical", r.sites)
        } else {
            "COPIES DIFFER".to_string()
        }
    );
}
