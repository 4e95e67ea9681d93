//! `rvsd --dataplane xdp --interface eth0 --kubernetes`: the node's
//! service proxy in the XDP program, as Cilium serves traffic from other
//! hosts. The node namespace forwards to its pods on a subnet of their own
//! (10.83.0.0/24, default route via the node: NAT's one-arm shape, so the
//! replies come back through the program); a client on another host uses
//! the NodePort.
//!
//! rvsd runs under `nsenter --net` with a unique `--instance`, so its pins
//! (program, maps, saved table) outlive it and a restarted rvsd adopts
//! them; [`Pins`] removes them at the end, even on failure.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rvs_testbed::k8s::ControlPlane;
use rvs_testbed::{Host, connect};

use super::{Node, WAIT, app_pod, ip, real_servers, service_addrs};
use crate::harness::within;
use crate::netns::Bed;

const T: Duration = Duration::from_secs(3);

/// The node's address (the Node object's InternalIP) and its address on
/// the pods' subnet.
const NODE: &str = "10.81.0.1";
const NODE_PODS: &str = "10.83.0.1";

/// Removes the XDP pins and the saved table of rvsd `--instance NAME` on
/// drop.
pub(super) struct Pins(pub(super) String);

impl Drop for Pins {
    fn drop(&mut self) {
        if let Ok(i) = rvs_xdp::pin::Instance::new(&self.0) {
            let _ = i.remove();
        }
        let _ = std::fs::remove_file(format!("/run/rvs/{}.table", self.0));
    }
}

/// What a node needs on `plane`, for a test tagged `tag`: the bed (as
/// [`crate::netns::Bed`]), and on the XDP plane an XDP_PASS program on the
/// node's bridge port (XDP_TX back out of its veth needs a program on the
/// peer), a unique `--instance` whose pins are removed on drop, and rvsd's
/// arguments (`--interface eth0 --instance NAME`); nothing on the others.
pub(super) fn on_plane(
    bed: rvs_testbed::Bed,
    node: &Host,
    plane: &str,
    tag: &str,
) -> (Bed, Option<Pins>, Vec<String>) {
    let mut bed = Bed::from(bed);
    if plane != "xdp" {
        return (bed, None, Vec::new());
    }
    bed.xdp_pass_on_port(node);
    let instance = format!("{tag}{}", std::process::id());
    let args = ["--interface", "eth0", "--instance", &instance]
        .map(str::to_owned)
        .to_vec();
    (bed, Some(Pins(instance)), args)
}

/// The shape of [`bed`] for pods `(name, address)` made by
/// [`super::app_pods`] on `bed`: the node also on their subnet at `gw`
/// (`ADDR/LEN`) and forwarding, each pod's default route via it (NAT's
/// one-arm shape: the pods' answers come back through the program).
pub(super) fn pods_behind(bed: &rvs_testbed::Bed, node: &Host, gw: &str, pods: &[(&str, &str)]) {
    node.exec(&["ip", "addr", "add", gw, "dev", "eth0"]);
    node.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
    let via = gw.split('/').next().unwrap_or(gw);
    for (name, _) in pods {
        let ns = format!("{}-{name}", bed.prefix());
        let out = std::process::Command::new("ip")
            .args([
                "netns", "exec", &ns, "ip", "route", "add", "default", "via", via,
            ])
            .output()
            .expect("ip netns exec");
        assert!(out.status.success(), "{ns}: {out:?}");
    }
}

/// A TCP server in `host` on `addr:port` that answers every connection
/// with `NAME from PEER-ADDRESS\n` (whom the pod's socket sees), then echoes
/// its input until EOF (idle bound 60 s); stops on drop.
pub(super) struct PeerServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeerServer {
    pub(super) fn start(host: &Host, addr: IpAddr, port: u16, name: &str) -> PeerServer {
        let listener =
            host.run(move || TcpListener::bind(SocketAddr::new(addr, port)).expect("server bind"));
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, name) = (stop.clone(), name.to_owned());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, peer)) => {
                        let line = format!("{name} from {}\n", peer.ip());
                        std::thread::spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                            if s.write_all(line.as_bytes()).is_err() {
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
        PeerServer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A NodePort Service `name` selecting `app=echo`, port 80 to 8080, with
/// `externalTrafficPolicy: POLICY`.
fn node_port_service(name: &str, policy: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "{name}", "namespace": "default"}},
 "spec": {{"type": "NodePort", "selector": {{"app": "echo"}},
          "externalTrafficPolicy": "{policy}",
          "ports": [{{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}}]}}}}"#
    )
}

/// The pods that answer `n` connections from `from` to `to` (each line
/// `NAME from ADDR`), once every one of `expect` distinct lines has been
/// seen: the XDP plane schedules a real server only once it has resolved
/// its MAC, so the first connections may find only some.
fn answers(from: &Host, to: SocketAddr, expect: usize, n: usize) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    within("every pod reachable through the NodePort", WAIT, || {
        if let Ok(c) = connect(from, to, Duration::from_millis(500)) {
            seen.insert(c.server);
        }
        seen.len() >= expect
    });
    (0..n)
        .map(|_| connect(from, to, T).map(|c| c.server).unwrap_or_default())
        .collect()
}

/// The bed: node (XDP on eth0, forwarding), a client on another host, and
/// two pods on the node's pod subnet answering with whom they see.
fn bed(test: &str) -> Option<(Bed, Host, Host, Vec<PeerServer>)> {
    let mut bed = Bed::new(test)?;
    let node = bed.host("node", &format!("{NODE}/24"));
    node.exec(&[
        "ip",
        "addr",
        "add",
        &format!("{NODE_PODS}/24"),
        "dev",
        "eth0",
    ]);
    node.exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"]);
    bed.xdp_pass_on_port(&node);
    let client = bed.host("client", "10.81.0.50/24");
    let mut servers = Vec::new();
    for (name, addr) in [("pod1", "10.83.0.11"), ("pod2", "10.83.0.12")] {
        let h = bed.host(name, &format!("{addr}/24"));
        h.exec(&["ip", "route", "add", "default", "via", NODE_PODS]);
        servers.push(PeerServer::start(&h, ip(addr), 8080, name));
    }
    Some((bed, node, client, servers))
}

/// A control plane and the [`bed`] with node1, its two pods and the
/// NodePort Service `echo` with `externalTrafficPolicy: POLICY`.
struct Echo {
    cp: ControlPlane,
    _bed: Bed,
    node: Host,
    client: Host,
    _servers: Vec<PeerServer>,
    /// The ClusterIP's port 80.
    cluster: SocketAddr,
    /// The NodePort on the node's address.
    external: SocketAddr,
}

/// [`Echo`] for `test`, or `None` when it is skipped.
fn echo(test: &str, policy: &str) -> Option<Echo> {
    let cp = ControlPlane::start_or_skip(test)?;
    let (bed, node, client, servers) = bed(test)?;
    cp.create_node("node1", ip(NODE), None)
        .expect("create node");
    app_pod(&cp, "pod1", "node1", "10.83.0.11", "echo");
    app_pod(&cp, "pod2", "node1", "10.83.0.12", "echo");
    cp.apply(&node_port_service("echo", policy))
        .expect("create service");
    let (cip, np) = service_addrs(&cp, "default", "echo");
    Some(Echo {
        cp,
        _bed: bed,
        node,
        client,
        _servers: servers,
        cluster: SocketAddr::new(cip, 80),
        external: SocketAddr::new(ip(NODE), np.expect("a NodePort")),
    })
}

/// loadbalancer.go "should work for type=NodePort" with
/// `externalTrafficPolicy: Local` ("should preserve source IP") on the XDP
/// plane, then rvsd killed and restarted under load:
/// - both local pods answer the NodePort from another host, and each sees
///   the client's own address (no source NAT);
/// - a long byte-checked stream through the NodePort runs on while rvsd is
///   killed (SIGKILL) and started again on its pinned program and maps:
///   not one byte lost or changed;
/// - a Service created while rvsd was down is served once it is back (the
///   restarted rvsd adopts its saved table and reconciles it with the API
///   server's), and the first Service is still programmed.
#[test]
fn kubernetes_xdp_node_port_local_keeps_the_client_and_survives_a_restart() {
    let test = "kubernetes_xdp_node_port_local_keeps_the_client_and_survives_a_restart";
    if !rvs_testbed::require_root(test, "network namespaces need root")
        || !rvs_testbed::require_tools(test, &["ip", "nsenter", "ethtool"])
    {
        return;
    }
    let Some(Echo {
        cp,
        _bed,
        node,
        client,
        _servers,
        cluster: _,
        external,
    }) = echo(test, "Local")
    else {
        return;
    };

    let instance = format!("k8sxdp{}", std::process::id());
    let _pins = Pins(instance.clone());
    let args = ["--interface", "eth0", "--instance", instance.as_str()];
    let first = Node::start(&cp, &node, "node1", "xdp", &args);
    within("the NodePort's two endpoints in rvsadm -Ln", WAIT, || {
        real_servers(&first.rvsd, external).len() == 2
    });

    // (a) The pod sees the client's address.
    let got = answers(&client, external, 2, 20);
    let mut by_pod = std::collections::BTreeMap::new();
    for g in &got {
        *by_pod.entry(g.as_str()).or_insert(0) += 1;
    }
    assert_eq!(
        by_pod.keys().copied().collect::<Vec<_>>(),
        vec!["pod1 from 10.81.0.50", "pod2 from 10.81.0.50"],
        "both pods, each seeing the client: {got:?}"
    );

    // (b) A long stream through the NodePort while rvsd is killed and
    // restarted.
    let conn = connect(&client, external, T).expect("the stream's connection");
    assert!(conn.server.ends_with("from 10.81.0.50"), "{}", conn.server);
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let stop = stop.clone();
        std::thread::spawn(move || crate::restart::stream(conn.stream, 0x6b38, stop))
    };
    std::thread::sleep(Duration::from_millis(500));
    first.rvsd.signal("KILL");
    // While rvsd is down: a new Service.
    cp.apply(&node_port_service("late", "Local"))
        .expect("create the late service");
    let (_, late_np) = service_addrs(&cp, "default", "late");
    let late = SocketAddr::new(ip(NODE), late_np.expect("a NodePort"));
    let second = Node::start(&cp, &node, "node1", "xdp", &args);
    within(
        "the late Service programmed after the restart",
        WAIT,
        || real_servers(&second.rvsd, late).len() == 2,
    );
    assert_eq!(
        real_servers(&second.rvsd, external).len(),
        2,
        "the first Service kept"
    );
    let got = answers(&client, late, 2, 10);
    assert!(
        got.iter().all(|g| g.ends_with("from 10.81.0.50")),
        "the late Service served, the client's address kept: {got:?}"
    );
    // The stream ran through all of it.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let bytes = runner
        .join()
        .expect("the stream's thread")
        .expect("the stream through the restart");
    eprintln!("{test}: {bytes} bytes checked through the restart");
    assert!(bytes > 0);
    drop(first);
}

/// The planes as Cilium uses them (`--dataplane xdp,sock`): a NodePort with
/// `externalTrafficPolicy: Cluster` (SNAT: FULLNAT from the node's address)
/// is programmed on both planes, served from another host through XDP —
/// the pods see the node's address — and from the node's own cgroup at
/// connect(), on the node's address and on 127.0.0.1 (nothing skipped);
/// the ClusterIP reaches both pods from a process in the node's cgroup,
/// rewritten at connect() (nothing listens on the ClusterIP and the node
/// has no route to it).
#[test]
fn kubernetes_xdp_sock_snat_node_port_and_cluster_ip_at_the_socket() {
    let test = "kubernetes_xdp_sock_snat_node_port_and_cluster_ip_at_the_socket";
    if !rvs_testbed::require_root(test, "network namespaces need root")
        || !rvs_testbed::require_tools(test, &["ip", "nsenter", "ethtool", "bash"])
    {
        return;
    }
    if rvs_testbed::cgroup::unified_root().is_none() {
        return rvs_testbed::skip_or_fail(test, "no cgroup v2 hierarchy mounted");
    }
    let Some(Echo {
        cp,
        _bed,
        node,
        client,
        _servers,
        cluster,
        external,
    }) = echo(test, "Cluster")
    else {
        return;
    };

    let instance = format!("k8sxs{}", std::process::id());
    let _pins = Pins(instance.clone());
    let cg = rvs_testbed::Cgroup::new("rvsk8sxdpsock");
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let http = SocketAddr::new(ip("127.0.0.1"), 9181);
    let n = Node::start(
        &cp,
        &node,
        "node1",
        "xdp,sock",
        &[
            "--interface",
            "eth0",
            "--instance",
            &instance,
            "--cgroup",
            &cgroup,
            "--http",
            "127.0.0.1:9181",
        ],
    );
    let d = &n.rvsd;
    within("the ClusterIP and the NodePort in rvsadm -Ln", WAIT, || {
        real_servers(d, cluster).len() == 2 && real_servers(d, external).len() == 2
    });

    // The SNAT NodePort from another host, through XDP.
    let got = answers(&client, external, 2, 20);
    let mut by_pod = std::collections::BTreeMap::new();
    for g in &got {
        *by_pod.entry(g.as_str()).or_insert(0) += 1;
    }
    assert_eq!(
        by_pod.keys().copied().collect::<Vec<_>>(),
        vec!["pod1 from 10.81.0.1", "pod2 from 10.81.0.1"],
        "both pods, each seeing the node's address (SNAT): {got:?}"
    );
    let log = n.log();
    assert!(
        !log.contains("is not carried by the sock data plane"),
        "no Service skipped by the sock plane: {log}"
    );
    assert!(!log.contains("not carried out"), "nothing refused: {log}");
    let m = super::scrape(&node, http);
    let skipped = m
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"rvs_dataplane_services_skipped{plane="sock"} "#)?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    assert_eq!(skipped, 0, "{m}");

    // The SNAT NodePort from the node's own cgroup, on the node's address
    // and on 127.0.0.1 (as Cilium's socket LB): at connect(), the socket's
    // own node address standing for the pool. Nothing listens on the
    // NodePort and the XDP program never sees the node's own packets, so
    // without the sock plane each of these is refused.
    for to in [external, SocketAddr::new(ip("127.0.0.1"), external.port())] {
        // (Maglev, the NodePort's scheduler, hashes the unbound socket's
        // address: one pod for all of them.)
        let got = super::in_cgroup_connections(&node, &cgroup, to, 20);
        let served = got
            .iter()
            .filter(|g| g.starts_with("pod1 ") || g.starts_with("pod2 "))
            .count();
        assert_eq!(served, 20, "the NodePort {to} from the node: {got:?}");
    }

    // The ClusterIP from the node's cgroup: at the socket.
    // 20 connections from the node's namespace and cgroup.
    let got = super::in_cgroup_connections(&node, &cgroup, cluster, 20);
    let pod1 = got.iter().filter(|g| g.starts_with("pod1 ")).count();
    let pod2 = got.iter().filter(|g| g.starts_with("pod2 ")).count();
    assert_eq!((pod1, pod2), (10, 10), "{got:?}");
}
