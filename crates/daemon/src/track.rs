//! keepalived's `vrrp_track_process`: whether enough processes of a name
//! (or command line) run. keepalived follows process creation and exit
//! with the kernel's proc connector; rvsd scans `/proc` every
//! [`POLL`] on tokio's blocking pool instead (reading `/proc` is a handful
//! of small reads per process, never on the VRRP driver's thread), so a
//! change is seen within that interval plus the block's `fork_delay` /
//! `terminate_delay`.

use std::time::Duration;

use rvs_config::model::ParamMatch;
use tokio::sync::watch;

/// How often `/proc` is scanned.
pub const POLL: Duration = Duration::from_millis(500);

/// The longest process name the kernel keeps (`TASK_COMM_LEN` - 1).
const COMM_LEN: usize = 15;

/// One `vrrp_track_process` block, ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// The block's name (for logs).
    pub name: String,
    /// The command (`process`'s first word).
    pub cmd: String,
    /// Its parameters (the other words).
    pub params: Vec<String>,
    /// `param_match`.
    pub param_match: Option<ParamMatch>,
    /// `full_command`.
    pub full_command: bool,
    /// Fewest matching processes that are OK.
    pub quorum: u32,
    /// Most matching processes that are OK.
    pub quorum_max: Option<u32>,
    /// Wait this long after the quorum is gained before saying up.
    pub fork_delay: Duration,
    /// Wait this long after the quorum is lost before saying down.
    pub terminate_delay: Duration,
}

impl Process {
    /// From the configuration block.
    pub fn of(t: &rvs_config::model::TrackProcess) -> Self {
        Process {
            name: t.name.clone(),
            cmd: t.process.first().cloned().unwrap_or_default(),
            params: t.process.iter().skip(1).cloned().collect(),
            param_match: t.param_match,
            full_command: t.full_command,
            quorum: t.quorum,
            quorum_max: t.quorum_max,
            fork_delay: t.fork_delay,
            terminate_delay: t.terminate_delay,
        }
    }

    /// Whether the command line must be read (else the name is enough).
    fn uses_cmdline(&self) -> bool {
        self.full_command || !self.params.is_empty() || self.param_match.is_some()
    }

    /// Whether a process with name `comm` and arguments `argv` is one of
    /// this block's (keepalived's exact matches, not pgrep's regexes).
    pub fn matches(&self, comm: &str, argv: &[&str]) -> bool {
        if !self.uses_cmdline() {
            let want = match self.cmd.char_indices().nth(COMM_LEN) {
                Some((at, _)) => &self.cmd[..at],
                None => self.cmd.as_str(),
            };
            return comm == want;
        }
        let Some((first, args)) = argv.split_first() else {
            return false;
        };
        if *first != self.cmd {
            return false;
        }
        let p = &self.params;
        match (self.param_match, p.is_empty()) {
            // `full_command` alone: the command, any parameters.
            (None, true) => true,
            // `param_match` without parameters: none allowed.
            (Some(_), true) => args.is_empty(),
            (None | Some(ParamMatch::Exact), false) => args.iter().eq(p.iter()),
            (Some(ParamMatch::Partial), false) => {
                args.len() >= p.len() && args.iter().zip(p).all(|(a, b)| a == b)
            }
            (Some(ParamMatch::Initial), false) => {
                let n = p.len();
                args.len() >= n
                    && args[..n - 1].iter().zip(p).all(|(a, b)| a == b)
                    && args[n - 1].starts_with(p[n - 1].as_str())
            }
        }
    }

    /// Whether `count` matching processes are OK.
    pub fn quorate(&self, count: u32) -> bool {
        count >= self.quorum && self.quorum_max.is_none_or(|m| count <= m)
    }
}

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

    fn proc_of(text: &str) -> Process {
        let l = rvs_config::parse_str("t.conf", text, &Default::default()).unwrap();
        Process::of(&l.config.track_processes[0])
    }

    #[test]
    fn processes_match_as_keepalived_matches_them() {
        let by_name = proc_of("vrrp_track_process p {\n process haproxy\n}\n");
        assert!(by_name.matches("haproxy", &[]));
        assert!(!by_name.matches("haproxy-x", &[]), "exact, not pgrep");
        let long = proc_of("vrrp_track_process p {\n process very-long-daemon-name\n}\n");
        assert!(!long.matches("very-long-daem", &[]));
        assert!(
            long.matches("very-long-daemo", &[]),
            "15 characters of the name"
        );
        let exact = proc_of("vrrp_track_process p {\n process /usr/sbin/nginx -g x\n}\n");
        assert!(exact.matches("nginx", &["/usr/sbin/nginx", "-g", "x"]));
        assert!(!exact.matches("nginx", &["/usr/sbin/nginx", "-g", "x", "y"]));
        assert!(!exact.matches("nginx", &["nginx", "-g", "x"]));
        let partial =
            proc_of("vrrp_track_process p {\n process sleep 10\n param_match partial\n}\n");
        assert!(partial.matches("sleep", &["sleep", "10", "more"]));
        assert!(!partial.matches("sleep", &["sleep", "100"]));
        let initial =
            proc_of("vrrp_track_process p {\n process sleep 10\n param_match initial\n}\n");
        assert!(initial.matches("sleep", &["sleep", "100"]));
        assert!(!initial.matches("sleep", &["sleep"]));
        let none = proc_of("vrrp_track_process p {\n process sleep\n param_match partial\n}\n");
        assert!(none.matches("sleep", &["sleep"]));
        assert!(!none.matches("sleep", &["sleep", "1"]));
        let full = proc_of("vrrp_track_process p {\n process /bin/sleep\n full_command\n}\n");
        assert!(full.matches("sleep", &["/bin/sleep", "5"]));
        assert!(!full.matches("sleep", &["sleep", "5"]));
        let q = proc_of(
            "vrrp_track_process p {\n process x\n quorum 2\n quorum_max 3\n delay 1.5\n}\n",
        );
        assert!(!q.quorate(1) && q.quorate(2) && q.quorate(3) && !q.quorate(4));
        assert_eq!(q.fork_delay, Duration::from_millis(1500));
        assert_eq!(q.terminate_delay, Duration::from_millis(1500));
        let d =
            proc_of("vrrp_track_process p {\n process x\n fork_delay 2\n terminate_delay 3\n}\n");
        assert_eq!(
            (d.fork_delay, d.terminate_delay),
            (Duration::from_secs(2), Duration::from_secs(3))
        );
    }

    /// Needs no privilege: this test's own process is in `/proc`.
    #[test]
    fn the_running_test_is_counted() {
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let me = proc_of(&format!(
            "vrrp_track_process p {{\n process \"{}\"\n}}\n",
            comm.trim()
        ));
        assert!(count(&me) >= 1);
        let nobody = proc_of("vrrp_track_process p {\n process rvs-no-such-process\n}\n");
        assert_eq!(count(&nobody), 0);
    }
}
