//! A real Kubernetes control plane for tests (TESTBED.md, "A real Kubernetes
//! control plane"): etcd, kube-apiserver and kube-controller-manager running
//! the EndpointSlice controllers, built from their Go modules by
//! `scripts/k8s-binaries`.
//!
//! [`ControlPlane::start`] runs the three on loopback, each on ports picked
//! free at run time (several control planes run side by side in parallel
//! tests), in a temp directory of their own, and writes a kubeconfig usable
//! by `kubectl` and by kube-rs clients. Dropping the [`ControlPlane`] kills
//! every process and removes the directory, also when the test panics.
//!
//! There is no kubelet and no scheduler: a test creates Node objects, Pods
//! with `nodeName` set, and patches the Pods' status by hand (pod IPs,
//! `Ready`). A Pod deleted with a grace period then stays `Terminating`
//! (nothing confirms its end), which is how terminating endpoints are made.
//! Without the ServiceAccount controller, the `ServiceAccount` admission
//! plugin is turned off, so Pods need no service account.
//!
//! The helpers drive the `kubectl` that was built beside the servers
//! (`kubectl apply -f -` with a manifest on stdin, `kubectl patch
//! --subresource=status`), as an operator would.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{skip_or_fail, unique_name};

/// The Kubernetes version the test bed builds and runs.
pub const K8S_VERSION: &str = "v1.37.2";
/// Where `scripts/k8s-binaries` puts the binaries.
pub const DEFAULT_BIN_DIR: &str = "/var/cache/rvs-k8s/v1.37.2/bin";
/// The variable naming another directory with the binaries.
pub const BIN_ENV: &str = "RVS_K8S_BIN";
/// Set to `1` to keep a control plane's temp directory (logs, etcd data,
/// kubeconfig) after it is dropped; its path is printed.
pub const KEEP_ENV: &str = "RVS_K8S_KEEP";
/// The binaries a control plane needs (kube-proxy is built too, for tests
/// that run it, but not started here).
pub const BINARIES: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
];
/// The apiserver's service CIDRs (`--service-cluster-ip-range`): IPv4
/// first, so IPv4 is a single-stack Service's family.
pub const SERVICE_CIDRS: &str = "10.96.0.0/16,fd00:96::/112";
/// The controllers kube-controller-manager runs.
pub const CONTROLLERS: &str = "endpointslice,endpointslicemirroring";
/// How long each server gets to become ready.
const START_LIMIT: Duration = Duration::from_secs(120);
/// Bound on every kubectl request.
const KUBECTL_TIMEOUT: &str = "--request-timeout=30s";
/// Lines of each log shown when start-up fails.
const LOG_TAIL: usize = 25;

/// What went wrong starting or talking to a control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Some binaries are not built.
    #[error(
        "Kubernetes binaries missing in {}: {} (scripts/k8s-binaries builds them; {BIN_ENV} names another directory)",
        dir.display(),
        missing.join(", ")
    )]
    Missing {
        /// The directory searched.
        dir: PathBuf,
        /// The binaries not found there.
        missing: Vec<String>,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A server exited or did not become ready in time.
    #[error("{process} did not start: {reason}\n{logs}")]
    Start {
        /// etcd, kube-apiserver or kube-controller-manager.
        process: &'static str,
        /// Why.
        reason: String,
        /// The tail of every server's log.
        logs: String,
    },
    /// kubectl failed.
    #[error("kubectl {args}: {output}")]
    Kubectl {
        /// Its arguments after `--kubeconfig`.
        args: String,
        /// What it printed.
        output: String,
    },
    /// kubectl printed something that is not the JSON expected.
    #[error("kubectl {args}: unexpected output: {reason}")]
    Output {
        /// Its arguments.
        args: String,
        /// What did not parse.
        reason: String,
    },
    /// Generating the service-account key failed.
    #[error("service-account key: {0}")]
    Key(#[from] rcgen::Error),
}

/// The module's result.
pub type Result<T> = std::result::Result<T, Error>;

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The directory with the binaries: `$RVS_K8S_BIN`, else [`DEFAULT_BIN_DIR`].
pub fn bin_dir() -> PathBuf {
    std::env::var_os(BIN_ENV).map_or_else(|| PathBuf::from(DEFAULT_BIN_DIR), PathBuf::from)
}

/// [`Error::Missing`] when one of [`BINARIES`] is not an executable file in
/// `dir`.
pub fn check_binaries(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let missing: Vec<String> = BINARIES
        .iter()
        .filter(|b| {
            !fs::metadata(dir.join(b))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map(|b| (*b).to_owned())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Missing {
            dir: dir.to_owned(),
            missing,
        })
    }
}

/// One endpoint of an EndpointSlice, as [`ControlPlane::endpoints`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// Its addresses (one, of the slice's address type).
    pub addresses: Vec<String>,
    /// Its conditions.
    #[serde(default)]
    pub conditions: Conditions,
    /// The node its Pod runs on.
    #[serde(default)]
    pub node_name: Option<String>,
    /// The node's zone (`topology.kubernetes.io/zone`).
    #[serde(default)]
    pub zone: Option<String>,
}

/// An endpoint's conditions; `None` when the slice leaves one out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Conditions {
    /// Ready: serving and not terminating.
    pub ready: Option<bool>,
    /// Serving: the Pod's readiness, also while terminating.
    pub serving: Option<bool>,
    /// Terminating: the Pod is being deleted.
    pub terminating: Option<bool>,
}

/// A running server.
struct Proc {
    name: &'static str,
    child: Child,
}

/// etcd, kube-apiserver and kube-controller-manager on loopback, with a
/// kubeconfig for `kubectl` and kube-rs. Dropping it kills them and removes
/// its temp directory.
///
/// The servers are started under `setpriv --pdeathsig KILL` when `setpriv`
/// exists, so they also die when the test process is killed outright; the
/// signal follows the thread that started them, so start the control plane
/// on the thread that uses it (the test's own), not on a short-lived one.
pub struct ControlPlane {
    dir: PathBuf,
    bin: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    token: String,
    ca_pem: String,
    etcd_url: String,
    procs: Vec<Proc>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("server", &self.server)
            .field("etcd", &self.etcd_url)
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// [`start`](Self::start), or — when the binaries are not built —
    /// [`skip_or_fail`] for `test` and `None` (so under CI a missing build
    /// fails the test). Panics when a server does not start: the bed is
    /// there and broken.
    pub fn start_or_skip(test: &str) -> Option<ControlPlane> {
        let bin = bin_dir();
        if let Err(e) = check_binaries(&bin) {
            skip_or_fail(test, e);
            return None;
        }
        match ControlPlane::start() {
            Ok(cp) => Some(cp),
            Err(e) => panic!("{test}: the Kubernetes control plane did not start: {e}"),
        }
    }

    /// Start etcd, kube-apiserver (until `/readyz` answers) and
    /// kube-controller-manager (until its EndpointSlice controller has
    /// written a slice for a probe Service in `kube-system`). Ports are
    /// picked free at run time; when another process takes one in between,
    /// the start is tried again (three times in all).
    pub fn start() -> Result<ControlPlane> {
        let bin = bin_dir();
        check_binaries(&bin)?;
        let mut tries = 0;
        loop {
            tries += 1;
            match ControlPlane::start_in(&bin) {
                Err(Error::Start { logs, .. })
                    if tries < 3 && logs.contains("address already in use") =>
                {
                    eprintln!("k8s test bed: a port was taken, starting again");
                }
                other => return other,
            }
        }
    }

    fn start_in(bin: &Path) -> Result<ControlPlane> {
        let dir = std::env::temp_dir().join(unique_name("rvs-k8s-"));
        fs::create_dir(&dir).map_err(io(format!("create {}", dir.display())))?;
        // From here on, Drop cleans up whatever was started.
        let mut cp = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            bin: bin.to_owned(),
            server: String::new(),
            token: random_hex(16)?,
            ca_pem: String::new(),
            etcd_url: String::new(),
            procs: Vec::new(),
        };
        cp.start_etcd()?;
        cp.start_apiserver()?;
        cp.start_controller_manager()?;
        Ok(cp)
    }

    fn start_etcd(&mut self) -> Result<()> {
        let client = format!("http://127.0.0.1:{}", free_port()?);
        let peer = format!("http://127.0.0.1:{}", free_port()?);
        let data = self.dir.join("etcd");
        let data = data.to_string_lossy();
        self.spawn(
            "etcd",
            &[
                "--name=default",
                &format!("--data-dir={data}"),
                &format!("--listen-client-urls={client}"),
                &format!("--advertise-client-urls={client}"),
                &format!("--listen-peer-urls={peer}"),
                &format!("--initial-advertise-peer-urls={peer}"),
                &format!("--initial-cluster=default={peer}"),
                "--unsafe-no-fsync",
            ],
        )?;
        let addr = client_addr(&client);
        self.wait_until("etcd", |_| etcd_healthy(addr))?;
        self.etcd_url = client;
        Ok(())
    }

    fn start_apiserver(&mut self) -> Result<()> {
        let d = self.dir.clone();
        let tokens = d.join("tokens.csv");
        write(
            &tokens,
            &format!("{},admin,admin,system:masters\n", self.token),
        )?;
        let key = rcgen::KeyPair::generate()?;
        let (sa_key, sa_pub) = (d.join("sa.key"), d.join("sa.pub"));
        write(&sa_key, &key.serialize_pem())?;
        write(&sa_pub, &key.public_key_pem())?;
        let port = free_port()?;
        let pki = d.join("pki");
        let p = |p: &Path| p.to_string_lossy().into_owned();
        self.spawn(
            "kube-apiserver",
            &[
                &format!("--etcd-servers={}", self.etcd_url),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--cert-dir={}", p(&pki)),
                &format!("--service-cluster-ip-range={SERVICE_CIDRS}"),
                &format!("--token-auth-file={}", p(&tokens)),
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                &format!("--service-account-key-file={}", p(&sa_pub)),
                &format!("--service-account-signing-key-file={}", p(&sa_key)),
                // With the default reconciler (`lease`) 1.37 refuses a
                // loopback advertise address ("may not be in the loopback
                // range"): the `kubernetes` Service then has no endpoints.
                "--endpoint-reconciler-type=none",
                // No ServiceAccount controller runs to make `default`.
                "--disable-admission-plugins=ServiceAccount",
            ],
        )?;
        // With no --tls-cert-file the apiserver makes a CA and a serving
        // certificate signed by it, and writes both (serving certificate
        // first) to pki/apiserver.crt before it serves.
        // Once it accepts connections the file is complete.
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        self.wait_until("kube-apiserver", |_| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        })?;
        let crt = pki.join("apiserver.crt");
        let pem = fs::read_to_string(&crt).map_err(io(format!("read {}", crt.display())))?;
        self.ca_pem = last_certificate(&pem).ok_or_else(|| {
            self.start_error(
                "kube-apiserver",
                format!("no certificate in {}", crt.display()),
            )
        })?;
        self.server = format!("https://127.0.0.1:{port}");
        write(&self.kubeconfig, &self.kubeconfig_yaml())?;
        // Ready, and its system namespaces made (a post-start hook that
        // /readyz does not wait for).
        self.wait_until("kube-apiserver", |cp| {
            cp.kubectl(&["get", "--raw=/readyz"], None)
                .is_ok_and(|o| o.trim() == "ok")
                && cp
                    .kubectl(
                        &["get", "namespace", "default", "kube-system", "-o", "name"],
                        None,
                    )
                    .is_ok()
        })
    }

    fn start_controller_manager(&mut self) -> Result<()> {
        let kc = self.kubeconfig.to_string_lossy().into_owned();
        self.spawn(
            "kube-controller-manager",
            &[
                &format!("--kubeconfig={kc}"),
                &format!("--authentication-kubeconfig={kc}"),
                &format!("--authorization-kubeconfig={kc}"),
                &format!("--controllers={CONTROLLERS}"),
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )?;
        // The controller writes a slice (empty) for every Service with a
        // selector: a probe Service proves it runs.
        self.apply(
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "rvs-testbed-probe", "namespace": "kube-system"},
                "spec": {"selector": {"rvs-testbed-probe": "none"}, "ports": [{"port": 1}]},
            })
            .to_string(),
        )?;
        self.wait_until("kube-controller-manager", |cp| {
            cp.endpoint_slices("kube-system", "rvs-testbed-probe")
                .is_ok_and(|s| !s.is_empty())
        })
    }

    fn spawn(&mut self, name: &'static str, args: &[&str]) -> Result<()> {
        let log_path = self.dir.join(format!("{name}.log"));
        let log = File::create(&log_path).map_err(io(format!("create {}", log_path.display())))?;
        let log2 = log.try_clone().map_err(io("dup log"))?;
        let exe = self.bin.join(name);
        let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let child = cmd
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(io(format!("start {}", exe.display())))?;
        self.procs.push(Proc { name, child });
        Ok(())
    }

    /// Poll `ready` every 200 ms for [`START_LIMIT`]; fail early when a
    /// server has exited.
    fn wait_until(
        &mut self,
        process: &'static str,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> Result<()> {
        let end = Instant::now() + START_LIMIT;
        loop {
            if ready(self) {
                return Ok(());
            }
            for p in &mut self.procs {
                if let Ok(Some(status)) = p.child.try_wait() {
                    let reason = format!("{} exited ({status})", p.name);
                    return Err(self.start_error(process, reason));
                }
            }
            if Instant::now() >= end {
                let reason = format!("not ready after {} s", START_LIMIT.as_secs());
                return Err(self.start_error(process, reason));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn start_error(&self, process: &'static str, reason: String) -> Error {
        let mut logs = String::new();
        for p in &self.procs {
            let path = self.dir.join(format!("{}.log", p.name));
            let text = fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(LOG_TAIL);
            let _ = writeln!(
                logs,
                "--- {} (last {} lines):",
                path.display(),
                lines.len() - from
            );
            for l in &lines[from..] {
                let _ = writeln!(logs, "{l}");
            }
        }
        Error::Start {
            process,
            reason,
            logs,
        }
    }

    fn kubeconfig_yaml(&self) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: rvs-testbed\n  cluster:\n    \
             server: \"{}\"\n    certificate-authority-data: \"{ca}\"\nusers:\n- name: admin\n  \
             user:\n    token: \"{}\"\ncontexts:\n- name: rvs-testbed\n  context:\n    \
             cluster: rvs-testbed\n    user: admin\n    namespace: default\n\
             current-context: rvs-testbed\n",
            self.server, self.token
        )
    }

    /// The kubeconfig file: the apiserver's URL, its CA (PEM, base64 in
    /// `certificate-authority-data`) and the admin's bearer token (group
    /// `system:masters`). kube-rs reads it with `Kubeconfig::read_from`.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The apiserver's URL, `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The admin's bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The CA certificate (PEM) that signed the apiserver's serving
    /// certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// etcd's client URL, `http://127.0.0.1:PORT`.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The temp directory: logs (`NAME.log`), etcd data, keys, kubeconfig.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process ids of the running servers, in start order (etcd,
    /// kube-apiserver, kube-controller-manager).
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.child.id()).collect()
    }

    /// The directory of the binaries in use (kube-proxy is there too).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Run `kubectl --kubeconfig KUBECONFIG --request-timeout=30s
    /// --cache-dir=DIR/kubectl-cache ARGS`,
    /// with `stdin` on its standard input: its standard output, or
    /// [`Error::Kubectl`] with what it printed when it fails.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut child = Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg(KUBECTL_TIMEOUT)
            // Its discovery cache in the temp dir, not in ~/.kube/cache.
            .arg(format!(
                "--cache-dir={}",
                self.dir.join("kubectl-cache").display()
            ))
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io("start kubectl"))?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())
                .map_err(io("write kubectl's stdin"))?;
        }
        let out = child.wait_with_output().map_err(io("run kubectl"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Kubectl {
                args: args.join(" "),
                output: format!(
                    "{} {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.kubectl(&all, None)?;
        serde_json::from_str(&out).map_err(|e| Error::Output {
            args: all.join(" "),
            reason: e.to_string(),
        })
    }

    /// `kubectl apply -f -` with `manifest` (YAML or JSON, one or more
    /// objects) on stdin: create or update.
    pub fn apply(&self, manifest: &str) -> Result<()> {
        self.kubectl(&["apply", "-f", "-"], Some(manifest))
            .map(drop)
    }

    /// Create namespace `name`.
    pub fn create_namespace(&self, name: &str) -> Result<()> {
        self.apply(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                .to_string(),
        )
    }

    /// Create a Node `name` whose InternalIP is `internal_ip`, labelled
    /// `topology.kubernetes.io/zone=ZONE` when `zone` is given, and mark it
    /// Ready (nothing else will: no kubelet, no node controller).
    pub fn create_node(&self, name: &str, internal_ip: IpAddr, zone: Option<&str>) -> Result<()> {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(zone) = zone {
            labels["topology.kubernetes.io/zone"] = json!(zone);
        }
        self.apply(
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
                .to_string(),
        )?;
        let status = json!({"status": {
            "addresses": [{"type": "InternalIP", "address": internal_ip.to_string()},
                          {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "RvsTestbed",
                            "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
        }});
        self.patch_status("node", None, name, &status)
    }

    /// Create Pod `name` in `namespace` on node `node` (its `nodeName`,
    /// as if scheduled), with `labels` and one container listening on
    /// `port` (named `p<port>`). It stays Pending until
    /// [`set_pod_ready`](Self::set_pod_ready).
    pub fn create_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        labels: &[(&str, &str)],
        port: u16,
    ) -> Result<()> {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        self.apply(
            &json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "nodeName": node,
                    "containers": [{
                        "name": "app", "image": "rvs-testbed.invalid/none",
                        "ports": [{"name": format!("p{port}"), "containerPort": port, "protocol": "TCP"}],
                    }],
                },
            })
            .to_string(),
        )
    }

    /// Patch Pod `name`'s status as a kubelet would for a running, ready
    /// Pod: phase Running, `podIP`/`podIPs` = `ips` (one, or one of each
    /// family, primary first), conditions Ready and ContainersReady True.
    pub fn set_pod_ready(&self, namespace: &str, name: &str, ips: &[IpAddr]) -> Result<()> {
        let Some(first) = ips.first() else {
            return Err(Error::Output {
                args: format!("pod {name}"),
                reason: "no pod IP given".into(),
            });
        };
        let pod_ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect();
        let status = json!({"status": {
            "phase": "Running",
            "podIP": first.to_string(),
            "podIPs": pod_ips,
            "startTime": now(),
            "conditions": conditions("True"),
        }});
        self.patch_status("pod", Some(namespace), name, &status)
    }

    /// Patch Pod `name`'s Ready and ContainersReady conditions to False
    /// (a failing readiness probe); its IPs stay.
    pub fn set_pod_not_ready(&self, namespace: &str, name: &str) -> Result<()> {
        let status = json!({"status": {"conditions": conditions("False")}});
        self.patch_status("pod", Some(namespace), name, &status)
    }

    /// Delete Pod `name` with a grace period of `grace_seconds` (> 0),
    /// without waiting: with no kubelet to confirm the end, the Pod then
    /// stays Terminating (deletionTimestamp set) for good.
    pub fn delete_pod(&self, namespace: &str, name: &str, grace_seconds: u32) -> Result<()> {
        let grace = format!("--grace-period={grace_seconds}");
        self.kubectl(
            &[
                "delete",
                "pod",
                name,
                "-n",
                namespace,
                &grace,
                "--wait=false",
            ],
            None,
        )
        .map(drop)
    }

    /// Whether Pod `name` exists and is Terminating (has a deletionTimestamp).
    pub fn pod_terminating(&self, namespace: &str, name: &str) -> Result<bool> {
        let pod = self.get_json(&["get", "pod", name, "-n", namespace])?;
        Ok(pod["metadata"]["deletionTimestamp"].is_string())
    }

    /// The EndpointSlices of Service `service` (label
    /// `kubernetes.io/service-name`), as JSON objects.
    pub fn endpoint_slices(&self, namespace: &str, service: &str) -> Result<Vec<Value>> {
        let selector = format!("kubernetes.io/service-name={service}");
        let list = self.get_json(&["get", "endpointslices", "-n", namespace, "-l", &selector])?;
        match list["items"].as_array() {
            Some(items) => Ok(items.clone()),
            None => Err(Error::Output {
                args: "get endpointslices".into(),
                reason: "no items".into(),
            }),
        }
    }

    /// Every endpoint of Service `service`'s EndpointSlices (all address
    /// families).
    pub fn endpoints(&self, namespace: &str, service: &str) -> Result<Vec<Endpoint>> {
        let mut all = Vec::new();
        for slice in self.endpoint_slices(namespace, service)? {
            let Some(eps) = slice.get("endpoints").filter(|e| !e.is_null()) else {
                continue;
            };
            let eps: Vec<Endpoint> =
                serde_json::from_value(eps.clone()).map_err(|e| Error::Output {
                    args: "get endpointslices".into(),
                    reason: e.to_string(),
                })?;
            all.extend(eps);
        }
        Ok(all)
    }

    /// Poll [`endpoints`](Self::endpoints) every 200 ms until `done` holds
    /// or `limit` passes: the last endpoints read, or an error saying what
    /// was seen last.
    pub fn wait_endpoints(
        &self,
        namespace: &str,
        service: &str,
        limit: Duration,
        mut done: impl FnMut(&[Endpoint]) -> bool,
    ) -> Result<Vec<Endpoint>> {
        let end = Instant::now() + limit;
        loop {
            let last = self.endpoints(namespace, service);
            if let Ok(eps) = &last
                && done(eps)
            {
                return last;
            }
            if Instant::now() >= end {
                return Err(Error::Output {
                    args: format!("get endpointslices -n {namespace} (service {service})"),
                    reason: format!(
                        "not as awaited after {} ms; last read: {last:?}",
                        limit.as_millis()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn patch_status(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<()> {
        let patch = patch.to_string();
        let mut args = vec![
            "patch",
            kind,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        self.kubectl(&args, None).map(drop)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The controller manager and the apiserver first, etcd last.
        for p in self.procs.iter_mut().rev() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        if std::env::var_os(KEEP_ENV).is_some_and(|v| v == "1") {
            eprintln!("k8s test bed kept in {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn conditions(status: &str) -> Value {
    json!([
        {"type": "Ready", "status": status, "lastTransitionTime": now()},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now()},
    ])
}

/// Now in RFC 3339 (UTC, seconds), as Kubernetes timestamps are written.
fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The calendar date `days` days after 1970-01-01 (Howard Hinnant's
/// civil-from-days algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(io(format!("write {}", path.display())))
}

/// A port free on 127.0.0.1 right now (the kernel's pick; it may be taken
/// again before the server binds it, which [`ControlPlane::start`] retries).
fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("bind a free port"))?;
    Ok(l.local_addr().map_err(io("local address"))?.port())
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(io("read /dev/urandom"))?;
    Ok(buf.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// `127.0.0.1:PORT` of `http://127.0.0.1:PORT`.
fn client_addr(url: &str) -> SocketAddr {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// etcd's `/health` says `"health":"true"`.
fn etcd_healthy(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.contains("\"health\":\"true\"")
}

/// The last certificate of a PEM bundle, when the bundle is complete.
fn last_certificate(pem: &str) -> Option<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = pem.rfind(BEGIN)?;
    let len = pem[start..].find(END)? + END.len();
    Some(format!("{}\n", &pem[start..start + len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_793), (2026, 12, 6));
    }

    #[test]
    fn the_last_certificate_of_a_bundle() {
        let b = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n\
                 -----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n";
        assert_eq!(
            last_certificate(b).as_deref(),
            Some("-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n")
        );
        assert_eq!(last_certificate("-----BEGIN CERTIFICATE-----\nA\n"), None);
    }

    #[test]
    fn missing_binaries_are_named() {
        let e = check_binaries(Path::new("/nonexistent-rvs")).unwrap_err();
        assert!(e.to_string().contains("etcd, kube-apiserver"), "{e}");
    }
}
