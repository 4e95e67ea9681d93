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
//! sysctls as the caller read them (the worker reads `/proc/sys`), and
//! says which warning to log, once per service.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use rvs_control::protocol::Command;
use rvs_core::model::{ForwardMethod, ServiceKey};

/// A forwarding sysctl the program's kernel-routed paths depend on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
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

/// Services named one by one for a sysctl before the rest are only
/// counted (10,000 Kubernetes SNAT services must not be 10,000 lines).
pub const NAMED_MAX: usize = 16;

/// A warning to log: a service whose packets the kernel must forward while
/// `sysctl` is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardingOff {
    /// The sysctl that is 0.
    pub sysctl: Sysctl,
    /// The service (`None`: past [`NAMED_MAX`], the last line for this
    /// sysctl, saying more services need it).
    pub service: Option<ServiceKey>,
    /// The forwarding method that needs it.
    pub method: &'static str,
}

impl fmt::Display for ForwardingOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.sysctl.name();
        match &self.service {
            Some(key) => write!(
                f,
                "service {}: its {} real servers are reached through the kernel's routing, but \
                 {s} is 0: their packets are dropped (sysctl -w {s}=1)",
                ServiceName(key),
                self.method
            )?,
            None => write!(
                f,
                "more than {NAMED_MAX} services have NAT or FULLNAT real servers while {s} is 0 \
                 (the others are not named): their packets are dropped (sysctl -w {s}=1)"
            )?,
        }
        Ok(())
    }
}

/// A service as ipvsadm names it (`TCP 10.0.0.1:80`, `UDP [::1]:53`).
struct ServiceName<'a>(&'a ServiceKey);

impl fmt::Display for ServiceName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.0 {
            ServiceKey::Addr {
                protocol,
                addr,
                port,
            } => write!(
                f,
                "{} {}",
                protocol.name(),
                std::net::SocketAddr::new(addr, port)
            ),
            ServiceKey::Fwmark { mark, .. } => write!(f, "FWM {mark}"),
        }
    }
}

/// The services warned about, so that each is named once (again after it
/// was deleted and added back).
#[derive(Debug, Default)]
pub struct ForwardingCheck {
    warned: HashSet<(ServiceKey, Sysctl)>,
    /// Per sysctl, whether the "more services" line was given.
    more: HashSet<Sysctl>,
}

impl ForwardingCheck {
    /// The warning `command` calls for, given each sysctl's value as
    /// `enabled` reads it (`None`: unknown, no warning): a real server added
    /// or edited to NAT or FULLNAT while its family's forwarding is off.
    pub fn on_command(
        &mut self,
        command: &Command,
        enabled: impl Fn(Sysctl) -> Option<bool>,
    ) -> Option<ForwardingOff> {
        match command {
            Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
                let sysctl = Sysctl::needed(&dest.forward, dest.addr)?;
                if self.warned.contains(&(*service, sysctl)) || enabled(sysctl) != Some(false) {
                    return None;
                }
                let named = self.warned.iter().filter(|(_, s)| *s == sysctl).count();
                self.warned.insert((*service, sysctl));
                if named < NAMED_MAX {
                    return Some(ForwardingOff {
                        sysctl,
                        service: Some(*service),
                        method: dest.forward.name(),
                    });
                }
                self.more.insert(sysctl).then_some(ForwardingOff {
                    sysctl,
                    service: None,
                    method: dest.forward.name(),
                })
            }
            Command::DelService { key } => {
                self.warned.retain(|(k, _)| k != key);
                None
            }
            Command::Clear => {
                self.warned.clear();
                self.more.clear();
                None
            }
            _ => None,
        }
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

    #[test]
    fn nat_and_fullnat_need_their_family_s_forwarding_dr_and_tunnels_do_not() {
        let off = sysctls(Some(false), Some(false));
        let mut c = ForwardingCheck::default();
        let w = c
            .on_command(&add(80, "10.1.0.1", ForwardMethod::Masq), &off)
            .expect("NAT with ip_forward off");
        assert_eq!((w.sysctl, w.service), (Sysctl::Ipv4, Some(svc(80))));
        assert_eq!(
            w.to_string(),
            "service TCP 10.0.0.1:80: its Masq real servers are reached through the kernel's \
             routing, but net.ipv4.ip_forward is 0: their packets are dropped \
             (sysctl -w net.ipv4.ip_forward=1)"
        );
        let w = c
            .on_command(&add(81, "fd00::1", ForwardMethod::FullNat), &off)
            .expect("FULLNAT to IPv6");
        assert_eq!(w.sysctl, Sysctl::Ipv6);
        assert!(w.to_string().contains("net.ipv6.conf.all.forwarding is 0"));
        for m in [
            ForwardMethod::Route,
            ForwardMethod::Local,
            ForwardMethod::Tunnel(Tunnel::default()),
        ] {
            assert_eq!(c.on_command(&add(82, "10.1.0.1", m), &off), None, "{m:?}");
        }
        // On, or unreadable: nothing.
        let mut c = ForwardingCheck::default();
        let nat = add(80, "10.1.0.1", ForwardMethod::Masq);
        assert_eq!(c.on_command(&nat, sysctls(Some(true), Some(false))), None);
        assert_eq!(c.on_command(&nat, sysctls(None, None)), None);
        // IPv6 off does not concern an IPv4 real server.
        assert_eq!(c.on_command(&nat, sysctls(Some(true), Some(false))), None);
    }

    #[test]
    fn each_service_once_until_deleted_then_only_counted_past_the_named_ones() {
        let off = sysctls(Some(false), Some(true));
        let mut c = ForwardingCheck::default();
        assert!(
            c.on_command(&add(80, "10.1.0.1", ForwardMethod::Masq), &off)
                .is_some()
        );
        // Its second real server, an edit: already said.
        assert_eq!(
            c.on_command(&add(80, "10.1.0.2", ForwardMethod::Masq), &off),
            None
        );
        let edit = Command::EditDest {
            service: svc(80),
            dest: DestConfig::new("10.1.0.1".parse().unwrap(), 80).forward(ForwardMethod::Masq),
        };
        assert_eq!(c.on_command(&edit, &off), None);
        // Deleted and added back: said again.
        assert_eq!(
            c.on_command(&Command::DelService { key: svc(80) }, &off),
            None
        );
        assert!(c.on_command(&edit, &off).is_some());
        // 10,000 services: NAMED_MAX named (80 is one), one line for the
        // rest, then nothing.
        let lines: Vec<ForwardingOff> = (1000..11_000)
            .filter_map(|p| c.on_command(&add(p, "10.1.0.1", ForwardMethod::FullNat), &off))
            .collect();
        assert_eq!(lines.len(), NAMED_MAX);
        assert!(lines[..NAMED_MAX - 1].iter().all(|w| w.service.is_some()));
        assert_eq!(lines[NAMED_MAX - 1].service, None);
        assert!(
            lines[NAMED_MAX - 1]
                .to_string()
                .starts_with("more than 16 services")
        );
        // Cleared: named again.
        assert_eq!(c.on_command(&Command::Clear, &off), None);
        assert!(
            c.on_command(&add(80, "10.1.0.1", ForwardMethod::Masq), &off)
                .is_some()
        );
    }
}
