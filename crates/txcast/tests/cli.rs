//! The `txcast` command line: help with defaults, errors that name the option (exit code 2),
//! both `--key value` and `--key=value`, the version and shell completions.

use std::process::Command;

/// Runs `txcast args`: the exit code, stdout and stderr.
fn txcast(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(args)
        .output()
        .expect("run txcast");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `txcast args`, which must fail with exit code 2 and a stderr naming `named`.
fn refused(args: &[&str], named: &str) {
    let (code, _, err) = txcast(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(
        err.contains(named),
        "{args:?}: stderr does not name {named}: {err}"
    );
}

#[test]
fn help_lists_every_subcommand_and_hides_the_internal_ones() {
    let (code, out, _) = txcast(&["--help"]);
    assert_eq!(code, 0);
    for command in [
        "demo",
        "dc",
        "bench",
        "sim",
        "stat",
        "oracle",
        "node",
        "program",
        "config",
        "completions",
        "help",
    ] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "{command} missing from --help:\n{out}"
        );
    }
    assert!(!out.contains("__"), "an internal command shows:\n{out}");
    // `txcast help` and no command at all say the same (the latter as an error).
    let (code, help, _) = txcast(&["help"]);
    assert_eq!((code, help), (0, out));
    let (code, _, err) = txcast(&[]);
    assert_eq!(code, 2);
    assert!(err.contains("Usage: txcast"), "{err}");
}

#[test]
fn every_subcommand_has_help() {
    let commands: &[&[&str]] = &[
        &["demo"],
        &["demo", "comm"],
        &["dc"],
        &["bench"],
        &["bench", "rtt"],
        &["bench", "multicast"],
        &["bench", "throughput"],
        &["bench", "group"],
        &["bench", "rpc"],
        &["bench", "long"],
        &["bench", "burst"],
        &["bench", "modules"],
        &["bench", "crmem"],
        &["bench", "pgbench"],
        &["bench", "dc"],
        &["sim"],
        &["sim", "link"],
        &["sim", "order"],
        &["sim", "raid"],
        &["stat"],
        &["oracle"],
        &["node"],
        &["program"],
        &["program", "load"],
        &["program", "invoke"],
        &["config"],
        &["config", "check"],
        &["completions"],
    ];
    for words in commands {
        let mut args = words.to_vec();
        args.push("--help");
        let (code, out, err) = txcast(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.contains(&format!("Usage: txcast {}", words.join(" "))),
            "{args:?}:\n{out}"
        );
    }
}

#[test]
fn dc_help_shows_the_defaults() {
    let (code, out, _) = txcast(&["dc", "--help"]);
    assert_eq!(code, 0);
    for option in [
        "--sites <SITES>",
        "--clients <CLIENTS>",
        "--seconds <SECONDS>",
        "--warmup <WARMUP>",
        "--vote-timeout <MS>",
        "--connect",
    ] {
        assert!(out.contains(option), "{option} missing:\n{out}");
    }
    for default in [
        "[default: 3]",
        "[default: 32]",
        "[default: 5]",
        "[default: 1]",
        "[default: 500]",
    ] {
        assert!(out.contains(default), "{default} missing:\n{out}");
    }
    // The demo's own, shorter load.
    let (_, demo, _) = txcast(&["demo", "--help"]);
    assert!(demo.contains("[default: 512]"), "{demo}");
    // A benchmark's.
    let (_, rtt, _) = txcast(&["bench", "rtt", "--help"]);
    assert!(rtt.contains("[default: 20000]"), "{rtt}");
}

#[test]
fn unknown_options_missing_and_bad_values_exit_2_naming_them() {
    refused(&["dc", "--bogus"], "--bogus");
    refused(&["dc", "--clients", "x"], "--clients");
    refused(&["dc", "--clients=x"], "--clients");
    refused(&["dc", "--clients", "0"], "--clients");
    refused(&["dc", "--sites", "17"], "--sites");
    refused(&["dc", "--seconds"], "--seconds");
    refused(
        &["dc", "--connect", "--reply-timeout", "0"],
        "--reply-timeout",
    );
    refused(
        &["dc", "--connect", "--reply-timeout=0.05"],
        "--reply-timeout",
    );
    refused(&["demo", "--warmup=-1"], "--warmup");
    refused(&["demo", "comm", "--txns", "many"], "--txns");
    refused(&["sim", "link", "--seed", "one"], "--seed");
    refused(
        &["sim", "order", "--protocol", "carrier-pigeon"],
        "--protocol",
    );
    refused(&["sim", "link", "--nope"], "--nope");
    refused(&["sim", "warp"], "warp");
    refused(&["warp"], "warp");
    refused(&["bench", "rtt", "--iterations", "x"], "--iterations");
    refused(&["bench", "rtt", "--cases", "carrier-pigeon"], "--cases");
    refused(
        &["bench", "throughput", "--remote-idle", "nap"],
        "--remote-idle",
    );
    refused(&["bench", "dc", "--vote-timeout", "1"], "--vote-timeout");
    refused(
        &["bench", "pgbench", "--clients", "2", "--threads", "3"],
        "--threads",
    );
    refused(&["stat", "--json", "--config"], "--config");
    refused(&["oracle", "--standby", "x"], "--standby");
    refused(&["node", "--site", "x"], "--site");
    refused(&["node", "--at", "0.0.13.0"], "--control");
    refused(&["node", "--site", "0", "--at", "0.0.13.0"], "--at");
    refused(
        &[
            "node",
            "--at",
            "0.0.13.0",
            "--control",
            "0.0.14.0",
            "--clients",
            "4",
        ],
        "--clients",
    );
    refused(
        &["program", "list", "--control", "not-an-address"],
        "--control",
    );
    refused(&["program", "unload", "--control", "0.0.13.0"], "--id");
    refused(&["completions", "teletype"], "teletype");
}

#[test]
fn key_equals_value_and_key_space_value_both_work() {
    let (code, spaced, err) = txcast(&["sim", "rpc", "--seed", "1", "--clients", "4"]);
    assert_eq!(code, 0, "{err}");
    let (code, joined, err) = txcast(&["sim", "rpc", "--seed=1", "--clients=4"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(spaced, joined);
    assert!(joined.starts_with("seed 1: ok"), "{joined}");
    // A short DebitCredit run on one site, every option in the `=` form.
    let (code, out, err) = txcast(&[
        "dc",
        "--sites=1",
        "--clients=2",
        "--seconds=0.2",
        "--warmup=0",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("money conserved"), "{out}");
}

#[test]
fn version_and_completions() {
    let (code, out, _) = txcast(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("txcast {}", env!("CARGO_PKG_VERSION")));
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = txcast(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains("txcast"), "{shell}: {out}");
        assert!(out.contains("--clients"), "{shell}: no options completed");
    }
}

/// A file in a directory of this test's own, removed by the caller.
/// Workload sizes left at their defaults keep the simulators' own defaults: `sim raid`'s
/// default of 0 sites draws 1 to 4 from each seed (the command line once made it 1).
#[test]
fn simulator_defaults_are_the_simulators_own() {
    let sites: Vec<String> = (1..=8)
        .map(|seed| {
            let (code, out, err) = txcast(&["sim", "raid", "--seed", &seed.to_string()]);
            assert_eq!(code, 0, "{out}{err}");
            out.lines()
                .find_map(|l| {
                    l.trim()
                        .split(" sites, ")
                        .next()
                        .filter(|_| l.contains(" sites, "))
                })
                .unwrap_or_else(|| panic!("no sites in {out}"))
                .trim()
                .to_string()
        })
        .collect();
    assert!(sites.iter().any(|n| n != "1"), "{sites:?}");
    let (_, one, _) = txcast(&["sim", "raid", "--seed", "1", "--sites", "1"]);
    assert!(one.contains(" 1 sites, "), "{one}");
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn config_check_prints_the_cluster_or_names_the_file_and_key() {
    let dir = std::env::temp_dir().join(format!("txcast-cli-config-{}", std::process::id()));
    let good = write(
        &dir,
        "good.toml",
        "cluster = 3\nloopback_default = false\nbase_port = 21000\noracle = \"0.1.15.0\"\n\
         oracle_standbys = [\"0.2.15.0\"]\n[sites]\n0 = \"10.0.0.1\"\n1 = \"10.0.0.2\"\n\
         2 = \"10.0.0.3\"\n[multicast]\nenabled = true\ngroup_prefix = [239, 193]\n\
         port = 19000\ninterface = \"10.0.0.1\"\n",
    );
    let bad_value = write(
        &dir,
        "bad-value.toml",
        "cluster = 3\n[multicast]\nenabled = true\nport = \"x\"\n",
    );
    let unknown_key = write(&dir, "unknown-key.toml", "cluster = 3\nclsuter = 4\n");
    let no_host = write(
        &dir,
        "no-host.toml",
        "loopback_default = false\noracle = \"0.7.15.0\"\n",
    );
    let results = [
        txcast(&["config", "check", &good]),
        txcast(&["config", "check", &bad_value]),
        txcast(&["config", "check", &unknown_key]),
        txcast(&["config", "check", &no_host]),
    ];
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = &results[0];
    assert_eq!(*code, 0, "{err}");
    for expected in [
        "good.toml: valid",
        "0 10.0.0.1, 1 10.0.0.2, 2 10.0.0.3",
        "UDP 21000 +",
        "0.1.15.0 at 10.0.0.2:21960",
        "0.2.15.0 at 10.0.0.3:21960",
        "groups 239.193.x.y, port 19000, interface 10.0.0.1",
    ] {
        assert!(out.contains(expected), "{expected} missing:\n{out}");
    }
    for ((code, _, err), (file, key)) in results[1..].iter().zip([
        ("bad-value.toml", "key `multicast.port` (line 4)"),
        ("unknown-key.toml", "key `clsuter` (line 2)"),
        ("no-host.toml", "key `oracle`"),
    ]) {
        assert_eq!(*code, 2, "{file}: {err}");
        assert!(err.contains(file) && err.contains(key), "{file}: {err}");
    }
}

#[test]
fn unsafe_cluster_values_are_refused_and_partial_tables_take_defaults() {
    let dir = std::env::temp_dir().join(format!("txcast-cli-unsafe-{}", std::process::id()));
    let cases = [
        (
            "empty-key.toml",
            "key_passphrase = \"\"\n",
            "key `key_passphrase`",
        ),
        ("port-zero.toml", "base_port = 0\n", "key `base_port`"),
        (
            "no-types.toml",
            "server_types_max = 0\n",
            "key `server_types_max`",
        ),
        (
            "mc-zero.toml",
            "[multicast]\nport = 0\n",
            "key `multicast.port`",
        ),
        (
            "mc-clash.toml",
            "[multicast]\nenabled = true\nport = 20100\n",
            "key `multicast.port`",
        ),
    ];
    let files: Vec<String> = cases
        .iter()
        .map(|(name, text, _)| write(&dir, name, text))
        .collect();
    let partial = write(&dir, "partial.toml", "[multicast]\nenabled = true\n");
    let results: Vec<_> = files
        .iter()
        .map(|f| {
            (
                txcast(&["config", "check", f]),
                txcast(&["stat", "--config", f]),
            )
        })
        .collect();
    let partial_result = txcast(&["config", "check", &partial]);
    let _ = std::fs::remove_dir_all(&dir);
    for ((check, stat), (name, _, key)) in results.iter().zip(cases) {
        // Refused by every command that reads the file, naming the file and the key.
        for (code, _, err) in [check, stat] {
            assert_eq!(*code, 2, "{name}: {err}");
            assert!(err.contains(name) && err.contains(key), "{name}: {err}");
        }
    }
    let (code, out, err) = partial_result;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("groups 239.192.x.y, port 19999, interface 127.0.0.1"),
        "{out}"
    );
}
