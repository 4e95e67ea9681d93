//! `DNS_CHECK`: one query over UDP.
//!
//! As keepalived: a query with a random id, recursion desired, class IN, of
//! `type` for `name`, sent on a connected UDP socket; datagrams that are too
//! short, carry another id or are not responses are ignored and the wait
//! goes on; the first real response decides: RCODE NOERROR = up, otherwise
//! down. `connect_timeout` bounds the whole exchange. With
//! `require_answer` the response must also hold a record of the asked type
//! in its answer section (an rvs option; keepalived stops at the RCODE).

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::time::Instant;

use super::{Failure, ProbeTarget, sock};

/// The query types keepalived's DNS_CHECK accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DnsType {
    /// IPv4 address.
    A,
    /// Name server.
    Ns,
    /// Canonical name.
    Cname,
    /// Start of authority (keepalived's default).
    #[default]
    Soa,
    /// Mail exchanger.
    Mx,
    /// Text.
    Txt,
    /// IPv6 address.
    Aaaa,
}

impl DnsType {
    /// Parses keepalived's `type` keyword values, case-insensitively.
    pub fn from_keyword(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "A" => Self::A,
            "NS" => Self::Ns,
            "CNAME" => Self::Cname,
            "SOA" => Self::Soa,
            "MX" => Self::Mx,
            "TXT" => Self::Txt,
            "AAAA" => Self::Aaaa,
            _ => return None,
        })
    }

    /// The wire record type.
    pub fn record_type(self) -> RecordType {
        match self {
            Self::A => RecordType::A,
            Self::Ns => RecordType::NS,
            Self::Cname => RecordType::CNAME,
            Self::Soa => RecordType::SOA,
            Self::Mx => RecordType::MX,
            Self::Txt => RecordType::TXT,
            Self::Aaaa => RecordType::AAAA,
        }
    }
}

/// Builds the query message: `(id, bytes)`.
pub fn query(qtype: DnsType, name: &str) -> Result<(u16, Vec<u8>), Failure> {
    let mut qname =
        Name::from_ascii(name).map_err(|e| Failure::Io(format!("DNS name {name:?}: {e}")))?;
    qname.set_fqdn(true);
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(qname, qtype.record_type()));
    let bytes = msg
        .to_vec()
        .map_err(|e| Failure::Io(format!("DNS query: {e}")))?;
    Ok((msg.metadata.id, bytes))
}

/// What a received datagram means for the check.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not our response (short, other id, not QR): keep waiting.
    Ignore,
    /// The check's result.
    Done(Result<(), Failure>),
}

/// The mnemonic operators know (`NXDOMAIN`, `SERVFAIL`...) for an RCODE.
pub fn rcode_name(rcode: u8) -> String {
    match rcode {
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        n => format!("rcode {n} ({})", ResponseCode::from_low(n).to_str()),
    }
}

/// Judges one datagram against the query `id`.
pub fn judge(datagram: &[u8], id: u16, qtype: DnsType, require_answer: bool) -> Verdict {
    if datagram.len() < 12 {
        return Verdict::Ignore;
    }
    if u16::from_be_bytes([datagram[0], datagram[1]]) != id || datagram[2] & 0x80 == 0 {
        return Verdict::Ignore;
    }
    let rcode = datagram[3] & 0x0f;
    if rcode != 0 {
        return Verdict::Done(Err(Failure::Rcode(rcode_name(rcode))));
    }
    if !require_answer {
        return Verdict::Done(Ok(()));
    }
    match Message::from_vec(datagram) {
        Err(e) => Verdict::Done(Err(Failure::BadResponse(e.to_string()))),
        Ok(m) => {
            let want = qtype.record_type();
            if m.answers.iter().any(|r| r.record_type() == want) {
                Verdict::Done(Ok(()))
            } else {
                Verdict::Done(Err(Failure::NoAnswer))
            }
        }
    }
}

/// Runs one DNS check.
pub async fn check(
    target: &ProbeTarget,
    qtype: DnsType,
    name: &str,
    require_answer: bool,
) -> Result<(), Failure> {
    let deadline = Instant::now() + target.connect_timeout;
    let (id, q) = query(qtype, name)?;
    let exchange = async {
        let sock = sock::udp_connect(target).await?;
        sock.send(&q).await.map_err(|e| Failure::from_io(&e))?;
        let mut buf = vec![0u8; 4096];
        loop {
            let n = sock
                .recv(&mut buf)
                .await
                .map_err(|e| Failure::from_io(&e))?;
            if let Verdict::Done(r) = judge(&buf[..n], id, qtype, require_answer) {
                return r;
            }
        }
    };
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords() {
        assert_eq!(DnsType::from_keyword("aaaa"), Some(DnsType::Aaaa));
        assert_eq!(DnsType::from_keyword("SOA"), Some(DnsType::Soa));
        assert_eq!(DnsType::from_keyword("PTR"), None);
    }

    #[test]
    fn query_and_judge() {
        let (id, q) = query(DnsType::A, "example.test").unwrap();
        let m = Message::from_vec(&q).unwrap();
        assert_eq!(m.metadata.id, id);
        assert!(m.metadata.recursion_desired);
        assert_eq!(m.queries[0].query_type(), RecordType::A);
        // The query itself is not a response: ignored.
        assert_eq!(judge(&q, id, DnsType::A, false), Verdict::Ignore);
        assert_eq!(judge(&q[..5], id, DnsType::A, false), Verdict::Ignore);
        let mut resp = q.clone();
        resp[2] |= 0x80;
        assert_eq!(judge(&resp, id, DnsType::A, false), Verdict::Done(Ok(())));
        assert_eq!(
            judge(&resp, id, DnsType::A, true),
            Verdict::Done(Err(Failure::NoAnswer))
        );
        assert_eq!(
            judge(&resp, id.wrapping_add(1), DnsType::A, false),
            Verdict::Ignore
        );
        resp[3] |= 3;
        assert_eq!(
            judge(&resp, id, DnsType::A, false),
            Verdict::Done(Err(Failure::Rcode("NXDOMAIN".into())))
        );
        let (_, root) = query(DnsType::Soa, ".").unwrap();
        assert!(
            Message::from_vec(&root).unwrap().queries[0]
                .name()
                .is_root()
        );
    }
}
