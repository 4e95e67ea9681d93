//! What the QUIC-LB end-to-end tests share (the loopback one through the
//! proxy plane, `quic_lb.rs`, and the namespace one through the XDP plane,
//! `quic_xdp.rs`): quinn servers that issue QUIC-LB connection IDs with
//! rvs-quiclb's generator and record which connection carried each payload,
//! and clients that connect, exchange, migrate to new sockets and exchange
//! again. Sockets are made by the caller (so a test can make them in a
//! network namespace: a socket keeps the namespace it was created in).

use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_quiclb::quinn::QuicLbCidGenerator;
use rvs_quiclb::{Codec, ConfigId, LbConfig, ServerId};
use tokio::time::timeout;

/// Every step's bound (a handshake, a reply).
pub(crate) const STEP: Duration = Duration::from_secs(10);
/// The idle timeout: a broken migration ends its connection this soon.
pub(crate) const IDLE: Duration = Duration::from_secs(3);
/// The three servers' IDs.
pub(crate) const SIDS: [&str; 3] = ["0a0001", "0a0002", "0a0003"];

/// The AES key of the encrypted configs.
pub(crate) const KEY: [u8; 16] = [
    0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f,
];

/// (server ID, connection stable id, payload) as the servers saw them.
pub(crate) type Served = Arc<Mutex<Vec<(String, usize, String)>>>;

/// A self-signed certificate for `localhost` and its key.
pub(crate) type Cert = (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

/// A fresh self-signed certificate for `localhost`.
pub(crate) fn cert() -> Cert {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).expect("key");
    (ck.cert.der().clone(), key)
}

/// The codec of config `cr` (server ID `sid` octets, nonce `nonce`).
pub(crate) fn codec(cr: u8, sid: u8, nonce: u8, key: Option<[u8; 16]>) -> Codec {
    Codec::new(
        LbConfig::new(ConfigId::new(cr).expect("cr"), sid, nonce, key, false).expect("config"),
    )
}

/// The server ID written as hex octets (`0a0001`).
pub(crate) fn server_id(sid: &str) -> ServerId {
    let bytes: Vec<u8> = (0..sid.len() / 2)
        .map(|i| u8::from_str_radix(&sid[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    ServerId::from_slice(&bytes).expect("server id")
}

/// A quinn server on `socket` issuing QUIC-LB CIDs for `sid`; it records
/// every stream's payload with its connection and answers `SID:payload`.
/// Needs a tokio runtime entered.
pub(crate) fn server(
    codec: &Codec,
    sid: &str,
    cert: &Cert,
    socket: StdUdpSocket,
    served: Served,
) -> quinn::Endpoint {
    let generator = QuicLbCidGenerator::new(codec.clone(), server_id(sid)).expect("generator");
    server_with(generator, sid, cert, socket, served)
}

/// [`server`] with its own CID generator (a rotating one, a CID lifetime).
pub(crate) fn server_with(
    generator: QuicLbCidGenerator,
    sid: &str,
    cert: &Cert,
    socket: StdUdpSocket,
    served: Served,
) -> quinn::Endpoint {
    let mut endpoint_config = quinn::EndpointConfig::default();
    endpoint_config.cid_generator(move || Box::new(generator.clone()));
    let server_config =
        quinn::ServerConfig::with_single_cert(vec![cert.0.clone()], cert.1.clone_key())
            .expect("server config");
    let endpoint = quinn::Endpoint::new(
        endpoint_config,
        Some(server_config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .expect("server endpoint");
    let ep = endpoint.clone();
    let sid = sid.to_owned();
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            let (sid, served) = (sid.clone(), served.clone());
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let Ok(data) = recv.read_to_end(1 << 16).await else {
                        return;
                    };
                    let text = String::from_utf8_lossy(&data).into_owned();
                    served
                        .lock()
                        .expect("served")
                        .push((sid.clone(), conn.stable_id(), text));
                    let mut reply = format!("{sid}:").into_bytes();
                    reply.extend_from_slice(&data);
                    let _ = send.write_all(&reply).await;
                    let _ = send.finish();
                }
            });
        }
    });
    endpoint
}

/// One request on a new stream: the answering server's ID, or why not.
pub(crate) async fn exchange(conn: &quinn::Connection, payload: &str) -> Result<String, String> {
    let (mut send, mut recv) = timeout(STEP, conn.open_bi())
        .await
        .map_err(|_| "open timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    send.write_all(payload.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    let reply = timeout(STEP, recv.read_to_end(1 << 16))
        .await
        .map_err(|_| "reply timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8(reply).map_err(|e| e.to_string())?;
    let (sid, echoed) = text.split_once(':').ok_or("no colon")?;
    if echoed != payload {
        return Err(format!("echo {echoed:?} for {payload:?}"));
    }
    Ok(sid.to_owned())
}

/// The clients' configuration: trusts `cert`, idle timeout [`IDLE`] (a
/// broken migration ends in bounded time), no segmentation offload (one
/// datagram per packet through the balancer).
pub(crate) fn client_config(cert: &Cert) -> quinn::ClientConfig {
    client_config_with(cert, None)
}

/// [`client_config`] sending a keep-alive every `keep_alive` (so a
/// connection outlives a pause of the test longer than [`IDLE`] as long as
/// its packets get through).
pub(crate) fn client_config_with(cert: &Cert, keep_alive: Option<Duration>) -> quinn::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.0.clone()).expect("root");
    let mut config =
        quinn::ClientConfig::with_root_certificates(Arc::new(roots)).expect("client config");
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(IDLE.try_into().expect("idle")));
    transport.keep_alive_interval(keep_alive);
    transport.enable_segmentation_offload(false);
    config.transport_config(Arc::new(transport));
    config
}

/// How one client's migrations went.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The server that answered before migrating.
    pub(crate) before: String,
    /// After each migration, in order: the server that answered, or why
    /// none did.
    pub(crate) after: Vec<Result<String, String>>,
}

/// `n` clients of `vip`, each on a socket from `socket(i, 0)`, connected
/// one after another (so round robin is deterministic) with one exchange
/// each; then each in turn migrates to `socket(i, m)` for m = 1..=
/// `migrations` (`Endpoint::rebind`: a new 4-tuple) and exchanges again
/// after each. Payloads are `{tag}{i}:before` and `{tag}{i}:after{m}`.
pub(crate) async fn clients(
    vip: SocketAddr,
    tag: &str,
    cert: &Cert,
    n: usize,
    migrations: usize,
    socket: &dyn Fn(usize, usize) -> StdUdpSocket,
) -> Vec<Outcome> {
    clients_with(vip, tag, client_config(cert), n, migrations, socket).await
}

/// [`clients`] with the clients' configuration `client_config`.
pub(crate) async fn clients_with(
    vip: SocketAddr,
    tag: &str,
    client_config: quinn::ClientConfig,
    n: usize,
    migrations: usize,
    socket: &dyn Fn(usize, usize) -> StdUdpSocket,
) -> Vec<Outcome> {
    let mut open = Vec::new();
    for i in 0..n {
        let mut ep = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            socket(i, 0),
            Arc::new(quinn::TokioRuntime),
        )
        .expect("client endpoint");
        ep.set_default_client_config(client_config.clone());
        let conn = timeout(STEP, ep.connect(vip, "localhost").expect("connect"))
            .await
            .expect("handshake in time")
            .expect("handshake");
        let before = exchange(&conn, &format!("{tag}{i}:before"))
            .await
            .expect("exchange before migration");
        open.push((ep, conn, before));
    }
    let mut out = Vec::new();
    for (i, (ep, conn, before)) in open.into_iter().enumerate() {
        let mut after = Vec::new();
        for m in 1..=migrations {
            ep.rebind(socket(i, m)).expect("rebind");
            after.push(exchange(&conn, &format!("{tag}{i}:after{m}")).await);
        }
        conn.close(0u32.into(), b"done");
        out.push(Outcome { before, after });
    }
    out
}

/// From the servers' side: every payload of QUIC-LB client `i` (tag `tag`)
/// was served by one server on one connection, the one that answered
/// first, and every migration was kept.
pub(crate) fn assert_kept(what: &str, tag: &str, outcomes: &[Outcome], served: &Served) {
    let served = served.lock().expect("served").clone();
    for (i, o) in outcomes.iter().enumerate() {
        for (m, a) in o.after.iter().enumerate() {
            let after = a.as_ref().unwrap_or_else(|e| {
                panic!(
                    "{what}: QUIC-LB client {i} broke after migration {}: {e}; {outcomes:?}",
                    m + 1
                )
            });
            assert_eq!(&o.before, after, "{what}: client {i} changed server");
        }
        let seen: Vec<&(String, usize, String)> = served
            .iter()
            .filter(|(_, _, p)| p.starts_with(&format!("{tag}{i}:")))
            .collect();
        assert_eq!(
            seen.len(),
            1 + o.after.len(),
            "{what}: client {i}: {seen:?}"
        );
        for s in &seen {
            assert_eq!(
                (&s.0, s.1),
                (&seen[0].0, seen[0].1),
                "{what}: client {i}: one server, one connection: {seen:?}"
            );
        }
        assert_eq!(seen[0].0, o.before);
    }
}

/// How many of the plain (4-tuple scheduled) clients' migrations broke;
/// those that did arrive reached the original server only.
pub(crate) fn broken(what: &str, outcomes: &[Outcome]) -> usize {
    let mut n = 0;
    for (i, o) in outcomes.iter().enumerate() {
        if o.after.iter().any(|a| a.is_err()) {
            n += 1;
        }
        for after in o.after.iter().flatten() {
            assert_eq!(&o.before, after, "{what}: plain client {i}");
        }
    }
    n
}

/// The QUIC-LB counters (routed by CID, by fallback, undecodable) of the
/// service `vip` in `rvsadm -Ln --quic-lb`'s output, if listed.
pub(crate) fn counters(listing: &str, vip: SocketAddr) -> Option<[u64; 3]> {
    let vip = vip.to_string();
    let line = listing.lines().find(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some("UDP") && w.next() == Some(vip.as_str())
    })?;
    let n: Vec<u64> = line
        .split_whitespace()
        .skip(2)
        .filter_map(|w| w.parse().ok())
        .collect();
    n.try_into().ok()
}
