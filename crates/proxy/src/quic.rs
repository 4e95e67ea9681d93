//! QUIC-LB routing of a UDP service's datagrams (draft-ietf-quic-load-balancers-21).
//!
//! A service with `--quic-lb` configs routes every datagram by the server
//! ID its real servers encode into the connection IDs they issue, not by
//! the client's address: a client that migrates (new port or address, same
//! server-issued CID) keeps reaching its server. Per datagram:
//!
//! * the QUIC header is parsed (long header: the DCID from its length
//!   field; short header: the DCID length from the config its first octet
//!   names) and the DCID decoded with rvs-quiclb's [`Router`] — plaintext,
//!   single-pass or four-pass, up to seven configs live for key rotation;
//! * a server ID that a real server of the service has (`--quic-sid`)
//!   routes there **whatever its weight**: weight 0 means "no new
//!   connections", and a quiesced (draining) server keeps receiving the
//!   datagrams of the connections it issued CIDs for. A deleted real server
//!   is no longer a target: its CIDs go to the fallback (its connections
//!   end), so drain with weight 0 first;
//! * anything else QUIC — a client-chosen Initial/0-RTT DCID, an unknown
//!   config rotation codepoint, a server ID no real server has — goes by
//!   the fallback: a rendezvous (highest random weight) hash of the DCID
//!   over the real servers with weight > 0. The same DCID gives the same
//!   server, so a client's Initial and its retransmissions and 0-RTT agree,
//!   and adding or removing a server moves only the DCIDs that hashed to
//!   it. The service's scheduler (`-s`) is not consulted for QUIC-LB
//!   datagrams;
//! * a datagram that is not a QUIC packet at all (its header does not
//!   parse: empty, truncated) is dropped and counted `undecodable` — a
//!   QUIC-LB service carries QUIC, and guessing a server for noise would
//!   only load one.
//!
//! Each (client address, real server) pair gets its own flow and upstream
//! socket, so the real server sees a migrated client as a new peer address
//! (QUIC's path validation then runs end to end through the proxy) and its
//! replies on that socket go to the client's new address.

use std::collections::HashMap;
use std::hash::Hasher;
use std::net::SocketAddr;

use rvs_core::model::{DestConfig, QuicLbConfig};
use rvs_core::stats::QuicLbCounters;
use rvs_quiclb::{Codec, ConfigId, Decision, LbConfig, Router, ServerId};

/// Where one datagram goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Its DCID decoded to this real server's server ID.
    Cid(SocketAddr),
    /// The fallback hash of its DCID chose this real server.
    Fallback(SocketAddr),
    /// QUIC, but no real server can take it (none with weight > 0 for
    /// the fallback).
    NoServer,
    /// Not a QUIC packet.
    Undecodable,
}

/// One service's routing table, rebuilt whenever its configs or real
/// servers change.
#[derive(Debug, Default)]
pub(crate) struct QuicRoutes {
    router: Router,
    by_sid: HashMap<ServerId, SocketAddr>,
    /// Real servers with weight > 0, in a stable order (sorted).
    fallback: Vec<SocketAddr>,
}

/// Why a QUIC-LB config cannot be turned into a codec (the core validated
/// it already, so this is a bug guard, reported by the plane).
#[derive(Debug, thiserror::Error)]
#[error("QUIC-LB config {spec}: {why}")]
pub(crate) struct BuildError {
    spec: String,
    why: String,
}

impl QuicRoutes {
    /// The table for a service on port `vport` with these configs and real
    /// servers (a real server's port 0 means the service's port).
    pub(crate) fn build(
        configs: &[QuicLbConfig],
        dests: &[DestConfig],
        vport: u16,
    ) -> Result<Self, BuildError> {
        let mut router = Router::new();
        for c in configs {
            let bad = |why: String| BuildError {
                spec: format!(
                    "cr={},sid={},nonce={}",
                    c.rotation, c.server_id_len, c.nonce_len
                ),
                why,
            };
            let id = ConfigId::new(c.rotation).map_err(|e| bad(e.to_string()))?;
            let lb = LbConfig::new(id, c.server_id_len, c.nonce_len, c.key, false)
                .map_err(|e| bad(e.to_string()))?;
            router.insert(Codec::new(lb));
        }
        let target =
            |d: &DestConfig| SocketAddr::new(d.addr, if d.port == 0 { vport } else { d.port });
        let by_sid = dests
            .iter()
            .filter_map(|d| {
                let sid = d.quic_server_id?;
                Some((ServerId::from_slice(sid.as_bytes())?, target(d)))
            })
            .collect();
        let mut fallback: Vec<SocketAddr> =
            dests.iter().filter(|d| d.weight > 0).map(target).collect();
        fallback.sort();
        Ok(QuicRoutes {
            router,
            by_sid,
            fallback,
        })
    }

    /// Where `datagram` goes.
    pub(crate) fn route(&self, datagram: &[u8]) -> Route {
        let dcid = match self.router.decide(datagram) {
            Err(_) => return Route::Undecodable,
            Ok(Decision::Routed {
                server_id, dcid, ..
            }) => {
                if let Some(d) = self.by_sid.get(&server_id) {
                    return Route::Cid(*d);
                }
                dcid
            }
            Ok(Decision::Fallback { dcid, .. }) => dcid,
        };
        match rendezvous(dcid, &self.fallback) {
            Some(d) => Route::Fallback(d),
            None => Route::NoServer,
        }
    }
}

/// Rendezvous hashing: the server with the highest hash of (DCID, server).
/// SipHash-1-3 under fixed keys: the choice is the same in every rvsd (a
/// restarted or taken-over one agrees with its predecessor).
fn rendezvous(dcid: &[u8], servers: &[SocketAddr]) -> Option<SocketAddr> {
    servers.iter().copied().max_by_key(|s| {
        let mut h =
            siphasher::sip::SipHasher13::new_with_keys(0x7276_735f_7175_6963, 0x5f66_616c_6c62);
        h.write(dcid);
        match s.ip() {
            std::net::IpAddr::V4(a) => h.write(&a.octets()),
            std::net::IpAddr::V6(a) => h.write(&a.octets()),
        }
        h.write(&s.port().to_be_bytes());
        h.finish()
    })
}

/// A service's QUIC-LB counters as the UDP loop counts them, drained into
/// the director by [`crate::ProxyPlane`]'s report.
#[derive(Debug, Default)]
pub(crate) struct QuicCounts {
    by_cid: std::sync::atomic::AtomicU64,
    by_fallback: std::sync::atomic::AtomicU64,
    undecodable: std::sync::atomic::AtomicU64,
}

impl QuicCounts {
    /// Count one datagram's route.
    pub(crate) fn count(&self, r: Route) {
        use std::sync::atomic::Ordering::Relaxed;
        match r {
            Route::Cid(_) => self.by_cid.fetch_add(1, Relaxed),
            Route::Fallback(_) => self.by_fallback.fetch_add(1, Relaxed),
            Route::Undecodable => self.undecodable.fetch_add(1, Relaxed),
            Route::NoServer => 0,
        };
    }

    /// What was counted since the last call.
    pub(crate) fn take(&self) -> QuicLbCounters {
        use std::sync::atomic::Ordering::Relaxed;
        QuicLbCounters {
            by_cid: self.by_cid.swap(0, Relaxed),
            by_fallback: self.by_fallback.swap(0, Relaxed),
            undecodable: self.undecodable.swap(0, Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::QuicServerId;

    fn dest(last: u8, weight: u32, sid: Option<&str>) -> DestConfig {
        let mut d = DestConfig::new(format!("10.0.1.{last}").parse().unwrap(), 4433).weight(weight);
        d.quic_server_id = sid.map(|s| s.parse::<QuicServerId>().unwrap());
        d
    }

    fn config(key: Option<[u8; 16]>, nonce: u8) -> QuicLbConfig {
        QuicLbConfig {
            rotation: 0,
            server_id_len: 3,
            nonce_len: nonce,
            key,
        }
    }

    fn short(cid: &[u8]) -> Vec<u8> {
        let mut v = vec![0x40];
        v.extend_from_slice(cid);
        v.extend_from_slice(&[0u8; 20]);
        v
    }

    /// Every form decodes to its server, weight 0 included; unknown IDs and
    /// client-chosen DCIDs fall back to the same server for the same DCID;
    /// noise is undecodable.
    #[test]
    fn routes_by_cid_then_fallback() {
        let key = Some([7u8; 16]);
        for (cfg, label) in [
            (config(None, 6), "plaintext"),
            (config(key, 13), "single-pass"),
            (config(key, 6), "four-pass"),
        ] {
            let dests = [
                dest(1, 1, Some("010101")),
                dest(2, 0, Some("020202")),
                dest(3, 1, Some("030303")),
            ];
            let t = QuicRoutes::build(&[cfg], &dests, 443).unwrap();
            let lb =
                LbConfig::new(ConfigId::new(0).unwrap(), 3, cfg.nonce_len, cfg.key, false).unwrap();
            let codec = Codec::new(lb);
            let nonce = vec![9u8; usize::from(cfg.nonce_len)];
            let cid = codec.encode(&[2, 2, 2], &nonce, 0).unwrap();
            assert_eq!(
                t.route(&short(cid.as_bytes())),
                Route::Cid("10.0.1.2:4433".parse().unwrap()),
                "{label}: weight 0 keeps its connections"
            );
            let unknown = codec.encode(&[9, 9, 9], &nonce, 0).unwrap();
            let r = t.route(&short(unknown.as_bytes()));
            assert!(matches!(r, Route::Fallback(_)), "{label}: {r:?}");
            assert_eq!(r, t.route(&short(unknown.as_bytes())));
            assert_ne!(r, Route::Fallback("10.0.1.2:4433".parse().unwrap()));
        }
        let t = QuicRoutes::build(&[config(None, 6)], &[dest(1, 1, Some("010101"))], 443).unwrap();
        assert_eq!(t.route(&[]), Route::Undecodable);
        assert_eq!(t.route(&[0xc0, 0, 0]), Route::Undecodable);
        let empty = QuicRoutes::build(&[config(None, 6)], &[dest(1, 0, None)], 443).unwrap();
        assert_eq!(empty.route(&short(&[0u8; 10])), Route::NoServer);
    }

    /// Removing one server moves only the DCIDs that hashed to it.
    #[test]
    fn fallback_is_consistent() {
        let all: Vec<SocketAddr> = (1..=4)
            .map(|i| format!("10.0.1.{i}:443").parse().unwrap())
            .collect();
        let fewer = &all[..3];
        let mut moved = 0;
        for i in 0..2000u32 {
            let dcid = i.to_be_bytes();
            let a = rendezvous(&dcid, &all).unwrap();
            let b = rendezvous(&dcid, fewer).unwrap();
            if a != b {
                assert_eq!(a, all[3], "only the removed server's DCIDs move");
                moved += 1;
            }
        }
        assert!(moved > 0);
    }
}
