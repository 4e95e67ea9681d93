//! A bridged L2 segment (shared/spec/TESTBED.md "A shared L2 segment"): a
//! switch namespace with bridge `br0` (and more on request), one namespace
//! per host joined to a bridge by a veth pair, tiny TCP servers that answer
//! with their name, and clients. Everything lives in namespaces this bed
//! created, with unique names, and is removed when the bed is dropped
//! (servers stopped, adopted processes killed), even when the test fails.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use crate::netns::{Netns, exec_in, in_ns, unique_name};
use crate::server::{Server, echo};
use crate::sh;

/// One host of the bed: a namespace with an interface on a bridge.
#[derive(Clone, Debug)]
pub struct Host {
    /// The namespace's name.
    pub ns: String,
    /// Its address on the segment.
    pub addr: IpAddr,
    /// The interface's MAC.
    pub mac: [u8; 6],
    /// The bridge port (in the switch namespace) of this host.
    pub port: String,
}

impl Host {
    /// `ip netns exec NS args...`, panicking on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        exec_in(&self.ns, args)
    }

    /// Run `f` on a thread inside this host's namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_ns(&self.ns, f)
    }
}

/// The bed: namespaces, servers and processes, removed on drop.
pub struct Bed {
    prefix: String,
    /// The switch namespace (bridge `br0`).
    pub sw: String,
    namespaces: Vec<Netns>,
    children: Vec<Child>,
    servers: Vec<Server>,
    hosts: usize,
}

impl Bed {
    /// A new bed with its switch namespace and bridge `br0`; namespace
    /// names start with [`unique_name`]`(tag)`. The caller has checked
    /// that it can run ([`crate::require_root`], [`crate::require_tools`]
    /// for `ip` and `ethtool`).
    pub fn new(tag: &str) -> Bed {
        let prefix = unique_name(tag);
        let mut bed = Bed {
            sw: format!("{prefix}-sw"),
            prefix,
            namespaces: Vec::new(),
            children: Vec::new(),
            servers: Vec::new(),
            hosts: 0,
        };
        let sw = bed.sw.clone();
        bed.add_ns(&sw);
        bed.bridge("br0");
        bed
    }

    /// The prefix of every namespace of this bed.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The names of the bed's namespaces, in creation order.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.namespaces.iter().map(Netns::name)
    }

    /// Create namespace `name` (loopback up), deleted with the bed.
    pub fn add_ns(&mut self, name: &str) {
        self.namespaces.push(Netns::create(name.to_owned()));
    }

    /// Add host `role` with `addr/len` on `eth0` on bridge `br0` (MAC
    /// 02:77:00:00:00:NN). Its interface gets `tx off` (TESTBED.md:
    /// checksum offload does not survive XDP forwarding between veths).
    pub fn host(&mut self, role: &str, cidr: &str) -> Host {
        self.host_on(role, "br0", cidr)
    }

    /// Like [`Bed::host`], on `bridge`.
    pub fn host_on(&mut self, role: &str, bridge: &str, cidr: &str) -> Host {
        let ns = format!("{}-{role}", self.prefix);
        self.add_ns(&ns);
        self.link(&ns, bridge, "eth0", cidr)
    }

    /// A bridge `name` in the switch namespace, forwarding at once (no STP
    /// delay).
    pub fn bridge(&mut self, name: &str) {
        sh(&["ip", "-n", &self.sw, "link", "add", name, "type", "bridge"]);
        sh(&[
            "ip",
            "-n",
            &self.sw,
            "link",
            "set",
            name,
            "type",
            "bridge",
            "forward_delay",
            "0",
        ]);
        sh(&["ip", "-n", &self.sw, "link", "set", name, "up"]);
    }

    /// Join namespace `ns` to `bridge` with interface `ifname` and `cidr`
    /// (MAC 02:77:00:00:00:NN, NN counting the bed's links).
    pub fn link(&mut self, ns: &str, bridge: &str, ifname: &str, cidr: &str) -> Host {
        self.hosts += 1;
        let port = format!("p{}", self.hosts);
        let mac = [0x02, 0x77, 0, 0, 0, self.hosts as u8];
        let mac_s = mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        sh(&[
            "ip", "-n", &self.sw, "link", "add", &port, "type", "veth", "peer", "name", ifname,
            "netns", ns, "address", &mac_s,
        ]);
        sh(&[
            "ip", "-n", &self.sw, "link", "set", &port, "master", bridge, "up",
        ]);
        sh(&["ip", "-n", ns, "addr", "add", cidr, "dev", ifname]);
        sh(&["ip", "-n", ns, "link", "set", ifname, "up"]);
        let addr: IpAddr = cidr
            .split('/')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{cidr}: not ADDR/LEN"));
        let h = Host {
            ns: ns.to_owned(),
            addr,
            mac,
            port,
        };
        h.exec(&["ethtool", "-K", ifname, "tx", "off"]);
        h
    }

    /// Serve TCP on `addr:port` inside `host`: every connection gets
    /// `name\n`, then its input echoed back until EOF (bounded: 10 s idle).
    pub fn server(&mut self, host: &Host, addr: IpAddr, port: u16, name: &str) {
        let listener =
            host.run(move || TcpListener::bind(SocketAddr::new(addr, port)).expect("server bind"));
        let greeting = format!("{name}\n");
        self.servers.push(Server::tcp(listener, move |s, _| {
            echo(s, &greeting, Duration::from_secs(10))
        }));
    }

    /// Serve UDP on `addr:port` inside `host`: every datagram is answered,
    /// to its sender, with `name` then a space then the datagram itself
    /// (so a client tells which server answered which question).
    pub fn udp_server(&mut self, host: &Host, addr: IpAddr, port: u16, name: &str) {
        let sock =
            host.run(move || UdpSocket::bind(SocketAddr::new(addr, port)).expect("udp bind"));
        let prefix = format!("{name} ").into_bytes();
        self.servers.push(Server::udp(sock, move |data, _| {
            Some([&prefix[..], data].concat())
        }));
    }

    /// Keep `child` until the bed is dropped (then it is killed).
    pub fn adopt(&mut self, child: Child) {
        self.children.push(child);
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.servers.clear();
        // Hosts first, the switch last.
        while let Some(ns) = self.namespaces.pop() {
            drop(ns);
        }
    }
}

/// A client connection made from inside a host's namespace.
pub struct Conn {
    /// The stream (connected, in the client's namespace).
    pub stream: TcpStream,
    /// The name the server answered with.
    pub server: String,
}

impl Conn {
    /// Send `msg` and read it echoed back (the flow still reaches its
    /// server); Err when it does not come back within `timeout`.
    pub fn echo(&mut self, msg: &str, timeout: Duration) -> std::io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.write_all(msg.as_bytes())?;
        let mut got = vec![0u8; msg.len()];
        self.stream.read_exact(&mut got)?;
        if got != msg.as_bytes() {
            return Err(std::io::Error::other("echo mismatch"));
        }
        Ok(())
    }
}

/// Connect from `client` to `to` and read the server's name line.
pub fn connect(client: &Host, to: SocketAddr, timeout: Duration) -> std::io::Result<Conn> {
    let mut stream = client.run(move || TcpStream::connect_timeout(&to, timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match stream.read(&mut b)? {
            0 => break,
            _ if b[0] == b'\n' => break,
            _ => line.push(b[0]),
        }
    }
    Ok(Conn {
        stream,
        server: String::from_utf8_lossy(&line).into_owned(),
    })
}

/// `n` short connections from `client` to `to` (each bounded by
/// `timeout`): how many each server answered, and how many failed.
pub fn spread(
    client: &Host,
    to: SocketAddr,
    n: usize,
    timeout: Duration,
) -> (std::collections::BTreeMap<String, usize>, usize) {
    let mut seen = std::collections::BTreeMap::new();
    let mut failed = 0;
    for _ in 0..n {
        match connect(client, to, timeout) {
            Ok(c) if !c.server.is_empty() => *seen.entry(c.server).or_insert(0) += 1,
            _ => failed += 1,
        }
    }
    (seen, failed)
}

/// A UDP socket of `client`'s namespace on an ephemeral port of `bind`'s
/// family (one source address and port for every [`udp_ask`] through it).
pub fn udp_socket(client: &Host, bind: IpAddr) -> std::io::Result<UdpSocket> {
    client.run(move || UdpSocket::bind(SocketAddr::new(bind, 0)))
}

/// Send `msg` from `sock` to `to` and wait (up to `timeout`) for a
/// [`Bed::udp_server`] answer to it: the name of the server that answered.
/// Answers to earlier questions are skipped, so give each question its own
/// text.
pub fn udp_ask(
    sock: &UdpSocket,
    to: SocketAddr,
    msg: &str,
    timeout: Duration,
) -> std::io::Result<String> {
    sock.send_to(msg.as_bytes(), to)?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        sock.set_read_timeout(Some(left))?;
        let n = sock.recv(&mut buf)?;
        let text = String::from_utf8_lossy(&buf[..n]);
        if let Some((name, echoed)) = text.split_once(' ')
            && echoed == msg
        {
            return Ok(name.to_owned());
        }
    }
}
