//! TOA ("TCP Option Address"): the TCP option a FULLNAT director adds to a
//! connection's handshake so the real server can learn the client's
//! address, although the packets it receives come from the director's local
//! address.
//!
//! The format is the one the Alibaba LVS patch's `toa.ko` and DPVS use:
//! option kind 254, then
//!
//! ```text
//! IPv4 form (length 8):   kind | len=8  | port (be16) | addr (4 bytes)
//! IPv6 form (length 20):  kind | len=20 | port (be16) | addr (16 bytes)
//! ```
//!
//! Both lengths are multiples of 4, so an option list that is 4-aligned
//! stays so. The kind is the same for both forms; the length tells them
//! apart. An IPv4 client of an IPv6 real server (the director translating
//! families) travels in the IPv6 form as a v4-mapped address
//! (`::ffff:a.b.c.d`), as DPVS's NAT64 mode sends it.
//!
//! [`find`] walks a TCP header's option bytes (EOL, NOP, kind-length-value)
//! and returns the first TOA in them; [`append`] builds a new option list
//! with a TOA added (NOP-aligned), refusing when it would pass the 40-byte
//! limit of the TCP header. Nothing here does I/O; every function returns an
//! error on malformed input and never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The TCP option kind of TOA.
pub const KIND: u8 = 254;
/// Length of the IPv4 form (kind, length, port, 4-byte address).
pub const LEN_V4: u8 = 8;
/// Length of the IPv6 form (kind, length, port, 16-byte address).
pub const LEN_V6: u8 = 20;
/// The most option bytes a TCP header can carry (data offset 15 × 4 − 20).
pub const MAX_OPTIONS: usize = 40;

const EOL: u8 = 0;
const NOP: u8 = 1;

/// A decoded TOA: the client's address and port.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toa {
    /// The client's address and port (as the client sent them).
    pub client: SocketAddr,
}

impl Toa {
    /// The TOA carrying `client`.
    pub fn new(client: SocketAddr) -> Self {
        Toa { client }
    }

    /// The option's length on the wire: [`LEN_V4`] or [`LEN_V6`].
    pub fn wire_len(&self) -> u8 {
        match self.client.ip() {
            IpAddr::V4(_) => LEN_V4,
            IpAddr::V6(_) => LEN_V6,
        }
    }

    /// The option's bytes (kind, length, port, address).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(usize::from(self.wire_len()));
        out.push(KIND);
        out.push(self.wire_len());
        out.extend_from_slice(&self.client.port().to_be_bytes());
        match self.client.ip() {
            IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
        }
        out
    }

    /// Decode one TOA option: `opt` starts at the kind byte and is exactly
    /// the option's length long.
    pub fn from_option(opt: &[u8]) -> Result<Self, ToaError> {
        let (&kind, rest) = opt.split_first().ok_or(ToaError::Truncated {
            offset: 0,
            needed: 2,
            got: 0,
        })?;
        if kind != KIND {
            return Err(ToaError::NotToa(kind));
        }
        let &len = rest.first().ok_or(ToaError::Truncated {
            offset: 0,
            needed: 2,
            got: opt.len(),
        })?;
        if len != LEN_V4 && len != LEN_V6 {
            return Err(ToaError::BadToaLength(len));
        }
        if opt.len() != usize::from(len) {
            return Err(ToaError::Truncated {
                offset: 0,
                needed: usize::from(len),
                got: opt.len(),
            });
        }
        let port = u16::from_be_bytes([opt[2], opt[3]]);
        let ip = if len == LEN_V4 {
            IpAddr::V4(Ipv4Addr::new(opt[4], opt[5], opt[6], opt[7]))
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(&opt[4..20]);
            IpAddr::V6(Ipv6Addr::from(a))
        };
        Ok(Toa {
            client: SocketAddr::new(ip, port),
        })
    }
}

/// Why option bytes could not be read or a TOA not added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToaError {
    /// An option runs past the end of the option bytes.
    #[error("TCP option at offset {offset} needs {needed} bytes, {got} left")]
    Truncated {
        /// Where the option starts.
        offset: usize,
        /// How many bytes it needs from there.
        needed: usize,
        /// How many there are.
        got: usize,
    },
    /// An option's length byte is below 2 (it must count kind and length).
    #[error("TCP option kind {kind} at offset {offset} has length {len} (at least 2)")]
    BadLength {
        /// Where the option starts.
        offset: usize,
        /// Its kind.
        kind: u8,
        /// Its length byte.
        len: u8,
    },
    /// A kind-254 option whose length is neither 8 (IPv4) nor 20 (IPv6).
    #[error("TOA option (kind 254) has length {0}, expected 8 (IPv4) or 20 (IPv6)")]
    BadToaLength(u8),
    /// [`Toa::from_option`] was given an option of another kind.
    #[error("TCP option kind {0} is not TOA (254)")]
    NotToa(u8),
    /// More option bytes than a TCP header holds.
    #[error("{0} bytes of TCP options, at most 40 fit in a TCP header")]
    TooLong(usize),
    /// Adding the TOA would pass the 40-byte option limit.
    #[error("no room for a {needed}-byte TOA: the options use {used} of 40 bytes")]
    NoRoom {
        /// The option bytes (without trailing padding) already used.
        used: usize,
        /// What the TOA needs, alignment included.
        needed: usize,
    },
    /// The options already carry a TOA (a second one would be ambiguous).
    #[error("the TCP options already carry a TOA")]
    AlreadyPresent,
}

/// One TCP option as [`options`] yields it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TcpOption<'a> {
    /// Offset of the kind byte in the option bytes.
    pub offset: usize,
    /// The kind (never EOL: the walk stops there).
    pub kind: u8,
    /// The whole option (kind and length included; one byte for NOP).
    pub bytes: &'a [u8],
}

/// Walk TCP option bytes: every option up to the end or an EOL, or the
/// first malformation. Bytes after an EOL are padding and not looked at.
pub fn options(opts: &[u8]) -> impl Iterator<Item = Result<TcpOption<'_>, ToaError>> + '_ {
    let mut at = 0usize;
    let mut done = false;
    std::iter::from_fn(move || {
        if done || at >= opts.len() {
            return None;
        }
        let kind = opts[at];
        if kind == EOL {
            done = true;
            return None;
        }
        if kind == NOP {
            at += 1;
            return Some(Ok(TcpOption {
                offset: at - 1,
                kind,
                bytes: &opts[at - 1..at],
            }));
        }
        let left = opts.len() - at;
        let Some(&len) = opts.get(at + 1) else {
            done = true;
            return Some(Err(ToaError::Truncated {
                offset: at,
                needed: 2,
                got: left,
            }));
        };
        if len < 2 {
            done = true;
            return Some(Err(ToaError::BadLength {
                offset: at,
                kind,
                len,
            }));
        }
        let len = usize::from(len);
        if len > left {
            done = true;
            return Some(Err(ToaError::Truncated {
                offset: at,
                needed: len,
                got: left,
            }));
        }
        let o = TcpOption {
            offset: at,
            kind,
            bytes: &opts[at..at + len],
        };
        at += len;
        Some(Ok(o))
    })
}

/// The first TOA in the option bytes of a TCP header (`None` when there is
/// none). Any malformed option before or at the TOA is an error, as is a
/// kind-254 option of a length other than 8 or 20; options after the first
/// TOA are not examined (toa.ko also takes the first).
pub fn find(opts: &[u8]) -> Result<Option<Toa>, ToaError> {
    if opts.len() > MAX_OPTIONS {
        return Err(ToaError::TooLong(opts.len()));
    }
    for o in options(opts) {
        let o = o?;
        if o.kind == KIND {
            return Toa::from_option(o.bytes).map(Some);
        }
    }
    Ok(None)
}

/// The option bytes of `opts` with `toa` added: the existing options up to
/// (not including) an EOL, NOPs to align the TOA on 4 bytes, then the TOA.
/// The result is a multiple of 4 bytes long (what a data offset counts).
/// Refused when the options are malformed, already carry a TOA, or the
/// result would pass [`MAX_OPTIONS`] (a SYN with MSS, SACK-permitted,
/// timestamps and window scale uses 20 bytes: an IPv4 TOA fits, an IPv6 one
/// does too, exactly).
pub fn append(opts: &[u8], toa: &Toa) -> Result<Vec<u8>, ToaError> {
    if opts.len() > MAX_OPTIONS {
        return Err(ToaError::TooLong(opts.len()));
    }
    let mut used = 0usize;
    for o in options(opts) {
        let o = o?;
        if o.kind == KIND {
            return Err(ToaError::AlreadyPresent);
        }
        used = o.offset + o.bytes.len();
    }
    let pad = (4 - used % 4) % 4;
    let needed = pad + usize::from(toa.wire_len());
    if used + needed > MAX_OPTIONS {
        return Err(ToaError::NoRoom { used, needed });
    }
    let mut out = Vec::with_capacity(used + needed);
    out.extend_from_slice(&opts[..used]);
    out.resize(used + pad, NOP);
    out.extend_from_slice(&toa.to_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4], port: u16) -> Toa {
        Toa::new(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port))
    }

    #[test]
    fn ipv4_vector() {
        // 192.0.2.7:40000 = 0x9c40.
        let bytes = [254, 8, 0x9c, 0x40, 192, 0, 2, 7];
        let t = v4([192, 0, 2, 7], 40000);
        assert_eq!(t.to_bytes(), bytes);
        assert_eq!(Toa::from_option(&bytes), Ok(t));
        assert_eq!(t.wire_len(), 8);
    }

    #[test]
    fn ipv6_vector() {
        let a: Ipv6Addr = "2001:db8::1:2".parse().unwrap();
        let t = Toa::new(SocketAddr::new(IpAddr::V6(a), 443));
        let mut bytes = vec![254, 20, 0x01, 0xbb];
        bytes.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2]);
        assert_eq!(t.to_bytes(), bytes);
        assert_eq!(Toa::from_option(&bytes), Ok(t));
    }

    #[test]
    fn find_in_a_real_syn_option_list() {
        // Linux SYN: MSS 1460, SACK-permitted, timestamps, NOP, wscale 7.
        let mut opts = vec![
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        assert_eq!(find(&opts), Ok(None));
        opts.extend_from_slice(&[254, 8, 0x30, 0x39, 10, 1, 2, 3]);
        assert_eq!(find(&opts), Ok(Some(v4([10, 1, 2, 3], 12345))));
    }

    #[test]
    fn eol_ends_the_walk() {
        // A TOA after EOL is padding, not an option.
        let opts = [1, 0, 254, 8, 0, 80, 1, 2, 3, 4];
        assert_eq!(find(&opts), Ok(None));
        // Garbage after EOL is not an error either.
        assert_eq!(find(&[0, 254, 1]), Ok(None));
        assert_eq!(find(&[]), Ok(None));
    }

    #[test]
    fn malformed_lengths_are_errors() {
        assert_eq!(
            find(&[2, 0, 1, 1]),
            Err(ToaError::BadLength {
                offset: 0,
                kind: 2,
                len: 0
            })
        );
        assert_eq!(
            find(&[1, 8, 1]),
            Err(ToaError::BadLength {
                offset: 1,
                kind: 8,
                len: 1
            })
        );
        assert_eq!(
            find(&[1, 2]),
            Err(ToaError::Truncated {
                offset: 1,
                needed: 2,
                got: 1
            })
        );
        assert_eq!(
            find(&[254, 8, 0, 80, 1, 2, 3]),
            Err(ToaError::Truncated {
                offset: 0,
                needed: 8,
                got: 7
            })
        );
        assert_eq!(find(&[254, 6, 0, 80, 1, 2]), Err(ToaError::BadToaLength(6)));
        assert_eq!(find(&[1; 41]), Err(ToaError::TooLong(41)));
        assert_eq!(Toa::from_option(&[2, 4, 5, 180]), Err(ToaError::NotToa(2)));
        assert!(Toa::from_option(&[]).is_err());
        assert!(Toa::from_option(&[254]).is_err());
    }

    #[test]
    fn first_toa_wins() {
        let opts = [254, 8, 0, 1, 1, 1, 1, 1, 254, 8, 0, 2, 2, 2, 2, 2];
        assert_eq!(find(&opts), Ok(Some(v4([1, 1, 1, 1], 1))));
    }

    #[test]
    fn append_aligns_and_drops_eol_padding() {
        let t = v4([198, 51, 100, 9], 5555);
        // MSS (4) + wscale (3) + EOL: the TOA goes after one NOP.
        let opts = [2, 4, 5, 180, 3, 3, 7, 0];
        let out = append(&opts, &t).unwrap();
        assert_eq!(&out[..7], &opts[..7]);
        assert_eq!(out[7], 1);
        assert_eq!(&out[8..], t.to_bytes().as_slice());
        assert_eq!(out.len() % 4, 0);
        assert_eq!(find(&out), Ok(Some(t)));
        assert_eq!(append(&[], &t).unwrap(), t.to_bytes());
    }

    #[test]
    fn append_refuses_what_does_not_fit() {
        let t6 = Toa::new("[2001:db8::9]:1".parse().unwrap());
        // 20 bytes of SYN options + 20 of TOA = 40: fits exactly.
        let syn = [
            2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        assert_eq!(append(&syn, &t6).unwrap().len(), 40);
        // 21 bytes: 3 of padding + 20 is too many.
        let mut long = syn.to_vec();
        long.push(1);
        assert_eq!(
            append(&long, &t6),
            Err(ToaError::NoRoom {
                used: 21,
                needed: 23
            })
        );
        let t4 = v4([1, 2, 3, 4], 9);
        let with = append(&syn, &t4).unwrap();
        assert_eq!(append(&with, &t4), Err(ToaError::AlreadyPresent));
        assert!(append(&[2, 9, 0], &t4).is_err());
    }

    #[test]
    fn walk_reports_offsets() {
        let opts = [1, 1, 2, 4, 5, 180];
        let all: Vec<_> = options(&opts).map(Result::unwrap).collect();
        assert_eq!(
            all.iter().map(|o| (o.offset, o.kind)).collect::<Vec<_>>(),
            [(0, 1), (1, 1), (2, 2)]
        );
        assert_eq!(all[2].bytes, &[2, 4, 5, 180]);
    }
}
