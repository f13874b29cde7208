//! Running an errand (`bosh run-errand`), as BOSH's director runs one: under the
//! deployment's lock, an errand group's instance gets a VM with the deployed spec, its
//! first job's `bin/run` runs, and the VM goes again unless kept alive; a job with
//! `bin/run` placed in service groups runs on their VMs. Each instance's exit code and
//! output are the task's result output; `when-changed` skips a run when nothing changed
//! since the last successful one.

mod result;
pub(crate) mod select;

use tokio::task::JoinSet;

pub use result::{ErrandLogs, ErrandResult, ResultInstance, summary};
pub use select::{Errand, ErrandError, InstanceFilter, names};

use super::addresses;
use super::compilation;
use super::error::StepError;
use super::ids::new_id;
use super::limits::InstanceLimits;
use super::links;
use super::logs::{self, LogBundle, LogRequest};
use super::model::InstanceRecord;
use super::plan::{PlanOptions, plan};
use super::ports::Agents;
use super::ports::{DeployPorts, Ports};
use super::records::Records;
use super::records::change;
use super::snapshot::Snapshot;
use super::target::Target;
use super::task::{JobError, TaskLog};
use super::templates;
use super::update::{UpdateOptions, create_missing_vm, stop_instance, update_groups};
use super::update_order::update_order;
use super::{deploy, networking};

/// What `POST /deployments/NAME/errands/ERRAND/runs` asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrandRequest {
    pub name: String,
    /// Keep an errand group's VM after the run.
    pub keep_alive: bool,
    /// Skip the run when the instances and their specs are as at the last successful run.
    pub when_changed: bool,
    pub instances: Vec<InstanceFilter>,
}

/// What a run reports when `when-changed` skips it, as BOSH words it.
pub const SKIPPED: &str = "skipped - no changes detected";

/// The errands of the deployed manifest `text`.
///
/// # Errors
/// A manifest that no longer reads, or a store failure.
pub async fn list(records: &Records, text: String) -> Result<Vec<String>, StepError> {
    let snapshot = Snapshot::take(records, text, false).await?;
    Ok(names(&snapshot.manifest, &snapshot.releases))
}

pub async fn run(
    deploy_ports: DeployPorts,
    limits: InstanceLimits,
    log: TaskLog,
    deployment: String,
    request: ErrandRequest,
) -> Result<String, JobError> {
    let ports = &deploy_ports.ports;
    let text = ports
        .records
        .deployed_manifest(&deployment)
        .await?
        .ok_or_else(|| StepError::NotDeployed {
            deployment: deployment.clone(),
            purpose: "run errands of",
        })?;
    let stage = log.stage("Preparing deployment", Vec::new(), 1);
    let step = stage.start("Preparing deployment");
    let prepared = prepare(&ports.records, &limits, text, &deployment, &request).await;
    let (mut snapshot, errand, existing) = step.end(prepared)?;
    let hash = select::state_hash(&targets_specs(&snapshot, &errand, &existing));
    let last = ports.records.errand_run(&deployment, &request.name).await?;
    if request.when_changed && last.as_deref() == Some(hash.as_str()) {
        return Ok(SKIPPED.to_string());
    }
    // A run that does not finish well leaves nothing to skip the next one by.
    ports
        .records
        .write(vec![change::errand_run_gone(&deployment, &request.name)])
        .await?;
    log.check()?;
    let Outcome {
        results,
        logs_failed,
    } = match &errand {
        Errand::Group { group, job } => {
            let ran = run_group(
                &deploy_ports,
                &log,
                &mut snapshot,
                existing,
                group,
                job,
                &request,
            );
            ran.await?
        }
        Errand::Colocated { job } => {
            run_colocated(ports, &log, &snapshot, &existing, job, &request).await?
        }
    };
    let lines: String = results
        .iter()
        .map(|r| format!("{}\n", serde_json::to_string(r).expect("results serialize")))
        .collect();
    let mut writes = vec![change::task_result(log.task(), &lines)];
    if results.iter().all(|r| r.exit_code == 0) && logs_failed.is_none() {
        writes.push(change::errand_run(&deployment, &request.name, &hash));
    }
    ports.records.write(writes).await?;
    // As BOSH does: the results are kept, and the task fails for the logs it could not keep.
    if let Some(e) = logs_failed {
        return Err(e.into());
    }
    Ok(summary(&results))
}

/// The runs' results, and the first failure to keep an instance's logs.
struct Outcome {
    results: Vec<ErrandResult>,
    logs_failed: Option<StepError>,
}

/// One instance's run: its output, and its job logs kept as a bundle.
struct Ran {
    output: crate::agent::ErrandOutput,
    logs: Result<LogBundle, StepError>,
}

impl Ran {
    fn into_result(
        self,
        record: &InstanceRecord,
        errand: &str,
    ) -> (ErrandResult, Option<StepError>) {
        let (logs, failed) = match self.logs {
            Ok(bundle) => (ErrandLogs::of(&bundle), None),
            Err(e) => (ErrandLogs::default(), Some(e)),
        };
        (ErrandResult::of(record, errand, self.output, logs), failed)
    }
}

/// The deployed manifest read as a deploy reads it, the errand it names, and the
/// deployment's instances.
async fn prepare(
    records: &Records,
    limits: &InstanceLimits,
    text: String,
    deployment: &str,
    request: &ErrandRequest,
) -> Result<(Snapshot, Errand, Vec<InstanceRecord>), StepError> {
    let mut snapshot = Snapshot::take(records, text, false).await?;
    deploy::validate(&mut snapshot, limits)?;
    compilation::check(&snapshot)?;
    let errand = select::find(
        &snapshot.manifest,
        &snapshot.releases,
        &request.name,
        &request.instances,
    )?;
    let existing = records.instances(deployment).await?;
    Ok((snapshot, errand, existing))
}

/// Each target's id and the spec it runs, for the state hash: an errand group's first
/// instance with the spec it is given now, colocated targets with what they run.
fn targets_specs(
    snapshot: &Snapshot,
    errand: &Errand,
    existing: &[InstanceRecord],
) -> Vec<(String, String)> {
    let spec = |s: &crate::model::InstanceSpec| serde_json::to_string(s).expect("specs serialize");
    match errand {
        Errand::Group { group, .. } => {
            let Some(manifest_group) = snapshot
                .manifest
                .instance_groups
                .iter()
                .find(|g| &g.name == group)
            else {
                return Vec::new();
            };
            let desired = crate::plan::desired_spec(&snapshot.manifest, manifest_group);
            existing
                .iter()
                .filter(|i| &i.group == group && i.index == 0)
                .map(|i| (i.id.clone(), spec(&desired)))
                .collect()
        }
        Errand::Colocated { job } => existing
            .iter()
            .filter(|i| i.applied.as_ref().is_some_and(|a| a.jobs.contains(job)))
            .map(|i| {
                (
                    i.id.clone(),
                    i.applied.as_ref().map(spec).unwrap_or_default(),
                )
            })
            .collect(),
    }
}

/// The errand group's first instance: given a VM and the deployed spec, its errand run,
/// its VM deleted again unless `keep_alive` (also when the run failed).
async fn run_group(
    deploy_ports: &DeployPorts,
    log: &TaskLog,
    snapshot: &mut Snapshot,
    existing: Vec<InstanceRecord>,
    group: &str,
    job: &str,
    request: &ErrandRequest,
) -> Result<Outcome, JobError> {
    let ports = &deploy_ports.ports;
    let deployment = snapshot.manifest.name.clone();
    let networking = snapshot.networking();
    let mut plan = plan(
        &snapshot.manifest,
        existing,
        &snapshot.cloud_properties(),
        &PlanOptions {
            start: true,
            target: Target::instance(group, "0"),
            ..PlanOptions::default()
        },
    );
    let Some(target) = plan
        .instances()
        .find(|i| i.group == group && i.index == 0)
        .and_then(|i| i.existing.clone())
    else {
        return Err(StepError::Failed(format!(
            "Instance '{deployment}/{group}/0' doesn't exist; deploy the deployment again to create it"
        ))
        .into());
    };
    // Every instance keeps its addresses; only the errand's instance changes.
    for instance in plan.groups.iter_mut().flat_map(|g| &mut g.instances) {
        if instance.id.is_empty() {
            instance.id = new_id("instance");
        }
    }
    let (mut plan, _) = networking::decide_and_claim(
        &ports.addresses,
        &networking,
        &snapshot.manifest,
        |view| {
            let mut decided = plan.clone();
            let changes = addresses::decide(
                &networking,
                &snapshot.manifest,
                &mut decided,
                &Default::default(),
                view,
            )?;
            Ok((decided, changes))
        },
        |(_, changes)| changes,
    )
    .await?;
    plan.obsolete.clear();
    let foreign = deploy::foreign_providers(&ports.records, snapshot).await?;
    links::attach(
        &deployment,
        &snapshot.manifest,
        &snapshot.releases,
        &mut plan,
        &foreign,
        &snapshot.az_ids(),
    )
    .map_err(StepError::Failed)?;
    plan.decide_disks(&ports.records.disks(&deployment).await?);
    plan.groups.retain(|g| g.name == group);
    for g in &mut plan.groups {
        g.instances.retain(|i| i.id == target.id);
    }
    let declared = crate::config_server::declared(&snapshot.manifest)?;
    let variables = crate::config_server::resolve(
        &ports.records,
        &deployment,
        &snapshot.manifest,
        &declared,
        true,
        &links::foreign_references(&foreign),
    )
    .await?;
    let rendering = templates::render_plan(
        &deploy_ports.renderer,
        log,
        &deployment,
        &mut plan,
        &variables,
    );
    rendering.await?;
    let taken: Vec<(String, u32)> = plan
        .instances()
        .flat_map(|i| &i.addresses)
        .filter_map(|(network, ip)| ip.map(|ip| (network.clone(), ip)))
        .collect();
    log.check()?;
    let uncompiled = compilation::observe(&ports.records, snapshot).await?;
    let packages = compilation::decide(snapshot, &uncompiled)?;
    let locks = &deploy_ports.compile_locks;
    compilation::compile(ports, locks, log, snapshot, &networking, &taken, &packages).await?;
    log.check()?;
    let outcome = run_on_new_vm(ports, log, &deployment, &mut plan, &networking, job).await;
    let mut record = ports
        .records
        .instances(&deployment)
        .await?
        .into_iter()
        .find(|i| i.id == target.id)
        .unwrap_or(target);
    let name = record.name();
    if !request.keep_alive && record.vm_cid.is_some() {
        let stage = log.stage("Deleting errand instances", Vec::new(), 1);
        let step = stage.start(name.clone());
        let deleted = stop_instance(ports, &mut record, true, true, false).await;
        if let Err(e) = step.end(deleted) {
            // The run's own failure says more than the clean-up's.
            if outcome.is_ok() {
                return Err(e.into());
            }
            tracing::warn!(instance = %name, error = %e, "the errand's VM was not deleted");
        }
    }
    templates::forget_unused(&ports.records, &*deploy_ports.renderer, &deployment).await?;
    if outcome.is_err() {
        // A run stopped by a cancellation ends the task as cancelled, not failed.
        log.check()?;
    }
    let (result, logs_failed) = outcome?.into_result(&record, &request.name);
    Ok(Outcome {
        results: vec![result],
        logs_failed,
    })
}

/// Creates the errand instance's VM, applies and starts it as a deploy would, and runs
/// the job's `bin/run` on it.
async fn run_on_new_vm(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
    plan: &mut super::plan::DeploymentPlan,
    networking: &addresses::Networking,
    job: &str,
) -> Result<Ran, JobError> {
    let Some(instance) = plan.groups.iter_mut().flat_map(|g| &mut g.instances).next() else {
        return Err(StepError::Failed("the errand has no instance to run on".to_string()).into());
    };
    if instance
        .existing
        .as_ref()
        .is_none_or(|e| e.vm_cid.is_none())
    {
        let stage = log.stage("Creating missing vms", Vec::new(), 1);
        let step = stage.start(format!("{}/{}", instance.group, instance.index));
        let record = step.end(create_missing_vm(ports, deployment, instance).await)?;
        instance.created(record);
    }
    let update = UpdateOptions {
        global_addresses: networking.global(),
        ..UpdateOptions::default()
    };
    let order = update_order(&plan.groups, None, None);
    update_groups(ports, log, deployment, &plan.groups, &order, &update).await?;
    log.check()?;
    let record = ports
        .records
        .instances(deployment)
        .await?
        .into_iter()
        .find(|i| Some(&i.id) == plan.instances().next().map(|p| &p.id))
        .ok_or_else(|| StepError::Failed("the errand's instance is gone".to_string()))?;
    Ok(errand_on(ports, log, &record, job).await?)
}

/// Runs the errand on colocated instances, all at once.
async fn run_colocated(
    ports: &Ports,
    log: &TaskLog,
    snapshot: &Snapshot,
    existing: &[InstanceRecord],
    job: &str,
    request: &ErrandRequest,
) -> Result<Outcome, JobError> {
    let (targets, skipped) =
        select::colocated_targets(&snapshot.manifest, job, existing, &request.instances)
            .map_err(StepError::from)?;
    for instance in &skipped {
        crate::trace::note(crate::trace::Channel::Debug, || {
            format!(
                "Skipping instance {}: no matching VM reference was found",
                instance.name()
            )
        });
    }
    let mut running = JoinSet::new();
    for (slot, record) in targets.into_iter().enumerate() {
        let (ports, log, job, name) = (
            ports.clone(),
            log.clone(),
            job.to_string(),
            request.name.clone(),
        );
        running.spawn(crate::trace::within(async move {
            let ran = errand_on(&ports, &log, &record, &job).await;
            (slot, ran.map(|r| r.into_result(&record, &name)))
        }));
    }
    let results = match super::gather::gather(running).await {
        Ok(results) => results,
        Err(e) => {
            // A run stopped by a cancellation ends the task as cancelled, not failed.
            log.check()?;
            return Err(e.into());
        }
    };
    let mut logs_failed = None;
    let results = results
        .into_iter()
        .map(|(result, failed)| {
            if let Some(e) = failed {
                logs_failed.get_or_insert(e);
            }
            result
        })
        .collect();
    Ok(Outcome {
        results,
        logs_failed,
    })
}

/// The agent's run of `job`'s `bin/run` on `record`'s VM, as a step of "Running errand",
/// then the VM's job logs kept as a bundle, as BOSH keeps an errand's logs.
async fn errand_on(
    ports: &Ports,
    log: &TaskLog,
    record: &InstanceRecord,
    job: &str,
) -> Result<Ran, StepError> {
    let output = run_on(&ports.agents, log, record, job).await?;
    let fetched = logs::from_instance(&ports.agents, log, record, &LogRequest::default()).await;
    let logs = match fetched {
        Ok(bytes) => logs::keep(&ports.records, &ports.clock, &record.deployment, &bytes).await,
        Err(e) => Err(e),
    };
    Ok(Ran { output, logs })
}

async fn run_on(
    agents: &Agents,
    log: &TaskLog,
    record: &InstanceRecord,
    job: &str,
) -> Result<crate::agent::ErrandOutput, StepError> {
    let stage = log.stage("Running errand", Vec::new(), 1);
    let step = stage.start(record.name());
    let Some(agent) = record.agent_id.clone() else {
        return step.end(Err(StepError::Failed(format!(
            "{} has no VM to run the errand on",
            record.name()
        ))));
    };
    // A cancelled task stops its errand at once (the agent's run ends with the call),
    // as BOSH's agent cancels a running errand: a long `bin/run` would otherwise hold the
    // deployment until it ends.
    let running = agents.call(&agent, "run_errand", agents.agent.run_errand(&agent, job));
    let ran = log
        .unless_cancelled(|| format!("the errand on {}", record.name()), running)
        .await
        .and_then(|ran| {
            ran.map_err(|e| StepError::Failed(format!("run_errand on {}: {e}", record.name())))
        });
    step.end(ran)
}
