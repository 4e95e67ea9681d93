//! REST API v1 over HTTPS with client certificates (`--http-tls-cert`,
//! `--http-tls-key`, `--api-client-ca`), against a running rvsd: a test CA,
//! a server certificate and two client certificates made with rcgen, a
//! rustls client. A certificate the CA signed writes (the change shows in
//! `rvsadm -Ln`, the audit line names its CN); none gets 401; a
//! self-signed one fails the TLS handshake; the token still works over
//! TLS; reads follow `--api-reads`; bad TLS files stop the start.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::api::{Answer, exchange, json, parse_answer};
use crate::harness::{Launch, RVSD, Rvsd, TempDir, free_port};

const T: Duration = Duration::from_secs(10);

/// The PEM files of one test PKI.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    /// A client certificate the CA signed (CN `alice-admin`).
    good: (PathBuf, PathBuf),
    /// A self-signed client certificate (CN `mallory`).
    rogue: (PathBuf, PathBuf),
}

fn params(cn: &str, sans: Vec<SanType>) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.subject_alt_names = sans;
    p
}

impl Pki {
    fn new(dir: &TempDir) -> Pki {
        let mut ca = params("rvs test CA", Vec::new());
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let signed = |name: &str, p: CertificateParams| {
            let key = KeyPair::generate().expect("key");
            let cert = p.signed_by(&key, &ca).expect("signed certificate");
            (
                dir.write(&format!("{name}.pem"), &cert.pem()),
                dir.write(&format!("{name}.key"), &key.serialize_pem()),
            )
        };
        let localhost = vec![
            SanType::DnsName("localhost".try_into().expect("a DNS name")),
            SanType::IpAddress([127, 0, 0, 1].into()),
        ];
        let (server_cert, server_key) = signed("server", params("rvsd", localhost));
        let good = signed("alice", params("alice-admin", Vec::new()));
        let rogue_key = KeyPair::generate().expect("key");
        let rogue = params("mallory", Vec::new())
            .self_signed(&rogue_key)
            .expect("self-signed");
        Pki {
            ca: dir.write("ca.pem", &ca.pem()),
            server_cert,
            server_key,
            good,
            rogue: (
                dir.write("mallory.pem", &rogue.pem()),
                dir.write("mallory.key", &rogue_key.serialize_pem()),
            ),
        }
    }

    /// rvsd's TLS arguments.
    fn args(&self) -> Vec<String> {
        let s = |p: &PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--http-tls-cert".into(),
            s(&self.server_cert),
            "--http-tls-key".into(),
            s(&self.server_key),
            "--api-client-ca".into(),
            s(&self.ca),
        ]
    }

    /// A rustls client trusting the CA, with the client certificate
    /// `client` (PEM files) if given.
    fn client(&self, client: Option<&(PathBuf, PathBuf)>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca).expect("CA PEM") {
            roots.add(c.expect("CA certificate")).expect("a root");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots);
        Arc::new(match client {
            None => b.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .expect("client PEM")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("client certificate");
                let key = PrivateKeyDer::from_pem_file(key).expect("client key");
                b.with_client_auth_cert(chain, key).expect("client auth")
            }
        })
    }
}

/// One HTTPS exchange with `config`: status, headers, body, or the error
/// the connection ended with (a refused handshake).
fn https(
    config: &Arc<rustls::ClientConfig>,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&serde_json::Value>,
) -> Result<Answer, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to --http");
    tcp.set_read_timeout(Some(T)).expect("timeout");
    let name = ServerName::try_from("localhost").expect("server name");
    let conn = rustls::ClientConnection::new(config.clone(), name).expect("client connection");
    let tls = rustls::StreamOwned::new(conn, tcp);
    exchange(tls, method, path, headers, body)
        .map(|resp| parse_answer(&resp))
        .map_err(|e| e.to_string())
}

/// rvsd (proxy plane, writes on, 127.0.0.1) with `args`, its stderr (at
/// info, so with the audit lines) in `DIR/rvsd.log`: the daemon, its HTTP
/// port and the log's path.
fn start(dir: TempDir, args: &[String]) -> (Rvsd, u16, PathBuf) {
    let http = free_port();
    let log = dir.path().join("rvsd.log");
    let mut cmd = Command::new(RVSD);
    cmd.args([
        "--dataplane",
        "proxy",
        "--log-level",
        "info",
        "--api-writes",
    ])
    .args(["--http", &format!("127.0.0.1:{http}")])
    .args(args)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log file"));
    (Rvsd::spawn_in(dir, cmd), http, log)
}

/// A log without its ANSI colour sequences.
fn plain_text(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ parameters, up to the final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn api_tls_client_certificates() {
    let dir = TempDir::new("api-tls");
    let pki = Pki::new(&dir);
    let token = dir.write("token", "tls-secret\n");
    let mut args = pki.args();
    args.extend(["--api-token-file".into(), token.to_string_lossy().into()]);
    let (d, http, log) = start(dir, &args);
    let alice = pki.client(Some(&pki.good));
    let nobody = pki.client(None);
    let mallory = pki.client(Some(&pki.rogue));

    // Plain HTTP gets no answer from the HTTPS endpoint.
    let plain = TcpStream::connect(("127.0.0.1", http)).expect("connect");
    plain.set_read_timeout(Some(T)).expect("timeout");
    let answer = exchange(plain, "GET", "/healthz", &[], None).unwrap_or_default();
    assert!(!answer.starts_with("HTTP/"), "{answer}");

    // Reads are open (--api-reads open): without a certificate too.
    let (code, _, body) = https(&nobody, http, "GET", "/api/v1/services", &[], None)
        .expect("a read without a certificate");
    assert_eq!(code, 200, "{body}");

    // A write without a certificate or the token: 401, nothing changed.
    let vport = free_port();
    let svc = serde_json::json!({
        "protocol": "tcp", "address": "127.0.0.1", "port": vport, "scheduler": "rr"
    });
    let (code, _, body) = https(&nobody, http, "POST", "/api/v1/services", &[], Some(&svc))
        .expect("an answer without a certificate");
    assert_eq!(code, 401, "{body}");
    assert!(
        json(&body)["message"]
            .as_str()
            .is_some_and(|m| m.contains("--api-client-ca"))
    );

    // A self-signed certificate: rvsd fails the handshake (it alerts
    // UnknownCA and closes; the client sees the alert or, when its request
    // crossed the close, a broken pipe or a reset): no HTTP answer, and an
    // audit line saying why.
    let refused = https(&mallory, http, "POST", "/api/v1/services", &[], Some(&svc));
    let err = refused.expect_err("a self-signed client certificate must be refused");
    eprintln!("the self-signed client's error: {err}");
    assert!(!d.ok("-Ln").contains(&format!("127.0.0.1:{vport}")));

    // rvsadm shows the service with this scheduler.
    let shows = |scheduler: &str| {
        let listing = d.ok("-Ln");
        let line = format!("TCP  127.0.0.1:{vport} {scheduler}");
        assert!(listing.contains(&line), "{listing}");
    };

    // The CA's certificate: the service is created and rvsadm shows it.
    let (code, _, body) = https(&alice, http, "POST", "/api/v1/services", &[], Some(&svc))
        .expect("a write with the CA's certificate");
    assert_eq!(code, 201, "{body}");
    shows("rr");

    // The token still works over TLS, without a certificate.
    let id = format!("tcp-127.0.0.1-{vport}");
    let patch = serde_json::json!({"scheduler": "wlc"});
    let auth = ("Authorization", "Bearer tls-secret");
    let path = format!("/api/v1/services/{id}");
    let (code, _, body) = https(&nobody, http, "PATCH", &path, &[auth], Some(&patch))
        .expect("a write with the token");
    assert_eq!(code, 200, "{body}");
    shows("wlc");

    // The audit lines name who wrote: the certificate's CN, the token,
    // nobody for the 401.
    let audit = plain_text(&std::fs::read_to_string(&log).expect("rvsd's log"));
    let writes: Vec<&str> = audit.lines().filter(|l| l.contains("API write")).collect();
    let line = |status: &str, who: &str| {
        writes.iter().any(|l| {
            l.contains(&format!("status={status}")) && l.contains(&format!("who=\"{who}\""))
        })
    };
    assert!(line("201", "cert:CN=alice-admin"), "{writes:#?}");
    assert!(line("200", "token"), "{writes:#?}");
    assert!(line("401", "unauthenticated"), "{writes:#?}");
    assert!(!audit.contains("mallory"), "{audit}");
    assert!(
        audit
            .lines()
            .any(|l| l.contains("client certificate refused") && l.contains("UnknownIssuer")),
        "{audit}"
    );
}

#[test]
fn api_tls_reads_need_a_certificate_under_api_reads_token() {
    let dir = TempDir::new("api-tls-reads");
    let pki = Pki::new(&dir);
    let mut args = pki.args();
    args.extend(["--api-reads".into(), "token".into()]);
    let (_d, http, _) = start(dir, &args);
    let alice = pki.client(Some(&pki.good));
    let nobody = pki.client(None);
    for path in ["/api/v1/state", "/"] {
        let (code, _, body) = https(&nobody, http, "GET", path, &[], None).expect("an answer");
        assert_eq!(code, 401, "{path}: {body}");
        let (code, _, body) = https(&alice, http, "GET", path, &[], None).expect("an answer");
        assert_eq!(code, 200, "{path}: {body}");
    }
    // The scrape stays open.
    let (code, _, _) = https(&nobody, http, "GET", "/metrics", &[], None).expect("an answer");
    assert_eq!(code, 200);
}

#[test]
fn rvsd_refuses_bad_tls_files_naming_them() {
    let dir = TempDir::new("api-tls-bad");
    let pki = Pki::new(&dir);
    let s = |p: &PathBuf| p.to_string_lossy().into_owned();
    let http = format!("127.0.0.1:{}", free_port());
    let refusal = |tls: [&str; 4]| {
        Launch::new("api-tls-refused")
            .args(["--http", &http, "--api-writes"])
            .args(tls)
            .refused()
    };
    // The key of another certificate.
    let (alice_key, server) = (s(&pki.good.1), s(&pki.server_cert));
    let err = refusal(["--http-tls-cert", &server, "--http-tls-key", &alice_key]);
    assert!(
        err.contains("does not match") && err.contains("alice.key") && err.contains("server.pem"),
        "{err}"
    );
    // A client CA that is not there.
    let missing = s(&dir.path().join("missing-ca.pem"));
    let err = Launch::new("api-tls-refused")
        .args(["--http", &http, "--api-writes", "--api-client-ca", &missing])
        .args([
            "--http-tls-cert",
            &server,
            "--http-tls-key",
            &s(&pki.server_key),
        ])
        .refused();
    assert!(
        err.contains("--api-client-ca") && err.contains("missing-ca.pem"),
        "{err}"
    );
    // A client CA without TLS: the command line is refused.
    let err = Launch::new("api-tls-refused")
        .args([
            "--http",
            &http,
            "--api-writes",
            "--api-client-ca",
            &s(&pki.ca),
        ])
        .refused();
    assert!(err.contains("--http-tls-cert"), "{err}");
}
