//! `SMTP_CHECK`: greeting, `HELO`, `QUIT`.
//!
//! keepalived's dialogue: the greeting must carry status 220, `HELO name`
//! must get 250, then `QUIT` is sent and one reply line read (its status is
//! not judged). Each read and write waits at most `connect_timeout`, as
//! keepalived re-arms its timer per step. Unlike keepalived, which judges
//! the first line it reads, multi-line replies (`220-...` continued by
//! `220 ...`) are read to their last line, so a multi-line greeting is not
//! mistaken for the answer to `HELO`.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::{Failure, ProbeTarget, sock};

/// keepalived's default `helo_name`.
pub const DEFAULT_HELO: &str = "smtpchecker.keepalived.org";

/// Longest reply line accepted.
const MAX_LINE: usize = 4096;
/// Most lines in one multi-line reply.
const MAX_LINES: usize = 64;

/// Reads one (possibly multi-line) reply, each line within `timeout`;
/// returns its status code. Also what rvsd's `smtp_alert` mailer reads
/// its server's replies with (fuzzed through [`dialogue`]).
pub async fn reply<S: AsyncRead + Unpin>(
    r: &mut BufReader<S>,
    timeout: std::time::Duration,
) -> Result<u16, Failure> {
    for _ in 0..MAX_LINES {
        let mut line = Vec::new();
        let read = async {
            let mut limited = (&mut *r).take(MAX_LINE as u64);
            limited.read_until(b'\n', &mut line).await
        };
        let n = match tokio::time::timeout(timeout, read).await {
            Err(_) => return Err(Failure::Timeout),
            Ok(Err(e)) => return Err(Failure::from_io(&e)),
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            return Err(Failure::BadResponse("connection closed".into()));
        }
        if line.last() != Some(&b'\n') {
            return Err(Failure::BadResponse("SMTP line too long".into()));
        }
        let code = match line.get(..3) {
            Some(d) if d.iter().all(u8::is_ascii_digit) => d
                .iter()
                .fold(0u16, |acc, &b| acc * 10 + u16::from(b - b'0')),
            _ => return Err(Failure::BadResponse("no SMTP status".into())),
        };
        if line.get(3) != Some(&b'-') {
            return Ok(code);
        }
    }
    Err(Failure::BadResponse("SMTP reply too long".into()))
}

async fn send<S: AsyncWrite + Unpin>(
    s: &mut S,
    line: &str,
    timeout: std::time::Duration,
) -> Result<(), Failure> {
    match tokio::time::timeout(timeout, s.write_all(line.as_bytes())).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::from_io(&e)),
        Ok(Ok(())) => Ok(()),
    }
}

/// Runs the SMTP dialogue over any stream (public for tests and fuzzing).
pub async fn dialogue<S: AsyncRead + AsyncWrite + Unpin>(
    s: S,
    helo_name: &str,
    timeout: std::time::Duration,
) -> Result<(), Failure> {
    let mut r = BufReader::new(s);
    let banner = reply(&mut r, timeout).await?;
    if banner != 220 {
        return Err(Failure::Smtp(format!("greeting {banner}")));
    }
    send(r.get_mut(), &format!("HELO {helo_name}\r\n"), timeout).await?;
    let helo = reply(&mut r, timeout).await?;
    if helo != 250 {
        return Err(Failure::Smtp(format!("HELO {helo}")));
    }
    send(r.get_mut(), "QUIT\r\n", timeout).await?;
    // keepalived reads the answer to QUIT without judging it.
    reply(&mut r, timeout).await?;
    Ok(())
}

/// Runs one SMTP check.
pub async fn check(target: &ProbeTarget, helo_name: &str) -> Result<(), Failure> {
    let s = sock::tcp_connect(target).await?;
    dialogue(s, helo_name, target.connect_timeout).await
}
