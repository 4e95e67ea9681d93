//! [`KernelMaps`]: the loaded director program behind [`MapOps`].

use std::collections::HashMap;

use rvs_sys::bpf::Error as MapError;

use rvs_sys::bpf::{BATCH_TOKEN, BatchToken};

use super::ops::{CONNS_BATCH, MapOps, WalkCursor, map_error};
use super::typed::Plain;
use crate::maps::{
    Config, Dest, DestConns, Flow, Flow4Key, FlowKey, Nat, NatKey, Persist, PersistKey, Stats, Svc,
    SvcKey,
};
use crate::{Loaded, XdpError};

/// The loaded director program behind [`MapOps`].
#[derive(Debug)]
pub struct KernelMaps {
    director: Loaded,
    slots: u32,
    services: u32,
}

impl KernelMaps {
    /// Load the director with `opts` (flow table and slots sizes); not
    /// attached yet.
    pub fn load(opts: &crate::LoadOptions) -> Result<Self, XdpError> {
        Self::load_object(crate::Object::Director, opts)
    }

    /// [`KernelMaps::load`] of `object` (the director or a variant with
    /// its maps).
    pub fn load_object(object: crate::Object, opts: &crate::LoadOptions) -> Result<Self, XdpError> {
        Ok(KernelMaps {
            director: Loaded::load(object, opts)?,
            slots: opts.slots,
            services: opts.max_services,
        })
    }

    /// Maps of a director loaded elsewhere ([`crate::pin::load_director`])
    /// with `opts`' sizes.
    pub fn from_loaded(director: Loaded, opts: &crate::LoadOptions) -> Self {
        KernelMaps {
            director,
            slots: opts.slots,
            services: opts.max_services,
        }
    }

    /// The director program (to attach it, or to look at its maps).
    pub fn director(&mut self) -> &mut Loaded {
        &mut self.director
    }

    /// `services[key]`, if present (for checks and tools).
    pub fn read_service(&mut self, key: &SvcKey) -> Result<Option<u32>, XdpError> {
        match self.director.hash::<SvcKey, u32>("services")?.get(key, 0) {
            Ok(i) => Ok(Some(i)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_error("services", e)),
        }
    }

    /// `svc_info[index]`.
    pub fn read_svc(&mut self, index: u32) -> Result<Svc, XdpError> {
        self.director
            .array::<Svc>("svc_info")?
            .get(&index, 0)
            .map_err(|e| map_error("svc_info", e))
    }

    /// `dests[index]`.
    pub fn read_dest(&mut self, index: u32) -> Result<Dest, XdpError> {
        self.director
            .array::<Dest>("dests")?
            .get(&index, 0)
            .map_err(|e| map_error("dests", e))
    }

    /// `slots[offset..offset + len]`.
    pub fn read_slots(&mut self, offset: u32, len: u32) -> Result<Vec<u32>, XdpError> {
        let a = self.director.array::<u32>("slots")?;
        (offset..offset.saturating_add(len))
            .map(|i| a.get(&i, 0).map_err(|e| map_error("slots", e)))
            .collect()
    }

    /// `config[0]`.
    pub fn read_config(&mut self) -> Result<Config, XdpError> {
        self.director
            .array::<Config>("config")?
            .get(&0, 0)
            .map_err(|e| map_error("config", e))
    }
}

impl KernelMaps {
    /// One hash table (`flows4` with [`Flow4Key`], `flows` with
    /// [`FlowKey`], `persist`) in batches of up to 4096 entries per syscall
    /// (`BPF_MAP_LOOKUP_BATCH` through rvs-sys): a
    /// report reads a large table in a few hundred syscalls instead of two
    /// per entry. Resumes from `token` (`None`: the start) and stops after
    /// about `max` entries: `Ok(Some(next token))`, or `Ok(None)` at the end.
    fn batched<K: Plain, V: Plain>(
        &mut self,
        name: &'static str,
        token: Option<BatchToken>,
        max: usize,
        f: &mut dyn FnMut(&K, &V),
    ) -> std::io::Result<Option<BatchToken>> {
        let Ok(map) = self.director.hash::<K, V>(name) else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        let map = map.raw();
        const CHUNK: usize = 4096;
        let (klen, vlen) = (map.key_len(), map.value_len());
        let mut keys = vec![0u8; CHUNK * klen];
        let mut values = vec![0u8; CHUNK * vlen];
        let mut token_in = token;
        let mut token_out = [0u8; BATCH_TOKEN];
        let mut given = 0usize;
        loop {
            let b = map.lookup_batch(token_in.as_ref(), &mut token_out, &mut keys, &mut values)?;
            for (k, v) in keys
                .chunks_exact(klen)
                .zip(values.chunks_exact(vlen))
                .take(b.count)
            {
                if let (Ok(k), Ok(v)) = (K::read_from_bytes(k), V::read_from_bytes(v)) {
                    f(&k, &v);
                }
            }
            given += b.count;
            if b.end {
                return Ok(None);
            }
            token_in = Some(token_out);
            if given >= max {
                return Ok(token_in);
            }
        }
    }
}

impl KernelMaps {
    /// `dest_conns[0..=top]` in batches of [`CONNS_BATCH`] elements
    /// (`BPF_MAP_LOOKUP_BATCH` through rvs-sys): `EINVAL` on kernels
    /// without batch operations on arrays. Shorter than asked only if the
    /// array is (indexes past its end are then refused by the caller).
    fn conns_batched(&mut self, top: u32) -> std::io::Result<Vec<DestConns>> {
        let Ok(m) = self.director.map("dest_conns") else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        let map = rvs_sys::bpf::BpfMap::new(m.fd())?;
        let (klen, vlen) = (map.key_len(), map.value_len());
        if klen != size_of::<u32>() || vlen != size_of::<DestConns>() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("dest_conns: {klen}-byte keys and {vlen}-byte values"),
            ));
        }
        let n = top as usize + 1;
        let chunk = n.min(CONNS_BATCH);
        let mut keys = vec![0u8; chunk * klen];
        let mut values = vec![0u8; chunk * vlen];
        let mut out = Vec::with_capacity(n);
        let mut token_in: Option<BatchToken> = None;
        let mut token_out = [0u8; BATCH_TOKEN];
        while out.len() < n {
            let want = (n - out.len()).min(chunk);
            let b = map.lookup_batch(
                token_in.as_ref(),
                &mut token_out,
                &mut keys[..want * klen],
                &mut values[..want * vlen],
            )?;
            for v in values.chunks_exact(vlen).take(b.count) {
                // The sizes were checked above.
                let c = <DestConns as zerocopy::FromBytes>::read_from_bytes(v).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "dest_conns: a value of another size",
                    )
                })?;
                out.push(c);
            }
            if b.end || b.count == 0 {
                break;
            }
            token_in = Some(token_out);
        }
        out.truncate(n);
        Ok(out)
    }

    /// `dest_conns[i]` for each of `indexes`, one lookup each (kernels
    /// without batch operations on arrays).
    fn conns_one_by_one(&mut self, indexes: &[u32]) -> Result<HashMap<u32, DestConns>, XdpError> {
        indexes
            .iter()
            .map(|&i| Ok((i, self.director.dest_conns(i)?)))
            .collect()
    }

    /// About `max` entries of the hash table `name` from `token` on,
    /// batched: the next token, `None` at the end. On kernels without
    /// batch operations on LRU hashes, a key walk of the whole table (one
    /// page).
    fn page_in<K: Plain, V: Plain>(
        &mut self,
        name: &'static str,
        token: Option<BatchToken>,
        max: usize,
        f: &mut dyn FnMut(&K, &V),
    ) -> Result<Option<BatchToken>, XdpError> {
        match self.batched::<K, V>(name, token, max, f) {
            Ok(next) => return Ok(next),
            // Kernels without batch operations on this map type: walk keys.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => {
                return Err(map_error(
                    name,
                    MapError::Syscall {
                        call: "bpf_map_lookup_batch",
                        source: e,
                    },
                ));
            }
        }
        let flows = self.director.hash::<K, V>(name)?;
        for item in flows.iter() {
            match item {
                Ok((k, v)) => f(&k, &v),
                // An entry evicted or deleted between the key walk and the
                // lookup: skip it.
                Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(map_error(name, e)),
            }
        }
        Ok(None)
    }
}

impl MapOps for KernelMaps {
    fn set_own_macs(&mut self, macs: &crate::own_mac::OwnMacs) -> Result<(), XdpError> {
        self.director.set_own_macs(macs)
    }
    fn set_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.director.set_service(key, index)
    }
    fn remove_service(&mut self, key: &SvcKey) -> Result<(), XdpError> {
        self.director.remove_service(key)
    }
    fn set_svc(&mut self, index: u32, svc: &Svc) -> Result<(), XdpError> {
        self.director.set_svc(index, svc)
    }
    fn set_cursor(&mut self, index: u32, value: u64) -> Result<(), XdpError> {
        self.director.set_cursor(index, value)
    }
    fn cursor(&mut self, index: u32) -> Result<u64, XdpError> {
        self.director.cursor(index)
    }
    fn set_slots(&mut self, offset: u32, values: &[u32]) -> Result<(), XdpError> {
        self.director.set_slots(offset, values)
    }
    fn set_dest(&mut self, index: u32, dest: &Dest) -> Result<(), XdpError> {
        self.director.set_dest(index, dest)
    }
    fn set_config(&mut self, config: &Config) -> Result<(), XdpError> {
        self.director.set_config(config)
    }
    fn dest_stats(&mut self, index: u32) -> Result<Stats, XdpError> {
        self.director.dest_stats(index)
    }
    fn svc_flood(&mut self, index: u32) -> Result<crate::maps::SvcFlood, XdpError> {
        self.director.svc_flood(index)
    }
    fn reset_svc_flood(&mut self, index: u32) -> Result<(), XdpError> {
        self.director.reset_svc_flood(index)
    }
    fn take_missing_hops(&mut self, max: usize) -> Result<Vec<std::net::IpAddr>, XdpError> {
        self.director.take_missing_hops(max)
    }
    fn missing_hops_full(&mut self) -> Result<u64, XdpError> {
        self.director.missing_hops_full()
    }
    fn remove_flow(&mut self, key: &FlowKey) -> Result<(), XdpError> {
        self.director.remove_flow(key)
    }
    fn persist_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&PersistKey, &Persist),
    ) -> Result<bool, XdpError> {
        let next = self.page_in::<PersistKey, Persist>("persist", cursor.token, max, f)?;
        cursor.token = next;
        if next.is_some() {
            return Ok(false);
        }
        *cursor = WalkCursor::default();
        Ok(true)
    }
    fn set_flow(&mut self, key: &FlowKey, flow: &Flow) -> Result<(), XdpError> {
        self.director.set_flow(key, flow)
    }
    fn set_nat(&mut self, key: &NatKey, nat: &Nat) -> Result<(), XdpError> {
        self.director.set_nat(key, nat)
    }
    fn remove_nat(&mut self, key: &NatKey) -> Result<(), XdpError> {
        self.director.remove_nat(key)
    }
    fn set_fnat_pool(&mut self, index: u32, pool: &crate::maps::FnatPool) -> Result<(), XdpError> {
        self.director.set_fnat_pool(index, pool)
    }
    fn set_fnat_laddr(&mut self, addr: std::net::IpAddr, present: bool) -> Result<(), XdpError> {
        if present {
            self.director.add_fnat_laddr(addr)
        } else {
            self.director.remove_fnat_laddr(addr)
        }
    }
    fn set_src_range(&mut self, key: &crate::maps::SrcKey, present: bool) -> Result<(), XdpError> {
        self.director.set_src_range(key, present)
    }
    fn src_ranges_of(&mut self, svc: u32) -> Result<Vec<crate::maps::SrcKey>, XdpError> {
        self.director.src_ranges_of(svc)
    }
    fn fnat_of(&mut self, key: &FlowKey) -> Result<Option<crate::maps::FnatKey>, XdpError> {
        self.director.fnat_of(key)
    }
    fn remove_fnat(&mut self, key: &FlowKey, rev: &crate::maps::FnatKey) -> Result<(), XdpError> {
        self.director.remove_fnat_of(key, rev)
    }
    fn fnat_stats(&mut self, index: u32) -> Result<crate::maps::FnatStats, XdpError> {
        self.director.fnat_stats(index)
    }
    fn reset_fnat_stats(&mut self, index: u32) -> Result<(), XdpError> {
        self.director.reset_fnat_stats(index)
    }
    fn set_quic_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.director.set_quic_service(key, index)
    }
    fn remove_quic_service(&mut self, key: &SvcKey) -> Result<(), XdpError> {
        self.director.remove_quic_service(key)
    }
    fn set_quic_lb(&mut self, index: u32, value: &crate::quic_lb::QuicSvc) -> Result<(), XdpError> {
        self.director.set_quic_lb(index, value)
    }
    fn remove_quic_lb(&mut self, index: u32) -> Result<(), XdpError> {
        self.director.remove_quic_lb(index)
    }
    fn set_quic_sid(
        &mut self,
        key: &crate::quic_lb::QuicSidKey,
        dest: u32,
    ) -> Result<(), XdpError> {
        self.director.set_quic_sid(key, dest)
    }
    fn remove_quic_sid(&mut self, key: &crate::quic_lb::QuicSidKey) -> Result<(), XdpError> {
        self.director.remove_quic_sid(key)
    }
    fn quic_stats(&mut self, index: u32) -> Result<crate::quic_lb::QuicStats, XdpError> {
        self.director.quic_stats(index)
    }
    fn fnat_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(super::ops::FnatEntry),
    ) -> Result<bool, XdpError> {
        use super::ops::FnatEntry;
        use crate::maps::{Fnat, FnatKey};
        let mut given = 0usize;
        while cursor.table < 2 {
            let left = max.saturating_sub(given);
            let next = if cursor.table == 0 {
                self.page_in::<FnatKey, Fnat>("fnat_rev", cursor.token, left, &mut |k, v| {
                    given += 1;
                    f(FnatEntry::Rev(*k, *v))
                })?
            } else {
                self.page_in::<FlowKey, FnatKey>("fnat_fwd", cursor.token, left, &mut |k, v| {
                    given += 1;
                    f(FnatEntry::Fwd(*k, *v))
                })?
            };
            cursor.token = next;
            if next.is_some() {
                return Ok(false);
            }
            cursor.table += 1;
            if given >= max && cursor.table < 2 {
                return Ok(false);
            }
        }
        *cursor = WalkCursor::default();
        Ok(true)
    }
    fn fnat_rev(
        &mut self,
        key: &crate::maps::FnatKey,
    ) -> Result<Option<crate::maps::Fnat>, XdpError> {
        self.director.fnat(key)
    }
    fn claim_fnat(
        &mut self,
        key: &crate::maps::FnatKey,
        value: &crate::maps::Fnat,
    ) -> Result<bool, XdpError> {
        self.director.claim_fnat(key, value)
    }
    fn set_fnat_fwd(&mut self, flow: &FlowKey, rev: &crate::maps::FnatKey) -> Result<(), XdpError> {
        self.director.set_fnat_fwd(flow, rev)
    }
    fn remove_fnat_rev(&mut self, key: &crate::maps::FnatKey) -> Result<(), XdpError> {
        self.director.remove_fnat_rev(key)
    }
    fn remove_fnat_fwd(&mut self, flow: &FlowKey) -> Result<(), XdpError> {
        self.director.remove_fnat_fwd(flow)
    }
    fn has_flow(&mut self, key: &FlowKey) -> Result<bool, XdpError> {
        Ok(self.director.flow(key)?.is_some())
    }
    fn set_persist(&mut self, key: &PersistKey, value: &Persist) -> Result<(), XdpError> {
        self.director
            .hash::<PersistKey, Persist>("persist")?
            .insert(key, value, 0)
            .map_err(|e| map_error("persist", e))
    }
    fn remove_persist(&mut self, key: &PersistKey) -> Result<(), XdpError> {
        match self
            .director
            .hash::<PersistKey, Persist>("persist")?
            .remove(key)
        {
            Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(map_error("persist", e)),
        }
    }
    fn set_dest_conns(&mut self, index: u32, conns: &DestConns) -> Result<(), XdpError> {
        self.director.set_dest_conns(index, conns)
    }
    fn dest_conns_of(&mut self, indexes: &[u32]) -> Result<HashMap<u32, DestConns>, XdpError> {
        let Some(&top) = indexes.iter().max() else {
            return Ok(HashMap::new());
        };
        match self.conns_batched(top) {
            Ok(all) => indexes
                .iter()
                .map(|&i| match all.get(i as usize) {
                    Some(c) => Ok((i, *c)),
                    None => Err(map_error(
                        "dest_conns",
                        MapError::OutOfBounds {
                            index: i,
                            max_entries: all.len() as u32,
                        },
                    )),
                })
                .collect(),
            // Kernels before 5.6 (no BPF_MAP_LOOKUP_BATCH, or none on
            // arrays): one lookup per index.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.conns_one_by_one(indexes),
            Err(e) => Err(map_error(
                "dest_conns",
                MapError::Syscall {
                    call: "bpf_map_lookup_batch",
                    source: e,
                },
            )),
        }
    }
    /// Both flow tables, then both embryonic tables (TCP flows between
    /// their SYN and their handshake's ACK, listed like IPVS lists its
    /// SYN_RECV connections): the IPv4 flows of `flows4` (as
    /// [`FlowKey`]s), the IPv6 flows of `flows`, then `embryonic4` and
    /// `embryonic` the same way.
    fn flows_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&FlowKey, &Flow),
    ) -> Result<bool, XdpError> {
        const TABLES: [&str; 4] = ["flows4", "flows", "embryonic4", "embryonic"];
        let mut given = 0usize;
        while let Some(&name) = TABLES.get(usize::from(cursor.table)) {
            // What the tables before left of this page (at least one batch).
            let left = max.saturating_sub(given);
            let next = if cursor.table.is_multiple_of(2) {
                self.page_in::<Flow4Key, Flow>(name, cursor.token, left, &mut |k, v| {
                    given += 1;
                    f(&k.widen(), v)
                })?
            } else {
                self.page_in::<FlowKey, Flow>(name, cursor.token, left, &mut |k, v| {
                    given += 1;
                    f(k, v)
                })?
            };
            cursor.token = next;
            if next.is_some() {
                return Ok(false);
            }
            cursor.table += 1;
            if given >= max && usize::from(cursor.table) < TABLES.len() {
                return Ok(false);
            }
        }
        *cursor = WalkCursor::default();
        Ok(true)
    }
    fn clock(&mut self) -> Result<(u64, u32), XdpError> {
        Ok((crate::jiffies_now()?, crate::kernel_hz()?))
    }
    fn slots_len(&self) -> u32 {
        self.slots
    }
    fn services_len(&self) -> u32 {
        self.services
    }
    fn read_installed(&mut self) -> Result<super::ops::Installed, XdpError> {
        let mut lists = Vec::new();
        for name in ["services", "quic_services"] {
            let mut keys = Vec::new();
            for r in self.director.hash::<SvcKey, u32>(name)?.iter() {
                match r {
                    Ok(kv) => keys.push(kv),
                    Err(MapError::KeyNotFound) => {}
                    Err(e) => return Err(map_error(name, e)),
                }
            }
            let mut services = Vec::with_capacity(keys.len());
            for (k, i) in keys {
                if i >= self.services {
                    // Pinned by an rvsd with a larger --max-services: its
                    // scheduling data was not carried into the smaller
                    // arrays. Dropped (the key too, or the program would
                    // look up an index beyond them); the configuration
                    // adds the service anew at an index that fits.
                    tracing::warn!(
                        map = name,
                        index = i,
                        max_services = self.services,
                        "a pinned service's index is beyond --max-services: not adopted, its \
                         flows are lost"
                    );
                    self.director
                        .hash::<SvcKey, u32>(name)?
                        .remove(&k)
                        .map_err(|e| map_error(name, e))?;
                    continue;
                }
                let svc = self.read_svc(i)?;
                let list = self.read_slots(svc.dests_off, svc.dests_len)?;
                services.push((k, i, svc, list));
            }
            services.sort_by_key(|s| s.1);
            lists.push(services);
        }
        let quic_services = lists.pop().unwrap_or_default();
        let services = lists.pop().unwrap_or_default();
        let mut quic_sids = Vec::new();
        for r in self
            .director
            .hash::<crate::quic_lb::QuicSidKey, u32>("quic_sids")?
            .iter()
        {
            match r {
                Ok(kv) => quic_sids.push(kv),
                Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(map_error("quic_sids", e)),
            }
        }
        let mut dests = Vec::new();
        {
            let a = self.director.array::<Dest>("dests")?;
            for i in 0..crate::maps::MAX_DESTS {
                let d = a.get(&i, 0).map_err(|e| map_error("dests", e))?;
                if d != Dest::default() {
                    dests.push((i, d));
                }
            }
        }
        let mut fnat_pools = Vec::new();
        {
            let a = self.director.array::<crate::maps::FnatPool>("fnat_pools")?;
            for (_, i, _, _) in services.iter().chain(&quic_services) {
                let p = a.get(i, 0).map_err(|e| map_error("fnat_pools", e))?;
                if p.count > 0 {
                    fnat_pools.push((*i, p));
                }
            }
        }
        Ok(super::ops::Installed {
            services,
            quic_services,
            quic_sids,
            fnat_pools,
            dests,
            config: self.read_config()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::KernelMaps;
    use crate::maps::{DestConns, MAX_DESTS, MapOps};

    /// `dest_conns` read in batches (three of them here: indexes on both
    /// sides of a batch's end, one past two) gives what was written, as
    /// the one-by-one reads of kernels without batch operations on arrays
    /// do; an index past the array is an error, not a zero.
    #[test]
    fn dest_conns_are_read_in_batches_as_one_by_one() {
        let test = "dest_conns_are_read_in_batches_as_one_by_one";
        if !rvs_testbed::require_root(test, "loading BPF programs needs root") {
            return;
        }
        if let Err(e) = crate::Object::Director.bytes() {
            rvs_testbed::skip_or_fail(test, e);
            return;
        }
        let mut m = KernelMaps::load(&crate::LoadOptions {
            flow_table_size: 1024,
            slots: 1 << 12,
            ..crate::LoadOptions::default()
        })
        .expect("load");
        let c = |active, inactive| DestConns { active, inactive };
        let mut want = HashMap::from([
            (1, c(1, 2)),
            (4095, c(3, 4)),
            (4096, c(5, 6)),
            (9000, c(7, 8)),
        ]);
        for (i, v) in &want {
            m.set_dest_conns(*i, v).expect("set");
        }
        want.insert(2, c(0, 0));
        let indexes: Vec<u32> = want.keys().copied().collect();
        let all = m.conns_batched(9000).expect("batched");
        assert_eq!(all.len(), 9001);
        for (i, v) in &want {
            assert_eq!(all[*i as usize], *v, "index {i}");
        }
        assert_eq!(m.dest_conns_of(&indexes).expect("dest_conns_of"), want);
        assert_eq!(m.conns_one_by_one(&indexes).expect("one by one"), want);
        assert_eq!(
            m.dest_conns_of(&[MAX_DESTS - 1]).expect("the last"),
            HashMap::from([(MAX_DESTS - 1, c(0, 0))])
        );
        assert!(m.dest_conns_of(&[MAX_DESTS]).is_err(), "past the array");
    }

    /// A region of `slots` written in batches (5,000 slots: across a
    /// batch's end) reads back as written, next to one written one element
    /// at a time (kernels without batch operations on arrays), and the
    /// public path takes the batches here; a region past the array is an
    /// error.
    #[test]
    fn slots_are_written_in_batches_as_one_by_one() {
        let test = "slots_are_written_in_batches_as_one_by_one";
        if !rvs_testbed::require_root(test, "loading BPF programs needs root") {
            return;
        }
        if let Err(e) = crate::Object::Director.bytes() {
            rvs_testbed::skip_or_fail(test, e);
            return;
        }
        let mut m = KernelMaps::load(&crate::LoadOptions {
            flow_table_size: 1024,
            slots: 1 << 14,
            ..crate::LoadOptions::default()
        })
        .expect("load");
        let values: Vec<u32> = (0..5000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        m.director
            .set_slots_batched(7, &values)
            .expect("batched (kernels from 5.6 on)");
        assert_eq!(m.read_slots(7, 5000).expect("read"), values);
        assert_eq!(m.read_slots(6, 1).expect("read"), [0], "nothing before");
        assert_eq!(m.read_slots(5007, 1).expect("read"), [0], "nothing after");
        let other: Vec<u32> = values.iter().map(|v| !v).collect();
        m.director
            .set_slots_one_by_one(6000, &other)
            .expect("one by one");
        assert_eq!(m.read_slots(6000, 5000).expect("read"), other);
        m.set_slots(11_000, &values).expect("set_slots");
        assert_eq!(m.read_slots(11_000, 5000).expect("read"), values);
        assert!(
            m.set_slots((1 << 14) - 10, &values).is_err(),
            "past the array"
        );
    }
}
