//! QUIC-LB (draft-ietf-quic-load-balancers) in the model: a service's
//! connection-ID configurations ([`QuicLbConfig`]: mode, rotation codepoint,
//! server ID length, key), real servers' server IDs ([`QuicServerId`]),
//! their errors, and [`ServiceConfig::check_quic_lb`], the rules a QUIC-LB
//! service's configuration must meet.

use super::*;

/// Most QUIC-LB configurations a service holds at once: the draft's config
/// rotation codepoints 0..=6 (codepoint 7 marks connection IDs that are not
/// routable, draft §3).
pub const MAX_QUIC_LB_CONFIGS: usize = 7;

/// Longest server ID a QUIC-LB configuration may carry (draft §3.1).
pub const MAX_QUIC_SERVER_ID_LEN: usize = 15;

/// Why a QUIC-LB configuration, a server ID, or their combination in a
/// service is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuicLbError {
    /// The config rotation codepoint is not 0..=6.
    #[error(
        "QUIC-LB config rotation codepoint {0} is not 0..=6 (7 marks unroutable connection IDs)"
    )]
    Rotation(u8),
    /// The server ID length is not 1..=15.
    #[error("QUIC-LB server ID length {0} is not 1..=15")]
    ServerIdLen(u8),
    /// The nonce length is not 4..=18.
    #[error("QUIC-LB nonce length {0} is not 4..=18")]
    NonceLen(u8),
    /// Server ID and nonce together exceed 19 bytes (a connection ID is at
    /// most 20 bytes, one of them the first octet).
    #[error("QUIC-LB server ID length {sid} + nonce length {nonce} exceeds 19")]
    TooLong {
        /// Server ID length.
        sid: u8,
        /// Nonce length.
        nonce: u8,
    },
    /// More configurations than there are rotation codepoints.
    #[error("a service holds at most 7 QUIC-LB configs, {0} given")]
    TooMany(usize),
    /// Two configurations share a rotation codepoint.
    #[error("two QUIC-LB configs use config rotation codepoint {0}")]
    DuplicateRotation(u8),
    /// Configurations of one service disagree on the server ID length.
    #[error(
        "the QUIC-LB configs of a service must share one server ID length ({0} and {1} given): \
         rotation changes the key or nonce length, not the servers' IDs"
    )]
    MixedServerIdLen(u8, u8),
    /// QUIC-LB on a service that does not carry UDP datagrams.
    #[error("QUIC-LB needs a UDP service (-u); {0} carries no QUIC")]
    NotUdp(&'static str),
    /// An option that QUIC-LB routing replaces.
    #[error("QUIC-LB routes each datagram by its connection ID; it does not combine with {0}")]
    Combination(&'static str),
    /// A `--quic-lb` spec that does not parse.
    #[error("QUIC-LB spec `{spec}`: {why} (expected cr=N,sid=N,nonce=N[,key=32 hex digits])")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A server ID that is not 1..=15 bytes of hex.
    #[error("QUIC server ID `{0}` is not 1 to 15 bytes in hex (2 to 30 hex digits)")]
    ServerIdSyntax(String),
    /// A real server's server ID length differs from the service's configs'.
    #[error(
        "QUIC server ID {sid} of {dest} is {len} bytes; the service's QUIC-LB configs use {want}"
    )]
    ServerIdMismatch {
        /// The server ID.
        sid: QuicServerId,
        /// The real server (`addr:port`).
        dest: String,
        /// Its length.
        len: usize,
        /// The configs' server ID length.
        want: u8,
    },
    /// Two real servers of a service share a server ID.
    #[error("QUIC server ID {sid} is already {other}'s in this service")]
    DuplicateServerId {
        /// The server ID.
        sid: QuicServerId,
        /// The real server that has it.
        other: String,
    },
    /// A real server has a server ID but the service has no QUIC-LB config.
    #[error("{0} has a QUIC server ID but the service has no QUIC-LB config (--quic-lb)")]
    NoConfig(String),
}

/// How a QUIC-LB configuration protects the server ID (draft §5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum QuicLbMode {
    /// No key: server ID in clear after the first octet.
    Plaintext,
    /// A key and server ID + nonce == 16: one AES-128-ECB block.
    SinglePass,
    /// A key and server ID + nonce != 16: the four-pass Feistel network.
    FourPass,
}

impl QuicLbMode {
    /// `plaintext`, `single-pass` or `four-pass`, as listings print it.
    pub const fn name(self) -> &'static str {
        match self {
            QuicLbMode::Plaintext => "plaintext",
            QuicLbMode::SinglePass => "single-pass",
            QuicLbMode::FourPass => "four-pass",
        }
    }
}

/// One QUIC-LB configuration (draft-ietf-quic-load-balancers-21 §3): the
/// real servers of the service issue connection IDs whose first octet's top
/// three bits are `rotation`, followed by their `server_id_len`-byte server
/// ID and a `nonce_len`-byte nonce, encrypted when there is a `key`. The
/// balancer decodes the server ID to route by it.
///
/// `Debug` does not print the key; [`QuicLbConfig::to_spec`] does (what
/// `ipvsadm -S` saves so `-R` restores).
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QuicLbConfig {
    /// Config rotation codepoint, 0..=6 (the first octet's top three bits).
    pub rotation: u8,
    /// Server ID length in bytes, 1..=15.
    pub server_id_len: u8,
    /// Nonce length in bytes, 4..=18; `server_id_len + nonce_len <= 19`.
    pub nonce_len: u8,
    /// AES-128 key. `None` = plaintext; with a key: single-pass when
    /// `server_id_len + nonce_len == 16`, else four-pass (draft §5).
    pub key: Option<[u8; 16]>,
}

impl QuicLbConfig {
    /// Check the draft's ranges: rotation 0..=6, server ID 1..=15 bytes,
    /// nonce 4..=18 bytes, both together at most 19.
    pub fn validate(&self) -> Result<(), QuicLbError> {
        if self.rotation > 6 {
            return Err(QuicLbError::Rotation(self.rotation));
        }
        if !(1..=15).contains(&self.server_id_len) {
            return Err(QuicLbError::ServerIdLen(self.server_id_len));
        }
        if !(4..=18).contains(&self.nonce_len) {
            return Err(QuicLbError::NonceLen(self.nonce_len));
        }
        if self.server_id_len + self.nonce_len > 19 {
            return Err(QuicLbError::TooLong {
                sid: self.server_id_len,
                nonce: self.nonce_len,
            });
        }
        Ok(())
    }

    /// Which of the draft's three forms this configuration uses.
    pub fn mode(&self) -> QuicLbMode {
        match self.key {
            None => QuicLbMode::Plaintext,
            Some(_) if self.server_id_len + self.nonce_len == 16 => QuicLbMode::SinglePass,
            Some(_) => QuicLbMode::FourPass,
        }
    }

    /// Length of the connection IDs the configuration issues: first octet,
    /// server ID and nonce (what a short header's DCID length is).
    pub fn cid_len(&self) -> usize {
        1 + usize::from(self.server_id_len) + usize::from(self.nonce_len)
    }

    /// A fingerprint of the key (8 hex digits of a SipHash of it), so a
    /// listing can tell keys apart without showing them. `None` without a
    /// key.
    pub fn key_fingerprint(&self) -> Option<String> {
        use core::hash::Hasher;
        let key = self.key?;
        let mut h =
            siphasher::sip::SipHasher13::new_with_keys(0x7276_735f_7175_6963, 0x6b65_795f_6670);
        h.write(&key);
        Some(format!("{:08x}", h.finish() as u32))
    }

    /// The spec `--quic-lb` reads and `ipvsadm -S` writes:
    /// `cr=N,sid=N,nonce=N[,key=HEX32]`, the key in clear.
    pub fn to_spec(&self) -> String {
        let mut s = format!(
            "cr={},sid={},nonce={}",
            self.rotation, self.server_id_len, self.nonce_len
        );
        if let Some(k) = self.key {
            s.push_str(",key=");
            for b in k {
                s.push_str(&format!("{b:02x}"));
            }
        }
        s
    }

    /// Parse a `--quic-lb` spec: comma-separated `cr=N` (also `rotation=`),
    /// `sid=N` (also `server_id_len=`), `nonce=N` (also `nonce_len=`) and an
    /// optional `key=` of 32 hex digits, each once, then
    /// [`QuicLbConfig::validate`].
    pub fn parse_spec(spec: &str) -> Result<Self, QuicLbError> {
        let bad = |why: String| QuicLbError::Spec {
            spec: spec.to_owned(),
            why,
        };
        let (mut cr, mut sid, mut nonce, mut key) = (None, None, None, None);
        for part in spec.split(',') {
            let Some((name, value)) = part.split_once('=') else {
                return Err(bad(format!("`{part}` is not NAME=VALUE")));
            };
            let slot = match name.trim() {
                "cr" | "rotation" => &mut cr,
                "sid" | "server_id_len" => &mut sid,
                "nonce" | "nonce_len" => &mut nonce,
                "key" => {
                    if key.is_some() {
                        return Err(bad("`key` given twice".into()));
                    }
                    key =
                        Some(parse_key_hex(value.trim()).ok_or_else(|| {
                            bad("the key is not 32 hex digits (16 bytes)".into())
                        })?);
                    continue;
                }
                other => return Err(bad(format!("unknown field `{other}`"))),
            };
            if slot.is_some() {
                return Err(bad(format!("`{}` given twice", name.trim())));
            }
            let n: u8 = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{}` is not a small number", value.trim())))?;
            *slot = Some(n);
        }
        let (Some(rotation), Some(server_id_len), Some(nonce_len)) = (cr, sid, nonce) else {
            return Err(bad("cr, sid and nonce are all required".into()));
        };
        let c = QuicLbConfig {
            rotation,
            server_id_len,
            nonce_len,
            key,
        };
        c.validate()?;
        Ok(c)
    }
}

impl QuicLbConfig {
    /// A 16-byte AES key from 32 hex digits (`None` otherwise), as
    /// `key=` and keepalived's `key` write it.
    pub fn parse_key(hex: &str) -> Option<[u8; 16]> {
        parse_key_hex(hex)
    }
}

fn parse_key_hex(s: &str) -> Option<[u8; 16]> {
    let v = parse_hex(s)?;
    v.try_into().ok()
}

/// Bytes from an even number of hex digits (`None` otherwise or if empty).
fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

impl fmt::Debug for QuicLbConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuicLbConfig")
            .field("rotation", &self.rotation)
            .field("server_id_len", &self.server_id_len)
            .field("nonce_len", &self.nonce_len)
            .field("key", &self.key.map(|_| "<set>"))
            .finish()
    }
}

/// A real server's QUIC-LB server ID: 1..=15 bytes, written in hex
/// (`--quic-sid 0a0b0c`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "String", into = "String")
)]
pub struct QuicServerId {
    len: u8,
    bytes: [u8; MAX_QUIC_SERVER_ID_LEN],
}

impl QuicServerId {
    /// A server ID of these bytes (`None` unless 1..=15 of them).
    pub fn new(id: &[u8]) -> Option<Self> {
        if id.is_empty() || id.len() > MAX_QUIC_SERVER_ID_LEN {
            return None;
        }
        let mut bytes = [0u8; MAX_QUIC_SERVER_ID_LEN];
        bytes[..id.len()].copy_from_slice(id);
        Some(QuicServerId {
            len: id.len() as u8,
            bytes,
        })
    }

    /// The ID's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Its length in bytes (1..=15).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Never true (present for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Display for QuicServerId {
    /// Lower-case hex, two digits a byte.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for QuicServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QuicServerId({self})")
    }
}

impl core::str::FromStr for QuicServerId {
    type Err = QuicLbError;
    /// 2 to 30 hex digits (an optional `0x` prefix is accepted).
    fn from_str(s: &str) -> Result<Self, QuicLbError> {
        let digits = s.strip_prefix("0x").unwrap_or(s);
        parse_hex(digits)
            .and_then(|v| QuicServerId::new(&v))
            .ok_or_else(|| QuicLbError::ServerIdSyntax(s.to_owned()))
    }
}

impl TryFrom<String> for QuicServerId {
    type Error = QuicLbError;
    fn try_from(s: String) -> Result<Self, QuicLbError> {
        s.parse()
    }
}

impl From<QuicServerId> for String {
    fn from(id: QuicServerId) -> String {
        id.to_string()
    }
}

impl ServiceConfig {
    /// Check [`ServiceConfig::quic_lb`] for a service `key`: each config
    /// valid, at most 7, distinct rotation codepoints, one server ID length,
    /// only on a UDP service (not TCP, SCTP or a firewall mark), and not
    /// with persistence or one-packet scheduling (the connection ID, not
    /// the client address, decides where a datagram goes).
    pub fn check_quic_lb(&self, key: &ServiceKey) -> Result<(), QuicLbError> {
        if self.quic_lb.is_empty() {
            return Ok(());
        }
        match key {
            ServiceKey::Addr {
                protocol: Protocol::Udp,
                ..
            } => {}
            ServiceKey::Addr {
                protocol: Protocol::Tcp,
                ..
            } => return Err(QuicLbError::NotUdp("a TCP service")),
            ServiceKey::Addr {
                protocol: Protocol::Sctp,
                ..
            } => return Err(QuicLbError::NotUdp("an SCTP service")),
            ServiceKey::Fwmark { .. } => {
                return Err(QuicLbError::NotUdp("a firewall-mark service"));
            }
        }
        if self.persistent.is_some() {
            return Err(QuicLbError::Combination("persistence (-p)"));
        }
        if self.one_packet {
            return Err(QuicLbError::Combination("one-packet scheduling (-o)"));
        }
        if self.quic_lb.len() > MAX_QUIC_LB_CONFIGS {
            return Err(QuicLbError::TooMany(self.quic_lb.len()));
        }
        for (i, c) in self.quic_lb.iter().enumerate() {
            c.validate()?;
            if let Some(prev) = self.quic_lb[..i].iter().find(|p| p.rotation == c.rotation) {
                return Err(QuicLbError::DuplicateRotation(prev.rotation));
            }
            if c.server_id_len != self.quic_lb[0].server_id_len {
                return Err(QuicLbError::MixedServerIdLen(
                    self.quic_lb[0].server_id_len,
                    c.server_id_len,
                ));
            }
        }
        Ok(())
    }

    /// The server ID length of the service's QUIC-LB configs (`None` when it
    /// has none).
    pub fn quic_server_id_len(&self) -> Option<u8> {
        self.quic_lb.first().map(|c| c.server_id_len)
    }

    /// Check the real servers' server IDs against the service's configs:
    /// each of the configs' length, none shared, none without configs.
    pub fn check_quic_server_ids<'a>(
        &self,
        dests: impl IntoIterator<Item = &'a DestConfig>,
    ) -> Result<(), QuicLbError> {
        let want = self.quic_server_id_len();
        let mut seen: Vec<(QuicServerId, &DestConfig)> = Vec::new();
        for d in dests {
            let Some(sid) = d.quic_server_id else {
                continue;
            };
            let name = || dest_name(d);
            let Some(want) = want else {
                return Err(QuicLbError::NoConfig(name()));
            };
            if sid.len() != usize::from(want) {
                return Err(QuicLbError::ServerIdMismatch {
                    sid,
                    dest: name(),
                    len: sid.len(),
                    want,
                });
            }
            if let Some((_, other)) = seen.iter().find(|(s, _)| *s == sid) {
                return Err(QuicLbError::DuplicateServerId {
                    sid,
                    other: dest_name(other),
                });
            }
            seen.push((sid, d));
        }
        Ok(())
    }
}

fn dest_name(d: &DestConfig) -> String {
    match d.addr {
        IpAddr::V4(a) => format!("{a}:{}", d.port),
        IpAddr::V6(a) => format!("[{a}]:{}", d.port),
    }
}
