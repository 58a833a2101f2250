//! `txcast config check FILE`: reads a cluster file as the nodes do
//! (`txcast_port::ClusterConfig::load`) and prints the cluster it resolves to: sites and
//! hosts, the port numbering, the oracle and its standbys with their sockets, multicast. A
//! file that does not load is refused with the file and the key named, exit code 2.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use txcast_port::ClusterConfig;

/// The options of `txcast config`.
#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Validates a cluster file and prints the resolved cluster (sites, hosts, ports, oracle,
    /// multicast)
    Check {
        /// The cluster file (TOML)
        file: PathBuf,
    },
}

pub fn run(args: &ConfigArgs) -> i32 {
    let ConfigCommand::Check { file } = &args.command;
    match ClusterConfig::load(file) {
        Ok(cluster) => match describe(&cluster) {
            Ok(text) => {
                println!("{}: valid", file.display());
                print!("{text}");
                0
            }
            Err(e) => {
                eprintln!("txcast config check: {}: {e}", file.display());
                2
            }
        },
        Err(e) => {
            // The loader's message names the file and the key.
            eprintln!("txcast config check: {e}");
            2
        }
    }
}

/// The resolved cluster as lines of text; an error (naming the key) where the oracle's site
/// has no host.
fn describe(c: &ClusterConfig) -> Result<String, String> {
    let mut out = String::new();
    let mut line = |name: &str, value: String| out.push_str(&format!("{name:<17} {value}\n"));
    line("cluster", c.cluster.to_string());
    let listed: Vec<String> = c
        .sites
        .iter()
        .map(|(site, host)| format!("{site} {host}"))
        .collect();
    line(
        "sites",
        if listed.is_empty() {
            "none listed".to_string()
        } else {
            listed.join(", ")
        },
    );
    line(
        "other sites",
        if c.loopback_default {
            "site S on 127.0.0.(S+1), below 254 (loopback_default)".to_string()
        } else {
            "no host (loopback_default = false)".to_string()
        },
    );
    let per_instance = u32::from(c.server_types_max) * u32::from(c.server_instances_max);
    let instances = (65536 - u32::from(c.base_port)) / per_instance;
    line(
        "ports",
        format!(
            "UDP {} + (instance * {} + type) * {} + server; instance 0 on {}..={}, {} instances \
             fit",
            c.base_port,
            c.server_types_max,
            c.server_instances_max,
            c.base_port,
            u32::from(c.base_port) + per_instance - 1,
            instances
        ),
    );
    line("shared memory", c.segment_dir().display().to_string());
    line(
        "packet MAC",
        if c.key_passphrase.is_some() && c.encrypt {
            format!(
                "keyed and encrypted (key_passphrase set, encrypt, key_id {})",
                c.key_id
            )
        } else if c.key_passphrase.is_some() {
            format!("keyed (key_passphrase set, key_id {})", c.key_id)
        } else {
            "none (no key_passphrase)".to_string()
        },
    );
    let oracles = c.oracles().map_err(|e| e.to_string())?;
    for (i, oracle) in oracles.iter().enumerate() {
        let (name, key) = match i {
            0 => ("oracle".to_string(), "oracle"),
            k => (format!("oracle standby {k}"), "oracle_standbys"),
        };
        let socket = c
            .socket_addr(*oracle)
            .map_err(|e| format!("key `{key}`: `{oracle}`: {e}"))?;
        line(&name, format!("{oracle} at {socket}"));
    }
    let m = &c.multicast;
    let [p0, p1] = m.group_prefix;
    line(
        "multicast",
        if m.enabled {
            format!(
                "IP multicast: groups {p0}.{p1}.x.y, port {}, interface {}",
                m.port, m.interface
            )
        } else {
            format!(
                "off: the engine fans out with sendmmsg (would be groups {p0}.{p1}.x.y, port {}, \
                 interface {})",
                m.port, m.interface
            )
        },
    );
    Ok(out)
}
