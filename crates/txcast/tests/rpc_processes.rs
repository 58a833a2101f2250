//! RPC across processes: this test process calls `txcast __rpc-server` processes, local (same
//! site: shared memory) and remote (another site: UDP), under injected loss, and one server is
//! killed with SIGKILL in the middle of a call.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use txcast_port::{
    End, Engine, EngineConfig, EngineMode, Port, PortConfig, Rpc, RpcCallError, RpcConfig,
};
use txcast_proto::Address;

const ECHO: u16 = 1;
const COUNT: u16 = 2;
const SLOW: u16 = 3;
const QUIT: u16 = 9;

struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
    addr: Address,
}

impl Server {
    fn start(instance: u16, site: u16, loss: f64) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_txcast"))
            .args([
                "__rpc-server",
                "--instance",
                &instance.to_string(),
                "--site",
                &site.to_string(),
                "--loss",
                &loss.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn server");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("ready line");
        assert_eq!(line.trim(), "ready");
        Server {
            child,
            out,
            addr: Address::new(instance, site, 2, 0),
        }
    }

    /// Ends the server with a QUIT call; returns how many COUNT calls it executed.
    fn quit(mut self, c: &mut Rpc) -> u64 {
        c.call(self.addr, QUIT, b"", Duration::from_secs(5))
            .expect("quit answered");
        let mut line = String::new();
        self.out.read_line(&mut line).expect("executed line");
        let n = line
            .trim()
            .strip_prefix("executed ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        assert!(self.child.wait().expect("exit").success());
        n
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(engine: &Engine, a: Address) -> Rpc {
    let cfg = RpcConfig {
        retry_initial: Duration::from_millis(5),
        retry_max: Duration::from_millis(50),
        ..RpcConfig::default()
    };
    Rpc::new(
        Port::open_on(engine, a, PortConfig::default()).unwrap(),
        cfg,
    )
    .unwrap()
}

#[test]
fn server_processes_local_and_remote_execute_every_call_once_under_loss() {
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        loss_injection: 0.2,
        loss_seed: 5,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut c = client(&engine, Address::new(38, 0, 1, 0));
    for site in [0u16, 1] {
        let s = Server::start(38, site, 0.2);
        assert_eq!(
            c.call(s.addr, ECHO, b"abc", Duration::from_secs(5))
                .unwrap(),
            b"cba"
        );
        let calls = 200u64;
        for i in 0..calls {
            let out = c
                .call(s.addr, COUNT, &i.to_le_bytes(), Duration::from_secs(5))
                .unwrap();
            assert_eq!(out, i.to_le_bytes());
        }
        assert_eq!(
            s.quit(&mut c),
            calls,
            "site {site}: each call executed once"
        );
    }
    assert!(engine.injected_losses() > 20);
    assert!(c.counters().client.requests_resent > 0);
}

#[test]
fn a_server_process_killed_mid_call_leaves_a_typed_error_by_the_deadline() {
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut c = client(&engine, Address::new(39, 0, 1, 0));
    for site in [0u16, 1] {
        let mut s = Server::start(39, site, 0.0);
        assert_eq!(
            c.call(s.addr, ECHO, b"ok", Duration::from_secs(5)).unwrap(),
            b"ko"
        );
        let deadline = Duration::from_millis(500);
        let t = Instant::now();
        let id = c.call_async(s.addr, SLOW, b"", deadline).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        s.child.kill().expect("SIGKILL");
        s.child.wait().expect("reaped");
        let o = c.wait(id, None).expect("ended");
        assert_eq!(o.end, End::DeadlinePassed, "site {site}");
        assert_eq!(o.missing, vec![s.addr]);
        let took = t.elapsed();
        assert!(
            took >= deadline && took < deadline + Duration::from_secs(1),
            "{took:?}"
        );
        match c.call(s.addr, ECHO, b"", Duration::from_millis(100)) {
            Err(RpcCallError::DeadlinePassed(o)) => assert_eq!(o.missing, vec![s.addr]),
            other => panic!("site {site}: {other:?}"),
        }
    }
}
