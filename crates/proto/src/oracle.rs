//! The oracle's registry (paper 001 "The Raid Oracle"), sans-IO: servers register with a
//! *notifier set* (address patterns of the servers they talk to) and a lease; the registry
//! answers lookups, and tells every registered server whose notifier set matches a server that
//! registers, moves, fails (its lease ran out) or recovers. It holds no sockets: the oracle
//! server runs it over RPC and keeps its state in a file ([`Registry::snapshot`]).
//!
//! Wire forms (payloads of RPC requests and replies, little-endian, checked decoders):
//! - a location: IPv4 address (4 bytes) and UDP port (2);
//! - a pattern: four u16 fields (instance, site, type, server instance), `0xFFFF` = any;
//! - `Register`: lease in ms u32, location, pattern count u16, patterns;
//! - a `Notification` (oracle to client): kind u8, address (8), location;
//! - a list of (address, location) entries: count u16, then 14 bytes each.

use crate::addr::{Address, ADDRESS_BYTES};
use crate::codec::wire_enum;
use crate::time::Instant;
use core::fmt;
use core::time::Duration;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

/// RPC request types of the oracle (a reserved range).
pub mod request {
    pub const REGISTER: u16 = 0xFF01;
    pub const UNREGISTER: u16 = 0xFF02;
    pub const LOOKUP: u16 = 0xFF03;
    pub const FIND_PARTNER: u16 = 0xFF04;
    pub const FIND_ALL: u16 = 0xFF05;
    /// Oracle to a registered server: a server it watches changed.
    pub const NOTIFY: u16 = 0xFF10;
}

/// Patterns in one notifier set, at most.
pub const PATTERNS_MAX: usize = 32;
/// Entries in one list reply, at most (14 bytes each: fits a datagram).
pub const LIST_MAX: usize = 90;
const ANY: u16 = 0xFFFF;
const LOCATION_BYTES: usize = 6;
const ENTRY_BYTES: usize = ADDRESS_BYTES + LOCATION_BYTES;

/// An address pattern: each field a number or any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    pub instance: Option<u16>,
    pub site: Option<u16>,
    pub server_type: Option<u16>,
    pub server_instance: Option<u16>,
}

impl Pattern {
    /// Matches exactly `a`.
    pub fn exact(a: Address) -> Pattern {
        Pattern {
            instance: Some(a.instance),
            site: Some(a.site),
            server_type: Some(a.server_type),
            server_instance: Some(a.server_instance),
        }
    }

    pub fn matches(&self, a: Address) -> bool {
        let f = |p: Option<u16>, v: u16| p.is_none_or(|p| p == v);
        f(self.instance, a.instance)
            && f(self.site, a.site)
            && f(self.server_type, a.server_type)
            && f(self.server_instance, a.server_instance)
    }

    fn write(&self, out: &mut Vec<u8>) {
        for f in [
            self.instance,
            self.site,
            self.server_type,
            self.server_instance,
        ] {
            out.extend_from_slice(&f.unwrap_or(ANY).to_le_bytes());
        }
    }

    fn read(b: &[u8]) -> Pattern {
        let f = |i: usize| {
            let v = u16::from_le_bytes([b[i], b[i + 1]]);
            (v != ANY).then_some(v)
        };
        Pattern {
            instance: f(0),
            site: f(2),
            server_type: f(4),
            server_instance: f(6),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |v: Option<u16>| v.map_or("*".to_string(), |v| v.to_string());
        write!(
            f,
            "{}.{}.{}.{}",
            s(self.instance),
            s(self.site),
            s(self.server_type),
            s(self.server_instance)
        )
    }
}

impl core::str::FromStr for Pattern {
    type Err = &'static str;
    /// Parses `instance.site.type.server`, each a number below 65535 or `*`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() != 4 {
            return Err("a pattern is four dot-separated fields, each a number or *");
        }
        let field = |p: &str| -> Result<Option<u16>, &'static str> {
            if p == "*" {
                return Ok(None);
            }
            match p.parse::<u16>() {
                Ok(v) if v != ANY => Ok(Some(v)),
                _ => Err("a pattern field is a number 0..=65534 or *"),
            }
        };
        Ok(Pattern {
            instance: field(parts[0])?,
            site: field(parts[1])?,
            server_type: field(parts[2])?,
            server_instance: field(parts[3])?,
        })
    }
}

/// Why bytes are not an oracle payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OracleWireError {
    #[error("oracle payload is shorter than its fields")]
    Short,
    /// Bytes left over after the payload.
    #[error("oracle payload has bytes after its fields")]
    Trailing,
    #[error("a notifier set has at most {PATTERNS_MAX} patterns, not {0}")]
    TooManyPatterns(usize),
    #[error("a list has at most {LIST_MAX} entries, not {0}")]
    TooManyEntries(usize),
    #[error("notification kind must be 1..=4, is {0}")]
    UnknownKind(u8),
    /// A lease must be 1 ms ..= 1 hour.
    #[error("lease must be 1..=3600000 ms, is {0}")]
    BadLease(u32),
}

fn write_location(l: SocketAddrV4, out: &mut Vec<u8>) {
    out.extend_from_slice(&l.ip().octets());
    out.extend_from_slice(&l.port().to_le_bytes());
}

fn read_location(b: &[u8]) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::new(b[0], b[1], b[2], b[3]),
        u16::from_le_bytes([b[4], b[5]]),
    )
}

/// A registration request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Register {
    pub lease: Duration,
    pub location: SocketAddrV4,
    pub notifiers: Vec<Pattern>,
}

pub const LEASE_MAX: Duration = Duration::from_secs(3600);

impl Register {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let ms = self.lease.as_millis().clamp(1, LEASE_MAX.as_millis()) as u32;
        out.extend_from_slice(&ms.to_le_bytes());
        write_location(self.location, &mut out);
        out.extend_from_slice(&(self.notifiers.len() as u16).to_le_bytes());
        for p in &self.notifiers {
            p.write(&mut out);
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Register, OracleWireError> {
        if b.len() < 12 {
            return Err(OracleWireError::Short);
        }
        let ms = u32::from_le_bytes(b[0..4].try_into().expect("4"));
        if ms == 0 || ms as u128 > LEASE_MAX.as_millis() {
            return Err(OracleWireError::BadLease(ms));
        }
        let location = read_location(&b[4..10]);
        let n = u16::from_le_bytes([b[10], b[11]]) as usize;
        if n > PATTERNS_MAX {
            return Err(OracleWireError::TooManyPatterns(n));
        }
        let rest = &b[12..];
        match rest.len().cmp(&(n * 8)) {
            core::cmp::Ordering::Less => return Err(OracleWireError::Short),
            core::cmp::Ordering::Greater => return Err(OracleWireError::Trailing),
            core::cmp::Ordering::Equal => {}
        }
        Ok(Register {
            lease: Duration::from_millis(ms as u64),
            location,
            notifiers: rest.chunks_exact(8).map(Pattern::read).collect(),
        })
    }
}

wire_enum! {
/// What happened to a watched server.
pub enum Change: u8, unknown OracleWireError::UnknownKind {
    /// It registered for the first time.
    Registered = 1,
    /// It registered again from another location.
    Moved = 2,
    /// Its lease ran out (or it unregistered).
    Failed = 3,
    /// It registered again after failing.
    Recovered = 4,
}
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    pub change: Change,
    pub server: Address,
    pub location: SocketAddrV4,
}

impl Notification {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.change as u8];
        let mut a = [0u8; ADDRESS_BYTES];
        self.server.write_to(&mut a);
        out.extend_from_slice(&a);
        write_location(self.location, &mut out);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Notification, OracleWireError> {
        if b.len() < 1 + ENTRY_BYTES {
            return Err(OracleWireError::Short);
        }
        if b.len() > 1 + ENTRY_BYTES {
            return Err(OracleWireError::Trailing);
        }
        let change = Change::try_from(b[0])?;
        Ok(Notification {
            change,
            server: Address::read_from(&b[1..1 + ADDRESS_BYTES]),
            location: read_location(&b[1 + ADDRESS_BYTES..]),
        })
    }
}

/// A list of live servers and where they are.
pub fn encode_list(entries: &[(Address, SocketAddrV4)]) -> Vec<u8> {
    let entries = &entries[..entries.len().min(LIST_MAX)];
    let mut out = (entries.len() as u16).to_le_bytes().to_vec();
    for (a, l) in entries {
        let mut b = [0u8; ADDRESS_BYTES];
        a.write_to(&mut b);
        out.extend_from_slice(&b);
        write_location(*l, &mut out);
    }
    out
}

pub fn decode_list(b: &[u8]) -> Result<Vec<(Address, SocketAddrV4)>, OracleWireError> {
    if b.len() < 2 {
        return Err(OracleWireError::Short);
    }
    let n = u16::from_le_bytes([b[0], b[1]]) as usize;
    if n > LIST_MAX {
        return Err(OracleWireError::TooManyEntries(n));
    }
    let rest = &b[2..];
    match rest.len().cmp(&(n * ENTRY_BYTES)) {
        core::cmp::Ordering::Less => return Err(OracleWireError::Short),
        core::cmp::Ordering::Greater => return Err(OracleWireError::Trailing),
        core::cmp::Ordering::Equal => {}
    }
    Ok(rest
        .chunks_exact(ENTRY_BYTES)
        .map(|e| {
            (
                Address::read_from(&e[..ADDRESS_BYTES]),
                read_location(&e[ADDRESS_BYTES..]),
            )
        })
        .collect())
}

/// A pattern as a request payload.
pub fn encode_pattern(p: &Pattern) -> Vec<u8> {
    let mut out = Vec::new();
    p.write(&mut out);
    out
}

pub fn decode_pattern(b: &[u8]) -> Result<Pattern, OracleWireError> {
    match b.len() {
        8 => Ok(Pattern::read(b)),
        n if n < 8 => Err(OracleWireError::Short),
        _ => Err(OracleWireError::Trailing),
    }
}

#[derive(Clone, Debug)]
struct Entry {
    location: SocketAddrV4,
    notifiers: Vec<Pattern>,
    lease: Duration,
    lease_until: Instant,
    alive: bool,
}

/// Why the registry refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// `entries_max` servers are registered.
    #[error("the oracle has no room for another server")]
    Full,
    /// A snapshot that is not one (names the broken rule).
    #[error("bad oracle snapshot: {0}")]
    BadSnapshot(&'static str),
    /// The address is registered, alive, at another location (until its lease runs out).
    #[error("registered and alive at another location (try again when its lease runs out)")]
    LiveElsewhere,
}

/// The oracle's state: registered servers, their locations, notifier sets and leases.
pub struct Registry {
    entries: HashMap<Address, Entry>,
    entries_max: usize,
    /// Notifications to send: (to whom, what).
    outbox: Vec<(Address, Notification)>,
    /// Whether the state changed since the last snapshot was taken.
    dirty: bool,
    evicted: Vec<Address>,
}

const SNAPSHOT_MAGIC: &[u8; 8] = b"TXORACL1";

impl Registry {
    pub fn new(entries_max: usize) -> Registry {
        Registry {
            entries: HashMap::new(),
            entries_max,
            outbox: Vec::new(),
            dirty: false,
            evicted: Vec::new(),
        }
    }

    /// Registers (or re-registers, or renews) `server` at `location`. Returns the live
    /// servers its notifier set matches, for its cache.
    pub fn register(
        &mut self,
        now: Instant,
        server: Address,
        r: &Register,
    ) -> Result<Vec<(Address, SocketAddrV4)>, RegistryError> {
        let change = match self.entries.get(&server) {
            None => {
                if self.entries.len() >= self.entries_max && !self.evict_failed() {
                    return Err(RegistryError::Full);
                }
                Some(Change::Registered)
            }
            Some(e) if !e.alive => Some(Change::Recovered),
            // A live server is not moved by someone else's word: a server that really moved
            // registers again once the lease of its old place runs out.
            Some(e) if e.location != r.location && now < e.lease_until => {
                return Err(RegistryError::LiveElsewhere);
            }
            Some(e) if e.location != r.location => Some(Change::Moved),
            Some(e) if e.notifiers != r.notifiers => None,
            Some(_) => {
                // A renewal.
                let e = self.entries.get_mut(&server).expect("present");
                e.lease = r.lease;
                e.lease_until = now + r.lease;
                return Ok(self.matching(&r.notifiers, server));
            }
        };
        self.entries.insert(
            server,
            Entry {
                location: r.location,
                notifiers: r.notifiers.clone(),
                lease: r.lease,
                lease_until: now + r.lease,
                alive: true,
            },
        );
        self.dirty = true;
        if let Some(change) = change {
            self.notify(change, server, r.location);
        }
        Ok(self.matching(&r.notifiers, server))
    }

    /// Makes room by forgetting one failed server (the longest failed); false if none is.
    fn evict_failed(&mut self) -> bool {
        let victim = self
            .entries
            .iter()
            .filter(|(_, e)| !e.alive)
            .min_by_key(|(a, e)| (e.lease_until, **a))
            .map(|(a, _)| *a);
        match victim {
            Some(a) => {
                self.entries.remove(&a);
                self.evicted.push(a);
                self.dirty = true;
                true
            }
            None => false,
        }
    }

    /// Servers forgotten to make room since the last call (their locations may be dropped).
    pub fn take_evicted(&mut self) -> Vec<Address> {
        std::mem::take(&mut self.evicted)
    }

    /// Every live server and where it is (no bound: for the oracle's own use).
    pub fn locations(&self) -> Vec<(Address, SocketAddrV4)> {
        let mut v: Vec<(Address, SocketAddrV4)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.alive)
            .map(|(a, e)| (*a, e.location))
            .collect();
        v.sort_by_key(|(a, _)| *a);
        v
    }

    /// `server` leaves: its watchers are told it failed.
    pub fn unregister(&mut self, server: Address) -> bool {
        match self.entries.remove(&server) {
            Some(e) => {
                self.dirty = true;
                if e.alive {
                    self.notify(Change::Failed, server, e.location);
                }
                true
            }
            None => false,
        }
    }

    fn matching(&self, notifiers: &[Pattern], except: Address) -> Vec<(Address, SocketAddrV4)> {
        let mut v: Vec<(Address, SocketAddrV4)> = self
            .entries
            .iter()
            .filter(|(a, e)| **a != except && e.alive && notifiers.iter().any(|p| p.matches(**a)))
            .map(|(a, e)| (*a, e.location))
            .collect();
        v.sort_by_key(|(a, _)| *a);
        v.truncate(LIST_MAX);
        v
    }

    /// Tells every live server whose notifier set matches `server` what happened to it.
    fn notify(&mut self, change: Change, server: Address, location: SocketAddrV4) {
        let n = Notification {
            change,
            server,
            location,
        };
        let mut to: Vec<Address> = self
            .entries
            .iter()
            .filter(|(a, e)| {
                **a != server && e.alive && e.notifiers.iter().any(|p| p.matches(server))
            })
            .map(|(a, _)| *a)
            .collect();
        to.sort();
        self.outbox.extend(to.into_iter().map(|a| (a, n)));
    }

    /// Where `server` is, if it is registered and alive.
    pub fn lookup(&self, server: Address) -> Option<SocketAddrV4> {
        self.entries
            .get(&server)
            .filter(|e| e.alive)
            .map(|e| e.location)
    }

    /// One live server matching `p` (the lowest address, so the answer is stable).
    pub fn find_partner(&self, p: &Pattern) -> Option<(Address, SocketAddrV4)> {
        self.find_all(p).into_iter().next()
    }

    /// Every live server matching `p` (at most `LIST_MAX`), in address order.
    pub fn find_all(&self, p: &Pattern) -> Vec<(Address, SocketAddrV4)> {
        let mut v: Vec<(Address, SocketAddrV4)> = self
            .entries
            .iter()
            .filter(|(a, e)| e.alive && p.matches(**a))
            .map(|(a, e)| (*a, e.location))
            .collect();
        v.sort_by_key(|(a, _)| *a);
        v.truncate(LIST_MAX);
        v
    }

    /// The next lease to run out.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter(|e| e.alive)
            .map(|e| e.lease_until)
            .min()
    }

    /// Servers whose lease ran out fail (their watchers are told).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut failed: Vec<(Address, SocketAddrV4)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.alive && e.lease_until <= now)
            .map(|(a, e)| (*a, e.location))
            .collect();
        failed.sort_by_key(|(a, _)| *a);
        for (a, l) in failed {
            self.entries.get_mut(&a).expect("listed").alive = false;
            self.dirty = true;
            self.notify(Change::Failed, a, l);
        }
    }

    /// Notifications to send, in order.
    pub fn take_notifications(&mut self) -> Vec<(Address, Notification)> {
        std::mem::take(&mut self.outbox)
    }

    /// Registered servers (alive or failed).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Marks the state changed (a snapshot that could not be written is taken again).
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// Whether the state changed since the last [`Registry::snapshot`].
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// The state to keep across a restart: every entry with its location, notifier set,
    /// lease length and liveness (leases restart from the moment of restoring).
    pub fn snapshot(&mut self) -> Vec<u8> {
        self.dirty = false;
        let mut out = SNAPSHOT_MAGIC.to_vec();
        let mut entries: Vec<(&Address, &Entry)> = self.entries.iter().collect();
        entries.sort_by_key(|(a, _)| **a);
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (a, e) in entries {
            let mut b = [0u8; ADDRESS_BYTES];
            a.write_to(&mut b);
            out.extend_from_slice(&b);
            out.push(u8::from(e.alive));
            let r = Register {
                lease: e.lease,
                location: e.location,
                notifiers: e.notifiers.clone(),
            };
            let body = r.encode();
            out.extend_from_slice(&(body.len() as u16).to_le_bytes());
            out.extend_from_slice(&body);
        }
        out
    }

    /// A registry from a snapshot; every live server gets a fresh lease from `now`.
    pub fn restore(
        bytes: &[u8],
        now: Instant,
        entries_max: usize,
    ) -> Result<Registry, RegistryError> {
        let bad = RegistryError::BadSnapshot;
        if bytes.len() < 12 || &bytes[..8] != SNAPSHOT_MAGIC {
            return Err(bad("it must start with TXORACL1 and a count"));
        }
        let n = u32::from_le_bytes(bytes[8..12].try_into().expect("4")) as usize;
        if n > entries_max {
            return Err(bad("more entries than entries_max"));
        }
        let mut r = Registry::new(entries_max);
        let mut at = 12;
        for _ in 0..n {
            let head = bytes
                .get(at..at + ADDRESS_BYTES + 3)
                .ok_or(bad("an entry is cut short"))?;
            let a = Address::read_from(&head[..ADDRESS_BYTES]);
            let alive = match head[ADDRESS_BYTES] {
                0 => false,
                1 => true,
                _ => return Err(bad("liveness must be 0 or 1")),
            };
            let len =
                u16::from_le_bytes([head[ADDRESS_BYTES + 1], head[ADDRESS_BYTES + 2]]) as usize;
            at += ADDRESS_BYTES + 3;
            let body = bytes
                .get(at..at + len)
                .ok_or(bad("an entry is cut short"))?;
            at += len;
            let reg =
                Register::decode(body).map_err(|_| bad("an entry's registration is malformed"))?;
            if r.entries.contains_key(&a) {
                return Err(bad("an address appears twice"));
            }
            r.entries.insert(
                a,
                Entry {
                    location: reg.location,
                    notifiers: reg.notifiers,
                    lease: reg.lease,
                    lease_until: now + reg.lease,
                    alive,
                },
            );
        }
        if at != bytes.len() {
            return Err(bad("bytes after the last entry"));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(site: u16, t: u16) -> Address {
        Address::new(1, site, t, 0)
    }
    fn loc(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), port)
    }
    fn reg(port: u16, notifiers: &[&str]) -> Register {
        Register {
            lease: Duration::from_secs(1),
            location: loc(port),
            notifiers: notifiers.iter().map(|p| p.parse().unwrap()).collect(),
        }
    }
    const T0: Instant = Instant(1_000_000_000);

    #[test]
    fn patterns_parse_match_and_print() {
        let p: Pattern = "1.*.3.*".parse().unwrap();
        assert!(p.matches(Address::new(1, 7, 3, 2)));
        assert!(!p.matches(Address::new(1, 7, 4, 2)));
        assert_eq!(p.to_string(), "1.*.3.*");
        assert!("1.2.3".parse::<Pattern>().is_err());
        assert!("1.2.3.x".parse::<Pattern>().is_err());
        assert!("1.2.3.65535".parse::<Pattern>().is_err());
        assert!(Pattern::exact(a(2, 3)).matches(a(2, 3)));
        assert_eq!(decode_pattern(&encode_pattern(&p)).unwrap(), p);
    }

    #[test]
    fn watchers_are_told_of_registration_moves_failure_and_recovery() {
        let mut r = Registry::new(16);
        // CC at site 1 watches every AC (type 1).
        let cc = a(1, 2);
        let ac = a(2, 1);
        assert!(r
            .register(T0, cc, &reg(100, &["1.*.1.*"]))
            .unwrap()
            .is_empty());
        assert!(r.take_notifications().is_empty(), "nobody watches the CC");
        let seen = r.register(T0, ac, &reg(200, &["1.*.2.*"])).unwrap();
        assert_eq!(
            seen,
            vec![(cc, loc(100))],
            "the AC's cache starts with the CC"
        );
        let n = r.take_notifications();
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, cc);
        assert_eq!(n[0].1.change, Change::Registered);
        // Someone claims the live AC's address from elsewhere: refused.
        assert_eq!(
            r.register(T0, ac, &reg(666, &["1.*.2.*"])),
            Err(RegistryError::LiveElsewhere)
        );
        assert!(r.take_notifications().is_empty());
        // A renewal says nothing.
        r.register(T0 + Duration::from_millis(500), ac, &reg(200, &["1.*.2.*"]))
            .unwrap();
        assert!(r.take_notifications().is_empty());
        assert_eq!(r.lookup(ac), Some(loc(200)));
        // The CC's lease runs out first (it was not renewed): the AC hears of it.
        r.handle_timeout(T0 + Duration::from_millis(1000));
        let n = r.take_notifications();
        assert_eq!(n.len(), 1);
        assert_eq!(
            (n[0].0, n[0].1.change, n[0].1.server),
            (ac, Change::Failed, cc)
        );
        assert_eq!(r.lookup(cc), None);
        // It comes back.
        r.register(
            T0 + Duration::from_millis(1200),
            cc,
            &reg(100, &["1.*.1.*"]),
        )
        .unwrap();
        assert_eq!(r.take_notifications()[0].1.change, Change::Recovered);
        // The AC's old place lapses; it registers from its new one: the CC hears where.
        let later = T0 + Duration::from_millis(1600);
        r.handle_timeout(later);
        assert_eq!(r.take_notifications()[0].1.change, Change::Failed);
        r.register(later, ac, &reg(201, &["1.*.2.*"])).unwrap();
        assert_eq!(
            r.take_notifications(),
            vec![(
                cc,
                Notification {
                    change: Change::Recovered,
                    server: ac,
                    location: loc(201),
                }
            )]
        );
        assert!(r.unregister(ac));
        let n = r.take_notifications();
        assert_eq!((n[0].0, n[0].1.change), (cc, Change::Failed));
    }

    #[test]
    fn lookups_find_partners_and_all() {
        let mut r = Registry::new(16);
        for s in [3, 1, 2] {
            r.register(T0, a(s, 5), &reg(300 + s, &[])).unwrap();
        }
        r.register(T0, a(9, 6), &reg(400, &[])).unwrap();
        let p: Pattern = "1.*.5.*".parse().unwrap();
        assert_eq!(r.find_partner(&p), Some((a(1, 5), loc(301))));
        assert_eq!(
            r.find_all(&p),
            vec![
                (a(1, 5), loc(301)),
                (a(2, 5), loc(302)),
                (a(3, 5), loc(303))
            ]
        );
        assert_eq!(
            decode_list(&encode_list(&r.find_all(&p))).unwrap(),
            r.find_all(&p)
        );
        assert_eq!(r.find_partner(&"2.*.*.*".parse().unwrap()), None);
    }

    #[test]
    fn the_registry_is_bounded() {
        let mut r = Registry::new(2);
        r.register(T0, a(1, 1), &reg(1, &[])).unwrap();
        r.register(T0, a(2, 1), &reg(2, &[])).unwrap();
        assert_eq!(
            r.register(T0, a(3, 1), &reg(3, &[])),
            Err(RegistryError::Full)
        );
        // Re-registering one already there is fine.
        r.register(T0, a(2, 1), &reg(2, &[])).unwrap();
        // Found in review: failed servers held their places for ever. The longest failed
        // one makes room now.
        r.handle_timeout(T0 + Duration::from_secs(1));
        r.register(T0 + Duration::from_secs(1), a(3, 1), &reg(3, &[]))
            .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.take_evicted().len(), 1);
    }

    #[test]
    fn a_snapshot_restores_the_registry_and_rejects_garbage() {
        let mut r = Registry::new(16);
        r.register(T0, a(1, 2), &reg(100, &["1.*.1.*", "*.*.*.3"]))
            .unwrap();
        r.register(T0, a(2, 1), &reg(200, &[])).unwrap();
        r.handle_timeout(T0 + Duration::from_secs(2));
        r.register(T0 + Duration::from_secs(2), a(2, 1), &reg(201, &[]))
            .unwrap();
        assert!(r.dirty());
        let snap = r.snapshot();
        assert!(!r.dirty());
        let later = T0 + Duration::from_secs(60);
        let mut back = Registry::restore(&snap, later, 16).unwrap();
        assert_eq!(back.lookup(a(1, 2)), None, "failed stays failed");
        assert_eq!(back.lookup(a(2, 1)), Some(loc(201)));
        assert_eq!(back.snapshot(), snap);
        for bad in [
            &snap[..snap.len() - 1],
            &b"garbage"[..],
            &[snap.clone(), vec![0]].concat(),
        ] {
            assert!(matches!(
                Registry::restore(bad, later, 16),
                Err(RegistryError::BadSnapshot(_))
            ));
        }
        assert!(
            Registry::restore(&snap, later, 1).is_err(),
            "more than entries_max"
        );
    }

    #[test]
    fn payload_decoders_check_every_rule() {
        let r = reg(5, &["1.2.3.*"]);
        assert_eq!(Register::decode(&r.encode()).unwrap(), r);
        let e = r.encode();
        assert_eq!(
            Register::decode(&e[..e.len() - 1]),
            Err(OracleWireError::Short)
        );
        assert_eq!(
            Register::decode(&[e.clone(), vec![1]].concat()),
            Err(OracleWireError::Trailing)
        );
        let mut zero = e.clone();
        zero[..4].fill(0);
        assert_eq!(Register::decode(&zero), Err(OracleWireError::BadLease(0)));
        let mut many = e;
        many[10..12].copy_from_slice(&100u16.to_le_bytes());
        assert_eq!(
            Register::decode(&many),
            Err(OracleWireError::TooManyPatterns(100))
        );
        let n = Notification {
            change: Change::Moved,
            server: a(1, 1),
            location: loc(7),
        };
        assert_eq!(Notification::decode(&n.encode()).unwrap(), n);
        let mut k = n.encode();
        k[0] = 9;
        assert_eq!(
            Notification::decode(&k),
            Err(OracleWireError::UnknownKind(9))
        );
        assert_eq!(
            decode_list(&[200, 0]),
            Err(OracleWireError::TooManyEntries(200))
        );
        assert_eq!(decode_list(&[1, 0]), Err(OracleWireError::Short));
    }
}
