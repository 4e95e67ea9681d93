//! The way many users start daemons: `ip netns exec NS rvsd --dataplane
//! xdp …` (issue 29). `ip netns exec` gives rvsd a mount namespace of its
//! own whose `/sys` has no bpffs; a bpffs rvsd mounted there would die with
//! it, and with it the pins that keep the XDP plane's flows across a
//! restart. rvsd binds the host's bpffs (through PID 1's root) instead.
//!
//! The test runs the whole thing inside a PID namespace of its own
//! (`unshare --pid --fork --mount-proc`), whose PID 1 is a shell in a copy
//! of the test's mount namespace, the bpffs on /sys/fs/bpf included — the
//! host as rvsd sees it (the test machine's real PID 1 may be out of reach,
//! as in containers). rvsd is started under `ip netns exec` there; its pins
//! must appear in the test's own /sys/fs/bpf, and stay there after the
//! whole PID namespace is killed.

use std::path::Path;
use std::time::Duration;

use crate::harness::{Launch, Pinned, TempDir, within};
use crate::netns::Bed;

#[test]
fn ip_netns_exec_rvsd_pins_in_the_hosts_bpffs() {
    let test = "ip_netns_exec_rvsd_pins_in_the_hosts_bpffs";
    if !rvs_testbed::require_tools(test, &["unshare", "ip"]) {
        return;
    }
    let Some((_bed, [d])) = Bed::with_hosts(test, [("d", "10.77.0.1/24")]) else {
        return;
    };
    let dir = TempDir::new("pins-netns");
    // Killed (SIGKILL with the whole PID namespace) and its pins removed
    // on drop, even when the test fails.
    let mut rvsd = Pinned::new(
        &d.ns,
        rvs_testbed::unique_name("pinsns"),
        dir.path().join("rvsd.sock"),
    );
    // PID 1 of the new PID namespace is this shell (it does not exec `ip`:
    // a command follows); `ip netns exec` then makes rvsd's private mount
    // namespace. --kill-child: the namespace dies with `unshare`.
    let script = format!("ip netns exec {} \"$@\"; true", d.ns);
    let launch = Launch::at(&rvsd.socket)
        .wrapped(&[
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .plane("xdp")
        .args(["--interface", "eth0", "--xdp-mode", "skb"])
        .args(["--instance", &rvsd.instance])
        .log_level("info");
    rvsd.start(launch);
    let maps = Path::new(rvs_xdp::pin::ROOT)
        .join(&rvsd.instance)
        .join("maps");
    let pinned = || maps.join("flows4").exists() && maps.join("services").exists();
    within(
        "rvsd's pins in the host's bpffs",
        Duration::from_secs(20),
        pinned,
    );
    rvsd.kill();
    assert!(
        pinned(),
        "the pins outlive rvsd and its namespaces: {}",
        maps.display()
    );
}
