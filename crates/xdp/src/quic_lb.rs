//! QUIC-LB routing in the XDP director (`bpf/lib/quic_lb.h`): the mirrors
//! of its map keys and values, what the control side writes into them (a
//! configuration's AES-128 decryption round keys), and the fallback hash of
//! a Destination Connection ID.
//!
//! A UDP service with QUIC-LB configurations is installed in
//! `quic_services` instead of `services`; `xdp_lb` tail-calls the program
//! `xdp_quic` (prog array `quic_prog`) for its datagrams, which routes each
//! datagram by the server ID its DCID decodes to (`quic_lb`, `quic_sids`),
//! or by [`dcid_hash`] over the service's bucket table or real-server list
//! when it does not decode, and makes no flow entry (see the header's
//! comment for the flow-table choice and its cost). Plaintext and
//! single-pass configurations are decoded; four-pass ones
//! ([`QUIC_MODE_FOUR`]) are not, and their DCIDs take the fallback.

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// Configurations per service (codepoints 0..=6; 7 is reserved).
pub const QUIC_CONFIGS: usize = 7;
/// Longest server ID.
pub const QUIC_SID_MAX: usize = 15;
/// Longest DCID of QUIC versions 1 and 2.
pub const QUIC_DCID_MAX: u32 = 20;
/// QUIC version 2 (RFC 9369; version 1 is 1): its long headers' CIDs are
/// at most [`QUIC_DCID_MAX`] octets, as version 1's.
pub const QUIC_VERSION_2: u32 = 0x6b33_43cf;
/// Entries of `quic_services` and `quic_lb`.
pub const QUIC_SVCS_MAX: u32 = 1024;
/// Entries of `quic_sids`.
pub const QUIC_SIDS_MAX: u32 = 65536;
/// `xdp_quic`'s index in `quic_prog`.
pub const QUIC_PROG: u32 = 0;
/// No configuration at this codepoint.
pub const QUIC_MODE_NONE: u8 = 0;
/// Plaintext server ID.
pub const QUIC_MODE_PLAIN: u8 = 1;
/// Single-pass AES-128-ECB (server ID + nonce = 16 octets).
pub const QUIC_MODE_SINGLE: u8 = 2;
/// Four-pass: not decoded by the program (fallback).
pub const QUIC_MODE_FOUR: u8 = 3;
/// The seed of [`dcid_hash`].
pub const QUIC_HASH_SEED: u64 = 0x5256_535f_7175_696c;

/// One configuration as the program decodes it (`struct rvs_quic_cfg`).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QuicCfg {
    /// `QUIC_MODE_*`.
    pub mode: u8,
    /// Server ID octets.
    pub sid_len: u8,
    /// Nonce octets.
    pub nonce_len: u8,
    /// Zero.
    pub pad0: u8,
    /// Single-pass: [`decrypt_round_keys`] of the key.
    pub dk: [u32; 44],
}

impl Default for QuicCfg {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl QuicCfg {
    /// The program's form of a configuration: plaintext without a key,
    /// single-pass with a key when `sid_len + nonce_len == 16`, four-pass
    /// (not decoded here) with a key otherwise.
    pub fn new(sid_len: u8, nonce_len: u8, key: Option<&[u8; 16]>) -> Self {
        let mut c = QuicCfg {
            sid_len,
            nonce_len,
            ..QuicCfg::default()
        };
        match key {
            None => c.mode = QUIC_MODE_PLAIN,
            Some(k) if usize::from(sid_len) + usize::from(nonce_len) == 16 => {
                c.mode = QUIC_MODE_SINGLE;
                c.dk = decrypt_round_keys(k);
            }
            Some(_) => c.mode = QUIC_MODE_FOUR,
        }
        c
    }

    /// The CID length of this configuration (0 for none).
    pub fn cid_len(&self) -> u8 {
        if self.mode == QUIC_MODE_NONE {
            0
        } else {
            1 + self.sid_len + self.nonce_len
        }
    }
}

/// One service's configurations (`struct rvs_quic_svc`, `quic_lb` value).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QuicSvc {
    /// The short-header DCID length for codepoints without configuration.
    pub fallback_len: u8,
    /// Zero.
    pub pad0: [u8; 3],
    /// Per codepoint.
    pub cfg: [QuicCfg; QUIC_CONFIGS],
}

impl Default for QuicSvc {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl QuicSvc {
    /// A service's value from `(codepoint, configuration)` pairs (codepoints
    /// above 6 are ignored by the caller's validation); `fallback_len` is
    /// the CID length of the lowest-numbered one, as rvs-quiclb's Router.
    pub fn new(configs: &[(u8, QuicCfg)]) -> Self {
        let mut s = QuicSvc::default();
        for (cp, c) in configs {
            if let Some(slot) = s.cfg.get_mut(usize::from(*cp)) {
                *slot = *c;
            }
        }
        s.fallback_len = s
            .cfg
            .iter()
            .map(QuicCfg::cid_len)
            .find(|&l| l != 0)
            .unwrap_or(0);
        s
    }
}

/// `quic_sids` key: a service's server ID (`struct rvs_quic_sid_key`).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct QuicSidKey {
    /// Service index.
    pub svc: u32,
    /// Server ID octets.
    pub len: u8,
    /// The server ID, zero after `len`.
    pub sid: [u8; QUIC_SID_MAX],
}

impl QuicSidKey {
    /// The key of server ID `sid` (1..=15 octets) of service `svc`; `None`
    /// for another length.
    pub fn new(svc: u32, sid: &[u8]) -> Option<Self> {
        if sid.is_empty() || sid.len() > QUIC_SID_MAX {
            return None;
        }
        let mut k = QuicSidKey {
            svc,
            len: sid.len() as u8,
            ..QuicSidKey::default()
        };
        k.sid[..sid.len()].copy_from_slice(sid);
        Some(k)
    }
}

/// A service's QUIC-LB counters (`struct rvs_quic_stats`, per CPU).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct QuicStats {
    /// Routed to the real server of the decoded server ID.
    pub by_cid: u64,
    /// A QUIC header that parsed, routed by the DCID hash (its DCID did
    /// not decode to a live real server's server ID).
    pub by_fallback: u64,
    /// A header that did not parse (empty, truncated: not QUIC), as the
    /// proxy plane counts it; forwarded by the hash of what is there.
    pub undecodable: u64,
}

impl QuicStats {
    /// The sum of two (CPUs).
    pub fn add(&self, o: &QuicStats) -> QuicStats {
        QuicStats {
            by_cid: self.by_cid.wrapping_add(o.by_cid),
            by_fallback: self.by_fallback.wrapping_add(o.by_fallback),
            undecodable: self.undecodable.wrapping_add(o.undecodable),
        }
    }
}

const _: () = assert!(size_of::<QuicCfg>() == 180);
const _: () = assert!(size_of::<QuicSvc>() == 1264);
const _: () = assert!(size_of::<QuicSidKey>() == 20);
const _: () = assert!(size_of::<QuicStats>() == 24);

/// The program's fallback hash of a DCID (`RVS_QUIC_HASH_SEED` in rvs.h):
/// the first 20 octets at most, zero padded to three little-endian words.
pub fn dcid_hash(dcid: &[u8]) -> u32 {
    let n = dcid.len().min(QUIC_DCID_MAX as usize);
    let mut b = [0u8; 24];
    b[..n].copy_from_slice(&dcid[..n]);
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 octets"));
    let mul = crate::maps::FLOW_CACHE_MUL;
    let mut h = (w(0) ^ QUIC_HASH_SEED ^ n as u64).wrapping_mul(mul);
    h = (h ^ (h >> 32) ^ w(1)).wrapping_mul(mul);
    h = (h ^ (h >> 32) ^ w(2)).wrapping_mul(mul);
    h ^= h >> 32;
    h as u32
}

// ------------------------------------------------------------------ AES

/// Multiplication in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1.
const fn gmul(mut a: u8, mut b: u8) -> u8 {
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        a = (a << 1) ^ if a & 0x80 != 0 { 0x1b } else { 0 };
        b >>= 1;
    }
    r
}

/// The AES S-box (multiplicative inverse, then the affine map).
const fn sbox() -> [u8; 256] {
    let mut s = [0u8; 256];
    let mut a = 0usize;
    while a < 256 {
        // a^254 = a^-1 (0 for 0).
        let mut inv = 1u8;
        let mut x = a as u8;
        let mut e = 254u32;
        while e != 0 {
            if e & 1 != 0 {
                inv = gmul(inv, x);
            }
            x = gmul(x, x);
            e >>= 1;
        }
        if a == 0 {
            inv = 0;
        }
        s[a] = inv
            ^ inv.rotate_left(1)
            ^ inv.rotate_left(2)
            ^ inv.rotate_left(3)
            ^ inv.rotate_left(4)
            ^ 0x63;
        a += 1;
    }
    s
}

/// The S-box.
pub const SBOX: [u8; 256] = sbox();

const fn inv_sbox() -> [u8; 256] {
    let mut r = [0u8; 256];
    let mut a = 0usize;
    while a < 256 {
        r[SBOX[a] as usize] = a as u8;
        a += 1;
    }
    r
}

/// The inverse S-box (`rvs_aes_isbox` in bpf/lib/aes_tables.h).
pub const INV_SBOX: [u8; 256] = inv_sbox();

const fn td() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut x = 0usize;
    while x < 256 {
        let s = INV_SBOX[x];
        let w = (gmul(s, 14) as u32) << 24
            | (gmul(s, 9) as u32) << 16
            | (gmul(s, 13) as u32) << 8
            | gmul(s, 11) as u32;
        t[0][x] = w;
        t[1][x] = w.rotate_right(8);
        t[2][x] = w.rotate_right(16);
        t[3][x] = w.rotate_right(24);
        x += 1;
    }
    t
}

/// The inverse-cipher T-tables (`rvs_aes_td` in bpf/lib/aes_tables.h).
pub const TD: [[u32; 256]; 4] = td();

/// InvMixColumns of one big-endian column.
fn inv_mix(w: u32) -> u32 {
    let b = w.to_be_bytes();
    TD[0][usize::from(SBOX[usize::from(b[0])])]
        ^ TD[1][usize::from(SBOX[usize::from(b[1])])]
        ^ TD[2][usize::from(SBOX[usize::from(b[2])])]
        ^ TD[3][usize::from(SBOX[usize::from(b[3])])]
}

/// The AES-128 decryption round keys of the equivalent inverse cipher
/// (FIPS-197 §5.3.5) for `key`: what `rvs_quic_cfg.dk` holds.
pub fn decrypt_round_keys(key: &[u8; 16]) -> [u32; 44] {
    let mut w = [0u32; 44];
    for (i, c) in key.chunks_exact(4).enumerate() {
        w[i] = u32::from_be_bytes(c.try_into().expect("4 octets"));
    }
    let mut rcon = 1u8;
    for i in 4..44 {
        let mut t = w[i - 1];
        if i % 4 == 0 {
            let b = t.rotate_left(8).to_be_bytes();
            t = u32::from_be_bytes(b.map(|x| SBOX[usize::from(x)])) ^ (u32::from(rcon) << 24);
            rcon = gmul(rcon, 2);
        }
        w[i] = w[i - 4] ^ t;
    }
    let mut dk = [0u32; 44];
    for r in 0..11 {
        for c in 0..4 {
            let e = w[4 * (10 - r) + c];
            dk[4 * r + c] = if r == 0 || r == 10 { e } else { inv_mix(e) };
        }
    }
    dk
}

/// The program's AES-128 block decryption, in Rust (the same tables and
/// rounds as `aes128_decrypt` in bpf/lib/quic_lb.h): the reference the
/// tests hold the tables and round keys to.
pub fn decrypt_block(dk: &[u32; 44], block: &[u8; 16]) -> [u8; 16] {
    let col = |i: usize| u32::from_be_bytes(block[i * 4..i * 4 + 4].try_into().expect("4"));
    let mut s = [
        col(0) ^ dk[0],
        col(1) ^ dk[1],
        col(2) ^ dk[2],
        col(3) ^ dk[3],
    ];
    let t = |k: usize, x: u32| TD[k][(x & 0xff) as usize];
    for r in 1..10 {
        let mut n = [0u32; 4];
        for (c, v) in n.iter_mut().enumerate() {
            *v = t(0, s[c] >> 24)
                ^ t(1, s[(c + 3) % 4] >> 16)
                ^ t(2, s[(c + 2) % 4] >> 8)
                ^ t(3, s[(c + 1) % 4])
                ^ dk[4 * r + c];
        }
        s = n;
    }
    let isb = |x: u32| u32::from(INV_SBOX[(x & 0xff) as usize]);
    let mut out = [0u8; 16];
    for c in 0..4 {
        let v = (isb(s[c] >> 24) << 24)
            ^ (isb(s[(c + 3) % 4] >> 16) << 16)
            ^ (isb(s[(c + 2) % 4] >> 8) << 8)
            ^ isb(s[(c + 1) % 4])
            ^ dk[40 + c];
        out[c * 4..c * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::{BlockCipherEncrypt, KeyInit};

    #[test]
    fn fips197_appendix_c1_vector_decrypts() {
        let key: [u8; 16] = core::array::from_fn(|i| i as u8);
        let ct = [
            0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4,
            0xc5, 0x5a,
        ];
        let pt: [u8; 16] = core::array::from_fn(|i| (i as u8) * 0x11);
        assert_eq!(decrypt_block(&decrypt_round_keys(&key), &ct), pt);
    }

    #[test]
    fn decryption_inverts_the_aes_crate_on_random_keys() {
        // A fixed-seed xorshift: reproducible "random" keys and blocks.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let mut key = [0u8; 16];
            let mut pt = [0u8; 16];
            key[..8].copy_from_slice(&next().to_le_bytes());
            key[8..].copy_from_slice(&next().to_le_bytes());
            pt[..8].copy_from_slice(&next().to_le_bytes());
            pt[8..].copy_from_slice(&next().to_le_bytes());
            let aes = aes::Aes128::new(&key.into());
            let mut b = pt.into();
            aes.encrypt_block(&mut b);
            let ct: [u8; 16] = b.into();
            assert_eq!(
                decrypt_block(&decrypt_round_keys(&key), &ct),
                pt,
                "key {key:02x?}"
            );
        }
    }

    #[test]
    fn the_bpf_tables_are_the_computed_ones() {
        let h = include_str!("../../../bpf/lib/aes_tables.h");
        let nums: Vec<u32> = h
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter_map(|t| t.strip_prefix("0x"))
            .map(|t| u32::from_str_radix(t, 16).expect("hex"))
            .collect();
        let want: Vec<u32> = TD
            .iter()
            .flatten()
            .copied()
            .chain(INV_SBOX.iter().map(|&b| u32::from(b)))
            .collect();
        assert_eq!(nums, want);
    }

    #[test]
    fn configurations_and_keys() {
        let single = QuicCfg::new(4, 12, Some(&[1; 16]));
        assert_eq!((single.mode, single.cid_len()), (QUIC_MODE_SINGLE, 17));
        assert_eq!(QuicCfg::new(3, 5, Some(&[1; 16])).mode, QUIC_MODE_FOUR);
        assert_eq!(QuicCfg::new(3, 5, None).mode, QUIC_MODE_PLAIN);
        let s = QuicSvc::new(&[(3, QuicCfg::new(3, 5, None)), (5, single)]);
        assert_eq!(s.fallback_len, 9);
        assert!(QuicSidKey::new(1, &[]).is_none());
        assert!(QuicSidKey::new(1, &[0; 16]).is_none());
        assert_eq!(QuicSidKey::new(1, &[7, 8]).unwrap().sid[..3], [7, 8, 0]);
        assert_ne!(dcid_hash(&[1, 2, 3]), dcid_hash(&[1, 2, 3, 0]));
        assert_eq!(dcid_hash(&[5; 25]), dcid_hash(&[5; 20]));
    }
}
