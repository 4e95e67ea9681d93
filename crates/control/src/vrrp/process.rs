//! keepalived's `vrrp_track_process` as data: which processes a block
//! counts and how many make its quorum (keepalived's exact matches, not
//! pgrep's regexes). Reading `/proc` is the daemon's.

use std::time::Duration;

use rvs_config::model::ParamMatch;

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
    pub fn uses_cmdline(&self) -> bool {
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
}
