//! The persistent disk of an instance brought to what its plan wants: created, attached
//! and mounted; replaced (data migrated, old disk orphaned) when its size or its disk
//! type's cloud properties change; orphaned when no longer wanted.

use super::super::Core;
use super::super::error::StepError;
use super::super::model::{DiskRecord, InstanceRecord};
use super::super::plan::{Change, InstancePlan};
use super::records::{orphaned, persist};
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
        Some(cid) => core
            .records
            .disk(cid)
            .await?
            .map(|d| (d.cid, d.size, d.cloud_properties)),
        None => None,
    };
    let unfinished = plan.changes.contains(&Change::Unapplied);
    match current {
        None if wanted == 0 => Ok(()),
        Some((cid, size, ref made_with)) if size == wanted && made_with == properties => {
            if fresh_vm || unfinished {
                // Attaching and mounting again is harmless and finishes a step a crash
                // may have cut short.
                core.cpi
                    .attach_disk(&vm, &cid)
                    .await
                    .map_err(|e| format!("attach_disk for {name}: {e}"))?;
                core.agent_call(&agent, "mount_disk", core.agent.mount_disk(&agent, &cid))
                    .await
                    .map_err(|e| format!("mount_disk for {name}: {e}"))?;
            }
            Ok(())
        }
        old => {
            if let Some((cid, ..)) = &old
                && fresh_vm
            {
                // The old disk must be reachable on the new VM to move its data.
                core.cpi
                    .attach_disk(&vm, cid)
                    .await
                    .map_err(|e| format!("attach_disk for {name}: {e}"))?;
                core.agent_call(&agent, "mount_disk", core.agent.mount_disk(&agent, cid))
                    .await
                    .map_err(|e| format!("mount_disk for {name}: {e}"))?;
            }
            let mut writes = Vec::new();
            let new_disk = if wanted > 0 {
                let old_cid = old.as_ref().map(|(cid, ..)| cid.as_str());
                // Only a migration or an update cut short can have left a disk behind; a
                // first disk skips the look-up, which reads every disk of the deployment.
                let leftover = if old.is_some() || unfinished {
                    left_from_a_failed_migration(core, record, wanted, properties, old_cid).await?
                } else {
                    None
                };
                let disk = match leftover {
                    Some(disk) => disk,
                    None => create_disk(core, record, wanted, properties, &vm).await?,
                };
                core.cpi
                    .attach_disk(&vm, &disk)
                    .await
                    .map_err(|e| format!("attach_disk for {name}: {e}"))?;
                core.agent_call(&agent, "mount_disk", core.agent.mount_disk(&agent, &disk))
                    .await
                    .map_err(|e| format!("mount_disk for {name}: {e}"))?;
                Some(disk)
            } else {
                None
            };
            if let Some((old_cid, ..)) = old {
                if let Some(new_cid) = &new_disk {
                    core.agent_call(
                        &agent,
                        "migrate_disk",
                        core.agent.migrate_disk(&agent, &old_cid, new_cid),
                    )
                    .await
                    .map_err(|e| format!("migrate_disk for {name}: {e}"))?;
                }
                core.agent_call(
                    &agent,
                    "unmount_disk",
                    core.agent.unmount_disk(&agent, &old_cid),
                )
                .await
                .map_err(|e| format!("unmount_disk for {name}: {e}"))?;
                core.cpi
                    .detach_disk(&vm, &old_cid)
                    .await
                    .map_err(|e| format!("detach_disk for {name}: {e}"))?;
                let orphan = orphaned(core, &old_cid, record).await?;
                writes.push(change::disk(&orphan));
            }
            record.disk_cid = new_disk;
            core.records.write(writes).await?;
            persist(core, record).await
        }
    }
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
        .map_err(|e| format!("create_disk for {}: {e}", record.name()))?;
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
