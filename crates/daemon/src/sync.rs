//! IPVS connection synchronisation (`ipvsadm --start-daemon master|backup`,
//! keepalived's `lvs_sync_daemon`): the tokio driver of
//! [`rvs_control::sync::Endpoint`], which holds every decision (the
//! master's walk and refresh, bulk resync requests and answers, who
//! answers, what of a peer's entry is entered, what is pruned; see its
//! module doc for the protocol and the N-director rules). Here are only the
//! sockets (the master's sending socket and a socket joined to the sync
//! group, for each daemon), the timer the endpoint asks for, and the
//! requests to the daemon's owner task that lend the endpoint the director
//! ([`Endpoint::process`], through [`Msg::SyncStep`]) and record that peers
//! were heard.
//!
//! Both daemons can run at once on one rvsd (N directors behind ECMP:
//! keepalived.conf's `lvs_sync_daemon IFACE` without an instance); the
//! entries entered from peers ([`Received`]) are shared by them so the
//! master does not send its peers' flows back.

use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_control::sync::{self as endpoint, Endpoint, Event, Received};
use rvs_core::time::Instant;
use rvs_ipvsadm::{DaemonConfig, SyncState};
use rvs_wire::ipvs_sync as wire;
use tokio::sync::watch;

use crate::daemon::Daemon;
use crate::handle::{DaemonHandle, Msg};

/// The running daemons of one rvsd.
#[derive(Default)]
pub struct SyncDaemons {
    master: Option<Running>,
    backup: Option<Running>,
    /// Entries a backup entered, so a master running beside it does not
    /// send them back.
    received: Arc<Mutex<Received>>,
    /// When the backup daemon last entered peers' entries.
    heard: Option<Instant>,
    /// What the daemons' tasks sent and received (read by the metrics).
    stats: Arc<SyncStats>,
}

/// One sync daemon's traffic, counted by its task as it goes.
#[derive(Default, Debug)]
pub struct RoleStats {
    /// Datagrams sent (sync messages, requests and bulk answers).
    pub sent: AtomicU64,
    /// Their bytes.
    pub sent_bytes: AtomicU64,
    /// Datagrams that could not be sent.
    pub send_errors: AtomicU64,
    /// Datagrams received on the group.
    pub received: AtomicU64,
    /// Their bytes.
    pub received_bytes: AtomicU64,
}

/// The master's and the backup's traffic, shared by the daemon with its
/// sync tasks and the metrics ([`crate::handle::Live::sync`]).
#[derive(Default, Debug)]
pub struct SyncStats {
    /// The master daemon's.
    pub master: RoleStats,
    /// The backup daemon's.
    pub backup: RoleStats,
}

impl RoleStats {
    /// Sent, sent bytes, send errors, received, received bytes.
    pub fn values(&self) -> [u64; 5] {
        [
            &self.sent,
            &self.sent_bytes,
            &self.send_errors,
            &self.received,
            &self.received_bytes,
        ]
        .map(|n| n.load(Ordering::Relaxed))
    }
}

impl SyncStats {
    /// The counters of the master (`true`) or the backup.
    pub fn role(&self, master: bool) -> &RoleStats {
        if master { &self.master } else { &self.backup }
    }
}

/// A sync daemon as the metrics show it: its role, and for a backup how
/// long ago it last entered its peers' entries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunningSnap {
    /// The master (else the backup).
    pub master: bool,
    /// Milliseconds since the backup last entered peers' entries (`None`:
    /// a master, or a backup that has not heard a peer since its start).
    pub heard_ago_ms: Option<u64>,
}

/// Count one datagram of `len` bytes.
fn count(n: &AtomicU64, bytes: &AtomicU64, len: usize) {
    n.fetch_add(1, Ordering::Relaxed);
    bytes.fetch_add(len as u64, Ordering::Relaxed);
}

struct Running {
    cfg: DaemonConfig,
    /// Its message size, as the kernel settles it
    /// ([`DaemonConfig::effective_maxlen`]).
    maxlen: u16,
    /// When it started (daemon time).
    started: Instant,
    stop: watch::Sender<bool>,
    /// Started for keepalived.conf's `lvs_sync_daemon` (and so stopped or
    /// switched by it), not by rvsadm.
    managed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl SyncDaemons {
    /// The running daemons as `ipvsadm -L --daemon` lists them (master first).
    pub fn snaps(&self) -> Vec<rvs_ipvsadm::snapshot::DaemonSnap> {
        [&self.master, &self.backup]
            .into_iter()
            .flatten()
            .map(|r| rvs_ipvsadm::snapshot::DaemonSnap {
                master: is_master(&r.cfg),
                mcast_ifn: r.cfg.mcast_ifn.clone(),
                syncid: r.cfg.syncid,
                sync_maxlen: r.maxlen,
                mcast_group: Some(group(&r.cfg)),
                mcast_port: r.cfg.mcast_port.unwrap_or(wire::SYNC_PORT),
                mcast_ttl: r.cfg.mcast_ttl.unwrap_or(1),
            })
            .collect()
    }

    /// Whether a backup daemon is still gathering its peers' tables after
    /// its start: less than [`endpoint::WARM_MAX`] ago, and its bulk answers
    /// have not yet gone quiet for [`endpoint::WARM_QUIET`]. A joining director of an ECMP
    /// fleet announces its VIPs only after that, so the flows ECMP moves to
    /// it are already in its table.
    pub fn warming(&self, now: Instant) -> bool {
        endpoint::warming(self.backup.as_ref().map(|r| r.started), self.heard, now)
    }

    /// The counters the daemons' tasks keep.
    pub fn stats(&self) -> Arc<SyncStats> {
        self.stats.clone()
    }

    /// The running daemons (master first) at `now`, for the metrics.
    pub fn running_at(&self, now: Instant) -> Vec<RunningSnap> {
        let heard_ago_ms = self
            .heard
            .map(|h| u64::try_from(now.saturating_since(h).as_millis()).unwrap_or(u64::MAX));
        [(&self.master, true), (&self.backup, false)]
            .into_iter()
            .filter(|(r, _)| r.is_some())
            .map(|(_, master)| RunningSnap {
                master,
                heard_ago_ms: if master { None } else { heard_ago_ms },
            })
            .collect()
    }

    /// What the dashboard shows of the daemons at `now` beyond `-L
    /// --daemon`: whether each kind runs, how long ago (milliseconds) the
    /// backup last entered its peers' entries (its lag behind them: `null`
    /// before it heard any), whether it still gathers their tables, how
    /// many entries it holds from them, and each role's traffic
    /// (`[sent, sent bytes, send errors, received, received bytes]`).
    pub fn view(&self, now: Instant) -> serde_json::Value {
        let running = self.running_at(now);
        let backup = running.iter().find(|r| !r.master);
        serde_json::json!({
            "master": running.iter().any(|r| r.master),
            "backup": backup.is_some(),
            "heard_ms_ago": backup.and_then(|b| b.heard_ago_ms),
            "warming": self.warming(now),
            "received": self.received.lock().map_or(0, |r| r.len()),
            "traffic": {
                "master": self.stats.master.values(),
                "backup": self.stats.backup.values(),
            },
        })
    }

    /// Stop one daemon; ipvsadm's text when none runs.
    pub fn stop(&mut self, master: bool) -> Result<(), String> {
        let slot = if master {
            &mut self.master
        } else {
            &mut self.backup
        };
        match slot.take() {
            Some(_) => Ok(()),
            None => Err("No daemon is running".into()),
        }
    }

    /// Record a daemon whose sockets are open, unless one of its kind
    /// runs already (ipvsadm's text then); its start is `now`.
    pub fn record_started(
        &mut self,
        cfg: DaemonConfig,
        maxlen: u16,
        managed: bool,
        stop: watch::Sender<bool>,
        now: Instant,
    ) -> Result<Instant, String> {
        let master = is_master(&cfg);
        if (if master { &self.master } else { &self.backup }).is_some() {
            return Err("Daemon has already run".into());
        }
        if !master {
            self.heard = None;
        }
        let slot = if master {
            &mut self.master
        } else {
            &mut self.backup
        };
        *slot = Some(Running {
            cfg,
            maxlen,
            started: now,
            stop,
            managed,
        });
        Ok(now)
    }

    /// The backup heard its peers at `at`.
    pub fn set_heard(&mut self, at: Instant) {
        self.heard = Some(at);
    }

    /// The running daemon of each kind (master, backup): whether it was
    /// started for `lvs_sync_daemon`, and its configuration.
    fn running(&self) -> [Option<(bool, DaemonConfig)>; 2] {
        [&self.master, &self.backup].map(|r| r.as_ref().map(|r| (r.managed, r.cfg.clone())))
    }
}

/// What `lvs_sync_daemon` asks for and what runs, for [`follow_config`].
pub struct Wanted {
    /// keepalived.conf's `lvs_sync_daemon`.
    wanted: Option<rvs_config::model::LvsSyncDaemon>,
    /// Its VRRP instance's state.
    state: Option<rvs_core::vrrp::State>,
    /// Its VRRP instance's VRID.
    vrid: Option<u8>,
    /// The running daemons (master, backup).
    running: [Option<(bool, DaemonConfig)>; 2],
}

/// [`Wanted`] as the daemon has it now (served by its owner).
pub fn wanted(d: &mut Daemon) -> Wanted {
    let wanted = d.sync_wanted();
    let inst = wanted.as_ref().and_then(|w| w.instance.clone());
    let state = inst.as_ref().and_then(|i| d.vrrp_state(i));
    let vrid = inst.as_ref().and_then(|i| d.vrrp_vrid(i));
    Wanted {
        wanted,
        state,
        vrid,
        running: d.sync_daemons().running(),
    }
}

/// One step of a sync task's endpoint with the director (served by the
/// daemon's owner, [`Msg::SyncStep`]): whether the other daemon runs, the
/// datagram, and the endpoint's work on the table.
pub fn step(
    d: &mut Daemon,
    ep: &mut Endpoint,
    master: bool,
    input: Option<(Vec<u8>, SocketAddr)>,
    now: Instant,
) {
    let daemons = d.sync_daemons();
    ep.set_sibling(if master {
        daemons.backup.is_some()
    } else {
        daemons.master.is_some()
    });
    let received = daemons.received.clone();
    if let Some((buf, src)) = input {
        ep.handle(now, src, &buf);
    }
    if ep.needs_director() {
        let Ok(mut rx) = received.lock() else { return };
        ep.process(now, d.controller_mut(), &mut rx);
    }
}

fn is_master(cfg: &DaemonConfig) -> bool {
    cfg.state == SyncState::Master
}

fn group(cfg: &DaemonConfig) -> IpAddr {
    cfg.mcast_group.unwrap_or(IpAddr::V4(wire::SYNC_GROUP_V4))
}

/// `cfg`'s message size, as the kernel settles it (a backup's default is
/// its interface's MTU less the headers).
fn maxlen(cfg: &DaemonConfig) -> u16 {
    let mtu = rvs_sys::netlink::Netlink::open()
        .and_then(|mut nl| nl.link_by_name(&cfg.mcast_ifn))
        .ok()
        .flatten()
        .and_then(|l| l.mtu);
    cfg.effective_maxlen(mtu)
}

/// Start a daemon (`ipvsadm --start-daemon`): ipvsadm's texts for one that
/// already runs and for settings that cannot work.
pub async fn start(daemon: &DaemonHandle, cfg: DaemonConfig) -> Result<(), String> {
    start_as(daemon, cfg, false).await
}

/// Open the daemon's sockets off the runtime's threads (they read the
/// interface's addresses, a netlink dump, which may block), have the owner
/// record it, start its task.
async fn start_as(daemon: &DaemonHandle, cfg: DaemonConfig, managed: bool) -> Result<(), String> {
    let c = cfg.clone();
    let (maxlen, sock, other) = tokio::task::spawn_blocking(move || open(&c))
        .await
        .unwrap_or_else(|e| Err(format!("sync daemon: {e}")))?;
    let (stop, stopped) = watch::channel(false);
    let started = daemon
        .ask(|reply| Msg::SyncStarted {
            cfg: cfg.clone(),
            maxlen,
            managed,
            stop,
            reply,
        })
        .await
        .ok_or_else(|| "rvsd is stopping".to_owned())??;
    let master = is_master(&cfg);
    tracing::info!(target: "rvs::sync", "sync daemon started: {} on {}, syncid {}", if master { "master" } else { "backup" }, cfg.mcast_ifn, cfg.syncid);
    let task = Task {
        daemon: daemon.clone(),
        clock: Clock {
            at: std::time::Instant::now(),
            base: started,
        },
        cfg,
        maxlen,
        sock,
        other,
        stop: stopped,
    };
    tokio::spawn(run(task));
    Ok(())
}

/// The sockets of a daemon: its own, and the other one (`None` when it
/// cannot be opened, said in the log); its message size.
type Sockets = (u16, tokio::net::UdpSocket, Option<tokio::net::UdpSocket>);

fn open(cfg: &DaemonConfig) -> Result<Sockets, String> {
    let grp = group(cfg);
    if !grp.is_multicast() {
        return Err(format!("{grp} is not a multicast address"));
    }
    let maxlen = maxlen(cfg);
    let sock = if is_master(cfg) {
        master_socket(cfg, grp)
    } else {
        backup_socket(cfg, grp)
    }
    .map_err(|e| format!("sync daemon on {}: {e}", cfg.mcast_ifn))?;
    let other = if is_master(cfg) {
        backup_socket(cfg, grp)
    } else {
        master_socket(cfg, grp)
    };
    let other = other
        .map_err(|e| tracing::warn!(target: "rvs::sync", "sync daemon on {}: no bulk resync: {e}", cfg.mcast_ifn))
        .ok();
    Ok((maxlen, sock, other))
}

/// The interface's index.
fn ifindex(ifname: &str) -> std::io::Result<u32> {
    rvs_sys::iface::ifindex(ifname)
        .map_err(|_| std::io::Error::other(format!("no interface {ifname}")))
}

/// The sync group's address: `grp` on the configured port (IPVS's 8848
/// when none is); an IPv6 group scoped to the interface `index` (a
/// link-local group such as `ff02::81` means nothing without it).
fn group_addr(cfg: &DaemonConfig, grp: IpAddr, index: u32) -> SocketAddr {
    let port = cfg.mcast_port.unwrap_or(wire::SYNC_PORT);
    match grp {
        IpAddr::V4(g) => SocketAddr::V4(SocketAddrV4::new(g, port)),
        IpAddr::V6(g) => SocketAddr::V6(SocketAddrV6::new(g, port, 0, index)),
    }
}

/// UDP to group:port on the interface, TTL (hop limit) as asked, no loop
/// back, as the kernel's master: an IPv4 one from the interface's primary
/// address; an IPv6 one unbound (the kernel binds only IPv4 masters), so
/// its source is the route's (a link-local address for `ff02::/16`).
fn master_socket(cfg: &DaemonConfig, grp: IpAddr) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let index = ifindex(&cfg.mcast_ifn)?;
    let ttl = u32::from(cfg.mcast_ttl.unwrap_or(1));
    let s = match grp {
        IpAddr::V4(_) => {
            let addr = rvs_vrrp::net::primary_v4(&cfg.mcast_ifn)?
                .ok_or_else(|| std::io::Error::other("the interface has no IPv4 address"))?;
            let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
            s.bind_device(Some(cfg.mcast_ifn.as_bytes()))?;
            s.set_multicast_if_v4(&addr)?;
            s.set_multicast_ttl_v4(ttl)?;
            s.set_multicast_loop_v4(false)?;
            s.bind(&SocketAddr::V4(SocketAddrV4::new(addr, 0)).into())?;
            s
        }
        IpAddr::V6(_) => {
            let s = Socket::new(Domain::IPV6, Type::DGRAM, None)?;
            s.set_only_v6(true)?;
            s.bind_device(Some(cfg.mcast_ifn.as_bytes()))?;
            s.set_multicast_if_v6(index)?;
            s.set_multicast_hops_v6(ttl)?;
            s.set_multicast_loop_v6(false)?;
            s
        }
    };
    s.connect(&group_addr(cfg, grp, index).into())?;
    s.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(s.into())
}

/// UDP on group:port, on the interface, joined to the group there.
fn backup_socket(cfg: &DaemonConfig, grp: IpAddr) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, InterfaceIndexOrAddress, Socket, Type};
    let index = ifindex(&cfg.mcast_ifn)?;
    let domain = if grp.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::DGRAM, None)?;
    if grp.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.bind_device(Some(cfg.mcast_ifn.as_bytes()))?;
    s.bind(&group_addr(cfg, grp, index).into())?;
    match grp {
        IpAddr::V4(g) => s.join_multicast_v4_n(&g, &InterfaceIndexOrAddress::Index(index))?,
        IpAddr::V6(g) => s.join_multicast_v6(&g, index)?,
    }
    s.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(s.into())
}

/// The addresses of the sync interface (empty when they cannot be read:
/// then only the loopback setting keeps our own messages away).
fn own_addresses(ifname: &str) -> Vec<IpAddr> {
    let Ok(index) = ifindex(ifname) else {
        return Vec::new();
    };
    rvs_sys::netlink::Netlink::open()
        .and_then(|mut nl| nl.addresses(index))
        .map(|v| v.into_iter().map(|(a, _)| a).collect())
        .unwrap_or_else(|e| {
            tracing::warn!(target: "rvs::sync", "sync daemon on {ifname}: own addresses: {e}");
            Vec::new()
        })
}

/// What a sync task (master or backup) runs with.
struct Task {
    /// The daemon.
    daemon: DaemonHandle,
    /// The daemon's time.
    clock: Clock,
    cfg: DaemonConfig,
    /// The message size ([`DaemonConfig::effective_maxlen`]).
    maxlen: u16,
    /// The master's sending socket, or the backup's group socket.
    sock: tokio::net::UdpSocket,
    /// The other one: the master's group socket (requests, and answers to
    /// its own requests), the backup's sending socket (requests and bulk
    /// answers); `None` when it could not be opened (said in the log).
    other: Option<tokio::net::UdpSocket>,
    /// Turns true (or closes) when the task is to end.
    stop: watch::Receiver<bool>,
}

/// The daemon's time (`Daemon::now`) without asking it: `at` was `base`.
#[derive(Clone, Copy)]
struct Clock {
    at: std::time::Instant,
    base: Instant,
}

impl Clock {
    fn now(&self) -> Instant {
        let ms = u64::try_from(self.at.elapsed().as_millis()).unwrap_or(u64::MAX);
        Instant::from_millis(self.base.as_millis().saturating_add(ms))
    }
}

async fn recv_on(
    sock: Option<&tokio::net::UdpSocket>,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr)> {
    match sock {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

/// Log an endpoint's event; whether it says peers were heard.
fn log_event(cfg: &DaemonConfig, ev: Event) -> bool {
    let role = if is_master(cfg) { "master" } else { "backup" };
    let ifn = &cfg.mcast_ifn;
    match ev {
        Event::BulkRequested { nonce } => {
            tracing::info!(target: "rvs::sync", "sync {role} on {ifn}: bulk resync requested (nonce {nonce:#x})");
        }
        Event::BulkAsked { nonce } => {
            tracing::info!(target: "rvs::sync", "sync daemon on {ifn}: bulk resync asked (nonce {nonce:#x}); sending the table");
        }
        Event::BulkAnswered => {
            tracing::info!(target: "rvs::sync", "sync daemon on {ifn}: bulk resync answered");
        }
        Event::Heard => return true,
        Event::Unresolved { vip, dest } => {
            tracing::debug!(target: "rvs::sync", "sync backup: no service or real server for {vip:?} → {dest}");
        }
        Event::BadMessage(e) => {
            tracing::debug!(target: "rvs::sync", "sync daemon: bad message: {e}")
        }
        Event::CannotSend(e) => tracing::error!(target: "rvs::sync", "sync daemon: {e}"),
    }
    false
}

/// A master or backup daemon: the endpoint's timer, the group's messages,
/// the endpoint's datagrams out. The endpoint goes to the daemon's owner
/// for a datagram (whether the other daemon runs, entering entries) and
/// when it needs the director (the master's period, a bulk answer's page).
async fn run(mut task: Task) {
    let master = is_master(&task.cfg);
    let grp = group(&task.cfg);
    // Netlink blocks: not on the runtime's threads.
    let ifname = task.cfg.mcast_ifn.clone();
    let own = tokio::task::spawn_blocking(move || own_addresses(&ifname))
        .await
        .unwrap_or_default();
    let clock = task.clock;
    let nonce = std::process::id() ^ (u32::from(task.cfg.syncid) << 24) ^ u32::from(master);
    let mut ep = Box::new(Endpoint::new(
        endpoint::Config {
            master,
            syncid: task.cfg.syncid,
            maxlen: task.maxlen,
            group: group_addr(&task.cfg, grp, ifindex(&task.cfg.mcast_ifn).unwrap_or(0)),
            nonce,
            own,
        },
        clock.now(),
    ));
    let stats = task.daemon.snapshot().live.sync.clone();
    let stats = stats.role(master);
    let mut buf = vec![0u8; 65536];
    loop {
        while let Some(ev) = ep.poll_event() {
            log_event(&task.cfg, ev);
        }
        // The backup sends (requests, bulk answers) on its other socket.
        let send = if master {
            Some(&task.sock)
        } else {
            task.other.as_ref()
        };
        while let Some(t) = ep.poll_transmit(clock.now()) {
            let Some(s) = send else { continue };
            match s.send(&t.contents).await {
                Ok(n) => count(&stats.sent, &stats.sent_bytes, n),
                Err(e) => {
                    stats.send_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(target: "rvs::sync", "sync daemon on {}: send: {e}", task.cfg.mcast_ifn);
                }
            }
        }
        // The socket bound to the group: the backup's own, the master's other.
        let group = if master {
            task.other.as_ref()
        } else {
            Some(&task.sock)
        };
        let timeout = ep.poll_timeout();
        let sleep = async {
            match timeout {
                Some(at) => tokio::time::sleep(at.saturating_since(clock.now())).await,
                None => std::future::pending().await,
            }
        };
        let input = tokio::select! {
            () = sleep => {
                ep.handle_timeout(clock.now());
                None
            }
            r = recv_on(group, &mut buf) => match r {
                Ok((n, src)) => {
                    count(&stats.received, &stats.received_bytes, n);
                    Some((n, src))
                }
                Err(e) => {
                    tracing::warn!(target: "rvs::sync", "sync daemon on {}: receive: {e}", task.cfg.mcast_ifn);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = task.stop.changed() => return,
        };
        if input.is_none() && !ep.needs_director() {
            continue;
        }
        let now = clock.now();
        let input = input.and_then(|(n, src)| Some((buf.get(..n)?.to_vec(), src)));
        let Some(back) = task
            .daemon
            .ask(|reply| Msg::SyncStep {
                ep,
                master,
                input,
                now,
                reply,
            })
            .await
        else {
            return;
        };
        ep = back;
        let mut heard = false;
        while let Some(ev) = ep.poll_event() {
            heard |= log_event(&task.cfg, ev);
        }
        if heard && !task.daemon.send(Msg::SyncHeard(now)).await {
            return;
        }
    }
}

/// keepalived.conf's `lvs_sync_daemon IFACE [VRRP_INSTANCE] [id N] ...`:
/// without an instance both daemons run; with one, the master daemon runs
/// while that instance is MASTER and the backup daemon otherwise (the sync
/// id defaults to the instance's VRID). Checked every second and after
/// each reload; daemons started by rvsadm are left alone.
pub async fn follow_config(d: DaemonHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let Some(Wanted {
            wanted,
            state,
            vrid,
            running,
        }) = d.ask(|reply| Msg::SyncWanted { reply }).await
        else {
            return;
        };
        let want: Vec<DaemonConfig> = match &wanted {
            None => Vec::new(),
            Some(w) => {
                let both = w.instance.is_none();
                let master = state == Some(rvs_core::vrrp::State::Master);
                [true, false]
                    .into_iter()
                    .filter(|m| both || *m == master)
                    .map(|m| DaemonConfig {
                        state: if m {
                            SyncState::Master
                        } else {
                            SyncState::Backup
                        },
                        mcast_ifn: w.interface.clone(),
                        syncid: w.syncid.or(vrid).unwrap_or(0),
                        sync_maxlen: w.maxlen,
                        mcast_group: w.group,
                        mcast_port: w.port,
                        mcast_ttl: w.ttl,
                    })
                    .collect()
            }
        };
        for (master, running) in [true, false].into_iter().zip(running) {
            let desired = want.iter().find(|c| is_master(c) == master);
            match (running, desired) {
                // rvsadm's daemon: not ours to manage.
                (Some((false, _)), _) => {}
                (Some((true, cfg)), Some(want)) if cfg == *want => {}
                (Some((true, _)), _) => {
                    let _ = d.ask(|reply| Msg::SyncStop { master, reply }).await;
                    if let Some(want) = desired
                        && let Err(e) = start_as(&d, want.clone(), true).await
                    {
                        tracing::error!(target: "rvs::sync", "lvs_sync_daemon: {e}");
                    }
                }
                (None, Some(want)) => {
                    if let Err(e) = start_as(&d, want.clone(), true).await {
                        tracing::error!(target: "rvs::sync", "lvs_sync_daemon: {e}");
                    }
                }
                (None, None) => {}
            }
        }
    }
}
