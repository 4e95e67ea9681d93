//! Builders and the table runner shared by the translation tests.
//!
//! Conventions (those of kube-proxy's nftables tests): node `test-node`,
//! node IP 192.168.0.2 (and 2001:db8::1 when dual-stack), zone `zone-a`;
//! cluster IPs 172.30.0.0/16; pod IPs 10.180.0.0/16; external IPs
//! 192.168.99.0/24; load-balancer IPs 1.2.3.4, 5.6.7.8.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rvs_k8s::{Desired, Options, Snapshot, translate};
use serde_json::{Value, json};

pub const NODE: &str = "test-node";

/// A Service `ns/name` with this spec (and optional status), created at
/// `2024-01-01T00:00:SSZ` where SS is `age_rank` (lower = older).
pub fn svc(ns_name: &str, spec: Value) -> Value {
    svc_at(ns_name, 0, spec)
}

pub fn svc_at(ns_name: &str, age_rank: u32, spec: Value) -> Value {
    let (ns, name) = ns_name.split_once('/').expect("ns/name");
    json!({
        "metadata": {
            "namespace": ns, "name": name, "uid": format!("uid-{name}"),
            "creationTimestamp": format!("2024-01-01T00:00:{age_rank:02}Z"),
        },
        "spec": spec,
    })
}

/// An EndpointSlice `name` of Service `ns/svc`.
pub fn slice(ns_svc: &str, name: &str, family: &str, ports: Value, endpoints: Value) -> Value {
    let (ns, svc) = ns_svc.split_once('/').expect("ns/svc");
    json!({
        "metadata": {
            "namespace": ns, "name": name,
            "labels": { "kubernetes.io/service-name": svc },
        },
        "addressType": family,
        "ports": ports,
        "endpoints": endpoints,
    })
}

/// A ready endpoint on `node` (empty = no nodeName).
pub fn ep(ip: &str, node: &str) -> Value {
    cond(ip, node, Some(true), Some(true), Some(false))
}

/// An endpoint with explicit conditions (`None` = field absent).
pub fn cond(
    ip: &str,
    node: &str,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
) -> Value {
    let mut c = serde_json::Map::new();
    if let Some(r) = ready {
        c.insert("ready".into(), json!(r));
    }
    if let Some(s) = serving {
        c.insert("serving".into(), json!(s));
    }
    if let Some(t) = terminating {
        c.insert("terminating".into(), json!(t));
    }
    let mut e = json!({ "addresses": [ip], "conditions": c });
    if !node.is_empty() {
        e["nodeName"] = json!(node);
    }
    e
}

/// A port of a slice.
pub fn sport(name: &str, port: i32, protocol: &str) -> Value {
    json!({ "name": name, "port": port, "protocol": protocol })
}

/// The node, IPv4 only.
pub fn node_v4() -> Value {
    node_with(&[("InternalIP", "192.168.0.2")])
}

/// The node, dual-stack.
pub fn node_dual() -> Value {
    node_with(&[("InternalIP", "192.168.0.2"), ("InternalIP", "2001:db8::1")])
}

pub fn node_with(addrs: &[(&str, &str)]) -> Value {
    let a: Vec<Value> = addrs
        .iter()
        .map(|(t, ip)| json!({ "type": t, "address": ip }))
        .collect();
    json!({
        "metadata": { "name": NODE, "labels": { "topology.kubernetes.io/zone": "zone-a" } },
        "status": { "addresses": a },
    })
}

/// One row of a table.
pub struct Case {
    pub name: &'static str,
    pub services: Vec<Value>,
    pub slices: Vec<Value>,
    /// `Value::Null` = no Node known.
    pub node: Value,
    pub opts: fn(&mut Options),
    /// The expected table as [`Desired::render`] prints it (lines compared
    /// with surrounding spaces trimmed).
    pub want: &'static str,
    /// Each refusal's text must contain the matching string, in order.
    pub refused: &'static [&'static str],
}

impl Case {
    pub fn new(name: &'static str) -> Self {
        Case {
            name,
            services: vec![],
            slices: vec![],
            node: node_v4(),
            opts: |_| {},
            want: "",
            refused: &[],
        }
    }
}

pub fn no_opts(_: &mut Options) {}

/// Translate owned JSON objects.
pub fn run_json(services: &[Value], slices: &[Value], node: &Value, opts: &Options) -> Desired {
    let services: Vec<Service> = services
        .iter()
        .map(|v| serde_json::from_value(v.clone()).expect("Service JSON"))
        .collect();
    let slices: Vec<EndpointSlice> = slices
        .iter()
        .map(|v| serde_json::from_value(v.clone()).expect("EndpointSlice JSON"))
        .collect();
    let node: Option<Node> = if node.is_null() {
        None
    } else {
        Some(serde_json::from_value(node.clone()).expect("Node JSON"))
    };
    let snap = Snapshot {
        services: services.iter().collect(),
        endpoint_slices: slices.iter().collect(),
        node: node.as_ref(),
    };
    translate(&snap, opts)
}

fn norm(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Run every row; report all failures at once.
pub fn run_table(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in cases {
        let mut opts = Options::new(NODE);
        (c.opts)(&mut opts);
        let d = run_json(&c.services, &c.slices, &c.node, &opts);
        let got = norm(&d.render());
        let want = norm(c.want);
        if got != want {
            failures.push(format!(
                "case `{}`:\n--- want\n{}\n--- got\n{}\n",
                c.name,
                want.join("\n"),
                got.join("\n")
            ));
        }
        let refused: Vec<String> = d.refused.iter().map(|r| r.to_string()).collect();
        let ok = refused.len() == c.refused.len()
            && refused.iter().zip(c.refused).all(|(g, w)| g.contains(w));
        if !ok {
            failures.push(format!(
                "case `{}`: refusals\n--- want (substrings)\n{:#?}\n--- got\n{:#?}\n",
                c.name, c.refused, refused
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
