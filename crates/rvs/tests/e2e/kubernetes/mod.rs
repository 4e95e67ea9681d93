//! `rvsd --kubernetes` against a real control plane (etcd, kube-apiserver
//! and the real EndpointSlice controller of kube-controller-manager, built
//! from the Go modules: `rvs_testbed::k8s`). A node is a network namespace
//! running rvsd; pods are namespaces with real servers; Pod objects are
//! created with `nodeName` and their status patched Ready (there is no
//! kubelet), so the controller writes the EndpointSlices rvsd watches.
//!
//! The API server listens on the host's loopback; a relay made inside the
//! node's namespace (its listening socket belongs to that namespace, its
//! upstream sockets to the host's) gives rvsd `https://127.0.0.1:PORT`
//! there, as a node reaches its API server.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rvs_testbed::k8s::ControlPlane;
use rvs_testbed::{Bed, Host, connect, spread};

use crate::harness::{RVSD, Rvsd, TempDir, within};

mod dsr;
mod graceful;
mod hairpin;
mod policy;
mod services;
mod udp;
mod xdp;

/// The bound on every wait for the cluster to reach rvsd.
const WAIT: Duration = Duration::from_secs(30);

/// Copies bytes both ways between a listener inside a namespace and the
/// API server on the host's loopback; stops on drop. (Also the node relay
/// of the `kube_bench` benchmark.)
pub(crate) struct Relay {
    pub(crate) port: u16,
    stop: Arc<AtomicBool>,
    /// While set, connections are closed and new ones dropped (the API
    /// server is unreachable from the node).
    cut: Arc<AtomicBool>,
    /// Copying threads running (two per connection).
    active: Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    pub(crate) fn start(host: &Host, upstream: SocketAddr) -> Relay {
        let listener = host.run(|| TcpListener::bind("127.0.0.1:0").expect("relay bind"));
        let port = listener.local_addr().expect("relay addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (stop2, cut2, active2) = (stop.clone(), cut.clone(), active.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok(_) if cut2.load(Ordering::Relaxed) => {}
                    Ok((down, _)) => {
                        let _ = down.set_nonblocking(false);
                        let Ok(up) = TcpStream::connect(upstream) else {
                            continue;
                        };
                        for (mut from, mut to) in [
                            (down.try_clone(), up.try_clone()),
                            (up.try_clone(), down.try_clone()),
                        ]
                        .into_iter()
                        .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                        {
                            let (stop, cut, active) =
                                (stop2.clone(), cut2.clone(), active2.clone());
                            active.fetch_add(1, Ordering::SeqCst);
                            std::thread::spawn(move || {
                                let _ = from.set_read_timeout(Some(Duration::from_millis(500)));
                                let mut buf = [0u8; 16384];
                                while !cut.load(Ordering::Relaxed) {
                                    match from.read(&mut buf) {
                                        Ok(0) => break,
                                        Ok(n) => {
                                            if to.write_all(&buf[..n]).is_err() {
                                                break;
                                            }
                                        }
                                        Err(e)
                                            if e.kind() == std::io::ErrorKind::WouldBlock
                                                || e.kind() == std::io::ErrorKind::TimedOut =>
                                        {
                                            if stop.load(Ordering::Relaxed) {
                                                break;
                                            }
                                        }
                                        Err(_) => break,
                                    }
                                }
                                let _ = to.shutdown(std::net::Shutdown::Both);
                                let _ = from.shutdown(std::net::Shutdown::Both);
                                active.fetch_sub(1, Ordering::SeqCst);
                            });
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Relay {
            port,
            stop,
            cut,
            active,
            thread: Some(thread),
        }
    }

    /// Cut the node off the API server (`true`) or let it back (`false`).
    fn cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Relaxed);
        if cut {
            within("the relay's connections closed", WAIT, || {
                self.active.load(Ordering::SeqCst) == 0
            });
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A node of the cluster: its namespace on the bed, the relay to the API
/// server, and `rvsd --kubernetes` running inside it.
struct Node {
    rvsd: Rvsd,
    /// rvsd's standard error (its log).
    log: std::path::PathBuf,
    relay: Relay,
}

impl Node {
    /// Start `rvsd --dataplane PLANE --kubernetes` in `host`'s namespace as
    /// node `name`, plus `args`.
    fn start(cp: &ControlPlane, host: &Host, name: &str, plane: &str, args: &[&str]) -> Node {
        let upstream: SocketAddr = cp
            .server()
            .trim_start_matches("https://")
            .parse()
            .expect("the API server's address");
        let relay = Relay::start(host, upstream);
        let dir = TempDir::new("rvs-k8s-node");
        let text = std::fs::read_to_string(cp.kubeconfig()).expect("kubeconfig");
        let kubeconfig = dir.write(
            "kubeconfig",
            &text.replace(cp.server(), &format!("https://127.0.0.1:{}", relay.port)),
        );
        let log = std::env::temp_dir().join(format!(
            "{}.log",
            dir.path()
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("rvsd")
        ));
        let log_file = std::fs::File::create(&log).expect("rvsd log");
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/var/run/netns/{}", host.ns))
            .arg(RVSD)
            .args(["--dataplane", plane, "--log-level", "info", "--kubernetes"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--node-name", name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        Node {
            rvsd: Rvsd::spawn_in(dir, cmd),
            log,
            relay,
        }
    }

    /// What rvsd has logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The log goes with the node; a failing test shows it first.
        if std::thread::panicking() {
            eprintln!("--- rvsd log ---\n{}", self.log());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Root, tools and a control plane, or a skip.
fn setup(test: &str) -> Option<ControlPlane> {
    if !rvs_testbed::require_root(test, "network namespaces need root")
        || !rvs_testbed::require_tools(test, &["ip", "nsenter", "ethtool"])
    {
        return None;
    }
    ControlPlane::start_or_skip(test)
}

/// A bed with the node (`NET.1`, ClusterIPs local to it: kube-proxy's IPVS
/// mode puts them on the dummy kube-ipvs0, a local route does the same
/// here) and a client (`NET.50`); `net` is the /24's first three bytes.
fn bed_with_node_on(tag: &str, net: &str) -> (Bed, Host, Host) {
    let mut bed = Bed::new(tag);
    let node = bed.host("node", &format!("{net}.1/24"));
    let client = bed.host("client", &format!("{net}.50/24"));
    node.exec(&["ip", "route", "add", "local", "10.96.0.0/16", "dev", "lo"]);
    (bed, node, client)
}

/// [`bed_with_node_on`] 10.81.0.
fn bed_with_node(tag: &str) -> (Bed, Host, Host) {
    bed_with_node_on(tag, "10.81.0")
}

/// A host per pod `(name, address)` serving its name on `address:8080`.
fn pod_servers(bed: &mut Bed, pods: &[(&str, &str)]) {
    for &(name, addr) in pods {
        let h = bed.host(name, &format!("{addr}/24"));
        bed.server(&h, ip(addr), 8080, name);
    }
}

/// Pods `(name, address)` of app `app` on node `node`: a host each serving
/// its name on `address:8080`, and Ready Pod objects.
fn app_pods(cp: &ControlPlane, bed: &mut Bed, node: &str, app: &str, pods: &[(&str, &str)]) {
    pod_servers(bed, pods);
    for &(name, addr) in pods {
        app_pod(cp, name, node, addr, app);
    }
}

/// Node objects `(name, address)`.
fn nodes(cp: &ControlPlane, nodes: &[(&str, &str)]) {
    for &(name, addr) in nodes {
        cp.create_node(name, ip(addr), None).expect("create node");
    }
}

/// Give Node `name` the InternalIP addresses `addrs` (one per family for
/// a dual-stack node; `create_node` gives one).
fn node_addresses(cp: &ControlPlane, name: &str, addrs: &[&str]) {
    let mut list: Vec<serde_json::Value> = addrs
        .iter()
        .map(|a| serde_json::json!({"type": "InternalIP", "address": a}))
        .collect();
    list.push(serde_json::json!({"type": "Hostname", "address": name}));
    let patch = serde_json::json!({"status": {"addresses": list}}).to_string();
    cp.kubectl(
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
        None,
    )
    .expect("the node's addresses");
}

/// The names `n` connections from `from` to `to` reached (none failing).
fn servers(from: &Host, to: SocketAddr, n: usize) -> BTreeSet<String> {
    let (seen, failed) = spread(from, to, n, T);
    assert_eq!(failed, 0, "{to}: {seen:?}");
    seen.into_keys().collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// The first line each of `n` connections to `to` got, made one after
/// another by bash in `host`'s namespace and in the cgroup `cgroup` (where
/// the sock plane rewrites its `connect()`); `refused` for one that failed.
fn in_cgroup_connections(host: &Host, cgroup: &str, to: SocketAddr, n: usize) -> Vec<String> {
    let script = format!(
        "for i in $(seq {n}); do if exec 3<>/dev/tcp/{}/{}; then head -1 <&3; exec 3<&-; else echo refused; fi; done 2>/dev/null",
        to.ip(),
        to.port()
    );
    let out = Command::new("nsenter")
        .arg(format!("--net=/var/run/netns/{}", host.ns))
        .args([
            "sh",
            "-c",
            r#"echo $$ > "$0/cgroup.procs" && exec bash -c "$1""#,
        ])
        .arg(cgroup)
        .arg(&script)
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Every test's bound on one connection or question.
const T: Duration = Duration::from_secs(3);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP literal")
}

/// The Service's ClusterIP and its NodePort for port `port_name`.
fn service_addrs(cp: &ControlPlane, ns: &str, name: &str) -> (IpAddr, Option<u16>) {
    let v = cp
        .get_json(&["get", "service", name, "-n", ns])
        .expect("get service");
    let cip = v["spec"]["clusterIP"].as_str().expect("clusterIP");
    let node_port = v["spec"]["ports"][0]["nodePort"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok());
    (ip(cip), node_port)
}

/// The real servers `rvsadm -Ln` lists under `vip:port`, with weights.
fn real_servers(d: &Rvsd, vip: SocketAddr) -> Vec<(String, u32)> {
    real_servers_of(d, "", vip)
}

/// [`real_servers`] of the `proto` (`TCP`, `UDP`; empty = the first)
/// service at `vip`.
fn real_servers_of(d: &Rvsd, proto: &str, vip: SocketAddr) -> Vec<(String, u32)> {
    real_server_fields(d, proto, vip)
        .into_iter()
        .filter_map(|f| Some((f.get(1)?.clone(), f.get(3)?.parse().ok()?)))
        .collect()
}

/// The `rvsadm -Ln` lines of the real servers under the `proto` service
/// at `vip` (as [`real_servers_of`]), split into fields: `->`, the
/// address, the forwarding method, the weight, ...
fn real_server_fields(d: &Rvsd, proto: &str, vip: SocketAddr) -> Vec<Vec<String>> {
    let out = d.ok("-Ln");
    let mut lines = out
        .lines()
        .skip_while(|l| !(l.starts_with(proto) && l.contains(&format!(" {vip} "))));
    if lines.next().is_none() {
        return Vec::new();
    }
    lines
        .take_while(|l| l.trim_start().starts_with("->"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn pod(cp: &ControlPlane, name: &str, node: &str, addr: &str) {
    cp.create_pod("default", name, node, &[("app", "echo")], 8080)
        .expect("create pod");
    cp.set_pod_ready("default", name, &[ip(addr)])
        .expect("pod ready");
}

/// Pod `name` on `node` labelled `app=APP`, Ready with `addr`.
fn app_pod(cp: &ControlPlane, name: &str, node: &str, addr: &str, app: &str) {
    cp.create_pod("default", name, node, &[("app", app)], 8080)
        .expect("create pod");
    cp.set_pod_ready("default", name, &[ip(addr)])
        .expect("pod ready");
}

/// A GET of `/` from `from` to `to`: the status and the body.
fn http_get(from: &Host, to: SocketAddr) -> std::io::Result<(u16, String)> {
    let mut s = from.run(move || TcpStream::connect_timeout(&to, Duration::from_secs(3)))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {text:?}")))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_owned()))
}

/// Service `name` of namespace `default`, as JSON.
fn service_json(cp: &ControlPlane, name: &str) -> serde_json::Value {
    cp.get_json(&["get", "service", name, "-n", "default"])
        .expect("get service")
}

const SERVICE: &str = r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "echo", "namespace": "default"},
 "spec": {"type": "NodePort", "selector": {"app": "echo"},
          "ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}"#;

/// A Service with two ready pods is programmed from the real API server:
/// its ClusterIP on the node and its NodePort from another host reach both
/// pods; rvsadm lists the services and refuses to change them, naming the
/// owner; a pod that turns Terminating drains (weight 0: no new connection
/// reaches it while a ready pod exists, its open connection keeps working);
/// a Service that goes away is removed.
#[test]
fn kubernetes_service_through_rvsd() {
    let test = "kubernetes_service_through_rvsd";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, client) = bed_with_node("k8s");
    let pods = [("pod1", "10.81.0.11"), ("pod2", "10.81.0.12")];
    pod_servers(&mut bed, &pods);
    nodes(&cp, &[("node1", "10.81.0.1")]);
    for (name, addr) in pods {
        pod(&cp, name, "node1", addr);
    }
    cp.apply(SERVICE).expect("create service");
    let (cip, node_port) = service_addrs(&cp, "default", "echo");
    let node_port = node_port.expect("a NodePort");
    let cluster = SocketAddr::new(cip, 80);
    let external = SocketAddr::new(ip("10.81.0.1"), node_port);

    let n = Node::start(&cp, &node, "node1", "proxy", &[]);
    let d = &n.rvsd;
    within("the Service's two endpoints in rvsadm -Ln", WAIT, || {
        real_servers(d, cluster).len() == 2 && real_servers(d, external).len() == 2
    });

    // The ClusterIP from the node, the NodePort from another host.
    for (from, to) in [(&node, cluster), (&client, external)] {
        let (seen, failed) = spread(from, to, 20, Duration::from_secs(3));
        assert_eq!(failed, 0, "{to}: {seen:?}");
        assert_eq!(
            seen.keys().map(String::as_str).collect::<Vec<_>>(),
            vec!["pod1", "pod2"],
            "{to}: both pods answer"
        );
    }

    // Owned by Kubernetes: listed, and refused to rvsadm with the owner named.
    let out = d.adm(&format!("-d -t {cluster} -r 10.81.0.11:8080"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rvsadm changed a Kubernetes service");
    assert!(err.contains("owned by kubernetes"), "{err}");
    assert_eq!(real_servers(d, cluster).len(), 2);

    // pod1 turns Terminating with a connection open to it.
    let mut open = loop {
        let c = connect(&node, cluster, Duration::from_secs(3)).expect("connect");
        if c.server == "pod1" {
            break c;
        }
    };
    cp.delete_pod("default", "pod1", 300).expect("delete pod1");
    within("pod1 at weight 0", WAIT, || {
        real_servers(d, cluster).contains(&("10.81.0.11:8080".to_owned(), 0))
    });
    let (seen, failed) = spread(&node, cluster, 20, Duration::from_secs(3));
    assert_eq!((failed, seen.get("pod1")), (0, None), "{seen:?}");
    open.echo("still served", Duration::from_secs(3))
        .expect("the terminating pod's connection goes on");

    // The Service goes: rvsd removes it.
    cp.kubectl(&["delete", "service", "echo", "-n", "default"], None)
        .expect("delete service");
    within("the Service gone from rvsadm -Ln", WAIT, || {
        !d.ok("-Ln").contains(&cluster.to_string())
    });
}

/// `/metrics` from inside `host`'s namespace.
fn scrape(host: &Host, addr: SocketAddr) -> String {
    host.run(move || {
        let mut s = TcpStream::connect(addr).expect("connect /metrics");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    })
}

/// A metric's value in a scrape.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The API server out of reach: what is programmed keeps serving and stays
/// in the table (no flap while the watch is down, none when it comes back
/// and re-lists), and the change made meanwhile arrives once it is back;
/// `/metrics` counts the syncs and the services.
#[test]
fn kubernetes_api_server_lost_and_back_without_a_flap() {
    let test = "kubernetes_api_server_lost_and_back_without_a_flap";
    let Some(cp) = setup(test) else { return };
    let (mut bed, node, _client) = bed_with_node_on("k8sapi", "10.82.0");
    pod_servers(&mut bed, &[("pod1", "10.82.0.11"), ("pod2", "10.82.0.12")]);
    nodes(&cp, &[("node1", "10.82.0.1")]);
    pod(&cp, "pod1", "node1", "10.82.0.11");
    cp.apply(SERVICE).expect("create service");
    let (cip, _) = service_addrs(&cp, "default", "echo");
    let cluster = SocketAddr::new(cip, 80);
    let http = SocketAddr::new(ip("127.0.0.1"), 9180);
    let n = Node::start(&cp, &node, "node1", "proxy", &["--http", "127.0.0.1:9180"]);
    let d = &n.rvsd;
    within("pod1 programmed", WAIT, || {
        real_servers(d, cluster).len() == 1
    });
    let m = scrape(&node, http);
    assert!(
        metric(&m, "rvs_kubernetes_syncs_total").unwrap_or(0) >= 1,
        "{m}"
    );
    assert!(
        metric(&m, "rvs_kubernetes_services").unwrap_or(0) >= 1,
        "{m}"
    );

    n.relay.cut(true);
    // A change while the node cannot see it.
    pod(&cp, "pod2", "node1", "10.82.0.12");
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < deadline {
        assert_eq!(
            real_servers(d, cluster),
            vec![("10.82.0.11:8080".to_owned(), 1)],
            "the table holds while the API server is away"
        );
        let (seen, failed) = spread(&node, cluster, 2, Duration::from_secs(3));
        assert_eq!((failed, seen.get("pod1")), (0, Some(&2)), "{seen:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    n.relay.cut(false);
    // Back: pod2 arrives; pod1 is never taken out on the way.
    within(
        "pod2 programmed after the API server is back",
        Duration::from_secs(60),
        || {
            let rs = real_servers(d, cluster);
            assert!(
                rs.contains(&("10.82.0.11:8080".to_owned(), 1)),
                "pod1 flapped out while the watch re-listed: {rs:?}"
            );
            rs.len() == 2
        },
    );
    let (seen, failed) = spread(&node, cluster, 20, Duration::from_secs(3));
    assert_eq!(failed, 0, "{seen:?}");
    assert_eq!(seen.len(), 2, "{seen:?}");
}
