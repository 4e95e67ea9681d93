//! MISC_CHECK with real scripts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rvs_check::probe::{Failure, ProbeSpec, run};

use super::{TempDir, require_root, target};

fn misc(path: String, timeout_ms: u64, dynamic: bool) -> ProbeSpec {
    ProbeSpec::Misc {
        path,
        timeout: Duration::from_millis(timeout_ms),
        dynamic,
        user: None,
    }
}

/// MISC ignores the address; any target will do.
fn any() -> rvs_check::probe::ProbeTarget {
    target("127.0.0.1:9".parse().unwrap(), 1000)
}

/// Runs a script that exits with `code` as a MISC_CHECK (5 s timeout);
/// returns the outcome and the weight it asks for.
async fn exit_with(code: u32, dynamic: bool) -> (Result<(), Failure>, Option<u32>) {
    let d = TempDir::new("misc");
    let s = d.script("rc.sh", "exit \"$1\"");
    let r = run(
        &misc(format!("{} {code}", s.display()), 5000, dynamic),
        &any(),
    )
    .await;
    (r.outcome, r.misc_weight)
}

#[tokio::test]
async fn misc_exit_codes() {
    assert_eq!(exit_with(0, false).await, (Ok(()), None));
    let (outcome, _) = exit_with(1, false).await;
    assert_eq!(outcome, Err(Failure::Exit(1)));
    assert_eq!(outcome.unwrap_err().to_string(), "exit status 1");
    // Without misc_dynamic every non-zero status is a failure.
    assert_eq!(exit_with(5, false).await.0, Err(Failure::Exit(5)));
}

#[tokio::test]
async fn misc_dynamic_weights() {
    for (code, want) in [
        (0, (Ok(()), None)),
        (1, (Err(Failure::Exit(1)), None)),
        (2, (Ok(()), Some(0))),
        (12, (Ok(()), Some(10))),
        (255, (Ok(()), Some(253))),
    ] {
        assert_eq!(exit_with(code, true).await, want, "exit {code}");
    }
}

#[tokio::test]
async fn misc_arguments_split_without_shell() {
    let d = TempDir::new("misc");
    let s = d.script(
        "args.sh",
        r#"[ "$#" = 3 ] && [ "$1" = "a b" ] && [ "$2" = 'c"d' ] && [ "$3" = '$HOME' ] && exit 0; exit 1"#,
    );
    let line = format!(r#"{} 'a b' "c\"d" '$HOME'"#, s.display());
    let r = run(&misc(line, 5000, false), &any()).await;
    assert_eq!(r.outcome, Ok(()));
}

#[tokio::test]
async fn misc_spawn_failure() {
    let r = run(
        &misc("/nonexistent/rvs-check-script".into(), 5000, false),
        &any(),
    )
    .await;
    assert!(matches!(r.outcome, Err(Failure::Spawn(_))), "{r:?}");
    let r = run(&misc("  ".into(), 5000, false), &any()).await;
    assert!(matches!(r.outcome, Err(Failure::Spawn(_))), "{r:?}");
}

fn alive(pid: i32) -> bool {
    // A zombie (exited, not yet reaped by its new parent) counts as dead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(s) => {
            let state = s.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    }
}

/// Writes the script `name` into `d` with `body`, in which `PIDFILE`
/// stands for the file the script writes a pid to; returns the script's
/// path (a MISC_CHECK command line) and that file.
fn pid_script(d: &TempDir, name: &str, body: &str) -> (String, PathBuf) {
    let pidfile = d.path().join(format!("{name}.pid"));
    let body = body.replace("PIDFILE", &pidfile.display().to_string());
    (d.script(name, &body).display().to_string(), pidfile)
}

/// The pid a script wrote to `file`.
fn read_pid(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn wait_dead(pid: i32) -> bool {
    for _ in 0..50 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn misc_timeout_kills_process_group() {
    let d = TempDir::new("misc");
    // The script leaves a grandchild behind, then hangs.
    let (s, pidfile) = pid_script(&d, "hang.sh", "sleep 300 &\necho $! > PIDFILE\nsleep 300");
    let r = run(&misc(s, 400, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency >= Duration::from_millis(400));
    assert!(r.latency < Duration::from_millis(2000), "{:?}", r.latency);
    let bg = read_pid(&pidfile);
    assert!(wait_dead(bg).await, "grandchild {bg} survived");
}

#[tokio::test]
async fn misc_timeout_sigkill_after_grace_when_term_ignored() {
    let d = TempDir::new("misc");
    // SIG_IGN for TERM is inherited by the sleep too: only SIGKILL works.
    let (s, pidfile) = pid_script(
        &d,
        "stubborn.sh",
        "trap '' TERM\necho $$ > PIDFILE\nsleep 300\nsleep 300",
    );
    let r = run(&misc(s, 300, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    // timeout + keepalived's 2 s grace before SIGKILL.
    assert!(r.latency >= Duration::from_millis(2300), "{:?}", r.latency);
    assert!(r.latency < Duration::from_millis(4000), "{:?}", r.latency);
    let pid = read_pid(&pidfile);
    assert!(wait_dead(pid).await);
}

#[tokio::test]
async fn misc_dropped_probe_kills_the_group() {
    let d = TempDir::new("misc");
    let (s, pidfile) = pid_script(&d, "long.sh", "echo $$ > PIDFILE\nsleep 300");
    let spec = misc(s, 60_000, false);
    let t = any();
    let fut = run(&spec, &t);
    // Cancel the probe after it started the script.
    let _ = tokio::time::timeout(Duration::from_millis(500), fut).await;
    let pid = read_pid(&pidfile);
    assert!(
        wait_dead(pid).await,
        "script {pid} survived a dropped probe"
    );
}

#[tokio::test]
async fn misc_user_runs_as_that_uid() {
    if !require_root("misc_user_runs_as_that_uid", "needs root to change uid") {
        return;
    }
    let d = TempDir::new("misc");
    let s = d.script(
        "who.sh",
        r#"[ "$(id -u):$(id -g)" = "65534:65534" ] && exit 0; exit 1"#,
    );
    let spec = ProbeSpec::Misc {
        path: s.display().to_string(),
        timeout: Duration::from_secs(5),
        dynamic: false,
        user: Some((65534, 65534)),
    };
    let r = run(&spec, &any()).await;
    assert_eq!(r.outcome, Ok(()));
    // And as ourselves (root) the same script fails: the check is real.
    let r = run(&misc(s.display().to_string(), 5000, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Exit(1)));
}
