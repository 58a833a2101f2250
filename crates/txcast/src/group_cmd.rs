//! `txcast __group-member`: one member process of a group, for the cross-process tests (and
//! for trying groups by hand).
//!
//! Site 0 creates the group, the others join through it. Once the group has `--members`
//! members, every process sends `--messages` messages while a reader logs each delivery as a
//! line `seq kind sender msg_id payload-hash` to `--log`. A process stops once it has
//! delivered every message of every sender still in the group (and, with `--expect-rebuild`,
//! a rebuild record), or fails after `--deadline-ms`.
//!
//! `--protocol sequencer|totem|total|dynseq|dynord` chooses the ordering protocol (Amoeba's
//! sequencer by default) and `--pack off|adaptive|fixed` the packing of the layered ones. For
//! those, `seq` is the process's own count of entries and every view is a rebuild record.
//!
//! `--config FILE` places the sites as a cluster file says (hosts of their own), and
//! `--chaos-log FILE` writes what the external checker (`crate::chaos`) reads: every send,
//! its acknowledgement, every delivery and view, timestamped (see [`crate::chaos`] for the
//! format). A member left out of the group (`Expelled`, after a partition) logs it and exits 3.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::time::{Duration, Instant};
use txcast_port::{ClusterConfig, Engine, EngineConfig, GroupDelivery, GroupSpec};
use txcast_port::{Group, GroupRecord, Port, PortConfig};
use txcast_proto::group::{GroupConfig, Method, MinMembers};
use txcast_proto::order::{OrderConfig, Protocol};
use txcast_proto::pack::PackMode;
use txcast_proto::vsync::VsConfig;
use txcast_proto::Address;

const GROUP_TYPE: u16 = 2;

fn hash(p: &[u8]) -> u64 {
    txcast_proto::fnv::Fnv64::of(p)
}

/// The options of `txcast __group-member`.
#[derive(clap::Args, Debug)]
pub struct MemberArgs {
    /// The instance of the member's address
    #[arg(long)]
    instance: u16,
    /// The member's site (0 creates the group, the others join through it)
    #[arg(long)]
    site: u16,
    /// Members the group waits for before the sending starts
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Messages each member sends
    #[arg(long, default_value_t = 100)]
    messages: u64,
    /// The sequencer group's resilience
    #[arg(long, default_value_t = 1)]
    resilience: u8,
    /// Fail after this many ms
    #[arg(long, default_value_t = 30_000)]
    deadline_ms: u64,
    /// The file the deliveries are written to
    #[arg(long)]
    deliveries: String,
    /// Stop only after a rebuild record too
    #[arg(long)]
    expect_rebuild: bool,
    /// Microseconds between a member's sends
    #[arg(long, default_value_t = 2_000)]
    pace_us: u64,
    /// The ordering protocol: sequencer, totem, total, dynseq or dynord
    #[arg(long, default_value = "sequencer")]
    protocol: String,
    /// The packing of the layered protocols: off, adaptive or fixed
    #[arg(long, default_value = "adaptive")]
    pack: String,
    /// The cluster file (where each site's host is)
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Write the checker's log (sends, acknowledgements, deliveries, views) to this file
    #[arg(long, value_name = "FILE")]
    chaos_log: Option<std::path::PathBuf>,
    /// The failure detector: heartbeat interval (ms)
    #[arg(long, default_value_t = 20)]
    heartbeat_ms: u64,
    /// The failure detector: silence before a member is suspected (ms); probes (sequencer)
    /// every sixth of it, a flush (layered) times out after a third
    #[arg(long, default_value_t = 300)]
    silence_ms: u64,
    /// The libraries' default failure detector instead (`GroupConfig`, `VsConfig`)
    #[arg(long, conflicts_with_all = ["heartbeat_ms", "silence_ms"])]
    library_detector: bool,
}

/// Exit code of a member left out of the group.
pub const EXIT_EXPELLED: i32 = 3;

pub fn member(args: &MemberArgs) -> i32 {
    let mut chaos = match &args.chaos_log {
        Some(p) => match crate::chaos::Writer::create(p) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("group member: {}: {e}", p.display());
                return 1;
            }
        },
        None => None,
    };
    let r = run(args, &mut chaos);
    let (code, end) = match &r {
        Ok(()) => (0, "done".to_string()),
        Err(e) if e == EXPELLED => (EXIT_EXPELLED, "expelled".to_string()),
        Err(e) => (1, format!("error {e}")),
    };
    if let Some(c) = chaos.as_mut() {
        c.end(&end);
    }
    if let Err(e) = r {
        eprintln!("group member: {e}");
    }
    code
}

const EXPELLED: &str = "left out of the rebuilt group";

fn run(args: &MemberArgs, chaos: &mut Option<crate::chaos::Writer>) -> Result<(), String> {
    let (instance, site, members, messages) =
        (args.instance, args.site, args.members, args.messages);
    let resilience = args.resilience;
    let deadline = Duration::from_millis(args.deadline_ms);
    let log_path = &args.deliveries;
    let expect_rebuild = args.expect_rebuild;
    let pace = Duration::from_micros(args.pace_us);
    let started = Instant::now();
    let me = Address::new(instance, site, GROUP_TYPE, 0);
    let port = match &args.config {
        Some(p) => {
            let cluster = ClusterConfig::load(p).map_err(|e| e.to_string())?;
            let engine = Engine::start(EngineConfig {
                cluster,
                ..EngineConfig::default()
            })
            .map_err(|e| e.to_string())?;
            Port::open_on(&engine, me, PortConfig::default())
        }
        None => Port::open(me, PortConfig::default()),
    }
    .map_err(|e| e.to_string())?;
    let heartbeat_interval = Duration::from_millis(args.heartbeat_ms);
    let silence_timeout = Duration::from_millis(args.silence_ms);
    let protocol = &args.protocol;
    let pack = match args.pack.as_str() {
        "adaptive" => PackMode::Adaptive {
            delay_max: Duration::from_micros(500),
        },
        "off" => PackMode::Off,
        "fixed" => PackMode::Fixed {
            delay: Duration::from_millis(1),
        },
        x => return Err(format!("--pack {x}: off, adaptive or fixed")),
    };
    let mut cfg: GroupSpec = match protocol.as_str() {
        "sequencer" => GroupConfig {
            group: 11,
            resilience,
            method: Method::BySize {
                bb_from_bytes: 1024,
            },
            heartbeat_interval,
            silence_timeout,
            probe_interval: (silence_timeout / 6).max(Duration::from_millis(1)),
            probes_max: 3,
            auto_reset: Some(MinMembers::Majority),
            ..GroupConfig::default()
        }
        .into(),
        p => OrderConfig {
            protocol: Protocol::from_name(p).ok_or(format!(
                "--protocol {p}: sequencer, totem, total, dynseq or dynord"
            ))?,
            vs: VsConfig {
                group: 11,
                pack,
                heartbeat_interval,
                silence_timeout,
                flush_timeout: (silence_timeout / 3).max(Duration::from_millis(1)),
                ..VsConfig::default()
            },
            ..OrderConfig::default()
        }
        .into(),
    };
    if args.library_detector {
        match &mut cfg {
            GroupSpec::Sequencer(c) => {
                let d = GroupConfig::default();
                c.heartbeat_interval = d.heartbeat_interval;
                c.silence_timeout = d.silence_timeout;
                c.probe_interval = d.probe_interval;
                c.probes_max = d.probes_max;
            }
            GroupSpec::Ordered(c) => {
                let d = VsConfig::default();
                c.vs.heartbeat_interval = d.heartbeat_interval;
                c.vs.silence_timeout = d.silence_timeout;
                c.vs.flush_timeout = d.flush_timeout;
            }
        }
    }
    let group = if site == 0 {
        port.create_group(cfg).map_err(|e| e.to_string())?
    } else {
        let contact = Address::new(instance, 0, GROUP_TYPE, 0);
        let mut tries = 0;
        loop {
            match port.join_group(cfg.clone(), contact, Some(Duration::from_secs(2))) {
                Ok(g) => break g,
                Err(e) if tries < 10 => {
                    tries += 1;
                    eprintln!("site {site}: join: {e}; again");
                }
                Err(e) => return Err(format!("join: {e}")),
            }
        }
    };
    let mut log = std::io::BufWriter::new(
        std::fs::File::create(log_path).map_err(|e| format!("{log_path}: {e}"))?,
    );
    let mut m = Logs {
        log: &mut log,
        chaos,
        counts: HashMap::new(),
        rebuilt: false,
        unacked: VecDeque::new(),
        holder: None,
        members: None,
    };
    if let Some(c) = m.chaos.as_mut() {
        c.begin(me, protocol);
        // The view this member starts in has no record in its stream.
        c.view("?", &group.info().members);
    }
    // Wait until everyone is in, logging what arrives meanwhile.
    while group.info().members.len() < members {
        if started.elapsed() > deadline {
            return Err("the group never filled".into());
        }
        m.drain(&group, Duration::from_millis(5))?;
    }
    let mut sent = 0u64;
    let mut refused: Option<String> = None;
    let mut next_send = Instant::now();
    loop {
        if started.elapsed() > deadline {
            m.log.flush().ok();
            return Err(format!(
                "deadline: sent {sent}, delivered {:?}, members {:?}",
                m.counts,
                group.info().members
            ));
        }
        if sent < messages && Instant::now() >= next_send {
            let payload = format!("{site}:{sent}");
            match group.send_async(payload.as_bytes()) {
                Ok(id) => {
                    sent += 1;
                    refused = None;
                    m.unacked.push_back(id);
                    if let Some(c) = m.chaos.as_mut() {
                        c.send(id, hash(payload.as_bytes()));
                    }
                }
                Err(e) => {
                    // Once per kind of refusal in a row (a blocked member refuses every send).
                    let e = e.to_string();
                    if refused.as_ref() != Some(&e) {
                        eprintln!("site {site}: send: {e}");
                        refused = Some(e);
                    }
                }
            }
            next_send = Instant::now() + pace;
        }
        m.drain(&group, Duration::from_millis(1))?;
        let info = group.info();
        let done = sent == messages
            && group.sends_pending() == 0
            && (!expect_rebuild || m.rebuilt)
            && info
                .members
                .iter()
                .all(|a| m.counts.get(a).copied().unwrap_or(0) >= messages);
        if done {
            m.log.flush().map_err(|e| e.to_string())?;
            // Stay a little so the others can still fetch from us.
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                m.drain(&group, Duration::from_millis(5))?;
            }
            m.log.flush().map_err(|e| e.to_string())?;
            return Ok(());
        }
    }
}

/// What a member logs, and the counts it stops by.
struct Logs<'a, W: Write> {
    log: &'a mut W,
    chaos: &'a mut Option<crate::chaos::Writer>,
    counts: HashMap<Address, u64>,
    rebuilt: bool,
    /// Own messages sent and not yet acknowledged, oldest first (they complete in order).
    unacked: VecDeque<u64>,
    /// The member that orders (sequencer, token holder, orderer) as last logged.
    holder: Option<Address>,
    /// The members as of the last membership record, once known (see `view_of`).
    members: Option<Vec<Address>>,
}

impl<W: Write> Logs<'_, W> {
    /// Logs what the group delivered (waiting at most `wait` for the first record), the
    /// sends acknowledged since, and a change of the member that orders.
    fn drain(&mut self, group: &Group, wait: Duration) -> Result<(), String> {
        let mut wait = wait;
        loop {
            let d = match group.receive(Some(wait)) {
                Ok(d) => d,
                Err(txcast_port::GroupCallError::Timeout) => break,
                Err(txcast_port::GroupCallError::Expelled) => return Err(EXPELLED.into()),
                Err(e) => return Err(e.to_string()),
            };
            wait = Duration::ZERO;
            self.record(&d)?;
        }
        // A send is acknowledged once `wait_sent` says so (see `crate::chaos`).
        while let Some(&id) = self.unacked.front() {
            if group.wait_sent(id, Some(Duration::ZERO)).is_err() {
                break;
            }
            self.unacked.pop_front();
            if let Some(c) = self.chaos.as_mut() {
                c.ack(id);
            }
        }
        if let Some(c) = self.chaos.as_mut() {
            let holder = group.info().sequencer;
            if self.holder != Some(holder) {
                self.holder = Some(holder);
                c.holder(holder);
            }
        }
        Ok(())
    }

    fn record(&mut self, d: &GroupDelivery) -> Result<(), String> {
        let line = match &d.what {
            GroupRecord::Message { msg_id, payload } => {
                *self.counts.entry(d.sender).or_insert(0) += 1;
                if let Some(c) = self.chaos.as_mut() {
                    c.deliver(d.seq, d.sender, *msg_id, hash(payload));
                }
                format!("{} M {} {} {:016x}", d.seq, d.sender, msg_id, hash(payload))
            }
            GroupRecord::Joined(a) => format!("{} J {a}", d.seq),
            GroupRecord::Left(a) => format!("{} L {a}", d.seq),
            GroupRecord::Rebuilt {
                members, removed, ..
            } => {
                self.rebuilt = true;
                format!("{} R {:?} -{:?}", d.seq, members, removed)
            }
        };
        if let Some((id, members)) = self.view_of(d) {
            if let Some(c) = self.chaos.as_mut() {
                c.view(&id, &members);
            }
        }
        writeln!(self.log, "{line}").map_err(|e| e.to_string())?;
        self.log.flush().map_err(|e| e.to_string())
    }

    /// The view a membership record installs: its id and members. A sequencer group's joins
    /// and leaves are in the total order, so their sequence number names the view everywhere;
    /// a rebuilt view (every view of a layered group) carries its epoch. The list of a join or
    /// leave is known only from a rebuilt view on (before, the member knows only what `info`
    /// said, which may run ahead of the stream): empty until then.
    fn view_of(&mut self, d: &GroupDelivery) -> Option<(String, Vec<Address>)> {
        let id = match &d.what {
            GroupRecord::Message { .. } => return None,
            GroupRecord::Rebuilt { epoch, members, .. } => {
                self.members = Some(members.clone());
                format!("{}@{}", epoch.number, epoch.coordinator)
            }
            GroupRecord::Joined(a) => {
                if let Some(m) = self.members.as_mut().filter(|m| !m.contains(a)) {
                    m.push(*a);
                }
                format!("s{}", d.seq)
            }
            GroupRecord::Left(a) => {
                if let Some(m) = self.members.as_mut() {
                    m.retain(|x| x != a);
                }
                format!("s{}", d.seq)
            }
        };
        Some((id, self.members.clone().unwrap_or_default()))
    }
}
