//! RPC across network namespaces under the kernel's packet loss, a partition that heals and
//! a kill -9, with an external checker (issue 23, part 2(b)).
//!
//! Three `txcast __rpc-server` processes on hosts 0, 1 and 2 of a keyed cluster (the key
//! turns on the servers' replay guard, which keeps a restarted server from running a copy
//! of a call its predecessor ran), each appending one line per executed TICKET call to its
//! execution log. A client on host 3 (a thread of this test that entered host 3's namespace)
//! keeps calls with a 1 s deadline going to every server and logs each call's outcome. Every
//! host drops 5 % of what it sends and 5 % of what it receives; host 1 is cut off from the
//! client for 2 s; host 2's server is killed with SIGKILL and started again 1 s later; host
//! 0's server is paused (SIGSTOP) for 1 s.
//!
//! The checker reads only the logs and verifies that every call was executed at most once
//! (across the restart too), that every execution is of a call made to that server by this
//! client, that each incarnation's executions are all on file (numbered without gaps), that
//! every call ended by its deadline plus [`SLACK`] (and none failed on its deadline early),
//! that every answer is the reply of an execution of that call, and that the faults took
//! effect (nothing answered across the partition or by a dead or stopped server). It reports
//! the recovery times: from the heal, the kill and the SIGCONT to the first call answered
//! again by that server. Skipped, with one line, where namespaces cannot be made.

mod netns;

use netns::{say, Cluster, Proc};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use txcast_port::{
    ClusterConfig, End, Engine, EngineConfig, EngineMode, Port, PortConfig, Rpc, RpcConfig,
};
use txcast_proto::rpc::Outcome;
use txcast_proto::Address;

const INSTANCE: u16 = 43;
const SERVERS: usize = 3;
const CLIENT_HOST: usize = 3;
/// The request type `__rpc-server` answers with the payload, its pid and execution number.
const TICKET: u16 = 4;
/// The port types: `__rpc-server`'s default, and the client's.
const SERVER_PORT_TYPE: u16 = 2;
const CLIENT_PORT_TYPE: u16 = 1;
const LOSS_PER_MILLE: u32 = 50;
const DEADLINE: Duration = Duration::from_millis(1000);
/// How late past its deadline a call may end. The client collects ended calls between
/// 2 ms waits, and on a loaded 2-core machine this thread may not run for a while; 200 ms
/// covers that, and is a fifth of the deadline, so a call that overran its deadline by
/// retrying or waiting on its own is still caught.
const SLACK: Duration = Duration::from_millis(200);
/// Calls outstanding at once to one server, and the least time between two starts to it.
const WINDOW: usize = 8;
const PACE: Duration = Duration::from_millis(10);
/// The client starts calls for this long (then waits for the last to end).
const RUN: Duration = Duration::from_secs(10);
const PARTITIONED: usize = 1;
const PARTITION_AT: Duration = Duration::from_secs(2);
const HEAL_AT: Duration = Duration::from_secs(4);
const KILLED: usize = 2;
const KILL_AT: Duration = Duration::from_secs(6);
const RESTART_AT: Duration = Duration::from_secs(7);
const PAUSED: usize = 0;
const PAUSE_AT: Duration = Duration::from_secs(8);
const RESUME_AT: Duration = Duration::from_secs(9);

fn server_addr(s: usize) -> Address {
    Address::new(INSTANCE, s as u16, SERVER_PORT_TYPE, 0)
}

fn client_addr() -> Address {
    Address::new(INSTANCE, CLIENT_HOST as u16, CLIENT_PORT_TYPE, 0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// Moves this thread into network namespace `ns` (sockets it and the threads it starts
/// open from now on are that host's).
fn enter_netns(ns: &str) -> Result<(), String> {
    let f = std::fs::File::open(Path::new("/run/netns").join(ns))
        .map_err(|e| format!("namespace {ns}: {e}"))?;
    // SAFETY: a valid descriptor of a network namespace; only this thread moves.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {ns}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// How a call ended, as one word or two for the client's log.
fn describe(o: &Outcome) -> String {
    match o.end {
        End::Complete => match o.replies.first() {
            Some((_, Ok(bytes))) => format!("ok {}", hex(bytes)),
            Some((_, Err(e))) => {
                let e: String = format!("{e:?}")
                    .chars()
                    .map(|c| if c.is_whitespace() { '_' } else { c })
                    .collect();
                format!("failed remote:{e}")
            }
            None => "failed no-reply".into(),
        },
        End::DeadlinePassed => "failed deadline".into(),
        End::Cancelled => "failed cancelled".into(),
    }
}

/// The client, in host `CLIENT_HOST`: starts TICKET calls (payload: the call's number, 8
/// bytes) to every server until `RUN` has passed since `epoch`, and writes one line per call
/// to `log`: `<number> <server> <start µs> <end µs> ok <reply hex>` or `... failed <why>`.
fn client(ns: String, cluster: PathBuf, epoch: Instant, log: PathBuf) -> Result<(), String> {
    enter_netns(&ns)?;
    let cfg = ClusterConfig::load(&cluster).map_err(|e| e.to_string())?;
    let engine = Engine::start(EngineConfig {
        mode: EngineMode::Invoker,
        cluster: cfg,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let port =
        Port::open_on(&engine, client_addr(), PortConfig::default()).map_err(|e| e.to_string())?;
    let mut rpc = Rpc::new(port, RpcConfig::default()).map_err(|e| e.to_string())?;
    struct Pending {
        id: txcast_proto::rpc::CallId,
        number: u64,
        server: usize,
        start: Duration,
    }
    let mut pending: Vec<Pending> = Vec::new();
    let mut next_start = [Duration::ZERO; SERVERS];
    let mut number = 0u64;
    let mut out = String::new();
    loop {
        let now = epoch.elapsed();
        if now >= RUN && pending.is_empty() {
            break;
        }
        for (s, next) in next_start.iter_mut().enumerate() {
            let outstanding = pending.iter().filter(|p| p.server == s).count();
            if now < RUN && now >= *next && outstanding < WINDOW {
                number += 1;
                let start = epoch.elapsed();
                *next = start + PACE;
                match rpc.call_async(server_addr(s), TICKET, &number.to_le_bytes(), DEADLINE) {
                    Ok(id) => pending.push(Pending {
                        id,
                        number,
                        server: s,
                        start,
                    }),
                    Err(e) => {
                        let t = micros(start);
                        let e = e.to_string().replace(char::is_whitespace, "_");
                        writeln!(out, "{number} {s} {t} {t} refused {e}").unwrap();
                    }
                }
            }
        }
        if pending.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        // Moves the traffic for up to 2 ms (or until the oldest call ends), then collects
        // every call that has ended.
        let mut ended: Vec<(usize, Outcome)> = Vec::new();
        match rpc.wait(pending[0].id, Some(Duration::from_millis(2))) {
            Ok(o) => ended.push((0, o)),
            Err(txcast_port::RpcCallError::WaitTimeout) => {}
            Err(e) => return Err(format!("wait: {e}")),
        }
        for (i, p) in pending.iter().enumerate().skip(ended.len()) {
            if let Some(o) = rpc.poll(p.id).map_err(|e| format!("poll: {e}"))? {
                ended.push((i, o));
            }
        }
        let end = micros(epoch.elapsed());
        for (i, o) in &ended {
            let p = &pending[*i];
            let what = describe(o);
            writeln!(
                out,
                "{} {} {} {end} {what}",
                p.number,
                p.server,
                micros(p.start)
            )
            .unwrap();
        }
        let done: Vec<usize> = ended.iter().map(|e| e.0).collect();
        let mut i = 0;
        pending.retain(|_| {
            i += 1;
            !done.contains(&(i - 1))
        });
    }
    std::fs::write(&log, out).map_err(|e| format!("{}: {e}", log.display()))
}

/// One call as the client logged it.
#[derive(Clone, Debug)]
struct Call {
    server: usize,
    start: Duration,
    end: Duration,
    /// The reply, or why it failed.
    result: Result<Vec<u8>, String>,
}

/// One execution as a server logged it.
#[derive(Clone, Debug, PartialEq)]
struct Exec {
    server: usize,
    number: u64,
    pid: u32,
    /// Its place among the executions of its process (1, 2, ...).
    nth: u64,
}

/// What the checker found.
#[derive(Debug, Default)]
struct Report {
    violations: Vec<String>,
    calls: usize,
    answered: usize,
    /// Failed calls by reason.
    failed: BTreeMap<String, usize>,
    executions: usize,
    /// Failed calls that were executed all the same (their answer lost, or late).
    executed_but_failed: usize,
    /// The longest any call took, start to end.
    longest: Duration,
    /// Each server's processes (pids) in the order their executions first appear.
    pids: Vec<Vec<u32>>,
    /// Calls by number.
    by_number: HashMap<u64, Call>,
}

fn parse_client(log: &str, v: &mut Vec<String>) -> HashMap<u64, Call> {
    let mut calls = HashMap::new();
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let parsed = (|| {
            let number: u64 = w.first()?.parse().ok()?;
            let server: usize = w.get(1)?.parse().ok()?;
            let start = Duration::from_micros(w.get(2)?.parse().ok()?);
            let end = Duration::from_micros(w.get(3)?.parse().ok()?);
            let result = match (w.get(4).copied()?, w.get(5).copied()) {
                ("ok", Some(h)) => Ok(unhex(h)?),
                (kind, why) => Err(format!("{kind} {}", why.unwrap_or(""))),
            };
            Some((
                number,
                Call {
                    server,
                    start,
                    end,
                    result,
                },
            ))
        })();
        match parsed {
            Some((n, c)) => {
                if calls.insert(n, c).is_some() {
                    v.push(format!("client log: call {n} ended twice"));
                }
            }
            None => v.push(format!("client log: bad line {line:?}")),
        }
    }
    calls
}

fn parse_server(server: usize, log: &str, client: Address, v: &mut Vec<String>) -> Vec<Exec> {
    let mut execs = Vec::new();
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let parsed = (|| {
            let payload = unhex(w.get(1)?)?;
            Some((
                *w.first()?,
                Exec {
                    server,
                    number: u64::from_le_bytes(payload.try_into().ok()?),
                    pid: w.get(2)?.parse().ok()?,
                    nth: w.get(3)?.parse().ok()?,
                },
            ))
        })();
        match parsed {
            Some((from, e)) => {
                if from != client.to_string() {
                    v.push(format!(
                        "server {server}: executed a call of {from}: {line:?}"
                    ));
                }
                execs.push(e);
            }
            None => v.push(format!("server {server} log: bad line {line:?}")),
        }
    }
    execs
}

/// Checks the client's outcome log against the servers' execution logs (`server_logs[s]`
/// is server `s`'s). Every breach of the rules is a line of `violations`.
fn check(client_log: &str, server_logs: &[String], client: Address) -> Report {
    let mut r = Report::default();
    let v = &mut r.violations;
    let calls = parse_client(client_log, v);
    let mut execs: HashMap<u64, Vec<Exec>> = HashMap::new();
    for (s, log) in server_logs.iter().enumerate() {
        let mine = parse_server(s, log, client, v);
        // Each process numbers its executions 1, 2, ...: a gap is an execution not on file.
        let mut last: Vec<(u32, u64)> = Vec::new();
        let mut pids = Vec::new();
        for e in &mine {
            match last.iter_mut().find(|l| l.0 == e.pid) {
                Some(l) if e.nth == l.1 + 1 => l.1 = e.nth,
                Some(l) => {
                    v.push(format!(
                        "server {s} pid {}: execution {} follows {}",
                        e.pid, e.nth, l.1
                    ));
                    l.1 = e.nth;
                }
                None => {
                    if e.nth != 1 {
                        v.push(format!(
                            "server {s} pid {}: first execution on file is number {}",
                            e.pid, e.nth
                        ));
                    }
                    last.push((e.pid, e.nth));
                    pids.push(e.pid);
                }
            }
            match calls.get(&e.number) {
                Some(c) if c.server == s => {}
                Some(c) => v.push(format!(
                    "server {s} executed call {}, which was made to server {}",
                    e.number, c.server
                )),
                None => v.push(format!(
                    "server {s} executed call {}, which the client never made",
                    e.number
                )),
            }
            r.executions += 1;
            execs.entry(e.number).or_default().push(e.clone());
        }
        r.pids.push(pids);
    }
    for (n, es) in &execs {
        if es.len() > 1 {
            v.push(format!("call {n} executed {} times: {es:?}", es.len()));
        }
    }
    let mut numbers: Vec<&u64> = calls.keys().collect();
    numbers.sort();
    for n in numbers {
        let c = &calls[n];
        r.calls += 1;
        let took = c.end.saturating_sub(c.start);
        r.longest = r.longest.max(took);
        if took > DEADLINE + SLACK {
            v.push(format!(
                "call {n} to server {} ended {took:?} after it started: past its deadline \
                 {DEADLINE:?} and the slack {SLACK:?} ({:?})",
                c.server, c.result
            ));
        }
        let executed = execs.get(n).map_or(&[][..], |e| &e[..]);
        match &c.result {
            Ok(reply) => {
                r.answered += 1;
                let matches = executed.iter().any(|e| {
                    let mut expect = n.to_le_bytes().to_vec();
                    expect.extend_from_slice(&e.pid.to_le_bytes());
                    expect.extend_from_slice(&e.nth.to_le_bytes());
                    *reply == expect
                });
                if !matches {
                    v.push(format!(
                        "call {n} answered {} but no execution of it gave that reply \
                         (executions: {executed:?})",
                        hex(reply)
                    ));
                }
            }
            Err(why) => {
                *r.failed.entry(why.trim().to_string()).or_default() += 1;
                if !executed.is_empty() {
                    r.executed_but_failed += 1;
                }
                if why.starts_with("refused") {
                    v.push(format!("call {n} could not start: {why}"));
                }
                if why.trim() == "failed deadline" && took < DEADLINE {
                    v.push(format!(
                        "call {n} failed on its deadline after only {took:?}"
                    ));
                }
            }
        }
    }
    r.by_number = calls;
    r
}

impl Report {
    /// The pid in an answer to call `c`.
    fn answered_by(c: &Call) -> Option<u32> {
        let reply = c.result.as_ref().ok()?;
        Some(u32::from_le_bytes(reply.get(8..12)?.try_into().ok()?))
    }

    /// The first call to `server` answered (by `pid`, if given) and collected at or after
    /// `from`: when it was collected.
    fn first_answer(&self, server: usize, pid: Option<u32>, from: Duration) -> Option<Duration> {
        self.by_number
            .values()
            .filter(|c| c.server == server && c.end >= from)
            .filter(|c| Self::answered_by(c).is_some_and(|p| pid.is_none_or(|q| p == q)))
            .map(|c| c.end)
            .min()
    }

    /// Calls to `server` started after `from` and answered before `until`.
    fn answered_within(&self, server: usize, from: Duration, until: Duration) -> Vec<u64> {
        let mut v: Vec<u64> = (self.by_number.iter())
            .filter(|(_, c)| c.server == server && c.start > from && c.end < until)
            .filter(|(_, c)| c.result.is_ok())
            .map(|(n, _)| *n)
            .collect();
        v.sort();
        v
    }
}

fn sleep_until(epoch: Instant, at: Duration) {
    if let Some(d) = (epoch + at).checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

fn ready(p: &mut Proc, s: usize) {
    let line = p.read_line();
    assert_eq!(line.as_deref(), Some("ready"), "server {s} did not start");
}

#[test]
fn rpc_calls_run_at_most_once_and_end_by_their_deadlines_under_loss_partition_kill_and_pause() {
    let started = Instant::now();
    let Some(c) = Cluster::new("netns_rpc", SERVERS + 1) else {
        return;
    };
    let bin = Path::new(env!("CARGO_BIN_EXE_txcast"));
    let config = c.path("cluster.toml");
    // Keyed: the servers guard against replays (what makes at most once hold across a
    // restart: a restarted server runs no request naming none of its incarnations).
    std::fs::write(
        &config,
        format!("key_passphrase = \"netns rpc chaos\"\n{}", c.cluster_toml()),
    )
    .unwrap();
    for h in 0..=CLIENT_HOST {
        c.loss(h, LOSS_PER_MILLE).unwrap();
    }
    let exec_log = |s: usize| c.path(&format!("exec-{s}.log"));
    let mut servers: Vec<Proc> = (0..SERVERS)
        .map(|s| {
            let args: Vec<String> = [
                "__rpc-server",
                "--instance",
                &INSTANCE.to_string(),
                "--site",
                &s.to_string(),
                "--config",
                &config.display().to_string(),
                "--exec-log",
                &exec_log(s).display().to_string(),
                "--seconds",
                "120",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            c.spawn(s, bin, &args)
        })
        .collect();
    for (s, p) in servers.iter_mut().enumerate() {
        ready(p, s);
    }
    let first_pid = servers[KILLED].pid();

    let client_log = c.path("client.log");
    let epoch = Instant::now();
    let client = {
        let (ns, config, log) = (
            c.hosts[CLIENT_HOST].ns.clone(),
            config.clone(),
            client_log.clone(),
        );
        std::thread::spawn(move || client(ns, config, epoch, log))
    };
    sleep_until(epoch, PARTITION_AT);
    c.partition(PARTITIONED, &[CLIENT_HOST]).unwrap();
    let partitioned_at = epoch.elapsed();
    sleep_until(epoch, HEAL_AT);
    // The partition's rules are in place until here.
    let healing_at = epoch.elapsed();
    c.heal(PARTITIONED).unwrap();
    let healed_at = epoch.elapsed();
    sleep_until(epoch, KILL_AT);
    servers[KILLED].kill9();
    let killed_at = epoch.elapsed();
    sleep_until(epoch, RESTART_AT);
    let restarted_at = epoch.elapsed();
    servers[KILLED] = c.restart(&servers[KILLED]);
    ready(&mut servers[KILLED], KILLED);
    let ready_at = epoch.elapsed();
    let second_pid = servers[KILLED].pid();
    sleep_until(epoch, PAUSE_AT);
    servers[PAUSED].pause();
    let paused_at = epoch.elapsed();
    sleep_until(epoch, RESUME_AT);
    let resuming_at = epoch.elapsed();
    servers[PAUSED].resume();

    client
        .join()
        .expect("client thread")
        .unwrap_or_else(|e| panic!("client: {e}"));
    // Every server served to the end (none crashed); their logs are complete once killed.
    for (s, p) in servers.iter_mut().enumerate() {
        assert!(p.exited().is_none(), "server {s} ended: {:?}", p.exited());
        p.kill9();
    }

    let logs: Vec<String> = (0..SERVERS)
        .map(|s| std::fs::read_to_string(exec_log(s)).unwrap_or_default())
        .collect();
    let r = check(
        &std::fs::read_to_string(&client_log).unwrap(),
        &logs,
        client_addr(),
    );
    let mut violations = r.violations.clone();
    // The faults took effect: nothing answered across the partition or by a dead or stopped
    // server.
    let across = r.answered_within(PARTITIONED, partitioned_at, healing_at);
    if !across.is_empty() {
        violations.push(format!(
            "calls {across:?} to server {PARTITIONED} answered across the partition"
        ));
    }
    let dead = r.answered_within(KILLED, killed_at, restarted_at);
    if !dead.is_empty() {
        violations.push(format!(
            "calls {dead:?} to server {KILLED} answered while it was dead"
        ));
    }
    let stopped = r.answered_within(PAUSED, paused_at, resuming_at);
    if !stopped.is_empty() {
        violations.push(format!(
            "calls {stopped:?} to server {PAUSED} answered while it was stopped"
        ));
    }
    if r.pids[KILLED] != [first_pid, second_pid] {
        violations.push(format!(
            "server {KILLED}'s executions came from {:?}, not {first_pid} then {second_pid}",
            r.pids[KILLED]
        ));
    }
    let healed = r.first_answer(PARTITIONED, None, healed_at);
    let recovered = r.first_answer(KILLED, Some(second_pid), killed_at);
    let resumed = r.first_answer(PAUSED, None, resuming_at);
    if resumed.is_none() {
        violations.push(format!("server {PAUSED} answered nothing after SIGCONT"));
    }
    if healed.is_none() {
        violations.push(format!(
            "server {PARTITIONED} answered nothing after the heal"
        ));
    }
    if recovered.is_none() {
        violations.push(format!(
            "server {KILLED} answered nothing after its restart"
        ));
    }
    // Loss at every host makes most calls retransmit something, but most still answer.
    if r.answered * 10 < r.calls * 8 {
        violations.push(format!("only {} of {} calls answered", r.answered, r.calls));
    }
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (healed, recovered, resumed) = (healed.unwrap(), recovered.unwrap(), resumed.unwrap());
    say(&format!(
        "netns_rpc: {} calls ({} ms deadline) to {SERVERS} servers under {:.1} % loss per host \
         and direction: {} answered, failed {:?}; {} executions ({} of failed calls), each call \
         at most once, every call ended by its deadline + {} ms (the longest took {:.0} ms). Server {PARTITIONED} cut off \
         {:.0}..{:.0} ms: first answer {:.0} ms after the heal. Server {KILLED} killed at \
         {:.0} ms, restarted at {:.0} ms (ready at {:.0} ms): first answer {:.0} ms after the \
         kill ({:.0} ms after the restart). Server {PAUSED} stopped {:.0}..{:.0} ms: first \
         answer {:.0} ms after SIGCONT. {:.1} s in all",
        r.calls,
        DEADLINE.as_millis(),
        LOSS_PER_MILLE as f64 / 10.0,
        r.answered,
        r.failed,
        r.executions,
        r.executed_but_failed,
        SLACK.as_millis(),
        ms(r.longest),
        ms(partitioned_at),
        ms(healed_at),
        ms(healed - healed_at),
        ms(killed_at),
        ms(restarted_at),
        ms(ready_at),
        ms(recovered - killed_at),
        ms(recovered - restarted_at),
        ms(paused_at),
        ms(resuming_at),
        ms(resumed - resuming_at),
        started.elapsed().as_secs_f64()
    ));
}

/// The checker finds each kind of violation in made-up logs (and none in good ones): it runs
/// without root.
#[test]
fn the_checker_finds_double_executions_late_calls_and_foreign_replies() {
    let me = client_addr();
    let ticket = |n: u64, pid: u32, nth: u64| {
        let mut b = n.to_le_bytes().to_vec();
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&nth.to_le_bytes());
        hex(&b)
    };
    let exec = |n: u64, pid: u32, nth: u64| format!("{me} {} {pid} {nth}\n", hex(&n.to_le_bytes()));
    let good_client = format!(
        "1 0 0 5000 ok {}\n2 0 100 1000100 failed deadline\n3 1 200 9000 ok {}\n",
        ticket(1, 10, 1),
        ticket(3, 20, 1)
    );
    let good = [exec(1, 10, 1) + &exec(2, 10, 2), exec(3, 20, 1)];
    let r = check(&good_client, &good, me);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(
        (r.calls, r.answered, r.executions, r.executed_but_failed),
        (3, 2, 3, 1)
    );

    let expect = |client: &str, servers: [String; 2], what: &str| {
        let r = check(client, &servers, me);
        assert!(
            r.violations.iter().any(|v| v.contains(what)),
            "{what}: {:?}",
            r.violations
        );
    };
    // Call 2 run again by a restarted server 0.
    expect(
        &good_client,
        [good[0].clone() + &exec(2, 11, 1), good[1].clone()],
        "call 2 executed 2 times",
    );
    // Call 3 ended 1.3 s after it started.
    expect(
        &good_client.replace("3 1 200 9000", "3 1 200 1300200"),
        good.clone(),
        "past its deadline",
    );
    // Failed on its deadline early.
    expect(
        &good_client.replace("100 1000100", "100 500000"),
        good.clone(),
        "after only",
    );
    // An answer no execution gave.
    expect(
        &good_client.replace(&ticket(3, 20, 1), &ticket(3, 20, 2)),
        good.clone(),
        "no execution of it gave that reply",
    );
    // An execution missing from the log.
    expect(
        &good_client,
        [exec(1, 10, 1) + &exec(2, 10, 3), good[1].clone()],
        "execution 3 follows 1",
    );
    // A call run by the wrong server, or by a server for another client.
    expect(
        &good_client,
        [good[0].clone(), good[1].clone() + &exec(1, 20, 2)],
        "which was made to server 0",
    );
    expect(
        &good_client,
        [good[0].replace(&me.to_string(), "1.2.3.4"), good[1].clone()],
        "executed a call of 1.2.3.4",
    );
}
