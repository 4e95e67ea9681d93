//! The SIP persistence engine (`--pe sip`, ip_vs_pe_sip.c): persistence
//! templates keyed also by the SIP `Call-ID`, so every datagram of one call
//! reaches the same real server even when the call's endpoints change.
//!
//! Only the header section of the message is searched. The header name is
//! matched case-insensitively, in its long form `Call-ID` or compact form `i`
//! (RFC 3261 §7.3.3, §20.8). The value is the text after the colon with
//! surrounding blanks removed, and it must be terminated by CR or LF; an
//! empty value, a value longer than [`MAX_PE_DATA`] bytes, or a message
//! without the header yields `None` and the caller falls back to ordinary
//! persistence, as the kernel does.

/// Longest persistence-engine datum the kernel keeps (`IP_VS_PEDATA_MAXLEN`).
pub const MAX_PE_DATA: usize = 255;

/// Find the `Call-ID` of a SIP message (the UDP payload).
pub fn call_id(payload: &[u8]) -> Option<&[u8]> {
    let mut rest = payload;
    // The first line is the request or status line, never a header.
    let mut first = true;
    loop {
        let eol = rest.iter().position(|&b| b == b'\r' || b == b'\n')?;
        let line = &rest[..eol];
        if line.is_empty() && !first {
            return None; // end of headers
        }
        if !first && let Some(v) = header_value(line) {
            return (!v.is_empty() && v.len() <= MAX_PE_DATA).then_some(v);
        }
        first = false;
        // Skip the line terminator (CRLF, or a lone CR or LF).
        let mut next = eol + 1;
        if rest[eol] == b'\r' && rest.get(next) == Some(&b'\n') {
            next += 1;
        }
        rest = &rest[next..];
    }
}

/// The trimmed value of `line` when it is a Call-ID header.
fn header_value(line: &[u8]) -> Option<&[u8]> {
    let colon = line.iter().position(|&b| b == b':')?;
    let name = trim(&line[..colon]);
    if !(name.eq_ignore_ascii_case(b"call-id") || name.eq_ignore_ascii_case(b"i")) {
        return None;
    }
    Some(trim(&line[colon + 1..]))
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', tail @ ..] = s {
        s = tail;
    }
    while let [head @ .., b' ' | b'\t'] = s {
        s = head;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776asdhds\r\n\
To: Bob <sip:bob@example.com>\r\n\
Call-ID: a84b4c76e66710@pc33.example.com\r\n\
CSeq: 314159 INVITE\r\n\r\nv=0\r\n";

    #[test]
    fn finds_long_form() {
        assert_eq!(
            call_id(INVITE),
            Some(&b"a84b4c76e66710@pc33.example.com"[..])
        );
    }

    #[test]
    fn finds_compact_form_case_insensitive_with_blanks() {
        let m = b"BYE sip:x SIP/2.0\r\nI :  abc \r\n\r\n";
        assert_eq!(call_id(m), Some(&b"abc"[..]));
        let m = b"BYE sip:x SIP/2.0\ncall-id:xyz\n\n";
        assert_eq!(call_id(m), Some(&b"xyz"[..]));
    }

    #[test]
    fn ignores_body_and_request_line() {
        let m = b"Call-ID: fake SIP/2.0\r\nTo: x\r\n\r\nCall-ID: body\r\n";
        assert_eq!(call_id(m), None);
    }

    #[test]
    fn requires_terminator_and_bounds_length() {
        assert_eq!(call_id(b"BYE x SIP/2.0\r\nCall-ID: unterminated"), None);
        assert_eq!(call_id(b"BYE x SIP/2.0\r\nCall-ID:   \r\n"), None);
        let mut long = b"BYE x SIP/2.0\r\nCall-ID: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 256));
        long.extend(b"\r\n");
        assert_eq!(call_id(&long), None);
        long.truncate(long.len() - 3);
        long.extend(b"\r\n");
        assert_eq!(call_id(&long).map(<[u8]>::len), Some(255));
    }

    #[test]
    fn never_panics_on_junk() {
        for m in [
            &b""[..],
            b"\r",
            b"\n\n",
            b":",
            b"\r\n:\r\n",
            b"x\r\ni:\r\n",
            b"\xff\xfe\r\ni: \x00\n",
        ] {
            let _ = call_id(m);
        }
    }
}
