//! GRE and Geneve end to end (issue 15): a real `rvsd --dataplane xdp`
//! director configured with rvsadm (`-i --tun-type gre|geneve`, with and
//! without `--tun-csum`) sends real TCP to real servers prepared with
//! `rvsd realserver --mode tun --tun-type gre|geneve`, whose XDP
//! decapsulator (no ip_gre or geneve module) hands the client's packets to
//! the kernel. Each real server answers with the address `accept()` gave it
//! — the client's own address and port, carried through the tunnel — then
//! echoes; a 16 KiB request in full-size segments crosses the director's
//! path-MTU answer and the checksum of full-size tunnel packets. IPv4 and
//! IPv6 (IPv6 in IPv6 outer headers).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::harness::{Rvsadm, scenarios};
use crate::netns::{Bed, connect};

const T: Duration = Duration::from_secs(3);

/// Two real servers behind `rvsd` over `tun` (`gre` or `geneve`), IPv4 or
/// IPv6; every connection reaches a server that saw the client's address
/// and port, both servers are used, and a 16 KiB request gets through.
fn tunnel(test: &str, tun: &str, csum: &str, v6: bool) {
    let Some((mut bed, [client, dir])) =
        Bed::with_hosts(test, [("c", "10.77.0.10/24"), ("dir", "10.77.0.2/24")])
    else {
        return;
    };
    let (vip, client_ip): (IpAddr, IpAddr) = if v6 {
        client.exec(&["ip", "addr", "add", "fd77::10/64", "dev", "eth0", "nodad"]);
        dir.exec(&["ip", "addr", "add", "fd77::2/64", "dev", "eth0", "nodad"]);
        dir.exec(&["ip", "addr", "add", "fd77::100/128", "dev", "eth0", "nodad"]);
        (
            "fd77::100".parse().expect("vip"),
            "fd77::10".parse().expect("client"),
        )
    } else {
        dir.exec(&["ip", "addr", "add", "10.77.0.100/32", "dev", "eth0"]);
        (
            "10.77.0.100".parse().expect("vip"),
            "10.77.0.10".parse().expect("client"),
        )
    };
    bed.xdp_pass_on_port(&dir);
    let mut rs = Vec::new();
    let mut servers = Vec::new();
    for i in 0..2u8 {
        let h = bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
        let addr: IpAddr = if v6 {
            let a = format!("fd77::{}", 11 + i);
            h.exec(&[
                "ip",
                "addr",
                "add",
                &format!("{a}/64"),
                "dev",
                "eth0",
                "nodad",
            ]);
            a.parse().expect("rs6")
        } else {
            h.addr
        };
        crate::netns::realserver(&h, &vip.to_string(), &["--mode", "tun", "--tun-type", tun]);
        servers.push(crate::fullnat::peer_tcp(
            &h,
            SocketAddr::new(vip, 80),
            &format!("rs{i}"),
        ));
        rs.push((h, addr));
    }
    let d = crate::xdp_rvsd::start(&mut bed, &dir);
    let svc = SocketAddr::new(vip, 80);
    let bracket = |a: IpAddr| match a {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    d.ok(&format!("-A -t {} -s rr", bracket(vip) + ":80"));
    for (_, a) in &rs {
        d.ok(&format!(
            "-a -t {}:80 -r {}:80 -i --tun-type {tun} {csum}",
            bracket(vip),
            bracket(*a)
        ));
    }
    // rvsadm shows the tunnel as ipvsadm would.
    let o = d.adm(&format!("-L -n --tun-info -t {}:80", bracket(vip)));
    let listing = String::from_utf8_lossy(&o.stdout).to_string();
    let flag = if csum == "--tun-csum" { "+c" } else { "-c" };
    assert!(
        listing.contains(&format!("Tunnel  {tun}:{flag}")),
        "{listing}"
    );
    // rvsd schedules a real server once its next hop is resolved: wait
    // (bounded) until both have answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut names = std::collections::BTreeSet::new();
    while Instant::now() < deadline && names.len() < 2 {
        if let Ok(c) = connect(&client, svc, Duration::from_millis(500)) {
            names.insert(c.server.split(' ').next().unwrap_or_default().to_owned());
        }
    }
    assert_eq!(names.len(), 2, "only {names:?} became reachable");
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..10 {
        let mut c = connect(&client, svc, T).expect("connection through the tunnel");
        let local = c.stream.local_addr().expect("local addr");
        let line = c.server.clone();
        let (name, peer) = line.split_once(' ').expect("NAME PEER");
        let peer: SocketAddr = peer.parse().expect("peer address");
        assert_eq!(peer.ip(), client_ip, "the real server sees the client");
        assert_eq!(peer.port(), local.port(), "and its port");
        assert_eq!(local.ip(), client_ip);
        c.echo("through the tunnel", T).expect("echo");
        *seen.entry(name.to_owned()).or_insert(0) += 1;
    }
    assert_eq!(
        seen.values().copied().collect::<Vec<_>>(),
        vec![5, 5],
        "{seen:?}"
    );
    // Full-size segments: the director's ICMP lowers the client's path MTU
    // to fit the tunnel, then every packet crosses it (and its checksum).
    let mut c = connect(&client, svc, T).expect("connection");
    let msg: String = (0..16384)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    c.echo(&msg, Duration::from_secs(10))
        .expect("a 16 KiB request in full-size segments gets through");
    drop(servers);
}

scenarios! {
    tunnel:
    tunnels_gre_v4("gre", "--tun-nocsum", false),
    tunnels_gre_csum_v4("gre", "--tun-csum", false),
    tunnels_gre_csum_v6("gre", "--tun-csum", true),
    tunnels_geneve_v4("geneve", "--tun-nocsum", false),
    tunnels_geneve_csum_v4("geneve", "--tun-csum", false),
    tunnels_geneve_v6("geneve", "--tun-nocsum", true),
}
