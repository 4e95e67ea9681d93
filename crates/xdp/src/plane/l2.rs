//! Neighbour decisions: real servers whose MAC (DR/TUN) or next hop (NAT)
//! is learnt, and next hops that change.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant as StdInstant};

use rvs_core::model::ServiceKey;

use super::{NAT_LOOKUPS_PER_REPORT, Plane};
use crate::maps::MapOps;
use crate::neigh::{L2, Resolve};

impl<M: MapOps, R: Resolve> Plane<M, R> {
    /// Try to resolve the MACs still missing: ask the kernel, then poll its
    /// neighbour table for at most `budget`. Resolved real servers are
    /// written and their services republished.
    pub(super) fn resolve_pending(&mut self, budget: Duration, only: Option<&HashSet<IpAddr>>) {
        let mut pending: Vec<IpAddr> = self
            .services
            .values()
            .flat_map(|s| s.dests.iter())
            .filter(|d| !d.ready())
            .map(|d| d.core.config.addr)
            .filter(|a| only.is_none_or(|o| o.contains(a)))
            .collect();
        pending.sort();
        pending.dedup();
        if pending.is_empty() {
            return;
        }
        for a in &pending {
            let _ = self.resolver.solicit(*a);
        }
        let start = StdInstant::now();
        loop {
            let mut found: HashMap<IpAddr, L2> = HashMap::new();
            for a in &pending {
                if let Ok(Some(l2)) = self.resolver.lookup(*a) {
                    found.insert(*a, l2);
                }
            }
            let done = found.len() == pending.len();
            if !found.is_empty() {
                self.install_resolved(&found);
            }
            if done || start.elapsed() >= budget {
                return;
            }
            std::thread::sleep(Duration::from_millis(10).min(budget));
        }
    }

    /// NAT real servers whose next hop is not known yet: look again, so the
    /// program stops asking the FIB for them within a second of the kernel
    /// resolving the neighbour. At most [`NAT_LOOKUPS_PER_REPORT`] netlink
    /// look-ups per report, taking turns when more are waiting.
    pub(super) fn learn_nat_next_hops(&mut self) {
        let mut waiting: Vec<(u32, IpAddr)> = self
            .services
            .values()
            .flat_map(|st| st.dests.iter())
            .filter(|d| d.is_nat() && d.l2.is_none())
            .map(|d| (d.index, d.core.config.addr))
            .collect();
        if waiting.is_empty() {
            return;
        }
        waiting.sort_unstable();
        waiting.dedup();
        let n = waiting.len();
        let first = usize::try_from(self.generation)
            .unwrap_or(0)
            .wrapping_mul(NAT_LOOKUPS_PER_REPORT)
            % n;
        let mut learnt = Vec::new();
        for i in 0..n.min(NAT_LOOKUPS_PER_REPORT) {
            let (index, addr) = waiting[(first + i) % n];
            if let Ok(Some(l2)) = self.resolver.lookup(addr) {
                learnt.push((index, l2));
            }
        }
        for (index, l2) in learnt {
            self.set_l2(index, l2);
        }
    }

    /// Install a real server's new next hop (all services that have it); on
    /// failure the next report or refresh tries again.
    pub(super) fn set_l2(&mut self, index: u32, l2: L2) -> bool {
        let found = self
            .services
            .values()
            .flat_map(|st| st.dests.iter())
            .find(|d| d.index == index)
            .cloned();
        let Some(mut d) = found else { return false };
        d.l2 = Some(l2);
        let v = self.dest_value(&d, 0);
        if self.maps.set_dest(index, &v).is_err() {
            return false;
        }
        for st in self.services.values_mut() {
            for x in st.dests.iter_mut().filter(|x| x.index == index) {
                x.l2 = Some(l2);
            }
        }
        true
    }

    /// Look the MACs in use up again; rewrite the real servers whose next
    /// hop changed (a missing entry keeps the last known MAC and asks the
    /// kernel to resolve it again). Next hops not known yet are
    /// [`Plane::learn_nat_next_hops`]'s.
    pub(super) fn refresh_l2(&mut self) {
        let mut updates = Vec::new();
        for st in self.services.values() {
            for d in &st.dests {
                let Some(old) = d.l2 else { continue };
                match self.resolver.lookup(d.core.config.addr) {
                    Ok(Some(l2)) if l2 != old => updates.push((d.index, d.core.config.addr, l2)),
                    Ok(None) => {
                        let _ = self.resolver.solicit(d.core.config.addr);
                    }
                    _ => {}
                }
            }
        }
        for (index, addr, l2) in updates {
            if self.set_l2(index, l2) {
                tracing::info!(%addr, "xdp: next hop MAC changed");
            }
        }
    }

    pub(super) fn install_resolved(&mut self, found: &HashMap<IpAddr, L2>) {
        let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
        for key in keys {
            let mut changed = Vec::new();
            if let Some(st) = self.services.get_mut(&key) {
                for (i, d) in st.dests.iter_mut().enumerate() {
                    if !d.ready()
                        && let Some(l2) = found.get(&d.core.config.addr)
                    {
                        d.l2 = Some(*l2);
                        changed.push(i);
                    }
                }
            }
            if changed.is_empty() {
                continue;
            }
            let mut ok = true;
            for i in &changed {
                let v = self
                    .services
                    .get(&key)
                    .map(|st| self.dest_value(&st.dests[*i], 0));
                if let Some((v, index)) = v.zip(self.services.get(&key).map(|s| s.dests[*i].index))
                    && self.maps.set_dest(index, &v).is_err()
                {
                    ok = false;
                }
            }
            if !ok || self.publish(&key).is_err() {
                // Forget the resolution: retried at the next report.
                if let Some(st) = self.services.get_mut(&key) {
                    for i in changed {
                        st.dests[i].l2 = None;
                    }
                }
            }
        }
        let _ = self.write_config();
    }
}
