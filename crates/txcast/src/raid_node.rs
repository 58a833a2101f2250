//! `txcast node --site S`: one Raid site as a long-lived process (its port, log and threads;
//! a real cluster runs one per host), serving clients in other processes
//! (`txcast_raid::client`), optionally with a load of its own. Ends on SIGINT or SIGTERM,
//! or with `--exit-when-done` once its load has run and it has been quiet for a second.

use crate::{opt, opt_checked as num};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use txcast_port::{ClusterConfig as Naming, Engine};
use txcast_raid::driver::{run_site, ClusterConfig, Load, RunControl};
use txcast_raid::Scale;

pub const USAGE: &str = "\
usage: txcast node --site S [--sites N] [--config FILE] [--instance I] [--data DIR]
                   [--branches N] [--clients N] [--seconds S | --until UNIX_MS]
                   [--vote-timeout MS] [--exit-when-done] [--json]
  runs Raid site S of a cluster of N sites (default 3) until SIGINT/SIGTERM: its log and
  incarnation in DIR (default: the system's temporary directory, txcast-raid-I-S), the
  hosts from the cluster file (default: every site on loopback), clients in other processes
  served at its port; --clients N runs N closed-loop DebitCredit clients of its own for S
  seconds (or until the given Unix time in ms, for sites started apart to stop together);
  --vote-timeout MS (default 500): a site that does not vote or acknowledge within it is
  suspected and left out of the view (the failover time)";

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

pub fn run(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    match serve(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("txcast node: {e}\n{USAGE}");
            2
        }
    }
}

fn serve(args: &[String]) -> Result<i32, String> {
    let valued = [
        "--site",
        "--sites",
        "--config",
        "--instance",
        "--data",
        "--branches",
        "--clients",
        "--seconds",
        "--until",
        "--vote-timeout",
    ];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if valued.contains(&a) {
            i += 2;
        } else if a == "--exit-when-done" || a == "--json" {
            i += 1;
        } else {
            return Err(format!("unknown option {a:?}"));
        }
    }
    let site: u16 = num(args, "--site")?.ok_or("--site is needed")?;
    let sites: u16 = num(args, "--sites")?.unwrap_or(3);
    if sites == 0 || sites > 16 || site >= sites {
        return Err(format!("site {site} of {sites}: sites 1 to 16, site below"));
    }
    let instance: u16 = num(args, "--instance")?.unwrap_or(7);
    let branches: u32 = num(args, "--branches")?.unwrap_or(1);
    let clients: usize = num(args, "--clients")?.unwrap_or(0);
    let json = args.iter().any(|a| a == "--json");
    let data = opt::<PathBuf>(args, "--data")
        .unwrap_or_else(|| std::env::temp_dir().join(format!("txcast-raid-{instance}-{site}")));
    let measure = match (num::<f64>(args, "--seconds")?, num::<u64>(args, "--until")?) {
        (Some(s), _) => Duration::from_secs_f64(s.max(0.0)),
        (None, Some(until)) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            Duration::from_millis(until.saturating_sub(now))
        }
        (None, None) => Duration::ZERO,
    };
    let mut cluster = ClusterConfig::new(sites, Scale::tpcb(branches), data.clone());
    cluster.instance = instance;
    cluster.site.coordinated_max = clients.max(4096);
    if let Some(ms) = num::<u64>(args, "--vote-timeout")? {
        if !(10..=600_000).contains(&ms) {
            return Err("--vote-timeout: 10 to 600000 ms".into());
        }
        cluster.site.vote_timeout = Duration::from_millis(ms);
    }
    if let Some(path) = opt::<String>(args, "--config") {
        let naming = Naming::load(std::path::Path::new(&path)).map_err(|e| e.to_string())?;
        let engine =
            Engine::start(txcast_raid::driver::engine_config(naming)).map_err(|e| e.to_string())?;
        cluster.engine = Some(engine);
    }
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
    let control = Arc::new(RunControl::new());
    control.local.store(1 << site, Ordering::SeqCst);
    control.quiet_ms.store(1000, Ordering::SeqCst);
    control.end_when_quiet.store(
        args.iter().any(|a| a == "--exit-when-done"),
        Ordering::SeqCst,
    );
    let c2 = control.clone();
    std::thread::spawn(move || loop {
        if SIGNALLED.load(Ordering::SeqCst) {
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
        println!(
            "{{\"site\":{},\"incarnation\":{},\"committed\":{},\"seconds\":{:.3},\"p50_us\":{},\"p99_us\":{},\"requests\":{},\"history_rows\":{},\"conserved\":{},\"digest\":\"{:016x}\",\"log_error\":{}}}",
            r.site, r.incarnation, r.committed, r.measured.as_secs_f64(), h.quantile(0.5),
            h.quantile(0.99), r.requests, r.totals.history_rows, r.totals.conserved(), r.digest,
            r.log_error.as_deref().map_or("null".to_string(), |e| format!("{e:?}"))
        );
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
