//! Upstream sig-network Service behaviours (test/e2e/network/service.go)
//! through `rvsd --dataplane proxy --kubernetes`: multiple ports, TCP and
//! UDP on one port number, session affinity, terminating endpoints, UDP
//! across a scale to zero.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use rvs_testbed::{Bed, Host, connect, udp_ask, udp_socket};

use super::{
    Node, T, WAIT, app_pod, app_pods, bed_with_node, ip, nodes, real_servers, real_servers_of,
    servers, service_addrs, service_json, set, setup,
};
use crate::harness::within;

/// The names `n` questions from fresh UDP sockets of `from` to `to` got
/// (none unanswered).
fn udp_servers(from: &Host, to: SocketAddr, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|i| {
            let s = udp_socket(from, ip("0.0.0.0")).expect("udp socket");
            udp_ask(&s, to, &format!("q{i}"), T).unwrap_or_else(|e| panic!("{to} UDP: {e}"))
        })
        .collect()
}

const MULTIPORT: &str = r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "multi", "namespace": "default"},
 "spec": {"type": "NodePort", "selector": {"app": "echo"},
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "alt", "port": 81, "targetPort": 8081, "protocol": "TCP"},
                    {"name": "dns-tcp", "port": 53, "targetPort": 5353, "protocol": "TCP"},
                    {"name": "dns-udp", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}}"#;

/// service.go "should serve multiport endpoints from pods" and "should
/// serve a basic endpoint from pods" with TCP and UDP on one port number:
/// each named port of the ClusterIP (from the node) and of its NodePort
/// (from another host) reaches the matching target port of both pods, and
/// port 53 answers over TCP and over UDP from the pods' TCP and UDP
/// servers.
#[test]
fn kubernetes_multiport_and_tcp_udp_on_one_port() {
    let test = "kubernetes_multiport_and_tcp_udp_on_one_port";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8smp");
    let pods = [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")];
    for (name, addr) in pods {
        let h = bed.host(name, &format!("{addr}/24"));
        bed.server(&h, ip(addr), 8080, &format!("{name}-web"));
        bed.server(&h, ip(addr), 8081, &format!("{name}-alt"));
        bed.server(&h, ip(addr), 5353, &format!("{name}-dnstcp"));
        bed.udp_server(&h, ip(addr), 5353, &format!("{name}-dnsudp"));
    }
    nodes(&cp, &[("node1", "10.81.0.1")]);
    for (name, addr) in pods {
        app_pod(&cp, name, "node1", addr, "echo");
    }
    cp.apply(MULTIPORT).expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "multi");
    let v = service_json(&cp, "multi");
    let node_port = |name: &str| -> u16 {
        let p = v["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .expect("the port");
        u16::try_from(p["nodePort"].as_u64().expect("nodePort")).expect("a port")
    };
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    let ports = [
        ("TCP", 80, "web", "web"),
        ("TCP", 81, "alt", "alt"),
        ("TCP", 53, "dns-tcp", "dnstcp"),
        ("UDP", 53, "dns-udp", "dnsudp"),
    ];
    within("every port's two endpoints in rvsadm -Ln", WAIT, || {
        ports.iter().all(|(proto, port, pname, _)| {
            real_servers_of(d, proto, SocketAddr::new(cip, *port)).len() == 2
                && real_servers_of(d, proto, SocketAddr::new(ip("10.81.0.1"), node_port(pname)))
                    .len()
                    == 2
        })
    });
    let target = |port: u16| if port == 53 { 5353 } else { port + 8000 };
    for (proto, port, _, _) in &ports {
        let rs = real_servers_of(d, proto, SocketAddr::new(cip, *port));
        let want: Vec<String> = pods
            .iter()
            .map(|(_, a)| format!("{a}:{}", target(*port)))
            .collect();
        assert_eq!(
            rs.iter().map(|(a, _)| a.clone()).collect::<Vec<_>>(),
            want,
            "{proto} {cip}:{port}: the port's targetPort"
        );
    }
    for (proto, port, pname, tag) in ports {
        let want = set(&[&format!("pod1-{tag}"), &format!("pod2-{tag}")]);
        let cluster = SocketAddr::new(cip, port);
        let external = SocketAddr::new(ip("10.81.0.1"), node_port(pname));
        for (from, to) in [(&node, cluster), (&client, external)] {
            let got = if proto == "TCP" {
                servers(from, to, 12)
            } else {
                udp_servers(from, to, 12)
            };
            assert_eq!(got, want, "{proto} {to} ({pname})");
        }
    }
}

const STICKY: &str = r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "sticky", "namespace": "default"},
 "spec": {"selector": {"app": "echo"}, "sessionAffinity": "ClientIP",
          "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 2}},
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#;

/// service.go "should have session affinity work for service" / "...
/// timeout work": with `sessionAffinity: ClientIP` every connection of one
/// client reaches one pod; once `timeoutSeconds` (2) pass without a
/// connection the affinity is gone and a new connection may go to the
/// other pod; "should be able to switch session affinity": patched to
/// `None` connections spread over both pods, patched back to `ClientIP`
/// they stick to one again.
#[test]
fn kubernetes_session_affinity_client_ip() {
    let test = "kubernetes_session_affinity_client_ip";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, _client) = bed_with_node("k8saf");
    let pods = [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")];
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pods(&cp, &mut bed, "node1", "echo", &pods);
    cp.apply(STICKY).expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "sticky");
    let vip = SocketAddr::new(cip, 80);
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("the two endpoints in rvsadm -Ln", WAIT, || {
        real_servers(d, vip).len() == 2
    });

    // Affinity: 20 connections, one pod.
    let first = servers(&node, vip, 20);
    assert_eq!(first.len(), 1, "ClientIP affinity: one pod, got {first:?}");
    let pinned = first.into_iter().next().expect("a pod");

    // Timeout: after 2 s without a connection, the choice is made afresh
    // (rr: the other pod comes next).
    within("the affinity timing out", WAIT, || {
        std::thread::sleep(Duration::from_secs(3));
        connect(&node, vip, T).expect("connect").server != pinned
    });

    // Switched off: both pods.
    cp.kubectl(
        &[
            "patch",
            "service",
            "sticky",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec": {"sessionAffinity": "None", "sessionAffinityConfig": null}}"#,
        ],
        None,
    )
    .expect("affinity off");
    within("affinity off: connections spread", WAIT, || {
        servers(&node, vip, 10).len() == 2
    });

    // Switched on again: one pod.
    cp.kubectl(
        &[
            "patch",
            "service",
            "sticky",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec": {"sessionAffinity": "ClientIP"}}"#,
        ],
        None,
    )
    .expect("affinity on");
    within("affinity on: connections stick", WAIT, || {
        servers(&node, vip, 10).len() == 1
    });
    let again = servers(&node, vip, 20);
    assert_eq!(again.len(), 1, "ClientIP affinity again: {again:?}");
}

/// KEP-1669, service.go "should fallback to terminating endpoints when
/// there are no ready endpoints with {internal,external}TrafficPolicy=
/// {Cluster,Local}": two Services, one with both policies `Local`, one with
/// both `Cluster`, over two pods of this node; both pods are deleted with a
/// grace period (no kubelet ends them: they stay serving and terminating,
/// no endpoint is ready), and connections to every ClusterIP (from the
/// node) and NodePort (from another host) still reach them.
#[test]
fn kubernetes_terminating_endpoints_fallback() {
    let test = "kubernetes_terminating_endpoints_fallback";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8ste");
    let pods = [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")];
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pods(&cp, &mut bed, "node1", "echo", &pods);
    for (name, policy) in [("local", "Local"), ("cluster", "Cluster")] {
        cp.apply(&format!(
            r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "{name}", "namespace": "default"}},
 "spec": {{"type": "NodePort", "selector": {{"app": "echo"}},
          "externalTrafficPolicy": "{policy}", "internalTrafficPolicy": "{policy}",
          "ports": [{{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}}]}}}}"#
        ))
        .expect("create service");
    }
    let mut targets = Vec::new();
    for name in ["local", "cluster"] {
        let (cip, np) = service_addrs(&cp, "default", name);
        targets.push((name, &node, SocketAddr::new(cip, 80)));
        targets.push((
            name,
            &client,
            SocketAddr::new(ip("10.81.0.1"), np.expect("a NodePort")),
        ));
    }
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("every entry's two endpoints in rvsadm -Ln", WAIT, || {
        targets
            .iter()
            .all(|(_, _, t)| real_servers(d, *t).len() == 2)
    });
    // 40 connections each: the NodePorts' Maglev hashes the client's port
    // (mh-port), so 10 all reached one pod once in 500 (a CI run saw it).
    for (name, from, to) in &targets {
        assert_eq!(
            servers(from, *to, 40),
            set(&["pod1", "pod2"]),
            "{name} {to}"
        );
    }

    for (name, _) in pods {
        cp.delete_pod("default", name, 300).expect("delete pod");
    }
    for name in ["local", "cluster"] {
        cp.wait_endpoints("default", name, WAIT, |eps| {
            eps.len() == 2
                && eps.iter().all(|e| {
                    e.conditions.ready == Some(false)
                        && e.conditions.serving == Some(true)
                        && e.conditions.terminating == Some(true)
                })
        })
        .expect("both endpoints serving and terminating");
    }
    // The terminating pods are used: weight > 0 where nothing is ready.
    within("the terminating endpoints in use", WAIT, || {
        targets.iter().all(|(_, _, t)| {
            let rs = real_servers(d, *t);
            rs.len() == 2 && rs.iter().all(|(_, w)| *w > 0)
        })
    });
    for (name, from, to) in &targets {
        assert_eq!(
            servers(from, *to, 40),
            set(&["pod1", "pod2"]),
            "{name} {to}: the terminating endpoints serve"
        );
    }
}

/// service.go "should be able to preserve UDP traffic when server pod
/// cycles for a ClusterIP/NodePort service": a client keeps one UDP socket
/// (one source port) talking to the ClusterIP (from the node) and to the
/// NodePort (from another host); the one pod is deleted (the Service has no
/// endpoint), a new pod with another address comes, and the client's next
/// datagrams reach the new pod: no stale session to the old one.
#[test]
fn kubernetes_udp_after_scale_to_zero() {
    let test = "kubernetes_udp_after_scale_to_zero";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8sud");
    for (name, addr) in [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")] {
        let h = bed.host(name, &format!("{addr}/24"));
        bed.udp_server(&h, ip(addr), 5353, name);
    }
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pod(&cp, "pod1", "node1", "10.81.0.11", "dns");
    cp.apply(
        r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "dns", "namespace": "default"},
 "spec": {"type": "NodePort", "selector": {"app": "dns"},
          "ports": [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}}"#,
    )
    .expect("create service");
    let (cip, np) = service_addrs(&cp, "default", "dns");
    let cluster = SocketAddr::new(cip, 53);
    let external = SocketAddr::new(ip("10.81.0.1"), np.expect("a NodePort"));
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("the endpoint in rvsadm -Ln", WAIT, || {
        real_servers_of(d, "UDP", cluster).len() == 1
            && real_servers_of(d, "UDP", external).len() == 1
    });
    let socks = [
        (cluster, udp_socket(&node, ip("0.0.0.0")).expect("socket")),
        (
            external,
            udp_socket(&client, ip("0.0.0.0")).expect("socket"),
        ),
    ];
    for (to, s) in &socks {
        assert_eq!(udp_ask(s, *to, "before", T).expect("pod1 answers"), "pod1");
    }

    // Scale to zero: the pod goes at once.
    cp.kubectl(
        &[
            "delete",
            "pod",
            "pod1",
            "-n",
            "default",
            "--grace-period=0",
            "--force",
        ],
        None,
    )
    .expect("delete pod1");
    within("no endpoint left in rvsadm -Ln", WAIT, || {
        real_servers_of(d, "UDP", cluster).is_empty()
            && real_servers_of(d, "UDP", external).is_empty()
    });
    // Datagrams meanwhile go nowhere (a stale session would hold them).
    for (to, s) in &socks {
        let _ = udp_ask(s, *to, "nobody", Duration::from_millis(300));
    }

    // Back to one, at another address.
    app_pod(&cp, "pod2", "node1", "10.81.0.12", "dns");
    within("the new pod in rvsadm -Ln", WAIT, || {
        real_servers_of(d, "UDP", cluster).len() == 1
            && real_servers_of(d, "UDP", external).len() == 1
    });
    let mut i = 0;
    let mut last = Vec::new();
    let reached = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        within("the same sockets reach the new pod", WAIT, || {
            i += 1;
            last = socks
                .iter()
                .map(|(to, s)| {
                    (
                        *to,
                        udp_ask(s, *to, &format!("after{i}"), Duration::from_millis(500))
                            .map_err(|e| e.to_string()),
                    )
                })
                .collect();
            last.iter().all(|(_, r)| r.as_deref() == Ok("pod2"))
        })
    }));
    assert!(
        reached.is_ok(),
        "a client's new datagrams reach the new pod; last answers: {last:?}\n{}",
        d.ok("-Lnc")
    );
}

/// service.go / dual_stack.go "should be able to reach pod on ipv4 and ipv6
/// ip" / "should create service with ipv4,v6 cluster ip": a
/// `RequireDualStack` Service over pods with an IPv4 and an IPv6 address
/// gets a ClusterIP of each family, each reaching both pods over its own
/// family (from the node), and its NodePort answers on the node's IPv4 and
/// IPv6 addresses (from another host), the IPv6 ones with the pods' IPv6
/// endpoints.
#[test]
fn kubernetes_dual_stack_service() {
    let test = "kubernetes_dual_stack_service";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8sds");
    let pods = [
        ("pod1", "10.81.0.11", "fd81::11"),
        ("pod2", "10.81.0.12", "fd81::12"),
    ];
    for (name, v4, v6) in pods {
        let h = bed.host(name, &format!("{v4}/24"));
        h.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
        bed.server(&h, ip(v4), 8080, name);
        bed.server(&h, ip(v6), 8080, name);
    }
    node.exec(&["ip", "addr", "add", "fd81::1/64", "dev", "eth0", "nodad"]);
    node.exec(&[
        "ip",
        "-6",
        "route",
        "add",
        "local",
        "fd00:96::/112",
        "dev",
        "lo",
    ]);
    client.exec(&["ip", "addr", "add", "fd81::50/64", "dev", "eth0", "nodad"]);
    nodes(&cp, &[("node1", "10.81.0.1")]);
    super::node_addresses(&cp, "node1", &["10.81.0.1", "fd81::1"]);
    for (name, v4, v6) in pods {
        cp.create_pod("default", name, "node1", &[("app", "echo")], 8080)
            .expect("create pod");
        cp.set_pod_ready("default", name, &[ip(v4), ip(v6)])
            .expect("pod ready");
    }
    cp.apply(
        r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "dual", "namespace": "default"},
 "spec": {"type": "NodePort", "selector": {"app": "echo"},
          "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#,
    )
    .expect("create service");
    let v = service_json(&cp, "dual");
    let cips: Vec<std::net::IpAddr> = v["spec"]["clusterIPs"]
        .as_array()
        .expect("clusterIPs")
        .iter()
        .map(|a| ip(a.as_str().expect("an address")))
        .collect();
    assert!(
        cips.len() == 2 && cips[0].is_ipv4() && cips[1].is_ipv6(),
        "{cips:?}"
    );
    let np = u16::try_from(
        v["spec"]["ports"][0]["nodePort"]
            .as_u64()
            .expect("nodePort"),
    )
    .expect("a port");
    let targets = [
        (&node, SocketAddr::new(cips[0], 80), "10.81.0."),
        (&node, SocketAddr::new(cips[1], 80), "[fd81::"),
        (&client, SocketAddr::new(ip("10.81.0.1"), np), "10.81.0."),
        (&client, SocketAddr::new(ip("fd81::1"), np), "[fd81::"),
    ];
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("both families' entries in rvsadm -Ln", WAIT, || {
        targets
            .iter()
            .all(|(_, t, _)| real_servers(d, *t).len() == 2)
    });
    for (from, to, family) in targets {
        let rs = real_servers(d, to);
        assert!(
            rs.iter().all(|(a, _)| a.starts_with(family)),
            "{to}: endpoints of its own family: {rs:?}"
        );
        assert_eq!(servers(from, to, 12), set(&["pod1", "pod2"]), "{to}");
    }
}

/// The sock plane as the node's service proxy (`rvsd --dataplane sock
/// --cgroup CG --kubernetes`): a client process in the node's cgroup
/// reaches both pods through the ClusterIP (its `connect()` rewritten to a
/// pod, nothing listening on the ClusterIP and no route to it).
#[test]
fn kubernetes_sock_plane_cluster_ip_from_the_node_cgroup() {
    let test = "kubernetes_sock_plane_cluster_ip_from_the_node_cgroup";
    if rvs_testbed::is_root() && !rvs_testbed::require_cgroup2(test) {
        return;
    }
    let Some(cp) = setup(test) else { return };
    let mut bed = Bed::new("k8ssk");
    let node = bed.host("node", "10.81.0.1/24");
    let pods = [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")];
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pods(&cp, &mut bed, "node1", "echo", &pods);
    cp.apply(super::SERVICE).expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "echo");
    let cluster = SocketAddr::new(cip, 80);
    let cg = rvs_testbed::Cgroup::new("rvsk8ssock");
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let n = Node::start(&cp, &node, "node1", "sock", &["--cgroup", &cgroup]);
    let d = &n.rvsd;
    within("the ClusterIP's two endpoints in rvsadm -Ln", WAIT, || {
        real_servers(d, cluster).len() == 2
    });
    // 20 connections from the node's namespace and cgroup.
    let got = super::in_cgroup_connections(&node, &cgroup, cluster, 20);
    let pod1 = got.iter().filter(|g| *g == "pod1").count();
    let pod2 = got.iter().filter(|g| *g == "pod2").count();
    assert_eq!((pod1, pod2), (10, 10), "{got:?}");
    // What the sock plane does not carry (the NodePort's SNAT pool), as
    // rvsd reports it.
    for l in n.log().lines().filter(|l| l.contains("not carried out")) {
        eprintln!("sock plane refusal: {l}");
    }
}
