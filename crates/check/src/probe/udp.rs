//! `UDP_CHECK`: send a datagram, judge the reply (or its absence).
//!
//! keepalived's rules: the payload goes out on a connected UDP socket and
//! the checker waits up to `connect_timeout`. An ICMP error (port
//! unreachable surfaces as `ECONNREFUSED` on a connected socket) = down.
//! No reply by the timeout = up, unless `require_reply` is set (then
//! [`Failure::NoReply`]). A reply passes, except that with a reply pattern
//! its length must be within `min_reply..=max_reply` and its first
//! `min(len, pattern len)` bytes must match the pattern.

use tokio::time::Instant;

use super::{Failure, ProbeTarget, UdpReply, sock};

/// Whether `reply` satisfies `pattern` and the length limits (only called
/// for [`UdpReply::Matching`], as keepalived only checks then).
pub fn reply_matches(reply: &[u8], pattern: &[Option<u8>], min: u32, max: u32) -> bool {
    let len = u32::try_from(reply.len()).unwrap_or(u32::MAX);
    if len < min || len > max {
        return false;
    }
    reply
        .iter()
        .zip(pattern)
        .all(|(got, want)| want.is_none_or(|w| w == *got))
}

/// Runs one UDP check.
pub async fn check(
    target: &ProbeTarget,
    payload: &[u8],
    require_reply: Option<&UdpReply>,
    min_reply: u32,
    max_reply: u32,
) -> Result<(), Failure> {
    let deadline = Instant::now() + target.connect_timeout;
    let sock = match tokio::time::timeout_at(deadline, sock::udp_connect(target)).await {
        Ok(s) => s?,
        Err(_) => return Err(Failure::Timeout),
    };
    sock.send(payload).await.map_err(|e| Failure::from_io(&e))?;
    // One byte more than the longest acceptable reply shows "too long".
    let cap = usize::try_from(max_reply).unwrap_or(usize::MAX).min(65_535) + 1;
    let mut buf = vec![0u8; cap];
    match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
        Err(_) => match require_reply {
            None => Ok(()),
            Some(_) => Err(Failure::NoReply),
        },
        Ok(Err(e)) => Err(Failure::from_io(&e)),
        Ok(Ok(n)) => match require_reply {
            Some(UdpReply::Matching(p)) if !reply_matches(&buf[..n], p, min_reply, max_reply) => {
                Err(Failure::ReplyMismatch)
            }
            _ => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::reply_matches;

    #[test]
    fn pattern_rules() {
        let p = [Some(0xde), None, Some(0xef)];
        assert!(reply_matches(&[0xde, 0x00, 0xef, 0x99], &p, 0, 255));
        assert!(!reply_matches(&[0xde, 0x00, 0xee], &p, 0, 255));
        // Shorter than the pattern: only the received bytes are compared.
        assert!(reply_matches(&[0xde], &p, 0, 255));
        assert!(!reply_matches(&[0xde], &p, 2, 255));
        assert!(!reply_matches(&[0xde, 1, 0xef, 4], &p, 0, 3));
    }
}
