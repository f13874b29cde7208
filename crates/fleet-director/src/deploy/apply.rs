//! A decided deploy carried out, step by step, each recorded before the one that depends
//! on it: errand instances recorded, templates rendered, unwanted instances deleted,
//! packages compiled, missing VMs created, groups updated in the plan's order, then
//! `post-deploy` and the deployment's record. The store's addresses were claimed when the
//! plan was decided ([`crate::networking::decide_and_claim`]).

use tokio::task::JoinSet;

use super::decide::DeployPlan;
use super::options::DeployOptions;
use crate::addresses::Networking;
use crate::agent::Intent;
use crate::compilation;
use crate::error::StepError;
use crate::gather::gather;
use crate::model::{DeploymentRecord, DesiredState};
use crate::network::Owner;
use crate::networking;
use crate::plan::{Change, DeploymentPlan};
use crate::ports::{DeployPorts, Ports};
use crate::records::change;
use crate::snapshot::Snapshot;
use crate::task::{JobError, TaskLog};
use crate::templates;
use crate::update::{
    UpdateOptions, create_missing_vm, delete_instance, new_record, persist, update_groups,
};

pub async fn apply(
    deploy: &DeployPorts,
    log: TaskLog,
    snapshot: Snapshot,
    networking: Networking,
    mut plan: DeployPlan,
    variables: &fleet_variables::Values,
    options: &DeployOptions,
) -> Result<String, JobError> {
    let name = snapshot.manifest.name.clone();
    let cloud_config = snapshot.cloud_version();
    let global = networking.global();
    let ports = &deploy.ports;
    record_errand_instances(ports, &name, &mut plan.instances).await?;
    log.check()?;
    let rendering = templates::render_plan(
        &deploy.renderer,
        &log,
        &name,
        &mut plan.instances,
        variables,
    );
    rendering.await?;
    let changed = plan.instances.changed_instances();
    let deleted = plan.deletions.len();

    if deleted > 0 {
        let stage = log.stage("Deleting unneeded instances", Vec::new(), deleted as u32);
        for deletion in std::mem::take(&mut plan.deletions) {
            log.check()?;
            let step = stage.start(deletion.record.name());
            let owner = Owner {
                deployment: name.clone(),
                instance: deletion.record.id.clone(),
            };
            let gone = delete_instance(
                ports,
                deletion.record,
                deletion.responsive,
                options.skip_drain,
                Intent::DeleteInstance,
            );
            step.end(gone.await)?;
            networking::release(&ports.addresses, global, &owner, &deletion.addresses).await?;
        }
    }

    // The instances' addresses, which compilation workers must not take.
    let taken: Vec<(String, u32)> = plan
        .instances
        .instances()
        .flat_map(|i| &i.addresses)
        .filter_map(|(network, ip)| ip.map(|ip| (network.clone(), ip)))
        .collect();
    log.check()?;
    compilation::compile(
        ports,
        &deploy.compile_locks,
        &log,
        &snapshot,
        &networking,
        &taken,
        &plan.compilation,
    )
    .await?;
    create_missing_vms(ports, &log, &name, &mut plan.instances).await?;

    let update = UpdateOptions {
        skip_drain: options.skip_drain,
        global_addresses: global,
    };
    log.check()?;
    update_groups(
        ports,
        &log,
        &name,
        &plan.instances.groups,
        &plan.order,
        &update,
    )
    .await?;
    post_deploy(ports, &name).await?;
    templates::forget_unused(&ports.records, &*deploy.renderer, &name).await?;
    ports
        .records
        .write(vec![change::deployment(&DeploymentRecord {
            name: name.clone(),
            manifest: Some(snapshot.text),
            cloud_config,
            runtime_configs: snapshot.runtime_versions,
            latest: snapshot.latest,
            providers: plan.links.providers,
            consumers: plan.links.consumers,
        })])
        .await?;
    Ok(format!(
        "deployment `{name}`: {changed} instances updated, {deleted} deleted"
    ))
}

/// The instances of errand groups the deployment has no record of yet are recorded with
/// their addresses and no VM.
async fn record_errand_instances(
    ports: &Ports,
    deployment: &str,
    plan: &mut DeploymentPlan,
) -> Result<(), StepError> {
    for group in plan.groups.iter_mut().filter(|g| g.errand) {
        for instance in &mut group.instances {
            if instance.existing.is_none() {
                let record = new_record(deployment, instance, DesiredState::Detached);
                persist(&ports.records, &record).await?;
                instance.existing = Some(record);
            }
        }
    }
    Ok(())
}

/// The VMs of new instances, all at once, before any group updates.
async fn create_missing_vms(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
    plan: &mut DeploymentPlan,
) -> Result<(), JobError> {
    let missing: Vec<_> = plan
        .groups
        .iter_mut()
        .flat_map(|g| g.instances.iter_mut())
        .filter(|i| i.changes.contains(&Change::New))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let stage = log.stage("Creating missing vms", Vec::new(), missing.len() as u32);
    let mut created = JoinSet::new();
    for (slot, instance) in missing.iter().enumerate() {
        let (ports, stage, deployment, instance) = (
            ports.clone(),
            stage.clone(),
            deployment.to_string(),
            (*instance).clone(),
        );
        created.spawn(crate::trace::within(async move {
            let step = stage.start(format!("{}/{}", instance.group, instance.index));
            (
                slot,
                step.end(create_missing_vm(&ports, &deployment, &instance).await),
            )
        }));
    }
    let records = gather(created).await?;
    for (instance, record) in missing.into_iter().zip(records) {
        instance.created(record);
    }
    Ok(())
}

/// Every started instance's `post-deploy` scripts at once, once all instances started;
/// the first failure fails the deploy, naming the instance.
async fn post_deploy(ports: &Ports, deployment: &str) -> Result<(), JobError> {
    let mut running = tokio::task::JoinSet::new();
    for instance in ports.records.instances(deployment).await? {
        let (Some(agent), DesiredState::Started, false) =
            (instance.agent_id.clone(), instance.state, instance.ignore)
        else {
            continue;
        };
        let agents = ports.agents.clone();
        running.spawn(crate::trace::within(async move {
            agents
                .call(
                    &agent,
                    "run_script post-deploy",
                    agents.agent.run_script(&agent, "post-deploy"),
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
