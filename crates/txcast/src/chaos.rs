//! The external checker of chaos runs of groups (issue 23, 2(a)): reads the logs the member
//! processes (`txcast __group-member --chaos-log FILE`) wrote and checks what the ordering
//! protocols promise. `txcast chaos check LOG...` runs it on logs from any hosts, and
//! `tests/netns_group.rs` on the runs it makes.
//!
//! A log is one line per event, each starting with the time in ns since the Unix epoch
//! (CLOCK_REALTIME: comparable across the processes of one machine; across machines only as
//! well as their clocks agree):
//! - `T B <address> <pid> <protocol>`: the member started;
//! - `T V <view> [<member,member,...>]`: a view installed (`?`: the one it started in; a
//!   sequencer group's joins and leaves are views `s<seq>`, their list unknown, so not
//!   written, until a rebuilt view gave the whole list);
//! - `T O <address>`: the member that orders (sequencer, token holder, orderer) changed;
//! - `T S <msg_id> <hash>`: a send queued;
//! - `T A <msg_id>`: that send acknowledged to the sender: `Group::wait_sent` returned. For
//!   the sequencer that is when `send` returns, the message ordered and held by r members
//!   besides the sequencer; for the layered protocols (totem, total, dynseq, dynord) it is
//!   the sender's own delivery of the message;
//! - `T M <seq> <sender> <msg_id> <hash>`: a delivery;
//! - `T E <done|expelled|error ...>`: the end. A log without one is of a process killed.
//!
//! A *survivor* ended `done`. Checked: no duplicates; FIFO per sender (without gaps for
//! senders that survived); integrity (each delivery is of a message its sender logged
//! sending, with that hash); one total order (common messages in the same relative order,
//! between survivors, and for the sequencer between every two members with one record per
//! sequence number, as r = 1 makes the order uniform); virtual synchrony (one member list
//! per view id; members that install the same two consecutive views delivered the same
//! messages between them); and no loss: every acknowledged send of a surviving sender (of
//! any sender for the sequencer, r = 1) is delivered by every survivor.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Writes a member's log: one `write` per line, so a kill -9 leaves whole lines.
pub struct Writer {
    file: std::fs::File,
}

impl Writer {
    pub fn create(path: &Path) -> std::io::Result<Writer> {
        Ok(Writer {
            file: std::fs::File::create(path)?,
        })
    }

    fn line(&mut self, what: fmt::Arguments<'_>) {
        let l = format!("{} {what}\n", now_ns());
        // A log that cannot be written shows as a bad log to the checker.
        let _ = self.file.write_all(l.as_bytes());
    }

    pub fn begin(&mut self, me: impl fmt::Display, protocol: &str) {
        self.line(format_args!("B {me} {} {protocol}", std::process::id()));
    }

    pub fn view<A: fmt::Display>(&mut self, id: &str, members: &[A]) {
        let m: Vec<String> = members.iter().map(|a| a.to_string()).collect();
        self.line(format_args!("V {id} {}", m.join(",")));
    }

    pub fn holder(&mut self, a: impl fmt::Display) {
        self.line(format_args!("O {a}"));
    }

    pub fn send(&mut self, msg_id: u64, hash: u64) {
        self.line(format_args!("S {msg_id} {hash:016x}"));
    }

    pub fn ack(&mut self, msg_id: u64) {
        self.line(format_args!("A {msg_id}"));
    }

    pub fn deliver(&mut self, seq: u64, sender: impl fmt::Display, msg_id: u64, hash: u64) {
        self.line(format_args!("M {seq} {sender} {msg_id} {hash:016x}"));
    }

    pub fn end(&mut self, why: &str) {
        self.line(format_args!("E {why}"));
    }
}

/// A message: its sender and the sender's number for it.
pub type MsgKey = (String, u64);

#[derive(Clone, Debug)]
pub enum Entry {
    View {
        t: u64,
        id: String,
        members: Vec<String>,
    },
    Msg {
        t: u64,
        seq: u64,
        key: MsgKey,
        hash: String,
    },
}

#[derive(Clone, Debug, Default)]
pub struct Send {
    pub t: u64,
    pub hash: String,
    pub acked: Option<u64>,
}

/// One member's log, parsed.
#[derive(Clone, Debug, Default)]
pub struct MemberLog {
    /// Where it came from (for messages).
    pub name: String,
    pub addr: String,
    pub pid: u32,
    pub protocol: String,
    pub entries: Vec<Entry>,
    pub sends: BTreeMap<u64, Send>,
    /// When the member that orders changed, and to whom.
    pub holders: Vec<(u64, String)>,
    /// How it ended (`None`: killed).
    pub end: Option<String>,
}

impl MemberLog {
    pub fn survived(&self) -> bool {
        self.end.as_deref() == Some("done")
    }

    fn messages(&self) -> impl Iterator<Item = (u64, u64, &MsgKey, &str)> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Msg { t, seq, key, hash } => Some((*t, *seq, key, hash.as_str())),
            _ => None,
        })
    }

    /// Parses a log; lines it cannot read are returned as errors.
    pub fn parse(name: &str, text: &str) -> (MemberLog, Vec<String>) {
        let mut m = MemberLog {
            name: name.to_string(),
            ..MemberLog::default()
        };
        let mut bad = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let ok = (|| {
                let t: u64 = w.first()?.parse().ok()?;
                match *w.get(1)? {
                    "B" => {
                        m.addr = w.get(2)?.to_string();
                        m.pid = w.get(3)?.parse().ok()?;
                        m.protocol = w.get(4)?.to_string();
                    }
                    "V" => m.entries.push(Entry::View {
                        t,
                        id: w.get(2)?.to_string(),
                        members: w
                            .get(3)
                            .map(|l| l.split(',').map(str::to_string).collect())
                            .unwrap_or_default(),
                    }),
                    "O" => m.holders.push((t, w.get(2)?.to_string())),
                    "S" => {
                        let id = w.get(2)?.parse().ok()?;
                        let s = Send {
                            t,
                            hash: w.get(3)?.to_string(),
                            acked: None,
                        };
                        if m.sends.insert(id, s).is_some() {
                            return None;
                        }
                    }
                    "A" => {
                        let id: u64 = w.get(2)?.parse().ok()?;
                        m.sends.get_mut(&id)?.acked = Some(t);
                    }
                    "M" => m.entries.push(Entry::Msg {
                        t,
                        seq: w.get(2)?.parse().ok()?,
                        key: (w.get(3)?.to_string(), w.get(4)?.parse().ok()?),
                        hash: w.get(5)?.to_string(),
                    }),
                    "E" => m.end = Some(w[2..].join(" ")),
                    _ => return None,
                }
                Some(())
            })();
            if ok.is_none() {
                bad.push(format!("{name}:{}: bad line {line:?}", i + 1));
            }
        }
        (m, bad)
    }
}

/// The kinds of violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A log the checker cannot read.
    Log,
    Duplicate,
    Fifo,
    Integrity,
    Order,
    Synchrony,
    /// An acknowledged send not delivered by a survivor.
    Lost,
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: Kind,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.what)
    }
}

/// What the checker found, and the run's figures.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    pub members: usize,
    pub survivors: usize,
    pub sent: usize,
    pub acked: usize,
    /// Deliveries, at every member.
    pub delivered: usize,
    /// Distinct messages delivered somewhere.
    pub messages: usize,
    /// Acknowledged messages some survivor did not deliver.
    pub acked_lost: usize,
}

impl Report {
    pub fn count(&self, k: Kind) -> usize {
        self.violations.iter().filter(|v| v.kind == k).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} members ({} survived): {} sent, {} acknowledged, {} distinct delivered \
             ({} deliveries), {} acknowledged and lost, {} violations",
            self.members,
            self.survivors,
            self.sent,
            self.acked,
            self.messages,
            self.delivered,
            self.acked_lost,
            self.violations.len()
        )
    }
}

/// At most this many violations of one kind are listed for one pair or member.
const SHOWN_MAX: usize = 3;

/// Checks the logs of one run (every member's, killed ones included).
pub fn check(logs: &[MemberLog]) -> Report {
    let mut r = Report {
        members: logs.len(),
        survivors: logs.iter().filter(|l| l.survived()).count(),
        ..Report::default()
    };
    let mut v = |kind: Kind, what: String| r.violations.push(Violation { kind, what });
    let sequencer = logs.iter().any(|l| l.protocol == "sequencer");
    let by_addr: HashMap<&str, &MemberLog> = logs.iter().map(|l| (l.addr.as_str(), l)).collect();
    let mut everywhere: HashMap<&MsgKey, &str> = HashMap::new();
    for l in logs {
        // Duplicates, FIFO, integrity.
        let mut seen: HashSet<&MsgKey> = HashSet::new();
        let mut last: HashMap<&str, u64> = HashMap::new();
        let mut shown = 0;
        for (_, _, key, hash) in l.messages() {
            if !seen.insert(key) {
                v(
                    Kind::Duplicate,
                    format!("{} delivered {key:?} twice", l.name),
                );
                continue;
            }
            let (sender, id) = (key.0.as_str(), key.1);
            let s = by_addr.get(sender);
            if let Some(&prev) = last.get(sender) {
                if id <= prev {
                    v(
                        Kind::Fifo,
                        format!("{} delivered {sender}'s {id} after its {prev}", l.name),
                    );
                } else if id != prev + 1 && s.is_some_and(|s| s.survived()) && shown < SHOWN_MAX {
                    shown += 1;
                    v(
                        Kind::Fifo,
                        format!(
                            "{} delivered {sender}'s {id} after its {prev}: a gap",
                            l.name
                        ),
                    );
                }
            }
            last.insert(sender, id);
            match s.map(|s| (s.sends.get(&id), s)) {
                Some((Some(sent), _)) if sent.hash != hash => v(
                    Kind::Integrity,
                    format!(
                        "{} delivered {key:?} with hash {hash}, sent with {}",
                        l.name, sent.hash
                    ),
                ),
                // A killed sender may have sent what it had no time to log.
                Some((None, s)) if s.end.is_some() || s.sends.keys().any(|&k| k > id) => v(
                    Kind::Integrity,
                    format!("{} delivered {key:?}, which was never sent", l.name),
                ),
                _ => {}
            }
            match everywhere.get(key) {
                Some(h) if *h != hash => v(
                    Kind::Integrity,
                    format!("{key:?} delivered with hashes {h} and {hash}"),
                ),
                _ => {
                    everywhere.insert(key, hash);
                }
            }
            r.delivered += 1;
        }
    }
    r.messages = everywhere.len();
    // One total order.
    for (i, a) in logs.iter().enumerate() {
        for b in &logs[i + 1..] {
            if !(sequencer || a.survived() && b.survived()) {
                continue;
            }
            let pos: HashMap<&MsgKey, usize> =
                a.messages().enumerate().map(|(i, m)| (m.2, i)).collect();
            let mut prev: Option<(usize, &MsgKey)> = None;
            for (_, _, key, _) in b.messages() {
                let Some(&p) = pos.get(key) else { continue };
                if let Some((q, pk)) = prev {
                    if p < q {
                        v(
                            Kind::Order,
                            format!(
                                "{} delivered {pk:?} before {key:?}, {} after",
                                b.name, a.name
                            ),
                        );
                        break;
                    }
                }
                prev = Some((p, key));
            }
        }
    }
    if sequencer {
        let mut at: HashMap<u64, (&MsgKey, &str)> = HashMap::new();
        for l in logs {
            for (_, seq, key, _) in l.messages() {
                match at.get(&seq) {
                    Some((k, who)) if *k != key => {
                        v(
                            Kind::Order,
                            format!("seq {seq}: {who} delivered {k:?}, {} {key:?}", l.name),
                        );
                    }
                    _ => {
                        at.insert(seq, (key, &l.name));
                    }
                }
            }
        }
    }
    // Virtual synchrony.
    let mut lists: HashMap<&str, (&Vec<String>, &str)> = HashMap::new();
    let mut between: HashMap<(&str, &str), (HashSet<&MsgKey>, &str)> = HashMap::new();
    for l in logs {
        let mut view: Option<&str> = None;
        let mut since: HashSet<&MsgKey> = HashSet::new();
        for e in &l.entries {
            match e {
                Entry::Msg { key, .. } => {
                    since.insert(key);
                }
                Entry::View { id, members, .. } => {
                    // `?`: the view it started in; no list: one it does not know.
                    if id != "?" && !members.is_empty() {
                        match lists.get(id.as_str()) {
                            Some((m, who)) if *m != members => v(
                                Kind::Synchrony,
                                format!("view {id} is {m:?} at {who}, {members:?} at {}", l.name),
                            ),
                            _ => {
                                lists.insert(id, (members, &l.name));
                            }
                        }
                    }
                    let got = std::mem::take(&mut since);
                    if let Some(from) = view.filter(|f| *f != "?") {
                        match between.get(&(from, id.as_str())) {
                            Some((set, who)) if *set != got => {
                                let mut only_a: Vec<_> = set.difference(&got).collect();
                                let mut only_b: Vec<_> = got.difference(set).collect();
                                only_a.sort();
                                only_b.sort();
                                only_a.truncate(SHOWN_MAX);
                                only_b.truncate(SHOWN_MAX);
                                v(
                                    Kind::Synchrony,
                                    format!(
                                        "between views {from} and {id}: {who} delivered \
                                         {only_a:?}... that {} did not, and it {only_b:?}... \
                                         that {who} did not",
                                        l.name
                                    ),
                                );
                            }
                            _ => {
                                between.insert((from, id), (got, &l.name));
                            }
                        }
                    }
                    view = Some(id);
                }
            }
        }
    }
    // No acknowledged send lost.
    let survivors: Vec<(&MemberLog, HashSet<&MsgKey>)> = logs
        .iter()
        .filter(|l| l.survived())
        .map(|l| (l, l.messages().map(|m| m.2).collect()))
        .collect();
    for s in logs {
        r.sent += s.sends.len();
        r.acked += s.sends.values().filter(|x| x.acked.is_some()).count();
        if !(sequencer || s.survived()) {
            continue;
        }
        let mut shown = 0;
        for (id, _) in s.sends.iter().filter(|x| x.1.acked.is_some()) {
            let key = (s.addr.clone(), *id);
            let missing: Vec<&str> = survivors
                .iter()
                .filter(|(_, got)| !got.contains(&key))
                .map(|(l, _)| l.name.as_str())
                .collect();
            if !missing.is_empty() {
                r.acked_lost += 1;
                if shown < SHOWN_MAX {
                    shown += 1;
                    v(
                        Kind::Lost,
                        format!(
                            "{}'s {id} was acknowledged but {missing:?} never delivered it",
                            s.name
                        ),
                    );
                }
            }
        }
    }
    r
}

/// Reads every log in `paths` (killed members' too); unreadable lines are violations.
pub fn read(paths: &[PathBuf]) -> Result<(Vec<MemberLog>, Vec<Violation>), String> {
    let mut logs = Vec::new();
    let mut bad = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let name = p.file_name().map_or(p.display().to_string(), |n| {
            n.to_string_lossy().into_owned()
        });
        let (l, b) = MemberLog::parse(&name, &text);
        bad.extend(b.into_iter().map(|what| Violation {
            kind: Kind::Log,
            what,
        }));
        logs.push(l);
    }
    Ok((logs, bad))
}

/// Recovery after a fault at `fault_ns`: how long until every survivor (of `logs`)
/// delivered a message sent after the fault (`delivering`), and until every survivor
/// installed a view without `gone` (`view`), if they did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    pub delivering_ns: Option<u64>,
    pub view_ns: Option<u64>,
}

pub fn recovery(logs: &[MemberLog], fault_ns: u64, gone: &str) -> Recovery {
    let sent_at: HashMap<(&str, u64), u64> = logs
        .iter()
        .flat_map(|l| {
            l.sends
                .iter()
                .map(move |(id, s)| ((l.addr.as_str(), *id), s.t))
        })
        .collect();
    let mut rec = Recovery {
        delivering_ns: Some(0),
        view_ns: Some(0),
    };
    for l in logs.iter().filter(|l| l.survived()) {
        let first = l
            .messages()
            .find(|(t, _, key, _)| {
                *t > fault_ns
                    && sent_at
                        .get(&(key.0.as_str(), key.1))
                        .is_some_and(|&s| s > fault_ns)
            })
            .map(|m| m.0 - fault_ns);
        let view = l.entries.iter().find_map(|e| match e {
            Entry::View { t, members, .. }
                if *t > fault_ns && !members.iter().any(|m| m == gone) =>
            {
                Some(t - fault_ns)
            }
            _ => None,
        });
        rec.delivering_ns = rec.delivering_ns.zip(first).map(|(a, b)| a.max(b));
        rec.view_ns = rec.view_ns.zip(view).map(|(a, b)| a.max(b));
    }
    rec
}

/// The `p`-th percentile (0..=100) of `xs` by the nearest rank.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0 * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// The options of `txcast chaos`.
#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    #[command(subcommand)]
    pub command: ChaosCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ChaosCommand {
    /// Checks the logs of a group's members (`txcast __group-member --chaos-log FILE`, one
    /// per member, killed ones too): total order, no duplicates, FIFO, virtual synchrony,
    /// no acknowledged send lost. Exits 1 if anything is violated
    Check {
        /// The members' logs
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        /// A fault's time (ns since the Unix epoch) and the member it removed
        /// (`TIME:ADDRESS`): prints the recovery after it
        #[arg(long, value_name = "NS:ADDRESS")]
        fault: Vec<String>,
    },
    /// Checks the logs of a CRMem mirror's nodes (`txcast crmem --chaos-log FILE`, one per
    /// node and incarnation, killed ones too): copies identical, money conserved, no
    /// acknowledged commit lost, no transaction acknowledged twice. Exits 1 if anything is
    /// violated
    Crmem {
        /// The nodes' logs
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        /// A fault's time (ns since the Unix epoch) and the node it removed (`TIME:NODE`):
        /// prints how long after it another node acknowledged a commit
        #[arg(long, value_name = "NS:NODE")]
        fault: Vec<String>,
    },
}

/// `txcast chaos check LOG... [--fault NS:ADDRESS]...`: exit 1 on a violation, 2 on
/// unreadable files or a malformed fault.
pub fn check_command(logs: &[PathBuf], fault: &[String]) -> i32 {
    let (logs, bad) = match read(logs) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("txcast chaos check: {e}");
            return 2;
        }
    };
    let mut r = check(&logs);
    r.violations.splice(0..0, bad);
    for v in &r.violations {
        println!("{v}");
    }
    println!("{r}");
    let kinds = [
        Kind::Log,
        Kind::Duplicate,
        Kind::Fifo,
        Kind::Integrity,
        Kind::Order,
        Kind::Synchrony,
        Kind::Lost,
    ];
    let by_kind: Vec<String> = kinds
        .iter()
        .filter(|k| r.count(**k) > 0)
        .map(|k| format!("{k:?} {}", r.count(*k)))
        .collect();
    if !by_kind.is_empty() {
        println!("violations by kind: {}", by_kind.join(", "));
    }
    let mut delivering = Vec::new();
    for f in fault {
        let Some((t, who)) = f
            .split_once(':')
            .and_then(|(t, w)| Some((t.parse().ok()?, w)))
        else {
            eprintln!("txcast chaos check: --fault {f}: NS:ADDRESS");
            return 2;
        };
        let rec = recovery(&logs, t, who);
        delivering.extend(rec.delivering_ns.map(|n| n as f64 / 1e6));
        let ms = |x: Option<u64>| x.map_or("never".into(), |n| format!("{:.1} ms", n as f64 / 1e6));
        println!(
            "fault at {t} ({who}): delivering again after {}, view without it after {}",
            ms(rec.delivering_ns),
            ms(rec.view_ns)
        );
    }
    if delivering.len() > 1 {
        println!(
            "delivering again after a fault: p50 {:.1} ms, p99 {:.1} ms",
            percentile(&delivering, 50.0),
            percentile(&delivering, 99.0)
        );
    }
    i32::from(!r.violations.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three members a, b, c of `protocol`; each sends 1, 2 and 3 (acknowledged), and
    /// everyone delivers a1 b1 c1 a2 b2 c2 a3 b3 c3 in view v1, then view v2 of all three.
    fn good(protocol: &str) -> Vec<String> {
        ["a", "b", "c"]
            .iter()
            .map(|me| {
                let mut l = format!("1 B {me} 1 {protocol}\n2 V ? a,b,c\n3 V v1 a,b,c\n");
                for id in 1..=3 {
                    l += &format!("{} S {id} h{me}{id}\n", 10 + id);
                }
                let mut seq = 0;
                for id in 1..=3 {
                    for s in ["a", "b", "c"] {
                        seq += 1;
                        l += &format!("{} M {seq} {s} {id} h{s}{id}\n", 20 + seq);
                    }
                }
                l += "30 A 1\n31 A 2\n32 A 3\n40 V v2 a,b,c\n50 E done\n";
                l
            })
            .collect()
    }

    fn run(texts: &[String]) -> Report {
        let logs: Vec<MemberLog> = texts
            .iter()
            .zip(["a", "b", "c"])
            .map(|(t, n)| {
                let (l, bad) = MemberLog::parse(n, t);
                assert!(bad.is_empty(), "{bad:?}");
                l
            })
            .collect();
        check(&logs)
    }

    /// `good(protocol)` with member `i`'s log changed by `f` shows violations of `kind`.
    fn expect(protocol: &str, i: usize, f: impl Fn(&str) -> String, kind: Kind) {
        let mut t = good(protocol);
        t[i] = f(&t[i]);
        let r = run(&t);
        assert!(r.count(kind) > 0, "{kind:?} not found: {:?}", r.violations);
    }

    #[test]
    fn good_logs_pass() {
        for p in ["sequencer", "totem"] {
            let r = run(&good(p));
            assert!(r.violations.is_empty(), "{p}: {:?}", r.violations);
            assert_eq!((r.sent, r.acked, r.messages, r.delivered), (9, 9, 9, 27));
            assert_eq!(r.acked_lost, 0);
        }
    }

    #[test]
    fn the_checker_reports_each_kind_of_violation() {
        // b delivers a's 1 twice.
        expect(
            "totem",
            1,
            |t| t.replace("40 V", "39 M 10 a 1 ha1\n40 V"),
            Kind::Duplicate,
        );
        // b delivers a's 2 before its 1 (and so out of the others' order too).
        expect(
            "totem",
            1,
            |t| {
                t.replace("M 1 a 1 ha1", "M 1 a 2 ha2")
                    .replace("M 4 a 2 ha2", "M 4 a 1 ha1")
            },
            Kind::Fifo,
        );
        // c delivers b1 before a1: another order.
        expect(
            "totem",
            2,
            |t| {
                t.replace("M 1 a 1 ha1", "M 1 b 1 hb1")
                    .replace("M 2 b 1 hb1", "M 2 a 1 ha1")
            },
            Kind::Order,
        );
        // A payload that is not what was sent.
        expect(
            "totem",
            0,
            |t| t.replace("M 5 b 2 hb2", "M 5 b 2 hxx"),
            Kind::Integrity,
        );
        // A message nobody sent.
        expect(
            "totem",
            0,
            |t| t.replace("40 V", "39 M 7 b 9 hb9\n40 V"),
            Kind::Integrity,
        );
        // c misses b's 2 between v1's start and v2 (and it was acknowledged).
        expect(
            "totem",
            2,
            |t| t.replace("25 M 5 b 2 hb2\n", ""),
            Kind::Synchrony,
        );
        expect(
            "totem",
            2,
            |t| t.replace("25 M 5 b 2 hb2\n", ""),
            Kind::Lost,
        );
        // Two member lists for one view.
        expect(
            "totem",
            1,
            |t| t.replace("V v2 a,b,c", "V v2 a,b"),
            Kind::Synchrony,
        );
        // The sequencer's order is uniform: a killed member counts; one record per seq.
        expect(
            "sequencer",
            2,
            |t| {
                t.replace("M 1 a 1 ha1", "M 1 b 1 hb1")
                    .replace("M 2 b 1 hb1", "M 2 a 1 ha1")
                    .replace("50 E done\n", "")
            },
            Kind::Order,
        );
        // A gap in a surviving sender's FIFO stream.
        expect(
            "totem",
            1,
            |t| t.replace("25 M 5 b 2 hb2\n", ""),
            Kind::Fifo,
        );
        // Unreadable lines.
        let (_, bad) = MemberLog::parse("x", "1 B a 1 totem\nnonsense\n2 Q\n3 A 9\n");
        assert_eq!(bad.len(), 3, "{bad:?}");
    }

    #[test]
    fn killed_members_are_held_to_less() {
        // Layered: a member killed (no end line) may deliver in another order and miss
        // messages; its own acknowledged sends need not survive.
        let mut t = good("totem");
        t[2] = t[2]
            .replace("M 1 a 1 ha1", "M 1 b 1 hb1")
            .replace("M 2 b 1 hb1", "M 2 a 1 ha1")
            .replace("40 V v2 a,b,c\n50 E done\n", "");
        for l in &mut t[..2] {
            *l = l
                .replace("23 M 3 c 1 hc1\n", "")
                .replace("26 M 6 c 2 hc2\n", "")
                .replace("29 M 9 c 3 hc3\n", "")
                .replace("V v2 a,b,c", "V v2 a,b");
        }
        let r = run(&t);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.survivors, 2);
    }

    #[test]
    fn recovery_is_measured_from_the_fault() {
        let (a, _) = MemberLog::parse(
            "a",
            "1 B a 1 totem\n100 S 1 x\n150 M 1 a 1 x\n200 S 2 y\n260 V v2 a\n300 M 2 a 2 y\n400 E done\n",
        );
        let r = recovery(&[a], 180, "b");
        assert_eq!((r.delivering_ns, r.view_ns), (Some(120), Some(80)));
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 99.0), 4.0);
    }
}
