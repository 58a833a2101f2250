//! A Raid site fed arbitrary packets from its peers (`Site::handle_packet`): the messages of
//! two-phase commit and of the views, snapshots included, as they reach the site's state.
//!
//! Input: chunks `[dt u8][len u16 le][packet]` (a short last chunk takes what is left). The
//! site (site 0 of three, incarnation 1, a small database, a transfer submitted at the start)
//! takes each packet; time moves on by `dt` milliseconds; its timers run, its log records are
//! taken and reported durable, and its packets and events are drained. At the end the log is
//! compacted when it is settled and a site is recovered from the compacted log.
//!
//! Properties checked besides "never panics":
//! - every packet the site sends decodes, comes from site 0 and goes to a peer;
//! - every log record it writes decodes;
//! - `handle_packet` refuses exactly what `decode_packet` refuses, with its error (packets of
//!   a stale incarnation or of no peer decode, and are dropped and counted);
//! - the compacted log recovers a site whose copy has the same fingerprint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::time::Instant;
use txcast_raid::msg::{decode_packet, Record};
use txcast_raid::{Scale, Site, SiteConfig, Transfer};

const SCALE: Scale = Scale {
    branches: 1,
    tellers_per_branch: 2,
    accounts_per_branch: 3,
    history_rows: 2,
};
const SITES: u16 = 3;
const MS: u64 = 1_000_000;

fn cfg() -> SiteConfig {
    SiteConfig::new(0, SITES, 1, SCALE)
}

fn drain(site: &mut Site, now: Instant) {
    while let Some((to, p)) = site.poll_transmit() {
        assert!(to > 0 && to < SITES, "a packet to site {to}");
        let (h, _) = decode_packet(&p).expect("a sent packet decodes");
        assert_eq!((h.site, h.incarnation), (0, 1));
        site.recycle_packet(p);
    }
    while let Some(r) = site.poll_log() {
        Record::decode(&r).expect("a logged record decodes");
        site.recycle_record(r);
    }
    site.logged(now, site.taken());
    while site.poll_event().is_some() {}
}

fuzz_target!(|data: &[u8]| {
    let mut site = Site::new(cfg()).expect("site");
    let t = Transfer {
        account: 1,
        teller: 1,
        branch: 0,
        delta: 5,
    };
    let _ = site.submit(Instant(0), 1, t);
    let mut now = Instant(0);
    drain(&mut site, now);
    let mut rest = data;
    while !rest.is_empty() {
        let dt = rest[0];
        let len = match rest.get(1..3) {
            Some(l) => u16::from_le_bytes([l[0], l[1]]) as usize,
            None => usize::MAX,
        };
        rest = rest.get(3..).unwrap_or(&[]);
        let (p, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        let decoded = decode_packet(p);
        let taken = site.handle_packet(now, p);
        assert_eq!(
            taken,
            decoded.map(|_| ()),
            "handle_packet and decode_packet disagree"
        );
        now = Instant(now.0 + dt as u64 * MS);
        site.handle_timeout(now);
        drain(&mut site, now);
    }
    if let Some(recs) = site.compact() {
        let back = Site::recover(cfg(), now, recs.iter().map(Vec::as_slice))
            .expect("a compacted log recovers");
        assert_eq!(back.db().fingerprint(), site.db().fingerprint());
    }
});
