//! A balancer's view: the live configurations of one service and the
//! routing decision for one datagram (draft-ietf-quic-load-balancers-21 §4).
//!
//! Up to seven configurations are live at once, one per config rotation
//! codepoint, so that a key or length change keeps old connections routable:
//! the balancer gets the new configuration first, servers then issue CIDs
//! under the new codepoint and retire the old ones, and only then is the old
//! configuration removed (§3.1).
//!
//! [`Router::decide`] answers "routed to this server ID" or "unroutable, and
//! why" — client-chosen Initial DCIDs, an unknown or the reserved codepoint,
//! a DCID too short — leaving the fallback (a consistent hash of the DCID
//! in rvs) and the server-ID-to-real-server table to the data plane, which
//! also treats a server ID with no live real server as unroutable.

use crate::cid::{Codec, DecodeError, ServerId};
use crate::config::ConfigId;
use crate::header::{self, Header, HeaderError};

/// Why a datagram's DCID does not route by QUIC-LB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unroutable {
    /// No live configuration has the DCID's config rotation bits (7 being
    /// the reserved "no configuration" codepoint, §3.2).
    #[error("no live QUIC-LB configuration with config id {0}")]
    NoConfig(u8),
    /// The DCID is empty (a zero-length CID: nothing to route by).
    #[error("empty destination connection ID")]
    EmptyDcid,
    /// The DCID does not decode under its configuration.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// The routing decision for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a> {
    /// The DCID decodes: route to the real server with this server ID.
    Routed {
        /// The configuration it decoded under.
        config: ConfigId,
        /// The server ID.
        server_id: ServerId,
        /// The DCID.
        dcid: &'a [u8],
    },
    /// The DCID does not decode: use the fallback, keyed by `dcid`, so that
    /// a client's Initial and its later packets with the same DCID agree.
    Fallback {
        /// Why.
        reason: Unroutable,
        /// The DCID as far as it is known (for a short header of an unknown
        /// configuration: as long as the router's fallback length).
        dcid: &'a [u8],
        /// Whether the packet had a long header.
        long: bool,
    },
}

/// The live configurations of one service.
#[derive(Debug, Clone, Default)]
pub struct Router {
    codecs: [Option<Codec>; 7],
}

impl Router {
    /// A router with no configuration: every DCID is unroutable.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add or replace the configuration at the codec's codepoint; returns
    /// the one it replaces.
    pub fn insert(&mut self, codec: Codec) -> Option<Codec> {
        let slot = usize::from(codec.config().id().get());
        self.codecs[slot].replace(codec)
    }

    /// Remove the configuration at `id` (the end of a rotation).
    pub fn remove(&mut self, id: ConfigId) -> Option<Codec> {
        self.codecs[usize::from(id.get())].take()
    }

    /// The configuration at `id`.
    pub fn get(&self, id: ConfigId) -> Option<&Codec> {
        self.codecs[usize::from(id.get())].as_ref()
    }

    /// Whether no configuration is live.
    pub fn is_empty(&self) -> bool {
        self.codecs.iter().all(Option::is_none)
    }

    /// DCID length assumed for short headers whose codepoint has no
    /// configuration: the CID length of the lowest-numbered configuration
    /// (a pool's configurations normally share one), 0 with none.
    pub fn fallback_dcid_len(&self) -> usize {
        self.codecs
            .iter()
            .flatten()
            .map(Codec::cid_len)
            .next()
            .unwrap_or(0)
    }

    /// Decode a DCID.
    pub fn decode(&self, dcid: &[u8]) -> Result<(ConfigId, ServerId), Unroutable> {
        let first = *dcid.first().ok_or(Unroutable::EmptyDcid)?;
        let bits = ConfigId::bits_of(first);
        let codec = self
            .codecs
            .get(usize::from(bits))
            .and_then(Option::as_ref)
            .ok_or(Unroutable::NoConfig(bits))?;
        Ok((codec.config().id(), codec.decode(dcid)?))
    }

    /// The decision for one datagram. A short header's DCID length comes
    /// from the configuration its first DCID octet names; a header that
    /// does not parse is an error (the caller counts and forwards or drops
    /// it as it does any non-QUIC datagram).
    pub fn decide<'a>(&self, datagram: &'a [u8]) -> Result<Decision<'a>, HeaderError> {
        let short_len = match datagram.get(1) {
            Some(&first) if datagram[0] & 0x80 == 0 => self
                .codecs
                .get(usize::from(ConfigId::bits_of(first)))
                .and_then(Option::as_ref)
                .map(Codec::cid_len)
                .unwrap_or_else(|| self.fallback_dcid_len().min(datagram.len() - 1)),
            _ => 0,
        };
        let header = header::parse(datagram, short_len)?;
        let dcid = header.dcid();
        Ok(match self.decode(dcid) {
            Ok((config, server_id)) => Decision::Routed {
                config,
                server_id,
                dcid,
            },
            Err(reason) => Decision::Fallback {
                reason,
                dcid,
                long: header.is_long(),
            },
        })
    }
}

impl<'a> Header<'a> {
    /// Whether a balancer may treat this packet's DCID as client-chosen:
    /// version 1/2 Initial and 0-RTT packets (the draft's unroutable DCIDs
    /// in practice).
    pub fn client_chosen_dcid(&self) -> bool {
        matches!(
            self,
            Header::Long {
                ty: header::LongType::Initial | header::LongType::ZeroRtt,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LbConfig;

    fn codec(id: u8, key: Option<[u8; 16]>) -> Codec {
        Codec::new(LbConfig::new(ConfigId::new(id).unwrap(), 2, 6, key, true).unwrap())
    }

    fn short(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0x41];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[0x55; 20]);
        p
    }

    #[test]
    fn rotation_keeps_both_configurations_routable() {
        let mut r = Router::new();
        assert!(r.is_empty());
        let old = codec(0, None);
        let new = codec(1, Some([7; 16]));
        r.insert(old.clone());
        r.insert(new.clone());
        let a = old.encode(&[0, 1], &[1; 6], 0).unwrap();
        let b = new.encode(&[0, 2], &[2; 6], 0).unwrap();
        for (cid, id, sid) in [(a, 0, [0, 1]), (b, 1, [0, 2])] {
            let p = short(cid.as_bytes());
            match r.decide(&p).unwrap() {
                Decision::Routed {
                    config,
                    server_id,
                    dcid,
                } => {
                    assert_eq!(config.get(), id);
                    assert_eq!(server_id.as_bytes(), &sid);
                    assert_eq!(dcid, cid.as_bytes());
                }
                other => panic!("{other:?}"),
            }
        }
        // The old configuration retired: its CIDs fall back.
        r.remove(ConfigId::new(0).unwrap());
        let p = short(a.as_bytes());
        assert_eq!(
            r.decide(&p).unwrap(),
            Decision::Fallback {
                reason: Unroutable::NoConfig(0),
                dcid: &p[1..10],
                long: false
            }
        );
    }

    #[test]
    fn unroutable_reasons() {
        let mut r = Router::new();
        r.insert(codec(2, None));
        // A client-chosen Initial DCID with the reserved codepoint.
        let mut initial = vec![0xc0, 0, 0, 0, 1, 8, 0xe1, 2, 3, 4, 5, 6, 7, 8, 0];
        initial.extend_from_slice(&[0; 20]);
        let d = r.decide(&initial).unwrap();
        assert_eq!(
            d,
            Decision::Fallback {
                reason: Unroutable::NoConfig(7),
                dcid: &initial[6..14],
                long: true
            }
        );
        assert!(header::parse(&initial, 0).unwrap().client_chosen_dcid());
        // A long header whose DCID names the configuration but is short.
        let p = [0xc0, 0, 0, 0, 1, 4, 0x40, 2, 3, 4, 0];
        assert_eq!(
            r.decide(&p).unwrap(),
            Decision::Fallback {
                reason: Unroutable::Decode(DecodeError::TooShort { need: 9, have: 4 }),
                dcid: &p[6..10],
                long: true
            }
        );
        let p = [0xc0, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            r.decide(&p).unwrap(),
            Decision::Fallback {
                reason: Unroutable::EmptyDcid,
                ..
            }
        ));
        // A short header too short for its configuration is not QUIC.
        assert!(r.decide(&[0x40, 0x40, 1, 2]).is_err());
        assert_eq!(r.decide(&[]), Err(HeaderError::Empty));
        // A router without configurations falls back on everything.
        let empty = Router::new();
        assert!(matches!(
            empty.decide(&[0x40, 0x40, 1, 2]).unwrap(),
            Decision::Fallback {
                reason: Unroutable::EmptyDcid,
                dcid: &[],
                ..
            }
        ));
    }
}
