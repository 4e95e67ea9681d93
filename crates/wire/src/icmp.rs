//! ICMP (RFC 792) and ICMPv6 (RFC 4443) error messages as an IP packet
//! carries them: the outer header's addresses, the error's type, code and
//! MTU (fragmentation needed / packet too big), and the packet it quotes
//! (addresses, protocol, TCP/UDP ports), with every checksum the message
//! holds verified from scratch:
//!
//! * the outer IPv4 header checksum (IPv6 has none);
//! * the ICMP checksum (ICMPv6: over its pseudo-header with the outer
//!   addresses, RFC 4443 §2.3);
//! * the quoted IPv4 header checksum;
//! * the quoted TCP/UDP checksum, when the quote holds the whole segment
//!   (an error quotes as much of the packet as fits, often less) and the
//!   segment has one (an IPv4 UDP checksum of zero means none).
//!
//! A load balancer that rewrites such an error (NAT, FULLNAT) must keep
//! every one of them right; [`parse`] is the independent reader tests
//! check its output with. The outer IPv6 header must carry the ICMPv6
//! message directly (no extension headers), as the quoted one must carry
//! TCP or UDP. Nothing here does I/O; malformed input is an error, never a
//! panic.

use crate::checksum::{pseudo_sum, sum, verifies};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IPv6 next-header number of ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// Why a packet is not a well-formed ICMP error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IcmpError {
    /// The bytes end before `what` does.
    #[error("truncated: the packet ends inside {what}")]
    Truncated {
        /// Which part.
        what: &'static str,
    },
    /// The (outer or quoted) IP version is neither 4 nor 6, or the quote's
    /// differs from the outer one's.
    #[error("IP version {0} where 4 or 6 (the outer one's) was expected")]
    Version(u8),
    /// An IPv4 header length below 20 bytes.
    #[error("IPv4 header length {0} bytes (at least 20)")]
    HeaderLen(usize),
    /// The outer packet does not carry ICMP (IPv4) or ICMPv6 (IPv6).
    #[error("protocol {0} is not ICMP / ICMPv6")]
    NotIcmp(u8),
    /// An ICMP type that is not an error quoting a packet.
    #[error("ICMP type {0} is not an error message")]
    NotAnError(u8),
    /// The quoted packet carries neither TCP nor UDP.
    #[error("the quoted packet carries protocol {0}, not TCP or UDP")]
    QuotedProto(u8),
}

/// Which checksums of the message verify (`None`: the field does not exist
/// or is not in the bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checksums {
    /// The outer IPv4 header's (`None` for IPv6).
    pub outer_ip: Option<bool>,
    /// The ICMP / ICMPv6 checksum.
    pub icmp: bool,
    /// The quoted IPv4 header's (`None` for IPv6).
    pub quoted_ip: Option<bool>,
    /// The quoted TCP/UDP segment's: `None` when the quote is cut short of
    /// the whole segment, or for an IPv4 UDP datagram without a checksum.
    pub quoted_l4: Option<bool>,
}

impl Checksums {
    /// Every checksum present verifies.
    pub fn all_valid(&self) -> bool {
        self.outer_ip != Some(false)
            && self.icmp
            && self.quoted_ip != Some(false)
            && self.quoted_l4 != Some(false)
    }
}

/// A parsed ICMP / ICMPv6 error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpMessage {
    /// The outer source address (who sent the error).
    pub src: IpAddr,
    /// The outer destination address.
    pub dst: IpAddr,
    /// The outer IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// ICMP type (3 destination unreachable, 11 time exceeded, ...; ICMPv6:
    /// 1 destination unreachable, 2 packet too big, 3 time exceeded, ...).
    pub icmp_type: u8,
    /// ICMP code.
    pub code: u8,
    /// The MTU of a fragmentation-needed (IPv4 type 3 code 4) or packet-too-big
    /// (ICMPv6 type 2) error.
    pub mtu: Option<u32>,
    /// The quoted packet's protocol ([`PROTO_TCP`] or [`PROTO_UDP`]).
    pub proto: u8,
    /// The quoted packet's source address and port.
    pub quoted_src: SocketAddr,
    /// The quoted packet's destination address and port.
    pub quoted_dst: SocketAddr,
    /// Which checksums verify.
    pub checksums: Checksums,
}

fn need<'a>(b: &'a [u8], n: usize, what: &'static str) -> Result<&'a [u8], IcmpError> {
    b.get(..n).ok_or(IcmpError::Truncated { what })
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn addr(b: &[u8]) -> IpAddr {
    match b.len() {
        4 => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
        _ => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[..16]);
            IpAddr::V6(Ipv6Addr::from(a))
        }
    }
}

/// One IP header: (source, destination, protocol, header length, length of
/// the whole packet by the header, TTL, IPv4 checksum verifies).
struct Ip<'a> {
    src: &'a [u8],
    dst: &'a [u8],
    proto: u8,
    hlen: usize,
    total: usize,
    ttl: u8,
    csum_ok: Option<bool>,
}

fn ip_header<'a>(b: &'a [u8], what: &'static str) -> Result<Ip<'a>, IcmpError> {
    let v = need(b, 1, what)?[0] >> 4;
    match v {
        4 => {
            let h = need(b, 20, what)?;
            let hlen = usize::from(h[0] & 0xf) * 4;
            if hlen < 20 {
                return Err(IcmpError::HeaderLen(hlen));
            }
            let h = need(b, hlen, what)?;
            Ok(Ip {
                src: &h[12..16],
                dst: &h[16..20],
                proto: h[9],
                hlen,
                total: usize::from(be16(h, 2)),
                ttl: h[8],
                csum_ok: Some(verifies(sum(h))),
            })
        }
        6 => {
            let h = need(b, 40, what)?;
            Ok(Ip {
                src: &h[8..24],
                dst: &h[24..40],
                proto: h[6],
                hlen: 40,
                total: 40 + usize::from(be16(h, 4)),
                ttl: h[7],
                csum_ok: None,
            })
        }
        v => Err(IcmpError::Version(v)),
    }
}

/// Parse the IP packet `ip` (from its IP header on; bytes past the length
/// its header gives are ignored) as an ICMP / ICMPv6 error quoting a TCP or
/// UDP packet, and verify its checksums (see the module's text).
pub fn parse(ip: &[u8]) -> Result<IcmpMessage, IcmpError> {
    let outer = ip_header(ip, "the IP header")?;
    let v6 = outer.csum_ok.is_none();
    let want = if v6 { PROTO_ICMPV6 } else { PROTO_ICMP };
    if outer.proto != want {
        return Err(IcmpError::NotIcmp(outer.proto));
    }
    if outer.total < outer.hlen {
        return Err(IcmpError::Truncated {
            what: "the IP header (by its length field)",
        });
    }
    let msg = ip
        .get(outer.hlen..outer.total)
        .ok_or(IcmpError::Truncated {
            what: "the ICMP message",
        })?;
    let h = need(msg, 8, "the ICMP header")?;
    let (t, code) = (h[0], h[1]);
    let is_error = if v6 {
        matches!(t, 1..=4)
    } else {
        matches!(t, 3 | 4 | 5 | 11 | 12)
    };
    if !is_error {
        return Err(IcmpError::NotAnError(t));
    }
    let mtu = match (v6, t, code) {
        (false, 3, 4) => Some(u32::from(be16(h, 6))),
        (true, 2, _) => Some(u32::from_be_bytes([h[4], h[5], h[6], h[7]])),
        _ => None,
    };
    let icmp_sum = if v6 {
        sum(msg) + pseudo_sum(outer.src, outer.dst, PROTO_ICMPV6, msg.len())
    } else {
        sum(msg)
    };
    let quote = &msg[8..];
    let qv = need(quote, 1, "the quoted IP header")?[0] >> 4;
    if qv != if v6 { 6 } else { 4 } {
        return Err(IcmpError::Version(qv));
    }
    let inner = ip_header(quote, "the quoted IP header")?;
    if inner.proto != PROTO_TCP && inner.proto != PROTO_UDP {
        return Err(IcmpError::QuotedProto(inner.proto));
    }
    let l4 = &quote[inner.hlen..];
    let ports = need(l4, 4, "the quoted ports")?;
    let (sport, dport) = (be16(ports, 0), be16(ports, 2));
    // The whole segment quoted: its checksum can be verified.
    let quoted_l4 = match quote.get(inner.hlen..inner.total) {
        Some(seg) => {
            let ck_at = if inner.proto == PROTO_TCP { 16 } else { 6 };
            let no_udp_sum = inner.proto == PROTO_UDP && !v6 && seg.len() >= 8 && be16(seg, 6) == 0;
            if seg.len() < ck_at + 2 || no_udp_sum {
                None
            } else {
                Some(verifies(
                    sum(seg) + pseudo_sum(inner.src, inner.dst, inner.proto, seg.len()),
                ))
            }
        }
        _ => None,
    };
    Ok(IcmpMessage {
        src: addr(outer.src),
        dst: addr(outer.dst),
        ttl: outer.ttl,
        icmp_type: t,
        code,
        mtu,
        proto: inner.proto,
        quoted_src: SocketAddr::new(addr(inner.src), sport),
        quoted_dst: SocketAddr::new(addr(inner.dst), dport),
        checksums: Checksums {
            outer_ip: outer.csum_ok,
            icmp: verifies(icmp_sum),
            quoted_ip: inner.csum_ok,
            quoted_l4,
        },
    })
}

#[cfg(test)]
mod tests;
