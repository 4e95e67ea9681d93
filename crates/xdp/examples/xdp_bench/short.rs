//! The "short connections" table: the four client packets of a short DR
//! connection (SYN, the handshake's ACK, a request's ACK, the client's FIN)
//! over N new flows, with the embryonic tables unarmed (the common case:
//! half-open new flows slower than the arming rate, as legitimate traffic's
//! at any rate) and armed (a SYN flood), through the cycling build
//! (bpf/bench_cycle.h).

use super::*;

/// The FIN (with ACK) of the benchmark's IPv4 flow.
fn fin_frame() -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], DIR_MAC)
        .ipv4([10, 78, 0, 1], VIP.octets(), 64)
        .tcp(CPORT, 80, 1, 65535)
        .fin()
        .ack(1)
        .write(&mut out, &[0u8; 10])
        .expect("frame");
    out
}

/// For each mode, `rounds` fresh loads (rr: no SYN-flood guard, every flow
/// gets an entry) with N = min(65536, `table`) keys: one pass of N SYNs,
/// then N handshake ACKs, N request ACKs and N FINs, each pass's ns per
/// packet; medians. Unarmed is `max_new_flows` at its maximum (never
/// reached); armed is `max_new_flows` 1 (armed from the second SYN). Every
/// packet must be forwarded, and every flow end in FIN_WAIT.
pub(crate) fn short(
    syn: &[u8],
    ack: &[u8],
    table: u32,
    rounds: usize,
) -> Result<(), Box<dyn Error>> {
    let tx = rvs_xdp::action::TX;
    let n = table.min(1 << 16);
    let fin = fin_frame();
    let packets: [(&str, &[u8]); 4] = [
        ("SYN", syn),
        ("handshake ACK", ack),
        ("request ACK", ack),
        ("FIN", &fin),
    ];
    let modes = [("unarmed", u32::MAX), ("armed", 1)];
    let mut v: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); packets.len()]; modes.len()];
    for _ in 0..rounds {
        for (m, &(mode, max_new_flows)) in modes.iter().enumerate() {
            let mut l = director(Object::DirectorCycle, "rr", table)?;
            l.set_config(&Config {
                max_new_flows,
                ..Config::ipvs_defaults()
            })?;
            l.set_bench_cycle(n, many_flows::cycle_stride(n))?;
            for (i, (_, f)) in packets.iter().enumerate() {
                v[m][i].push(ns(&mut l, f, n, tx)?);
            }
            let st = l.svc_stats(0)?;
            if st.conns != u64::from(n) || st.inpkts != 4 * u64::from(n) {
                return Err(format!(
                    "short connections ({mode}): {} connections and {} packets, not {n} and {}",
                    st.conns,
                    st.inpkts,
                    4 * u64::from(n)
                )
                .into());
            }
            for i in (0..n).step_by((n / 100).max(1) as usize) {
                let c = Ipv4Addr::from(CYCLE_BASE + i);
                let k = FlowKey::new(PROTO_TCP, c.into(), CPORT, VIP.into(), 80);
                match l.flow(&k)? {
                    Some(f) if f.state == 4 => {}
                    other => return Err(format!("{mode}: flow {i}: {other:?}").into()),
                }
            }
        }
    }
    println!();
    println!(
        "Short connections: N = {n} new IPv4 flows (rr, {SERVERS} DR real servers, flow table {table}), one pass of N packets each in turn, ns per packet, median of {rounds} fresh loads; armed = max_new_flows 1"
    );
    println!("| packet | embryonic tables unarmed | armed | armed / unarmed |");
    println!("|---|---|---|---|");
    for (i, (p, _)) in packets.iter().enumerate() {
        let u = median(&mut v[0][i]);
        let a = median(&mut v[1][i]);
        println!("| {p} | {u:.0} | {a:.0} | {:.2} |", a / u);
    }
    Ok(())
}
