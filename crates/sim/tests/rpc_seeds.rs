//! RPC in the simulator for a fixed set of seeds, with every checker (see `rpc_sim`).

use txcast_sim::rpc_sim::{run_rpc, RpcSimOptions};

#[test]
fn fault_free_run_completes_every_call_once() {
    let opts = RpcSimOptions {
        faults: false,
        slow_handlers: false,
        ..RpcSimOptions::default()
    };
    let r = run_rpc(1, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.server.forwarded > 0, "seed 1 hands calls on");
    assert_eq!(r.timed_out, 0);
    assert_eq!(r.complete, r.calls);
    assert_eq!(r.executed_after_restart, 0);
}

#[test]
fn fixed_seeds_under_faults_keep_at_most_once_and_end_every_call() {
    let opts = RpcSimOptions::default();
    let (mut lossy, mut crashed, mut busy, mut answered_again, mut out_of_time) = (0, 0, 0, 0, 0);
    let (mut forwarded, mut forwarded_again) = (0, 0);
    for seed in 0..80u64 {
        let r = run_rpc(seed, &opts).unwrap_or_else(|e| panic!("{e}"));
        lossy += usize::from(r.net.lost > 0 && r.client.requests_resent > 0);
        crashed += usize::from(r.crashes > 0);
        busy += usize::from(r.server.busy > 0);
        answered_again += usize::from(r.server.duplicates_answered > 0);
        out_of_time += usize::from(r.timed_out > 0);
        forwarded += usize::from(r.server.forwarded > 0);
        forwarded_again += usize::from(r.server.duplicates_forwarded > 0);
    }
    // The swarm reached every path that matters.
    assert!(lossy > 10, "loss recovered by retransmission: {lossy}");
    assert!(crashed > 10, "crashes and restarts: {crashed}");
    assert!(busy > 3, "full reply caches: {busy}");
    assert!(
        answered_again > 10,
        "copies answered from the cache: {answered_again}"
    );
    assert!(
        out_of_time > 10,
        "calls ended by their deadline: {out_of_time}"
    );
    assert!(
        forwarded > 10,
        "calls handed on to another server: {forwarded}"
    );
    assert!(
        forwarded_again > 5,
        "copies of a call handed on, handed on again: {forwarded_again}"
    );
}
