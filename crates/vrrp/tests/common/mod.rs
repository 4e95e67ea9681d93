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
use std::thread::JoinHandle;
use std::time::Duration;

pub const MAC_A: &str = "02:00:00:00:00:0a";
pub const MAC_B: &str = "02:00:00:00:00:0b";
pub const MAC_A_BYTES: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];

/// True when running as root with `ip` installed; otherwise skips with the
/// reason ([`rvs_testbed::skip_or_fail`]: under CI a failure).
pub fn can_run(test: &str) -> bool {
    rvs_testbed::require_root(test, "network namespaces and raw sockets need root")
        && rvs_testbed::require_tools(test, &["ip"])
}

/// Run a command; panic with its output when it fails; its stdout.
pub fn sh(args: &[&str]) -> String {
    rvs_testbed::sh_stdout(args)
}

pub use rvs_testbed::wait_for;

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
    _guards: [rvs_testbed::Netns; 2],
}

impl Pair {
    /// A new pair, or None (printed why) when it cannot run here.
    pub fn new(test: &str) -> Option<Pair> {
        if !can_run(test) {
            return None;
        }
        let prefix = rvs_testbed::unique_name("vrrp");
        let guards = [
            rvs_testbed::Netns::create(format!("{prefix}a")),
            rvs_testbed::Netns::create(format!("{prefix}b")),
        ];
        let pair = Pair {
            a: guards[0].name().to_owned(),
            b: guards[1].name().to_owned(),
            _guards: guards,
        };
        // The guards exist first: a failure below still removes them.
        for ns in [&pair.a, &pair.b] {
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
        rvs_testbed::spawn_in(ns, f)
    }

    /// Set `/proc/sys/net/{key}` to `value` inside namespace `ns` (those
    /// files belong to the network namespace of the thread that opens them;
    /// no `sysctl` binary needed).
    pub fn sysctl(&self, ns: &str, key: &str, value: &str) {
        rvs_testbed::netns::sysctl(ns, key, value);
    }

    /// [`Pair::spawn_in`] and wait for its result (re-raising its panic).
    pub fn run_in<T: Send + 'static>(&self, ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        match self.spawn_in(ns, f).join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Run `test` to completion on a runtime in namespace `ns` (see
    /// [`Pair::run_in`]): the body of most tests here.
    pub fn block_in<T: Send + 'static>(
        &self,
        ns: &str,
        test: impl Future<Output = T> + Send + 'static,
    ) -> T {
        self.run_in(ns, move || block_on(test))
    }
}
