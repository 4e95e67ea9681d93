//! The tunnel table: an established flow's ACK forwarded DR, IPIP, GUE,
//! GRE, GRE with its checksum and Geneve, timed one run per call.

use super::*;

/// Most single-run calls per round of the tunnel table in a full run.
pub(crate) const TUNNEL_CALLS: u32 = 20_000;

/// The GUE destination port of the tunnel rows.
const GUE_PORT: u16 = 6080;

/// Outer source address of the tunnel rows' IPv4 tunnels.
const TUN_SRC4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// [`director`] (mh) with every real server on `method` (a [`maps::fwd`]
/// tunnel or DR) and `flags` ([`maps::dest_flags::TUN_CSUM`]).
fn tunnel_director(method: u8, flags: u32, table: u32) -> Result<Loaded, Box<dyn Error>> {
    let mut l = director(Object::Director, "mh", table)?;
    let mut cfg = Config::ipvs_defaults();
    cfg.tun_src4 = TUN_SRC4.octets();
    l.set_config(&cfg)?;
    for i in 0..SERVERS {
        l.set_dest(
            i as u32,
            &Dest {
                addr: maps::addr16(IpAddr::V4(Ipv4Addr::new(10, 77, 1, i as u8 + 1))),
                family: maps::AF_INET,
                method,
                flags,
                weight: 1,
                mac: DIR_MAC,
                gue_port: GUE_PORT.to_be(),
                ..Dest::default()
            },
        )?;
    }
    Ok(l)
}

/// Mean ns of one run over `calls` BPF_PROG_TEST_RUN calls of one run
/// each (repeat 1: each call starts from a fresh copy of `f`), as the
/// kernel timed each run, checking every call's action.
pub(crate) fn single_runs(
    l: &mut Loaded,
    f: &[u8],
    calls: u32,
    want: u32,
) -> Result<f64, Box<dyn Error>> {
    let mut sum = 0.0;
    for _ in 0..calls {
        sum += ns(l, f, 1, want)?;
    }
    Ok(sum / f64::from(calls.max(1)))
}

/// The tunnel table: an established flow's ACK forwarded DR, IPIP, GUE,
/// GRE, GRE with its checksum and Geneve, in one run, ratios to DR.
///
/// A repeated BPF_PROG_TEST_RUN cannot measure an encapsulation: for XDP
/// the kernel (net/bpf/test_run.c, `bpf_test_run`) runs the program
/// `repeat` times on the same buffer, so the second run sees the first
/// run's output (an outer header to a real server: passed, or encapsulated
/// again until the headroom is spent), and the live-frames mode
/// (`BPF_F_TEST_XDP_LIVE_FRAMES`) resets only the buffer's pointers, not
/// the bytes the program wrote, and sends XDP_TX frames out of the ingress
/// device. So each figure here is one run per call (repeat 1: the kernel
/// copies the frame in afresh for every call) timed by the kernel (its
/// `ktime_get_ns` pair around that run), summed over `calls` calls; the
/// per-run overhead that timing adds (the clock reads, `local_bh_*`, the
/// dispatcher) is the bare XDP_TX program measured the same way in the
/// same round and subtracted ("net" columns). A round interleaves the
/// programs, 500 calls each in turn, so the machine's noise falls on all
/// rows alike. Every call's action is
/// checked (XDP_TX), and each row's output once (the outer header's
/// length). Median of `rounds` rounds taken in turn. The DR row is also
/// given by the repeated method, for comparison.
pub(crate) fn tunnels(
    syn: &[u8],
    ack: &[u8],
    calls: u32,
    table: u32,
    rounds: usize,
) -> Result<(), Box<dyn Error>> {
    use maps::dest_flags::TUN_CSUM;
    let tx = rvs_xdp::action::TX;
    let udp = 8;
    let rows: [(&str, u8, u32, usize); 6] = [
        ("DR", maps::fwd::DR, 0, 0),
        ("IPIP", maps::fwd::TUN_IPIP, 0, 20),
        ("GUE", maps::fwd::TUN_GUE, 0, 20 + udp + maps::GUE_HDR_LEN),
        ("GRE", maps::fwd::TUN_GRE, 0, 20 + maps::GRE_HDR_LEN),
        (
            "GRE + checksum",
            maps::fwd::TUN_GRE,
            TUN_CSUM,
            20 + maps::GRE_HDR_LEN + maps::GRE_CSUM_LEN,
        ),
        (
            "Geneve",
            maps::fwd::TUN_GENEVE,
            0,
            20 + udp + maps::GENEVE_HDR_LEN,
        ),
    ];
    let mut floor = Loaded::load(Object::BenchTx, &LoadOptions::default())?;
    let mut progs = Vec::new();
    for (name, method, flags, outer) in rows {
        let mut l = tunnel_director(method, flags, table)?;
        ns(&mut l, syn, 1, tx)?;
        let r = l.run_on(ack, 1, INGRESS)?;
        if r.action != tx || r.data.len() != ack.len() + outer {
            return Err(format!(
                "{name}: action {} and {} bytes out of {}, not XDP_TX and {} more",
                r.action,
                r.data.len(),
                ack.len(),
                outer
            )
            .into());
        }
        progs.push((name, l));
    }
    let mut floor_v = Vec::new();
    let mut v: Vec<Vec<f64>> = vec![Vec::new(); progs.len()];
    let mut dr_repeat = Vec::new();
    let mut tx_repeat = Vec::new();
    // Each round interleaves the programs in slices of `SLICE` calls, so
    // a burst of other work on the machine falls on all rows alike.
    const SLICE: u32 = 500;
    let slices = calls.div_ceil(SLICE);
    let calls = slices * SLICE;
    for _ in 0..rounds {
        let mut floor_sum = 0.0;
        let mut sums = vec![0.0; progs.len()];
        for _ in 0..slices {
            floor_sum += single_runs(&mut floor, ack, SLICE, tx)?;
            for (i, (_, l)) in progs.iter_mut().enumerate() {
                sums[i] += single_runs(l, ack, SLICE, tx)?;
            }
        }
        floor_v.push(floor_sum / f64::from(slices));
        for (i, sum) in sums.iter().enumerate() {
            v[i].push(sum / f64::from(slices));
        }
        tx_repeat.push(ns(&mut floor, ack, calls, tx)?);
        dr_repeat.push(ns(&mut progs[0].1, ack, calls, tx)?);
    }
    let floor_m = median(&mut floor_v);
    let got: Vec<(&str, f64)> = progs
        .iter()
        .map(|(n, _)| *n)
        .zip(v.iter_mut().map(|x| median(x)))
        .collect();
    let dr_net = got[0].1 - floor_m;
    println!();
    println!(
        "Tunnels: an established flow's 64-byte ACK, mh, {SERVERS} real servers, flow table {table}; one run per BPF_PROG_TEST_RUN call (repeat 1, a fresh frame each), {calls} calls per round, median of {rounds} rounds; net = minus the bare XDP_TX program timed the same way"
    );
    println!("| path | ns/packet as timed | net ns/packet | net ratio to DR |");
    println!("|---|---|---|---|");
    println!("| floor: XDP_TX only, one run per call | {floor_m:.0} | 0 | |");
    for (name, t) in &got {
        let net = t - floor_m;
        println!(
            "| established flow, {name} | {t:.0} | {net:.0} | {:.2} × DR |",
            net / dr_net
        );
    }
    let (txr, drr) = (median(&mut tx_repeat), median(&mut dr_repeat));
    println!(
        "| (DR by the repeated method: {calls} runs on one buffer) | {drr:.0} | {:.0} (minus XDP_TX repeated, {txr:.0}) | |",
        drr - txr
    );
    Ok(())
}
