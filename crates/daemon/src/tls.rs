//! HTTPS on the HTTP endpoint (`--http-tls-cert`, `--http-tls-key`) and
//! client certificates for the API (`--api-client-ca`): the rustls server
//! configuration, read from PEM files once at start (ring provider; a
//! SIGHUP does not reload them), the listener that hands axum finished TLS
//! connections with the peer's verified identity, and the name a client
//! certificate goes by in the audit log ([`identity`], sans-IO).
//!
//! Client authentication is optional at the TLS layer, so that reads stay
//! open without a certificate when `--api-reads open`: a connection
//! without one is served and its writes answered 401; a certificate that
//! the CA did not sign ends the handshake (rustls sends an alert), so such
//! a client gets no HTTP answer at all.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::api::ApiOptions;

/// Who is on the other end of an HTTP connection: its address and, over
/// TLS with `--api-client-ca`, the name of the client certificate rustls
/// verified ([`identity`]). Handlers find it as `ConnectInfo<Peer>`.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    /// The client's address (the rate bound's key).
    pub(crate) addr: SocketAddr,
    /// The verified client certificate's name; `None` without one.
    pub(crate) client: Option<Arc<str>>,
}

impl Connected<IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Peer {
            addr: *stream.remote_addr(),
            client: None,
        }
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Why the TLS options cannot be used; each names the option and file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// The options do not go together.
    #[error("{0}")]
    Options(&'static str),
    /// A file could not be read.
    #[error("{option} {}: {source}", path.display())]
    Read {
        /// The option that named the file.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A file is not PEM, or holds nothing of the kind the option wants.
    #[error("{option} {}: {reason}", path.display())]
    Pem {
        /// The option that named the file.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with its contents.
        reason: String,
    },
    /// The private key is not the certificate's.
    #[error(
        "--http-tls-key {} does not match the certificate of --http-tls-cert {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// `--http-tls-cert`.
        cert: PathBuf,
        /// `--http-tls-key`.
        key: PathBuf,
    },
}

fn read(option: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        option,
        path: path.to_owned(),
        source,
    })
}

fn pem_error(option: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::Pem {
        option,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// Every certificate of a PEM file; an error when there is none.
fn certificates(
    option: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read(option, path)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(option, path, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error(option, path, "no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

/// The TLS options' combinations, checked before any file is read.
pub(crate) fn check_options(opts: &ApiOptions) -> Result<(), TlsError> {
    match (&opts.tls_cert, &opts.tls_key) {
        (Some(_), None) => Err(TlsError::Options("--http-tls-cert needs --http-tls-key")),
        (None, Some(_)) => Err(TlsError::Options("--http-tls-key needs --http-tls-cert")),
        (None, None) if opts.client_ca.is_some() => Err(TlsError::Options(
            "--api-client-ca needs --http-tls-cert and --http-tls-key (client certificates are sent over TLS)",
        )),
        _ => Ok(()),
    }
}

/// The server configuration of `opts` (`None` without `--http-tls-cert`):
/// the certificate chain and its key, and with `--api-client-ca` a
/// verifier of client certificates signed by that CA, optional so that a
/// client without one is still served. HTTP/1.1 over ALPN.
pub(crate) fn server_config(opts: &ApiOptions) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    check_options(opts)?;
    let (Some(cert_path), Some(key_path)) = (&opts.tls_cert, &opts.tls_key) else {
        return Ok(None);
    };
    let chain = certificates("--http-tls-cert", cert_path)?;
    let key_text = read("--http-tls-key", key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_text).map_err(|e| {
        pem_error(
            "--http-tls-key",
            key_path,
            format!("no private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| pem_error("--http-tls-cert", cert_path, e))?;
    let builder = match &opts.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca_path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("--api-client-ca", ca_path)? {
                roots
                    .add(cert)
                    .map_err(|e| pem_error("--api-client-ca", ca_path, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| pem_error("--api-client-ca", ca_path, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            cert: cert_path.clone(),
            key: key_path.clone(),
        },
        e => pem_error("--http-tls-key", key_path, e),
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// Longest name [`identity`] returns, in characters.
const MAX_IDENTITY: usize = 128;

/// The name a client certificate goes by in the audit log: `CN=` its
/// subject's common name, else `DNS=` or `URI=` its first subject
/// alternative name, else `serial=` its serial number in hex. Control
/// characters become `?` and the name is cut at 128 characters, so that
/// a certificate cannot forge log lines. `None` when `der` is not a
/// certificate.
pub(crate) fn identity(der: &CertificateDer<'_>) -> Option<String> {
    let cert = webpki::EndEntityCert::try_from(der).ok()?;
    let name = if let Some(cn) = common_name(der) {
        format!("CN={cn}")
    } else if let Some(dns) = cert.valid_dns_names().next() {
        format!("DNS={dns}")
    } else if let Some(uri) = cert.valid_uri_names().next() {
        format!("URI={uri}")
    } else {
        let hex: String = cert.serial().iter().map(|b| format!("{b:02x}")).collect();
        format!("serial={hex}")
    };
    Some(
        name.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .take(MAX_IDENTITY)
            .collect(),
    )
}

/// The first common name (OID 2.5.4.3) of the subject of certificate
/// `der`, read by x509-parser (a string of any of the types X.509 names
/// use); `None` when there is none or `der` does not parse.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// Handshakes under way at most; a connection beyond is closed at once.
const MAX_HANDSHAKES: usize = 256;

/// How long a client has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TCP listener with TLS on each connection: handshakes run beside
/// each other (a slow client holds up no other), bounded in number and
/// time; `accept` returns the finished ones with their [`Peer`].
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, Peer)>>,
}

impl TlsListener {
    /// TLS with `config` on the connections of `tcp`.
    pub(crate) fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: JoinSet::new(),
        }
    }
}

/// One handshake: the stream and its peer, or `None` (logged) when the
/// client failed it or took too long.
async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    addr: SocketAddr,
) -> Option<(TlsStream<TcpStream>, Peer)> {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            // A client certificate the CA did not sign is an
            // authentication refusal: audited; other failures (scanners,
            // plain HTTP) are not worth a line.
            match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                Some(rustls::Error::InvalidCertificate(why)) => {
                    tracing::info!(target: "rvs::audit", %addr, "HTTPS: client certificate refused: {why:?}");
                }
                _ => tracing::debug!(%addr, "HTTPS: TLS handshake failed: {e}"),
            }
            return None;
        }
        Err(_) => {
            tracing::debug!(%addr, "HTTPS: TLS handshake timed out");
            return None;
        }
    };
    // The verifier checked the chain during the handshake: a certificate
    // here is one the CA signed.
    let client = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(identity)
        .map(Arc::from);
    Some((stream, Peer { addr, client }))
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, addr)) if self.handshakes.len() < MAX_HANDSHAKES => {
                        self.handshakes.spawn(handshake(self.acceptor.clone(), tcp, addr));
                    }
                    Ok((_, addr)) => {
                        tracing::debug!(%addr, "HTTPS: {MAX_HANDSHAKES} handshakes under way, connection closed");
                    }
                    Err(e) => {
                        // Out of descriptors and the like: wait a little
                        // rather than spin, as axum's own listener does.
                        tracing::debug!("HTTPS: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(done) = self.handshakes.join_next() => {
                    if let Ok(Some(ready)) = done {
                        return ready;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            addr: self.tcp.local_addr()?,
            client: None,
        })
    }
}

#[cfg(test)]
mod tests;
