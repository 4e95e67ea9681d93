//! keepalived's script security: who every script rvsd runs runs as
//! (`script_user USER [GROUP]`, else the user `keepalived_script` if it
//! exists, else rvsd's own user; a script's own `USER [GROUP]` wins), and
//! `enable_script_security`: a script that runs as root (or is set-uid/gid
//! root) must not be changeable by anyone else — neither the file nor any
//! directory on its path may be owned by a non-root user or writable by a
//! non-root group or by others (a sticky directory such as /tmp excepted
//! for the write bits). Such a script is disabled with keepalived's
//! message ("Unsafe permissions found for script '…' - disabling."); without
//! `enable_script_security` it runs, with the same message as a warning.
//!
//! [`apply`] goes over every script of a configuration (`vrrp_script`,
//! notify scripts of instances and groups, `quorum_up/down`,
//! `notify_up/down`, `MISC_CHECK`, the notify FIFOs' scripts) once, when a
//! file is loaded: it sets each script's user and removes the ones that are
//! refused, so nothing later runs them.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rvs_config::model::{CheckerKind, KeepalivedConf, Script};

use crate::probe::misc::{resolve_user, split_command};

/// keepalived's default script user.
pub const DEFAULT_USER: &str = "keepalived_script";

/// The user scripts run as when they name none: `script_user`, else
/// `keepalived_script` if it exists, else `None` (rvsd's own user).
pub fn default_user(script_user: Option<&str>) -> Option<String> {
    match script_user {
        Some(u) => Some(u.to_owned()),
        None => resolve_user(DEFAULT_USER)
            .is_ok()
            .then(|| DEFAULT_USER.to_owned()),
    }
}

/// What [`check`] found wrong with a script's file.
#[derive(Debug, PartialEq, Eq)]
pub enum Insecure {
    /// A path component is not a directory, or the file not a regular file.
    WrongType(String),
    /// A path component a non-root user could change.
    Unsafe(String),
}

/// The program a command line runs: its first word, looked up in `PATH`
/// when it has no `/`. `None` when there is none (or it is not found).
pub fn program(command: &str) -> Option<PathBuf> {
    let words = split_command(command)?;
    let first = words.first()?;
    if first.contains('/') {
        return Some(PathBuf::from(first));
    }
    let path = std::env::var("PATH")
        .unwrap_or_else(|_| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(first))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether a script run as `uid:gid` needs protecting (keepalived: run by
/// root, or set-uid/set-gid root).
fn needs_protection(file: &Path, uid: u32, gid: u32) -> bool {
    if uid == 0 || gid == 0 {
        return true;
    }
    std::fs::metadata(file).is_ok_and(|m| {
        let mode = m.mode();
        (m.uid() == 0 && mode & 0o4100 == 0o4100) || (m.gid() == 0 && mode & 0o2010 == 0o2010)
    })
}

/// keepalived's check of one path: every prefix (`/`, `/a`, `/a/b`, …)
/// and the file itself, without following the last symlink.
fn check_path(file: &Path) -> Result<(), Insecure> {
    let shown = file.display().to_string();
    let comps: Vec<_> = file.ancestors().collect();
    for (i, p) in comps.iter().rev().enumerate() {
        if p.as_os_str().is_empty() {
            continue;
        }
        let last = i + 1 == comps.len();
        let Ok(m) = std::fs::symlink_metadata(p) else {
            // Not found: the script fails when it runs (not a security
            // matter; `--check` may run on another machine).
            return Ok(());
        };
        let ft = m.file_type();
        if (!last && !ft.is_dir()) || (last && !ft.is_file() && !ft.is_symlink()) {
            return Err(Insecure::WrongType(shown));
        }
        let mode = m.mode();
        let sticky_dir = ft.is_dir() && mode & 0o1000 != 0;
        let writable = (m.gid() != 0 && mode & 0o020 != 0) || mode & 0o002 != 0;
        if m.uid() != 0 || ((ft.is_file() || (ft.is_dir() && !sticky_dir)) && writable) {
            return Err(Insecure::Unsafe(shown));
        }
    }
    Ok(())
}

/// Check the program of `command` run as `uid:gid`: its path with the
/// directories resolved and, when it differs, the file symlinks lead to.
pub fn check(command: &str, uid: u32, gid: u32) -> Result<(), Insecure> {
    let Some(file) = program(command) else {
        return Ok(());
    };
    if !needs_protection(&file, uid, gid) {
        return Ok(());
    }
    // As keepalived: the directories resolved (no `.`, `..` or symlinks on
    // the way), the file's own name kept; then the file symlinks lead to.
    let named = match (file.parent(), file.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| file.clone()),
        _ => file.clone(),
    };
    check_path(&named)?;
    if let Ok(real) = std::fs::canonicalize(&named)
        && real != named
    {
        check_path(&real)?;
    }
    Ok(())
}

/// Set the user of every script of `conf` and refuse the insecure ones
/// (see the module documentation). Warnings, located, in keepalived's
/// words.
pub fn apply(conf: &mut KeepalivedConf) -> Vec<String> {
    let g = &conf.global;
    let mut s = Pass {
        default: default_user(g.script_user.as_deref()),
        security: g.enable_script_security,
        warnings: Vec::new(),
        insecure: false,
    };
    if g.script_user.is_none() && s.default.is_none() && s.security {
        // keepalived: "Unable to set default user keepalived_script for
        // script"; rvs runs them as its own user (root) and checks them.
        s.warnings.push(format!(
            "global_defs: the default script user {DEFAULT_USER} does not exist and no `script_user` is set: scripts run as rvsd's user"
        ));
    }
    let fifo_loc = |f: &rvs_config::model::NotifyFifo| {
        f.loc.as_ref().map(ToString::to_string).unwrap_or_default()
    };
    let locs = [
        fifo_loc(&conf.global.notify_fifo),
        fifo_loc(&conf.global.vrrp_notify_fifo),
        fifo_loc(&conf.global.lvs_notify_fifo),
    ];
    let g = &mut conf.global;
    for (f, at) in [
        &mut g.notify_fifo,
        &mut g.vrrp_notify_fifo,
        &mut g.lvs_notify_fifo,
    ]
    .into_iter()
    .zip(&locs)
    {
        s.script(&mut f.script, at);
    }
    for v in &mut conf.vrrp_scripts {
        let at = v.loc.to_string();
        if let Some(cmd) = v.script.clone()
            && !s.one(&cmd, &mut v.user, &at)
        {
            v.script = None;
        }
    }
    for v in &mut conf.vrrp_instances {
        let at = v.loc.to_string();
        s.notify(&mut v.notify, &at);
    }
    for gr in &mut conf.vrrp_sync_groups {
        let at = gr.loc.to_string();
        s.notify(&mut gr.notify, &at);
    }
    for vs in &mut conf.virtual_servers {
        let at = vs.loc.to_string();
        s.script(&mut vs.quorum_up, &at);
        s.script(&mut vs.quorum_down, &at);
        for rs in &mut vs.real_servers {
            let at = rs.loc.to_string();
            s.script(&mut rs.notify_up, &at);
            s.script(&mut rs.notify_down, &at);
            rs.checkers.retain_mut(|c| {
                let at = c.loc.to_string();
                match &mut c.kind {
                    CheckerKind::Misc(m) => {
                        let path = m.path.clone();
                        let ok = s.one(&path, &mut m.user, &at);
                        if !ok {
                            s.warnings.push(format!(
                                "{at}: Disabling misc script {path} due to insecure"
                            ));
                        }
                        ok
                    }
                    _ => true,
                }
            });
        }
    }
    if s.insecure && !s.security {
        s.warnings.push(
            "SECURITY VIOLATION - scripts are being executed but script_security not enabled."
                .into(),
        );
    }
    s.warnings
}

struct Pass {
    default: Option<String>,
    security: bool,
    warnings: Vec<String>,
    /// A script was found insecure (refused or, without
    /// `enable_script_security`, run anyway).
    insecure: bool,
}

impl Pass {
    fn notify(&mut self, n: &mut rvs_config::model::Notify, at: &str) {
        for slot in [
            &mut n.master,
            &mut n.backup,
            &mut n.fault,
            &mut n.stop,
            &mut n.any,
        ] {
            self.script(slot, at);
        }
    }

    fn script(&mut self, slot: &mut Option<Script>, at: &str) {
        if let Some(sc) = slot {
            let cmd = sc.command.clone();
            if !self.one(&cmd, &mut sc.user, at) {
                *slot = None;
            }
        }
    }

    /// Set the user of one script; whether it may run.
    fn one(&mut self, command: &str, user: &mut Option<String>, at: &str) -> bool {
        if user.is_none() {
            user.clone_from(&self.default);
        }
        let (uid, gid) = match user.as_deref().map(resolve_user) {
            None => (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            ),
            Some(Ok(ids)) => ids,
            Some(Err(e)) => {
                self.warnings.push(format!(
                    "{at}: Invalid user/group for script {command} - ignoring ({e})"
                ));
                return false;
            }
        };
        match check(command, uid, gid) {
            Ok(()) => true,
            Err(Insecure::WrongType(p)) => {
                self.warnings
                    .push(format!("{at}: Wrong file type found in script path '{p}'."));
                !self.security
            }
            Err(Insecure::Unsafe(p)) => {
                self.insecure = true;
                let disabling = if self.security { " - disabling" } else { "" };
                self.warnings.push(format!(
                    "{at}: Unsafe permissions found for script '{p}'{disabling}."
                ));
                !self.security
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_programs_are_secure_and_world_writable_files_are_not() {
        assert_eq!(check("/bin/sh -c true", 0, 0), Ok(()));
        assert_eq!(check("true", 0, 0), Ok(()));
        let dir = std::env::temp_dir().join(format!("rvs-sec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s.sh");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o757)).unwrap();
        let owner_is_root = std::fs::metadata(&f).unwrap().uid() == 0;
        // World-writable: unsafe whoever owns it.
        assert!(matches!(
            check(&f.display().to_string(), 0, 0),
            Err(Insecure::Unsafe(_))
        ));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        if owner_is_root {
            assert_eq!(check(&f.display().to_string(), 0, 0), Ok(()));
        }
        // Not run as root: nothing to protect.
        assert_eq!(check(&f.display().to_string(), 4242, 4242), Ok(()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
