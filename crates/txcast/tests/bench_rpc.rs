//! `txcast bench rpc` end to end, briefly: every row is measured and compared with the raw
//! UDP round trip of the same run.

use std::process::Command;

#[test]
fn the_rpc_benchmark_measures_every_case_against_the_yardstick() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "rpc",
            "--iterations",
            "300",
            "--warmup",
            "30",
            "--servers",
            "1,3",
            "--multicast-iterations",
            "100",
        ])
        .output()
        .expect("run txcast bench rpc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    let rows = [
        ("raw-udp-blocking", "300"),
        ("txcast-local-park", "300"),
        ("txcast-remote-park", "300"),
        ("rpc-null-local-park", "300"),
        ("rpc-null-remote-park", "300"),
        ("rpc-null-local-engine", "300"),
        ("rpc-null-remote-engine", "300"),
        ("rpc-null-local-engine-park", "300"),
        ("rpc-null-remote-engine-park", "300"),
        ("rpc-multicast-first-n1", "100"),
        ("rpc-multicast-majority-n3", "100"),
        ("rpc-multicast-all-n3", "100"),
    ];
    for (case, n) in rows {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(case))
            .unwrap_or_else(|| panic!("no row {case} in:\n{stdout}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[2], n, "samples of {case}");
        let p50: f64 = cells[4].parse().expect("p50");
        assert!(p50 > 0.0, "{case}");
        let ratio: f64 = cells[9].parse().expect("p50 ratio");
        assert!(ratio > 0.0, "{case} has a ratio to the yardstick");
    }
}
