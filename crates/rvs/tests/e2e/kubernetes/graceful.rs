//! Graceful termination under load (issue 28): 50 long byte-checked
//! streams through a NodePort to four pods, two of which turn Terminating
//! (the real EndpointSlice controller marks them serving and terminating);
//! every stream keeps moving data both ways, none breaks, and no new
//! connection reaches a terminating pod while ready ones exist; on the
//! proxy plane and on the XDP plane (`--dataplane xdp --interface eth0`,
//! SNAT: the pods answer the node, through the program).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rvs_testbed::server::Worker;
use rvs_testbed::{Conn, connect};

use super::xdp::{on_plane, pods_behind};
use super::{
    Node, SERVICE, WAIT, app_pods, bed_with_node_on, ip, nodes, real_servers, service_addrs, setup,
};
use crate::harness::within;

/// Streams held open through the NodePort.
const STREAMS: usize = 50;
/// Bytes each stream sends (and reads back) per round.
const CHUNK: usize = 4096;
/// How long the streams keep moving after rvsd has the terminating pods.
const AFTER: Duration = Duration::from_secs(5);
/// New connections opened in that time.
const NEW_CONNS: usize = 60;

/// Byte `off` of stream `id`'s pattern.
fn pattern(id: usize, off: u64) -> u8 {
    // Truncation intended: a pattern byte.
    ((off.wrapping_mul(31) ^ (id as u64).wrapping_mul(97)) % 251) as u8
}

/// One stream under test: the pod that answered and what it carried.
struct Stream {
    conn: Conn,
    /// Bytes sent and read back intact so far.
    checked: u64,
    /// Why it broke, if it did.
    broken: Option<String>,
}

impl Stream {
    /// Send the next [`CHUNK`] of the pattern and check it echoed back.
    fn round(&mut self, id: usize) -> std::io::Result<()> {
        let out: Vec<u8> = (0..CHUNK as u64)
            .map(|i| pattern(id, self.checked + i))
            .collect();
        self.conn.stream.write_all(&out)?;
        let mut back = vec![0u8; CHUNK];
        self.conn.stream.read_exact(&mut back)?;
        if let Some(i) = back.iter().zip(&out).position(|(a, b)| a != b) {
            return Err(std::io::Error::other(format!(
                "byte {} differs",
                self.checked + i as u64
            )));
        }
        self.checked += CHUNK as u64;
        Ok(())
    }

    /// End the stream: half-close, then the server's clean EOF with no
    /// stray byte.
    fn finish(&mut self) -> std::io::Result<()> {
        self.conn.stream.shutdown(Shutdown::Write)?;
        let mut rest = Vec::new();
        self.conn.stream.read_to_end(&mut rest)?;
        if rest.is_empty() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "{} stray bytes after EOF",
                rest.len()
            )))
        }
    }
}

/// Four pods behind a NodePort, 50 streams to them from another host; two
/// pods are deleted with a grace period. While rvsd drains them (weight 0)
/// every stream keeps moving bytes both ways, each byte checked; the new
/// connections opened meanwhile all reach the two ready pods; at the end
/// no stream broke and those on the terminating pods finish cleanly.
#[test]
fn kubernetes_graceful_termination_50_streams() {
    graceful("kubernetes_graceful_termination_50_streams", "proxy");
}

/// [`kubernetes_graceful_termination_50_streams`] with rvsd on the XDP
/// plane: the terminating pods' flows stay in the flow table (weight 0
/// stops only new ones).
#[test]
fn kubernetes_xdp_graceful_termination_50_streams() {
    graceful("kubernetes_xdp_graceful_termination_50_streams", "xdp");
}

/// The graceful-termination scenario for `test` with rvsd on `plane`
/// (`proxy` or `xdp`).
fn graceful(test: &str, plane: &str) {
    let Some(cp) = setup(test) else { return };
    // On the XDP plane the pods sit on a subnet of their own behind the
    // node (as in xdp.rs); on the proxy plane beside the client.
    let net = if plane == "xdp" { "10.85.0" } else { "10.83.0" };
    let node_ip = format!("{net}.1");
    let (bed, node, client) = bed_with_node_on("k8sgr", net);
    let (mut bed, _pins, args) = on_plane(bed, &node, plane, "k8sgr");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let pods = [
        ("pod1", "10.83.0.11"),
        ("pod2", "10.83.0.12"),
        ("pod3", "10.83.0.13"),
        ("pod4", "10.83.0.14"),
    ];
    let terminating = ["pod1", "pod2"];
    nodes(&cp, &[("node1", node_ip.as_str())]);
    app_pods(&cp, &mut bed, "node1", "echo", &pods);
    if plane == "xdp" {
        pods_behind(&bed, &node, "10.83.0.1/24", &pods);
    }
    cp.apply(SERVICE).expect("create service");
    let (_, node_port) = service_addrs(&cp, "default", "echo");
    let external = SocketAddr::new(ip(&node_ip), node_port.expect("a NodePort"));
    let n = Node::start(&cp, &node, "node1", plane, &args);
    let d = &n.rvsd;
    within("the four endpoints in rvsadm -Ln", WAIT, || {
        real_servers(d, external).len() == 4
    });
    // The XDP plane schedules a real server once it has resolved its MAC.
    let mut seen = BTreeMap::new();
    let until = Instant::now() + WAIT;
    while seen
        .keys()
        .filter(|k: &&String| !k.starts_with("error"))
        .count()
        < pods.len()
    {
        assert!(
            Instant::now() < until,
            "every pod reachable through the NodePort: {seen:?}\n{}",
            d.ok("-Ln")
        );
        let got = match connect(&client, external, Duration::from_millis(500)) {
            Ok(c) => c.server,
            Err(e) => format!("error {e}"),
        };
        *seen.entry(got).or_insert(0) += 1;
    }

    // The streams, each checked once before anything changes.
    let mut streams: Vec<Stream> = (0..STREAMS)
        .map(|_| Stream {
            conn: connect(&client, external, Duration::from_secs(3)).expect("stream connect"),
            checked: 0,
            broken: None,
        })
        .collect();
    for (id, s) in streams.iter_mut().enumerate() {
        s.conn
            .stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        s.conn
            .stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("write timeout");
        s.round(id).expect("first round");
    }
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for s in &streams {
        *per_pod.entry(s.conn.server.clone()).or_insert(0) += 1;
    }
    assert!(
        pods.iter().all(|(p, _)| per_pod.contains_key(*p)),
        "every pod carries streams: {per_pod:?}"
    );

    // The streams keep moving, round after round, until told to stop.
    let rounds = Arc::new(AtomicU64::new(0));
    let counted = rounds.clone();
    let broken_n = Arc::new(AtomicU64::new(0));
    let broke = broken_n.clone();
    let driver = Worker::spawn(move |stop| {
        // Bounded: at most this many rounds even if never stopped.
        for _ in 0..100_000 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            for (id, s) in streams.iter_mut().enumerate() {
                // A stalled stream costs its read timeout: stop between
                // streams, not only between rounds.
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if s.broken.is_none()
                    && let Err(e) = s.round(id)
                {
                    s.broken = Some(e.to_string());
                    broke.fetch_add(1, Ordering::Relaxed);
                }
            }
            counted.fetch_add(1, Ordering::Relaxed);
        }
        streams
    });

    for p in terminating {
        cp.delete_pod("default", p, 300).expect("delete pod");
    }
    cp.wait_endpoints("default", "echo", WAIT, |eps| {
        eps.len() == 4
            && eps
                .iter()
                .filter(|e| {
                    e.conditions.ready == Some(false)
                        && e.conditions.serving == Some(true)
                        && e.conditions.terminating == Some(true)
                })
                .count()
                == 2
    })
    .expect("two endpoints serving and terminating, two ready");
    // A later change rvsd must program: once it is there, rvsd has seen
    // the slice written before it (whatever it made of it).
    cp.apply(&SERVICE.replace(r#""name": "echo""#, r#""name": "marker""#))
        .expect("create the marker service");
    let (_, marker_port) = service_addrs(&cp, "default", "marker");
    let marker = SocketAddr::new(ip(&node_ip), marker_port.expect("a NodePort"));
    within("the marker service in rvsadm -Ln", WAIT, || {
        !real_servers(d, marker).is_empty()
    });

    // Several seconds of streaming, new connections opened meanwhile.
    let from = rounds.load(Ordering::Relaxed);
    let end = Instant::now() + AFTER;
    let mut new: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed: Vec<String> = Vec::new();
    for _ in 0..NEW_CONNS {
        match connect(&client, external, Duration::from_secs(3)) {
            Ok(c) if !c.server.is_empty() => *new.entry(c.server).or_insert(0) += 1,
            Ok(_) => failed.push("no greeting".to_owned()),
            Err(e) => failed.push(e.to_string()),
        }
        if let Some(left) = end.checked_duration_since(Instant::now()) {
            std::thread::sleep(left.min(AFTER / NEW_CONNS as u32));
        }
    }
    within(
        "the streams going on after the pods turned Terminating",
        WAIT,
        || {
            Instant::now() >= end
                && (rounds.load(Ordering::Relaxed) >= from + 3
                    || broken_n.load(Ordering::Relaxed) > 0)
        },
    );
    let mut streams = driver.finish();

    assert_eq!(
        failed,
        Vec::<String>::new(),
        "new connections failed: {new:?}"
    );
    assert!(
        terminating.iter().all(|p| !new.contains_key(*p)),
        "a new connection reached a terminating pod while ready ones exist: {new:?}"
    );
    let broken: Vec<String> = streams
        .iter()
        .enumerate()
        .filter_map(|(id, s)| {
            let e = s.broken.as_ref()?;
            Some(format!(
                "#{id} to {} after {} bytes: {e}",
                s.conn.server, s.checked
            ))
        })
        .collect();
    assert_eq!(
        broken,
        Vec::<String>::new(),
        "0 broken streams of {STREAMS}"
    );
    let min = streams.iter().map(|s| s.checked).min().unwrap_or(0);
    assert!(
        min >= (4 * CHUNK) as u64,
        "every stream carried at least four chunks (least: {min} bytes)"
    );
    // The streams on the terminating pods (and the rest) end cleanly.
    for (id, s) in streams.iter_mut().enumerate() {
        if let Err(e) = s.finish() {
            panic!(
                "stream #{id} to {} did not finish intact: {e}",
                s.conn.server
            );
        }
    }
    assert_eq!(
        real_servers(d, external),
        vec![
            ("10.83.0.11:8080".to_owned(), 0),
            ("10.83.0.12:8080".to_owned(), 0),
            ("10.83.0.13:8080".to_owned(), 1),
            ("10.83.0.14:8080".to_owned(), 1),
        ],
        "the terminating pods drain at weight 0"
    );
    eprintln!(
        "{test}: {STREAMS} streams {per_pod:?}, {} rounds after the change, \
         {} bytes checked, new connections {new:?}",
        rounds.load(Ordering::Relaxed) - from,
        streams.iter().map(|s| s.checked).sum::<u64>()
    );
}
