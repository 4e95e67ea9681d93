//! PING_CHECK in a private network namespace (so the per-namespace
//! `net.ipv4.ping_group_range` can be set without touching the host).

use rvs_check::probe::{Failure, ProbeSpec};

use super::{in_netns, require_root, run_blocking, target};

/// One PING_CHECK of `addr` (outside tokio: on an [`in_netns`] thread).
fn ping(addr: &str, timeout_ms: u64) -> Result<(), Failure> {
    run_blocking(&ProbeSpec::Ping, &target(addr.parse().unwrap(), timeout_ms)).outcome
}

fn ping_once() -> Result<(), Failure> {
    ping("127.0.0.1:0", 1000)
}

fn ping_unreachable_address() -> Result<(), Failure> {
    // Nothing routes 127.0.0.0/8 away from lo, so use a TEST-NET address
    // that has no route in the empty namespace.
    ping("192.0.2.1:0", 300)
}

#[test]
fn ping_echo_when_group_allowed() {
    if !require_root(
        "ping_echo_when_group_allowed",
        "needs root for a network namespace",
    ) {
        return;
    }
    assert_eq!(in_netns(Some("0 2147483647"), ping_once), Ok(()));
    let r = in_netns(Some("0 2147483647"), ping_unreachable_address);
    assert!(matches!(r, Err(Failure::Io(_))), "{r:?}");
}

#[test]
fn ping_unsupported_by_default() {
    if !require_root(
        "ping_unsupported_by_default",
        "needs root for a network namespace",
    ) {
        return;
    }
    let r = in_netns(None, ping_once);
    assert!(matches!(r, Err(Failure::Unsupported(_))), "{r:?}");
    assert!(r.unwrap_err().to_string().contains("ping_group_range"));
}
