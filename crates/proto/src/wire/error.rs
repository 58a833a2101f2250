/// Why a packet was rejected. Each variant names the rule the bytes broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than a header.
    #[error("packet shorter than the 40-byte header")]
    ShorterThanHeader,
    /// The first two bytes are not txcast's magic number.
    #[error("magic number is not txcast's")]
    BadMagic,
    /// A version this build does not speak.
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// A packet kind this build does not know.
    #[error("unknown packet kind {0}")]
    UnknownKind(u8),
    /// Flag bits that no version defines are set.
    #[error("undefined flag bits set: {0:#04x}")]
    UnknownFlags(u8),
    /// A reserved field is not zero.
    #[error("reserved field not zero")]
    ReservedNotZero,
    /// Longer than the largest packet txcast accepts (65507 bytes).
    #[error("packet of {0} bytes exceeds the 65507-byte bound")]
    PacketTooLong(usize),
    /// The length field does not match the bytes received.
    #[error("length field says {field} bytes but {received} were received")]
    LengthMismatch { field: usize, received: usize },
    /// The CRC-32 over the packet does not match the checksum field.
    #[error("checksum mismatch")]
    ChecksumMismatch,
    /// The packet is from another cluster instance.
    #[error("packet for cluster {found}, this is cluster {expected}")]
    WrongCluster { expected: u16, found: u16 },
    /// A cluster key is configured and the packet carries no MAC.
    #[error("cluster key set but packet carries no MAC")]
    MacMissing,
    /// The MAC does not verify under the cluster key.
    #[error("MAC does not verify under the cluster key")]
    MacMismatch,
    /// A packet carries a MAC but no key is configured to check it.
    #[error("packet carries a MAC but no cluster key is set")]
    MacUnexpected,
    /// Both the MAC and the seal flag are set.
    #[error("MAC and seal flags both set")]
    MacAndSeal,
    /// The packet names a key id that is not among the keys accepted.
    #[error("unknown key id {0}")]
    UnknownKeyId(u8),
    /// The AEAD tag does not verify under the named key (wrong key, or altered bytes).
    #[error("AEAD tag does not verify under the named key")]
    TagMismatch,
    /// The named key encrypts, and the packet is only MAC'd.
    #[error("the named key encrypts but the packet is not sealed")]
    SealMissing,
    /// The packet is sealed, and the named key only MACs.
    #[error("sealed packet under a MAC-only key")]
    SealUnexpected,
    /// A sealed packet given to [`super::Packet::parse`], which cannot decrypt in place.
    #[error("sealed packet: decrypt it with Packet::open")]
    Sealed,
    /// The body is shorter than its kind's fixed prefix.
    #[error("body shorter than its kind's fixed prefix")]
    BodyTooShort,
    /// A record's header or payload runs past the end of the body.
    #[error("record runs past the end of the packet")]
    RecordOverrun,
    /// A record has flag bits that no version defines.
    #[error("undefined record flag bits: {0:#04x}")]
    RecordUnknownFlags(u8),
    /// A fragment claims zero fragments in its message.
    #[error("fragment count is zero")]
    FragmentCountZero,
    /// A fragment's index is not below its count.
    #[error("fragment index not below fragment count")]
    FragmentIndexOutOfRange,
    /// A fragment is longer than the whole message it belongs to.
    #[error("fragment longer than its whole message")]
    FragmentLongerThanMessage,
    /// An ACK lists more NAK ranges than the bound.
    #[error("more NAK ranges than the bound")]
    TooManyNakRanges,
    /// An ACK's NAK range list does not fill its body exactly.
    #[error("NAK list does not fill the ACK body exactly")]
    NakListLength,
    /// A NAK range is empty or starts below the acknowledgement it travels with (those messages
    /// have arrived).
    #[error("NAK range empty or starting below the acknowledgement")]
    NakRangeInvalid,
    /// A DATA packet carries no message.
    #[error("DATA packet without messages")]
    DataWithoutRecords,
    /// A DATA packet's base lies above its first sequence number.
    #[error("DATA base above its first sequence number")]
    BaseAboveFirst,
    /// The numbered flag on a kind other than DATAGRAM and MULTICAST.
    #[error("numbered flag on a packet kind that carries no numbering")]
    NumberedKind,
    /// A sequence number or acknowledgement beyond `SEQ_MAX` (2^64 - 2^32).
    #[error("sequence number beyond 2^64 - 2^32")]
    SequenceOutOfRange,
}
