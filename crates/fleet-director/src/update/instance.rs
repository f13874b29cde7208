//! One instance's update: stop (prepare, drain, stop), a new VM when the old one cannot
//! be reconfigured, the persistent disk, apply, start, and watching the jobs come up.

use crate::error::CallContext;
use crate::ports::Agents;
use crate::records::{Records, change};

use tokio::time::sleep;

use super::super::agent::{Drain, Intent, JobState};
use super::super::error::StepError;
use super::super::manifest::WatchTime;
use super::super::model::{DesiredState, InstanceRecord};
use super::super::plan::{Change, InstancePlan};
use super::super::task::Stage;
use super::disk::converge_disk;
use super::jobs::stop_jobs;
use super::options::UpdateOptions;
use super::records::persist;
use super::vm::{create_missing_vm, create_vm, delete_vm};
use crate::ports::Ports;

pub async fn update_instance(
    ports: &Ports,
    stage: &Stage,
    deployment: &str,
    plan: InstancePlan,
    watch_time: WatchTime,
    canary: bool,
    options: &UpdateOptions,
) -> Result<(), StepError> {
    let label = |record: &InstanceRecord| {
        let suffix = if canary { " (canary)" } else { "" };
        format!("{}{suffix}", record.name())
    };
    let mut plan = plan;
    let mut record = match plan.existing.clone() {
        Some(record) => record,
        None => {
            let record = create_missing_vm(ports, deployment, &plan).await?;
            plan.created(record.clone());
            record
        }
    };
    let step = stage.start(label(&record));
    step.end(procedure(ports, &mut record, &plan, watch_time, options).await)
}

async fn procedure(
    ports: &Ports,
    record: &mut InstanceRecord,
    plan: &InstancePlan,
    watch_time: WatchTime,
    options: &UpdateOptions,
) -> Result<(), StepError> {
    let name = record.name();
    let unresponsive = plan.changes.contains(&Change::Unresponsive);
    // Whatever its VM runs is drained and stopped first, also after an update that
    // failed halfway (its spec unrecorded), as BOSH's director does; only a VM made for
    // it in this deploy has nothing to stop.
    let running = record.vm_cid.is_some() && !unresponsive && !plan.changes.contains(&Change::New);
    // From here on the instance is unfinished until it runs the desired spec.
    record.applied = None;
    persist(&ports.records, record).await?;
    if running {
        let agent = record.agent_id.clone().unwrap_or_default();
        if !plan.needs_new_vm() {
            ports
                .agents
                .call(
                    &agent,
                    "prepare",
                    ports.agents.agent.prepare(&agent, &plan.desired),
                )
                .await
                .for_subject("prepare", &name)?;
        }
        // Drain scripts hear of an update in place; a VM that goes or a disk that changes
        // shuts the jobs down, as BOSH's director tells them.
        let drain = if plan.needs_new_vm() {
            Drain::Shutdown(Intent::DeleteVm)
        } else if plan.changes.contains(&Change::PersistentDisk) {
            Drain::Shutdown(Intent::KeepVm)
        } else {
            Drain::Update(&plan.desired)
        };
        // A stopped instance being started has no jobs running to drain.
        if record.state == DesiredState::Started {
            stop_jobs(&ports.agents, &agent, &name, options.skip_drain, drain).await?;
        }
        if ports.snapshots
            && let Some(disk) = &record.disk_cid
        {
            ports
                .cpi
                .snapshot_disk(disk)
                .await
                .for_subject("snapshot_disk", &name)?;
        }
    }
    let fresh_vm = record.vm_cid.is_none() || plan.needs_new_vm();
    if fresh_vm {
        delete_vm(ports, record, !unresponsive).await?;
        create_vm(ports, record, plan).await?;
    }
    converge_disk(ports, record, plan, fresh_vm).await?;
    update_dns(&ports.records, record, plan).await?;
    let agent = record.agent_id.clone().unwrap_or_default();
    ports
        .agents
        .call(
            &agent,
            "apply",
            ports.agents.agent.apply(&agent, &plan.desired),
        )
        .await
        .for_subject("apply", &name)?;
    record.state = DesiredState::Started;
    ports
        .agents
        .call(&agent, "start", ports.agents.agent.start(&agent))
        .await
        .for_subject("start", &name)?;
    watch(&ports.agents, &agent, &name, watch_time).await?;
    // As BOSH's director runs it: once `get_state` says every process runs.
    ports
        .agents
        .call(
            &agent,
            "run_script post-start",
            ports.agents.agent.run_script(&agent, "post-start"),
        )
        .await
        .for_subject("run_script post-start", &name)?;
    record.applied = Some(plan.desired.clone());
    persist(&ports.records, record).await?;
    // The new VM runs on its new addresses: the old ones can go.
    let owner = crate::network::Owner {
        deployment: record.deployment.clone(),
        instance: record.id.clone(),
    };
    crate::networking::release(
        &ports.addresses,
        options.global_addresses,
        &owner,
        &plan.obsolete_addresses,
    )
    .await
}

/// The instance's DNS records point at its addresses (`<id>.<group>.<network>.<deployment>.bosh`).
async fn update_dns(
    records: &Records,
    record: &InstanceRecord,
    plan: &InstancePlan,
) -> Result<(), StepError> {
    let writes = plan
        .addresses
        .iter()
        .filter_map(|(network, ip)| {
            let ip = crate::network::to_ip((*ip)?).to_string();
            let name = format!(
                "{}.{}.{network}.{}.bosh",
                record.id, record.group, record.deployment
            );
            Some(change::dns(&name, &record.deployment, &ip))
        })
        .collect::<Vec<_>>();
    if writes.is_empty() {
        return Ok(());
    }
    records.write(writes).await.map_err(StepError::from)
}

/// Polls `get_state` on the director's schedule: after the watch time's minimum, then in
/// equal steps until its maximum; the jobs must be running by then.
async fn watch(
    agents: &Agents,
    agent: &str,
    name: &str,
    watch: WatchTime,
) -> Result<(), StepError> {
    let mut failing = Vec::new();
    for pause in watch.schedule() {
        sleep(pause).await;
        let state = agents
            .call(agent, "get_state", agents.agent.get_state(agent))
            .await
            .for_subject("get_state", name)?;
        if state.job_state == JobState::Running {
            return Ok(());
        }
        failing = state.failing_jobs;
    }
    Err(StepError::Failed(format!(
        "'{name}' is not running after update. Review logs for failed jobs: {}",
        if failing.is_empty() {
            "(none reported)".to_string()
        } else {
            failing.join(", ")
        }
    )))
}
