//! The proxy data plane through the real daemon: real TCP/UDP connections
//! on loopback (127.0.0.0/8 gives many client addresses), configured with
//! rvsadm, observed with rvsadm -Lcn / --stats and the backends' own view.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

use crate::harness::{RVSD, Rvsd, free_port, parts};

const T: Duration = Duration::from_secs(10);

/// A TCP backend on 127.0.0.1: on connect it reads an optional PROXY v1
/// line when `expect_proxy` is set, then writes `name|peer|proxyline\n` and
/// echoes whatever it reads until EOF. Stopped (and joined) on drop.
struct Backend {
    addr: SocketAddr,
    _server: rvs_testbed::Server,
}

impl Backend {
    fn start(name: &str, expect_proxy: bool) -> Backend {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        l.set_nonblocking(true).expect("nonblocking");
        let addr = l.local_addr().expect("addr");
        let name = name.to_owned();
        Backend {
            addr,
            _server: rvs_testbed::Server::tcp(l, move |c, peer| {
                serve(c, peer, &name, expect_proxy)
            }),
        }
    }
}

fn serve(c: TcpStream, peer: SocketAddr, name: &str, expect_proxy: bool) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(T));
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    let mut w = c;
    let mut proxy = String::new();
    if expect_proxy && r.read_line(&mut proxy).is_err() {
        return;
    }
    let _ = writeln!(w, "{name}|{peer}|{}", proxy.trim_end());
    let mut buf = [0u8; 16384];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if w.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Connect to `vip` from `src` and read the backend's greeting line.
/// A connection from `src` to `vip`, with the read timeout `T`.
fn dial(src: Ipv4Addr, vip: SocketAddr) -> TcpStream {
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.bind(&SocketAddr::new(IpAddr::V4(src), 0).into())
        .expect("bind client");
    sock.connect_timeout(&vip.into(), T)
        .expect("connect to the VIP");
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(T)).expect("timeout");
    s
}

/// A connection from `src` that sends `data` first: the backend's greeting
/// line and the first line it echoes back.
fn send_from(src: Ipv4Addr, vip: SocketAddr, data: &[u8]) -> (String, String) {
    let mut s = dial(src, vip);
    s.write_all(data).expect("send");
    let mut r = BufReader::new(s);
    let (mut greeting, mut echo) = (String::new(), String::new());
    r.read_line(&mut greeting).expect("greeting");
    r.read_line(&mut echo).expect("echo");
    (greeting, echo)
}

fn connect_from(src: Ipv4Addr, vip: SocketAddr) -> (TcpStream, String) {
    let s = dial(src, vip);
    let mut line = String::new();
    BufReader::new(s.try_clone().expect("clone"))
        .read_line(&mut line)
        .expect("greeting");
    (s, line.trim_end().to_owned())
}

fn who(greeting: &str) -> String {
    greeting.split('|').next().unwrap_or("").to_owned()
}

/// A proxy daemon with one TCP service on a fresh port over `n` backends.
fn setup(tag: &str, sched: &str, weights: &[u32], extra: &str) -> (Rvsd, SocketAddr, Vec<Backend>) {
    let d = Rvsd::start_proxy(tag, &[]);
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    d.ok(&format!("-A -t {vip} -s {sched} {extra}"));
    let backends: Vec<Backend> = (0..weights.len())
        .map(|i| Backend::start(&format!("b{i}"), false))
        .collect();
    for (b, w) in backends.iter().zip(weights) {
        d.ok(&format!("-a -t {vip} -r {} -m -w {w}", b.addr));
    }
    (d, vip, backends)
}

#[test]
fn demo_once_spreads_requests() {
    let out = Command::new(RVSD)
        .args(["demo", "--once", "--port", "0"])
        .output()
        .expect("rvsd demo");
    let (stdout, stderr, code) = parts(&out);
    assert_eq!(code, 0, "{stderr}");
    for b in ["backend-1: 4", "backend-2: 4", "backend-3: 4"] {
        assert!(stdout.contains(b), "{stdout}");
    }
    assert!(
        stdout.contains("Conns   InPkts  OutPkts  InBytes OutBytes"),
        "{stdout}"
    );
}

#[test]
fn live_connection_shows_in_lcn_and_stats() {
    let (d, vip, _b) = setup("px-lcn", "rr", &[1, 1], "");
    let (mut s, greeting) = connect_from(Ipv4Addr::new(127, 0, 0, 1), vip);
    s.write_all(b"hello\n").expect("send");
    let mut echo = [0u8; 6];
    s.read_exact(&mut echo).expect("echo");
    assert_eq!(&echo, b"hello\n");
    let cport = s.local_addr().expect("local").port();
    d.eventually("ESTABLISHED in -Lcn", || {
        d.ok("-Lcn").lines().any(|l| {
            l.starts_with("TCP ")
                && l.contains("ESTABLISHED")
                && l.contains(&format!("127.0.0.1:{cport}"))
        })
    });
    let ln = d.ok("-Ln");
    assert!(
        ln.lines()
            .any(|l| l.contains("Masq") && l.split_whitespace().nth(4) == Some("1")),
        "ActiveConn 1:\n{ln}"
    );
    drop(s);
    // Closed, it lingers in a closing state as the kernel's entry does
    // (listed, inactive) until that state's timer ends.
    let client = format!("127.0.0.1:{cport}");
    d.eventually("the entry in a closing state", || {
        let lcn = d.ok("-Lcn");
        let mine: Vec<&str> = lcn.lines().filter(|l| l.contains(&client)).collect();
        !mine.is_empty() && mine.iter().all(|l| !l.contains("ESTABLISHED"))
    });
    d.eventually("ActiveConn 0, InActConn 1", || {
        d.ok("-Ln").lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            l.contains("Masq") && f.get(4) == Some(&"0") && f.get(5) == Some(&"1")
        })
    });
    d.eventually("stats", || {
        let st = d.ok("-Ln --stats");
        let svc = st
            .lines()
            .find(|l| l.starts_with("TCP "))
            .unwrap_or("")
            .to_owned();
        let f: Vec<&str> = svc.split_whitespace().collect();
        f.get(2) == Some(&"1")
            && f.get(5)
                .and_then(|x| x.parse::<u64>().ok())
                .is_some_and(|b| b >= 6)
    });
    assert!(!greeting.is_empty());
}

#[test]
fn sh_spreads_254_clients_of_one_slash24_and_keeps_affinity() {
    let (_d, vip, _b) = setup("px-sh", "sh", &[1, 1, 1], "");
    let mut per: HashMap<String, u32> = HashMap::new();
    let mut first = Vec::new();
    for h in 1..=254u8 {
        let (s, g) = connect_from(Ipv4Addr::new(127, 0, 1, h), vip);
        *per.entry(who(&g)).or_default() += 1;
        first.push(who(&g));
        drop(s);
    }
    assert_eq!(per.len(), 3, "all real servers used: {per:?}");
    assert!(
        per.values().all(|&n| n >= 40),
        "spread across the /24: {per:?}"
    );
    for h in [1u8, 77, 254] {
        let (_s, g) = connect_from(Ipv4Addr::new(127, 0, 1, h), vip);
        assert_eq!(
            who(&g),
            first[usize::from(h) - 1],
            "client 127.0.1.{h} keeps its server"
        );
    }
}

#[test]
fn persistence_with_and_without_netmask() {
    let (_d, vip, _b) = setup("px-persist", "rr", &[1, 1, 1], "-p 60");
    let a: Vec<String> = (0..5)
        .map(|_| who(&connect_from(Ipv4Addr::new(127, 0, 2, 1), vip).1))
        .collect();
    assert!(
        a.iter().all(|x| *x == a[0]),
        "same client, same server: {a:?}"
    );
    let others: Vec<String> = (2..=4u8)
        .map(|h| who(&connect_from(Ipv4Addr::new(127, 0, 2, h), vip).1))
        .collect();
    assert!(
        others.iter().any(|x| *x != a[0]),
        "other clients are scheduled: {others:?}"
    );

    let (_d, vip, _b) = setup("px-persist-m", "rr", &[1, 1, 1], "-p 60 -M 255.255.255.0");
    let all: Vec<String> = (1..=20u8)
        .map(|h| who(&connect_from(Ipv4Addr::new(127, 0, 3, h), vip).1))
        .collect();
    assert!(
        all.iter().all(|x| *x == all[0]),
        "one /24, one server: {all:?}"
    );
}

#[test]
fn every_scheduler_through_real_connections() {
    for sched in [
        "rr", "wrr", "lc", "wlc", "sed", "nq", "fo", "ovf", "twos", "lblc", "lblcr", "sh", "dh",
        "mh",
    ] {
        let (_d, vip, _b) = setup(&format!("px-{sched}"), sched, &[1, 2, 3], "");
        // Connections held open at once from distinct client addresses: 30,
        // except ovf, which by design serves a server only while its active
        // connections do not exceed its weight (1+2+3 plus one each = 9).
        let n_conns = if sched == "ovf" { 9 } else { 30 };
        let held: Vec<(TcpStream, String)> = (1..=n_conns)
            .map(|h| connect_from(Ipv4Addr::new(127, 0, 4, h), vip))
            .collect();
        let mut per: HashMap<String, u32> = HashMap::new();
        for (_, g) in &held {
            *per.entry(who(g)).or_default() += 1;
        }
        let n = |b: &str| per.get(b).copied().unwrap_or(0);
        if sched == "ovf" {
            // Every server is past its weight now: the next one is refused.
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .expect("socket");
            sock.bind(&SocketAddr::from(([127, 0, 4, 99], 0)).into())
                .expect("bind");
            // The refusal (a reset) may already reach connect().
            if sock.connect_timeout(&vip.into(), T).is_ok() {
                let mut s: TcpStream = sock.into();
                s.set_read_timeout(Some(T)).expect("timeout");
                let mut buf = [0u8; 1];
                assert!(
                    matches!(s.read(&mut buf), Ok(0) | Err(_)),
                    "ovf refuses when all servers overflow"
                );
            }
        }
        match sched {
            "rr" | "lc" => assert_eq!(
                (n("b0"), n("b1"), n("b2")),
                (10, 10, 10),
                "{sched}: {per:?}"
            ),
            "wrr" | "wlc" => {
                assert_eq!((n("b0"), n("b1"), n("b2")), (5, 10, 15), "{sched}: {per:?}")
            }
            // Highest weight first; ovf spills once active > weight.
            "fo" => assert_eq!(n("b2"), 30, "{sched}: {per:?}"),
            "ovf" => assert_eq!((n("b0"), n("b1"), n("b2")), (2, 3, 4), "{sched}: {per:?}"),
            // dh hashes the destination: one VIP, one server.
            "dh" => assert_eq!(per.len(), 1, "{sched}: {per:?}"),
            // lblc/lblcr keep the destination on its server until it is
            // overloaded while another is under half load: mostly one server.
            "lblc" | "lblcr" => {
                assert!(
                    per.values().any(|&x| x >= 15) && per.values().sum::<u32>() == 30,
                    "{sched}: {per:?}"
                )
            }
            _ => assert!(per.len() >= 2, "{sched} spreads: {per:?}"),
        }
    }
}

#[test]
fn proxy_protocol_out_and_from_trusted_upstreams() {
    let d = Rvsd::start_proxy("px-pp", &["--proxy-protocol-from", "127.0.0.2/32"]);
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    d.ok(&format!("-A -t {vip} -s rr --proxy-protocol v1"));
    let b = Backend::start("pp", true);
    d.ok(&format!("-a -t {vip} -r {} -m", b.addr));
    // A direct client: the header names it.
    let (_s, g) = connect_from(Ipv4Addr::new(127, 0, 0, 1), vip);
    assert!(g.contains("|PROXY TCP4 127.0.0.1 127.0.0.1 "), "{g}");
    assert!(g.ends_with(&format!(" {}", vip.port())), "{g}");
    // A trusted upstream's header is honoured: the real client goes on.
    let (line, echo) = send_from(
        Ipv4Addr::new(127, 0, 0, 2),
        vip,
        b"PROXY TCP4 198.51.100.7 127.0.0.1 4444 80\r\nping\n",
    );
    assert!(
        line.contains("|PROXY TCP4 198.51.100.7 127.0.0.1 4444 "),
        "{line}"
    );
    assert_eq!(echo, "ping\n", "the header was consumed, the data relayed");
    // An untrusted peer's "header" is just data; its own address is sent.
    let (line, echo) = send_from(
        Ipv4Addr::new(127, 0, 0, 3),
        vip,
        b"PROXY TCP4 198.51.100.7 127.0.0.1 4444 80\r\n",
    );
    assert!(line.contains("|PROXY TCP4 127.0.0.3 127.0.0.1 "), "{line}");
    assert_eq!(echo, "PROXY TCP4 198.51.100.7 127.0.0.1 4444 80\r\n");
}

#[test]
fn drain_with_weight_zero_and_delete_keep_the_live_connection() {
    let (d, vip, b) = setup("px-drain", "rr", &[1, 1], "");
    let (mut live, g) = connect_from(Ipv4Addr::new(127, 0, 5, 1), vip);
    let victim = b
        .iter()
        .find(|x| who(&g) == format!("b{}", b.iter().position(|y| y.addr == x.addr).unwrap_or(9)))
        .map(|x| x.addr);
    let victim = victim.expect("the live connection's backend");
    d.ok(&format!("-e -t {vip} -r {victim} -m -w 0"));
    for h in 2..8u8 {
        assert_ne!(
            who(&connect_from(Ipv4Addr::new(127, 0, 5, h), vip).1),
            who(&g),
            "quiesced server gets no new connection"
        );
    }
    d.ok(&format!("-d -t {vip} -r {victim}"));
    live.write_all(b"still here\n").expect("send after delete");
    let mut buf = [0u8; 11];
    live.read_exact(&mut buf).expect("echo after delete");
    assert_eq!(&buf, b"still here\n");
}

#[test]
fn udp_flow_through_the_proxy() {
    let d = Rvsd::start_proxy("px-udp", &[]);
    let backend = UdpSocket::bind("127.0.0.1:0").expect("udp backend");
    let baddr = backend.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        for _ in 0..4 {
            if let Ok((n, peer)) = backend.recv_from(&mut buf) {
                let _ = backend.send_to(&buf[..n], peer);
            }
        }
    });
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("port");
    let vip = SocketAddr::from(([127, 0, 0, 1], port));
    d.ok(&format!("-A -u {vip} -s rr"));
    d.ok(&format!("-a -u {vip} -r {baddr} -m"));
    let c = UdpSocket::bind("127.0.0.1:0").expect("client");
    c.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut got = None;
    for _ in 0..5 {
        c.send_to(b"ping", vip).expect("send");
        let mut buf = [0u8; 64];
        if let Ok((n, from)) = c.recv_from(&mut buf) {
            got = Some((buf[..n].to_vec(), from));
            break;
        }
    }
    let (data, from) = got.expect("a reply through the proxy");
    assert_eq!(
        (data.as_slice(), from),
        (&b"ping"[..], vip),
        "the reply comes from the VIP"
    );
    assert!(
        d.ok("-Lcn")
            .lines()
            .any(|l| l.starts_with("UDP ") && l.contains(&vip.to_string()))
    );
}

#[test]
fn fd_exhaustion_refuses_then_recovers() {
    // 128 descriptors: the proxy keeps 64 in reserve for itself, so about
    // ten relayed connections (6 descriptors each with splice) fit.
    let port = free_port();
    let d = Rvsd::start_with(
        crate::harness::TempDir::new("px-fd"),
        "proxy",
        Some(128),
        &["--http", &format!("127.0.0.1:{port}")],
    );
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    d.ok(&format!("-A -t {vip} -s rr"));
    let b = Backend::start("fd", false);
    d.ok(&format!("-a -t {vip} -r {} -m", b.addr));
    let mut held = Vec::new();
    let mut refused = 0;
    for h in 1..=40u8 {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        if sock
            .bind(&SocketAddr::from(([127, 0, 6, h], 0)).into())
            .is_err()
            || sock.connect_timeout(&vip.into(), T).is_err()
        {
            refused += 1;
            continue;
        }
        let s: TcpStream = sock.into();
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut line = String::new();
        match BufReader::new(s.try_clone().expect("clone")).read_line(&mut line) {
            Ok(n) if n > 0 => held.push(s),
            _ => refused += 1,
        }
    }
    assert!(!held.is_empty(), "some connections are served");
    assert!(refused > 0, "the budget refuses the rest");
    drop(held);
    // Still accepting once descriptors are free again.
    d.eventually("recovery", || {
        std::panic::catch_unwind(|| connect_from(Ipv4Addr::new(127, 0, 6, 250), vip)).is_ok()
    });
    let body = crate::harness::http_get(&format!("127.0.0.1:{port}"), "/metrics");
    let refused_metric = body
        .lines()
        .filter(|l| {
            l.starts_with("rvs_proxy_refused_fd_budget_total ")
                || l.starts_with("rvs_proxy_accept_errors_total ")
        })
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum::<u64>();
    assert!(
        refused_metric > 0,
        "refusals are visible in metrics:\n{body}"
    );
}
