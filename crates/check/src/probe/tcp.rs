//! `TCP_CHECK`: connect, then close.

use super::{Failure, ProbeTarget, sock};

/// Passes when the TCP handshake completes within `connect_timeout`; the
/// connection is closed right away (an ordinary close, as keepalived does).
pub async fn check(target: &ProbeTarget) -> Result<(), Failure> {
    let stream = sock::tcp_connect(target).await?;
    drop(stream);
    Ok(())
}
