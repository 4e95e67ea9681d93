//! The control protocol between `rvsadm` (and any other client) and `rvsd`.
//!
//! One JSON object per line over a Unix stream socket: the client writes a
//! [`Request`], the daemon answers with one [`Response`] line. Plain JSON
//! keeps the socket scriptable (`socat - UNIX-CONNECT:/run/rvs/rvsd.sock`).

use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};

use rvs_core::model::{DestConfig, LocalAddrRange, ServiceConfig, ServiceKey};
use serde::{Deserialize, Serialize};

/// Default control socket path.
pub const DEFAULT_SOCKET: &str = "/run/rvs/rvsd.sock";

/// Environment variable overriding the socket path for both binaries.
pub const SOCKET_ENV: &str = "RVS_SOCKET";

/// One change to the service table, as `ipvsadm` expresses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// `-A`.
    AddService {
        /// Service.
        key: ServiceKey,
        /// Options.
        config: ServiceConfig,
    },
    /// `-E`.
    EditService {
        /// Service.
        key: ServiceKey,
        /// New options.
        config: ServiceConfig,
    },
    /// `-D`.
    DelService {
        /// Service.
        key: ServiceKey,
    },
    /// `-C`.
    Clear,
    /// `-a`.
    AddDest {
        /// Service.
        service: ServiceKey,
        /// Real server.
        dest: DestConfig,
    },
    /// `-e`.
    EditDest {
        /// Service.
        service: ServiceKey,
        /// Real server with its new settings.
        dest: DestConfig,
    },
    /// `-d`.
    DelDest {
        /// Service.
        service: ServiceKey,
        /// Real server address.
        addr: IpAddr,
        /// Real server port.
        port: u16,
    },
    /// `-Z [service]`.
    Zero {
        /// One service, or all.
        service: Option<ServiceKey>,
    },
    /// `--add-laddr -z ADDR` (rvs-only, DPVS's option): add an address or
    /// range to the service's FULLNAT local address pool.
    AddLaddr {
        /// Service.
        service: ServiceKey,
        /// Address or range.
        laddr: LocalAddrRange,
    },
    /// `--del-laddr -z ADDR`: remove a pool entry, named as it was added.
    DelLaddr {
        /// Service.
        service: ServiceKey,
        /// Address or range.
        laddr: LocalAddrRange,
    },
    /// `--set tcp tcpfin udp` (0 leaves a value unchanged).
    SetTimeouts {
        /// ESTABLISHED timeout, seconds.
        tcp: u32,
        /// FIN_WAIT timeout, seconds.
        tcpfin: u32,
        /// UDP timeout, seconds.
        udp: u32,
    },
}

impl Command {
    /// The service this command is about: `None` for a table-wide one
    /// (clear, timeouts, zeroing every counter).
    pub fn service_key(&self) -> Option<&ServiceKey> {
        match self {
            Command::AddService { key, .. }
            | Command::EditService { key, .. }
            | Command::DelService { key } => Some(key),
            Command::AddDest { service, .. }
            | Command::EditDest { service, .. }
            | Command::DelDest { service, .. }
            | Command::AddLaddr { service, .. }
            | Command::DelLaddr { service, .. } => Some(service),
            Command::Zero { service } => service.as_ref(),
            Command::Clear | Command::SetTimeouts { .. } => None,
        }
    }
}

/// A request to the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Apply commands in order. With `atomic`, either all apply or none does
    /// (`rvsadm -R`); otherwise they apply one by one and the first failure
    /// stops the rest, like successive ipvsadm invocations.
    Exec {
        /// The commands.
        commands: Vec<Command>,
        /// All or nothing.
        atomic: bool,
    },
    /// Apply each command on its own, in order, as `ipvsadm -R` applies its
    /// lines: one that fails does not stop the rest. The daemon answers
    /// [`Response::Each`], one answer per command, each what an [`Exec`]
    /// of that command alone would have answered; the whole batch is
    /// answered once, after the data plane carried it out (one wait, not
    /// one per line).
    ///
    /// [`Exec`]: Request::Exec
    ExecEach {
        /// The commands.
        commands: Vec<Command>,
    },
    /// The current state, as JSON (services, counters, rates, optionally
    /// connections): the daemon answers [`Response::State`].
    State {
        /// Include the connection table.
        conns: bool,
    },
    /// Re-read the configuration file and apply the difference.
    Reload,
    /// The health checkers' state (per virtual server, real server and
    /// checker: up/down, weight, last failure reason): the daemon answers
    /// [`Response::State`] with a JSON array (`rvsadm -L --checks`).
    Checks,
    /// Liveness check.
    Ping,
    /// Start a connection-sync daemon (`ipvsadm --start-daemon`).
    StartDaemon(rvs_core::sync::DaemonConfig),
    /// Stop the master (`true`) or backup connection-sync daemon.
    StopDaemon {
        /// Which one.
        master: bool,
    },
    /// `rvsd --takeover`, step 1: hand me your listening sockets. The
    /// daemon answers [`Response::HandOver`] with one descriptor per
    /// [`HandedSocket`] attached (`SCM_RIGHTS`) and keeps serving; nothing
    /// changes in it until [`Request::Retire`] on the same connection.
    HandOver,
    /// `rvsd --takeover`, step 2 (only on the connection that got the
    /// sockets, after the new daemon took the control socket's path): stop
    /// accepting and reading the shared sockets, finish the established
    /// connections (bounded by `--drain-grace`, default 60 s) and exit 0.
    /// Answered with [`Response::Ok`] before the daemon retires.
    Retire,
    /// Stop rvsd and remove its data plane for good (`rvsadm
    /// --remove-director`): the XDP program is detached and its pinned
    /// maps and links removed, then rvsd exits (a plain stop leaves the
    /// program forwarding).
    RemoveDirector,
    /// Withdraw every VIP from the BGP daemon (`rvsadm --drain [--grace
    /// S]`) and keep forwarding: `draining` for `grace_ms`, then
    /// `drained`. Kept across rvsd restarts until [`Request::Undrain`].
    Drain {
        /// Milliseconds the director stays `draining` before `drained`.
        grace_ms: u64,
    },
    /// Announce the VIPs again (`rvsadm --undrain`).
    Undrain,
    /// The announcement state (`rvsadm -L --announce`): the daemon answers
    /// [`Response::State`] with the `announce` object of `/api/v1/state`.
    Announce,
}

/// What kind of socket a handed-over descriptor is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SocketKind {
    /// A listening TCP socket.
    TcpListener,
    /// A bound UDP socket.
    Udp,
}

/// One descriptor of a handover, described; the descriptors travel in the
/// order of [`HandOver::sockets`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "kebab-case")]
pub enum HandedSocket {
    /// A virtual service's socket (the proxy data plane's): TCP services
    /// have a listener, UDP services a bound datagram socket.
    Service {
        /// The service (protocol, VIP, port).
        key: ServiceKey,
        /// What the descriptor is.
        socket: SocketKind,
    },
    /// The HTTP endpoint's listener (`rvsd --http ADDR`).
    Http {
        /// Its address.
        addr: SocketAddr,
    },
}

/// A running daemon's answer to [`Request::HandOver`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOver {
    /// The old daemon's process id (for logs, and to wait for its exit).
    pub pid: u32,
    /// The descriptors attached, in order.
    pub sockets: Vec<HandedSocket>,
    /// Its service table as commands (timeouts, services, real servers),
    /// for a new daemon started without a configuration file.
    pub table: Vec<Command>,
}

/// The daemon's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Done.
    Ok,
    /// A state dump (the daemon's JSON view).
    State(serde_json::Value),
    /// Reload result: what changed.
    Reloaded {
        /// Human-readable summary of the applied difference.
        summary: String,
    },
    /// The request failed; nothing changed. `message` is the text ipvsadm
    /// would print (e.g. "Service already exists").
    Error {
        /// Error text.
        message: String,
        /// Index of the failing command within an `Exec`, if any.
        index: Option<usize>,
        /// The director's error, when a command failed (clients map it to
        /// their own wording, e.g. ipvsadm's per-command texts).
        #[serde(default)]
        ctl: Option<rvs_core::ipvs::CtlError>,
    },
    /// The sockets and table of a daemon being taken over.
    HandOver(HandOver),
    /// The answers to a [`Request::ExecEach`], one per command in order.
    Each(Vec<Response>),
}

/// Errors of the line framing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Socket I/O failed.
    #[error("control socket: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not a protocol message.
    #[error("control socket: malformed message: {0}")]
    Json(#[from] serde_json::Error),
    /// The peer closed the connection before answering.
    #[error("control socket: connection closed by peer")]
    Closed,
    /// A line longer than [`MAX_LINE`] bytes.
    #[error("control socket: message too long")]
    TooLong,
}

/// Longest accepted message line (a 10,000-service state dump fits easily).
pub const MAX_LINE: usize = 256 << 20;

/// Write one message as a JSON line.
pub fn write_message<T: Serialize, W: Write>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let mut line = serde_json::to_vec(msg)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()?;
    Ok(())
}

/// Read one JSON-line message.
pub fn read_message<T: for<'de> Deserialize<'de>, R: BufRead>(r: &mut R) -> Result<T, FrameError> {
    let mut line = Vec::new();
    let mut limited = std::io::Read::take(&mut *r, MAX_LINE as u64 + 1);
    let n = limited.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(FrameError::Closed);
    }
    if line.len() > MAX_LINE {
        return Err(FrameError::TooLong);
    }
    Ok(serde_json::from_slice(&line)?)
}

/// Parse one request line (the daemon side); never panics on bad input.
pub fn parse_request(line: &[u8]) -> Result<Request, FrameError> {
    Ok(serde_json::from_slice(line)?)
}

/// Why a handover answer cannot be used. Nothing has changed in either
/// daemon when one is returned: the old one keeps running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandOverError {
    /// Not a JSON response line.
    #[error("malformed handover answer: {0}")]
    Json(#[from] serde_json::Error),
    /// The old daemon refused (an rvsd that does not know the request
    /// answers "bad request: unknown variant").
    #[error("the running rvsd refused the handover: {0}")]
    Refused(String),
    /// Another response than [`Response::HandOver`].
    #[error("unexpected answer to a handover request")]
    Unexpected,
    /// The description and the descriptors received do not match.
    #[error("the answer describes {described} sockets but {received} descriptors came with it")]
    Count {
        /// Sockets described.
        described: usize,
        /// Descriptors received.
        received: usize,
    },
    /// One described socket cannot be a service's or the HTTP endpoint's.
    #[error("handed socket {index}: {why}")]
    Socket {
        /// Its position in the list.
        index: usize,
        /// What is wrong.
        why: String,
    },
    /// The table holds a command that is not part of a table.
    #[error("handed table, command {index}: not a table entry ({what})")]
    Table {
        /// Its position.
        index: usize,
        /// The command's kind.
        what: &'static str,
    },
}

/// Parse and check the answer to [`Request::HandOver`], which came with
/// `received` descriptors: every descriptor described once, services with
/// a port and the socket kind of their protocol, at most one HTTP
/// listener, a table of additions only. Never panics on bad input.
pub fn parse_handover(line: &[u8], received: usize) -> Result<HandOver, HandOverError> {
    let h = match serde_json::from_slice::<Response>(line)? {
        Response::HandOver(h) => h,
        Response::Error { message, .. } => return Err(HandOverError::Refused(message)),
        _ => return Err(HandOverError::Unexpected),
    };
    if h.sockets.len() != received {
        return Err(HandOverError::Count {
            described: h.sockets.len(),
            received,
        });
    }
    let mut seen = std::collections::HashSet::new();
    let mut http = false;
    for (index, s) in h.sockets.iter().enumerate() {
        let bad = |why: String| HandOverError::Socket { index, why };
        match s {
            HandedSocket::Service { key, socket } => {
                let Some((protocol, vip)) = key.socket_addr() else {
                    return Err(bad("a firewall-mark service has no socket".into()));
                };
                let want = match protocol {
                    rvs_core::model::Protocol::Tcp => SocketKind::TcpListener,
                    rvs_core::model::Protocol::Udp => SocketKind::Udp,
                    other => return Err(bad(format!("{} services have no socket", other.name()))),
                };
                if vip.port() == 0 {
                    let addr = vip.ip();
                    return Err(bad(format!("{addr}:0: a port-zero service has no socket")));
                }
                if *socket != want {
                    let name = protocol.name();
                    return Err(bad(format!("{name} {vip}: described as {socket:?}")));
                }
                if !seen.insert(*key) {
                    let name = protocol.name();
                    return Err(bad(format!("{name} {vip} handed twice")));
                }
            }
            HandedSocket::Http { addr } => {
                if std::mem::replace(&mut http, true) {
                    return Err(bad(format!("a second HTTP listener ({addr})")));
                }
            }
        }
    }
    for (index, c) in h.table.iter().enumerate() {
        let what = match c {
            Command::AddService { .. }
            | Command::AddDest { .. }
            | Command::AddLaddr { .. }
            | Command::SetTimeouts { .. } => {
                continue;
            }
            Command::EditService { .. } => "EditService",
            Command::DelService { .. } => "DelService",
            Command::Clear => "Clear",
            Command::EditDest { .. } => "EditDest",
            Command::DelDest { .. } => "DelDest",
            Command::DelLaddr { .. } => "DelLaddr",
            Command::Zero { .. } => "Zero",
        };
        return Err(HandOverError::Table { index, what });
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::{AddrFamily, Protocol};
    use std::io::Cursor;

    #[test]
    fn round_trip() {
        let key = ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        };
        let req = Request::Exec {
            commands: vec![
                Command::AddService {
                    key,
                    config: ServiceConfig::new(AddrFamily::Inet)
                        .scheduler(rvs_core::sched::Scheduler::Rr),
                },
                Command::AddDest {
                    service: key,
                    dest: DestConfig::new("10.0.0.2".parse().unwrap(), 80),
                },
            ],
            atomic: true,
        };
        let mut buf = Vec::new();
        write_message(&mut buf, &req).unwrap();
        write_message(&mut buf, &Request::Ping).unwrap();
        let mut r = Cursor::new(buf);
        assert_eq!(read_message::<Request, _>(&mut r).unwrap(), req);
        assert_eq!(read_message::<Request, _>(&mut r).unwrap(), Request::Ping);
        assert!(matches!(
            read_message::<Request, _>(&mut r),
            Err(FrameError::Closed)
        ));
    }

    /// The sync daemon's request reads on the wire as it did when its config
    /// type lived in rvs-ipvsadm (an rvsadm and an rvsd of either build
    /// understand each other).
    #[test]
    fn start_daemon_wire_format() {
        let req = Request::StartDaemon(rvs_core::sync::DaemonConfig {
            state: rvs_core::sync::SyncState::Backup,
            mcast_ifn: "eth1".into(),
            syncid: 7,
            sync_maxlen: Some(1400),
            mcast_group: Some("224.0.0.81".parse().unwrap()),
            mcast_port: None,
            mcast_ttl: Some(2),
        });
        let json = r#"{"StartDaemon":{"state":"Backup","mcast_ifn":"eth1","syncid":7,"sync_maxlen":1400,"mcast_group":"224.0.0.81","mcast_port":null,"mcast_ttl":2}}"#;
        assert_eq!(serde_json::to_string(&req).unwrap(), json);
        assert_eq!(parse_request(json.as_bytes()).unwrap(), req);
    }

    #[test]
    fn scheduler_travels_as_its_ipvsadm_name() {
        for sched in rvs_core::sched::Scheduler::all() {
            let config = ServiceConfig::new(AddrFamily::Inet).scheduler(sched);
            let v = serde_json::to_value(&config).unwrap();
            assert_eq!(v["scheduler"], serde_json::json!(sched.name()));
            let back: ServiceConfig = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(back, config);
            // An unknown name is refused (the text names it).
            let mut bad = v;
            bad["scheduler"] = serde_json::json!("nosuch");
            let e = serde_json::from_value::<ServiceConfig>(bad).unwrap_err();
            assert!(e.to_string().contains("nosuch"), "{e}");
        }
    }

    fn handover(sockets: Vec<HandedSocket>) -> Vec<u8> {
        serde_json::to_vec(&Response::HandOver(HandOver {
            pid: 42,
            sockets,
            table: vec![Command::SetTimeouts {
                tcp: 900,
                tcpfin: 120,
                udp: 300,
            }],
        }))
        .unwrap()
    }

    fn svc(protocol: Protocol, port: u16) -> ServiceKey {
        ServiceKey::Addr {
            protocol,
            addr: "127.0.0.1".parse().unwrap(),
            port,
        }
    }

    #[test]
    fn handover_answers_are_checked() {
        let tcp = HandedSocket::Service {
            key: svc(Protocol::Tcp, 80),
            socket: SocketKind::TcpListener,
        };
        let udp = HandedSocket::Service {
            key: svc(Protocol::Udp, 53),
            socket: SocketKind::Udp,
        };
        let http = HandedSocket::Http {
            addr: "127.0.0.1:9180".parse().unwrap(),
        };
        let good = handover(vec![tcp.clone(), udp.clone(), http.clone()]);
        let h = parse_handover(&good, 3).unwrap();
        assert_eq!(h.pid, 42);
        assert_eq!(h.sockets, vec![tcp.clone(), udp, http.clone()]);
        // The wire format names the roles and kinds plainly.
        let text = String::from_utf8(good.clone()).unwrap();
        assert!(text.contains(r#""role":"service""#), "{text}");
        assert!(text.contains(r#""socket":"tcp-listener""#), "{text}");
        let e = parse_handover(&good, 2).unwrap_err().to_string();
        assert!(e.contains("describes 3 sockets but 2"), "{e}");
        let wrong_kind = HandedSocket::Service {
            key: svc(Protocol::Udp, 53),
            socket: SocketKind::TcpListener,
        };
        for (bad, want) in [
            (vec![tcp.clone(), tcp.clone()], "handed twice"),
            (vec![http.clone(), http], "second HTTP"),
            (vec![wrong_kind], "described as TcpListener"),
            (
                vec![HandedSocket::Service {
                    key: svc(Protocol::Tcp, 0),
                    socket: SocketKind::TcpListener,
                }],
                "port-zero",
            ),
            (
                vec![HandedSocket::Service {
                    key: ServiceKey::Fwmark {
                        mark: 1,
                        af: AddrFamily::Inet,
                    },
                    socket: SocketKind::Udp,
                }],
                "firewall-mark",
            ),
        ] {
            let n = bad.len();
            let e = parse_handover(&handover(bad), n).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let refused = serde_json::to_vec(&Response::Error {
            message: "bad request: unknown variant `HandOver`".into(),
            index: None,
            ctl: None,
        })
        .unwrap();
        let e = parse_handover(&refused, 0).unwrap_err().to_string();
        assert!(e.contains("refused the handover: bad request"), "{e}");
        assert!(matches!(
            parse_handover(b"\"Ok\"", 0),
            Err(HandOverError::Unexpected)
        ));
        assert!(parse_handover(b"{", 0).is_err());
        let mut h = parse_handover(&good, 3).unwrap();
        h.table.push(Command::Clear);
        let line = serde_json::to_vec(&Response::HandOver(h)).unwrap();
        let e = parse_handover(&line, 3).unwrap_err().to_string();
        assert!(e.contains("command 1: not a table entry (Clear)"), "{e}");
        // The requests are plain names on the wire.
        assert_eq!(
            serde_json::to_string(&Request::HandOver).unwrap(),
            r#""HandOver""#
        );
        assert_eq!(parse_request(br#""Retire""#).unwrap(), Request::Retire);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for junk in [
            &b"{"[..],
            b"null",
            b"\xff\xfe",
            b"{\"Exec\":{\"commands\":7}}",
            b"[]",
        ] {
            assert!(parse_request(junk).is_err());
        }
    }
}
