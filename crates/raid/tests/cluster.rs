//! Raid clusters embedded in the test process, through the public API: real ports, real log
//! files with fdatasync, the sites' own threads.

use std::path::PathBuf;
use std::time::Duration;
use txcast_port::{Port, PortConfig};
use txcast_proto::Address;
use txcast_raid::cluster::run_embedded;
use txcast_raid::driver::{ClusterConfig, Load};
use txcast_raid::{Cause, Scale};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("txcast-raid-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn small() -> Scale {
    Scale {
        branches: 2,
        tellers_per_branch: 10,
        accounts_per_branch: 500,
        history_rows: 1_000_000,
    }
}

type SiteThread = std::thread::JoinHandle<
    Result<(txcast_raid::driver::SiteReport, txcast_raid::Db), txcast_raid::driver::RaidError>,
>;

/// Every site of `cluster` on a thread of its own with no clients of its own, served until
/// the test sets `end_when_quiet` (or `stop`) on the control returned.
fn start_sites(
    cluster: &ClusterConfig,
) -> (
    std::sync::Arc<txcast_raid::driver::RunControl>,
    Vec<SiteThread>,
) {
    use std::sync::atomic::Ordering;
    let control = std::sync::Arc::new(txcast_raid::driver::RunControl::new());
    control.end_when_quiet.store(false, Ordering::SeqCst);
    let sites = (0..cluster.sites)
        .map(|s| {
            let (c, ctl) = (cluster.clone(), control.clone());
            std::thread::spawn(move || {
                txcast_raid::driver::run_site_db(&c, s, Some(load(0, 0)), ctl)
            })
        })
        .collect();
    (control, sites)
}

fn load(clients: usize, ms: u64) -> Load {
    Load {
        clients,
        warmup: Duration::from_millis(100),
        measure: Duration::from_millis(ms),
        seed: 7,
    }
}

#[test]
fn three_sites_commit_conserve_agree_and_recover_from_their_logs() {
    let dir = temp_dir("three");
    let mut cluster = ClusterConfig::new(3, small(), dir.clone());
    cluster.instance = 31;
    // Small logs: compacted many times during the run.
    cluster.compact_bytes = 64 << 10;
    let r = run_embedded(&cluster, &load(16, 700), |_, _| {}).unwrap();
    assert!(
        r.per_site.iter().all(|s| s.counters.compactions > 2),
        "{:?}",
        r.per_site
            .iter()
            .map(|s| s.counters.compactions)
            .collect::<Vec<_>>()
    );
    let log_len = std::fs::metadata(dir.join("site-0.log")).unwrap().len();
    assert!(log_len < 2 << 20, "a compacted log of {log_len} bytes");
    assert!(r.committed > 100, "{} committed", r.committed);
    assert!(r.conserved, "{:?}", r.totals);
    assert!(r.identical);
    assert!(
        r.given_up.is_empty(),
        "{:?} {:?}",
        r.given_up,
        r.per_site.iter().map(|s| s.counters).collect::<Vec<_>>()
    );
    assert!(r.latency_us.count() == r.committed);
    // Each committed transfer leaves a commit record at its origin and a prepare and a
    // committed record at both other sites; the log writers batch them (group commit).
    let t = r.traffic();
    assert!(t.committed >= r.committed);
    assert!((5.0..12.0).contains(&t.records), "{t:?}");
    assert!(t.batches > 0.0 && t.batches < t.records, "{t:?}");
    assert!(t.packets > 0.0, "{t:?}");
    let rows = r.totals.history_rows;
    assert!(rows >= r.committed);
    let digests: Vec<u64> = r.per_site.iter().map(|s| s.digest).collect();

    // Started again on the same logs, with no load: each site rebuilds its copy from its
    // log, a new incarnation, and the copies are the ones the run ended with.
    let again = run_embedded(&cluster, &load(0, 0), |_, _| {}).unwrap();
    assert_eq!(
        again.per_site.iter().map(|s| s.digest).collect::<Vec<_>>(),
        digests
    );
    assert_eq!(again.totals.history_rows, rows);
    assert!(again.per_site.iter().all(|s| s.incarnation == 2));

    // And a second run goes on from there.
    let more = run_embedded(&cluster, &load(8, 300), |_, _| {}).unwrap();
    assert!(more.conserved && more.identical);
    assert!(more.totals.history_rows > rows);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_log_that_cannot_be_written_is_an_error_and_acknowledges_nothing() {
    let dir = temp_dir("full");
    // The log of site 0 is a device on which every write fails with "no space".
    std::os::unix::fs::symlink("/dev/full", dir.join("site-0.log")).unwrap();
    let mut cluster = ClusterConfig::new(1, small(), dir.clone());
    cluster.instance = 32;
    let r = run_embedded(&cluster, &load(4, 300), |_, _| {}).unwrap();
    let site = &r.per_site[0];
    let err = site.log_error.as_deref().expect("the log failed");
    assert!(err.contains("space"), "{err}");
    assert_eq!(r.committed, 0);
    assert_eq!(site.counters.committed, 0);
    // Its transfers end given up (no commit record was being written) or unknown (one
    // was: it may be on disk), never acknowledged.
    let broken: u64 = r
        .given_up
        .iter()
        .filter(|(c, _)| *c == Cause::Broken)
        .map(|(_, n)| n)
        .sum();
    assert!(broken + site.counters.unknown > 0, "{:?}", r.given_up);
    assert!(
        r.given_up.iter().all(|(c, _)| *c == Cause::Broken),
        "{:?}",
        r.given_up
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn messages_from_strangers_are_dropped_and_the_sites_go_on() {
    let dir = temp_dir("strangers");
    let mut cluster = ClusterConfig::new(2, small(), dir.clone());
    cluster.instance = 33;
    let target = cluster.address(0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let noise = std::thread::spawn(move || {
        let mut p = Port::open(Address::new(33, 0, 5, 0), PortConfig::default()).unwrap();
        let mut sent = 0u64;
        let mut x: u64 = 99;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let len = (x % 300) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (x >> (i % 56)) as u8).collect();
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if p.try_send(target, &bytes).is_ok() {
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        sent
    });
    let r = run_embedded(&cluster, &load(8, 600), |_, _| {}).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = noise.join().unwrap();
    assert!(sent > 0);
    assert!(r.per_site[0].foreign > 0, "{:?}", r.per_site[0].foreign);
    assert!(r.committed > 50 && r.conserved && r.identical);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clients_in_other_processes_commit_and_bad_requests_are_refused() {
    use std::sync::atomic::Ordering;
    use txcast_raid::client::{Outcome, RaidClient, Refusal};
    use txcast_raid::Transfer;

    let dir = temp_dir("clients");
    let mut cluster = ClusterConfig::new(3, small(), dir.clone());
    cluster.instance = 35;
    let (control, sites) = start_sites(&cluster);
    // A client at site 2's host talks to site 0, one transfer at a time on one account:
    // each balance it is told is the previous one plus its delta.
    let mut c = RaidClient::open(Address::new(35, 2, 6, 0), cluster.address(0)).unwrap();
    let wait = Duration::from_secs(10);
    let mut balance = 0i64;
    for i in 0..200i64 {
        let t = Transfer {
            account: 17,
            teller: (i % 20) as u32,
            branch: ((i % 20) / 10) as u32,
            delta: i - 100,
        };
        match c.transfer(&t, wait).unwrap() {
            Outcome::Committed { balance: b, .. } => {
                balance += t.delta;
                assert_eq!(b, balance, "transfer {i}");
            }
            o => panic!("transfer {i}: {o:?}"),
        }
    }
    // Bad requests: a key out of range, a request cut short, bytes that are no request.
    let bad = Transfer {
        account: 5_000_000,
        teller: 0,
        branch: 0,
        delta: 1,
    };
    match c.transfer(&bad, wait).unwrap() {
        Outcome::Refused { reason, detail } => {
            assert_eq!(reason, Refusal::BadKey);
            assert!(detail.contains("no tuple"), "{detail}");
        }
        o => panic!("{o:?}"),
    }
    let cut = txcast_raid::client::encode_request(777, &bad);
    c.send_raw(&cut[..20]).unwrap();
    match c.poll(wait).unwrap() {
        (777, Outcome::Refused { reason, detail }) => {
            assert_eq!(reason, Refusal::Malformed);
            assert!(detail.contains("ends at byte 20"), "{detail}");
        }
        o => panic!("{o:?}"),
    }
    c.send_raw(b"hello").unwrap();
    // Pipelined: many in flight from one client, all answered.
    let ids: Vec<u64> = (0..300)
        .map(|i| {
            let t = Transfer {
                account: i,
                teller: i % 20,
                branch: (i % 20) / 10,
                delta: 1,
            };
            c.submit(&t).unwrap()
        })
        .collect();
    let mut answered = 0;
    while answered < ids.len() {
        let (id, o) = c.poll(wait).unwrap();
        assert!(ids.contains(&id), "reply to {id}");
        assert!(matches!(o, Outcome::Committed { .. }), "{o:?}");
        answered += 1;
    }
    control.end_when_quiet.store(true, Ordering::SeqCst);
    let mut digests = Vec::new();
    for t in sites {
        let (r, db) = t.join().unwrap().unwrap();
        assert!(r.totals.conserved());
        assert_eq!(db.history_count(), 500);
        digests.push(r.digest);
        if r.site == 0 {
            assert_eq!(r.requests, 501, "200 + 1 bad key + 300");
            assert_eq!(r.foreign, 1, "the bytes that were no request");
        }
    }
    assert!(digests.windows(2).all(|w| w[0] == w[1]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_load_generator_in_another_thread_drives_a_running_cluster_and_audits_it() {
    use std::sync::atomic::Ordering;
    use txcast_raid::remote::run_remote;

    let dir = temp_dir("remote");
    let mut cluster = ClusterConfig::new(3, small(), dir.clone());
    cluster.instance = 39;
    let (control, sites) = start_sites(&cluster);
    let r = run_remote(&cluster, &load(16, 600), |_, _| {}).unwrap();
    assert!(r.committed > 100, "{}", r.committed);
    assert!(r.conserved, "{:?}", r.audits);
    assert!(r.identical, "{:?}", r.audits);
    assert_eq!(r.refused + r.unknown, 0);
    // The audit counts every transfer the generator ran, warm-up included.
    assert!(r.audits[0].0.history_rows >= r.committed);
    control.stop.store(true, Ordering::SeqCst);
    for t in sites {
        let (s, _) = t.join().unwrap().unwrap();
        assert_eq!(s.digest, r.audits[0].1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_load_generator_on_its_own_host_rides_out_a_site_that_stops_and_starts_again() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use txcast_raid::driver::{run_site, RunControl};
    use txcast_raid::remote::{client_address, run_remote_with, Generator};

    let dir = temp_dir("remote-from");
    let mut cluster = ClusterConfig::new(3, small(), dir.clone());
    cluster.instance = 43;
    // The generator's clients on site 3's host (127.0.0.4), over UDP to every site.
    let gen = Generator {
        from: Some(3),
        reply_timeout: Duration::from_millis(500),
    };
    assert_eq!(client_address(&cluster, gen.from, 2, true).site, 3);
    let control = |mask: u64| {
        let c = Arc::new(RunControl::new());
        c.local.store(mask, Ordering::SeqCst);
        c.end_when_quiet.store(false, Ordering::SeqCst);
        c
    };
    let (c01, c2, c2b) = (control(0b011), control(0b100), control(0b100));
    let spawn = |s: u16, c: Arc<RunControl>| {
        let cl = cluster.clone();
        std::thread::spawn(move || run_site(&cl, s, Some(load(0, 0)), c))
    };
    let survivors: Vec<_> = [0u16, 1].map(|s| spawn(s, c01.clone())).into();
    let first2 = spawn(2, c2.clone());
    let cl = cluster.clone();
    let generator =
        std::thread::spawn(move || run_remote_with(&cl, gen, &load(8, 3000), |_, _| {}));
    // Site 2 stops mid-load (its port closes: a crash, as the others see it) with requests
    // of the generator in flight, and starts again on its log half a second later.
    std::thread::sleep(Duration::from_millis(1000));
    c2.stop.store(true, Ordering::SeqCst);
    first2.join().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let second2 = spawn(2, c2b.clone());
    let r = generator.join().unwrap().unwrap();
    assert!(r.committed > 100, "{}", r.committed);
    assert!(r.conserved, "{:?}", r.audits);
    assert!(r.identical, "{:?}", r.audits);
    // What site 2 held when it stopped, and what was sent to it while it was down, is never
    // answered: given up after the timeout, not waited for (that failed the run 30 s after
    // the load); at most the 8 in flight per timeout while it was out.
    assert!(
        r.unanswered > 0 && r.unanswered <= 8 * 8,
        "{}",
        r.unanswered
    );
    c01.stop.store(true, Ordering::SeqCst);
    c2b.stop.store(true, Ordering::SeqCst);
    for t in survivors.into_iter().chain([second2]) {
        assert_eq!(t.join().unwrap().unwrap().digest, r.audits[0].1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_conflicting_transfers_serialize_by_an_external_check_of_the_history() {
    use std::collections::{HashMap, HashSet};
    use std::sync::atomic::Ordering;
    use txcast_raid::client::{Outcome, RaidClient};
    use txcast_raid::{Key, Transfer, TxnId};

    let dir = temp_dir("serial");
    let mut cluster = ClusterConfig::new(3, small(), dir.clone());
    cluster.instance = 36;
    let (control, sites) = start_sites(&cluster);
    // Three clients, one per site, each with 40 transfers in flight on four accounts: they
    // conflict all the time, at every site. Every delta is distinct, so a history row names
    // its transfer.
    const ACCOUNTS: u32 = 4;
    const EACH: i64 = 600;
    let clients: Vec<_> = (0..3u16)
        .map(|s| {
            let target = cluster.address(s);
            std::thread::spawn(move || {
                let mut c = RaidClient::open(Address::new(36, s, 6, 1), target).unwrap();
                let mut told: HashMap<i64, (TxnId, i64, u32)> = HashMap::new();
                let mut sent: HashMap<u64, Transfer> = HashMap::new();
                let (mut next, mut done) = (0i64, 0i64);
                while done < EACH {
                    while next < EACH && sent.len() < 40 {
                        let delta = (s as i64 + 1) * 1_000_000 + next;
                        let t = Transfer {
                            account: (next as u32 * 7 + s as u32) % ACCOUNTS,
                            teller: (next % 20) as u32,
                            branch: ((next % 20) / 10) as u32,
                            delta: if next % 2 == 0 { delta } else { -delta },
                        };
                        // The site's port may not be open yet when the first goes.
                        let mut tries = 0;
                        let id = loop {
                            match c.submit(&t) {
                                Ok(id) => break id,
                                Err(e) if tries < 500 => {
                                    let _ = e;
                                    tries += 1;
                                    std::thread::sleep(Duration::from_millis(10));
                                }
                                Err(e) => panic!("{e}"),
                            }
                        };
                        sent.insert(id, t);
                        next += 1;
                    }
                    let (id, o) = c.poll(Duration::from_secs(20)).unwrap();
                    let t = sent.remove(&id).expect("a reply to a request");
                    match o {
                        Outcome::Committed { txn, balance, .. } => {
                            told.insert(t.delta, (txn, balance, t.account));
                        }
                        o => panic!("{o:?}"),
                    }
                    done += 1;
                }
                told
            })
        })
        .collect();
    let mut told = HashMap::new();
    for c in clients {
        told.extend(c.join().unwrap());
    }
    assert_eq!(told.len(), 3 * EACH as usize);
    control.end_when_quiet.store(true, Ordering::SeqCst);
    let mut histories = Vec::new();
    for t in sites {
        let (r, db) = t.join().unwrap().unwrap();
        // Replay the site's history in its order: each transfer leaves its account at the
        // balance its client was told, and the tuples are the replay's end.
        let mut acct = vec![0i64; ACCOUNTS as usize];
        let mut seen = HashSet::new();
        for row in db.history() {
            let (txn, balance, account) = told[&row.delta];
            assert_eq!((row.txn, row.account), (txn, account), "site {}", r.site);
            assert!(
                seen.insert(row.delta),
                "site {} applied {} twice",
                r.site,
                row.delta
            );
            acct[account as usize] += row.delta;
            assert_eq!(
                acct[account as usize], balance,
                "site {}: transfer {} is not serialized where its client was told",
                r.site, row.delta
            );
        }
        assert_eq!(
            seen.len(),
            told.len(),
            "site {}: every commit applied",
            r.site
        );
        for (a, &b) in acct.iter().enumerate() {
            assert_eq!(db.balance(Key::account(a as u32)), Ok(b));
        }
        assert!(r.totals.conserved());
        histories.push(r.digest);
    }
    assert!(histories.windows(2).all(|w| w[0] == w[1]));
    let _ = std::fs::remove_dir_all(&dir);
}
