//! [`ProxyPlane`]: the `DataPlane` that binds a socket per virtual service
//! and drives the director per connection.
//!
//! `apply` runs inside rvsd's runtime while the control plane's lock is
//! held, so it never calls the director itself (the lock is not
//! re-entrant): it binds sockets, spawns tasks and arms drain timers; the
//! tasks talk to the director later, from their own polls.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_control::dataplane::{DataPlane, DataPlaneError, DirectorHandle};
use rvs_control::protocol::Command;
use rvs_core::ipvs::Ipvs;
use rvs_core::model::{DestConfig, Protocol, QuicLbConfig, ServiceKey, SourceRange};
use rvs_core::time::Instant;
use tokio::sync::{Notify, watch};

use crate::sock;

/// Settings of the proxy data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// How long one connection attempt to a real server may take.
    pub connect_timeout: Duration,
    /// How many other real servers to try after a failed connect (2: up to
    /// three servers per client connection).
    pub connect_retries: u32,
    /// File descriptors the proxy may hold for connections; a connection
    /// that would exceed it is refused at once rather than failing midway.
    /// A TCP connection costs 2 (client and server sockets) plus 4 for its
    /// two splice pipes; a UDP flow costs 1.
    pub fd_budget: usize,
    /// `None`: connections of a deleted real server (or service) run until
    /// they end. `Some(d)`: they are closed `d` after the deletion.
    pub drain_grace: Option<Duration>,
    /// Networks (address, prefix length) of upstream balancers whose
    /// connections MUST start with a PROXY header, which then gives the
    /// client address. Empty: never read one. Data from any other peer is
    /// never parsed as a header.
    pub trusted_proxies: Vec<(IpAddr, u8)>,
    /// How long a trusted peer may take to send its PROXY header.
    pub proxy_header_timeout: Duration,
    /// Relay with splice(2) through pipes (zero copy) instead of copying
    /// through a buffer. Linux only.
    pub splice: bool,
    /// Bind the virtual services' sockets with `SO_REUSEPORT`, so that
    /// several rvsd processes on one host serve the same services, the
    /// kernel spreading new connections (and UDP flows, by their 4-tuple)
    /// over them: nginx's `reuseport` workers, HAProxy's processes. Each
    /// process holds, counts and lists only its own connections; one
    /// process's descriptors (RLIMIT_NOFILE) bound only its share. Off by
    /// default, so that a second rvsd started by mistake fails to bind
    /// (EADDRINUSE) instead of quietly taking half the traffic.
    pub reuse_port: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            connect_timeout: Duration::from_secs(3),
            connect_retries: 2,
            fd_budget: sock::default_fd_budget(),
            drain_grace: None,
            trusted_proxies: Vec::new(),
            proxy_header_timeout: Duration::from_secs(3),
            splice: cfg!(target_os = "linux"),
            reuse_port: false,
        }
    }
}

/// Counters of the proxy, readable by rvsd at any time (exported as
/// `rvs_proxy_*`). Monotonic except the `active_*` gauges.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// TCP connections accepted on virtual service sockets.
    pub accepted: AtomicU64,
    /// Connections refused because the service reached `max_conns`.
    pub refused_max_conns: AtomicU64,
    /// Connections refused and datagrams dropped because their client is
    /// outside the service's `source_ranges`.
    pub refused_source: AtomicU64,
    /// Connections refused because the fd budget was spent.
    pub refused_fd_budget: AtomicU64,
    /// `accept(2)` failures (EMFILE, ENFILE, ENOBUFS, ...).
    pub accept_errors: AtomicU64,
    /// Failed connection attempts to real servers (each attempt counts).
    pub connect_failures: AtomicU64,
    /// Connection attempts (TCP) and new sessions (UDP) to a real server
    /// refused because no address of the service's local address pool had
    /// a port left toward it (each attempt counts; a UDP session's first
    /// datagram is dropped; the kernel never hands out a 4-tuple twice, so
    /// this is where the excess goes rather than into a collision).
    pub laddr_exhausted: AtomicU64,
    /// Attempts moved to another real server after a failure.
    pub retries: AtomicU64,
    /// Connections from trusted proxies dropped for a missing, malformed,
    /// oversized or late PROXY header.
    pub proxy_header_rejected: AtomicU64,
    /// Client connections or flows the director refused (no real server,
    /// table full).
    pub refused_no_dest: AtomicU64,
    /// Proxied TCP connections open now.
    pub active_tcp: AtomicU64,
    /// UDP flows open now.
    pub active_udp_flows: AtomicU64,
    /// File descriptors held for connections and flows now.
    pub fds_in_use: AtomicUsize,
}

/// Live connections, for the drain-grace timers.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    next: u64,
    conns: HashMap<u64, LiveConn>,
    /// Bumped when a real server is added or deleted, so a pending drain
    /// timer of a server that came back does nothing.
    dest_gen: HashMap<(ServiceKey, IpAddr, u16), u64>,
}

#[derive(Debug)]
struct LiveConn {
    service: ServiceKey,
    dest: Option<(IpAddr, u16)>,
    kill: Arc<Notify>,
}

/// What every task of the plane shares.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) config: ProxyConfig,
    pub(crate) director: DirectorHandle,
    pub(crate) stats: Arc<ProxyStats>,
    pub(crate) pipes: crate::relay::PipePool,
    registry: Mutex<Registry>,
}

impl Ctx {
    /// True when `ip` is a trusted upstream proxy.
    pub(crate) fn trusted(&self, ip: IpAddr) -> bool {
        self.config
            .trusted_proxies
            .iter()
            .any(|&(net, p)| sock::in_cidr(ip, net, p))
    }

    /// Reserve `n` fds from the budget; false when it would overflow.
    pub(crate) fn reserve_fds(&self, n: usize) -> bool {
        let prev = self.stats.fds_in_use.fetch_add(n, Ordering::Relaxed);
        if prev.saturating_add(n) > self.config.fd_budget {
            self.stats.fds_in_use.fetch_sub(n, Ordering::Relaxed);
            false
        } else {
            true
        }
    }

    /// Register a live connection of `service`; returns its serial and the
    /// signal a drain timer uses to close it.
    pub(crate) fn register(&self, service: ServiceKey) -> (u64, Arc<Notify>) {
        let kill = Arc::new(Notify::new());
        let mut r = self.lock_registry();
        r.next = r.next.wrapping_add(1);
        let serial = r.next;
        r.conns.insert(
            serial,
            LiveConn {
                service,
                dest: None,
                kill: kill.clone(),
            },
        );
        (serial, kill)
    }

    /// Record which real server a registered connection uses.
    pub(crate) fn set_dest(&self, serial: u64, dest: (IpAddr, u16)) {
        if let Some(c) = self.lock_registry().conns.get_mut(&serial) {
            c.dest = Some(dest);
        }
    }

    /// Forget a connection.
    pub(crate) fn unregister(&self, serial: u64) {
        self.lock_registry().conns.remove(&serial);
    }

    fn lock_registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while holding it leaves plain data behind: keep going.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump_gen(&self, key: (ServiceKey, IpAddr, u16)) -> u64 {
        let mut r = self.lock_registry();
        let g = r.dest_gen.entry(key).or_insert(0);
        *g = g.wrapping_add(1);
        *g
    }

    /// Close, `grace` from now, the connections matching `pick` now (if
    /// `still` holds then).
    fn drain_later(
        self: &Arc<Self>,
        grace: Duration,
        pick: impl Fn(&LiveConn) -> bool,
        still: impl Fn(&Registry) -> bool + Send + 'static,
    ) {
        let kills: Vec<Arc<Notify>> = self
            .lock_registry()
            .conns
            .values()
            .filter(|c| pick(c))
            .map(|c| c.kill.clone())
            .collect();
        if kills.is_empty() {
            return;
        }
        let ctx = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if still(&ctx.lock_registry()) {
                for k in kills {
                    // Stores a permit if the connection is not waiting yet.
                    k.notify_one();
                }
            }
        });
    }
}

/// Per-service state shared with its tasks.
#[derive(Debug)]
pub(crate) struct SvcState {
    pub(crate) key: ServiceKey,
    pub(crate) vip: SocketAddr,
    /// `max_conns` of the service (0 = unlimited); follows `-E`.
    pub(crate) max_conns: AtomicU32,
    /// The client blocks the service admits (empty = all); follows `-E`.
    pub(crate) sources: std::sync::RwLock<Arc<[SourceRange]>>,
    /// Connections (TCP) or flows (UDP) open now.
    pub(crate) active: AtomicU32,
    /// The next local pool address in turn (connections spread over it).
    pub(crate) next_laddr: AtomicU64,
    /// QUIC-LB routing of a UDP service with `--quic-lb` configs (`None`:
    /// plain scheduling); replaced whole on every change.
    pub(crate) quic: std::sync::RwLock<Option<Arc<crate::quic::QuicRoutes>>>,
    /// QUIC-LB routing counts since the last report.
    pub(crate) quic_counts: crate::quic::QuicCounts,
}

impl SvcState {
    /// The QUIC-LB routing table now (`None`: not a QUIC-LB service).
    pub(crate) fn quic_routes(&self) -> Option<Arc<crate::quic::QuicRoutes>> {
        self.quic
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether a client at `ip` may use the service (its `source_ranges`);
    /// a refusal is counted.
    pub(crate) fn admits(&self, ip: IpAddr, stats: &ProxyStats) -> bool {
        let ok = SourceRange::admits(
            &self
                .sources
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            ip,
        );
        if !ok {
            stats.refused_source.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Take a slot unless the service is at `max_conns`.
    pub(crate) fn try_take(&self) -> bool {
        let max = self.max_conns.load(Ordering::Relaxed);
        let prev = self.active.fetch_add(1, Ordering::Relaxed);
        if max != 0 && prev >= max {
            self.active.fetch_sub(1, Ordering::Relaxed);
            false
        } else {
            true
        }
    }
}

/// A service's socket, kept so it can be handed to a new rvsd.
#[derive(Debug)]
enum SvcSocket {
    /// The listener (the accept loop holds a clone).
    Tcp(Arc<tokio::net::TcpListener>),
    /// The datagram socket (the UDP loop holds a clone).
    Udp(Arc<tokio::net::UdpSocket>),
}

#[derive(Debug)]
struct Listener {
    svc: Arc<SvcState>,
    /// Dropping it stops the socket's task; sending `true` retires it
    /// (TCP: stop accepting; UDP: stop reading, let the flows time out).
    stop: watch::Sender<bool>,
    sock: SvcSocket,
    /// Shut a TCP listener down when dropped (off when it was handed over:
    /// the new rvsd listens on the same socket).
    shutdown_on_drop: bool,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let (SvcSocket::Tcp(l), true) = (&self.sock, self.shutdown_on_drop) {
            // Leaves LISTEN state now, so the port can be listened on again
            // in the same batch of commands (a reload that deletes and
            // re-adds a service) before the task has exited: pending
            // connections in the backlog are reset, and a new SO_REUSEADDR
            // listener may bind the port.
            let _ = socket2::SockRef::from(&**l).shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Why a socket handed over by the rvsd being taken over cannot serve a
/// service.
#[derive(Debug, thiserror::Error)]
#[error("handed socket for {service}: {why}")]
pub struct AdoptError {
    /// The service it was described as (`TCP 127.0.0.1:80`).
    pub service: String,
    /// What is wrong with it.
    pub why: String,
}

/// The userspace proxy data plane (`rvsd --dataplane proxy`).
#[derive(Debug)]
pub struct ProxyPlane {
    config: ProxyConfig,
    stats: Arc<ProxyStats>,
    ctx: Option<Arc<Ctx>>,
    listeners: HashMap<ServiceKey, Listener>,
    /// Sockets handed over by the rvsd this one took over, until a service
    /// claims them ([`ProxyPlane::adopt`]).
    handed: HashMap<ServiceKey, socket2::Socket>,
    /// Retired UDP sockets' stop signals: their loops serve the flows they
    /// have until those time out; dropping these ends them.
    retired: Vec<watch::Sender<bool>>,
    /// This rvsd handed its sockets over and takes no new traffic.
    retiring: bool,
    /// Each service's QUIC-LB configs and real servers as the commands
    /// left them, to rebuild its routing table from.
    quic_model: HashMap<ServiceKey, (Vec<QuicLbConfig>, Vec<DestConfig>)>,
}

impl ProxyPlane {
    /// A proxy plane with these settings; it carries traffic once
    /// [`DataPlane::attach`] gave it the director.
    pub fn new(config: ProxyConfig) -> Self {
        ProxyPlane {
            config,
            stats: Arc::new(ProxyStats::default()),
            ctx: None,
            listeners: HashMap::new(),
            handed: HashMap::new(),
            retired: Vec::new(),
            retiring: false,
            quic_model: HashMap::new(),
        }
    }

    /// Take a socket the rvsd being taken over handed to this one, for
    /// `key`'s service when it is added (instead of binding a new one).
    /// Checked here: a TCP service needs a listening stream socket, a UDP
    /// service a datagram socket, bound to the service's address and port.
    pub fn adopt(&mut self, key: ServiceKey, fd: std::os::fd::OwnedFd) -> Result<(), AdoptError> {
        let s = socket2::Socket::from(fd);
        let Some((protocol, vip)) = key.socket_addr() else {
            return Err(AdoptError {
                service: format!("{key:?}"),
                why: "not an address service".into(),
            });
        };
        let bad = |why: String| AdoptError {
            service: format!("{} {vip}", protocol.name()),
            why,
        };
        let io = |what: &str, e: std::io::Error| bad(format!("{what}: {e}"));
        let ty = s.r#type().map_err(|e| io("SO_TYPE", e))?;
        match protocol {
            Protocol::Tcp => {
                if ty != socket2::Type::STREAM
                    || !s.is_listener().map_err(|e| io("SO_ACCEPTCONN", e))?
                {
                    return Err(bad("not a listening TCP socket".into()));
                }
            }
            Protocol::Udp => {
                if ty != socket2::Type::DGRAM {
                    return Err(bad("not a UDP socket".into()));
                }
            }
            Protocol::Sctp => return Err(bad("SCTP services are not proxied".into())),
        }
        let local = s
            .local_addr()
            .map_err(|e| io("getsockname", e))?
            .as_socket()
            .ok_or_else(|| bad("not an IP socket".into()))?;
        if local.ip() != vip.ip() || local.port() != vip.port() {
            return Err(bad(format!("bound to {local}, not {vip}")));
        }
        s.set_nonblocking(true).map_err(|e| io("O_NONBLOCK", e))?;
        self.handed.insert(key, s);
        Ok(())
    }

    /// The counters, shared: read them from anywhere.
    pub fn stats(&self) -> Arc<ProxyStats> {
        self.stats.clone()
    }

    /// The services with a bound socket now.
    pub fn listening(&self) -> impl Iterator<Item = &ServiceKey> {
        self.listeners.keys()
    }

    fn err(message: String) -> DataPlaneError {
        DataPlaneError {
            plane: "proxy",
            message,
        }
    }

    fn add_service(
        &mut self,
        key: ServiceKey,
        max_conns: u32,
        sources: &[SourceRange],
    ) -> Result<(), DataPlaneError> {
        let (protocol, vip) = match key {
            ServiceKey::Addr { port: 0, addr, .. } => {
                return Err(Self::err(format!(
                    "{addr}:0: port-zero services cannot be proxied (no port to listen on)"
                )));
            }
            ServiceKey::Fwmark { mark, .. } => {
                return Err(Self::err(format!(
                    "fwmark {mark}: firewall-mark services cannot be proxied (no address to listen on)"
                )));
            }
            ServiceKey::Addr {
                protocol: Protocol::Sctp,
                addr,
                port,
            } => {
                return Err(Self::err(format!(
                    "SCTP {}: SCTP services cannot be proxied",
                    SocketAddr::new(addr, port)
                )));
            }
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => (protocol, SocketAddr::new(addr, port)),
        };
        if self.retiring {
            // This rvsd handed its sockets to the one that took it over.
            return Ok(());
        }
        let ctx = self.ctx.clone().ok_or_else(|| {
            Self::err(format!("{vip}: no director attached, cannot carry traffic"))
        })?;
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| Self::err(format!("{vip}: no tokio runtime: {e}")))?;
        let _enter = rt.enter();
        // A re-added service replaces its socket.
        self.listeners.remove(&key);
        let svc = Arc::new(SvcState {
            key,
            vip,
            max_conns: AtomicU32::new(max_conns),
            sources: std::sync::RwLock::new(sources.into()),
            active: AtomicU32::new(0),
            next_laddr: AtomicU64::new(0),
            quic: std::sync::RwLock::new(None),
            quic_counts: crate::quic::QuicCounts::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let bind_err =
            |e: std::io::Error| Self::err(format!("cannot bind {} {vip}: {e}", protocol.name()));
        let reuse_port = ctx.config.reuse_port;
        let handed = self.handed.remove(&key);
        let from = if handed.is_some() {
            "handed over"
        } else {
            "bound"
        };
        let sock = match protocol {
            Protocol::Tcp => {
                let std_l = match handed {
                    Some(s) => s.into(),
                    None => sock::bind_tcp(vip, reuse_port).map_err(bind_err)?,
                };
                let l = Arc::new(tokio::net::TcpListener::from_std(std_l).map_err(bind_err)?);
                rt.spawn(crate::tcp::accept_loop(
                    l.clone(),
                    svc.clone(),
                    ctx,
                    stopped,
                ));
                SvcSocket::Tcp(l)
            }
            _ => {
                let std_s = match handed {
                    Some(s) => s.into(),
                    None => sock::bind_udp(vip, reuse_port).map_err(bind_err)?,
                };
                let s = Arc::new(tokio::net::UdpSocket::from_std(std_s).map_err(bind_err)?);
                rt.spawn(crate::udp::udp_loop(s.clone(), svc.clone(), ctx, stopped));
                SvcSocket::Udp(s)
            }
        };
        tracing::info!("proxy: listening on {} {vip} ({from})", protocol.name());
        self.listeners.insert(
            key,
            Listener {
                svc,
                stop,
                sock,
                shutdown_on_drop: true,
            },
        );
        Ok(())
    }

    /// Carry out one command (the QUIC-LB model aside).
    fn apply_command(&mut self, command: &Command) -> Result<(), DataPlaneError> {
        match command {
            Command::AddService { key, config } => {
                self.add_service(*key, config.max_conns, &config.source_ranges)
            }
            Command::EditService { key, config } => {
                if let Some(l) = self.listeners.get(key) {
                    l.svc.max_conns.store(config.max_conns, Ordering::Relaxed);
                    *l.svc
                        .sources
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        config.source_ranges.as_slice().into();
                }
                Ok(())
            }
            Command::DelService { key } => {
                // Existing connections keep running (drain).
                self.listeners.remove(key);
                self.drain_service(Some(*key));
                Ok(())
            }
            Command::Clear => {
                self.listeners.clear();
                self.drain_service(None);
                Ok(())
            }
            Command::AddDest { service, dest } => {
                if let Some(ctx) = &self.ctx {
                    ctx.bump_gen((*service, dest.addr, dest.port));
                }
                Ok(())
            }
            Command::DelDest {
                service,
                addr,
                port,
            } => {
                if let (Some(ctx), Some(grace)) = (&self.ctx, self.config.drain_grace) {
                    let k = (*service, *addr, *port);
                    let gen_at = ctx.bump_gen(k);
                    let (service, addr, port) = k;
                    ctx.drain_later(
                        grace,
                        move |c| c.service == service && c.dest == Some((addr, port)),
                        move |r| r.dest_gen.get(&k) == Some(&gen_at),
                    );
                }
                Ok(())
            }
            // Nothing to carry out here: a pool lives in the director's
            // model, and each connection reads it there (`tcp::plan_of`).
            Command::EditDest { .. }
            | Command::AddLaddr { .. }
            | Command::DelLaddr { .. }
            | Command::Zero { .. }
            | Command::SetTimeouts { .. } => Ok(()),
        }
    }

    /// Rebuild `key`'s QUIC-LB routing table from the commands' model.
    fn refresh_quic(&self, key: &ServiceKey) -> Result<(), DataPlaneError> {
        let Some(l) = self.listeners.get(key) else {
            return Ok(());
        };
        let routes = match self.quic_model.get(key) {
            Some((configs, dests)) if !configs.is_empty() => Some(Arc::new(
                crate::quic::QuicRoutes::build(configs, dests, l.svc.vip.port())
                    .map_err(|e| Self::err(format!("{}: {e}", l.svc.vip)))?,
            )),
            _ => None,
        };
        *l.svc
            .quic
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
        Ok(())
    }

    /// Keep the QUIC-LB model in step with a command (before the command
    /// is carried out; [`ProxyPlane::refresh_quic`] after).
    fn track_quic(&mut self, command: &Command) -> Option<ServiceKey> {
        match command {
            Command::AddService { key, config } => {
                self.quic_model
                    .insert(*key, (config.quic_lb.clone(), Vec::new()));
                Some(*key)
            }
            Command::EditService { key, config } => {
                let m = self.quic_model.entry(*key).or_default();
                m.0 = config.quic_lb.clone();
                Some(*key)
            }
            Command::DelService { key } => {
                self.quic_model.remove(key);
                None
            }
            Command::Clear => {
                self.quic_model.clear();
                None
            }
            Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
                let m = self.quic_model.entry(*service).or_default();
                m.1.retain(|d| !(d.addr == dest.addr && d.port == dest.port));
                m.1.push(*dest);
                Some(*service)
            }
            Command::DelDest {
                service,
                addr,
                port,
            } => {
                let m = self.quic_model.entry(*service).or_default();
                m.1.retain(|d| !(d.addr == *addr && d.port == *port));
                Some(*service)
            }
            _ => None,
        }
    }

    fn drain_service(&self, key: Option<ServiceKey>) {
        let (Some(ctx), Some(grace)) = (&self.ctx, self.config.drain_grace) else {
            return;
        };
        ctx.drain_later(grace, move |c| key.is_none_or(|k| c.service == k), |_| true);
    }
}

impl DataPlane for ProxyPlane {
    fn name(&self) -> &'static str {
        "proxy"
    }

    /// Yes: a connection from outside a service's source ranges is reset
    /// when accepted, before any real server is chosen; such a datagram is
    /// dropped.
    fn enforces_source_ranges(&self) -> bool {
        true
    }

    fn attach(&mut self, director: DirectorHandle) {
        self.ctx = Some(Arc::new(Ctx {
            config: self.config.clone(),
            director,
            stats: self.stats.clone(),
            pipes: crate::relay::PipePool::default(),
            registry: Mutex::new(Registry::default()),
        }));
    }

    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError> {
        let quic = self.track_quic(command);
        self.apply_command(command)?;
        match quic {
            Some(key) => self.refresh_quic(&key),
            None => Ok(()),
        }
    }

    fn report(&mut self, _now: Instant, ipvs: &mut Ipvs) {
        for (key, l) in &self.listeners {
            let delta = l.svc.quic_counts.take();
            if delta != rvs_core::stats::QuicLbCounters::default() {
                ipvs.add_quic_lb_counters(key, &delta);
            }
        }
    }

    fn handover_sockets(&self) -> Result<Vec<(ServiceKey, OwnedFd)>, DataPlaneError> {
        self.listeners
            .iter()
            .map(|(key, l)| {
                let dup = match &l.sock {
                    SvcSocket::Tcp(t) => socket2::SockRef::from(&**t).try_clone(),
                    SvcSocket::Udp(u) => socket2::SockRef::from(&**u).try_clone(),
                };
                dup.map(|s| (*key, OwnedFd::from(s)))
                    .map_err(|e| Self::err(format!("{}: duplicating its socket: {e}", l.svc.vip)))
            })
            .collect()
    }

    fn release_handed(&mut self) -> Vec<ServiceKey> {
        self.handed.drain().map(|(k, _)| k).collect()
    }

    fn retire(&mut self) {
        self.retiring = true;
        for (_, mut l) in self.listeners.drain() {
            // The new rvsd listens on this very socket: no shutdown.
            l.shutdown_on_drop = false;
            let _ = l.stop.send(true);
            if matches!(l.sock, SvcSocket::Udp(_)) {
                // Keep the sender: dropping it would end the flows now.
                let (tx, _) = watch::channel(true);
                self.retired.push(std::mem::replace(&mut l.stop, tx));
            }
        }
        self.handed.clear();
    }

    fn live(&self) -> u64 {
        self.stats.active_tcp.load(Ordering::Relaxed)
            + self.stats.active_udp_flows.load(Ordering::Relaxed)
    }

    fn abort_live(&mut self) {
        self.retired.clear();
        if let Some(ctx) = &self.ctx {
            ctx.drain_later(Duration::ZERO, |_| true, |_| true);
        }
    }
}
