//! keepalived's script security through rvsd, as root with a real
//! unprivileged user (added for the test, removed after): `script_user`
//! makes every script run as that user, a script's own user wins, and
//! `enable_script_security` refuses a world-writable script that would run
//! as root (without it, the script runs and keepalived's warnings say why
//! it should not).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{RVSD, Rvsd, TempDir, free_port, within};

/// An unprivileged user of the test's own, deleted on drop.
struct User(String);

impl User {
    fn add(test: &str) -> Option<User> {
        if !rvs_testbed::require_root(test, "adding a user and running scripts as it needs root")
            || !rvs_testbed::require_tools(test, &["useradd", "userdel"])
        {
            return None;
        }
        let name = format!("rvssec{}", std::process::id() % 100_000);
        let ok = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(&name)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "useradd {name}");
        Some(User(name))
    }

    fn uid(&self) -> String {
        let out = Command::new("id")
            .args(["-u", &self.0])
            .output()
            .expect("id");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.0).status();
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A virtual server whose real server has an alpha MISC_CHECK running
/// `check` and a `notify_up` running `up` (each line as written, so with
/// a user if it names one).
fn conf(global: &str, check: &str, up: &str) -> String {
    let (vport, rport) = (free_port(), free_port());
    format!(
        "global_defs {{\n{global}}}\nvirtual_server 127.0.0.1 {vport} {{\n  delay_loop 1\n  lb_algo rr\n  lb_kind NAT\n  protocol TCP\n  \
         real_server 127.0.0.1 {rport} {{\n    weight 1\n    notify_up {up}\n    MISC_CHECK {{\n      misc_path {check}\n      alpha\n    }}\n  }}\n}}\n"
    )
}

fn check_output(conf: &Path) -> String {
    let out = Command::new(RVSD)
        .arg("-f")
        .arg(conf)
        .arg("--check")
        .output()
        .expect("rvsd --check");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn script_user_runs_scripts_as_that_user_and_script_security_refuses_writable_ones() {
    let Some(user) = User::add(
        "script_user_runs_scripts_as_that_user_and_script_security_refuses_writable_ones",
    ) else {
        return;
    };
    let dir = TempDir::new("script-sec");
    chmod(dir.path(), 0o755);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("mkdir out");
    chmod(&out, 0o777);
    // Scripts root owns and only root may change: run through /bin/sh.
    let id_to = |name: &str| {
        let p = dir.write(
            &format!("{name}.sh"),
            &format!("#!/bin/sh\nid -u > {}/{name}\n", out.display()),
        );
        chmod(&p, 0o755);
        p
    };
    let check = id_to("check");
    let up = id_to("up");

    // 1. script_user: the checker runs as the user; notify_up names its
    //    own user (nobody), which wins.
    let text = conf(
        &format!("    script_user {}\n", user.0),
        &format!("\"{}\"", check.display()),
        &format!("\"{}\" nobody", up.display()),
    );
    let file = dir.write("user.conf", &text);
    let d = Rvsd::start("script-sec-user", &["-f", &file.display().to_string()]);
    let read = |n: &str| std::fs::read_to_string(out.join(n)).unwrap_or_default();
    within("the checker ran", Duration::from_secs(10), || {
        !read("check").is_empty()
    });
    within("notify_up ran", Duration::from_secs(10), || {
        !read("up").is_empty()
    });
    assert_eq!(
        read("check").trim(),
        user.uid(),
        "MISC_CHECK runs as script_user"
    );
    let nobody = String::from_utf8_lossy(
        &Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .expect("id")
            .stdout,
    )
    .trim()
    .to_owned();
    assert_eq!(read("up").trim(), nobody, "a script's own user wins");
    drop(d);

    // 2. A world-writable script that would run as root.
    let ww = dir.write("ww.sh", &format!("#!/bin/sh\ntouch {}/ww\n", out.display()));
    chmod(&ww, 0o777);
    let ww_path = ww.display().to_string();
    let unsafe_msg = format!("Unsafe permissions found for script '{ww_path}'");

    //    Without enable_script_security: it runs, with keepalived's warnings.
    let text = conf("    script_user root\n", &ww_path, "/bin/true");
    let file = dir.write("ww.conf", &text);
    let said = check_output(&file);
    assert!(said.contains(&format!("{unsafe_msg}.")), "{said}");
    assert!(
        said.contains(
            "SECURITY VIOLATION - scripts are being executed but script_security not enabled."
        ),
        "{said}"
    );
    let d = Rvsd::start("script-sec-ww", &["-f", &file.display().to_string()]);
    within("the insecure script ran", Duration::from_secs(10), || {
        out.join("ww").exists()
    });
    drop(d);
    std::fs::remove_file(out.join("ww")).expect("rm marker");

    //    With enable_script_security: refused, never run.
    let text = conf(
        "    script_user root\n    enable_script_security\n",
        &ww_path,
        "/bin/true",
    );
    let file = dir.write("ww-secure.conf", &text);
    let said = check_output(&file);
    assert!(
        said.contains(&format!("{unsafe_msg} - disabling.")),
        "{said}"
    );
    assert!(
        said.contains(&format!("Disabling misc script {ww_path} due to insecure")),
        "{said}"
    );
    let d = Rvsd::start("script-sec-refused", &["-f", &file.display().to_string()]);
    // Three delay_loops and more: the refused script never runs.
    std::thread::sleep(Duration::from_secs(4));
    assert!(!out.join("ww").exists(), "a refused script ran");
    drop(d);
}
