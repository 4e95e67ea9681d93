//! Connection sync from rvsd's XDP plane to the kernel's own sync daemon
//! (issue 29), beyond `ipvs_failover.rs` (DR, established connections
//! only): one `rvsd --dataplane xdp` sync master with a FULLNAT, a DR and
//! a NAT service, and a kernel backup (Debian's kernel IPVS in a QEMU
//! guest, rvs-testbed's `ipvs_vm`). The FULLNAT bed of `fullnat.rs`, with
//! the guest and a DR and a one-arm NAT real server on its client side:
//!
//! ```text
//!  br0 (switch namespace)                        br1
//!   ├─ guest eth0 10.79.0.3/24 (kernel backup)    ├─ dir eth1 10.80.0.1/24, local
//!   ├─ dir   eth0 10.79.0.2/24 10.78.0.1/24,      │  addresses 10.80.0.200-201
//!   │        VIPs 10.79.0.100 (FULLNAT TCP+UDP),  ├─ r0 10.80.0.11, r1 10.80.0.12:
//!   │        .101 (DR), .102 (NAT)                │  FULLNAT real servers, no
//!   ├─ c     eth0 10.79.0.10/24 (clients)         │  route to the clients
//!   ├─ g     eth0 10.79.0.21/24, .101 on lo (DR real server)
//!   └─ n     eth0 10.78.0.11/24, default via 10.78.0.1 (NAT real server)
//! ```
//!
//! * FULLNAT: rvs sends each FULLNAT connection's local address and port
//!   in its record option `0x72` (`OPT_RVS_LOCAL`). The kernel drops a
//!   whole record with an unknown option unless the option type carries
//!   `IPVS_OPT_F_PARAM` (`1 << (IPVS_OPT_PARAM - 1)` = `0x40`,
//!   `ip_vs_proc_sync_conn`; its message for a dropped one is a debug
//!   message, off in Debian's kernel, so the proof is the listing). The
//!   kernel has no FULLNAT: it lists each connection as its own NAT
//!   connection (the record's forwarding method is replaced by its real
//!   server's, `-m` here), client → VIP → real server, without the local
//!   address; rvsadm lists the same with the local address in its `local`
//!   column. Shown: every record heard on the sync group for the FULLNAT
//!   VIP carries the option with the local address and port the real
//!   server saw, and the guest lists every connection (2 TCP, 1 UDP).
//! * DR and NAT, open then closed: the guest's `ipvsadm -Lcn` lists what
//!   rvsd's `rvsadm -Lcn` lists, each entry with its state; after the
//!   clients close, the same closing state (not ESTABLISHED) on both.
//! * No record on the wire carries a bit the kernel does not define, and
//!   the guest's log says nothing of IPVS but its sync thread.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use rvs_testbed::ipvs_vm;
use rvs_wire::ipvs_sync as wire;

use crate::fullnat::{self, V4};
use crate::harness::Rvsadm;
use crate::ipvs_sync::{Entry, boot_guest_at, entries, keep_alive, kernel_lcn, until};
use crate::netns::{connect, realserver};

/// The DR and NAT services' VIPs (the FULLNAT one is [`V4`]'s).
const DR_VIP: &str = "10.79.0.101";
const NAT_VIP: &str = "10.79.0.102";
const SYNCID: u8 = 79;

/// The entries of `all` whose client is one of `clients`.
fn of(all: &BTreeSet<Entry>, clients: &BTreeSet<String>) -> BTreeSet<Entry> {
    all.iter()
        .filter(|e| clients.contains(&e.2))
        .cloned()
        .collect()
}

/// Whether `k` lists `n` TCP connections, none ESTABLISHED any more.
fn closed(k: &BTreeSet<Entry>, n: usize) -> bool {
    let tcp: Vec<&Entry> = k.iter().filter(|e| e.0 == "TCP").collect();
    tcp.len() == n && tcp.iter().all(|e| e.1 != "ESTABLISHED")
}

#[test]
fn sync_xdp_master_fullnat_dr_nat_to_kernel_backup() {
    let test = "sync_xdp_master_fullnat_dr_nat_to_kernel_backup";
    if !ipvs_vm::available_or_skip(test) {
        return;
    }
    let t0 = Instant::now();
    let Some(fullnat::Topo {
        servers: _servers,
        client: c,
        dir,
        rs: _rs,
        mut bed,
    }) = fullnat::topology(test, &V4)
    else {
        return;
    };
    for vip in [DR_VIP, NAT_VIP] {
        fullnat::addr_add(&dir, vip, 32, "eth0");
    }
    fullnat::addr_add(&dir, "10.78.0.1", 24, "eth0");
    let g = bed.host("g", "10.79.0.21/24");
    realserver(&g, DR_VIP, &["--mode", "dr"]);
    bed.server(&g, "0.0.0.0".parse().expect("any"), 80, "dr0");
    let n = bed.host("n", "10.78.0.11/24");
    n.exec(&["ip", "route", "add", "default", "via", "10.78.0.1"]);
    bed.server(&n, "0.0.0.0".parse().expect("any"), 80, "nat0");
    // The director's new neighbours resolved before traffic (as
    // `fullnat::topology` does for its own).
    for a in ["10.79.0.21:80", "10.78.0.11:80"] {
        let to: SocketAddr = a.parse().expect("address");
        let _ = dir.run(move || TcpStream::connect_timeout(&to, Duration::from_secs(3)));
    }
    let vm = boot_guest_at(&bed, "10.79.0.3/24");
    let boot = t0.elapsed();
    // The same services in the guest; the kernel has no FULLNAT: its
    // nearest, NAT, for the FULLNAT real servers.
    let fvip = fullnat::sa(V4.vip, 80);
    let mut kernel = Vec::new();
    for proto in ["-t", "-u"] {
        kernel.push(format!("-A {proto} {fvip} -s rr"));
        for a in V4.rs {
            kernel.push(format!("-a {proto} {fvip} -r {a}:80 -m"));
        }
    }
    kernel.extend([
        format!("-A -t {DR_VIP}:80 -s rr"),
        format!("-a -t {DR_VIP}:80 -r 10.79.0.21:80 -g"),
        format!("-A -t {NAT_VIP}:80 -s rr"),
        format!("-a -t {NAT_VIP}:80 -r 10.78.0.11:80 -m"),
    ]);
    let script: Vec<String> = kernel.iter().map(|k| format!("ipvsadm {k}")).collect();
    vm.ok(&format!(
        "{} && dmesg -c >/dev/null && \
         ipvsadm --start-daemon backup --mcast-interface eth0 --syncid {SYNCID}",
        script.join(" && ")
    ));
    // The sync group as heard in c: every record rvsd sends.
    let tap = c
        .run(|| {
            let s = UdpSocket::bind("0.0.0.0:8848")?;
            s.join_multicast_v4(&wire::SYNC_GROUP_V4, &V4.client.parse().expect("client"))?;
            s.set_read_timeout(Some(Duration::from_millis(200)))?;
            Ok::<_, std::io::Error>(s)
        })
        .expect("listen to the sync group");

    let d = fullnat::start_plane(
        &mut bed,
        &dir,
        &["--dataplane", "xdp", "--interface", "eth0,eth1"],
        &[],
    );
    fullnat::services(&d, &V4);
    d.ok(&format!("-A -t {DR_VIP}:80 -s rr"));
    d.ok(&format!("-a -t {DR_VIP}:80 -r 10.79.0.21:80 -g"));
    d.ok(&format!("-A -t {NAT_VIP}:80 -s rr"));
    d.ok(&format!("-a -t {NAT_VIP}:80 -r 10.78.0.11:80 -m"));
    d.ok(&format!(
        "--start-daemon master --mcast-interface eth0 --syncid {SYNCID}"
    ));

    // FULLNAT: two TCP connections and a UDP flow; the local address and
    // port each real server saw, by client.
    let fvip_sa: SocketAddr = fvip.parse().expect("vip");
    let mut seen: BTreeMap<String, SocketAddr> = BTreeMap::new();
    let mut fconns = vec![fullnat::first_connection(&c, fvip_sa, || {})];
    fconns.push(fullnat::connect(&c, fvip_sa, Duration::from_secs(10)).expect("FULLNAT TCP"));
    for f in &fconns {
        let me = f.stream.local_addr().expect("local address").to_string();
        seen.insert(me, f.seen);
    }
    let udp: UdpSocket =
        rvs_testbed::udp_socket(&c, V4.client.parse().expect("client")).expect("udp socket");
    udp.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut answer = None;
    for i in 0..5 {
        // An answer may be lost while a neighbour is resolved: asked
        // again, a bounded number of times.
        udp.send_to(format!("q{i}").as_bytes(), fvip_sa)
            .expect("udp send");
        let mut buf = [0u8; 512];
        if let Ok(len) = udp.recv(&mut buf) {
            answer = Some(String::from_utf8_lossy(&buf[..len]).into_owned());
            break;
        }
    }
    let answer = answer.expect("a UDP answer through FULLNAT");
    // `rsN LOCAL qI`: the local address and port the real server saw.
    let udp_seen: SocketAddr = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("UDP answer {answer:?}"));
    seen.insert(udp.local_addr().expect("udp local").to_string(), udp_seen);

    // DR and NAT: two TCP connections each.
    let mut conns = Vec::new();
    for (vip, server) in [(DR_VIP, "dr0"), (NAT_VIP, "nat0")] {
        let to: SocketAddr = format!("{vip}:80").parse().expect("vip");
        for _ in 0..2 {
            let conn = (0..3)
                .find_map(|_| connect(&c, to, Duration::from_secs(10)).ok())
                .unwrap_or_else(|| panic!("no connection to {to} through rvsd"));
            assert_eq!(conn.server, server, "{to}");
            conns.push(conn);
        }
    }
    let mut clients: BTreeSet<String> = seen.keys().cloned().collect();
    for x in &conns {
        clients.insert(x.stream.local_addr().expect("local address").to_string());
    }
    let bound = Duration::from_secs(60);
    let mut matched = Vec::new();

    // Open: the guest lists what rvsd lists, the FULLNAT entries included.
    let mut round = 0u8;
    until(
        "the kernel backup lists the XDP master's FULLNAT, DR and NAT entries",
        bound,
        || {
            round = round.wrapping_add(1);
            keep_alive(&mut conns);
            for f in &mut fconns {
                fullnat::echo(f, round, 16);
            }
            let m = of(&entries(&d.ok("-Lcn")), &clients);
            let k = of(&kernel_lcn(&vm), &clients);
            (m.len() == 7 && k == m, (m, k))
        },
    );
    let k = of(&kernel_lcn(&vm), &clients);
    let on = |vip: &str| k.iter().filter(|e| e.3 == format!("{vip}:80")).count();
    assert_eq!((on(V4.vip), on(DR_VIP), on(NAT_VIP)), (3, 2, 2), "{k:?}");
    matched.push(format!(
        "open: {} of 7 (FULLNAT {}, DR {}, NAT {})",
        k.len(),
        on(V4.vip),
        on(DR_VIP),
        on(NAT_VIP)
    ));

    // What rvsd put on the wire: the FULLNAT records carry the local
    // address and port their real server saw, in the option the kernel
    // skipped; no record carries a bit the kernel does not define.
    let mut records = 0;
    let mut with_local: BTreeMap<String, SocketAddr> = BTreeMap::new();
    let mut buf = [0u8; 65536];
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let Ok((len, _)) = tap.recv_from(&mut buf) else {
            continue;
        };
        let Ok(msg) = wire::parse(&buf[..len]) else {
            continue;
        };
        for rec in msg.conns {
            records += 1;
            assert_eq!(
                rec.flags & !wire::KERNEL_FLAGS,
                0,
                "rvs-internal flag bits on the wire: {rec:?}"
            );
            if rec.vip == SocketAddr::new(fullnat::ip(V4.vip), 80) {
                let local = rec
                    .local
                    .unwrap_or_else(|| panic!("a FULLNAT record without its local pair: {rec:?}"));
                with_local.insert(rec.client.to_string(), local);
            }
        }
    }
    assert!(records > 0, "no sync record heard in c");
    assert_eq!(with_local, seen, "the FULLNAT local pairs on the wire");
    matched.push(format!(
        "FULLNAT records with the local option: {} of {}",
        with_local.len(),
        seen.len()
    ));

    // Closed: rvsd's closing states reach the kernel.
    drop(fconns);
    drop(conns);
    until(
        "the kernel backup follows the XDP master's closing states",
        bound,
        || {
            let m = of(&entries(&d.ok("-Lcn")), &clients);
            let k = of(&kernel_lcn(&vm), &clients);
            (closed(&k, 6) && k == m, (m, k))
        },
    );
    let k = of(&kernel_lcn(&vm), &clients);
    let states: BTreeSet<&str> = k.iter().map(|e| e.1.as_str()).collect();
    matched.push(format!(
        "closed: {} of {} (states {states:?})",
        k.len(),
        k.len()
    ));

    // Nothing the guest's sync thread complained of.
    let log = vm.ok("dmesg");
    assert!(
        !log.lines()
            .any(|l| l.contains("IPVS") && !l.contains("sync thread")),
        "{log}"
    );
    eprintln!(
        "ipvs_sync_xdp: {}; boot {boot:?}, total {:?}",
        matched.join(", "),
        t0.elapsed()
    );
}
