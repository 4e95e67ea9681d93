//! `rvsd --dataplane xdp` itself: started in a director namespace on a
//! bridged segment (shared/spec/TESTBED.md), configured with rvsadm, real
//! TCP connections from a client namespace to two DR real servers, the
//! listings fed by the program's maps, refusals, detach on exit. The XDP
//! scenarios (TUN, NAT, schedulers, drains) are in the XDP test bed's own
//! tests; this one checks the daemon's integration. Generic (skb) mode: a
//! native XDP_TX out of a veth would need a program on the peer too.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Launch, TempDir, parts};

fn root_and_tools(test: &str) -> bool {
    crate::netns::can_run(test)
}

fn sh(args: &[&str]) {
    rvs_testbed::sh(args);
}

/// The namespaces of one test, deleted on drop (also when `new` fails
/// half-way); `stop` ends the servers.
struct Bed {
    prefix: String,
    stop: Arc<AtomicBool>,
    guards: Vec<rvs_testbed::Netns>,
}

impl Bed {
    fn ns(&self, h: &str) -> String {
        format!("{}{h}", self.prefix)
    }

    fn new() -> Bed {
        let mut bed = Bed {
            prefix: format!("{}-", rvs_testbed::unique_name("rvsxd")),
            stop: Arc::new(AtomicBool::new(false)),
            guards: Vec::new(),
        };
        for h in ["sw", "c", "d", "r1", "r2"] {
            let ns = rvs_testbed::Netns::create(bed.ns(h));
            bed.guards.push(ns);
        }
        let sw = bed.ns("sw");
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"]);
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"]);
        for (h, a) in [
            ("c", "10.77.0.10/24"),
            ("d", "10.77.0.2/24"),
            ("r1", "10.77.0.11/24"),
            ("r2", "10.77.0.12/24"),
        ] {
            let ns = bed.ns(h);
            let port = format!("p{h}");
            sh(&[
                "ip", "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ]);
            sh(&["ip", "-n", &sw, "link", "set", &port, "master", "br0"]);
            sh(&["ip", "-n", &sw, "link", "set", &port, "up"]);
            sh(&["ip", "-n", &ns, "addr", "add", a, "dev", "eth0"]);
            sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            // TESTBED.md: receivers drop CHECKSUM_PARTIAL frames XDP forwarded.
            sh(&[
                "ip", "netns", "exec", &ns, "ethtool", "-K", "eth0", "tx", "off",
            ]);
        }
        sh(&[
            "ip",
            "-n",
            &bed.ns("d"),
            "addr",
            "add",
            "10.77.0.100/32",
            "dev",
            "eth0",
        ]);
        for r in ["r1", "r2"] {
            let ns = bed.ns(r);
            sh(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                "10.77.0.100/32",
                "dev",
                "lo",
            ]);
            for (k, v) in [
                ("net.ipv4.conf.all.arp_ignore", "1"),
                ("net.ipv4.conf.all.arp_announce", "2"),
                ("net.ipv4.conf.eth0.arp_ignore", "1"),
                ("net.ipv4.conf.eth0.arp_announce", "2"),
            ] {
                sh(&[
                    "ip",
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-qw",
                    &format!("{k}={v}"),
                ]);
            }
        }
        bed
    }

    /// Run `f` on a thread inside namespace `h`.
    fn enter<T: Send + 'static>(&self, h: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        rvs_testbed::in_ns(&self.ns(h), f)
    }

    /// A server on `h` answering every connection on port 80 with `h`
    /// (bounded: stops with the bed, or after 60 s).
    fn server(&self, h: &'static str) {
        let l: TcpListener = self.enter(h, || TcpListener::bind("0.0.0.0:80").expect("bind"));
        l.set_nonblocking(true).expect("nonblocking");
        let stop = self.stop.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                match l.accept() {
                    Ok((mut s, _)) => {
                        let _ = std::io::Write::write_all(&mut s, h.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
    }

    /// `n` connections from the client to the VIP: who answered.
    fn connect(&self, n: usize) -> Vec<String> {
        self.enter("c", move || {
            (0..n)
                .map(|_| {
                    let vip = SocketAddr::new(IpAddr::from([10, 77, 0, 100]), 80);
                    let mut s = match TcpStream::connect_timeout(&vip, Duration::from_secs(2)) {
                        Ok(s) => s,
                        Err(e) => return format!("error: {e}"),
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut who = String::new();
                    match s.read_to_string(&mut who) {
                        Ok(_) => who,
                        Err(e) => format!("error: {e}"),
                    }
                })
                .collect()
        })
    }
}

impl Drop for Bed {
    /// Stops the servers; the guards then delete the namespaces.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn xdp_attached(bed: &Bed) -> bool {
    let out = Command::new("ip")
        .args(["-n", &bed.ns("d"), "link", "show", "eth0"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

#[test]
fn rvsd_xdp_dataplane_carries_dr_and_reports_it() {
    let test = "rvsd_xdp_dataplane_carries_dr_and_reports_it";
    if !root_and_tools(test) {
        return;
    }
    let bed = Bed::new();
    bed.server("r1");
    bed.server("r2");
    let d = Launch::new("xdpd")
        .netns(&bed.ns("d"))
        .plane("xdp")
        .args(["--interface", "eth0", "--xdp-mode", "skb"])
        .args(["--flow-table-size", "65536"])
        .spawn();
    assert!(xdp_attached(&bed), "program attached");

    // What XDP cannot do is refused with the reason, and nothing changes.
    let (_, err, code) = parts(&d.adm("-A -f 7 -s rr"));
    assert!(code != 0 && err.contains("firewall marks"), "{err}");

    d.ok("-A -t 10.77.0.100:80 -s rr");
    d.ok("-a -t 10.77.0.100:80 -r 10.77.0.11:80 -g");
    d.ok("-a -t 10.77.0.100:80 -r 10.77.0.12:80 -g");
    // rvsd schedules a real server once its MAC is resolved (the plane's
    // worker applies the command and its resolver asks the kernel, both
    // after `-a` returned): until then a connection may be refused.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut both = std::collections::BTreeSet::new();
    let mut total = 0;
    while both.len() < 2 && Instant::now() < deadline {
        let got = bed.connect(2);
        total += got.iter().filter(|w| !w.starts_with("error")).count();
        both.extend(got.into_iter().filter(|w| !w.starts_with("error")));
    }
    assert_eq!(both.into_iter().collect::<Vec<_>>(), ["r1", "r2"]);
    let mut seen = bed.connect(6);
    total += 6;
    seen.sort();
    assert_eq!(
        seen,
        ["r1", "r1", "r1", "r2", "r2", "r2"],
        "rr over real connections"
    );

    // The next report (every second) brings the program's flows and
    // counters into the listings.
    let want = format!("TCP  10.77.0.100:80 {total:>22}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let s = d.ok("-Ln --stats");
        if s.contains(&want) || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(stats.contains(&want), "{want:?} in {stats}");
    let conns = d.ok("-Lcn");
    assert_eq!(
        conns
            .lines()
            .filter(|l| l.contains("10.77.0.100:80"))
            .count(),
        total,
        "{conns}"
    );
    let list = d.ok("-Ln");
    let inact: usize = list
        .lines()
        .filter(|l| l.contains("Route"))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(5)
                .and_then(|x| x.parse::<usize>().ok())
        })
        .sum();
    assert_eq!(inact, total, "closed connections are inactive: {list}");

    // Weight 0: new connections go to the other real server at once
    // (`rvsadm` returns once the plane's worker has written the maps).
    d.ok("-e -t 10.77.0.100:80 -r 10.77.0.11:80 -g -w 0");
    assert_eq!(bed.connect(3), ["r2", "r2", "r2"]);

    // lblc in the program: one VIP, servers within their weights, so every
    // connection goes to the server its destination address is cached on.
    d.ok("-e -t 10.77.0.100:80 -r 10.77.0.11:80 -g -w 1");
    d.ok("-E -t 10.77.0.100:80 -s lblc");
    let got = bed.connect(4);
    assert!(
        got[0].starts_with('r') && got.iter().all(|w| *w == got[0]),
        "lblc sticks to one server: {got:?}"
    );

    drop(d);
    assert!(!xdp_attached(&bed), "detached when rvsd exits");
}

/// Without `--interface`, without root, or with a missing interface rvsd
/// stops at once with a clear message.
#[test]
fn rvsd_xdp_start_errors_are_clear() {
    let dir = TempDir::new("xdpd-err");
    let socket = dir.path().join("rvsd.sock");
    let _pins = crate::harness::PinGuard(socket.clone());
    let run = |pre: &[&str], args: &[&str]| {
        let launch = Launch::at(&socket).plane("xdp").args(args);
        if pre.is_empty() {
            launch
        } else {
            launch.wrapped(pre)
        }
        .refused()
    };
    let err = run(&[], &[]);
    assert!(err.contains("needs --interface"), "{err}");
    if !root_and_tools("rvsd_xdp_start_errors_are_clear") {
        return;
    }
    let err = run(&[], &["--interface", "rvsnosuch0"]);
    assert!(err.contains("rvsnosuch0"), "{err}");
    // Tunnel source prefixes: syntax, one per family, and a width the
    // flow hash can fill.
    let lo = ["--interface", "lo", "--xdp-mode", "skb"];
    for (prefix, want) in [
        ("10.9.0.0", "expected ADDR/LEN"),
        ("10.9.0.0/8", "must be /16 to /32"),
        ("fd00::/64", "must be /96 to /128"),
    ] {
        let err = run(
            &[],
            &[&lo[..], &["--tunnel-source-prefix", prefix]].concat(),
        );
        assert!(err.contains(want), "{prefix}: {err}");
    }
    let err = run(
        &[],
        &[
            &lo[..],
            &[
                "--tunnel-source",
                "10.9.0.1",
                "--tunnel-source-prefix",
                "10.9.0.0/24",
            ],
        ]
        .concat(),
    );
    assert!(err.contains("one source or prefix per family"), "{err}");
    if Command::new("setpriv").arg("--version").output().is_ok() {
        let nobody = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ];
        let err = run(&nobody, &["--interface", "lo"]);
        assert!(err.contains("needs root"), "{err}");
    }
}
