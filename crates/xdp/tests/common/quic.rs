//! QUIC-LB fixtures shared by the frame tests (tests/quic_lb.rs) and the
//! benchmark (examples/xdp_bench.rs, which includes this file by path):
//! the codecs and server IDs of the tests' service, and QUIC long and short
//! header datagrams (UDP payloads) carrying a given DCID.
#![allow(dead_code)]

use rvs_quiclb::{Codec, ConfigId, LbConfig};

/// The single-pass and four-pass key of configurations 1 and 2.
pub const KEY: [u8; 16] = [
    0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f,
];
/// The real servers' server IDs (3 octets), by position.
pub const SIDS: [[u8; 3]; 3] = [[0x11, 0x22, 0x33], [0x44, 0x55, 0x66], [0x77, 0x88, 0x99]];

/// Codepoint 0 plaintext (3 + 5), 1 single-pass (3 + 13), 2 four-pass
/// (3 + 6, keyed).
pub fn codecs() -> [Codec; 3] {
    let c = |id, nonce, key| {
        Codec::new(LbConfig::new(ConfigId::new(id).unwrap(), 3, nonce, key, false).unwrap())
    };
    [c(0, 5, None), c(1, 13, Some(KEY)), c(2, 6, Some(KEY))]
}

/// A short-header datagram with DCID `cid` and 24 octets of payload.
pub fn short(cid: &[u8]) -> Vec<u8> {
    let mut p = vec![0x40];
    p.extend_from_slice(cid);
    p.extend_from_slice(&[0xaa; 24]);
    p
}

/// A long header (Handshake type) of `version` with DCID `cid`.
pub fn long(version: u32, cid: &[u8]) -> Vec<u8> {
    let first = if version == 1 { 0xe0 } else { 0xf0 };
    let mut p = vec![first];
    p.extend_from_slice(&version.to_be_bytes());
    p.push(cid.len() as u8);
    p.extend_from_slice(cid);
    p.push(4);
    p.extend_from_slice(&[9; 4]);
    p.extend_from_slice(&[0xbb; 24]);
    p
}
