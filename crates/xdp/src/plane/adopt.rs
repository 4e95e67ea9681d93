//! Adopting the maps a previous rvsd left pinned (see [`crate::pin`]):
//! the plane's books are rebuilt from what the maps hold before the
//! configuration is applied, so that a flow's `dest` and `svc` indexes keep
//! meaning the same real server and service, and nothing a live flow
//! depends on (its real server's element, the service's scheduling data,
//! the round-robin cursor, the counters) is reset.
//!
//! * Every service in `services` and every QUIC-LB service in
//!   `quic_services` keeps its `svc_info` index and its scheduling region
//!   (both taken out of the allocators); every real server in its list
//!   keeps its `dests` index. A QUIC-LB service's server IDs (`quic_sids`)
//!   are taken as this side's books, so the first sync after its real
//!   servers are claimed changes only what the configuration changed.
//! * The configuration then claims them: an `AddService` for an adopted
//!   service takes its index and region without writing anything (the
//!   program keeps scheduling with the old region); an `AddDest` for one
//!   of its real servers takes the index, with the next hop the element
//!   holds (no unresolved gap for DR/TUN) and its counters (no new
//!   baseline: the director's counters continue from the program's). The
//!   service's scheduling data is republished once all its adopted real
//!   servers are claimed.
//! * Real servers in no service's list (deleted ones whose flows were still
//!   draining, unresolved ones) keep their index until the flow walks show
//!   no flow uses it, like the trash.
//! * What the configuration has not claimed once every command sent so
//!   far is applied, and at least [`SETTLE`] reports after the start, is
//!   removed as a deletion would remove it: the configuration is the truth.

use std::collections::HashMap;
use std::net::IpAddr;

use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::{
    DestConfig, ForwardMethod, Protocol, ServiceConfig, ServiceKey, Tunnel, TunnelCsum, TunnelType,
};

use super::alloc::{Region, Retired};
use super::{DestState, Plane, PlaneError, SvcState, edit_core};
use crate::maps::{self, Dest, MapOps, Svc, SvcKey};
use crate::neigh::L2;
use crate::quic_lb::QuicSidKey;

/// Reports after the start before unclaimed adopted state is removed.
pub(super) const SETTLE: u64 = 3;

/// What the maps of a previous instance held, waiting to be claimed.
#[derive(Debug, Default)]
pub(super) struct Adopted {
    services: HashMap<ServiceKey, AdoptedSvc>,
    /// Report generation of the adoption.
    since: u64,
}

#[derive(Debug)]
struct AdoptedSvc {
    index: u32,
    svc: Svc,
    region: Option<Region>,
    /// Its real servers not claimed yet: index and element.
    dests: Vec<(u32, Dest)>,
    claimed: bool,
    /// A QUIC-LB service: its key is in `quic_services`, not `services`.
    quic: bool,
    /// QUIC-LB: the server IDs `quic_sids` holds for it.
    sids: HashMap<QuicSidKey, u32>,
    /// FULLNAT: its pool's local addresses (`fnat_pools`), cleared with
    /// it if the configuration does not claim it.
    laddrs: Vec<IpAddr>,
}

/// A dest index held for flows only (no service claims it).
#[derive(Debug)]
pub(super) struct Orphan {
    pub(super) index: u32,
    pub(super) since: u64,
}

fn addr_of(family: u8, b: &[u8; 16]) -> IpAddr {
    if family == maps::AF_INET {
        IpAddr::from([b[0], b[1], b[2], b[3]])
    } else {
        IpAddr::from(*b)
    }
}

fn service_key(k: &SvcKey) -> Option<ServiceKey> {
    let protocol = match k.proto {
        maps::PROTO_TCP => Protocol::Tcp,
        maps::PROTO_UDP => Protocol::Udp,
        _ => return None,
    };
    Some(ServiceKey::Addr {
        protocol,
        addr: addr_of(k.family, &k.vip),
        port: u16::from_be(k.port),
    })
}

/// The next hop a real server's element holds (DR/TUN always; NAT when
/// flagged), so an adopted real server is ready at once.
fn l2_of(d: &Dest) -> Option<L2> {
    let nat = d.method == maps::fwd::NAT;
    if nat && d.flags & maps::dest_flags::NEXTHOP == 0 {
        return None;
    }
    if !nat && d.mac == [0; 6] {
        return None;
    }
    Some(L2 {
        ifindex: d.ifindex,
        mac: d.mac,
        smac: d.smac,
        src: None,
    })
}

/// The checksum option a tunnel element's flags say.
fn tun_csum(d: &Dest) -> TunnelCsum {
    if d.flags & maps::dest_flags::TUN_CSUM != 0 {
        TunnelCsum::Csum
    } else {
        TunnelCsum::NoCsum
    }
}

/// The configuration an element describes (for a real server no service
/// claims: only its address and method matter).
fn config_of(d: &Dest) -> DestConfig {
    let forward = match d.method {
        maps::fwd::NAT => ForwardMethod::Masq,
        maps::fwd::TUN_IPIP => ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Ipip,
            port: 0,
            csum: TunnelCsum::default(),
        }),
        maps::fwd::TUN_GUE => ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Gue,
            port: u16::from_be(d.gue_port),
            csum: tun_csum(d),
        }),
        maps::fwd::TUN_GRE => ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Gre,
            port: 0,
            csum: tun_csum(d),
        }),
        maps::fwd::TUN_GENEVE => ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Geneve,
            port: 0,
            csum: tun_csum(d),
        }),
        maps::fwd::TUN_OPT => ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Opt,
            port: 0,
            csum: TunnelCsum::default(),
        }),
        _ => ForwardMethod::Route,
    };
    let mut c = DestConfig::new(addr_of(d.family, &d.addr), u16::from_be(d.port));
    c.weight = d.weight;
    c.forward = forward;
    c
}

impl<M: MapOps> Plane<M> {
    /// A plane over maps a previous instance filled (pinned and reused):
    /// its books rebuilt from them (see the module doc), `config` kept as
    /// the maps hold it until this plane's own settings replace it.
    pub fn adopt(mut maps: M) -> Result<Self, PlaneError> {
        let found = maps.read_installed()?;
        let mut plane = Plane::blank(maps);
        plane.config = found.config;
        let mut adopted = Adopted::default();
        let mut listed = std::collections::HashSet::new();
        let elements: HashMap<u32, Dest> = found.dests.iter().copied().collect();
        let plain = found.services.iter().map(|s| (s, false));
        let quic = found.quic_services.iter().map(|s| (s, true));
        for ((skey, index, svc, list), is_quic) in plain.chain(quic) {
            let Some(key) = service_key(skey) else {
                continue;
            };
            if !plane.svc_idx.reserve(*index) {
                continue;
            }
            let region = (svc.sched != maps::sched::NONE).then_some(Region {
                off: svc.dests_off,
                len: svc.dests_len + svc.table_len,
            });
            let region = region.filter(|r| plane.slots.reserve(*r));
            let mut dests = Vec::new();
            for &i in list {
                let Some(d) = elements.get(&i) else {
                    continue;
                };
                if listed.insert(i) && plane.dest_idx.reserve(i) {
                    dests.push((i, *d));
                }
            }
            let sids = found
                .quic_sids
                .iter()
                .filter(|(k, _)| is_quic && k.svc == *index)
                .copied()
                .collect();
            let laddrs = found
                .fnat_pools
                .iter()
                .find(|(i, _)| i == index)
                .map(|(_, p)| {
                    let n = (p.count as usize).min(maps::FNAT_POOL_MAX);
                    p.addrs[..n].iter().map(|a| addr_of(p.family, a)).collect()
                })
                .unwrap_or_default();
            adopted.services.insert(
                key,
                AdoptedSvc {
                    index: *index,
                    svc: *svc,
                    region,
                    dests,
                    claimed: false,
                    quic: is_quic,
                    sids,
                    laddrs,
                },
            );
        }
        for (i, _) in &found.dests {
            if !listed.contains(i) && plane.dest_idx.reserve(*i) {
                plane.orphans.push(Orphan {
                    index: *i,
                    since: 0,
                });
            }
        }
        plane.adopted = Some(adopted);
        Ok(plane)
    }

    /// Whether state adopted from a previous instance still waits for the
    /// configuration to claim it.
    pub fn adopting(&self) -> bool {
        self.adopted.is_some()
    }

    /// `AddService` of an adopted service: it takes its old index and
    /// region, nothing is written (a QUIC-LB service's configurations are
    /// rewritten as this configuration has them: the same, or a rotation
    /// that moved on; its key and server IDs stay until its real servers
    /// are claimed and synced). `false` when `key` was not adopted, or was
    /// adopted as the other kind (QUIC-LB or not): that one goes at the
    /// settling, and this configuration installs `key` afresh.
    pub(super) fn claim_service(&mut self, key: &ServiceKey, config: &ServiceConfig) -> bool {
        let Some(a) = self.adopted.as_mut().and_then(|a| a.services.get_mut(key)) else {
            return false;
        };
        if a.claimed || a.quic != super::is_quic(config) {
            return false;
        }
        a.claimed = true;
        let (index, quic, region, svc) = (a.index, a.quic, a.region, a.svc);
        let sids = std::mem::take(&mut a.sids);
        // Its counters continue from what the program counted.
        self.flood_base.continue_from_maps(key, index);
        if quic {
            if self
                .maps
                .set_quic_lb(index, &super::quic_value(config))
                .is_err()
            {
                self.dirty.service(*key);
            }
            self.quic_base
                .insert(*key, (index, crate::quic_lb::QuicStats::default()));
        }
        let republish = self
            .adopted
            .as_ref()
            .and_then(|a| a.services.get(key))
            .is_none_or(|a| a.dests.is_empty());
        let st = SvcState {
            index,
            config: config.clone(),
            dests: Vec::new(),
            region,
            svc,
            laddrs: Vec::new(),
            sids,
            // Written again by the next publish (inserts are idempotent).
            ranges: Vec::new(),
            wrr: None,
        };
        self.services.insert(*key, st);
        if republish {
            // No real server to wait for: its own data now.
            let _ = self.publish(key).inspect_err(|_| self.dirty.service(*key));
        }
        true
    }

    /// `AddDest` of a real server an adopted service had: its old index,
    /// next hop and counters. `None` when it is not one.
    pub(super) fn claim_dest(
        &mut self,
        service: &ServiceKey,
        cfg: &DestConfig,
    ) -> Option<DestState> {
        let a = self.adopted.as_mut()?.services.get_mut(service)?;
        let same =
            |d: &Dest| addr_of(d.family, &d.addr) == cfg.addr && u16::from_be(d.port) == cfg.port;
        let p = a.dests.iter().position(|(_, d)| same(d))?;
        let (index, el) = a.dests.remove(p);
        let mut core = CoreDest::new(DestId(index), config_of(&el));
        edit_core(&mut core, cfg);
        Some(DestState {
            index,
            core,
            l2: l2_of(&el),
        })
    }

    /// Whether `service`'s scheduling data waits for adopted real servers
    /// still to be claimed (it keeps the old region meanwhile).
    pub(super) fn awaits_claims(&self, service: &ServiceKey) -> bool {
        self.adopted
            .as_ref()
            .and_then(|a| a.services.get(service))
            .is_some_and(|a| a.claimed && !a.dests.is_empty())
    }

    /// Some adopted, unclaimed real server forwards with NAT (so `config`
    /// keeps the NAT flag while its flows live on).
    pub(super) fn adopted_nat(&self) -> bool {
        self.adopted.as_ref().is_some_and(|a| {
            a.services
                .values()
                .any(|s| s.dests.iter().any(|(_, d)| d.method == maps::fwd::NAT))
        })
    }

    /// End the adoption (see the module doc) once the configuration had its
    /// chance: called by reports that may converge.
    pub(super) fn settle_adoption(&mut self) {
        let Some(a) = &self.adopted else {
            return;
        };
        if self.generation < a.since + SETTLE {
            return;
        }
        let Some(a) = self.adopted.take() else {
            return;
        };
        let g = self.generation;
        // Local addresses of unclaimed FULLNAT pools: out of `fnat_laddrs`
        // unless a claimed service has them too.
        let mut stale = std::collections::BTreeSet::new();
        for (key, s) in a.services {
            for (index, d) in &s.dests {
                // Not claimed: unavailable, held while flows use it.
                let mut el = *d;
                el.flags |= maps::dest_flags::UNAVAILABLE;
                if self.maps.set_dest(*index, &el).is_err() {
                    self.dirty.service(key);
                }
                self.orphans.push(Orphan {
                    index: *index,
                    since: g,
                });
            }
            if s.claimed {
                if self.services.contains_key(&key) {
                    let _ = self.publish(&key).inspect_err(|_| self.dirty.service(key));
                }
                continue;
            }
            // Not in the configuration: removed as a deletion removes it.
            if let Ok(sk) = super::svc_key(&key) {
                let r = if s.quic {
                    self.maps.remove_quic_service(&sk)
                } else {
                    self.maps.remove_service(&sk)
                };
                if r.is_err() {
                    self.dirty.service(key);
                }
            }
            if s.quic {
                let _ = self.maps.remove_quic_lb(s.index);
                for k in s.sids.keys() {
                    if self.maps.remove_quic_sid(k).is_err() {
                        self.quic_stale.push(*k);
                    }
                }
            }
            if !s.laddrs.is_empty() {
                let _ = self.maps.set_fnat_pool(s.index, &maps::FnatPool::default());
                stale.extend(s.laddrs.iter().copied());
            }
            let _ = self.maps.set_svc(s.index, &Svc::default());
            self.retired.push((g, Retired::Svc(s.index)));
            if let Some(r) = s.region {
                self.retired.push((g, Retired::Region(r)));
            }
        }
        if !stale.is_empty() {
            let before = self.all_laddrs_with(&stale);
            if self.sync_laddrs(&before).is_err() {
                self.dirty.all();
            }
        }
        let _ = self.write_config();
    }
}
