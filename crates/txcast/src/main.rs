//! The `txcast` command: demo, benchmarks, simulator runs.

mod bench;
mod dc;
mod demo;
mod group_cmd;
mod oracle_cmd;
mod program_cmd;
mod raid_node;
mod rpc_cmd;
mod sim_cmd;
mod stat;

const USAGE: &str = "\
txcast: a communication facility for distributed transaction processing

usage:
  txcast demo [dc options]               DebitCredit on Raid: an embedded 3-site cluster on
                                         loopback, a short load, the report and its checks
  txcast demo comm [--txns N] [--pings N]
                                         the communication demo: a 3-site cluster in four
                                         processes exchanging local, remote and transaction-
                                         multicast traffic
  txcast dc [--sites N] [--clients N] [--seconds S] ...
                                         DebitCredit on Raid (`txcast dc --help`)
  txcast bench <rtt|multicast|throughput|group|rpc|long|burst|modules|crmem|dc|pgbench> [options]
                                         benchmarks with their baselines (see `txcast bench --help`)
  txcast sim link [--seed S | --seeds N] run the reliable link in the deterministic simulator
  txcast sim group [--seed S | --seeds N] run groups (crashes, joins, leaves) in the simulator
  txcast sim rpc | frag | vs | order | module | oracle | txn | engine | crmem | raid
                                         [--seed S | --seeds N]
                                         RPC, long messages, virtually synchronous
                                         groups, ordering protocols, extension
                                         modules in the simulator
  txcast stat [--config FILE] [--json]   the ports open on this host and their ring counters
  txcast oracle [--config FILE] [--state PATH] [--standby K]
                                         the oracle name server at the configured address
                                         (--standby K: the K-th standby replica)
  txcast node --site S [--sites N] [--config FILE] [--data DIR] ...
                                         one Raid site as a long-lived process
                                         (`txcast node --site 0 --help`)
  txcast node --at ADDR --control ADDR   host extension modules, with a control endpoint
  txcast program load|list|unload|invoke --control ADDR ...
                                         Push programs in a running node (`txcast program`)
  txcast help                            this text
";

fn main() {
    // Output into a closed pipe (`txcast stat | head`) ends the process quietly, as for
    // other command-line tools, rather than panicking in `println!`.
    // SAFETY: restoring a signal's default disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("demo") => match args.get(2).map(String::as_str) {
            Some("comm") => demo::run(&args[3..]),
            _ => dc::demo(&args[2..]),
        },
        Some("dc") => dc::run(&args[2..]),
        Some("bench") => bench::run(&args[2..]),
        Some("sim") => sim_cmd::run(&args[2..]),
        Some("stat") => stat::run(&args[2..]),
        Some("oracle") => oracle_cmd::run(&args[2..]),
        Some("node") if args[2..].iter().any(|a| a == "--site") => raid_node::run(&args[2..]),
        Some("node") => program_cmd::node(&args[2..]),
        Some("program") => program_cmd::program(&args[2..]),
        Some("__bench-child") => bench::child(&args[2..]),
        Some("__demo-site") => demo::site(&args[2..]),
        Some("__group-member") => group_cmd::member(&args[2..]),
        Some("__rpc-server") => rpc_cmd::server(&args[2..]),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{USAGE}");
            0
        }
        Some(other) => {
            eprintln!("txcast: unknown command `{other}`\n\n{USAGE}");
            2
        }
    };
    std::process::exit(code);
}

/// The value after `key` in `args`, parsed: `Ok(None)` if `key` is absent, an error naming
/// `key` if its value is missing or does not parse.
pub fn opt_checked<T: std::str::FromStr>(args: &[String], key: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == key) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("{key}: a value of the right kind is needed")),
    }
}

/// The value after `key` in `args`, parsed; `None` if absent or unparsable.
pub fn opt<T: std::str::FromStr>(args: &[String], key: &str) -> Option<T> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}
