//! Runs a [`Site`] on txcast: its packets on a port (shared memory to a site on the same host,
//! UDP to others), its log in a file written by a thread of its own with group commit (one
//! `fdatasync` for every record appended while the previous one ran), and its action drivers
//! as closed-loop clients in the site's thread (Raid's multi-server per process).
//!
//! Threads of a site: the site thread (the port, the state machine, the clients) and the log
//! writer. The writer tells the site what is durable by a message to the site's port from a
//! port of its own, so the site thread has one place to wait: its port.

use crate::client::{encode_reply, Outcome, Refusal, Request};
use crate::db::{Scale, Totals};
use crate::log::{frame, unframe, FRAME_HEADER};
use crate::site::{count_cause, Cause, Counters, Event, Site, SiteConfig, Transfer};
use crate::stats::Histogram;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use txcast_port::{IdleStrategy, Port, PortConfig, PortError};
use txcast_proto::rng::Rng;
use txcast_proto::{Address, Instant};

/// The server type of a Raid site's ports (server 0: the site; 1: its log writer).
pub const RAID_SITE_TYPE: u16 = 14;
const SITE_SERVER: u16 = 0;
const WRITER_SERVER: u16 = 1;
/// The writer's message to its site: what is durable (`u64`), or that the log failed.
const WRITER_DURABLE: u8 = 1;
const WRITER_FAILED: u8 = 2;

#[derive(Debug, Error)]
pub enum RaidError {
    #[error("port: {0:?}")]
    Port(PortError),
    #[error("log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] crate::site::ConfigError),
    #[error("cluster: {0}")]
    Cluster(String),
}

impl From<PortError> for RaidError {
    fn from(e: PortError) -> RaidError {
        RaidError::Port(e)
    }
}

/// A cluster's shape, the same on every site.
#[derive(Clone)]
pub struct ClusterConfig {
    /// The txcast instance the sites' addresses use.
    pub instance: u16,
    pub sites: u16,
    pub scale: Scale,
    /// Where each site keeps `site-N.log` and `site-N.incarnation`.
    pub data_dir: PathBuf,
    /// `fdatasync` before a record counts as durable (off only to measure what it costs).
    pub sync: bool,
    /// How a site's thread waits for its port.
    pub idle: IdleStrategy,
    /// A site's log is compacted (rewritten as its copy's image and what is in doubt) once
    /// it holds this many bytes, and twice what it held after the last compaction.
    pub compact_bytes: u64,
    /// The sites' protocol settings (site, sites and incarnation are set per site).
    pub site: SiteConfig,
    /// The engine the sites' ports open on (with its cluster configuration: which host each
    /// site is on); `None`: the process's embedded engine (every site on loopback).
    pub engine: Option<txcast_port::Engine>,
}

/// How long the engine under Raid's sites keeps polling its sockets after its last packet
/// before it sleeps on them. The sites themselves sleep between packets (several sites and
/// their log writers share a few cores), so an engine that spins takes a core from them;
/// side by side at 128 clients per site on 3 sites, 50 µs of spin (the engine's default)
/// cost 10 % more CPU per transaction than none (see docs/BENCHMARKS.md).
pub const ENGINE_SPIN: Duration = Duration::ZERO;

/// The engine configuration Raid's sites run on: `naming` says where each site is.
pub fn engine_config(naming: txcast_port::ClusterConfig) -> txcast_port::EngineConfig {
    txcast_port::EngineConfig {
        cluster: naming,
        idle_spin: ENGINE_SPIN,
        ..txcast_port::EngineConfig::default()
    }
}

impl ClusterConfig {
    pub fn new(sites: u16, scale: Scale, data_dir: PathBuf) -> ClusterConfig {
        ClusterConfig {
            instance: 7,
            sites,
            scale,
            data_dir,
            sync: true,
            idle: IdleStrategy::Park,
            compact_bytes: 256 << 20,
            // Packets of one datagram (1,400 bytes): 8,000 measured no faster side by side.
            site: SiteConfig::new(0, sites, 1, scale),
            engine: None,
        }
    }

    pub fn address(&self, site: u16) -> Address {
        Address::new(self.instance, site, RAID_SITE_TYPE, SITE_SERVER)
    }

    pub fn log_path(&self, site: u16) -> PathBuf {
        self.data_dir.join(format!("site-{site}.log"))
    }
}

/// The clients a site runs.
#[derive(Clone, Debug)]
pub struct Load {
    /// Closed-loop clients: each submits its next transfer when the last one ends.
    pub clients: usize,
    /// Transfers in this first part are not measured.
    pub warmup: Duration,
    /// Measured time after the warm-up.
    pub measure: Duration,
    pub seed: u64,
}

/// What one site did.
#[derive(Clone, Debug)]
pub struct SiteReport {
    pub site: u16,
    /// Transfers committed in the measured time.
    pub committed: u64,
    pub measured: Duration,
    /// Commit latency of the measured transfers, in µs.
    pub latency_us: Histogram,
    /// Given up, by cause.
    pub given_up: Vec<(Cause, u64)>,
    pub counters: Counters,
    pub totals: Totals,
    pub digest: u64,
    pub incarnation: u32,
    /// Why the log failed, if it did (the site then took no more work).
    pub log_error: Option<String>,
    /// Batches of records its log writer made durable (group commit: one `fdatasync` for
    /// every record appended while the previous one ran).
    pub log_batches: u64,
    /// Messages at the site's port from neither a peer site nor its log writer that were no
    /// client request: dropped.
    pub foreign: u64,
    /// Requests of clients in other processes (`crate::client`), and replies their full
    /// ports refused.
    pub requests: u64,
    pub replies_dropped: u64,
}

/// Shared by the sites of one process to end a run together.
pub struct RunControl {
    /// Set to stop every site at once.
    pub stop: AtomicBool,
    /// Sites with a load end once their load has run and every site of `local` has been
    /// quiet for 100 ms, if this is set (`RunControl::new` sets it).
    pub end_when_quiet: AtomicBool,
    /// The sites that run in this process, a bit each (0: every site of the cluster).
    pub local: AtomicU64,
    /// How long they must have been quiet, in ms (default 100; sites in separate processes
    /// wait longer, for what their peers may still ask).
    pub quiet_ms: AtomicU64,
    /// Bit per site: quiet now (no client running, nothing under way).
    pub quiet: AtomicU64,
    /// Transfers committed so far by every site (for progress lines).
    pub committed: AtomicU64,
    /// If set, each commit's transaction id, as its client learns it.
    pub commits: Mutex<Option<std::sync::mpsc::Sender<crate::TxnId>>>,
}

impl Default for RunControl {
    fn default() -> Self {
        RunControl::new()
    }
}

impl RunControl {
    /// Every site of the cluster in this process, ending together once quiet.
    pub fn new() -> RunControl {
        RunControl {
            stop: AtomicBool::new(false),
            end_when_quiet: AtomicBool::new(true),
            local: AtomicU64::new(0),
            quiet_ms: AtomicU64::new(100),
            quiet: AtomicU64::new(0),
            committed: AtomicU64::new(0),
            commits: Mutex::new(None),
        }
    }
}

/// Nanoseconds since the Unix epoch, steadily increasing: the sites' clock (wait-die
/// compares the start times of transactions of different sites).
struct Clock {
    epoch_ns: u64,
    start: std::time::Instant,
}

impl Clock {
    fn new() -> Clock {
        let epoch_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Clock {
            epoch_ns,
            start: std::time::Instant::now(),
        }
    }
    fn now(&self) -> Instant {
        Instant(self.epoch_ns + self.start.elapsed().as_nanos() as u64)
    }
}

/// The log file and its writer thread.
struct LogShared {
    /// Bytes to append, the record count they bring the log to, and a compacted log to put
    /// in the old one's place first (its framed records).
    buf: Mutex<(Vec<u8>, u64, Option<Vec<u8>>)>,
    ready: Condvar,
    stop: AtomicBool,
    /// Why the log failed, once it has.
    error: Mutex<Option<String>>,
    /// Batches written and made durable (one `fdatasync` each when syncing).
    batches: AtomicU64,
}

struct LogWriter {
    shared: Arc<LogShared>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Records handed to the writer.
    handed: u64,
}

impl LogWriter {
    fn start(
        file: File,
        path: PathBuf,
        sync: bool,
        port: Port,
        site: Address,
        base: u64,
    ) -> LogWriter {
        let shared = Arc::new(LogShared {
            buf: Mutex::new((Vec::new(), base, None)),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            batches: AtomicU64::new(0),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("raid-log-{}", site.site))
            .spawn(move || writer_loop(sh, file, path, sync, port, site))
            .expect("spawn the log writer");
        LogWriter {
            shared,
            thread: Some(thread),
            handed: base,
        }
    }

    fn append(&mut self, records: &[Vec<u8>]) {
        if records.is_empty() {
            return;
        }
        let mut g = self.shared.buf.lock().expect("log buffer");
        for r in records {
            frame(r, &mut g.0);
        }
        self.handed += records.len() as u64;
        g.1 = self.handed;
        drop(g);
        self.shared.ready.notify_one();
    }

    /// Replaces the log with `records` (a compacted log), before anything appended after.
    fn replace(&mut self, records: &[Vec<u8>]) {
        let mut framed = Vec::new();
        for r in records {
            frame(r, &mut framed);
        }
        let mut g = self.shared.buf.lock().expect("log buffer");
        debug_assert!(
            g.0.is_empty(),
            "a log is compacted when nothing waits for it"
        );
        self.handed = records.len() as u64;
        g.1 = self.handed;
        g.2 = Some(framed);
        drop(g);
        self.shared.ready.notify_one();
    }
}

/// Writes `framed` as the new log at `path`: aside first, synced, renamed over the old one,
/// the directory synced; returns the new file, open for appending.
fn install_log(path: &Path, framed: &[u8]) -> std::io::Result<File> {
    let aside = path.with_extension("log.compacted");
    let mut f = File::create(&aside)?;
    f.write_all(framed)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&aside, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    OpenOptions::new().append(true).open(path)
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.ready.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn writer_loop(
    sh: Arc<LogShared>,
    mut file: File,
    path: PathBuf,
    sync: bool,
    mut port: Port,
    site: Address,
) {
    let mut bytes = Vec::new();
    loop {
        let (upto, replace) = {
            let mut g = sh.buf.lock().expect("log buffer");
            while g.0.is_empty() && g.2.is_none() && !sh.stop.load(Ordering::SeqCst) {
                g = sh.ready.wait(g).expect("log buffer");
            }
            if g.0.is_empty() && g.2.is_none() {
                return;
            }
            std::mem::swap(&mut bytes, &mut g.0);
            (g.1, g.2.take())
        };
        let installed = match replace {
            Some(framed) => install_log(&path, &framed).map(|f| file = f),
            None => Ok(()),
        };
        let r = installed.and_then(|()| {
            file.write_all(&bytes)
                .and_then(|()| if sync { file.sync_data() } else { Ok(()) })
        });
        bytes.clear();
        let msg = match r {
            Ok(()) => {
                sh.batches.fetch_add(1, Ordering::Relaxed);
                let mut m = vec![WRITER_DURABLE];
                m.extend_from_slice(&upto.to_le_bytes());
                m
            }
            Err(e) => {
                tracing::warn!(log = %path.display(), error = %e, "site log failed: the site takes no more work");
                *sh.error.lock().expect("log error") = Some(format!("{}: {e}", path.display()));
                vec![WRITER_FAILED]
            }
        };
        if port.send(site, &msg).is_err() || msg[0] == WRITER_FAILED {
            return;
        }
    }
}

/// Opens (or creates) a site's log, cuts a torn tail, and returns the file positioned at its
/// end with the records it holds.
fn open_log(path: &Path) -> Result<(File, Vec<Vec<u8>>), RaidError> {
    let err = |source| RaidError::Log {
        path: path.to_owned(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(err)?;
    // Read what the file holds now (a device such as /dev/full holds nothing).
    let len = file.metadata().map_err(err)?.len();
    let mut bytes = Vec::new();
    (&mut file).take(len).read_to_end(&mut bytes).map_err(err)?;
    let (bodies, valid) = unframe(&bytes);
    let records = bodies.into_iter().map(|b| b.to_vec()).collect();
    if valid < bytes.len() {
        file.set_len(valid as u64).map_err(err)?;
    }
    file.seek(SeekFrom::End(0)).map_err(err)?;
    Ok((file, records))
}

/// Reads, increments and stores (synced) a site's incarnation.
fn next_incarnation(path: &Path) -> Result<u32, RaidError> {
    let err = |source| RaidError::Log {
        path: path.to_owned(),
        source,
    };
    let last = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let next = last
        .checked_add(1)
        .ok_or_else(|| RaidError::Cluster(format!("{}: incarnations exhausted", path.display())))?;
    let mut f = File::create(path).map_err(err)?;
    f.write_all(format!("{next}\n").as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    Ok(next)
}

/// A client's next transfer, TPC-B style: a teller at random, its branch, an account of
/// that branch 85% of the time (else of any branch), a delta of up to ±999,999.
pub fn next_transfer(rng: &mut Rng, scale: &Scale) -> Transfer {
    let teller = rng.below(scale.tellers() as u64) as u32;
    let branch = teller / scale.tellers_per_branch;
    let account_branch = if scale.branches > 1 && rng.chance(0.15) {
        rng.below(scale.branches as u64) as u32
    } else {
        branch
    };
    let account = account_branch * scale.accounts_per_branch
        + rng.below(scale.accounts_per_branch as u64) as u32;
    let delta = rng.below(1_999_999) as i64 - 999_999;
    Transfer {
        account,
        teller,
        branch,
        delta,
    }
}

/// Tags of external clients' transfers have this bit (the site's own clients count from 0).
const EXTERNAL: u64 = 1 << 63;

/// Requests of clients in other processes ([`crate::client`]): what is under way, and the
/// replies to send.
#[derive(Default)]
struct External {
    next: u64,
    /// Tag -> the client's port and its request id.
    pending: rustc_hash::FxHashMap<u64, (Address, u64)>,
    replies: Vec<(Address, Vec<u8>)>,
    /// Messages that were no request (dropped), and replies a full client port refused.
    foreign: u64,
    replies_dropped: u64,
    requests: u64,
    /// Audits waiting for the site to be quiet.
    audits: Vec<(Address, u64)>,
}

impl External {
    fn request(&mut self, core: &mut Site, now: Instant, source: Address, m: &[u8]) {
        let (id, t) = match crate::client::decode(m) {
            Ok((id, Request::Transfer(t))) => (id, t),
            Ok((id, Request::Audit)) => {
                if self.audits.len() < crate::client::AUDITS_MAX {
                    self.audits.push((source, id));
                } else {
                    let o = Outcome::Refused {
                        reason: Refusal::Full,
                        detail: "too many audits waiting".into(),
                    };
                    self.replies.push((source, encode_reply(id, &o)));
                }
                return;
            }
            Err(bad) => {
                match bad.id {
                    Some(id) => {
                        let o = Outcome::Refused {
                            reason: Refusal::Malformed,
                            detail: bad.why,
                        };
                        self.replies.push((source, encode_reply(id, &o)));
                    }
                    None => self.foreign += 1,
                }
                return;
            }
        };
        self.requests += 1;
        self.next += 1;
        let tag = EXTERNAL | self.next;
        match core.submit(now, tag, t) {
            Ok(()) => {
                self.pending.insert(tag, (source, id));
            }
            Err(e) => {
                let o = Outcome::Refused {
                    reason: crate::client::refusal(&e),
                    detail: e.to_string(),
                };
                self.replies.push((source, encode_reply(id, &o)));
            }
        }
    }

    /// An outcome for tag `tag`, if it is an external client's.
    fn outcome(&mut self, tag: u64, o: Outcome) {
        if let Some((to, id)) = self.pending.remove(&tag) {
            self.replies.push((to, encode_reply(id, &o)));
        }
    }

    /// Answers the audits waiting, if the site is quiet.
    fn audit(&mut self, core: &Site) {
        if self.audits.is_empty() || !core.is_quiet() || !self.pending.is_empty() {
            return;
        }
        let o = Outcome::Audit {
            totals: core.db().totals(),
            digest: core.db().digest(),
        };
        for (to, id) in std::mem::take(&mut self.audits) {
            self.replies.push((to, encode_reply(id, &o)));
        }
    }

    fn flush(&mut self, port: &mut Port) {
        for (to, r) in self.replies.drain(..) {
            if port.try_send(to, &r).is_err() {
                self.replies_dropped += 1;
            }
        }
    }
}

/// The site's counters of rare happenings as last logged: a change is logged once.
#[derive(Default)]
struct Seen {
    views: u64,
    suspicions: u64,
    left_out: u64,
    snapshots: u64,
}

impl Seen {
    /// Logs what changed since the last call: views installed, sites suspected, this site
    /// left out of the view, snapshots taken. Called once per turn of the site's loop; only
    /// four counters are compared when nothing happened.
    fn log_changes(&mut self, site: u16, core: &Site) {
        let c = core.counters_ref();
        if c.views == self.views
            && c.suspicions == self.suspicions
            && c.left_out == self.left_out
            && c.snapshots == self.snapshots
        {
            return;
        }
        if c.suspicions != self.suspicions {
            tracing::warn!(
                site,
                suspected = c.suspicions - self.suspicions,
                "sites suspected (no vote, acknowledgement or answer in time)"
            );
        }
        if c.left_out != self.left_out {
            tracing::warn!(site, "site left out of the view: asking to join");
        }
        if c.views != self.views {
            match core.view() {
                Some(v) => {
                    let members: Vec<u16> = v.members.iter().map(|m| m.site).collect();
                    tracing::info!(site, ballot = v.ballot, ?members, "view installed");
                }
                None => tracing::info!(site, "view installed: taking a snapshot of the donor"),
            }
        }
        if c.snapshots != self.snapshots {
            tracing::info!(site, "snapshot taken: the copy is synced to the view");
        }
        self.views = c.views;
        self.suspicions = c.suspicions;
        self.left_out = c.left_out;
        self.snapshots = c.snapshots;
    }
}

/// A message at the site's port: from its log writer, or a packet of a peer site (anything
/// else is not for this site and is dropped).
fn on_message(
    core: &mut Site,
    now: Instant,
    source: Address,
    m: &[u8],
    writer: Address,
    peers: &[Address],
    ext: &mut External,
) {
    if source == writer {
        match m.first() {
            Some(&WRITER_DURABLE) if m.len() == 9 => {
                let upto = u64::from_le_bytes(m[1..9].try_into().expect("8 bytes"));
                core.logged(now, upto);
            }
            _ => core.log_failed(now),
        }
    } else if peers.contains(&source) {
        // A malformed packet is counted by the site and dropped.
        let _ = core.handle_packet(now, m);
    } else {
        ext.request(core, now, source, m);
    }
}

/// Runs site `site` of the cluster until `control.stop`, or, with a load, until the load has
/// run and every site of the process is quiet. Returns what it did.
pub fn run_site(
    cluster: &ClusterConfig,
    site: u16,
    load: Option<Load>,
    control: Arc<RunControl>,
) -> Result<SiteReport, RaidError> {
    run_site_db(cluster, site, load, control).map(|(r, _)| r)
}

/// [`run_site`], returning the site's copy of the database as well.
pub fn run_site_db(
    cluster: &ClusterConfig,
    site: u16,
    load: Option<Load>,
    control: Arc<RunControl>,
) -> Result<(SiteReport, crate::db::Db), RaidError> {
    if site >= cluster.sites {
        return Err(RaidError::Cluster(format!(
            "site {site} of a cluster of {}",
            cluster.sites
        )));
    }
    std::fs::create_dir_all(&cluster.data_dir).map_err(|source| RaidError::Log {
        path: cluster.data_dir.clone(),
        source,
    })?;
    let incarnation = next_incarnation(&cluster.data_dir.join(format!("site-{site}.incarnation")))?;
    let clock = Clock::new();
    let mut cfg = cluster.site.clone();
    cfg.site = site;
    cfg.sites = cluster.sites;
    cfg.incarnation = incarnation;
    cfg.scale = cluster.scale;
    let log_path = cluster.log_path(site);
    let (file, records) = open_log(&log_path)?;
    let mut log_bytes: u64 = records
        .iter()
        .map(|r| (r.len() + FRAME_HEADER) as u64)
        .sum();
    let mut compact_at = cluster.compact_bytes;
    let mut core = Site::recover(cfg, clock.now(), records.iter().map(|r| &r[..]))?;
    // A slot holds the longest packet a peer sends (the sites share `packet_bytes`) and its
    // envelope.
    let slot_bytes = (cluster.site.packet_bytes + 64)
        .next_multiple_of(64)
        .max(2048) as u32;
    let port_cfg = PortConfig {
        idle: cluster.idle,
        slot_count: 4096,
        slot_bytes,
        ..PortConfig::default()
    };
    let me = cluster.address(site);
    let open = |addr, cfg| match &cluster.engine {
        Some(e) => Port::open_on(e, addr, cfg),
        None => Port::open(addr, cfg),
    };
    let mut port = open(me, port_cfg)?;
    let writer_port = open(
        Address::new(cluster.instance, site, RAID_SITE_TYPE, WRITER_SERVER),
        PortConfig {
            idle: IdleStrategy::Park,
            slot_count: 16,
            ..PortConfig::default()
        },
    )?;
    let writer_addr = writer_port.address();
    let mut writer = LogWriter::start(file, log_path, cluster.sync, writer_port, me, core.taken());
    let peers: Vec<Address> = (0..cluster.sites).map(|s| cluster.address(s)).collect();

    let mut rng = Rng::new(load.as_ref().map_or(1, |l| l.seed) ^ (site as u64) << 32);
    let scale = cluster.scale;
    let started = std::time::Instant::now();
    let (warm_end, load_end) = match &load {
        Some(l) => (started + l.warmup, started + l.warmup + l.measure),
        None => (started, started),
    };
    let clients = load.as_ref().map_or(0, |l| l.clients);
    // Per client: running, and when its transfer was submitted.
    let mut running = vec![false; clients];
    let mut hist = Histogram::new();
    let mut committed = 0u64;
    let mut given_up: Vec<(Cause, u64)> = Vec::new();
    let mut records = Vec::new();
    let mut buf = vec![0u8; port.message_bytes_max()];
    let mut quiet_since: Option<std::time::Instant> = None;
    let mut measured = Duration::ZERO;
    let mut ext = External::default();
    let mut seen = Seen::default();
    let commits = control.commits.lock().expect("commits").clone();

    loop {
        let now_std = std::time::Instant::now();
        let now = clock.now();
        // Everything waiting in the port.
        while let Some(r) = port.try_recv(&mut buf) {
            on_message(
                &mut core,
                now,
                r.source,
                &buf[..r.len],
                writer_addr,
                &peers,
                &mut ext,
            );
        }
        if core.next_deadline().is_some_and(|t| t <= now) {
            core.handle_timeout(now);
        }
        while let Some(e) = core.poll_event() {
            match e {
                Event::Committed {
                    tag,
                    submitted,
                    txn,
                    balance,
                    attempts,
                } => {
                    if let Some(r) = running.get_mut(tag as usize) {
                        *r = false;
                    }
                    if tag & EXTERNAL != 0 {
                        let o = Outcome::Committed {
                            txn,
                            balance,
                            attempts,
                        };
                        ext.outcome(tag, o);
                    }
                    control.committed.fetch_add(1, Ordering::Relaxed);
                    if let Some(tx) = commits.as_ref() {
                        let _ = tx.send(txn);
                    }
                    if now_std >= warm_end && now_std < load_end {
                        committed += 1;
                        hist.record(now.0.saturating_sub(submitted.0) / 1000);
                    }
                }
                Event::Unknown { tag, attempts } => {
                    if let Some(r) = running.get_mut(tag as usize) {
                        *r = false;
                    }
                    if tag & EXTERNAL != 0 {
                        ext.outcome(tag, Outcome::Unknown { attempts });
                    }
                }
                Event::Aborted {
                    tag,
                    cause,
                    attempts,
                } => {
                    if let Some(r) = running.get_mut(tag as usize) {
                        *r = false;
                    }
                    if tag & EXTERNAL != 0 {
                        ext.outcome(tag, Outcome::Aborted { cause, attempts });
                    }
                    count_cause(&mut given_up, cause, 1);
                }
            }
        }
        // The clients: a new transfer for each idle one while the load runs.
        if now_std < load_end && !control.stop.load(Ordering::Relaxed) {
            for (c, run) in running.iter_mut().enumerate() {
                if !*run {
                    let t = next_transfer(&mut rng, &scale);
                    if core.submit(now, c as u64, t).is_ok() {
                        *run = true;
                    }
                }
            }
        }
        // A log past `compact_bytes` is compacted: what is in flight to the disk lands first
        // (new records wait in the site meanwhile, one sync at most), then the compacted
        // records replace the log and the waiting ones follow.
        let due = log_bytes >= compact_at;
        if due && core.log_settled() {
            if let Some(recs) = core.compact() {
                let before = log_bytes;
                log_bytes = recs.iter().map(|r| (r.len() + FRAME_HEADER) as u64).sum();
                tracing::debug!(
                    site,
                    before,
                    after = log_bytes,
                    "site log compacted (bytes)"
                );
                // The next one once the log has grown as much again as it holds now.
                compact_at = cluster.compact_bytes.max(2 * log_bytes);
                writer.replace(&recs);
            }
        } else if !due {
            while let Some(r) = core.poll_log() {
                log_bytes += (r.len() + FRAME_HEADER) as u64;
                records.push(r);
            }
            writer.append(&records);
            for r in records.drain(..) {
                core.recycle_record(r);
            }
        }
        seen.log_changes(site, &core);
        ext.audit(&core);
        ext.flush(&mut port);
        while let Some((to, p)) = core.poll_transmit() {
            if let Err(e) = port.send(peers[to as usize], &p) {
                // The link to a site that is down fills: the site's protocol sends again.
                let _ = e;
            }
            core.recycle_packet(p);
        }
        // The end of a run with a load: every site of the process quiet for a while.
        if load.is_some() {
            if now_std >= load_end && measured == Duration::ZERO {
                measured = now_std.saturating_duration_since(warm_end);
            }
            let idle = now_std >= load_end
                && running.iter().all(|r| !r)
                && ext.pending.is_empty()
                // A site whose log failed does nothing more.
                && (core.is_quiet() || (core.is_broken() && core.coordinating() == 0));
            let bit = 1u64 << site;
            if idle {
                control.quiet.fetch_or(bit, Ordering::SeqCst);
            } else {
                control.quiet.fetch_and(!bit, Ordering::SeqCst);
            }
            let all = match control.local.load(Ordering::Relaxed) {
                0 => (1u64 << cluster.sites) - 1,
                m => m,
            };
            if idle
                && control.end_when_quiet.load(Ordering::SeqCst)
                && control.quiet.load(Ordering::SeqCst) & all == all
            {
                let since = *quiet_since.get_or_insert(now_std);
                let wait = Duration::from_millis(control.quiet_ms.load(Ordering::Relaxed));
                if now_std.duration_since(since) > wait {
                    break;
                }
            } else {
                quiet_since = None;
            }
        }
        if control.stop.load(Ordering::Relaxed) {
            break;
        }
        // Wait for the port, at most until the next timer (and a tick while ending a run).
        let until = core
            .next_deadline()
            .map(|t| Duration::from_nanos(t.0.saturating_sub(clock.now().0)))
            .unwrap_or(Duration::from_millis(100))
            .min(Duration::from_millis(if load.is_some() { 5 } else { 100 }));
        if until > Duration::ZERO {
            if let Ok(r) = port.recv_timeout(&mut buf, Some(until)) {
                on_message(
                    &mut core,
                    clock.now(),
                    r.source,
                    &buf[..r.len],
                    writer_addr,
                    &peers,
                    &mut ext,
                );
            }
        }
    }
    let log_error = writer.shared.error.lock().expect("log error").clone();
    let log_batches = writer.shared.batches.load(Ordering::Relaxed);
    drop(writer);
    let db = core.db();
    let report = SiteReport {
        site,
        committed,
        measured,
        latency_us: hist,
        given_up,
        counters: core.counters(),
        totals: db.totals(),
        digest: db.digest(),
        incarnation,
        log_error,
        log_batches,
        foreign: ext.foreign,
        requests: ext.requests,
        replies_dropped: ext.replies_dropped,
    };
    Ok((report, db.clone()))
}
