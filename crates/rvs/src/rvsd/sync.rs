//! IPVS connection synchronisation (`ipvsadm --start-daemon master|backup`,
//! keepalived's `lvs_sync_daemon`), on the kernel's wire format
//! (`rvs_wire::ipvs_sync`, version 1 sent, 0 and 1 received) so a backup
//! director — rvs or a kernel IPVS — knows the master's connections and
//! persistence templates when it takes over.
//!
//! The master reads the director's connection table once a second and
//! sends what is new or changed (state, real server, active/inactive), and
//! refreshes each entry every [`REFRESH`] so a backup's timers never run
//! out under a live connection; the kernel instead counts packets
//! (`sync_threshold`), which a table read cannot see. The backup enters
//! what it receives into its director as the XDP plane's mirrored flows
//! are (`Ipvs::mirror_conn`): `-Lnc` lists them, ActiveConn/InActConn count
//! them, and templates carry persistence across the failover. Both daemons
//! can run at once, so a recovered master learns the current state too
//! (with the kernel, a recovered master comes back empty).
//!
//! # Bulk resync
//! A daemon that starts (a director that starts runs its backup daemon; one
//! that becomes master, its master daemon) asks for the whole table at once
//! instead of waiting up to [`REFRESH`] for the peer's refresh round: it
//! sends a bulk-resync request (`rvs_wire::ipvs_sync::build_bulk_request`,
//! 16 bytes that kernel backups ignore, see that module) to the sync group
//! and port, and again after [`REQUEST_AGAIN`] unless entries came in
//! meanwhile (in case the peer was switching daemons). Every daemon listens on the group for requests (a
//! master daemon with a second socket joined to it). A peer answers
//! requests of its syncid (either side 0: any) from its master daemon, or
//! from its backup daemon when it runs no master daemon, so one rvsd
//! answers once: it walks its whole table [`BULK_PAGE`] slab positions per
//! [`BULK_TICK`] (the daemon's lock is held for one page, as for the
//! master's period) and sends every entry a master would sync as ordinary
//! v1 messages **to the group** (not unicast: the requester's backup
//! socket is the one bound to the group, and kernel backups on the group
//! take the answer as the refresh it is). A request during a walk extends
//! it to cover the whole table again from where it is. A requester that
//! runs only its master daemon (keepalived.conf's `lvs_sync_daemon` with an
//! instance, just become master) enters what its master daemon's group
//! socket hears; with a backup daemon beside it, the backup daemon does.
//!
//! # N directors (a fleet behind ECMP)
//! keepalived.conf's `lvs_sync_daemon IFACE` without an instance runs both
//! daemons on every director, one syncid on the fleet's segment: each
//! director sends its own flows and enters everyone else's, installed into
//! its data plane whatever its VRRP state (a director of a fleet is active
//! and a "backup" of its peers at once), so a flow ECMP moves to it goes on
//! to the same real server. Three rules keep N daemons sane:
//! - a message whose source is one of the sync interface's own addresses
//!   is ignored (our own multicast, looped back);
//! - a flow entered from a peer is not sent as our own (`received`), so N
//!   daemons do not echo each other's flows; it becomes ours — sent, and
//!   no longer overwritten by a peer — once this director sees its traffic
//!   ([`takes_over`]): ECMP moved it here, and the peers must learn it from
//!   its new director when the old one is gone;
//! - an entry never replaces one this director holds itself unless it is
//!   fresher (the peer saw the flow's traffic later than we did: the flow
//!   moved away), see [`decide`].

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rvs_core::conn::{Conn, ConnFlags};
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::{AddrFamily, ForwardMethod, Protocol, ServiceKey};
use rvs_core::state::TcpState;
use rvs_core::time::Instant;
use rvs_ipvsadm::{DaemonConfig, SyncState};
use rvs_wire::ipvs_sync as wire;
use tokio::sync::watch;

use crate::daemon::Daemon;

/// How often a master sends each live entry again.
const REFRESH: Duration = Duration::from_secs(30);
/// How often the master reads the table.
const PERIOD: Duration = Duration::from_secs(1);
/// Slab positions a master reads per period: the daemon's lock is held for
/// a bounded time however large the table (a page of a 1M-entry table took
/// 18–20 ms here: `sync_page_cost`, BENCHMARKS.md); a table of N pages is swept every N
/// seconds.
const PAGE: usize = 1 << 16;
/// Slab positions a bulk answer reads per [`BULK_TICK`]: at most this many
/// entries (≈ 52 datagrams of 40) per tick, ≈ 100,000 entries a second.
const BULK_PAGE: usize = 2048;
/// Pace of a bulk answer.
const BULK_TICK: Duration = Duration::from_millis(20);
/// A starting daemon's second bulk-resync request comes this long after
/// the first.
const REQUEST_AGAIN: Duration = Duration::from_secs(2);
/// IPv4 + UDP headers: a master's default message size is 1500 minus them.
const HEADERS_V4: u16 = 28;
/// A starting backup daemon "warms up" (the announcer holds a first
/// announcement, docs/fleet.md) at most this long...
const WARM_MAX: Duration = Duration::from_secs(5);
/// ...or until the peers' bulk answers have gone quiet this long.
const WARM_QUIET: Duration = Duration::from_secs(1);

/// The running daemons of one rvsd.
#[derive(Default)]
pub struct SyncDaemons {
    master: Option<Running>,
    backup: Option<Running>,
    /// Entries a backup entered, so a master running beside it does not
    /// send them back (tuple → when).
    received: Arc<Mutex<FastMap<Tuple, Instant>>>,
    /// When the backup daemon last entered peers' entries.
    heard: Option<Instant>,
}

struct Running {
    cfg: DaemonConfig,
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

/// [`SyncDaemons::warming`] over plain data: a backup started at `started`
/// that last entered peers' entries at `heard`.
fn warming(started: Option<Instant>, heard: Option<Instant>, now: Instant) -> bool {
    let Some(started) = started else {
        return false;
    };
    if now.saturating_since(started) >= WARM_MAX {
        return false;
    }
    !heard.is_some_and(|h| h >= started && now.saturating_since(h) >= WARM_QUIET)
}

/// A connection's identity on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tuple {
    protocol: u8,
    client: SocketAddr,
    vip: SocketAddr,
    template: bool,
}

/// What makes an entry worth sending again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sent {
    state: u8,
    dest: SocketAddr,
    inactive: bool,
    /// The FULLNAT local address and port (a pair learnt after the entry
    /// was first sent goes out at once).
    local: Option<SocketAddr>,
    at: Instant,
    /// The sweep that last saw the entry (older ones are gone at a sweep's end).
    sweep: u32,
}

/// Tables keyed by tuples: a fast hash (the keys are not chosen by
/// clients in a way that matters here: a collision only slows the sweep).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

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
                sync_maxlen: maxlen(&r.cfg),
                mcast_group: Some(group(&r.cfg)),
                mcast_port: r.cfg.mcast_port.unwrap_or(wire::SYNC_PORT),
                mcast_ttl: r.cfg.mcast_ttl.unwrap_or(1),
            })
            .collect()
    }

    /// Whether a backup daemon is still gathering its peers' tables after
    /// its start: less than [`WARM_MAX`] ago, and its bulk answers have not
    /// yet gone quiet for [`WARM_QUIET`]. A joining director of an ECMP
    /// fleet announces its VIPs only after that, so the flows ECMP moves to
    /// it are already in its table.
    pub fn warming(&self, now: Instant) -> bool {
        warming(self.backup.as_ref().map(|r| r.started), self.heard, now)
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
}

fn is_master(cfg: &DaemonConfig) -> bool {
    cfg.state == SyncState::Master
}

fn group(cfg: &DaemonConfig) -> IpAddr {
    cfg.mcast_group.unwrap_or(IpAddr::V4(wire::SYNC_GROUP_V4))
}

fn maxlen(cfg: &DaemonConfig) -> u16 {
    cfg.sync_maxlen.unwrap_or(1500 - HEADERS_V4)
}

/// Start a daemon (`ipvsadm --start-daemon`): ipvsadm's texts for one that
/// already runs and for settings that cannot work.
pub fn start(daemon: &Arc<Mutex<Daemon>>, cfg: DaemonConfig) -> Result<(), String> {
    start_as(daemon, cfg, false)
}

fn start_as(daemon: &Arc<Mutex<Daemon>>, cfg: DaemonConfig, managed: bool) -> Result<(), String> {
    let IpAddr::V4(grp) = group(&cfg) else {
        return Err("IPv6 sync groups are not supported by rvsd yet".into());
    };
    if !grp.is_multicast() {
        return Err(format!("{grp} is not a multicast address"));
    }
    let sock = if is_master(&cfg) {
        master_socket(&cfg, grp)
    } else {
        backup_socket(&cfg, grp)
    }
    .map_err(|e| format!("sync daemon on {}: {e}", cfg.mcast_ifn))?;
    let mut d = daemon
        .lock()
        .map_err(|_| "daemon state poisoned".to_owned())?;
    let daemons = d.sync_daemons();
    let slot = if is_master(&cfg) {
        &mut daemons.master
    } else {
        &mut daemons.backup
    };
    if slot.is_some() {
        return Err("Daemon has already run".into());
    }
    let (stop, stopped) = watch::channel(false);
    let received = daemons.received.clone();
    let weak = Arc::downgrade(daemon);
    let other = if is_master(&cfg) {
        backup_socket(&cfg, grp)
    } else {
        master_socket(&cfg, grp)
    };
    let other = other
        .map_err(|e| tracing::warn!(target: "rvs::sync", "sync daemon on {}: no bulk resync: {e}", cfg.mcast_ifn))
        .ok();
    let task = Task {
        daemon: weak,
        cfg: cfg.clone(),
        sock,
        other,
        stop: stopped,
        received,
    };
    tokio::spawn(run(task));
    tracing::info!(target: "rvs::sync", "sync daemon started: {} on {}, syncid {}", if is_master(&cfg) { "master" } else { "backup" }, cfg.mcast_ifn, cfg.syncid);
    let started = d.now();
    let daemons = d.sync_daemons();
    if !is_master(&cfg) {
        daemons.heard = None;
    }
    let slot = if is_master(&cfg) {
        &mut daemons.master
    } else {
        &mut daemons.backup
    };
    *slot = Some(Running {
        cfg,
        started,
        stop,
        managed,
    });
    Ok(())
}

/// The interface's index.
fn ifindex(ifname: &str) -> std::io::Result<u32> {
    rvs_sys::iface::ifindex(ifname)
        .map_err(|_| std::io::Error::other(format!("no interface {ifname}")))
}

/// The sync group's address: `grp` on the configured port (IPVS's 8848
/// when none is).
fn group_addr(cfg: &DaemonConfig, grp: Ipv4Addr) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        grp,
        cfg.mcast_port.unwrap_or(wire::SYNC_PORT),
    ))
}

/// UDP from the interface's primary address to group:port, TTL as asked,
/// no loop back (as the kernel's master).
fn master_socket(cfg: &DaemonConfig, grp: Ipv4Addr) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, Socket, Type};
    ifindex(&cfg.mcast_ifn)?;
    let addr = rvs_vrrp::net::primary_v4(&cfg.mcast_ifn)?
        .ok_or_else(|| std::io::Error::other("the interface has no IPv4 address"))?;
    let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    s.bind_device(Some(cfg.mcast_ifn.as_bytes()))?;
    s.set_multicast_if_v4(&addr)?;
    s.set_multicast_ttl_v4(u32::from(cfg.mcast_ttl.unwrap_or(1)))?;
    s.set_multicast_loop_v4(false)?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(addr, 0)).into())?;
    s.connect(&group_addr(cfg, grp).into())?;
    s.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(s.into())
}

/// UDP on group:port, on the interface, joined to the group there.
fn backup_socket(cfg: &DaemonConfig, grp: Ipv4Addr) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, InterfaceIndexOrAddress, Socket, Type};
    let index = ifindex(&cfg.mcast_ifn)?;
    let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    s.set_reuse_address(true)?;
    s.bind_device(Some(cfg.mcast_ifn.as_bytes()))?;
    s.bind(&group_addr(cfg, grp).into())?;
    s.join_multicast_v4_n(&grp, &InterfaceIndexOrAddress::Index(index))?;
    s.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(s.into())
}

/// Whether the kernel's master would sync this entry (`ip_vs_sync_conn_needed`,
/// without the packet counting): templates always; TCP once established
/// and while closing; SCTP likewise; UDP always; one-packet entries never.
fn eligible(c: &Conn) -> bool {
    if c.flags.contains(ConnFlags::ONE_PACKET) {
        return false;
    }
    if c.flags.contains(ConnFlags::TEMPLATE) {
        return true;
    }
    match c.protocol {
        6 => TcpState::from_u8(c.state).is_some_and(|s| {
            matches!(
                s,
                TcpState::Established
                    | TcpState::FinWait
                    | TcpState::Close
                    | TcpState::CloseWait
                    | TcpState::TimeWait
            )
        }),
        17 => true,
        // SCTP: ESTABLISHED (7) and the SHUTDOWN states and CLOSED.
        132 => c.state >= 7,
        _ => false,
    }
}

fn tuple(c: &Conn) -> Tuple {
    Tuple {
        protocol: c.protocol,
        client: SocketAddr::new(c.caddr.to_ip(c.af), c.cport),
        vip: SocketAddr::new(c.vaddr.to_ip(c.af), c.vport),
        template: c.flags.contains(ConnFlags::TEMPLATE),
    }
}

/// Within this much, two directors' "last seen" times of a flow are the
/// same: the plane mirrors its flows about once a second, a master reads
/// its table once a [`PERIOD`], and the wire carries whole seconds.
const SLACK: Duration = Duration::from_secs(3);

/// The full idle timeout of an entry in `state`: how long after its last
/// packet it expires (zero for an unknown state).
fn full_timeout(ipvs: &Ipvs, protocol: u8, state: u8) -> Duration {
    let t = ipvs.timeouts();
    match protocol {
        6 => TcpState::from_u8(state).map_or(Duration::ZERO, |s| t.tcp(s)),
        17 => t.udp(),
        132 => rvs_core::state::SctpState::from_u8(state).map_or(Duration::ZERO, |s| t.sctp(s)),
        _ => Duration::ZERO,
    }
}

/// When a director last saw the flow's traffic, from an entry's idle time
/// left and its state's full timeout (both directors run the same
/// configuration).
fn last_seen(at: Instant, idle_left: Duration, timeout: Duration) -> Instant {
    let idle = timeout.saturating_sub(idle_left);
    Instant::from_millis(at.as_millis().saturating_sub(duration_ms(idle)))
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What this director holds of a flow a peer synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Local {
    /// When this director last saw the flow's traffic (from its entry's
    /// deadline; for an entry entered from a peer and not seen since, the
    /// time it was entered or the peer's own last-seen).
    last: Instant,
    /// When a peer's message last entered it, if the entry came from a peer
    /// (and is not ours yet).
    received: Option<Instant>,
}

/// What to do with a peer's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// Enter it (new here, a refresh of a peer's copy, or fresher than
    /// ours): the table and the data plane take the peer's state.
    Enter,
    /// Keep ours: the director holds the flow itself and saw it at least
    /// as recently; with `took_over`, the entry was a peer's copy that this
    /// director's own traffic made its own (it leaves `received`).
    KeepOwn {
        /// The entry was in `received` until now.
        took_over: bool,
    },
}

/// Whether an entry entered from a peer at `received` has seen traffic on
/// this director since (its last-seen is later than the peer's message by
/// more than [`SLACK`]): ECMP moved the flow here.
fn takes_over(last: Instant, received: Instant) -> bool {
    last.saturating_since(received) > SLACK
}

/// The install decision for a peer's entry whose sender last saw the flow
/// at `peer_last`, given what this director holds (`None`: nothing). A
/// director's own flow (never received, or received and since carried
/// here) is replaced only by a fresher peer's one; a peer's copy that saw
/// no traffic here is refreshed.
fn decide(local: Option<Local>, peer_last: Instant) -> Decision {
    let Some(l) = local else {
        return Decision::Enter;
    };
    let took_over = match l.received {
        Some(r) if !takes_over(l.last, r) => return Decision::Enter,
        Some(_) => true,
        None => false,
    };
    if peer_last.saturating_since(l.last) > SLACK {
        Decision::Enter
    } else {
        Decision::KeepOwn { took_over }
    }
}

/// What the director holds of the connection (not template) `c` names.
fn local_of(ipvs: &Ipvs, c: &wire::SyncConn, received: Option<Instant>) -> Option<Local> {
    let af = if c.client.is_ipv6() {
        AddrFamily::Inet6
    } else {
        AddrFamily::Inet
    };
    let key = rvs_core::conn::ConnKey {
        protocol: c.protocol,
        af,
        caddr: rvs_core::conn::Addr::from_ip(c.client.ip()),
        cport: c.client.port(),
        vaddr: rvs_core::conn::Addr::from_ip(c.vip.ip()),
        vport: c.vip.port(),
    };
    let table = ipvs.conns();
    let id = table.lookup(&key)?;
    let conn = table.get(id)?;
    Some(Local {
        last: local_last(ipvs, conn, table.deadline(id)?),
        received,
    })
}

/// When this director last saw `c`'s traffic: its deadline less its
/// state's full timeout.
fn local_last(ipvs: &Ipvs, c: &Conn, deadline: Instant) -> Instant {
    let t = full_timeout(ipvs, c.protocol, c.state);
    Instant::from_millis(deadline.as_millis().saturating_sub(duration_ms(t)))
}

/// Whether `src` is one of this director's own addresses (our multicast
/// looped back, or another daemon of ours).
fn from_self(src: IpAddr, own: &[IpAddr]) -> bool {
    own.contains(&src)
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

/// Entry `c`'s FULLNAT local address and port (`id` is its table id).
fn local_pair(ipvs: &Ipvs, id: rvs_core::conn::ConnId, c: &Conn) -> Option<SocketAddr> {
    ipvs.conns()
        .local(id)
        .map(|(a, p)| SocketAddr::new(a.to_ip(c.af), p))
}

/// Entry `c` as a sync record; `local`: its FULLNAT local address and
/// port, carried in rvs's optional record option (kernel backups ignore
/// it; an rvs backup keeps the pair so the real server sees the same peer
/// after a failover).
fn to_wire(c: &Conn, local: Option<SocketAddr>) -> wire::SyncConn {
    let t = tuple(c);
    wire::SyncConn {
        protocol: c.protocol,
        client: t.client,
        vip: t.vip,
        dest: SocketAddr::new(c.daddr.to_ip(c.af), c.dport),
        // The kernel sends its flags minus HASHED; ours never carry it.
        flags: u32::from(c.flags.0) & !u32::from(ConnFlags::SYNC.0),
        state: u16::from(c.state),
        fwmark: c.fwmark,
        timeout_s: Some(c.timeout_ms / 1000),
        seq: None,
        pe_name: None,
        pe_data: None,
        local: local.filter(|_| !t.template),
    }
}

/// A master's walk over its table, a page per period.
#[derive(Default)]
struct Walk {
    /// Next slab position.
    next: usize,
    /// The current sweep's number.
    sweep: u32,
    /// What was sent, when, and the last sweep that saw it.
    sent: FastMap<Tuple, Sent>,
}

/// What of the next page of the table must go out now; at the end of a
/// sweep, forget what was sent of entries that are gone.
fn changes(
    ipvs: &Ipvs,
    now: Instant,
    walk: &mut Walk,
    received: &mut FastMap<Tuple, Instant>,
) -> Vec<wire::SyncConn> {
    let mut out = Vec::new();
    let table = ipvs.conns();
    let (start, end) = (walk.next, walk.next.saturating_add(PAGE));
    let sweep = walk.sweep;
    for (id, c) in table.iter_slots(start, end) {
        if !eligible(c) {
            continue;
        }
        let t = tuple(c);
        // A peer's flow is not sent back, unless its traffic came here
        // since (then it is ours: the peers learn it from us).
        if !received.is_empty()
            && let Some(&r) = received.get(&t)
        {
            let ours = !t.template
                && table
                    .deadline(id)
                    .is_some_and(|dl| takes_over(local_last(ipvs, c, dl), r));
            if !ours {
                continue;
            }
            received.remove(&t);
        }
        let local = local_pair(ipvs, id, c);
        let now_sent = Sent {
            state: c.state,
            dest: SocketAddr::new(c.daddr.to_ip(c.af), c.dport),
            inactive: c.flags.contains(ConnFlags::INACTIVE),
            local,
            at: now,
            sweep,
        };
        match walk.sent.entry(t) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(now_sent);
                out.push(to_wire(c, local));
            }
            std::collections::hash_map::Entry::Occupied(mut o) => {
                let s = o.get_mut();
                let due = s.state != now_sent.state
                    || s.dest != now_sent.dest
                    || s.inactive != now_sent.inactive
                    || s.local != now_sent.local
                    || now.saturating_since(s.at) >= REFRESH;
                if due {
                    *s = now_sent;
                    out.push(to_wire(c, local));
                } else {
                    s.sweep = sweep;
                }
            }
        }
    }
    if end >= table.slots() {
        walk.sent.retain(|_, s| s.sweep == sweep);
        walk.sweep = sweep.wrapping_add(1);
        walk.next = 0;
    } else {
        walk.next = end;
    }
    out
}

/// What a sync task (master or backup) runs with.
struct Task {
    /// The daemon, weak so that a task never keeps it alive.
    daemon: std::sync::Weak<Mutex<Daemon>>,
    cfg: DaemonConfig,
    /// The master's sending socket, or the backup's group socket.
    sock: tokio::net::UdpSocket,
    /// The other one: the master's group socket (requests, and answers to
    /// its own requests), the backup's sending socket (requests and bulk
    /// answers); `None` when it could not be opened (said in the log).
    other: Option<tokio::net::UdpSocket>,
    /// Turns true (or closes) when the task is to end.
    stop: watch::Receiver<bool>,
    /// Entries the backup entered, which the master does not send back.
    received: Arc<Mutex<FastMap<Tuple, Instant>>>,
}

/// Where a bulk answer stands: the next slab position, and how many
/// positions are still to be read before the whole table was covered.
#[derive(Debug, Default)]
struct Bulk {
    next: usize,
    todo: usize,
    /// A request came since the last page: cover the whole table again.
    restart: bool,
}

impl Bulk {
    fn active(&self) -> bool {
        self.restart || self.todo > 0
    }
}

/// The next page of a bulk answer: every entry a master would sync among
/// the next [`BULK_PAGE`] slab positions (wrapping at the table's end),
/// received ones included (the requester wants all).
fn bulk_page(ipvs: &Ipvs, b: &mut Bulk) -> Vec<wire::SyncConn> {
    let table = ipvs.conns();
    let slots = table.slots();
    if std::mem::take(&mut b.restart) {
        b.todo = slots;
    }
    if slots == 0 {
        b.todo = 0;
        return Vec::new();
    }
    if b.next >= slots {
        b.next = 0;
    }
    let n = BULK_PAGE.min(b.todo).min(slots - b.next);
    let out = table
        .iter_slots(b.next, b.next + n)
        .filter(|(_, c)| eligible(c))
        .map(|(id, c)| to_wire(c, local_pair(ipvs, id, c)))
        .collect();
    b.next += n;
    b.todo -= n;
    out
}

/// Whether a request of `theirs` is one for a daemon of syncid `ours`.
fn syncid_matches(ours: u8, theirs: u8) -> bool {
    ours == 0 || theirs == 0 || ours == theirs
}

/// Send `conns` as v1 messages on `sock`.
async fn send_conns(sock: &tokio::net::UdpSocket, cfg: &DaemonConfig, conns: &[wire::SyncConn]) {
    match wire::build_v1(cfg.syncid, conns, usize::from(maxlen(cfg))) {
        Ok(datagrams) => {
            for dg in datagrams {
                if let Err(e) = sock.send(&dg).await {
                    tracing::warn!(target: "rvs::sync", "sync daemon on {}: send: {e}", cfg.mcast_ifn);
                }
            }
        }
        Err(e) => tracing::error!(target: "rvs::sync", "sync daemon: {e}"),
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

/// A master or backup daemon (see the module doc): the master's period,
/// the group's messages (entries for a backup, bulk-resync requests for
/// both), and the pace of a bulk answer.
async fn run(mut task: Task) {
    let master = is_master(&task.cfg);
    let mut walk = Walk::default();
    let mut every = tokio::time::interval(PERIOD);
    let mut pace = tokio::time::interval(BULK_TICK);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut bulk = Bulk::default();
    let mut buf = vec![0u8; 65536];
    let mut pruned = Instant::ZERO;
    let nonce = std::process::id() ^ (u32::from(task.cfg.syncid) << 24) ^ u32::from(master);
    let req = wire::build_bulk_request(&wire::BulkRequest {
        syncid: task.cfg.syncid,
        nonce,
    });
    let again = tokio::time::sleep(REQUEST_AGAIN);
    tokio::pin!(again);
    let own = own_addresses(&task.cfg.mcast_ifn);
    let mut requests_left = 2u8;
    // Whether entries came in since the first request.
    let mut heard = false;
    let ask = async |task: &Task| {
        let send = if master {
            Some(&task.sock)
        } else {
            task.other.as_ref()
        };
        if let Some(s) = send {
            match s.send(&req).await {
                Ok(_) => {
                    tracing::info!(target: "rvs::sync", "sync {} on {}: bulk resync requested (nonce {nonce:#x})", if master { "master" } else { "backup" }, task.cfg.mcast_ifn)
                }
                Err(e) => {
                    tracing::warn!(target: "rvs::sync", "sync daemon on {}: bulk resync request: {e}", task.cfg.mcast_ifn)
                }
            }
        }
    };
    ask(&task).await;
    requests_left -= 1;
    loop {
        // The socket bound to the group: the backup's own, the master's other.
        let group = if master {
            task.other.as_ref()
        } else {
            Some(&task.sock)
        };
        let n = tokio::select! {
            _ = every.tick(), if master => {
                let Some(d) = task.daemon.upgrade() else { return };
                let batch = {
                    let Ok(d) = d.lock() else { return };
                    // Same order as the backup: the daemon's lock, then this one.
                    let Ok(mut rx) = task.received.lock() else { return };
                    changes(d.controller().ipvs(), d.now(), &mut walk, &mut rx)
                };
                if !batch.is_empty() {
                    send_conns(&task.sock, &task.cfg, &batch).await;
                }
                continue;
            }
            _ = pace.tick(), if bulk.active() => {
                let Some(d) = task.daemon.upgrade() else { return };
                let page = {
                    let Ok(d) = d.lock() else { return };
                    bulk_page(d.controller().ipvs(), &mut bulk)
                };
                let send = if master { Some(&task.sock) } else { task.other.as_ref() };
                if let Some(s) = send && !page.is_empty() {
                    send_conns(s, &task.cfg, &page).await;
                }
                if !bulk.active() {
                    tracing::info!(target: "rvs::sync", "sync daemon on {}: bulk resync answered", task.cfg.mcast_ifn);
                }
                continue;
            }
            _ = &mut again, if requests_left > 0 => {
                // Entries came since the first request: a peer answers.
                if !heard {
                    ask(&task).await;
                }
                requests_left -= 1;
                continue;
            }
            r = recv_on(group, &mut buf) => match r {
                Ok((_, src)) if from_self(src.ip(), &own) => continue,
                Ok((n, _)) => n,
                Err(e) => {
                    tracing::warn!(target: "rvs::sync", "sync daemon on {}: receive: {e}", task.cfg.mcast_ifn);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = task.stop.changed() => return,
        };
        let Some(d) = task.daemon.upgrade() else {
            return;
        };
        if let Some(r) = wire::parse_bulk_request(&buf[..n]) {
            if !syncid_matches(task.cfg.syncid, r.syncid) {
                continue;
            }
            // One answer per rvsd: its master daemon's, else its backup's.
            let answers = master
                || d.lock()
                    .map(|mut g| g.sync_daemons().master.is_none())
                    .unwrap_or(false);
            if answers {
                tracing::info!(target: "rvs::sync", "sync daemon on {}: bulk resync asked (nonce {:#x}); sending the table", task.cfg.mcast_ifn, r.nonce);
                bulk.restart = true;
            }
            continue;
        }
        let msg = match wire::parse(&buf[..n]) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(target: "rvs::sync", "sync daemon: bad message: {e}");
                continue;
            }
        };
        if task.cfg.syncid != 0 && msg.syncid != task.cfg.syncid {
            continue;
        }
        let Ok(mut d) = d.lock() else { return };
        // A master enters what it hears only when no backup daemon runs
        // beside it (which then does).
        if master && d.sync_daemons().backup.is_some() {
            continue;
        }
        let now = d.now();
        heard |= !msg.conns.is_empty();
        if !msg.conns.is_empty() {
            d.sync_daemons().heard = Some(now);
        }
        let mut rx = task.received.lock().ok();
        for c in &msg.conns {
            let t = Tuple {
                protocol: c.protocol,
                client: c.client,
                vip: c.vip,
                template: c.flags & wire::FLAG_TEMPLATE != 0,
            };
            let Some(m) = to_enter(d.controller().ipvs(), c, now, rx.as_deref_mut()) else {
                continue;
            };
            if d.controller_mut().enter_synced(now, &m).is_some()
                && let Some(rx) = rx.as_mut()
            {
                rx.insert(t, now);
            }
        }
        // Once a minute, forget what has certainly expired here.
        if let Some(rx) = rx.as_mut()
            && now.saturating_since(pruned) >= Duration::from_secs(60)
        {
            rx.retain(|_, at| now.saturating_since(*at) < Duration::from_secs(3600));
            pruned = now;
        }
    }
}

/// What of a peer's entry `c` to enter at `now`: `None` when this
/// director keeps its own flow ([`decide`]; one it took over leaves
/// `received`) or has no such service or real server.
fn to_enter(
    ipvs: &Ipvs,
    c: &wire::SyncConn,
    now: Instant,
    received: Option<&mut FastMap<Tuple, Instant>>,
) -> Option<MirroredConn> {
    let t = Tuple {
        protocol: c.protocol,
        client: c.client,
        vip: c.vip,
        template: c.flags & wire::FLAG_TEMPLATE != 0,
    };
    if !t.template {
        let was = received.as_ref().and_then(|rx| rx.get(&t).copied());
        let peer_last = last_seen(
            now,
            Duration::from_secs(u64::from(c.timeout_s.unwrap_or(0))),
            full_timeout(ipvs, c.protocol, u8::try_from(c.state).unwrap_or(u8::MAX)),
        );
        if let Decision::KeepOwn { took_over } = decide(local_of(ipvs, c, was), peer_last) {
            if took_over && let Some(rx) = received {
                rx.remove(&t);
            }
            return None;
        }
    }
    let m = resolve(ipvs, c);
    if m.is_none() {
        tracing::debug!(target: "rvs::sync", "sync backup: no service or real server for {:?} → {}", c.vip, c.dest);
    }
    m
}

/// One synced entry as this director's: its service (by fwmark, by
/// address and port, or the port-zero service for a template), its real
/// server, its state and its timeout. `None` when this director has no
/// such service or real server, or the entry is of a persistence engine
/// it does not have.
fn resolve(ipvs: &Ipvs, c: &wire::SyncConn) -> Option<MirroredConn> {
    let protocol = match c.protocol {
        6 => Protocol::Tcp,
        17 => Protocol::Udp,
        132 => Protocol::Sctp,
        _ => return None,
    };
    // The kernel skips entries of a persistence engine it does not have.
    if c.pe_name.as_deref().is_some_and(|n| n != "sip") {
        return None;
    }
    let template = c.flags & wire::FLAG_TEMPLATE != 0;
    let af = if c.vip.is_ipv6() {
        AddrFamily::Inet6
    } else {
        AddrFamily::Inet
    };
    let keys = [
        (c.fwmark != 0).then_some(ServiceKey::Fwmark { mark: c.fwmark, af }),
        Some(ServiceKey::Addr {
            protocol,
            addr: c.vip.ip(),
            port: c.vip.port(),
        }),
        Some(ServiceKey::Addr {
            protocol,
            addr: c.vip.ip(),
            port: 0,
        }),
    ];
    let dest = keys.iter().flatten().find_map(|k| {
        ipvs.service(k)?.dests().iter().find_map(|d| {
            (d.config.addr == c.dest.ip() && (d.config.port == c.dest.port() || d.config.port == 0))
                .then_some(d.id)
        })
    })?;
    let state = u8::try_from(c.state).ok()?;
    let idle_left = Duration::from_secs(u64::from(c.timeout_s.unwrap_or(if template {
        180
    } else {
        300
    })));
    Some(MirroredConn {
        protocol,
        client: c.client,
        vip: c.vip,
        dest,
        state,
        output_seen: c.flags & u32::from(ConnFlags::NOOUTPUT.0) == 0,
        idle_left,
        template,
        // A FULLNAT pair for a connection of a FULLNAT real server only.
        local: c.local.filter(|_| {
            !template
                && ipvs
                    .dest(dest)
                    .is_some_and(|d| matches!(d.config.forward, ForwardMethod::FullNat))
        }),
    })
}

/// keepalived.conf's `lvs_sync_daemon IFACE [VRRP_INSTANCE] [id N] ...`:
/// without an instance both daemons run; with one, the master daemon runs
/// while that instance is MASTER and the backup daemon otherwise (the sync
/// id defaults to the instance's VRID). Checked every second and after
/// each reload; daemons started by rvsadm are left alone.
pub async fn follow_config(daemon: std::sync::Weak<Mutex<Daemon>>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let Some(d) = daemon.upgrade() else { return };
        let (wanted, state, vrid) = {
            let Ok(g) = d.lock() else { return };
            let wanted = g.sync_wanted();
            let inst = wanted.as_ref().and_then(|w| w.instance.clone());
            let state = inst.as_ref().and_then(|i| g.vrrp_state(i));
            let vrid = inst.as_ref().and_then(|i| g.vrrp_vrid(i));
            (wanted, state, vrid)
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
        for master in [true, false] {
            let desired = want.iter().find(|c| is_master(c) == master);
            let running = d.lock().ok().and_then(|mut g| {
                let daemons = g.sync_daemons();
                let slot = if master {
                    &daemons.master
                } else {
                    &daemons.backup
                };
                slot.as_ref().map(|r| (r.managed, r.cfg.clone()))
            });
            match (running, desired) {
                // rvsadm's daemon: not ours to manage.
                (Some((false, _)), _) => {}
                (Some((true, cfg)), Some(want)) if cfg == *want => {}
                (Some((true, _)), _) => {
                    if let Ok(mut g) = d.lock() {
                        let _ = g.sync_daemons().stop(master);
                    }
                    if let Some(want) = desired
                        && let Err(e) = start_as(&d, want.clone(), true)
                    {
                        tracing::error!(target: "rvs::sync", "lvs_sync_daemon: {e}");
                    }
                }
                (None, Some(want)) => {
                    if let Err(e) = start_as(&d, want.clone(), true) {
                        tracing::error!(target: "rvs::sync", "lvs_sync_daemon: {e}");
                    }
                }
                (None, None) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::ipvs::IpvsConfig;
    use rvs_core::model::{DestConfig, ServiceConfig};

    fn director() -> (Ipvs, rvs_core::dest::DestId) {
        director_of(64)
    }

    #[test]
    fn a_starting_backup_warms_until_its_bulk_answers_go_quiet_or_the_bound() {
        let ms = Instant::from_millis;
        // No backup daemon: nothing to wait for.
        assert!(!warming(None, None, ms(0)));
        // Started, nothing heard yet: warming until the bound.
        assert!(warming(Some(ms(1000)), None, ms(1000)));
        assert!(warming(Some(ms(1000)), None, ms(5999)));
        assert!(!warming(Some(ms(1000)), None, ms(6000)));
        // Entries still coming in: warming; quiet for a second: done.
        assert!(warming(Some(ms(1000)), Some(ms(2500)), ms(3000)));
        assert!(!warming(Some(ms(1000)), Some(ms(2500)), ms(3500)));
        // Heard before this start (an earlier daemon): does not count.
        assert!(warming(Some(ms(1000)), Some(ms(500)), ms(3000)));
    }

    fn director_of(capacity: usize) -> (Ipvs, rvs_core::dest::DestId) {
        let mut ipvs = Ipvs::new(IpvsConfig {
            conn_capacity: capacity,
            ..IpvsConfig::default()
        });
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        };
        ipvs.add_service(key, ServiceConfig::new(AddrFamily::Inet))
            .unwrap();
        let dest = ipvs
            .add_dest(&key, DestConfig::new("10.0.1.1".parse().unwrap(), 80))
            .unwrap();
        (ipvs, dest)
    }

    fn flow(dest: rvs_core::dest::DestId, state: TcpState) -> MirroredConn {
        MirroredConn {
            protocol: Protocol::Tcp,
            client: "10.9.0.1:4000".parse().unwrap(),
            vip: "10.0.0.1:80".parse().unwrap(),
            dest,
            state: state as u8,
            output_seen: false,
            idle_left: Duration::from_secs(900),
            template: false,
            local: None,
        }
    }

    /// A director holding `n` established connections from distinct clients.
    fn filled(n: usize, now: Instant) -> Ipvs {
        let (mut ipvs, dest) = director_of(n);
        for i in 0..n {
            let mut f = flow(dest, TcpState::Established);
            f.client = SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + (i as u32 >> 16))),
                (i & 0xffff) as u16,
            );
            ipvs.mirror_conn(now, &f).unwrap();
        }
        ipvs
    }

    #[test]
    fn a_master_sends_new_changed_and_stale_entries_only() {
        let (mut ipvs, dest) = director();
        let t0 = Instant::from_secs(10);
        // Not yet established: not synced (as the kernel).
        ipvs.mirror_conn(t0, &flow(dest, TcpState::SynRecv))
            .unwrap();
        let mut sent = Walk::default();
        let mut none = FastMap::default();
        assert!(changes(&ipvs, t0, &mut sent, &mut none).is_empty());
        ipvs.mirror_conn(t0, &flow(dest, TcpState::Established))
            .unwrap();
        let out = changes(&ipvs, t0, &mut sent, &mut none);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].state, TcpState::Established as u16);
        assert_eq!(out[0].dest, "10.0.1.1:80".parse().unwrap());
        // Nothing new: nothing sent, until the refresh is due.
        assert!(changes(&ipvs, t0 + Duration::from_secs(1), &mut sent, &mut none).is_empty());
        assert_eq!(changes(&ipvs, t0 + REFRESH, &mut sent, &mut none).len(), 1);
        // A state change goes out at once.
        ipvs.mirror_conn(t0, &flow(dest, TcpState::FinWait))
            .unwrap();
        assert_eq!(changes(&ipvs, t0 + REFRESH, &mut sent, &mut none).len(), 1);
        // What a backup beside us received (and saw no traffic of since)
        // is not sent back.
        let at = t0 + REFRESH * 3;
        let mut fin = flow(dest, TcpState::FinWait);
        fin.idle_left = ipvs.timeouts().tcp(TcpState::FinWait);
        ipvs.mirror_conn(at, &fin).unwrap();
        let c = ipvs.conns().iter().next().map(|(_, c)| tuple(c)).unwrap();
        let mut got = FastMap::default();
        got.insert(c, at);
        assert!(changes(&ipvs, t0 + REFRESH * 3, &mut sent, &mut got).is_empty());
    }

    #[test]
    fn a_large_table_is_walked_a_page_per_period() {
        let t0 = Instant::from_secs(10);
        let ipvs = filled(PAGE + 10, t0);
        let mut walk = Walk::default();
        let mut none = FastMap::default();
        assert_eq!(changes(&ipvs, t0, &mut walk, &mut none).len(), PAGE);
        assert_eq!(changes(&ipvs, t0, &mut walk, &mut none).len(), 10);
        // The sweep is over; the next one finds nothing new.
        assert_eq!(walk.next, 0);
        assert!(changes(&ipvs, t0, &mut walk, &mut none).is_empty());
        assert_eq!(walk.sent.len(), PAGE + 10);
    }

    #[test]
    fn a_bulk_answer_pages_through_the_whole_table_and_a_new_request_extends_it() {
        let t0 = Instant::from_secs(10);
        let n = BULK_PAGE * 2 + 100;
        let ipvs = filled(n, t0);
        let mut b = Bulk::default();
        assert!(!b.active());
        assert!(bulk_page(&ipvs, &mut b).is_empty(), "nothing asked");
        b.restart = true;
        let mut got = Vec::new();
        let mut pages = 0;
        while b.active() {
            let page = bulk_page(&ipvs, &mut b);
            assert!(page.len() <= BULK_PAGE);
            got.extend(page);
            pages += 1;
            if pages == 2 {
                // A second requester mid-walk: the walk goes on from here
                // and covers the table once more, wrapping.
                b.restart = true;
            }
        }
        let distinct: std::collections::HashSet<SocketAddr> =
            got.iter().map(|c| c.client).collect();
        assert_eq!(distinct.len(), n, "every entry");
        assert_eq!(
            got.len(),
            n + 2 * BULK_PAGE,
            "the second request got the whole table too"
        );
        assert_eq!(pages, 2 + 3);
        // Entries a master would not sync are not sent.
        let (mut ipvs, dest) = director();
        ipvs.mirror_conn(t0, &flow(dest, TcpState::SynRecv))
            .unwrap();
        let mut b = Bulk {
            restart: true,
            ..Bulk::default()
        };
        assert!(bulk_page(&ipvs, &mut b).is_empty());
        assert!(!b.active());
    }

    #[test]
    fn requests_of_other_syncids_are_not_answered() {
        assert!(syncid_matches(0, 5) && syncid_matches(5, 0) && syncid_matches(5, 5));
        assert!(!syncid_matches(5, 6));
    }

    /// What one master period costs with a full table (printed, not
    /// asserted): the daemon lock is held this long once a second.
    /// `cargo test --release -p rvs --bin rvsd sync_page_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement; run by hand in release mode"]
    fn sync_page_cost() {
        const N: usize = 1 << 20;
        let t0 = Instant::from_secs(10);
        let ipvs = filled(N, t0);
        let mut walk = Walk::default();
        let mut none = FastMap::default();
        let mut first = Vec::new();
        for _ in 0..N / PAGE {
            let t = std::time::Instant::now();
            let n = changes(&ipvs, t0, &mut walk, &mut none).len();
            first.push((t.elapsed(), n));
        }
        let mut again = Vec::new();
        for _ in 0..N / PAGE {
            let t = std::time::Instant::now();
            let n = changes(&ipvs, t0, &mut walk, &mut none).len();
            again.push((t.elapsed(), n));
        }
        let median = |v: &mut Vec<(Duration, usize)>| {
            v.sort();
            v[v.len() / 2]
        };
        let (a, na) = median(&mut first);
        let (b, nb) = median(&mut again);
        println!(
            "table of {N} established entries, page of {PAGE}: first sweep {a:?} per page ({na} sent), \
             unchanged sweep {b:?} per page ({nb} sent)"
        );
    }

    #[test]
    fn a_backup_enters_entries_for_its_own_services_only() {
        let (mut ipvs, _) = director();
        let c = wire::SyncConn {
            protocol: 6,
            client: "10.9.0.1:4000".parse().unwrap(),
            vip: "10.0.0.1:80".parse().unwrap(),
            dest: "10.0.1.1:80".parse().unwrap(),
            flags: 0,
            state: TcpState::Established as u16,
            fwmark: 0,
            timeout_s: Some(900),
            seq: None,
            pe_name: None,
            pe_data: None,
            local: None,
        };
        let now = Instant::from_secs(1);
        let mut enter = |c: &wire::SyncConn| {
            resolve(&ipvs, c).is_some_and(|m| ipvs.mirror_conn(now, &m).is_some())
        };
        assert!(enter(&c));
        let unknown_dest = wire::SyncConn {
            dest: "10.0.1.2:80".parse().unwrap(),
            ..c.clone()
        };
        assert!(!enter(&unknown_dest));
        let unknown_pe = wire::SyncConn {
            pe_name: Some("other".into()),
            pe_data: Some(vec![1]),
            ..c.clone()
        };
        assert!(!enter(&unknown_pe));
        let template = wire::SyncConn {
            client: "10.9.0.1:0".parse().unwrap(),
            flags: wire::FLAG_TEMPLATE,
            state: 0,
            ..c
        };
        assert!(enter(&template));
        assert_eq!(ipvs.conns().len(), 2);
    }

    /// A FULLNAT connection's local address and port goes out with it
    /// (and again when it changes), and a backup keeps it for a FULLNAT
    /// real server of its own (`-Lcn` shows it); not for another method.
    #[test]
    fn the_fullnat_local_pair_is_sent_and_kept() {
        let (mut master, dest) = director();
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        };
        let fnat = master
            .add_dest(
                &key,
                DestConfig::new("10.0.1.2".parse().unwrap(), 80).forward(ForwardMethod::FullNat),
            )
            .unwrap();
        let t0 = Instant::from_secs(10);
        let local: SocketAddr = "10.3.0.1:40000".parse().unwrap();
        let mut f = flow(fnat, TcpState::Established);
        f.local = Some(local);
        master.mirror_conn(t0, &f).unwrap();
        let mut walk = Walk::default();
        let mut none = FastMap::default();
        let out = changes(&master, t0, &mut walk, &mut none);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].local, Some(local));
        assert_eq!(
            bulk_page(
                &master,
                &mut Bulk {
                    restart: true,
                    ..Bulk::default()
                }
            )[0]
            .local,
            Some(local)
        );
        // A new pair (the flow's pair changed on the master) goes out at once.
        let moved: SocketAddr = "10.3.0.2:40001".parse().unwrap();
        f.local = Some(moved);
        master.mirror_conn(t0, &f).unwrap();
        let out = changes(&master, t0 + Duration::from_secs(1), &mut walk, &mut none);
        assert_eq!(
            out.iter().map(|c| c.local).collect::<Vec<_>>(),
            vec![Some(moved)]
        );
        // Through the wire to a backup with the same configuration.
        let dgrams = wire::build_v1(0, &out, 1472).unwrap();
        let got = wire::parse(&dgrams[0]).unwrap().conns;
        let (mut backup, _) = director();
        backup
            .add_dest(
                &key,
                DestConfig::new("10.0.1.2".parse().unwrap(), 80).forward(ForwardMethod::FullNat),
            )
            .unwrap();
        let m = resolve(&backup, &got[0]).unwrap();
        assert_eq!(m.local, Some(moved));
        backup.mirror_conn(t0, &m).unwrap();
        // What `-Lcn` lists.
        let snap = crate::view::snapshot(&backup, t0, true);
        assert_eq!(
            snap.conns.iter().map(|c| c.local).collect::<Vec<_>>(),
            vec![Some(moved)]
        );
        // A pair sent for a real server that is not FULLNAT here is not kept.
        let mut direct = got[0].clone();
        direct.dest = "10.0.1.1:80".parse().unwrap();
        assert_eq!(resolve(&backup, &direct).unwrap().local, None);
        // The master's other (direct-routing) real server is untouched.
        assert!(master.dest(dest).is_some());
    }

    fn peer_entry(dest: &str, state: TcpState, idle_left_s: u32) -> wire::SyncConn {
        wire::SyncConn {
            protocol: 6,
            client: "10.9.0.1:4000".parse().unwrap(),
            vip: "10.0.0.1:80".parse().unwrap(),
            dest: dest.parse().unwrap(),
            flags: 0,
            state: state as u16,
            fwmark: 0,
            timeout_s: Some(idle_left_s),
            seq: None,
            pe_name: None,
            pe_data: None,
            local: None,
        }
    }

    fn tuple_of(c: &wire::SyncConn) -> Tuple {
        Tuple {
            protocol: c.protocol,
            client: c.client,
            vip: c.vip,
            template: false,
        }
    }

    /// The receive path on a bare director: what [`to_enter`] lets in is
    /// entered and remembered as received, as the daemon does.
    fn receive(
        ipvs: &mut Ipvs,
        c: &wire::SyncConn,
        now: Instant,
        rx: &mut FastMap<Tuple, Instant>,
    ) -> bool {
        let Some(m) = to_enter(ipvs, c, now, Some(rx)) else {
            return false;
        };
        let ok = ipvs.mirror_conn(now, &m).is_some();
        if ok {
            rx.insert(tuple_of(c), now);
        }
        ok
    }

    #[test]
    fn the_install_decision_keeps_own_fresher_state_and_refreshes_peer_copies() {
        let t = |s| Instant::from_secs(s);
        // Nothing here: enter.
        assert_eq!(decide(None, t(100)), Decision::Enter);
        // A peer's copy with no traffic here since: refreshed, whatever the
        // peer's age of it.
        let copy = Local {
            last: t(100),
            received: Some(t(100)),
        };
        assert_eq!(decide(Some(copy), t(50)), Decision::Enter);
        assert_eq!(decide(Some(copy), t(200)), Decision::Enter);
        // Our own flow: a peer that saw it no later keeps it ours ...
        let own = Local {
            last: t(100),
            received: None,
        };
        assert_eq!(
            decide(Some(own), t(100)),
            Decision::KeepOwn { took_over: false }
        );
        assert_eq!(
            decide(Some(own), t(100) + SLACK),
            Decision::KeepOwn { took_over: false }
        );
        // ... one that saw it later (the flow moved away) replaces it.
        assert_eq!(decide(Some(own), t(110)), Decision::Enter);
        // A peer's copy whose traffic came here since: ours now.
        let moved = Local {
            last: t(120),
            received: Some(t(100)),
        };
        assert_eq!(
            decide(Some(moved), t(110)),
            Decision::KeepOwn { took_over: true }
        );
        assert_eq!(decide(Some(moved), t(130)), Decision::Enter);
    }

    #[test]
    fn a_peer_never_overwrites_a_flow_this_director_carries() {
        let (mut ipvs, dest) = director();
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        };
        let other = ipvs
            .add_dest(&key, DestConfig::new("10.0.1.2".parse().unwrap(), 80))
            .unwrap();
        let full = ipvs.timeouts().tcp(TcpState::Established);
        let t0 = Instant::from_secs(1000);
        // Our own flow to 10.0.1.1, seen at t0.
        let mut own = flow(dest, TcpState::Established);
        own.idle_left = full;
        ipvs.mirror_conn(t0, &own).unwrap();
        let mut rx = FastMap::default();
        let full_s = full.as_secs() as u32;
        // A peer's stale view (its last packet 100 s before ours) to
        // another server: ignored, the table keeps ours.
        let stale = peer_entry("10.0.1.2:80", TcpState::Established, full_s - 100);
        assert!(!receive(
            &mut ipvs,
            &stale,
            t0 + Duration::from_secs(1),
            &mut rx
        ));
        let (_, c) = ipvs.conns().iter().next().unwrap();
        assert_eq!(c.dest, dest.0);
        assert!(rx.is_empty(), "not a peer's flow");
        // The flow moved away: the peer saw it 60 s after us, fresher.
        let fresh = peer_entry("10.0.1.2:80", TcpState::Established, full_s);
        assert!(receive(
            &mut ipvs,
            &fresh,
            t0 + Duration::from_secs(60),
            &mut rx
        ));
        let (_, c) = ipvs.conns().iter().next().unwrap();
        assert_eq!(c.dest, other.0);
        assert_eq!(ipvs.conns().len(), 1);
        // Now a peer's copy: its refreshes come in, and it is not sent back.
        let later = t0 + Duration::from_secs(90);
        assert!(receive(&mut ipvs, &fresh, later, &mut rx));
        let mut walk = Walk::default();
        assert!(changes(&ipvs, later, &mut walk, &mut rx).is_empty());
    }

    #[test]
    fn a_peer_flow_becomes_ours_once_its_traffic_comes_here() {
        let (mut ipvs, dest) = director();
        let full = ipvs.timeouts().tcp(TcpState::Established);
        let full_s = full.as_secs() as u32;
        let t0 = Instant::from_secs(1000);
        let mut rx = FastMap::default();
        let mut walk = Walk::default();
        // A peer's flow, entered: not sent (no echo among N directors),
        // however often its refresh comes.
        let c = peer_entry("10.0.1.1:80", TcpState::Established, full_s - 5);
        assert!(receive(&mut ipvs, &c, t0, &mut rx));
        assert!(changes(&ipvs, t0, &mut walk, &mut rx).is_empty());
        assert!(receive(&mut ipvs, &c, t0 + REFRESH, &mut rx));
        assert!(changes(&ipvs, t0 + REFRESH, &mut walk, &mut rx).is_empty());
        // ECMP moves it here: the data plane reports it seen 10 s after the
        // last peer message (a mirror with its full idle time left).
        let seen = t0 + REFRESH + Duration::from_secs(10);
        let mut here = flow(dest, TcpState::Established);
        here.idle_left = full;
        ipvs.mirror_conn(seen, &here).unwrap();
        let out = changes(&ipvs, seen, &mut walk, &mut rx);
        assert_eq!(out.len(), 1, "ours now: sent to the peers");
        assert!(rx.is_empty());
        // The old director's refresh (it last saw the flow 40 s ago) no
        // longer overwrites it.
        let old = peer_entry("10.0.1.1:80", TcpState::Established, full_s - 40);
        assert!(!receive(
            &mut ipvs,
            &old,
            seen + Duration::from_secs(1),
            &mut rx
        ));
        assert!(rx.is_empty());
    }

    #[test]
    fn own_addresses_are_recognised() {
        let own: Vec<IpAddr> = vec!["10.1.0.1".parse().unwrap(), "fd00::1".parse().unwrap()];
        assert!(from_self("10.1.0.1".parse().unwrap(), &own));
        assert!(from_self("fd00::1".parse().unwrap(), &own));
        assert!(!from_self("10.1.0.2".parse().unwrap(), &own));
        assert!(!from_self("10.1.0.1".parse().unwrap(), &[]));
    }
}
