//! Root tests of the sock data plane: the programs attached to a cgroup
//! this test creates (rvs-testbed's [`Cgroup`]); clients are this test
//! binary re-run inside the cgroup (the `child` entry point below);
//! backends listen on loopback in this process, which is outside the
//! cgroup. VIPs are 127.77.x.y / fd00:77::x addresses on which nothing
//! listens and for which no NAT rule exists.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rvs_control::dataplane::DataPlane;
use rvs_control::protocol::Command;
use rvs_core::model::{AddrFamily, DestConfig, Protocol, ServiceConfig, ServiceKey, SourceRange};
use rvs_core::sched::Scheduler;
use rvs_sock::plane::SockPlane;
use rvs_testbed::{Cgroup, Server};

const CHILD: &str = "RVS_SOCK_CHILD";

/// Not a test: the client side, run by the tests as a child process inside
/// their cgroup (`RVS_SOCK_CHILD` set, `--ignored --exact child`); run
/// alone it is ignored, and run by hand without the variable it fails.
/// Prints `RESULT ...` lines the tests read.
#[test]
#[ignore = "the child process of the sock tests, which run it with --ignored --exact"]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        panic!("run by the sock tests only ({CHILD} unset)");
    };
    let args: Vec<String> = mode.split(' ').map(str::to_owned).collect();
    let vip: SocketAddr = args[1].parse().expect("vip");
    let out = &mut std::io::stdout();
    match args[0].as_str() {
        "tcp" => {
            let n: usize = args[2].parse().expect("count");
            for _ in 0..n {
                let mut s = TcpStream::connect_timeout(&vip, Duration::from_secs(5))
                    .expect("connect to the VIP");
                let peer = s.peer_addr().expect("getpeername");
                let mut name = String::new();
                BufReader::new(&mut s)
                    .read_line(&mut name)
                    .expect("greeting");
                writeln!(out, "RESULT tcp {} {peer}", name.trim()).expect("stdout");
            }
        }
        "hold" => {
            let mut s = TcpStream::connect_timeout(&vip, Duration::from_secs(5))
                .expect("connect to the VIP");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            let mut name = String::new();
            r.read_line(&mut name).expect("greeting");
            writeln!(out, "RESULT hold {}", name.trim()).expect("stdout");
            out.flush().expect("flush");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).expect("stdin");
            s.write_all(b"again\n").expect("write");
            let mut echo = String::new();
            r.read_line(&mut echo).expect("echo");
            writeln!(out, "RESULT echo {}", echo.trim()).expect("stdout");
        }
        "udp" => {
            // One unconnected socket, two datagrams; then a connected one.
            let bind: SocketAddr = if vip.is_ipv4() {
                "0.0.0.0:0".parse().expect("addr")
            } else {
                "[::]:0".parse().expect("addr")
            };
            let s = UdpSocket::bind(bind).expect("bind");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            for _ in 0..2 {
                s.send_to(b"ping", vip).expect("sendto");
                let mut buf = [0u8; 64];
                let (n, from) = s.recv_from(&mut buf).expect("recvfrom");
                let name = String::from_utf8_lossy(&buf[..n]);
                writeln!(out, "RESULT unconnected {name} {from}").expect("stdout");
            }
            let c = UdpSocket::bind(bind).expect("bind");
            c.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            c.connect(vip).expect("connect");
            c.send(b"ping").expect("send");
            let mut buf = [0u8; 64];
            let (n, from) = c.recv_from(&mut buf).expect("recvfrom");
            let peer = c.peer_addr().expect("getpeername");
            let name = String::from_utf8_lossy(&buf[..n]);
            writeln!(out, "RESULT connected {name} {from} {peer}").expect("stdout");
        }
        "retry" => {
            // One socket, connect() twice to the VIP: the first server
            // refuses, the same socket then reaches the next one.
            use nix::sys::socket::{
                AddressFamily, SockFlag, SockType, SockaddrIn, connect, getpeername, socket,
            };
            use std::os::fd::AsRawFd as _;
            let SocketAddr::V4(v4) = vip else {
                panic!("retry needs an IPv4 VIP")
            };
            let addr = SockaddrIn::from(v4);
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::empty(),
                None,
            )
            .expect("socket");
            let first = match connect(fd.as_raw_fd(), &addr) {
                Ok(()) => "connected".to_owned(),
                Err(e) => format!("{e:?}"),
            };
            connect(fd.as_raw_fd(), &addr).expect("connect again");
            let peer: SockaddrIn = getpeername(fd.as_raw_fd()).expect("getpeername");
            let mut s = TcpStream::from(fd);
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut name = String::new();
            BufReader::new(&mut s)
                .read_line(&mut name)
                .expect("greeting");
            writeln!(out, "RESULT retry {first} {} {peer}", name.trim()).expect("stdout");
        }
        "follow" => {
            // Three connected UDP sockets: two to the VIP (rr: b0, then
            // b1), one to b0's own address. Then, once told (the parent
            // deleted b0), the first one's receive, a reconnect, and the
            // other two asked again.
            let direct: SocketAddr = args[2].parse().expect("direct address");
            let bind: SocketAddr = if vip.is_ipv4() {
                "0.0.0.0:0".parse().expect("addr")
            } else {
                "[::]:0".parse().expect("addr")
            };
            let err = |e: std::io::Error| match e.raw_os_error() {
                Some(n) => format!("{:?}", nix::errno::Errno::from_raw(n)),
                None => format!("{e}"),
            };
            let ask = |s: &UdpSocket| -> String {
                if let Err(e) = s.send(b"ping") {
                    return err(e);
                }
                let mut buf = [0u8; 64];
                match s.recv(&mut buf) {
                    Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
                    Err(e) => err(e),
                }
            };
            let socks: Vec<UdpSocket> = [vip, vip, direct]
                .iter()
                .map(|to| {
                    let s = UdpSocket::bind(bind).expect("bind");
                    s.set_read_timeout(Some(Duration::from_secs(3)))
                        .expect("timeout");
                    s.connect(to).expect("connect");
                    s
                })
                .collect();
            let before: Vec<String> = socks.iter().map(ask).collect();
            writeln!(out, "RESULT before {}", before.join(" ")).expect("stdout");
            out.flush().expect("flush");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).expect("stdin");
            // Nothing was sent: a receive fails at once when the socket was
            // destroyed, and times out (EAGAIN) when it was not.
            let mut buf = [0u8; 64];
            let first = match socks[0].recv(&mut buf) {
                Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
                Err(e) => err(e),
            };
            socks[0].connect(vip).expect("connect again");
            let after: Vec<String> = socks.iter().map(ask).collect();
            writeln!(out, "RESULT after {first} {}", after.join(" ")).expect("stdout");
        }
        "src" => {
            // For each source (`-`: unbound), a TCP connect() to the first
            // VIP and a UDP sendto() to the second, from a socket bound to
            // it: the server's name, or the error.
            use nix::sys::socket::{
                AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket,
            };
            use std::os::fd::AsRawFd as _;
            let udp_vip: SocketAddr = args[2].parse().expect("udp vip");
            let SocketAddr::V4(tcp_vip) = vip else {
                panic!("src needs IPv4 VIPs")
            };
            let errno = |e: nix::errno::Errno| format!("{e:?}");
            let io_err = |e: std::io::Error| match e.raw_os_error() {
                Some(n) => errno(nix::errno::Errno::from_raw(n)),
                None => format!("{e}"),
            };
            for src in &args[3..] {
                let bound: Option<std::net::Ipv4Addr> =
                    (src != "-").then(|| src.parse().expect("source"));
                let tcp = (|| {
                    let fd = socket(
                        AddressFamily::Inet,
                        SockType::Stream,
                        SockFlag::empty(),
                        None,
                    )
                    .map_err(errno)?;
                    if let Some(b) = bound {
                        bind(
                            fd.as_raw_fd(),
                            &SockaddrIn::from(std::net::SocketAddrV4::new(b, 0)),
                        )
                        .map_err(errno)?;
                    }
                    connect(fd.as_raw_fd(), &SockaddrIn::from(tcp_vip)).map_err(errno)?;
                    let mut s = TcpStream::from(fd);
                    s.set_read_timeout(Some(Duration::from_secs(5)))
                        .map_err(io_err)?;
                    let mut name = String::new();
                    BufReader::new(&mut s)
                        .read_line(&mut name)
                        .map_err(io_err)?;
                    Ok::<_, String>(name.trim().to_owned())
                })();
                let udp = (|| {
                    let s = UdpSocket::bind((bound.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED), 0))
                        .map_err(io_err)?;
                    s.set_read_timeout(Some(Duration::from_secs(5)))
                        .map_err(io_err)?;
                    s.send_to(b"ping", udp_vip).map_err(io_err)?;
                    let mut buf = [0u8; 64];
                    let n = s.recv(&mut buf).map_err(io_err)?;
                    Ok::<_, String>(String::from_utf8_lossy(&buf[..n]).into_owned())
                })();
                for (proto, r) in [("tcp", tcp), ("udp", udp)] {
                    let r = r.unwrap_or_else(|e| e);
                    writeln!(out, "RESULT {proto} {src} {r}").expect("stdout");
                }
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Run the child in `cg` with `mode`; its `RESULT` lines.
fn run_child(cg: &Cgroup, mode: &str) -> Vec<String> {
    let out = child_command(cg, mode)
        .stdin(Stdio::null())
        .output()
        .expect("running the child");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {mode} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results(&text)
}

fn results(text: &str) -> Vec<String> {
    text.lines()
        // libtest prints `test child ... ` before the first line.
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
        .collect()
}

fn child_command(cg: &Cgroup, mode: &str) -> std::process::Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = cg.command(
        &exe,
        &[
            "--ignored",
            "--exact",
            "child",
            "--nocapture",
            "--test-threads=1",
        ],
    );
    c.env(CHILD, mode);
    c
}

/// A child killed when the test ends (also when it fails).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Loopback backends: TCP servers that write their name, then echo lines;
/// UDP servers that answer every datagram with their name. Stopped on drop.
struct Backends {
    _servers: Vec<Server>,
    addrs: Vec<SocketAddr>,
}

impl Backends {
    fn tcp(ip: &str, n: usize) -> Backends {
        let (servers, addrs) = (0..n)
            .map(|i| {
                let l = TcpListener::bind((ip, 0)).expect("bind backend");
                let addr = l.local_addr().expect("addr");
                let greeting = format!("b{i}\n");
                let server = Server::tcp(l, move |s, _| {
                    rvs_testbed::echo(s, &greeting, Duration::from_secs(15))
                });
                (server, addr)
            })
            .unzip();
        Backends {
            _servers: servers,
            addrs,
        }
    }

    fn udp(ip: &str, n: usize) -> Backends {
        let (servers, addrs) = (0..n)
            .map(|i| {
                let s = UdpSocket::bind((ip, 0)).expect("bind backend");
                let addr = s.local_addr().expect("addr");
                let name = format!("b{i}").into_bytes();
                (Server::udp(s, move |_, _| Some(name.clone())), addr)
            })
            .unzip();
        Backends {
            _servers: servers,
            addrs,
        }
    }
}

/// A cgroup with the sock plane attached, or `None` (skipped) when not root.
fn setup(test: &str) -> Option<(Cgroup, SockPlane)> {
    let cg = Cgroup::for_test(test, "rvssock")?;
    let plane = SockPlane::start(cg.path()).expect("starting the sock plane");
    Some((cg, plane))
}

fn vip4(n: u8) -> IpAddr {
    IpAddr::from([127, 77, (std::process::id() % 250) as u8, n])
}

fn exec(plane: &mut SockPlane, cmds: Vec<Command>) {
    for c in &cmds {
        plane.admit(c).expect("admitted");
        plane.apply(c).expect("applied");
    }
    let t = plane.applied().expect("a ticket");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !t.done() {
        assert!(Instant::now() < deadline, "the sock plane did not apply");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn service(
    protocol: Protocol,
    vip: IpAddr,
    port: u16,
    sched: Scheduler,
    backends: &[(SocketAddr, u32)],
) -> (ServiceKey, Vec<Command>) {
    let key = ServiceKey::Addr {
        protocol,
        addr: vip,
        port,
    };
    let af = if vip.is_ipv4() {
        AddrFamily::Inet
    } else {
        AddrFamily::Inet6
    };
    let mut cmds = vec![Command::AddService {
        key,
        config: ServiceConfig {
            scheduler: sched,
            ..ServiceConfig::new(af)
        },
    }];
    for &(a, w) in backends {
        cmds.push(Command::AddDest {
            service: key,
            dest: DestConfig::new(a.ip(), a.port()).weight(w),
        });
    }
    (key, cmds)
}

fn counts(lines: &[String], n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| {
            let name = format!("b{i}");
            lines
                .iter()
                .filter(|l| l.split(' ').nth(1) == Some(&name))
                .count()
        })
        .collect()
}

#[test]
fn tcp_connect_to_vip_reaches_a_backend_and_the_peer_is_the_vip() {
    let Some((cg, mut plane)) =
        setup("tcp_connect_to_vip_reaches_a_backend_and_the_peer_is_the_vip")
    else {
        return;
    };
    let b = Backends::tcp("127.0.0.1", 2);
    let vip = vip4(1);
    let (_, cmds) = service(
        Protocol::Tcp,
        vip,
        8080,
        Scheduler::Rr,
        &[(b.addrs[0], 1), (b.addrs[1], 1)],
    );
    exec(&mut plane, cmds);
    let lines = run_child(&cg, &format!("tcp {vip}:8080 4"));
    assert_eq!(lines.len(), 4, "{lines:?}");
    for l in &lines {
        // Port mapping: the backends' ports are not 8080, the peer is.
        assert!(
            l.ends_with(&format!(" {vip}:8080")),
            "peer is not the VIP: {l}"
        );
    }
    assert_eq!(counts(&lines, 2), [2, 2], "{lines:?}");
    // Outside the cgroup nothing is touched: nothing listens on the VIP.
    let e = TcpStream::connect_timeout(&SocketAddr::new(vip, 8080), Duration::from_secs(5))
        .expect_err("a process outside the cgroup reached the VIP");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    // A dual-stack socket reaching the IPv4 VIP through its v4-mapped form.
    let mapped = run_child(&cg, &format!("tcp [::ffff:{vip}]:8080 1"));
    assert_eq!(mapped.len(), 1, "{mapped:?}");
    assert!(
        mapped[0].ends_with(&format!(" [::ffff:{vip}]:8080")),
        "{mapped:?}"
    );
    // A non-VIP address from inside the cgroup is untouched too.
    let other = run_child(&cg, &format!("tcp {} 1", b.addrs[1]));
    assert_eq!(other, [format!("tcp b1 {}", b.addrs[1])]);
}

#[test]
fn tcp_over_ipv6_and_sockets_are_uncounted_when_closed() {
    let Some((cg, mut plane)) = setup("tcp_over_ipv6_and_sockets_are_uncounted_when_closed") else {
        return;
    };
    let b = Backends::tcp("::1", 2);
    let vip: IpAddr = format!("fd00:77::{:x}", std::process::id() % 65000 + 1)
        .parse()
        .expect("vip");
    let (key, cmds) = service(
        Protocol::Tcp,
        vip,
        80,
        Scheduler::Wlc,
        &[(b.addrs[0], 1), (b.addrs[1], 1)],
    );
    exec(&mut plane, cmds);
    let lines = run_child(&cg, &format!("tcp [{vip}]:80 6"));
    assert_eq!(lines.len(), 6, "{lines:?}");
    for l in &lines {
        assert!(
            l.ends_with(&format!(" [{vip}]:80")),
            "peer is not the VIP: {l}"
        );
    }
    // Sockets closed one after the other: wlc on open sockets sends every
    // one to the first server (both idle each time).
    assert_eq!(counts(&lines, 2), [6, 0], "{lines:?}");
    // Every socket was released: no open socket counted, six in total.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = plane.snapshot();
        let st = s.get(&(key, b.addrs[0].ip(), b.addrs[0].port())).copied();
        if st.is_some_and(|st| st.active == 0 && st.total == 6) {
            break;
        }
        assert!(Instant::now() < deadline, "counters {st:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_socket_connected_again_after_a_refusal_moves_its_count_and_its_peer() {
    let Some((cg, mut plane)) =
        setup("a_socket_connected_again_after_a_refusal_moves_its_count_and_its_peer")
    else {
        return;
    };
    // The first real server refuses: its port was free a moment ago.
    let refusing = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let b = Backends::tcp("127.0.0.1", 1);
    let vip = vip4(9);
    let (key, cmds) = service(
        Protocol::Tcp,
        vip,
        80,
        Scheduler::Rr,
        &[(refusing, 1), (b.addrs[0], 1)],
    );
    exec(&mut plane, cmds);
    let lines = run_child(&cg, &format!("retry {vip}:80"));
    // rr: the first connect() went to the refusing server, the second,
    // on the same socket, to b0; getpeername() is the VIP's.
    assert_eq!(
        lines,
        [format!("retry ECONNREFUSED b0 {vip}:80")],
        "{lines:?}"
    );
    // The refused attempt was uncounted when the socket moved on; the
    // socket was uncounted from b0 when it closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = plane.snapshot();
        let st = |a: SocketAddr| s.get(&(key, a.ip(), a.port())).copied();
        let (r, k) = (st(refusing), st(b.addrs[0]));
        let done =
            |x: Option<rvs_sock::maps::DestStats>| x.is_some_and(|x| x.active == 0 && x.total == 1);
        if done(r) && done(k) {
            break;
        }
        assert!(Instant::now() < deadline, "counters {r:?} {k:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rr_and_wrr_counts_are_exact_over_300_connections() {
    let Some((cg, mut plane)) = setup("rr_and_wrr_counts_are_exact_over_300_connections") else {
        return;
    };
    let b = Backends::tcp("127.0.0.1", 3);
    let vip = vip4(2);
    let (_, rr) = service(
        Protocol::Tcp,
        vip,
        81,
        Scheduler::Rr,
        &[(b.addrs[0], 1), (b.addrs[1], 1), (b.addrs[2], 1)],
    );
    let (_, wrr) = service(
        Protocol::Tcp,
        vip,
        82,
        Scheduler::Wrr,
        &[(b.addrs[0], 1), (b.addrs[1], 2), (b.addrs[2], 3)],
    );
    exec(&mut plane, rr);
    exec(&mut plane, wrr);
    // Three clients at once, 100 connections each, on both CPUs.
    for (port, want) in [(81, [100, 100, 100]), (82, [50, 100, 150])] {
        let kids: Vec<Child> = (0..3)
            .map(|_| {
                child_command(&cg, &format!("tcp {vip}:{port} 100"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        let mut lines = Vec::new();
        for k in kids {
            let out = k.wait_with_output().expect("child");
            assert!(out.status.success());
            lines.extend(results(&String::from_utf8_lossy(&out.stdout)));
        }
        assert_eq!(lines.len(), 300);
        assert_eq!(counts(&lines, 3), want, "port {port}");
    }
}

#[test]
fn udp_replies_come_from_the_vip_connected_or_not() {
    let Some((cg, mut plane)) = setup("udp_replies_come_from_the_vip_connected_or_not") else {
        return;
    };
    let b = Backends::udp("127.0.0.1", 2);
    let vip = vip4(3);
    let (_, cmds) = service(
        Protocol::Udp,
        vip,
        53,
        Scheduler::Rr,
        &[(b.addrs[0], 1), (b.addrs[1], 1)],
    );
    exec(&mut plane, cmds);
    let lines = run_child(&cg, &format!("udp {vip}:53"));
    assert_eq!(lines.len(), 3, "{lines:?}");
    // The unconnected socket keeps its server for the VIP (one flow).
    assert_eq!(lines[0], format!("unconnected b0 {vip}:53"));
    assert_eq!(lines[1], format!("unconnected b0 {vip}:53"));
    assert_eq!(lines[2], format!("connected b1 {vip}:53 {vip}:53"));
}

#[test]
fn weight_zero_drains_and_a_deleted_server_is_not_chosen() {
    let Some((cg, mut plane)) = setup("weight_zero_drains_and_a_deleted_server_is_not_chosen")
    else {
        return;
    };
    let b = Backends::tcp("127.0.0.1", 3);
    let vip = vip4(4);
    let (key, cmds) = service(
        Protocol::Tcp,
        vip,
        83,
        Scheduler::Rr,
        &[(b.addrs[0], 1), (b.addrs[1], 1), (b.addrs[2], 1)],
    );
    exec(&mut plane, cmds);
    // An established connection to b0.
    let mut hold = KillOnDrop(
        child_command(&cg, &format!("hold {vip}:83"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let hold = &mut hold.0;
    let mut out = BufReader::new(hold.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("RESULT ") {
        line.clear();
        assert!(out.read_line(&mut line).expect("read") > 0, "child ended");
    }
    assert_eq!(results(&line), ["hold b0"]);
    // The open socket is in the plane's walk, with its own address.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = plane.sockets().into_iter().find(|s| s.dest == b.addrs[0]);
        if let Some(s) = found
            && s.client
                .is_some_and(|c| c.ip() == b.addrs[0].ip() && c.port() != 0)
        {
            assert_eq!(s.vip, SocketAddr::new(vip, 83));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "socket not listed: {:?}",
            plane.sockets()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Drain b0 (weight 0, as a failed health check with inhibit does) and
    // delete b2 (as a failed health check without it does).
    exec(
        &mut plane,
        vec![
            Command::EditDest {
                service: key,
                dest: DestConfig::new(b.addrs[0].ip(), b.addrs[0].port()).weight(0),
            },
            Command::DelDest {
                service: key,
                addr: b.addrs[2].ip(),
                port: b.addrs[2].port(),
            },
        ],
    );
    let lines = run_child(&cg, &format!("tcp {vip}:83 30"));
    assert_eq!(counts(&lines, 3), [0, 30, 0], "{lines:?}");
    // The drained server's connection still works.
    hold.stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("write");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    assert!(hold.wait().expect("wait").success());
    assert_eq!(results(&rest), ["echo again"]);
}

#[test]
fn persistence_and_source_hashing_keep_the_host_on_one_server() {
    let Some((cg, mut plane)) = setup("persistence_and_source_hashing_keep_the_host_on_one_server")
    else {
        return;
    };
    let b = Backends::tcp("127.0.0.1", 3);
    let vip = vip4(5);
    let all = [(b.addrs[0], 1), (b.addrs[1], 1), (b.addrs[2], 1)];
    let (pkey, mut persistent) = service(Protocol::Tcp, vip, 84, Scheduler::Rr, &all);
    if let Command::AddService { config, .. } = &mut persistent[0] {
        config.persistent = Some(60);
    }
    let (_, sh) = service(Protocol::Tcp, vip, 85, Scheduler::Sh, &all);
    exec(&mut plane, persistent);
    exec(&mut plane, sh);
    // Unbound sockets: one client (the host), so one server for all.
    for port in [84, 85] {
        let lines = run_child(&cg, &format!("tcp {vip}:{port} 12"));
        let c = counts(&lines, 3);
        assert_eq!(
            c.iter().filter(|&&n| n == 12).count(),
            1,
            "port {port}: {c:?}"
        );
    }
    // The persistent server deleted: the template no longer holds.
    let first = run_child(&cg, &format!("tcp {vip}:84 1"));
    let i: usize = first[0]
        .split(' ')
        .nth(1)
        .and_then(|n| n.strip_prefix('b'))
        .and_then(|n| n.parse().ok())
        .expect("backend name");
    exec(
        &mut plane,
        vec![Command::DelDest {
            service: pkey,
            addr: b.addrs[i].ip(),
            port: b.addrs[i].port(),
        }],
    );
    let lines = run_child(&cg, &format!("tcp {vip}:84 6"));
    let c = counts(&lines, 3);
    assert_eq!(c[i], 0, "{c:?}");
    assert_eq!(c.iter().filter(|&&n| n == 6).count(), 1, "{c:?}");
}

#[test]
fn unsupported_services_are_refused_before_anything_changes() {
    // No kernel needed to ask: but the plane only exists with root.
    let Some((_cg, plane)) = setup("unsupported_services_are_refused_before_anything_changes")
    else {
        return;
    };
    let fwmark = Command::AddService {
        key: ServiceKey::Fwmark {
            mark: 1,
            af: AddrFamily::Inet,
        },
        config: ServiceConfig::new(AddrFamily::Inet),
    };
    assert!(plane.admit(&fwmark).unwrap_err().contains("fwmark"));
    let (_, lblc) = service(Protocol::Tcp, vip4(6), 86, Scheduler::Lblc, &[]);
    assert!(plane.admit(&lblc[0]).unwrap_err().contains("lblc"));
}

/// Issue 28 (Cilium keeps connected UDP sockets on deleted backends,
/// cilium#48096): a connected UDP socket whose real server is deleted is
/// destroyed, its receive fails with ECONNABORTED and, connected again, it
/// reaches a live server. A socket on a server that stays, and a socket
/// connected to the deleted server's address itself (not through the VIP),
/// are untouched. IPv4 and IPv6.
#[test]
fn a_connected_udp_socket_follows_its_backends_deletion() {
    let Some((cg, mut plane)) = setup("a_connected_udp_socket_follows_its_backends_deletion")
    else {
        return;
    };
    let vip6: IpAddr = format!("fd00:77:1::{:x}", std::process::id() % 65000 + 1)
        .parse()
        .expect("vip");
    for (ip, vip) in [("127.0.0.1", vip4(7)), ("::1", vip6)] {
        let b = Backends::udp(ip, 2);
        let (key, cmds) = service(
            Protocol::Udp,
            vip,
            5353,
            Scheduler::Rr,
            &[(b.addrs[0], 1), (b.addrs[1], 1)],
        );
        exec(&mut plane, cmds);
        let mut kid = KillOnDrop(
            child_command(
                &cg,
                &format!("follow {} {}", SocketAddr::new(vip, 5353), b.addrs[0]),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn"),
        );
        let kid = &mut kid.0;
        let mut out = BufReader::new(kid.stdout.take().expect("stdout"));
        let mut line = String::new();
        while !line.contains("RESULT ") {
            line.clear();
            assert!(out.read_line(&mut line).expect("read") > 0, "child ended");
        }
        assert_eq!(results(&line), ["before b0 b1 b0"], "{vip}");
        // b0 leaves the service (its server keeps running: a socket left
        // on it would still get answers from it).
        exec(
            &mut plane,
            vec![Command::DelDest {
                service: key,
                addr: b.addrs[0].ip(),
                port: b.addrs[0].port(),
            }],
        );
        kid.stdin
            .take()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("write");
        let mut rest = String::new();
        out.read_to_string(&mut rest).expect("read");
        assert!(kid.wait().expect("wait").success(), "{rest}");
        assert_eq!(
            results(&rest),
            ["after ECONNABORTED b1 b1 b0"],
            "{vip}: the first socket's receive, then all three asked again"
        );
    }
}

/// Connections of real server `a` of service `key` in the director.
fn director_conns(ipvs: &rvs_core::ipvs::Ipvs, key: &ServiceKey, a: SocketAddr) -> u64 {
    ipvs.service(key)
        .and_then(|s| {
            s.dests()
                .iter()
                .find(|d| d.config.addr == a.ip() && d.config.port == a.port())
        })
        .map_or(0, |d| d.stats.conns)
}

/// Report into `ipvs` every 100 ms until `check` holds (10 s at most).
fn report_until(
    plane: &mut SockPlane,
    ipvs: &mut rvs_core::ipvs::Ipvs,
    what: &str,
    check: impl Fn(&rvs_core::ipvs::Ipvs) -> bool,
) {
    let t0 = Instant::now();
    loop {
        let now = rvs_core::time::Instant::from_millis(t0.elapsed().as_millis() as u64);
        plane.report(now, ipvs);
        if check(ipvs) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The worker passes on only the counters that changed since the last
/// read: every socket still reaches the director's counters once (not
/// again at the next reports), and a real server added later (which may
/// take a deleted one's index) counts from zero.
#[test]
fn the_director_counts_each_socket_once_through_the_changed_counters() {
    let Some((cg, mut plane)) =
        setup("the_director_counts_each_socket_once_through_the_changed_counters")
    else {
        return;
    };
    let b = Backends::tcp("127.0.0.1", 3);
    let vip = vip4(12);
    let (key, cmds) = service(
        Protocol::Tcp,
        vip,
        80,
        Scheduler::Rr,
        &[(b.addrs[0], 1), (b.addrs[1], 1)],
    );
    let mut ipvs = rvs_core::ipvs::Ipvs::new(rvs_core::ipvs::IpvsConfig::default());
    for c in &cmds {
        rvs_control::state::apply(&mut ipvs, c).expect("the director applies");
    }
    exec(&mut plane, cmds);
    let lines = run_child(&cg, &format!("tcp {vip}:80 4"));
    assert_eq!(counts(&lines, 2), [2, 2], "{lines:?}");
    let conns = |ipvs: &rvs_core::ipvs::Ipvs, i: usize| director_conns(ipvs, &key, b.addrs[i]);
    report_until(&mut plane, &mut ipvs, "2 and 2 counted", |v| {
        conns(v, 0) == 2 && conns(v, 1) == 2
    });
    // Three more reads of the counters, nothing new: nothing added.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(3500) {
        plane.report(rvs_core::time::Instant::from_secs(20), &mut ipvs);
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!((conns(&ipvs, 0), conns(&ipvs, 1)), (2, 2));
    // b0 leaves, b2 comes (on b0's index once no socket counts on it).
    let change = [
        Command::DelDest {
            service: key,
            addr: b.addrs[0].ip(),
            port: b.addrs[0].port(),
        },
        Command::AddDest {
            service: key,
            dest: DestConfig::new(b.addrs[2].ip(), b.addrs[2].port()),
        },
    ];
    for c in &change {
        rvs_control::state::apply(&mut ipvs, c).expect("the director applies");
    }
    exec(&mut plane, change.to_vec());
    let lines = run_child(&cg, &format!("tcp {vip}:80 2"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    report_until(&mut plane, &mut ipvs, "3 and 1 counted", |v| {
        conns(v, 1) == 3 && conns(v, 2) == 1
    });
}

/// Issue 28: a map write of the sock plane is one `bpf()` call — the
/// worker builds its map handles once, at start, instead of asking the
/// kernel for a map's sizes (`BPF_OBJ_GET_INFO_BY_FD`) before every write:
/// 500 services with a real server each (a few thousand writes) ask for
/// no map's info. Other tests of this binary start planes meanwhile (seven
/// queries each), hence a bound rather than zero.
#[test]
fn the_sock_plane_asks_for_map_info_once_not_per_write() {
    let Some((_cg, mut plane)) = setup("the_sock_plane_asks_for_map_info_once_not_per_write")
    else {
        return;
    };
    let backend: SocketAddr = "127.0.0.1:9".parse().expect("addr");
    let before = rvs_sys::bpf::map_info_queries();
    let mut cmds = Vec::new();
    for port in 30_000..30_500 {
        let (_, c) = service(Protocol::Tcp, vip4(9), port, Scheduler::Rr, &[(backend, 1)]);
        cmds.extend(c);
    }
    exec(&mut plane, cmds);
    let asked = rvs_sys::bpf::map_info_queries() - before;
    assert!(
        asked < 200,
        "{asked} map info queries for 500 services and their real servers"
    );
}

/// Client source ranges (Kubernetes' `loadBalancerSourceRanges`) at the
/// socket: a socket bound to a source inside the ranges reaches the real
/// server (TCP connect, UDP sendto), one bound outside is refused with
/// `EPERM` at once, and an unbound one is judged by the source the kernel
/// gives it toward the VIP (127.0.0.1, lo's 127/8 route): refused while
/// that is outside, admitted once the ranges hold it. Each refusal is
/// counted.
#[test]
fn source_ranges_admit_sources_inside_and_unbound_sockets_by_the_routes_source() {
    let Some((cg, mut plane)) =
        setup("source_ranges_admit_sources_inside_and_unbound_sockets_by_the_routes_source")
    else {
        return;
    };
    assert!(plane.enforces_source_ranges());
    let (tb, ub) = (Backends::tcp("127.0.0.1", 1), Backends::udp("127.0.0.1", 1));
    let vip = vip4(30);
    let range = |a: &str| SourceRange::new(a.parse().expect("addr"), 32).expect("range");
    let ranged = |cmds: &mut Vec<Command>, ranges: &[SourceRange]| {
        for c in cmds {
            if let Command::AddService { config, .. } = c {
                config.source_ranges = ranges.to_vec();
            }
        }
    };
    let (tk, mut t) = service(Protocol::Tcp, vip, 80, Scheduler::Rr, &[(tb.addrs[0], 1)]);
    let (uk, mut u) = service(Protocol::Udp, vip, 53, Scheduler::Rr, &[(ub.addrs[0], 1)]);
    let inside = [range("127.0.0.2")];
    ranged(&mut t, &inside);
    ranged(&mut u, &inside);
    t.extend(u);
    exec(&mut plane, t);
    let mode = format!("src {vip}:80 {vip}:53 127.0.0.2 127.0.0.3 -");
    assert_eq!(
        run_child(&cg, &mode),
        [
            "tcp 127.0.0.2 b0",
            "udp 127.0.0.2 b0",
            "tcp 127.0.0.3 EPERM",
            "udp 127.0.0.3 EPERM",
            "tcp - EPERM",
            "udp - EPERM",
        ]
    );
    // The route's source toward the VIP in the ranges: unbound sockets pass.
    let with_node = [range("127.0.0.2"), range("127.0.0.1")];
    let edit = |key| Command::EditService {
        key,
        config: ServiceConfig {
            scheduler: Scheduler::Rr,
            source_ranges: with_node.to_vec(),
            ..ServiceConfig::new(AddrFamily::Inet)
        },
    };
    exec(&mut plane, vec![edit(tk), edit(uk)]);
    assert_eq!(
        run_child(&cg, &mode),
        [
            "tcp 127.0.0.2 b0",
            "udp 127.0.0.2 b0",
            "tcp 127.0.0.3 EPERM",
            "udp 127.0.0.3 EPERM",
            "tcp - b0",
            "udp - b0",
        ]
    );
    // Six refusals counted (read at the worker's reports).
    let stats = plane.stats();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.events().refused_source != 6 {
        assert!(Instant::now() < deadline, "{:?}", stats.events());
        std::thread::sleep(Duration::from_millis(100));
    }
}
