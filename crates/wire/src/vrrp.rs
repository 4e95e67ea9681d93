//! VRRP advertisements, versions 2 (RFC 3768) and 3 (RFC 5798, revised as
//! RFC 9568), as keepalived sends and expects them. rvs runs VRRP itself
//! for keepalived.conf `vrrp_instance` blocks; this module is its wire layer
//! only: bytes in, [`Advert`] out, and back. No I/O, no clock.
//!
//! # Layout
//! ```text
//! byte 0     version (high nibble: 2 or 3) | type (low nibble: 1 = ADVERTISEMENT)
//! byte 1     VRID                byte 2  priority        byte 3  count of addresses
//! v2: byte 4 auth type, byte 5 advertisement interval in whole seconds
//! v3: bytes 4-5: 4 reserved bits | 12-bit max advertisement interval (centiseconds)
//! bytes 6-7  checksum (RFC 1071 Internet checksum)
//! then count × address (4 bytes IPv4, 16 bytes IPv6),
//! v2 only: then 8 bytes of authentication data
//! ```
//!
//! # Checksums
//! * v2 (IPv4 only): over the VRRP message alone.
//! * v3 over IPv6: over the IPv6 pseudo-header (source, destination, 32-bit
//!   upper-layer length, three zero bytes, next header 112) and the message.
//! * v3 over IPv4: RFC 9568 §5.2.8 says the message alone
//!   ([`ChecksumForm::Message`]); keepalived by default prefixes the IPv4
//!   pseudo-header (source, destination, zero, 112, 16-bit length:
//!   [`ChecksumForm::WithPseudoHeader`]) unless `v3_checksum_as_v2` is set.
//!   [`parse`] accepts either and reports which one matched so a speaker can
//!   answer in the form its peers use; [`build`] writes the form asked.
//!
//! # What parse accepts
//! The message proper is 8 bytes + the addresses (+ 8 auth bytes in v2).
//! Up to [`MAX_PADDING`] bytes after it are tolerated (Ethernet pads short
//! frames) and are not covered by the checksum; more is an error. The v3
//! reserved bits are ignored on receive (RFC 5798 §5.2.4) and written as
//! zero. VRID and priority are returned as sent (0 = resigning master, 255 =
//! address owner): matching them against the configuration is the caller's
//! job, as is the TTL/hop-limit-255 check (see [`parse_ipv4_packet`]).
//!
//! # No-panic contract
//! [`parse`], [`build`] and [`parse_ipv4_packet`] return errors for every
//! input, never panic; fuzzed by `fuzz/fuzz_targets/vrrp.rs`, which also
//! checks that everything parsed builds back to the same [`Advert`].

use crate::checksum as csum;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[cfg(test)]
mod tests;

/// IP protocol number of VRRP (both versions, both families).
pub const PROTO: u8 = 112;

/// IPv4 multicast group adverts are sent to (224.0.0.18).
pub const GROUP_V4: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 18);

/// IPv6 multicast group adverts are sent to (ff02::12).
pub const GROUP_V6: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x12);

/// TTL / hop limit every advert is sent with; receivers drop multicast
/// adverts that arrive with anything else (they crossed a router).
pub const TTL: u8 = 255;

/// Packet type ADVERTISEMENT, the only type either version defines.
pub const TYPE_ADVERTISEMENT: u8 = 1;

/// Length of the fixed header common to both versions.
pub const HEADER_LEN: usize = 8;

/// Length of the v2 authentication data trailer.
pub const V2_AUTH_LEN: usize = 8;

/// Largest v3 advertisement interval: 12 bits of centiseconds (40.95 s).
pub const V3_MAX_INTERVAL_CS: u16 = 0x0fff;

/// Largest v2 advertisement interval: 8 bits of seconds, in centiseconds.
pub const V2_MAX_INTERVAL_CS: u16 = 255 * 100;

/// How many bytes after the message [`parse`] tolerates (Ethernet padding:
/// a minimal frame carries 46 payload bytes; 64 leaves room for any link).
pub const MAX_PADDING: usize = 64;

/// v2 auth type: no authentication (the only type RFC 3768 keeps).
pub const AUTH_NONE: u8 = 0;
/// v2 auth type: simple text password in the 8 auth bytes (RFC 2338,
/// keepalived `auth_type PASS`).
pub const AUTH_PASS: u8 = 1;
/// v2 auth type: IP Authentication Header (RFC 2338, keepalived `auth_type AH`).
pub const AUTH_AH: u8 = 2;

/// One VRRP advertisement (RFC 3768 v2, RFC 5798/9568 v3), owned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Advert {
    /// Protocol version, 2 or 3.
    pub version: u8,
    /// Virtual router identifier (1..=255 in configurations; 0 is passed
    /// through for the caller to ignore).
    pub vrid: u8,
    /// Sender's priority: 0 = master resigning, 255 = address owner.
    pub priority: u8,
    /// Advertisement interval in centiseconds. v2 carries whole seconds
    /// (parse: s*100; build: must be a multiple of 100 and 1..=255 s); v3
    /// carries 12-bit centiseconds (1..=4095).
    pub interval_cs: u16,
    /// v2 only: auth type (0 none, 1 simple text PASS, 2 AH); 0 in v3.
    pub auth_type: u8,
    /// v2 only: the 8 auth data bytes (the PASS password, zero-padded); all
    /// zero in v3.
    pub auth_data: [u8; 8],
    /// The virtual addresses, all of the packet's family.
    pub addrs: Vec<IpAddr>,
}

impl Advert {
    /// Length of the message proper (what the checksum covers, without any
    /// padding) for addresses of the given family.
    pub fn message_len(&self, ipv6: bool) -> usize {
        let addr_len = if ipv6 { 16 } else { 4 };
        let auth = if self.version == 2 { V2_AUTH_LEN } else { 0 };
        HEADER_LEN + self.addrs.len() * addr_len + auth
    }
}

/// How a v3-over-IPv4 checksum was computed (keepalived default includes the
/// IPv4 pseudo-header; RFC 9568 and `v3_checksum_as_v2` do not). v2 and IPv6
/// have one form each: v2 is always `Message`, IPv6 always
/// `WithPseudoHeader`; [`parse`] reports that form and [`build`] ignores the
/// argument for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChecksumForm {
    /// Over the VRRP message only (v2; v3/IPv4 per RFC 9568).
    Message,
    /// Over the IP pseudo-header followed by the message (v3/IPv6 always;
    /// v3/IPv4 keepalived's default).
    WithPseudoHeader,
}

/// Source, destination and TTL of an IPv4 packet carrying VRRP, from the
/// header an IPv4 raw socket delivers with the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Meta {
    /// IPv4 source: the sender's primary address, used in elections.
    pub src: Ipv4Addr,
    /// IPv4 destination: [`GROUP_V4`] for multicast, a peer for unicast.
    pub dst: Ipv4Addr,
    /// Time to live as received; must be [`TTL`] for multicast adverts.
    pub ttl: u8,
}

/// Why bytes are not a valid VRRP advertisement, or an [`Advert`] cannot be
/// encoded. Every receive-side variant means "drop the packet".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VrrpError {
    /// The buffer ends before the message does: shorter than the 8-byte
    /// header, or than the header plus `count` addresses (plus the v2 auth
    /// data).
    #[error("VRRP packet truncated: {got} bytes, the message needs {needed}")]
    Truncated {
        /// Bytes the message needs.
        needed: usize,
        /// Bytes there are.
        got: usize,
    },
    /// More than [`MAX_PADDING`] bytes follow the message.
    #[error(
        "VRRP packet has {trailing} bytes after the {message_len}-byte message (at most {MAX_PADDING} of padding allowed)"
    )]
    TrailingBytes {
        /// Bytes after the message proper.
        trailing: usize,
        /// Length of the message proper.
        message_len: usize,
    },
    /// The version nibble is neither 2 nor 3.
    #[error("VRRP version {0} is not supported (only 2 and 3)")]
    BadVersion(u8),
    /// The type nibble is not 1 (ADVERTISEMENT).
    #[error("VRRP packet type {0} is not 1 (ADVERTISEMENT)")]
    BadType(u8),
    /// VRRPv2 is IPv4-only (RFC 3768); over IPv6 only v3 exists.
    #[error("VRRP version 2 over IPv6 (v2 is IPv4-only; IPv6 needs version 3)")]
    V2OverIpv6,
    /// The source and destination addresses are of different families.
    #[error("VRRP packet source {src} and destination {dst} are of different families")]
    MixedFamilies {
        /// The source address given.
        src: IpAddr,
        /// The destination address given.
        dst: IpAddr,
    },
    /// The advertisement interval field is 0.
    #[error("VRRP advertisement interval is 0")]
    ZeroInterval,
    /// The checksum matches no form valid for this version and family.
    #[error("VRRP checksum 0x{found:04x} is wrong (expected 0x{expected:04x}{alt})", alt = match .expected_alt { Some(a) => format!(" or 0x{a:04x}"), None => String::new() })]
    BadChecksum {
        /// The checksum in the packet.
        found: u16,
        /// The checksum of the packet's only form, or for v3/IPv4 the
        /// message-only form.
        expected: u16,
        /// For v3/IPv4: the checksum with the IPv4 pseudo-header.
        expected_alt: Option<u16>,
    },
    /// build: the interval cannot be carried by this version (v2: whole
    /// seconds 1..=255; v3: 1..=4095 centiseconds).
    #[error(
        "VRRP version {version} cannot carry an interval of {interval_cs} cs (v2: whole seconds 1..=255, v3: 1..=4095 cs)"
    )]
    IntervalOutOfRange {
        /// The advert's version.
        version: u8,
        /// The interval asked for.
        interval_cs: u16,
    },
    /// build: a v3 advert with authentication set (v3 has no auth field).
    #[error("VRRP version 3 has no authentication, but auth type {auth_type} or auth data is set")]
    AuthInV3 {
        /// The auth type asked for.
        auth_type: u8,
    },
    /// build: more than 255 addresses (the count field is one byte).
    #[error("VRRP advert has {0} addresses, at most 255 fit")]
    TooManyAddresses(usize),
    /// build: a virtual address is not of the source address's family.
    #[error("VRRP virtual address {addr} (#{index}) is not of the packet's family")]
    AddressFamily {
        /// Position in [`Advert::addrs`].
        index: usize,
        /// The offending address.
        addr: IpAddr,
    },
    /// parse_ipv4_packet: the IP version nibble is not 4.
    #[error("not an IPv4 packet (version {0})")]
    NotIpv4(u8),
    /// parse_ipv4_packet: the header length is below 20 bytes or beyond the
    /// buffer.
    #[error("IPv4 header length {ihl_bytes} is invalid for a {got}-byte buffer")]
    BadIpv4HeaderLength {
        /// IHL × 4.
        ihl_bytes: usize,
        /// Buffer length.
        got: usize,
    },
    /// parse_ipv4_packet: the total length is shorter than the header or
    /// longer than the buffer.
    #[error("IPv4 total length {total} is invalid (header {ihl_bytes} bytes, buffer {got} bytes)")]
    BadIpv4TotalLength {
        /// The total length field.
        total: usize,
        /// IHL × 4.
        ihl_bytes: usize,
        /// Buffer length.
        got: usize,
    },
    /// parse_ipv4_packet: the IPv4 packet is a fragment (MF set or a
    /// non-zero offset); a fragment's payload is not a whole message.
    #[error("IPv4 packet is a fragment")]
    Ipv4Fragment,
    /// parse_ipv4_packet: the protocol field is not 112.
    #[error("IPv4 protocol {0} is not VRRP (112)")]
    NotVrrp(u8),
}

/// The virtual MAC 00-00-5E-00-01-{VRID} (IPv4) / 00-00-5E-00-02-{VRID}
/// (IPv6), RFC 5798 §7.3; keepalived uses it only with `use_vmac`.
pub fn virtual_mac(vrid: u8, ipv6: bool) -> [u8; 6] {
    [0x00, 0x00, 0x5e, 0x00, if ipv6 { 0x02 } else { 0x01 }, vrid]
}

/// Is the family of `src`/`dst` IPv6? Both must agree.
fn family(src: IpAddr, dst: IpAddr) -> Result<bool, VrrpError> {
    match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => Ok(false),
        (IpAddr::V6(_), IpAddr::V6(_)) => Ok(true),
        _ => Err(VrrpError::MixedFamilies { src, dst }),
    }
}

/// Sum of the pseudo-header for `src`/`dst` and a message of `len` bytes:
/// IPv6 (RFC 8200 §8.1): source, destination, 32-bit length, three zero
/// bytes, next header 112; IPv4 (keepalived's v3 form): source,
/// destination, a zero byte, protocol 112, 16-bit length. Callers have
/// checked that both addresses are of one family; a mixed pair (never
/// passed) sums to zero.
fn pseudo_sum(src: IpAddr, dst: IpAddr, len: usize) -> u64 {
    match (src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => csum::pseudo_sum(&s.octets(), &d.octets(), PROTO, len),
        (IpAddr::V4(s), IpAddr::V4(d)) => csum::pseudo_sum(&s.octets(), &d.octets(), PROTO, len),
        _ => 0,
    }
}

/// The value for the checksum field of `msg`, whose checksum bytes must be
/// zero, plus a pseudo-header sum (0 for none).
fn checksum(msg: &[u8], pseudo: u64) -> u16 {
    csum::finish(csum::sum(msg) + pseudo)
}

/// Decodes one advertisement from `buf` (the IP payload), received from
/// `src` to `dst` (the packet's IP addresses: their family decides the
/// address size, and they enter the pseudo-header). Returns the advert and
/// the checksum form that matched.
pub fn parse(buf: &[u8], src: IpAddr, dst: IpAddr) -> Result<(Advert, ChecksumForm), VrrpError> {
    let ipv6 = family(src, dst)?;
    let [b0, vrid, priority, count, b4, b5, c0, c1, ..] = *buf else {
        return Err(VrrpError::Truncated {
            needed: HEADER_LEN,
            got: buf.len(),
        });
    };
    let version = b0 >> 4;
    let kind = b0 & 0x0f;
    if version != 2 && version != 3 {
        return Err(VrrpError::BadVersion(version));
    }
    if kind != TYPE_ADVERTISEMENT {
        return Err(VrrpError::BadType(kind));
    }
    if version == 2 && ipv6 {
        return Err(VrrpError::V2OverIpv6);
    }
    let interval_cs = if version == 2 {
        u16::from(b5) * 100
    } else {
        u16::from_be_bytes([b4, b5]) & V3_MAX_INTERVAL_CS
    };
    if interval_cs == 0 {
        return Err(VrrpError::ZeroInterval);
    }
    let addr_len = if ipv6 { 16 } else { 4 };
    let auth_len = if version == 2 { V2_AUTH_LEN } else { 0 };
    let addrs_end = HEADER_LEN + usize::from(count) * addr_len;
    let message_len = addrs_end + auth_len;
    if buf.len() < message_len {
        return Err(VrrpError::Truncated {
            needed: message_len,
            got: buf.len(),
        });
    }
    if buf.len() - message_len > MAX_PADDING {
        return Err(VrrpError::TrailingBytes {
            trailing: buf.len() - message_len,
            message_len,
        });
    }
    let (msg, _padding) = buf.split_at(message_len);
    let found = u16::from_be_bytes([c0, c1]);
    let form = verify_checksum(msg, version, ipv6, src, dst, found)?;

    let (addr_bytes, auth) = msg[HEADER_LEN..].split_at(addrs_end - HEADER_LEN);
    let addrs = if ipv6 {
        addr_bytes
            .chunks_exact(16)
            .map(|c| {
                let mut o = [0u8; 16];
                o.copy_from_slice(c);
                IpAddr::V6(Ipv6Addr::from(o))
            })
            .collect()
    } else {
        addr_bytes
            .chunks_exact(4)
            .map(|c| IpAddr::V4(Ipv4Addr::new(c[0], c[1], c[2], c[3])))
            .collect()
    };
    let mut auth_data = [0u8; 8];
    let auth_type = if version == 2 {
        auth_data.copy_from_slice(auth);
        b4
    } else {
        0
    };
    Ok((
        Advert {
            version,
            vrid,
            priority,
            interval_cs,
            auth_type,
            auth_data,
            addrs,
        },
        form,
    ))
}

/// Checks the checksum of the message proper `msg` and says which form
/// matched. For v3/IPv4 where both forms happen to match (the pseudo-header
/// sums to zero), `Message` (the RFC 9568 form) is reported.
fn verify_checksum(
    msg: &[u8],
    version: u8,
    ipv6: bool,
    src: IpAddr,
    dst: IpAddr,
    found: u16,
) -> Result<ChecksumForm, VrrpError> {
    // A correct message sums (checksum included) to 0xffff.
    let good = |pseudo: u64| csum::verifies(csum::sum(msg) + pseudo);
    // What the field should hold: the checksum over the message with the
    // field itself zeroed, i.e. the sum without it.
    let expected = |pseudo: u64| csum::finish(csum::sum(msg) + pseudo + u64::from(!found));
    let pseudo = pseudo_sum(src, dst, msg.len());
    if version == 2 {
        return if good(0) {
            Ok(ChecksumForm::Message)
        } else {
            Err(VrrpError::BadChecksum {
                found,
                expected: expected(0),
                expected_alt: None,
            })
        };
    }
    if ipv6 {
        return if good(pseudo) {
            Ok(ChecksumForm::WithPseudoHeader)
        } else {
            Err(VrrpError::BadChecksum {
                found,
                expected: expected(pseudo),
                expected_alt: None,
            })
        };
    }
    if good(0) {
        Ok(ChecksumForm::Message)
    } else if good(pseudo) {
        Ok(ChecksumForm::WithPseudoHeader)
    } else {
        Err(VrrpError::BadChecksum {
            found,
            expected: expected(0),
            expected_alt: Some(expected(pseudo)),
        })
    }
}

/// Encodes `ad` as sent from `src` to `dst` (their family decides the
/// address size and must be that of every address in `ad.addrs`), with the
/// checksum in `form` (ignored for v2 and IPv6, which have one form each).
/// Returns the IP payload; no padding.
pub fn build(
    ad: &Advert,
    src: IpAddr,
    dst: IpAddr,
    form: ChecksumForm,
) -> Result<Vec<u8>, VrrpError> {
    let ipv6 = family(src, dst)?;
    if ad.version != 2 && ad.version != 3 {
        return Err(VrrpError::BadVersion(ad.version));
    }
    if ad.version == 2 && ipv6 {
        return Err(VrrpError::V2OverIpv6);
    }
    let interval_ok = if ad.version == 2 {
        ad.interval_cs.is_multiple_of(100) && (100..=V2_MAX_INTERVAL_CS).contains(&ad.interval_cs)
    } else {
        (1..=V3_MAX_INTERVAL_CS).contains(&ad.interval_cs)
    };
    if !interval_ok {
        return Err(VrrpError::IntervalOutOfRange {
            version: ad.version,
            interval_cs: ad.interval_cs,
        });
    }
    if ad.version == 3 && (ad.auth_type != 0 || ad.auth_data != [0; 8]) {
        return Err(VrrpError::AuthInV3 {
            auth_type: ad.auth_type,
        });
    }
    let Ok(count) = u8::try_from(ad.addrs.len()) else {
        return Err(VrrpError::TooManyAddresses(ad.addrs.len()));
    };
    if let Some((index, addr)) = ad
        .addrs
        .iter()
        .enumerate()
        .find(|(_, a)| a.is_ipv6() != ipv6)
    {
        return Err(VrrpError::AddressFamily { index, addr: *addr });
    }

    let mut out = Vec::with_capacity(ad.message_len(ipv6));
    out.push((ad.version << 4) | TYPE_ADVERTISEMENT);
    out.push(ad.vrid);
    out.push(ad.priority);
    out.push(count);
    if ad.version == 2 {
        out.push(ad.auth_type);
        // Range checked above: 1..=255 whole seconds.
        out.push((ad.interval_cs / 100) as u8);
    } else {
        out.extend_from_slice(&ad.interval_cs.to_be_bytes());
    }
    out.extend_from_slice(&[0, 0]);
    for a in &ad.addrs {
        match a {
            IpAddr::V4(v) => out.extend_from_slice(&v.octets()),
            IpAddr::V6(v) => out.extend_from_slice(&v.octets()),
        }
    }
    if ad.version == 2 {
        out.extend_from_slice(&ad.auth_data);
    }
    let with_pseudo = ad.version == 3 && (ipv6 || form == ChecksumForm::WithPseudoHeader);
    let pseudo = if with_pseudo {
        pseudo_sum(src, dst, out.len())
    } else {
        0
    };
    let sum = checksum(&out, pseudo);
    out[6..8].copy_from_slice(&sum.to_be_bytes());
    Ok(out)
}

/// Checks the IPv4 header an IPv4 raw socket delivers in front of the VRRP
/// message (version 4, IHL ≥ 5 within the buffer, total length within the
/// buffer, not a fragment, protocol 112) and returns its source,
/// destination and TTL with the payload (up to the total length; bytes
/// beyond it are dropped). The header checksum is the kernel's to verify.
pub fn parse_ipv4_packet(buf: &[u8]) -> Result<(Ipv4Meta, &[u8]), VrrpError> {
    let Some(hdr) = buf.get(..20) else {
        return Err(VrrpError::Truncated {
            needed: 20,
            got: buf.len(),
        });
    };
    let version = hdr[0] >> 4;
    if version != 4 {
        return Err(VrrpError::NotIpv4(version));
    }
    let ihl_bytes = usize::from(hdr[0] & 0x0f) * 4;
    if ihl_bytes < 20 || ihl_bytes > buf.len() {
        return Err(VrrpError::BadIpv4HeaderLength {
            ihl_bytes,
            got: buf.len(),
        });
    }
    let total = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
    if total < ihl_bytes || total > buf.len() {
        return Err(VrrpError::BadIpv4TotalLength {
            total,
            ihl_bytes,
            got: buf.len(),
        });
    }
    let frag = u16::from_be_bytes([hdr[6], hdr[7]]);
    // MF flag (0x2000) or a non-zero fragment offset (low 13 bits).
    if frag & 0x3fff != 0 {
        return Err(VrrpError::Ipv4Fragment);
    }
    if hdr[9] != PROTO {
        return Err(VrrpError::NotVrrp(hdr[9]));
    }
    let meta = Ipv4Meta {
        src: Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]),
        dst: Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]),
        ttl: hdr[8],
    };
    Ok((meta, &buf[ihl_bytes..total]))
}
