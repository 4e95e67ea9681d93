//! A byte-driven script interpreter for the director, shared by the
//! `director` fuzz target and a property test: arbitrary control operations
//! and packets over a virtual clock, with [`Ipvs::audit`] after every step.
//! Not part of the stable API.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ipvs::{Ipvs, IpvsConfig, L4, Packet, Tunables};
use crate::model::{
    AddrFamily, DestConfig, ForwardMethod, PersistMask, PersistenceEngine, Protocol, SchedFlags,
    ServiceConfig, ServiceKey, Tunnel,
};
use crate::sched::Scheduler;
use crate::state::{SctpEvent, TcpFlags};
use crate::time::Instant;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> Option<T> {
        let i = usize::from(self.u8()?);
        xs.get(i % xs.len().max(1)).copied()
    }
}

const VIPS: [IpAddr; 3] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
];

fn service_key(b: &mut Bytes<'_>) -> Option<ServiceKey> {
    Some(match b.u8()? % 5 {
        0 => ServiceKey::Fwmark {
            mark: u32::from(b.u8()? % 3) + 1,
            af: AddrFamily::Inet,
        },
        n => ServiceKey::Addr {
            protocol: [Protocol::Tcp, Protocol::Udp, Protocol::Sctp][usize::from(n) % 3],
            addr: b.pick(&VIPS)?,
            port: b.pick(&[0, 80, 443])?,
        },
    })
}

fn dest_config(b: &mut Bytes<'_>, key: &ServiceKey) -> Option<DestConfig> {
    let i = b.u8()? % 8;
    let addr = match key.af() {
        AddrFamily::Inet => IpAddr::V4(Ipv4Addr::new(10, 1, 0, i)),
        AddrFamily::Inet6 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, u16::from(i))),
    };
    let forward = b.pick(&[
        ForwardMethod::Masq,
        ForwardMethod::Route,
        ForwardMethod::Tunnel(Tunnel::default()),
        ForwardMethod::FullNat,
    ])?;
    let u = u32::from(b.u8()? % 6);
    let l = if u == 0 {
        0
    } else {
        u32::from(b.u8()?) % (u + 1)
    };
    Some(
        DestConfig::new(addr, b.pick(&[0, 80, 8080])?)
            .weight(u32::from(b.u8()? % 4))
            .forward(forward)
            .thresholds(u, l),
    )
}

fn packet<'a>(b: &mut Bytes<'a>) -> Option<Packet<'a>> {
    let reply = b.u8()? % 4 == 0;
    let v6 = b.u8()? % 4 == 0;
    let client = if v6 {
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            2,
            0,
            0,
            0,
            0,
            u16::from(b.u8()? % 4),
        ))
    } else {
        IpAddr::V4(Ipv4Addr::new(192, 168, 0, b.u8()? % 4))
    };
    let vip = if v6 { VIPS[2] } else { b.pick(&VIPS[..2])? };
    let cport = b.pick(&[1000, 1001, 1002, 0])?;
    let vport = b.pick(&[80, 443, 8080])?;
    let l4 = match b.u8()? % 3 {
        0 => L4::Tcp(TcpFlags::from_bits(b.u8()?)),
        1 => L4::Udp,
        _ => L4::Sctp(b.pick(&[
            SctpEvent::Init,
            SctpEvent::Data,
            SctpEvent::Abort,
            SctpEvent::CookieEcho,
            SctpEvent::Shutdown,
        ])?),
    };
    let payload: &'a [u8] = if b.u8()? % 2 == 0 {
        b"INVITE x SIP/2.0\r\ni: call-7\r\n\r\n"
    } else {
        b""
    };
    let (src, sport, dst, dport) = if reply {
        let server = IpAddr::V4(Ipv4Addr::new(10, 1, 0, b.u8()? % 8));
        (server, b.pick(&[80, 8080, 443])?, client, cport)
    } else {
        (client, cport, vip, vport)
    };
    Some(Packet {
        src,
        sport,
        dst,
        dport,
        l4,
        fwmark: u32::from(b.u8()? % 4),
        len: 100,
        payload,
    })
}

/// Interpret `data` as a script; panics (with the audit's message) if an
/// invariant breaks.
pub fn run_director_script(data: &[u8]) {
    let mut b = Bytes(data);
    let mut ipvs = Ipvs::new(IpvsConfig {
        conn_capacity: 16,
        seed: 7,
        tunables: Tunables::default(),
        preallocate: false,
    });
    let mut now = Instant::ZERO;
    let mut keys: Vec<ServiceKey> = Vec::new();
    while let Some(op) = b.u8() {
        let done = (|| -> Option<()> {
            match op % 9 {
                0 => {
                    let key = service_key(&mut b)?;
                    let mut cfg = ServiceConfig::new(key.af()).scheduler(b.pick(&Scheduler::ALL)?);
                    let x = b.u8()?;
                    if x & 1 != 0 {
                        cfg.persistent = Some(u32::from(x >> 4) + 1);
                    }
                    if x & 2 != 0 {
                        cfg.netmask = match key.af() {
                            AddrFamily::Inet => PersistMask::V4(Ipv4Addr::new(255, 255, 255, 0)),
                            AddrFamily::Inet6 => PersistMask::V6(64),
                        };
                    }
                    if x & 4 != 0 {
                        cfg.pe = Some(PersistenceEngine::Sip);
                    }
                    cfg.one_packet = x & 8 != 0;
                    cfg.flags = SchedFlags(u32::from(b.u8()? & 0x18));
                    cfg.mh_table_size = 251;
                    if ipvs.add_service(key, cfg).is_ok() {
                        keys.push(key);
                    }
                }
                1 => {
                    let key = b.pick(&keys)?;
                    let _ = ipvs.del_service(&key);
                }
                2 | 3 => {
                    let key = b.pick(&keys)?;
                    let d = dest_config(&mut b, &key)?;
                    if op % 9 == 2 {
                        let _ = ipvs.add_dest(&key, d);
                    } else {
                        let _ = ipvs.edit_dest(&key, d);
                    }
                }
                4 => {
                    let key = b.pick(&keys)?;
                    let d = dest_config(&mut b, &key)?;
                    let _ = ipvs.del_dest(&key, d.addr, d.port);
                }
                5 | 6 => {
                    let p = packet(&mut b)?;
                    let _ = ipvs.process(now, &p);
                }
                7 => {
                    now = now + core::time::Duration::from_millis(u64::from(b.u8()?) * 997);
                    ipvs.expire(now);
                    ipvs.update_estimators(now);
                }
                _ => {
                    let x = b.u8()?;
                    let t = Tunables {
                        expire_nodest_conn: x & 1 != 0,
                        expire_quiescent_template: x & 2 != 0,
                        conn_reuse_mode: (x >> 2) & 3,
                        sloppy_tcp: x & 16 != 0,
                        sloppy_sctp: x & 32 != 0,
                        secure_tcp: x & 64 != 0,
                        drain_deleted: x & 128 != 0,
                    };
                    ipvs.set_tunables(t);
                    match b.u8()? % 4 {
                        0 => ipvs.flush(),
                        1 => {
                            let _ = ipvs.zero(None);
                        }
                        2 => ipvs.set_timeouts(u32::from(b.u8()?), 0, u32::from(b.u8()?)),
                        _ => {}
                    }
                }
            }
            Some(())
        })();
        if let Err(e) = ipvs.audit() {
            panic!("invariant broken after op {op}: {e}");
        }
        if done.is_none() {
            break;
        }
    }
    // Everything expires eventually, templates included (a template whose
    // connections are still alive is re-armed once more).
    for k in 1..=3u64 {
        ipvs.expire(now + core::time::Duration::from_secs(k * 100_000));
    }
    if let Err(e) = ipvs.audit() {
        panic!("invariant broken after final expiry: {e}");
    }
    assert!(
        ipvs.conns().is_empty(),
        "connections left after final expiry"
    );
}
