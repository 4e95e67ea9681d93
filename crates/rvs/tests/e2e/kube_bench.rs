//! `kube_bench` (ignored: run by `scripts/bench-k8s`, never by the suite):
//! `rvsd --dataplane proxy --kubernetes` beside the real kube-proxy of the
//! same release (`--proxy-mode nftables` and `--proxy-mode iptables`), each
//! in a node namespace of its own on one bed, all on the same real API
//! server (`rvs_testbed::k8s`), alternated in a fixed order.
//!
//! 1. Time from a change (a new Service selecting a ready pod, POSTed to the
//!    API server) to the first connection from the node to its ClusterIP
//!    that reaches the pod. All three proxies run; each change is measured
//!    on one of them in turn (rvs, nftables, iptables, rvs, …); changes are
//!    1.5 s apart (after the previous Service's deletion), so kube-proxy's
//!    default minimum sync period (1 s between the end of one sync and the
//!    start of the next, both modes) has passed, as on a node that is not
//!    churning; under churn kube-proxy adds up to 1 s, rvs up to 20 ms.
//! 2. Initial sync at scale: `KBENCH_SERVICES` Services with
//!    `KBENCH_ENDPOINTS` endpoints each (EndpointSlices created directly,
//!    `endpointslice.kubernetes.io/managed-by: bench`) plus one probe
//!    Service on the real pod; each proxy is started alone on a flushed
//!    node and timed from its start to the probe's first answer (both wait
//!    for their initial lists before the first table, so the probe answering
//!    means the whole set is programmed); its CPU seconds (with waited-for
//!    children: kube-proxy's `iptables-restore`/`nft`) then, and its peak
//!    RSS (VmHWM) after the latency phase.
//! 3. With that set in place, connect + request + response latency to the
//!    probe Service over `KBENCH_CONNS` connections from the node.
//!
//! Environment: `KBENCH_CHANGES` (per proxy, default 100),
//! `KBENCH_SERVICES` (2000), `KBENCH_ENDPOINTS` (4), `KBENCH_ROUNDS` (sync +
//! latency rounds per proxy, 3), `KBENCH_CONNS` (2000), `KBENCH_RVSD` (an
//! rvsd binary, e.g. a release build; default the test's debug build),
//! `KBENCH_CPU` (a `taskset` CPU list for the proxies; default none).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rvs_testbed::k8s::ControlPlane;
use rvs_testbed::{Bed, Host};
use serde_json::{Value, json};

use crate::harness::{RVSD, TempDir, free_port};
use crate::kubernetes::Relay;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Rvs,
    Nft,
    Ipt,
}

const KINDS: [Kind; 3] = [Kind::Rvs, Kind::Nft, Kind::Ipt];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Rvs => "rvsd --dataplane proxy",
            Kind::Nft => "kube-proxy nftables",
            Kind::Ipt => "kube-proxy iptables",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Kind::Rvs => "rvs",
            Kind::Nft => "nft",
            Kind::Ipt => "ipt",
        }
    }
    fn addr(self) -> &'static str {
        match self {
            Kind::Rvs => "10.83.0.1",
            Kind::Nft => "10.83.0.2",
            Kind::Ipt => "10.83.0.3",
        }
    }
    fn node(self) -> String {
        format!("node-{}", self.short())
    }
}

const POD: &str = "10.83.0.11";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A child killed (and reaped) on drop; started under `setpriv --pdeathsig
/// KILL` so it also dies with the test process.
struct Proc {
    child: Child,
}

impl Proc {
    fn spawn(args: &[&std::ffi::OsStr], log: &Path) -> Proc {
        let log = File::create(log).expect("log file");
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn");
        Proc { child }
    }
    /// setpriv and nsenter exec: this is the proxy's own pid.
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds of `pid` (user + system, with its waited-for children).
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let ticks: u64 = (11..=14)
        .filter_map(|i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    ticks as f64 / 100.0
}

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The API server through `kubectl proxy` on the host's loopback (plain
/// HTTP, so a change is one request timed here, not a kubectl start-up).
struct Api {
    port: u16,
    _proc: Proc,
}

impl Api {
    fn start(cp: &ControlPlane, dir: &Path) -> Api {
        let port = free_port();
        let proc = Proc::spawn(
            &[
                cp.bin().join("kubectl").as_os_str(),
                "--kubeconfig".as_ref(),
                cp.kubeconfig().as_os_str(),
                "proxy".as_ref(),
                "--address=127.0.0.1".as_ref(),
                format!("--port={port}").as_ref(),
            ],
            &dir.join("kubectl-proxy.log"),
        );
        let end = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "kubectl proxy did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Api { port, _proc: proc }
    }
}

/// One HTTP/1.0 request to the kubectl proxy: status and parsed body.
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect kubectl proxy");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("request");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, body)
}

fn service(name: &str, selector: Option<&str>) -> Value {
    let mut spec =
        json!({"ports": [{"name": "web", "port": 80, "targetPort": 8080, "protocol": "TCP"}]});
    if let Some(app) = selector {
        spec["selector"] = json!({"app": app});
    }
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn create_service(port: u16, name: &str, selector: Option<&str>) -> IpAddr {
    let (status, body) = call(
        port,
        "POST",
        "/api/v1/namespaces/default/services",
        Some(&service(name, selector)),
    );
    assert_eq!(status, 201, "create service {name}: {body}");
    body["spec"]["clusterIP"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("clusterIP")
}

fn delete_service(port: u16, name: &str) {
    call(
        port,
        "DELETE",
        &format!("/api/v1/namespaces/default/services/{name}"),
        None,
    );
    // No garbage collector runs: the controller's slices are deleted here.
    call(
        port,
        "DELETE",
        &format!(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name%3D{name}"
        ),
        None,
    );
}

/// The pod's server: per connection, one request line read and one
/// response written at once (`NAME\n` + the request), TCP_NODELAY, a
/// blocking accept (the bed's `Bed::server` polls its accept every 2 ms and
/// writes twice, which would hide the per-packet costs measured here).
/// Stops on drop.
struct Server {
    stop: Arc<AtomicBool>,
    host: Host,
    addr: SocketAddr,
}

impl Server {
    fn start(host: &Host, addr: SocketAddr, name: &str) -> Server {
        let listener = host.run(move || TcpListener::bind(addr).expect("server bind"));
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, name) = (stop.clone(), name.to_owned());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut s) = s else { continue };
                let name = name.clone();
                std::thread::spawn(move || {
                    let _ = s.set_nodelay(true);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut req = Vec::new();
                    let mut buf = [0u8; 256];
                    while !req.contains(&b'\n') {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let mut resp = format!("{name}\n").into_bytes();
                    resp.extend_from_slice(&req);
                    let _ = s.write_all(&resp);
                    // Until the client closes.
                    let _ = s.read(&mut buf);
                });
            }
        });
        Server {
            stop,
            host: host.clone(),
            addr,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let addr = self.addr;
        let _ = self
            .host
            .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(1)));
    }
}

/// One connection from the current thread's namespace: the server's name
/// line, then `ping\n` echoed.
fn hello(to: SocketAddr, timeout: Duration) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&to, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.write_all(b"ping\n").ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.iter().filter(|b| **b == b'\n').count() < 2 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got);
    let (name, rest) = text.split_once('\n')?;
    (rest == "ping\n").then(|| name.to_owned())
}

/// Poll `to` from `host` every `every` until the pod `want` answers (bounded
/// by `limit`): the time since `t0`.
fn poll(
    host: &Host,
    to: SocketAddr,
    want: &str,
    t0: Instant,
    every: Duration,
    limit: Duration,
) -> Option<Duration> {
    let want = want.to_owned();
    host.run(move || {
        while t0.elapsed() < limit {
            if hello(to, Duration::from_millis(500)).as_deref() == Some(want.as_str()) {
                return Some(t0.elapsed());
            }
            std::thread::sleep(every);
        }
        None
    })
}

/// A node: its namespace, its relay to the API server, its kubeconfig, and
/// the proxy when running.
struct Node {
    kind: Kind,
    host: Host,
    relay: Relay,
    dir: TempDir,
    kubeconfig: PathBuf,
    proc: Option<Proc>,
    starts: usize,
}

impl Node {
    fn new(kind: Kind, cp: &ControlPlane, host: Host) -> Node {
        let upstream: SocketAddr = cp
            .server()
            .trim_start_matches("https://")
            .parse()
            .expect("API server address");
        let relay = Relay::start(&host, upstream);
        let dir = TempDir::new(&format!("rvs-kbench-{}", kind.short()));
        let text = std::fs::read_to_string(cp.kubeconfig()).expect("kubeconfig");
        let kubeconfig = dir.write(
            "kubeconfig",
            &text.replace(cp.server(), &format!("https://127.0.0.1:{}", relay.port)),
        );
        Node {
            kind,
            host,
            relay,
            dir,
            kubeconfig,
            proc: None,
            starts: 0,
        }
    }

    /// Flush the namespace's nftables (kube-proxy's tables, iptables-nft's
    /// too) and start the proxy: a fresh node.
    fn start(&mut self, cp: &ControlPlane) {
        self.stop();
        self.host.exec(&["nft", "flush", "ruleset"]);
        let ns = format!("--net=/var/run/netns/{}", self.host.ns);
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if let Ok(cpus) = std::env::var("KBENCH_CPU") {
            args.extend(["taskset".into(), "-c".into(), cpus.into()]);
        }
        args.extend(["nsenter".into(), ns.into()]);
        let node = self.kind.node();
        match self.kind {
            Kind::Rvs => {
                let rvsd = std::env::var("KBENCH_RVSD").unwrap_or_else(|_| RVSD.to_owned());
                let sock = self.dir.path().join("rvsd.sock");
                let _ = std::fs::remove_file(&sock);
                args.extend([
                    rvsd.into(),
                    "--dataplane".into(),
                    "proxy".into(),
                    "--log-level".into(),
                    "warn".into(),
                    "--kubernetes".into(),
                    "--kubeconfig".into(),
                    self.kubeconfig.clone().into(),
                    "--node-name".into(),
                    node.into(),
                    "--socket".into(),
                    sock.into(),
                ]);
            }
            Kind::Nft | Kind::Ipt => {
                let mode = if self.kind == Kind::Nft {
                    "nftables"
                } else {
                    "iptables"
                };
                args.push(cp.bin().join("kube-proxy").into());
                for a in [
                    format!("--proxy-mode={mode}"),
                    format!("--kubeconfig={}", self.kubeconfig.display()),
                    format!("--hostname-override={node}"),
                    "--cluster-cidr=10.244.0.0/16".into(),
                    // Inside the node's namespace.
                    "--metrics-bind-address=127.0.0.1:10249".into(),
                    "--healthz-bind-address=127.0.0.1:10256".into(),
                    // Leave the host-wide conntrack sysctls alone.
                    "--conntrack-max-per-core=0".into(),
                    "--conntrack-tcp-timeout-established=0".into(),
                    "--conntrack-tcp-timeout-close-wait=0".into(),
                    "--v=1".into(),
                ] {
                    args.push(a.into());
                }
            }
        }
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        self.starts += 1;
        let log = self
            .dir
            .path()
            .join(format!("{}-{}.log", self.kind.short(), self.starts));
        self.proc = Some(Proc::spawn(&refs, &log));
    }

    fn stop(&mut self) {
        self.proc = None;
    }

    fn pid(&self) -> u32 {
        self.proc.as_ref().map_or(0, Proc::pid)
    }
}

/// Nearest-rank percentile of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[i.clamp(1, v.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Create `n` Services without selectors, each with one EndpointSlice of
/// `e` ready endpoints (addresses in 10.85.0.0/16, never connected to),
/// over four connections in parallel.
fn create_scale(port: u16, n: usize, e: usize) {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in (t..n).step_by(4) {
                    let name = format!("svc-{i:05}");
                    create_service(port, &name, None);
                    let endpoints: Vec<Value> = (0..e)
                        .map(|j| {
                            let k = i * e + j;
                            json!({"addresses": [format!("10.85.{}.{}", k / 250, k % 250 + 1)],
                                   "conditions": {"ready": true, "serving": true, "terminating": false}})
                        })
                        .collect();
                    let slice = json!({
                        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                        "metadata": {"name": format!("{name}-bench"), "namespace": "default",
                            "labels": {"kubernetes.io/service-name": name,
                                       "endpointslice.kubernetes.io/managed-by": "bench"}},
                        "addressType": "IPv4",
                        "ports": [{"name": "web", "port": 8080, "protocol": "TCP"}],
                        "endpoints": endpoints,
                    });
                    let (status, body) = call(
                        port,
                        "POST",
                        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
                        Some(&slice),
                    );
                    assert_eq!(status, 201, "create slice {name}: {body}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("creating the scale set");
    }
}

#[test]
#[ignore = "a benchmark: scripts/bench-k8s"]
fn kube_bench() {
    let test = "kube_bench";
    if !rvs_testbed::require_root(test, "network namespaces need root")
        || !rvs_testbed::require_tools(test, &["ip", "nsenter", "ethtool", "nft", "setpriv"])
    {
        return;
    }
    let Some(cp) = ControlPlane::start_or_skip(test) else {
        return;
    };
    let changes = env_usize("KBENCH_CHANGES", 100);
    let n_svc = env_usize("KBENCH_SERVICES", 2000);
    let n_ep = env_usize("KBENCH_ENDPOINTS", 4);
    let rounds = env_usize("KBENCH_ROUNDS", 3);
    let conns = env_usize("KBENCH_CONNS", 2000);
    println!(
        "kube_bench: {changes} changes per proxy, {n_svc} services x {n_ep} endpoints, \
         {rounds} rounds, {conns} connections; load average {}",
        loadavg()
    );
    let work = TempDir::new("rvs-kbench");
    let api = Api::start(&cp, work.path());

    let mut bed = Bed::new("kb");
    let pod_host = bed.host("target", &format!("{POD}/24"));
    let _server = Server::start(
        &pod_host,
        SocketAddr::new(POD.parse().unwrap(), 8080),
        "target",
    );
    let mut nodes: BTreeMap<Kind, Node> = BTreeMap::new();
    for kind in KINDS {
        let host = bed.host(kind.short(), &format!("{}/24", kind.addr()));
        // The ClusterIP range is local on every node (rvs accepts there;
        // kube-proxy DNATs in OUTPUT and the route is looked up again), with
        // the node's address as the source.
        host.exec(&[
            "ip",
            "route",
            "add",
            "local",
            "10.96.0.0/16",
            "dev",
            "lo",
            "src",
            kind.addr(),
        ]);
        cp.create_node(&kind.node(), kind.addr().parse().unwrap(), None)
            .expect("create node");
        nodes.insert(kind, Node::new(kind, &cp, host));
    }
    cp.create_pod("default", "target", "node-rvs", &[("app", "target")], 8080)
        .expect("create pod");
    cp.set_pod_ready("default", "target", &[POD.parse().unwrap()])
        .expect("pod ready");

    // ---- 1. change -> first connection, all three running.
    for n in nodes.values_mut() {
        n.start(&cp);
    }
    let cip = create_service(api.port, "warm", Some("target"));
    for n in nodes.values() {
        let t = poll(
            &n.host,
            SocketAddr::new(cip, 80),
            "target",
            Instant::now(),
            Duration::from_millis(50),
            Duration::from_secs(180),
        );
        assert!(
            t.is_some(),
            "{} never served the warm-up Service",
            n.kind.label()
        );
    }
    delete_service(api.port, "warm");
    std::thread::sleep(Duration::from_millis(1500));
    let mut lat: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
    let mut raw1 = String::new();
    for i in 0..changes * KINDS.len() {
        let kind = KINDS[i % KINDS.len()];
        let name = format!("lat-{i}");
        let t0 = Instant::now();
        let cip = create_service(api.port, &name, Some("target"));
        let t = poll(
            &nodes[&kind].host,
            SocketAddr::new(cip, 80),
            "target",
            t0,
            Duration::from_millis(2),
            Duration::from_secs(20),
        );
        let ms = t.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        raw1.push_str(&format!("{} {ms:.1}\n", kind.short()));
        if let Some(d) = t {
            lat.entry(kind).or_default().push(d.as_secs_f64() * 1e3);
        }
        delete_service(api.port, &name);
        std::thread::sleep(Duration::from_millis(1500));
    }
    println!("\n## 1. Service created -> first connection reaching its pod (ms)");
    println!("load average {}", loadavg());
    println!("| proxy | n | median | p90 | p99 | max | failed |");
    println!("|---|---|---|---|---|---|---|");
    let mut med1 = BTreeMap::new();
    for kind in KINDS {
        let v = sorted(lat.remove(&kind).unwrap_or_default());
        med1.insert(kind, (pct(&v, 50.0), pct(&v, 99.0)));
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            kind.label(),
            v.len(),
            pct(&v, 50.0),
            pct(&v, 90.0),
            pct(&v, 99.0),
            v.last().copied().unwrap_or(f64::NAN),
            changes - v.len()
        );
    }
    for kind in [Kind::Nft, Kind::Ipt] {
        println!(
            "rvs / {}: median {:.2}x, p99 {:.2}x",
            kind.label(),
            med1[&Kind::Rvs].0 / med1[&kind].0,
            med1[&Kind::Rvs].1 / med1[&kind].1
        );
    }
    println!("raw (proxy ms, in order):\n{raw1}");
    for n in nodes.values_mut() {
        n.stop();
    }

    // ---- 2 + 3. initial sync at scale, then latency, one proxy at a time.
    let t = Instant::now();
    create_scale(api.port, n_svc, n_ep);
    println!(
        "created {n_svc} services + {} endpoints in {:.1} s",
        n_svc * n_ep,
        t.elapsed().as_secs_f64()
    );
    let probe = SocketAddr::new(create_service(api.port, "probe", Some("target")), 80);
    cp.wait_endpoints("default", "probe", Duration::from_secs(60), |e| {
        !e.is_empty()
    })
    .expect("the probe's endpoint");
    #[derive(Default)]
    struct Round {
        sync_s: Vec<f64>,
        cpu_s: Vec<f64>,
        hwm_mib: Vec<f64>,
        lat_us: Vec<f64>,
        p50: Vec<f64>,
        p99: Vec<f64>,
        failed: usize,
    }
    let mut res: BTreeMap<Kind, Round> = BTreeMap::new();
    let mut raw2 = String::new();
    for round in 0..rounds {
        for kind in KINDS {
            let node = nodes.get_mut(&kind).unwrap();
            let t0 = Instant::now();
            node.start(&cp);
            let synced = poll(
                &node.host,
                probe,
                "target",
                t0,
                Duration::from_millis(10),
                Duration::from_secs(600),
            );
            let pid = node.pid();
            let cpu = cpu_secs(pid);
            let sync_s = synced.map_or(f64::NAN, |d| d.as_secs_f64());
            // Latency: warm-up, then `conns` connections, one at a time.
            let v = node.host.run(move || {
                for _ in 0..50 {
                    let _ = hello(probe, Duration::from_secs(2));
                }
                let mut v = Vec::with_capacity(conns);
                let mut failed = 0;
                for _ in 0..conns {
                    let t = Instant::now();
                    match hello(probe, Duration::from_secs(2)) {
                        Some(_) => v.push(t.elapsed().as_secs_f64() * 1e6),
                        None => failed += 1,
                    }
                }
                (v, failed)
            });
            let hwm = status_kib(pid, "VmHWM") as f64 / 1024.0;
            let (v, failed) = v;
            let v = sorted(v);
            let r = res.entry(kind).or_default();
            r.sync_s.push(sync_s);
            r.cpu_s.push(cpu);
            r.hwm_mib.push(hwm);
            r.p50.push(pct(&v, 50.0));
            r.p99.push(pct(&v, 99.0));
            r.lat_us.extend(&v);
            r.failed += failed;
            let line = format!(
                "round {round} {}: sync {sync_s:.2} s, cpu {cpu:.2} s, VmHWM {hwm:.1} MiB, \
                 latency p50 {:.0} us p99 {:.0} us, failed {failed}, load {}",
                kind.short(),
                pct(&v, 50.0),
                pct(&v, 99.0),
                loadavg()
            );
            println!("{line}");
            raw2.push_str(&line);
            raw2.push('\n');
            node.stop();
        }
    }
    let med = |v: &[f64]| pct(&sorted(v.to_vec()), 50.0);
    println!(
        "\n## 2. Initial sync, {n_svc} services x {n_ep} endpoints (median of {rounds} rounds)"
    );
    println!("| proxy | start -> probe answers (s) | CPU s then | peak RSS (MiB) |");
    println!("|---|---|---|---|");
    for kind in KINDS {
        let r = &res[&kind];
        println!(
            "| {} | {:.2} | {:.2} | {:.1} |",
            kind.label(),
            med(&r.sync_s),
            med(&r.cpu_s),
            med(&r.hwm_mib)
        );
    }
    println!(
        "\n## 3. Connect + request + response, {n_svc} services x {n_ep} endpoints (us, all rounds pooled)"
    );
    println!("| proxy | n | p50 | p90 | p99 | per-round p50 | per-round p99 | failed |");
    println!("|---|---|---|---|---|---|---|---|");
    for kind in KINDS {
        let r = &res[&kind];
        let v = sorted(r.lat_us.clone());
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:?} | {:?} | {} |",
            kind.label(),
            v.len(),
            pct(&v, 50.0),
            pct(&v, 90.0),
            pct(&v, 99.0),
            r.p50.iter().map(|x| x.round()).collect::<Vec<_>>(),
            r.p99.iter().map(|x| x.round()).collect::<Vec<_>>(),
            r.failed
        );
    }
    let rv = &res[&Kind::Rvs];
    let rl = sorted(rv.lat_us.clone());
    for kind in [Kind::Nft, Kind::Ipt] {
        let k = &res[&kind];
        let kl = sorted(k.lat_us.clone());
        println!(
            "rvs / {}: sync {:.2}x, CPU {:.2}x, RSS {:.2}x, latency p50 {:.2}x, p99 {:.2}x",
            kind.label(),
            med(&rv.sync_s) / med(&k.sync_s),
            med(&rv.cpu_s) / med(&k.cpu_s),
            med(&rv.hwm_mib) / med(&k.hwm_mib),
            pct(&rl, 50.0) / pct(&kl, 50.0),
            pct(&rl, 99.0) / pct(&kl, 99.0)
        );
    }
    println!("raw rounds:\n{raw2}load average at the end {}", loadavg());
    // The relays, proxies and bed go on drop.
    for n in nodes.values() {
        let _ = &n.relay;
    }
}
