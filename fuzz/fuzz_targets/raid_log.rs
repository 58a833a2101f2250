//! Raid's log as read back at a restart: the framing (`log::unframe`), the records
//! (`msg::Record::decode`), the database image a compacted log starts with and a snapshot
//! carries (`Db::decode_image`), and a site rebuilt from the records (`Site::recover`).
//!
//! Input: one control byte, then the rest.
//! - `0`: the rest is a log file as it is on disk: `unframe` it, decode every body, and
//!   recover a site from them;
//! - `1`: the rest is a sequence of bodies `[len u16 le][body]` (a short last one takes what
//!   is left), framed here with their CRC so that the fuzzer reaches the records; the framed
//!   log is then unframed, decoded and recovered from as in `0`;
//! - `2`: the rest is one record body;
//! - anything else: the rest is a database image of a small scale.
//!
//! Properties checked besides "never panics":
//! - `unframe` stops at a frame boundary, and framing its bodies again gives back the valid
//!   prefix byte for byte; a log framed here unframes to exactly its bodies;
//! - the records' encoding is canonical: an accepted record encodes to its bytes again;
//! - an accepted image encodes (`Db::encode_image`) to its bytes again but for the history
//!   rows' filler, which is not kept (the rows' fields are), and decodes to a database with
//!   the same totals, fingerprint and history; that encoding is stable;
//! - `Site::recover` refuses a log exactly when one of its records does not decode or does
//!   not apply, and a recovered site's copy passes the same image round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_proto::time::Instant;
use txcast_raid::log::{frame, unframe, FRAME_HEADER};
use txcast_raid::msg::Record;
use txcast_raid::{ConfigError, Db, Scale, Site, SiteConfig};

const SCALE: Scale = Scale {
    branches: 1,
    tellers_per_branch: 2,
    accounts_per_branch: 3,
    history_rows: 2,
};
/// An image's bytes before its history rows: six balances, then the history's count, total,
/// hash and row count.
const IMAGE_FIXED: usize = 6 * 8 + 8 + 8 + 8 + 4;

fn check_record(body: &[u8]) -> Option<Record> {
    let r = Record::decode(body).ok()?;
    let mut out = Vec::new();
    r.encode(&mut out);
    assert_eq!(out, body, "record re-encodes differently: {r:?}");
    if let Record::Image(b) = &r {
        check_image(b);
    }
    Some(r)
}

fn check_image(b: &[u8]) -> Option<Db> {
    let db = Db::decode_image(SCALE, b).ok()?;
    let mut out = Vec::new();
    db.encode_image(&mut out);
    // The balances and the history's count, total, hash and row count come back byte for
    // byte; a history row comes back with its fields, its filler (bytes 34..50) as spaces.
    assert_eq!(out.len(), b.len());
    assert_eq!(
        out[..IMAGE_FIXED],
        b[..IMAGE_FIXED],
        "image re-encodes differently"
    );
    let again = Db::decode_image(SCALE, &out).expect("a re-encoded image decodes");
    assert_eq!(again.totals(), db.totals());
    assert_eq!(again.fingerprint(), db.fingerprint());
    assert!(again.history().eq(db.history()), "history rows differ");
    let mut twice = Vec::new();
    again.encode_image(&mut twice);
    assert_eq!(twice, out, "a re-encoded image is not stable");
    Some(db)
}

fn check_log(log: &[u8]) {
    let (bodies, valid) = unframe(log);
    assert!(valid <= log.len());
    let mut again = Vec::new();
    for b in &bodies {
        frame(b, &mut again);
    }
    assert_eq!(
        again,
        &log[..valid],
        "unframe's prefix is not its bodies framed"
    );
    let mut all_decode = true;
    for b in &bodies {
        all_decode &= check_record(b).is_some();
    }
    let cfg = SiteConfig::new(0, 3, 2, SCALE);
    match Site::recover(cfg, Instant(0), bodies.iter().copied()) {
        Ok(site) => {
            assert!(all_decode, "recovered from a record that does not decode");
            let mut img = Vec::new();
            site.db().encode_image(&mut img);
            let db = check_image(&img).expect("a recovered copy's image decodes");
            assert_eq!(db.fingerprint(), site.db().fingerprint());
        }
        Err(ConfigError::Log { index, .. }) => {
            assert!(index < bodies.len());
            assert!(Record::decode(bodies[index]).is_err());
        }
        // A record that decodes but does not apply (a key of no tuple at this scale).
        Err(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    match ctl {
        0 => check_log(rest),
        1 => {
            let mut bodies = Vec::new();
            let mut r = rest;
            while !r.is_empty() {
                let len = match r.get(..2) {
                    Some(l) => u16::from_le_bytes([l[0], l[1]]) as usize,
                    None => usize::MAX,
                };
                r = r.get(2..).unwrap_or(&[]);
                let (b, tail) = r.split_at(len.min(r.len()));
                bodies.push(b);
                r = tail;
            }
            let mut log = Vec::new();
            for b in &bodies {
                frame(b, &mut log);
            }
            assert_eq!(
                log.len(),
                bodies.iter().map(|b| FRAME_HEADER + b.len()).sum()
            );
            let (got, valid) = unframe(&log);
            assert_eq!((got, valid), (bodies.clone(), log.len()));
            check_log(&log);
        }
        2 => {
            check_record(rest);
        }
        _ => {
            check_image(rest);
        }
    }
});
