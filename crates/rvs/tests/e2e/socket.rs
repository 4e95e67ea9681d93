//! The control socket: permissions, stale files, a second daemon, shutdown.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{RVSD, Rvsd, TempDir, parts};

#[test]
fn socket_is_owner_only() {
    let d = Rvsd::start("sock-mode", &[]);
    let meta = std::fs::metadata(&d.socket).expect("socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
}

#[test]
fn stale_socket_is_replaced_and_live_one_is_refused() {
    let dir = TempDir::new("sock-stale");
    let path = dir.path().join("rvsd.sock");
    // A socket file nobody listens on, as a crashed daemon leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let d = Rvsd::start_in(dir, &[]);
    assert_eq!(d.ok("-Ln").lines().count(), 3);
    // A second daemon on the same socket must refuse to start.
    let out = Command::new(RVSD)
        .args(["--dataplane", "none", "--socket"])
        .arg(&d.socket)
        .stderr(Stdio::piped())
        .output()
        .expect("rvsd");
    let (_, err, code) = parts(&out);
    assert_ne!(code, 0);
    assert!(err.contains("another rvsd is already listening"), "{err}");
    // ...and the first one is still serving.
    assert_eq!(d.ok("-Ln").lines().count(), 3);
}

#[test]
fn sigterm_and_sigint_shut_down_cleanly() {
    for sig in ["TERM", "INT"] {
        let mut d = Rvsd::start("sock-term", &[]);
        d.signal(sig);
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = d.child.try_wait().expect("wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "rvsd ignored SIG{sig}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "SIG{sig}: {status}");
        assert!(!d.socket.exists(), "socket removed on exit");
    }
}

#[test]
fn daemon_down_is_reported_like_ipvsadm() {
    let dir = TempDir::new("sock-down");
    let out = Command::new(crate::harness::RVSADM)
        .arg("-Ln")
        .env("RVS_SOCKET", dir.path().join("nope.sock"))
        .output()
        .expect("rvsadm");
    let (_, err, code) = parts(&out);
    assert_eq!(code, 2);
    assert!(err.starts_with("Can't initialize ipvs: "), "{err}");
    // --socket beats the environment.
    let d = Rvsd::start("sock-flag", &[]);
    let out = Command::new(crate::harness::RVSADM)
        .args(["--socket"])
        .arg(&d.socket)
        .arg("-Ln")
        .env("RVS_SOCKET", dir.path().join("nope.sock"))
        .output()
        .expect("rvsadm");
    assert!(out.status.success());
}
