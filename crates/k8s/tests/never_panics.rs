//! Property tests: `translate` never panics on arbitrary objects (fields
//! missing, empty, malformed or contradictory everywhere), its output is
//! sorted with one owner per address:port, independent of input order, and
//! every ServiceDef it produces is one the core director accepts.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeStatus,
    Service, ServicePort, ServiceSpec, ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForNode, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use rvs_core::ipvs::{Ipvs, IpvsConfig};
use rvs_k8s::{ExternalMode, Options, Snapshot, translate};

const WORDS: &[&str] = &[
    "",
    "None",
    "ns1",
    "a",
    "b",
    "test-node",
    "host-2",
    "zone-a",
    "zone-b",
    "TCP",
    "UDP",
    "SCTP",
    "ICMP",
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "ExternalName",
    "Local",
    "Cluster",
    "ClientIP",
    "IPv4",
    "IPv6",
    "FQDN",
    "Proxy",
    "VIP",
    "InternalIP",
    "ExternalIP",
    "Hostname",
    "10.0.0.1",
    "10.0.0.2",
    "172.30.0.1",
    "192.168.0.2",
    "127.0.0.1",
    "0.0.0.0",
    "::",
    "::1",
    "fd00::1",
    "2001:db8::1",
    "10.0.0.0/8",
    "::/0",
    "1.2.3.4/33",
    "300.1.1.1",
    " 10.0.0.1 ",
    "1.2.3.4",
    "junk",
];

const INTS: &[i32] = &[
    i32::MIN,
    -1,
    0,
    1,
    53,
    80,
    443,
    3001,
    30000,
    30001,
    32767,
    65535,
    65536,
    i32::MAX,
];

fn word() -> impl Strategy<Value = String> {
    proptest::sample::select(WORDS).prop_map(str::to_owned)
}

fn oword() -> impl Strategy<Value = Option<String>> {
    option::of(word())
}

fn int() -> impl Strategy<Value = i32> {
    proptest::sample::select(INTS)
}

fn owords() -> impl Strategy<Value = Option<Vec<String>>> {
    option::of(vec(word(), 0..4))
}

fn meta() -> impl Strategy<Value = ObjectMeta> {
    (
        option::of(proptest::sample::select(&["ns1", "ns2", ""][..])),
        option::of(proptest::sample::select(&["a", "b", "c", ""][..])),
        oword(),
        option::of(vec(
            (
                proptest::sample::select(
                    &[
                        "service.kubernetes.io/headless",
                        "service.kubernetes.io/service-proxy-name",
                        "kubernetes.io/service-name",
                        "topology.kubernetes.io/zone",
                        "other",
                    ][..],
                ),
                word(),
            ),
            0..3,
        )),
        option::of(0i64..4),
    )
        .prop_map(|(ns, name, uid, labels, ts)| ObjectMeta {
            namespace: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            uid,
            labels: labels.map(|l| {
                l.into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect::<BTreeMap<_, _>>()
            }),
            creation_timestamp: ts.and_then(|s| {
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + s)
                    .ok()
                    .map(Time)
            }),
            ..ObjectMeta::default()
        })
}

fn service_port() -> impl Strategy<Value = ServicePort> {
    (oword(), option::of(int()), int(), oword()).prop_map(|(name, node_port, port, protocol)| {
        ServicePort {
            name,
            node_port,
            port,
            protocol,
            ..ServicePort::default()
        }
    })
}

fn spec() -> impl Strategy<Value = ServiceSpec> {
    (
        (
            oword(),
            oword(),
            owords(),
            owords(),
            option::of(vec(service_port(), 0..4)),
        ),
        (
            oword(),
            oword(),
            oword(),
            option::of(option::of(int())),
            option::of(int()),
            owords(),
        ),
    )
        .prop_map(
            |(
                (type_, cluster_ip, cluster_ips, external_ips, ports),
                (etp, itp, affinity, timeout, hc, ranges),
            )| ServiceSpec {
                type_,
                cluster_ip,
                cluster_ips,
                external_ips,
                ports,
                external_traffic_policy: etp,
                internal_traffic_policy: itp,
                session_affinity: affinity,
                session_affinity_config: timeout.map(|t| SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig { timeout_seconds: t }),
                }),
                health_check_node_port: hc,
                load_balancer_source_ranges: ranges,
                ..ServiceSpec::default()
            },
        )
}

/// Each item of an optional list (as the API objects hold them) mapped by
/// `f`.
fn each<T, U>(list: Option<Vec<T>>, f: impl FnMut(T) -> U) -> Option<Vec<U>> {
    list.map(|v| v.into_iter().map(f).collect())
}

fn service() -> impl Strategy<Value = Service> {
    (
        meta(),
        option::of(spec()),
        option::of(option::of(vec((oword(), oword(), oword()), 0..3))),
    )
        .prop_map(|(metadata, spec, ingress)| Service {
            metadata,
            spec,
            status: ingress.map(|i| ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: each(i, |(ip, hostname, ip_mode)| LoadBalancerIngress {
                        ip,
                        hostname,
                        ip_mode,
                        ..LoadBalancerIngress::default()
                    }),
                }),
                ..ServiceStatus::default()
            }),
        })
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    (
        vec(word(), 0..3),
        oword(),
        option::of((
            option::of(any::<bool>()),
            option::of(any::<bool>()),
            option::of(any::<bool>()),
        )),
        option::of((owords(), owords())),
    )
        .prop_map(|(addresses, node_name, conditions, hints)| Endpoint {
            addresses,
            node_name,
            conditions: conditions.map(|(ready, serving, terminating)| EndpointConditions {
                ready,
                serving,
                terminating,
            }),
            hints: hints.map(|(z, n)| EndpointHints {
                for_zones: each(z, |name| ForZone { name }),
                for_nodes: each(n, |name| ForNode { name }),
            }),
            ..Endpoint::default()
        })
}

fn slice() -> impl Strategy<Value = EndpointSlice> {
    (
        meta(),
        word(),
        option::of(vec((oword(), option::of(int()), oword()), 0..3)),
        option::of(vec(endpoint(), 0..5)),
    )
        .prop_map(|(metadata, address_type, ports, endpoints)| EndpointSlice {
            metadata,
            address_type,
            ports: each(ports, |(name, port, protocol)| EndpointPort {
                name,
                port,
                protocol,
                ..EndpointPort::default()
            }),
            endpoints,
        })
}

fn node() -> impl Strategy<Value = Node> {
    (meta(), option::of(option::of(vec((word(), word()), 0..4)))).prop_map(|(metadata, addrs)| {
        Node {
            metadata,
            status: addrs.map(|a| NodeStatus {
                addresses: each(a, |(type_, address)| NodeAddress { address, type_ }),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    })
}

fn opts() -> impl Strategy<Value = Options> {
    (
        proptest::sample::select(
            &[ExternalMode::Snat, ExternalMode::Dsr, ExternalMode::Hybrid][..],
        ),
        any::<bool>(),
        option::of(proptest::sample::select(&["", "rvs", "a"][..])),
        option::of(vec(word(), 0..3)),
    )
        .prop_map(|(mode, lo, proxy, npa)| {
            let mut o = Options::new("test-node");
            o.external_mode = mode;
            o.node_port_loopback = lo;
            o.service_proxy_name = proxy.map(str::to_owned);
            o.node_port_addresses = npa.map(|v| v.iter().filter_map(|s| s.parse().ok()).collect());
            o
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn translate_never_panics_and_its_output_holds(
        services in vec(service(), 0..6),
        slices in vec(slice(), 0..6),
        node in option::of(node()),
        opts in opts(),
    ) {
        let snap = Snapshot {
            services: services.iter().collect(),
            endpoint_slices: slices.iter().collect(),
            node: node.as_ref(),
        };
        let d = translate(&snap, &opts);

        // Same answer whatever the order of the objects.
        let mut rev = snap.clone();
        rev.services.reverse();
        rev.endpoint_slices.reverse();
        prop_assert_eq!(&translate(&rev, &opts), &d);

        // One rvs service per key, and the director accepts every one.
        let mut keys = HashSet::new();
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        for s in &d.services {
            prop_assert!(keys.insert(s.def.key), "duplicate key {}", s);
            prop_assert!(ipvs.add_service(s.def.key, s.def.config.clone()).is_ok(), "{}", s);
            for l in &s.def.laddrs {
                prop_assert!(ipvs.add_laddr(&s.def.key, *l).is_ok(), "{}", s);
            }
            let mut dests = HashSet::new();
            for r in &s.def.dests {
                prop_assert!(dests.insert((r.addr, r.port)), "duplicate real server in {}", s);
                prop_assert_eq!(
                    rvs_core::model::AddrFamily::of(&r.addr),
                    s.def.key.af(),
                    "real server of another family in {}", s
                );
                prop_assert!(ipvs.add_dest(&s.def.key, *r).is_ok(), "{}", s);
            }
        }
        for h in &d.health_checks {
            let (code, _) = h.response();
            prop_assert!(code == 200 || code == 503);
        }
        let _ = d.render();
    }
}
