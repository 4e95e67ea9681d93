//! `sh`: source hashing (ip_vs_sh.c), with the `sh-port` and `sh-fallback`
//! flags.
//!
//! A 256-bucket table (`CONFIG_IP_VS_SH_TAB_BITS` = 8) maps a hash of the
//! client address (and, with `sh-port`, the client port) to a real server.
//! The table is rebuilt from scratch on every change of the list: buckets
//! 0..255 are handed out in list order, a server staying current until it has
//! filled `weight` consecutive buckets. A weight-0 server still gets exactly
//! one bucket (and is then "unavailable" at lookup), which is why quiescing a
//! server does not move any other client.
//!
//! # Hash form and kernel versions
//!
//! The bucket of `(addr, port, offset)` is
//! `(offset + hash_32(ntohs(port) + ntohl(addr_fold), 8)) & 255`, where
//! `hash_32(v, b) = (v * 0x61C88647 mod 2^32) >> (32 - b)` (include/linux/hash.h,
//! `GOLDEN_RATIO_32`, the generic form every architecture without
//! `HAVE_ARCH__HASH_32` uses, x86 and arm64 included). This is the form of the
//! current mainline `ip_vs_sh_hashkey`, found in SPDX-era sources (the
//! `GPL-2.0-or-later` header, i.e. ≥ v5.2, and in derived trees of recent
//! mainline); dh, lblc and lblcr use `hash_32` in the same sources.
//! Older kernels used `(offset + (ntohs(port) + ntohl(addr)) * 2654435761) & 255`
//! (the form that came with the sh-port/sh-fallback flags, 2013 patches by
//! Alexander Frolkin), and before that simply `(ntohl(saddr) * 2654435761) & 255`
//! with no port/offset; the oldest (2.6-era) tables even ignored weights (one
//! bucket per server). The stored torvalds/linux versions of ip_vs_sh.c
//! available to me were only old ones, so I could not pin the exact commit
//! or release that switched to `hash_32`: treat "current mainline = hash_32"
//! as verified, the boundary as "somewhere in 4.x/5.x". rvs implements only
//! the current form, so it agrees with a director running a current kernel.
//!
//! # Address folding
//!
//! IPv4: the address as a host-order `u32`. IPv6: the kernel XORs the four
//! 32-bit words as they lie in memory (network order) and then applies
//! `ntohl`; because a byte swap distributes over XOR this equals the XOR of
//! the four big-endian words, which is what [`addr_fold`] computes.
//!
//! # Fallback
//!
//! Without `sh-fallback` an unavailable hashed server means "no destination".
//! With it, starting from `ihash` (the plain bucket), offsets
//! `roff = (off + ihash) % 256` for `off` in 0..256 are tried, each looking up
//! bucket `hash(addr, port, roff)`; an empty bucket stops the search, the
//! first eligible server wins. Note the first retry uses `roff = ihash`, so it
//! looks at bucket `(2 * ihash) & 255` — exactly as the kernel does.

use std::net::IpAddr;

use super::{Algorithm, ListChange, SchedInput};
use crate::dest::Dest;
use crate::model::SchedFlags;
use crate::time::Instant;

/// `CONFIG_IP_VS_SH_TAB_BITS`.
pub const SH_TAB_BITS: u32 = 8;
/// Number of buckets.
const SH_TAB_SIZE: usize = 1 << SH_TAB_BITS;
/// Bucket mask.
const SH_TAB_MASK: u32 = (1 << SH_TAB_BITS) - 1;

/// `GOLDEN_RATIO_32` of include/linux/hash.h.
pub const GOLDEN_RATIO_32: u32 = 0x61C8_8647;

/// The kernel's `hash_32(val, bits)`: multiplicative hashing keeping the
/// high `bits` bits. `bits` must be 1..=32.
#[inline]
pub(super) const fn hash_32(val: u32, bits: u32) -> u32 {
    val.wrapping_mul(GOLDEN_RATIO_32) >> (32 - bits)
}

/// The kernel's address fold used by sh, dh, mh (and lblc/lblcr): IPv4 as a
/// host-order u32, IPv6 as the XOR of its four big-endian 32-bit words.
#[inline]
pub(super) fn addr_fold(addr: IpAddr) -> u32 {
    match addr {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(a) => {
            let x = u128::from(a);
            // Truncating casts select each 32-bit word on purpose.
            (x as u32) ^ ((x >> 32) as u32) ^ ((x >> 64) as u32) ^ ((x >> 96) as u32)
        }
    }
}

/// `ip_vs_sh_hashkey`: bucket for a folded address, host-order port and
/// fallback offset.
#[inline]
fn sh_hashkey(fold: u32, port: u16, offset: u32) -> usize {
    let h = hash_32(u32::from(port).wrapping_add(fold), SH_TAB_BITS);
    (offset.wrapping_add(h) & SH_TAB_MASK) as usize
}

/// Source-hashing state: the bucket table (positions in the list, `None` =
/// empty list) and the flags.
#[derive(Debug)]
pub(crate) struct SourceHash {
    flags: SchedFlags,
    buckets: Box<[Option<u32>; SH_TAB_SIZE]>,
}

impl SourceHash {
    /// A source-hashing scheduler with `sh-port` / `sh-fallback` taken from
    /// `flags`; the table is empty until the first [`Algorithm::update`].
    pub(crate) fn new(flags: SchedFlags) -> Self {
        SourceHash {
            flags,
            buckets: Box::new([None; SH_TAB_SIZE]),
        }
    }

    /// `ip_vs_sh_reassign`: refill every bucket from the list.
    fn reassign(&mut self, dests: &[Dest]) {
        if dests.is_empty() || dests.len() > u32::MAX as usize {
            self.buckets.fill(None);
            return;
        }
        let mut pos = 0usize;
        let mut count: u64 = 0;
        for b in self.buckets.iter_mut() {
            // `pos < dests.len() <= u32::MAX` (checked above).
            *b = Some(pos as u32);
            count += 1;
            if count >= u64::from(dests[pos].weight()) {
                pos = (pos + 1) % dests.len();
                count = 0;
            }
        }
    }

    /// The eligible server in `bucket`, `Err(())` for an empty bucket,
    /// `Ok(None)` for an unavailable one.
    #[inline]
    fn probe(&self, dests: &[Dest], bucket: usize) -> Result<Option<usize>, ()> {
        match self.buckets[bucket] {
            Some(p) => {
                let p = p as usize;
                match dests.get(p) {
                    Some(d) if d.is_eligible() => Ok(Some(p)),
                    Some(_) => Ok(None),
                    None => Err(()),
                }
            }
            None => Err(()),
        }
    }

    /// The bucket table as list positions (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> Vec<Option<u32>> {
        self.buckets.to_vec()
    }
}

impl Algorithm for SourceHash {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Sh
    }

    fn update(&mut self, dests: &[Dest], _change: ListChange) {
        self.reassign(dests);
    }

    fn schedule(&mut self, dests: &[Dest], input: &SchedInput, _now: Instant) -> Option<usize> {
        let fold = addr_fold(input.saddr);
        // TCP, UDP and SCTP all carry ports: every rvs protocol does.
        let port = if self.flags.contains(SchedFlags::SH_PORT) {
            input.sport
        } else {
            0
        };
        let ihash = sh_hashkey(fold, port, 0);
        let first = self.probe(dests, ihash).ok()?;
        if first.is_some() || !self.flags.contains(SchedFlags::SH_FALLBACK) {
            return first;
        }
        for off in 0..SH_TAB_SIZE {
            let roff = ((off + ihash) % SH_TAB_SIZE) as u32;
            match self.probe(dests, sh_hashkey(fold, port, roff)) {
                Err(()) => return None,
                Ok(Some(p)) => return Some(p),
                Ok(None) => {}
            }
        }
        None
    }

    fn lookup_table(&self) -> Option<Vec<Option<u32>>> {
        Some(self.buckets.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{dests, input, reset};
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn hash_32_matches_kernel_definition() {
        // 1 * 0x61C88647 >> 24 = 0x61; 0x0a010001 * GR mod 2^32 computed by hand:
        assert_eq!(hash_32(1, 8), 0x61);
        assert_eq!(hash_32(0, 8), 0);
        assert_eq!(hash_32(0xffff_ffff, 32), 0u32.wrapping_sub(GOLDEN_RATIO_32));
        assert_eq!(
            hash_32(0x0a01_0001, 8),
            ((0x0a01_0001u64 * 0x61C8_8647u64 % (1u64 << 32)) >> 24) as u32
        );
    }

    #[test]
    fn ipv6_fold_is_xor_of_big_endian_words() {
        let a: Ipv6Addr = "2001:db8:1:2:3:4:5:6"
            .parse()
            .unwrap_or(Ipv6Addr::UNSPECIFIED);
        assert_eq!(
            addr_fold(IpAddr::V6(a)),
            0x2001_0db8 ^ 0x0001_0002 ^ 0x0003_0004 ^ 0x0005_0006
        );
        assert_eq!(
            addr_fold(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
            0x0a01_0203
        );
    }

    #[test]
    fn weighted_fill_in_list_order() {
        let d = dests(&[3, 1, 2]);
        let s = reset(SourceHash::new(SchedFlags::default()), &d);
        let b = s.buckets();
        let expect: Vec<Option<u32>> = [0, 0, 0, 1, 2, 2, 0, 0, 0, 1, 2, 2]
            .iter()
            .map(|&x| Some(x))
            .collect();
        assert_eq!(&b[..12], &expect[..]);
        // 256 = 42 * 6 + 4: the last partial round is 0,0,0,1.
        assert_eq!(&b[252..], &[Some(0), Some(0), Some(0), Some(1)]);
        assert_eq!(b.iter().filter(|x| **x == Some(0)).count(), 42 * 3 + 3);
    }

    #[test]
    fn weight_zero_gets_one_bucket_and_is_never_returned() {
        let d = dests(&[2, 0, 1]);
        let mut s = reset(SourceHash::new(SchedFlags::default()), &d);
        let b = s.buckets();
        assert_eq!(
            &b[..8],
            &[
                Some(0),
                Some(0),
                Some(1),
                Some(2),
                Some(0),
                Some(0),
                Some(1),
                Some(2)
            ]
        );
        let mut none = 0;
        for c in 0..2000 {
            match s.schedule(&d, &input(c, 1000), Instant::ZERO) {
                Some(p) => assert_ne!(p, 1),
                None => none += 1,
            }
        }
        // About a quarter of the clients hash to the weight-0 bucket.
        assert!(none > 300 && none < 700, "{none}");
    }

    #[test]
    fn pinned_bucket_for_known_client() {
        // 10.1.0.5, port ignored: hash_32(0x0a010005, 8).
        let v = 0x0a01_0005u32.wrapping_mul(0x61C8_8647) >> 24;
        assert_eq!(sh_hashkey(0x0a01_0005, 0, 0), v as usize);
        assert_eq!(v, 0x35); // computed independently in Python
        let d = dests(&[1; 7]);
        let mut s = reset(SourceHash::new(SchedFlags::default()), &d);
        // One bucket per server: bucket b -> server b % 7.
        assert_eq!(
            s.schedule(&d, &input(5, 1234), Instant::ZERO),
            Some(0x35 % 7)
        );
    }

    #[test]
    fn fallback_finds_next_available() {
        let mut d = dests(&[1, 1, 1, 1]);
        let mut plain = SourceHash::new(SchedFlags::default());
        let mut fb = SourceHash::new(SchedFlags::SH_FALLBACK);
        plain.update(&d, ListChange::Reset);
        fb.update(&d, ListChange::Reset);
        // Find a client going to server 2, then take server 2 out.
        let c = (0..1000)
            .find(|&c| plain.schedule(&d, &input(c, 1), Instant::ZERO) == Some(2))
            .unwrap_or(0);
        d[2].overloaded = true;
        assert_eq!(plain.schedule(&d, &input(c, 1), Instant::ZERO), None);
        // Independent computation of the kernel's fallback walk.
        let fold = addr_fold(input(c, 1).saddr);
        let ihash = sh_hashkey(fold, 0, 0);
        let expect = (0..256)
            .map(|off| sh_hashkey(fold, 0, ((off + ihash) % 256) as u32) % 4)
            .find(|&p| p != 2);
        let got = fb.schedule(&d, &input(c, 1), Instant::ZERO);
        assert_eq!(got, expect);
        assert_ne!(got, Some(2));
        // Eligible original server: fallback changes nothing.
        d[2].overloaded = false;
        assert_eq!(fb.schedule(&d, &input(c, 1), Instant::ZERO), Some(2));
        // Everything unavailable: None.
        for x in &mut d {
            x.overloaded = true;
        }
        assert_eq!(fb.schedule(&d, &input(c, 1), Instant::ZERO), None);
    }

    #[test]
    fn sh_port_changes_choice_with_port() {
        let d = dests(&[1; 16]);
        let mut noport = SourceHash::new(SchedFlags::default());
        let mut port = SourceHash::new(SchedFlags::SH_PORT);
        noport.update(&d, ListChange::Reset);
        port.update(&d, ListChange::Reset);
        let a: Vec<_> = (0..64u16)
            .map(|p| noport.schedule(&d, &input(7, 1000 + p), Instant::ZERO))
            .collect();
        assert!(a.iter().all(|x| *x == a[0]));
        let b: Vec<_> = (0..64u16)
            .map(|p| port.schedule(&d, &input(7, 1000 + p), Instant::ZERO))
            .collect();
        assert!(b.iter().any(|x| *x != b[0]));
        // Exact: bucket = hash_32(port + addr, 8).
        let fold = 0x0a01_0007u32;
        for (i, got) in b.iter().enumerate() {
            let bucket = hash_32((1000 + i as u32).wrapping_add(fold), 8) as usize;
            assert_eq!(*got, Some(bucket % 16));
        }
    }

    #[test]
    fn empty_list_gives_none() {
        let d = dests(&[]);
        let mut s = reset(SourceHash::new(SchedFlags::SH_FALLBACK), &d);
        assert_eq!(s.schedule(&d, &input(1, 1), Instant::ZERO), None);
    }
}
