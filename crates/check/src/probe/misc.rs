//! `MISC_CHECK`: run a program and judge its exit status.
//!
//! As keepalived does: `misc_path` is split into words (whitespace separates,
//! `"..."` and `'...'` group, `\` escapes the next character) and executed
//! directly, without a shell (`PATH` is searched when the first word has no
//! `/`); stdin, stdout and stderr are `/dev/null`. The program runs in its
//! own process group. Exit 0 = up; with `misc_dynamic`, 2..=255 = up with
//! weight `code - 2`; anything else = down. On timeout the group gets
//! SIGTERM, then SIGKILL after 2 s if the program is still there; the
//! result is [`Failure::Timeout`]. If the probe future is dropped while the
//! program runs, the whole group is killed.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;

use super::Failure;

/// Grace between SIGTERM and SIGKILL on timeout (keepalived's 2 s).
const TERM_GRACE: Duration = Duration::from_secs(2);

/// Splits a command line into words the way keepalived splits `misc_path`
/// and notify scripts: whitespace separates, single and double quotes
/// group, a backslash escapes the next character except inside single
/// quotes. `None` when a quote is left open.
pub fn split_command(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if in_word {
        words.push(cur);
    }
    Some(words)
}

/// Resolves MISC_CHECK's and scripts' `user USER [GROUP]` (as the
/// configuration stores it: words separated by a space; `USER:GROUP` too)
/// to a uid and gid, as keepalived does: the
/// user's primary group unless a group is named. Numeric ids are accepted
/// where no such name exists. Reads the user and group databases, so call
/// it when a configuration is loaded, not per check.
pub fn resolve_user(spec: &str) -> Result<(u32, u32), Failure> {
    use nix::unistd::{Group, User};
    let mut words = spec
        .split(|c: char| c.is_whitespace() || c == ':')
        .filter(|w| !w.is_empty());
    let name = words
        .next()
        .ok_or_else(|| Failure::Spawn("empty user".into()))?;
    let (uid, primary_gid) = match User::from_name(name) {
        Ok(Some(u)) => (u.uid.as_raw(), Some(u.gid.as_raw())),
        Ok(None) | Err(_) => match name.parse::<u32>() {
            Ok(uid) => (uid, None),
            Err(_) => return Err(Failure::Spawn(format!("unknown user {name:?}"))),
        },
    };
    let gid = match words.next() {
        Some(g) => match Group::from_name(g) {
            Ok(Some(gr)) => gr.gid.as_raw(),
            Ok(None) | Err(_) => g
                .parse::<u32>()
                .map_err(|_| Failure::Spawn(format!("unknown group {g:?}")))?,
        },
        None => primary_gid.unwrap_or(uid),
    };
    Ok((uid, gid))
}

/// Kills the process group when dropped while armed.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.0 {
            // ESRCH (group already gone) is fine.
            let _ = killpg(pgid, sig);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Runs the program once. `Ok(Some(w))` is "up, set weight `w`"
/// (misc_dynamic), `Ok(None)` plain up.
pub async fn check(
    path: &str,
    timeout: Duration,
    dynamic: bool,
    user: Option<(u32, u32)>,
) -> Result<Option<u32>, Failure> {
    let words = split_command(path).ok_or_else(|| Failure::Spawn("unbalanced quote".into()))?;
    let Some((program, args)) = words.split_first() else {
        return Err(Failure::Spawn("empty misc_path".into()));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if let Some((uid, gid)) = user {
        cmd.gid(gid).uid(uid);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::Spawn(format!("{program}: {e}")))?;
    let mut guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    );
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Err(Failure::Io(format!("wait: {e}"))),
        Err(_) => {
            guard.signal(Signal::SIGTERM);
            if tokio::time::timeout(TERM_GRACE, child.wait())
                .await
                .is_err()
            {
                guard.signal(Signal::SIGKILL);
                let _ = child.wait().await;
            }
            // Whatever the program left behind in its group goes too.
            guard.signal(Signal::SIGKILL);
            guard.0 = None;
            return Err(Failure::Timeout);
        }
    };
    // Exited by itself: like keepalived, leave any children it left running.
    guard.0 = None;
    judge(status, dynamic)
}

/// keepalived's reading of an exit status.
fn judge(status: std::process::ExitStatus, dynamic: bool) -> Result<Option<u32>, Failure> {
    use std::os::unix::process::ExitStatusExt;
    match status.code() {
        Some(0) => Ok(None),
        Some(c) if dynamic && (2..=255).contains(&c) => Ok(Some(c.unsigned_abs() - 2)),
        Some(c) => Err(Failure::Exit(c)),
        None => Err(Failure::Signal(status.signal().unwrap_or(0))),
    }
}

#[cfg(test)]
mod tests {
    use super::split_command;

    #[test]
    fn resolves_users() {
        use super::resolve_user;
        // root exists everywhere, with primary group 0.
        assert_eq!(resolve_user("root").unwrap(), (0, 0));
        assert_eq!(resolve_user("root 65534").unwrap(), (0, 65534));
        assert_eq!(resolve_user("root:65534").unwrap(), (0, 65534));
        assert_eq!(resolve_user("4242").unwrap(), (4242, 4242));
        assert!(resolve_user("no-such-user-rvs").is_err());
        assert!(resolve_user("root no-such-group-rvs").is_err());
        assert!(resolve_user("").is_err());
    }

    #[test]
    fn splits_like_keepalived() {
        assert_eq!(
            split_command("/bin/check  -p 80 ").unwrap(),
            vec!["/bin/check", "-p", "80"]
        );
        assert_eq!(
            split_command(r#"/x "a b" 'c d' e\ f "" g"#).unwrap(),
            vec!["/x", "a b", "c d", "e f", "", "g"]
        );
        assert_eq!(split_command(r#"a"b c"d"#).unwrap(), vec!["ab cd"]);
        assert!(split_command("/x \"open").is_none());
        assert!(split_command("   ").unwrap().is_empty());
        assert_eq!(
            split_command("/x \"a b\" 'c \\d' e\\ f").unwrap(),
            vec!["/x", "a b", "c \\d", "e f"]
        );
        assert_eq!(split_command("x ''").unwrap(), vec!["x", ""]);
    }
}
