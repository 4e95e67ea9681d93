//! What each policy costs a director: flow-table memory and sync traffic.
//!
//! # Entry sizes
//! The XDP plane keeps a flow in an LRU hash map: IPv4 flows in `flows4`
//! (key `Flow4Key`, 16 bytes; value `Flow`, 24 bytes), IPv6 ones in `flows`
//! (key `FlowKey`, 40 bytes; same value). A half-open flow (SYN seen) sits
//! in `embryonic4`/`embryonic` with the same layout, sized a quarter of the
//! flow table by default. The constants below are those sizes; a test
//! checks them against `size_of` of rvs-xdp's map types (the ABI check's
//! types). The kernel adds its own per-element header (`struct htab_elem`)
//! and an LRU map preallocates all `max_entries` elements: the memory is set
//! by `--flow-table-size`, which must cover the flows a director holds.
//!
//! # Sync messages
//! IPVS sync v1 (rvs-wire's `ipvs_sync`): an 8-byte header and a 36-byte
//! record per IPv4 connection (no options: no sequence data for DR/TUN, no
//! persistence engine), records 4-byte aligned (36 is), in UDP datagrams of
//! at most 1500 bytes of IP (rvsd's default: 1500 − 28 bytes of IPv4 and
//! UDP headers for the sync message), at most 255 records (`nr_conns` is a
//! byte). A director sends one record per new flow and one per live flow
//! every refresh period (rvsd: 30 s; state changes such as FIN add one
//! each, not counted), batched once per second (rvsd reads its table every
//! second), to a multicast group every director receives.

use rvs_wire::ipvs_sync::{V1_CONN_V4_LEN, V1_HEADER_LEN};

use crate::sim::Policy;

/// Bytes of an IPv4 flow-table key (`rvs_xdp::maps::Flow4Key`).
pub const FLOW4_KEY_LEN: usize = 16;
/// Bytes of an IPv6 flow-table key (`rvs_xdp::maps::FlowKey`).
pub const FLOW6_KEY_LEN: usize = 40;
/// Bytes of a flow-table value (`rvs_xdp::maps::Flow`).
pub const FLOW_VALUE_LEN: usize = 24;
/// Bytes of an IPv4 flow entry, key and value.
pub const FLOW4_ENTRY_LEN: usize = FLOW4_KEY_LEN + FLOW_VALUE_LEN;
/// IPv4 + UDP headers of a sync datagram.
pub const SYNC_IP_UDP_LEN: usize = 28;

/// The traffic and table parameters the costs depend on.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CostInput {
    /// Directors.
    pub directors: u16,
    /// Live flows across the fleet.
    pub flows: u64,
    /// The most flows one director holds (ECMP is not perfectly even).
    pub max_local_flows: u64,
    /// New flows per second across the fleet.
    pub new_flow_rate: f64,
    /// Seconds between two refreshes of a live flow's synced copy.
    pub refresh_s: f64,
    /// IP MTU of the sync link.
    pub mtu: usize,
}

/// What one policy costs.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyCost {
    /// The policy.
    pub policy: Policy,
    /// Flow entries one director must hold (the fullest one).
    pub entries_per_director: u64,
    /// Their bytes in the IPv4 flow table (keys + values), plus the
    /// embryonic table at a quarter of that size.
    pub table_bytes_per_director: u64,
    /// Sync records per second across the fleet.
    pub sync_records_per_s: f64,
    /// Sync datagrams per second across the fleet.
    pub sync_datagrams_per_s: f64,
    /// Sync bytes per second (IP packets) that each director receives.
    pub sync_rx_bytes_per_s_per_director: f64,
    /// Flow-table writes per second each director makes for peers' flows.
    pub sync_installs_per_s_per_director: f64,
}

/// Records that fit one sync datagram on a link of this MTU.
pub fn records_per_datagram(mtu: usize) -> usize {
    (mtu.saturating_sub(SYNC_IP_UDP_LEN + V1_HEADER_LEN) / V1_CONN_V4_LEN).clamp(1, 255)
}

/// The cost of `policy` for `c`.
pub fn cost(policy: Policy, c: &CostInput) -> PolicyCost {
    let d = f64::from(c.directors.max(1));
    let syncs = matches!(policy, Policy::Sync | Policy::Rvs);
    let entries = if syncs { c.flows } else { c.max_local_flows };
    let table = entries * FLOW4_ENTRY_LEN as u64;
    let table = table + table / 4;
    let (records, datagrams, rx, installs) = if syncs {
        let refresh = if c.refresh_s > 0.0 {
            c.flows as f64 / c.refresh_s
        } else {
            0.0
        };
        let records = c.new_flow_rate + refresh;
        // Each director batches its own share once a second.
        let per_dir = records / d;
        let datagrams = d * (per_dir / records_per_datagram(c.mtu) as f64).ceil();
        let bytes =
            records * V1_CONN_V4_LEN as f64 + datagrams * (V1_HEADER_LEN + SYNC_IP_UDP_LEN) as f64;
        let others = (d - 1.0) / d;
        (records, datagrams, bytes * others, records * others)
    } else {
        (0.0, 0.0, 0.0, 0.0)
    };
    PolicyCost {
        policy,
        entries_per_director: entries,
        table_bytes_per_director: table,
        sync_records_per_s: records,
        sync_datagrams_per_s: datagrams,
        sync_rx_bytes_per_s_per_director: rx,
        sync_installs_per_s_per_director: installs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_sizes_are_the_bpf_maps() {
        use rvs_xdp::maps::{Flow, Flow4Key, FlowKey};
        assert_eq!(FLOW4_KEY_LEN, size_of::<Flow4Key>());
        assert_eq!(FLOW6_KEY_LEN, size_of::<FlowKey>());
        assert_eq!(FLOW_VALUE_LEN, size_of::<Flow>());
    }

    #[test]
    fn sync_sizes_follow_ipvs_v1() {
        // (1500 - 28 - 8) / 36 = 40 records.
        assert_eq!(records_per_datagram(1500), 40);
        assert_eq!(records_per_datagram(9000), 249);
        assert_eq!(records_per_datagram(65_535), 255);
        let c = CostInput {
            directors: 4,
            flows: 1_200_000,
            max_local_flows: 300_000,
            new_flow_rate: 10_000.0,
            refresh_s: 30.0,
            mtu: 1500,
        };
        let s = cost(Policy::Sync, &c);
        // 10,000 new + 40,000 refreshes per second.
        assert_eq!(s.sync_records_per_s, 50_000.0);
        // 12,500 per director per second: 313 datagrams each.
        assert_eq!(s.sync_datagrams_per_s, 4.0 * 313.0);
        let bytes = 50_000.0 * 36.0 + 1252.0 * 36.0;
        assert_eq!(s.sync_rx_bytes_per_s_per_director, bytes * 0.75);
        assert_eq!(s.entries_per_director, 1_200_000);
        assert_eq!(s.table_bytes_per_director, 1_200_000 * 40 * 5 / 4);
        let a = cost(Policy::NoState, &c);
        assert_eq!(a.entries_per_director, 300_000);
        assert_eq!(a.sync_records_per_s, 0.0);
    }
}
