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
//! A's address — so the counters demonstrably tell the two apart.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rvs_testbed::k8s::ControlPlane;
use rvs_testbed::{Host, connect};

use super::xdp::{PeerServer, Pins};
use super::{Node, WAIT, ip, node_addresses, real_servers};
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

/// The bed and the cluster objects. Fields drop in order: the pins first,
/// while the namespaces exist, the bed last but the control plane.
struct Cluster {
    _unpin: [Unpin; 2],
    pins: [Pins; 2],
    _servers: Vec<PeerServer>,
    _bed: Bed,
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
/// when the test is skipped.
fn cluster(mode: &'static str) -> Option<Cluster> {
    let test = &format!("kubernetes::dsr with --node-port-mode {mode}");
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
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#,
    )
    .expect("create service");
    let np = super::service_addrs(&cp, "default", "echo")
        .1
        .expect("a NodePort");
    let external = A.map(|a| SocketAddr::new(ip(a), np));

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
    for l3 in ["ip protocol tcp", "ip6 nexthdr tcp"] {
        let rule = format!("oifname {} ether saddr {b_mac} {l3} counter", a.port);
        let mut args = vec!["add", "rule", "bridge", "dsr", "links"];
        args.extend(rule.split(' '));
        nft(&args);
    }
    let from = |m: &str, v6: bool| {
        let (fam, addr) = if v6 { ("ip6", A[1]) } else { ("ip", A[0]) };
        format!("ether saddr {m} {fam} saddr {addr} tcp sport {np}")
    };
    count_at_ingress(
        &client,
        &[
            &from(&b_mac, false),
            &from(&b_mac, true),
            &from(&a_mac, false),
            &from(&a_mac, true),
        ],
    );
    let pid = std::process::id();
    Some(Cluster {
        _unpin: [Unpin(a.ns.clone()), Unpin(b.ns.clone())],
        pins: [
            Pins(format!("k{mode}a{pid}")),
            Pins(format!("k{mode}b{pid}")),
        ],
        _servers: servers,
        _bed: bed,
        cp,
        sw,
        mode,
        client,
        a,
        b,
        pod,
        external,
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

    /// Wait until `node`, whose addresses are `addrs`, lists the pod under
    /// both of its NodePorts.
    fn programmed(&self, node: &Node, addrs: [&str; 2]) {
        let np = self.external[0].port();
        within(
            "the node's NodePorts with the pod in rvsadm -Ln",
            WAIT,
            || {
                addrs.iter().zip(POD).all(|(addr, pod)| {
                    let pod = SocketAddr::new(ip(pod), 8080).to_string();
                    real_servers(&node.rvsd, SocketAddr::new(ip(addr), np))
                        .iter()
                        .any(|(rs, _)| *rs == pod)
                })
            },
        );
    }

    /// [`CONNECTIONS`] connections from the client to A's NodePort of
    /// family `f`, each byte-checked, each greeted `pod from PEER` with
    /// `peer` as PEER (the address the pod's accepted socket sees).
    fn exchange(&self, f: usize, peer: &str) {
        let to = self.external[f];
        // The XDP plane schedules an endpoint once it has resolved the next
        // hop toward it: the first attempts may find none.
        within(&format!("a first connection to {to}"), WAIT, || {
            connect(&self.client, to, Duration::from_millis(500))
                .is_ok_and(|c| !c.server.is_empty())
        });
        let msg: String = (0..2000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let got = (0..CONNECTIONS)
            .map(|i| {
                let mut c = connect(&self.client, to, T)
                    .unwrap_or_else(|e| panic!("connection {i} to {to}: {e}"));
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
        let want = format!("pod from {}", ip(peer));
        assert!(
            got.iter().all(|g| *g == want),
            "{to}: the pod's socket sees {peer}: {got:?}"
        );
    }
}

impl Cluster {
    /// TCP frames from B's MAC the bridge forwarded to A, `[IPv4, IPv6]`.
    fn at_a(&self) -> Vec<u64> {
        counters(&self.sw, "bridge")
    }
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
    let Some(c) = cluster("dsr") else { return };
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
    let pod_before = counts(&c.pod);
    for (f, client) in CLIENT.iter().enumerate() {
        c.exchange(f, client);
    }
    let stats = in_ns(&c.b.ns, || rvs_xdp::dsr_rs::pinned_stats("eth0"));
    eprintln!("dsr: B's DSR programs: {stats:?}");
    let (pod, a, client) = (counts(&c.pod), c.at_a(), counts(&c.client));
    eprintln!(
        "dsr: options at the pod before B / after {pod_before:?} / {pod:?}; TCP from B at A {a:?}; replies at the client from B's MAC, A's MAC {client:?}"
    );
    assert_eq!(pod, pod_before, "no packet with the option reached the pod");
    assert_eq!(a, vec![0, 0], "no reply passed A");
    assert!(
        client[0] > 0 && client[1] > 0,
        "the replies reached the client from B's MAC with A's address and NodePort: {client:?}"
    );
    assert_eq!(&client[2..], &[0, 0], "none from A's MAC: {client:?}");
    drop((node_b, node_a));
}

/// The same bed with `--node-port-mode snat` (the default): the
/// connections work, but the pod sees A's address, the replies go back
/// through A (A counts TCP from B) and reach the client from A's MAC — the
/// counters of the DSR test tell the two modes apart.
#[test]
fn kubernetes_snat_node_port_replies_return_through_the_ingress_node() {
    let Some(c) = cluster("snat") else { return };
    let node_a = c.start(0);
    let node_b = c.start(1);
    for (f, a) in A.iter().enumerate() {
        c.exchange(f, a);
    }
    assert!(!dsr_attached(&c.b), "no DSR option programs with snat");
    let (pod, a, client) = (counts(&c.pod), c.at_a(), counts(&c.client));
    eprintln!(
        "snat: options at the pod {pod:?}; TCP from B at A {a:?}; replies at the client from B's MAC, A's MAC {client:?}"
    );
    assert_eq!(pod, vec![0, 0], "no option with SNAT");
    assert!(a[0] > 0 && a[1] > 0, "the replies passed A: {a:?}");
    assert_eq!(&client[..2], &[0, 0], "none from B's MAC: {client:?}");
    assert!(client[2] > 0 && client[3] > 0, "from A's MAC: {client:?}");
    drop((node_b, node_a));
}
