//! The oracle across processes: `txcast oracle` runs the name server, a server process
//! registers with it, this process watches that server type; the server is killed with
//! SIGKILL and comes back on another "host" (127.0.0.9), and this process finds it there
//! through the oracle's notification, without doing anything itself.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use txcast_port::{
    ClusterConfig, Engine, EngineConfig, EngineMode, OracleClient, Port, PortConfig, Rpc, RpcConfig,
};
use txcast_proto::Address;

const INSTANCE: u16 = 38;

struct Proc {
    child: Child,
    _out: BufReader<ChildStdout>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `txcast <args>` and waits for its `ready` line.
fn start(args: &[&str]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_txcast"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), "ready", "{args:?}");
    Proc { child, _out: out }
}

#[test]
fn a_moved_server_process_is_found_again_through_the_oracle() {
    let dir = std::env::temp_dir().join(format!("txcast-oracle-proc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cluster.toml");
    std::fs::write(&config, format!("oracle = \"{INSTANCE}.0.15.0\"\n")).unwrap();
    let config_s = config.to_str().unwrap();
    let state = dir.join("oracle.state");
    let _oracle = start(&[
        "oracle",
        "--config",
        config_s,
        "--state",
        state.to_str().unwrap(),
    ]);

    let cluster = ClusterConfig::load(&config).unwrap();
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        cluster,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut c = Rpc::new(
        Port::open_on(
            &engine,
            Address::new(INSTANCE, 2, 1, 0),
            PortConfig::default(),
        )
        .unwrap(),
        RpcConfig::default(),
    )
    .unwrap();
    let mut oc = OracleClient::new(&mut c).unwrap();
    assert_eq!(
        oc.oracle(),
        Address::new(INSTANCE, 0, 15, 0),
        "found in the configuration"
    );
    oc.register_self(
        &mut c,
        &[format!("{INSTANCE}.*.2.*").parse().unwrap()],
        Duration::from_secs(5),
    )
    .unwrap();
    let server = Address::new(INSTANCE, 1, 2, 0);
    let instance = INSTANCE.to_string();
    let serve_until = |c: &mut Rpc, oc: &OracleClient, want: &dyn Fn(SocketAddr) -> bool| {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if oc
                .known(server)
                .is_some_and(|k| k.alive && want(SocketAddr::V4(k.location)))
            {
                return true;
            }
            c.serve(Duration::from_millis(10)).unwrap();
        }
        false
    };

    let first = start(&[
        "__rpc-server",
        "--instance",
        &instance,
        "--site",
        "1",
        "--config",
        config_s,
        "--oracle",
    ]);
    let mapped = engine.socket_addr(server).unwrap();
    assert!(
        serve_until(&mut c, &oc, &|l| l == mapped),
        "registration heard"
    );
    assert_eq!(
        c.call(server, 1, b"abc", Duration::from_secs(2)).unwrap(),
        b"cba"
    );

    // Killed; back on another host.
    drop(first);
    let moved_to: SocketAddr = "127.0.0.9:47400".parse().unwrap();
    let _second = start(&[
        "__rpc-server",
        "--instance",
        &instance,
        "--site",
        "1",
        "--config",
        config_s,
        "--oracle",
        "--at",
        "127.0.0.9:47400",
    ]);
    assert!(
        serve_until(&mut c, &oc, &|l| l == moved_to),
        "the move heard"
    );
    assert_eq!(engine.socket_addr(server).unwrap(), moved_to);
    // The move's notification told the client a new process serves there, so its first call
    // runs (without it, the call would be refused `Restarted`: the client knew the killed
    // process, which for all it knows got the call).
    assert_eq!(
        c.call(server, 1, b"xyz", Duration::from_secs(2)).unwrap(),
        b"zyx",
        "found again at its new location"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An oracle and one standby as `txcast oracle` processes (instance `i`), and a client engine
/// configured with both.
struct Replicas {
    dir: std::path::PathBuf,
    config: String,
    primary: Option<Proc>,
    _standby: Proc,
    engine: Engine,
    i: u16,
}

impl Replicas {
    fn start(i: u16) -> Replicas {
        let dir = std::env::temp_dir().join(format!("txcast-oracle-{i}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("cluster.toml");
        std::fs::write(
            &config,
            format!("oracle = \"{i}.0.15.0\"\noracle_standbys = [\"{i}.1.15.0\"]\n"),
        )
        .unwrap();
        let cluster = ClusterConfig::load(&config).unwrap();
        let config = config.to_str().unwrap().to_string();
        let mut r = Replicas {
            primary: None,
            _standby: start(&[
                "oracle",
                "--config",
                &config,
                "--state",
                dir.join("s").to_str().unwrap(),
                "--standby",
                "1",
            ]),
            engine: Engine::start(EngineConfig {
                mode: EngineMode::Invoker,
                cluster,
                ..EngineConfig::default()
            })
            .unwrap(),
            dir,
            config,
            i,
        };
        r.start_primary();
        r
    }

    /// (Re)starts the oracle process.
    fn start_primary(&mut self) {
        let state = self.dir.join("p");
        self.primary = Some(start(&[
            "oracle",
            "--config",
            &self.config,
            "--state",
            state.to_str().unwrap(),
        ]));
    }

    fn open(&self, site: u16) -> Rpc {
        let a = Address::new(self.i, site, 1, 0);
        Rpc::new(
            Port::open_on(&self.engine, a, PortConfig::default()).unwrap(),
            RpcConfig::default(),
        )
        .unwrap()
    }

    /// Waits until the standby, asked alone, knows `server`, serving `c` meanwhile.
    fn until_the_standby_knows(&self, c: &mut Rpc, server: Address) {
        let mut e = self.open(4);
        let mut only_standby = OracleClient::with_oracle(&mut e, Address::new(self.i, 1, 15, 0));
        let end = Instant::now() + Duration::from_secs(10);
        while only_standby.lookup(&mut e, server).unwrap().is_none() {
            assert!(Instant::now() < end, "{server} never reached the standby");
            c.serve(Duration::from_millis(20)).unwrap();
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `txcast oracle` and `txcast oracle --standby 1` as replicas over a group: a registration
/// made with the oracle reaches the standby, and a client configured with both finds it
/// through the standby once the oracle process is killed.
#[test]
fn a_standby_oracle_process_takes_over_when_the_oracle_is_killed() {
    let mut r = Replicas::start(39);
    let mut c = r.open(2);
    let mut oc = OracleClient::new(&mut c).unwrap();
    oc.register_self(&mut c, &[], Duration::from_secs(5))
        .unwrap();
    assert_eq!(oc.oracle(), Address::new(39, 0, 15, 0));
    let me = c.address();
    r.until_the_standby_knows(&mut c, me);
    r.primary = None;
    // Another client, configured the same way, finds the registration through the standby.
    let mut d = r.open(3);
    let mut od = OracleClient::new(&mut d).unwrap();
    let found = od.lookup(&mut d, me).unwrap();
    assert_eq!(od.oracle(), Address::new(39, 1, 15, 0), "failed over");
    assert!(found.is_some(), "the registration reached the standby");
}

/// Found in review: the oracle process (`txcast oracle`, no `--standby`) always created the
/// replicas' group. Restarted while its standby carried on, it formed a group of its own:
/// what clients registered with it never reached the standby (and the reverse), for ever.
#[test]
fn a_restarted_oracle_process_rejoins_its_standby() {
    let mut r = Replicas::start(41);
    // The oracle is killed and started again, as an operator (or systemd) would.
    r.primary = None;
    std::thread::sleep(Duration::from_millis(500));
    r.start_primary();
    // A server registers with the (restarted) oracle, the first of the list; it reaches the
    // standby.
    let mut c = r.open(2);
    let mut oc = OracleClient::new(&mut c).unwrap();
    oc.register_self(&mut c, &[], Duration::from_secs(5))
        .unwrap();
    assert_eq!(oc.oracle(), Address::new(41, 0, 15, 0));
    let me = c.address();
    r.until_the_standby_knows(&mut c, me);
}
