//! The HTTP endpoint: Prometheus metrics with node_exporter's names, JSON view
//! (QUIC-LB keys as fingerprints).

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::harness::{Rvsd, free_port};

fn get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let (head, body) = resp.split_once("\r\n\r\n").expect("http response");
    (head.to_owned(), body.to_owned())
}

#[test]
fn metrics_and_json_view() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let d = Rvsd::start("http", &["--http", &addr]);
    d.ok("-A -t 10.0.0.1:80 -s rr");
    d.ok("-a -t 10.0.0.1:80 -r 192.168.1.5:8080 -m -w 3");
    d.ok("-A -f 7 -s wlc");
    d.ok("-a -f 7 -r 192.168.1.6 -m");
    let (head, body) = get(port, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    for line in [
        "# TYPE node_ipvs_connections_total counter",
        "node_ipvs_connections_total 0",
        "node_ipvs_incoming_packets_total 0",
        "node_ipvs_backend_weight{local_address=\"10.0.0.1\",local_port=\"80\",remote_address=\"192.168.1.5\",remote_port=\"8080\",proto=\"TCP\",local_mark=\"\"} 3",
        "node_ipvs_backend_connections_active{local_address=\"10.0.0.1\",local_port=\"80\",remote_address=\"192.168.1.5\",remote_port=\"8080\",proto=\"TCP\",local_mark=\"\"} 0",
        "node_ipvs_backend_weight{local_address=\"\",local_port=\"0\",remote_address=\"192.168.1.6\",remote_port=\"0\",proto=\"FWM\",local_mark=\"7\"} 1",
        "rvs_services 2",
        "rvs_conn_table_evictions_total 0",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in\n{body}"
        );
    }
    let (head, body) = get(port, "/api/v1/state");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let services = v["services"].as_array().expect("services");
    assert_eq!(services.len(), 2);
    assert!(body.contains("\"192.168.1.5\""), "{body}");
    let (head, _) = get(port, "/healthz");
    // A QUIC-LB key is a fingerprint in the JSON view; `-S` keeps it.
    let key = "8f95f09245765f80256934e50c66207f";
    d.ok(&format!(
        "-A -u 10.0.0.1:443 -s rr --quic-lb cr=1,sid=3,nonce=13,key={key}"
    ));
    let (_, body) = get(port, "/api/v1/state");
    assert!(!body.contains(key), "the key in /api/v1/state: {body}");
    assert!(body.contains("cr=1,sid=3,nonce=13,key=fp:"), "{body}");
    assert!(d.ok("-Sn").contains(key), "-S saves the key");
    assert!(head.starts_with("HTTP/1.1 200"));
    let (head, _) = get(port, "/nope");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}
