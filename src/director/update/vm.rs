//! VM creation and instance deletion, with every record written before the cloud call
//! that depends on it.

use super::super::Core;
use super::super::cpi::VmRequest;
use super::super::ids::new_id;
use super::super::model::{DesiredState, DiskRecord, InstanceRecord, VmRecord};
use super::super::plan::InstancePlan;
use super::super::store::{Collection, put, remove};

pub fn persist(core: &Core, record: &InstanceRecord) -> Result<(), String> {
    core.store
        .write(vec![put(
            Collection::Instances,
            &record.id,
            &record.deployment,
            record,
        )])
        .map_err(|e| e.to_string())
}

/// Creates the VM (and its persistent disk) of an instance that has none.
pub async fn create_missing_vm(
    core: &Core,
    deployment: &str,
    plan: &InstancePlan,
) -> Result<InstanceRecord, String> {
    let mut record = plan.existing.clone().unwrap_or_else(|| InstanceRecord {
        id: new_id("instance"),
        deployment: deployment.to_string(),
        group: plan.group.clone(),
        index: plan.index,
        az: plan.az.clone(),
        vm_cid: None,
        agent_id: None,
        disk_cid: None,
        applied: None,
        state: DesiredState::Started,
    });
    persist(core, &record)?;
    if record.vm_cid.is_none() {
        create_vm(core, &mut record, plan).await?;
    }
    Ok(record)
}

pub async fn create_vm(
    core: &Core,
    record: &mut InstanceRecord,
    plan: &InstancePlan,
) -> Result<(), String> {
    let name = record.name();
    let agent_id = new_id("agent");
    let request = VmRequest {
        agent_id: agent_id.clone(),
        stemcell: plan.desired.stemcell.clone(),
        vm_type: plan.desired.vm_type.clone(),
        deployment: record.deployment.clone(),
        instance: format!("{}/{}", record.group, record.index),
    };
    let cid = core
        .cpi
        .create_vm(&request)
        .await
        .map_err(|e| format!("create_vm for {name}: {e}"))?;
    record.vm_cid = Some(cid.clone());
    record.agent_id = Some(agent_id.clone());
    let vm = VmRecord {
        cid: cid.clone(),
        agent_id: agent_id.clone(),
        deployment: record.deployment.clone(),
        instance_id: Some(record.id.clone()),
        stemcell: plan.desired.stemcell.clone(),
    };
    core.store
        .write(vec![
            put(
                Collection::Instances,
                &record.id,
                &record.deployment,
                &*record,
            ),
            put(Collection::Vms, &cid, &record.deployment, &vm),
        ])
        .map_err(|e| e.to_string())?;
    if plan.desired.persistent_disk > 0 && record.disk_cid.is_none() {
        let disk = core
            .cpi
            .create_disk(plan.desired.persistent_disk, &cid)
            .await
            .map_err(|e| format!("create_disk for {name}: {e}"))?;
        record.disk_cid = Some(disk.clone());
        let disk_record = DiskRecord {
            cid: disk.clone(),
            deployment: record.deployment.clone(),
            instance_id: Some(record.id.clone()),
            size: plan.desired.persistent_disk,
            orphaned: false,
        };
        core.store
            .write(vec![
                put(
                    Collection::Instances,
                    &record.id,
                    &record.deployment,
                    &*record,
                ),
                put(Collection::Disks, &disk, &record.deployment, &disk_record),
            ])
            .map_err(|e| e.to_string())?;
    }
    if let Some(disk) = record.disk_cid.clone() {
        core.cpi
            .attach_disk(&cid, &disk)
            .await
            .map_err(|e| format!("attach_disk for {name}: {e}"))?;
        core.agent_call(
            &agent_id,
            "mount_disk",
            core.agent.mount_disk(&agent_id, &disk),
        )
        .await
        .map_err(|e| format!("mount_disk for {name}: {e}"))?;
    }
    Ok(())
}

/// Deletes the instance's VM; the caller decides whether the agent may be asked first.
pub async fn delete_vm(
    core: &Core,
    record: &mut InstanceRecord,
    agent_responsive: bool,
) -> Result<(), String> {
    let Some(cid) = record.vm_cid.take() else {
        return Ok(());
    };
    let name = record.name();
    let agent_id = record.agent_id.take();
    if let (Some(disk), Some(agent)) = (&record.disk_cid, &agent_id)
        && agent_responsive
    {
        core.agent_call(agent, "unmount_disk", core.agent.unmount_disk(agent, disk))
            .await
            .map_err(|e| format!("unmount_disk for {name}: {e}"))?;
    }
    if let Some(disk) = &record.disk_cid {
        core.cpi
            .detach_disk(&cid, disk)
            .await
            .map_err(|e| format!("detach_disk for {name}: {e}"))?;
    }
    // Forget the VM first: a crash now leaks a VM rather than pointing at a deleted one.
    core.store
        .write(vec![
            put(
                Collection::Instances,
                &record.id,
                &record.deployment,
                &*record,
            ),
            remove(Collection::Vms, &cid),
        ])
        .map_err(|e| e.to_string())?;
    core.cpi
        .delete_vm(&cid)
        .await
        .map_err(|e| format!("delete_vm for {name}: {e}"))
}

/// Removes an instance that is no longer wanted: its VM is deleted, its persistent disk
/// orphaned (kept, never deleted by a deploy).
pub async fn delete_instance(
    core: &Core,
    mut record: InstanceRecord,
    agent_responsive: bool,
) -> Result<(), String> {
    delete_vm(core, &mut record, agent_responsive).await?;
    let mut writes = vec![remove(Collection::Instances, &record.id)];
    if let Some(disk) = &record.disk_cid {
        let orphan = DiskRecord {
            cid: disk.clone(),
            deployment: record.deployment.clone(),
            instance_id: None,
            size: record
                .applied
                .as_ref()
                .map(|a| a.persistent_disk)
                .unwrap_or_default(),
            orphaned: true,
        };
        writes.push(put(Collection::Disks, disk, &record.deployment, &orphan));
    }
    core.store.write(writes).map_err(|e| e.to_string())
}
