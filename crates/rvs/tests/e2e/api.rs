//! REST API v1 against a running rvsd (proxy plane): a service and a real
//! server created over HTTP show in `rvsadm -Ln` and carry traffic; a
//! write without the token is 401, a stale `If-Match` 412, and a service
//! of keepalived.conf is read-only (409 naming its owner).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::harness::{Rvsd, TempDir, free_port};

const T: Duration = Duration::from_secs(10);

/// One HTTP/1.0 exchange: status, headers (lower-case names), body.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&serde_json::Value>,
) -> (u16, Vec<(String, String)>, String) {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to --http");
    s.set_read_timeout(Some(T)).expect("timeout");
    let resp = exchange(s, method, path, headers, body).expect("an HTTP exchange");
    parse_answer(&resp)
}

/// One HTTP/1.0 exchange over `s` (plain or TLS): the answer as read up to
/// the end of the stream, or the stream's error.
pub fn exchange(
    mut s: impl Read + Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&serde_json::Value>,
) -> std::io::Result<String> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = request_head(method, path, headers, &body, "1.0");
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp)
}

/// The head of a request (HTTP/`version`) for `body` (JSON when not
/// empty), with `headers`, up to the blank line: what [`exchange`] and
/// `api_load`'s keep-alive client send.
pub fn request_head(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    version: &str,
) -> String {
    let mut head = format!(
        "{method} {path} HTTP/{version}\r\nHost: rvsd\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// An HTTP answer: status, headers (lower-case names), body.
pub type Answer = (u16, Vec<(String, String)>, String);

/// An HTTP answer's status, headers (lower-case names) and body.
pub fn parse_answer(resp: &str) -> Answer {
    let (h, b) = resp.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = h.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, b.to_owned())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

pub fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A real server that greets with `api-backend` and closes.
fn backend() -> (u16, rvs_testbed::Server) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
    l.set_nonblocking(true).expect("nonblocking");
    let port = l.local_addr().expect("addr").port();
    let server = rvs_testbed::Server::tcp(l, |mut c: TcpStream, _| {
        let _ = c.set_nonblocking(false);
        let _ = c.write_all(b"api-backend\n");
    });
    (port, server)
}

/// rvsd on `plane` with writes on, the token `token`, and `extra`
/// arguments: the daemon and its HTTP port.
pub fn start_api(dir: TempDir, plane: &str, token: &str, extra: &[&str]) -> (Rvsd, u16) {
    let token = dir.write("token", &format!("{token}\n"));
    let http = free_port();
    let http_s = format!("127.0.0.1:{http}");
    let token_s = token.to_string_lossy();
    let mut args = vec![
        "--http",
        &http_s,
        "--api-writes",
        "--api-token-file",
        &token_s,
    ];
    args.extend_from_slice(extra);
    (Rvsd::start_with(dir, plane, None, &args), http)
}

#[test]
fn api_writes_reach_rvsadm_and_traffic() {
    let dir = TempDir::new("api");
    let kept_port = free_port();
    let conf = dir.write(
        "keepalived.conf",
        &format!(
            "virtual_server 127.0.0.1 {kept_port} {{\n    lb_algo rr\n    lb_kind NAT\n    protocol TCP\n    real_server 127.0.0.1 {kept_port} {{\n        weight 1\n    }}\n}}\n"
        ),
    );
    let conf_s = conf.to_string_lossy().into_owned();
    let (d, http) = start_api(dir, "proxy", "e2e-secret", &["-f", &conf_s]);
    let auth = ("Authorization", "Bearer e2e-secret");
    let (code, _, doc) = request(http, "GET", "/api/v1/openapi.json", &[], None);
    assert_eq!(code, 200);
    assert_eq!(json(&doc)["openapi"], "3.1.0");

    let vport = free_port();
    let (bport, _server) = backend();
    let svc = serde_json::json!({
        "protocol": "tcp", "address": "127.0.0.1", "port": vport, "scheduler": "rr"
    });
    // Without the token: 401, and nothing changed.
    let (code, _, body) = request(http, "POST", "/api/v1/services", &[], Some(&svc));
    assert_eq!(code, 401, "{body}");
    assert_eq!(json(&body)["code"], "unauthorized");
    assert!(!d.ok("-Ln").contains(&format!("127.0.0.1:{vport}")));
    // With it: the service, then its real server.
    let (code, _, body) = request(http, "POST", "/api/v1/services", &[auth], Some(&svc));
    assert_eq!(code, 201, "{body}");
    let id = format!("tcp-127.0.0.1-{vport}");
    assert_eq!(json(&body)["id"], id.as_str());
    let real =
        serde_json::json!({"address": "127.0.0.1", "port": bport, "weight": 2, "forward": "masq"});
    let reals = format!("/api/v1/services/{id}/reals");
    let (code, h, body) = request(http, "POST", &reals, &[auth], Some(&real));
    assert_eq!(code, 201, "{body}");
    let tag = header(&h, "etag").expect("an ETag").to_owned();
    let listing = d.ok("-Ln");
    assert!(
        listing.contains(&format!("TCP  127.0.0.1:{vport} rr"))
            && listing.contains(&format!("-> 127.0.0.1:{bport}"))
            && listing.contains("Masq    2"),
        "{listing}"
    );
    // Traffic flows through it.
    let c = TcpStream::connect_timeout(&format!("127.0.0.1:{vport}").parse().expect("vip"), T)
        .expect("connect to the service");
    c.set_read_timeout(Some(T)).expect("timeout");
    let mut line = String::new();
    BufReader::new(c).read_line(&mut line).expect("greeting");
    assert_eq!(line.trim_end(), "api-backend");

    // If-Match: the ETag read passes once; after that it is stale.
    let rs = format!("{reals}/127.0.0.1-{bport}");
    let w5 = serde_json::json!({"weight": 5});
    let (code, _, body) = request(http, "PATCH", &rs, &[auth, ("If-Match", &tag)], Some(&w5));
    assert_eq!(code, 200, "{body}");
    let w7 = serde_json::json!({"weight": 7});
    let (code, _, body) = request(http, "PATCH", &rs, &[auth, ("If-Match", &tag)], Some(&w7));
    assert_eq!(code, 412, "{body}");
    assert_eq!(json(&body)["code"], "precondition_failed");
    let listing = d.ok("-Ln");
    assert!(listing.contains("Masq    5"), "{listing}");

    // keepalived.conf's service is read-only here.
    let kept = format!("/api/v1/services/tcp-127.0.0.1-{kept_port}");
    let (code, _, body) = request(http, "GET", &kept, &[], None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["owner"], "the configuration file");
    for (method, body) in [
        ("PATCH", Some(serde_json::json!({"scheduler": "wlc"}))),
        ("DELETE", None),
    ] {
        let (code, _, answer) = request(http, method, &kept, &[auth], body.as_ref());
        assert_eq!(code, 409, "{method}: {answer}");
        let v = json(&answer);
        assert_eq!(v["code"], "owned");
        assert!(
            v["message"]
                .as_str()
                .is_some_and(|m| m.contains("owned by the configuration file")),
            "{answer}"
        );
    }
    assert!(
        d.ok("-Ln")
            .contains(&format!("TCP  127.0.0.1:{kept_port} rr"))
    );
}

/// The tunnel options of `rvsadm -a -i` through the API: each set shows in
/// `rvsadm -Ln --tun-info` and reads back as written; a combination rvsadm
/// refuses is a 400 with rvsadm's words and the field, and changes nothing.
#[test]
fn api_tunnel_options_reach_rvsadm() {
    let (d, http) = start_api(TempDir::new("api-tun"), "none", "tun-secret", &[]);
    let auth = ("Authorization", "Bearer tun-secret");
    let svc = serde_json::json!({"protocol": "tcp", "address": "10.9.0.1", "port": 80});
    let (code, _, body) = request(http, "POST", "/api/v1/services", &[auth], Some(&svc));
    assert_eq!(code, 201, "{body}");
    let reals = "/api/v1/services/tcp-10.9.0.1-80/reals";
    let rs = format!("{reals}/10.9.1.1-80");
    let real = serde_json::json!({
        "address": "10.9.1.1", "port": 80, "forward": "tunnel",
        "tun_type": "gue", "tun_port": 6080, "tun_csum": "remcsum"
    });
    let (code, _, body) = request(http, "POST", reals, &[auth], Some(&real));
    assert_eq!(code, 201, "{body}");
    let v = json(&body);
    assert_eq!(
        (&v["tun_type"], &v["tun_port"], &v["tun_csum"]),
        (&"gue".into(), &6080.into(), &"remcsum".into()),
        "{body}"
    );
    let tun_info = || d.ok("-Ln --tun-info");
    assert!(tun_info().contains("gue:6080:r+c"), "{}", tun_info());
    // Each type with its options, by PATCH (the tunnel stated anew).
    for (patch, shown) in [
        (
            serde_json::json!({"tun_type": "gre", "tun_csum": "csum"}),
            "gre:+c",
        ),
        (
            serde_json::json!({"tun_type": "gue", "tun_port": 7000}),
            "gue:7000:-c",
        ),
        (
            serde_json::json!({"tun_type": "geneve", "tun_csum": "nocsum"}),
            "geneve:-c",
        ),
        (serde_json::json!({"tun_type": "ipip"}), "ipip"),
        (
            serde_json::json!({"tun_type": "gue", "tun_port": 6081, "tun_csum": "csum"}),
            "gue:6081:+c",
        ),
    ] {
        let (code, _, body) = request(http, "PATCH", &rs, &[auth], Some(&patch));
        assert_eq!(code, 200, "{patch}: {body}");
        let listing = tun_info();
        assert!(listing.contains(shown), "{patch}: {shown} in {listing}");
    }
    // Refused as rvsadm refuses them; the listing stays as it was.
    let before = tun_info();
    for (patch, field, words) in [
        (
            serde_json::json!({"tun_type": "ipip", "tun_port": 6080}),
            "tun_port",
            "Illegal 'tun-port' option with the 'ipip' tunnel type",
        ),
        (
            serde_json::json!({"tun_type": "gue"}),
            "tun_port",
            "You need to supply the 'tun-port' option for the 'gue' tunnel type",
        ),
        (
            serde_json::json!({"tun_type": "gre", "tun_csum": "remcsum"}),
            "tun_csum",
            "Illegal 'tun-remcsum' option with the 'gre' tunnel type",
        ),
        (
            serde_json::json!({"tun_type": "gue", "tun_port": 0}),
            "tun_port",
            "illegal tunnel port specified",
        ),
        (
            serde_json::json!({"forward": "masq", "tun_type": "gre"}),
            "forward",
            "Tunnel options conflict with forward method",
        ),
    ] {
        let (code, _, body) = request(http, "PATCH", &rs, &[auth], Some(&patch));
        assert_eq!(code, 400, "{patch}: {body}");
        let v = json(&body);
        assert_eq!(v["field"], field, "{patch}: {body}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(words)),
            "{patch}: {body}"
        );
        assert_eq!(tun_info(), before, "{patch} changed nothing");
    }
    // A real server that is not a tunnel takes no tunnel options.
    let dr = serde_json::json!({"address": "10.9.1.2", "port": 80, "tun_type": "gre"});
    let (code, _, body) = request(http, "POST", reals, &[auth], Some(&dr));
    assert_eq!(code, 400, "{body}");
    assert!(!tun_info().contains("10.9.1.2"), "{}", tun_info());
}

/// A real server of the other address family than its service is legal
/// only behind an encapsulating tunnel, as rvsadm says: POST and PATCH of a
/// real server, a new service's `reals` and `PUT /api/v1/table` answer 400
/// with `field` `address` and rvsadm's words, and `rvsadm -Ln` shows that
/// nothing changed; behind a tunnel the same server is taken.
#[test]
fn api_checks_a_real_servers_family() {
    let (d, http) = start_api(TempDir::new("api-af"), "none", "af-secret", &[]);
    let auth = ("Authorization", "Bearer af-secret");
    let svc = serde_json::json!({"protocol": "tcp", "address": "10.9.0.1", "port": 80});
    let (code, _, body) = request(http, "POST", "/api/v1/services", &[auth], Some(&svc));
    assert_eq!(code, 201, "{body}");
    let reals = "/api/v1/services/tcp-10.9.0.1-80/reals";
    let refused = |(code, _, body): Answer, words: &str| {
        assert_eq!(code, 400, "{body}");
        let v = json(&body);
        assert_eq!(
            (&v["code"], &v["field"]),
            (&"invalid_field".into(), &"address".into()),
            "{body}"
        );
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(words)),
            "{body}"
        );
    };
    // rvsadm's own answer to the same request, for its words.
    let cli = d.adm("-a -t 10.9.0.1:80 -r [2001:db8::2]:80 -m");
    assert!(!cli.status.success());
    let words = "Different address family is allowed only for tunneling servers";
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains(words),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let before = d.ok("-Ln");
    let v6_masq = serde_json::json!({"address": "2001:db8::2", "port": 80, "forward": "masq"});
    refused(request(http, "POST", reals, &[auth], Some(&v6_masq)), words);
    let v6_opt = serde_json::json!({
        "address": "2001:db8::2", "port": 80, "forward": "tunnel", "tun_type": "opt"
    });
    refused(
        request(http, "POST", reals, &[auth], Some(&v6_opt)),
        "not allowed for --tun-type opt",
    );
    let v6_svc = serde_json::json!({
        "protocol": "tcp", "address": "2001:db8::1", "port": 80,
        "reals": [{"address": "10.9.1.1", "port": 80, "forward": "route"}]
    });
    refused(
        request(http, "POST", "/api/v1/services", &[auth], Some(&v6_svc)),
        words,
    );
    let (_, _, table) = request(http, "GET", "/api/v1/table", &[], None);
    let mut table = json(&table);
    table["services"][0]["reals"] = serde_json::json!([v6_masq]);
    refused(
        request(http, "PUT", "/api/v1/table", &[auth], Some(&table)),
        words,
    );
    assert_eq!(d.ok("-Ln"), before, "a refused write changed nothing");
    // Behind a tunnel it is taken, as rvsadm takes it; made masq, refused.
    let v6_tun = serde_json::json!({"address": "2001:db8::2", "port": 80, "forward": "tunnel"});
    let (code, _, body) = request(http, "POST", reals, &[auth], Some(&v6_tun));
    assert_eq!(code, 201, "{body}");
    let listing = d.ok("-Ln");
    assert!(listing.contains("-> [2001:db8::2]:80"), "{listing}");
    let rs = format!("{reals}/2001:db8::2-80");
    let masq = serde_json::json!({"forward": "masq"});
    refused(request(http, "PATCH", &rs, &[auth], Some(&masq)), words);
    assert_eq!(d.ok("-Ln"), listing, "a refused PATCH changed nothing");
}

#[test]
fn rvsd_refuses_public_writes_without_a_token() {
    let out = std::process::Command::new(crate::harness::RVSD)
        .args([
            "--dataplane",
            "none",
            "--socket",
            "/nonexistent/rvsd.sock",
            "--http",
            "0.0.0.0:1",
            "--api-writes",
        ])
        .output()
        .expect("run rvsd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs --api-token-file or --api-client-ca"),
        "{err}"
    );
}

/// Where scripts/install-deps puts schemathesis (PyPI, in its own venv);
/// `RVS_SCHEMATHESIS` overrides.
const SCHEMATHESIS: &str = "/var/cache/rvs-py/bin/schemathesis";

/// schemathesis against the document and a running rvsd: generated
/// requests for every operation (50 examples each, every phase), every
/// check but `positive_data_acceptance` (the ids, addresses and names have
/// a grammar the schema only names; a request it lets through is answered
/// 400 with the field, which is what that check counts as a failure). No
/// 5xx, every answer as documented, every write without the token 401.
/// The sync daemons are left out: a generated interface name could be a
/// real one, and a started daemon would send on it.
#[test]
fn api_schemathesis() {
    let bin = std::env::var("RVS_SCHEMATHESIS").unwrap_or_else(|_| SCHEMATHESIS.to_owned());
    if !std::path::Path::new(&bin).exists() {
        rvs_testbed::skip_or_fail(
            "api_schemathesis",
            format!("{bin} is missing (scripts/install-deps installs it)"),
        );
        return;
    }
    let dir = TempDir::new("api-st");
    let (_d, http) = start_api(dir, "none", "st-secret", &["--api-rate", "1000000"]);
    let http_s = format!("127.0.0.1:{http}");
    // Its caches (.schemathesis, .hypothesis) go in a directory of its own.
    let work = TempDir::new("api-st-work");
    let out = std::process::Command::new(&bin)
        .current_dir(work.path())
        .args([
            "run",
            &format!("http://{http_s}/api/v1/openapi.json"),
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--exclude-path-regex",
            "^/api/v1/sync/",
            "-H",
            "Authorization: Bearer st-secret",
            "--max-examples",
            "50",
            "--workers",
            "1",
            "--request-timeout",
            "10",
        ])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .output()
        .expect("run schemathesis");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis failed:\n{text}");
    let summary = text
        .lines()
        .find(|l| l.contains(" generated, "))
        .unwrap_or_else(|| panic!("no summary in:\n{text}"));
    eprintln!("schemathesis: {}", summary.trim());
    assert!(summary.contains("passed"), "{text}");
}

/// One exchange with the HTTP listener of an rvsd in network namespace
/// `ns`, retried while rvsd is still starting (10 s at most).
fn ns_request(
    ns: &str,
    port: u16,
    method: &'static str,
    path: String,
) -> (u16, Vec<(String, String)>, String) {
    rvs_testbed::netns::in_ns(ns, move || {
        let deadline = std::time::Instant::now() + T;
        let s = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() > deadline => panic!("--http: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        s.set_read_timeout(Some(T)).expect("timeout");
        parse_answer(&exchange(s, method, &path, &[], None).expect("an HTTP exchange"))
    })
}

/// A real server drained through the API gets its weight back from the
/// undrain after rvsd restarts (XDP, a table made without a file, kept
/// beside the pins): the weight it had lives in its own record, which the
/// saved table carries.
#[test]
fn api_drained_weight_survives_a_restart() {
    use crate::harness::Rvsadm as _;
    let test = "api_drain_restart";
    let Some((_bed, _client, host)) = crate::netns::director_bed(test) else {
        return;
    };
    let mut d = crate::restart::Director::new(&host.ns, test, "");
    let http = 8088;
    d.args = ["--http", "127.0.0.1:8088", "--api-writes"]
        .map(str::to_owned)
        .to_vec();
    d.start(false);
    d.ok("-A -t 10.77.0.100:80 -s rr");
    d.ok("-a -t 10.77.0.100:80 -r 10.77.0.20:80 -g -w 7");
    let rs = "/api/v1/services/tcp-10.77.0.100-80/reals/10.77.0.20-80";
    let (code, _, body) = ns_request(&host.ns, http, "POST", format!("{rs}/drain"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["weight"], 0, "{body}");
    // rvsd writes the table a second after a change: let it land.
    let table = d.state.join(format!("{}.table", d.instance));
    let deadline = std::time::Instant::now() + T;
    while !std::fs::read_to_string(&table).is_ok_and(|t| t.contains("\"drained_from\": 7")) {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never written",
            table.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d.stop("-KILL");
    d.start(false);
    let deadline = std::time::Instant::now() + T;
    while !d.ok("-Ln").contains("10.77.0.20:80") {
        assert!(
            std::time::Instant::now() < deadline,
            "the table never came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.ok("-Ln").contains("Route   0"), "{}", d.ok("-Ln"));
    let (code, _, body) = ns_request(&host.ns, http, "POST", format!("{rs}/undrain"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["weight"], 7, "{body}");
    let listing = d.ok("-Ln");
    assert!(listing.contains("Route   7"), "{listing}");
    // Undrained once: a second undrain has nothing to give back.
    let (code, _, body) = ns_request(&host.ns, http, "POST", format!("{rs}/undrain"));
    assert_eq!(code, 409, "{body}");
}
