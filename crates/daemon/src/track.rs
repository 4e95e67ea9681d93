//! keepalived's `vrrp_track_process`: whether enough processes of a name
//! (or command line) run. keepalived follows process creation and exit
//! with the kernel's proc connector; rvsd scans `/proc` every
//! [`POLL`] on tokio's blocking pool instead (reading `/proc` is a handful
//! of small reads per process, never on the VRRP driver's thread), so a
//! change is seen within that interval plus the block's `fork_delay` /
//! `terminate_delay`.

use std::time::Duration;

use rvs_control::vrrp::Process;
use tokio::sync::watch;

/// How often `/proc` is scanned.
pub const POLL: Duration = Duration::from_millis(500);

/// The running (not zombie) processes of `/proc` that match `p`.
fn count(p: &Process) -> u32 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let base = format!("/proc/{pid}");
        // `pid (comm) S ...`: the state follows the last `)`.
        let Ok(stat) = std::fs::read_to_string(format!("{base}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        if stat[close + 1..].trim_start().starts_with('Z') {
            continue;
        }
        let comm = stat
            .find('(')
            .map(|open| &stat[open + 1..close])
            .unwrap_or("");
        let cmdline = if p.uses_cmdline() {
            std::fs::read(format!("{base}/cmdline")).unwrap_or_default()
        } else {
            Vec::new()
        };
        let text = String::from_utf8_lossy(&cmdline);
        let argv: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
        let argv = if text.is_empty() { &[][..] } else { &argv[..] };
        if p.matches(comm, argv) {
            n += 1;
        }
    }
    n
}

/// Follow one `vrrp_track_process`: publish whether its quorum is met,
/// with `fork_delay` before saying up and `terminate_delay` before saying
/// down (the first scan is published at once).
pub async fn run(p: Process, up: watch::Sender<bool>) {
    let mut every = tokio::time::interval(POLL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    // The quorum state seen and since when, until the delay passes.
    let mut pending: Option<(bool, tokio::time::Instant)> = None;
    loop {
        every.tick().await;
        let q = p.clone();
        let Ok(n) = tokio::task::spawn_blocking(move || count(&q)).await else {
            continue;
        };
        let ok = p.quorate(n);
        let now = tokio::time::Instant::now();
        let publish = |v: bool| {
            up.send_if_modified(|old| {
                let changed = *old != v;
                if changed {
                    tracing::info!(target: "rvs::vrrp", "VRRP_Track_Process({}): {} ({n} running)", p.name, if v { "up" } else { "down" });
                }
                *old = v;
                changed
            });
        };
        if first {
            first = false;
            publish(ok);
            continue;
        }
        if ok == *up.borrow() {
            pending = None;
            continue;
        }
        let since = match pending {
            Some((v, t)) if v == ok => t,
            _ => {
                pending = Some((ok, now));
                now
            }
        };
        let delay = if ok { p.fork_delay } else { p.terminate_delay };
        if now.duration_since(since) >= delay {
            pending = None;
            publish(ok);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block matching processes by name (all `count` looks at).
    fn named(cmd: &str) -> Process {
        Process {
            name: "p".into(),
            cmd: cmd.into(),
            params: Vec::new(),
            param_match: None,
            full_command: false,
            quorum: 1,
            quorum_max: None,
            fork_delay: Duration::ZERO,
            terminate_delay: Duration::ZERO,
        }
    }

    /// Needs no privilege: this test's own process is in `/proc`.
    #[test]
    fn the_running_test_is_counted() {
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let me = named(comm.trim());
        assert!(count(&me) >= 1);
        let nobody = named("rvs-no-such-process");
        assert_eq!(count(&nobody), 0);
    }
}
