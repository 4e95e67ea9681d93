//! MISC_CHECK with real scripts.

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

#[tokio::test]
async fn misc_exit_codes() {
    let d = TempDir::new("misc");
    let s = d.script("rc.sh", "exit \"$1\"");
    let p = |code: u32| format!("{} {code}", s.display());
    let r = run(&misc(p(0), 5000, false), &any()).await;
    assert_eq!((r.outcome, r.misc_weight), (Ok(()), None));
    let r = run(&misc(p(1), 5000, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Exit(1)));
    assert_eq!(r.outcome.unwrap_err().to_string(), "exit status 1");
    // Without misc_dynamic every non-zero status is a failure.
    let r = run(&misc(p(5), 5000, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Exit(5)));
}

#[tokio::test]
async fn misc_dynamic_weights() {
    let d = TempDir::new("misc");
    let s = d.script("rc.sh", "exit \"$1\"");
    let p = |code: u32| format!("{} {code}", s.display());
    let r = run(&misc(p(0), 5000, true), &any()).await;
    assert_eq!((r.outcome, r.misc_weight), (Ok(()), None));
    let r = run(&misc(p(1), 5000, true), &any()).await;
    assert_eq!((r.outcome, r.misc_weight), (Err(Failure::Exit(1)), None));
    let r = run(&misc(p(2), 5000, true), &any()).await;
    assert_eq!((r.outcome, r.misc_weight), (Ok(()), Some(0)));
    let r = run(&misc(p(12), 5000, true), &any()).await;
    assert_eq!((r.outcome, r.misc_weight), (Ok(()), Some(10)));
    let r = run(&misc(p(255), 5000, true), &any()).await;
    assert_eq!((r.outcome, r.misc_weight), (Ok(()), Some(253)));
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
    let pidfile = d.path().join("bg.pid");
    // The script leaves a grandchild behind, then hangs.
    let s = d.script(
        "hang.sh",
        &format!("sleep 300 &\necho $! > {}\nsleep 300", pidfile.display()),
    );
    let r = run(&misc(s.display().to_string(), 400, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency >= Duration::from_millis(400));
    assert!(r.latency < Duration::from_millis(2000), "{:?}", r.latency);
    let bg: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_dead(bg).await, "grandchild {bg} survived");
}

#[tokio::test]
async fn misc_timeout_sigkill_after_grace_when_term_ignored() {
    let d = TempDir::new("misc");
    let pidfile = d.path().join("pid");
    // SIG_IGN for TERM is inherited by the sleep too: only SIGKILL works.
    let s = d.script(
        "stubborn.sh",
        &format!(
            "trap '' TERM\necho $$ > {}\nsleep 300\nsleep 300",
            pidfile.display()
        ),
    );
    let r = run(&misc(s.display().to_string(), 300, false), &any()).await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    // timeout + keepalived's 2 s grace before SIGKILL.
    assert!(r.latency >= Duration::from_millis(2300), "{:?}", r.latency);
    assert!(r.latency < Duration::from_millis(4000), "{:?}", r.latency);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_dead(pid).await);
}

#[tokio::test]
async fn misc_dropped_probe_kills_the_group() {
    let d = TempDir::new("misc");
    let pidfile = d.path().join("pid");
    let s = d.script(
        "long.sh",
        &format!("echo $$ > {}\nsleep 300", pidfile.display()),
    );
    let spec = misc(s.display().to_string(), 60_000, false);
    let t = any();
    let fut = run(&spec, &t);
    // Cancel the probe after it started the script.
    let _ = tokio::time::timeout(Duration::from_millis(500), fut).await;
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
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
