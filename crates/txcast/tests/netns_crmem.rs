//! A CRMem mirror across network namespaces under the kernel's packet loss and a kill -9 of
//! the primary, with an external checker (issue 23, part 2(c)).
//!
//! Each run starts `txcast crmem --chaos-log` on three hosts (node 0 the primary, 1 and 2 its
//! backups), every host dropping 5 % of what it sends and of what it receives. Node 0 runs
//! TpcB transactions; after a while it is killed with SIGKILL, a backup takes over and goes
//! on with the load, and node 0 is started again with `--recover` from the new primary.
//! When the load ends every node is stopped with SIGTERM and reports its copy, and
//! `txcast chaos crmem` reads every log, the killed incarnation's too: it must find the
//! copies identical, money conserved, no acknowledged commit lost and no transaction
//! acknowledged twice. Each run prints the commits acknowledged and the time from the kill
//! to the next acknowledged commit.
//!
//! CI runs it once. `netns_crmem_repeated` (ignored; `TXCAST_CHAOS_RUNS`, default 10)
//! repeats it for the p50/p99 of the recovery. Skipped, with one line, where namespaces
//! cannot be made.

mod netns;

use netns::{say, Cluster};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const INSTANCE: u16 = 9;
const NODES: usize = 3;
const LOSS_PER_MILLE: u32 = 50;
/// From the start of the load to the kill, then to the restart.
const KILL_AT: Duration = Duration::from_secs(3);
const DEAD_FOR: Duration = Duration::from_secs(2);
/// The load's length, from its start (whichever node is primary stops then).
const LOAD: Duration = Duration::from_secs(8);

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The number after `key` in `text` (`key 123`).
fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// One run: the checker's summary and the recovery after the kill, in ms.
fn run() -> Option<(String, f64)> {
    let started = Instant::now();
    let c = Cluster::new("netns_crmem", NODES)?;
    let bin = Path::new(env!("CARGO_BIN_EXE_txcast"));
    let config = c.path("cluster.toml");
    std::fs::write(&config, c.cluster_toml()).unwrap();
    for h in 0..NODES {
        c.loss(h, LOSS_PER_MILLE).unwrap();
    }
    let until_ms = (unix_ns() / 1_000_000) + 1_000 + LOAD.as_millis() as u64;
    let args = |node: usize, log: &str, recover_from: Option<usize>| -> Vec<String> {
        let mut a: Vec<String> = [
            "crmem",
            "--node",
            &node.to_string(),
            "--nodes",
            &NODES.to_string(),
            "--instance",
            &INSTANCE.to_string(),
            "--config",
            &config.display().to_string(),
            "--until",
            &until_ms.to_string(),
            "--chaos-log",
            &c.path(log).display().to_string(),
            "--json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(p) = recover_from {
            a.extend(["--recover".into(), "--primary".into(), p.to_string()]);
        }
        a
    };
    // The backups first, so that the primary's first commits find them.
    let mut procs: Vec<_> = (1..NODES)
        .map(|k| c.spawn(k, bin, &args(k, &format!("node-{k}.log"), None)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut primary = c.spawn(0, bin, &args(0, "node-0.log", None));
    std::thread::sleep(Duration::from_millis(700) + KILL_AT);
    let fault = unix_ns();
    primary.kill9();
    std::thread::sleep(DEAD_FOR);
    // The backup that took over logged its promotion.
    let successor = (1..NODES)
        .find(|k| {
            std::fs::read_to_string(c.path(&format!("node-{k}.log")))
                .unwrap_or_default()
                .contains(" R promoted")
        })
        .unwrap_or_else(|| {
            let tail = |name: &str| {
                let t = std::fs::read_to_string(c.path(name)).unwrap_or_default();
                let n = t.lines().count();
                let last: Vec<&str> = t.lines().rev().take(3).collect();
                format!("{name}: {n} lines, last {last:?}")
            };
            panic!(
                "no backup took over: {}; {}; {}",
                tail("node-0.log"),
                tail("node-1.log"),
                tail("node-2.log")
            )
        });
    procs.push(c.spawn(0, bin, &args(0, "node-0b.log", Some(successor))));
    let end = Duration::from_millis(until_ms.saturating_sub(unix_ns() / 1_000_000));
    std::thread::sleep(end + Duration::from_millis(500));
    for p in &procs {
        p.term();
    }
    for (i, p) in procs.into_iter().enumerate() {
        let o = p.wait_output(Duration::from_secs(20)).unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "{:?}: {out}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("\"conserved\":true"), "{out}");
        if i + 1 == successor {
            // Its host answered the successor's heartbeats with "port unreachable" once the
            // primary's process was gone: it took over on that, not on the silence.
            let n = number_after(&out.replace([',', ':'], " "), "\"peer_unreachable\"");
            assert!(n.is_some_and(|n| n >= 1.0), "{out}");
        }
    }
    let mut check = std::process::Command::new(bin);
    check.args(["chaos", "crmem"]);
    for log in ["node-0.log", "node-1.log", "node-2.log", "node-0b.log"] {
        check.arg(c.path(log));
    }
    check.args(["--fault", &format!("{fault}:0")]);
    let o = check.output().unwrap();
    let report = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "the checker found violations:\n{report}"
    );
    assert!(report.contains("3 ended with their copy"), "{report}");
    let acked = number_after(&report, "ended with their copy;").unwrap_or(0.0);
    assert!(acked > 100.0, "{report}");
    let recovery = number_after(&report, "committing again after")
        .unwrap_or_else(|| panic!("no commit after the kill:\n{report}"));
    let promoted = number_after(&report, "a backup promoted after").unwrap_or(f64::NAN);
    let summary = report.lines().find(|l| l.contains("nodes,")).unwrap_or("");
    say(&format!(
        "netns_crmem: {summary}; {:.1} % loss per host and direction; node 0 killed, node {successor} took over \
         {promoted:.1} ms after the kill and committed again after {recovery:.1} ms; node 0 recovered from node {successor}; {:.1} s in all",
        LOSS_PER_MILLE as f64 / 10.0,
        started.elapsed().as_secs_f64()
    ));
    Some((summary.to_string(), recovery))
}

#[test]
fn a_crmem_mirror_loses_no_acknowledged_commit_across_namespaces() {
    run();
}

#[test]
#[ignore]
fn netns_crmem_repeated() {
    let runs: usize = std::env::var("TXCAST_CHAOS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut rec = Vec::new();
    for _ in 0..runs {
        match run() {
            Some((_, r)) => rec.push(r),
            None => return,
        }
    }
    rec.sort_by(f64::total_cmp);
    let at = |p: f64| rec[((p * rec.len() as f64).ceil() as usize).clamp(1, rec.len()) - 1];
    say(&format!(
        "netns_crmem: {runs} runs, committing again after the kill: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        at(0.5),
        at(0.99),
        rec[rec.len() - 1]
    ));
}
