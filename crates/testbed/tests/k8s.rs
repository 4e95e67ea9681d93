//! The Kubernetes test bed is real: a real kube-apiserver allocates
//! ClusterIPs (both families for a dual-stack Service) and the real
//! EndpointSlice controller of kube-controller-manager writes the slices a
//! test waits on — without the controller these tests time out and fail.
//!
//! The two tests run in parallel, each with a control plane of its own
//! (free ports picked at run time). Without the binaries
//! (`scripts/k8s-binaries`) they skip, or fail under CI.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rvs_testbed::k8s::{ControlPlane, Endpoint};

/// The bound on every wait for the controller.
const WAIT: Duration = Duration::from_secs(30);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP literal")
}

/// The endpoint whose first address is `addr`.
fn find<'a>(eps: &'a [Endpoint], addr: &str) -> Option<&'a Endpoint> {
    eps.iter()
        .find(|e| e.addresses.first().map(String::as_str) == Some(addr))
}

/// The value of `key: "VALUE"` in the kubeconfig.
fn kubeconfig_value(kubeconfig: &str, key: &str) -> String {
    let line = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in the kubeconfig:\n{kubeconfig}"));
    line.trim_matches('"').to_owned()
}

/// GET `path` from the apiserver with what a kube-rs client (rustls-tls)
/// takes from the kubeconfig: the server URL (an IP address, so the
/// certificate needs an IP SAN), the CA from `certificate-authority-data`
/// as the only root, and the bearer token. The response's status line and
/// body.
fn get_as_kube_rs(cp: &ControlPlane, path: &str) -> (String, String) {
    let kc = std::fs::read_to_string(cp.kubeconfig()).unwrap();
    let server = kubeconfig_value(&kc, "server");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(kubeconfig_value(&kc, "certificate-authority-data"))
        .unwrap();
    let token = kubeconfig_value(&kc, "token");
    let mut roots = rustls::RootCertStore::empty();
    let pem = String::from_utf8(ca).unwrap();
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    roots.add(der.into()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host_port = server.strip_prefix("https://").unwrap();
    let host = host_port.rsplit_once(':').unwrap().0;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = TcpStream::connect(host_port).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host_port}\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    );
    tls.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    // Go closes without close_notify at times: keep what arrived.
    let _ = tls.read_to_end(&mut resp);
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  type: ClusterIP
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
"#;

#[test]
fn endpoint_slices_follow_pod_readiness_and_termination() {
    let Some(cp) =
        ControlPlane::start_or_skip("endpoint_slices_follow_pod_readiness_and_termination")
    else {
        return;
    };
    // The kubeconfig works for a rustls client as kube-rs builds one.
    let (status, body) = get_as_kube_rs(&cp, "/readyz");
    assert!(status.contains(" 200 "), "{status}: {body}");
    cp.create_node("node-a", ip("192.0.2.10"), Some("zone-a"))
        .unwrap();
    cp.apply(WEB).unwrap();
    let (status, body) = get_as_kube_rs(&cp, "/api/v1/namespaces/default/services/web");
    assert!(status.contains(" 200 "), "{status}: {body}");
    assert!(body.contains("\"clusterIP\""), "{body}");
    let svc = cp.get_json(&["get", "service", "web"]).unwrap();
    let cluster_ip = svc["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        cluster_ip.starts_with("10.96."),
        "ClusterIP from the v4 range: {svc}"
    );

    for (name, addr) in [("web-1", "10.244.0.11"), ("web-2", "10.244.0.12")] {
        cp.create_pod("default", name, "node-a", &[("app", "web")], 8080)
            .unwrap();
        cp.set_pod_ready("default", name, &[ip(addr)]).unwrap();
    }
    // A Pod not selected by the Service stays out of its slices.
    cp.create_pod("default", "other", "node-a", &[("app", "other")], 8080)
        .unwrap();
    cp.set_pod_ready("default", "other", &[ip("10.244.0.13")])
        .unwrap();

    let ready = |e: Option<&Endpoint>| e.is_some_and(|e| e.conditions.ready == Some(true));
    let eps = cp
        .wait_endpoints("default", "web", WAIT, |eps| {
            ready(find(eps, "10.244.0.11")) && ready(find(eps, "10.244.0.12"))
        })
        .unwrap();
    assert_eq!(eps.len(), 2, "only the selected Pods: {eps:?}");
    for e in &eps {
        assert_eq!(e.node_name.as_deref(), Some("node-a"), "{e:?}");
        assert_eq!(
            e.zone.as_deref(),
            Some("zone-a"),
            "the Node's zone label: {e:?}"
        );
        assert_eq!(e.conditions.serving, Some(true), "{e:?}");
        assert_ne!(e.conditions.terminating, Some(true), "{e:?}");
    }
    let slices = cp.endpoint_slices("default", "web").unwrap();
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert_eq!(slices[0]["addressType"], "IPv4");
    assert_eq!(
        slices[0]["ports"][0]["port"], 8080,
        "the target port: {}",
        slices[0]
    );
    assert_eq!(slices[0]["ports"][0]["name"], "http");
    assert_eq!(
        slices[0]["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io",
        "written by the real controller"
    );

    // Deleted with a grace period and no kubelet: the Pod stays
    // Terminating, its endpoint stays serving but is no longer ready.
    cp.delete_pod("default", "web-2", 600).unwrap();
    assert!(cp.pod_terminating("default", "web-2").unwrap());
    let eps = cp
        .wait_endpoints("default", "web", WAIT, |eps| {
            find(eps, "10.244.0.12").is_some_and(|e| e.conditions.terminating == Some(true))
        })
        .unwrap();
    let e = find(&eps, "10.244.0.12").unwrap();
    assert_eq!(
        e.conditions.serving,
        Some(true),
        "terminating yet serving: {e:?}"
    );
    assert_eq!(e.conditions.ready, Some(false), "{e:?}");
    assert!(ready(find(&eps, "10.244.0.11")), "{eps:?}");

    // Its readiness probe then fails: no longer serving.
    cp.set_pod_not_ready("default", "web-2").unwrap();
    let eps = cp
        .wait_endpoints("default", "web", WAIT, |eps| {
            find(eps, "10.244.0.12").is_some_and(|e| e.conditions.serving == Some(false))
        })
        .unwrap();
    let e = find(&eps, "10.244.0.12").unwrap();
    assert_eq!(e.conditions.terminating, Some(true), "{e:?}");
    assert!(
        cp.pod_terminating("default", "web-2").unwrap(),
        "still Terminating"
    );
}

#[test]
fn a_dual_stack_service_gets_a_cluster_ip_of_each_family() {
    let Some(cp) =
        ControlPlane::start_or_skip("a_dual_stack_service_gets_a_cluster_ip_of_each_family")
    else {
        return;
    };
    cp.create_namespace("ds").unwrap();
    cp.apply(
        r#"
apiVersion: v1
kind: Service
metadata:
  name: dual
  namespace: ds
spec:
  ipFamilyPolicy: RequireDualStack
  selector:
    app: dual
  ports:
  - port: 443
    targetPort: 8443
"#,
    )
    .unwrap();
    let svc = cp
        .get_json(&["get", "service", "dual", "-n", "ds"])
        .unwrap();
    let ips: Vec<IpAddr> = svc["spec"]["clusterIPs"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()?.parse().ok()).collect())
        .unwrap_or_default();
    assert_eq!(ips.len(), 2, "{svc}");
    assert!(
        ips[0].is_ipv4() && ips[1].is_ipv6(),
        "v4 first (the first range), then v6: {ips:?}"
    );
    assert!(ips[1].to_string().starts_with("fd00:96::"), "{ips:?}");
    assert_eq!(
        svc["spec"]["ipFamilies"],
        serde_json::json!(["IPv4", "IPv6"])
    );

    // A dual-stack Pod: one slice per family.
    cp.create_node("node-b", ip("fd00:77::b"), None).unwrap();
    cp.create_pod("ds", "dual-1", "node-b", &[("app", "dual")], 8443)
        .unwrap();
    cp.set_pod_ready("ds", "dual-1", &[ip("10.244.1.5"), ip("fd00:244::5")])
        .unwrap();
    cp.wait_endpoints("ds", "dual", WAIT, |eps| {
        ["10.244.1.5", "fd00:244::5"]
            .iter()
            .all(|a| find(eps, a).is_some_and(|e| e.conditions.ready == Some(true)))
    })
    .unwrap();
    let mut families: Vec<String> = cp
        .endpoint_slices("ds", "dual")
        .unwrap()
        .iter()
        .map(|s| s["addressType"].as_str().unwrap_or_default().to_owned())
        .collect();
    families.sort();
    assert_eq!(families, ["IPv4", "IPv6"]);
}

#[test]
fn a_panicking_test_leaves_no_server_nor_directory() {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::panic::catch_unwind(move || {
        let Some(cp) =
            ControlPlane::start_or_skip("a_panicking_test_leaves_no_server_nor_directory")
        else {
            return;
        };
        tx.send((cp.dir().to_owned(), cp.pids())).unwrap();
        panic!("a test fails with the control plane up");
    });
    let Ok((dir, pids)) = rx.try_recv() else {
        return; // skipped
    };
    assert!(result.is_err());
    assert_eq!(pids.len(), 3);
    assert!(!dir.exists(), "{} removed", dir.display());
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "server {pid} killed and reaped"
        );
    }
}
