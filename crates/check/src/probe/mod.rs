//! The probes: one health check of one target, run for real on tokio.
//!
//! A probe is keepalived's checker body without its retry/timing policy:
//! [`run`] performs one attempt of `TCP_CHECK`, `HTTP_GET`/`SSL_GET`,
//! `MISC_CHECK`, `DNS_CHECK`, `UDP_CHECK`, `SMTP_CHECK` or `PING_CHECK` and
//! says whether it passed and, if not, why ([`Failure`]). The policy
//! (retries, delay_loop, quorum...) lives outside this module and decides
//! what a result means.
//!
//! Timeouts follow keepalived, per checker type (checked in its sources):
//! - TCP: `connect_timeout` bounds the connect.
//! - HTTP/SSL: one `connect_timeout` bounds the connect and the TLS
//!   handshake together, then EACH following write or read separately
//!   (keepalived re-arms the timer for every I/O step), so a server that
//!   keeps sending slowly is not cut off; one fresh connection per URL.
//! - SMTP: `connect_timeout` bounds the connect, then each read and write.
//! - DNS and UDP: `connect_timeout` bounds the whole exchange.
//! - MISC: the spec's own `timeout` (keepalived's `misc_timeout`, defaulting
//!   to `delay_loop`, resolved by the caller); on expiry the process group
//!   gets SIGTERM, then SIGKILL 2 s later, as keepalived does.
//!
//! Nothing here keeps state between runs except the TLS client
//! configurations (built once per trust setting, see [`tls`]).
//!
//! From a configuration checker (`rvs_config::model::Checker`) the caller
//! builds, keyword by keyword:
//! - target: `addr` = (`connect_ip` or the real server's address,
//!   `effective.connect_port`); `bind` = `bindto` + `bind_port`; `bind_if`;
//!   `connect_timeout` = `effective.connect_timeout`; `fwmark`.
//! - `TCP_CHECK` → [`ProbeSpec::Tcp`]; `PING_CHECK` → [`ProbeSpec::Ping`];
//!   `SMTP_CHECK` → [`ProbeSpec::Smtp`] (`helo_name` or
//!   [`smtp::DEFAULT_HELO`]).
//! - `HTTP_GET`/`SSL_GET` → [`ProbeSpec::Http`]: per `url`, `path`,
//!   `status_codes` (empty → 200-299), `digest`, `virtualhost`; the
//!   checker's `virtualhost`, else the real server's effective one;
//!   [`HttpVersion::from_keyword`] of `http_protocol` (default 1.0). For
//!   SSL_GET, [`TlsSpec::sni`] = `sni_name` or the virtualhost when
//!   `enable_sni` is set, else `None`.
//! - `MISC_CHECK` → [`ProbeSpec::Misc`]: `misc_path`, `misc_timeout` or the
//!   `delay_loop`, `misc_dynamic`, `user` through [`misc::resolve_user`].
//! - `DNS_CHECK` → [`ProbeSpec::Dns`]: [`DnsType::from_keyword`] of `type`,
//!   `name`, `require_answer: false` for keepalived's exact rule.
//! - `UDP_CHECK` → [`ProbeSpec::Udp`]: `payload` (none → empty),
//!   `require_reply` (`Some(None)` → [`UdpReply::Any`], `Some(Some(p))` →
//!   [`UdpReply::Matching`]), `min_reply_length`, `max_reply_length`.
//! - `FILE_CHECK` and `BFD_CHECK` are not probes (a watched file, a BFD
//!   session) and have none here.
#![forbid(unsafe_code)]

pub mod dns;
pub mod http;
pub mod misc;
pub mod ping;
pub mod sched;
pub mod smtp;
mod sock;
pub mod tcp;
pub mod tls;
pub mod udp;

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use dns::DnsType;
pub use sched::{Schedule, phase};

/// What to check; built by the policy from a configuration `Checker` and its
/// real server. Where (address, bind, timeout, mark) is in [`ProbeTarget`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeSpec {
    /// `TCP_CHECK`: the connect succeeds = up; the socket is closed at once.
    Tcp,
    /// `HTTP_GET` (`tls: None`) or `SSL_GET` (`tls: Some`): every URL must
    /// pass (status code in range, and the body's MD5 when a digest is set).
    Http {
        /// TLS settings for `SSL_GET`; `None` for plain `HTTP_GET`.
        tls: Option<TlsSpec>,
        /// The `url { }` blocks, checked in order; an empty list passes
        /// without connecting (as keepalived does).
        urls: Vec<UrlSpec>,
        /// `Host:` header when the URL has no `virtualhost` of its own
        /// (checker → real server → virtual server `virtualhost`, resolved by
        /// the caller); `None` sends `ADDRESS:PORT` of the target.
        virtualhost: Option<String>,
        /// `http_protocol`.
        http_protocol: HttpVersion,
    },
    /// `MISC_CHECK`: run a program, judge its exit status.
    Misc {
        /// `misc_path`: the command line, split into arguments the way
        /// keepalived does (whitespace, quotes, backslash), no shell.
        path: String,
        /// `misc_timeout` (keepalived's default is the `delay_loop`).
        timeout: Duration,
        /// `misc_dynamic`: exit 0 = up, 1 = down, 2..=255 = up with weight
        /// `code - 2` ([`ProbeResult::misc_weight`]).
        dynamic: bool,
        /// `user`: uid and gid to run as (resolved by the caller); `None`
        /// runs as the daemon's user.
        user: Option<(u32, u32)>,
    },
    /// `DNS_CHECK`: one UDP query (recursion desired, class IN).
    Dns {
        /// `type` (keepalived default SOA).
        qtype: DnsType,
        /// `name` (keepalived default ".").
        name: String,
        /// Also require at least one answer record of `qtype`. keepalived
        /// only requires RCODE NOERROR (`false` matches it exactly); `true`
        /// additionally catches "NOERROR, no data".
        require_answer: bool,
    },
    /// `UDP_CHECK`: send the payload on a connected UDP socket and wait up to
    /// `connect_timeout`. An ICMP port unreachable fails it; silence passes
    /// unless a reply is required (keepalived's rules).
    Udp {
        /// `payload` (empty = an empty datagram).
        payload: Vec<u8>,
        /// `require_reply`.
        require_reply: Option<UdpReply>,
        /// `min_reply_length` (keepalived default 0); only applied with a
        /// reply pattern, as keepalived does.
        min_reply: u32,
        /// `max_reply_length` (keepalived default 255); only applied with a
        /// reply pattern.
        max_reply: u32,
    },
    /// `SMTP_CHECK`: greeting 220, `HELO` answered 250, then `QUIT`
    /// (see [`smtp`]).
    Smtp {
        /// `helo_name` (keepalived's default: [`smtp::DEFAULT_HELO`]).
        helo_name: String,
    },
    /// `PING_CHECK`: one ICMP echo over an unprivileged ICMP datagram
    /// socket (needs the process's group in `net.ipv4.ping_group_range`,
    /// as keepalived's PING_CHECK does); see [`ping`].
    Ping,
}

/// `SSL_GET` settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSpec {
    /// Server name sent as SNI (keepalived: `sni_name`, else the
    /// `virtualhost`, when `enable_sni` is set). `None` sends no SNI.
    pub sni: Option<String>,
    /// rvs extension: verify the server certificate against the CA
    /// certificates (PEM) in this file, and its name against `sni` (or the
    /// target address). `None` = no verification, which is what keepalived
    /// does (it never verifies SSL_GET peers).
    pub verify_ca: Option<PathBuf>,
}

/// One `url { }` block of `HTTP_GET`/`SSL_GET`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlSpec {
    /// `path` (request target, e.g. `/health`).
    pub path: String,
    /// `status_code` ranges; the caller puts keepalived's default 200-299
    /// here when the configuration gives none.
    pub status: Vec<RangeInclusive<u16>>,
    /// `digest`: MD5 of the body as hex (either case).
    pub digest: Option<String>,
    /// `virtualhost` of this URL (wins over the checker's).
    pub virtualhost: Option<String>,
}

/// `http_protocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpVersion {
    /// `1.0`: `HTTP/1.0` request, no `Connection` header (keepalived default).
    #[default]
    Http10,
    /// `1.0C`: `HTTP/1.0` with `Connection: close`.
    Http10Close,
    /// `1.1`: `HTTP/1.1` with `Connection: close`.
    Http11,
}

impl HttpVersion {
    /// Parses keepalived's `http_protocol` values `1.0`, `1.0C`, `1.1`.
    pub fn from_keyword(s: &str) -> Option<Self> {
        match s {
            "1.0" => Some(Self::Http10),
            "1.0C" | "1.0c" => Some(Self::Http10Close),
            "1.1" => Some(Self::Http11),
            _ => None,
        }
    }
}

/// `require_reply` of `UDP_CHECK`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UdpReply {
    /// `require_reply` without data: any reply passes (no length check).
    Any,
    /// `require_reply HEX`: the reply's first `min(len, pattern len)` bytes
    /// must match, `None` bytes are "don't care" (the config's `x`
    /// nibbles), and its length must be within min/max_reply.
    Matching(Vec<Option<u8>>),
}

/// Where to check: the socket-level options common to all checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// `connect_ip`:`connect_port`, defaulting to the real server's.
    pub addr: SocketAddr,
    /// `bindto` and `bind_port` (port 0 = any; with only `bind_port`, the
    /// unspecified address of the target's family).
    pub bind: Option<SocketAddr>,
    /// `bind_if` (SO_BINDTODEVICE; needs CAP_NET_RAW).
    pub bind_if: Option<String>,
    /// `connect_timeout`; see the module docs for what it bounds per type.
    pub connect_timeout: Duration,
    /// `fwmark` put on the probe's packets (SO_MARK; needs CAP_NET_ADMIN).
    pub fwmark: Option<u32>,
}

impl ProbeTarget {
    /// A target with no bind, device or mark.
    pub fn new(addr: SocketAddr, connect_timeout: Duration) -> Self {
        Self {
            addr,
            bind: None,
            bind_if: None,
            connect_timeout,
            fwmark: None,
        }
    }
}

/// The outcome of one probe run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// Passed, or why not.
    pub outcome: Result<(), Failure>,
    /// Wall time from the start of the probe to its result.
    pub latency: Duration,
    /// `misc_dynamic`: the weight the exit status asks for (`code - 2`);
    /// `None` for every other probe and for exit 0.
    pub misc_weight: Option<u32>,
}

impl ProbeResult {
    /// Whether the probe passed.
    pub fn is_up(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// Why a check failed: printed in logs, `rvsadm` and (via [`Failure::kind`])
/// metric labels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// No answer within the timeout (connect, read, whole exchange or script).
    #[error("timeout")]
    Timeout,
    /// TCP RST to the SYN, or ICMP port unreachable for UDP.
    #[error("connection refused")]
    Refused,
    /// Any other socket error (unreachable network, bind failed...).
    #[error("{0}")]
    Io(String),
    /// HTTP status outside the accepted ranges.
    #[error("status {0}")]
    Status(u16),
    /// HTTP body MD5 differs from `digest`.
    #[error("digest mismatch")]
    DigestMismatch,
    /// The peer answered something that is not a valid response.
    #[error("bad response: {0}")]
    BadResponse(String),
    /// TLS handshake failed.
    #[error("tls: {0}")]
    Tls(String),
    /// MISC_CHECK exited with a failing status.
    #[error("exit status {0}")]
    Exit(i32),
    /// MISC_CHECK died of a signal it was not sent by the timeout.
    #[error("killed by signal {0}")]
    Signal(i32),
    /// MISC_CHECK program could not be started.
    #[error("cannot run: {0}")]
    Spawn(String),
    /// DNS answered with an RCODE other than NOERROR.
    #[error("dns {0}")]
    Rcode(String),
    /// DNS answered NOERROR without a record of the asked type.
    #[error("no answer")]
    NoAnswer,
    /// SMTP dialogue got an unexpected status (`greeting 554`, `HELO 501`).
    #[error("smtp {0}")]
    Smtp(String),
    /// UDP reply does not match `require_reply` or its length limits.
    #[error("reply mismatch")]
    ReplyMismatch,
    /// UDP: a reply was required and none came within the timeout.
    #[error("no reply")]
    NoReply,
    /// The probe cannot run on this host (e.g. ICMP datagram sockets not
    /// permitted for PING_CHECK).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl Failure {
    /// A short, fixed label for metrics (bounded cardinality): `timeout`,
    /// `refused`, `io`, `status`, `digest`, `bad_response`, `tls`, `exit`,
    /// `signal`, `spawn`, `rcode`, `no_answer`, `smtp`, `reply_mismatch`,
    /// `no_reply`, `unsupported`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Refused => "refused",
            Failure::Io(_) => "io",
            Failure::Status(_) => "status",
            Failure::DigestMismatch => "digest",
            Failure::BadResponse(_) => "bad_response",
            Failure::Tls(_) => "tls",
            Failure::Exit(_) => "exit",
            Failure::Signal(_) => "signal",
            Failure::Spawn(_) => "spawn",
            Failure::Rcode(_) => "rcode",
            Failure::NoAnswer => "no_answer",
            Failure::Smtp(_) => "smtp",
            Failure::ReplyMismatch => "reply_mismatch",
            Failure::NoReply => "no_reply",
            Failure::Unsupported(_) => "unsupported",
        }
    }

    /// Maps a socket error: refused and timed out get their own variants.
    pub(crate) fn from_io(e: &std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Failure::Refused,
            std::io::ErrorKind::TimedOut => Failure::Timeout,
            _ => Failure::Io(e.to_string()),
        }
    }
}

/// Runs one probe against `target` and reports the outcome and how long it
/// took. Never panics on peer input; every wait is bounded (see the module
/// docs for which timeout bounds what). HTTP/SSL bounds each I/O step, not
/// the total, as keepalived does: a runner that wants a hard cap wraps this
/// future in its own timeout. Dropping the future at any point is safe:
/// sockets close, and a MISC program's whole process group is killed.
pub async fn run(spec: &ProbeSpec, target: &ProbeTarget) -> ProbeResult {
    let start = Instant::now();
    let mut misc_weight = None;
    let outcome = match spec {
        ProbeSpec::Tcp => tcp::check(target).await,
        ProbeSpec::Http {
            tls,
            urls,
            virtualhost,
            http_protocol,
        } => {
            http::check(
                target,
                tls.as_ref(),
                urls,
                virtualhost.as_deref(),
                *http_protocol,
            )
            .await
        }
        ProbeSpec::Misc {
            path,
            timeout,
            dynamic,
            user,
        } => match misc::check(path, *timeout, *dynamic, *user).await {
            Ok(w) => {
                misc_weight = w;
                Ok(())
            }
            Err(f) => Err(f),
        },
        ProbeSpec::Dns {
            qtype,
            name,
            require_answer,
        } => dns::check(target, *qtype, name, *require_answer).await,
        ProbeSpec::Udp {
            payload,
            require_reply,
            min_reply,
            max_reply,
        } => {
            udp::check(
                target,
                payload,
                require_reply.as_ref(),
                *min_reply,
                *max_reply,
            )
            .await
        }
        ProbeSpec::Smtp { helo_name } => smtp::check(target, helo_name).await,
        ProbeSpec::Ping => ping::check(target).await,
    };
    ProbeResult {
        outcome,
        latency: start.elapsed(),
        misc_weight,
    }
}
