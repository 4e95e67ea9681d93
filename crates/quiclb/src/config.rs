//! One QUIC-LB configuration (draft-ietf-quic-load-balancers-21 §3, §5).
//!
//! A configuration is what the configuration agent hands to the balancer
//! and to every server of a pool: which config rotation codepoint it owns,
//! how long the server ID and the nonce are, and optionally the AES-128 key
//! that hides the server ID from observers. [`LbConfig::new`] enforces the
//! draft's limits so that a [`crate::Codec`] built from it never fails on
//! its own parameters.

use std::fmt;
use std::str::FromStr;

/// Why a configuration was rejected. Every variant names the offending
/// value, so the operator's message can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Config rotation codepoints are three bits; 7 (0b111) is reserved by
    /// the draft (§3.2) for servers without a configuration.
    #[error(
        "config id {0} out of range: QUIC-LB config ids are 0..=6 (7 is reserved for unroutable CIDs)"
    )]
    ConfigId(u8),
    /// The server ID length must be 1..=15 octets (§5.3, Appendix A).
    #[error("server ID length {0} out of range 1..=15 octets")]
    ServerIdLen(u8),
    /// The nonce length must be 4..=18 octets (§5.3, Appendix A).
    #[error("nonce length {0} out of range 4..=18 octets")]
    NonceLen(u8),
    /// Server ID and nonce must fit a 20-octet CID with its first octet.
    #[error(
        "server ID length {server_id_len} + nonce length {nonce_len} exceeds 19 octets (a QUIC CID is at most 20 with its first octet)"
    )]
    TooLong {
        /// The configured server ID length.
        server_id_len: u8,
        /// The configured nonce length.
        nonce_len: u8,
    },
    /// The key must be 16 octets (AES-128), written as 32 hex digits.
    #[error("key must be 16 octets (32 hex digits), got {0} hex digits")]
    KeyLen(usize),
    /// A key character is not a hex digit.
    #[error("key has a non-hex character at position {0}")]
    KeyHex(usize),
    /// The text form has an item that is not `name=value` or a known flag.
    #[error("unknown QUIC-LB config item {0:?} (expected id=, sid=, nonce=, key=, encode-len)")]
    UnknownItem(String),
    /// A numeric item's value is not a number.
    #[error("QUIC-LB config item {item}: {value:?} is not a number")]
    Number {
        /// The item's name.
        item: &'static str,
        /// The text given.
        value: String,
    },
    /// A required item is missing from the text form.
    #[error("QUIC-LB config lacks {0}=")]
    Missing(&'static str),
    /// The same item appears twice in the text form.
    #[error("QUIC-LB config item {0}= given twice")]
    Duplicate(&'static str),
}

/// A config rotation codepoint: the three most significant bits of every
/// QUIC-LB connection ID (§3.1), 0..=6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConfigId(u8);

impl ConfigId {
    /// The codepoint servers without a configuration use (§3.2): CIDs
    /// carrying it are always unroutable.
    pub const UNROUTABLE: u8 = 0b111;

    /// A codepoint, checked to be 0..=6.
    pub fn new(id: u8) -> Result<Self, ConfigError> {
        if id < Self::UNROUTABLE {
            Ok(Self(id))
        } else {
            Err(ConfigError::ConfigId(id))
        }
    }

    /// The codepoint's value, 0..=6.
    pub fn get(self) -> u8 {
        self.0
    }

    /// The config rotation bits of a CID's first octet, 0..=7 (7 being the
    /// reserved unroutable codepoint, hence not a [`ConfigId`]).
    pub fn bits_of(first_octet: u8) -> u8 {
        first_octet >> 5
    }
}

impl fmt::Display for ConfigId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One validated QUIC-LB configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct LbConfig {
    id: ConfigId,
    server_id_len: u8,
    nonce_len: u8,
    key: Option<[u8; 16]>,
    encode_len: bool,
}

impl fmt::Debug for LbConfig {
    // The key is a secret: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LbConfig")
            .field("id", &self.id)
            .field("server_id_len", &self.server_id_len)
            .field("nonce_len", &self.nonce_len)
            .field("encrypted", &self.key.is_some())
            .field("encode_len", &self.encode_len)
            .finish()
    }
}

impl LbConfig {
    /// A configuration with the draft's limits checked: server ID 1..=15
    /// octets, nonce 4..=18 octets, the two together at most 19. Without a
    /// key the server ID travels in plaintext (observers can link the
    /// connection IDs of one server); with one it is encrypted — single-pass
    /// when server ID + nonce is 16 octets, four-pass otherwise.
    /// `encode_len` makes the first octet's five low bits carry the CID
    /// length less one (§3.3), for hardware offloads; otherwise servers fill
    /// them at random.
    pub fn new(
        id: ConfigId,
        server_id_len: u8,
        nonce_len: u8,
        key: Option<[u8; 16]>,
        encode_len: bool,
    ) -> Result<Self, ConfigError> {
        if !(1..=15).contains(&server_id_len) {
            return Err(ConfigError::ServerIdLen(server_id_len));
        }
        if !(4..=18).contains(&nonce_len) {
            return Err(ConfigError::NonceLen(nonce_len));
        }
        if server_id_len + nonce_len > 19 {
            return Err(ConfigError::TooLong {
                server_id_len,
                nonce_len,
            });
        }
        Ok(Self {
            id,
            server_id_len,
            nonce_len,
            key,
            encode_len,
        })
    }

    /// The config rotation codepoint.
    pub fn id(&self) -> ConfigId {
        self.id
    }

    /// Server ID length in octets.
    pub fn server_id_len(&self) -> usize {
        usize::from(self.server_id_len)
    }

    /// Nonce length in octets.
    pub fn nonce_len(&self) -> usize {
        usize::from(self.nonce_len)
    }

    /// Server ID + nonce: the length of the (possibly encrypted) block after
    /// the first octet.
    pub fn plaintext_len(&self) -> usize {
        self.server_id_len() + self.nonce_len()
    }

    /// Length of the connection IDs this configuration makes: first octet,
    /// server ID and nonce.
    pub fn cid_len(&self) -> usize {
        1 + self.plaintext_len()
    }

    /// The AES-128 key, if the server ID is encrypted.
    pub fn key(&self) -> Option<&[u8; 16]> {
        self.key.as_ref()
    }

    /// Whether the first octet self-encodes the CID length.
    pub fn encode_len(&self) -> bool {
        self.encode_len
    }
}

/// The text form: comma-separated items `id=N` (default 0), `sid=N`,
/// `nonce=N`, optional `key=HEX32` and the flag `encode-len`, e.g.
/// `id=1,sid=3,nonce=4,key=8f95f09245765f80256934e50c66207f,encode-len`.
impl FromStr for LbConfig {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut id: Option<u8> = None;
        let mut sid: Option<u8> = None;
        let mut nonce: Option<u8> = None;
        let mut key: Option<[u8; 16]> = None;
        let mut encode_len = false;
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v.trim()),
                None => (item, ""),
            };
            match name {
                "id" => set(&mut id, "id", number("id", value)?)?,
                "sid" => set(&mut sid, "sid", number("sid", value)?)?,
                "nonce" => set(&mut nonce, "nonce", number("nonce", value)?)?,
                "key" => set(&mut key, "key", parse_key(value)?)?,
                "encode-len" if value.is_empty() => encode_len = true,
                _ => return Err(ConfigError::UnknownItem(item.to_owned())),
            }
        }
        LbConfig::new(
            ConfigId::new(id.unwrap_or(0))?,
            sid.ok_or(ConfigError::Missing("sid"))?,
            nonce.ok_or(ConfigError::Missing("nonce"))?,
            key,
            encode_len,
        )
    }
}

fn set<T>(slot: &mut Option<T>, item: &'static str, value: T) -> Result<(), ConfigError> {
    if slot.replace(value).is_some() {
        return Err(ConfigError::Duplicate(item));
    }
    Ok(())
}

fn number(item: &'static str, value: &str) -> Result<u8, ConfigError> {
    value.parse().map_err(|_| ConfigError::Number {
        item,
        value: value.to_owned(),
    })
}

/// A 16-octet key from 32 hex digits.
pub fn parse_key(hex: &str) -> Result<[u8; 16], ConfigError> {
    let digits = hex.as_bytes();
    if digits.len() != 32 {
        return Err(ConfigError::KeyLen(digits.len()));
    }
    let mut key = [0u8; 16];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        let hi = hex_val(pair[0]).ok_or(ConfigError::KeyHex(2 * i))?;
        let lo = hex_val(pair[1]).ok_or(ConfigError::KeyHex(2 * i + 1))?;
        key[i] = hi << 4 | lo;
    }
    Ok(key)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cid(id: u8) -> ConfigId {
        ConfigId::new(id).unwrap()
    }

    #[test]
    fn limits() {
        assert_eq!(ConfigId::new(7), Err(ConfigError::ConfigId(7)));
        assert!(ConfigId::new(6).is_ok());
        assert_eq!(
            LbConfig::new(cid(0), 0, 4, None, false),
            Err(ConfigError::ServerIdLen(0))
        );
        assert_eq!(
            LbConfig::new(cid(0), 16, 4, None, false),
            Err(ConfigError::ServerIdLen(16))
        );
        assert_eq!(
            LbConfig::new(cid(0), 1, 3, None, false),
            Err(ConfigError::NonceLen(3))
        );
        assert_eq!(
            LbConfig::new(cid(0), 1, 19, None, false),
            Err(ConfigError::NonceLen(19))
        );
        assert_eq!(
            LbConfig::new(cid(0), 3, 17, Some([0; 16]), false),
            Err(ConfigError::TooLong {
                server_id_len: 3,
                nonce_len: 17
            })
        );
        let max = LbConfig::new(cid(0), 1, 18, None, true).unwrap();
        assert_eq!(max.cid_len(), 20);
    }

    #[test]
    fn text_form() {
        let c: LbConfig = "id=1, sid=3,nonce=4,key=8f95f09245765f80256934e50c66207f,encode-len"
            .parse()
            .unwrap();
        assert_eq!(c.id().get(), 1);
        assert_eq!((c.server_id_len(), c.nonce_len(), c.cid_len()), (3, 4, 8));
        assert_eq!(c.key().unwrap()[0], 0x8f);
        assert!(c.encode_len());
        let plain: LbConfig = "sid=2,nonce=6".parse().unwrap();
        assert_eq!(plain.id().get(), 0);
        assert!(plain.key().is_none() && !plain.encode_len());
        assert!(
            !format!("{c:?}").contains("8f"),
            "Debug must not print the key"
        );

        assert_eq!(
            "sid=2".parse::<LbConfig>(),
            Err(ConfigError::Missing("nonce"))
        );
        assert_eq!(
            "sid=2,nonce=4,sid=3".parse::<LbConfig>(),
            Err(ConfigError::Duplicate("sid"))
        );
        assert_eq!(
            "sid=x,nonce=4".parse::<LbConfig>(),
            Err(ConfigError::Number {
                item: "sid",
                value: "x".into()
            })
        );
        assert_eq!(
            "sid=2,nonce=4,key=00".parse::<LbConfig>(),
            Err(ConfigError::KeyLen(2))
        );
        assert_eq!(
            "sid=2,nonce=4,key=8f95f09245765f80256934e50c66207g".parse::<LbConfig>(),
            Err(ConfigError::KeyHex(31))
        );
        assert_eq!(
            "sid=2,nonce=4,bogus".parse::<LbConfig>(),
            Err(ConfigError::UnknownItem("bogus".into()))
        );
        assert_eq!(
            "id=7,sid=2,nonce=4".parse::<LbConfig>(),
            Err(ConfigError::ConfigId(7))
        );
    }
}
