//! Transaction multicast in the simulator: a fault-free run, then a couple hundred seeds with
//! every checker on (see `txn_sim`).

use txcast_sim::txn_sim::{run_txn, TxnSimOptions};

#[test]
fn a_fault_free_run_reaches_members_only() {
    let opts = TxnSimOptions {
        faults: false,
        ..TxnSimOptions::default()
    };
    let r = run_txn(1, &opts).unwrap_or_else(|v| panic!("{v}"));
    assert!(r.taken > 0 && r.not_joined > 0, "{r:?}");
    assert_eq!((r.damaged, r.refused), (0, 0), "{r:?}");
}

#[test]
fn seeds_under_faults_keep_the_delivery_rule() {
    let opts = TxnSimOptions::default();
    let (mut damaged, mut duplicated, mut lossy) = (0, 0, 0);
    for seed in 0..200u64 {
        let r = run_txn(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
        damaged += usize::from(r.refused > 0);
        duplicated += usize::from(r.net.duplicated > 0);
        lossy += usize::from(r.net.lost > 0);
    }
    // The swarm reached every rule that matters.
    assert!(damaged > 20, "damaged and forged packets: {damaged}");
    assert!(duplicated > 20, "duplicated packets: {duplicated}");
    assert!(lossy > 20, "lost packets: {lossy}");
}

#[test]
fn a_seed_replays_the_same_run() {
    let opts = TxnSimOptions::default();
    for seed in [5u64, 6] {
        let a = run_txn(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
        let b = run_txn(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
        assert_eq!((a.digest, a.end_ns), (b.digest, b.end_ns), "seed {seed}");
    }
}

#[test]
fn regression_seeds() {
    // 70008594: a packet of a source's old incarnation, replayed after the source restarted,
    // reached a receiver whose window for it had gone with the restart, and was taken again.
    run_txn(70008594, &TxnSimOptions::default()).unwrap_or_else(|v| panic!("{v}"));
}
