//! `mh`: Maglev hashing (ip_vs_mh.c, Eisenbud et al., NSDI '16 §3.4), with
//! the `mh-port` and `mh-fallback` flags.
//!
//! Every real server gets a permutation of the `M` table slots (`M` prime)
//! from two hashes of *its own* address and port; the table is filled by
//! letting the servers, in list order, claim their next preferred free slot,
//! `turns` slots per round. A client is then sent to
//! `table[hash1(client addr[, port]) % M]`. Because the permutations depend
//! only on the servers' addresses, two directors with the same server list
//! build the same table — the point of this module is that an rvs director
//! and a Linux kernel director (64-bit) in one ECMP group agree bit for bit.
//!
//! # Hash
//!
//! `hash(key, addr, port, offset) = hsiphash(&v, 4, key)` with the u32
//! `v = offset + ntohs(port) + ntohl(addr_fold)` (wrapping; IPv6 folded by XOR
//! of the four words, see the `sh` module) passed as its 4 host-order bytes
//! (little-endian on x86-64 and arm64). On 64-bit kernels `hsiphash` is
//! SipHash-1-3 with the two `unsigned long` key words as the 64-bit keys and
//! the 64-bit result truncated to u32 (lib/siphash.c; 32-bit kernels use
//! HalfSipHash-1-3 and build different tables — rvs follows 64-bit kernels).
//! Keys: `hash1 = {2654435761, 2654435761}`, `hash2 = {2654446892, 2654446892}`.
//! Verified: the `siphasher` crate's `SipHasher13` reproduces the kernel's
//! 64-bit `hsiphash` self-test vectors (lib/siphash_kunit.c, key
//! `0x0706050403020100, 0x0f0e0d0c0b0a0908`, inputs `0, 1, .., i-1` for
//! i = 0..63) — see `hsiphash_matches_kernel_self_test_vectors` — and an
//! independent SipHash-1-3 written from the paper in the tests agrees too.
//!
//! # Table
//!
//! * `offset = hash1(rs_addr, rs_port, 0) % M`,
//!   `skip = hash2(rs_addr, rs_port, 0) % (M - 1) + 1`, the walk is
//!   `perm += skip; if perm >= M { perm -= M }` (no `%` in the hot loop).
//! * Weights come from [`Dest::last_weight`] (the latest non-zero weight), so
//!   quiescing a server (weight 0) does not reshuffle the table; it is only
//!   "unavailable" at lookup. `gcd` over the non-zero last weights,
//!   `rshift = max(0, fls(max_last_weight / gcd) - TAB_BITS)`,
//!   `turns = (last_weight / gcd) >> rshift`, at least 1 when
//!   `last_weight != 0`, 0 (never placed) when it is 0.
//! * `TAB_BITS`: the kernel uses `CONFIG_IP_VS_MH_TAB_INDEX / 2` where its
//!   prime is `primes[INDEX - 8]`, always the largest prime below `2^INDEX`;
//!   so `INDEX` = the bit length of `M` for every kernel prime (251 → 8,
//!   4093 → 12, 65521 → 16, 131071 → 17). rvs uses `bit_length(M) / 2` for
//!   any prime `M`, which equals the kernel's value for all kernel sizes and
//!   gives 8 for the rvs-only 65537.
//! * More servers than slots (`num_dests > M`): the kernel refuses the change
//!   with `-EINVAL` (and its old table stays in place). `update` cannot fail
//!   here, so rvs keeps an **empty** table and every lookup returns `None`
//!   until the list fits again.
//! * Table sizes: any prime `2 <= M <= 2^24` (the kernel offers 251 .. 131071;
//!   other primes such as 65537 are an rvs extension). Non-primes are refused
//!   by [`Maglev::new`].
//!
//! # Lookup and fallback
//!
//! `d = table[hash1(saddr, port, 0) % M]`, `port` = client port with
//! `mh-port`, else 0. An ineligible `d` fails unless `mh-fallback`: then for
//! `off` in 0..M, `roff = (off + ihash) % M`, look at
//! `table[hash1(saddr, port, roff) % M]`; an empty slot stops, the first
//! eligible server wins.
//!
//! # Measured properties (see the tests)
//!
//! * Equal weights: every server owns `floor(M/N)` or `ceil(M/N)` slots — the
//!   first `M mod N` servers in list order get the extra slot, because the
//!   fill goes round by round and stops mid-round.
//! * Disruption when one of N equal-weight servers is removed: the fraction
//!   of the *other* servers' slots that change owner (servers
//!   (10.0.0.0 + i + 1):80; worst of removing the first, middle or last
//!   server; tests pin these with headroom):
//!
//!   | M     | N=10  | N=100 | N=1000 |
//!   |-------|-------|-------|--------|
//!   | 4093  | 1.3 % | 3.1 % | 0.6 %  |
//!   | 65537 | 0.2 % | 0.5 % | 0.6 %  |
//!
//!
//! # Build speed
//!
//! The result is exactly the kernel's walk (checked against a literal
//! transcription of the kernel loop in the tests, including a property
//! test), computed faster in three phases, chosen by the number of free
//! slots `F`:
//!
//! 1. `F > M/2`: plain probing with a bitmap (`M/64` words, L1-resident) and
//!    `perm += skip; if perm >= M { perm -= M }` — no `%`.
//! 2. `F <= M/2`: probing eight candidates per step
//!    (`perm + k*skip`, precomputed `k*skip mod M`), gathering their bits into
//!    a mask so one branch covers eight probes (fewer mispredictions).
//! 3. `F <= sqrt(M)/2`: instead of ~`M/F` probes per placement, pick among the
//!    `F` free slots the one the server's walk reaches first: the smallest
//!    `(slot - perm) * skip^-1 mod M` (M prime, so `skip` is invertible).
//!
//! Also, the walk restarts one step after the last placed slot (the kernel
//! re-tests that slot, which is always filled).
//! Measured with `cargo bench --bench maglev` (criterion, 2-core 2.6 GHz
//! EPYC VM shared with other builds, so noisy): M = 65537: N = 100 ≈ 0.67 ms,
//! N = 1000 ≈ 0.70–0.84 ms; M = 4093, N = 100 ≈ 31–34 µs. The plain kernel
//! loop took ≈ 1.06–1.13 ms at M = 65537 on the same machine. (The Maglev
//! paper reports 1.8 ms for M = 65537, N = 1000.)

use siphasher::sip::SipHasher13;
use std::hash::Hasher;

use super::sh::addr_fold;
use super::{Algorithm, ListChange, SchedError, SchedInput};
use crate::dest::Dest;
use crate::model::SchedFlags;
use crate::time::Instant;

/// Key words of the kernel's `hash1` (both words equal).
pub const HASH1_KEY: u64 = 2_654_435_761;
/// Key words of the kernel's `hash2` (both words equal).
pub const HASH2_KEY: u64 = 2_654_446_892;
/// Largest table size rvs accepts (memory bound: 4 bytes per slot).
const MAX_TABLE_SIZE: u32 = 1 << 24;
/// Marks an empty slot.
const EMPTY: u32 = u32::MAX;

/// The kernel's 64-bit `hsiphash(&v, 4, {key, key})`.
#[inline]
fn hsiphash_u32(key: u64, v: u32) -> u32 {
    let mut h = SipHasher13::new_with_keys(key, key);
    h.write(&v.to_le_bytes());
    // Truncation to the low 32 bits is what the kernel's u32 return does.
    h.finish() as u32
}

/// `ip_vs_mh_hashkey`.
#[inline]
fn mh_hashkey(fold: u32, port: u16, key: u64, offset: u32) -> u32 {
    hsiphash_u32(key, offset.wrapping_add(u32::from(port)).wrapping_add(fold))
}

/// `fls`: 1-based index of the highest set bit, 0 for 0.
#[inline]
const fn fls(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// Is `n` a prime? Trial division; `n <= 2^24` so at most ~2000 divisions.
fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    if n.is_multiple_of(2) {
        return n == 2;
    }
    let mut d = 3u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Free-slot count below which the build stops probing and instead picks,
/// among the remaining free slots, the one each permutation reaches first
/// (one multiplication and `%` per free slot instead of ~M/free probes).
fn tail_threshold(m: u32) -> u32 {
    (m.isqrt() / 2).max(1)
}

/// `(a + b) mod m` for `a, b < m <= 2^24`.
#[inline(always)]
fn add_mod(a: u32, b: u32, m: u32) -> u32 {
    let x = a + b;
    if x >= m { x - m } else { x }
}

/// First free slot on the walk `c, c + skip, c + 2 skip, ...` (mod `m`),
/// one probe at a time. A free slot exists.
#[inline(always)]
fn probe_free_scalar(filled: &[u64], mut c: u32, skip: u32, m: u32) -> u32 {
    while (filled[(c >> 6) as usize] >> (c & 63)) & 1 != 0 {
        c = add_mod(c, skip, m);
    }
    c
}

/// As [`probe_free_scalar`], eight probes per branch;
/// `steps = [1, 2, .., 8] * skip mod m`.
#[inline(always)]
fn probe_free(filled: &[u64], mut c: u32, steps: &[u32; 8], m: u32) -> u32 {
    let bit = |c: u32| (filled[(c >> 6) as usize] >> (c & 63)) as u32 & 1;
    loop {
        let mut cs = [c; 8];
        let mut full = bit(c);
        for k in 1..8 {
            cs[k] = add_mod(c, steps[k - 1], m);
            full |= bit(cs[k]) << k;
        }
        if full != 0xff {
            return cs[(!full).trailing_zeros() as usize & 7];
        }
        c = add_mod(c, steps[7], m);
    }
}

/// All free slots (zero bits below `m`) into `out`.
fn collect_free(filled: &[u64], m: u32, out: &mut Vec<u32>) {
    for (w, &bits) in filled.iter().enumerate() {
        let mut zeros = !bits;
        while zeros != 0 {
            let c = (w as u32) * 64 + zeros.trailing_zeros();
            if c >= m {
                break;
            }
            out.push(c);
            zeros &= zeros - 1;
        }
    }
}

/// `a^-1 mod m` for a prime `m` and `1 <= a < m` (extended Euclid).
fn mod_inverse(a: u32, m: u32) -> u32 {
    let (mut r0, mut r1) = (i64::from(m), i64::from(a));
    let (mut t0, mut t1) = (0i64, 1i64);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    // `t0` is in (-m, m); the result is in [0, m).
    t0.rem_euclid(i64::from(m)) as u32
}

/// Index in `free` of the slot a walk from `perm` with step `inv^-1` reaches
/// first: the slot `j` minimising `(j - perm) * inv mod m`. `free` is not
/// empty (some slot is free while the table is not full).
fn first_on_walk(free: &[u32], perm: u32, inv: u32, m: u32) -> usize {
    let (m64, inv64) = (u64::from(m), u64::from(inv));
    let mut best = (u64::MAX, 0usize);
    for (k, &j) in free.iter().enumerate() {
        let d = if j >= perm { j - perm } else { j + m - perm };
        // d, inv < m <= 2^24: the product fits in u64.
        let t = u64::from(d) * inv64 % m64;
        if t < best.0 {
            best = (t, k);
        }
    }
    best.1
}

/// Per-server permutation state during a build (`ip_vs_mh_dest_setup`).
#[derive(Copy, Clone, Debug, Default)]
struct Setup {
    /// Next slot of the permutation to try (the kernel keeps the last placed
    /// slot and re-tests it; that slot is always filled, so starting one
    /// step further is equivalent and saves a probe).
    perm: u32,
    skip: u32,
    /// `[1, 2, .., 8] * skip mod M`.
    steps: [u32; 8],
    turns: u32,
    /// `skip^-1 mod M`, 0 until the tail phase needs it.
    inv: u32,
}

/// Maglev state: the lookup table (list positions, [`EMPTY`] = none) plus
/// scratch space reused across rebuilds.
#[derive(Debug)]
pub(crate) struct Maglev {
    flags: SchedFlags,
    m: u32,
    tab_bits: u32,
    table: Vec<u32>,
    filled: Vec<u64>,
    setup: Vec<Setup>,
    free: Vec<u32>,
}

impl Maglev {
    /// A Maglev scheduler with `table_size` slots (must be a prime,
    /// `2..=2^24`) and `mh-port` / `mh-fallback` from `flags`. The table is
    /// empty until the first [`Algorithm::update`].
    pub(crate) fn new(flags: SchedFlags, table_size: u32) -> Result<Self, SchedError> {
        if table_size > MAX_TABLE_SIZE || !is_prime(table_size) {
            return Err(SchedError::InvalidParam {
                scheduler: super::Scheduler::Mh,
                reason: format!(
                    "table size {table_size} must be a prime between 2 and {MAX_TABLE_SIZE}"
                ),
            });
        }
        let m = table_size as usize;
        Ok(Maglev {
            flags,
            m: table_size,
            tab_bits: fls(table_size) / 2,
            table: vec![EMPTY; m],
            filled: vec![0; m.div_ceil(64)],
            setup: Vec::new(),
            free: Vec::new(),
        })
    }

    /// Rebuild the table from the list (`ip_vs_mh_dest_changed`).
    fn rebuild(&mut self, dests: &[Dest]) {
        self.table.fill(EMPTY);
        let m = self.m;
        if dests.is_empty() || dests.len() > m as usize {
            return;
        }
        let g = dests
            .iter()
            .map(|d| d.last_weight)
            .filter(|&w| w > 0)
            .fold(0, gcd);
        if g == 0 {
            return;
        }
        let max_w = dests.iter().map(|d| d.last_weight).max().unwrap_or(0);
        let rshift = fls(max_w / g).saturating_sub(self.tab_bits);

        self.setup.clear();
        self.setup.extend(dests.iter().map(|d| {
            let fold = addr_fold(d.config.addr);
            let port = d.config.port;
            let offset = mh_hashkey(fold, port, HASH1_KEY, 0) % m;
            let skip = mh_hashkey(fold, port, HASH2_KEY, 0) % (m - 1).max(1) + 1;
            let lw = d.last_weight;
            let turns = match (lw / g) >> rshift {
                0 => u32::from(lw != 0),
                t => t,
            };
            let mut steps = [skip; 8];
            for k in 1..8 {
                steps[k] = add_mod(steps[k - 1], skip, m);
            }
            Setup {
                perm: offset,
                skip,
                steps,
                turns,
                inv: 0,
            }
        }));

        self.filled.fill(0);
        self.free.clear();
        let filled = &mut self.filled;
        let table = &mut self.table;
        let free = &mut self.free;
        let tail = tail_threshold(m);
        let mut left = m;
        // Terminates: g > 0 means some server has turns >= 1, and every
        // permutation visits all M slots (M prime, 1 <= skip < M).
        'fill: loop {
            for (i, s) in self.setup.iter_mut().enumerate() {
                for _ in 0..s.turns {
                    let c = if left > tail {
                        // Probe phases: walk the permutation to a free slot;
                        // once half full, eight candidates per branch.
                        let c = if left > m / 2 {
                            probe_free_scalar(filled, s.perm, s.skip, m)
                        } else {
                            probe_free(filled, s.perm, &s.steps, m)
                        };
                        filled[(c >> 6) as usize] |= 1u64 << (c & 63);
                        c
                    } else {
                        // Tail phase: few free slots; pick the one the walk
                        // would reach first, i.e. the smallest number of
                        // steps t with perm + t * skip = slot (mod M).
                        if free.is_empty() {
                            collect_free(filled, m, free);
                        }
                        if s.inv == 0 {
                            s.inv = mod_inverse(s.skip, m);
                        }
                        let k = first_on_walk(free, s.perm, s.inv, m);
                        free.swap_remove(k)
                    };
                    // `i < dests.len() <= m <= 2^24`.
                    table[c as usize] = i as u32;
                    s.perm = if c + s.skip >= m {
                        c + s.skip - m
                    } else {
                        c + s.skip
                    };
                    left -= 1;
                    if left == 0 {
                        break 'fill;
                    }
                }
            }
        }
    }

    /// The server at the slot for `(fold, port, offset)`: `Err(())` for an
    /// empty slot, `Ok(None)` for an ineligible server.
    #[inline]
    fn probe(&self, dests: &[Dest], slot: u32) -> Result<Option<usize>, ()> {
        let p = self.table[slot as usize];
        if p == EMPTY {
            return Err(());
        }
        let p = p as usize;
        match dests.get(p) {
            Some(d) if d.is_eligible() => Ok(Some(p)),
            Some(_) => Ok(None),
            None => Err(()),
        }
    }

    /// The lookup table as list positions, `None` for empty (tests,
    /// diagnostics).
    #[cfg(test)]
    pub(crate) fn table(&self) -> Vec<Option<u32>> {
        self.table
            .iter()
            .map(|&p| (p != EMPTY).then_some(p))
            .collect()
    }
}

impl Algorithm for Maglev {
    fn scheduler(&self) -> super::Scheduler {
        super::Scheduler::Mh
    }

    fn update(&mut self, dests: &[Dest], _change: ListChange) {
        self.rebuild(dests);
    }

    fn schedule(&mut self, dests: &[Dest], input: &SchedInput, _now: Instant) -> Option<usize> {
        let m = self.m;
        let fold = addr_fold(input.saddr);
        let port = if self.flags.contains(SchedFlags::MH_PORT) {
            input.sport
        } else {
            0
        };
        let ihash = mh_hashkey(fold, port, HASH1_KEY, 0) % m;
        let first = self.probe(dests, ihash).ok()?;
        if first.is_some() || !self.flags.contains(SchedFlags::MH_FALLBACK) {
            return first;
        }
        for off in 0..m {
            // Both < m <= 2^24: no overflow.
            let roff = (off + ihash) % m;
            match self.probe(dests, mh_hashkey(fold, port, HASH1_KEY, roff) % m) {
                Err(()) => return None,
                Ok(Some(p)) => return Some(p),
                Ok(None) => {}
            }
        }
        None
    }

    fn lookup_table(&self) -> Option<Vec<Option<u32>>> {
        Some(
            self.table
                .iter()
                .map(|&p| (p != EMPTY).then_some(p))
                .collect(),
        )
    }
}

/// The kernel's populate loop transcribed literally (bool bitmap, walk from
/// the last placed slot, no tail phase): the reference the optimised build is
/// tested against and the baseline of the `maglev` bench (feature `bench`).
#[cfg(any(test, feature = "bench"))]
pub fn reference_table(d: &[Dest], m: u32) -> Vec<Option<u32>> {
    let mut table = vec![None; m as usize];
    let g = d
        .iter()
        .map(|x| x.last_weight)
        .filter(|&w| w > 0)
        .fold(0, gcd);
    if d.is_empty() || d.len() > m as usize || g == 0 {
        return table;
    }
    let max_w = d.iter().map(|x| x.last_weight).max().unwrap_or(0);
    let rshift = fls(max_w / g).saturating_sub(fls(m) / 2);
    let mut st: Vec<(u32, u32, u32)> = d
        .iter()
        .map(|x| {
            let f = addr_fold(x.config.addr);
            let off = mh_hashkey(f, x.config.port, HASH1_KEY, 0) % m;
            let skip = mh_hashkey(f, x.config.port, HASH2_KEY, 0) % (m - 1).max(1) + 1;
            let t = (x.last_weight / g) >> rshift;
            (
                off,
                skip,
                if t == 0 {
                    u32::from(x.last_weight != 0)
                } else {
                    t
                },
            )
        })
        .collect();
    let mut filled = vec![false; m as usize];
    let mut n = 0;
    loop {
        for (i, s) in st.iter_mut().enumerate() {
            for _ in 0..s.2 {
                while filled[s.0 as usize] {
                    s.0 = (s.0 + s.1) % m;
                }
                filled[s.0 as usize] = true;
                table[s.0 as usize] = Some(i as u32);
                n += 1;
                if n == m {
                    return table;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
