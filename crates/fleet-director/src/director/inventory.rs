//! What is deployed: deployments, their manifests, versions, instances, VMs and disks.

use crate::DirectorError;
use crate::manifest;
use crate::model::{
    CloudConfigUse, DeployedVersions, DeploymentRecord, DeploymentSummary, DiskRecord,
    InstanceRecord, VmRecord,
};
use crate::runner::lock_name;

use super::Director;

impl Director {
    pub async fn deployment(&self, name: &str) -> Result<Option<DeploymentRecord>, DirectorError> {
        Ok(self.records().deployment(name).await?)
    }

    pub async fn deployments(&self) -> Result<Vec<DeploymentRecord>, DirectorError> {
        Ok(self.records().deployments().await?)
    }

    /// Every deployment's name, in order: cheaper than [`Self::deployments`] when the
    /// names are all a caller needs.
    pub async fn deployment_names(&self) -> Result<Vec<String>, DirectorError> {
        Ok(self.records().deployment_names().await?)
    }

    /// Every deployment with its last successfully deployed manifest, parsed; `None`
    /// before a first success.
    pub async fn deployed_manifests(
        &self,
    ) -> Result<Vec<(DeploymentRecord, Option<manifest::Manifest>)>, DirectorError> {
        Ok(self
            .deployments()
            .await?
            .into_iter()
            .map(|record| {
                // Read with the versions its `latest` resolved to when it deployed.
                let parsed = record
                    .manifest
                    .as_deref()
                    .and_then(|m| manifest::parse(m).ok())
                    .map(|mut m| {
                        crate::latest::reapply(&mut m, &record.latest);
                        m
                    });
                (record, parsed)
            })
            .collect())
    }

    /// Every deployment with its parsed manifest, whether its cloud config is the one in
    /// force, and whether a task holds it.
    pub async fn deployment_summaries(&self) -> Result<Vec<DeploymentSummary>, DirectorError> {
        let current = self.cloud_config().await?.map(|c| c.version);
        let locked: std::collections::HashSet<String> = self
            .locks()
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        Ok(self
            .deployed_manifests()
            .await?
            .into_iter()
            .map(|(record, manifest)| {
                let cloud_config = match (current, record.cloud_config) {
                    (None, _) => CloudConfigUse::None,
                    (Some(c), Some(used)) if c == used => CloudConfigUse::Latest,
                    _ => CloudConfigUse::Outdated,
                };
                let locked = locked.contains(&lock_name(&record.name));
                DeploymentSummary {
                    record,
                    manifest,
                    cloud_config,
                    locked,
                }
            })
            .collect())
    }

    /// The releases and stemcells the deployed manifests use.
    pub async fn deployed_versions(&self) -> Result<DeployedVersions, DirectorError> {
        let mut deployed = DeployedVersions::default();
        for (record, manifest) in self.deployed_manifests().await? {
            let Some(m) = manifest else {
                continue;
            };
            for r in m.releases {
                deployed.releases.insert((r.name, r.version));
            }
            for s in m.stemcells {
                deployed
                    .stemcells
                    .push((s.os, s.version, record.name.clone()));
            }
        }
        Ok(deployed)
    }

    /// The config server's variables of `deployment`: each id and full name.
    ///
    /// # Errors
    /// A store failure.
    pub async fn variables(
        &self,
        deployment: &str,
    ) -> Result<Vec<(String, String)>, DirectorError> {
        let mut kept: Vec<(String, String)> = self
            .records()
            .variables(deployment)
            .await?
            .into_iter()
            .map(|v| (v.id, v.name))
            .collect();
        kept.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(kept)
    }

    pub async fn instances(&self, deployment: &str) -> Result<Vec<InstanceRecord>, DirectorError> {
        let mut instances: Vec<InstanceRecord> = self.records().instances(deployment).await?;
        instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
        Ok(instances)
    }

    /// The compilation VMs of the deployment that exist: none between deploys, unless a
    /// crash left them (its next deploy or its deletion deletes them).
    pub async fn compilation_vms(&self, deployment: &str) -> Result<Vec<VmRecord>, DirectorError> {
        Ok(self.records().compilation_vms(deployment).await?)
    }

    pub async fn vms(&self, deployment: &str) -> Result<Vec<VmRecord>, DirectorError> {
        Ok(self.records().vms(deployment).await?)
    }

    pub async fn disks(&self, deployment: &str) -> Result<Vec<DiskRecord>, DirectorError> {
        Ok(self.records().disks(deployment).await?)
    }
}
