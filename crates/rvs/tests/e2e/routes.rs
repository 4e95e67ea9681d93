//! keepalived's routes and rules, carried out by real rvsd directors in
//! network namespaces: `virtual_routes` / `virtual_rules` (IPv4 and IPv6,
//! a table, blackholes) are on the master and nowhere else, move with a
//! failover, are reconciled by a reload of a master that stays master, and
//! leave when the master stops; `static_*` are there while rvsd runs. What
//! is checked is what an operator checks: `ip route` and `ip rule`.

use std::path::Path;
use std::time::Duration;

use crate::harness::{Proc, TempDir, within};
use crate::netns::{Bed, Host};

/// A director, killed on drop.
pub(crate) struct Director(Proc);

impl Director {
    /// rvsd (control plane only) in `h`'s namespace with `conf` and `extra`
    /// arguments.
    pub(crate) fn start(h: &Host, dir: &Path, name: &str, conf: &str, extra: &[&str]) -> Self {
        let file = dir.join(format!("{name}.conf"));
        std::fs::write(&file, conf).expect("write conf");
        Self::start_file(h, dir, &file, name, extra)
    }

    /// Like [`Director::start`] with a configuration file already written
    /// (several directors may read one file); `name` names the socket.
    pub(crate) fn start_file(
        h: &Host,
        dir: &Path,
        file: &Path,
        name: &str,
        extra: &[&str],
    ) -> Self {
        Director(crate::vrrp::rvsd_file(h, dir, file, name, extra))
    }

    /// Send `sig` (`HUP`, `TERM`).
    pub(crate) fn signal(&self, sig: &str) {
        self.0.signal(sig);
    }

    /// Stop with SIGTERM and wait (bounded) for the exit.
    pub(crate) fn stop(&mut self) {
        self.0.signal("TERM");
        self.0.wait_exit("rvsd");
    }
}

/// Every route (both families, every table) and rule of the host.
fn tables(h: &Host) -> String {
    let mut out = String::new();
    for args in [
        &["ip", "-4", "route", "show", "table", "all"][..],
        &["ip", "-6", "route", "show", "table", "all"],
        &["ip", "-4", "rule", "show"],
        &["ip", "-6", "rule", "show"],
    ] {
        out.push_str(&String::from_utf8_lossy(&h.exec(args).stdout));
    }
    out
}

/// What `ip` shows for each virtual route and rule of the first
/// configuration.
const VIRTUAL: &[&str] = &[
    "10.50.0.0/16 via 10.0.25.254 dev eth0",
    "10.51.0.0/16 dev eth0 table 100",
    "blackhole 10.52.0.0/16",
    "10.55.0.0/16 dev eth0",
    "2001:db8:53::/48 dev eth0",
    "blackhole 2001:db8:54::/48",
    "from 10.0.25.100 lookup 100",
    "from all to 2001:db8:56::/48 lookup 100",
    "from all fwmark 0x7 blackhole",
];

fn conf(me: &str, priority: u8, first_route: &str) -> String {
    format!(
        "static_ipaddress {{
    10.0.26.{me}/24 dev eth0
}}
static_routes {{
    10.60.0.0/16 via 10.0.25.254 dev eth0 no_track
}}
static_rules {{
    from 10.0.26.0/24 table 200 priority 200 no_track
}}
vrrp_instance VI_1 {{
    state BACKUP
    interface eth0
    virtual_router_id 61
    priority {priority}
    advert_int 1
    virtual_ipaddress {{
        10.0.25.100/24
    }}
    virtual_routes {{
        {first_route}
        10.51.0.0/16 dev eth0 table 100 metric 5
        blackhole 10.52.0.0/16
        src 10.0.25.100 10.55.0.0/16 dev eth0
        2001:db8:53::/48 dev eth0
        blackhole 2001:db8:54::/48 table 100
    }}
    virtual_rules {{
        from 10.0.25.100 table 100 priority 100
        to 2001:db8:56::/48 table 100 priority 101
        fwmark 7 blackhole priority 102
    }}
}}
"
    )
}

fn has_all(h: &Host, lines: &[&str]) -> bool {
    let t = tables(h);
    lines.iter().all(|l| t.contains(l))
}

fn has_none(h: &Host, lines: &[&str]) -> bool {
    let t = tables(h);
    lines.iter().all(|l| !t.contains(l))
}

const STATIC: &[&str] = &[
    "10.60.0.0/16 via 10.0.25.254 dev eth0",
    "from 10.0.26.0/24 lookup 200",
];

#[test]
fn virtual_routes_and_rules_follow_the_master() {
    let test = "virtual_routes_and_rules_follow_the_master";
    let Some((_bed, [a, b])) =
        Bed::with_hosts(test, [("a", "10.0.25.1/24"), ("b", "10.0.25.2/24")])
    else {
        return;
    };
    let dir = TempDir::new("routes");
    let first = "10.50.0.0/16 via 10.0.25.254 dev eth0";
    let mut da = Director::start(&a, dir.path(), "a", &conf("1", 150, first), &[]);
    let mut db = Director::start(&b, dir.path(), "b", &conf("2", 100, first), &[]);
    let wait = Duration::from_secs(10);

    // A (150) becomes master: its routes and rules are there, B's are not;
    // both have their static ones (and B its static address) at once.
    within("A installs its virtual routes and rules", wait, || {
        has_all(&a, VIRTUAL)
    });
    within("both install their static routes and rules", wait, || {
        has_all(&a, STATIC) && has_all(&b, STATIC)
    });
    let b_addr =
        String::from_utf8_lossy(&b.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]).stdout)
            .into_owned();
    assert!(b_addr.contains("inet 10.0.26.2/24"), "{b_addr}");
    assert!(
        has_none(&b, VIRTUAL),
        "a backup has virtual routes:\n{}",
        tables(&b)
    );

    // A's priority drops to 50 on a reload: B (100) preempts it; the routes
    // and rules leave A and appear on B.
    std::fs::write(dir.path().join("a.conf"), conf("1", 50, first)).unwrap();
    da.signal("HUP");
    within("B installs them after the failover", wait, || {
        has_all(&b, VIRTUAL)
    });
    within("A removes them as a backup", wait, || has_none(&a, VIRTUAL));
    assert!(has_all(&a, STATIC), "a backup keeps its static routes");

    // B stays master through a reload that changes one route: the old one
    // leaves, the new one comes, the others stay.
    let second = "10.57.0.0/16 via 10.0.25.254 dev eth0 table 100";
    std::fs::write(dir.path().join("b.conf"), conf("2", 100, second)).unwrap();
    db.signal("HUP");
    within("the reload installs the new route", wait, || {
        has_all(&b, &["10.57.0.0/16 via 10.0.25.254 dev eth0 table 100"])
    });
    within("and removes the old one", wait, || has_none(&b, &[first]));
    assert!(has_all(&b, &VIRTUAL[1..]), "{}", tables(&b));

    // B stops: everything it installed leaves with it (A takes over the
    // virtual ones, with its own first route).
    db.stop();
    assert!(
        has_none(&b, &VIRTUAL[1..]) && has_none(&b, STATIC) && has_none(&b, &["10.57.0.0/16"]),
        "rvsd left routes or rules behind:\n{}",
        tables(&b)
    );
    let b_addr =
        String::from_utf8_lossy(&b.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]).stdout)
            .into_owned();
    assert!(
        !b_addr.contains("10.0.26.2"),
        "static address left: {b_addr}"
    );
    within("A is master again", wait, || has_all(&a, VIRTUAL));
    da.stop();
    assert!(
        has_none(&a, VIRTUAL) && has_none(&a, STATIC),
        "rvsd left routes or rules behind:\n{}",
        tables(&a)
    );
}
