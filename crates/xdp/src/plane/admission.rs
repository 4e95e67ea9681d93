//! What the program cannot carry, refused before anything changes: [`admit`]
//! for one command, [`check_pool_sizes`] and [`check_quic_dests`] for a batch
//! (FULLNAT pools, FULLNAT real servers under QUIC-LB).

use super::*;

/// Refuse, before anything changes, what the program cannot carry: fwmark
/// and SCTP services, schedulers it does not run (none today), `Local` real
/// servers, FULLNAT real servers or local addresses of the other family
/// than their service, a local address range larger than one service's
/// pool may be (the sum of a service's ranges is checked by
/// [`XdpPlane`]'s `admit_all` and again when applied).
pub fn admit(command: &Command) -> Result<(), PlaneError> {
    match command {
        Command::AddService { key, config } | Command::EditService { key, config } => {
            svc_key(key)?;
            check_quic(key, config)?;
            if is_quic(config) && !config.source_ranges.is_empty() {
                return Err(PlaneError::Refused(
                    "a QUIC-LB service's client source ranges: the xdp data plane enforces them \
                     only for services it schedules per flow"
                        .to_owned(),
                ));
            }
            check_scheduler(config).map(|_| ())
        }
        Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
            method_of(&dest.forward)?;
            if matches!(dest.forward, ForwardMethod::FullNat)
                && rvs_core::model::AddrFamily::of(&dest.addr) != service.af()
            {
                return Err(PlaneError::Refused(format!(
                    "FULLNAT real server {} is not of its service's family: the xdp data \
                     plane's FULLNAT keeps the family",
                    dest.addr
                )));
            }
            Ok(())
        }
        Command::AddLaddr { service, laddr } => {
            let v6 = service.af() == rvs_core::model::AddrFamily::Inet6;
            fnat::pool_addrs(std::slice::from_ref(laddr), v6).map(|_| ())
        }
        _ => Ok(()),
    }
}

/// The pool rule of [`admit`] over a batch: each service's local
/// addresses (those `ipvs` has plus the batch's additions and removals, in
/// order) must fit one pool of the program; the index of the first command
/// that would not fit, with the reason.
pub fn check_pool_sizes(
    ipvs: &rvs_core::ipvs::Ipvs,
    commands: &[Command],
) -> Result<(), (usize, String)> {
    let mut pools: HashMap<ServiceKey, Vec<rvs_core::model::LocalAddrRange>> = HashMap::new();
    for (i, c) in commands.iter().enumerate() {
        match c {
            Command::AddLaddr { service, laddr } => {
                let p = pools.entry(*service).or_insert_with(|| {
                    ipvs.service(service)
                        .map(|s| s.laddrs().to_vec())
                        .unwrap_or_default()
                });
                p.push(*laddr);
                let v6 = service.af() == rvs_core::model::AddrFamily::Inet6;
                fnat::pool_addrs(p, v6).map_err(|e| (i, e.to_string()))?;
            }
            Command::DelLaddr { service, laddr } => {
                let p = pools.entry(*service).or_insert_with(|| {
                    ipvs.service(service)
                        .map(|s| s.laddrs().to_vec())
                        .unwrap_or_default()
                });
                p.retain(|l| l != laddr);
            }
            Command::DelService { key } => {
                pools.insert(*key, Vec::new());
            }
            Command::Clear => pools.clear(),
            _ => {}
        }
    }
    Ok(())
}

/// The QUIC-LB rule of [`admit`] over a batch: no FULLNAT real server
/// under a QUIC-LB service (one `ipvs` has, or the batch makes, in
/// order); the index of the first command that would break it, with the
/// reason.
pub fn check_quic_dests(
    ipvs: &rvs_core::ipvs::Ipvs,
    commands: &[Command],
) -> Result<(), (usize, String)> {
    // Per service touched: QUIC-LB or not, and its FULLNAT real servers.
    let mut books: HashMap<ServiceKey, (bool, Vec<DestConfig>)> = HashMap::new();
    let entry = |books: &mut HashMap<ServiceKey, (bool, Vec<DestConfig>)>, key: &ServiceKey| {
        books
            .entry(*key)
            .or_insert_with(|| match ipvs.service(key) {
                Some(s) => (
                    is_quic(s.config()),
                    s.dests()
                        .iter()
                        .map(|d| d.config)
                        .filter(|d| matches!(d.forward, ForwardMethod::FullNat))
                        .collect(),
                ),
                None => (false, Vec::new()),
            })
            .clone()
    };
    for (i, c) in commands.iter().enumerate() {
        match c {
            Command::AddService { key, config } | Command::EditService { key, config } => {
                // A new service has no real servers yet.
                let fnat = match c {
                    Command::AddService { .. } => Vec::new(),
                    _ => entry(&mut books, key).1,
                };
                if is_quic(config)
                    && let Some(d) = fnat.first()
                {
                    check_quic_dest(key, d).map_err(|e| (i, e.to_string()))?;
                }
                books.insert(*key, (is_quic(config), fnat));
            }
            Command::AddDest { service, dest } | Command::EditDest { service, dest } => {
                let (quic, mut fnat) = entry(&mut books, service);
                if quic {
                    check_quic_dest(service, dest).map_err(|e| (i, e.to_string()))?;
                }
                fnat.retain(|d| !same(d, dest));
                if matches!(dest.forward, ForwardMethod::FullNat) {
                    fnat.push(*dest);
                }
                books.insert(*service, (quic, fnat));
            }
            Command::DelDest {
                service,
                addr,
                port,
            } => {
                let (quic, mut fnat) = entry(&mut books, service);
                fnat.retain(|d| !(d.addr == *addr && d.port == *port));
                books.insert(*service, (quic, fnat));
            }
            Command::DelService { key } => {
                books.insert(*key, (false, Vec::new()));
            }
            Command::Clear => {
                for v in books.values_mut() {
                    *v = (false, Vec::new());
                }
                // Services not touched yet are gone too.
                for s in ipvs.services() {
                    books.insert(*s.key(), (false, Vec::new()));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
