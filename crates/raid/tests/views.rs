//! View messages from the network that name sites the database does not have are dropped
//! and counted; the site goes on.

use txcast_proto::codec::Writer;
use txcast_proto::Instant;
use txcast_raid::msg::{put_header, Header, Member, Msg};
use txcast_raid::{Scale, Site, SiteConfig};

#[test]
fn views_naming_sites_out_of_the_database_are_dropped() {
    let scale = Scale {
        branches: 1,
        tellers_per_branch: 2,
        accounts_per_branch: 10,
        history_rows: 100,
    };
    let mut site = Site::new(SiteConfig::new(0, 3, 1, scale)).unwrap();
    site.handle_timeout(Instant(1));
    let m = |site, incarnation| Member { site, incarnation };
    let members = vec![m(0, 1), m(1, 1), m(40, 1)];
    let msgs = [
        Msg::Propose {
            ballot: 1 << 40,
            members: members.clone(),
        },
        Msg::Install {
            ballot: 1 << 40,
            donor: 40,
            synced: 0,
            fingerprint: None,
            members: members.clone(),
        },
        Msg::View {
            ballot: 1 << 40,
            members,
        },
    ];
    for (i, msg) in msgs.iter().enumerate() {
        let mut b = Vec::new();
        let mut w = Writer::new(&mut b);
        put_header(
            &mut w,
            Header {
                site: 1,
                incarnation: 1,
                to: 1,
            },
        );
        msg.put(&mut w);
        site.handle_packet(Instant(2 + i as u64), &b).unwrap();
        site.handle_timeout(Instant(3 + i as u64));
        while site.poll_transmit().is_some() {}
    }
    assert_eq!(site.counters().dropped_malformed, 3);
    // Nothing was promised or installed from them.
    assert!(site.view().is_none());
    assert!(
        !site.describe().contains("promised 0x10000000000"),
        "{}",
        site.describe()
    );
}

/// Found by fuzz/fuzz_targets/raid_site.rs: a PROPOSE whose ballot named no site of the
/// database as its proposer (low 16 bits 0xfd00) was promised, and once the promise was
/// durable the site sent it to "site 64768" and panicked (an index out of bounds). A
/// proposal of a ballot that is not its sender's is dropped as malformed now.
#[test]
fn a_proposal_of_a_ballot_not_its_senders_is_dropped() {
    let scale = Scale {
        branches: 1,
        tellers_per_branch: 2,
        accounts_per_branch: 3,
        history_rows: 2,
    };
    let mut site = Site::new(SiteConfig::new(0, 3, 1, scale)).unwrap();
    site.handle_timeout(Instant(1));
    let m = |site, incarnation| Member { site, incarnation };
    for (i, ballot) in [(7 << 16) | 0xfd00, (7 << 16) | 2].into_iter().enumerate() {
        let mut b = Vec::new();
        let mut w = Writer::new(&mut b);
        put_header(
            &mut w,
            Header {
                site: 1,
                incarnation: 1,
                to: 1,
            },
        );
        Msg::Propose {
            ballot,
            members: vec![m(0, 1), m(1, 1)],
        }
        .put(&mut w);
        site.handle_packet(Instant(2 + i as u64), &b).unwrap();
        // The promise's record made durable: a promise would be sent now.
        while let Some(r) = site.poll_log() {
            site.recycle_record(r);
        }
        site.logged(Instant(2 + i as u64), site.taken());
        site.handle_timeout(Instant(3 + i as u64));
        while site.poll_transmit().is_some() {}
    }
    assert_eq!(site.counters().dropped_malformed, 2);
    assert!(
        site.describe().contains("promised 0x0,"),
        "{}",
        site.describe()
    );
}
