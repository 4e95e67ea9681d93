//! `--node-port-mode dsr` on the Kubernetes bed (issue 28, "DSR with the
//! IP option"): a NodePort connection through node A to a pod on node B,
//! IPv4 and IPv6, with the real control plane writing the EndpointSlice.
//!
//! The bed: the client, node A and node B on one segment (10.86.0.0/24,
//! fd86::/64); B's pod behind B on a segment of its own (10.244.2.0/24,
//! fd44:2::/64, B routing; A routes that pod CIDR via B as a CNI would).
//! Both nodes run `rvsd --dataplane xdp --interface eth0 --kubernetes
//! --node-port-mode MODE`, nothing else: with `dsr`, rvsd attaches the DSR
//! option programs (`rvsd realserver --mode dsr-opt`'s) to eth0 itself. The
//! Service is a dual-stack NodePort with `externalTrafficPolicy: Cluster`
//! whose one endpoint is the pod on B; the client connects to A's NodePort.
//!
//! What is counted (nftables netdev ingress counters, before each stack):
//! - at the pod's eth0: IPv4 packets with options, IPv6 packets followed by
//!   a Destination Options header. This is how "the pod's socket sees no
//!   option" is checked: on Linux an accepted TCP socket's `IP_OPTIONS`
//!   holds only the options the kernel echoes (record route, timestamp,
//!   source route, CIPSO: `__ip_options_echo`), so an unknown option such
//!   as the DSR one (0x9a) is never there and that getsockopt could not
//!   fail; and `IPV6_RECVDSTOPTS` needs a raw setsockopt, which this test
//!   crate does not make (no `unsafe` outside crates/sys). The counter sees
//!   every packet the pod's stack receives, and is shown to count first
//!   (before B runs rvsd the option does reach the pod);
//! - on A's link, in the bridge (outside A: A's XDP program takes the
//!   replies of SNAT flows before any hook of A's would count them): TCP
//!   frames from B's MAC forwarded to A's port (the pod's replies if they
//!   went back through A);
//! - at the client's eth0: TCP from A's address and NodePort, from B's MAC
//!   and from A's MAC (who delivered the replies the client's socket
//!   took as A's).
//!
//! The DSR case asserts the replies come from B's MAC with A's address and
//! port and A sees none; the SNAT case (the same bed with `--node-port-mode
//! snat`) asserts the opposite — they come back through A and the pod sees
//! A's address — so the counters demonstrably tell the two apart. The
//! Service also has a UDP port (the A-side and client counters count UDP
//! apart): `hybrid` must give its TCP the DSR shape and its UDP the SNAT
//! one. A last case puts the NodePort's only endpoint on A itself.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rvs_testbed::k8s::ControlPlane;
use rvs_testbed::{Host, Server, connect, udp_ask, udp_socket};

use super::xdp::{PeerServer, Pins};
use super::{Node, WAIT, ip, node_addresses, real_server_fields, real_servers, real_servers_of};
use crate::dsr_opt::{OPTION_V4, OPTION_V6, Unpin, count_at_ingress, counters, counts};
use crate::harness::within;
use crate::netns::{Bed, in_ns, sh};

const T: Duration = Duration::from_secs(3);

/// Addresses as `[IPv4, IPv6]`: node A (the client's way in), node B (the
/// pod's node), the client, B on its pods' segment, the pod, the pods' CIDR.
const A: [&str; 2] = ["10.86.0.1", "fd86::1"];
const B: [&str; 2] = ["10.86.0.2", "fd86::2"];
const CLIENT: [&str; 2] = ["10.86.0.50", "fd86::50"];
const B_PODS: [&str; 2] = ["10.244.2.1", "fd44:2::1"];
const POD: [&str; 2] = ["10.244.2.11", "fd44:2::11"];
const POD_NET: [&str; 2] = ["10.244.2.0/24", "fd44:2::/64"];
const PREFIX: [&str; 2] = ["24", "64"];

/// Connections per family, each byte-checked.
const CONNECTIONS: usize = 5;

/// The pod's UDP port (the Service's port `dns`, UDP 53).
const UDP_PORT: u16 = 5353;

/// The bed and the cluster objects. Fields drop in order: the pins first,
/// while the namespaces exist, the bed last but the control plane.
struct Cluster {
    _unpin: [Unpin; 2],
    pins: [Pins; 2],
    _servers: Vec<PeerServer>,
    _udp: Vec<Server>,
    bed: Bed,
    cp: ControlPlane,
    /// The switch namespace (the bridge).
    sw: String,
    /// The nodes' `--node-port-mode`.
    mode: &'static str,
    client: Host,
    a: Host,
    b: Host,
    pod: Host,
    /// A's NodePort, `[IPv4, IPv6]`.
    external: [SocketAddr; 2],
    /// A's UDP NodePort (port `dns`), `[IPv4, IPv6]`.
    external_udp: [SocketAddr; 2],
}

fn add_v6(h: &Host, dev: &str, addr: &str) {
    let cidr = format!("{addr}/{}", PREFIX[1]);
    h.exec(&["ip", "-6", "addr", "add", &cidr, "dev", dev, "nodad"]);
}

fn mac(h: &Host) -> String {
    h.mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The bed and objects for the nodes' `--node-port-mode MODE`, or `None`
/// when the test is skipped; `tag` tells the tests' pins apart (they run
/// in one process).
fn cluster(mode: &'static str, tag: &str) -> Option<Cluster> {
    let test = &format!("kubernetes::dsr with --node-port-mode {mode} ({tag})");
    if !rvs_testbed::require_root(test, "network namespaces and XDP need root")
        || !rvs_testbed::require_tools(test, &["ip", "nsenter", "ethtool", "nft"])
    {
        return None;
    }
    let mut bed = Bed::new(test)?;
    let cp = ControlPlane::start_or_skip(test)?;
    let host = |bed: &mut Bed, role: &str, addr: [&str; 2]| {
        let h = bed.host(role, &format!("{}/{}", addr[0], PREFIX[0]));
        add_v6(&h, "eth0", addr[1]);
        h
    };
    let a = host(&mut bed, "a", A);
    let b = host(&mut bed, "b", B);
    let client = host(&mut bed, "client", CLIENT);
    bed.bridge("pods");
    let b_ns = b.ns.clone();
    bed.link(
        &b_ns,
        "pods",
        "eth1",
        &format!("{}/{}", B_PODS[0], PREFIX[0]),
    );
    add_v6(&b, "eth1", B_PODS[1]);
    let pod = bed.host_on("pod", "pods", &format!("{}/{}", POD[0], PREFIX[0]));
    add_v6(&pod, "eth0", POD[1]);
    pod.exec(&["ip", "route", "add", "default", "via", B_PODS[0]]);
    pod.exec(&["ip", "-6", "route", "add", "default", "via", B_PODS[1]]);
    // Nodes forward, as every Kubernetes node does (the XDP plane's SNAT
    // leaves through the kernel's FIB, which answers only where the
    // receiving interface forwards).
    for node in [&a, &b] {
        node.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
        node.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    }
    a.exec(&["ip", "route", "add", POD_NET[0], "via", B[0]]);
    a.exec(&["ip", "-6", "route", "add", POD_NET[1], "via", B[1]]);
    // A's XDP_TX toward B needs an XDP program on A's bridge port.
    bed.xdp_pass_on_port(&a);
    let servers = POD
        .iter()
        .map(|p| PeerServer::start(&pod, ip(p), 8080, "pod"))
        .collect();
    let udp = POD.iter().map(|p| udp_peer_server(&pod, ip(p))).collect();

    for (name, addrs) in [("node-a", A), ("node-b", B)] {
        cp.create_node(name, ip(addrs[0]), None)
            .expect("create node");
        node_addresses(&cp, name, &addrs);
    }
    cp.create_pod("default", "pod", "node-b", &[("app", "echo")], 8080)
        .expect("create pod");
    cp.set_pod_ready("default", "pod", &[ip(POD[0]), ip(POD[1])])
        .expect("pod ready");
    cp.apply(
        r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "echo", "namespace": "default"},
 "spec": {"type": "NodePort", "selector": {"app": "echo"},
          "externalTrafficPolicy": "Cluster",
          "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}}"#,
    )
    .expect("create service");
    let np = super::service_addrs(&cp, "default", "echo")
        .1
        .expect("a NodePort");
    let external = A.map(|a| SocketAddr::new(ip(a), np));
    let unp = super::service_json(&cp, "echo")["spec"]["ports"][1]["nodePort"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("a UDP NodePort");
    let external_udp = A.map(|a| SocketAddr::new(ip(a), unp));

    count_at_ingress(&pod, &[OPTION_V4, OPTION_V6]);
    let (a_mac, b_mac) = (mac(&a), mac(&b));
    // On A's link, outside A (its XDP program takes the replies of SNAT
    // flows before any hook of A's own would count them): the frames the
    // bridge forwards to A's port.
    let sw = bed.sw.clone();
    let nft = |args: &[&str]| {
        let mut cmd = vec!["ip", "netns", "exec", &sw, "nft"];
        cmd.extend_from_slice(args);
        sh(&cmd);
    };
    nft(&["add", "table", "bridge", "dsr"]);
    nft(&[
        "add", "chain", "bridge", "dsr", "links", "{", "type", "filter", "hook", "forward",
        "priority", "0", ";", "}",
    ]);
    for l3 in [
        "ip protocol tcp",
        "ip6 nexthdr tcp",
        "ip protocol udp",
        "ip6 nexthdr udp",
    ] {
        let rule = format!("oifname {} ether saddr {b_mac} {l3} counter", a.port);
        let mut args = vec!["add", "rule", "bridge", "dsr", "links"];
        args.extend(rule.split(' '));
        nft(&args);
    }
    let from = |m: &str, v6: bool, l4: &str, port: u16| {
        let (fam, addr) = if v6 { ("ip6", A[1]) } else { ("ip", A[0]) };
        format!("ether saddr {m} {fam} saddr {addr} {l4} sport {port}")
    };
    // TCP from B's MAC, from A's MAC, then UDP the same ([`Cluster::at_client`]).
    let rules: Vec<String> = [("tcp", np), ("udp", unp)]
        .into_iter()
        .flat_map(|(l4, port)| {
            [&b_mac, &a_mac]
                .into_iter()
                .flat_map(move |m| [false, true].map(|v6| from(m, v6, l4, port)))
        })
        .collect();
    count_at_ingress(
        &client,
        &rules.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let pid = std::process::id();
    Some(Cluster {
        _unpin: [Unpin(a.ns.clone()), Unpin(b.ns.clone())],
        pins: [Pins(format!("k{tag}a{pid}")), Pins(format!("k{tag}b{pid}"))],
        _servers: servers,
        _udp: udp,
        bed,
        cp,
        sw,
        mode,
        client,
        a,
        b,
        pod,
        external,
        external_udp,
    })
}

/// A UDP server in `host` on `addr`:[`UDP_PORT`] answering each datagram
/// `pod@PEER DATA`, PEER the address its socket saw the datagram from (as
/// [`PeerServer`] does for TCP; [`udp_ask`] returns `pod@PEER`).
fn udp_peer_server(host: &Host, addr: std::net::IpAddr) -> Server {
    let sock = host
        .run(move || std::net::UdpSocket::bind(SocketAddr::new(addr, UDP_PORT)))
        .expect("the pod's UDP server binds");
    Server::udp(sock, |data, from| {
        Some([format!("pod@{} ", from.ip()).as_bytes(), data].concat())
    })
}

impl Cluster {
    /// rvsd as node `i` (0: A, 1: B) with `--node-port-mode` [`Self::mode`],
    /// once it has programmed the pod under its NodePorts.
    fn start(&self, i: usize) -> Node {
        let (host, name, addrs) = [(&self.a, "node-a", A), (&self.b, "node-b", B)][i];
        let args = [
            "--interface",
            "eth0",
            "--instance",
            &self.pins[i].0,
            "--node-port-mode",
            self.mode,
        ];
        let node = Node::start(&self.cp, host, name, "xdp", &args);
        self.programmed(&node, addrs);
        node
    }

    /// rvsd on A, then on B, as [`Self::start`].
    fn start_both(&self) -> [Node; 2] {
        [self.start(0), self.start(1)]
    }

    /// Wait until `node`, whose addresses are `addrs`, lists the pod under
    /// its TCP and UDP NodePorts of both families.
    fn programmed(&self, node: &Node, addrs: [&str; 2]) {
        let (np, unp) = (self.external[0].port(), self.external_udp[0].port());
        within(
            "the node's NodePorts with the pod in rvsadm -Ln",
            WAIT,
            || {
                addrs.iter().zip(POD).all(|(addr, pod)| {
                    let has = |proto: &str, port: u16, pod_port: u16| {
                        let pod = SocketAddr::new(ip(pod), pod_port).to_string();
                        real_servers_of(&node.rvsd, proto, SocketAddr::new(ip(addr), port))
                            .iter()
                            .any(|(rs, _)| *rs == pod)
                    };
                    has("TCP", np, 8080) && has("UDP", unp, UDP_PORT)
                })
            },
        );
    }

    /// [`CONNECTIONS`] connections from the client to A's NodePort of
    /// family `f`, each byte-checked, each greeted `pod from PEER` with
    /// `peer` as PEER (the address the pod's accepted socket sees).
    fn exchange(&self, f: usize, peer: &str) {
        exchange(
            &self.client,
            self.external[f],
            &format!("pod from {}", ip(peer)),
        );
    }

    /// [`CONNECTIONS`] datagrams from the client to A's UDP NodePort of
    /// family `f`, each answered from that NodePort (the client's socket
    /// is connected to it) by the pod, which saw them come from `peer`.
    fn udp_exchange(&self, f: usize, peer: &str) {
        let to = self.external_udp[f];
        let sock = udp_socket(&self.client, ip(CLIENT[f])).expect("the client's UDP socket");
        // Connected: the kernel hands the socket only datagrams from A's
        // NodePort.
        sock.connect(to).expect("connect the UDP socket");
        // The first datagrams may find no endpoint scheduled yet (as TCP).
        within(&format!("a first UDP answer from {to}"), WAIT, || {
            udp_ask(&sock, to, "first", Duration::from_millis(500)).is_ok()
        });
        let want = format!("pod@{}", ip(peer));
        for i in 0..CONNECTIONS {
            let got = udp_ask(&sock, to, &format!("datagram {i}"), T)
                .unwrap_or_else(|e| panic!("datagram {i} to {to}: {e}"));
            assert_eq!(got, want, "{to}: the pod's socket sees {peer}");
        }
    }

    /// TCP frames from B's MAC the bridge forwarded to A, `[IPv4, IPv6]`.
    fn at_a(&self) -> Vec<u64> {
        counters(&self.sw, "bridge")[..2].to_vec()
    }

    /// UDP frames from B's MAC the bridge forwarded to A, `[IPv4, IPv6]`.
    fn udp_at_a(&self) -> Vec<u64> {
        counters(&self.sw, "bridge")[2..].to_vec()
    }

    /// Replies at the client with A's address and NodePort, TCP: `[from
    /// B's MAC IPv4, IPv6, from A's MAC IPv4, IPv6]`.
    fn at_client(&self) -> Vec<u64> {
        counts(&self.client)[..4].to_vec()
    }

    /// [`Self::at_client`] for UDP (A's UDP NodePort).
    fn udp_at_client(&self) -> Vec<u64> {
        counts(&self.client)[4..].to_vec()
    }
}

/// Counters `now` less the same counters `before`.
fn since(now: Vec<u64>, before: &[u64]) -> Vec<u64> {
    now.iter().zip(before).map(|(n, b)| n - b).collect()
}

/// Wait for a first connection from `client` to `to` that the pod greets.
/// The XDP plane schedules an endpoint once it has resolved the next hop
/// toward it: the first attempts may find none, and the ingress node's
/// kernel refuses them (a reset from its address, port and MAC), so tests
/// that count where replies come from count after this.
fn first_connection(client: &Host, to: SocketAddr) {
    within(&format!("a first connection to {to}"), WAIT, || {
        connect(client, to, Duration::from_millis(500)).is_ok_and(|c| !c.server.is_empty())
    });
}

/// [`CONNECTIONS`] connections from `client` to `to`, each byte-checked,
/// each greeted `want` by the pod (after [`first_connection`]).
fn exchange(client: &Host, to: SocketAddr, want: &str) {
    first_connection(client, to);
    let msg: String = (0..2000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let got = (0..CONNECTIONS)
        .map(|i| {
            let mut c =
                connect(client, to, T).unwrap_or_else(|e| panic!("connection {i} to {to}: {e}"));
            assert_eq!(
                c.stream.peer_addr().expect("peer"),
                to,
                "the client's socket is connected to A's NodePort"
            );
            c.echo(&msg, T)
                .unwrap_or_else(|e| panic!("connection {i} to {to}: echo: {e}"));
            c.echo("second round", T)
                .unwrap_or_else(|e| panic!("connection {i} to {to}: second echo: {e}"));
            c.server
        })
        .collect::<Vec<_>>();
    assert!(
        got.iter().all(|g| g == want),
        "{to}: the pod greets {want:?}: {got:?}"
    );
}

/// Whether the DSR option programs are attached (pinned) on eth0 of `h`.
fn dsr_attached(h: &Host) -> bool {
    in_ns(&h.ns, || {
        rvs_xdp::dsr_rs::is_pinned("eth0").unwrap_or(false)
    })
}

/// `--node-port-mode dsr`, IPv4 and IPv6: with only A running, the option
/// reaches the pod (the counter counts) and no connection completes; once
/// B runs the same rvsd, each connection works byte for byte, the pod's
/// socket sees the client's address, no option reaches the pod, the
/// replies reach the client from B's MAC with A's address and NodePort,
/// and A sees no TCP from B at all.
#[test]
fn kubernetes_dsr_node_port_replies_bypass_the_ingress_node() {
    let Some(c) = cluster("dsr", "dsr") else {
        return;
    };
    let node_a = c.start(0);
    assert!(dsr_attached(&c.a), "A attached the DSR option programs");

    // B without rvsd: the option travels to the pod and the connection
    // fails (the pod answers from its own address, unknown to the client).
    for f in 0..2 {
        let deadline = Instant::now() + WAIT;
        while counts(&c.pod)[f] == 0 {
            assert!(
                connect(&c.client, c.external[f], Duration::from_millis(300)).is_err(),
                "{}: no connection while B lacks the DSR option programs",
                c.external[f]
            );
            assert!(
                Instant::now() < deadline,
                "{}: no option packet ever reached the pod",
                c.external[f]
            );
        }
    }

    let node_b = c.start(1);
    within("B's DSR option programs attached by its rvsd", WAIT, || {
        dsr_attached(&c.b)
    });
    // Counted from here: while A had no next hop toward the pod, its
    // kernel refused some of the SYNs above (a reset from A's address and
    // NodePort, from A's MAC), as a Service without a reachable endpoint
    // is refused.
    let (pod_before, a_before, client_before) = (counts(&c.pod), c.at_a(), c.at_client());
    for (f, client) in CLIENT.iter().enumerate() {
        c.exchange(f, client);
    }
    let stats = in_ns(&c.b.ns, || rvs_xdp::dsr_rs::pinned_stats("eth0"));
    eprintln!("dsr: B's DSR programs: {stats:?}");
    let (pod, a, client) = (
        counts(&c.pod),
        since(c.at_a(), &a_before),
        since(c.at_client(), &client_before),
    );
    eprintln!(
        "dsr: options at the pod before B / after {pod_before:?} / {pod:?}; TCP from B at A {a:?}; replies at the client from B's MAC, A's MAC {client:?} (before B: {client_before:?})"
    );
    assert_eq!(pod, pod_before, "no packet with the option reached the pod");
    replies_bypassed_a("TCP", &a, &client);
    drop((node_b, node_a));
}

/// The same bed with `--node-port-mode snat` (the default): the
/// connections work, but the pod sees A's address, the replies go back
/// through A (A counts TCP from B) and reach the client from A's MAC — the
/// counters of the DSR test tell the two modes apart.
#[test]
fn kubernetes_snat_node_port_replies_return_through_the_ingress_node() {
    let Some(c) = cluster("snat", "snat") else {
        return;
    };
    let nodes = c.start_both();
    for (f, a) in A.iter().enumerate() {
        c.exchange(f, a);
    }
    assert!(!dsr_attached(&c.b), "no DSR option programs with snat");
    let (pod, a, client) = (counts(&c.pod), c.at_a(), c.at_client());
    eprintln!(
        "snat: options at the pod {pod:?}; TCP from B at A {a:?}; replies at the client from B's MAC, A's MAC {client:?}"
    );
    assert_eq!(pod, vec![0, 0], "no option with SNAT");
    replies_through_a("TCP", &a, &client);
    drop(nodes);
}

/// The DSR shape of the counters of `what` (TCP or UDP): `at_a` (frames
/// from B the bridge forwarded to A, `[IPv4, IPv6]`) none, `at_client`
/// (replies with A's address and NodePort `[from B's MAC IPv4, IPv6, from
/// A's MAC IPv4, IPv6]`) all from B's MAC.
fn replies_bypassed_a(what: &str, at_a: &[u64], at_client: &[u64]) {
    assert_eq!(at_a, [0, 0], "{what}: no reply passed A");
    assert!(
        at_client[0] > 0 && at_client[1] > 0,
        "{what}: the replies reached the client from B's MAC with A's address and NodePort: {at_client:?}"
    );
    assert_eq!(
        &at_client[2..],
        &[0, 0],
        "{what}: none from A's MAC: {at_client:?}"
    );
}

/// The SNAT shape of the counters of [`replies_bypassed_a`]: the replies
/// passed A and reached the client from A's MAC only.
fn replies_through_a(what: &str, at_a: &[u64], at_client: &[u64]) {
    assert!(
        at_a[0] > 0 && at_a[1] > 0,
        "{what}: the replies passed A: {at_a:?}"
    );
    assert_eq!(
        &at_client[..2],
        &[0, 0],
        "{what}: none from B's MAC: {at_client:?}"
    );
    assert!(
        at_client[2] > 0 && at_client[3] > 0,
        "{what}: from A's MAC: {at_client:?}"
    );
}

/// `--node-port-mode hybrid` (DSR for TCP, SNAT for UDP), IPv4 and IPv6, on
/// the bed of the DSR test with a Service of one TCP and one UDP port: TCP
/// as in the DSR test (the pod sees the client, no option reaches it, the
/// replies come from B's MAC and none passes A), UDP as in the SNAT one
/// (the pod sees A's address, the replies pass A and come from A's MAC).
/// Nodes running `dsr` instead fail the UDP greeting (the pod sees the
/// client), nodes running `snat` the TCP one (it sees A).
#[test]
fn kubernetes_hybrid_node_port_tcp_bypasses_the_ingress_node_udp_returns_through_it() {
    let Some(c) = cluster("hybrid", "hyb") else {
        return;
    };
    // rvsd attaches the DSR option programs before it programs any
    // service, so B has them once both are started.
    let nodes = c.start_both();
    for to in c.external {
        first_connection(&c.client, to);
    }
    let (a_before, client_before) = (c.at_a(), c.at_client());
    for f in 0..2 {
        c.exchange(f, CLIENT[f]);
        c.udp_exchange(f, A[f]);
    }
    assert!(dsr_attached(&c.b), "B attached the DSR option programs");
    let pod = counts(&c.pod);
    let (a, client) = (
        since(c.at_a(), &a_before),
        since(c.at_client(), &client_before),
    );
    let (udp_a, udp_client) = (c.udp_at_a(), c.udp_at_client());
    eprintln!(
        "hybrid: options at the pod {pod:?}; from B at A: TCP {a:?} UDP {udp_a:?}; replies at the client from B's MAC, A's MAC: TCP {client:?} UDP {udp_client:?}"
    );
    assert_eq!(pod, vec![0, 0], "no packet with the option reached the pod");
    replies_bypassed_a("TCP", &a, &client);
    replies_through_a("UDP", &udp_a, &udp_client);
    drop(nodes);
}

/// A's pod of [`kubernetes_dsr_node_port_to_an_endpoint_on_the_ingress_node`]:
/// A's address on its segment, the pod's.
const A_PODS: [&str; 2] = ["10.244.1.1", "fd44:1::1"];
const A_POD: [&str; 2] = ["10.244.1.11", "fd44:1::11"];

/// `--node-port-mode dsr` with the NodePort's only endpoint on the
/// ingress node A itself (docs/kubernetes.md, DSR nodes): rvs gives a
/// local endpoint plain NAT, no option (Cilium does the same), so that the
/// pod's replies come back through A's program. The pod sits on A's
/// segment with a subnet of its own and its default route via A (the
/// one-arm shape of `kubernetes::xdp`); B runs no rvsd. Two dual-stack
/// NodePorts select it, `externalTrafficPolicy: Cluster` and `Local`:
/// byte-checked connections to A's NodePorts over IPv4 and IPv6, the pod
/// seeing the client's address, no option reaching the pod, `rvsadm -Ln`
/// listing it as `Masq`.
#[test]
fn kubernetes_dsr_node_port_to_an_endpoint_on_the_ingress_node() {
    let Some(mut c) = cluster("dsr", "loc") else {
        return;
    };
    let apod = c.bed.host("apod", &format!("{}/{}", A_POD[0], PREFIX[0]));
    add_v6(&apod, "eth0", A_POD[1]);
    add_v6(&c.a, "eth0", A_PODS[1]);
    let cidr = format!("{}/{}", A_PODS[0], PREFIX[0]);
    c.a.exec(&["ip", "addr", "add", &cidr, "dev", "eth0"]);
    apod.exec(&["ip", "route", "add", "default", "via", A_PODS[0]]);
    apod.exec(&["ip", "-6", "route", "add", "default", "via", A_PODS[1]]);
    let _servers: Vec<PeerServer> = A_POD
        .iter()
        .map(|p| PeerServer::start(&apod, ip(p), 8080, "apod"))
        .collect();
    count_at_ingress(&apod, &[OPTION_V4, OPTION_V6]);
    c.cp.create_pod("default", "apod", "node-a", &[("app", "local")], 8080)
        .expect("create pod");
    c.cp.set_pod_ready("default", "apod", &[ip(A_POD[0]), ip(A_POD[1])])
        .expect("pod ready");
    for (name, policy) in [("local", "Cluster"), ("local-etp", "Local")] {
        c.cp.apply(&format!(
            r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "{name}", "namespace": "default"}},
 "spec": {{"type": "NodePort", "selector": {{"app": "local"}},
          "externalTrafficPolicy": "{policy}",
          "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
          "ports": [{{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}}]}}}}"#
        ))
        .expect("create service");
    }
    let node_a = c.start(0);
    assert!(dsr_attached(&c.a), "A attached the DSR option programs");
    for name in ["local", "local-etp"] {
        let np = super::service_addrs(&c.cp, "default", name)
            .1
            .expect("a NodePort");
        for f in 0..2 {
            let to = SocketAddr::new(ip(A[f]), np);
            let pod = SocketAddr::new(ip(A_POD[f]), 8080).to_string();
            within(&format!("{name}: A's pod under {to}"), WAIT, || {
                real_servers(&node_a.rvsd, to)
                    .iter()
                    .any(|(rs, _)| *rs == pod)
            });
            let listed = real_server_fields(&node_a.rvsd, "TCP", to);
            assert!(
                listed
                    .iter()
                    .any(|f| f.get(1) == Some(&pod) && f.get(2).is_some_and(|m| m == "Masq")),
                "{name}: A's own pod is a NAT (Masq) real server of {to}: {listed:?}"
            );
            exchange(&c.client, to, &format!("apod from {}", ip(CLIENT[f])));
        }
    }
    let options = counts(&apod);
    eprintln!("dsr, local endpoint: options at A's pod {options:?}");
    assert_eq!(
        options,
        vec![0, 0],
        "no packet with the option reached A's pod"
    );
    drop(node_a);
}
