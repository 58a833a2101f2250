//! `txcast node --site`: three Raid sites as three processes, each with clients of its own,
//! started apart and stopping together (`--until`); each ends once quiet and reports its
//! copy: the three are identical and conserve money. A node with no load serves until
//! SIGTERM and then reports.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The value of `key` in the JSON report line of `out` (which must parse), as text.
fn field(out: &str, key: &str) -> String {
    let json = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {out}"));
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    match &v[key] {
        serde_json::Value::Null => panic!("{key} in {json}"),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn three_node_processes_end_with_identical_copies() {
    let dir = std::env::temp_dir().join(format!("txcast-raid-node-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let until = (now + 2000).to_string();
    let children: Vec<_> = (0..3)
        .map(|s| {
            Command::new(env!("CARGO_BIN_EXE_txcast"))
                .args([
                    "node",
                    "--site",
                    &s.to_string(),
                    "--instance",
                    "37",
                    "--clients",
                    "4",
                    "--vote-timeout",
                    "300",
                ])
                .args(["--until", &until, "--exit-when-done", "--json", "--data"])
                .arg(&dir)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<String> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{o:?}");
            String::from_utf8(o.stdout).unwrap()
        })
        .collect();
    let digest = field(&outs[0], "digest");
    for o in &outs {
        assert_eq!(field(o, "conserved"), "true", "{o}");
        assert_eq!(field(o, "digest"), digest, "{outs:?}");
        assert!(field(o, "committed").parse::<u64>().unwrap() > 0, "{o}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_serving_node_ends_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("txcast-raid-term-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let child = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args([
            "node",
            "--site",
            "0",
            "--sites",
            "1",
            "--instance",
            "38",
            "--json",
            "--data",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(field(&out, "incarnation"), "1");
    assert_eq!(field(&out, "conserved"), "true");
    // Bad options are refused with exit code 2.
    let bad = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["node", "--site", "5", "--sites", "3"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let bad = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["node", "--site", "0", "--vote-timeout", "1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--vote-timeout"));
    let _ = std::fs::remove_dir_all(&dir);
}
