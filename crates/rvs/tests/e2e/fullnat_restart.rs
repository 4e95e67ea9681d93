//! A FULLNAT XDP director restarts and loses nothing: the FULLNAT bed of
//! `fullnat.rs` (client subnet, director with eth0/eth1, real servers in
//! another subnet with no route back), the services made with rvsadm
//! (`--add-laddr` two local addresses, `-a ... --fullnat`; rvsd keeps the
//! table beside its pins), while rvsd is restarted with SIGTERM, SIGKILL,
//! as an upgrade to a program with another tag (`--xdp-upgrade-probe`, a
//! link update) and with SIGKILL again (back to this build's program):
//!
//! - long-lived TCP streams carry pseudo-random data the real servers echo,
//!   checked byte for byte, and none breaks;
//! - a steady loop of new connections runs meanwhile, and none fails;
//! - each stream keeps its (local address, local port): the pair the real
//!   server told it at accept is still an established peer of the real
//!   server's (`ss`) after each restart, and `rvsadm -Lcn` lists every
//!   stream with it again;
//! - one UDP flow keeps its pair (the real server says whom it saw);
//! - `rvs_xdp_fnat_exhausted_total` stays 0, and `rvs_xdp_fnat_allocated_total`
//!   neither goes back nor counts the old flows again: at the end it is the
//!   number of connections made, however many restarts there were.
//!
//! rvsd runs through `restart.rs`'s [`Director`] (`nsenter --net`, a unique
//! `--instance`; killed and its pins removed on drop, even on failure).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::fullnat::{Plan, V4, V6, connect, ip, topology};
use crate::harness::Rvsadm;
use crate::netns::Host;
use crate::restart::{Director, stream};

const PORT: u16 = 80;
const STREAMS: usize = 40;
/// rvsd's /metrics in the director's namespace.
const HTTP: &str = "127.0.0.1:9191";

/// rvsd's /metrics (empty when it does not answer yet).
fn metrics(dir: &Host) -> String {
    dir.run(|| crate::harness::try_http_get(HTTP, "/metrics").unwrap_or_default())
}

/// `rvs_xdp_fnat_<name>_total` of the `proto` service on port 80, or None
/// when /metrics does not list it (yet).
fn fnat_metric(text: &str, name: &str, proto: &str) -> Option<u64> {
    let family = format!("rvs_xdp_fnat_{name}_total");
    let (port, proto) = (
        format!("local_port=\"{PORT}\""),
        format!("proto=\"{proto}\""),
    );
    let v: Vec<u64> = crate::harness::samples(text, &family, &[&port, &proto]).collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// The FULLNAT counters of both services: (TCP allocated, UDP allocated,
/// exhausted of both), once /metrics lists both (bounded wait).
fn counters(dir: &Host, what: &str) -> (u64, u64, u64) {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let text = metrics(dir);
        let got = (
            fnat_metric(&text, "allocated", "TCP"),
            fnat_metric(&text, "allocated", "UDP"),
            fnat_metric(&text, "exhausted", "TCP"),
            fnat_metric(&text, "exhausted", "UDP"),
        );
        if let (Some(t), Some(u), Some(et), Some(eu)) = got {
            return (t, u, et + eu);
        }
        assert!(
            Instant::now() < end,
            "{what}: /metrics lacks the FULLNAT counters:\n{}",
            text.lines()
                .filter(|l| l.contains("fnat"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The established peers of the real servers' port 80 (what source each
/// connection's packets come from).
fn rs_peers(rs: &[Host]) -> BTreeSet<SocketAddr> {
    let mut out = BTreeSet::new();
    for h in rs {
        let o = h.exec(&["ss", "-Htn", "state", "established", "sport", "=", ":80"]);
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            if let Some(peer) = l.split_whitespace().last().and_then(|w| w.parse().ok()) {
                out.insert(peer);
            }
        }
    }
    out
}

/// The streams `-Lcn` does not list with their (client, local pair).
fn unlisted(d: &Director, pairs: &[(SocketAddr, SocketAddr)]) -> (Vec<String>, String) {
    let out = d.out("-L -c -n");
    let missing = pairs
        .iter()
        .filter(|(me, local)| {
            let (me, local) = (me.to_string(), local.to_string());
            !out.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.contains(&me.as_str()) && w.contains(&local.as_str())
            })
        })
        .map(|(me, local)| format!("{me} via {local}"))
        .collect();
    (missing, out)
}

/// One request of the UDP flow `sock`: (the real server that answered,
/// the source it saw). Bounded retries (a datagram may be lost).
fn udp_ask(sock: &UdpSocket, vip: SocketAddr, k: u32) -> Result<(String, SocketAddr), String> {
    let payload = format!("udp flow {k}");
    let mut buf = [0u8; 2048];
    for _ in 0..10 {
        sock.send_to(payload.as_bytes(), vip)
            .map_err(|e| format!("send: {e}"))?;
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
        let mut w = reply.splitn(3, ' ');
        let (name, peer, rest) = (
            w.next().unwrap_or(""),
            w.next().unwrap_or(""),
            w.next().unwrap_or(""),
        );
        if from != vip || rest != payload {
            return Err(format!("reply {reply:?} from {from}"));
        }
        let peer = peer.parse().map_err(|_| format!("reply {reply:?}"))?;
        return Ok((name.to_owned(), peer));
    }
    Err("no reply to 10 datagrams".into())
}

fn run(test: &str, p: &Plan) {
    let Some(topo) = topology(test, p) else {
        return;
    };
    if !rvs_testbed::require_tools(test, &["nsenter", "ss"]) {
        return;
    }
    let t0 = Instant::now();
    let (client, dir) = (topo.client.clone(), topo.dir.clone());
    let mut d = Director::new(&dir.ns, test, "");
    d.args = ["--interface", "eth1", "--http", HTTP]
        .map(String::from)
        .to_vec();
    d.start(false);
    let laddrs = crate::fullnat::services(&*d, p);
    let vip_sa = SocketAddr::new(ip(p.vip), PORT);
    // The table a restarted rvsd comes back with (no -f): wait for its
    // file to hold the pool and the real servers.
    let table = d.state.join(format!("{}.table", d.instance));
    let end = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&table)
        .is_ok_and(|t| p.laddrs.iter().chain(&p.rs).all(|a| t.contains(a)))
    {
        assert!(Instant::now() < end, "{} never written", table.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The counters from the start (nothing allocated yet).
    assert_eq!(counters(&dir, "before traffic"), (0, 0, 0));

    // TCP connections made (each allocates one pair).
    let attempts = Arc::new(AtomicU64::new(0));
    let first = crate::fullnat::first_connection(&client, vip_sa, || {
        attempts.fetch_add(1, Ordering::Relaxed);
    });
    let mut conns = vec![first];
    for i in 1..STREAMS {
        attempts.fetch_add(1, Ordering::Relaxed);
        conns.push(
            connect(&client, vip_sa, Duration::from_secs(3))
                .unwrap_or_else(|e| panic!("stream {i}: {e}")),
        );
    }
    let pairs: Vec<(SocketAddr, SocketAddr)> = conns
        .iter()
        .map(|c| (c.stream.local_addr().expect("local"), c.seen))
        .collect();
    let names: BTreeSet<&str> = conns.iter().map(|c| c.server.as_str()).collect();
    assert_eq!(names.len(), 2, "rr over both real servers: {names:?}");
    for (me, seen) in &pairs {
        assert!(
            laddrs.contains(&seen.ip()),
            "stream {me}: the real server saw {seen}, not a local address"
        );
    }
    let seen: BTreeSet<SocketAddr> = pairs.iter().map(|(_, s)| *s).collect();
    assert_eq!(seen.len(), STREAMS, "a pair twice: {pairs:?}");
    let used: BTreeSet<IpAddr> = seen.iter().map(|s| s.ip()).collect();
    assert_eq!(used, laddrs, "both local addresses in use");

    let stop = Arc::new(AtomicBool::new(false));
    let streams: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let stop = stop.clone();
            let seed = 0xF4A7_0000 + i as u64;
            std::thread::spawn(move || stream(c.stream, seed, stop))
        })
        .collect();

    // The UDP flow: one client socket, one pair.
    let any: SocketAddr = if p.v6 {
        "[::]:0".parse().expect("any")
    } else {
        "0.0.0.0:0".parse().expect("any")
    };
    let usock = client.run(move || UdpSocket::bind(any).expect("udp bind"));
    usock
        .set_read_timeout(Some(Duration::from_millis(700)))
        .expect("timeout");
    let udp = udp_ask(&usock, vip_sa, 0).unwrap_or_else(|e| panic!("the UDP flow: {e}"));
    assert!(laddrs.contains(&udp.1.ip()), "UDP seen from {}", udp.1);

    // The steady loop of new connections.
    let made = Arc::new(AtomicU64::new(0));
    let newconns = {
        let (stop, made, attempts, client) =
            (stop.clone(), made.clone(), attempts.clone(), client.clone());
        let laddrs = laddrs.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(120);
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                attempts.fetch_add(1, Ordering::Relaxed);
                let r = connect(&client, vip_sa, Duration::from_secs(3)).and_then(|mut c| {
                    if !laddrs.contains(&c.seen.ip()) {
                        return Err(std::io::Error::other(format!("seen from {}", c.seen)));
                    }
                    c.stream.write_all(b"ping\n")?;
                    let mut b = [0u8; 5];
                    c.stream.read_exact(&mut b)?;
                    if &b != b"ping\n" {
                        return Err(std::io::Error::other("echo differs"));
                    }
                    Ok(())
                });
                match r {
                    Ok(()) => {
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => errors.push(e.to_string()),
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            errors
        })
    };

    let check = |d: &Director, what: &str| {
        // -Lcn lists every stream with its pair again.
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let (missing, out) = unlisted(d, &pairs);
            if missing.is_empty() {
                break;
            }
            assert!(
                Instant::now() < end,
                "{what}: -Lcn lacks {} of {STREAMS} streams {missing:?}:\n{out}",
                missing.len()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // Each stream's pair is still the one its real server has.
        let peers = rs_peers(&topo.rs);
        let gone: Vec<&SocketAddr> = seen.iter().filter(|s| !peers.contains(s)).collect();
        assert!(
            gone.is_empty(),
            "{what}: the real servers no longer have {gone:?}"
        );
    };
    check(&d, "before the restarts");
    let prog = d.program();
    assert!(!prog.is_empty(), "program attached");
    let mut before = counters(&dir, "before the restarts");
    assert_eq!(before.2, 0, "exhausted before the restarts");
    // (signal, upgrade, the running program kept): after the upgrade the
    // next rvsd's program has another tag than the running one again.
    let steps = [
        ("-TERM", false, true),
        ("-KILL", false, true),
        ("-TERM", true, false),
        ("-KILL", false, false),
    ];
    for (n, (sig, upgrade, kept)) in steps.into_iter().enumerate() {
        let what = format!(
            "restart {} ({sig}{})",
            n + 1,
            if upgrade { ", upgrade" } else { "" }
        );
        let ts = Instant::now();
        let running = d.program();
        d.stop(sig);
        assert_eq!(
            d.program(),
            running,
            "{what}: the program stays attached while no rvsd runs"
        );
        // Traffic goes on through the program alone for a while.
        std::thread::sleep(Duration::from_millis(500));
        d.start(upgrade);
        if kept {
            assert_eq!(
                d.program(),
                running,
                "{what}: the same program kept running"
            );
        } else {
            assert_ne!(d.program(), running, "{what}: the program was replaced");
        }
        check(&d, &what);
        let k = n as u32 + 1;
        let now_udp = udp_ask(&usock, vip_sa, k).unwrap_or_else(|e| panic!("{what}: UDP: {e}"));
        assert_eq!(
            now_udp, udp,
            "{what}: the UDP flow keeps its real server and pair"
        );
        let now = counters(&dir, &what);
        let tried = attempts.load(Ordering::Relaxed);
        eprintln!(
            "{test}: {what}: flows listed after {:?}; allocated TCP {} UDP {}, exhausted {}; \
             {tried} connections tried",
            ts.elapsed(),
            now.0,
            now.1,
            now.2
        );
        assert_eq!(now.2, 0, "{what}: exhausted");
        assert!(
            now.0 >= before.0 && now.1 >= before.1,
            "{what}: allocated went back: {before:?} -> {now:?}"
        );
        assert!(
            now.0 <= tried && now.1 == 1,
            "{what}: allocated counts flows again: TCP {} of {tried} connections, \
             UDP {} of 1 flow",
            now.0,
            now.1
        );
        before = now;
    }
    stop.store(true, Ordering::Relaxed);
    let mut bytes = 0;
    for (i, s) in streams.into_iter().enumerate() {
        match s.join().expect("stream thread") {
            Ok(n) => bytes += n,
            Err(e) => panic!("stream {i} ({} via {}): {e}", pairs[i].0, pairs[i].1),
        }
    }
    let errors = newconns.join().expect("new connections thread");
    let made = made.load(Ordering::Relaxed);
    let tried = attempts.load(Ordering::Relaxed);
    assert!(errors.is_empty(), "new connections failed: {errors:?}");
    assert!(made > 0, "no new connection was made");
    // Every connection made got one pair, counted once across the
    // restarts (the counters are published each report: wait for the last
    // connections).
    let ok = STREAMS as u64 + made;
    let end = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let c = counters(&dir, "at the end");
        if c.0 >= ok || Instant::now() > end {
            break c;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        (ok..=tried).contains(&last.0) && last.1 == 1 && last.2 == 0,
        "allocated TCP {} for {ok} connections made ({tried} tried), UDP {} for 1 flow, \
         exhausted {}",
        last.0,
        last.1,
        last.2
    );
    eprintln!(
        "{test}: {STREAMS} streams, {bytes} bytes echoed intact; {made} new connections \
         ({tried} tried in all), none failed; allocated {}; {:?}",
        last.0,
        t0.elapsed()
    );
}

#[test]
fn fullnat_xdp_restart_keeps_every_flow_v4() {
    run("fullnat_xdp_restart_v4", &V4);
}

#[test]
fn fullnat_xdp_restart_keeps_every_flow_v6() {
    run("fullnat_xdp_restart_v6", &V6);
}
