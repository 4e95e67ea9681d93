//! Endpoints of a Service from its EndpointSlices, and which of them a
//! traffic-policy scope uses (kube-proxy's `EndpointSliceCache` and
//! `CategorizeEndpoints`, KEP-1669 and topology hints).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use rvs_core::model::{AddrFamily, Protocol};

/// The label of an EndpointSlice that names its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// One endpoint of one service port, as kube-proxy keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ep {
    pub ip: IpAddr,
    pub port: u16,
    /// On this node (`nodeName` is ours).
    pub local: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `hints.forZones` names (empty = no zone hints).
    pub zone_hints: BTreeSet<String>,
    /// `hints.forNodes` names (empty = no node hints).
    pub node_hints: BTreeSet<String>,
}

/// Endpoints of one Service by (slice port name, protocol), deduplicated by
/// address and port, in address order.
pub(crate) type ByPort = BTreeMap<(String, Protocol), Vec<Ep>>;

/// A problem with a slice, for the caller's warnings.
pub(crate) struct SliceIssue<'a> {
    pub slice: &'a EndpointSlice,
    pub message: String,
}

/// Gather the endpoints of one Service from its slices (already filtered to
/// those whose `kubernetes.io/service-name` label names it, in name order).
/// Like kube-proxy: a slice port without a name, a port or a known protocol
/// is ignored; an endpoint's first address is its address; an address of
/// the wrong family for its slice is ignored; a duplicate (same address and
/// port in two slices) keeps the first, unless the later one is local.
pub(crate) fn collect<'a>(
    slices: &[&'a EndpointSlice],
    node_name: &str,
    issues: &mut Vec<SliceIssue<'a>>,
) -> ByPort {
    let mut out: BTreeMap<(String, Protocol), BTreeMap<(IpAddr, u16), Ep>> = BTreeMap::new();
    for &slice in slices {
        let family = match slice.address_type.as_str() {
            "IPv4" => AddrFamily::Inet,
            "IPv6" => AddrFamily::Inet6,
            // FQDN slices are not proxied (kube-proxy ignores them too).
            _ => continue,
        };
        let mut issue = |m: String| issues.push(SliceIssue { slice, message: m });
        for p in slice.ports.iter().flatten() {
            let Some(name) = &p.name else {
                issue("a port without a name is ignored".into());
                continue;
            };
            let port = match p.port {
                Some(n) if (1..=65535).contains(&n) => n as u16,
                Some(n) => {
                    issue(format!("port `{name}`: {n} is not a valid port; ignored"));
                    continue;
                }
                None => {
                    issue(format!("port `{name}` has no port number; ignored"));
                    continue;
                }
            };
            let Some(protocol) = parse_protocol(p.protocol.as_deref()) else {
                issue(format!(
                    "port `{name}`: protocol `{}` is not TCP, UDP or SCTP; ignored",
                    p.protocol.as_deref().unwrap_or("")
                ));
                continue;
            };
            let set = out.entry((name.clone(), protocol)).or_default();
            for e in slice.endpoints.iter().flatten() {
                let Some(first) = e.addresses.first() else {
                    continue;
                };
                let Ok(ip) = first.parse::<IpAddr>() else {
                    issue(format!(
                        "endpoint address `{first}` is not an IP address; ignored"
                    ));
                    continue;
                };
                if AddrFamily::of(&ip) != family {
                    issue(format!(
                        "endpoint address {ip} is not of the slice's address type {}; ignored",
                        slice.address_type
                    ));
                    continue;
                }
                let c = e.conditions.as_ref();
                let ready = c.and_then(|c| c.ready).unwrap_or(true);
                let serving = c.and_then(|c| c.serving).unwrap_or(true);
                let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
                let local = !node_name.is_empty() && e.node_name.as_deref() == Some(node_name);
                let hints = e.hints.as_ref();
                let ep = Ep {
                    ip,
                    port,
                    local,
                    ready,
                    serving,
                    terminating,
                    zone_hints: hints
                        .and_then(|h| h.for_zones.as_ref())
                        .map(|z| z.iter().map(|z| z.name.clone()).collect())
                        .unwrap_or_default(),
                    node_hints: hints
                        .and_then(|h| h.for_nodes.as_ref())
                        .map(|z| z.iter().map(|z| z.name.clone()).collect())
                        .unwrap_or_default(),
                };
                match set.get(&(ip, port)) {
                    Some(old) if old.local || !local => {}
                    _ => {
                        set.insert((ip, port), ep);
                    }
                }
            }
        }
    }
    out.into_iter()
        .map(|(k, v)| (k, v.into_values().collect()))
        .collect()
}

/// `TCP` (also when unset, the API's default), `UDP` or `SCTP`.
pub(crate) fn parse_protocol(p: Option<&str>) -> Option<Protocol> {
    match p {
        None | Some("TCP") => Some(Protocol::Tcp),
        Some("UDP") => Some(Protocol::Udp),
        Some("SCTP") => Some(Protocol::Sctp),
        Some(_) => None,
    }
}

/// Which endpoints an rvs service uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every endpoint of the cluster (traffic policy `Cluster`), with
    /// topology hints applied.
    Cluster,
    /// This node's endpoints only (traffic policy `Local`); hints ignored.
    Local,
}

/// The endpoints a scope uses, and the ones left to drain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Picked<'a> {
    /// New connections go here (weight 1).
    pub active: Vec<&'a Ep>,
    /// Terminating but still serving endpoints of the scope that are not
    /// active: kept at weight 0 so their open connections finish.
    pub draining: Vec<&'a Ep>,
}

/// Node and zone of this node, for topology hints.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Here<'a> {
    pub node: &'a str,
    pub zone: &'a str,
}

/// The topology a `Cluster` scope follows (kube-proxy's
/// `topologyModeFromHints`): same node when every ready endpoint has node
/// hints and one is for us; else same zone when every ready endpoint has
/// zone hints and one is for our zone; else none.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Topology {
    None,
    SameNode,
    SameZone,
}

fn topology(eps: &[Ep], here: Here<'_>) -> Topology {
    let ready: Vec<&Ep> = eps.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return Topology::None;
    }
    if ready.iter().all(|e| !e.node_hints.is_empty())
        && ready.iter().any(|e| e.node_hints.contains(here.node))
    {
        return Topology::SameNode;
    }
    if ready.iter().all(|e| !e.zone_hints.is_empty())
        && !here.zone.is_empty()
        && ready.iter().any(|e| e.zone_hints.contains(here.zone))
    {
        return Topology::SameZone;
    }
    Topology::None
}

/// The endpoints `scope` uses (KEP-1669): the ready ones (topology
/// filtered for `Cluster`); when there are none, the serving terminating
/// ones. Terminating serving endpoints of the scope that are not used are
/// returned to drain; not-serving ones are dropped.
pub(crate) fn pick<'e>(eps: &'e [Ep], scope: Scope, here: Here<'_>) -> Picked<'e> {
    let in_scope = |e: &&Ep| scope == Scope::Cluster || e.local;
    let topo = match scope {
        Scope::Cluster => topology(eps, here),
        Scope::Local => Topology::None,
    };
    let fits = |e: &Ep| match topo {
        Topology::None => true,
        Topology::SameNode => e.node_hints.contains(here.node),
        Topology::SameZone => e.zone_hints.contains(here.zone),
    };
    let mut active: Vec<&Ep> = eps
        .iter()
        .filter(in_scope)
        .filter(|e| e.ready && fits(e))
        .collect();
    if active.is_empty() {
        active = eps
            .iter()
            .filter(in_scope)
            .filter(|e| e.serving && e.terminating)
            .collect();
    }
    let draining = eps
        .iter()
        .filter(in_scope)
        .filter(|e| e.serving && e.terminating && !active.contains(e))
        .collect();
    Picked { active, draining }
}

#[cfg(test)]
mod tests {
    //! kube-proxy's `TestCategorizeEndpoints` (pkg/proxy/topology_test.go),
    //! case by case: the endpoints and the expected cluster/local sets.
    use super::*;

    #[derive(Default, Clone)]
    struct E {
        ip: &'static str,
        zones: &'static [&'static str],
        nodes: &'static [&'static str],
        ready: bool,
        serving: bool,
        terminating: bool,
        local: bool,
    }

    fn ep(e: &E) -> Ep {
        Ep {
            ip: e.ip.parse().unwrap(),
            port: 80,
            local: e.local,
            ready: e.ready,
            serving: e.serving || e.ready,
            terminating: e.terminating,
            zone_hints: e.zones.iter().map(|s| s.to_string()).collect(),
            node_hints: e.nodes.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn r(ip: &'static str, zones: &'static [&'static str]) -> E {
        E {
            ip,
            zones,
            ready: true,
            ..E::default()
        }
    }

    fn names(p: &[&Ep]) -> Vec<String> {
        p.iter().map(|e| e.ip.to_string()).collect()
    }

    struct Case {
        name: &'static str,
        zone: &'static str,
        eps: Vec<E>,
        /// Expected `Cluster` scope (`None` = the service never uses it).
        cluster: Option<Vec<&'static str>>,
        /// Expected `Local` scope.
        local: Option<Vec<&'static str>>,
    }

    #[test]
    fn categorize_endpoints_ported_cases() {
        let four = || {
            vec![
                r("10.1.2.3", &["zone-a"]),
                r("10.1.2.4", &["zone-b"]),
                r("10.1.2.5", &["zone-c"]),
                r("10.1.2.6", &["zone-a"]),
            ]
        };
        let loc = |mut e: E| {
            e.local = true;
            e
        };
        let unready = |mut e: E| {
            e.ready = false;
            e
        };
        let term = |mut e: E| {
            e.ready = false;
            e.serving = true;
            e.terminating = true;
            e
        };
        let cases = vec![
            Case {
                name: "should use topology since all endpoints have hints, node has a zone label and there are endpoints for the node's zone",
                zone: "zone-a",
                eps: four(),
                cluster: Some(vec!["10.1.2.3", "10.1.2.6"]),
                local: None,
            },
            Case {
                name: "externalTrafficPolicy: Local, topology ignored for Local endpoints",
                zone: "zone-a",
                eps: {
                    let mut v = four();
                    v[0].local = true;
                    v[1].local = true;
                    v
                },
                cluster: Some(vec!["10.1.2.3", "10.1.2.6"]),
                local: Some(vec!["10.1.2.3", "10.1.2.4"]),
            },
            Case {
                name: "empty node labels / empty zone label",
                zone: "",
                eps: vec![r("10.1.2.3", &["zone-a"])],
                cluster: Some(vec!["10.1.2.3"]),
                local: None,
            },
            Case {
                name: "node in different zone, no endpoint filtering",
                zone: "zone-b",
                eps: vec![r("10.1.2.3", &["zone-a"])],
                cluster: Some(vec!["10.1.2.3"]),
                local: None,
            },
            Case {
                name: "unready endpoint",
                zone: "zone-a",
                eps: {
                    let mut v = four();
                    v[3] = unready(v[3].clone());
                    v
                },
                cluster: Some(vec!["10.1.2.3"]),
                local: None,
            },
            Case {
                name: "only unready endpoints in same zone (should not filter)",
                zone: "zone-a",
                eps: {
                    let mut v = four();
                    v[0] = unready(v[0].clone());
                    v[3] = unready(v[3].clone());
                    v
                },
                cluster: Some(vec!["10.1.2.4", "10.1.2.5"]),
                local: None,
            },
            Case {
                name: "missing hints, no filtering applied",
                zone: "zone-a",
                eps: {
                    let mut v = four();
                    v[2].zones = &[];
                    v
                },
                cluster: Some(vec!["10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6"]),
                local: None,
            },
            Case {
                name: "multiple hints per endpoint, filtering includes any endpoint with zone included",
                zone: "zone-c",
                eps: vec![
                    r("10.1.2.3", &["zone-a", "zone-b", "zone-c"]),
                    r("10.1.2.4", &["zone-b", "zone-c"]),
                    r("10.1.2.5", &["zone-b", "zone-d"]),
                    r("10.1.2.6", &["zone-c"]),
                ],
                cluster: Some(vec!["10.1.2.3", "10.1.2.4", "10.1.2.6"]),
                local: None,
            },
            Case {
                name: "conflicting topology and localness require merging allEndpoints",
                zone: "zone-a",
                eps: vec![
                    loc(r("10.0.0.0", &["zone-a"])),
                    loc(r("10.0.0.1", &["zone-b"])),
                    r("10.0.0.2", &["zone-a"]),
                    r("10.0.0.3", &["zone-b"]),
                ],
                cluster: Some(vec!["10.0.0.0", "10.0.0.2"]),
                local: Some(vec!["10.0.0.0", "10.0.0.1"]),
            },
            Case {
                name: "internalTrafficPolicy: Local, with empty endpoints",
                zone: "",
                eps: vec![],
                cluster: None,
                local: Some(vec![]),
            },
            Case {
                name: "internalTrafficPolicy: Local, but all endpoints are remote",
                zone: "",
                eps: vec![r("10.0.0.0", &[]), r("10.0.0.1", &[])],
                cluster: None,
                local: Some(vec![]),
            },
            Case {
                name: "internalTrafficPolicy: Local, some endpoints are local",
                zone: "",
                eps: vec![loc(r("10.0.0.0", &[])), r("10.0.0.1", &[])],
                cluster: Some(vec!["10.0.0.0", "10.0.0.1"]),
                local: Some(vec!["10.0.0.0"]),
            },
            Case {
                name: "Cluster traffic policy, endpoints not Ready",
                zone: "",
                eps: vec![unready(r("10.0.0.0", &[])), unready(r("10.0.0.1", &[]))],
                cluster: Some(vec![]),
                local: None,
            },
            Case {
                name: "Cluster traffic policy, some endpoints are Ready",
                zone: "",
                eps: vec![unready(r("10.0.0.0", &[])), r("10.0.0.1", &[])],
                cluster: Some(vec!["10.0.0.1"]),
                local: None,
            },
            Case {
                name: "Cluster traffic policy, all endpoints are terminating",
                zone: "",
                eps: vec![term(loc(r("10.0.0.0", &[]))), term(r("10.0.0.1", &[]))],
                cluster: Some(vec!["10.0.0.0", "10.0.0.1"]),
                local: None,
            },
            Case {
                name: "iTP: Local, eTP: Local, all endpoints remote and terminating",
                zone: "",
                eps: vec![term(r("10.0.0.0", &[])), term(r("10.0.0.1", &[]))],
                cluster: Some(vec!["10.0.0.0", "10.0.0.1"]),
                local: Some(vec![]),
            },
            Case {
                name: "iTP: Cluster, eTP: Local, with terminating endpoints",
                zone: "",
                eps: vec![
                    r("10.0.0.0", &[]),
                    loc(unready(r("10.0.0.1", &[]))),
                    term(loc(r("10.0.0.2", &[]))),
                    term(r("10.0.0.3", &[])),
                ],
                cluster: Some(vec!["10.0.0.0"]),
                local: Some(vec!["10.0.0.2"]),
            },
        ];
        for c in cases {
            let eps: Vec<Ep> = c.eps.iter().map(ep).collect();
            let here = Here {
                node: "test-node",
                zone: c.zone,
            };
            if let Some(want) = &c.cluster {
                let got = pick(&eps, Scope::Cluster, here);
                assert_eq!(&names(&got.active), want, "{}: cluster", c.name);
            }
            if let Some(want) = &c.local {
                let got = pick(&eps, Scope::Local, here);
                assert_eq!(&names(&got.active), want, "{}: local", c.name);
            }
        }
    }

    /// Same-node hints (PreferSameNode): used when every ready endpoint has
    /// node hints and one is ours; they win over zone hints; ignored when
    /// one ready endpoint lacks them.
    #[test]
    fn node_hints() {
        let e = |ip, nodes, zones| E {
            ip,
            nodes,
            zones,
            ready: true,
            ..E::default()
        };
        let here = Here {
            node: "test-node",
            zone: "zone-a",
        };
        let eps: Vec<Ep> = [
            e("10.0.0.1", &["test-node"][..], &["zone-a"][..]),
            e("10.0.0.2", &["other"], &["zone-a"]),
            e("10.0.0.3", &["other2"], &["zone-b"]),
        ]
        .iter()
        .map(ep)
        .collect();
        assert_eq!(
            names(&pick(&eps, Scope::Cluster, here).active),
            ["10.0.0.1"]
        );
        let here_b = Here {
            node: "elsewhere",
            zone: "zone-a",
        };
        assert_eq!(
            names(&pick(&eps, Scope::Cluster, here_b).active),
            ["10.0.0.1", "10.0.0.2"],
            "no node hint for us: zone hints apply"
        );
        let mut eps2 = eps.clone();
        eps2[2].node_hints.clear();
        assert_eq!(
            names(&pick(&eps2, Scope::Cluster, here).active),
            ["10.0.0.1", "10.0.0.2"],
            "one endpoint without node hints: node hints ignored, zone hints apply"
        );
    }

    /// Terminating endpoints not chosen stay to drain; not-serving ones go.
    #[test]
    fn draining() {
        let here = Here {
            node: "n",
            zone: "",
        };
        let mut a = E {
            ip: "10.0.0.1",
            ready: true,
            ..E::default()
        };
        let b = E {
            ip: "10.0.0.2",
            serving: true,
            terminating: true,
            ..E::default()
        };
        let c = E {
            ip: "10.0.0.3",
            terminating: true,
            ..E::default()
        };
        let eps: Vec<Ep> = [a.clone(), b.clone(), c.clone()].iter().map(ep).collect();
        let p = pick(&eps, Scope::Cluster, here);
        assert_eq!(names(&p.active), ["10.0.0.1"]);
        assert_eq!(names(&p.draining), ["10.0.0.2"]);
        a.ready = false;
        let eps: Vec<Ep> = [a, b, c].iter().map(ep).collect();
        let p = pick(&eps, Scope::Cluster, here);
        assert_eq!(names(&p.active), ["10.0.0.2"]);
        assert!(p.draining.is_empty());
    }
}
