//! The director's records in the store, typed: uploads, the cloud config, deployments and
//! their instances, VMs and disks, compiled packages and DNS names. Each record's key and
//! scope are chosen here once. Tasks, locks and IP reservations have queries of their
//! own in the store.

use std::collections::BTreeSet;

use super::alerts::Alert;
use super::model::{
    CloudConfig, ConfigsInForce, DeploymentRecord, DiskRecord, InstanceRecord, Release, Stemcell,
    VmRecord,
};
use super::problem::Problem;
use super::resurrection::ResurrectionConfig;
use super::runtime::RuntimeConfig;
use super::unsettled::UnsettledVm;
use fleet_store::{AsyncStore, StoreError, Write, get, list};

/// Where the director keeps whether resurrection is paused (`bosh update-resurrection`).
const RESURRECTION_PAUSED: &str = "resurrection_paused";

/// What a deploy starts from: the cloud config in force, the uploads, and every runtime
/// config version.
pub struct Uploads {
    pub cloud_config: Option<CloudConfig>,
    pub releases: Vec<Release>,
    pub stemcells: Vec<Stemcell>,
    pub runtime_configs: Vec<RuntimeConfig>,
}

#[derive(Clone)]
pub struct Records {
    store: AsyncStore,
}

impl Records {
    pub fn new(store: AsyncStore) -> Self {
        Records { store }
    }

    /// Applies the changes together, or none of them.
    pub async fn write(&self, changes: Vec<Write>) -> Result<(), StoreError> {
        self.store.write(changes).await
    }

    pub async fn releases(&self) -> Result<Vec<Release>, StoreError> {
        self.store.list(crate::collections::RELEASES, None).await
    }

    pub async fn stemcells(&self) -> Result<Vec<Stemcell>, StoreError> {
        self.store.list(crate::collections::STEMCELLS, None).await
    }

    /// What the CPI calls the stemcell `os/version`, if it made one for it.
    pub async fn stemcell_cid(&self, os_version: &str) -> Result<Option<String>, StoreError> {
        let stemcell: Option<Stemcell> = self
            .store
            .get(crate::collections::STEMCELLS, os_version)
            .await?;
        Ok(stemcell.and_then(|s| s.cid))
    }

    /// The cloud config in force, if any.
    pub async fn cloud_config(&self) -> Result<Option<CloudConfig>, StoreError> {
        self.store
            .get(crate::collections::CLOUD_CONFIG, CLOUD_CONFIG)
            .await
    }

    /// Every cloud config uploaded, newest first. The one in force is always there, also
    /// when it was kept before versions were.
    pub async fn cloud_configs(&self) -> Result<Vec<CloudConfig>, StoreError> {
        self.store
            .run(|s| {
                let mut all: Vec<CloudConfig> =
                    list(s, crate::collections::CLOUD_CONFIG, Some(HISTORY))?;
                let current: Option<CloudConfig> =
                    get(s, crate::collections::CLOUD_CONFIG, CLOUD_CONFIG)?;
                if let Some(current) = current
                    && !all.iter().any(|c| c.version == current.version)
                {
                    all.push(current);
                }
                all.sort_by_key(|c| std::cmp::Reverse(c.version));
                Ok(all)
            })
            .await
    }

    /// Every version of every resurrection config, newest first.
    pub async fn resurrection_configs(&self) -> Result<Vec<ResurrectionConfig>, StoreError> {
        self.named_configs(crate::collections::RESURRECTION_CONFIGS)
            .await
    }

    /// Every version of every named config of a kind, newest first.
    async fn named_configs(
        &self,
        collection: fleet_store::Collection,
    ) -> Result<Vec<crate::model::NamedConfig>, StoreError> {
        let mut all: Vec<crate::model::NamedConfig> = self.store.list(collection, None).await?;
        all.sort_by_key(|c| std::cmp::Reverse(c.version));
        Ok(all)
    }

    /// Whether an operator paused resurrection for the whole director.
    pub async fn resurrection_paused(&self) -> Result<bool, StoreError> {
        let paused: Option<bool> = self
            .store
            .get(crate::collections::DIRECTOR, RESURRECTION_PAUSED)
            .await?;
        Ok(paused.unwrap_or(false))
    }

    /// The health monitor's alerts, of one deployment or all, oldest first.
    pub async fn alerts(&self, deployment: Option<&str>) -> Result<Vec<Alert>, StoreError> {
        self.store
            .list(crate::collections::ALERTS, deployment)
            .await
    }

    /// Keeps `alert` unless one has its id; whether it did.
    pub async fn insert_alert(&self, alert: &Alert) -> Result<bool, StoreError> {
        self.store
            .insert(
                crate::collections::ALERTS,
                &change::alert_key(alert.id),
                &alert.deployment,
                alert,
            )
            .await
    }

    /// Every version of every runtime config, newest first.
    pub async fn runtime_configs(&self) -> Result<Vec<RuntimeConfig>, StoreError> {
        self.named_configs(crate::collections::RUNTIME_CONFIGS)
            .await
    }

    /// The configs a deploy would apply now, by version, read in one turn of the store.
    pub async fn configs_in_force(&self) -> Result<ConfigsInForce, StoreError> {
        self.store
            .run(|s| {
                let cloud: Option<CloudConfig> =
                    get(s, crate::collections::CLOUD_CONFIG, CLOUD_CONFIG)?;
                let runtime: Vec<RuntimeConfig> =
                    list(s, crate::collections::RUNTIME_CONFIGS, None)?;
                Ok(ConfigsInForce {
                    cloud: cloud.map(|c| c.version),
                    runtime: super::runtime::versions(&super::runtime::latest(&runtime)),
                })
            })
            .await
    }

    /// What a deploy starts from, read in one turn of the store.
    pub async fn uploads(&self) -> Result<Uploads, StoreError> {
        self.store
            .run(|s| {
                Ok(Uploads {
                    cloud_config: get(s, crate::collections::CLOUD_CONFIG, CLOUD_CONFIG)?,
                    releases: list(s, crate::collections::RELEASES, None)?,
                    stemcells: list(s, crate::collections::STEMCELLS, None)?,
                    runtime_configs: list(s, crate::collections::RUNTIME_CONFIGS, None)?,
                })
            })
            .await
    }

    pub async fn deployment(&self, name: &str) -> Result<Option<DeploymentRecord>, StoreError> {
        self.store.get(crate::collections::DEPLOYMENTS, name).await
    }

    /// VMs a crash could have left unrecorded (being made, or forgotten and not yet
    /// deleted), of one deployment or of all.
    pub async fn unsettled_vms(
        &self,
        deployment: Option<&str>,
    ) -> Result<Vec<UnsettledVm>, StoreError> {
        self.store
            .list(crate::collections::UNSETTLED_VMS, deployment)
            .await
    }

    /// Whether a record names the VM `cid`, as an instance's or a compilation's.
    pub async fn names_vm(&self, cid: &str) -> Result<bool, StoreError> {
        let vm: Option<VmRecord> = self.store.get(crate::collections::VMS, cid).await?;
        if vm.is_some() {
            return Ok(true);
        }
        let compiling: Option<VmRecord> = self
            .store
            .get(crate::collections::COMPILATION_VMS, cid)
            .await?;
        Ok(compiling.is_some())
    }

    /// The teams `deployment` belongs to; none for one created by a director admin.
    pub async fn teams_of(&self, deployment: &str) -> Result<Vec<String>, StoreError> {
        let kept: Option<(String, Vec<String>)> = self
            .store
            .get(crate::collections::DEPLOYMENT_TEAMS, deployment)
            .await?;
        Ok(kept.map(|(_, teams)| teams).unwrap_or_default())
    }

    /// The teams of every deployment that has any, by deployment.
    pub async fn deployment_teams(
        &self,
    ) -> Result<std::collections::BTreeMap<String, Vec<String>>, StoreError> {
        let all: Vec<(String, Vec<String>)> = self
            .store
            .list(crate::collections::DEPLOYMENT_TEAMS, None)
            .await?;
        Ok(all.into_iter().collect())
    }

    pub async fn external_link(
        &self,
        id: &str,
    ) -> Result<Option<crate::model::ExternalLink>, StoreError> {
        self.store.get(crate::collections::EXTERNAL_LINKS, id).await
    }

    /// The variable the config server keeps under its full name, whichever deployment
    /// made it.
    pub async fn variable(&self, name: &str) -> Result<Option<crate::model::Variable>, StoreError> {
        self.store.get(crate::collections::VARIABLES, name).await
    }

    /// The variables the config server keeps for `deployment`.
    pub async fn variables(
        &self,
        deployment: &str,
    ) -> Result<Vec<crate::model::Variable>, StoreError> {
        self.store
            .list(crate::collections::VARIABLES, Some(deployment))
            .await
    }

    /// The external links to `deployment`'s providers.
    pub async fn external_links(
        &self,
        deployment: &str,
    ) -> Result<Vec<crate::model::ExternalLink>, StoreError> {
        self.store
            .list(crate::collections::EXTERNAL_LINKS, Some(deployment))
            .await
    }

    /// The manifest the deployment last deployed successfully, if it has one.
    pub async fn deployed_manifest(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.deployment(name).await?.and_then(|d| d.manifest))
    }

    /// What the finished task `task` kept as its result output (see [`change::task_result`]).
    pub async fn task_result(&self, task: u64) -> Result<Option<String>, StoreError> {
        self.store
            .get(crate::collections::TASK_RESULTS, &task.to_string())
            .await
    }

    /// The kept log bundle `id`.
    pub async fn log_bundle(
        &self,
        id: &str,
    ) -> Result<Option<crate::model::LogBundle>, StoreError> {
        self.store.get(crate::collections::LOG_BUNDLES, id).await
    }

    /// Every kept log bundle.
    pub async fn log_bundles(&self) -> Result<Vec<crate::model::LogBundle>, StoreError> {
        self.store.list(crate::collections::LOG_BUNDLES, None).await
    }

    /// The state hash of the errand's last successful run on the deployment.
    pub async fn errand_run(
        &self,
        deployment: &str,
        errand: &str,
    ) -> Result<Option<String>, StoreError> {
        self.store
            .get(
                crate::collections::ERRAND_RUNS,
                &change::errand_key(deployment, errand),
            )
            .await
    }

    pub async fn deployments(&self) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.store.list(crate::collections::DEPLOYMENTS, None).await
    }

    /// Every deployment's name, in order, without reading its record.
    pub async fn deployment_names(&self) -> Result<Vec<String>, StoreError> {
        self.store.keys(crate::collections::DEPLOYMENTS).await
    }

    /// What the deployment's last cloud check found and is not resolved yet, by id.
    pub async fn problems(&self, deployment: &str) -> Result<Vec<Problem>, StoreError> {
        let mut found: Vec<Problem> = self
            .store
            .list(crate::collections::PROBLEMS, Some(deployment))
            .await?;
        found.sort_by_key(|p| p.id);
        Ok(found)
    }

    pub async fn instances(&self, deployment: &str) -> Result<Vec<InstanceRecord>, StoreError> {
        self.store
            .list(crate::collections::INSTANCES, Some(deployment))
            .await
    }

    pub async fn vms(&self, deployment: &str) -> Result<Vec<VmRecord>, StoreError> {
        self.store
            .list(crate::collections::VMS, Some(deployment))
            .await
    }

    /// The compilation VMs of the deployment that exist: none between deploys, unless a
    /// crash left them.
    pub async fn compilation_vms(&self, deployment: &str) -> Result<Vec<VmRecord>, StoreError> {
        self.store
            .list(crate::collections::COMPILATION_VMS, Some(deployment))
            .await
    }

    pub async fn disks(&self, deployment: &str) -> Result<Vec<DiskRecord>, StoreError> {
        self.store
            .list(crate::collections::DISKS, Some(deployment))
            .await
    }

    /// Every orphaned disk, of every deployment.
    pub async fn orphaned_disks(&self) -> Result<Vec<DiskRecord>, StoreError> {
        let disks: Vec<DiskRecord> = self.store.list(crate::collections::DISKS, None).await?;
        Ok(disks.into_iter().filter(|d| d.orphaned).collect())
    }

    pub async fn disk(&self, cid: &str) -> Result<Option<DiskRecord>, StoreError> {
        self.store.get(crate::collections::DISKS, cid).await
    }

    /// The compiled package kept under `key`, if any.
    pub async fn compiled(
        &self,
        key: &str,
    ) -> Result<Option<crate::model::CompiledPackage>, StoreError> {
        self.store
            .get(crate::collections::COMPILED_PACKAGES, key)
            .await
    }

    pub async fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.blob(id).await
    }

    pub async fn is_compiled(&self, key: &str) -> Result<bool, StoreError> {
        let key = key.to_string();
        self.store
            .run(move |s| {
                Ok(s.get(crate::collections::COMPILED_PACKAGES, &key)?
                    .is_some())
            })
            .await
    }

    /// Every blob's id: releases' archives, compiled packages, rendered templates, log
    /// bundles, and what an upload cut short left behind.
    pub async fn blob_ids(&self) -> Result<Vec<String>, StoreError> {
        self.store.run(|s| s.blob_ids()).await
    }

    pub async fn put_blob(&self, id: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.store.put_blob(id, bytes).await
    }

    /// Keeps a release's archive as the blob `id`: from its spooled file piece by piece,
    /// or from memory.
    pub async fn put_payload(
        &self,
        id: &str,
        payload: fleet_release::Payload,
    ) -> Result<(), StoreError> {
        if let Some(path) = payload.file() {
            return self.store.put_blob_file(id, path).await;
        }
        let bytes = payload.into_bytes().map_err(|source| StoreError::Source {
            path: std::path::PathBuf::from(id),
            source,
        })?;
        self.store.put_blob(id, bytes).await
    }

    pub async fn delete_blob(&self, id: String) -> Result<(), StoreError> {
        self.store.run(move |s| s.delete_blob(&id)).await
    }

    /// The blobs some record names: a release's archives, a compiled package. Others
    /// are what an upload cut short left behind.
    pub async fn named_blobs(&self) -> Result<BTreeSet<String>, StoreError> {
        let mut named: BTreeSet<String> = self
            .releases()
            .await?
            .iter()
            .flat_map(|r| r.blobs().map(str::to_string).collect::<Vec<_>>())
            .collect();
        let compiled: Vec<serde_json::Value> = self
            .store
            .list(crate::collections::COMPILED_PACKAGES, None)
            .await?;
        named.extend(
            compiled
                .iter()
                .filter_map(|c| c.get("blob").and_then(|b| b.as_str()))
                .map(str::to_string),
        );
        named.extend(self.log_bundles().await?.into_iter().map(|b| b.id));
        Ok(named)
    }

    /// Those of `wanted` (each with its cache key) not compiled yet, in one turn.
    pub async fn uncompiled<K>(&self, wanted: Vec<(K, String)>) -> Result<BTreeSet<K>, StoreError>
    where
        K: Ord + Send + 'static,
    {
        self.store
            .run(move |s| {
                let mut missing = BTreeSet::new();
                for (item, key) in wanted {
                    if s.get(crate::collections::COMPILED_PACKAGES, &key)?
                        .is_none()
                    {
                        missing.insert(item);
                    }
                }
                Ok(missing)
            })
            .await
    }
}

/// The key of the cloud config in force.
const CLOUD_CONFIG: &str = "current";

/// The scope every uploaded cloud config is kept under, keyed by its version.
const HISTORY: &str = "history";

/// The writes [`Records::write`] applies.
pub mod change {
    use serde::Serialize;

    use super::super::alerts::Alert;
    use super::super::model::{
        CloudConfig, DeploymentRecord, DiskRecord, InstanceRecord, Release, Stemcell, VmRecord,
    };
    use super::super::problem::Problem;
    use super::super::resurrection::ResurrectionConfig;
    use super::super::runtime::RuntimeConfig;
    use super::super::unsettled::UnsettledVm;
    use fleet_store::{Write, put, remove};

    /// Alerts' keys sort as their ids do.
    pub fn alert_key(id: u64) -> String {
        format!("{id:020}")
    }

    pub fn alert_gone(alert: &Alert) -> Write {
        remove(crate::collections::ALERTS, &alert_key(alert.id))
    }

    pub fn resurrection_config(config: &ResurrectionConfig) -> Write {
        named_config(crate::collections::RESURRECTION_CONFIGS, config)
    }

    /// A version of a named config, keyed so that a name's versions sort in order.
    fn named_config(
        collection: fleet_store::Collection,
        config: &crate::model::NamedConfig,
    ) -> Write {
        put(
            collection,
            &format!("{}/{:012}", config.name, config.version),
            &config.name,
            config,
        )
    }

    pub fn resurrection_paused(paused: bool) -> Write {
        put(
            crate::collections::DIRECTOR,
            super::RESURRECTION_PAUSED,
            "",
            &paused,
        )
    }

    pub fn release(release: &Release) -> Write {
        let key = format!("{}/{}", release.name, release.version);
        put(crate::collections::RELEASES, &key, &release.name, release)
    }

    pub fn stemcell(stemcell: &Stemcell) -> Write {
        let key = format!("{}/{}", stemcell.os, stemcell.version);
        put(crate::collections::STEMCELLS, &key, &stemcell.os, stemcell)
    }

    pub fn runtime_config(config: &RuntimeConfig) -> Write {
        named_config(crate::collections::RUNTIME_CONFIGS, config)
    }

    pub fn release_gone(release: &Release) -> Write {
        remove(
            crate::collections::RELEASES,
            &format!("{}/{}", release.name, release.version),
        )
    }

    pub fn stemcell_gone(stemcell: &Stemcell) -> Write {
        remove(
            crate::collections::STEMCELLS,
            &format!("{}/{}", stemcell.os, stemcell.version),
        )
    }

    pub fn disk_gone(cid: &str) -> Write {
        remove(crate::collections::DISKS, cid)
    }

    /// The cloud config that is in force from now on, and kept among the versions.
    pub fn cloud_config(config: &CloudConfig) -> [Write; 2] {
        [
            put(
                crate::collections::CLOUD_CONFIG,
                super::CLOUD_CONFIG,
                "",
                config,
            ),
            put(
                crate::collections::CLOUD_CONFIG,
                &format!("version/{:012}", config.version),
                super::HISTORY,
                config,
            ),
        ]
    }

    pub fn deployment(record: &DeploymentRecord) -> Write {
        put(
            crate::collections::DEPLOYMENTS,
            &record.name,
            &record.name,
            record,
        )
    }

    pub fn deployment_gone(name: &str) -> Write {
        remove(crate::collections::DEPLOYMENTS, name)
    }

    /// A VM of `deployment` whose existence the records may soon not match: about to be
    /// made, or forgotten before its deletion.
    pub fn vm_unsettled(deployment: &str, vm: &UnsettledVm) -> Write {
        put(
            crate::collections::UNSETTLED_VMS,
            &vm.agent_id,
            deployment,
            vm,
        )
    }

    /// The records say again what the cloud has for `agent_id`.
    pub fn vm_settled(agent_id: &str) -> Write {
        remove(crate::collections::UNSETTLED_VMS, agent_id)
    }

    /// The teams a deployment belongs to from its creation on.
    pub fn deployment_teams(name: &str, teams: &[String]) -> Write {
        put(
            crate::collections::DEPLOYMENT_TEAMS,
            name,
            name,
            &(name, teams),
        )
    }

    pub fn deployment_teams_gone(name: &str) -> Write {
        remove(crate::collections::DEPLOYMENT_TEAMS, name)
    }

    pub fn instance(record: &InstanceRecord) -> Write {
        put(
            crate::collections::INSTANCES,
            &record.id,
            &record.deployment,
            record,
        )
    }

    pub fn instance_gone(id: &str) -> Write {
        remove(crate::collections::INSTANCES, id)
    }

    pub fn vm(record: &VmRecord) -> Write {
        put(
            crate::collections::VMS,
            &record.cid,
            &record.deployment,
            record,
        )
    }

    pub fn vm_gone(cid: &str) -> Write {
        remove(crate::collections::VMS, cid)
    }

    /// A task's result output beyond its one-line result, kept until the task is pruned.
    pub fn task_result(task: u64, lines: &str) -> Write {
        put(
            crate::collections::TASK_RESULTS,
            &task.to_string(),
            "",
            &lines,
        )
    }

    pub(super) fn errand_key(deployment: &str, errand: &str) -> String {
        format!("{deployment}/{errand}")
    }

    /// The state hash of an errand's successful run, which `when-changed` compares.
    pub fn errand_run(deployment: &str, errand: &str, hash: &str) -> Write {
        put(
            crate::collections::ERRAND_RUNS,
            &errand_key(deployment, errand),
            deployment,
            &hash,
        )
    }

    pub fn errand_run_gone(deployment: &str, errand: &str) -> Write {
        remove(
            crate::collections::ERRAND_RUNS,
            &errand_key(deployment, errand),
        )
    }

    pub fn log_bundle(bundle: &crate::model::LogBundle) -> Write {
        put(
            crate::collections::LOG_BUNDLES,
            &bundle.id,
            &bundle.deployment,
            bundle,
        )
    }

    pub fn external_link(link: &crate::model::ExternalLink) -> Write {
        put(
            crate::collections::EXTERNAL_LINKS,
            &link.id,
            &link.deployment,
            link,
        )
    }

    pub fn variable(variable: &crate::model::Variable) -> Write {
        put(
            crate::collections::VARIABLES,
            &variable.name,
            &variable.deployment,
            variable,
        )
    }

    pub fn external_link_gone(id: &str) -> Write {
        remove(crate::collections::EXTERNAL_LINKS, id)
    }

    pub fn log_bundle_gone(id: &str) -> Write {
        remove(crate::collections::LOG_BUNDLES, id)
    }

    pub fn compilation_vm(record: &VmRecord) -> Write {
        put(
            crate::collections::COMPILATION_VMS,
            &record.cid,
            &record.deployment,
            record,
        )
    }

    pub fn compilation_vm_gone(cid: &str) -> Write {
        remove(crate::collections::COMPILATION_VMS, cid)
    }

    fn problem_key(problem: &Problem) -> String {
        format!("{}/{}", problem.deployment, problem.id)
    }

    pub fn problem(problem: &Problem) -> Write {
        put(
            crate::collections::PROBLEMS,
            &problem_key(problem),
            &problem.deployment,
            problem,
        )
    }

    pub fn problem_gone(problem: &Problem) -> Write {
        remove(crate::collections::PROBLEMS, &problem_key(problem))
    }

    pub fn disk(record: &DiskRecord) -> Write {
        put(
            crate::collections::DISKS,
            &record.cid,
            &record.deployment,
            record,
        )
    }

    /// A package compiled for a stemcell, under its cache key.
    pub fn compiled(key: &str, package: &impl Serialize) -> Write {
        put(crate::collections::COMPILED_PACKAGES, key, "", package)
    }

    /// `name` (`<id>.<group>.<network>.<deployment>.bosh`) resolves to `address`.
    pub fn dns(name: &str, deployment: &str, address: &str) -> Write {
        put(crate::collections::DNS, name, deployment, &address)
    }

    pub fn dns_gone(name: &str) -> Write {
        remove(crate::collections::DNS, name)
    }
}
