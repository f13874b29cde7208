//! The persistent disk of an instance brought to what its plan wants: created, attached
//! and mounted; replaced (data migrated, old disk orphaned) when its size or its disk
//! type's cloud properties change; orphaned when no longer wanted.

use super::super::Core;
use super::super::error::StepError;
use super::super::model::{DiskRecord, InstanceRecord};
use super::super::plan::{Change, InstancePlan};
use super::disk_step::{CurrentDisk, DiskStep, disk_step};
use super::records::{orphaned, persist};
use crate::error::CallContext;
use crate::records::change;

/// `fresh_vm`: the VM was just created, so the existing disk must be attached to it.
pub async fn converge_disk(
    core: &Core,
    record: &mut InstanceRecord,
    plan: &InstancePlan,
    fresh_vm: bool,
) -> Result<(), StepError> {
    let name = record.name();
    let (Some(vm), Some(agent)) = (record.vm_cid.clone(), record.agent_id.clone()) else {
        return Ok(());
    };
    let wanted = plan.desired.persistent_disk;
    let properties = &plan.desired.disk_cloud_properties;
    let current = match &record.disk_cid {
        Some(cid) => core.records.disk(cid).await?.map(|d| CurrentDisk {
            cid: d.cid,
            size: d.size,
            cloud_properties: d.cloud_properties,
        }),
        None => None,
    };
    let unfinished = plan.changes.contains(&Change::Unapplied);
    let (old, reattach) = match disk_step(current, wanted, properties, fresh_vm, unfinished) {
        DiskStep::Nothing => return Ok(()),
        DiskStep::Keep { cid, reattach } => {
            if reattach {
                // Attaching and mounting again is harmless and finishes a step a crash
                // may have cut short.
                attach_and_mount(core, &vm, &agent, &cid, &name).await?;
            }
            return Ok(());
        }
        DiskStep::Replace { old, reattach, .. } => (old, reattach),
    };
    if let Some(cid) = &old
        && reattach
    {
        // The old disk must be reachable on the new VM to move its data.
        attach_and_mount(core, &vm, &agent, cid, &name).await?;
    }
    let mut writes = Vec::new();
    let new_disk = if wanted > 0 {
        // Only a migration or an update cut short can have left a disk behind; a first
        // disk skips the look-up, which reads every disk of the deployment.
        let leftover = if old.is_some() || unfinished {
            left_from_a_failed_migration(core, record, wanted, properties, old.as_deref()).await?
        } else {
            None
        };
        let disk = match leftover {
            Some(disk) => disk,
            None => create_disk(core, record, wanted, properties, &vm).await?,
        };
        attach_and_mount(core, &vm, &agent, &disk, &name).await?;
        Some(disk)
    } else {
        None
    };
    if let Some(old_cid) = old {
        if let Some(new_cid) = &new_disk {
            core.agent_call(
                &agent,
                "migrate_disk",
                core.agent.migrate_disk(&agent, &old_cid, new_cid),
            )
            .await
            .for_subject("migrate_disk", &name)?;
        }
        core.agent_call(
            &agent,
            "unmount_disk",
            core.agent.unmount_disk(&agent, &old_cid),
        )
        .await
        .for_subject("unmount_disk", &name)?;
        core.cpi
            .detach_disk(&vm, &old_cid)
            .await
            .for_subject("detach_disk", &name)?;
        let orphan = orphaned(core, &old_cid, record).await?;
        writes.push(change::disk(&orphan));
    }
    record.disk_cid = new_disk;
    core.records.write(writes).await?;
    persist(core, record).await
}

/// Attaches `disk` to `vm` and has the agent mount it.
async fn attach_and_mount(
    core: &Core,
    vm: &str,
    agent: &str,
    disk: &str,
    name: &str,
) -> Result<(), StepError> {
    core.cpi
        .attach_disk(vm, disk)
        .await
        .for_subject("attach_disk", name)?;
    core.agent_call(agent, "mount_disk", core.agent.mount_disk(agent, disk))
        .await
        .for_subject("mount_disk", name)?;
    Ok(())
}

/// A disk of the wanted size an earlier attempt created for this instance but never
/// switched to (the migration failed): reusing it keeps retries from piling up disks.
async fn left_from_a_failed_migration(
    core: &Core,
    record: &InstanceRecord,
    wanted: u64,
    properties: &serde_json::Map<String, serde_json::Value>,
    current: Option<&str>,
) -> Result<Option<String>, StepError> {
    let disks: Vec<DiskRecord> = core.records.disks(&record.deployment).await?;
    Ok(disks
        .into_iter()
        .find(|d| {
            !d.orphaned
                && d.size == wanted
                && &d.cloud_properties == properties
                && d.instance_id.as_deref() == Some(record.id.as_str())
                && Some(d.cid.as_str()) != current
        })
        .map(|d| d.cid))
}

/// Creates and records a disk for the instance; recorded at once, so a crash from here on
/// leaves a disk the next deploy knows.
async fn create_disk(
    core: &Core,
    record: &InstanceRecord,
    wanted: u64,
    properties: &serde_json::Map<String, serde_json::Value>,
    vm: &str,
) -> Result<String, StepError> {
    let disk = core
        .cpi
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
    core.records.write(vec![change::disk(&disk_record)]).await?;
    Ok(disk)
}
