//! Flows kept when the fleet changes (issue 14): 200 long-lived TCP
//! connections from many client addresses and ports (so ECMP spreads them
//! over the directors), data flowing both ways at a bounded rate and
//! checked byte for byte, stay intact — no reset, no stall over
//! [`STALL`], byte counts exact — through a fourth director joining, a
//! director drained (its route withdrawn from its table), a director
//! killed (rvsd and BIRD SIGKILLed, its XDP plane removed, its link down:
//! the router's BGP hold timer moves its flows), and a real server added on
//! every director; for an mh service (the hash picks the same server on
//! every director; a flow a director has no entry for is adopted) and for a
//! wlc service with connection sync among all directors (each holds every
//! other's flows). Per event it prints how many flows ECMP moved (the
//! router's choice per connection, `ip route get ... sport dport`, before
//! and after), how many streams failed, and the longest gap between two
//! reads of any stream.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::fleet::{CLIENT_ADDRS, Fleet, Opts, VIP};
use crate::harness::Rvsadm;
use crate::streams::{Pattern, Progress, echo_stream};

/// Connections.
const CONNS: usize = 200;
/// Each connection writes a chunk of this size every [`PERIOD`] (5 KB/s
/// each, 1 MB/s in all).
const CHUNK: usize = 512;
const PERIOD: Duration = Duration::from_millis(100);
/// The longest a read may wait: a stream stalled longer has failed. A
/// killed director's flows wait for the router's BGP hold time (3 s) and
/// TCP's retransmission backoff after it.
const STALL: Duration = Duration::from_secs(20);
/// How long the streams run after each event before the next (the last
/// second of it checks that every stream still moves).
const SETTLE: Duration = Duration::from_secs(4);

/// The director the router sends each connection to (by its client end).
fn owners(fleet: &Fleet, ends: &[SocketAddr]) -> BTreeMap<SocketAddr, Option<IpAddr>> {
    let mut batch = String::new();
    for e in ends {
        batch.push_str(&format!(
            "route get {VIP} from {} iif eth0 ipproto tcp sport {} dport 80\n",
            e.ip(),
            e.port()
        ));
    }
    let mut child = Command::new("ip")
        .args(["-n", &fleet.router.host.ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ip -batch");
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(batch.as_bytes());
    }
    let out = child.wait_with_output().expect("ip -batch output");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut hops = text.lines().filter(|l| l.starts_with(VIP)).map(|l| {
        let t: Vec<&str> = l.split_whitespace().collect();
        t.iter()
            .position(|w| *w == "via")
            .and_then(|i| t.get(i + 1))
            .and_then(|a| a.parse().ok())
    });
    ends.iter().map(|e| (*e, hops.next().flatten())).collect()
}

/// One event's line of the report.
struct Row {
    event: &'static str,
    moved: usize,
    failed: usize,
    stalled: usize,
    longest_gap: Duration,
}

fn flows_survive_fleet_changes(test: &str, lb_algo: &str, sync: bool) {
    let opts = Opts {
        lb_algo: lb_algo.into(),
        global_defs: if sync {
            "global_defs {\n    lvs_sync_daemon eth0 id 14\n}\n".into()
        } else {
            String::new()
        },
        ..Opts::default()
    };
    let Some(mut fleet) = Fleet::new(test, opts) else {
        return;
    };
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let pattern = Arc::new(Pattern::new(64 << 10, CHUNK, 0x5EED_F1EE7));
    let mut streams = Vec::new();
    let mut ends = Vec::new();
    let mut progress = Vec::new();
    for i in 0..CONNS {
        let src = fleet.client_addrs[i % usize::from(CLIENT_ADDRS)];
        let c = fleet
            .connect_from(src, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connection {i} from {src}: {e}"));
        assert!(!c.server.is_empty(), "connection {i}: no greeting");
        ends.push(c.stream.local_addr().expect("local address"));
        let p = Arc::new(Progress::default());
        streams.push(echo_stream(
            c.stream,
            pattern.clone(),
            PERIOD,
            STALL,
            stop.clone(),
            p.clone(),
        ));
        progress.push(p);
    }
    let failed = |progress: &[Arc<Progress>]| {
        progress
            .iter()
            .filter(|p| p.failed.load(Ordering::Relaxed))
            .count()
    };
    let gap = |progress: &[Arc<Progress>]| {
        Duration::from_millis(
            progress
                .iter()
                .map(|p| p.gap_ms.swap(0, Ordering::Relaxed))
                .max()
                .unwrap_or(0),
        )
    };
    // Established everywhere (and synced) before the first change.
    std::thread::sleep(SETTLE);
    let before = owners(&fleet, &ends);
    let per_director = |o: &BTreeMap<SocketAddr, Option<IpAddr>>| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for d in o.values() {
            *m.entry(d.map_or("none".into(), |a| a.to_string()))
                .or_default() += 1;
        }
        m
    };
    println!(
        "{test}: {CONNS} connections over the directors: {:?}",
        per_director(&before)
    );
    gap(&progress);
    let mut rows = Vec::new();
    let mut last = before;
    let mut failed_before = failed(&progress);
    type Event = (&'static str, Box<dyn Fn(&mut Fleet)>);
    let events: Vec<Event> = vec![
        (
            "a fourth director joins",
            Box::new(|f: &mut Fleet| {
                f.add_director();
                f.wait_next_hops(4);
            }),
        ),
        (
            "director d1 drained (rvsadm --drain: route withdrawn, forwarding on)",
            Box::new(|f: &mut Fleet| {
                f.directors[1].ok("--drain --grace 30");
                f.wait_next_hops(3);
            }),
        ),
        (
            "director d2 killed (SIGKILL, plane removed, link down)",
            Box::new(|f: &mut Fleet| {
                f.directors[2].crash();
                f.wait_next_hops(2);
            }),
        ),
        (
            "a real server added on every director",
            Box::new(|f: &mut Fleet| {
                f.add_server();
                f.reconfigure();
            }),
        ),
    ];
    // Streams whose echo made no progress within the last second (a
    // healthy one gets ten chunks back in that time).
    let stalled = |progress: &[Arc<Progress>]| {
        let at: Vec<u64> = progress
            .iter()
            .map(|p| p.good.load(Ordering::Relaxed))
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        progress
            .iter()
            .zip(at)
            .filter(|(p, a)| {
                !p.failed.load(Ordering::Relaxed) && p.good.load(Ordering::Relaxed) == *a
            })
            .count()
    };
    for (event, run) in events {
        run(&mut fleet);
        std::thread::sleep(SETTLE - Duration::from_secs(1));
        let stuck = stalled(&progress);
        let now = owners(&fleet, &ends);
        let moved = ends.iter().filter(|e| now.get(e) != last.get(e)).count();
        let f = failed(&progress);
        let row = Row {
            event,
            moved,
            failed: f - failed_before,
            stalled: stuck,
            longest_gap: gap(&progress),
        };
        println!(
            "{test}: {}: {} flows moved by ECMP, {} streams failed (reset, mismatch), {} stalled, \
             longest gap {:?}; now {:?}",
            row.event,
            row.moved,
            row.failed,
            row.stalled,
            row.longest_gap,
            per_director(&now)
        );
        rows.push(row);
        failed_before = f;
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<_> = streams
        .into_iter()
        .map(|h| h.join().expect("stream thread"))
        .collect();
    let bad: Vec<String> = outcomes
        .iter()
        .zip(&ends)
        .filter_map(|(o, e)| o.error.as_ref().map(|err| format!("{e}: {err}")))
        .collect();
    let longest = outcomes
        .iter()
        .map(|o| o.longest_gap)
        .max()
        .unwrap_or_default();
    let bytes: u64 = outcomes.iter().map(|o| o.good).sum();
    println!(
        "{test}: {} of {CONNS} streams intact, {bytes} bytes echoed exactly, longest gap {longest:?} \
         (bound {STALL:?}), {:?} in all",
        CONNS - bad.len(),
        started.elapsed()
    );
    assert!(
        rows.iter().any(|r| r.moved > 0),
        "no event moved a flow: the test proves nothing"
    );
    assert!(bad.is_empty(), "{} streams broke: {bad:#?}", bad.len());
    for r in &rows {
        assert_eq!((r.failed, r.stalled), (0, 0), "{}", r.event);
    }
    for o in &outcomes {
        assert_eq!(o.good, o.written, "byte counts exact");
        assert!(o.written > 0);
    }
}

#[test]
fn fleet_mh_flows_survive_join_drain_kill_and_a_new_real_server() {
    flows_survive_fleet_changes(
        "fleet_mh_flows_survive_join_drain_kill_and_a_new_real_server",
        "mh",
        false,
    );
}

#[test]
fn fleet_wlc_flows_survive_join_drain_kill_and_a_new_real_server_with_sync() {
    flows_survive_fleet_changes(
        "fleet_wlc_flows_survive_join_drain_kill_and_a_new_real_server_with_sync",
        "wlc",
        true,
    );
}
