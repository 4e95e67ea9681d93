//! The instance tasks' side runners: notify scripts (keepalived's
//! arguments), tracked scripts and track files, and the task guard that
//! aborts a runner when its instance stops.

use super::*;

/// A task aborted when its handle is dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Run a `vrrp_script` every interval and publish its result with
/// keepalived's rise/fall hysteresis.
pub(super) async fn run_script(t: TrackScript, result: watch::Sender<bool>) {
    let user = match t.user.as_deref().map(rvs_check::probe::misc::resolve_user) {
        Some(Err(e)) => {
            tracing::error!(target: "rvs::vrrp", "VRRP_Script({}): {e}; treated as failing", t.name);
            let _ = result.send(false);
            return;
        }
        Some(Ok(u)) => Some(u),
        None => None,
    };
    let (mut ups, mut downs) = (0u32, 0u32);
    let mut every = tokio::time::interval(t.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let ok = rvs_check::probe::misc::check(&t.command, t.timeout, false, user)
            .await
            .is_ok();
        if ok {
            ups += 1;
            downs = 0;
        } else {
            downs += 1;
            ups = 0;
        }
        let was = *result.borrow();
        let now = if was { downs < t.fall } else { ups >= t.rise };
        if now != was {
            tracing::info!(target: "rvs::vrrp", "VRRP_Script({}) {}", t.name, if now { "succeeded" } else { "failed" });
            let _ = result.send(now);
        }
    }
}

/// How often a tracked file is read (keepalived reads it on inotify
/// events; reading it this often on the runtime's blocking pool, through
/// `tokio::fs`, costs as little and never blocks the VRRP driver).
const TRACK_FILE_POLL: Duration = Duration::from_millis(500);

/// The number in a tracked file's text as keepalived reads it (decimal,
/// blanks around it; anything else reads as 0), limited to ±254.
pub(super) fn track_file_value(text: &str) -> Option<i64> {
    let v: i64 = text.trim().parse().ok()?;
    Some(v.clamp(-254, 254))
}

/// Follow one `track_file`: write its `init_file` value, then publish the
/// number it holds whenever it changes. A missing or unreadable file, or
/// one that holds no number, counts as 0 (said once per change).
pub(super) async fn run_track_file(t: TrackFile, value: watch::Sender<i64>) {
    if let Some((v, overwrite)) = t.init {
        let exists = tokio::fs::try_exists(&t.path).await.unwrap_or(false);
        if (overwrite || !exists)
            && let Err(e) = tokio::fs::write(&t.path, format!("{v}\n")).await
        {
            tracing::error!(target: "rvs::vrrp", "track_file {}: writing {}: {e}", t.name, t.path);
        }
    }
    let mut every = tokio::time::interval(TRACK_FILE_POLL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut said = None;
    loop {
        every.tick().await;
        let (v, problem) = match tokio::fs::read_to_string(&t.path).await {
            Ok(text) => match track_file_value(&text) {
                Some(v) => (v, None),
                None => (0, Some(format!("{} holds no number", t.path))),
            },
            Err(e) => (0, Some(format!("reading {}: {e}", t.path))),
        };
        if problem != said {
            if let Some(p) = &problem {
                tracing::warn!(target: "rvs::vrrp", "track_file {}: {p}; its value is 0", t.name);
            }
            said = problem;
        }
        value.send_if_modified(|old| {
            let changed = *old != v;
            if changed {
                tracing::info!(target: "rvs::vrrp", "track_file {}: value {v}", t.name);
            }
            *old = v;
            changed
        });
    }
}

/// Run the notify scripts for `to`: the state's own script, then the
/// generic `notify` with keepalived's arguments (`TYPE NAME STATE`, plus
/// the priority for an instance).
pub(super) fn run_notify(n: &Notify, kind: &str, name: &str, to: State, priority: Option<u8>) {
    let one = match to {
        State::Master => &n.master,
        State::Backup => &n.backup,
        State::Fault => &n.fault,
        State::Stopped => &n.stop,
        State::Init => &None,
    };
    if to != State::Init {
        crate::notify::vrrp_event(kind, name, to.name(), priority.unwrap_or(0));
    }
    let why = format!("{kind} {name} {}", to.name());
    if let Some(script) = one {
        rvs_check::runner::run_script(script.clone(), why.clone());
    }
    if let Some(any) = &n.any {
        let mut script = any.clone();
        script.command = format!("{} {kind} {} {}", script.command, quote(name), to.name());
        if let Some(p) = priority {
            script.command = format!("{} {p}", script.command);
        }
        rvs_check::runner::run_script(script, why);
    }
}

/// Quote a word for the script command line (split on whitespace later).
fn quote(w: &str) -> String {
    if w.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'')
    {
        format!("\"{}\"", w.replace('"', "\\\""))
    } else {
        w.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn track_file_numbers_are_read_as_keepalived_reads_them() {
        assert_eq!(track_file_value(" 12\n"), Some(12));
        assert_eq!(track_file_value("-999"), Some(-254));
        assert_eq!(track_file_value("x"), None);
        assert_eq!(track_file_value(""), None);
    }
}
