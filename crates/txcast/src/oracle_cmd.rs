//! `txcast oracle [--config FILE] [--state PATH] [--seconds N]`: the oracle name server at the
//! address the cluster configuration names (default `0.0.15.0`), its registry kept in the
//! state file (default `txcast-oracle.state` in the working directory) across restarts.
//! Runs until killed, or for `--seconds`. Prints `ready` once it serves.

use crate::opt;
use std::io::Write;
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, Engine, EngineConfig, EngineMode, OracleServer};

pub fn run(args: &[String]) -> i32 {
    match serve(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("txcast oracle: {e}");
            1
        }
    }
}

fn serve(args: &[String]) -> Result<(), String> {
    let cluster = match opt::<String>(args, "--config") {
        Some(path) => {
            ClusterConfig::load(std::path::Path::new(&path)).map_err(|e| e.to_string())?
        }
        None => ClusterConfig::default(),
    };
    let state = opt::<String>(args, "--state").unwrap_or_else(|| "txcast-oracle.state".into());
    let seconds: Option<u64> = opt(args, "--seconds");
    let addr = cluster.oracle().map_err(|e| e.to_string())?;
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        cluster,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let mut oracle = OracleServer::open(&engine, addr, Some(std::path::Path::new(&state)))
        .map_err(|e| e.to_string())?;
    println!("ready");
    let _ = std::io::stdout().flush();
    let end = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    while end.is_none_or(|e| Instant::now() < e) {
        oracle
            .serve(Duration::from_millis(100))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
