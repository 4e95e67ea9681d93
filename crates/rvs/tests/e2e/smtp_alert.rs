//! `smtp_alert`: rvsd mails VRRP transitions to a real SMTP server —
//! Debian's `python3-aiosmtpd`, listening on the loopback of the
//! director's namespace — with keepalived's headers, subject and body.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{Proc, TempDir, within};
use crate::netns::Bed;
use crate::vrrp::rvsd;

const PYTHON: &str = "/usr/bin/python3";

/// Whether python3's aiosmtpd (a real SMTP server) is installed; otherwise
/// skips (or fails under CI) saying so.
pub(crate) fn has_aiosmtpd(test: &str) -> bool {
    let has = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        rvs_testbed::skip_or_fail(
            test,
            "python3-aiosmtpd is not installed (scripts/install-deps)",
        );
    }
    has
}

/// aiosmtpd listening on `listen`, run by `python` (python3, or a command
/// that ends in it such as `ip netns exec NS python3`), every mail it
/// receives printed into the file `mail`; killed on drop.
fn aiosmtpd(mut python: Command, listen: &str, mail: &Path) -> Proc {
    let server = python
        .args(["-u", "-m", "aiosmtpd", "-n", "-l", listen])
        .stdin(Stdio::null())
        .stdout(
            std::fs::File::create(mail)
                .map(Stdio::from)
                .expect("mail file"),
        )
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn aiosmtpd");
    Proc(Some(server))
}

#[test]
fn smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server() {
    let test = "smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server";
    let Some(mut bed) = Bed::new(test) else {
        return;
    };
    if !has_aiosmtpd(test) {
        return;
    }
    let a = bed.host("a", "10.0.8.1/24");
    let dir = TempDir::new("smtp-alert");
    let mail = dir.path().join("mail.txt");
    let mut server = Command::new("ip");
    server.args(["netns", "exec", &a.ns, PYTHON]);
    let _server = aiosmtpd(server, "127.0.0.1:2525", &mail);
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

/// `smtp_alert` for the health checker, through the real daemon and a real
/// SMTP server on loopback: a TCP_CHECK real server that goes down and
/// comes back sends keepalived's two real-server mails, and the quorum it
/// takes with it sends keepalived's two virtual-server mails (lost,
/// gained) — four mails, each with keepalived's subject and body.
#[test]
fn smtp_alert_mails_checker_and_quorum_changes_to_a_real_smtp_server() {
    use crate::harness::{Rvsd, free_port};
    let test = "smtp_alert_mails_checker_and_quorum_changes_to_a_real_smtp_server";
    if !has_aiosmtpd(test) {
        return;
    }
    let dir = TempDir::new("smtp-checker");
    let mail = dir.path().join("mail.txt");
    let smtp_port = free_port();
    let _server = aiosmtpd(
        Command::new(PYTHON),
        &format!("127.0.0.1:{smtp_port}"),
        &mail,
    );
    within("aiosmtpd listens", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", smtp_port)).is_ok()
    });

    // Two real servers, quorum 2: b's death loses the quorum.
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("bind b");
    let (a_port, b_port) = (
        a.local_addr().expect("a").port(),
        b.local_addr().expect("b").port(),
    );
    let vip = free_port();
    let rs = |port: u16| {
        format!(
            "  real_server 127.0.0.1 {port} {{\n    weight 1\n    TCP_CHECK {{\n      connect_timeout 1\n      retry 0\n    }}\n  }}\n"
        )
    };
    let conf = format!(
        "global_defs {{
    router_id LB_CHK
    notification_email {{
        ops@example.com
    }}
    notification_email_from lb@example.com
    smtp_server 127.0.0.1 {smtp_port}
    smtp_connect_timeout 5
}}
virtual_server 127.0.0.1 {vip} {{
  delay_loop 1
  lb_algo rr
  lb_kind NAT
  protocol TCP
  quorum 2
  smtp_alert
{}{}}}
",
        rs(a_port),
        rs(b_port)
    );
    let conf_dir = TempDir::new("smtp-checker-daemon");
    let path = conf_dir.write("keepalived.conf", &conf);
    let p = path.to_str().expect("utf-8 path").to_owned();
    let d = Rvsd::start_with(conf_dir, "proxy", None, &["-f", &p]);
    within("both checkers up", Duration::from_secs(10), || {
        d.ok("-L -n --checks").matches("last ok").count() == 2
    });
    let read = || std::fs::read_to_string(&mail).unwrap_or_default();
    assert_eq!(
        read().matches("Subject:").count(),
        0,
        "no mail while all is well:\n{}",
        read()
    );

    let rs_subject = |state: &str| {
        format!(
            "Subject: [LB_CHK] Realserver [127.0.0.1]:tcp:{b_port} of virtual server [127.0.0.1]:tcp:{vip} - {state}"
        )
    };
    let vs_subject =
        |state: &str| format!("Subject: [LB_CHK] Virtualserver [127.0.0.1]:tcp:{vip} - {state}");

    // Waits until `n` mails have arrived; their text, checked to hold each
    // of `wants`.
    let arrived = |n: usize, wants: &[String]| {
        within(
            &format!("{n} mails arrive"),
            Duration::from_secs(15),
            || read().matches("Subject:").count() >= n,
        );
        let text = read();
        for want in wants {
            assert!(
                text.contains(want),
                "{want:?} not in the mail received:\n{text}"
            );
        }
        text
    };

    drop(b);
    arrived(
        2,
        &[
            rs_subject("DOWN"),
            "=> TCP CHECK failed on service <=".to_owned(),
            vs_subject("DOWN"),
            "=> Lost quorum 2+0=2 <= 1 <=".to_owned(),
            "From: lb@example.com".to_owned(),
            "To: ops@example.com".to_owned(),
            "X-Mailer: Keepalived".to_owned(),
        ],
    );

    let b = std::net::TcpListener::bind(("127.0.0.1", b_port)).expect("rebind b");
    let text = arrived(
        4,
        &[
            rs_subject("UP"),
            "=> TCP CHECK succeed on service <=".to_owned(),
            vs_subject("UP"),
            "=> Gained quorum 2+0=2 <= 2 <=".to_owned(),
        ],
    );
    assert_eq!(text.matches("Subject:").count(), 4, "four mails:\n{text}");
    assert!(
        !text.contains(&format!("tcp:{a_port} of")),
        "a never changed:\n{text}"
    );
    drop((a, b, d));
}
