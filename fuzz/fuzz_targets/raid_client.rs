//! Raid's client protocol: a site's decoders of requests (`client::decode`,
//! `client::decode_request`) and a client's decoder of replies (`client::decode_reply`) on
//! arbitrary bytes.
//!
//! Properties checked besides "never panics":
//! - `decode` and `decode_request` agree on transfers, and a refusal names the request's id
//!   whenever the id's bytes were there and the magic was right;
//! - the requests' encoding is canonical: an accepted transfer or audit encodes
//!   (`encode_request`, `encode_audit`) to its bytes again;
//! - an accepted reply encodes (`encode_reply`) to bytes that decode to the same reply, and to
//!   its own bytes again when its detail, if any, is valid UTF-8 within the 200 bytes the
//!   encoder keeps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use txcast_raid::client::{
    decode, decode_reply, decode_request, encode_audit, encode_reply, encode_request, Outcome,
    Request,
};

/// The longest detail `encode_reply` keeps (client.rs's `DETAIL_MAX`).
const DETAIL_MAX: usize = 200;
/// A request's magic, version and kind bytes, then its id.
const ID_AT: usize = 3;

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok((id, Request::Transfer(t))) => {
            assert_eq!(encode_request(id, &t), data);
            assert_eq!(decode_request(data), Ok((id, t)));
        }
        Ok((id, Request::Audit)) => {
            assert_eq!(encode_audit(id), data);
            assert!(decode_request(data).is_err());
        }
        Err(e) => {
            assert!(decode_request(data).is_err());
            let magic = encode_audit(0)[0];
            if data.first() == Some(&magic) && data.len() >= ID_AT + 8 {
                let id = u64::from_le_bytes(data[ID_AT..ID_AT + 8].try_into().expect("8"));
                assert_eq!(e.id, Some(id), "refusal without the id: {e:?}");
            }
        }
    }
    if let Some((id, o)) = decode_reply(data) {
        let again = encode_reply(id, &o);
        let (id2, o2) = decode_reply(&again).expect("an encoded reply decodes");
        assert_eq!(id2, id);
        match (&o, &o2) {
            // The encoder cuts a long detail (a decoded one grows where the decoder put
            // U+FFFD for bytes that were not UTF-8).
            (
                Outcome::Refused { reason, detail },
                Outcome::Refused {
                    reason: reason2,
                    detail: detail2,
                },
            ) if detail.len() > DETAIL_MAX => {
                assert_eq!(reason, reason2);
                assert!(detail2.len() <= DETAIL_MAX + 2);
            }
            _ => assert_eq!(o2, o),
        }
        let canonical = match &o {
            Outcome::Refused { detail, .. } => {
                detail.len() <= DETAIL_MAX && data.ends_with(detail.as_bytes())
            }
            _ => true,
        };
        if canonical {
            assert_eq!(again, data, "reply re-encodes differently: {o:?}");
        }
    }
});
