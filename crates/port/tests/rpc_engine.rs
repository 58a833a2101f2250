//! Handlers on the engine loop (`Rpc::serve_on_engine`): what a third review found wrong, as
//! regression tests. The engine never waits for an endpoint its owner holds (`with` may open
//! ports or make calls), a handler that panics does not take the engine down, repeated calls
//! go on, and spaced local calls wake the engine at once. Instances 41 to 44.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::{
    Engine, EngineConfig, IdleStrategy, Port, PortConfig, RemoteError, Rpc, RpcCallError, RpcConfig,
};
use txcast_proto::Address;

const ECHO: u16 = 1;
const SLOW: u16 = 4;

fn addr(instance: u16, site: u16, server_type: u16) -> Address {
    Address::new(instance, site, server_type, 0)
}

fn port_cfg() -> PortConfig {
    PortConfig {
        idle: IdleStrategy::SpinThenPark { spins: 1000 },
        slot_count: 256,
        ..PortConfig::default()
    }
}

fn rpc_cfg() -> RpcConfig {
    RpcConfig {
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(100),
        long_bytes_max: 4 << 20,
        ..RpcConfig::default()
    }
}

fn open(engine: &Engine, a: Address) -> Rpc {
    Rpc::new(Port::open_on(engine, a, port_cfg()).unwrap(), rpc_cfg()).unwrap()
}

fn serve_thread(mut rpc: Rpc, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Rpc> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            rpc.serve(Duration::from_millis(20)).unwrap();
        }
        rpc
    })
}

/// `EngineServer::with` is documented as running `f` on the endpoint "between two of the
/// engine's steps". A call made from it (to a remote server that takes 50 ms) needs the
/// engine to read the reply off the port's socket; but while `with` holds the service lock,
/// the engine thread blocks in `park()` -> `services(arm)` (and `next_deadline`) on
/// `service.lock()`, with the endpoints lock held: the whole engine stops until the call's
/// deadline passes.
#[test]
fn a_call_made_through_engine_server_with_completes() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let other = Engine::start(EngineConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // A remote server (another site: UDP) whose handler takes 50 ms.
    let mut remote = open(&other, addr(41, 1, 2));
    remote.register(SLOW, |_, _| {
        std::thread::sleep(Duration::from_millis(50));
        Ok(b"late".to_vec())
    });
    let t = serve_thread(remote, stop.clone());
    let mut rpc = open(&engine, addr(41, 0, 2));
    rpc.register(ECHO, |_, p| Ok(p.to_vec()));
    let served = rpc.serve_on_engine().map_err(|(e, _)| e).unwrap();
    let r = served.with(|r| r.call(addr(41, 1, 2), SLOW, b"", Duration::from_secs(2)));
    stop.store(true, Ordering::SeqCst);
    drop(t.join().unwrap());
    drop(served);
    other.shutdown();
    engine.shutdown();
    // Stalled, it would end by its deadline (the engine never reading the answer).
    assert_eq!(r.unwrap(), b"late");
}

/// Found in review: a handler that panicked on the engine thread killed the engine thread,
/// and every port on the engine stopped (with `Rpc::serve` only the serving thread unwinds).
/// Now the call is answered `Failed`, and a second port of the same engine still receives.
#[test]
fn a_panicking_handler_on_the_engine_does_not_stop_the_engine() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let other = Engine::start(EngineConfig::default()).unwrap();
    let mut rpc = open(&engine, addr(42, 0, 2));
    rpc.register(ECHO, |_, p| {
        // A handler with a bug on short input.
        let n = u32::from_le_bytes(p[..4].try_into().unwrap());
        Ok(n.to_le_bytes().to_vec())
    });
    let served = rpc.serve_on_engine().map_err(|(e, _)| e).unwrap();
    let mut c = open(&other, addr(42, 1, 1));
    match c.call(addr(42, 0, 2), ECHO, b"x", Duration::from_secs(1)) {
        Err(RpcCallError::Remote(RemoteError::Failed(m))) => assert!(m.contains("panicked")),
        other => panic!("{other:?}"),
    }
    // Another port of the same engine, served by its own thread.
    let stop = Arc::new(AtomicBool::new(false));
    let mut s2 = open(&engine, addr(42, 0, 3));
    s2.register(ECHO, |_, p| Ok(p.to_vec()));
    let t = serve_thread(s2, stop.clone());
    let r = c.call(addr(42, 0, 3), ECHO, b"hello", Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let _ = t.join();
    assert_eq!(r.unwrap(), b"hello");
    // The served endpoint goes on too.
    let r = c.call(addr(42, 0, 2), ECHO, b"1234", Duration::from_secs(1));
    assert_eq!(r.unwrap(), b"1234");
    drop(served);
}

/// A local caller's request to an engine-served port while the engine sleeps: answered at
/// once (a doorbell), not after the engine's 25 ms park or the caller's 10 ms retry.
#[test]
fn spaced_local_calls_to_an_engine_served_port_are_answered_at_once() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let other = Engine::start(EngineConfig::default()).unwrap();
    let mut rpc = open(&engine, addr(43, 0, 2));
    rpc.register(ECHO, |_, p| Ok(p.to_vec()));
    let served = rpc.serve_on_engine().map_err(|(e, _)| e).unwrap();
    let mut c = open(&other, addr(43, 0, 1));
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(40));
        let t = Instant::now();
        c.call(addr(43, 0, 2), ECHO, b"z", Duration::from_secs(1))
            .unwrap();
        worst = worst.max(t.elapsed());
    }
    // Without the doorbell most calls would wait for the engine's park (up to 25 ms) and be
    // sent again after 10 ms; a few resends are left to a loaded machine's scheduling.
    let resent = c.counters().client.requests_resent;
    assert!(resent <= 5, "{resent} resent, worst {worst:?}");
    drop((c, served));
    other.shutdown();
    engine.shutdown();
}

/// Found in review: opening a port from `EngineServer::with` (say, for a handler to capture)
/// deadlocked for good: `with` holds the service lock and `Port::open` waits for the engine's
/// `endpoints` write lock, while the engine thread, in `park()`, held `endpoints` for reading
/// and waited for the service lock. The engine now only tries it.
#[test]
fn opening_a_port_from_engine_server_with_does_not_deadlock() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let rpc = open(&engine, addr(42, 2, 5));
    let served = rpc.serve_on_engine().map_err(|(e, _)| e).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let e2 = engine.clone();
    std::thread::spawn(move || {
        served.with(|_| {
            // Long enough for the idle engine to go to park and block on the service lock.
            std::thread::sleep(Duration::from_millis(100));
            let p = Port::open_on(&e2, addr(42, 2, 6), port_cfg()).unwrap();
            drop(p);
        });
        let _ = tx.send(());
        drop(served);
    });
    let done = rx.recv_timeout(Duration::from_secs(3)).is_ok();
    if !done {
        // The engine thread and the helper are stuck: leave them (the test fails below).
        std::mem::forget(engine);
    }
    assert!(
        done,
        "deadlock: with() holding the service lock vs park() holding endpoints"
    );
}

/// Found in review: a call repeated on its own (`Rpc::repeat_call`, the oracle client's lease
/// renewal) was started only by `drive`, so an endpoint served on the engine never ran it.
#[test]
fn a_repeated_call_goes_on_when_served_on_the_engine() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut target = open(&engine, addr(44, 1, 2));
    let c2 = count.clone();
    target.register(ECHO, move |_, p| {
        c2.fetch_add(1, Ordering::SeqCst);
        Ok(p.to_vec())
    });
    let t = serve_thread(target, stop.clone());
    let mut rpc = open(&engine, addr(44, 0, 2));
    rpc.repeat_call(
        Some((addr(44, 1, 2), ECHO, b"renew".to_vec())),
        Duration::from_millis(20),
    );
    let served = rpc.serve_on_engine().map_err(|(e, _)| e).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    drop(t.join().unwrap());
    drop(served);
    engine.shutdown();
    assert!(
        count.load(Ordering::SeqCst) >= 5,
        "{}",
        count.load(Ordering::SeqCst)
    );
}
