//! keepalived's notify FIFOs as a plan: which of `notify_fifo`,
//! `vrrp_notify_fifo` and `lvs_notify_fifo` (global_defs) a file names,
//! with their owners and `*_script`s. Creating, opening and writing them
//! is the daemon's.

use rvs_config::model::{GlobalDefs, NotifyFifo};

use crate::script::ScriptSpec;

/// One FIFO as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FifoSpec {
    /// Its path.
    pub path: String,
    /// `USER [GROUP]` owning the FIFO when rvsd creates it.
    pub owner: Option<String>,
    /// The script started with the path as its last argument.
    pub script: Option<ScriptSpec>,
}

/// The three FIFOs of a configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fifos {
    /// `notify_fifo`: VRRP and LVS events.
    pub all: Option<FifoSpec>,
    /// `vrrp_notify_fifo`: VRRP events.
    pub vrrp: Option<FifoSpec>,
    /// `lvs_notify_fifo`: LVS events.
    pub lvs: Option<FifoSpec>,
}

impl Fifos {
    /// The FIFOs `global_defs` names; a script without its FIFO is
    /// ignored with a located warning (keepalived ignores it too). The
    /// scripts' users are set by `rvs_check::security::apply`.
    pub fn of(g: &GlobalDefs, warnings: &mut Vec<String>) -> Fifos {
        let one = |f: &NotifyFifo, key: &str, warnings: &mut Vec<String>| {
            let Some(path) = &f.path else {
                if f.script.is_some() {
                    let at = f.loc.as_ref().map(|l| format!("{l}: ")).unwrap_or_default();
                    warnings.push(format!(
                        "{at}`{key}_script` without `{key}`: no FIFO, the script is not run"
                    ));
                }
                return None;
            };
            Some(FifoSpec {
                path: path.clone(),
                owner: f.owner.clone(),
                script: ScriptSpec::of(&f.script),
            })
        };
        Fifos {
            all: one(&g.notify_fifo, "notify_fifo", warnings),
            vrrp: one(&g.vrrp_notify_fifo, "vrrp_notify_fifo", warnings),
            lvs: one(&g.lvs_notify_fifo, "lvs_notify_fifo", warnings),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_are_the_file_s_and_a_script_alone_is_a_warning() {
        let l = rvs_config::parse_str(
            "t.conf",
            "global_defs {\n notify_fifo /run/n.fifo\n notify_fifo_script \"/bin/r x\"\n lvs_notify_fifo_script /bin/l\n}\n",
            &Default::default(),
        )
        .unwrap();
        let mut warnings = Vec::new();
        let f = Fifos::of(&l.config.global, &mut warnings);
        let all = f.all.expect("notify_fifo");
        assert_eq!(all.path, "/run/n.fifo");
        assert_eq!(all.script.map(|s| s.command), Some("/bin/r x".to_owned()));
        assert_eq!((f.vrrp, f.lvs), (None, None));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("`lvs_notify_fifo_script` without `lvs_notify_fifo`"),
            "{warnings:?}"
        );
    }
}
