//! Neighbour decisions: which next hops the plane wants resolved
//! ([`Plane::wanted`]), and what it does when one is learnt
//! ([`Plane::on_neighbour`]). No I/O here: the resolver task
//! ([`super::resolver`]) asks the kernel and sends the answers in.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use rvs_core::model::ServiceKey;

use super::Plane;
use crate::maps::MapOps;
use crate::neigh::L2;

/// The neighbours the plane wants to know about (see [`Plane::wanted`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// DR/TUN real servers not resolved yet: they stay out of their
    /// services' scheduling data until their next hop is known. Solicit
    /// and poll.
    pub unresolved: BTreeSet<IpAddr>,
    /// NAT real servers whose next hop is not learnt yet (the program asks
    /// the FIB for them meanwhile). Look up; no hurry.
    pub nat: BTreeSet<IpAddr>,
    /// Next hops in use, with what the plane has: look again now and then
    /// to follow a real server or gateway that changed its MAC.
    pub in_use: BTreeMap<IpAddr, L2>,
    /// The interfaces the program is attached to, with the MACs it owns on
    /// each now: look again now and then, so the frames to a macvlan's MAC
    /// (VRRP `use_vmac`) or to a changed interface MAC are the director's.
    pub links: BTreeMap<u32, Vec<[u8; 6]>>,
}

impl Wanted {
    /// Nothing wanted.
    pub fn is_empty(&self) -> bool {
        self.unresolved.is_empty()
            && self.nat.is_empty()
            && self.in_use.is_empty()
            && self.links.is_empty()
    }
}

impl<M: MapOps> Plane<M> {
    /// What the plane wants to learn about its real servers' next hops. A
    /// real server is scheduled once its MAC is known: the DR/TUN ones in
    /// [`Wanted::unresolved`] are out of the tables until
    /// [`Plane::on_neighbour`] brings their next hop.
    pub fn wanted(&self) -> Wanted {
        let mut w = Wanted::default();
        let all = || self.services.values().flat_map(|st| st.dests.iter());
        for d in all() {
            if !d.ready() {
                w.unresolved.insert(d.core.config.addr);
            }
        }
        for d in all() {
            let a = d.core.config.addr;
            if w.unresolved.contains(&a) {
                continue;
            }
            match d.l2 {
                None => {
                    w.nat.insert(a);
                }
                Some(l2) => {
                    w.in_use.insert(a, l2);
                }
            }
        }
        for a in &w.nat {
            w.in_use.remove(a);
        }
        for &link in &self.links {
            w.links.insert(link, self.own_on(link));
        }
        w
    }

    fn own_on(&self, link: u32) -> Vec<[u8; 6]> {
        let mut v: Vec<[u8; 6]> = self
            .own
            .entries()
            .iter()
            .filter(|(i, _)| *i == link)
            .map(|(_, m)| *m)
            .collect();
        v.sort_unstable();
        v
    }

    /// The program runs on these interfaces and acts on the frames to
    /// `own` there (what attach wrote).
    pub fn set_links(&mut self, links: Vec<u32>, own: crate::own_mac::OwnMacs) {
        self.links = links;
        self.own = own;
    }

    /// Interface `link` receives frames for `macs` now (its own MAC and
    /// its macvlans'): the own-MAC table follows. Group addresses are never
    /// owned; past the table's size the rest is left out with a warning. A
    /// failed write leaves the table as it was (the resolver sends the
    /// answer again).
    pub fn on_owned_macs(&mut self, link: u32, mut macs: Vec<[u8; 6]>) {
        if !self.links.contains(&link) {
            return;
        }
        macs.sort_unstable();
        macs.dedup();
        // What stays keeps its place (the interface's own MAC first: the
        // program scans the table in order), what is new comes after.
        let mut next = crate::own_mac::OwnMacs::default();
        let old = self.own.entries();
        let keep = old
            .iter()
            .filter(|(i, m)| *i != link || macs.contains(m))
            .copied();
        let new = macs
            .iter()
            .filter(|m| !old.contains(&(link, **m)))
            .map(|m| (link, *m));
        for (i, m) in keep.chain(new) {
            if let Err(e) = next.add(i, m) {
                tracing::warn!("xdp: interface {i}: {e}");
            }
        }
        if next == self.own {
            return;
        }
        match self.maps.set_own_macs(&next) {
            Ok(()) => self.own = next,
            Err(e) => tracing::warn!("xdp: writing the own-MAC table: {e}"),
        }
    }

    /// The next hop of `addr` is `l2` (the kernel's neighbour table says
    /// so): real servers at `addr` waiting for it are written and their
    /// services republished (from then on they are scheduled); NAT ones
    /// get it (no FIB lookup per packet any more); ones whose next hop
    /// changed are rewritten. A failed write leaves the real server as it
    /// was: it stays wanted, and the resolver sends the answer again.
    pub fn on_neighbour(&mut self, addr: IpAddr, l2: L2) {
        let found = HashMap::from([(addr, l2)]);
        self.install_resolved(&found);
        let mut updates: Vec<(u32, bool)> = self
            .services
            .values()
            .flat_map(|st| st.dests.iter())
            .filter(|d| d.core.config.addr == addr && d.l2 != Some(l2) && d.ready())
            .map(|d| (d.index, d.l2.is_some()))
            .collect();
        updates.sort_unstable();
        updates.dedup();
        for (index, changed) in updates {
            if self.set_l2(index, l2) && changed {
                tracing::info!(%addr, "xdp: next hop MAC changed");
            }
        }
    }

    /// The next hop a real server at `addr` already has, if any.
    pub(super) fn known_l2(&self, addr: IpAddr) -> Option<L2> {
        self.services
            .values()
            .flat_map(|st| st.dests.iter())
            .filter(|d| d.core.config.addr == addr)
            .find_map(|d| d.l2)
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
                // Forget the resolution: still wanted, the resolver sends
                // it again.
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
