//! The namespace test bed (shared/spec/TESTBED.md): a switch namespace with
//! a bridge, one namespace per host joined to it by a veth pair, tiny TCP
//! servers that answer with their name, and clients — all inside network
//! namespaces this test created, with unique names, deleted by a Drop guard
//! (servers stopped, processes killed) even when the test fails.
//!
//! Sockets keep the namespace they were created in, so servers and clients
//! run in this process: a short-lived thread enters the namespace
//! (`setns` applies per thread), creates the socket and hands it back.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// True when the bed can run here (root, iproute2, ethtool); otherwise
/// prints why the test skips.
pub fn can_run(test: &str) -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        eprintln!("skipping {test}: network namespaces and XDP need root (uid {uid})");
        return false;
    }
    for tool in ["ip", "ethtool"] {
        if Command::new(tool).arg("-V").output().is_err() {
            eprintln!("skipping {test}: `{tool}` is not installed (scripts/install-deps)");
            return false;
        }
    }
    if let Err(e) = rvs_xdp::Object::Director.bytes() {
        eprintln!("skipping {test}: {e}");
        return false;
    }
    true
}

/// Prepare `h` as a real server: `rvsd realserver --vip VIP --interface
/// eth0` plus the mode arguments, inside its namespace.
pub fn realserver(h: &Host, vip: &str, mode: &[&str]) {
    let mut args = vec![
        "ip",
        "netns",
        "exec",
        &h.ns,
        crate::harness::RVSD,
        "realserver",
        "--vip",
        vip,
        "--interface",
        "eth0",
    ];
    args.extend_from_slice(mode);
    sh(&args);
}

/// Run a command; panic with its output when it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One host of the bed: a namespace with `eth0` on the bridge.
#[derive(Clone, Debug)]
pub struct Host {
    /// The namespace's name.
    pub ns: String,
    /// Its address on the segment.
    pub addr: IpAddr,
    /// `eth0`'s MAC.
    pub mac: [u8; 6],
    /// The bridge port (in the switch namespace) of this host.
    pub port: String,
}

impl Host {
    /// `ip netns exec NS args...`, panicking on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut a = vec!["ip", "netns", "exec", &self.ns];
        a.extend_from_slice(args);
        sh(&a)
    }

    /// Run `f` on a thread inside this host's namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_ns(&self.ns, f)
    }
}

/// Run `f` on a fresh thread that has entered network namespace `ns`.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
    .join()
    .expect("namespace thread")
}

/// The bed: namespaces and processes, removed on drop.
pub struct Bed {
    prefix: String,
    /// The switch namespace (bridge `br0`).
    pub sw: String,
    namespaces: Vec<String>,
    children: Vec<Child>,
    servers: Vec<(Arc<AtomicBool>, Option<JoinHandle<()>>)>,
    hosts: usize,
}

impl Bed {
    /// A new bed with its switch, or None (printed why) when it cannot run.
    pub fn new(test: &str) -> Option<Bed> {
        if !can_run(test) {
            return None;
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("rvs{}x{n}", std::process::id());
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
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"]);
        // No STP delay: ports forward at once.
        sh(&[
            "ip",
            "-n",
            &sw,
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "forward_delay",
            "0",
        ]);
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"]);
        Some(bed)
    }

    fn add_ns(&mut self, name: &str) {
        sh(&["ip", "netns", "add", name]);
        self.namespaces.push(name.to_owned());
        sh(&["ip", "-n", name, "link", "set", "lo", "up"]);
    }

    /// Add host `role` with `addr/len` on `eth0` on bridge `br0` (MAC
    /// 02:77:00:00:00:NN). Clients and real servers get `tx off`
    /// (TESTBED.md: checksum offload does not survive XDP forwarding
    /// between veths).
    pub fn host(&mut self, role: &str, cidr: &str) -> Host {
        self.host_on(role, "br0", cidr)
    }

    /// Like [`Bed::host`], on `bridge`.
    pub fn host_on(&mut self, role: &str, bridge: &str, cidr: &str) -> Host {
        let ns = format!("{}-{role}", self.prefix);
        self.add_ns(&ns);
        self.link(&ns, bridge, "eth0", cidr)
    }

    /// A second segment: bridge `name` in the switch namespace.
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

    /// Join namespace `ns` to `bridge` with interface `ifname` and `cidr`.
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
            .expect("cidr");
        let h = Host {
            ns: ns.to_owned(),
            addr,
            mac,
            port,
        };
        h.exec(&["ethtool", "-K", ifname, "tx", "off"]);
        h
    }

    /// Attach an XDP program that passes everything to `host`'s bridge
    /// port: a veth only delivers what its peer sends with XDP_TX/redirect
    /// when it has an XDP program itself (TESTBED.md). The decapsulator
    /// with no VIPs is such a program.
    pub fn xdp_pass_on_port(&mut self, host: &Host) {
        let port = host.port.clone();
        in_ns(&self.sw, move || {
            let mut d = rvs_xdp::decap::Decap::load().expect("decap loads");
            d.attach_persistent(&port)
                .expect("attach XDP_PASS on the bridge port");
        });
    }

    /// Serve TCP on `addr:port` inside `host`: every connection gets
    /// `name\n`, then its input echoed back until EOF (bounded: 10 s idle).
    pub fn server(&mut self, host: &Host, addr: IpAddr, port: u16, name: &str) {
        let listener =
            host.run(move || TcpListener::bind(SocketAddr::new(addr, port)).expect("server bind"));
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, name) = (stop.clone(), name.to_owned());
        let t = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let name = name.clone();
                        std::thread::spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                            if s.write_all(format!("{name}\n").as_bytes()).is_err() {
                                return;
                            }
                            let mut buf = [0u8; 4096];
                            while let Ok(n) = s.read(&mut buf) {
                                if n == 0 || s.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        self.servers.push((stop, Some(t)));
    }

    /// Keep `child` until the bed is dropped (then it is killed).
    #[allow(dead_code)] // for daemons started in a namespace
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
        for (stop, t) in &mut self.servers {
            stop.store(true, Ordering::Relaxed);
            if let Some(t) = t.take() {
                let _ = t.join();
            }
        }
        for ns in self.namespaces.iter().rev() {
            // `rvsd realserver` keeps the sysctl values it replaced per
            // namespace inode; a later namespace may reuse the inode.
            if let Ok(m) = std::fs::metadata(format!("/var/run/netns/{ns}")) {
                use std::os::unix::fs::MetadataExt;
                let _ = std::fs::remove_file(format!("/run/rvs/realserver-{}.json", m.ino()));
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// A client connection made from inside `client`'s namespace.
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
