//! The simulation's only source of randomness: SplitMix64 (Steele, Lea and
//! Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014),
//! seeded by the caller, so every run is reproducible.

/// A SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A value in `0..n` (`n > 0`), by Lemire's multiply-shift (the bias is
    /// below 2^-32 for the ranges used here).
    pub fn below(&mut self, n: u32) -> u32 {
        ((u64::from(n) * (self.next_u64() >> 32)) >> 32) as u32
    }
}

/// SplitMix64's output function: a bijective mix of 64 bits. Also the
/// stand-in for a router's flow hash (see [`crate::ecmp`]).
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_sequence_and_range() {
        // SplitMix64 from seed 0: the published first outputs.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64::new(7);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10) as usize] += 1;
        }
        // Every value appears, roughly evenly (1000 ± 15 %).
        assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
    }
}
