//! `txcast bench crmem --sections locks`: Figure 6 of Roşu & Schwan, *Support for Recoverable
//! Memory in the Distributed Virtual Communication Machine* (§3.6): the latency of a remote
//! lock acquire + release pair against the number of locks it names, in the symmetric
//! configuration (remote locks exist only there), on the engine's extension modules (the
//! paper's *CoProcessor* implementation).
//!
//! Two nodes: node 0 in this process runs the transactions; node 1, the home of the one
//! segment, runs in a partner process (UDP and the reliable link on loopback) and takes and
//! frees the locks in its module, with no application thread involved. The segment holds
//! [`RECORDS`] 8-byte records, one lock each, so a range of `k` records names `k` locks and
//! up to [`LOCKS_PER_MESSAGE`] of them go in one control message.
//!
//! **What is timed**, per sample: `begin`, `set_range` of `k` records for writing (local
//! locks, then the LOCK request to the home and its GRANT back), and `abort` (the local locks
//! freed and the RELEASE handed to the module). The RELEASE is one-way; the reliable in-order
//! link carries it ahead of the next sample's LOCK, so the home frees the locks before it
//! takes them again and the next sample includes that work. The same `k` records every time.

use super::crmem_common::{err, serve_until, Impl};
use super::rtt;
use super::spawn_child;
use super::stats::{bench_json, Samples, Summary};
use crate::progress::Progress;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};
use txcast_crmem::{LockMapping, Mode, SymCrmem, SymCrmemConfig, SymCrmemError, LOCKS_PER_MESSAGE};
use txcast_proto::Address;

/// Server type of the two nodes (not the mirror's or the symmetric TpcB's).
const HOST_TYPE: u16 = 14;
const PARTNER_LIFE: Duration = Duration::from_secs(600);
const WAIT: Duration = Duration::from_secs(10);
/// Records (and locks) of the segment: the largest lock count a point may ask for.
pub const RECORDS: u32 = 256;
const RECORD: u32 = 8;
/// Lock timeouts in a row the warm-up tolerates while the home comes up.
const WARMUP_TRIES: u32 = 100;

/// The lock counts measured by default: powers of two, and the most one control message
/// carries.
pub fn default_counts() -> Vec<u64> {
    vec![1, 2, 4, 8, 16, 32, LOCKS_PER_MESSAGE as u64]
}

fn nodes() -> Vec<Address> {
    vec![
        Address::new(0, 0, HOST_TYPE, 0),
        Address::new(0, 1, HOST_TYPE, 0),
    ]
}

/// One segment, homed at node 1: a lock per record.
fn segments() -> Vec<(usize, LockMapping, u16)> {
    vec![(
        (RECORDS * RECORD) as usize,
        LockMapping::Records {
            record_bytes: RECORD,
            per_lock: 1,
        },
        1,
    )]
}

fn open(me: u16, how: Impl) -> io::Result<SymCrmem> {
    let cfg = SymCrmemConfig {
        handlers: how.handlers(),
        ..SymCrmemConfig::new(nodes(), me)
    };
    SymCrmem::open(cfg, &segments()).map_err(err)
}

/// The home node: serves the locks until `stop` exists.
pub fn child(args: &[String]) -> io::Result<()> {
    let [stop, how] = args else {
        return Err(err(
            "usage: crmem-locks <stop file> <engine|polled|interrupt>",
        ));
    };
    let how = Impl::parse(how)?;
    let c = open(1, how)?;
    let drive = || c.drive();
    let polled = (how == Impl::Polled).then_some(&drive as &dyn Fn() -> usize);
    serve_until(Path::new(stop), PARTNER_LIFE, polled);
    Ok(())
}

/// One acquire + release of `k` remote locks (see the module comment).
fn pair(c: &SymCrmem, k: u32) -> Result<(), SymCrmemError> {
    let t = c.begin(WAIT)?;
    if let Err(e) = c.set_range(t, 0, 0, k * RECORD, Mode::Write) {
        let _ = c.abort(t);
        return Err(e);
    }
    c.abort(t)
}

/// What the section prints: JSON lines or the human table (on stderr under `--json`).
pub struct Out<'a> {
    pub json: bool,
    /// The run's progress: a point per lock count.
    pub progress: &'a Progress,
}

impl Out<'_> {
    fn say(&self, s: &str) {
        self.progress.suspend(|| {
            if self.json {
                eprintln!("{s}");
            } else {
                println!("{s}");
            }
        });
    }
}

/// Measures every count in `counts` (each 1..=[`RECORDS`]), `samples` pairs a point after
/// `warmup` untimed ones, against the remote port round trips `spin` and `park` of the same
/// run, with both nodes' remote operations run as `how` says.
pub fn measure(
    out: &Out<'_>,
    how: Impl,
    counts: &[usize],
    samples: u64,
    warmup: u64,
    spin: &Summary,
    park: &Summary,
) -> io::Result<()> {
    let stop = std::env::temp_dir().join(format!(
        "txcast-bench-crmem-locks-{}.stop",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&stop);
    let mut partner = spawn_child(&[
        "crmem-locks".to_string(),
        stop.to_string_lossy().into_owned(),
        how.name().to_string(),
    ])?;
    let r = (|| -> io::Result<()> {
        let c = open(0, how)?;
        // The home comes up: a request sent before it listens waits for the retransmission.
        let mut tries = 0;
        loop {
            match pair(&c, 1) {
                Ok(()) => break,
                Err(SymCrmemError::LockTimeout) if tries < WARMUP_TRIES => tries += 1,
                Err(e) => return Err(err(e)),
            }
        }
        out.say(&format!(
            "remote locks at the home node, {} ({}), acquire + release, {samples} pairs a point (p50/p99 us); remote port round trip spinning {}, parked {}",
            how.name(),
            how.paper(),
            us(spin),
            us(park)
        ));
        out.say(&format!(
            "{:>6} {:>18} {:>12} {:>12}",
            "locks", "acquire+release", "/spinning", "/parked"
        ));
        for &k in counts {
            let k = k.clamp(1, RECORDS as usize) as u32;
            out.progress.note(&format!("locks {k}, {}", how.name()));
            for _ in 0..warmup {
                pair(&c, k).map_err(err)?;
            }
            let mut s = Samples::with_capacity(samples as usize);
            for _ in 0..samples {
                let t0 = Instant::now();
                pair(&c, k).map_err(err)?;
                s.record(t0.elapsed());
            }
            let m = s.summary().ok_or_else(|| err("no samples"))?;
            let (rs, rp) = (ratio(&m, spin), ratio(&m, park));
            out.say(&format!("{k:>6} {:>18} {rs:>12.2} {rp:>12.2}", us(&m)));
            if out.json {
                let line = bench_json! {
                    bench: "crmem",
                    section: "locks",
                    handlers: how.name(),
                    locks: k,
                    samples: m.count,
                    p50_ns: m.p50_ns,
                    p99_ns: m.p99_ns,
                    remote_spin_p50_ns: spin.p50_ns,
                    remote_spin_p99_ns: spin.p99_ns,
                    remote_park_p50_ns: park.p50_ns,
                    remote_park_p99_ns: park.p99_ns,
                    ratio_spin_p50: rs,
                    ratio_park_p50: rp,
                };
                out.progress.suspend(|| println!("{line}"));
            }
            out.progress.advance();
        }
        out.say("target: one lock within 1.3 times the remote port round trip");
        Ok(())
    })();
    let _ = std::fs::write(&stop, b"");
    let r = super::finish_child(&mut partner, r, Duration::from_secs(30));
    let _ = std::fs::remove_file(&stop);
    r
}

fn us(s: &Summary) -> String {
    format!("{:.1}/{:.1}", s.p50_ns as f64 / 1e3, s.p99_ns as f64 / 1e3)
}

/// p50 against p50, to two decimals.
fn ratio(a: &Summary, b: &Summary) -> f64 {
    (a.p50_ns as f64 / b.p50_ns.max(1) as f64 * 100.0).round() / 100.0
}

/// The remote port round trips (64 bytes), spinning and parked.
pub fn yardsticks(n: u64, warmup: u64) -> io::Result<(Summary, Summary)> {
    let case = |name| rtt::find_case(name).ok_or_else(|| err("no rtt case"));
    Ok((
        rtt::measure_in_processes(case("txcast-remote-spin")?, 64, warmup, n)?,
        rtt::measure_in_processes(case("txcast-remote-park")?, 64, warmup, n)?,
    ))
}
