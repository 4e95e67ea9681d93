//! Health checkers inside a `real_server` (`TCP_CHECK`, `HTTP_GET`/`SSL_GET`
//! with their `url` blocks, `MISC_CHECK`, `DNS_CHECK`, ...) and the top-level
//! `SSL` block they use.

use super::*;

pub(super) fn ssl(c: &mut Ctx<'_>, n: &Node) -> R<SslConfig> {
    let mut s = SslConfig::default();
    for k in block(n)? {
        c.audit(Block::Ssl, k)?;
        match k.key.text.as_str() {
            "password" => s.password = Some(string(k, "a password")?),
            "ca" => s.ca = Some(string(k, "a file name")?),
            "certificate" => s.certificate = Some(string(k, "a file name")?),
            "key" => s.key = Some(string(k, "a file name")?),
            _ => c.unknown(k, "SSL", Block::Ssl),
        }
    }
    Ok(s)
}

/// Common checker options; returns false when the keyword is not one.
fn common_opt(c: &mut Ctx<'_>, k: &Node, o: &mut CheckerCommon) -> R<bool> {
    let t = || arg(k, 0, "a value");
    match k.key.text.as_str() {
        "connect_ip" => o.connect_ip = Some(ip(t()?)?),
        "connect_port" => o.connect_port = Some(port(t()?)?),
        "bindto" => o.bindto = Some(ip(t()?)?),
        "bind_if" => o.bind_if = Some(t()?.text.clone()),
        "bind_port" => o.bind_port = Some(port(t()?)?),
        "fwmark" => o.fwmark = Some(num(t()?, "a firewall mark", 0, u64::from(u32::MAX))?),
        "alpha" => o.alpha = Some(flag(k)?),
        "connect_timeout" => o.connect_timeout = Some(timer(t()?)?),
        "retry" | "nb_get_retry" => o.retry = Some(retry(k)?),
        "delay_before_retry" => o.delay_before_retry = Some(timer(t()?)?),
        "warmup" => o.warmup = Some(timer(t()?)?),
        "delay_loop" => o.delay_loop = Some(timer(t()?)?),
        "log_all_failures" => o.log_all_failures = Some(flag(k)?),
        _ => return Ok(false),
    }
    c.max_args(k, 1);
    Ok(true)
}

/// A checker block; an `SMTP_CHECK` with `host { }` blocks is one checker
/// per host, as keepalived 2 makes them (so the real server is up only
/// while every host answers), each host's connection options defaulting to
/// the checker's own given before it.
pub(super) fn checker(c: &mut Ctx<'_>, n: &Node) -> R<Vec<Checker>> {
    let name = n.key.text.as_str();
    let mut common = CheckerCommon::default();
    let mut hosts: Vec<CheckerCommon> = Vec::new();
    let mut kind = match name {
        "HTTP_GET" => CheckerKind::Http(HttpCheck::default()),
        "SSL_GET" => CheckerKind::Ssl(HttpCheck::default()),
        "TCP_CHECK" => CheckerKind::Tcp,
        "SMTP_CHECK" => CheckerKind::Smtp { helo_name: None },
        "DNS_CHECK" => CheckerKind::Dns {
            qtype: "SOA".to_owned(),
            name: ".".to_owned(),
        },
        "MISC_CHECK" => CheckerKind::Misc(MiscCheck::default()),
        "UDP_CHECK" => CheckerKind::Udp(UdpCheck {
            max_reply_length: 255,
            ..UdpCheck::default()
        }),
        "PING_CHECK" => CheckerKind::Ping,
        "FILE_CHECK" => CheckerKind::File(FileCheck::default()),
        _ => CheckerKind::Bfd { name: None },
    };
    let empty: &[Node] = &[];
    let body = n.block.as_deref().unwrap_or(empty);
    if n.block.is_none() {
        return err(
            &n.key,
            format!("expected `{{` opening the `{name}` block, found end of line"),
        );
    }
    for k in body {
        if c.audit(Block::Checker, k)? || common_opt(c, k, &mut common)? {
            continue;
        }
        let key = k.key.text.as_str();
        match &mut kind {
            CheckerKind::Http(h) | CheckerKind::Ssl(h) => match key {
                "http_protocol" => {
                    let t = arg(k, 0, "an HTTP protocol")?;
                    if !matches!(t.text.as_str(), "1.0" | "1.0C" | "1.1") {
                        return err(
                            t,
                            format!(
                                "expected an HTTP protocol (1.0|1.0C|1.1), found `{}`",
                                t.text
                            ),
                        );
                    }
                    h.http_protocol = Some(t.text.clone());
                }
                "fast_recovery" => h.fast_recovery = flag(k)?,
                "virtualhost" => h.virtualhost = Some(string(k, "a host name")?),
                "enable_sni" => h.enable_sni = flag(k)?,
                "sni_name" => h.sni_name = Some(string(k, "a server name")?),
                "tls_compliant" => h.tls_compliant = flag(k)?,
                "url" => h.urls.push(url(c, k)?),
                _ => c.unknown(k, name, Block::Checker),
            },
            CheckerKind::Smtp { helo_name } => match key {
                "helo_name" => *helo_name = Some(string(k, "a HELO name")?),
                "host" => {
                    let mut h = common.clone();
                    for hk in block(k)? {
                        if !common_opt(c, hk, &mut h)? {
                            c.unknown(hk, "SMTP_CHECK host", Block::Checker);
                        }
                    }
                    hosts.push(h);
                    c.warn(
                        &k.key,
                        "The SMTP_CHECK host block is deprecated. Please define additional checkers.",
                    );
                }
                _ => c.unknown(k, name, Block::Checker),
            },
            CheckerKind::Dns { qtype, name: qname } => match key {
                "type" => {
                    let t = arg(k, 0, "a DNS query type")?;
                    let up = t.text.to_ascii_uppercase();
                    if !matches!(
                        up.as_str(),
                        "A" | "NS" | "CNAME" | "SOA" | "MX" | "TXT" | "AAAA"
                    ) {
                        return err(
                            t,
                            format!(
                                "expected a DNS query type (A|NS|CNAME|SOA|MX|TXT|AAAA), found `{}`",
                                t.text
                            ),
                        );
                    }
                    *qtype = up;
                }
                "name" => *qname = string(k, "a domain name")?,
                _ => c.unknown(k, name, Block::Checker),
            },
            CheckerKind::Misc(m) => match key {
                "misc_path" => m.path = string(k, "a script path")?,
                "misc_timeout" => m.timeout = Some(timer(arg(k, 0, "a timeout")?)?),
                "misc_dynamic" => m.dynamic = flag(k)?,
                "user" => m.user = Some(words(k, 0)),
                _ => c.unknown(k, name, Block::Checker),
            },
            CheckerKind::Udp(u) => match key {
                "payload" => {
                    u.payload = Some(
                        hex_bytes(k, false)?
                            .into_iter()
                            .map(|b| b.unwrap_or(0))
                            .collect(),
                    )
                }
                "require_reply" => {
                    u.require_reply = Some(if k.args.is_empty() {
                        None
                    } else {
                        Some(hex_bytes(k, true)?)
                    })
                }
                "min_reply_length" => {
                    u.min_reply_length = num(arg(k, 0, "a length")?, "a length", 0, 65535)?
                }
                "max_reply_length" => {
                    u.max_reply_length = num(arg(k, 0, "a length")?, "a length", 0, 65535)?
                }
                _ => c.unknown(k, name, Block::Checker),
            },
            CheckerKind::File(f) => match key {
                "track_file" => f.track_file = Some(string(k, "a track_file name")?),
                "dynamic" => f.dynamic = flag(k)?,
                "weight" => {
                    let w = int(
                        arg(k, 0, "a weight")?,
                        "a weight",
                        -2_147_483_647,
                        2_147_483_647,
                    )?;
                    let rev = matches!(k.args.get(1), Some(t) if t.text == "reverse");
                    f.weight = Some((w, rev));
                }
                _ => c.unknown(k, name, Block::Checker),
            },
            CheckerKind::Bfd { name: bfd } if key == "name" => {
                *bfd = Some(string(k, "a BFD instance name")?);
            }
            CheckerKind::Bfd { .. } | CheckerKind::Tcp | CheckerKind::Ping => {
                c.unknown(k, name, Block::Checker);
            }
        }
    }
    let one = |common: CheckerCommon| Checker {
        kind: kind.clone(),
        common,
        effective: CheckerTiming::default(),
        loc: loc_of(&n.key),
    };
    if hosts.is_empty() {
        Ok(vec![one(common)])
    } else {
        Ok(hosts.into_iter().map(one).collect())
    }
}

/// keepalived's free-format HEX_STR: words of hex digits, an odd-length word
/// is left-padded (`3` → `03`); with `wild`, `x` nibbles are "don't care".
fn hex_bytes(k: &Node, wild: bool) -> R<Vec<Option<u8>>> {
    let mut out = Vec::new();
    for t in &k.args {
        let chars: Vec<char> = t.text.chars().collect();
        let mut nibbles: Vec<Option<u8>> = Vec::new();
        for &ch in &chars {
            let v = match ch.to_digit(16) {
                Some(d) => Some(u8::try_from(d).unwrap_or(0)),
                None if wild && (ch == 'x' || ch == 'X') => None,
                None => {
                    return expected(t, "hexadecimal digits");
                }
            };
            nibbles.push(v);
        }
        if nibbles.len() % 2 == 1 {
            nibbles.insert(0, Some(0));
        }
        for pair in nibbles.chunks(2) {
            out.push(match (pair[0], pair[1]) {
                (Some(h), Some(l)) => Some(h << 4 | l),
                _ => None,
            });
        }
    }
    Ok(out)
}

fn url(c: &mut Ctx<'_>, n: &Node) -> R<UrlCheck> {
    let mut u = UrlCheck {
        path: None,
        digest: None,
        status_codes: Vec::new(),
        virtualhost: None,
        regex: None,
        regex_no_match: false,
        regex_options: Vec::new(),
        loc: loc_of(&n.key),
    };
    for k in block(n)? {
        c.audit(Block::Url, k)?;
        let mut max = 1;
        match k.key.text.as_str() {
            "path" => u.path = Some(string(k, "a URL path")?),
            "digest" => {
                let t = arg(k, 0, "an MD5 digest")?;
                if t.text.len() != 32 || !t.text.chars().all(|ch| ch.is_ascii_hexdigit()) {
                    return expected(t, "an MD5 digest (32 hex digits)");
                }
                u.digest = Some(t.text.to_ascii_lowercase());
            }
            "status_code" => {
                max = usize::MAX;
                if k.args.is_empty() {
                    return err(
                        &k.key,
                        "expected a status code or range after `status_code`, found end of line",
                    );
                }
                for t in &k.args {
                    let (a, b) = match t.text.split_once('-') {
                        Some((a, b)) => (a, b),
                        None => (t.text.as_str(), t.text.as_str()),
                    };
                    let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) else {
                        return err(
                            t,
                            format!(
                                "expected a status code or range (e.g. 200 or 200-299), found `{}`",
                                t.text
                            ),
                        );
                    };
                    if !(100..=999).contains(&a) || !(100..=999).contains(&b) || a > b {
                        return err(
                            t,
                            format!(
                                "expected a status code or range within 100-999, found `{}`",
                                t.text
                            ),
                        );
                    }
                    u.status_codes.push(a..=b);
                }
            }
            "virtualhost" => u.virtualhost = Some(string(k, "a host name")?),
            "regex" => u.regex = Some(string(k, "a regular expression")?),
            "regex_no_match" => u.regex_no_match = true,
            "regex_options" => {
                max = usize::MAX;
                u.regex_options = k.args.iter().map(|t| t.text.clone()).collect();
            }
            "regex_stack" | "regex_min_offset" | "regex_max_offset" => {
                max = usize::MAX;
            }
            _ => {
                c.unknown(k, "url", Block::Url);
                max = usize::MAX;
            }
        }
        if max != usize::MAX {
            c.max_args(k, max);
        }
    }
    if u.status_codes.is_empty() && u.digest.is_none() {
        u.status_codes.push(200..=299);
    }
    Ok(u)
}
