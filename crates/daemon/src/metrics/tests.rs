//! Unit tests of the metrics: every family rendered from a director, the
//! data planes, health checks and VRRP, in the Prometheus text format.

use super::*;
use rvs_core::ipvs::IpvsConfig;
use rvs_core::model::{AddrFamily, DestConfig, Protocol, ServiceConfig};

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// The address service `protocol` `addr`:`port`.
fn svc(protocol: Protocol, addr: &str, port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol,
        addr: addr.parse().expect("addr"),
        port,
    }
}

/// `text` has each of `wanted` as a line.
fn has_lines(text: &str, wanted: &[&str]) {
    let text = lines(text);
    for want in wanted {
        assert!(
            text.contains(want),
            "missing `{want}` in\n{}",
            text.join("\n")
        );
    }
}

/// `text` has each `(name, value)` of `counts` as a counter family whose
/// sample of the TCP service 10.0.0.1:80 is `value`.
fn has_counters(text: &str, counts: &[(&str, u64)]) {
    let labels = r#"{local_address="10.0.0.1",local_port="80",proto="TCP",local_mark=""}"#;
    for (name, v) in counts {
        let want = format!("{name}{labels} {v}");
        assert!(lines(text).contains(&want.as_str()), "{want} in {text}");
        assert!(text.contains(&format!("# TYPE {name} counter")), "{text}");
    }
}

#[test]
fn xdp_flood_counters_per_service_with_shed_derived() {
    let key = svc(Protocol::Tcp, "10.0.0.1", 80);
    let c = rvs_xdp::maps::SvcFlood {
        embryonic: 1000,
        promoted: 30,
        guarded: 7,
        unknown: 2,
        adopted: 5,
        refused: 4,
    };
    let text = encode(xdp_flood(&[(key, c)]));
    has_counters(
        &text,
        &[
            ("rvs_xdp_embryonic_flows_total", 1000),
            ("rvs_xdp_promoted_flows_total", 30),
            ("rvs_xdp_shed_flows_total", 970),
            ("rvs_xdp_guarded_flows_total", 7),
            ("rvs_xdp_unknown_segments_total", 2),
            ("rvs_xdp_adopted_flows_total", 5),
            ("rvs_xdp_refused_source_total", 4),
        ],
    );
}

#[test]
fn xdp_fnat_counters_per_service() {
    let key = svc(Protocol::Tcp, "10.0.0.1", 80);
    let c = rvs_xdp::maps::FnatStats {
        exhausted: 3,
        allocated: 70,
        toa_inserted: 5,
        toa_noroom: 1,
        toa_mtu: 2,
        toa_error: 4,
        mss_clamped: 6,
        probes: 90,
        icmp_to_rs: 7,
        icmp_to_client: 8,
        icmp_mtu_lowered: 9,
    };
    let text = encode(xdp_fnat(&[(key, c)]));
    has_counters(
        &text,
        &[
            ("rvs_xdp_fnat_exhausted_total", 3),
            ("rvs_xdp_fnat_allocated_total", 70),
            ("rvs_xdp_fnat_probes_total", 90),
            ("rvs_xdp_fnat_toa_inserted_total", 5),
            ("rvs_xdp_fnat_toa_noroom_total", 1),
            ("rvs_xdp_fnat_toa_mtu_total", 2),
            ("rvs_xdp_fnat_toa_errors_total", 4),
            ("rvs_xdp_fnat_mss_clamped_total", 6),
            ("rvs_xdp_fnat_icmp_to_rs_total", 7),
            ("rvs_xdp_fnat_icmp_to_client_total", 8),
            ("rvs_xdp_fnat_icmp_mtu_lowered_total", 9),
        ],
    );
}

/// The crate's text is the format the hand-written exposition had:
/// counters keep their `_total` name in HELP, TYPE and samples, label
/// values are escaped, no labels means no braces, histograms have
/// cumulative buckets with `+Inf`, `_sum`, `_count`, and there is no
/// OpenMetrics `# EOF`.
#[test]
fn exposition_text_is_prometheus_0_0_4() {
    let mut c = Family::new("x_requests_total", Kind::Counter, "Requests.");
    c.push(vec![("name", "a\"b\\c\nd".into())], Value::Int(3));
    let g = Family::scalar("x_up", Kind::Gauge, "Up.", 1);
    let mut h = Family::new("x_seconds", Kind::Histogram, "Latency.");
    let mut cumulative = vec![0; LATENCY_BUCKETS.len()];
    cumulative[2..].fill(1);
    cumulative[7..].fill(3);
    h.push(
        vec![("vs", "v".into())],
        Value::Histogram {
            cumulative,
            count: 4,
            sum: 0.75,
        },
    );
    let text = encode(vec![c, g, h]);
    let want = [
        "# HELP x_requests_total Requests.",
        "# TYPE x_requests_total counter",
        r#"x_requests_total{name="a\"b\\c\nd"} 3"#,
        "# HELP x_up Up.",
        "# TYPE x_up gauge",
        "x_up 1",
        "# HELP x_seconds Latency.",
        "# TYPE x_seconds histogram",
        r#"x_seconds_bucket{vs="v",le="0.0005"} 0"#,
        r#"x_seconds_bucket{vs="v",le="0.001"} 0"#,
        r#"x_seconds_bucket{vs="v",le="0.0025"} 1"#,
        r#"x_seconds_bucket{vs="v",le="0.005"} 1"#,
        r#"x_seconds_bucket{vs="v",le="0.01"} 1"#,
        r#"x_seconds_bucket{vs="v",le="0.05"} 1"#,
        r#"x_seconds_bucket{vs="v",le="0.1"} 1"#,
        r#"x_seconds_bucket{vs="v",le="0.5"} 3"#,
        r#"x_seconds_bucket{vs="v",le="1"} 3"#,
        r#"x_seconds_bucket{vs="v",le="5"} 3"#,
        r#"x_seconds_bucket{vs="v",le="+Inf"} 4"#,
        r#"x_seconds_sum{vs="v"} 0.75"#,
        r#"x_seconds_count{vs="v"} 4"#,
    ];
    assert_eq!(lines(&text), want, "{text}");
}

/// The one difference the crate makes: a float sum is written by `dtoa`,
/// so an empty histogram's sum reads `0.0` (the hand-written text had
/// `0`); both parse as the same value.
#[test]
fn an_empty_histogram_sums_to_zero_point_zero() {
    let mut h = Family::new("x_seconds", Kind::Histogram, "Latency.");
    h.push(
        Vec::new(),
        Value::Histogram {
            cumulative: vec![0; LATENCY_BUCKETS.len()],
            count: 0,
            sum: 0.0,
        },
    );
    let text = encode(vec![h]);
    assert!(
        text.contains("\nx_seconds_bucket{le=\"+Inf\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("\nx_seconds_sum 0.0\nx_seconds_count 0\n"),
        "{text}"
    );
}

/// A counter without `_total` would be renamed by the encoder: refused.
#[test]
fn a_counter_without_total_is_not_renamed() {
    let text = encode(vec![Family::scalar("x_requests", Kind::Counter, "R.", 1)]);
    assert!(!text.contains("x_requests_total"), "{text}");
}

/// node_exporter's names, types and labels for a director with an
/// address service and a fwmark service.
#[test]
fn director_families_keep_node_exporter_names_and_types() {
    let mut ipvs = Ipvs::new(IpvsConfig::default());
    let key = svc(Protocol::Tcp, "10.0.0.1", 80);
    ipvs.add_service(
        key,
        ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Wrr),
    )
    .unwrap();
    ipvs.add_dest(
        &key,
        DestConfig::new("192.168.1.5".parse().unwrap(), 8080).weight(3),
    )
    .unwrap();
    let fw = ServiceKey::Fwmark {
        mark: 7,
        af: AddrFamily::Inet,
    };
    ipvs.add_service(
        fw,
        ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Rr),
    )
    .unwrap();
    ipvs.add_dest(&fw, DestConfig::new("192.168.1.6".parse().unwrap(), 0))
        .unwrap();
    let text = encode(director(&ipvs, 2, 1));
    has_lines(
        &text,
        &[
            "# HELP node_ipvs_connections_total The total number of connections made.",
            "# TYPE node_ipvs_connections_total counter",
            "node_ipvs_connections_total 0",
            "# TYPE node_ipvs_incoming_packets_total counter",
            "# TYPE node_ipvs_outgoing_packets_total counter",
            "# TYPE node_ipvs_incoming_bytes_total counter",
            "# TYPE node_ipvs_outgoing_bytes_total counter",
            "# TYPE node_ipvs_backend_connections_active gauge",
            "# TYPE node_ipvs_backend_connections_inactive gauge",
            "# TYPE node_ipvs_backend_weight gauge",
            r#"node_ipvs_backend_weight{local_address="10.0.0.1",local_port="80",remote_address="192.168.1.5",remote_port="8080",proto="TCP",local_mark=""} 3"#,
            r#"node_ipvs_backend_weight{local_address="",local_port="0",remote_address="192.168.1.6",remote_port="0",proto="FWM",local_mark="7"} 1"#,
            r#"rvs_service_connections_total{local_address="",local_port="0",proto="FWM",local_mark="7"} 0"#,
            "# TYPE rvs_backend_persistent_connections gauge",
            "# TYPE rvs_conn_table_evictions_total counter",
            "rvs_services 2",
            "rvs_config_reloads_total 2",
            "rvs_config_reload_failures_total 1",
        ],
    );
    let text = lines(&text);
    assert!(
        !text
            .iter()
            .any(|l| l.contains("_total_total") || l.contains("EOF"))
    );
}

/// A QUIC-LB service has one sample per route, with the service
/// labels; a service without QUIC-LB has none.
#[test]
fn quic_lb_counters_per_service_and_route() {
    let mut ipvs = Ipvs::new(IpvsConfig::default());
    let key = svc(Protocol::Udp, "10.0.0.1", 443);
    let mut cfg = ServiceConfig::new(AddrFamily::Inet);
    cfg.quic_lb = vec![rvs_core::model::QuicLbConfig {
        rotation: 0,
        server_id_len: 3,
        nonce_len: 6,
        key: None,
    }];
    ipvs.add_service(key, cfg).unwrap();
    let plain = svc(Protocol::Udp, "10.0.0.2", 443);
    ipvs.add_service(plain, ServiceConfig::new(AddrFamily::Inet))
        .unwrap();
    assert!(ipvs.add_quic_lb_counters(
        &key,
        &rvs_core::stats::QuicLbCounters {
            by_cid: 5,
            by_fallback: 2,
            undecodable: 1,
        },
    ));
    let text = encode(director(&ipvs, 0, 0));
    has_lines(
        &text,
        &[
            "# TYPE rvs_service_quic_lb_packets_total counter",
            r#"rvs_service_quic_lb_packets_total{local_address="10.0.0.1",local_port="443",proto="UDP",local_mark="",route="cid"} 5"#,
            r#"rvs_service_quic_lb_packets_total{local_address="10.0.0.1",local_port="443",proto="UDP",local_mark="",route="fallback"} 2"#,
            r#"rvs_service_quic_lb_packets_total{local_address="10.0.0.1",local_port="443",proto="UDP",local_mark="",route="undecodable"} 1"#,
        ],
    );
    let text = lines(&text);
    assert!(
        !text
            .iter()
            .any(|l| l.starts_with("rvs_service_quic_lb") && l.contains("10.0.0.2"))
    );
}

/// VRRP's gauges per instance (names escaped), none without instances.
#[test]
fn announce_families_only_with_announce_table() {
    let off = crate::announce::Announce::new(None, false);
    assert!(announce(&off).is_empty());
    let settings = crate::announce::Settings {
        table: 100,
        proto: crate::announce::PROTO,
        drained_file: "/nonexistent/x.drained".into(),
    };
    let mut on = crate::announce::Announce::new(Some(settings), false);
    let text = encode(announce(&on));
    assert!(
        text.lines().any(|l| l == "rvs_director_drained 0"),
        "{text}"
    );
    assert!(text.contains("# TYPE rvs_vip_announced gauge"), "{text}");
    on.drain(std::time::Instant::now(), std::time::Duration::ZERO)
        .unwrap();
    let text = encode(announce(&on));
    assert!(
        text.lines().any(|l| l == "rvs_director_drained 1"),
        "{text}"
    );
}

#[test]
fn vrrp_state_and_priority_per_instance() {
    let status = crate::vrrp::Status::default();
    assert!(vrrp(&status).is_empty());
    status
        .lock()
        .unwrap()
        .insert("VI_1".into(), (State::Master, 150));
    status
        .lock()
        .unwrap()
        .insert("odd\"name".into(), (State::Fault, 0));
    let text = encode(vrrp(&status));
    assert_eq!(
        lines(&text),
        [
            "# HELP rvs_vrrp_state VRRP instance state (0 init, 1 backup, 2 master, 3 fault, 4 stopped).",
            "# TYPE rvs_vrrp_state gauge",
            r#"rvs_vrrp_state{iname="VI_1"} 2"#,
            r#"rvs_vrrp_state{iname="odd\"name"} 3"#,
            "# HELP rvs_vrrp_priority VRRP instance effective priority.",
            "# TYPE rvs_vrrp_priority gauge",
            r#"rvs_vrrp_priority{iname="VI_1"} 150"#,
            r#"rvs_vrrp_priority{iname="odd\"name"} 0"#,
        ],
        "{text}"
    );
}

/// The health checker's families exist (with their types) before any
/// checker runs, as they did.
#[test]
fn health_families_before_any_check() {
    let text = encode(health(&rvs_check::Health::new(1)));
    has_lines(
        &text,
        &[
            "# TYPE rvs_realserver_up gauge",
            "# TYPE rvs_quorum_up gauge",
            "# TYPE rvs_check_latency_seconds histogram",
            "# TYPE rvs_check_lateness_seconds histogram",
            r#"rvs_check_lateness_seconds_bucket{le="+Inf"} 0"#,
            "rvs_check_lateness_seconds_count 0",
            "# HELP rvs_check_transitions_total Health checker state changes.",
            "# TYPE rvs_check_transitions_total counter",
        ],
    );
}

#[test]
fn services_skipped_per_plane_only_with_several_planes() {
    assert!(planes_skipped(&[]).is_empty());
    let text = encode(planes_skipped(&[("xdp", 0), ("sock", 2)]));
    assert!(
        text.contains("# TYPE rvs_dataplane_services_skipped gauge"),
        "{text}"
    );
    for want in [
        r#"rvs_dataplane_services_skipped{plane="xdp"} 0"#,
        r#"rvs_dataplane_services_skipped{plane="sock"} 2"#,
    ] {
        assert!(lines(&text).contains(&want), "{want} in {text}");
    }
}

#[test]
fn refused_commands_per_plane_and_map_only_once_there_are_some() {
    assert!(refused(&[("xdp", vec![]), ("sock", vec![])]).is_empty());
    let text = encode(refused(&[
        ("xdp", vec![("svc_info", 5904), ("slots", 1)]),
        ("sock", vec![("services", 3)]),
    ]));
    assert!(
        text.contains("# TYPE rvs_dataplane_refused_commands_total counter"),
        "{text}"
    );
    for want in [
        r#"rvs_dataplane_refused_commands_total{plane="xdp",map="svc_info"} 5904"#,
        r#"rvs_dataplane_refused_commands_total{plane="xdp",map="slots"} 1"#,
        r#"rvs_dataplane_refused_commands_total{plane="sock",map="services"} 3"#,
    ] {
        assert!(lines(&text).contains(&want), "{want} in {text}");
    }
}

#[test]
fn sync_families_follow_the_running_daemons_and_their_traffic() {
    use crate::sync::{RunningSnap, SyncStats};
    use std::sync::atomic::Ordering::Relaxed;
    // No daemon ran: nothing.
    assert!(sync_running(&[]).is_empty());
    let stats = SyncStats::default();
    assert!(sync_traffic(&stats, false).is_empty());
    // A master and a backup that heard its peers 2.5 s ago.
    let running = [
        RunningSnap {
            master: true,
            heard_ago_ms: None,
        },
        RunningSnap {
            master: false,
            heard_ago_ms: Some(2500),
        },
    ];
    stats.master.sent.store(7, Relaxed);
    stats.master.sent_bytes.store(700, Relaxed);
    stats.backup.received.store(3, Relaxed);
    let mut fams = sync_running(&running);
    fams.extend(sync_traffic(&stats, true));
    let text = encode(fams);
    for want in [
        r#"rvs_sync_daemon_running{role="master"} 1"#,
        r#"rvs_sync_daemon_running{role="backup"} 1"#,
        "rvs_sync_backup_heard_age_seconds 2",
        r#"rvs_sync_sent_messages_total{role="master"} 7"#,
        r#"rvs_sync_sent_bytes_total{role="master"} 700"#,
        r#"rvs_sync_sent_messages_total{role="backup"} 0"#,
        r#"rvs_sync_received_messages_total{role="backup"} 3"#,
        r#"rvs_sync_send_errors_total{role="master"} 0"#,
        "# TYPE rvs_sync_received_bytes_total counter",
    ] {
        assert!(lines(&text).contains(&want), "{want} in {text}");
    }
    // A backup that has not heard a peer: no age; the counters stay once
    // the daemons stopped.
    let text = encode(sync_running(
        &running[1..]
            .iter()
            .map(|r| RunningSnap {
                heard_ago_ms: None,
                ..*r
            })
            .collect::<Vec<_>>(),
    ));
    assert!(
        !text.contains("rvs_sync_backup_heard_age_seconds"),
        "{text}"
    );
    assert_eq!(sync_traffic(&stats, false).len(), 5);
}
