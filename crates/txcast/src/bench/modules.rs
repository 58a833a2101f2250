//! `txcast bench modules`: extension modules and Push programs against the application level,
//! each ratio from figures measured in the same run.
//!
//! - **latency** (Roşu & Schwan, Figure 5): PING/PONG between modules on two engines in two
//!   processes (another site: UDP and the reliable link), engine threads busy-polling; against
//!   raw busy-polling UDP and txcast's application-level remote round trip with spinning and
//!   with parked application threads, all from `bench rtt`'s cases.
//! - **rate** (Figures 3 and 4): control messages a module streams to a module in the other
//!   process, per second as they arrive, against the application-level stream of unpacked
//!   messages (`bench throughput`'s `txcast-remote-pack-off`).
//! - **push** (Bhargava, Mafla and Riedl, Table 4): the Appendix B multicast program sending
//!   to 1..16 destinations through a port, against the port's native fan-out (one `sendmmsg`)
//!   and a user-level loop of sends; and the interpreter's cost per wasm operator.

use super::rtt;
use super::stats::{bench_json, rounded, whole, Samples, Summary};
use super::throughput;
use super::{parse_u64, plan_or_exit, spawn_child, usize_list_in, EXIT_FAILED};
use crate::progress::Progress;
use std::io;
use std::time::{Duration, Instant};
use txcast_port::{Engine, EngineConfig, ModuleHost, Port, PortConfig};
use txcast_proto::module::ping::{self, PingPong, PingRun};
use txcast_proto::module::stream::{self, Stream, StreamRun};
use txcast_proto::Address;
use txcast_push::{programs, Dests, HookError, Hooks, Limits, Program};

const KEY: u64 = 0x6d6f_6475_6c65;
const PING_ID: u16 = 1;
const STREAM_ID: u16 = 2;
/// Server type of the benchmark's module hosts.
const HOST_TYPE: u16 = 13;
/// How long the partner waits for the parent's traffic at most.
const PARTNER_LIFE: Duration = Duration::from_secs(300);

fn host_address(site: u16) -> Address {
    Address::new(0, site, HOST_TYPE, 0)
}

struct Plan {
    sections: Vec<String>,
    bytes: Vec<usize>,
    exchanges: u64,
    warmup: u64,
    messages: u64,
    dests: Vec<usize>,
    invokes: u64,
    repeat: u64,
    json: bool,
}

// The options of `txcast bench modules` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The parts to run: latency, rate, push
    #[arg(long, value_delimiter = ',', default_values_t = ["latency".to_string(), "rate".to_string(), "push".to_string()])]
    pub sections: Vec<String>,
    /// Message body sizes in bytes (8 to the control body maximum)
    #[arg(long, value_delimiter = ',', default_values_t = [8, 64, 256, 1000], value_parser = parse_u64)]
    pub bytes: Vec<u64>,
    /// PING/PONG exchanges timed (clamped to 1..=1048576)
    #[arg(long, default_value_t = 20_000, value_parser = parse_u64)]
    pub exchanges: u64,
    /// Exchanges before the timed ones (clamped to 1..=1048576)
    #[arg(long, default_value_t = 2_000, value_parser = parse_u64)]
    pub warmup: u64,
    /// Messages of the stream (clamped to 1..=4294967295)
    #[arg(long, default_value_t = 1_000_000, value_parser = parse_u64)]
    pub messages: u64,
    /// Destination counts of the multicast program (1 to 64)
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16], value_parser = parse_u64)]
    pub dests: Vec<u64>,
    /// Program invocations timed (clamped to 1..=10000000)
    #[arg(long, default_value_t = 20_000, value_parser = parse_u64)]
    pub invokes: u64,
    /// Runs of every section (clamped to 1..=99)
    #[arg(long, default_value_t = 1, value_parser = parse_u64)]
    pub repeat: u64,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

fn plan(o: &Args) -> Result<Plan, String> {
    let sections = o.sections.clone();
    if let Some(s) = sections
        .iter()
        .find(|s| !["latency", "rate", "push"].contains(&s.as_str()))
    {
        return Err(format!("--sections: unknown section {s:?}"));
    }
    let body_max = txcast_proto::module::msg::CONTROL_BODY_MAX;
    let plan = Plan {
        sections,
        bytes: usize_list_in("bytes", &o.bytes, 8..=body_max)?,
        exchanges: o.exchanges.clamp(1, 1 << 20),
        warmup: o.warmup.clamp(1, 1 << 20),
        messages: o.messages.clamp(1, u32::MAX as u64),
        dests: usize_list_in("dests", &o.dests, 1..=64)?,
        invokes: o.invokes.clamp(1, 10_000_000),
        repeat: o.repeat.clamp(1, 99),
        json: o.json,
    };
    Ok(plan)
}

pub fn run(args: &Args) -> i32 {
    let plan = match plan_or_exit("modules", plan(args)) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let has = |s: &str| plan.sections.iter().any(|x| x == s);
    // Per round: a point for the module's latencies and one per message size of the
    // yardsticks, one for the rate, one per destination count of the push and one for the
    // interpreter.
    let mut per_round = 0;
    if has("latency") {
        per_round += 1 + plan.bytes.len() as u64;
    }
    if has("rate") {
        per_round += 1;
    }
    if has("push") {
        per_round += plan.dests.len() as u64 + 1;
    }
    let progress = Progress::points("modules", plan.repeat * per_round);
    let out = |line: String| {
        progress.suspend(|| {
            if plan.json {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        })
    };
    for round in 0..plan.repeat {
        out(format!("round {}", round + 1));
        let r = (|| -> io::Result<()> {
            if has("latency") {
                latency(&plan, &out, &progress)?;
            }
            if has("rate") {
                rate(&plan, &out, &progress)?;
            }
            if has("push") {
                push(&plan, &out, &progress)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            progress.finish();
            eprintln!("txcast bench modules: {e}");
            return EXIT_FAILED;
        }
    }
    progress.finish();
    0
}

/// An engine whose thread never parks: the module side busy-polls, as raw UDP's does.
fn spinning_engine() -> io::Result<Engine> {
    Engine::start(EngineConfig {
        idle_spin: Duration::from_secs(3600),
        ..EngineConfig::default()
    })
}

fn module_host(engine: &Engine, site: u16) -> io::Result<ModuleHost> {
    let port = Port::open_on(engine, host_address(site), PortConfig::default())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let h = ModuleHost::serve(port).map_err(|(e, _)| io::Error::other(e.to_string()))?;
    h.load(PING_ID, KEY, PingPong::default())
        .and_then(|_| h.load(STREAM_ID, KEY, Stream::default()))
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(h)
}

fn call(h: &ModuleHost, id: u16, ty: u16, args: &[u8]) -> io::Result<Vec<u8>> {
    let c = h
        .call(id, KEY, ty, args, Duration::from_secs(120))
        .map_err(|e| io::Error::other(e.to_string()))?;
    if c.status != 0 {
        return Err(io::Error::other(format!("module status {}", c.status)));
    }
    Ok(c.result)
}

fn pings(h: &ModuleHost, exchanges: u64, bytes: usize) -> io::Result<()> {
    let args = PingRun {
        peer: host_address(1),
        exchanges: exchanges as u32,
        bytes: bytes as u16,
        timeout: Duration::from_secs(100),
    }
    .encode();
    call(h, PING_ID, ping::RUN, &args).map(|_| ())
}

/// The partner: a module host at site 1 that answers PINGs and counts the stream, until it
/// has answered `answers` PINGs and received `messages` stream messages; then it writes the
/// nanoseconds from the stream's first message to its last into `result`.
pub fn child(args: &[String]) -> io::Result<()> {
    let [answers, messages, result] = args else {
        return Err(io::Error::other(
            "usage: modules <answers> <messages> <result file>",
        ));
    };
    let parse = |s: &String| s.parse::<u64>().map_err(|_| io::Error::other("bad count"));
    let (answers, messages) = (parse(answers)?, parse(messages)?);
    let engine = spinning_engine()?;
    let h = module_host(&engine, 1)?;
    let deadline = Instant::now() + PARTNER_LIFE;
    while Instant::now() < deadline {
        let answered = h
            .with_module(PING_ID, |p: &mut PingPong| p.answered)
            .unwrap_or(0);
        let received = h
            .with_module(STREAM_ID, |s: &mut Stream| s.received)
            .unwrap_or(0);
        if answered >= answers && received >= messages {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let span = h
        .with_module(STREAM_ID, |s: &mut Stream| s.span())
        .flatten()
        .unwrap_or_default();
    std::fs::write(result, span.as_nanos().to_string())?;
    // Let the last acknowledgements leave.
    std::thread::sleep(Duration::from_millis(50));
    drop(h);
    engine.shutdown();
    Ok(())
}

/// Runs `f` with a partner process that expects `answers` PINGs and `messages` stream
/// messages, and a warmed-up link to it.
/// Also gives the partner's stream span (nanoseconds, first message to last).
fn with_partner<T>(
    plan: &Plan,
    answers: u64,
    messages: u64,
    f: impl FnOnce(&ModuleHost) -> io::Result<T>,
) -> io::Result<(T, u64)> {
    let engine = spinning_engine()?;
    let h = module_host(&engine, 0)?;
    let result = std::env::temp_dir().join(format!(
        "txcast-bench-modules-{}.result",
        std::process::id()
    ));
    let mut partner = spawn_child(&[
        "modules".to_string(),
        (answers + plan.warmup).to_string(),
        messages.to_string(),
        result.to_string_lossy().into_owned(),
    ])?;
    let r = pings(&h, plan.warmup, 64).and_then(|_| f(&h));
    let r = super::finish_child(&mut partner, r, Duration::from_secs(60));
    drop(h);
    engine.shutdown();
    let span = std::fs::read_to_string(&result)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    let _ = std::fs::remove_file(&result);
    Ok((r?, span.unwrap_or(0)))
}

fn module_latency(plan: &Plan) -> io::Result<Vec<Summary>> {
    let total = plan.exchanges * plan.bytes.len() as u64;
    let (summaries, _) = with_partner(plan, total, 0, |h| {
        let mut out = Vec::new();
        for &bytes in &plan.bytes {
            pings(h, plan.exchanges, bytes)?;
            let samples = h
                .with_module(PING_ID, |p: &mut PingPong| p.samples.clone())
                .unwrap_or_default();
            let mut s = Samples::with_capacity(samples.len());
            for ns in samples {
                s.record_ns(ns);
            }
            out.push(s.summary().ok_or_else(|| io::Error::other("no samples"))?);
        }
        Ok(out)
    })?;
    Ok(summaries)
}

fn latency(plan: &Plan, out: &impl Fn(String), progress: &Progress) -> io::Result<()> {
    progress.note("module latency");
    let module = module_latency(plan)?;
    progress.advance();
    out(format!(
        "latency (round trip; paper 004 Figure 5 plots half of it), {} exchanges",
        plan.exchanges
    ));
    out(format!(
        "{:>6} {:>20} {:>20} {:>20} {:>20} {:>11} {:>11} {:>13}",
        "bytes",
        "module p50/p99 us",
        "raw busy UDP",
        "app spinning",
        "app parked",
        "module/raw",
        "module/app",
        "module/parked"
    ));
    let us = |s: &Summary| format!("{:.1}/{:.1}", s.p50_ns as f64 / 1e3, s.p99_ns as f64 / 1e3);
    for (k, &bytes) in plan.bytes.iter().enumerate() {
        progress.note(&format!("latency yardsticks {bytes} B"));
        let case = |name| rtt::find_case(name).ok_or_else(|| io::Error::other("no rtt case"));
        let raw = rtt::measure_in_processes(
            case("raw-udp-busypoll")?,
            bytes,
            plan.warmup,
            plan.exchanges,
        )?;
        let spinning = rtt::measure_in_processes(
            case("txcast-remote-spin")?,
            bytes,
            plan.warmup,
            plan.exchanges,
        )?;
        let parked = rtt::measure_in_processes(
            case("txcast-remote-park")?,
            bytes,
            plan.warmup,
            plan.exchanges,
        )?;
        let m = &module[k];
        let ratio = |a: &Summary, b: &Summary| a.p50_ns as f64 / b.p50_ns.max(1) as f64;
        out(format!(
            "{:>6} {:>20} {:>20} {:>20} {:>20} {:>11.2} {:>11.2} {:>13.2}",
            bytes,
            us(m),
            us(&raw),
            us(&spinning),
            us(&parked),
            ratio(m, &raw),
            ratio(m, &spinning),
            ratio(m, &parked)
        ));
        if plan.json {
            let line = bench_json! {
                bench: "modules",
                section: "latency",
                bytes: bytes,
                module_p50_ns: m.p50_ns,
                module_p99_ns: m.p99_ns,
                raw_busypoll_p50_ns: raw.p50_ns,
                raw_busypoll_p99_ns: raw.p99_ns,
                app_spinning_p50_ns: spinning.p50_ns,
                app_parked_p50_ns: parked.p50_ns,
                app_parked_p99_ns: parked.p99_ns,
                module_vs_raw: rounded(ratio(m, &raw), 3),
                module_vs_app_spinning: rounded(ratio(m, &spinning), 3),
                module_vs_parked: rounded(ratio(m, &parked), 3),
            };
            progress.suspend(|| println!("{line}"));
        }
        progress.advance();
    }
    Ok(())
}

fn rate(plan: &Plan, out: &impl Fn(String), progress: &Progress) -> io::Result<()> {
    progress.note("rate");
    let n = plan.messages;
    let (send_ns, elapsed_ns) = with_partner(plan, 0, n, |h| {
        let args = StreamRun {
            peer: host_address(1),
            count: n as u32,
            bytes: 64,
        }
        .encode();
        let sent_at = Instant::now();
        call(h, STREAM_ID, stream::SEND, &args)?;
        let send_ns = sent_at.elapsed().as_nanos() as u64;
        Ok(send_ns)
    })?;
    if elapsed_ns == 0 {
        return Err(io::Error::other("the partner measured no stream"));
    }
    let module_rate = n as f64 / (elapsed_ns as f64 / 1e9);
    let app = throughput::measure_remote_pack_off(n.min(500_000))?;
    let app_rate = app.messages_per_second();
    out(format!(
        "rate, 64-byte messages: module stream {:.0} msg/s received ({n} in {:.1} ms; sent in {:.1} ms); application level, packing off: {:.0} msg/s; ratio {:.2}",
        module_rate,
        elapsed_ns as f64 / 1e6,
        send_ns as f64 / 1e6,
        app_rate,
        module_rate / app_rate
    ));
    if plan.json {
        let line = bench_json! {
            bench: "modules",
            section: "rate",
            bytes: 64,
            module_msgs_per_s: whole(module_rate),
            app_pack_off_msgs_per_s: whole(app_rate),
            ratio: rounded(module_rate / app_rate, 3),
        };
        progress.suspend(|| println!("{line}"));
    }
    progress.advance();
    Ok(())
}

/// Hooks that send a program's messages as datagrams of `port`: queued and sent with one
/// `sendmmsg` when `batch`, else one `sendto` each.
struct PortHooks {
    port: Port,
    batch: bool,
}

impl Hooks for PortHooks {
    fn send(&mut self, dest: u64, msg: &[u8]) -> Result<(), HookError> {
        let to = Address::from_bytes(dest.to_le_bytes());
        let r = if self.batch {
            self.port.queue_datagram(to, msg)
        } else {
            self.port.send_datagram(to, msg)
        };
        r.map_err(|_| HookError::Refused)
    }
    fn send_many(&mut self, dests: Dests<'_>, msg: &[u8]) -> u32 {
        let mut n = 0;
        for d in dests {
            n += u32::from(self.send(d, msg).is_ok());
        }
        n
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn arm_timer(&mut self, _: u64, _: u64) -> Result<(), HookError> {
        Err(HookError::Refused)
    }
    fn cancel_timer(&mut self, _: u64) -> bool {
        false
    }
    fn complete(&mut self, _: i32, _: &[u8]) {}
}

/// Destinations on another site with no port open: the kernel takes each datagram and drops
/// it, so every method pays the same system calls and nothing else.
fn far_destinations(n: usize) -> Vec<Address> {
    (0..n as u16).map(|i| Address::new(0, 2, 12, i)).collect()
}

fn median_ns(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    let p = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    (p(0.5), p(0.99))
}

fn push(plan: &Plan, out: &impl Fn(String), progress: &Progress) -> io::Result<()> {
    let engine = Engine::start(EngineConfig {
        mode: txcast_port::EngineMode::Invoker,
        ..EngineConfig::default()
    })?;
    let open = |i: u16| {
        Port::open_on(&engine, Address::new(0, 0, 12, i), PortConfig::default())
            .map_err(|e| io::Error::other(e.to_string()))
    };
    let program = Program::load(programs::MULTICAST.as_bytes(), Limits::default())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut batched = program
        .instantiate(PortHooks {
            port: open(0)?,
            batch: true,
        })
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut looped = program
        .instantiate(PortHooks {
            port: open(1)?,
            batch: false,
        })
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut native = open(2)?;
    let msg = [0x42u8; 64];
    out(format!(
        "push (paper 001 Table 4): the Appendix B multicast of 64 bytes, ns per call, p50/p99 of {} calls",
        plan.invokes
    ));
    out(format!(
        "{:>6} {:>18} {:>18} {:>18} {:>18} {:>12} {:>12}",
        "dests",
        "program+sendmmsg",
        "native sendmmsg",
        "program+sendto",
        "user loop sendto",
        "prog/native",
        "prog/loop"
    ));
    for &n in &plan.dests {
        progress.note(&format!("push {n} dests"));
        let dests = far_destinations(n);
        let mut args = (n as u32).to_le_bytes().to_vec();
        for d in &dests {
            args.extend_from_slice(&d.to_bytes());
        }
        args.extend_from_slice(&msg);
        let mut times = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for i in 0..plan.invokes + plan.invokes / 10 {
            let keep = i >= plan.invokes / 10;
            // The four methods in turn, so that the machine's drift hits each alike.
            let t = Instant::now();
            batched
                .invoke(&args)
                .map_err(|e| io::Error::other(e.to_string()))?;
            batched.hooks_mut().port.flush_datagrams();
            let a = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            for d in &dests {
                let _ = native.queue_datagram(*d, &msg);
            }
            native.flush_datagrams();
            let b = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            looped
                .invoke(&args)
                .map_err(|e| io::Error::other(e.to_string()))?;
            let c = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            for d in &dests {
                let _ = native.send_datagram(*d, &msg);
            }
            let d = t.elapsed().as_nanos() as u64;
            if keep {
                for (v, x) in times.iter_mut().zip([a, b, c, d]) {
                    v.push(x);
                }
            }
        }
        let [a, b, c, d] = times.map(median_ns);
        let f = |x: (u64, u64)| format!("{}/{}", x.0, x.1);
        let (pn, pl) = (a.0 as f64 / b.0 as f64, c.0 as f64 / d.0 as f64);
        out(format!(
            "{:>6} {:>18} {:>18} {:>18} {:>18} {:>12.2} {:>12.2}",
            n,
            f(a),
            f(b),
            f(c),
            f(d),
            pn,
            pl
        ));
        if plan.json {
            let line = bench_json! {
                bench: "modules",
                section: "push",
                dests: n,
                program_sendmmsg_p50_ns: a.0,
                native_sendmmsg_p50_ns: b.0,
                program_sendto_p50_ns: c.0,
                loop_sendto_p50_ns: d.0,
                program_vs_native: rounded(pn, 3),
                program_vs_loop: rounded(pl, 3),
            };
            progress.suspend(|| println!("{line}"));
        }
        progress.advance();
    }
    // The interpreter alone: a counting loop, ns per wasm operator.
    progress.note("interpreter");
    let count = Program::load(programs::COUNT.as_bytes(), Limits::default())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut inst = count
        .instantiate(PortHooks {
            port: open(3)?,
            batch: false,
        })
        .map_err(|e| io::Error::other(e.to_string()))?;
    let iterations: u32 = 10_000;
    let mut per_op = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        inst.invoke(&iterations.to_le_bytes())
            .map_err(|e| io::Error::other(e.to_string()))?;
        let ns = t.elapsed().as_nanos() as f64;
        // count.wat runs exactly 12 operators an iteration.
        per_op.push((ns / (12.0 * iterations as f64) * 1000.0) as u64);
    }
    let (p50, p99) = median_ns(per_op);
    out(format!(
        "interpreter: {:.2} ns per wasm operator (p50; p99 {:.2}), target <= 50 ns (the paper's Push: 25 us)",
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0
    ));
    if plan.json {
        let line = bench_json! {
            bench: "modules",
            section: "interpreter",
            ns_per_operator_p50: rounded(p50 as f64 / 1000.0, 3),
        };
        progress.suspend(|| println!("{line}"));
    }
    progress.advance();
    Ok(())
}
