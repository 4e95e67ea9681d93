//! FULLNAT end to end through a live `rvsd --dataplane xdp --interface
//! eth0,eth1`, configured with rvsadm (`--fullnat`, `--add-laddr -z`):
//!
//! ```text
//!  client ── br0 (subnet A) ── eth0 [director, VIP] eth1 ── br1 (subnet B) ── rs0, rs1
//! ```
//!
//! The real servers have no route to subnet A at all (only their connected
//! subnet B), so a reply can reach the client only if the director
//! rewrote the client's packets to come from one of its local addresses
//! (on eth1) and rewrites the replies back: a control check in each test
//! shows the real server cannot reach the client directly. The XDP
//! program is attached on both director interfaces: client packets arrive
//! on eth0, the real servers' replies on eth1.
//!
//! Shown for IPv4 and IPv6: byte-checked TCP echo over several connections,
//! UDP request/reply, the real server sees a local address (never the
//! client) as the source, and `rvsadm -Lcn` lists each connection's local
//! address:port — the one the real server saw.
//!
//! TOA (`fullnat_xdp_toa_nginx_v4/_v6`, after the same checks): nginx on a
//! real server, in a cgroup of the test's: without `rvsd realserver --toa`
//! its access log's `$remote_addr:$remote_port` is a local address of the
//! pool; with it, the true client's address and port, which only the TOA
//! the director inserted into the handshake can have carried (the real
//! server has no path to the client). The same through accept(2) and
//! getpeername(2) of the toa tests' child program (`toa::toa_child`).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{Adopted, Launch, Rvsadm, TempDir, scenarios};
use crate::netns::{Bed, Host};
use rvs_testbed::Server;

const T: Duration = Duration::from_secs(3);
const PORT: u16 = 80;

/// The addresses of one family's run.
pub(crate) struct Plan {
    pub(crate) client: &'static str,
    dir_a: &'static str,
    pub(crate) vip: &'static str,
    dir_b: &'static str,
    pub(crate) laddrs: [&'static str; 2],
    pub(crate) rs: [&'static str; 2],
    /// Prefix lengths of the two subnets and of the VIP / local addresses.
    len: u8,
    host_len: u8,
    pub(crate) v6: bool,
}

pub(crate) const V4: Plan = Plan {
    client: "10.79.0.10",
    dir_a: "10.79.0.2",
    vip: "10.79.0.100",
    dir_b: "10.80.0.1",
    laddrs: ["10.80.0.200", "10.80.0.201"],
    rs: ["10.80.0.11", "10.80.0.12"],
    len: 24,
    host_len: 32,
    v6: false,
};

pub(crate) const V6: Plan = Plan {
    client: "fd79:a::10",
    dir_a: "fd79:a::2",
    vip: "fd79:a::100",
    dir_b: "fd79:b::1",
    laddrs: ["fd79:b::200", "fd79:b::201"],
    rs: ["fd79:b::11", "fd79:b::12"],
    len: 64,
    host_len: 128,
    v6: true,
};

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// A service/real-server address as rvsadm takes it (`[v6]:port`).
pub(crate) fn sa(s: &str, port: u16) -> String {
    SocketAddr::new(ip(s), port).to_string()
}

/// Add `addr/len` on `dev` in `h` (IPv6 without DAD, usable at once).
pub(crate) fn addr_add(h: &Host, addr: &str, len: u8, dev: &str) {
    let cidr = format!("{addr}/{len}");
    let mut a = vec!["ip", "addr", "add", &cidr, "dev", dev];
    if addr.contains(':') {
        a.push("nodad");
    }
    h.exec(&a);
}

/// rvsd in the director's namespace, killed by the bed's guard.
pub(crate) type Daemon = Adopted;

/// rvsd (XDP on eth0 and eth1) in `dir`'s namespace.
fn start(bed: &mut Bed, dir: &Host) -> Daemon {
    start_plane(
        bed,
        dir,
        &["--dataplane", "xdp", "--interface", "eth0,eth1"],
        &[],
    )
}

/// An rvsd in `dir`'s namespace with data plane arguments `plane` and
/// more arguments `extra`.
pub(crate) fn start_plane(bed: &mut Bed, dir: &Host, plane: &[&str], extra: &[&str]) -> Daemon {
    Launch::new("fullnat")
        .netns(&dir.ns)
        .args(plane)
        .args(extra)
        .adopt(bed)
}

/// Servers in a real server's namespace that tell each peer what source
/// address they saw: TCP sends `NAME PEER\n` then echoes until EOF; UDP
/// answers each datagram with `NAME PEER PAYLOAD`. Stopped on drop.
pub(crate) struct PeerServers {
    _servers: [Server; 2],
}

impl PeerServers {
    pub(crate) fn start(h: &Host, addr: IpAddr, name: &str) -> PeerServers {
        let at = SocketAddr::new(addr, PORT);
        let udp = h.run(move || UdpSocket::bind(at).expect("udp bind"));
        let n = name.to_owned();
        PeerServers {
            _servers: [
                peer_tcp(h, at, name),
                Server::udp(udp, move |data, peer| {
                    Some([format!("{n} {peer} ").as_bytes(), data].concat())
                }),
            ],
        }
    }
}

/// A TCP server on `at` in `h`'s namespace that sends each peer `NAME
/// PEER\n`, then echoes until EOF.
pub(crate) fn peer_tcp(h: &Host, at: SocketAddr, name: &str) -> Server {
    let tcp = h.run(move || TcpListener::bind(at).expect("tcp bind"));
    let name = name.to_owned();
    Server::tcp(tcp, move |s, peer| {
        rvs_testbed::echo(s, &format!("{name} {peer}\n"), Duration::from_secs(10))
    })
}

/// A TCP connection from the client to the VIP: the stream, and the
/// server's name and the source address it saw.
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) server: String,
    pub(crate) seen: SocketAddr,
}

pub(crate) fn connect(client: &Host, vip: SocketAddr, timeout: Duration) -> std::io::Result<Conn> {
    let mut stream = client.run(move || TcpStream::connect_timeout(&vip, timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match stream.read(&mut b)? {
            0 => break,
            _ if b[0] == b'\n' => break,
            _ => line.push(b[0]),
        }
        if line.len() > 200 {
            break;
        }
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let mut w = line.split_whitespace();
    let (Some(server), Some(seen)) = (w.next(), w.next().and_then(|s| s.parse().ok())) else {
        return Err(std::io::Error::other(format!("bad greeting {line:?}")));
    };
    Ok(Conn {
        stream,
        server: server.to_owned(),
        seen,
    })
}

/// Send `len` bytes of a pattern and read exactly them back.
pub(crate) fn echo(c: &mut Conn, seed: u8, len: usize) {
    let msg: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    c.stream.write_all(&msg).expect("send");
    let mut got = vec![0u8; len];
    c.stream.read_exact(&mut got).expect("echo back");
    assert!(got == msg, "echo of {len} bytes differs");
}

/// The real server cannot reach the client by itself: its kernel has no
/// route to it, and a TCP connect from its namespace fails.
fn assert_unreachable(rs: &Host, client: IpAddr) {
    let c = client.to_string();
    let o = Command::new("ip")
        .args(["netns", "exec", &rs.ns, "ip", "route", "get", &c])
        .output()
        .expect("ip route get");
    assert!(
        !o.status.success(),
        "{} has a route to the client: {}",
        rs.ns,
        String::from_utf8_lossy(&o.stdout)
    );
    let to = SocketAddr::new(client, PORT);
    let r = rs.run(move || TcpStream::connect_timeout(&to, Duration::from_secs(1)));
    assert!(r.is_err(), "{} connects to the client directly", rs.ns);
}

/// What a test runs after the FULLNAT checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    Nothing,
    /// nginx behind the director, with and without the TOA reader.
    Nginx,
    /// ICMP errors about FULLNAT flows, both ways.
    Icmp,
}

/// The FULLNAT bed of one family's run (see the module doc), the peer
/// servers running on the real servers, the director's neighbours
/// resolved, no rvsd yet. Fields drop in order: servers, then the bed
/// (its namespaces).
/// The plan's TCP and UDP services (rr) with their local address pool and
/// FULLNAT real servers, through rvsadm; the pool's addresses.
pub(crate) fn services(d: &impl Rvsadm, p: &Plan) -> BTreeSet<IpAddr> {
    let vip = sa(p.vip, PORT);
    for proto in ["-t", "-u"] {
        d.ok(&format!("-A {proto} {vip} -s rr"));
        // The pool first: a FULLNAT real server needs one.
        for l in p.laddrs {
            d.ok(&format!("--add-laddr {proto} {vip} -z {l}"));
        }
        for a in p.rs {
            d.ok(&format!("-a {proto} {vip} -r {} --fullnat", sa(a, PORT)));
        }
    }
    p.laddrs.iter().map(|a| ip(a)).collect()
}

/// The first TCP connection through FULLNAT from `client` to `vip`
/// (bounded: 15 s of attempts, `before` called before each).
pub(crate) fn first_connection(client: &Host, vip: SocketAddr, mut before: impl FnMut()) -> Conn {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        before();
        match connect(client, vip, Duration::from_millis(1500)) {
            Ok(c) => return c,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no TCP connection through FULLNAT: {e}"
            ),
        }
    }
}

pub(crate) struct Topo {
    pub(crate) servers: Vec<PeerServers>,
    pub(crate) client: Host,
    pub(crate) dir: Host,
    pub(crate) rs: Vec<Host>,
    pub(crate) bed: Bed,
}

/// Build [`Topo`] for `p`, or None (printed why) when the bed cannot run.
pub(crate) fn topology(test: &str, p: &Plan) -> Option<Topo> {
    let mut bed = Bed::new(test)?;
    // Subnet A: the client and the director's eth0 on br0; subnet B: the
    // director's eth1 and the real servers on br1. IPv4 hosts get their
    // address from the bed; IPv6 hosts an IPv4 one of the same subnet
    // (unused) plus the IPv6 address.
    let v4 = |s: &str, d: &str| if p.v6 { d.to_owned() } else { s.to_owned() };
    let client = bed.host("c", &format!("{}/24", v4(p.client, "10.79.0.10")));
    let dir = bed.host("dir", &format!("{}/24", v4(p.dir_a, "10.79.0.2")));
    bed.bridge("br1");
    let dir_ns = dir.ns.clone();
    let dir_b = bed.link(
        &dir_ns,
        "br1",
        "eth1",
        &format!("{}/24", v4(p.dir_b, "10.80.0.1")),
    );
    if p.v6 {
        addr_add(&client, p.client, p.len, "eth0");
        addr_add(&dir, p.dir_a, p.len, "eth0");
        addr_add(&dir, p.dir_b, p.len, "eth1");
    }
    addr_add(&dir, p.vip, p.host_len, "eth0");
    for l in p.laddrs {
        addr_add(&dir, l, p.host_len, "eth1");
    }
    // The client reaches the VIP on its own subnet; nothing else.
    dir.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
    dir.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    // Frames the director redirects out of eth0/eth1 reach the bridge only
    // when the bridge ports have an XDP program (TESTBED.md).
    bed.xdp_pass_on_port(&dir);
    bed.xdp_pass_on_port(&dir_b);
    let mut rs = Vec::new();
    let mut servers = Vec::new();
    for (i, a) in p.rs.iter().enumerate() {
        let h = bed.host_on(
            &format!("r{i}"),
            "br1",
            &format!("{}/24", v4(a, &format!("10.80.0.{}", 11 + i))),
        );
        if p.v6 {
            addr_add(&h, a, p.len, "eth0");
        }
        servers.push(PeerServers::start(&h, ip(a), &format!("rs{i}")));
        rs.push(h);
    }
    let client_ip = ip(p.client);
    for h in &rs {
        let o = h.exec(&["ip", "route", "show", "default"]);
        assert!(o.stdout.is_empty(), "{}: has a default route", h.ns);
        if p.v6 {
            let o = h.exec(&["ip", "-6", "route", "show", "default"]);
            assert!(o.stdout.is_empty(), "{}: has a default route", h.ns);
        }
        assert_unreachable(h, client_ip);
    }
    // Resolve the director's neighbours before traffic (the program
    // passes a packet whose next hop is unresolved to the kernel).
    // A TCP connect from the director (refused by the client, accepted
    // by the real servers) does it; its outcome does not matter.
    for a in std::iter::once(p.client).chain(p.rs) {
        let to = SocketAddr::new(ip(a), PORT);
        let _ = dir.run(move || TcpStream::connect_timeout(&to, T));
    }

    Some(Topo {
        servers,
        client,
        dir,
        rs,
        bed,
    })
}

fn fullnat(test: &str, p: &Plan, then: Then) {
    let Some(Topo {
        servers,
        client,
        dir,
        rs,
        mut bed,
    }) = topology(test, p)
    else {
        return;
    };
    let client_ip = ip(p.client);

    let d = start(&mut bed, &dir);
    let laddrs = services(&d, p);
    let vip_sa = SocketAddr::new(ip(p.vip), PORT);

    // TCP: wait (bounded) for the first connection, then several more
    // held open together, each echoing a byte-checked pattern.
    let first = first_connection(&client, vip_sa, || {});
    let mut conns = vec![first];
    for _ in 0..5 {
        conns.push(connect(&client, vip_sa, T).expect("TCP connection through FULLNAT"));
    }
    let mut names = BTreeSet::new();
    for (i, c) in conns.iter_mut().enumerate() {
        assert!(
            laddrs.contains(&c.seen.ip()),
            "{} saw source {} (client {}), not a local address",
            c.server,
            c.seen,
            c.stream.local_addr().expect("local")
        );
        assert_ne!(c.seen.ip(), client_ip);
        echo(c, i as u8, 1 + i * 3000);
        names.insert(c.server.clone());
    }
    assert_eq!(names.len(), 2, "rr over both real servers: {names:?}");
    let seen: BTreeSet<SocketAddr> = conns.iter().map(|c| c.seen).collect();
    assert_eq!(seen.len(), conns.len(), "local address:port pairs differ");

    // -Lcn: every open connection listed with its client address:port and
    // the local address:port its real server saw (mirrored by the report,
    // about every second).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = d.ok("-L -c -n");
        let missing: Vec<String> = conns
            .iter()
            .filter_map(|c| {
                let me = c.stream.local_addr().expect("local").to_string();
                let local = c.seen.to_string();
                let listed = out.lines().any(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.contains(&me.as_str()) && w.contains(&local.as_str())
                });
                (!listed).then(|| format!("{me} via {local}"))
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "-Lcn lacks {missing:?}:\n{out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The connections still carry data after the listing.
    for (i, c) in conns.iter_mut().enumerate() {
        echo(c, 100 + i as u8, 777);
    }
    drop(conns);

    // UDP: request/reply from a few client sockets (each its own flow).
    let mut udp_names = BTreeSet::new();
    for k in 0..4u8 {
        let sock = client.run(move || {
            let any = if client_ip.is_ipv6() {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            };
            UdpSocket::bind(any).expect("udp bind")
        });
        sock.set_read_timeout(Some(Duration::from_millis(700)))
            .expect("timeout");
        let payload = format!("datagram {k} {}", "x".repeat(100 * k as usize));
        let mut buf = [0u8; 2048];
        let mut reply = None;
        for _ in 0..10 {
            sock.send_to(payload.as_bytes(), vip_sa).expect("send");
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                assert_eq!(from, vip_sa, "the reply comes from the VIP");
                reply = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
                break;
            }
        }
        let reply = reply.unwrap_or_else(|| panic!("no UDP reply through FULLNAT ({k})"));
        let mut w = reply.splitn(3, ' ');
        let (name, peer, rest) = (
            w.next().unwrap_or(""),
            w.next().unwrap_or(""),
            w.next().unwrap_or(""),
        );
        let peer: SocketAddr = peer.parse().expect("peer in the reply");
        assert!(
            laddrs.contains(&peer.ip()),
            "{name} saw UDP source {peer}, not a local address"
        );
        assert_eq!(rest, payload, "UDP payload round trip");
        udp_names.insert(name.to_owned());
    }
    assert_eq!(udp_names.len(), 2, "rr over both: {udp_names:?}");

    // Still no direct path: only FULLNAT carried the traffic.
    for h in &rs {
        assert_unreachable(h, client_ip);
    }
    drop(servers);
    match then {
        Then::Nothing => {}
        Then::Nginx => toa_nginx(test, &d, &client, &rs[0], p, &laddrs),
        Then::Icmp => icmp_errors(&d, &client, &rs[0], p),
    }
}

/// Whether `e` is ECONNREFUSED (the pending error a port unreachable left
/// on a connected UDP socket).
fn refused(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ConnectionRefused
}

/// Sends `data` on the connected `sock` (which has a read timeout) until
/// the ICMP port unreachable that answers it shows as ECONNREFUSED, on the
/// send or the receive (20 tries); panics on a datagram back, or when
/// none comes. `who` names the socket's end.
fn port_unreachable(sock: &UdpSocket, data: &[u8], who: &str) {
    let mut buf = [0u8; 512];
    for _ in 0..20 {
        let e = match sock.send(data) {
            Err(e) => e,
            Ok(_) => match sock.recv(&mut buf) {
                Ok(n) => panic!("a datagram to {who} from a port with no listener: {n} bytes"),
                Err(e) if refused(&e) => e,
                Err(_) => continue,
            },
        };
        assert!(refused(&e), "{who}'s socket got {e}, not ECONNREFUSED");
        return;
    }
    panic!("no ICMP port unreachable reached {who}");
}

/// ICMP errors about FULLNAT flows, end to end (the director translates
/// them in XDP; the real servers have no route to the client, and the
/// director's kernel would drop both errors: they are addressed to its
/// local address and its VIP, where no socket has the quoted ports):
/// - a client's connected UDP socket sends to a FULLNAT service whose real
///   server port has no listener: the real server's port unreachable (to
///   the local address, quoting laddr:lport -> RS:rport) reaches the client
///   as one from the VIP about its own datagram: ECONNREFUSED;
/// - a real server's connected UDP socket answers a client whose socket has
///   closed: the client's port unreachable (to the VIP, quoting VIP:vport
///   -> client:cport) reaches the real server as one from the local address
///   about its own datagram: ECONNREFUSED.
///
/// Each waits a bounded number of tries (the errors are rate-limited by the
/// kernels that send them).
fn icmp_errors(d: &Daemon, client: &Host, rs: &Host, p: &Plan) {
    let (closed, open) = (9999u16, 9998u16);
    for port in [closed, open] {
        let vip = sa(p.vip, port);
        d.ok(&format!("-A -u {vip} -s rr"));
        for l in p.laddrs {
            d.ok(&format!("--add-laddr -u {vip} -z {l}"));
        }
        d.ok(&format!("-a -u {vip} -r {} --fullnat", sa(p.rs[0], port)));
    }
    let any: SocketAddr = if p.v6 {
        "[::]:0".parse().expect("any")
    } else {
        "0.0.0.0:0".parse().expect("any")
    };

    // A connected UDP socket of the client's, with a read timeout.
    let dial = |to: SocketAddr| {
        client.run(move || {
            let s = UdpSocket::bind(any).expect("udp bind");
            s.connect(to).expect("udp connect");
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .expect("timeout");
            s
        })
    };

    // The real server's port unreachable, to the client.
    let sock = dial(SocketAddr::new(ip(p.vip), closed));
    port_unreachable(&sock, b"anyone there?", "the client");

    // The client's port unreachable, to the real server.
    let at = SocketAddr::new(ip(p.rs[0]), open);
    let server = rs.run(move || UdpSocket::bind(at).expect("udp bind on the real server"));
    server
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let csock = dial(SocketAddr::new(ip(p.vip), open));
    let mut buf = [0u8; 512];
    let mut peer = None;
    for _ in 0..20 {
        csock.send(b"hello").expect("send");
        if let Ok((_, from)) = server.recv_from(&mut buf) {
            peer = Some(from);
            break;
        }
    }
    let peer = peer.expect("the client's datagram never reached the real server");
    let laddrs: Vec<IpAddr> = p.laddrs.iter().map(|a| ip(a)).collect();
    assert!(
        laddrs.contains(&peer.ip()),
        "from {peer}, not a local address"
    );
    server
        .connect(peer)
        .expect("connect to the client's local address");
    // The server's reply reaches the client's socket (the path works) ...
    server.send(b"first").expect("send");
    let n = csock.recv(&mut buf).expect("the real server's reply");
    assert_eq!(&buf[..n], b"first");
    // ... then the client's socket closes: its port is unreachable.
    drop(csock);
    port_unreachable(&server, b"late", "the real server");
}

/// nginx on `rs` (in its namespace and in a cgroup of this test's), port
/// 8080, logging `$remote_addr:$remote_port`; killed on drop.
struct RsNginx {
    _child: crate::toa::Reap,
    log: PathBuf,
}

impl RsNginx {
    fn start(cg: &crate::toa::Cgroup, rs: &Host, at: SocketAddr, dir: &TempDir) -> RsNginx {
        let (conf, log) = crate::toa::nginx_conf(dir, &at.to_string());
        let conf = conf.to_str().expect("UTF-8").to_owned();
        let prefix = format!("{}/", dir.path().display());
        let child = crate::toa::Reap(cg.spawn(
            "ip",
            &[
                "netns", "exec", &rs.ns, "nginx", "-e", "stderr", "-p", &prefix, "-c", &conf,
            ],
            &[],
        ));
        let up = rvs_testbed::wait_for(Duration::from_secs(10), || {
            rs.run(move || TcpStream::connect_timeout(&at, Duration::from_millis(300)))
                .is_ok()
        });
        assert!(up, "nginx did not start listening on {at}");
        RsNginx { _child: child, log }
    }

    /// The access log's last line once there are more than `before`.
    fn line_after(&self, before: usize) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let l: Vec<&str> = text.lines().collect();
            if l.len() > before {
                return l[l.len() - 1].to_owned();
            }
            assert!(Instant::now() < end, "nginx logged nothing");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn lines(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .count()
    }
}

/// One HTTP/1.0 GET from the client to `vip`: the client's own address.
fn http_get(client: &Host, vip: SocketAddr) -> SocketAddr {
    let mut s = client
        .run(move || TcpStream::connect_timeout(&vip, T))
        .expect("HTTP connection through FULLNAT");
    s.set_read_timeout(Some(T)).expect("timeout");
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("response");
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    s.local_addr().expect("local")
}

/// One connection from the client to `vip` accepted by the toa tests'
/// child (`toa::toa_child`, run in `rs`'s namespace and in `cg`) listening
/// on `at`: (accept's peer, getpeername's peer, the client's own address).
fn peer_via_child(
    cg: &crate::toa::Cgroup,
    rs: &Host,
    client: &Host,
    at: SocketAddr,
    vip: SocketAddr,
) -> (SocketAddr, SocketAddr, SocketAddr) {
    let mut srv = crate::toa::Reap(cg.child_in(Some(&rs.ns), format!("server {at}")));
    let mut lines = crate::toa::Lines::of(&mut srv.0);
    assert_eq!(lines.next(), format!("listen {at}"));
    let s = client
        .run(move || TcpStream::connect_timeout(&vip, T))
        .expect("connection through FULLNAT");
    let local = s.local_addr().expect("local");
    let seen = lines.next();
    let w: Vec<&str> = seen.split(' ').collect();
    assert!(
        w.len() == 4 && w[0] == "accept" && w[2] == "getpeername",
        "{seen}"
    );
    let parse = |a: &str| a.parse::<SocketAddr>().expect("an address");
    (parse(w[1]), parse(w[3]), local)
}

/// `addr` as nginx's `$remote_addr:$remote_port` writes it (no brackets).
fn logged(addr: SocketAddr) -> String {
    format!("{}:{}", addr.ip(), addr.port())
}

/// nginx as the real server behind the XDP FULLNAT director: without
/// `rvsd realserver --toa` its access log shows a local address of the
/// pool; with it, the true client address and port (the TOA the director
/// inserted into the handshake's ACK).
fn toa_nginx(
    test: &str,
    d: &Daemon,
    client: &Host,
    rs: &Host,
    p: &Plan,
    laddrs: &BTreeSet<IpAddr>,
) {
    if !crate::toa::can_run(test) || !rvs_testbed::require_tools(test, &["nginx"]) {
        return;
    }
    let vip = sa(p.vip, 8080);
    d.ok(&format!("-A -t {vip} -s rr"));
    for l in p.laddrs {
        d.ok(&format!("--add-laddr -t {vip} -z {l}"));
    }
    d.ok(&format!("-a -t {vip} -r {} --fullnat", sa(p.rs[0], 8080)));
    let vip_sa = SocketAddr::new(ip(p.vip), 8080);
    let at = SocketAddr::new(ip(p.rs[0]), 8080);
    // A second service for the getpeername() program.
    let gvip = sa(p.vip, 8081);
    d.ok(&format!("-A -t {gvip} -s rr"));
    for l in p.laddrs {
        d.ok(&format!("--add-laddr -t {gvip} -z {l}"));
    }
    d.ok(&format!("-a -t {gvip} -r {} --fullnat", sa(p.rs[0], 8081)));
    let gvip_sa = SocketAddr::new(ip(p.vip), 8081);
    let gat = SocketAddr::new(ip(p.rs[0]), 8081);
    let cg = crate::toa::Cgroup::new("fnat");
    let dir = TempDir::new("fullnat-nginx");

    // Without --toa: a local address of the pool.
    let nginx = RsNginx::start(&cg, rs, at, &dir);
    let me = http_get(client, vip_sa);
    let line = nginx.line_after(0);
    assert_ne!(line, logged(me), "the client's address without --toa");
    let seen: SocketAddr = if p.v6 {
        let (a, port) = line.rsplit_once(':').expect("addr:port");
        SocketAddr::new(ip(a), port.parse().expect("port"))
    } else {
        line.parse().expect("addr:port")
    };
    assert!(laddrs.contains(&seen.ip()), "nginx logged {line}");
    drop(nginx);
    let (acc, peer, me) = peer_via_child(&cg, rs, client, gat, gvip_sa);
    assert!(
        laddrs.contains(&acc.ip()) && acc == peer,
        "{acc} {peer} (client {me})"
    );

    // With it (nginx restarted: its listener must be opened after).
    let out = crate::toa::realserver(&["--toa", "--cgroup", cg.arg()]);
    assert!(out.contains("TOA reader on cgroup"), "{out}");
    let nginx = RsNginx::start(&cg, rs, at, &dir);
    for _ in 0..3 {
        let before = nginx.lines();
        let me = http_get(client, vip_sa);
        assert_eq!(nginx.line_after(before), logged(me), "the true client");
    }
    drop(nginx);
    // accept(2) and getpeername(2) of a program's accepted socket: the same.
    let (acc, peer, me) = peer_via_child(&cg, rs, client, gat, gvip_sa);
    assert_eq!((acc, peer), (me, me), "accept and getpeername");
    let off = crate::toa::realserver(&["--toa", "--undo", "--cgroup", cg.arg()]);
    assert!(off.contains("TOA reader detached"), "{off}");
}

scenarios! {
    fullnat:
    fullnat_xdp_rvsd_v4(&V4, Then::Nothing),
    fullnat_xdp_rvsd_v6(&V6, Then::Nothing),
    /// nginx behind the XDP FULLNAT director (after the FULLNAT checks):
    /// `$remote_addr` is a local address without `rvsd realserver --toa`, the
    /// true client with it.
    fullnat_xdp_toa_nginx_v4(&V4, Then::Nginx),
    fullnat_xdp_toa_nginx_v6(&V6, Then::Nginx),
    /// ICMP errors about FULLNAT flows both ways (after the FULLNAT checks): a
    /// client's connected UDP socket gets ECONNREFUSED from a real server port
    /// with no listener, and a real server's from a client's closed port.
    fullnat_xdp_icmp_v4(&V4, Then::Icmp),
    fullnat_xdp_icmp_v6(&V6, Then::Icmp),
}
