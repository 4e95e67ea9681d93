//! Whether the kernel forwards what the program hands it: NAT and FULLNAT
//! real servers (and so the Kubernetes SNAT NodePort, a FULLNAT service)
//! leave through the kernel's FIB (`fib_out` in `bpf/lib/forward.h`:
//! `bpf_fib_lookup` answers `BPF_FIB_LKUP_RET_FWD_DISABLED` when the
//! family's forwarding is off, and the packet passed to the stack is not
//! forwarded either): with `net.ipv4.ip_forward` (IPv6:
//! `net.ipv6.conf.all.forwarding`) at 0 their packets are dropped without
//! a word. DR and the tunnels rewrite the frame and transmit it themselves
//! (`XDP_TX` / redirect), so they need neither.
//!
//! Sans-IO: [`ForwardingCheck::on_command`] decides from a command and the
//! sysctls as the caller read them (the worker reads `/proc/sys`, each at
//! most once a batch of commands: [`Sysctls`]), and says which warning to
//! log: once a service, the first [`NAMED`] a sysctl named and the others
//! counted ([`WarnLimit`]), their total at a later report.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use rvs_control::owner::service_name;
use rvs_control::protocol::Command;
use rvs_control::warnings::{NAMED, Say, WarnLimit};
use rvs_core::model::{ForwardMethod, ServiceKey};

/// A forwarding sysctl the program's kernel-routed paths depend on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sysctl {
    /// `net.ipv4.ip_forward` (IPv4 real servers).
    Ipv4,
    /// `net.ipv6.conf.all.forwarding` (IPv6 real servers).
    Ipv6,
}

impl Sysctl {
    /// Its `sysctl` name.
    pub const fn name(self) -> &'static str {
        match self {
            Sysctl::Ipv4 => "net.ipv4.ip_forward",
            Sysctl::Ipv6 => "net.ipv6.conf.all.forwarding",
        }
    }

    /// Its file under `/proc/sys`.
    pub const fn proc_path(self) -> &'static str {
        match self {
            Sysctl::Ipv4 => "/proc/sys/net/ipv4/ip_forward",
            Sysctl::Ipv6 => "/proc/sys/net/ipv6/conf/all/forwarding",
        }
    }

    /// The sysctl a real server at `addr` reached by `forward` needs, if
    /// any (NAT and FULLNAT leave by the kernel's FIB, in the real
    /// server's family).
    pub fn needed(forward: &ForwardMethod, addr: IpAddr) -> Option<Sysctl> {
        match forward {
            ForwardMethod::Masq | ForwardMethod::FullNat => Some(match addr {
                IpAddr::V4(_) => Sysctl::Ipv4,
                IpAddr::V6(_) => Sysctl::Ipv6,
            }),
            ForwardMethod::Local | ForwardMethod::Route | ForwardMethod::Tunnel(_) => None,
        }
    }
}

/// A warning to log about `sysctl` being off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardingOff {
    /// The sysctl that is 0.
    pub sysctl: Sysctl,
    /// What the line says.
    pub about: About,
}

/// What a [`ForwardingOff`] line is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum About {
    /// A service whose real servers of forwarding method `method` the
    /// kernel must forward (one of the first [`NAMED`] for this sysctl).
    Service {
        /// The service.
        key: ServiceKey,
        /// The forwarding method that needs the sysctl.
        method: &'static str,
    },
    /// More than [`NAMED`] services need it: the others are counted.
    More,
    /// The services that needed it so far (a summary, while it grows).
    Total {
        /// Services warned about.
        count: u64,
        /// Of which named.
        named: u64,
    },
}

impl fmt::Display for ForwardingOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.sysctl.name();
        match &self.about {
            About::Service { key, method } => write!(
                f,
                "service {}: its {method} real servers are reached through the kernel's \
                 routing, but {s} is 0: their packets are dropped (sysctl -w {s}=1)",
                service_name(key),
            ),
            About::More => write!(
                f,
                "more than {NAMED} services have NAT or FULLNAT real servers while {s} is 0 \
                 (the others are counted, not named): their packets are dropped (sysctl -w {s}=1)"
            ),
            About::Total { count, named } => write!(
                f,
                "{count} services in all have NAT or FULLNAT real servers while {s} is 0 \
                 ({named} named): their packets are dropped (sysctl -w {s}=1)"
            ),
        }
    }
}

/// The services warned about, so that each is named or counted once (again
/// after it was deleted and added back), and per sysctl how many were
/// (O(1) a command).
#[derive(Debug, Default)]
pub struct ForwardingCheck {
    warned: HashSet<(ServiceKey, Sysctl)>,
    limit: WarnLimit<Sysctl>,
}

impl ForwardingCheck {
    /// The warnings `command` calls for, given each sysctl's value as
    /// `enabled` reads it (`None`: unknown, no warning; asked only for a
    /// NAT or FULLNAT real server of a service not yet warned about): a
    /// real server added or edited to NAT or FULLNAT while its family's
    /// forwarding is off.
    pub fn on_command(
        &mut self,
        command: &Command,
        mut enabled: impl FnMut(Sysctl) -> Option<bool>,
    ) -> Vec<ForwardingOff> {
        match command {
            Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
                let Some(sysctl) = Sysctl::needed(&dest.forward, dest.addr) else {
                    return Vec::new();
                };
                if self.warned.contains(&(*service, sysctl)) || enabled(sysctl) != Some(false) {
                    return Vec::new();
                }
                self.warned.insert((*service, sysctl));
                let named = ForwardingOff {
                    sysctl,
                    about: About::Service {
                        key: *service,
                        method: dest.forward.name(),
                    },
                };
                let more = ForwardingOff {
                    sysctl,
                    about: About::More,
                };
                match self.limit.note(sysctl) {
                    Say::Name => vec![named],
                    Say::NameAndMore => vec![named, more],
                    Say::Count => Vec::new(),
                }
            }
            Command::DelService { key } => {
                self.warned.remove(&(*key, Sysctl::Ipv4));
                self.warned.remove(&(*key, Sysctl::Ipv6));
                Vec::new()
            }
            Command::Clear => {
                self.warned.clear();
                self.limit.reset();
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// A period passed (the worker's report): the totals due, per sysctl
    /// (see [`WarnLimit::tick`]).
    pub fn tick(&mut self) -> Vec<ForwardingOff> {
        self.limit
            .tick()
            .into_iter()
            .map(|s| ForwardingOff {
                sysctl: s.kind,
                about: About::Total {
                    count: s.count,
                    named: s.named,
                },
            })
            .collect()
    }
}

/// The forwarding sysctls as read once in a batch of commands: the worker
/// reads each at most once a batch ([`Sysctls::forget`] at its end), not
/// once a real server (10,000 NAT services queued at once are one read).
#[derive(Debug, Default)]
pub struct Sysctls {
    read: [Option<Option<bool>>; 2],
}

impl Sysctls {
    /// `sysctl`'s value, from `read` the first time in this batch.
    pub fn get(
        &mut self,
        sysctl: Sysctl,
        read: impl FnOnce(Sysctl) -> Option<bool>,
    ) -> Option<bool> {
        *self.read[sysctl as usize].get_or_insert_with(|| read(sysctl))
    }

    /// The batch is done: read again next time.
    pub fn forget(&mut self) {
        self.read = [None; 2];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rvs_core::model::{DestConfig, Protocol, Tunnel};

    fn svc(port: u16) -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port,
        }
    }

    fn add(port: u16, rs: &str, forward: ForwardMethod) -> Command {
        Command::AddDest {
            service: svc(port),
            dest: DestConfig::new(rs.parse().unwrap(), 80).forward(forward),
        }
    }

    /// Forwarding per family as given.
    fn sysctls(v4: Option<bool>, v6: Option<bool>) -> impl Fn(Sysctl) -> Option<bool> {
        move |s| match s {
            Sysctl::Ipv4 => v4,
            Sysctl::Ipv6 => v6,
        }
    }

    /// No line.
    fn none() -> Vec<ForwardingOff> {
        Vec::new()
    }

    /// The one line `lines` holds.
    fn one(lines: Vec<ForwardingOff>) -> ForwardingOff {
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines.into_iter().next().expect("one")
    }

    #[test]
    fn nat_and_fullnat_need_their_family_s_forwarding_dr_and_tunnels_do_not() {
        let off = sysctls(Some(false), Some(false));
        let mut c = ForwardingCheck::default();
        let w = one(c.on_command(&add(80, "10.1.0.1", ForwardMethod::Masq), &off));
        assert_eq!(w.sysctl, Sysctl::Ipv4);
        assert_eq!(
            w.to_string(),
            "service TCP 10.0.0.1:80: its Masq real servers are reached through the kernel's \
             routing, but net.ipv4.ip_forward is 0: their packets are dropped \
             (sysctl -w net.ipv4.ip_forward=1)"
        );
        let w = one(c.on_command(&add(81, "fd00::1", ForwardMethod::FullNat), &off));
        assert_eq!(w.sysctl, Sysctl::Ipv6);
        assert!(w.to_string().contains("net.ipv6.conf.all.forwarding is 0"));
        for m in [
            ForwardMethod::Route,
            ForwardMethod::Local,
            ForwardMethod::Tunnel(Tunnel::default()),
        ] {
            assert_eq!(c.on_command(&add(82, "10.1.0.1", m), &off), none(), "{m:?}");
        }
        // On, or unreadable: nothing.
        let mut c = ForwardingCheck::default();
        let nat = add(80, "10.1.0.1", ForwardMethod::Masq);
        assert_eq!(c.on_command(&nat, sysctls(Some(true), Some(false))), none());
        assert_eq!(c.on_command(&nat, sysctls(None, None)), none());
        // IPv6 off does not concern an IPv4 real server.
        assert_eq!(c.on_command(&nat, sysctls(Some(true), Some(false))), none());
    }

    #[test]
    fn each_service_once_until_deleted_then_only_counted_past_the_named_ones() {
        let off = sysctls(Some(false), Some(true));
        let mut c = ForwardingCheck::default();
        assert_eq!(
            c.on_command(&add(80, "10.1.0.1", ForwardMethod::Masq), &off)
                .len(),
            1
        );
        // Its second real server, an edit: already said.
        assert_eq!(
            c.on_command(&add(80, "10.1.0.2", ForwardMethod::Masq), &off),
            none()
        );
        let edit = Command::EditDest {
            service: svc(80),
            dest: DestConfig::new("10.1.0.1".parse().unwrap(), 80).forward(ForwardMethod::Masq),
        };
        assert_eq!(c.on_command(&edit, &off), none());
        // Deleted and added back: said again.
        assert_eq!(
            c.on_command(&Command::DelService { key: svc(80) }, &off),
            none()
        );
        assert_eq!(c.on_command(&edit, &off).len(), 1);
        // 10,000 services: NAMED named in all (80 twice), the last of
        // them with the line saying the others are counted, then nothing
        // until the summary gives the total.
        let lines: Vec<ForwardingOff> = (1000..11_000)
            .flat_map(|p| c.on_command(&add(p, "10.1.0.1", ForwardMethod::FullNat), &off))
            .collect();
        let n = NAMED as usize;
        assert_eq!(lines.len(), n, "{lines:?}");
        assert!(
            lines[..n - 1]
                .iter()
                .all(|w| matches!(w.about, About::Service { .. }))
        );
        assert_eq!(lines[n - 1].about, About::More);
        assert!(
            lines[n - 1]
                .to_string()
                .starts_with("more than 16 services")
        );
        assert_eq!(c.tick(), none(), "still growing");
        let total = one(c.tick());
        assert_eq!(
            total.about,
            About::Total {
                count: 10_002,
                named: NAMED + 1
            }
        );
        assert!(total.to_string().starts_with(
            "10002 services in all have NAT or FULLNAT real servers while net.ipv4.ip_forward is 0"
        ));
        assert_eq!(c.tick(), none(), "said once while it does not grow");
        // Cleared: named again.
        assert_eq!(c.on_command(&Command::Clear, &off), none());
        assert_eq!(
            c.on_command(&add(80, "10.1.0.1", ForwardMethod::Masq), &off)
                .len(),
            1
        );
    }

    /// The worker's reads: once a sysctl a batch, asked only for what is
    /// not yet known.
    #[test]
    fn a_batch_reads_each_sysctl_once() {
        let mut reads = Vec::new();
        let mut read = |s: Sysctl| {
            reads.push(s);
            Some(true)
        };
        let mut batch = Sysctls::default();
        let mut c = ForwardingCheck::default();
        for p in 0..1000 {
            c.on_command(&add(p, "10.1.0.1", ForwardMethod::Masq), |s| {
                batch.get(s, &mut read)
            });
            c.on_command(&add(p, "fd00::1", ForwardMethod::FullNat), |s| {
                batch.get(s, &mut read)
            });
        }
        batch.forget();
        c.on_command(&add(1, "10.1.0.1", ForwardMethod::Masq), |s| {
            batch.get(s, &mut read)
        });
        assert_eq!(reads, vec![Sysctl::Ipv4, Sysctl::Ipv6, Sysctl::Ipv4]);
    }
}
