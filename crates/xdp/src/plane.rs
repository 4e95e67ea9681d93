//! The XDP data plane's control side: [`Plane`] turns every accepted
//! [`Command`] into map writes and reports what the program carried back to
//! the control plane's director.
//!
//! # Map writes
//! Every write goes through [`MapOps`], one small trait in front of the BPF
//! syscalls (the seam aya itself puts in front of its syscalls for its
//! tests): [`KernelMaps`] is the loaded program, [`MemMaps`] an in-memory
//! implementation with the same bounds and key rules, so the whole sync
//! logic is unit-tested without a kernel, including failures injected at
//! every write.
//!
//! * Services get an index in `svc_info` (from a free list); the `services`
//!   hash maps the (protocol, VIP, port) key to it.
//! * Real servers get an index in `dests`; a real server deleted while flows
//!   still use it keeps its index, marked `UNAVAILABLE` (its flows' packets
//!   are dropped and a new SYN is rescheduled, as IPVS does without
//!   `expire_nodest_conn`), and is resurrected with the same index when it is
//!   added back; the index is freed once no flow refers to it.
//! * Scheduling data (the real-server list, then the sh/dh/mh table or the
//!   wrr cycle) lives in a region of `slots`. A change writes a fresh region,
//!   then flips the service's `svc_info` element (one atomic element write),
//!   and frees the old region only after a grace period: two reports later
//!   (at least one full report interval, a second in rvsd), far longer than
//!   any program run that may still read the old region. Freed `svc_info`
//!   indexes wait the same way.
//! * A real server whose MAC is not known yet (DR: its own; TUN: the next
//!   hop's, see [`crate::neigh`]) is left out of its service's scheduling
//!   data, so no new flow goes to it, until it is resolved; then the service
//!   is republished. NAT real servers need no MAC (the program routes with
//!   `bpf_fib_lookup`).
//! * The program's per-CPU flow caches (`flow_cache` in front of `flows4`,
//!   `flow6_cache` in front of `flows`, see `fast_established` and
//!   `fast_established6` in xdp_lb.c) need nothing from this side beyond
//!   the epoch bump of [`crate::Loaded::set_flow`]. Every
//!   write here that a cached packet depends on is read by the cached path
//!   itself: a real server's element (`UNAVAILABLE`, method, MAC, a freed
//!   index cleared to zero) on every packet. Flows are only removed here
//!   once expired, and an expired flow has no valid cache entry: the program
//!   caches a flow only when its timeout is longer than the cache's bound
//!   (`FLOW_CACHE_JIFFIES`), stamps the flow whenever it fills the entry,
//!   and an entry is valid for that bound only. A freed real-server index is
//!   reused two reports (at least a second) after the last flow using it
//!   went, far past that bound. What the bound does cover: a shortened
//!   timeout (`config`) reaches a cached flow within it, and so does a flow
//!   removed here between this side's read and its delete that the program
//!   had just renewed (a race as old as the sweep).
//!
//! A control operation that fails leaves the maps and this side's books as
//! they were (each step undoes the previous ones). The control plane keeps
//! the change in its model; the next report compares the model with what
//! is installed and applies the difference, so the data plane converges.
//!
//! What the XDP program cannot do is refused with a clear error: fwmark
//! services (XDP runs before the skb exists, so there is no packet mark),
//! `Local` and `FullNat` real servers, GRE tunnels.
//! Every scheduler of the core runs in the program.
//!
//! # Reporting
//! [`Plane::report`] mirrors the program's state into the control plane's
//! director, so every front end (`rvsadm -Ln`, `--stats`, `--rate`, `-Lcn`,
//! metrics) works unchanged:
//! * the per-CPU counters of every real server are summed and the growth
//!   since the previous report is added to the director
//!   ([`Ipvs::add_counters`], which also feeds the service, the total and so
//!   the rate estimators; `-Z` zeroes the director's side only, and later
//!   growth adds to zero);
//! * every live flow and persistence template is mirrored into the
//!   director's connection table ([`Ipvs::mirror_conn`]: state, real server,
//!   time left), and entries whose flow is gone or expired are removed. So
//!   ActiveConn/InActConn, the persistent count and `-Lcn` are the
//!   program's, at most one report old;
//! * the same pass is the program's sweep: expired flows and templates are
//!   deleted, and `dest_conns` (the ActiveConn/InActConn the program keeps
//!   for lc/wlc/sed/nq/fo/ovf) is set from the live flows, repairing what
//!   LRU evictions left behind;
//! * connection thresholds (`-x`/`-y`): the director decides overload from
//!   the mirrored connections with IPVS's hysteresis, and the real server's
//!   `OVERLOADED` flag follows;
//! * timeouts set on the director directly (keepalived.conf) reach `config`.
//!
//! The flow table is read with `BPF_MAP_LOOKUP_BATCH` (4096 entries per
//! syscall), one page of [`MIRROR_PAGE`] flows per report: a table larger
//! than a page is walked over several reports, so a report holds the
//! control plane's lock for a bounded time however many flows there are
//! (`report_cost_with_many_flows` prints it). What needs the whole table —
//! removing the entries of flows that are gone, setting `dest_conns`,
//! giving a deleted real server's index back — happens when a walk
//! completes. The price: with a table of N pages, `-Lcn` and the counts
//! are up to N reports old, and an entry whose time left ran out in the
//! director before the walk came back to it disappears from the view until
//! then (only short-lived states: SYN_RECV, CLOSE, FIN_WAIT…).
//!
//! Mirroring (rather than giving the view a second source of connections)
//! keeps one connection table with one set of invariants: counts per real
//! server, expiry, the trash of deleted real servers and the audit all stay
//! the core's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant as StdInstant};

use aya::maps::MapError;
use rvs_control::dataplane::{DataPlane, DataPlaneError};
use rvs_control::protocol::Command;
use rvs_control::state::{ServiceDef, current_defs, diff};
use rvs_core::conn::ConnId;
use rvs_core::dest::{Dest as CoreDest, DestId};
use rvs_core::ipvs::{Ipvs, MirroredConn};
use rvs_core::model::{
    DestConfig, ForwardMethod, PersistMask, Protocol, SchedFlags, ServiceConfig, ServiceKey,
    TunnelType,
};
use rvs_core::sched::SchedParams;
use rvs_core::state::{TcpState, Timeouts};
use rvs_core::stats::Counters;
use rvs_core::time::Instant;

use crate::maps::{
    self, Config, Dest, DestConns, Flow, Flow4Key, FlowKey, Persist, PersistKey, Stats, Svc, SvcKey,
};
use crate::neigh::{L2, Resolve};
use crate::tables::{TableError, scheduling_table};
use crate::{Loaded, XdpError};

/// Every map operation the control side performs: the seam between the
/// sync logic and the kernel.
pub trait MapOps {
    /// `services[key] = index`.
    fn set_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError>;
    /// Delete `services[key]` (an error when absent, as the kernel says).
    fn remove_service(&mut self, key: &SvcKey) -> Result<(), XdpError>;
    /// `svc_info[index] = svc`.
    fn set_svc(&mut self, index: u32, svc: &Svc) -> Result<(), XdpError>;
    /// `rr_cursor[index] = value`.
    fn set_cursor(&mut self, index: u32, value: u64) -> Result<(), XdpError>;
    /// `slots[offset..] = values`.
    fn set_slots(&mut self, offset: u32, values: &[u32]) -> Result<(), XdpError>;
    /// `dests[index] = dest`.
    fn set_dest(&mut self, index: u32, dest: &Dest) -> Result<(), XdpError>;
    /// `config[0] = config`.
    fn set_config(&mut self, config: &Config) -> Result<(), XdpError>;
    /// A real server's counters summed over CPUs.
    fn dest_stats(&mut self, index: u32) -> Result<Stats, XdpError>;
    /// Delete a flow entry (absent is not an error).
    fn remove_flow(&mut self, key: &FlowKey) -> Result<(), XdpError>;
    /// `dest_conns[index] = conns` (ActiveConn/InActConn the program keeps
    /// for the least-connection schedulers).
    fn set_dest_conns(&mut self, index: u32, conns: &DestConns) -> Result<(), XdpError>;
    /// Call `f` for about `max` persistence templates from `cursor` on;
    /// true when the walk reached the end (as [`MapOps::flows_page`]).
    fn persist_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&PersistKey, &Persist),
    ) -> Result<bool, XdpError>;
    /// Call `f` for every persistence template.
    fn for_each_persist(
        &mut self,
        f: &mut dyn FnMut(&PersistKey, &Persist),
    ) -> Result<(), XdpError> {
        let mut cursor = WalkCursor::default();
        while !self.persist_page(&mut cursor, usize::MAX, f)? {}
        Ok(())
    }
    /// Delete a persistence template (absent is not an error).
    fn remove_persist(&mut self, key: &PersistKey) -> Result<(), XdpError>;
    /// Insert or replace a flow entry (and invalidate the flow caches'
    /// copies of it).
    fn set_flow(&mut self, key: &FlowKey, flow: &Flow) -> Result<(), XdpError>;
    /// Insert or replace a persistence template.
    fn set_persist(&mut self, key: &PersistKey, value: &Persist) -> Result<(), XdpError>;
    /// Call `f` for about `max` entries of the flow tables from `cursor`
    /// on (IPv4 `flows4`, then IPv6 `flows`; a kernel batch is never
    /// split, so a page may run up to one batch over `max`). Returns true
    /// when the walk reached the end: `cursor` then starts over. Entries
    /// added or removed while a walk spans several calls may be missed or
    /// seen twice, as with any walk of a live hash table.
    fn flows_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(&FlowKey, &Flow),
    ) -> Result<bool, XdpError>;
    /// Call `f` for every entry of the flow tables.
    fn for_each_flow(&mut self, f: &mut dyn FnMut(&FlowKey, &Flow)) -> Result<(), XdpError> {
        let mut cursor = WalkCursor::default();
        while !self.flows_page(&mut cursor, usize::MAX, f)? {}
        Ok(())
    }
    /// The clock flows are stamped with (jiffies) and its rate (HZ).
    fn clock(&mut self) -> Result<(u64, u32), XdpError>;
    /// Number of `slots` entries.
    fn slots_len(&self) -> u32;
}

/// Where a walk of a table (the flow tables, the persistence templates)
/// that spans several reports stands.
#[derive(Clone, Debug, Default)]
pub struct WalkCursor {
    /// 0: `flows4`, 1: `flows`.
    table: u8,
    /// The kernel's batch token to resume `table` from (`None`: its start).
    token: Option<[u8; 64]>,
    /// In-memory maps: entries of the (sorted) table already given.
    pos: usize,
}

fn map_error(map: &'static str, e: MapError) -> XdpError {
    XdpError::Map {
        map,
        source: Box::new(e),
    }
}

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

/// In-memory maps with the kernel's rules (array bounds, hash deletion of
/// an absent key fails), for testing the sync logic without a kernel.
/// `fail_at` injects one failure: the write with that sequence number
/// (counted by `writes`) fails, the ones after it succeed again.
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
    /// `flows`.
    pub flows: HashMap<FlowKey, Flow>,
    /// `dest_conns` (absent = zero).
    pub dest_conns: HashMap<u32, DestConns>,
    /// `persist`.
    pub persist: HashMap<PersistKey, Persist>,
    /// The jiffies clock.
    pub jiffies: u64,
    /// Its rate.
    pub hz: u32,
    /// Size of `slots`.
    pub slots_len: u32,
    /// The write (by sequence number) that fails; `None` = none.
    pub fail_at: Option<usize>,
    /// Writes attempted so far.
    pub writes: usize,
}

impl MemMaps {
    /// Empty maps with `slots_len` slots, HZ 250, clock at 1,000,000.
    pub fn new(slots_len: u32) -> Self {
        MemMaps {
            slots_len,
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
                MapError::SyscallError(aya::sys::SyscallError {
                    call: "bpf_map_update_elem",
                    io_error: std::io::Error::from_raw_os_error(12),
                }),
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
    fn set_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError> {
        self.write("services")?;
        if !self.services.contains_key(key) && self.services.len() >= maps::MAX_SERVICES as usize {
            return Err(map_error(
                "services",
                MapError::SyscallError(aya::sys::SyscallError {
                    call: "bpf_map_update_elem",
                    io_error: std::io::Error::from_raw_os_error(7),
                }),
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
        Self::bound("svc_info", index, maps::MAX_SERVICES)?;
        self.write("svc_info")?;
        self.svc_info.insert(index, *svc);
        Ok(())
    }
    fn set_cursor(&mut self, index: u32, value: u64) -> Result<(), XdpError> {
        Self::bound("rr_cursor", index, maps::MAX_SERVICES)?;
        self.write("rr_cursor")?;
        self.cursors.insert(index, value);
        Ok(())
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
        self.write("dests")?;
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
    fn set_persist(&mut self, key: &PersistKey, value: &Persist) -> Result<(), XdpError> {
        self.write("persist")?;
        self.persist.insert(*key, *value);
        Ok(())
    }
    fn set_dest_conns(&mut self, index: u32, conns: &DestConns) -> Result<(), XdpError> {
        Self::bound("dest_conns", index, maps::MAX_DESTS)?;
        self.write("dest_conns")?;
        self.dest_conns.insert(index, *conns);
        Ok(())
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
    fn slots_len(&self) -> u32 {
        self.slots_len
    }
}

/// Close the director's entries a table's previous walk mirrored and its
/// last one did not see, unless the other table's mirroring holds them.
fn close_gone(
    ipvs: &mut Ipvs,
    before: &HashSet<ConnId>,
    seen: &HashSet<ConnId>,
    other: [&HashSet<ConnId>; 2],
) {
    for id in before.difference(seen) {
        if !other.iter().any(|o| o.contains(id)) {
            ipvs.close(*id);
        }
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

/// Why the XDP data plane could not apply a change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaneError {
    /// A map operation failed (the change was undone).
    #[error(transparent)]
    Map(#[from] XdpError),
    /// The XDP program cannot carry this configuration.
    #[error("{0}")]
    Refused(String),
    /// The scheduling table could not be built.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A map is full.
    #[error("no room in `{0}`")]
    Full(&'static str),
    /// A command names a service this data plane does not have.
    #[error("no such service in the xdp data plane: {0:?}")]
    NoService(ServiceKey),
}

/// A region of `slots`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Region {
    off: u32,
    len: u32,
}

/// First-fit allocator over `slots` with coalescing of free neighbours.
#[derive(Debug)]
struct SlotAlloc {
    /// Free runs: offset -> length.
    free: BTreeMap<u32, u32>,
}

impl SlotAlloc {
    fn new(len: u32) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        SlotAlloc { free }
    }

    fn alloc(&mut self, len: u32) -> Option<Region> {
        let (&off, &run) = self.free.iter().find(|&(_, &run)| run >= len)?;
        self.free.remove(&off);
        if run > len {
            self.free.insert(off + len, run - len);
        }
        Some(Region { off, len })
    }

    fn release(&mut self, r: Region) {
        if r.len == 0 {
            return;
        }
        let (mut off, mut len) = (r.off, r.len);
        if let Some((&p, &plen)) = self.free.range(..off).next_back()
            && p + plen == off
        {
            self.free.remove(&p);
            off = p;
            len += plen;
        }
        if let Some(&nlen) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += nlen;
        }
        self.free.insert(off, len);
    }

    fn free_total(&self) -> u64 {
        self.free.values().map(|&l| u64::from(l)).sum()
    }
}

/// Free list of map indexes `0..max`.
#[derive(Debug)]
struct IndexAlloc {
    next: u32,
    max: u32,
    free: Vec<u32>,
}

impl IndexAlloc {
    fn new(max: u32) -> Self {
        IndexAlloc {
            next: 0,
            max,
            free: Vec::new(),
        }
    }
    fn alloc(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        (self.next < self.max).then(|| {
            self.next += 1;
            self.next - 1
        })
    }
    fn release(&mut self, i: u32) {
        self.free.push(i);
    }
}

/// Something waiting for its grace period.
#[derive(Copy, Clone, Debug)]
enum Retired {
    Region(Region),
    Svc(u32),
}

/// An installed real server.
#[derive(Clone, Debug)]
struct DestState {
    index: u32,
    /// Configuration and last non-zero weight, as the core keeps them.
    core: CoreDest,
    /// The resolved link layer (the next hop); `None` while not known.
    /// DR/TUN need it; NAT uses it when known (else the kernel's FIB).
    l2: Option<L2>,
}

impl DestState {
    fn needs_l2(&self) -> bool {
        !self.is_nat()
    }
    fn is_nat(&self) -> bool {
        matches!(self.core.config.forward, ForwardMethod::Masq)
    }
    fn ready(&self) -> bool {
        !self.needs_l2() || self.l2.is_some()
    }
}

/// An installed service.
#[derive(Debug)]
struct SvcState {
    index: u32,
    config: ServiceConfig,
    /// IPVS list order (newest first), as the core keeps it.
    dests: Vec<DestState>,
    region: Option<Region>,
    svc: Svc,
}

/// A deleted real server whose index flows may still use.
#[derive(Debug)]
struct Trashed {
    service: ServiceKey,
    dest: DestState,
    /// Report generation when it was deleted.
    since: u64,
}

/// The sync logic of the XDP data plane over any [`MapOps`] and [`Resolve`].
#[derive(Debug)]
pub struct Plane<M: MapOps, R: Resolve> {
    maps: M,
    resolver: R,
    services: HashMap<ServiceKey, SvcState>,
    /// Services refused (fwmark, unsupported scheduler): commands about
    /// them are ignored; an edit makes them candidates again.
    refused: HashSet<ServiceKey>,
    svc_idx: IndexAlloc,
    dest_idx: IndexAlloc,
    slots: SlotAlloc,
    retired: Vec<(u64, Retired)>,
    trash: Vec<Trashed>,
    generation: u64,
    timeouts: Timeouts,
    config: Config,
    /// Tunnel source addresses given by the operator (else from the route).
    tun_src: (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>),
    /// Host bits of the tunnel sources varied per flow (IPv4, IPv6).
    tun_vary: (u8, u8),
    /// Last read counters per dest index.
    baselines: HashMap<u32, Stats>,
    /// The walk of the flow tables in progress (one page per report).
    flow_walk: Walk,
    /// The walk of the persistence templates in progress.
    persist_walk: Walk,
    /// What the last complete walk of each found.
    flows_done: Option<WalkDone>,
    persist_done: Option<WalkDone>,
    /// Entries per table per report (see [`Plane::set_mirror_page`]).
    mirror_page: usize,
    /// Connection entries mirrored from flows by the last complete walk.
    mirrored_flows: HashSet<ConnId>,
    /// Connection entries mirrored from templates by the last complete walk.
    mirrored_templates: HashSet<ConnId>,
    /// A map write failed: compare with the model at the next report.
    dirty: bool,
    /// How long `apply` waits for MAC resolution before leaving it to reports.
    resolve_budget: Duration,
    /// Addresses the current command left unresolved.
    fresh: Vec<IpAddr>,
}

/// Flows (and templates) mirrored per report by default: a report holds the
/// control plane's lock for a bounded time however large the tables are.
pub const MIRROR_PAGE: usize = 65_536;

/// A walk of a table, one page per report, and what it found so far.
#[derive(Debug, Default)]
struct Walk {
    cursor: WalkCursor,
    /// Report generation the walk began at.
    start: Option<u64>,
    /// Live entries per real-server index (counted for flows).
    users: HashMap<u32, DestConns>,
    /// Connection entries mirrored by the walk.
    seen: HashSet<ConnId>,
}

/// What a complete walk found.
#[derive(Debug)]
struct WalkDone {
    /// Report generation it began at.
    start: u64,
    /// Real-server indexes in use.
    users: HashSet<u32>,
}

/// NAT real servers whose next hop is unknown looked up per report.
const NAT_LOOKUPS_PER_REPORT: usize = 32;

/// Every this many reports the MACs in use are looked up again, so a real
/// server (or gateway) that changed its MAC is followed.
const L2_REFRESH_REPORTS: u64 = 30;

fn persist_mask(m: &PersistMask) -> [u8; 16] {
    let mut out = [0u8; 16];
    match m {
        PersistMask::V4(a) => out[..4].copy_from_slice(&a.octets()),
        PersistMask::V6(p) => {
            let p = u32::from((*p).min(128));
            let v = if p == 0 { 0 } else { u128::MAX << (128 - p) };
            out = v.to_be_bytes();
        }
    }
    out
}

fn method_of(f: &ForwardMethod) -> Result<(u8, u16), PlaneError> {
    match f {
        ForwardMethod::Masq => Ok((maps::fwd::NAT, 0)),
        ForwardMethod::Route => Ok((maps::fwd::DR, 0)),
        ForwardMethod::Tunnel(t) => match t.kind {
            TunnelType::Ipip => Ok((maps::fwd::TUN_IPIP, 0)),
            TunnelType::Gue if t.port != 0 => Ok((maps::fwd::TUN_GUE, t.port)),
            TunnelType::Gue => Err(PlaneError::Refused(
                "GUE tunnel without a port (--tun-port)".into(),
            )),
            TunnelType::Gre => Err(PlaneError::Refused(
                "GRE tunnels are not supported by the xdp data plane (use ipip or gue)".into(),
            )),
        },
        other => Err(PlaneError::Refused(format!(
            "forwarding method {} is not supported by the xdp data plane",
            other.name()
        ))),
    }
}

fn svc_key(key: &ServiceKey) -> Result<SvcKey, PlaneError> {
    match key {
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => match protocol {
            // Port 0: the program looks it up when no service has the
            // packet's port (IPVS's catch-all).
            Protocol::Tcp | Protocol::Udp => Ok(SvcKey::new(protocol.number(), *addr, *port)),
            Protocol::Sctp => Err(PlaneError::Refused(
                "SCTP services are not supported by the xdp data plane".into(),
            )),
        },
        ServiceKey::Fwmark { mark, .. } => Err(PlaneError::Refused(format!(
            "fwmark service {mark}: the xdp data plane cannot match firewall marks \
             (XDP runs before the kernel allocates the packet's skb, so there is no mark); \
             use protocol/address/port services"
        ))),
    }
}

fn sched_params(c: &ServiceConfig) -> SchedParams {
    SchedParams {
        flags: c.flags,
        mh_table_size: c.mh_table_size,
        ..SchedParams::default()
    }
}

/// Refuse schedulers the program does not run (yet).
fn check_scheduler(c: &ServiceConfig) -> Result<u8, PlaneError> {
    let id = maps::sched::id(c.scheduler);
    scheduling_table(c.scheduler, &sched_params(c), &[], &[]).map_err(|e| match e {
        TableError::Unsupported(_) => PlaneError::Refused(format!(
            "scheduler `{}` is not run by the xdp data plane yet",
            c.scheduler
        )),
        other => PlaneError::Table(other),
    })?;
    Ok(id)
}

fn stats_delta(now: &Stats, then: &Stats) -> Counters {
    Counters {
        conns: now.conns.wrapping_sub(then.conns),
        inpkts: now.inpkts.wrapping_sub(then.inpkts),
        outpkts: now.outpkts.wrapping_sub(then.outpkts),
        inbytes: now.inbytes.wrapping_sub(then.inbytes),
        outbytes: now.outbytes.wrapping_sub(then.outbytes),
    }
}

impl<M: MapOps, R: Resolve> Plane<M, R> {
    /// A plane over `maps` (freshly loaded: everything zero) resolving MACs
    /// with `resolver`. Writes the default configuration.
    pub fn new(mut maps: M, resolver: R) -> Result<Self, PlaneError> {
        let timeouts = Timeouts::default();
        let mut config = Config::ipvs_defaults();
        fill_timeouts(&mut config, &timeouts);
        maps.set_config(&config)?;
        let slots = SlotAlloc::new(maps.slots_len());
        Ok(Plane {
            maps,
            resolver,
            services: HashMap::new(),
            refused: HashSet::new(),
            svc_idx: IndexAlloc::new(maps::MAX_SERVICES),
            dest_idx: IndexAlloc::new(maps::MAX_DESTS),
            slots,
            retired: Vec::new(),
            trash: Vec::new(),
            generation: 0,
            timeouts,
            config,
            tun_src: (None, None),
            tun_vary: (0, 0),
            baselines: HashMap::new(),
            flow_walk: Walk::default(),
            persist_walk: Walk::default(),
            flows_done: None,
            persist_done: None,
            mirror_page: MIRROR_PAGE,
            mirrored_flows: HashSet::new(),
            mirrored_templates: HashSet::new(),
            dirty: false,
            resolve_budget: Duration::from_millis(200),
            fresh: Vec::new(),
        })
    }

    /// The maps (tests look at them).
    pub fn maps(&mut self) -> &mut M {
        &mut self.maps
    }

    /// How long [`Plane::apply_command`] waits for the MACs of the real
    /// servers it adds before it leaves them to the reports (default 200 ms;
    /// a neighbour on the segment answers in about a millisecond).
    pub fn set_resolve_budget(&mut self, budget: Duration) {
        self.resolve_budget = budget;
    }

    /// Outer source addresses of tunnelled packets; without them the
    /// preferred source of the route to the first tunnel real server of the
    /// family is used.
    pub fn set_tunnel_sources(
        &mut self,
        v4: Option<std::net::Ipv4Addr>,
        v6: Option<std::net::Ipv6Addr>,
    ) -> Result<(), PlaneError> {
        self.tun_src = (v4, v6);
        self.tun_vary = (0, 0);
        self.write_config()
    }

    /// Outer tunnel sources varied per flow: a prefix per family whose host
    /// bits come from the flow hash, so a real server's RSS spreads
    /// tunnelled flows over its queues (one outer source would put them all
    /// on one). IPv4 prefixes of /16 to /32, IPv6 /96 to /128. The real
    /// servers must accept any source of the prefix (rvs's decapsulator
    /// checks only the inner destination; `rvsd realserver` relaxes
    /// `rp_filter`). A family without a prefix keeps its fixed source.
    pub fn set_tunnel_source_prefixes(
        &mut self,
        v4: Option<(std::net::Ipv4Addr, u8)>,
        v6: Option<(std::net::Ipv6Addr, u8)>,
    ) -> Result<(), PlaneError> {
        let mut vary = (0, 0);
        let mut src = self.tun_src;
        if let Some((a, len)) = v4 {
            if !(16..=32).contains(&len) {
                return Err(PlaneError::Refused(format!(
                    "tunnel source prefix {a}/{len}: an IPv4 prefix must be /16 to /32"
                )));
            }
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            src.0 = Some(std::net::Ipv4Addr::from(u32::from(a) & mask));
            vary.0 = 32 - len;
        }
        if let Some((a, len)) = v6 {
            if !(96..=128).contains(&len) {
                return Err(PlaneError::Refused(format!(
                    "tunnel source prefix {a}/{len}: an IPv6 prefix must be /96 to /128"
                )));
            }
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            src.1 = Some(std::net::Ipv6Addr::from(u128::from(a) & mask));
            vary.1 = 128 - len;
        }
        self.tun_src = src;
        self.tun_vary = vary;
        self.write_config()
    }

    /// Flows, and templates, mirrored per report (default [`MIRROR_PAGE`];
    /// at least 1).
    pub fn set_mirror_page(&mut self, flows: usize) {
        self.mirror_page = flows.max(1);
    }

    /// The largest tunnelled packet (0: no check) and the SYN-flood guard's
    /// new flows per CPU per second (0: off), see [`Config`].
    pub fn set_limits(&mut self, tun_mtu: u32, max_new_flows: u32) -> Result<(), PlaneError> {
        let mut c = self.config;
        c.tun_mtu = tun_mtu;
        c.max_new_flows = max_new_flows;
        self.maps.set_config(&c)?;
        self.config = c;
        Ok(())
    }

    /// The `svc_info` index of an installed service.
    pub fn service_index(&self, key: &ServiceKey) -> Option<u32> {
        self.services.get(key).map(|s| s.index)
    }

    /// Load a connection or template another director synced (IPVS
    /// connection sync) into the program's tables — `flows4`/`flows`, or
    /// `persist` — bound to the same real server, stamped as seen now: its
    /// packets then go where they went before the failover, whatever a new
    /// scheduling decision here would say. Skipped (Ok) when the real
    /// server is not one this plane carries.
    pub fn load_synced_flow(&mut self, ipvs: &Ipvs, flow: &MirroredConn) -> Result<(), PlaneError> {
        let Some(cfg) = ipvs.dest(flow.dest).map(|d| d.config) else {
            return Ok(());
        };
        let found = self.services.iter().find_map(|(key, st)| {
            let svc = ipvs.service(key)?;
            if !svc.dests().iter().any(|x| x.id == flow.dest) {
                return None;
            }
            let d = st.dests.iter().find(|x| same(&x.core.config, &cfg))?;
            Some((st.index, d.index))
        });
        let Some((svc, dest)) = found else {
            return Ok(());
        };
        let (jiffies, _) = self.maps.clock()?;
        let family = if flow.client.is_ipv4() {
            maps::AF_INET
        } else {
            maps::AF_INET6
        };
        let proto = flow.protocol.number();
        if flow.template {
            let key = PersistKey {
                caddr: maps::addr16(flow.client.ip()),
                vaddr: maps::addr16(flow.vip.ip()),
                vport: flow.vip.port().to_be(),
                proto,
                family,
            };
            let value = Persist {
                last_seen: jiffies,
                dest,
                svc,
            };
            self.maps.set_persist(&key, &value)?;
        } else {
            let key = FlowKey {
                caddr: maps::addr16(flow.client.ip()),
                vaddr: maps::addr16(flow.vip.ip()),
                cport: flow.client.port().to_be(),
                vport: flow.vip.port().to_be(),
                proto,
                family,
                ..FlowKey::default()
            };
            let value = Flow {
                last_seen: jiffies,
                dest,
                svc,
                state: flow.state,
                flags: if flow.output_seen {
                    0
                } else {
                    maps::FLOW_F_NOOUTPUT
                },
                ..Flow::default()
            };
            self.maps.set_flow(&key, &value)?;
        }
        Ok(())
    }

    /// The `dests` index of an installed (or deleted but still referenced)
    /// real server.
    pub fn dest_index(&self, key: &ServiceKey, addr: IpAddr, port: u16) -> Option<u32> {
        let hit = |d: &DestState| d.core.config.addr == addr && d.core.config.port == port;
        self.services
            .get(key)
            .and_then(|s| s.dests.iter().find(|d| hit(d)).map(|d| d.index))
            .or_else(|| {
                self.trash
                    .iter()
                    .find(|t| t.service == *key && hit(&t.dest))
                    .map(|t| t.dest.index)
            })
    }

    /// Free entries of `slots`, as the allocator sees them.
    pub fn free_slots(&self) -> u64 {
        self.slots.free_total()
    }

    /// Apply one command (see the module doc). On error nothing changed.
    pub fn apply_command(&mut self, cmd: &Command) -> Result<(), PlaneError> {
        let r = match cmd {
            Command::AddService { key, config } => self.add_service(key, config),
            Command::EditService { key, config } => self.edit_service(key, config),
            Command::DelService { key } => self.del_service(key),
            Command::Clear => {
                let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
                self.refused.clear();
                keys.iter().try_for_each(|k| self.del_service(k))
            }
            Command::AddDest { service, dest } => self.add_dest(service, dest),
            Command::EditDest { service, dest } => self.edit_dest(service, dest),
            Command::DelDest {
                service,
                addr,
                port,
            } => self.del_dest(service, *addr, *port),
            // Counters are zeroed on the director's side: reports add growth.
            Command::Zero { .. } => Ok(()),
            Command::SetTimeouts { tcp, tcpfin, udp } => {
                let old = self.timeouts.clone();
                self.timeouts.set_ipvsadm(*tcp, *tcpfin, *udp);
                self.write_config().inspect_err(|_| self.timeouts = old)
            }
        };
        if matches!(r, Err(PlaneError::Map(_) | PlaneError::Full(_))) {
            self.dirty = true;
        }
        // Wait a little for the MACs this command needs; the rest (a real
        // server that is down) is retried by the reports without holding up
        // later commands.
        if !self.fresh.is_empty() {
            let only: HashSet<IpAddr> = self.fresh.drain(..).collect();
            self.resolve_pending(self.resolve_budget, Some(&only));
        }
        r
    }

    fn add_service(&mut self, key: &ServiceKey, config: &ServiceConfig) -> Result<(), PlaneError> {
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
        match check_scheduler(config) {
            Ok(_) => {}
            Err(e) => return refuse(self, e),
        };
        if self.services.contains_key(key) {
            return Ok(());
        }
        self.refused.remove(key);
        let index = self.svc_idx.alloc().ok_or(PlaneError::Full("svc_info"))?;
        if let Err(e) = self.maps.set_cursor(index, 0) {
            self.svc_idx.release(index);
            return Err(e.into());
        }
        self.services.insert(
            *key,
            SvcState {
                index,
                config: config.clone(),
                dests: Vec::new(),
                region: None,
                svc: Svc::default(),
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
        if let Err(e) = self.maps.set_service(&skey, index) {
            undo(self);
            return Err(e.into());
        }
        Ok(())
    }

    fn svc_value(
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
    /// changed.
    fn publish(&mut self, key: &ServiceKey) -> Result<(), PlaneError> {
        let st = self.services.get(key).ok_or(PlaneError::NoService(*key))?;
        let sched = check_scheduler(&st.config)?;
        let ready: Vec<&DestState> = st.dests.iter().filter(|d| d.ready()).collect();
        let list: Vec<u32> = ready.iter().map(|d| d.index).collect();
        let core: Vec<CoreDest> = ready.iter().map(|d| d.core.clone()).collect();
        let table = scheduling_table(st.config.scheduler, &sched_params(&st.config), &core, &list)?;
        let mut data = list;
        let list_len = data.len() as u32;
        data.extend_from_slice(&table);
        let len = u32::try_from(data.len()).map_err(|_| PlaneError::Full("slots"))?;
        let region = self.slots.alloc(len).ok_or(PlaneError::Full("slots"))?;
        let svc = self.svc_value(key, st, sched, region, list_len);
        let index = st.index;
        if let Err(e) = self
            .maps
            .set_slots(region.off, &data)
            .and_then(|()| self.maps.set_svc(index, &svc))
        {
            // The region was never visible to the program.
            self.slots.release(region);
            return Err(e.into());
        }
        let generation = self.generation;
        if let Some(st) = self.services.get_mut(key) {
            st.svc = svc;
            if let Some(old) = st.region.replace(region) {
                self.retired.push((generation, Retired::Region(old)));
            }
        }
        Ok(())
    }

    fn edit_service(&mut self, key: &ServiceKey, config: &ServiceConfig) -> Result<(), PlaneError> {
        if !self.services.contains_key(key) {
            if self.refused.remove(key) {
                // Maybe acceptable now: the next report installs it with its
                // real servers from the model.
                self.dirty = true;
                return Ok(());
            }
            return Err(PlaneError::NoService(*key));
        }
        check_scheduler(config)?;
        let old = match self.services.get_mut(key) {
            Some(st) => std::mem::replace(&mut st.config, config.clone()),
            None => return Err(PlaneError::NoService(*key)),
        };
        let r = self.publish(key);
        if r.is_err()
            && let Some(st) = self.services.get_mut(key)
        {
            st.config = old;
        }
        r
    }

    fn del_service(&mut self, key: &ServiceKey) -> Result<(), PlaneError> {
        if self.refused.remove(key) {
            return Ok(());
        }
        let skey = svc_key(key)?;
        if !self.services.contains_key(key) {
            return Err(PlaneError::NoService(*key));
        }
        self.maps.remove_service(&skey)?;
        let Some(st) = self.services.remove(key) else {
            return Ok(());
        };
        // Unreachable now; a stale element is harmless if this write fails.
        let _ = self.maps.set_svc(st.index, &Svc::default());
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
    fn trash_dest(&mut self, service: ServiceKey, d: DestState) {
        let v = self.dest_value(&d, maps::dest_flags::UNAVAILABLE);
        if self.maps.set_dest(d.index, &v).is_err() {
            // Still scheduled nowhere; its flows keep going until they end.
            self.dirty = true;
        }
        self.trash.push(Trashed {
            service,
            dest: d,
            since: self.generation,
        });
    }

    fn dest_value(&self, d: &DestState, mut flags: u32) -> Dest {
        if d.core.overloaded {
            flags |= maps::dest_flags::OVERLOADED;
        }
        let c = &d.core.config;
        let (method, gue_port) = method_of(&c.forward).unwrap_or((0, 0));
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

    fn add_dest(&mut self, service: &ServiceKey, cfg: &DestConfig) -> Result<(), PlaneError> {
        if self.refused.contains(service) {
            return Ok(());
        }
        if !self.services.contains_key(service) {
            return Err(PlaneError::NoService(*service));
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
        let (mut d, fresh) = match resurrect {
            Some(p) => (self.trash.remove(p).dest, false),
            None => {
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
        // NAT too: a next hop already known saves the program a FIB
        // lookup per packet; an unknown one is left to the FIB (and to
        // the next refresh), nothing waits for it.
        if d.l2.is_none() {
            d.l2 = self.resolver.lookup(cfg.addr).ok().flatten();
            if d.l2.is_none() && d.is_nat() {
                let _ = self.resolver.solicit(cfg.addr);
            }
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
            if fresh {
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
        let unresolved = !d.ready();
        if let Err(e) = self.maps.set_dest(d.index, &v) {
            undo(self, prev);
            return Err(e.into());
        }
        if let Some(st) = self.services.get_mut(service) {
            st.dests.insert(0, d);
        }
        if let Err(e) = self.publish(service) {
            if let Some(st) = self.services.get_mut(service) {
                st.dests.remove(0);
            }
            undo(self, prev);
            return Err(e);
        }
        if unresolved {
            self.fresh.push(cfg.addr);
        }
        if self.write_config().is_err() {
            self.dirty = true;
        }
        Ok(())
    }

    fn edit_dest(&mut self, service: &ServiceKey, cfg: &DestConfig) -> Result<(), PlaneError> {
        if self.refused.contains(service) {
            return Ok(());
        }
        let st = self
            .services
            .get_mut(service)
            .ok_or(PlaneError::NoService(*service))?;
        let Some(pos) = st.dests.iter().position(|d| same(&d.core.config, cfg)) else {
            // Not installed here (refused earlier, or a failed add): try now.
            return self.add_dest(service, cfg);
        };
        method_of(&cfg.forward)?;
        let prev = st.dests[pos].clone();
        let mut d = prev.clone();
        edit_core(&mut d.core, cfg);
        if d.needs_l2() && d.l2.is_none() {
            d.l2 = self.resolver.lookup(cfg.addr).ok().flatten();
        }
        let v = self.dest_value(&d, 0);
        self.maps.set_dest(d.index, &v)?;
        if let Some(st) = self.services.get_mut(service) {
            st.dests[pos] = d;
        }
        if let Err(e) = self.publish(service) {
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

    fn del_dest(
        &mut self,
        service: &ServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> Result<(), PlaneError> {
        if self.refused.contains(service) {
            return Ok(());
        }
        let st = self
            .services
            .get_mut(service)
            .ok_or(PlaneError::NoService(*service))?;
        let Some(pos) = st
            .dests
            .iter()
            .position(|d| d.core.config.addr == addr && d.core.config.port == port)
        else {
            // Never installed here (refused): nothing to remove.
            return Ok(());
        };
        let d = st.dests.remove(pos);
        if let Err(e) = self.publish(service) {
            if let Some(st) = self.services.get_mut(service) {
                st.dests.insert(pos, d);
            }
            return Err(e);
        }
        self.trash_dest(*service, d);
        Ok(())
    }

    /// Compute and write `config` if it changed.
    fn write_config(&mut self) -> Result<(), PlaneError> {
        let mut c = self.config;
        fill_timeouts(&mut c, &self.timeouts);
        let all = || {
            self.services
                .values()
                .flat_map(|s| s.dests.iter())
                .chain(self.trash.iter().map(|t| &t.dest))
        };
        c.flags = if all().any(|d| matches!(d.core.config.forward, ForwardMethod::Masq)) {
            maps::CFG_F_NAT
        } else {
            0
        };
        let tun = |v6: bool| {
            all().find_map(|d| {
                let tunnel = matches!(d.core.config.forward, ForwardMethod::Tunnel(_));
                (tunnel && d.core.config.addr.is_ipv6() == v6)
                    .then_some(d.l2.and_then(|l| l.src))
                    .flatten()
            })
        };
        match self.tun_src.0.map(IpAddr::V4).or_else(|| tun(false)) {
            Some(IpAddr::V4(a)) => c.tun_src4 = a.octets(),
            _ => c.tun_src4 = [0; 4],
        }
        match self.tun_src.1.map(IpAddr::V6).or_else(|| tun(true)) {
            Some(IpAddr::V6(a)) => c.tun_src6 = a.octets(),
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

    /// Try to resolve the MACs still missing: ask the kernel, then poll its
    /// neighbour table for at most `budget`. Resolved real servers are
    /// written and their services republished.
    fn resolve_pending(&mut self, budget: Duration, only: Option<&HashSet<IpAddr>>) {
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
    fn learn_nat_next_hops(&mut self) {
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
    fn set_l2(&mut self, index: u32, l2: L2) -> bool {
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
    fn refresh_l2(&mut self) {
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

    fn install_resolved(&mut self, found: &HashMap<IpAddr, L2>) {
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

    /// Periodic work with the control plane's director (see the module
    /// doc): grace periods, MAC resolution, timeouts, convergence, counters
    /// and connections.
    pub fn report_to(&mut self, now: Instant, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        self.generation += 1;
        let g = self.generation;
        let (due, keep): (Vec<_>, Vec<_>) = self.retired.drain(..).partition(|(at, _)| g >= at + 2);
        self.retired = keep;
        for (_, r) in due {
            match r {
                Retired::Region(r) => self.slots.release(r),
                Retired::Svc(i) => self.svc_idx.release(i),
            }
        }
        self.resolve_pending(Duration::ZERO, None);
        if g.is_multiple_of(L2_REFRESH_REPORTS) {
            self.refresh_l2();
        }
        self.learn_nat_next_hops();
        if *ipvs.timeouts() != self.timeouts {
            let old = self.timeouts.clone();
            self.timeouts = ipvs.timeouts().clone();
            if self.write_config().is_err() {
                self.timeouts = old;
            }
        }
        if self.dirty {
            self.converge(ipvs);
        }
        self.count(ipvs)?;
        self.mirror(now, ipvs)?;
        self.sync_overload(ipvs);
        Ok(())
    }

    /// Apply the difference between the model and what is installed.
    fn converge(&mut self, ipvs: &Ipvs) {
        self.dirty = false;
        let installed: Vec<ServiceDef> = self
            .services
            .iter()
            .map(|(k, s)| ServiceDef {
                key: *k,
                config: s.config.clone(),
                dests: s.dests.iter().rev().map(|d| d.core.config).collect(),
            })
            .collect();
        let target: Vec<ServiceDef> = current_defs(ipvs)
            .into_iter()
            .filter(|d| !self.refused.contains(&d.key))
            .collect();
        if let Ok((cmds, _)) = diff(&installed, &target) {
            for c in &cmds {
                // Errors set `dirty` again: the next report retries.
                let _ = self.apply_command(c);
            }
        }
    }

    /// The director's id of a dest index, with its service.
    fn dest_ids(&self, ipvs: &Ipvs) -> HashMap<u32, DestId> {
        let mut out = HashMap::new();
        for (key, st) in &self.services {
            let Some(svc) = ipvs.service(key) else {
                continue;
            };
            for d in &st.dests {
                if let Some(x) = svc.dests().iter().find(|x| same(&x.config, &d.core.config)) {
                    out.insert(d.index, x.id);
                }
            }
        }
        // Deleted ones: the id they had when last seen live.
        for t in &self.trash {
            let id = t.dest.core.id;
            if ipvs
                .dest(id)
                .is_some_and(|x| same(&x.config, &t.dest.core.config) && !x.available)
            {
                out.insert(t.dest.index, id);
            }
        }
        out
    }

    fn count(&mut self, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        // Remember the director's ids of live real servers for when they
        // are deleted (the id is what the director's trash keeps).
        let ids = self.dest_ids(ipvs);
        for st in self.services.values_mut() {
            for d in &mut st.dests {
                if let Some(id) = ids.get(&d.index) {
                    d.core.id = *id;
                }
            }
        }
        let indexes: Vec<u32> = self
            .services
            .values()
            .flat_map(|s| s.dests.iter().map(|d| d.index))
            .chain(self.trash.iter().map(|t| t.dest.index))
            .collect();
        for index in indexes {
            let cur = self.maps.dest_stats(index)?;
            let base = self.baselines.insert(index, cur).unwrap_or_default();
            let delta = stats_delta(&cur, &base);
            if delta != Counters::default()
                && let Some(id) = ids.get(&index)
            {
                ipvs.add_counters(*id, &delta);
            }
        }
        Ok(())
    }

    /// Connection thresholds (`-x`/`-y`): the director decides overload
    /// from the mirrored connections, with IPVS's hysteresis; the program
    /// skips a real server flagged `OVERLOADED` for new flows.
    fn sync_overload(&mut self, ipvs: &Ipvs) {
        let mut changed = Vec::new();
        for st in self.services.values_mut() {
            for d in &mut st.dests {
                let Some(core) = ipvs.dest(d.core.id) else {
                    continue;
                };
                if same(&core.config, &d.core.config) && core.overloaded != d.core.overloaded {
                    d.core.overloaded = core.overloaded;
                    changed.push(d.clone());
                }
            }
        }
        for d in changed {
            let v = self.dest_value(&d, 0);
            if self.maps.set_dest(d.index, &v).is_err() {
                // Seen again at the next report.
                for st in self.services.values_mut() {
                    for x in st.dests.iter_mut().filter(|x| x.index == d.index) {
                        x.core.overloaded = !d.core.overloaded;
                    }
                }
            }
        }
    }

    fn mirror(&mut self, now: Instant, ipvs: &mut Ipvs) -> Result<(), PlaneError> {
        let ids = self.dest_ids(ipvs);
        let (jiffies, hz) = self.maps.clock()?;
        let hz = u64::from(hz.max(1));
        let config = self.config;
        let g = self.generation;
        let flow_start = *self.flow_walk.start.get_or_insert(g);
        let persist_start = *self.persist_walk.start.get_or_insert(g);
        // This report's page of each walk.
        let mut flows = Vec::new();
        let mut expired = Vec::new();
        let users = &mut self.flow_walk.users;
        let flows_done =
            self.maps
                .flows_page(&mut self.flow_walk.cursor, self.mirror_page, &mut |k, f| {
                    let timeout = config.flow_timeout(k.proto, f.state);
                    let age = jiffies.saturating_sub(f.last_seen);
                    let limit = u64::from(timeout) * hz;
                    if age > limit {
                        expired.push(*k);
                        return;
                    }
                    let c = users.entry(f.dest).or_default();
                    let tcp_active = TcpState::from_u8(f.state).is_some_and(TcpState::is_active);
                    if k.proto == maps::PROTO_TCP && tcp_active {
                        c.active += 1;
                    } else {
                        c.inactive += 1;
                    }
                    flows.push((*k, *f, Duration::from_millis((limit - age) * 1000 / hz)));
                })?;
        // Persistence templates: live ones are mirrored (and keep their real
        // server's index from being reused), expired ones go.
        let timeouts: HashMap<u32, u32> = self
            .services
            .values()
            .map(|s| (s.index, s.config.persistent.unwrap_or(0)))
            .collect();
        let mut templates = Vec::new();
        let mut stale = Vec::new();
        let users = &mut self.persist_walk.users;
        let persist_done = self.maps.persist_page(
            &mut self.persist_walk.cursor,
            self.mirror_page,
            &mut |k, t| {
                let limit = timeouts.get(&t.svc).map_or(0, |&secs| u64::from(secs) * hz);
                let age = jiffies.saturating_sub(t.last_seen);
                if age > limit {
                    stale.push(*k);
                    return;
                }
                users.entry(t.dest).or_default();
                templates.push((*k, *t, Duration::from_millis((limit - age) * 1000 / hz)));
            },
        )?;
        for k in &stale {
            let _ = self.maps.remove_persist(k);
        }
        for (k, t, left) in templates {
            let Some(dest) = ids.get(&t.dest) else {
                continue;
            };
            let Some(m) = template_of(&k, *dest, left) else {
                continue;
            };
            if let Some(id) = ipvs.mirror_conn(now, &m) {
                self.persist_walk.seen.insert(id);
            }
        }
        for (k, f, left) in flows {
            let Some(dest) = ids.get(&f.dest) else {
                continue;
            };
            let Some(m) = mirrored_of(&k, &f, *dest, left) else {
                continue;
            };
            if let Some(id) = ipvs.mirror_conn(now, &m) {
                self.flow_walk.seen.insert(id);
            }
        }
        // Expired entries go (the program already treats them as absent;
        // this frees their room). Failures are retried next time.
        for k in &expired {
            let _ = self.maps.remove_flow(k);
        }
        // A complete walk: entries the previous walk of that table mirrored
        // and this one did not see are gone.
        if persist_done {
            let w = std::mem::take(&mut self.persist_walk);
            let other = [&self.mirrored_flows, &self.flow_walk.seen];
            close_gone(ipvs, &self.mirrored_templates, &w.seen, other);
            self.mirrored_templates = w.seen;
            self.persist_done = Some(WalkDone {
                start: persist_start,
                users: w.users.into_keys().collect(),
            });
        }
        if flows_done {
            let w = std::mem::take(&mut self.flow_walk);
            let other = [&self.mirrored_templates, &self.persist_walk.seen];
            close_gone(ipvs, &self.mirrored_flows, &w.seen, other);
            self.mirrored_flows = w.seen;
            // The ActiveConn/InActConn the program keeps for the
            // least-connection schedulers are set to what the live flows
            // say, which also repairs flows the LRU evicted without
            // telling. Increments made meanwhile may be overwritten; the
            // next walk corrects them.
            let indexes: Vec<u32> = self
                .services
                .values()
                .flat_map(|s| s.dests.iter().map(|d| d.index))
                .chain(self.trash.iter().map(|t| t.dest.index))
                .collect();
            for i in indexes {
                let c = w.users.get(&i).copied().unwrap_or_default();
                let _ = self.maps.set_dest_conns(i, &c);
            }
            self.flows_done = Some(WalkDone {
                start: flow_start,
                users: w.users.into_keys().collect(),
            });
        }
        if flows_done || persist_done {
            self.free_trash();
        }
        Ok(())
    }

    /// Deleted real servers no flow or template uses any more give their
    /// index back: the last whole walk of each table began two reports
    /// after the deletion, when no new flow or template could be given
    /// that index any more, and met none using it.
    fn free_trash(&mut self) {
        let (Some(flows), Some(persist)) = (&self.flows_done, &self.persist_done) else {
            return;
        };
        let (free, keep): (Vec<_>, Vec<_>) = self.trash.drain(..).partition(|t| {
            let i = t.dest.index;
            flows.start >= t.since + 2
                && persist.start >= t.since + 2
                && !flows.users.contains(&i)
                && !persist.users.contains(&i)
        });
        self.trash = keep;
        for t in free {
            if self.maps.set_dest(t.dest.index, &Dest::default()).is_ok() {
                self.dest_idx.release(t.dest.index);
                self.baselines.remove(&t.dest.index);
            } else {
                self.trash.push(t);
            }
        }
    }
}

/// The director's view of one BPF flow.
fn mirrored_of(k: &FlowKey, f: &Flow, dest: DestId, left: Duration) -> Option<MirroredConn> {
    let ip = |b: &[u8; 16]| -> IpAddr {
        if k.family == maps::AF_INET {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(*b)
        }
    };
    let protocol = Protocol::from_number(k.proto)?;
    Some(MirroredConn {
        protocol,
        client: SocketAddr::new(ip(&k.caddr), u16::from_be(k.cport)),
        vip: SocketAddr::new(ip(&k.vaddr), u16::from_be(k.vport)),
        dest,
        state: if protocol == Protocol::Tcp {
            f.state
        } else {
            0
        },
        output_seen: f.flags & maps::FLOW_F_NOOUTPUT == 0,
        idle_left: left,
        template: false,
    })
}

/// The director's view of one persistence template.
fn template_of(k: &PersistKey, dest: DestId, left: Duration) -> Option<MirroredConn> {
    let ip = |b: &[u8; 16]| -> IpAddr {
        if k.family == maps::AF_INET {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(*b)
        }
    };
    Some(MirroredConn {
        protocol: Protocol::from_number(k.proto)?,
        client: SocketAddr::new(ip(&k.caddr), 0),
        vip: SocketAddr::new(ip(&k.vaddr), u16::from_be(k.vport)),
        dest,
        state: 0,
        output_seen: false,
        idle_left: left,
        template: true,
    })
}

fn same(a: &DestConfig, b: &DestConfig) -> bool {
    a.addr == b.addr && a.port == b.port
}

/// `-e` on the core's copy: the weight rules of `__ip_vs_update_dest`
/// (the last non-zero weight is what Maglev keeps using when quiesced).
fn edit_core(d: &mut CoreDest, cfg: &DestConfig) {
    if cfg.u_threshold == 0 || cfg.u_threshold > d.config.u_threshold {
        d.overloaded = false;
    }
    if cfg.weight != 0 {
        d.last_weight = cfg.weight;
    }
    d.config = *cfg;
}

fn fill_timeouts(c: &mut Config, t: &Timeouts) {
    for s in TcpState::ALL {
        if let Some(slot) = c.tcp_timeouts.get_mut(s as usize) {
            *slot = u32::try_from(t.tcp(s).as_secs()).unwrap_or(u32::MAX);
        }
    }
    c.udp_timeout = u32::try_from(t.udp().as_secs()).unwrap_or(u32::MAX);
}

impl<M: MapOps + Send, R: Resolve + Send> DataPlane for Plane<M, R> {
    fn name(&self) -> &'static str {
        "xdp"
    }

    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError> {
        self.apply_command(command).map_err(|e| DataPlaneError {
            plane: "xdp",
            message: e.to_string(),
        })
    }

    fn admit(&self, command: &Command) -> Result<(), String> {
        admit(command).map_err(|e| e.to_string())
    }

    fn report(&mut self, now: Instant, ipvs: &mut Ipvs) {
        if let Err(e) = self.report_to(now, ipvs) {
            // Transient (a map read failed): the next report retries.
            tracing::warn!("xdp data plane report: {e}");
        }
    }

    fn load_synced(&mut self, ipvs: &Ipvs, flow: &MirroredConn) -> Result<(), DataPlaneError> {
        self.load_synced_flow(ipvs, flow)
            .map_err(|e| DataPlaneError {
                plane: "xdp",
                message: format!("loading a synced connection: {e}"),
            })
    }
}

/// Refuse, before anything changes, what the program cannot carry: fwmark
/// and SCTP services, schedulers it does not run (none today), `Local`/`FullNat` real
/// servers and GRE tunnels.
pub fn admit(command: &Command) -> Result<(), PlaneError> {
    match command {
        Command::AddService { key, config } | Command::EditService { key, config } => {
            svc_key(key)?;
            check_scheduler(config).map(|_| ())
        }
        Command::AddDest { dest, .. } | Command::EditDest { dest, .. } => {
            method_of(&dest.forward).map(|_| ())
        }
        _ => Ok(()),
    }
}

/// The XDP data plane of rvsd: the program attached to one interface, its
/// maps kept in sync, kernel neighbour resolution.
pub type XdpPlane = Plane<KernelMaps, crate::neigh::NeighResolver>;

/// What [`XdpPlane::start`] needs.
#[derive(Clone, Debug)]
pub struct XdpOptions {
    /// The interfaces to attach to: where clients' packets arrive, and
    /// for NAT also where real servers' replies arrive (the first one's MTU
    /// is the default tunnel MTU).
    pub interfaces: Vec<String>,
    /// Attach mode; `None`: native, else generic.
    pub mode: Option<crate::AttachMode>,
    /// Map sizes.
    pub load: crate::LoadOptions,
    /// Outer IPv4 source of tunnels (default: the route's preferred source).
    pub tun_src4: Option<std::net::Ipv4Addr>,
    /// Outer IPv6 source of tunnels (default: the route's preferred source).
    pub tun_src6: Option<std::net::Ipv6Addr>,
    /// Outer IPv4 tunnel source varied per flow within this prefix
    /// (address, length /16../32); replaces `tun_src4`.
    pub tun_src_prefix4: Option<(std::net::Ipv4Addr, u8)>,
    /// Outer IPv6 tunnel source varied per flow within this prefix
    /// (address, length /96../128); replaces `tun_src6`.
    pub tun_src_prefix6: Option<(std::net::Ipv6Addr, u8)>,
    /// Largest tunnelled packet (default: the interface's MTU); bigger ones
    /// that may not be fragmented get "fragmentation needed".
    pub tun_mtu: Option<u32>,
    /// SYN-flood guard: new flows per CPU per second above which
    /// hash-scheduled DR/TUN flows get no flow entry; 0 = off.
    pub max_new_flows: u32,
}

impl XdpPlane {
    /// Load the director program, write its default configuration, attach
    /// it to every interface of `opts` (the modes it got, in order) and open
    /// the netlink socket for MAC resolution. Dropping the plane detaches
    /// the program.
    pub fn start(opts: &XdpOptions) -> Result<(Self, Vec<crate::AttachMode>), PlaneError> {
        let Some(first) = opts.interfaces.first() else {
            return Err(PlaneError::Refused("no interface to attach to".into()));
        };
        let not_root = || {
            // SAFETY: geteuid has no preconditions and cannot fail.
            unsafe { libc::geteuid() != 0 }
        };
        let maps = KernelMaps::load(&opts.load).map_err(|e| {
            if not_root() {
                PlaneError::Refused(format!(
                    "the xdp data plane needs root (CAP_BPF and CAP_NET_ADMIN) to load its \
                     program: {e}"
                ))
            } else {
                PlaneError::Map(e)
            }
        })?;
        let mut resolver = crate::neigh::NeighResolver::new()
            .map_err(|e| PlaneError::Refused(format!("opening the netlink socket: {e}")))?;
        let tun_mtu = match opts.tun_mtu {
            Some(m) => m,
            None => {
                let name = std::ffi::CString::new(first.as_str())
                    .map_err(|_| PlaneError::Refused("bad interface name".into()))?;
                // SAFETY: `name` is a valid NUL-terminated string.
                let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
                if idx == 0 {
                    return Err(PlaneError::Refused(format!(
                        "no interface `{first}` in this network namespace"
                    )));
                }
                resolver
                    .link_mtu(idx)
                    .map_err(|e| PlaneError::Refused(format!("MTU of `{first}`: {e}")))?
            }
        };
        let mut plane = Plane::new(maps, resolver)?;
        plane.set_limits(tun_mtu, opts.max_new_flows)?;
        plane.set_tunnel_sources(opts.tun_src4, opts.tun_src6)?;
        if opts.tun_src_prefix4.is_some() || opts.tun_src_prefix6.is_some() {
            plane.set_tunnel_source_prefixes(opts.tun_src_prefix4, opts.tun_src_prefix6)?;
        }
        let mut modes = Vec::new();
        for name in &opts.interfaces {
            let mode = plane.maps.director().attach(name, opts.mode).map_err(|e| {
                PlaneError::Refused(format!("attaching to interface `{name}`: {e}"))
            })?;
            modes.push(mode);
        }
        Ok((plane, modes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neigh::StaticResolver;
    use rvs_core::ipvs::IpvsConfig;
    use rvs_core::model::{AddrFamily, Tunnel};
    use rvs_core::sched::Scheduler;
    use std::net::Ipv4Addr;

    type MemPlane = Plane<MemMaps, StaticResolver>;

    fn key(port: u16) -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            port,
        }
    }

    fn rs(i: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
    }

    fn l2(i: u8) -> L2 {
        L2 {
            ifindex: 7,
            mac: [2, 0, 0, 0, 0, i],
            smac: [2, 0, 0, 0, 0, 1],
            src: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        }
    }

    fn resolver() -> StaticResolver {
        let mut r = StaticResolver::default();
        for i in 1..50 {
            r.table.insert(rs(i), l2(i));
        }
        r
    }

    /// A plane and a director that see the same commands, as in rvsd.
    struct Bed {
        plane: MemPlane,
        ipvs: Ipvs,
    }

    impl Bed {
        fn new() -> Self {
            let mut plane = Plane::new(MemMaps::new(1 << 16), resolver()).unwrap();
            plane.set_resolve_budget(Duration::ZERO);
            Bed {
                plane,
                ipvs: Ipvs::new(IpvsConfig::default()),
            }
        }
        fn run(&mut self, c: Command) -> Result<(), PlaneError> {
            rvs_control::state::apply(&mut self.ipvs, &c).unwrap();
            self.plane.apply_command(&c)
        }
        fn svc(&mut self, port: u16, sched: &str) -> Result<(), PlaneError> {
            self.run(Command::AddService {
                key: key(port),
                config: ServiceConfig::new(AddrFamily::Inet).scheduler(sched.parse().unwrap()),
            })
        }
        fn dest(&mut self, port: u16, d: DestConfig) -> Result<(), PlaneError> {
            self.run(Command::AddDest {
                service: key(port),
                dest: d,
            })
        }
        fn report(&mut self, secs: u64) {
            self.plane
                .report_to(Instant::from_secs(secs), &mut self.ipvs)
                .unwrap();
        }
        fn data(&mut self, port: u16) -> (Vec<u32>, Vec<u32>) {
            let i = self.plane.service_index(&key(port)).unwrap();
            self.plane.maps().svc_data(i)
        }
        fn index(&self, port: u16, i: u8) -> u32 {
            self.plane.dest_index(&key(port), rs(i), 80).unwrap()
        }
    }

    fn dr(i: u8) -> DestConfig {
        DestConfig::new(rs(i), 80).forward(ForwardMethod::Route)
    }

    /// The scheduling data the core would compute for the live list.
    fn expected(bed: &Bed, port: u16) -> (Vec<u32>, Vec<u32>) {
        let svc = bed.ipvs.service(&key(port)).unwrap();
        let list: Vec<u32> = svc
            .dests()
            .iter()
            .map(|d| {
                bed.plane
                    .dest_index(&key(port), d.config.addr, d.config.port)
                    .unwrap()
            })
            .collect();
        let table = scheduling_table(
            svc.config().scheduler,
            &sched_params(svc.config()),
            svc.dests(),
            &list,
        )
        .unwrap();
        (list, table)
    }

    #[test]
    fn services_and_real_servers_reach_the_maps() {
        let mut bed = Bed::new();
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(11)).unwrap();
        bed.dest(80, dr(12).weight(3)).unwrap();
        let i = bed.plane.service_index(&key(80)).unwrap();
        let skey = SvcKey::new(maps::PROTO_TCP, "10.0.0.100".parse().unwrap(), 80);
        assert_eq!(bed.plane.maps().services.get(&skey), Some(&i));
        let svc = bed.plane.maps().svc_info[&i];
        assert_eq!((svc.sched, svc.family), (maps::sched::RR, maps::AF_INET));
        let (a, b) = (bed.index(80, 11), bed.index(80, 12));
        assert_eq!(bed.data(80), (vec![b, a], vec![]), "newest first, as IPVS");
        let d = bed.plane.maps().dests[&b];
        assert_eq!(
            (d.method, d.weight, d.flags, d.ifindex, d.mac, d.port),
            (maps::fwd::DR, 3, 0, 7, [2, 0, 0, 0, 0, 12], 80u16.to_be())
        );
        assert_eq!(bed.plane.maps().config.flags & maps::CFG_F_NAT, 0);
        // NAT real servers need no MAC and switch the reply path on.
        bed.dest(
            80,
            DestConfig::new(rs(60), 8080).forward(ForwardMethod::Masq),
        )
        .unwrap();
        assert_eq!(bed.plane.maps().config.flags, maps::CFG_F_NAT);
        assert_eq!(bed.data(80).0.len(), 3);
        // ... and use their next hop when it is known (no FIB lookup per
        // packet); one learnt later is installed at the next report.
        let nat = bed.plane.dest_index(&key(80), rs(60), 8080).unwrap();
        assert_eq!(bed.plane.maps().dests[&nat].flags, 0);
        bed.dest(
            80,
            DestConfig::new(rs(21), 8080).forward(ForwardMethod::Masq),
        )
        .unwrap();
        let known = bed.plane.dest_index(&key(80), rs(21), 8080).unwrap();
        let d = bed.plane.maps().dests[&known];
        assert_eq!(
            (d.method, d.flags, d.ifindex, d.mac),
            (
                maps::fwd::NAT,
                maps::dest_flags::NEXTHOP,
                7,
                [2, 0, 0, 0, 0, 21]
            )
        );
        assert!(bed.plane.resolver.solicited.contains(&rs(60)));
        bed.plane.resolver.table.insert(rs(60), l2(60));
        bed.report(1);
        let d = bed.plane.maps().dests[&nat];
        assert_eq!(
            (d.flags, d.mac),
            (maps::dest_flags::NEXTHOP, [2, 0, 0, 0, 0, 60])
        );
    }

    #[test]
    fn hash_tables_and_wrr_are_the_cores() {
        let mut bed = Bed::new();
        for (port, sched) in [(80, "mh"), (81, "sh"), (82, "dh"), (83, "wrr")] {
            bed.svc(port, sched).unwrap();
            for i in 1..6 {
                bed.dest(port, dr(i).weight(u32::from(i))).unwrap();
            }
            bed.run(Command::EditDest {
                service: key(port),
                dest: dr(3).weight(0),
            })
            .unwrap();
            bed.run(Command::DelDest {
                service: key(port),
                addr: rs(2),
                port: 80,
            })
            .unwrap();
            let want = expected(&bed, port);
            assert!(!want.1.is_empty(), "{sched}");
            assert!(bed.data(port) == want, "{sched}");
        }
        // A scheduler change rebuilds the table.
        bed.run(Command::EditService {
            key: key(80),
            config: ServiceConfig::new(AddrFamily::Inet).scheduler(Scheduler::Sh),
        })
        .unwrap();
        let want = expected(&bed, 80);
        assert!(bed.data(80) == want);
        let i = bed.plane.service_index(&key(80)).unwrap();
        assert_eq!(bed.plane.maps().svc_info[&i].sched, maps::sched::SH);
    }

    #[test]
    fn old_regions_are_freed_only_after_the_grace_period() {
        let mut bed = Bed::new();
        let total = u64::from(bed.plane.maps().slots_len);
        bed.svc(80, "mh").unwrap();
        bed.dest(80, dr(1)).unwrap();
        let i = bed.plane.service_index(&key(80)).unwrap();
        let first = bed.plane.maps().svc_info[&i];
        bed.dest(80, dr(2)).unwrap();
        let second = bed.plane.maps().svc_info[&i];
        let region = |s: &Svc| (s.dests_off, s.dests_off + s.dests_len + s.table_len);
        let (a, b) = (region(&first), region(&second));
        assert!(a.1 <= b.0 || b.1 <= a.0, "a fresh region, not the live one");
        let used = |bed: &Bed| total - bed.plane.free_slots();
        let live = u64::from(b.1 - b.0);
        assert!(used(&bed) > live, "the old region is still reserved");
        bed.report(1);
        assert!(used(&bed) > live, "one report is not a full interval");
        bed.report(2);
        assert_eq!(used(&bed), live, "freed after the grace period");
        // Deleting the service retires its region and index the same way.
        bed.run(Command::DelService { key: key(80) }).unwrap();
        assert_eq!(bed.plane.maps().svc_info[&i].sched, maps::sched::NONE);
        assert!(bed.plane.maps().services.is_empty());
        bed.report(3);
        bed.report(4);
        assert_eq!(used(&bed), 0);
    }

    #[test]
    fn deleted_real_servers_stay_unavailable_while_flows_use_them() {
        let mut bed = Bed::new();
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(1)).unwrap();
        bed.dest(80, dr(2)).unwrap();
        let idx = bed.index(80, 1);
        let flow_key = FlowKey::new(6, rs(200), 5555, "10.0.0.100".parse().unwrap(), 80);
        let now = bed.plane.maps().jiffies;
        bed.plane.maps().flows.insert(
            flow_key,
            Flow {
                last_seen: now,
                dest: idx,
                state: TcpState::Established as u8,
                flags: maps::FLOW_F_NOOUTPUT,
                ..Flow::default()
            },
        );
        let del = Command::DelDest {
            service: key(80),
            addr: rs(1),
            port: 80,
        };
        bed.run(del.clone()).unwrap();
        let d = bed.plane.maps().dests[&idx];
        assert_eq!(d.flags, maps::dest_flags::UNAVAILABLE);
        assert!(!bed.data(80).0.contains(&idx), "not scheduled");
        // Added back: resurrected with its index (flows find it again).
        bed.dest(80, dr(1)).unwrap();
        assert_eq!(bed.index(80, 1), idx);
        assert_eq!(bed.plane.maps().dests[&idx].flags, 0);
        bed.run(del).unwrap();
        for t in 1..5 {
            bed.report(t);
        }
        assert_eq!(
            bed.plane.dest_index(&key(80), rs(1), 80),
            Some(idx),
            "a flow uses it"
        );
        bed.plane.maps().flows.clear();
        bed.report(5);
        assert_eq!(bed.plane.dest_index(&key(80), rs(1), 80), None);
        assert_eq!(bed.plane.maps().dests[&idx], Dest::default());
        bed.dest(80, dr(3)).unwrap();
        assert_eq!(bed.index(80, 3), idx, "the index is reused");
    }

    /// Every write of a command fails in turn: the command reports the
    /// error and the maps the program reads are as before; then the plane
    /// converges to the model at the next report.
    #[test]
    fn a_failed_write_changes_nothing_and_the_next_report_converges() {
        let cmds = [
            Command::AddService {
                key: key(81),
                config: ServiceConfig::new(AddrFamily::Inet).scheduler(Scheduler::Mh),
            },
            Command::AddDest {
                service: key(80),
                dest: dr(5),
            },
            Command::EditDest {
                service: key(80),
                dest: dr(1).weight(0),
            },
            Command::DelDest {
                service: key(80),
                addr: rs(2),
                port: 80,
            },
            Command::EditService {
                key: key(80),
                config: ServiceConfig::new(AddrFamily::Inet).scheduler(Scheduler::Wrr),
            },
            Command::DelService { key: key(80) },
            Command::SetTimeouts {
                tcp: 5,
                tcpfin: 6,
                udp: 7,
            },
        ];
        fn visible(bed: &mut Bed) -> String {
            let m = bed.plane.maps().clone();
            let mut svcs: Vec<_> = m
                .services
                .iter()
                .map(|(k, i)| (format!("{k:?}"), m.svc_info[i], m.svc_data(*i)))
                .collect();
            svcs.sort_by(|a, b| a.0.cmp(&b.0));
            let mut dests: Vec<_> = m
                .dests
                .iter()
                .filter(|(_, d)| **d != Dest::default())
                .collect();
            dests.sort_by_key(|(i, _)| **i);
            format!("{svcs:?} {dests:?} {:?}", m.config)
        }
        for cmd in &cmds {
            let (mut n, mut failed) = (0, 0);
            loop {
                let mut bed = Bed::new();
                bed.svc(80, "mh").unwrap();
                for i in 1..4 {
                    bed.dest(80, dr(i)).unwrap();
                }
                let before = visible(&mut bed);
                let at = bed.plane.maps().writes + n;
                bed.plane.maps().fail_at = Some(at);
                let r = bed.run(cmd.clone());
                if bed.plane.maps().writes <= at {
                    assert!(r.is_ok(), "{cmd:?}");
                    break;
                }
                if r.is_err() {
                    failed += 1;
                    assert_eq!(visible(&mut bed), before, "{cmd:?} failing at write {n}");
                }
                // The model has the change: the plane converges.
                bed.report(1);
                bed.report(2);
                let mut fresh = Bed::new();
                fresh.svc(80, "mh").unwrap();
                for i in 1..4 {
                    fresh.dest(80, dr(i)).unwrap();
                }
                fresh.run(cmd.clone()).unwrap();
                for port in [80, 81] {
                    let has = bed.ipvs.service(&key(port)).is_some();
                    assert_eq!(bed.plane.service_index(&key(port)).is_some(), has);
                    if has {
                        assert!(bed.data(port) == expected(&bed, port), "{cmd:?} at {n}");
                    }
                }
                assert_eq!(
                    bed.plane.maps().config.tcp_timeouts,
                    fresh.plane.maps().config.tcp_timeouts
                );
                n += 1;
            }
            assert!(failed > 0, "{cmd:?} never failed");
        }
    }

    #[test]
    fn what_xdp_cannot_do_is_refused_clearly() {
        let mut bed = Bed::new();
        let fw = ServiceKey::Fwmark {
            mark: 7,
            af: AddrFamily::Inet,
        };
        let e = bed
            .run(Command::AddService {
                key: fw,
                config: ServiceConfig::new(AddrFamily::Inet),
            })
            .unwrap_err();
        assert!(e.to_string().contains("firewall marks"), "{e}");
        // Later commands about it are not errors again.
        bed.run(Command::AddDest {
            service: fw,
            dest: dr(1),
        })
        .unwrap();
        // Every scheduler of the core runs in the program.
        for (port, sched) in [(82, "twos"), (83, "lblc"), (84, "lblcr")] {
            bed.svc(port, sched).unwrap();
        }
        bed.svc(81, "rr").unwrap();
        let e = bed
            .dest(81, DestConfig::new(rs(1), 80).forward(ForwardMethod::Local))
            .unwrap_err();
        assert!(e.to_string().contains("Local"), "{e}");
        assert!(bed.plane.maps().dests.is_empty());
        assert_eq!(bed.plane.maps().services.len(), 4);
    }

    #[test]
    fn unresolved_real_servers_wait_out_of_the_tables() {
        let mut bed = Bed::new();
        bed.plane.resolver.table.remove(&rs(1));
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(1)).unwrap();
        bed.dest(80, dr(2)).unwrap();
        let (a, b) = (bed.index(80, 1), bed.index(80, 2));
        assert_eq!(bed.data(80).0, vec![b], "only the resolved one");
        assert!(bed.plane.resolver.solicited.contains(&rs(1)));
        bed.report(1);
        assert_eq!(bed.data(80).0, vec![b], "still unresolved");
        bed.plane.resolver.table.insert(rs(1), l2(1));
        bed.report(2);
        assert_eq!(bed.data(80).0, vec![b, a]);
        assert_eq!(bed.plane.maps().dests[&a].mac, l2(1).mac);
    }

    #[test]
    fn a_real_server_that_does_not_answer_holds_up_only_its_own_command() {
        let mut bed = Bed::new();
        bed.plane.set_resolve_budget(Duration::from_millis(300));
        bed.plane.resolver.table.remove(&rs(1));
        bed.svc(80, "rr").unwrap();
        let t = StdInstant::now();
        bed.dest(80, dr(1)).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "waited its budget"
        );
        let t = StdInstant::now();
        bed.dest(80, dr(2)).unwrap();
        bed.run(Command::SetTimeouts {
            tcp: 1,
            tcpfin: 1,
            udp: 1,
        })
        .unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(bed.data(80).0, vec![bed.index(80, 2)]);
    }

    #[test]
    fn a_changed_mac_is_followed() {
        let mut bed = Bed::new();
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(1)).unwrap();
        let i = bed.index(80, 1);
        let mut moved = l2(1);
        moved.mac = [2, 9, 9, 9, 9, 9];
        bed.plane.resolver.table.insert(rs(1), moved);
        for t in 1..L2_REFRESH_REPORTS {
            bed.report(t);
        }
        assert_eq!(bed.plane.maps().dests[&i].mac, l2(1).mac, "not yet");
        bed.report(L2_REFRESH_REPORTS);
        assert_eq!(bed.plane.maps().dests[&i].mac, moved.mac);
    }

    #[test]
    fn config_carries_timeouts_and_tunnel_sources() {
        let mut bed = Bed::new();
        bed.run(Command::SetTimeouts {
            tcp: 30,
            tcpfin: 5,
            udp: 9,
        })
        .unwrap();
        let c = bed.plane.maps().config;
        assert_eq!(c.tcp_timeouts[TcpState::Established as usize], 30);
        assert_eq!(c.tcp_timeouts[TcpState::FinWait as usize], 5);
        assert_eq!(c.udp_timeout, 9);
        // Timeouts set on the director directly (keepalived.conf) follow at
        // the next report.
        bed.ipvs.set_timeouts(40, 0, 0);
        bed.report(1);
        assert_eq!(
            bed.plane.maps().config.tcp_timeouts[TcpState::Established as usize],
            40
        );
        bed.svc(80, "rr").unwrap();
        let tun = ForwardMethod::Tunnel(Tunnel {
            kind: TunnelType::Gue,
            port: 6080,
            ..Tunnel::default()
        });
        bed.dest(80, DestConfig::new(rs(3), 80).forward(tun))
            .unwrap();
        assert_eq!(
            bed.plane.maps().config.tun_src4,
            [10, 0, 0, 2],
            "route's source"
        );
        let i3 = bed.index(80, 3);
        let d = bed.plane.maps().dests[&i3];
        assert_eq!(
            (d.method, d.gue_port),
            (maps::fwd::TUN_GUE, 6080u16.to_be())
        );
        bed.plane
            .set_tunnel_sources(Some(Ipv4Addr::new(192, 0, 2, 1)), None)
            .unwrap();
        assert_eq!(bed.plane.maps().config.tun_src4, [192, 0, 2, 1]);
        assert_eq!(bed.plane.maps().config.tun_vary4, 0);
        // A prefix: masked, its host bits varied per flow by the program.
        bed.plane
            .set_tunnel_source_prefixes(Some((Ipv4Addr::new(192, 0, 2, 77), 24)), None)
            .unwrap();
        let c = bed.plane.maps().config;
        assert_eq!((c.tun_src4, c.tun_vary4), ([192, 0, 2, 0], 8));
        assert_eq!(c.tun_vary6, 0);
        let v6: std::net::Ipv6Addr = "fd00::1:2:3".parse().unwrap();
        bed.plane
            .set_tunnel_source_prefixes(None, Some((v6, 112)))
            .unwrap();
        let c = bed.plane.maps().config;
        assert_eq!(
            (c.tun_src6, c.tun_vary6),
            (
                "fd00::1:2:0"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets(),
                16
            )
        );
        // Too wide to vary within the hash's bits: refused.
        for e in [
            bed.plane
                .set_tunnel_source_prefixes(Some((Ipv4Addr::new(10, 0, 0, 0), 8)), None),
            bed.plane.set_tunnel_source_prefixes(None, Some((v6, 64))),
        ] {
            assert!(e.unwrap_err().to_string().contains("must be"));
        }
    }

    #[test]
    fn a_large_flow_table_is_walked_a_page_per_report() {
        let mut bed = Bed::new();
        bed.plane.set_mirror_page(2);
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(1)).unwrap();
        bed.dest(80, dr(2)).unwrap();
        let (a, b) = (bed.index(80, 1), bed.index(80, 2));
        let now = bed.plane.maps().jiffies;
        let vip: IpAddr = "10.0.0.100".parse().unwrap();
        let flow = |dest: u32| Flow {
            last_seen: now,
            dest,
            state: TcpState::Established as u8,
            ..Flow::default()
        };
        // Five flows: three pages of at most two.
        for (i, d) in [a, a, a, b, b].into_iter().enumerate() {
            bed.plane
                .maps()
                .flows
                .insert(FlowKey::new(6, rs(201 + i as u8), 1000, vip, 80), flow(d));
        }
        let active = |bed: &Bed| {
            let s = bed.ipvs.service(&key(80)).unwrap();
            let n = |x: u8| {
                s.dests()
                    .iter()
                    .find(|d| d.config.addr == rs(x))
                    .unwrap()
                    .active
            };
            (n(1), n(2))
        };
        bed.report(1);
        assert_eq!(bed.ipvs.conns().len(), 2, "one page");
        let set =
            |bed: &mut Bed, i: u32| bed.plane.maps().dest_conns.get(&i).map_or(0, |c| c.active);
        assert_eq!(set(&mut bed, a), 0, "not before the walk ends");
        bed.report(2);
        assert_eq!(bed.ipvs.conns().len(), 4);
        bed.report(3);
        assert_eq!(bed.ipvs.conns().len(), 5);
        assert_eq!(active(&bed), (3, 2));
        assert_eq!(set(&mut bed, a), 3, "set when the walk ends");
        assert_eq!(set(&mut bed, b), 2);
        // Flows gone from the table leave the view when the next walk ends,
        // not before; the entries still there stay throughout.
        bed.plane.maps().flows.retain(|_, f| f.dest != b);
        bed.report(4);
        assert_eq!(bed.ipvs.conns().len(), 5, "walk not complete yet");
        bed.report(5);
        assert_eq!(bed.ipvs.conns().len(), 3);
        assert_eq!(active(&bed), (3, 0));
        assert_eq!(bed.plane.maps().dest_conns[&b].active, 0);
        // A deleted real server's index comes back only after a whole walk
        // that began two reports after the deletion (generation 5) met no
        // flow using it: the walk of reports 6-7 began too early, the one
        // of reports 8-9 frees it.
        bed.run(Command::DelDest {
            service: key(80),
            addr: rs(2),
            port: 80,
        })
        .unwrap();
        for t in 6..=8 {
            bed.report(t);
            assert_eq!(
                bed.plane.dest_index(&key(80), rs(2), 80),
                Some(b),
                "report {t}"
            );
        }
        bed.report(9);
        assert_eq!(bed.plane.dest_index(&key(80), rs(2), 80), None);
        assert_eq!(bed.plane.maps().dests[&b], Dest::default());
    }

    #[test]
    fn reports_mirror_flows_and_counters_into_the_director() {
        let mut bed = Bed::new();
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(1)).unwrap();
        bed.dest(80, dr(2)).unwrap();
        let a = bed.index(80, 1);
        let now = bed.plane.maps().jiffies;
        let vip: IpAddr = "10.0.0.100".parse().unwrap();
        let flow = |state: TcpState, age: u64| Flow {
            last_seen: now - age,
            dest: a,
            state: state as u8,
            flags: maps::FLOW_F_NOOUTPUT,
            ..Flow::default()
        };
        let m = bed.plane.maps();
        m.flows.insert(
            FlowKey::new(6, rs(201), 1000, vip, 80),
            flow(TcpState::Established, 0),
        );
        m.flows.insert(
            FlowKey::new(6, rs(202), 1000, vip, 80),
            flow(TcpState::FinWait, 250),
        );
        // Older than its state's timeout (SYN_RECV: 60 s at HZ 250).
        m.flows.insert(
            FlowKey::new(6, rs(203), 1000, vip, 80),
            flow(TcpState::SynRecv, 61 * 250),
        );
        m.dest_stats.insert(
            a,
            Stats {
                conns: 3,
                inpkts: 10,
                outpkts: 0,
                inbytes: 1000,
                outbytes: 0,
            },
        );
        bed.report(1);
        let d = |bed: &Bed| {
            let s = bed.ipvs.service(&key(80)).unwrap();
            let d = s.dests().iter().find(|d| d.config.addr == rs(1)).unwrap();
            (d.active, d.inactive, d.stats.conns, d.stats.inpkts)
        };
        assert_eq!(d(&bed), (1, 1, 3, 10));
        assert_eq!(bed.ipvs.conns().len(), 2);
        // The sweep: the expired entry is gone, the program's counters for
        // the least-connection schedulers say what the live flows say.
        assert_eq!(bed.plane.maps().flows.len(), 2);
        assert_eq!(
            bed.plane.maps().dest_conns[&a],
            DestConns {
                active: 1,
                inactive: 1
            }
        );
        let (id, c) = bed
            .ipvs
            .conns()
            .iter()
            .find(|(_, c)| c.state == TcpState::FinWait as u8)
            .unwrap();
        assert_eq!(c.daddr.to_ip(AddrFamily::Inet), rs(1));
        assert_eq!(
            bed.ipvs.conns().deadline(id),
            Some(Instant::from_secs(1 + 119)),
            "FIN_WAIT 120 s, 1 s idle"
        );
        // -Z zeroes the director's counters; growth is added afterwards.
        bed.run(Command::Zero { service: None }).unwrap();
        bed.plane.maps().dest_stats.get_mut(&a).unwrap().inpkts = 15;
        bed.report(2);
        assert_eq!(d(&bed), (1, 1, 0, 5));
        bed.plane.maps().flows.clear();
        bed.report(3);
        assert_eq!(d(&bed).0 + d(&bed).1, 0);
        assert_eq!(bed.ipvs.conns().len(), 0);
        bed.ipvs.audit().unwrap();
    }

    #[test]
    fn connection_thresholds_flag_overload_from_the_mirrored_flows() {
        let mut bed = Bed::new();
        bed.svc(80, "rr").unwrap();
        bed.dest(80, dr(1).thresholds(2, 1)).unwrap();
        let a = bed.index(80, 1);
        let now = bed.plane.maps().jiffies;
        let vip: IpAddr = "10.0.0.100".parse().unwrap();
        for c in 0..2u16 {
            bed.plane.maps().flows.insert(
                FlowKey::new(6, rs(200), 1000 + c, vip, 80),
                Flow {
                    last_seen: now,
                    dest: a,
                    state: TcpState::Established as u8,
                    ..Flow::default()
                },
            );
        }
        bed.report(1);
        let flags = |bed: &mut Bed| bed.plane.maps().dests[&a].flags;
        assert_eq!(
            flags(&mut bed),
            maps::dest_flags::OVERLOADED,
            "2 >= upper 2"
        );
        bed.plane.maps().flows.clear();
        bed.report(2);
        assert_eq!(flags(&mut bed), 0, "0 < lower 1");
        // Port-zero (any port) services are carried.
        let any = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: rs(100),
            port: 0,
        };
        admit(&Command::AddService {
            key: any,
            config: ServiceConfig::new(AddrFamily::Inet).persistent(300),
        })
        .unwrap();
    }

    /// A persistent (300 s) rr service on port 80 with one DR real server:
    /// (its index, the service's index).
    fn persistent_service(bed: &mut Bed) -> (u32, u32) {
        bed.run(Command::AddService {
            key: key(80),
            config: ServiceConfig::new(AddrFamily::Inet)
                .scheduler(Scheduler::Rr)
                .persistent(300),
        })
        .unwrap();
        bed.dest(80, dr(1)).unwrap();
        (bed.index(80, 1), bed.plane.service_index(&key(80)).unwrap())
    }

    #[test]
    fn synced_connections_and_templates_are_loaded_for_the_same_real_server() {
        let mut bed = Bed::new();
        let (_, svc) = persistent_service(&mut bed);
        bed.dest(80, dr(2)).unwrap();
        let two = bed.index(80, 2);
        let id = bed
            .ipvs
            .service(&key(80))
            .unwrap()
            .dests()
            .iter()
            .find(|d| d.config.addr == rs(2))
            .unwrap()
            .id;
        let conn = MirroredConn {
            protocol: Protocol::Tcp,
            client: "192.0.2.7:4000".parse().unwrap(),
            vip: SocketAddr::new(rs(100), 80),
            dest: id,
            state: TcpState::Established as u8,
            output_seen: false,
            idle_left: Duration::from_secs(900),
            template: false,
        };
        bed.plane.load_synced_flow(&bed.ipvs, &conn).unwrap();
        let template = MirroredConn {
            client: "192.0.2.7:0".parse().unwrap(),
            template: true,
            state: 0,
            ..conn
        };
        bed.plane.load_synced_flow(&bed.ipvs, &template).unwrap();
        let jiffies = bed.plane.maps().jiffies;
        let flows: Vec<Flow> = bed.plane.maps().flows.values().copied().collect();
        assert_eq!(flows.len(), 1);
        assert_eq!((flows[0].dest, flows[0].svc), (two, svc));
        assert_eq!(flows[0].state, TcpState::Established as u8);
        assert_eq!(flows[0].flags, maps::FLOW_F_NOOUTPUT);
        assert_eq!(flows[0].last_seen, jiffies);
        let (k, t) = bed
            .plane
            .maps()
            .persist
            .iter()
            .next()
            .map(|(k, t)| (*k, *t))
            .unwrap();
        assert_eq!(k, pk(7));
        assert_eq!((t.dest, t.svc), (two, svc));
        // A real server this plane does not carry is skipped.
        let other = MirroredConn {
            dest: rvs_core::dest::DestId(9999),
            ..conn
        };
        bed.plane.load_synced_flow(&bed.ipvs, &other).unwrap();
        assert_eq!(bed.plane.maps().flows.len(), 1);
    }

    /// The template key of client network 192.0.2.`net` on the service.
    fn pk(net: u8) -> PersistKey {
        PersistKey {
            caddr: maps::addr16(IpAddr::from([192, 0, 2, net])),
            vaddr: maps::addr16("10.0.0.100".parse().unwrap()),
            vport: 80u16.to_be(),
            proto: maps::PROTO_TCP,
            family: maps::AF_INET,
        }
    }

    #[test]
    fn templates_are_walked_a_page_per_report_too() {
        let mut bed = Bed::new();
        bed.plane.set_mirror_page(1);
        let (a, si) = persistent_service(&mut bed);
        let now = bed.plane.maps().jiffies;
        for net in [1, 2, 3] {
            bed.plane.maps().persist.insert(
                pk(net),
                Persist {
                    last_seen: now,
                    dest: a,
                    svc: si,
                },
            );
        }
        let persist = |bed: &Bed| bed.ipvs.service(&key(80)).unwrap().dests()[0].persist;
        bed.report(1);
        assert_eq!(persist(&bed), 1, "one page");
        bed.report(2);
        assert_eq!(persist(&bed), 2);
        bed.report(3);
        assert_eq!(persist(&bed), 3);
        // Gone from the map: gone from the view when a walk completes.
        bed.plane.maps().persist.remove(&pk(1));
        bed.report(4);
        assert_eq!(persist(&bed), 3, "walk not complete yet");
        bed.report(5);
        assert_eq!(persist(&bed), 2);
        assert_eq!(bed.ipvs.conns().len(), 2);
    }

    #[test]
    fn persistence_templates_are_mirrored_and_pin_their_real_server() {
        let mut bed = Bed::new();
        let (a, si) = persistent_service(&mut bed);
        assert_eq!(
            bed.plane.maps().svc_info[&si].flags & maps::svc_flags::PERSISTENT,
            maps::svc_flags::PERSISTENT
        );
        let now = bed.plane.maps().jiffies;
        let m = bed.plane.maps();
        m.persist.insert(
            pk(0),
            Persist {
                last_seen: now - 250,
                dest: a,
                svc: si,
            },
        );
        m.persist.insert(
            pk(1),
            Persist {
                last_seen: now - 301 * 250,
                dest: a,
                svc: si,
            },
        );
        bed.report(1);
        let persist = |bed: &Bed| bed.ipvs.service(&key(80)).unwrap().dests()[0].persist;
        assert_eq!(persist(&bed), 1, "the live template");
        assert!(
            !bed.plane.maps().persist.contains_key(&pk(1)),
            "expired one swept"
        );
        let (id, c) = bed.ipvs.conns().iter().next().unwrap();
        assert!(c.is_template());
        assert_eq!(
            bed.ipvs.conns().deadline(id),
            Some(Instant::from_secs(1 + 299))
        );
        // Deleted, the real server's index stays while the template lives.
        bed.run(Command::DelDest {
            service: key(80),
            addr: rs(1),
            port: 80,
        })
        .unwrap();
        for t in 2..6 {
            bed.report(t);
        }
        assert_eq!(bed.plane.dest_index(&key(80), rs(1), 80), Some(a));
        bed.plane.maps().persist.clear();
        bed.report(6);
        assert_eq!(bed.plane.dest_index(&key(80), rs(1), 80), None);
        bed.ipvs.audit().unwrap();
    }

    #[test]
    fn slot_allocator_coalesces() {
        let mut s = SlotAlloc::new(100);
        let a = s.alloc(30).unwrap();
        let b = s.alloc(30).unwrap();
        let c = s.alloc(40).unwrap();
        assert!(s.alloc(1).is_none());
        s.release(b);
        s.release(a);
        assert_eq!(s.alloc(60), Some(Region { off: 0, len: 60 }));
        s.release(c);
        assert_eq!(s.free_total(), 40);
    }
}
