//! QUIC-LB routing in the director (bpf/lib/quic_lb.h, program xdp_quic),
//! by BPF_PROG_TEST_RUN: QUIC long (v1, v2) and short headers whose CIDs
//! rvs-quiclb's codec made (plaintext and single-pass AES-128-ECB) reach
//! the real server of their server ID from any client address and port (a
//! migration); DCIDs that do not decode (unknown codepoint, too short,
//! four-pass), headers that do not parse (truncated, empty: counted
//! `undecodable`, as the proxy plane counts them) and server IDs without a
//! live real server go by the DCID hash, the same DCID always to the same
//! server; the counters say which. Needs root; skips otherwise.

mod common;

use common::quic::KEY;
use common::quic::{SIDS, codecs, long, short};
use common::{Lb, Rs, client, rs_mac, udp_frame, vip};
use rvs_xdp::action;
use rvs_xdp::maps::{self, SvcKey, dest_flags};
use rvs_xdp::quic_lb::{QuicCfg, QuicSidKey, QuicStats, QuicSvc};

const PORT: u16 = 443;
const SVC: u32 = 3;
/// A director with one UDP QUIC-LB service (mh over three DR servers) on
/// `v6`'s VIP, port 443.
fn bed(test: &str, v6: bool) -> Option<Lb> {
    let mut lb = Lb::new(test)?;
    let key = SvcKey::new(maps::PROTO_UDP, vip(v6), PORT);
    let rs: Vec<Rs> = (0..3)
        .map(|i| Rs::new(common::rs_addr(v6, i), maps::fwd::DR, rs_mac(i)))
        .collect();
    lb.service(SVC, key, "mh", 0, &rs);
    // A QUIC-LB service lives in quic_services, not services.
    lb.l.remove_service(&key).expect("out of services");
    lb.l.set_quic_service(&key, SVC).expect("quic_services");
    let q = QuicSvc::new(&[
        (0, QuicCfg::new(3, 5, None)),
        (1, QuicCfg::new(3, 13, Some(&KEY))),
        (2, QuicCfg::new(3, 6, Some(&KEY))),
    ]);
    lb.l.set_quic_lb(SVC, &q).expect("quic_lb");
    for (i, sid) in SIDS.iter().enumerate() {
        lb.l.set_quic_sid(&QuicSidKey::new(SVC, sid).unwrap(), Lb::dest_index(SVC, i))
            .expect("quic_sids");
    }
    Some(lb)
}

/// The real-server position a datagram went to (by the rewritten MAC).
fn sent_to(lb: &mut Lb, v6: bool, c: u32, cport: u16, payload: &[u8]) -> Option<usize> {
    let r = lb.run(&udp_frame(client(v6, c), cport, vip(v6), PORT, payload));
    if r.action != action::TX {
        return None;
    }
    (0..3u8).position(|i| r.data[..6] == rs_mac(i))
}

fn stats(lb: &mut Lb) -> QuicStats {
    lb.l.quic_stats(SVC).expect("quic_stats")
}

fn routes_by_cid(v6: bool) {
    let test = if v6 {
        "quic_lb_routes_by_cid_v6"
    } else {
        "quic_lb_routes_by_cid_v4"
    };
    let Some(mut lb) = bed(test, v6) else { return };
    let codecs = codecs();
    let mut n = 0;
    for (pos, sid) in SIDS.iter().enumerate() {
        for (ci, codec) in codecs[..2].iter().enumerate() {
            let nonce: Vec<u8> = (0..codec.config().nonce_len())
                .map(|i| (i * 7 + pos + ci) as u8)
                .collect();
            let cid = codec.encode(sid, &nonce, 0x15).unwrap();
            let cid = cid.as_bytes();
            for payload in [short(cid), long(1, cid), long(0x6b33_43cf, cid)] {
                // From ten client addresses and ports: a migrating client.
                for c in 0..10u32 {
                    let got = sent_to(&mut lb, v6, c, 40000 + c as u16, &payload);
                    assert_eq!(
                        got,
                        Some(pos),
                        "{test}: config {ci} sid {sid:02x?} client {c}"
                    );
                    n += 1;
                }
            }
        }
    }
    let s = stats(&mut lb);
    assert_eq!(
        s,
        QuicStats {
            by_cid: n,
            by_fallback: 0,
            undecodable: 0
        },
        "{test}"
    );
    // No flow entry: routing stays per packet.
    assert_eq!(
        lb.flow_dest(maps::PROTO_UDP, client(v6, 0), 40000, vip(v6), PORT),
        None
    );
    assert_eq!(lb.l.quic_missed().unwrap(), 0);
}

#[test]
fn quic_lb_routes_by_cid_v4() {
    routes_by_cid(false);
}

#[test]
fn quic_lb_routes_by_cid_v6() {
    routes_by_cid(true);
}

/// Every client sends `payload`: all go to one real server; returns it.
fn same_for_all(lb: &mut Lb, payload: &[u8], what: &str) -> usize {
    let first =
        sent_to(lb, false, 0, 50000, payload).unwrap_or_else(|| panic!("{what}: not forwarded"));
    for c in 1..8u32 {
        assert_eq!(
            sent_to(lb, false, c, 50000 + c as u16, payload),
            Some(first),
            "{what}: client {c}"
        );
    }
    first
}

#[test]
fn quic_lb_fallback_is_a_consistent_hash_of_the_dcid() {
    let Some(mut lb) = bed("quic_lb_fallback_is_a_consistent_hash_of_the_dcid", false) else {
        return;
    };
    let codecs = codecs();
    let mut undecodable = 0u64;
    let mut fallback = 0u64;
    let mut seen = [false; 3];
    // Client-chosen Initial DCIDs (codepoint 7 and 5: no configuration).
    for i in 0..24u8 {
        let dcid = [0xe0 | (i & 0x1f), i, 2, 3, 4, 5, 6, 7 ^ i];
        let mut initial = vec![0xc0, 0, 0, 0, 1, 8];
        initial.extend_from_slice(&dcid);
        initial.extend_from_slice(&[0, 0, 0x41, 0x00]);
        initial.extend_from_slice(&[0; 40]);
        seen[same_for_all(&mut lb, &initial, "initial")] = true;
        let mut unknown = dcid;
        unknown[0] = 0xa0 | i;
        same_for_all(&mut lb, &short(&unknown), "unknown codepoint");
        fallback += 16;
    }
    assert_eq!(seen, [true; 3], "the hash spreads DCIDs over the servers");
    // A DCID too short for its configuration (long header, 4 octets).
    same_for_all(&mut lb, &long(1, &[0x20, 1, 2, 3]), "too short");
    // A four-pass CID: not decoded here.
    let four = codecs[2].encode(&SIDS[1], &[1, 2, 3, 4, 5, 6], 0).unwrap();
    same_for_all(&mut lb, &short(four.as_bytes()), "four-pass");
    // All of those are QUIC headers that parse: the fallback.
    fallback += 16;
    assert_eq!(
        stats(&mut lb),
        QuicStats {
            by_cid: 0,
            by_fallback: fallback,
            undecodable: 0
        },
    );
    // Headers that do not parse (what the proxy plane counts
    // `undecodable`): a short header shorter than its codepoint's CID, a
    // long header without its SCID, a v1 long header with a 21-octet
    // DCID, an empty datagram. Forwarded by the hash all the same.
    same_for_all(&mut lb, &[0x40, 0x01, 0x02], "truncated");
    same_for_all(&mut lb, &[0xc0, 0, 0, 0, 1, 4, 1, 2, 3, 4], "no SCID");
    let mut long21 = vec![0xc0, 0, 0, 0, 1, 21];
    long21.extend_from_slice(&[7; 21]);
    long21.extend_from_slice(&[0; 30]);
    same_for_all(&mut lb, &long21, "DCID too long");
    same_for_all(&mut lb, &[], "empty");
    undecodable += 32;
    assert_eq!(
        stats(&mut lb),
        QuicStats {
            by_cid: 0,
            by_fallback: fallback,
            undecodable
        },
    );
    // A server ID no real server has decodes, and falls back.
    let cid = codecs[1].encode(&[0xde, 0xad, 0x00], &[3; 13], 0).unwrap();
    same_for_all(&mut lb, &short(cid.as_bytes()), "unknown server ID");
    fallback += 8;
    assert_eq!(
        stats(&mut lb),
        QuicStats {
            by_cid: 0,
            by_fallback: fallback,
            undecodable
        },
    );
}

#[test]
fn quic_lb_server_without_a_live_real_server_falls_back() {
    let Some(mut lb) = bed(
        "quic_lb_server_without_a_live_real_server_falls_back",
        false,
    ) else {
        return;
    };
    let codecs = codecs();
    let cid = codecs[0].encode(&SIDS[2], &[5; 5], 0).unwrap();
    let p = short(cid.as_bytes());
    assert_eq!(sent_to(&mut lb, false, 1, 1000, &p), Some(2));
    // Quiesced (weight 0): its connections stay.
    let idx = Lb::dest_index(SVC, 2);
    let mut dest = maps::Dest {
        addr: maps::addr16(common::rs_addr(false, 2)),
        port: 0,
        family: maps::AF_INET,
        method: maps::fwd::DR,
        flags: 0,
        weight: 0,
        ifindex: 0,
        mac: rs_mac(2),
        smac: common::DIR_MAC,
        gue_port: 0,
        pad0: 0,
    };
    lb.l.set_dest(idx, &dest).unwrap();
    assert_eq!(
        sent_to(&mut lb, false, 1, 1000, &p),
        Some(2),
        "quiesced keeps its CIDs"
    );
    // Deleted: the CID's packets go by the fallback, to a live server.
    dest.flags |= dest_flags::UNAVAILABLE;
    lb.l.set_dest(idx, &dest).unwrap();
    let to = sent_to(&mut lb, false, 1, 1000, &p).expect("forwarded");
    assert_ne!(to, 2);
    assert_eq!(sent_to(&mut lb, false, 7, 2000, &p), Some(to));
    let s = stats(&mut lb);
    assert_eq!((s.by_cid, s.by_fallback, s.undecodable), (2, 2, 0));
}

/// The same service in services instead of quic_services is a plain UDP
/// service again.
#[test]
fn quic_lb_service_is_not_in_services() {
    let Some(mut lb) = bed("quic_lb_service_is_not_in_services", false) else {
        return;
    };
    // The same service as a plain one (services): scheduled by the
    // 4-tuple, with a flow entry, no QUIC counting.
    let key = SvcKey::new(maps::PROTO_UDP, vip(false), PORT);
    lb.l.remove_quic_service(&key).unwrap();
    lb.l.set_service(&key, SVC).unwrap();
    let cid = codecs()[0].encode(&SIDS[0], &[1; 5], 0).unwrap();
    assert!(sent_to(&mut lb, false, 1, 1000, &short(cid.as_bytes())).is_some());
    assert!(
        lb.flow_dest(maps::PROTO_UDP, client(false, 1), 1000, vip(false), PORT)
            .is_some()
    );
    assert_eq!(stats(&mut lb), QuicStats::default());
}
