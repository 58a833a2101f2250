//! The access manager's log on disk: records framed with their length and a CRC-32C, so a
//! torn tail (a crash in the middle of a write, or pages written out of order before an
//! `fdatasync`) ends the log at the last whole record instead of being read as data.
//!
//! A frame: body length `u32`, CRC-32 of the length bytes and the body `u32`, the body (a
//! [`crate::msg::Record`]). The length is under the CRC so that zeros (a page written past
//! the end) are no frame.

/// Bytes before a frame's body.
pub const FRAME_HEADER: usize = 8;
/// The longest body a frame may carry (a record is a few hundred bytes; the image that starts
/// a compacted log is the whole copy).
pub const BODY_MAX: usize = 1 << 31;

/// Appends `body` framed to `out`.
pub fn frame(body: &[u8], out: &mut Vec<u8>) {
    debug_assert!(body.len() <= BODY_MAX);
    let len = (body.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc(&len, body).to_le_bytes());
    out.extend_from_slice(body);
}

fn crc(len: &[u8; 4], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(len);
    h.update(body);
    h.finalize()
}

/// The bodies of the whole frames at the start of `bytes`, and how many bytes they span: the
/// log is valid up to there (the rest is a torn tail, to be cut off before appending).
pub fn unframe(bytes: &[u8]) -> (Vec<&[u8]>, usize) {
    let mut bodies = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= FRAME_HEADER {
        let len_bytes: [u8; 4] = bytes[at..at + 4].try_into().expect("4 bytes");
        let len = u32::from_le_bytes(len_bytes) as usize;
        let sum = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let start = at + FRAME_HEADER;
        if len > BODY_MAX || bytes.len() - start < len {
            break;
        }
        let body = &bytes[start..start + len];
        if crc(&len_bytes, body) != sum {
            break;
        }
        bodies.push(body);
        at = start + len;
    }
    (bodies, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_and_corrupt_tails_end_the_log() {
        let mut b = Vec::new();
        frame(b"one", &mut b);
        frame(b"", &mut b);
        frame(b"three", &mut b);
        let whole = b.len();
        assert_eq!(
            unframe(&b),
            (vec![&b"one"[..], &b""[..], &b"three"[..]], whole)
        );
        for cut in 0..whole {
            let (bodies, valid) = unframe(&b[..cut]);
            assert!(valid <= cut);
            assert!(bodies.len() < 3);
        }
        let mut bad = b.clone();
        bad[whole - 1] ^= 1;
        assert_eq!(unframe(&bad).0.len(), 2);
        // Zeros after the log (a page written past the end) are no record.
        let mut zeros = b.clone();
        zeros.extend_from_slice(&[0u8; 64]);
        assert_eq!(unframe(&zeros), (unframe(&b).0, whole));
    }
}
