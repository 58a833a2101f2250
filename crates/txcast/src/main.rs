//! The `txcast` command: demo, benchmarks, simulator runs.
//!
//! The command line is one [`Cli`] parsed by clap; each subcommand's options are a typed
//! struct in the module that runs it.

mod bench;
mod chaos;
mod chaos_crmem;
mod config_cmd;
mod crmem_node;
mod dc;
mod demo;
mod group_cmd;
mod oracle_cmd;
mod program_cmd;
mod progress;
mod raid_node;
mod reproduce;
mod rpc_cmd;
mod sim_cmd;
mod soak;
mod stat;

use clap::{CommandFactory, Parser, Subcommand};

/// txcast: a communication facility for distributed transaction processing.
#[derive(Parser, Debug)]
#[command(name = "txcast", version)]
struct Cli {
    /// Log what the libraries report (view changes, suspicions, restarts, refused packets) to
    /// stderr, filtered as `RUST_LOG` would be (`info`, `debug`, `txcast_port=debug`...);
    /// overrides `RUST_LOG`. Without either, nothing is logged
    #[arg(long, global = true, value_name = "FILTER")]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// DebitCredit on Raid: an embedded 3-site cluster on loopback, a short load, the report
    /// and its checks (`txcast demo comm`: the communication demo)
    Demo(dc::DemoArgs),
    /// DebitCredit on Raid: an embedded cluster, or (`--connect`) the load generator against
    /// a running one
    Dc(dc::DcArgs),
    /// Benchmarks with their baselines
    Bench(bench::BenchArgs),
    /// The five papers' tables and figures measured on this machine, with the papers'
    /// numbers beside ours, into one report folder (`index.html`)
    Reproduce(reproduce::Args),
    /// Runs of the deterministic simulator, one kind of component each
    Sim(sim_cmd::SimArgs),
    /// The ports open on this host and their ring counters
    Stat(stat::StatArgs),
    /// The oracle name server at the configured address
    Oracle(oracle_cmd::OracleArgs),
    /// One Raid site as a long-lived process (`--site S`), or a host of extension modules
    /// with a control endpoint (`--at ADDR --control ADDR`)
    Node(raid_node::NodeArgs),
    /// Push programs in a running node: load, list, unload, invoke
    Program(program_cmd::ProgramArgs),
    /// Cluster files: `txcast config check FILE` validates one and prints the cluster
    Config(config_cmd::ConfigArgs),
    /// One node of a CRMem mirror as a long-lived process, running TpcB while it is the
    /// primary (`--node K --nodes N`)
    Crmem(crmem_node::CrmemArgs),
    /// Chaos runs' checkers: `txcast chaos check LOG...` checks a group's member logs
    Chaos(chaos::ChaosArgs),
    /// A long run (30 minutes by default) of a group and RPC under injected loss: samples each
    /// process's RSS and open descriptors, fails if they grow
    Soak(soak::SoakArgs),
    /// Prints a shell completion script for txcast on stdout
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// The partner process of a two-process benchmark (internal)
    #[command(name = "__bench-child", hide = true)]
    BenchChild(RawArgs),
    /// One site of `txcast demo comm` (internal)
    #[command(name = "__demo-site", hide = true)]
    DemoSite {
        /// The site number
        site: u16,
    },
    /// One member process of a group, for the cross-process tests (internal)
    #[command(name = "__group-member", hide = true)]
    GroupMember(group_cmd::MemberArgs),
    /// One RPC server process, for the cross-process tests (internal)
    #[command(name = "__rpc-server", hide = true)]
    RpcServer(rpc_cmd::ServerArgs),
    /// One group member of `txcast soak` (internal)
    #[command(name = "__soak-member", hide = true)]
    SoakMember(soak::MemberArgs),
    /// The RPC client of `txcast soak` (internal)
    #[command(name = "__soak-client", hide = true)]
    SoakClient(soak::ClientArgs),
    /// The RPC server of `txcast soak` (internal)
    #[command(name = "__soak-server", hide = true)]
    SoakServer(soak::ServerArgs),
}

/// The words after an internal subcommand, passed on unparsed: the parent process that
/// wrote them parses them itself.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
struct RawArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

/// Sends the libraries' `tracing` events to stderr, filtered by `--log` or else `RUST_LOG`;
/// with neither, no subscriber is installed and nothing is logged.
fn init_logging(flag: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match flag {
        Some(f) => EnvFilter::try_new(f)
            .map_err(|e| format!("invalid value '{f}' for '--log <FILTER>': {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(f) if !f.trim().is_empty() => {
                EnvFilter::try_new(&f).map_err(|e| format!("invalid RUST_LOG '{f}': {e}"))?
            }
            _ => return Ok(()),
        },
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    Ok(())
}

fn main() {
    // Output into a closed pipe (`txcast stat | head`) ends the process quietly, as for
    // other command-line tools, rather than panicking in `println!`.
    // SAFETY: restoring a signal's default disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // A bad command line exits 2 with clap's message; `--help` and `--version` exit 0.
    let cli = Cli::parse();
    if let Err(e) = init_logging(cli.log.as_deref()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let code = match cli.command {
        Command::Demo(args) => match args.command {
            Some(dc::DemoCommand::Comm(comm)) => demo::run(&comm),
            None => dc::demo(&args),
        },
        Command::Dc(args) => dc::run(&args),
        Command::Bench(args) => bench::run(args),
        Command::Reproduce(args) => reproduce::run(&args),
        Command::Sim(args) => sim_cmd::run(args),
        Command::Stat(args) => stat::run(&args),
        Command::Oracle(args) => oracle_cmd::run(&args),
        Command::Node(args) => raid_node::run(args),
        Command::Program(args) => program_cmd::program(&args),
        Command::Config(args) => config_cmd::run(&args),
        Command::Chaos(args) => match &args.command {
            chaos::ChaosCommand::Check { logs, fault } => chaos::check_command(logs, fault),
            chaos::ChaosCommand::Crmem { logs, fault } => chaos_crmem::run(logs, fault),
        },
        Command::Crmem(args) => crmem_node::run(args),
        Command::Soak(args) => soak::run(&args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "txcast", &mut std::io::stdout());
            0
        }
        Command::BenchChild(raw) => bench::child(&raw.args),
        Command::DemoSite { site } => demo::site(site),
        Command::GroupMember(args) => group_cmd::member(&args),
        Command::RpcServer(args) => rpc_cmd::server(&args),
        Command::SoakMember(args) => soak::member(&args),
        Command::SoakClient(args) => soak::client(&args),
        Command::SoakServer(args) => soak::server(&args),
    };
    std::process::exit(code);
}

/// A command's end: exit code 0, or the error printed after `who` and exit code 1.
pub fn exit_code<E: std::fmt::Display>(who: impl std::fmt::Display, r: Result<(), E>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{who}: {e}");
            1
        }
    }
}

/// A check clap cannot express failed (a range, a combination): prints `message` the way
/// clap prints its own errors, with the usage of the subcommand at `path` (e.g.
/// `["bench", "rtt"]`), and returns exit code 2 as clap's errors have.
pub fn usage_error(path: &[&str], message: &str) -> i32 {
    let mut root = Cli::command();
    // Building the whole tree gives each subcommand its full name for the usage line.
    root.build();
    let mut cmd = &root;
    for name in path {
        match cmd.find_subcommand(name) {
            Some(sub) => cmd = sub,
            None => break,
        }
    }
    // If stderr is gone there is nobody to tell; the exit code still says it.
    let _ = cmd
        .clone()
        .error(clap::error::ErrorKind::ValueValidation, message)
        .print();
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
