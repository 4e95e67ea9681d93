//! The control plane's one entry point for desired state.
//!
//! Desired state comes from several **sources**: `rvsadm` commands (as
//! `ipvsadm` drives the kernel), a configuration file (keepalived.conf or
//! ipvsadm-save rules, loaded at start and at every reload), the
//! Kubernetes watcher (`rvsd --kubernetes`) and the HTTP API. Each submits
//! its changes as a [`Change`] through [`Controller::submit`], the only way
//! the service table changes, and every service has one [`Owner`]: the
//! source that created it. Another source's change to it is refused with a
//! [`CtlError::Owned`] that names the service and its owner, so a watcher
//! reconciling Kubernetes never fights a script, and a script cannot
//! silently undo what a cluster asked for.
//!
//! One exception keeps keepalived's operators at home: `rvsadm` may change
//! the services of the configuration file, as `ipvsadm` changes
//! keepalived's services in the kernel (draining a real server by hand with
//! `-e ... -w 0`); the file's next reload puts its own state back. For the
//! same reason a reload of the file takes over a service that `rvsadm`
//! created with the same key. `rvsadm` and the HTTP API are both an
//! operator's hands and may change each other's services; the API may not
//! change the file's or Kubernetes'.
//!
//! A source that states its whole table ([`Change::Replace`]) changes only
//! its own services: those of other owners are left as they are, and its
//! services missing from the new table are removed. With `partial`, a
//! service the director or a data plane refuses is left out (or kept as
//! it runs, if it runs) and reported in [`Submitted::refused`] while the
//! rest applies: one bad Kubernetes object must not hold up the cluster's
//! other services.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use rvs_core::ipvs::CtlError;
use rvs_core::model::ServiceKey;
use serde::{Deserialize, Serialize};

use crate::protocol::Command;
use crate::state::{Controller, DiffSummary, ExecError, ServiceDef, current_defs};

/// The source of desired state a service belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Owner {
    /// `rvsadm` commands (the default for a table restored at start).
    Rvsadm,
    /// The configuration file (`rvsd -f keepalived.conf` or `--rules`),
    /// and the health checkers it configures.
    File,
    /// The Kubernetes watcher (`rvsd --kubernetes`).
    Kubernetes,
    /// The HTTP API.
    Api,
}

impl Owner {
    /// The name used in messages and listings.
    pub const fn name(self) -> &'static str {
        match self {
            Owner::Rvsadm => "rvsadm",
            Owner::File => "the configuration file",
            Owner::Kubernetes => "kubernetes",
            Owner::Api => "the HTTP API",
        }
    }

    /// Whether commands from `self` may change a service `holder` owns.
    pub const fn may_change(self, holder: Owner) -> bool {
        matches!(
            (self, holder),
            (Owner::Rvsadm, Owner::Rvsadm | Owner::File | Owner::Api)
                | (Owner::File, Owner::File)
                | (Owner::Kubernetes, Owner::Kubernetes)
                | (Owner::Api, Owner::Api | Owner::Rvsadm)
        )
    }

    /// Whether a whole table from `self` may claim a service `holder` owns.
    pub const fn may_take(self, holder: Owner) -> bool {
        matches!(
            (self, holder),
            (Owner::File, Owner::Rvsadm | Owner::File)
                | (Owner::Rvsadm, Owner::Rvsadm)
                | (Owner::Kubernetes, Owner::Kubernetes)
                | (Owner::Api, Owner::Api)
        )
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A change of desired state, as a source states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Commands in order (`rvsadm`, `rvsadm -R` with `atomic`, a health
    /// check's weight change): all apply or none.
    Commands {
        /// The commands.
        commands: Vec<Command>,
        /// Try them all on a scratch copy first even when there is one.
        atomic: bool,
    },
    /// The source's whole table (a reload, a Kubernetes resync): only the
    /// difference applies; the source's services missing from it go.
    Replace {
        /// The services, in the source's order (errors point into it).
        services: Vec<ServiceDef>,
        /// Leave out services that are refused instead of refusing all.
        partial: bool,
    },
}

/// What [`Controller::submit`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Submitted {
    /// The difference a [`Change::Replace`] applied (empty for commands).
    pub summary: DiffSummary,
    /// Services of a partial [`Change::Replace`] that were refused
    /// (`index` into its `services`); each kept as it runs if it ran.
    pub refused: Vec<ExecError>,
}

/// `TCP 10.0.0.1:80`, `FWM 7 IPv6`: a service as messages name it.
pub fn service_name(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Addr {
            protocol,
            addr: IpAddr::V6(a),
            port,
        } => format!("{protocol} [{a}]:{port}"),
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => format!("{protocol} {addr}:{port}"),
        ServiceKey::Fwmark { mark, af } => match af {
            rvs_core::model::AddrFamily::Inet => format!("FWM {mark}"),
            rvs_core::model::AddrFamily::Inet6 => format!("FWM {mark} IPv6"),
        },
    }
}

fn owned_error(key: &ServiceKey, holder: Owner) -> CtlError {
    CtlError::Owned(format!(
        "service {} is owned by {holder}: change it there",
        service_name(key)
    ))
}

impl Controller {
    /// The one entry point for desired state: apply `change` from `owner`.
    /// A change that touches a service another source owns is refused
    /// (unless [`Owner::may_change`] / [`Owner::may_take`] allow it), and
    /// a refused change changes nothing (a partial replace applies what it
    /// can and lists the rest in [`Submitted::refused`]).
    pub fn submit(&mut self, owner: Owner, change: Change) -> Result<Submitted, ExecError> {
        match change {
            Change::Commands { commands, atomic } => {
                self.check_commands(owner, &commands)?;
                self.exec(&commands, atomic)?;
                self.settle_commands(owner, &commands);
                Ok(Submitted::default())
            }
            Change::Replace { services, partial } => self.replace_owned(owner, services, partial),
        }
    }

    /// The source that owns `key`, if the service exists.
    pub fn owner_of(&self, key: &ServiceKey) -> Option<Owner> {
        self.owners.get(key).copied()
    }

    /// The services `owner` holds.
    pub fn owned_by(&self, owner: Owner) -> Vec<ServiceKey> {
        let mut v: Vec<ServiceKey> = self
            .owners
            .iter()
            .filter(|(_, o)| **o == owner)
            .map(|(k, _)| *k)
            .collect();
        v.sort_by_key(service_name);
        v
    }

    fn check_commands(&self, owner: Owner, commands: &[Command]) -> Result<(), ExecError> {
        for (index, c) in commands.iter().enumerate() {
            if let Command::Clear = c {
                // `-C` removes every service: refused while another source
                // holds one that this one may not change.
                if let Some((k, o)) = self
                    .owners
                    .iter()
                    .filter(|(_, o)| !owner.may_change(**o))
                    .min_by_key(|(k, _)| service_name(k))
                {
                    let n = self.owners.values().filter(|h| *h == o).count();
                    return Err(ExecError {
                        index,
                        error: CtlError::Owned(format!(
                            "{n} service(s) are owned by {o} (first: {}): clearing the table is refused",
                            service_name(k)
                        )),
                    });
                }
                continue;
            }
            if let Some(key) = c.service_key()
                && let Some(holder) = self.owners.get(key)
                && !owner.may_change(*holder)
                && !matches!(c, Command::Zero { .. })
            {
                return Err(ExecError {
                    index,
                    error: owned_error(key, *holder),
                });
            }
        }
        Ok(())
    }

    /// Record owners after commands applied: new services are the
    /// submitter's, removed ones are forgotten.
    fn settle_commands(&mut self, owner: Owner, commands: &[Command]) {
        for c in commands {
            match c {
                Command::AddService { key, .. } => {
                    self.owners.entry(*key).or_insert(owner);
                }
                Command::DelService { key } => {
                    self.owners.remove(key);
                }
                Command::Clear => self.owners.clear(),
                _ => {}
            }
        }
    }

    fn replace_owned(
        &mut self,
        owner: Owner,
        services: Vec<ServiceDef>,
        partial: bool,
    ) -> Result<Submitted, ExecError> {
        let mut refused = Vec::new();
        // The source's services with their index in `services`.
        let mut mine: Vec<(usize, ServiceDef)> = Vec::with_capacity(services.len());
        for (index, d) in services.into_iter().enumerate() {
            match self.owners.get(&d.key) {
                Some(holder) if !owner.may_take(*holder) => {
                    let error = ExecError {
                        index,
                        error: owned_error(&d.key, *holder),
                    };
                    if !partial {
                        return Err(error);
                    }
                    refused.push(error);
                }
                _ => mine.push((index, d)),
            }
        }
        // Every other source's services as they run, after the source's.
        let claimed: HashSet<ServiceKey> = mine.iter().map(|(_, d)| d.key).collect();
        let mut index: Vec<usize> = mine.iter().map(|(i, _)| *i).collect();
        let mut full: Vec<ServiceDef> = mine.into_iter().map(|(_, d)| d).collect();
        full.extend(current_defs(self.ipvs()).into_iter().filter(|d| {
            !claimed.contains(&d.key) && self.owners.get(&d.key).is_some_and(|h| *h != owner)
        }));
        // Services already put back as they run after a refusal: a second
        // refusal of one means the running state itself does not apply.
        let mut kept: HashSet<ServiceKey> = HashSet::new();
        loop {
            match self.replace(&full) {
                Ok(summary) => {
                    self.owners
                        .retain(|k, o| *o != owner || claimed.contains(k));
                    for d in &full[..index.len()] {
                        self.owners.insert(d.key, owner);
                    }
                    // Taken-over services no longer in the table.
                    let live: HashSet<ServiceKey> =
                        self.ipvs().services().map(|s| *s.key()).collect();
                    self.owners.retain(|k, _| live.contains(k));
                    return Ok(Submitted { summary, refused });
                }
                Err(e)
                    if partial && e.index < index.len() && !kept.contains(&full[e.index].key) =>
                {
                    let key = full[e.index].key;
                    let ranges = full[e.index].config.source_ranges.clone();
                    refused.push(ExecError {
                        index: index[e.index],
                        error: e.error,
                    });
                    let running = self
                        .owners
                        .contains_key(&key)
                        .then(|| current_defs(self.ipvs()).into_iter().find(|d| d.key == key))
                        .flatten();
                    match running {
                        // Kept as it runs, unless the refused table
                        // restricts its clients and the running one does
                        // not as much: then it goes (fail closed), rather
                        // than stay open to clients it should refuse.
                        Some(r) if ranges.is_empty() || r.config.source_ranges == ranges => {
                            kept.insert(key);
                            full[e.index] = r;
                        }
                        _ => {
                            full.remove(e.index);
                            index.remove(e.index);
                        }
                    }
                }
                Err(e) => {
                    return Err(ExecError {
                        index: index.get(e.index).copied().unwrap_or(0),
                        error: e.error,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::NoDataPlane;
    use crate::testutil::{Picky, tcp_key};
    use rvs_core::ipvs::IpvsConfig;
    use rvs_core::model::{AddrFamily, DestConfig, ServiceConfig};
    use std::net::Ipv4Addr;

    fn key(port: u16) -> ServiceKey {
        tcp_key(Ipv4Addr::new(10, 96, 0, 1), port)
    }

    fn def(port: u16, dests: &[u8]) -> ServiceDef {
        ServiceDef {
            key: key(port),
            config: ServiceConfig::new(AddrFamily::Inet),
            dests: dests
                .iter()
                .map(|&i| DestConfig::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)), 8080))
                .collect(),
            laddrs: Vec::new(),
        }
    }

    fn replace(services: Vec<ServiceDef>, partial: bool) -> Change {
        Change::Replace { services, partial }
    }

    fn cmds(commands: Vec<Command>) -> Change {
        Change::Commands {
            commands,
            atomic: false,
        }
    }

    /// `port -> [real server last octets]` of the live table.
    fn table(ctl: &Controller) -> Vec<(u16, Vec<u8>)> {
        let mut v: Vec<(u16, Vec<u8>)> = current_defs(ctl.ipvs())
            .into_iter()
            .map(|d| {
                let mut ds: Vec<u8> = d
                    .dests
                    .iter()
                    .map(|x| match x.addr {
                        IpAddr::V4(a) => a.octets()[3],
                        IpAddr::V6(_) => 0,
                    })
                    .collect();
                ds.sort_unstable();
                (d.key.port(), ds)
            })
            .collect();
        v.sort();
        v
    }

    fn ctl() -> Controller {
        Controller::new(IpvsConfig::default(), Box::new(NoDataPlane))
    }

    #[test]
    fn operators_hands_change_each_other_declarative_sources_stay_their_own() {
        use Owner::*;
        for (who, holder, may) in [
            (Api, Rvsadm, true),
            (Rvsadm, Api, true),
            (Api, File, false),
            (Api, Kubernetes, false),
            (Rvsadm, File, true),
            (Rvsadm, Kubernetes, false),
            (File, Api, false),
            (Kubernetes, Api, false),
        ] {
            assert_eq!(who.may_change(holder), may, "{who:?} on {holder:?}");
        }
    }

    #[test]
    fn another_sources_commands_are_refused_naming_the_owner() {
        let mut c = ctl();
        c.submit(Owner::Kubernetes, replace(vec![def(80, &[1, 2])], false))
            .unwrap();
        assert_eq!(c.owner_of(&key(80)), Some(Owner::Kubernetes));
        let before = table(&c);
        for (owner, cmd) in [
            (
                Owner::Rvsadm,
                Command::EditDest {
                    service: key(80),
                    dest: def(80, &[1]).dests[0].weight(0),
                },
            ),
            (Owner::Rvsadm, Command::DelService { key: key(80) }),
            (Owner::Api, Command::DelService { key: key(80) }),
            (Owner::File, Command::Clear),
        ] {
            let e = c.submit(owner, cmds(vec![cmd.clone()])).unwrap_err();
            let CtlError::Owned(m) = &e.error else {
                panic!("{cmd:?}: {e:?}")
            };
            assert!(
                m.contains("TCP 10.96.0.1:80") && m.contains("kubernetes"),
                "{m}"
            );
            assert_eq!(table(&c), before, "{cmd:?} changed nothing");
        }
        // Zeroing counters is not a change of desired state.
        c.submit(
            Owner::Rvsadm,
            cmds(vec![Command::Zero {
                service: Some(key(80)),
            }]),
        )
        .unwrap();
    }

    #[test]
    fn a_whole_table_changes_only_its_sources_services() {
        let mut c = ctl();
        let add = Command::AddService {
            key: key(1),
            config: ServiceConfig::new(AddrFamily::Inet),
        };
        c.submit(Owner::Rvsadm, cmds(vec![add])).unwrap();
        c.submit(
            Owner::Kubernetes,
            replace(vec![def(80, &[1]), def(81, &[2])], false),
        )
        .unwrap();
        c.submit(Owner::File, replace(vec![def(90, &[3])], false))
            .unwrap();
        assert_eq!(
            table(&c),
            vec![(1, vec![]), (80, vec![1]), (81, vec![2]), (90, vec![3])]
        );
        // Kubernetes drops a service and changes another: the others stay.
        let s = c
            .submit(Owner::Kubernetes, replace(vec![def(80, &[1, 4])], false))
            .unwrap();
        assert_eq!((s.summary.services_removed, s.summary.dests_added), (1, 1));
        assert_eq!(
            table(&c),
            vec![(1, vec![]), (80, vec![1, 4]), (90, vec![3])]
        );
        assert_eq!(c.owned_by(Owner::Kubernetes), vec![key(80)]);
        // A file reload with nothing removes the file's services only.
        c.submit(Owner::File, replace(vec![], false)).unwrap();
        assert_eq!(table(&c), vec![(1, vec![]), (80, vec![1, 4])]);
        assert_eq!(c.owner_of(&key(90)), None);
    }

    #[test]
    fn claiming_another_sources_service_is_refused_or_left_out() {
        let mut c = ctl();
        c.submit(Owner::Api, replace(vec![def(80, &[1])], false))
            .unwrap();
        let e = c
            .submit(
                Owner::Kubernetes,
                replace(vec![def(81, &[2]), def(80, &[9])], false),
            )
            .unwrap_err();
        assert_eq!(e.index, 1);
        assert!(matches!(&e.error, CtlError::Owned(m) if m.contains("the HTTP API")));
        assert_eq!(table(&c), vec![(80, vec![1])], "nothing changed");
        // Partial: the rest applies, the claim is reported.
        let s = c
            .submit(
                Owner::Kubernetes,
                replace(vec![def(81, &[2]), def(80, &[9])], true),
            )
            .unwrap();
        assert_eq!(s.refused.len(), 1);
        assert_eq!(s.refused[0].index, 1);
        assert_eq!(table(&c), vec![(80, vec![1]), (81, vec![2])]);
        assert_eq!(c.owner_of(&key(80)), Some(Owner::Api));
    }

    #[test]
    fn keepalived_operators_keep_their_habits() {
        let mut c = ctl();
        c.submit(Owner::File, replace(vec![def(80, &[1, 2])], false))
            .unwrap();
        // rvsadm drains a file's real server by hand, as ipvsadm does.
        let drain = Command::EditDest {
            service: key(80),
            dest: def(80, &[1]).dests[0].weight(0),
        };
        c.submit(Owner::Rvsadm, cmds(vec![drain])).unwrap();
        // A service rvsadm made is taken over by the file that names it.
        let add = Command::AddService {
            key: key(81),
            config: ServiceConfig::new(AddrFamily::Inet),
        };
        c.submit(Owner::Rvsadm, cmds(vec![add])).unwrap();
        c.submit(
            Owner::File,
            replace(vec![def(80, &[1, 2]), def(81, &[5])], false),
        )
        .unwrap();
        assert_eq!(c.owner_of(&key(81)), Some(Owner::File));
        let w: Vec<u32> = current_defs(c.ipvs())
            .iter()
            .find(|d| d.key == key(80))
            .map(|d| d.dests.iter().map(|x| x.weight).collect())
            .unwrap();
        assert_eq!(w, vec![1, 1], "the reload put the file's weight back");
        // rvsadm -C clears a table of rvsadm and file services.
        c.submit(Owner::Rvsadm, cmds(vec![Command::Clear])).unwrap();
        assert!(table(&c).is_empty());
        assert!(c.owned_by(Owner::File).is_empty());
    }

    #[test]
    fn a_partial_table_applies_around_what_the_plane_refuses() {
        let mut c = Controller::new(IpvsConfig::default(), Box::new(Picky));
        c.submit(Owner::Kubernetes, replace(vec![def(80, &[1])], true))
            .unwrap();
        // 99 cannot exist; 80 asks for a real server the plane refuses.
        let s = c
            .submit(
                Owner::Kubernetes,
                replace(vec![def(99, &[1]), def(80, &[1, 99]), def(81, &[3])], true),
            )
            .unwrap();
        let mut idx: Vec<usize> = s.refused.iter().map(|e| e.index).collect();
        idx.sort_unstable();
        assert_eq!(idx, vec![0, 1]);
        assert_eq!(
            table(&c),
            vec![(80, vec![1]), (81, vec![3])],
            "80 kept as it ran"
        );
        assert_eq!(c.owned_by(Owner::Kubernetes), vec![key(80), key(81)]);
        // A refused change that restricts a running service's clients
        // takes the service out rather than keep it open.
        let mut ranged = def(80, &[1]);
        ranged.config.source_ranges =
            vec![rvs_core::model::SourceRange::new("10.9.0.0".parse().unwrap(), 16).unwrap()];
        let s = c
            .submit(
                Owner::Kubernetes,
                replace(vec![ranged, def(81, &[3])], true),
            )
            .unwrap();
        assert_eq!(s.refused.len(), 1);
        assert!(
            s.refused[0].error.to_string().contains("not enforced"),
            "{}",
            s.refused[0].error
        );
        assert_eq!(
            table(&c),
            vec![(81, vec![3])],
            "80 taken out, not kept open"
        );
        c.submit(
            Owner::Kubernetes,
            replace(vec![def(80, &[1]), def(81, &[3])], true),
        )
        .unwrap();
        // Not partial: all or nothing.
        let e = c
            .submit(
                Owner::Kubernetes,
                replace(vec![def(82, &[1]), def(99, &[1])], false),
            )
            .unwrap_err();
        assert_eq!(e.index, 1);
        assert_eq!(table(&c), vec![(80, vec![1]), (81, vec![3])]);
    }
}
