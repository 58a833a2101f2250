//! Extension modules on the engine loop, through the public API: instruction round trips on
//! one host, across processes and across hosts (sites on loopback), control messages in order
//! under injected loss, timeouts, keys, and a peer's restart.

use std::time::Duration;
use txcast_port::module::{Context, Control, Instruction, Registration, STATUS_OK};
use txcast_port::{Engine, EngineConfig, Handlers, ModuleHost, ModuleHostError, Port, PortConfig};
use txcast_proto::module::ping::{self, PingPong, PingRun};
use txcast_proto::module::{Module, ModuleError, RegisterError};
use txcast_proto::Address;

const KEY: u64 = 0x5eed_0fc0_ffee;
const PING_ID: u16 = 1;
const WAIT: Duration = Duration::from_secs(10);

fn addr(instance: u16, site: u16, server_type: u16, server: u16) -> Address {
    Address::new(instance, site, server_type, server)
}

fn pinger(a: Address) -> ModuleHost {
    let h = ModuleHost::open(a).unwrap();
    h.load(PING_ID, KEY, PingPong::default()).unwrap();
    h
}

fn run(h: &ModuleHost, peer: Address, exchanges: u32, bytes: u16, timeout_ms: u64) -> (u32, u32) {
    let args = PingRun {
        peer,
        exchanges,
        bytes,
        timeout: Duration::from_millis(timeout_ms),
    }
    .encode();
    let c = h.call(PING_ID, KEY, ping::RUN, &args, WAIT).unwrap();
    (
        c.status,
        u32::from_le_bytes(c.result.as_slice().try_into().unwrap()),
    )
}

#[test]
fn instruction_round_trip_on_one_host_and_across_hosts() {
    let a = pinger(addr(40, 0, 1, 0));
    let local = pinger(addr(40, 0, 1, 1));
    let remote = pinger(addr(40, 1, 1, 0));
    assert_eq!(run(&a, local.address(), 200, 64, 5_000), (STATUS_OK, 200));
    assert_eq!(
        run(&a, remote.address(), 200, 1000, 5_000),
        (STATUS_OK, 200)
    );
    let answered = |h: &ModuleHost| h.with_module(PING_ID, |p: &mut PingPong| p.answered);
    assert_eq!(answered(&local), Some(200));
    assert_eq!(answered(&remote), Some(200));
    assert_eq!(a.counters().controls_sent, 400);
    assert_eq!(a.counters().controls_received, 400);
    assert_eq!(a.modules(), vec![(PING_ID, "pingpong")]);
}

#[test]
fn refusals_are_typed() {
    let a = pinger(addr(40, 0, 2, 0));
    let bad = |r: Result<_, ModuleHostError>| match r {
        Err(ModuleHostError::Refused(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(
        bad(a.call(PING_ID, KEY + 1, ping::RUN, &[], WAIT)),
        ModuleError::BadKey
    );
    assert_eq!(
        bad(a.call(9, KEY, ping::RUN, &[], WAIT)),
        ModuleError::NoSuchModule(9)
    );
    assert_eq!(
        bad(a.call(PING_ID, KEY, 99, &[], WAIT)),
        ModuleError::UnknownInstruction(99)
    );
    assert!(matches!(
        a.load(2, KEY, PingPong::default()),
        Err(ModuleHostError::Register(
            RegisterError::ControlTypeTaken { .. }
        ))
    ));
    assert!(matches!(
        a.call(PING_ID, KEY, ping::RUN, &vec![0u8; 5000], WAIT),
        Err(ModuleHostError::ArgsTooLong(5000))
    ));
    // Bad arguments reach the module, which says so.
    let c = a.call(PING_ID, KEY, ping::RUN, b"short", WAIT).unwrap();
    assert_eq!(c.status, ping::STATUS_BAD_ARGS);
}

#[test]
fn a_wrong_key_on_the_wire_is_dropped_and_the_run_times_out() {
    let a = pinger(addr(40, 0, 3, 0));
    let b = ModuleHost::open(addr(40, 1, 3, 0)).unwrap();
    b.load(PING_ID, KEY ^ 1, PingPong::default()).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(run(&a, b.address(), 3, 8, 50), (ping::STATUS_TIMED_OUT, 0));
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(b.counters().dropped_bad_key >= 1);
    assert_eq!(b.counters().controls_received, 0);
}

#[test]
fn a_peer_with_no_module_is_timed_out() {
    let a = pinger(addr(40, 0, 4, 0));
    let mut silent = Port::open(addr(40, 0, 4, 1), PortConfig::default()).unwrap();
    assert_eq!(
        run(&a, silent.address(), 1, 8, 30),
        (ping::STATUS_TIMED_OUT, 0)
    );
    // The PING did arrive: a plain port sees the module's message.
    let mut buf = [0u8; 2048];
    let got = silent
        .recv_timeout(&mut buf, Some(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(got.source, a.address());
}

/// Streams numbered control messages; the receiving side records them.
#[derive(Default)]
struct Stream {
    peer: Option<Address>,
    next: u32,
    total: u32,
    job: Option<txcast_proto::module::InstructionId>,
    received: Vec<u32>,
}

const SEND: u16 = 1;
const NUMBER: u16 = 0x200;
const STREAM_ID: u16 = 2;
const TICK: u64 = 1;

impl Stream {
    fn pump(&mut self, cx: &mut Context<'_>) {
        let Some(peer) = self.peer else { return };
        while self.next < self.total {
            if cx.send(peer, NUMBER, &self.next.to_le_bytes()).is_err() {
                // Budget or back-pressure: the rest goes on the next tick.
                let _ = cx.arm(cx.now() + Duration::from_micros(200), TICK);
                return;
            }
            self.next += 1;
        }
        if let Some(id) = self.job.take() {
            let _ = cx.complete(id, STATUS_OK, &self.next.to_le_bytes());
        }
    }
}

impl Module for Stream {
    fn registration(&self) -> Registration {
        Registration {
            name: "stream",
            instructions: &[SEND],
            controls: &[NUMBER],
        }
    }
    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        self.peer = Some(Address::read_from(&ins.args[..8]));
        self.total = u32::from_le_bytes(ins.args[8..12].try_into().unwrap());
        self.job = Some(ins.id);
        self.pump(cx);
    }
    fn on_control(&mut self, _: &mut Context<'_>, msg: Control<'_>) {
        self.received
            .push(u32::from_le_bytes(msg.body.try_into().unwrap()));
    }
    fn on_timeout(&mut self, cx: &mut Context<'_>, _: u64) {
        self.pump(cx);
    }
}

#[test]
fn control_messages_arrive_once_and_in_order_under_loss() {
    const N: u32 = 3_000;
    let lossy = Engine::start(EngineConfig {
        loss_injection: 0.1,
        loss_seed: 7,
        ..EngineConfig::default()
    })
    .unwrap();
    let on = |e: &Engine, a| {
        let h = ModuleHost::serve(Port::open_on(e, a, PortConfig::default()).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
        h.load(STREAM_ID, KEY, Stream::default()).unwrap();
        h
    };
    let a = on(&lossy, addr(40, 0, 5, 0));
    let b = on(&lossy, addr(40, 1, 5, 0));
    let mut args = b.address().to_bytes().to_vec();
    args.extend_from_slice(&N.to_le_bytes());
    let c = a.call(STREAM_ID, KEY, SEND, &args, WAIT).unwrap();
    assert_eq!(c.status, STATUS_OK);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let got = b
            .with_module(STREAM_ID, |s: &mut Stream| s.received.len())
            .unwrap();
        if got >= N as usize || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let received = b
        .with_module(STREAM_ID, |s: &mut Stream| s.received.clone())
        .unwrap();
    assert_eq!(received, (0..N).collect::<Vec<_>>());
    assert!(lossy.injected_losses() > 0, "no loss was injected");
    drop((a, b));
    lossy.shutdown();
}

/// A child process that serves a PING/PONG module at the address in `TXCAST_MODULE_AT` until
/// its stdin closes, then dies without closing anything.
fn serve_in_child_if_asked() {
    let Ok(at) = std::env::var("TXCAST_MODULE_AT") else {
        return;
    };
    let a: Address = at.parse().unwrap();
    let h = pinger(a);
    use std::io::{Read, Write};
    println!("open {}", h.incarnation());
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    std::mem::forget(h);
    // SAFETY: ends the child at once, as a crash would, without running destructors.
    unsafe { libc::_exit(0) }
}

/// Starts a child serving at `at`; its incarnation once it serves. `end_child` reaps it.
#[allow(clippy::zombie_processes)]
fn child_host(test: &str, at: Address) -> (std::process::Child, u64) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1", "-q"])
        .env("TXCAST_MODULE_AT", at.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.wait();
            panic!("child ended early");
        }
        if let Some(inc) = line.trim().strip_prefix("open ") {
            return (child, inc.parse().unwrap());
        }
    }
}

fn end_child(mut child: std::process::Child) {
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// Across processes, on one host (the shared-memory path) and across hosts (UDP): a module
/// whose peer process was replaced by a new one learns of the restart instead of waiting.
#[test]
fn across_processes_a_restarted_peer_is_seen() {
    const TEST: &str = "across_processes_a_restarted_peer_is_seen";
    serve_in_child_if_asked();
    let a = pinger(addr(40, 0, 6, 0));
    for peer in [addr(40, 0, 6, 1), addr(40, 1, 6, 0)] {
        let (child, first) = child_host(TEST, peer);
        assert_eq!(run(&a, peer, 50, 64, 5_000), (STATUS_OK, 50));
        end_child(child);
        let (child, second) = child_host(TEST, peer);
        assert!(second > first);
        // The first PING names the incarnation that died: the new one says so.
        assert_eq!(
            run(&a, peer, 5, 64, 5_000),
            (ping::STATUS_PEER_RESTARTED, 0),
            "peer {peer}"
        );
        assert_eq!(run(&a, peer, 5, 64, 5_000), (STATUS_OK, 5));
        end_child(child);
    }
    assert!(a.counters().peer_restarts >= 2);
}

/// An invoker engine (the application's threads run its duty cycles) and a port at `a` on it.
fn invoker_port(a: Address) -> (Engine, Port) {
    let e = Engine::start(EngineConfig {
        mode: txcast_port::EngineMode::Invoker,
        ..EngineConfig::default()
    })
    .unwrap();
    let p = Port::open_on(&e, a, PortConfig::default()).unwrap();
    (e, p)
}

#[test]
fn an_invoker_engine_hosts_polled_modules_only() {
    let (_e, p) = invoker_port(addr(40, 0, 7, 0));
    let Err((ModuleHostError::NoEngineThread, p)) = ModuleHost::serve(p) else {
        panic!("an invoker engine took engine-run modules");
    };
    let Err((ModuleHostError::NoEngineThread, p)) = ModuleHost::serve_with(*p, Handlers::Interrupt)
    else {
        panic!("an invoker engine took interrupt-driven modules");
    };
    // Polled: the driving thread runs the engine too. A ping run across hosts, driven here.
    let h = ModuleHost::serve_with(*p, Handlers::Polled)
        .map_err(|(e, _)| e)
        .unwrap();
    h.load(PING_ID, KEY, PingPong::default()).unwrap();
    let remote = pinger(addr(40, 1, 7, 0));
    let (status, done) = run_driven(&h, remote.address(), 100, 64);
    assert_eq!((status, done), (STATUS_OK, 100));
    assert_eq!(h.counters().controls_received, 100);
}

/// A drive of a polled host on an invoker engine reads the sockets once (one duty cycle),
/// whether or not an instruction waits: the host's steps take only what is in the port's
/// ring, so nothing reads the network between a message's handling and the sending of what
/// it caused.
#[test]
fn a_drive_of_a_polled_host_reads_the_sockets_once() {
    let (e, p) = invoker_port(addr(40, 3, 7, 0));
    let h = ModuleHost::serve_with(p, Handlers::Polled)
        .map_err(|(e, _)| e)
        .unwrap();
    h.load(WHERE_ID, KEY, Where::default()).unwrap();
    let before = e.duty_cycles();
    h.drive();
    assert_eq!(e.duty_cycles() - before, 1, "an idle drive");
    let t = h.instruct(WHERE_ID, KEY, ASK, &[]).unwrap();
    let before = e.duty_cycles();
    h.drive();
    assert_eq!(
        e.duty_cycles() - before,
        1,
        "a drive with an instruction waiting"
    );
    assert!(
        h.poll(t).unwrap().is_some(),
        "the instruction ran in that drive"
    );
}

/// Records the thread its handlers ran on.
#[derive(Default)]
struct Where {
    threads: Vec<String>,
}

const WHERE_ID: u16 = 3;
const ASK: u16 = 1;

impl Module for Where {
    fn registration(&self) -> Registration {
        Registration {
            name: "where",
            instructions: &[ASK],
            controls: &[],
        }
    }
    fn on_instruction(&mut self, cx: &mut Context<'_>, ins: Instruction<'_>) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.threads.push(name.clone());
        let _ = cx.complete(ins.id, STATUS_OK, name.as_bytes());
    }
    fn on_control(&mut self, _: &mut Context<'_>, _: Control<'_>) {}
}

/// A ping run from a polled host: issued, then driven by this thread until it completes.
fn run_driven(h: &ModuleHost, peer: Address, exchanges: u32, bytes: u16) -> (u32, u32) {
    let args = PingRun {
        peer,
        exchanges,
        bytes,
        timeout: Duration::from_millis(5_000),
    }
    .encode();
    let t = h.instruct(PING_ID, KEY, ping::RUN, &args).unwrap();
    let end = std::time::Instant::now() + WAIT;
    loop {
        h.drive();
        if let Some(c) = h.poll(t).unwrap() {
            return (
                c.status,
                u32::from_le_bytes(c.result.as_slice().try_into().unwrap()),
            );
        }
        assert!(std::time::Instant::now() < end, "the run never completed");
        std::thread::yield_now();
    }
}

#[test]
fn handlers_run_where_the_placement_says() {
    let serve = |a: Address, h: Handlers| {
        let p = Port::open(a, PortConfig::default()).unwrap();
        let h = ModuleHost::serve_with(p, h).map_err(|(e, _)| e).unwrap();
        h.load(PING_ID, KEY, PingPong::default()).unwrap();
        h.load(WHERE_ID, KEY, Where::default()).unwrap();
        h
    };
    let engine = serve(addr(40, 0, 8, 0), Handlers::Engine);
    let polled = serve(addr(40, 1, 8, 0), Handlers::Polled);
    let interrupt = serve(addr(40, 2, 8, 0), Handlers::Interrupt);
    assert_eq!(engine.handlers(), Handlers::Engine);
    assert_eq!(polled.handlers(), Handlers::Polled);
    assert_eq!(interrupt.handlers(), Handlers::Interrupt);
    let thread_of = |h: &ModuleHost, drive: bool| {
        let t = h.instruct(WHERE_ID, KEY, ASK, &[]).unwrap();
        let end = std::time::Instant::now() + WAIT;
        loop {
            if drive {
                h.drive();
            }
            if let Some(c) = h.poll(t).unwrap() {
                return String::from_utf8(c.result).unwrap();
            }
            assert!(std::time::Instant::now() < end, "no completion");
            std::thread::yield_now();
        }
    };
    assert_eq!(thread_of(&engine, false), "txcast-engine");
    assert!(thread_of(&interrupt, false).starts_with("txcast-modules-"));
    // A polled host does nothing until a thread drives it; then it is that thread.
    let t = polled.instruct(WHERE_ID, KEY, ASK, &[]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(polled.poll(t).unwrap(), None, "ran with nobody driving");
    let me = std::thread::current().name().unwrap().to_string();
    loop {
        polled.drive();
        if let Some(c) = polled.poll(t).unwrap() {
            assert_eq!(String::from_utf8(c.result).unwrap(), me);
            break;
        }
    }
    // Pings across hosts between every pair of placements: the polled host is driven by a
    // thread of its own meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let driver = {
        let (p, stop) = (polled.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if p.drive() == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    for (from, to) in [
        (&engine, &polled),
        (&engine, &interrupt),
        (&interrupt, &polled),
        (&interrupt, &engine),
    ] {
        assert_eq!(run(from, to.address(), 200, 512, 5_000), (STATUS_OK, 200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    driver.join().unwrap();
    assert_eq!(
        run_driven(&polled, engine.address(), 50, 64),
        (STATUS_OK, 50)
    );
    let answered = |h: &ModuleHost| h.with_module(PING_ID, |p: &mut PingPong| p.answered);
    assert_eq!(answered(&polled), Some(400));
    assert_eq!(answered(&interrupt), Some(200));
    assert_eq!(answered(&engine), Some(250));
    // Dropping an interrupt-driven host stops its thread and closes its port.
    drop(interrupt);
    assert!(Port::open(addr(40, 2, 8, 0), PortConfig::default()).is_ok());
}
