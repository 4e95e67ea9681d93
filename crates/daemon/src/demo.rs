//! `rvsd demo`: the whole load balancer on loopback, unprivileged, with
//! nothing else installed. Three tiny HTTP backends run inside the process,
//! a virtual service on 127.0.0.1 balances them through the proxy data
//! plane, and the daemon's control socket is open for `rvsadm`. The demo
//! sends a few requests itself to show the spread, prints what to try, and
//! serves until Ctrl-C (or exits at once with `--once`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use rvs_control::protocol::{Command, Request, Response};
use rvs_core::model::{AddrFamily, DestConfig, ForwardMethod, Protocol, ServiceConfig, ServiceKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::handle::DaemonHandle;

/// A backend that answers every HTTP request with its own name.
async fn backend(name: String) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let name = name.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let mut seen = Vec::new();
                // Read the request head (bounded), then answer and close.
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.len() < 16384 {
                    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let body = format!("hello from {name}\n");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Ok(addr)
}

/// One HTTP GET through the balancer: the backend's name.
async fn get(vip: SocketAddr) -> anyhow::Result<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(vip)).await??;
    s.write_all(b"GET / HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await??;
    let text = String::from_utf8_lossy(&out);
    Ok(text
        .rsplit("hello from ")
        .next()
        .unwrap_or("?")
        .trim()
        .to_owned())
}

/// Configure the demo service, show the spread, print what to try.
pub async fn run(
    daemon: DaemonHandle,
    vip: SocketAddr,
    socket: &std::path::Path,
    once: bool,
) -> anyhow::Result<()> {
    let mut backends = Vec::new();
    for i in 1..=3 {
        backends.push(backend(format!("backend-{i}")).await?);
    }
    let key = ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: vip.ip(),
        port: vip.port(),
    };
    let mut commands = vec![Command::AddService {
        key,
        config: ServiceConfig::new(AddrFamily::Inet).scheduler(rvs_core::sched::Scheduler::Rr),
    }];
    for b in &backends {
        commands.push(Command::AddDest {
            service: key,
            dest: DestConfig::new(b.ip(), b.port()).forward(ForwardMethod::Masq),
        });
    }
    let resp = crate::handle::answer(
        &daemon,
        Request::Exec {
            commands,
            atomic: true,
        },
    )
    .await;
    if let Response::Error { message, .. } = resp {
        anyhow::bail!("configuring the demo service: {message}");
    }
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..12 {
        *seen.entry(get(vip).await?).or_default() += 1;
    }
    println!("rvs demo: virtual service {vip} (rr) -> 3 backends on 127.0.0.1, proxy data plane\n");
    println!("12 requests through the balancer:");
    for (name, n) in &seen {
        println!("  {name}: {n}");
    }
    let snap = match crate::handle::answer(&daemon, Request::State { conns: false }).await {
        Response::State(v) => serde_json::from_value::<rvs_ipvsadm::snapshot::Snapshot>(v)?,
        other => anyhow::bail!("listing the demo service: {other:?}"),
    };
    let opts = rvs_ipvsadm::ListOptions {
        numeric: true,
        stats: true,
        ..Default::default()
    };
    let table = rvs_ipvsadm::format_list(&snap, &opts).map_err(|e| anyhow::anyhow!(e.message))?;
    println!("\nrvsadm -Ln --stats:\n{table}");
    if once {
        return Ok(());
    }
    let rvsadm = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("rvsadm")))
        .filter(|p| p.exists())
        .map_or_else(|| "rvsadm".to_owned(), |p| p.display().to_string());
    println!("Try it (Ctrl-C stops the demo):");
    println!("  curl http://{vip}/");
    println!("  RVS_SOCKET={} {rvsadm} -Ln", socket.display());
    println!("  RVS_SOCKET={} {rvsadm} -Lcn", socket.display());
    println!(
        "  RVS_SOCKET={} {rvsadm} -e -t {vip} -r {} -m -w 0   # drain backend",
        socket.display(),
        backends[0]
    );
    Ok(())
}
