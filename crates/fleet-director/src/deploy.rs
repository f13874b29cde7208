//! The deploy procedure (seed 000) as far as this version implements it: validate, bind
//! existing VMs, plan, delete what is no longer wanted, create missing VMs, and update
//! instance groups. Recreate and delete are deploys of the stored manifest with other
//! options. Compilation and IP management slot in between binding and VM creation.

use super::records::change;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::task::JoinSet;

use super::Core;
use super::agent::Intent;
use super::compilation;
use super::dry_run;
use super::error::StepError;
use super::limits::InstanceLimits;
use super::manifest::Count;
use super::model::{DeploymentRecord, DesiredState, InstanceRecord};
use super::network::{Owner, to_u32};
use super::networking::{self, Reserving};
use super::plan::{Change, InstancePlan, PlanOptions, plan};
use super::snapshot::Snapshot;
use super::target::Target;
use super::task::{JobError, TaskLog};
use super::templates;
use super::update::{
    UpdateOptions, create_missing_vm, delete_instance, new_record, persist, stop_instance,
    update_groups,
};
use super::validate;

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
        let (id, name, state) = joined.map_err(|e| format!("internal error: {e}"))?;
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

/// The deploy of a manifest found valid, from binding on.
async fn deploy_valid(
    core: Arc<Core>,
    log: TaskLog,
    snapshot: Snapshot,
    options: DeployOptions,
) -> Result<String, JobError> {
    let networking = snapshot.networking();
    let cloud_config = snapshot.cloud_version();
    let manifest = &snapshot.manifest;
    let name = manifest.name.clone();
    let existing: Vec<InstanceRecord> = core.records.instances(&name).await?;
    let Bound {
        unresponsive,
        reported,
    } = bind(&core, &log, &existing, options.fix).await?;
    let mut plan = plan(
        manifest,
        existing,
        &snapshot.cloud_properties(),
        &PlanOptions {
            recreate: options.recreate,
            unresponsive: unresponsive.clone(),
            start: options.start,
            restart: options.restart,
            target: options.target.clone(),
        },
    );
    let ignored: Vec<String> = plan
        .obsolete
        .iter()
        .filter(|i| i.ignore)
        .map(InstanceRecord::name)
        .collect();
    if !ignored.is_empty() {
        return Err(StepError::Failed(format!(
            "the manifest deletes {}, which the operator set aside with `bosh ignore`; unignore              them first, or keep them in the manifest",
            ignored.join(", ")
        ))
        .into());
    }
    if options.dry_run {
        // The addresses are decided against the store as a deploy would, and nothing is
        // written.
        networking::reserve(
            &core,
            &networking,
            manifest,
            &mut plan,
            &reported,
            Reserving::DryRun,
        )
        .await?;
        let instances: Vec<&InstancePlan> = plan.instances().collect();
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
    networking::reserve(
        &core,
        &networking,
        manifest,
        &mut plan,
        &reported,
        Reserving::Apply,
    )
    .await?;
    record_errand_instances(&core, &name, &mut plan).await?;
    log.check()?;
    templates::render_plan(&core, &log, &name, &mut plan).await?;
    let global = networking.global();
    let changed = plan.changed_instances();
    let obsolete = plan.obsolete.len();

    if obsolete > 0 {
        let stage = log.stage("Deleting unneeded instances", Vec::new(), obsolete as u32);
        for record in std::mem::take(&mut plan.obsolete) {
            log.check()?;
            let responsive = !unresponsive.contains(&record.id);
            let step = stage.start(record.name());
            let addresses = networking::held_by(&core, &name, &record.id).await?;
            let owner = Owner {
                deployment: name.clone(),
                instance: record.id.clone(),
            };
            let intent = Intent::DeleteInstance;
            let deleted = delete_instance(&core, record, responsive, options.skip_drain, intent);
            step.end(deleted.await)?;
            networking::release(&core, global, &owner, &addresses).await?;
        }
    }

    // The instances' addresses, which compilation workers must not take.
    let taken: Vec<(String, u32)> = plan
        .instances()
        .flat_map(|i| &i.addresses)
        .filter_map(|(network, ip)| ip.map(|ip| (network.clone(), ip)))
        .collect();
    log.check()?;
    compilation::compile(&core, &log, &snapshot, &networking, &taken).await?;
    log.check()?;

    let missing: Vec<_> = plan
        .groups
        .iter_mut()
        .flat_map(|g| g.instances.iter_mut())
        .filter(|i| i.changes.contains(&Change::New))
        .collect();
    if !missing.is_empty() {
        let stage = log.stage("Creating missing vms", Vec::new(), missing.len() as u32);
        let mut created = JoinSet::new();
        for (slot, instance) in missing.iter().enumerate() {
            let (core, stage, name, instance) = (
                Arc::clone(&core),
                stage.clone(),
                name.clone(),
                (*instance).clone(),
            );
            created.spawn(crate::trace::within(async move {
                let step = stage.start(format!("{}/{}", instance.group, instance.index));
                (
                    slot,
                    step.end(create_missing_vm(&core, &name, &instance).await),
                )
            }));
        }
        let mut records = vec![None; missing.len()];
        let mut first_error = None;
        while let Some(joined) = created.join_next().await {
            match joined {
                Ok((slot, Ok(record))) => records[slot] = Some(record),
                Ok((_, Err(e))) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(StepError::Failed(format!("internal error: {e}")));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e.into());
        }
        for (instance, record) in missing.into_iter().zip(records) {
            instance.existing = record;
        }
    }

    let update = UpdateOptions {
        skip_drain: options.skip_drain,
        canaries: options.canaries,
        max_in_flight: options.max_in_flight,
        global_addresses: global,
    };
    log.check()?;
    update_groups(&core, &log, &name, &plan.groups, &update).await?;
    post_deploy(&core, &name).await?;
    templates::forget_unused(&core, &name).await?;
    core.records
        .write(vec![change::deployment(&DeploymentRecord {
            name: name.clone(),
            manifest: Some(snapshot.text),
            cloud_config,
            runtime_configs: snapshot.runtime_versions,
        })])
        .await?;
    Ok(format!(
        "deployment `{name}`: {changed} instances updated, {obsolete} deleted"
    ))
}

/// The instances of errand groups are recorded with their addresses and no VM, as BOSH
/// binds them; their VMs come when the errand runs (see [`crate::errand`]). A deploy
/// changes nothing else of them.
async fn record_errand_instances(
    core: &Core,
    deployment: &str,
    plan: &mut super::plan::DeploymentPlan,
) -> Result<(), StepError> {
    for group in plan.groups.iter_mut().filter(|g| g.errand) {
        for instance in &mut group.instances {
            if instance.existing.is_none() {
                let record = new_record(deployment, instance, DesiredState::Detached);
                persist(core, &record).await?;
                instance.id = record.id.clone();
                instance.existing = Some(record);
            }
            instance.changes.clear();
        }
    }
    Ok(())
}

/// Every started instance's `post-deploy` scripts at once, once all instances started;
/// the first failure fails the deploy, naming the instance.
async fn post_deploy(core: &Arc<Core>, deployment: &str) -> Result<(), JobError> {
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
            .map_err(|e| format!("post-deploy of {}: {e}", instance.name()))
        }));
    }
    let mut first_error = None;
    while let Some(joined) = running.join_next().await {
        let failed = match joined {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(format!("internal error: {e}")),
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
        .ok_or_else(|| {
            format!("deployment `{name}` has no successfully deployed manifest to recreate")
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
