//! The daemon's state as a [`Snapshot`]: what `rvsadm -L/-S/-c` format and
//! what `/api/v1/state` serves as JSON.

use rvs_core::conn::{Conn, ConnId, ConnTable};
use rvs_core::dest::Dest;
use rvs_core::ipvs::{Ipvs, Service};
use rvs_core::model::{DestConfig, Protocol, ServiceKey};
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
        c.template_state_name()
    } else {
        match Protocol::from_number(c.protocol) {
            Some(Protocol::Tcp) => TcpState::from_u8(c.state).map_or("ERR!", TcpState::name),
            Some(Protocol::Sctp) => SctpState::from_u8(c.state).map_or("ERR!", SctpState::name),
            _ => "UDP",
        }
    };
    (proto, state.to_owned())
}

/// Real server `d` with configuration `config` (its own, or the one a
/// write is about to give it) and its counters.
fn dest_snap(ipvs: &Ipvs, d: &Dest, config: &DestConfig) -> DestSnap {
    let mut ds = DestSnap::from_config(config);
    ds.active = d.active;
    ds.inactive = d.inactive;
    ds.persist = d.persist;
    ds.stats = stats(&d.stats);
    ds.rates = rates(&ipvs.dest_rates(d.id));
    ds
}

/// Real server `config.addr:config.port` of `key` as a snapshot shows it
/// once its configuration is `config`: the answer of a write that edits
/// it, taken in the owner's turn (no snapshot rendered for it). `None`
/// when there is no such real server.
pub(crate) fn edited_dest(d: &Daemon, key: &ServiceKey, config: &DestConfig) -> Option<DestSnap> {
    let ipvs = d.controller().ipvs();
    let dest = ipvs
        .service(key)?
        .dests()
        .iter()
        .find(|x| x.config.addr == config.addr && x.config.port == config.port)?;
    Some(dest_snap(ipvs, dest, config))
}

/// One entry of the connection table as `rvsadm -Lc` lists it.
fn conn_snap(table: &ConnTable, id: ConnId, c: &Conn, now: Instant) -> ConnSnap {
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
}

/// A page of the connection table ([`conn_page`]).
#[derive(Debug, Default)]
pub struct ConnPage {
    /// The entries of the page that `keep` kept, in slab order.
    pub conns: Vec<ConnSnap>,
    /// The slab position of the next page's first entry; `None`: no
    /// entry after this page matches.
    pub next: Option<usize>,
    /// Entries in the table (connections and templates).
    pub len: usize,
}

/// Up to `limit` entries that `keep` keeps, from slab position `from` on,
/// and where the next page starts: a walk in pages from 0 lists every
/// entry that lives throughout it once (positions are stable while an
/// entry lives), and a page costs what it scans — `limit` entries and the
/// gaps between them — not a copy of the table.
pub fn conn_page(
    table: &ConnTable,
    now: Instant,
    from: usize,
    limit: usize,
    keep: &dyn Fn(&ConnSnap) -> bool,
) -> ConnPage {
    let mut page = ConnPage {
        len: table.len(),
        ..ConnPage::default()
    };
    for (id, c) in table.iter_slots(from, table.slots()) {
        let snap = conn_snap(table, id, c, now);
        if !keep(&snap) {
            continue;
        }
        if page.conns.len() == limit {
            page.next = Some(id.0 as usize);
            break;
        }
        page.conns.push(snap);
    }
    page
}

/// Service `s` of `ipvs` as the snapshot shows it (with its counters).
fn service_snap(ipvs: &Ipvs, s: &Service) -> ServiceSnap {
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
        .map(|d| dest_snap(ipvs, d, &d.config))
        .collect();
    snap
}

/// Service `key` as [`api_table`] shows it (QUIC-LB keys redacted, its
/// owner named), rendered alone: what the REST API's reads of one
/// service or real server, and its write answers, take, so that they do
/// not render the whole table after every write. `None`: no such
/// service.
pub(crate) fn api_service(d: &Daemon, key: &ServiceKey) -> Option<ServiceSnap> {
    let ipvs = d.controller().ipvs();
    let mut snap = service_snap(ipvs, ipvs.service(key)?);
    for spec in &mut snap.quic_lb {
        *spec = redacted(spec);
    }
    snap.owner = d.controller().owner_of(key).map(|o| o.name().to_owned());
    Some(snap)
}

/// Build the snapshot at `now`.
pub fn snapshot(ipvs: &Ipvs, now: Instant, with_conns: bool) -> Snapshot {
    let services = ipvs.services().map(|s| service_snap(ipvs, s)).collect();
    let conns = if with_conns {
        let table = ipvs.conns();
        table
            .iter()
            .map(|(id, c)| conn_snap(table, id, c, now))
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

/// The JSON state view the control socket serves (`rvsadm -L/-S`: QUIC-LB
/// keys in clear, as `-S` must save them).
pub fn state(d: &Daemon, with_conns: bool) -> serde_json::Value {
    state_of(d, with_conns, false)
}

/// [`state`] as `/api/v1/state` serves it: QUIC-LB keys as fingerprints
/// (see [`redact_quic_keys`]); the control socket's (what `rvsadm -S`
/// saves from) keeps them.
pub fn api_state(d: &Daemon, with_conns: bool) -> serde_json::Value {
    state_json(d, &api_table(d, with_conns))
}

/// `/api/v1/state`'s table, typed (QUIC-LB keys redacted, each service's
/// owner named): what the API's reads answer from without parsing the
/// JSON ([`crate::handle::Snapshot::table`]).
pub fn api_table(d: &Daemon, with_conns: bool) -> Snapshot {
    let mut snap = snapshot(d.controller().ipvs(), d.now(), with_conns);
    redact_quic_keys(&mut snap);
    table_of(d, snap)
}

/// `/api/v1/state` of `table` (from [`api_table`]): the table with the
/// announcement.
pub fn state_json(d: &Daemon, table: &Snapshot) -> serde_json::Value {
    with_announce(table, &d.announce().view())
}

/// `table` as JSON with the announcement's view as its `announce`.
pub fn with_announce(table: &Snapshot, announce: &serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::to_value(table).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("announce".into(), announce.clone());
    }
    v
}

fn state_of(d: &Daemon, with_conns: bool, redact: bool) -> serde_json::Value {
    let mut snap = snapshot(d.controller().ipvs(), d.now(), with_conns);
    if redact {
        redact_quic_keys(&mut snap);
    }
    state_json(d, &table_of(d, snap))
}

/// `snap` with the sync daemons and each service's owner.
fn table_of(d: &Daemon, mut snap: Snapshot) -> Snapshot {
    snap.daemons = d.daemon_snaps();
    for s in &mut snap.services {
        let key = s.key.to_key();
        s.owner = key
            .and_then(|k| d.controller().owner_of(&k))
            .map(|o| o.name().to_owned());
    }
    snap
}

/// `/api/v1/state` is a read-only view for monitoring, usually reachable
/// by more people than the control socket: a QUIC-LB key (which lets
/// anyone decode the server IDs in the connection IDs and so map clients
/// to servers) is shown as the fingerprint `-L --quic-lb` shows
/// (`key=fp:1a2b3c4d`). `rvsadm -S` keeps the key: it is a save format,
/// and `-R` must restore what it saved.
fn redact_quic_keys(snap: &mut Snapshot) {
    for s in &mut snap.services {
        for spec in &mut s.quic_lb {
            *spec = redacted(spec);
        }
    }
}

/// A `--quic-lb` spec with its key as a fingerprint (or withheld, should
/// the spec not parse).
pub(crate) fn redacted(spec: &str) -> String {
    match rvs_core::model::QuicLbConfig::parse_spec(spec) {
        Ok(c) => {
            let mut out = format!(
                "cr={},sid={},nonce={}",
                c.rotation, c.server_id_len, c.nonce_len
            );
            if let Some(fp) = c.key_fingerprint() {
                out.push_str(&format!(",key=fp:{fp}"));
            }
            out
        }
        Err(_) => spec
            .split(',')
            .map(|p| {
                if p.trim_start().starts_with("key=") {
                    "key=<withheld>"
                } else {
                    p
                }
            })
            .collect::<Vec<_>>()
            .join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quic_lb_keys_are_fingerprints_in_the_state_view() {
        let key = "8f95f09245765f80256934e50c66207f";
        let spec = format!("cr=1,sid=3,nonce=13,key={key}");
        let c = rvs_core::model::QuicLbConfig::parse_spec(&spec).unwrap();
        let fp = c.key_fingerprint().unwrap();
        assert_eq!(redacted(&spec), format!("cr=1,sid=3,nonce=13,key=fp:{fp}"));
        assert_eq!(redacted("cr=0,sid=3,nonce=6"), "cr=0,sid=3,nonce=6");
        let odd = redacted(&format!("cr=9,key={key}"));
        assert!(!odd.contains(key), "{odd}");
        let key_ = rvs_core::model::ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: "192.0.2.10".parse().unwrap(),
            port: 443,
        };
        let mut config = rvs_core::model::ServiceConfig::new(rvs_core::model::AddrFamily::Inet);
        config.quic_lb = vec![c];
        let mut snap = Snapshot::default();
        snap.services.push(ServiceSnap::from_config(&key_, &config));
        assert!(serde_json::to_string(&snap).unwrap().contains(key));
        redact_quic_keys(&mut snap);
        let json = serde_json::to_string(&snap).unwrap();
        assert!(!json.contains(key), "{json}");
        assert!(json.contains(&format!("key=fp:{fp}")), "{json}");
    }

    /// A connection from 10.1.0.0 + `n`, port `n`, to 10.0.0.1:80.
    fn conn(n: u16) -> Conn {
        use rvs_core::conn::{Addr, ConnFlags, ConnKey};
        let key = ConnKey {
            protocol: 6,
            af: rvs_core::model::AddrFamily::Inet,
            caddr: Addr::from_ip(std::net::IpAddr::from([10, 1, (n >> 8) as u8, n as u8])),
            cport: n,
            vaddr: Addr::from_ip(std::net::IpAddr::from([10, 0, 0, 1])),
            vport: 80,
        };
        let d = Addr::from_ip(std::net::IpAddr::from([10, 0, 1, 1]));
        Conn::new(
            &key,
            d,
            80,
            ConnFlags::default(),
            std::time::Duration::from_secs(900),
        )
    }

    /// Paging a table larger than a page, with entries removed and added
    /// between pages (into the freed positions, before and after the
    /// cursor): every entry that lived throughout is listed exactly once,
    /// each page holds at most `limit`, and the walk ends with no cursor.
    #[test]
    fn paging_lists_every_entry_that_lives_throughout_once() {
        let now = Instant::from_secs(1);
        let mut t = ConnTable::new(rvs_core::conn::ConnTableConfig {
            capacity: 10_000,
            hash_seed: 7,
        });
        let ids: Vec<ConnId> = (0..1000)
            .map(|n| t.insert(conn(n), None, now).expect("room"))
            .collect();
        let all = |_: &ConnSnap| true;
        let (mut seen, mut from, mut pages) = (Vec::new(), 0, 0);
        let mut fresh = 5000;
        loop {
            let page = conn_page(&t, now, from, 64, &all);
            assert!(page.conns.len() <= 64);
            seen.extend(page.conns.iter().map(|c| c.cport));
            pages += 1;
            // Between pages: one early entry and one late one go, and two
            // new ones take their positions (one behind the cursor, one
            // ahead of it).
            for victim in [pages * 7, 999 - pages * 3] {
                if t.remove(ids[victim]).is_some() {
                    t.insert(conn(fresh), None, now).expect("room");
                    fresh += 1;
                }
            }
            match page.next {
                Some(n) => from = n,
                None => break,
            }
        }
        assert!(pages > 10, "{pages} pages");
        let removed: std::collections::HashSet<u16> = (1..=pages)
            .flat_map(|p| [p * 7, 999 - p * 3])
            .map(|n| n as u16)
            .collect();
        let mut once = std::collections::HashMap::new();
        for p in &seen {
            *once.entry(*p).or_insert(0) += 1;
        }
        for n in (0..1000u16).filter(|n| !removed.contains(n)) {
            assert_eq!(once.get(&n), Some(&1), "entry {n} listed once");
        }
        assert!(once.values().all(|&k| k == 1), "nothing twice");
        // A filter pages only what it keeps; the length is the table's.
        let odd = |c: &ConnSnap| c.cport % 2 == 1;
        let page = conn_page(&t, now, 0, 10, &odd);
        assert_eq!(page.conns.len(), 10);
        assert!(page.conns.iter().all(|c| c.cport % 2 == 1));
        assert_eq!(page.len, t.len());
    }
}
