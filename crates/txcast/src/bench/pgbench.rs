//! `txcast bench pgbench`: PostgreSQL's pgbench (its TPC-B-like default script) on a throwaway
//! cluster, the yardstick for the DebitCredit benchmark: transactions per second and mean
//! latency with every commit flushed to disk (`fsync=on`, `synchronous_commit=on`), optionally
//! also acknowledged by a synchronous streaming standby.
//!
//! The cluster lives in a fresh directory under the temporary directory and listens only on a
//! Unix socket there. [`run_pgbench`] stops its servers and removes the directory on every way
//! out: success, error, panic, and Ctrl-C while it runs (which then ends the process as usual).
//! As root, the PostgreSQL programs run as `nobody`: PostgreSQL refuses to run as root.

use super::stats::{bench_json, rounded, Table};
use super::{parse_u64, plan_or_exit, EXIT_FAILED};
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where Debian installs PostgreSQL 15's programs; PATH is the fallback.
const PG15_BIN: &str = "/usr/lib/postgresql/15/bin";
/// How the error begins when the programs are missing (the CLI then skips).
pub const NOT_FOUND: &str = "PostgreSQL not found";
/// The superuser initdb creates, whoever runs it.
const SUPERUSER: &str = "postgres";
/// Allowed to each step other than the timed run and the initialisation.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);
/// Allowed to a standby to become a streaming synchronous standby.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// A Unix socket path's limit (`sun_path`, with its terminating NUL).
const SOCKET_PATH_MAX: usize = 107;

/// What to run: pgbench's `-c`, `-j`, `-T`, `-i -s`, and whether commits also wait for a
/// synchronous streaming standby.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    pub clients: u32,
    pub threads: u32,
    pub seconds: u32,
    pub scale: u32,
    pub standby: bool,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            clients: 8,
            threads: 2,
            seconds: 20,
            scale: 1,
            standby: false,
        }
    }
}

/// What pgbench measured, and on what.
#[derive(Debug, Clone, PartialEq)]
pub struct PgResult {
    /// Transactions per second, excluding the initial connection time.
    pub tps: f64,
    /// Mean transaction latency in milliseconds.
    pub latency_ms: f64,
    /// Failed transactions, when pgbench reports them (15 does).
    pub failed: Option<u64>,
    /// Transactions processed, when pgbench reports them.
    pub transactions: Option<u64>,
    /// As the server reports it, e.g. `PostgreSQL 15.18 (Debian 15.18-0+deb12u1)`.
    pub version: String,
    /// With a standby: how it was checked to be streaming and synchronous, before and after
    /// the timed run.
    pub replication: Option<String>,
}

/// Runs pgbench on a throwaway cluster (see the module documentation). An error starting with
/// [`NOT_FOUND`] means the PostgreSQL programs are missing.
pub fn run_pgbench(opts: &PgOptions) -> Result<PgResult, String> {
    for (name, n) in [
        ("clients", opts.clients),
        ("threads", opts.threads),
        ("seconds", opts.seconds),
        ("scale", opts.scale),
    ] {
        if n == 0 {
            return Err(format!("pgbench: {name} must be at least 1"));
        }
    }
    if opts.threads > opts.clients {
        return Err(format!(
            "pgbench: threads ({}) must not exceed clients ({})",
            opts.threads, opts.clients
        ));
    }
    let tools = Tools::find(opts.standby)?;
    // Declared first, dropped last: Ctrl-C ends the process only after the cleanup.
    let _sigint = SigintDeferred::install();
    let mut s = Scratch::create(&tools)?;
    let ports = free_ports(2)?;
    let (port, standby_port) = (ports[0], ports[1]);

    let primary = s.dir.join("primary");
    s.run(
        "initdb",
        s.command(&tools.initdb)
            .arg("-D")
            .arg(&primary)
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8"])
            .args(["--no-locale", "--no-sync"]),
        STEP_TIMEOUT,
    )?;
    let mut conf = format!(
        "\n# txcast bench pgbench\n\
         listen_addresses = ''\n\
         unix_socket_directories = '{}'\n\
         port = {port}\n\
         max_connections = {}\n\
         fsync = on\n\
         synchronous_commit = on\n\
         wal_level = replica\n\
         max_wal_senders = 4\n",
        s.dir.to_string_lossy().replace('\'', "''"),
        opts.clients.saturating_add(10).max(100)
    );
    if opts.standby {
        conf.push_str("synchronous_standby_names = '*'\n");
    }
    append(&primary.join("postgresql.conf"), &conf)?;
    s.start(&primary, "primary")?;

    let mut replication = None;
    if opts.standby {
        let standby = s.dir.join("standby");
        let basebackup = tools.pg_basebackup.as_deref().ok_or("no pg_basebackup")?;
        // -R: standby.signal and primary_conninfo (this socket and port) in the copy.
        s.run(
            "pg_basebackup",
            s.command(basebackup)
                .args(s.connection(port))
                .arg("-D")
                .arg(&standby)
                .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]),
            STEP_TIMEOUT,
        )?;
        append(
            &standby.join("postgresql.conf"),
            &format!("\n# the standby\nport = {standby_port}\n"),
        )?;
        s.start(&standby, "standby")?;
        replication = Some(s.wait_sync(&tools, port)?);
    }

    let init_timeout = STEP_TIMEOUT + Duration::from_secs(30 * u64::from(opts.scale));
    s.run(
        "pgbench -i",
        s.command(&tools.pgbench).args(s.connection(port)).args([
            "-i",
            "-q",
            "-s",
            &opts.scale.to_string(),
            "postgres",
        ]),
        init_timeout,
    )?;
    // A standby that stops acknowledging blocks every commit: the timeout ends the run then.
    let output = s.run(
        "pgbench",
        s.command(&tools.pgbench)
            .args(s.connection(port))
            .args(["-c", &opts.clients.to_string()])
            .args(["-j", &opts.threads.to_string()])
            .args(["-T", &opts.seconds.to_string(), "postgres"]),
        STEP_TIMEOUT + Duration::from_secs(u64::from(opts.seconds)),
    )?;
    let mut result = parse_output(&output)?;
    if let Some(before) = replication {
        let after = s.sync_state(&tools, port)?.ok_or_else(|| {
            "the standby was no longer a streaming synchronous standby after the run".to_string()
        })?;
        replication = Some(if after == before {
            format!("{before} (before and after the run)")
        } else {
            format!("{before} before the run, {after} after")
        });
    }
    result.version = tools.version.clone();
    result.replication = replication;
    Ok(result)
}

/// The PostgreSQL programs this run uses.
struct Tools {
    initdb: PathBuf,
    pg_ctl: PathBuf,
    pgbench: PathBuf,
    pg_basebackup: Option<PathBuf>,
    psql: Option<PathBuf>,
    version: String,
}

impl Tools {
    /// PostgreSQL 15's directory if it is there, else the directory of `initdb` on PATH (its
    /// symlinks resolved); a program missing there is looked for on PATH.
    fn find(standby: bool) -> Result<Tools, String> {
        let bin = if Path::new(PG15_BIN).join("initdb").is_file() {
            PathBuf::from(PG15_BIN)
        } else {
            on_path("initdb")
                .and_then(|p| fs::canonicalize(p).ok())
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .ok_or_else(|| format!("{NOT_FOUND}: no initdb in {PG15_BIN} or on PATH"))?
        };
        let find = |name: &str| {
            let here = bin.join(name);
            if here.is_file() {
                Some(here)
            } else {
                on_path(name)
            }
        };
        let need = |name: &str| {
            find(name)
                .ok_or_else(|| format!("{NOT_FOUND}: no {name} in {} or on PATH", bin.display()))
        };
        let pg_ctl = need("pg_ctl")?;
        let version = find("postgres")
            .and_then(|postgres| version_of(&postgres))
            .or_else(|| version_of(&pg_ctl))
            .unwrap_or_else(|| "PostgreSQL (version unknown)".to_string());
        Ok(Tools {
            initdb: need("initdb")?,
            pg_ctl,
            pgbench: need("pgbench")?,
            pg_basebackup: if standby {
                Some(need("pg_basebackup")?)
            } else {
                find("pg_basebackup")
            },
            psql: find("psql"),
            version,
        })
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `PostgreSQL 15.18 (...)` from `postgres (PostgreSQL) 15.18 (...)`.
fn version_of(program: &Path) -> Option<String> {
    let out = Command::new(program).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (_, rest) = text.trim().split_once("(PostgreSQL) ")?;
    Some(format!("PostgreSQL {rest}"))
}

/// `n` distinct port numbers nobody listens on now (the sockets are named after them).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot pick a port: {e}"))?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| format!("cannot pick a port: {e}"))
        })
        .collect()
}

fn append(file: &Path, text: &str) -> Result<(), String> {
    OpenOptions::new()
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", file.display()))
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The run's temporary directory and the servers started in it; dropping it stops them and
/// removes the directory.
struct Scratch {
    dir: PathBuf,
    as_nobody: bool,
    pg_ctl: PathBuf,
    /// Data directories of servers started (or being started), stopped in reverse order.
    servers: Vec<PathBuf>,
    /// Numbers the files that catch each command's output.
    commands: u32,
}

impl Scratch {
    fn create(tools: &Tools) -> Result<Scratch, String> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("txcast-pgbench-{}-{nanos}", std::process::id()));
        if dir.as_os_str().len() + "/.s.PGSQL.65535".len() > SOCKET_PATH_MAX {
            return Err(format!(
                "{} is too long a directory for a Unix socket; set TMPDIR shorter",
                dir.display()
            ));
        }
        fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_nobody = unsafe { libc::geteuid() } == 0;
        let scratch = Scratch {
            dir,
            as_nobody,
            pg_ctl: tools.pg_ctl.clone(),
            servers: Vec::new(),
            commands: 0,
        };
        if as_nobody {
            let status = Command::new("chown")
                .arg("nobody")
                .arg(&scratch.dir)
                .status()
                .map_err(|e| format!("cannot run chown: {e}"))?;
            if !status.success() {
                return Err(format!("chown nobody {}: {status}", scratch.dir.display()));
            }
        }
        Ok(scratch)
    }

    /// `program`, run as `nobody` when we are root, in the scratch directory.
    fn command(&self, program: &Path) -> Command {
        let mut command = if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        command.current_dir(&self.dir).stdin(Stdio::null());
        command
    }

    /// Client options reaching the server on `port` through this directory's socket.
    fn connection(&self, port: u16) -> Vec<String> {
        [
            "-h".to_string(),
            self.dir.to_string_lossy().into_owned(),
            "-p".to_string(),
            port.to_string(),
            "-U".to_string(),
            SUPERUSER.to_string(),
        ]
        .into()
    }

    /// Runs `command` to its end, ending it past `timeout` or on Ctrl-C; its stdout, or an
    /// error with the tail of its output. The output goes to files, not pipes: a server that
    /// pg_ctl starts may keep them open.
    fn run(
        &mut self,
        what: &str,
        command: &mut Command,
        timeout: Duration,
    ) -> Result<String, String> {
        self.commands += 1;
        let out_path = self.dir.join(format!("{}.out", self.commands));
        let err_path = self.dir.join(format!("{}.err", self.commands));
        let files = File::create(&out_path).and_then(|o| Ok((o, File::create(&err_path)?)));
        let (out, err) = files.map_err(|e| format!("cannot create output files: {e}"))?;
        let mut child = command
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let status = wait(&mut child, timeout, true);
        let stdout = fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = fs::read_to_string(&err_path).unwrap_or_default();
        match status {
            Ok(status) if status.success() => Ok(stdout),
            Ok(status) => Err(format!(
                "{what} failed ({status}):\n{}",
                tail(&format!("{stdout}{stderr}"), 12)
            )),
            Err(why) => Err(format!("{what}: {why}")),
        }
    }

    /// Starts the server of `data`, logging to `<name>.log`; the log's tail on failure.
    fn start(&mut self, data: &Path, name: &str) -> Result<(), String> {
        self.servers.push(data.to_path_buf());
        let log = self.dir.join(format!("{name}.log"));
        let started = self.run(
            &format!("pg_ctl start ({name})"),
            self.command(&self.pg_ctl.clone())
                .arg("-D")
                .arg(data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "start"]),
            STEP_TIMEOUT,
        );
        started.map(drop).map_err(|e| {
            let log = fs::read_to_string(&log).unwrap_or_default();
            format!("{e}\n{name} server log:\n{}", tail(&log, 12))
        })
    }

    /// Waits until the primary on `port` has a streaming synchronous standby; describes it.
    fn wait_sync(&mut self, tools: &Tools, port: u16) -> Result<String, String> {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            if let Some(state) = self.sync_state(tools, port)? {
                return Ok(state);
            }
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err("interrupted".to_string());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the standby did not become a streaming synchronous standby within {SYNC_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The primary's streaming synchronous standby as pg_stat_replication shows it, through
    /// psql; without psql, a pgbench script that fails (division by zero) when there is none.
    fn sync_state(&mut self, tools: &Tools, port: u16) -> Result<Option<String>, String> {
        let wanted = "state = 'streaming' AND sync_state = 'sync'";
        if let Some(psql) = &tools.psql {
            let query = format!(
                "SELECT application_name, state, sync_state FROM pg_stat_replication WHERE {wanted}"
            );
            let rows = self.run(
                "psql",
                self.command(psql)
                    .args(["-X", "-A", "-t", "-F", " "])
                    .args(self.connection(port))
                    .args(["-d", "postgres", "-c", &query]),
                STEP_TIMEOUT,
            )?;
            let row = rows.lines().next().map(str::trim).filter(|r| !r.is_empty());
            return Ok(row.map(|r| format!("pg_stat_replication: {r}")));
        }
        let script = self.dir.join("sync-check.sql");
        let text = format!("SELECT 1 / count(*) FROM pg_stat_replication WHERE {wanted};\n");
        fs::write(&script, text).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        let checked = self.run(
            "pgbench sync check",
            self.command(&tools.pgbench)
                .args(self.connection(port))
                .args(["-n", "-t", "1", "-f"])
                .arg(&script)
                .arg("postgres"),
            STEP_TIMEOUT,
        );
        Ok(checked.ok().map(|_| {
            "streaming, sync (pg_stat_replication checked with pgbench: no psql)".to_string()
        }))
    }

    /// `pg_ctl -m immediate stop`; kills the postmaster if it outlives that.
    fn stop(&mut self, data: &Path) {
        let postmaster = fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<libc::pid_t>().ok());
        let mut command = self.command(&self.pg_ctl.clone());
        command
            .arg("-D")
            .arg(data)
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Ok(mut child) = command.spawn() {
            let _ = wait(&mut child, Duration::from_secs(40), false);
        }
        if let Some(pid) = postmaster.filter(|&pid| is_postgres(pid)) {
            // SAFETY: kill has no memory preconditions; the pid is a postgres process of ours.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for data in std::mem::take(&mut self.servers).iter().rev() {
            self.stop(data);
        }
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!(
                "txcast bench pgbench: cannot remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// Whether `pid` is a live process (not a zombie) named postgres.
fn is_postgres(pid: libc::pid_t) -> bool {
    // /proc/PID/stat: "PID (COMM) STATE ...".
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    stat.contains(" (postgres) ") && !matches!(state, Some('Z' | 'X'))
}

/// Waits for `child`; past `timeout`, or on Ctrl-C when `interruptible`, asks it to end
/// (SIGTERM, which runuser passes on), then kills it.
fn wait(child: &mut Child, timeout: Duration, interruptible: bool) -> Result<ExitStatus, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot wait: {e}")),
        }
        let interrupted = interruptible && INTERRUPTED.load(Ordering::SeqCst);
        if interrupted || Instant::now() >= deadline {
            end(child);
            return Err(if interrupted {
                "interrupted".to_string()
            } else {
                format!("did not finish within {timeout:?}; ended")
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, up to 5 s to exit, then SIGKILL; reaps the child.
fn end(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill has no memory preconditions; the child is not reaped yet, so the pid
        // is still ours.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Set by the SIGINT handler while a run defers Ctrl-C.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// How many runs defer Ctrl-C now, and the SIGINT disposition the first one replaced.
static SIGINT_HOLDERS: Mutex<(usize, Option<libc::sigaction>)> = Mutex::new((0, None));

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// While held, Ctrl-C only sets [`INTERRUPTED`] (the programs we run still get it and die,
/// since exec resets a handler); when the last holder lets go, the old disposition is
/// restored and a deferred Ctrl-C raised again.
struct SigintDeferred;

impl SigintDeferred {
    fn install() -> SigintDeferred {
        let mut holders = SIGINT_HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        if holders.0 == 0 {
            INTERRUPTED.store(false, Ordering::SeqCst);
            // SAFETY: both structs are zeroed then filled as sigaction expects; the handler
            // only stores to an atomic, which is async-signal-safe.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
                new.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGINT, &new, &mut old) == 0 {
                    holders.1 = Some(old);
                }
            }
        }
        holders.0 += 1;
        SigintDeferred
    }
}

impl Drop for SigintDeferred {
    fn drop(&mut self) {
        let mut holders = SIGINT_HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        holders.0 -= 1;
        if holders.0 > 0 {
            return;
        }
        if let Some(old) = holders.1.take() {
            // SAFETY: `old` is the disposition sigaction returned; restoring it is sound.
            unsafe { libc::sigaction(libc::SIGINT, &old, std::ptr::null_mut()) };
            if INTERRUPTED.swap(false, Ordering::SeqCst) {
                // SAFETY: raise has no preconditions.
                unsafe { libc::raise(libc::SIGINT) };
            }
        }
    }
}

/// The figures of pgbench's report (version and replication left empty).
fn parse_output(text: &str) -> Result<PgResult, String> {
    let after = |prefix: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
    };
    // 14 and later say "without initial connection time", earlier ones "excluding ...".
    let tps = text
        .lines()
        .filter(|l| {
            l.contains("without initial connection time")
                || l.contains("excluding connections establishing")
        })
        .find_map(|l| l.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok());
    let latency = after("latency average = ").and_then(|v| v.parse::<f64>().ok());
    let count = |prefix: &str| after(prefix).and_then(|v| v.parse::<u64>().ok());
    match (tps, latency) {
        (Some(tps), Some(latency_ms)) => Ok(PgResult {
            tps,
            latency_ms,
            failed: count("number of failed transactions: "),
            transactions: count("number of transactions actually processed: "),
            version: String::new(),
            replication: None,
        }),
        _ => Err(format!(
            "no tps or latency in pgbench's output:\n{}",
            tail(text, 12)
        )),
    }
}

struct Plan {
    opts: PgOptions,
    json: bool,
}

// The options of `txcast bench pgbench` (the variant in `super::Bench` says what it does).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// pgbench's clients (1 to 1000)
    #[arg(long, default_value_t = u64::from(PgOptions::default().clients), value_parser = parse_u64)]
    pub clients: u64,
    /// pgbench's threads (1 to --clients) [default: 2, at most --clients]
    #[arg(long, value_parser = parse_u64)]
    pub threads: Option<u64>,
    /// Seconds of load (1 to 3600)
    #[arg(long, default_value_t = u64::from(PgOptions::default().seconds), value_parser = parse_u64)]
    pub seconds: u64,
    /// pgbench's scale factor (1 to 10000)
    #[arg(long, default_value_t = u64::from(PgOptions::default().scale), value_parser = parse_u64)]
    pub scale: u64,
    /// Add a synchronous streaming standby
    #[arg(long)]
    pub standby: bool,
    /// JSON lines on stdout, the human table on stderr
    #[arg(long)]
    pub json: bool,
}

fn plan(o: &Args) -> Result<Plan, String> {
    let d = PgOptions::default();
    let number = |key: &str, n: u64, max: u32| -> Result<u32, String> {
        match u32::try_from(n) {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(format!("--{key} must be 1..={max}")),
        }
    };
    let clients = number("clients", o.clients, 1000)?;
    let threads = number(
        "threads",
        o.threads.unwrap_or(u64::from(d.threads.min(clients))),
        clients,
    )?;
    Ok(Plan {
        opts: PgOptions {
            clients,
            threads,
            seconds: number("seconds", o.seconds, 3600)?,
            scale: number("scale", o.scale, 10_000)?,
            standby: o.standby,
        },
        json: o.json,
    })
}

pub fn run(args: &Args) -> i32 {
    let plan = match plan_or_exit("pgbench", plan(args)) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let o = &plan.opts;
    let case = if o.standby { "standby" } else { "single" };
    let r = match run_pgbench(o) {
        Ok(r) => r,
        Err(e) if e.starts_with(NOT_FOUND) => {
            if plan.json {
                println!("{}", bench_json! { bench: "pgbench", skipped: e });
            } else {
                println!("txcast bench pgbench: skipped: {e}");
            }
            return 0;
        }
        Err(e) => {
            eprintln!("txcast bench pgbench: {e}");
            return EXIT_FAILED;
        }
    };
    let mut heading = format!(
        "pgbench: {}, TPC-B-like script, scale {}, fsync=on, synchronous_commit=on, Unix socket\n",
        r.version, o.scale
    );
    if let Some(replication) = &r.replication {
        heading.push_str(&format!("synchronous streaming standby: {replication}\n"));
    }
    let optional = |n: Option<u64>| n.map_or("-".to_string(), |n| n.to_string());
    let mut table = Table::new([
        "case",
        "clients",
        "threads",
        "seconds",
        "tps",
        "latency ms",
        "failed",
        "transactions",
    ]);
    table.push(vec![
        case.to_string(),
        o.clients.to_string(),
        o.threads.to_string(),
        o.seconds.to_string(),
        format!("{:.1}", r.tps),
        format!("{:.3}", r.latency_ms),
        optional(r.failed),
        optional(r.transactions),
    ]);
    let human = format!(
        "{heading}{}tps excludes the initial connection time\n",
        table.render()
    );
    if plan.json {
        eprint!("{human}");
        let line = bench_json! {
            bench: "pgbench",
            case: case,
            clients: o.clients,
            threads: o.threads,
            seconds: o.seconds,
            scale: o.scale,
            tps: rounded(r.tps, 3),
            latency_ms: rounded(r.latency_ms, 3),
            failed: r.failed,
            transactions: r.transactions,
            version: &r.version,
            replication: r.replication.as_deref(),
        };
        println!("{line}");
    } else {
        print!("{human}");
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    const REPORT: &str = "\
pgbench (15.18 (Debian 15.18-0+deb12u1))
starting vacuum...end.
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 1
query mode: simple
number of clients: 2
number of threads: 1
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 1234
number of failed transactions: 0 (0.000%)
latency average = 3.241 ms
initial connection time = 4.517 ms
tps = 617.093517 (without initial connection time)
";

    #[test]
    fn report_figures_parse() {
        let r = parse_output(REPORT).unwrap();
        assert_eq!(r.tps, 617.093517);
        assert_eq!(r.latency_ms, 3.241);
        assert_eq!(r.failed, Some(0));
        assert_eq!(r.transactions, Some(1234));
        let old = "latency average = 2.5 ms\n\
                   tps = 800.1 (including connections establishing)\n\
                   tps = 801.2 (excluding connections establishing)\n";
        let r = parse_output(old).unwrap();
        assert_eq!((r.tps, r.failed), (801.2, None));
        assert!(parse_output("pgbench: error: connection failed").is_err());
    }

    #[test]
    fn command_line_parses() {
        let try_plan = |words: &[&str]| plan(&super::super::parse::<Args>(words)?);
        let p = try_plan(&["--clients", "4", "--standby", "--json"]).unwrap();
        assert_eq!(
            p.opts,
            PgOptions {
                clients: 4,
                standby: true,
                ..PgOptions::default()
            }
        );
        assert!(p.json);
        assert_eq!(try_plan(&["--clients", "1"]).unwrap().opts.threads, 1);
        assert!(try_plan(&["--clients", "2", "--threads", "3"]).is_err());
        assert!(try_plan(&["--seconds", "0"]).is_err());
        assert!(try_plan(&["--seconds=x"]).is_err());
    }

    /// The figures of a short run, or `None` (after a printed line) without PostgreSQL.
    fn short_run(standby: bool) -> Option<PgResult> {
        let opts = PgOptions {
            clients: 2,
            threads: 1,
            seconds: 2,
            scale: 1,
            standby,
        };
        match run_pgbench(&opts) {
            Ok(r) => Some(r),
            Err(e) if e.starts_with(NOT_FOUND) => {
                println!("skipped: {e}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn pgbench_runs_on_a_throwaway_cluster() {
        let Some(r) = short_run(false) else { return };
        assert!(r.tps > 0.0 && r.latency_ms > 0.0, "{r:?}");
        assert_eq!(r.failed, Some(0));
        assert!(r.version.starts_with("PostgreSQL "), "{}", r.version);
        assert!(r.replication.is_none());
    }

    #[test]
    fn pgbench_runs_with_a_synchronous_standby() {
        let Some(r) = short_run(true) else { return };
        assert!(r.tps > 0.0, "{r:?}");
        assert!(
            r.replication.as_deref().is_some_and(|s| s.contains("sync")),
            "{r:?}"
        );
    }

    #[test]
    fn a_panic_still_stops_the_server_and_removes_the_directory() {
        let Ok(tools) = Tools::find(false) else {
            println!("skipped: {NOT_FOUND}");
            return;
        };
        let seen = Mutex::new(None);
        let outcome = std::panic::catch_unwind(|| {
            let mut s = Scratch::create(&tools).unwrap();
            let data = s.dir.join("primary");
            let port = free_ports(1).unwrap()[0];
            s.run(
                "initdb",
                s.command(&tools.initdb).arg("-D").arg(&data).args([
                    "-U",
                    SUPERUSER,
                    "-A",
                    "trust",
                    "--no-sync",
                ]),
                STEP_TIMEOUT,
            )
            .unwrap();
            let conf = format!(
                "listen_addresses = ''\nunix_socket_directories = '{}'\nport = {port}\n",
                s.dir.display()
            );
            append(&data.join("postgresql.conf"), &conf).unwrap();
            s.start(&data, "primary").unwrap();
            let pid = fs::read_to_string(data.join("postmaster.pid")).unwrap();
            let pid: libc::pid_t = pid.lines().next().unwrap().parse().unwrap();
            *seen.lock().unwrap() = Some((s.dir.clone(), pid));
            panic!("on purpose, with the server running");
        });
        assert!(outcome.is_err());
        let (dir, pid) = seen.into_inner().unwrap().expect("the server started");
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(!is_postgres(pid), "postmaster {pid} still running");
    }
}
