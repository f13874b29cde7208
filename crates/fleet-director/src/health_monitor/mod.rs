//! The health monitor, as BOSH's and its resurrector: on a schedule it asks every agent of
//! every deployment that no task holds for its state, raises alerts (events of `bosh
//! events`) for agents that stay silent past their timeout and processes that do not
//! run, and starts a `scan and fix` of a deployment's timed-out instances unless
//! resurrection is paused, turned off for them by a resurrection config, or the deployment
//! is in meltdown. Asking an agent for its state is also what brings a process
//! supervisor that died back with its processes. Director processes sharing a database
//! share one monitor: the one that leads them ([`Director::leads`]) passes, the others
//! wait to take over. Its time comes from tokio, so it is tested in virtual time.

mod watch;

pub use watch::{Judgement, Seen, Subject, Verdict, Watch};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use crate::agent::JobState;
use crate::model::InstanceRecord;
use crate::resurrection::{Meltdown, ResurrectionRules};
use crate::{Director, DirectorError};

/// How the health monitor runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthMonitorSettings {
    /// Between two passes over every deployment.
    pub interval: Duration,
    /// An agent silent for longer has timed out.
    pub agent_timeout: Duration,
    /// How long one `get_state` may take before the agent counts as silent in a pass.
    pub check_timeout: Duration,
    /// Whether timed-out instances are resurrected (`bosh update-resurrection` pauses it
    /// at run time).
    pub resurrector: bool,
    pub meltdown: Meltdown,
}

impl Default for HealthMonitorSettings {
    /// BOSH's: agents heartbeat every 30 s and time out after 60 s.
    fn default() -> Self {
        HealthMonitorSettings {
            interval: Duration::from_secs(30),
            agent_timeout: Duration::from_secs(60),
            check_timeout: Duration::from_secs(10),
            resurrector: true,
            meltdown: Meltdown::default(),
        }
    }
}

/// How many agents one pass asks at once.
const CHECKS_AT_ONCE: usize = 32;

/// The longest a pass waits between two deployments: it spreads itself over half its
/// interval, so that a large fleet's pass does not take the store from the API's
/// requests in one burst (10,000 instances: a poll's p99 went from 12 to 18 ms under
/// an unpaced pass), and a small fleet's is not drawn out.
const MOST_BETWEEN_DEPLOYMENTS: Duration = Duration::from_millis(100);

/// The wait between two deployments of a pass over `deployments` of them.
fn pace(interval: Duration, deployments: usize) -> Duration {
    let spread = interval / 2 / u32::try_from(deployments.max(1)).unwrap_or(u32::MAX);
    spread.min(MOST_BETWEEN_DEPLOYMENTS)
}

/// Runs the monitor until the handle is aborted.
pub fn spawn(director: Director, settings: HealthMonitorSettings) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut watch = Watch::new(Judgement {
            agent_timeout: settings.agent_timeout,
            meltdown: settings.meltdown,
            resurrector: settings.resurrector,
        });
        let mut ticks = tokio::time::interval(settings.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(e) = pass(&director, &mut watch, &settings).await {
                tracing::warn!("the health monitor's pass failed: {e}");
            }
        }
    })
}

/// One pass over every deployment.
///
/// # Errors
/// When the store cannot be read; what it found before is acted on.
pub async fn pass(
    director: &Director,
    watch: &mut Watch,
    settings: &HealthMonitorSettings,
) -> Result<(), DirectorError> {
    if !director.leads().await? {
        // Another process watches. What this one saw is forgotten: should it lead later,
        // it times agents out from what it then sees, never from a stale sighting.
        watch.keep_only(&BTreeSet::new());
        return Ok(());
    }
    // Names alone: a pass reads no deployment's manifest.
    let names: BTreeSet<String> = director.deployment_names().await?.into_iter().collect();
    watch.keep_only(&names);
    // A task at work on a deployment changes its VMs: what the monitor would see is the
    // task's. One read of the locks for the whole pass.
    let locked: BTreeSet<String> = director
        .locks()
        .await?
        .into_iter()
        .map(|(lock, _)| lock)
        .collect();
    let paused = director.resurrection_paused().await?;
    let mut agents = [0usize; 3];
    let rules = director.resurrection_rules().await.unwrap_or_else(|e| {
        tracing::warn!("the resurrection configs are ignored: {e}");
        ResurrectionRules::default()
    });
    let between = pace(settings.interval, names.len());
    for (n, name) in names.iter().enumerate() {
        if n > 0 {
            tokio::time::sleep(between).await;
        }
        if locked.contains(&crate::runner::lock_name(name)) {
            continue;
        }
        let instances = director.instances(name).await?;
        let fix_stateful = director.core.settings.auto_fix_stateful_nodes;
        let with_disks: BTreeSet<String> = instances
            .iter()
            .filter(|i| i.disk_cid.is_some() && !fix_stateful)
            .map(|i| i.id.clone())
            .collect();
        let seen = check(director, instances, settings.check_timeout).await;
        for (_, one) in &seen {
            agents[match one {
                Seen::Running => 0,
                Seen::Failing(_) => 1,
                Seen::Silent => 2,
            }] += 1;
        }
        let allowed = |group: &str| rules.enabled(name, group);
        let stateful = |id: &str| with_disks.contains(id);
        let permission = watch::Permission {
            paused,
            allowed: &allowed,
            stateful: &stateful,
        };
        let verdict = watch.observe(name, seen, tokio::time::Instant::now(), &permission);
        for finding in verdict.findings {
            director.raise_alert(name, finding).await?;
        }
        if verdict.resurrect.is_empty() {
            continue;
        }
        match director.scan_and_fix(name, &verdict.resurrect).await {
            Ok(task) => {
                metrics::counter!("fleet_director_resurrections_total").increment(1);
                tracing::info!(deployment = %name, task = task.id, "resurrecting")
            }
            // Another director process, or an operator, got there first.
            Err(DirectorError::Locked { .. } | DirectorError::ResurrectionPaused) => {}
            Err(e) => tracing::warn!(deployment = %name, "resurrection not started: {e}"),
        }
    }
    for (health, count) in ["running", "failing", "unresponsive"]
        .into_iter()
        .zip(agents)
    {
        metrics::gauge!("fleet_director_agents", "health" => health).set(count as f64);
    }
    Ok(())
}

/// Asks the agent of every instance that has one, and is not ignored, for its state.
async fn check(
    director: &Director,
    instances: Vec<InstanceRecord>,
    timeout: Duration,
) -> Vec<(Subject, Seen)> {
    let limit = Arc::new(Semaphore::new(CHECKS_AT_ONCE));
    let mut asking = JoinSet::new();
    for instance in instances {
        let (Some(agent_id), Some(_)) = (instance.agent_id.clone(), &instance.vm_cid) else {
            continue;
        };
        if instance.ignore {
            continue;
        }
        let agent = Arc::clone(&director.core.agents.agent);
        let limit = Arc::clone(&limit);
        asking.spawn(async move {
            let _turn = limit.acquire_owned().await;
            let answer = tokio::time::timeout(timeout, agent.get_state(&agent_id)).await;
            let seen = match answer {
                Ok(Ok(state)) if state.job_state == JobState::Failing => {
                    let mut failing: Vec<String> = state
                        .processes
                        .iter()
                        .filter(|p| p.state != "running")
                        .map(|p| p.name.clone())
                        .collect();
                    if failing.is_empty() {
                        failing = state.failing_jobs.clone();
                    }
                    Seen::Failing(failing)
                }
                Ok(Ok(_)) => Seen::Running,
                Ok(Err(_)) | Err(_) => Seen::Silent,
            };
            let subject = Subject {
                group: instance.group,
                id: instance.id,
                agent_id,
            };
            (subject, seen)
        });
    }
    let mut seen = Vec::new();
    while let Some(done) = asking.join_next().await {
        if let Ok(one) = done {
            seen.push(one);
        }
    }
    seen.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_spreads_over_half_its_interval_and_never_waits_long() {
        let interval = Duration::from_secs(30);
        assert_eq!(pace(interval, 8_000), Duration::from_micros(1_875));
        assert_eq!(pace(interval, 3), MOST_BETWEEN_DEPLOYMENTS);
        assert_eq!(pace(interval, 0), MOST_BETWEEN_DEPLOYMENTS);
    }
}
