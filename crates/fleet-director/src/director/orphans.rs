//! Orphaned disks and the clean-up of what no deployment uses.

use std::sync::Arc;

use crate::DirectorError;
use crate::cleanup;
use crate::model::{DiskRecord, Task, TaskKind};

use super::Director;

impl Director {
    /// Every orphaned disk, oldest orphan first.
    pub async fn orphaned_disks(&self) -> Result<Vec<DiskRecord>, DirectorError> {
        let mut disks = self.records().orphaned_disks().await?;
        disks.sort_by_key(|d| (d.orphaned_at, d.cid.clone()));
        Ok(disks)
    }

    /// Deletes one orphaned disk (`bosh delete-disk`).
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for a disk that is not an orphaned one.
    pub async fn delete_orphaned_disk(&self, cid: &str) -> Result<Task, DirectorError> {
        let disk = self
            .records()
            .disk(cid)
            .await?
            .filter(|d| d.orphaned)
            .ok_or_else(|| DirectorError::NotFound {
                what: format!("orphaned disk `{cid}`"),
            })?;
        self.runner
            .start(
                TaskKind::DeleteOrphanDisk,
                None,
                &self.origin,
                move |core, log| async move {
                    cleanup::delete_disks(
                        &core.records,
                        &*core.cpi,
                        &log,
                        std::slice::from_ref(&disk),
                    )
                    .await?;
                    Ok(format!("orphaned disk {} deleted", disk.cid))
                },
            )
            .await
    }

    /// What `bosh clean-up` would delete now.
    pub async fn clean_up_plan(
        &self,
        options: cleanup::CleanUpOptions,
    ) -> Result<cleanup::CleanUpPlan, DirectorError> {
        let deployed = self.deployed_versions().await?;
        let (releases, stemcells) = (self.releases().await?, self.stemcells().await?);
        let orphaned = self.orphaned_disks().await?;
        Ok(cleanup::plan(
            &releases, &stemcells, &deployed, orphaned, options,
        ))
    }

    /// Deletes what [`Director::clean_up_plan`] names, as one task.
    pub async fn clean_up(&self, options: cleanup::CleanUpOptions) -> Result<Task, DirectorError> {
        let plan = self.clean_up_plan(options).await?;
        self.runner
            .start(TaskKind::CleanUp, None, &self.origin, move |core, log| {
                cleanup::clean_up(core.records.clone(), Arc::clone(&core.cpi), log, plan)
            })
            .await
    }
}
