//! The persistent disk of an instance brought to what its plan decided
//! ([`crate::disk_plan`]): created, attached and mounted; replaced (data migrated, old
//! disk orphaned); orphaned when no longer wanted.

use super::super::error::StepError;
use super::super::model::{DiskRecord, InstanceRecord};
use super::super::plan::{Change, InstancePlan};
use super::records::{orphaned, persist};
use crate::cpi::Cpi;
use crate::disk_plan::DiskChange;
use crate::error::CallContext;
use crate::ports::Agents;
use crate::ports::Ports;
use crate::records::{Records, change};

/// Carries out the plan's disk change. `fresh_vm`: the VM was just created, so a disk
/// that stays (or whose data moves) is attached to it first; an unfinished update attaches
/// a kept disk again too, since a crash may have cut the last attach short.
pub async fn converge_disk(
    ports: &Ports,
    record: &mut InstanceRecord,
    plan: &InstancePlan,
    fresh_vm: bool,
) -> Result<(), StepError> {
    let name = record.name();
    let (Some(vm), Some(agent)) = (record.vm_cid.clone(), record.agent_id.clone()) else {
        return Ok(());
    };
    let (old, size, reuse) = match &plan.disk {
        DiskChange::None => return Ok(()),
        DiskChange::Keep { cid } => {
            if fresh_vm || plan.changes.contains(&Change::Unapplied) {
                // Attaching and mounting again is harmless and finishes a step a crash
                // may have cut short.
                attach_and_mount(&*ports.cpi, &ports.agents, &vm, &agent, cid, &name).await?;
            }
            return Ok(());
        }
        DiskChange::Replace { old, size, reuse } => (old.clone(), *size, reuse.clone()),
    };
    if let Some(cid) = &old
        && fresh_vm
    {
        // The old disk must be reachable on the new VM to move its data.
        attach_and_mount(&*ports.cpi, &ports.agents, &vm, &agent, cid, &name).await?;
    }
    let mut writes = Vec::new();
    let new_disk = if size > 0 {
        let disk = match reuse {
            Some(disk) => disk,
            None => {
                create_disk(
                    &ports.records,
                    &*ports.cpi,
                    record,
                    size,
                    &plan.desired.disk_cloud_properties,
                    &vm,
                )
                .await?
            }
        };
        attach_and_mount(&*ports.cpi, &ports.agents, &vm, &agent, &disk, &name).await?;
        Some(disk)
    } else {
        None
    };
    if let Some(old_cid) = old {
        if let Some(new_cid) = &new_disk {
            ports
                .agents
                .call(
                    &agent,
                    "migrate_disk",
                    ports.agents.agent.migrate_disk(&agent, &old_cid, new_cid),
                )
                .await
                .for_subject("migrate_disk", &name)?;
        }
        ports
            .agents
            .call(
                &agent,
                "unmount_disk",
                ports.agents.agent.unmount_disk(&agent, &old_cid),
            )
            .await
            .for_subject("unmount_disk", &name)?;
        ports
            .cpi
            .detach_disk(&vm, &old_cid)
            .await
            .for_subject("detach_disk", &name)?;
        let orphan = orphaned(&ports.records, &ports.clock, &old_cid, record).await?;
        writes.push(change::disk(&orphan));
    }
    record.disk_cid = new_disk;
    ports.records.write(writes).await?;
    persist(&ports.records, record).await
}

/// Attaches `disk` to `vm` and has the agent mount it.
async fn attach_and_mount(
    cpi: &dyn Cpi,
    agents: &Agents,
    vm: &str,
    agent: &str,
    disk: &str,
    name: &str,
) -> Result<(), StepError> {
    cpi.attach_disk(vm, disk)
        .await
        .for_subject("attach_disk", name)?;
    agents
        .call(agent, "mount_disk", agents.agent.mount_disk(agent, disk))
        .await
        .for_subject("mount_disk", name)?;
    Ok(())
}

/// Creates and records a disk for the instance; recorded at once, so a crash from here on
/// leaves a disk the next deploy knows.
async fn create_disk(
    records: &Records,
    cpi: &dyn Cpi,
    record: &InstanceRecord,
    wanted: u64,
    properties: &serde_json::Map<String, serde_json::Value>,
    vm: &str,
) -> Result<String, StepError> {
    let disk = cpi
        .create_disk(wanted, properties, vm)
        .await
        .for_subject("create_disk", &record.name())?;
    let disk_record = DiskRecord {
        cid: disk.clone(),
        deployment: record.deployment.clone(),
        instance_id: Some(record.id.clone()),
        size: wanted,
        cloud_properties: properties.clone(),
        orphaned: false,
        orphaned_at: None,
        instance_name: None,
        az: record.az.clone(),
    };
    records.write(vec![change::disk(&disk_record)]).await?;
    Ok(disk)
}
