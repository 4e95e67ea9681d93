//! The bridge between ipvsadm's command line and rvs's control protocol
//! (`rvs-control`): which ipvsadm commands change the table, and how the
//! director's errors read in ipvsadm's words (libipvs `ipvs_strerror`, which
//! words the same errno differently per operation). It lives with the CLI so
//! that the control plane does not depend on the command line.

use rvs_control::protocol::Command;
use rvs_core::ipvs::CtlError;
use rvs_core::model::PersistenceEngine;

use crate::{Command as Ipvsadm, ServiceSpec};

/// The exit status ipvsadm returns when the kernel refuses an operation
/// (`process_options` returns -1).
pub const KERNEL_ERROR_EXIT: i32 = 255;

/// The table change an ipvsadm command asks for: `Ok(None)` for commands
/// that change nothing (list, save, help, ...).
pub fn to_command(cmd: &Ipvsadm) -> Result<Option<Command>, CtlError> {
    Ok(Some(match cmd {
        Ipvsadm::AddService(s) => Command::AddService {
            key: s.key,
            config: service_config(s)?,
        },
        Ipvsadm::EditService(s) => Command::EditService {
            key: s.key,
            config: service_config(s)?,
        },
        Ipvsadm::DeleteService(key) => Command::DelService { key: *key },
        Ipvsadm::Flush => Command::Clear,
        Ipvsadm::AddServer(d) => Command::AddDest {
            service: d.service,
            dest: d.dest,
        },
        Ipvsadm::EditServer(d) => Command::EditDest {
            service: d.service,
            dest: d.dest,
        },
        Ipvsadm::DeleteServer(d) => Command::DelDest {
            service: d.service,
            addr: d.dest.addr,
            port: d.dest.port,
        },
        Ipvsadm::SetTimeouts(t) => Command::SetTimeouts {
            tcp: t.tcp,
            tcpfin: t.tcp_fin,
            udp: t.udp,
        },
        Ipvsadm::Zero(key) => Command::Zero { service: *key },
        Ipvsadm::AddLaddr(l) => Command::AddLaddr {
            service: l.service,
            laddr: l.laddr,
        },
        Ipvsadm::DelLaddr(l) => Command::DelLaddr {
            service: l.service,
            laddr: l.laddr,
        },
        _ => return Ok(None),
    }))
}

/// An unknown `-s` or `--pe` name is the kernel's ENOENT for the service
/// operation.
fn service_config(s: &ServiceSpec) -> Result<rvs_core::model::ServiceConfig, CtlError> {
    if s.sched_name.is_some() {
        return Err(CtlError::SchedulerNotFound);
    }
    let mut config = s.config.clone();
    if let Some(name) = &s.pe_name {
        match name.as_str() {
            "sip" => config.pe = Some(PersistenceEngine::Sip),
            _ => return Err(CtlError::SchedulerNotFound),
        }
    }
    Ok(config)
}

/// EINVAL's text.
const EINVAL_TEXT: &str =
    "Invalid operation.  Possibly wrong module version, address not unicast, ...";

/// The message ipvsadm prints for `error` from `cmd`.
pub fn error_text(cmd: &Command, error: &CtlError) -> String {
    let dest_op = matches!(
        cmd,
        Command::AddDest { .. } | Command::EditDest { .. } | Command::DelDest { .. }
    );
    match error {
        CtlError::ServiceExists => "Service already exists".into(),
        CtlError::NoService if dest_op => "Service not defined".into(),
        CtlError::NoService => "No such service".into(),
        CtlError::DestExists => "Destination already exists".into(),
        CtlError::NoDest => "No such destination".into(),
        CtlError::SchedulerNotFound => "Scheduler or persistence engine not found".into(),
        // The kernel answers ERANGE; libipvs has no entry, so strerror.
        CtlError::Range(_) => "Numerical result out of range".into(),
        CtlError::Invalid(_) => EINVAL_TEXT.into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_args;

    fn cmd(args: &str) -> Option<Command> {
        let inv = parse_args(args.split_whitespace().map(String::from)).unwrap();
        to_command(&inv.command).unwrap()
    }

    #[test]
    fn table_changes_map_and_others_do_not() {
        assert!(matches!(
            cmd("-A -t 10.0.0.1:80 -s rr"),
            Some(Command::AddService { .. })
        ));
        assert!(matches!(
            cmd("-a -t 10.0.0.1:80 -r 10.0.0.2 -m"),
            Some(Command::AddDest { .. })
        ));
        assert!(matches!(
            cmd("-d -t 10.0.0.1:80 -r 10.0.0.2"),
            Some(Command::DelDest { port: 80, .. })
        ));
        assert!(matches!(
            cmd("--set 1 2 3"),
            Some(Command::SetTimeouts {
                tcp: 1,
                tcpfin: 2,
                udp: 3
            })
        ));
        assert_eq!(cmd("-C"), Some(Command::Clear));
        assert_eq!(cmd("-Ln"), None);
        assert_eq!(cmd("-S"), None);
    }

    #[test]
    fn unknown_persistence_engine_is_enoent() {
        let inv = parse_args(
            "-A -u 10.0.0.1:5060 -p --pe nope"
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        assert_eq!(to_command(&inv.command), Err(CtlError::SchedulerNotFound));
        let inv = parse_args(
            "-A -u 10.0.0.1:5060 -p --pe sip"
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        let Ok(Some(Command::AddService { config, .. })) = to_command(&inv.command) else {
            panic!()
        };
        assert_eq!(config.pe, Some(PersistenceEngine::Sip));
    }

    #[test]
    fn unknown_scheduler_is_enoent() {
        let inv = parse_args("-A -t 10.0.0.1:80 -s nosuch".split(' ').map(String::from)).unwrap();
        let e = to_command(&inv.command).unwrap_err();
        assert_eq!(e, CtlError::SchedulerNotFound);
        assert_eq!(
            error_text(&Command::Clear, &e),
            "Scheduler or persistence engine not found"
        );
        let inv = parse_args("-E -t 10.0.0.1:80 -s mh".split(' ').map(String::from)).unwrap();
        let Ok(Some(Command::EditService { config, .. })) = to_command(&inv.command) else {
            panic!()
        };
        assert_eq!(config.scheduler, rvs_core::sched::Scheduler::Mh);
    }

    #[test]
    fn texts_depend_on_the_operation() {
        let key = rvs_core::model::ServiceKey::Fwmark {
            mark: 1,
            af: rvs_core::model::AddrFamily::Inet,
        };
        let del = Command::DelService { key };
        let ddel = Command::DelDest {
            service: key,
            addr: "1.2.3.4".parse().unwrap(),
            port: 0,
        };
        assert_eq!(error_text(&del, &CtlError::NoService), "No such service");
        assert_eq!(
            error_text(&ddel, &CtlError::NoService),
            "Service not defined"
        );
        assert_eq!(error_text(&ddel, &CtlError::NoDest), "No such destination");
    }
}
