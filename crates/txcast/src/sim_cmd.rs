//! `txcast sim`: runs protocols in the deterministic simulator.

use crate::opt;
use txcast_sim::link_sim::{run_link, LinkSimOptions};

pub fn run(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("link") => link(&args[1..]),
        _ => {
            eprintln!(
                "usage: txcast sim link [--seed S | --seeds N [--first F]] [--nodes N] [--messages N]\n\
                 \x20 TXCAST_SIM_TRACE=1 with --seed prints restarts and out-of-sequence deliveries"
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
        return match run_link(seed, &opts) {
            Ok(r) => {
                println!("seed {seed}: ok");
                println!("  faults:  {:?}", r.faults);
                println!("  network: {:?}", r.net);
                println!("  links:   {:?}", r.links);
                println!(
                    "  delivered {} messages; virtual end {:.3} s; trace digest {:016x}",
                    r.delivered,
                    r.end_ns as f64 / 1e9,
                    r.digest
                );
                0
            }
            Err(e) => {
                eprintln!("{e}");
                1
            }
        };
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
