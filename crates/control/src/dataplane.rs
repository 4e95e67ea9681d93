//! The one trait every data plane implements.
//!
//! The control plane owns the desired state (an [`rvs_core::ipvs::Ipvs`]
//! holding services, real servers and policy); a data plane receives every
//! change that was accepted, in order, and carries traffic accordingly. It
//! owns no policy: a change the control plane rejected never reaches it.
//! `--dataplane none` is [`NoDataPlane`]: the control plane alone.

use rvs_core::ipvs::Ipvs;
use rvs_core::time::Instant;

use crate::protocol::Command;

/// Why a data plane could not apply a change.
#[derive(Debug, thiserror::Error)]
#[error("data plane {plane}: {message}")]
pub struct DataPlaneError {
    /// Which data plane.
    pub plane: &'static str,
    /// What went wrong.
    pub message: String,
}

/// A packet or connection forwarding engine driven by the control plane.
pub trait DataPlane: Send {
    /// Name as given to `--dataplane`.
    fn name(&self) -> &'static str;

    /// Apply one accepted change. Called in order, after the control plane
    /// applied it to its own model. An error is logged and reported; the
    /// model keeps the change (the data plane is expected to converge, e.g.
    /// retry binding a listener).
    fn apply(&mut self, command: &Command) -> Result<(), DataPlaneError>;

    /// Report back: called periodically (every second by rvsd) with the
    /// control plane's director so the data plane can record what it carried
    /// since the last call — connections it created or closed and their
    /// counters (a packet data plane reads its maps here; a data plane that
    /// drives the director itself has nothing to add).
    fn report(&mut self, now: Instant, ipvs: &mut Ipvs) {
        let _ = (now, ipvs);
    }
}

/// `--dataplane none`: the control plane alone, for scripting and tests.
#[derive(Debug, Default)]
pub struct NoDataPlane;

impl DataPlane for NoDataPlane {
    fn name(&self) -> &'static str {
        "none"
    }

    fn apply(&mut self, _command: &Command) -> Result<(), DataPlaneError> {
        Ok(())
    }
}
