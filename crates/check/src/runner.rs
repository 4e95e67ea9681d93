//! The tokio driver of the health checker.
//!
//! One task owns the schedule: it sleeps until the next probe is due (or a
//! result or a reconfiguration arrives), then, under the host's lock, feeds
//! results to the [`Health`], pushes health changes to the data plane and
//! collects due probes; outside the lock it spawns each probe as its own
//! task (thousands run concurrently; their start times are spread by the
//! warmup jitter and by each checker's own completion time, so there is no
//! burst per `delay_loop`) and runs scripts.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rvs_control::protocol::Command;
use rvs_control::state::{ServiceDef, diff};
use rvs_core::ipvs::Ipvs;
use rvs_core::model::{DestConfig, ServiceKey};
use tokio::sync::{Notify, mpsc};

use crate::health::Health;
use crate::policy::{CheckerId, Outcome, ScriptSpec};

/// What the runner needs from its host (the daemon).
pub trait Host: Send + 'static {
    /// The health checker, if this host runs one.
    fn health(&mut self) -> Option<&mut Health>;
    /// Make `key`'s real servers equal `dests` (through the host's atomic
    /// change path; see [`commands_for`]).
    fn apply_health(&mut self, key: ServiceKey, dests: Vec<DestConfig>);
}

/// The commands that turn the live real servers of `key` into `dests`
/// (only the difference: a flapping server touches nothing else). None when
/// the service is not live (an operator deleted it).
pub fn commands_for(ipvs: &Ipvs, key: ServiceKey, dests: Vec<DestConfig>) -> Option<Vec<Command>> {
    let svc = ipvs.service(&key)?;
    let live = ServiceDef {
        key,
        config: svc.config().clone(),
        dests: svc.dests().iter().rev().map(|d| d.config).collect(),
    };
    let target = ServiceDef {
        key,
        config: live.config.clone(),
        dests,
    };
    diff(&[live], &[target]).ok().map(|(cmds, _)| cmds)
}

/// Split a script's command line into words as keepalived does: whitespace
/// separates, single and double quotes group, a backslash escapes the next
/// character (outside single quotes).
pub fn split_command(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = cmd.chars();
    let mut quote: Option<char> = None;
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
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// Run a notify/quorum script without a shell (keepalived execs the words
/// of the command line); its exit status is logged, never waited on by the
/// scheduler.
pub fn run_script(script: ScriptSpec, why: String) {
    let words = split_command(&script.command);
    let Some((prog, args)) = words.split_first() else {
        return;
    };
    tracing::info!(target: "rvs::check", "Executing [{}] for {why}", script.command);
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(false);
    if let Some(u) = &script.user {
        match resolve_user(u, "/etc/passwd", "/etc/group") {
            Ok((uid, gid)) => {
                cmd.uid(uid).gid(gid);
            }
            Err(e) => {
                tracing::warn!(target: "rvs::check", "not running [{}]: {e}", script.command);
                return;
            }
        }
    }
    match cmd.spawn() {
        Ok(mut child) => {
            let command = script.command.clone();
            tokio::spawn(async move {
                match child.wait().await {
                    Ok(st) if st.success() => {}
                    Ok(st) => tracing::warn!(target: "rvs::check", "[{command}] exited with {st}"),
                    Err(e) => tracing::warn!(target: "rvs::check", "[{command}]: {e}"),
                }
            });
        }
        Err(e) => tracing::warn!(target: "rvs::check", "cannot run [{}]: {e}", script.command),
    }
}

/// `user [group]` (or `user:group`) of a script to (uid, gid), from the
/// passwd and group files; numeric ids are taken as they are. Without a
/// group, the user's primary group.
pub fn resolve_user(spec: &str, passwd: &str, group: &str) -> Result<(u32, u32), String> {
    let mut it = spec
        .split(|c: char| c.is_whitespace() || c == ':')
        .filter(|w| !w.is_empty());
    let user = it.next().ok_or_else(|| "empty script user".to_owned())?;
    let grp = it.next();
    let lookup = |file: &str, name: &str, field: usize| -> Option<Vec<String>> {
        std::fs::read_to_string(file).ok().and_then(|t| {
            t.lines()
                .map(|l| l.split(':').map(str::to_owned).collect::<Vec<_>>())
                .find(|f| f.first().is_some_and(|n| n == name) && f.len() > field)
        })
    };
    let (uid, primary) = match user.parse::<u32>() {
        Ok(n) => (n, n),
        Err(_) => {
            let f = lookup(passwd, user, 3).ok_or_else(|| format!("unknown user {user}"))?;
            let uid = f[2].parse().map_err(|_| format!("bad uid for {user}"))?;
            let gid = f[3].parse().map_err(|_| format!("bad gid for {user}"))?;
            (uid, gid)
        }
    };
    let gid = match grp {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => lookup(group, g, 2).ok_or_else(|| format!("unknown group {g}"))?[2]
                .parse()
                .map_err(|_| format!("bad gid for {g}"))?,
        },
    };
    Ok((uid, gid))
}

/// Drive the host's health checker forever. `wake` is notified by the host
/// after it reconfigures the checker (start, reload).
pub async fn run<H: Host>(host: Arc<Mutex<H>>, wake: Arc<Notify>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(CheckerId, Outcome)>();
    let mut results: Vec<(CheckerId, Outcome)> = Vec::new();
    loop {
        let step = {
            let Ok(mut h) = host.lock() else {
                return;
            };
            let now = Instant::now();
            match h.health() {
                None => None,
                Some(health) => {
                    let work = health.step(now, std::mem::take(&mut results));
                    let due = health.next_due();
                    for (key, dests) in work.syncs {
                        h.apply_health(key, dests);
                    }
                    Some(((work.probes, work.scripts), due))
                }
            }
        };
        let Some((work, due)) = step else {
            wake.notified().await;
            continue;
        };
        let (probes, scripts) = work;
        for (id, job) in probes {
            let tx = tx.clone();
            tokio::spawn(async move {
                let o = crate::bridge::run(&job).await;
                let _ = tx.send((id, o));
            });
        }
        for (s, why) in scripts {
            run_script(s, why);
        }
        let sleep = async {
            match due {
                Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            r = rx.recv() => {
                if let Some(r) = r {
                    results.push(r);
                }
                while let Ok(r) = rx.try_recv() {
                    results.push(r);
                }
            }
            _ = wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_users_resolve_from_files() {
        let dir = std::env::temp_dir().join(format!("rvs-check-users-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("passwd");
        let gr = dir.join("group");
        std::fs::write(
            &pw,
            "root:x:0:0::/root:/bin/sh\nweb:x:33:34::/var/www:/bin/false\n",
        )
        .unwrap();
        std::fs::write(&gr, "root:x:0:\nstaff:x:50:\n").unwrap();
        let (p, g) = (pw.to_str().unwrap(), gr.to_str().unwrap());
        assert_eq!(resolve_user("web", p, g), Ok((33, 34)));
        assert_eq!(resolve_user("web staff", p, g), Ok((33, 50)));
        assert_eq!(resolve_user("web:staff", p, g), Ok((33, 50)));
        assert_eq!(resolve_user("1000 7", p, g), Ok((1000, 7)));
        assert!(resolve_user("nobody-here", p, g).is_err());
        assert!(resolve_user("web nogroup", p, g).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn split_like_keepalived() {
        assert_eq!(split_command("/bin/echo a  b"), vec!["/bin/echo", "a", "b"]);
        assert_eq!(
            split_command("/x \"a b\" 'c \\d' e\\ f"),
            vec!["/x", "a b", "c \\d", "e f"]
        );
        assert_eq!(split_command("  "), Vec::<String>::new());
        assert_eq!(split_command("x ''"), vec!["x", ""]);
    }
}
