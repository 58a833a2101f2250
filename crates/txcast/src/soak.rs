//! `txcast soak`: a long run of a group and an RPC pair under injected loss, sampling each
//! process's memory and open descriptors, which must stay flat (issue 23).
//!
//! The run starts child processes of this binary: `--members` group members
//! (`__soak-member`, each multicasting at `--rate` messages/s and delivering everything), an
//! RPC server (`__soak-server`, TICKET calls, with its execution log) and an RPC client
//! (`__soak-client`, one call at a time with a deadline). Every process's engine drops
//! `--loss` of its outgoing remote packets. The children report their counts on stdout once a
//! second; this process reads them and, every `--sample-every` seconds, each child's VmRSS
//! and RssAnon (`/proc/PID/status`) and descriptor count (`/proc/PID/fd`), and prints one line
//! (a JSON line with `--json`).
//!
//! At the end it judges: for each process, the mean of the last quarter's samples against the
//! mean of the second quarter's (the first quarter is warm-up). Descriptors must not grow at
//! all; RSS may grow at most [`RSS_GROWTH_KIB_MAX`] or [`RSS_GROWTH_PERCENT_MAX`] of the
//! second quarter's mean, whichever is larger. The group must still deliver in the last
//! quarter, every member must deliver the same sequence (a running hash compared at every
//! [`CHECK_EVERY`] deliveries), no RPC call may pass its deadline, be answered wrongly, or run
//! twice (the server's execution log), and no child may end early. Exit 0 if all hold, 1 if
//! not, 2 on a bad command line.
//!
//! Children are stopped by closing their stdin (they leave cleanly: the client ends the server
//! with a QUIT call), killed if they have not ended 5 s later, and killed by the kernel if this
//! process dies (`PR_SET_PDEATHSIG`). They run in their own process group, so a Ctrl-C at the
//! terminal reaches this process only, which then stops them as at the end of a run.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, GroupCallError, GroupRecord, GroupSpec,
    IdleStrategy, Port, PortConfig, Rpc, RpcCallError, RpcConfig,
};
use txcast_proto::group::{GroupConfig, Method, MinMembers};
use txcast_proto::order::{OrderConfig, Protocol};
use txcast_proto::vsync::VsConfig;
use txcast_proto::Address;

use crate::progress::Progress;

/// Absolute RSS growth allowed between the second and last quarters' means. A leak of the
/// smallest heap chunk (32 bytes with glibc) per delivery, at the default 3 members × 20
/// messages/s, adds about 1.7 MiB between the two quarters' midpoints of a 30-minute run
/// (60/s × 900 s × 32 B), above this bound; the allocator's own drift (arenas, trimming) and
/// pages of the rings touched late stay well under it.
pub const RSS_GROWTH_KIB_MAX: u64 = 1024;
/// Relative RSS growth allowed (of the second quarter's mean), for processes larger than
/// 20 MiB, where 1 MiB is within the allocator's noise.
pub const RSS_GROWTH_PERCENT_MAX: f64 = 5.0;
/// A member reports the running hash of its delivered sequence every this many deliveries.
pub const CHECK_EVERY: u64 = 500;
/// Checks awaiting the other members' hashes kept at most (a member far behind is reported by
/// its delivery count, not by this table).
const CHECKS_PENDING_MAX: usize = 10_000;
/// How long a stopped child has to end before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The group members' server type, the client's, and the RPC server's.
const MEMBER_TYPE: u16 = 2;
const CLIENT_TYPE: u16 = 1;
const SERVER_TYPE: u16 = 4;
/// The server's TICKET and QUIT request types (as `txcast __rpc-server`'s).
const TICKET: u16 = 4;
const QUIT: u16 = 9;
/// A group message's length: small, like a transaction's control messages.
const PAYLOAD_BYTES: usize = 64;

/// The options of `txcast soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Length of the run in minutes
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    /// Length of the run in seconds instead (short runs)
    #[arg(long, conflicts_with = "minutes")]
    seconds: Option<u64>,
    /// Fraction of outgoing remote packets every process drops
    #[arg(long, default_value_t = 0.05)]
    loss: f64,
    /// Group members (processes)
    #[arg(long, default_value_t = 3)]
    members: u16,
    /// The ordering protocol: sequencer, totem, total, dynseq or dynord
    #[arg(long, default_value = "sequencer")]
    protocol: String,
    /// Seconds between samples
    #[arg(long, default_value_t = 10)]
    sample_every: u64,
    /// Messages per second each member multicasts
    #[arg(long, default_value_t = 20)]
    rate: u32,
    /// RPC calls per second the client makes (one at a time)
    #[arg(long, default_value_t = 20)]
    calls: u32,
    /// Each call's deadline (ms)
    #[arg(long, default_value_t = 3000)]
    deadline_ms: u64,
    /// The instance of every address of the run (one not used by another run on this host;
    /// the benchmarks use 35 to 44)
    #[arg(long, default_value_t = 52)]
    instance: u16,
    /// JSON lines on stdout (one per sample, then the verdict) instead of the text lines
    #[arg(long)]
    json: bool,
}

/// Set by SIGINT or SIGTERM: the run stops early (and fails) after stopping its children.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn run(args: &SoakArgs) -> i32 {
    let length = match args.seconds {
        Some(s) => Duration::from_secs(s),
        None => Duration::from_secs(args.minutes * 60),
    };
    let refuse = |m: &str| crate::usage_error(&["soak"], m);
    if !(0.0..0.5).contains(&args.loss) {
        return refuse("--loss must be at least 0 and below 0.5");
    }
    if !(2..=32).contains(&args.members) {
        return refuse("--members must be 2 to 32");
    }
    if Protocol::from_name(&args.protocol).is_none() && args.protocol != "sequencer" {
        return refuse("--protocol: sequencer, totem, total, dynseq or dynord");
    }
    if args.sample_every == 0 || args.rate == 0 || args.calls == 0 {
        return refuse("--sample-every, --rate and --calls must be at least 1");
    }
    if length < Duration::from_secs(4 * args.sample_every) {
        return refuse("the run must last at least four samples (--sample-every)");
    }
    if ClusterConfig::default()
        .udp_port(Address::new(args.instance, 0, 15, 63))
        .is_err()
    {
        return refuse("--instance too large for the port range");
    }
    let handler: extern "C" fn(libc::c_int) = on_signal;
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
    let dir = std::env::temp_dir().join(format!("txcast-soak-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("txcast soak: {}: {e}", dir.display());
        return 1;
    }
    let mut children = Vec::new();
    let r = soak(args, length, &dir, &mut children);
    // Whatever happened, every child is stopped and reaped, and what they left removed.
    let stop_failures = stop_all(&mut children);
    let leftovers = remove_segments(args.instance);
    let exec = read_exec_log(&dir.join("exec.log"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = match r {
        Ok(rep) => rep,
        Err(e) => {
            eprintln!("txcast soak: {e}");
            return 1;
        }
    };
    report.finish(stop_failures, leftovers, exec);
    report.print(args.json);
    if report.reasons.is_empty() {
        0
    } else {
        1
    }
}

/// One child process: what it is, its handles, and what it reported.
struct Kid {
    name: String,
    child: Child,
    /// Dropped to tell the child to stop.
    stdin: Option<ChildStdin>,
    state: Arc<Mutex<Reported>>,
    /// Its samples: (VmRSS KiB, RssAnon KiB, descriptors).
    samples: Vec<(u64, u64, u64)>,
    /// How it ended, once reaped.
    status: Option<std::process::ExitStatus>,
}

/// What a child last said on stdout.
#[derive(Default)]
struct Reported {
    /// The last `status` line's numbers, by name.
    counts: BTreeMap<String, u64>,
    /// The lines that were not `status` lines (the member's `check`s, the server's `ready`
    /// and `executed`), not yet taken.
    lines: Vec<String>,
}

fn spawn(name: &str, args: &[String]) -> Result<Kid, String> {
    let mut cmd = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // Its own process group: a terminal's Ctrl-C reaches the parent alone, which
            // stops the children in order.
            libc::setpgid(0, 0);
            // Killed if the parent dies without stopping it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("{name}: {e}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let stdin = child.stdin.take();
    let state = Arc::new(Mutex::new(Reported::default()));
    let s = state.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut st = s.lock().expect("report lock");
            match line.strip_prefix("status ") {
                Some(rest) => {
                    for kv in rest.split_whitespace() {
                        if let Some((k, v)) = kv.split_once('=') {
                            if let Ok(v) = v.parse() {
                                st.counts.insert(k.to_string(), v);
                            }
                        }
                    }
                }
                None => st.lines.push(line),
            }
        }
    });
    Ok(Kid {
        name: name.to_string(),
        child,
        stdin,
        state,
        samples: Vec::new(),
        status: None,
    })
}

impl Kid {
    fn count(&self, key: &str) -> u64 {
        let st = self.state.lock().expect("report lock");
        st.counts.get(key).copied().unwrap_or(0)
    }

    fn take_lines(&self) -> Vec<String> {
        std::mem::take(&mut self.state.lock().expect("report lock").lines)
    }

    /// Waits up to `wait` for a line starting with `prefix`; returns it.
    fn wait_line(&mut self, prefix: &str, wait: Duration) -> Result<String, String> {
        let end = Instant::now() + wait;
        loop {
            {
                let mut st = self.state.lock().expect("report lock");
                if let Some(i) = st.lines.iter().position(|l| l.starts_with(prefix)) {
                    return Ok(st.lines.remove(i));
                }
            }
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
                return Err(format!(
                    "{} ended ({s}) before saying {prefix:?}",
                    self.name
                ));
            }
            if Instant::now() > end || INTERRUPTED.load(Ordering::SeqCst) {
                return Err(format!("{} did not say {prefix:?} in time", self.name));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// VmRSS and RssAnon (KiB) of a process, from `/proc/PID/status`.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("RssAnon:")?))
}

/// Open descriptors of a process: the entries of `/proc/PID/fd`.
fn fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// What a run measured and judged.
struct Report {
    length: Duration,
    samples: usize,
    /// Per process: name, pid, Q2 and Q4 means of (RSS, RssAnon, fds), first and last sample.
    procs: Vec<ProcFigures>,
    delivered: Vec<u64>,
    /// Packets each member's engine, then the client's, dropped by loss injection.
    lost: Vec<u64>,
    calls: u64,
    answered: u64,
    late: u64,
    wrong: u64,
    executed: u64,
    executed_twice: u64,
    checks_compared: u64,
    reasons: Vec<String>,
}

struct ProcFigures {
    name: String,
    pid: u32,
    first: (u64, u64, u64),
    last: (u64, u64, u64),
    q2: (f64, f64, f64),
    q4: (f64, f64, f64),
}

/// The mean of each field over `s`.
fn mean(s: &[(u64, u64, u64)]) -> (f64, f64, f64) {
    let n = s.len().max(1) as f64;
    let sum = s.iter().fold((0.0, 0.0, 0.0), |a, x| {
        (a.0 + x.0 as f64, a.1 + x.1 as f64, a.2 + x.2 as f64)
    });
    (sum.0 / n, sum.1 / n, sum.2 / n)
}

/// The run proper: starts the children, samples until the end, and gathers the figures
/// (the judging of the children's ends and the execution log is [`Report::finish`]).
fn soak(
    args: &SoakArgs,
    length: Duration,
    dir: &Path,
    kids: &mut Vec<Kid>,
) -> Result<Report, String> {
    let i = args.instance.to_string();
    let loss = args.loss.to_string();
    let exec_log = dir.join("exec.log");
    let mut server = spawn(
        "server",
        &[
            "__soak-server".into(),
            "--instance".into(),
            i.clone(),
            "--site".into(),
            "1".into(),
            "--loss".into(),
            loss.clone(),
            "--exec-log".into(),
            exec_log.display().to_string(),
        ],
    )?;
    let ready = server.wait_line("ready", Duration::from_secs(10));
    kids.push(server);
    ready?;
    for site in 0..args.members {
        let kid = spawn(
            &format!("member{site}"),
            &[
                "__soak-member".into(),
                "--instance".into(),
                i.clone(),
                "--site".into(),
                site.to_string(),
                "--members".into(),
                args.members.to_string(),
                "--protocol".into(),
                args.protocol.clone(),
                "--loss".into(),
                loss.clone(),
                "--rate".into(),
                args.rate.to_string(),
            ],
        )?;
        kids.push(kid);
        if site == 0 {
            // The others join through site 0: let it create the group first.
            let r = kids
                .last_mut()
                .expect("pushed")
                .wait_line("created", Duration::from_secs(10));
            r?;
        }
    }
    kids.push(spawn(
        "client",
        &[
            "__soak-client".into(),
            "--instance".into(),
            i.clone(),
            "--server-site".into(),
            "1".into(),
            "--loss".into(),
            loss,
            "--calls".into(),
            args.calls.to_string(),
            "--deadline-ms".into(),
            args.deadline_ms.to_string(),
        ],
    )?);
    let members = args.members as usize;
    let progress = Progress::timed("soak", length);
    let started = Instant::now();
    let every = Duration::from_secs(args.sample_every);
    let mut next = started + every;
    // count → (hash, members that reported it)
    let mut checks: HashMap<u64, (u64, usize)> = HashMap::new();
    let mut checks_compared = 0u64;
    let mut reasons = Vec::new();
    let mut delivered_at: Vec<Vec<u64>> = vec![Vec::new(); members];
    let mut samples = 0usize;
    'run: while started.elapsed() < length {
        // Sleep to the next sample in short steps, watching for a signal and for children
        // that end.
        while Instant::now() < next {
            if INTERRUPTED.load(Ordering::SeqCst) {
                reasons.push("interrupted".to_string());
                break 'run;
            }
            for k in kids.iter_mut() {
                if let Ok(Some(s)) = k.child.try_wait() {
                    k.status = Some(s);
                    reasons.push(format!("{} ended early ({s})", k.name));
                    break 'run;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        next += every;
        let t = started.elapsed();
        samples += 1;
        for (m, k) in kids.iter_mut().enumerate() {
            let pid = k.child.id();
            let (rss, anon) = rss_kib(pid).unwrap_or((0, 0));
            k.samples.push((rss, anon, fds(pid).unwrap_or(0)));
            if let Some(d) = m.checked_sub(1).and_then(|m| delivered_at.get_mut(m)) {
                d.push(k.count("delivered"));
            }
        }
        // Compare the members' running hashes at each count all of them reached.
        for k in kids.iter().filter(|k| k.name.starts_with("member")) {
            for line in k.take_lines() {
                let mut w = line.split_whitespace().skip(1);
                let (Some(Ok(n)), Some(Ok(h))) = (
                    w.next().map(str::parse::<u64>),
                    w.next().map(|h| u64::from_str_radix(h, 16)),
                ) else {
                    continue;
                };
                let e = checks.entry(n).or_insert((h, 0));
                if e.0 != h {
                    reasons.push(format!(
                        "{} delivered another sequence than a member before it: hashes differ at \
                         delivery {n}",
                        k.name
                    ));
                    break 'run;
                }
                e.1 += 1;
                if e.1 == members {
                    checks.remove(&n);
                    checks_compared += 1;
                }
            }
        }
        if checks.len() > CHECKS_PENDING_MAX {
            reasons.push("a member fell far behind the others".into());
            break 'run;
        }
        print_sample(args.json, &progress, t, kids);
        progress.tick(t, sample_note(kids));
    }
    progress.finish();
    let client = kids.last().expect("client");
    let mut report = Report {
        length: started.elapsed(),
        samples,
        procs: Vec::new(),
        delivered: kids[1..=members]
            .iter()
            .map(|k| k.count("delivered"))
            .collect(),
        lost: kids[1..].iter().map(|k| k.count("lost")).collect(),
        calls: client.count("calls"),
        answered: client.count("answered"),
        late: client.count("late"),
        wrong: client.count("wrong"),
        executed: 0,
        executed_twice: 0,
        checks_compared,
        reasons,
    };
    if samples < 4 {
        report
            .reasons
            .push(format!("{samples} samples: too few to judge"));
        return Ok(report);
    }
    let (q2, q4) = (samples / 4..samples / 2, samples * 3 / 4..samples);
    for k in kids.iter() {
        let f = ProcFigures {
            name: k.name.clone(),
            pid: k.child.id(),
            first: k.samples[0],
            last: k.samples[samples - 1],
            q2: mean(&k.samples[q2.clone()]),
            q4: mean(&k.samples[q4.clone()]),
        };
        let rss_growth = f.q4.0 - f.q2.0;
        let allowed = (RSS_GROWTH_KIB_MAX as f64).max(f.q2.0 * RSS_GROWTH_PERCENT_MAX / 100.0);
        if rss_growth > allowed {
            report.reasons.push(format!(
                "{}: RSS grew {rss_growth:.0} KiB ({:.1} %) from the second quarter to the last, \
                 more than {allowed:.0} KiB",
                f.name,
                100.0 * rss_growth / f.q2.0.max(1.0)
            ));
        }
        if f.q4.2 > f.q2.2 {
            report.reasons.push(format!(
                "{}: open descriptors grew from {:.1} to {:.1} on average",
                f.name, f.q2.2, f.q4.2
            ));
        }
        report.procs.push(f);
    }
    for (m, d) in delivered_at.iter().enumerate() {
        if d[samples - 1] <= d[samples * 3 / 4 - 1] {
            report.reasons.push(format!(
                "member{m} delivered nothing in the last quarter ({} in all)",
                d[samples - 1]
            ));
        }
    }
    // Loss was injected where it was asked for: into every member's group packets and
    // the client's calls.
    if args.loss > 0.0 && report.lost.contains(&0) {
        report.reasons.push(format!(
            "no packet dropped by loss injection in some process: {:?}",
            report.lost
        ));
    }
    if checks_compared == 0 {
        report
            .reasons
            .push("no delivery count was reached by every member: order not compared".into());
    }
    Ok(report)
}

/// A sample's line: per process its RSS and descriptors, and the counts so far.
fn print_sample(json: bool, progress: &Progress, t: Duration, kids: &[Kid]) {
    let line = if json {
        let procs: Vec<serde_json::Value> = kids
            .iter()
            .map(|k| {
                let (rss, anon, fds) = *k.samples.last().expect("sampled");
                let mut v = serde_json::json!({
                    "name": k.name, "pid": k.child.id(),
                    "rss_kib": rss, "rss_anon_kib": anon, "fds": fds,
                });
                let st = k.state.lock().expect("report lock");
                for (key, n) in &st.counts {
                    v[key] = serde_json::json!(n);
                }
                v
            })
            .collect();
        serde_json::json!({"sample": {"t_s": t.as_secs(), "procs": procs}}).to_string()
    } else {
        let mut s = format!("{:>6} s", t.as_secs());
        for k in kids {
            let (rss, _, fds) = *k.samples.last().expect("sampled");
            s += &format!(" | {} {:.1} MiB {fds} fds", k.name, rss as f64 / 1024.0);
            if k.name.starts_with("member") {
                s += &format!(" {} dlv", k.count("delivered"));
            } else if k.name == "client" {
                s += &format!(" {} calls {} late", k.count("answered"), k.count("late"));
            }
        }
        s
    };
    progress.suspend(|| {
        println!("{line}");
        let _ = std::io::stdout().flush();
    });
}

/// The bar's message: deliveries and calls so far.
fn sample_note(kids: &[Kid]) -> String {
    let delivered: u64 = kids
        .iter()
        .filter(|k| k.name.starts_with("member"))
        .map(|k| k.count("delivered"))
        .sum();
    let client = kids.last().expect("client");
    format!(
        "{delivered} delivered, {} calls, {} late",
        client.count("answered"),
        client.count("late")
    )
}

/// Stops every child: closes the stdin of the members and the client (the client then ends
/// the server with a QUIT call), waits [`STOP_GRACE`] for all, kills those left. Returns the
/// children that had to be killed or ended badly.
fn stop_all(kids: &mut [Kid]) -> Vec<String> {
    for k in kids.iter_mut() {
        k.stdin = None;
    }
    let end = Instant::now() + STOP_GRACE;
    let mut failures = Vec::new();
    for k in kids.iter_mut() {
        loop {
            match k.child.try_wait() {
                Ok(Some(s)) => {
                    if k.status.is_none() {
                        k.status = Some(s);
                        if !s.success() {
                            failures.push(format!("{} ended with {s}", k.name));
                        }
                    }
                    break;
                }
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = k.child.kill();
                    let s = k.child.wait().ok();
                    k.status = s;
                    failures.push(format!("{} did not stop in time: killed", k.name));
                    break;
                }
            }
        }
    }
    failures
}

/// Removes the shared-memory segments of `instance` left in this user's directory (the
/// children's, if one was killed); returns how many there were.
fn remove_segments(instance: u16) -> usize {
    let dir = ClusterConfig::default().segment_dir();
    let prefix = format!("{instance}.");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

impl Report {
    /// Adds what is known once the children are gone: how they ended, what the server's
    /// execution log says, segments left behind.
    fn finish(
        &mut self,
        stop_failures: Vec<String>,
        leftovers: usize,
        exec: Result<(u64, u64), String>,
    ) {
        self.reasons.extend(stop_failures);
        if leftovers > 0 {
            self.reasons
                .push(format!("{leftovers} shared-memory segments left behind"));
        }
        match exec {
            Ok((n, twice)) => (self.executed, self.executed_twice) = (n, twice),
            Err(e) => self.reasons.push(format!("execution log: {e}")),
        }
        if self.late > 0 {
            self.reasons.push(format!(
                "{} RPC calls passed their deadline unanswered",
                self.late
            ));
        }
        if self.wrong > 0 {
            self.reasons
                .push(format!("{} RPC calls answered wrongly", self.wrong));
        }
        if self.answered == 0 {
            self.reasons.push("no RPC call answered".into());
        }
        if self.executed_twice > 0 {
            self.reasons.push(format!(
                "{} RPC calls executed more than once",
                self.executed_twice
            ));
        }
        if self.executed < self.answered {
            self.reasons.push(format!(
                "{} calls answered but only {} executions logged",
                self.answered, self.executed
            ));
        }
    }

    fn print(&self, json: bool) {
        let verdict = if self.reasons.is_empty() {
            "flat"
        } else {
            "fail"
        };
        if json {
            let procs: Vec<serde_json::Value> = self
                .procs
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "name": p.name, "pid": p.pid,
                        "rss_kib_first": p.first.0, "rss_kib_last": p.last.0,
                        "rss_kib_q2": p.q2.0.round(), "rss_kib_q4": p.q4.0.round(),
                        "rss_growth_kib": (p.q4.0 - p.q2.0).round(),
                        "rss_growth_percent": 100.0 * (p.q4.0 - p.q2.0) / p.q2.0.max(1.0),
                        "rss_anon_kib_q2": p.q2.1.round(), "rss_anon_kib_q4": p.q4.1.round(),
                        "fds_first": p.first.2, "fds_last": p.last.2,
                        "fds_q2": p.q2.2, "fds_q4": p.q4.2,
                    })
                })
                .collect();
            let v = serde_json::json!({"verdict": {
                "result": verdict,
                "seconds": self.length.as_secs(),
                "samples": self.samples,
                "procs": procs,
                "delivered": self.delivered,
                "lost": self.lost,
                "order_checks": self.checks_compared,
                "calls": self.calls, "answered": self.answered, "late": self.late,
                "wrong": self.wrong, "executed": self.executed,
                "executed_twice": self.executed_twice,
                "rss_growth_kib_max": RSS_GROWTH_KIB_MAX,
                "rss_growth_percent_max": RSS_GROWTH_PERCENT_MAX,
                "reasons": self.reasons,
            }});
            println!("{v}");
            return;
        }
        println!(
            "\n{:<8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>7}",
            "process", "RSS first", "RSS Q2", "RSS Q4", "growth", "growth %", "fds Q2", "fds Q4"
        );
        for p in &self.procs {
            println!(
                "{:<8} {:>7} KiB {:>6.0} KiB {:>6.0} KiB {:>6.0} KiB {:>8.2}% {:>7.1} {:>7.1}",
                p.name,
                p.first.0,
                p.q2.0,
                p.q4.0,
                p.q4.0 - p.q2.0,
                100.0 * (p.q4.0 - p.q2.0) / p.q2.0.max(1.0),
                p.q2.2,
                p.q4.2
            );
        }
        println!(
            "{} s, {} samples; delivered per member {:?} ({} order checks); packets dropped by \
             loss injection per member and client {:?}; calls {} answered, {} late, {} wrong, \
             {} executions, {} executed twice",
            self.length.as_secs(),
            self.samples,
            self.delivered,
            self.checks_compared,
            self.lost,
            self.answered,
            self.late,
            self.wrong,
            self.executed,
            self.executed_twice
        );
        println!(
            "bound: descriptors must not grow; RSS may grow {RSS_GROWTH_KIB_MAX} KiB or \
             {RSS_GROWTH_PERCENT_MAX} %, whichever is more"
        );
        println!("verdict: {verdict}");
        for r in &self.reasons {
            println!("  {r}");
        }
    }
}

/// Reads the server's execution log: `<client> <payload hex>` per execution.
/// Returns (executions, executions of a payload already executed).
fn read_exec_log(path: &Path) -> Result<(u64, u64), String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut seen = std::collections::HashSet::new();
    let (mut n, mut twice) = (0, 0);
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (Some(client), Some(payload)) = (w.next(), w.next()) else {
            continue;
        };
        n += 1;
        if !seen.insert((client.to_string(), payload.to_string())) {
            twice += 1;
        }
    }
    Ok((n, twice))
}

// ---------------------------------------------------------------------------------------
// The children.

/// Sets a flag once stdin ends: the parent closed it to stop this process.
fn watch_stdin() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        s.store(true, Ordering::SeqCst);
    });
    stop
}

fn hash_into(h: u64, bytes: &[u8]) -> u64 {
    let mut h = txcast_proto::fnv::Fnv64(h);
    h.add(bytes);
    h.0
}

/// The options of `txcast __soak-member`.
#[derive(clap::Args, Debug)]
pub struct MemberArgs {
    #[arg(long)]
    instance: u16,
    /// Site 0 creates the group, the others join through it
    #[arg(long)]
    site: u16,
    /// Members the group waits for before the sending starts
    #[arg(long)]
    members: usize,
    #[arg(long, default_value = "sequencer")]
    protocol: String,
    /// Fraction of outgoing remote packets dropped
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Messages per second this member multicasts
    #[arg(long, default_value_t = 20)]
    rate: u32,
}

/// A group member of a soak: multicasts `--rate` messages a second and delivers everything
/// until its stdin closes, then leaves. Prints `created` (site 0, once the group exists),
/// `status delivered=N sent=N refused=N views=N lost=N` (`lost`: packets its engine's loss
/// injection dropped) every second, and `check N HASH` at every
/// [`CHECK_EVERY`]th delivered message (HASH: of the payloads delivered so far, in order).
pub fn member(args: &MemberArgs) -> i32 {
    crate::exit_code(
        format_args!("txcast __soak-member (site {})", args.site),
        run_member(args),
    )
}

fn group_spec(protocol: &str) -> Result<GroupSpec, String> {
    Ok(match protocol {
        "sequencer" => GroupConfig {
            group: 12,
            resilience: 1,
            method: Method::BySize {
                bb_from_bytes: 1024,
            },
            auto_reset: Some(MinMembers::Majority),
            ..GroupConfig::default()
        }
        .into(),
        p => OrderConfig {
            protocol: Protocol::from_name(p).ok_or(format!("--protocol {p}"))?,
            vs: VsConfig {
                group: 12,
                ..VsConfig::default()
            },
            ..OrderConfig::default()
        }
        .into(),
    })
}

fn run_member(args: &MemberArgs) -> Result<(), String> {
    let stop = watch_stdin();
    let engine = Engine::start(EngineConfig {
        loss_injection: args.loss,
        loss_seed: 100 + args.site as u64,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let me = Address::new(args.instance, args.site, MEMBER_TYPE, 0);
    let port = Port::open_on(&engine, me, PortConfig::default()).map_err(|e| e.to_string())?;
    let spec = group_spec(&args.protocol)?;
    let group = if args.site == 0 {
        let g = port.create_group(spec).map_err(|e| e.to_string())?;
        println!("created");
        g
    } else {
        let contact = Address::new(args.instance, 0, MEMBER_TYPE, 0);
        let mut tries = 0;
        loop {
            match port.join_group(spec.clone(), contact, Some(Duration::from_secs(2))) {
                Ok(g) => break g,
                Err(e) if tries < 10 => {
                    tries += 1;
                    eprintln!("site {}: join: {e}; again", args.site);
                }
                Err(e) => return Err(format!("join: {e}")),
            }
        }
    };
    let _ = std::io::stdout().flush();
    let pace = Duration::from_secs(1) / args.rate;
    let (mut delivered, mut sent, mut refused, mut views) = (0u64, 0u64, 0u64, 0u64);
    let mut order_hash = 0xcbf2_9ce4_8422_2325u64;
    let mut next_send = Instant::now();
    let mut next_status = Instant::now();
    let mut payload = [b'.'; PAYLOAD_BYTES];
    let mut out = std::io::stdout().lock();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        // Sending starts once the group is full, so that every member delivers the same
        // messages from the first on.
        if now >= next_send && group.info().members.len() >= args.members {
            let head = format!("{}:{sent}:", args.site);
            payload[..head.len()].copy_from_slice(head.as_bytes());
            match group.send_async(&payload) {
                Ok(_) => sent += 1,
                // Back-pressure (the send queue's bound) or a blocked group: counted, and the
                // next send comes at the next pace.
                Err(GroupCallError::Group(_)) => refused += 1,
                Err(e) => return Err(format!("send: {e}")),
            }
            next_send += pace;
            if next_send < now {
                next_send = now + pace;
            }
        }
        if now >= next_status {
            writeln!(
                out,
                "status delivered={delivered} sent={sent} refused={refused} views={views} lost={}",
                engine.injected_losses()
            )
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())?;
            next_status += Duration::from_secs(1);
        }
        // Park in `receive` until the next send or status is due.
        let wait = next_send
            .min(next_status)
            .saturating_duration_since(Instant::now());
        let mut wait = wait.min(Duration::from_millis(200));
        loop {
            let d = match group.receive(Some(wait)) {
                Ok(d) => d,
                Err(GroupCallError::Timeout) => break,
                Err(e) => return Err(format!("receive: {e}")),
            };
            wait = Duration::ZERO;
            match &d.what {
                GroupRecord::Message { payload, .. } => {
                    delivered += 1;
                    order_hash = hash_into(order_hash, payload);
                    if delivered % CHECK_EVERY == 0 {
                        writeln!(out, "check {delivered} {order_hash:016x}")
                            .map_err(|e| e.to_string())?;
                    }
                }
                _ => views += 1,
            }
        }
    }
    // Leave, so that the others see a departure rather than a failure.
    let _ = group.leave(Some(Duration::from_secs(2)));
    writeln!(
        out,
        "status delivered={delivered} sent={sent} refused={refused} views={views} lost={}",
        engine.injected_losses()
    )
    .and_then(|_| out.flush())
    .map_err(|e| e.to_string())
}

/// The options of `txcast __soak-client`.
#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    #[arg(long)]
    instance: u16,
    /// The RPC server's site (this client is at site 0)
    #[arg(long)]
    server_site: u16,
    /// Fraction of outgoing remote packets dropped
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Calls per second
    #[arg(long, default_value_t = 20)]
    calls: u32,
    /// Each call's deadline (ms)
    #[arg(long, default_value_t = 3000)]
    deadline_ms: u64,
}

/// The RPC client of a soak: TICKET calls, one at a time, each with a deadline, until its
/// stdin closes; then a QUIT call ends the server. Prints `status calls=N answered=N late=N
/// wrong=N lost=N` every second and at the end.
pub fn client(args: &ClientArgs) -> i32 {
    crate::exit_code("txcast __soak-client", run_client(args))
}

fn run_client(args: &ClientArgs) -> Result<(), String> {
    let stop = watch_stdin();
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: args.loss,
        loss_seed: 7,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let me = Address::new(args.instance, 0, CLIENT_TYPE, 0);
    let server = Address::new(args.instance, args.server_site, SERVER_TYPE, 0);
    let port = Port::open_on(&engine, me, parked()).map_err(|e| e.to_string())?;
    let mut rpc = Rpc::new(port, RpcConfig::default()).map_err(|e| e.to_string())?;
    let deadline = Duration::from_millis(args.deadline_ms);
    let pace = Duration::from_secs(1) / args.calls;
    let (mut calls, mut answered, mut late, mut wrong) = (0u64, 0u64, 0u64, 0u64);
    let mut next_call = Instant::now();
    let mut next_status = Instant::now();
    let mut out = std::io::stdout().lock();
    let status = |out: &mut std::io::StdoutLock, c: u64, a: u64, l: u64, w: u64| {
        writeln!(
            out,
            "status calls={c} answered={a} late={l} wrong={w} lost={}",
            engine.injected_losses()
        )
        .and_then(|_| out.flush())
        .map_err(|e| e.to_string())
    };
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= next_status {
            status(&mut out, calls, answered, late, wrong)?;
            next_status += Duration::from_secs(1);
        }
        if now < next_call {
            std::thread::sleep((next_call - now).min(Duration::from_millis(100)));
            continue;
        }
        next_call += pace;
        if next_call < now {
            next_call = now + pace;
        }
        // The payload is the call's number: the server logs it with each execution.
        let payload = calls.to_le_bytes();
        calls += 1;
        match rpc.call(server, TICKET, &payload, deadline) {
            // The reply is the payload, the server's pid and its execution count.
            Ok(reply) if reply.len() == 8 + 4 + 8 && reply[..8] == payload => answered += 1,
            Ok(_) => wrong += 1,
            Err(RpcCallError::DeadlinePassed(_)) => late += 1,
            Err(e) => return Err(format!("call {}: {e}", calls - 1)),
        }
    }
    status(&mut out, calls, answered, late, wrong)?;
    rpc.call(server, QUIT, b"", Duration::from_secs(3))
        .map_err(|e| format!("quit: {e}"))?;
    Ok(())
}

/// A port whose receive parks at once: the default spins 20,000 duty cycles first, which at
/// a soak's few calls a second would keep a core busy for nothing.
fn parked() -> PortConfig {
    PortConfig {
        idle: IdleStrategy::Park,
        ..PortConfig::default()
    }
}

/// The options of `txcast __soak-server`.
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    #[arg(long)]
    instance: u16,
    #[arg(long)]
    site: u16,
    /// Fraction of outgoing remote packets dropped
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Append one line `<client> <payload hex>` per executed TICKET call to this file
    #[arg(long, value_name = "FILE")]
    exec_log: std::path::PathBuf,
}

/// The RPC server of a soak: `__rpc-server`'s TICKET and QUIT on a parked port. Prints
/// `ready` once its port is open; ends at a QUIT call, or 5 s after its stdin closes (the
/// client's QUIT may be lost to the parent's stopping).
pub fn server(args: &ServerArgs) -> i32 {
    crate::exit_code("txcast __soak-server", run_server(args))
}

fn run_server(args: &ServerArgs) -> Result<(), String> {
    let stop = watch_stdin();
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: args.loss,
        loss_seed: 3,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let me = Address::new(args.instance, args.site, SERVER_TYPE, 0);
    let port = Port::open_on(&engine, me, parked()).map_err(|e| e.to_string())?;
    let mut rpc = Rpc::new(port, RpcConfig::default()).map_err(|e| e.to_string())?;
    let path = &args.exec_log;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let pid = std::process::id();
    let mut tickets = 0u64;
    rpc.register(TICKET, move |client, p| {
        tickets += 1;
        let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
        // Logged before the reply exists: an answered call's execution is on file.
        log.write_all(format!("{client} {hex}\n").as_bytes())
            .map_err(|e| format!("exec log: {e}"))?;
        let mut reply = p.to_vec();
        reply.extend_from_slice(&pid.to_le_bytes());
        reply.extend_from_slice(&tickets.to_le_bytes());
        Ok(reply)
    });
    let quit = Arc::new(AtomicBool::new(false));
    let q = quit.clone();
    rpc.register(QUIT, move |_, _| {
        q.store(true, Ordering::SeqCst);
        Ok(Vec::new())
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut stopped_at = None;
    while !quit.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            let at = *stopped_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_secs(5) {
                return Err("stdin closed and no QUIT".into());
            }
        }
        rpc.serve(Duration::from_millis(200))
            .map_err(|e| e.to_string())?;
    }
    // Copies of the QUIT (its reply lost) are answered for a little longer.
    rpc.serve(Duration::from_millis(200))
        .map_err(|e| e.to_string())?;
    Ok(())
}
