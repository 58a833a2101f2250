//! `txcast bench group --cases delay` end to end: the two yardsticks (the raw round trip and
//! the raw fan-out of each group size) and the group rows are all measured, and each group
//! row is compared with the fan-out of its size.

use std::process::Command;

#[test]
fn the_delay_experiment_measures_the_group_against_both_yardsticks() {
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
