//! Logical addresses (paper 000 §4.2, paper 001 §2.2).
//!
//! A server is named by `(instance, site, server_type, server_instance)`. The site maps to a host
//! through the cluster configuration; the rest maps to a port on that host by pure functions
//! (see `txcast-port`'s naming module). No lookup protocol sits on the data path.

use core::fmt;

/// Bytes an [`Address`] takes on the wire.
pub const ADDRESS_BYTES: usize = 8;

/// The logical address of a server (a port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address {
    /// Raid instance (a cluster may run several independent instances).
    pub instance: u16,
    /// Virtual site number; maps to a host.
    pub site: u16,
    /// Server type (AD, AC, CC, AM, RC, or an application's own).
    pub server_type: u16,
    /// Which server of that type on the site.
    pub server_instance: u16,
}

impl Address {
    pub const fn new(instance: u16, site: u16, server_type: u16, server_instance: u16) -> Self {
        Address {
            instance,
            site,
            server_type,
            server_instance,
        }
    }

    pub fn write_to(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.to_bytes());
    }

    /// The eight bytes `write_to` writes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 8] {
        let [a, b] = self.instance.to_le_bytes();
        let [c, d] = self.site.to_le_bytes();
        let [e, f] = self.server_type.to_le_bytes();
        let [g, h] = self.server_instance.to_le_bytes();
        [a, b, c, d, e, f, g, h]
    }

    /// The address whose bytes `to_bytes` gives.
    #[inline]
    pub fn from_bytes(b: [u8; 8]) -> Self {
        Address {
            instance: u16::from_le_bytes([b[0], b[1]]),
            site: u16::from_le_bytes([b[2], b[3]]),
            server_type: u16::from_le_bytes([b[4], b[5]]),
            server_instance: u16::from_le_bytes([b[6], b[7]]),
        }
    }

    /// Reads an address from the first eight bytes; the caller has checked the length.
    pub fn read_from(b: &[u8]) -> Self {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        Self::from_bytes(a)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.instance, self.site, self.server_type, self.server_instance
        )
    }
}

impl core::str::FromStr for Address {
    type Err = &'static str;
    /// Parses `instance.site.type.server_instance`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut it = s.split('.');
        let mut next = || -> Result<u16, &'static str> {
            it.next()
                .ok_or("address needs four dot-separated numbers")?
                .parse()
                .map_err(|_| "address parts are numbers 0..=65535")
        };
        let a = Address::new(next()?, next()?, next()?, next()?);
        if it.next().is_some() {
            return Err("address needs four dot-separated numbers");
        }
        Ok(a)
    }
}

/// A hasher for maps keyed by [`Address`]: an address is 8 bytes, so it is its own hash (mixed
/// once). SipHash would cost more than the lookups it protects, and addresses are not chosen by
/// an attacker who could flood a map (every map keyed by them is bounded).
#[derive(Clone, Copy, Debug, Default)]
pub struct AddressHasher(u64);

impl core::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | *b as u64;
        }
    }
    fn write_u16(&mut self, v: u16) {
        self.0 = (self.0 << 16) | v as u64;
    }
}

/// `BuildHasher` for [`AddressHasher`].
pub type AddressHash = core::hash::BuildHasherDefault<AddressHasher>;

/// A transaction identifier. A transaction's multicast group is a pure function of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TxnId(pub u64);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn:{:x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_round_trips_through_bytes_and_text() {
        let a = Address::new(1, 2, 3, 65535);
        let mut b = [0u8; ADDRESS_BYTES];
        a.write_to(&mut b);
        assert_eq!(Address::read_from(&b), a);
        assert_eq!(a.to_string().parse::<Address>().unwrap(), a);
        assert!("1.2.3".parse::<Address>().is_err());
        assert!("1.2.3.4.5".parse::<Address>().is_err());
        assert!("1.2.x.4".parse::<Address>().is_err());
    }
}
