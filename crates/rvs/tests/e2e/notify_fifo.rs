//! keepalived's notify FIFOs, compared with keepalived itself: a real
//! keepalived and an rvsd, each in its own namespace with the same
//! `vrrp_instance VI_1` (their own virtual router each) and the same
//! `vrrp_notify_fifo` + `vrrp_notify_fifo_script`, go through the same
//! transitions in the same run — alone (BACKUP, MASTER), pre-empted by a
//! higher-priority router (BACKUP), their interface down (FAULT) and up
//! again (BACKUP), stopped (STOP). The lines each FIFO carried must be the
//! same, line by line.

use std::path::Path;
use std::time::Duration;

use crate::harness::{Proc, TempDir};
use crate::netns::{Bed, Host};
use crate::vrrp::{keepalived, rvsd};

/// `h` has `addr` on eth0.
fn has_addr(h: &Host, addr: &str) -> bool {
    let out = h.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]);
    String::from_utf8_lossy(&out.stdout).contains(&format!("inet {addr}/"))
}

fn instance(name: &str, vrid: u8, priority: u8, vip: &str) -> String {
    format!(
        "vrrp_instance {name} {{
    state BACKUP
    interface eth0
    virtual_router_id {vrid}
    priority {priority}
    advert_int 1
    virtual_ipaddress {{
        {vip}/24
    }}
}}
"
    )
}

/// The lines the FIFO reader script saw.
fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The script reading a FIFO (its path is the last argument, as
/// keepalived passes it): every line into `log`, until the FIFO's last
/// writer is gone (keepalived terminates its scripts when it stops, before
/// the reader may have read the STOP line: the reader ignores SIGTERM).
fn reader(dir: &TempDir, name: &str, log: &Path) -> String {
    let script = dir.write(
        &format!("{name}.sh"),
        &format!(
            "#!/bin/sh\ntrap '' TERM INT HUP\nwhile read -r line; do echo \"$line\" >> {}; done < \"$1\"\n",
            log.display()
        ),
    );
    format!("/bin/sh {}", script.display())
}

/// Poll `f` (every 20 ms, up to `limit`); on failure show what both FIFOs
/// and keepalived's log said.
fn within(dir: &Path, what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let show = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    panic!(
        "{what}: not within {limit:?}\nkeepalived's FIFO:\n{}\nrvsd's FIFO:\n{}\nkeepalived's log:\n{}",
        show("ka.lines"),
        show("rv.lines"),
        show("ka.log")
    );
}

/// A bed for a test that runs keepalived beside rvsd: hosts named `roles`
/// at `net`.1, `net`.2, ... /24; `None` (skipped or failed, as the test
/// bed says) without root or keepalived.
pub(crate) fn keepalived_bed<const N: usize>(
    test: &str,
    net: &str,
    roles: [&str; N],
) -> Option<(Bed, [Host; N])> {
    let mut bed = Bed::new(test)?;
    if !rvs_testbed::require_tools(test, &["keepalived"]) {
        return None;
    }
    let mut i = 0;
    let hosts = roles.map(|role| {
        i += 1;
        bed.host(role, &format!("{net}.{i}/24"))
    });
    Some((bed, hosts))
}

#[test]
fn notify_fifo_lines_match_keepalived_s() {
    let test = "notify_fifo_lines_match_keepalived_s";
    let Some((_bed, [ka, rv, peer])) = keepalived_bed(test, "10.0.7", ["ka", "rv", "peer"]) else {
        return;
    };
    let dir = TempDir::new("notify-fifo");
    let (ka_vip, rv_vip) = ("10.0.7.100", "10.0.7.101");
    let conf = |who: &str, vrid: u8, vip: &str| {
        let fifo = dir.path().join(format!("{who}.fifo"));
        let log = dir.path().join(format!("{who}.lines"));
        let script = reader(&dir, who, &log);
        let text = format!(
            "global_defs {{\n    router_id {who}\n    vrrp_notify_fifo {}\n    vrrp_notify_fifo_script \"{script}\"\n}}\n{}",
            fifo.display(),
            instance("VI_1", vrid, 100, vip)
        );
        (text, fifo, log)
    };
    let (ka_conf, ka_fifo, ka_log) = conf("ka", 61, ka_vip);
    let (rv_conf, rv_fifo, rv_log) = conf("rv", 62, rv_vip);

    // Alone: each starts BACKUP and becomes MASTER of its router.
    let mut pka = keepalived(&ka, dir.path(), "ka", &ka_conf);
    let mut prv = rvsd(&rv, dir.path(), "rv", &rv_conf);
    within(
        dir.path(),
        "both FIFOs created",
        Duration::from_secs(5),
        || ka_fifo.exists() && rv_fifo.exists(),
    );
    within(
        dir.path(),
        "both are masters",
        Duration::from_secs(10),
        || has_addr(&ka, ka_vip) && has_addr(&rv, rv_vip),
    );

    // A higher priority router for both virtual routers: both BACKUP.
    let peer_conf = format!(
        "{}{}",
        instance("VI_KA", 61, 200, ka_vip),
        instance("VI_RV", 62, 200, rv_vip)
    );
    let _ppeer: Proc = rvsd(&peer, dir.path(), "peer", &peer_conf);
    within(
        dir.path(),
        "the peer takes both",
        Duration::from_secs(10),
        || {
            has_addr(&peer, ka_vip)
                && has_addr(&peer, rv_vip)
                && !has_addr(&ka, ka_vip)
                && !has_addr(&rv, rv_vip)
        },
    );
    let backup = "INSTANCE \"VI_1\" BACKUP 100";
    let count = |log: &Path, line: &str| lines(log).iter().filter(|l| *l == line).count();
    // Both FIFOs logged `line` a number of times that is `ok`, within `limit`.
    let both_logged = |what: &str, line: &str, limit: Duration, ok: fn(usize) -> bool| {
        within(dir.path(), &format!("both logged {what}"), limit, || {
            ok(count(&ka_log, line)) && ok(count(&rv_log, line))
        });
    };
    both_logged("BACKUP again", backup, Duration::from_secs(5), |c| c >= 2);

    // Their interface goes down: FAULT; up again: BACKUP (the peer is
    // still master).
    for h in [&ka, &rv] {
        h.exec(&["ip", "link", "set", "eth0", "down"]);
    }
    let fault = "INSTANCE \"VI_1\" FAULT 100";
    both_logged("FAULT", fault, Duration::from_secs(10), |c| c == 1);
    for h in [&ka, &rv] {
        h.exec(&["ip", "link", "set", "eth0", "up"]);
    }
    both_logged("BACKUP after FAULT", backup, Duration::from_secs(10), |c| {
        c >= 3
    });

    // Stopped: STOP, and the FIFO each created is removed.
    pka.signal("TERM");
    prv.signal("TERM");
    pka.wait_exit("the process");
    prv.wait_exit("the process");
    let stop = "INSTANCE \"VI_1\" STOP 100";
    both_logged("STOP", stop, Duration::from_secs(5), |c| c == 1);
    assert!(!ka_fifo.exists(), "keepalived removes the FIFO it created");
    assert!(!rv_fifo.exists(), "rvsd removes the FIFO it created");

    let (k, r) = (lines(&ka_log), lines(&rv_log));
    eprintln!(
        "keepalived's FIFO:\n{}\nrvsd's FIFO:\n{}",
        k.join("\n"),
        r.join("\n")
    );
    assert_eq!(k, r, "rvsd's FIFO lines differ from keepalived's");
    assert_eq!(
        r,
        [
            backup,
            "INSTANCE \"VI_1\" MASTER 100",
            backup,
            fault,
            backup,
            stop
        ]
    );
}
