//! CRMem (mirror) in the simulator for a fixed set of seeds.

use txcast_sim::crmem_sim::{run_crmem, CrmemSimOptions};

#[test]
fn fixed_seeds_keep_every_acknowledged_commit_and_the_invariant() {
    let opts = CrmemSimOptions::default();
    let (mut failovers, mut restarts, mut timeouts, mut audits, mut aborted) = (0, 0, 0, 0, 0);
    for seed in 0..300u64 {
        let r = run_crmem(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
        failovers += u64::from(r.failovers > 0);
        restarts += u64::from(r.restarts > r.failovers);
        timeouts += u64::from(r.timeouts > 0);
        audits += r.audits;
        aborted += r.aborted_on_purpose;
    }
    assert!(failovers > 30, "{failovers} seeds with a failover");
    assert!(restarts > 30, "{restarts} seeds with a backup restarted");
    assert!(timeouts > 15, "{timeouts} seeds with a lock timeout");
    assert!(
        audits > 1000 && aborted > 1000,
        "{audits} audits, {aborted} aborts"
    );
}

#[test]
fn regression_seeds() {
    // 1771: a snapshot sent to a restarted backup's previous incarnation, retransmitted by
    // the link to the new one, was taken for its own: a replica of zeros and a tail.
    let opts = CrmemSimOptions::default();
    for seed in [1771, 1792] {
        run_crmem(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
    }
}

#[test]
fn a_seed_replays_exactly() {
    let opts = CrmemSimOptions::default();
    let a = run_crmem(11, &opts).unwrap_or_else(|v| panic!("{v}"));
    let b = run_crmem(11, &opts).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a.digest, b.digest);
}
