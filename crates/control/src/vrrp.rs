//! VRRP's decisions, sans-IO: keepalived.conf's `vrrp_instance` blocks
//! planned into one [`Spec`] per instance ([`plan()`]), the tracked
//! processes ([`Process`]) and the priority arithmetic of track files
//! ([`with_files`]). rvsd's VRRP driver (`rvs-daemon`) runs the plans: the
//! sockets, the tasks, the clock, the scripts and netlink are its.

mod plan;
mod process;

pub use plan::{NOT_APPLIED, Notify, Spec, TrackFile, TrackScript, Vip, plan};
pub use process::Process;

/// `prio` with the tracked files' (weight, number) added as keepalived
/// adds them; `None` when one puts the instance in FAULT (weight 0 and a
/// non-zero number, or number × weight below -253).
pub fn with_files(mut prio: i64, files: impl Iterator<Item = (i64, i64)>) -> Option<i64> {
    for (w, v) in files {
        if w == 0 {
            if v != 0 {
                return None;
            }
            continue;
        }
        let r = v.saturating_mul(w);
        if r < -253 {
            return None;
        }
        prio += r.min(253);
    }
    Some(prio)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod strict_tests;
