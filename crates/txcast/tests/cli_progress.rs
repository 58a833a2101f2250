//! Progress of long runs when stderr is not a terminal: plain lines at every tenth, with the
//! count, the rate and the time left (the bar itself needs a terminal).

use std::process::Command;

#[test]
fn a_simulator_sweep_reports_its_progress_in_plain_lines() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["sim", "oracle", "--seeds", "20", "--threads", "2"])
        .output()
        .expect("run txcast");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("sim oracle:")).collect();
    // One line per tenth of the run, the last at 20 / 20; no control characters.
    assert_eq!(lines.len(), 10, "{err}");
    assert!(
        lines[4].contains("10 / 20 seeds (0 failures)"),
        "{}",
        lines[4]
    );
    assert!(lines[9].contains("20 / 20 seeds"), "{}", lines[9]);
    for l in &lines {
        assert!(l.contains("seeds/s") && l.ends_with("s left"), "{l}");
        assert!(!l.contains('\u{1b}') && !l.contains('\r'), "{l:?}");
    }
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("oracle simulation: 20 seeds from 0, 0 failures"),
        "{summary}"
    );
}

/// Checks a `--json` benchmark run: it succeeded and its stdout is only JSON lines of
/// `bench`; returns its stderr.
fn json_only_on_stdout(out: &std::process::Output, bench: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "{stderr}");
    for l in stdout.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}"));
        assert_eq!(v["bench"], bench, "{l}");
    }
    stderr
}

/// A benchmark run with stderr not a terminal: no bar, its per-point lines whole on stderr,
/// and stdout only the JSON lines.
#[test]
fn a_benchmark_without_a_terminal_keeps_stdout_to_its_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "multicast",
            "--iterations",
            "200",
            "--warmup",
            "20",
            "--bytes",
            "20",
            "--dests",
            "1,4",
            "--methods",
            "naive-sendto,txcast-fanout",
            "--json",
        ])
        .output()
        .expect("run txcast");
    let stderr = json_only_on_stdout(&out, "multicast");
    // One line per point, each begun and ended on the same line.
    let points: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("multicast ["))
        .collect();
    assert_eq!(points.len(), 4, "{stderr}");
    for (i, l) in points.iter().enumerate() {
        assert!(l.contains(&format!("[{}/4]", i + 1)), "{l}");
        assert!(l.contains(" calls ... ") && l.contains("µs/call"), "{l}");
    }
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\r'),
        "{stderr:?}"
    );
}

/// `bench group` with stderr piped: its per-point lines on stderr with no bar (no escape codes,
/// no carriage returns), and stdout only its JSON lines.
#[test]
fn the_group_benchmark_without_a_terminal_keeps_stdout_to_its_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "group",
            "--cases",
            "delay",
            "--sizes",
            "3",
            "--methods",
            "pb",
            "--bytes",
            "0",
            "--iterations",
            "100",
            "--warmup",
            "10",
            "--json",
        ])
        .output()
        .expect("run txcast");
    let stderr = json_only_on_stdout(&out, "group");
    // The yardsticks' and the group's lines, whole.
    for point in [
        "  raw-udp-blocking ",
        "  raw-udp-fanout n=3 ",
        "  group-pb n=3 ",
    ] {
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(point) && l.contains("p99")),
            "{point}: {stderr}"
        );
    }
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\r'),
        "{stderr:?}"
    );
}
