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

use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};

use crate::cid::{Codec, EncodeError, ServerId};

/// A quinn-proto [`ConnectionIdGenerator`] that issues QUIC-LB CIDs for one
/// server ID.
#[derive(Debug, Clone)]
pub struct QuicLbCidGenerator {
    codec: Codec,
    server_id: ServerId,
    lifetime: Option<Duration>,
}

impl QuicLbCidGenerator {
    /// A generator for `server_id` under `codec`'s configuration; fails when
    /// the server ID's length is not the configuration's.
    pub fn new(codec: Codec, server_id: ServerId) -> Result<Self, EncodeError> {
        // Check once, so generate_cid cannot fail.
        codec.encode(
            server_id.as_bytes(),
            &vec![0; codec.config().nonce_len()],
            0,
        )?;
        Ok(Self {
            codec,
            server_id,
            lifetime: None,
        })
    }

    /// Retire CIDs after `lifetime` (quinn then issues fresh ones).
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
}

impl ConnectionIdGenerator for QuicLbCidGenerator {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut nonce = [0u8; 18];
        let nonce = &mut nonce[..self.codec.config().nonce_len()];
        rand::fill(nonce);
        let mut bits = [0u8; 1];
        rand::fill(&mut bits);
        match self.codec.encode(self.server_id.as_bytes(), nonce, bits[0]) {
            Ok(cid) => ConnectionId::new(cid.as_bytes()),
            // Unreachable: `new` checked the server ID length and the nonce
            // has the configured length; a random CID is the safe answer.
            Err(_) => {
                let mut raw = [0u8; crate::MAX_CID_LEN];
                let raw = &mut raw[..self.codec.cid_len()];
                rand::fill(raw);
                ConnectionId::new(raw)
            }
        }
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match self.codec.decode(cid) {
            Ok(sid) if sid == self.server_id => Ok(()),
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        self.codec.cid_len()
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        self.lifetime
    }
}
