//! DSR with the service address in an IP option (issue 28), end to end on
//! a namespace bed: a client, node A (rvsd with the XDP plane, the service
//! on A's own address:30080 as a NodePort is, configured with rvsadm `-i
//! --tun-type opt`), node B (`rvsd realserver --mode dsr-opt` on its
//! eth0) and a pod behind B (its own namespace on a second segment, B
//! routing). The real server is the pod's address:8080.
//!
//! Asserted, IPv4 and IPv6:
//! - a byte-checked exchange through the service works (the client's
//!   socket is connected to A's address: the replies come from it);
//! - the pod's server sees the client's address and port (getpeername of
//!   the accepted socket, sent back as the greeting);
//! - no packet with the option reaches the pod (an nftables counter on
//!   the pod's eth0 for IPv4 headers longer than 5 words / IPv6 next
//!   header 60). The counter is shown to work first: before B's programs
//!   are attached, connection attempts carry the option all the way to the
//!   pod (and fail: the replies leave from the pod's address, which the
//!   client does not know), so the option and B's programs both matter;
//! - no reply passes A: an nftables counter on A's eth0 for packets whose
//!   source is A's address (the service address B's replies carry) stays 0.
//!
//! Then a second `rvsd realserver --mode dsr-opt` keeps the attached
//! programs and `--undo` detaches them.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::harness::{Adopted, Launch, RVSD, Rvsadm};
use crate::netns::{Bed, Host, connect, sh};

const T: Duration = Duration::from_secs(3);

struct Family {
    client: &'static str,
    a: &'static str,
    b: &'static str,
    b_pods: &'static str,
    pod: &'static str,
    pods_net: &'static str,
    service: &'static str,
    real: &'static str,
}

const V4: Family = Family {
    client: "10.77.0.10",
    a: "10.77.0.2",
    b: "10.77.0.3",
    b_pods: "10.244.1.1",
    pod: "10.244.1.2",
    pods_net: "10.244.1.0/24",
    service: "10.77.0.2:30080",
    real: "10.244.1.2:8080",
};

const V6: Family = Family {
    client: "fd77::10",
    a: "fd77::2",
    b: "fd77::3",
    b_pods: "fd44:1::1",
    pod: "fd44:1::2",
    pods_net: "fd44:1::/64",
    service: "[fd77::2]:30080",
    real: "[fd44:1::2]:8080",
};

/// The bed: client, A (rvsd), B, the pod; both families configured.
struct Dsr {
    _bed: Bed,
    client: Host,
    a: Host,
    b: Host,
    pod: Host,
    rvsd: Adopted,
}

fn setup(test: &str) -> Option<Dsr> {
    let (mut bed, [client, a, b]) = Bed::with_hosts(
        test,
        [
            ("c", "10.77.0.10/24"),
            ("a", "10.77.0.2/24"),
            ("b", "10.77.0.3/24"),
        ],
    )?;
    // A's XDP_TX toward B needs an XDP program on A's bridge port (veth).
    bed.xdp_pass_on_port(&a);
    bed.bridge("pods");
    let b_ns = b.ns.clone();
    bed.link(&b_ns, "pods", "eth1", "10.244.1.1/24");
    let pod = bed.host_on("pod", "pods", "10.244.1.2/24");
    for (h, dev, addr) in [
        (&client, "eth0", V6.client),
        (&a, "eth0", V6.a),
        (&b, "eth0", V6.b),
        (&b, "eth1", V6.b_pods),
        (&pod, "eth0", V6.pod),
    ] {
        h.exec(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{addr}/64"),
            "dev",
            dev,
            "nodad",
        ]);
    }
    pod.exec(&["ip", "route", "add", "default", "via", V4.b_pods]);
    pod.exec(&["ip", "-6", "route", "add", "default", "via", V6.b_pods]);
    b.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
    b.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    a.exec(&["ip", "route", "add", V4.pods_net, "via", V4.b]);
    a.exec(&["ip", "-6", "route", "add", V6.pods_net, "via", V6.b]);
    // The counters (nftables, netdev ingress of eth0): options reaching
    // the pod, packets from A's own address reaching A.
    count_at_ingress(&pod, &[OPTION_V4, OPTION_V6]);
    count_at_ingress(&a, &["ip saddr 10.77.0.2", "ip6 saddr fd77::2"]);
    let rvsd = Launch::new("dsr-opt")
        .netns(&a.ns)
        .plane("xdp")
        .args(["--interface", "eth0"])
        .adopt(&mut bed);
    Some(Dsr {
        _bed: bed,
        client,
        a,
        b,
        pod,
        rvsd,
    })
}

/// nftables' match for an IPv4 packet with options (the DSR option
/// reaching whoever counts it).
pub(crate) const OPTION_V4: &str = "ip hdrlength != 5";
/// nftables' match for an IPv6 packet followed by a Destination Options
/// header.
pub(crate) const OPTION_V6: &str = "ip6 nexthdr 60";

/// Count the packets that match each of `rules` (nftables expressions) as
/// they arrive on `h`'s eth0, before its stack sees them (a netdev ingress
/// chain, table `dsr`); [`counts`] reads them.
pub(crate) fn count_at_ingress(h: &Host, rules: &[&str]) {
    h.exec(&["nft", "add", "table", "netdev", "dsr"]);
    h.exec(&[
        "nft", "add", "chain", "netdev", "dsr", "in", "{", "type", "filter", "hook", "ingress",
        "device", "eth0", "priority", "0", ";", "}",
    ]);
    for rule in rules {
        let mut args = vec!["nft", "add", "rule", "netdev", "dsr", "in"];
        args.extend(rule.split(' '));
        args.push("counter");
        h.exec(&args);
    }
}

/// The packets [`count_at_ingress`]'s rules have counted on `h`, in their
/// order.
pub(crate) fn counts(h: &Host) -> Vec<u64> {
    counters(&h.ns, "netdev")
}

/// The counters of nftables table `dsr` of `family` in namespace `ns`, in
/// rule order.
pub(crate) fn counters(ns: &str, family: &str) -> Vec<u64> {
    let o = sh(&[
        "ip", "netns", "exec", ns, "nft", "list", "table", family, "dsr",
    ]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let rest = l.split("counter packets ").nth(1)?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .collect()
}

/// Packets counted by `h`'s IPv4 (`v6` false) or IPv6 rule.
fn counted(h: &Host, v6: bool) -> u64 {
    counts(h).get(usize::from(v6)).copied().unwrap_or(0)
}

/// A TCP server in the pod: each connection gets the peer address it sees
/// (getpeername of the accepted socket) as its first line, then its input
/// echoed back. Stops after `deadline`.
fn peer_server(pod: &Host, at: SocketAddr, deadline: Instant) {
    let l = pod.run(move || TcpListener::bind(at).expect("pod server bind"));
    l.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while Instant::now() < deadline {
            match l.accept() {
                Ok((mut s, _)) => {
                    std::thread::spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                        let peer = s.peer_addr().map(|p| p.to_string()).unwrap_or_default();
                        if s.write_all(format!("{peer}\n").as_bytes()).is_err() {
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
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
}

/// Removes the DSR option programs pinned on eth0 of namespace `.0`
/// however the test ends (before the bed deletes the namespace: the pins
/// would outlive it).
pub(crate) struct Unpin(pub(crate) String);

impl Drop for Unpin {
    fn drop(&mut self) {
        let _ = crate::netns::in_ns(&self.0, || rvs_xdp::dsr_rs::detach_pinned("eth0").is_ok());
    }
}

fn realserver(b: &Host, undo: bool) -> String {
    // nsenter --net: the host's bpffs, where the links are pinned.
    let ns = format!("--net=/var/run/netns/{}", b.ns);
    let mut args = vec![
        "nsenter",
        &ns,
        RVSD,
        "realserver",
        "--mode",
        "dsr-opt",
        "--interface",
        "eth0",
    ];
    if undo {
        args.push("--undo");
    }
    String::from_utf8_lossy(&sh(&args).stdout).into_owned()
}

fn family(d: &Dsr, f: &Family, v6: bool) {
    let service: SocketAddr = f.service.parse().expect("service");
    let real: SocketAddr = f.real.parse().expect("real");
    peer_server(&d.pod, real, Instant::now() + Duration::from_secs(60));
    d.rvsd.ok(&format!("-A -t {} -s rr", f.service));
    d.rvsd.ok(&format!(
        "-a -t {} -r {} -i --tun-type opt",
        f.service, f.real
    ));
    let listed = d.rvsd.ok("-L -n");
    assert!(listed.contains(f.real), "{listed}");

    // Without B's programs the option reaches the pod (the counter works)
    // and the connection fails: the reply leaves from the pod's address.
    // rvsd sends only once the next hop toward the pod is resolved: retry.
    let deadline = Instant::now() + Duration::from_secs(10);
    while counted(&d.pod, v6) == 0 {
        assert!(
            connect(&d.client, service, Duration::from_millis(300)).is_err(),
            "no connection without B's programs"
        );
        assert!(
            Instant::now() < deadline,
            "no option packet ever reached the pod"
        );
    }

    // With them: a working, byte-checked exchange; the pod sees the client.
    let _unpin = Unpin(d.b.ns.clone());
    let out = realserver(&d.b, false);
    assert!(out.contains("DSR option programs on eth0"), "{out}");
    let before = counted(&d.pod, v6);
    let mut c = connect(&d.client, service, T).expect("connect through the service");
    let local = c.stream.local_addr().expect("local");
    assert_eq!(c.stream.peer_addr().expect("peer"), service);
    let client_ip: IpAddr = f.client.parse().expect("client");
    assert_eq!(local.ip(), client_ip);
    assert_eq!(
        c.server,
        local.to_string(),
        "the pod's getpeername is the client"
    );
    let msg: String = (0..2000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    c.echo(&msg, T).expect("byte-checked echo");
    c.echo("second round", T).expect("second echo");
    drop(c);
    assert_eq!(
        counted(&d.pod, v6),
        before,
        "a packet with the option reached the pod"
    );
    assert_eq!(counted(&d.a, v6), 0, "a reply passed A");
    // A second run keeps the attached programs.
    let again = realserver(&d.b, false);
    assert!(again.contains("kept"), "{again}");
    let off = realserver(&d.b, true);
    assert!(off.contains("detached"), "{off}");
}

#[test]
fn dsr_opt_nodeport_v4() {
    let Some(d) = setup("dsr_opt_nodeport_v4") else {
        return;
    };
    family(&d, &V4, false);
}

#[test]
fn dsr_opt_nodeport_v6() {
    let Some(d) = setup("dsr_opt_nodeport_v6") else {
        return;
    };
    family(&d, &V6, true);
}
