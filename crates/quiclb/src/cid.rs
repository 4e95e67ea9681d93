//! Connection ID generation (servers) and server ID decoding (balancers),
//! draft-ietf-quic-load-balancers-21 §5.
//!
//! A QUIC-LB connection ID is `first octet || block`, where the block is
//! `server ID || nonce`, either as is (no key), encrypted with one AES-128-ECB
//! block (server ID + nonce = 16 octets) or with the draft's four-pass
//! Feistel network whose round function is AES-128-ECB (any other length).
//! The four-pass code follows the draft's pseudo-code step by step; the
//! draft's §5.4.2 encryption example and Appendix B vectors are the tests.
//!
//! Nothing here draws random numbers: the caller supplies the nonce and the
//! random low bits of the first octet, so the codec is deterministic and
//! testable. (The `quinn` adapter draws them.)

use aes::Aes128;
use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use std::fmt;

use crate::MAX_CID_LEN;
use crate::config::{ConfigId, LbConfig};

/// Why [`Codec::encode`] refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The server ID is not as long as the configuration says.
    #[error("server ID is {got} octets, the configuration says {expected}")]
    ServerIdLen {
        /// The configuration's server ID length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The nonce is not as long as the configuration says.
    #[error("nonce is {got} octets, the configuration says {expected}")]
    NonceLen {
        /// The configuration's nonce length.
        expected: usize,
        /// The length given.
        got: usize,
    },
}

/// Why a connection ID does not decode under a configuration: the draft's
/// reasons for an "unroutable" DCID that the codec itself can see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The CID is shorter than the configuration's CID length.
    #[error("connection ID of {have} octets is shorter than the configuration's {need}")]
    TooShort {
        /// The configuration's CID length.
        need: usize,
        /// The CID's length.
        have: usize,
    },
    /// The CID's config rotation bits name another configuration.
    #[error("connection ID carries config id {got}, this configuration is {expected}")]
    OtherConfig {
        /// This configuration's codepoint.
        expected: u8,
        /// The CID's config rotation bits (7 = reserved unroutable).
        got: u8,
    },
}

/// A server ID: 1..=15 octets, as assigned by configuration to one real
/// server.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId {
    bytes: [u8; 15],
    len: u8,
}

impl ServerId {
    /// A server ID from its octets; `None` unless 1..=15 of them.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        if !(1..=15).contains(&bytes.len()) {
            return None;
        }
        let mut s = Self {
            bytes: [0; 15],
            len: bytes.len() as u8,
        };
        s.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(s)
    }

    /// The octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerId({self})")
    }
}

/// Lower-case hex, the form operators write server IDs in.
impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A connection ID of up to 20 octets, held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId {
    bytes: [u8; MAX_CID_LEN],
    len: u8,
}

impl ConnectionId {
    /// The octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnectionId(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

/// The codec of one configuration: the configuration and, when it has a
/// key, the expanded AES-128 key schedule (built once, reused per packet).
#[derive(Clone)]
pub struct Codec {
    config: LbConfig,
    cipher: Option<Aes128>,
}

impl fmt::Debug for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec")
            .field("config", &self.config)
            .finish()
    }
}

/// A server ID and nonce, the block after the first octet, in plaintext.
type Block = [u8; 19];

impl Codec {
    /// The codec of a validated configuration.
    pub fn new(config: LbConfig) -> Self {
        let cipher = config.key().map(|k| Aes128::new(&Array::from(*k)));
        Self { config, cipher }
    }

    /// The configuration.
    pub fn config(&self) -> &LbConfig {
        &self.config
    }

    /// Length of the connection IDs this configuration makes.
    pub fn cid_len(&self) -> usize {
        self.config.cid_len()
    }

    /// A server's connection ID: `server_id` and `nonce` of the configured
    /// lengths; `random_bits` fills the first octet's five low bits when the
    /// configuration does not encode the length there (pass random bits:
    /// the draft wants them unrelated to earlier CIDs). Without a key the
    /// nonce must itself be random (§5.4); with one any unique nonce (a
    /// counter) will do.
    pub fn encode(
        &self,
        server_id: &[u8],
        nonce: &[u8],
        random_bits: u8,
    ) -> Result<ConnectionId, EncodeError> {
        let (sid_len, nonce_len) = (self.config.server_id_len(), self.config.nonce_len());
        if server_id.len() != sid_len {
            return Err(EncodeError::ServerIdLen {
                expected: sid_len,
                got: server_id.len(),
            });
        }
        if nonce.len() != nonce_len {
            return Err(EncodeError::NonceLen {
                expected: nonce_len,
                got: nonce.len(),
            });
        }
        let len = self.config.plaintext_len();
        let mut block: Block = [0; 19];
        block[..sid_len].copy_from_slice(server_id);
        block[sid_len..len].copy_from_slice(nonce);
        if let Some(aes) = &self.cipher {
            if len == 16 {
                single_pass(&mut block, |b| aes.encrypt_block(b));
            } else {
                block = four_pass_encrypt(aes, &block, len);
            }
        }
        let low = if self.config.encode_len() {
            (len as u8) & 0x1f
        } else {
            random_bits & 0x1f
        };
        let mut cid = ConnectionId {
            bytes: [0; MAX_CID_LEN],
            len: (1 + len) as u8,
        };
        cid.bytes[0] = self.config.id().get() << 5 | low;
        cid.bytes[1..=len].copy_from_slice(&block[..len]);
        Ok(cid)
    }

    /// The server ID a connection ID carries: what a balancer routes by.
    /// Octets past the configuration's CID length (a server's own suffix,
    /// §5.4) are ignored. Four-pass CIDs need only three AES passes when the
    /// nonce is at least as long as the server ID.
    pub fn decode(&self, cid: &[u8]) -> Result<ServerId, DecodeError> {
        let block = self.open(cid, false)?;
        Ok(self.server_id_of(&block))
    }

    /// Server ID and nonce of a connection ID (all four passes): what the
    /// server itself might check.
    pub fn decode_with_nonce(&self, cid: &[u8]) -> Result<(ServerId, Vec<u8>), DecodeError> {
        let block = self.open(cid, true)?;
        let (sid, len) = (self.config.server_id_len(), self.config.plaintext_len());
        Ok((self.server_id_of(&block), block[sid..len].to_vec()))
    }

    fn server_id_of(&self, block: &Block) -> ServerId {
        let mut s = ServerId {
            bytes: [0; 15],
            len: self.config.server_id_len() as u8,
        };
        s.bytes[..usize::from(s.len)].copy_from_slice(&block[..usize::from(s.len)]);
        s
    }

    /// The plaintext block of `cid`; with `full == false` a four-pass
    /// decryption may stop once the server ID is known (the nonce octets
    /// are then not meaningful).
    fn open(&self, cid: &[u8], full: bool) -> Result<Block, DecodeError> {
        let need = self.config.cid_len();
        let Some(&first) = cid.first() else {
            return Err(DecodeError::TooShort { need, have: 0 });
        };
        let bits = ConfigId::bits_of(first);
        if bits != self.config.id().get() {
            return Err(DecodeError::OtherConfig {
                expected: self.config.id().get(),
                got: bits,
            });
        }
        if cid.len() < need {
            return Err(DecodeError::TooShort {
                need,
                have: cid.len(),
            });
        }
        let len = self.config.plaintext_len();
        let mut block: Block = [0; 19];
        block[..len].copy_from_slice(&cid[1..need]);
        if let Some(aes) = &self.cipher {
            if len == 16 {
                single_pass(&mut block, |b| aes.decrypt_block(b));
            } else {
                let four = full || 2 * self.config.server_id_len() > len;
                block = four_pass_decrypt(aes, &block, len, four);
            }
        }
        Ok(block)
    }
}

/// `op`, one AES block encryption or decryption, on `block`'s first 16
/// bytes in place: the single-pass algorithm of a 16-byte plaintext.
fn single_pass(block: &mut Block, op: impl FnOnce(&mut aes::Block)) {
    let mut b = aes::Block::default();
    b.copy_from_slice(&block[..16]);
    op(&mut b);
    block[..16].copy_from_slice(&b);
}

/// One half of the four-pass block: at most 10 octets (half of 19, rounded
/// up).
type Half = [u8; 10];

/// `expand(length, pass, input_bytes)` (§5.4.2.2): the half in the most
/// significant octets, zeros, then `length` in the fifteenth and `pass` in
/// the sixteenth octet.
fn expand(len: usize, pass: u8, half: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..half.len()].copy_from_slice(half);
    out[14] = len as u8;
    out[15] = pass;
    out
}

/// `XOR(target, truncate(AES_ECB(key, expand(len, pass, input)), half_len))`
/// in place on `target`.
fn pass_round(aes: &Aes128, len: usize, pass: u8, input: &[u8], target: &mut [u8]) {
    let mut b = Array::from(expand(len, pass, input));
    aes.encrypt_block(&mut b);
    for (t, r) in target.iter_mut().zip(b.iter()) {
        *t ^= r;
    }
}

/// A pass that changes the right half: `right ^= truncate(AES(expand(len,
/// pass, left)))`, then the first bits it does not own cleared.
fn right_pass(aes: &Aes128, len: usize, pass: u8, left: &Half, right: &mut Half) {
    let half = len.div_ceil(2);
    pass_round(aes, len, pass, &left[..half], &mut right[..half]);
    clear_first_bits(right, len % 2 == 1);
}

/// A pass that changes the left half: `left ^= truncate(AES(expand(len,
/// pass, right)))`, then the last bits it does not own cleared.
fn left_pass(aes: &Aes128, len: usize, pass: u8, right: &Half, left: &mut Half) {
    let half = len.div_ceil(2);
    pass_round(aes, len, pass, &right[..half], &mut left[..half]);
    clear_last_bits(left, half, len % 2 == 1);
}

/// Step 2: split into `left` and `right` of `half_len` octets each; for an
/// odd length the middle octet's high nibble goes left, its low nibble right.
fn split(block: &Block, len: usize) -> (Half, Half, usize) {
    let half = len.div_ceil(2);
    let (mut left, mut right) = ([0u8; 10], [0u8; 10]);
    left[..half].copy_from_slice(&block[..half]);
    right[..half].copy_from_slice(&block[len - half..len]);
    let odd = len % 2 == 1;
    clear_last_bits(&mut left, half, odd);
    clear_first_bits(&mut right, odd);
    (left, right, half)
}

/// For an odd length, the last four bits of a left half are not its own.
fn clear_last_bits(left: &mut Half, half: usize, odd: bool) {
    if odd {
        left[half - 1] &= 0xf0;
    }
}

/// For an odd length, the first four bits of a right half are not its own.
fn clear_first_bits(right: &mut Half, odd: bool) {
    if odd {
        right[0] &= 0x0f;
    }
}

/// Step 12: `left || right`, the shared middle octet of an odd length
/// being the two halves' nibbles (the others are zero).
fn join(left: &Half, right: &Half, half: usize, len: usize) -> Block {
    let mut out: Block = [0; 19];
    out[..half].copy_from_slice(&left[..half]);
    for (i, r) in right[..half].iter().enumerate() {
        out[len - half + i] |= r;
    }
    out
}

fn four_pass_encrypt(aes: &Aes128, block: &Block, len: usize) -> Block {
    // Steps 1-2.
    let (mut left, mut right, half) = split(block, len);
    // Steps 3-5: right_1 = right_0 ^ truncate(AES(expand(len, 1, left_0))).
    right_pass(aes, len, 1, &left, &mut right);
    // Steps 6-7: left_1 = left_0 ^ truncate(AES(expand(len, 2, right_1))).
    left_pass(aes, len, 2, &right, &mut left);
    // Steps 8-9: right_2 = right_1 ^ truncate(AES(expand(len, 3, left_1))).
    right_pass(aes, len, 3, &left, &mut right);
    // Steps 10-11: left_2 = left_1 ^ truncate(AES(expand(len, 4, right_2))).
    left_pass(aes, len, 4, &right, &mut left);
    // Step 12.
    join(&left, &right, half, len)
}

/// The balancer's side (§5.5.2). The draft's pseudo-code clears the first
/// bits of `left_1` after computing `right_1`; the halves' roles make clear
/// it means `right_1` (the encryption's step 9 mirrored), which is what the
/// test vectors need.
fn four_pass_decrypt(aes: &Aes128, block: &Block, len: usize, fourth: bool) -> Block {
    let (mut left, mut right, half) = split(block, len);
    // left_1 = left_2 ^ truncate(AES(expand(len, 4, right_2)))
    left_pass(aes, len, 4, &right, &mut left);
    // right_1 = right_2 ^ truncate(AES(expand(len, 3, left_1)))
    right_pass(aes, len, 3, &left, &mut right);
    // left_0 = left_1 ^ truncate(AES(expand(len, 2, right_1)))
    left_pass(aes, len, 2, &right, &mut left);
    if fourth {
        // right_0 = right_1 ^ truncate(AES(expand(len, 1, left_0)))
        right_pass(aes, len, 1, &left, &mut right);
    }
    join(&left, &right, half, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        assert!(s.len().is_multiple_of(2), "odd hex {s}");
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn key(s: &str) -> [u8; 16] {
        hex(s).try_into().unwrap()
    }

    /// Appendix B's key for the encrypted vectors.
    const B_KEY: &str = "8f95f09245765f80256934e50c66207f";

    /// One Appendix B row: every row encodes the CID length. The table's
    /// first column is a row number, not the config id — the config id is
    /// the first octet's three high bits (0x07 → 0, 0x2f → 1, 0x50 → 2,
    /// 0x12 → 0), which the CID must carry.
    fn vector(sid: &str, nonce: &str, key: Option<[u8; 16]>, cid: &str) {
        let want = hex(cid);
        let id = ConfigId::new(want[0] >> 5).unwrap();
        let (sid, nonce) = (hex(sid), hex(nonce));
        let config = LbConfig::new(id, sid.len() as u8, nonce.len() as u8, key, true).unwrap();
        let codec = Codec::new(config);
        let got = codec.encode(&sid, &nonce, 0).unwrap();
        assert_eq!(got.as_bytes(), &want[..], "encode {sid:02x?}");
        assert_eq!(codec.decode(&want).unwrap().as_bytes(), &sid[..]);
        let (s, n) = codec.decode_with_nonce(&want).unwrap();
        assert_eq!((s.as_bytes(), &n[..]), (&sid[..], &nonce[..]));
    }

    #[test]
    fn appendix_b_unencrypted() {
        vector("c4605e", "4504cc4f", None, "07c4605e4504cc4f");
        // The draft's second plaintext row ("1 350d28b420 3487d970b
        // 20a350d28b4203487d970b") has a nonce of nine hex digits and a CID
        // whose octets do not line up with it; it is a typo in -21 and not
        // checked. A plaintext CID of our own under config 1 instead
        // (0x20 | length 9, then server ID and nonce as they are):
        vector("350d28b420", "3487d970", None, "29350d28b4203487d970");
    }

    #[test]
    fn appendix_b_encrypted() {
        let k = Some(key(B_KEY));
        // 3 + 4 = 7 octets: four-pass, odd length; three decryption passes.
        vector("ed793a", "ee080dbf", k, "0720b1d07b359d3c");
        // 10 + 5 = 15 octets: four-pass; the server ID is longer than the
        // nonce, so decryption needs the fourth pass.
        vector(
            "ed793a51d49b8f5fab65",
            "ee080dbf48",
            k,
            "2fcc381bc74cb4fbad2823a3d1f8fed2",
        );
        // 8 + 8 = 16 octets: single-pass AES-128-ECB.
        vector(
            "ed793a51d49b8f5f",
            "ee080dbf48c0d1e5",
            k,
            "504dd2d05a7b0de9b2b9907afb5ecf8cc3",
        );
        // 9 + 9 = 18 octets: four-pass, even length.
        vector(
            "ed793a51d49b8f5fab",
            "ee080dbf48c0d1e55d",
            k,
            "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc",
        );
    }

    /// §5.4.2.4's worked example, pass by pass (odd length 7).
    #[test]
    fn four_pass_example() {
        let aes = Aes128::new(&Array::from(key("fdf726a9893ec05c0632d3956680baf0")));
        let mut block: Block = [0; 19];
        block[..7].copy_from_slice(&hex("31441a9c69c275"));
        let (left, right, half) = split(&block, 7);
        assert_eq!(
            (&left[..half], &right[..half]),
            (&hex("31441a90")[..], &hex("0c69c275")[..])
        );
        assert_eq!(
            expand(7, 1, &left[..half]).to_vec(),
            hex("31441a90000000000000000000000701")
        );
        let mut b = Array::from(expand(7, 1, &left[..half]));
        aes.encrypt_block(&mut b);
        assert_eq!(b.to_vec(), hex("a255dd8cdacf01948d3a848c3c7fee23"));
        let out = four_pass_encrypt(&aes, &block, 7);
        assert_eq!(&out[..7], &hex("67947d29be054a")[..]);
        let back = four_pass_decrypt(&aes, &out, 7, true);
        assert_eq!(&back[..7], &block[..7]);
        // The full CID of the example, config 0 with the length encoded.
        let config = LbConfig::new(
            ConfigId::new(0).unwrap(),
            3,
            4,
            Some(key("fdf726a9893ec05c0632d3956680baf0")),
            true,
        )
        .unwrap();
        let cid = Codec::new(config)
            .encode(&hex("31441a"), &hex("9c69c275"), 0)
            .unwrap();
        assert_eq!(cid.as_bytes(), &hex("0767947d29be054a")[..]);
    }

    #[test]
    fn expand_example() {
        assert_eq!(
            expand(6, 2, &hex("aaba3c")).to_vec(),
            hex("aaba3c00000000000000000000000602")
        );
    }

    #[test]
    fn first_octet_random_bits_and_errors() {
        let config = LbConfig::new(ConfigId::new(5).unwrap(), 2, 4, None, false).unwrap();
        let codec = Codec::new(config);
        let cid = codec.encode(&[1, 2], &[3, 4, 5, 6], 0xff).unwrap();
        assert_eq!(cid.as_bytes(), &[0xbf, 1, 2, 3, 4, 5, 6]);
        assert_eq!(
            codec.encode(&[1], &[3, 4, 5, 6], 0),
            Err(EncodeError::ServerIdLen {
                expected: 2,
                got: 1
            })
        );
        assert_eq!(
            codec.encode(&[1, 2], &[3, 4, 5], 0),
            Err(EncodeError::NonceLen {
                expected: 4,
                got: 3
            })
        );
        assert_eq!(
            codec.decode(&[]),
            Err(DecodeError::TooShort { need: 7, have: 0 })
        );
        assert_eq!(
            codec.decode(&cid.as_bytes()[..6]),
            Err(DecodeError::TooShort { need: 7, have: 6 })
        );
        assert_eq!(
            codec.decode(&[0xe0, 1, 2, 3, 4, 5, 6]),
            Err(DecodeError::OtherConfig {
                expected: 5,
                got: 7
            })
        );
        // A server's own suffix past the configured length is ignored.
        let mut long = cid.as_bytes().to_vec();
        long.extend_from_slice(&[9, 9, 9]);
        assert_eq!(codec.decode(&long).unwrap().as_bytes(), &[1, 2]);
    }

    fn any_config() -> impl Strategy<Value = LbConfig> {
        (
            0u8..7,
            1u8..=15,
            4u8..=18,
            any::<Option<[u8; 16]>>(),
            any::<bool>(),
        )
            .prop_filter_map("lengths", |(id, s, n, k, e)| {
                LbConfig::new(ConfigId::new(id).ok()?, s, n, k, e).ok()
            })
    }

    proptest! {
        /// Every configuration round-trips every server ID and nonce, and
        /// the balancer's three-pass shortcut finds the same server ID.
        #[test]
        fn round_trip(config in any_config(), bytes in prop::collection::vec(any::<u8>(), 19), bits in any::<u8>()) {
            let codec = Codec::new(config.clone());
            let (sid, nonce) = bytes.split_at(config.server_id_len());
            let nonce = &nonce[..config.nonce_len()];
            let cid = codec.encode(sid, nonce, bits).unwrap();
            prop_assert_eq!(cid.as_bytes().len(), config.cid_len());
            prop_assert_eq!(cid.as_bytes()[0] >> 5, config.id().get());
            let decoded = codec.decode(cid.as_bytes()).unwrap();
            prop_assert_eq!(decoded.as_bytes(), sid);
            let (s, n) = codec.decode_with_nonce(cid.as_bytes()).unwrap();
            prop_assert_eq!(s.as_bytes(), sid);
            prop_assert_eq!(&n[..], nonce);
            if config.key().is_some() {
                prop_assert_ne!(&cid.as_bytes()[1..], &bytes[..config.plaintext_len()]);
            }
        }
    }
}
