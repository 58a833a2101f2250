//! A group of member processes over UDP on loopback: one is killed with SIGKILL mid-run, the
//! others rebuild the group and finish, and every delivery log agrees.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn spawn(
    instance: u16,
    site: u16,
    members: usize,
    messages: u64,
    log: &str,
    rebuild: bool,
) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_txcast"));
    c.args([
        "__group-member",
        "--instance",
        &instance.to_string(),
        "--site",
        &site.to_string(),
        "--members",
        &members.to_string(),
        "--messages",
        &messages.to_string(),
        "--log",
        log,
        "--deadline-ms",
        "40000",
    ]);
    if rebuild {
        c.arg("--expect-rebuild");
    }
    c.spawn().expect("spawn member")
}

fn read_log(path: &str) -> BTreeMap<u64, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (seq, rest) = l.split_once(' ')?;
            Some((seq.parse().ok()?, rest.to_string()))
        })
        .collect()
}

fn lines(path: &str) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

fn kill(child: &mut Child) {
    // SAFETY: sends SIGKILL to a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    let _ = child.wait();
}

fn run(instance: u16, victim: u16) {
    let dir = std::env::temp_dir().join(format!("txcast-group-{}-{instance}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = |s: u16| {
        dir.join(format!("site{s}.log"))
            .to_string_lossy()
            .into_owned()
    };
    let members = 4usize;
    let messages = 300u64;
    let mut children: Vec<(u16, Child)> = Vec::new();
    for s in 0..members as u16 {
        children.push((
            s,
            spawn(instance, s, members, messages, &log(s), s != victim),
        ));
        if s == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    // Kill the victim once it is well into the run.
    let started = Instant::now();
    while lines(&log(victim)) < 150 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let k = children.iter().position(|c| c.0 == victim).unwrap();
    kill(&mut children[k].1);
    let mut failed = Vec::new();
    for (s, c) in children.iter_mut().filter(|c| c.0 != victim) {
        let status = c.wait().unwrap();
        if !status.success() {
            failed.push(*s);
        }
    }
    assert!(
        failed.is_empty(),
        "survivors {failed:?} did not finish (logs in {dir:?})"
    );
    let logs: Vec<(u16, BTreeMap<u64, String>)> = (0..members as u16)
        .map(|s| (s, read_log(&log(s))))
        .collect();
    // Agreement: wherever two processes delivered the same sequence number, they delivered the
    // same record (the killed one included: r = 1 and one crash).
    for (i, (a, la)) in logs.iter().enumerate() {
        for (b, lb) in &logs[i + 1..] {
            for (seq, rec) in la {
                if let Some(other) = lb.get(seq) {
                    assert_eq!(rec, other, "sites {a} and {b} disagree at seq {seq}");
                }
            }
        }
    }
    // The survivors delivered exactly the same stream over the range they all saw (each from
    // its own join), with the rebuild removing the victim.
    let survivors: Vec<&BTreeMap<u64, String>> = logs
        .iter()
        .filter(|l| l.0 != victim)
        .map(|l| &l.1)
        .collect();
    let first = survivors
        .iter()
        .map(|l| *l.keys().next().unwrap())
        .max()
        .unwrap();
    let last = survivors
        .iter()
        .map(|l| *l.keys().next_back().unwrap())
        .min()
        .unwrap();
    assert!(
        last > first + 3 * messages,
        "too little in common: {first}..{last}"
    );
    for l in &survivors[1..] {
        for seq in first..=last {
            assert_eq!(
                survivors[0].get(&seq),
                l.get(&seq),
                "survivors' streams differ at seq {seq} (logs in {dir:?})"
            );
        }
    }
    let rebuilds: Vec<&String> = survivors[0]
        .values()
        .filter(|r| r.starts_with("R "))
        .collect();
    assert!(
        rebuilds.iter().any(|r| r.contains(&format!(
            "-[Address {{ instance: {instance}, site: {victim},"
        ))),
        "no rebuild record removes the victim: {rebuilds:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_member_is_removed_and_every_log_agrees() {
    run(24, 2);
}

#[test]
fn a_killed_sequencer_is_replaced_and_every_log_agrees() {
    run(25, 0);
}
