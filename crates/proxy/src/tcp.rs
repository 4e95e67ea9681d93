//! TCP: the accept loop of a virtual service and the task of one proxied
//! connection — admission (fd budget, `max_conns`), the trusted PROXY
//! header, scheduling through the director, connecting with retries on
//! other real servers, the outgoing PROXY header, then the relay.
//!
//! The director's entry follows the sockets: `open` on accept (SYN_RECV),
//! the server's SYN+ACK and the client's ACK once connected (ESTABLISHED),
//! FIN per half-close, RST on a reset, and `close` exactly once when the
//! task ends, however it ends ([`ConnGuard`]'s `Drop`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rvs_core::conn::ConnId;
use rvs_core::dest::DestId;
use rvs_core::ipvs::{Forward, Ipvs, L4};
use rvs_core::model::{Protocol, ProxyProtocol, ServiceKey};
use rvs_core::state::{Direction, TcpFlags, TcpState};
use rvs_wire::proxy_protocol as pp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::plane::{Ctx, SvcState};
use crate::pool::{self, LocalPool};
use crate::relay;
use crate::sock;

/// Largest PROXY v2 header accepted from a trusted peer (fixed part, addresses
/// and TLVs); HAProxy's default buffer accepts far less than the protocol's 64 KiB.
const MAX_HEADER: usize = 4096;

/// fds one TCP connection holds: two sockets, plus two pipes when splicing.
fn tcp_fd_cost(splice: bool) -> usize {
    if splice { 6 } else { 2 }
}

/// Bytes and segments relayed on one connection; the relay adds, the guard
/// reports the difference to the director.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub(crate) in_bytes: AtomicU64,
    pub(crate) out_bytes: AtomicU64,
    pub(crate) in_pkts: AtomicU64,
    pub(crate) out_pkts: AtomicU64,
    reported: [AtomicU64; 4],
}

impl Meter {
    /// Take what was not reported yet: (in pkts, in bytes, out pkts, out bytes).
    fn take_delta(&self) -> [u64; 4] {
        let now = [
            self.in_pkts.load(Ordering::Relaxed),
            self.in_bytes.load(Ordering::Relaxed),
            self.out_pkts.load(Ordering::Relaxed),
            self.out_bytes.load(Ordering::Relaxed),
        ];
        let mut d = [0; 4];
        for i in 0..4 {
            let before = self.reported[i].swap(now[i], Ordering::Relaxed);
            d[i] = now[i].saturating_sub(before);
        }
        d
    }

    /// `open` already counted `n` incoming packets (the SYN): the kernel's
    /// segment counter includes it, so do not report it twice.
    pub(crate) fn already_counted_in_pkts(&self, n: u64) {
        self.reported[0].store(n, Ordering::Relaxed);
    }

    /// Bytes relayed but not reported yet.
    pub(crate) fn pending_bytes(&self) -> u64 {
        let total = self
            .in_bytes
            .load(Ordering::Relaxed)
            .saturating_add(self.out_bytes.load(Ordering::Relaxed));
        let rep = self.reported[1]
            .load(Ordering::Relaxed)
            .saturating_add(self.reported[3].load(Ordering::Relaxed));
        total.saturating_sub(rep)
    }
}

/// The director entry of one connection or flow: reports traffic and
/// events, and releases the entry exactly once when dropped (error paths,
/// panics and cancellation included).
#[derive(Debug)]
pub(crate) struct ConnGuard {
    ctx: Arc<Ctx>,
    id: Option<ConnId>,
    pub(crate) meter: Meter,
}

impl ConnGuard {
    pub(crate) fn new(ctx: Arc<Ctx>, id: Option<ConnId>) -> Self {
        ConnGuard {
            ctx,
            id,
            meter: Meter::default(),
        }
    }

    /// Report a state event seen on the sockets.
    pub(crate) fn event(&self, dir: Direction, l4: L4) {
        if let Some(id) = self.id {
            self.ctx
                .director
                .with(|ipvs, now| ipvs.conn_event(now, id, dir, l4, 0));
        }
    }

    /// The director's timeout for the connection's current state — the
    /// ESTABLISHED one while both directions are open, FIN_WAIT/CLOSE_WAIT
    /// and the like after a half-close — as the idle limit.
    pub(crate) fn state_timeout(&self) -> Option<Duration> {
        let id = self.id?;
        self.ctx
            .director
            .with(|ipvs, _| {
                ipvs.conns()
                    .get(id)
                    .map(|c| Duration::from_millis(u64::from(c.timeout_ms)))
            })
            .flatten()
    }

    /// Report the traffic relayed since the last report.
    pub(crate) fn flush(&self) {
        if let Some(id) = self.id {
            let [ip, ib, op, ob] = self.meter.take_delta();
            if ip | ib | op | ob != 0 {
                self.ctx
                    .director
                    .with(|ipvs, _| ipvs.conn_traffic(id, ip, ib, op, ob));
            }
        }
    }
}

impl ConnGuard {
    /// Whether the connection's real server has been deleted (its entry
    /// points at a server no longer available).
    pub(crate) fn dest_deleted(&self, ipvs: &rvs_core::ipvs::Ipvs) -> bool {
        let Some(id) = self.id else {
            return false;
        };
        let Some(c) = ipvs.conns().get(id) else {
            return false;
        };
        !ipvs
            .dest(rvs_core::dest::DestId(c.dest))
            .is_some_and(|d| d.available)
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let [ip, ib, op, ob] = self.meter.take_delta();
            self.ctx.director.with(|ipvs, _| {
                ipvs.conn_traffic(id, ip, ib, op, ob);
                // A closed connection lingers in its closing state, as
                // in the kernel (and a sync master sends that state).
                ipvs.release(id);
            });
        }
    }
}

/// A taken admission: a service slot, fds from the budget, a gauge and a
/// registry entry, all given back on drop.
#[derive(Debug)]
pub(crate) struct Admission {
    ctx: Arc<Ctx>,
    svc: Arc<SvcState>,
    fds: usize,
    gauge: Gauge,
    pub(crate) serial: u64,
    pub(crate) kill: Arc<Notify>,
}

/// Which `active_*` gauge an admission counts in.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Gauge {
    Tcp,
    Udp,
}

impl Admission {
    /// Admit one connection (or flow) costing `fds`, or say why not (the
    /// refusal is counted).
    pub(crate) fn take(
        ctx: &Arc<Ctx>,
        svc: &Arc<SvcState>,
        fds: usize,
        gauge: Gauge,
    ) -> Option<Admission> {
        if !svc.try_take() {
            ctx.stats.refused_max_conns.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !ctx.reserve_fds(fds) {
            svc.active.fetch_sub(1, Ordering::Relaxed);
            ctx.stats.refused_fd_budget.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let (serial, kill) = ctx.register(svc.key);
        let g = match gauge {
            Gauge::Tcp => &ctx.stats.active_tcp,
            Gauge::Udp => &ctx.stats.active_udp_flows,
        };
        g.fetch_add(1, Ordering::Relaxed);
        Some(Admission {
            ctx: ctx.clone(),
            svc: svc.clone(),
            fds,
            gauge,
            serial,
            kill,
        })
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.svc.active.fetch_sub(1, Ordering::Relaxed);
        self.ctx
            .stats
            .fds_in_use
            .fetch_sub(self.fds, Ordering::Relaxed);
        let g = match self.gauge {
            Gauge::Tcp => &self.ctx.stats.active_tcp,
            Gauge::Udp => &self.ctx.stats.active_udp_flows,
        };
        g.fetch_sub(1, Ordering::Relaxed);
        self.ctx.unregister(self.serial);
    }
}

/// Log at most once a second.
#[derive(Debug, Default)]
pub(crate) struct RateLimit(Option<tokio::time::Instant>);

impl RateLimit {
    pub(crate) fn ready(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if self
            .0
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return false;
        }
        self.0 = Some(now);
        true
    }
}

/// Accept connections of one virtual service until `stop`'s sender is
/// dropped or sends (retired: the listener is left open for the rvsd that
/// took this one over; connections not accepted yet stay in its queue).
pub(crate) async fn accept_loop(
    listener: Arc<TcpListener>,
    svc: Arc<SvcState>,
    ctx: Arc<Ctx>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(10);
    let mut log = RateLimit::default();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((client, peer)) => {
                backoff = Duration::from_millis(10);
                ctx.stats.accepted.fetch_add(1, Ordering::Relaxed);
                if !svc.admits(peer.ip(), &ctx.stats) {
                    // Outside the service's source ranges: reset, no real
                    // server asked.
                    sock::abort_on_close(&client);
                    continue;
                }
                let cost = tcp_fd_cost(ctx.config.splice);
                let Some(adm) = Admission::take(&ctx, &svc, cost, Gauge::Tcp) else {
                    sock::abort_on_close(&client);
                    continue;
                };
                tokio::spawn(connection(client, peer, svc.clone(), ctx.clone(), adm));
            }
            Err(_) if stop.has_changed().is_err() => break,
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: the pending connection stays in the
                // backlog; wait for fds to come back instead of spinning.
                ctx.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                if log.ready() {
                    tracing::warn!("proxy: accept on {}: {e}", svc.vip);
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
        }
    }
    tracing::info!("proxy: stopped listening on {}", svc.vip);
}

/// Read a PROXY header from a trusted peer: peek until a whole header is in,
/// then consume exactly its bytes. Returns the (client, destination) it
/// announces, `None` for LOCAL/UNKNOWN (use the real endpoints).
async fn read_proxy_header(
    client: &mut TcpStream,
) -> Result<Option<(SocketAddr, SocketAddr)>, String> {
    let mut buf = vec![0u8; MAX_HEADER];
    loop {
        let n = client.peek(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before the PROXY header".into());
        }
        match pp::parse_with_limit(&buf[..n], MAX_HEADER) {
            Ok(pp::Parsed::Complete { header, consumed }) => {
                client
                    .read_exact(&mut buf[..consumed])
                    .await
                    .map_err(|e| e.to_string())?;
                return Ok(match header.command {
                    pp::Command::Local => None,
                    pp::Command::Proxy => header.addresses,
                });
            }
            Ok(pp::Parsed::Incomplete { .. }) if n < buf.len() => {
                // peek returns at once while data is queued: wait a little
                // for the rest (bounded by the caller's timeout).
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(pp::Parsed::Incomplete { .. }) => return Err("PROXY header too long".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// What the director said for one attempt, with what the connection needs.
struct Plan {
    fwd: Forward,
    proxy_protocol: Option<ProxyProtocol>,
    idle: Duration,
    /// The service's local address pool (of the real server's family).
    pool: LocalPool,
}

fn plan_of(ipvs: &Ipvs, key: &ServiceKey, fwd: Forward) -> Plan {
    let proxy_protocol = ipvs
        .dest(fwd.dest)
        .and_then(|d| d.config.proxy_protocol)
        .or_else(|| ipvs.service(key).and_then(|s| s.config().proxy_protocol));
    let pool = ipvs
        .service(key)
        .map(|s| LocalPool::for_dest(s.laddrs(), fwd.daddr))
        .unwrap_or_default();
    Plan {
        fwd,
        proxy_protocol,
        idle: ipvs.timeouts().tcp(TcpState::Established),
        pool,
    }
}

/// Connect to `dst`, from the next addresses of the pool in turn when the
/// service has one: an address with no port left toward `dst`
/// (`EADDRNOTAVAIL`) gives way to the next, at most [`pool::MAX_TRIES`];
/// when none has one the attempt is counted in `laddr_exhausted` and fails.
async fn connect_pooled(
    ctx: &Ctx,
    svc: &SvcState,
    pool: &LocalPool,
    dst: SocketAddr,
    data_follows: bool,
) -> std::io::Result<TcpStream> {
    if pool.is_empty() {
        return sock::connect(dst, data_follows, None).await;
    }
    let tries = pool.len().min(pool::MAX_TRIES);
    for _ in 0..tries {
        let i = svc.next_laddr.fetch_add(1, Ordering::Relaxed);
        let Some(src) = pool.nth(u128::from(i)) else {
            break;
        };
        match sock::connect(dst, data_follows, Some(src)).await {
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => continue,
            other => return other,
        }
    }
    ctx.stats.laddr_exhausted.fetch_add(1, Ordering::Relaxed);
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        format!("no local pool address has a port left toward {dst}"),
    ))
}

const SYNACK: TcpFlags = TcpFlags::SYN_ACK;
const ACK: TcpFlags = TcpFlags::ACK;
pub(crate) const FIN: TcpFlags = TcpFlags::FIN_ACK;
pub(crate) const RST: TcpFlags = TcpFlags::RST;

/// One proxied TCP connection, from accept to close.
async fn connection(
    mut client: TcpStream,
    peer: SocketAddr,
    svc: Arc<SvcState>,
    ctx: Arc<Ctx>,
    adm: Admission,
) {
    let vip = svc.vip;
    let (mut caddr, mut orig_dst) = (peer, vip);
    if ctx.trusted(peer.ip()) {
        let t = ctx.config.proxy_header_timeout;
        let got = match tokio::time::timeout(t, read_proxy_header(&mut client)).await {
            Ok(r) => r,
            Err(_) => Err("no PROXY header in time".into()),
        };
        match got {
            Ok(Some((src, dst))) => (caddr, orig_dst) = (src, dst),
            Ok(None) => {}
            Err(e) => {
                ctx.stats
                    .proxy_header_rejected
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!("proxy: {peer}: {e}");
                sock::abort_on_close(&client);
                return;
            }
        }
    }
    let key = svc.key;
    let opened = ctx.director.with(|ipvs, now| {
        ipvs.open(now, Protocol::Tcp, caddr, vip)
            .map(|f| plan_of(ipvs, &key, f))
    });
    let mut plan = match opened {
        Some(Ok(p)) => p,
        Some(Err(verdict)) => {
            ctx.stats.refused_no_dest.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("proxy: {caddr} -> {vip} refused: {verdict:?}");
            sock::abort_on_close(&client);
            return;
        }
        None => return,
    };
    let mut guard = ConnGuard::new(ctx.clone(), plan.fwd.conn);
    guard.meter.already_counted_in_pkts(1);
    // A request already waiting (clients send right after connecting) is
    // read now and goes out with the handshake's last ACK; so does a PROXY
    // header. A connection without either connects as usual: a server that
    // speaks first (SMTP, SSH, databases) gets its ACK at once.
    let mut first = Vec::new();
    {
        let mut buf = [0u8; 4096];
        match sock::read_waiting(&client, &mut buf) {
            Ok(n) => first.extend_from_slice(&buf[..n]),
            Err(e) => {
                tracing::debug!("proxy: {caddr}: {e}");
                return;
            }
        }
    }
    let mut failed: Vec<DestId> = Vec::new();
    let server = loop {
        let dst = SocketAddr::new(plan.fwd.daddr, plan.fwd.dport);
        ctx.set_dest(adm.serial, (plan.fwd.daddr, plan.fwd.dport));
        let err = match tokio::time::timeout(
            ctx.config.connect_timeout,
            connect_pooled(
                &ctx,
                &svc,
                &plan.pool,
                dst,
                !first.is_empty() || plan.proxy_protocol.is_some(),
            ),
        )
        .await
        {
            Ok(Ok(s)) => break s,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        ctx.stats.connect_failures.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("proxy: connect {dst} for {caddr}: {err}");
        let attempts = u32::try_from(failed.len()).unwrap_or(u32::MAX);
        let Some(id) = guard.id.take() else { return };
        if attempts >= ctx.config.connect_retries {
            guard.id = Some(id);
            sock::abort_on_close(&client);
            return;
        }
        ctx.stats.retries.fetch_add(1, Ordering::Relaxed);
        failed.push(plan.fwd.dest);
        // retry_elsewhere releases the old entry whatever it answers.
        let again = ctx.director.with(|ipvs, now| {
            ipvs.retry_elsewhere(now, id, &failed, Protocol::Tcp, caddr, vip)
                .map(|f| plan_of(ipvs, &key, f))
        });
        match again {
            Some(Ok(p)) => {
                guard.id = p.fwd.conn;
                plan = p;
            }
            _ => {
                sock::abort_on_close(&client);
                return;
            }
        }
    };
    // From a pool: `-Lcn` shows the local address and port (FULLNAT).
    if let (false, Some(id), Ok(local)) = (plan.pool.is_empty(), guard.id, server.local_addr()) {
        ctx.director.with(|ipvs, _| ipvs.set_conn_local(id, local));
    }
    guard.event(Direction::Output, L4::Tcp(SYNACK));
    guard.event(Direction::Input, L4::Tcp(ACK));
    // The client socket inherited TCP_NODELAY from the listener (Linux).
    if !cfg!(target_os = "linux") {
        let _ = client.set_nodelay(true);
    }
    // The server socket got TCP_NODELAY before its connect (sock::connect).
    let mut server = server;
    // The PROXY header and the waiting request leave in one segment.
    let mut hdr = Vec::new();
    if let Some(version) = plan.proxy_protocol {
        let built = match version {
            ProxyProtocol::V1 => {
                pp::write_v1(caddr, orig_dst, &mut hdr);
                Ok(())
            }
            ProxyProtocol::V2 => pp::write_v2(
                pp::Command::Proxy,
                pp::Transport::Stream,
                Some((caddr, orig_dst)),
                &[],
                &mut hdr,
            ),
        };
        if let Err(e) = built {
            tracing::debug!("proxy: PROXY header to {}: {e}", plan.fwd.daddr);
            sock::abort_on_close(&client);
            return;
        }
    }
    if !first.is_empty() {
        guard
            .meter
            .in_bytes
            .fetch_add(first.len() as u64, Ordering::Relaxed);
        if hdr.is_empty() {
            hdr = first;
        } else {
            hdr.extend_from_slice(&first);
        }
    }
    if !hdr.is_empty()
        && let Err(e) = server.write_all(&hdr).await
    {
        tracing::debug!("proxy: first bytes to {}: {e}", plan.fwd.daddr);
        sock::abort_on_close(&client);
        return;
    }
    let end = relay::relay(&client, &server, &guard, plan.idle, &adm.kill, &ctx).await;
    tracing::trace!("proxy: {caddr} -> {vip} ended: {end:?}");
    drop(guard);
    drop(adm);
}
