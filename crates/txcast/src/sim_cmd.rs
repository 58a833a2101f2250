//! `txcast sim`: runs protocols in the deterministic simulator.
//!
//! Every kind takes the one option block [`Common`] (which seeds, threads, trace, fault
//! toggles), parsed once, and its own workload options.

use crate::opt;
use txcast_sim::crmem_sim::{run_crmem, CrmemSimOptions};
use txcast_sim::engine_sim::{run_engine, EngineSimOptions};
use txcast_sim::frag_sim::{run_frag, FragSimOptions};
use txcast_sim::group_sim::{run_group, GroupSimOptions};
use txcast_sim::harness::{self, Violation};
use txcast_sim::link_sim::{run_link, LinkSimOptions};
use txcast_sim::module_sim::{run_module, ModuleSimOptions};
use txcast_sim::oracle_sim::{run_oracle, OracleSimOptions};
use txcast_sim::order_sim::{pack_from_name, run_order, OrderSimOptions};
use txcast_sim::raid_sim::{run_raid, RaidSimOptions};
use txcast_sim::rpc_sim::{run_rpc, RpcSimOptions};
use txcast_sim::txn_sim::{run_txn, TxnSimOptions};
use txcast_sim::vs_sim::{run_vs, VsSimOptions};

const USAGE: &str = "usage: txcast sim KIND [--seed S | --seeds N [--first F] [--threads T]] [--trace [2]] [--no-faults] [--no-partitions] [--no-clogs] [KIND OPTIONS]\n\
     \x20 link    [--nodes N] [--messages N]\n\
     \x20 group   [--members N] [--messages N]\n\
     \x20 rpc     [--servers N] [--clients N] [--calls N]\n\
     \x20 frag    [--nodes N] [--messages N]\n\
     \x20 vs      [--members N] [--casts N]\n\
     \x20 order   [--protocol totem|total|dynseq|dynord] [--pack off|adaptive|fixed] [--stability piggyback|pinwheel] [--members N] [--messages N]\n\
     \x20 module  [--nodes N] [--messages N]\n\
     \x20 oracle  [--servers N]\n\
     \x20 txn     [--nodes N] [--txns N] [--packets N]   (transaction multicast)\n\
     \x20 engine  [--nodes N] [--messages N]   (link table, packet rule, bounded ring)\n\
     \x20 crmem   [--nodes N] [--txns N]   (CRMem mirror: TpcB at the primary, failovers)\n\
     \x20 raid    [--sites N] [--txns N]   (Raid: DebitCredit, 2PC read-one-write-all-available with views, logs on simulated disks)\n\
     \x20 --seed S runs one seed and prints its report (with --trace, its events; TXCAST_SIM_TRACE=1 or 2 likewise);\n\
     \x20 --seeds N (default 1000) from --first F (default 0) on --threads T (default 1) prints each failure and a summary";

pub fn run(args: &[String]) -> i32 {
    let Some(kind) = args.first().map(String::as_str) else {
        eprintln!("{USAGE}");
        return 2;
    };
    let args = &args[1..];
    let c = Common::parse(args);
    match kind {
        "link" => link(args, &c),
        "group" => group(args, &c),
        "rpc" => rpc(args, &c),
        "frag" => frag(args, &c),
        "vs" => vs(args, &c),
        "order" => order(args, &c),
        "module" => module(args, &c),
        "oracle" => oracle(args, &c),
        "txn" => txn(args, &c),
        "engine" => engine(args, &c),
        "crmem" => crmem(args, &c),
        "raid" => raid(args, &c),
        _ => {
            eprintln!("{USAGE}");
            2
        }
    }
}

/// The options every kind shares.
struct Common {
    /// Replay this one seed.
    seed: Option<u64>,
    seeds: u64,
    first: u64,
    threads: u64,
    /// Faults drawn from the seed (`--no-faults`: a perfect network, no crashes).
    faults: bool,
    partitions: bool,
    clogs: bool,
}

impl Common {
    fn parse(args: &[String]) -> Common {
        if flag(args, "--trace") {
            harness::set_trace(opt::<u8>(args, "--trace").unwrap_or(1));
        }
        Common {
            seed: opt(args, "--seed"),
            seeds: opt(args, "--seeds").unwrap_or(1000),
            first: opt(args, "--first").unwrap_or(0),
            threads: opt::<u64>(args, "--threads").unwrap_or(1).clamp(1, 64),
            faults: !flag(args, "--no-faults"),
            partitions: !flag(args, "--no-partitions"),
            clogs: !flag(args, "--no-clogs"),
        }
    }

    /// `--seed S`: runs it and prints its report with `print`; otherwise runs the range of
    /// seeds on the threads asked for. The exit code says whether any failed.
    fn drive<R>(
        &self,
        kind: &str,
        run: impl Fn(u64) -> Result<R, Violation> + Sync,
        print: impl FnOnce(&R),
    ) -> i32 {
        if let Some(seed) = self.seed {
            return match run(seed) {
                Ok(r) => {
                    println!("seed {seed}: ok");
                    print(&r);
                    0
                }
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            };
        }
        let started = std::time::Instant::now();
        let failures = harness::sweep(kind, self.first, self.seeds, self.threads, |s| {
            run(s).map(|_| ())
        });
        println!(
            "{kind} simulation: {} seeds from {}, {failures} failures, {:.1} s",
            self.seeds,
            self.first,
            started.elapsed().as_secs_f64()
        );
        i32::from(failures > 0)
    }
}

fn link(args: &[String], c: &Common) -> i32 {
    let mut opts = LinkSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.max(2);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_pair = m;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "link",
        |s| run_link(s, &opts),
        |r| {
            println!("  faults:  {:?}", r.faults);
            println!("  network: {:?}", r.net);
            println!("  links:   {:?}", r.links);
            println!(
                "  delivered {} messages; virtual end {:.3} s; trace digest {:016x}",
                r.delivered,
                r.end_ns as f64 / 1e9,
                r.digest
            );
        },
    )
}

fn module(args: &[String], c: &Common) -> i32 {
    let mut opts = ModuleSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 16);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_node = m;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "module",
        |s| run_module(s, &opts),
        |r| {
            println!("  faults:  {:?}", r.faults);
            println!("  network: {:?}", r.net);
            println!("  hosts:   {:?}", r.hosts);
            println!(
                "  {} restarts; delivered {} control messages; virtual end {:.3} s; trace digest {:016x}",
                r.restarts,
                r.delivered,
                r.end_ns as f64 / 1e9,
                r.digest
            );
        },
    )
}

fn group(args: &[String], c: &Common) -> i32 {
    let mut opts = GroupSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--members") {
        opts.members = n.clamp(2, 12);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_member = m;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "group",
        |s| run_group(s, &opts),
        |r| {
            print_setup(&r.config, &r.faults, &r.net);
            println!(
                "  {} sent, {} completed, {} delivered; {} crashes, {} leaves, {} joins, {} partitions, {} rebuilds; {} members at the end, last seq {}; trace digest {:016x}",
                r.sent, r.completed, r.delivered, r.crashes, r.leaves, r.joins, r.partitions, r.resets,
                r.final_members, r.highest_seq, r.digest
            );
        },
    )
}

fn rpc(args: &[String], c: &Common) -> i32 {
    let mut opts = RpcSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--servers") {
        opts.servers = n.clamp(1, 8);
    }
    if let Some(n) = opt::<usize>(args, "--clients") {
        opts.clients = n.clamp(1, 8);
    }
    if let Some(n) = opt::<u32>(args, "--calls") {
        opts.calls_per_client = n;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "rpc",
        |s| run_rpc(s, &opts),
        |r| {
            println!("  faults:  {:?}", r.faults);
            println!("  network: {:?}", r.net);
            println!("  clients: {:?}", r.client);
            println!("  servers: {:?}", r.server);
            println!(
                "  {} calls: {} complete, {} out of time; {} executions ({} again after a server restart); {} crashes; virtual end {:.3} s; trace digest {:016x}",
                r.calls,
                r.complete,
                r.timed_out,
                r.executions,
                r.executed_after_restart,
                r.crashes,
                r.end_ns as f64 / 1e9,
                r.digest
            );
        },
    )
}

fn frag(args: &[String], c: &Common) -> i32 {
    let mut opts = FragSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 8);
    }
    if let Some(n) = opt::<u32>(args, "--messages") {
        opts.messages_per_node = n;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "frag",
        |s| run_frag(s, &opts),
        |r| {
            println!("  faults:   {:?}", r.faults);
            println!("  network:  {:?}", r.net);
            println!("  senders:  {:?}", r.sender);
            println!("  receivers: {:?}", r.receiver);
            println!(
                "  {} messages sent, {} delivered, {} transfers failed; {} crashes; virtual end {:.3} s; trace digest {:016x}",
                r.sent,
                r.delivered,
                r.failed,
                r.crashes,
                r.end_ns as f64 / 1e9,
                r.digest
            );
        },
    )
}

fn vs(args: &[String], c: &Common) -> i32 {
    let mut opts = VsSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--members") {
        opts.members = n.clamp(1, 12);
    }
    if let Some(m) = opt::<u32>(args, "--casts") {
        opts.casts_per_member = m;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "vs",
        |s| run_vs(s, &opts),
        |r| {
            print_setup(&r.config, &r.faults, &r.net);
            println!(
                "  {} casts ({} during flushes), {} delivered; {} crashes, {} leaves, {} joins, {} expulsions, {} partitions, {} clogs",
                r.casts, r.flush_casts, r.delivered, r.crashes, r.leaves, r.joins, r.expulsions, r.partitions, r.clogs
            );
            println!(
                "  {} views, the last number {} with {} members{}; virtual end {:.3} s; trace digest {:016x}",
                r.views,
                r.final_view,
                r.final_members,
                if r.blocked { " (blocked: a majority of the newest view is gone)" } else { "" },
                r.end_ns as f64 / 1e9,
                r.digest
            );
        },
    )
}

fn order(args: &[String], c: &Common) -> i32 {
    let mut opts = OrderSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--members") {
        opts.members = n.clamp(2, 12);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_member = m;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    if let Some(p) = opt::<String>(args, "--protocol") {
        let Some(p) = txcast_proto::order::Protocol::from_name(&p) else {
            eprintln!("unknown protocol {p} (totem, total, dynseq, dynord)");
            return 2;
        };
        opts.protocol = Some(p);
    }
    if let Some(p) = opt::<String>(args, "--pack") {
        let Some(p) = pack_from_name(&p) else {
            eprintln!("unknown packing {p} (off, adaptive, fixed)");
            return 2;
        };
        opts.pack = Some(p);
    }
    if let Some(s) = opt::<String>(args, "--stability") {
        opts.stability = Some(match s.as_str() {
            "piggyback" => txcast_proto::vsync::Stability::Piggyback,
            "pinwheel" => txcast_proto::vsync::Stability::Pinwheel,
            _ => {
                eprintln!("unknown stability {s} (piggyback, pinwheel)");
                return 2;
            }
        });
    }
    c.drive(
        "order",
        |s| run_order(s, &opts),
        |r| {
            print_setup(&r.config, &r.faults, &r.net);
            println!(
                "  {} sent, {} completed, {} delivered; {} crashes, {} expulsions, {} leaves, {} joins, {} partitions, {} clogs; {} views, {} members at the end ({} cut off){}; trace digest {:016x}",
                r.sent, r.completed, r.delivered, r.crashes, r.expulsions, r.leaves, r.joins,
                r.partitions, r.clogs, r.views, r.final_members, r.orphans,
                if r.blocked { " (blocked: a majority of the newest view is gone)" } else { "" },
                r.digest
            );
        },
    )
}

fn oracle(args: &[String], c: &Common) -> i32 {
    let mut opts = OracleSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--servers") {
        opts.servers = n.clamp(1, 60);
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "oracle",
        |s| run_oracle(s, &opts),
        |r| {
            println!("  faults:  {}", r.faults);
            println!("  network: {:?}", r.net);
            println!(
                "  {} requests: {} registrations taken, {} refused, {} malformed; {} notifications; {} failed entries evicted; {} oracle restarts; virtual end {:.3} s; trace digest {:016x}",
                r.requests, r.registered, r.refused, r.malformed, r.notifications, r.evicted,
                r.oracle_restarts, r.end_ns as f64 / 1e9, r.digest
            );
        },
    )
}

fn txn(args: &[String], c: &Common) -> i32 {
    let mut opts = TxnSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 64);
    }
    if let Some(n) = opt::<usize>(args, "--txns") {
        opts.txns = n.clamp(1, 64);
    }
    if let Some(n) = opt::<u32>(args, "--packets") {
        opts.packets_per_node = n;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "txn",
        |s| run_txn(s, &opts),
        |r| {
            println!("  faults:  {}", r.faults);
            println!("  network: {:?}", r.net);
            println!(
                "  {} messages multicast, {} taken by members, {} packets dropped at non-members; {} damaged or forged packets sent, {} copies refused; virtual end {:.3} s; trace digest {:016x}",
                r.sent, r.taken, r.not_joined, r.damaged, r.refused, r.end_ns as f64 / 1e9, r.digest
            );
        },
    )
}

fn engine(args: &[String], c: &Common) -> i32 {
    let mut opts = EngineSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 64);
    }
    if let Some(n) = opt::<u32>(args, "--messages") {
        opts.messages_per_pair = n;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "engine",
        |s| run_engine(s, &opts),
        |r| {
            println!("  faults:  {:?}", r.faults);
            println!("  network: {:?}", r.net);
            println!("  links:   {:?}", r.links);
            println!(
                "  ring of {}: {} messages delivered, {} deliveries held back by a full ring; {} restarts; intruder {}; {} packets refused for the link limit, {} misaddressed; virtual end {:.3} s; trace digest {:016x}",
                r.ring_capacity, r.delivered, r.refused, r.restarts, r.intruder, r.link_limit,
                r.misaddressed, r.end_ns as f64 / 1e9, r.digest
            );
        },
    )
}

fn crmem(args: &[String], c: &Common) -> i32 {
    let mut opts = CrmemSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 5);
    }
    if let Some(n) = opt::<u32>(args, "--txns") {
        opts.txns_per_client = n;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "crmem",
        |s| run_crmem(s, &opts),
        |r| {
            println!("  faults:  {:?}", r.faults);
            println!("  network: {:?}", r.net);
            println!("  nodes:   {:?}", r.nodes);
            println!(
                "  {} clients: {} commits, {} aborted on purpose, {} lock timeouts, {} audits; {} restarts ({} failovers), {} crashes skipped; virtual end {:.3} s; trace digest {:016x}",
                r.clients, r.committed, r.aborted_on_purpose, r.timeouts, r.audits, r.restarts,
                r.failovers, r.skipped_crashes, r.end_ns as f64 / 1e9, r.digest
            );
        },
    )
}

fn raid(args: &[String], c: &Common) -> i32 {
    let mut opts = RaidSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--sites") {
        opts.sites = n.clamp(1, 8);
    }
    if let Some(n) = opt::<u32>(args, "--txns") {
        opts.txns_per_client = n;
    }
    (opts.faults, opts.partitions, opts.clogs) = (c.faults, c.partitions, c.clogs);
    c.drive(
        "raid",
        |s| run_raid(s, &opts),
        |r| {
            println!("  faults:   {:?}", r.faults);
            println!("  network:  {:?}", r.net);
            println!("  counters: {:?}", r.counters);
            println!(
                "  {} sites, {} clients: {} transfers committed, {} given up, {} lost with their site; {} restarts; virtual end {:.3} s; trace digest {:016x}",
                r.sites, r.clients, r.committed, r.given_up, r.lost_in_crash, r.restarts,
                r.end_ns as f64 / 1e9, r.digest
            );
        },
    )
}

/// Whether the bare flag `name` was given.
fn flag(args: &[String], name: &str) -> bool {
    args.iter().any(|a| a == name)
}

/// The lines every group simulator prints first for one seed.
fn print_setup(
    config: &dyn std::fmt::Display,
    faults: &dyn std::fmt::Display,
    net: &dyn std::fmt::Debug,
) {
    println!("  group:   {config}");
    println!("  faults:  {faults}");
    println!("  network: {net:?}");
}
