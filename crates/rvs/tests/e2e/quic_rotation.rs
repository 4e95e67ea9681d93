//! QUIC-LB key rotation through `rvsd --dataplane proxy` without breaking a
//! live connection (draft-ietf-quic-load-balancers-21 §3.1, the config
//! rotation bits).
//!
//! Three quinn servers issue single-pass AES CIDs under config rotation 0
//! (key K0) through rvs-quiclb's `CidRotation`, with a short CID lifetime so
//! quinn retires old CIDs and hands peers fresh ones. The steps an operator
//! takes, checked from the servers' own records:
//! 1. the service has config 0; clients A connect and exchange;
//! 2. `-E` gives the service configs 0 and 1 (key K1), then the servers
//!    issue under config 1 (old CIDs still theirs); clients A keep
//!    exchanging while their CIDs are replaced; clients B connect;
//! 3. once every live CID is of config 1, `-E` leaves config 1 alone and the
//!    servers retire config 0;
//! 4. every client (A and B) exchanges, migrates to a new local port, and
//!    exchanges again.
//!
//! Every client's payloads were served by one server on one connection.
//! The control in the same run: a service that drops config 0 while its
//! CIDs are still in use (servers that never retire CIDs, step 3 without
//! step 2's wait) breaks the connections whose DCIDs then hash to another
//! server — what keeping both configs live until the old CIDs are retired
//! prevents. Loopback only; every wait is bounded.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rvs_quiclb::quinn::{CidRotation, QuicLbCidGenerator};
use rvs_quiclb::{Codec, ConfigId};
use tokio::time::timeout;

use crate::harness::Rvsd;
use crate::quic_common::{self, Cert, STEP, Served, cert, exchange, server_id, server_with};

const SIDS: [&str; 3] = ["0b0001", "0b0002", "0b0003"];
/// Clients per phase (A before the rotation, B during it).
const CLIENTS: usize = 4;
const K0: &str = "8f95f09245765f80256934e50c66207f";
const K1: &str = "0123456789abcdef0123456789abcdef";
/// How long a server CID lives before quinn retires it.
const LIFETIME: Duration = Duration::from_millis(600);

fn codec(cr: u8, key: &str) -> Codec {
    let key = rvs_quiclb::config::parse_key(key).expect("key");
    quic_common::codec(cr, 3, 13, Some(key))
}

fn spec(cr: u8, key: &str) -> String {
    format!("cr={cr},sid=3,nonce=13,key={key}")
}

/// A quinn server for `sid` under `rotation` on a loopback port; `lifetime`:
/// retire CIDs after it (None: never).
fn server(
    sid: &str,
    rotation: CidRotation,
    lifetime: Option<Duration>,
    cert: &Cert,
    served: Served,
) -> quinn::Endpoint {
    let mut generator = QuicLbCidGenerator::rotating(rotation);
    if let Some(l) = lifetime {
        generator = generator.with_lifetime(l);
    }
    let socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind server");
    server_with(generator, sid, cert, socket, served)
}

struct Client {
    name: String,
    ep: quinn::Endpoint,
    conn: quinn::Connection,
    /// The server of each exchange (or why it failed), in order.
    answers: Vec<Result<String, String>>,
}

impl Client {
    async fn connect(vip: SocketAddr, name: String, config: &quinn::ClientConfig) -> Client {
        let mut ep = quinn::Endpoint::client((Ipv4Addr::LOCALHOST, 0).into()).expect("client");
        ep.set_default_client_config(config.clone());
        let conn = timeout(STEP, ep.connect(vip, "localhost").expect("connect"))
            .await
            .expect("handshake in time")
            .expect("handshake");
        let mut c = Client {
            name,
            ep,
            conn,
            answers: Vec::new(),
        };
        c.exchange().await;
        c
    }

    async fn exchange(&mut self) {
        let n = self.answers.len();
        let r = exchange(&self.conn, &format!("{}:{n}", self.name)).await;
        self.answers.push(r);
    }

    fn migrate(&self) {
        let socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("new socket");
        self.ep.rebind(socket).expect("rebind");
    }

    /// Every exchange answered, all by one server.
    fn kept(&self) -> Result<String, String> {
        let first = self.answers[0].clone()?;
        for (i, a) in self.answers.iter().enumerate() {
            match a {
                Ok(s) if *s == first => {}
                other => return Err(format!("{}: exchange {i}: {other:?}", self.name)),
            }
        }
        Ok(first)
    }
}

fn client_config(cert: &Cert) -> quinn::ClientConfig {
    let mut config = quic_common::client_config(cert);
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(quic_common::IDLE.try_into().expect("idle")));
    transport.enable_segmentation_offload(false);
    // A healthy connection stays up while another client waits out a broken
    // one's idle timeout.
    transport.keep_alive_interval(Some(Duration::from_millis(500)));
    config.transport_config(Arc::new(transport));
    config
}

/// One service, its three servers and clients through a rotation from K0 to
/// K1. `wait` false is the control: the servers never retire a CID and step
/// 2 does not wait, so clients A still use config-0 CIDs when the balancer
/// drops config 0. The clients, after the final migration.
async fn rotate(d: &Rvsd, tag: &str, cert: &Cert, served: &Served, wait: bool) -> Vec<Client> {
    let rotations: Vec<CidRotation> = SIDS
        .iter()
        .map(|s| CidRotation::new(codec(0, K0), server_id(s)).expect("rotation"))
        .collect();
    let servers: Vec<quinn::Endpoint> = SIDS
        .iter()
        .zip(&rotations)
        .map(|(s, r)| server(s, r.clone(), wait.then_some(LIFETIME), cert, served.clone()))
        .collect();
    let vip = SocketAddr::from((
        [127, 0, 0, 1],
        StdUdpSocket::bind("127.0.0.1:0")
            .expect("port")
            .local_addr()
            .expect("addr")
            .port(),
    ));
    let (old, new) = (spec(0, K0), spec(1, K1));
    d.ok(&format!("-A -u {vip} -s rr --quic-lb {old}"));
    for (ep, s) in servers.iter().zip(SIDS) {
        let addr = ep.local_addr().expect("addr");
        d.ok(&format!("-a -u {vip} -r {addr} -m --quic-sid {s}"));
    }
    let config = client_config(cert);

    // 1. Clients A under config 0.
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        clients.push(Client::connect(vip, format!("{tag}A{i}"), &config).await);
    }
    // 2. Both configs at the balancer, then the servers issue under 1.
    d.ok(&format!(
        "-E -u {vip} -s rr --quic-lb {old} --quic-lb {new}"
    ));
    for r in &rotations {
        r.rotate_to(codec(1, K1)).expect("rotate");
    }
    if wait {
        // Keep the connections busy for several CID lifetimes: quinn retires
        // every config-0 CID and the clients move to config-1 ones.
        let until = Instant::now() + LIFETIME * 4;
        while Instant::now() < until {
            for c in clients.iter_mut() {
                c.exchange().await;
            }
            tokio::time::sleep(LIFETIME / 4).await;
        }
    }
    for i in 0..CLIENTS {
        clients.push(Client::connect(vip, format!("{tag}B{i}"), &config).await);
    }
    // 3. Config 0 gone from the balancer and the servers.
    d.ok(&format!("-E -u {vip} -s rr --quic-lb {new}"));
    for r in &rotations {
        r.retire(ConfigId::new(0).expect("cr")).expect("retire");
    }
    // 4. Exchange, migrate, exchange.
    for c in clients.iter_mut() {
        c.exchange().await;
        c.migrate();
        c.exchange().await;
        c.exchange().await;
    }
    for c in &clients {
        c.conn.close(0u32.into(), b"done");
    }
    for ep in &servers {
        ep.close(0u32.into(), b"");
    }
    clients
}

#[test]
fn quic_lb_key_rotation_keeps_live_connections_on_their_servers() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let d = Rvsd::start_proxy("quic-rotation", &[]);
    let cert = cert();
    let served: Served = Arc::default();
    let _guard = rt.enter();

    let rotated = rt.block_on(rotate(&d, "r", &cert, &served, true));
    let control = rt.block_on(rotate(&d, "c", &cert, &served, false));
    let served = served.lock().expect("served").clone();

    for c in &rotated {
        let sid = c
            .kept()
            .unwrap_or_else(|e| panic!("rotation broke a connection: {e}"));
        // From the servers' side: one server, one connection, every payload.
        let seen: Vec<_> = served
            .iter()
            .filter(|(_, _, p)| p.starts_with(&format!("{}:", c.name)))
            .collect();
        assert_eq!(seen.len(), c.answers.len(), "{}: {seen:?}", c.name);
        assert!(
            seen.iter().all(|(s, id, _)| *s == sid && *id == seen[0].1),
            "{}: one server, one connection: {seen:?}",
            c.name
        );
    }
    // The control: clients A still held config-0 CIDs when the balancer
    // dropped config 0, so their packets went by the DCID hash; with three
    // servers, DCIDs that hash to another server broke those connections.
    // Clients B, connected after the servers issued under config 1, kept
    // theirs.
    let broken: Vec<String> = control.iter().filter_map(|c| c.kept().err()).collect();
    eprintln!(
        "rotation: {}/{} connections kept with both configs live; the control broke {}: {broken:?}",
        rotated.len(),
        rotated.len(),
        broken.len()
    );
    for c in control.iter().filter(|c| c.name.starts_with("cB")) {
        c.kept()
            .unwrap_or_else(|e| panic!("a config-1 connection broke in the control: {e}"));
    }
    assert!(
        !broken.is_empty(),
        "dropping config 0 while its CIDs were live broke nothing: the test shows nothing"
    );
}
