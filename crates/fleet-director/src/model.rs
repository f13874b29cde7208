//! The director's records: what it knows about releases, stemcells, deployments,
//! instances, VMs, disks and tasks. Everything here is persisted as JSON in the store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    pub name: String,
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// Its archive, for a release uploaded in BOSH's format; `None` for a release the
    /// fleet configuration describes, which the simulated IaaS needs no files of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<Archived>,
    /// For a package a compiled release brought, with no sources: the stemcells
    /// (`os/version`) it is compiled for, and its archive is the compiled one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compiled_for: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseJob {
    pub name: String,
    #[serde(default)]
    pub packages: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<Archived>,
    /// Template source to where it is rendered in the job's directory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub templates: BTreeMap<String, String>,
    /// The properties its spec declares, by dotted name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, PropertySpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<LinkDef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumes: Vec<LinkDef>,
}

/// A link a job's spec provides or consumes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkDef {
    pub name: String,
    #[serde(rename = "type")]
    pub link_type: String,
    /// A consumer that may be left without a provider.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// What a provider exports of its job's properties, by dotted name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<String>,
}

/// A property a job declares, with the default its spec gives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PropertySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A job's or package's archive as the director keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Archived {
    pub version: String,
    /// What uploads match archives by across releases.
    pub fingerprint: String,
    /// The digest `release.MF` gave, as written.
    pub sha1: String,
    /// The store blob holding the archive: its SHA-1.
    pub blob: String,
}

/// A release's metadata: its jobs and packages with their dependencies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub jobs: Vec<ReleaseJob>,
    #[serde(default)]
    pub packages: Vec<Package>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_hash: Option<String>,
    #[serde(default)]
    pub uncommitted_changes: bool,
}

impl Release {
    /// The blobs its archives are kept in.
    pub fn blobs(&self) -> impl Iterator<Item = &str> {
        let jobs = self.jobs.iter().filter_map(|j| j.archive.as_ref());
        let packages = self.packages.iter().filter_map(|p| p.archive.as_ref());
        jobs.chain(packages).map(|a| a.blob.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stemcell {
    pub name: String,
    pub os: String,
    pub version: String,
    /// What the CPI calls it: `create_stemcell`'s answer, for CPIs that keep images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cid: Option<String>,
}

/// What an instance runs, recorded when it was last applied; comparing it with the
/// desired spec tells whether the instance changes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InstanceSpec {
    pub stemcell: String,
    /// Release name to version, for the releases whose jobs the instance runs.
    pub releases: BTreeMap<String, String>,
    pub jobs: Vec<String>,
    pub vm_type: Option<String>,
    /// What `create_vm` was given for the VM beyond its stemcell and networks: its AZ's,
    /// VM type's and VM extensions' cloud properties merged. Empty (and absent from
    /// records made before they were kept) where the cloud config defines none.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub cloud_properties: serde_json::Map<String, serde_json::Value>,
    /// Persistent disk size in MB; 0 for none.
    pub persistent_disk: u64,
    /// The disk type's cloud properties, which `create_disk` was given.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub disk_cloud_properties: serde_json::Map<String, serde_json::Value>,
    pub networks: Vec<String>,
    /// Job properties, rendered: a change here restarts the jobs.
    pub properties: serde_json::Value,
    /// The job templates as the director rendered them for the instance, where the
    /// infrastructure runs jobs; `None` in the simulation. Not compared when planning:
    /// what renders them differently changes a field above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered: Option<RenderedTemplates>,
    /// The digest of what its jobs consume through links; `None` where they consume
    /// none. A provider's change changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<String>,
}

/// An instance's rendered job templates, kept as a store blob for its agent to place.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RenderedTemplates {
    /// The store blob holding them (its SHA-1).
    pub blob: String,
    /// The digest of every rendered file's path and contents: the configuration hash,
    /// which tells drain scripts whether the configuration changed.
    pub configuration_hash: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesiredState {
    Started,
    /// Jobs stopped, VM kept (`stop`).
    Stopped,
    /// Jobs stopped and VM deleted (`stop --hard`); the instance keeps its addresses and
    /// persistent disk until it is started again.
    Detached,
}

/// One instance of an instance group, with the VM and disk it has now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub id: String,
    pub deployment: String,
    pub group: String,
    pub index: u32,
    pub az: Option<String>,
    pub vm_cid: Option<String>,
    pub agent_id: Option<String>,
    /// The stemcell the current VM was created from.
    #[serde(default)]
    pub vm_stemcell: Option<String>,
    /// The VM type the current VM was created with: with no applied spec (an update that
    /// stopped part way) it is all that tells whether the VM still has to change.
    #[serde(default)]
    pub vm_type: Option<String>,
    /// The current VM's networks with their addresses (`default/10.0.0.5`), as it was
    /// created with them: what an address change is judged against.
    #[serde(default)]
    pub vm_networks: Vec<String>,
    pub disk_cid: Option<String>,
    /// The spec last applied and started successfully. It is cleared before an update
    /// makes its first change, so an update cut short is redone by the next deploy.
    pub applied: Option<InstanceSpec>,
    pub state: DesiredState,
    /// Set aside by the operator (`bosh ignore`): deploys, state changes and cloud check
    /// leave it as it is.
    #[serde(default)]
    pub ignore: bool,
}

impl InstanceRecord {
    /// `group/index`, the name BOSH shows in events.
    pub fn name(&self) -> String {
        format!("{}/{} ({})", self.group, self.id, self.index)
    }

    /// A started instance of deployment `d` on VM `vm-ID` with agent `agent-ID`, nothing
    /// applied: what unit tests build on.
    #[cfg(test)]
    pub fn on_vm(group: &str, index: u32, id: &str) -> InstanceRecord {
        InstanceRecord {
            id: id.into(),
            deployment: "d".into(),
            group: group.into(),
            index,
            az: None,
            vm_cid: Some(format!("vm-{id}")),
            agent_id: Some(format!("agent-{id}")),
            vm_stemcell: None,
            vm_type: None,
            vm_networks: Vec::new(),
            disk_cid: None,
            applied: None,
            state: DesiredState::Started,
            ignore: false,
        }
    }

    /// The `network/address` entries its VM runs on now, else those last applied.
    pub fn current_networks(&self) -> &[String] {
        if self.vm_networks.is_empty() {
            self.applied.as_ref().map_or(&[][..], |a| &a.networks)
        } else {
            &self.vm_networks
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmRecord {
    pub cid: String,
    pub agent_id: String,
    pub deployment: String,
    pub instance_id: Option<String>,
    pub stemcell: String,
    /// When the director made it (Unix seconds); unknown for VMs recorded before.
    #[serde(default)]
    pub created_at: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRecord {
    pub cid: String,
    pub deployment: String,
    pub instance_id: Option<String>,
    pub size: u64,
    /// The cloud properties it was created with: a disk with others is replaced.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub cloud_properties: serde_json::Map<String, serde_json::Value>,
    /// Kept when its instance went away; listed as orphaned, never deleted by a deploy.
    pub orphaned: bool,
    /// Since when it is orphaned (Unix seconds), and the instance it belonged to
    /// (`group/id`), for `bosh disks --orphaned`.
    #[serde(default)]
    pub orphaned_at: Option<u64>,
    #[serde(default)]
    pub instance_name: Option<String>,
    #[serde(default)]
    pub az: Option<String>,
}

/// A deployment and the manifest it last deployed successfully.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    pub name: String,
    /// The manifest of the last successful deploy; `None` while the first one has not
    /// succeeded.
    pub manifest: Option<String>,
    /// The version of the cloud config that deploy used.
    #[serde(default)]
    pub cloud_config: Option<u64>,
    /// The versions of the runtime configs it applied (the newest of each name), ascending.
    #[serde(default)]
    pub runtime_configs: Vec<u64>,
    /// The links its jobs provide: what consumers in other deployments and the links
    /// API find.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<Provider>,
    /// The links its jobs consume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<Consumer>,
    /// What the manifest's `latest` versions were when it deployed: `manifest` keeps the
    /// text as given, as BOSH keeps `manifest_text`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latest: Vec<Resolved>,
}

/// A version the manifest asked for as `latest`, and what it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// `release` or `stemcell`.
    pub kind: String,
    /// The release's name, or the stemcell's alias.
    pub name: String,
    pub version: String,
}

/// An instance of a provider's group, as a link lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInstance {
    /// The instance group's name.
    pub name: String,
    pub id: String,
    pub index: u32,
    pub az: Option<String>,
    /// Its address on the link's network: its IP, or its DNS name where the IaaS assigns
    /// the IP.
    pub address: String,
    pub bootstrap: bool,
    /// Its IP on each network that has one (not a dynamic one's): what a consumer's
    /// `network:` picks from. Kept with the provider, never shown in a link.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub addresses: BTreeMap<String, String>,
    /// Its DNS name on each network: what `ip_addresses: false` (and a dynamic network)
    /// gives.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dns_addresses: BTreeMap<String, String>,
}

/// A link a job of a deployment provides, as it is kept with the deployment for its
/// consumers in other deployments and for the links API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provider {
    pub deployment: String,
    pub group: String,
    pub job: String,
    /// The name in the job's spec.
    pub name: String,
    /// The name consumers find it by: `as`, or the spec's name.
    pub alias: String,
    #[serde(rename = "type")]
    pub link_type: String,
    pub shared: bool,
    /// `nil` in the manifest: no one may consume it.
    #[serde(default)]
    pub blocked: bool,
    /// The exported properties, nested.
    pub properties: serde_json::Value,
    pub networks: Vec<String>,
    pub default_network: String,
    pub instances: Vec<LinkInstance>,
    /// The number DNS query names give each AZ (`q-a1s0...`), from the cloud config's
    /// order: what `link.address(azs: [...])` encodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub az_ids: BTreeMap<String, u32>,
}

/// A link a client made to a shared provider (`POST /links`): the ODB's
/// `binding_with_dns` asks one for a DNS address, then deletes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalLink {
    pub id: String,
    /// The provider's deployment.
    pub deployment: String,
    pub provider_id: String,
    /// What the client called its consumer (`owner_object.name`).
    pub owner: String,
    pub network: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
}

/// A variable the config server keeps.
#[derive(Clone, Serialize, Deserialize)]
pub struct Variable {
    pub id: String,
    /// Its full name, `/DIRECTOR/DEPLOYMENT/NAME` or an absolute one.
    pub name: String,
    pub deployment: String,
    pub value: serde_json::Value,
    /// The `type` and `options` it was generated from: `update_mode: converge` makes it
    /// anew when they change.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub generated_from: serde_json::Value,
}

/// A variable shows its id and name, never its value.
impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variable")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A package compiled for a stemcell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledPackage {
    pub package: String,
    pub stemcell: String,
    pub blob: String,
}

/// A link a job consumes, as the links API lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumer {
    pub group: String,
    pub job: String,
    pub name: String,
    #[serde(rename = "type")]
    pub link_type: String,
    pub optional: bool,
    /// The id of the provider the deploy linked it to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// The configs a deploy would apply now, by version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigsInForce {
    pub cloud: Option<u64>,
    /// The newest version of each runtime config, ascending.
    pub runtime: Vec<u64>,
}

impl ConfigsInForce {
    /// Whether the deploy `record` was made with other configs than these: a redeploy
    /// would apply a changed network, VM type or addon.
    pub fn outdate(&self, record: &DeploymentRecord) -> bool {
        record.cloud_config != self.cloud || record.runtime_configs != self.runtime
    }
}

/// One uploaded version of a named config (a runtime or a resurrection config): each name
/// keeps its versions, the newest of each name applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedConfig {
    pub name: String,
    pub version: u64,
    pub text: String,
    pub created_at: Option<u64>,
}

/// The director's cloud config; every update makes a new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudConfig {
    pub version: u64,
    pub text: String,
    /// When it was uploaded (Unix seconds); unknown for configs kept before.
    #[serde(default)]
    pub created_at: Option<u64>,
}

/// How a deployment's cloud config compares with the one in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloudConfigUse {
    /// The director has no cloud config.
    None,
    Latest,
    /// Deployed with an older version, or before there was one.
    Outdated,
}

impl CloudConfigUse {
    pub fn as_str(self) -> &'static str {
        match self {
            CloudConfigUse::None => "none",
            CloudConfigUse::Latest => "latest",
            CloudConfigUse::Outdated => "outdated",
        }
    }
}

/// A deployment as listings show it.
#[derive(Debug, Clone)]
pub struct DeploymentSummary {
    pub record: DeploymentRecord,
    /// Its last successfully deployed manifest, parsed; `None` before a first success.
    pub manifest: Option<crate::manifest::Manifest>,
    pub cloud_config: CloudConfigUse,
    pub locked: bool,
}

/// What the deployed manifests use, for "currently deployed" in release and stemcell
/// listings.
#[derive(Debug, Clone, Default)]
pub struct DeployedVersions {
    /// Release name and version.
    pub releases: std::collections::BTreeSet<(String, String)>,
    /// Stemcell os, version, and the deployment that uses it.
    pub stemcells: Vec<(String, String, String)>,
}

pub use crate::task_kind::TaskKind;
pub use fleet_store::{EventState, Task, TaskEvent, TaskFilter, TaskState};

/// A kept bundle: the blob that holds it, and what a download checks it against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBundle {
    pub id: String,
    pub deployment: String,
    /// Unix milliseconds.
    pub created_at: u64,
    pub sha1: String,
}
