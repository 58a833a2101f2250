//! FNV-1a, 64 bits: the digests and checksums that need no cryptographic strength (the
//! simulator's trace digests, the copies' digests, the CRMem disk log's record checksums,
//! the order hashes of group members).

/// The offset basis: the hash of nothing.
pub const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// A running FNV-1a hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv64(pub u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(OFFSET)
    }
}

impl Fnv64 {
    /// Hashes `bytes` in after what came before.
    #[inline]
    pub fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(PRIME);
        }
    }

    /// The hash of `bytes` alone.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut h = Fnv64::default();
        h.add(bytes);
        h.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_streaming() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(Fnv64::of(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fnv64::of(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(Fnv64::of(b"foobar"), 0x8594_4171_f739_67e8);
        let mut h = Fnv64::default();
        h.add(b"foo");
        h.add(b"bar");
        assert_eq!(h.0, Fnv64::of(b"foobar"));
    }
}
