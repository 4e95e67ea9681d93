//! The fixtures' premise checked on the wire: a frame captured from a real
//! connection through the attached director, replayed with
//! BPF_PROG_TEST_RUN on that same program with the ingress interface in
//! the context ([`rvs_xdp::Loaded::run_on`]), gives the action and the
//! output frame the wire saw.
//!
//! Namespaces (unique names, deleted on drop, even on failure): a bridge,
//! a client, the director (the program attached to its `eth0` as rvsd
//! attaches it, the DR real server's egress ifindex set as rvsd sets it)
//! and one DR real server. The client's SYN and handshake ACK are captured
//! with an AF_PACKET socket as they leave the client, and the same packets
//! as they reach the real server (the director's XDP_TX output). Needs
//! root, `ip` and `ethtool`; skips otherwise.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::socket::{self, AddressFamily, LinkAddr, SockFlag, SockProtocol, SockType};
use rvs_xdp::action;
use rvs_xdp::maps::{self, Dest, PROTO_TCP, SvcKey, fwd};
use rvs_xdp::own_mac::{OwnMacs, link_mac};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 100);
const PORT: u16 = 80;
const T: Duration = Duration::from_secs(5);
/// `PACKET_OUTGOING`: a frame this host sent.
const PACKET_OUTGOING: u8 = 4;

/// Run a command; panic with its output when it fails.
fn sh(args: &[&str]) {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The namespaces of one test, deleted on drop.
struct Bed {
    prefix: String,
    namespaces: Vec<String>,
    hosts: u8,
}

impl Bed {
    fn new(prefix: &str) -> Bed {
        let mut bed = Bed {
            prefix: prefix.to_owned(),
            namespaces: Vec::new(),
            hosts: 0,
        };
        let sw = bed.add_ns("sw");
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"]);
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
        bed
    }

    fn add_ns(&mut self, role: &str) -> String {
        let ns = format!("{}-{role}", self.prefix);
        sh(&["ip", "netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    /// Host `role` with `cidr` on `eth0` (MAC 02:88:00:00:00:NN, checksum
    /// offload off: it does not survive XDP forwarding between veths);
    /// returns (namespace, MAC, bridge port).
    fn host(&mut self, role: &str, cidr: &str) -> (String, [u8; 6], String) {
        let ns = self.add_ns(role);
        self.hosts += 1;
        let mac = [0x02, 0x88, 0, 0, 0, self.hosts];
        let port = format!("p{}", self.hosts);
        let sw = format!("{}-sw", self.prefix);
        let mac_s = rvs_xdp::own_mac::mac_string(&mac);
        sh(&[
            "ip", "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &ns, "address", &mac_s,
        ]);
        sh(&["ip", "-n", &sw, "link", "set", &port, "master", "br0", "up"]);
        sh(&["ip", "-n", &ns, "addr", "add", cidr, "dev", "eth0"]);
        sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        sh(&[
            "ip", "netns", "exec", &ns, "ethtool", "-K", "eth0", "tx", "off",
        ]);
        (ns, mac, port)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Spawn `f` on a thread inside namespace `ns`.
fn spawn_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("netns file");
        nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

fn join<T>(h: JoinHandle<T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// An AF_PACKET socket for every frame of the namespace, with a short
/// receive timeout.
fn packet_socket() -> OwnedFd {
    let fd = socket::socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::empty(),
        SockProtocol::EthAll,
    )
    .expect("AF_PACKET socket");
    socket::setsockopt(
        &fd,
        socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(0, 100_000),
    )
    .expect("SO_RCVTIMEO");
    fd
}

/// The TCP flags of an untagged IPv4/TCP frame to VIP:PORT, else None.
fn to_vip(f: &[u8]) -> Option<u8> {
    if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[23] != 6 || f[30..34] != VIP.octets() {
        return None;
    }
    let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
    if f.len() < l4 + 14 || f[l4 + 2..l4 + 4] != PORT.to_be_bytes() {
        return None;
    }
    Some(f[l4 + 13])
}

/// Frames to VIP:PORT read from `fd` (outgoing ones only when `outgoing`)
/// until a SYN and a pure ACK were seen or `T` passed.
fn capture(fd: &OwnedFd, outgoing: bool) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + T;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 65536];
    let done = |g: &[Vec<u8>]| {
        g.iter().any(|f| to_vip(f) == Some(0x02)) && g.iter().any(|f| to_vip(f) == Some(0x10))
    };
    while Instant::now() < deadline && !done(&got) {
        let Ok((n, from)) = socket::recvfrom::<LinkAddr>(fd.as_raw_fd(), &mut buf) else {
            continue;
        };
        let out = from.is_some_and(|a| a.pkttype() == PACKET_OUTGOING);
        if out == outgoing && to_vip(&buf[..n]).is_some() {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

fn first(frames: &[Vec<u8>], flags: u8) -> Vec<u8> {
    frames
        .iter()
        .find(|f| to_vip(f) == Some(flags))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no frame with TCP flags {flags:#x} in {} captured",
                frames.len()
            )
        })
}

/// What the director thread reports for one replayed frame.
#[derive(Debug)]
struct Replay {
    /// With the ingress interface in the context.
    on_ingress: rvs_xdp::RunResult,
    /// Without a context (the kernel's default ingress: loopback).
    no_ctx: u32,
    /// The same frame sent to another host's MAC, on the ingress.
    foreign: rvs_xdp::RunResult,
}

#[test]
fn a_frame_replayed_on_the_attached_program_gives_what_the_wire_saw() {
    let test = "a_frame_replayed_on_the_attached_program_gives_what_the_wire_saw";
    if !root_or_skip(test) {
        return;
    }
    if !rvs_testbed::require_tools(test, &["ip", "ethtool"]) {
        return;
    }
    let mut bed = Bed::new(&format!("rvsw{}", std::process::id()));
    let (c_ns, c_mac, _) = bed.host("c", "10.88.0.10/24");
    let (dir_ns, dir_mac, dir_port) = bed.host("dir", "10.88.0.2/24");
    let (rs_ns, rs_mac, _) = bed.host("r0", "10.88.0.11/24");
    sh(&[
        "ip",
        "-n",
        &dir_ns,
        "addr",
        "add",
        "10.88.0.100/32",
        "dev",
        "eth0",
    ]);
    sh(&[
        "ip",
        "-n",
        &rs_ns,
        "addr",
        "add",
        "10.88.0.100/32",
        "dev",
        "lo",
    ]);
    for k in [
        "net.ipv4.conf.all.arp_ignore=1",
        "net.ipv4.conf.all.arp_announce=2",
    ] {
        sh(&["ip", "netns", "exec", &rs_ns, "sysctl", "-qw", k]);
    }
    // A veth delivers its peer's XDP_TX only when it has an XDP program
    // itself: the decapsulator with no VIPs passes everything.
    let sw = format!("{}-sw", bed.prefix);
    join(spawn_in(&sw, move || {
        let mut d = rvs_xdp::decap::Decap::load().expect("decap loads");
        d.attach_persistent(&dir_port)
            .expect("XDP on the bridge port");
    }));

    // The real server: greets every connection, then reads to EOF.
    let server = spawn_in(&rs_ns, || {
        let l = TcpListener::bind(("0.0.0.0", PORT)).expect("listen");
        l.set_nonblocking(true).expect("nonblocking");
        let deadline = Instant::now() + 3 * T;
        while Instant::now() < deadline {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).expect("blocking");
                    s.set_read_timeout(Some(T)).expect("timeout");
                    let _ = s.write_all(b"rs0\n");
                    let _ = s.read_to_end(&mut Vec::new());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });

    // The director, loaded and attached as rvsd does (the real server's
    // egress is eth0 with its ifindex; attach owns eth0's MAC).
    let (ready_tx, ready_rx) = mpsc::channel();
    let (frames_tx, frames_rx) = mpsc::channel::<Vec<Vec<u8>>>();
    let director = spawn_in(&dir_ns, move || {
        let mut lb = Lb::new(test).expect("root");
        lb.l.set_own_macs(&OwnMacs::new()).expect("empty table");
        let rs = Rs::new(Ipv4Addr::new(10, 88, 0, 11).into(), fwd::DR, rs_mac);
        lb.service(0, SvcKey::new(PROTO_TCP, VIP.into(), PORT), "rr", 0, &[rs]);
        let (ifindex, mac) = link_mac("eth0").expect("eth0");
        assert_eq!(mac, dir_mac);
        lb.l.set_dest(
            Lb::dest_index(0, 0),
            &Dest {
                addr: maps::addr16(Ipv4Addr::new(10, 88, 0, 11).into()),
                family: maps::AF_INET,
                method: fwd::DR,
                weight: 1,
                ifindex,
                mac: rs_mac,
                smac: dir_mac,
                ..Dest::default()
            },
        )
        .expect("dest");
        lb.l.attach("eth0", None).expect("attach");
        assert_eq!(
            lb.l.own_macs().expect("own MACs").entries(),
            &[(ifindex, dir_mac)],
            "attach owns the interface's MAC"
        );
        ready_tx.send(()).expect("ready");
        let frames = frames_rx.recv().expect("frames to replay");
        frames
            .iter()
            .map(|f| {
                let on_ingress = lb.l.run_on(f, 1, ifindex).expect("run with ctx_in");
                let no_ctx = lb.l.run(f, 1).expect("run without ctx").action;
                let foreign =
                    lb.l.run_on(&with_macs(f, rs_mac, c_mac), 1, ifindex)
                        .expect("run");
                Replay {
                    on_ingress,
                    no_ctx,
                    foreign,
                }
            })
            .collect::<Vec<_>>()
    });
    ready_rx.recv_timeout(T).expect("director attached");

    // Capture at the real server (what the director put on the wire)...
    let (rs_ready_tx, rs_ready_rx) = mpsc::channel();
    let at_rs = spawn_in(&rs_ns, move || {
        let fd = packet_socket();
        rs_ready_tx.send(()).expect("ready");
        capture(&fd, false)
    });
    rs_ready_rx
        .recv_timeout(T)
        .expect("capture at the real server");
    // ... and at the client, around one real connection.
    let at_client = spawn_in(&c_ns, || {
        let fd = packet_socket();
        let to = SocketAddr::from((VIP, PORT));
        let deadline = Instant::now() + 2 * T;
        let mut s = loop {
            // The first SYN may race the bridge's learning: retry.
            match TcpStream::connect_timeout(&to, Duration::from_millis(500)) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("connect to the VIP: {e}"),
                Err(_) => {}
            }
        };
        s.set_read_timeout(Some(T)).expect("timeout");
        let mut greeting = [0u8; 4];
        s.read_exact(&mut greeting).expect("greeting");
        assert_eq!(&greeting, b"rs0\n");
        (capture(&fd, true), s)
    });
    let (sent, stream) = join(at_client);
    let seen = join(at_rs);
    let syn = first(&sent, 0x02);
    let ack = first(&sent, 0x10);
    // The wire's copy of each: the same IP packet, as the real server got it.
    let on_wire = |f: &[u8]| -> Vec<u8> {
        seen.iter()
            .find(|g| g[14..] == f[14..])
            .cloned()
            .unwrap_or_else(|| panic!("the real server never got {f:02x?}"))
    };
    let (syn_wire, ack_wire) = (on_wire(&syn), on_wire(&ack));
    assert_eq!(syn_wire, with_macs(&syn, rs_mac, dir_mac), "the wire: DR");

    frames_tx
        .send(vec![syn.clone(), ack.clone()])
        .expect("send");
    let replays = join(director);
    drop(stream);
    join(server);
    for ((name, wire), r) in [("SYN", &syn_wire), ("ACK", &ack_wire)]
        .iter()
        .zip(&replays)
    {
        assert_eq!(r.on_ingress.action, action::TX, "{name} replayed: {r:?}");
        assert_eq!(&r.on_ingress.data, *wire, "{name}: the wire's frame");
        // Without the ingress interface the run is not the wire's: the
        // kernel makes the loopback device the ingress, where the director
        // owns no MAC, so the frame is not its own (before the MAC filter
        // it was redirected to eth0, the real server's egress, instead of
        // sent back with XDP_TX).
        assert_eq!(r.no_ctx, action::PASS, "{name} without ctx_in");
        // Sent to another host's MAC: not the director's.
        assert_eq!(r.foreign.action, action::PASS, "{name} to another MAC");
    }
}
