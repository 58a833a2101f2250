//! `txcast sim`: runs protocols in the deterministic simulator.

use crate::opt;
use txcast_sim::frag_sim::{run_frag, FragSimOptions};
use txcast_sim::group_sim::{run_group, GroupSimOptions};
use txcast_sim::link_sim::{run_link, LinkSimOptions};
use txcast_sim::module_sim::{run_module, ModuleSimOptions};
use txcast_sim::order_sim::{pack_from_name, run_order, OrderSimOptions};
use txcast_sim::rpc_sim::{run_rpc, RpcSimOptions};
use txcast_sim::vs_sim::{run_vs, VsSimOptions};

pub fn run(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("link") => link(&args[1..]),
        Some("group") => group(&args[1..]),
        Some("rpc") => rpc(&args[1..]),
        Some("frag") => frag(&args[1..]),
        Some("vs") => vs(&args[1..]),
        Some("order") => order(&args[1..]),
        Some("module") => module(&args[1..]),
        _ => {
            eprintln!(
                "usage: txcast sim link [--seed S | --seeds N [--first F]] [--nodes N] [--messages N]\n\
                 \x20      txcast sim group [--seed S | --seeds N [--first F] [--threads T]] [--members N] [--messages N] [--no-partitions] [--no-clogs]\n\
                 \x20      txcast sim rpc [--seed S | --seeds N [--first F]] [--servers N] [--clients N] [--calls N]\n\
                 \x20      txcast sim frag [--seed S | --seeds N [--first F]] [--nodes N] [--messages N]\n\
                 \x20      txcast sim vs [--seed S | --seeds N [--first F]] [--members N] [--casts N] [--no-partitions] [--no-clogs]\n\
                 \x20      txcast sim order [--seed S | --seeds N [--first F] [--threads T]] [--protocol totem|total|dynseq|dynord] [--pack off|adaptive|fixed] [--stability piggyback|pinwheel] [--members N] [--messages N] [--no-partitions] [--no-clogs]\n\
                 \x20      txcast sim module [--seed S | --seeds N [--first F] [--threads T]] [--nodes N] [--messages N]\n\
                 \x20 TXCAST_SIM_TRACE=1 with --seed prints the run's events"
            );
            2
        }
    }
}

fn link(args: &[String]) -> i32 {
    let mut opts = LinkSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.max(2);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_pair = m;
    }
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_link(seed, &opts), |r| {
            println!("  faults:  {:?}", r.faults);
            println!("  network: {:?}", r.net);
            println!("  links:   {:?}", r.links);
            println!(
                "  delivered {} messages; virtual end {:.3} s; trace digest {:016x}",
                r.delivered,
                r.end_ns as f64 / 1e9,
                r.digest
            );
        });
    }
    let seeds = opt::<u64>(args, "--seeds").unwrap_or(1000);
    let first = opt::<u64>(args, "--first").unwrap_or(0);
    let started = std::time::Instant::now();
    let mut failures = 0u64;
    for (k, seed) in (first..first + seeds).enumerate() {
        if let Err(e) = run_link(seed, &opts) {
            failures += 1;
            eprintln!("{e}");
        }
        if (k + 1) % 1000 == 0 {
            eprintln!(
                "  {} / {seeds} seeds, {failures} failures, {:.0} s",
                k + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "link simulation: {seeds} seeds from {first}, {failures} failures, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    i32::from(failures > 0)
}

fn module(args: &[String]) -> i32 {
    let mut opts = ModuleSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 16);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_node = m;
    }
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_module(seed, &opts), |r| {
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
        });
    }
    let threads = opt::<u64>(args, "--threads").unwrap_or(1).clamp(1, 64);
    let opts = &opts;
    seed_range_threads(args, "module", threads, |seed| {
        run_module(seed, opts)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

fn group(args: &[String]) -> i32 {
    let mut opts = GroupSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--members") {
        opts.members = n.clamp(2, 12);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_member = m;
    }
    opts.partitions &= !flag(args, "--no-partitions");
    opts.clogs &= !flag(args, "--no-clogs");
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_group(seed, &opts), |r| {
            print_setup(&r.config, &r.faults, &r.net);
            println!(
                "  {} sent, {} completed, {} delivered; {} crashes, {} leaves, {} joins, {} partitions, {} rebuilds; {} members at the end, last seq {}; trace digest {:016x}",
                r.sent, r.completed, r.delivered, r.crashes, r.leaves, r.joins, r.partitions, r.resets,
                r.final_members, r.highest_seq, r.digest
            );
        });
    }
    let threads = opt::<u64>(args, "--threads").unwrap_or(1).clamp(1, 64);
    let opts = &opts;
    seed_range_threads(args, "group", threads, |seed| {
        run_group(seed, opts).map(|_| ()).map_err(|e| e.to_string())
    })
}

fn rpc(args: &[String]) -> i32 {
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
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_rpc(seed, &opts), |r| {
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
        });
    }
    seed_range(args, "rpc", |seed| run_rpc(seed, &opts).map(|_| ()))
}

fn frag(args: &[String]) -> i32 {
    let mut opts = FragSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--nodes") {
        opts.nodes = n.clamp(2, 8);
    }
    if let Some(n) = opt::<u32>(args, "--messages") {
        opts.messages_per_node = n;
    }
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_frag(seed, &opts), |r| {
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
        });
    }
    seed_range(args, "frag", |seed| run_frag(seed, &opts).map(|_| ()))
}

fn vs(args: &[String]) -> i32 {
    let mut opts = VsSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--members") {
        opts.members = n.clamp(1, 12);
    }
    if let Some(m) = opt::<u32>(args, "--casts") {
        opts.casts_per_member = m;
    }
    opts.partitions &= !flag(args, "--no-partitions");
    opts.clogs &= !flag(args, "--no-clogs");
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_vs(seed, &opts), |r| {
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
        });
    }
    seed_range(args, "vs", |seed| {
        run_vs(seed, &opts).map(|_| ()).map_err(|v| v.to_string())
    })
}

fn order(args: &[String]) -> i32 {
    let mut opts = OrderSimOptions::default();
    if let Some(n) = opt::<usize>(args, "--members") {
        opts.members = n.clamp(2, 12);
    }
    if let Some(m) = opt::<u32>(args, "--messages") {
        opts.messages_per_member = m;
    }
    opts.partitions &= !flag(args, "--no-partitions");
    opts.clogs &= !flag(args, "--no-clogs");
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
    if let Some(seed) = opt::<u64>(args, "--seed") {
        return one_seed(seed, run_order(seed, &opts), |r| {
            print_setup(&r.config, &r.faults, &r.net);
            println!(
                "  {} sent, {} completed, {} delivered; {} crashes, {} expulsions, {} leaves, {} joins, {} partitions, {} clogs; {} views, {} members at the end ({} cut off){}; trace digest {:016x}",
                r.sent, r.completed, r.delivered, r.crashes, r.expulsions, r.leaves, r.joins,
                r.partitions, r.clogs, r.views, r.final_members, r.orphans,
                if r.blocked { " (blocked: a majority of the newest view is gone)" } else { "" },
                r.digest
            );
        });
    }
    let threads = opt::<u64>(args, "--threads").unwrap_or(1).clamp(1, 64);
    let opts = &opts;
    seed_range_threads(args, "order", threads, |seed| {
        run_order(seed, opts).map(|_| ()).map_err(|e| e.to_string())
    })
}

/// [`seed_range`] on `threads` threads (seeds interleaved).
fn seed_range_threads(
    args: &[String],
    name: &str,
    threads: u64,
    run: impl Fn(u64) -> Result<(), String> + Sync,
) -> i32 {
    if threads <= 1 {
        return seed_range(args, name, run);
    }
    let seeds = opt::<u64>(args, "--seeds").unwrap_or(1000);
    let first = opt::<u64>(args, "--first").unwrap_or(0);
    let started = std::time::Instant::now();
    let done = std::sync::atomic::AtomicU64::new(0);
    let failures = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (run, done, failures) = (&run, &done, &failures);
            scope.spawn(move || {
                let mut seed = first + t;
                while seed < first + seeds {
                    let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed))) {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e),
                        Err(_) => Some(format!(
                            "{name} simulation seed {seed}: panicked\n  replay: cargo run --release -- sim {name} --seed {seed}"
                        )),
                    };
                    if let Some(e) = err {
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        eprintln!("{e}");
                    }
                    let k = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    if k % 1000 == 0 {
                        eprintln!(
                            "  {k} / {seeds} seeds, {} failures, {:.0} s",
                            failures.load(std::sync::atomic::Ordering::Relaxed),
                            started.elapsed().as_secs_f64()
                        );
                    }
                    seed += threads;
                }
            });
        }
    });
    let failures = failures.into_inner();
    println!(
        "{name} simulation: {seeds} seeds from {first}, {failures} failures, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    i32::from(failures > 0)
}

/// The report of one seed's run (`--seed S`), printed by `print`, or its failure; the exit
/// code.
fn one_seed<R, E: std::fmt::Display>(seed: u64, run: Result<R, E>, print: impl FnOnce(&R)) -> i32 {
    match run {
        Ok(r) => {
            println!("seed {seed}: ok");
            print(&r);
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Runs `--seeds N` seeds from `--first F` (defaults 1000 and 0) of the simulation `name`,
/// printing each failure (a panic counts) and a summary; the exit code says whether any failed.
fn seed_range(args: &[String], name: &str, run: impl Fn(u64) -> Result<(), String>) -> i32 {
    let seeds = opt::<u64>(args, "--seeds").unwrap_or(1000);
    let first = opt::<u64>(args, "--first").unwrap_or(0);
    let started = std::time::Instant::now();
    let mut failures = 0u64;
    for (k, seed) in (first..first + seeds).enumerate() {
        let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed))) {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(format!(
                "{name} simulation seed {seed}: panicked\n  replay: cargo run --release -- sim {name} --seed {seed}"
            )),
        };
        if let Some(e) = err {
            failures += 1;
            eprintln!("{e}");
        }
        if (k + 1) % 1000 == 0 {
            eprintln!(
                "  {} / {seeds} seeds, {failures} failures, {:.0} s",
                k + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "{name} simulation: {seeds} seeds from {first}, {failures} failures, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    i32::from(failures > 0)
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
