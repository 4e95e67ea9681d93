//! What the program's SYN-flood defences did, per service: the embryonic
//! tables (SYNs that made an embryonic entry, handshakes that completed and
//! moved their flow to the flow table, and the difference: what a flood
//! cost, shed by the embryonic tables' LRU or expired), the guard (new
//! flows of hash-scheduled services forwarded without an entry) and the
//! TCP segments of no known flow passed to the kernel. Read from
//! `svc_flood` by each report's first phase and published in a
//! [`FloodStats`] that rvsd's metrics read (`rvs_xdp_*`), beside the
//! commands the plane refused for want of room (the worker's count).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rvs_core::model::ServiceKey;

use super::Plane;
use crate::maps::{FnatStats, MapOps, SvcFlood};

/// The SYN-flood counters of every installed service as the last report
/// read them, shared between the plane's worker (which writes them once a
/// second) and whoever shows them. Counted from when the service was
/// installed (a service index reused by another service starts at zero).
#[derive(Debug, Default)]
pub struct FloodStats {
    services: Mutex<Vec<(ServiceKey, SvcFlood)>>,
    /// The FULLNAT counters (`fnat_stats`) of services with a pool.
    fnat: Mutex<Vec<(ServiceKey, FnatStats)>>,
    /// Commands refused for want of room, per map (the worker's
    /// [`rvs_control::warnings::NoRoom::totals`]).
    refused: Mutex<Vec<(&'static str, u64)>>,
}

impl FloodStats {
    /// A copy of the counters per service, ordered by service.
    pub fn snapshot(&self) -> Vec<(ServiceKey, SvcFlood)> {
        self.services.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// The sum over services.
    pub fn total(&self) -> SvcFlood {
        self.snapshot()
            .iter()
            .fold(SvcFlood::default(), |a, (_, c)| a.add(c))
    }

    /// A copy of the FULLNAT counters per service with a local address
    /// pool (`rvs_xdp_fnat_*`), ordered by service, counted from when the
    /// service was installed.
    pub fn fnat_snapshot(&self) -> Vec<(ServiceKey, FnatStats)> {
        self.fnat.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Commands the plane refused for want of room since it started, per
    /// map, as the worker last published them (every report).
    pub fn refused(&self) -> Vec<(&'static str, u64)> {
        self.refused.lock().map(|g| g.clone()).unwrap_or_default()
    }

    pub(super) fn publish_refused(&self, v: Vec<(&'static str, u64)>) {
        if let Ok(mut g) = self.refused.lock() {
            *g = v;
        }
    }

    fn publish_fnat(&self, v: Vec<(ServiceKey, FnatStats)>) {
        if let Ok(mut g) = self.fnat.lock() {
            *g = v;
        }
    }

    fn publish(&self, v: Vec<(ServiceKey, SvcFlood)>) {
        if let Ok(mut g) = self.services.lock() {
            *g = v;
        }
    }
}

/// The counters' values a service's counts start from, per service and
/// index: zero for a service installed by this plane (its counters were
/// zeroed in the maps first, [`Plane::start_counters`]) and for one adopted
/// from a previous rvsd (they continue: the maps count from its
/// installation); what the maps held when it was first seen otherwise (a
/// failed reset).
#[derive(Debug, Default)]
pub(super) struct FloodBase {
    base: HashMap<ServiceKey, (u32, SvcFlood)>,
    fnat: HashMap<ServiceKey, (u32, FnatStats)>,
}

/// The baseline of `key` in `bases`: its counters when it was first read
/// at `index`; `cur` (from now on its baseline) when it has none, or one
/// of another installation (another index).
fn baseline<T: Copy>(
    bases: &mut HashMap<ServiceKey, (u32, T)>,
    key: &ServiceKey,
    index: u32,
    cur: T,
) -> T {
    match bases.get(key) {
        Some((i, b)) if *i == index => *b,
        _ => {
            bases.insert(*key, (index, cur));
            cur
        }
    }
}

impl FloodBase {
    /// `key`'s counters at `index` are the maps' (zeroed at its
    /// installation, by this rvsd or the one whose maps were adopted).
    pub(super) fn continue_from_maps(&mut self, key: &ServiceKey, index: u32) {
        self.base.insert(*key, (index, SvcFlood::default()));
        self.fnat.insert(*key, (index, FnatStats::default()));
    }
}

fn sub(a: &SvcFlood, b: &SvcFlood) -> SvcFlood {
    SvcFlood {
        embryonic: a.embryonic.wrapping_sub(b.embryonic),
        promoted: a.promoted.wrapping_sub(b.promoted),
        guarded: a.guarded.wrapping_sub(b.guarded),
        unknown: a.unknown.wrapping_sub(b.unknown),
        adopted: a.adopted.wrapping_sub(b.adopted),
        refused: a.refused.wrapping_sub(b.refused),
    }
}

impl<M: MapOps> Plane<M> {
    /// A service new at `index` (not reachable yet): its SYN-flood and
    /// FULLNAT counters are zeroed in the maps (an earlier user of the
    /// index left its counts there), so that they count from its
    /// installation, from the first packet on, and a later rvsd that adopts
    /// the service continues them. A reset that fails is warned and leaves
    /// a baseline of what the map holds now (or, that read failing too, of
    /// what the first report reads).
    pub(super) fn start_counters(&mut self, key: &ServiceKey, index: u32) {
        self.flood_base.continue_from_maps(key, index);
        if let Err(e) = self.maps.reset_svc_flood(index) {
            tracing::warn!(error = %e, service = ?key, index, "zeroing a new service's SYN-flood counters");
            match self.maps.svc_flood(index) {
                Ok(cur) => self.flood_base.base.insert(*key, (index, cur)),
                Err(_) => self.flood_base.base.remove(key),
            };
        }
        if let Err(e) = self.maps.reset_fnat_stats(index) {
            tracing::warn!(error = %e, service = ?key, index, "zeroing a new service's FULLNAT counters");
            match self.maps.fnat_stats(index) {
                Ok(cur) => self.flood_base.fnat.insert(*key, (index, cur)),
                Err(_) => self.flood_base.fnat.remove(key),
            };
        }
    }

    /// The SYN-flood counters these reports publish.
    pub fn flood_stats(&self) -> Arc<FloodStats> {
        self.flood.clone()
    }

    /// Read `svc_flood` for every installed service and publish it, from
    /// each service's baseline ([`FloodBase`]; none: what this report
    /// reads). Part of a report's first phase. A failed read publishes
    /// nothing: the next report tries again.
    pub(super) fn read_flood(&mut self) {
        let mut out = Vec::with_capacity(self.services.len());
        for (key, st) in &self.services {
            let Ok(cur) = self.maps.svc_flood(st.index) else {
                return;
            };
            let base = baseline(&mut self.flood_base.base, key, st.index, cur);
            out.push((*key, sub(&cur, &base)));
        }
        let services = &self.services;
        self.flood_base.base.retain(|k, _| services.contains_key(k));
        out.sort_by_cached_key(|(k, _)| format!("{k:?}"));
        self.flood.publish(out);
        self.read_fnat_stats();
    }

    /// Read `fnat_stats` of every service with a pool and publish it from
    /// each service's baseline (as [`Plane::read_flood`]).
    fn read_fnat_stats(&mut self) {
        let mut out = Vec::new();
        for (key, st) in &self.services {
            if st.laddrs.is_empty() {
                continue;
            }
            let Ok(cur) = self.maps.fnat_stats(st.index) else {
                return;
            };
            let base = baseline(&mut self.flood_base.fnat, key, st.index, cur);
            out.push((*key, cur.since(&base)));
        }
        let services = &self.services;
        self.flood_base.fnat.retain(|k, _| services.contains_key(k));
        out.sort_by_cached_key(|(k, _)| format!("{k:?}"));
        self.flood.publish_fnat(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::MemMaps;
    use rvs_control::protocol::Command;
    use rvs_core::model::{AddrFamily, Protocol, ServiceConfig};

    fn key() -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().expect("addr"),
            port: 80,
        }
    }

    fn add(plane: &mut Plane<MemMaps>) -> u32 {
        plane
            .apply_command(&Command::AddService {
                key: key(),
                config: ServiceConfig::new(AddrFamily::Inet),
            })
            .expect("add service");
        plane.services[&key()].index
    }

    /// The index the first service of a new plane gets.
    fn first_index() -> u32 {
        add(&mut Plane::new(MemMaps::new(1 << 16)).expect("plane"))
    }

    #[test]
    fn counters_are_published_per_service_from_installation() {
        let key = key();
        // What an earlier service at the index left in the maps.
        let index = first_index();
        let mut maps = MemMaps::new(1 << 16);
        let old = SvcFlood {
            embryonic: 7,
            ..SvcFlood::default()
        };
        maps.svc_flood.insert(index, old);
        let mut plane = Plane::new(maps).expect("plane");
        assert_eq!(add(&mut plane), index);
        assert_eq!(
            plane.maps().svc_flood.get(&index),
            None,
            "zeroed in the map at installation"
        );
        let stats = plane.flood_stats();
        plane.read_flood();
        assert_eq!(stats.snapshot(), vec![(key, SvcFlood::default())]);
        let want = SvcFlood {
            embryonic: 100,
            promoted: 40,
            guarded: 5,
            unknown: 2,
            adopted: 9,
            refused: 3,
        };
        plane.maps().svc_flood.insert(index, want);
        plane.read_flood();
        assert_eq!(stats.snapshot(), vec![(key, want)]);
        assert_eq!(stats.total(), want);
    }

    /// A reset that fails leaves a baseline: what an earlier user of the
    /// index counted is still not this service's.
    #[test]
    fn a_failed_reset_leaves_a_baseline() {
        let index = first_index();
        let mut maps = MemMaps::new(1 << 16);
        let old = SvcFlood {
            embryonic: 7,
            ..SvcFlood::default()
        };
        maps.svc_flood.insert(index, old);
        let mut plane = Plane::new(maps).expect("plane");
        // Writes: the round-robin cursor, then the SYN-flood counters.
        let m = plane.maps();
        m.fail_at = Some(m.writes + 1);
        assert_eq!(add(&mut plane), index);
        assert_eq!(plane.maps().svc_flood.get(&index), Some(&old), "not zeroed");
        let stats = plane.flood_stats();
        plane.read_flood();
        assert_eq!(stats.snapshot(), vec![(key(), SvcFlood::default())]);
        plane.maps().svc_flood.insert(
            index,
            SvcFlood {
                embryonic: 10,
                ..SvcFlood::default()
            },
        );
        plane.read_flood();
        assert_eq!(stats.total().embryonic, 3);
    }

    /// A restarted rvsd's plane adopts the maps: the counters of a service
    /// the configuration claims continue from what the program counted
    /// (no new baseline: a counter that went back to zero at every restart
    /// would be a reset to Prometheus, and the flows between the start and
    /// the first report would go uncounted).
    #[test]
    fn counters_of_an_adopted_service_continue() {
        let key = key();
        let laddr = rvs_core::model::LocalAddrRange::parse("10.9.0.1").expect("laddr");
        let mut a = Plane::new(MemMaps::new(1 << 16)).expect("plane");
        let index = add(&mut a);
        a.apply_command(&Command::AddLaddr {
            service: key,
            laddr,
        })
        .expect("laddr");
        let counted = FnatStats {
            allocated: 70,
            probes: 75,
            ..FnatStats::default()
        };
        let flood = SvcFlood {
            embryonic: 70,
            promoted: 70,
            ..SvcFlood::default()
        };
        a.maps().fnat_stats.insert(index, counted);
        a.maps().svc_flood.insert(index, flood);
        let stats = a.flood_stats();
        a.read_flood();
        assert_eq!(stats.fnat_snapshot(), vec![(key, counted)]);
        // rvsd restarts; its configuration claims the service.
        let maps = a.maps().clone();
        let mut b = Plane::adopt(maps).expect("adopt");
        assert_eq!(add(&mut b), index, "claimed at its index");
        b.apply_command(&Command::AddLaddr {
            service: key,
            laddr,
        })
        .expect("laddr");
        let stats = b.flood_stats();
        b.read_flood();
        assert_eq!(stats.fnat_snapshot(), vec![(key, counted)], "continued");
        assert_eq!(stats.snapshot(), vec![(key, flood)]);
        let more = FnatStats {
            allocated: 72,
            probes: 77,
            ..FnatStats::default()
        };
        b.maps().fnat_stats.insert(index, more);
        b.read_flood();
        assert_eq!(
            stats.fnat_snapshot(),
            vec![(key, more)],
            "the new flows once"
        );
    }

    #[test]
    fn fnat_counters_are_published_for_services_with_a_pool() {
        let mut plane = Plane::new(MemMaps::new(1 << 16)).expect("plane");
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().expect("addr"),
            port: 80,
        };
        plane
            .apply_command(&Command::AddService {
                key,
                config: ServiceConfig::new(AddrFamily::Inet),
            })
            .expect("add service");
        let stats = plane.flood_stats();
        plane.read_flood();
        assert!(stats.fnat_snapshot().is_empty(), "no pool: not listed");
        plane
            .apply_command(&Command::AddLaddr {
                service: key,
                laddr: rvs_core::model::LocalAddrRange::parse("10.9.0.1").expect("laddr"),
            })
            .expect("laddr");
        let index = plane.services[&key].index;
        plane.read_flood();
        plane.maps().fnat_stats.insert(
            index,
            FnatStats {
                exhausted: 4,
                allocated: 9,
                toa_inserted: 2,
                ..FnatStats::default()
            },
        );
        plane.read_flood();
        assert_eq!(
            stats.fnat_snapshot(),
            vec![(
                key,
                FnatStats {
                    exhausted: 4,
                    allocated: 9,
                    toa_inserted: 2,
                    ..FnatStats::default()
                }
            )]
        );
    }
}
