//! What a create-env manifest says, once read and checked.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::Value as Json;

#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseEntry {
    pub name: String,
    /// `file://PATH` (relative to the manifest's directory), a tarball or a directory
    /// holding a release (`release.MF`) or its source in BOSH's layout (`config/final.yml`).
    pub url: String,
    /// The version to build a release kept as source in.
    pub version: Option<String>,
    pub sha1: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkKind {
    Manual,
    Dynamic,
    Vip,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub name: String,
    pub kind: NetworkKind,
    /// A manual network's one subnet: range, gateway, DNS servers, cloud properties.
    pub range: Option<Ipv4Net>,
    pub gateway: Option<Ipv4Addr>,
    pub dns: Vec<String>,
    pub cloud_properties: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResourcePool {
    pub name: String,
    pub network: String,
    pub stemcell_url: String,
    pub stemcell_sha1: Option<String>,
    pub cloud_properties: Json,
    pub env: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DiskPool {
    pub name: String,
    pub disk_size: u64,
    pub cloud_properties: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobTemplate {
    pub name: String,
    pub release: String,
    /// The job's own properties, which replace the instance group's when given.
    pub properties: Option<Json>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobNetwork {
    pub name: String,
    pub static_ips: Vec<Ipv4Addr>,
    pub default: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    pub templates: Vec<JobTemplate>,
    pub resource_pool: String,
    pub persistent_disk: u64,
    pub persistent_disk_pool: Option<String>,
    pub networks: Vec<JobNetwork>,
    pub properties: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CloudProvider {
    /// The CPI job and the release it is in.
    pub job: String,
    pub release: String,
    /// Where the VM's agent answers, with the credentials to bring.
    pub mbus: String,
    pub properties: Json,
    /// The CA the agent's certificate is checked against; unchecked without one.
    pub ca: Option<String>,
    /// The registry to start for the CPI (`properties.registry`), when it uses one.
    pub registry: Option<crate::registry::RegistrySettings>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EnvManifest {
    pub name: String,
    pub releases: Vec<ReleaseEntry>,
    pub networks: Vec<Network>,
    pub resource_pools: Vec<ResourcePool>,
    pub disk_pools: Vec<DiskPool>,
    pub job: Job,
    pub properties: Json,
    pub cloud_provider: CloudProvider,
    /// How long the job may take to run after it starts: the end of `update_watch_time`.
    pub watch_time_ms: u64,
}

impl CloudProvider {
    /// Where the agent answers, without its credentials.
    pub fn mbus_address(&self) -> String {
        fleet_agent::mbus::MbusUrl::parse(&self.mbus)
            .map(|u| u.without_credentials())
            .unwrap_or_else(|_| "the mbus".into())
    }
}

impl EnvManifest {
    pub fn resource_pool(&self) -> &ResourcePool {
        self.resource_pools
            .iter()
            .find(|p| p.name == self.job.resource_pool)
            .expect("validated: the job's resource pool exists")
    }

    /// The persistent disk's size in MiB (0 for none) and its cloud properties.
    pub fn disk(&self) -> (u64, Json) {
        match &self.job.persistent_disk_pool {
            Some(pool) => self
                .disk_pools
                .iter()
                .find(|p| &p.name == pool)
                .map(|p| (p.disk_size, p.cloud_properties.clone()))
                .unwrap_or((0, Json::Null)),
            None => (self.job.persistent_disk, serde_json::json!({})),
        }
    }

    /// The job's properties as its templates see them: its own, else the instance
    /// group's over the global ones.
    pub fn job_properties(&self, template: &JobTemplate) -> Json {
        if let Some(own) = &template.properties {
            return own.clone();
        }
        let mut merged = self.properties.clone();
        merge(&mut merged, &self.job.properties);
        merged
    }
}

fn merge(into: &mut Json, from: &Json) {
    match (into, from) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Json::Null), v);
            }
        }
        (slot, value) if !value.is_null() => *slot = value.clone(),
        _ => {}
    }
}
