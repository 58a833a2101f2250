//! The external checker of CRMem chaos runs (issue 23, 2(c)): reads the logs the nodes
//! (`txcast crmem --chaos-log FILE`, see `crmem_node.rs` for the lines) wrote and checks what
//! a mirror promises. `txcast chaos crmem LOG...` runs it on logs from any hosts, and
//! `tests/netns_crmem.rs` on the runs it makes.
//!
//! Checked: every node that ended (on a signal, with an `E` line) has the same copy (counter
//! and digest); each such copy's accounts, tellers and branches sum to the money of
//! transactions 1..=counter (each applied once: a transaction lost, applied twice or half
//! would change a sum); no transaction number was acknowledged twice (two primaries at once);
//! and no acknowledged commit is lost: every acknowledged number is at most the copies'
//! counter. A log of a node killed has no `E` line; its acknowledgements count all the same.

use std::collections::HashMap;
use std::path::PathBuf;

/// An ended node's copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    pub counter: u64,
    pub digest: String,
    pub sums: (i64, i64, i64),
}

/// One node's log.
#[derive(Debug, Default)]
pub struct NodeLog {
    pub name: String,
    /// The node and when it started (its `B` line).
    pub began: Option<(u16, u64)>,
    /// (time, transaction number) of each acknowledged commit.
    pub acked: Vec<(u64, u64)>,
    /// When the node was promoted to primary.
    pub promoted: Vec<u64>,
    pub end: Option<End>,
}

impl NodeLog {
    /// Parses a log; the lines it could not read are returned as violations.
    pub fn parse(name: &str, text: &str) -> (NodeLog, Vec<String>) {
        let mut log = NodeLog {
            name: name.to_string(),
            ..NodeLog::default()
        };
        let mut bad = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let ok = (|| -> Option<()> {
                let t: u64 = w.first()?.parse().ok()?;
                match w.get(1..)? {
                    ["B", k, _] => log.began = Some((k.parse().ok()?, t)),
                    ["R", "promoted"] => log.promoted.push(t),
                    ["R", ..] => {}
                    ["A", i] => log.acked.push((t, i.parse().ok()?)),
                    ["E", c, d, a, tl, b] => {
                        log.end = Some(End {
                            counter: c.parse().ok()?,
                            digest: d.to_string(),
                            sums: (a.parse().ok()?, tl.parse().ok()?, b.parse().ok()?),
                        })
                    }
                    _ => return None,
                }
                Some(())
            })();
            if ok.is_none() {
                bad.push(format!("{name}:{}: unreadable line {line:?}", n + 1));
            }
        }
        (log, bad)
    }
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    pub nodes: usize,
    pub ended: usize,
    pub acked: usize,
    pub max_acked: u64,
    /// The ended copies' counter (the first one's).
    pub counter: Option<u64>,
    pub violations: Vec<String>,
}

/// Checks the logs; `expected(c)` is the money of transactions 1..=c.
pub fn check(logs: &[NodeLog], expected: impl Fn(u64) -> i64) -> Report {
    let mut r = Report {
        nodes: logs.len(),
        ..Report::default()
    };
    let mut by_number: HashMap<u64, &str> = HashMap::new();
    for l in logs {
        for &(_, i) in &l.acked {
            r.acked += 1;
            r.max_acked = r.max_acked.max(i);
            if let Some(other) = by_number.insert(i, &l.name) {
                r.violations.push(format!(
                    "transaction {i} acknowledged twice ({other} and {})",
                    l.name
                ));
            }
        }
    }
    let ended: Vec<(&str, &End)> = logs
        .iter()
        .filter_map(|l| Some((l.name.as_str(), l.end.as_ref()?)))
        .collect();
    r.ended = ended.len();
    let Some(&(first_name, first)) = ended.first() else {
        r.violations
            .push("no node ended with its copy (an E line)".into());
        return r;
    };
    r.counter = Some(first.counter);
    for &(name, e) in &ended {
        if (e.counter, &e.digest) != (first.counter, &first.digest) {
            r.violations.push(format!(
                "copies differ: {first_name} counter {} digest {}, {name} counter {} digest {}",
                first.counter, first.digest, e.counter, e.digest
            ));
        }
        let want = expected(e.counter);
        if e.sums != (want, want, want) {
            r.violations.push(format!(
                "money not conserved at {name}: sums {:?}, transactions 1..={} move {want}",
                e.sums, e.counter
            ));
        }
        if r.max_acked > e.counter {
            r.violations.push(format!(
                "acknowledged commit lost: transaction {} acknowledged, {name}'s copy holds 1..={}",
                r.max_acked, e.counter
            ));
        }
    }
    r
}

/// The first commit acknowledged after `fault_ns` by any node but the incarnation of node
/// `gone` the fault removed (one started before it), that long after it.
pub fn recovery_ns(logs: &[NodeLog], fault_ns: u64, gone: u16) -> Option<u64> {
    logs.iter()
        .filter(|l| !l.began.is_some_and(|(k, t)| k == gone && t < fault_ns))
        .flat_map(|l| l.acked.iter())
        .filter(|(t, _)| *t > fault_ns)
        .map(|(t, _)| t - fault_ns)
        .min()
}

/// The first promotion after `fault_ns`, that long after it.
pub fn promotion_ns(logs: &[NodeLog], fault_ns: u64) -> Option<u64> {
    logs.iter()
        .flat_map(|l| l.promoted.iter())
        .filter(|&&t| t > fault_ns)
        .map(|t| t - fault_ns)
        .min()
}

/// `txcast chaos crmem LOG... [--fault NS:NODE]...`: exit 1 on a violation, 2 on unreadable
/// files or a malformed fault.
pub fn run(paths: &[PathBuf], faults: &[String]) -> i32 {
    let mut parsed = Vec::new();
    for f in faults {
        match f
            .split_once(':')
            .and_then(|(t, k)| Some((t.parse::<u64>().ok()?, k.parse::<u16>().ok()?)))
        {
            Some(x) => parsed.push(x),
            None => {
                eprintln!("txcast chaos crmem: --fault {f}: NS:NODE");
                return 2;
            }
        }
    }
    let mut logs = Vec::new();
    let mut violations = Vec::new();
    for p in paths {
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("txcast chaos crmem: {}: {e}", p.display());
                return 2;
            }
        };
        let (l, bad) = NodeLog::parse(&p.display().to_string(), &text);
        logs.push(l);
        violations.extend(bad);
    }
    let mut r = check(&logs, crate::crmem_node::expected_total);
    r.violations.splice(0..0, violations);
    for v in &r.violations {
        println!("{v}");
    }
    println!(
        "{} nodes, {} ended with their copy; {} commits acknowledged (the newest transaction {}); copies' counter {}; {} violations",
        r.nodes,
        r.ended,
        r.acked,
        r.max_acked,
        r.counter.map_or("none".into(), |c| c.to_string()),
        r.violations.len()
    );
    let mut gaps = Vec::new();
    for &(f, gone) in &parsed {
        let rec = recovery_ns(&logs, f, gone);
        gaps.extend(rec.map(|n| n as f64 / 1e6));
        let ms = |x: Option<u64>| x.map_or("never".into(), |n| format!("{:.1} ms", n as f64 / 1e6));
        println!(
            "fault at {f} (node {gone}): committing again after {} (a backup promoted after {})",
            ms(rec),
            ms(promotion_ns(&logs, f))
        );
    }
    if gaps.len() > 1 {
        println!(
            "committing again after a fault: p50 {:.1} ms, p99 {:.1} ms",
            crate::chaos::percentile(&gaps, 50.0),
            crate::chaos::percentile(&gaps, 99.0)
        );
    }
    i32::from(!r.violations.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transaction i moves i.
    fn money(c: u64) -> i64 {
        (1..=c as i64).sum()
    }

    fn logs(texts: &[&str]) -> Vec<NodeLog> {
        texts
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let (l, bad) = NodeLog::parse(&format!("n{k}"), t);
                assert!(bad.is_empty(), "{bad:?}");
                l
            })
            .collect()
    }

    /// n0 acknowledged 1-3 and was killed; n1 took over, acknowledged 4-5; n1 and n2 ended
    /// with counter 5.
    const KILLED: &str = "1 B 0 7\n2 A 1\n3 A 2\n4 A 3\n";
    const TOOK_OVER: &str = "1 B 1 8\n9 R promoted\n10 A 4\n11 A 5\n20 E 5 00ab 15 15 15\n";
    const BACKUP: &str = "1 B 2 9\n20 E 5 00ab 15 15 15\n";

    #[test]
    fn a_good_run_passes_and_gives_its_recovery() {
        let l = logs(&[KILLED, TOOK_OVER, BACKUP]);
        let r = check(&l, money);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(
            (r.acked, r.max_acked, r.ended, r.counter),
            (5, 5, 2, Some(5))
        );
        // Node 0's own late acknowledgement (at 4) is not a recovery from its kill at 3.
        assert_eq!(recovery_ns(&l, 3, 0), Some(7));
        assert_eq!(recovery_ns(&l, 11, 0), None);
        assert_eq!(promotion_ns(&l, 3), Some(6));
    }

    #[test]
    fn each_broken_promise_is_found() {
        let cases: [(&[&str], &str); 5] = [
            // The survivors hold only 1..=2 though 3 was acknowledged.
            (
                &[KILLED, "1 B 1 8\n20 E 2 00aa 3 3 3\n"],
                "acknowledged commit lost",
            ),
            (
                &[KILLED, TOOK_OVER, "20 E 5 00ac 15 15 15\n"],
                "copies differ",
            ),
            (&[KILLED, "20 E 5 00ab 15 14 15\n"], "money not conserved"),
            (
                &[KILLED, "5 A 3\n20 E 5 00ab 15 15 15\n"],
                "acknowledged twice",
            ),
            (&[KILLED], "no node ended"),
        ];
        for (texts, want) in cases {
            let r = check(&logs(texts), money);
            assert!(
                r.violations.iter().any(|v| v.contains(want)),
                "{want}: {:?}",
                r.violations
            );
        }
    }

    #[test]
    fn unreadable_lines_are_reported() {
        let (_, bad) = NodeLog::parse("x", "1 A\nnope\n2 E 1 ab 1 1\n3 A 4\n");
        assert_eq!(bad.len(), 3, "{bad:?}");
    }
}
