//! `txcast bench modules` end to end, briefly: every section measures its module or program
//! case and the baselines of the same run, and prints their ratios as JSON lines. And the
//! `--json` output of the quick benchmarks: every stdout line is one JSON object naming its
//! benchmark.

use serde_json::Value;
use std::process::Command;

/// Runs `txcast bench <args>` and parses its stdout: every line must be a JSON object whose
/// `"bench"` is `bench`.
fn bench_json(bench: &str, args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .arg("bench")
        .arg(bench)
        .args(args)
        .arg("--json")
        .output()
        .unwrap_or_else(|e| panic!("run txcast bench {bench}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v.is_object(), "not an object: {l}");
            assert_eq!(v["bench"], bench, "{l}");
            v
        })
        .collect();
    assert!(!lines.is_empty(), "no JSON lines:\n{stderr}");
    lines
}

/// The benchmarks listen on fixed addresses (the round-trip yardsticks, the module hosts):
/// the tests of this file take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn number(line: &Value, key: &str) -> f64 {
    line[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {line}"))
}

#[test]
fn the_modules_benchmark_measures_every_section_against_its_baselines() {
    let _turn = turn();
    let lines = bench_json(
        "modules",
        &[
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
        ],
    );
    let section =
        |name: &str| -> Vec<&Value> { lines.iter().filter(|l| l["section"] == name).collect() };
    let latency = section("latency");
    assert_eq!(latency.len(), 1, "{lines:?}");
    for key in ["module_p50_ns", "raw_busypoll_p50_ns", "app_parked_p50_ns"] {
        assert!(number(latency[0], key) > 0.0, "{key}");
    }
    assert_eq!(latency[0]["bytes"], 64);
    let rate = section("rate");
    assert_eq!(rate.len(), 1, "{lines:?}");
    assert!(number(rate[0], "module_msgs_per_s") > 0.0);
    assert!(number(rate[0], "app_pack_off_msgs_per_s") > 0.0);
    let push = section("push");
    assert_eq!(push.len(), 2, "{lines:?}");
    for l in push {
        assert!(number(l, "program_vs_native") > 0.0);
    }
    assert!(number(section("interpreter")[0], "ns_per_operator_p50") > 0.0);
}

#[test]
fn the_quick_benchmarks_print_one_json_object_a_line() {
    let _turn = turn();
    let rtt = bench_json(
        "rtt",
        &[
            "--cases",
            "txcast-local-spin",
            "--iterations",
            "200",
            "--bytes",
            "64",
        ],
    );
    assert_eq!(rtt.len(), 1, "{rtt:?}");
    assert_eq!(rtt[0]["case"], "txcast-local-spin");
    assert_eq!(rtt[0]["count"], 200);
    assert!(rtt[0]["vs"].is_object());

    let multicast = bench_json(
        "multicast",
        &[
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
        ],
    );
    let kinds = |lines: &[Value], kind: &str| lines.iter().filter(|l| l["kind"] == kind).count();
    assert_eq!(kinds(&multicast, "latency"), 4, "{multicast:?}");
    assert_eq!(kinds(&multicast, "cpu"), 4, "{multicast:?}");
    assert_eq!(kinds(&multicast, "scaling"), 2, "{multicast:?}");

    let throughput = bench_json(
        "throughput",
        &[
            "--messages",
            "20000",
            "--remote-messages",
            "5000",
            "--warmup",
            "1000",
            "--repeat",
            "1",
            "--cases",
            "txcast-local,txcast-remote-pack-on",
        ],
    );
    let packing: Vec<&Value> = throughput
        .iter()
        .filter(|l| l["kind"] == "packing")
        .collect();
    assert_eq!(packing.len(), 1, "{throughput:?}");
    assert!(packing[0]["histogram"].is_object(), "{throughput:?}");
    assert!(kinds(&throughput, "target") > 0, "{throughput:?}");

    let crmem = bench_json(
        "crmem",
        &["--sections", "commit", "--commits", "200", "--warmup", "20"],
    );
    // One commit line per implementation, in the order asked for (the default: all three).
    let impls: Vec<&Value> = crmem.iter().map(|l| &l["handlers"]).collect();
    assert_eq!(impls, ["engine", "polled", "interrupt"], "{crmem:?}");
    for l in &crmem {
        assert!(number(l, "commit_p50_ns") > 0.0, "{l}");
    }

    // The lock section after the commit one: both measure the remote round trip, whose
    // addresses are fixed.
    let lines = bench_json(
        "crmem",
        &[
            "--sections",
            "locks",
            "--locks",
            "1,3",
            "--commits",
            "50",
            "--warmup",
            "10",
            "--handlers",
            "polled,engine",
        ],
    );
    let counts: Vec<(f64, &Value)> = lines
        .iter()
        .map(|l| (number(l, "locks"), &l["handlers"]))
        .collect();
    assert_eq!(
        counts,
        [
            (1.0, &Value::from("polled")),
            (3.0, &Value::from("polled")),
            (1.0, &Value::from("engine")),
            (3.0, &Value::from("engine"))
        ],
        "{lines:?}"
    );
    for l in &lines {
        assert_eq!(l["section"], "locks", "{l}");
        assert_eq!(number(l, "samples"), 50.0, "{l}");
        assert!(number(l, "p50_ns") > 0.0, "{l}");
        assert!(number(l, "p99_ns") >= number(l, "p50_ns"), "{l}");
        assert!(number(l, "remote_spin_p50_ns") > 0.0, "{l}");
        // The ratio is printed to two decimals: it is the two p50s' quotient, rounded (a
        // round trip slowed by a busy machine can make it 0.00).
        let ratio = number(l, "p50_ns") / number(l, "remote_spin_p50_ns");
        assert!(
            (number(l, "ratio_spin_p50") - ratio).abs() <= 0.005 + 1e-9,
            "{l}"
        );
    }
}

/// Runs `txcast bench crmem --config symmetric --nodes 2 --parallel 2 --depths 8 --seconds 1`
/// with `args`, and checks each pass of the table (in the order `passes` names them: the
/// handlers' name and the affinity in its heading): both points commit transactions, the
/// replicas end with equal sums. With `--json` among `args` the table is on stderr: the JSON
/// lines of stdout are returned.
fn symmetric_passes(args: &[&str], passes: &[(&str, &str)]) -> (Vec<Value>, Vec<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["bench", "crmem", "--config", "symmetric", "--nodes", "2"])
        .args(args)
        .args(["--parallel", "2", "--depths", "8", "--seconds", "1"])
        .output()
        .expect("run txcast bench crmem --config symmetric");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    let json = args.contains(&"--json");
    let table = if json { &stderr } else { &stdout };
    let ran: Vec<&str> = table.split("tpcb, symmetric on 2 nodes").skip(1).collect();
    assert_eq!(ran.len(), passes.len(), "{table}");
    for (pass, (how, affinity)) in ran.iter().zip(passes) {
        assert!(pass.contains(how), "{pass}");
        assert!(pass.contains(&format!("affinity: {affinity},")), "{pass}");
        for label in ["2 threads", "8 in flight"] {
            let line = pass
                .lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no {label} point:\n{pass}"));
            let committed: u64 = line
                .split_whitespace()
                .last()
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("no count: {line}"));
            assert!(committed > 0, "{line}");
        }
        assert!(pass.contains(": consistent"), "{pass}");
    }
    let texts = ran.iter().map(|p| p.to_string()).collect();
    if !json {
        return (Vec::new(), texts);
    }
    let rows = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (rows, texts)
}

/// The `name: N` counter in a pass's counters line.
fn counter(pass: &str, name: &str) -> u64 {
    let at = pass
        .find(&format!(" {name}: "))
        .unwrap_or_else(|| panic!("no {name}:\n{pass}"));
    pass[at + name.len() + 3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no {name} count:\n{pass}"))
}

/// The symmetric TpcB on two processes, on the engine modules and polled: threads each
/// waiting, then one thread keeping transactions waiting on the other node's locks
/// (`ask_ranges`) and commits in flight; every point commits transactions, and each pass's
/// replicas end with equal sums. Without `--affinity`, one uniform pass per implementation.
#[test]
fn the_symmetric_crmem_benchmark_runs_both_kinds_of_point_and_checks_the_replicas() {
    let _turn = turn();
    let (none, texts) = symmetric_passes(
        &["--handlers", "engine,polled"],
        &[
            ("engine (CoProcessor)", "uniform"),
            ("polled (CPU Polling)", "uniform"),
        ],
    );
    assert!(none.is_empty());
    for t in &texts {
        assert!(t.contains("locks: returned,"), "{t}");
        assert_eq!(counter(t, "cache_hits"), 0, "{t}");
    }
}

/// `--affinity uniform,branch --lock-keeping kept`: a pass per affinity, each node running
/// its own branches' transactions in the second, keeping the locks other homes granted it;
/// the replicas still agree, and node 0 took kept locks. With `--json`, a row per point
/// naming its affinity and lock keeping.
#[test]
fn the_symmetric_crmem_benchmark_runs_a_pass_per_affinity_with_kept_locks() {
    let _turn = turn();
    let (rows, texts) = symmetric_passes(
        &[
            "--handlers",
            "engine",
            "--affinity",
            "uniform,branch",
            "--lock-keeping",
            "kept",
            "--json",
        ],
        &[
            ("engine (CoProcessor)", "uniform"),
            ("engine (CoProcessor)", "branch"),
        ],
    );
    let named: Vec<(&Value, &Value)> = rows.iter().map(|l| (&l["affinity"], &l["mode"])).collect();
    assert_eq!(
        named,
        [
            (&Value::from("uniform"), &Value::from("threads")),
            (&Value::from("uniform"), &Value::from("in-flight")),
            (&Value::from("branch"), &Value::from("threads")),
            (&Value::from("branch"), &Value::from("in-flight")),
        ],
        "{rows:?}"
    );
    for l in &rows {
        assert_eq!(l["bench"], "crmem", "{l}");
        assert_eq!(l["config"], "symmetric", "{l}");
        assert_eq!(l["nodes"], 2, "{l}");
        assert_eq!(l["handlers"], "engine", "{l}");
        assert_eq!(l["locks"], "kept", "{l}");
        assert!(number(l, "transactions") > 0.0, "{l}");
    }
    // Node 0 took kept locks with no message; with its own branches, most of its ranges.
    for t in &texts {
        assert!(t.contains("locks: kept,"), "{t}");
        assert!(counter(t, "cache_hits") > 0, "{t}");
    }
}
