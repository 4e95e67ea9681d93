//! End to end through a real `rvsd --dataplane xdp --interface eth0` in the
//! director namespace, configured with rvsadm (ipvsadm syntax) exactly as an
//! operator would: DR, TUN (IPIP, GUE) with `rvsd realserver` on the real
//! servers, one-arm NAT (real servers on another subnet of the same segment,
//! default route via the director), weight-0 drain, deletion.
//!
//! The daemon is this build's rvsd.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::harness::{Adopted, Launch, Rvsadm, TempDir, log_lines, scenarios, within};
use crate::netns::{Bed, Host, connect, spread};

const T: Duration = Duration::from_secs(3);

fn vip() -> SocketAddr {
    "10.77.0.100:80".parse().expect("vip")
}

/// rvsd (XDP on eth0) in the director's namespace; killed by the bed.
pub(crate) fn start(bed: &mut Bed, dir: &Host) -> Adopted {
    Launch::new("xdp-rvsd")
        .netns(&dir.ns)
        .plane("xdp")
        .args(["--interface", "eth0"])
        .adopt(bed)
}

enum Kind {
    Dr,
    Ipip,
    Gue,
    Nat,
}

/// Client, director (rvsd) and `n` real servers answering `rsN`.
fn setup(
    test: &str,
    kind: Kind,
    n: usize,
) -> Option<(Bed, Host, Adopted, Vec<Host>, &'static str)> {
    let (mut bed, client, dir) = crate::netns::director_bed(test)?;
    let rs = match kind {
        Kind::Nat => bed.nat_servers(&dir, n),
        Kind::Dr => bed.real_servers(n, &["--mode", "dr"]),
        Kind::Ipip => bed.real_servers(n, &["--mode", "tun"]),
        Kind::Gue => bed.real_servers(
            n,
            &["--mode", "tun", "--tun-type", "gue", "--gue-port", "6080"],
        ),
    };
    let d = start(&mut bed, &dir);
    let flag = match kind {
        Kind::Dr => "-g",
        Kind::Ipip => "-i",
        Kind::Gue => "-i --tun-type gue --tun-port 6080",
        Kind::Nat => "-m",
    };
    Some((bed, client, d, rs, flag))
}

/// Wait (bounded: 10 s) until `servers` distinct real servers have answered
/// — rvsd schedules a DR/TUN real server only once its MAC is resolved —
/// then make `n` connections and count who answered.
fn spread_when_ready(
    client: &Host,
    servers: usize,
    n: usize,
) -> std::collections::BTreeMap<String, usize> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut names = std::collections::BTreeSet::new();
    while Instant::now() < deadline && names.len() < servers {
        if let Ok(c) = connect(client, vip(), Duration::from_millis(500)) {
            names.insert(c.server);
        }
    }
    assert_eq!(names.len(), servers, "only {names:?} became reachable");
    let (seen, failed) = spread(client, vip(), n, T);
    assert_eq!(failed, 0, "{seen:?}");
    seen
}

fn rr(test: &str, kind: Kind) {
    let Some((_bed, client, d, rs, flag)) = setup(test, kind, 3) else {
        return;
    };
    d.ok("-A -t 10.77.0.100:80 -s rr");
    for h in &rs {
        d.ok(&format!("-a -t 10.77.0.100:80 -r {}:80 {flag}", h.addr));
    }
    let seen = spread_when_ready(&client, 3, 30);
    let counts: Vec<usize> = seen.values().copied().collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(counts.iter().all(|&c| c == 10), "rr over 3: {seen:?}");
}

scenarios! {
    rr:
    xdp_rvsd_dr_rr(Kind::Dr),
    xdp_rvsd_tun_ipip_rr(Kind::Ipip),
    xdp_rvsd_tun_gue_rr(Kind::Gue),
    xdp_rvsd_nat_rr(Kind::Nat),
}

#[test]
fn xdp_rvsd_weight_zero_then_delete() {
    let Some((_bed, client, d, rs, flag)) = setup("xdp_rvsd_weight_zero_then_delete", Kind::Dr, 2)
    else {
        return;
    };
    d.ok("-A -t 10.77.0.100:80 -s rr");
    for h in &rs {
        d.ok(&format!("-a -t 10.77.0.100:80 -r {}:80 {flag}", h.addr));
    }
    spread_when_ready(&client, 2, 2);
    let mut live = connect(&client, vip(), T).expect("live connection");
    let other = if live.server == "rs0" { &rs[1] } else { &rs[0] };
    let mine = if live.server == "rs0" { &rs[0] } else { &rs[1] };
    d.ok(&format!(
        "-e -t 10.77.0.100:80 -r {}:80 {flag} -w 0",
        mine.addr
    ));
    let (seen, failed) = spread(&client, vip(), 10, T);
    assert_eq!(failed, 0);
    let want = if other.addr == rs[0].addr {
        "rs0"
    } else {
        "rs1"
    };
    assert_eq!(seen.get(want), Some(&10), "{seen:?}");
    live.echo("drained but alive", T)
        .expect("the live connection continues on the quiesced server");
    d.ok(&format!("-d -t 10.77.0.100:80 -r {}:80", mine.addr));
    let (seen, failed) = spread(&client, vip(), 6, T);
    assert_eq!(failed, 0);
    assert_eq!(seen.get(want), Some(&6), "{seen:?}");
}

#[test]
fn xdp_rvsd_dr_wrr() {
    let Some((_bed, client, d, rs, flag)) = setup("xdp_rvsd_dr_wrr", Kind::Dr, 2) else {
        return;
    };
    d.ok("-A -t 10.77.0.100:80 -s wrr");
    d.ok(&format!(
        "-a -t 10.77.0.100:80 -r {}:80 {flag} -w 3",
        rs[0].addr
    ));
    d.ok(&format!(
        "-a -t 10.77.0.100:80 -r {}:80 {flag} -w 1",
        rs[1].addr
    ));
    // 40 = ten whole wrr cycles, wherever the readiness wait left the cycle.
    let seen = spread_when_ready(&client, 2, 40);
    assert_eq!(seen.get("rs0"), Some(&30), "{seen:?}");
    assert_eq!(seen.get("rs1"), Some(&10), "{seen:?}");
}

/// mh and sh with the port flag through rvsd: every connection lands on
/// the real server rvs-core chooses for its client port.
fn hashed_via_rvsd(test: &str, sched: &str) {
    use rvs_core::dest::{Dest as CoreDest, DestId};
    use rvs_core::model::{DestConfig, Protocol, SchedFlags};
    use rvs_core::sched::{ListChange, SchedInput, SchedParams, new_scheduler};
    let Some((_bed, client, d, rs, flag)) = setup(test, Kind::Dr, 3) else {
        return;
    };
    d.ok(&format!("-A -t 10.77.0.100:80 -s {sched} -b {sched}-port"));
    for h in &rs {
        d.ok(&format!("-a -t 10.77.0.100:80 -r {}:80 {flag}", h.addr));
    }
    spread_when_ready(&client, 3, 3);
    // The scheduling list is newest first: IPVS (ip_vs_add_dest) and
    // rvs-core insert a new real server at the head.
    let order: Vec<usize> = (0..rs.len()).rev().collect();
    let core: Vec<CoreDest> = order
        .iter()
        .enumerate()
        .map(|(i, &r)| CoreDest::new(DestId(i as u32), DestConfig::new(rs[r].addr, 80)))
        .collect();
    let params = SchedParams {
        flags: SchedFlags(rvs_xdp::maps::svc_flags::SCHED2),
        ..SchedParams::default()
    };
    let mut s = new_scheduler(sched.parse().expect("scheduler"), &params).expect("core scheduler");
    s.update(&core, ListChange::Reset);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let c = connect(&client, vip(), T).expect("connection");
        let local = c.stream.local_addr().expect("local addr");
        let input = SchedInput {
            protocol: Protocol::Tcp,
            saddr: local.ip(),
            sport: local.port(),
            daddr: vip().ip(),
            dport: 80,
        };
        let want = s
            .schedule(&core, &input, rvs_core::time::Instant::ZERO)
            .expect("core chooses");
        assert_eq!(
            c.server,
            format!("rs{}", order[want as usize]),
            "port {}",
            local.port()
        );
        seen.insert(c.server);
    }
    assert!(seen.len() > 1, "{seen:?}");
}

scenarios! {
    hashed_via_rvsd:
    xdp_rvsd_dr_mh_port_matches_core("mh"),
    xdp_rvsd_dr_sh_port_matches_core("sh"),
}

/// A persistent port-zero service (`-A -t VIP:0 -p`, as keepalived's
/// `virtual_server VIP 0` with persistence): every port of the VIP is
/// balanced, and one client sticks to one real server across ports.
#[test]
fn xdp_rvsd_dr_port_zero_persistent() {
    let Some((mut bed, client, d, rs, flag)) =
        setup("xdp_rvsd_dr_port_zero_persistent", Kind::Dr, 2)
    else {
        return;
    };
    for (i, h) in rs.iter().enumerate() {
        bed.server(h, "0.0.0.0".parse().expect("any"), 8080, &format!("rs{i}"));
    }
    d.ok("-A -t 10.77.0.100:0 -s rr -p 300");
    for h in &rs {
        d.ok(&format!("-a -t 10.77.0.100:0 -r {} {flag}", h.addr));
    }
    let at = |port: u16| SocketAddr::new(vip().ip(), port);
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        if let Ok(c) = connect(&client, at(80), Duration::from_millis(500)) {
            break c.server;
        }
        assert!(
            Instant::now() < deadline,
            "the port-zero service never answered"
        );
    };
    for port in [80, 8080, 80, 8080] {
        let c = connect(&client, at(port), T).expect("connect");
        assert_eq!(c.server, first, "port {port}: the client's template holds");
    }
    // The template covers all ports: -Lcn shows it on port 0 once a
    // report has mirrored the program's state (about every second).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let o = d.adm("-L -c -n");
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        if out
            .lines()
            .any(|l| l.contains("NONE") && l.contains("10.77.0.100:0"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no port-zero template: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// NAT real servers leave through the kernel's routing, which drops their
/// packets while `net.ipv4.ip_forward` is 0: rvsd's log names the NAT
/// service added then and the sysctl; the one added while forwarding was
/// on gets no such line.
#[test]
fn xdp_rvsd_names_a_nat_service_while_ip_forward_is_off() {
    let test = "xdp_rvsd_names_a_nat_service_while_ip_forward_is_off";
    let Some((mut bed, _client, dir)) = crate::netns::director_bed(test) else {
        return;
    };
    // Forwarding on (the one-arm NAT bed turns it on).
    let rs = bed.nat_servers(&dir, 1);
    let logs = TempDir::new("xdp-rvsd-forwarding");
    let log = logs.path().join("rvsd.log");
    let d = Launch::new("xdp-rvsd")
        .netns(&dir.ns)
        .plane("xdp")
        .args(["--interface", "eth0"])
        .log_file(&log)
        .adopt(&mut bed);
    let off = "net.ipv4.ip_forward is 0";
    d.ok("-A -t 10.77.0.100:80 -s rr");
    d.ok(&format!("-a -t 10.77.0.100:80 -r {}:80 -m", rs[0].addr));
    rvs_testbed::netns::sysctl(&dir.ns, "ipv4/ip_forward", "0");
    d.ok("-A -t 10.77.0.100:81 -s rr");
    d.ok(&format!("-a -t 10.77.0.100:81 -r {}:80 -m", rs[0].addr));
    within(
        "the warning naming the NAT service and the sysctl",
        Duration::from_secs(10),
        || {
            log_lines(&log)
                .iter()
                .any(|l| l.contains("service TCP 10.77.0.100:81: its Masq") && l.contains(off))
        },
    );
    // Its commands came after the first service's: that one was judged
    // already, with forwarding on.
    let lines: Vec<String> = log_lines(&log)
        .into_iter()
        .filter(|l| l.contains(off))
        .collect();
    assert_eq!(lines.len(), 1, "one line, for :81 only: {lines:?}");
}
