//! QUIC-LB through `rvsd --dataplane xdp` in network namespaces (DR):
//! connections survive client migration — to a new port, then to a new
//! source address — when the service routes by connection ID, and break
//! without.
//!
//! Three real-server namespaces (the VIP on `lo` by `rvsd realserver --mode
//! dr`) each run two quinn servers that issue QUIC-LB connection IDs with
//! rvs-quiclb's generator (server IDs 0a0001..0a0003): one on VIP:443, the
//! QUIC-LB service (`--quic-lb`, each real server's `--quic-sid`), one on
//! VIP:4433, a plain UDP service over the same servers (round robin over
//! the 4-tuple, no QUIC-LB). The director namespace runs this build's
//! `rvsd --dataplane xdp --interface eth0`, configured with rvsadm. Clients
//! in the client namespace connect one after another, exchange, then each
//! migrates twice and exchanges after each: (a) `Endpoint::rebind` to a new
//! local port, (b) to a socket on a second address of the client namespace.
//! Replies go from the real servers straight to the clients (DR), so QUIC's
//! path validation of the new address runs through the director one way
//! and directly the other.
//!
//! The servers record which connection carried each payload: every QUIC-LB
//! client's payloads were served by one server on one connection; the plain
//! service's migrations break (> 0: a migrated 4-tuple is a new flow, which
//! round robin gives to another server, whose stack does not know the
//! connection). The QUIC-LB counters are read back with `rvsadm -Ln
//! --quic-lb` (routed by CID > 0). Plaintext and single-pass configs (the
//! XDP program's forms). The test fails when routing by CID is off: the
//! handshake's packets after the Initial then go by the hash of the
//! server's CID, to another server.
//!
//! Needs root (skips with the reason otherwise; fails under CI). Every wait
//! is bounded (10 s a step, 3 s idle timeout, 20 s for the real servers to
//! become reachable); the bed's guard removes the namespaces and stops
//! rvsd, even on failure.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rvs_quiclb::Codec;
use tokio::time::timeout;

use crate::harness::Adopted;
use crate::netns::{Bed, Host, in_ns};
use crate::quic_common::{
    Cert, KEY, SIDS, Served, assert_kept, broken, cert, client_config, client_config_with, clients,
    clients_with, codec, counters, exchange, server,
};

const VIP: &str = "10.77.0.100";
const CLIENT: &str = "10.77.0.10";
/// The client namespace's second address (migration b).
const CLIENT2: &str = "10.77.0.20";
const QUIC_PORT: u16 = 443;
const PLAIN_PORT: u16 = 4433;
const CLIENTS: usize = 4;

fn vip(port: u16) -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("vip"), port)
}

/// A UDP socket bound to `addr` in namespace `ns`.
fn bind_in(ns: &str, addr: SocketAddr) -> StdUdpSocket {
    in_ns(ns, move || {
        StdUdpSocket::bind(addr).expect("bind in namespace")
    })
}

/// Connect fresh clients (bounded: 20 s) until all three real servers have
/// answered through the QUIC-LB service: rvsd schedules a DR real server
/// only once its MAC is resolved, and the clients' Initials are spread by
/// the hash of their DCID. Returns the servers seen.
async fn reachable(client: &Host, cert: &Cert) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let config = client_config(cert);
    let from = SocketAddr::new(CLIENT.parse().expect("client"), 0);
    let mut seen = BTreeSet::new();
    let mut k = 0;
    while seen.len() < SIDS.len() && Instant::now() < deadline {
        k += 1;
        let mut ep = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            bind_in(&client.ns, from),
            Arc::new(quinn::TokioRuntime),
        )
        .expect("client endpoint");
        ep.set_default_client_config(config.clone());
        let Ok(connecting) = ep.connect(vip(QUIC_PORT), "localhost") else {
            continue;
        };
        if let Ok(Ok(conn)) = timeout(Duration::from_secs(2), connecting).await {
            if let Ok(sid) = exchange(&conn, &format!("w{k}:warm")).await {
                seen.insert(sid);
            }
            conn.close(0u32.into(), b"");
        }
        ep.close(0u32.into(), b"");
    }
    seen
}

/// The director's rvsd: started by `ip netns exec`, or (the restart test)
/// by nsenter under a pinned `--instance` that outlives it.
enum Dir {
    Plain(Adopted),
    Pinned(std::sync::Mutex<crate::restart::Director>),
}

impl Dir {
    fn adm(&self, args: &str) -> std::process::Output {
        use crate::harness::Rvsadm as _;
        match self {
            Dir::Plain(d) => d.adm(args),
            Dir::Pinned(d) => d.lock().expect("director").adm(args),
        }
    }

    fn ok(&self, args: &str) {
        let o = self.adm(args);
        assert!(
            o.status.success(),
            "rvsadm {args}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Restart the pinned rvsd: SIGTERM, a pause with no rvsd at all
    /// (the attached program goes on alone), then this build again, which
    /// keeps the running program and adopts its maps; back when its table
    /// (saved by the first, restored from --state-dir) lists the QUIC-LB
    /// service again.
    fn restart(&self, quic: SocketAddr) {
        let Dir::Pinned(d) = self else {
            return;
        };
        let mut d = d.lock().expect("director");
        // The table the restarted rvsd comes back with (no -f): its file
        // must hold the QUIC-LB service's server IDs first.
        let table = d.state.join(format!("{}.table", d.instance));
        let end = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&table).is_ok_and(|t| SIDS.iter().all(|s| t.contains(s))) {
            assert!(Instant::now() < end, "{} never written", table.display());
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = d.program();
        d.stop("-TERM");
        std::thread::sleep(Duration::from_secs(2));
        d.start(false);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            use crate::harness::Rvsadm as _;
            let out = d.out("-Ln --quic-lb");
            if out.contains(&quic.to_string()) && SIDS.iter().all(|s| out.contains(s)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the restarted rvsd did not restore its table: {out}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(d.program(), before, "the running program is kept");
        eprintln!("rvsd restarted; the program kept: {before}");
    }
}

fn run(test: &str, spec: &str, codec: Codec) {
    run_with(test, spec, codec, false);
}

/// `restart`: rvsd runs under a pinned instance and is restarted (SIGTERM,
/// two seconds without rvsd, started again) after every client connected
/// and before the first migration; the clients send keep-alives meanwhile
/// (their packets go through the program left running); every QUIC-LB
/// connection must then still migrate and stay on its server.
fn run_with(test: &str, spec: &str, codec: Codec, restart: bool) {
    let Some(mut bed) = Bed::new(test) else {
        return;
    };
    let client = bed.host("c", &format!("{CLIENT}/24"));
    client.exec(&["ip", "addr", "add", &format!("{CLIENT2}/24"), "dev", "eth0"]);
    let dir = bed.host("dir", "10.77.0.2/24");
    dir.exec(&["ip", "addr", "add", &format!("{VIP}/32"), "dev", "eth0"]);
    bed.xdp_pass_on_port(&dir);
    let rs: Vec<Host> = (0..SIDS.len())
        .map(|i| {
            let h = bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
            crate::netns::realserver(&h, VIP, &["--mode", "dr"]);
            h
        })
        .collect();
    let d = if restart {
        let mut d = crate::restart::Director::new(&dir.ns, "quicrst", "");
        d.start(false);
        Dir::Pinned(std::sync::Mutex::new(d))
    } else {
        Dir::Plain(crate::xdp_rvsd::start(&mut bed, &dir))
    };

    // Two workers: the restart blocks the thread that drives the clients'
    // steps, while quinn's endpoint and connection tasks (keep-alives) go
    // on on the workers.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let cert = cert();
    let served = Served::default();
    // Each real server answers on the VIP (on its lo): both services.
    let mut endpoints = Vec::new();
    for (h, sid) in rs.iter().zip(SIDS) {
        for port in [QUIC_PORT, PLAIN_PORT] {
            let socket = bind_in(&h.ns, vip(port));
            endpoints.push(server(&codec, sid, &cert, socket, served.clone()));
        }
    }
    let (q, p) = (vip(QUIC_PORT), vip(PLAIN_PORT));
    d.ok(&format!("-A -u {q} -s rr --quic-lb {spec}"));
    d.ok(&format!("-A -u {p} -s rr"));
    for (h, sid) in rs.iter().zip(SIDS) {
        d.ok(&format!(
            "-a -u {q} -r {}:{QUIC_PORT} -g --quic-sid {sid}",
            h.addr
        ));
        d.ok(&format!("-a -u {p} -r {}:{PLAIN_PORT} -g", h.addr));
    }
    let seen = rt.block_on(reachable(&client, &cert));
    assert_eq!(seen.len(), SIDS.len(), "only {seen:?} became reachable");

    // Migration 1: a new port on the same address; 2: the second address.
    let ns = client.ns.clone();
    let socket = |i: usize, m: usize| {
        if restart && (i, m) == (0, 1) {
            d.restart(q);
        }
        let ip: IpAddr = if m == 2 { CLIENT2 } else { CLIENT }
            .parse()
            .expect("client address");
        bind_in(&ns, SocketAddr::new(ip, 0))
    };
    let keep_alive = restart.then_some(Duration::from_millis(500));
    let quic = rt.block_on(clients_with(
        q,
        "q",
        client_config_with(&cert, keep_alive),
        CLIENTS,
        2,
        &socket,
    ));
    let socket = |_: usize, m: usize| {
        let ip: IpAddr = if m == 2 { CLIENT2 } else { CLIENT }
            .parse()
            .expect("client address");
        bind_in(&ns, SocketAddr::new(ip, 0))
    };
    let plain = rt.block_on(clients(p, "p", &cert, CLIENTS, 2, &socket));
    for ep in &endpoints {
        ep.close(0u32.into(), b"");
    }

    assert_kept(spec, "q", &quic, &served);
    let broken = broken(spec, &plain);
    eprintln!(
        "{spec}: XDP QUIC-LB kept {CLIENTS}/{CLIENTS} clients over two migrations (new port, \
         new address); plain 4-tuple scheduling broke {broken}/{CLIENTS}"
    );
    assert!(
        broken > 0,
        "{spec}: plain UDP scheduling kept every migration: {plain:?}"
    );

    // The program's counters, as rvsadm lists them (a report a second):
    // the Initials by the fallback, the rest by CID.
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let o = d.adm("-Ln --quic-lb");
        let last = String::from_utf8_lossy(&o.stdout).into_owned();
        if counters(&last, q).is_some_and(|n| n[0] > 0 && n[1] > 0) {
            break last;
        }
        assert!(
            Instant::now() < deadline,
            "{spec}: no QUIC-LB counters: {last}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("{spec}: {last}");
    assert!(
        !last.contains(&p.to_string()),
        "only QUIC-LB listed: {last}"
    );
    for sid in SIDS {
        assert!(last.contains(sid), "server IDs listed: {last}");
    }
}

#[test]
fn quic_xdp_dr_plaintext_keeps_migrated_connections_on_their_servers() {
    run(
        "quic_xdp_dr_plaintext_keeps_migrated_connections_on_their_servers",
        "cr=0,sid=3,nonce=6",
        codec(0, 3, 6, None),
    );
}

/// An rvsd restart under live QUIC-LB connections: the program left
/// running routes them by CID while no rvsd runs (its QUIC-LB maps and
/// `quic_prog` slot are pinned), the restarted rvsd adopts the services,
/// and every connection then migrates and stays on its server.
#[test]
fn quic_xdp_dr_restart_keeps_connections_on_their_servers() {
    run_with(
        "quic_xdp_dr_restart_keeps_connections_on_their_servers",
        "cr=0,sid=3,nonce=6",
        codec(0, 3, 6, None),
        true,
    );
}

#[test]
fn quic_xdp_dr_single_pass_keeps_migrated_connections_on_their_servers() {
    run(
        "quic_xdp_dr_single_pass_keeps_migrated_connections_on_their_servers",
        "cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f",
        codec(1, 3, 13, Some(KEY)),
    );
}
