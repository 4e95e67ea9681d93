//! `--bgp-daemon bird[:CTL_SOCKET]|frr[:VTYSH]`: a diagnostic watch of the
//! BGP daemon that exports the announce table. Never fatal: whatever it
//! finds (daemon missing, unreachable, misconfigured) is one log line
//! naming what rvsd tried, shown in `rvsadm -L --announce` and the API,
//! and retried with backoff; forwarding and the announcement go on.
//!
//! * BIRD: its control socket (default `/run/bird/bird.ctl`), text
//!   protocol: `show protocols` (BGP sessions established?) and `show
//!   route where krt_source = PROTO count` (has a `protocol kernel` learned
//!   rvs's routes of the table?).
//! * FRR: `vtysh -c 'show bgp summary json'` (default `vtysh`), run
//!   asynchronously with a timeout.

use std::time::Duration;

use rvs_control::bgp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::handle::{DaemonHandle, Msg};

/// The default BIRD control socket (Debian's bird2 package).
pub const BIRD_SOCKET: &str = "/run/bird/bird.ctl";
/// The most of one reply read.
const MAX_REPLY: usize = 1 << 20;
/// How long one look at the daemon may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Between looks when all is well.
const HEALTHY: Duration = Duration::from_secs(10);
/// The longest backoff after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Which daemon, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// BIRD 2 at this control socket.
    Bird(String),
    /// FRR through this vtysh.
    Frr(String),
}

impl Spec {
    /// Parse `bird[:PATH]` / `frr[:VTYSH]`.
    pub fn parse(s: &str) -> Result<Spec, String> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let arg = arg.filter(|a| !a.is_empty());
        match kind {
            "bird" => Ok(Spec::Bird(arg.unwrap_or(BIRD_SOCKET).to_owned())),
            "frr" => Ok(Spec::Frr(arg.unwrap_or("vtysh").to_owned())),
            _ => Err(format!(
                "--bgp-daemon {s}: expected bird[:CTL_SOCKET] or frr[:VTYSH]"
            )),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Spec::Bird(_) => "bird",
            Spec::Frr(_) => "frr",
        }
    }

    fn target(&self) -> &str {
        match self {
            Spec::Bird(p) | Spec::Frr(p) => p,
        }
    }
}

/// What one look found: a one-line summary, or what went wrong.
type Look = Result<String, String>;

async fn bird_command(
    stream: &mut tokio::net::UnixStream,
    cmd: Option<&str>,
) -> Result<Vec<bgp::BirdLine>, String> {
    if let Some(c) = cmd {
        stream
            .write_all(format!("{c}\n").as_bytes())
            .await
            .map_err(|e| format!("sending `{c}`: {e}"))?;
    }
    let what = cmd.unwrap_or("the greeting");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the reply to {what}: {e}"))?;
        if n == 0 {
            return Err(format!("BIRD closed the socket before its reply to {what}"));
        }
        buf.extend_from_slice(&chunk[..n]);
        match bgp::bird_reply(&String::from_utf8_lossy(&buf)) {
            Ok(lines) => return Ok(lines),
            Err(bgp::BgpParseError::Incomplete) if buf.len() < MAX_REPLY => {}
            Err(e) => return Err(format!("the reply to {what}: {e}")),
        }
    }
}

async fn look_bird(path: &str, table: u32, proto: u8, announced: usize) -> Look {
    let mut s = tokio::net::UnixStream::connect(path)
        .await
        .map_err(|e| format!("connecting to BIRD's control socket {path}: {e}"))?;
    bird_command(&mut s, None).await?;
    let protos = bgp::bird_protocols(&bird_command(&mut s, Some("show protocols")).await?)
        .map_err(|e| format!("show protocols: {e}"))?;
    let cmd = format!("show route where krt_source = {proto} count");
    let learned = bgp::bird_count(&bird_command(&mut s, Some(&cmd)).await?)
        .map_err(|e| format!("{cmd}: {e}"))?;
    let bgp: Vec<&bgp::BirdProtocol> = protos.iter().filter(|p| p.proto == "BGP").collect();
    let up = bgp.iter().filter(|p| p.established()).count();
    if announced > 0 && learned == 0 {
        return Err(format!(
            "BIRD at {path} has none of the {announced} announced route(s) of table {table} proto {proto} \
             (`{cmd}` is 0): no `protocol kernel {{ kernel table {table}; learn; ipv4 {{ import all; }}; }}` learns them"
        ));
    }
    if bgp.is_empty() {
        return Err(format!("BIRD at {path} has no BGP protocol"));
    }
    if up == 0 {
        let states: Vec<String> = bgp
            .iter()
            .map(|p| format!("{} {} {}", p.name, p.state, p.info))
            .collect();
        return Err(format!(
            "BIRD at {path}: no BGP session established ({})",
            states.join("; ")
        ));
    }
    Ok(format!(
        "ok: {up}/{} BGP sessions established, {learned} route(s) of table {table} learned",
        bgp.len()
    ))
}

async fn look_frr(vtysh: &str) -> Look {
    let run = tokio::process::Command::new(vtysh)
        .args(["-c", "show bgp summary json"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(TIMEOUT, run)
        .await
        .map_err(|_| {
            format!("`{vtysh} -c 'show bgp summary json'` did not answer within {TIMEOUT:?}")
        })?
        .map_err(|e| format!("running `{vtysh} -c 'show bgp summary json'`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{vtysh} -c 'show bgp summary json'` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let peers = bgp::frr_summary(&String::from_utf8_lossy(&out.stdout))
        .map_err(|e| format!("`{vtysh} -c 'show bgp summary json'`: {e}"))?;
    let up = peers.iter().filter(|p| p.state == "Established").count();
    if peers.is_empty() {
        return Err("FRR has no BGP peer (show bgp summary json)".into());
    }
    if up == 0 {
        return Err(format!(
            "FRR: no BGP session established ({})",
            peers
                .iter()
                .map(|p| format!("{} {}", p.peer, p.state))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok(format!("ok: {up}/{} BGP sessions established", peers.len()))
}

/// Watch the daemon until rvsd exits.
/// `table` and `proto`: the announcement's ([`crate::announce::Settings`]).
pub async fn run(daemon: DaemonHandle, spec: Spec, table: u32, proto: u8) {
    let mut backoff = Duration::from_secs(1);
    let mut last: Option<Look> = None;
    loop {
        let announced = daemon.fresh().await.announced;
        let look = match &spec {
            Spec::Bird(path) => {
                match tokio::time::timeout(TIMEOUT, look_bird(path, table, proto, announced)).await
                {
                    Ok(l) => l,
                    Err(_) => Err(format!(
                        "BIRD's control socket {path} did not answer within {TIMEOUT:?}"
                    )),
                }
            }
            Spec::Frr(vtysh) => look_frr(vtysh).await,
        };
        let wait = match &look {
            Ok(_) => {
                backoff = Duration::from_secs(1);
                HEALTHY
            }
            Err(_) => {
                let w = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                w
            }
        };
        if last.as_ref() != Some(&look) {
            match &look {
                Ok(s) => tracing::info!(
                    daemon = spec.kind(),
                    target = spec.target(),
                    "BGP daemon {s}"
                ),
                Err(e) => tracing::warn!(
                    "BGP daemon watch ({} {}): {e}; retrying with backoff (forwarding and the announcement go on)",
                    spec.kind(),
                    spec.target()
                ),
            }
        }
        let view = serde_json::json!({
            "kind": spec.kind(),
            "target": spec.target(),
            "ok": look.is_ok(),
            "summary": match &look { Ok(s) => s.clone(), Err(e) => format!("error: {e}") },
        });
        if !daemon.send(Msg::SetBgp(view)).await {
            return;
        }
        last = Some(look);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(Spec::parse("bird").unwrap(), Spec::Bird(BIRD_SOCKET.into()));
        assert_eq!(
            Spec::parse("bird:/tmp/b.ctl").unwrap(),
            Spec::Bird("/tmp/b.ctl".into())
        );
        assert_eq!(Spec::parse("frr").unwrap(), Spec::Frr("vtysh".into()));
        assert_eq!(
            Spec::parse("frr:/usr/bin/vtysh").unwrap(),
            Spec::Frr("/usr/bin/vtysh".into())
        );
        assert!(
            Spec::parse("gobgp")
                .unwrap_err()
                .contains("bird[:CTL_SOCKET]")
        );
    }

    /// A missing socket is an error naming it, never a panic.
    #[test]
    fn an_unreachable_bird_is_reported() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt
            .block_on(look_bird("/nonexistent/rvs-test/bird.ctl", 100, 250, 1))
            .unwrap_err();
        assert!(e.contains("/nonexistent/rvs-test/bird.ctl"), "{e}");
        let e = rt
            .block_on(look_frr("/nonexistent/rvs-test/vtysh"))
            .unwrap_err();
        assert!(e.contains("/nonexistent/rvs-test/vtysh"), "{e}");
    }

    /// A fake BIRD on a socket pair: a reply that names no learned route
    /// while rvsd announces one is reported as the misconfiguration.
    #[test]
    fn a_bird_without_the_kernel_protocol_is_misconfigured() {
        let dir = std::env::temp_dir().join(format!("rvs-bgpwatch-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("bird.ctl");
        let _ = std::fs::remove_file(&path);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let p = path.to_string_lossy().into_owned();
        let e = rt.block_on(async {
            let l = tokio::net::UnixListener::bind(&path).unwrap();
            let server = tokio::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                s.write_all(b"0001 BIRD 2.0.12 ready.\n").await.unwrap();
                let mut buf = [0u8; 256];
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(
                    b"2002-Name       Proto      Table      State  Since         Info\n\
1002-up1        BGP        ---        up     03:07:33.798  Established\n0000 \n",
                )
                .await
                .unwrap();
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(b"1007-0 of 0 routes for 0 networks in table master4\n0000 \n")
                    .await
                    .unwrap();
            });
            let r = look_bird(&p, 100, 250, 1).await;
            let _ = server.await;
            r
        });
        let _ = std::fs::remove_dir_all(&dir);
        let e = e.unwrap_err();
        assert!(e.contains("kernel table 100"), "{e}");
    }
}
