//! What the runner test and the `runner_scale` example share: a keepalived
//! configuration loaded as rvsd loads it, and a host that runs the health
//! runner against a real `Controller`.

use std::time::Instant;

use rvs_check::runner::{Host, commands_for};
use rvs_check::{Health, HealthPlan};
use rvs_control::dataplane::DataPlane;
use rvs_control::owner::{Change, Owner};
use rvs_control::state::{Controller, ServiceDef};
use rvs_core::ipvs::IpvsConfig;
use rvs_core::model::{DestConfig, ServiceKey};

/// The runner's host: the controller that health changes are submitted to
/// and the health state.
pub struct ControllerHost {
    pub ctl: Controller,
    pub health: Health,
}

impl Host for ControllerHost {
    fn health(&mut self) -> Option<&mut Health> {
        Some(&mut self.health)
    }
    fn apply_health(&mut self, key: ServiceKey, dests: Vec<DestConfig>) {
        if let Some(commands) = commands_for(self.ctl.ipvs(), key, dests)
            && !commands.is_empty()
        {
            let change = Change::Commands {
                commands,
                atomic: true,
            };
            self.ctl
                .submit(Owner::File, change)
                .expect("health change applies");
        }
    }
}

/// The services and the health plan of keepalived configuration `text`
/// (written to a temporary file named after `tag` and loaded from there).
pub fn load(text: &str, tag: &str) -> (Vec<ServiceDef>, HealthPlan) {
    let path = std::env::temp_dir().join(format!("rvs-check-{tag}-{}.conf", std::process::id()));
    std::fs::write(&path, text).expect("write config");
    let loaded = rvs_config::load(&path, &rvs_config::LoadOptions::default());
    let _ = std::fs::remove_file(&path);
    let loaded = loaded.expect("config");
    let specs = loaded.config.lvs_services().expect("services");
    let plan = rvs_check::plan(&loaded.config, &specs);
    let defs = specs.into_iter().map(ServiceDef::from).collect();
    (defs, plan)
}

/// Health seeded with `seed` running `plan`, and a controller over `plane`
/// holding `defs` as health leaves them (servers start down until checked).
pub fn start(
    mut defs: Vec<ServiceDef>,
    plan: HealthPlan,
    seed: u64,
    plane: Box<dyn DataPlane>,
) -> ControllerHost {
    let mut health = Health::new(seed);
    health.reconfigure(Instant::now(), plan);
    health.overlay(&mut defs);
    let mut ctl = Controller::new(IpvsConfig::default(), plane);
    let change = Change::Replace {
        services: defs,
        partial: false,
    };
    ctl.submit(Owner::File, change).expect("initial table");
    ControllerHost { ctl, health }
}
