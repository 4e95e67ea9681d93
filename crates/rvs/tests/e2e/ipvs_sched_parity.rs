//! Scheduling parity with a real kernel IPVS (issue 29): the same services
//! on Debian's kernel director (rvs-testbed's `ipvs_vm`) and on rvsd — its
//! XDP plane and its proxy plane — with the same real servers added in the
//! same order, driven by the same connections (the same client addresses
//! and ports, in the same order); the real servers answer with their name,
//! and the names each director's clients got are compared, per scheduler.
//!
//! Three copies of one segment (same addresses in each), one per director,
//! on three bridges of the switch namespace:
//!
//! ```text
//!  brk: guest (kernel IPVS, DR)   ck  rk0..rk4
//!  br0: dx (rvsd --dataplane xdp, DR)  cx  rx0..rx4
//!  brp: dp (rvsd --dataplane proxy, -m) cp  rp0..rp4
//!  director 10.77.0.2/16, VIPs 10.77.1.N/32 on its eth0 (one per case);
//!  real servers 10.77.0.11..15/16 serving their name on :80 (the DR
//!  copies hold the VIPs on lo, arp_ignore/arp_announce);
//!  client 10.77.0.10/16 plus 10.77.{16..31}.{10..17} (16 subnets x 8).
//! ```
//!
//! Per case (one service each): sh (plain, `sh-port`, `sh-fallback` with a
//! quiesced server), mh (plain, `mh-port`, `mh-fallback`): every client
//! once, each from its own port; persistence (`-p`, and `-p -M
//! 255.255.255.0` over wlc): every client twice; rr, wrr (unequal
//! weights), fo, wlc over closed connections, dh: a sequence of connections
//! closed in turn; lc, wlc, sed, nq, ovf, lblc, lblcr: a sequence of
//! connections held open until the last one, so the counts decide. A short
//! connection closes gracefully (half-close, the server's EOF read) before
//! the next one starts, so every director has seen it close.
//!
//! Edit cases ([`EDITS`]): a service driven by short connections, then
//! an ipvsadm command applied to every director, then more connections:
//! `-e` of a wrr real server with what it already has (the kernel's
//! `upd_dest` runs all the same and puts wrr's mark back at the list
//! head), `-E` naming the same scheduler with other flags (the kernel
//! keeps the scheduler's state), and `-E` switching rr to wrr and wrr to
//! rr (the kernel binds the new scheduler afresh).
//!
//! `twos` is not compared: it draws at random (and Debian's kernel has no
//! `CONFIG_IP_VS_TWOS`). Exceptions to parity would be named in
//! [`EXCEPTIONS`] with the reason; there are none: every case on both
//! planes must be identical (the XDP plane's counting schedulers too: its
//! flow walk no longer overwrites counts the program changed while the
//! walk ran). About 50 s (one guest boot, about 1,500 connections per
//! director) on an idle machine.

use std::io::Read;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rvs_testbed::ipvs_vm::{self, IpvsVm, IpvsVmOpts};
use rvs_testbed::{Host, Server, echo};

use crate::harness::{Launch, Rvsadm, TempDir};
use crate::netns::{Bed, connect, sh};

/// Real servers per service.
const RS: usize = 5;
/// Client subnets and addresses per subnet.
const SUBNETS: u8 = 16;
const PER_SUBNET: u8 = 8;
/// The bound of a connection attempt and of a server's answer (the
/// emulated guest is slow on a loaded machine; a lost SYN is resent
/// after 1 s, 3 s, ...).
const CONNECT: Duration = Duration::from_secs(15);

/// How a case drives its service.
#[derive(Clone, Copy, Debug)]
enum Drive {
    /// Every client once, from a port of its own: whom each reaches.
    Clients,
    /// Every client once, then every client again from another port
    /// (persistence): both passes.
    Twice,
    /// `n` connections from one client, each closed before the next.
    Short(usize),
    /// `n` connections from one client, all held open until the last.
    Held(usize),
}

/// One service and how it is driven.
#[derive(Clone, Copy, Debug)]
struct Case {
    name: &'static str,
    /// ipvsadm's scheduling options.
    sched: &'static str,
    /// Weights of rs0..rs4 (added in that order: the kernel's list is
    /// rs4 first).
    weights: [u32; RS],
    /// A real server quiesced (weight 0) after all were added: the subject
    /// of the fallback flags.
    quiesce: Option<usize>,
    drive: Drive,
}

const W: [u32; RS] = [2, 5, 1, 4, 3];
const EQ: [u32; RS] = [1; RS];

const fn case(name: &'static str, sched: &'static str, weights: [u32; RS], drive: Drive) -> Case {
    Case {
        name,
        sched,
        weights,
        quiesce: None,
        drive,
    }
}

const CASES: [Case; 20] = [
    case("rr", "-s rr", EQ, Drive::Short(12)),
    case("wrr", "-s wrr", W, Drive::Short(30)),
    case("lc", "-s lc", EQ, Drive::Held(12)),
    case("wlc", "-s wlc", W, Drive::Held(20)),
    case("wlc closed", "-s wlc", W, Drive::Short(20)),
    case("sed", "-s sed", W, Drive::Held(20)),
    case("nq", "-s nq", W, Drive::Held(20)),
    case("fo", "-s fo", [2, 5, 1, 5, 3], Drive::Short(6)),
    case("ovf", "-s ovf", W, Drive::Held(12)),
    case("lblc", "-s lblc", W, Drive::Held(20)),
    case("lblcr", "-s lblcr", W, Drive::Held(20)),
    case("dh", "-s dh", W, Drive::Short(8)),
    case("sh", "-s sh", W, Drive::Clients),
    case("sh-port", "-s sh -b sh-port", W, Drive::Clients),
    Case {
        quiesce: Some(1),
        ..case("sh-fallback", "-s sh -b sh-fallback", W, Drive::Clients)
    },
    case("mh", "-s mh", W, Drive::Clients),
    case("mh-port", "-s mh -b mh-port", W, Drive::Clients),
    Case {
        quiesce: Some(1),
        ..case("mh-fallback", "-s mh -b mh-fallback", W, Drive::Clients)
    },
    case("persistence", "-s rr -p 300", EQ, Drive::Twice),
    case(
        "persistence -M /24 (wlc)",
        "-s wlc -p 300 -M 255.255.255.0",
        EQ,
        Drive::Twice,
    ),
];

/// The command between the two runs of connections of an edit case.
#[derive(Clone, Copy, Debug)]
enum Mid {
    /// `-e` of real server `r` with its weight and method: no change.
    SameDest(usize),
    /// `-E` with these scheduling options.
    Service(&'static str),
}

/// A service driven by `before` short connections, then `mid`, then
/// `after` more (each closed before the next).
#[derive(Clone, Copy, Debug)]
struct EditCase {
    name: &'static str,
    sched: &'static str,
    /// Weights of rs0..rs4, added in that order.
    weights: [u32; RS],
    before: usize,
    mid: Mid,
    after: usize,
}

/// With weights [`W`] added one by one the kernel's wrr first gives each
/// server one connection in list order, then runs its 15-decision cycle;
/// 7 connections leave its mark inside the cycle's second pass.
const EDITS: [EditCase; 4] = [
    EditCase {
        name: "wrr, -e with no change",
        sched: "-s wrr",
        weights: W,
        before: 7,
        mid: Mid::SameDest(1),
        after: 16,
    },
    EditCase {
        name: "wrr, -E -b flag-1",
        sched: "-s wrr",
        weights: W,
        before: 7,
        mid: Mid::Service("-s wrr -b flag-1"),
        after: 12,
    },
    EditCase {
        name: "rr, -E -s wrr",
        sched: "-s rr",
        weights: W,
        before: 4,
        mid: Mid::Service("-s wrr"),
        after: 16,
    },
    EditCase {
        name: "wrr, -E -s rr",
        sched: "-s wrr",
        weights: W,
        before: 7,
        mid: Mid::Service("-s rr"),
        after: 8,
    },
];

impl EditCase {
    /// The case's command (ipvsadm syntax) on the service at `v`, real
    /// servers forwarded with `method`.
    fn command(&self, v: Ipv4Addr, method: &str) -> String {
        match self.mid {
            Mid::SameDest(r) => format!(
                "-e -t {v}:80 -r {}:80 {method} -w {}",
                rs_addr(r),
                self.weights[r]
            ),
            Mid::Service(sched) => format!("-E -t {v}:80 {sched}"),
        }
    }
}

/// Differences from the kernel tolerated (and printed) with the reason:
/// (case, plane, why). None today.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// The VIP of case `i` (edit case `j` is case `CASES.len() + j`).
fn vip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 1, i as u8 + 1)
}

/// The warm-up service's VIP (every real server, rr): connections to it
/// until each real server answered make both directors know every next hop
/// before the compared traffic.
const WARM: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 250);

fn rs_addr(r: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, 11 + r as u8)
}

/// The 128 client addresses, subnet by subnet.
fn clients() -> Vec<Ipv4Addr> {
    (0..SUBNETS)
        .flat_map(|s| (0..PER_SUBNET).map(move |a| Ipv4Addr::new(10, 77, 16 + s, 10 + a)))
        .collect()
}

/// Every VIP of the bed.
fn vips() -> Vec<Ipv4Addr> {
    (0..CASES.len() + EDITS.len())
        .map(vip)
        .chain([WARM])
        .collect()
}

/// The configuration commands (ipvsadm syntax, without the program name)
/// with forwarding flag `method`.
fn commands(method: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut service = |v: Ipv4Addr, sched: &str, weights: &[u32; RS], quiesce: Option<usize>| {
        out.push(format!("-A -t {v}:80 {sched}"));
        for (r, w) in weights.iter().enumerate() {
            out.push(format!("-a -t {v}:80 -r {}:80 {method} -w {w}", rs_addr(r)));
        }
        if let Some(q) = quiesce {
            out.push(format!("-e -t {v}:80 -r {}:80 {method} -w 0", rs_addr(q)));
        }
    };
    for (i, c) in CASES.iter().enumerate() {
        service(vip(i), c.sched, &c.weights, c.quiesce);
    }
    for (j, e) in EDITS.iter().enumerate() {
        service(vip(CASES.len() + j), e.sched, &e.weights, None);
    }
    service(WARM, "-s rr", &EQ, None);
    out
}

/// Run `ip -n NS -batch` over `lines` (written to a file in `dir`).
fn ip_batch(dir: &TempDir, ns: &str, lines: &[String]) {
    let f = dir.write(&format!("{ns}.batch"), &(lines.join("\n") + "\n"));
    sh(&["ip", "-n", ns, "-batch", &f.display().to_string()]);
}

/// One copy of the segment: its client, and its real servers' listeners.
struct World {
    client: Host,
    _servers: Vec<Server>,
}

/// The client and real servers of a copy on `bridge`; `dr`: the real
/// servers hold the VIPs on lo (DR) and do not answer ARP for them.
fn world(bed: &mut Bed, dir: &TempDir, tag: &str, bridge: &str, dr: bool) -> World {
    if bridge != "br0" {
        bed.bridge(bridge);
    }
    let client = bed.host_on(&format!("c{tag}"), bridge, "10.77.0.10/16");
    let adds: Vec<String> = clients()
        .iter()
        .map(|a| format!("addr add {a}/16 dev eth0"))
        .collect();
    ip_batch(dir, &client.ns, &adds);
    let mut servers = Vec::new();
    for r in 0..RS {
        let h = bed.host_on(&format!("r{tag}{r}"), bridge, &format!("{}/16", rs_addr(r)));
        if dr {
            let adds: Vec<String> = vips()
                .iter()
                .map(|v| format!("addr add {v}/32 dev lo"))
                .collect();
            ip_batch(dir, &h.ns, &adds);
            for k in ["all", "eth0"] {
                h.exec(&["sysctl", "-qw", &format!("net.ipv4.conf.{k}.arp_ignore=1")]);
                h.exec(&[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv4.conf.{k}.arp_announce=2"),
                ]);
            }
        }
        let l = h.run(|| TcpListener::bind("0.0.0.0:80").expect("real server bind"));
        let greeting = format!("rs{r}\n");
        // Held connections stay idle while the others are made (slowly,
        // through the emulated guest): a long idle bound.
        servers.push(Server::tcp(l, move |s, _| {
            echo(s, &greeting, Duration::from_secs(300))
        }));
    }
    World {
        client,
        _servers: servers,
    }
}

/// A director host of a copy: 10.77.0.2/16 with every VIP on eth0.
fn director(bed: &mut Bed, dir: &TempDir, role: &str, bridge: &str) -> Host {
    let d = bed.host_on(role, bridge, "10.77.0.2/16");
    let adds: Vec<String> = vips()
        .iter()
        .map(|v| format!("addr add {v}/32 dev eth0"))
        .collect();
    ip_batch(dir, &d.ns, &adds);
    d
}

/// Connect from `from` to `to` (in the calling thread's namespace) and
/// read the real server's name: the stream and the name, or `-` and why
/// and no stream when no server answered. An attempt that fails is made
/// again (twice at most) from the same address and port: the directors
/// see the same flow again (a SYN of a flow they already scheduled goes
/// where the first went), so a packet lost on a loaded machine changes no
/// decision.
fn open(from: SocketAddrV4, to: SocketAddrV4) -> (String, Option<TcpStream>) {
    let attempt = || -> std::io::Result<(String, TcpStream)> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::V4(from).into())?;
        s.connect_timeout(&SocketAddr::V4(to).into(), CONNECT)?;
        let mut s: TcpStream = s.into();
        s.set_read_timeout(Some(CONNECT))?;
        let mut name = Vec::new();
        let mut b = [0u8; 1];
        while s.read(&mut b)? == 1 && b[0] != b'\n' {
            name.push(b[0]);
        }
        if name.is_empty() {
            return Err(std::io::Error::other("closed without a name"));
        }
        Ok((String::from_utf8_lossy(&name).into_owned(), s))
    };
    let mut why = Vec::new();
    for _ in 0..3 {
        match attempt() {
            Ok((name, s)) => return (name, Some(s)),
            Err(e) => why.push(e.to_string()),
        }
    }
    (format!("-({from}: {})", why.join("; ")), None)
}

/// A connection closed gracefully before the caller goes on: half-close,
/// then the server's EOF (it echoes until EOF, then closes): the director
/// has seen the client's FIN by then.
fn short(from: SocketAddrV4, to: SocketAddrV4) -> String {
    let (name, s) = open(from, to);
    if let Some(mut s) = s {
        let _ = s.shutdown(Shutdown::Write);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    name
}

/// The address and port of connection `k` of case `i` driven by a
/// sequence of connections from one client.
fn seq(i: usize, k: usize) -> SocketAddrV4 {
    SocketAddrV4::new(clients()[0], (40_000 + i * 100 + k) as u16)
}

/// The port client `ci` uses for case `i`, pass `pass`.
fn port(i: usize, ci: usize, pass: usize) -> u16 {
    (20_000 + ci * 37 + i * 4 + pass) as u16
}

/// Drive every case in order (in the client's namespace): the names
/// answered, per case.
fn drive() -> Vec<Vec<String>> {
    let all = clients();
    CASES
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let to = SocketAddrV4::new(vip(i), 80);
            match c.drive {
                Drive::Clients => all
                    .iter()
                    .enumerate()
                    .map(|(ci, a)| short(SocketAddrV4::new(*a, port(i, ci, 0)), to))
                    .collect(),
                Drive::Twice => (0..2)
                    .flat_map(|pass| {
                        all.iter()
                            .enumerate()
                            .map(|(ci, a)| short(SocketAddrV4::new(*a, port(i, ci, pass)), to))
                            .collect::<Vec<_>>()
                    })
                    .collect(),
                Drive::Short(n) => (0..n).map(|k| short(seq(i, k), to)).collect(),
                Drive::Held(n) => {
                    let mut held = Vec::new();
                    let names = (0..n)
                        .map(|k| {
                            let (name, s) = open(seq(i, k), to);
                            held.extend(s);
                            name
                        })
                        .collect();
                    drop(held);
                    names
                }
            }
        })
        .collect()
}

/// Connections `ks` of edit case `j`, made in `client`'s namespace: the
/// names answered.
fn edit_run(client: &Host, j: usize, ks: std::ops::Range<usize>) -> Vec<String> {
    let i = CASES.len() + j;
    client.run(move || {
        let to = SocketAddrV4::new(vip(i), 80);
        ks.map(|k| short(seq(i, k), to)).collect()
    })
}

/// Drive every edit case in order on one copy: its first connections,
/// its command applied to the copy's director by `apply` (returning once
/// the director has it), its other connections. The names answered, per
/// case.
fn drive_edits(client: &Host, method: &str, apply: &dyn Fn(&str)) -> Vec<Vec<String>> {
    EDITS
        .iter()
        .enumerate()
        .map(|(j, e)| {
            let mut names = edit_run(client, j, 0..e.before);
            apply(&e.command(vip(CASES.len() + j), method));
            names.extend(edit_run(client, j, e.before..e.before + e.after));
            names
        })
        .collect()
}

/// Connect to the warm-up VIP (bound: 90 s) until every real server has
/// answered.
fn warm_up(c: &Host, what: &str) {
    let end = Instant::now() + Duration::from_secs(90);
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < RS {
        assert!(
            Instant::now() < end,
            "{what}: only {seen:?} answered on the warm-up service"
        );
        if let Ok(conn) = connect(c, SocketAddr::new(WARM.into(), 80), Duration::from_secs(5)) {
            seen.insert(conn.server);
        }
    }
}

/// The kernel guest on bridge `brk` of the switch, configured with every
/// VIP and `cmds`.
fn kernel_director(bed: &Bed, cmds: &[String]) -> IpvsVm {
    let mut opts = IpvsVmOpts::new(&bed.sw, "10.77.0.2/16", None);
    opts.bridge = "brk".into();
    opts.modules = vec!["ip_vs".into()];
    let vm = IpvsVm::boot(&opts).expect("boot the kernel-IPVS guest");
    let mut script = String::from("set -e\n");
    for v in vips() {
        script.push_str(&format!("ip addr add {v}/32 dev eth0\n"));
    }
    for c in cmds {
        script.push_str(&format!("ipvsadm {c}\n"));
    }
    let o = vm
        .run_timeout(&script, Duration::from_secs(600))
        .expect("configure the guest");
    assert_eq!(
        o.status,
        0,
        "configuring the guest: {}{}",
        o.stdout_text(),
        o.stderr_text()
    );
    vm
}

#[test]
fn ipvs_sched_parity() {
    let test = "ipvs_sched_parity";
    if !ipvs_vm::available_or_skip(test) {
        return;
    }
    let Some(mut bed) = Bed::new(test) else {
        return;
    };
    let t0 = Instant::now();
    let dir = TempDir::new("schedpar");
    let kw = world(&mut bed, &dir, "k", "brk", true);
    let xw = world(&mut bed, &dir, "x", "br0", true);
    let pw = world(&mut bed, &dir, "p", "brp", false);
    let dx = director(&mut bed, &dir, "dx", "br0");
    bed.xdp_pass_on_port(&dx);
    let dp = director(&mut bed, &dir, "dp", "brp");
    let xdp = Launch::new("schedpar-xdp")
        .netns(&dx.ns)
        .plane("xdp")
        .args(["--interface", "eth0"])
        .adopt(&mut bed);
    let proxy = Launch::new("schedpar-proxy")
        .netns(&dp.ns)
        .plane("proxy")
        .adopt(&mut bed);
    for c in commands("-g") {
        xdp.ok(&c);
    }
    for c in commands("-m") {
        proxy.ok(&c);
    }
    let vm = kernel_director(&bed, &commands("-g"));
    let setup = t0.elapsed();
    for (w, what) in [(&kw, "kernel"), (&xw, "xdp"), (&pw, "proxy")] {
        warm_up(&w.client, what);
    }
    // The kernel's copy in a thread of its own (the guest is the slow
    // one); each copy's connections are made in order.
    let kc = kw.client.clone();
    let kt = std::thread::spawn(move || kc.run(drive));
    let mut x = xw.client.run(drive);
    let mut p = pw.client.run(drive);
    let mut k = kt.join().expect("the kernel's clients");
    // The edit cases, each copy's in order, the kernel's beside the others.
    std::thread::scope(|s| {
        let kt = s.spawn(|| {
            drive_edits(&kw.client, "-g", &|c| {
                vm.ok(&format!("ipvsadm {c}"));
            })
        });
        x.extend(drive_edits(&xw.client, "-g", &|c| {
            xdp.ok(c);
        }));
        p.extend(drive_edits(&pw.client, "-m", &|c| {
            proxy.ok(c);
        }));
        k.extend(kt.join().expect("the kernel's clients (edit cases)"));
    });
    let traffic = t0.elapsed() - setup;
    // Every case by name: (name, drive, quiesced server).
    let names: Vec<(&str, Option<Drive>, Option<usize>)> = CASES
        .iter()
        .map(|c| (c.name, Some(c.drive), c.quiesce))
        .chain(EDITS.iter().map(|e| (e.name, None, None)))
        .collect();

    let mut report = Vec::new();
    let mut bad = Vec::new();
    for (i, &(name, drive, quiesce)) in names.iter().enumerate() {
        let want = &k[i];
        assert!(
            want.iter().all(|n| !n.starts_with('-')),
            "{name}: the kernel left connections unanswered: {want:?}; the guest: {:?}",
            vm.run("ipvsadm -Ln --stats").map(|o| o.stdout_text())
        );
        if let Some(Drive::Twice) = drive {
            let (a, b) = want.split_at(want.len() / 2);
            assert_eq!(a, b, "{name}: the kernel's persistence");
        }
        // What the case exercised: the kernel's spread over the real
        // servers (one server only for fo and dh, by design); a quiesced
        // server never chosen.
        let mut spread = std::collections::BTreeMap::new();
        for n in want {
            *spread.entry(n.as_str()).or_insert(0usize) += 1;
        }
        let one = matches!(name, "fo" | "dh");
        assert_eq!(spread.len() == 1, one, "{name}: {spread:?}");
        if let Some(q) = quiesce {
            assert!(!spread.contains_key(format!("rs{q}").as_str()), "{name}");
        }
        let spread: Vec<String> = spread.iter().map(|(n, k)| format!("{n}:{k}")).collect();
        report.push(format!("{name}: the kernel's answers {}", spread.join(" ")));
        for (plane, got) in [("xdp", &x[i]), ("proxy", &p[i])] {
            let same = want.iter().zip(got.iter()).filter(|(a, b)| a == b).count();
            let line = format!("{name} on {plane}: {same} of {} identical", want.len());
            if same == want.len() && got.len() == want.len() {
                report.push(line);
                continue;
            }
            match EXCEPTIONS
                .iter()
                .find(|(n, p, _)| *n == name && *p == plane)
            {
                Some((_, _, why)) => report.push(format!("{line} (named exception: {why})")),
                None => bad.push(format!(
                    "{line}\n  kernel: {}\n  {plane}: {}",
                    want.join(" "),
                    got.join(" ")
                )),
            }
        }
    }
    eprintln!(
        "ipvs_sched_parity: {} cases x 2 planes; setup {setup:?}, traffic {traffic:?}, total {:?}\n{}",
        names.len(),
        t0.elapsed(),
        report.join("\n")
    );
    assert!(
        bad.is_empty(),
        "scheduling differs from the kernel's:\n{}",
        bad.join("\n")
    );
    drop(vm);
}
