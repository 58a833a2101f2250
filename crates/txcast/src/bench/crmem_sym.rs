//! `txcast bench crmem --config symmetric`: the simplified TpcB of Figure 8 (Roşu & Schwan
//! §3.6) in the symmetric configuration, one process per node (sites on loopback),
//! transactions on every node at once. The accounts', tellers', branches' and history's
//! homes are spread over the nodes (nodes 0, 1, 2 and 3, modulo the node count), so most
//! transactions take some of their locks at other nodes. Each transaction takes its four
//! ranges in a fixed order (no deadlock) and commits when every node holds it.
//!
//! Processes beyond the first two run their engine with no idle spin: on a machine with
//! fewer cores than processes, they park rather than poll. With `--handlers polled` every
//! node's remote operations run on its own threads (*CPU Polling*): the application thread
//! drives the node while it waits, and a second thread drives it, yielding when idle, while
//! the application works (the other nodes' requests must be answered meanwhile).
//!
//! With `--affinity branch` (one pass per value of `--affinity`), each node runs TPC-B's
//! local transactions (crmem_common's `Tpcb::draw_at`): node k of n the branches b with
//! b % n == k, the account mostly in the teller's branch, the history slots s with
//! s % n == k. The homes stay per segment, so this changes which locks the nodes contend
//! for, not where the locks are asked.
//!
//! With `--lock-keeping kept` (one pass per value), every node keeps the locks other homes
//! granted it until they are recalled (`Config::cache_locks`); with `returned`, the default,
//! it gives them back after each transaction. Kept locks pay off with `--affinity branch`:
//! a node's transactions then take mostly locks it holds already.
//!
//! With `--json`, a JSON row per point on stdout (naming the node count, the handlers, the
//! affinity and the lock keeping), the table on stderr.
//!
//! Per point, every node runs `parallelism` application threads each waiting for its commit,
//! or (`--depths`) one thread keeping up to `depth` transactions waiting for their locks
//! (`ask_ranges`, whose outcomes `granted` returns as they come) and up to `depth` commits
//! in flight (`commit_async`, then `wait_durable` on the oldest), for the point's seconds;
//! the figure is the sum of the nodes' commits over the time. At the end the accounts',
//! tellers' and branches' sums must agree, and be the same on every node.

use super::crmem_common::{err, tpcb_segments, tpcb_sums, Affinity, Impl, Tpcb};
use super::stats::{bench_json, whole};
use super::{spawn_child, wait_child, EXIT_FAILED};
use crate::progress::Progress;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use txcast_crmem::{LockMapping, Mode, SymCrmem, SymCrmemConfig, SymCrmemError, TxnId};
use txcast_port::{Engine, EngineConfig};
use txcast_proto::rng::Rng;
use txcast_proto::Address;

const HOST_TYPE: u16 = 13;
const WAIT: Duration = Duration::from_secs(10);
const PARTNER_LIFE: Duration = Duration::from_secs(900);
const ACC: u16 = 0;
const TEL: u16 = 1;
const BR: u16 = 2;
const HIST: u16 = 3;

fn nodes(n: usize) -> Vec<Address> {
    (0..n as u16)
        .map(|i| Address::new(0, i, HOST_TYPE, 0))
        .collect()
}

/// The mirror benchmark's TpcB segments, their homes spread over the `n` nodes.
fn segments(n: usize) -> Vec<(usize, LockMapping, u16)> {
    tpcb_segments()
        .into_iter()
        .enumerate()
        .map(|(i, (bytes, mapping))| (bytes, mapping, (i % n) as u16))
        .collect()
}

/// What a node does with the locks other homes granted it once its transactions are done
/// (`--lock-keeping`): gives them back at once, or keeps them until recalled
/// (`Config::cache_locks`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locks {
    Returned,
    Kept,
}

impl Locks {
    pub fn name(self) -> &'static str {
        match self {
            Locks::Returned => "returned",
            Locks::Kept => "kept",
        }
    }

    fn parse(s: &str) -> io::Result<Locks> {
        [Locks::Returned, Locks::Kept]
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| err(format!("no lock policy {s:?}")))
    }
}

fn open(n: usize, me: u16, how: Impl, locks: Locks) -> io::Result<SymCrmem> {
    let mut cfg = SymCrmemConfig {
        handlers: how.handlers(),
        ..SymCrmemConfig::new(nodes(n), me)
    };
    cfg.core.cache_locks = locks == Locks::Kept;
    if me < 2 || how != Impl::Engine {
        return SymCrmem::open(cfg, &segments(n)).map_err(err);
    }
    let engine = Engine::start(EngineConfig {
        idle_spin: Duration::ZERO,
        ..EngineConfig::default()
    })?;
    SymCrmem::open_on(&engine, cfg, &segments(n)).map_err(err)
}

/// A point of the run: threads each waiting, or one thread with commits in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Threads(usize),
    InFlight(usize),
}

impl Point {
    fn arg(self) -> String {
        match self {
            Point::Threads(p) => format!("t{p}"),
            Point::InFlight(d) => format!("d{d}"),
        }
    }

    fn parse(s: &str) -> io::Result<Point> {
        let n = |r: &str| r.parse::<usize>().map_err(err);
        match s.split_at_checked(1) {
            Some(("t", r)) => Ok(Point::Threads(n(r)?)),
            Some(("d", r)) => Ok(Point::InFlight(n(r)?)),
            _ => Err(err(format!("not a point: {s:?}"))),
        }
    }

    fn label(self) -> String {
        match self {
            Point::Threads(p) => format!("{p} threads"),
            Point::InFlight(d) => format!("{d} in flight"),
        }
    }
}

/// Which node of how many this is, and which transactions it runs.
#[derive(Clone, Copy, Debug)]
struct Who {
    me: u16,
    n: usize,
    affinity: Affinity,
}

impl Who {
    fn draw(self, rng: &mut Rng) -> Tpcb {
        Tpcb::draw_at(rng, self.affinity, self.me as u32, self.n as u32)
    }
}

/// One TpcB transaction of `who`; `Ok(false)` when a lock wait passed its deadline (aborted).
fn tpcb(c: &SymCrmem, who: Who, rng: &mut Rng) -> io::Result<bool> {
    let x = who.draw(rng);
    let t = c.begin(WAIT).map_err(err)?;
    // All four at once: each home is asked without waiting for the others' grants.
    match c.set_ranges(t, &declared(&x)) {
        Ok(()) => {}
        Err(SymCrmemError::LockTimeout) => return Ok(false),
        Err(e) => {
            let _ = c.abort(t);
            return Err(err(e));
        }
    }
    apply(c, t, &x)?;
    c.commit(t, WAIT).map_err(err)?;
    Ok(true)
}

/// The four ranges of `x`, all for writing.
fn declared(x: &Tpcb) -> Vec<(u16, u32, u32, Mode)> {
    x.ranges([ACC, TEL, BR, HIST])
        .iter()
        .map(|&(s, off, len)| (s, off, len, Mode::Write))
        .collect()
}

/// Writes `x` into its ranges, declared and usable in `t`.
fn apply(c: &SymCrmem, t: TxnId, x: &Tpcb) -> io::Result<()> {
    for (s, off, len) in x.ranges([ACC, TEL, BR, HIST]) {
        c.write(t, s, off, len, |m| x.apply(s == HIST, m))
            .map_err(err)?;
    }
    Ok(())
}

/// One thread with up to `depth` transactions waiting for their locks
/// (`ask_ranges`, outcomes from `granted`) and up to `depth` commits in flight
/// (`commit_async`, then `wait_durable` on the oldest), on `c` for `seconds`: the
/// transactions committed.
fn pipelined(c: &SymCrmem, who: Who, depth: usize, seconds: f64) -> io::Result<u64> {
    let mut rng = Rng::new(((who.me as u64) << 32) | 0xd);
    let mut flight = std::collections::VecDeque::with_capacity(depth);
    let mut asking: std::collections::HashMap<TxnId, Tpcb> =
        std::collections::HashMap::with_capacity(depth);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut n = 0;
    // Commits `t`, whose ranges are usable, keeping at most `depth` in flight.
    let mut finish = |t: TxnId, x: &Tpcb, flight: &mut std::collections::VecDeque<u64>| {
        apply(c, t, x)?;
        if flight.len() >= depth {
            let oldest = flight.pop_front().expect("in flight");
            c.wait_durable(oldest, WAIT).map_err(err)?;
        }
        flight.push_back(c.commit_async(t).map_err(err)?);
        n += 1;
        io::Result::Ok(())
    };
    loop {
        let running = Instant::now() < until;
        while running && asking.len() < depth {
            let x = who.draw(&mut rng);
            let t = c.begin(WAIT).map_err(err)?;
            if c.ask_ranges(t, &declared(&x)).map_err(err)? {
                finish(t, &x, &mut flight)?;
            } else {
                asking.insert(t, x);
            }
        }
        if asking.is_empty() {
            break;
        }
        for (t, r) in c.granted(depth, WAIT) {
            let Some(x) = asking.remove(&t) else {
                continue;
            };
            match r {
                Ok(()) => finish(t, &x, &mut flight)?,
                Err(SymCrmemError::LockTimeout) => {}
                Err(e) => return Err(err(e)),
            }
        }
    }
    if let Some(&last) = flight.back() {
        c.wait_durable(last, WAIT).map_err(err)?;
    }
    Ok(n)
}

/// Runs point `at` on `c` for `seconds`: the transactions committed.
fn point(c: &SymCrmem, who: Who, at: Point, seconds: f64) -> io::Result<u64> {
    match at {
        Point::Threads(p) => threads(c, who, p, seconds),
        Point::InFlight(d) => pipelined(c, who, d, seconds),
    }
}

/// Runs `p` threads of TpcB on `c` for `seconds`: the transactions committed.
fn threads(c: &SymCrmem, who: Who, p: usize, seconds: f64) -> io::Result<u64> {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failed: std::sync::Mutex<Option<io::Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for k in 0..p {
            let (done, stop, failed) = (&done, &stop, &failed);
            s.spawn(move || {
                let mut rng = Rng::new(((who.me as u64) << 32) | (k as u64 + 1));
                while !stop.load(Ordering::Relaxed) {
                    match tpcb(c, who, &mut rng) {
                        Ok(true) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => {}
                        Err(e) => {
                            *failed.lock().expect("lock") = Some(e);
                            stop.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failed.into_inner().expect("lock") {
        return Err(e);
    }
    Ok(done.load(Ordering::Relaxed))
}

/// The accounts', tellers' and branches' sums, as this node has them.
fn sums(c: &SymCrmem) -> io::Result<String> {
    let seg = |s| c.snapshot_segment(s).ok_or_else(|| err("no segment"));
    let (a, t, b) = tpcb_sums(&seg(ACC)?, &seg(TEL)?, &seg(BR)?);
    Ok(format!("{a} {t} {b}"))
}

/// Writes `text` to `path` whole: written beside it, then renamed, so that a node that
/// waits for `path` to exist never reads it half written.
fn publish(path: &Path, text: &str) -> io::Result<()> {
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    std::fs::write(&part, text)?;
    std::fs::rename(&part, path)
}

/// Waits (parked in short sleeps) until `path` exists.
fn wait_for(path: &Path, until: Instant) -> io::Result<()> {
    while !path.exists() {
        if Instant::now() > until {
            return Err(err(format!("{} never came", path.display())));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// The node's part of every point: wait for `go.<i>`, run, file `done.<i>.<me>`; then
/// file the sums and wait for `exit`.
fn node(c: &SymCrmem, dir: &Path, who: Who, points: &[Point], seconds: f64) -> io::Result<()> {
    let end = Instant::now() + PARTNER_LIFE;
    let me = who.me;
    for (i, &p) in points.iter().enumerate() {
        wait_for(&dir.join(format!("go.{i}")), end)?;
        let n = point(c, who, p, seconds)?;
        publish(&dir.join(format!("done.{i}.{me}")), &n.to_string())?;
    }
    wait_for(&dir.join("stop"), end)?;
    publish(&dir.join(format!("sums.{me}")), &sums(c)?)?;
    Ok(())
}

/// `__bench-child crmem-sym <nodes> <me> <dir> <seconds> <engine|polled|interrupt>
/// <uniform|branch> <returned|kept> <point>...` (a point: `t<threads>` or `d<depth>`)
pub fn child(args: &[String]) -> io::Result<()> {
    let [n, me, dir, seconds, how, affinity, locks, points @ ..] = args else {
        return Err(err(
            "usage: crmem-sym <nodes> <me> <dir> <seconds> <handlers> <affinity> <locks> <point>...",
        ));
    };
    let how = Impl::parse(how)?;
    let locks = Locks::parse(locks)?;
    let affinity = Affinity::parse(affinity)?;
    let parse = |s: &String| s.parse::<usize>().map_err(err);
    let (n, me) = (parse(n)?, parse(me)? as u16);
    let seconds: f64 = seconds.parse().map_err(err)?;
    let points = points
        .iter()
        .map(|p| Point::parse(p))
        .collect::<io::Result<Vec<_>>>()?;
    let c = open(n, me, how, locks)?;
    let dir = PathBuf::from(dir);
    txcast_crmem::with_idle_drivers(&[&c], || {
        node(&c, &dir, Who { me, n, affinity }, &points, seconds)?;
        // Serves the others' locks and commits until the parent is done with every node.
        wait_for(&dir.join("exit"), Instant::now() + PARTNER_LIFE)
    })
}

/// Where a pass's lines go: the table on stdout, or with `json` the JSON rows there (one per
/// point) and the table on stderr.
struct Out<'a> {
    json: bool,
    progress: &'a Progress,
}

impl Out<'_> {
    fn table(&self, line: &str) {
        self.progress.suspend(|| {
            if self.json {
                eprintln!("{line}")
            } else {
                println!("{line}")
            }
        });
    }

    fn row(&self, line: &str) {
        if self.json {
            self.progress.suspend(|| println!("{line}"));
        }
    }
}

/// Runs the symmetric TpcB on each node count with each placement of the handlers, each
/// affinity and each lock policy; prints a table per pass (and with `json` a JSON row per
/// point).
pub fn run(
    node_counts: &[usize],
    hows: &[Impl],
    (affinities, lockss): (&[Affinity], &[Locks]),
    points: &[Point],
    seconds: f64,
    json: bool,
) -> i32 {
    // One point per pass and point.
    let passes = (node_counts.len() * hows.len() * affinities.len() * lockss.len()) as u64;
    let progress = Progress::points("crmem", passes * points.len() as u64);
    let out = Out {
        json,
        progress: &progress,
    };
    for &how in hows {
        for &affinity in affinities {
            for &locks in lockss {
                for &n in node_counts {
                    let r = one(n, (how, affinity, locks), points, seconds, &out);
                    if let Err(e) = r {
                        progress.finish();
                        eprintln!(
                            "txcast bench crmem --config symmetric: {n} nodes, {}, {}, locks {}: {e}",
                            how.name(),
                            affinity.name(),
                            locks.name()
                        );
                        return EXIT_FAILED;
                    }
                }
            }
        }
    }
    progress.finish();
    0
}

fn one(
    n: usize,
    (how, affinity, locks): (Impl, Affinity, Locks),
    points: &[Point],
    seconds: f64,
    out: &Out,
) -> io::Result<()> {
    let dir =
        std::env::temp_dir().join(format!("txcast-bench-crmem-sym-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut children = Vec::new();
    for me in 1..n {
        let mut a = vec![
            "crmem-sym".to_string(),
            n.to_string(),
            me.to_string(),
            dir.to_string_lossy().into_owned(),
            seconds.to_string(),
            how.name().to_string(),
            affinity.name().to_string(),
            locks.name().to_string(),
        ];
        a.extend(points.iter().map(|p| p.arg()));
        children.push(spawn_child(&a)?);
    }
    let r = (|| -> io::Result<()> {
        let c = open(n, 0, how, locks)?;
        txcast_crmem::with_idle_drivers(&[&c], || {
            let who = Who { me: 0, n, affinity };
            run_points(&c, who, (how, locks), &dir, points, seconds, out)
        })
    })();
    let _ = std::fs::write(dir.join("exit"), b"");
    let mut r = r;
    for mut ch in children {
        let w = wait_child(&mut ch, Duration::from_secs(30));
        if r.is_ok() {
            r = w;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// Node 0's part of one pass: every point (the others told by files in `dir`), the
/// replicas' sums compared at the end.
fn run_points(
    c: &SymCrmem,
    who: Who,
    (how, locks): (Impl, Locks),
    dir: &Path,
    points: &[Point],
    seconds: f64,
    out: &Out,
) -> io::Result<()> {
    let n = who.n;
    let progress = out.progress;
    out.table(&format!(
        "tpcb, symmetric on {n} nodes (one process each), remote operations: {} ({}), affinity: {}, locks: {}, transactions per second of all nodes, {seconds} s a point",
        how.name(),
        how.paper(),
        who.affinity.name(),
        locks.name()
    ));
    out.table(&format!(
        "{:>14} {:>14} {:>12}",
        "point", "txn/s", "transactions"
    ));
    let end = Instant::now() + PARTNER_LIFE;
    // Every node up: a first transaction from here reaches every home.
    let mut rng = Rng::new(99);
    while !tpcb(c, who, &mut rng)? {}
    for (i, &p) in points.iter().enumerate() {
        progress.note(&format!("symmetric {n} nodes, {}", p.label()));
        std::fs::write(dir.join(format!("go.{i}")), b"")?;
        let started = Instant::now();
        let mut total = point(c, who, p, seconds)?;
        for me in 1..n {
            let f = dir.join(format!("done.{i}.{me}"));
            wait_for(&f, end)?;
            total += std::fs::read_to_string(&f)?
                .trim()
                .parse::<u64>()
                .map_err(err)?;
        }
        let elapsed = started.elapsed().as_secs_f64().max(seconds);
        let rate = total as f64 / elapsed;
        out.table(&format!("{:>14} {rate:>14.0} {total:>12}", p.label()));
        let (how, affinity, locks) = (how.name(), who.affinity.name(), locks.name());
        let txn_per_s = whole(rate);
        out.row(&match p {
            Point::Threads(p) => bench_json! {
                bench: "crmem",
                section: "tpcb",
                config: "symmetric",
                nodes: n,
                handlers: how,
                affinity: affinity,
                locks: locks,
                mode: "threads",
                parallel: p,
                txn_per_s: txn_per_s,
                transactions: total,
            },
            Point::InFlight(d) => bench_json! {
                bench: "crmem",
                section: "tpcb",
                config: "symmetric",
                nodes: n,
                handlers: how,
                affinity: affinity,
                locks: locks,
                mode: "in-flight",
                depth: d,
                txn_per_s: txn_per_s,
                transactions: total,
            },
        });
        progress.advance();
    }
    std::fs::write(dir.join("stop"), b"")?;
    let mine = sums(c)?;
    let mut ok = {
        let v: Vec<i64> = mine.split(' ').filter_map(|x| x.parse().ok()).collect();
        v.len() == 3 && v.iter().all(|&x| x == v[0])
    };
    let mut all = vec![mine.clone()];
    for me in 1..n {
        let f = dir.join(format!("sums.{me}"));
        wait_for(&f, end)?;
        let theirs = std::fs::read_to_string(&f)?;
        ok &= theirs.trim() == mine;
        all.push(theirs.trim().to_string());
    }
    out.table(&format!(
        "tpcb check: sums (accounts tellers branches) on each node {:?}: {}",
        all,
        if ok { "consistent" } else { "INCONSISTENT" }
    ));
    out.table(&format!("counters (node 0): {:?}", c.counters()));
    std::fs::write(dir.join("exit"), b"")?;
    if ok {
        Ok(())
    } else {
        Err(err("TpcB sums differ"))
    }
}
