//! The runtime against a fake API server behind kube's `Client`: it waits
//! for the three initial lists, sends the table, and sends a new one when a
//! watch brings a change (and not when nothing changed).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use rvs_k8s::runtime::{RuntimeConfig, run};
use rvs_k8s::{Desired, Options};
use serde_json::{Value, json};
use tokio::sync::mpsc;

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": kind, "apiVersion": api_version,
        "metadata": { "resourceVersion": "1" },
        "items": items,
    }))
    .unwrap()
}

fn slice(endpoints: Vec<&str>, rv: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "namespace": "ns1", "name": "svc1-abc", "resourceVersion": rv,
            "labels": { "kubernetes.io/service-name": "svc1" } },
        "addressType": "IPv4",
        "ports": [{ "name": "p80", "port": 8080, "protocol": "TCP" }],
        "endpoints": endpoints.iter().map(|ip| json!({ "addresses": [ip], "nodeName": "host-2" })).collect::<Vec<_>>(),
    })
}

/// Answers LISTs with fixed objects; the first EndpointSlice WATCH brings
/// one MODIFIED event, every other watch hangs (as an idle watch does).
#[derive(Clone, Default)]
struct Fake {
    slice_watches: Arc<AtomicUsize>,
    requests: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Fake {
    async fn answer(self, req: Request<Body>) -> Result<Response<Body>, Infallible> {
        let uri = req.uri().to_string();
        self.requests.lock().unwrap().push(uri.clone());
        let watch = uri.contains("watch=true");
        let path = req.uri().path().to_owned();
        if watch {
            if path.ends_with("/endpointslices")
                && self.slice_watches.fetch_add(1, Ordering::SeqCst) == 0
            {
                let ev = json!({ "type": "MODIFIED", "object": slice(vec!["10.180.0.1", "10.180.0.2"], "2") });
                let mut body = serde_json::to_vec(&ev).unwrap();
                body.push(b'\n');
                return Ok(Response::new(Body::from(body)));
            }
            std::future::pending::<()>().await;
        }
        let body = match path.as_str() {
            "/api/v1/services" => list(
                "ServiceList",
                "v1",
                vec![json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": { "namespace": "ns1", "name": "svc1", "resourceVersion": "1" },
                    "spec": { "clusterIP": "172.30.0.41", "ports": [{ "name": "p80", "port": 80, "protocol": "TCP" }] },
                })],
            ),
            "/apis/discovery.k8s.io/v1/endpointslices" => list(
                "EndpointSliceList",
                "discovery.k8s.io/v1",
                vec![slice(vec!["10.180.0.1"], "1")],
            ),
            "/api/v1/nodes" => list(
                "NodeList",
                "v1",
                vec![json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": { "name": "test-node", "resourceVersion": "1" },
                    "status": { "addresses": [{ "type": "InternalIP", "address": "192.168.0.2" }] },
                })],
            ),
            _ => b"{}".to_vec(),
        };
        Ok(Response::new(Body::from(body)))
    }
}

async fn next(rx: &mut mpsc::Receiver<Desired>) -> Desired {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a table within 10 s")
        .expect("the runtime is running")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_then_changes_reach_the_sink() {
    let fake = Fake::default();
    let f = fake.clone();
    let svc = tower::service_fn(move |req| f.clone().answer(req));
    let client = Client::new(svc, "default");
    let (tx, mut rx) = mpsc::channel(4);
    let task = tokio::spawn(run(
        client,
        Options::new("test-node"),
        RuntimeConfig::default(),
        tx,
    ));

    // The initial lists and the first watch event may land in one
    // coalesced table or two; the last one has both endpoints.
    let mut d = next(&mut rx).await;
    assert!(
        d.render().starts_with(
            "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80\n  -> 10.180.0.1:8080 Masq w1"
        ),
        "{}",
        d.render()
    );
    if !d.render().contains("10.180.0.2") {
        d = next(&mut rx).await;
    }
    assert_eq!(
        d.render(),
        "TCP 172.30.0.41:80 rr ClusterIP ns1/svc1:p80\n  -> 10.180.0.1:8080 Masq w1\n  -> 10.180.0.2:8080 Masq w1\n"
    );
    // Nothing else changes: nothing else is sent.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rx.recv())
            .await
            .is_err()
    );

    let reqs = fake.requests.lock().unwrap().clone();
    assert!(
        reqs.iter().any(|r| r.starts_with("/api/v1/services?") && r.contains("labelSelector=%21service.kubernetes.io%2Fservice-proxy-name%2C%21service.kubernetes.io%2Fheadless")),
        "{reqs:#?}"
    );
    assert!(
        reqs.iter().any(|r| r.starts_with("/api/v1/nodes?")
            && r.contains("fieldSelector=metadata.name%3Dtest-node")),
        "{reqs:#?}"
    );

    // The receiver gone, the runtime ends.
    drop(rx);
    let r = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("ends")
        .expect("no panic");
    assert!(r.is_ok());
}
