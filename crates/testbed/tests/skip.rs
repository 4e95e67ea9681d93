//! `skip_or_fail` as a test sees it, through the environment: this test
//! binary runs itself again with `CI` / `RVS_REQUIRE_PRIVILEGED` set or not
//! and checks that the same skip passes on a developer's machine and fails
//! in CI.

use std::process::{Command, Output};

/// Set only in the child runs below.
const CHILD: &str = "RVS_TESTBED_SKIP_CHILD";

fn child(env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args([
        "--ignored",
        "--exact",
        "skipping_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env_remove("CI")
    .env_remove("RVS_REQUIRE_PRIVILEGED")
    .env(CHILD, "1");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run the test binary")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_skip_passes_on_a_workstation_and_fails_under_ci() {
    let lax = child(&[]);
    assert!(lax.status.success(), "{}", text(&lax));
    assert!(
        text(&lax).contains("skipping skipping_child: no frobnicator here"),
        "{}",
        text(&lax)
    );
    let off = child(&[("RVS_REQUIRE_PRIVILEGED", "0")]);
    assert!(off.status.success(), "{}", text(&off));

    for env in [("CI", "true"), ("CI", ""), ("RVS_REQUIRE_PRIVILEGED", "1")] {
        let strict = child(&[env]);
        assert!(!strict.status.success(), "{env:?}: {}", text(&strict));
        assert!(
            text(&strict).contains("skipping_child cannot run here: no frobnicator here"),
            "{env:?}: {}",
            text(&strict)
        );
    }
}

/// The test the runs above start (`--ignored --exact`): ignored when run
/// alone, a failure when run by hand outside them.
#[test]
#[ignore = "the child process of a_skip_passes_on_a_workstation_and_fails_under_ci, which runs it with --ignored --exact"]
fn skipping_child() {
    assert!(
        std::env::var_os(CHILD).is_some(),
        "run by a_skip_passes_on_a_workstation_and_fails_under_ci only ({CHILD} unset)"
    );
    rvs_testbed::skip_or_fail("skipping_child", "no frobnicator here");
}
