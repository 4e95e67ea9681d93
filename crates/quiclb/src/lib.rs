//! # rvs-quiclb
//!
//! QUIC-LB — routable QUIC connection IDs — as a sans-IO codec, after
//! draft-ietf-quic-load-balancers-21 (the latest revision; its Appendix B
//! "Load Balancer Test Vectors" are this crate's unit tests).
//!
//! QUIC connections survive a change of the client's address or port (NAT
//! rebinding, a phone moving between networks), so a balancer that routes by
//! the 4-tuple sends a migrated connection to the wrong server. With QUIC-LB
//! each server puts its *server ID* into every connection ID it issues, and
//! the balancer decodes the server ID from the Destination Connection ID of
//! each packet, whatever address the packet comes from.
//!
//! The crate has four parts, none of which performs I/O or reads a clock:
//! * [`config`] — one QUIC-LB configuration ([`LbConfig`]): config rotation
//!   codepoint, server ID and nonce lengths, optional AES-128 key, whether the
//!   first octet encodes the CID length. Validated with precise errors, and
//!   parsed from the text form operators write (`id=0,sid=3,nonce=4,key=…`).
//! * [`cid`] — the [`Codec`] of one configuration: a server builds its
//!   connection IDs with [`Codec::encode`], a balancer reads the server ID
//!   back with [`Codec::decode`], in the draft's three forms: plaintext,
//!   single-pass AES-128-ECB (server ID + nonce = 16 octets) and the
//!   four-pass Feistel construction (any other length).
//! * [`header`] — the part of a QUIC packet a balancer reads: long header
//!   (QUIC versions 1 and 2 by type, any other version by the invariants of
//!   RFC 8999, version negotiation included) and short header.
//! * [`router`] — a balancer's set of live configurations (at most seven, one
//!   per config rotation codepoint, so two can be live during a key
//!   rotation), deciding per datagram: routed by CID, or unroutable and why.
//!
//! With the `quinn` feature, `quinn::QuicLbCidGenerator` makes a quinn
//! server issue QUIC-LB connection IDs.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod cid;
pub mod config;
pub mod header;
#[cfg(feature = "quinn")]
pub mod quinn;
pub mod router;

pub use cid::{Codec, ConnectionId, DecodeError, EncodeError, ServerId};
pub use config::{ConfigError, ConfigId, LbConfig};
pub use header::{Header, HeaderError, LongType};
pub use router::{Decision, Router, Unroutable};

/// Longest connection ID QUIC versions 1 and 2 allow (RFC 9000 §17.2).
pub const MAX_CID_LEN: usize = 20;
