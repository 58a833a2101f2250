//! Symmetric CRMem with its membership from a txcast group (`open_with_membership`), through
//! the public API on loopback: three nodes on sites 0, 1 and 2 run TpcB transfers; one node
//! goes (dropped in this process, or its process killed with SIGKILL); the survivors see the
//! group's view change and go on committing; the node comes back with `recover` and catches
//! up through the snapshot.
//!
//! Every transfer also adds one to its node's counter record, read in the transaction, so a
//! node knows how many of its commits returned `Ok`: none of them may be lost.

mod common;

use common::with_idle_drivers;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use txcast_crmem::{
    CrError, Handlers, LockMapping, MembershipConfig, Mode, SymCrmem, SymCrmemConfig, SymCrmemError,
};
use txcast_proto::Address;

const LONG: Duration = Duration::from_secs(10);
const ACCOUNTS: usize = 1000;
const TELLERS: usize = 64;
const BRANCHES: usize = 8;
const NODES: usize = 3;
/// The child process's environment: which server instance, and whether it restarts.
const CHILD: &str = "TXCAST_CRMEM_SYM_CHILD";
const CHILD_RECOVER: &str = "TXCAST_CRMEM_SYM_CHILD_RECOVER";

/// The two tests use failure detectors and both cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn nodes(server: u16) -> Vec<Address> {
    (0..NODES as u16)
        .map(|s| Address::new(0, s, 10, server))
        .collect()
}

fn segments() -> Vec<(usize, LockMapping, u16)> {
    let rec = |record_bytes, per_lock| LockMapping::Records {
        record_bytes,
        per_lock,
    };
    // Homes spread over the three nodes; the history total under one lock; one counter
    // record a node (segment 4).
    vec![
        (ACCOUNTS * 100, rec(100, 10), 0),
        (TELLERS * 100, rec(100, 2), 1),
        (BRANCHES * 100, rec(100, 1), 2),
        (
            16,
            LockMapping::Uniform {
                locks: 1,
                granule: 16,
            },
            0,
        ),
        (NODES * 8, rec(8, 1), 1),
    ]
}

fn open(server: u16, me: u16, recover: bool, keep: bool) -> SymCrmem {
    open_with(server, me, recover, Handlers::Engine, keep)
}

/// `keep`: the node keeps the locks other homes grant it until they are recalled.
fn open_with(server: u16, me: u16, recover: bool, handlers: Handlers, keep: bool) -> SymCrmem {
    let mut cfg = SymCrmemConfig {
        recover,
        handlers,
        ..SymCrmemConfig::new(nodes(server), me)
    };
    cfg.core.cache_locks = keep;
    let members = MembershipConfig::new(&nodes(server));
    SymCrmem::open_with_membership(cfg, &segments(), members).expect("open with membership")
}

/// Opens every node of `mes` at once (a fresh start returns once all are in the group).
fn open_all(server: u16, mes: &[u16], handlers: Handlers, keep: bool) -> Vec<SymCrmem> {
    std::thread::scope(|s| {
        let hs: Vec<_> = mes
            .iter()
            .map(|&me| s.spawn(move || open_with(server, me, false, handlers, keep)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn i64_at(m: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(m[at..at + 8].try_into().unwrap())
}

fn add(m: &mut [u8], d: i64) {
    let v = i64_at(m, 0) + d;
    m[..8].copy_from_slice(&v.to_le_bytes());
}

/// Whether a failed call only means "try again" (a lock wait past its deadline, a view
/// change that rolled the transaction back or is under way).
fn retry(e: &SymCrmemError) -> bool {
    matches!(
        e,
        SymCrmemError::LockTimeout
            | SymCrmemError::ViewChange
            | SymCrmemError::Core(CrError::NotServing)
            | SymCrmemError::Core(CrError::UnknownTxn)
    )
}

/// One TpcB transfer drawn from `x` that also adds one to node `me`'s counter; `abort`
/// rolls it back instead. `Ok(Some(counter))` once committed, `Ok(None)` to try again.
fn transfer(c: &SymCrmem, me: u16, x: u64, abort: bool) -> Result<Option<i64>, SymCrmemError> {
    let (acc, tel) = ((x >> 33) as usize % ACCOUNTS, (x >> 45) as usize % TELLERS);
    let amount = (x >> 20) as i64 % 1000 - 500;
    let t = match c.begin(Duration::from_millis(500)) {
        Ok(t) => t,
        Err(e) if retry(&e) => {
            // A view change is under way: it ends within the failure detector's time.
            std::thread::sleep(Duration::from_millis(2));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let ranges = [
        (0, acc * 100),
        (1, tel * 100),
        (2, (tel % BRANCHES) * 100),
        (3, 0),
        (4, me as usize * 8),
    ];
    let body = || -> Result<i64, SymCrmemError> {
        for &(s, off) in &ranges {
            c.set_range(t, s, off as u32, 8, Mode::Write)?;
        }
        for &(s, off) in &ranges[..4] {
            c.write(t, s, off as u32, 8, |m| add(m, amount))?;
        }
        c.write(t, 4, me as u32 * 8, 8, |m| {
            add(m, 1);
            i64_at(m, 0)
        })
    };
    let counter = match body() {
        Ok(v) => v,
        Err(e) if retry(&e) => {
            let _ = c.abort(t);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if abort {
        return match c.abort(t) {
            Ok(()) => Ok(None),
            Err(e) if retry(&e) => Ok(None),
            Err(e) => Err(e),
        };
    }
    match c.commit(t, LONG) {
        Ok(_) => Ok(Some(counter)),
        Err(e) if retry(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn next(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *x
}

/// Runs `count` committed transfers (every tenth draw aborted) on node `me`.
fn run(c: &SymCrmem, me: u16, seed: u64, count: usize) {
    let mut x = seed;
    let mut done = 0;
    let mut draws = 0u64;
    while done < count {
        draws += 1;
        if transfer(c, me, next(&mut x), draws.is_multiple_of(10))
            .expect("transfer")
            .is_some()
        {
            done += 1;
        }
    }
}

struct Sums {
    accounts: i64,
    tellers: i64,
    branches: i64,
    history: i64,
    counters: Vec<i64>,
    digest: u64,
}

fn sums(c: &SymCrmem) -> Sums {
    let seg = |s| c.snapshot_segment(s).unwrap();
    let sum = |m: &[u8], n: usize| (0..n).map(|i| i64_at(m, i * 100)).sum::<i64>();
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for s in 0..5 {
        for b in seg(s) {
            digest = (digest ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    let counters = seg(4);
    Sums {
        accounts: sum(&seg(0), ACCOUNTS),
        tellers: sum(&seg(1), TELLERS),
        branches: sum(&seg(2), BRANCHES),
        history: i64_at(&seg(3), 0),
        counters: (0..NODES).map(|k| i64_at(&counters, k * 8)).collect(),
        digest,
    }
}

/// Sum of accounts = tellers = branches = the history total.
fn assert_invariant(c: &SymCrmem, who: &str) -> Sums {
    let s = sums(c);
    assert_eq!(
        (s.accounts, s.tellers, s.branches),
        (s.history, s.history, s.history),
        "{who}: the invariant"
    );
    s
}

/// Waits until `c` is in a view after `before` and serves again; how long that took.
fn wait_view_without(c: &SymCrmem, before: u64) -> Duration {
    let start = Instant::now();
    loop {
        let view = c.view();
        assert!(!c.expelled());
        if view > before && c.phase() == txcast_crmem::Phase::Serving {
            return start.elapsed();
        }
        assert!(start.elapsed() < LONG, "no view change within {LONG:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_dropped_node_is_left_out_by_the_group_and_recovers_when_it_returns() {
    drop_and_return(21, Handlers::Engine);
}

#[test]
fn interrupt_driven_nodes_with_membership_drop_and_return() {
    drop_and_return(24, Handlers::Interrupt);
}

/// Polled nodes (*CPU Polling*): between transactions nobody runs their handlers unless the
/// application drives them, as its idle loop would; view changes and a snapshot need it.
#[test]
fn polled_nodes_with_membership_drop_and_return() {
    drop_and_return(26, Handlers::Polled);
}

/// Runs `count` transfers on every node of `nodes` at once (seeds from `seed`); the nodes
/// are driven meanwhile, so that a polled node whose own transfers are done still answers
/// the others.
fn run_all(nodes: &[SymCrmem], seed: u64, count: usize) {
    let refs: Vec<&SymCrmem> = nodes.iter().collect();
    with_idle_drivers(&refs, || {
        std::thread::scope(|s| {
            for (k, c) in nodes.iter().enumerate() {
                s.spawn(move || run(c, k as u16, k as u64 + seed, count));
            }
        })
    });
}

fn drop_and_return(server: u16, handlers: Handlers) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const EACH: usize = 60;
    let mut all = open_all(server, &[0, 1, 2], handlers, false);
    run_all(&all, 1, EACH);
    let before = all[0].view();
    // Node 2's process is gone: its module host and group port close without a word.
    let t0 = Instant::now();
    drop(all.pop());
    let survivors = all;
    run_all(&survivors, 11, EACH);
    // The survivors idle from here on (their handlers run only if driven when polled).
    let (a, back) = with_idle_drivers(&[&survivors[0], &survivors[1]], || {
        for c in &survivors {
            wait_view_without(c, before);
        }
        eprintln!(
            "two survivors committed {EACH} each {:?} after the drop",
            t0.elapsed()
        );
        let a = assert_invariant(&survivors[0], "node 0");
        let b = assert_invariant(&survivors[1], "node 1");
        assert_eq!(a.digest, b.digest, "the survivors' replicas differ");
        assert_eq!(
            a.counters,
            vec![2 * EACH as i64, 2 * EACH as i64, EACH as i64]
        );
        // Node 2 comes back: admitted by the next view, it serves once the snapshot is in.
        let t1 = Instant::now();
        let back = open_with(server, 2, true, handlers, false);
        eprintln!(
            "node 2 recovered {:?} after it was opened again",
            t1.elapsed()
        );
        (a, back)
    });
    let c = assert_invariant(&back, "node 2 recovered");
    assert_eq!(c.digest, a.digest, "the recovered replica differs");
    let mut all = survivors;
    all.push(back);
    run_all(&all, 21, EACH / 2);
    let d: Vec<Sums> = all
        .iter()
        .enumerate()
        .map(|(k, c)| assert_invariant(c, &format!("node {k} at the end")))
        .collect();
    assert!(d.iter().all(|s| s.digest == d[0].digest), "replicas differ");
    assert_eq!(
        d[0].counters,
        vec![
            5 * EACH as i64 / 2,
            5 * EACH as i64 / 2,
            3 * EACH as i64 / 2
        ]
    );
}

/// One node in a child process (`CHILD` is `server,node`): opens (fresh, or restarted with
/// `recover`), prints `ready` and its replica's digest, then commits transfers, printing
/// `c <counter>` after each that returned `Ok`. Left out by the group (it was stopped), it
/// prints `expelled` and opens again with `recover`. A restarted one waits for a `go` line on
/// stdin (the test compares its `ready` digest with the survivors' first, before its own
/// commits change both), commits 50, prints `done`, then answers `digest` lines on stdin
/// until stdin closes.
#[test]
#[ignore = "the child process of the kill -9 and SIGSTOP tests"]
fn symmetric_node_child() {
    let Some((server, me, keep)) = std::env::var(CHILD).ok().and_then(|v| {
        let mut f = v.split(',');
        let (s, n, k) = (f.next()?, f.next()?, f.next()?);
        Some((s.parse::<u16>().ok()?, n.parse::<u16>().ok()?, k == "keep"))
    }) else {
        return;
    };
    let mut recover = std::env::var_os(CHILD_RECOVER).is_some();
    let out = std::io::stdout();
    let mut c = open(server, me, recover, keep);
    let mut stdin = std::io::stdin().lines();
    loop {
        writeln!(out.lock(), "ready {:x}", sums(&c).digest).unwrap();
        if recover {
            match stdin.next() {
                Some(Ok(l)) if l.trim() == "go" => {}
                _ => return,
            }
        }
        let mut x = if recover { 77 } else { 3 };
        let (mut done, mut draws) = (0, 0u64);
        let mut expelled = false;
        while !recover || done < 50 {
            draws += 1;
            match transfer(&c, me, next(&mut x), draws.is_multiple_of(10)) {
                Ok(Some(counter)) => {
                    writeln!(out.lock(), "c {counter}").unwrap();
                    done += 1;
                }
                Err(SymCrmemError::Expelled) => {
                    expelled = true;
                    break;
                }
                // A commit past its timeout (the others left this node out).
                _ => {}
            }
        }
        if !expelled {
            break;
        }
        writeln!(out.lock(), "expelled").unwrap();
        drop(c);
        recover = true;
        c = open(server, me, true, keep);
    }
    writeln!(out.lock(), "done").unwrap();
    for line in stdin {
        if line.unwrap().trim() == "digest" {
            writeln!(out.lock(), "digest {:x}", sums(&c).digest).unwrap();
        }
    }
}

/// A child process running node `me`, and its stdout's lines (read by a thread of their own,
/// so that a silent child fails the test in time rather than hanging it).
struct Node {
    child: Child,
    lines: Receiver<String>,
}

impl Node {
    fn spawn(server: u16, me: u16, recover: bool, keep: bool) -> Node {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "symmetric_node_child",
            "--nocapture",
        ])
        .env(
            CHILD,
            format!("{server},{me},{}", if keep { "keep" } else { "return" }),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        if recover {
            cmd.env(CHILD_RECOVER, "1");
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in stdout.lines() {
                let Ok(l) = l else { return };
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Node { child, lines }
    }

    /// The next line, or `None` once the child's stdout closed.
    fn line(&self, within: Duration) -> Option<String> {
        match self.lines.recv_timeout(within) {
            Ok(l) => Some(l),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("the child said nothing for {within:?}"),
        }
    }

    /// The next line that starts with `prefix`, with the prefix cut; `acked` follows the
    /// `c` lines on the way.
    fn line_with(&self, prefix: &str, acked: &mut i64) -> String {
        while let Some(l) = self.line(CHILD_SILENCE_MAX) {
            if let Some(n) = l.strip_prefix("c ") {
                *acked = n.trim().parse().unwrap();
            }
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
        panic!("the child's process ended before a {prefix:?} line");
    }

    /// Follows the `c` lines to the end of a dead child's stdout.
    fn drain(&self, acked: &mut i64) {
        while let Some(l) = self.line(LONG) {
            if let Some(n) = l.strip_prefix("c ") {
                *acked = n.trim().parse().unwrap();
            }
        }
    }

    /// Lets a restarted child go on from its `ready` line.
    fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }

    /// Asks for the replica's digest (after `done`).
    fn digest(&mut self) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"digest\n").unwrap();
        self.line_with("digest", &mut 0)
    }

    /// Closes stdin and waits for the child to end (killed if it does not).
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let end = Instant::now() + LONG;
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > end {
                self.child.kill().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
    }
}

/// How long a child may say nothing before the test fails.
const CHILD_SILENCE_MAX: Duration = Duration::from_secs(60);

/// The survivors' load: per survivor, commits that returned `Ok`, and the first `Ok` of a
/// transaction begun after `mark` (nanoseconds after it).
struct Load {
    oks: [AtomicU64; 2],
    first_after: [AtomicU64; 2],
    mark: Mutex<Option<Instant>>,
}

impl Load {
    fn new() -> Load {
        Load {
            oks: [AtomicU64::new(0), AtomicU64::new(0)],
            first_after: [AtomicU64::new(0), AtomicU64::new(0)],
            mark: Mutex::new(None),
        }
    }

    /// Runs transfers on the two survivors (node ids `ids`) while `during` runs.
    fn run(&self, survivors: &[SymCrmem], ids: &[u16], during: impl FnOnce()) {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for (k, c) in survivors.iter().enumerate() {
                let (stop, me) = (&stop, ids[k]);
                s.spawn(move || {
                    let mut x = k as u64 + 5;
                    let mut draws = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        draws += 1;
                        let began = Instant::now();
                        let r = transfer(c, me, next(&mut x), draws.is_multiple_of(10));
                        if let Some(counter) = r.expect("transfer on a survivor") {
                            let n = self.oks[k].fetch_add(1, Ordering::Relaxed) + 1;
                            assert_eq!(counter as u64, n);
                            let mark = *self.mark.lock().unwrap();
                            if let Some(mark) = mark {
                                let first = &self.first_after[k];
                                if began > mark && first.load(Ordering::Relaxed) == 0 {
                                    let after = mark.elapsed().as_nanos() as u64;
                                    first.store(after, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                });
            }
            during();
            stop.store(true, Ordering::Relaxed);
        });
    }

    /// Marks now (the fault) and waits until each survivor committed `more` after it.
    fn mark_and_wait(&self, more: u64) {
        *self.mark.lock().unwrap() = Some(Instant::now());
        let at = [0, 1].map(|k| self.oks[k].load(Ordering::Relaxed));
        let end = Instant::now() + Duration::from_secs(30);
        while (0..2).any(|k| self.oks[k].load(Ordering::Relaxed) < at[k] + more) {
            assert!(
                Instant::now() < end,
                "the survivors stopped committing: {:?} since {at:?}",
                self.oks
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn first_ms(&self) -> [f64; 2] {
        [0, 1].map(|k| self.first_after[k].load(Ordering::Relaxed) as f64 / 1e6)
    }

    /// Checks the survivors after the fault: the invariant, equal replicas, every commit of
    /// theirs that returned Ok; their sums.
    fn check(&self, survivors: &[SymCrmem], ids: &[u16]) -> Sums {
        let a = assert_invariant(&survivors[0], "survivor 0");
        let b = assert_invariant(&survivors[1], "survivor 1");
        assert_eq!(a.digest, b.digest, "the survivors' replicas differ");
        for (k, &id) in ids.iter().enumerate() {
            assert_eq!(
                a.counters[id as usize],
                self.oks[k].load(Ordering::Relaxed) as i64
            );
        }
        a
    }
}

/// Sleeps a few milliseconds, more or fewer from run to run: the fault then strikes the
/// child at a point of its transaction that varies.
fn jitter() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    std::thread::sleep(Duration::from_micros(u64::from(nanos % 20_000)));
}

/// No commit of the victim's that returned Ok is lost, and the child, which commits one at a
/// time, has at most one more on the survivors than it printed.
fn assert_victims_commits(held: i64, acked: i64) {
    assert!(
        held >= acked,
        "the child's commit {acked} returned Ok but the survivors hold {held}"
    );
    assert!(held <= acked + 1, "{held} commits held, {acked} printed");
}

/// The returned node catches up: its replica equals the survivors' at once, and again
/// after it committed 50 more (which count on from what the survivors held).
fn check_return(node: &mut Node, survivors: &[SymCrmem], ready: String, held: i64, victim: u16) {
    let a = sums(&survivors[0]);
    assert_eq!(ready, format!("{:x}", a.digest), "the recovered replica");
    node.go();
    node.line_with("done", &mut 0);
    let digest = node.digest();
    let a = assert_invariant(&survivors[0], "survivor 0 at the end");
    let b = assert_invariant(&survivors[1], "survivor 1 at the end");
    assert_eq!(a.digest, b.digest);
    assert_eq!(
        digest,
        format!("{:x}", a.digest),
        "the child's replica at the end"
    );
    assert_eq!(a.counters[victim as usize], held + 50);
}

#[test]
fn kill_9_of_a_node_loses_no_acknowledged_commit() {
    kill_9(22, 2, false);
}

/// The same with every node keeping the locks other homes granted it: the view change frees
/// the dead node's, the survivors' are recalled as before.
#[test]
fn kill_9_of_a_node_keeping_locks_loses_no_acknowledged_commit() {
    kill_9(27, 2, true);
}

/// Node 0 made the group and is the home of the accounts and the history total: both
/// the group's and CRMem's roles move.
#[test]
fn kill_9_of_node_0_moves_its_homes_and_loses_no_acknowledged_commit() {
    kill_9(23, 0, false);
}

/// `victim` runs in a child process, killed with SIGKILL mid-load and restarted with
/// `recover`; the two other nodes run in this process.
fn kill_9(server: u16, victim: u16, keep: bool) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ids: Vec<u16> = (0..NODES as u16).filter(|&k| k != victim).collect();
    let mut node = Node::spawn(server, victim, false, keep);
    let survivors = open_all(server, &ids, Handlers::Engine, keep);
    let mut acked = 0i64;
    node.line_with("ready", &mut acked);
    let load = Load::new();
    load.run(&survivors, &ids, || {
        // Mid-load: the child has committed a few hundred.
        while acked < 300 {
            node.line_with("c", &mut acked);
        }
        jitter();
        node.child.kill().unwrap();
        load.mark_and_wait(100);
        node.child.wait().unwrap();
        node.drain(&mut acked);
    });
    let [m0, m1] = load.first_ms();
    eprintln!("kill -9 to the survivors' first commits: {m0:.0} ms and {m1:.0} ms");
    let a = load.check(&survivors, &ids);
    let held = a.counters[victim as usize];
    eprintln!("the killed node printed {acked} commits; the survivors hold {held}");
    assert_victims_commits(held, acked);
    // Kept locks were taken, and recalled, on the survivors (none when they are returned).
    let hits: u64 = survivors.iter().map(|c| c.counters().cache_hits).sum();
    assert_eq!(hits > 0, keep, "{hits} ranges from kept locks");
    let t1 = Instant::now();
    let mut node = Node::spawn(server, victim, true, keep);
    let ready = node.line_with("ready", &mut 0);
    eprintln!(
        "the restarted child recovered {:?} after it was started",
        t1.elapsed()
    );
    check_return(&mut node, &survivors, ready, held, victim);
    node.finish();
}

/// A node whose process stops (SIGSTOP) for longer than the failure detector's silence is
/// left out by the others, who go on; when it runs again it finds itself expelled (its
/// messages of the old view are refused), serves no more, and comes back with `recover`.
#[test]
fn a_stopped_node_is_expelled_and_comes_back_with_recover() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (server, victim) = (25, 1);
    let ids: Vec<u16> = (0..NODES as u16).filter(|&k| k != victim).collect();
    let mut node = Node::spawn(server, victim, false, false);
    let survivors = open_all(server, &ids, Handlers::Engine, false);
    let mut acked = 0i64;
    node.line_with("ready", &mut acked);
    let load = Load::new();
    let signal = |sig: &str| {
        let pid = node.child.id().to_string();
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success(), "kill {sig} {pid}");
    };
    load.run(&survivors, &ids, || {
        while acked < 200 {
            node.line_with("c", &mut acked);
        }
        jitter();
        signal("-STOP");
        load.mark_and_wait(100);
    });
    let [m0, m1] = load.first_ms();
    eprintln!("SIGSTOP to the survivors' first commits: {m0:.0} ms and {m1:.0} ms");
    let a = load.check(&survivors, &ids);
    let held = a.counters[victim as usize];
    let t1 = Instant::now();
    signal("-CONT");
    // A commit in flight when it stopped may still return Ok (the survivors acknowledged
    // it before): `acked` follows.
    node.line_with("expelled", &mut acked);
    eprintln!(
        "the stopped node knew itself expelled {:?} after it ran again",
        t1.elapsed()
    );
    eprintln!("the stopped node printed {acked} commits; the survivors hold {held}");
    assert_victims_commits(held, acked);
    let b = load.check(&survivors, &ids);
    assert_eq!(
        a.digest, b.digest,
        "the expelled node changed the survivors' replicas"
    );
    let ready = node.line_with("ready", &mut 0);
    check_return(&mut node, &survivors, ready, held, victim);
    node.finish();
}
