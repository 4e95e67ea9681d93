//! Property tests on well-formed clusters (random Services of every type,
//! policies and families, with random slices, conditions and hints): every
//! real server rvs programs is an endpoint of the Service port it serves,
//! of the entry's family, local when the policy is Local, draining (w0)
//! only when terminating; and without hints, every ready endpoint in scope
//! is used.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::*;
use proptest::collection::vec;
use proptest::prelude::*;
use rvs_core::model::{AddrFamily, ForwardMethod, Protocol, ServiceKey};
use rvs_k8s::{Kind, Options};
use serde_json::{Value, json};

/// (name, service port, protocol)
const PORTS: &[(&str, i32, &str)] = &[("a", 80, "TCP"), ("b", 53, "UDP"), ("c", 443, "TCP")];

#[derive(Clone, Debug)]
struct SvcGen {
    ty: usize,
    dual: bool,
    ports: Vec<bool>,
    etp_local: bool,
    itp_local: bool,
    affinity: bool,
    external_ip: bool,
}

#[derive(Clone, Debug)]
struct EpGen {
    ip: u8,
    node: usize,
    cond: (Option<bool>, Option<bool>, Option<bool>),
    zone: Option<usize>,
}

#[derive(Clone, Debug)]
struct SliceGen {
    svc: usize,
    v6: bool,
    ports: Vec<(usize, i32)>,
    eps: Vec<EpGen>,
}

fn svc_gen() -> impl Strategy<Value = SvcGen> {
    (
        0usize..3,
        any::<bool>(),
        vec(any::<bool>(), 3),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(ty, dual, ports, etp_local, itp_local, affinity, external_ip)| SvcGen {
                ty,
                dual,
                ports,
                etp_local,
                itp_local,
                affinity,
                external_ip,
            },
        )
}

fn ep_gen() -> impl Strategy<Value = EpGen> {
    (
        1u8..7,
        0usize..3,
        (
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
        ),
        proptest::option::of(0usize..2),
    )
        .prop_map(|(ip, node, cond, zone)| EpGen {
            ip,
            node,
            cond,
            zone,
        })
}

fn slice_gen() -> impl Strategy<Value = SliceGen> {
    (
        0usize..3,
        any::<bool>(),
        vec((0usize..3, 8000i32..8003), 0..3),
        vec(ep_gen(), 0..5),
    )
        .prop_map(|(svc, v6, ports, eps)| SliceGen {
            svc,
            v6,
            ports,
            eps,
        })
}

const NODES: &[&str] = &[NODE, "host-2", ""];
const ZONES: &[&str] = &["zone-a", "zone-b"];

fn build(svcs: &[SvcGen], slices: &[SliceGen]) -> (Vec<Value>, Vec<Value>) {
    let mut services = Vec::new();
    for (i, s) in svcs.iter().enumerate() {
        let ty = ["ClusterIP", "NodePort", "LoadBalancer"][s.ty];
        let ports: Vec<Value> = PORTS
            .iter()
            .enumerate()
            .filter(|(j, _)| s.ports[*j])
            .map(|(j, (n, p, pr))| {
                let mut v = json!({ "name": n, "port": p, "protocol": pr });
                if s.ty > 0 {
                    v["nodePort"] = json!(30000 + i * 10 + j);
                }
                v
            })
            .collect();
        let mut ips = vec![format!("172.30.0.{}", i + 1)];
        if s.dual {
            ips.push(format!("fd00:30::{}", i + 1));
        }
        let mut spec = json!({ "type": ty, "clusterIP": ips[0], "clusterIPs": ips, "ports": ports,
            "internalTrafficPolicy": if s.itp_local { "Local" } else { "Cluster" } });
        if s.ty > 0 {
            spec["externalTrafficPolicy"] = json!(if s.etp_local { "Local" } else { "Cluster" });
        }
        if s.affinity {
            spec["sessionAffinity"] = json!("ClientIP");
        }
        if s.external_ip {
            spec["externalIPs"] = json!([format!("192.168.99.{}", i + 1)]);
        }
        let mut v = svc_at(&format!("ns1/s{i}"), i as u32, spec);
        if s.ty == 2 {
            v["status"] =
                json!({ "loadBalancer": { "ingress": [{ "ip": format!("1.2.3.{}", i + 1) }] } });
        }
        services.push(v);
    }
    let mut out = Vec::new();
    for (k, sl) in slices.iter().enumerate() {
        let ports: Vec<Value> = sl
            .ports
            .iter()
            .map(|(j, p)| sport(PORTS[*j].0, *p, PORTS[*j].2))
            .collect();
        let eps: Vec<Value> = sl
            .eps
            .iter()
            .map(|e| {
                let ip = if sl.v6 {
                    format!("fd00:180::{}", e.ip)
                } else {
                    format!("10.180.0.{}", e.ip)
                };
                let mut v = cond(&ip, NODES[e.node], e.cond.0, e.cond.1, e.cond.2);
                if let Some(z) = e.zone {
                    v["hints"] = json!({ "forZones": [{ "name": ZONES[z] }] });
                }
                v
            })
            .collect();
        out.push(slice(
            &format!("ns1/s{}", sl.svc),
            &format!("s{}-{k}", sl.svc),
            if sl.v6 { "IPv6" } else { "IPv4" },
            json!(ports),
            json!(eps),
        ));
    }
    (services, out)
}

/// One occurrence of an endpoint in a slice, for the checks.
#[derive(Clone, Debug)]
struct Occ {
    local: bool,
    ready: bool,
    serving: bool,
    terminating: bool,
    hinted: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn real_servers_are_the_right_endpoints(
        svcs in vec(svc_gen(), 1..4),
        slices in vec(slice_gen(), 0..6),
        dual_node in any::<bool>(),
    ) {
        let (services, slice_json) = build(&svcs, &slices);
        let node = if dual_node { node_dual() } else { node_v4() };
        let d = run_json(&services, &slice_json, &node, &Options::new(NODE));

        // Occurrences by (service index, port name, protocol, ip, port).
        let mut occ: BTreeMap<(usize, &str, Protocol, IpAddr, u16), Vec<Occ>> = BTreeMap::new();
        let mut hinted_svc = vec![false; svcs.len()];
        for sl in &slices {
            if sl.svc >= svcs.len() {
                continue;
            }
            for &(j, p) in &sl.ports {
                let proto = if PORTS[j].2 == "UDP" { Protocol::Udp } else { Protocol::Tcp };
                for e in &sl.eps {
                    let ip: IpAddr = if sl.v6 {
                        format!("fd00:180::{}", e.ip).parse().unwrap()
                    } else {
                        format!("10.180.0.{}", e.ip).parse().unwrap()
                    };
                    let ready = e.cond.0.unwrap_or(true);
                    hinted_svc[sl.svc] |= e.zone.is_some();
                    occ.entry((sl.svc, PORTS[j].0, proto, ip, p as u16)).or_default().push(Occ {
                        local: NODES[e.node] == NODE,
                        ready,
                        serving: e.cond.1.unwrap_or(true),
                        terminating: e.cond.2.unwrap_or(false),
                        hinted: e.zone.is_some(),
                    });
                }
            }
        }

        for s in &d.services {
            let i: usize = s.origin.name[1..].parse().unwrap();
            let g = &svcs[i];
            let ServiceKey::Addr { protocol, addr, .. } = s.def.key else { panic!("fwmark") };
            let af = AddrFamily::of(&addr);
            let local_policy = if s.kind == Kind::ClusterIp { g.itp_local } else { g.etp_local && g.ty > 0 };
            prop_assert_eq!(s.def.config.persistent.is_some(), g.affinity);
            for r in &s.def.dests {
                let occs = occ.get(&(i, s.origin.port_name.as_str(), protocol, r.addr, r.port));
                prop_assert!(occs.is_some(), "{} is no endpoint of {}", r.addr, s);
                let occs = occs.unwrap();
                prop_assert_eq!(AddrFamily::of(&r.addr), af);
                if local_policy {
                    prop_assert!(occs.iter().any(|o| o.local), "remote {} in Local {}", r.addr, s);
                }
                if r.weight == 0 {
                    prop_assert!(occs.iter().any(|o| o.terminating && o.serving), "w0 {} not draining in {}", r.addr, s);
                } else {
                    prop_assert!(occs.iter().any(|o| o.ready || (o.serving && o.terminating)), "{} unusable in {}", r.addr, s);
                }
                let want_forward = if s.kind == Kind::ClusterIp || local_policy {
                    ForwardMethod::Masq
                } else {
                    ForwardMethod::FullNat
                };
                prop_assert_eq!(r.forward, want_forward);
            }
            if s.kind.is_external() && !local_policy {
                prop_assert_eq!(s.def.laddrs.len(), 1);
                prop_assert_eq!(s.def.laddrs[0].af(), af);
            } else {
                prop_assert!(s.def.laddrs.is_empty());
            }
            // KEP-1669 fallback: no ready endpoint in scope, but a serving
            // terminating one: traffic goes to those.
            {
                let mine = occ.iter().filter(|((si, pn, pr, ip, _), _)| {
                    *si == i && *pn == s.origin.port_name && *pr == protocol && AddrFamily::of(ip) == af
                });
                let scoped = |o: &Occ| !local_policy || o.local;
                let any_ready = mine.clone().any(|(_, os)| os.iter().any(|o| scoped(o) && o.ready));
                let all_term = mine.clone().any(|(_, os)| os.iter().all(|o| scoped(o) && o.serving && o.terminating));
                if !any_ready && all_term {
                    prop_assert!(s.def.dests.iter().any(|r| r.weight == 1), "no fallback in {}", s);
                }
            }
            // Without hints, every endpoint ready in all its occurrences
            // and in scope is used at weight 1.
            if !hinted_svc[i] {
                for ((si, pn, pr, ip, port), occs) in &occ {
                    if *si != i || *pn != s.origin.port_name || *pr != protocol || AddrFamily::of(ip) != af {
                        continue;
                    }
                    let in_scope = !local_policy || occs.iter().all(|o| o.local);
                    if in_scope && occs.iter().all(|o| o.ready && !o.hinted) {
                        prop_assert!(
                            s.def.dests.iter().any(|r| r.addr == *ip && r.port == *port && r.weight == 1),
                            "ready {}:{} missing from {}", ip, port, s
                        );
                    }
                }
            }
        }
        // Every port of every proxied Service has its ClusterIP entry per family.
        for (i, g) in svcs.iter().enumerate() {
            for (j, on) in g.ports.iter().enumerate() {
                if !on {
                    continue;
                }
                let fams = if g.dual && dual_node { 2 } else { 1 };
                let n = d.services.iter().filter(|s| s.origin.name == format!("s{i}")
                    && s.origin.port_name == PORTS[j].0 && s.kind == Kind::ClusterIp).count();
                prop_assert_eq!(n, fams, "ClusterIP entries of s{}:{}", i, PORTS[j].0);
            }
        }
    }
}
