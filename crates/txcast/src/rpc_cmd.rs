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
//! It prints `ready` on stdout once its port is open.

use crate::opt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::{Engine, EngineConfig, EngineMode, Port, PortConfig, Rpc, RpcConfig};
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
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: loss,
        loss_seed: 3,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
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
