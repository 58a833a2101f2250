//! Naming: pure functions from logical addresses to network addresses (paper 000 §4.1–4.2).
//!
//! The site maps to a host through the cluster configuration; `(instance, server_type,
//! server_instance)` maps to a UDP port and a shared-memory path on that host. A transaction's
//! multicast group is a function of its id. No lookup protocol on the data path.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use txcast_proto::wire::{ClusterKey, PacketKey};
use txcast_proto::{Address, TxnId};

/// Why a configuration or an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    /// The configuration file could not be read or parsed.
    #[error("cluster configuration: {0}")]
    Config(String),
    /// The site has no host in the configuration.
    #[error("site {0} has no host in the configuration")]
    UnknownSite(u16),
    /// The address falls outside the ranges the configuration maps to ports.
    #[error("address out of range: {0}")]
    OutOfRange(&'static str),
}

/// IP multicast for transaction groups. A `[multicast]` table takes the defaults for the keys
/// it omits.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct MulticastConfig {
    /// Use IP multicast for transaction groups; otherwise the engine fans out with sendmmsg.
    pub enabled: bool,
    /// The first two octets of the administratively scoped groups (239.x.0.0/16).
    pub group_prefix: [u8; 2],
    /// UDP port every transaction group uses.
    pub port: u16,
    /// Interface address to send and join on.
    pub interface: Ipv4Addr,
}

impl Default for MulticastConfig {
    fn default() -> Self {
        MulticastConfig {
            enabled: false,
            group_prefix: [239, 192],
            port: 19999,
            interface: Ipv4Addr::LOCALHOST,
        }
    }
}

/// The cluster: sites to hosts, and the port numbering.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Cluster instance; packets from another cluster are dropped.
    pub cluster: u16,
    /// Site number to host address. Sites missing here fall back to `127.0.0.(site+1)` when
    /// `loopback_default` is set.
    #[serde(deserialize_with = "sites_from_toml")]
    pub sites: BTreeMap<u16, IpAddr>,
    pub loopback_default: bool,
    /// UDP port of `(instance 0, type 0, server 0)`.
    pub base_port: u16,
    /// Server types per instance and servers per type that map to distinct ports.
    pub server_types_max: u16,
    pub server_instances_max: u16,
    /// Directory for shared-memory segments (a private subdirectory is made per user).
    pub shm_dir: PathBuf,
    /// Passphrase for the cluster key; when set, every packet carries a keyed MAC (or, with
    /// `encrypt`, is encrypted and carries an AEAD tag).
    pub key_passphrase: Option<String>,
    /// With a key: encrypt every packet's body (XChaCha20-Poly1305), not only authenticate it.
    pub encrypt: bool,
    /// With a key: the id packets name it by (a rollover installs the next key under another).
    pub key_id: u8,
    pub multicast: MulticastConfig,
    /// The oracle's address (`instance.site.type.server`): clients find it here, not by
    /// searching the network.
    pub oracle: String,
    /// Standby oracles (replicas of the oracle over a group), tried in order when the oracle
    /// does not answer.
    pub oracle_standbys: Vec<String>,
}

/// Where the oracle is unless the configuration says otherwise: instance 0, site 0, the last
/// server type of the default numbering, server 0.
pub const DEFAULT_ORACLE: &str = "0.0.15.0";

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            cluster: 1,
            sites: BTreeMap::new(),
            loopback_default: true,
            base_port: 20000,
            server_types_max: 16,
            server_instances_max: 64,
            shm_dir: PathBuf::from("/dev/shm"),
            key_passphrase: None,
            encrypt: false,
            key_id: 0,
            multicast: MulticastConfig::default(),
            oracle: DEFAULT_ORACLE.to_string(),
            oracle_standbys: Vec::new(),
        }
    }
}

/// The dotted key (`multicast.port`) written on the line holding byte `at` of `text`, and the
/// line's number from 1: the key before its `=`, under the last `[table]` header above it, or
/// the header itself. `None` on a line with neither.
fn key_at(text: &str, at: usize) -> Option<(String, usize)> {
    let start = text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let number = text[..start].matches('\n').count() + 1;
    let line = text[start..].lines().next().unwrap_or("").trim();
    let header = |l: &str| {
        l.strip_prefix('[')
            .and_then(|l| l.split(']').next())
            .map(|name| name.trim_matches(['[', ' ']).to_string())
    };
    if let Some(name) = header(line) {
        return Some((name, number));
    }
    let key = line.split_once('=')?.0.trim().trim_matches('"').to_string();
    let table = text[..start].lines().rev().find_map(|l| header(l.trim()));
    Some((
        match table {
            Some(t) => format!("{t}.{key}"),
            None => key,
        },
        number,
    ))
}

/// TOML table keys are strings: `[sites]` maps `"0" = "10.0.0.1"`.
fn sites_from_toml<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<u16, IpAddr>, D::Error> {
    let raw = BTreeMap::<String, IpAddr>::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| {
            k.parse::<u16>().map(|site| (site, v)).map_err(|_| {
                serde::de::Error::custom(format!("site `{k}` is not a number 0..=65535"))
            })
        })
        .collect()
}

impl ClusterConfig {
    /// Reads a TOML configuration. An error names the key it is about (`multicast.port`) and
    /// its line.
    pub fn from_toml(text: &str) -> Result<Self, NamingError> {
        let c: ClusterConfig = toml::from_str(text).map_err(|e| {
            let message = e.message().trim_end();
            NamingError::Config(match e.span().and_then(|span| key_at(text, span.start)) {
                Some((key, line)) => format!("key `{key}` (line {line}): {message}"),
                None => message.to_string(),
            })
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Reads the TOML configuration in `path`; an error names the file.
    pub fn load(path: &Path) -> Result<Self, NamingError> {
        let named =
            |e: &dyn std::fmt::Display| NamingError::Config(format!("{}: {e}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| named(&e))?;
        Self::from_toml(&text).map_err(|e| match e {
            NamingError::Config(m) => named(&m),
            other => named(&other),
        })
    }

    /// The oracle's address.
    pub fn oracle(&self) -> Result<Address, NamingError> {
        self.oracle
            .parse()
            .map_err(|e: &str| NamingError::Config(format!("oracle `{}`: {e}", self.oracle)))
    }

    /// The oracle, then its standbys.
    pub fn oracles(&self) -> Result<Vec<Address>, NamingError> {
        std::iter::once(&self.oracle)
            .chain(&self.oracle_standbys)
            .map(|o| {
                o.parse()
                    .map_err(|e: &str| NamingError::Config(format!("oracle `{o}`: {e}")))
            })
            .collect()
    }

    /// Checks what the types cannot: the port numbering, values that would be unsafe (an
    /// empty passphrase would look keyed and protect nothing; port 0 would be a random port
    /// no peer can derive), the oracles' addresses. An error names the key it is about.
    pub fn validate(&self) -> Result<(), NamingError> {
        let bad = |key: &str, why: &str| Err(NamingError::Config(format!("key `{key}`: {why}")));
        for (key, value) in [
            ("server_types_max", self.server_types_max),
            ("server_instances_max", self.server_instances_max),
        ] {
            if value == 0 {
                return bad(key, "must be at least 1");
            }
        }
        if self.base_port == 0 {
            return bad(
                "base_port",
                "0 is not a fixed port (the system would choose one no peer can derive)",
            );
        }
        let per_instance = self.server_types_max as u32 * self.server_instances_max as u32;
        if self.base_port as u32 + per_instance > 65536 {
            return bad(
                "base_port",
                "base_port + server_types_max * server_instances_max exceeds 65535",
            );
        }
        if let Some(p) = &self.key_passphrase {
            if p.trim().is_empty() {
                return bad(
                    "key_passphrase",
                    "empty: leave the key out for no MAC, or give a passphrase",
                );
            }
        }
        if self.encrypt && self.key_passphrase.is_none() {
            return bad("encrypt", "needs a key: set key_passphrase too");
        }
        if self.shm_dir.as_os_str().is_empty() {
            return bad("shm_dir", "empty: name a directory (default /dev/shm)");
        }
        let m = &self.multicast;
        if m.port == 0 {
            return bad("multicast.port", "0 is not a fixed port");
        }
        // The servers' ports: every instance that fits below 65536.
        let base = u32::from(self.base_port);
        let servers = base..base + (65536 - base) / per_instance * per_instance;
        if m.enabled && servers.contains(&u32::from(m.port)) {
            return bad(
                "multicast.port",
                "a server's port (base_port onwards): pick one below base_port",
            );
        }
        if !(224..=239).contains(&m.group_prefix[0]) {
            return bad(
                "multicast.group_prefix",
                "not an IPv4 multicast prefix (224 to 239; 239.x is the scoped range)",
            );
        }
        if m.enabled && !m.interface.is_unspecified() && m.interface.is_multicast() {
            return bad(
                "multicast.interface",
                "a multicast address, not an interface's",
            );
        }
        let keys = std::iter::once("oracle").chain(std::iter::repeat("oracle_standbys"));
        for (key, text) in keys.zip(std::iter::once(&self.oracle).chain(&self.oracle_standbys)) {
            let bad = |e: &dyn std::fmt::Display| {
                NamingError::Config(format!("key `{key}`: `{text}`: {e}"))
            };
            let address: Address = text.parse().map_err(|e: &str| bad(&e))?;
            self.udp_port(address).map_err(|e| bad(&e))?;
        }
        Ok(())
    }

    pub fn key(&self) -> Option<ClusterKey> {
        self.key_passphrase
            .as_deref()
            .map(ClusterKey::from_passphrase)
    }

    /// The key as packets use it (id, MAC-only or encrypting), if there is one.
    pub fn packet_key(&self) -> Option<PacketKey> {
        self.key()
            .map(|k| PacketKey::new(self.key_id, k, self.encrypt))
    }

    /// This configuration with a cluster key from `passphrase`, encrypting packets when
    /// `encrypt` (else MAC only).
    pub fn with_key(mut self, passphrase: &str, encrypt: bool) -> ClusterConfig {
        self.key_passphrase = Some(passphrase.to_string());
        self.encrypt = encrypt;
        self
    }

    /// The host of a site.
    pub fn host(&self, site: u16) -> Result<IpAddr, NamingError> {
        if let Some(h) = self.sites.get(&site) {
            return Ok(*h);
        }
        if self.loopback_default && site < 254 {
            return Ok(IpAddr::V4(Ipv4Addr::new(127, 0, 0, site as u8 + 1)));
        }
        Err(NamingError::UnknownSite(site))
    }

    /// The UDP port of an address: `base_port + (instance * types + type) * servers + server`.
    pub fn udp_port(&self, a: Address) -> Result<u16, NamingError> {
        if a.server_type >= self.server_types_max {
            return Err(NamingError::OutOfRange("server_type >= server_types_max"));
        }
        if a.server_instance >= self.server_instances_max {
            return Err(NamingError::OutOfRange(
                "server_instance >= server_instances_max",
            ));
        }
        let index = (a.instance as u32 * self.server_types_max as u32 + a.server_type as u32)
            * self.server_instances_max as u32
            + a.server_instance as u32;
        let port = self.base_port as u32 + index;
        u16::try_from(port)
            .map_err(|_| NamingError::OutOfRange("instance too large for the port range"))
    }

    /// The socket address of an address.
    pub fn socket_addr(&self, a: Address) -> Result<SocketAddr, NamingError> {
        Ok(SocketAddr::new(self.host(a.site)?, self.udp_port(a)?))
    }

    /// The private directory holding this user's segments of this cluster.
    pub fn segment_dir(&self) -> PathBuf {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        self.shm_dir
            .join(format!("txcast-{uid}"))
            .join(format!("c{}", self.cluster))
    }

    /// The shared-memory segment of an address's port.
    pub fn segment_path(&self, a: Address) -> PathBuf {
        self.segment_dir().join(format!(
            "{}.{}.{}.{}.ring",
            a.instance, a.site, a.server_type, a.server_instance
        ))
    }

    /// Whether two sites share a host (and so shared memory).
    #[inline]
    pub fn same_host(&self, a: u16, b: u16) -> bool {
        a == b || matches!((self.host(a), self.host(b)), (Ok(x), Ok(y)) if x == y)
    }

    /// The IP multicast group of a transaction: a pure function of its id, so every member
    /// derives it alone.
    pub fn txn_group(&self, txn: TxnId) -> SocketAddr {
        let h = txn.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48;
        let [p0, p1] = self.multicast.group_prefix;
        let ip = Ipv4Addr::new(p0, p1, (h >> 8) as u8, h as u8);
        SocketAddr::new(IpAddr::V4(ip), self.multicast.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_puts_site_s_on_127_0_0_s_plus_1() {
        let c = ClusterConfig::default();
        let a = Address::new(0, 2, 3, 4);
        assert_eq!(
            c.socket_addr(a).unwrap(),
            "127.0.0.3:20196".parse::<SocketAddr>().unwrap()
        );
        assert!(!c.same_host(1, 2));
        assert!(c.same_host(2, 2));
    }

    #[test]
    fn ports_are_distinct_within_the_ranges() {
        let c = ClusterConfig::default();
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..3 {
            for t in 0..c.server_types_max {
                for s in 0..c.server_instances_max {
                    assert!(seen.insert(c.udp_port(Address::new(i, 0, t, s)).unwrap()));
                }
            }
        }
        assert!(c.udp_port(Address::new(0, 0, 16, 0)).is_err());
        assert!(c.udp_port(Address::new(60, 0, 0, 0)).is_err());
    }

    #[test]
    fn toml_maps_sites_to_hosts_and_rejects_unknown_keys() {
        let c = ClusterConfig::from_toml(
            "cluster = 7\nloopback_default = false\nbase_port = 30000\n[sites]\n0 = \"10.0.0.1\"\n1 = \"10.0.0.2\"\n",
        )
        .unwrap();
        assert_eq!(c.cluster, 7);
        assert_eq!(c.host(1).unwrap(), "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(c.host(5), Err(NamingError::UnknownSite(5)));
        assert!(ClusterConfig::from_toml("nonsense = 1").is_err());
        assert!(ClusterConfig::from_toml("base_port = 65000").is_err());
        // Standby oracles: listed after the oracle, each a valid address.
        let c = ClusterConfig::from_toml("oracle_standbys = [\"0.1.15.0\", \"0.2.15.0\"]").unwrap();
        let o = c.oracles().unwrap();
        assert_eq!(o.len(), 3);
        assert_eq!((o[0].site, o[1].site, o[2].site), (0, 1, 2));
        assert!(ClusterConfig::from_toml("oracle_standbys = [\"nope\"]").is_err());
    }

    /// `encrypt` and `key_id` reach the packet key; encryption without a key is refused.
    #[test]
    fn encryption_is_chosen_per_cluster_and_needs_a_key() {
        let c = ClusterConfig::from_toml("key_passphrase = \"s\"\nencrypt = true\nkey_id = 9\n")
            .unwrap();
        let k = c.packet_key().unwrap();
        assert_eq!((k.id(), k.seals()), (9, true));
        let c = ClusterConfig::from_toml("key_passphrase = \"s\"\n").unwrap();
        assert!(!c.packet_key().unwrap().seals());
        assert!(ClusterConfig::default().packet_key().is_none());
        let e = ClusterConfig::from_toml("encrypt = true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `encrypt`"), "{e}");
        let k = ClusterConfig::default()
            .with_key("s", true)
            .packet_key()
            .unwrap();
        assert_eq!((k.id(), k.seals()), (0, true));
    }

    #[test]
    fn errors_name_the_key_and_its_line() {
        let error = |text: &str| ClusterConfig::from_toml(text).unwrap_err().to_string();
        let e = error("cluster = 1\nnonsense = 1\n");
        assert!(e.contains("key `nonsense` (line 2)"), "{e}");
        let e = error("cluster = 1\n[multicast]\nenabled = true\nport = \"x\"\n");
        assert!(e.contains("key `multicast.port` (line 4)"), "{e}");
        let e = error("[sites]\n0 = \"10.0.0.300\"\n");
        assert!(e.contains("key `sites.0` (line 2)"), "{e}");
        let e = error("oracle_standbys = [\"0.1.15.0\", \"0.1.99.0\"]\n");
        assert!(e.contains("key `oracle_standbys`: `0.1.99.0`"), "{e}");
        let e = error("server_types_max = 0\n");
        assert!(e.contains("server_types_max"), "{e}");
        let dir = std::env::temp_dir().join(format!("txcast-naming-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.toml");
        std::fs::write(&file, "base_port = \"x\"\n").unwrap();
        let e = ClusterConfig::load(&file).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            e.contains("bad.toml") && e.contains("key `base_port` (line 1)"),
            "{e}"
        );
    }

    #[test]
    fn partial_tables_take_the_defaults_for_what_they_omit() {
        let c = ClusterConfig::from_toml("[multicast]\nenabled = true\n").unwrap();
        let d = MulticastConfig::default();
        assert!(c.multicast.enabled);
        assert_eq!(
            (
                c.multicast.group_prefix,
                c.multicast.port,
                c.multicast.interface
            ),
            (d.group_prefix, d.port, d.interface)
        );
        let c = ClusterConfig::from_toml("[multicast]\nport = 18000\n").unwrap();
        assert_eq!((c.multicast.port, c.multicast.enabled), (18000, false));
        // An empty file is the embedded default, key by key.
        let (c, d) = (
            ClusterConfig::from_toml("").unwrap(),
            ClusterConfig::default(),
        );
        assert_eq!(
            (
                c.cluster,
                c.loopback_default,
                c.base_port,
                c.server_types_max
            ),
            (
                d.cluster,
                d.loopback_default,
                d.base_port,
                d.server_types_max
            )
        );
        assert_eq!(
            (c.server_instances_max, &c.shm_dir, &c.key_passphrase),
            (d.server_instances_max, &d.shm_dir, &d.key_passphrase)
        );
        assert_eq!(
            (&c.oracle, &c.oracle_standbys, &c.multicast),
            (&d.oracle, &d.oracle_standbys, &d.multicast)
        );
    }

    #[test]
    fn unsafe_values_are_refused_naming_the_key() {
        let refused = |text: &str, key: &str| {
            let e = ClusterConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{text:?}: {e}");
        };
        refused("key_passphrase = \"\"\n", "key_passphrase");
        refused("key_passphrase = \"  \"\n", "key_passphrase");
        refused("base_port = 0\n", "base_port");
        refused("server_types_max = 0\n", "server_types_max");
        refused("server_instances_max = 0\n", "server_instances_max");
        refused("shm_dir = \"\"\n", "shm_dir");
        refused("[multicast]\nport = 0\n", "multicast.port");
        refused(
            "[multicast]\nenabled = true\nport = 20001\n",
            "multicast.port",
        );
        refused(
            "[multicast]\ngroup_prefix = [10, 0]\n",
            "multicast.group_prefix",
        );
        refused(
            "[multicast]\nenabled = true\ninterface = \"239.0.0.1\"\n",
            "multicast.interface",
        );
        // The same values where they are safe are taken.
        assert!(ClusterConfig::from_toml("key_passphrase = \"s\"\nbase_port = 1\n").is_ok());
        assert!(ClusterConfig::from_toml("[multicast]\nenabled = true\nport = 19000\n").is_ok());
    }

    #[test]
    fn txn_group_is_a_pure_function_in_the_scoped_range() {
        let c = ClusterConfig::default();
        let g = c.txn_group(TxnId(42));
        assert_eq!(g, c.txn_group(TxnId(42)));
        assert_ne!(g, c.txn_group(TxnId(43)));
        match g.ip() {
            IpAddr::V4(v4) => assert_eq!(&v4.octets()[..2], &[239, 192]),
            IpAddr::V6(_) => panic!("v4 expected"),
        }
    }

    #[test]
    fn segment_paths_name_the_address() {
        let c = ClusterConfig::default();
        let p = c.segment_path(Address::new(0, 1, 2, 3));
        assert!(p.ends_with("c1/0.1.2.3.ring"));
    }
}
