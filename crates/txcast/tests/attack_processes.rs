//! An attacker on the wire against running `txcast __rpc-server` processes of a keyed cluster
//! (issue 23, part 3): while this process calls them, the attacker sends at each one's UDP
//! socket random datagrams, truncated and oversized packets, wrong and missing MACs, other
//! clusters' packets, and, with the client's source address (a raw socket), replays of the
//! captured requests at once and after more calls. Checked: no server dies; nothing is sent
//! to the attacker; a replay gets at most one answer, to the client; every call is executed
//! exactly once (each server's count at QUIT). Needs root (raw sockets): without it, skipped
//! with one line.

mod attack;

use attack::{
    garbage, raw_available, send_paced, spawn_rpc_server, v4, Rng, Sniffer, Spoofer, PASSPHRASE,
};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Child, ChildStdout};
use std::time::Duration;
use txcast_port::{ClusterConfig, Engine, EngineConfig, Port, PortConfig, Rpc, RpcConfig};
use txcast_proto::wire::Kind;
use txcast_proto::Address;

const COUNT: u16 = 2;
const QUIT: u16 = 9;
const INSTANCE: u16 = 2;
const TIMEOUT: Duration = Duration::from_secs(5);

fn toml() -> String {
    format!(
        "cluster = {}\nbase_port = 10000\nserver_types_max = 16\nserver_instances_max = 4\n\
         key_passphrase = \"{PASSPHRASE}\"\n",
        attack::CLUSTER
    )
}

struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
    addr: Address,
}

impl Server {
    fn start(config: &std::path::Path, site: u16) -> Server {
        let (child, out) = spawn_rpc_server(INSTANCE, site, config);
        Server {
            child,
            out,
            addr: Address::new(INSTANCE, site, COUNT, 0),
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Ends the server with a QUIT call; how many COUNT calls it executed.
    fn quit(mut self, c: &mut Rpc) -> u64 {
        c.call(self.addr, QUIT, b"", TIMEOUT)
            .expect("quit answered");
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let n = line
            .trim()
            .strip_prefix("executed ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        assert!(self.child.wait().unwrap().success());
        n
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn calls(c: &mut Rpc, to: Address, tag: &str, n: usize) {
    for i in 0..n {
        let p = format!("{tag} {i}");
        assert_eq!(
            c.call(to, COUNT, p.as_bytes(), TIMEOUT).unwrap(),
            p.as_bytes()
        );
    }
}

/// A test's cluster file in a scratch directory, and an engine on that cluster for the
/// client; the engine is shut down and the directory removed on drop.
struct Bed {
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
    cluster: ClusterConfig,
    engine: Engine,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let dir = std::env::temp_dir().join(format!("txcast-attack{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("cluster.toml");
        std::fs::write(&config, toml()).unwrap();
        let cluster = ClusterConfig::from_toml(&toml()).unwrap();
        let engine = Engine::start(EngineConfig {
            cluster: cluster.clone(),
            ..EngineConfig::default()
        })
        .unwrap();
        Bed {
            dir,
            config,
            cluster,
            engine,
        }
    }

    /// A client on this host's server `ty` (drop it before the bed), and its socket address.
    fn client(&self, ty: u16, cfg: RpcConfig) -> (SocketAddrV4, Rpc) {
        let me = Address::new(INSTANCE, 0, ty, 0);
        let at = v4(self.cluster.socket_addr(me).unwrap());
        let port = Port::open_on(&self.engine, me, PortConfig::default()).unwrap();
        (at, Rpc::new(port, cfg).unwrap())
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.engine.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn running_servers_survive_the_attacker_and_execute_each_call_once() {
    if !raw_available() {
        println!("attack_processes: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let bed = Bed::new("");
    let (config, cluster) = (&bed.config, &bed.cluster);
    let (client_at, mut c) = bed.client(
        1,
        RpcConfig {
            retry_initial: Duration::from_millis(5),
            retry_max: Duration::from_millis(50),
            ..RpcConfig::default()
        },
    );
    let mut servers: Vec<Server> = [1u16, 2]
        .iter()
        .map(|&s| Server::start(config, s))
        .collect();
    let server_at: Vec<SocketAddrV4> = servers
        .iter()
        .map(|s| v4(cluster.socket_addr(s.addr).unwrap()))
        .collect();

    let to_servers = server_at.clone();
    let sniffer =
        Sniffer::start(move |p| p.from == client_at && to_servers.contains(&p.to)).unwrap();
    for s in &servers {
        calls(&mut c, s.addr, "first", 50);
    }
    std::thread::sleep(Duration::from_millis(50));
    let captured = sniffer.finish();
    let requests: Vec<Vec<Vec<u8>>> = server_at
        .iter()
        .map(|&at| {
            captured
                .iter()
                .filter(|p| p.to == at && p.payload.get(3) == Some(&(Kind::Datagram as u8)))
                .map(|p| p.payload.clone())
                .collect()
        })
        .collect();
    assert!(
        requests.iter().all(|r| r.len() >= 50),
        "captured {}",
        captured.len()
    );

    // Garbage of every kind at each server's socket, from the attacker's own address.
    let attacker = UdpSocket::bind("127.0.0.9:0").unwrap();
    let mut rng = Rng(0x0bad_5eed);
    let mut garbage_sent = 0;
    for (k, &at) in server_at.iter().enumerate() {
        let (junk, _) = garbage(&requests[k][0], &mut rng);
        send_paced(&attacker, SocketAddr::V4(at), &junk);
        send_paced(&attacker, SocketAddr::V4(at), &requests[k]);
        garbage_sent += junk.len() + requests[k].len();
    }

    // Spoofed replays of the captured requests: at once, and after more calls.
    let spoofer = Spoofer::new().unwrap();
    let back = server_at.clone();
    let answers = Sniffer::start(move |p| back.contains(&p.from) && p.to == client_at).unwrap();
    let mut replayed = 0;
    for round in 0..2 {
        for (k, &at) in server_at.iter().enumerate() {
            for (i, p) in requests[k].iter().enumerate() {
                spoofer.send(client_at, at, p).unwrap();
                if i % 16 == 15 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            replayed += requests[k].len();
        }
        if round == 0 {
            for s in &servers {
                calls(&mut c, s.addr, "second", 20);
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let answered = answers.finish().len();
    attacker.set_nonblocking(true).unwrap();
    let mut to_attacker = 0;
    let mut buf = vec![0u8; 65536];
    while attacker.recv_from(&mut buf).is_ok() {
        to_attacker += 1;
    }
    assert_eq!(to_attacker, 0, "datagrams sent back to the attacker");
    // The client's own 20 calls per server are answered too (20 replies at least).
    assert!(
        answered <= replayed + 2 * 20 * 3,
        "{answered} datagrams to the client for {replayed} replays"
    );
    for s in &mut servers {
        assert!(s.alive(), "a server died");
    }
    for s in servers {
        assert_eq!(s.quit(&mut c), 70, "each call executed once");
    }
    println!(
        "attack_processes: {garbage_sent} garbage and unspoofed packets, {replayed} spoofed \
         replays at 2 server processes; {to_attacker} answers to the attacker, {answered} \
         datagrams to the client (its own 40 calls' replies among them); 70 calls executed \
         once each per server"
    );
}

/// Replays of a server's captured requests sent to its successor (the server restarted at the
/// same address): none may be executed again. (Before the replay guard, a request naming no
/// server incarnation, a client's first call to a server, ran at whichever server got it.)
#[test]
fn a_restarted_server_executes_no_replayed_request() {
    if !raw_available() {
        println!("attack_processes: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let bed = Bed::new("-r");
    let (config, cluster) = (&bed.config, &bed.cluster);
    let (client_at, mut c) = bed.client(3, RpcConfig::default());
    let s = Server::start(config, 3);
    let at = v4(cluster.socket_addr(s.addr).unwrap());
    let sniffer = Sniffer::start(move |p| p.from == client_at && p.to == at).unwrap();
    calls(&mut c, s.addr, "first", 30);
    std::thread::sleep(Duration::from_millis(50));
    let requests: Vec<Vec<u8>> = sniffer.finish().into_iter().map(|p| p.payload).collect();
    assert_eq!(s.quit(&mut c), 30);
    let s = Server::start(config, 3);
    let spoofer = Spoofer::new().unwrap();
    for p in &requests {
        spoofer.send(client_at, at, p).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    // The client knew the old server: its first call to the new one is refused as
    // `Restarted` (not executed), as documented; it calls again.
    match c.call(s.addr, COUNT, b"probe", TIMEOUT) {
        Ok(r) => assert_eq!(r, b"probe"),
        Err(txcast_port::RpcCallError::Remote(txcast_port::RemoteError::Restarted)) => {
            c.call(s.addr, COUNT, b"probe", TIMEOUT).unwrap();
        }
        Err(e) => panic!("{e:?}"),
    }
    calls(&mut c, s.addr, "second", 4);
    let executed = s.quit(&mut c);
    println!(
        "attack_processes: {} captured requests replayed to the restarted server; it executed \
         {executed} calls (5 its own)",
        requests.len()
    );
    assert_eq!(
        executed, 5,
        "replayed requests executed again after the restart"
    );
}

/// Replays of captured requests to the same server process after it forgot the calls (their
/// deadline plus the packet lifetime, 5 + 2 s, passed): none may be executed again. (Before
/// the replay guard, the at-most-once memory assumed no datagram lives longer than the packet
/// lifetime; a replayed one does, and a forgotten call ran again.)
#[test]
fn a_server_executes_no_request_replayed_after_it_forgot_the_call() {
    if !raw_available() {
        println!("attack_processes: skipped, raw sockets need root (CAP_NET_RAW)");
        return;
    }
    let bed = Bed::new("-l");
    let (config, cluster) = (&bed.config, &bed.cluster);
    let (client_at, mut c) = bed.client(0, RpcConfig::default());
    let s = Server::start(config, 4);
    let at = v4(cluster.socket_addr(s.addr).unwrap());
    let sniffer = Sniffer::start(move |p| p.from == client_at && p.to == at).unwrap();
    calls(&mut c, s.addr, "first", 10);
    std::thread::sleep(Duration::from_millis(50));
    let requests: Vec<Vec<u8>> = sniffer.finish().into_iter().map(|p| p.payload).collect();
    std::thread::sleep(Duration::from_secs(8));
    let spoofer = Spoofer::new().unwrap();
    for p in &requests {
        spoofer.send(client_at, at, p).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let executed = s.quit(&mut c);
    println!(
        "attack_processes: {} captured requests replayed 8 s later; the server executed \
         {executed} calls (10 its own)",
        requests.len()
    );
    assert_eq!(executed, 10, "replayed requests executed again");
}
