//! Priorities that follow something outside the file, with real rvsd
//! directors in network namespaces: a `track_file`'s number times its
//! weight moves mastership (and a weight-0 file puts the instance in
//! FAULT), and keepalived's conditional configuration gives two directors
//! different priorities from one file (`@high` / `@low` lines, `rvsd -i`).

use std::time::Duration;

use crate::harness::{Proc, TempDir, within};
use crate::netns::{Bed, Host};
use crate::routes::Director;

const VIP: &str = "10.0.27.100";

/// How long each change of mastership below may take.
const WAIT: Duration = Duration::from_secs(12);

fn has_vip(h: &Host) -> bool {
    crate::netns::has_addr(h, VIP)
}

fn instance(vrid: u8, priority: &str, extra: &str) -> String {
    format!(
        "vrrp_instance VI_1 {{
    state BACKUP
    interface eth0
    virtual_router_id {vrid}
{priority}
    advert_int 1
    virtual_ipaddress {{
        {VIP}/24
    }}
{extra}}}
"
    )
}

/// The bed: hosts `a` (10.0.27.1) and `b` (10.0.27.2) on one link; `None`
/// when the test is skipped.
fn two_directors(test: &str) -> Option<(Bed, [Host; 2])> {
    Bed::with_hosts(test, [("a", "10.0.27.1/24"), ("b", "10.0.27.2/24")])
}

/// Director A on `a_conf` (what it tracks and its instance) and director B
/// on the bare instance `vrid` at `b_priority`.
fn a_and_b(
    a: &Host,
    b: &Host,
    dir: &std::path::Path,
    a_conf: &str,
    vrid: u8,
    b_priority: &str,
) -> (Director, Director) {
    let b_conf = instance(vrid, b_priority, "");
    (
        Director::start(a, dir, "a", a_conf, &[]),
        Director::start(b, dir, "b", &b_conf, &[]),
    )
}

#[test]
fn track_file_weight_moves_mastership() {
    let Some((_bed, [a, b])) = two_directors("track_file_weight_moves_mastership") else {
        return;
    };
    let dir = TempDir::new("trackfile");
    let load = dir.path().join("load");
    let fault = dir.path().join("fault");
    // A: 100 - 20 × load; a non-zero `fault` file (weight 0) is a FAULT.
    // `init_file` writes 0 to `load` at start, whatever it held.
    std::fs::write(&load, "7\n").unwrap();
    let a_conf = format!(
        "track_file load {{
    file {}
    weight -20
    init_file 0 overwrite
}}
track_file fault {{
    file {}
    weight 0
}}
{}",
        load.display(),
        fault.display(),
        instance(
            71,
            "    priority 100",
            "    track_file {\n        load\n        fault\n    }\n"
        )
    );
    let _ab = a_and_b(&a, &b, dir.path(), &a_conf, 71, "    priority 90");
    within("A (100) is master", WAIT, || has_vip(&a) && !has_vip(&b));
    assert_eq!(
        std::fs::read_to_string(&load).unwrap().trim(),
        "0",
        "init_file overwrite"
    );

    // load 1: A is 80 < 90, B preempts it.
    std::fs::write(&load, "1\n").unwrap();
    within("B takes over when A's file says 1", WAIT, || {
        has_vip(&b) && !has_vip(&a)
    });
    // load 0: A is 100 again and preempts B.
    std::fs::write(&load, "0\n").unwrap();
    within("A takes it back when the file says 0", WAIT, || {
        has_vip(&a) && !has_vip(&b)
    });
    // A non-zero number in a weight-0 file: A goes to FAULT, B takes over;
    // a missing file reads as 0, A comes back.
    std::fs::write(&fault, "1\n").unwrap();
    within("B takes over from a faulty A", WAIT, || {
        has_vip(&b) && !has_vip(&a)
    });
    std::fs::remove_file(&fault).unwrap();
    within("A is back once the file is gone", WAIT, || {
        has_vip(&a) && !has_vip(&b)
    });
}

#[test]
fn config_ids_give_two_directors_different_priorities_from_one_file() {
    let Some((_bed, [a, b])) =
        two_directors("config_ids_give_two_directors_different_priorities_from_one_file")
    else {
        return;
    };
    let dir = TempDir::new("configid");
    // One file for both: `rvsd -i high` reads priority 150, `-i low` 50.
    // The low director starts first, so it is master until the high one
    // preempts it.
    let conf = dir.write(
        "shared.conf",
        &instance(72, "@high    priority 150\n@low    priority 50", ""),
    );
    let _db = Director::start_file(&b, dir.path(), &conf, "low", &["-i", "low"]);
    within("the low director alone becomes master", WAIT, || {
        has_vip(&b)
    });
    let _da = Director::start_file(&a, dir.path(), &conf, "high", &["-i", "high"]);
    within("the high director preempts it", WAIT, || {
        has_vip(&a) && !has_vip(&b)
    });
}

/// A process with a name of its own (a copy of `sleep`), killed on drop.
fn named(dir: &std::path::Path, name: &str) -> Proc {
    let bin = dir.join(name);
    if !bin.exists() {
        std::fs::copy("/bin/sleep", &bin).expect("copy sleep");
    }
    Proc(Some(
        std::process::Command::new(&bin)
            .arg("600")
            .spawn()
            .expect("start the tracked process"),
    ))
}

#[test]
fn track_process_moves_mastership_and_faults() {
    let Some((_bed, [a, b])) = two_directors("track_process_moves_mastership_and_faults") else {
        return;
    };
    let dir = TempDir::new("trackproc");
    // Unique names (tests run in parallel; /proc is shared).
    let id = std::process::id() % 100_000;
    let (svc, stop) = (format!("rvsup{id}"), format!("rvsdown{id}"));
    // A: 80, +30 while `svc` runs; FAULT while `stop` runs (weight 0
    // reverse). B: 100.
    let a_conf = format!(
        "vrrp_track_process svc {{
    process {svc}
    weight 30
}}
vrrp_track_process stop {{
    process {stop}
    weight 0 reverse
}}
{}",
        instance(
            73,
            "    priority 80",
            "    track_process {\n        svc\n        stop\n    }\n"
        )
    );
    let _ab = a_and_b(&a, &b, dir.path(), &a_conf, 73, "    priority 100");
    within(
        "B (100) is master while A's process is not running",
        WAIT,
        || has_vip(&b) && !has_vip(&a),
    );
    let up = named(dir.path(), &svc);
    within("A (110) takes over once its process runs", WAIT, || {
        has_vip(&a) && !has_vip(&b)
    });
    let down = named(dir.path(), &stop);
    within("A is in FAULT while the reverse one runs", WAIT, || {
        has_vip(&b) && !has_vip(&a)
    });
    drop(down);
    within("A is back when it stops", WAIT, || {
        has_vip(&a) && !has_vip(&b)
    });
    drop(up);
    within("B takes over when A's process stops", WAIT, || {
        has_vip(&b) && !has_vip(&a)
    });
}
