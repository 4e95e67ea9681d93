//! FULLNAT local address pools to map writes: each service's pool
//! (`fnat_pools[service index]`, ranges expanded), the union of every
//! service's addresses (`fnat_laddrs`, where the program finds replies), and
//! the checks that refuse, before anything changes, what the program cannot
//! carry (more than [`maps::FNAT_POOL_MAX`] addresses in one service's pool,
//! a pool of the other family than its service's VIP); and the sweep that
//! frees the translations (`fnat_rev`, `fnat_fwd`: plain hashes, nothing
//! evicts them) of flows gone from the flow tables.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rvs_core::model::{LocalAddrRange, ServiceKey};

use super::{Plane, PlaneError};
use crate::maps::{self, FlowKey, Fnat, FnatEntry, FnatKey, FnatPool, MapOps};

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

/// The map value of a pool of `addrs` handing out ports `ports`
/// (first, last).
pub(super) fn pool_value(addrs: &[IpAddr], v6: bool, ports: (u16, u16)) -> FnatPool {
    let mut pool = FnatPool {
        count: addrs.len() as u32,
        family: if v6 { maps::AF_INET6 } else { maps::AF_INET },
        port_min: ports.0,
        port_max: ports.1,
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
        let ports = self.fnat_ports;
        self.maps
            .set_fnat_pool(index, &pool_value(&addrs, v6, ports))?;
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

/// Translations the orphan sweep looks at per report (bounded work: at one
/// report a second a million entries take about two minutes).
pub(super) const FNAT_SWEEP_PAGE: usize = 8192;

/// The sweep of FULLNAT translations whose flow is gone (see
/// [`Plane::fnat_sweep_read`]): where its walk stands and what the last
/// page found orphaned, to be checked again at the next report.
#[derive(Debug, Default)]
pub(super) struct FnatSweep {
    cursor: crate::maps::WalkCursor,
    suspects: Vec<FnatEntry>,
}

/// What the sweep frees: a pair (`fnat_rev` key) and/or a flow's
/// `fnat_fwd` entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct FnatOrphan {
    rev: Option<FnatKey>,
    fwd: Option<FlowKey>,
}

/// The flow (client side) that holds pair `rk` according to `n`.
pub(super) fn flow_of(rk: &FnatKey, n: &Fnat) -> FlowKey {
    FlowKey {
        caddr: n.caddr,
        vaddr: n.vaddr,
        cport: n.cport,
        vport: n.vport,
        proto: rk.proto,
        family: rk.family,
        pad0: 0,
    }
}

impl<M: MapOps> Plane<M> {
    /// The orphan sweep's read (phase 1 of a report): the entries the last
    /// report suspected that are still orphaned now, a report period later,
    /// are returned to be freed (phase 3, [`Plane::fnat_sweep_write`]); the
    /// next page of `fnat_rev`/`fnat_fwd` gives the suspects for the next
    /// report. An entry is orphaned when the flow that holds it is in no
    /// flow table (the flows LRU evicted it, or it was deleted without its
    /// translation), or — for a pair — when that flow's `fnat_fwd` no
    /// longer names it. Asking twice, a report apart, leaves alone a pair
    /// the program is claiming (it writes `fnat_rev`, then `fnat_fwd`).
    /// Expired flows are not its business: the flow walk frees their
    /// translations with them.
    pub(super) fn fnat_sweep_read(&mut self) -> Result<Vec<FnatOrphan>, PlaneError> {
        let suspects = std::mem::take(&mut self.fnat_sweep.suspects);
        let mut free = Vec::new();
        for e in &suspects {
            if let Some(o) = self.fnat_orphan(e)? {
                free.push(o);
            }
        }
        let mut page = Vec::new();
        let max = self.mirror_page.min(FNAT_SWEEP_PAGE);
        let mut cursor = std::mem::take(&mut self.fnat_sweep.cursor);
        let walked = self.maps.fnat_page(&mut cursor, max, &mut |e| page.push(e));
        self.fnat_sweep.cursor = cursor;
        walked?;
        for e in page {
            if !suspects.contains(&e) && self.fnat_orphan(&e)?.is_some() {
                self.fnat_sweep.suspects.push(e);
            }
        }
        Ok(free)
    }

    /// What entry `e` leaves to free if it is orphaned now, else `None`
    /// (it changed or went meanwhile, or its flow holds it).
    fn fnat_orphan(&mut self, e: &FnatEntry) -> Result<Option<FnatOrphan>, PlaneError> {
        let same_client = |a: &Fnat, b: &Fnat| {
            (a.caddr, a.cport, a.vaddr, a.vport) == (b.caddr, b.cport, b.vaddr, b.vport)
        };
        match e {
            FnatEntry::Rev(rk, n) => {
                match self.maps.fnat_rev(rk)? {
                    Some(now) if same_client(&now, n) => {}
                    _ => return Ok(None),
                }
                let fk = flow_of(rk, n);
                if self.maps.fnat_of(&fk)? != Some(*rk) {
                    return Ok(Some(FnatOrphan {
                        rev: Some(*rk),
                        fwd: None,
                    }));
                }
                if self.maps.has_flow(&fk)? {
                    return Ok(None);
                }
                Ok(Some(FnatOrphan {
                    rev: Some(*rk),
                    fwd: Some(fk),
                }))
            }
            FnatEntry::Fwd(fk, rk) => {
                if self.maps.fnat_of(fk)? != Some(*rk) || self.maps.has_flow(fk)? {
                    return Ok(None);
                }
                let rev = match rk.lport {
                    0 => None,
                    _ => match self.maps.fnat_rev(rk)? {
                        Some(n) if flow_of(rk, &n) == *fk => Some(*rk),
                        _ => None,
                    },
                };
                Ok(Some(FnatOrphan {
                    rev,
                    fwd: Some(*fk),
                }))
            }
        }
    }

    /// The orphan sweep's writes (phase 3 of a report): the `fnat_fwd`
    /// entries, then the pairs. A failure is logged and left to a later
    /// sweep (the entry is met again).
    pub(super) fn fnat_sweep_write(&mut self, free: &[FnatOrphan]) {
        for o in free {
            if let Some(fk) = &o.fwd
                && let Err(e) = self.maps.remove_fnat_fwd(fk)
            {
                tracing::warn!(error = %e, "FULLNAT sweep: removing an orphaned fnat_fwd entry");
            }
            if let Some(rk) = &o.rev
                && let Err(e) = self.maps.remove_fnat_rev(rk)
            {
                tracing::warn!(error = %e, "FULLNAT sweep: freeing an orphaned pair");
            }
        }
        if !free.is_empty() {
            tracing::debug!(
                entries = free.len(),
                "FULLNAT sweep: orphaned translations freed"
            );
        }
    }
}
