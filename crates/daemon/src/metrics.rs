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

mod planes;
pub use planes::{proxy, refused, sock, xdp_flood, xdp_fnat};

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

/// `rvs_dataplane_services_skipped{plane}`, with several data planes.
pub(crate) fn planes_skipped(skipped: &[(&'static str, u64)]) -> Vec<Family> {
    if skipped.is_empty() {
        return Vec::new();
    }
    let mut f = Family::new(
        "rvs_dataplane_services_skipped",
        Kind::Gauge,
        "Services this data plane does not carry because it cannot (the other planes carry them; the reason is logged once per service).",
    );
    for (plane, n) in skipped {
        f.push(vec![("plane", (*plane).to_owned())], Value::Int(*n));
    }
    vec![f]
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

/// A real server's labels: its service's (`service`, from
/// [`service_labels`]) with `remote_address` and `remote_port` after the
/// service's address and port, in node_exporter's order.
fn backend_labels(
    mut service: Vec<(&'static str, String)>,
    addr: std::net::IpAddr,
    port: u16,
) -> Vec<(&'static str, String)> {
    service.splice(
        2..2,
        [
            ("remote_address", addr.to_string()),
            ("remote_port", port.to_string()),
        ],
    );
    service
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
            let labels = backend_labels(service.clone(), d.config.addr, d.config.port);
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

/// `rvs_vrrp_state{iname}` (keepalived_exporter's label and encoding: 0 init,
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
        state.push(vec![("iname", name.clone())], Value::Int(v));
        prio.push(vec![("iname", name.clone())], Value::Int(u64::from(*p)));
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

/// The counters the data planes keep themselves, as they are now: the
/// proxy's, the XDP plane's SYN-flood guard and FULLNAT, the sock plane's
/// (the dashboard shows them too).
pub fn planes(live: &crate::handle::Live) -> Vec<Family> {
    let mut out = Vec::new();
    if let Some(p) = &live.proxy {
        out.extend(proxy(p));
    }
    if let Some(x) = &live.xdp_flood {
        out.extend(xdp_flood(&x.snapshot()));
        out.extend(xdp_fnat(&x.fnat_snapshot()));
    }
    if let Some(x) = &live.sock {
        out.extend(sock(x));
    }
    let mut refusals = Vec::new();
    if let Some(x) = &live.xdp_flood {
        refusals.push(("xdp", x.refused()));
    }
    if let Some(x) = &live.sock {
        refusals.push(("sock", x.refused()));
    }
    out.extend(refused(&refusals));
    out
}

/// `rvs_sync_daemon_running{role}` (1 for each running daemon: `master`,
/// `backup`) and `rvs_sync_backup_heard_age_seconds` (how long ago the
/// backup last entered its peers' entries; absent until it has). None when
/// no sync daemon runs.
pub fn sync_running(running: &[crate::sync::RunningSnap]) -> Vec<Family> {
    if running.is_empty() {
        return Vec::new();
    }
    let mut up = Family::new(
        "rvs_sync_daemon_running",
        Kind::Gauge,
        "Whether a connection-sync daemon of this role runs (ipvsadm --start-daemon, lvs_sync_daemon).",
    );
    let mut age = Family::new(
        "rvs_sync_backup_heard_age_seconds",
        Kind::Gauge,
        "Seconds since the backup sync daemon last entered its peers' entries (absent until it has).",
    );
    for r in running {
        let role = if r.master { "master" } else { "backup" };
        up.push(vec![("role", role.to_owned())], Value::Int(1));
        if let Some(ms) = r.heard_ago_ms {
            age.push(Vec::new(), Value::Int(ms / 1000));
        }
    }
    let mut out = vec![up];
    if !age.samples.is_empty() {
        out.push(age);
    }
    out
}

/// `rvs_sync_{sent,received}_{messages,bytes}_total{role}` and
/// `rvs_sync_send_errors_total{role}`: the sync daemons' traffic since
/// rvsd started, while a daemon `runs` or once either has counted (samples
/// for both roles, so a rate can be taken across a restart of one daemon).
pub fn sync_traffic(s: &crate::sync::SyncStats, runs: bool) -> Vec<Family> {
    // In the order of `RoleStats::values`.
    const ROWS: [(&str, &str); 5] = [
        (
            "rvs_sync_sent_messages_total",
            "Datagrams the sync daemon sent (sync messages, bulk requests and answers).",
        ),
        (
            "rvs_sync_sent_bytes_total",
            "Bytes of the datagrams the sync daemon sent.",
        ),
        (
            "rvs_sync_send_errors_total",
            "Datagrams the sync daemon could not send.",
        ),
        (
            "rvs_sync_received_messages_total",
            "Datagrams the sync daemon received on its group.",
        ),
        (
            "rvs_sync_received_bytes_total",
            "Bytes of the datagrams the sync daemon received on its group.",
        ),
    ];
    let roles = [("master", s.master.values()), ("backup", s.backup.values())];
    if !runs && roles.iter().all(|(_, v)| v.iter().all(|&n| n == 0)) {
        return Vec::new();
    }
    ROWS.iter()
        .enumerate()
        .map(|(i, &(name, help))| {
            let mut f = Family::new(name, Kind::Counter, help);
            for (role, v) in &roles {
                f.push(vec![("role", (*role).to_owned())], Value::Int(v[i]));
            }
            f
        })
        .collect()
}

/// Every family of one scrape, in exposition order: the daemon's as its
/// owner published them, the counters other tasks keep as they are now.
pub fn families(s: &crate::handle::Snapshot) -> Vec<Family> {
    let own = &s.families;
    let mut out = own.director.clone();
    out.extend(planes(&s.live));
    out.extend(own.planes_skipped.iter().cloned());
    out.extend(own.health.iter().cloned());
    out.extend(vrrp(&s.live.vrrp));
    out.extend(own.announce.iter().cloned());
    out.extend(own.sync.iter().cloned());
    out.extend(sync_traffic(&s.live.sync, !own.sync.is_empty()));
    if let Some(k) = &s.live.kubernetes {
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
pub fn render(s: &crate::handle::Snapshot) -> String {
    encode(families(s))
}

#[cfg(test)]
mod tests;
