//! The seam between the control side's sync logic and the kernel: every
//! map operation [`crate::plane::Plane`] performs goes through [`MapOps`].

use std::collections::HashMap;

use rvs_sys::bpf::Error as MapError;

use crate::XdpError;
use crate::maps::{
    Config, Dest, DestConns, Flow, FlowKey, Nat, NatKey, Persist, PersistKey, Stats, Svc, SvcFlood,
    SvcKey,
};

/// Elements of `dest_conns` per batched read ([`MapOps::dest_conns_of`]):
/// 4,096 × 8 bytes of values and 4 of keys, 48 KiB of buffers.
pub const CONNS_BATCH: usize = 4096;

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
    /// `rr_cursor[index]`: the decisions the program made from it so far
    /// plus the value last written.
    fn cursor(&mut self, index: u32) -> Result<u64, XdpError>;
    /// `slots[offset..] = values`.
    fn set_slots(&mut self, offset: u32, values: &[u32]) -> Result<(), XdpError>;
    /// `dests[index] = dest`.
    fn set_dest(&mut self, index: u32, dest: &Dest) -> Result<(), XdpError>;
    /// `config[0] = config`.
    fn set_config(&mut self, config: &Config) -> Result<(), XdpError>;
    /// Replace the own-MAC table (the frames the director acts on).
    fn set_own_macs(&mut self, macs: &crate::own_mac::OwnMacs) -> Result<(), XdpError>;
    /// A real server's counters summed over CPUs.
    fn dest_stats(&mut self, index: u32) -> Result<Stats, XdpError>;
    /// A service's SYN-flood counters summed over CPUs (`svc_flood`).
    fn svc_flood(&mut self, index: u32) -> Result<SvcFlood, XdpError>;
    /// Zero a service's SYN-flood counters on every CPU (`svc_flood`).
    fn reset_svc_flood(&mut self, index: u32) -> Result<(), XdpError>;
    /// Take (read and delete) up to `max` next hops the program found
    /// without a neighbour entry (`nh_missing`).
    fn take_missing_hops(&mut self, max: usize) -> Result<Vec<std::net::IpAddr>, XdpError>;
    /// Next hops not reported because `nh_missing` was full.
    fn missing_hops_full(&mut self) -> Result<u64, XdpError>;
    /// Delete a flow entry (absent is not an error).
    fn remove_flow(&mut self, key: &FlowKey) -> Result<(), XdpError>;
    /// `dest_conns[index] = conns` (ActiveConn/InActConn the program keeps
    /// for the least-connection schedulers).
    fn set_dest_conns(&mut self, index: u32, conns: &DestConns) -> Result<(), XdpError>;
    /// `dest_conns[i]` for every `i` of `indexes`: what the program counts
    /// now (the flow walk reads every index in use when it begins and
    /// again before its corrections, to leave alone a count the program
    /// changed while it ran). Read in batches (`BPF_MAP_LOOKUP_BATCH`,
    /// one syscall per [`CONNS_BATCH`] elements up to the highest index)
    /// rather than one syscall per index; one lookup per index only on
    /// kernels without batch operations on arrays (before Linux 5.6).
    fn dest_conns_of(&mut self, indexes: &[u32]) -> Result<HashMap<u32, DestConns>, XdpError>;
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
    /// Insert or replace a NAT reply entry (`nat_rev`): what the replies
    /// of a real server to a client are rewritten to. The program writes
    /// its own when it schedules a NAT flow; the control side writes those
    /// of flows it loads (connections synced from another director).
    fn set_nat(&mut self, key: &NatKey, nat: &Nat) -> Result<(), XdpError>;
    /// Delete a NAT reply entry (absent is not an error).
    fn remove_nat(&mut self, key: &NatKey) -> Result<(), XdpError>;
    /// `fnat_pools[index] = pool` (a service's FULLNAT local addresses).
    fn set_fnat_pool(&mut self, index: u32, pool: &crate::maps::FnatPool) -> Result<(), XdpError>;
    /// Add (`present`) or remove a local address in `fnat_laddrs` (absent
    /// is not an error).
    fn set_fnat_laddr(&mut self, addr: std::net::IpAddr, present: bool) -> Result<(), XdpError>;
    /// Add (`present`) or remove one client source range of a service in
    /// `src_ranges` (absent is not an error).
    fn set_src_range(&mut self, key: &crate::maps::SrcKey, present: bool) -> Result<(), XdpError>;
    /// The client source ranges `src_ranges` holds for service `svc`.
    fn src_ranges_of(&mut self, svc: u32) -> Result<Vec<crate::maps::SrcKey>, XdpError>;
    /// The FULLNAT translation of flow `key` (`fnat_fwd`: its `fnat_rev`
    /// key, whose local address and port `-Lcn` shows), if any.
    fn fnat_of(&mut self, key: &FlowKey) -> Result<Option<crate::maps::FnatKey>, XdpError>;
    /// Delete flow `key`'s FULLNAT translation both ways (`fnat_fwd[key]`
    /// and `fnat_rev[rev]`; absent is not an error): its pair is free.
    fn remove_fnat(&mut self, key: &FlowKey, rev: &crate::maps::FnatKey) -> Result<(), XdpError>;
    /// Service `index`'s FULLNAT counters summed over CPUs (`fnat_stats`).
    fn fnat_stats(&mut self, index: u32) -> Result<crate::maps::FnatStats, XdpError>;
    /// Zero service `index`'s FULLNAT counters on every CPU (`fnat_stats`).
    fn reset_fnat_stats(&mut self, index: u32) -> Result<(), XdpError>;
    /// `quic_services[key] = index`: a QUIC-LB service's key (the program
    /// looks it up when `services` has none for the packet).
    fn set_quic_service(&mut self, key: &SvcKey, index: u32) -> Result<(), XdpError>;
    /// Delete `quic_services[key]` (an error when absent, as the kernel
    /// says).
    fn remove_quic_service(&mut self, key: &SvcKey) -> Result<(), XdpError>;
    /// `quic_lb[index] = value`: service `index`'s QUIC-LB configurations.
    fn set_quic_lb(&mut self, index: u32, value: &crate::quic_lb::QuicSvc) -> Result<(), XdpError>;
    /// Delete `quic_lb[index]` (absent is not an error).
    fn remove_quic_lb(&mut self, index: u32) -> Result<(), XdpError>;
    /// `quic_sids[key] = dest`: the real server (dest index) of a server ID.
    fn set_quic_sid(&mut self, key: &crate::quic_lb::QuicSidKey, dest: u32)
    -> Result<(), XdpError>;
    /// Delete `quic_sids[key]` (absent is not an error).
    fn remove_quic_sid(&mut self, key: &crate::quic_lb::QuicSidKey) -> Result<(), XdpError>;
    /// Service `index`'s QUIC-LB counters summed over CPUs (`quic_stats`).
    fn quic_stats(&mut self, index: u32) -> Result<crate::quic_lb::QuicStats, XdpError>;
    /// Call `f` for about `max` FULLNAT translations from `cursor` on
    /// (`fnat_rev`, then `fnat_fwd`; as [`MapOps::flows_page`]). Returns
    /// true when the walk reached the end: `cursor` then starts over.
    fn fnat_page(
        &mut self,
        cursor: &mut WalkCursor,
        max: usize,
        f: &mut dyn FnMut(FnatEntry),
    ) -> Result<bool, XdpError>;
    /// `fnat_rev[key]`, if present.
    fn fnat_rev(
        &mut self,
        key: &crate::maps::FnatKey,
    ) -> Result<Option<crate::maps::Fnat>, XdpError>;
    /// Claim pair `key` for the flow `value` names (`fnat_rev[key] =
    /// value` only if absent, `BPF_NOEXIST`, as the program claims one):
    /// false, nothing written, when a flow already holds it.
    fn claim_fnat(
        &mut self,
        key: &crate::maps::FnatKey,
        value: &crate::maps::Fnat,
    ) -> Result<bool, XdpError>;
    /// `fnat_fwd[flow] = rev`: flow `flow`'s FULLNAT translation is pair
    /// `rev` (claimed in `fnat_rev` first).
    fn set_fnat_fwd(&mut self, flow: &FlowKey, rev: &crate::maps::FnatKey) -> Result<(), XdpError>;
    /// Delete `fnat_rev[key]` (absent is not an error): the pair is free.
    fn remove_fnat_rev(&mut self, key: &crate::maps::FnatKey) -> Result<(), XdpError>;
    /// Delete `fnat_fwd[flow]` (absent is not an error).
    fn remove_fnat_fwd(&mut self, flow: &FlowKey) -> Result<(), XdpError>;
    /// Whether flow `key` is in a flow table (established or embryonic,
    /// of its family), expired or not.
    fn has_flow(&mut self, key: &FlowKey) -> Result<bool, XdpError>;
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
    /// Number of services the maps hold (`services`, `svc_info`, ...:
    /// [`crate::LoadOptions::max_services`]).
    fn services_len(&self) -> u32;
    /// What the maps hold of the control side's tables (the services,
    /// their scheduling descriptions and real-server lists, every real
    /// server in use, `config`): what a plane adopting maps a previous
    /// rvsd left pinned rebuilds its books from.
    fn read_installed(&mut self) -> Result<Installed, XdpError>;
}

/// One FULLNAT translation met by [`MapOps::fnat_page`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FnatEntry {
    /// `fnat_rev[key] = value`: a pair held, and the client side of the
    /// flow holding it.
    Rev(crate::maps::FnatKey, crate::maps::Fnat),
    /// `fnat_fwd[flow] = key`: a flow's pair (`lport` 0: the flow was
    /// refused, no pair).
    Fwd(FlowKey, crate::maps::FnatKey),
}

/// The control side's tables as [`MapOps::read_installed`] found them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Installed {
    /// `services` with each one's `svc_info` element and real-server
    /// list (the dest indexes its scheduling region starts with).
    pub services: Vec<(SvcKey, u32, Svc, Vec<u32>)>,
    /// `quic_services` (the QUIC-LB services), each as `services` is given.
    pub quic_services: Vec<(SvcKey, u32, Svc, Vec<u32>)>,
    /// Every `quic_sids` entry: a service index's server ID and its real
    /// server's dest index.
    pub quic_sids: Vec<(crate::quic_lb::QuicSidKey, u32)>,
    /// The FULLNAT pool (`fnat_pools`) of every service above that has one.
    pub fnat_pools: Vec<(u32, crate::maps::FnatPool)>,
    /// Every non-zero `dests` element.
    pub dests: Vec<(u32, Dest)>,
    /// `config[0]`.
    pub config: Config,
}

/// Where a walk of a table (the flow tables, the persistence templates)
/// that spans several reports stands.
#[derive(Clone, Debug, Default)]
pub struct WalkCursor {
    /// 0: `flows4`, 1: `flows`, 2: `embryonic4`, 3: `embryonic` (the
    /// FULLNAT walk: 0 `fnat_rev`, 1 `fnat_fwd`).
    pub(crate) table: u8,
    /// The kernel's batch token to resume `table` from (`None`: its start).
    pub(crate) token: Option<[u8; 64]>,
    /// In-memory maps: entries of the (sorted) table already given.
    #[cfg_attr(not(any(test, feature = "mem-maps")), allow(dead_code))]
    pub(crate) pos: usize,
}

/// A map error as [`XdpError::Map`].
pub(crate) fn map_error(map: &'static str, e: MapError) -> XdpError {
    XdpError::Map {
        map,
        source: Box::new(e),
    }
}
