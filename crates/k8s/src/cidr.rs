//! A CIDR block (`10.0.0.0/8`, `2001:db8::/32`), as `loadBalancerSourceRanges`
//! write them.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rvs_core::model::AddrFamily;

/// An address prefix: the network address (host bits cleared) and its length.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    /// The network address, host bits zero.
    pub addr: IpAddr,
    /// Prefix length: 0..=32 for IPv4, 0..=128 for IPv6.
    pub prefix: u8,
}

/// Why a CIDR string is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a CIDR block (ADDRESS/PREFIX-LENGTH)")]
pub struct CidrError(pub String);

impl Cidr {
    /// Parse `ADDR/LEN` (surrounding spaces allowed, as kube-proxy trims
    /// them). A bare address is a host prefix (/32 or /128). Host bits set
    /// in the address are cleared, as Go's `net.ParseCIDR` does.
    pub fn parse(s: &str) -> Result<Cidr, CidrError> {
        let bad = || CidrError(s.to_owned());
        let t = s.trim();
        let (a, len) = match t.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (t, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix = match len {
            None => max,
            Some(l) => {
                if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let p: u8 = l.parse().map_err(|_| bad())?;
                if p > max {
                    return Err(bad());
                }
                p
            }
        };
        Ok(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Address family of the block.
    pub const fn af(&self) -> AddrFamily {
        AddrFamily::of(&self.addr)
    }

    /// Whether `ip` lies in the block (never for the other family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        AddrFamily::of(&ip) == self.af() && mask(ip, self.prefix) == self.addr
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix.min(32)))
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix.min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_masks() {
        let c = Cidr::parse(" 10.1.2.3/8 ").unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains("10.200.0.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::a00:1".parse().unwrap()));
        assert_eq!(Cidr::parse("1.2.3.4").unwrap().to_string(), "1.2.3.4/32");
        assert_eq!(
            Cidr::parse("2001:db8::1/32").unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().prefix, 0);
        for bad in [
            "",
            "x/8",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "1.2.3.4/8/9",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
