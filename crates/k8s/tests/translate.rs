//! Table-driven translation tests: Services and EndpointSlices in, the rvs
//! service table out as text (like `ipvsadm -Ln`). Case names say which
//! kube-proxy test (pkg/proxy/ipvs, nftables, iptables proxier tests) a row
//! ports, where one does.

mod common;

use common::*;
use rvs_k8s::{DSR_GENEVE, ExternalMode, Options};
use serde_json::json;

fn p80() -> serde_json::Value {
    json!([{ "name": "p80", "port": 80, "protocol": "TCP" }])
}

fn one_ep(node: &str) -> Vec<serde_json::Value> {
    vec![slice(
        "ns1/svc1",
        "svc1-abc",
        "IPv4",
        json!([sport("p80", 80, "TCP")]),
        json!([ep("10.180.0.1", node)]),
    )]
}

#[test]
fn cluster_ip() {
    run_table(vec![
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": p80() }),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80",
            ..Case::new("TestClusterIPNoEndpoint: a service without endpoints still exists")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": p80() }),
            )],
            slices: one_ep("host-1"),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1",
            ..Case::new("TestClusterIP")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": [
                { "name": "http", "port": 80, "protocol": "TCP" },
                { "name": "https", "port": 443, "protocol": "TCP" },
            ] }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([
                    sport("https", 8443, "TCP"),
                    sport("http", 8080, "TCP"),
                    sport("metrics", 9090, "TCP")
                ]),
                json!([ep("10.180.0.1", "host-1"), ep("10.180.0.2", "host-2")]),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:http
                   -> 10.180.0.1:8080 Masq w1
                   -> 10.180.0.2:8080 Masq w1
                   TCP 172.30.0.41:443 rr ClusterIP ns1/svc1:https
                   -> 10.180.0.1:8443 Masq w1
                   -> 10.180.0.2:8443 Masq w1",
            ..Case::new("several ports matched to slice ports by name, not by position")
        },
        Case {
            services: vec![svc(
                "kube-system/dns",
                json!({ "clusterIP": "172.30.0.10", "ports": [
                { "name": "dns", "port": 53, "protocol": "UDP" },
                { "name": "dns-tcp", "port": 53, "protocol": "TCP" },
            ] }),
            )],
            slices: vec![slice(
                "kube-system/dns",
                "dns-1",
                "IPv4",
                json!([sport("dns-tcp", 5353, "TCP"), sport("dns", 5353, "UDP")]),
                json!([ep("10.180.0.5", "host-1")]),
            )],
            want: "TCP 172.30.0.10:53 rr ClusterIP kube-system/dns:dns-tcp
                   -> 10.180.0.5:5353 Masq w1
                   UDP 172.30.0.10:53 rr ClusterIP kube-system/dns:dns
                   -> 10.180.0.5:5353 Masq w1",
            ..Case::new("one port number with two protocols")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": [
                { "name": "p", "port": 80, "protocol": "UDP" },
            ] }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("p", 8080, "TCP")]),
                json!([ep("10.180.0.1", "host-1")]),
            )],
            want: "UDP 172.30.0.41:80 rr ClusterIP ns1/svc1:p",
            ..Case::new("a slice port of the same name but another protocol is not the port's")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": [{ "port": 80 }] }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([{ "name": "", "port": 8080 }]),
                json!([ep("10.180.0.1", "host-1")]),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1
                   -> 10.180.0.1:8080 Masq w1",
            ..Case::new("one unnamed port, protocol defaulted to TCP on both sides")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({
                "clusterIP": "172.30.0.41", "clusterIPs": ["172.30.0.41", "fd00:30::41"],
                "ipFamilies": ["IPv4", "IPv6"], "ports": p80() }),
            )],
            slices: vec![
                slice(
                    "ns1/svc1",
                    "svc1-v4",
                    "IPv4",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("10.180.0.1", "host-1")]),
                ),
                slice(
                    "ns1/svc1",
                    "svc1-v6",
                    "IPv6",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("fd00:180::1", "host-1")]),
                ),
            ],
            node: node_dual(),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP [fd00:30::41]:80 rr ClusterIP ns1/svc1:p80
                   -> [fd00:180::1]:80 Masq w1",
            ..Case::new(
                "TestIPv4Proxier/dual-stack: each cluster IP with the endpoints of its family",
            )
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": p80() }),
            )],
            slices: vec![
                slice(
                    "ns1/svc1",
                    "svc1-a",
                    "IPv4",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("10.180.0.1", "host-1"), ep("10.180.0.2", "host-2")]),
                ),
                slice(
                    "ns1/svc1",
                    "svc1-b",
                    "IPv4",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("10.180.0.2", "host-2"), ep("10.180.0.3", "host-3")]),
                ),
                // A slice of another Service, one without the label, one in another namespace.
                slice(
                    "ns1/other",
                    "other-a",
                    "IPv4",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("10.180.9.1", "")]),
                ),
                json!({ "metadata": { "namespace": "ns1", "name": "orphan" }, "addressType": "IPv4",
                        "ports": [sport("p80", 80, "TCP")], "endpoints": [ep("10.180.9.2", "")] }),
                slice(
                    "ns2/svc1",
                    "svc1-x",
                    "IPv4",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("10.180.9.3", "")]),
                ),
            ],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.0.2:80 Masq w1
                   -> 10.180.0.3:80 Masq w1",
            ..Case::new(
                "endpoints deduplicated across slices; only slices labelled with the Service's name in its namespace",
            )
        },
        Case {
            services: vec![
                svc(
                    "ns1/svc1",
                    json!({ "clusterIP": "172.30.0.41", "ports": p80(), "sessionAffinity": "ClientIP" }),
                ),
                svc(
                    "ns1/svc2",
                    json!({ "clusterIP": "172.30.0.42", "ports": p80(), "sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 60 } } }),
                ),
            ],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80 persistent 10800
                   TCP 172.30.0.42:80 rr ClusterIP ns1/svc2:p80 persistent 60",
            ..Case::new("TestSessionAffinity: ClientIP affinity is persistence, default 10800 s")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": p80(), "internalTrafficPolicy": "Local" }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("p80", 80, "TCP")]),
                json!([
                    ep("10.180.0.1", NODE),
                    ep("10.180.0.2", "host-2"),
                    ep("10.180.0.3", NODE)
                ]),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.0.3:80 Masq w1",
            ..Case::new("TestInternalTrafficPolicy: iTP Local keeps this node's endpoints")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": p80(), "internalTrafficPolicy": "Local" }),
            )],
            slices: one_ep("host-2"),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80",
            ..Case::new("TestInternalTrafficPolicy: iTP Local without local endpoints has none")
        },
    ]);
}

#[test]
fn node_port() {
    let np = || {
        svc(
            "ns1/svc1",
            json!({ "type": "NodePort", "clusterIP": "172.30.0.41",
            "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
        )
    };
    let np_local = || {
        svc(
            "ns1/svc1",
            json!({ "type": "NodePort", "clusterIP": "172.30.0.41", "externalTrafficPolicy": "Local",
            "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
        )
    };
    let two_eps = || {
        vec![slice(
            "ns1/svc1",
            "svc1-abc",
            "IPv4",
            json!([sport("p80", 80, "TCP")]),
            json!([ep("10.180.0.1", NODE), ep("10.180.2.1", "host-2")]),
        )]
    };
    run_table(vec![
        Case {
            services: vec![np()],
            slices: one_ep("host-1"),
            want: "TCP 127.0.0.1:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2
                   -> 10.180.0.1:80 FullNat w1
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2
                   -> 10.180.0.1:80 FullNat w1",
            ..Case::new(
                "TestNodePort: eTP Cluster, SNAT to the node address, Maglev, also on 127.0.0.1",
            )
        },
        Case {
            services: vec![np()],
            want: "TCP 127.0.0.1:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2",
            ..Case::new("TestNodePortNoEndpoint")
        },
        Case {
            services: vec![np_local()],
            slices: two_eps(),
            want: "TCP 127.0.0.1:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.2.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1",
            ..Case::new(
                "TestOnlyLocalNodePorts: eTP Local, local endpoints, no SNAT; ClusterIP keeps all",
            )
        },
        Case {
            services: vec![np()],
            slices: two_eps(),
            opts: |o| {
                o.external_mode = ExternalMode::Dsr;
                o.node_port_loopback = false;
            },
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.2.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.2.1:80 Tunnel/opt w1",
            ..Case::new(
                "DSR mode: the remote endpoint tunnelled, the local one plain NAT (Cilium), no SNAT pool; loopback NodePort off",
            )
        },
        Case {
            services: vec![np()],
            slices: one_ep(NODE),
            opts: |o| {
                o.external_mode = ExternalMode::Dsr;
                o.dsr_tunnel = DSR_GENEVE;
            },
            want: "TCP 127.0.0.1:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1",
            ..Case::new("DSR over Geneve: an endpoint on this node gets plain NAT too")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "172.30.0.41", "ports": [
                { "name": "t", "port": 80, "protocol": "TCP", "nodePort": 30001 },
                { "name": "u", "port": 80, "protocol": "UDP", "nodePort": 30001 } ] }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("t", 80, "TCP"), sport("u", 80, "UDP")]),
                json!([ep("10.180.0.1", "host-1")]),
            )],
            opts: |o| {
                o.external_mode = ExternalMode::Hybrid;
                o.node_port_addresses = Some(vec!["192.168.0.2".parse().unwrap()]);
            },
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:t
                   -> 10.180.0.1:80 Masq w1
                   UDP 172.30.0.41:80 rr ClusterIP ns1/svc1:u
                   -> 10.180.0.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:t
                   -> 10.180.0.1:80 Tunnel/opt w1
                   UDP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:u laddr 192.168.0.2
                   -> 10.180.0.1:80 FullNat w1",
            ..Case::new("hybrid mode: DSR for TCP, SNAT for UDP; nodePortAddresses given")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "172.30.0.41",
                "clusterIPs": ["172.30.0.41", "fd00:30::41"],
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
            )],
            slices: vec![
                slice(
                    "ns1/svc1",
                    "svc1-v4",
                    "IPv4",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("10.180.0.1", "host-1")]),
                ),
                slice(
                    "ns1/svc1",
                    "svc1-v6",
                    "IPv6",
                    json!([sport("p80", 80, "TCP")]),
                    json!([ep("fd00:180::1", "host-1")]),
                ),
            ],
            node: node_dual(),
            opts: |o| o.node_port_loopback = false,
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2
                   -> 10.180.0.1:80 FullNat w1
                   TCP [2001:db8::1]:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 2001:db8::1
                   -> [fd00:180::1]:80 FullNat w1
                   TCP [fd00:30::41]:80 rr ClusterIP ns1/svc1:p80
                   -> [fd00:180::1]:80 Masq w1",
            ..Case::new(
                "dual-stack NodePort: each node address with its family's endpoints and SNAT address",
            )
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "172.30.0.41",
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
            )],
            node: node_dual(),
            opts: |o| o.node_port_loopback = false,
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2",
            ..Case::new("single-stack IPv4 Service on a dual-stack node: no IPv6 NodePort")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "172.30.0.41",
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 3001 }] }),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80",
            refused: &[
                "Service ns1/svc1: port `p80`: nodePort 3001 is outside the node port range 30000-32767",
            ],
            ..Case::new("a nodePort outside the range is refused, the cluster IP stays")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "172.30.0.41",
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 3001 }] }),
            )],
            opts: |o| {
                o.node_port_range = 3000..=3100;
                o.node_port_loopback = false;
            },
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   TCP 192.168.0.2:3001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2",
            ..Case::new("the node port range is configurable")
        },
        Case {
            services: vec![np()],
            node: serde_json::Value::Null,
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80",
            ..Case::new("without the Node there is no address to open NodePorts on")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41",
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80",
            ..Case::new("a nodePort on a ClusterIP-type Service opens nothing")
        },
        Case {
            services: vec![np()],
            opts: |o| {
                o.cluster_scheduler = rvs_core::sched::Scheduler::Wrr;
                o.external_scheduler = rvs_core::sched::Scheduler::Wlc;
                o.node_port_loopback = false;
            },
            want: "TCP 172.30.0.41:80 wrr ClusterIP ns1/svc1:p80
                   TCP 192.168.0.2:30001 wlc NodePort ns1/svc1:p80 laddr 192.168.0.2",
            ..Case::new("schedulers are options; mh's flags do not go to a scheduler without flags")
        },
        Case {
            services: vec![np()],
            opts: |o| {
                o.external_flags = rvs_core::model::SchedFlags::MH_FALLBACK;
                o.node_port_loopback = false;
            },
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   TCP 192.168.0.2:30001 mh+fallback NodePort ns1/svc1:p80 laddr 192.168.0.2",
            ..Case::new("Maglev flags are options")
        },
    ]);
}

#[test]
fn external_ips_and_load_balancers() {
    let lb = |extra: serde_json::Value| {
        let mut spec = json!({ "type": "LoadBalancer", "clusterIP": "172.30.0.41",
            "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let mut s = svc("ns1/svc1", spec);
        s["status"] = json!({ "loadBalancer": { "ingress": [
            { "ip": "1.2.3.4" },
            { "ip": "5.6.7.8", "ipMode": "Proxy" },
            { "hostname": "lb.example.com" },
        ] } });
        s
    };
    run_table(vec![
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "externalIPs": ["192.168.99.11"], "ports": p80() }),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   TCP 192.168.99.11:80 mh+fallback+port ExternalIP ns1/svc1:p80 laddr 192.168.0.2",
            ..Case::new("TestExternalIPsNoEndpoint")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41",
                "externalIPs": ["192.168.99.11", "2012::51"], "ports": p80() }),
            )],
            slices: one_ep("host-1"),
            node: node_dual(),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 192.168.99.11:80 mh+fallback+port ExternalIP ns1/svc1:p80 laddr 192.168.0.2
                   -> 10.180.0.1:80 FullNat w1",
            ..Case::new("TestExternalIPs: an external IP of a family the Service lacks is ignored")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41",
                "externalIPs": ["2012::51", "bogus"], "ports": p80() }),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80",
            refused: &[
                "externalIP 2012::51 is IPv6, and this node has no IPv6 address",
                "externalIP `bogus` is not an IP address",
            ],
            ..Case::new("an external IP of a family the node lacks, or not an address, is refused")
        },
        Case {
            services: vec![lb(
                json!({ "loadBalancerSourceRanges": [" 10.0.0.0/8 ", "2001:db8::/32", "junk"] }),
            )],
            slices: one_ep("host-1"),
            opts: |o| o.node_port_loopback = false,
            want:
                "TCP 1.2.3.4:80 mh+fallback+port LoadBalancer ns1/svc1:p80 laddr 192.168.0.2 from 10.0.0.0/8
                   -> 10.180.0.1:80 FullNat w1
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80 laddr 192.168.0.2
                   -> 10.180.0.1:80 FullNat w1",
            ..Case::new(
                "TestLoadBalanceSourceRanges + TestLoadBalancer: ingress IPs (not ipMode Proxy, not hostnames) with source ranges of their family",
            )
        },
        Case {
            services: vec![lb(
                json!({ "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000 }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("p80", 80, "TCP")]),
                json!([ep("10.180.0.1", NODE), ep("10.180.2.1", "host-2")]),
            )],
            opts: |o| o.node_port_loopback = false,
            want: "TCP 1.2.3.4:80 mh+fallback+port LoadBalancer ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.2.1:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1",
            ..Case::new("TestOnlyLocalLoadBalancing")
        },
        Case {
            services: vec![lb(
                json!({ "sessionAffinity": "ClientIP", "allocateLoadBalancerNodePorts": false,
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP" }] }),
            )],
            want:
                "TCP 1.2.3.4:80 mh+fallback+port LoadBalancer ns1/svc1:p80 persistent 10800 laddr 192.168.0.2
                   TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80 persistent 10800",
            ..Case::new("a LoadBalancer without node ports, with session affinity on every entry")
        },
    ]);
}

#[test]
fn not_proxied() {
    run_table(vec![
        Case {
            services: vec![
                svc(
                    "ns1/headless",
                    json!({ "clusterIP": "None", "ports": p80() }),
                ),
                svc(
                    "ns1/extname",
                    json!({ "type": "ExternalName", "externalName": "example.com", "ports": p80() }),
                ),
                svc("ns1/pending", json!({ "ports": p80() })),
                {
                    let mut s = svc(
                        "ns1/labelled",
                        json!({ "clusterIP": "172.30.0.43", "ports": p80() }),
                    );
                    s["metadata"]["labels"] = json!({ "service.kubernetes.io/headless": "" });
                    s
                },
                {
                    let mut s = svc(
                        "ns1/other-proxy",
                        json!({ "clusterIP": "172.30.0.44", "ports": p80() }),
                    );
                    s["metadata"]["labels"] =
                        json!({ "service.kubernetes.io/service-proxy-name": "foo" });
                    s
                },
                svc(
                    "ns1/plain",
                    json!({ "clusterIP": "172.30.0.45", "ports": p80() }),
                ),
            ],
            want: "TCP 172.30.0.45:80 rr ClusterIP ns1/plain:p80",
            ..Case::new(
                "TestServiceProxyNameLabel/headless/ExternalName: only ordinary Services are ours",
            )
        },
        Case {
            services: vec![
                {
                    let mut s = svc(
                        "ns1/mine",
                        json!({ "clusterIP": "172.30.0.44", "ports": p80() }),
                    );
                    s["metadata"]["labels"] =
                        json!({ "service.kubernetes.io/service-proxy-name": "rvs" });
                    s
                },
                {
                    let mut s = svc(
                        "ns1/theirs",
                        json!({ "clusterIP": "172.30.0.46", "ports": p80() }),
                    );
                    s["metadata"]["labels"] =
                        json!({ "service.kubernetes.io/service-proxy-name": "foo" });
                    s
                },
                svc(
                    "ns1/plain",
                    json!({ "clusterIP": "172.30.0.45", "ports": p80() }),
                ),
            ],
            opts: |o| o.service_proxy_name = Some("rvs".into()),
            want: "TCP 172.30.0.44:80 rr ClusterIP ns1/mine:p80",
            ..Case::new("with a service-proxy-name, only the Services labelled with it")
        },
    ]);
}

#[test]
fn refusals() {
    run_table(vec![
        Case {
            services: vec![
                svc_at(
                    "ns1/young",
                    5,
                    json!({ "clusterIP": "172.30.0.2", "externalIPs": ["192.168.99.11"], "ports": p80() }),
                ),
                svc_at(
                    "ns1/old",
                    1,
                    json!({ "clusterIP": "172.30.0.1", "externalIPs": ["192.168.99.11"], "ports": p80() }),
                ),
            ],
            want: "TCP 172.30.0.1:80 rr ClusterIP ns1/old:p80
                   TCP 172.30.0.2:80 rr ClusterIP ns1/young:p80
                   TCP 192.168.99.11:80 mh+fallback+port ExternalIP ns1/old:p80 laddr 192.168.0.2",
            refused: &[
                "Service ns1/young: TCP 192.168.99.11 port 80 (ExternalIP) is already taken by the older Service ns1/old (ExternalIP)",
            ],
            ..Case::new("two Services on one address:port: the older keeps it")
        },
        Case {
            services: vec![
                svc_at(
                    "ns1/b",
                    1,
                    json!({ "clusterIP": "172.30.0.2", "externalIPs": ["192.168.0.2"], "ports": [{ "name": "x", "port": 30001 }] }),
                ),
                svc_at(
                    "ns1/a",
                    1,
                    json!({ "type": "NodePort", "clusterIP": "172.30.0.1",
                    "ports": [{ "name": "p80", "port": 80, "nodePort": 30001 }] }),
                ),
            ],
            opts: |o| o.node_port_loopback = false,
            want: "TCP 172.30.0.1:80 rr ClusterIP ns1/a:p80
                   TCP 172.30.0.2:30001 rr ClusterIP ns1/b:x
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/a:p80 laddr 192.168.0.2",
            refused: &[
                "Service ns1/b: TCP 192.168.0.2 port 30001 (ExternalIP) is already taken by the older Service ns1/a (NodePort)",
            ],
            ..Case::new(
                "same age: the name decides; an external IP on a node address clashes with a NodePort",
            )
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "externalIPs": ["192.168.99.11"],
                "ports": [
                    { "name": "a", "port": 80, "protocol": "TCP" },
                    { "name": "b", "port": 70000, "protocol": "TCP" },
                    { "name": "c", "port": 81, "protocol": "ICMP" },
                    { "name": "d", "port": 82, "protocol": "SCTP" },
                ] }),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:a
                   SCTP 172.30.0.41:82 rr ClusterIP ns1/svc1:d
                   TCP 192.168.99.11:80 mh+fallback+port ExternalIP ns1/svc1:a laddr 192.168.0.2
                   SCTP 192.168.99.11:82 mh+fallback+port ExternalIP ns1/svc1:d laddr 192.168.0.2",
            refused: &[
                "port `b`: port 70000 is not a port number",
                "port `c`: protocol `ICMP` is not TCP, UDP or SCTP",
            ],
            ..Case::new("bad ports and protocols refused one by one; SCTP stays a service")
        },
        Case {
            services: vec![
                svc(
                    "ns1/svc1",
                    json!({ "clusterIP": "fd00:30::41", "clusterIPs": ["fd00:30::41"], "ports": p80() }),
                ),
                svc(
                    "ns1/svc2",
                    json!({ "clusterIP": "300.1.1.1", "ports": p80() }),
                ),
            ],
            refused: &[
                "clusterIP fd00:30::41 is IPv6, and this node has no IPv6 address",
                "clusterIP `300.1.1.1` is not an IP address",
            ],
            ..Case::new("a cluster IP of a family the node lacks, or not an address")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "fd00:30::41",
                "externalIPs": ["2012::51"],
                "ports": [{ "name": "p80", "port": 80, "nodePort": 30001 }] }),
            )],
            node: node_with(&[("InternalIP", "192.168.0.2"), ("Hostname", "2001:db8::1")]),
            refused: &["clusterIP fd00:30::41 is IPv6"],
            ..Case::new("a Hostname-typed address does not give the node a family")
        },
    ]);
}

/// kube-proxy's `Test_EndpointSliceReadyAndTerminatingCluster` and
/// `...Local` (ipvs and nftables): endpoints 10.0.1.1-2 ready, .3 serving
/// and terminating, .4 terminating and not serving, .5 ready on another
/// node; and the `OnlyReadyAndTerminating` variants where nothing is ready.
#[test]
fn terminating_endpoints() {
    let svc_with = |etp: &'static str| {
        svc(
            "ns1/svc1",
            json!({ "type": "LoadBalancer", "clusterIP": "172.30.1.1",
            "externalTrafficPolicy": etp, "healthCheckNodePort": 30000,
            "ports": [{ "name": "", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
        )
    };
    let ready_and_terminating = || {
        vec![slice(
            "ns1/svc1",
            "svc1-abc",
            "IPv4",
            json!([{ "name": "", "port": 80, "protocol": "TCP" }]),
            json!([
                cond("10.0.1.1", NODE, Some(true), Some(true), Some(false)),
                cond("10.0.1.2", NODE, Some(true), Some(true), Some(false)),
                cond("10.0.1.3", NODE, Some(false), Some(true), Some(true)),
                cond("10.0.1.4", NODE, Some(false), Some(false), Some(true)),
                cond(
                    "10.0.1.5",
                    "another-host",
                    Some(true),
                    Some(true),
                    Some(false)
                ),
            ]),
        )]
    };
    let only_terminating = || {
        vec![slice(
            "ns1/svc1",
            "svc1-abc",
            "IPv4",
            json!([{ "name": "", "port": 80, "protocol": "TCP" }]),
            json!([
                cond("10.0.1.1", NODE, Some(false), Some(true), Some(true)),
                cond("10.0.1.2", NODE, Some(false), Some(true), Some(true)),
                cond("10.0.1.3", NODE, Some(false), Some(false), Some(true)),
                cond(
                    "10.0.1.4",
                    "another-host",
                    Some(false),
                    Some(true),
                    Some(true)
                ),
                cond(
                    "10.0.1.5",
                    "another-host",
                    Some(true),
                    Some(true),
                    Some(false)
                ),
            ]),
        )]
    };
    let cluster_only = |o: &mut Options| {
        o.node_port_addresses = Some(vec![]);
    };
    run_table(vec![
        Case {
            services: vec![svc_with("Cluster")],
            slices: ready_and_terminating(),
            opts: cluster_only,
            want: "TCP 172.30.1.1:80 rr ClusterIP ns1/svc1
                   -> 10.0.1.1:80 Masq w1
                   -> 10.0.1.2:80 Masq w1
                   -> 10.0.1.3:80 Masq w0
                   -> 10.0.1.5:80 Masq w1",
            ..Case::new(
                "Test_EndpointSliceReadyAndTerminatingCluster: ready used, serving-terminating drain at w0, not-serving absent",
            )
        },
        Case {
            services: vec![svc_with("Local")],
            slices: ready_and_terminating(),
            opts: |o| o.node_port_addresses = Some(vec!["192.168.0.2".parse().unwrap()]),
            want: "TCP 172.30.1.1:80 rr ClusterIP ns1/svc1
                   -> 10.0.1.1:80 Masq w1
                   -> 10.0.1.2:80 Masq w1
                   -> 10.0.1.3:80 Masq w0
                   -> 10.0.1.5:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1
                   -> 10.0.1.1:80 Masq w1
                   -> 10.0.1.2:80 Masq w1
                   -> 10.0.1.3:80 Masq w0",
            ..Case::new(
                "Test_EndpointSliceReadyAndTerminatingLocal: local ready used, local serving-terminating drain",
            )
        },
        Case {
            services: vec![svc_with("Cluster")],
            slices: only_terminating(),
            opts: cluster_only,
            want: "TCP 172.30.1.1:80 rr ClusterIP ns1/svc1
                   -> 10.0.1.1:80 Masq w0
                   -> 10.0.1.2:80 Masq w0
                   -> 10.0.1.4:80 Masq w0
                   -> 10.0.1.5:80 Masq w1",
            ..Case::new(
                "Test_EndpointSliceOnlyReadyAndTerminatingCluster: one ready endpoint anywhere wins",
            )
        },
        Case {
            services: vec![svc_with("Local")],
            slices: only_terminating(),
            opts: |o| o.node_port_addresses = Some(vec!["192.168.0.2".parse().unwrap()]),
            want: "TCP 172.30.1.1:80 rr ClusterIP ns1/svc1
                   -> 10.0.1.1:80 Masq w0
                   -> 10.0.1.2:80 Masq w0
                   -> 10.0.1.4:80 Masq w0
                   -> 10.0.1.5:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1
                   -> 10.0.1.1:80 Masq w1
                   -> 10.0.1.2:80 Masq w1",
            ..Case::new(
                "Test_EndpointSliceOnlyReadyAndTerminatingLocal: no local ready, so local serving-terminating take traffic",
            )
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.1.1", "ports": [{ "port": 80 }] }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([{ "name": "", "port": 80 }]),
                json!([
                    { "addresses": ["10.0.1.1"] },
                    { "addresses": ["10.0.1.2"], "conditions": { "terminating": true } },
                    { "addresses": ["10.0.1.3"], "conditions": { "ready": false } },
                ]),
            )],
            want: "TCP 172.30.1.1:80 rr ClusterIP ns1/svc1
                   -> 10.0.1.1:80 Masq w1
                   -> 10.0.1.2:80 Masq w1",
            ..Case::new("absent conditions: ready and serving default true, terminating false")
        },
    ]);
}

#[test]
fn topology_hints() {
    let s = || {
        svc(
            "ns1/svc1",
            json!({ "clusterIP": "172.30.0.41", "ports": p80(), "trafficDistribution": "PreferClose" }),
        )
    };
    let hinted = |zones: [&str; 3]| {
        vec![slice(
            "ns1/svc1",
            "svc1-abc",
            "IPv4",
            json!([sport("p80", 80, "TCP")]),
            json!([
                { "addresses": ["10.180.0.1"], "nodeName": "host-1", "hints": { "forZones": [{ "name": zones[0] }] } },
                { "addresses": ["10.180.0.2"], "nodeName": "host-2", "hints": { "forZones": [{ "name": zones[1] }] } },
                { "addresses": ["10.180.0.3"], "nodeName": "host-3", "hints": { "forZones": [{ "name": zones[2] }] } },
            ]),
        )]
    };
    run_table(vec![
        Case {
            services: vec![s()],
            slices: hinted(["zone-a", "zone-b", "zone-a"]),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.0.3:80 Masq w1",
            ..Case::new(
                "zone hints for our zone (the Node's topology.kubernetes.io/zone) narrow the endpoints",
            )
        },
        Case {
            services: vec![s()],
            slices: hinted(["zone-b", "zone-b", "zone-c"]),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.0.2:80 Masq w1
                   -> 10.180.0.3:80 Masq w1",
            ..Case::new("no endpoint hinted for our zone: all")
        },
        Case {
            services: vec![s()],
            slices: hinted(["zone-a", "zone-b", "zone-a"]),
            node: json!({ "metadata": { "name": NODE }, "status": { "addresses": [{ "type": "InternalIP", "address": "192.168.0.2" }] } }),
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.0.2:80 Masq w1
                   -> 10.180.0.3:80 Masq w1",
            ..Case::new("the Node has no zone label: hints ignored")
        },
        Case {
            services: vec![s()],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("p80", 80, "TCP")]),
                json!([
                    { "addresses": ["10.180.0.1"], "nodeName": "host-1", "hints": { "forZones": [{ "name": "zone-a" }] } },
                    { "addresses": ["10.180.0.2"], "nodeName": "host-2" },
                ]),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1
                   -> 10.180.0.2:80 Masq w1",
            ..Case::new("an endpoint without hints: hints ignored")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "clusterIP": "172.30.0.41", "ports": p80(), "trafficDistribution": "PreferSameNode" }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("p80", 80, "TCP")]),
                json!([
                    { "addresses": ["10.180.0.1"], "nodeName": NODE, "hints": { "forNodes": [{ "name": NODE }], "forZones": [{ "name": "zone-a" }] } },
                    { "addresses": ["10.180.0.2"], "nodeName": "host-2", "hints": { "forNodes": [{ "name": "host-2" }], "forZones": [{ "name": "zone-a" }] } },
                ]),
            )],
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1",
            ..Case::new("node hints for this node win over zone hints")
        },
        Case {
            services: vec![svc(
                "ns1/svc1",
                json!({ "type": "NodePort", "clusterIP": "172.30.0.41", "externalTrafficPolicy": "Local",
                "ports": [{ "name": "p80", "port": 80, "protocol": "TCP", "nodePort": 30001 }] }),
            )],
            slices: vec![slice(
                "ns1/svc1",
                "svc1-abc",
                "IPv4",
                json!([sport("p80", 80, "TCP")]),
                json!([
                    { "addresses": ["10.180.0.1"], "nodeName": NODE, "hints": { "forZones": [{ "name": "zone-b" }] } },
                    { "addresses": ["10.180.0.2"], "nodeName": "host-2", "hints": { "forZones": [{ "name": "zone-a" }] } },
                ]),
            )],
            opts: |o| o.node_port_loopback = false,
            want: "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80
                   -> 10.180.0.2:80 Masq w1
                   TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:p80
                   -> 10.180.0.1:80 Masq w1",
            ..Case::new("externalTrafficPolicy: Local, topology ignored for Local endpoints")
        },
    ]);
}

#[test]
fn health_checks() {
    let lb = |etp: &str, hc: Option<i32>| {
        let mut spec = json!({ "type": "LoadBalancer", "clusterIP": "172.30.0.41", "externalTrafficPolicy": etp,
            "ports": [
                { "name": "a", "port": 80, "nodePort": 30001 },
                { "name": "b", "port": 443, "nodePort": 30002 } ] });
        if let Some(p) = hc {
            spec["healthCheckNodePort"] = json!(p);
        }
        svc("ns1/svc1", spec)
    };
    let eps = |term_local: bool| {
        let local2 = if term_local {
            cond("10.180.0.2", NODE, Some(false), Some(true), Some(true))
        } else {
            ep("10.180.0.2", NODE)
        };
        let local1 = if term_local {
            cond("10.180.0.1", NODE, Some(false), Some(true), Some(true))
        } else {
            ep("10.180.0.1", NODE)
        };
        vec![slice(
            "ns1/svc1",
            "svc1-abc",
            "IPv4",
            json!([sport("a", 8080, "TCP"), sport("b", 8443, "TCP")]),
            json!([local1, local2, ep("10.180.0.3", "host-2")]),
        )]
    };
    let opts = Options::new(NODE);
    let d = run_json(&[lb("Local", Some(32000))], &eps(false), &node_v4(), &opts);
    assert_eq!(d.health_checks.len(), 1);
    let h = &d.health_checks[0];
    assert_eq!(
        (h.port, h.namespace.as_str(), h.name.as_str()),
        (32000, "ns1", "svc1")
    );
    // Two local ready pods, each with two ports: 2, not 4 (kube-proxy
    // counts addresses), and the remote one not at all.
    assert_eq!(h.local_endpoints, 2);
    let (code, body) = h.response();
    assert_eq!(code, 200);
    assert!(body.contains("\"localEndpoints\": 2"), "{body}");

    let d = run_json(&[lb("Local", Some(32000))], &eps(true), &node_v4(), &opts);
    assert_eq!(
        d.health_checks[0].local_endpoints, 0,
        "terminating ones do not count"
    );
    assert_eq!(d.health_checks[0].response().0, 503);
    // ...though they still carry traffic (KEP-1669).
    assert!(d.render().contains(
        "TCP 192.168.0.2:30001 mh+fallback+port NodePort ns1/svc1:a\n  -> 10.180.0.1:8080 Masq w1"
    ));

    let d = run_json(&[lb("Local", Some(32000))], &[], &node_v4(), &opts);
    assert_eq!(d.health_checks[0].response().0, 503, "no endpoints at all");

    let d = run_json(&[lb("Cluster", None)], &eps(false), &node_v4(), &opts);
    assert!(
        d.health_checks.is_empty(),
        "Cluster policy has no health check"
    );
}

/// The output does not depend on the order of objects in the snapshot.
#[test]
fn deterministic_whatever_the_input_order() {
    let services = vec![
        svc_at(
            "ns1/a",
            2,
            json!({ "clusterIP": "172.30.0.1", "externalIPs": ["192.168.99.11"], "ports": p80() }),
        ),
        svc_at(
            "ns1/b",
            1,
            json!({ "clusterIP": "172.30.0.2", "externalIPs": ["192.168.99.11"], "ports": p80() }),
        ),
        svc_at(
            "ns2/c",
            3,
            json!({ "type": "NodePort", "clusterIP": "172.30.0.3", "ports": [{ "name": "p80", "port": 80, "nodePort": 30001 }] }),
        ),
    ];
    let slices = vec![
        slice(
            "ns1/a",
            "a-1",
            "IPv4",
            json!([sport("p80", 80, "TCP")]),
            json!([ep("10.180.0.9", "h"), ep("10.180.0.1", "h")]),
        ),
        slice(
            "ns1/a",
            "a-2",
            "IPv4",
            json!([sport("p80", 80, "TCP")]),
            json!([ep("10.180.0.5", "h"), ep("10.180.0.1", NODE)]),
        ),
        slice(
            "ns2/c",
            "c-1",
            "IPv4",
            json!([sport("p80", 80, "TCP")]),
            json!([ep("10.180.1.1", "h")]),
        ),
    ];
    let opts = Options::new(NODE);
    let base = run_json(&services, &slices, &node_v4(), &opts);
    let mut rs = services.clone();
    rs.reverse();
    let mut rl = slices.clone();
    rl.reverse();
    let other = run_json(&rs, &rl, &node_v4(), &opts);
    assert_eq!(base, other);
    assert!(
        base.render()
            .contains("192.168.99.11:80 mh+fallback+port ExternalIP ns1/b:p80"),
        "{}",
        base.render()
    );
}

/// The persistence netmask is the full address of the family.
#[test]
fn affinity_netmask_per_family() {
    use rvs_core::model::PersistMask;
    let s = svc(
        "ns1/svc1",
        json!({ "clusterIP": "172.30.0.41", "clusterIPs": ["172.30.0.41", "fd00::41"],
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 99999999 } },
        "ports": p80() }),
    );
    let d = run_json(&[s], &[], &node_dual(), &Options::new(NODE));
    let masks: Vec<(Option<u32>, PersistMask)> = d
        .services
        .iter()
        .map(|s| (s.def.config.persistent, s.def.config.netmask))
        .collect();
    assert_eq!(
        masks,
        vec![
            (
                Some(2_678_400),
                PersistMask::V4("255.255.255.255".parse().unwrap())
            ),
            (Some(2_678_400), PersistMask::V6(128)),
        ],
        "timeouts clamped to 31 days; /32 and /128"
    );
}

/// Every produced ServiceDef is accepted by the core model (the same checks
/// `ipvsadm -A/-a` go through), so the control plane can apply the table.
#[test]
fn defs_are_valid_for_the_director() {
    use rvs_core::ipvs::{Ipvs, IpvsConfig};
    let services = vec![
        svc(
            "ns1/lb",
            json!({ "type": "LoadBalancer", "clusterIP": "172.30.0.1", "sessionAffinity": "ClientIP",
            "ports": [{ "name": "p80", "port": 80, "nodePort": 30001 }, { "name": "u", "port": 53, "protocol": "UDP", "nodePort": 30002 }] }),
        ),
        svc(
            "ns1/local",
            json!({ "type": "NodePort", "clusterIP": "172.30.0.2", "externalTrafficPolicy": "Local",
            "ports": [{ "name": "p80", "port": 80, "nodePort": 30003 }] }),
        ),
    ];
    let slices = vec![
        slice(
            "ns1/lb",
            "lb-1",
            "IPv4",
            json!([sport("p80", 8080, "TCP"), sport("u", 5353, "UDP")]),
            json!([
                ep("10.180.0.1", NODE),
                cond("10.180.0.2", "h", Some(false), Some(true), Some(true)),
                ep("10.180.0.3", "h")
            ]),
        ),
        slice(
            "ns1/local",
            "local-1",
            "IPv4",
            json!([sport("p80", 8080, "TCP")]),
            json!([ep("10.180.0.4", NODE)]),
        ),
    ];
    for mode in [ExternalMode::Snat, ExternalMode::Dsr, ExternalMode::Hybrid] {
        let mut opts = Options::new(NODE);
        opts.external_mode = mode;
        let d = run_json(&services, &slices, &node_v4(), &opts);
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        for s in &d.services {
            ipvs.add_service(s.def.key, s.def.config.clone())
                .unwrap_or_else(|e| panic!("{s}: {e}"));
            for l in &s.def.laddrs {
                ipvs.add_laddr(&s.def.key, *l)
                    .unwrap_or_else(|e| panic!("{s}: {e}"));
            }
            for r in &s.def.dests {
                ipvs.add_dest(&s.def.key, *r)
                    .unwrap_or_else(|e| panic!("{s}: {e}"));
            }
        }
        assert_eq!(ipvs.services().count(), d.services.len());
    }
}

/// What is ignored is said: slice ports kube-proxy ignores, bad source
/// ranges, a Node that is not ours.
#[test]
fn warnings_name_the_object() {
    let s = svc(
        "ns1/svc1",
        json!({ "type": "LoadBalancer", "clusterIP": "172.30.0.41", "ports": p80(),
        "loadBalancerSourceRanges": ["junk"] }),
    );
    let sl = slice(
        "ns1/svc1",
        "svc1-abc",
        "IPv4",
        json!([{ "port": 80 }, { "name": "p80", "port": 0 }, sport("p80", 80, "TCP")]),
        json!([ep("10.180.0.1", "h"), ep("fd00::1", "h")]),
    );
    let mut node = node_v4();
    node["metadata"]["name"] = json!("someone-else");
    let d = run_json(&[s], &[sl], &node, &Options::new(NODE));
    let w: Vec<String> = d.warnings.iter().map(|w| w.to_string()).collect();
    let want = [
        "Service ns1/svc1: loadBalancerSourceRanges: `junk` is not a CIDR block",
        "EndpointSlice ns1/svc1-abc: a port without a name is ignored",
        "EndpointSlice ns1/svc1-abc: endpoint address fd00::1 is not of the slice's address type IPv4; ignored",
        "EndpointSlice ns1/svc1-abc: port `p80`: 0 is not a valid port; ignored",
        "Node someone-else: the Node given is not this node (test-node)",
    ];
    assert_eq!(w.len(), want.len(), "{w:#?}");
    for (g, x) in w.iter().zip(want) {
        assert!(g.starts_with(x), "{g} / {x}");
    }
    assert!(
        d.render().contains("-> 10.180.0.1:80 Masq w1"),
        "the good port still counts"
    );
}
