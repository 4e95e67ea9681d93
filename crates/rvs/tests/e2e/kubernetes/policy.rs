//! Upstream sig-network Service behaviours (test/e2e/network/service.go
//! and loadbalancer.go) about which endpoints and which Services a node
//! serves: traffic policies `Local`, the `healthCheckNodePort`, headless
//! Services and other proxies' Services, external IPs, and refused objects
//! reported as Events.

use std::net::SocketAddr;
use std::time::Duration;

use super::{
    Node, WAIT, app_pod, app_pods, bed_with_node, http_get, ip, metric, nodes, pod_servers,
    real_servers, scrape, servers, service_addrs, service_json, set, setup,
};
use crate::harness::within;

/// loadbalancer.go "should only target nodes with endpoints" /
/// "should work for type=LoadBalancer" with `externalTrafficPolicy:
/// Local`: the NodePort reaches only this node's pod (pod2 runs on node2),
/// the ClusterIP (internal policy Cluster) both; the `healthCheckNodePort`
/// answers 200 with kube-proxy's JSON body and `"localEndpoints": 1`, and
/// 503 with 0 for a Service whose only pod is on node2; once the local pod
/// is terminating the check answers 503 (the load balancer drains the
/// node) while the NodePort still reaches the terminating pod (KEP-1669).
#[test]
fn kubernetes_external_traffic_policy_local_and_health_check() {
    let test = "kubernetes_external_traffic_policy_local_and_health_check";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8set");
    nodes(&cp, &[("node1", "10.81.0.1"), ("node2", "10.81.0.2")]);
    app_pods(&cp, &mut bed, "node1", "echo", &[("pod1", "10.81.0.11")]);
    app_pods(&cp, &mut bed, "node2", "echo", &[("pod2", "10.81.0.12")]);
    app_pod(&cp, "remote", "node2", "10.81.0.13", "remote");
    for (name, app) in [("lb", "echo"), ("far", "remote")] {
        cp.apply(&format!(
            r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "{name}", "namespace": "default"}},
 "spec": {{"type": "LoadBalancer", "selector": {{"app": "{app}"}},
          "externalTrafficPolicy": "Local",
          "ports": [{{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}}]}}}}"#
        ))
        .expect("create service");
    }
    let (cip, np) = service_addrs(&cp, "default", "lb");
    let cluster = SocketAddr::new(cip, 80);
    let external = SocketAddr::new(ip("10.81.0.1"), np.expect("a NodePort"));
    let hc = |name: &str| {
        let v = service_json(&cp, name);
        let p = v["spec"]["healthCheckNodePort"]
            .as_u64()
            .expect("a healthCheckNodePort");
        SocketAddr::new(ip("10.81.0.1"), u16::try_from(p).expect("a port"))
    };
    let (hc_lb, hc_far) = (hc("lb"), hc("far"));
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("the Service in rvsadm -Ln", WAIT, || {
        real_servers(d, cluster).len() == 2 && real_servers(d, external).len() == 1
    });
    assert_eq!(
        real_servers(d, external),
        vec![("10.81.0.11:8080".to_owned(), 1)],
        "the NodePort: only the local endpoint"
    );
    assert_eq!(servers(&client, external, 20), set(&["pod1"]), "NodePort");
    assert_eq!(
        servers(&node, cluster, 10),
        set(&["pod1", "pod2"]),
        "ClusterIP"
    );

    let body = |n: usize, name: &str| {
        format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"{name}\"\n\t}},\n\t\"localEndpoints\": {n},\n\t\"serviceProxyHealthy\": true\n}}"
        )
    };
    let mut last = None;
    within("the health checks answering", WAIT, || {
        last = http_get(&client, hc_lb)
            .ok()
            .zip(http_get(&client, hc_far).ok());
        last.is_some()
    });
    assert_eq!(
        last,
        Some(((200, body(1, "lb")), (503, body(0, "far")))),
        "200 with the local endpoint, 503 with none"
    );

    cp.delete_pod("default", "pod1", 300).expect("delete pod1");
    let mut got = None;
    within("503 once the local endpoint is terminating", WAIT, || {
        got = http_get(&client, hc_lb).ok();
        got.as_ref().is_some_and(|(s, _)| *s == 503)
    });
    assert_eq!(got, Some((503, body(0, "lb"))));
    assert_eq!(
        servers(&client, external, 10),
        set(&["pod1"]),
        "the NodePort falls back to the terminating local endpoint"
    );
}

/// service.go "should respect internalTrafficPolicy=Local Pod to Pod",
/// "should implement service.kubernetes.io/headless" and
/// "service-proxy-name", and "should be able to create a functioning
/// external IP service": a ClusterIP with `internalTrafficPolicy: Local`
/// reaches only this node's pod; a headless Service and a Service labelled
/// for another proxy are not programmed (their pod's address is nowhere in
/// `rvsadm -Ln`, the labelled one's ClusterIP neither); an external IP
/// routed to the node reaches both pods from another host.
#[test]
fn kubernetes_internal_policy_headless_proxy_name_external_ip() {
    let test = "kubernetes_internal_policy_headless_proxy_name_external_ip";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8sit");
    nodes(&cp, &[("node1", "10.81.0.1"), ("node2", "10.81.0.2")]);
    app_pods(&cp, &mut bed, "node1", "echo", &[("pod1", "10.81.0.11")]);
    app_pods(&cp, &mut bed, "node2", "echo", &[("pod2", "10.81.0.12")]);
    app_pods(&cp, &mut bed, "node1", "other", &[("pod3", "10.81.0.13")]);
    // The external IP is routed to the node, which takes it as local.
    node.exec(&["ip", "route", "add", "local", "10.81.1.100/32", "dev", "lo"]);
    client.exec(&["ip", "route", "add", "10.81.1.100/32", "via", "10.81.0.1"]);
    let port = r#"[{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]"#;
    cp.apply(&format!(
        r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "headless", "namespace": "default"}},
 "spec": {{"clusterIP": "None", "selector": {{"app": "other"}}, "ports": {port}}}}}"#
    ))
    .expect("headless");
    cp.apply(&format!(
        r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "elsewhere", "namespace": "default",
              "labels": {{"service.kubernetes.io/service-proxy-name": "someone-else"}}}},
 "spec": {{"selector": {{"app": "other"}}, "ports": {port}}}}}"#
    ))
    .expect("labelled");
    cp.apply(&format!(
        r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "itp", "namespace": "default"}},
 "spec": {{"selector": {{"app": "echo"}}, "internalTrafficPolicy": "Local", "ports": {port}}}}}"#
    ))
    .expect("itp");
    cp.apply(&format!(
        r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "ext", "namespace": "default"}},
 "spec": {{"selector": {{"app": "echo"}}, "externalIPs": ["10.81.1.100"], "ports": {port}}}}}"#
    ))
    .expect("ext");
    for svc in ["headless", "elsewhere", "itp", "ext"] {
        cp.wait_endpoints("default", svc, WAIT, |eps| !eps.is_empty())
            .expect("endpoints");
    }
    let (itp, _) = service_addrs(&cp, "default", "itp");
    let (elsewhere, _) = service_addrs(&cp, "default", "elsewhere");
    let itp = SocketAddr::new(itp, 80);
    let external = SocketAddr::new(ip("10.81.1.100"), 80);
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("itp and ext in rvsadm -Ln", WAIT, || {
        real_servers(d, itp).len() == 1 && real_servers(d, external).len() == 2
    });
    assert_eq!(
        real_servers(d, itp),
        vec![("10.81.0.11:8080".to_owned(), 1)],
        "internalTrafficPolicy Local: only the local endpoint"
    );
    assert_eq!(servers(&node, itp, 20), set(&["pod1"]), "iTP Local");
    assert_eq!(
        servers(&client, external, 12),
        set(&["pod1", "pod2"]),
        "the external IP"
    );
    let table = d.ok("-Ln");
    assert!(
        !table.contains("10.81.0.13") && !table.contains(&format!("{elsewhere}:")),
        "the headless and the other proxy's Services are not programmed:\n{table}"
    );
}

/// A refused object gets a Warning Event (as kube-proxy records the
/// problems it finds): two Services claim external IP 10.81.1.100 port 80;
/// the newer one's claim is refused: `kubectl get events` shows a Warning
/// on it naming the clash, rvsd logs it, and the older one's external IP
/// still reaches its own pod only.
#[test]
fn kubernetes_refused_service_gets_a_warning_event() {
    let test = "kubernetes_refused_service_gets_a_warning_event";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8sev");
    pod_servers(&mut bed, &[("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")]);
    node.exec(&["ip", "route", "add", "local", "10.81.1.100/32", "dev", "lo"]);
    client.exec(&["ip", "route", "add", "10.81.1.100/32", "via", "10.81.0.1"]);
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pod(&cp, "pod1", "node1", "10.81.0.11", "first");
    app_pod(&cp, "pod2", "node1", "10.81.0.12", "second");
    for (name, app) in [("first", "first"), ("second", "second")] {
        cp.apply(&format!(
            r#"{{"apiVersion": "v1", "kind": "Service",
 "metadata": {{"name": "{name}", "namespace": "default"}},
 "spec": {{"selector": {{"app": "{app}"}}, "externalIPs": ["10.81.1.100"],
          "ports": [{{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}}]}}}}"#
        ))
        .expect("create service");
        // Creation order decides which is older.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let (first, _) = service_addrs(&cp, "default", "first");
    let first = SocketAddr::new(first, 80);
    let external = SocketAddr::new(ip("10.81.1.100"), 80);
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("the older Service in rvsadm -Ln", WAIT, || {
        real_servers(d, first).len() == 1 && real_servers(d, external).len() == 1
    });
    let mut events = serde_json::Value::Null;
    within("a Warning Event on the newer Service", WAIT, || {
        events = cp
            .get_json(&[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                "involvedObject.kind=Service,involvedObject.name=second",
            ])
            .unwrap_or_default();
        events["items"].as_array().is_some_and(|a| !a.is_empty())
    });
    let ev = &events["items"][0];
    assert_eq!(ev["type"], "Warning", "{ev}");
    assert_eq!(ev["reason"], "NotProgrammed", "{ev}");
    let msg = ev["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("10.81.1.100") && msg.contains("default/first"),
        "the Event names the clash: {msg}"
    );
    let log = n.log();
    assert!(
        log.contains("not carried out") && log.contains("default/second"),
        "rvsd logs the refusal:\n{log}"
    );
    // Nothing else changes: the older Service keeps the address.
    assert_eq!(
        real_servers(d, external),
        vec![("10.81.0.11:8080".to_owned(), 1)]
    );
    assert_eq!(servers(&client, external, 10), set(&["pod1"]));
    assert_eq!(servers(&node, first, 10), set(&["pod1"]));
}

/// loadbalancer.go "should only allow access from service
/// loadbalancer source ranges": a LoadBalancer Service whose
/// `loadBalancerSourceRanges` hold one client and not another is programmed
/// (not refused) and enforced on the proxy plane: the client inside the
/// range reaches the pod through the load-balancer address, the one outside
/// is reset before any pod is asked; the Service's NodePort stays open to
/// both (kube-proxy filters only the load-balancer address).
#[test]
fn kubernetes_load_balancer_source_ranges_enforced() {
    source_ranges("kubernetes_load_balancer_source_ranges_enforced", "proxy");
}

/// [`kubernetes_load_balancer_source_ranges_enforced`] on the XDP plane:
/// the program drops the new flows from outside the ranges (the
/// connections time out) and counts them.
#[test]
fn kubernetes_xdp_load_balancer_source_ranges_enforced() {
    source_ranges("kubernetes_xdp_load_balancer_source_ranges_enforced", "xdp");
}

/// [`kubernetes_load_balancer_source_ranges_enforced`] for a client on
/// the node itself, through the sock plane (as in the Cilium-like
/// `sock,xdp`, where node-local clients never reach the wire): an unbound
/// socket is judged by the source the kernel gives it toward the
/// load-balancer address (the node's 10.81.0.1, its route via the load
/// balancer at 10.81.0.50). It reaches the pod while the ranges hold the
/// node's address (kube-proxy's firewall chain lets such a node through),
/// and is refused at its connect() (`EPERM`) once the Service's ranges
/// change to exclude it (bound sockets: crates/sock/tests/sock.rs).
#[test]
fn kubernetes_sock_load_balancer_source_ranges_node_local() {
    let test = "kubernetes_sock_load_balancer_source_ranges_node_local";
    if rvs_testbed::is_root() && !rvs_testbed::require_cgroup2(test) {
        return;
    }
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, _lb_host) = bed_with_node("k8ssrs");
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pods(&cp, &mut bed, "node1", "echo", &[("pod1", "10.81.0.11")]);
    // The load-balancer address is not local: the node routes it to the
    // load balancer (the client host), so an unbound socket leaves from
    // 10.81.0.1. (Policy Local: the sock plane carries the address; with
    // Cluster it would be SNAT'd, a local address pool the sock plane
    // refuses, and only the XDP plane would carry it.)
    node.exec(&["ip", "route", "add", "10.81.1.101/32", "via", "10.81.0.50"]);
    cp.apply(
        r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "ranged", "namespace": "default"},
 "spec": {"type": "LoadBalancer", "selector": {"app": "echo"},
          "externalTrafficPolicy": "Local",
          "loadBalancerSourceRanges": ["10.81.0.0/29"],
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#,
    )
    .expect("create service");
    cp.kubectl(
        &[
            "patch",
            "service",
            "ranged",
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"loadBalancer": {"ingress": [{"ip": "10.81.1.101"}]}}}"#,
        ],
        None,
    )
    .expect("the load balancer's address");
    let lb = SocketAddr::new(ip("10.81.1.101"), 80);
    let cg = rvs_testbed::Cgroup::new("rvsk8ssrsock");
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let n = Node::start(&cp, &node, "node1", "sock", &["--cgroup", &cgroup]);
    within("the load-balancer address in rvsadm -Ln", WAIT, || {
        real_servers(&n.rvsd, lb).len() == 1
    });
    assert_eq!(
        super::in_cgroup_connections(&node, &cgroup, lb, 3),
        vec!["pod1"; 3],
        "the node's source 10.81.0.1 is in 10.81.0.0/29"
    );
    cp.kubectl(
        &[
            "patch",
            "service",
            "ranged",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec": {"loadBalancerSourceRanges": ["10.81.0.48/29"]}}"#,
        ],
        None,
    )
    .expect("narrow the ranges");
    within("the node refused once the ranges exclude it", WAIT, || {
        super::in_cgroup_connections(&node, &cgroup, lb, 1) == vec!["refused"]
    });
    assert_eq!(
        super::in_cgroup_connections(&node, &cgroup, lb, 3),
        vec!["refused"; 3]
    );
    let log = n.log();
    assert!(!log.contains("not carried out"), "nothing refused: {log}");
}

/// The source-ranges scenario for `test` with rvsd on `plane`.
fn source_ranges(test: &str, plane: &str) {
    let Some(cp) = setup(test) else { return };
    let (bed, node, inside) = bed_with_node("k8ssr");
    let (mut bed, _pins, mut args) = super::xdp::on_plane(bed, &node, plane, "k8ssr");
    let outside = bed.host("outside", "10.81.0.60/24");
    nodes(&cp, &[("node1", "10.81.0.1")]);
    // On the XDP plane the pod sits behind the node (as in xdp.rs).
    let pod = [(
        "pod1",
        if plane == "xdp" {
            "10.83.0.11"
        } else {
            "10.81.0.11"
        },
    )];
    app_pods(&cp, &mut bed, "node1", "echo", &pod);
    if plane == "xdp" {
        super::xdp::pods_behind(&bed, &node, "10.83.0.1/24", &pod);
    }
    // The load-balancer address is routed to the node, which takes it as
    // local.
    node.exec(&["ip", "route", "add", "local", "10.81.1.101/32", "dev", "lo"]);
    for h in [&inside, &outside] {
        h.exec(&["ip", "route", "add", "10.81.1.101/32", "via", "10.81.0.1"]);
    }
    cp.apply(
        r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "ranged", "namespace": "default"},
 "spec": {"type": "LoadBalancer", "selector": {"app": "echo"},
          "loadBalancerSourceRanges": ["10.81.0.48/29"],
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#,
    )
    .expect("create service");
    cp.kubectl(
        &[
            "patch",
            "service",
            "ranged",
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"loadBalancer": {"ingress": [{"ip": "10.81.1.101"}]}}}"#,
        ],
        None,
    )
    .expect("the load balancer's address");
    let (_, np) = service_addrs(&cp, "default", "ranged");
    let node_port = SocketAddr::new(ip("10.81.0.1"), np.expect("a NodePort"));
    let lb = SocketAddr::new(ip("10.81.1.101"), 80);
    let http = SocketAddr::new(ip("127.0.0.1"), 9181);
    args.extend(["--http", "127.0.0.1:9181"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let n = Node::start(&cp, &node, "node1", plane, &args);
    let d = &n.rvsd;
    within("the load-balancer address in rvsadm -Ln", WAIT, || {
        real_servers(d, lb).len() == 1
    });
    // (The XDP plane forwards once it has the pod's MAC.)
    within("the pod through the load-balancer address", WAIT, || {
        rvs_testbed::connect(&inside, lb, Duration::from_millis(500))
            .is_ok_and(|c| !c.server.is_empty())
    });
    assert_eq!(servers(&inside, lb, 5), set(&["pod1"]), "inside the range");
    for i in 0..5 {
        // Reset (proxy) or dropped (XDP): the connect fails, or the first
        // read does.
        if let Ok(c) = rvs_testbed::connect(&outside, lb, Duration::from_secs(2)) {
            assert!(
                c.server.is_empty(),
                "outside the range, connection {i} reached {}",
                c.server
            );
        }
    }
    // Each refused connection is counted (the XDP plane counts every SYN
    // it drops: a connection's retransmissions too), nothing else is.
    let m = scrape(&node, http);
    if plane == "xdp" {
        let refused: u64 = m
            .lines()
            .filter_map(|l| {
                l.strip_prefix("rvs_xdp_refused_source_total{")?
                    .rsplit_once(' ')?
                    .1
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        assert!(refused >= 5, "5 connections' SYNs dropped: {m}");
    } else {
        assert_eq!(metric(&m, "rvs_proxy_refused_source_total"), Some(5), "{m}");
    }
    for from in [&inside, &outside] {
        assert_eq!(servers(from, node_port, 3), set(&["pod1"]), "the NodePort");
    }
    let log = n.log();
    assert!(!log.contains("not carried out"), "nothing refused: {log}");
}
