//! Prometheus `/metrics`: the director, the control plane, the proxy data
//! plane, the health checkers and VRRP, encoded by `prometheus-client` in
//! the Prometheus text format 0.0.4.
//!
//! Names follow node_exporter's IPVS collector where it has one, so existing
//! dashboards keep working: `node_ipvs_connections_total`,
//! `node_ipvs_incoming_packets_total`, `node_ipvs_outgoing_packets_total`,
//! `node_ipvs_incoming_bytes_total`, `node_ipvs_outgoing_bytes_total`
//! (director-wide) and `node_ipvs_backend_connections_active`,
//! `node_ipvs_backend_connections_inactive`, `node_ipvs_backend_weight` with
//! the labels `local_address local_port remote_address remote_port proto
//! local_mark`. Everything else is rvs's own and prefixed `rvs_`.
//!
//! Each scrape reads the daemon's state once (under its lock) into plain
//! [`Family`] values — what is exposed, decided by plain functions — and a
//! per-scrape [`Collector`] hands them to the crate's encoder. The 0.0.4
//! encoder writes a counter registered as `x` as `x_total` (HELP, TYPE and
//! samples alike) and ends without OpenMetrics' `# EOF`; so counters are
//! named here with their full node_exporter name and registered without
//! the suffix, which gives back exactly that name.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use rvs_check::health::{Histogram, LATENCY_BUCKETS};
use rvs_core::dest::Dest;
use rvs_core::ipvs::{Ipvs, Service};
use rvs_core::model::ServiceKey;
use rvs_core::vrrp::State;

/// The `Content-Type` of what [`render`] returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A counter, a gauge or a histogram.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (its name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets over [`LATENCY_BUCKETS`], sum and count.
    Histogram,
}

/// One sample's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter's or a gauge's value.
    Int(u64),
    /// A histogram: cumulative counts per bound of [`LATENCY_BUCKETS`],
    /// the total count and the sum.
    Histogram {
        /// Observations at or below each bound.
        cumulative: Vec<u64>,
        /// All observations.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

/// A labelled sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Label names and values, in exposition order.
    pub labels: Vec<(&'static str, String)>,
    /// Its value.
    pub value: Value,
}

/// A metric family: name, help, type and samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The exposed name (counters with their `_total`).
    pub name: &'static str,
    /// The HELP text.
    pub help: &'static str,
    /// The TYPE.
    pub kind: Kind,
    /// The samples, in exposition order.
    pub samples: Vec<Sample>,
}

impl Family {
    fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    /// A family of one unlabelled sample.
    pub(crate) fn scalar(name: &'static str, kind: Kind, help: &'static str, v: u64) -> Self {
        let mut f = Family::new(name, kind, help);
        f.push(Vec::new(), Value::Int(v));
        f
    }

    fn push(&mut self, labels: Vec<(&'static str, String)>, value: Value) {
        self.samples.push(Sample { labels, value });
    }
}

/// What a scrape reads.
pub struct Sources<'a> {
    /// The director.
    pub ipvs: &'a Ipvs,
    /// Configuration reloads applied.
    pub reloads: u64,
    /// Configuration reloads rejected.
    pub reload_failures: u64,
    /// The proxy data plane's counters, when it runs.
    pub proxy: Option<&'a rvs_proxy::ProxyStats>,
    /// The XDP data plane's SYN-flood counters, when it runs.
    pub xdp_flood: Option<&'a rvs_xdp::plane::FloodStats>,
    /// The sock data plane's counters, when it runs.
    pub sock: Option<&'a rvs_sock::plane::SockStats>,
    /// The health checkers.
    pub health: &'a rvs_check::Health,
    /// VRRP instances: state and priority by name.
    pub vrrp: &'a crate::vrrp::Status,
    /// The VIP announcement (`--announce-table`).
    pub announce: &'a crate::announce::Announce,
    /// The Kubernetes source (`--kubernetes`), when it runs.
    pub kubernetes: Option<&'a crate::kubernetes::Stats>,
}

/// A service's labels as node_exporter writes them, in its order:
/// `local_address`, `local_port`, `proto`, `local_mark` (fwmark services
/// have an empty address and port 0). Every per-service family uses these.
fn service_labels(key: &ServiceKey) -> Vec<(&'static str, String)> {
    let (la, lp, proto, mark) = match key {
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => (addr.to_string(), *port, protocol.name(), String::new()),
        ServiceKey::Fwmark { mark, .. } => (String::new(), 0, "FWM", mark.to_string()),
    };
    vec![
        ("local_address", la),
        ("local_port", lp.to_string()),
        ("proto", proto.to_owned()),
        ("local_mark", mark),
    ]
}

/// A family with one sample per service.
fn per_service(
    ipvs: &Ipvs,
    (name, kind, help): (&'static str, Kind, &'static str),
    get: impl Fn(&Service) -> u64,
) -> Family {
    let mut f = Family::new(name, kind, help);
    for svc in ipvs.services() {
        f.push(service_labels(svc.key()), Value::Int(get(svc)));
    }
    f
}

/// A family with one sample per real server, labelled as node_exporter does.
fn per_backend(
    ipvs: &Ipvs,
    (name, kind, help): (&'static str, Kind, &'static str),
    get: impl Fn(&Dest) -> u64,
) -> Family {
    let mut f = Family::new(name, kind, help);
    for svc in ipvs.services() {
        let service = service_labels(svc.key());
        for d in svc.dests() {
            // node_exporter's order: the real server's address and port
            // after the service's address and port.
            let mut labels = service.clone();
            labels.splice(
                2..2,
                [
                    ("remote_address", d.config.addr.to_string()),
                    ("remote_port", d.config.port.to_string()),
                ],
            );
            f.push(labels, Value::Int(get(d)));
        }
    }
    f
}

/// `rvs_service_quic_lb_packets_total{<service labels>, route}`: how the
/// datagrams of each QUIC-LB service (one with `--quic-lb` configs; others
/// have no samples) were routed — `cid` by decoded server ID, `fallback` by
/// the DCID hash, `undecodable` not QUIC.
fn quic_lb(ipvs: &Ipvs) -> Family {
    let mut f = Family::new(
        "rvs_service_quic_lb_packets_total",
        Kind::Counter,
        "Datagrams of a QUIC-LB service by how they were routed: by connection ID, by fallback hash, or undecodable.",
    );
    for svc in ipvs.services().filter(|s| !s.config().quic_lb.is_empty()) {
        let q = svc.quic_lb_counters();
        for (route, v) in [
            ("cid", q.by_cid),
            ("fallback", q.by_fallback),
            ("undecodable", q.undecodable),
        ] {
            let mut labels = service_labels(svc.key());
            labels.push(("route", route.to_owned()));
            f.push(labels, Value::Int(v));
        }
    }
    f
}

fn gauge(name: &'static str, help: &'static str) -> (&'static str, Kind, &'static str) {
    (name, Kind::Gauge, help)
}

fn counter(name: &'static str, help: &'static str) -> (&'static str, Kind, &'static str) {
    (name, Kind::Counter, help)
}

/// The director's and the control plane's families.
pub fn director(ipvs: &Ipvs, reloads: u64, reload_failures: u64) -> Vec<Family> {
    use Kind::{Counter, Gauge};
    let t = ipvs.total_stats();
    vec![
        Family::scalar(
            "node_ipvs_connections_total",
            Counter,
            "The total number of connections made.",
            t.conns,
        ),
        Family::scalar(
            "node_ipvs_incoming_packets_total",
            Counter,
            "The total number of incoming packets.",
            t.inpkts,
        ),
        Family::scalar(
            "node_ipvs_outgoing_packets_total",
            Counter,
            "The total number of outgoing packets.",
            t.outpkts,
        ),
        Family::scalar(
            "node_ipvs_incoming_bytes_total",
            Counter,
            "The total amount of incoming data.",
            t.inbytes,
        ),
        Family::scalar(
            "node_ipvs_outgoing_bytes_total",
            Counter,
            "The total amount of outgoing data.",
            t.outbytes,
        ),
        per_backend(
            ipvs,
            gauge(
                "node_ipvs_backend_connections_active",
                "The current active connections by local and remote address.",
            ),
            |d| u64::from(d.active),
        ),
        per_backend(
            ipvs,
            gauge(
                "node_ipvs_backend_connections_inactive",
                "The current inactive connections by local and remote address.",
            ),
            |d| u64::from(d.inactive),
        ),
        per_backend(
            ipvs,
            gauge(
                "node_ipvs_backend_weight",
                "The current backend weight by local and remote address.",
            ),
            |d| u64::from(d.weight()),
        ),
        // rvs-only: per-service and per-real-server traffic.
        per_service(
            ipvs,
            counter(
                "rvs_service_connections_total",
                "Connections scheduled by the service.",
            ),
            |s| s.stats().conns,
        ),
        per_service(
            ipvs,
            counter(
                "rvs_service_incoming_packets_total",
                "Packets from clients to the service.",
            ),
            |s| s.stats().inpkts,
        ),
        per_service(
            ipvs,
            counter(
                "rvs_service_outgoing_packets_total",
                "Packets from real servers to clients.",
            ),
            |s| s.stats().outpkts,
        ),
        per_service(
            ipvs,
            counter(
                "rvs_service_incoming_bytes_total",
                "Bytes from clients to the service.",
            ),
            |s| s.stats().inbytes,
        ),
        per_service(
            ipvs,
            counter(
                "rvs_service_outgoing_bytes_total",
                "Bytes from real servers to clients.",
            ),
            |s| s.stats().outbytes,
        ),
        quic_lb(ipvs),
        per_backend(
            ipvs,
            counter(
                "rvs_backend_connections_total",
                "Connections scheduled to the real server.",
            ),
            |d| d.stats.conns,
        ),
        per_backend(
            ipvs,
            counter(
                "rvs_backend_incoming_bytes_total",
                "Bytes forwarded to the real server.",
            ),
            |d| d.stats.inbytes,
        ),
        per_backend(
            ipvs,
            counter(
                "rvs_backend_outgoing_bytes_total",
                "Bytes from the real server to clients.",
            ),
            |d| d.stats.outbytes,
        ),
        per_backend(
            ipvs,
            gauge(
                "rvs_backend_persistent_connections",
                "Persistence templates pointing at the real server.",
            ),
            |d| u64::from(d.persist),
        ),
        Family::scalar(
            "rvs_services",
            Gauge,
            "Virtual services configured.",
            ipvs.services().count() as u64,
        ),
        Family::scalar(
            "rvs_conn_table_entries",
            Gauge,
            "Connection table entries (templates included).",
            ipvs.conns().len() as u64,
        ),
        Family::scalar(
            "rvs_conn_table_capacity",
            Gauge,
            "Connection table capacity bound.",
            ipvs.conns().capacity() as u64,
        ),
        Family::scalar(
            "rvs_conn_table_evictions_total",
            Counter,
            "Entries evicted because the table was full.",
            ipvs.evictions(),
        ),
        Family::scalar(
            "rvs_config_reloads_total",
            Counter,
            "Configuration reloads applied.",
            reloads,
        ),
        Family::scalar(
            "rvs_config_reload_failures_total",
            Counter,
            "Configuration reloads rejected (state unchanged).",
            reload_failures,
        ),
    ]
}

/// The XDP data plane's FULLNAT counters, per service with a local address
/// pool: new flows dropped because no (local address, port) was free toward
/// their real server, and pairs handed out.
pub fn xdp_fnat(services: &[(ServiceKey, rvs_xdp::maps::FnatStats)]) -> Vec<Family> {
    type Get = fn(&rvs_xdp::maps::FnatStats) -> u64;
    let families: [(&'static str, &'static str, Get); 11] = [
        (
            "rvs_xdp_fnat_exhausted_total",
            "FULLNAT connections refused: every (local address, port) pair toward \
             their real server was held by a live flow (the pool is too small), or the \
             translation tables were full. Each connection once, however many SYNs it \
             sends while refused.",
            |c| c.exhausted,
        ),
        (
            "rvs_xdp_fnat_allocated_total",
            "(local address, port) pairs handed out to new FULLNAT flows.",
            |c| c.allocated,
        ),
        (
            "rvs_xdp_fnat_toa_inserted_total",
            "Client handshake segments of FULLNAT TCP flows that got the TOA option \
             (the client's address for the real server).",
            |c| c.toa_inserted,
        ),
        (
            "rvs_xdp_fnat_toa_noroom_total",
            "Client handshake segments sent on without the TOA: their TCP options left \
             no room for it (40 bytes).",
            |c| c.toa_noroom,
        ),
        (
            "rvs_xdp_fnat_toa_mtu_total",
            "Client handshake segments sent on without the TOA: it would have pushed \
             them past the MTU toward the real servers.",
            |c| c.toa_mtu,
        ),
        (
            "rvs_xdp_fnat_toa_errors_total",
            "Client handshake segments the TOA failed on otherwise (malformed header, \
             no headroom in the frame).",
            |c| c.toa_error,
        ),
        (
            "rvs_xdp_fnat_mss_clamped_total",
            "Real servers' SYN-ACKs whose MSS option the director lowered by the TOA's \
             length.",
            |c| c.mss_clamped,
        ),
        (
            "rvs_xdp_fnat_probes_total",
            "(local address, port) pairs the pool walk looked at for new FULLNAT flows, \
             taken or free (divided by the pairs handed out: the search's mean length).",
            |c| c.probes,
        ),
        (
            "rvs_xdp_fnat_icmp_to_rs_total",
            "ICMP errors from the client's side about FULLNAT flows, translated \
             (local address -> real server) and sent to the real server.",
            |c| c.icmp_to_rs,
        ),
        (
            "rvs_xdp_fnat_icmp_to_client_total",
            "ICMP errors from the real servers' side about FULLNAT flows, translated \
             (VIP -> client) and sent to the client.",
            |c| c.icmp_to_client,
        ),
        (
            "rvs_xdp_fnat_icmp_mtu_lowered_total",
            "Fragmentation-needed / packet-too-big errors sent to clients of FULLNAT \
             flows with their MTU lowered by the TOA's length.",
            |c| c.icmp_mtu_lowered,
        ),
    ];
    families
        .iter()
        .map(|&(name, help, get)| {
            let mut f = Family::new(name, Kind::Counter, help);
            for (key, c) in services {
                f.push(service_labels(key), Value::Int(get(c)));
            }
            f
        })
        .collect()
}

/// The XDP data plane's SYN-flood counters, per service (rvs_xdp_*): what
/// the embryonic tables took and shed, what the guard forwarded without an
/// entry, what passed for want of a flow, what was adopted mid-stream.
pub fn xdp_flood(services: &[(ServiceKey, rvs_xdp::maps::SvcFlood)]) -> Vec<Family> {
    type Get = fn(&rvs_xdp::maps::SvcFlood) -> u64;
    let families: [(&'static str, &'static str, Get); 6] = [
        (
            "rvs_xdp_embryonic_flows_total",
            "TCP flows that got an embryonic entry (a SYN was scheduled).",
            |c| c.embryonic,
        ),
        (
            "rvs_xdp_promoted_flows_total",
            "Embryonic flows whose handshake completed (moved to the flow table).",
            |c| c.promoted,
        ),
        (
            "rvs_xdp_shed_flows_total",
            "Embryonic flows that did not complete their handshake (evicted from the \
             embryonic table by newer ones, expired, reset, or still waiting).",
            |c| c.embryonic.saturating_sub(c.promoted),
        ),
        (
            "rvs_xdp_guarded_flows_total",
            "New flows of hash-scheduled DR/TUN services forwarded without an entry \
             (the SYN-flood guard, --max-new-flows).",
            |c| c.guarded,
        ),
        (
            "rvs_xdp_unknown_segments_total",
            "TCP segments without SYN of no known flow, passed to the kernel.",
            |c| c.unknown,
        ),
        (
            "rvs_xdp_adopted_flows_total",
            "TCP flows of hash-scheduled services adopted mid-stream: a segment without \
             SYN of no known flow got a flow entry on the real server the hash names \
             (a flow another director of the fleet had, moved here by ECMP).",
            |c| c.adopted,
        ),
    ];
    families
        .iter()
        .map(|&(name, help, get)| {
            let mut f = Family::new(name, Kind::Counter, help);
            for (key, c) in services {
                f.push(service_labels(key), Value::Int(get(c)));
            }
            f
        })
        .collect()
}

/// The sock data plane's counters (rvs_sock_*), as its worker last read
/// them (every second): per real server, the sockets the programs gave it
/// and those of them still open; the programs' per-CPU event counters
/// (TCP sockets and UDP sessions scheduled, UDP sends that kept their
/// real server, connect/sendmsg refused for want of a real server); the
/// open sockets by protocol. Connections through the XDP plane of an
/// `xdp,sock` daemon are not in these (they are in `rvs_*` director
/// families with the sock plane's).
pub fn sock(s: &rvs_sock::plane::SockStats) -> Vec<Family> {
    let mut per: Vec<_> = s.per_dest().into_iter().collect();
    per.sort_by(|a, b| {
        (service_labels(&a.0.0), a.0.1, a.0.2).cmp(&(service_labels(&b.0.0), b.0.1, b.0.2))
    });
    let labels = |(key, addr, port): &(ServiceKey, std::net::IpAddr, u16)| {
        let mut l = service_labels(key);
        l.splice(
            2..2,
            [
                ("remote_address", addr.to_string()),
                ("remote_port", port.to_string()),
            ],
        );
        l
    };
    let mut chosen = Family::new(
        "rvs_sock_backend_connections_total",
        Kind::Counter,
        "Sockets the programs gave this real server (TCP connect, UDP session) since it was added.",
    );
    let mut open = Family::new(
        "rvs_sock_backend_open_sockets",
        Kind::Gauge,
        "Sockets given this real server and not yet closed (what lc/wlc/sed/nq weigh).",
    );
    for (k, st) in &per {
        chosen.push(labels(k), Value::Int(st.total));
        open.push(labels(k), Value::Int(st.active));
    }
    let e = s.events();
    let (tcp, udp) = s.open_sockets();
    vec![
        chosen,
        open,
        Family::scalar(
            "rvs_sock_tcp_connections_total",
            Kind::Counter,
            "TCP connect() calls to a VIP given a real server.",
            e.tcp,
        ),
        Family::scalar(
            "rvs_sock_udp_sessions_total",
            Kind::Counter,
            "UDP sockets given a real server for a VIP (connect, or first sendmsg; again after theirs was deleted).",
            e.udp,
        ),
        Family::scalar(
            "rvs_sock_udp_kept_total",
            Kind::Counter,
            "UDP sendmsg() calls to a VIP that kept the real server the socket had.",
            e.udp_kept,
        ),
        Family::scalar(
            "rvs_sock_refused_no_dest_total",
            Kind::Counter,
            "connect()/sendmsg() calls to a VIP refused with EPERM: no schedulable real server.",
            e.no_dest,
        ),
        Family::scalar(
            "rvs_sock_open_tcp_sockets",
            Kind::Gauge,
            "Open TCP sockets the programs gave a real server.",
            tcp,
        ),
        Family::scalar(
            "rvs_sock_open_udp_sockets",
            Kind::Gauge,
            "Open UDP sockets the programs gave a real server.",
            udp,
        ),
    ]
}

/// The proxy data plane's own counters.
pub fn proxy(p: &rvs_proxy::ProxyStats) -> Vec<Family> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = Vec::new();
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
            "rvs_proxy_laddr_exhausted_total",
            "Connections (TCP) and sessions (UDP) to real servers refused: no local pool address had a port left toward the server.",
            p.laddr_exhausted.load(Relaxed),
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
        out.push(Family::scalar(name, Kind::Counter, help, v));
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
        out.push(Family::scalar(name, Kind::Gauge, help, v));
    }
    out
}

fn histogram(h: &Histogram) -> Value {
    Value::Histogram {
        cumulative: h.cumulative().to_vec(),
        count: h.count(),
        sum: h.sum(),
    }
}

fn checker_labels((vs, rs, checker): &(String, String, String)) -> Vec<(&'static str, String)> {
    vec![
        ("virtual_server", vs.clone()),
        ("real_server", rs.clone()),
        ("checker", checker.clone()),
    ]
}

/// The health checkers' families: `rvs_realserver_up`, `rvs_quorum_up`,
/// `rvs_check_latency_seconds`, `rvs_check_lateness_seconds`,
/// `rvs_check_transitions_total`.
pub fn health(h: &rvs_check::Health) -> Vec<Family> {
    let status = h.status();
    let mut up = Family::new(
        "rvs_realserver_up",
        Kind::Gauge,
        "1 when all the real server's health checkers are up.",
    );
    let mut quorum = Family::new(
        "rvs_quorum_up",
        Kind::Gauge,
        "1 when the virtual server holds its quorum.",
    );
    for vs in &status {
        for rs in &vs.reals {
            up.push(
                vec![
                    ("virtual_server", vs.name.clone()),
                    ("real_server", rs.name.clone()),
                ],
                Value::Int(u64::from(rs.alive)),
            );
        }
        quorum.push(
            vec![("virtual_server", vs.name.clone())],
            Value::Int(u64::from(vs.quorum_up)),
        );
    }
    let mut latency = Family::new(
        "rvs_check_latency_seconds",
        Kind::Histogram,
        "Duration of health-check probes.",
    );
    for (l, hist) in h.latency() {
        latency.push(checker_labels(l), histogram(hist));
    }
    let mut lateness = Family::new(
        "rvs_check_lateness_seconds",
        Kind::Histogram,
        "How late probes start compared to their schedule.",
    );
    lateness.push(Vec::new(), histogram(h.lateness()));
    let mut transitions = Family::new(
        "rvs_check_transitions_total",
        Kind::Counter,
        "Health checker state changes.",
    );
    for (l, to, n) in h.transitions() {
        let mut labels = checker_labels(l);
        labels.push(("to", to.to_owned()));
        transitions.push(labels, Value::Int(n));
    }
    vec![up, quorum, latency, lateness, transitions]
}

/// `rvs_vrrp_state{instance}` (keepalived_exporter's encoding: 0 init,
/// 1 backup, 2 master, 3 fault; 4 stopped) and `rvs_vrrp_priority`; none
/// when no instance runs.
pub fn vrrp(status: &crate::vrrp::Status) -> Vec<Family> {
    let Ok(st) = status.lock() else {
        return Vec::new();
    };
    if st.is_empty() {
        return Vec::new();
    }
    let mut state = Family::new(
        "rvs_vrrp_state",
        Kind::Gauge,
        "VRRP instance state (0 init, 1 backup, 2 master, 3 fault, 4 stopped).",
    );
    let mut prio = Family::new(
        "rvs_vrrp_priority",
        Kind::Gauge,
        "VRRP instance effective priority.",
    );
    for (name, (s, p)) in st.iter() {
        let v = match s {
            State::Init => 0,
            State::Backup => 1,
            State::Master => 2,
            State::Fault => 3,
            State::Stopped => 4,
        };
        state.push(vec![("instance", name.clone())], Value::Int(v));
        prio.push(vec![("instance", name.clone())], Value::Int(u64::from(*p)));
    }
    vec![state, prio]
}

/// `rvs_vip_announced{vip}` (1 announced, 0 withdrawn) and
/// `rvs_director_drained` (1 draining or drained); none when rvsd
/// announces nothing.
pub fn announce(a: &crate::announce::Announce) -> Vec<Family> {
    if a.settings().is_none() {
        return Vec::new();
    }
    let mut vips = Family::new(
        "rvs_vip_announced",
        Kind::Gauge,
        "Whether the VIP is announced to the BGP daemon (its route is wanted in the announce table).",
    );
    for (vip, on) in a.vips() {
        vips.push(vec![("vip", vip.to_string())], Value::Int(u64::from(on)));
    }
    let mut drained = Family::new(
        "rvs_director_drained",
        Kind::Gauge,
        "Whether the director is draining or drained (rvsadm --drain).",
    );
    drained.push(Vec::new(), Value::Int(u64::from(a.drained())));
    vec![vips, drained]
}

/// Every family of one scrape, in exposition order.
pub fn families(s: &Sources) -> Vec<Family> {
    let mut out = director(s.ipvs, s.reloads, s.reload_failures);
    if let Some(p) = s.proxy {
        out.extend(proxy(p));
    }
    if let Some(x) = s.xdp_flood {
        out.extend(xdp_flood(&x.snapshot()));
        out.extend(xdp_fnat(&x.fnat_snapshot()));
    }
    if let Some(x) = s.sock {
        out.extend(sock(x));
    }
    out.extend(health(s.health));
    out.extend(vrrp(s.vrrp));
    out.extend(announce(s.announce));
    if let Some(k) = s.kubernetes {
        out.extend(k.families());
    }
    out
}

/// The families of one scrape, handed to the crate's encoder.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let (name, kind) = match f.kind {
                // The encoder appends `_total` to a counter's name.
                Kind::Counter => (
                    f.name.strip_suffix("_total").ok_or(std::fmt::Error)?,
                    MetricType::Counter,
                ),
                Kind::Gauge => (f.name, MetricType::Gauge),
                Kind::Histogram => (f.name, MetricType::Histogram),
            };
            let mut family = encoder.encode_descriptor(name, f.help, None, kind)?;
            for s in &f.samples {
                // No labels: no braces.
                let m = family.encode_family(&s.labels)?;
                match (&s.value, f.kind) {
                    (Value::Int(v), Kind::Counter) => ConstCounter::new(*v).encode(m)?,
                    (Value::Int(v), _) => ConstGauge::new(*v).encode(m)?,
                    (
                        Value::Histogram {
                            cumulative,
                            count,
                            sum,
                        },
                        _,
                    ) => {
                        // The encoder takes per-bucket counts and adds them up.
                        let mut below = 0;
                        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                            .iter()
                            .zip(cumulative)
                            .map(|(le, &n)| {
                                let b = (*le, n.saturating_sub(below));
                                below = n;
                                b
                            })
                            .collect();
                        let mut m = m;
                        m.encode_histogram::<NoLabelSet>(*sum, *count, &buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `families` as Prometheus text (format 0.0.4, [`CONTENT_TYPE`]).
pub fn encode(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut out = String::with_capacity(8192);
    // Writing into a String fails only when a counter lacks its `_total`
    // (a programming error the tests catch); the text so far is served.
    if prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).is_err() {
        tracing::error!("metrics: encoding failed after {} bytes", out.len());
    }
    out
}

/// Every metric of one scrape as Prometheus text.
pub fn render(s: &Sources) -> String {
    encode(families(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::ipvs::IpvsConfig;
    use rvs_core::model::{AddrFamily, DestConfig, Protocol, ServiceConfig};

    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn xdp_flood_counters_per_service_with_shed_derived() {
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().expect("addr"),
            port: 80,
        };
        let c = rvs_xdp::maps::SvcFlood {
            embryonic: 1000,
            promoted: 30,
            guarded: 7,
            unknown: 2,
            adopted: 5,
        };
        let text = encode(xdp_flood(&[(key, c)]));
        let labels = r#"{local_address="10.0.0.1",local_port="80",proto="TCP",local_mark=""}"#;
        for (name, v) in [
            ("rvs_xdp_embryonic_flows_total", 1000),
            ("rvs_xdp_promoted_flows_total", 30),
            ("rvs_xdp_shed_flows_total", 970),
            ("rvs_xdp_guarded_flows_total", 7),
            ("rvs_xdp_unknown_segments_total", 2),
            ("rvs_xdp_adopted_flows_total", 5),
        ] {
            let want = format!("{name}{labels} {v}");
            assert!(lines(&text).contains(&want.as_str()), "{want} in {text}");
            assert!(text.contains(&format!("# TYPE {name} counter")), "{text}");
        }
    }

    #[test]
    fn xdp_fnat_counters_per_service() {
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().expect("addr"),
            port: 80,
        };
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
        let labels = r#"{local_address="10.0.0.1",local_port="80",proto="TCP",local_mark=""}"#;
        for (name, v) in [
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
        ] {
            let want = format!("{name}{labels} {v}");
            assert!(lines(&text).contains(&want.as_str()), "{want} in {text}");
            assert!(text.contains(&format!("# TYPE {name} counter")), "{text}");
        }
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
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        };
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
        let text = lines(&text);
        for want in [
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
        ] {
            assert!(
                text.contains(&want),
                "missing `{want}` in\n{}",
                text.join("\n")
            );
        }
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
        let key = ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 443,
        };
        let mut cfg = ServiceConfig::new(AddrFamily::Inet);
        cfg.quic_lb = vec![rvs_core::model::QuicLbConfig {
            rotation: 0,
            server_id_len: 3,
            nonce_len: 6,
            key: None,
        }];
        ipvs.add_service(key, cfg).unwrap();
        let plain = ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: "10.0.0.2".parse().unwrap(),
            port: 443,
        };
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
        let text = lines(&text);
        for want in [
            "# TYPE rvs_service_quic_lb_packets_total counter",
            r#"rvs_service_quic_lb_packets_total{local_address="10.0.0.1",local_port="443",proto="UDP",local_mark="",route="cid"} 5"#,
            r#"rvs_service_quic_lb_packets_total{local_address="10.0.0.1",local_port="443",proto="UDP",local_mark="",route="fallback"} 2"#,
            r#"rvs_service_quic_lb_packets_total{local_address="10.0.0.1",local_port="443",proto="UDP",local_mark="",route="undecodable"} 1"#,
        ] {
            assert!(
                text.contains(&want),
                "missing `{want}` in\n{}",
                text.join("\n")
            );
        }
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
                r#"rvs_vrrp_state{instance="VI_1"} 2"#,
                r#"rvs_vrrp_state{instance="odd\"name"} 3"#,
                "# HELP rvs_vrrp_priority VRRP instance effective priority.",
                "# TYPE rvs_vrrp_priority gauge",
                r#"rvs_vrrp_priority{instance="VI_1"} 150"#,
                r#"rvs_vrrp_priority{instance="odd\"name"} 0"#,
            ],
            "{text}"
        );
    }

    /// The health checker's families exist (with their types) before any
    /// checker runs, as they did.
    #[test]
    fn health_families_before_any_check() {
        let text = encode(health(&rvs_check::Health::new(1)));
        let text = lines(&text);
        for want in [
            "# TYPE rvs_realserver_up gauge",
            "# TYPE rvs_quorum_up gauge",
            "# TYPE rvs_check_latency_seconds histogram",
            "# TYPE rvs_check_lateness_seconds histogram",
            r#"rvs_check_lateness_seconds_bucket{le="+Inf"} 0"#,
            "rvs_check_lateness_seconds_count 0",
            "# HELP rvs_check_transitions_total Health checker state changes.",
            "# TYPE rvs_check_transitions_total counter",
        ] {
            assert!(
                text.contains(&want),
                "missing `{want}` in\n{}",
                text.join("\n")
            );
        }
    }
}
