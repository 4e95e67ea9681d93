//! Network namespaces: a guard with a unique name that deletes the
//! namespace on drop (a test that panics unwinds through it), and running
//! code inside a namespace.
//!
//! `setns(2)` applies to the calling thread only, so code that must run
//! inside a namespace runs on a fresh thread that enters it and ends with
//! the closure; a socket created there keeps the namespace it was made in
//! and can be handed back to the test's own threads. An async test builds
//! its own runtime on that thread.

use std::os::fd::AsFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crate::sh;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A name no other test of any running process uses: `TAG`, this
/// process's id, `x` and a counter (tests run in parallel threads and
/// processes; keep `tag` short when the name ends up in an interface name,
/// which is limited to 15 bytes).
pub fn unique_name(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{tag}{}x{n}", std::process::id())
}

/// A network namespace this test created; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// A new namespace named [`unique_name`]`(tag)`, loopback up.
    pub fn new(tag: &str) -> Netns {
        Netns::create(unique_name(tag))
    }

    /// A new namespace called `name` (which the caller made unique),
    /// loopback up. Panics when `ip netns add` fails.
    pub fn create(name: String) -> Netns {
        sh(&["ip", "netns", "add", &name]);
        // The guard exists from here on: a failure below still deletes it.
        let ns = Netns { name };
        sh(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name (for `ip -n NAME`, `ip netns exec NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its file under `/var/run/netns`.
    pub fn path(&self) -> String {
        ns_path(&self.name)
    }

    /// `ip netns exec NAME args...`, panicking on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        exec_in(&self.name, args)
    }

    /// Run `f` on a fresh thread inside the namespace; its result, or its
    /// panic re-raised here.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_ns(&self.name, f)
    }

    /// Start `f` on a fresh thread inside the namespace.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        spawn_in(&self.name, f)
    }

    /// Set `/proc/sys/net/{key}` to `value` inside the namespace (those
    /// files belong to the network namespace of the thread that opens
    /// them; no `sysctl` binary needed).
    pub fn sysctl(&self, key: &str, value: &str) {
        sysctl(&self.name, key, value);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn ns_path(name: &str) -> String {
    format!("/var/run/netns/{name}")
}

/// Set `/proc/sys/net/{key}` to `value` inside namespace `ns`.
pub fn sysctl(ns: &str, key: &str, value: &str) {
    let path = format!("/proc/sys/net/{key}");
    let value = value.to_owned();
    in_ns(ns, move || {
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("{path}: {e}"));
    });
}

/// Start `f` on a fresh thread that has entered namespace `ns` (by name).
pub fn spawn_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    spawn_in_path(ns_path(ns), f)
}

fn spawn_in_path<T: Send + 'static>(
    path: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
}

/// `ip netns exec NS args...` for namespace `ns` (by name), panicking on
/// failure.
pub fn exec_in(ns: &str, args: &[&str]) -> Output {
    let mut a = vec!["ip", "netns", "exec", ns];
    a.extend_from_slice(args);
    sh(&a)
}

/// Run `f` on a fresh thread inside namespace `ns` (by name): its result,
/// or its panic re-raised on the caller's thread.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    in_netns_path(&ns_path(ns), f)
}

/// [`in_ns`] for a namespace given by its file (`/var/run/netns/NAME`,
/// `/proc/PID/ns/net`).
pub fn in_netns_path<T: Send + 'static>(path: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    match spawn_in_path(path.to_owned(), f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
