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

use rvs_core::dest::Dest;
use rvs_core::ipvs::Ipvs;
use rvs_core::ipvs::Service;
use rvs_core::model::ServiceKey;

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

/// A family with a single unlabelled value.
fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: u64) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {v}");
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

/// A family with one line per service.
fn per_service(
    out: &mut String,
    ipvs: &Ipvs,
    (name, kind, help): (&str, &str, &str),
    get: impl Fn(&Service) -> u64,
) {
    family(out, name, kind, help);
    for svc in ipvs.services() {
        let (la, lp, proto, mark) = service_labels(svc.key());
        let _ = writeln!(
            out,
            "{name}{{local_address=\"{}\",local_port=\"{lp}\",proto=\"{proto}\",local_mark=\"{}\"}} {}",
            esc(&la),
            esc(&mark),
            get(svc)
        );
    }
}

/// A family with one line per real server, labelled as node_exporter does.
fn per_backend(
    out: &mut String,
    ipvs: &Ipvs,
    (name, kind, help): (&str, &str, &str),
    get: impl Fn(&Dest) -> u64,
) {
    family(out, name, kind, help);
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
                get(d)
            );
        }
    }
}

/// Render every metric of the director and the control plane.
pub fn render(ipvs: &Ipvs, reloads: u64, reload_failures: u64) -> String {
    let mut out = String::with_capacity(4096);
    let o = &mut out;
    let t = ipvs.total_stats();
    scalar(
        o,
        "node_ipvs_connections_total",
        "counter",
        "The total number of connections made.",
        t.conns,
    );
    scalar(
        o,
        "node_ipvs_incoming_packets_total",
        "counter",
        "The total number of incoming packets.",
        t.inpkts,
    );
    scalar(
        o,
        "node_ipvs_outgoing_packets_total",
        "counter",
        "The total number of outgoing packets.",
        t.outpkts,
    );
    scalar(
        o,
        "node_ipvs_incoming_bytes_total",
        "counter",
        "The total amount of incoming data.",
        t.inbytes,
    );
    scalar(
        o,
        "node_ipvs_outgoing_bytes_total",
        "counter",
        "The total amount of outgoing data.",
        t.outbytes,
    );
    let gauge = |name, help| (name, "gauge", help);
    let counter = |name, help| (name, "counter", help);
    per_backend(
        o,
        ipvs,
        gauge(
            "node_ipvs_backend_connections_active",
            "The current active connections by local and remote address.",
        ),
        |d| u64::from(d.active),
    );
    per_backend(
        o,
        ipvs,
        gauge(
            "node_ipvs_backend_connections_inactive",
            "The current inactive connections by local and remote address.",
        ),
        |d| u64::from(d.inactive),
    );
    per_backend(
        o,
        ipvs,
        gauge(
            "node_ipvs_backend_weight",
            "The current backend weight by local and remote address.",
        ),
        |d| u64::from(d.weight()),
    );

    // rvs-only: per-service and per-real-server traffic.
    per_service(
        o,
        ipvs,
        counter(
            "rvs_service_connections_total",
            "Connections scheduled by the service.",
        ),
        |s| s.stats().conns,
    );
    per_service(
        o,
        ipvs,
        counter(
            "rvs_service_incoming_packets_total",
            "Packets from clients to the service.",
        ),
        |s| s.stats().inpkts,
    );
    per_service(
        o,
        ipvs,
        counter(
            "rvs_service_outgoing_packets_total",
            "Packets from real servers to clients.",
        ),
        |s| s.stats().outpkts,
    );
    per_service(
        o,
        ipvs,
        counter(
            "rvs_service_incoming_bytes_total",
            "Bytes from clients to the service.",
        ),
        |s| s.stats().inbytes,
    );
    per_service(
        o,
        ipvs,
        counter(
            "rvs_service_outgoing_bytes_total",
            "Bytes from real servers to clients.",
        ),
        |s| s.stats().outbytes,
    );
    per_backend(
        o,
        ipvs,
        counter(
            "rvs_backend_connections_total",
            "Connections scheduled to the real server.",
        ),
        |d| d.stats.conns,
    );
    per_backend(
        o,
        ipvs,
        counter(
            "rvs_backend_incoming_bytes_total",
            "Bytes forwarded to the real server.",
        ),
        |d| d.stats.inbytes,
    );
    per_backend(
        o,
        ipvs,
        counter(
            "rvs_backend_outgoing_bytes_total",
            "Bytes from the real server to clients.",
        ),
        |d| d.stats.outbytes,
    );
    per_backend(
        o,
        ipvs,
        gauge(
            "rvs_backend_persistent_connections",
            "Persistence templates pointing at the real server.",
        ),
        |d| u64::from(d.persist),
    );

    scalar(
        o,
        "rvs_services",
        "gauge",
        "Virtual services configured.",
        ipvs.services().count() as u64,
    );
    scalar(
        o,
        "rvs_conn_table_entries",
        "gauge",
        "Connection table entries (templates included).",
        ipvs.conns().len() as u64,
    );
    scalar(
        o,
        "rvs_conn_table_capacity",
        "gauge",
        "Connection table capacity bound.",
        ipvs.conns().capacity() as u64,
    );
    scalar(
        o,
        "rvs_conn_table_evictions_total",
        "counter",
        "Entries evicted because the table was full.",
        ipvs.evictions(),
    );
    scalar(
        o,
        "rvs_config_reloads_total",
        "counter",
        "Configuration reloads applied.",
        reloads,
    );
    scalar(
        o,
        "rvs_config_reload_failures_total",
        "counter",
        "Configuration reloads rejected (state unchanged).",
        reload_failures,
    );
    out
}

/// The proxy data plane's own counters.
pub fn render_proxy(out: &mut String, p: &rvs_proxy::ProxyStats) {
    use std::sync::atomic::Ordering::Relaxed;
    for (name, help, v) in [
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
    ] {
        scalar(out, name, "counter", help, v);
    }
    for (name, help, v) in [
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
            "File descriptors held by relayed connections and pooled pipes.",
            p.fds_in_use.load(Relaxed) as u64,
        ),
    ] {
        scalar(out, name, "gauge", help, v);
    }
}
