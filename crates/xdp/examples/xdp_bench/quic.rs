//! The QUIC-LB table: 1-RTT datagrams routed by their CID beside a plain
//! UDP flow.

use super::*;

/// The QUIC-LB service's port.
const QUIC_PORT: u16 = 443;

/// A UDP datagram client:`CPORT` -> `VIP`:[`QUIC_PORT`] with `payload`,
/// sent to the director's MAC.
fn udp_to_vip(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], DIR_MAC)
        .ipv4([10, 78, 0, 1], VIP.octets(), 64)
        .udp(CPORT, QUIC_PORT)
        .write(&mut out, payload)
        .expect("frame");
    out
}

/// [`director`] (mh, `SERVERS` DR real servers) with its service also on
/// UDP `VIP`:[`QUIC_PORT`]: a plain UDP service (`services`, scheduled
/// once per flow, then the flow table) or, with `quic_lb`, a QUIC-LB one
/// (`quic_services`, the tail-called `xdp_quic`) with the frame tests'
/// three configurations (plaintext, single-pass, four-pass) and server
/// IDs `SIDS` on the first three real servers.
fn quic_director(table: u32, quic_lb: bool) -> Result<Loaded, Box<dyn Error>> {
    use rvs_xdp::quic_lb::{QuicCfg, QuicSidKey, QuicSvc};
    let mut l = director(Object::Director, "mh", table)?;
    let key = SvcKey::new(maps::PROTO_UDP, VIP.into(), QUIC_PORT);
    if !quic_lb {
        l.set_service(&key, 0)?;
        return Ok(l);
    }
    l.set_quic_service(&key, 0)?;
    let k = &quic_frames::KEY;
    l.set_quic_lb(
        0,
        &QuicSvc::new(&[
            (0, QuicCfg::new(3, 5, None)),
            (1, QuicCfg::new(3, 13, Some(k))),
            (2, QuicCfg::new(3, 6, Some(k))),
        ]),
    )?;
    for (i, sid) in quic_frames::SIDS.iter().enumerate() {
        let sk = QuicSidKey::new(0, sid).ok_or("server ID key")?;
        l.set_quic_sid(&sk, i as u32)?;
    }
    Ok(l)
}

/// The QUIC-LB table: a 1-RTT (short header) datagram to a QUIC-LB service
/// routed by a plaintext CID, by a single-pass AES-128 CID, and one whose
/// DCID does not decode (codepoint 7: no configuration) routed by the DCID
/// hash, beside a plain UDP flow of the same size to the same VIP (flow
/// table and flow cache), all DR with `SERVERS` real servers, in one run.
///
/// DR leaves the frame as it found it but for the destination MAC, which is
/// the director's own here ([`DIR_MAC`]), so the repeated method measures
/// it (each run sees the same datagram); QUIC-LB keeps no flow state, so
/// each run decodes the CID again. Each figure is the median of `rounds`
/// runs of `repeat` packets taken in turn; the QUIC-LB counters must
/// account for every packet on the path its row names.
pub(crate) fn quic(repeat: u32, table: u32, rounds: usize) -> Result<(), Box<dyn Error>> {
    use rvs_xdp::quic_lb::QuicStats;
    let tx = rvs_xdp::action::TX;
    let codecs = quic_frames::codecs();
    let sid = &quic_frames::SIDS[1];
    let plain = codecs[0].encode(sid, &[1, 2, 3, 4, 5], 0)?;
    let single = codecs[1].encode(sid, &[7; 13], 0)?;
    // The plaintext and single-pass CIDs are 9 and 17 octets: the fallback
    // row's DCID (codepoint 7: no configuration, so it does not decode; the
    // header parses, so it counts `by_fallback`) is 17 like the
    // single-pass one.
    let mut undecodable = [0u8; 17];
    undecodable[0] = 0xe0;
    let plain_p = quic_frames::short(plain.as_bytes());
    let single_p = quic_frames::short(single.as_bytes());
    let undec_p = quic_frames::short(&undecodable);
    // The plain UDP flow carries the longest of the datagrams.
    let udp_p = vec![0x40; single_p.len()];
    let rows: [(&str, Vec<u8>, bool); 4] = [
        (
            "plain UDP flow (no QUIC-LB), established",
            udp_to_vip(&udp_p),
            false,
        ),
        (
            "QUIC-LB, plaintext CID (9 octets)",
            udp_to_vip(&plain_p),
            true,
        ),
        (
            "QUIC-LB, single-pass AES CID (17 octets)",
            udp_to_vip(&single_p),
            true,
        ),
        (
            "QUIC-LB, DCID that does not decode -> DCID-hash fallback",
            udp_to_vip(&undec_p),
            true,
        ),
    ];
    let mut tx_prog = Loaded::load(Object::BenchTx, &LoadOptions::default())?;
    let mut progs = Vec::new();
    for (name, f, q) in &rows {
        let mut l = quic_director(table, *q)?;
        // The plain flow's first packet creates it (unmeasured).
        ns(&mut l, f, 1, tx)?;
        progs.push((*name, l, f));
    }
    let mut floor = Vec::new();
    let mut v: Vec<Vec<f64>> = vec![Vec::new(); progs.len()];
    for _ in 0..rounds {
        floor.push(ns(&mut tx_prog, &rows[0].1, repeat, tx)?);
        for (i, (_, l, f)) in progs.iter_mut().enumerate() {
            v[i].push(ns(l, f, repeat, tx)?);
        }
    }
    let n = 1 + rounds as u64 * u64::from(repeat);
    let want = [
        QuicStats::default(),
        QuicStats {
            by_cid: n,
            ..QuicStats::default()
        },
        QuicStats {
            by_cid: n,
            ..QuicStats::default()
        },
        QuicStats {
            by_cid: 0,
            by_fallback: n,
            undecodable: 0,
        },
    ];
    for ((name, l, _), w) in progs.iter_mut().zip(want) {
        let got = l.quic_stats(0)?;
        if got != w {
            return Err(format!("{name}: QUIC-LB counters {got:?}, not {w:?}").into());
        }
    }
    let floor = median(&mut floor);
    let got: Vec<(&str, f64)> = progs
        .iter()
        .map(|p| p.0)
        .zip(v.iter_mut().map(|x| median(x)))
        .collect();
    let base = got[0].1;
    println!();
    println!(
        "QUIC-LB: a {}-byte short-header datagram to UDP VIP:{QUIC_PORT}, DR, {SERVERS} real servers, mh, flow table {table}; repeat {repeat}, median of {rounds} rounds",
        rows[2].1.len()
    );
    println!("| path | ns/packet | ratio to the plain UDP flow | minus XDP_TX, ratio |");
    println!("|---|---|---|---|");
    println!("| floor: XDP_TX only | {floor:.0} | | |");
    for (name, t) in &got {
        println!(
            "| {name} | {t:.0} | {:.2} × | {:.2} × |",
            t / base,
            (t - floor) / (base - floor)
        );
    }
    Ok(())
}
