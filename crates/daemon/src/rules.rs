//! ipvsadm-save rules files (`rvsd --rules FILE`): the lines `ipvsadm -S`
//! prints, one ipvsadm command per line, read like `ipvsadm -R` reads them.

use std::path::Path;

use rvs_control::protocol::Command;
use rvs_control::state::{apply, current_defs};
use rvs_core::ipvs::{Ipvs, IpvsConfig};
use rvs_ipvsadm::control::{error_text, to_command};
use rvs_ipvsadm::parse_restore_line;

use crate::source::Loaded;

/// Read a rules file into service definitions. Errors name file:line:column
/// (the column of the line's first token).
pub fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut ipvs = Ipvs::new(IpvsConfig {
        conn_capacity: 16,
        ..IpvsConfig::default()
    });
    let mut timeouts = None;
    for (i, line) in text.lines().enumerate() {
        let at = |msg: &str| {
            let col = line.len() - line.trim_start().len() + 1;
            format!("{}:{}:{}: {}", path.display(), i + 1, col, msg)
        };
        let inv = match parse_restore_line(line) {
            Ok(Some(inv)) => inv,
            Ok(None) => continue,
            Err(e) => return Err(at(&e.message)),
        };
        match to_command(&inv.command) {
            Ok(Some(Command::SetTimeouts { tcp, tcpfin, udp })) => {
                timeouts = Some((tcp, tcpfin, udp))
            }
            Ok(Some(cmd)) => apply(&mut ipvs, &cmd).map_err(|e| at(&error_text(&cmd, &e)))?,
            Ok(None) => {
                return Err(at(
                    "only table commands (-A -E -D -C -a -e -d -Z --set) belong in a rules file",
                ));
            }
            Err(e) => return Err(at(&e.to_string())),
        }
    }
    let defs = current_defs(&ipvs);
    let dests: usize = defs.iter().map(|d| d.dests.len()).sum();
    Ok(Loaded {
        extra: format!("{} ipvsadm rules applied", defs.len() + dests),
        defs,
        timeouts,
        warnings: Vec::new(),
        health: None,
        vrrp: Vec::new(),
        fifos: Default::default(),
        mailer: None,
        sync: None,
        statics: Default::default(),
    })
}
