//! Name resolution: host names and service (port) names, both directions.
//!
//! ipvsadm resolves host names with `gethostbyname` (IPv4 only), port names
//! with `getservbyname`/`getservbyport` (`/etc/services`), and, when listing
//! without `-n`, addresses with `gethostbyaddr`. This is the only I/O the
//! crate does, and it all sits behind the [`Names`] trait so that tests and
//! fuzzers can run without touching DNS ([`OfflineNames`]), while `rvsadm`
//! uses [`SystemNames`].
//!
//! * forward lookup: [`std::net::ToSocketAddrs`], first IPv4 answer (like
//!   `gethostbyname`, which only returns `AF_INET` results);
//! * reverse lookup: `getnameinfo(NI_NAMEREQD)` through the `dns-lookup`
//!   crate (no `unsafe` here);
//! * services: `/etc/services` read once; if it cannot be read, a small
//!   built-in table of well-known names ([`BUILTIN_SERVICES`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::sync::OnceLock;

/// Name lookups needed by the parser and the formatters.
///
/// `proto` is an IP protocol number (6 TCP, 17 UDP, 132 SCTP); ipvsadm only
/// looks service names up for those three, any other number finds nothing.
pub trait Names {
    /// Resolve a host name to its first IPv4 address (`gethostbyname`).
    fn host_to_v4(&self, name: &str) -> Option<Ipv4Addr>;
    /// Resolve a service name to a port for a protocol (`getservbyname`).
    fn service_to_port(&self, name: &str, proto: u8) -> Option<u16>;
    /// Reverse-resolve an address to a host name (`gethostbyaddr`).
    fn addr_to_host(&self, addr: IpAddr) -> Option<String>;
    /// The official service name of a port for a protocol (`getservbyport`).
    fn port_to_service(&self, port: u16, proto: u8) -> Option<String>;
}

/// The protocol column of `/etc/services` for an IP protocol number.
fn proto_name(proto: u8) -> Option<&'static str> {
    match proto {
        6 => Some("tcp"),
        17 => Some("udp"),
        132 => Some("sctp"),
        _ => None,
    }
}

/// Well-known services used when `/etc/services` is absent (same syntax as
/// the file). Names and numbers are IANA's.
pub const BUILTIN_SERVICES: &str = "\
ftp-data 20/tcp
ftp 21/tcp
ssh 22/tcp
telnet 23/tcp
smtp 25/tcp mail
domain 53/tcp
domain 53/udp
http 80/tcp www
pop3 110/tcp pop-3
ntp 123/udp
imap2 143/tcp imap
snmp 161/udp
ldap 389/tcp
https 443/tcp
https 443/udp
syslog 514/udp
submission 587/tcp
ldaps 636/tcp
imaps 993/tcp
pop3s 995/tcp
mysql 3306/tcp
sip 5060/tcp
sip 5060/udp
postgresql 5432/tcp postgres
http-alt 8080/tcp webcache
";

/// A parsed services database (`/etc/services` format).
#[derive(Debug, Default, Clone)]
pub struct ServicesDb {
    by_name: HashMap<(String, String), u16>,
    by_port: HashMap<(u16, String), String>,
}

impl ServicesDb {
    /// Parse `/etc/services` text: `name port/proto [aliases...] [# comment]`.
    /// The first entry for a name or a port wins, as in glibc.
    pub fn parse(text: &str) -> Self {
        let mut db = ServicesDb::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let mut it = line.split_whitespace();
            let (Some(name), Some(pp)) = (it.next(), it.next()) else {
                continue;
            };
            let Some((port, proto)) = pp.split_once('/') else {
                continue;
            };
            let Ok(port) = port.parse::<u16>() else {
                continue;
            };
            db.by_port
                .entry((port, proto.to_owned()))
                .or_insert_with(|| name.to_owned());
            for n in std::iter::once(name).chain(it) {
                db.by_name
                    .entry((n.to_owned(), proto.to_owned()))
                    .or_insert(port);
            }
        }
        db
    }

    /// The built-in table ([`BUILTIN_SERVICES`]).
    pub fn builtin() -> Self {
        Self::parse(BUILTIN_SERVICES)
    }

    /// Port of a service name for an IP protocol number.
    pub fn port(&self, name: &str, proto: u8) -> Option<u16> {
        let p = proto_name(proto)?;
        self.by_name.get(&(name.to_owned(), p.to_owned())).copied()
    }

    /// Official service name of a port for an IP protocol number.
    pub fn name(&self, port: u16, proto: u8) -> Option<&str> {
        let p = proto_name(proto)?;
        self.by_port.get(&(port, p.to_owned())).map(String::as_str)
    }
}

/// `/etc/services`, read once per process; the built-in table if unreadable.
pub fn system_services() -> &'static ServicesDb {
    static DB: OnceLock<ServicesDb> = OnceLock::new();
    DB.get_or_init(|| match std::fs::read_to_string("/etc/services") {
        Ok(text) => ServicesDb::parse(&text),
        Err(_) => ServicesDb::builtin(),
    })
}

/// Real lookups: DNS / `/etc/hosts` through the system resolver, and
/// `/etc/services`. What `rvsadm` uses.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemNames;

impl Names for SystemNames {
    fn host_to_v4(&self, name: &str) -> Option<Ipv4Addr> {
        if name.is_empty() || name.contains('\0') {
            return None;
        }
        let addrs = (name, 0u16).to_socket_addrs().ok()?;
        addrs.into_iter().find_map(|sa| match sa.ip() {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        })
    }

    fn service_to_port(&self, name: &str, proto: u8) -> Option<u16> {
        system_services().port(name, proto)
    }

    fn addr_to_host(&self, addr: IpAddr) -> Option<String> {
        dns_lookup::lookup_addr(&addr).ok()
    }

    fn port_to_service(&self, port: u16, proto: u8) -> Option<String> {
        system_services().name(port, proto).map(str::to_owned)
    }
}

/// No I/O at all: host names never resolve, addresses never reverse-resolve,
/// services come from the built-in table. For tests, fuzzing, and a daemon
/// that must not block on DNS while loading a rule file.
#[derive(Debug, Default, Clone, Copy)]
pub struct OfflineNames;

fn builtin_services() -> &'static ServicesDb {
    static DB: OnceLock<ServicesDb> = OnceLock::new();
    DB.get_or_init(ServicesDb::builtin)
}

impl Names for OfflineNames {
    fn host_to_v4(&self, _name: &str) -> Option<Ipv4Addr> {
        None
    }

    fn service_to_port(&self, name: &str, proto: u8) -> Option<u16> {
        builtin_services().port(name, proto)
    }

    fn addr_to_host(&self, _addr: IpAddr) -> Option<String> {
        None
    }

    fn port_to_service(&self, port: u16, proto: u8) -> Option<String> {
        builtin_services().name(port, proto).map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_db_first_entry_wins_and_aliases_resolve() {
        let db = ServicesDb::parse("http 80/tcp www # web\nwww-alt 80/tcp\nhttp 80/udp\n# x\n");
        assert_eq!(db.port("http", 6), Some(80));
        assert_eq!(db.port("www", 6), Some(80));
        assert_eq!(db.port("www", 17), None);
        assert_eq!(db.name(80, 6), Some("http"));
        assert_eq!(db.name(80, 132), None);
        assert_eq!(db.port("http", 0), None);
    }

    #[test]
    fn builtin_table_has_common_names() {
        let db = ServicesDb::builtin();
        assert_eq!(db.port("https", 6), Some(443));
        assert_eq!(db.name(443, 6), Some("https"));
        assert_eq!(db.port("syslog", 17), Some(514));
    }
}
