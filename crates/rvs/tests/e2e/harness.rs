//! Start and stop daemons; run rvsadm against them.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const RVSD: &str = env!("CARGO_BIN_EXE_rvsd");
pub const RVSADM: &str = env!("CARGO_BIN_EXE_rvsadm");

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A private temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("rvs-e2e-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running rvsd, killed on drop (even when the test fails).
pub struct Rvsd {
    pub child: Child,
    pub socket: PathBuf,
    /// Removed (with the socket) when the daemon is dropped.
    _dir: Option<TempDir>,
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Wait (60 s bound) for rvsd to open `socket`; panics when it exits first
/// or does not open it in time.
pub fn wait_for_socket(socket: &Path, child: &mut Child) {
    if let Err(e) = socket_opened(socket, child) {
        panic!("{e}");
    }
}

fn socket_opened(socket: &Path, child: &mut Child) -> Result<(), String> {
    // Generous: an XDP rvsd's first step is the kernel verifying its
    // program, which takes over 10 s on a 2-core machine busy building.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    while Instant::now() < deadline {
        if UnixStream::connect(socket).is_ok() {
            if started.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "rvsd took {:?} to open {}",
                    started.elapsed(),
                    socket.display()
                );
            }
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("rvsd exited early: {status}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("rvsd did not open {} in time", socket.display()))
}

/// Where a launched rvsd runs.
enum Place {
    Here,
    /// `ip netns exec NS` (a private mount namespace: a bpffs of its own).
    Netns(String),
    /// `nsenter --net` into the namespace (the host's bpffs: pins outlive
    /// rvsd, as a restart needs).
    Nsenter(String),
    /// Behind a wrapper command line (the wrapper execs rvsd).
    Wrapped(Vec<OsString>),
}

/// The one way every end-to-end test launches rvsd: which build, where (here
/// or in a network namespace), its data plane and arguments; `--log-level
/// warn --socket SOCKET` added; stdin and stdout null, stderr inherited. The
/// socket is in a fresh [`TempDir`] of its own unless [`Launch::at`] names
/// one (a daemon that a test restarts on the same socket).
pub struct Launch {
    place: Place,
    bin: OsString,
    args: Vec<OsString>,
    socket: PathBuf,
    dir: Option<TempDir>,
    log_level: &'static str,
    log: Option<PathBuf>,
}

impl Launch {
    /// This build's rvsd, here, on a socket in a fresh directory.
    pub fn new(tag: &str) -> Launch {
        Launch::in_dir(TempDir::new(tag))
    }

    /// This build's rvsd, here, on `DIR/rvsd.sock` (the directory goes with
    /// the daemon).
    pub fn in_dir(dir: TempDir) -> Launch {
        let socket = dir.path().join("rvsd.sock");
        Launch {
            dir: Some(dir),
            ..Launch::at(&socket)
        }
    }

    /// This build's rvsd, here, on `socket` (whose directory the caller keeps).
    pub fn at(socket: &Path) -> Launch {
        Launch {
            place: Place::Here,
            bin: RVSD.into(),
            args: Vec::new(),
            socket: socket.to_owned(),
            dir: None,
            log_level: "warn",
            log: None,
        }
    }

    /// In network namespace `ns`, through `ip netns exec` (which execs rvsd:
    /// the child is rvsd itself).
    pub fn netns(mut self, ns: &str) -> Launch {
        self.place = Place::Netns(ns.to_owned());
        self
    }

    /// In network namespace `ns`, entered with `nsenter --net` (not `ip netns
    /// exec`, whose private mount namespace would give rvsd a bpffs of its
    /// own that vanishes with it, and the XDP pins with it).
    pub fn nsenter(mut self, ns: &str) -> Launch {
        self.place = Place::Nsenter(ns.to_owned());
        self
    }

    /// Behind `wrapper` (a command line that ends by exec'ing its
    /// arguments: rvsd and its own).
    pub fn wrapped(mut self, wrapper: &[&str]) -> Launch {
        self.place = Place::Wrapped(wrapper.iter().map(OsString::from).collect());
        self
    }

    /// Another rvsd build (a benchmark's before/after).
    pub fn bin(mut self, bin: impl AsRef<OsStr>) -> Launch {
        self.bin = bin.as_ref().to_owned();
        self
    }

    /// `--dataplane PLANE`.
    pub fn plane(self, plane: &str) -> Launch {
        self.args(["--dataplane", plane])
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Launch {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// More arguments.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Launch {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `--log-level LEVEL` instead of `warn`.
    pub fn log_level(mut self, level: &'static str) -> Launch {
        self.log_level = level;
        self
    }

    /// Its stderr appended to the file `path` (made if need be), without
    /// colours (`NO_COLOR`), instead of the test's: for a test that reads
    /// what rvsd logged ([`log_lines`]).
    pub fn log_file(mut self, path: &Path) -> Launch {
        self.log = Some(path.to_owned());
        self
    }

    /// The command line, not spawned (stdio as said above): for a test that
    /// expects rvsd to refuse to start, or changes its stdio.
    pub fn command(&self) -> Command {
        let mut c = match &self.place {
            Place::Here => Command::new(&self.bin),
            Place::Netns(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            Place::Nsenter(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/var/run/netns/{ns}")).arg(&self.bin);
                c
            }
            Place::Wrapped(w) => {
                let mut c = Command::new(&w[0]);
                c.args(&w[1..]).arg(&self.bin);
                c
            }
        };
        c.args(&self.args)
            .args(["--log-level", self.log_level])
            .arg("--socket")
            .arg(&self.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(path) = &self.log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap_or_else(|e| panic!("rvsd's log {}: {e}", path.display()));
            c.env("NO_COLOR", "1").stderr(file);
        }
        c
    }

    /// Run it expecting a refusal to start: rvsd must exit unsuccessfully
    /// within 20 s (past that it is killed and the test fails); its stderr.
    pub fn refused(&self) -> String {
        let mut child = self
            .command()
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rvsd");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(child.try_wait(), Ok(Some(_))) {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("rvsd was expected to refuse to start and did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("rvsd output");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "rvsd started: {err}");
        err
    }

    /// Spawn [`Launch::command`] and wait for the socket; when rvsd exits
    /// first or does not open it in time, kill it and fail the test.
    pub fn spawn_child(&self) -> Child {
        let mut child = self.command().spawn().expect("spawn rvsd");
        if let Err(e) = socket_opened(&self.socket, &mut child) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{e}");
        }
        child
    }

    /// Spawn it (see [`Launch::spawn_child`]): an [`Rvsd`], killed on drop.
    pub fn spawn(mut self) -> Rvsd {
        let child = self.spawn_child();
        Rvsd {
            child,
            socket: self.socket,
            _dir: self.dir.take(),
        }
    }

    /// Spawn it (see [`Launch::spawn_child`]) and hand the process to `bed`,
    /// which kills it when the bed goes.
    pub fn adopt(mut self, bed: &mut rvs_testbed::Bed) -> Adopted {
        let child = self.spawn_child();
        let pid = child.id();
        bed.adopt(child);
        Adopted {
            pid,
            socket: self.socket,
            _dir: self.dir.take(),
        }
    }
}

/// An rvsd whose process a namespace bed owns (see [`Launch::adopt`]): its
/// socket for rvsadm; its XDP pins and saved table removed on drop.
pub struct Adopted {
    /// Its process id.
    pub pid: u32,
    /// Its control socket.
    pub socket: PathBuf,
    _dir: Option<TempDir>,
}

impl Rvsadm for Adopted {
    fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        remove_pins(&self.socket);
    }
}

impl Rvsd {
    /// Start `rvsd --dataplane none` plus `args` in a fresh directory.
    pub fn start(tag: &str, args: &[&str]) -> Rvsd {
        Self::start_in(TempDir::new(tag), args)
    }

    pub fn start_in(dir: TempDir, args: &[&str]) -> Rvsd {
        Self::start_with(dir, "none", None, args)
    }

    /// Start `rvsd --dataplane proxy` plus `args`.
    pub fn start_proxy(tag: &str, args: &[&str]) -> Rvsd {
        Self::start_with(TempDir::new(tag), "proxy", None, args)
    }

    /// Start rvsd with a data plane, optionally under a file-descriptor
    /// limit (`prlimit --nofile`).
    pub fn start_with(dir: TempDir, plane: &str, nofile: Option<u32>, args: &[&str]) -> Rvsd {
        let launch = Launch::in_dir(dir).plane(plane).args(args);
        match nofile {
            Some(n) => launch.wrapped(&["prlimit", &format!("--nofile={n}")]),
            None => launch,
        }
        .spawn()
    }

    /// Spawn `cmd` (an rvsd command line, perhaps behind `nsenter`) with
    /// `--socket DIR/rvsd.sock` added, and wait for its socket.
    pub fn spawn_in(dir: TempDir, mut cmd: Command) -> Rvsd {
        let socket = dir.path().join("rvsd.sock");
        let mut child = cmd
            .arg("--socket")
            .arg(&socket)
            .spawn()
            .expect("spawn rvsd");
        wait_for_socket(&socket, &mut child);
        Rvsd {
            child,
            socket,
            _dir: Some(dir),
        }
    }

    /// Run rvsadm with `args` (whitespace-split) against this daemon.
    pub fn adm(&self, args: &str) -> Output {
        Rvsadm::adm(self, args)
    }

    pub fn adm_args(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(RVSADM);
        cmd.args(args)
            .env("RVS_SOCKET", &self.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("spawn rvsadm");
        if let Some(input) = stdin {
            let mut s = child.stdin.take().expect("stdin");
            s.write_all(input.as_bytes()).expect("write stdin");
        }
        child.wait_with_output().expect("rvsadm output")
    }

    /// Run rvsadm and require success; its stdout.
    pub fn ok(&self, args: &str) -> String {
        Rvsadm::ok(self, args)
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
        assert!(st.is_ok_and(|s| s.success()), "kill -{sig}");
    }

    /// Poll `f` until it is true (10 s bound).
    pub fn eventually(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("timed out waiting for {what}");
    }
}

impl Rvsadm for Rvsd {
    fn socket(&self) -> &Path {
        &self.socket
    }
}

/// rvsadm against a daemon's control socket, for every e2e bed that runs
/// one (an [`Rvsd`], or a daemon a test starts its own way): the bed names
/// its socket, the runs and their checks are written once here.
pub trait Rvsadm {
    /// The daemon's control socket (`RVS_SOCKET` for rvsadm).
    fn socket(&self) -> &Path;

    /// Run rvsadm with `args` (whitespace-split); its output whatever the
    /// exit status.
    fn adm(&self, args: &str) -> Output {
        Command::new(RVSADM)
            .args(args.split_whitespace())
            .env("RVS_SOCKET", self.socket())
            .stdin(Stdio::null())
            .output()
            .expect("rvsadm")
    }

    /// Run rvsadm and require success; its stdout.
    fn ok(&self, args: &str) -> String {
        let out = self.adm(args);
        assert!(
            out.status.success(),
            "rvsadm {args} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run rvsadm; its stdout whatever the exit status.
    fn out(&self, args: &str) -> String {
        String::from_utf8_lossy(&self.adm(args).stdout).into_owned()
    }
}

impl Drop for Rvsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_pins(&self.socket);
    }
}

/// Removes, on drop, the XDP pins an rvsd on this socket may have left
/// (see [`remove_pins`]), even when the test fails.
pub struct PinGuard(pub PathBuf);

impl Drop for PinGuard {
    fn drop(&mut self) {
        remove_pins(&self.0);
    }
}

/// Remove the XDP pins (`/sys/fs/bpf/rvs/<instance>`) an rvsd serving
/// `socket` under its default instance name may have left (an xdp rvsd
/// started outside a private mount namespace keeps its program attached
/// after it is killed), and the service table an xdp rvsd without `-f`
/// keeps beside them in its default `--state-dir` (`/run/rvs/<instance>.table`,
/// outside any namespace a test makes: left there, one per test run).
pub fn remove_pins(socket: &Path) {
    let name = rvs_xdp::pin::Instance::default_name(socket);
    if let Ok(i) = rvs_xdp::pin::Instance::new(&name) {
        let _ = i.remove();
    }
    let _ = std::fs::remove_file(Path::new("/run/rvs").join(format!("{name}.table")));
}

/// The lines of an rvsd log written through [`Launch::log_file`] (none
/// while it does not exist).
pub fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// stdout, stderr, exit code.
pub fn parts(o: &Output) -> (String, String, i32) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

/// Poll `f` every 20 ms for up to `limit`; how long it took.
pub fn within(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: not within {limit:?}");
}

/// Wait (10 s bound) for `child` to exit after a signal the test sent;
/// past the bound kill it and fail the test, naming `what`.
pub fn wait_exit(child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{what} did not exit within 10 s");
}

/// An rvsd that a test starts, stops (SIGTERM, SIGKILL) and starts again
/// on one socket under its own `--instance` in network namespace `ns`
/// (entered with `nsenter --net`, so that its XDP pins outlive it as a
/// restart needs); killed, and its pins removed, on drop.
pub struct Pinned {
    /// The network namespace it runs in.
    pub ns: String,
    /// Its `--instance` (the pin directory's name).
    pub instance: String,
    /// Its control socket.
    pub socket: PathBuf,
    /// The running process, if any.
    pub child: Proc,
}

impl Pinned {
    /// Not started yet.
    pub fn new(ns: &str, instance: String, socket: PathBuf) -> Pinned {
        Pinned {
            ns: ns.to_owned(),
            instance,
            socket,
            child: Proc(None),
        }
    }

    /// Its launch: `--dataplane PLANE --interface eth0 --instance NAME` in
    /// its namespace on its socket; the caller adds the rest.
    pub fn launch(&self, plane: &str) -> Launch {
        Launch::at(&self.socket)
            .nsenter(&self.ns)
            .plane(plane)
            .args(["--interface", "eth0", "--instance", &self.instance])
    }

    /// Start `launch` (see [`Launch::spawn_child`]).
    pub fn start(&mut self, launch: Launch) {
        assert!(!self.running(), "rvsd already running");
        self.child = Proc(Some(launch.spawn_child()));
    }

    /// Whether it runs.
    pub fn running(&mut self) -> bool {
        self.child.running()
    }

    /// SIGKILL it (its XDP plane stays pinned and forwarding).
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Send `sig` (`TERM`, `-INT`, ...) and wait for it to exit (bounded:
    /// [`wait_exit`]).
    pub fn stop(&mut self, sig: &str) {
        self.child.stop(sig);
    }

    /// Detach and unpin the instance's XDP plane (rvsd not running).
    pub fn remove_pins(&self) {
        if let Ok(i) = rvs_xdp::pin::Instance::new(&self.instance) {
            let _ = i.remove();
        }
    }
}

impl Rvsadm for Pinned {
    fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.child.kill();
        self.remove_pins();
    }
}

/// A child process (an rvsd, or a daemon beside it), killed and reaped on
/// drop (even when the test fails).
pub struct Proc(pub Option<Child>);

impl Proc {
    /// SIGKILL it and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send `sig` (`HUP`, `TERM`; a leading `-` is allowed).
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.0 {
            let sig = sig.trim_start_matches('-');
            let _ = Command::new("kill")
                .args([&format!("-{sig}"), &c.id().to_string()])
                .status();
        }
    }

    /// Wait (bounded: [`wait_exit`]) for it to exit after a signal.
    pub fn wait_exit(&mut self, what: &str) {
        if let Some(mut c) = self.0.take() {
            wait_exit(&mut c, what);
        }
    }

    /// Send `sig` and wait (bounded) for it to exit.
    pub fn stop(&mut self, sig: &str) {
        self.signal(sig);
        self.wait_exit(&format!("the process (SIG{})", sig.trim_start_matches('-')));
    }

    /// Whether it runs.
    pub fn running(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Its process id, if started.
    pub fn id(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET PATH HTTP/1.0` to rvsd's `--http` at `addr` (from the calling
/// thread's namespace): the body, or None when it does not answer (connect
/// bound 2 s, read bound 10 s).
pub fn try_http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::Read;
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// [`try_http_get`], failing the test when rvsd does not answer.
pub fn http_get(addr: &str, path: &str) -> String {
    try_http_get(addr, path).unwrap_or_else(|| panic!("GET {path} from {addr}: no answer"))
}

/// The values of the samples of `family` in Prometheus text `text` whose
/// line contains every one of `labels`: the one /metrics parser.
pub fn samples<'a>(
    text: &'a str,
    family: &'a str,
    labels: &'a [&str],
) -> impl Iterator<Item = u64> + 'a {
    text.lines().filter_map(move |l| {
        let rest = l.strip_prefix(family)?;
        if !rest.starts_with([' ', '{']) || !labels.iter().all(|x| rest.contains(x)) {
            return None;
        }
        let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        Some(v as u64)
    })
}

/// One `#[test]` per entry, each running scenario `$run` under the test's
/// own name (written once) with the entry's arguments:
/// `scenarios! { rr_over: xdp_dr_rr(fwd::DR), xdp_nat_rr(fwd::NAT) }`.
/// Doc comments and attributes before an entry go to its test.
macro_rules! scenarios {
    ($run:path: $($(#[$attr:meta])* $name:ident($($arg:expr),* $(,)?)),* $(,)?) => {
        $(
            $(#[$attr])*
            #[test]
            fn $name() {
                $run(stringify!($name), $($arg),*)
            }
        )*
    };
}
pub(crate) use scenarios;

/// The real servers of an `rvsadm -L` listing: the fields of each `->`
/// line after the arrow (address, forward, weight, active, inactive; with
/// `--stats` address, conns, packets, ...). The one parser of those lines.
pub fn real_server_fields(listing: &str) -> impl Iterator<Item = Vec<&str>> + '_ {
    listing.lines().filter_map(|l| {
        let rest = l.trim_start().strip_prefix("-> ")?;
        Some(rest.split_whitespace().collect())
    })
}
