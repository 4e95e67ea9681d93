//! `HTTP_GET` / `SSL_GET`: a small HTTP/1.0 and 1.1 client.
//!
//! Per URL: a fresh connection (connect and TLS handshake together within
//! one `connect_timeout`, as keepalived's connect timer covers both),
//! `GET PATH HTTP/1.x` with `Host:` = the URL's virtualhost, else the
//! checker's, else `ADDRESS:PORT` (keepalived's rule), `Connection: close` for `1.0C` and `1.1`. The response's status
//! line and headers are read, then the body framed by `Transfer-Encoding:
//! chunked`, `Content-Length` or the close of the connection. The status
//! must be in one of the URL's ranges; with a `digest`, the MD5 of the body
//! (chunked framing removed) must match.
//!
//! Difference from keepalived, on purpose: keepalived always reads to EOF and
//! hashes the raw bytes after the header, so for a chunked response its
//! digest (and `genhash`'s) covers the chunk framing; rvs hashes the decoded
//! body. Responses with `Content-Length` or read-to-close give the same
//! digest in both.

use md5::{Digest, Md5};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Failure, HttpVersion, ProbeTarget, TlsSpec, UrlSpec, sock, tls};

/// Largest status line + header block accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Largest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;

/// Checks every URL in order; the first failure is the result.
pub async fn check(
    target: &ProbeTarget,
    tls_spec: Option<&TlsSpec>,
    urls: &[super::UrlSpec],
    virtualhost: Option<&str>,
    version: HttpVersion,
) -> Result<(), Failure> {
    for url in urls {
        check_url(target, tls_spec, url, virtualhost, version).await?;
    }
    Ok(())
}

async fn check_url(
    target: &ProbeTarget,
    tls_spec: Option<&TlsSpec>,
    url: &UrlSpec,
    virtualhost: Option<&str>,
    version: HttpVersion,
) -> Result<(), Failure> {
    let host = match url.virtualhost.as_deref().or(virtualhost) {
        Some(h) => h.to_owned(),
        None => sock::host_port(target.addr),
    };
    let request = request(&url.path, &host, version);
    // keepalived gives the TLS handshake what is left of the connect timer.
    let deadline = tokio::time::Instant::now() + target.connect_timeout;
    let tcp = sock::tcp_connect(target).await?;
    match tls_spec {
        None => exchange(tcp, &request, url, target).await,
        Some(t) => {
            let stream = tls::connect(tcp, t, target, deadline).await?;
            exchange(stream, &request, url, target).await
        }
    }
}

/// The request bytes: keepalived's request, header for header (including
/// its `User-Agent: KeepAliveClient`, which backends often use to recognise
/// and filter health checks in their logs or access rules).
pub fn request(path: &str, host: &str, version: HttpVersion) -> Vec<u8> {
    let (minor, close) = match version {
        HttpVersion::Http10 => (0, ""),
        HttpVersion::Http10Close => (0, "Connection: close\r\n"),
        HttpVersion::Http11 => (1, "Connection: close\r\n"),
    };
    format!(
        "GET {path} HTTP/1.{minor}\r\nUser-Agent: KeepAliveClient\r\n{close}Host: {host}\r\n\r\n"
    )
    .into_bytes()
}

/// A buffered reader whose every read is bounded by the per-operation
/// timeout (keepalived re-arms `connect_timeout` for each read).
struct Reader<S> {
    s: S,
    buf: Vec<u8>,
    pos: usize,
    timeout: std::time::Duration,
}

impl<S: AsyncRead + Unpin> Reader<S> {
    /// Reads more bytes into the buffer; `Ok(false)` at EOF.
    async fn fill(&mut self) -> Result<bool, Failure> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout(self.timeout, self.s.read(&mut chunk)).await {
            Err(_) => Err(Failure::Timeout),
            // A TLS peer that closes without close_notify: the end of the
            // stream, as keepalived (and most HTTP clients) take it.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Ok(Err(e)) => Err(Failure::from_io(&e)),
            Ok(Ok(0)) => Ok(false),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
        }
    }

    fn available(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// One line (CRLF or LF terminated, terminator removed).
    async fn line(&mut self) -> Result<Vec<u8>, Failure> {
        loop {
            if let Some(i) = self.available().iter().position(|&b| b == b'\n') {
                let mut line = self.available()[..i].to_vec();
                self.pos += i + 1;
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.available().len() > MAX_LINE {
                return Err(bad("line too long"));
            }
            if !self.fill().await? {
                return Err(bad("truncated body"));
            }
        }
    }

    /// Passes exactly `n` body bytes to `sink`; `Ok(false)` if EOF came first.
    async fn take(&mut self, mut n: u64, sink: &mut Option<Md5>) -> Result<bool, Failure> {
        while n > 0 {
            if self.available().is_empty() && !self.fill().await? {
                return Ok(false);
            }
            let avail = self.available();
            let k = avail.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            if let Some(h) = sink.as_mut() {
                h.update(&avail[..k]);
            }
            self.pos += k;
            n -= k as u64;
        }
        Ok(true)
    }

    /// Passes everything up to EOF to `sink`.
    async fn until_eof(&mut self, sink: &mut Option<Md5>) -> Result<(), Failure> {
        loop {
            if let Some(h) = sink.as_mut() {
                h.update(self.available());
            }
            self.pos = self.buf.len();
            if !self.fill().await? {
                return Ok(());
            }
        }
    }
}

fn bad(what: &str) -> Failure {
    Failure::BadResponse(what.to_owned())
}

/// Parsed status line and the headers that frame the body.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// `Content-Length`, when present.
    pub content_length: Option<u64>,
    /// `Transfer-Encoding` ends with `chunked`.
    pub chunked: bool,
    /// Bytes of the status line and headers including the blank line.
    pub len: usize,
}

/// Parses a response head from the start of `buf`: `Ok(None)` when the
/// blank line ending it has not arrived yet.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, Failure> {
    let end = match find_blank_line(buf) {
        Some(e) => e,
        None if buf.len() > MAX_HEAD => return Err(bad("header too large")),
        None => return Ok(None),
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| bad("header not text"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let proto = parts.next().unwrap_or("");
    if !proto.starts_with("HTTP/1.") {
        return Err(bad("no HTTP/1.x status line"));
    }
    let code = parts.next().unwrap_or("");
    let status = match code.parse::<u16>() {
        Ok(c) if code.len() == 3 && (100..=999).contains(&c) => c,
        _ => return Err(bad("bad status code")),
    };
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .map_err(|_| bad("bad Content-Length"))?;
            if content_length.is_some_and(|c| c != n) {
                return Err(bad("conflicting Content-Length"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        }
    }
    Ok(Some(Head {
        status,
        content_length,
        chunked,
        len: end,
    }))
}

/// Index just past the first empty line (`\r\n\r\n` or `\n\n`).
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + off;
        let rest = &buf[nl + 1..];
        if rest.starts_with(b"\r\n") {
            return Some(nl + 3);
        }
        if rest.starts_with(b"\n") {
            return Some(nl + 2);
        }
        i = nl + 1;
    }
    None
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    request: &[u8],
    url: &UrlSpec,
    target: &ProbeTarget,
) -> Result<(), Failure> {
    let timeout = target.connect_timeout;
    match tokio::time::timeout(timeout, s.write_all(request)).await {
        Err(_) => return Err(Failure::Timeout),
        Ok(Err(e)) => return Err(Failure::from_io(&e)),
        Ok(Ok(())) => {}
    }
    read_response(s, url, timeout).await
}

/// Reads and judges one response from `s` for `url`: status line, headers,
/// body (chunked, Content-Length or until close), status range and digest.
/// Each read waits at most `timeout`. Public so that it can be fuzzed and
/// tested over any byte stream.
pub async fn read_response<S: AsyncRead + Unpin>(
    s: S,
    url: &UrlSpec,
    timeout: std::time::Duration,
) -> Result<(), Failure> {
    let mut r = Reader {
        s,
        buf: Vec::with_capacity(4096),
        pos: 0,
        timeout,
    };
    let head = loop {
        if let Some(h) = parse_head(&r.buf)? {
            break h;
        }
        if !r.fill().await? {
            return Err(if r.buf.is_empty() {
                bad("no data")
            } else {
                bad("truncated header")
            });
        }
    };
    r.pos = head.len;
    if !url.status.iter().any(|range| range.contains(&head.status)) {
        return Err(Failure::Status(head.status));
    }
    let mut hasher = url.digest.as_ref().map(|_| Md5::new());
    let no_body = head.status < 200 || head.status == 204 || head.status == 304;
    if no_body {
    } else if head.chunked {
        loop {
            let line = r.line().await?;
            let text = std::str::from_utf8(&line).map_err(|_| bad("bad chunk size"))?;
            let size_text = text.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_text, 16).map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                // Trailers up to the empty line.
                while !r.line().await?.is_empty() {}
                break;
            }
            if !r.take(size, &mut hasher).await? {
                return Err(bad("truncated chunk"));
            }
            if !r.line().await?.is_empty() {
                return Err(bad("bad chunk end"));
            }
        }
    } else if let Some(n) = head.content_length {
        // A short body is hashed as received (keepalived logs the length
        // mismatch and still compares the digest).
        r.take(n, &mut hasher).await?;
    } else {
        r.until_eof(&mut hasher).await?;
    }
    if let (Some(want), Some(h)) = (&url.digest, hasher) {
        let got = hex(&h.finalize());
        if !got.eq_ignore_ascii_case(want.trim()) {
            return Err(Failure::DigestMismatch);
        }
    }
    Ok(())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_forms() {
        assert_eq!(
            request("/x", "h:80", HttpVersion::Http10),
            b"GET /x HTTP/1.0\r\nUser-Agent: KeepAliveClient\r\nHost: h:80\r\n\r\n".to_vec()
        );
        let r11 = String::from_utf8(request("/", "a", HttpVersion::Http11)).unwrap();
        assert!(r11.starts_with("GET / HTTP/1.1\r\n"));
        assert!(r11.contains("Connection: close\r\n"));
        let r10c = String::from_utf8(request("/", "a", HttpVersion::Http10Close)).unwrap();
        assert!(r10c.starts_with("GET / HTTP/1.0\r\n") && r10c.contains("Connection: close"));
    }

    #[test]
    fn head_parsing() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap(), None);
        let h = parse_head(b"HTTP/1.1 503 Busy\r\ncontent-length: 12\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!(
            h,
            Head {
                status: 503,
                content_length: Some(12),
                chunked: false,
                len: 41
            }
        );
        let h = parse_head(b"HTTP/1.0 200\nTransfer-Encoding: gzip, chunked\n\n")
            .unwrap()
            .unwrap();
        assert!(h.chunked && h.status == 200);
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 20x OK\r\n\r\n").is_err());
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .is_err()
        );
        let big = vec![b'a'; MAX_HEAD + 1];
        assert!(parse_head(&big).is_err());
    }

    fn u(digest: Option<&[u8]>) -> UrlSpec {
        UrlSpec {
            path: "/".into(),
            status: vec![200..=299],
            digest: digest.map(|b| hex(&Md5::digest(b))),
            virtualhost: None,
        }
    }

    async fn judge(raw: &[u8], url: &UrlSpec) -> Result<(), Failure> {
        read_response(raw, url, std::time::Duration::from_secs(1)).await
    }

    #[tokio::test]
    async fn response_framing() {
        let body = Some(&b"hello world"[..]);
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello worldEXTRA";
        // Bytes after Content-Length are not part of the body.
        assert_eq!(judge(ok, &u(body)).await, Ok(()));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert_eq!(judge(chunked, &u(body)).await, Ok(()));
        // Broken chunked bodies: the chunk after the header, the failure.
        for (chunks, url, failure) in [
            (&b"zz\r\nhello\r\n0\r\n\r\n"[..], u(body), "bad chunk size"),
            (b"ff\r\nhello", u(body), "truncated chunk"),
            (b"5\r\nhelloXX\r\n0\r\n\r\n", u(None), "bad chunk end"),
        ] {
            let raw = [
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
                chunks,
            ]
            .concat();
            assert_eq!(
                judge(&raw, &url).await,
                Err(Failure::BadResponse(failure.into())),
                "{failure}"
            );
        }
        // 204 has no body even if bytes follow; the digest is of the empty body.
        let no_content = b"HTTP/1.1 204 No Content\r\n\r\nignored";
        assert_eq!(judge(no_content, &u(Some(b""))).await, Ok(()));
        // A short Content-Length body is hashed as received.
        let short = b"HTTP/1.0 200 OK\r\nContent-Length: 50\r\n\r\nhello world";
        assert_eq!(judge(short, &u(body)).await, Ok(()));
        assert_eq!(
            judge(b"HTTP/1.0 200 OK\r\nX: y", &u(None)).await,
            Err(Failure::BadResponse("truncated header".into()))
        );
    }

    #[test]
    fn hex_digits() {
        assert_eq!(hex(&[0x00, 0x9f, 0xa0, 0xff]), "009fa0ff");
    }
}
