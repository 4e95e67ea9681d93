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

/// Reports a next hop the program found unresolved stays wanted.
pub const REPLY_HOP_REPORTS: u32 = 30;
/// Most such next hops wanted at once.
pub const REPLY_HOPS_MAX: usize = 1024;

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
    /// Next hops the program found without a neighbour entry (the client
    /// of a NAT reply, or the gateway toward it: after a VRRP failover the
    /// new master has none, and the kernel drops the replies passed to it
    /// meanwhile as martians). Solicit and poll until the kernel has them;
    /// the answer is only a sign that the FIB lookups succeed now.
    pub reply: BTreeSet<IpAddr>,
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
            && self.reply.is_empty()
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
        // A real server's own next hop is followed above already.
        w.reply = self
            .reply_hops
            .keys()
            .filter(|a| {
                !w.unresolved.contains(a) && !w.nat.contains(a) && !w.in_use.contains_key(a)
            })
            .copied()
            .collect();
        for &link in &self.links {
            w.links.insert(link, self.own_on(link));
        }
        w
    }

    /// Take the next hops the program reported without a neighbour entry
    /// (`nh_missing`) into the wanted set ([`Wanted::reply`]), each for
    /// [`REPLY_HOP_REPORTS`] reports (the program reports it again while
    /// packets still miss it); at most [`REPLY_HOPS_MAX`] at once. Called
    /// by the worker every [`super::DRAIN_EVERY`]; true when the
    /// wanted set grew.
    pub fn take_missing_hops(&mut self) -> bool {
        let found = match self
            .maps
            .take_missing_hops(crate::maps::NH_MISSING_MAX as usize)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!("xdp: reading nh_missing: {e}");
                return false;
            }
        };
        let mut grew = false;
        for a in found {
            if self.reply_hops.len() >= REPLY_HOPS_MAX && !self.reply_hops.contains_key(&a) {
                tracing::debug!(%a, "xdp: too many unresolved next hops; left out");
                continue;
            }
            grew |= self.reply_hops.insert(a, REPLY_HOP_REPORTS).is_none();
        }
        grew
    }

    /// Once per report: age the program's unresolved next hops (one the
    /// kernel never resolves is given up after [`REPLY_HOP_REPORTS`]),
    /// and warn when `nh_missing` was found full.
    pub fn age_missing_hops(&mut self) {
        self.reply_hops.retain(|_, left| {
            *left = left.saturating_sub(1);
            *left > 0
        });
        if let Ok(full) = self.maps.missing_hops_full()
            && full > self.missing_full
        {
            tracing::warn!(
                missed = full - self.missing_full,
                "xdp: the unresolved next-hop table (nh_missing) was full; those replies wait for the kernel"
            );
            self.missing_full = full;
        }
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
        // The kernel has the neighbour now: the program's FIB look-ups
        // find it.
        self.reply_hops.remove(&addr);
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
