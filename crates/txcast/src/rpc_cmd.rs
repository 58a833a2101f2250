//! `txcast __rpc-server`: one RPC server process, for the cross-process tests.
//!
//! `txcast __rpc-server --instance I --site S [--type T] [--loss P] [--seconds N]` opens
//! `(I, S, T, 0)` (type 2 by default) and serves until a QUIT call or `--seconds` (default 60):
//! - type 1 (ECHO): answers the payload reversed;
//! - type 2 (COUNT): answers the payload and counts the execution;
//! - type 3 (SLOW): sleeps 300 ms, then answers;
//! - type 9 (QUIT): answers, then the process prints `executed <COUNT executions>` on stdout,
//!   serves 200 ms more (copies of the QUIT) and exits 0.
//!
//! `--loss P` drops that fraction of its outgoing datagrams (the engine's fault injection).
//! `--config FILE` reads the cluster configuration; `--oracle` registers with the oracle it
//! names (lease 1 s, renewed; a server that moved waits for the lease of its old place); `--at IP:PORT` opens the port there instead of where its
//! address maps (a server that moved to another host). It prints `ready` on stdout once its
//! port is open (and registered).

use crate::opt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, OracleClient, Port, PortConfig, Rpc, RpcConfig,
};
use txcast_proto::Address;

pub fn server(args: &[String]) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("txcast __rpc-server: {e}");
            1
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let instance: u16 = opt(args, "--instance").ok_or("--instance")?;
    let site: u16 = opt(args, "--site").ok_or("--site")?;
    let server_type: u16 = opt(args, "--type").unwrap_or(2);
    let loss: f64 = opt(args, "--loss").unwrap_or(0.0);
    let seconds: u64 = opt(args, "--seconds").unwrap_or(60);
    let cluster = match opt::<String>(args, "--config") {
        Some(p) => ClusterConfig::load(std::path::Path::new(&p)).map_err(|e| e.to_string())?,
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
    if let Some(at) = opt::<std::net::SocketAddr>(args, "--at") {
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
    let q = quit.clone();
    rpc.register(9, move |_, _| {
        q.store(true, Ordering::SeqCst);
        Ok(Vec::new())
    });
    if args.iter().any(|a| a == "--oracle") {
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
