//! `smtp_alert`: rvsd mails VRRP transitions to a real SMTP server —
//! Debian's `python3-aiosmtpd`, listening on the loopback of the
//! director's namespace — with keepalived's headers, subject and body.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{TempDir, within};
use crate::netns::Bed;
use crate::vrrp::{Proc, rvsd};

const PYTHON: &str = "/usr/bin/python3";

#[test]
fn smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server() {
    let test = "smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server";
    let Some(mut bed) = Bed::new(test) else {
        return;
    };
    let has_aiosmtpd = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_aiosmtpd {
        rvs_testbed::skip_or_fail(
            test,
            "python3-aiosmtpd is not installed (scripts/install-deps)",
        );
        return;
    }
    let a = bed.host("a", "10.0.8.1/24");
    let dir = TempDir::new("smtp-alert");
    let mail = dir.path().join("mail.txt");
    let server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &a.ns,
            PYTHON,
            "-u",
            "-m",
            "aiosmtpd",
            "-n",
            "-l",
            "127.0.0.1:2525",
        ])
        .stdin(Stdio::null())
        .stdout(
            std::fs::File::create(&mail)
                .map(Stdio::from)
                .expect("mail file"),
        )
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn aiosmtpd");
    let _server = Proc(Some(server));
    within("aiosmtpd listens", Duration::from_secs(10), || {
        let out = a.exec(&["ss", "-Hltn", "sport = :2525"]);
        !String::from_utf8_lossy(&out.stdout).trim().is_empty()
    });

    let conf = "global_defs {
    router_id LB_TEST
    notification_email {
        ops@example.com
        two@example.com
    }
    notification_email_from lb@example.com
    smtp_server 127.0.0.1 2525
    smtp_connect_timeout 5
    smtp_helo_name director.example.com
}
vrrp_instance VI_1 {
    state BACKUP
    interface eth0
    virtual_router_id 71
    priority 100
    advert_int 1
    smtp_alert
    virtual_ipaddress {
        10.0.8.100/24
    }
}
";
    let _d = rvsd(&a, dir.path(), "a", conf);
    let read = || std::fs::read_to_string(&mail).unwrap_or_default();
    within("the MASTER mail arrives", Duration::from_secs(15), || {
        read().contains("Entering MASTER state")
    });
    let text = read();
    for want in [
        "Subject: [LB_TEST] VRRP Instance VI_1 - Entering BACKUP state",
        "=> VRRP Instance is no longer owning VRRP VIPs <=",
        "Subject: [LB_TEST] VRRP Instance VI_1 - Entering MASTER state",
        "=> VRRP Instance is now owning VRRP VIPs <=",
        "From: lb@example.com",
        "To: ops@example.com, two@example.com",
        "X-Mailer: Keepalived",
    ] {
        assert!(
            text.contains(want),
            "{want:?} not in the mail received:\n{text}"
        );
    }
}
