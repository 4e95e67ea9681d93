//! Connection sync with the kernel's own sync daemon (issue 29), both
//! ways, with real TCP and UDP connections: Debian's kernel IPVS in a QEMU
//! guest (rvs-testbed's `ipvs_vm`) and rvsd on one bridged segment.
//!
//! ```text
//!  br0 (switch namespace)
//!   ├─ guest  eth0 10.0.29.2/24 + 10.0.30.2/24, VIP 10.0.30.100 (kernel director, NAT)
//!   ├─ d      eth0 10.0.29.1/24 + 10.0.30.1/24 (rvsd; its proxy VIP is 10.0.30.1)
//!   ├─ r      eth0 10.0.29.11/24, TCP :8080 and UDP :5353 "rs1", 10.0.30/24 via the guest
//!   └─ c      eth0 10.0.30.20/24 (clients)
//! ```
//!
//! * kernel master → rvsd backup (`--dataplane none`): connections through
//!   the guest; `rvsadm -Lcn` must list each of the kernel's entries
//!   (`ipvsadm -Lcn` in the guest) with its state, open and after close,
//!   persistence templates included (ASSURED, as the kernel lists them),
//!   under sync v1 and then v0 (new connections of the same client). The rvsd backup starts after the kernel
//!   master, so its bulk request goes to a kernel master: ignored without
//!   an error in the guest's log, and the entries still come by the
//!   kernel's normal sync.
//! * rvsd master (proxy plane) → kernel backup: the guest lists rvsd's
//!   connections and template; after the clients close, the closing state
//!   rvsd lists (not ESTABLISHED); and no record on the wire carries a bit
//!   the kernel does not define (captured from the sync group in `c`).

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use rvs_testbed::ipvs_vm::{self, IpvsVm, IpvsVmOpts};
use rvs_wire::ipvs_sync as wire;

use crate::harness::{Launch, Rvsd, TempDir};
use crate::netns::{Bed, Host, connect, sh};
use rvs_testbed::Conn;
use rvs_testbed::{udp_ask, udp_socket};

/// rvsd in `h`'s namespace on `DIR/NAME.sock`, killed on drop.
pub(crate) fn daemon(h: &Host, dir: &TempDir, name: &str, plane: &str) -> Rvsd {
    Launch::at(&dir.path().join(format!("{name}.sock")))
        .netns(&h.ns)
        .plane(plane)
        .spawn()
}

/// One `-Lcn` entry without its expiry: protocol, state, client, virtual
/// address, real server.
pub(crate) type Entry = (String, String, String, String, String);

/// The entries of a `-Lcn` listing. The real server is the last column:
/// rvsadm puts a `local` column (FULLNAT) before it when an entry has one.
pub(crate) fn entries(listing: &str) -> BTreeSet<Entry> {
    listing
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && matches!(f[0], "TCP" | "UDP" | "IP")).then(|| {
                (
                    f[0].to_owned(),
                    f[2].to_owned(),
                    f[3].to_owned(),
                    f[4].to_owned(),
                    f[f.len() - 1].to_owned(),
                )
            })
        })
        .collect()
}

/// The entries of `all` whose client is `client` (an address or
/// `address:port`) or its persistence template (`address:0`).
fn of_client(all: &BTreeSet<Entry>, addr: &str, ports: &[u16]) -> BTreeSet<Entry> {
    all.iter()
        .filter(|e| {
            e.2 == format!("{addr}:0") || ports.iter().any(|p| e.2 == format!("{addr}:{p}"))
        })
        .cloned()
        .collect()
}

/// The kernel's `-Lcn` entries.
pub(crate) fn kernel_lcn(vm: &IpvsVm) -> BTreeSet<Entry> {
    entries(&vm.ok("ipvsadm -Lcn"))
}

/// A connection from `c` to `vip` through the guest's director, tried up to
/// three times (20 s each: the emulated guest is slow on a loaded machine);
/// the guest's view in the panic when none gets through.
pub(crate) fn connect_via(c: &Host, vip: SocketAddr, vm: &IpvsVm) -> Conn {
    for _ in 0..3 {
        if let Ok(conn) = connect(c, vip, Duration::from_secs(20)) {
            return conn;
        }
    }
    let seen = vm
        .run("ipvsadm -Ln --stats; ipvsadm -Lcn; ip neigh; ip addr; dmesg | tail")
        .map(|o| o.stdout_text());
    panic!("no connection to {vip} through the kernel; the guest: {seen:?}");
}

/// Wait (bound `limit`, only against a hang) until `f` holds; the last
/// values compared are in the panic.
pub(crate) fn until<T: std::fmt::Debug>(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> (bool, T),
) {
    let end = Instant::now() + limit;
    loop {
        let (ok, seen) = f();
        if ok {
            return;
        }
        assert!(
            Instant::now() < end,
            "{what}: not within {limit:?}; {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Keep the connections established while they can (the test servers
/// close after 10 s idle; then both sides list the closing state, compared
/// all the same).
pub(crate) fn keep_alive(conns: &mut [Conn]) {
    for h in conns {
        let _ = h.echo("k\n", Duration::from_secs(2));
    }
}

/// The bed of a sync test with the guest (`None`: skipped): the switch and
/// rvsd's host `d` at 10.0.29.1/24 and 10.0.30.1/24.
pub(crate) fn sync_bed(test: &str) -> Option<(Bed, Host)> {
    if !ipvs_vm::available_or_skip(test) {
        return None;
    }
    let mut bed = Bed::new(test)?;
    let d = bed.host("d", "10.0.29.1/24");
    sh(&[
        "ip",
        "-n",
        &d.ns,
        "addr",
        "add",
        "10.0.30.1/24",
        "dev",
        "eth0",
    ]);
    Some((bed, d))
}

/// The guest on the bed's switch at 10.0.29.2/24, with `ip_vs` and `rr`.
pub(crate) fn boot_guest(bed: &Bed) -> IpvsVm {
    boot_guest_at(bed, "10.0.29.2/24")
}

/// The guest on the bed's `br0` at `cidr`, with `ip_vs` and `rr`.
pub(crate) fn boot_guest_at(bed: &Bed, cidr: &str) -> IpvsVm {
    let mut opts = IpvsVmOpts::new(&bed.sw, cidr, None);
    opts.bridge = "br0".into();
    opts.modules = vec!["ip_vs".into(), "ip_vs_rr".into()];
    IpvsVm::boot(&opts).expect("boot the kernel-IPVS guest")
}

#[test]
fn sync_interop_with_the_kernel_both_ways() {
    let Some((mut bed, d)) = sync_bed("sync_interop_with_the_kernel_both_ways") else {
        return;
    };
    let t0 = Instant::now();
    let r = bed.host("r", "10.0.29.11/24");
    sh(&[
        "ip",
        "-n",
        &r.ns,
        "route",
        "add",
        "10.0.30.0/24",
        "via",
        "10.0.29.2",
    ]);
    for k in ["all", "default", "eth0"] {
        let key = format!("net.ipv4.conf.{k}.accept_redirects=0");
        r.exec(&["sysctl", "-qw", &key]);
    }
    let c = bed.host("c", "10.0.30.20/24");
    let rs_addr = "10.0.29.11".parse().unwrap();
    bed.server(&r, rs_addr, 8080, "rs1");
    bed.udp_server(&r, rs_addr, 5353, "rs1");
    let vm = boot_guest(&bed);
    let boot = t0.elapsed();
    vm.ok(
        // One-armed NAT: the guest must not send the real server ICMP
        // redirects (it would then answer clients directly, past the NAT).
        "sysctl -qw net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.eth0.send_redirects=0 && \
         ip addr add 10.0.30.2/24 dev eth0 && ip addr add 10.0.30.100/32 dev eth0 && \
         ipvsadm -A -t 10.0.30.100:80 -s rr -p 300 && \
         ipvsadm -a -t 10.0.30.100:80 -r 10.0.29.11:8080 -m && \
         ipvsadm -A -u 10.0.30.100:53 -s rr -p 300 && \
         ipvsadm -a -u 10.0.30.100:53 -r 10.0.29.11:5353 -m && \
         ipvsadm -A -t 10.0.30.1:80 -s rr -p 300 && \
         ipvsadm -a -t 10.0.30.1:80 -r 10.0.29.11:8080 -m && \
         dmesg -c >/dev/null",
    );
    let dir = TempDir::new("ipvssync");
    let bound = Duration::from_secs(60);

    // ---- kernel master -> rvsd backup, sync v1 then v0 ----
    vm.ok("ipvsadm --start-daemon master --mcast-interface eth0 --syncid 29");
    let backup = daemon(&d, &dir, "backup", "none");
    backup.ok("-A -t 10.0.30.100:80 -s rr -p 300");
    backup.ok("-a -t 10.0.30.100:80 -r 10.0.29.11:8080 -m");
    backup.ok("-A -u 10.0.30.100:53 -s rr -p 300");
    backup.ok("-a -u 10.0.30.100:53 -r 10.0.29.11:5353 -m");
    // Its bulk request goes to the kernel master.
    backup.ok("--start-daemon backup --mcast-interface eth0 --syncid 29");
    let vip: SocketAddr = "10.0.30.100:80".parse().unwrap();
    let udp_vip: SocketAddr = "10.0.30.100:53".parse().unwrap();
    let mut matched = Vec::new();
    let client = "10.0.30.20";
    for version in [1, 0] {
        if version == 0 {
            vm.ok("sysctl -w net.ipv4.vs.sync_version=0 >/dev/null");
        }
        // TCP: the kernel syncs an established connection at its 3rd
        // packet (sync_threshold), so each one echoes a few lines.
        let mut conns = Vec::new();
        for _ in 0..2 {
            // Generous bounds: the emulated guest is slow on a loaded
            // machine (a first SYN may wait for its ARP and be resent).
            let mut conn = connect_via(&c, vip, &vm);
            assert_eq!(conn.server, "rs1");
            for i in 0..4 {
                conn.echo(&format!("ping{i}\n"), Duration::from_secs(30))
                    .expect("echo through the kernel");
            }
            conns.push(conn);
        }
        let udp: UdpSocket = udp_socket(&c, client.parse().unwrap()).expect("udp socket");
        for i in 0..4 {
            // A datagram may be lost while the guest resolves a neighbour:
            // asked again, at most three times.
            let answer = (0..3)
                .find_map(|_| {
                    udp_ask(&udp, udp_vip, &format!("q{i}"), Duration::from_secs(10)).ok()
                })
                .expect("a UDP answer through the kernel");
            assert_eq!(answer, "rs1");
        }
        let mut ports: Vec<u16> = conns
            .iter()
            .map(|x| x.stream.local_addr().unwrap().port())
            .collect();
        ports.push(udp.local_addr().unwrap().port());
        // Open: the backup lists what the kernel lists for these clients
        // (2 TCP connections, 1 UDP flow, 2 templates).
        until(
            &format!("v{version}: the rvsd backup lists the kernel master's entries"),
            bound,
            || {
                keep_alive(&mut conns);
                let k = of_client(&kernel_lcn(&vm), client, &ports);
                let b = of_client(&entries(&backup.ok("-Lcn")), client, &ports);
                (k.len() == 5 && k == b, (k, b))
            },
        );
        let k = of_client(&kernel_lcn(&vm), client, &ports);
        let templates: Vec<&Entry> = k.iter().filter(|e| e.2.ends_with(":0")).collect();
        assert_eq!(templates.len(), 2, "{k:?}");
        assert!(templates.iter().all(|e| e.1 == "ASSURED"), "{k:?}");
        matched.push(format!("v{version} open: {} of {}", k.len(), k.len()));
        // Closed: the kernel's closing states reach the backup.
        drop(conns);
        until(
            &format!("v{version}: the backup follows the kernel's closing states"),
            bound,
            || {
                let k = of_client(&kernel_lcn(&vm), client, &ports);
                let b = of_client(&entries(&backup.ok("-Lcn")), client, &ports);
                let closed = k.iter().filter(|e| e.0 == "TCP" && !e.2.ends_with(":0"));
                // The kernel moved both out of ESTABLISHED.
                let closed_ok =
                    closed.clone().count() == 2 && closed.clone().all(|e| e.1 != "ESTABLISHED");
                (closed_ok && k == b, (k, b))
            },
        );
        let k = of_client(&kernel_lcn(&vm), client, &ports);
        matched.push(format!("v{version} closed: {} of {}", k.len(), k.len()));
    }
    // The bulk request was ignored without a word in the guest's log.
    let log = vm.ok("dmesg");
    assert!(
        !log.lines()
            .any(|l| l.contains("IPVS") && !l.contains("sync thread")),
        "{log}"
    );
    vm.ok("ipvsadm --stop-daemon master && sysctl -w net.ipv4.vs.sync_version=1 >/dev/null");
    drop(backup);
    let a_done = t0.elapsed();

    // ---- rvsd master (proxy plane) -> kernel backup ----
    vm.ok("ipvsadm --start-daemon backup --mcast-interface eth0 --syncid 30");
    // The sync group as heard in c: every record rvsd sends.
    let tap = c
        .run(|| {
            let s = UdpSocket::bind("0.0.0.0:8848")?;
            s.join_multicast_v4(&wire::SYNC_GROUP_V4, &"10.0.30.20".parse().unwrap())?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            Ok::<_, std::io::Error>(s)
        })
        .expect("listen to the sync group");
    let master = daemon(&d, &dir, "master", "proxy");
    master.ok("-A -t 10.0.30.1:80 -s rr -p 300");
    master.ok("-a -t 10.0.30.1:80 -r 10.0.29.11:8080 -m");
    master.ok("--start-daemon master --mcast-interface eth0 --syncid 30");
    let pvip: SocketAddr = "10.0.30.1:80".parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..2 {
        let conn = connect(&c, pvip, Duration::from_secs(30)).expect("connect through rvsd");
        assert_eq!(conn.server, "rs1");
        held.push(conn);
    }
    let ports: Vec<u16> = held
        .iter()
        .map(|x| x.stream.local_addr().unwrap().port())
        .collect();
    let client = "10.0.30.20";
    // rvsd's VIP only (the kernel still lists part one's templates).
    let on_pvip = |all: BTreeSet<Entry>| -> BTreeSet<Entry> {
        of_client(&all, client, &ports)
            .into_iter()
            .filter(|e| e.3 == "10.0.30.1:80")
            .collect()
    };
    until(
        "the kernel backup lists rvsd's connections and template",
        bound,
        || {
            keep_alive(&mut held);
            let m = on_pvip(entries(&master.ok("-Lcn")));
            let k = on_pvip(kernel_lcn(&vm));
            (m.len() == 3 && k == m, (m, k))
        },
    );
    let k = on_pvip(kernel_lcn(&vm));
    assert!(
        k.iter().any(|e| e.2.ends_with(":0") && e.1 == "ASSURED"),
        "{k:?}"
    );
    matched.push(format!("rvs master open: {} of {}", k.len(), k.len()));
    drop(held);
    until(
        "the kernel backup follows rvsd's closing states",
        bound,
        || {
            let m = on_pvip(entries(&master.ok("-Lcn")));
            let k = on_pvip(kernel_lcn(&vm));
            let closing = k
                .iter()
                .filter(|e| !e.2.ends_with(":0"))
                .filter(|e| e.1 != "ESTABLISHED")
                .count();
            (closing == 2 && k == m, (m, k))
        },
    );
    let k = on_pvip(kernel_lcn(&vm));
    matched.push(format!("rvs master closed: {} of {}", k.len(), k.len()));
    // What rvsd put on the wire: the kernel's flags only.
    let mut records = 0;
    let mut buf = [0u8; 65536];
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let Ok((n, _)) = tap.recv_from(&mut buf) else {
            continue;
        };
        let Ok(msg) = wire::parse(&buf[..n]) else {
            continue;
        };
        for rec in msg.conns {
            records += 1;
            assert_eq!(
                rec.flags & !wire::KERNEL_FLAGS,
                0,
                "rvs-internal flag bits on the wire: {rec:?}"
            );
        }
    }
    assert!(records > 0, "no sync record heard in c");
    eprintln!(
        "ipvs_sync: {}; boot {boot:?}, kernel master part {:?}, total {:?}",
        matched.join(", "),
        a_done,
        t0.elapsed()
    );
}
