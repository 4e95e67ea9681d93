//! What rvsd reads from the BGP daemon it announces through (diagnostics
//! only: `--bgp-daemon`), as parsers without I/O.
//!
//! * BIRD 2's control socket speaks lines `CODE-text` (more follows),
//!   ` text` (a continuation of the same code) and `CODE text` (the last
//!   line); codes 0xxx end a reply, 8xxx and 9xxx are errors
//!   (BIRD's doc/reply_codes). [`bird_reply`] splits one reply,
//!   [`bird_protocols`] reads `show protocols`, [`bird_count`] the
//!   `... count` form of `show route`.
//! * FRR: `vtysh -c 'show bgp summary json'`; [`frr_summary`] reads its
//!   peers.
//!
//! Every parser returns an error for input it does not understand and
//! never panics (fuzzed: `fuzz/fuzz_targets/bird_reply.rs`).

/// Why a reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BgpParseError {
    /// The reply ended before its last line (`CODE text`).
    #[error("the reply is incomplete (no final line)")]
    Incomplete,
    /// A line that is neither `CODE-text`, `CODE text` nor ` text`.
    #[error("line {line}: not a BIRD reply line: {text:?}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The line (cut to 80 bytes).
        text: String,
    },
    /// BIRD answered with an error code (8xxx run-time, 9xxx parse).
    #[error("BIRD error {code}: {text}")]
    Daemon {
        /// The code.
        code: u16,
        /// BIRD's message.
        text: String,
    },
    /// The reply does not have the expected content.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

/// One line of a BIRD reply: its code (a continuation line has the code
/// of the line before) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BirdLine {
    /// The reply code.
    pub code: u16,
    /// The text after the code and its separator.
    pub text: String,
}

fn cut(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Split one complete BIRD reply into lines. `Ok` once the final line
/// (`CODE text`) is in `text`, [`BgpParseError::Incomplete`] before;
/// an error code is [`BgpParseError::Daemon`]. Text after the final line
/// is ignored.
pub fn bird_reply(text: &str) -> Result<Vec<BirdLine>, BgpParseError> {
    let mut out: Vec<BirdLine> = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let b = line.as_bytes();
        if b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && (b[4] == b'-' || b[4] == b' ') {
            let code: u16 = line[..4].parse().map_err(|_| BgpParseError::BadLine {
                line: i + 1,
                text: cut(line),
            })?;
            let body = line[5..].to_owned();
            if code >= 8000 {
                return Err(BgpParseError::Daemon {
                    code,
                    text: body.trim().to_owned(),
                });
            }
            let last = b[4] == b' ';
            out.push(BirdLine { code, text: body });
            if last {
                return Ok(out);
            }
        } else if let Some(rest) = line.strip_prefix(' ') {
            let code = out.last().map(|l| l.code).ok_or(BgpParseError::BadLine {
                line: i + 1,
                text: cut(line),
            })?;
            out.push(BirdLine {
                code,
                text: rest.to_owned(),
            });
        } else if line.is_empty() && i + 1 == text.split('\n').count() {
            // The end of the text: the reply goes on in the next read.
        } else {
            return Err(BgpParseError::BadLine {
                line: i + 1,
                text: cut(line),
            });
        }
    }
    Err(BgpParseError::Incomplete)
}

/// One protocol of `show protocols`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BirdProtocol {
    /// Its name (`rvs`, `upstream`).
    pub name: String,
    /// Its type (`Kernel`, `BGP`, `Device`).
    pub proto: String,
    /// Its table (`master4`, `---`).
    pub table: String,
    /// `up`, `down`, `start`, `stop`.
    pub state: String,
    /// The rest: since, and info (`Established`, `Active`, ...).
    pub info: String,
}

impl BirdProtocol {
    /// Whether a BGP protocol's session is established.
    pub fn established(&self) -> bool {
        self.state == "up" && self.info.contains("Established")
    }
}

/// The protocols of a `show protocols` reply (code 1002 lines; the 2002
/// header is skipped).
pub fn bird_protocols(lines: &[BirdLine]) -> Result<Vec<BirdProtocol>, BgpParseError> {
    let mut out = Vec::new();
    for l in lines.iter().filter(|l| l.code == 1002) {
        let mut f = l.text.split_whitespace();
        let (Some(name), Some(proto), Some(table), Some(state)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            return Err(BgpParseError::Unexpected(format!(
                "protocol line {:?}",
                cut(&l.text)
            )));
        };
        out.push(BirdProtocol {
            name: name.to_owned(),
            proto: proto.to_owned(),
            table: table.to_owned(),
            state: state.to_owned(),
            info: f.collect::<Vec<_>>().join(" "),
        });
    }
    if out.is_empty() && !lines.iter().any(|l| l.code == 2002) {
        return Err(BgpParseError::Unexpected(
            "no protocol list in the reply".into(),
        ));
    }
    Ok(out)
}

/// The route count of `show route ... count` (`N of M routes for K
/// networks in table T`, code 1007 in BIRD 2.0).
pub fn bird_count(lines: &[BirdLine]) -> Result<u64, BgpParseError> {
    let l = lines
        .iter()
        .find(|l| l.code == 1007 || l.code == 14)
        .ok_or_else(|| BgpParseError::Unexpected("no route count in the reply".into()))?;
    l.text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| BgpParseError::Unexpected(format!("route count {:?}", cut(&l.text))))
}

/// One BGP peer of FRR's `show bgp summary json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrrPeer {
    /// The neighbour's address (or name).
    pub peer: String,
    /// Its state (`Established`, `Active`, `Connect`, ...).
    pub state: String,
    /// Prefixes sent to it, when FRR says.
    pub sent: Option<u64>,
}

/// The peers of `show bgp summary json` (every address family FRR lists:
/// `ipv4Unicast`, `ipv6Unicast`, ...; a peer in two families is listed
/// twice).
pub fn frr_summary(json: &str) -> Result<Vec<FrrPeer>, BgpParseError> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| BgpParseError::Unexpected(format!("not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| BgpParseError::Unexpected("not a JSON object".into()))?;
    let mut out = Vec::new();
    for (_, af) in obj.iter() {
        let Some(peers) = af.get("peers").and_then(|p| p.as_object()) else {
            continue;
        };
        for (name, p) in peers {
            out.push(FrrPeer {
                peer: name.clone(),
                state: p
                    .get("state")
                    .and_then(|s| s.as_str())
                    .unwrap_or("unknown")
                    .to_owned(),
                sent: p.get("pfxSnt").and_then(|s| s.as_u64()),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from BIRD 2.0.12 (the bed's configuration).
    const PROTOCOLS: &str = "2002-Name       Proto      Table      State  Since         Info\n\
1002-device1    Device     ---        up     03:07:33.798  \n \
rvs        Kernel     master4    up     03:07:33.798  \n \
up1        BGP        ---        start  03:07:33.798  Idle          \n\
0000 \n";

    #[test]
    fn show_protocols_is_read() {
        let lines = bird_reply(PROTOCOLS).unwrap();
        let p = bird_protocols(&lines).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].name, "rvs");
        assert_eq!(p[1].proto, "Kernel");
        assert_eq!(p[2].proto, "BGP");
        assert_eq!(p[2].state, "start");
        assert!(p[2].info.ends_with("Idle"));
        assert!(!p[2].established());
        let up = BirdProtocol {
            state: "up".into(),
            info: "03:07:33.798 Established".into(),
            ..p[2].clone()
        };
        assert!(up.established());
    }

    #[test]
    fn counts_errors_and_incomplete_replies() {
        let c = bird_reply("1007-1 of 1 routes for 1 networks in table master4\n0000 \n").unwrap();
        assert_eq!(bird_count(&c).unwrap(), 1);
        assert_eq!(
            bird_reply("9001 syntax error, unexpected CF_SYM_UNDEFINED\n"),
            Err(BgpParseError::Daemon {
                code: 9001,
                text: "syntax error, unexpected CF_SYM_UNDEFINED".into()
            })
        );
        assert_eq!(
            bird_reply("2002-Name Proto\n1002-x"),
            Err(BgpParseError::Incomplete)
        );
        assert_eq!(
            bird_reply("2002-Name Proto\n"),
            Err(BgpParseError::Incomplete)
        );
        assert!(matches!(
            bird_reply("hello\n"),
            Err(BgpParseError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            bird_reply(" continuation first\n"),
            Err(BgpParseError::BadLine { line: 1, .. })
        ));
        assert_eq!(bird_reply("0001 BIRD 2.0.12 ready.\n").unwrap()[0].code, 1);
        assert!(bird_protocols(&bird_reply("0000 \n").unwrap()).is_err());
        assert!(bird_count(&bird_reply("0000 \n").unwrap()).is_err());
    }

    #[test]
    fn frr_summary_peers() {
        let j = r#"{"ipv4Unicast":{"routerId":"10.77.0.1","peers":{
            "10.77.0.2":{"remoteAs":65001,"state":"Established","pfxRcd":1,"pfxSnt":1},
            "10.77.0.3":{"remoteAs":65001,"state":"Active"}}}}"#;
        let p = frr_summary(j).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].state, "Established");
        assert_eq!(p[0].sent, Some(1));
        assert_eq!(p[1].sent, None);
        assert!(frr_summary("{}").unwrap().is_empty());
        assert!(frr_summary("[1]").is_err());
        assert!(frr_summary("% Unknown command").is_err());
    }
}
