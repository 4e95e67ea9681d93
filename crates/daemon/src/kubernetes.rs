//! `rvsd --kubernetes`: the Kubernetes source of desired state, as
//! kube-proxy (or Cilium's kube-proxy replacement) is on a node.
//!
//! [`rvs_k8s::runtime`] watches Services, EndpointSlices and this node's
//! Node and hands over each new translation ([`rvs_k8s::Desired`]) once
//! the initial lists are in; this module applies it through the control
//! plane's one entry point as the `kubernetes` owner (a partial replace:
//! an object rvs cannot carry out is left out and reported, the rest
//! applies), serves the `healthCheckNodePort`s of `externalTrafficPolicy:
//! Local` services, records a Kubernetes Event for each refused object, and
//! keeps the counters `/metrics` shows. A kubeconfig that cannot be read or
//! an API server that cannot be reached is logged and retried with
//! backoff; the programmed state keeps serving meanwhile.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rvs_control::owner::{Change, Owner};
use rvs_k8s::{Desired, ExternalMode, HealthCheck, ObjectKind, ObjectRef, Options};

use crate::handle::{DaemonHandle, Msg};

/// The command-line options of the Kubernetes source.
#[derive(clap::Args, Clone, Debug, Default)]
#[group(id = "kubernetes-source")]
#[command(next_help_heading = "Kubernetes (rvsd --kubernetes)")]
pub struct Args {
    /// Be this node's Kubernetes service proxy (in place of kube-proxy):
    /// watch Services, EndpointSlices and the Node, and program their
    /// ClusterIPs, NodePorts, external IPs and load-balancer IPs. These
    /// services belong to Kubernetes: rvsadm lists them and refuses to
    /// change them.
    #[arg(long)]
    pub kubernetes: bool,

    /// The kubeconfig to reach the API server with (default: $KUBECONFIG,
    /// ~/.kube/config, else the pod's service account).
    #[arg(long, value_name = "FILE", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,

    /// This node's name (default: the host name, as kube-proxy).
    #[arg(long, value_name = "NAME", requires = "kubernetes")]
    pub node_name: Option<String>,

    /// The NodePort range (kube-apiserver's --service-node-port-range).
    #[arg(
        long,
        value_name = "FIRST-LAST",
        default_value = "30000-32767",
        requires = "kubernetes"
    )]
    pub node_port_range: String,

    /// Addresses NodePorts are served on (default: the Node's InternalIP
    /// and ExternalIP addresses, plus 127.0.0.1).
    #[arg(
        long,
        value_name = "ADDR",
        value_delimiter = ',',
        requires = "kubernetes"
    )]
    pub node_port_addresses: Vec<IpAddr>,

    /// How NodePort, external and load-balancer traffic with
    /// `externalTrafficPolicy: Cluster` reaches another node's endpoint.
    #[arg(long, value_enum, default_value_t = NodePortMode::Snat, requires = "kubernetes")]
    pub node_port_mode: NodePortMode,

    /// How `--node-port-mode dsr|hybrid` carries the service address to
    /// the endpoint's node (Cilium's `bpf-lb-dsr-dispatch`): `opt` in an
    /// IPv4 option / IPv6 destination option (that node runs `rvsd
    /// realserver --mode dsr-opt`), `geneve` in Geneve (where the network
    /// drops IP options; `rvsd realserver --mode tun --tun-type geneve`).
    #[arg(long, value_enum, default_value_t = DsrDispatch::Opt, requires = "kubernetes")]
    pub dsr_dispatch: DsrDispatch,

    /// Serve only Services labelled `service.kubernetes.io/service-proxy-name`
    /// with this name (default: only Services without the label).
    #[arg(long, value_name = "NAME", requires = "kubernetes")]
    pub service_proxy_name: Option<String>,
}

/// `--node-port-mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodePortMode {
    /// Source NAT to the node's address (kube-proxy's way).
    #[default]
    Snat,
    /// Direct server return: the endpoint answers the client itself.
    Dsr,
    /// DSR for TCP, SNAT for UDP.
    Hybrid,
}

/// `--dsr-dispatch`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DsrDispatch {
    /// The service address in an IP option / IPv6 destination option.
    #[default]
    Opt,
    /// Geneve to UDP port 6081.
    Geneve,
}

impl Args {
    /// Whether this node must receive DSR by IP option: `--kubernetes
    /// --node-port-mode dsr|hybrid` with `--dsr-dispatch opt`. Every node
    /// of such a cluster is also the endpoint node of the others' NodePorts,
    /// so rvsd attaches the DSR option programs (`rvsd realserver --mode
    /// dsr-opt`'s) to its XDP `--interface`s itself: one daemon per node,
    /// and no node left black-holing the DSR connections to its pods
    /// because a second command was forgotten.
    pub fn receives_dsr_option(&self) -> bool {
        self.kubernetes
            && self.node_port_mode != NodePortMode::Snat
            && self.dsr_dispatch == DsrDispatch::Opt
    }

    /// The translation's options; errors name the option.
    pub fn options(&self) -> Result<Options, String> {
        let node = match &self.node_name {
            Some(n) => n.clone(),
            None => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map_err(|e| format!("--node-name not given and no host name: {e}"))?
                .trim()
                .to_owned(),
        };
        let mut opts = Options::new(node);
        let (a, b) = self.node_port_range.split_once('-').ok_or_else(|| {
            format!(
                "--node-port-range {}: expected FIRST-LAST",
                self.node_port_range
            )
        })?;
        let (a, b): (u16, u16) = match (a.trim().parse(), b.trim().parse()) {
            (Ok(a), Ok(b)) if a <= b && a > 0 => (a, b),
            _ => {
                return Err(format!(
                    "--node-port-range {}: expected FIRST-LAST with 1 <= FIRST <= LAST <= 65535",
                    self.node_port_range
                ));
            }
        };
        opts.node_port_range = a..=b;
        if !self.node_port_addresses.is_empty() {
            opts.node_port_addresses = Some(self.node_port_addresses.clone());
        }
        opts.service_proxy_name = self.service_proxy_name.clone();
        opts.external_mode = match self.node_port_mode {
            NodePortMode::Snat => ExternalMode::Snat,
            NodePortMode::Dsr => ExternalMode::Dsr,
            NodePortMode::Hybrid => ExternalMode::Hybrid,
        };
        if self.dsr_dispatch == DsrDispatch::Geneve {
            opts.dsr_tunnel = rvs_k8s::DSR_GENEVE;
        }
        Ok(opts)
    }
}

/// What the Kubernetes source has done, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Tables applied.
    pub syncs: AtomicU64,
    /// Time of the last application under the daemon's lock, in µs.
    pub last_apply_us: AtomicU64,
    /// Sum of application times, in µs (with `syncs`, the mean).
    pub apply_us_total: AtomicU64,
    /// Objects refused in the last table (translation or director).
    pub refused: AtomicU64,
    /// Times the watch had to start again (API server unreachable, the
    /// kubeconfig unreadable, a watch that could not list).
    pub restarts: AtomicU64,
    /// Services the source programs now.
    pub services: AtomicU64,
}

impl Stats {
    /// The `rvs_kubernetes_*` metric families.
    pub fn families(&self) -> Vec<crate::metrics::Family> {
        use crate::metrics::{Family, Kind};
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            Family::scalar(
                "rvs_kubernetes_syncs_total",
                Kind::Counter,
                "Tables from the Kubernetes API applied.",
                get(&self.syncs),
            ),
            Family::scalar(
                "rvs_kubernetes_sync_apply_microseconds_total",
                Kind::Counter,
                "Time spent applying them under the daemon's lock (with syncs_total, the mean).",
                get(&self.apply_us_total),
            ),
            Family::scalar(
                "rvs_kubernetes_last_sync_apply_microseconds",
                Kind::Gauge,
                "Time the last table took to apply.",
                get(&self.last_apply_us),
            ),
            Family::scalar(
                "rvs_kubernetes_watch_restarts_total",
                Kind::Counter,
                "Times the watch started again (API server unreachable, kubeconfig unreadable).",
                get(&self.restarts),
            ),
            Family::scalar(
                "rvs_kubernetes_objects_refused",
                Kind::Gauge,
                "Objects of the last table rvs could not carry out (each has a Warning Event).",
                get(&self.refused),
            ),
            Family::scalar(
                "rvs_kubernetes_services",
                Kind::Gauge,
                "rvs services the Kubernetes source programs.",
                get(&self.services),
            ),
        ]
    }
}

/// Start the Kubernetes source on the current runtime.
pub fn spawn(daemon: DaemonHandle, args: &Args) -> anyhow::Result<Arc<Stats>> {
    let opts = args.options().map_err(anyhow::Error::msg)?;
    let stats = Arc::new(Stats::default());
    let (tx, rx) = tokio::sync::mpsc::channel::<Desired>(4);
    let client_slot: Arc<tokio::sync::Mutex<Option<kube::Client>>> = Arc::default();
    tracing::info!(node = %opts.node_name, "Kubernetes source: starting");
    tokio::spawn(watch(
        args.kubeconfig.clone(),
        opts.clone(),
        tx,
        stats.clone(),
        client_slot.clone(),
    ));
    let d = daemon.clone();
    let s = stats.clone();
    tokio::spawn(async move { d.send(Msg::KubernetesStats(s)).await });
    tokio::spawn(apply_loop(
        daemon,
        rx,
        stats.clone(),
        client_slot,
        opts.node_name,
    ));
    Ok(stats)
}

/// The client for `kubeconfig` (or the default chain).
async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let read = path.clone();
            let kc =
                tokio::task::spawn_blocking(move || kube::config::Kubeconfig::read_from(&read))
                    .await
                    .map_err(|e| format!("reading {}: {e}", path.display()))?
                    .map_err(|e| format!("reading the kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("the kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no kubeconfig found: {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))
}

/// Run the watcher, starting it again with backoff whenever it stops.
async fn watch(
    kubeconfig: Option<PathBuf>,
    opts: Options,
    tx: tokio::sync::mpsc::Sender<Desired>,
    stats: Arc<Stats>,
    client_slot: Arc<tokio::sync::Mutex<Option<kube::Client>>>,
) {
    let mut backoff = Duration::from_millis(500);
    loop {
        match client(kubeconfig.clone()).await {
            Ok(c) => {
                *client_slot.lock().await = Some(c.clone());
                match rvs_k8s::runtime::run(c, opts.clone(), Default::default(), tx.clone()).await {
                    Ok(()) => return, // the applier is gone: rvsd stops
                    Err(e) => tracing::error!("Kubernetes source: {e}; starting again"),
                }
                backoff = Duration::from_millis(500);
            }
            Err(e) => tracing::error!("Kubernetes source: {e}; retrying in {backoff:?}"),
        }
        stats.restarts.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// The Service an rvs service of the Kubernetes source came from.
fn service_object(k: &rvs_k8s::K8sService) -> ObjectRef {
    ObjectRef {
        kind: ObjectKind::Service,
        namespace: k.origin.namespace.clone(),
        name: k.origin.name.clone(),
        uid: k.origin.uid.clone(),
    }
}

/// Apply each table the watcher sends; serve the health-check ports.
async fn apply_loop(
    daemon: DaemonHandle,
    mut rx: tokio::sync::mpsc::Receiver<Desired>,
    stats: Arc<Stats>,
    client_slot: Arc<tokio::sync::Mutex<Option<kube::Client>>>,
    node: String,
) {
    let health = HealthServers::default();
    let mut reported: BTreeSet<(ObjectRef, String)> = BTreeSet::new();
    while let Some(desired) = rx.recv().await {
        let services: Vec<_> = desired.defs().cloned().collect();
        let n = services.len();
        let start = Instant::now();
        let change = Change::Replace {
            services,
            partial: true,
        };
        let Some(result) = daemon.submit(Owner::Kubernetes, change).await else {
            return;
        };
        let took = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        stats.last_apply_us.store(took, Ordering::Relaxed);
        stats.apply_us_total.fetch_add(took, Ordering::Relaxed);
        stats.syncs.fetch_add(1, Ordering::Relaxed);
        // Every refusal of this table: the translation's and the director's.
        let mut refusals: Vec<(ObjectRef, String)> = desired
            .refused
            .iter()
            .map(|r| (r.object.clone(), r.reason.to_string()))
            .collect();
        match result {
            Ok(s) => {
                for e in &s.refused {
                    if let Some(k) = desired.services.get(e.index) {
                        refusals
                            .push((service_object(k), format!("{}: {}", k.kind.name(), e.error)));
                    }
                }
                stats.services.store(
                    u64::try_from(n - s.refused.len()).unwrap_or(0),
                    Ordering::Relaxed,
                );
                tracing::info!(
                    services = n,
                    refused = refusals.len(),
                    "Kubernetes: applied {}",
                    s.summary
                );
            }
            Err(e) => tracing::error!("Kubernetes: the table was not applied: {}", e.error),
        }
        for w in &desired.warnings {
            tracing::warn!(object = %w.object, "Kubernetes: {}", w.message);
        }
        stats.refused.store(
            u64::try_from(refusals.len()).unwrap_or(0),
            Ordering::Relaxed,
        );
        let now: BTreeSet<(ObjectRef, String)> = refusals.into_iter().collect();
        let fresh: Vec<(ObjectRef, String)> = now.difference(&reported).cloned().collect();
        for (o, why) in &fresh {
            tracing::warn!(object = %o, "Kubernetes: not carried out: {why}");
        }
        reported = now;
        if !fresh.is_empty() {
            let client = client_slot.lock().await.clone();
            if let Some(c) = client {
                tokio::spawn(publish_events(c, node.clone(), fresh));
            }
        }
        health.set(&desired.health_checks);
    }
}

/// Record a Warning Event on each refused object (what `kubectl describe`
/// shows), as kube-proxy does for the problems it finds.
async fn publish_events(client: kube::Client, node: String, refused: Vec<(ObjectRef, String)>) {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "rvs".into(),
            instance: Some(node),
        },
    );
    for (o, why) in refused {
        let (api_version, kind) = match o.kind {
            ObjectKind::Service => ("v1", "Service"),
            ObjectKind::EndpointSlice => ("discovery.k8s.io/v1", "EndpointSlice"),
            ObjectKind::Node => ("v1", "Node"),
        };
        let reference = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            namespace: (!o.namespace.is_empty()).then(|| o.namespace.clone()),
            name: Some(o.name.clone()),
            uid: o.uid.clone(),
            ..Default::default()
        };
        let mut note = why.clone();
        note.truncate(1000);
        let ev = Event {
            type_: EventType::Warning,
            reason: "NotProgrammed".into(),
            note: Some(note),
            action: "Program".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, &reference).await {
            tracing::warn!(object = %o, "Kubernetes: recording the Event: {e}");
        }
    }
}

/// The `healthCheckNodePort` servers: one listener per port, answering
/// from the latest table (kube-proxy's service health server).
#[derive(Default)]
struct HealthServers {
    checks: Arc<Mutex<HashMap<u16, HealthCheck>>>,
    tasks: Mutex<BTreeMap<u16, tokio::task::JoinHandle<()>>>,
}

impl HealthServers {
    fn set(&self, checks: &[HealthCheck]) {
        if let Ok(mut m) = self.checks.lock() {
            *m = checks.iter().map(|c| (c.port, c.clone())).collect();
        }
        let Ok(mut tasks) = self.tasks.lock() else {
            return;
        };
        let wanted: BTreeSet<u16> = checks.iter().map(|c| c.port).collect();
        tasks.retain(|port, t| {
            let keep = wanted.contains(port);
            if !keep {
                t.abort();
            }
            keep
        });
        for port in wanted {
            if tasks.contains_key(&port) {
                continue;
            }
            let checks = self.checks.clone();
            tasks.insert(port, tokio::spawn(serve_health(port, checks)));
        }
    }
}

impl Drop for HealthServers {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.lock() {
            for t in tasks.values() {
                t.abort();
            }
        }
    }
}

/// Answer every request on `port` with the service's local endpoint count.
async fn serve_health(port: u16, checks: Arc<Mutex<HashMap<u16, HealthCheck>>>) {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(port, "Kubernetes: health check node port: {e}");
            return;
        }
    };
    let app = axum::Router::new().fallback(move || {
        let answer = checks
            .lock()
            .ok()
            .and_then(|m| m.get(&port).map(HealthCheck::response));
        async move {
            let (status, body) =
                answer.unwrap_or((404, String::from("no such health check port\n")));
            let status =
                axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK);
            (
                status,
                [
                    (axum::http::header::CONTENT_TYPE, "application/json"),
                    (axum::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                ],
                body,
            )
        }
    });
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(port, "Kubernetes: health check node port: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_bad_option() {
        let mut a = Args {
            node_name: Some("n1".into()),
            node_port_range: "30000-32767".into(),
            ..Default::default()
        };
        let o = a.options().unwrap();
        assert_eq!(
            (o.node_name.as_str(), o.node_port_range),
            ("n1", 30000..=32767)
        );
        a.node_port_range = "40000-3000".into();
        assert!(a.options().unwrap_err().contains("--node-port-range"));
        a.node_port_range = "x".into();
        assert!(a.options().unwrap_err().contains("FIRST-LAST"));
    }
}
