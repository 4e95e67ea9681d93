//! HTTP_GET and SSL_GET against a tiny HTTP server (plain and rustls).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use rvs_check::probe::http::hex;
use rvs_check::probe::{Failure, HttpVersion, ProbeSpec, TlsSpec, UrlSpec, run};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use super::{TempDir, serve_tcp, target};

/// What the server does after reading a request.
#[derive(Clone)]
enum Reply {
    /// Writes these bytes, then closes.
    Bytes(Vec<u8>),
    /// Writes these pieces with a pause between them, then closes.
    Slow(Vec<Vec<u8>>, Duration),
    /// Never answers (keeps the connection up to 10 s).
    Silent,
    /// Writes these bytes at once without reading (a server speaking first,
    /// or answering garbage with an error page), then closes.
    Immediate(Vec<u8>),
}

/// One received request: its text and the TLS SNI (if TLS).
type Seen = (String, Option<String>);

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, reply: Reply) -> Option<String> {
    if let Reply::Immediate(bytes) = &reply {
        let _ = s.write_all(bytes).await;
        let _ = s.shutdown().await;
        return Some(String::new());
    }
    let mut req = Vec::new();
    let mut b = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16384 {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await {
            Ok(Ok(n)) if n > 0 => req.extend_from_slice(&b[..n]),
            _ => return None,
        }
    }
    match reply {
        Reply::Bytes(bytes) => {
            let _ = s.write_all(&bytes).await;
        }
        Reply::Slow(parts, pause) => {
            for p in parts {
                let _ = s.write_all(&p).await;
                let _ = s.flush().await;
                tokio::time::sleep(pause).await;
            }
        }
        Reply::Silent => tokio::time::sleep(Duration::from_secs(10)).await,
        Reply::Immediate(_) => {}
    }
    let _ = s.shutdown().await;
    Some(String::from_utf8_lossy(&req).into_owned())
}

/// Serves every connection with `reply`; requests are reported on the channel.
async fn serve(
    tls: Option<TlsAcceptor>,
    reply: Reply,
) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    serve_tcp(move |s, tx| {
        let reply = reply.clone();
        let tls = tls.clone();
        async move {
            match tls {
                None => {
                    if let Some(r) = handle(s, reply).await {
                        let _ = tx.send((r, None));
                    }
                }
                Some(acc) => {
                    let Ok(Ok(t)) =
                        tokio::time::timeout(Duration::from_secs(5), acc.accept(s)).await
                    else {
                        return;
                    };
                    let sni = t.get_ref().1.server_name().map(str::to_owned);
                    if let Some(r) = handle(t, reply).await {
                        let _ = tx.send((r, sni));
                    }
                }
            }
        }
    })
    .await
}

fn response(status: &str, body: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v
}

fn md5hex(b: &[u8]) -> String {
    hex(&Md5::digest(b))
}

fn url(path: &str, digest: Option<String>) -> UrlSpec {
    UrlSpec {
        path: path.into(),
        status: vec![200..=299],
        digest,
        virtualhost: None,
    }
}

fn http(urls: Vec<UrlSpec>, vhost: Option<&str>, v: HttpVersion) -> ProbeSpec {
    ProbeSpec::Http {
        tls: None,
        urls,
        virtualhost: vhost.map(str::to_owned),
        http_protocol: v,
    }
}

const BODY: &[u8] = b"<html>healthy</html>\n";

/// The outcome of `spec` against `addr` (1 s timeout).
async fn check(spec: &ProbeSpec, addr: SocketAddr) -> Result<(), Failure> {
    run(spec, &target(addr, 1000)).await.outcome
}

#[tokio::test]
async fn http_ok_with_digest_and_host_header() {
    let (addr, mut rx) = serve(None, Reply::Bytes(response("200 OK", BODY))).await;
    let spec = http(
        vec![url("/health", Some(md5hex(BODY).to_uppercase()))],
        None,
        HttpVersion::Http10,
    );
    assert_eq!(check(&spec, addr).await, Ok(()));
    let (req, _) = rx.recv().await.unwrap();
    assert!(req.starts_with("GET /health HTTP/1.0\r\n"), "{req}");
    assert!(req.contains(&format!("Host: {addr}\r\n")), "{req}");
    assert!(!req.contains("Connection:"), "{req}");
}

#[tokio::test]
async fn http_status_503_fails() {
    let (addr, _rx) = serve(
        None,
        Reply::Bytes(response("503 Service Unavailable", b"busy")),
    )
    .await;
    let outcome = check(&http(vec![url("/", None)], None, HttpVersion::Http11), addr).await;
    assert_eq!(outcome, Err(Failure::Status(503)));
    assert_eq!(outcome.unwrap_err().to_string(), "status 503");
}

#[tokio::test]
async fn http_status_ranges() {
    let (addr, _rx) = serve(None, Reply::Bytes(response("404 Not Found", b""))).await;
    let mut u = url("/", None);
    u.status = vec![200..=200, 400..=499];
    assert_eq!(
        check(&http(vec![u], None, HttpVersion::Http10), addr).await,
        Ok(())
    );
}

#[tokio::test]
async fn http_digest_mismatch() {
    let (addr, _rx) = serve(None, Reply::Bytes(response("200 OK", b"changed page"))).await;
    let spec = http(
        vec![url("/", Some(md5hex(BODY)))],
        None,
        HttpVersion::Http10,
    );
    assert_eq!(check(&spec, addr).await, Err(Failure::DigestMismatch));
}

#[tokio::test]
async fn http_chunked_body_digest_and_vhost_1_1() {
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7;ext=1\r\n<html>h\r\nE\r\nealthy</html>\n\r\n0\r\nX-Trailer: 1\r\n\r\n".to_vec();
    let (addr, mut rx) = serve(None, Reply::Bytes(chunked)).await;
    let mut u = url("/c", Some(md5hex(BODY)));
    u.virtualhost = Some("url.example".into());
    let spec = http(vec![u], Some("checker.example"), HttpVersion::Http11);
    assert_eq!(check(&spec, addr).await, Ok(()));
    let (req, _) = rx.recv().await.unwrap();
    assert!(req.starts_with("GET /c HTTP/1.1\r\n"), "{req}");
    assert!(req.contains("Connection: close\r\n"), "{req}");
    // The URL's virtualhost wins over the checker's.
    assert!(req.contains("Host: url.example\r\n"), "{req}");
}

#[tokio::test]
async fn http_body_until_close_and_every_url() {
    // No Content-Length: the body ends when the server closes.
    let mut raw = b"HTTP/1.0 200 OK\r\n\r\n".to_vec();
    raw.extend_from_slice(BODY);
    let (addr, mut rx) = serve(None, Reply::Bytes(raw)).await;
    let spec = http(
        vec![url("/a", Some(md5hex(BODY))), url("/b", None)],
        Some("vh.example"),
        HttpVersion::Http10Close,
    );
    assert_eq!(check(&spec, addr).await, Ok(()));
    let (a, _) = rx.recv().await.unwrap();
    let (b, _) = rx.recv().await.unwrap();
    let mut paths = [a, b];
    paths.sort();
    assert!(paths[0].starts_with("GET /a HTTP/1.0\r\n"));
    assert!(paths[0].contains("Connection: close\r\nHost: vh.example\r\n"));
    assert!(paths[1].starts_with("GET /b "));
    // One failing URL fails the check.
    let spec = http(
        vec![url("/a", None), url("/b", Some(md5hex(b"other")))],
        None,
        HttpVersion::Http10,
    );
    assert_eq!(check(&spec, addr).await, Err(Failure::DigestMismatch));
}

#[tokio::test]
async fn http_timeout_when_server_never_answers() {
    let (addr, _rx) = serve(None, Reply::Silent).await;
    let r = run(
        &http(vec![url("/", None)], None, HttpVersion::Http10),
        &target(addr, 300),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency < Duration::from_secs(2));
}

#[tokio::test]
async fn http_timeout_is_per_read_as_keepalived() {
    // Three pieces 200 ms apart, timeout 350 ms: the whole response takes
    // longer than the timeout, but no single read waits that long.
    let mut body = response("200 OK", BODY);
    let tail = body.split_off(30);
    let mid = body.split_off(10);
    let parts = vec![body, mid, tail];
    let (addr, _rx) = serve(None, Reply::Slow(parts, Duration::from_millis(200))).await;
    let spec = http(
        vec![url("/", Some(md5hex(BODY)))],
        None,
        HttpVersion::Http10,
    );
    let r = run(&spec, &target(addr, 350)).await;
    assert_eq!(r.outcome, Ok(()));
    assert!(r.latency > Duration::from_millis(350), "{:?}", r.latency);
}

#[tokio::test]
async fn http_refused_and_garbage() {
    let (addr, _rx) = serve(None, Reply::Bytes(b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec())).await;
    let r = run(
        &http(vec![url("/", None)], None, HttpVersion::Http10),
        &target(addr, 1000),
    )
    .await;
    assert!(matches!(r.outcome, Err(Failure::BadResponse(_))), "{r:?}");
    let (addr, _rx) = serve(None, Reply::Bytes(Vec::new())).await;
    assert_eq!(
        check(&http(vec![url("/", None)], None, HttpVersion::Http10), addr).await,
        Err(Failure::BadResponse("no data".into()))
    );
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let r = run(
        &http(vec![url("/", None)], None, HttpVersion::Http10),
        &target(dead, 1000),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::Refused));
}

#[tokio::test]
async fn http_no_urls_passes_without_connecting() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let r = run(
        &http(vec![], None, HttpVersion::Http10),
        &target(dead, 1000),
    )
    .await;
    assert_eq!(r.outcome, Ok(()));
}

// ---- SSL_GET ----

struct Cert {
    pem: String,
    acceptor: TlsAcceptor,
}

fn self_signed(names: &[&str]) -> Cert {
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    let der = ck.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    Cert {
        pem: ck.cert.pem(),
        acceptor: TlsAcceptor::from(Arc::new(cfg)),
    }
}

fn ssl(urls: Vec<UrlSpec>, tls: TlsSpec, vhost: Option<&str>) -> ProbeSpec {
    ProbeSpec::Http {
        tls: Some(tls),
        urls,
        virtualhost: vhost.map(str::to_owned),
        http_protocol: HttpVersion::Http11,
    }
}

/// The outcome of an SSL_GET of `/` against `addr` with `tls` (2 s timeout).
async fn ssl_root(addr: SocketAddr, tls: TlsSpec) -> Result<(), Failure> {
    run(&ssl(vec![url("/", None)], tls, None), &target(addr, 2000))
        .await
        .outcome
}

/// TLS to the server name `sni`, verified against the CA file `ca`.
fn verified(sni: &str, ca: PathBuf) -> TlsSpec {
    TlsSpec {
        sni: Some(sni.into()),
        verify_ca: Some(ca),
    }
}

#[tokio::test]
async fn ssl_get_self_signed_accepted_with_sni() {
    let cert = self_signed(&["backend.example"]);
    let (addr, mut rx) = serve(Some(cert.acceptor), Reply::Bytes(response("200 OK", BODY))).await;
    let tls = TlsSpec {
        sni: Some("www.example".into()),
        verify_ca: None,
    };
    let spec = ssl(vec![url("/", Some(md5hex(BODY)))], tls, Some("www.example"));
    let r = run(&spec, &target(addr, 2000)).await;
    assert_eq!(r.outcome, Ok(()));
    let (req, sni) = rx.recv().await.unwrap();
    assert_eq!(sni.as_deref(), Some("www.example"));
    assert!(req.contains("Host: www.example\r\n"));
    // Without SNI the handshake still works (no server_name extension).
    assert_eq!(ssl_root(addr, TlsSpec::default()).await, Ok(()));
    let (_, sni) = rx.recv().await.unwrap();
    assert_eq!(sni, None);
}

#[tokio::test]
async fn ssl_get_verification_when_asked() {
    let cert = self_signed(&["backend.example"]);
    let dir = TempDir::new("ca");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert.pem).unwrap();
    let (addr, _rx) = serve(Some(cert.acceptor), Reply::Bytes(response("200 OK", BODY))).await;
    let ok = verified("backend.example", ca.clone());
    assert_eq!(ssl_root(addr, ok).await, Ok(()));
    let wrong_name = verified("other.example", ca);
    let r = ssl_root(addr, wrong_name).await;
    assert!(matches!(r, Err(Failure::Tls(_))), "{r:?}");
    // An untrusted CA fails too.
    let other = self_signed(&["backend.example"]);
    let ca2 = dir.path().join("other.pem");
    std::fs::write(&ca2, &other.pem).unwrap();
    let r = ssl_root(addr, verified("backend.example", ca2)).await;
    assert!(matches!(r, Err(Failure::Tls(_))), "{r:?}");
}

#[tokio::test]
async fn ssl_get_handshake_failure_against_plain_http() {
    let page = response("400 Bad Request", b"plain HTTP here");
    let (addr, _rx) = serve(None, Reply::Immediate(page)).await;
    let r = ssl_root(addr, TlsSpec::default()).await;
    assert!(matches!(r, Err(Failure::Tls(_))), "{r:?}");
    assert_eq!(r.unwrap_err().kind(), "tls");
}

#[tokio::test]
async fn ssl_get_status_through_tls() {
    let cert = self_signed(&["x.example"]);
    let (addr, _rx) = serve(Some(cert.acceptor), Reply::Bytes(response("503 Down", b""))).await;
    assert_eq!(
        ssl_root(addr, TlsSpec::default()).await,
        Err(Failure::Status(503))
    );
}

#[tokio::test]
async fn http_ipv6_host_header_in_brackets() {
    let Ok(l) = std::net::TcpListener::bind("[::1]:0") else {
        rvs_testbed::skip_or_fail("http_ipv6_host_header_in_brackets", "no IPv6 loopback");
        return;
    };
    drop(l);
    let l = TcpListener::bind("[::1]:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if let Ok((s, _)) = l.accept().await
            && let Some(r) = handle(s, Reply::Bytes(response("200 OK", BODY))).await
        {
            let _ = tx.send(r);
        }
    });
    assert_eq!(
        check(&http(vec![url("/", None)], None, HttpVersion::Http10), addr).await,
        Ok(())
    );
    let req = rx.recv().await.unwrap();
    assert!(
        req.contains(&format!("Host: [::1]:{}\r\n", addr.port())),
        "{req}"
    );
    assert!(req.contains("User-Agent: KeepAliveClient\r\n"), "{req}");
}

#[tokio::test]
async fn ssl_get_body_until_close_without_close_notify() {
    let cert = self_signed(&["x.example"]);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acceptor = cert.acceptor;
    tokio::spawn(async move {
        for _ in 0..2 {
            let Ok((s, _)) = l.accept().await else { return };
            let Ok(mut t) = acceptor.accept(s).await else {
                return;
            };
            let mut b = [0u8; 1024];
            let _ = t.read(&mut b).await;
            let mut raw = b"HTTP/1.0 200 OK\r\n\r\n".to_vec();
            raw.extend_from_slice(BODY);
            let _ = t.write_all(&raw).await;
            let _ = t.flush().await;
            // Close the TCP connection without a TLS close_notify.
            let (tcp, _) = t.into_inner();
            drop(tcp);
        }
    });
    let spec = ssl(vec![url("/", Some(md5hex(BODY)))], TlsSpec::default(), None);
    let r = run(&spec, &target(addr, 2000)).await;
    assert_eq!(r.outcome, Ok(()));
    let spec = ssl(vec![url("/", Some(md5hex(b"x")))], TlsSpec::default(), None);
    let r = run(&spec, &target(addr, 2000)).await;
    assert_eq!(r.outcome, Err(Failure::DigestMismatch));
}

#[tokio::test]
async fn ssl_get_connect_and_handshake_share_the_timeout() {
    // Accepts TCP, never speaks TLS.
    let (addr, _rx) = serve(None, Reply::Silent).await;
    let r = run(
        &ssl(vec![url("/", None)], TlsSpec::default(), None),
        &target(addr, 400),
    )
    .await;
    assert_eq!(r.outcome, Err(Failure::Timeout));
    assert!(r.latency >= Duration::from_millis(400), "{:?}", r.latency);
    assert!(r.latency < Duration::from_millis(700), "{:?}", r.latency);
}
