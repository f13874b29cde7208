//! The instance and disk records an update writes, before the cloud call that depends on
//! them.

use fleet_clock::WallClock;

use super::super::error::StepError;
use super::super::model::{DiskRecord, InstanceRecord};
use crate::records::Records;
use crate::records::change;

/// Writes the instance's record as it stands.
pub async fn persist(records: &Records, record: &InstanceRecord) -> Result<(), StepError> {
    records
        .write(vec![change::instance(record)])
        .await
        .map_err(StepError::from)
}

/// The disk record of `cid`, which `owner` used, marked orphaned: kept and listed, never
/// deleted by a deploy.
pub async fn orphaned(
    records: &Records,
    clock: &WallClock,
    cid: &str,
    owner: &InstanceRecord,
) -> Result<DiskRecord, StepError> {
    let (size, cloud_properties) = records
        .disk(cid)
        .await?
        .map(|d| (d.size, d.cloud_properties))
        .unwrap_or_default();
    Ok(DiskRecord {
        cid: cid.to_string(),
        deployment: owner.deployment.clone(),
        instance_id: None,
        size,
        cloud_properties,
        orphaned: true,
        orphaned_at: Some(clock.unix_secs()),
        instance_name: Some(format!("{}/{}", owner.group, owner.id)),
        az: owner.az.clone(),
    })
}
