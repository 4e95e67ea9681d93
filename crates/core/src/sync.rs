//! The configuration of a connection-sync daemon (the kernel's
//! `ip_vs_sync` master or backup thread): what `ipvsadm --start-daemon`
//! and keepalived's `lvs_sync_daemon` ask for, and what the control
//! protocol carries from `rvsadm` to `rvsd`. Plain data; the daemon itself
//! (sockets, timers) lives in `rvsd`.

use std::net::IpAddr;

/// Role of a connection-sync daemon.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SyncState {
    /// Sends connection updates.
    Master,
    /// Receives them.
    Backup,
}

impl SyncState {
    /// `master` / `backup`.
    pub const fn name(self) -> &'static str {
        match self {
            SyncState::Master => "master",
            SyncState::Backup => "backup",
        }
    }
}

/// `--start-daemon` / `--stop-daemon` and the daemon options (also what
/// rvsadm sends rvsd, and what keepalived's `lvs_sync_daemon` becomes).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DaemonConfig {
    /// Master or backup.
    pub state: SyncState,
    /// `--mcast-interface` (default `eth0` for start; empty for stop).
    pub mcast_ifn: String,
    /// `--syncid` 0..=255 (default 0).
    pub syncid: u8,
    /// `--sync-maxlen` 1..=65507.
    pub sync_maxlen: Option<u16>,
    /// `--mcast-group` (a multicast address).
    pub mcast_group: Option<IpAddr>,
    /// `--mcast-port` 1..=65535.
    pub mcast_port: Option<u16>,
    /// `--mcast-ttl` 1..=255.
    pub mcast_ttl: Option<u8>,
}
