//! `txcast bench long` end to end, briefly: every case measures every length it can carry,
//! against TCP in the same run.

use std::process::Command;

#[test]
fn the_long_message_benchmark_measures_every_case_against_tcp() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "long",
            "--bytes",
            "64,100000",
            "--iterations-max",
            "20",
        ])
        .output()
        .expect("run txcast bench long");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    for (case, lengths) in [
        ("tcp", &["64", "100000"][..]),
        ("raw-udp", &["64"][..]),
        ("raw-udp-f60000", &["64", "100000"][..]),
        ("raw-udp-f60000-spin", &["64", "100000"][..]),
        ("txcast-local-f8000", &["64", "100000"][..]),
        ("txcast-remote-f8000", &["64", "100000"][..]),
        ("txcast-local-f60000", &["64", "100000"][..]),
        ("txcast-remote-f60000", &["64", "100000"][..]),
    ] {
        for len in lengths {
            let row = stdout
                .lines()
                .find(|l| {
                    let mut w = l.split_whitespace();
                    w.next() == Some(case) && w.next() == Some(len)
                })
                .unwrap_or_else(|| panic!("no row {case} {len} in:\n{stdout}"));
            let p50: f64 = row.split_whitespace().nth(4).unwrap().parse().unwrap();
            assert!(p50 > 0.0, "{case} {len}");
        }
    }
    assert!(stdout.contains("throughput at p50"), "{stdout}");
}
