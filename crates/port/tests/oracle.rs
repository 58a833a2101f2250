//! The oracle through the public API: registration, lookups, notifications of failure and
//! recovery, a moved server found again through a notification, the registry kept across the
//! oracle's restart, and malformed requests.
//!
//! Every test uses its own `instance` number (30 to 35; other test binaries use them too,
//! but test binaries run one after another). The oracle is server type 15 of site 0.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::{
    Engine, EngineConfig, EngineMode, OracleClient, OracleServer, Pattern, Port, PortConfig,
    RemoteError, Rpc, RpcCallError, RpcConfig,
};
use txcast_proto::Address;

fn addr(instance: u16, site: u16, server_type: u16) -> Address {
    Address::new(instance, site, server_type, 0)
}

fn oracle_addr(instance: u16) -> Address {
    addr(instance, 0, 15)
}

fn engine() -> Engine {
    Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn rpc(e: &Engine, a: Address) -> Rpc {
    Rpc::new(
        Port::open_on(e, a, PortConfig::default()).unwrap(),
        RpcConfig::default(),
    )
    .unwrap()
}

/// An oracle on its own thread until the returned flag is set.
fn spawn_oracle(
    instance: u16,
    state: Option<std::path::PathBuf>,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<OracleServer>) {
    let e = engine();
    let o = OracleServer::open(&e, oracle_addr(instance), state.as_deref()).unwrap();
    serve_oracle(e, o)
}

/// Serves `o` on its own thread until the returned flag is set.
fn serve_oracle(
    e: Engine,
    mut o: OracleServer,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<OracleServer>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        let _keep = e;
        while !s.load(Ordering::SeqCst) {
            o.serve(Duration::from_millis(10)).unwrap();
        }
        o
    });
    (stop, t)
}

/// Serves `r` until `cond` holds (at most 5 s).
fn serve_until(r: &mut Rpc, mut cond: impl FnMut(&mut Rpc) -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if cond(r) {
            return true;
        }
        r.serve(Duration::from_millis(5)).unwrap();
    }
    cond(r)
}

const LEASE: Duration = Duration::from_secs(5);

#[test]
fn servers_register_and_are_looked_up_found_as_partners_and_all() {
    let (stop, oracle) = spawn_oracle(30, None);
    let e = engine();
    let mut servers = Vec::new();
    for site in [2u16, 1, 3] {
        let mut r = rpc(&e, addr(30, site, 4));
        let mut c = OracleClient::with_oracle(&mut r, oracle_addr(30));
        c.register_self(&mut r, &[], LEASE).unwrap();
        servers.push((r, c));
    }
    let (r, c) = &mut servers[0];
    let mapped = |site: u16| -> SocketAddrV4 {
        match e.socket_addr(addr(30, site, 4)).unwrap() {
            SocketAddr::V4(v) => v,
            _ => unreachable!(),
        }
    };
    assert_eq!(c.lookup(r, addr(30, 3, 4)).unwrap(), Some(mapped(3)));
    assert_eq!(c.lookup(r, addr(30, 3, 5)).unwrap(), None);
    let p: Pattern = "30.*.4.*".parse().unwrap();
    assert_eq!(
        c.find_partner(r, &p).unwrap(),
        Some((addr(30, 1, 4), mapped(1)))
    );
    let all = c.find_all(r, &p).unwrap();
    assert_eq!(
        all.iter().map(|(a, _)| a.site).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(c.find_all(r, &"31.*.*.*".parse().unwrap()).unwrap(), vec![]);
    stop.store(true, Ordering::SeqCst);
    let o = oracle.join().unwrap();
    assert!(o.counters().registrations >= 3);
}

#[test]
fn watchers_hear_of_registration_failure_and_recovery() {
    let (stop, oracle) = spawn_oracle(31, None);
    let e = engine();
    let mut w = rpc(&e, addr(31, 1, 2));
    let mut wc = OracleClient::with_oracle(&mut w, oracle_addr(31));
    wc.register_self(&mut w, &["31.*.3.*".parse().unwrap()], LEASE)
        .unwrap();
    let s_addr = addr(31, 2, 3);
    let e2 = engine();
    let mut s = rpc(&e2, s_addr);
    let mut sc = OracleClient::with_oracle(&mut s, oracle_addr(31));
    sc.register_self(&mut s, &[], Duration::from_millis(300))
        .unwrap();
    assert!(
        serve_until(&mut w, |_| wc.known(s_addr).is_some_and(|k| k.alive)),
        "registration heard"
    );
    // The server stops: nothing renews its lease.
    drop(s);
    assert!(
        serve_until(&mut w, |_| wc.known(s_addr).is_some_and(|k| !k.alive)),
        "failure heard"
    );
    // It comes back.
    let mut s = rpc(&e2, s_addr);
    let mut sc = OracleClient::with_oracle(&mut s, oracle_addr(31));
    sc.register_self(&mut s, &[], LEASE).unwrap();
    assert!(
        serve_until(&mut w, |_| wc.known(s_addr).is_some_and(|k| k.alive)),
        "recovery heard"
    );
    stop.store(true, Ordering::SeqCst);
    let o = oracle.join().unwrap();
    assert!(o.counters().notifications_sent >= 3);
}

#[test]
fn a_moved_server_is_found_again_through_a_notification() {
    let (stop, oracle) = spawn_oracle(32, None);
    let s_addr = addr(32, 1, 3);
    // The client watches the server type.
    let ec = engine();
    let mut c = rpc(&ec, addr(32, 2, 2));
    let mut cc = OracleClient::with_oracle(&mut c, oracle_addr(32));
    cc.register_self(&mut c, &["32.*.3.*".parse().unwrap()], LEASE)
        .unwrap();
    // The server, where its address maps.
    let serving = Arc::new(AtomicBool::new(true));
    let run_server = |e: Engine, serving: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            let mut s = rpc(&e, s_addr);
            s.register(1, |_, p| Ok(p.to_vec()));
            let mut sc = OracleClient::with_oracle(&mut s, oracle_addr(32));
            // A server that moved registers once the lease of its old place ran out.
            let end = Instant::now() + Duration::from_secs(10);
            while let Err(e) = sc.register_self(&mut s, &[], Duration::from_millis(300)) {
                assert!(Instant::now() < end, "{e}");
                s.serve(Duration::from_millis(20)).unwrap();
            }
            while serving.load(Ordering::SeqCst) {
                s.serve(Duration::from_millis(5)).unwrap();
            }
        })
    };
    let first = run_server(engine(), serving.clone());
    assert!(serve_until(&mut c, |_| cc.known(s_addr).is_some()));
    assert_eq!(
        c.call(s_addr, 1, b"here", Duration::from_secs(2)).unwrap(),
        b"here"
    );
    // It moves to another host (127.0.0.9 stands for one) and registers there.
    serving.store(false, Ordering::SeqCst);
    first.join().unwrap();
    let moved_to = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 9), 47_321));
    let e2 = engine();
    assert!(e2.set_location(s_addr, moved_to));
    let serving = Arc::new(AtomicBool::new(true));
    let second = run_server(e2, serving.clone());
    // The notification reaches the client's engine without the application's help.
    assert!(
        serve_until(&mut c, |_| cc
            .known(s_addr)
            .is_some_and(|k| SocketAddr::V4(k.location) == moved_to)),
        "the move was heard"
    );
    assert_eq!(ec.socket_addr(s_addr).unwrap(), moved_to);
    // The notification also told the client a new process serves there: its first call is
    // not refused `Restarted` for naming the old one's incarnation.
    assert_eq!(
        c.call(s_addr, 1, b"there", Duration::from_secs(2)).unwrap(),
        b"there",
        "found again at its new location"
    );
    serving.store(false, Ordering::SeqCst);
    second.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    oracle.join().unwrap();
}

/// Found in review: anyone could register a live server's address from elsewhere and have
/// its watchers send there.
#[test]
fn a_live_servers_address_cannot_be_taken_over() {
    use txcast_proto::oracle::{request, Register};
    use txcast_proto::rpc::msg::{encode, RequestHeader, RpcHeader};
    use txcast_proto::wire::{Kind, PacketHeader, PacketWriter};
    let (stop, oracle) = spawn_oracle(34, None);
    let e = engine();
    let victim = addr(34, 5, 3);
    let mut s = rpc(&e, victim);
    let mut sc = OracleClient::with_oracle(&mut s, oracle_addr(34));
    sc.register_self(&mut s, &[], LEASE).unwrap();
    // An impostor on another host forges the victim's registration from a plain socket.
    let evil = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), 47_331);
    let forged = Register {
        lease: LEASE,
        location: evil,
        notifiers: vec![],
    }
    .encode();
    let mut rpc_msg = vec![0u8; 200];
    let n = encode(
        &RpcHeader::Request(RequestHeader {
            request_type: request::REGISTER,
            deadline_us: 1_000_000,
            incarnation: 99,
            call_id: 1,
            acked_below: 1,
            server_incarnation: 0,
        }),
        &forged,
        &mut rpc_msg,
    )
    .unwrap();
    let header = PacketHeader {
        kind: Kind::Datagram,
        flags: 0,
        cluster: e.config().cluster.cluster,
        incarnation: 99,
        source: victim,
        destination: oracle_addr(34),
    };
    let mut packet = vec![0u8; 1500];
    let mut w = PacketWriter::datagram(&mut packet, header, None);
    assert!(w.push(&rpc_msg[..n]));
    let len = w.finish();
    let sock = std::net::UdpSocket::bind("127.0.0.9:0").unwrap();
    let to = e.socket_addr(oracle_addr(34)).unwrap();
    for _ in 0..3 {
        sock.send_to(&packet[..len], to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut q = rpc(&e, addr(34, 6, 3));
    let mut qc = OracleClient::with_oracle(&mut q, oracle_addr(34));
    let mapped = match e.socket_addr(victim).unwrap() {
        SocketAddr::V4(v) => v,
        _ => unreachable!(),
    };
    assert_eq!(
        qc.lookup(&mut q, victim).unwrap(),
        Some(mapped),
        "still where it was"
    );
    stop.store(true, Ordering::SeqCst);
    let o = oracle.join().unwrap();
    assert!(o.counters().registrations >= 2);
}

#[test]
fn the_registry_survives_the_oracles_restart_and_bad_requests_get_errors() {
    let dir = std::env::temp_dir().join(format!("txcast-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("oracle.state");
    let _ = std::fs::remove_file(&state);
    let (stop, oracle) = spawn_oracle(33, Some(state.clone()));
    let e = engine();
    let mut s = rpc(&e, addr(33, 1, 3));
    let mut sc = OracleClient::with_oracle(&mut s, oracle_addr(33));
    sc.register_self(&mut s, &["33.*.*.*".parse().unwrap()], LEASE)
        .unwrap();
    // Malformed requests get a clear error and change nothing.
    match s.call(oracle_addr(33), 0xFF01, b"garbage", Duration::from_secs(2)) {
        Err(RpcCallError::Remote(RemoteError::Failed(m))) => assert!(m.contains("oracle"), "{m}"),
        other => panic!("{other:?}"),
    }
    stop.store(true, Ordering::SeqCst);
    drop(oracle.join().unwrap());
    assert!(state.exists());
    // A new oracle from the same file knows the server.
    let (stop, oracle) = spawn_oracle(33, Some(state.clone()));
    let mut q = rpc(&e, addr(33, 2, 3));
    let mut qc = OracleClient::with_oracle(&mut q, oracle_addr(33));
    assert!(qc.lookup(&mut q, addr(33, 1, 3)).unwrap().is_some());
    stop.store(true, Ordering::SeqCst);
    oracle.join().unwrap();
    // A corrupt file is refused with a clear error.
    std::fs::write(&state, b"not a registry").unwrap();
    let e3 = engine();
    match OracleServer::open(&e3, oracle_addr(33), Some(&state)) {
        Err(txcast_port::OracleError::State(m)) => assert!(m.contains("snapshot"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a corrupt state file was accepted"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found in review: a notification lost (or overtaken by an older one) was never corrected.
/// Every lease renewal's answer now brings a client's cache up to date.
#[test]
fn a_lost_notification_is_corrected_by_the_next_renewal() {
    let (stop, oracle) = spawn_oracle(35, None);
    let e = engine();
    let mut w = rpc(&e, addr(35, 1, 2));
    let mut wc = OracleClient::with_oracle(&mut w, oracle_addr(35));
    wc.register_self(
        &mut w,
        &["35.*.3.*".parse().unwrap()],
        Duration::from_millis(300),
    )
    .unwrap();
    // Every notification to the watcher is lost (its handler drops them).
    w.register(txcast_proto::oracle::request::NOTIFY, |_, _| Ok(Vec::new()));
    let s_addr = addr(35, 2, 3);
    let e2 = engine();
    let mut s = rpc(&e2, s_addr);
    let mut sc = OracleClient::with_oracle(&mut s, oracle_addr(35));
    sc.register_self(&mut s, &[], Duration::from_millis(300))
        .unwrap();
    let renewed = |s: &mut Rpc| {
        // The server keeps its lease while the watcher waits.
        s.serve(Duration::from_millis(1)).unwrap();
    };
    let end = Instant::now() + Duration::from_secs(5);
    while !wc.known(s_addr).is_some_and(|k| k.alive) {
        assert!(Instant::now() < end, "the renewal never taught the watcher");
        w.serve(Duration::from_millis(5)).unwrap();
        renewed(&mut s);
    }
    // The server goes: the next renewals say so too.
    drop(s);
    let end = Instant::now() + Duration::from_secs(5);
    while wc.known(s_addr).is_some_and(|k| k.alive) {
        assert!(Instant::now() < end, "the failure was never learned");
        w.serve(Duration::from_millis(5)).unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    oracle.join().unwrap();
}

/// A replica of the oracle on its own thread and engine until the returned flag is set: the
/// first creates the group, the others join it through `contact`.
fn spawn_replica(
    a: Address,
    contact: Option<Address>,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<OracleServer>) {
    let e = engine();
    let o = OracleServer::open_replica(&e, a, None, 77, contact, Duration::from_secs(5)).unwrap();
    serve_oracle(e, o)
}

/// The oracle replicated over a group: what a server registers with the oracle reaches the
/// standby; when the oracle fails, clients go on with the standby (lookups, lease renewals,
/// new registrations and their notifications), without the application's help.
#[test]
fn a_standby_oracle_takes_over_when_the_oracle_fails() {
    let (primary, standby) = (addr(34, 0, 15), addr(34, 1, 15));
    let (stop_p, p) = spawn_replica(primary, None);
    let (stop_s, s) = spawn_replica(standby, Some(primary));
    let oracles = [primary, standby];
    let e = engine();
    // A server registers (with the oracle, the first of the list).
    let x = addr(34, 2, 4);
    let mut xr = rpc(&e, x);
    let mut xc = OracleClient::with_oracles(&mut xr, &oracles);
    let lease = Duration::from_millis(900);
    xc.register_self(&mut xr, &[], lease).unwrap();
    assert_eq!(xc.oracle(), primary);
    // It serves on its own thread (its renewals go on while this one waits in calls).
    let x_stop = Arc::new(AtomicBool::new(false));
    let xs = x_stop.clone();
    let x_thread = std::thread::spawn(move || {
        while !xs.load(Ordering::SeqCst) {
            xr.serve(Duration::from_millis(10)).unwrap();
        }
        xr
    });
    // A watcher of servers of type 5, through the standby alone: the registration reached it.
    let mut wr = rpc(&e, addr(34, 3, 6));
    let mut only_standby = OracleClient::with_oracle(&mut wr, standby);
    assert!(serve_until(&mut wr, |r| only_standby
        .lookup(r, x)
        .unwrap()
        .is_some()));
    let mut wc = OracleClient::with_oracles(&mut wr, &oracles);
    wc.register_self(
        &mut wr,
        &["34.*.5.*".parse().unwrap()],
        Duration::from_secs(5),
    )
    .unwrap();
    // That registration reaches the standby too before the oracle fails (replication is
    // asynchronous: stopped at once, the oracle could take it down with it on a loaded
    // machine, and the standby's count below came out one short).
    assert!(serve_until(&mut wr, |r| only_standby
        .lookup(r, addr(34, 3, 6))
        .unwrap()
        .is_some()));
    // The oracle fails.
    stop_p.store(true, Ordering::SeqCst);
    let p = p.join().unwrap();
    assert!(p.counters().replicated_out >= 2, "{:?}", p.counters());
    drop(p);
    // Lookups go on through the standby; the server's renewals move there too, so it stays
    // registered past its lease.
    let moved_at = Instant::now();
    while moved_at.elapsed() < 3 * lease {
        wr.serve(Duration::from_millis(5)).unwrap();
    }
    assert!(
        wc.lookup(&mut wr, x).unwrap().is_some(),
        "renewed with the standby"
    );
    assert_eq!(wc.oracle(), standby);
    // A new server of type 5 registers; the watcher hears of it from the standby.
    let y = addr(34, 4, 5);
    let mut yr = rpc(&e, y);
    let mut yc = OracleClient::with_oracles(&mut yr, &oracles);
    yc.register_self(&mut yr, &[], Duration::from_secs(5))
        .unwrap();
    assert_eq!(yc.oracle(), standby);
    assert!(serve_until(&mut wr, |_| wc
        .known(y)
        .is_some_and(|k| k.alive)));
    x_stop.store(true, Ordering::SeqCst);
    let xr = x_thread.join().unwrap();
    assert!(
        xr.counters().client.timed_out >= 1,
        "a renewal to the failed oracle"
    );
    stop_s.store(true, Ordering::SeqCst);
    let s = s.join().unwrap();
    assert!(s.counters().replicated_in >= 2, "{:?}", s.counters());
}

/// Found in review: with replicas, a failure notification from a replica that has not seen a
/// server's move (its lease there runs a little later) could undo the move another replica
/// announced. A failure at a location other than where the server is known alive is ignored;
/// one where it is known alive is not.
#[test]
fn a_failure_notified_at_a_place_the_server_left_is_ignored() {
    use txcast_proto::oracle::{request, Change, Notification};
    let e = engine();
    let oracle = oracle_addr(35);
    let (client, x) = (addr(35, 2, 1), addr(35, 3, 4));
    let mut fake = rpc(&e, oracle);
    let mut c = rpc(&e, client);
    let cc = OracleClient::with_oracle(&mut c, oracle);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            c.serve(Duration::from_millis(5)).unwrap();
        }
        (c, cc)
    });
    let at = |port: u16| SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), port);
    let mut notify = |change, location| {
        let n = Notification {
            change,
            server: x,
            location,
        };
        fake.call(client, request::NOTIFY, &n.encode(), Duration::from_secs(2))
            .unwrap();
    };
    notify(Change::Moved, at(2));
    // The lagging replica's news of the old place, after the move.
    notify(Change::Failed, at(1));
    stop.store(true, Ordering::SeqCst);
    let (mut c, cc) = t.join().unwrap();
    let k = cc.known(x).unwrap();
    assert!(k.alive && k.location == at(2), "{k:?}");
    // Where it is known alive, a failure counts.
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            c.serve(Duration::from_millis(5)).unwrap();
        }
    });
    notify(Change::Failed, at(2));
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    assert!(!cc.known(x).unwrap().alive);
}
