//! The tokio driver of the health checker.
//!
//! One task owns the schedule: it sleeps until the next probe is due (or a
//! result or a reconfiguration arrives), then, under the host's lock, feeds
//! results to the [`Health`], pushes health changes to the data plane and
//! collects due probes; outside the lock it spawns each probe as its own
//! task (thousands run concurrently; their start times are spread by the
//! warmup jitter and by each checker's own completion time, so there is no
//! burst per `delay_loop`) and runs scripts.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rvs_control::protocol::Command;
use rvs_control::state::{ServiceDef, diff};
use rvs_core::ipvs::Ipvs;
use rvs_core::model::{DestConfig, ServiceKey};
use tokio::sync::{Notify, mpsc};

use crate::health::Health;
use crate::policy::{CheckerId, Outcome, ScriptSpec};

/// What the runner needs from its host (the daemon).
pub trait Host: Send + 'static {
    /// The health checker, if this host runs one.
    fn health(&mut self) -> Option<&mut Health>;
    /// Make `key`'s real servers equal `dests` (through the host's atomic
    /// change path; see [`commands_for`]).
    fn apply_health(&mut self, key: ServiceKey, dests: Vec<DestConfig>);
    /// Write a line to the LVS notify FIFOs (keepalived's `notify_fifo` and
    /// `lvs_notify_fifo`); must not block.
    fn notify_fifo(&mut self, _line: &str) {}
    /// Send keepalived's `smtp_alert` mail `[ROUTER_ID] SUBJECT` with
    /// `body` (a host without a mailer sends nothing, as keepalived without
    /// `smtp_server`); must not block.
    fn smtp_alert(&mut self, _subject: &str, _body: &str) {}
}

/// The commands that turn the live real servers of `key` into `dests`
/// (only the difference: a flapping server touches nothing else). None when
/// the service is not live (an operator deleted it).
pub fn commands_for(ipvs: &Ipvs, key: ServiceKey, dests: Vec<DestConfig>) -> Option<Vec<Command>> {
    let svc = ipvs.service(&key)?;
    let live = ServiceDef {
        key,
        config: svc.config().clone(),
        dests: svc.dests().iter().rev().map(|d| d.config).collect(),
        laddrs: svc.laddrs().to_vec(),
    };
    let target = ServiceDef {
        key,
        config: live.config.clone(),
        dests,
        laddrs: live.laddrs.clone(),
    };
    diff(&[live], &[target]).ok().map(|(cmds, _)| cmds)
}

/// Run a notify/quorum script without a shell (keepalived execs the words
/// of the command line); its exit status is logged, never waited on by the
/// scheduler.
pub fn run_script(script: ScriptSpec, why: String) {
    let Some(words) = crate::probe::misc::split_command(&script.command) else {
        tracing::warn!(target: "rvs::check", "not running [{}]: unbalanced quote", script.command);
        return;
    };
    let Some((prog, args)) = words.split_first() else {
        return;
    };
    tracing::info!(target: "rvs::check", "Executing [{}] for {why}", script.command);
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(false);
    if let Some(u) = &script.user {
        match crate::probe::misc::resolve_user(u) {
            Ok((uid, gid)) => {
                cmd.uid(uid).gid(gid);
            }
            Err(e) => {
                tracing::warn!(target: "rvs::check", "not running [{}]: {e}", script.command);
                return;
            }
        }
    }
    match cmd.spawn() {
        Ok(mut child) => {
            let command = script.command.clone();
            tokio::spawn(async move {
                match child.wait().await {
                    Ok(st) if st.success() => {}
                    Ok(st) => tracing::warn!(target: "rvs::check", "[{command}] exited with {st}"),
                    Err(e) => tracing::warn!(target: "rvs::check", "[{command}]: {e}"),
                }
            });
        }
        Err(e) => tracing::warn!(target: "rvs::check", "cannot run [{}]: {e}", script.command),
    }
}

/// What one step of the schedule leaves to do outside the host: probes to
/// start, scripts to run, and when the next probe is due.
#[derive(Debug)]
pub struct Stepped {
    /// Probes to start now, each as its own task.
    pub probes: Vec<(CheckerId, crate::build::ProbeJob)>,
    /// Notify and quorum scripts to run.
    pub scripts: Vec<(ScriptSpec, String)>,
    /// When the next probe is due (`None`: nothing scheduled).
    pub due: Option<Instant>,
    /// Whether health state changed in this step ([`crate::health::Work::transitioned`]).
    pub transitioned: bool,
}

/// One step of the schedule on the host (which owns its [`Health`]): feed
/// `results`, push health changes to the data plane, write the FIFO lines
/// and mails; `None` when the host runs no checker. Never blocks: the
/// probes and scripts it returns are started by the caller.
pub fn step<H: Host + ?Sized>(h: &mut H, results: Vec<(CheckerId, Outcome)>) -> Option<Stepped> {
    let now = Instant::now();
    let health = h.health()?;
    let work = health.step(now, results);
    let due = health.next_due();
    for (key, dests) in work.syncs {
        h.apply_health(key, dests);
    }
    for line in &work.fifo {
        h.notify_fifo(line);
    }
    for (subject, body) in &work.mail {
        h.smtp_alert(subject, body);
    }
    Some(Stepped {
        probes: work.probes,
        scripts: work.scripts,
        due,
        transitioned: work.transitioned,
    })
}

/// Drive the host's health checker forever. `wake` is notified by the host
/// after it reconfigures the checker (start, reload).
pub async fn run<H: Host>(host: Arc<Mutex<H>>, wake: Arc<Notify>) {
    drive(
        move |results| {
            let stepped = host.lock().ok().map(|mut h| step(&mut *h, results));
            std::future::ready(stepped)
        },
        wake,
    )
    .await;
}

/// Drive a health checker whose host is reached through `step_on` (a host
/// owned by another task answers through a channel): `step_on(results)`
/// runs [`step`] on the host and resolves to its answer, or to `None` when
/// the host is gone (then the driver ends). Probes run as tasks of their
/// own; the driver sleeps until the next is due, a result arrives or
/// `wake` is notified.
pub async fn drive<F, Fut>(mut step_on: F, wake: Arc<Notify>)
where
    F: FnMut(Vec<(CheckerId, Outcome)>) -> Fut,
    Fut: std::future::Future<Output = Option<Option<Stepped>>>,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(CheckerId, Outcome)>();
    let mut results: Vec<(CheckerId, Outcome)> = Vec::new();
    loop {
        let Some(stepped) = step_on(std::mem::take(&mut results)).await else {
            return;
        };
        let Some(Stepped {
            probes,
            scripts,
            due,
            ..
        }) = stepped
        else {
            wake.notified().await;
            continue;
        };
        for (id, job) in probes {
            let tx = tx.clone();
            tokio::spawn(async move {
                let o = crate::bridge::run(&job).await;
                let _ = tx.send((id, o));
            });
        }
        for (s, why) in scripts {
            run_script(s, why);
        }
        let sleep = async {
            match due {
                Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            r = rx.recv() => {
                if let Some(r) = r {
                    results.push(r);
                }
                while let Ok(r) = rx.try_recv() {
                    results.push(r);
                }
            }
            _ = wake.notified() => {}
        }
    }
}
