//! HAProxy's PROXY protocol, versions 1 and 2: a header the connection
//! initiator (a load balancer) prepends to a TCP stream so the receiver (a
//! real server, or rvs behind another balancer) learns the original client
//! and destination addresses. rvs's userspace proxy sends it toward real
//! servers and may accept it from a trusted upstream balancer.
//!
//! Reference: "The PROXY protocol, Versions 1 & 2" (Willy Tarreau, revision
//! 2020/03/05), `doc/proxy-protocol.txt` in the HAProxy tree. Section numbers
//! below are that document's.
//!
//! # What is implemented
//! * §2.1 (v1, text): `TCP4`, `TCP6` and `UNKNOWN` lines, parsed strictly —
//!   exactly one space between fields, no leading zeroes in IPv4 octets or
//!   ports, ports 0..=65535, both addresses of the announced family, the line
//!   ended by CRLF (a bare CR or LF is an error) within 107 bytes. After
//!   `UNKNOWN` the rest of the line is ignored, as the spec requires.
//! * §2.2 (v2, binary): the 12-byte signature, version 2 only, commands
//!   `LOCAL` and `PROXY`, families `AF_UNSPEC`/`AF_INET`/`AF_INET6`/`AF_UNIX`,
//!   transports `UNSPEC`/`STREAM`/`DGRAM`. `AF_UNIX` address blocks (2×108
//!   bytes) are skipped: the header reports [`Family::Unix`] with no
//!   addresses. For `LOCAL` the family and address block are ignored (the
//!   header reports `Unspec`/`Unspec`/no addresses) but TLVs are still read.
//! * §2.2 TLVs: every TLV is returned as `(type, value)`; the registered
//!   types (§2.2.1–§2.2.7) have names via [`TlvType`]. The `SSL` TLV's
//!   sub-TLVs are left inside its value, undecoded.
//! * §2.2.3 CRC32C: when present it must be 4 bytes, appear once, and match
//!   the CRC32C of the whole header with the field zeroed; the builder
//!   computes it for you.
//!
//! # Limits
//! * v1 lines are at most [`V1_MAX_LEN`] (107) bytes including CRLF.
//! * v2 headers are at most `16 + 65535` bytes by construction (the length
//!   field is 16 bits); [`parse_with_limit`] lets a caller refuse anything
//!   longer than its own bound (e.g. 4096) as soon as the fixed 16 bytes are
//!   in, before buffering the rest.
//! * IPv6 flow label and scope id are not carried by the protocol: parsed
//!   addresses have them zero.
//!
//! # Incremental parsing and the no-panic contract
//! [`parse`] accepts whatever prefix of the stream has arrived. It answers
//! [`Parsed::Incomplete`] while more bytes could still make a valid header,
//! [`Parsed::Complete`] with the exact number of header bytes (the rest of
//! the buffer is application data, untouched), or an error as soon as the
//! bytes seen cannot begin a valid header — the very first byte that matches
//! neither `"PROXY "` nor the v2 signature is rejected. No input makes it
//! panic (fuzzed by `fuzz/fuzz_targets/proxy_protocol.rs`).
//!
//! Note (§2, §5): a receiver must be *configured* to expect the header and
//! must not guess; this module never guesses either — non-PROXY bytes are an
//! error, not "no header".

mod crc32c;
mod v1;
mod v2;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;

pub use crc32c::crc32c;
pub use v1::{v1_buffer_len, write_v1, write_v1_unknown};
pub use v2::{v2_buffer_len, write_v2};

/// The 12-byte signature that starts every v2 header (§2.2).
pub const V2_SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];

/// Longest v1 line a receiver must accept, CRLF included (§2.1 worst case:
/// `"PROXY UNKNOWN ffff:…:ffff ffff:…:ffff 65535 65535\r\n"`).
pub const V1_MAX_LEN: usize = 107;

/// Length of the fixed part of a v2 header: signature, version/command,
/// family/transport, 16-bit length.
pub const V2_FIXED_LEN: usize = 16;

/// Largest possible v2 header: the fixed part plus the largest 16-bit length.
/// [`parse`] uses this as its limit.
pub const V2_MAX_LEN: usize = V2_FIXED_LEN + u16::MAX as usize;

/// Which format the header was (or is to be) written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// Human-readable text line (§2.1).
    V1,
    /// Binary format (§2.2).
    V2,
}

/// v2 command (low nibble of byte 13). v1 headers always report `Proxy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// The proxy opened this connection on its own behalf (health checks):
    /// the receiver uses the real connection endpoints.
    Local,
    /// The connection is relayed for a client; the addresses are the
    /// original endpoints.
    Proxy,
}

/// Transport protocol (v2 low nibble of byte 14; v1 `TCP4`/`TCP6` is
/// `Stream`, `UNKNOWN` is `Unspec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Unknown or unspecified; addresses, if any, are to be ignored.
    Unspec,
    /// `SOCK_STREAM` (TCP).
    Stream,
    /// `SOCK_DGRAM` (UDP).
    Datagram,
}

/// Address family (v2 high nibble of byte 14; v1 `TCP4` is `Inet`, `TCP6`
/// is `Inet6`, `UNKNOWN` is `Unspec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `AF_UNSPEC`: no address block.
    Unspec,
    /// `AF_INET`: 2×4 address bytes + 2×2 port bytes.
    Inet,
    /// `AF_INET6`: 2×16 address bytes + 2×2 port bytes.
    Inet6,
    /// `AF_UNIX`: 2×108 path bytes, skipped by this parser.
    Unix,
}

impl Family {
    /// Size of this family's v2 address block (§2.2).
    pub const fn v2_address_len(self) -> usize {
        match self {
            Family::Unspec => 0,
            Family::Inet => 12,
            Family::Inet6 => 36,
            Family::Unix => 216,
        }
    }
}

/// The registered v2 TLV types (§2.2, §2.2.1–§2.2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlvType {
    /// `PP2_TYPE_ALPN` (0x01): the negotiated ALPN protocol.
    Alpn,
    /// `PP2_TYPE_AUTHORITY` (0x02): host name (TLS SNI), UTF-8.
    Authority,
    /// `PP2_TYPE_CRC32C` (0x03): checksum of the whole header.
    Crc32c,
    /// `PP2_TYPE_NOOP` (0x04): padding, ignored.
    Noop,
    /// `PP2_TYPE_UNIQUE_ID` (0x05): opaque connection id, up to 128 bytes.
    UniqueId,
    /// `PP2_TYPE_SSL` (0x20): TLS details with nested sub-TLVs.
    Ssl,
    /// `PP2_TYPE_NETNS` (0x30): network namespace name.
    NetNs,
}

impl TlvType {
    /// The type byte on the wire.
    pub const fn code(self) -> u8 {
        match self {
            TlvType::Alpn => 0x01,
            TlvType::Authority => 0x02,
            TlvType::Crc32c => 0x03,
            TlvType::Noop => 0x04,
            TlvType::UniqueId => 0x05,
            TlvType::Ssl => 0x20,
            TlvType::NetNs => 0x30,
        }
    }

    /// The registered type for a type byte, if it is one.
    pub const fn from_code(code: u8) -> Option<TlvType> {
        Some(match code {
            0x01 => TlvType::Alpn,
            0x02 => TlvType::Authority,
            0x03 => TlvType::Crc32c,
            0x04 => TlvType::Noop,
            0x05 => TlvType::UniqueId,
            0x20 => TlvType::Ssl,
            0x30 => TlvType::NetNs,
            _ => return None,
        })
    }
}

/// One v2 Type-Length-Value record. The type is kept as the raw byte so
/// unregistered and custom types (0xE0..=0xEF) round-trip unchanged; use
/// [`Tlv::known_type`] for the registered names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tlv {
    /// The type byte.
    pub kind: u8,
    /// The value bytes (at most 65535 to be encodable).
    pub value: Vec<u8>,
}

impl Tlv {
    /// A TLV of a registered type.
    pub fn new(kind: TlvType, value: impl Into<Vec<u8>>) -> Self {
        Tlv {
            kind: kind.code(),
            value: value.into(),
        }
    }

    /// The registered type of this TLV, or `None` for other type bytes.
    pub const fn known_type(&self) -> Option<TlvType> {
        TlvType::from_code(self.kind)
    }
}

/// A decoded PROXY header, v1 or v2, in one shape so callers handle both the
/// same way.
///
/// Invariants of parsed headers (builders rely on them to re-encode exactly):
/// `addresses` is `Some` only for the `Proxy` command with a `Stream` or
/// `Datagram` transport over `Inet`/`Inet6`, and then both addresses are of
/// that family; `Local` headers report `Unspec` family and transport; v1
/// headers carry no TLVs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHeader {
    /// Wire format.
    pub version: Version,
    /// `Local` (health check, use the real endpoints) or `Proxy`.
    pub command: Command,
    /// Transport protocol.
    pub transport: Transport,
    /// Address family as announced (kept even when addresses are not
    /// decoded, e.g. `Unix`).
    pub family: Family,
    /// `(source, destination)` — the original client and the address it
    /// connected to — or `None` when the header carries none to use
    /// (v1 `UNKNOWN`, `LOCAL`, `AF_UNSPEC`, `AF_UNIX`, `UNSPEC` transport).
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// v2 TLVs in wire order (empty for v1).
    pub tlvs: Vec<Tlv>,
}

impl ProxyHeader {
    /// Number of bytes [`ProxyHeader::emit`] appends (saturating; an
    /// unencodable v2 header reports more than [`V2_MAX_LEN`]).
    pub fn buffer_len(&self) -> usize {
        match self.version {
            Version::V1 => match self.addresses {
                Some((src, dst)) => v1_buffer_len(src, dst),
                None => v1::UNKNOWN_LINE.len(),
            },
            Version::V2 => v2::header_layout(self).buffer_len(&self.tlvs),
        }
    }

    /// Append the encoded header to `out`. v1 with addresses writes a
    /// `TCP4`/`TCP6` line (see [`write_v1`]), without them `UNKNOWN`; v2
    /// writes the announced family and transport (an address-less `Unix`,
    /// `Inet` or `Inet6` header gets a zeroed address block) and the TLVs,
    /// filling in a `CRC32C` TLV's value. On error nothing is appended.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), BuildError> {
        match self.version {
            Version::V1 => {
                match self.addresses {
                    Some((src, dst)) => write_v1(src, dst, out),
                    None => write_v1_unknown(out),
                }
                Ok(())
            }
            Version::V2 => v2::header_layout(self).emit(&self.tlvs, out),
        }
    }
}

/// Outcome of [`parse`] on the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A whole, valid header. `buf[consumed..]` is application data.
    Complete {
        /// The decoded header.
        header: ProxyHeader,
        /// Length of the header in bytes.
        consumed: usize,
    },
    /// Every byte so far is consistent with a valid header; read more.
    Incomplete {
        /// A lower bound on how many more bytes are needed, when known
        /// (exact for v2 once its 16 fixed bytes are in); `None` means "at
        /// least one" (v1 waiting for its CRLF).
        needed_hint: Option<usize>,
    },
}

/// Why a buffer is not a valid PROXY header. Every variant means the
/// connection should be dropped (§2.1: "abort the connection as soon as
/// possible").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The byte at `offset` matches neither the v1 `"PROXY "` prefix nor the
    /// v2 signature: the peer is not speaking the PROXY protocol.
    #[error(
        "not a PROXY protocol header (byte {offset} matches neither \"PROXY \" nor the v2 signature)"
    )]
    NotProxy {
        /// Offset of the first byte that cannot match.
        offset: usize,
    },
    /// No CRLF within the first 107 bytes of a v1 line.
    #[error("PROXY v1 line has no CRLF within {V1_MAX_LEN} bytes")]
    V1TooLong,
    /// A CR not followed by LF, or an LF not preceded by CR, in a v1 line.
    #[error("PROXY v1 line has a bare CR or LF at byte {offset} (CRLF required)")]
    V1BareCrOrLf {
        /// Offset of the offending byte.
        offset: usize,
    },
    /// The v1 protocol field is not `TCP4`, `TCP6` or `UNKNOWN`.
    #[error("PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN")]
    V1BadProtocol,
    /// A byte that cannot appear in a `TCP4`/`TCP6` line.
    #[error("unexpected byte 0x{byte:02x} at offset {offset} in a PROXY v1 line")]
    V1BadByte {
        /// Offset of the byte.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// A v1 field is malformed: wrong field count or spacing, an address
    /// that does not parse or is not of the announced family, a port out of
    /// range or with a leading zero.
    #[error("PROXY v1 line has a bad {field}")]
    V1BadField {
        /// Which field: "field count", "source address", "destination
        /// address", "source port" or "destination port".
        field: &'static str,
    },
    /// The v2 version nibble is not 2.
    #[error("PROXY v2 header has version {version}, only 2 is defined")]
    V2BadVersion {
        /// The version nibble.
        version: u8,
    },
    /// The v2 command nibble is neither LOCAL (0) nor PROXY (1).
    #[error("PROXY v2 header has unassigned command {command}")]
    V2BadCommand {
        /// The command nibble.
        command: u8,
    },
    /// The v2 family nibble is not one of 0..=3.
    #[error("PROXY v2 header has unsupported address family {family}")]
    V2BadFamily {
        /// The family nibble.
        family: u8,
    },
    /// The v2 transport nibble is not one of 0..=2.
    #[error("PROXY v2 header has unsupported transport {transport}")]
    V2BadTransport {
        /// The transport nibble.
        transport: u8,
    },
    /// The v2 header (16 + length) is longer than the caller's limit.
    #[error("PROXY v2 header of {len} bytes exceeds the limit of {limit}")]
    V2TooLong {
        /// Total header length announced.
        len: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The v2 length is too short for the announced family's addresses.
    #[error("PROXY v2 length {len} is too short for {family:?} addresses ({needed} bytes)")]
    V2AddressesTruncated {
        /// The announced family.
        family: Family,
        /// The length field.
        len: usize,
        /// Bytes that family needs.
        needed: usize,
    },
    /// A TLV (or a TLV header) at `offset` runs past the declared length.
    #[error("PROXY v2 TLV at offset {offset} overruns the header length")]
    V2TlvOverrun {
        /// Offset of the TLV's type byte from the start of the header.
        offset: usize,
    },
    /// A CRC32C TLV whose value is not 4 bytes.
    #[error("PROXY v2 CRC32C TLV has {len} bytes, expected 4")]
    V2BadCrc32cLength {
        /// The TLV's value length.
        len: usize,
    },
    /// More than one CRC32C TLV.
    #[error("PROXY v2 header has more than one CRC32C TLV")]
    V2DuplicateCrc32c,
    /// The CRC32C TLV does not match the header.
    #[error("PROXY v2 CRC32C mismatch: header says {received:#010x}, computed {computed:#010x}")]
    V2Crc32cMismatch {
        /// Checksum carried in the TLV.
        received: u32,
        /// Checksum computed over the header.
        computed: u32,
    },
}

/// Why a v2 header cannot be built. Nothing is appended when this is
/// returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A TLV value longer than the 16-bit length field allows.
    #[error("TLV type 0x{kind:02x} value of {len} bytes exceeds 65535")]
    TlvTooLong {
        /// The TLV type byte.
        kind: u8,
        /// Its value length.
        len: usize,
    },
    /// Addresses plus TLVs exceed the 16-bit header length field.
    #[error("PROXY v2 header body of {len} bytes exceeds 65535")]
    HeaderTooLong {
        /// Body length that was needed.
        len: usize,
    },
    /// More than one CRC32C TLV was given (receivers reject that).
    #[error("more than one CRC32C TLV")]
    DuplicateCrc32c,
}

/// Parse a PROXY header (v1 or v2) from the start of `buf`, accepting v2
/// headers up to the protocol maximum ([`V2_MAX_LEN`]). See
/// [`parse_with_limit`].
pub fn parse(buf: &[u8]) -> Result<Parsed, ParseError> {
    parse_with_limit(buf, V2_MAX_LEN)
}

/// Parse a PROXY header (v1 or v2) from the start of `buf`, which holds the
/// bytes received so far. A v2 header longer than `max_v2_len` bytes (fixed
/// part included) is refused as soon as its length field is seen, so a
/// receiver never buffers more than it is willing to. v1 lines are always
/// bounded by [`V1_MAX_LEN`].
pub fn parse_with_limit(buf: &[u8], max_v2_len: usize) -> Result<Parsed, ParseError> {
    match buf.first() {
        None => Ok(Parsed::Incomplete {
            needed_hint: Some(v1::MIN_LEN),
        }),
        Some(&b'P') => v1::parse(buf),
        Some(&0x0D) => v2::parse(buf, max_v2_len),
        Some(_) => Err(ParseError::NotProxy { offset: 0 }),
    }
}
