//! `kube_bench` (ignored: run by `scripts/bench-k8s`, never by the suite):
//! `rvsd --kubernetes` with two data planes, `--dataplane proxy` (the
//! kernel's sockets, two handshakes in userspace) and `--dataplane sock`
//! (connect-time balancing for the clients in its `--cgroup`, Cilium's
//! shape for clients on the node: no per-packet work), beside the real
//! kube-proxy of the same release (`--proxy-mode nftables` and
//! `--proxy-mode iptables`), each in a node namespace of its own on one
//! bed, all on the same real API server (`rvs_testbed::k8s`), alternated
//! in a fixed order (rvs, rvs-sock, nft, ipt; `KBENCH_KINDS` picks some).
//!
//! Every connection measured is made by the same code ([`hello`]) in a
//! client process of the same kind ([`kbench_client`], this test binary
//! again) in the node's namespace; the sock plane's node runs it in the
//! cgroup rvsd is attached to, the others in the test's own.
//!
//! 1. Time from a change to the first connection from the node that
//!    reaches the pod it concerns, two kinds of change: (a) a new Service
//!    selecting a ready pod, POSTed to the API server, to its ClusterIP;
//!    (b) a new endpoint: a Pod of an existing Service (whose one pod
//!    stays) made ready (its status PATCHed as a kubelet would; the clock
//!    starts there), the real EndpointSlice controller adding it to the
//!    slice, to the first connection the new pod answers (connections the
//!    old pod answers are followed by the next at once). All proxies run;
//!    each change is measured on one of them in turn (rvs, rvs-sock, nft,
//!    ipt, rvs, …); changes are 1.5 s apart (after the previous Service's
//!    or pod's deletion), so kube-proxy's default minimum sync period (1 s
//!    between the end of one sync and the start of the next, both modes)
//!    has passed, as on a node that is not churning; under churn
//!    kube-proxy adds up to 1 s, rvs up to 20 ms. Each change concerns
//!    one Service, the one connected to: its answer is the change synced.
//! 2. Initial sync at scale: `KBENCH_SERVICES` Services with
//!    `KBENCH_ENDPOINTS` endpoints each (EndpointSlices created directly,
//!    `endpointslice.kubernetes.io/managed-by: bench`, 2 POSTs per Service
//!    over `KBENCH_CREATORS` connections: linear) plus one probe Service
//!    on the real pod; with a list of sizes the set grows to each in turn
//!    and phases 2 and 3 run at each. 20 of the set's Services (the
//!    first, the last, evenly spaced between: [`ScaleSet`]) have endpoints
//!    that answer. Each proxy is started alone on a flushed node and timed
//!    from its start to "synced": the probe and then each sampled Service
//!    polled until it answers from one of its endpoints, the time the last
//!    did. The probe's first answer alone is printed beside it, as the
//!    old figure: it proves the whole set written only for a proxy that
//!    writes it in one transaction (kube-proxy), not for rvsd's sock
//!    plane, whose worker applies the Services one by one. Then its CPU
//!    seconds (with waited-for children: kube-proxy's
//!    `iptables-restore`/`nft`) and, after the latency phase and the
//!    burst, its peak RSS (VmHWM).
//!    The burst (`KBENCH_BURST`, default 100, 0 skips it), after phase 3
//!    in every round: the EndpointSlices of that many Services spread over
//!    the set and of the 20 sampled ones are PATCHed one after the other
//!    (the sampled ones to endpoints at other addresses, the others to
//!    another port), timed from the first PATCH to the last sampled
//!    Service answering from its new endpoints ("changes -> synced").
//! 3. With that set in place, connect + request + response latency to the
//!    probe Service over `KBENCH_CONNS` connections from the node (right
//!    after synced, or `KBENCH_SETTLE` seconds later),
//!    with the proxy's CPU seconds meanwhile and, with `KBENCH_BPF_STATS`
//!    (which sets `kernel.bpf_stats_enabled` for the run), the run count
//!    and mean run time of each BPF program rvsd holds.
//! 4. Interleaved latency (`KBENCH_BLOCKS` rounds, default 6, 0 skips it,
//!    of `KBENCH_BLOCK_CONNS` connections, default 250): every proxy
//!    started at once and synced, then a block of connections on each in
//!    turn, the order rotating every round, so that a slow change of the
//!    machine's load hits every proxy alike; per pair, the median and
//!    quartiles of the per-round p50 ratios.
//!
//! Environment: `KBENCH_CHANGES` (of each kind per proxy, default 100;
//! 0 skips phase 1), `KBENCH_SERVICES` (2000, or an ascending list such as
//! `1000,10000`), `KBENCH_ENDPOINTS` (4, at most 10; services × endpoints at most
//! 64,000), `KBENCH_BURST` (100), `KBENCH_CREATORS` (8), `KBENCH_ROUNDS` (sync + latency rounds per proxy, 3),
//! `KBENCH_CONNS` (2000), `KBENCH_KINDS` (`rvs,rvs-sock,nft,ipt`, default
//! all), `KBENCH_RVSD` (an rvsd binary, e.g. a release build; default the
//! test's debug build), `KBENCH_CPU` (a `taskset` CPU list for the
//! proxies; default none).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
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
    Sock,
    Nft,
    Ipt,
}

const ALL_KINDS: [Kind; 4] = [Kind::Rvs, Kind::Sock, Kind::Nft, Kind::Ipt];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Rvs => "rvsd --dataplane proxy",
            Kind::Sock => "rvsd --dataplane sock",
            Kind::Nft => "kube-proxy nftables",
            Kind::Ipt => "kube-proxy iptables",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Kind::Rvs => "rvs",
            Kind::Sock => "rvs-sock",
            Kind::Nft => "nft",
            Kind::Ipt => "ipt",
        }
    }
    fn addr(self) -> &'static str {
        match self {
            Kind::Rvs => "10.83.0.1",
            Kind::Nft => "10.83.0.2",
            Kind::Ipt => "10.83.0.3",
            Kind::Sock => "10.83.0.4",
        }
    }
    fn is_rvs(self) -> bool {
        matches!(self, Kind::Rvs | Kind::Sock)
    }
    fn node(self) -> String {
        format!("node-{}", self.short())
    }
}

const POD: &str = "10.83.0.11";
/// The new pods of the new-endpoint changes take turns on these addresses
/// (10.83.0.20 + i % 200), all on one host whose server answers with the
/// address the connection reached.
const NEW_PODS: usize = 200;

fn new_pod_ip(i: usize) -> String {
    format!("10.83.0.{}", 20 + i % NEW_PODS)
}

/// The kinds to run: `KBENCH_KINDS` (`rvs,rvs-sock,nft,ipt`, any subset,
/// run in that fixed order), default all.
fn kinds() -> Vec<Kind> {
    let Ok(list) = std::env::var("KBENCH_KINDS") else {
        return ALL_KINDS.to_vec();
    };
    let want: Vec<&str> = list.split(',').map(str::trim).collect();
    for w in &want {
        assert!(
            ALL_KINDS.iter().any(|k| k.short() == *w),
            "KBENCH_KINDS: unknown kind {w} (rvs, rvs-sock, nft, ipt)"
        );
    }
    ALL_KINDS
        .into_iter()
        .filter(|k| want.contains(&k.short()))
        .collect()
}

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

/// The BPF programs `pid` holds open, by program id: run count and run
/// time (ns) from `/proc/PID/fdinfo` (both stay 0 unless
/// `kernel.bpf_stats_enabled` is 1: `KBENCH_BPF_STATS`). Empty for a
/// kube-proxy.
fn bpf_runs(pid: u32) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in dir.flatten() {
        let is_prog =
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf-prog");
        if !is_prog {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            e.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let field = |name: &str| {
            info.lines().find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        };
        if let Some(id) = field("prog_id") {
            out.insert(
                id as u32,
                (
                    field("run_cnt").unwrap_or(0),
                    field("run_time_ns").unwrap_or(0),
                ),
            );
        }
    }
    out
}

/// What the BPF programs ran between two [`bpf_runs`], as a suffix of a
/// round's line: per program that ran, its runs and mean ns per run, and
/// the total ns per connection over `conns` connections. Empty when
/// nothing was counted.
fn bpf_delta(
    before: &BTreeMap<u32, (u64, u64)>,
    after: &BTreeMap<u32, (u64, u64)>,
    conns: usize,
) -> String {
    let mut out = String::new();
    let mut total = 0u64;
    for (id, (cnt, ns)) in after {
        let (c0, n0) = before.get(id).copied().unwrap_or_default();
        let (dc, dn) = (cnt.saturating_sub(c0), ns.saturating_sub(n0));
        if dc == 0 {
            continue;
        }
        total += dn;
        out.push_str(&format!(", prog {id} {dc} runs {} ns/run", dn / dc));
    }
    if total > 0 {
        out.push_str(&format!(
            ", bpf {} ns/connection",
            total / conns.max(1) as u64
        ));
    }
    out
}

/// `kernel.bpf_stats_enabled` set to 1 while it lives (the kernel then
/// counts every BPF program's runs and run time, at two clock reads per
/// run), restored on drop.
struct BpfStats {
    old: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> BpfStats {
        let old = std::fs::read_to_string(BPF_STATS).unwrap_or_else(|_| "0".into());
        std::fs::write(BPF_STATS, "1").expect("enabling kernel.bpf_stats_enabled");
        BpfStats { old }
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, self.old.trim());
    }
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
    call_as(port, method, path, "application/json", body)
}

/// [`call`] with the body's content type (a PATCH's patch type).
fn call_as(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect kubectl proxy");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n\
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
/// An empty `name` answers with the local address the connection reached
/// instead (one server for the new pods' addresses). Stops on drop.
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
                let name = if name.is_empty() {
                    s.local_addr()
                        .map(|a| a.ip().to_string())
                        .unwrap_or_default()
                } else {
                    name.clone()
                };
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

/// Poll `to` every `every` until a pod named in `want` (one name or a
/// comma-separated list) answers, bounded by `limit`: whether it did. A
/// connection that another pod answered is followed by the next one at
/// once (the new endpoint is balanced among the old ones).
fn poll(to: SocketAddr, want: &str, every: Duration, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        match hello(to, Duration::from_millis(500)) {
            Some(name) if want.split(',').any(|w| w == name) => return true,
            Some(_) => {}
            None => std::thread::sleep(every),
        }
    }
    false
}

/// `conns` connections to `to`, one at a time, after 50 unmeasured ones:
/// the microseconds of each that succeeded, and how many failed.
fn latency(to: SocketAddr, conns: usize) -> (Vec<f64>, usize) {
    for _ in 0..50 {
        let _ = hello(to, Duration::from_secs(2));
    }
    let mut v = Vec::with_capacity(conns);
    let mut failed = 0;
    for _ in 0..conns {
        let t = Instant::now();
        match hello(to, Duration::from_secs(2)) {
            Some(_) => v.push(t.elapsed().as_secs_f64() * 1e6),
            None => failed += 1,
        }
    }
    (v, failed)
}

/// The bench's client: not a test, the process that [`Client`] starts in
/// a node's namespace (and, for the sock plane, in the cgroup it is
/// attached to, which a thread cannot join alone). Reads commands on stdin
/// (`poll ADDR WANT EVERY_MS LIMIT_MS`, `lat ADDR CONNS`) and answers each
/// with one line starting `KB ` on stdout. Does nothing without
/// `KBENCH_CLIENT` (its name keeps it out of `kube_bench`'s filter).
#[test]
#[ignore = "the client process of kube_bench, started by it"]
fn kbench_client() {
    use std::io::BufRead;
    if std::env::var_os("KBENCH_CLIENT").is_none() {
        return;
    }
    let ms = |v: &str| Duration::from_millis(v.parse().expect("milliseconds"));
    let addr = |v: &str| -> SocketAddr { v.parse().expect("address") };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let w: Vec<&str> = line.split_whitespace().collect();
        let reply = match w.as_slice() {
            ["poll", to, want, every, limit] => {
                if poll(addr(to), want, ms(every), ms(limit)) {
                    "KB ok".to_owned()
                } else {
                    "KB timeout".to_owned()
                }
            }
            ["lat", to, conns] => {
                let (v, failed) = latency(addr(to), conns.parse().expect("count"));
                let v: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
                format!("KB {failed} {}", v.join(" "))
            }
            _ => format!("KB error: {line}"),
        };
        println!("{reply}");
        let _ = std::io::stdout().flush();
    }
}

/// A [`kbench_client`] process in a node's namespace (and `cgroup`, when
/// given): every kind's connections are made by the same code in the same
/// kind of process. Killed on drop.
struct Client {
    proc: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Client {
    fn start(host: &Host, cgroup: Option<&Path>) -> Client {
        let exe = std::env::current_exe().expect("the test binary");
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--", "nsenter"])
            .arg(format!("--net=/var/run/netns/{}", host.ns));
        if let Some(cg) = cgroup {
            cmd.args([
                "sh",
                "-c",
                r#"echo $$ > "$0/cgroup.procs" && shift && exec "$@""#,
            ])
            .arg(cg)
            .arg("--");
        }
        cmd.arg(exe)
            .args([
                "kbench_client",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("KBENCH_CLIENT", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut proc = cmd.spawn().expect("spawn the bench client");
        let stdin = proc.stdin.take().expect("client stdin");
        let stdout = std::io::BufReader::new(proc.stdout.take().expect("client stdout"));
        Client {
            proc,
            stdin,
            stdout,
        }
    }

    /// Send one command; its `KB ` answer (the rest of the line).
    fn ask(&mut self, cmd: &str) -> String {
        use std::io::BufRead;
        writeln!(self.stdin, "{cmd}").expect("write to the bench client");
        self.stdin.flush().expect("flush the bench client");
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .expect("read the bench client");
            assert!(n > 0, "the bench client exited");
            if let Some((_, rest)) = line.split_once("KB ") {
                return rest.trim_end().to_owned();
            }
        }
    }

    /// Poll `to` until `want` answers (see [`poll`]): the time since `t0`
    /// when it did.
    fn poll(
        &mut self,
        to: SocketAddr,
        want: &str,
        t0: Instant,
        every: Duration,
        limit: Duration,
    ) -> Option<Duration> {
        let got = self.ask(&format!(
            "poll {to} {want} {} {}",
            every.as_millis(),
            limit.saturating_sub(t0.elapsed()).as_millis()
        ));
        (got == "ok").then(|| t0.elapsed())
    }

    /// [`Client::poll`] each of `targets` (address, wanted names) in turn:
    /// the time since `t0` when the last answered, so that every one of
    /// them was served by then (`None` if one never was).
    fn poll_all(
        &mut self,
        targets: &[(SocketAddr, String)],
        t0: Instant,
        every: Duration,
        limit: Duration,
    ) -> Option<Duration> {
        let mut last = None;
        for (to, want) in targets {
            last = Some(self.poll(*to, want, t0, every, limit)?);
        }
        last
    }

    /// See [`latency`].
    fn latency(&mut self, to: SocketAddr, conns: usize) -> (Vec<f64>, usize) {
        let got = self.ask(&format!("lat {to} {conns}"));
        let mut w = got.split_whitespace();
        let failed = w.next().and_then(|f| f.parse().ok()).unwrap_or(conns);
        (w.filter_map(|x| x.parse().ok()).collect(), failed)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// A node: its namespace, its relay to the API server, its kubeconfig, and
/// the proxy when running.
struct Node {
    kind: Kind,
    host: Host,
    /// Before `cgroup`: its process leaves the cgroup before it is removed.
    client: Client,
    /// The sock plane's cgroup (its clients run in it).
    cgroup: Option<rvs_testbed::Cgroup>,
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
        let cgroup = (kind == Kind::Sock).then(|| rvs_testbed::Cgroup::new("rvskbench"));
        let client = Client::start(&host, cgroup.as_ref().map(|c| c.path()));
        Node {
            kind,
            host,
            client,
            cgroup,
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
            Kind::Rvs | Kind::Sock => {
                let rvsd = std::env::var("KBENCH_RVSD").unwrap_or_else(|_| RVSD.to_owned());
                let sock = self.dir.path().join("rvsd.sock");
                let _ = std::fs::remove_file(&sock);
                let plane = if self.kind == Kind::Sock {
                    "sock"
                } else {
                    "proxy"
                };
                args.extend([
                    rvsd.into(),
                    "--dataplane".into(),
                    plane.into(),
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
                if let Some(cg) = &self.cgroup {
                    args.extend(["--cgroup".into(), cg.path().into()]);
                }
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

/// Every (rvs kind, kube-proxy kind) pair among `kinds`, for the ratios.
fn pairs(kinds: &[Kind]) -> Vec<(Kind, Kind)> {
    let rvs = kinds.iter().filter(|k| k.is_rvs());
    rvs.flat_map(|r| kinds.iter().filter(|k| !k.is_rvs()).map(move |k| (*r, *k)))
        .collect()
}

/// Record one change's latency `t` (`None`: it never connected) for
/// `kind`: a line `KIND MS` in `raw` (NaN when it never connected) and, when
/// it did, the milliseconds in `lat`.
fn record(lat: &mut BTreeMap<Kind, Vec<f64>>, raw: &mut String, kind: Kind, t: Option<Duration>) {
    let ms = t.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    raw.push_str(&format!("{} {ms:.1}\n", kind.short()));
    if t.is_some() {
        lat.entry(kind).or_default().push(ms);
    }
}

/// A change table: per proxy, the times of its `changes` changes.
fn print_changes(
    title: &str,
    kinds: &[Kind],
    changes: usize,
    mut lat: BTreeMap<Kind, Vec<f64>>,
    raw: &str,
) {
    println!("\n## {title}");
    println!("load average {}", loadavg());
    println!("| proxy | n | median | p90 | p99 | max | failed |");
    println!("|---|---|---|---|---|---|---|");
    let mut med = BTreeMap::new();
    for &kind in kinds {
        let v = sorted(lat.remove(&kind).unwrap_or_default());
        med.insert(kind, (pct(&v, 50.0), pct(&v, 99.0)));
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
    for (rk, kind) in pairs(kinds) {
        println!(
            "{} / {}: median {:.2}x, p99 {:.2}x",
            rk.short(),
            kind.label(),
            med[&rk].0 / med[&kind].0,
            med[&rk].1 / med[&kind].1
        );
    }
    println!("raw (proxy ms, in order):\n{raw}");
}

/// How many Services of the scale set are probed for "synced": spread over
/// the whole set ([`spread`]).
const SAMPLE: usize = 20;
/// The sampled Services' endpoints take their addresses from two sets of
/// ten on the pods' host (10.83.0.230-239, 10.83.0.240-249), one per
/// generation: a change moves a sampled Service to the other set.
const LIVE_ADDRS: usize = 10;

/// `k` of the indices `0..n`, evenly spaced, the first and the last
/// included (all of them when `n <= k`).
fn spread(n: usize, k: usize) -> Vec<usize> {
    match k {
        _ if n <= k => (0..n).collect(),
        0 => Vec::new(),
        1 => vec![n - 1],
        _ => (0..k).map(|j| j * (n - 1) / (k - 1)).collect(),
    }
}

#[test]
fn kbench_spread_takes_first_last_and_evenly_spaced() {
    assert_eq!(spread(2000, 5), [0, 499, 999, 1499, 1999]);
    assert_eq!(spread(3, 20), [0, 1, 2]);
    assert_eq!(spread(10, 1), [9]);
    assert!(spread(10, 0).is_empty());
    let s = spread(10_000, SAMPLE);
    assert_eq!((s.len(), s[0], s[SAMPLE - 1]), (SAMPLE, 0, 9_999));
    assert!(s.windows(2).all(|w| w[0] < w[1]));
}

/// The scale set: Services `svc-NNNNN` without selectors, each with one
/// EndpointSlice (`endpointslice.kubernetes.io/managed-by: bench`) of
/// `n_ep` ready endpoints. Most endpoints are addresses in 10.85.0.0/16,
/// distinct across Services and never connected to; the Services sampled
/// at any of the sizes ([`spread`] of [`SAMPLE`]) get addresses on the
/// pods' host instead, whose server answers with the address reached, so
/// that a connection to such a Service's ClusterIP tells whether the proxy
/// under test has written it, and with which endpoints.
struct ScaleSet {
    n_ep: usize,
    /// Services whose endpoints answer.
    live: std::collections::BTreeSet<usize>,
    /// Services changed an odd number of times (second generation).
    flipped: std::collections::BTreeSet<usize>,
    /// The ClusterIPs of the `live` Services created so far.
    cips: BTreeMap<usize, IpAddr>,
}

impl ScaleSet {
    fn new(sizes: &[usize], n_ep: usize) -> ScaleSet {
        assert!(
            n_ep <= LIVE_ADDRS,
            "KBENCH_ENDPOINTS: at most {LIVE_ADDRS} (the sampled Services' endpoints)"
        );
        ScaleSet {
            n_ep,
            live: sizes.iter().flat_map(|&n| spread(n, SAMPLE)).collect(),
            flipped: Default::default(),
            cips: BTreeMap::new(),
        }
    }

    /// The pods' host's addresses that sampled Services use.
    fn live_addrs() -> impl Iterator<Item = String> {
        (0..2 * LIVE_ADDRS).map(|k| format!("10.83.0.{}", 230 + k))
    }

    /// Service `i`'s endpoint addresses and port now: a change of a
    /// sampled Service moves it to the other address set; of another, to
    /// the other port (8080, 8081), its addresses staying.
    fn endpoints(&self, i: usize) -> (Vec<String>, u16) {
        let generation = usize::from(self.flipped.contains(&i));
        if self.live.contains(&i) {
            let addrs = (0..self.n_ep)
                .map(|j| {
                    format!(
                        "10.83.0.{}",
                        230 + generation * LIVE_ADDRS + (i + j) % LIVE_ADDRS
                    )
                })
                .collect();
            (addrs, 8080)
        } else {
            let addrs = (0..self.n_ep)
                .map(|j| {
                    let k = i * self.n_ep + j;
                    format!("10.85.{}.{}", k / 250, k % 250 + 1)
                })
                .collect();
            (addrs, 8080 + generation as u16)
        }
    }

    /// The `endpoints` and `ports` of Service `i`'s slice now.
    fn slice_fields(&self, i: usize) -> (Value, Value) {
        let (addrs, port) = self.endpoints(i);
        let endpoints: Vec<Value> = addrs
            .iter()
            .map(|a| {
                json!({"addresses": [a],
                       "conditions": {"ready": true, "serving": true, "terminating": false}})
            })
            .collect();
        (
            Value::Array(endpoints),
            json!([{"name": "web", "port": port, "protocol": "TCP"}]),
        )
    }

    /// Service `i`'s EndpointSlice.
    fn slice(&self, i: usize) -> Value {
        let name = format!("svc-{i:05}");
        let (endpoints, ports) = self.slice_fields(i);
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-bench"), "namespace": "default",
                "labels": {"kubernetes.io/service-name": name,
                           "endpointslice.kubernetes.io/managed-by": "bench"}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        })
    }

    /// What "synced" is checked on at `n_svc` Services: the sampled
    /// Services' ClusterIPs (port 80), each with the comma-separated
    /// addresses of its current endpoints, the one of which that answers.
    fn targets(&self, n_svc: usize) -> Vec<(SocketAddr, String)> {
        spread(n_svc, SAMPLE)
            .into_iter()
            .map(|i| {
                let cip = *self.cips.get(&i).expect("a sampled Service's ClusterIP");
                (SocketAddr::new(cip, 80), self.endpoints(i).0.join(","))
            })
            .collect()
    }

    /// Create Services `from..to`, each with its EndpointSlice, over
    /// `creators` connections in parallel (the API server and etcd are the
    /// bound: 2 POSTs per Service). Prints its progress every tenth.
    fn create(&mut self, port: u16, from: usize, to: usize, creators: usize) {
        let done = std::sync::atomic::AtomicUsize::new(0);
        let t0 = Instant::now();
        let step = ((to - from) / 10).max(1);
        let this = &*self;
        let cips: Vec<(usize, IpAddr)> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..creators.max(1))
                .map(|t| {
                    let done = &done;
                    scope.spawn(move || {
                        let mut cips = Vec::new();
                        for i in (from + t..to).step_by(creators.max(1)) {
                            let name = format!("svc-{i:05}");
                            let cip = create_service(port, &name, None);
                            if this.live.contains(&i) {
                                cips.push((i, cip));
                            }
                            let (status, body) = call(
                                port,
                                "POST",
                                "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
                                Some(&this.slice(i)),
                            );
                            assert_eq!(status, 201, "create slice {name}: {body}");
                            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                            if n.is_multiple_of(step) {
                                println!(
                                    "  created {} of {} services ({:.0} s)",
                                    from + n,
                                    to,
                                    t0.elapsed().as_secs_f64()
                                );
                            }
                        }
                        cips
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().expect("creating the scale set"))
                .collect()
        });
        self.cips.extend(cips);
    }

    /// The change burst at `n_svc` Services: the slices of [`spread`]`(n_svc,
    /// count)` and of every sampled Service PATCHed one after the other, in
    /// index order (sampled ones to the other address set, the others to
    /// the other port): when it began, and how many changed.
    fn burst(&mut self, port: u16, n_svc: usize, count: usize) -> (Instant, usize) {
        let changed: std::collections::BTreeSet<usize> = spread(n_svc, count)
            .into_iter()
            .chain(spread(n_svc, SAMPLE))
            .collect();
        let t0 = Instant::now();
        for &i in &changed {
            if !self.flipped.remove(&i) {
                self.flipped.insert(i);
            }
            let (endpoints, ports) = self.slice_fields(i);
            let (status, body) = call_as(
                port,
                "PATCH",
                &format!(
                    "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/svc-{i:05}-bench"
                ),
                "application/merge-patch+json",
                Some(&json!({"endpoints": endpoints, "ports": ports})),
            );
            assert_eq!(status, 200, "change slice of svc-{i:05}: {body}");
        }
        (t0, changed.len())
    }
}

/// `KBENCH_SERVICES`: one size or an ascending comma-separated list
/// (`1000,10000`), each measured in turn as the set grows.
fn sizes() -> Vec<usize> {
    let list = std::env::var("KBENCH_SERVICES").unwrap_or_else(|_| "2000".into());
    let v: Vec<usize> = list
        .split(',')
        .map(|x| {
            x.trim()
                .parse()
                .unwrap_or_else(|_| panic!("KBENCH_SERVICES: not a number: {x}"))
        })
        .collect();
    assert!(
        !v.is_empty() && v.windows(2).all(|w| w[0] < w[1]),
        "KBENCH_SERVICES: one size or an ascending list"
    );
    v
}

/// Phases 1 and 1b (see the module's documentation): `changes` of each
/// kind per proxy, every proxy running, each change measured on one in turn.
fn change_phases(
    cp: &ControlPlane,
    api: u16,
    nodes: &mut BTreeMap<Kind, Node>,
    kinds: &[Kind],
    changes: usize,
    pod_node: &str,
) {
    // ---- 1. change -> first connection, all running.
    for n in nodes.values_mut() {
        n.start(cp);
    }
    let cip = create_service(api, "warm", Some("target"));
    for n in nodes.values_mut() {
        let t = n.client.poll(
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
    delete_service(api, "warm");
    std::thread::sleep(Duration::from_millis(1500));
    let mut lat: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
    let mut raw1 = String::new();
    for i in 0..changes * kinds.len() {
        let kind = kinds[i % kinds.len()];
        let name = format!("lat-{i}");
        let t0 = Instant::now();
        let cip = create_service(api, &name, Some("target"));
        let t = nodes.get_mut(&kind).unwrap().client.poll(
            SocketAddr::new(cip, 80),
            "target",
            t0,
            Duration::from_millis(2),
            Duration::from_secs(20),
        );
        record(&mut lat, &mut raw1, kind, t);
        delete_service(api, &name);
        std::thread::sleep(Duration::from_millis(1500));
    }
    print_changes(
        "1. Service created -> first connection reaching its pod (ms)",
        kinds,
        changes,
        lat,
        &raw1,
    );

    // ---- 1b. new endpoint -> first connection reaching it, all running.
    // Service "grow" keeps the target pod; each change makes a new pod of
    // it ready (created Pending before the clock starts; the clock runs
    // from the status PATCH, as a kubelet's readiness report), the real
    // EndpointSlice controller adds it to the slice, and the node's client
    // connects until the new pod answers. The pod is then deleted at once
    // (grace 0) and the next change waits 1.5 s.
    let grow = SocketAddr::new(create_service(api, "grow", Some("target")), 80);
    for n in nodes.values_mut() {
        let t = n.client.poll(
            grow,
            "target",
            Instant::now(),
            Duration::from_millis(50),
            Duration::from_secs(60),
        );
        assert!(t.is_some(), "{} never served Service grow", n.kind.label());
    }
    let mut lat: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
    let mut raw1 = String::new();
    for i in 0..changes * kinds.len() {
        let kind = kinds[i % kinds.len()];
        let name = format!("ep-{i}");
        let ip = new_pod_ip(i);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "target"}},
            "spec": {"nodeName": pod_node, "containers": [{
                "name": "app", "image": "rvs-testbed.invalid/none",
                "ports": [{"name": "p8080", "containerPort": 8080, "protocol": "TCP"}]}]},
        });
        let (status, body) = call(api, "POST", "/api/v1/namespaces/default/pods", Some(&pod));
        assert_eq!(status, 201, "create pod {name}: {body}");
        let ready = json!({"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}],
        }});
        let t0 = Instant::now();
        let (status, body) = call_as(
            api,
            "PATCH",
            &format!("/api/v1/namespaces/default/pods/{name}/status"),
            "application/merge-patch+json",
            Some(&ready),
        );
        assert_eq!(status, 200, "pod {name} ready: {body}");
        let t = nodes.get_mut(&kind).unwrap().client.poll(
            grow,
            &ip,
            t0,
            Duration::from_millis(2),
            Duration::from_secs(20),
        );
        record(&mut lat, &mut raw1, kind, t);
        call(
            api,
            "DELETE",
            &format!("/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0"),
            None,
        );
        std::thread::sleep(Duration::from_millis(1500));
    }
    delete_service(api, "grow");
    print_changes(
        "1b. Endpoint added (pod ready) -> first connection reaching it (ms)",
        kinds,
        changes,
        lat,
        &raw1,
    );
    for n in nodes.values_mut() {
        n.stop();
    }
}

/// One proxy's row of a latency table: its pooled connection times
/// (sorted, µs), the p50 of each round, one more column, the failures.
struct LatencyRow {
    kind: Kind,
    pooled: Vec<f64>,
    p50: Vec<f64>,
    extra: String,
    failed: usize,
}

/// A latency table (phases 3 and 4): per proxy, n, pooled p50, p90, p99,
/// the per-round p50s, `extra` (its column's title) and the failures.
fn print_latency_table(extra: &str, rows: &[LatencyRow]) {
    println!("| proxy | n | p50 | p90 | p99 | per-round p50 | {extra} | failed |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:?} | {} | {} |",
            r.kind.label(),
            r.pooled.len(),
            pct(&r.pooled, 50.0),
            pct(&r.pooled, 90.0),
            pct(&r.pooled, 99.0),
            r.p50.iter().map(|x| x.round()).collect::<Vec<_>>(),
            r.extra,
            r.failed
        );
    }
}

/// Phases 2 and 3 at `n_svc` Services of `n_ep` endpoints (the set in
/// place): per round, each proxy started alone on its flushed node and
/// timed to the probe's first answer and to the last of the sample's
/// ([`ScaleSet::targets`], the probe included), then `conns` connections,
/// then (`burst` > 0) a burst of changes timed to the last of the sample
/// answering from its new endpoints.
#[allow(clippy::too_many_arguments)]
fn scale_phase(
    cp: &ControlPlane,
    api: u16,
    nodes: &mut BTreeMap<Kind, Node>,
    kinds: &[Kind],
    set: &mut ScaleSet,
    probe: SocketAddr,
    n_svc: usize,
    rounds: usize,
    conns: usize,
    burst: usize,
) {
    #[derive(Default)]
    struct Round {
        sync_s: Vec<f64>,
        probe_s: Vec<f64>,
        change_s: Vec<f64>,
        cpu_s: Vec<f64>,
        hwm_mib: Vec<f64>,
        lat_us: Vec<f64>,
        p50: Vec<f64>,
        p99: Vec<f64>,
        /// The proxy's CPU seconds per second during the latency phase.
        cpu_lat: Vec<f64>,
        failed: usize,
    }
    let n_ep = set.n_ep;
    let mut res: BTreeMap<Kind, Round> = BTreeMap::new();
    let mut raw2 = String::new();
    let mut n_changes = 0;
    let settle = Duration::from_secs(env_usize("KBENCH_SETTLE", 0) as u64);
    let secs = |t: Option<Duration>| t.map_or(f64::NAN, |d| d.as_secs_f64());
    for round in 0..rounds {
        for &kind in kinds {
            let mut targets = vec![(probe, "target".to_owned())];
            targets.extend(set.targets(n_svc));
            let node = nodes.get_mut(&kind).unwrap();
            let t0 = Instant::now();
            node.start(cp);
            let (every, limit) = (Duration::from_millis(10), Duration::from_secs(600));
            // The probe alone first (the figure this bench used to give),
            // then every sampled Service: the set is synced when the last
            // of them answers.
            let probe_s = secs(node.client.poll(probe, "target", t0, every, limit));
            let sync_s = secs(node.client.poll_all(&targets, t0, every, limit));
            let pid = node.pid();
            let cpu = cpu_secs(pid);
            if settle > Duration::ZERO {
                std::thread::sleep(settle);
            }
            // Latency: warm-up, then `conns` connections, one at a time;
            // the proxy's CPU seconds and BPF programs' runs meanwhile.
            let (cpu0, bpf0, t_lat) = (cpu_secs(pid), bpf_runs(pid), Instant::now());
            let (v, failed) = node.client.latency(probe, conns);
            let lat_s = t_lat.elapsed().as_secs_f64();
            let cpu_lat = cpu_secs(pid) - cpu0;
            let bpf = bpf_delta(&bpf0, &bpf_runs(pid), conns + 50);
            // The burst: the sampled Services (all changed) polled until
            // each answers from its new endpoints (connections still
            // reaching an old one are followed by the next at once).
            let change_s = if burst > 0 {
                let (tb, n) = set.burst(api, n_svc, burst);
                n_changes = n;
                let changed = set.targets(n_svc);
                secs(node.client.poll_all(
                    &changed,
                    tb,
                    Duration::from_millis(2),
                    Duration::from_secs(120),
                ))
            } else {
                f64::NAN
            };
            let hwm = status_kib(pid, "VmHWM") as f64 / 1024.0;
            let v = sorted(v);
            let r = res.entry(kind).or_default();
            r.sync_s.push(sync_s);
            r.probe_s.push(probe_s);
            r.change_s.push(change_s);
            r.cpu_s.push(cpu);
            r.hwm_mib.push(hwm);
            r.p50.push(pct(&v, 50.0));
            r.p99.push(pct(&v, 99.0));
            r.lat_us.extend(&v);
            r.failed += failed;
            r.cpu_lat.push(cpu_lat / lat_s);
            let line = format!(
                "round {round} {}: synced {sync_s:.2} s (probe {probe_s:.2} s), \
                 {n_changes} changes synced {change_s:.3} s, cpu {cpu:.2} s, \
                 VmHWM {hwm:.1} MiB, latency p50 {:.0} us p99 {:.0} us, failed {failed}, \
                 proxy cpu during latency {cpu_lat:.2} s in {lat_s:.1} s{bpf}, load {}",
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
    let sampled = spread(n_svc, SAMPLE).len();
    println!(
        "\n## 2. Initial sync, {n_svc} services x {n_ep} endpoints (median of {rounds} rounds)"
    );
    println!(
        "synced: the last of {sampled} Services spread over the set (first, last, evenly \
         spaced) and the probe answering; probe: the probe Service's first answer alone"
    );
    println!(
        "| proxy | start -> synced (s) | start -> probe answers (s) | {n_changes} changes -> \
         synced (s) | CPU s to synced | peak RSS (MiB) | proxy CPU s/s during latency |"
    );
    println!("|---|---|---|---|---|---|---|");
    for kind in kinds {
        let r = &res[kind];
        println!(
            "| {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.1} | {:.3} |",
            kind.label(),
            med(&r.sync_s),
            med(&r.probe_s),
            med(&r.change_s),
            med(&r.cpu_s),
            med(&r.hwm_mib),
            med(&r.cpu_lat)
        );
    }
    println!(
        "\n## 3. Connect + request + response, {n_svc} services x {n_ep} endpoints (us, all rounds pooled)"
    );
    let rows: Vec<LatencyRow> = kinds
        .iter()
        .map(|kind| {
            let r = &res[kind];
            LatencyRow {
                kind: *kind,
                pooled: sorted(r.lat_us.clone()),
                p50: r.p50.clone(),
                extra: format!("{:?}", r.p99.iter().map(|x| x.round()).collect::<Vec<_>>()),
                failed: r.failed,
            }
        })
        .collect();
    print_latency_table("per-round p99", &rows);
    for (rk, kind) in pairs(kinds) {
        let rv = &res[&rk];
        let rl = sorted(rv.lat_us.clone());
        let k = &res[&kind];
        let kl = sorted(k.lat_us.clone());
        println!(
            "{} / {}: sync {:.2}x, change {:.2}x, CPU {:.2}x, RSS {:.2}x, latency p50 {:.2}x, p99 {:.2}x",
            rk.short(),
            kind.label(),
            med(&rv.sync_s) / med(&k.sync_s),
            med(&rv.change_s) / med(&k.change_s),
            med(&rv.cpu_s) / med(&k.cpu_s),
            med(&rv.hwm_mib) / med(&k.hwm_mib),
            pct(&rl, 50.0) / pct(&kl, 50.0),
            pct(&rl, 99.0) / pct(&kl, 99.0)
        );
    }
    println!("raw rounds:\n{raw2}load average at the end {}", loadavg());
}

/// Phase 4 at `n_svc` Services of `n_ep` endpoints (see the module's
/// documentation): every proxy started at once and waited for (each of
/// `targets` answering: the probe and the sample), then
/// `blocks` rounds of `per_block` connections on each proxy in turn (the
/// order rotating every round), so that a slow change of the machine's
/// load hits every proxy alike; per pair, the median and quartiles of the
/// ratios of the p50s measured in the same round.
#[allow(clippy::too_many_arguments)]
fn interleaved_phase(
    cp: &ControlPlane,
    nodes: &mut BTreeMap<Kind, Node>,
    kinds: &[Kind],
    targets: &[(SocketAddr, String)],
    n_svc: usize,
    n_ep: usize,
    blocks: usize,
    per_block: usize,
) {
    let probe = targets[0].0;
    for &kind in kinds {
        nodes.get_mut(&kind).unwrap().start(cp);
    }
    for &kind in kinds {
        let t = nodes.get_mut(&kind).unwrap().client.poll_all(
            targets,
            Instant::now(),
            Duration::from_millis(10),
            Duration::from_secs(900),
        );
        assert!(
            t.is_some(),
            "{} never served the probe and the sample",
            kind.label()
        );
    }
    // The last to sync has just written its tables.
    std::thread::sleep(Duration::from_secs(5));
    let cpu0: BTreeMap<Kind, f64> = kinds
        .iter()
        .map(|k| (*k, cpu_secs(nodes[k].pid())))
        .collect();
    let t0 = Instant::now();
    let mut p50: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
    let mut pooled: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
    let mut failed: BTreeMap<Kind, usize> = BTreeMap::new();
    for b in 0..blocks {
        for i in 0..kinds.len() {
            let kind = kinds[(b + i) % kinds.len()];
            let (v, f) = nodes
                .get_mut(&kind)
                .unwrap()
                .client
                .latency(probe, per_block);
            let v = sorted(v);
            p50.entry(kind).or_default().push(pct(&v, 50.0));
            pooled.entry(kind).or_default().extend(v);
            *failed.entry(kind).or_default() += f;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "\n## 4. Connect + request + response, interleaved: {blocks} rounds of {per_block} \
         connections per proxy, all running, {n_svc} services x {n_ep} endpoints (us); \
         load average {}",
        loadavg()
    );
    let rows: Vec<LatencyRow> = kinds
        .iter()
        .map(|kind| LatencyRow {
            kind: *kind,
            pooled: sorted(pooled.remove(kind).unwrap_or_default()),
            p50: p50[kind].clone(),
            extra: format!("{:.3}", (cpu_secs(nodes[kind].pid()) - cpu0[kind]) / secs),
            failed: failed[kind],
        })
        .collect();
    print_latency_table("proxy CPU s/s", &rows);
    for r in rows {
        pooled.insert(r.kind, r.pooled);
    }
    for (rk, kind) in pairs(kinds) {
        let ratios = sorted(
            p50[&rk]
                .iter()
                .zip(&p50[&kind])
                .map(|(a, b)| a / b)
                .collect(),
        );
        let ahead = ratios.iter().filter(|r| **r < 1.0).count();
        println!(
            "{} / {}: p50 ratio per round median {:.2}x (quartiles {:.2}x-{:.2}x, range \
             {:.2}x-{:.2}x), ahead in {ahead} of {}; pooled p50 {:.2}x, p99 {:.2}x",
            rk.short(),
            kind.label(),
            pct(&ratios, 50.0),
            pct(&ratios, 25.0),
            pct(&ratios, 75.0),
            ratios.first().copied().unwrap_or(f64::NAN),
            ratios.last().copied().unwrap_or(f64::NAN),
            ratios.len(),
            pct(&pooled[&rk], 50.0) / pct(&pooled[&kind], 50.0),
            pct(&pooled[&rk], 99.0) / pct(&pooled[&kind], 99.0)
        );
    }
    for n in nodes.values_mut() {
        n.stop();
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
    let sizes = sizes();
    let n_ep = env_usize("KBENCH_ENDPOINTS", 4);
    let creators = env_usize("KBENCH_CREATORS", 8);
    let rounds = env_usize("KBENCH_ROUNDS", 3);
    let conns = env_usize("KBENCH_CONNS", 2000);
    let blocks = env_usize("KBENCH_BLOCKS", 6);
    let block_conns = env_usize("KBENCH_BLOCK_CONNS", 250);
    let burst = env_usize("KBENCH_BURST", 100);
    let _stats = std::env::var_os("KBENCH_BPF_STATS")
        .is_some()
        .then(BpfStats::enable);
    let kinds = kinds();
    let names: Vec<&str> = kinds.iter().map(|k| k.short()).collect();
    println!(
        "kube_bench: {} | {changes} changes of each kind per proxy, {:?} services x \
         {n_ep} endpoints, {rounds} rounds, {conns} connections; load average {}",
        names.join(", "),
        sizes,
        loadavg()
    );
    // The scale set's endpoint addresses are 10.85.X.Y with X < 256.
    assert!(
        sizes.iter().all(|n| n * n_ep <= 250 * 256),
        "at most 64,000 endpoints (10.85.0.0/16)"
    );
    let mut set = ScaleSet::new(&sizes, n_ep);
    let work = TempDir::new("rvs-kbench");
    let api = Api::start(&cp, work.path());

    let mut bed = Bed::new("kb");
    let pod_host = bed.host("target", &format!("{POD}/24"));
    let _server = Server::start(
        &pod_host,
        SocketAddr::new(POD.parse().unwrap(), 8080),
        "target",
    );
    // The new pods' addresses, on one host.
    let pods_host = bed.host("pods", &format!("{}/24", new_pod_ip(0)));
    for i in 1..NEW_PODS.min(changes * kinds.len()) {
        pods_host.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{}/32", new_pod_ip(i)),
            "dev",
            "eth0",
        ]);
    }
    // The sampled scale Services' endpoints, on the same host.
    for a in ScaleSet::live_addrs() {
        pods_host.exec(&["ip", "addr", "add", &format!("{a}/32"), "dev", "eth0"]);
    }
    let _new_pods = Server::start(
        &pods_host,
        SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 8080),
        "",
    );
    let mut nodes: BTreeMap<Kind, Node> = BTreeMap::new();
    for &kind in &kinds {
        let host = bed.host(kind.short(), &format!("{}/24", kind.addr()));
        // The ClusterIP range is local on every node (rvs's proxy plane
        // accepts there; kube-proxy DNATs in OUTPUT and the route is looked
        // up again; the sock plane rewrites connect() before any route),
        // with the node's address as the source.
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
    let pod_node = kinds[0].node();
    cp.create_pod("default", "target", &pod_node, &[("app", "target")], 8080)
        .expect("create pod");
    cp.set_pod_ready("default", "target", &[POD.parse().unwrap()])
        .expect("pod ready");

    if changes > 0 {
        change_phases(&cp, api.port, &mut nodes, &kinds, changes, &pod_node);
    }

    // ---- 2 + 3. initial sync at scale, then latency, one proxy at a time,
    // for each size as the set grows.
    let mut created = 0;
    let mut probe = None;
    for &n_svc in &sizes {
        let t = Instant::now();
        set.create(api.port, created, n_svc, creators);
        println!(
            "created {} services + {} endpoints in {:.1} s ({n_svc} x {n_ep} in place)",
            n_svc - created,
            (n_svc - created) * n_ep,
            t.elapsed().as_secs_f64()
        );
        created = n_svc;
        let probe = *probe.get_or_insert_with(|| {
            let probe = SocketAddr::new(create_service(api.port, "probe", Some("target")), 80);
            cp.wait_endpoints("default", "probe", Duration::from_secs(60), |e| {
                !e.is_empty()
            })
            .expect("the probe's endpoint");
            probe
        });
        scale_phase(
            &cp, api.port, &mut nodes, &kinds, &mut set, probe, n_svc, rounds, conns, burst,
        );
        if blocks > 0 {
            let mut targets = vec![(probe, "target".to_owned())];
            targets.extend(set.targets(n_svc));
            interleaved_phase(
                &cp,
                &mut nodes,
                &kinds,
                &targets,
                n_svc,
                n_ep,
                blocks,
                block_conns,
            );
        }
    }
    // The relays, proxies and bed go on drop.
    for n in nodes.values() {
        let _ = &n.relay;
    }
}
