//! Services whose map writes failed ([`Retry`]), brought to the director's
//! model by the next report that converges — those services only, not
//! every one installed: at 10,000 services, one service whose writes keep
//! failing (for another reason than room: [`super::room::RoomWait`] holds
//! those) would otherwise have every report compare all 10,000 with the
//! model until its write succeeds.

use std::collections::HashSet;

use rvs_core::model::ServiceKey;

/// What the next converging report compares with the model (sans-IO: the
/// plane records failures, takes the set and diffs it).
#[derive(Debug, Default)]
pub(super) struct Retry {
    /// A failed write no single service owns (a `Clear`, the timeouts,
    /// the local addresses every FULLNAT service shares): every service.
    all: bool,
    /// Services with a failed write.
    services: HashSet<ServiceKey>,
}

/// What [`Retry::take`] hands the report.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Due {
    /// Nothing failed.
    None,
    /// Compare every service.
    All,
    /// Compare these services.
    Some(HashSet<ServiceKey>),
}

impl Retry {
    /// A write about `key` failed.
    pub(super) fn service(&mut self, key: ServiceKey) {
        if !self.all {
            self.services.insert(key);
        }
    }

    /// A write no single service owns failed.
    pub(super) fn all(&mut self) {
        self.all = true;
        self.services.clear();
    }

    /// Whether a report has anything to compare.
    pub(super) fn any(&self) -> bool {
        self.all || !self.services.is_empty()
    }

    /// What to compare now; the set starts empty again (a replayed
    /// command that fails again records its service again).
    pub(super) fn take(&mut self) -> Due {
        let me = std::mem::take(self);
        if me.all {
            Due::All
        } else if me.services.is_empty() {
            Due::None
        } else {
            Due::Some(me.services)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Due, Retry};
    use rvs_core::model::{Protocol, ServiceKey};
    use std::net::{IpAddr, Ipv4Addr};

    fn key(port: u16) -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            port,
        }
    }

    #[test]
    fn failed_services_are_taken_once() {
        let mut r = Retry::default();
        assert!(!r.any());
        assert_eq!(r.take(), Due::None);
        r.service(key(80));
        r.service(key(81));
        r.service(key(80));
        assert!(r.any());
        assert_eq!(r.take(), Due::Some([key(80), key(81)].into()));
        assert!(!r.any(), "taken");
        assert_eq!(r.take(), Due::None);
    }

    #[test]
    fn a_failure_of_no_single_service_takes_them_all() {
        let mut r = Retry::default();
        r.service(key(80));
        r.all();
        r.service(key(81));
        assert_eq!(r.take(), Due::All);
        assert_eq!(r.take(), Due::None);
    }
}
