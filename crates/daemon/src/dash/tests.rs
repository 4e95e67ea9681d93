use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use rvs_core::model::{Protocol, ServiceKey};
use rvs_xdp::maps::SvcFlood;

use super::*;
use crate::handle::{Families, Live};

fn snapshot(live: Live) -> Snapshot {
    Snapshot {
        families: Arc::new(Families::default()),
        announce: Arc::new(serde_json::Value::Null),
        table: Arc::new(rvs_ipvsadm::snapshot::Snapshot {
            services: vec![rvs_ipvsadm::snapshot::ServiceSnap::from_config(
                &ServiceKey::Addr {
                    protocol: Protocol::Tcp,
                    addr: [10, 0, 0, 1].into(),
                    port: 80,
                },
                &rvs_core::model::ServiceConfig::new(rvs_core::model::AddrFamily::Inet),
            )],
            ..Default::default()
        }),
        checks: Arc::from(r#"[{"name":"TCP 10.0.0.1:80"}]"#),
        announced: 0,
        live,
        sync: Arc::from(r#"{"backup":false}"#),
        generation: 7,
    }
}

#[test]
fn an_event_carries_the_state_checks_vrrp_plane_and_sync() {
    let proxy = Arc::new(rvs_proxy::ProxyStats::default());
    proxy.refused_no_dest.store(3, Relaxed);
    proxy.accepted.store(11, Relaxed);
    let live = Live {
        proxy: Some(proxy),
        ..Live::default()
    };
    if let Ok(mut st) = live.vrrp.lock() {
        st.insert("VI_2".into(), (rvs_core::vrrp::State::Backup, 90));
        st.insert("VI_1".into(), (rvs_core::vrrp::State::Master, 150));
    }
    let text = payload(&snapshot(live));
    let v: serde_json::Value = serde_json::from_str(&text).expect("an event is JSON");
    assert_eq!(v["generation"], 7);
    assert_eq!(v["state"]["services"][0]["scheduler"], "wlc");
    assert_eq!(v["checks"][0]["name"], "TCP 10.0.0.1:80");
    assert_eq!(v["sync"]["backup"], false);
    assert_eq!(
        v["vrrp"],
        serde_json::json!([
            {"instance": "VI_1", "state": "MASTER", "priority": 150},
            {"instance": "VI_2", "state": "BACKUP", "priority": 90},
        ])
    );
    assert_eq!(v["plane"]["rvs_proxy_refused_no_dest_total"], 3);
    assert_eq!(v["plane"]["rvs_proxy_accepted_total"], 11);
    assert_eq!(v["plane"]["rvs_proxy_active_tcp"], 0);
}

#[test]
fn without_a_data_plane_of_its_own_the_plane_counters_are_empty() {
    let v: serde_json::Value =
        serde_json::from_str(&payload(&snapshot(Live::default()))).expect("JSON");
    assert_eq!(v["plane"], serde_json::json!({}));
    assert_eq!(v["vrrp"], serde_json::json!([]));
}

#[test]
fn plane_counters_are_summed_over_services() {
    let key = |port| ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: "10.0.0.1".parse().expect("addr"),
        port,
    };
    let flood = |embryonic, promoted| SvcFlood {
        embryonic,
        promoted,
        ..SvcFlood::default()
    };
    let v = plane(&crate::metrics::xdp_flood(&[
        (key(80), flood(10, 4)),
        (key(443), flood(5, 5)),
    ]));
    assert_eq!(v["rvs_xdp_embryonic_flows_total"], 15);
    assert_eq!(v["rvs_xdp_promoted_flows_total"], 9);
    assert_eq!(v["rvs_xdp_shed_flows_total"], 6);
}
