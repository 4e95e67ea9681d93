//! Who may do what, how fast, and on which version: the bearer token
//! (compared in constant time), the per-client rate bound (a sans-IO token
//! bucket, time an argument), ETags and `If-Match`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

/// Whether reads need the token (`--api-reads`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Reads {
    /// Anyone who reaches the listener may read.
    #[default]
    Open,
    /// Reads need the bearer token too.
    Token,
}

/// The API's settings, from rvsd's options.
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// `--api-token-file`: the bearer token's file (read at start).
    pub token_file: Option<std::path::PathBuf>,
    /// `--api-writes`: writes are enabled (off by default).
    pub writes: bool,
    /// `--api-reads`.
    pub reads: Reads,
    /// `--api-rate`: requests per second per client address (bursts of
    /// twice as many).
    pub rate: u32,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            token_file: None,
            writes: false,
            reads: Reads::Open,
            rate: 100,
        }
    }
}

/// The settings as the running API uses them: the token read.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// The bearer token, if one is configured.
    pub token: Option<Vec<u8>>,
    /// Writes enabled.
    pub writes: bool,
    /// Reads need the token.
    pub reads: Reads,
}

/// What a request is refused for, before it reaches a handler.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token or a wrong one.
    Unauthorized,
    /// Writes are disabled.
    WritesDisabled,
}

impl Policy {
    /// Read the token file of `opts` (trimmed; an empty file is an error)
    /// and refuse writes on a non-loopback listener without a token.
    pub(crate) fn load(
        opts: &ApiOptions,
        listen: Option<std::net::SocketAddr>,
    ) -> Result<Policy, String> {
        let token = match &opts.token_file {
            Some(p) => {
                let text = std::fs::read(p)
                    .map_err(|e| format!("--api-token-file {}: {e}", p.display()))?;
                let t = text.trim_ascii().to_vec();
                if t.is_empty() {
                    return Err(format!(
                        "--api-token-file {}: the file is empty",
                        p.display()
                    ));
                }
                Some(t)
            }
            None => None,
        };
        if opts.writes
            && token.is_none()
            && let Some(a) = listen
            && !a.ip().is_loopback()
        {
            return Err(format!(
                "--api-writes on a non-loopback --http address ({a}) needs --api-token-file"
            ));
        }
        if opts.reads == Reads::Token && token.is_none() {
            return Err("--api-reads token needs --api-token-file".into());
        }
        Ok(Policy {
            token,
            writes: opts.writes,
            reads: opts.reads,
        })
    }

    /// Whether `authorization` (the header's value) carries the token;
    /// true when no token is configured.
    pub(crate) fn authorized(&self, authorization: Option<&[u8]>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = authorization.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        given.trim_ascii().ct_eq(token).into()
    }

    /// Whether a request may go on: `write` for anything but GET/HEAD.
    pub(crate) fn admit(&self, write: bool, authorization: Option<&[u8]>) -> Result<(), Refusal> {
        if write {
            if !self.authorized(authorization) {
                return Err(Refusal::Unauthorized);
            }
            if !self.writes {
                return Err(Refusal::WritesDisabled);
            }
        } else if self.reads == Reads::Token && !self.authorized(authorization) {
            return Err(Refusal::Unauthorized);
        }
        Ok(())
    }
}

/// Per-client token buckets: `rate` requests a second, bursts of `burst`.
/// Sans-IO: the caller passes the time.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

/// Clients remembered at most; past it, full buckets are forgotten.
const MAX_CLIENTS: usize = 4096;

impl RateLimiter {
    /// `rate` requests per second with bursts of twice that.
    pub(crate) fn new(rate: u32) -> Self {
        let rate = f64::from(rate.max(1));
        RateLimiter {
            rate,
            burst: rate * 2.0,
            buckets: HashMap::new(),
        }
    }

    /// Take one token for `client` at `now`; false when its bucket is empty.
    pub(crate) fn allow(&mut self, client: IpAddr, now: Instant) -> bool {
        if self.buckets.len() >= MAX_CLIENTS && !self.buckets.contains_key(&client) {
            let (rate, burst) = (self.rate, self.burst);
            self.buckets.retain(|_, (level, at)| {
                *level + now.saturating_duration_since(*at).as_secs_f64() * rate < burst
            });
            if self.buckets.len() >= MAX_CLIENTS {
                return false;
            }
        }
        let (level, at) = self.buckets.entry(client).or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() * self.rate;
        *level = (*level + refill).min(self.burst);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until `client` has a token again (for `Retry-After`).
    pub(crate) fn retry_after(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.rate).max(Duration::from_secs(1))
    }
}

/// A strong ETag over `value`'s JSON text (the quotes not included).
pub(crate) fn etag_of<T: serde::Serialize>(value: &T) -> String {
    let text = serde_json::to_string(value).unwrap_or_default();
    etag_bytes(text.as_bytes())
}

/// A strong ETag over bytes.
pub(crate) fn etag_bytes(b: &[u8]) -> String {
    // SipHash with fixed keys: stable within a build, which is all an
    // ETag needs (a restarted rvsd may answer 412 once).
    let mut h = std::hash::DefaultHasher::new();
    b.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Whether an `If-Match` header value matches `current` (`*` matches any
/// existing resource; weak tags never match, as RFC 9110 wants for
/// If-Match).
pub(crate) fn if_match(header: &str, current: &str) -> bool {
    header
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix('"').and_then(|t| t.strip_suffix('"')) == Some(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(token: Option<&str>, writes: bool, reads: Reads) -> Policy {
        Policy {
            token: token.map(|t| t.as_bytes().to_vec()),
            writes,
            reads,
        }
    }

    #[test]
    fn writes_need_the_token_and_the_switch() {
        let p = policy(Some("s3cret"), true, Reads::Open);
        assert_eq!(p.admit(true, None), Err(Refusal::Unauthorized));
        assert_eq!(
            p.admit(true, Some(b"Bearer nope")),
            Err(Refusal::Unauthorized)
        );
        assert_eq!(
            p.admit(true, Some(b"Bearer s3cre")),
            Err(Refusal::Unauthorized)
        );
        assert_eq!(p.admit(true, Some(b"s3cret")), Err(Refusal::Unauthorized));
        assert_eq!(p.admit(true, Some(b"Bearer s3cret")), Ok(()));
        assert_eq!(p.admit(false, None), Ok(()));
        let p = policy(Some("s3cret"), false, Reads::Token);
        assert_eq!(
            p.admit(true, Some(b"Bearer s3cret")),
            Err(Refusal::WritesDisabled)
        );
        assert_eq!(p.admit(false, None), Err(Refusal::Unauthorized));
        assert_eq!(p.admit(false, Some(b"Bearer s3cret")), Ok(()));
        // No token (loopback only): writes by the switch alone.
        let p = policy(None, true, Reads::Open);
        assert_eq!(p.admit(true, None), Ok(()));
        assert_eq!(
            policy(None, false, Reads::Open).admit(true, None),
            Err(Refusal::WritesDisabled)
        );
    }

    #[test]
    fn writes_on_a_public_address_need_a_token() {
        let opts = ApiOptions {
            writes: true,
            ..ApiOptions::default()
        };
        let e = Policy::load(&opts, Some("192.0.2.1:9180".parse().unwrap())).unwrap_err();
        assert!(e.contains("needs --api-token-file"), "{e}");
        assert!(Policy::load(&opts, Some("127.0.0.1:9180".parse().unwrap())).is_ok());
        assert!(Policy::load(&opts, Some("[::1]:9180".parse().unwrap())).is_ok());
        let dir = std::env::temp_dir().join(format!("rvs-api-token-{}", std::process::id()));
        std::fs::write(&dir, "tok\n").unwrap();
        let opts = ApiOptions {
            token_file: Some(dir.clone()),
            ..opts
        };
        let p = Policy::load(&opts, Some("192.0.2.1:9180".parse().unwrap())).unwrap();
        assert_eq!(p.token.as_deref(), Some(&b"tok"[..]));
        std::fs::write(&dir, " \n").unwrap();
        let e = Policy::load(&opts, None).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn token_bucket_per_client() {
        let t0 = Instant::now();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let mut l = RateLimiter::new(5);
        // A burst of 10, then empty.
        for _ in 0..10 {
            assert!(l.allow(a, t0));
        }
        assert!(!l.allow(a, t0));
        // Another client has its own bucket.
        assert!(l.allow(b, t0));
        // 5 a second: 200 ms later one more.
        let t1 = t0 + Duration::from_millis(200);
        assert!(l.allow(a, t1));
        assert!(!l.allow(a, t1));
        // Refill is capped at the burst.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..10 {
            assert!(l.allow(a, t2));
        }
        assert!(!l.allow(a, t2));
    }

    #[test]
    fn the_client_table_is_bounded() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(1);
        for i in 0..MAX_CLIENTS as u32 {
            assert!(l.allow(IpAddr::from(std::net::Ipv4Addr::from(i)), t0));
        }
        // Every bucket is in use: a new client waits.
        let new = IpAddr::from(std::net::Ipv4Addr::from(u32::MAX));
        assert!(!l.allow(new, t0));
        // Once the others refilled, they are forgotten and it gets in.
        assert!(l.allow(new, t0 + Duration::from_secs(10)));
        assert!(l.buckets.len() <= 1);
    }

    #[test]
    fn etags_and_if_match() {
        let a = etag_of(&serde_json::json!({"w": 1}));
        let b = etag_of(&serde_json::json!({"w": 2}));
        assert_ne!(a, b);
        assert_eq!(a, etag_of(&serde_json::json!({"w": 1})));
        assert!(if_match(&format!("\"{a}\""), &a));
        assert!(if_match(&format!("\"{b}\", \"{a}\""), &a));
        assert!(if_match("*", &a));
        assert!(!if_match(&format!("\"{b}\""), &a));
        assert!(!if_match(&format!("W/\"{a}\""), &a));
        assert!(!if_match(&a, &a));
    }
}
