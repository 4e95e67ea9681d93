//! The I/O half: watch Services, EndpointSlices and this node's Node with
//! kube-rs reflectors, and hand each new [`Desired`] to a channel.
//!
//! Like kube-proxy, it waits until the three initial lists are in before
//! the first translation (an early, partial table would delete services
//! that are merely not listed yet), then translates an isolated change at
//! once and coalesces the bursts of changes that follow (a rollout touches
//! many slices within milliseconds) into one translation per window.
//! It never blocks on the sink: when the channel is full, the table is
//! recomputed and offered again a little later, so the receiver always gets
//! the latest state and the watches never stall behind a slow consumer.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::{
    Desired, LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, Options, Snapshot,
    translate,
};

/// How the runtime paces itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// The coalescing window (default 20 ms): a change after a quiet window
    /// is translated at once, the changes that follow it within the window
    /// together at its end.
    pub coalesce: Duration,
    /// How long to wait before offering a table again when the sink was
    /// full (default 100 ms).
    pub retry_full: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            coalesce: Duration::from_millis(20),
            retry_full: Duration::from_millis(100),
        }
    }
}

/// Why the runtime stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A watch ended before its initial list was in (its store's writer was
    /// dropped).
    #[error("the {0} watch stopped before its initial list arrived")]
    NotReady(&'static str),
}

/// The label selector Services (and their EndpointSlices) are watched
/// with: not headless, and ours by `service.kubernetes.io/service-proxy-name`
/// (kube-proxy's `noProxyName`/`noHeadlessEndpoints` requirements). The
/// EndpointSlice controller copies a Service's labels to its slices, so the
/// same selector filters both.
pub fn service_selector(opts: &Options) -> String {
    match &opts.service_proxy_name {
        None => format!("!{LABEL_SERVICE_PROXY_NAME},!{LABEL_HEADLESS}"),
        Some(name) => format!("{LABEL_SERVICE_PROXY_NAME}={name},!{LABEL_HEADLESS}"),
    }
}

/// The label selector of EndpointSlices: [`service_selector`] and a
/// `kubernetes.io/service-name` label (slices without it belong to no
/// Service).
pub fn slice_selector(opts: &Options) -> String {
    format!("{},{LABEL_SERVICE_NAME}", service_selector(opts))
}

/// The field selector of this node's Node.
pub fn node_selector(opts: &Options) -> String {
    format!("metadata.name={}", opts.node_name)
}

/// Aborts the watch tasks when the runtime returns or is dropped.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Start a reflector for `api` and a task that drives it, waking `changed`
/// on every event.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: Arc<Notify>,
    what: &'static str,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector::reflector(writer, watcher(api, config).modify(slim)).default_backoff();
    let task = tokio::spawn(drive(stream, changed, what));
    (store, task)
}

/// What the reflectors need not keep: the field managers' bookkeeping
/// (`managedFields`) and kubectl's copy of the last applied object, often
/// larger than the rest of a Service or EndpointSlice and never read by
/// the translation (kube-proxy's informers strip `managedFields` too).
/// At 10,000 Services this is most of what the stores hold.
fn slim<K: kube::Resource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// kubectl's annotation holding the last applied configuration.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

async fn drive<S, K>(stream: S, changed: Arc<Notify>, what: &'static str)
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => changed.notify_one(),
            // The backoff retries; the store keeps the last good state.
            Err(e) => tracing::warn!(watch = what, error = %e, "Kubernetes watch failed; retrying"),
        }
    }
}

/// Watch the API through `client` and send a [`Desired`] to `sink` after
/// the initial lists and after every change that alters it. Returns `Ok`
/// when the receiver is dropped; runs until then.
pub async fn run(
    client: Client,
    opts: Options,
    config: RuntimeConfig,
    sink: mpsc::Sender<Desired>,
) -> Result<(), RuntimeError> {
    let changed = Arc::new(Notify::new());
    let (services, t1) = watch(
        Api::<Service>::all(client.clone()),
        watcher::Config::default().labels(&service_selector(&opts)),
        changed.clone(),
        "Service",
    );
    let (slices, t2) = watch(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default().labels(&slice_selector(&opts)),
        changed.clone(),
        "EndpointSlice",
    );
    let (nodes, t3) = watch(
        Api::<Node>::all(client),
        watcher::Config::default().fields(&node_selector(&opts)),
        changed.clone(),
        "Node",
    );
    let _tasks = Tasks(vec![t1, t2, t3]);
    services
        .wait_until_ready()
        .await
        .map_err(|_| RuntimeError::NotReady("Service"))?;
    slices
        .wait_until_ready()
        .await
        .map_err(|_| RuntimeError::NotReady("EndpointSlice"))?;
    nodes
        .wait_until_ready()
        .await
        .map_err(|_| RuntimeError::NotReady("Node"))?;

    pace(&changed, &config, &sink, || {
        let svcs = services.state();
        let sls = slices.state();
        let node = nodes
            .state()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(opts.node_name.as_str()));
        let snap = Snapshot {
            services: svcs.iter().map(|s| &**s).collect(),
            endpoint_slices: sls.iter().map(|s| &**s).collect(),
            node: node.as_deref(),
        };
        translate(&snap, &opts)
    })
    .await;
    Ok(())
}

/// Translate (with `translate`) and offer the result to `sink` at once, then
/// again after each wake-up of `changed`, until the receiver is dropped.
///
/// At most one translation starts per `config.coalesce` window: a change
/// that arrives when the previous translation is older than the window (an
/// isolated change: a new endpoint, a new Service) is translated at once
/// (leading edge), and the changes that follow within the window are
/// coalesced into one translation at its end (trailing edge), so a burst of
/// thousands of changes costs one translation per window while a lone
/// change waits for nothing.
async fn pace<F>(
    changed: &Notify,
    config: &RuntimeConfig,
    sink: &mpsc::Sender<Desired>,
    mut translate: F,
) where
    F: FnMut() -> Desired,
{
    let mut last: Option<Desired> = None;
    let mut started: Option<tokio::time::Instant> = None;
    loop {
        if let Some(t) = started {
            tokio::time::sleep_until(t + config.coalesce).await;
        }
        started = Some(tokio::time::Instant::now());
        // The translation below sees every change notified so far: drop the
        // stored wake-up so that only changes after it wake the next round.
        let _ = changed.notified().now_or_never();
        let desired = translate();
        let mut retry = false;
        if last.as_ref() != Some(&desired) {
            match sink.try_send(desired.clone()) {
                Ok(()) => last = Some(desired),
                Err(mpsc::error::TrySendError::Full(_)) => retry = true,
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
        if retry {
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep(config.retry_full) => {}
            }
        } else {
            tokio::select! {
                _ = changed.notified() => {}
                _ = sink.closed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ObjectKind, ObjectRef, Warning};
    use std::cell::{Cell, RefCell};
    use tokio::time::Instant;

    /// A table that names the generation of the (fake) cluster state it
    /// was translated from.
    fn table(generation: u64) -> Desired {
        Desired {
            warnings: vec![Warning {
                object: ObjectRef {
                    kind: ObjectKind::Service,
                    namespace: "ns".into(),
                    name: "svc".into(),
                    uid: None,
                },
                message: generation.to_string(),
            }],
            ..Desired::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_isolated_change_is_translated_at_once() {
        let config = RuntimeConfig::default();
        let changed = Notify::new();
        let (tx, mut rx) = mpsc::channel(16);
        let generation = Cell::new(0);
        let driver = pace(&changed, &config, &tx, || table(generation.get()));
        let test = async {
            assert_eq!(rx.recv().await, Some(table(0)), "the initial table");
            for g in 1..=3 {
                // Quiet for longer than the window, then one change.
                tokio::time::sleep(config.coalesce * 5).await;
                generation.set(g);
                changed.notify_one();
                let at = Instant::now();
                assert_eq!(rx.recv().await, Some(table(g)));
                assert_eq!(Instant::now(), at, "change {g} waited for the window");
            }
            drop(rx);
        };
        tokio::join!(driver, test);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_coalesced_one_translation_per_window() {
        let config = RuntimeConfig::default();
        let changed = Notify::new();
        let (tx, mut rx) = mpsc::channel(4096);
        let generation = Cell::new(0);
        let translations = RefCell::new(Vec::new());
        let driver = pace(&changed, &config, &tx, || {
            translations.borrow_mut().push(Instant::now());
            table(generation.get())
        });
        let burst = Duration::from_secs(1);
        let test = async {
            assert_eq!(rx.recv().await, Some(table(0)));
            tokio::time::sleep(config.coalesce * 5).await;
            let start = Instant::now();
            // 10,000 changes, ten per millisecond, for a second.
            for g in 1..=10_000 {
                generation.set(g);
                changed.notify_one();
                if g % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            // The last change arrives within one window.
            tokio::time::sleep(config.coalesce * 2).await;
            let mut got = Vec::new();
            while let Ok(d) = rx.try_recv() {
                got.push(d);
            }
            assert_eq!(
                got.last(),
                Some(&table(10_000)),
                "the last state is applied"
            );
            let times: Vec<Instant> = translations
                .borrow()
                .iter()
                .copied()
                .filter(|t| *t >= start)
                .collect();
            // The first change of the burst at once, then one per window.
            assert_eq!(times.first(), Some(&start));
            let most = (burst.as_millis() / config.coalesce.as_millis()) as usize + 2;
            assert!(
                times.len() <= most,
                "{} translations for a burst of 10,000 changes over {burst:?} (at most {most})",
                times.len()
            );
            for w in times.windows(2) {
                assert!(
                    w[1] - w[0] >= config.coalesce,
                    "two translations within one window"
                );
            }
            drop(rx);
        };
        tokio::join!(driver, test);
    }

    #[test]
    fn selectors_are_kube_proxys() {
        let mut o = Options::new("node-1");
        assert_eq!(
            service_selector(&o),
            "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
        );
        assert_eq!(
            slice_selector(&o),
            "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless,kubernetes.io/service-name"
        );
        assert_eq!(node_selector(&o), "metadata.name=node-1");
        o.service_proxy_name = Some("rvs".into());
        assert_eq!(
            service_selector(&o),
            "service.kubernetes.io/service-proxy-name=rvs,!service.kubernetes.io/headless"
        );
    }

    #[test]
    fn the_stores_keep_no_field_manager_bookkeeping() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut svc = Service::default();
        svc.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..Default::default()
        }]);
        svc.metadata.annotations = Some(
            [
                (
                    LAST_APPLIED.to_string(),
                    "{\"kind\":\"Service\"}".to_string(),
                ),
                (
                    "service.kubernetes.io/topology-mode".to_string(),
                    "Auto".to_string(),
                ),
            ]
            .into(),
        );
        slim(&mut svc);
        assert_eq!(svc.metadata.managed_fields, None);
        let kept: Vec<&String> = svc
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kept, ["service.kubernetes.io/topology-mode"]);
    }
}
