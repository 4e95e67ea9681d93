//! The IPVS sync-message parser under arbitrary bytes. Nothing panics; the
//! header's record count is accounted for (returned + skipped); everything
//! that parses rebuilds as v1 (under a datagram limit taken from the input)
//! into datagrams no longer than the limit that parse back, with nothing
//! skipped, to the same connections in the same order; a v0 message also
//! rebuilds as v0 to the same connections. A bulk-resync request parses
//! only from the exact bytes its builder writes, and as a sync message it
//! applies nothing (what a kernel backup makes of it).
//!
//! Input layout: byte 0 chooses fix-ups so the fuzzer reaches the record
//! rules behind the header checks (bit 0: write the real length into the
//! `size` field; bit 1: write a valid v1 header's reserved/version/spare);
//! byte 1 chooses the rebuild limit (401 + 8 × byte: 401 bytes hold the
//! largest record — every option, rvs's local address included — with its
//! header); the rest is the datagram. A v1 record may carry rvs's
//! local-address option (`OPT_RVS_LOCAL`, 0x72): it takes part in the
//! round trip like the kernel's options.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvs_wire::ipvs_sync::{self, SyncConn, SyncMessage};

fn reparse(dgrams: &[Vec<u8>], maxlen: usize, version: u8, syncid: u8) -> Vec<SyncConn> {
    let mut back = Vec::new();
    for d in dgrams {
        assert!(
            d.len() <= maxlen,
            "datagram of {} > limit {maxlen}",
            d.len()
        );
        let m: SyncMessage = ipvs_sync::parse(d).expect("a built datagram parses");
        assert_eq!((m.version, m.syncid, m.skipped), (version, syncid, 0));
        assert!(!m.conns.is_empty(), "no empty datagrams");
        back.extend(m.conns);
    }
    back
}

fuzz_target!(|data: &[u8]| {
    let [mode, limit, rest @ ..] = data else {
        return;
    };
    let maxlen = 401 + 8 * usize::from(*limit);
    let mut msg = rest.to_vec();
    if mode & 2 != 0 && msg.len() >= 8 {
        msg[0] = 0;
        msg[5] = 1;
        msg[6] = 0;
        msg[7] = 0;
    }
    if mode & 1 != 0 && msg.len() >= 4 {
        let n = u16::try_from(msg.len()).unwrap_or(u16::MAX);
        msg[2..4].copy_from_slice(&n.to_be_bytes());
    }
    if let Some(req) = ipvs_sync::parse_bulk_request(&msg) {
        assert_eq!(ipvs_sync::build_bulk_request(&req)[..], msg[..]);
        let m = ipvs_sync::parse(&msg).expect("a request is a sync message");
        assert!(
            m.conns.is_empty() && m.skipped == 0,
            "a request applies nothing"
        );
    }
    if let Some(done) = ipvs_sync::parse_bulk_done(&msg) {
        assert_eq!(ipvs_sync::build_bulk_done(&done)[..], msg[..]);
        let m = ipvs_sync::parse(&msg).expect("an answer's end is a sync message");
        assert!(
            m.conns.is_empty() && m.skipped == 0,
            "an answer's end applies nothing"
        );
    }
    let Ok(m) = ipvs_sync::parse(&msg) else {
        return;
    };
    let announced = usize::from(if m.version == 1 { msg[4] } else { msg[0] });
    assert_eq!(m.conns.len() + m.skipped, announced);

    let dgrams = ipvs_sync::build_v1(m.syncid, &m.conns, maxlen).expect("parsed conns build as v1");
    let back = reparse(&dgrams, maxlen, 1, m.syncid);
    assert_eq!(back, m.conns);
    // Deterministic: the same conns give the same bytes.
    assert_eq!(
        ipvs_sync::build_v1(m.syncid, &back, maxlen).expect("builds"),
        dgrams
    );

    if m.version == 0 {
        let dgrams = ipvs_sync::build_v0(m.syncid, &m.conns, maxlen).expect("v0 conns build as v0");
        assert_eq!(reparse(&dgrams, maxlen, 0, m.syncid), m.conns);
    }
});
