//! The BPF frame targets' generator: code coverage cannot see inside a BPF
//! program, so the fuzzer gets little guidance from it; each input seeds
//! this generator (FNV-1a of the input, then xorshift64), which picks,
//! mutates and cuts the frame.

/// A generator seeded by `data`.
pub fn input_rng(data: &[u8]) -> impl FnMut() -> u64 {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        x = (x ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Mutate the non-empty `frame`: fewer than `flips` random byte flips, the
/// input's (offset, value) pairs XORed in, and one time in four a cut to
/// `keep` bytes plus a random number below what follows them (`keep` below
/// the frame's length).
pub fn mutate(
    frame: &mut Vec<u8>,
    data: &[u8],
    rng: &mut impl FnMut() -> u64,
    flips: u64,
    keep: usize,
) {
    for _ in 0..rng() % flips {
        let at = (rng() as usize) % frame.len();
        frame[at] ^= (rng() >> 8) as u8;
    }
    for pair in data.chunks_exact(2) {
        let at = usize::from(pair[0]) % frame.len();
        frame[at] ^= pair[1];
    }
    if rng() % 4 == 0 {
        let cut = keep + (rng() as usize) % (frame.len() - keep);
        frame.truncate(cut);
    }
}
