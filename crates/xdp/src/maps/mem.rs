//! [`MemMaps`]: in-memory maps behind [`MapOps`], for testing the sync
//! logic without a kernel (compiled for tests and the `mem-maps` feature
//! only; nothing in production uses it).

use std::collections::HashMap;

use rvs_sys::bpf::Error as MapError;

use super::ops::{MapOps, WalkCursor, map_error};
use crate::XdpError;
use crate::maps::{
    self, Config, Dest, DestConns, Flow, FlowKey, Nat, NatKey, Persist, PersistKey, Stats, Svc,
    SvcFlood, SvcKey,
};

/// In-memory maps with the kernel's rules (array bounds, hash deletion of
/// an absent key fails), for testing the sync logic without a kernel.
/// `fail_at` injects one failure: the write with that sequence number
/// (counted by `writes`) fails, the ones after it succeed again;
/// `fail_elem` a lasting one: every write to one element of an array.
#[derive(Clone, Debug, Default)]
pub struct MemMaps {
    /// `services`.
    pub services: HashMap<SvcKey, u32>,
    /// `svc_info` (absent = zero).
    pub svc_info: HashMap<u32, Svc>,
    /// `rr_cursor`.
    pub cursors: HashMap<u32, u64>,
    /// `slots` (absent = zero).
    pub slots: HashMap<u32, u32>,
    /// `dests` (absent = zero).
    pub dests: HashMap<u32, Dest>,
    /// `config[0]`.
    pub config: Config,
    /// `dest_stats`, already summed.
    pub dest_stats: HashMap<u32, Stats>,
    /// `svc_flood`, already summed.
    pub svc_flood: HashMap<u32, SvcFlood>,
    /// `nh_missing`, in the order the program reported them.
    pub missing_hops: Vec<std::net::IpAddr>,
    /// `nh_missing_full`, summed.
    pub missing_hops_full: u64,
    /// `flows`.
    pub flows: HashMap<FlowKey, Flow>,
    /// `nat_rev`.
    pub nat_rev: HashMap<NatKey, Nat>,
    /// `fnat_pools` (absent = zero).
    pub fnat_pools: HashMap<u32, crate::maps::FnatPool>,
    /// `fnat_fwd` (flow -> its `fnat_rev` key; `fnat_rev` itself is the
    /// program's).
    pub fnat_fwd: HashMap<FlowKey, crate::maps::FnatKey>,
    /// `fnat_rev` (the pairs in use, and the client side of each).
    pub fnat_rev: HashMap<crate::maps::FnatKey, crate::maps::Fnat>,
    /// `fnat_stats`, already summed.
    pub fnat_stats: HashMap<u32, crate::maps::FnatStats>,
    /// `fnat_laddrs`.
    pub fnat_laddrs: std::collections::BTreeSet<std::net::IpAddr>,
    /// `src_ranges`.
    pub src_ranges: std::collections::HashSet<crate::maps::SrcKey>,
    /// `dest_conns` (absent = zero).
    pub dest_conns: HashMap<u32, DestConns>,
    /// `persist`.
    pub persist: HashMap<PersistKey, Persist>,
    /// `quic_services`.
    pub quic_services: HashMap<SvcKey, u32>,
    /// `quic_lb`.
    pub quic_lb: HashMap<u32, crate::quic_lb::QuicSvc>,
    /// `quic_sids`.
    pub quic_sids: HashMap<crate::quic_lb::QuicSidKey, u32>,
    /// `quic_stats`, already summed.
    pub quic_stats: HashMap<u32, crate::quic_lb::QuicStats>,
    /// The own-MAC table.
    pub own_macs: crate::own_mac::OwnMacs,
    /// The jiffies clock.
    pub jiffies: u64,
    /// Its rate.
    pub hz: u32,
    /// Size of `slots`.
    pub slots_len: u32,
    /// Size of `services` and the arrays indexed by service.
    pub services_len: u32,
    /// The write (by sequence number) that fails; `None` = none.
    pub fail_at: Option<usize>,
    /// Writes attempted so far.
    pub writes: usize,
    /// An array element (map name, index: `svc_info`, `rr_cursor`,
    /// `dests`, `dest_conns`) every write to which fails; `None` = none.
    pub fail_elem: Option<(&'static str, u32)>,
    /// Reads of `dest_conns` made ([`MapOps::dest_conns_of`] calls: one
    /// batch each, as the kernel's up to [`super::ops::CONNS_BATCH`]
    /// elements).
    pub conns_reads: usize,
    /// Writes to `dest_conns` attempted.
    pub conns_writes: usize,
}

impl MemMaps {
    /// Empty maps with `slots_len` slots, room for
    /// [`maps::MAX_SERVICES`] services, HZ 250, clock at 1,000,000.
    pub fn new(slots_len: u32) -> Self {
        MemMaps {
            slots_len,
            services_len: maps::MAX_SERVICES,
            hz: 250,
            jiffies: 1_000_000,
            ..MemMaps::default()
        }
    }

    fn write(&mut self, map: &'static str) -> Result<(), XdpError> {
        let n = self.writes;
        self.writes += 1;
        if self.fail_at == Some(n) {
            return Err(map_error(
                map,
                MapError::Syscall {
                    call: "bpf_map_update_elem",
                    source: std::io::Error::from_raw_os_error(12),
                },
            ));
        }
        Ok(())
    }

    /// A write to element `index` of array `map` (fails as `write` does,
    /// and always when it is `fail_elem`).
    fn write_elem(&mut self, map: &'static str, index: u32) -> Result<(), XdpError> {
        self.write(map)?;
        if self.fail_elem == Some((map, index)) {
            return Err(map_error(
                map,
                MapError::Syscall {
                    call: "bpf_map_update_elem",
                    source: std::io::Error::from_raw_os_error(libc::EIO),
                },
            ));
        }
        Ok(())
    }

    fn bound(map: &'static str, index: u32, max: u32) -> Result<(), XdpError> {
        if index >= max {
            return Err(map_error(
                map,
                MapError::OutOfBounds {
                    index,
                    max_entries: max,
                },
            ));
        }
        Ok(())
    }

    /// The scheduling data of the service at `index`: (real-server list,
    /// table), read back from `slots` as the program would.
    pub fn svc_data(&self, index: u32) -> (Vec<u32>, Vec<u32>) {
        let s = self.svc_info.get(&index).copied().unwrap_or_default();
        let read = |off: u32, len: u32| {
            (off..off + len)
                .map(|i| self.slots.get(&i).copied().unwrap_or(0))
                .collect()
        };
        (
            read(s.dests_off, s.dests_len),
            read(s.table_off, s.table_len),
        )
    }
}

impl MapOps for MemMaps {
    fn set_own_macs(&mut self, macs: &crate::own_mac::OwnMacs) -> Result<(), XdpError> {
        self.write("own_macs")?;
        self.own_macs = macs.clone();
        Ok(())
    }
    fn set_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.write("services")?;
        if !self.services.contains_key(key) && self.services.len() >= self.services_len as usize {
            return Err(map_error(
                "services",
                MapError::Syscall {
                    call: "bpf_map_update_elem",
                    source: std::io::Error::from_raw_os_error(7),
                },
            ));
        }
        self.services.insert(*key, index);
        Ok(())
    }
    fn remove_service(&mut self, key: &SvcKey) -> Result<(), XdpError> {
        self.write("services")?;
        self.services
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| map_error("services", MapError::KeyNotFound))
    }
    fn set_svc(&mut self, index: u32, svc: &Svc) -> Result<(), XdpError> {
        Self::bound("svc_info", index, self.services_len)?;
        self.write_elem("svc_info", index)?;
        self.svc_info.insert(index, *svc);
        Ok(())
    }
    fn set_cursor(&mut self, index: u32, value: u64) -> Result<(), XdpError> {
        Self::bound("rr_cursor", index, self.services_len)?;
        self.write_elem("rr_cursor", index)?;
        self.cursors.insert(index, value);
        Ok(())
    }
    fn cursor(&mut self, index: u32) -> Result<u64, XdpError> {
        Self::bound("rr_cursor", index, self.services_len)?;
        Ok(self.cursors.get(&index).copied().unwrap_or(0))
    }
    fn set_slots(&mut self, offset: u32, values: &[u32]) -> Result<(), XdpError> {
        let end = offset.saturating_add(values.len() as u32);
        if end > self.slots_len {
            return Self::bound("slots", end - 1, self.slots_len);
        }
        // One write for the whole run: a failure part way leaves values in
        // a region no `svc_info` points to yet, which is the same as none.
        self.write("slots")?;
        for (i, v) in (offset..).zip(values) {
            self.slots.insert(i, *v);
        }
        Ok(())
    }
    fn set_dest(&mut self, index: u32, dest: &Dest) -> Result<(), XdpError> {
        Self::bound("dests", index, maps::MAX_DESTS)?;
        self.write_elem("dests", index)?;
        self.dests.insert(index, *dest);
        Ok(())
    }
    fn set_config(&mut self, config: &Config) -> Result<(), XdpError> {
        self.write("config")?;
        self.config = *config;
        Ok(())
    }
    fn dest_stats(&mut self, index: u32) -> Result<Stats, XdpError> {
        Self::bound("dest_stats", index, maps::MAX_DESTS)?;
        Ok(self.dest_stats.get(&index).copied().unwrap_or_default())
    }
    fn svc_flood(&mut self, index: u32) -> Result<SvcFlood, XdpError> {
        Self::bound("svc_flood", index, self.services_len)?;
        Ok(self.svc_flood.get(&index).copied().unwrap_or_default())
    }
    fn reset_svc_flood(&mut self, index: u32) -> Result<(), XdpError> {
        Self::bound("svc_flood", index, self.services_len)?;
        self.write("svc_flood")?;
        self.svc_flood.remove(&index);
        Ok(())
    }
    fn take_missing_hops(&mut self, max: usize) -> Result<Vec<std::net::IpAddr>, XdpError> {
        let n = max.min(self.missing_hops.len());
        Ok(self.missing_hops.drain(..n).collect())
    }
    fn missing_hops_full(&mut self) -> Result<u64, XdpError> {
        Ok(self.missing_hops_full)
    }
    fn remove_flow(&mut self, key: &FlowKey) -> Result<(), XdpError> {
        self.write("flows")?;
        self.flows.remove(key);
        Ok(())
    }
    fn persist_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&PersistKey, &Persist),
    ) -> Result<bool, XdpError> {
        Ok(mem_page(&self.persist, cursor, max, f))
    }
    fn remove_persist(&mut self, key: &PersistKey) -> Result<(), XdpError> {
        self.write("persist")?;
        self.persist.remove(key);
        Ok(())
    }
    fn set_flow(&mut self, key: &FlowKey, flow: &Flow) -> Result<(), XdpError> {
        self.write("flows")?;
        self.flows.insert(*key, *flow);
        Ok(())
    }
    fn set_nat(&mut self, key: &NatKey, nat: &Nat) -> Result<(), XdpError> {
        self.write("nat_rev")?;
        self.nat_rev.insert(*key, *nat);
        Ok(())
    }
    fn remove_nat(&mut self, key: &NatKey) -> Result<(), XdpError> {
        self.write("nat_rev")?;
        self.nat_rev.remove(key);
        Ok(())
    }
    fn set_fnat_pool(&mut self, index: u32, pool: &crate::maps::FnatPool) -> Result<(), XdpError> {
        self.write("fnat_pools")?;
        Self::bound("fnat_pools", index, self.services_len)?;
        self.fnat_pools.insert(index, *pool);
        Ok(())
    }
    fn set_fnat_laddr(&mut self, addr: std::net::IpAddr, present: bool) -> Result<(), XdpError> {
        self.write("fnat_laddrs")?;
        if present {
            self.fnat_laddrs.insert(addr);
        } else {
            self.fnat_laddrs.remove(&addr);
        }
        Ok(())
    }
    fn set_src_range(&mut self, key: &crate::maps::SrcKey, present: bool) -> Result<(), XdpError> {
        self.write("src_ranges")?;
        if present {
            self.src_ranges.insert(*key);
        } else {
            self.src_ranges.remove(key);
        }
        Ok(())
    }
    fn src_ranges_of(&mut self, svc: u32) -> Result<Vec<crate::maps::SrcKey>, XdpError> {
        Ok(self
            .src_ranges
            .iter()
            .filter(|k| k.svc == svc)
            .copied()
            .collect())
    }
    fn fnat_of(&mut self, key: &FlowKey) -> Result<Option<crate::maps::FnatKey>, XdpError> {
        Ok(self.fnat_fwd.get(key).copied())
    }
    fn remove_fnat(&mut self, key: &FlowKey, rev: &crate::maps::FnatKey) -> Result<(), XdpError> {
        self.write("fnat_rev")?;
        self.fnat_fwd.remove(key);
        self.fnat_rev.remove(rev);
        Ok(())
    }
    fn fnat_stats(&mut self, index: u32) -> Result<crate::maps::FnatStats, XdpError> {
        Ok(self.fnat_stats.get(&index).copied().unwrap_or_default())
    }
    fn reset_fnat_stats(&mut self, index: u32) -> Result<(), XdpError> {
        Self::bound("fnat_stats", index, self.services_len)?;
        self.write("fnat_stats")?;
        self.fnat_stats.remove(&index);
        Ok(())
    }
    fn set_quic_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.write("quic_services")?;
        if !self.quic_services.contains_key(key)
            && self.quic_services.len() >= crate::quic_lb::QUIC_SVCS_MAX as usize
        {
            return Err(map_error("quic_services", full()));
        }
        self.quic_services.insert(*key, index);
        Ok(())
    }
    fn remove_quic_service(&mut self, key: &SvcKey) -> Result<(), XdpError> {
        self.write("quic_services")?;
        self.quic_services
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| map_error("quic_services", MapError::KeyNotFound))
    }
    fn set_quic_lb(&mut self, index: u32, value: &crate::quic_lb::QuicSvc) -> Result<(), XdpError> {
        self.write("quic_lb")?;
        if !self.quic_lb.contains_key(&index)
            && self.quic_lb.len() >= crate::quic_lb::QUIC_SVCS_MAX as usize
        {
            return Err(map_error("quic_lb", full()));
        }
        self.quic_lb.insert(index, *value);
        Ok(())
    }
    fn remove_quic_lb(&mut self, index: u32) -> Result<(), XdpError> {
        self.write("quic_lb")?;
        self.quic_lb.remove(&index);
        Ok(())
    }
    fn set_quic_sid(
        &mut self,
        key: &crate::quic_lb::QuicSidKey,
        dest: u32,
    ) -> Result<(), XdpError> {
        self.write("quic_sids")?;
        if !self.quic_sids.contains_key(key)
            && self.quic_sids.len() >= crate::quic_lb::QUIC_SIDS_MAX as usize
        {
            return Err(map_error("quic_sids", full()));
        }
        self.quic_sids.insert(*key, dest);
        Ok(())
    }
    fn remove_quic_sid(&mut self, key: &crate::quic_lb::QuicSidKey) -> Result<(), XdpError> {
        self.write("quic_sids")?;
        self.quic_sids.remove(key);
        Ok(())
    }
    fn quic_stats(&mut self, index: u32) -> Result<crate::quic_lb::QuicStats, XdpError> {
        Self::bound("quic_stats", index, self.services_len)?;
        Ok(self.quic_stats.get(&index).copied().unwrap_or_default())
    }
    fn fnat_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(super::ops::FnatEntry),
    ) -> Result<bool, XdpError> {
        use super::ops::FnatEntry;
        let mut given = 0usize;
        if cursor.table == 0 {
            let done = mem_page(&self.fnat_rev, cursor, max, &mut |k, v| {
                given += 1;
                f(FnatEntry::Rev(*k, *v))
            });
            if !done {
                return Ok(false);
            }
            // mem_page reset the cursor: the fwd table next.
            cursor.table = 1;
            if given >= max {
                return Ok(false);
            }
        }
        let done = mem_page(&self.fnat_fwd, cursor, max - given, &mut |k, v| {
            f(FnatEntry::Fwd(*k, *v))
        });
        if !done {
            cursor.table = 1;
        }
        Ok(done)
    }
    fn fnat_rev(
        &mut self,
        key: &crate::maps::FnatKey,
    ) -> Result<Option<crate::maps::Fnat>, XdpError> {
        Ok(self.fnat_rev.get(key).copied())
    }
    fn claim_fnat(
        &mut self,
        key: &crate::maps::FnatKey,
        value: &crate::maps::Fnat,
    ) -> Result<bool, XdpError> {
        self.write("fnat_rev")?;
        if self.fnat_rev.contains_key(key) {
            return Ok(false);
        }
        self.fnat_rev.insert(*key, *value);
        Ok(true)
    }
    fn set_fnat_fwd(&mut self, flow: &FlowKey, rev: &crate::maps::FnatKey) -> Result<(), XdpError> {
        self.write("fnat_fwd")?;
        self.fnat_fwd.insert(*flow, *rev);
        Ok(())
    }
    fn remove_fnat_rev(&mut self, key: &crate::maps::FnatKey) -> Result<(), XdpError> {
        self.write("fnat_rev")?;
        self.fnat_rev.remove(key);
        Ok(())
    }
    fn remove_fnat_fwd(&mut self, flow: &FlowKey) -> Result<(), XdpError> {
        self.write("fnat_fwd")?;
        self.fnat_fwd.remove(flow);
        Ok(())
    }
    fn has_flow(&mut self, key: &FlowKey) -> Result<bool, XdpError> {
        Ok(self.flows.contains_key(key))
    }
    fn set_persist(&mut self, key: &PersistKey, value: &Persist) -> Result<(), XdpError> {
        self.write("persist")?;
        self.persist.insert(*key, *value);
        Ok(())
    }
    fn set_dest_conns(&mut self, index: u32, conns: &DestConns) -> Result<(), XdpError> {
        Self::bound("dest_conns", index, maps::MAX_DESTS)?;
        self.conns_writes += 1;
        self.write_elem("dest_conns", index)?;
        self.dest_conns.insert(index, *conns);
        Ok(())
    }
    fn dest_conns_of(
        &mut self,
        indexes: &[u32],
    ) -> Result<std::collections::HashMap<u32, DestConns>, XdpError> {
        self.conns_reads += 1;
        indexes
            .iter()
            .map(|&i| {
                Self::bound("dest_conns", i, maps::MAX_DESTS)?;
                Ok((i, self.dest_conns.get(&i).copied().unwrap_or_default()))
            })
            .collect()
    }
    /// Pages of the table in key order (the kernel's order is its
    /// buckets'; any stable order shows the same walk).
    fn flows_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&FlowKey, &Flow),
    ) -> Result<bool, XdpError> {
        Ok(mem_page(&self.flows, cursor, max, f))
    }
    fn clock(&mut self) -> Result<(u64, u32), XdpError> {
        Ok((self.jiffies, self.hz))
    }
    fn read_installed(&mut self) -> Result<super::ops::Installed, XdpError> {
        let list = |table: &HashMap<SvcKey, u32>| {
            let mut services: Vec<_> = table
                .iter()
                .map(|(k, &i)| {
                    let svc = self.svc_info.get(&i).copied().unwrap_or_default();
                    (*k, i, svc, self.svc_data(i).0)
                })
                .collect();
            services.sort_by_key(|s| s.1);
            services
        };
        let services = list(&self.services);
        let quic_services = list(&self.quic_services);
        let mut quic_sids: Vec<_> = self.quic_sids.iter().map(|(k, d)| (*k, *d)).collect();
        quic_sids.sort_by_key(|(k, _)| (k.svc, k.len, k.sid));
        let mut dests: Vec<(u32, Dest)> = self
            .dests
            .iter()
            .filter(|(_, d)| **d != Dest::default())
            .map(|(i, d)| (*i, *d))
            .collect();
        dests.sort_by_key(|d| d.0);
        let fnat_pools = services
            .iter()
            .chain(&quic_services)
            .filter_map(|(_, i, _, _)| {
                let p = self.fnat_pools.get(i).filter(|p| p.count > 0)?;
                Some((*i, *p))
            })
            .collect();
        Ok(super::ops::Installed {
            services,
            quic_services,
            quic_sids,
            fnat_pools,
            dests,
            config: self.config,
        })
    }
    fn slots_len(&self) -> u32 {
        self.slots_len
    }
    fn services_len(&self) -> u32 {
        self.services_len
    }
}

/// A page of an in-memory table in key order (the kernel's order is its
/// buckets'; any stable order shows the same walk): true at the end.
fn mem_page<K: Ord + std::hash::Hash, V>(
    table: &HashMap<K, V>,
    cursor: &mut WalkCursor,
    max: usize,
    f: &mut dyn FnMut(&K, &V),
) -> bool {
    let mut entries: Vec<(&K, &V)> = table.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let end = cursor.pos.saturating_add(max).min(entries.len());
    for (k, v) in entries.get(cursor.pos..end).unwrap_or_default() {
        f(k, v);
    }
    if end >= entries.len() {
        *cursor = WalkCursor::default();
        return true;
    }
    cursor.pos = end;
    false
}

/// The kernel's answer to an insert into a full hash map (`E2BIG`).
fn full() -> MapError {
    MapError::Syscall {
        call: "bpf_map_update_elem",
        source: std::io::Error::from_raw_os_error(7),
    }
}
