//! Several sites of one cluster in one process (a thread per site, and one per log writer):
//! the embedded cluster of `txcast dc` and of the tests. The sites talk through their ports
//! exactly as separate processes would.

use crate::db::Totals;
use crate::driver::{
    engine_config, run_site, ClusterConfig, Load, RaidError, RunControl, SiteReport,
};
use crate::site::{count_cause, Cause};
use crate::stats::Histogram;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What a DebitCredit load did, over every site: a run of the embedded cluster
/// ([`run_embedded`]) or of the load generator against running sites
/// ([`crate::remote::run_remote`]). The generator sees only what its clients heard and the
/// sites' audits, so `retries` and `per_site` are empty for it, and `refused`, `unanswered`
/// and `unreachable` are its clients' alone.
#[derive(Clone, Debug)]
pub struct DcReport {
    pub sites: u16,
    pub clients_per_site: usize,
    /// The measured time (after the warm-up).
    pub measured: Duration,
    /// Transfers committed in the measured time.
    pub committed: u64,
    /// Committed per second of the measured time.
    pub tps: f64,
    /// Commit latency (submit to acknowledgement at the origin), µs.
    pub latency_us: Histogram,
    /// Attempts retried, by cause.
    pub retries: Vec<(&'static str, u64)>,
    /// Transfers given up, by cause.
    pub given_up: Vec<(Cause, u64)>,
    /// Requests a site refused (malformed, or a site that takes no work).
    pub refused: u64,
    /// Transfers whose outcome their site could not tell (applied everywhere or nowhere).
    pub unknown: u64,
    /// Requests with no reply within the generator's reply timeout (their outcome unknown to
    /// the client: a site that crashed with them may have committed them).
    pub unanswered: u64,
    /// Transfers not sent because their site's port was unreachable (sent again later).
    pub unreachable: u64,
    /// Each site's totals and digest at the end.
    pub audits: Vec<(Totals, u64)>,
    /// Every site's totals satisfy DebitCredit's invariant.
    pub conserved: bool,
    /// Every site holds the same copy (tuples and history).
    pub identical: bool,
    /// Site 0's totals.
    pub totals: Totals,
    /// Each site's own report (the embedded cluster's runs only).
    pub per_site: Vec<SiteReport>,
    /// Whether every acknowledged transfer is in the copies (the load generator against a
    /// running cluster only).
    pub accounting: Option<Accounting>,
}

/// The load generator's check that no acknowledged transfer was lost: the money the
/// accounts gained during the run (site 0's audit at the end against its audit before the
/// load) must be the acknowledged transfers' deltas plus those of some of the transfers
/// whose outcome is unknown (unanswered, or unknown to their site). A transfer lost whole
/// keeps DebitCredit's sums equal; this finds it. It assumes the generator was the cluster's
/// only load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accounting {
    /// Transfers acknowledged as committed (the warm-up's and the drain's too).
    pub acknowledged: u64,
    /// Transfers whose outcome the generator does not know.
    pub uncertain: u64,
    /// The accounts' gain matches; `None` when there were more than
    /// [`UNCERTAIN_CHECKED_MAX`] uncertain transfers (not checked).
    pub accounted: Option<bool>,
}

/// The most uncertain transfers whose subsets the accounting tries.
pub const UNCERTAIN_CHECKED_MAX: usize = 20;

/// Whether `target` is the sum of some subset of `xs` (at most [`UNCERTAIN_CHECKED_MAX`]
/// of them; `None` with more).
pub fn subset_sums_to(xs: &[i64], target: i64) -> Option<bool> {
    if xs.len() > UNCERTAIN_CHECKED_MAX {
        return None;
    }
    let mut sums = std::collections::HashSet::from([0i64]);
    for &x in xs {
        let more: Vec<i64> = sums.iter().map(|s| s + x).collect();
        sums.extend(more);
    }
    Some(sums.contains(&target))
}

/// What a run cost per committed transfer, over the whole run (warm-up included) and every
/// site: packets sent between sites, log records, and log batches made durable (each one
/// `fdatasync`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traffic {
    pub committed: u64,
    pub packets: f64,
    pub records: f64,
    pub batches: f64,
}

impl DcReport {
    pub fn traffic(&self) -> Traffic {
        let sum = |f: &dyn Fn(&SiteReport) -> u64| self.per_site.iter().map(f).sum::<u64>();
        let committed = sum(&|r| r.counters.committed);
        let per = |n: u64| n as f64 / committed.max(1) as f64;
        Traffic {
            committed,
            packets: per(sum(&|r| r.counters.packets_out)),
            records: per(sum(&|r| r.counters.log_records)),
            batches: per(sum(&|r| r.log_batches)),
        }
    }
}

/// Runs every site of `cluster` in this process with `load` on each, until the load has run
/// and the sites are quiet; `progress(elapsed, committed)` is called about twice a second.
pub fn run_embedded(
    cluster: &ClusterConfig,
    load: &Load,
    mut progress: impl FnMut(Duration, u64),
) -> Result<DcReport, RaidError> {
    let control = Arc::new(RunControl::new());
    // Every site on loopback: an engine of their own, tuned for sites that sleep.
    let mut own;
    let cluster = match &cluster.engine {
        Some(_) => cluster,
        None => {
            own = cluster.clone();
            let e =
                txcast_port::Engine::start(engine_config(txcast_port::ClusterConfig::default()))
                    .map_err(|e| RaidError::Cluster(format!("engine: {e}")))?;
            own.engine = Some(e);
            &own
        }
    };
    let started = std::time::Instant::now();
    let threads: Vec<_> = (0..cluster.sites)
        .map(|s| {
            let (c, l, ctl) = (cluster.clone(), load.clone(), control.clone());
            std::thread::Builder::new()
                .name(format!("raid-site-{s}"))
                .spawn(move || run_site(&c, s, Some(l), ctl))
                .map_err(|e| RaidError::Cluster(format!("spawn site {s}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    // The sites end together once quiet; a run that does not end within a minute of its
    // load is stopped (and its report says what was left).
    let limit = load.warmup + load.measure + Duration::from_secs(60);
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        let el = started.elapsed();
        if el.as_millis() % 500 < 50 {
            progress(el, control.committed.load(Ordering::Relaxed));
        }
        if el > limit {
            control.stop.store(true, Ordering::SeqCst);
        }
    }
    let mut per_site = Vec::new();
    for t in threads {
        let r = t
            .join()
            .map_err(|_| RaidError::Cluster("a site thread panicked".into()))??;
        per_site.push(r);
    }
    Ok(summarize(cluster, load, per_site))
}

/// The cluster-wide report from the sites' reports.
pub fn summarize(cluster: &ClusterConfig, load: &Load, per_site: Vec<SiteReport>) -> DcReport {
    let mut latency_us = Histogram::new();
    let mut committed = 0;
    let mut given_up: Vec<(Cause, u64)> = Vec::new();
    let (mut conflict, mut busy, mut timeout) = (0, 0, 0);
    for r in &per_site {
        latency_us.merge(&r.latency_us);
        committed += r.committed;
        for &(c, n) in &r.given_up {
            count_cause(&mut given_up, c, n);
        }
        conflict += r.counters.retries_conflict;
        busy += r.counters.retries_busy;
        timeout += r.counters.retries_timeout;
    }
    let measured = per_site
        .iter()
        .map(|r| r.measured)
        .max()
        .unwrap_or(load.measure)
        .max(Duration::from_millis(1));
    let audits: Vec<(Totals, u64)> = per_site.iter().map(|r| (r.totals, r.digest)).collect();
    DcReport {
        accounting: None,
        sites: cluster.sites,
        clients_per_site: load.clients,
        measured,
        committed,
        tps: committed as f64 / measured.as_secs_f64(),
        latency_us,
        retries: vec![("conflict", conflict), ("busy", busy), ("timeout", timeout)],
        given_up,
        refused: 0,
        unknown: per_site.iter().map(|r| r.counters.unknown).sum(),
        unanswered: 0,
        unreachable: 0,
        conserved: per_site.iter().all(|r| r.totals.conserved()),
        identical: audits.windows(2).all(|w| w[0].1 == w[1].1),
        totals: audits.first().map(|a| a.0).unwrap_or(Totals::ZERO),
        audits,
        per_site,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_sums_find_what_uncertain_transfers_explain() {
        assert_eq!(subset_sums_to(&[], 0), Some(true));
        assert_eq!(subset_sums_to(&[], 5), Some(false));
        assert_eq!(subset_sums_to(&[3, -7, 11], 4), Some(true)); // 11 - 7
        assert_eq!(subset_sums_to(&[3, -7, 11], 7), Some(true)); // 3 - 7 + 11
        assert_eq!(subset_sums_to(&[3, -7, 11], 5), Some(false));
        let many = vec![1; UNCERTAIN_CHECKED_MAX + 1];
        assert_eq!(subset_sums_to(&many, 1), None);
    }
}
