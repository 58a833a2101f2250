//! Symmetric CRMem with its membership from a txcast group (`open_with_membership`), through
//! the public API on loopback: three nodes on sites 0, 1 and 2 run TpcB transfers; one node
//! goes (dropped in this process, or its process killed with SIGKILL); the survivors see the
//! group's view change and go on committing; the node comes back with `recover` and catches
//! up through the snapshot.
//!
//! Every transfer also adds one to its node's counter record, read in the transaction, so a
//! node knows how many of its commits returned `Ok`: none of them may be lost.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

fn open(server: u16, me: u16, recover: bool) -> SymCrmem {
    open_with(server, me, recover, Handlers::Engine)
}

fn open_with(server: u16, me: u16, recover: bool, handlers: Handlers) -> SymCrmem {
    let cfg = SymCrmemConfig {
        recover,
        handlers,
        ..SymCrmemConfig::new(nodes(server), me)
    };
    let members = MembershipConfig::new(&nodes(server));
    SymCrmem::open_with_membership(cfg, &segments(), members).expect("open with membership")
}

/// Opens every node of `mes` at once (a fresh start returns once all are in the group).
fn open_all(server: u16, mes: &[u16], handlers: Handlers) -> Vec<SymCrmem> {
    std::thread::scope(|s| {
        let hs: Vec<_> = mes
            .iter()
            .map(|&me| s.spawn(move || open_with(server, me, false, handlers)))
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

fn drop_and_return(server: u16, handlers: Handlers) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const EACH: usize = 60;
    let mut all = open_all(server, &[0, 1, 2], handlers);
    std::thread::scope(|s| {
        for (k, c) in all.iter().enumerate() {
            s.spawn(move || run(c, k as u16, k as u64 + 1, EACH));
        }
    });
    let before = all[0].view();
    // Node 2's process is gone: its module host and group port close without a word.
    let t0 = Instant::now();
    drop(all.pop());
    let survivors = all;
    std::thread::scope(|s| {
        for (k, c) in survivors.iter().enumerate() {
            s.spawn(move || run(c, k as u16, k as u64 + 11, EACH));
        }
    });
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
    let back = open_with(server, 2, true, handlers);
    eprintln!(
        "node 2 recovered {:?} after it was opened again",
        t1.elapsed()
    );
    let c = assert_invariant(&back, "node 2 recovered");
    assert_eq!(c.digest, a.digest, "the recovered replica differs");
    let mut all = survivors;
    all.push(back);
    std::thread::scope(|s| {
        for (k, c) in all.iter().enumerate() {
            s.spawn(move || run(c, k as u16, k as u64 + 21, EACH / 2));
        }
    });
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

/// One node in a child process (`CHILD` is `server,node`): opens (fresh, or restarted with `recover`), prints `ready`,
/// then its replica's digest; commits transfers, printing `c <counter>` after each that
/// returned `Ok`. A restarted one commits 50 and prints `done`, then answers `digest` lines
/// on stdin until stdin closes.
#[test]
#[ignore = "the child process of the kill -9 tests"]
fn symmetric_node_child() {
    let Some((server, me)) = std::env::var(CHILD).ok().and_then(|v| {
        let (s, n) = v.split_once(',')?;
        Some((s.parse::<u16>().ok()?, n.parse::<u16>().ok()?))
    }) else {
        return;
    };
    let recover = std::env::var_os(CHILD_RECOVER).is_some();
    let c = open(server, me, recover);
    let out = std::io::stdout();
    writeln!(out.lock(), "ready {:x}", sums(&c).digest).unwrap();
    let mut x = if recover { 77 } else { 3 };
    let mut done = 0;
    let mut draws = 0u64;
    while !recover || done < 50 {
        draws += 1;
        if let Ok(Some(counter)) = transfer(&c, me, next(&mut x), draws.is_multiple_of(10)) {
            writeln!(out.lock(), "c {counter}").unwrap();
            done += 1;
        }
    }
    writeln!(out.lock(), "done").unwrap();
    for line in std::io::stdin().lines() {
        if line.unwrap().trim() == "digest" {
            writeln!(out.lock(), "digest {:x}", sums(&c).digest).unwrap();
        }
    }
}

fn spawn_child(
    server: u16,
    me: u16,
    recover: bool,
) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "symmetric_node_child",
        "--nocapture",
    ])
    .env(CHILD, format!("{server},{me}"))
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if recover {
        cmd.env(CHILD_RECOVER, "1");
    }
    let mut child = cmd.spawn().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The next line of the child's that starts with `prefix`, with the prefix cut.
fn line_with(lines: &mut std::io::Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    for l in lines.by_ref() {
        let l = l.expect("the child's stdout");
        if let Some(rest) = l.strip_prefix(prefix) {
            return rest.trim().to_string();
        }
    }
    panic!("the child's process ended before a {prefix:?} line");
}

#[test]
fn kill_9_of_a_node_loses_no_acknowledged_commit() {
    kill_9(22, 2);
}

/// Node 0 made the group and is the home of the accounts and the history total: both
/// the group's and CRMem's roles move.
#[test]
fn kill_9_of_node_0_moves_its_homes_and_loses_no_acknowledged_commit() {
    kill_9(23, 0);
}

/// `victim` runs in a child process, killed with SIGKILL mid-load and restarted with
/// `recover`; the two other nodes run in this process.
fn kill_9(server: u16, victim: u16) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ids: Vec<u16> = (0..NODES as u16).filter(|&k| k != victim).collect();
    let (mut child, mut lines) = spawn_child(server, victim, false);
    let survivors = open_all(server, &ids, Handlers::Engine);
    line_with(&mut lines, "ready");
    let stop = AtomicBool::new(false);
    let killed_at = Mutex::new(None::<Instant>);
    // Per survivor: commits that returned Ok, and the first Ok of a transaction begun
    // after the kill (nanoseconds after it).
    let oks = [AtomicU64::new(0), AtomicU64::new(0)];
    let first_after = [AtomicU64::new(0), AtomicU64::new(0)];
    let mut acked = 0i64;
    std::thread::scope(|s| {
        for (k, c) in survivors.iter().enumerate() {
            let (stop, killed_at, oks, first_after) = (&stop, &killed_at, &oks, &first_after);
            let me = ids[k];
            s.spawn(move || {
                let mut x = k as u64 + 5;
                let mut draws = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    draws += 1;
                    let began = Instant::now();
                    let r = transfer(c, me, next(&mut x), draws.is_multiple_of(10));
                    if let Some(counter) = r.expect("transfer on a survivor") {
                        oks[k].fetch_add(1, Ordering::Relaxed);
                        assert_eq!(counter as u64, oks[k].load(Ordering::Relaxed));
                        let kill = *killed_at.lock().unwrap();
                        if let Some(kill) = kill {
                            if began > kill && first_after[k].load(Ordering::Relaxed) == 0 {
                                let after = kill.elapsed().as_nanos() as u64;
                                first_after[k].store(after, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
        // Mid-load: the child has committed a few hundred.
        let end = Instant::now() + Duration::from_secs(60);
        while acked < 300 {
            assert!(Instant::now() < end, "the child committed only {acked}");
            acked = line_with(&mut lines, "c").parse().unwrap();
        }
        // At a point of the child's transaction that varies from run to run.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        std::thread::sleep(Duration::from_micros(u64::from(nanos % 20_000)));
        child.kill().unwrap();
        *killed_at.lock().unwrap() = Some(Instant::now());
        child.wait().unwrap();
        // What the child printed before it died (read to the end of its stdout).
        for l in lines.by_ref() {
            if let Some(n) = l.unwrap().strip_prefix("c ") {
                acked = n.trim().parse().unwrap();
            }
        }
        let at_kill = [0, 1].map(|k| oks[k].load(Ordering::Relaxed));
        let end = Instant::now() + Duration::from_secs(30);
        while (0..2).any(|k| oks[k].load(Ordering::Relaxed) < at_kill[k] + 100) {
            assert!(
                Instant::now() < end,
                "the survivors stopped committing: {oks:?} since {at_kill:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let ms = |k: usize| first_after[k].load(Ordering::Relaxed) as f64 / 1e6;
    eprintln!(
        "kill -9 to the survivors' first commits: {:.0} ms and {:.0} ms",
        ms(0),
        ms(1)
    );
    let a = assert_invariant(&survivors[0], "survivor 0");
    let b = assert_invariant(&survivors[1], "survivor 1");
    assert_eq!(a.digest, b.digest, "the survivors' replicas differ");
    // No commit that returned Ok is lost: the survivors' own, and the dead child's.
    for (k, &id) in ids.iter().enumerate() {
        assert_eq!(
            a.counters[id as usize],
            oks[k].load(Ordering::Relaxed) as i64
        );
    }
    let held = a.counters[victim as usize];
    eprintln!("the killed node printed {acked} commits; the survivors hold {held}");
    assert!(
        held >= acked,
        "the child's commit {acked} returned Ok but the survivors hold {held}"
    );
    // The child commits one at a time: at most one commit beyond those it printed.
    assert!(held <= acked + 1, "{held} commits held, {acked} printed");
    // The child restarts with recover: it catches up through the snapshot.
    let t1 = Instant::now();
    let (mut child, mut lines) = spawn_child(server, victim, true);
    let digest = line_with(&mut lines, "ready");
    eprintln!(
        "the restarted child recovered {:?} after it was started",
        t1.elapsed()
    );
    assert_eq!(digest, format!("{:x}", a.digest), "the recovered replica");
    line_with(&mut lines, "done");
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"digest\n")
        .unwrap();
    let digest = line_with(&mut lines, "digest");
    let a = assert_invariant(&survivors[0], "survivor 0 at the end");
    let b = assert_invariant(&survivors[1], "survivor 1 at the end");
    assert_eq!(a.digest, b.digest);
    assert_eq!(
        digest,
        format!("{:x}", a.digest),
        "the child's replica at the end"
    );
    // The restarted node's 50 commits count on from what the survivors held.
    assert_eq!(a.counters[victim as usize], held + 50);
    drop(child.stdin.take());
    let end = Instant::now() + LONG;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.wait();
}
