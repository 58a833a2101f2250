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

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};
use txcast_port::GroupSpec;
use txcast_port::{Group, GroupRecord, Port, PortConfig};
use txcast_proto::group::{GroupConfig, Method, MinMembers};
use txcast_proto::order::{OrderConfig, Protocol};
use txcast_proto::pack::PackMode;
use txcast_proto::vsync::VsConfig;
use txcast_proto::Address;

const GROUP_TYPE: u16 = 2;

fn hash(p: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in p {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
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
}

pub fn member(args: &MemberArgs) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("group member: {e}");
            1
        }
    }
}

fn run(args: &MemberArgs) -> Result<(), String> {
    let (instance, site, members, messages) =
        (args.instance, args.site, args.members, args.messages);
    let resilience = args.resilience;
    let deadline = Duration::from_millis(args.deadline_ms);
    let log_path = &args.deliveries;
    let expect_rebuild = args.expect_rebuild;
    let pace = Duration::from_micros(args.pace_us);
    let started = Instant::now();
    let me = Address::new(instance, site, GROUP_TYPE, 0);
    let port = Port::open(me, PortConfig::default()).map_err(|e| e.to_string())?;
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
    let cfg: GroupSpec = match protocol.as_str() {
        "sequencer" => GroupConfig {
            group: 11,
            resilience,
            method: Method::BySize {
                bb_from_bytes: 1024,
            },
            heartbeat_interval: Duration::from_millis(20),
            silence_timeout: Duration::from_millis(300),
            probe_interval: Duration::from_millis(50),
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
                heartbeat_interval: Duration::from_millis(20),
                silence_timeout: Duration::from_millis(300),
                flush_timeout: Duration::from_millis(100),
                ..VsConfig::default()
            },
            ..OrderConfig::default()
        }
        .into(),
    };
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
    // Wait until everyone is in, logging what arrives meanwhile.
    let mut counts: HashMap<Address, u64> = HashMap::new();
    let mut rebuilt = false;
    while group.info().members.len() < members {
        if started.elapsed() > deadline {
            return Err("the group never filled".into());
        }
        drain(
            &group,
            &mut log,
            &mut counts,
            &mut rebuilt,
            Duration::from_millis(5),
        )?;
    }
    let mut sent = 0u64;
    let mut next_send = Instant::now();
    loop {
        if started.elapsed() > deadline {
            log.flush().ok();
            return Err(format!(
                "deadline: sent {sent}, delivered {:?}, members {:?}",
                counts,
                group.info().members
            ));
        }
        if sent < messages && Instant::now() >= next_send {
            let payload = format!("{site}:{sent}");
            match group.send_async(payload.as_bytes()) {
                Ok(_) => sent += 1,
                Err(e) => eprintln!("site {site}: send: {e}"),
            }
            next_send = Instant::now() + pace;
        }
        drain(
            &group,
            &mut log,
            &mut counts,
            &mut rebuilt,
            Duration::from_millis(1),
        )?;
        let info = group.info();
        let done = sent == messages
            && group.sends_pending() == 0
            && (!expect_rebuild || rebuilt)
            && info
                .members
                .iter()
                .all(|m| counts.get(m).copied().unwrap_or(0) >= messages);
        if done {
            log.flush().map_err(|e| e.to_string())?;
            // Stay a little so the others can still fetch from us.
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                drain(
                    &group,
                    &mut log,
                    &mut counts,
                    &mut rebuilt,
                    Duration::from_millis(5),
                )?;
            }
            log.flush().map_err(|e| e.to_string())?;
            return Ok(());
        }
    }
}

fn drain(
    group: &Group,
    log: &mut impl Write,
    counts: &mut HashMap<Address, u64>,
    rebuilt: &mut bool,
    wait: Duration,
) -> Result<(), String> {
    let mut wait = wait;
    loop {
        let d = match group.receive(Some(wait)) {
            Ok(d) => d,
            Err(txcast_port::GroupCallError::Timeout) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        wait = Duration::ZERO;
        let line = match &d.what {
            GroupRecord::Message { msg_id, payload } => {
                *counts.entry(d.sender).or_insert(0) += 1;
                format!("{} M {} {} {:016x}", d.seq, d.sender, msg_id, hash(payload))
            }
            GroupRecord::Joined(a) => format!("{} J {a}", d.seq),
            GroupRecord::Left(a) => format!("{} L {a}", d.seq),
            GroupRecord::Rebuilt { members, removed } => {
                *rebuilt = true;
                format!("{} R {:?} -{:?}", d.seq, members, removed)
            }
        };
        writeln!(log, "{line}").map_err(|e| e.to_string())?;
        log.flush().map_err(|e| e.to_string())?;
    }
}
