//! PROXY protocol version 2: the binary header (§2.2).
//!
//! ```text
//! 0      12        13        14         16
//! | sig  | ver|cmd | fam|tr  | len (BE) | addresses | TLVs ... |
//!                                       |<-------- len -------->|
//! ```
//! The fixed 16 bytes are checked byte by byte as they arrive (signature,
//! version, command, family, transport, then the length against the caller's
//! limit); the variable part is decoded only once all `16 + len` bytes are
//! in (§2.2: "the receiver must not start to parse an address before the
//! whole address block is received").

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::crc32c::Crc32c;
use super::v1::to_v6;
use super::{
    BuildError, Command, Family, ParseError, Parsed, ProxyHeader, Tlv, TlvType, Transport,
    V2_FIXED_LEN, V2_SIGNATURE, Version,
};

const VERSION_2: u8 = 0x2;
const TLV_HEADER_LEN: usize = 3;
const CRC_LEN: usize = 4;

fn family_nibble(f: Family) -> u8 {
    match f {
        Family::Unspec => 0x0,
        Family::Inet => 0x1,
        Family::Inet6 => 0x2,
        Family::Unix => 0x3,
    }
}

fn transport_nibble(t: Transport) -> u8 {
    match t {
        Transport::Unspec => 0x0,
        Transport::Stream => 0x1,
        Transport::Datagram => 0x2,
    }
}

pub(super) fn parse(buf: &[u8], limit: usize) -> Result<Parsed, ParseError> {
    for (i, (&got, &want)) in buf.iter().zip(&V2_SIGNATURE).enumerate() {
        if got != want {
            return Err(ParseError::NotProxy { offset: i });
        }
    }
    let incomplete_fixed = Parsed::Incomplete {
        needed_hint: V2_FIXED_LEN.checked_sub(buf.len()),
    };
    let Some(&ver_cmd) = buf.get(12) else {
        return Ok(incomplete_fixed);
    };
    if ver_cmd >> 4 != VERSION_2 {
        return Err(ParseError::V2BadVersion {
            version: ver_cmd >> 4,
        });
    }
    let command = match ver_cmd & 0x0F {
        0x0 => Command::Local,
        0x1 => Command::Proxy,
        other => return Err(ParseError::V2BadCommand { command: other }),
    };
    let Some(&fam) = buf.get(13) else {
        return Ok(incomplete_fixed);
    };
    let family = match fam >> 4 {
        0x0 => Family::Unspec,
        0x1 => Family::Inet,
        0x2 => Family::Inet6,
        0x3 => Family::Unix,
        other => return Err(ParseError::V2BadFamily { family: other }),
    };
    let transport = match fam & 0x0F {
        0x0 => Transport::Unspec,
        0x1 => Transport::Stream,
        0x2 => Transport::Datagram,
        other => return Err(ParseError::V2BadTransport { transport: other }),
    };
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(incomplete_fixed);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    let total = V2_FIXED_LEN + len;
    if total > limit {
        return Err(ParseError::V2TooLong { len: total, limit });
    }
    let Some(header) = buf.get(..total) else {
        return Ok(Parsed::Incomplete {
            needed_hint: total.checked_sub(buf.len()),
        });
    };
    let body = header.get(V2_FIXED_LEN..).unwrap_or_default();
    let addr_len = family.v2_address_len();

    let parsed = match command {
        Command::Local => {
            // §2.2: for LOCAL the receiver "must use the real connection
            // endpoints and discard the protocol block including the family".
            // The address block is still skipped so TLVs can be found; if the
            // length cannot even hold it, the whole block is discarded.
            let tlvs = if body.len() >= addr_len {
                parse_tlvs(header, V2_FIXED_LEN + addr_len)?
            } else {
                Vec::new()
            };
            ProxyHeader {
                version: Version::V2,
                command,
                transport: Transport::Unspec,
                family: Family::Unspec,
                addresses: None,
                tlvs,
            }
        }
        Command::Proxy => {
            let Some(block) = body.get(..addr_len) else {
                return Err(ParseError::V2AddressesTruncated {
                    family,
                    len,
                    needed: addr_len,
                });
            };
            let addresses = match transport {
                Transport::Stream | Transport::Datagram => decode_addresses(family, block),
                // §2.2: with UNSPEC transport "the receiver should ignore
                // address information".
                Transport::Unspec => None,
            };
            ProxyHeader {
                version: Version::V2,
                command,
                transport,
                family,
                addresses,
                tlvs: parse_tlvs(header, V2_FIXED_LEN + addr_len)?,
            }
        }
    };
    Ok(Parsed::Complete {
        header: parsed,
        consumed: total,
    })
}

/// Decode an `AF_INET`/`AF_INET6` block (already exactly the right size);
/// other families carry nothing this crate exposes.
fn decode_addresses(family: Family, block: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    fn port(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
    }
    match family {
        Family::Inet => {
            let src: [u8; 4] = block.get(0..4)?.try_into().ok()?;
            let dst: [u8; 4] = block.get(4..8)?.try_into().ok()?;
            Some((
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(src), port(block, 8)?)),
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(dst), port(block, 10)?)),
            ))
        }
        Family::Inet6 => {
            let src: [u8; 16] = block.get(0..16)?.try_into().ok()?;
            let dst: [u8; 16] = block.get(16..32)?.try_into().ok()?;
            Some((
                SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(src),
                    port(block, 32)?,
                    0,
                    0,
                )),
                SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(dst),
                    port(block, 34)?,
                    0,
                    0,
                )),
            ))
        }
        Family::Unspec | Family::Unix => None,
    }
}

/// Parse the TLVs of `header` (the whole `16 + len` bytes) from offset
/// `start` to the end, then verify a CRC32C TLV if there is one.
fn parse_tlvs(header: &[u8], start: usize) -> Result<Vec<Tlv>, ParseError> {
    let mut tlvs = Vec::new();
    let mut crc_at = None;
    let mut off = start;
    while off < header.len() {
        let (Some(&kind), Some(&hi), Some(&lo)) =
            (header.get(off), header.get(off + 1), header.get(off + 2))
        else {
            return Err(ParseError::V2TlvOverrun { offset: off });
        };
        let vlen = usize::from(u16::from_be_bytes([hi, lo]));
        let vstart = off + TLV_HEADER_LEN;
        let vend = vstart + vlen;
        let Some(value) = header.get(vstart..vend) else {
            return Err(ParseError::V2TlvOverrun { offset: off });
        };
        if kind == TlvType::Crc32c.code() {
            if vlen != CRC_LEN {
                return Err(ParseError::V2BadCrc32cLength { len: vlen });
            }
            if crc_at.is_some() {
                return Err(ParseError::V2DuplicateCrc32c);
            }
            crc_at = Some(vstart);
        }
        tlvs.push(Tlv {
            kind,
            value: value.to_vec(),
        });
        off = vend;
    }
    if let Some(at) = crc_at {
        verify_crc(header, at)?;
    }
    Ok(tlvs)
}

/// §2.2.3: CRC32C of the whole header with the 4-byte field zeroed must
/// equal the field (stored in network byte order).
fn verify_crc(header: &[u8], at: usize) -> Result<(), ParseError> {
    let (Some(before), Some(field), Some(after)) = (
        header.get(..at),
        header.get(at..at + CRC_LEN),
        header.get(at + CRC_LEN..),
    ) else {
        return Err(ParseError::V2TlvOverrun { offset: at });
    };
    let received = u32::from_be_bytes([
        field.first().copied().unwrap_or(0),
        field.get(1).copied().unwrap_or(0),
        field.get(2).copied().unwrap_or(0),
        field.get(3).copied().unwrap_or(0),
    ]);
    let mut c = Crc32c::new();
    c.update(before);
    c.update(&[0; CRC_LEN]);
    c.update(after);
    let computed = c.finish();
    if computed == received {
        Ok(())
    } else {
        Err(ParseError::V2Crc32cMismatch { received, computed })
    }
}

/// The address block to write after the fixed part.
#[derive(Debug, Clone, Copy)]
enum AddrBlock {
    Empty,
    V4(SocketAddrV4, SocketAddrV4),
    V6 {
        src: Ipv6Addr,
        sport: u16,
        dst: Ipv6Addr,
        dport: u16,
    },
    /// A zeroed block of a family's size (address-less `Unix`/`Inet`/`Inet6`).
    Zeros(usize),
}

impl AddrBlock {
    fn len(self) -> usize {
        match self {
            AddrBlock::Empty => 0,
            AddrBlock::V4(..) => Family::Inet.v2_address_len(),
            AddrBlock::V6 { .. } => Family::Inet6.v2_address_len(),
            AddrBlock::Zeros(n) => n,
        }
    }
}

/// Everything but the TLVs: bytes 13 and 14 and the address block.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    ver_cmd: u8,
    fam: u8,
    addrs: AddrBlock,
}

fn layout_for(
    command: Command,
    transport: Transport,
    addrs: Option<(SocketAddr, SocketAddr)>,
) -> Layout {
    let proxy = |fam: u8, addrs| Layout {
        ver_cmd: VERSION_2 << 4 | 0x1,
        fam,
        addrs,
    };
    match (command, transport, addrs) {
        // §2.2: LOCAL senders use AF_UNSPEC/UNSPEC and present no address.
        (Command::Local, ..) => Layout {
            ver_cmd: VERSION_2 << 4,
            fam: 0x00,
            addrs: AddrBlock::Empty,
        },
        // An unspecified transport makes addresses meaningless (§2.2): send
        // the one UNSPEC byte every receiver must implement.
        (Command::Proxy, Transport::Unspec, _) => proxy(0x00, AddrBlock::Empty),
        (Command::Proxy, t, None) => proxy(transport_nibble(t), AddrBlock::Empty),
        (Command::Proxy, t, Some((SocketAddr::V4(s), SocketAddr::V4(d)))) => {
            proxy(0x10 | transport_nibble(t), AddrBlock::V4(s, d))
        }
        // At least one IPv6 address: both as IPv6, IPv4 mapped to
        // ::ffff:a.b.c.d, as HAProxy's sender does.
        (Command::Proxy, t, Some((s, d))) => proxy(
            0x20 | transport_nibble(t),
            AddrBlock::V6 {
                src: to_v6(s.ip()),
                sport: s.port(),
                dst: to_v6(d.ip()),
                dport: d.port(),
            },
        ),
    }
}

/// The layout that re-encodes a header as decoded by [`parse`].
pub(super) fn header_layout(h: &ProxyHeader) -> Layout {
    match (h.command, h.addresses) {
        (Command::Proxy, None) => Layout {
            ver_cmd: VERSION_2 << 4 | 0x1,
            fam: family_nibble(h.family) << 4 | transport_nibble(h.transport),
            addrs: AddrBlock::Zeros(h.family.v2_address_len()),
        },
        _ => layout_for(h.command, h.transport, h.addresses),
    }
}

fn tlv_wire_len(t: &Tlv) -> usize {
    let vlen = if t.kind == TlvType::Crc32c.code() {
        CRC_LEN
    } else {
        t.value.len()
    };
    TLV_HEADER_LEN.saturating_add(vlen)
}

impl Layout {
    fn body_len(&self, tlvs: &[Tlv]) -> usize {
        tlvs.iter().fold(self.addrs.len(), |acc, t| {
            acc.saturating_add(tlv_wire_len(t))
        })
    }

    pub(super) fn buffer_len(&self, tlvs: &[Tlv]) -> usize {
        V2_FIXED_LEN.saturating_add(self.body_len(tlvs))
    }

    pub(super) fn emit(&self, tlvs: &[Tlv], out: &mut Vec<u8>) -> Result<(), BuildError> {
        // Validate everything first so an error leaves `out` untouched.
        let mut crcs = 0usize;
        for t in tlvs {
            if t.kind == TlvType::Crc32c.code() {
                crcs += 1;
            } else if t.value.len() > usize::from(u16::MAX) {
                return Err(BuildError::TlvTooLong {
                    kind: t.kind,
                    len: t.value.len(),
                });
            }
        }
        if crcs > 1 {
            return Err(BuildError::DuplicateCrc32c);
        }
        let body = self.body_len(tlvs);
        let Ok(len) = u16::try_from(body) else {
            return Err(BuildError::HeaderTooLong { len: body });
        };

        let start = out.len();
        out.reserve(V2_FIXED_LEN + body);
        out.extend_from_slice(&V2_SIGNATURE);
        out.push(self.ver_cmd);
        out.push(self.fam);
        out.extend_from_slice(&len.to_be_bytes());
        match self.addrs {
            AddrBlock::Empty => {}
            AddrBlock::V4(s, d) => {
                out.extend_from_slice(&s.ip().octets());
                out.extend_from_slice(&d.ip().octets());
                out.extend_from_slice(&s.port().to_be_bytes());
                out.extend_from_slice(&d.port().to_be_bytes());
            }
            AddrBlock::V6 {
                src,
                sport,
                dst,
                dport,
            } => {
                out.extend_from_slice(&src.octets());
                out.extend_from_slice(&dst.octets());
                out.extend_from_slice(&sport.to_be_bytes());
                out.extend_from_slice(&dport.to_be_bytes());
            }
            AddrBlock::Zeros(n) => out.resize(out.len() + n, 0),
        }
        let mut crc_at = None;
        for t in tlvs {
            out.push(t.kind);
            if t.kind == TlvType::Crc32c.code() {
                out.extend_from_slice(&(CRC_LEN as u16).to_be_bytes());
                crc_at = Some(out.len());
                out.extend_from_slice(&[0; CRC_LEN]);
            } else {
                // Checked above: the value fits in 16 bits.
                let vlen = u16::try_from(t.value.len()).unwrap_or(u16::MAX);
                out.extend_from_slice(&vlen.to_be_bytes());
                out.extend_from_slice(&t.value);
            }
        }
        if let Some(at) = crc_at {
            let sum = super::crc32c(out.get(start..).unwrap_or_default());
            if let Some(field) = out.get_mut(at..at + CRC_LEN) {
                field.copy_from_slice(&sum.to_be_bytes());
            }
        }
        Ok(())
    }
}

/// Append a v2 header. `Local` writes `AF_UNSPEC`/`UNSPEC` with no
/// addresses (the §2.2 recommendation for health checks) whatever the other
/// arguments; `Proxy` with `Transport::Unspec` likewise writes the UNSPEC
/// byte `0x00`. With addresses: two IPv4 give `AF_INET`, anything else
/// `AF_INET6` with IPv4 mapped to `::ffff:a.b.c.d` (as HAProxy does). TLVs
/// are written in order; a `CRC32C` TLV's value is ignored and replaced by
/// the checksum of the finished header. On error nothing is appended.
pub fn write_v2(
    command: Command,
    transport: Transport,
    addrs: Option<(SocketAddr, SocketAddr)>,
    tlvs: &[Tlv],
    out: &mut Vec<u8>,
) -> Result<(), BuildError> {
    layout_for(command, transport, addrs).emit(tlvs, out)
}

/// Exact number of bytes [`write_v2`] appends for these arguments
/// (saturating; more than [`super::V2_MAX_LEN`] means it would fail).
pub fn v2_buffer_len(
    command: Command,
    transport: Transport,
    addrs: Option<(SocketAddr, SocketAddr)>,
    tlvs: &[Tlv],
) -> usize {
    layout_for(command, transport, addrs).buffer_len(tlvs)
}
