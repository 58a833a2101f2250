//! `txcast oracle` keeps its registry in the data directory (`$XDG_STATE_HOME/txcast` here,
//! or `--data DIR`), named after the cluster and its address, and not in the working
//! directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use txcast::config::ClusterConfig;
use txcast::oracle::OracleClient;
use txcast::port::{Engine, EngineConfig, EngineMode, Port, PortConfig};
use txcast::rpc::{Rpc, RpcConfig};
use txcast::Address;

/// A cluster of its own (number and ports), so that no other test's oracle answers.
const CLUSTER: &str = "cluster = 9\nbase_port = 12000\n";

/// Starts `txcast oracle` in `cwd` with `env` and `args`, waiting for its `ready` line.
fn oracle(cwd: &Path, env: &[(&str, &Path)], args: &[&str]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_txcast"));
    cmd.current_dir(cwd)
        .env_remove("XDG_STATE_HOME")
        .args(["oracle", "--config", "cluster.toml", "--seconds", "20"])
        .args(args)
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the oracle");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// Registers a server with the oracle of the cluster in `cluster_file`, so that the oracle
/// writes its state.
fn register(cluster_file: &Path) {
    let cluster = ClusterConfig::load(cluster_file).unwrap();
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        cluster,
        ..EngineConfig::default()
    })
    .unwrap();
    let port = Port::open_on(&engine, Address::new(0, 1, 3, 0), PortConfig::default()).unwrap();
    let mut rpc = Rpc::new(port, RpcConfig::default()).unwrap();
    let mut client = OracleClient::new(&mut rpc).unwrap();
    client
        .register_self(&mut rpc, &[], Duration::from_secs(30))
        .unwrap();
}

fn wait_for(path: &Path) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while !path.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    path.exists()
}

#[test]
fn the_oracle_state_goes_to_the_data_directory_not_the_working_one() {
    let root: PathBuf =
        std::env::temp_dir().join(format!("txcast-oracle-data-{}", std::process::id()));
    let (cwd, xdg, data) = (root.join("cwd"), root.join("xdg"), root.join("data"));
    std::fs::create_dir_all(&cwd).unwrap();
    let cluster_file = cwd.join("cluster.toml");
    std::fs::write(&cluster_file, CLUSTER).unwrap();
    let name = "oracle-c9-0.0.15.0.state";

    // The default: $XDG_STATE_HOME/txcast, made if missing.
    let mut child = oracle(&cwd, &[("XDG_STATE_HOME", &xdg)], &[]);
    register(&cluster_file);
    let in_xdg = wait_for(&xdg.join("txcast").join(name));
    child.kill().unwrap();
    child.wait().unwrap();
    // --data DIR.
    let mut child = oracle(
        &cwd,
        &[("XDG_STATE_HOME", &xdg)],
        &["--data", data.to_str().unwrap()],
    );
    register(&cluster_file);
    let in_data = wait_for(&data.join(name));
    child.kill().unwrap();
    child.wait().unwrap();
    let in_cwd: Vec<_> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&root);
    assert!(in_xdg, "no state in $XDG_STATE_HOME/txcast");
    assert!(in_data, "no state in --data");
    assert_eq!(in_cwd, ["cluster.toml"], "the working directory got files");
}

#[test]
fn data_and_state_together_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(["oracle", "--data", "/tmp/a", "--state", "/tmp/b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data"));
}
