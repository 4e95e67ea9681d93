//! The FULLNAT table: established, new-flow and handshake packets of
//! FULLNAT and NAT both ways, in a namespace with the routes their FIB
//! lookups need.

use super::tunnels::single_runs;
use super::*;

/// FULLNAT local address `i` of the bench's pool (10.77.0.(50+i)).
fn bench_laddr(i: u8) -> IpAddr {
    Ipv4Addr::new(10, 77, 0, 50 + i).into()
}

/// A director (run it inside [`common::nat_bed`]) with service 0 on TCP
/// `VIP`:80, rr, to one real server (0) on port [`common::RPORT`] by `method`
/// ([`maps::fwd::NAT`] or [`maps::fwd::FNAT`]; FULLNAT with a pool of two
/// local addresses, ports 1024-65535), flow table `table`. Reusable for
/// any FULLNAT or NAT row.
fn nat_bed_director(method: u8, table: u32) -> Result<common::Lb, Box<dyn Error>> {
    let mut l = Loaded::load(
        Object::Director,
        &LoadOptions {
            flow_table_size: table,
            slots: 8 * common::SLOT_REGION,
            embryonic_table_size: table,
            ..LoadOptions::default()
        },
    )?;
    let mut cfg = Config::ipvs_defaults();
    cfg.flags = maps::CFG_F_NAT | maps::CFG_F_FNAT;
    l.set_config(&cfg)?;
    l.add_own_mac(INGRESS, DIR_MAC)?;
    l.add_own_mac(INGRESS, common::VETH_MAC)?;
    let mut lb = common::Lb {
        l,
        core: Vec::new(),
    };
    let mut rs = common::Rs::new(common::rs_addr(false, 0), method, [0; 6]);
    rs.port = common::RPORT;
    lb.service(0, SvcKey::new(PROTO_TCP, VIP.into(), 80), "rr", 0, &[rs]);
    if method == maps::fwd::FNAT {
        let mut pool = maps::FnatPool {
            count: 2,
            port_min: 1024,
            port_max: 65535,
            family: maps::AF_INET,
            ..maps::FnatPool::default()
        };
        for i in 0..2u8 {
            pool.addrs[usize::from(i)] = maps::addr16(bench_laddr(i));
            lb.l.add_fnat_laddr(bench_laddr(i))?;
        }
        lb.l.set_fnat_pool(0, &pool)?;
    }
    Ok(lb)
}

/// One established flow client 10.78.0.1:`cport` -> `VIP`:80 through
/// `lb` (SYN, the real server's SYN-ACK, the client's ACK: ESTABLISHED):
/// returns the client's next data packet and the real server's reply as
/// they reach the director (the reply from RS:[`common::RPORT`] to what the
/// SYN's output frame was addressed from: the client, or FULLNAT's local
/// address and port).
fn nat_bed_flow(lb: &mut common::Lb, cport: u16) -> Result<(Vec<u8>, Vec<u8>), Box<dyn Error>> {
    use common::{Flags, tcp_frame_macs};
    let redirect = rvs_xdp::action::REDIRECT;
    let c: IpAddr = Ipv4Addr::new(10, 78, 0, 1).into();
    let (v, r) = (IpAddr::from(VIP), common::rs_addr(false, 0));
    let to_vip = |flags| {
        tcp_frame_macs(
            common::CLIENT_MAC,
            DIR_MAC,
            c,
            cport,
            v,
            80,
            flags,
            b"0123456789",
        )
    };
    let (src, sport) = syn_source(lb, &to_vip(Flags::Syn))?;
    let reply = tcp_frame_macs(
        common::rs_mac(0),
        common::VETH_MAC,
        r,
        common::RPORT,
        src,
        sport,
        Flags::Ack,
        b"0123456789",
    );
    ns(&mut lb.l, &reply, 1, redirect)?;
    let ack = to_vip(Flags::Ack);
    ns(&mut lb.l, &ack, 1, redirect)?;
    let k = FlowKey::new(PROTO_TCP, c, cport, v, 80);
    match lb.l.flow(&k)? {
        Some(f) if f.state == TCP_ESTABLISHED => Ok((ack, reply)),
        other => Err(format!("flow after the handshake: {other:?}").into()),
    }
}

/// A TCP segment `src:sport -> dst:dport` between `macs`, sequence `seq`,
/// acknowledgment `ack` (None: no ACK flag), SYN or not; a SYN carries
/// the MSS option (1460), which FULLNAT's SYN-ACK path lowers by the TOA's
/// length.
fn hs_seg(
    macs: ([u8; 6], [u8; 6]),
    (src, sport): (IpAddr, u16),
    (dst, dport): (IpAddr, u16),
    (seq, ack, syn): (u32, Option<u32>, bool),
) -> Result<Vec<u8>, Box<dyn Error>> {
    let b = PacketBuilder::ethernet2(macs.0, macs.1);
    let b = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
        _ => return Err("mixed families".into()),
    };
    let mut t = b.tcp(sport, dport, seq, 65535);
    if syn {
        t = t.syn().options_raw(&[2, 4, 0x05, 0xb4])?;
    }
    if let Some(a) = ack {
        t = t.ack(a);
    }
    let mut out = Vec::new();
    t.write(&mut out, &[])?;
    Ok(out)
}

/// Run a client's SYN (IPv4) through `lb`, which must redirect it: the
/// source address and port of its output (the client's, or FULLNAT's local
/// address and port), where the real server's reply goes.
fn syn_source(lb: &mut common::Lb, syn: &[u8]) -> Result<(IpAddr, u16), Box<dyn Error>> {
    let out = lb.l.run_on(syn, 1, INGRESS)?;
    if out.action != rvs_xdp::action::REDIRECT || out.data.len() < 38 {
        return Err(format!("SYN: action {} ({} bytes)", out.action, out.data.len()).into());
    }
    let d = &out.data;
    let src = IpAddr::from([d[26], d[27], d[28], d[29]]);
    Ok((src, u16::from_be_bytes([d[34], d[35]])))
}

/// The handshake of a new flow client `c:cport` -> `VIP`:80 through `lb`:
/// its SYN and the real server's SYN-ACK (with MSS, sequence 7000) run
/// unmeasured; returns the client's ACK that completes it (sequence 1001,
/// acknowledging 7001: for FULLNAT the segment the armed TOA goes into),
/// not yet run.
fn nat_bed_handshake(
    lb: &mut common::Lb,
    c: IpAddr,
    cport: u16,
) -> Result<Vec<u8>, Box<dyn Error>> {
    let redirect = rvs_xdp::action::REDIRECT;
    let (v, r) = (IpAddr::from(VIP), common::rs_addr(false, 0));
    let cin = (common::CLIENT_MAC, DIR_MAC);
    let syn = hs_seg(cin, (c, cport), (v, 80), (1000, None, true))?;
    let (src, sport) = syn_source(lb, &syn)?;
    let synack = hs_seg(
        (common::rs_mac(0), common::VETH_MAC),
        (r, common::RPORT),
        (src, sport),
        (7000, Some(1001), true),
    )?;
    ns(&mut lb.l, &synack, 1, redirect)?;
    hs_seg(cin, (c, cport), (v, 80), (1001, Some(7001), false))
}

/// The FULLNAT table: an established FULLNAT flow's client packet (to the
/// VIP; its pair recorded in the flow entry, so `xdp_lb` rewrites it
/// without the tail call into `xdp_fnat`) and its reply (RS to the local
/// address), beside the NAT path's established packet and reply, a new
/// flow's SYN both ways (FULLNAT: the pool's port allocation) and the ACK
/// that completes a new flow's handshake both ways (FULLNAT: the TOA
/// inserted), TCP over IPv4, in one run inside a namespace with the routes
/// the FIB lookups need.
///
/// NAT and FULLNAT rewrite the frame, so, as in [`tunnels`], each figure
/// is one run per BPF_PROG_TEST_RUN call (a fresh frame each), the
/// kernel's timing summed over `calls` calls, minus the bare XDP_TX
/// program timed the same way; the rows interleave in slices of 500 calls;
/// median of `rounds` rounds. Every call's action is checked (REDIRECT).
/// The SYN rows send each call a SYN of a new client port (`calls` x
/// `rounds` distinct flows, so each is a new flow); `calls` is at most
/// 12000 / `rounds`. The handshake rows do the same with the ACK that
/// completes a new flow's handshake (its SYN and the real server's SYN-ACK
/// run unmeasured before each call: [`nat_bed_handshake`]): for FULLNAT the
/// segment that gets the TOA (checked: every one counted in
/// `toa_inserted`), for NAT the same segment rewritten as usual; both
/// promote the flow from the embryonic table.
pub(crate) fn fnat(calls: u32, rounds: usize) -> Result<(), Box<dyn Error>> {
    use common::{Flags, tcp_frame_macs};
    // At most 12000 new flows in all: the pool (2 addresses x 64512 ports
    // toward the one real server) stays below 10 % use, so the port
    // allocation's bounded probing finds a free pair at once, as on a
    // director whose pool is sized for its load (a fuller pool makes it
    // probe longer and then refuse: tests/fnat.rs shows exhaustion).
    let calls = calls.clamp(500, 12_000 / rounds.max(1) as u32);
    const SLICE: u32 = 500;
    let slices = calls.div_ceil(SLICE);
    let calls = slices * SLICE;
    let table = 1 << 18;
    let netns = common::nat_bed("rvsxdp-bench");
    netns.run(move || -> Result<(), String> {
        let e = |e: Box<dyn Error>| e.to_string();
        let tx = rvs_xdp::action::TX;
        let redirect = rvs_xdp::action::REDIRECT;
        let mut floor = Loaded::load(Object::BenchTx, &LoadOptions::default()).map_err(|e| e.to_string())?;
        let mut est = Vec::new();
        for (name, method) in [("NAT", maps::fwd::NAT), ("FULLNAT", maps::fwd::FNAT)] {
            let mut lb = nat_bed_director(method, table).map_err(e)?;
            let (ack, reply) = nat_bed_flow(&mut lb, 1000).map_err(e)?;
            est.push((name, lb, ack, reply));
        }
        // New flows: their own directors (so the established rows' tables
        // stay small), client ports 2000.. one per call.
        let c: IpAddr = Ipv4Addr::new(10, 78, 0, 2).into();
        let syns: Vec<Vec<u8>> = (0..calls * rounds as u32)
            .map(|i| {
                let (addr, port) = (i / 60000, 2000 + (i % 60000) as u16);
                let c = match c {
                    IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + addr)),
                    x => x,
                };
                tcp_frame_macs(common::CLIENT_MAC, DIR_MAC, c, port, VIP.into(), 80, Flags::Syn, b"")
            })
            .collect();
        let mut newf = Vec::new();
        for (name, method) in [("NAT", maps::fwd::NAT), ("FULLNAT", maps::fwd::FNAT)] {
            newf.push((name, nat_bed_director(method, table).map_err(e)?));
        }
        // Handshakes: their own directors too, clients 10.78.1.0.. (one
        // flow per call, as for the SYN rows).
        let mut hs = Vec::new();
        for (name, method) in [("NAT", maps::fwd::NAT), ("FULLNAT", maps::fwd::FNAT)] {
            hs.push((name, nat_bed_director(method, table).map_err(e)?));
        }
        let hs_client = |i: u32| -> (IpAddr, u16) {
            let a = u32::from(Ipv4Addr::new(10, 78, 1, 0)) + i / 60000;
            (Ipv4Addr::from(a).into(), 2000 + (i % 60000) as u16)
        };
        // floor, 4 established rows, 2 new-flow rows, 2 handshake rows.
        let mut v: Vec<Vec<f64>> = vec![Vec::new(); 9];
        let mut next_syn = 0usize;
        for _ in 0..rounds {
            let mut sums = [0.0f64; 9];
            for _ in 0..slices {
                sums[0] += single_runs(&mut floor, &est[0].2, SLICE, tx).map_err(e)?;
                for (i, (name, lb, ack, reply)) in est.iter_mut().enumerate() {
                    sums[1 + 2 * i] += single_runs(&mut lb.l, ack, SLICE, redirect)
                        .map_err(|x| format!("{name} established: {x}"))?;
                    sums[2 + 2 * i] += single_runs(&mut lb.l, reply, SLICE, redirect)
                        .map_err(|x| format!("{name} reply: {x}"))?;
                }
                for (i, (name, lb)) in newf.iter_mut().enumerate() {
                    let mut sum = 0.0;
                    for f in &syns[next_syn..next_syn + SLICE as usize] {
                        sum += ns(&mut lb.l, f, 1, redirect)
                            .map_err(|x| format!("{name} new flow: {x}"))?;
                    }
                    sums[5 + i] += sum / f64::from(SLICE);
                }
                for (i, (name, lb)) in hs.iter_mut().enumerate() {
                    let mut sum = 0.0;
                    for k in next_syn..next_syn + SLICE as usize {
                        let (c, cport) = hs_client(k as u32);
                        let ack = nat_bed_handshake(lb, c, cport)
                            .map_err(|x| format!("{name} handshake: {x}"))?;
                        sum += ns(&mut lb.l, &ack, 1, redirect)
                            .map_err(|x| format!("{name} handshake ACK: {x}"))?;
                    }
                    sums[7 + i] += sum / f64::from(SLICE);
                }
                next_syn += SLICE as usize;
            }
            for (i, s) in sums.iter().enumerate() {
                v[i].push(s / f64::from(slices));
            }
        }
        for (name, lb) in &mut newf {
            let st = lb.l.svc_stats(0).map_err(|e| e.to_string())?;
            if st.conns != syns.len() as u64 {
                return Err(format!("{name} new flows: {} connections, not {}", st.conns, syns.len()));
            }
        }
        if let Some((_, lb)) = newf.get_mut(1) {
            let fs = lb.l.fnat_stats(0).map_err(|e| e.to_string())?;
            if fs.allocated != syns.len() as u64 || fs.exhausted != 0 {
                return Err(format!("FULLNAT new flows: pool stats {fs:?}"));
            }
        }
        // The established FULLNAT row took xdp_lb's own rewrite: its flow
        // has its pair recorded (bpf/lib/fnat.h, fnat_established).
        if let Some((_, lb, _, _)) = est.get_mut(1) {
            let k = FlowKey::new(PROTO_TCP, Ipv4Addr::new(10, 78, 0, 1).into(), 1000, VIP.into(), 80);
            let f = lb.l.flow(&k).map_err(|e| e.to_string())?;
            if f.is_none_or(|f| f.fnat_lport == 0 || f.flags & maps::FLOW_F_TOA != 0) {
                return Err(format!("FULLNAT established flow without its pair recorded: {f:?}"));
            }
        }
        // Every handshake made a connection and completed it (ESTABLISHED,
        // moved out of the embryonic table); every FULLNAT one had its
        // SYN-ACK's MSS lowered and its ACK got the TOA.
        let n = syns.len() as u64;
        for (name, lb) in &mut hs {
            let st = lb.l.svc_stats(0).map_err(|e| e.to_string())?;
            let (c, cport) = hs_client(0);
            let k = FlowKey::new(PROTO_TCP, c, cport, VIP.into(), 80);
            let state = lb.l.flow(&k).map_err(|e| e.to_string())?.map(|f| f.state);
            if st.conns != n || state != Some(TCP_ESTABLISHED) {
                return Err(format!(
                    "{name} handshakes: {} connections, not {n}; first flow's state {state:?}",
                    st.conns
                ));
            }
        }
        if let Some((_, lb)) = hs.get_mut(1) {
            let fs = lb.l.fnat_stats(0).map_err(|e| e.to_string())?;
            if fs.toa_inserted != n || fs.mss_clamped != n || fs.toa_noroom + fs.toa_mtu + fs.toa_error != 0 {
                return Err(format!("FULLNAT handshakes: TOA counters {fs:?}, not {n} inserted"));
            }
        }
        let m: Vec<f64> = v.iter_mut().map(|x| median(x)).collect();
        let net = |i: usize| m[i] - m[0];
        println!();
        println!(
            "FULLNAT and NAT: TCP over IPv4, one real server, rr, flow table {table}; one run per BPF_PROG_TEST_RUN call (repeat 1, a fresh frame each), {calls} calls per row per round, median of {rounds} rounds; net = minus the bare XDP_TX program timed the same way"
        );
        println!("| path | ns/packet as timed | net ns/packet | net ratio FULLNAT / NAT |");
        println!("|---|---|---|---|");
        println!("| floor: XDP_TX only, one run per call | {:.0} | 0 | |", m[0]);
        let rows = [
            ("established, client -> VIP", 1, 3),
            ("established, reply RS -> client / local address", 2, 4),
            ("new flow SYN (FULLNAT: port allocation)", 5, 6),
            ("handshake-completing ACK (FULLNAT: TOA inserted)", 7, 8),
        ];
        for (what, n, f) in rows {
            println!("| NAT {what} | {:.0} | {:.0} | |", m[n], net(n));
            println!("| FULLNAT {what} | {:.0} | {:.0} | {:.2} × NAT |", m[f], net(f), net(f) / net(n));
        }
        Ok(())
    })?;
    Ok(())
}
