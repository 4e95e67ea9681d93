//! Failover proven with data: two `rvsd --dataplane xdp` directors running
//! keepalived.conf's VRRP and `lvs_sync_daemon` on one segment, real
//! servers behind them (DR, or one-arm NAT whose default gateway is a
//! second virtual address, or FULLNAT on the same segment whose local
//! address is a second virtual address, so the real servers' replies to it
//! reach whichever director is master), and a client streaming checksummed data
//! through the VIP to an echo server at a bounded rate. Halfway through,
//! the master fails (its link goes down, or it is SIGKILLed); the backup
//! takes over with the synced flow, and the stream must complete
//! byte-identical without a reset. The longest gap in the echoed stream is
//! printed (BENCHMARKS.md).
//!
//! FULLNAT: the real server must see the same peer (local address and
//! port) before and after the failover, or the connection breaks there:
//! the sync carries the pair (rvs's optional record option) and the backup
//! loads the flow with it. Checked: B lists the pair A chose before the
//! failure, the real server accepted exactly one connection from the local
//! address, from that pair, and the stream completes.
//!
//! The SIGKILL variants need the XDP program and its maps to outlive rvsd
//! (pinned, one `--instance` per director): without them the dead master's
//! kernel, which still holds the VIP until the backup's gratuitous ARP,
//! answers the flow with a reset.
//!
//! Also here: bulk resync — a master restarted with empty tables while
//! 1,000 connections are live through the backup gets them from the backup
//! before it takes over again, and they keep working.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{Pinned, RVSD, Rvsadm, TempDir, within};
use crate::netns::{Bed, Host};
use crate::streams::Pattern;

const VIP: &str = "10.77.0.100";
/// Bytes streamed through the VIP.
const TOTAL: u64 = 200 << 20;
/// Their rate (bytes per second): 200 MB in about 13 s.
const RATE: u64 = 15 << 20;
/// Bytes per write (the pattern's unit: each chunk starts with its offset).
const CHUNK: usize = 64 << 10;
/// The pattern's random block.
const BLOCK: usize = 1 << 20;

fn vip() -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("vip"), 80)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Dr,
    Nat,
    /// FULLNAT (`lb_kind FNAT`), the local address a virtual address.
    Fnat,
}

/// FULLNAT's local address: a second virtual address of the instance.
const LADDR: &str = "10.77.0.200";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// SIGKILL of the master's rvsd.
    Kill,
    /// The master's link to the segment goes down.
    LinkDown,
}

/// One director: its namespace, its rvsd (started and stopped by the
/// test) under a unique `--instance`, whose pins are removed on drop.
struct Director {
    host: Host,
    conf: PathBuf,
    rvsd: Pinned,
}

/// The rvsd the directors run: this build's, or RVS_FAILOVER_RVSD (another
/// build, for the before/after figures in docs/benchmarks-history.md).
fn rvsd() -> String {
    std::env::var("RVS_FAILOVER_RVSD").unwrap_or_else(|_| RVSD.to_owned())
}

impl Director {
    /// rvsd (XDP) in the director's namespace ([`Pinned`]).
    fn start(&mut self) {
        let launch = self
            .rvsd
            .launch("xdp")
            .bin(rvsd())
            .arg("-f")
            .arg(&self.conf);
        self.rvsd.start(launch);
    }

    /// SIGTERM, and wait (bounded) for rvsd to exit.
    fn term(&mut self) {
        self.rvsd.stop("-TERM");
    }

    fn has_vip(&self) -> bool {
        crate::netns::has_addr(&self.host, VIP)
    }

    /// The local address:port `rvsadm -Lcn` lists for the ESTABLISHED
    /// connection from `client` to the VIP, if it lists one with a pair.
    fn listed_local(&self, client: SocketAddr) -> Option<SocketAddr> {
        let out = self.rvsd.out("-Lcn");
        let line = out.lines().find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            l.contains("ESTABLISHED")
                && w.contains(&client.to_string().as_str())
                && w.contains(&format!("{VIP}:80").as_str())
        })?;
        // pro expire state source virtual local destination
        let w: Vec<&str> = line.split_whitespace().collect();
        (w.len() == 7).then(|| w[5].parse().ok()).flatten()
    }

    /// ESTABLISHED entries to the VIP in `rvsadm -Lcn`.
    fn established(&self) -> usize {
        self.rvsd
            .out("-Lcn")
            .lines()
            .filter(|l| l.contains("ESTABLISHED") && l.contains(&format!("{VIP}:80")))
            .count()
    }
}

fn conf(mode: Mode, prio: u8) -> String {
    let (kind, servers, gateway) = match mode {
        Mode::Dr => ("DR", &["10.77.0.11", "10.77.0.12"][..], ""),
        Mode::Nat => (
            "NAT",
            &["10.78.0.11", "10.78.0.12"][..],
            "        10.78.0.1/32\n",
        ),
        // One real server: pairs are per real server, and the test makes
        // two connections collide on one (see `colliding_ports`).
        Mode::Fnat => ("FNAT", &["10.77.0.11"][..], ""),
    };
    let (group, laddr_vip, pool) = if mode == Mode::Fnat {
        (
            format!("local_address_group lg {{\n    {LADDR}\n}}\n"),
            format!("        {LADDR}/32\n"),
            "    laddr_group_name lg\n",
        )
    } else {
        (String::new(), String::new(), "")
    };
    let rs: String = servers
        .iter()
        .map(|a| format!("    real_server {a} 80 {{\n        weight 1\n    }}\n"))
        .collect();
    format!(
        "global_defs {{
    lvs_sync_daemon eth0 VI_1
}}
{group}vrrp_instance VI_1 {{
    interface eth0
    virtual_router_id 51
    priority {prio}
    advert_int 1
    virtual_ipaddress {{
        {VIP}/32
{gateway}{laddr_vip}    }}
}}
virtual_server {VIP} 80 {{
    lb_algo rr
    lb_kind {kind}
    protocol TCP
{pool}{rs}}}
"
    )
}

/// An echo server without an idle limit shorter than a test (60 s), on
/// `host`:80, until `stop`; the peer of every connection it accepts is
/// added to `peers`.
fn echo_server(host: &Host, stop: Arc<AtomicBool>, peers: Arc<Mutex<Vec<SocketAddr>>>) {
    let listener = host.run(|| TcpListener::bind("0.0.0.0:80").expect("bind :80"));
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, peer)) => {
                    if let Ok(mut p) = peers.lock() {
                        p.push(peer);
                    }
                    std::thread::spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                        let mut buf = vec![0u8; 64 << 10];
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
}

/// Client, two directors (A: priority 150, B: 100; not started), two real
/// servers running [`echo_server`].
struct Pair {
    bed: Bed,
    client: Host,
    a: Director,
    b: Director,
    stop: Arc<AtomicBool>,
    /// The peers the real servers' echo servers accepted.
    peers: Arc<Mutex<Vec<SocketAddr>>>,
    _dir: TempDir,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.a.rvsd.kill();
        self.b.rvsd.kill();
    }
}

fn pair(test: &str, mode: Mode) -> Option<Pair> {
    let mut bed = Bed::new(test)?;
    let client = bed.host("c", "10.77.0.10/24");
    let dir = TempDir::new("failover");
    let mut director = |name: &str, addr: &str, nat_addr: &str, prio: u8| {
        let h = bed.host(name, addr);
        bed.xdp_pass_on_port(&h);
        if mode == Mode::Fnat {
            h.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
        }
        if mode == Mode::Nat {
            h.exec(&["ip", "addr", "add", nat_addr, "dev", "eth0"]);
            h.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
            // The new master has no neighbour entry for the client: the
            // program's first rewritten replies find it unresolved
            // (NO_NEIGH) and the kernel it passes them to drops them as
            // martians (their source, the VIP, is local). The program
            // reports the missing next hop and the plane's resolver makes
            // the kernel resolve it, so no accept_local is needed (issue
            // 13). RVS_FAILOVER_ACCEPT_LOCAL=1 sets it anyway, for the
            // comparison in docs/benchmarks-history.md (the kernel then forwards those
            // replies and resolves the client itself).
            if std::env::var_os("RVS_FAILOVER_ACCEPT_LOCAL").is_some() {
                h.exec(&["sysctl", "-qw", "net.ipv4.conf.all.accept_local=1"]);
                h.exec(&["sysctl", "-qw", "net.ipv4.conf.eth0.accept_local=1"]);
                h.exec(&["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"]);
                h.exec(&["sysctl", "-qw", "net.ipv4.conf.eth0.rp_filter=0"]);
            }
        }
        Director {
            rvsd: Pinned::new(
                &h.ns,
                rvs_testbed::unique_name(&format!("fo{name}")),
                dir.path().join(format!("{name}.sock")),
            ),
            host: h,
            conf: dir.write(&format!("{name}.conf"), &conf(mode, prio)),
        }
    };
    let a = director("a", "10.77.0.2/24", "10.78.0.2/24", 150);
    let b = director("b", "10.77.0.3/24", "10.78.0.3/24", 100);
    let stop = Arc::new(AtomicBool::new(false));
    let peers = Arc::new(Mutex::new(Vec::new()));
    for i in 0..2u8 {
        let h = match mode {
            Mode::Fnat => bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i)),
            Mode::Dr => {
                let h = bed.host(&format!("r{i}"), &format!("10.77.0.{}/24", 11 + i));
                crate::netns::realserver(&h, VIP, &["--mode", "dr"]);
                h
            }
            Mode::Nat => {
                let h = bed.host(&format!("r{i}"), &format!("10.78.0.{}/24", 11 + i));
                h.exec(&["ip", "route", "add", "default", "via", "10.78.0.1"]);
                h
            }
        };
        echo_server(&h, stop.clone(), peers.clone());
        if mode == Mode::Fnat {
            // Resolve both directors' neighbour entries for the real
            // server before traffic (the program passes a packet whose
            // next hop is unresolved to the kernel, which drops one from a
            // local address): a connection from each, accepted by the
            // echo server (from the director's own address: not counted).
            // The client's too (refused by it; only the ARP matters).
            for d in [&a, &b] {
                for to in [format!("10.77.0.{}:80", 11 + i), "10.77.0.10:80".to_owned()] {
                    let to: SocketAddr = to.parse().expect("address");
                    let _ = d
                        .host
                        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(3)));
                }
            }
        }
    }
    Some(Pair {
        bed,
        client,
        a,
        b,
        stop,
        peers,
        _dir: dir,
    })
}

impl Pair {
    /// Start both; wait until A is master (VIP, master sync daemon) and B
    /// runs the backup daemon.
    fn start(&mut self) {
        self.a.start();
        self.b.start();
        within("A is master, B backup", Duration::from_secs(15), || {
            self.a.has_vip()
                && !self.b.has_vip()
                && self
                    .a
                    .rvsd
                    .out("-L --daemon")
                    .starts_with("master sync daemon")
                && self
                    .b
                    .rvsd
                    .out("-L --daemon")
                    .starts_with("backup sync daemon")
        });
    }
}

/// What became of the stream.
#[derive(Debug)]
struct Outcome {
    /// Bytes echoed back identical, in order.
    good: u64,
    /// The longest time between two reads of echoed data.
    longest_gap: Duration,
    /// The first error (a reset, a mismatch, a timeout), if any.
    error: Option<String>,
    /// How long the stream took.
    took: Duration,
}

/// Stream [`TOTAL`] bytes at [`RATE`] through the VIP from `client` and
/// read them echoed back; `written` follows the writer's progress.
/// A connection from `client` to the VIP, from client port `cport` (any
/// when 0).
fn connect_vip(client: &Host, cport: u16) -> std::io::Result<TcpStream> {
    let vip = vip();
    client.run(move || {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        let from = SocketAddr::new("0.0.0.0".parse().expect("any"), cport);
        s.bind(&from.into())?;
        s.connect_timeout(&vip.into(), Duration::from_secs(5))?;
        Ok(s.into())
    })
}

/// FULLNAT: two client ports whose connections' first candidate pair in
/// the one-address pool (the program's pool walk, predicted by
/// `fnat_candidate`) is the same, so the second one's pair is not the one
/// a fresh allocation (a backup without the synced pair) would give it.
fn colliding_ports() -> (u16, u16) {
    let client = "10.77.0.10".parse().expect("client");
    let first = |port| {
        rvs_xdp::maps::fnat_candidate(
            client,
            port,
            80,
            1,
            rvs_xdp::maps::FNAT_PORT_MIN,
            rvs_xdp::maps::FNAT_PORT_MAX,
            0,
        )
    };
    let mut seen = std::collections::HashMap::new();
    for port in 20000..=60000u16 {
        if let Some(other) = seen.insert(first(port), port) {
            return (other, port);
        }
    }
    panic!("no two client ports with the same first candidate pair");
}

fn stream(client: &Host, cport: u16, written: Arc<AtomicU64>) -> std::thread::JoinHandle<Outcome> {
    let client = client.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        let fail = |e: String| Outcome {
            good: 0,
            longest_gap: Duration::ZERO,
            error: Some(e),
            took: start.elapsed(),
        };
        let s = match connect_vip(&client, cport) {
            Ok(s) => s,
            Err(e) => return fail(format!("connect: {e}")),
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let mut w = match s.try_clone() {
            Ok(w) => w,
            Err(e) => return fail(format!("clone: {e}")),
        };
        let pattern = Arc::new(Pattern::new(BLOCK, CHUNK, 0x9E37_79B9_7F4A_7C15));
        let p2 = pattern.clone();
        let writer = std::thread::spawn(move || -> Result<(), String> {
            let t0 = Instant::now();
            let chunks = TOTAL / CHUNK as u64;
            for k in 0..chunks {
                let due = t0 + Duration::from_nanos(k * CHUNK as u64 * 1_000_000_000 / RATE);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                w.write_all(&p2.chunk(k))
                    .map_err(|e| format!("write at {}: {e}", k * CHUNK as u64))?;
                written.store((k + 1) * CHUNK as u64, Ordering::Relaxed);
            }
            w.shutdown(Shutdown::Write).map_err(|e| e.to_string())
        });
        let mut r = s;
        let mut buf = vec![0u8; CHUNK];
        let (mut good, mut longest, mut last) = (0u64, Duration::ZERO, None::<Instant>);
        let mut cur = (u64::MAX, Vec::new());
        let mut error = None;
        while good < TOTAL {
            let n = match r.read(&mut buf) {
                Ok(0) => {
                    error = Some(format!("EOF after {good} bytes"));
                    break;
                }
                Ok(n) => n,
                Err(e) => {
                    error = Some(format!("read after {good} bytes: {e}"));
                    break;
                }
            };
            let now = Instant::now();
            if let Some(l) = last {
                longest = longest.max(now - l);
            }
            last = Some(now);
            // Compare piecewise, chunk by chunk.
            let mut i = 0;
            while i < n {
                let off = good + i as u64;
                let k = off / CHUNK as u64;
                if cur.0 != k {
                    cur = (k, pattern.chunk(k));
                }
                let within = (off % CHUNK as u64) as usize;
                let len = (CHUNK - within).min(n - i);
                if buf[i..i + len] != cur.1[within..within + len] {
                    error = Some(format!("bytes differ at offset {off}"));
                    break;
                }
                i += len;
            }
            if error.is_some() {
                break;
            }
            good += n as u64;
        }
        let wrote = writer
            .join()
            .unwrap_or_else(|_| Err("writer panicked".into()));
        if error.is_none()
            && let Err(e) = wrote
        {
            error = Some(e);
        }
        Outcome {
            good,
            longest_gap: longest,
            error,
            took: start.elapsed(),
        }
    })
}

fn failover(test: &str, mode: Mode, failure: Failure) {
    let Some(mut p) = pair(test, mode) else {
        return;
    };
    p.start();
    // FULLNAT: first an idle connection that takes, on A, the pair the
    // stream's would otherwise get (the first candidate of both): the
    // stream's pair on A is then one B would not choose by itself.
    let (blocker_port, cport) = if mode == Mode::Fnat {
        colliding_ports()
    } else {
        (0, 0)
    };
    let _blocker = (mode == Mode::Fnat).then(|| {
        let c = connect_vip(&p.client, blocker_port).expect("the idle connection");
        within("B has the idle connection", Duration::from_secs(10), || {
            p.b.established() >= 1
        });
        c
    });
    let flows = if mode == Mode::Fnat { 2 } else { 1 };
    let written = Arc::new(AtomicU64::new(0));
    let t = stream(&p.client, cport, written.clone());
    // The backup knows the flow (synced) before the master fails.
    within("B has the synced flow", Duration::from_secs(10), || {
        p.b.established() >= flows
    });
    // FULLNAT: with the pair A gave it (rvs's sync option); checked after
    // the stream, whose fate is the first thing to report.
    let pairs = (mode == Mode::Fnat).then(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let me = SocketAddr::new("10.77.0.10".parse().expect("client"), cport);
            let (a, b) = (p.a.listed_local(me), p.b.listed_local(me));
            if (a.is_some() && a == b) || Instant::now() >= deadline {
                break (a, b);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    within("the stream is halfway", Duration::from_secs(30), || {
        written.load(Ordering::Relaxed) >= TOTAL / 2
    });
    let failed_at = Instant::now();
    match failure {
        Failure::Kill => p.a.rvsd.kill(),
        Failure::LinkDown => {
            let port = p.a.host.port.clone();
            crate::netns::sh(&["ip", "-n", &p.bed.sw, "link", "set", &port, "down"]);
        }
    }
    let took = within("B takes over", Duration::from_secs(10), || p.b.has_vip());
    let deadline = Instant::now() + Duration::from_secs(45);
    while !t.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        t.is_finished(),
        "the stream did not end within 45 s of the failure"
    );
    let o = t.join().expect("stream thread");
    println!(
        "failover {mode:?} {failure:?}: {} of {TOTAL} bytes echoed identical in {:?}; B master {:?} after the failure, stream done {:?} after it; longest gap {} ms",
        o.good,
        o.took,
        took,
        failed_at.elapsed(),
        o.longest_gap.as_millis()
    );
    assert_eq!(o.error, None, "{o:?}");
    assert_eq!(o.good, TOTAL);
    if let Some((a_pair, b_pair)) = pairs {
        let pair = a_pair.expect("A lists the connection's local pair");
        assert_eq!(b_pair, Some(pair), "B lists the pair A chose");
        let fresh = rvs_xdp::maps::fnat_candidate(
            "10.77.0.10".parse().expect("client"),
            cport,
            80,
            1,
            rvs_xdp::maps::FNAT_PORT_MIN,
            rvs_xdp::maps::FNAT_PORT_MAX,
            0,
        )
        .1;
        assert_ne!(
            pair.port(),
            fresh,
            "the idle connection held the stream's first candidate on A"
        );
        // The real servers saw one connection from the local address, from
        // the pair A chose: the same peer all along.
        let peers = p.peers.lock().map(|v| v.clone()).unwrap_or_default();
        let from_laddr: Vec<&SocketAddr> = peers
            .iter()
            .filter(|a| a.ip().to_string() == LADDR)
            .collect();
        println!(
            "failover {mode:?} {failure:?}: local pair {pair}, real servers accepted {from_laddr:?}"
        );
        assert_eq!(from_laddr.len(), 2, "accepted: {peers:?}");
        assert!(from_laddr.contains(&&pair), "accepted: {peers:?}");
    }
}

#[test]
fn failover_dr_master_link_down_loses_no_byte() {
    failover(
        "failover_dr_master_link_down_loses_no_byte",
        Mode::Dr,
        Failure::LinkDown,
    );
}

#[test]
fn failover_nat_master_link_down_loses_no_byte() {
    failover(
        "failover_nat_master_link_down_loses_no_byte",
        Mode::Nat,
        Failure::LinkDown,
    );
}

#[test]
fn failover_fullnat_master_link_down_keeps_the_local_pair() {
    failover(
        "failover_fullnat_master_link_down_keeps_the_local_pair",
        Mode::Fnat,
        Failure::LinkDown,
    );
}

#[test]
fn failover_dr_master_sigkill_loses_no_byte() {
    failover(
        "failover_dr_master_sigkill_loses_no_byte",
        Mode::Dr,
        Failure::Kill,
    );
}

#[test]
fn failover_nat_master_sigkill_loses_no_byte() {
    failover(
        "failover_nat_master_sigkill_loses_no_byte",
        Mode::Nat,
        Failure::Kill,
    );
}

/// Raise this process's open-file limit (1,000 client sockets and as many
/// server ones).
fn raise_nofile() {
    let pid = std::process::id().to_string();
    let _ = Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=16384:16384"])
        .status();
}

#[test]
fn bulk_resync_gives_a_restarted_master_the_live_connections() {
    const N: usize = 1000;
    let test = "bulk_resync_gives_a_restarted_master_the_live_connections";
    let Some(mut p) = pair(test, Mode::Dr) else {
        return;
    };
    raise_nofile();
    p.start();
    // A stops (resigns); B takes over. Its XDP plane outlives it
    // (pinned): removed, so A comes back with empty tables.
    p.a.term();
    p.a.rvsd.remove_pins();
    within("B takes over", Duration::from_secs(10), || p.b.has_vip());
    let mut conns = Vec::with_capacity(N);
    for i in 0..N {
        let to = vip();
        let c = p
            .client
            .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connection {i} through B: {e}"));
        conns.push(c);
    }
    within("B lists them", Duration::from_secs(15), || {
        p.b.established() >= N
    });
    // A comes back with empty tables and takes over again (preempt).
    p.a.start();
    let took = within("A takes over again", Duration::from_secs(20), || {
        p.a.has_vip() && !p.b.has_vip()
    });
    let listed = p.a.established();
    println!("bulk resync: A master again after {took:?}, lists {listed} of {N} connections");
    assert!(
        listed >= N,
        "A lists {listed} of {N}:\n{}",
        p.a.rvsd.out("-Lcn")
    );
    // And they keep working through A.
    let mut failed = Vec::new();
    for (i, c) in conns.iter_mut().enumerate() {
        let msg = format!("ping {i}\n");
        let mut echoed = Vec::new();
        let r = (|| {
            c.set_read_timeout(Some(Duration::from_secs(5)))?;
            c.write_all(msg.as_bytes())?;
            echoed.resize(msg.len(), 0);
            c.read_exact(&mut echoed)
        })();
        if r.is_err() || echoed != msg.as_bytes() {
            failed.push((i, r.err().map(|e| e.to_string())));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {N} failed after the takeover: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
}
