//! `dh`: destination hashing (ip_vs_dh.c).
//!
//! A 256-bucket table (`CONFIG_IP_VS_DH_TAB_BITS` = 8) maps a hash of the
//! packet's *destination* address to a real server, so every connection to
//! one destination (e.g. one origin server behind a cache cluster) lands on
//! the same cache. The table is rebuilt on every change of the list: one
//! bucket per server round robin in list order, **weights ignored** (unlike
//! `sh`). A chosen server that is not eligible (weight 0, overloaded) means
//! "no destination"; there are no flags and no fallback.
//!
//! The bucket is `hash_32(ntohl(daddr_fold), 8)` with the kernel's
//! `GOLDEN_RATIO_32` multiplicative hash; IPv6 addresses are folded by XOR of
//! their four 32-bit words. This is the current mainline form; older kernels
//! used `(ntohl(daddr) * 2654435761) & 255`. See the `sh`
//! module for how the kernel version boundary was established.

use super::sh::{addr_fold, hash_32};
use super::{Algorithm, ListChange, SchedInput};
use crate::dest::Dest;
use crate::time::Instant;

/// `CONFIG_IP_VS_DH_TAB_BITS`.
pub const DH_TAB_BITS: u32 = 8;
/// Number of buckets.
const DH_TAB_SIZE: usize = 1 << DH_TAB_BITS;

/// Destination-hashing state: the bucket table as list positions (`None` =
/// empty list).
#[derive(Debug)]
pub(crate) struct DestHash {
    buckets: Box<[Option<u32>; DH_TAB_SIZE]>,
}

impl DestHash {
    /// A destination-hashing scheduler; the table is empty until the first
    /// [`Algorithm::update`].
    pub(crate) fn new() -> Self {
        DestHash {
            buckets: Box::new([None; DH_TAB_SIZE]),
        }
    }

    /// The bucket table as list positions (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> Vec<Option<u32>> {
        self.buckets.to_vec()
    }
}

impl Default for DestHash {
    fn default() -> Self {
        Self::new()
    }
}

impl Algorithm for DestHash {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Dh
    }

    fn update(&mut self, dests: &[Dest], _change: ListChange) {
        let n = dests.len();
        if n == 0 || n > u32::MAX as usize {
            self.buckets.fill(None);
            return;
        }
        for (i, b) in self.buckets.iter_mut().enumerate() {
            // `i % n < n <= u32::MAX`.
            *b = Some((i % n) as u32);
        }
    }

    fn schedule(&mut self, dests: &[Dest], input: &SchedInput, _now: Instant) -> Option<usize> {
        let bucket = hash_32(addr_fold(input.daddr), DH_TAB_BITS) as usize;
        let pos = self.buckets[bucket]? as usize;
        dests.get(pos).filter(|d| d.is_eligible()).map(|_| pos)
    }

    fn lookup_table(&self) -> Option<Vec<Option<u32>>> {
        Some(self.buckets.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{dests, input, reset};
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn one_bucket_per_dest_weights_ignored() {
        let d = dests(&[5, 1, 3]);
        let s = reset(DestHash::new(), &d);
        let b = s.buckets();
        for (i, x) in b.iter().enumerate() {
            assert_eq!(*x, Some((i % 3) as u32));
        }
    }

    #[test]
    fn keyed_by_destination_address_only() {
        let d = dests(&[1; 10]);
        let mut s = reset(DestHash::new(), &d);
        // Different clients, same VIP: same server.
        let first = s.schedule(&d, &input(0, 1), Instant::ZERO);
        for c in 1..100 {
            assert_eq!(s.schedule(&d, &input(c, c as u16), Instant::ZERO), first);
        }
        // 192.0.2.1 -> hash_32(0xc0000201, 8), computed in Python: 0x32.
        assert_eq!(hash_32(0xc000_0201, 8), 0x32);
        assert_eq!(first, Some(0x32 % 10));
        // Another destination address.
        let mut inp = input(0, 1);
        inp.daddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
        let bucket = hash_32(0xc633_6407, 8) as usize;
        assert_eq!(s.schedule(&d, &inp, Instant::ZERO), Some(bucket % 10));
    }

    #[test]
    fn ineligible_gives_none() {
        let mut d = dests(&[1; 10]);
        let mut s = reset(DestHash::new(), &d);
        let p = s.schedule(&d, &input(0, 1), Instant::ZERO).unwrap_or(0);
        d[p].config.weight = 0;
        s.update(&d, ListChange::Edited(p));
        assert_eq!(s.schedule(&d, &input(0, 1), Instant::ZERO), None);
        let empty = dests(&[]);
        s.update(&empty, ListChange::Reset);
        assert_eq!(s.schedule(&empty, &input(0, 1), Instant::ZERO), None);
    }
}
