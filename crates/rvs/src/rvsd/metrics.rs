//! Prometheus text exposition of the director's state.
//!
//! Names follow node_exporter's IPVS collector where it has one, so existing
//! dashboards keep working: `node_ipvs_connections_total`,
//! `node_ipvs_incoming_packets_total`, `node_ipvs_outgoing_packets_total`,
//! `node_ipvs_incoming_bytes_total`, `node_ipvs_outgoing_bytes_total`
//! (director-wide) and `node_ipvs_backend_connections_active`,
//! `node_ipvs_backend_connections_inactive`, `node_ipvs_backend_weight` with
//! the labels `local_address local_port remote_address remote_port proto
//! local_mark`. Everything else is rvs's own and prefixed `rvs_`.

use std::fmt::Write as _;

use rvs_core::ipvs::Ipvs;
use rvs_core::model::ServiceKey;
use rvs_core::stats::Counters;

/// A counter family: name, help, and the field it reads.
type CounterField = (&'static str, &'static str, fn(&Counters) -> u64);

/// Escape a label value per the exposition format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `(local_address, local_port, proto, local_mark)` of a service, as
/// node_exporter labels them (fwmark services have an empty address).
fn service_labels(key: &ServiceKey) -> (String, u16, &'static str, String) {
    match key {
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => (addr.to_string(), *port, protocol.name(), String::new()),
        ServiceKey::Fwmark { mark, .. } => (String::new(), 0, "FWM", mark.to_string()),
    }
}

/// Render every metric. `extra` lines (data-plane specific, already in
/// exposition format) are appended.
pub fn render(ipvs: &Ipvs, reloads: u64, reload_failures: u64) -> String {
    let mut out = String::with_capacity(4096);
    let t = ipvs.total_stats();
    for (name, help, v) in [
        (
            "node_ipvs_connections_total",
            "The total number of connections made.",
            t.conns,
        ),
        (
            "node_ipvs_incoming_packets_total",
            "The total number of incoming packets.",
            t.inpkts,
        ),
        (
            "node_ipvs_outgoing_packets_total",
            "The total number of outgoing packets.",
            t.outpkts,
        ),
        (
            "node_ipvs_incoming_bytes_total",
            "The total amount of incoming data.",
            t.inbytes,
        ),
        (
            "node_ipvs_outgoing_bytes_total",
            "The total amount of outgoing data.",
            t.outbytes,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }

    let backend = [
        (
            "node_ipvs_backend_connections_active",
            "The current active connections by local and remote address.",
        ),
        (
            "node_ipvs_backend_connections_inactive",
            "The current inactive connections by local and remote address.",
        ),
        (
            "node_ipvs_backend_weight",
            "The current backend weight by local and remote address.",
        ),
    ];
    for (i, (name, help)) in backend.iter().enumerate() {
        family(&mut out, name, "gauge", help);
        for svc in ipvs.services() {
            let (la, lp, proto, mark) = service_labels(svc.key());
            for d in svc.dests() {
                let v = match i {
                    0 => d.active,
                    1 => d.inactive,
                    _ => d.weight(),
                };
                let _ = writeln!(
                    out,
                    "{name}{{local_address=\"{}\",local_port=\"{lp}\",remote_address=\"{}\",remote_port=\"{}\",proto=\"{proto}\",local_mark=\"{}\"}} {v}",
                    esc(&la),
                    d.config.addr,
                    d.config.port,
                    esc(&mark)
                );
            }
        }
    }

    // rvs-only: per-service and per-real-server traffic and rates.
    let svc_counters: [CounterField; 5] = [
        (
            "rvs_service_connections_total",
            "Connections scheduled by the service.",
            |c| c.conns,
        ),
        (
            "rvs_service_incoming_packets_total",
            "Packets from clients to the service.",
            |c| c.inpkts,
        ),
        (
            "rvs_service_outgoing_packets_total",
            "Packets from real servers to clients.",
            |c| c.outpkts,
        ),
        (
            "rvs_service_incoming_bytes_total",
            "Bytes from clients to the service.",
            |c| c.inbytes,
        ),
        (
            "rvs_service_outgoing_bytes_total",
            "Bytes from real servers to clients.",
            |c| c.outbytes,
        ),
    ];
    for (name, help, get) in svc_counters {
        family(&mut out, name, "counter", help);
        for svc in ipvs.services() {
            let (la, lp, proto, mark) = service_labels(svc.key());
            let _ = writeln!(
                out,
                "{name}{{local_address=\"{}\",local_port=\"{lp}\",proto=\"{proto}\",local_mark=\"{}\"}} {}",
                esc(&la),
                esc(&mark),
                get(svc.stats())
            );
        }
    }
    let backend_counters: [CounterField; 3] = [
        (
            "rvs_backend_connections_total",
            "Connections scheduled to the real server.",
            |c| c.conns,
        ),
        (
            "rvs_backend_incoming_bytes_total",
            "Bytes forwarded to the real server.",
            |c| c.inbytes,
        ),
        (
            "rvs_backend_outgoing_bytes_total",
            "Bytes from the real server to clients.",
            |c| c.outbytes,
        ),
    ];
    for (name, help, get) in backend_counters {
        family(&mut out, name, "counter", help);
        for svc in ipvs.services() {
            let (la, lp, proto, mark) = service_labels(svc.key());
            for d in svc.dests() {
                let _ = writeln!(
                    out,
                    "{name}{{local_address=\"{}\",local_port=\"{lp}\",remote_address=\"{}\",remote_port=\"{}\",proto=\"{proto}\",local_mark=\"{}\"}} {}",
                    esc(&la),
                    d.config.addr,
                    d.config.port,
                    esc(&mark),
                    get(&d.stats)
                );
            }
        }
    }
    family(
        &mut out,
        "rvs_backend_persistent_connections",
        "gauge",
        "Persistence templates pointing at the real server.",
    );
    for svc in ipvs.services() {
        let (la, lp, proto, mark) = service_labels(svc.key());
        for d in svc.dests() {
            let _ = writeln!(
                out,
                "rvs_backend_persistent_connections{{local_address=\"{}\",local_port=\"{lp}\",remote_address=\"{}\",remote_port=\"{}\",proto=\"{proto}\",local_mark=\"{}\"}} {}",
                esc(&la),
                d.config.addr,
                d.config.port,
                esc(&mark),
                d.persist
            );
        }
    }
    family(
        &mut out,
        "rvs_services",
        "gauge",
        "Virtual services configured.",
    );
    let _ = writeln!(out, "rvs_services {}", ipvs.services().count());
    family(
        &mut out,
        "rvs_conn_table_entries",
        "gauge",
        "Connection table entries (templates included).",
    );
    let _ = writeln!(out, "rvs_conn_table_entries {}", ipvs.conns().len());
    family(
        &mut out,
        "rvs_conn_table_capacity",
        "gauge",
        "Connection table capacity bound.",
    );
    let _ = writeln!(out, "rvs_conn_table_capacity {}", ipvs.conns().capacity());
    family(
        &mut out,
        "rvs_conn_table_evictions_total",
        "counter",
        "Entries evicted because the table was full.",
    );
    let _ = writeln!(out, "rvs_conn_table_evictions_total {}", ipvs.evictions());
    family(
        &mut out,
        "rvs_config_reloads_total",
        "counter",
        "Configuration reloads applied.",
    );
    let _ = writeln!(out, "rvs_config_reloads_total {reloads}");
    family(
        &mut out,
        "rvs_config_reload_failures_total",
        "counter",
        "Configuration reloads rejected (state unchanged).",
    );
    let _ = writeln!(out, "rvs_config_reload_failures_total {reload_failures}");
    out
}

/// The proxy data plane's own counters.
pub fn render_proxy(out: &mut String, p: &rvs_proxy::ProxyStats) {
    use std::sync::atomic::Ordering::Relaxed;
    let counters = [
        (
            "rvs_proxy_accepted_total",
            "TCP connections accepted.",
            p.accepted.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_max_conns_total",
            "Connections refused: the service's max_conns was reached.",
            p.refused_max_conns.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_fd_budget_total",
            "Connections refused: the file-descriptor budget was spent.",
            p.refused_fd_budget.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_no_dest_total",
            "Connections refused: no real server available.",
            p.refused_no_dest.load(Relaxed),
        ),
        (
            "rvs_proxy_accept_errors_total",
            "accept(2) errors (EMFILE, ENFILE, ...); the accept loop continues.",
            p.accept_errors.load(Relaxed),
        ),
        (
            "rvs_proxy_connect_failures_total",
            "Connections to real servers that failed or timed out.",
            p.connect_failures.load(Relaxed),
        ),
        (
            "rvs_proxy_retries_total",
            "Connections retried on another real server.",
            p.retries.load(Relaxed),
        ),
        (
            "rvs_proxy_proxy_header_rejected_total",
            "Connections from trusted upstreams without a valid PROXY header.",
            p.proxy_header_rejected.load(Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        family(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
    let gauges = [
        (
            "rvs_proxy_active_tcp",
            "TCP connections being relayed.",
            p.active_tcp.load(Relaxed),
        ),
        (
            "rvs_proxy_active_udp_flows",
            "UDP flows being relayed.",
            p.active_udp_flows.load(Relaxed),
        ),
        (
            "rvs_proxy_fds_in_use",
            "File descriptors held by relayed connections.",
            p.fds_in_use.load(Relaxed) as u64,
        ),
    ];
    for (name, help, v) in gauges {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
}
