//! `txcast bench modules` end to end, briefly: every section measures its module or program
//! case and the baselines of the same run, and prints their ratios as JSON lines.

use std::process::Command;

fn number(line: &str, key: &str) -> f64 {
    let at = line
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {line}"));
    let rest = &line[at + key.len() + 3..];
    let end = rest.find([',', '}']).expect("a number ends");
    rest[..end].parse().expect("a number")
}

#[test]
fn the_modules_benchmark_measures_every_section_against_its_baselines() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "bench",
            "modules",
            "--exchanges",
            "300",
            "--warmup",
            "50",
            "--bytes",
            "64",
            "--messages",
            "5000",
            "--dests",
            "1,4",
            "--invokes",
            "200",
            "--json",
        ])
        .output()
        .expect("run txcast bench modules");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let section = |name: &str| -> Vec<&str> {
        lines
            .iter()
            .copied()
            .filter(|l| l.contains(&format!("\"section\":\"{name}\"")))
            .collect()
    };
    let latency = section("latency");
    assert_eq!(latency.len(), 1, "{stdout}");
    for key in ["module_p50_ns", "raw_busypoll_p50_ns", "app_parked_p50_ns"] {
        assert!(number(latency[0], key) > 0.0, "{key}");
    }
    let rate = section("rate");
    assert_eq!(rate.len(), 1, "{stdout}");
    assert!(number(rate[0], "module_msgs_per_s") > 0.0);
    assert!(number(rate[0], "app_pack_off_msgs_per_s") > 0.0);
    let push = section("push");
    assert_eq!(push.len(), 2, "{stdout}");
    for l in push {
        assert!(number(l, "program_vs_native") > 0.0);
    }
    assert!(number(section("interpreter")[0], "ns_per_operator_p50") > 0.0);
}
