//! Keys as packets use them: one [`PacketKey`] authenticates (keyed BLAKE3 MAC) or seals
//! (XChaCha20-Poly1305) the packets it is used for, and is named on the wire by a one-byte key
//! id; a [`KeyRing`] is what a node holds: the key it sends with and, during a rollover, one
//! more that it also accepts.
//!
//! A sealed packet is `header(40) | body encrypted | counter u64 | tag(16)`. The associated
//! data is the header without its checksum (so kind, flags, key id, cluster, incarnation,
//! addresses and length are authenticated), and the 24-byte nonce is
//! `incarnation u64 | source Address(8) | counter u64`, the first 16 bytes read from the header
//! itself. Why such a nonce never repeats under one key: docs/ARCHITECTURE.md, "Confidentiality".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};

use super::header::{ClusterKey, CHECKSUM_OFFSET, HEADER_BYTES, MAC_BYTES};
use super::WireError;

/// The packet carries a MAC trailer (16 bytes).
pub const FLAG_MAC: u8 = 0x01;
/// The packet's body is encrypted; its trailer is the nonce counter and the AEAD tag.
pub const FLAG_SEAL: u8 = 0x04;
/// The per-packet counter a sealed packet carries (the last 8 bytes of its nonce).
pub const COUNTER_BYTES: usize = 8;
/// A sealed packet's trailer: counter and tag.
pub const SEAL_TRAILER_BYTES: usize = COUNTER_BYTES + MAC_BYTES;
/// The longest trailer any key adds: what a sender that may change keys must leave room for.
pub const TRAILER_BYTES_MAX: usize = SEAL_TRAILER_BYTES;

/// Context string for deriving the AEAD key from a cluster key (the MAC uses the cluster key
/// itself): the two uses never share a key.
const SEAL_KEY_CONTEXT: &str = "txcast packet seal v1";

/// One cluster key as packets use it: its id on the wire, its MAC key and, when it seals, the
/// cipher and the counter that makes every nonce under it distinct.
pub struct PacketKey {
    id: u8,
    mac: ClusterKey,
    cipher: Option<Box<XChaCha20Poly1305>>,
    /// The next packet counter; shared by every sender that holds this key (one per process).
    counter: AtomicU64,
}

impl core::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "PacketKey {{ id: {}, seals: {} }}",
            self.id,
            self.seals()
        )
    }
}

impl PacketKey {
    /// Key `key` named by `id`: sealing (encrypting) when `encrypt`, else MAC only. The
    /// counter starts at 0; see [`PacketKey::with_counter_start`].
    pub fn new(id: u8, key: ClusterKey, encrypt: bool) -> PacketKey {
        let cipher = encrypt.then(|| {
            let k = blake3::derive_key(SEAL_KEY_CONTEXT, &key.0);
            Box::new(XChaCha20Poly1305::new(&k.into()))
        });
        PacketKey {
            id,
            mac: key,
            cipher,
            counter: AtomicU64::new(0),
        }
    }

    /// Starts the packet counter at `start` (a random value: then even two senders with the
    /// same address and incarnation under this key, which the naming rules out, would collide
    /// only with negligible probability).
    pub fn with_counter_start(self, start: u64) -> PacketKey {
        self.counter.store(start, Ordering::Relaxed);
        self
    }

    pub fn id(&self) -> u8 {
        self.id
    }

    /// Whether packets under this key are encrypted (else only MACed).
    pub fn seals(&self) -> bool {
        self.cipher.is_some()
    }

    /// The MAC key (also the key a sealing key is derived from).
    pub fn cluster_key(&self) -> &ClusterKey {
        &self.mac
    }

    /// Bytes this key appends to a packet.
    pub fn trailer_bytes(&self) -> usize {
        if self.seals() {
            SEAL_TRAILER_BYTES
        } else {
            MAC_BYTES
        }
    }

    /// The header flag that says which trailer a packet has.
    pub(crate) fn flag(&self) -> u8 {
        if self.seals() {
            FLAG_SEAL
        } else {
            FLAG_MAC
        }
    }

    /// Authenticates (and with a cipher encrypts) `packet`, whose header (length included) is
    /// written and whose body ends at `body_end`; `packet` ends where the trailer does.
    pub(crate) fn protect(&self, packet: &mut [u8], body_end: usize) {
        match &self.cipher {
            None => {
                let mac = self
                    .mac
                    .mac(&packet[..CHECKSUM_OFFSET], &packet[HEADER_BYTES..body_end]);
                packet[body_end..body_end + MAC_BYTES].copy_from_slice(&mac);
            }
            Some(c) => {
                let counter = self.counter.fetch_add(1, Ordering::Relaxed);
                let nonce = nonce(packet, counter);
                let (head, rest) = packet.split_at_mut(HEADER_BYTES);
                let (body, trailer) = rest.split_at_mut(body_end - HEADER_BYTES);
                let tag = c
                    .encrypt_in_place_detached(&nonce, &head[..CHECKSUM_OFFSET], body)
                    .expect("a packet is far below the cipher's length bound");
                trailer[..COUNTER_BYTES].copy_from_slice(&counter.to_le_bytes());
                trailer[COUNTER_BYTES..SEAL_TRAILER_BYTES].copy_from_slice(&tag);
            }
        }
    }

    /// Verifies a MAC-only packet of which `body_end` ends the body.
    pub(crate) fn verify_mac(&self, packet: &[u8], body_end: usize) -> Result<(), WireError> {
        let want = self
            .mac
            .mac(&packet[..CHECKSUM_OFFSET], &packet[HEADER_BYTES..body_end]);
        if constant_time_eq(&want, &packet[body_end..body_end + MAC_BYTES]) {
            Ok(())
        } else {
            Err(WireError::MacMismatch)
        }
    }

    /// Verifies and decrypts in place a sealed packet whose body ends at `body_end`. On
    /// failure the body is left as it was.
    pub(crate) fn open(&self, packet: &mut [u8], body_end: usize) -> Result<(), WireError> {
        let Some(c) = &self.cipher else {
            return Err(WireError::SealUnexpected);
        };
        let end = body_end + SEAL_TRAILER_BYTES;
        let counter = crate::codec::u64_at(packet, body_end);
        let tag = Tag::clone_from_slice(&packet[body_end + COUNTER_BYTES..end]);
        let nonce = nonce(packet, counter);
        let (head, rest) = packet.split_at_mut(HEADER_BYTES);
        let body = &mut rest[..body_end - HEADER_BYTES];
        c.decrypt_in_place_detached(&nonce, &head[..CHECKSUM_OFFSET], body, &tag)
            .map_err(|_| WireError::TagMismatch)
    }
}

/// `incarnation | source | counter`: the header's bytes 8..24, then the counter.
fn nonce(packet: &[u8], counter: u64) -> XNonce {
    let mut n = [0u8; 24];
    n[..16].copy_from_slice(&packet[8..24]);
    n[16..].copy_from_slice(&counter.to_le_bytes());
    n.into()
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a key ring refused a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyRingError {
    /// The next key must be named by an id other than the current one's.
    #[error("key id {0} is the id of the key in use: give the next key another id")]
    SameId(u8),
    /// The key used before the last switch is still accepted: retire it first.
    #[error("the previous key is still accepted: retire it before installing another")]
    OldNotRetired,
    /// A switch needs a next key installed first.
    #[error("no next key installed")]
    NoNextKey,
    /// Nothing to retire: no switch since the last retirement.
    #[error("no previous key to retire")]
    NoOldKey,
    /// The cluster has no key at all (keys are rolled over, not introduced, at run time).
    #[error("the cluster runs without a key")]
    NoKey,
}

/// The keys of a node: the one it sends with, and at most one more that it also accepts.
///
/// A rollover, done on every node: [`KeyRing::install_next`] (accept the next key, keep
/// sending with the current one); once every node has it, [`KeyRing::switch`] (send with the
/// next, still accept the previous); once every node has switched and the packets in flight
/// under the previous key are gone, [`KeyRing::retire`].
#[derive(Clone, Debug)]
pub struct KeyRing {
    send: Arc<PacketKey>,
    other: Option<(Arc<PacketKey>, Role)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Installed, accepted, not yet sent with.
    Next,
    /// Sent with before the last switch, still accepted.
    Old,
}

impl From<ClusterKey> for KeyRing {
    /// A ring of one MAC-only key, id 0.
    fn from(k: ClusterKey) -> KeyRing {
        KeyRing::new(PacketKey::new(0, k, false))
    }
}

impl KeyRing {
    pub fn new(key: PacketKey) -> KeyRing {
        KeyRing {
            send: Arc::new(key),
            other: None,
        }
    }

    /// The key packets are sent with.
    pub fn send_key(&self) -> &Arc<PacketKey> {
        &self.send
    }

    /// The accepted key named `id`.
    pub fn find(&self, id: u8) -> Option<&PacketKey> {
        if self.send.id == id {
            return Some(&self.send);
        }
        match &self.other {
            Some((k, _)) if k.id == id => Some(k),
            _ => None,
        }
    }

    /// The installed next key's id, if one waits.
    pub fn next_id(&self) -> Option<u8> {
        match &self.other {
            Some((k, Role::Next)) => Some(k.id),
            _ => None,
        }
    }

    /// The previous key's id, if it is still accepted.
    pub fn old_id(&self) -> Option<u8> {
        match &self.other {
            Some((k, Role::Old)) => Some(k.id),
            _ => None,
        }
    }

    /// Accepts `key` too (replacing a next key installed before and not yet switched to).
    pub fn install_next(&mut self, key: PacketKey) -> Result<(), KeyRingError> {
        if key.id == self.send.id {
            return Err(KeyRingError::SameId(key.id));
        }
        if matches!(self.other, Some((_, Role::Old))) {
            return Err(KeyRingError::OldNotRetired);
        }
        self.other = Some((Arc::new(key), Role::Next));
        Ok(())
    }

    /// Sends with the next key from now on; the previous one is still accepted.
    pub fn switch(&mut self) -> Result<(), KeyRingError> {
        match self.other.take() {
            Some((next, Role::Next)) => {
                let old = std::mem::replace(&mut self.send, next);
                self.other = Some((old, Role::Old));
                Ok(())
            }
            other => {
                self.other = other;
                Err(KeyRingError::NoNextKey)
            }
        }
    }

    /// Stops accepting the previous key.
    pub fn retire(&mut self) -> Result<(), KeyRingError> {
        match self.other {
            Some((_, Role::Old)) => {
                self.other = None;
                Ok(())
            }
            _ => Err(KeyRingError::NoOldKey),
        }
    }
}
