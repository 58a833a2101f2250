//! `txcast oracle [--config FILE] [--state PATH] [--seconds N] [--standby K]`: the oracle name
//! server at the address the cluster configuration names (default `0.0.15.0`), its registry
//! kept in the state file (default `txcast-oracle.state` in the working directory) across
//! restarts. Runs until killed, or for `--seconds`. Prints `ready` once it serves.
//!
//! With standbys in the configuration (`oracle_standbys`), every oracle process is a replica
//! over a group: `txcast oracle` is the oracle, `txcast oracle --standby K` the K-th standby
//! (from 1). Each joins the replicas through the first other one that answers, or starts the
//! group if none does; its state file is `txcast-oracle-standby-K.state` unless `--state`
//! says otherwise.

use crate::opt;
use std::io::Write;
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, Engine, EngineConfig, EngineMode, OracleServer};

/// The group the oracle's replicas form.
const ORACLE_GROUP: u32 = 0x0AC1E;

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
    let seconds: Option<u64> = opt(args, "--seconds");
    let oracles = cluster.oracles().map_err(|e| e.to_string())?;
    let which: usize = opt(args, "--standby").unwrap_or(0);
    // Replicas started in one directory keep apart files.
    let state = opt::<String>(args, "--state").unwrap_or_else(|| match which {
        0 => "txcast-oracle.state".into(),
        k => format!("txcast-oracle-standby-{k}.state"),
    });
    let Some(&addr) = oracles.get(which) else {
        return Err(format!(
            "--standby {which}: the configuration names {} standbys",
            oracles.len() - 1
        ));
    };
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        cluster,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let state = Some(std::path::Path::new(&state));
    let mut oracle = if oracles.len() == 1 {
        OracleServer::open(&engine, addr, state)
    } else {
        // Join the replicas through the first that takes this one in (a restarted oracle
        // rejoins its standbys); if none answers, start the group. The oracle waits less for
        // them than a standby does for it, so the two do not both start a group.
        let wait = Duration::from_millis(if which == 0 { 1000 } else { 3000 });
        let mut opened = None;
        for &contact in oracles.iter().filter(|&&o| o != addr) {
            if let Ok(o) =
                OracleServer::open_replica(&engine, addr, state, ORACLE_GROUP, Some(contact), wait)
            {
                opened = Some(o);
                break;
            }
        }
        match opened {
            Some(o) => Ok(o),
            None => {
                OracleServer::open_replica(&engine, addr, state, ORACLE_GROUP, None, Duration::ZERO)
            }
        }
    }
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
