//! [`KernelMaps`]: the loaded director program behind [`MapOps`].

use aya::maps::MapError;

use super::ops::{MapOps, WalkCursor, map_error};
use crate::maps::{
    Config, Dest, DestConns, Flow, Flow4Key, FlowKey, Persist, PersistKey, Stats, Svc, SvcKey,
};
use crate::{Loaded, XdpError};

/// The loaded director program behind [`MapOps`].
#[derive(Debug)]
pub struct KernelMaps {
    director: Loaded,
    slots: u32,
}

impl KernelMaps {
    /// Load the director with `opts` (flow table and slots sizes); not
    /// attached yet.
    pub fn load(opts: &crate::LoadOptions) -> Result<Self, XdpError> {
        Ok(KernelMaps {
            director: Loaded::load(crate::Object::Director, opts)?,
            slots: opts.slots,
        })
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

/// `union bpf_attr` as `BPF_MAP_LOOKUP_BATCH` reads it.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

impl KernelMaps {
    /// One hash table (`flows4` with [`Flow4Key`], `flows` with
    /// [`FlowKey`], `persist`) in batches of up to 4096 entries per syscall
    /// (`BPF_MAP_LOOKUP_BATCH`; aya 0.14 has no wrapper): a report reads a
    /// large table in a few hundred syscalls instead of two per entry.
    /// Resumes from `token` (`None`: the start) and stops after about
    /// `max` entries: `Ok(Some(next token))`, or `Ok(None)` at the end.
    fn batched<K: Copy + Default, V: Copy + Default>(
        &mut self,
        name: &'static str,
        token: Option<[u8; 64]>,
        max: usize,
        f: &mut dyn FnMut(&K, &V),
    ) -> std::io::Result<Option<[u8; 64]>> {
        use std::os::fd::{AsFd, AsRawFd};
        let Ok(map) = self.director.map(name) else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        let fd = match map {
            aya::maps::Map::LruHashMap(d) | aya::maps::Map::HashMap(d) => {
                d.fd().as_fd().as_raw_fd()
            }
            _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
        };
        const CHUNK: usize = 4096;
        let mut keys = vec![K::default(); CHUNK];
        let mut values = vec![V::default(); CHUNK];
        // Batch tokens are map-specific; a key's size is always enough.
        let mut token_in = token.unwrap_or([0u8; 64]);
        let mut token_out = [0u8; 64];
        let mut first = token.is_none();
        let mut given = 0usize;
        loop {
            let mut attr = BatchAttr {
                in_batch: if first { 0 } else { token_in.as_ptr() as u64 },
                out_batch: token_out.as_mut_ptr() as u64,
                keys: keys.as_mut_ptr() as u64,
                values: values.as_mut_ptr() as u64,
                count: CHUNK as u32,
                map_fd: fd as u32,
                ..BatchAttr::default()
            };
            // SAFETY: `attr` describes buffers that live across the call:
            // `keys` and `values` hold `count` elements of the map's key and
            // value sizes (the layout test checks them against the BTF),
            // the tokens are larger than any batch token; the kernel writes
            // at most `count` elements and updates `count`.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    BPF_MAP_LOOKUP_BATCH,
                    &mut attr as *mut BatchAttr,
                    size_of::<BatchAttr>() as libc::c_uint,
                )
            };
            let err = (rc < 0).then(std::io::Error::last_os_error);
            let n = (attr.count as usize).min(CHUNK);
            if err.is_none() || err.as_ref().and_then(|e| e.raw_os_error()) == Some(libc::ENOENT) {
                for (k, v) in keys[..n].iter().zip(&values[..n]) {
                    f(k, v);
                }
                given += n;
            }
            match err {
                None => {}
                // The end of the table.
                Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
                Some(e) => return Err(e),
            }
            token_in = token_out;
            first = false;
            if given >= max {
                return Ok(Some(token_in));
            }
        }
    }
}

impl KernelMaps {
    /// About `max` entries of the hash table `name` from `token` on,
    /// batched: the next token, `None` at the end. On kernels without
    /// batch operations on LRU hashes, a key walk of the whole table (one
    /// page).
    fn page_in<K: aya::Pod + Default, V: aya::Pod + Default>(
        &mut self,
        name: &'static str,
        token: Option<[u8; 64]>,
        max: usize,
        f: &mut dyn FnMut(&K, &V),
    ) -> Result<Option<[u8; 64]>, XdpError> {
        match self.batched::<K, V>(name, token, max, f) {
            Ok(next) => return Ok(next),
            // Kernels without batch operations on this map type: walk keys.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => {
                return Err(map_error(
                    name,
                    MapError::SyscallError(aya::sys::SyscallError {
                        call: "bpf_map_lookup_batch",
                        io_error: e,
                    }),
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
    /// Both flow tables: the IPv4 flows of `flows4` (as [`FlowKey`]s),
    /// then the IPv6 flows of `flows`.
    fn flows_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&FlowKey, &Flow),
    ) -> Result<bool, XdpError> {
        let mut given = 0usize;
        if cursor.table == 0 {
            let next =
                self.page_in::<Flow4Key, Flow>("flows4", cursor.token, max, &mut |k, v| {
                    given += 1;
                    f(&k.widen(), v)
                })?;
            cursor.token = next;
            if next.is_some() {
                return Ok(false);
            }
            cursor.table = 1;
        }
        // What the IPv4 table left of this page (at least one batch).
        let next =
            self.page_in::<FlowKey, Flow>("flows", cursor.token, max.saturating_sub(given), f)?;
        cursor.token = next;
        if next.is_some() {
            return Ok(false);
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
}
