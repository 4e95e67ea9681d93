//! # rvs-testbed
//!
//! The test bed of rvs's privileged tests (shared/spec/TESTBED.md), once for
//! every crate that needs it (`rvs`, `rvs-xdp`, `rvs-vrrp`, `rvs-check`, as
//! a dev-dependency only; it is never a normal dependency):
//!
//! * [`skip`] — the one skip policy: a test that cannot run here prints
//!   why and returns, except under `CI` or `RVS_REQUIRE_PRIVILEGED=1`,
//!   where the skip is a failure (so a missing tool or capability turns CI
//!   red instead of green);
//! * [`netns`] — a network namespace guard with a unique name, deleted on
//!   drop (also when the test panics), and running code inside a namespace
//!   on a thread of its own (`setns` applies per thread);
//! * [`cgroup`] — a child cgroup v2 with a unique name, processes run
//!   inside it, removed on drop (the sock data plane's tests);
//! * [`bed`] — a bridged L2 segment: a switch namespace with bridges, one
//!   namespace per host joined by a veth pair, tiny TCP servers, clients;
//! * [`server`] — the tiny servers themselves (TCP accept loop, UDP
//!   answers, the echo/stream server), for beds and tests alike;
//! * [`k8s`] — a real Kubernetes control plane (etcd, kube-apiserver,
//!   kube-controller-manager with the EndpointSlice controllers) built by
//!   `scripts/k8s-binaries`, with kubectl helpers for Nodes, Pods and
//!   their status, Services and EndpointSlices;
//! * [`ipvs_vm`] — a real kernel IPVS: a QEMU guest (Debian's kernel,
//!   ipvsadm 1.31) built by `scripts/ipvs-vm-image`, attached to the test's
//!   namespaces through taps, commands and files over serial channels;
//! * [`sh`] / [`wait_for`] — running a command that must succeed, polling.
//!
//! The namespaces are made with iproute2 (`ip netns add`), as an operator
//! would; tests send traffic only inside namespaces they created.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod bed;
pub mod cgroup;
pub mod ipvs_vm;
pub mod k8s;
pub mod netns;
pub mod server;
pub mod skip;

pub use bed::{Bed, Conn, Host, connect, spread, udp_ask, udp_socket};
pub use cgroup::Cgroup;
pub use ipvs_vm::{IpvsVm, IpvsVmOpts, VmOutput};
pub use netns::{Netns, in_netns_path, in_ns, spawn_in, unique_name};
pub use server::{Server, Worker, accept_loop, echo};
pub use skip::{
    is_root, privileged_required, require_cgroup2, require_root, require_root_and_cgroup2,
    require_tools, skip_or_fail, tools_missing,
};

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Run `args[0]` with the rest as arguments; panic with its output when it
/// cannot start or exits unsuccessfully (a test bed step that fails makes
/// the test fail, with the command's own words).
pub fn sh(args: &[&str]) -> Output {
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
    out
}

/// [`sh`], returning its standard output as text.
pub fn sh_stdout(args: &[&str]) -> String {
    String::from_utf8_lossy(&sh(args).stdout).into_owned()
}

/// Poll `f` every 20 ms until it is true or `limit` passes: whether it
/// became true.
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
