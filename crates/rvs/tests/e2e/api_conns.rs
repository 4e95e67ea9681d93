//! `GET /api/v1/connections` paged end to end: real connections held open
//! through rvsd's proxy plane, walked page by page with `limit` and
//! `cursor`: every connection appears once across the pages and the pages
//! together are what `rvsadm -Lcn` lists; a `service` filter keeps that
//! service's only (`total` null); connections closed and opened between
//! pages break nothing and duplicate nothing.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::api::{json, request, start_api};
use crate::harness::{Rvsd, TempDir, free_port};

const T: Duration = Duration::from_secs(10);

/// One connection as both listings name it: client, virtual, real server.
type Conn = (SocketAddr, SocketAddr, SocketAddr);

/// A backend that greets and then holds each connection until the client
/// closes it (or a minute passes): its port and the server.
fn holder() -> (u16, rvs_testbed::Server) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    let port = l.local_addr().expect("addr").port();
    let server = rvs_testbed::Server::tcp(l, |s, _| {
        rvs_testbed::server::echo(s, "held\n", Duration::from_secs(60));
    });
    (port, server)
}

/// `n` connections to `127.0.0.1:vport`, each past the backend's greeting
/// (so rvsd has scheduled it), held open.
fn open(vport: u16, n: usize) -> Vec<TcpStream> {
    let vip: SocketAddr = ([127, 0, 0, 1], vport).into();
    (0..n)
        .map(|_| {
            let c = TcpStream::connect_timeout(&vip, T).expect("connect to the service");
            c.set_read_timeout(Some(T)).expect("timeout");
            let mut line = String::new();
            BufReader::new(&c).read_line(&mut line).expect("greeting");
            assert_eq!(line, "held\n");
            c
        })
        .collect()
}

/// Each stream's (client, virtual) ends as rvsd sees them (a client
/// port alone is not unique: the kernel may give two connections to
/// different services the same one).
fn clients(streams: &[TcpStream]) -> BTreeSet<(SocketAddr, SocketAddr)> {
    streams
        .iter()
        .map(|s| {
            (
                s.local_addr().expect("local addr"),
                s.peer_addr().expect("peer addr"),
            )
        })
        .collect()
}

/// `rvsadm -Lcn` (`pro expire state source virtual destination`) as
/// connections.
fn listed(d: &Rvsd) -> BTreeSet<Conn> {
    d.ok("-Lcn")
        .lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            if t.len() < 6 || t[0] != "TCP" {
                return None;
            }
            Some((t[3].parse().ok()?, t[4].parse().ok()?, t[5].parse().ok()?))
        })
        .collect()
}

fn addr(v: &serde_json::Value, a: &str, p: &str) -> SocketAddr {
    let ip = v[a].as_str().and_then(|s| s.parse().ok());
    let port = v[p].as_u64().and_then(|p| u16::try_from(p).ok());
    match (ip, port) {
        (Some(ip), Some(port)) => SocketAddr::new(ip, port),
        _ => panic!("a connection without {a}/{p}: {v}"),
    }
}

/// One page: its connections, the next cursor, `total`.
fn page(http: u16, query: &str) -> (Vec<Conn>, Option<String>, serde_json::Value) {
    let (code, _, body) = request(
        http,
        "GET",
        &format!("/api/v1/connections?{query}"),
        &[],
        None,
    );
    assert_eq!(code, 200, "{query}: {body}");
    let v = json(&body);
    let conns = v["connections"]
        .as_array()
        .unwrap_or_else(|| panic!("no connections in {body}"))
        .iter()
        .map(|c| {
            (
                addr(c, "client", "client_port"),
                addr(c, "vaddr", "vport"),
                addr(c, "daddr", "dport"),
            )
        })
        .collect();
    let next = v["next_cursor"].as_str().map(str::to_owned);
    (conns, next, v["total"].clone())
}

/// Walk every page of `filter` (`&`-joined query terms, or empty) with
/// `limit`; `between(n)` runs after page `n` is read. Every page is at most
/// `limit` long, the walk is bounded; the connections in order, and the
/// `total`s seen.
fn walk(
    http: u16,
    filter: &str,
    limit: usize,
    mut between: impl FnMut(usize),
) -> (Vec<Conn>, Vec<serde_json::Value>) {
    let mut all = Vec::new();
    let mut totals = Vec::new();
    let mut cursor: Option<String> = None;
    for n in 0..200 {
        let mut q = format!("limit={limit}");
        if !filter.is_empty() {
            q = format!("{q}&{filter}");
        }
        if let Some(c) = &cursor {
            q = format!("{q}&cursor={c}");
        }
        let (conns, next, total) = page(http, &q);
        assert!(conns.len() <= limit, "{q}: {} > {limit}", conns.len());
        all.extend(conns);
        totals.push(total);
        match next {
            None => return (all, totals),
            Some(c) => cursor = Some(c),
        }
        between(n);
    }
    panic!("200 pages of {limit} and no end: the cursor does not advance");
}

/// Each connection once: the walk as a set, or a panic naming the repeats.
fn once(what: &str, conns: &[Conn]) -> BTreeSet<Conn> {
    let mut seen = BTreeSet::new();
    let repeated: Vec<&Conn> = conns.iter().filter(|c| !seen.insert(**c)).collect();
    assert!(
        repeated.is_empty(),
        "{what}: {} listed more than once: {repeated:?}",
        repeated.len()
    );
    seen
}

#[test]
fn api_connections_page_through_the_table() {
    let (d, http) = start_api(
        TempDir::new("api-conns"),
        "proxy",
        "conns-secret",
        &["--api-rate", "100000"],
    );
    let (bport, _backend) = holder();
    let (va, vb) = (free_port(), free_port());
    for vport in [va, vb] {
        d.ok(&format!("-A -t 127.0.0.1:{vport} -s rr"));
        d.ok(&format!("-a -t 127.0.0.1:{vport} -r 127.0.0.1:{bport} -m"));
    }
    let a = open(va, 150);
    let b = open(vb, 60);
    let want: BTreeSet<(SocketAddr, SocketAddr)> =
        clients(&a).union(&clients(&b)).copied().collect();
    // Every connection is in the table once the proxy has accepted it:
    // wait until -Lcn lists them all.
    d.eventually("-Lcn lists every connection", || {
        let have: BTreeSet<_> = listed(&d).iter().map(|c| (c.0, c.1)).collect();
        want.is_subset(&have)
    });

    // Unfiltered, 25 a page: several pages, each connection once, the same
    // set as -Lcn, `total` the table's size on every page.
    let (walked, totals) = walk(http, "", 25, |_| ());
    let walked = once("unfiltered", &walked);
    let table = listed(&d);
    assert_eq!(walked, table, "the pages are what -Lcn lists");
    let extra: Vec<&Conn> = walked
        .iter()
        .filter(|c| !want.contains(&(c.0, c.1)))
        .collect();
    assert!(extra.is_empty(), "not the test's connections: {extra:?}");
    eprintln!(
        "{} connections in {} pages of 25",
        walked.len(),
        totals.len()
    );
    assert!(totals.len() >= 9, "{} pages of 25", totals.len());
    assert!(
        totals.iter().all(|t| t.as_u64() == Some(want.len() as u64)),
        "{totals:?}"
    );

    // By service: B's only, `total` null.
    let vb_addr: SocketAddr = ([127, 0, 0, 1], vb).into();
    let (walked, totals) = walk(http, &format!("service=tcp-127.0.0.1-{vb}"), 7, |_| ());
    let walked = once("service B", &walked);
    let b_listed: BTreeSet<Conn> = table.iter().filter(|c| c.1 == vb_addr).copied().collect();
    assert_eq!(walked, b_listed);
    assert_eq!(walked.len(), 60);
    assert!(totals.len() >= 9, "{} pages of 7", totals.len());
    assert!(totals.iter().all(serde_json::Value::is_null), "{totals:?}");

    // Connections closed and opened while the walk runs: every page is
    // answered, none is listed twice, and every connection open
    // throughout is listed.
    let (closed, a): (Vec<_>, Vec<_>) = a.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let a: Vec<TcpStream> = a.into_iter().map(|(_, s)| s).collect();
    let kept: BTreeSet<_> = clients(&a).union(&clients(&b)).copied().collect();
    let mut closing = Some(closed);
    let mut opened = Vec::new();
    let (walked, _) = walk(http, "", 20, |n| {
        if n == 0 {
            drop(closing.take());
        }
        if n == 2 {
            opened = open(va, 20);
        }
    });
    let walked: BTreeSet<_> = once("while closing", &walked)
        .iter()
        .map(|c| (c.0, c.1))
        .collect();
    let missing: Vec<_> = kept.difference(&walked).collect();
    assert!(
        missing.is_empty(),
        "open throughout, not listed: {missing:?}"
    );
    drop(opened);
}
