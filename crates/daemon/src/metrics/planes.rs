//! The data planes' families: the XDP plane's FULLNAT and SYN-flood guard
//! counters, the socket (sock_lb) plane's and the proxy plane's.

use super::*;

/// A per-service counter family: its name, its help and how to read it
/// from a service's counters `T`.
type Counter<T> = (&'static str, &'static str, fn(&T) -> u64);

/// One counter family a `families` entry, with a sample a service.
fn service_counters<T>(families: &[Counter<T>], services: &[(ServiceKey, T)]) -> Vec<Family> {
    families
        .iter()
        .map(|&(name, help, get)| {
            let mut f = Family::new(name, Kind::Counter, help);
            for (key, c) in services {
                f.push(service_labels(key), Value::Int(get(c)));
            }
            f
        })
        .collect()
}

/// The XDP data plane's FULLNAT counters, per service with a local address
/// pool: new flows dropped because no (local address, port) was free toward
/// their real server, and pairs handed out.
pub fn xdp_fnat(services: &[(ServiceKey, rvs_xdp::maps::FnatStats)]) -> Vec<Family> {
    let families: [Counter<rvs_xdp::maps::FnatStats>; 11] = [
        (
            "rvs_xdp_fnat_exhausted_total",
            "FULLNAT connections refused: every (local address, port) pair toward \
             their real server was held by a live flow (the pool is too small), or the \
             translation tables were full. Each connection once, however many SYNs it \
             sends while refused.",
            |c| c.exhausted,
        ),
        (
            "rvs_xdp_fnat_allocated_total",
            "(local address, port) pairs handed out to new FULLNAT flows.",
            |c| c.allocated,
        ),
        (
            "rvs_xdp_fnat_toa_inserted_total",
            "Client handshake segments of FULLNAT TCP flows that got the TOA option \
             (the client's address for the real server).",
            |c| c.toa_inserted,
        ),
        (
            "rvs_xdp_fnat_toa_noroom_total",
            "Client handshake segments sent on without the TOA: their TCP options left \
             no room for it (40 bytes).",
            |c| c.toa_noroom,
        ),
        (
            "rvs_xdp_fnat_toa_mtu_total",
            "Client handshake segments sent on without the TOA: it would have pushed \
             them past the MTU toward the real servers.",
            |c| c.toa_mtu,
        ),
        (
            "rvs_xdp_fnat_toa_errors_total",
            "Client handshake segments the TOA failed on otherwise (malformed header, \
             no headroom in the frame).",
            |c| c.toa_error,
        ),
        (
            "rvs_xdp_fnat_mss_clamped_total",
            "Real servers' SYN-ACKs whose MSS option the director lowered by the TOA's \
             length.",
            |c| c.mss_clamped,
        ),
        (
            "rvs_xdp_fnat_probes_total",
            "(local address, port) pairs the pool walk looked at for new FULLNAT flows, \
             taken or free (divided by the pairs handed out: the search's mean length).",
            |c| c.probes,
        ),
        (
            "rvs_xdp_fnat_icmp_to_rs_total",
            "ICMP errors from the client's side about FULLNAT flows, translated \
             (local address -> real server) and sent to the real server.",
            |c| c.icmp_to_rs,
        ),
        (
            "rvs_xdp_fnat_icmp_to_client_total",
            "ICMP errors from the real servers' side about FULLNAT flows, translated \
             (VIP -> client) and sent to the client.",
            |c| c.icmp_to_client,
        ),
        (
            "rvs_xdp_fnat_icmp_mtu_lowered_total",
            "Fragmentation-needed / packet-too-big errors sent to clients of FULLNAT \
             flows with their MTU lowered by the TOA's length.",
            |c| c.icmp_mtu_lowered,
        ),
    ];
    service_counters(&families, services)
}

/// The XDP data plane's SYN-flood counters, per service (rvs_xdp_*): what
/// the embryonic tables took and shed, what the guard forwarded without an
/// entry, what passed for want of a flow, what was adopted mid-stream.
pub fn xdp_flood(services: &[(ServiceKey, rvs_xdp::maps::SvcFlood)]) -> Vec<Family> {
    let families: [Counter<rvs_xdp::maps::SvcFlood>; 7] = [
        (
            "rvs_xdp_embryonic_flows_total",
            "TCP flows that got an embryonic entry (a SYN was scheduled).",
            |c| c.embryonic,
        ),
        (
            "rvs_xdp_promoted_flows_total",
            "Embryonic flows whose handshake completed (moved to the flow table).",
            |c| c.promoted,
        ),
        (
            "rvs_xdp_shed_flows_total",
            "Embryonic flows that did not complete their handshake (evicted from the \
             embryonic table by newer ones, expired, reset, or still waiting).",
            |c| c.embryonic.saturating_sub(c.promoted),
        ),
        (
            "rvs_xdp_guarded_flows_total",
            "New flows of hash-scheduled DR/TUN services forwarded without an entry \
             (the SYN-flood guard, --max-new-flows).",
            |c| c.guarded,
        ),
        (
            "rvs_xdp_unknown_segments_total",
            "TCP segments without SYN of no known flow, passed to the kernel.",
            |c| c.unknown,
        ),
        (
            "rvs_xdp_adopted_flows_total",
            "TCP flows of hash-scheduled services adopted mid-stream: a segment without \
             SYN of no known flow got a flow entry on the real server the hash names \
             (a flow another director of the fleet had, moved here by ECMP).",
            |c| c.adopted,
        ),
        (
            "rvs_xdp_refused_source_total",
            "New flows dropped because the client is outside the service's source \
             ranges (Kubernetes' loadBalancerSourceRanges).",
            |c| c.refused,
        ),
    ];
    service_counters(&families, services)
}

/// The sock data plane's counters (rvs_sock_*), as its worker last read
/// them (every second): per real server, the sockets the programs gave it
/// and those of them still open; the programs' per-CPU event counters
/// (TCP sockets and UDP sessions scheduled, UDP sends that kept their
/// real server, connect/sendmsg refused for want of a real server); the
/// open sockets by protocol. Connections through the XDP plane of an
/// `xdp,sock` daemon are not in these (they are in `rvs_*` director
/// families with the sock plane's).
pub fn sock(s: &rvs_sock::plane::SockStats) -> Vec<Family> {
    let mut per: Vec<_> = s.per_dest().into_iter().collect();
    per.sort_by(|a, b| {
        (service_labels(&a.0.0), a.0.1, a.0.2).cmp(&(service_labels(&b.0.0), b.0.1, b.0.2))
    });
    let labels = |(key, addr, port): &(ServiceKey, std::net::IpAddr, u16)| {
        backend_labels(service_labels(key), *addr, *port)
    };
    let mut chosen = Family::new(
        "rvs_sock_backend_connections_total",
        Kind::Counter,
        "Sockets the programs gave this real server (TCP connect, UDP session) since it was added.",
    );
    let mut open = Family::new(
        "rvs_sock_backend_open_sockets",
        Kind::Gauge,
        "Sockets given this real server and not yet closed (what lc/wlc/sed/nq weigh).",
    );
    for (k, st) in &per {
        chosen.push(labels(k), Value::Int(st.total));
        open.push(labels(k), Value::Int(st.active));
    }
    let e = s.events();
    let (tcp, udp) = s.open_sockets();
    vec![
        chosen,
        open,
        Family::scalar(
            "rvs_sock_tcp_connections_total",
            Kind::Counter,
            "TCP connect() calls to a VIP given a real server.",
            e.tcp,
        ),
        Family::scalar(
            "rvs_sock_udp_sessions_total",
            Kind::Counter,
            "UDP sockets given a real server for a VIP (connect, or first sendmsg; again after theirs was deleted).",
            e.udp,
        ),
        Family::scalar(
            "rvs_sock_udp_kept_total",
            Kind::Counter,
            "UDP sendmsg() calls to a VIP that kept the real server the socket had.",
            e.udp_kept,
        ),
        Family::scalar(
            "rvs_sock_refused_no_dest_total",
            Kind::Counter,
            "connect()/sendmsg() calls to a VIP refused with EPERM: no schedulable real server.",
            e.no_dest,
        ),
        Family::scalar(
            "rvs_sock_refused_source_total",
            Kind::Counter,
            "connect()/sendmsg() calls to a VIP refused with EPERM: the source is outside the service's source ranges.",
            e.refused_source,
        ),
        Family::scalar(
            "rvs_sock_open_tcp_sockets",
            Kind::Gauge,
            "Open TCP sockets the programs gave a real server.",
            tcp,
        ),
        Family::scalar(
            "rvs_sock_open_udp_sockets",
            Kind::Gauge,
            "Open UDP sockets the programs gave a real server.",
            udp,
        ),
    ]
}

/// `rvs_dataplane_refused_commands_total{plane,map}`: the commands each
/// packet plane could not carry for want of room in one of its maps
/// (`planes`: each plane's name and its totals per map). The log names the
/// first of each map and then only sums them up; this has every one.
pub fn refused(planes: &[(&'static str, Vec<(&'static str, u64)>)]) -> Vec<Family> {
    let mut f = Family::new(
        "rvs_dataplane_refused_commands_total",
        Kind::Counter,
        "Commands (a service, a real server, ...) this data plane did not carry for want of room in the map named: the control plane keeps them (rvsadm -L lists them), the plane retries when it has room.",
    );
    for (plane, maps) in planes {
        for (map, n) in maps {
            f.push(
                vec![("plane", (*plane).to_owned()), ("map", (*map).to_owned())],
                Value::Int(*n),
            );
        }
    }
    if f.samples.is_empty() {
        return Vec::new();
    }
    vec![f]
}

/// The proxy data plane's own counters.
pub fn proxy(p: &rvs_proxy::ProxyStats) -> Vec<Family> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = Vec::new();
    for (name, help, v) in [
        (
            "rvs_proxy_accepted_total",
            "TCP connections accepted.",
            p.accepted.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_max_conns_total",
            "Connections refused: the service's max_conns was reached.",
            p.refused_max_conns.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_source_total",
            "Connections refused and datagrams dropped: the client is outside the service's source ranges (loadBalancerSourceRanges).",
            p.refused_source.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_fd_budget_total",
            "Connections refused: the file-descriptor budget was spent.",
            p.refused_fd_budget.load(Relaxed),
        ),
        (
            "rvs_proxy_refused_no_dest_total",
            "Connections refused: no real server available.",
            p.refused_no_dest.load(Relaxed),
        ),
        (
            "rvs_proxy_accept_errors_total",
            "accept(2) errors (EMFILE, ENFILE, ...); the accept loop continues.",
            p.accept_errors.load(Relaxed),
        ),
        (
            "rvs_proxy_connect_failures_total",
            "Connections to real servers that failed or timed out.",
            p.connect_failures.load(Relaxed),
        ),
        (
            "rvs_proxy_laddr_exhausted_total",
            "Connections (TCP) and sessions (UDP) to real servers refused: no local pool address had a port left toward the server.",
            p.laddr_exhausted.load(Relaxed),
        ),
        (
            "rvs_proxy_retries_total",
            "Connections retried on another real server.",
            p.retries.load(Relaxed),
        ),
        (
            "rvs_proxy_proxy_header_rejected_total",
            "Connections from trusted upstreams without a valid PROXY header.",
            p.proxy_header_rejected.load(Relaxed),
        ),
    ] {
        out.push(Family::scalar(name, Kind::Counter, help, v));
    }
    for (name, help, v) in [
        (
            "rvs_proxy_active_tcp",
            "TCP connections being relayed.",
            p.active_tcp.load(Relaxed),
        ),
        (
            "rvs_proxy_active_udp_flows",
            "UDP flows being relayed.",
            p.active_udp_flows.load(Relaxed),
        ),
        (
            "rvs_proxy_fds_in_use",
            "File descriptors held by relayed connections and pooled pipes.",
            p.fds_in_use.load(Relaxed) as u64,
        ),
    ] {
        out.push(Family::scalar(name, Kind::Gauge, help, v));
    }
    out
}
