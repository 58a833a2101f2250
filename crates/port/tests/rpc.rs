//! RPC through the public API: local (shared memory) and remote (UDP) calls, asynchronous
//! calls polled, waited on and cancelled, multicast calls completing on the first, k or all
//! answers, a server that dies mid-call, at-most-once execution under loss, remote errors,
//! and malformed input.
//!
//! Every test uses its own `instance` number (29 to 39). Sites 0, 1, 2 are different
//! "hosts" (UDP between them); ports of one site talk through shared memory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use txcast_port::{
    Completion, End, Engine, EngineConfig, EngineMode, IdleStrategy, Port, PortConfig, RemoteError,
    Rpc, RpcCallError, RpcConfig, TxnGroup,
};
use txcast_proto::{Address, TxnId};

const ECHO: u16 = 1;
const COUNT: u16 = 2;
const FAIL: u16 = 3;
const SLOW: u16 = 4;
const DIE: u16 = 5;

fn addr(instance: u16, site: u16, server_type: u16) -> Address {
    Address::new(instance, site, server_type, 0)
}

fn port_cfg() -> PortConfig {
    PortConfig {
        idle: IdleStrategy::SpinThenPark { spins: 1000 },
        ..PortConfig::default()
    }
}

fn rpc_cfg() -> RpcConfig {
    RpcConfig {
        retry_initial: Duration::from_millis(5),
        retry_max: Duration::from_millis(50),
        ..RpcConfig::default()
    }
}

/// A server at `a` on its own thread until `stop`: echoes (reversed), counts executions of
/// COUNT, fails FAIL, sleeps 300 ms in SLOW, and dies in DIE (its thread unwinds, its port
/// closes, nothing answers).
fn spawn_server(
    engine: Option<&Engine>,
    a: Address,
    stop: Arc<AtomicBool>,
    executed: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Rpc> {
    let port = match engine {
        Some(e) => Port::open_on(e, a, port_cfg()).unwrap(),
        None => Port::open(a, port_cfg()).unwrap(),
    };
    let mut rpc = Rpc::new(port, rpc_cfg()).unwrap();
    rpc.register(ECHO, |_, p| Ok(p.iter().rev().copied().collect()));
    rpc.register(COUNT, move |_, p| {
        executed.fetch_add(1, Ordering::SeqCst);
        Ok(p.to_vec())
    });
    rpc.register(FAIL, |from, _| Err(format!("no account for {from}")));
    rpc.register(SLOW, |_, _| {
        std::thread::sleep(Duration::from_millis(300));
        Ok(b"late".to_vec())
    });
    rpc.register(DIE, |_, _| {
        std::panic::resume_unwind(Box::new("the server dies"))
    });
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            rpc.serve(Duration::from_millis(20)).unwrap();
        }
        rpc
    })
}

struct Servers {
    stop: Arc<AtomicBool>,
    executed: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<Rpc>>,
}

impl Servers {
    fn start(engine: Option<&Engine>, addrs: &[Address]) -> Servers {
        let stop = Arc::new(AtomicBool::new(false));
        let executed = Arc::new(AtomicU64::new(0));
        let threads = addrs
            .iter()
            .map(|&a| spawn_server(engine, a, stop.clone(), executed.clone()))
            .collect();
        Servers {
            stop,
            executed,
            threads,
        }
    }

    fn stop(self) -> Vec<Rpc> {
        self.stop.store(true, Ordering::SeqCst);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect()
    }
}

fn client(engine: Option<&Engine>, a: Address) -> Rpc {
    let port = match engine {
        Some(e) => Port::open_on(e, a, port_cfg()).unwrap(),
        None => Port::open(a, port_cfg()).unwrap(),
    };
    Rpc::new(port, rpc_cfg()).unwrap()
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn local_and_remote_calls_are_answered() {
    let local = addr(30, 0, 2);
    let remote = addr(30, 1, 2);
    let servers = Servers::start(None, &[local, remote]);
    let mut c = client(None, addr(30, 0, 1));
    for dest in [local, remote] {
        for i in 0..50u8 {
            let out = c.call(dest, ECHO, &[1, 2, i], SECOND).unwrap();
            assert_eq!(out, vec![i, 2, 1], "to {dest}");
        }
    }
    let empty = c.call(remote, ECHO, &[], SECOND).unwrap();
    assert!(empty.is_empty());
    let n = c.counters();
    assert_eq!(n.client.completed, 101);
    assert_eq!(n.client.timed_out, 0);
    let rpcs = servers.stop();
    let served: u64 = rpcs.iter().map(|r| r.counters().server.executed).sum();
    assert_eq!(served, 101);
}

#[test]
fn remote_errors_are_typed() {
    let s = addr(31, 1, 2);
    let servers = Servers::start(None, &[s]);
    let mut c = client(None, addr(31, 0, 1));
    match c.call(s, FAIL, b"", SECOND) {
        Err(RpcCallError::Remote(RemoteError::Failed(m))) => {
            assert_eq!(m, format!("no account for {}", c.address()))
        }
        other => panic!("{other:?}"),
    }
    match c.call(s, 999, b"", SECOND) {
        Err(RpcCallError::Remote(RemoteError::NoHandler)) => {}
        other => panic!("{other:?}"),
    }
    let long = vec![0u8; c.config().payload_bytes_max() + 1];
    assert!(matches!(
        c.call(s, ECHO, &long, SECOND),
        Err(RpcCallError::Rpc(
            txcast_proto::rpc::RpcError::TooLong { .. }
        ))
    ));
    servers.stop();
}

#[test]
fn asynchronous_calls_are_polled_waited_on_and_cancelled() {
    let s = addr(32, 1, 2);
    let servers = Servers::start(None, &[s]);
    let mut c = client(None, addr(32, 0, 1));
    // Several at once, collected out of order.
    let ids: Vec<_> = (0..10u8)
        .map(|i| c.call_async(s, ECHO, &[i, 0], SECOND).unwrap())
        .collect();
    for (i, id) in ids.iter().enumerate().rev() {
        let o = c.wait(*id, None).unwrap();
        assert_eq!(o.end, End::Complete);
        assert_eq!(o.replies[0].1.as_deref(), Ok(&[0, i as u8][..]));
    }
    // Polled until done.
    let id = c.call_async(s, ECHO, b"ab", SECOND).unwrap();
    let o = loop {
        if let Some(o) = c.poll(id).unwrap() {
            break o;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    assert_eq!(o.replies[0].1.as_deref(), Ok(&b"ba"[..]));
    assert!(
        matches!(c.poll(id), Err(RpcCallError::Unknown)),
        "collected"
    );
    // A wait shorter than the call: the call goes on.
    let id = c.call_async(s, SLOW, b"", SECOND).unwrap();
    assert!(matches!(
        c.wait(id, Some(Duration::from_millis(50))),
        Err(RpcCallError::WaitTimeout)
    ));
    let o = c.cancel(id).unwrap();
    assert_eq!(o.end, End::Cancelled);
    assert_eq!(o.missing, vec![s]);
    assert!(matches!(c.wait(id, None), Err(RpcCallError::Unknown)));
    servers.stop();
}

#[test]
fn multicast_calls_complete_on_first_quorum_or_all_and_report_who_did_not_answer() {
    let up = [addr(33, 0, 2), addr(33, 1, 2), addr(33, 2, 2)];
    // No port is ever opened here: a server that is down.
    let down = addr(33, 2, 3);
    let servers = Servers::start(None, &up);
    let mut c = client(None, addr(33, 0, 1));
    let all = [up[0], up[1], up[2], down];
    let d = Duration::from_millis(300);
    let o = c
        .multicast(&all, ECHO, b"xy", Completion::First, d)
        .unwrap();
    assert_eq!(o.end, End::Complete);
    assert_eq!(o.replies.len(), 1);
    let o = c
        .multicast(&all, ECHO, b"xy", Completion::Quorum(3), d)
        .unwrap();
    assert_eq!(o.end, End::Complete);
    assert_eq!(o.replies.len(), 3);
    for (from, r) in &o.replies {
        assert!(up.contains(from));
        assert_eq!(r.as_deref(), Ok(&b"yx"[..]));
    }
    assert_eq!(o.missing, vec![down]);
    let t = std::time::Instant::now();
    let o = c.multicast(&all, ECHO, b"xy", Completion::All, d).unwrap();
    assert_eq!(o.end, End::DeadlinePassed);
    assert!(t.elapsed() >= d);
    assert_eq!(o.replies.len(), 3);
    assert_eq!(o.missing, vec![down]);
    servers.stop();
}

#[test]
fn a_server_that_dies_mid_call_leaves_the_caller_a_typed_error_by_its_deadline() {
    for site in [0, 1] {
        // Local (its ring) and remote (UDP).
        let s = addr(34, site, 2 + site);
        let server = spawn_server(None, s, Arc::new(AtomicBool::new(false)), Arc::default());
        let mut c = client(None, addr(34, 0, 1 + 10 * site));
        assert_eq!(c.call(s, ECHO, b"ok", SECOND).unwrap(), b"ko");
        let deadline = Duration::from_millis(400);
        let t = std::time::Instant::now();
        let id = c.call_async(s, DIE, b"", deadline).unwrap();
        assert!(server.join().is_err(), "the server died");
        match c.wait(id, None) {
            Ok(o) => {
                assert_eq!(o.end, End::DeadlinePassed);
                assert_eq!(o.missing, vec![s]);
                assert!(o.replies.is_empty());
            }
            Err(e) => panic!("{e}"),
        }
        let took = t.elapsed();
        assert!(took >= deadline && took < deadline + SECOND, "{took:?}");
        // Later calls fail the same way, by their deadline.
        match c.call(s, ECHO, b"", Duration::from_millis(100)) {
            Err(RpcCallError::DeadlinePassed(o)) => assert_eq!(o.missing, vec![s]),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn under_loss_every_call_completes_and_runs_exactly_once() {
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: 0.3,
        loss_seed: 11,
        ..EngineConfig::default()
    })
    .unwrap();
    let s = addr(35, 1, 2);
    let servers = Servers::start(Some(&engine), &[s]);
    let mut c = client(Some(&engine), addr(35, 0, 1));
    let calls = 300u64;
    for i in 0..calls {
        let out = c.call(s, COUNT, &i.to_le_bytes(), 5 * SECOND).unwrap();
        assert_eq!(out, i.to_le_bytes());
    }
    assert!(
        engine.injected_losses() > 50,
        "the injector dropped datagrams"
    );
    let n = c.counters().client;
    assert!(n.requests_resent > 0);
    assert_eq!(
        servers.executed.load(Ordering::SeqCst),
        calls,
        "each ran once"
    );
    let rpcs = servers.stop();
    let s = rpcs[0].counters().server;
    assert!(
        s.duplicates_answered > 0,
        "lost replies were answered from the cache: {s:?}"
    );
    assert_eq!(servers_executed(&rpcs), calls);
    drop(rpcs);
    drop(c);
    engine.shutdown();
}

/// `forward_request` (paper 003): F hands some requests on to X, which answers the caller in
/// F's name; the caller sees one answer from F, computed at X for the original caller.
#[test]
fn a_request_handed_on_is_answered_by_the_server_it_went_to_in_the_called_ones_name() {
    const WHO: u16 = 6;
    let f = addr(38, 0, 2);
    let x = addr(38, 1, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let serve = |a: Address, name: &'static str, on: Option<Address>| {
        let mut rpc = Rpc::new(Port::open(a, port_cfg()).unwrap(), rpc_cfg()).unwrap();
        rpc.register(WHO, move |caller, p| {
            Ok(format!("{caller} {} at {name}", String::from_utf8_lossy(p)).into_bytes())
        });
        if let Some(to) = on {
            rpc.register_forwarder(WHO, move |_, p| (p == b"on").then_some(to));
        }
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                rpc.serve(Duration::from_millis(20)).unwrap();
            }
            rpc
        })
    };
    let threads = [serve(x, "x", None), serve(f, "f", Some(x))];
    // A caller on F's host (F by shared memory, X's answer by UDP) and one on a third host.
    for site in [0, 2] {
        let me = addr(38, site, 1);
        let mut c = client(None, me);
        let got = c.call(f, WHO, b"on", SECOND).unwrap();
        assert_eq!(got, format!("{me} on at x").into_bytes());
        let got = c.call(f, WHO, b"here", SECOND).unwrap();
        assert_eq!(got, format!("{me} here at f").into_bytes());
        // To both: X runs its own share and F's, each once, and each is answered in the name
        // of the server called.
        let o = c
            .multicast(&[f, x], WHO, b"on", Completion::All, SECOND)
            .unwrap();
        assert_eq!(o.end, End::Complete);
        let mut from: Vec<Address> = o.replies.iter().map(|r| r.0).collect();
        from.sort();
        assert_eq!(from, vec![f, x]);
        for (_, r) in &o.replies {
            assert_eq!(r.as_deref().unwrap(), format!("{me} on at x").as_bytes());
        }
        let n = c.counters().client;
        assert_eq!((n.replies_stranger, n.completed), (0, 3));
    }
    stop.store(true, Ordering::SeqCst);
    let [x_rpc, f_rpc] = threads.map(|t| t.join().unwrap());
    let (fs, xs) = (f_rpc.counters().server, x_rpc.counters().server);
    assert_eq!(
        (fs.forwarded, fs.executed),
        (4, 2),
        "handed on is not run here"
    );
    assert_eq!(xs.executed, 6, "its own two shares and F's four");
}

/// Multicast RPC to a transaction group: one multicast reaches the members (the servers
/// that joined), each runs the call once, also when the injector drops copies and members
/// are sent copies of their own; a server that did not join never runs it and is reported
/// missing.
#[test]
fn a_call_to_a_transaction_group_reaches_its_members_only() {
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: 0.25,
        loss_seed: 5,
        ..EngineConfig::default()
    })
    .unwrap();
    let txn = TxnId(0x39_0001);
    let group = TxnGroup {
        txn,
        template: addr(39, 0, 2),
        sites: &[0, 1, 2],
    };
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::default()).collect();
    let threads: Vec<_> = (0..3u16)
        .map(|site| {
            let port = Port::open_on(&engine, addr(39, site, 2), port_cfg()).unwrap();
            let mut rpc = Rpc::new(port, rpc_cfg()).unwrap();
            if site != 2 {
                rpc.join_txn(txn).unwrap();
            }
            let n = counts[site as usize].clone();
            rpc.register(COUNT, move |_, p| {
                n.fetch_add(1, Ordering::SeqCst);
                Ok(p.to_vec())
            });
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    rpc.serve(Duration::from_millis(20)).unwrap();
                }
            })
        })
        .collect();
    let mut c = client(Some(&engine), addr(39, 1, 1));
    let members = [addr(39, 0, 2), addr(39, 1, 2)];
    let calls = 40u64;
    for i in 0..calls {
        let o = c
            .multicast_txn(
                &group,
                COUNT,
                &i.to_le_bytes(),
                Completion::Quorum(2),
                5 * SECOND,
            )
            .unwrap();
        assert_eq!(o.end, End::Complete, "call {i}");
        let mut from: Vec<Address> = o.replies.iter().map(|r| r.0).collect();
        from.sort();
        assert_eq!(from, members);
        assert_eq!(o.missing, vec![addr(39, 2, 2)]);
    }
    // All three: the one that did not join is missing when the deadline passes.
    let o = c
        .multicast_txn(
            &group,
            COUNT,
            b"all",
            Completion::All,
            Duration::from_millis(300),
        )
        .unwrap();
    assert_eq!(o.end, End::DeadlinePassed);
    assert_eq!(
        (o.replies.len(), o.missing.clone()),
        (2, vec![addr(39, 2, 2)])
    );
    let resent = c.counters().client.requests_resent;
    assert!(resent > 0, "members were sent copies of their own");
    assert!(engine.injected_losses() > 5);
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let ran: Vec<u64> = counts.iter().map(|n| n.load(Ordering::SeqCst)).collect();
    assert_eq!(
        ran,
        vec![calls + 1, calls + 1, 0],
        "once per member, never elsewhere"
    );
    drop(c);
    engine.shutdown();
}

/// Handlers on the engine loop: the engine's thread takes the requests in and runs the
/// handlers itself, for callers on this host (their ring, and a doorbell on the port's socket)
/// and remote ones (UDP), with at-most-once as before; `stop` gives the endpoint back.
#[test]
fn handlers_run_on_the_engine_thread_when_served_on_the_engine() {
    let engine = Engine::start(EngineConfig::default()).unwrap();
    let s = addr(29, 0, 2);
    let mut rpc = Rpc::new(Port::open_on(&engine, s, port_cfg()).unwrap(), rpc_cfg()).unwrap();
    rpc.register(ECHO, |_, p| {
        let me = std::thread::current();
        let mut out = me.name().unwrap_or("?").as_bytes().to_vec();
        out.extend_from_slice(p);
        Ok(out)
    });
    let served = match rpc.serve_on_engine() {
        Ok(s) => s,
        Err((e, _)) => panic!("{e}"),
    };
    // A caller on this host (another engine: as another process would) and a remote one.
    let other = Engine::start(EngineConfig::default()).unwrap();
    for site in [0, 1] {
        let mut c = client(Some(&other), addr(29, site, 1));
        for i in 0..200u32 {
            let got = c.call(s, ECHO, &i.to_le_bytes(), SECOND).unwrap();
            let mut want = b"txcast-engine".to_vec();
            want.extend_from_slice(&i.to_le_bytes());
            assert_eq!(got, want, "site {site} call {i}");
        }
        // Spaced calls: the engine sleeps between them and is woken by each.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(30));
            assert!(c.call(s, ECHO, b"z", SECOND).is_ok());
        }
    }
    assert_eq!(served.counters().server.executed, 410);
    // Handlers can be changed while served (between two engine steps).
    served.with(|r| r.register(COUNT, |_, _| Ok(b"counted".to_vec())));
    let mut c = client(Some(&other), addr(29, 1, 3));
    assert_eq!(c.call(s, COUNT, b"", SECOND).unwrap(), b"counted");
    // Back to a thread of ours.
    let mut rpc = served.stop();
    let t = std::thread::spawn(move || {
        rpc.serve(Duration::from_millis(300)).unwrap();
        rpc
    });
    let got = c.call(s, ECHO, b"!", SECOND).unwrap();
    assert!(
        !got.starts_with(b"txcast-engine"),
        "served by the caller's thread again"
    );
    let rpc = t.join().unwrap();
    assert_eq!(rpc.counters().server.executed, 412);
    // An invoker engine has no thread to serve on: refused, the endpoint given back.
    let inv = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap();
    let r = Rpc::new(
        Port::open_on(&inv, addr(29, 2, 2), port_cfg()).unwrap(),
        rpc_cfg(),
    )
    .unwrap();
    let Err((RpcCallError::Rpc(_), back)) = r.serve_on_engine() else {
        panic!("refused")
    };
    assert_eq!(back.address(), addr(29, 2, 2));
    drop((back, rpc, c));
    inv.shutdown();
    other.shutdown();
    engine.shutdown();
}

fn servers_executed(rpcs: &[Rpc]) -> u64 {
    rpcs.iter().map(|r| r.counters().server.executed).sum()
}

#[test]
fn malformed_and_foreign_messages_are_dropped_and_counted() {
    let s = addr(36, 0, 2);
    let servers = Servers::start(None, &[s]);
    let mut raw = Port::open(addr(36, 0, 3), port_cfg()).unwrap();
    raw.send(s, b"not an rpc message").unwrap();
    raw.send(s, &[0xA7; 40]).unwrap();
    raw.send(s, &[]).unwrap();
    let mut c = client(None, addr(36, 0, 1));
    assert_eq!(c.call(s, ECHO, b"12", SECOND).unwrap(), b"21");
    let rpcs = servers.stop();
    assert_eq!(rpcs[0].counters().dropped_bad, 3);
}

/// Found in review: a serve under steady traffic never returned, and a timeout of
/// `Duration::MAX` ("for ever") panicked.
#[test]
fn serve_returns_in_time_under_steady_traffic_and_long_timeouts_do_not_panic() {
    let s = addr(37, 1, 2);
    let port = Port::open(s, port_cfg()).unwrap();
    let mut server = Rpc::new(port, rpc_cfg()).unwrap();
    server.register(ECHO, |_, p| Ok(p.to_vec()));
    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..2u16)
        .map(|k| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = client(None, addr(37, 0, 1 + k));
                let mut ok = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    if c.call(s, ECHO, b"x", SECOND).is_ok() {
                        ok += 1;
                    }
                }
                // "For ever" is allowed, and ends when the call does.
                let id = c.call_async(s, ECHO, b"y", SECOND).unwrap();
                let _ = c.wait(id, Some(Duration::MAX));
                ok
            })
        })
        .collect();
    let mut served = 0;
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(600) {
        let start = std::time::Instant::now();
        served += server.serve(Duration::from_millis(20)).unwrap();
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "serve(20 ms) took {:?}",
            start.elapsed()
        );
    }
    stop.store(true, Ordering::SeqCst);
    // Serve the loaders' last calls, then let them go.
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        server.serve(Duration::from_millis(20)).unwrap();
    }
    let ok: u64 = loaders.into_iter().map(|l| l.join().unwrap()).sum();
    assert!(served > 100 && ok > 100, "served {served}, answered {ok}");
}
