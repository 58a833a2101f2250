//! `txcast bench burst` end to end: every point of a small matrix is measured (no collapse on
//! a quiet machine at these burst lengths), JSON lines name each, and the four figures are
//! drawn.

use std::process::Command;

#[test]
fn bursts_are_measured_for_each_protocol_and_packing_and_the_figures_drawn() {
    let dir = std::env::temp_dir().join(format!("txcast-burst-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "burst",
            "--protocols",
            "sequencer,total,dynord",
            "--packs",
            "off,adaptive",
            "--m",
            "1,50",
            "--point-seconds",
            "20",
            "--json",
            "--svg",
        ])
        .arg(&dir)
        .output()
        .expect("run txcast bench burst");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    let points: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for protocol in ["sequencer", "total", "dynord"] {
        for pack in ["off", "adaptive"] {
            for exp in ["all", "one"] {
                for m in [1, 50] {
                    let point = points
                        .iter()
                        .find(|p| {
                            p["bench"] == "burst"
                                && p["protocol"] == protocol
                                && p["pack"] == pack
                                && p["experiment"] == exp
                                && p["m"] == m
                        })
                        .unwrap_or_else(|| {
                            panic!("no point {protocol}/{pack}/{exp}/{m}:\n{stdout}\n{stderr}")
                        });
                    assert!(
                        point["msgs_per_s"].is_number(),
                        "collapsed: {point}\n{stderr}"
                    );
                }
            }
        }
    }
    for n in 1..=4 {
        let svg = std::fs::read_to_string(dir.join(format!("burst-fig{n}.svg")))
            .unwrap_or_else(|e| panic!("figure {n}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.contains("polyline"),
            "figure {n}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
