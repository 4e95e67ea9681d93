//! The one skip policy of privileged tests.
//!
//! A test that needs root, a tool or a kernel feature it cannot find calls
//! [`skip_or_fail`] (or a `require_*` helper) and returns when told to. On a
//! developer's machine that prints `skipping TEST: REASON` and the test
//! passes without running. Under `CI` (the variable set, any value) or with
//! `RVS_REQUIRE_PRIVILEGED=1` (what `scripts/test` exports when it runs as
//! root) the same call panics with the reason: CI runs as root with every
//! tool installed, so a skip there means something is missing and must
//! turn the run red rather than hide behind a green one.

use std::ffi::OsStr;
use std::fmt::Display;
use std::path::Path;

/// The variable that makes a skip a failure outside CI (value `1`).
pub const REQUIRE_PRIVILEGED: &str = "RVS_REQUIRE_PRIVILEGED";

/// Whether a skip is a failure here: `CI` is set (to anything), or
/// [`REQUIRE_PRIVILEGED`] is `1`.
pub fn privileged_required() -> bool {
    strict(
        std::env::var_os("CI").as_deref(),
        std::env::var_os(REQUIRE_PRIVILEGED).as_deref(),
    )
}

/// The policy over the two variables' values.
fn strict(ci: Option<&OsStr>, require: Option<&OsStr>) -> bool {
    ci.is_some() || require == Some(OsStr::new("1"))
}

/// `test` cannot run here because of `reason`: print why and return (the
/// caller then returns), or — when [`privileged_required`] — panic with the
/// reason so the test fails.
pub fn skip_or_fail(test: &str, reason: impl Display) {
    skip_as(privileged_required(), test, &reason);
}

fn skip_as(strict: bool, test: &str, reason: &dyn Display) {
    if strict {
        panic!(
            "{test} cannot run here: {reason} (under CI or {REQUIRE_PRIVILEGED}=1 a skipped \
             privileged test is a failure)"
        );
    }
    eprintln!("skipping {test}: {reason}");
}

/// The effective uid of this process, from `/proc/self/status`.
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    euid() == Some(0)
}

/// True when running as root; otherwise [`skip_or_fail`] with `why` (what
/// needs root, e.g. "network namespaces need root") and false.
pub fn require_root(test: &str, why: &str) -> bool {
    if is_root() {
        return true;
    }
    let uid = euid().map_or_else(|| "unknown".to_owned(), |u| u.to_string());
    skip_or_fail(test, format!("{why} (uid {uid})"));
    false
}

/// True when a cgroup v2 hierarchy is mounted (the sock data plane's
/// programs attach to a cgroup v2); otherwise skips (or fails under CI)
/// saying so.
pub fn require_cgroup2(test: &str) -> bool {
    if crate::cgroup::unified_root().is_some() {
        return true;
    }
    skip_or_fail(test, "no cgroup v2 hierarchy mounted");
    false
}

/// [`require_root`] (`why` says what needs it) and [`require_cgroup2`]:
/// what the sock data plane's tests need.
pub fn require_root_and_cgroup2(test: &str, why: &str) -> bool {
    require_root(test, why) && require_cgroup2(test)
}

/// The first of `tools` that is not an executable file on `PATH`.
pub fn tools_missing(tools: &[&str]) -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    tools
        .iter()
        .find(|tool| !std::env::split_paths(&path).any(|dir| is_executable(&dir.join(tool))))
        .map(|t| (*t).to_owned())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True when every one of `tools` is installed; otherwise [`skip_or_fail`]
/// naming the missing one and false.
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    match tools_missing(tools) {
        None => true,
        Some(tool) => {
            skip_or_fail(
                test,
                format!("`{tool}` is not installed (scripts/install-deps installs it)"),
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Option<&OsStr> {
        Some(OsStr::new(v))
    }

    #[test]
    fn ci_set_to_anything_or_require_one_is_strict() {
        assert!(!strict(None, None));
        assert!(strict(s("true"), None));
        assert!(strict(s(""), None));
        assert!(strict(s("false"), None), "CI set at all counts");
        assert!(strict(None, s("1")));
        assert!(!strict(None, s("0")));
        assert!(!strict(None, s("")));
        assert!(strict(s("1"), s("0")));
    }

    #[test]
    fn a_lax_skip_returns() {
        skip_as(false, "a_lax_skip_returns", &"no reason to fail");
    }

    #[test]
    #[should_panic(expected = "t cannot run here: no such tool")]
    fn a_strict_skip_panics_with_the_reason() {
        skip_as(true, "t", &"no such tool");
    }

    #[test]
    fn tools_are_looked_up_on_path() {
        assert_eq!(tools_missing(&["sh"]), None);
        assert_eq!(
            tools_missing(&["sh", "rvs-no-such-tool-here"]).as_deref(),
            Some("rvs-no-such-tool-here")
        );
    }
}
