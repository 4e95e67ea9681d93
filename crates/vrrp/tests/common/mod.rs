//! A two-host test bed: namespaces `A` and `B` (unique names per test)
//! joined by a veth pair, both ends named `eth0`, removed by a Drop guard
//! even when the test fails.
//!
//! `A`: MAC 02:00:00:00:00:0a, 10.0.0.1/24, fd00::1/64.
//! `B`: MAC 02:00:00:00:00:0b, 10.0.0.2/24, fd00::2/64.
//! Duplicate address detection is off in both, so the link-local
//! addresses are usable at once.
//!
//! `setns` applies per thread: code that must run inside a namespace runs
//! on a fresh thread ([`Pair::spawn_in`]) with its own current-thread tokio
//! runtime ([`block_on`]).
#![allow(dead_code)]

use std::future::Future;
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const MAC_A: &str = "02:00:00:00:00:0a";
pub const MAC_B: &str = "02:00:00:00:00:0b";
pub const MAC_A_BYTES: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// True when running as root with `ip` installed; otherwise prints why the
/// test skips.
pub fn can_run(test: &str) -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        eprintln!("skipping {test}: network namespaces and raw sockets need root (uid {uid})");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipping {test}: `ip` (iproute2) is not installed (scripts/install-deps)");
        return false;
    }
    true
}

/// Run a command; panic with its output when it fails; its stdout.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Poll `f` every 20 ms until it is true or `limit` passes; its last value.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run `fut` to completion on a current-thread runtime (as rvsd does).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(fut)
}

/// The two namespaces; deleted on drop.
pub struct Pair {
    pub a: String,
    pub b: String,
}

impl Pair {
    /// A new pair, or None (printed why) when it cannot run here.
    pub fn new(test: &str) -> Option<Pair> {
        if !can_run(test) {
            return None;
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("vrrp{}x{n}", std::process::id());
        let pair = Pair {
            a: format!("{prefix}a"),
            b: format!("{prefix}b"),
        };
        // `pair` exists first: a failure below still removes what was made.
        for ns in [&pair.a, &pair.b] {
            sh(&["ip", "netns", "add", ns]);
        }
        for ns in [&pair.a, &pair.b] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            for key in ["all", "default"] {
                pair.sysctl(ns, &format!("ipv6/conf/{key}/accept_dad"), "0");
            }
        }
        sh(&[
            "ip", "-n", &pair.a, "link", "add", "eth0", "address", MAC_A, "type", "veth", "peer",
            "name", "eth0", "address", MAC_B, "netns", &pair.b,
        ]);
        for (ns, v4, v6) in [
            (&pair.a, "10.0.0.1/24", "fd00::1/64"),
            (&pair.b, "10.0.0.2/24", "fd00::2/64"),
        ] {
            sh(&["ip", "-n", ns, "addr", "add", v4, "dev", "eth0"]);
            sh(&["ip", "-n", ns, "addr", "add", v6, "dev", "eth0", "nodad"]);
            sh(&["ip", "-n", ns, "link", "set", "eth0", "up"]);
        }
        for ns in [&pair.a, &pair.b] {
            let ready = wait_for(Duration::from_secs(3), || {
                let out = sh(&[
                    "ip", "-n", ns, "-6", "addr", "show", "dev", "eth0", "scope", "link",
                ]);
                out.contains("fe80::") && !out.contains("tentative")
            });
            assert!(ready, "{ns}: no usable link-local address on eth0");
        }
        Some(pair)
    }

    /// Run `f` on a fresh thread inside namespace `ns`.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("setns {path}: {e}"));
            f()
        })
    }

    /// Set `/proc/sys/net/{key}` to `value` inside namespace `ns` (those
    /// files belong to the network namespace of the thread that opens them;
    /// no `sysctl` binary needed).
    pub fn sysctl(&self, ns: &str, key: &str, value: &str) {
        let path = format!("/proc/sys/net/{key}");
        let value = value.to_owned();
        self.run_in(ns, move || {
            std::fs::write(&path, value).unwrap_or_else(|e| panic!("{path}: {e}"));
        });
    }

    /// [`Pair::spawn_in`] and wait for its result (re-raising its panic).
    pub fn run_in<T: Send + 'static>(&self, ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        match self.spawn_in(ns, f).join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
