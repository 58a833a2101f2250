//! `txcast stat`: the ports open on this host, read from their shared-memory segments: the
//! ring's counters, and the counters of the port's links to other hosts as its engine last
//! published them there.

use std::path::PathBuf;
use txcast_port::shm::{reclaim_dead, survey};
use txcast_port::ClusterConfig;
use txcast_proto::Address;

/// The options of `txcast stat`.
#[derive(clap::Args, Debug)]
pub struct StatArgs {
    /// The cluster file (its segment directory is where the rings are) [default: the
    /// built-in cluster]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One JSON object per port on stdout instead of the table (its link counters under
    /// `links`)
    #[arg(long)]
    pub json: bool,
    /// First remove the rings whose owner process is dead (or that were closed and left
    /// behind), and the half-built ones of dead processes; says how many on stderr
    #[arg(long)]
    pub reclaim: bool,
}

pub fn run(args: &StatArgs) -> i32 {
    let cluster = match &args.config {
        Some(path) => match ClusterConfig::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("txcast stat: {e}");
                return 2;
            }
        },
        None => ClusterConfig::default(),
    };
    let json = args.json;
    let dir = cluster.segment_dir();
    if args.reclaim {
        match reclaim_dead(&dir) {
            Ok(n) => eprintln!("txcast stat: reclaimed {n} ring(s) of dead owners"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("txcast stat: reclaimed 0 ring(s) of dead owners")
            }
            Err(e) => {
                eprintln!("txcast stat: reclaim in {}: {e}", dir.display());
                return 1;
            }
        }
    }
    let found = match survey(&dir) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("txcast stat: {}: {e}", dir.display());
            return 1;
        }
    };
    if !json {
        println!(
            "ports of cluster {} on this host ({}): {}",
            cluster.cluster,
            dir.display(),
            found.len()
        );
        println!(
            "{:<16} {:>8} {:>6} {:>7} {:>6} {:>7} {:>10} {:>8} {:>8} {:>7} {:>8} {:>10} {:>10} {:>8} {:>8} {:>6} {:>6}",
            "address",
            "owner",
            "state",
            "slots",
            "bytes",
            "queued",
            "delivered",
            "full",
            "wakeups",
            "parks",
            "bad",
            "link sent",
            "delivered",
            "retrans",
            "timeouts",
            "naks",
            "dups"
        );
    }
    for s in &found {
        let name = s
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".ring"))
            .and_then(|n| n.parse::<Address>().ok())
            .map_or_else(|| s.path.display().to_string(), |a| a.to_string());
        let state = if s.closed {
            "closed"
        } else if s.owner_alive {
            "open"
        } else {
            "dead"
        };
        let c = &s.counters;
        let l = &s.links;
        if json {
            let links = serde_json::json!({
                "messages_sent": l.messages_sent,
                "messages_delivered": l.messages_delivered,
                "retransmitted": l.retransmitted,
                "rto_fired": l.rto_fired,
                "naks_sent": l.naks_sent,
                "naks_received": l.naks_received,
                "acks_sent": l.acks_sent,
                "duplicates_dropped": l.duplicates_dropped,
                "beyond_window_dropped": l.beyond_window_dropped,
                "stale_incarnation_dropped": l.stale_incarnation_dropped,
                "peer_restarts": l.peer_restarts,
                "unreachable_declared": l.unreachable_declared,
            });
            let line = serde_json::json!({
                "address": name,
                "owner_pid": s.owner_pid,
                "state": state,
                "slots": s.slot_count,
                "slot_bytes": s.slot_bytes,
                "queued": s.queued,
                "delivered": c.delivered,
                "full_rejections": c.full_rejections,
                "wakeups": c.wakeups,
                "parks": c.parks,
                "dropped_bad": c.dropped_bad,
                "links": links,
            });
            println!("{line}");
        } else {
            println!(
                "{:<16} {:>8} {:>6} {:>7} {:>6} {:>7} {:>10} {:>8} {:>8} {:>7} {:>8} {:>10} {:>10} {:>8} {:>8} {:>6} {:>6}",
                name,
                s.owner_pid,
                state,
                s.slot_count,
                s.slot_bytes,
                s.queued,
                c.delivered,
                c.full_rejections,
                c.wakeups,
                c.parks,
                c.dropped_bad,
                l.messages_sent,
                l.messages_delivered,
                l.retransmitted,
                l.rto_fired,
                l.naks_received,
                l.duplicates_dropped
            );
        }
    }
    0
}
