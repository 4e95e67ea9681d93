//! The decisions of connection sync over the director's table, as plain
//! functions: which entries a master sends ([`changes`]: its walk; and
//! [`bulk_page`]: a bulk answer), and what of a peer's entry this director
//! enters ([`decide`] and [`resolve`]). The [`Endpoint`]
//! (`super`) runs them; nothing here reads a clock or does I/O.
//!
//! [`Endpoint`]: super::Endpoint

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rvs_core::conn::{Conn, ConnFlags};
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::{AddrFamily, ForwardMethod, Protocol, ServiceKey};
use rvs_core::state::TcpState;
use rvs_core::time::Instant;
use rvs_wire::ipvs_sync as wire;

use super::{BULK_PAGE, FastMap, PAGE, REFRESH, WARM_MAX, WARM_QUIET};

/// A connection's identity on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tuple {
    pub(crate) protocol: u8,
    pub(crate) client: SocketAddr,
    pub(crate) vip: SocketAddr,
    pub(crate) template: bool,
}

impl Tuple {
    /// The identity of a received record.
    pub(crate) fn of_wire(c: &wire::SyncConn) -> Tuple {
        Tuple {
            protocol: c.protocol,
            client: c.client,
            vip: c.vip,
            template: c.flags & wire::FLAG_TEMPLATE != 0,
        }
    }
}

/// Whether a backup daemon started at `started` that last entered peers'
/// entries at `heard` is still gathering its peers' tables at `now`: less
/// than [`WARM_MAX`] since its start, and its bulk answers have not yet
/// gone quiet for [`WARM_QUIET`]. A joining director of an ECMP fleet
/// announces its VIPs only after that, so the flows ECMP moves to it are
/// already in its table.
pub fn warming(started: Option<Instant>, heard: Option<Instant>, now: Instant) -> bool {
    let Some(started) = started else {
        return false;
    };
    if now.saturating_since(started) >= WARM_MAX {
        return false;
    }
    !heard.is_some_and(|h| h >= started && now.saturating_since(h) >= WARM_QUIET)
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
/// its table once a [`PERIOD`](super::PERIOD), and the wire carries whole seconds.
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
pub(crate) fn from_self(src: IpAddr, own: &[IpAddr]) -> bool {
    own.contains(&src)
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
        // The kernel sends its flags minus HASHED; ours never carry it, and
        // rvs's own bits (ASSURED, HELD) and SYNC stay here.
        flags: u32::from(c.flags.0) & wire::KERNEL_FLAGS,
        // A template's state is the kernel's NONE or ASSURED (rvs keeps
        // the latter as a flag).
        state: if t.template {
            if c.flags.contains(ConnFlags::ASSURED) {
                wire::TPL_STATE_ASSURED
            } else {
                0
            }
        } else {
            u16::from(c.state)
        },
        fwmark: c.fwmark,
        timeout_s: Some(c.timeout_ms / 1000),
        seq: None,
        pe_name: None,
        pe_data: None,
        local: local.filter(|_| !t.template),
        bulk: None,
    }
}

/// A master's walk over its table, a page per period.
#[derive(Default)]
pub(crate) struct Walk {
    /// Next slab position.
    next: usize,
    /// The current sweep's number.
    sweep: u32,
    /// What was sent, when, and the last sweep that saw it.
    sent: FastMap<Tuple, Sent>,
}

/// What of the next page of the table must go out now; at the end of a
/// sweep, forget what was sent of entries that are gone.
pub(crate) fn changes(
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

/// Where a bulk answer stands: the next slab position, and how many
/// positions are still to be read before the whole table was covered.
#[derive(Debug, Default)]
pub(crate) struct Bulk {
    pub(crate) next: usize,
    pub(crate) todo: usize,
    /// A request came since the last page: cover the whole table again.
    pub(crate) restart: bool,
}

impl Bulk {
    pub(crate) fn active(&self) -> bool {
        self.restart || self.todo > 0
    }
}

/// The next page of a bulk answer: every entry a master would sync among
/// the next [`BULK_PAGE`] slab positions (wrapping at the table's end),
/// received ones included (the requester wants all).
pub(crate) fn bulk_page(ipvs: &Ipvs, b: &mut Bulk) -> Vec<wire::SyncConn> {
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
pub(crate) fn syncid_matches(ours: u8, theirs: u8) -> bool {
    ours == 0 || theirs == 0 || ours == theirs
}

/// What becomes of a peer's entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    /// This director keeps its own flow ([`decide`]; one it took over
    /// left `received`).
    Keep,
    /// This director has no such service or real server.
    Unresolved,
    /// Enter it.
    Enter(MirroredConn),
}

/// What of a peer's entry `c` to enter at `now` (see [`Verdict`]).
pub(crate) fn verdict(
    ipvs: &Ipvs,
    c: &wire::SyncConn,
    now: Instant,
    received: Option<&mut FastMap<Tuple, Instant>>,
) -> Verdict {
    let t = Tuple::of_wire(c);
    if !t.template {
        let was = received.as_ref().and_then(|rx| rx.get(&t).copied());
        let full = full_timeout(ipvs, c.protocol, u8::try_from(c.state).unwrap_or(u8::MAX));
        // A v0 record carries no timeout: its sender saw the flow just now
        // (the kernel arms the state's full timeout for it).
        let peer_last = last_seen(
            now,
            c.timeout_s
                .map_or(full, |s| Duration::from_secs(u64::from(s))),
            full,
        );
        if let Decision::KeepOwn { took_over } = decide(local_of(ipvs, c, was), peer_last) {
            if took_over && let Some(rx) = received {
                rx.remove(&t);
            }
            return Verdict::Keep;
        }
    }
    match resolve(ipvs, c) {
        // Our own template to the same real server, echoed back in a
        // peer's bulk answer: kept ours (entered, it would count as the
        // peer's and this director would stop sending it).
        Some(m)
            if t.template
                && !received.is_some_and(|rx| rx.contains_key(&t))
                && own_template(ipvs, c, &m) =>
        {
            Verdict::Keep
        }
        Some(m) => Verdict::Enter(m),
        None => Verdict::Unresolved,
    }
}

/// Whether the director holds the template `c` names going to `m`'s real
/// server.
fn own_template(ipvs: &Ipvs, c: &wire::SyncConn, m: &MirroredConn) -> bool {
    let key = rvs_core::conn::ConnKey {
        protocol: c.protocol,
        af: AddrFamily::of(&c.client.ip()),
        caddr: rvs_core::conn::Addr::from_ip(c.client.ip()),
        cport: c.client.port(),
        vaddr: rvs_core::conn::Addr::from_ip(c.vip.ip()),
        vport: c.vip.port(),
    };
    let table = ipvs.conns();
    table
        .lookup_template(&key, None)
        .and_then(|id| table.get(id))
        .is_some_and(|own| own.dest == m.dest.0)
}

/// What of a peer's entry `c` to enter at `now`: `None` when this
/// director keeps its own flow ([`decide`]; one it took over leaves
/// `received`) or has no such service or real server.
#[cfg(test)]
pub(crate) fn to_enter(
    ipvs: &Ipvs,
    c: &wire::SyncConn,
    now: Instant,
    received: Option<&mut FastMap<Tuple, Instant>>,
) -> Option<MirroredConn> {
    match verdict(ipvs, c, now, received) {
        Verdict::Enter(m) => Some(m),
        Verdict::Keep | Verdict::Unresolved => None,
    }
}

/// One synced entry as this director's: its service (by fwmark, by
/// address and port, or the port-zero service for a template), its real
/// server, its state and its timeout. `None` when this director has no
/// such service or real server, or the entry is of a persistence engine
/// it does not have.
fn resolve(ipvs: &Ipvs, c: &wire::SyncConn) -> Option<MirroredConn> {
    let template = c.flags & wire::FLAG_TEMPLATE != 0;
    let protocol = match c.protocol {
        6 => Protocol::Tcp,
        17 => Protocol::Udp,
        132 => Protocol::Sctp,
        // A fwmark service's persistence template is the kernel's
        // `<IPPROTO_IP, caddr, 0, fwmark, 0, daddr, 0>`: protocol 0 and the
        // mark as its virtual address. The table keys a fwmark service's
        // templates by protocol 0 whatever protocol the flow names
        // (`Ipvs::mirror_conn`).
        0 if template && c.fwmark != 0 => Protocol::Tcp,
        _ => return None,
    };
    // The kernel skips entries of a persistence engine it does not have.
    if c.pe_name.as_deref().is_some_and(|n| n != "sip") {
        return None;
    }
    let af = if c.vip.is_ipv6() {
        AddrFamily::Inet6
    } else {
        AddrFamily::Inet
    };
    // A protocol-0 template is a fwmark service's only.
    let by_addr = c.protocol != 0;
    let keys = [
        (c.fwmark != 0).then_some(ServiceKey::Fwmark { mark: c.fwmark, af }),
        by_addr.then_some(ServiceKey::Addr {
            protocol,
            addr: c.vip.ip(),
            port: c.vip.port(),
        }),
        by_addr.then_some(ServiceKey::Addr {
            protocol,
            addr: c.vip.ip(),
            port: 0,
        }),
    ];
    // The record's real-server port is the real server's, or the
    // packet's when the master's scheduler kept it (a persistent fwmark
    // or port-zero service: `ip_vs_sched_persist`), or 0 for a template
    // of a fwmark or port-zero service.
    let port_ok = |svc_port: u16, p: u16| {
        p == 0
            || p == c.dest.port()
            || (svc_port == 0 && (c.dest.port() == c.vip.port() || template && c.dest.port() == 0))
    };
    let dest = keys.iter().flatten().find_map(|k| {
        ipvs.service(k)?.dests().iter().find_map(|d| {
            (d.config.addr == c.dest.ip() && port_ok(k.port(), d.config.port)).then_some(d.id)
        })
    })?;
    let state = u8::try_from(c.state).ok()?;
    // Without a timeout (a v0 record) the kernel arms the state's own
    // timeout (180 s for a template); 300 s here once made a v0 entry look
    // seen in the future, so its next state change was refused as staler.
    let idle_left = match c.timeout_s {
        Some(s) => Duration::from_secs(u64::from(s)),
        None if template => Duration::from_secs(180),
        None => full_timeout(ipvs, c.protocol, state),
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::ipvs::IpvsConfig;
    use rvs_core::model::{DestConfig, ServiceConfig};
    use std::net::Ipv4Addr;

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
        ipvs.add_service(vs(), ServiceConfig::new(AddrFamily::Inet))
            .unwrap();
        let dest = add_real(&mut ipvs, DestConfig::new("10.0.1.1".parse().unwrap(), 80));
        (ipvs, dest)
    }

    /// The virtual service of [`director`]: TCP 10.0.0.1:80.
    fn vs() -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        }
    }

    /// Add a real server to [`vs`].
    fn add_real(ipvs: &mut Ipvs, cfg: DestConfig) -> rvs_core::dest::DestId {
        ipvs.add_dest(&vs(), cfg).unwrap()
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

    /// Issue 29: a record carries the kernel's flags only (never rvs's
    /// HELD 0x8000 or ASSURED 0x4000), and an assured template goes out in
    /// the kernel's template state ASSURED (1), which also assures the
    /// template a backup enters.
    #[test]
    fn records_carry_kernel_flags_only_and_the_template_state() {
        let (mut ipvs, dest) = director_of(16);
        let t0 = Instant::from_secs(10);
        // A held connection of the proxy API (rvs's HELD bit).
        let f = ipvs
            .open(
                t0,
                Protocol::Tcp,
                "10.9.0.2:4000".parse().unwrap(),
                "10.0.0.1:80".parse().unwrap(),
            )
            .unwrap();
        // A peer's assured template, as its record would enter it.
        let mut tpl = flow(dest, TcpState::None);
        tpl.template = true;
        tpl.client = "10.9.0.0:0".parse().unwrap();
        tpl.state = wire::TPL_STATE_ASSURED as u8;
        ipvs.mirror_conn(t0, &tpl).unwrap();
        let mut seen = 0;
        for (id, c) in ipvs.conns().iter() {
            let w = to_wire(c, None);
            assert_eq!(w.flags & !wire::KERNEL_FLAGS, 0, "{:#x}", w.flags);
            if c.is_template() {
                assert!(c.flags.contains(ConnFlags::ASSURED));
                assert_eq!(c.template_state_name(), "ASSURED");
                assert_eq!(w.state, wire::TPL_STATE_ASSURED);
                assert_eq!(w.flags & wire::FLAG_TEMPLATE, wire::FLAG_TEMPLATE);
            } else {
                assert_eq!(Some(id), f.conn);
                assert!(c.flags.contains(ConnFlags::HELD));
                assert_eq!(w.state, u16::from(c.state));
            }
            seen += 1;
        }
        assert_eq!(seen, 2);
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
    /// `cargo test --release -p rvs-control --lib sync_page_cost -- --ignored --nocapture`
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
            bulk: None,
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

    /// Issue 29: a kernel master's fwmark service syncs its persistence
    /// template as `<IPPROTO_IP, caddr, 0, fwmark, 0, daddr, 0>` (protocol
    /// 0, the mark as the virtual address) and its connections with their
    /// own protocol and VIP and the mark: both enter this director's fwmark
    /// service, the template keyed as the scheduler keys its own (protocol
    /// 0), so the connection's next packet finds it. A protocol-0 record
    /// that is not a fwmark template is nobody's.
    #[test]
    fn a_kernel_fwmark_template_enters_the_fwmark_service() {
        let mut ipvs = Ipvs::new(IpvsConfig::default());
        let fw = ServiceKey::Fwmark {
            mark: 7,
            af: AddrFamily::Inet,
        };
        let mut cfg = ServiceConfig::new(AddrFamily::Inet);
        cfg.persistent = Some(300);
        ipvs.add_service(fw, cfg).unwrap();
        ipvs.add_dest(&fw, DestConfig::new("10.0.1.1".parse().unwrap(), 8080))
            .unwrap();
        let now = Instant::from_secs(1);
        let tpl = wire::SyncConn {
            protocol: 0,
            client: "10.9.0.1:0".parse().unwrap(),
            vip: "0.0.0.7:0".parse().unwrap(),
            flags: wire::FLAG_TEMPLATE,
            state: wire::TPL_STATE_ASSURED,
            fwmark: 7,
            ..peer_entry("10.0.1.1:0", TcpState::None, 300)
        };
        // To the packet's port: the persistent fwmark service kept it.
        let conn = wire::SyncConn {
            vip: "10.0.0.9:80".parse().unwrap(),
            fwmark: 7,
            ..peer_entry("10.0.1.1:80", TcpState::Established, 900)
        };
        for c in [&tpl, &conn] {
            let m = resolve(&ipvs, c).expect("the fwmark service's entry");
            ipvs.mirror_conn(now, &m).unwrap();
        }
        let key = rvs_core::conn::ConnKey {
            protocol: 0,
            af: AddrFamily::Inet,
            caddr: rvs_core::conn::Addr::from_ip("10.9.0.1".parse().unwrap()),
            cport: 0,
            vaddr: rvs_core::conn::Addr::from_ip("0.0.0.7".parse().unwrap()),
            vport: 0,
        };
        let t = ipvs.conns().lookup_template(&key, None).expect("template");
        let t = ipvs.conns().get(t).unwrap();
        assert!(t.flags.contains(ConnFlags::ASSURED));
        assert_eq!((t.dport, t.protocol), (0, 0));
        assert_eq!(ipvs.conns().len(), 2);
        // Sent on as the kernel sent it, the connection with its mark too.
        let w = to_wire(t, None);
        assert_eq!((w.protocol, w.vip, w.fwmark), (0, tpl.vip, 7));
        let c = ipvs
            .conns()
            .iter()
            .find(|(_, c)| !c.is_template())
            .unwrap()
            .1;
        let w = to_wire(c, None);
        assert_eq!((w.fwmark, w.dest), (7, conn.dest));
        // Another real server of that address is not this one.
        let other = wire::SyncConn {
            dest: "10.0.1.1:81".parse().unwrap(),
            ..conn.clone()
        };
        assert!(resolve(&ipvs, &other).is_none());
        let stray = wire::SyncConn {
            fwmark: 0,
            ..tpl.clone()
        };
        assert!(resolve(&ipvs, &stray).is_none());
        let not_template = wire::SyncConn { flags: 0, ..tpl };
        assert!(resolve(&ipvs, &not_template).is_none());
    }

    /// A FULLNAT connection's local address and port goes out with it
    /// (and again when it changes), and a backup keeps it for a FULLNAT
    /// real server of its own (`-Lcn` shows it); not for another method.
    #[test]
    fn the_fullnat_local_pair_is_sent_and_kept() {
        let (mut master, dest) = director();
        let fnat_real =
            || DestConfig::new("10.0.1.2".parse().unwrap(), 80).forward(ForwardMethod::FullNat);
        let fnat = add_real(&mut master, fnat_real());
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
        add_real(&mut backup, fnat_real());
        let m = resolve(&backup, &got[0]).unwrap();
        assert_eq!(m.local, Some(moved));
        backup.mirror_conn(t0, &m).unwrap();
        // What `-Lcn` lists (rvsd's view reads the table's pair).
        let pairs: Vec<_> = backup
            .conns()
            .iter()
            .map(|(id, c)| local_pair(&backup, id, c))
            .collect();
        assert_eq!(pairs, vec![Some(moved)]);
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
            bulk: None,
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

    /// Issue 29 (found against the kernel's sync v0): records without a
    /// timeout carry a peer's state changes onto the entry they made, as
    /// v1 records do (the kernel's CLOSE_WAIT then TIME_WAIT).
    #[test]
    fn v0_records_without_a_timeout_update_the_peer_s_entry() {
        let (mut ipvs, _) = director_of(16);
        let mut rx = FastMap::default();
        let mut c = peer_entry("10.0.1.1:80", TcpState::Established, 0);
        c.timeout_s = None;
        let t0 = Instant::from_secs(100);
        assert!(receive(&mut ipvs, &c, t0, &mut rx));
        c.state = TcpState::CloseWait as u16;
        assert!(receive(&mut ipvs, &c, t0 + Duration::from_secs(1), &mut rx));
        c.state = TcpState::TimeWait as u16;
        assert!(receive(&mut ipvs, &c, t0 + Duration::from_secs(2), &mut rx));
        let (id, conn) = ipvs.conns().iter().next().expect("entered");
        assert_eq!(conn.state, TcpState::TimeWait as u8);
        // Armed with the state's own timeout (TIME_WAIT: 120 s).
        assert_eq!(
            ipvs.conns().deadline(id),
            Some(t0 + Duration::from_secs(2 + 120))
        );
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
        let other = add_real(&mut ipvs, DestConfig::new("10.0.1.2".parse().unwrap(), 80));
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

    /// A template of ours that a peer's bulk answer echoes back stays ours
    /// (still sent by our master, not remembered as the peer's); one to
    /// another real server replaces ours, as the kernel's backup does.
    #[test]
    fn an_own_template_echoed_back_stays_ours() {
        let (mut ipvs, dest) = director();
        let other = add_real(&mut ipvs, DestConfig::new("10.0.1.2".parse().unwrap(), 80));
        let t0 = Instant::from_secs(1000);
        let mut template = flow(dest, TcpState::Established);
        template.client = "10.9.0.0:0".parse().unwrap();
        template.template = true;
        template.state = 0;
        ipvs.mirror_conn(t0, &template).unwrap();
        let mut walk = Walk::default();
        let mut rx = FastMap::default();
        let mine = changes(&ipvs, t0, &mut walk, &mut rx);
        assert_eq!(mine.len(), 1);
        // The echo: kept, not received.
        let echo = mine[0].clone();
        assert!(!receive(
            &mut ipvs,
            &echo,
            t0 + Duration::from_secs(5),
            &mut rx
        ));
        assert!(rx.is_empty());
        assert_eq!(
            changes(&ipvs, t0 + REFRESH, &mut walk, &mut rx).len(),
            1,
            "still ours"
        );
        // A peer's template to another real server: entered, the peer's.
        let moved = wire::SyncConn {
            dest: "10.0.1.2:80".parse().unwrap(),
            ..echo
        };
        assert!(receive(
            &mut ipvs,
            &moved,
            t0 + Duration::from_secs(6),
            &mut rx
        ));
        assert_eq!(rx.len(), 1);
        let (_, c) = ipvs.conns().iter().next().unwrap();
        assert_eq!(c.dest, other.0);
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
