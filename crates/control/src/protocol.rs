//! The control protocol between `rvsadm` (and any other client) and `rvsd`.
//!
//! One JSON object per line over a Unix stream socket: the client writes a
//! [`Request`], the daemon answers with one [`Response`] line. Plain JSON
//! keeps the socket scriptable (`socat - UNIX-CONNECT:/run/rvs/rvsd.sock`).

use std::io::{BufRead, Write};
use std::net::IpAddr;

use rvs_core::model::{DestConfig, ServiceConfig, ServiceKey};
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
    /// Stop rvsd and remove its data plane for good (`rvsadm
    /// --remove-director`): the XDP program is detached and its pinned
    /// maps and links removed, then rvsd exits (a plain stop leaves the
    /// program forwarding).
    RemoveDirector,
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
