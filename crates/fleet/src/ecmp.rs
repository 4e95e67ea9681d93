//! The upstream router's choice of director for a flow: equal-cost
//! multipath over the directors that announce the VIP.
//!
//! Two models of Linux's forwarding, both fed a 31-bit flow hash (the
//! kernel's `fib_multipath_hash` is the L3/L4 flow hash shifted right by one):
//!
//! * [`EcmpKind::HashThreshold`] — what a multipath route does by default
//!   (RFC 2992, `fib_select_multipath` and the nexthop objects' `mpath`
//!   groups). What FRR's zebra installs for a BGP route with
//!   `maximum-paths` and what BIRD's kernel protocol installs are such
//!   groups. Nexthop `k` of `D` (equal weights) owns the hashes up to
//!   `upper_bound(k) = round((k + 1) * 2^31 / D) - 1`; a packet goes to the
//!   first nexthop whose bound is at least its hash. The hash space is cut
//!   into `D` contiguous ranges, so adding or removing one nexthop shifts the
//!   boundaries of all the others: appending the `(D+1)`th moves exactly
//!   half of the hash space (not `D/(D+1)` as `hash % D` would), removing
//!   one from the middle moves about half too.
//! * [`EcmpKind::Resilient`] — a `resilient` nexthop group (`ip nexthop add
//!   id N group A/B/C type resilient buckets B`, Linux 5.13+; FRR's
//!   `nexthop-group` `resilient buckets ...`, only for groups configured as
//!   such, never by default): `B` buckets, `hash % B` picks a bucket, each
//!   bucket names a nexthop. A removed nexthop's buckets are handed to the
//!   others; an added one takes buckets from the over-full ones; no other
//!   bucket changes owner. The kernel only moves a bucket that has been idle
//!   for `idle_timer` (120 s by default) unless `unbalanced_timer` (0 = never
//!   by default) forces it: with long-lived busy flows a new nexthop gets
//!   **no** buckets under the defaults. The model shows the group after the
//!   migration (as with `unbalanced_timer` set), the worst case for flows.
//!
//! The router's hash itself is modelled by a fixed bijective mix of the
//! 5-tuple ([`crate::rng::mix64`]); Linux seeds its flow hash randomly at
//! boot, so only its uniformity matters, not its values.

use std::collections::BTreeMap;

/// Size of the hash space: hashes are in `0..HASH_SPACE` (31 bits).
pub const HASH_SPACE: u64 = 1 << 31;

/// Which ECMP algorithm the upstream router runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EcmpKind {
    /// Linux's default multipath: contiguous hash ranges.
    HashThreshold,
    /// A resilient nexthop group with this many buckets.
    Resilient {
        /// Bucket count (`buckets` of `ip nexthop`; FRR allows 1..=256).
        buckets: u32,
    },
}

impl core::fmt::Display for EcmpKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EcmpKind::HashThreshold => f.write_str("hash-threshold"),
            EcmpKind::Resilient { buckets } => write!(f, "resilient ({buckets} buckets)"),
        }
    }
}

/// Why an ECMP group could not be built or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EcmpError {
    /// A group needs at least one nexthop.
    #[error("an ECMP group needs at least one nexthop")]
    Empty,
    /// A resilient group needs at least as many buckets as nexthops.
    #[error("{buckets} buckets cannot hold {nexthops} nexthops")]
    TooFewBuckets {
        /// Buckets asked for.
        buckets: u32,
        /// Nexthops in the group.
        nexthops: usize,
    },
    /// The director is already in the group (add) or not in it (remove).
    #[error("director {0} is {1} the group")]
    Membership(u16, &'static str),
}

/// One ECMP group: the directors (by id) in nexthop order and how a hash
/// picks one of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ecmp {
    kind: EcmpKind,
    members: Vec<u16>,
    /// Hash-threshold: upper bound of each member, in member order.
    bounds: Vec<u32>,
    /// Resilient: the director of each bucket.
    buckets: Vec<u16>,
}

impl Ecmp {
    /// A group of `members` (director ids, in nexthop order), freshly
    /// balanced.
    pub fn new(kind: EcmpKind, members: &[u16]) -> Result<Self, EcmpError> {
        if members.is_empty() {
            return Err(EcmpError::Empty);
        }
        let buckets = match kind {
            EcmpKind::HashThreshold => Vec::new(),
            EcmpKind::Resilient { buckets } => {
                if (buckets as usize) < members.len() {
                    return Err(EcmpError::TooFewBuckets {
                        buckets,
                        nexthops: members.len(),
                    });
                }
                (0..buckets as usize)
                    .map(|b| members[b % members.len()])
                    .collect()
            }
        };
        Ok(Ecmp {
            kind,
            bounds: threshold_bounds(members.len()),
            members: members.to_vec(),
            buckets,
        })
    }

    /// The algorithm.
    pub fn kind(&self) -> EcmpKind {
        self.kind
    }

    /// The directors in nexthop order.
    pub fn members(&self) -> &[u16] {
        &self.members
    }

    /// The director a packet with this 31-bit hash goes to.
    pub fn select(&self, hash: u32) -> u16 {
        match self.kind {
            EcmpKind::HashThreshold => {
                let k = self.bounds.partition_point(|&ub| ub < hash);
                self.members[k.min(self.members.len() - 1)]
            }
            EcmpKind::Resilient { buckets } => self.buckets[(hash % buckets) as usize],
        }
    }

    /// The group after director `id` joined. Hash-threshold: appended (its
    /// address sorts last), every range is recomputed. Resilient: it takes
    /// buckets, one at a time, from the director holding the most (the
    /// highest-numbered bucket of it), until it holds its share.
    pub fn with_added(&self, id: u16) -> Result<Self, EcmpError> {
        if self.members.contains(&id) {
            return Err(EcmpError::Membership(id, "already in"));
        }
        let mut members = self.members.clone();
        members.push(id);
        let mut next = Ecmp {
            kind: self.kind,
            bounds: threshold_bounds(members.len()),
            buckets: self.buckets.clone(),
            members,
        };
        if let EcmpKind::Resilient { buckets } = self.kind {
            let want = buckets as usize / next.members.len();
            if want == 0 {
                return Err(EcmpError::TooFewBuckets {
                    buckets,
                    nexthops: next.members.len(),
                });
            }
            for _ in 0..want {
                let counts = next.bucket_counts();
                // The fullest donor (lowest id among equals).
                let Some((&donor, _)) = counts
                    .iter()
                    .filter(|&(&d, _)| d != id)
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                else {
                    break;
                };
                if let Some(b) = next.buckets.iter().rposition(|&d| d == donor) {
                    next.buckets[b] = id;
                }
            }
        }
        Ok(next)
    }

    /// The group after director `id` left (withdrawn or dead).
    /// Hash-threshold: the ranges of the others are recomputed. Resilient:
    /// each of its buckets goes to the director then holding the fewest.
    pub fn with_removed(&self, id: u16) -> Result<Self, EcmpError> {
        let Some(pos) = self.members.iter().position(|&d| d == id) else {
            return Err(EcmpError::Membership(id, "not in"));
        };
        let mut members = self.members.clone();
        members.remove(pos);
        if members.is_empty() {
            return Err(EcmpError::Empty);
        }
        let mut next = Ecmp {
            kind: self.kind,
            bounds: threshold_bounds(members.len()),
            buckets: self.buckets.clone(),
            members,
        };
        for b in 0..next.buckets.len() {
            if next.buckets[b] == id {
                let counts = next.bucket_counts();
                let taker = next
                    .members
                    .iter()
                    .copied()
                    .min_by_key(|d| (counts.get(d).copied().unwrap_or(0), *d))
                    .unwrap_or(id);
                next.buckets[b] = taker;
            }
        }
        Ok(next)
    }

    /// Buckets per director (resilient groups; empty for hash-threshold).
    fn bucket_counts(&self) -> BTreeMap<u16, usize> {
        let mut m: BTreeMap<u16, usize> = self.members.iter().map(|&d| (d, 0)).collect();
        for d in &self.buckets {
            if let Some(c) = m.get_mut(d) {
                *c += 1;
            }
        }
        m
    }

    /// The share of the hash space that goes to director `id`, exactly.
    pub fn share_of(&self, id: u16) -> f64 {
        self.owned_spans()
            .iter()
            .filter(|s| s.2 == id)
            .map(|s| (s.1 - s.0) as f64)
            .sum::<f64>()
            / HASH_SPACE as f64
    }

    /// The share of the hash space that `self` and `other` send to the
    /// same director, exactly (every 31-bit hash counted once): under
    /// uniform hashing, the expected share of flows an ECMP change from
    /// `self` to `other` does not move. `None` when the two groups are not
    /// of the same kind (and bucket count).
    pub fn kept_share(&self, other: &Ecmp) -> Option<f64> {
        let kept: u64 = match (self.kind, other.kind) {
            (EcmpKind::Resilient { buckets: a }, EcmpKind::Resilient { buckets: b }) if a == b => {
                (0..u64::from(a))
                    .filter(|&k| self.buckets[k as usize] == other.buckets[k as usize])
                    .map(|k| bucket_hashes(k, u64::from(a)))
                    .sum()
            }
            (EcmpKind::HashThreshold, EcmpKind::HashThreshold) => {
                let (x, y) = (self.owned_spans(), other.owned_spans());
                let (mut i, mut j, mut kept) = (0, 0, 0u64);
                while i < x.len() && j < y.len() {
                    let lo = x[i].0.max(y[j].0);
                    let hi = x[i].1.min(y[j].1);
                    if hi > lo && x[i].2 == y[j].2 {
                        kept += hi - lo;
                    }
                    if x[i].1 <= y[j].1 {
                        i += 1;
                    } else {
                        j += 1;
                    }
                }
                kept
            }
            _ => return None,
        };
        Some(kept as f64 / HASH_SPACE as f64)
    }

    /// Hash-threshold: the hash space as sorted spans `[lo, hi)` with their
    /// director. Resilient: one span per bucket on a virtual axis where
    /// bucket `k` owns as many consecutive values as there are hashes
    /// `h % B == k` (sizes are right, positions are not: enough for shares).
    fn owned_spans(&self) -> Vec<(u64, u64, u16)> {
        match self.kind {
            EcmpKind::HashThreshold => {
                let mut lo = 0u64;
                self.members
                    .iter()
                    .zip(&self.bounds)
                    .map(|(&d, &ub)| {
                        let hi = u64::from(ub) + 1;
                        let s = (lo, hi.max(lo), d);
                        lo = hi.max(lo);
                        s
                    })
                    .collect()
            }
            EcmpKind::Resilient { buckets } => {
                let mut lo = 0u64;
                self.buckets
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| {
                        let hi = lo + bucket_hashes(k as u64, u64::from(buckets));
                        let s = (lo, hi, d);
                        lo = hi;
                        s
                    })
                    .collect()
            }
        }
    }
}

/// How many 31-bit hashes `h` have `h % buckets == k`.
fn bucket_hashes(k: u64, buckets: u64) -> u64 {
    (HASH_SPACE - 1 - k) / buckets + 1
}

/// The kernel's upper bounds for `n` equal-weight nexthops:
/// `DIV_ROUND_CLOSEST((k + 1) << 31, n) - 1`.
fn threshold_bounds(n: usize) -> Vec<u32> {
    let n = n as u64;
    (1..=n)
        .map(|w| (((w << 31) + n / 2) / n - 1) as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u16) -> Vec<u16> {
        (0..n).collect()
    }

    #[test]
    fn threshold_ranges_are_even_and_cover_the_space() {
        let e = Ecmp::new(EcmpKind::HashThreshold, &ids(3)).unwrap();
        assert_eq!(e.select(0), 0);
        assert_eq!(e.select((HASH_SPACE - 1) as u32), 2);
        // round(2^31/3) - 1 = 715827882.
        assert_eq!(e.select(715_827_882), 0);
        assert_eq!(e.select(715_827_883), 1);
        let total: f64 = (0..3).map(|d| e.share_of(d)).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert!((e.share_of(1) - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn appending_to_hash_threshold_keeps_exactly_half() {
        for d in [1u16, 2, 3, 10, 99] {
            let a = Ecmp::new(EcmpKind::HashThreshold, &ids(d)).unwrap();
            let b = a.with_added(d).unwrap();
            // sum_k ((k+1)/(D+1) - k/D) over k < D = 1/2.
            assert!((a.kept_share(&b).unwrap() - 0.5).abs() < 1e-8, "D={d}");
            assert!((b.kept_share(&a).unwrap() - 0.5).abs() < 1e-8);
        }
        // Removing the middle one of three: 0 [0,1/3), 1 [1/3,2/3), 2 [2/3,1)
        // become 0 [0,1/2), 2 [1/2,1): 0 keeps [0,1/3), 2 keeps [2/3,1): 2/3.
        let a = Ecmp::new(EcmpKind::HashThreshold, &ids(3)).unwrap();
        let b = a.with_removed(1).unwrap();
        assert!((a.kept_share(&b).unwrap() - 2.0 / 3.0).abs() < 1e-8);
    }

    #[test]
    fn resilient_moves_only_the_changed_directors_buckets() {
        let kind = EcmpKind::Resilient { buckets: 128 };
        let a = Ecmp::new(kind, &ids(4)).unwrap();
        let b = a.with_removed(2).unwrap();
        // Only director 2's quarter moves.
        assert!((a.kept_share(&b).unwrap() - 0.75).abs() < 1e-3);
        for k in 0..128 {
            if a.buckets[k] != 2 {
                assert_eq!(a.buckets[k], b.buckets[k]);
            }
        }
        let c = a.with_added(4).unwrap();
        // 128 / 5 = 25 buckets taken, all to the new director.
        assert_eq!(c.buckets.iter().filter(|&&d| d == 4).count(), 25);
        for k in 0..128 {
            assert!(c.buckets[k] == a.buckets[k] || c.buckets[k] == 4);
        }
        assert!((a.kept_share(&c).unwrap() - (128.0 - 25.0) / 128.0).abs() < 1e-3);
        // Balanced within one bucket after the change.
        let counts = c.bucket_counts();
        let (lo, hi) = (
            counts.values().min().unwrap(),
            counts.values().max().unwrap(),
        );
        assert!(hi - lo <= 1, "{counts:?}");
    }

    #[test]
    fn bad_groups_are_errors() {
        assert_eq!(
            Ecmp::new(EcmpKind::HashThreshold, &[]),
            Err(EcmpError::Empty)
        );
        let r = EcmpKind::Resilient { buckets: 2 };
        assert!(matches!(
            Ecmp::new(r, &ids(3)),
            Err(EcmpError::TooFewBuckets { .. })
        ));
        let a = Ecmp::new(r, &ids(2)).unwrap();
        assert!(a.with_added(2).is_err());
        assert!(a.with_added(1).is_err());
        assert!(a.with_removed(7).is_err());
        let one = Ecmp::new(EcmpKind::HashThreshold, &[5]).unwrap();
        assert_eq!(one.with_removed(5), Err(EcmpError::Empty));
    }
}
