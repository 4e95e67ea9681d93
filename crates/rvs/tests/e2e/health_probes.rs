//! Health checking with the real probes through rvsd: MISC_CHECK with
//! misc_dynamic weights, HTTP_GET status and digest failures, DNS_CHECK
//! against a DNS responder built with hickory-proto, SMTP_CHECK with `host`
//! blocks against real SMTP servers (python3-aiosmtpd).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{Proc, Rvsd, TempDir, free_port, within};
use crate::health::listed;
use rvs_testbed::Server;

#[test]
fn misc_dynamic_exit_codes_set_weights_and_state() {
    let dir = TempDir::new("health-misc");
    let code = dir.path().join("code");
    std::fs::write(&code, "7").expect("code");
    let script = dir.write(
        "check.sh",
        &format!("#!/bin/sh\nexit $(cat {})\n", code.display()),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (vip, rs) = (free_port(), free_port());
    let conf = dir.write(
        "keepalived.conf",
        &format!(
            "virtual_server 127.0.0.1 {vip} {{\n  delay_loop 0.3\n  lb_algo wrr\n  lb_kind NAT\n  protocol TCP\n\
             real_server 127.0.0.1 {rs} {{\n    weight 1\n    MISC_CHECK {{\n      misc_path \"{}\"\n      misc_dynamic\n    }}\n  }}\n}}\n",
            script.display()
        ),
    );
    let c = conf.to_str().expect("utf-8").to_owned();
    let d = Rvsd::start_with(TempDir::new("health-misc-d"), "proxy", None, &["-f", &c]);
    // exit 7 → up with weight 5.
    within("weight 5", Duration::from_secs(3), || {
        listed(&d) == vec![(rs, 5)]
    });
    std::fs::write(&code, "12").expect("code");
    within("weight 10", Duration::from_secs(3), || {
        listed(&d) == vec![(rs, 10)]
    });
    // exit 1 → down (MISC retry defaults to 0).
    std::fs::write(&code, "1").expect("code");
    within("removed", Duration::from_secs(3), || listed(&d).is_empty());
    assert!(d.ok("-L -n --checks").contains("exit status 1"));
    // exit 0 → up again with the configured weight (keepalived: iweight).
    std::fs::write(&code, "0").expect("code");
    within("back", Duration::from_secs(3), || {
        listed(&d) == vec![(rs, 1)]
    });
    drop(dir);
}

/// A tiny HTTP/1.0 server whose status and body the test changes.
struct Web {
    port: u16,
    state: Arc<Mutex<(u16, String)>>,
    _server: Server,
}

impl Web {
    fn start() -> Web {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let port = l.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new((200u16, "healthy\n".to_owned())));
        let st = state.clone();
        let server = Server::tcp(l, move |c, _| {
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let mut r = BufReader::new(c.try_clone().expect("clone"));
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let (status, body) = st.lock().expect("state").clone();
            let mut w = c;
            let _ = write!(
                w,
                "HTTP/1.0 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        });
        Web {
            port,
            state,
            _server: server,
        }
    }

    fn set(&self, status: u16, body: &str) {
        *self.state.lock().expect("state") = (status, body.to_owned());
    }
}

fn md5_hex(b: &[u8]) -> String {
    use md5::Digest;
    md5::Md5::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// rvsd (proxy plane) on a keepalived.conf with one `protocol` service on a
/// free port of 127.0.0.1 (delay_loop 0.3 s) and one real server
/// 127.0.0.1:`port` of `weight` checked by `checker` (a checker block),
/// once that check has passed and the server is in the table; with the
/// directory of its files.
fn checked_once(
    name: &str,
    protocol: &str,
    port: u16,
    weight: u32,
    checker: &str,
) -> (Rvsd, TempDir) {
    let vip = free_port();
    let dir = TempDir::new(name);
    let conf = dir.write(
        "keepalived.conf",
        &format!(
            "virtual_server 127.0.0.1 {vip} {{\n  delay_loop 0.3\n  lb_algo rr\n  lb_kind NAT\n  protocol {protocol}\n\
             real_server 127.0.0.1 {port} {{\n    weight {weight}\n{checker}  }}\n}}\n"
        ),
    );
    let c = conf.to_str().expect("utf-8").to_owned();
    let d = Rvsd::start_with(
        TempDir::new(&format!("{name}-d")),
        "proxy",
        None,
        &["-f", &c],
    );
    within("checked ok", Duration::from_secs(3), || {
        d.ok("-L -n --checks").contains("last ok")
    });
    assert_eq!(listed(&d), vec![(port, weight)]);
    (d, dir)
}

#[test]
fn http_status_and_digest_failures_are_detected() {
    let web = Web::start();
    let checker = format!(
        "    HTTP_GET {{\n      url {{\n        path /health\n        digest {}\n      }}\n      connect_timeout 1\n      retry 0\n    }}\n",
        md5_hex(b"healthy\n")
    );
    let (d, _dir) = checked_once("health-http", "TCP", web.port, 2, &checker);
    web.set(503, "healthy\n");
    within("503 detected", Duration::from_secs(3), || {
        listed(&d).is_empty()
    });
    assert!(d.ok("-L -n --checks").contains("status 503"));
    web.set(200, "healthy\n");
    within("back", Duration::from_secs(3), || {
        listed(&d) == vec![(web.port, 2)]
    });
    web.set(200, "changed\n");
    within("digest mismatch detected", Duration::from_secs(3), || {
        listed(&d).is_empty()
    });
    assert!(d.ok("-L -n --checks").contains("digest mismatch"));
}

/// A DNS responder on 127.0.0.1 (UDP): `A` queries get NOERROR with one
/// answer while healthy, SERVFAIL otherwise. Stopped on drop.
struct Dns {
    port: u16,
    healthy: Arc<AtomicBool>,
    _server: Server,
}

impl Dns {
    fn start() -> Dns {
        use hickory_proto::op::{Message, OpCode, ResponseCode};
        use hickory_proto::rr::rdata::A;
        use hickory_proto::rr::{RData, Record};
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind dns");
        let port = sock.local_addr().expect("addr").port();
        let healthy = Arc::new(AtomicBool::new(true));
        let h2 = healthy.clone();
        let server = Server::udp(sock, move |data, _| {
            let q = Message::from_vec(data).ok()?;
            let query = q.queries.first().cloned()?;
            let mut resp = Message::response(q.metadata.id, OpCode::Query);
            resp.add_query(query.clone());
            if h2.load(Ordering::Relaxed) {
                resp.add_answer(Record::from_rdata(
                    query.name().clone(),
                    60,
                    RData::A(A(std::net::Ipv4Addr::new(192, 0, 2, 7))),
                ));
            } else {
                resp.metadata.response_code = ResponseCode::ServFail;
            }
            resp.to_vec().ok()
        });
        Dns {
            port,
            healthy,
            _server: server,
        }
    }
}

#[test]
fn dns_check_against_a_real_responder() {
    let dns = Dns::start();
    let checker = "    DNS_CHECK {\n      type A\n      name www.example.test\n      retry 0\n      connect_timeout 1\n    }\n";
    let (d, _dir) = checked_once("health-dns", "UDP", dns.port, 4, checker);
    dns.healthy.store(false, Ordering::Relaxed);
    within("SERVFAIL detected", Duration::from_secs(3), || {
        listed(&d).is_empty()
    });
    let checks = d.ok("-L -n --checks");
    assert!(checks.contains("SERVFAIL"), "{checks}");
    dns.healthy.store(true, Ordering::Relaxed);
    within("back", Duration::from_secs(3), || {
        listed(&d) == vec![(dns.port, 4)]
    });
}

/// A real SMTP server (Debian's python3-aiosmtpd) on 127.0.0.1:`port`,
/// killed on drop; `None` (skipped or failed, as the test bed says) when it
/// is not installed.
struct Smtpd {
    _proc: Proc,
}

impl Smtpd {
    fn start(test: &str, port: u16) -> Option<Smtpd> {
        if !crate::smtp_alert::has_aiosmtpd(test) {
            return None;
        }
        let child = std::process::Command::new("/usr/bin/python3")
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn aiosmtpd");
        within("aiosmtpd listens", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Some(Smtpd {
            _proc: Proc(Some(child)),
        })
    }
}

/// `SMTP_CHECK` with `host { }` blocks: one check per host (keepalived 2
/// makes each a checker of its own), so the real server is in the table
/// only while every host's SMTP server answers.
#[test]
fn smtp_check_hosts_are_each_checked_against_a_real_smtp_server() {
    let test = "smtp_check_hosts_are_each_checked_against_a_real_smtp_server";
    let (p1, p2) = (free_port(), free_port());
    let Some(_s1) = Smtpd::start(test, p1) else {
        return;
    };
    let Some(s2) = Smtpd::start(test, p2) else {
        return;
    };
    let dir = TempDir::new("health-smtp");
    let (vip, rs) = (free_port(), free_port());
    let conf = dir.write(
        "keepalived.conf",
        &format!(
            "virtual_server 127.0.0.1 {vip} {{\n  delay_loop 0.5\n  lb_algo rr\n  lb_kind NAT\n  protocol TCP\n\
             real_server 127.0.0.1 {rs} {{\n    weight 1\n    SMTP_CHECK {{\n      connect_timeout 2\n      retry 0\n      helo_name rvs.example.com\n\
             host {{\n        connect_ip 127.0.0.1\n        connect_port {p1}\n      }}\n      host {{\n        connect_ip 127.0.0.1\n        connect_port {p2}\n      }}\n    }}\n  }}\n}}\n"
        ),
    );
    let c = conf.to_str().expect("utf-8").to_owned();
    let d = Rvsd::start_with(TempDir::new("health-smtp-d"), "proxy", None, &["-f", &c]);
    within(
        "both hosts answer: in the table",
        Duration::from_secs(10),
        || listed(&d) == [(rs, 1)],
    );
    // One host's server goes: the real server leaves.
    drop(s2);
    within(
        "one host down: out of the table",
        Duration::from_secs(10),
        || listed(&d).is_empty(),
    );
    // It comes back: so does the real server.
    let Some(_s2) = Smtpd::start(test, p2) else {
        return;
    };
    within("both answer again: back", Duration::from_secs(10), || {
        listed(&d) == [(rs, 1)]
    });
}
