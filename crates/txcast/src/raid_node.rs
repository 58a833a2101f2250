//! `txcast node --site S`: one Raid site as a long-lived process (its port, log and threads;
//! a real cluster runs one per host), serving clients in other processes
//! (`txcast_raid::client`), optionally with a load of its own. Ends on SIGINT or SIGTERM,
//! or with `--exit-when-done` once its load has run and it has been quiet for a second.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use txcast_port::{ClusterConfig as Naming, Engine};
use txcast_proto::Address;
use txcast_raid::driver::{run_site, ClusterConfig, Load, RunControl};
use txcast_raid::Scale;

/// What `txcast node --help` says after the options.
const AFTER_HELP: &str = "\
txcast node --site S: runs Raid site S of a cluster of --sites sites until SIGINT/SIGTERM:
its log and incarnation in --data, the hosts from the cluster file (default: every site on
loopback), clients in other processes served at its port; --clients N runs N closed-loop
DebitCredit clients of its own for --seconds (or until the Unix time --until in ms, for
sites started apart to stop together); a site that does not vote or acknowledge within
--vote-timeout is suspected and left out of the view (the failover time).

txcast node --at ADDR --control ADDR: hosts extension modules at ADDR (a port served by the
engine thread) and a control endpoint at CONTROL for `txcast program`; runs until killed.
ADDR is instance.site.type.server (e.g. 0.0.13.0).";

/// The options of `txcast node`, in its two forms: a Raid site (`--site`) or a module host
/// (`--at` and `--control`).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct NodeArgs {
    /// Run Raid site S (below --sites)
    #[arg(long, value_name = "S", required_unless_present = "at", conflicts_with_all = ["at", "control"])]
    pub site: Option<u16>,
    /// Sites in the cluster, 1 to 16
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16), conflicts_with = "at")]
    pub sites: u16,
    /// The cluster file naming the sites' hosts [default: every site on loopback]
    #[arg(long, value_name = "FILE", conflicts_with = "at")]
    pub config: Option<PathBuf>,
    /// The cluster's instance number
    #[arg(long, default_value_t = 7, conflicts_with = "at")]
    pub instance: u16,
    /// The site's log and incarnation [default: the system's temporary directory,
    /// txcast-raid-I-S]
    #[arg(long, value_name = "DIR", conflicts_with = "at")]
    pub data: Option<PathBuf>,
    /// Branches of the database (TPC-B scale)
    #[arg(long, default_value_t = 1, conflicts_with = "at")]
    pub branches: u32,
    /// Closed-loop DebitCredit clients of the site's own
    #[arg(long, default_value_t = 0, conflicts_with = "at")]
    pub clients: usize,
    /// Seconds the site's own clients run
    #[arg(long, value_name = "S", conflicts_with_all = ["until", "at"], value_parser = crate::dc::seconds)]
    pub seconds: Option<f64>,
    /// The Unix time (ms) until which the site's own clients run
    #[arg(long, value_name = "UNIX_MS", conflicts_with = "at")]
    pub until: Option<u64>,
    /// A site that does not vote or acknowledge within MS (10 to 600000) is suspected
    /// [default: 500]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=600_000), conflicts_with = "at")]
    pub vote_timeout: Option<u64>,
    /// Exit once the site's load has run and it has been quiet for a second
    #[arg(long, conflicts_with = "at")]
    pub exit_when_done: bool,
    /// The report as JSON on stdout
    #[arg(long, conflicts_with = "at")]
    pub json: bool,
    /// Module host: the address of the modules' port
    #[arg(long, value_name = "ADDR", requires = "control", value_parser = crate::program_cmd::address)]
    pub at: Option<Address>,
    /// Module host: the address of the control endpoint
    #[arg(long, value_name = "ADDR", requires = "at", value_parser = crate::program_cmd::address)]
    pub control: Option<Address>,
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set the flag [`stop_signalled`] reads, instead of ending the
/// process: a node then ends its load and reports.
pub(crate) fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the struct is zeroed then filled as sigaction expects; the handler only
        // stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}

/// SIGINT or SIGTERM came (after [`catch_stop_signals`]).
pub(crate) fn stop_signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

/// How long a node's own load runs: `--seconds S`, or until the Unix time `--until` (ms, for
/// nodes started apart to stop together); zero without either.
pub(crate) fn load_time(seconds: Option<f64>, until: Option<u64>) -> Duration {
    match (seconds, until) {
        (Some(s), _) => Duration::from_secs_f64(s),
        (None, Some(until)) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            Duration::from_millis(until.saturating_sub(now))
        }
        (None, None) => Duration::ZERO,
    }
}

/// `txcast node`: a Raid site with `--site`, otherwise a module host.
pub fn run(args: NodeArgs) -> i32 {
    let (Some(site), None) = (args.site, args.at) else {
        return match (args.at, args.control) {
            (Some(at), Some(control)) => crate::program_cmd::node(at, control),
            // clap requires --site or both of --at and --control.
            _ => crate::usage_error(&["node"], "--site, or --at and --control, are needed"),
        };
    };
    match serve(site, &args) {
        Ok(code) => code,
        Err(e) => crate::usage_error(&["node"], &e),
    }
}

fn serve(site: u16, args: &NodeArgs) -> Result<i32, String> {
    let sites = args.sites;
    if site >= sites {
        return Err(format!("--site {site}: a site below --sites {sites}"));
    }
    let (instance, branches, clients, json) =
        (args.instance, args.branches, args.clients, args.json);
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("txcast-raid-{instance}-{site}")));
    let measure = load_time(args.seconds, args.until);
    let mut cluster = ClusterConfig::new(sites, Scale::tpcb(branches), data.clone());
    cluster.instance = instance;
    cluster.site.coordinated_max = clients.max(4096);
    if let Some(ms) = args.vote_timeout {
        cluster.site.vote_timeout = Duration::from_millis(ms);
    }
    if let Some(path) = &args.config {
        let naming = Naming::load(path).map_err(|e| e.to_string())?;
        let engine =
            Engine::start(txcast_raid::driver::engine_config(naming)).map_err(|e| e.to_string())?;
        cluster.engine = Some(engine);
    }
    catch_stop_signals();
    let control = Arc::new(RunControl::new());
    control.local.store(1 << site, Ordering::SeqCst);
    control.quiet_ms.store(1000, Ordering::SeqCst);
    control
        .end_when_quiet
        .store(args.exit_when_done, Ordering::SeqCst);
    let c2 = control.clone();
    std::thread::spawn(move || loop {
        if stop_signalled() {
            c2.stop.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    if !json {
        println!(
            "raid site {site} of {sites} at {}, log in {}, {clients} clients of its own for {:.1} s",
            cluster.address(site),
            data.display(),
            measure.as_secs_f64()
        );
    }
    let load = Load {
        clients,
        warmup: Duration::ZERO,
        measure,
        seed: site as u64 + 1,
    };
    let r = run_site(&cluster, site, Some(load), control).map_err(|e| e.to_string())?;
    let h = &r.latency_us;
    if json {
        let line = serde_json::json!({
            "site": r.site,
            "incarnation": r.incarnation,
            "committed": r.committed,
            "seconds": (r.measured.as_secs_f64() * 1000.0).round() / 1000.0,
            "p50_us": h.quantile(0.5),
            "p99_us": h.quantile(0.99),
            "requests": r.requests,
            "history_rows": r.totals.history_rows,
            "conserved": r.totals.conserved(),
            "digest": format!("{:016x}", r.digest),
            "log_error": r.log_error,
        });
        println!("{line}");
    } else {
        println!(
            "site {} (incarnation {}): {} committed by its clients, p50 {:.2} ms, p99 {:.2} ms; {} client requests; {} history rows; money {}; digest {:016x}",
            r.site, r.incarnation, r.committed, h.quantile(0.5) as f64 / 1000.0,
            h.quantile(0.99) as f64 / 1000.0, r.requests, r.totals.history_rows,
            if r.totals.conserved() { "conserved" } else { "NOT CONSERVED" }, r.digest
        );
    }
    Ok(if r.totals.conserved() && r.log_error.is_none() {
        0
    } else {
        1
    })
}
