//! The part of a QUIC packet a balancer reads: header form, version,
//! Destination and Source Connection IDs.
//!
//! Long headers are read by the version-independent layout of RFC 8999
//! (first bit set, 32-bit version, DCID length + DCID, SCID length + SCID),
//! which also covers version negotiation (version 0); for QUIC version 1
//! (RFC 9000 §17.2) and version 2 (RFC 9369 §3.2, whose long-header type
//! codepoints are rotated by one) the packet type is decoded too, and CIDs
//! longer than 20 octets are rejected as those versions require. Short
//! headers (first bit clear) carry no DCID length: the balancer knows it
//! from its configuration, so the caller passes it in.
//!
//! The fixed bit is not checked: RFC 9287 lets peers grease it, and a
//! balancer must not drop what the server would accept. After a successful
//! parse no accessor panics; every failure is a [`HeaderError`].

/// QUIC version 1 (RFC 9000).
pub const VERSION_1: u32 = 0x0000_0001;
/// QUIC version 2 (RFC 9369).
pub const VERSION_2: u32 = 0x6b33_43cf;
/// The version field of a version negotiation packet.
pub const VERSION_NEGOTIATION: u32 = 0;

/// Long-header packet types of QUIC versions 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongType {
    /// Initial: the client's first packets carry a DCID it chose itself,
    /// which a balancer cannot decode (an "unroutable" DCID).
    Initial,
    /// 0-RTT: also sent before the client has heard the server's CIDs.
    ZeroRtt,
    /// Handshake.
    Handshake,
    /// Retry (server to client).
    Retry,
}

impl LongType {
    /// The type of a version 1 or 2 long header from its first octet.
    fn of(version: u32, first: u8) -> Option<Self> {
        let bits = (first >> 4) & 0b11;
        match version {
            VERSION_1 => Some(match bits {
                0 => Self::Initial,
                1 => Self::ZeroRtt,
                2 => Self::Handshake,
                _ => Self::Retry,
            }),
            VERSION_2 => Some(match bits {
                1 => Self::Initial,
                2 => Self::ZeroRtt,
                3 => Self::Handshake,
                _ => Self::Retry,
            }),
            _ => None,
        }
    }
}

/// A parsed QUIC header, borrowing the CIDs from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header<'a> {
    /// A long header of version 1 or 2.
    Long {
        /// [`VERSION_1`] or [`VERSION_2`].
        version: u32,
        /// The packet type.
        ty: LongType,
        /// Destination Connection ID (0..=20 octets).
        dcid: &'a [u8],
        /// Source Connection ID (0..=20 octets).
        scid: &'a [u8],
    },
    /// A long header of a version this parser does not know: only the
    /// invariant fields (CIDs up to 255 octets).
    UnknownVersion {
        /// The version field.
        version: u32,
        /// Destination Connection ID.
        dcid: &'a [u8],
        /// Source Connection ID.
        scid: &'a [u8],
    },
    /// A version negotiation packet (version 0); it passes like any other.
    VersionNegotiation {
        /// Destination Connection ID.
        dcid: &'a [u8],
        /// Source Connection ID.
        scid: &'a [u8],
    },
    /// A short header: the DCID of the length the caller gave.
    Short {
        /// Destination Connection ID.
        dcid: &'a [u8],
    },
}

impl<'a> Header<'a> {
    /// The Destination Connection ID, the field a balancer routes by.
    pub fn dcid(&self) -> &'a [u8] {
        match *self {
            Header::Long { dcid, .. }
            | Header::UnknownVersion { dcid, .. }
            | Header::VersionNegotiation { dcid, .. }
            | Header::Short { dcid } => dcid,
        }
    }

    /// Whether this is a long header (the first bit set).
    pub fn is_long(&self) -> bool {
        !matches!(self, Header::Short { .. })
    }
}

/// Why a datagram is not a QUIC header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// An empty datagram.
    #[error("empty datagram")]
    Empty,
    /// The datagram ends inside the header.
    #[error("QUIC header truncated: needs {need} octets, datagram has {have}")]
    Truncated {
        /// Octets the header needs so far.
        need: usize,
        /// The datagram's length.
        have: usize,
    },
    /// A version 1 or 2 long header with a CID over 20 octets (RFC 9000
    /// §17.2: such packets are dropped).
    #[error("QUIC version {version:#x} long header with a {len}-octet connection ID (at most 20)")]
    CidTooLong {
        /// The version field.
        version: u32,
        /// The CID length field.
        len: usize,
    },
}

/// Parse the header of `datagram`; `short_dcid_len` is the DCID length of a
/// short header (the balancer's configured CID length).
pub fn parse(datagram: &[u8], short_dcid_len: usize) -> Result<Header<'_>, HeaderError> {
    let have = datagram.len();
    let Some(&first) = datagram.first() else {
        return Err(HeaderError::Empty);
    };
    if first & 0x80 == 0 {
        let need = 1 + short_dcid_len;
        let dcid = datagram
            .get(1..need)
            .ok_or(HeaderError::Truncated { need, have })?;
        return Ok(Header::Short { dcid });
    }
    let version_bytes: [u8; 4] = datagram
        .get(1..5)
        .and_then(|v| v.try_into().ok())
        .ok_or(HeaderError::Truncated { need: 6, have })?;
    let version = u32::from_be_bytes(version_bytes);
    let known = matches!(version, VERSION_1 | VERSION_2);
    let mut at = 5;
    let mut cid = || -> Result<&[u8], HeaderError> {
        let len = usize::from(
            *datagram
                .get(at)
                .ok_or(HeaderError::Truncated { need: at + 1, have })?,
        );
        if known && len > crate::MAX_CID_LEN {
            return Err(HeaderError::CidTooLong { version, len });
        }
        let need = at + 1 + len;
        let cid = datagram
            .get(at + 1..need)
            .ok_or(HeaderError::Truncated { need, have })?;
        at = need;
        Ok(cid)
    };
    let dcid = cid()?;
    let scid = cid()?;
    Ok(match (version, LongType::of(version, first)) {
        (VERSION_NEGOTIATION, _) => Header::VersionNegotiation { dcid, scid },
        (version, Some(ty)) => Header::Long {
            version,
            ty,
            dcid,
            scid,
        },
        (version, None) => Header::UnknownVersion {
            version,
            dcid,
            scid,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(first: u8, version: u32, dcid: &[u8], scid: &[u8]) -> Vec<u8> {
        let mut p = vec![first];
        p.extend_from_slice(&version.to_be_bytes());
        p.push(dcid.len() as u8);
        p.extend_from_slice(dcid);
        p.push(scid.len() as u8);
        p.extend_from_slice(scid);
        p.extend_from_slice(&[0xaa; 4]); // token length, length, pn ...
        p
    }

    #[test]
    fn long_header_types_v1_and_v2() {
        let cases = [
            (VERSION_1, 0xc0, LongType::Initial),
            (VERSION_1, 0xd0, LongType::ZeroRtt),
            (VERSION_1, 0xe0, LongType::Handshake),
            (VERSION_1, 0xf0, LongType::Retry),
            (VERSION_2, 0xd0, LongType::Initial),
            (VERSION_2, 0xe0, LongType::ZeroRtt),
            (VERSION_2, 0xf0, LongType::Handshake),
            (VERSION_2, 0xc0, LongType::Retry),
        ];
        for (version, first, want) in cases {
            let p = long(first, version, &[1, 2, 3, 4, 5, 6, 7, 8], &[9, 9]);
            assert_eq!(
                parse(&p, 8),
                Ok(Header::Long {
                    version,
                    ty: want,
                    dcid: &[1, 2, 3, 4, 5, 6, 7, 8],
                    scid: &[9, 9]
                })
            );
        }
    }

    #[test]
    fn version_negotiation_and_unknown_versions_pass() {
        let p = long(0x80 | 0x3f, 0, &[1; 8], &[2; 5]);
        let h = parse(&p, 8).unwrap();
        assert_eq!(
            h,
            Header::VersionNegotiation {
                dcid: &[1; 8],
                scid: &[2; 5]
            }
        );
        assert!(h.is_long());
        // An unknown version may carry CIDs up to 255 octets (RFC 8999).
        let big = [7u8; 40];
        let p = long(0xc0, 0x1a2a_3a4a, &big, &[]);
        assert_eq!(
            parse(&p, 8),
            Ok(Header::UnknownVersion {
                version: 0x1a2a_3a4a,
                dcid: &big,
                scid: &[]
            })
        );
        assert_eq!(parse(&p, 8).unwrap().dcid(), &big);
    }

    #[test]
    fn short_header() {
        let p = [0x40, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff];
        let h = parse(&p, 8).unwrap();
        assert_eq!(h, Header::Short { dcid: &p[1..9] });
        assert!(!h.is_long());
        assert_eq!(
            parse(&p[..5], 8),
            Err(HeaderError::Truncated { need: 9, have: 5 })
        );
        assert_eq!(parse(&[0x40], 0), Ok(Header::Short { dcid: &[] }));
    }

    #[test]
    fn errors() {
        assert_eq!(parse(&[], 8), Err(HeaderError::Empty));
        assert_eq!(
            parse(&[0xc0, 0, 0], 8),
            Err(HeaderError::Truncated { need: 6, have: 3 })
        );
        assert_eq!(
            parse(&[0xc0, 0, 0, 0, 1], 8),
            Err(HeaderError::Truncated { need: 6, have: 5 })
        );
        let p = long(0xc0, VERSION_1, &[1; 8], &[2; 4]);
        for cut in 5..15 {
            assert!(
                matches!(parse(&p[..cut], 8), Err(HeaderError::Truncated { .. })),
                "cut at {cut}"
            );
        }
        let p = long(0xc0, VERSION_2, &[1; 21], &[]);
        assert_eq!(
            parse(&p, 8),
            Err(HeaderError::CidTooLong {
                version: VERSION_2,
                len: 21
            })
        );
        let p = long(0xc0, VERSION_1, &[1; 4], &[2; 21]);
        assert_eq!(
            parse(&p, 8),
            Err(HeaderError::CidTooLong {
                version: VERSION_1,
                len: 21
            })
        );
    }
}
