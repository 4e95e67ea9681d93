//! Expiry of connections and templates ([`Ipvs::expire`]), their removal,
//! and the consistency check of the director's books ([`Ipvs::audit`]).

use super::*;

impl Ipvs {
    /// Expire every connection whose timer has passed. Returns how many
    /// entries were removed.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut removed = 0;
        while let Some(id) = self.conns.poll_expired(now) {
            let busy = self
                .conns
                .get(id)
                .is_some_and(|c| c.n_control > 0 || c.flags.contains(ConnFlags::HELD));
            if busy {
                // A template still controlling connections lives on, and so
                // does an entry a proxy's open socket holds.
                self.conns.touch(id, now);
            } else {
                self.remove_conn(id, false);
                removed += 1;
            }
        }
        removed
    }

    /// Expire a connection immediately (`ip_vs_conn_expire_now`).
    pub(super) fn expire_now(&mut self, id: ConnId) {
        self.remove_conn(id, true);
    }

    /// Remove a connection: unbind it from its real server and from its
    /// template. `forced` = expired before its timer (timeout 0), which also
    /// drops a non-assured template it was the last user of.
    pub(super) fn remove_conn(&mut self, id: ConnId, forced: bool) {
        // A template that still controls connections is never removed
        // (expiry re-arms it, eviction skips it), so no child is left with a
        // dangling `control`.
        if self.conns.get(id).is_none_or(|c| c.n_control > 0) {
            return;
        }
        let Some(c) = self.conns.remove(id) else {
            return;
        };
        self.unbind(DestId(c.dest), c.flags);
        if c.control != NONE {
            let ct = ConnId(c.control);
            let drop_template = match self.conns.get_mut(ct) {
                Some(t) => {
                    t.n_control = t.n_control.saturating_sub(1);
                    forced && t.n_control == 0 && !t.flags.contains(ConnFlags::ASSURED)
                }
                None => false,
            };
            if drop_template {
                self.remove_conn(ct, false);
            }
        }
    }

    /// Check internal consistency: every real server's active, inactive
    /// and persistent counts equal what the connection table holds, every
    /// template's `n_control` equals its controlled connections, the dest
    /// locator agrees with the lists, and no overload flag is set without an
    /// upper threshold. O(connections); for tests and fuzzing (feature
    /// `audit`).
    #[cfg(feature = "audit")]
    pub fn audit(&self) -> Result<(), String> {
        let mut counts: HashMap<u32, [u32; 3]> = HashMap::new();
        let mut controlled: HashMap<u32, u32> = HashMap::new();
        for (id, c) in self.conns.iter() {
            if c.dest != NONE {
                let e = counts.entry(c.dest).or_default();
                let i = if c.is_template() {
                    2
                } else if c.flags.contains(ConnFlags::INACTIVE) {
                    1
                } else {
                    0
                };
                e[i] += 1;
            }
            if c.control != NONE {
                match self.conns.get(ConnId(c.control)) {
                    Some(t) if t.is_template() => *controlled.entry(c.control).or_default() += 1,
                    _ => {
                        return Err(format!(
                            "conn {id:?} controlled by a non-template {}",
                            c.control
                        ));
                    }
                }
            }
        }
        for (id, c) in self.conns.iter() {
            let want = controlled.get(&id.0).copied().unwrap_or(0);
            if c.n_control != want {
                return Err(format!(
                    "template {id:?} n_control {} != {want}",
                    c.n_control
                ));
            }
        }
        let mut seen = 0usize;
        let mut check = |d: &Dest| -> Result<(), String> {
            seen += 1;
            let want = counts.remove(&d.id.0).unwrap_or_default();
            let got = [d.active, d.inactive, d.persist];
            if got != want {
                return Err(format!(
                    "dest {:?} counters {got:?} != table {want:?}",
                    d.id
                ));
            }
            if d.overloaded && d.config.u_threshold == 0 {
                return Err(format!("dest {:?} overloaded without a threshold", d.id));
            }
            Ok(())
        };
        for (si, svc) in self.services.iter().enumerate() {
            let Some(svc) = svc else { continue };
            for (pos, d) in svc.dests.iter().enumerate() {
                let loc = DestLoc::Service {
                    svc: si as u32,
                    pos: pos as u32,
                };
                if self.locator.get(d.id.0 as usize) != Some(&loc) {
                    return Err(format!("dest {:?} locator is stale", d.id));
                }
                check(d)?;
            }
        }
        for (slot, t) in self.trash.iter().enumerate() {
            let Some(t) = t else { continue };
            if self.locator.get(t.dest.id.0 as usize) != Some(&DestLoc::Trash { slot: slot as u32 })
            {
                return Err(format!("trashed dest {:?} locator is stale", t.dest.id));
            }
            if t.dest.active + t.dest.inactive + t.dest.persist == 0 {
                return Err(format!(
                    "trashed dest {:?} is unreferenced but kept",
                    t.dest.id
                ));
            }
            check(&t.dest)?;
        }
        if let Some((d, _)) = counts.into_iter().next() {
            return Err(format!("connections point at unknown dest {d}"));
        }
        let live = self.locator.iter().filter(|l| **l != DestLoc::Free).count();
        if live != seen {
            return Err(format!("{live} dest ids in use but {seen} dests exist"));
        }
        Ok(())
    }
}
