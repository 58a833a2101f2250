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

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, Engine, EngineConfig, EngineMode, OracleServer};

/// The group the oracle's replicas form.
const ORACLE_GROUP: u32 = 0x0AC1E;

/// The options of `txcast oracle`.
#[derive(clap::Args, Debug)]
pub struct OracleArgs {
    /// The cluster file naming the oracle's address and its standbys [default: the built-in
    /// cluster, the oracle at 0.0.15.0]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The registry's state file, kept across restarts [default: txcast-oracle.state, or
    /// txcast-oracle-standby-K.state for standby K, in the working directory]
    #[arg(long, value_name = "PATH")]
    pub state: Option<PathBuf>,
    /// Serve this many seconds, then exit [default: until killed]
    #[arg(long, value_name = "N")]
    pub seconds: Option<u64>,
    /// Run as the K-th standby replica (from 1) the configuration names; 0 is the oracle
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub standby: usize,
}

pub fn run(args: &OracleArgs) -> i32 {
    match serve(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("txcast oracle: {e}");
            1
        }
    }
}

fn serve(args: &OracleArgs) -> Result<(), String> {
    let cluster = match &args.config {
        Some(path) => ClusterConfig::load(path).map_err(|e| e.to_string())?,
        None => ClusterConfig::default(),
    };
    let seconds = args.seconds;
    let oracles = cluster.oracles().map_err(|e| e.to_string())?;
    let which = args.standby;
    // Replicas started in one directory keep apart files.
    let state = args.state.clone().unwrap_or_else(|| match which {
        0 => "txcast-oracle.state".into(),
        k => format!("txcast-oracle-standby-{k}.state").into(),
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
    let state = Some(state.as_path());
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
