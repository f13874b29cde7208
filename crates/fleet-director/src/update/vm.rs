//! VM creation and deletion, with every record written before the cloud call that
//! depends on it.

use super::super::agent::{Drain, Intent};
use super::super::cpi::VmRequest;
use super::super::error::StepError;
use super::super::ids::new_id;
use super::super::model::{DesiredState, InstanceRecord, VmRecord};
use super::super::plan::InstancePlan;
use super::disk::converge_disk;
use super::jobs::stop_jobs;
use super::records::{orphaned, persist};
use crate::error::CallContext;
use crate::ports::Ports;
use crate::records::{Records, change};
use crate::unsettled::UnsettledVm;

/// Creates the VM and persistent disk of a new instance (or one that lost its VM).
pub async fn create_missing_vm(
    ports: &Ports,
    deployment: &str,
    plan: &InstancePlan,
) -> Result<InstanceRecord, StepError> {
    let mut record = plan
        .existing
        .clone()
        .unwrap_or_else(|| new_record(deployment, plan, DesiredState::Started));
    persist(&ports.records, &record).await?;
    if record.vm_cid.is_none() {
        create_vm(ports, &mut record, plan).await?;
        converge_disk(ports, &mut record, plan, true).await?;
    }
    Ok(record)
}

/// The record of an instance the plan adds, with no VM yet.
pub fn new_record(deployment: &str, plan: &InstancePlan, state: DesiredState) -> InstanceRecord {
    InstanceRecord {
        id: if plan.id.is_empty() {
            new_id("instance")
        } else {
            plan.id.clone()
        },
        deployment: deployment.to_string(),
        group: plan.group.clone(),
        index: plan.index,
        az: plan.az.clone(),
        vm_cid: None,
        agent_id: None,
        vm_stemcell: None,
        vm_type: None,
        vm_networks: Vec::new(),
        disk_cid: None,
        applied: None,
        state,
        ignore: false,
    }
}

pub async fn create_vm(
    ports: &Ports,
    record: &mut InstanceRecord,
    plan: &InstancePlan,
) -> Result<(), StepError> {
    let name = record.name();
    let agent_id = new_id("agent");
    let stemcell_cid = ports.records.stemcell_cid(&plan.desired.stemcell).await?;
    let request = VmRequest {
        agent_id: agent_id.clone(),
        stemcell: plan.desired.stemcell.clone(),
        stemcell_cid,
        vm_type: plan.desired.vm_type.clone(),
        deployment: record.deployment.clone(),
        instance: format!("{}/{}", record.group, record.index),
        networks: plan
            .addresses
            .iter()
            .map(|(network, ip)| (network.clone(), ip.map(crate::network::to_ip)))
            .collect(),
        network_settings: plan.network_settings.clone(),
        cloud_properties: plan.desired.cloud_properties.clone(),
        instance_id: Some(record.id.clone()),
        az: record.az.clone(),
    };
    let created =
        crate::unsettled::create_vm(&*ports.cpi, &ports.records, &request, &name, |cid| {
            record.vm_cid = Some(cid.to_string());
            record.agent_id = Some(agent_id.clone());
            record.vm_stemcell = Some(plan.desired.stemcell.clone());
            record.vm_type = plan.desired.vm_type.clone();
            record.vm_networks = plan.desired.networks.clone();
            let vm = VmRecord {
                cid: cid.to_string(),
                agent_id: agent_id.clone(),
                deployment: record.deployment.clone(),
                instance_id: Some(record.id.clone()),
                stemcell: plan.desired.stemcell.clone(),
                created_at: Some(ports.clock.unix_secs()),
            };
            vec![change::instance(record), change::vm(&vm)]
        });
    created.await?.for_subject("create_vm", &name)?;
    Ok(())
}

/// Deletes the instance's VM; with a responsive agent its disk is unmounted first.
pub async fn delete_vm(
    ports: &Ports,
    record: &mut InstanceRecord,
    agent_responsive: bool,
) -> Result<(), StepError> {
    let Some(cid) = record.vm_cid.clone() else {
        return Ok(());
    };
    let name = record.name();
    if let (Some(disk), Some(agent)) = (&record.disk_cid, &record.agent_id)
        && agent_responsive
    {
        let agents = &ports.agents;
        agents
            .call(
                agent,
                "unmount_disk",
                agents.agent.unmount_disk(agent, disk),
            )
            .await
            .for_subject("unmount_disk", &name)?;
    }
    if let Some(disk) = &record.disk_cid {
        ports
            .cpi
            .detach_disk(&cid, disk)
            .await
            .for_subject("detach_disk", &name)?;
    }
    // Forgotten first, with a note that names it: a crash from here on leaves a VM that
    // is deleted later (see `crate::unsettled`), not a record pointing at a deleted one.
    let note = UnsettledVm {
        agent_id: record.agent_id.clone().unwrap_or_else(|| cid.clone()),
        instance: name.clone(),
        cid: Some(cid.clone()),
    };
    forget_vm_noting(&ports.records, record, Some(&note)).await?;
    ports
        .cpi
        .delete_vm(&cid)
        .await
        .map_err(|e| StepError::Failed(format!("delete_vm for {name}: {e}")))?;
    ports
        .records
        .write(vec![change::vm_settled(&note.agent_id)])
        .await
        .map_err(StepError::from)
}

/// Forgets the instance's VM without asking the cloud: for a VM the cloud no longer has
/// or one the operator gives up on (cloud check).
pub async fn forget_vm(records: &Records, record: &mut InstanceRecord) -> Result<(), StepError> {
    forget_vm_noting(records, record, None).await
}

/// Forgets the instance's VM, noting `unsettled` in the same write when it is about to
/// be deleted.
async fn forget_vm_noting(
    records: &Records,
    record: &mut InstanceRecord,
    unsettled: Option<&UnsettledVm>,
) -> Result<(), StepError> {
    let Some(cid) = record.vm_cid.take() else {
        return Ok(());
    };
    record.agent_id = None;
    record.vm_stemcell = None;
    record.vm_type = None;
    record.vm_networks.clear();
    let mut writes = vec![change::instance(record), change::vm_gone(&cid)];
    writes.extend(unsettled.map(|vm| change::vm_unsettled(&record.deployment, vm)));
    records.write(writes).await.map_err(StepError::from)
}

/// Removes an instance that is no longer wanted: its jobs are drained and stopped (when
/// its agent answers), its VM deleted and its persistent disk orphaned. `intent` says
/// whether its deployment goes too.
pub async fn delete_instance(
    ports: &Ports,
    mut record: InstanceRecord,
    agent_responsive: bool,
    skip_drain: bool,
    intent: Intent,
) -> Result<(), StepError> {
    if agent_responsive && let Some(agent) = record.agent_id.clone() {
        let drain = Drain::Shutdown(intent);
        stop_jobs(&ports.agents, &agent, &record.name(), skip_drain, drain).await?;
    }
    delete_vm(ports, &mut record, agent_responsive).await?;
    let mut writes = vec![change::instance_gone(&record.id)];
    // Its DNS records go with it.
    let networks = record
        .applied
        .as_ref()
        .map(|a| a.networks.clone())
        .unwrap_or_default();
    for network in networks.iter().chain(&record.vm_networks) {
        let name = network.split_once('/').map_or(network.as_str(), |(n, _)| n);
        writes.push(change::dns_gone(&format!(
            "{}.{}.{name}.{}.bosh",
            record.id, record.group, record.deployment
        )));
    }
    if let Some(disk) = &record.disk_cid {
        let orphan = orphaned(&ports.records, &ports.clock, disk, &record).await?;
        writes.push(change::disk(&orphan));
    }
    ports.records.write(writes).await.map_err(StepError::from)
}
