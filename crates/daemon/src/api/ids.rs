//! Resource ids in paths: a service is `tcp-10.0.0.1-80`,
//! `udp-2001:db8::1-53`, `sctp-…`, `fwm-5` (`fwm6-5` for an IPv6 fwmark
//! service); a real server is `10.0.0.2-80` or `2001:db8::2-80`. Parsed
//! with a 400 naming the field, printed back the same way.

use std::net::IpAddr;

use rvs_core::model::{AddrFamily, Protocol, ServiceKey};

use super::error::ApiError;

/// The id of a service.
pub(crate) fn service_id(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => format!("{}-{addr}-{port}", protocol_name(*protocol)),
        ServiceKey::Fwmark {
            mark,
            af: AddrFamily::Inet,
        } => format!("fwm-{mark}"),
        ServiceKey::Fwmark {
            mark,
            af: AddrFamily::Inet6,
        } => format!("fwm6-{mark}"),
    }
}

/// `tcp`, `udp`, `sctp`.
pub(crate) const fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// The protocol of `tcp`, `udp`, `sctp` (any case).
pub(crate) fn protocol_of(s: &str) -> Option<Protocol> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Some(Protocol::Tcp),
        "udp" => Some(Protocol::Udp),
        "sctp" => Some(Protocol::Sctp),
        _ => None,
    }
}

/// Parse a service id; `field` names it in the error.
pub(crate) fn parse_service(s: &str, field: &str) -> Result<ServiceKey, ApiError> {
    let bad = |why: &str| {
        ApiError::field(
            field,
            format!(
                "`{s}` is not a service id ({why}; e.g. tcp-10.0.0.1-80, udp-2001:db8::1-53, fwm-5, fwm6-5)"
            ),
        )
    };
    let Some((kind, rest)) = s.split_once('-') else {
        return Err(bad("no `-`"));
    };
    if kind == "fwm" || kind == "fwm6" {
        let mark: u32 = rest.parse().map_err(|_| bad("the mark is not a number"))?;
        if mark == 0 {
            return Err(bad("the mark is 0"));
        }
        let af = if kind == "fwm" {
            AddrFamily::Inet
        } else {
            AddrFamily::Inet6
        };
        return Ok(ServiceKey::Fwmark { mark, af });
    }
    let protocol = protocol_of(kind).ok_or_else(|| bad("unknown protocol"))?;
    let (addr, port) = parse_addr_port(rest).ok_or_else(|| bad("not ADDRESS-PORT"))?;
    Ok(ServiceKey::Addr {
        protocol,
        addr,
        port,
    })
}

/// The id of a real server.
pub(crate) fn real_id(addr: IpAddr, port: u16) -> String {
    format!("{addr}-{port}")
}

/// Parse a real server id; `field` names it in the error.
pub(crate) fn parse_real(s: &str, field: &str) -> Result<(IpAddr, u16), ApiError> {
    parse_addr_port(s).ok_or_else(|| {
        ApiError::field(
            field,
            format!("`{s}` is not a real server id (ADDRESS-PORT, e.g. 10.0.0.2-80)"),
        )
    })
}

fn parse_addr_port(s: &str) -> Option<(IpAddr, u16)> {
    let (a, p) = s.rsplit_once('-')?;
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((a.parse().ok()?, p.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for id in [
            "tcp-10.0.0.1-80",
            "udp-2001:db8::1-53",
            "sctp-192.0.2.1-0",
            "fwm-5",
            "fwm6-5",
        ] {
            let k = parse_service(id, "svc").unwrap();
            assert_eq!(service_id(&k), id);
        }
        let k = parse_service("TCP-10.0.0.1-80", "svc").unwrap();
        assert_eq!(service_id(&k), "tcp-10.0.0.1-80");
        assert_eq!(
            parse_real("2001:db8::2-80", "rs").unwrap(),
            ("2001:db8::2".parse().unwrap(), 80)
        );
        assert_eq!(real_id("10.0.0.2".parse().unwrap(), 8080), "10.0.0.2-8080");
    }

    #[test]
    fn bad_ids_name_the_field() {
        for id in [
            "",
            "tcp",
            "tcp-10.0.0.1",
            "tcp-10.0.0.1-",
            "tcp-10.0.0.1-+80",
            "tcp-10.0.0.1-70000",
            "icmp-10.0.0.1-80",
            "tcp-nothere-80",
            "fwm-0",
            "fwm-x",
            "fwm7-1",
        ] {
            let e = parse_service(id, "svc").unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{id}");
            assert_eq!(e.body.field.as_deref(), Some("svc"), "{id}");
            assert!(e.body.message.contains(id), "{id}: {}", e.body.message);
        }
        let e = parse_real("10.0.0.2:80", "rs").unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("rs"));
    }
}
