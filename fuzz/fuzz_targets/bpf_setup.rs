//! What a BPF fuzz target (xdp_frames, toa_insert_frames, decap_frames)
//! does when its program cannot be set up — not root, a build without
//! clang, a verifier refusal, a map that cannot be filled: on a
//! developer's machine it says why and fuzzes nothing; under `CI` (set to
//! anything) or `RVS_REQUIRE_PRIVILEGED=1` — `rvs_testbed::skip_or_fail`'s
//! rule — it stops the run with an error before fuzzing, so that a target
//! that fuzzed nothing cannot pass there. Included by each target
//! (`#[path]`); not a target itself.

use std::fmt::Display;

/// Set (to anything): the target's setup fails as a refused program's
/// would, before it loads anything — how scripts/fuzz checks that the BPF
/// targets fail under CI when their program cannot load.
pub const REFUSE: &str = "RVS_FUZZ_REFUSE_BPF";

/// `Err` when [`REFUSE`] is set.
pub fn forced_refusal() -> Result<(), String> {
    match std::env::var_os(REFUSE) {
        Some(_) => Err(format!("the program is refused ({REFUSE} is set)")),
        None => Ok(()),
    }
}

/// The setup of `target` failed with `e`: exit with an error under CI (or
/// `RVS_REQUIRE_PRIVILEGED=1`), else say so and return (the target then
/// fuzzes nothing).
pub fn setup_failed(target: &str, e: &dyn Display) {
    let reason = format!("not fuzzing the BPF program: {e} (needs root and clang)");
    if rvs_testbed::privileged_required() {
        eprintln!(
            "{target} cannot run here: {reason} (under CI or {}=1 a BPF fuzz target \
             must load its program)",
            rvs_testbed::skip::REQUIRE_PRIVILEGED
        );
        std::process::exit(1);
    }
    rvs_testbed::skip_or_fail(target, reason);
}
