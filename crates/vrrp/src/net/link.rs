//! keepalived's `use_vmac`: a macvlan interface (`vrrp.VRID` by default)
//! on the instance's interface, carrying the virtual MAC
//! 00-00-5E-00-01-VRID (RFC 5798 §7.3), so the virtual addresses move
//! between routers with their MAC and neighbours' caches stay right
//! without waiting for gratuitous ARP. Created and deleted through
//! rvs-sys's tokio netlink transport.

use rvs_sys::netlink::AsyncNetlink;

use super::addr::NetError;
use super::iface;

/// Create macvlan `name` (private mode, up) on `base` with `mac`. One that
/// already exists is taken as is (a previous run's, or the operator's).
pub async fn add_vmac(base: &str, name: &str, mac: [u8; 6]) -> Result<(), NetError> {
    let link = iface::ifindex(base).map_err(|_| NetError::InterfaceNotFound {
        ifname: base.to_owned(),
    })?;
    let mut nl = AsyncNetlink::open().map_err(|e| NetError::link(name, e))?;
    nl.add_macvlan(link, name, mac)
        .await
        .map_err(|e| NetError::link(name, e))
}

/// Delete link `name` (gone already is fine).
pub async fn del_link(name: &str) -> Result<(), NetError> {
    let mut nl = AsyncNetlink::open().map_err(|e| NetError::link(name, e))?;
    nl.del_link(name).await.map_err(|e| NetError::link(name, e))
}
