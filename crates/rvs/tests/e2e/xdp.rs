//! End to end through the XDP director in network namespaces (the bed of
//! `netns.rs`): real TCP clients and servers, real servers prepared by
//! `rvsd realserver`, the director program attached natively to the
//! director's veth. DR on the bridged segment, TUN (IPIP, GUE) with the
//! rvs decapsulator on the real servers; rr/wrr/sh/mh distributions (sh
//! and mh checked connection by connection against rvs-core's choice);
//! weight-0 drain; a real server removed mid-traffic.
//!
//! The director is driven here through rvs-xdp's `Loaded` setters (the
//! tables from rvs-core, as rvsd's XDP data plane computes them).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::{DestConfig, Protocol, SchedFlags};
use rvs_core::sched::{ListChange, SchedInput, SchedParams, new_scheduler};
use rvs_core::time::Instant as CoreInstant;
use rvs_xdp::maps::{self, Config, Dest, Svc, SvcKey, fwd};
use rvs_xdp::{LoadOptions, Loaded, Object, tables};

use crate::harness::scenarios;
use crate::netns::{Bed, Host, connect, in_ns, spread};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VPORT: u16 = 80;
const GUE_PORT: u16 = 6080;
const T: Duration = Duration::from_secs(3);

fn vip_sa() -> SocketAddr {
    SocketAddr::new(VIP.into(), VPORT)
}

/// One real server as the director sees it.
#[derive(Clone)]
struct Rs {
    host: Host,
    /// The address the director sends to (the host's, or its IPv6 one).
    addr: IpAddr,
    weight: u32,
    method: u8,
    removed: bool,
}

/// The director namespace with the program attached to its `eth0`.
struct Director {
    l: Loaded,
    host: Host,
    region: u32,
    vip: IpAddr,
}

impl Director {
    fn new(bed: &mut Bed) -> Director {
        Self::with(bed, &[])
    }

    /// The director; `more` lists extra `(bridge, ifname, cidr)` links,
    /// each with the program attached too (NAT replies arrive there).
    fn with(bed: &mut Bed, more: &[(&str, &str, &str)]) -> Director {
        let host = bed.host("dir", "10.77.0.2/24");
        let mut ifs = vec!["eth0".to_owned()];
        for (bridge, ifname, cidr) in more {
            let h = bed.link(&host.ns, bridge, ifname, cidr);
            bed.xdp_pass_on_port(&h);
            ifs.push((*ifname).to_owned());
        }
        let nat = !more.is_empty();
        // IPv6 too: the VIP and an address for tunnels (no DAD: usable now).
        host.exec(&["ip", "addr", "add", "fd77::2/64", "dev", "eth0", "nodad"]);
        host.exec(&["ip", "addr", "add", "fd77::100/128", "dev", "eth0", "nodad"]);
        if nat {
            host.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
        }
        // The VIP on the director's interface: it answers ARP for it.
        host.exec(&["ip", "addr", "add", "10.77.0.100/32", "dev", "eth0"]);
        bed.xdp_pass_on_port(&host);
        let src = match host.addr {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => unreachable!(),
        };
        let l = in_ns(&host.ns, move || {
            let mut l = Loaded::load(
                Object::Director,
                &LoadOptions {
                    flow_table_size: 65536,
                    slots: 65536,
                    ..LoadOptions::default()
                },
            )
            .expect("director loads");
            let mut cfg = Config::ipvs_defaults();
            cfg.tun_src4 = src;
            cfg.tun_src6 = "fd77::2"
                .parse::<std::net::Ipv6Addr>()
                .expect("v6")
                .octets();
            // The veths' MTU: a full-size packet no longer fits once
            // encapsulated, and the client must learn it (PMTU discovery).
            cfg.tun_mtu = 1500;
            if nat {
                cfg.flags = maps::CFG_F_NAT;
            }
            l.set_config(&cfg).expect("config");
            for i in &ifs {
                l.attach(i, None).expect("attach");
            }
            l
        });
        Director {
            l,
            host,
            region: 0,
            vip: VIP.into(),
        }
    }

    /// (Re)install the service on the VIP: scheduler `sched` with `flags`
    /// over `rs` (list order), tables from rvs-core, in a fresh region of
    /// `slots`, switched over by one `svc_info` write.
    fn service(&mut self, sched: &str, flags: u32, rs: &[Rs]) -> (SchedParams, Vec<CoreDest>) {
        let sched: rvs_core::sched::Scheduler = sched.parse().expect("scheduler");
        let live: Vec<&Rs> = rs.iter().filter(|r| !r.removed).collect();
        let core: Vec<CoreDest> = live
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut d = CoreDest::new(
                    DestId(i as u32),
                    DestConfig::new(r.addr, 0).weight(r.weight.max(1)),
                );
                d.config.weight = r.weight;
                d
            })
            .collect();
        let params = SchedParams {
            flags: SchedFlags(flags & (maps::svc_flags::SCHED1 | maps::svc_flags::SCHED2)),
            ..SchedParams::default()
        };
        let index_of: Vec<u32> = rs
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.removed)
            .map(|(i, _)| i as u32)
            .collect();
        let table = tables::scheduling_table(sched, &params, &core, &index_of).expect("table");
        for (i, r) in rs.iter().enumerate() {
            let d = Dest {
                addr: maps::addr16(r.addr),
                port: 0,
                family: maps::family(r.addr),
                method: r.method,
                flags: if r.removed {
                    maps::dest_flags::UNAVAILABLE
                } else {
                    0
                },
                weight: r.weight,
                ifindex: 0,
                mac: r.host.mac,
                smac: self.host.mac,
                gue_port: GUE_PORT.to_be(),
                pad0: 0,
            };
            self.l.set_dest(i as u32, &d).expect("dest");
        }
        self.region ^= 1;
        let base = self.region * 16384;
        self.l.set_slots(base, &table).expect("table");
        self.l.set_slots(base + 8192, &index_of).expect("list");
        self.l
            .set_svc(
                0,
                &Svc {
                    sched: maps::sched::id(sched),
                    family: maps::family(self.vip),
                    flags,
                    table_off: base,
                    table_len: table.len() as u32,
                    dests_off: base + 8192,
                    dests_len: index_of.len() as u32,
                    ..Svc::default()
                },
            )
            .expect("svc");
        self.l
            .set_service(&SvcKey::new(maps::PROTO_TCP, self.vip, VPORT), 0)
            .expect("service");
        (params, core)
    }
}

/// A bed with a client, the director and `n` real servers prepared for
/// `mode` (`dr`, `tun` IPIP or `tun` GUE) by `rvsd realserver`, each serving
/// `rsN` on VIP:80.
fn bed(test: &str, n: usize, method: u8) -> Option<(Bed, Host, Director, Vec<Rs>)> {
    let mut bed = Bed::new(test)?;
    let client = bed.host("c", "10.77.0.10/24");
    if method == fwd::NAT {
        // Real servers on their own segment behind the director, which is
        // their default gateway.
        bed.bridge("br1");
        let dir = Director::with(&mut bed, &[("br1", "eth1", "10.78.0.1/24")]);
        let mut rs = Vec::new();
        for i in 0..n {
            let h = bed.host_on(&format!("r{i}"), "br1", &format!("10.78.0.{}/24", 11 + i));
            h.exec(&["ip", "route", "add", "default", "via", "10.78.0.1"]);
            bed.server(&h, h.addr, VPORT, &format!("rs{i}"));
            rs.push(Rs {
                addr: h.addr,
                host: h,
                weight: 1,
                method,
                removed: false,
            });
        }
        return Some((bed, client, dir, rs));
    }
    let dir = Director::new(&mut bed);
    let mut rs = Vec::new();
    for i in 0..n {
        let h = bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
        let gue = GUE_PORT.to_string();
        let mode: &[&str] = match method {
            fwd::DR => &["--mode", "dr"],
            fwd::TUN_IPIP => &["--mode", "tun", "--tun-type", "ipip"],
            _ => &["--mode", "tun", "--tun-type", "gue", "--gue-port", &gue],
        };
        crate::netns::realserver(&h, "10.77.0.100", mode);
        bed.server(&h, VIP.into(), VPORT, &format!("rs{i}"));
        rs.push(Rs {
            addr: h.addr,
            host: h,
            weight: 1,
            method,
            removed: false,
        });
    }
    Some((bed, client, dir, rs))
}

fn names(counts: &std::collections::BTreeMap<String, usize>) -> Vec<(String, usize)> {
    counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

fn rr_over(test: &str, method: u8) {
    let Some((_bed, client, mut dir, rs)) = bed(test, 3, method) else {
        return;
    };
    dir.service("rr", 0, &rs);
    let (seen, failed) = spread(&client, vip_sa(), 30, T);
    assert_eq!(failed, 0, "{seen:?}");
    assert_eq!(
        names(&seen),
        vec![("rs0".into(), 10), ("rs1".into(), 10), ("rs2".into(), 10)]
    );
    let st = dir.l.svc_stats(0).expect("stats");
    assert_eq!(st.conns, 30);
    // NAT: every reply went through the program's reply path (the client
    // only accepts replies from the VIP); DR/TUN replies bypass it.
    if method == fwd::NAT {
        assert!(st.outpkts >= 60, "{st:?}");
    } else {
        assert_eq!(st.outpkts, 0);
    }
}

scenarios! {
    rr_over:
    xdp_dr_rr_real_connections(fwd::DR),
    xdp_tun_ipip_rr_with_decapsulator(fwd::TUN_IPIP),
    xdp_tun_gue_rr_with_decapsulator(fwd::TUN_GUE),
    xdp_nat_rr_real_servers_route_via_the_director(fwd::NAT),
}

#[test]
fn xdp_nat_weight_zero_drains() {
    drain("xdp_nat_weight_zero_drains", fwd::NAT);
}

#[test]
fn xdp_dr_wrr_distribution() {
    let Some((_bed, client, mut dir, mut rs)) = bed("xdp_dr_wrr_distribution", 2, fwd::DR) else {
        return;
    };
    rs[0].weight = 3;
    dir.service("wrr", 0, &rs);
    let (seen, failed) = spread(&client, vip_sa(), 40, T);
    assert_eq!(failed, 0);
    assert_eq!(names(&seen), vec![("rs0".into(), 30), ("rs1".into(), 10)]);
}

/// sh and mh with the port flag, connection by connection: the server
/// that answered is the one rvs-core chooses for that client port.
fn hashed(test: &str, sched: &str) {
    let Some((_bed, client, mut dir, rs)) = bed(test, 3, fwd::DR) else {
        return;
    };
    let (params, core) = dir.service(sched, maps::svc_flags::SCHED2, &rs);
    let mut s = new_scheduler(sched.parse().expect("scheduler"), &params).expect("core scheduler");
    s.update(&core, ListChange::Reset);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let c = connect(&client, vip_sa(), T).expect("connection");
        let local = c.stream.local_addr().expect("local addr");
        let input = SchedInput {
            protocol: Protocol::Tcp,
            saddr: local.ip(),
            sport: local.port(),
            daddr: VIP.into(),
            dport: VPORT,
        };
        let want = s
            .schedule(&core, &input, CoreInstant::ZERO)
            .expect("core chooses");
        assert_eq!(
            c.server,
            format!("rs{want}"),
            "client port {}",
            local.port()
        );
        seen.insert(c.server);
    }
    assert!(seen.len() > 1, "30 client ports all hashed to {seen:?}");
}

scenarios! {
    hashed:
    xdp_dr_sh_port_matches_core("sh"),
    xdp_dr_mh_port_matches_core("mh"),
}

#[test]
fn xdp_weight_zero_drains() {
    drain("xdp_weight_zero_drains", fwd::DR);
}

fn drain(test: &str, method: u8) {
    let Some((_bed, client, mut dir, mut rs)) = bed(test, 2, method) else {
        return;
    };
    dir.service("rr", 0, &rs);
    let mut live = connect(&client, vip_sa(), T).expect("first connection");
    assert_eq!(live.server, "rs0");
    live.echo("before", T).expect("live connection works");
    rs[0].weight = 0;
    dir.service("rr", 0, &rs);
    let (seen, failed) = spread(&client, vip_sa(), 10, T);
    assert_eq!(failed, 0);
    assert_eq!(names(&seen), vec![("rs1".into(), 10)]);
    // The established connection keeps its real server.
    live.echo("still here", T)
        .expect("live connection continues on the quiesced server");
}

#[test]
fn xdp_real_server_removed_mid_traffic() {
    let Some((_bed, client, mut dir, mut rs)) =
        bed("xdp_real_server_removed_mid_traffic", 3, fwd::DR)
    else {
        return;
    };
    dir.service("rr", 0, &rs);
    let mut live = connect(&client, vip_sa(), T).expect("first connection");
    assert_eq!(live.server, "rs0");
    let (before, failed) = spread(&client, vip_sa(), 9, T);
    assert_eq!(failed, 0);
    assert_eq!(before.len(), 3, "{before:?}");
    rs[0].removed = true;
    dir.service("rr", 0, &rs);
    let (after, failed) = spread(&client, vip_sa(), 10, T);
    assert_eq!(failed, 0);
    assert_eq!(names(&after), vec![("rs1".into(), 5), ("rs2".into(), 5)]);
    // IPVS without expire_nodest_conn: the deleted server's flows are dropped.
    assert!(
        live.echo("gone?", Duration::from_millis(800)).is_err(),
        "the removed server's connection should no longer be forwarded"
    );
}

#[test]
fn xdp_real_server_removed_under_load() {
    let Some((_bed, client, mut dir, mut rs)) =
        bed("xdp_real_server_removed_under_load", 3, fwd::DR)
    else {
        return;
    };
    dir.service("rr", 0, &rs);
    // A client thread keeps making connections (bounded: for 1.5 s and at
    // most 3000 of them, 3 s each at most) while the real server is removed
    // in the middle.
    let removed_at = std::sync::Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let (c2, r2) = (client.clone(), removed_at.clone());
    let load = std::thread::spawn(move || {
        let mut log = Vec::new();
        let end = std::time::Instant::now() + Duration::from_millis(1500);
        while std::time::Instant::now() < end && log.len() < 3000 {
            let start = std::time::Instant::now();
            let got = connect(&c2, vip_sa(), T).map(|c| c.server).ok();
            let after = r2.lock().expect("lock").is_some_and(|t| start > t);
            log.push((after, got));
        }
        log
    });
    std::thread::sleep(Duration::from_millis(500));
    rs[1].removed = true;
    dir.service("rr", 0, &rs);
    *removed_at.lock().expect("lock") = Some(std::time::Instant::now());
    let log = load.join().expect("load thread");
    let failed = log.iter().filter(|(_, g)| g.is_none()).count();
    let after: Vec<&str> = log
        .iter()
        .filter(|(a, _)| *a)
        .filter_map(|(_, g)| g.as_deref())
        .collect();
    eprintln!(
        "{} connections, {} after the removal, {failed} failed",
        log.len(),
        after.len()
    );
    // At most the one connection in flight on rs1 at the removal is lost
    // (IPVS drops a deleted real server's packets without expire_nodest_conn).
    assert!(failed <= 1, "{failed} failed: {log:?}");
    assert!(
        after.len() >= 20,
        "too few connections after the removal: {log:?}"
    );
    assert!(
        !after.contains(&"rs1"),
        "rs1 chosen after its removal: {log:?}"
    );
    assert!(
        after.contains(&"rs0") && after.contains(&"rs2"),
        "{after:?}"
    );
}

/// IPv6: client, director and real servers on fd77::/64 of the same
/// segment, DR or TUN (IPv6 in IPv6, or GUE over IPv6) to `[fd77::100]:80`.
fn v6(test: &str, method: u8) {
    let Some(mut bed) = Bed::new(test) else {
        return;
    };
    let client = bed.host("c", "10.77.0.10/24");
    client.exec(&["ip", "addr", "add", "fd77::10/64", "dev", "eth0", "nodad"]);
    let mut dir = Director::new(&mut bed);
    dir.vip = "fd77::100".parse().expect("vip6");
    let mut rs = Vec::new();
    for i in 0..2u8 {
        let h = bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
        let a6 = format!("fd77::{}", 11 + i);
        h.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{a6}/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
        let mode: &[&str] = match method {
            fwd::DR => &["--mode", "dr"],
            fwd::TUN_IPIP => &["--mode", "tun"],
            _ => &["--mode", "tun", "--tun-type", "gue", "--gue-port", "6080"],
        };
        crate::netns::realserver(&h, "fd77::100", mode);
        bed.server(&h, dir.vip, VPORT, &format!("rs{i}"));
        rs.push(Rs {
            addr: a6.parse().expect("v6"),
            host: h,
            weight: 1,
            method,
            removed: false,
        });
    }
    dir.service("rr", 0, &rs);
    let to = SocketAddr::new(dir.vip, VPORT);
    let (seen, failed) = spread(&client, to, 10, T);
    assert_eq!(failed, 0, "{seen:?}");
    assert_eq!(names(&seen), vec![("rs0".into(), 5), ("rs1".into(), 5)]);
    big_request(&client, to);
}

/// 16 KiB from the client in full-size segments: through a tunnel they only
/// arrive after the director's ICMP "fragmentation needed" / "packet too
/// big" lowered the client's path MTU; the real server echoes them back.
fn big_request(client: &Host, to: SocketAddr) {
    let mut c = connect(client, to, T).expect("connection");
    let msg: String = (0..16384)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    c.echo(&msg, Duration::from_secs(10))
        .expect("a 16 KiB request in full-size segments gets through");
}

#[test]
fn xdp_tun_pmtu_v4() {
    for (test, method) in [
        ("xdp_tun_pmtu_v4_ipip", fwd::TUN_IPIP),
        ("xdp_tun_pmtu_v4_gue", fwd::TUN_GUE),
    ] {
        let Some((_bed, client, mut dir, rs)) = bed(test, 1, method) else {
            return;
        };
        dir.service("rr", 0, &rs);
        big_request(&client, vip_sa());
    }
}

scenarios! {
    v6:
    xdp_v6_dr(fwd::DR),
    xdp_v6_tun_ip6ip6(fwd::TUN_IPIP),
    xdp_v6_tun_gue(fwd::TUN_GUE),
}
