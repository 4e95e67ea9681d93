//! The daemon's state as a [`Snapshot`]: what `rvsadm -L/-S/-c` format and
//! what `/api/v1/state` serves as JSON.

use rvs_core::conn::Conn;
use rvs_core::ipvs::Ipvs;
use rvs_core::model::Protocol;
use rvs_core::state::{SctpState, TcpState};
use rvs_core::stats::{Counters, Rates};
use rvs_core::time::Instant;
use rvs_ipvsadm::snapshot::{ConnSnap, DestSnap, RatesSnap, ServiceSnap, Snapshot, StatsSnap};

use crate::daemon::Daemon;

/// The connection hash table size ipvsadm's header reports. rvs's table is
/// bounded by capacity, not sized in buckets; the kernel default (2^12) is
/// shown so scripts and eyes see the familiar header.
pub const CONN_TAB_SIZE: u32 = 4096;

fn stats(c: &Counters) -> StatsSnap {
    StatsSnap {
        conns: c.conns,
        inpkts: c.inpkts,
        outpkts: c.outpkts,
        inbytes: c.inbytes,
        outbytes: c.outbytes,
    }
}

fn rates(r: &Rates) -> RatesSnap {
    RatesSnap {
        cps: r.cps,
        inpps: r.inpps,
        outpps: r.outpps,
        inbps: r.inbps,
        outbps: r.outbps,
    }
}

/// Protocol and state names as `/proc/net/ip_vs_conn` prints them.
fn names(c: &Conn) -> (String, String) {
    let proto = match Protocol::from_number(c.protocol) {
        Some(p) => p.name().to_owned(),
        None => "IP".to_owned(),
    };
    let state = if c.is_template() {
        TcpState::None.name()
    } else {
        match Protocol::from_number(c.protocol) {
            Some(Protocol::Tcp) => TcpState::from_u8(c.state).map_or("ERR!", TcpState::name),
            Some(Protocol::Sctp) => SctpState::from_u8(c.state).map_or("ERR!", SctpState::name),
            _ => "UDP",
        }
    };
    (proto, state.to_owned())
}

/// Build the snapshot at `now`.
pub fn snapshot(ipvs: &Ipvs, now: Instant, with_conns: bool) -> Snapshot {
    let services = ipvs
        .services()
        .map(|s| {
            let mut snap = ServiceSnap::from_config(s.key(), s.config());
            snap.laddrs = s.laddrs().iter().map(|l| l.to_string()).collect();
            let q = s.quic_lb_counters();
            snap.quic_lb_counters = rvs_ipvsadm::snapshot::QuicLbCountersSnap {
                by_cid: q.by_cid,
                by_fallback: q.by_fallback,
                undecodable: q.undecodable,
            };
            snap.stats = stats(s.stats());
            snap.rates = rates(&s.rates());
            snap.dests = s
                .dests()
                .iter()
                .map(|d| {
                    let mut ds = DestSnap::from_config(&d.config);
                    ds.active = d.active;
                    ds.inactive = d.inactive;
                    ds.persist = d.persist;
                    ds.stats = stats(&d.stats);
                    ds.rates = rates(&ipvs.dest_rates(d.id));
                    ds
                })
                .collect();
            snap
        })
        .collect();
    let conns = if with_conns {
        let table = ipvs.conns();
        table
            .iter()
            .map(|(id, c)| {
                let (protocol, state) = names(c);
                let left = table
                    .deadline(id)
                    .map_or(0, |d| d.saturating_since(now).as_secs());
                let pe = table.pe_data(id);
                ConnSnap {
                    protocol,
                    state,
                    expire_secs: u32::try_from(left).unwrap_or(u32::MAX),
                    caddr: c.caddr.to_ip(c.af),
                    cport: c.cport,
                    vaddr: if c.protocol == 0 {
                        // fwmark templates: the kernel stores the mark as an IPv4 address
                        c.vaddr.to_ip(rvs_core::model::AddrFamily::Inet)
                    } else {
                        c.vaddr.to_ip(c.af)
                    },
                    vport: c.vport,
                    daddr: c.daddr.to_ip(c.af),
                    dport: c.dport,
                    pe_name: pe.map(|_| "sip".to_owned()),
                    pe_data: pe.map(|p| String::from_utf8_lossy(p).into_owned()),
                    local: table
                        .local(id)
                        .map(|(a, p)| std::net::SocketAddr::new(a.to_ip(c.af), p)),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    Snapshot {
        services,
        conns,
        timeouts: ipvs.timeouts().ipvsadm(),
        daemons: Vec::new(),
        conn_tab_size: CONN_TAB_SIZE,
    }
}

/// The JSON state view.
pub fn state(d: &Daemon, with_conns: bool) -> serde_json::Value {
    let mut snap = snapshot(d.controller().ipvs(), d.now(), with_conns);
    snap.daemons = d.daemon_snaps();
    let mut v = serde_json::to_value(&snap).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("announce".into(), d.announce().view());
    }
    v
}
