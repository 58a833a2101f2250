//! `txcast __rpc-server`: one RPC server process, for the cross-process tests.
//!
//! `txcast __rpc-server --instance I --site S [--type T] [--loss P] [--seconds N]` opens
//! `(I, S, T, 0)` (type 2 by default) and serves until a QUIT call or `--seconds` (default 60):
//! - type 1 (ECHO): answers the payload reversed;
//! - type 2 (COUNT): answers the payload and counts the execution;
//! - type 3 (SLOW): sleeps 300 ms, then answers;
//! - type 4 (TICKET): answers the payload followed by this process's id (4 bytes) and the
//!   number of TICKET calls it has executed, this one included (8 bytes), little-endian: a
//!   reply that names the execution it came from. With `--exec-log FILE`, each execution
//!   first appends `<client> <payload in hex> <pid> <number>` to FILE (one write, so a
//!   kill -9 leaves whole lines);
//! - type 9 (QUIT): answers, then the process prints `executed <COUNT executions>` on stdout,
//!   serves 200 ms more (copies of the QUIT) and exits 0.
//!
//! `--loss P` drops that fraction of its outgoing datagrams (the engine's fault injection).
//! `--config FILE` reads the cluster configuration; `--oracle` registers with the oracle it
//! names (lease 1 s, renewed; a server that moved waits for the lease of its old place); `--at IP:PORT` opens the port there instead of where its
//! address maps (a server that moved to another host). It prints `ready` on stdout once its
//! port is open (and registered).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, OracleClient, Port, PortConfig, Rpc, RpcConfig,
};
use txcast_proto::Address;

/// The options of `txcast __rpc-server`.
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// The instance of the server's address
    #[arg(long)]
    instance: u16,
    /// The site of the server's address
    #[arg(long)]
    site: u16,
    /// The server type: 1 echo, 2 count, 3 slow, 9 quit
    #[arg(long = "type", default_value_t = 2)]
    server_type: u16,
    /// The fraction of outgoing datagrams dropped
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Serve at most this long without a QUIT
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The cluster file
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Open the port at this IP:PORT instead of where its address maps
    #[arg(long)]
    at: Option<std::net::SocketAddr>,
    /// Register with the oracle the configuration names
    #[arg(long)]
    oracle: bool,
    /// Append one line per executed TICKET call to this file
    #[arg(long, value_name = "FILE")]
    exec_log: Option<std::path::PathBuf>,
}

pub fn server(args: &ServerArgs) -> i32 {
    crate::exit_code("txcast __rpc-server", run(args))
}

fn run(args: &ServerArgs) -> Result<(), String> {
    let (instance, site, server_type) = (args.instance, args.site, args.server_type);
    let (loss, seconds) = (args.loss, args.seconds);
    let cluster = match &args.config {
        Some(p) => ClusterConfig::load(p).map_err(|e| e.to_string())?,
        None => ClusterConfig::default(),
    };
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: loss,
        loss_seed: 3,
        cluster,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let me = Address::new(instance, site, server_type, 0);
    if let Some(at) = args.at {
        engine.set_location(me, at);
    }
    let port = Port::open_on(
        &engine,
        Address::new(instance, site, server_type, 0),
        PortConfig::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut rpc = Rpc::new(port, RpcConfig::default()).map_err(|e| e.to_string())?;
    let executed = Arc::new(AtomicU64::new(0));
    let quit = Arc::new(AtomicBool::new(false));
    rpc.register(1, |_, p| Ok(p.iter().rev().copied().collect()));
    let e = executed.clone();
    rpc.register(2, move |_, p| {
        e.fetch_add(1, Ordering::SeqCst);
        Ok(p.to_vec())
    });
    rpc.register(3, |_, _| {
        std::thread::sleep(Duration::from_millis(300));
        Ok(b"slow".to_vec())
    });
    let mut log = match &args.exec_log {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    let mut tickets = 0u64;
    let pid = std::process::id();
    rpc.register(4, move |client, p| {
        tickets += 1;
        if let Some(f) = log.as_mut() {
            let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
            // Logged before the reply exists: an answered call's execution is on file.
            f.write_all(format!("{client} {hex} {pid} {tickets}\n").as_bytes())
                .map_err(|e| format!("exec log: {e}"))?;
        }
        let mut reply = p.to_vec();
        reply.extend_from_slice(&pid.to_le_bytes());
        reply.extend_from_slice(&tickets.to_le_bytes());
        Ok(reply)
    });
    let q = quit.clone();
    rpc.register(9, move |_, _| {
        q.store(true, Ordering::SeqCst);
        Ok(Vec::new())
    });
    if args.oracle {
        let mut oc = OracleClient::new(&mut rpc).map_err(|e| e.to_string())?;
        // A server that moved is registered once the lease of its old place runs out.
        let end = Instant::now() + Duration::from_secs(10);
        while let Err(e) = oc.register_self(&mut rpc, &[], Duration::from_secs(1)) {
            if Instant::now() > end {
                return Err(e.to_string());
            }
            rpc.serve(Duration::from_millis(50))
                .map_err(|e| e.to_string())?;
        }
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let end = Instant::now() + Duration::from_secs(seconds);
    while !quit.load(Ordering::SeqCst) {
        if Instant::now() > end {
            return Err("no QUIT in time".into());
        }
        rpc.serve(Duration::from_millis(50))
            .map_err(|e| e.to_string())?;
    }
    println!("executed {}", executed.load(Ordering::SeqCst));
    let _ = std::io::stdout().flush();
    rpc.serve(Duration::from_millis(200))
        .map_err(|e| e.to_string())?;
    Ok(())
}
