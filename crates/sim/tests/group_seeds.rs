//! Group simulations: a fault-free run, then a fixed set of seeds with swarmed faults, crashes,
//! leaves and joins, every checker on.

use txcast_sim::group_sim::{run_group, GroupSimOptions};
use txcast_sim::schedule::GroupOptions;

#[test]
fn a_fault_free_group_delivers_everything_in_one_order() {
    let opts = GroupSimOptions {
        group: GroupOptions {
            faults: false,
            ..GroupOptions::default()
        },
        ..GroupSimOptions::default()
    };
    let r = run_group(1, &opts).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(r.sent, r.completed, "{r:?}");
    assert_eq!(r.sent, 4 * opts.messages_per_member as u64);
    assert_eq!(r.final_members, 4);
    // One record per message and per join; the checkers saw every member deliver every
    // record ordered after its join.
    assert_eq!(r.highest_seq, r.sent + 3, "{r:?}");
    assert_eq!(r.resets, 0);
}

#[test]
fn fixed_seeds_pass_every_checker() {
    let opts = GroupSimOptions::default();
    for seed in 0..150u64 {
        if let Err(v) = run_group(seed, &opts) {
            panic!("{v}");
        }
    }
}

/// Seeds that once broke a guarantee, each kept after its fix:
/// - 24: an out-of-order record from a renumbered epoch was delivered twice;
/// - 519: records retransmitted while a packed multicast was held became stable and were
///   trimmed before the multicast (the sequencer panicked);
/// - 1379, 1933: the no-loss check counted messages ordered before a member joined;
/// - 1590, 9969: a rebuild could not bring every survivor up to date (a joiner held the
///   newest records, others the older ones) and blocked;
/// - 2444: a joiner's Welcome raced the rebuild that left it out;
/// - 3387: a member's own leave, among a rebuild's records, left it in the new view;
/// - 4548: a rebuild delivered a record only the new sequencer held, which then crashed;
/// - 64, 67, 27: leaves whose record never reached the leaver (the sequencer dropped it from
///   its departing list on a tentative ack; a sequencer left first);
/// - 7754: a leaver's repeated LeaveRequests counted as its reports, so it stopped acking, and
///   the sequencer (needing it for r) stalled, then declared it dead;
/// - 3805, 5978: a leaver's last ack, written before its application took the leave record,
///   held stability back until it was declared dead, the history filled and joiners gave up;
/// - 187: a survivor an earlier rebuild had left out installed the next view; the new
///   sequencer's View record, accepted without it, never reached it, and it blocked;
/// - 6934: a joiner admitted just before a failure never got its Welcome (not repeated while
///   recovering), so it could not answer the invitations and the rebuild lacked a majority;
/// - 2865: an ack that applied the sequencer's own leave ended its role in the middle of
///   handling a submission (it panicked);
/// - 27607, 38233: a joiner admitted just before a crash gave up (0.5 s) before the failure was
///   detected and the group rebuilt, and the half-joined member cost the group its majority;
/// - 3027: a join request still in flight after its join completed and the joiner left was
///   taken for a new join (join requests now carry a join id);
/// - 5382: a member whose answer to an invitation was lost ignored the repeated invitations
///   (same epoch), so rebuild after rebuild lacked a majority by one, until competing ones left
///   a member alone in a view of two; joiners sent to a sequencer that had since failed or been
///   left out asked only it, and never found the group. (Later sequencer changes moved this
///   seed's schedule away from that state; two group unit tests reproduce both.)
#[test]
fn regression_seeds() {
    // Found before the simulator cut partitions and clogged paths: replayed as they were.
    let opts = GroupSimOptions {
        group: GroupOptions {
            partitions: false,
            clogs: false,
            ..GroupOptions::default()
        },
        ..GroupSimOptions::default()
    };
    for seed in [
        24, 27, 64, 67, 187, 519, 1379, 1590, 1933, 2444, 3387, 2865, 3805, 3027, 4548, 5382,
        27607, 38233, 5978, 6934, 7754, 9969,
    ] {
        if let Err(v) = run_group(seed, &opts) {
            panic!("{v}");
        }
    }
}

/// Seeds that broke a guarantee once the simulator cut partitions, each kept after its fix:
/// - 2633, 13555: a leave the sequencer alone held was delivered by the leaver; cut off, the
///   sequencer was replaced by a rebuild that numbered another record there;
/// - 10577: the same for a join, delivered by the joiner;
/// - 2748: a rebuilt view's new sequencer accepted the old records up to its start before
///   the others held them, and was cut off;
/// - 4019: a member that installed a view whose announcement the others missed answered a
///   later rebuild of the view before, with that view's records in its history;
/// - 16715, 18383: a member blocked in a view whose other members had all left; the last
///   leaver, a sequencer, stopped before its successor knew its leave was accepted;
/// - 1024: a leaving sequencer that rebuilt the view it was leaving counted its own answer
///   and decided before the others had answered;
/// - 32182: a leaving sequencer's leave, held by one other member, was lost when that member
///   failed too (its own leave now needs r + 1 others);
/// - 39921: two failures cost the newest view its majority; the group blocked as it must, and
///   the checker now expects that rather than convergence.
#[test]
fn partition_regression_seeds() {
    // Found before the simulator clogged paths: replayed as they were.
    let opts = GroupSimOptions {
        group: GroupOptions {
            clogs: false,
            ..GroupOptions::default()
        },
        ..GroupSimOptions::default()
    };
    for seed in [
        1024, 2633, 2748, 4019, 10577, 13555, 16715, 18383, 32182, 39921,
    ] {
        let r = run_group(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
        assert!(
            r.partitions > 0,
            "seed {seed} still cuts the network: {r:?}"
        );
    }
}

/// Seeds that broke a guarantee once the simulator clogged paths, each kept after its fix:
/// - 39158: two membership changes in flight, and two coordinators whose member lists differed
///   by both each found a majority of their own: the group split;
/// - 26155: a member was left behind at an older record (it converges since the fixes for
///   39158; not traced further);
/// - 92706: a member that had left kept a rebuild's timer, due for ever (virtual time stopped);
/// - 94296: a joiner a rebuild had left out (its Welcome was held up) was admitted again by
///   the same sequencer under the same join, and was then a member twice over, at two places
///   in the order (join records now carry the join id, and every member remembers them).
#[test]
fn clog_regression_seeds() {
    let opts = GroupSimOptions::default();
    for seed in [26155, 39158, 92706, 94296] {
        let r = run_group(seed, &opts).unwrap_or_else(|v| panic!("{v}"));
        assert!(r.clogs > 0, "seed {seed} still clogs paths: {r:?}");
    }
}

/// Seeds that broke the view change, each kept after its fix (issue 3, session 4):
/// - 131578: a view that never committed was rebuilt by a majority of its own members while a
///   later round had made a sibling of it from the view before: the group split (rebuilds
///   are now rounds on the last view known committed, decided as in Paxos);
/// - 2874, 38108: with the View record committing on a quorum but no second phase, a view's
///   sequencer died (2874) or lived (38108) with too few members known to hold the record:
///   no survivor could tell whether it had committed, and the group blocked for good (a round
///   that meets members holding the record now proposes that view again);
/// - 63541: a member in a view made by a round on a view it had not learnt committed (it
///   answered that round) kept rebuilding the older one, and every other member refused it
///   (a refusal now shows the committed view, and the member takes it as its base);
/// - 114164: a member that had delivered records of a view its successor's makers never held
///   (a sequencer cut off with it accepted them alone) answered a later round, was counted
///   only up to the successor's start, and stalled behind what it had delivered (it is now
///   left out, and rejoins);
/// - 92969: the simulator judged "majority lost" on a list without a joiner that another
///   member's list, the one a rebuild counts, had (it now takes the most recent list);
/// - 215708, 380231: the sequencer left alone by a leave never accepted the records the
///   leaver had not acknowledged (nothing accepted on again: no acknowledgement comes to a
///   lone sequencer), with r = 2 and 3; 305061: a rebuilt view's sequencer whose quorum
///   shrank to itself (the other survivor had left) waited for an acknowledgement too.
#[test]
fn view_change_regression_seeds() {
    let opts = GroupSimOptions::default();
    for seed in [
        131578, 2874, 38108, 63541, 114164, 92969, 215708, 380231, 305061,
    ] {
        if let Err(v) = run_group(seed, &opts) {
            panic!("{v}");
        }
    }
}

#[test]
#[ignore]
fn one_seed_from_env() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    match run_group(seed, &GroupSimOptions::default()) {
        Ok(r) => println!("{r:?}"),
        Err(v) => panic!("{v}"),
    }
}
