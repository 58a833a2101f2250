//! `txcast crmem --node K --nodes N`: one node of a CRMem mirror as a long-lived process (a
//! real cluster runs one per host). While it is the primary it runs the simplified TpcB of
//! Roşu & Schwan, *Support for Recoverable Memory in the Distributed Virtual Communication
//! Machine* (§3.5), one transaction at a time; as a backup it holds the replica and takes
//! over when the primary dies. Ends on SIGINT or SIGTERM with a report of its copy.
//!
//! Every transaction is self-describing, so that a copy alone says which transactions it
//! holds: it adds one to a counter record and draws its TpcB update (account, teller,
//! branch, history slot, amount) from the new counter value. A copy whose counter is `c`
//! must hold transactions 1..=c, each once: its accounts, tellers and branches each sum to
//! the amounts of those `c` draws. With `--chaos-log FILE` the node writes one line per
//! acknowledged commit (a `commit` that returned); `txcast chaos crmem` checks the logs of
//! every node of a run (see `chaos_crmem.rs`).

use crate::bench::crmem_common::{tpcb_segments, tpcb_sums, Impl, Tpcb};
use crate::raid_node::{catch_stop_signals, load_time, stop_signalled};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use txcast_crmem::{
    Crmem, CrmemConfig, CrmemError, Event, LockMapping, MembershipConfig, Mode, Role,
};
use txcast_port::{ClusterConfig as Naming, Engine, EngineConfig, EngineMode};
use txcast_proto::rng::Rng;
use txcast_proto::Address;

/// What `txcast crmem --help` says after the options.
const AFTER_HELP: &str = "\
txcast crmem --node K --nodes N: runs node K of a CRMem mirror of N nodes (node K at
address INSTANCE.K.10.1, its host from the cluster file) until SIGINT/SIGTERM. Node
--primary (0) starts as the primary, the others as its backups. The primary runs TpcB
transactions for --seconds (or until the Unix time --until in ms, so that whichever node
is primary then stops at the same time); a backup that finds its primary silent for
--suspect-ms takes over (the lowest live node) and goes on with the load. A node started
again after a crash passes --recover and --primary P, P the node primary now: it takes a
snapshot from P before it serves. At the end it prints its copy's counter, digest and
balance sums (--json: one JSON line), exit 1 if the sums do not match its counter.
--chaos-log FILE: one line per acknowledged commit, for `txcast chaos crmem`.
--membership (3 nodes or more): failures are decided by the views of a txcast group, which
need a majority, not by --suspect-ms: a primary cut off in a minority commits nothing more,
the majority's view makes a successor, and once healed the cut-off node is expelled: it
exits with status 3 and is started again with --recover.";

/// The server type and number of a CRMem node's port (the node is site K).
const SERVER_TYPE: u16 = 10;
const SERVER: u16 = 1;
/// A transaction's locks must come within this (one transaction at a time: they do).
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// A commit not on the backups within this is reported as failed (it may still land: the
/// counter tells).
const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Segments: TpcB's accounts, tellers, branches and history, then the counter.
const ACC: u16 = 0;
const TEL: u16 = 1;
const BR: u16 = 2;
const HIST: u16 = 3;
const COUNTER: u16 = 4;

/// The options of `txcast crmem`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct CrmemArgs {
    /// This node's number, below --nodes
    #[arg(long, value_name = "K")]
    pub node: u16,
    /// Nodes of the mirror, 1 to 16
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub nodes: u16,
    /// The node that starts as the primary (with --recover: the primary to recover from)
    #[arg(long, default_value_t = 0)]
    pub primary: u16,
    /// Start by recovering from --primary (a node that restarts)
    #[arg(long)]
    pub recover: bool,
    /// The cluster file naming the nodes' hosts [default: every site on loopback]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The cluster's instance number
    #[arg(long, default_value_t = 8)]
    pub instance: u16,
    /// Seconds the load runs while this node is primary
    #[arg(long, value_name = "S", conflicts_with = "until", value_parser = crate::dc::seconds)]
    pub seconds: Option<f64>,
    /// The Unix time (ms) until which the load runs
    #[arg(long, value_name = "UNIX_MS")]
    pub until: Option<u64>,
    /// Where CRMem's remote operations run
    #[arg(long, value_enum, default_value = "engine")]
    pub handlers: Impl,
    /// A primary silent this long is taken over (10 to 60000)
    #[arg(long, value_name = "MS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub suspect_ms: u64,
    /// Failures decided by a txcast group's majority views (partitions fenced; 3+ nodes)
    #[arg(long)]
    pub membership: bool,
    /// One line per acknowledged commit and role change, for `txcast chaos crmem`
    #[arg(long, value_name = "FILE")]
    pub chaos_log: Option<PathBuf>,
    /// The report as one JSON line on stdout
    #[arg(long)]
    pub json: bool,
}

/// The segments: TpcB's four at the paper's granularities, then the counter (one lock).
fn segments() -> Vec<(usize, LockMapping)> {
    let mut v = tpcb_segments().to_vec();
    v.push((
        8,
        LockMapping::Records {
            record_bytes: 8,
            per_lock: 1,
        },
    ));
    v
}

/// Transaction `i`'s TpcB update.
pub fn draw(i: u64) -> Tpcb {
    Tpcb::draw(&mut Rng::new(i))
}

/// The money transactions 1..=counter move, in all.
pub fn expected_total(counter: u64) -> i64 {
    (1..=counter).map(|i| draw(i).amount).sum()
}

/// A chaos log: one `write` per line, so a kill -9 leaves whole lines. Lines start with the
/// time in ns since the Unix epoch: `T B <node> <pid>` (started), `T A <i>` (transaction
/// `i`'s commit returned), `T R <role change>`, `T E <counter> <digest> <accounts> <tellers>
/// <branches>` (ended on a signal, with its copy).
struct Log(Option<std::fs::File>);

impl Log {
    fn line(&mut self, what: std::fmt::Arguments<'_>) {
        if let Some(f) = &mut self.0 {
            let l = format!("{} {what}\n", crate::chaos::now_ns());
            // A log that cannot be written shows as a bad log to the checker.
            let _ = f.write_all(l.as_bytes());
        }
    }
}

/// One transaction: the counter's next value `i`, then TpcB draw `i`. Returns `i` once the
/// commit returned.
fn transaction(c: &Crmem) -> Result<u64, CrmemError> {
    let t = c.begin(LOCK_WAIT)?;
    let r = (|| {
        c.set_range(t, COUNTER, 0, 8, Mode::Write)?;
        let i = c.write(t, COUNTER, 0, 8, |m| {
            let i = u64::from_le_bytes(m[..8].try_into().expect("8 bytes")) + 1;
            m.copy_from_slice(&i.to_le_bytes());
            i
        })?;
        let x = draw(i);
        for (s, row, len) in x.ranges([ACC, TEL, BR, HIST]) {
            c.set_range(t, s, row, len, Mode::Write)?;
            c.write(t, s, row, len, |m| x.apply(s == HIST, m))?;
        }
        Ok(i)
    })();
    match r {
        Ok(i) => c.commit(t, COMMIT_WAIT).map(|_| i),
        Err(e) => {
            let _ = c.abort(t);
            Err(e)
        }
    }
}

/// A copy's state: counter, digest of every segment, balance sums.
pub struct Copy {
    pub counter: u64,
    pub digest: u64,
    pub sums: (i64, i64, i64),
}

fn copy_of(c: &Crmem) -> Option<Copy> {
    let seg = |s| c.snapshot_segment(s);
    let (acc, tel, br, hist, ctr) = (seg(ACC)?, seg(TEL)?, seg(BR)?, seg(HIST)?, seg(COUNTER)?);
    let mut h = txcast_proto::fnv::Fnv64::default();
    for m in [&acc, &tel, &br, &hist, &ctr] {
        h.add(m);
    }
    Some(Copy {
        counter: u64::from_le_bytes(ctr[..8].try_into().ok()?),
        digest: h.0,
        sums: tpcb_sums(&acc, &tel, &br),
    })
}

fn role_name(r: &Role) -> &'static str {
    match r {
        Role::Primary { .. } => "primary",
        Role::Backup { .. } => "backup",
        Role::Recovering { .. } => "recovering",
    }
}

/// `txcast crmem`.
pub fn run(args: CrmemArgs) -> i32 {
    let n = args.nodes;
    if args.membership && n < 3 {
        let e = format!("--membership needs --nodes 3 or more (a majority of {n} is all of them)");
        return crate::usage_error(&["crmem"], &e);
    }
    if args.node >= n || args.primary >= n {
        let e = format!(
            "--node {} and --primary {}: nodes below --nodes {n}",
            args.node, args.primary
        );
        return crate::usage_error(&["crmem"], &e);
    }
    match serve(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("txcast crmem: {e}");
            1
        }
    }
}

fn serve(args: &CrmemArgs) -> Result<i32, String> {
    let (me, n) = (args.node, args.nodes);
    let nodes: Vec<Address> = (0..n)
        .map(|k| Address::new(args.instance, k, SERVER_TYPE, SERVER))
        .collect();
    let cfg = CrmemConfig {
        primary: args.primary,
        recover: args.recover,
        handlers: args.handlers.handlers(),
        suspect_after: Duration::from_millis(args.suspect_ms),
        ..CrmemConfig::new(nodes.clone(), me)
    };
    let log_file = match &args.chaos_log {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => None,
    };
    let mut log = Log(log_file);
    let engine = match &args.config {
        Some(path) => {
            let naming = Naming::load(path).map_err(|e| e.to_string())?;
            let mode = match args.handlers {
                Impl::Polled => EngineMode::Invoker,
                _ => EngineConfig::default().mode,
            };
            Some(
                Engine::start(EngineConfig {
                    cluster: naming,
                    mode,
                    ..EngineConfig::default()
                })
                .map_err(|e| e.to_string())?,
            )
        }
        None => None,
    };
    let c = match (&engine, args.membership) {
        (e, true) => {
            Crmem::open_with_membership(e.as_ref(), cfg, &segments(), MembershipConfig::new(&nodes))
        }
        (Some(e), false) => Crmem::open_on(e, cfg, &segments()),
        (None, false) => Crmem::open(cfg, &segments()),
    }
    .map_err(|e| e.to_string())?;
    catch_stop_signals();
    log.line(format_args!("B {me} {}", std::process::id()));
    if !args.json {
        println!(
            "crmem node {me} of {n} at {}, {}",
            nodes[me as usize],
            role_name(&c.role())
        );
    }
    let load_until = Instant::now() + load_time(args.seconds, args.until);
    let (mut committed, mut failed) = (0u64, 0u64);
    let mut promoted_at: Option<Instant> = None;
    while !stop_signalled() {
        if c.expelled() {
            // Its copy may hold commits nobody acknowledged: it reports none, and is started
            // again with --recover.
            log.line(format_args!("R expelled"));
            if !args.json {
                println!("crmem node {me}: expelled by the membership group ({committed} commits acknowledged here, {failed} failed)");
            } else {
                println!(
                    "{}",
                    serde_json::json!({"node": me, "expelled": true, "committed": committed, "failed": failed})
                );
            }
            return Ok(3);
        }
        for e in c.notices() {
            match e {
                Event::Promoted => {
                    promoted_at = Some(Instant::now());
                    log.line(format_args!("R promoted"));
                }
                Event::Recovered => log.line(format_args!("R recovered")),
                Event::BackupLost(k) => log.line(format_args!("R lost {k}")),
                _ => {}
            }
        }
        let primary = matches!(c.role(), Role::Primary { .. });
        if primary && Instant::now() < load_until {
            match transaction(&c) {
                Ok(i) => {
                    committed += 1;
                    log.line(format_args!("A {i}"));
                }
                Err(e) => {
                    failed += 1;
                    tracing::debug!(error = %e, "crmem transaction failed");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        } else if args.handlers == Impl::Polled {
            // Nobody else answers for a polled node.
            let until = Instant::now() + Duration::from_millis(5);
            while Instant::now() < until {
                if c.drive() == 0 {
                    std::hint::spin_loop();
                }
            }
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let copy = copy_of(&c).ok_or("the node has no segments")?;
    let expected = expected_total(copy.counter);
    let (a, t, b) = copy.sums;
    let conserved = a == expected && t == expected && b == expected;
    log.line(format_args!(
        "E {} {:016x} {a} {t} {b}",
        copy.counter, copy.digest
    ));
    let role = role_name(&c.role());
    let counters = c.counters();
    if args.json {
        let line = serde_json::json!({
            "node": me,
            "role": role,
            "seq": c.seq(),
            "counter": copy.counter,
            "digest": format!("{:016x}", copy.digest),
            "accounts": a,
            "tellers": t,
            "branches": b,
            "expected": expected,
            "conserved": conserved,
            "committed": committed,
            "failed": failed,
            "promoted": promoted_at.is_some(),
            "peer_unreachable": c.host().counters().peer_unreachable,
            "caught_up": counters.caught_up,
            "undone": counters.undone,
            "snapshots_sent": counters.snapshots_sent,
        });
        println!("{line}");
    } else {
        println!(
            "crmem node {me}: {role}, counter {}, digest {:016x}, sums {a} {t} {b} (expected {expected}): {}; {committed} commits acknowledged here, {failed} failed",
            copy.counter,
            copy.digest,
            if conserved { "money conserved" } else { "MONEY NOT CONSERVED" }
        );
    }
    Ok(i32::from(!conserved))
}
