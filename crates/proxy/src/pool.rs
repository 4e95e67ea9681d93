//! A service's FULLNAT local address pool as the proxy uses it: the source
//! addresses its connections to real servers are bound to
//! (`IP_BIND_ADDRESS_NO_PORT`, so the kernel picks a port unique for the
//! 4-tuple at connect), taken in turn so the connections spread over the
//! pool. Each address gives a port range toward each real server, so a pool
//! of N addresses lets one real server hold N times the 64k connections one
//! address allows.

use std::net::IpAddr;

use rvs_core::model::LocalAddrRange;

/// Most pool addresses one connection tries before it is refused: when the
/// next address in turn has no port left toward the real server, the
/// others (taken in the same turn) are nearly spent as well.
pub(crate) const MAX_TRIES: u128 = 16;

/// The addresses of a pool of one family.
#[derive(Clone, Debug, Default)]
pub(crate) struct LocalPool {
    ranges: Vec<LocalAddrRange>,
    total: u128,
}

impl LocalPool {
    /// The ranges of `laddrs` whose family is that of `dest` (a real
    /// server of the other family cannot be reached from them).
    pub(crate) fn for_dest(laddrs: &[LocalAddrRange], dest: IpAddr) -> Self {
        let ranges: Vec<LocalAddrRange> = laddrs
            .iter()
            .filter(|r| r.first.is_ipv4() == dest.is_ipv4())
            .copied()
            .collect();
        let total = ranges.iter().map(LocalAddrRange::len).sum();
        LocalPool { ranges, total }
    }

    /// No address (the service has no pool of this family).
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// How many addresses the pool holds.
    pub(crate) fn len(&self) -> u128 {
        self.total
    }

    /// Address number `i` (modulo the pool's size), ranges in order.
    pub(crate) fn nth(&self, i: u128) -> Option<IpAddr> {
        if self.total == 0 {
            return None;
        }
        let mut i = i % self.total;
        for r in &self.ranges {
            let n = r.len();
            if i < n {
                return Some(match r.first {
                    IpAddr::V4(a) => {
                        IpAddr::V4((u32::from(a).wrapping_add(u32::try_from(i).ok()?)).into())
                    }
                    IpAddr::V6(a) => IpAddr::V6((u128::from(a).wrapping_add(i)).into()),
                });
            }
            i -= n;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> LocalAddrRange {
        LocalAddrRange::parse(s).unwrap()
    }

    #[test]
    fn walks_every_range_in_order_and_wraps() {
        let laddrs = [r("10.0.0.1-10.0.0.3"), r("fd00::1"), r("10.0.1.7")];
        let p = LocalPool::for_dest(&laddrs, "192.0.2.1".parse().unwrap());
        assert_eq!(p.len(), 4);
        let got: Vec<String> = (0..5).map(|i| p.nth(i).unwrap().to_string()).collect();
        assert_eq!(
            got,
            ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.7", "10.0.0.1"]
        );
        let p6 = LocalPool::for_dest(&laddrs, "2001:db8::1".parse().unwrap());
        assert_eq!(p6.len(), 1);
        assert_eq!(p6.nth(7).unwrap().to_string(), "fd00::1");
        let none = LocalPool::for_dest(&[], "192.0.2.1".parse().unwrap());
        assert!(none.is_empty());
        assert_eq!(none.nth(0), None);
    }
}
