//! RPC requests and replies longer than a datagram, carried on long messages over the RPC
//! port: local and remote, under injected loss (each call still runs once), and the bounds.
//!
//! Every test uses its own `instance` number (30 to 32).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use txcast_port::{
    Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, RemoteError, Rpc,
    RpcCallError, RpcConfig,
};
use txcast_proto::rpc::RpcError;
use txcast_proto::Address;

const ECHO: u16 = 1;
const GROW: u16 = 2;
const COUNT: u16 = 3;

fn addr(instance: u16, site: u16, server_type: u16) -> Address {
    Address::new(instance, site, server_type, 0)
}

fn rpc_cfg() -> RpcConfig {
    RpcConfig {
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(100),
        long_bytes_max: 4 << 20,
        ..RpcConfig::default()
    }
}

fn open(engine: Option<&Engine>, a: Address) -> Rpc {
    let cfg = PortConfig {
        idle: IdleStrategy::SpinThenPark { spins: 1000 },
        slot_count: 256,
        ..PortConfig::default()
    };
    let port = match engine {
        Some(e) => Port::open_on(e, a, cfg).unwrap(),
        None => Port::open(a, cfg).unwrap(),
    };
    Rpc::new(port, rpc_cfg()).unwrap()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// A server at `a` until `stop`: ECHO answers the payload reversed; GROW answers as many
/// bytes as the payload's first 4 say; COUNT counts and answers the payload's length.
fn serve(
    engine: Option<&Engine>,
    a: Address,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Rpc> {
    let mut rpc = open(engine, a);
    rpc.register(ECHO, |_, p| Ok(p.iter().rev().copied().collect()));
    rpc.register(GROW, |_, p| {
        let n = u32::from_le_bytes(p[..4].try_into().unwrap()) as usize;
        Ok(pattern(n, 7))
    });
    rpc.register(COUNT, move |_, p| {
        count.fetch_add(1, Ordering::SeqCst);
        Ok((p.len() as u64).to_le_bytes().to_vec())
    });
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            rpc.serve(Duration::from_millis(20)).unwrap();
        }
        rpc
    })
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn long_requests_and_replies_are_carried_local_and_remote() {
    let stop = Arc::new(AtomicBool::new(false));
    let servers = [addr(30, 0, 2), addr(30, 1, 2)];
    let threads: Vec<_> = servers
        .iter()
        .map(|&s| serve(None, s, stop.clone(), Arc::default()))
        .collect();
    let mut c = open(None, addr(30, 0, 1));
    let datagram = c.config().message_bytes_max;
    for s in servers {
        // Around the datagram's size, and far beyond it.
        for n in [datagram - 32, datagram - 31, 3 * datagram, 300_000, 2 << 20] {
            let p = pattern(n, n as u8);
            let got = c.call(s, ECHO, &p, 5 * SECOND).unwrap();
            let want: Vec<u8> = p.iter().rev().copied().collect();
            assert!(got == want, "{n} bytes to {s}");
        }
        // A short request, a long reply.
        let got = c
            .call(s, GROW, &700_000u32.to_le_bytes(), 5 * SECOND)
            .unwrap();
        assert!(got == pattern(700_000, 7));
        // Too long for the bound: refused before anything is sent, or answered as such.
        match c.call(s, ECHO, &vec![0; 4 << 20], SECOND) {
            Err(RpcCallError::Rpc(RpcError::TooLong { .. })) => {}
            other => panic!("{other:?}"),
        }
        match c.call(s, GROW, &(5u32 << 20).to_le_bytes(), 5 * SECOND) {
            Err(RpcCallError::Remote(RemoteError::ReplyTooLong)) => {}
            other => panic!("{other:?}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let rpc = t.join().unwrap();
        assert_eq!(rpc.counters().dropped_bad, 0);
    }
}

#[test]
fn under_loss_each_long_call_runs_once_and_completes() {
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: 0.05,
        loss_seed: 3,
        ..EngineConfig::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let s = addr(31, 1, 2);
    let server = serve(Some(&engine), s, stop.clone(), count.clone());
    let mut c = open(Some(&engine), addr(31, 0, 1));
    let calls = 30u64;
    for i in 0..calls {
        let n = 20_000 + 7_000 * i as usize;
        let got = c.call(s, COUNT, &pattern(n, i as u8), 10 * SECOND).unwrap();
        assert_eq!(got, (n as u64).to_le_bytes(), "call {i}");
    }
    assert!(
        engine.injected_losses() > 20,
        "{}",
        engine.injected_losses()
    );
    let l = c.counters().long;
    eprintln!("client {l:?} {:?}", c.counters().client);
    assert!(l.sent >= calls && l.sender.fragments_resent > 0, "{l:?}");
    stop.store(true, Ordering::SeqCst);
    let rpc = server.join().unwrap();
    eprintln!(
        "server {:?} {:?}",
        rpc.counters().long,
        rpc.counters().server
    );
    assert_eq!(count.load(Ordering::SeqCst), calls, "each ran once");
    assert_eq!(rpc.counters().server.executed, calls);
    drop(c);
    drop(rpc);
    engine.shutdown();
}
