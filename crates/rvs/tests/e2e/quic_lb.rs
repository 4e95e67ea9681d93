//! QUIC-LB through `rvsd --dataplane proxy`: connections survive client
//! migration when the service routes by connection ID, and break without.
//!
//! Three quinn servers on loopback issue QUIC-LB connection IDs with
//! rvs-quiclb's generator (server IDs 0a0001..0a0003). One rvsd carries two
//! UDP services over the same three servers: `quic` with `--quic-lb` and
//! each real server's `--quic-sid`, `plain` without (round robin over the
//! 4-tuple). For each service, clients connect one after another, exchange
//! data, then migrate (`Endpoint::rebind` to a new local UDP socket: a new
//! source port) and exchange again. The servers record which connection
//! (quinn's stable id) carried each payload, so the test asserts from their
//! side that every migrated QUIC-LB connection stayed on its server and
//! completed, and counts the plain service's broken migrations (> 0: with
//! four clients over three round-robin servers, every migrated flow is
//! scheduled to another server). The QUIC-LB counters are read back with
//! `rvsadm -Ln --quic-lb`. Plaintext, single-pass and four-pass configs.
//!
//! Loopback only; every wait is bounded (10 s a step, 3 s idle timeout for
//! the broken connections).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_quiclb::quinn::QuicLbCidGenerator;
use rvs_quiclb::{Codec, ConfigId, LbConfig, ServerId};
use tokio::time::timeout;

use crate::harness::Rvsd;

const STEP: Duration = Duration::from_secs(10);
const CLIENTS: usize = 4;
const SIDS: [&str; 3] = ["0a0001", "0a0002", "0a0003"];

/// (server ID, connection stable id, payload) as the servers saw them.
type Served = Arc<Mutex<Vec<(String, usize, String)>>>;

fn cert() -> (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).expect("key");
    (ck.cert.der().clone(), key)
}

/// A quinn server issuing QUIC-LB CIDs for `sid`; it records every stream's
/// payload with its connection and answers `SID:payload`.
fn server(
    codec: &Codec,
    sid: &str,
    cert: &rustls::pki_types::CertificateDer<'static>,
    key: &rustls::pki_types::PrivateKeyDer<'static>,
    served: Served,
) -> (quinn::Endpoint, SocketAddr) {
    let bytes: Vec<u8> = (0..sid.len() / 2)
        .map(|i| u8::from_str_radix(&sid[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    let id = ServerId::from_slice(&bytes).expect("server id");
    let generator = QuicLbCidGenerator::new(codec.clone(), id).expect("generator");
    let mut endpoint_config = quinn::EndpointConfig::default();
    endpoint_config.cid_generator(move || Box::new(generator.clone()));
    let server_config = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.clone_key())
        .expect("server config");
    let socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind server");
    let addr = socket.local_addr().expect("addr");
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
    (endpoint, addr)
}

/// One request on a new stream: the answering server's ID, or why not.
async fn exchange(conn: &quinn::Connection, payload: &str) -> Result<String, String> {
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

/// How one client's migration went.
#[derive(Debug)]
struct Outcome {
    before: String,
    after: Result<String, String>,
}

/// `CLIENTS` clients of `vip`, connected one after another (so round robin
/// is deterministic), then each migrates and exchanges again.
async fn clients(
    vip: SocketAddr,
    tag: &str,
    cert: &rustls::pki_types::CertificateDer<'static>,
) -> Vec<Outcome> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("root");
    let mut client_config =
        quinn::ClientConfig::with_root_certificates(Arc::new(roots)).expect("client config");
    let mut transport = quinn::TransportConfig::default();
    // A broken migration ends the connection in bounded time.
    transport.max_idle_timeout(Some(Duration::from_secs(3).try_into().expect("idle")));
    client_config.transport_config(Arc::new(transport));
    let mut open = Vec::new();
    for i in 0..CLIENTS {
        let mut ep = quinn::Endpoint::client((Ipv4Addr::LOCALHOST, 0).into()).expect("client");
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
        let socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("new socket");
        ep.rebind(socket).expect("rebind");
        let after = exchange(&conn, &format!("{tag}{i}:after")).await;
        conn.close(0u32.into(), b"done");
        out.push(Outcome { before, after });
    }
    out
}

fn run(spec: &str, codec: Codec) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let d = Rvsd::start_proxy("quic-lb", &[]);
    let (cert, key) = cert();
    let served: Served = Arc::default();
    let _guard = rt.enter();
    let servers: Vec<(quinn::Endpoint, SocketAddr)> = SIDS
        .iter()
        .map(|s| server(&codec, s, &cert, &key, served.clone()))
        .collect();
    let port = |s: StdUdpSocket| s.local_addr().expect("addr").port();
    let quic_vip = SocketAddr::from((
        [127, 0, 0, 1],
        port(StdUdpSocket::bind("127.0.0.1:0").expect("port")),
    ));
    let plain_vip = SocketAddr::from((
        [127, 0, 0, 1],
        port(StdUdpSocket::bind("127.0.0.1:0").expect("port")),
    ));
    d.ok(&format!("-A -u {quic_vip} -s rr --quic-lb {spec}"));
    d.ok(&format!("-A -u {plain_vip} -s rr"));
    for ((_, addr), sid) in servers.iter().zip(SIDS) {
        d.ok(&format!("-a -u {quic_vip} -r {addr} -m --quic-sid {sid}"));
        d.ok(&format!("-a -u {plain_vip} -r {addr} -m"));
    }

    let quic = rt.block_on(clients(quic_vip, "q", &cert));
    let plain = rt.block_on(clients(plain_vip, "p", &cert));
    let served = served.lock().expect("served").clone();
    for (ep, _) in &servers {
        ep.close(0u32.into(), b"");
    }

    // From the servers' side: each QUIC-LB client's two payloads were
    // served by one server, on one connection.
    for (i, o) in quic.iter().enumerate() {
        let after = o.after.as_ref().unwrap_or_else(|e| {
            panic!("{spec}: QUIC-LB client {i} broke after migrating: {e}; {quic:?}")
        });
        assert_eq!(&o.before, after, "{spec}: client {i} changed server");
        let seen: Vec<&(String, usize, String)> = served
            .iter()
            .filter(|(_, _, p)| p.starts_with(&format!("q{i}:")))
            .collect();
        assert_eq!(seen.len(), 2, "{spec}: client {i}: {seen:?}");
        assert_eq!(
            (&seen[0].0, seen[0].1),
            (&seen[1].0, seen[1].1),
            "{spec}: client {i}: one server, one connection: {seen:?}"
        );
        assert_eq!(seen[0].0, o.before);
    }
    let broken = plain.iter().filter(|o| o.after.is_err()).count();
    eprintln!(
        "{spec}: QUIC-LB {CLIENTS}/{CLIENTS} migrations kept; plain 4-tuple scheduling broke {broken}/{CLIENTS}"
    );
    assert!(
        broken > 0,
        "{spec}: plain UDP scheduling kept every migration: {plain:?}"
    );
    // The plain service's migrated payloads that did arrive reached the
    // original server only if the migration survived.
    for (i, o) in plain.iter().enumerate() {
        if let Ok(after) = &o.after {
            assert_eq!(&o.before, after, "{spec}: plain client {i}");
        }
    }

    // The counters, as rvsadm lists them: the clients' Initials went by the
    // fallback, everything after by CID.
    let mut last = String::new();
    d.eventually("QUIC-LB counters in -Ln --quic-lb", || {
        last = d.ok("-Ln --quic-lb");
        let Some(line) = last
            .lines()
            .find(|l| l.starts_with("UDP") && l.contains(&quic_vip.to_string()))
        else {
            return false;
        };
        let n: Vec<u64> = line
            .split_whitespace()
            .skip(2)
            .filter_map(|w| w.parse().ok())
            .collect();
        n.len() == 3 && n[0] > 0 && n[1] > 0
    });
    assert!(
        !last.contains(&plain_vip.to_string()),
        "only QUIC-LB services listed: {last}"
    );
    for sid in SIDS {
        assert!(last.contains(sid), "server IDs listed: {last}");
    }
    if let Some(k) = spec.split("key=").nth(1) {
        assert!(!last.contains(k), "the key is not listed: {last}");
        assert!(last.contains("key=fp:"), "{last}");
    }
    // -S saves the configs and server IDs; the rules restore.
    let saved = d.ok("-Sn");
    assert!(saved.contains(&format!("--quic-lb {spec}")), "{saved}");
    assert!(saved.contains("--quic-sid 0a0002"), "{saved}");
}

fn codec(cr: u8, sid: u8, nonce: u8, key: Option<[u8; 16]>) -> Codec {
    Codec::new(
        LbConfig::new(ConfigId::new(cr).expect("cr"), sid, nonce, key, false).expect("config"),
    )
}

const KEY: [u8; 16] = [
    0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f,
];

#[test]
fn quic_lb_plaintext_keeps_migrated_connections_on_their_servers() {
    run("cr=0,sid=3,nonce=6", codec(0, 3, 6, None));
}

#[test]
fn quic_lb_single_pass_keeps_migrated_connections_on_their_servers() {
    run(
        "cr=1,sid=3,nonce=13,key=8f95f09245765f80256934e50c66207f",
        codec(1, 3, 13, Some(KEY)),
    );
}

#[test]
fn quic_lb_four_pass_keeps_migrated_connections_on_their_servers() {
    run(
        "cr=2,sid=3,nonce=8,key=8f95f09245765f80256934e50c66207f",
        codec(2, 3, 8, Some(KEY)),
    );
}
