//! `txcast oracle [--config FILE] [--data DIR | --state PATH] [--seconds N] [--standby K]`: the
//! oracle name server at the address the cluster configuration names (default `0.0.15.0`),
//! its registry kept across restarts in a state file in the data directory (see
//! [`data_dir`]), named after the cluster and the oracle's address. Runs until killed, or for
//! `--seconds`. Prints `ready` once it serves.
//!
//! With standbys in the configuration (`oracle_standbys`), every oracle process is a replica
//! over a group: `txcast oracle` is the oracle, `txcast oracle --standby K` the K-th standby
//! (from 1). Each joins the replicas through the first other one that answers, or starts the
//! group if none does; each replica's file is named after its own address.

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
    /// The directory of the registry's state file, made if missing [default:
    /// $XDG_STATE_HOME/txcast, else ~/.local/state/txcast, else a txcast-UID directory in the
    /// system's temporary directory]
    #[arg(long, value_name = "DIR", conflicts_with = "state")]
    pub data: Option<PathBuf>,
    /// The registry's state file itself, kept across restarts [default: DIR/oracle-cCLUSTER-
    /// ADDRESS.state in the data directory]
    #[arg(long, value_name = "PATH")]
    pub state: Option<PathBuf>,
    /// Serve this many seconds, then exit [default: until killed]
    #[arg(long, value_name = "N")]
    pub seconds: Option<u64>,
    /// Run as the K-th standby replica (from 1) the configuration names; 0 is the oracle
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub standby: usize,
}

/// Where txcast keeps state across runs when not told: `$XDG_STATE_HOME/txcast`, else
/// `$HOME/.local/state/txcast` (the XDG base directory rule), else `txcast-UID` in the
/// system's temporary directory. Never the working directory.
pub fn data_dir() -> PathBuf {
    let set = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    // Relative values are ignored, as the XDG specification says.
    if let Some(d) = set("XDG_STATE_HOME").filter(|d| d.is_absolute()) {
        return d.join("txcast");
    }
    if let Some(h) = set("HOME").filter(|h| h.is_absolute()) {
        return h.join(".local/state/txcast");
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    std::env::temp_dir().join(format!("txcast-{uid}"))
}

pub fn run(args: &OracleArgs) -> i32 {
    crate::exit_code("txcast oracle", serve(args))
}

fn serve(args: &OracleArgs) -> Result<(), String> {
    let cluster = match &args.config {
        Some(path) => ClusterConfig::load(path).map_err(|e| e.to_string())?,
        None => ClusterConfig::default(),
    };
    let seconds = args.seconds;
    let oracles = cluster.oracles().map_err(|e| e.to_string())?;
    let which = args.standby;
    let Some(&addr) = oracles.get(which) else {
        return Err(format!(
            "--standby {which}: the configuration names {} standbys",
            oracles.len() - 1
        ));
    };
    // Replicas (and clusters) sharing a data directory keep apart files.
    let state_path = match &args.state {
        Some(path) => path.clone(),
        None => {
            let dir = args.data.clone().unwrap_or_else(data_dir);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("data directory {}: {e}", dir.display()))?;
            dir.join(format!("oracle-c{}-{addr}.state", cluster.cluster))
        }
    };
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        cluster,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let state = Some(state_path.as_path());
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
    eprintln!("txcast oracle: {addr}, state in {}", state_path.display());
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
