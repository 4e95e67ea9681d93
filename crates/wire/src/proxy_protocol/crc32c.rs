//! CRC32C (Castagnoli), the checksum of the `PP2_TYPE_CRC32C` TLV.
//!
//! The spec points at RFC 4960 appendix B: the reflected polynomial
//! 0x82F63B78, initial value all ones, final complement. The 256-entry table
//! is computed at compile time from the polynomial, so there is no magic
//! table to trust; headers are at most 64 KiB, a byte-at-a-time loop is
//! plenty.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// Running CRC32C state: feed bytes with [`Crc32c::update`], read the
/// checksum with [`Crc32c::finish`]. Lets the verifier substitute zeros for
/// the checksum field without copying the header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Crc32c(u32);

impl Crc32c {
    pub(super) const fn new() -> Self {
        Crc32c(0xFFFF_FFFF)
    }

    pub(super) fn update_byte(&mut self, byte: u8) {
        // The index is masked to 0..=255, so it is always in bounds.
        let idx = ((self.0 ^ u32::from(byte)) & 0xFF) as usize;
        self.0 = (self.0 >> 8) ^ TABLE[idx];
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.update_byte(b);
        }
    }

    pub(super) const fn finish(self) -> u32 {
        !self.0
    }
}

/// CRC32C (Castagnoli, RFC 4960 appendix B) of `data`, as carried by the
/// PROXY v2 `CRC32C` TLV. Exposed so callers and tests can check vectors:
/// `crc32c(b"123456789") == 0xE306_9283`.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = Crc32c::new();
    c.update(data);
    c.finish()
}
