//! The deploy procedure (seed 000): validate, bind existing VMs, decide the whole plan
//! ([`decide`]), claim its addresses, then apply it ([`apply`]): delete what is no longer
//! wanted, compile, create missing VMs, and update instance groups. Recreate and start are
//! deploys of the stored manifest with other options; stop and delete act on the
//! deployment's records.

mod apply;
mod decide;
#[cfg(test)]
mod decide_tests;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::task::JoinSet;

use super::Core;
use super::agent::Intent;
use super::compilation;
use super::dry_run;
use super::error::StepError;
use super::ids::new_id;
use super::limits::InstanceLimits;
use super::manifest::Count;
use super::model::{DeploymentRecord, DesiredState, InstanceRecord};
use super::network::to_u32;
use super::networking;
use super::plan::InstancePlan;
use super::records::change;
use super::snapshot::Snapshot;
use super::target::Target;
use super::task::{JobError, TaskLog};
use super::templates;
use super::update::{delete_instance, stop_instance};
use super::validate;
pub use decide::{DeployPlan, Observed, decide};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployOptions {
    /// Recreate every VM.
    pub recreate: bool,
    /// Replace VMs whose agents do not answer instead of failing.
    pub fix: bool,
    pub skip_drain: bool,
    pub canaries: Option<Count>,
    pub max_in_flight: Option<Count>,
    /// Plan and report, change nothing.
    pub dry_run: bool,
    /// Start stopped and detached instances.
    pub start: bool,
    /// Restart running instances in place (and start stopped ones), canaries first.
    pub restart: bool,
    /// The instances `recreate` and `start` apply to.
    pub target: Target,
}

/// The manifest against what the director has; every problem together. Pure: it reads
/// the snapshot alone.
pub(crate) fn validate(snapshot: &mut Snapshot, limits: &InstanceLimits) -> Result<(), StepError> {
    let facts = snapshot.facts();
    let mut problems = limits.problems(&snapshot.manifest);
    problems.extend(validate::problems(
        &snapshot.manifest,
        &facts,
        &snapshot.uploaded,
    ));
    if !problems.is_empty() {
        return Err(StepError::Failed(format!(
            "the manifest is invalid:\n  {}",
            problems.join("\n  ")
        )));
    }
    validate::resolve_disk_types(&mut snapshot.manifest, &facts);
    Ok(())
}

/// What binding learned: instances whose agents did not answer, and the addresses the
/// others reported, by instance id.
struct Bound {
    unresponsive: BTreeSet<String>,
    reported: HashMap<String, Vec<(String, u32)>>,
}

/// Asks every agent of the deployment for its state, in parallel. Unanswered agents fail
/// the deploy, unless `fix`: then their instances get new VMs.
async fn bind(
    core: &Arc<Core>,
    log: &TaskLog,
    existing: &[InstanceRecord],
    fix: bool,
) -> Result<Bound, StepError> {
    let stage = log.stage("Preparing deployment", Vec::new(), 1);
    // A deployment's first deploy has nothing to bind.
    let step = stage.start(if existing.is_empty() {
        "Preparing deployment"
    } else {
        "Binding existing deployment"
    });
    let mut calls = JoinSet::new();
    // Ignored instances are not asked: their agents may be down for a reason.
    for instance in existing.iter().filter(|i| !i.ignore) {
        let (Some(agent), Some(_)) = (instance.agent_id.clone(), &instance.vm_cid) else {
            continue;
        };
        let core = Arc::clone(core);
        let (id, name) = (instance.id.clone(), instance.name());
        calls.spawn(crate::trace::within(async move {
            let state = core
                .agent_call(&agent, "get_state", core.agent.get_state(&agent))
                .await
                .ok();
            (id, name, state)
        }));
    }
    let mut bound = Bound {
        unresponsive: BTreeSet::new(),
        reported: HashMap::new(),
    };
    let mut names = Vec::new();
    while let Some(joined) = calls.join_next().await {
        let (id, name, state) = joined?;
        match state {
            Some(state) => {
                let nets = state
                    .networks
                    .into_iter()
                    .map(|(n, ip)| (n, to_u32(ip)))
                    .collect();
                bound.reported.insert(id, nets);
            }
            None => {
                bound.unresponsive.insert(id);
                names.push(name);
            }
        }
    }
    names.sort();
    if !names.is_empty() && !fix {
        return step.end(Err(StepError::Failed(format!(
            "Timed out sending get_state to the agents of {}; run cloud check (`bosh cck`) to see why they \
             cannot be reached, or recreate with fix to replace their VMs",
            names.join(", ")
        ))));
    }
    step.finish();
    Ok(bound)
}

pub async fn deploy(
    core: Arc<Core>,
    log: TaskLog,
    text: String,
    options: DeployOptions,
) -> Result<String, JobError> {
    let mut snapshot = Snapshot::take(&core, text).await?;
    validate(&mut snapshot, &core.settings.limits)?;
    compilation::check(&snapshot)?;
    let name = snapshot.manifest.name.clone();
    let outcome = deploy_valid(Arc::clone(&core), log, snapshot, options).await;
    if outcome.is_err() {
        // What it rendered for instances it did not update goes with a failed deploy;
        // a successful one has cleared it already.
        if let Err(e) = templates::forget_unused(&core, &name).await {
            tracing::warn!(deployment = %name, error = %e, "rendered templates are left behind");
        }
    }
    outcome
}

/// The deploy of a manifest found valid: bind, decide, then apply (or, for a dry run,
/// show what was decided).
async fn deploy_valid(
    core: Arc<Core>,
    log: TaskLog,
    snapshot: Snapshot,
    options: DeployOptions,
) -> Result<String, JobError> {
    let networking = snapshot.networking();
    let name = snapshot.manifest.name.clone();
    let existing: Vec<InstanceRecord> = core.records.instances(&name).await?;
    let Bound {
        unresponsive,
        reported,
    } = bind(&core, &log, &existing, options.fix).await?;
    let observed = Observed {
        existing,
        unresponsive,
        reported,
    };
    let mut ids = || new_id("instance");
    if options.dry_run {
        // Decided against the store as a deploy would, and nothing is written.
        let view = networking::observe(&core, &networking, &snapshot.manifest).await?;
        let plan = decide(&snapshot, &observed, &options, &view, &mut ids)?;
        let instances: Vec<&InstancePlan> = plan.instances.instances().collect();
        let stage = log.stage("Planning (dry run)", Vec::new(), instances.len() as u32);
        for instance in instances {
            stage.start(dry_run::instance_line(instance)).finish();
        }
        return Ok(dry_run::summary(&plan));
    }
    // A new deployment is recorded once its manifest is valid and it is not a dry run: a
    // refused manifest leaves no empty deployment behind.
    if core.records.deployment(&name).await?.is_none() {
        let record = DeploymentRecord {
            name: name.clone(),
            manifest: None,
            cloud_config: None,
            runtime_configs: Vec::new(),
        };
        core.records
            .write(vec![change::deployment(&record)])
            .await?;
    }
    compilation::delete_leftovers(&core, &log, &name).await?;
    log.check()?;
    // A refused plan (an ignored instance the manifest deletes, a network out of
    // addresses) claims nothing.
    let plan = networking::decide_and_claim(
        &core,
        &networking,
        &snapshot.manifest,
        |view| decide(&snapshot, &observed, &options, view, &mut ids),
        |plan| &plan.addresses,
    )
    .await?;
    log.check()?;
    apply::apply(core, log, snapshot, plan, &options).await
}

/// Every started instance's `post-deploy` scripts at once, once all instances started;
/// the first failure fails the deploy, naming the instance.
pub(super) async fn post_deploy(core: &Arc<Core>, deployment: &str) -> Result<(), JobError> {
    let mut running = tokio::task::JoinSet::new();
    for instance in core.records.instances(deployment).await? {
        let (Some(agent), DesiredState::Started, false) =
            (instance.agent_id.clone(), instance.state, instance.ignore)
        else {
            continue;
        };
        let core = Arc::clone(core);
        running.spawn(crate::trace::within(async move {
            core.agent_call(
                &agent,
                "run_script post-deploy",
                core.agent.post_deploy(&agent),
            )
            .await
            .map_err(|source| StepError::PostDeploy {
                instance: instance.name(),
                source: Box::new(source),
            })
        }));
    }
    let mut first_error = None;
    while let Some(joined) = running.join_next().await {
        let failed = match joined {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(StepError::from(e)),
        };
        if let Some(e) = failed {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Redeploys the manifest the deployment last deployed successfully (to recreate or start
/// its instances), read once the task holds the lock so that an update finishing just
/// before cannot be rolled back.
pub async fn recreate_or_start(
    core: Arc<Core>,
    log: TaskLog,
    name: String,
    options: DeployOptions,
) -> Result<String, JobError> {
    let manifest = core
        .records
        .deployed_manifest(&name)
        .await?
        .ok_or_else(|| StepError::NotDeployed {
            deployment: name.clone(),
            purpose: "recreate",
        })?;
    deploy(core, log, manifest, options).await
}

/// Stops every instance's jobs; `hard` deletes the VMs too (`stop --hard`), keeping
/// disks and addresses for when the instances are started again.
pub async fn stop(
    core: Arc<Core>,
    log: TaskLog,
    name: String,
    hard: bool,
    target: Target,
    skip_drain: bool,
) -> Result<String, JobError> {
    let existing: Vec<InstanceRecord> = core
        .records
        .instances(&name)
        .await?
        .into_iter()
        .filter(|i: &InstanceRecord| target.matches(&i.group, i.index, &i.id) && !i.ignore)
        .collect();
    let unresponsive = bind(&core, &log, &existing, true).await?.unresponsive;
    let running: Vec<InstanceRecord> = existing
        .into_iter()
        .filter(|i| i.state == DesiredState::Started || (hard && i.state == DesiredState::Stopped))
        .collect();
    let stage = log.stage("Stopping instances", Vec::new(), running.len() as u32);
    let count = running.len();
    for mut record in running {
        log.check()?;
        let responsive = !unresponsive.contains(&record.id);
        let step = stage.start(record.name());
        step.end(stop_instance(&core, &mut record, hard, responsive, skip_drain).await)?;
    }
    let what = if hard { "detached" } else { "stopped" };
    Ok(format!("deployment `{name}`: {count} instances {what}"))
}

/// Deletes every instance of the deployment (VMs deleted, disks orphaned) and the
/// deployment itself.
pub async fn delete(core: Arc<Core>, log: TaskLog, name: String) -> Result<String, JobError> {
    let existing: Vec<InstanceRecord> = core.records.instances(&name).await?;
    let unresponsive = bind(&core, &log, &existing, true).await?.unresponsive;
    let stage = log.stage("Deleting instances", Vec::new(), existing.len() as u32);
    let count = existing.len();
    for record in existing {
        log.check()?;
        let responsive = !unresponsive.contains(&record.id);
        let step = stage.start(record.name());
        let intent = Intent::DeleteDeployment;
        step.end(delete_instance(&core, record, responsive, false, intent).await)?;
    }
    compilation::delete_leftovers(&core, &log, &name).await?;
    // Every address the deployment held, static or dynamic, returns to its network.
    networking::release_where(&core, &name, |_| true).await?;
    templates::forget_unused(&core, &name).await?;
    core.records
        .write(vec![change::deployment_gone(&name)])
        .await?;
    Ok(format!(
        "deployment `{name}` deleted with {count} instances"
    ))
}
