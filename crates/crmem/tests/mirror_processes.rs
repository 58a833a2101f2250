//! The mirror configuration across processes, through the public API: the primary runs in a
//! child process and is killed with SIGKILL in the middle of its load. Every commit that
//! returned to it is on the backup, which takes over and serves on; the old primary, started
//! again, recovers from it and ends with the same memory. This runs the real path (two
//! processes, the link, the heartbeat detector, the takeover); the window in which a broken
//! rule would lose a commit is a few microseconds, so the rule itself is checked by `txcast
//! sim crmem`, which fails at once when a commit completes before its backups have it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use txcast_crmem::{Crmem, CrmemConfig, LockMapping, Mode, Role};
use txcast_proto::Address;

const LONG: Duration = Duration::from_secs(10);
/// Records the load writes in turn; the last one holds the number of the newest transaction.
const RECORDS: u32 = 40;
const COUNTER: u32 = RECORDS * 8;
/// The child is killed once it has had this many commits acknowledged.
const KILL_AFTER: u64 = 300;

/// Sites 0 and 1 (two hosts on loopback), instance 3: no other test's addresses.
fn nodes() -> Vec<Address> {
    vec![Address::new(3, 0, 10, 1), Address::new(3, 1, 10, 1)]
}

fn segments() -> Vec<(usize, LockMapping)> {
    vec![(
        (COUNTER + 8) as usize,
        LockMapping::Records {
            record_bytes: 8,
            per_lock: 1,
        },
    )]
}

fn open(me: u16, primary: u16, recover: bool) -> Crmem {
    let cfg = CrmemConfig {
        primary,
        recover,
        ..CrmemConfig::new(nodes(), me)
    };
    Crmem::open(cfg, &segments()).expect("open")
}

/// A cluster of one node (instance 3, site 2) logging to `dir`: no backup, the disk only.
fn open_alone(dir: &std::path::Path) -> Crmem {
    let cfg = CrmemConfig {
        disk: Some(dir.to_path_buf()),
        ..CrmemConfig::new(vec![Address::new(3, 2, 10, 1)], 0)
    };
    Crmem::open(cfg, &segments()).expect("open")
}

/// The disk test's directory, named by the test process (the child inherits it).
fn disk_dir() -> std::path::PathBuf {
    std::env::var_os("TXCAST_CRMEM_DISK")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("txcast-crmem-kill-{}", std::process::id()))
        })
}

fn u64_at(m: &[u8], at: u32) -> u64 {
    u64::from_le_bytes(m[at as usize..at as usize + 8].try_into().unwrap())
}

/// Transaction `i`: record `i % RECORDS` and the counter both become `i`.
fn transaction(c: &Crmem, i: u64) -> Result<u64, txcast_crmem::CrmemError> {
    let t = c.begin(LONG)?;
    let rec = (i % RECORDS as u64) as u32 * 8;
    for off in [rec, COUNTER] {
        c.set_range(t, 0, off, 8, Mode::Write)?;
        c.write(t, 0, off, 8, |m| m.copy_from_slice(&i.to_le_bytes()))?;
    }
    c.commit(t, LONG)
}

/// FNV-1a over a segment.
fn digest(m: &[u8]) -> u64 {
    txcast_proto::fnv::Fnv64::of(m)
}

/// The child's part, when asked: `primary` runs transactions 1, 2, ... printing each one
/// whose commit returned, until it is killed; `recover` restarts node 0 as a backup of node
/// 1, says when it has recovered, and answers each line on stdin with its seq and digest.
fn child_if_asked() {
    let Ok(role) = std::env::var("TXCAST_CRMEM_CHILD") else {
        return;
    };
    let mut out = std::io::stdout();
    match role.as_str() {
        "primary" => {
            let c = open(0, 0, false);
            let end = Instant::now() + Duration::from_secs(60);
            let mut i = 1;
            while Instant::now() < end {
                transaction(&c, i).expect("commit");
                writeln!(out, "committed {i}").unwrap();
                out.flush().unwrap();
                i += 1;
            }
        }
        "recover" => {
            let c = open(0, 1, true);
            let end = Instant::now() + LONG;
            while !matches!(c.role(), Role::Backup { primary: 1 }) {
                assert!(Instant::now() < end, "no recovery: {:?}", c.role());
                std::thread::sleep(Duration::from_millis(1));
            }
            writeln!(out, "recovered").unwrap();
            out.flush().unwrap();
            for line in std::io::stdin().lock().lines() {
                if line.is_err() {
                    break;
                }
                let m = c.snapshot_segment(0).unwrap();
                writeln!(out, "state {} {}", c.seq(), digest(&m)).unwrap();
                out.flush().unwrap();
            }
        }
        "disk" => {
            let c = open_alone(&disk_dir());
            let mut i = 1;
            loop {
                transaction(&c, i).expect("commit");
                writeln!(out, "committed {i}").unwrap();
                out.flush().unwrap();
                i += 1;
            }
        }
        other => panic!("unknown child role {other}"),
    }
    std::process::exit(0);
}

fn spawn(test: &str, role: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1", "-q"])
        .env("TXCAST_CRMEM_CHILD", role)
        .env("TXCAST_CRMEM_DISK", disk_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// The next line of the child's that starts with `prefix` (the test harness prints others).
fn line_with(out: &mut BufReader<ChildStdout>, prefix: &str) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(rest) = line.trim().strip_prefix(prefix) {
            return Some(rest.trim().to_string());
        }
    }
}

#[test]
fn kill_9_of_the_primary_loses_no_acknowledged_commit_and_it_recovers() {
    const TEST: &str = "kill_9_of_the_primary_loses_no_acknowledged_commit_and_it_recovers";
    child_if_asked();
    let b = open(1, 0, false);
    let (mut child, mut out) = spawn(TEST, "primary");
    let mut acked = 0;
    while acked < KILL_AFTER {
        acked = line_with(&mut out, "committed")
            .expect("the primary ended early")
            .parse()
            .unwrap();
    }
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    // What it printed before it died was acknowledged too.
    while let Some(n) = line_with(&mut out, "committed") {
        acked = n.parse().unwrap();
    }
    while !matches!(b.role(), Role::Primary { .. }) {
        assert!(killed.elapsed() < LONG, "no takeover: {:?}", b.role());
        std::thread::sleep(Duration::from_millis(1));
    }
    let took_over = killed.elapsed();
    // Every acknowledged transaction is there: the counter is at least the last one, and
    // each of the last RECORDS acknowledged left its record at least as new as itself.
    let m = b.snapshot_segment(0).unwrap();
    let newest = u64_at(&m, COUNTER);
    assert!(newest >= acked, "acknowledged {acked}, backup has {newest}");
    // One commit a transaction, each applied whole: the last RECORDS transactions' records
    // hold exactly their numbers.
    assert_eq!(b.seq(), newest);
    for i in newest.saturating_sub(RECORDS as u64 - 1).max(1)..=newest {
        let rec = (i % RECORDS as u64) as u32 * 8;
        assert_eq!(u64_at(&m, rec), i, "transaction {i}");
    }
    // The backup serves on, alone.
    let mut next = newest + 1;
    for _ in 0..50 {
        transaction(&b, next).unwrap();
        next += 1;
    }
    let served = killed.elapsed();
    // The old primary comes back, recovers from the new one, and follows its commits.
    let (mut child, mut out) = spawn(TEST, "recover");
    line_with(&mut out, "recovered").expect("the restarted node did not recover");
    for _ in 0..50 {
        transaction(&b, next).unwrap();
        next += 1;
    }
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "state").unwrap();
    let state = line_with(&mut out, "state").expect("no state from the restarted node");
    let m = b.snapshot_segment(0).unwrap();
    assert_eq!(state, format!("{} {}", b.seq(), digest(&m)));
    drop(stdin);
    assert!(child.wait().unwrap().success());
    println!(
        "killed after {acked} acknowledged commits; backup took over in {:.0} ms and had committed 50 more {:.0} ms after the kill",
        took_over.as_secs_f64() * 1e3,
        served.as_secs_f64() * 1e3
    );
}

/// A node alone with a disk log, killed with SIGKILL mid-load (perhaps mid-write): opened
/// again on its directory, it holds every commit that returned to it, and nothing newer than
/// the log's last whole commit.
#[test]
fn kill_9_of_a_disk_logged_node_loses_no_acknowledged_commit() {
    const TEST: &str = "kill_9_of_a_disk_logged_node_loses_no_acknowledged_commit";
    child_if_asked();
    let dir = disk_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let (mut child, mut out) = spawn(TEST, "disk");
    let mut acked = 0;
    while acked < KILL_AFTER {
        acked = line_with(&mut out, "committed")
            .expect("the node ended early")
            .parse()
            .unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    while let Some(n) = line_with(&mut out, "committed") {
        acked = n.parse().unwrap();
    }
    let c = open_alone(&dir);
    let m = c.snapshot_segment(0).unwrap();
    let newest = u64_at(&m, COUNTER);
    assert!(
        newest >= acked,
        "acknowledged {acked}, the log has {newest}"
    );
    assert_eq!(c.seq(), newest, "one commit a transaction");
    for i in newest.saturating_sub(RECORDS as u64 - 1).max(1)..=newest {
        let rec = (i % RECORDS as u64) as u32 * 8;
        assert_eq!(u64_at(&m, rec), i, "transaction {i}");
    }
    // It serves on from there.
    transaction(&c, newest + 1).unwrap();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
