//! PROXY protocol version 1: the human-readable line (§2.1).
//!
//! `"PROXY" SP ("TCP4" | "TCP6") SP src SP dst SP sport SP dport CRLF` or
//! `"PROXY" SP "UNKNOWN" [anything] CRLF`, at most 107 bytes. The parser
//! checks the fixed prefix and the protocol keyword byte by byte as they
//! arrive and the character set of a `TCP4`/`TCP6` line, so garbage is
//! refused before the CRLF shows up; the fields themselves are decoded only
//! once the whole line is in (§2.1: "wait for the CRLF sequence before
//! starting to decode the addresses").

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{Command, Family, ParseError, Parsed, ProxyHeader, Transport, V1_MAX_LEN, Version};

const PREFIX: &[u8] = b"PROXY ";

/// The short `UNKNOWN` line (§2.1, 15 bytes).
pub(super) const UNKNOWN_LINE: &[u8] = b"PROXY UNKNOWN\r\n";

/// Shortest valid v1 line: the short `UNKNOWN` form.
pub(super) const MIN_LEN: usize = UNKNOWN_LINE.len();

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp4,
    Tcp6,
    Unknown,
}

/// Which protocol keyword `rest` (the bytes after `"PROXY "`) starts with:
/// `Ok(None)` while it is still a prefix of one, an error once it cannot be.
fn protocol(rest: &[u8]) -> Result<Option<Proto>, ParseError> {
    const CANDIDATES: [(&[u8], Proto); 4] = [
        (b"TCP4 ", Proto::Tcp4),
        (b"TCP6 ", Proto::Tcp6),
        (b"UNKNOWN ", Proto::Unknown),
        (b"UNKNOWN\r", Proto::Unknown),
    ];
    let mut could_match = false;
    for (token, proto) in CANDIDATES {
        let n = rest.len().min(token.len());
        if rest.get(..n) == token.get(..n) {
            if n == token.len() {
                return Ok(Some(proto));
            }
            could_match = true;
        }
    }
    if could_match {
        Ok(None)
    } else {
        Err(ParseError::V1BadProtocol)
    }
}

/// Bytes allowed in a `TCP4`/`TCP6` line after the keyword (before CR).
fn tcp_line_byte(b: u8) -> bool {
    b.is_ascii_hexdigit() || b == b'.' || b == b':' || b == b' '
}

pub(super) fn parse(buf: &[u8]) -> Result<Parsed, ParseError> {
    for (i, (&got, &want)) in buf.iter().zip(PREFIX).enumerate() {
        if got != want {
            return Err(ParseError::NotProxy { offset: i });
        }
    }
    let incomplete = Parsed::Incomplete {
        needed_hint: MIN_LEN.checked_sub(buf.len()).filter(|&n| n > 0),
    };
    let Some(rest) = buf.get(PREFIX.len()..) else {
        return Ok(incomplete);
    };
    let Some(proto) = protocol(rest)? else {
        return Ok(incomplete);
    };

    // Find the CRLF within the first 107 bytes, refusing bare CR/LF and, for
    // TCP lines, any byte that cannot be part of an address or port.
    let window = buf.get(..buf.len().min(V1_MAX_LEN)).unwrap_or(buf);
    let mut line_end = None;
    for (i, &b) in window.iter().enumerate() {
        match b {
            b'\r' => match window.get(i + 1) {
                Some(b'\n') => {
                    line_end = Some(i);
                    break;
                }
                Some(_) => return Err(ParseError::V1BareCrOrLf { offset: i }),
                None if buf.len() > i + 1 => {
                    // The LF would be byte 108: the line is too long.
                    return Err(ParseError::V1TooLong);
                }
                None => return Ok(incomplete),
            },
            b'\n' => return Err(ParseError::V1BareCrOrLf { offset: i }),
            _ if i >= PREFIX.len() + 4 && proto != Proto::Unknown && !tcp_line_byte(b) => {
                return Err(ParseError::V1BadByte { offset: i, byte: b });
            }
            _ => {}
        }
    }
    let Some(cr) = line_end else {
        return if buf.len() >= V1_MAX_LEN {
            Err(ParseError::V1TooLong)
        } else {
            Ok(incomplete)
        };
    };
    let consumed = cr + 2;

    if proto == Proto::Unknown {
        // §2.1: "the receiver must ignore anything presented before the CRLF".
        return Ok(Parsed::Complete {
            header: ProxyHeader {
                version: Version::V1,
                command: Command::Proxy,
                transport: Transport::Unspec,
                family: Family::Unspec,
                addresses: None,
                tlvs: Vec::new(),
            },
            consumed,
        });
    }

    // The charset check above guarantees ASCII, so this cannot fail; treat
    // failure as a bad field anyway rather than trusting it.
    let line = buf
        .get(PREFIX.len()..cr)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or(ParseError::V1BadField {
            field: "field count",
        })?;
    let mut fields = line.split(' ');
    let (Some(_keyword), Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(ParseError::V1BadField {
            field: "field count",
        });
    };
    let (src_ip, dst_ip, family) = match proto {
        Proto::Tcp4 => (
            IpAddr::V4(parse_ipv4(src).ok_or(ParseError::V1BadField {
                field: "source address",
            })?),
            IpAddr::V4(parse_ipv4(dst).ok_or(ParseError::V1BadField {
                field: "destination address",
            })?),
            Family::Inet,
        ),
        _ => (
            IpAddr::V6(
                src.parse::<Ipv6Addr>()
                    .map_err(|_| ParseError::V1BadField {
                        field: "source address",
                    })?,
            ),
            IpAddr::V6(
                dst.parse::<Ipv6Addr>()
                    .map_err(|_| ParseError::V1BadField {
                        field: "destination address",
                    })?,
            ),
            Family::Inet6,
        ),
    };
    let sport = parse_port(sport).ok_or(ParseError::V1BadField {
        field: "source port",
    })?;
    let dport = parse_port(dport).ok_or(ParseError::V1BadField {
        field: "destination port",
    })?;
    Ok(Parsed::Complete {
        header: ProxyHeader {
            version: Version::V1,
            command: Command::Proxy,
            transport: Transport::Stream,
            family,
            addresses: Some((
                SocketAddr::new(src_ip, sport),
                SocketAddr::new(dst_ip, dport),
            )),
            tlvs: Vec::new(),
        },
        consumed,
    })
}

/// A decimal number of 1..=5 digits with no leading zero (other than "0"
/// itself), as §2.1 requires for ports and IPv4 octets.
fn parse_decimal(s: &str, max: u32) -> Option<u32> {
    let bytes = s.as_bytes();
    if bytes.is_empty() || bytes.len() > 5 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes.first() == Some(&b'0') {
        return None;
    }
    let v = bytes
        .iter()
        .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
    (v <= max).then_some(v)
}

fn parse_port(s: &str) -> Option<u16> {
    parse_decimal(s, u32::from(u16::MAX)).and_then(|v| u16::try_from(v).ok())
}

/// Exactly four dot-separated decimal octets without leading zeroes.
fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for o in &mut octets {
        *o = u8::try_from(parse_decimal(parts.next()?, 255)?).ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// The two addresses as one family: both IPv4 stay IPv4 (`TCP4`); otherwise
/// IPv4 is mapped into IPv6 (`::ffff:a.b.c.d`) and the line is `TCP6`, as
/// HAProxy's sender does. §2.1 requires both addresses to be of the
/// announced family and reserves `UNKNOWN` for when a line cannot be filled
/// correctly — a mixed pair can be, so it is not `UNKNOWN`.
fn unify(src: SocketAddr, dst: SocketAddr) -> (&'static str, IpAddr, IpAddr) {
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ("TCP4", IpAddr::V4(s), IpAddr::V4(d)),
        (s, d) => ("TCP6", IpAddr::V6(to_v6(s)), IpAddr::V6(to_v6(d))),
    }
}

pub(super) fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn write_line(w: &mut impl fmt::Write, src: SocketAddr, dst: SocketAddr) -> fmt::Result {
    let (proto, s, d) = unify(src, dst);
    write!(w, "PROXY {proto} {s} {d} {} {}\r\n", src.port(), dst.port())
}

/// Counts bytes instead of storing them, for [`v1_buffer_len`].
struct Counter(usize);

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 = self.0.saturating_add(s.len());
        Ok(())
    }
}

/// Append a v1 line for a TCP connection from `src` to `dst`: `TCP4` when
/// both are IPv4, otherwise `TCP6` with IPv4 mapped to `::ffff:a.b.c.d`.
/// IPv6 flow label and scope id are not representable and are dropped.
pub fn write_v1(src: SocketAddr, dst: SocketAddr, out: &mut Vec<u8>) {
    let mut line = String::with_capacity(V1_MAX_LEN);
    // Formatting into a String cannot fail.
    let _ = write_line(&mut line, src, dst);
    out.extend_from_slice(line.as_bytes());
}

/// Append the short `"PROXY UNKNOWN\r\n"` line: the sender cannot describe
/// the connection, and the receiver uses the real endpoints (§2.1).
pub fn write_v1_unknown(out: &mut Vec<u8>) {
    out.extend_from_slice(UNKNOWN_LINE);
}

/// Exact length of the line [`write_v1`] appends for these addresses
/// (at most 104 bytes).
pub fn v1_buffer_len(src: SocketAddr, dst: SocketAddr) -> usize {
    let mut c = Counter(0);
    let _ = write_line(&mut c, src, dst);
    c.0
}
