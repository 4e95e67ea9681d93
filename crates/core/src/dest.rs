//! A real server's runtime state: the configuration plus the connection
//! counters and flags that schedulers read.

use crate::model::DestConfig;
use crate::stats::Counters;

/// Stable identity of a real server inside an [`crate::ipvs::Ipvs`]; survives
/// reordering of the service's list and deletion while connections still use it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DestId(pub u32);

/// Runtime state of one real server.
#[derive(Clone, Debug)]
pub struct Dest {
    /// Stable identity.
    pub id: DestId,
    /// Configuration as the operator gave it.
    pub config: DestConfig,
    /// Connections in an active state (TCP ESTABLISHED, SYN_SENT, ...).
    pub active: u32,
    /// Connections in other states (and every UDP connection).
    pub inactive: u32,
    /// Persistence templates pointing at this server.
    pub persist: u32,
    /// The latest non-zero weight (Maglev uses it so that quiescing does not
    /// reshuffle the table).
    pub last_weight: u32,
    /// `IP_VS_DEST_F_AVAILABLE`: in a service's list (cleared on delete).
    pub available: bool,
    /// `IP_VS_DEST_F_OVERLOAD`: connection count crossed the upper threshold.
    pub overloaded: bool,
    /// Traffic counters.
    pub stats: Counters,
}

impl Dest {
    /// A fresh, available real server with zero counters.
    pub fn new(id: DestId, config: DestConfig) -> Self {
        Dest {
            id,
            config,
            active: 0,
            inactive: 0,
            persist: 0,
            last_weight: config.weight,
            available: true,
            overloaded: false,
            stats: Counters::default(),
        }
    }

    /// Current weight.
    #[inline]
    pub fn weight(&self) -> u32 {
        self.config.weight
    }

    /// `ip_vs_dest_conn_overhead`: active × 256 + inactive.
    #[inline]
    pub fn overhead(&self) -> u64 {
        (u64::from(self.active) << 8) + u64::from(self.inactive)
    }

    /// Total connections counted against the thresholds (templates excluded).
    #[inline]
    pub fn total_conns(&self) -> u32 {
        self.active.saturating_add(self.inactive)
    }

    /// May a scheduler hand this server a new connection? Weight > 0, not
    /// overloaded, still in the service.
    #[inline]
    pub fn is_eligible(&self) -> bool {
        self.config.weight > 0 && !self.overloaded && self.available
    }

    /// Apply the kernel's overload rule after a connection was bound
    /// (`ip_vs_bind_dest`).
    pub(crate) fn after_bind(&mut self) {
        let u = self.config.u_threshold;
        if u != 0 && self.total_conns() >= u {
            self.overloaded = true;
        }
    }

    /// Apply the kernel's overload-clearing rule after a connection was
    /// unbound (`ip_vs_unbind_dest`).
    pub(crate) fn after_unbind(&mut self) {
        let (u, l) = (self.config.u_threshold, self.config.l_threshold);
        let total = u64::from(self.total_conns());
        if l != 0 {
            if total < u64::from(l) {
                self.overloaded = false;
            }
        } else if u != 0 {
            if total * 4 < u64::from(u) * 3 {
                self.overloaded = false;
            }
        } else {
            self.overloaded = false;
        }
    }

    /// Apply an edit (`-e`): thresholds and weight rules of `__ip_vs_update_dest`.
    pub(crate) fn apply_edit(&mut self, config: DestConfig) {
        let old_u = self.config.u_threshold;
        if config.u_threshold == 0 || config.u_threshold > old_u {
            self.overloaded = false;
        }
        if config.weight != 0 {
            self.last_weight = config.weight;
        }
        self.config = config;
    }
}
