//! TLS for `SSL_GET` (rustls with the ring provider).
//!
//! keepalived never verifies an SSL_GET peer's certificate, so the default
//! client accepts any certificate (the handshake itself, including the
//! server's signature over it, must still succeed). With
//! [`TlsSpec::verify_ca`] set, the chain and the name are verified against
//! that CA file instead. Client configurations are built once and cached:
//! one for "no verification", one per CA file (rebuilt when the file's
//! modification time changes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{Failure, ProbeTarget, TlsSpec};

fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Accepts any certificate; signatures are still checked with the
/// provider's algorithms (keepalived's SSL_VERIFY_NONE behaviour).
#[derive(Debug)]
struct AcceptAnyCert(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

fn no_verify_config() -> Result<Arc<ClientConfig>, Failure> {
    static C: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(c) = C.get() {
        return Ok(c.clone());
    }
    let p = provider();
    let algs = p.signature_verification_algorithms;
    let cfg = ClientConfig::builder_with_provider(p)
        .with_safe_default_protocol_versions()
        .map_err(|e| Failure::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(algs)))
        .with_no_client_auth();
    Ok(C.get_or_init(|| Arc::new(cfg)).clone())
}

type CaCache = Mutex<HashMap<PathBuf, (Option<SystemTime>, Arc<ClientConfig>)>>;

fn verifying_config(ca: &Path) -> Result<Arc<ClientConfig>, Failure> {
    static CACHE: OnceLock<CaCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mtime = std::fs::metadata(ca).and_then(|m| m.modified()).ok();
    if let Ok(map) = cache.lock()
        && let Some((t, cfg)) = map.get(ca)
        && *t == mtime
    {
        return Ok(cfg.clone());
    }
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .map_err(|e| Failure::Tls(format!("CA file {}: {e}", ca.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| Failure::Tls(format!("CA file {}: {e}", ca.display())))?;
        roots
            .add(cert)
            .map_err(|e| Failure::Tls(format!("CA file {}: {e}", ca.display())))?;
    }
    let cfg = Arc::new(
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Failure::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    if let Ok(mut map) = cache.lock() {
        map.insert(ca.to_path_buf(), (mtime, cfg.clone()));
    }
    Ok(cfg)
}

/// Runs the TLS handshake over `tcp`, finishing by `deadline`.
pub(crate) async fn connect(
    tcp: TcpStream,
    spec: &TlsSpec,
    target: &ProbeTarget,
    deadline: tokio::time::Instant,
) -> Result<TlsStream<TcpStream>, Failure> {
    let cfg = match &spec.verify_ca {
        None => no_verify_config()?,
        Some(ca) => verifying_config(ca)?,
    };
    let name: ServerName<'static> = match &spec.sni {
        Some(n) => ServerName::try_from(n.clone())
            .map_err(|e| Failure::Tls(format!("server name {n:?}: {e}")))?,
        None => ServerName::IpAddress(target.addr.ip().into()),
    };
    let connector = TlsConnector::from(cfg);
    match tokio::time::timeout_at(deadline, connector.connect(name, tcp)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Failure::Tls(e.to_string())),
        Err(_) => Err(Failure::Timeout),
    }
}
