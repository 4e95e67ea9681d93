//! Writes under load (issue 31): `rvsd --dataplane xdp` in a director
//! namespace, VRRP master on its eth0 (advert_int 1 s), REST API writes
//! on with a token. While long-lived byte-checked TCP streams flow through
//! the XDP plane (DR) to two real servers, several keep-alive HTTP clients
//! drive more than 1,000 API writes a second mixed with reads, for ten
//! seconds:
//! * counter writers: read a scratch real server's weight and its ETag,
//!   write weight + 1 with `If-Match`, again on 412;
//! * weight writers: change the weights of the service carrying the
//!   streams (never to 0, so nothing drains), `If-Match` the tag just read;
//! * scratch writers: create a service, read it, delete it with `If-Match`;
//! * a reader: the table, one service, VRRP, the checks, the state.
//!
//! Asserted: no lost update (the counter ends at exactly its start plus the
//! successful increments; the 412s are printed), no stream broken (every
//! byte echoed back in order), the largest gap between the master's VRRP
//! adverts on the wire at most 1.5 × advert_int, and at least 1,000
//! successful writes per second of the CPU rvsd got (its API runs on one
//! thread; the wall-clock rate is printed). `RVS_API_LOAD_NO_IF_MATCH=1`
//! makes the counter writers leave out `If-Match`: then increments are
//! lost and the test fails (the ETag is what keeps them).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Launch, TempDir, within};
use crate::netns::{Host, connect, director_bed, has_addr};
use crate::streams::{Pattern, echo_stream};
use crate::vrrp_reload::{Capture, largest_gap};

const TOKEN: &str = "api-load-token-0123456789abcdef";
const HTTP_PORT: u16 = 9180;
/// The service carrying the streams (DR to r0 and r1).
const VIP: &str = "10.77.0.100";
/// The VRRP instance's own address (not the service's).
const VRRP_VIP: &str = "10.77.0.200";
const ADVERT_INT: Duration = Duration::from_secs(1);
/// How long the writes run.
const RUN: Duration = Duration::from_secs(10);
/// The write rate asked of the clients together (the floor asserted is
/// 1,000 a second).
const TARGET_WRITES_PER_S: u32 = 1_600;
const COUNTER_WRITERS: usize = 3;
const WEIGHT_WRITERS: usize = 2;
const SCRATCH_WRITERS: usize = 2;
const STREAMS: usize = 12;
/// Each stream writes a chunk this often.
const PERIOD: Duration = Duration::from_millis(50);
const CHUNK: usize = 1024;
/// A stream whose echo does not come back within this fails.
const STALL: Duration = Duration::from_secs(5);
/// Every HTTP answer within this, or the client fails.
const ANSWER: Duration = Duration::from_secs(10);

/// The CPU time process `pid` has used (user and system; /proc counts in
/// USER_HZ, 100 a second on Linux).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (in parentheses, which may hold
    // spaces): utime and stime are the 12th and 13th.
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|f| f.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn conf() -> String {
    format!(
        "vrrp_instance VI_LOAD {{
    state MASTER
    interface eth0
    virtual_router_id 77
    priority 150
    advert_int {}
    virtual_ipaddress {{
        {VRRP_VIP}/24
    }}
}}
",
        ADVERT_INT.as_secs()
    )
}

/// One keep-alive HTTP/1.1 connection to rvsd's API (made inside the
/// director's namespace), with the bearer token on every request.
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

/// An answer: status, ETag (if any), body.
struct Answer {
    status: u16,
    etag: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_str(&self.body).map_err(|e| format!("not JSON ({e}): {}", self.body))
    }
}

impl Client {
    fn open(dir: &Host) -> Result<Client, String> {
        let s = dir
            .run(|| TcpStream::connect((Ipv4Addr::LOCALHOST, HTTP_PORT)))
            .map_err(|e| format!("connect to the API: {e}"))?;
        s.set_read_timeout(Some(ANSWER))
            .map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let w = s.try_clone().map_err(|e| e.to_string())?;
        Ok(Client {
            r: BufReader::new(s),
            w,
        })
    }

    fn call(
        &mut self,
        method: &str,
        path: &str,
        if_match: Option<&str>,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let auth = format!("Bearer {TOKEN}");
        let mut headers = vec![("Authorization", auth.as_str())];
        headers.extend(if_match.map(|tag| ("If-Match", tag)));
        let mut head = crate::api::request_head(method, path, &headers, &body, "1.1");
        head.push_str(&body);
        self.w
            .write_all(head.as_bytes())
            .map_err(|e| format!("{method} {path}: send: {e}"))?;
        let mut line = String::new();
        self.r
            .read_line(&mut line)
            .map_err(|e| format!("{method} {path}: status line: {e}"))?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{method} {path}: status line {line:?}"))?;
        let (mut len, mut etag) = (0usize, None);
        loop {
            line.clear();
            self.r
                .read_line(&mut line)
                .map_err(|e| format!("{method} {path}: header: {e}"))?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            match k.as_str() {
                "content-length" => len = v.parse().map_err(|_| format!("length {v}"))?,
                "etag" => etag = Some(v.to_owned()),
                "transfer-encoding" => return Err(format!("{method} {path}: {v} body")),
                _ => {}
            }
        }
        let mut b = vec![0u8; len];
        self.r
            .read_exact(&mut b)
            .map_err(|e| format!("{method} {path}: body: {e}"))?;
        Ok(Answer {
            status,
            etag,
            body: String::from_utf8_lossy(&b).into_owned(),
        })
    }

    /// `method path` expecting `want`.
    fn expect(
        &mut self,
        want: u16,
        method: &str,
        path: &str,
        if_match: Option<&str>,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, String> {
        let a = self.call(method, path, if_match, body)?;
        if a.status != want {
            return Err(format!(
                "{method} {path}: {} (wanted {want}): {}",
                a.status, a.body
            ));
        }
        Ok(a)
    }
}

/// What one client did.
#[derive(Default)]
struct Tally {
    writes: u64,
    reads: u64,
    stale: u64,
    /// Counter writers: successful increments.
    increments: u64,
    error: Option<String>,
}

/// Paces a client at `per_s` writes a second (flat out when behind).
struct Pace {
    start: Instant,
    per_s: f64,
}

impl Pace {
    fn wait(&self, writes: u64) {
        let due = self.start + Duration::from_secs_f64(writes as f64 / self.per_s);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
}

fn real_path(port: u16, rs: &str, rs_port: u16) -> String {
    format!("/api/v1/services/tcp-{VIP}-{port}/reals/{rs}-{rs_port}")
}

/// A real server's weight and ETag, from an answer that shows it.
fn weight_and_tag(a: &Answer) -> Result<(u64, String), String> {
    let w = a.json()?["weight"]
        .as_u64()
        .ok_or_else(|| format!("no weight: {}", a.body))?;
    let tag = a.etag.clone().ok_or("no ETag on the real server")?;
    Ok((w, tag))
}

/// Read-modify-write until `end`: write weight + 1 of the counter real
/// server with `If-Match` (unless `blind`) the ETag last read (from a GET,
/// or from the answer of the last write, which shows the real server as
/// the write left it); on 412, read it again.
fn count(
    c: &mut Client,
    t: &mut Tally,
    pace: &Pace,
    end: Instant,
    blind: bool,
) -> Result<(), String> {
    let path = real_path(81, "10.77.0.11", 81);
    let mut known = None;
    while Instant::now() < end {
        let (w, tag) = match known.take() {
            Some(k) => k,
            None => {
                t.reads += 1;
                weight_and_tag(&c.expect(200, "GET", &path, None, None)?)?
            }
        };
        let a = c.call(
            "PATCH",
            &path,
            (!blind).then_some(tag.as_str()),
            Some(&serde_json::json!({ "weight": w + 1 })),
        )?;
        t.writes += 1;
        match a.status {
            200 => {
                t.increments += 1;
                known = Some(weight_and_tag(&a)?);
            }
            412 => t.stale += 1,
            s => return Err(format!("PATCH {path}: {s}: {}", a.body)),
        }
        pace.wait(t.writes);
    }
    Ok(())
}

/// Set real server `rs` of the streams' service to weights 1..=100 in
/// turn, `If-Match` the ETag last read (as [`count`] does).
fn weigh(c: &mut Client, t: &mut Tally, pace: &Pace, end: Instant, rs: &str) -> Result<(), String> {
    let path = real_path(80, rs, 80);
    let mut k = 0u64;
    let mut known = None;
    while Instant::now() < end {
        let tag = match known.take() {
            Some(tag) => tag,
            None => {
                t.reads += 1;
                weight_and_tag(&c.expect(200, "GET", &path, None, None)?)?.1
            }
        };
        k += 1;
        let a = c.call(
            "PATCH",
            &path,
            Some(&tag),
            Some(&serde_json::json!({ "weight": 1 + k % 100 })),
        )?;
        t.writes += 1;
        match a.status {
            200 => known = Some(weight_and_tag(&a)?.1),
            412 => t.stale += 1,
            s => return Err(format!("PATCH {path}: {s}: {}", a.body)),
        }
        pace.wait(t.writes);
    }
    Ok(())
}

/// Create service VIP:`port` with one real server, read it, delete it with
/// `If-Match` the tag just read, until `end`.
fn churn(
    c: &mut Client,
    t: &mut Tally,
    pace: &Pace,
    end: Instant,
    port: u16,
) -> Result<(), String> {
    let body = serde_json::json!({
        "protocol": "tcp", "address": VIP, "port": port, "scheduler": "wrr",
        "reals": [{"address": "10.77.0.12", "port": port, "weight": 1, "forward": "route"}],
    });
    let path = format!("/api/v1/services/tcp-{VIP}-{port}");
    while Instant::now() < end {
        c.expect(201, "POST", "/api/v1/services", None, Some(&body))?;
        t.writes += 1;
        pace.wait(t.writes);
        let a = c.expect(200, "GET", &path, None, None)?;
        t.reads += 1;
        let tag = a.etag.ok_or("no ETag on the service")?;
        c.expect(204, "DELETE", &path, Some(&tag), None)?;
        t.writes += 1;
        pace.wait(t.writes);
    }
    Ok(())
}

/// Reads only: the table, a service, VRRP, the checks, the state.
fn read(c: &mut Client, t: &mut Tally, end: Instant) -> Result<(), String> {
    let paths = [
        "/api/v1/services".to_owned(),
        format!("/api/v1/services/tcp-{VIP}-80"),
        "/api/v1/vrrp".to_owned(),
        "/api/v1/checks".to_owned(),
        "/api/v1/state".to_owned(),
    ];
    let pace = Pace {
        start: Instant::now(),
        per_s: 200.0,
    };
    while Instant::now() < end {
        for p in &paths {
            c.expect(200, "GET", p, None, None)?;
            t.reads += 1;
            pace.wait(t.reads);
        }
    }
    Ok(())
}

#[test]
fn api_load_writes_under_load_lose_nothing_break_nothing_and_keep_vrrp() {
    let test = "api_load_writes_under_load_lose_nothing_break_nothing_and_keep_vrrp";
    let blind = std::env::var_os("RVS_API_LOAD_NO_IF_MATCH").is_some();
    let Some((mut bed, client, dir)) = director_bed(test) else {
        return;
    };
    let rs = bed.real_servers(2, &["--mode", "dr"]);
    let obs = bed.host("o", "10.77.0.5/24");
    let files = TempDir::new("api-load");
    let conf = files.write("keepalived.conf", &conf());
    let token = files.write("token", &format!("{TOKEN}\n"));
    let http = format!("127.0.0.1:{HTTP_PORT}");
    let d = Launch::new("api-load")
        .netns(&dir.ns)
        .plane("xdp")
        .args(["--interface", "eth0", "-f"])
        .arg(&conf)
        .args(["--http", http.as_str(), "--api-writes"])
        .arg("--api-token-file")
        .arg(&token)
        // Every client comes from 127.0.0.1: the per-address bound is
        // lifted far above the rate driven.
        .args(["--api-rate", "1000000"])
        .adopt(&mut bed);
    within("rvsd is VRRP master", Duration::from_secs(15), || {
        has_addr(&dir, VRRP_VIP)
    });

    // The streams' service and the counter's, made through the API.
    let mut setup = Client::open(&dir).expect("the API answers");
    let reals: Vec<serde_json::Value> = rs
        .iter()
        .map(|h| serde_json::json!({"address": h.addr.to_string(), "port": 80, "weight": 50, "forward": "route"}))
        .collect();
    let counter_reals =
        serde_json::json!([{"address": "10.77.0.11", "port": 81, "weight": 1, "forward": "route"}]);
    for (port, reals) in [(80, serde_json::json!(reals)), (81, counter_reals)] {
        let body = serde_json::json!({
            "protocol": "tcp", "address": VIP, "port": port, "scheduler": "wrr", "reals": reals,
        });
        if let Err(e) = setup.expect(201, "POST", "/api/v1/services", None, Some(&body)) {
            panic!("the service on port {port}: {e}");
        }
    }
    let vip: SocketAddr = format!("{VIP}:80").parse().expect("vip");
    // Both real servers reachable (a DR real server is scheduled once its
    // MAC is resolved), then the streams.
    let mut names = std::collections::BTreeSet::new();
    within("both real servers answer", Duration::from_secs(10), || {
        if let Ok(c) = connect(&client, vip, Duration::from_millis(500)) {
            names.insert(c.server);
        }
        names.len() == 2
    });
    let stop = Arc::new(AtomicBool::new(false));
    let pattern = Arc::new(Pattern::new(64 << 10, CHUNK, 0xA91_10AD));
    // Each judged by its outcome at the end (no progress watched).
    let echo = |s| {
        echo_stream(
            s,
            pattern.clone(),
            PERIOD,
            STALL,
            stop.clone(),
            Arc::default(),
        )
    };
    let mut streams = Vec::new();
    let mut per_server = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..STREAMS {
        let c = connect(&client, vip, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("stream {i}: {e}"));
        *per_server.entry(c.server.clone()).or_default() += 1;
        streams.push(echo(c.stream));
    }
    eprintln!("{test}: {STREAMS} streams over {per_server:?}");

    let capture = Capture::start(&obs);
    // A few adverts on the wire before the load.
    std::thread::sleep(2 * ADVERT_INT);
    let clients = COUNTER_WRITERS + WEIGHT_WRITERS + SCRATCH_WRITERS;
    let per_client = f64::from(TARGET_WRITES_PER_S) / clients as f64;
    let start = Instant::now();
    let cpu_before = cpu_time(d.pid);
    let end = start + RUN;
    let mut workers = Vec::new();
    for i in 0..=clients {
        let dir = dir.clone();
        let rs_addr: Vec<String> = rs.iter().map(|h| h.addr.to_string()).collect();
        workers.push(std::thread::spawn(move || {
            let mut t = Tally::default();
            let pace = Pace {
                start,
                per_s: per_client,
            };
            let r = Client::open(&dir).and_then(|mut c| match i {
                _ if i < COUNTER_WRITERS => count(&mut c, &mut t, &pace, end, blind),
                _ if i < COUNTER_WRITERS + WEIGHT_WRITERS => {
                    let k = i - COUNTER_WRITERS;
                    weigh(&mut c, &mut t, &pace, end, &rs_addr[k % rs_addr.len()])
                }
                _ if i < clients => {
                    let k = u16::try_from(i).unwrap_or(0);
                    churn(&mut c, &mut t, &pace, end, 90 + k)
                }
                _ => read(&mut c, &mut t, end),
            });
            t.error = r.err();
            t
        }));
    }
    let tallies: Vec<Tally> = workers
        .into_iter()
        .map(|w| w.join().expect("client thread"))
        .collect();
    let took = start.elapsed();
    let cpu = cpu_time(d.pid).saturating_sub(cpu_before);
    let seen = capture.finish();
    stop.store(true, Ordering::SeqCst);
    let outcomes: Vec<_> = streams
        .into_iter()
        .map(|s| s.join().expect("stream thread"))
        .collect();

    let sum = |f: fn(&Tally) -> u64| tallies.iter().map(f).sum::<u64>();
    let (writes, reads, stale, increments) = (
        sum(|t| t.writes),
        sum(|t| t.reads),
        sum(|t| t.stale),
        sum(|t| t.increments),
    );
    let done = writes - stale;
    let secs = took.as_secs_f64();
    // A fresh connection: the first has been idle through the run.
    let counter = Client::open(&dir)
        .and_then(|mut c| {
            c.expect(200, "GET", &real_path(81, "10.77.0.11", 81), None, None)
                .and_then(|a| a.json())
        })
        .expect("the counter")["weight"]
        .as_u64()
        .expect("a weight");
    let master = match dir.addr {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => panic!("the director is IPv4"),
    };
    let (gap, adverts) = largest_gap(&seen, master, start, start + took);
    let bytes: u64 = outcomes.iter().map(|o| o.good).sum();
    let longest = outcomes
        .iter()
        .map(|o| o.longest_gap)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{test}: {writes} writes ({done} done, {:.0}/s; {stale} answered 412) and {reads} reads \
         ({:.0}/s) in {took:.2?}; counter {counter} after {increments} increments from 1{}; \
         {adverts} adverts, largest gap {gap:?} (advert_int {ADVERT_INT:?}); {STREAMS} streams \
         echoed {bytes} bytes, longest read gap {longest:?}; rvsd used {cpu:.2?} of CPU \
         ({:.0} requests per CPU second)",
        done as f64 / secs,
        reads as f64 / secs,
        if blind { " (without If-Match)" } else { "" },
        (writes + reads) as f64 / cpu.as_secs_f64().max(0.01),
    );
    for (i, t) in tallies.iter().enumerate() {
        eprintln!(
            "  client {i}: {} writes ({} answered 412), {} reads",
            t.writes, t.stale, t.reads
        );
    }
    for (i, t) in tallies.iter().enumerate() {
        assert!(
            t.error.is_none(),
            "client {i}: {}",
            t.error.as_deref().unwrap_or("")
        );
    }
    for (i, o) in outcomes.iter().enumerate() {
        assert!(o.error.is_none(), "stream {i} broke: {o:?}");
        assert!(o.good > 0, "stream {i} carried nothing: {o:?}");
    }
    assert_eq!(
        counter,
        1 + increments,
        "lost updates: {} of {increments} increments",
        (1 + increments).saturating_sub(counter)
    );
    assert!(
        gap <= ADVERT_INT * 3 / 2,
        "largest gap between VRRP adverts {gap:?} (advert_int {ADVERT_INT:?})"
    );
    // The rate rvsd sustains on one core of its own: successful writes per
    // second of CPU it got (it serves the API on one thread). The wall-clock
    // rate, printed above, reaches it when rvsd has a core to itself (1,203
    // a second alone); beside the rest of the suite on two shared cores it
    // does not, so the bound is on what rvsd does with the CPU it gets.
    let per_cpu_second = done as f64 / cpu.as_secs_f64().max(0.01);
    assert!(
        per_cpu_second >= 1000.0,
        "{done} writes with {cpu:?} of rvsd's CPU: {per_cpu_second:.0} a CPU second, fewer than 1,000"
    );
}
