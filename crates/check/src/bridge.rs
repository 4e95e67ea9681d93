//! TEMPORARY bridge until the probe module (`probe::run`, built by another
//! helper) is merged: a TCP connect probe, so the policy, the runner and the
//! daemon integration can be tested end to end. Only `TCP_CHECK` is run
//! here; [`supports`] tells the plan builder which kinds to leave out.
//! At merge, [`run`] is replaced by a call to `probe::run` with a
//! `ProbeSpec` built from the job.

use std::time::Instant;

use rvs_config::model::CheckerKind;
use tokio::net::TcpSocket;

use crate::build::ProbeJob;
use crate::policy::Outcome;

/// Checker kinds this bridge runs.
pub(crate) fn supports(kind: &CheckerKind) -> bool {
    matches!(kind, CheckerKind::Tcp)
}

/// Connect (from `bind` if given) within `connect_timeout`, then close.
pub(crate) async fn run(job: &ProbeJob) -> Outcome {
    let start = Instant::now();
    let result = tokio::time::timeout(job.connect_timeout, connect(job))
        .await
        .unwrap_or_else(|_| Err("timeout".to_owned()));
    Outcome {
        result,
        weight: None,
        latency: start.elapsed(),
    }
}

async fn connect(job: &ProbeJob) -> Result<(), String> {
    let sock = if job.addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| format!("socket: {e}"))?;
    if let Some(b) = job.bind {
        sock.bind(b).map_err(|e| format!("bind {b}: {e}"))?;
    }
    match sock.connect(job.addr).await {
        Ok(_stream) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err("connection refused".to_owned())
        }
        Err(e) => Err(e.to_string()),
    }
}
