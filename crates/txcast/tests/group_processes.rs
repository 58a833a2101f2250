//! A group of member processes over UDP on loopback: one is killed with SIGKILL mid-run, the
//! others rebuild the group and finish, every delivery log agrees, and `txcast chaos check`
//! finds nothing wrong in their chaos logs.

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
    extra: &[&str],
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
        "--deliveries",
        log,
        "--deadline-ms",
        "40000",
    ]);
    if rebuild {
        c.arg("--expect-rebuild");
    }
    c.args(extra);
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

fn chaos_log(dir: &std::path::Path, s: u16) -> String {
    dir.join(format!("chaos{s}.log"))
        .to_string_lossy()
        .into_owned()
}

/// `txcast chaos check` on the members' chaos logs (the killed one's too) finds nothing.
fn chaos_check(dir: &std::path::Path, members: u16) {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["chaos", "check"])
        .args((0..members).map(|s| chaos_log(dir, s)))
        .output()
        .expect("txcast chaos check");
    assert!(
        out.status.success(),
        "txcast chaos check (logs in {dir:?}):\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Logs with nothing in them would pass too.
    let text = String::from_utf8_lossy(&out.stdout);
    let delivered: u64 = text
        .split(" distinct delivered")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(delivered > 100, "the chaos logs hold too little: {text}");
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
        let chaos = chaos_log(&dir, s);
        children.push((
            s,
            spawn(
                instance,
                s,
                members,
                messages,
                &log(s),
                s != victim,
                &["--chaos-log", &chaos],
            ),
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
    chaos_check(&dir, members as u16);
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

/// The layered protocols (paper 002) across processes: three members, one killed mid-run;
/// the survivors deliver the same messages in the same order (every member joined before the
/// first message, so every log holds the whole stream), and a view removes the victim.
fn run_ordered(instance: u16, protocol: &str, pack: &str) {
    let dir = std::env::temp_dir().join(format!("txcast-order-{}-{instance}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = |s: u16| {
        dir.join(format!("site{s}.log"))
            .to_string_lossy()
            .into_owned()
    };
    let (members, messages, victim) = (3usize, 150u64, 2u16);
    let extra = ["--protocol", protocol, "--pack", pack, "--pace-us", "1000"];
    let mut children: Vec<(u16, Child)> = Vec::new();
    for s in 0..members as u16 {
        let chaos = chaos_log(&dir, s);
        let mut extra = extra.to_vec();
        extra.extend(["--chaos-log", &chaos]);
        children.push((
            s,
            spawn(instance, s, members, messages, &log(s), false, &extra),
        ));
        if s == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let started = Instant::now();
    while lines(&log(victim)) < 100 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{protocol}/{pack}: the run never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let k = children.iter().position(|c| c.0 == victim).unwrap();
    kill(&mut children[k].1);
    for (s, c) in children.iter_mut().filter(|c| c.0 != victim) {
        assert!(
            c.wait().unwrap().success(),
            "{protocol}/{pack}: survivor {s} did not finish (logs in {dir:?})"
        );
    }
    let messages_of = |s: u16| -> Vec<String> {
        read_log(&log(s))
            .into_values()
            .filter(|l| l.starts_with("M "))
            .collect()
    };
    let a = messages_of(0);
    let b = messages_of(1);
    assert_eq!(
        a, b,
        "{protocol}/{pack}: survivors differ (logs in {dir:?})"
    );
    assert!(
        a.len() as u64 >= 2 * messages,
        "{protocol}/{pack}: {} messages",
        a.len()
    );
    let views: Vec<String> = read_log(&log(0))
        .into_values()
        .filter(|l| l.starts_with("R "))
        .collect();
    assert!(
        views.iter().any(|r| r.contains(&format!(
            "-[Address {{ instance: {instance}, site: {victim},"
        ))),
        "{protocol}/{pack}: no view removes the victim: {views:?}"
    );
    chaos_check(&dir, members as u16);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn totem_across_processes() {
    run_ordered(26, "totem", "off");
    run_ordered(27, "totem", "adaptive");
    run_ordered(28, "totem", "fixed");
}

#[test]
fn total_across_processes() {
    run_ordered(29, "total", "off");
    run_ordered(30, "total", "adaptive");
    run_ordered(31, "total", "fixed");
}

#[test]
fn dynseq_across_processes() {
    run_ordered(32, "dynseq", "off");
    run_ordered(33, "dynseq", "adaptive");
    run_ordered(34, "dynseq", "fixed");
}

#[test]
fn dynord_across_processes() {
    run_ordered(35, "dynord", "off");
    run_ordered(36, "dynord", "adaptive");
    run_ordered(37, "dynord", "fixed");
}
