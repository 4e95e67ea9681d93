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

/// IPv4 and UDP headers: what a sync message's length leaves out.
pub const HEADERS_V4: u16 = 20 + 8;
/// IPv6 and UDP headers.
pub const HEADERS_V6: u16 = 40 + 8;

impl DaemonConfig {
    /// The largest sync message the daemon sends or reads, as the kernel's
    /// `start_sync_thread` settles it, so `-L --daemon` lists what the
    /// kernel would: a value given is held within [1, 65535 − headers] for
    /// a master and within [1024, 65535 − headers] for a backup (whose
    /// receive buffer must hold any message a master may send); none given
    /// is 1500 − headers for a master and the interface's MTU (`dev_mtu`,
    /// held within [1500, 65535]; 1500 when unknown) − headers for a
    /// backup. The headers are IPv6's when the group is IPv6.
    pub fn effective_maxlen(&self, dev_mtu: Option<u32>) -> u16 {
        let hlen = match self.mcast_group {
            Some(IpAddr::V6(_)) => HEADERS_V6,
            _ => HEADERS_V4,
        };
        let backup = self.state == SyncState::Backup;
        match self.sync_maxlen {
            Some(v) => v.clamp(if backup { 1024 } else { 1 }, u16::MAX - hlen),
            None => {
                let mtu = if backup {
                    // Held within [1500, 65535], so it fits a u16.
                    u16::try_from(dev_mtu.unwrap_or(1500).clamp(1500, 65535)).unwrap_or(u16::MAX)
                } else {
                    1500
                };
                mtu - hlen
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(state: SyncState, maxlen: Option<u16>, group: Option<&str>) -> DaemonConfig {
        DaemonConfig {
            state,
            mcast_ifn: "eth0".into(),
            syncid: 0,
            sync_maxlen: maxlen,
            mcast_group: group.map(|g| g.parse().unwrap()),
            mcast_port: None,
            mcast_ttl: None,
        }
    }

    #[test]
    fn a_backup_raises_a_small_maxlen_to_1024_as_the_kernel_does() {
        use SyncState::{Backup, Master};
        // `--start-daemon backup --sync-maxlen 10`: the kernel lists 1024.
        assert_eq!(cfg(Backup, Some(10), None).effective_maxlen(None), 1024);
        assert_eq!(cfg(Backup, Some(1023), None).effective_maxlen(None), 1024);
        assert_eq!(cfg(Backup, Some(1400), None).effective_maxlen(None), 1400);
        // A master keeps it.
        assert_eq!(cfg(Master, Some(10), None).effective_maxlen(None), 10);
        assert_eq!(cfg(Master, Some(1), None).effective_maxlen(None), 1);
        // The top is 65535 less the headers of the group's family.
        assert_eq!(cfg(Master, Some(65507), None).effective_maxlen(None), 65507);
        assert_eq!(
            cfg(Master, Some(65507), Some("ff02::81")).effective_maxlen(None),
            65487
        );
    }

    #[test]
    fn the_default_maxlen_is_1500_for_a_master_and_the_mtu_for_a_backup() {
        use SyncState::{Backup, Master};
        assert_eq!(cfg(Master, None, None).effective_maxlen(Some(9000)), 1472);
        assert_eq!(
            cfg(Master, None, Some("ff02::81")).effective_maxlen(None),
            1452
        );
        assert_eq!(cfg(Backup, None, None).effective_maxlen(None), 1472);
        assert_eq!(cfg(Backup, None, None).effective_maxlen(Some(1280)), 1472);
        assert_eq!(cfg(Backup, None, None).effective_maxlen(Some(9000)), 8972);
        assert_eq!(cfg(Backup, None, None).effective_maxlen(Some(70000)), 65507);
    }
}
