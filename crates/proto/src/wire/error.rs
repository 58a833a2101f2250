use core::fmt;

/// Why a packet was rejected. Each variant names the rule the bytes broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than a header.
    ShorterThanHeader,
    /// The first two bytes are not txcast's magic number.
    BadMagic,
    /// A version this build does not speak.
    UnsupportedVersion(u8),
    /// A packet kind this build does not know.
    UnknownKind(u8),
    /// Flag bits that no version defines are set.
    UnknownFlags(u8),
    /// A reserved field is not zero.
    ReservedNotZero,
    /// Longer than the largest packet txcast accepts (65507 bytes).
    PacketTooLong(usize),
    /// The length field does not match the bytes received.
    LengthMismatch { field: usize, received: usize },
    /// The CRC-32 over the packet does not match the checksum field.
    ChecksumMismatch,
    /// The packet is from another cluster instance.
    WrongCluster { expected: u16, found: u16 },
    /// A cluster key is configured and the packet carries no MAC.
    MacMissing,
    /// The MAC does not verify under the cluster key.
    MacMismatch,
    /// A packet carries a MAC but no key is configured to check it.
    MacUnexpected,
    /// The body is shorter than its kind's fixed prefix.
    BodyTooShort,
    /// A record's header or payload runs past the end of the body.
    RecordOverrun,
    /// A record has flag bits that no version defines.
    RecordUnknownFlags(u8),
    /// A fragment claims zero fragments in its message.
    FragmentCountZero,
    /// A fragment's index is not below its count.
    FragmentIndexOutOfRange,
    /// A fragment is longer than the whole message it belongs to.
    FragmentLongerThanMessage,
    /// An ACK lists more NAK ranges than the bound.
    TooManyNakRanges,
    /// An ACK's NAK range list does not fill its body exactly.
    NakListLength,
    /// A NAK range is empty or starts below the acknowledgement it travels with (those messages
    /// have arrived).
    NakRangeInvalid,
    /// A DATA packet carries no message.
    DataWithoutRecords,
    /// A DATA packet's base lies above its first sequence number.
    BaseAboveFirst,
    /// A sequence number or acknowledgement beyond `SEQ_MAX` (2^64 - 2^32).
    SequenceOutOfRange,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use WireError::*;
        match self {
            ShorterThanHeader => write!(f, "packet shorter than the 40-byte header"),
            PacketTooLong(n) => write!(f, "packet of {n} bytes exceeds the 65507-byte bound"),
            BadMagic => write!(f, "magic number is not txcast's"),
            UnsupportedVersion(v) => write!(f, "unsupported version {v}"),
            UnknownKind(k) => write!(f, "unknown packet kind {k}"),
            UnknownFlags(fl) => write!(f, "undefined flag bits set: {fl:#04x}"),
            ReservedNotZero => write!(f, "reserved field not zero"),
            LengthMismatch { field, received } => write!(
                f,
                "length field says {field} bytes but {received} were received"
            ),
            ChecksumMismatch => write!(f, "checksum mismatch"),
            WrongCluster { expected, found } => {
                write!(f, "packet for cluster {found}, this is cluster {expected}")
            }
            MacMissing => write!(f, "cluster key set but packet carries no MAC"),
            MacMismatch => write!(f, "MAC does not verify under the cluster key"),
            MacUnexpected => write!(f, "packet carries a MAC but no cluster key is set"),
            BodyTooShort => write!(f, "body shorter than its kind's fixed prefix"),
            RecordOverrun => write!(f, "record runs past the end of the packet"),
            RecordUnknownFlags(fl) => write!(f, "undefined record flag bits: {fl:#04x}"),
            FragmentCountZero => write!(f, "fragment count is zero"),
            FragmentIndexOutOfRange => write!(f, "fragment index not below fragment count"),
            FragmentLongerThanMessage => write!(f, "fragment longer than its whole message"),
            TooManyNakRanges => write!(f, "more NAK ranges than the bound"),
            NakListLength => write!(f, "NAK list does not fill the ACK body exactly"),
            NakRangeInvalid => write!(f, "NAK range empty or starting below the acknowledgement"),
            DataWithoutRecords => write!(f, "DATA packet without messages"),
            BaseAboveFirst => write!(f, "DATA base above its first sequence number"),
            SequenceOutOfRange => write!(f, "sequence number beyond 2^64 - 2^32"),
        }
    }
}

impl std::error::Error for WireError {}
