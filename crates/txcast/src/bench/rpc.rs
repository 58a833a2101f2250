//! `txcast bench rpc`: null RPC round trips, local (shared memory) and remote (UDP), with the
//! raw blocking UDP round trip and txcast's own port round trips measured in the same run;
//! and multicast RPC to 1..16 servers completing on the first answer, a majority, or all.
//!
//! Every server is its own process (`__bench-child rpc serve ...`), parked while it waits, as
//! is the calling parent. A null call carries no payload (a 40-byte RPC header); the raw UDP
//! yardstick carries as many bytes each way.

use super::rtt::{find_case, measure_in_processes};
use super::stats::{Report, Samples};
use super::{kill_child, parse_u64, spawn_child, wait_child, EXIT_FAILED};
use crate::progress::Progress;
use std::io;
use std::process::Child;
use std::time::{Duration, Instant};
use txcast_port::{
    Completion, End, Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, Rpc,
    RpcCallError, RpcConfig,
};
use txcast_proto::rpc::RPC_HEADER_BYTES;
use txcast_proto::Address;

/// Away from the tests' instances and the other benchmarks'.
const INSTANCE: u16 = 44;
const CLIENT_TYPE: u16 = 1;
const SERVER_TYPE: u16 = 2;
const NULL: u16 = 1;
const QUIT: u16 = 2;
const CALL_DEADLINE: Duration = Duration::from_secs(2);
const SERVER_LIFETIME_MAX: Duration = Duration::from_secs(600);

// The options of `txcast bench rpc` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The parts to run: null (one server), multicast (n servers)
    #[arg(long, value_delimiter = ',', default_values_t = ["null".to_string(), "multicast".to_string()])]
    pub cases: Vec<String>,
    /// Null calls timed per case
    #[arg(long, default_value_t = 20_000, value_parser = parse_u64)]
    pub iterations: u64,
    /// Calls before the timed ones
    #[arg(long, default_value_t = 2_000, value_parser = parse_u64)]
    pub warmup: u64,
    /// Server counts of the multicast calls (1 to 32 each)
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16], value_parser = parse_u64)]
    pub servers: Vec<u64>,
    /// Multicast calls timed per server count
    #[arg(long, default_value_t = 2_000, value_parser = parse_u64)]
    pub multicast_iterations: u64,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

fn addr(site: u16, server_type: u16) -> Address {
    Address::new(INSTANCE, site, server_type, 0)
}

/// Remote: no engine thread, the calling thread reads the socket (one wake-up per message, as
/// a blocking UDP socket). Local: the engine thread has nothing to do and parks; the caller
/// parks on its ring.
fn open(a: Address, remote: bool) -> io::Result<Rpc> {
    open_with(a, remote, None)
}

/// [`open`], or on an engine with a thread whatever the site, spinning this long before it
/// parks (`engine_spin`), for a server served on it.
fn open_with(a: Address, remote: bool, engine_spin: Option<Duration>) -> io::Result<Rpc> {
    let defaults = EngineConfig::default();
    let engine = Engine::start(EngineConfig {
        idle_spin: engine_spin.unwrap_or(defaults.idle_spin),
        mode: if remote && engine_spin.is_none() {
            EngineMode::Invoker
        } else {
            EngineMode::Thread
        },
        ..defaults
    })?;
    let port = Port::open_on(
        &engine,
        a,
        PortConfig {
            idle: IdleStrategy::Park,
            ..PortConfig::default()
        },
    )
    .map_err(|e| io::Error::other(e.to_string()))?;
    Rpc::new(port, RpcConfig::default()).map_err(|e| io::Error::other(e.to_string()))
}

/// Server processes, killed when dropped unless they finished.
struct Servers {
    children: Vec<Child>,
    addrs: Vec<Address>,
}

impl Servers {
    fn start(sites: &[u16], remote: bool) -> io::Result<Servers> {
        Servers::start_as(sites, if remote { "remote" } else { "local" })
    }

    /// `how`: local, remote, or engine (served on the engine's thread, `Rpc::serve_on_engine`).
    fn start_as(sites: &[u16], how: &str) -> io::Result<Servers> {
        let mut s = Servers {
            children: Vec::new(),
            addrs: Vec::new(),
        };
        for &site in sites {
            s.children.push(spawn_child(&[
                "rpc".into(),
                "serve".into(),
                site.to_string(),
                how.into(),
            ])?);
            s.addrs.push(addr(site, SERVER_TYPE));
        }
        Ok(s)
    }

    /// Waits until every server answers.
    fn ready(&self, rpc: &mut Rpc) -> io::Result<()> {
        let end = Instant::now() + Duration::from_secs(20);
        for &a in &self.addrs {
            loop {
                match rpc.call(a, NULL, &[], Duration::from_millis(200)) {
                    Ok(_) => break,
                    Err(RpcCallError::DeadlinePassed(_)) if Instant::now() < end => {}
                    Err(e) => return Err(io::Error::other(format!("server {a}: {e}"))),
                }
            }
        }
        Ok(())
    }

    fn finish(mut self, rpc: &mut Rpc) -> io::Result<()> {
        let o = rpc
            .multicast(
                &self.addrs,
                QUIT,
                &[],
                Completion::All,
                Duration::from_secs(5),
            )
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut result = if o.end == End::Complete {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "no QUIT answer from {:?}",
                o.missing
            )))
        };
        for c in &mut self.children {
            if let Err(e) = wait_child(c, Duration::from_secs(10)) {
                result = result.and(Err(e));
            }
        }
        self.children.clear();
        result
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.children {
            kill_child(c);
        }
    }
}

/// Null calls to one server: local (same site) or remote (site 1).
fn null_calls(remote: bool, warmup: u64, iterations: u64) -> io::Result<Samples> {
    null_calls_to(
        remote,
        if remote { "remote" } else { "local" },
        warmup,
        iterations,
    )
}

fn null_calls_to(remote: bool, how: &str, warmup: u64, iterations: u64) -> io::Result<Samples> {
    let site = u16::from(remote);
    let servers = Servers::start_as(&[site], how)?;
    let mut rpc = open(addr(0, CLIENT_TYPE), remote)?;
    servers.ready(&mut rpc)?;
    let dest = servers.addrs[0];
    let mut samples = Samples::with_capacity(iterations as usize);
    for i in 0..warmup + iterations {
        let t = Instant::now();
        let out = rpc
            .call(dest, NULL, &[], CALL_DEADLINE)
            .map_err(|e| io::Error::other(format!("call: {e}")))?;
        let elapsed = t.elapsed();
        if !out.is_empty() {
            return Err(io::Error::other("a null call returned bytes"));
        }
        if i >= warmup {
            samples.record(elapsed);
        }
    }
    servers.finish(&mut rpc)?;
    Ok(samples)
}

/// Multicast null calls to `n` remote servers (sites 1..=n), completing per `completion`.
fn multicast_calls(
    rpc: &mut Rpc,
    servers: &Servers,
    completion: Completion,
    warmup: u64,
    iterations: u64,
) -> io::Result<Samples> {
    let mut samples = Samples::with_capacity(iterations as usize);
    for i in 0..warmup + iterations {
        let t = Instant::now();
        let o = rpc
            .multicast(&servers.addrs, NULL, &[], completion, CALL_DEADLINE)
            .map_err(|e| io::Error::other(format!("multicast: {e}")))?;
        let elapsed = t.elapsed();
        if o.end != End::Complete {
            return Err(io::Error::other(format!("no answer from {:?}", o.missing)));
        }
        if i >= warmup {
            samples.record(elapsed);
        }
    }
    Ok(samples)
}

fn completion_name(c: Completion) -> &'static str {
    match c {
        Completion::First => "first",
        Completion::Quorum(_) => "majority",
        Completion::All => "all",
    }
}

/// Adds a latency row for `name`, or reports its failure.
fn record(
    name: &str,
    r: io::Result<Samples>,
    report: &mut Report,
    failures: &mut usize,
    progress: &Progress,
) {
    match r.and_then(|mut s| s.summary().ok_or_else(|| io::Error::other("no samples"))) {
        Ok(s) => {
            progress.println(&format!(
                "  {name}: p50 {:.1} µs p99 {:.1} µs",
                s.p50_ns as f64 / 1e3,
                s.p99_ns as f64 / 1e3
            ));
            report.push_latency(name, 0, s);
        }
        Err(e) => {
            progress.println(&format!("  {name} FAILED: {e}"));
            *failures += 1;
        }
    }
    progress.advance();
}

/// `txcast __bench-child rpc serve <site> <local|remote|engine|engine-park>`: a null server
/// until QUIT (`engine`: handlers on the engine's thread, which spins before it parks;
/// `engine-park`: which parks at once).
pub fn child(args: &[String]) -> io::Result<()> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "rpc serve <site> <local|remote|engine|engine-park>",
        )
    };
    let [what, site, where_] = args else {
        return Err(bad());
    };
    if what != "serve" {
        return Err(bad());
    }
    let site: u16 = site.parse().map_err(|_| bad())?;
    // On the engine: its default spin before it parks, or none (parked between calls).
    let spin = EngineConfig::default().idle_spin;
    let (remote, engine_spin) = match where_.as_str() {
        "remote" => (true, None),
        "local" => (false, None),
        "engine" => (site != 0, Some(spin)),
        "engine-park" => (site != 0, Some(Duration::ZERO)),
        _ => return Err(bad()),
    };
    let on_engine = engine_spin.is_some();
    let mut rpc = open_with(addr(site, SERVER_TYPE), remote, engine_spin)?;
    let quit = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    rpc.register(NULL, |_, _| Ok(Vec::new()));
    let q = quit.clone();
    rpc.register(QUIT, move |_, _| {
        q.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(Vec::new())
    });
    let started = Instant::now();
    if on_engine {
        // Handlers on the engine's thread; this one only waits for QUIT.
        let served = rpc
            .serve_on_engine()
            .map_err(|(e, _)| io::Error::other(e.to_string()))?;
        while !quit.load(std::sync::atomic::Ordering::SeqCst) {
            if started.elapsed() > SERVER_LIFETIME_MAX {
                return Err(io::Error::other("no QUIT"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Answer copies of the QUIT whose answer was lost.
        std::thread::sleep(Duration::from_millis(100));
        drop(served);
        return Ok(());
    }
    while !quit.load(std::sync::atomic::Ordering::SeqCst) {
        if started.elapsed() > SERVER_LIFETIME_MAX {
            return Err(io::Error::other("no QUIT"));
        }
        rpc.serve(Duration::from_millis(200))
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    // Answer copies of the QUIT whose answer was lost.
    rpc.serve(Duration::from_millis(100))
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(())
}

pub fn run(opts: &Args) -> i32 {
    let usage = |message: String| crate::usage_error(&["bench", "rpc"], &message);
    if opts.servers.iter().any(|&n| n == 0 || n > 32) {
        return usage("--servers: each 1..=32".into());
    }
    if let Some(c) = opts
        .cases
        .iter()
        .find(|c| *c != "null" && *c != "multicast")
    {
        return usage(format!(
            "--cases: unknown case {c:?} (known: null multicast)"
        ));
    }
    let (cases, server_counts) = (opts.cases.clone(), opts.servers.clone());
    let (iterations, warmup, mc_iterations) =
        (opts.iterations, opts.warmup, opts.multicast_iterations);
    let mut report = Report::new("rpc", &["raw-udp-blocking"]);
    let mut failures = 0;
    // Points: the three yardsticks, six null-call cases, three completions per server count.
    let nulls = if cases.iter().any(|c| c == "null") {
        6
    } else {
        0
    };
    let multicasts = if cases.iter().any(|c| c == "multicast") {
        3 * server_counts.len() as u64
    } else {
        0
    };
    let progress = Progress::points("rpc", 3 + nulls + multicasts);
    // The yardsticks: raw UDP, and txcast's port round trips under the same RPC.
    for case in [
        "raw-udp-blocking",
        "txcast-local-park",
        "txcast-remote-park",
    ] {
        let c = find_case(case).expect("case exists");
        match measure_in_processes(c, RPC_HEADER_BYTES, warmup, iterations) {
            Ok(s) => {
                progress.println(&format!("  {case}: p50 {:.1} µs", s.p50_ns as f64 / 1e3));
                report.push_latency(case, 0, s);
            }
            Err(e) => {
                progress.println(&format!("  {case} FAILED: {e}"));
                failures += 1;
            }
        }
        progress.advance();
    }
    if cases.iter().any(|c| c == "null") {
        record(
            "rpc-null-local-park",
            null_calls(false, warmup, iterations),
            &mut report,
            &mut failures,
            &progress,
        );
        record(
            "rpc-null-remote-park",
            null_calls(true, warmup, iterations),
            &mut report,
            &mut failures,
            &progress,
        );
        // The servers' handlers on their engine's thread (Rpc::serve_on_engine): the engine
        // spinning 50 µs before it parks (its default), and parked between calls.
        for how in ["engine", "engine-park"] {
            for remote in [false, true] {
                let name = format!("rpc-null-{}-{how}", if remote { "remote" } else { "local" });
                let s = null_calls_to(remote, how, warmup, iterations);
                record(&name, s, &mut report, &mut failures, &progress);
            }
        }
    }
    if cases.iter().any(|c| c == "multicast") {
        for &n in &server_counts {
            let sites: Vec<u16> = (1..=n as u16).collect();
            let r = (|| -> io::Result<()> {
                let servers = Servers::start(&sites, true)?;
                let mut rpc = open(addr(0, CLIENT_TYPE), true)?;
                servers.ready(&mut rpc)?;
                for completion in [
                    Completion::First,
                    Completion::Quorum(n as usize / 2 + 1),
                    Completion::All,
                ] {
                    let name = format!("rpc-multicast-{}-n{n}", completion_name(completion));
                    let s = multicast_calls(
                        &mut rpc,
                        &servers,
                        completion,
                        mc_iterations / 10,
                        mc_iterations,
                    );
                    record(&name, s, &mut report, &mut failures, &progress);
                }
                servers.finish(&mut rpc)
            })();
            if let Err(e) = r {
                progress.println(&format!("  multicast n={n} FAILED: {e}"));
                failures += 1;
            }
        }
    }
    progress.finish();
    let heading = format!(
        "rpc: null calls ({iterations} timed after {warmup}), every server a parked process; \
         local = same site (shared memory), remote = site 1 (UDP); multicast = null calls to \
         n remote servers ({mc_iterations} each); yardsticks at 40 bytes (latencies in µs)\n"
    );
    if opts.json {
        eprint!("{heading}{}", report.table());
        print!("{}", report.json_lines());
    } else {
        print!("{heading}{}", report.table());
    }
    if failures > 0 {
        EXIT_FAILED
    } else {
        0
    }
}
