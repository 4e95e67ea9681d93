//! The sans-IO parts: the name a certificate goes by, and the start-up
//! errors of each TLS option (certificates made with rcgen).

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

use super::*;
use crate::api::ApiOptions;

fn cert(cn: Option<&str>, sans: &[&str]) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("params");
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "rvs");
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    (params.self_signed(&key).expect("self-signed"), key)
}

#[test]
fn a_certificate_goes_by_its_cn_else_its_first_san() {
    let name = |cn, sans| identity(cert(cn, sans).0.der());
    assert_eq!(
        name(Some("alice"), &["alice.example"]).as_deref(),
        Some("CN=alice")
    );
    assert_eq!(
        name(None, &["bob.example", "other.example"]).as_deref(),
        Some("DNS=bob.example")
    );
    assert!(name(None, &[]).is_some_and(|n| n.starts_with("serial=")));
    // A name cannot break the log line, nor run on.
    assert_eq!(
        name(Some("eve\nwho=token"), &[]).as_deref(),
        Some("CN=eve?who=token")
    );
    let long = "x".repeat(300);
    assert_eq!(
        name(Some(&long), &[]).map(|n| n.chars().count()),
        Some(MAX_IDENTITY)
    );
    assert_eq!(
        identity(&CertificateDer::from(vec![0x30, 0x03, 1, 2])),
        None
    );
}

#[test]
fn the_name_reader_never_panics_on_a_cut_or_bent_certificate() {
    let (c, _) = cert(Some("alice"), &[]);
    let der = c.der().to_vec();
    assert_eq!(common_name(&der).as_deref(), Some("alice"));
    for cut in 0..der.len() {
        let _ = common_name(&der[..cut]);
        let mut bent = der.clone();
        bent[cut] ^= 0xff;
        let _ = common_name(&bent);
    }
}

/// A directory of PEM files for the options.
struct Files(std::path::PathBuf);

impl Files {
    fn new(tag: &str) -> Files {
        let dir = std::env::temp_dir().join(format!("rvs-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Files(dir)
    }

    fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options(cert: &Path, key: &Path, ca: Option<&Path>) -> ApiOptions {
    ApiOptions {
        tls_cert: Some(cert.to_owned()),
        tls_key: Some(key.to_owned()),
        client_ca: ca.map(Path::to_owned),
        ..ApiOptions::default()
    }
}

#[test]
fn options_go_together() {
    let only_cert = ApiOptions {
        tls_cert: Some("/c.pem".into()),
        ..ApiOptions::default()
    };
    let e = server_config(&only_cert).unwrap_err().to_string();
    assert!(e.contains("--http-tls-cert needs --http-tls-key"), "{e}");
    let only_key = ApiOptions {
        tls_key: Some("/k.pem".into()),
        ..ApiOptions::default()
    };
    let e = server_config(&only_key).unwrap_err().to_string();
    assert!(e.contains("--http-tls-key needs --http-tls-cert"), "{e}");
    let only_ca = ApiOptions {
        client_ca: Some("/ca.pem".into()),
        ..ApiOptions::default()
    };
    let e = server_config(&only_ca).unwrap_err().to_string();
    assert!(e.contains("--api-client-ca needs --http-tls-cert"), "{e}");
    assert!(server_config(&ApiOptions::default()).unwrap().is_none());
}

#[test]
fn bad_files_are_start_up_errors_naming_them() {
    let f = Files::new("files");
    let (server, server_key) = cert(Some("rvsd"), &["localhost"]);
    let (other, _) = cert(Some("other"), &[]);
    let cert_p = f.write("server.pem", &server.pem());
    let key_p = f.write("server.key", &server_key.serialize_pem());
    let ca_p = f.write("ca.pem", &other.pem());
    let junk = f.write("junk.pem", "not a pem file\n");
    let broken = f.write(
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    );
    let missing = f.0.join("missing.pem");

    // Good: with and without a client CA.
    assert!(
        server_config(&options(&cert_p, &key_p, None))
            .unwrap()
            .is_some()
    );
    let config = server_config(&options(&cert_p, &key_p, Some(&ca_p)))
        .unwrap()
        .expect("a config");
    assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);

    let err = |o: ApiOptions| server_config(&o).unwrap_err().to_string();
    let e = err(options(&missing, &key_p, None));
    assert!(
        e.starts_with("--http-tls-cert ") && e.contains("missing.pem"),
        "{e}"
    );
    let e = err(options(&junk, &key_p, None));
    assert!(
        e.contains("--http-tls-cert") && e.contains("junk.pem") && e.contains("no CERTIFICATE"),
        "{e}"
    );
    let e = err(options(&broken, &key_p, None));
    assert!(e.contains("broken.pem") && e.contains("bad PEM"), "{e}");
    let e = err(options(&cert_p, &junk, None));
    assert!(
        e.contains("--http-tls-key") && e.contains("junk.pem") && e.contains("no private key"),
        "{e}"
    );
    let e = err(options(&cert_p, &missing, None));
    assert!(
        e.starts_with("--http-tls-key ") && e.contains("missing.pem"),
        "{e}"
    );
    // A key of another certificate.
    let (_, stranger) = cert(Some("x"), &[]);
    let stranger_p = f.write("stranger.key", &stranger.serialize_pem());
    let e = err(options(&cert_p, &stranger_p, None));
    assert!(
        e.contains("does not match") && e.contains("stranger.key") && e.contains("server.pem"),
        "{e}"
    );
    let e = err(options(&cert_p, &key_p, Some(&junk)));
    assert!(
        e.contains("--api-client-ca") && e.contains("junk.pem"),
        "{e}"
    );
    let e = err(options(&cert_p, &key_p, Some(&missing)));
    assert!(e.starts_with("--api-client-ca "), "{e}");
}
