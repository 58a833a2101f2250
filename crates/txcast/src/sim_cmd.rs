//! `txcast sim`: runs protocols in the deterministic simulator.
//!
//! Every kind takes the one option block [`Common`] (which seeds, threads, trace, fault
//! toggles), parsed once, and its own workload options.

use crate::progress::Progress;
use clap::{Args, Subcommand};
use txcast_sim::crmem_sim::{run_crmem, CrmemSimOptions};
use txcast_sim::engine_sim::{run_engine, EngineSimOptions};
use txcast_sim::frag_sim::{run_frag, FragSimOptions};
use txcast_sim::group_sim::{run_group, GroupSimOptions};
use txcast_sim::harness::{self, RunOptions, SweepNote, Violation};
use txcast_sim::link_sim::{run_link, LinkSimOptions};
use txcast_sim::module_sim::{run_module, ModuleSimOptions};
use txcast_sim::oracle_sim::{run_oracle, OracleSimOptions};
use txcast_sim::order_sim::{pack_from_name, run_order, OrderSimOptions};
use txcast_sim::raid_sim::{run_raid, RaidSimOptions};
use txcast_sim::rpc_sim::{run_rpc, RpcSimOptions};
use txcast_sim::schedule::GroupOptions;
use txcast_sim::txn_sim::{run_txn, TxnSimOptions};
use txcast_sim::vs_sim::{run_vs, VsSimOptions};

/// The options of `txcast sim`: one kind of component.
#[derive(Args, Debug)]
#[command(
    after_help = "--seed S runs one seed and prints its report (with --trace, its events; \
TXCAST_SIM_TRACE=1 or 2 likewise); otherwise --seeds N from --first F on --threads T, \
printing each failure and a summary. The workload sizes are clamped to the ranges given."
)]
pub struct SimArgs {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(Subcommand, Debug)]
enum Kind {
    /// The reliable link
    Link(LinkArgs),
    /// Groups (crashes, joins, leaves)
    Group(GroupArgs),
    /// RPC
    Rpc(RpcArgs),
    /// Long messages (fragmentation)
    Frag(FragArgs),
    /// Virtually synchronous groups
    Vs(VsArgs),
    /// Ordering protocols over virtually synchronous groups
    Order(OrderArgs),
    /// Extension modules
    Module(ModuleArgs),
    /// The oracle name server
    Oracle(OracleArgs),
    /// Transaction multicast
    Txn(TxnArgs),
    /// The engine: link table, packet rule, bounded ring
    Engine(EngineArgs),
    /// CRMem mirror: TpcB at the primary, failovers
    Crmem(CrmemArgs),
    /// Raid: DebitCredit, 2PC read-one-write-all-available with views, logs on simulated disks
    Raid(RaidArgs),
}

/// The options of `txcast sim link`.
#[derive(Args, Debug)]
struct LinkArgs {
    #[command(flatten)]
    common: Common,
    /// Nodes (at least 2)
    #[arg(long, default_value_t = LinkSimOptions::default().nodes)]
    nodes: usize,
    /// Messages per pair of nodes
    #[arg(long, default_value_t = LinkSimOptions::default().messages_per_pair)]
    messages: u32,
}

/// The options of `txcast sim group`.
#[derive(Args, Debug)]
struct GroupArgs {
    #[command(flatten)]
    common: Common,
    /// Members, 2 to 12
    #[arg(long, default_value_t = GroupSimOptions::default().group.members)]
    members: usize,
    /// Messages per member
    #[arg(long, default_value_t = GroupSimOptions::default().messages_per_member)]
    messages: u32,
}

/// The options of `txcast sim rpc`.
#[derive(Args, Debug)]
struct RpcArgs {
    #[command(flatten)]
    common: Common,
    /// Servers, 1 to 8
    #[arg(long, default_value_t = RpcSimOptions::default().servers)]
    servers: usize,
    /// Clients, 1 to 8
    #[arg(long, default_value_t = RpcSimOptions::default().clients)]
    clients: usize,
    /// Calls per client
    #[arg(long, default_value_t = RpcSimOptions::default().calls_per_client)]
    calls: u32,
}

/// The options of `txcast sim frag`.
#[derive(Args, Debug)]
struct FragArgs {
    #[command(flatten)]
    common: Common,
    /// Nodes, 2 to 8
    #[arg(long, default_value_t = FragSimOptions::default().nodes)]
    nodes: usize,
    /// Messages per node
    #[arg(long, default_value_t = FragSimOptions::default().messages_per_node)]
    messages: u32,
}

/// The options of `txcast sim vs`.
#[derive(Args, Debug)]
struct VsArgs {
    #[command(flatten)]
    common: Common,
    /// Members, 1 to 12
    #[arg(long, default_value_t = VsSimOptions::default().group.members)]
    members: usize,
    /// Casts per member
    #[arg(long, default_value_t = VsSimOptions::default().casts_per_member)]
    casts: u32,
}

/// The options of `txcast sim order`.
#[derive(Args, Debug)]
struct OrderArgs {
    #[command(flatten)]
    common: Common,
    /// Members, 2 to 12
    #[arg(long, default_value_t = OrderSimOptions::default().group.members)]
    members: usize,
    /// Messages per member
    #[arg(long, default_value_t = OrderSimOptions::default().messages_per_member)]
    messages: u32,
    /// The ordering protocol [default: drawn from the seed]
    #[arg(long, value_parser = ["totem", "total", "dynseq", "dynord"])]
    protocol: Option<String>,
    /// The packing [default: drawn from the seed]
    #[arg(long, value_parser = ["off", "adaptive", "fixed"])]
    pack: Option<String>,
    /// How stability is learned [default: drawn from the seed]
    #[arg(long, value_parser = ["piggyback", "pinwheel"])]
    stability: Option<String>,
}

/// The options of `txcast sim module`.
#[derive(Args, Debug)]
struct ModuleArgs {
    #[command(flatten)]
    common: Common,
    /// Nodes, 2 to 16
    #[arg(long, default_value_t = ModuleSimOptions::default().nodes)]
    nodes: usize,
    /// Messages per node
    #[arg(long, default_value_t = ModuleSimOptions::default().messages_per_node)]
    messages: u32,
}

/// The options of `txcast sim oracle`.
#[derive(Args, Debug)]
struct OracleArgs {
    #[command(flatten)]
    common: Common,
    /// Servers, 1 to 60
    #[arg(long, default_value_t = OracleSimOptions::default().servers)]
    servers: usize,
}

/// The options of `txcast sim txn`.
#[derive(Args, Debug)]
struct TxnArgs {
    #[command(flatten)]
    common: Common,
    /// Nodes, 2 to 64
    #[arg(long, default_value_t = TxnSimOptions::default().nodes)]
    nodes: usize,
    /// Transactions, 1 to 64
    #[arg(long, default_value_t = TxnSimOptions::default().txns)]
    txns: usize,
    /// Packets per node
    #[arg(long, default_value_t = TxnSimOptions::default().packets_per_node)]
    packets: u32,
}

/// The options of `txcast sim engine`.
#[derive(Args, Debug)]
struct EngineArgs {
    #[command(flatten)]
    common: Common,
    /// Nodes, 2 to 64
    #[arg(long, default_value_t = EngineSimOptions::default().nodes)]
    nodes: usize,
    /// Messages per pair of nodes
    #[arg(long, default_value_t = EngineSimOptions::default().messages_per_pair)]
    messages: u32,
}

/// The options of `txcast sim crmem`.
#[derive(Args, Debug)]
struct CrmemArgs {
    #[command(flatten)]
    common: Common,
    /// Nodes, 2 to 5
    #[arg(long, default_value_t = CrmemSimOptions::default().nodes)]
    nodes: usize,
    /// Transactions per client
    #[arg(long, default_value_t = CrmemSimOptions::default().txns_per_client)]
    txns: u32,
    /// The configuration: mirror (one primary) or symmetric (transactions on every node,
    /// 2 to 4 nodes)
    #[arg(long, value_enum, default_value_t = CrmemConfigArg::Mirror)]
    config: CrmemConfigArg,
    /// Mirror: the primary logs every commit to a simulated disk (group commit; a crash
    /// keeps what was synced and a random part of the rest), and every node may crash at
    /// once, the node whose disk reaches furthest restarting as primary from it
    #[arg(long)]
    disk: bool,
}

/// A CRMem configuration, for `txcast sim crmem --config`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CrmemConfigArg {
    Mirror,
    Symmetric,
}

/// The options of `txcast sim raid`.
#[derive(Args, Debug)]
struct RaidArgs {
    #[command(flatten)]
    common: Common,
    /// Sites, 1 to 8 (0: drawn from each seed, 1 to 4)
    #[arg(long, default_value_t = RaidSimOptions::default().sites)]
    sites: usize,
    /// Transactions per client
    #[arg(long, default_value_t = RaidSimOptions::default().txns_per_client)]
    txns: u32,
}

/// `txcast sim KIND`: the seeds asked for; the exit code says whether any failed.
pub fn run(args: SimArgs) -> i32 {
    match &args.kind {
        Kind::Link(a) => link(a),
        Kind::Group(a) => group(a),
        Kind::Rpc(a) => rpc(a),
        Kind::Frag(a) => frag(a),
        Kind::Vs(a) => vs(a),
        Kind::Order(a) => order(a),
        Kind::Module(a) => module(a),
        Kind::Oracle(a) => oracle(a),
        Kind::Txn(a) => txn(a),
        Kind::Engine(a) => engine(a),
        Kind::Crmem(a) => crmem(a),
        Kind::Raid(a) => raid(a),
    }
}

/// The options every kind shares.
#[derive(Args, Debug)]
struct Common {
    /// Replay this one seed and print its report
    #[arg(long)]
    seed: Option<u64>,
    /// Seeds to run
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed of the range
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Threads the seeds run on (1 to 64)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    /// Print the events of the seed (level 1, or 2 for more)
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, default_missing_value = "1")]
    trace: Option<u8>,
    /// A perfect network and no crashes (faults are otherwise drawn from the seed)
    #[arg(long)]
    no_faults: bool,
    /// No partitions of the network
    #[arg(long)]
    no_partitions: bool,
    /// No clogged paths
    #[arg(long)]
    no_clogs: bool,
}

impl Common {
    /// Whether faults, partitions and clogs are drawn from the seed.
    fn faults(&self) -> (bool, bool, bool) {
        (!self.no_faults, !self.no_partitions, !self.no_clogs)
    }

    /// The phases as by default, and these toggles.
    fn run(&self) -> RunOptions {
        let (faults, partitions, clogs) = self.faults();
        RunOptions {
            faults,
            partitions,
            clogs,
            ..RunOptions::default()
        }
    }

    /// A group simulator's options: `members`, and these toggles.
    fn group(&self, members: usize) -> GroupOptions {
        let (faults, partitions, clogs) = self.faults();
        GroupOptions {
            members,
            faults,
            partitions,
            clogs,
            ..GroupOptions::default()
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
        if let Some(level) = self.trace {
            harness::set_trace(level);
        }
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
        let progress = Progress::new(format!("sim {kind}"), self.seeds, "seeds");
        let failures = harness::sweep(
            kind,
            self.first,
            self.seeds,
            self.threads,
            |s| run(s).map(|_| ()),
            |n| match n {
                SweepNote::Failed(e) => progress.println(e),
                SweepNote::Done { done, failures } => {
                    progress.set(done, &format!("{failures} failures"))
                }
            },
        );
        progress.finish();
        println!(
            "{kind} simulation: {} seeds from {}, {failures} failures, {:.1} s",
            self.seeds,
            self.first,
            started.elapsed().as_secs_f64()
        );
        i32::from(failures > 0)
    }
}

fn link(a: &LinkArgs) -> i32 {
    let c = &a.common;
    let mut opts = LinkSimOptions {
        nodes: a.nodes.max(2),
        messages_per_pair: a.messages,
        ..LinkSimOptions::default()
    };
    opts.run = c.run();
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

fn module(a: &ModuleArgs) -> i32 {
    let c = &a.common;
    let mut opts = ModuleSimOptions {
        nodes: a.nodes.clamp(2, 16),
        messages_per_node: a.messages,
        ..ModuleSimOptions::default()
    };
    (opts.faults, opts.partitions, opts.clogs) = c.faults();
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

fn group(a: &GroupArgs) -> i32 {
    let c = &a.common;
    let opts = GroupSimOptions {
        group: c.group(a.members.clamp(2, 12)),
        messages_per_member: a.messages,
    };
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

fn rpc(a: &RpcArgs) -> i32 {
    let c = &a.common;
    let mut opts = RpcSimOptions {
        servers: a.servers.clamp(1, 8),
        clients: a.clients.clamp(1, 8),
        calls_per_client: a.calls,
        ..RpcSimOptions::default()
    };
    (opts.faults, opts.partitions, opts.clogs) = c.faults();
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

fn frag(a: &FragArgs) -> i32 {
    let c = &a.common;
    let mut opts = FragSimOptions {
        nodes: a.nodes.clamp(2, 8),
        messages_per_node: a.messages,
        ..FragSimOptions::default()
    };
    (opts.faults, opts.partitions, opts.clogs) = c.faults();
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

fn vs(a: &VsArgs) -> i32 {
    let c = &a.common;
    let opts = VsSimOptions {
        group: c.group(a.members.clamp(1, 12)),
        casts_per_member: a.casts,
    };
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

fn order(a: &OrderArgs) -> i32 {
    let c = &a.common;
    let mut opts = OrderSimOptions {
        group: c.group(a.members.clamp(2, 12)),
        messages_per_member: a.messages,
        ..OrderSimOptions::default()
    };
    if let Some(p) = &a.protocol {
        let Some(p) = txcast_proto::order::Protocol::from_name(p) else {
            eprintln!("unknown protocol {p} (totem, total, dynseq, dynord)");
            return 2;
        };
        opts.protocol = Some(p);
    }
    if let Some(p) = &a.pack {
        let Some(p) = pack_from_name(p) else {
            eprintln!("unknown packing {p} (off, adaptive, fixed)");
            return 2;
        };
        opts.pack = Some(p);
    }
    if let Some(s) = &a.stability {
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

fn oracle(a: &OracleArgs) -> i32 {
    let c = &a.common;
    let mut opts = OracleSimOptions {
        servers: a.servers.clamp(1, 60),
        ..OracleSimOptions::default()
    };
    (opts.faults, opts.partitions, opts.clogs) = c.faults();
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

fn txn(a: &TxnArgs) -> i32 {
    let c = &a.common;
    let mut opts = TxnSimOptions {
        nodes: a.nodes.clamp(2, 64),
        txns: a.txns.clamp(1, 64),
        packets_per_node: a.packets,
        ..TxnSimOptions::default()
    };
    (opts.faults, opts.partitions, opts.clogs) = c.faults();
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
            if r.keyed {
                println!(
                    "  keyed: {} packets replayed by the attacker, {} port restarts, {} packets refused by the replay guards",
                    r.replayed, r.restarts, r.replays_refused
                );
            }
        },
    )
}

fn engine(a: &EngineArgs) -> i32 {
    let c = &a.common;
    let mut opts = EngineSimOptions {
        nodes: a.nodes.clamp(2, 64),
        messages_per_pair: a.messages,
        ..EngineSimOptions::default()
    };
    opts.run = c.run();
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

fn crmem(a: &CrmemArgs) -> i32 {
    let c = &a.common;
    let mut opts = CrmemSimOptions {
        nodes: a.nodes.clamp(2, 5),
        txns_per_client: a.txns,
        symmetric: a.config == CrmemConfigArg::Symmetric,
        disk: a.disk,
        ..CrmemSimOptions::default()
    };
    if opts.disk && opts.symmetric {
        eprintln!("txcast sim crmem: --disk is for the mirror configuration");
        return 2;
    }
    opts.run = c.run();
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
            if r.disk_syncs > 0 {
                println!(
                    "  disk: {} syncs, {} crashes of every node",
                    r.disk_syncs, r.total_crashes
                );
            }
        },
    )
}

fn raid(a: &RaidArgs) -> i32 {
    let c = &a.common;
    let mut opts = RaidSimOptions {
        // 0 (the default) draws the number from each seed.
        sites: if a.sites == 0 { 0 } else { a.sites.clamp(1, 8) },
        txns_per_client: a.txns,
        ..RaidSimOptions::default()
    };
    opts.run = c.run();
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
