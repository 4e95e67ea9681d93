//! Test helpers shared by the modules' unit tests.

use std::net::{IpAddr, Ipv4Addr};

use rvs_core::model::{Protocol, ServiceKey};

use crate::dataplane::{DataPlane, DataPlaneError};
use crate::protocol::Command;

/// The TCP virtual service `addr:port`.
pub(crate) fn tcp_key(addr: Ipv4Addr, port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: IpAddr::V4(addr),
        port,
    }
}

/// A data plane that cannot carry a service on port 99 (added or edited)
/// nor a real server 10.0.0.99.
pub(crate) struct Picky;
impl DataPlane for Picky {
    fn name(&self) -> &'static str {
        "picky"
    }
    fn apply(&mut self, _: &Command) -> Result<(), DataPlaneError> {
        Ok(())
    }
    fn admit(&self, c: &Command) -> Result<(), String> {
        match c {
            Command::AddService { key, .. } | Command::EditService { key, .. }
                if key.port() == 99 =>
            {
                Err("not 99".into())
            }
            Command::AddDest { dest, .. } | Command::EditDest { dest, .. }
                if dest.addr == IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99)) =>
            {
                Err("not .99".into())
            }
            _ => Ok(()),
        }
    }
}
