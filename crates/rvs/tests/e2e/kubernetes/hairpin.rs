//! service.go "should allow pods to hairpin back to themselves through
//! services": a pod reaches its own Service's ClusterIP and is answered by
//! itself, the only endpoint.
//!
//! The path needs a masquerade (kube-proxy marks hairpin traffic for it):
//! a pod that got its own connection back with its own address as the
//! source would answer itself directly, not through the node, and the
//! connection would never complete. On the proxy plane the connection to
//! the pod comes from the node's address (the proxy's own socket); on the
//! sock plane the pod's connect() goes straight to its own address, no
//! translation on the way back to undo.

use std::net::SocketAddr;

use rvs_testbed::connect;

use super::xdp::PeerServer;
use super::{Node, T, WAIT, app_pod, bed_with_node, ip, nodes, real_servers, service_addrs, setup};
use crate::harness::within;

const HAIRPIN: &str = r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "hairpin", "namespace": "default"},
 "spec": {"selector": {"app": "hairpin"},
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#;

/// The proxy plane: pod1 connects to its Service's ClusterIP (routed to the
/// node, as a pod's default route is) and is answered by itself, seeing the
/// node's address as the source.
#[test]
fn kubernetes_hairpin_proxy_plane() {
    let test = "kubernetes_hairpin_proxy_plane";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, _client) = bed_with_node("k8shp");
    let pod1 = bed.host("pod1", "10.81.0.11/24");
    pod1.exec(&["ip", "route", "add", "10.96.0.0/16", "via", "10.81.0.1"]);
    let _server = PeerServer::start(&pod1, ip("10.81.0.11"), 8080, "pod1");
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pod(&cp, "pod1", "node1", "10.81.0.11", "hairpin");
    cp.apply(HAIRPIN).expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "hairpin");
    let cluster = SocketAddr::new(cip, 80);
    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    within("pod1, the only endpoint, programmed", WAIT, || {
        real_servers(&n.rvsd, cluster) == vec![("10.81.0.11:8080".to_owned(), 1)]
    });
    for i in 0..5 {
        let mut c = connect(&pod1, cluster, T)
            .unwrap_or_else(|e| panic!("pod1 through its own ClusterIP {cluster} ({i}): {e}"));
        assert_eq!(
            c.server, "pod1 from 10.81.0.1",
            "answered by itself, seeing the node (masqueraded)"
        );
        c.echo("hairpin", T)
            .expect("the hairpin connection carries data");
    }
}

/// The sock plane: a process in pod1's namespace and in the node's cgroup
/// connects to its Service's ClusterIP (nothing routes or listens there)
/// and is answered by itself, at its own address.
#[test]
fn kubernetes_hairpin_sock_plane() {
    let test = "kubernetes_hairpin_sock_plane";
    if rvs_testbed::is_root() && !rvs_testbed::require_cgroup2(test) {
        return;
    }
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, _client) = bed_with_node("k8shps");
    let pod1 = bed.host("pod1", "10.81.0.11/24");
    let _server = PeerServer::start(&pod1, ip("10.81.0.11"), 8080, "pod1");
    nodes(&cp, &[("node1", "10.81.0.1")]);
    app_pod(&cp, "pod1", "node1", "10.81.0.11", "hairpin");
    cp.apply(HAIRPIN).expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "hairpin");
    let cluster = SocketAddr::new(cip, 80);
    let cg = rvs_testbed::Cgroup::new("rvsk8shairpin");
    let cgroup = cg.path().to_str().expect("utf-8").to_owned();
    let n = Node::start(&cp, &node, "node1", "sock", &["--cgroup", &cgroup]);
    within("pod1, the only endpoint, programmed", WAIT, || {
        real_servers(&n.rvsd, cluster) == vec![("10.81.0.11:8080".to_owned(), 1)]
    });
    let got = super::in_cgroup_connections(&pod1, &cgroup, cluster, 5);
    assert_eq!(
        got,
        vec!["pod1 from 10.81.0.11"; 5],
        "answered by itself, from its own address"
    );
}
