//! QUIC-LB under arbitrary configurations and datagrams: the header parser
//! and the router never panic; every connection ID a configuration encodes
//! decodes back (server ID and nonce) under the same configuration and
//! through a router holding it; and decoding arbitrary bytes under an
//! arbitrary configuration returns a value or an error, never a panic.
//!
//! Input layout: byte 0 = config id (mod 8, 7 being rejected), byte 1 =
//! server ID length, byte 2 = nonce length (both taken as they are, so the
//! validation is fuzzed too), byte 3 bit 0 = keyed, bit 1 = encode length,
//! the other bits the first octet's random bits; then 16 key bytes, 19
//! server ID + nonce bytes; the rest is a datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvs_quiclb::{Codec, ConfigId, Decision, LbConfig, Router, header};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 + 16 + 19 {
        return;
    }
    let (head, rest) = data.split_at(4);
    let (key, rest) = rest.split_at(16);
    let (block, datagram) = rest.split_at(19);
    let key: [u8; 16] = key.try_into().expect("16 bytes");

    // The parser alone, with every short-header length.
    for len in [0usize, 8, 20] {
        if let Ok(h) = header::parse(datagram, len) {
            assert!(h.dcid().len() <= 255);
            assert!(h.is_long() || h.dcid().len() == len);
        }
    }

    let Ok(id) = ConfigId::new(head[0] % 8) else {
        return;
    };
    let keyed = head[3] & 1 == 1;
    let config = match LbConfig::new(id, head[1], head[2], keyed.then_some(key), head[3] & 2 != 0) {
        Ok(c) => c,
        Err(_) => {
            assert!(
                head[1] == 0
                    || head[1] > 15
                    || head[2] < 4
                    || head[2] > 18
                    || head[1] + head[2] > 19
            );
            return;
        }
    };
    let codec = Codec::new(config.clone());

    // Round trip.
    let (sid, nonce) = block.split_at(config.server_id_len());
    let nonce = &nonce[..config.nonce_len()];
    let cid = codec
        .encode(sid, nonce, head[3] >> 2)
        .expect("lengths match the config");
    assert_eq!(cid.as_bytes().len(), config.cid_len());
    assert_eq!(
        codec.decode(cid.as_bytes()).expect("own CID").as_bytes(),
        sid
    );
    let (s, n) = codec.decode_with_nonce(cid.as_bytes()).expect("own CID");
    assert_eq!((s.as_bytes(), &n[..]), (sid, nonce));

    // Arbitrary bytes as a CID under this configuration.
    let _ = codec.decode(datagram);

    // The router: arbitrary datagrams, and a short header carrying the CID.
    let mut router = Router::new();
    router.insert(codec);
    let _ = router.decide(datagram);
    let mut packet = vec![0x40];
    packet.extend_from_slice(cid.as_bytes());
    packet.extend_from_slice(datagram);
    match router.decide(&packet) {
        Ok(Decision::Routed {
            server_id, dcid, ..
        }) => {
            assert_eq!(server_id.as_bytes(), sid);
            assert_eq!(dcid, cid.as_bytes());
        }
        other => panic!("own CID in a short header: {other:?}"),
    }
});
