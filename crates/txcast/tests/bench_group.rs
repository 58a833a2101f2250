//! `txcast bench group --cases delay` end to end: the two yardsticks (the raw round trip and
//! the raw fan-out of each group size) and the group rows are all measured, and each group
//! row is compared with the fan-out of its size.

use std::process::Command;
use std::sync::Mutex;

/// The benchmark's members have fixed addresses: one run at a time.
static ONE_RUN: Mutex<()> = Mutex::new(());

fn one_run() -> std::sync::MutexGuard<'static, ()> {
    ONE_RUN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn the_delay_experiment_measures_the_group_against_both_yardsticks() {
    let _one = one_run();
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "group",
            "--cases",
            "delay",
            "--sizes",
            "3,4",
            "--bytes",
            "0",
            "--methods",
            "pb",
            "--iterations",
            "300",
            "--warmup",
            "30",
        ])
        .output()
        .expect("run txcast bench group");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    for case in [
        "raw-udp-blocking",
        "raw-udp-fanout-n3",
        "raw-udp-fanout-n4",
        "group-pb-n3",
        "group-pb-n4",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(case))
            .unwrap_or_else(|| panic!("no row {case} in:\n{stdout}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1], "0", "bytes of {case}");
        assert_eq!(cells[2], "300", "samples of {case}");
        let p50: f64 = cells[4].parse().expect("p50");
        assert!(p50 > 0.0, "{case}: p50 {p50}");
    }
    for n in [3, 4] {
        let line = format!("group-pb-n{n} 0 B / raw-udp-fanout-n{n}: p50 ");
        assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    }
}

/// Runs `txcast bench group <args> --json`; every stdout line must be a JSON object.
fn group_json(args: &[&str]) -> Vec<serde_json::Value> {
    let _one = one_run();
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["bench", "group"])
        .args(args)
        .arg("--json")
        .output()
        .expect("run txcast bench group");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The JSON line of `case` at `bytes`.
fn line<'a>(lines: &'a [serde_json::Value], case: &str, bytes: u64) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| l["case"] == case && l["bytes"] == bytes)
        .unwrap_or_else(|| panic!("no {case} at {bytes} B in {lines:?}"))
}

/// Paper 003 Figures 4 and 5: the throughput case sweeps group sizes and methods, and its
/// messages take the size asked for.
#[test]
fn the_throughput_case_sweeps_methods_and_group_sizes() {
    let lines = group_json(&[
        "--cases",
        "throughput",
        "--methods",
        "pb,bb",
        "--throughput-sizes",
        "2,3",
        "--throughput-bytes",
        "0",
        "--packing",
        "off",
        "--seconds",
        "1",
    ]);
    for case in [
        "group-n2-pack-off",
        "group-n3-pack-off",
        "group-bb-n2-pack-off",
        "group-bb-n3-pack-off",
        "group-bb-n3-pack-off-slowest-sender",
    ] {
        let l = line(&lines, case, 0);
        assert_eq!(l["kind"], "throughput", "{l}");
        assert!(l["msgs_per_s"].as_f64().expect("msgs_per_s") > 0.0, "{l}");
    }
    assert!(
        !lines
            .iter()
            .any(|l| l["case"].as_str().is_some_and(|c| c.contains("pack-on"))),
        "packing on was not asked for: {lines:?}"
    );
}

/// Paper 003 Figure 8: the resilience case at every message size asked for.
#[test]
fn the_resilience_case_takes_message_sizes() {
    let lines = group_json(&[
        "--cases",
        "resilience",
        "--resilience",
        "1",
        "--resilience-bytes",
        "0,2048",
        "--bytes",
        "0",
        "--iterations",
        "40",
        "--warmup",
        "5",
    ]);
    for b in [0, 2048] {
        let l = line(&lines, "resilience-r1-n2", b);
        assert_eq!(l["count"], 40, "{l}");
        assert!(l["p50_ns"].as_f64().expect("p50_ns") > 0.0, "{l}");
    }
}

/// Bad values are refused before anything runs, with a usage error, not a panic.
#[test]
fn bad_sweep_values_are_usage_errors() {
    for args in [
        &["--packing", "sometimes"][..],
        &["--throughput-sizes", "100000"],
        &["--resilience-bytes", "99999999999"],
        &["--methods", "xx"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
            .args(["bench", "group"])
            .args(args)
            .output()
            .expect("run txcast bench group");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
