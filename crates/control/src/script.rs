//! What keepalived.conf asks to run, as plain data shared by the health
//! checker (`notify_up`, `quorum_up`, …), VRRP (`notify_master`, …) and
//! the notify FIFOs (`notify_fifo_script`): the planners here decide
//! which scripts run, the daemon and `rvs-check` start them.

use rvs_config::model::Script;
use serde::Serialize;

/// The words marking a warning about something the file asks for that rvs
/// does not carry out (as the keyword audit's "`KEYWORD` is not applied by
/// rvs"): `rvsd --strict` refuses a file with such a warning.
pub const NOT_APPLIED: &str = "is not applied by rvs";

/// A script to run (notify_up/down, quorum_up/down, notify_master, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScriptSpec {
    /// The command line as written.
    pub command: String,
    /// `user [group]` as written, if any.
    pub user: Option<String>,
}

impl ScriptSpec {
    /// The script of a keyword, if it is set.
    pub fn of(s: &Option<Script>) -> Option<ScriptSpec> {
        s.as_ref().map(|s| ScriptSpec {
            command: s.command.clone(),
            user: s.user.clone(),
        })
    }
}
