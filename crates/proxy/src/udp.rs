//! UDP: one socket on the virtual address; per client address a flow with
//! its own connected socket to the real server the director chose, so
//! replies come back on it and are sent to the client from the virtual
//! address. A flow ends after the director's UDP timeout without traffic
//! in either direction (like the kernel's UDP entry), then its director
//! entry is closed.
//!
//! One-packet scheduling (`-o`) keeps no entry: every datagram is
//! scheduled alone and sent from a fresh socket that relays the first
//! reply (or waits one UDP timeout for it) and is closed.
//!
//! A QUIC-LB service (`--quic-lb`) routes each datagram by its connection
//! ID instead ([`crate::quic`]): its flows are keyed by client address and
//! the real server the datagram is routed to.
//!
//! A flow whose real server is deleted ends at the next tick (250 ms),
//! even though the proxy lets TCP connections of a deleted server finish
//! (`drain_deleted`, `--drain-grace`): a UDP flow has no end to wait for
//! but quiet, and a client that keeps its source port and talks on would
//! reach the deleted server for good (kube-proxy's IPVS mode sets
//! `expire_nodest_conn` and clears the conntrack entries of removed UDP
//! endpoints for this). Its next datagram is scheduled afresh.
//!
//! Deleting the service ends its flows with the socket (there is no
//! connection to drain: datagrams of a deleted UDP service are not
//! accepted by IPVS either).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rvs_core::conn::ConnId;
use rvs_core::model::Protocol;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::plane::{Ctx, SvcState};
use crate::pool::{self, LocalPool};
use crate::tcp::{Admission, ConnGuard, Gauge, RateLimit};

/// Largest datagram relayed.
const MAX_DATAGRAM: usize = 65_535;

struct Flow {
    upstream: Arc<UdpSocket>,
    guard: Arc<ConnGuard>,
    /// Milliseconds after the loop's start of the last datagram either way.
    last: Arc<AtomicU64>,
    timeout: Duration,
    reply: JoinHandle<()>,
    _adm: Admission,
}

impl Drop for Flow {
    fn drop(&mut self) {
        // The reply task holds a clone of the guard: stop it first so the
        // entry is released when this flow goes.
        self.reply.abort();
    }
}

fn unspecified_for(addr: IpAddr) -> SocketAddr {
    match addr {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

/// A UDP socket connected to `dst`, bound to `src` (port picked by the
/// kernel at the bind) or, without one, to the unspecified address. Binding
/// a pool address fails with `EADDRINUSE` at once when no port of
/// `ip_local_port_range` is free on it: unlike TCP's connect-time pick
/// (`IP_BIND_ADDRESS_NO_PORT`), the kernel gives a UDP socket a port of its
/// own on its address whatever it connects to, so one pool address carries
/// as many sessions as the range has ports, over all real servers together.
fn connect_upstream(dst: SocketAddr, src: Option<IpAddr>) -> std::io::Result<UdpSocket> {
    let s = crate::sock::nonblocking_socket(dst, socket2::Type::DGRAM, socket2::Protocol::UDP)?;
    let from = src.map_or_else(|| unspecified_for(dst.ip()), |a| SocketAddr::new(a, 0));
    s.bind(&from.into())?;
    s.connect(&dst.into())?;
    UdpSocket::from_std(s.into())
}

/// [`connect_upstream`] from the next addresses of the service's pool in
/// turn (shared with its TCP connections' turn) when it has one: an address
/// with no port left gives way to the next, at most [`pool::MAX_TRIES`];
/// when none has one the session is counted in `laddr_exhausted` (as a TCP
/// connection is) and refused.
fn connect_pooled(
    ctx: &Ctx,
    svc: &SvcState,
    pool: &LocalPool,
    dst: SocketAddr,
) -> std::io::Result<UdpSocket> {
    if pool.is_empty() {
        return connect_upstream(dst, None);
    }
    let tries = pool.len().min(pool::MAX_TRIES);
    for _ in 0..tries {
        let i = svc.next_laddr.fetch_add(1, Ordering::Relaxed);
        let Some(src) = pool.nth(u128::from(i)) else {
            break;
        };
        match connect_upstream(dst, Some(src)) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL | libc::EAGAIN)
                ) =>
            {
                continue;
            }
            other => return other,
        }
    }
    ctx.stats.laddr_exhausted.fetch_add(1, Ordering::Relaxed);
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        format!("no local pool address has a UDP port left (toward {dst})"),
    ))
}

/// Serve one UDP virtual service until `stop`'s sender is dropped.
///
/// Retired (`true` sent, `rvsd --takeover`: the socket is shared with the
/// new rvsd, which reads it from now on), it stops reading and serves the
/// replies of the flows it has until they time out, then ends.
pub(crate) async fn udp_loop(
    sock: Arc<UdpSocket>,
    svc: Arc<SvcState>,
    ctx: Arc<Ctx>,
    mut stop: watch::Receiver<bool>,
) {
    let vip = svc.vip;
    let start = Instant::now();
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    // QUIC-LB flows: (client, real server).
    let mut qflows: HashMap<(SocketAddr, SocketAddr), Flow> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut log = RateLimit::default();
    let mut retired = false;
    loop {
        let (n, client) = tokio::select! {
            r = stop.changed() => {
                if r.is_err() {
                    break;
                }
                if *stop.borrow_and_update() && !retired {
                    retired = true;
                    tracing::info!(flows = flows.len(), "proxy: stopped reading UDP {vip} (handed over)");
                }
                continue;
            }
            _ = tick.tick() => {
                let now = start.elapsed().as_millis() as u64;
                let keep = |f: &mut Flow| {
                    f.guard.flush();
                    let quiet = now.saturating_sub(f.last.load(Ordering::Relaxed));
                    Duration::from_millis(quiet) < f.timeout
                };
                // Flows of deleted real servers end (module doc).
                let deleted: Vec<SocketAddr> = if flows.is_empty() {
                    Vec::new()
                } else {
                    ctx.director
                        .with(|ipvs, _| {
                            flows
                                .iter()
                                .filter(|(_, f)| f.guard.dest_deleted(ipvs))
                                .map(|(c, _)| *c)
                                .collect()
                        })
                        .unwrap_or_default()
                };
                for c in deleted {
                    flows.remove(&c);
                }
                flows.retain(|_, f| keep(f));
                qflows.retain(|_, f| keep(f));
                if retired && flows.is_empty() && qflows.is_empty() {
                    break;
                }
                continue;
            }
            r = sock.recv_from(&mut buf), if !retired => match r {
                Ok(x) => x,
                Err(e) => {
                    if log.ready() {
                        tracing::debug!("proxy: udp {vip}: {e}");
                    }
                    continue;
                }
            },
        };
        if !svc.admits(client.ip(), &ctx.stats) {
            // Outside the service's source ranges: dropped.
            continue;
        }
        let data = &buf[..n];
        let now_ms = start.elapsed().as_millis() as u64;
        if let Some(routes) = svc.quic_routes() {
            let route = routes.route(data);
            svc.quic_counts.count(route);
            let dst = match route {
                crate::quic::Route::Cid(d) | crate::quic::Route::Fallback(d) => d,
                crate::quic::Route::NoServer => {
                    ctx.stats.refused_no_dest.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // Not QUIC: dropped (counted `undecodable`).
                crate::quic::Route::Undecodable => continue,
            };
            if let Some(f) = qflows.get(&(client, dst)) {
                f.send(data, now_ms).await;
                continue;
            }
            if let Some(f) =
                open_quic_flow(&sock, &svc, &ctx, client, dst, data, start, &mut log).await
            {
                qflows.insert((client, dst), f);
            }
            continue;
        }
        if let Some(f) = flows.get(&client) {
            f.send(data, now_ms).await;
            continue;
        }
        let Some(adm) = Admission::take(&ctx, &svc, 1, Gauge::Udp) else {
            continue;
        };
        let opened = ctx.director.with(|ipvs, now| {
            ipvs.open(now, Protocol::Udp, client, vip).map(|f| {
                let pool = ipvs
                    .service(&svc.key)
                    .map(|s| LocalPool::for_dest(s.laddrs(), f.daddr))
                    .unwrap_or_default();
                (f, ipvs.timeouts().udp(), pool)
            })
        });
        let (fwd, timeout, pool) = match opened {
            Some(Ok(x)) => x,
            Some(Err(_)) => {
                ctx.stats.refused_no_dest.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            None => continue,
        };
        let guard = Arc::new(ConnGuard::new(ctx.clone(), fwd.conn));
        let dst = SocketAddr::new(fwd.daddr, fwd.dport);
        ctx.set_dest(adm.serial, (fwd.daddr, fwd.dport));
        let Some(upstream) = open_upstream(&ctx, &svc, &pool, dst, fwd.conn, &mut log) else {
            continue;
        };
        let sent = upstream.send(data).await.is_ok();
        if fwd.conn.is_none() {
            // One-packet scheduling: this datagram alone; relay its reply
            // (the first datagram back, request/response protocols like
            // DNS and SIP use OPS) or give up after one UDP timeout.
            let (sock, up) = (sock.clone(), upstream.clone());
            tokio::spawn(async move {
                let _adm = adm;
                let mut b = vec![0u8; MAX_DATAGRAM];
                let deadline = tokio::time::sleep(timeout);
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        _ = &mut deadline => break,
                        r = up.recv(&mut b) => if let Ok(m) = r {
                            let _ = sock.send_to(&b[..m], client).await;
                            break;
                        },
                    }
                }
            });
            continue;
        }
        if sent {
            // `open` counted this datagram as a packet (of no length).
            guard.meter.in_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        let flow = Flow::start(
            upstream,
            guard,
            &sock,
            client,
            timeout,
            (start, now_ms),
            adm,
        );
        flows.insert(client, flow);
    }
    tracing::info!("proxy: stopped listening on UDP {vip}");
}

impl Flow {
    /// A flow of `client` over `upstream`, relaying the real server's
    /// datagrams back through `sock`; `times` is the loop's start and the
    /// milliseconds since then of the datagram that opened it.
    fn start(
        upstream: Arc<UdpSocket>,
        guard: Arc<ConnGuard>,
        sock: &Arc<UdpSocket>,
        client: SocketAddr,
        timeout: Duration,
        times: (Instant, u64),
        adm: Admission,
    ) -> Flow {
        let (start, now_ms) = times;
        let last = Arc::new(AtomicU64::new(now_ms));
        let reply = tokio::spawn(replies(
            upstream.clone(),
            sock.clone(),
            client,
            guard.clone(),
            last.clone(),
            start,
        ));
        Flow {
            upstream,
            guard,
            last,
            timeout,
            reply,
            _adm: adm,
        }
    }

    /// Relay one client datagram on the flow.
    async fn send(&self, data: &[u8], now_ms: u64) {
        if self.upstream.send(data).await.is_ok() {
            self.guard.meter.in_pkts.fetch_add(1, Ordering::Relaxed);
            self.guard
                .meter
                .in_bytes
                .fetch_add(data.len() as u64, Ordering::Relaxed);
            self.last.store(now_ms, Ordering::Relaxed);
        }
    }
}

/// A new QUIC-LB flow from `client` to the real server `dst` the datagram
/// was routed to, with `data` sent on it. Its director entry is bound to
/// that server ([`rvs_core::ipvs::Ipvs::open_to`]). A client address that
/// already has a live entry (one client socket with connections to two
/// real servers) gets a flow without an entry of its own: it is relayed,
/// but `-Lcn` and the counters show the first one only.
#[allow(clippy::too_many_arguments)]
async fn open_quic_flow(
    sock: &Arc<UdpSocket>,
    svc: &Arc<SvcState>,
    ctx: &Arc<Ctx>,
    client: SocketAddr,
    dst: SocketAddr,
    data: &[u8],
    start: Instant,
    log: &mut RateLimit,
) -> Option<Flow> {
    let vip = svc.vip;
    let adm = Admission::take(ctx, svc, 1, Gauge::Udp)?;
    let opened = ctx.director.with(|ipvs, now| {
        let pool = ipvs
            .service(&svc.key)
            .map(|s| LocalPool::for_dest(s.laddrs(), dst.ip()))
            .unwrap_or_default();
        (
            ipvs.open_to(now, client, vip, dst.ip(), dst.port()),
            ipvs.timeouts().udp(),
            pool,
        )
    })?;
    let (conn, timeout, pool) = match opened {
        (Ok(f), t, pool) => (f.conn, t, pool),
        (Err(rvs_core::ipvs::Verdict::Drop(_)), t, pool) => (None, t, pool),
        (Err(_), _, _) => {
            // The real server went away between the table and the director.
            ctx.stats.refused_no_dest.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    let guard = Arc::new(ConnGuard::new(ctx.clone(), conn));
    ctx.set_dest(adm.serial, (dst.ip(), dst.port()));
    // A FULLNAT pool binds the session's source like any UDP session's.
    let upstream = open_upstream(ctx, svc, &pool, dst, conn, log)?;
    let now_ms = start.elapsed().as_millis() as u64;
    if upstream.send(data).await.is_ok() {
        // `open_to` counted this datagram as a packet (of no length).
        guard
            .meter
            .in_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
    }
    let times = (start, now_ms);
    Some(Flow::start(
        upstream, guard, sock, client, timeout, times, adm,
    ))
}

/// The socket of a new session to `dst`, connected from the FULLNAT `pool`
/// when it has addresses: then `-Lcn` shows the session's local address and
/// port for `conn`, which the session keeps (its socket) until it ends.
/// `None` (counted, logged at a limited rate) when it cannot connect.
fn open_upstream(
    ctx: &Ctx,
    svc: &SvcState,
    pool: &LocalPool,
    dst: SocketAddr,
    conn: Option<ConnId>,
    log: &mut RateLimit,
) -> Option<Arc<UdpSocket>> {
    let upstream = match connect_pooled(ctx, svc, pool, dst) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            ctx.stats.connect_failures.fetch_add(1, Ordering::Relaxed);
            if log.ready() {
                tracing::warn!("proxy: udp {} -> {dst}: {e}", svc.vip);
            }
            return None;
        }
    };
    if let (false, Some(id), Ok(local)) = (pool.is_empty(), conn, upstream.local_addr()) {
        ctx.director.with(|ipvs, _| ipvs.set_conn_local(id, local));
    }
    Some(upstream)
}

/// Relay the real server's datagrams of one flow back to its client.
async fn replies(
    upstream: Arc<UdpSocket>,
    sock: Arc<UdpSocket>,
    client: SocketAddr,
    guard: Arc<ConnGuard>,
    last: Arc<AtomicU64>,
    start: Instant,
) {
    let mut b = vec![0u8; MAX_DATAGRAM];
    loop {
        match upstream.recv(&mut b).await {
            Ok(m) => {
                if sock.send_to(&b[..m], client).await.is_ok() {
                    guard.meter.out_pkts.fetch_add(1, Ordering::Relaxed);
                    guard.meter.out_bytes.fetch_add(m as u64, Ordering::Relaxed);
                    last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            }
            // ICMP port unreachable from the real server shows up here
            // (ECONNREFUSED) once per datagram: keep the flow, as IPVS does.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
