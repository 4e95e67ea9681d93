//! Commands to map writes: services, real servers, their scheduling data
//! and `config`.

use rvs_control::protocol::Command;
use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::model::{
    DestConfig, ForwardMethod, SchedFlags, ServiceConfig, ServiceKey, SourceRange,
};
use std::net::IpAddr;

use super::alloc::{Region, Retired};
use super::{
    DestState, Plane, PlaneError, SvcState, Trashed, check_quic, check_quic_dest, check_scheduler,
    edit_core, fill_timeouts, is_quic, method_of, persist_mask, quic_value, same, sched_params,
    svc_key,
};
use crate::XdpError;
use crate::maps::{self, Dest, DestConns, MapOps, SrcKey, Svc};
use crate::quic_lb::QuicSidKey;
use crate::tables::scheduling_table;
use std::collections::HashMap;

/// What the kernel tells a service's scheduler with a change
/// (`ip_vs_ctl.c`), for the schedulers whose state is this plane's cursor
/// (rr and wrr; the hash tables are rebuilt from the list either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SchedEvent {
    /// Nothing: a readiness change, a repair or a report, `-E` with the
    /// same scheduler.
    None,
    /// `add_dest`, `del_dest` or `upd_dest`: a real server added, deleted
    /// or edited (`-e` calls `upd_dest` even when nothing changed).
    Dest,
    /// `init_service`: `-E` named another scheduler.
    Bound,
}

impl<M: MapOps> Plane<M> {
    /// Apply one command (see the module doc). On error nothing changed.
    pub fn apply_command(&mut self, cmd: &Command) -> Result<(), PlaneError> {
        let r = match cmd {
            Command::AddService { key, config } => {
                let r = self.add_service(key, config);
                if r.is_ok() {
                    self.room.installed(key);
                }
                r
            }
            Command::EditService { key, config } => self.edit_service(key, config),
            Command::DelService { key } => self.del_service(key),
            Command::Clear => {
                let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
                self.refused.clear();
                self.room.clear();
                keys.iter().try_for_each(|k| self.del_service(k))
            }
            Command::AddDest { service, dest } => self.add_dest(service, dest),
            Command::EditDest { service, dest } => self.edit_dest(service, dest),
            Command::DelDest {
                service,
                addr,
                port,
            } => self.del_dest(service, *addr, *port),
            Command::AddLaddr { service, laddr } => self.add_laddr(service, *laddr),
            Command::DelLaddr { service, laddr } => self.del_laddr(service, *laddr),
            // Counters are zeroed on the director's side: reports add growth.
            Command::Zero { .. } => Ok(()),
            Command::SetTimeouts { tcp, tcpfin, udp } => {
                let old = self.timeouts.clone();
                self.timeouts.set_ipvsadm(*tcp, *tcpfin, *udp);
                self.write_config().inspect_err(|_| self.timeouts = old)
            }
        };
        match (&r, cmd.service_key()) {
            // Waits for room: retried once some is freed, not by every
            // report.
            (Err(PlaneError::Full(_)), Some(key)) => {
                let installed = self.services.contains_key(key);
                self.room.no_room(*key, installed);
            }
            (Err(PlaneError::Map(_)), Some(key)) => self.dirty.service(*key),
            (Err(PlaneError::Map(_) | PlaneError::Full(_)), None) => self.dirty.all(),
            _ => {}
        }
        r
    }

    pub(super) fn add_service(
        &mut self,
        key: &ServiceKey,
        config: &ServiceConfig,
    ) -> Result<(), PlaneError> {
        let refuse = |me: &mut Self, e: PlaneError| {
            if matches!(e, PlaneError::Refused(_)) {
                me.refused.insert(*key);
            }
            Err(e)
        };
        let skey = match svc_key(key) {
            Ok(k) => k,
            Err(e) => return refuse(self, e),
        };
        if let Err(e) = check_quic(key, config) {
            return refuse(self, e);
        }
        match check_scheduler(config) {
            Ok(_) => {}
            Err(e) => return refuse(self, e),
        };
        if self.services.contains_key(key) {
            return Ok(());
        }
        self.refused.remove(key);
        if self.claim_service(key, config) {
            return Ok(());
        }
        let index = self.svc_idx.alloc().ok_or(PlaneError::Full("svc_info"))?;
        if let Err(e) = self.maps.set_cursor(index, 0) {
            self.svc_idx.release(index);
            return Err(e.into());
        }
        self.start_counters(key, index);
        self.services.insert(
            *key,
            SvcState {
                index,
                config: config.clone(),
                dests: Vec::new(),
                region: None,
                svc: Svc::default(),
                laddrs: Vec::new(),
                sids: HashMap::new(),
                ranges: Vec::new(),
                wrr: Some(super::WrrState::default()),
            },
        );
        // Its (empty) scheduling data first, then the key that makes it
        // reachable.
        let undo = |me: &mut Self| {
            if let Some(st) = me.services.remove(key) {
                // Not reachable by any packet: clear and reuse at once.
                let _ = me.maps.set_svc(index, &Svc::default());
                if let Some(r) = st.region {
                    me.slots.release(r);
                }
            }
            me.svc_idx.release(index);
        };
        if let Err(e) = self.publish(key) {
            undo(self);
            return Err(e);
        }
        if !is_quic(config) {
            if let Err(e) = self.maps.set_service(&skey, index) {
                undo(self);
                return Err(e.into());
            }
            return Ok(());
        }
        // QUIC-LB: its configurations, then the key (in `quic_services`)
        // that makes it reachable.
        if let Err(e) = self.maps.set_quic_lb(index, &quic_value(config)) {
            undo(self);
            return Err(e.into());
        }
        self.quic_baseline(key, index);
        if let Err(e) = self.maps.set_quic_service(&skey, index) {
            let _ = self.maps.remove_quic_lb(index);
            self.quic_base.remove(key);
            undo(self);
            return Err(e.into());
        }
        Ok(())
    }

    /// Start `key`'s QUIC-LB counts from what `quic_stats[index]` holds now
    /// (an earlier user of the index counted the rest). A failed read
    /// leaves it to the next report, which starts from what it reads.
    fn quic_baseline(&mut self, key: &ServiceKey, index: u32) {
        match self.maps.quic_stats(index) {
            Ok(s) => {
                self.quic_base.insert(*key, (index, s));
            }
            Err(_) => {
                self.quic_base.remove(key);
            }
        }
    }

    /// Bring `quic_sids` to what `key` has: the server ID of every real
    /// server of a QUIC-LB service that is installed and ready (its next
    /// hop known), whatever its weight — a quiesced (weight 0) real server
    /// keeps its QUIC connections, as the proxy plane does — and nothing
    /// for a service without QUIC-LB. A deleted real server's ID goes, so
    /// its datagrams take the fallback hash. A failed write leaves the
    /// books saying what the map holds and has the next report sync again.
    pub(super) fn sync_quic_sids(&mut self, key: &ServiceKey) {
        let Some(st) = self.services.get(key) else {
            return;
        };
        let want: HashMap<QuicSidKey, u32> = if is_quic(&st.config) {
            st.dests
                .iter()
                .filter(|d| d.ready())
                .filter_map(|d| {
                    let sid = d.core.config.quic_server_id?;
                    Some((QuicSidKey::new(st.index, sid.as_bytes())?, d.index))
                })
                .collect()
        } else {
            HashMap::new()
        };
        let mut have = st.sids.clone();
        let mut ok = true;
        for (k, d) in &want {
            if have.get(k) == Some(d) {
                continue;
            }
            match self.maps.set_quic_sid(k, *d) {
                Ok(()) => {
                    have.insert(*k, *d);
                }
                Err(_) => ok = false,
            }
        }
        let gone: Vec<QuicSidKey> = have
            .keys()
            .filter(|k| !want.contains_key(k))
            .copied()
            .collect();
        for k in gone {
            match self.maps.remove_quic_sid(&k) {
                Ok(()) => {
                    have.remove(&k);
                }
                Err(_) => ok = false,
            }
        }
        if let Some(st) = self.services.get_mut(key) {
            st.sids = have;
        }
        if !ok {
            self.quic_resync = true;
        }
    }

    /// Retry what failed of the QUIC-LB server-ID syncs (part of a
    /// report's writes).
    pub(super) fn resync_quic(&mut self) {
        let stale = std::mem::take(&mut self.quic_stale);
        for k in stale {
            if self.maps.remove_quic_sid(&k).is_err() {
                self.quic_stale.push(k);
            }
        }
        if !std::mem::take(&mut self.quic_resync) {
            return;
        }
        let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
        for k in keys {
            self.sync_quic_sids(&k);
        }
    }

    pub(super) fn svc_value(
        &self,
        key: &ServiceKey,
        st: &SvcState,
        sched: u8,
        r: Region,
        list_len: u32,
    ) -> Svc {
        let c = &st.config;
        let mut flags = 0;
        if c.persistent.is_some() {
            flags |= maps::svc_flags::PERSISTENT;
        }
        if c.one_packet {
            flags |= maps::svc_flags::ONEPACKET;
        }
        if c.flags.contains(SchedFlags::FLAG1) {
            flags |= maps::svc_flags::SCHED1;
        }
        if c.flags.contains(SchedFlags::FLAG2) {
            flags |= maps::svc_flags::SCHED2;
        }
        if !c.source_ranges.is_empty() {
            flags |= maps::svc_flags::SRC_RANGES;
        }
        Svc {
            sched,
            family: match key.af() {
                rvs_core::model::AddrFamily::Inet => maps::AF_INET,
                rvs_core::model::AddrFamily::Inet6 => maps::AF_INET6,
            },
            pad0: 0,
            flags,
            dests_off: r.off,
            dests_len: list_len,
            table_off: r.off + list_len,
            table_len: r.len - list_len,
            persist_timeout: c.persistent.unwrap_or(0),
            persist_mask: persist_mask(&c.netmask),
        }
    }

    /// Write a fresh region of scheduling data for `key` and flip its
    /// `svc_info` element to it; the old region retires. On error nothing
    /// changed. Nothing is told to the service's scheduler
    /// ([`SchedEvent::None`]): see [`Plane::publish_for`].
    pub(super) fn publish(&mut self, key: &ServiceKey) -> Result<(), PlaneError> {
        self.publish_for(key, SchedEvent::None)
    }

    /// [`Plane::publish`] after `event`, what the kernel's scheduler was
    /// told with the change: the rr/wrr cursor follows it.
    pub(super) fn publish_for(
        &mut self,
        key: &ServiceKey,
        event: SchedEvent,
    ) -> Result<(), PlaneError> {
        let st = self.services.get(key).ok_or(PlaneError::NoService(*key))?;
        let sched = check_scheduler(&st.config)?;
        let ready: Vec<&DestState> = st.dests.iter().filter(|d| d.ready()).collect();
        let list: Vec<u32> = ready.iter().map(|d| d.index).collect();
        let core: Vec<CoreDest> = ready.iter().map(|d| d.core.clone()).collect();
        let table = scheduling_table(st.config.scheduler, &sched_params(&st.config), &core, &list)?;
        let wrr = self.wrr_restart(key, &core, event);
        let st = self.services.get(key).ok_or(PlaneError::NoService(*key))?;
        let mut data = list;
        let list_len = data.len() as u32;
        data.extend_from_slice(&table);
        let len = u32::try_from(data.len()).map_err(|_| PlaneError::Full("slots"))?;
        let region = self.slots.alloc(len).ok_or(PlaneError::Full("slots"))?;
        let svc = self.svc_value(key, st, sched, region, list_len);
        let index = st.index;
        // Source ranges: the new ones before the flag that makes the
        // program look them up, the old ones out after it.
        let want = st.config.source_ranges.clone();
        let added: Vec<SourceRange> = want
            .iter()
            .filter(|r| !st.ranges.contains(r))
            .copied()
            .collect();
        let gone: Vec<SourceRange> = st
            .ranges
            .iter()
            .filter(|r| !want.contains(r))
            .copied()
            .collect();
        // The first ranges at this index: what an earlier service of the
        // index or an earlier rvsd (adopted maps) left there goes before
        // the flag is set, or it would widen this service's clients.
        let first = st.ranges.is_empty() && !want.is_empty();
        let wanted: Vec<SrcKey> = want.iter().map(|r| SrcKey::of(index, r)).collect();
        if let Err(e) = self
            .maps
            .set_slots(region.off, &data)
            .and_then(|()| {
                if first {
                    self.clear_stale_ranges(index, &wanted)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| self.set_ranges(index, &added, true))
            .and_then(|()| match &wrr {
                Some((w, true)) => self.maps.set_cursor(index, w.base),
                _ => Ok(()),
            })
            .and_then(|()| self.maps.set_svc(index, &svc))
        {
            // The region was never visible to the program; the ranges
            // added go again (an edit's old flag may have shown them for a
            // moment; best effort: a leftover only widens a later service
            // of this index that has ranges of its own).
            let _ = self.set_ranges(index, &added, false);
            self.slots.release(region);
            return Err(e.into());
        }
        // A range that cannot be removed stays listed, removed later.
        let kept: Vec<SourceRange> = gone
            .into_iter()
            .filter(|r| {
                self.set_ranges(index, std::slice::from_ref(r), false)
                    .is_err()
            })
            .collect();
        if !kept.is_empty() {
            self.dirty.service(*key);
        }
        let generation = self.generation;
        if let Some(st) = self.services.get_mut(key) {
            st.svc = svc;
            st.ranges = want;
            st.ranges.extend(kept);
            st.wrr = wrr.map(|(w, _)| w);
            if let Some(old) = st.region.replace(region) {
                self.retired.push((generation, Retired::Region(old)));
            }
        }
        // Its real servers' server IDs follow every change of them
        // (added, deleted, ready); a failure is retried by the reports.
        self.sync_quic_sids(key);
        Ok(())
    }

    /// A wrr service's cursor after its ready real servers became `ready`
    /// with `event`, placed where the kernel's next decision is
    /// (`rvs_core::sched::WrrMark`): the state to keep, and whether the
    /// cursor is to be written (its value is the state's `base`). A change
    /// of the configured list, or a real server's edit that changed nothing
    /// ([`SchedEvent::Dest`]), is the kernel's `ip_vs_wrr_dest_changed`
    /// (back to the head, its threshold kept); a change of readiness alone
    /// moves the cursor into the new cycle at the same threshold; neither
    /// (a service edit with the same scheduler), the cursor stays. wrr
    /// bound by `-E` ([`SchedEvent::Bound`]) starts from a new mark, rr
    /// from the list head (their `init_service`). A service adopted from
    /// an earlier rvsd keeps its cursor, its mark taken from where the
    /// cursor stands. `None` when there is no such service.
    fn wrr_restart(
        &mut self,
        key: &ServiceKey,
        ready: &[CoreDest],
        event: SchedEvent,
    ) -> Option<(super::WrrState, bool)> {
        use rvs_core::sched::{Scheduler, WrrMark};
        let st = self.services.get(key)?;
        match st.config.scheduler {
            Scheduler::Wrr => {}
            // rr's cursor (0: the list head) at `init_service`; its other
            // changes leave it.
            Scheduler::Rr => {
                return Some((super::WrrState::default(), event == SchedEvent::Bound));
            }
            // A later switch to wrr starts from a new mark.
            _ => return Some((super::WrrState::default(), false)),
        }
        let index = st.index;
        // IPVS list order: the configured list as the kernel has it.
        let all_dests: Vec<CoreDest> = st.dests.iter().map(|d| d.core.clone()).collect();
        let all: Vec<(IpAddr, u16, u32)> = all_dests
            .iter()
            .map(|d| (d.config.addr, d.config.port, d.weight()))
            .collect();
        let prev = match event {
            SchedEvent::Bound => Some(super::WrrState::default()),
            _ => st.wrr.clone(),
        };
        let cursor = match self.maps.cursor(index) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, service = ?key, "reading the wrr cursor: its decisions since the last change are not followed");
                None
            }
        };
        let Some(prev) = prev else {
            // Adopted: the cursor stays where the earlier rvsd left it.
            let c = cursor.unwrap_or(0);
            let mark = match c.checked_sub(1) {
                Some(last) => WrrMark::after(ready, last as usize),
                None => WrrMark::NEW,
            };
            let w = super::WrrState {
                mark,
                base: c,
                all,
                ready: ready.to_vec(),
            };
            return Some((w, false));
        };
        let same_ready = prev.ready.len() == ready.len()
            && prev.ready.iter().zip(ready).all(|(a, b)| {
                (a.config.addr, a.config.port, a.weight())
                    == (b.config.addr, b.config.port, b.weight())
            });
        let dest_changed = prev.all != all || event == SchedEvent::Dest;
        if !dest_changed && same_ready {
            return Some((prev, false));
        }
        // The decisions made since the cursor was written leave the mark at
        // the pass of the last one.
        let mut mark = match cursor {
            Some(c) if c != prev.base => WrrMark::after(&prev.ready, c.wrapping_sub(1) as usize),
            _ => prev.mark,
        };
        if dest_changed {
            mark = mark.changed(&all_dests);
        }
        let base = mark.start(ready) as u64;
        let w = super::WrrState {
            mark,
            base,
            all,
            ready: ready.to_vec(),
        };
        Some((w, true))
    }

    /// Remove every range of service `index` in `src_ranges` but `keep`.
    fn clear_stale_ranges(&mut self, index: u32, keep: &[SrcKey]) -> Result<(), XdpError> {
        for k in self.maps.src_ranges_of(index)? {
            if !keep.contains(&k) {
                self.maps.set_src_range(&k, false)?;
            }
        }
        Ok(())
    }

    /// Add (`present`) or remove `ranges` of service `index` in
    /// `src_ranges`.
    fn set_ranges(
        &mut self,
        index: u32,
        ranges: &[SourceRange],
        present: bool,
    ) -> Result<(), XdpError> {
        for r in ranges {
            self.maps.set_src_range(&SrcKey::of(index, r), present)?;
        }
        Ok(())
    }

    pub(super) fn edit_service(
        &mut self,
        key: &ServiceKey,
        config: &ServiceConfig,
    ) -> Result<(), PlaneError> {
        if !self.services.contains_key(key) {
            if self.refused.remove(key) {
                // Maybe acceptable now: the next report installs it with its
                // real servers from the model.
                self.dirty.service(*key);
                return Ok(());
            }
            if self.room.roomless(key) {
                // A report installs it as edited once there is room.
                return Ok(());
            }
            return Err(PlaneError::NoService(*key));
        }
        check_quic(key, config)?;
        check_scheduler(config)?;
        let skey = svc_key(key)?;
        if is_quic(config)
            && let Some(st) = self.services.get(key)
            && let Some(d) = st
                .dests
                .iter()
                .find(|d| matches!(d.core.config.forward, ForwardMethod::FullNat))
        {
            check_quic_dest(key, &d.core.config)?;
        }
        let old = match self.services.get_mut(key) {
            Some(st) => std::mem::replace(&mut st.config, config.clone()),
            None => return Err(PlaneError::NoService(*key)),
        };
        // ip_vs_edit_service binds a scheduler anew only when another one
        // is named.
        let event = if old.scheduler == config.scheduler {
            SchedEvent::None
        } else {
            SchedEvent::Bound
        };
        let r = self.publish_for(key, event);
        if r.is_err()
            && let Some(st) = self.services.get_mut(key)
        {
            st.config = old;
            return r;
        }
        if let Err(e) = self.edit_quic(key, &skey, &old, config) {
            // Back to the old configuration (best effort: a failure here
            // is converged by the next report).
            if let Some(st) = self.services.get_mut(key) {
                st.config = old;
            }
            if self.publish(key).is_err() {
                self.dirty.service(*key);
            }
            return Err(e);
        }
        Ok(())
    }

    /// The QUIC-LB side of an edit of `key` (already published) from `old`
    /// to `new`: the new configurations in one element write (a key
    /// rotation's two configurations arrive together); turned on or off,
    /// the key is added to its new map before it leaves the old one, so
    /// every packet finds one of them (`xdp_lb` looks `services` up first:
    /// the switch happens at the removal). On error nothing changed.
    fn edit_quic(
        &mut self,
        key: &ServiceKey,
        skey: &crate::maps::SvcKey,
        old: &rvs_core::model::ServiceConfig,
        new: &rvs_core::model::ServiceConfig,
    ) -> Result<(), PlaneError> {
        let Some(index) = self.services.get(key).map(|s| s.index) else {
            return Err(PlaneError::NoService(*key));
        };
        let (was, now) = (is_quic(old), is_quic(new));
        let restore_lb = |me: &mut Self| {
            let _ = if was {
                me.maps.set_quic_lb(index, &quic_value(old))
            } else {
                me.maps.remove_quic_lb(index)
            };
        };
        if now && (!was || old.quic_lb != new.quic_lb) {
            self.maps.set_quic_lb(index, &quic_value(new))?;
        }
        if now && !was {
            let base = self.quic_base.get(key).copied();
            self.quic_baseline(key, index);
            let undo = |me: &mut Self| {
                restore_lb(me);
                match base {
                    Some(b) => me.quic_base.insert(*key, b),
                    None => me.quic_base.remove(key),
                };
            };
            if let Err(e) = self.maps.set_quic_service(skey, index) {
                undo(self);
                return Err(e.into());
            }
            if let Err(e) = self.maps.remove_service(skey) {
                let _ = self.maps.remove_quic_service(skey);
                undo(self);
                return Err(e.into());
            }
        }
        if was && !now {
            self.maps.set_service(skey, index)?;
            if let Err(e) = self.maps.remove_quic_service(skey) {
                let _ = self.maps.remove_service(skey);
                return Err(e.into());
            }
            // Unreachable now (a leftover is never read: the program looks
            // `quic_lb` up only for services in `quic_services`).
            let _ = self.maps.remove_quic_lb(index);
            self.quic_base.remove(key);
        }
        Ok(())
    }

    pub(super) fn del_service(&mut self, key: &ServiceKey) -> Result<(), PlaneError> {
        if self.refused.remove(key) | self.room.forget(key) {
            return Ok(());
        }
        let skey = svc_key(key)?;
        let quic = match self.services.get(key) {
            Some(st) => is_quic(&st.config),
            None => return Err(PlaneError::NoService(*key)),
        };
        if quic {
            self.maps.remove_quic_service(&skey)?;
        } else {
            self.maps.remove_service(&skey)?;
        }
        let Some(st) = self.services.remove(key) else {
            return Ok(());
        };
        // QUIC-LB: unreachable now; its server IDs must go before the index
        // is reused (retried by the reports when a removal fails).
        self.quic_base.remove(key);
        if quic {
            let _ = self.maps.remove_quic_lb(st.index);
        }
        for k in st.sids.keys() {
            if self.maps.remove_quic_sid(k).is_err() {
                self.quic_stale.push(*k);
            }
        }
        // Unreachable now; a stale element is harmless if this write fails.
        let _ = self.maps.set_svc(st.index, &Svc::default());
        // Its source ranges, before the index is reused (best effort: a
        // leftover only widens a later service of this index that has
        // ranges of its own).
        let _ = self.set_ranges(st.index, &st.ranges, false);
        if !st.laddrs.is_empty() {
            let _ = self
                .maps
                .set_fnat_pool(st.index, &crate::maps::FnatPool::default());
            let mut before = self.all_laddrs();
            before.extend(st.laddrs.iter().flat_map(|r| r.addrs()));
            if self.sync_laddrs(&before).is_err() {
                self.dirty.service(*key);
            }
            let _ = self.write_config();
        }
        let g = self.generation;
        self.retired.push((g, Retired::Svc(st.index)));
        if let Some(r) = st.region {
            self.retired.push((g, Retired::Region(r)));
        }
        for d in st.dests {
            self.trash_dest(*key, d);
        }
        Ok(())
    }

    /// Mark a deleted real server unavailable and keep its index while flows
    /// use it.
    pub(super) fn trash_dest(&mut self, service: ServiceKey, d: DestState) {
        let v = self.dest_value(&d, maps::dest_flags::UNAVAILABLE);
        if self.maps.set_dest(d.index, &v).is_err() {
            // Still scheduled nowhere; its flows keep going until they end.
            self.dirty.service(service);
        }
        self.trash.push(Trashed {
            service,
            dest: d,
            since: self.generation,
        });
    }

    pub(super) fn dest_value(&self, d: &DestState, mut flags: u32) -> Dest {
        if d.core.overloaded {
            flags |= maps::dest_flags::OVERLOADED;
        }
        let c = &d.core.config;
        let (method, gue_port, tun_flags) = method_of(&c.forward).unwrap_or((0, 0, 0));
        flags |= tun_flags;
        let l2 = d.l2.unwrap_or_default();
        if d.is_nat() && d.l2.is_some() {
            flags |= maps::dest_flags::NEXTHOP;
        }
        Dest {
            addr: maps::addr16(c.addr),
            port: c.port.to_be(),
            family: maps::family(c.addr),
            method,
            flags,
            weight: c.weight,
            ifindex: l2.ifindex,
            mac: l2.mac,
            smac: l2.smac,
            gue_port: gue_port.to_be(),
            pad0: 0,
        }
    }

    pub(super) fn add_dest(
        &mut self,
        service: &ServiceKey,
        cfg: &DestConfig,
    ) -> Result<(), PlaneError> {
        if self.ignored(service) {
            return Ok(());
        }
        let Some(st) = self.services.get(service) else {
            return Err(PlaneError::NoService(*service));
        };
        if is_quic(&st.config) {
            check_quic_dest(service, cfg)?;
        }
        method_of(&cfg.forward)?;
        if self
            .services
            .get(service)
            .is_some_and(|s| s.dests.iter().any(|d| same(&d.core.config, cfg)))
        {
            return self.edit_dest(service, cfg);
        }
        // A deleted real server still referenced by flows comes back with
        // its index (IPVS resurrects it from the trash).
        let resurrect = self
            .trash
            .iter()
            .position(|t| t.service == *service && same(&t.dest.core.config, cfg));
        let claimed = if resurrect.is_none() {
            self.claim_dest(service, cfg)
        } else {
            None
        };
        let (mut d, fresh) = match (resurrect, claimed.clone()) {
            (Some(p), _) => (self.trash.remove(p).dest, false),
            (None, Some(d)) => (d, false),
            (None, None) => {
                let index = self.dest_idx.alloc().ok_or(PlaneError::Full("dests"))?;
                let core = CoreDest::new(DestId(index), *cfg);
                (
                    DestState {
                        index,
                        core,
                        l2: None,
                    },
                    true,
                )
            }
        };
        let prev = d.clone();
        edit_core(&mut d.core, cfg);
        // The next hop another real server at this address already has;
        // else it is wanted from the resolver ([`Plane::wanted`]) and
        // installed when it comes ([`Plane::on_neighbour`]). NAT too: a
        // known next hop saves the program a FIB lookup per packet; an
        // unknown one is left to the FIB meanwhile, nothing waits for it.
        if d.l2.is_none() {
            d.l2 = self.known_l2(cfg.addr);
        }
        if fresh {
            // Counters of an earlier user of the index are not this one's.
            if let Ok(s) = self.maps.dest_stats(d.index) {
                self.baselines.insert(d.index, s);
            }
            // Best effort: the next report sets them from the flows anyway.
            let _ = self.maps.set_dest_conns(d.index, &DestConns::default());
        }
        let undo = |me: &mut Self, prev: DestState| {
            if claimed.is_some() {
                // Back to the orphans: held while flows use it.
                me.orphans.push(super::adopt::Orphan {
                    index: prev.index,
                    since: me.generation,
                });
            } else if fresh {
                let _ = me.maps.set_dest(prev.index, &Dest::default());
                me.dest_idx.release(prev.index);
                me.baselines.remove(&prev.index);
            } else {
                let v = me.dest_value(&prev, maps::dest_flags::UNAVAILABLE);
                let _ = me.maps.set_dest(prev.index, &v);
                me.trash.push(Trashed {
                    service: *service,
                    dest: prev,
                    since: me.generation,
                });
            }
        };
        let v = self.dest_value(&d, 0);
        if let Err(e) = self.maps.set_dest(d.index, &v) {
            undo(self, prev);
            return Err(e.into());
        }
        if let Some(st) = self.services.get_mut(service) {
            st.dests.insert(0, d);
        }
        // An adopted service keeps scheduling with its old data until all
        // its adopted real servers are back.
        if self.awaits_claims(service) {
            return Ok(());
        }
        if let Err(e) = self.publish_for(service, SchedEvent::Dest) {
            if let Some(st) = self.services.get_mut(service) {
                st.dests.remove(0);
            }
            undo(self, prev);
            return Err(e);
        }
        if self.write_config().is_err() {
            self.dirty.service(*service);
        }
        Ok(())
    }

    /// Whether commands about `service` are ignored: this plane refused
    /// it, or had no room for it (its real servers and pool come with it
    /// when a report installs it).
    fn ignored(&self, service: &ServiceKey) -> bool {
        self.refused.contains(service) || self.room.roomless(service)
    }

    /// The installed state of `service`; `None` when this plane refused
    /// it or had no room for it, whose dests are then not installed and
    /// edits to them no-ops.
    fn installed_mut(&mut self, service: &ServiceKey) -> Result<Option<&mut SvcState>, PlaneError> {
        if self.ignored(service) {
            return Ok(None);
        }
        match self.services.get_mut(service) {
            Some(st) => Ok(Some(st)),
            None => Err(PlaneError::NoService(*service)),
        }
    }

    pub(super) fn edit_dest(
        &mut self,
        service: &ServiceKey,
        cfg: &DestConfig,
    ) -> Result<(), PlaneError> {
        let Some(st) = self.installed_mut(service)? else {
            return Ok(());
        };
        let Some(pos) = st.dests.iter().position(|d| same(&d.core.config, cfg)) else {
            // Not installed here (refused earlier, or a failed add): try now.
            return self.add_dest(service, cfg);
        };
        method_of(&cfg.forward)?;
        if is_quic(&st.config) {
            check_quic_dest(service, cfg)?;
        }
        let prev = st.dests[pos].clone();
        let mut d = prev.clone();
        edit_core(&mut d.core, cfg);
        if d.needs_l2() && d.l2.is_none() {
            d.l2 = self.known_l2(cfg.addr);
        }
        let v = self.dest_value(&d, 0);
        self.maps.set_dest(d.index, &v)?;
        if let Some(st) = self.services.get_mut(service) {
            st.dests[pos] = d;
        }
        // upd_dest, whether or not the edit changed anything.
        if let Err(e) = self.publish_for(service, SchedEvent::Dest) {
            if let Some(st) = self.services.get_mut(service) {
                st.dests[pos] = prev.clone();
            }
            let v = self.dest_value(&prev, 0);
            let _ = self.maps.set_dest(prev.index, &v);
            return Err(e);
        }
        let _ = self.write_config();
        Ok(())
    }

    /// The books of `service` when `laddr` is to join (`join`) or leave
    /// its pool; `None` when they say so already, or for a refused
    /// service (its commands are ignored, as for its real servers).
    fn laddr_books(
        &self,
        service: &ServiceKey,
        laddr: &rvs_core::model::LocalAddrRange,
        join: bool,
    ) -> Result<Option<&SvcState>, PlaneError> {
        if self.ignored(service) {
            return Ok(None);
        }
        let st = self
            .services
            .get(service)
            .ok_or(PlaneError::NoService(*service))?;
        Ok((st.laddrs.contains(laddr) != join).then_some(st))
    }

    /// A pool entry joins the service's books (a refused service's
    /// commands are ignored, as for its real servers).
    pub(super) fn add_laddr(
        &mut self,
        service: &ServiceKey,
        laddr: rvs_core::model::LocalAddrRange,
    ) -> Result<(), PlaneError> {
        let Some(st) = self.laddr_books(service, &laddr, true)? else {
            return Ok(());
        };
        // Checked before anything is written: the books change only with
        // the maps.
        let v6 = service.af() == rvs_core::model::AddrFamily::Inet6;
        let mut ranges = st.laddrs.clone();
        ranges.push(laddr);
        super::fnat::pool_addrs(&ranges, v6)?;
        let before = self.all_laddrs();
        if let Some(st) = self.services.get_mut(service) {
            st.laddrs.push(laddr);
        }
        if let Err(e) = self.write_pool(service, &before) {
            if let Some(st) = self.services.get_mut(service) {
                st.laddrs.retain(|l| *l != laddr);
            }
            let _ = self.write_pool(service, &self.all_laddrs_with(&before));
            return Err(e);
        }
        let _ = self.write_config();
        Ok(())
    }

    /// A pool entry leaves the service's books.
    pub(super) fn del_laddr(
        &mut self,
        service: &ServiceKey,
        laddr: rvs_core::model::LocalAddrRange,
    ) -> Result<(), PlaneError> {
        if self.laddr_books(service, &laddr, false)?.is_none() {
            return Ok(());
        }
        let before = self.all_laddrs();
        if let Some(st) = self.services.get_mut(service) {
            st.laddrs.retain(|l| *l != laddr);
        }
        // Flows already holding one of its addresses keep their
        // translation (fnat_rev) until they end, as IPVS keeps them.
        self.write_pool(service, &before)?;
        let _ = self.write_config();
        Ok(())
    }

    pub(super) fn del_dest(
        &mut self,
        service: &ServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> Result<(), PlaneError> {
        let Some(st) = self.installed_mut(service)? else {
            return Ok(());
        };
        let Some(pos) = st
            .dests
            .iter()
            .position(|d| d.core.config.addr == addr && d.core.config.port == port)
        else {
            // Never installed here (refused): nothing to remove.
            return Ok(());
        };
        let d = st.dests.remove(pos);
        if let Err(e) = self.publish_for(service, SchedEvent::Dest) {
            if let Some(st) = self.services.get_mut(service) {
                st.dests.insert(pos, d);
            }
            return Err(e);
        }
        self.trash_dest(*service, d);
        Ok(())
    }

    /// Compute and write `config` if it changed.
    pub(super) fn write_config(&mut self) -> Result<(), PlaneError> {
        let mut c = self.config;
        fill_timeouts(&mut c, &self.timeouts);
        let all = || {
            self.services
                .values()
                .flat_map(|s| s.dests.iter())
                .chain(self.trash.iter().map(|t| &t.dest))
        };
        c.flags = if all().any(|d| matches!(d.core.config.forward, ForwardMethod::Masq))
            || self.adopted_nat()
        {
            maps::CFG_F_NAT
        } else {
            0
        };
        // While adopting, FULLNAT stays on as the maps had it: the adopted
        // flows' replies (to a local address) must reach xdp_fnat before
        // the configuration has given the pools back, else they go to the
        // kernel, which resets them (the real server's connection dies).
        let adopted_fnat = self.adopted.is_some() && self.config.flags & maps::CFG_F_FNAT != 0;
        if adopted_fnat || self.services.values().any(|s| !s.laddrs.is_empty()) {
            c.flags |= maps::CFG_F_FNAT;
        }
        let tun = |v6: bool| {
            all().find_map(|d| {
                let tunnel = matches!(d.core.config.forward, ForwardMethod::Tunnel(_));
                (tunnel && d.core.config.addr.is_ipv6() == v6)
                    .then_some(d.l2.and_then(|l| l.src))
                    .flatten()
            })
        };
        // While adopting, a source not known yet stays as the maps had it.
        let adopting = self.adopted.is_some();
        match self.tun_src.0.map(IpAddr::V4).or_else(|| tun(false)) {
            Some(IpAddr::V4(a)) => c.tun_src4 = a.octets(),
            _ if adopting => {}
            _ => c.tun_src4 = [0; 4],
        }
        match self.tun_src.1.map(IpAddr::V6).or_else(|| tun(true)) {
            Some(IpAddr::V6(a)) => c.tun_src6 = a.octets(),
            _ if adopting => {}
            _ => c.tun_src6 = [0; 16],
        }
        c.tun_vary4 = self.tun_vary.0;
        c.tun_vary6 = self.tun_vary.1;
        if c != self.config {
            self.maps.set_config(&c)?;
            self.config = c;
        }
        Ok(())
    }
}
