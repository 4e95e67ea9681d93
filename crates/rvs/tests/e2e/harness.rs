//! Start and stop daemons; run rvsadm against them.

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
    _dir: TempDir,
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn wait_for_socket(socket: &Path, child: &mut Child) {
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
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("rvsd exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("rvsd did not open {} in time", socket.display());
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
        let socket = dir.path().join("rvsd.sock");
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}")).arg(RVSD);
                c
            }
            None => Command::new(RVSD),
        };
        let mut child = cmd
            .args(["--dataplane", plane, "--log-level", "warn", "--socket"])
            .arg(&socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rvsd");
        wait_for_socket(&socket, &mut child);
        Rvsd {
            child,
            socket,
            _dir: dir,
        }
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
            _dir: dir,
        }
    }

    /// Run rvsadm with `args` (whitespace-split) against this daemon.
    pub fn adm(&self, args: &str) -> Output {
        Rvsadm::adm(self, args)
    }

    pub fn adm_args(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(RVSADM)
            .args(args)
            .env("RVS_SOCKET", &self.socket)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rvsadm");
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

/// `RVSD --dataplane PLANE --interface eth0 --log-level warn --instance
/// INSTANCE --socket SOCKET` in network namespace `ns`, entered with
/// `nsenter --net` (not `ip netns exec`, whose private mount namespace would
/// give rvsd a bpffs of its own that vanishes with it, and the XDP pins with
/// it); stdin and stdout null, stderr inherited. The caller adds its own
/// arguments and spawns it.
pub fn nsenter_rvsd(ns: &str, rvsd: &str, plane: &str, instance: &str, socket: &Path) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/var/run/netns/{ns}"))
        .arg(rvsd)
        .args(["--dataplane", plane, "--interface", "eth0"])
        .args(["--log-level", "warn", "--instance", instance])
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    c
}

/// `rvsd --dataplane PLANE --socket SOCKET ARGS...` inside network
/// namespace `ns` (`ip netns exec` execs it, so the child is rvsd itself);
/// not waited for.
pub fn rvsd_in_ns(ns: &str, plane: &str, socket: &Path, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, RVSD, "--dataplane", plane])
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn rvsd")
}
