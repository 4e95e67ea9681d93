//! FULLNAT local address pools to map writes: each service's pool
//! (`fnat_pools[service index]`, ranges expanded), the union of every
//! service's addresses (`fnat_laddrs`, where the program finds replies), and
//! the checks that refuse, before anything changes, what the program cannot
//! carry (more than [`maps::FNAT_POOL_MAX`] addresses in one service's pool,
//! a pool of the other family than its service's VIP).

use std::collections::BTreeSet;
use std::net::IpAddr;

use rvs_core::model::{LocalAddrRange, ServiceKey};

use super::{Plane, PlaneError};
use crate::maps::{self, FnatPool, MapOps};

/// The addresses of `ranges` (in order, duplicates once), or the reason the
/// program cannot carry them for a service whose VIP is IPv6 (`v6`) or not.
pub(super) fn pool_addrs(ranges: &[LocalAddrRange], v6: bool) -> Result<Vec<IpAddr>, PlaneError> {
    let mut out: Vec<IpAddr> = Vec::new();
    for r in ranges {
        if r.first.is_ipv6() != v6 {
            return Err(PlaneError::Refused(format!(
                "local address {r} is not of the service's family: the xdp data plane's \
                 FULLNAT keeps the family (IPv4 to IPv4, IPv6 to IPv6)"
            )));
        }
        if r.len() > maps::FNAT_POOL_MAX as u128 {
            return Err(PlaneError::Refused(too_many(r.len())));
        }
        for a in r.addrs() {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        if out.len() > maps::FNAT_POOL_MAX {
            return Err(PlaneError::Refused(too_many(out.len() as u128)));
        }
    }
    Ok(out)
}

fn too_many(n: u128) -> String {
    format!(
        "a FULLNAT pool of {n} local addresses: the xdp data plane holds at most {} per \
         service (each carries 64,512 ports per real server)",
        maps::FNAT_POOL_MAX
    )
}

/// The map value of a pool of `addrs` (default port range).
pub(super) fn pool_value(addrs: &[IpAddr], v6: bool) -> FnatPool {
    let mut pool = FnatPool {
        count: addrs.len() as u32,
        family: if v6 { maps::AF_INET6 } else { maps::AF_INET },
        ..FnatPool::default()
    };
    for (slot, a) in pool.addrs.iter_mut().zip(addrs) {
        *slot = maps::addr16(*a);
    }
    pool
}

impl<M: MapOps> Plane<M> {
    /// Every service's local addresses.
    pub(super) fn all_laddrs(&self) -> BTreeSet<IpAddr> {
        self.services
            .values()
            .flat_map(|s| s.laddrs.iter().flat_map(|r| r.addrs()))
            .collect()
    }

    /// `before` plus every service's local addresses now (what
    /// `fnat_laddrs` may hold after a failed write).
    pub(super) fn all_laddrs_with(&self, before: &BTreeSet<IpAddr>) -> BTreeSet<IpAddr> {
        let mut all = self.all_laddrs();
        all.extend(before.iter().copied());
        all
    }

    /// Write `service`'s pool as its books now say (refused, with nothing
    /// written, when the program cannot carry it), then bring
    /// `fnat_laddrs` from `before` (the union before the change) to the
    /// union now.
    pub(super) fn write_pool(
        &mut self,
        service: &ServiceKey,
        before: &BTreeSet<IpAddr>,
    ) -> Result<(), PlaneError> {
        let st = self
            .services
            .get(service)
            .ok_or(PlaneError::NoService(*service))?;
        let v6 = service.af() == rvs_core::model::AddrFamily::Inet6;
        let addrs = pool_addrs(&st.laddrs, v6)?;
        let index = st.index;
        self.maps.set_fnat_pool(index, &pool_value(&addrs, v6))?;
        self.sync_laddrs(before)
    }

    /// Bring `fnat_laddrs` from `before` to the union of every service's
    /// local addresses now (additions first: a reply never finds its
    /// address missing while it moves between services).
    pub(super) fn sync_laddrs(&mut self, before: &BTreeSet<IpAddr>) -> Result<(), PlaneError> {
        let now = self.all_laddrs();
        for a in now.difference(before) {
            self.maps.set_fnat_laddr(*a, true)?;
        }
        for a in before.difference(&now) {
            self.maps.set_fnat_laddr(*a, false)?;
        }
        Ok(())
    }
}
