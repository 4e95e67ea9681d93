//! A quinn server's connection IDs as QUIC-LB CIDs (feature `quinn`).
//!
//! Give each server of a pool its own server ID and the pool's
//! configuration, and install the generator in its endpoint:
//!
//! ```no_run
//! # use std::sync::Arc;
//! use rvs_quiclb::{Codec, LbConfig, ServerId, quinn::QuicLbCidGenerator};
//! let config: LbConfig = "id=0,sid=2,nonce=6,key=8f95f09245765f80256934e50c66207f"
//!     .parse()
//!     .unwrap();
//! let sid = ServerId::from_slice(&[0x00, 0x01]).unwrap();
//! let generator = QuicLbCidGenerator::new(Codec::new(config), sid).unwrap();
//! let mut endpoint = quinn_proto::EndpointConfig::default();
//! endpoint.cid_generator(move || Box::new(generator.clone()));
//! ```
//!
//! Every CID the server issues (the Source CID of its long headers and
//! every NEW_CONNECTION_ID) then decodes to its server ID at the balancer.
//! Nonces and the first octet's free bits are drawn from the thread's
//! cryptographic RNG, so CIDs of one connection are unlinkable without the
//! key (§5.4 asks exactly that of unencrypted configurations).
//!
//! **Key rotation** (§3.1's config rotation bits): build the generator with
//! [`QuicLbCidGenerator::rotating`] over a [`CidRotation`] the server keeps
//! a handle to. [`CidRotation::rotate_to`] switches the configuration new
//! CIDs are issued under (the old one is still accepted); with a CID
//! lifetime ([`QuicLbCidGenerator::with_lifetime`]) quinn retires the old
//! CIDs of live connections and hands the peers new ones, after which
//! [`CidRotation::retire`] drops the old configuration. The balancer holds
//! both configurations in between (`rvsadm -E ... --quic-lb OLD --quic-lb
//! NEW`), so no live connection loses its server.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};

use crate::cid::{Codec, EncodeError, ServerId};
use crate::config::ConfigId;

/// Why a rotation step was refused; the rotation is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotationError {
    /// The new configuration's CIDs have another length: quinn parses short
    /// headers with one CID length per endpoint, so a rotation keeps it
    /// (same server ID and nonce lengths; change the key and codepoint).
    #[error("CID length {got} differs from the issuing configuration's {expected}")]
    CidLen {
        /// The issuing configuration's CID length.
        expected: usize,
        /// The new configuration's.
        got: usize,
    },
    /// The server ID does not fit the new configuration.
    #[error("the server ID does not fit the new configuration: {0}")]
    ServerId(#[from] EncodeError),
    /// Retiring the configuration that new CIDs are issued under.
    #[error("config rotation {0} is the issuing configuration")]
    Issuing(u8),
}

#[derive(Debug)]
struct RotationState {
    /// New CIDs are issued under this one.
    issuing: Codec,
    /// Older configurations whose CIDs are still this server's.
    accepted: Vec<Codec>,
}

/// The configurations one server issues and accepts CIDs under, shared by
/// its generators and switched at run time (key rotation). Cloning shares.
#[derive(Debug, Clone)]
pub struct CidRotation {
    server_id: ServerId,
    state: Arc<RwLock<RotationState>>,
}

impl CidRotation {
    /// Issue under `codec` for `server_id`; fails when the server ID's
    /// length is not the configuration's.
    pub fn new(codec: Codec, server_id: ServerId) -> Result<Self, EncodeError> {
        check(&codec, &server_id)?;
        Ok(Self {
            server_id,
            state: Arc::new(RwLock::new(RotationState {
                issuing: codec,
                accepted: Vec::new(),
            })),
        })
    }

    /// Issue new CIDs under `codec` from now on; the configuration issued
    /// under until now stays accepted until [`retire`](Self::retire)d. A
    /// configuration with the same codepoint as an accepted one replaces it.
    pub fn rotate_to(&self, codec: Codec) -> Result<(), RotationError> {
        check(&codec, &self.server_id)?;
        let mut s = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if codec.cid_len() != s.issuing.cid_len() {
            return Err(RotationError::CidLen {
                expected: s.issuing.cid_len(),
                got: codec.cid_len(),
            });
        }
        let id = codec.config().id();
        let old = std::mem::replace(&mut s.issuing, codec);
        s.accepted.retain(|c| c.config().id() != id);
        if old.config().id() != id {
            s.accepted.push(old);
        }
        Ok(())
    }

    /// Stop accepting CIDs of configuration `id` (once its CIDs are retired).
    pub fn retire(&self, id: ConfigId) -> Result<(), RotationError> {
        let mut s = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if s.issuing.config().id() == id {
            return Err(RotationError::Issuing(id.get()));
        }
        s.accepted.retain(|c| c.config().id() != id);
        Ok(())
    }

    /// The codepoint new CIDs are issued under.
    pub fn issuing(&self) -> ConfigId {
        self.read(|s| s.issuing.config().id())
    }

    fn read<T>(&self, f: impl FnOnce(&RotationState) -> T) -> T {
        f(&self.state.read().unwrap_or_else(PoisonError::into_inner))
    }
}

fn check(codec: &Codec, server_id: &ServerId) -> Result<(), EncodeError> {
    codec
        .encode(
            server_id.as_bytes(),
            &vec![0; codec.config().nonce_len()],
            0,
        )
        .map(|_| ())
}

/// A quinn-proto [`ConnectionIdGenerator`] that issues QUIC-LB CIDs for one
/// server ID.
#[derive(Debug, Clone)]
pub struct QuicLbCidGenerator {
    rotation: CidRotation,
    cid_len: usize,
    lifetime: Option<Duration>,
}

impl QuicLbCidGenerator {
    /// A generator for `server_id` under `codec`'s configuration; fails when
    /// the server ID's length is not the configuration's.
    pub fn new(codec: Codec, server_id: ServerId) -> Result<Self, EncodeError> {
        Ok(Self::rotating(CidRotation::new(codec, server_id)?))
    }

    /// A generator that issues under `rotation`'s current configuration and
    /// accepts its older ones (key rotation; see the module's head).
    pub fn rotating(rotation: CidRotation) -> Self {
        let cid_len = rotation.read(|s| s.issuing.cid_len());
        Self {
            rotation,
            cid_len,
            lifetime: None,
        }
    }

    /// Retire CIDs after `lifetime` (quinn then issues fresh ones).
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
}

impl ConnectionIdGenerator for QuicLbCidGenerator {
    fn generate_cid(&mut self) -> ConnectionId {
        let sid = &self.rotation.server_id;
        let encoded = self.rotation.read(|s| {
            let mut nonce = [0u8; 18];
            let nonce = &mut nonce[..s.issuing.config().nonce_len()];
            rand::fill(nonce);
            let mut bits = [0u8; 1];
            rand::fill(&mut bits);
            s.issuing.encode(sid.as_bytes(), nonce, bits[0])
        });
        match encoded {
            Ok(cid) => ConnectionId::new(cid.as_bytes()),
            // Unreachable: `CidRotation` checked the server ID length of
            // every configuration and the nonce has the configured length;
            // a random CID is the safe answer.
            Err(_) => {
                let mut raw = [0u8; crate::MAX_CID_LEN];
                let raw = &mut raw[..self.cid_len];
                rand::fill(raw);
                ConnectionId::new(raw)
            }
        }
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        let sid = &self.rotation.server_id;
        self.rotation.read(|s| {
            std::iter::once(&s.issuing)
                .chain(&s.accepted)
                .any(|c| c.decode(cid).is_ok_and(|got| got == *sid))
                .then_some(())
                .ok_or(InvalidCid)
        })
    }

    fn cid_len(&self) -> usize {
        self.cid_len
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        self.lifetime
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LbConfig;

    fn codec(cr: u8, key: u8) -> Codec {
        Codec::new(
            LbConfig::new(ConfigId::new(cr).unwrap(), 2, 14, Some([key; 16]), false).unwrap(),
        )
    }

    fn sid() -> ServerId {
        ServerId::from_slice(&[0x0a, 0x01]).unwrap()
    }

    #[test]
    fn rotation_issues_under_the_new_config_and_accepts_the_old_until_retired() {
        let (old, new) = (codec(0, 1), codec(1, 2));
        let rotation = CidRotation::new(old.clone(), sid()).unwrap();
        let mut g = QuicLbCidGenerator::rotating(rotation.clone());
        let before = g.generate_cid();
        assert_eq!(old.decode(&before).unwrap(), sid());
        rotation.rotate_to(new.clone()).unwrap();
        assert_eq!(rotation.issuing().get(), 1);
        let after = g.generate_cid();
        assert_eq!(new.decode(&after).unwrap(), sid());
        assert!(
            old.decode(&after).is_err(),
            "issued under the new codepoint"
        );
        assert!(g.validate(&before).is_ok(), "old CIDs still this server's");
        assert!(g.validate(&after).is_ok());
        assert_eq!(
            rotation.retire(ConfigId::new(1).unwrap()),
            Err(RotationError::Issuing(1))
        );
        rotation.retire(ConfigId::new(0).unwrap()).unwrap();
        assert!(g.validate(&before).is_err(), "retired");
        assert!(g.validate(&after).is_ok());
    }

    #[test]
    fn rotation_refuses_another_cid_length_or_server_id_length_and_changes_nothing() {
        let rotation = CidRotation::new(codec(0, 1), sid()).unwrap();
        let longer =
            Codec::new(LbConfig::new(ConfigId::new(1).unwrap(), 2, 16, None, false).unwrap());
        assert!(matches!(
            rotation.rotate_to(longer),
            Err(RotationError::CidLen { .. })
        ));
        let other_sid =
            Codec::new(LbConfig::new(ConfigId::new(1).unwrap(), 3, 13, None, false).unwrap());
        assert!(matches!(
            rotation.rotate_to(other_sid),
            Err(RotationError::ServerId(_))
        ));
        assert_eq!(rotation.issuing().get(), 0);
    }
}
