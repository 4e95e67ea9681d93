//! Where the desired state comes from: a keepalived.conf-syntax file or an
//! ipvsadm-save rules file, read into service definitions.

use std::path::{Path, PathBuf};

use rvs_control::state::ServiceDef;

/// A configuration file and its syntax.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// keepalived.conf syntax (`rvsd -f`).
    Keepalived(PathBuf),
    /// ipvsadm-save rules (`rvsd --rules`).
    Rules(PathBuf),
}

impl Source {
    /// The file.
    pub fn path(&self) -> &Path {
        match self {
            Source::Keepalived(p) | Source::Rules(p) => p,
        }
    }

    /// How a service definition of this source the director refused is
    /// reported (by `--check` and by a reload alike): the source, the
    /// service's 1-based position in it, the director's reason.
    pub fn service_error(&self, e: &rvs_control::state::ExecError) -> String {
        format!(
            "{}: service #{}: {}",
            self.path().display(),
            e.index + 1,
            e.error
        )
    }
}

/// A configuration read and checked, ready to apply.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The services.
    pub defs: Vec<ServiceDef>,
    /// `lvs_timeouts` / `--set` (0 = leave unchanged).
    pub timeouts: Option<(u32, u32, u32)>,
    /// Located warnings (unknown keywords, adjusted values, ...).
    pub warnings: Vec<String>,
    /// One line about the rest of the file (VRRP instances, checkers) for `--check`.
    pub extra: String,
    /// The health checkers (keepalived.conf only).
    pub health: Option<rvs_check::HealthPlan>,
    /// The VRRP instances to run (keepalived.conf only).
    pub vrrp: Vec<crate::vrrp::Spec>,
    /// The notify FIFOs (keepalived.conf only).
    pub fifos: crate::notify::Fifos,
    /// Where `smtp_alert` mail goes (keepalived.conf only).
    pub mailer: Option<crate::smtp::Mailer>,
    /// `lvs_sync_daemon` (keepalived.conf only).
    pub sync: Option<rvs_config::model::LvsSyncDaemon>,
    /// `static_ipaddress` / `static_routes` / `static_rules`.
    pub statics: rvs_control::routes::Set,
}

/// Read a source. Errors name file:line:column.
pub fn load(src: &Source) -> Result<Loaded, String> {
    match src {
        Source::Keepalived(path) => load_keepalived(path),
        Source::Rules(path) => crate::rules::load(path),
    }
}

/// How keepalived.conf files are read (`--config-id`, `--strict`): set once
/// at start-up, used by `--check`, the first load and every reload alike.
static KEEPALIVED_OPTIONS: std::sync::OnceLock<rvs_config::LoadOptions> =
    std::sync::OnceLock::new();

/// Set the keepalived.conf reading options (once, before the first load;
/// later calls are ignored).
pub fn set_keepalived_options(opts: rvs_config::LoadOptions) {
    let _ = KEEPALIVED_OPTIONS.set(opts);
}

/// keepalived's default config id: the node name (`uname -n`) up to its
/// first dot; `None` when it cannot be read.
pub fn default_config_id() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let first = name.trim().split('.').next().unwrap_or("");
    (!first.is_empty()).then(|| first.to_owned())
}

/// The network namespace rvsd entered at start (keepalived's
/// `net_namespace`; `None`: the one it was started in). Set once, before
/// the first load; unset under `--check`, which enters nothing.
static NAMESPACE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// keepalived's `net_namespace NAME`: enter `/run/netns/NAME` if the file
/// names one. Called once at start-up, before the runtime or any other
/// thread exists (setns moves the calling thread only, and the threads it
/// starts later inherit its namespace), so everything rvsd does — data
/// plane, VRRP, health checks, routes, the announcements — happens there.
/// The control socket and other paths are files: they stay where the
/// command line puts them. A file that does not parse enters nothing (the
/// first load then reports its error).
pub fn enter_namespace(src: &Source) -> Result<Option<String>, String> {
    let ns = match src {
        Source::Keepalived(path) => {
            let default = rvs_config::LoadOptions::default();
            let opts = KEEPALIVED_OPTIONS.get().unwrap_or(&default);
            rvs_config::load(path, opts)
                .ok()
                .and_then(|l| l.config.global.net_namespace)
        }
        Source::Rules(_) => None,
    };
    if let Some(name) = &ns {
        rvs_sys::netns::enter(name).map_err(|e| {
            format!(
                "{}: net_namespace {name}: {e}; rvsd does not start outside the namespace the file names",
                src.path().display()
            )
        })?;
    }
    let _ = NAMESPACE.set(ns.clone());
    Ok(ns)
}

fn load_keepalived(path: &Path) -> Result<Loaded, String> {
    let default = rvs_config::LoadOptions::default();
    let opts = KEEPALIVED_OPTIONS.get().unwrap_or(&default);
    let mut loaded = rvs_config::load(path, opts).map_err(|e| e.to_string())?;
    let ns = loaded.config.global.net_namespace.clone();
    if let Some(started) = NAMESPACE.get()
        && *started != ns
    {
        let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "(none)".into());
        return Err(format!(
            "{}: net_namespace changed from {} to {}: the network namespace cannot change at a reload, as in keepalived; restart rvsd to move it (nothing was changed)",
            path.display(),
            name(started),
            name(&ns)
        ));
    }
    // Every script's user, and the insecure ones refused, before anything
    // plans to run them.
    let security_warnings = rvs_check::security::apply(&mut loaded.config);
    let specs = loaded.config.lvs_services().map_err(|e| e.to_string())?;
    let checkers: usize = loaded
        .config
        .virtual_servers
        .iter()
        .flat_map(|vs| vs.real_servers.iter())
        .map(|rs| rs.checkers.len())
        .sum();
    let health = rvs_check::plan(&loaded.config, &specs);
    let (vrrp, vrrp_warnings) = crate::vrrp::plan(&loaded.config)?;
    let statics = rvs_control::routes::statics(&loaded.config)?;
    let mut extra = format!(
        "{} vrrp_instance, {} real_server checkers ({} run by this build)",
        vrrp.len(),
        checkers,
        health.jobs.len()
    );
    if let Some(ns) = &ns {
        // `--check` enters nothing: it says where rvsd would run.
        extra.push_str(&format!("; runs in net_namespace {ns}"));
        if !rvs_sys::netns::path(ns).exists() {
            extra.push_str(&format!(
                " ({} does not exist here: rvsd would refuse to start)",
                rvs_sys::netns::path(ns).display()
            ));
        }
    }
    let mut warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    warnings.extend(security_warnings);
    warnings.extend(health.warnings.iter().cloned());
    warnings.extend(vrrp_warnings);
    // `--strict`: what the health checker, VRRP or the mailer would not
    // carry out is refused like the keywords the reader does not apply
    // (whose warnings are errors already).
    if opts.strict {
        let refused: Vec<&str> = warnings
            .iter()
            .filter(|w| w.contains(crate::vrrp::NOT_APPLIED))
            .map(String::as_str)
            .collect();
        if !refused.is_empty() {
            return Err(format!("--strict: {}", refused.join("\n--strict: ")));
        }
    }
    let g = &loaded.config.global;
    let fifos = crate::notify::Fifos::of(g, &mut warnings);
    Ok(Loaded {
        defs: specs
            .into_iter()
            .map(|s| ServiceDef {
                key: s.key,
                config: s.config,
                dests: s.dests,
                laddrs: s.laddrs,
            })
            .collect(),
        timeouts: loaded.config.lvs_timeouts(),
        warnings,
        extra,
        health: Some(health),
        vrrp,
        fifos,
        mailer: crate::smtp::mailer(&loaded.config.global),
        sync: loaded.config.global.lvs_sync_daemon.clone(),
        statics,
    })
}

/// `rvsd --check`: load and validate everything, touching nothing.
pub fn check(src: &Source) -> Result<String, String> {
    let loaded = load(src)?;
    rvs_control::state::build(
        &loaded.defs,
        rvs_core::ipvs::IpvsConfig {
            conn_capacity: 16,
            ..Default::default()
        },
    )
    .map_err(|e| src.service_error(&e))?;
    let mut out = String::new();
    for w in &loaded.warnings {
        out.push_str(w);
        out.push('\n');
    }
    let dests: usize = loaded.defs.iter().map(|d| d.dests.len()).sum();
    out.push_str(&format!(
        "{}: OK: {} virtual services, {} real servers",
        src.path().display(),
        loaded.defs.len(),
        dests
    ));
    if !loaded.extra.is_empty() {
        out.push_str("; ");
        out.push_str(&loaded.extra);
    }
    out.push('\n');
    Ok(out)
}
