//! `txcast soak` through the built binary: a short run samples every child and judges it
//! flat; a run whose member dies is judged failed, and an interrupted run stops its children.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Parses a `--json` run's stdout: its samples and its verdict (every line must be JSON).
fn parse(stdout: &str) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut samples = Vec::new();
    let mut verdict = None;
    for l in stdout.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}"));
        if let Some(s) = v.get("sample") {
            assert!(verdict.is_none(), "a sample after the verdict: {l}");
            samples.push(s.clone());
        } else {
            verdict = Some(v["verdict"].clone());
        }
    }
    (samples, verdict.expect("a verdict line"))
}

/// Whether process `pid` still exists (a reaped child does not).
fn alive(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_short_soak_samples_every_process_and_judges_it_flat() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "soak",
            "--seconds",
            "16",
            "--sample-every",
            "2",
            "--instance",
            "19",
            "--json",
        ])
        .output()
        .expect("run txcast soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let (samples, verdict) = parse(&stdout);
    assert!(samples.len() >= 7, "{stdout}");
    let names = ["server", "member0", "member1", "member2", "client"];
    for s in &samples {
        let procs = s["procs"].as_array().expect("procs");
        assert_eq!(procs.len(), names.len(), "{s}");
        for (p, name) in procs.iter().zip(names) {
            assert_eq!(p["name"], name, "{s}");
            assert!(p["rss_kib"].as_u64().unwrap() > 1024, "{s}");
            assert!(p["fds"].as_u64().unwrap() >= 3, "{s}");
        }
    }
    // The group delivered and the client was answered from one sample to the last.
    let count = |s: &serde_json::Value, proc: usize, key: &str| s["procs"][proc][key].as_u64();
    let (first, last) = (&samples[1], samples.last().unwrap());
    for m in 1..=3 {
        assert!(
            count(last, m, "delivered") > count(first, m, "delivered"),
            "member{}: {first}\n{last}",
            m - 1
        );
    }
    assert!(count(last, 4, "answered") > count(first, 4, "answered"));
    assert_eq!(verdict["result"], "flat", "{verdict}");
    assert_eq!(verdict["reasons"].as_array().unwrap().len(), 0, "{verdict}");
    assert_eq!(verdict["procs"].as_array().unwrap().len(), 5, "{verdict}");
    assert!(verdict["order_checks"].as_u64().unwrap() >= 1, "{verdict}");
    // Loss was injected into every member's group packets and the client's calls.
    let lost = verdict["lost"].as_array().unwrap();
    assert_eq!(lost.len(), 4, "{verdict}");
    assert!(lost.iter().all(|n| n.as_u64().unwrap() > 0), "{verdict}");
    assert!(verdict["answered"].as_u64().unwrap() > 50, "{verdict}");
    assert_eq!(verdict["late"], 0, "{verdict}");
    assert_eq!(verdict["executed_twice"], 0, "{verdict}");
    assert!(verdict["executed"].as_u64() >= verdict["answered"].as_u64());
    // Every child is gone.
    for p in last["procs"].as_array().unwrap() {
        assert!(!alive(p["pid"].as_u64().unwrap()), "{p}");
    }
}

/// Starts a `--json` soak of 60 s, waits for its first sample, calls `act` with that sample,
/// and returns the run's exit code, samples and verdict.
fn disturbed(
    instance: &str,
    act: impl FnOnce(&serde_json::Value, u32),
) -> (Option<i32>, Vec<serde_json::Value>, serde_json::Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "soak",
            "--seconds",
            "60",
            "--sample-every",
            "1",
            "--instance",
            instance,
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn txcast soak");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).expect("a first sample");
    let v: serde_json::Value = serde_json::from_str(&first).expect("a JSON sample");
    let samples = vec![v["sample"].clone()];
    act(&samples[0], child.id());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let (mut more, verdict) = parse(&rest);
    let mut samples = samples;
    samples.append(&mut more);
    (status.code(), samples, verdict)
}

#[test]
fn a_member_that_dies_fails_the_soak_and_the_others_are_stopped() {
    let (code, samples, verdict) = disturbed("18", |s, _| {
        let pid = s["procs"][2]["pid"].as_u64().unwrap();
        assert_eq!(s["procs"][2]["name"], "member1");
        // SAFETY: a kill(2) of a process this test's child started.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    });
    assert_eq!(code, Some(1), "{verdict}");
    assert_eq!(verdict["result"], "fail", "{verdict}");
    let reasons = verdict["reasons"].to_string();
    assert!(reasons.contains("member1 ended early"), "{verdict}");
    assert!(verdict["seconds"].as_u64().unwrap() < 30, "{verdict}");
    for p in samples[0]["procs"].as_array().unwrap() {
        assert!(!alive(p["pid"].as_u64().unwrap()), "{p}");
    }
}

#[test]
fn an_interrupted_soak_stops_its_children_and_fails() {
    let (code, samples, verdict) = disturbed("17", |_, soak| {
        std::thread::sleep(Duration::from_secs(2));
        // SAFETY: a kill(2) of this test's child.
        assert_eq!(unsafe { libc::kill(soak as i32, libc::SIGINT) }, 0);
    });
    assert_eq!(code, Some(1), "{verdict}");
    assert_eq!(verdict["result"], "fail", "{verdict}");
    assert!(
        verdict["reasons"].to_string().contains("interrupted"),
        "{verdict}"
    );
    // Stopped in order: each child ended by itself (none killed), and all are gone.
    assert!(
        !verdict["reasons"].to_string().contains("killed"),
        "{verdict}"
    );
    for p in samples[0]["procs"].as_array().unwrap() {
        assert!(!alive(p["pid"].as_u64().unwrap()), "{p}");
    }
}
