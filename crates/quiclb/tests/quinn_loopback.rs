//! A quinn server pool issuing QUIC-LB connection IDs, behind a UDP relay on
//! loopback that routes by them — the start of the proxy plane's QUIC path.
//!
//! Two quinn servers (server IDs 00 01 and 00 02) use
//! `rvs_quiclb::quinn::QuicLbCidGenerator`; a quinn client connects through
//! the relay, exchanges data, rebinds to a new local port (a migration: the
//! relay sees a new client address) and exchanges data again. The relay
//! parses every client datagram with `rvs_quiclb::Router`: packets whose
//! DCID decodes go to the server with that ID, the rest (the client-chosen
//! Initial DCID) to a hash of the DCID. The test then checks, for each
//! configuration form (plaintext, single-pass, four-pass), that
//! * every exchange completed, before and after the migration;
//! * the client's short-header packets were all routed by CID, from both of
//!   its addresses, and their DCIDs decode to the ID of the server that
//!   answered.
//!
//! Loopback only; every wait is bounded (10 s per step).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_quiclb::quinn::QuicLbCidGenerator;
use rvs_quiclb::{Codec, Decision, LbConfig, Router, ServerId};
use tokio::net::UdpSocket;
use tokio::time::timeout;

const STEP: Duration = Duration::from_secs(10);

/// What the relay saw of one client datagram.
#[derive(Debug, Clone)]
struct Seen {
    from: SocketAddr,
    long: bool,
    routed: Option<ServerId>,
}

struct Relay {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

/// A UDP relay: client datagrams to the server their DCID names (or a hash
/// of the DCID), each client address with its own upstream socket so the
/// servers see a migration as an address change, replies back to the
/// client address they belong to.
async fn relay(router: Router, servers: HashMap<ServerId, SocketAddr>) -> Relay {
    let front = Arc::new(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap());
    let addr = front.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut ordered: Vec<(ServerId, SocketAddr)> = servers.clone().into_iter().collect();
    ordered.sort();
    let task = tokio::spawn(async move {
        let mut upstream: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
        let mut buf = vec![0u8; 65536];
        let mut tasks = Vec::new();
        loop {
            let Ok((n, from)) = front.recv_from(&mut buf).await else {
                break;
            };
            let datagram = &buf[..n];
            let (target, record) = match router.decide(datagram) {
                Ok(Decision::Routed { server_id, .. }) if servers.contains_key(&server_id) => (
                    servers[&server_id],
                    Seen {
                        from,
                        long: datagram[0] & 0x80 != 0,
                        routed: Some(server_id),
                    },
                ),
                Ok(Decision::Routed { dcid, .. }) | Ok(Decision::Fallback { dcid, .. }) => {
                    // Fallback: a hash of the DCID, the same for a client's
                    // retransmitted Initials.
                    let h = dcid.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
                    });
                    (
                        ordered[(h % ordered.len() as u64) as usize].1,
                        Seen {
                            from,
                            long: datagram[0] & 0x80 != 0,
                            routed: None,
                        },
                    )
                }
                Err(_) => continue,
            };
            log.lock().unwrap().push(record);
            let up = match upstream.get(&from) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap());
                    upstream.insert(from, s.clone());
                    let (s2, front2) = (s.clone(), front.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut buf = vec![0u8; 65536];
                        while let Ok((n, _)) = s2.recv_from(&mut buf).await {
                            let _ = front2.send_to(&buf[..n], from).await;
                        }
                    }));
                    s
                }
            };
            let _ = up.send_to(datagram, target).await;
        }
        for t in tasks {
            t.abort();
        }
    });
    Relay { addr, seen, task }
}

fn cert() -> (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    (ck.cert.der().clone(), key)
}

/// A quinn server issuing QUIC-LB CIDs for `sid`; it answers each stream
/// with its server ID in hex, a colon and the bytes it read.
fn server(
    codec: &Codec,
    sid: ServerId,
    cert: &rustls::pki_types::CertificateDer<'static>,
    key: &rustls::pki_types::PrivateKeyDer<'static>,
) -> (quinn::Endpoint, SocketAddr) {
    let generator = QuicLbCidGenerator::new(codec.clone(), sid).unwrap();
    let mut endpoint_config = quinn::EndpointConfig::default();
    endpoint_config.cid_generator(move || Box::new(generator.clone()));
    let server_config =
        quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.clone_key()).unwrap();
    let socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = socket.local_addr().unwrap();
    let endpoint = quinn::Endpoint::new(
        endpoint_config,
        Some(server_config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .unwrap();
    let ep = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let Ok(data) = recv.read_to_end(1 << 16).await else {
                        return;
                    };
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

/// One request on a new stream; returns the answering server's ID (hex).
async fn exchange(conn: &quinn::Connection, payload: &[u8]) -> String {
    let (mut send, mut recv) = timeout(STEP, conn.open_bi()).await.unwrap().unwrap();
    send.write_all(payload).await.unwrap();
    send.finish().unwrap();
    let reply = timeout(STEP, recv.read_to_end(1 << 16))
        .await
        .expect("reply in time")
        .expect("reply");
    let text = String::from_utf8(reply).unwrap();
    let (sid, echoed) = text.split_once(':').unwrap();
    assert_eq!(echoed.as_bytes(), payload);
    sid.to_string()
}

async fn pool_through_relay(config: &str) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config: LbConfig = config.parse().unwrap();
    let codec = Codec::new(config);
    let (cert, key) = cert();
    let ids = [
        ServerId::from_slice(&[0, 1]).unwrap(),
        ServerId::from_slice(&[0, 2]).unwrap(),
    ];
    let mut servers = HashMap::new();
    let mut endpoints = Vec::new();
    for sid in ids {
        let (ep, addr) = server(&codec, sid, &cert, &key);
        servers.insert(sid, addr);
        endpoints.push(ep);
    }
    let mut router = Router::new();
    router.insert(codec.clone());
    let relay = relay(router, servers).await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let client_config = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).unwrap();
    let mut client = quinn::Endpoint::client((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
    client.set_default_client_config(client_config);
    let first_addr = client.local_addr().unwrap();

    let conn = timeout(STEP, client.connect(relay.addr, "localhost").unwrap())
        .await
        .expect("handshake in time")
        .expect("handshake");
    let before = exchange(&conn, b"before migration").await;

    // Migrate: a new local port, so the relay sees a new client address.
    let new_socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let second_addr = new_socket.local_addr().unwrap();
    client.rebind(new_socket).unwrap();
    let after = exchange(&conn, b"after migration").await;
    assert_eq!(
        before, after,
        "the migrated connection stayed on its server"
    );

    conn.close(0u32.into(), b"done");
    let seen = relay.seen.lock().unwrap().clone();
    relay.task.abort();
    for ep in endpoints {
        ep.close(0u32.into(), b"");
    }

    for addr in [first_addr, second_addr] {
        let short: Vec<&Seen> = seen.iter().filter(|s| s.from == addr && !s.long).collect();
        assert!(
            !short.is_empty(),
            "short-header packets from {addr}: {seen:?}"
        );
        for s in short {
            let sid = s.routed.expect("every short header routed by CID");
            assert_eq!(sid.to_string(), before, "{s:?}");
        }
    }
}

#[tokio::test]
async fn plaintext_cids_route_and_survive_migration() {
    pool_through_relay("id=0,sid=2,nonce=6").await;
}

#[tokio::test]
async fn single_pass_cids_route_and_survive_migration() {
    pool_through_relay("id=1,sid=2,nonce=14,key=8f95f09245765f80256934e50c66207f,encode-len").await;
}

#[tokio::test]
async fn four_pass_cids_route_and_survive_migration() {
    pool_through_relay("id=2,sid=2,nonce=5,key=fdf726a9893ec05c0632d3956680baf0").await;
}
