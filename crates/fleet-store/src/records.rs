//! Typed access to the store's JSON documents.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Store, StoreError, Write};

/// The collections, so that a typo in a name cannot split the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collection {
    Releases,
    Stemcells,
    CloudConfig,
    Deployments,
    Instances,
    Vms,
    Disks,
    /// The simulated IaaS: VMs and disks as the cloud sees them.
    CloudVms,
    CloudDisks,
    /// The simulated agents' state.
    Agents,
    /// The embedded broker's service instances.
    ServiceInstances,
    /// Facts about the embedded fleet as a whole (whether it was provisioned).
    Fleet,
    /// Packages compiled per stemcell, the director's compilation cache.
    CompiledPackages,
    /// DNS records: `<instance>.<group>.<network>.<deployment>.bosh` to its address.
    Dns,
    /// What the last cloud check of each deployment found, until it is resolved.
    Problems,
    /// Each finished task's CPI and debug lines, by task id.
    TaskTraces,
    /// What a finished task wrote as its result output beyond its one-line result (an
    /// errand's results), by task id.
    TaskResults,
    /// The state of a deployment's instances at an errand's last successful run, by
    /// `deployment/errand`: what `when-changed` compares against.
    ErrandRuns,
    /// Log bundles kept for download, by blob id: when each was made and its digest, so
    /// that old ones are deleted.
    LogBundles,
    /// Every version of every named runtime config.
    RuntimeConfigs,
    /// Compilation VMs that exist, by CID: one left by a crash is deleted by the next
    /// deploy of its deployment.
    CompilationVms,
}

impl Collection {
    pub fn name(self) -> &'static str {
        match self {
            Collection::Releases => "releases",
            Collection::Stemcells => "stemcells",
            Collection::CloudConfig => "cloud_config",
            Collection::Deployments => "deployments",
            Collection::Instances => "instances",
            Collection::Vms => "vms",
            Collection::Disks => "disks",
            Collection::CloudVms => "cloud_vms",
            Collection::CloudDisks => "cloud_disks",
            Collection::Agents => "agents",
            Collection::ServiceInstances => "service_instances",
            Collection::Fleet => "fleet",
            Collection::CompiledPackages => "compiled_packages",
            Collection::Dns => "dns",
            Collection::Problems => "problems",
            Collection::TaskTraces => "task_traces",
            Collection::TaskResults => "task_results",
            Collection::ErrandRuns => "errand_runs",
            Collection::LogBundles => "log_bundles",
            Collection::RuntimeConfigs => "runtime_configs",
            Collection::CompilationVms => "compilation_vms",
        }
    }
}

pub fn get<T: DeserializeOwned>(
    store: &dyn Store,
    collection: Collection,
    key: &str,
) -> Result<Option<T>, StoreError> {
    store
        .get(collection, key)?
        .map(|body| serde_json::from_str(&body).map_err(StoreError::from))
        .transpose()
}

pub fn list<T: DeserializeOwned>(
    store: &dyn Store,
    collection: Collection,
    scope: Option<&str>,
) -> Result<Vec<T>, StoreError> {
    store
        .list(collection, scope)?
        .iter()
        .map(|body| serde_json::from_str(body).map_err(StoreError::from))
        .collect()
}

pub fn put<T: Serialize>(collection: Collection, key: &str, scope: &str, value: &T) -> Write {
    Write::Put {
        collection,
        key: key.to_string(),
        scope: scope.to_string(),
        body: serde_json::to_string(value).expect("records serialize"),
    }
}

pub fn remove(collection: Collection, key: &str) -> Write {
    Write::Delete {
        collection,
        key: key.to_string(),
    }
}
