//! A load generator against a running cluster (`txcast node` processes, or sites served in
//! any process): per site, one client port with `clients` transfers in flight (closed loop:
//! a new one when one ends), then, once every reply is in, an audit of every site (its
//! totals and digest, taken when it is quiet) for the conservation check and the comparison
//! of copies.

use crate::client::{ClientError, Outcome, RaidClient};
use crate::cluster::{subset_sums_to, Accounting, DcReport};
use crate::db::Totals;
use crate::driver::{next_transfer, ClusterConfig, Load, RaidError};
use crate::site::{count_cause, Cause};
use crate::stats::Histogram;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcast_port::PortError;
use txcast_proto::rng::Rng;
use txcast_proto::Address;

/// The server type of the load generator's client ports.
pub const CLIENT_TYPE: u16 = 6;

struct SiteRun {
    committed: u64,
    hist: Histogram,
    given_up: Vec<(Cause, u64)>,
    refused: u64,
    unknown: u64,
    unanswered: u64,
    unreachable: u64,
    audit: (Totals, u64),
    /// Transfers acknowledged as committed, and the money they moved.
    acknowledged: u64,
    acknowledged_money: i64,
    /// The deltas of transfers whose outcome is unknown (unanswered, or unknown).
    uncertain: Vec<i64>,
}

fn client_error(site: u16, e: ClientError) -> RaidError {
    RaidError::Cluster(format!("client of site {site}: {e}"))
}

/// Where the generator's clients are, and how long each request waits for its reply.
#[derive(Clone, Copy, Debug)]
pub struct Generator {
    /// The site whose host every client is on (a cluster file names the generator's host as
    /// a site no node uses), over UDP to every site; `None`: each client on the host of the
    /// site it drives (shared memory when the generator runs there).
    pub from: Option<u16>,
    /// A request unanswered this long is counted unanswered and its slot reused: its site
    /// crashed with it (a new incarnation never answers it) or is cut off.
    pub reply_timeout: Duration,
}

impl Default for Generator {
    fn default() -> Self {
        Generator {
            from: None,
            reply_timeout: Duration::from_secs(5),
        }
    }
}

/// The address of the generator's client of `site`: server 0 of that site's host, or server
/// `2 * site` of `from`'s; `audit`: the port asking for the audit, the next server.
pub fn client_address(
    cluster: &ClusterConfig,
    from: Option<u16>,
    site: u16,
    audit: bool,
) -> Address {
    let a = audit as u16;
    match from {
        None => Address::new(cluster.instance, site, CLIENT_TYPE, a),
        Some(f) => Address::new(cluster.instance, f, CLIENT_TYPE, 2 * site + a),
    }
}

fn drive(
    cluster: &ClusterConfig,
    gen: Generator,
    site: u16,
    load: &Load,
    committed_all: &AtomicU64,
) -> Result<SiteRun, RaidError> {
    let me = client_address(cluster, gen.from, site, false);
    let mut c = RaidClient::open_on(cluster.engine.as_ref(), me, cluster.address(site))
        .map_err(|e| client_error(site, e))?;
    // The site may still be starting (no port yet, or its predecessor's): wait for it.
    let up_by = Instant::now() + Duration::from_secs(10);
    let first = next_transfer(&mut Rng::new(load.seed), &cluster.scale);
    let first_id = loop {
        match c.submit(&first) {
            Ok(id) => break id,
            Err(ClientError::Port(PortError::NoSuchPort(_) | PortError::OwnerDead(_)))
                if Instant::now() < up_by =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => return Err(client_error(site, e)),
        }
    };
    let mut rng = Rng::new(load.seed ^ ((site as u64) << 40));
    let started = Instant::now();
    let warm_end = started + load.warmup;
    let load_end = warm_end + load.measure;
    let mut in_flight: HashMap<u64, (Instant, i64)> = HashMap::new();
    in_flight.insert(first_id, (Instant::now(), first.delta));
    let mut run = SiteRun {
        committed: 0,
        hist: Histogram::new(),
        given_up: Vec::new(),
        refused: 0,
        unknown: 0,
        unanswered: 0,
        unreachable: 0,
        audit: (Totals::ZERO, 0),
        acknowledged: 0,
        acknowledged_money: 0,
        uncertain: Vec::new(),
    };
    let drain_end = load_end + Duration::from_secs(30);
    let mut swept_at = Instant::now();
    loop {
        let now = Instant::now();
        // Requests past their reply timeout are given up (at most every 100 ms: a scan).
        if now.duration_since(swept_at) >= Duration::from_millis(100) {
            swept_at = now;
            in_flight.retain(|_, (sent, delta)| {
                let keep = now.duration_since(*sent) < gen.reply_timeout;
                if !keep {
                    run.unanswered += 1;
                    run.uncertain.push(*delta);
                }
                keep
            });
        }
        if now < load_end {
            while in_flight.len() < load.clients {
                let t = next_transfer(&mut rng, &cluster.scale);
                match c.submit(&t) {
                    Ok(id) => {
                        in_flight.insert(id, (Instant::now(), t.delta));
                    }
                    // The site has acknowledged nothing for a while (down, or cut off): the
                    // transfer was not sent; try again after the poll below.
                    Err(ClientError::Port(PortError::Unreachable(_))) => {
                        run.unreachable += 1;
                        break;
                    }
                    Err(e) => return Err(client_error(site, e)),
                }
            }
        } else if in_flight.is_empty() {
            break;
        } else if now > drain_end {
            return Err(RaidError::Cluster(format!(
                "site {site}: {} replies missing 30 s after the load",
                in_flight.len()
            )));
        }
        let (id, o) = match c.poll(Duration::from_millis(100)) {
            Ok(r) => r,
            Err(ClientError::Timeout) => continue,
            Err(e) => return Err(client_error(site, e)),
        };
        let Some((sent, delta)) = in_flight.remove(&id) else {
            continue;
        };
        let at = Instant::now();
        match o {
            Outcome::Committed { .. } => {
                committed_all.fetch_add(1, Ordering::Relaxed);
                run.acknowledged += 1;
                run.acknowledged_money += delta;
                if sent >= warm_end && at <= load_end {
                    run.committed += 1;
                    run.hist.record(at.duration_since(sent).as_micros() as u64);
                }
            }
            Outcome::Aborted { cause, .. } => {
                count_cause(&mut run.given_up, cause, 1);
            }
            Outcome::Refused { .. } => run.refused += 1,
            Outcome::Unknown { .. } => {
                run.unknown += 1;
                run.uncertain.push(delta);
            }
            Outcome::Audit { .. } => {}
        }
    }
    Ok(run)
}

/// Site 0's totals before the load (waiting up to 10 s for it to be up), for the
/// accounting, and the client that asked (site 0's final audit goes through it too: a site
/// answers a request number it has seen from a client with the reply it kept).
fn baseline_audit(cluster: &ClusterConfig, gen: Generator) -> Option<(RaidClient, Totals)> {
    let me = client_address(cluster, gen.from, 0, true);
    let mut c = RaidClient::open_on(cluster.engine.as_ref(), me, cluster.address(0)).ok()?;
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        match c.audit(Duration::from_secs(2)) {
            Ok(Outcome::Audit { totals, .. }) => return Some((c, totals)),
            Err(ClientError::Port(PortError::NoSuchPort(_) | PortError::OwnerDead(_))) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            // Over UDP a site not up yet is silent.
            Err(ClientError::Timeout) => {}
            _ => return None,
        }
    }
    None
}

/// Runs `load` against every site of `cluster` from this process, then audits them; each
/// client on the host of the site it drives (see [`run_remote_from`]).
pub fn run_remote(
    cluster: &ClusterConfig,
    load: &Load,
    progress: impl FnMut(Duration, u64),
) -> Result<DcReport, RaidError> {
    run_remote_with(cluster, Generator::default(), load, progress)
}

/// [`run_remote`] with the clients where `gen` puts them and its reply timeout.
pub fn run_remote_with(
    cluster: &ClusterConfig,
    gen: Generator,
    load: &Load,
    mut progress: impl FnMut(Duration, u64),
) -> Result<DcReport, RaidError> {
    let (mut auditor, baseline) = match baseline_audit(cluster, gen) {
        Some((c, t)) => (Some(c), Some(t)),
        None => (None, None),
    };
    let committed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..cluster.sites)
        .map(|s| {
            let (c, l, n) = (cluster.clone(), load.clone(), committed.clone());
            std::thread::spawn(move || drive(&c, gen, s, &l, &n))
        })
        .collect();
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(500));
        progress(started.elapsed(), committed.load(Ordering::Relaxed));
    }
    let mut runs = Vec::new();
    for t in threads {
        runs.push(
            t.join()
                .map_err(|_| RaidError::Cluster("a client thread panicked".into()))??,
        );
    }
    // Every reply is in: audit each site once it is quiet.
    for (s, run) in runs.iter_mut().enumerate() {
        let s = s as u16;
        let mut c = match auditor.take() {
            Some(c) if s == 0 => c,
            _ => {
                let me = client_address(cluster, gen.from, s, true);
                RaidClient::open_on(cluster.engine.as_ref(), me, cluster.address(s))
                    .map_err(|e| client_error(s, e))?
            }
        };
        match c
            .audit(Duration::from_secs(30))
            .map_err(|e| client_error(s, e))?
        {
            Outcome::Audit { totals, digest } => run.audit = (totals, digest),
            o => {
                return Err(RaidError::Cluster(format!(
                    "site {s} answered the audit with {o:?}"
                )))
            }
        }
    }
    let mut latency_us = Histogram::new();
    let mut given_up: Vec<(Cause, u64)> = Vec::new();
    for r in &runs {
        latency_us.merge(&r.hist);
        for &(c, n) in &r.given_up {
            count_cause(&mut given_up, c, n);
        }
    }
    let committed: u64 = runs.iter().map(|r| r.committed).sum();
    let measured = load.measure.max(Duration::from_millis(1));
    let audits: Vec<(Totals, u64)> = runs.iter().map(|r| r.audit).collect();
    let uncertain: Vec<i64> = runs
        .iter()
        .flat_map(|r| r.uncertain.iter().copied())
        .collect();
    let acknowledged_money: i64 = runs.iter().map(|r| r.acknowledged_money).sum();
    let accounting = match (baseline, audits.first()) {
        (Some(b), Some((end, _))) => Some(Accounting {
            acknowledged: runs.iter().map(|r| r.acknowledged).sum(),
            uncertain: uncertain.len() as u64,
            accounted: subset_sums_to(&uncertain, end.accounts - b.accounts - acknowledged_money),
        }),
        _ => None,
    };
    Ok(DcReport {
        sites: cluster.sites,
        clients_per_site: load.clients,
        measured,
        committed,
        tps: committed as f64 / measured.as_secs_f64(),
        latency_us,
        retries: Vec::new(),
        given_up,
        refused: runs.iter().map(|r| r.refused).sum(),
        unknown: runs.iter().map(|r| r.unknown).sum(),
        unanswered: runs.iter().map(|r| r.unanswered).sum(),
        unreachable: runs.iter().map(|r| r.unreachable).sum(),
        conserved: audits.iter().all(|(t, _)| t.conserved()),
        identical: audits.windows(2).all(|w| w[0].1 == w[1].1),
        totals: audits.first().map(|a| a.0).unwrap_or(Totals::ZERO),
        audits,
        per_site: Vec::new(),
        accounting,
    })
}
