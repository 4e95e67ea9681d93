//! Unit tests of the Maglev scheduler. Pinned values were computed with an
//! independent Python implementation (SipHash-1-3 written from the paper plus
//! the kernel's populate loop), which itself reproduces the kernel's
//! hsiphash self-test vectors.

use super::super::testutil::{dests, input};
use super::*;
use crate::dest::DestId;
use crate::model::DestConfig;
use std::net::{IpAddr, Ipv4Addr};

/// lib/siphash_kunit.c, `test_vectors_hsiphash` for BITS_PER_LONG == 64.
const HSIPHASH_VECTORS: [u32; 64] = [
    0x050fc4dc, 0x7d57ca93, 0x4dc7d44d, 0xe7ddf7fb, 0x88d38328, 0x49533b67, 0xc59f22a7, 0x9bb11140,
    0x8d299a8e, 0x6c063de4, 0x92ff097f, 0xf94dc352, 0x57b4d9a2, 0x1229ffa7, 0xc0f95d34, 0x2a519956,
    0x7d908b66, 0x63dbd80c, 0xb473e63e, 0x8d297d1c, 0xa6cce040, 0x2b45f844, 0xa320872e, 0xdae6c123,
    0x67349c8c, 0x705b0979, 0xca9913a5, 0x4ade3b35, 0xef6cd00d, 0x4ab1e1f4, 0x43c5e663, 0x8c21d1bc,
    0x16a7b60d, 0x7a8ff9bf, 0x1f2a753e, 0xbf186b91, 0xada26206, 0xa3c33057, 0xae3a36a1, 0x7b108392,
    0x99e41531, 0x3f1ad944, 0xc8138825, 0xc28949a6, 0xfaf8876b, 0x9f042196, 0x68b1d623, 0x8b5114fd,
    0xdf074c46, 0x12cc86b3, 0x0a52098f, 0x9d292f9a, 0xa2f41f12, 0x43a71ed0, 0x73f0bce6, 0x70a7e980,
    0x243c6d75, 0xfdb71513, 0xa67d8a08, 0xb7e8f148, 0xf7a644ee, 0x0f1837f2, 0x4b6694e0, 0xb7bbb3a8,
];

#[test]
fn hsiphash_matches_kernel_self_test_vectors() {
    let input: Vec<u8> = (0..64u8).collect();
    for (i, want) in HSIPHASH_VECTORS.iter().enumerate() {
        let mut h = SipHasher13::new_with_keys(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        h.write(&input[..i]);
        assert_eq!(h.finish() as u32, *want, "vector {i}");
    }
    // The 4-byte form used by mh: vector 4 is the bytes 00 01 02 03, i.e. the
    // little-endian u32 0x03020100 (hsiphash_1u32 in the kernel self-test).
    let mut h = SipHasher13::new_with_keys(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
    h.write(&0x0302_0100u32.to_le_bytes());
    assert_eq!(h.finish() as u32, HSIPHASH_VECTORS[4]);
}

/// SipHash-1-3 written independently from the SipHash paper (not via the
/// siphasher crate), for cross-checking.
fn ref_siphash13(k0: u64, k1: u64, data: &[u8]) -> u64 {
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let m = u64::from_le_bytes(b);
        v[3] ^= m;
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    let rem = chunks.remainder();
    last[..rem.len()].copy_from_slice(rem);
    let b = u64::from_le_bytes(last) | ((data.len() as u64 & 0xff) << 56);
    v[3] ^= b;
    round(&mut v);
    v[0] ^= b;
    v[2] ^= 0xff;
    for _ in 0..3 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[test]
fn independent_siphash13_agrees() {
    let input: Vec<u8> = (0..64u8).collect();
    for (i, want) in HSIPHASH_VECTORS.iter().enumerate() {
        let got = ref_siphash13(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908, &input[..i]);
        assert_eq!(got as u32, *want, "vector {i}");
    }
    for v in [0u32, 1, 80, 0x0a00_0051, 0xffff_ffff, 0x1234_5678] {
        for key in [HASH1_KEY, HASH2_KEY] {
            assert_eq!(
                hsiphash_u32(key, v),
                ref_siphash13(key, key, &v.to_le_bytes()) as u32
            );
        }
    }
}

#[test]
fn pinned_offset_and_skip_for_known_real_server() {
    // 10.0.0.1:80: v = 0x0a000001 + 80.
    let fold = 0x0a00_0001;
    assert_eq!(mh_hashkey(fold, 80, HASH1_KEY, 0), 0x439c_0cbe);
    assert_eq!(mh_hashkey(fold, 80, HASH2_KEY, 0), 0x97b3_dc47);
    assert_eq!(mh_hashkey(fold, 80, HASH1_KEY, 0) % 4093, 3167);
    assert_eq!(mh_hashkey(fold, 80, HASH2_KEY, 0) % 4092 + 1, 700);
}

/// Servers with these weights in list order; server `i` is
/// (10.0.0.0 + i + 1):80 (the same as `testutil::dests` below 255 servers).
fn many(weights: &[u32]) -> Vec<Dest> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let ip = Ipv4Addr::from(0x0a00_0001 + i as u32);
            Dest::new(
                DestId(i as u32),
                DestConfig::new(IpAddr::V4(ip), 80).weight(w),
            )
        })
        .collect()
}

fn built(weights: &[u32], m: u32, flags: SchedFlags) -> (Vec<Dest>, Maglev) {
    let d = many(weights);
    let mut s = Maglev::new(flags, m).unwrap_or_else(|e| panic!("{e}"));
    s.update(&d, ListChange::Reset);
    (d, s)
}

fn table_of(weights: &[u32], m: u32) -> Vec<Option<u32>> {
    built(weights, m, SchedFlags::default()).1.table()
}

fn some(v: &[u32]) -> Vec<Option<u32>> {
    v.iter().map(|&x| Some(x)).collect()
}

#[test]
fn pinned_small_tables() {
    assert_eq!(
        table_of(&[1, 2, 1], 13),
        some(&[1, 0, 0, 0, 0, 2, 2, 1, 1, 1, 2, 1, 1])
    );
    assert_eq!(
        table_of(&[3, 1, 2, 0, 1], 31),
        some(&[
            0, 1, 2, 4, 0, 0, 1, 4, 4, 0, 1, 2, 0, 0, 2, 2, 4, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 1,
            2, 2
        ])
    );
}

/// Where a table of 4093 over ten equal servers, built with `flags`, sends
/// each of `inputs`.
fn lookups(flags: SchedFlags, inputs: impl Iterator<Item = SchedInput>) -> Vec<Option<u32>> {
    let (d, mut s) = built(&[1; 10], 4093, flags);
    inputs
        .map(|i| s.schedule(&d, &i, Instant::ZERO).map(|p| p as u32))
        .collect()
}

#[test]
fn pinned_lookups() {
    assert_eq!(
        lookups(SchedFlags::default(), (0..8).map(|c| input(c, 1000))),
        some(&[3, 3, 4, 7, 0, 7, 9, 4])
    );
    assert_eq!(
        lookups(SchedFlags::MH_PORT, (0..8).map(|p| input(5, 1000 + p))),
        some(&[4, 0, 9, 5, 0, 3, 4, 5])
    );
}

#[test]
fn deterministic_rebuild() {
    for m in [251, 4093, 65537] {
        let a = table_of(&[1, 5, 2, 0, 7, 1], m);
        let b = table_of(&[1, 5, 2, 0, 7, 1], m);
        assert_eq!(a, b);
        // Rebuilding in place gives the same table as a fresh build.
        let (d, mut s) = built(&[1, 5, 2, 0, 7, 1], m, SchedFlags::default());
        s.update(&d, ListChange::Edited(0));
        assert_eq!(s.table(), a);
        assert!(a.iter().all(|x| x.is_some()));
    }
}

#[test]
fn table_size_validation() {
    for ok in [2, 3, 13, 251, 4093, 65521, 65537, 131_071] {
        assert!(Maglev::new(SchedFlags::default(), ok).is_ok(), "{ok}");
    }
    for bad in [0, 1, 4, 4095, 65535, 65536, 1 << 24, u32::MAX] {
        assert!(
            matches!(
                Maglev::new(SchedFlags::default(), bad),
                Err(SchedError::InvalidParam {
                    scheduler: crate::sched::Scheduler::Mh,
                    ..
                })
            ),
            "{bad}"
        );
    }
}

#[test]
fn tab_bits_matches_kernel_for_kernel_primes() {
    for (index, p) in [
        251u32, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131_071,
    ]
    .into_iter()
    .enumerate()
    {
        let s = Maglev::new(SchedFlags::default(), p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.tab_bits, (index as u32 + 8) / 2, "{p}");
    }
    let s = Maglev::new(SchedFlags::default(), 65537).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.tab_bits, 8);
}

fn shares(t: &[Option<u32>], n: usize) -> Vec<usize> {
    let mut c = vec![0usize; n];
    for p in t.iter().flatten() {
        c[*p as usize] += 1;
    }
    c
}

#[test]
fn equal_weights_share_within_one_slot() {
    for m in [251u32, 4093, 65537] {
        for n in [1usize, 2, 3, 7, 10, 100, 250, 1000] {
            if n > m as usize {
                continue;
            }
            let c = shares(&table_of(&vec![1; n], m), n);
            let (q, r) = (m as usize / n, m as usize % n);
            // Exactly: the first M mod N servers get the extra slot.
            for (i, &x) in c.iter().enumerate() {
                assert_eq!(x, if i < r { q + 1 } else { q }, "m={m} n={n} i={i}");
            }
        }
    }
}

#[test]
fn weighted_shares_follow_turns() {
    // turns 1,2,3: 4093 = 682 * 6 + 1.
    assert_eq!(
        shares(&table_of(&[1, 2, 3], 4093), 3),
        vec![683, 1364, 2046]
    );
    // Weights 100, 200, 300: gcd 100 gives the same turns.
    assert_eq!(
        shares(&table_of(&[100, 200, 300], 4093), 3),
        vec![683, 1364, 2046]
    );
    // Huge weights are shifted: max/gcd = 65535, fls = 16, TAB_BITS 6 -> rshift 10;
    // turns = 65535 >> 10 = 63 and 1 >> 10 = 0 -> 1; 4093 = 63 * 64 + 61 and
    // the last, partial round ends inside the first server's 63 turns.
    assert_eq!(shares(&table_of(&[65535, 1], 4093), 2), vec![4030, 63]);
}

/// The server of every filled slot of `s`'s table, in slot order.
fn owners(s: &Maglev, d: &[Dest]) -> Vec<DestId> {
    s.table()
        .iter()
        .flatten()
        .map(|&p| d[p as usize].id)
        .collect()
}

/// Fraction (per mille) of the slots of the servers that stay which change
/// owner when the server at `victim` is removed.
fn disruption_per_mille(n: usize, m: u32, victim: usize) -> u64 {
    let (mut d, s) = built(&vec![1; n], m, SchedFlags::default());
    let before = owners(&s, &d);
    d.remove(victim);
    let mut s2 = Maglev::new(SchedFlags::default(), m).unwrap_or_else(|e| panic!("{e}"));
    s2.update(&d, ListChange::Removed(victim));
    let after = owners(&s2, &d);
    let gone = DestId(victim as u32);
    let (mut others, mut moved) = (0u64, 0u64);
    for (b, a) in before.iter().zip(&after) {
        if *b != gone {
            others += 1;
            if a != b {
                moved += 1;
            }
        }
    }
    moved * 1000 / others
}

const BOUND_10_4093: u64 = 20;
const BOUND_100_4093: u64 = 40;
const BOUND_1000_4093: u64 = 10;
const BOUND_10_65537: u64 = 5;
const BOUND_100_65537: u64 = 10;
const BOUND_1000_65537: u64 = 10;

#[test]
fn removal_remaps_few_other_slots() {
    // Measured maxima over victims first / middle / last (see module doc);
    // bounds pinned with headroom.
    let cases: [(usize, u32, u64); 6] = [
        (10, 4093, BOUND_10_4093),
        (100, 4093, BOUND_100_4093),
        (1000, 4093, BOUND_1000_4093),
        (10, 65537, BOUND_10_65537),
        (100, 65537, BOUND_100_65537),
        (1000, 65537, BOUND_1000_65537),
    ];
    for (n, m, bound) in cases {
        let pm = [0, n / 2, n - 1]
            .into_iter()
            .map(|v| disruption_per_mille(n, m, v))
            .collect::<Vec<_>>();
        eprintln!("disruption n={n} m={m}: {pm:?} per mille");
        let worst = pm.iter().copied().max().unwrap_or(0);
        assert!(worst <= bound, "n={n} m={m}: {worst} per mille > {bound}");
    }
}

#[test]
fn quiescing_keeps_table() {
    let (mut d, s) = built(&[1, 3, 2, 1], 4093, SchedFlags::default());
    let before = s.table();
    let mut s = s;
    // Weight 0 through an edit keeps last_weight.
    let cfg = d[1].config.weight(0);
    d[1].apply_edit(cfg);
    assert_eq!(d[1].last_weight, 3);
    s.update(&d, ListChange::Edited(1));
    assert_eq!(s.table(), before);
    // And the quiesced server is never chosen.
    for c in 0..2000 {
        assert_ne!(s.schedule(&d, &input(c, 7), Instant::ZERO), Some(1));
    }
}

#[test]
fn never_placed_with_zero_last_weight_and_all_zero_is_empty() {
    let mut d = dests(&[2, 0, 2]);
    d[1].last_weight = 0;
    let mut s = Maglev::new(SchedFlags::default(), 251).unwrap_or_else(|e| panic!("{e}"));
    s.update(&d, ListChange::Reset);
    assert!(s.table().iter().all(|x| *x == Some(0) || *x == Some(2)));
    for x in &mut d {
        x.last_weight = 0;
        x.config.weight = 0;
    }
    s.update(&d, ListChange::Reset);
    assert!(s.table().iter().all(|x| x.is_none()));
    assert_eq!(s.schedule(&d, &input(1, 1), Instant::ZERO), None);
}

#[test]
fn more_dests_than_slots_gives_empty_table() {
    let (d, mut s) = built(&[1; 4], 3, SchedFlags::MH_FALLBACK);
    assert!(s.table().iter().all(|x| x.is_none()));
    assert_eq!(s.schedule(&d, &input(1, 1), Instant::ZERO), None);
    // Back to a list that fits: table filled again.
    let d3 = dests(&[1; 3]);
    s.update(&d3, ListChange::Removed(3));
    assert!(s.table().iter().all(|x| x.is_some()));
}

#[test]
fn fallback_finds_next_available() {
    let (mut d, mut plain) = built(&[1; 5], 251, SchedFlags::default());
    let mut fb = Maglev::new(SchedFlags::MH_FALLBACK, 251).unwrap_or_else(|e| panic!("{e}"));
    fb.update(&d, ListChange::Reset);
    let c = (0..1000)
        .find(|&c| plain.schedule(&d, &input(c, 1), Instant::ZERO) == Some(3))
        .unwrap_or(0);
    d[3].overloaded = true;
    assert_eq!(plain.schedule(&d, &input(c, 1), Instant::ZERO), None);
    // Independent walk of the kernel's fallback.
    let t = fb.table();
    let fold = addr_fold(input(c, 1).saddr);
    let ihash = mh_hashkey(fold, 0, HASH1_KEY, 0) % 251;
    let expect = (0..251)
        .map(|off| t[(mh_hashkey(fold, 0, HASH1_KEY, (off + ihash) % 251) % 251) as usize])
        .map(|x| x.map(|p| p as usize))
        .find(|&p| p != Some(3))
        .flatten();
    let got = fb.schedule(&d, &input(c, 1), Instant::ZERO);
    assert_eq!(got, expect);
    assert!(got.is_some_and(|p| p != 3));
    for x in &mut d {
        x.overloaded = true;
    }
    assert_eq!(fb.schedule(&d, &input(c, 1), Instant::ZERO), None);
}

#[test]
fn mh_port_changes_choice_with_port() {
    let (d, mut noport) = built(&[1; 16], 4093, SchedFlags::default());
    let (_, mut port) = built(&[1; 16], 4093, SchedFlags::MH_PORT);
    let a: Vec<_> = (0..64u16)
        .map(|p| noport.schedule(&d, &input(9, p), Instant::ZERO))
        .collect();
    assert!(a.iter().all(|x| *x == a[0]));
    let b: Vec<_> = (0..64u16)
        .map(|p| port.schedule(&d, &input(9, p), Instant::ZERO))
        .collect();
    assert!(b.iter().any(|x| *x != b[0]));
}

#[test]
fn keyed_by_real_server_address_not_list_identity() {
    // Same servers, same order: same table regardless of DestId.
    let mk = |id0: u32| -> Vec<Dest> {
        (0..5u32)
            .map(|i| {
                let ip = Ipv4Addr::new(192, 168, 1, i as u8 + 10);
                Dest::new(DestId(id0 + i), DestConfig::new(IpAddr::V4(ip), 8080))
            })
            .collect()
    };
    let mut a = Maglev::new(SchedFlags::default(), 4093).unwrap_or_else(|e| panic!("{e}"));
    let mut b = Maglev::new(SchedFlags::default(), 4093).unwrap_or_else(|e| panic!("{e}"));
    a.update(&mk(0), ListChange::Reset);
    b.update(&mk(100), ListChange::Reset);
    assert_eq!(a.table(), b.table());
    // A different port permutes differently.
    let mut other = mk(0);
    for x in &mut other {
        x.config.port = 8081;
    }
    b.update(&other, ListChange::Reset);
    assert_ne!(a.table(), b.table());
}

use super::reference_table as naive_table;

#[test]
fn optimised_build_equals_naive_kernel_loop() {
    for m in [2u32, 3, 13, 251, 4093, 65537] {
        for n in [1usize, 2, 5, 17, 100, 1000] {
            if n > m as usize {
                continue;
            }
            let w: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 13).collect();
            let (d, s) = built(&w, m, SchedFlags::default());
            assert_eq!(s.table(), naive_table(&d, m), "m={m} n={n}");
            let (d, s) = built(&vec![1; n], m, SchedFlags::default());
            assert_eq!(s.table(), naive_table(&d, m), "equal m={m} n={n}");
        }
    }
}

#[test]
fn mod_inverse_is_inverse() {
    for m in [2u32, 3, 13, 4093, 65537, 16_777_213] {
        for a in [1u32, 2, m / 2, m - 1]
            .into_iter()
            .filter(|&a| a >= 1 && a < m)
        {
            let i = mod_inverse(a, m);
            assert_eq!(u64::from(a) * u64::from(i) % u64::from(m), 1, "a={a} m={m}");
        }
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn build_equals_naive(
            w in prop::collection::vec(0u32..300, 1..60),
            m in prop::sample::select(vec![61u32, 251, 509, 4093]),
            port in any::<u16>(),
        ) {
            let mut d = many(&w);
            for x in &mut d {
                x.config.port = port;
            }
            let mut s = Maglev::new(SchedFlags::default(), m).unwrap_or_else(|e| panic!("{e}"));
            s.update(&d, ListChange::Reset);
            prop_assert_eq!(s.table(), naive_table(&d, m));
        }
    }
}
