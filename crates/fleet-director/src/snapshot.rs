//! What a deploy works from, read once when its task starts: the manifest, the cloud
//! config's typed model, and the uploads it names. Validation, planning, IP planning and
//! compilation planning read this, so nothing re-reads or re-parses the cloud config
//! mid-deploy, and a cloud config uploaded meanwhile cannot change a deploy halfway.

use super::addresses::Networking;
use super::cloud::{self, CloudModel};
use super::cloud::{CompilationConfig, CompilationConfigError, read_config};
use super::cloud_properties::CloudProperties;
use super::compile::{CompileError, NeededOn, needed_by};
use super::config_server;
use super::documents::Documents;
use super::error::StepError;
use super::manifest::{Manifest, parse_root};
use super::model::{Release, Resolved};
use super::records::{Records, Uploads};
use super::runtime;
use super::validate::{CloudFacts, Uploaded};
use fleet_variables::Values;

pub struct Snapshot {
    pub text: String,
    pub manifest: Manifest,
    /// `None` without a cloud config: the manifest's own networks and compilation apply.
    pub cloud: Option<CloudModel>,
    /// The runtime configs applied, by version: recorded with the deployment.
    pub runtime_versions: Vec<u64>,
    /// What each `latest` of the manifest resolved to, as the deploy started.
    pub latest: Vec<Resolved>,
    /// The releases the manifest names that are uploaded.
    pub releases: Vec<Release>,
    /// The variables its placeholders outside job properties name (in the manifest's
    /// structure, the runtime configs, the cloud config), resolved when it was taken.
    pub placeholders: Vec<String>,
    /// Every uploaded release and stemcell, by name.
    pub uploaded: Uploaded,
    /// The cloud config's `compilation` section, else the manifest's, else one worker; an
    /// invalid block of the manifest is the deploy's error when it compiles.
    compilation: Result<CompilationConfig, CompilationConfigError>,
    /// The packages each stemcell's instances need, or why they cannot be compiled: the
    /// deploy's error once the manifest is found valid.
    needed: Result<Vec<NeededOn>, CompileError>,
}

impl Snapshot {
    /// Reads everything the deploy of `text` needs, once. Placeholders outside job
    /// properties (in the manifest's structure, the runtime configs and the cloud config)
    /// are resolved through the config server first: declared variables are generated and
    /// kept when `generate` (a deploy), else generated into a copy thrown away (a dry run,
    /// or what reads a deployed manifest again).
    ///
    /// # Errors
    /// An invalid manifest or stored cloud config, a placeholder without a value (or a
    /// relative one in a runtime or cloud config), or a store failure.
    pub async fn take(
        records: &Records,
        text: String,
        generate: bool,
    ) -> Result<Snapshot, StepError> {
        let uploads = records.uploads().await?;
        let documents = Documents::read(&text, &uploads)?;
        let names = &documents.placeholders;
        let values = if names.is_empty() {
            Values::new()
        } else {
            let declared = documents
                .manifest
                .get("variables")
                .map(fleet_yaml::Node::to_json)
                .unwrap_or(serde_json::Value::Null);
            let deployment = documents
                .manifest
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_string();
            let wanted = names.iter().cloned().collect();
            config_server::resolve_names(records, &deployment, &declared, generate, &wanted).await?
        };
        Snapshot::build(text, documents, uploads, &values)
    }

    /// The snapshot of `text` against what is uploaded. Pure: what a plan is decided from
    /// in tests that need no director; a placeholder outside properties has no value.
    ///
    /// # Errors
    /// An invalid manifest, runtime config or cloud config.
    #[cfg(test)]
    pub fn of(text: String, uploads: Uploads) -> Result<Snapshot, StepError> {
        let documents = Documents::read(&text, &uploads)?;
        Snapshot::build(text, documents, uploads, &Values::new())
    }

    fn build(
        text: String,
        documents: Documents,
        uploads: Uploads,
        values: &Values,
    ) -> Result<Snapshot, StepError> {
        let placeholders = documents.placeholders.clone();
        let resolved = documents.resolve(values)?;
        let mut manifest = parse_root(&resolved.manifest).map_err(StepError::Manifest)?;
        let (all_releases, stemcells) = (uploads.releases, uploads.stemcells);
        let latest = crate::latest::resolve(&mut manifest, &all_releases, &stemcells);
        // The newest of each runtime config places its addons before anything is planned.
        let in_force: Vec<_> = resolved.runtime.iter().map(|(c, _)| c).collect();
        let runtime_versions = runtime::versions(&in_force);
        let addons = resolved
            .runtime
            .iter()
            .map(|(c, root)| {
                runtime::parse_root(root).map_err(|source| StepError::RuntimeConfig {
                    name: c.name.clone(),
                    version: c.version,
                    source: Box::new(source),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        runtime::apply(&mut manifest, &addons);
        let cloud = resolved
            .cloud
            .map(|(version, root)| cloud::parse_root(&root, version))
            .transpose()?;
        let uploaded = Uploaded {
            releases: all_releases
                .iter()
                .map(|r| format!("{}/{}", r.name, r.version))
                .collect(),
            stemcells: stemcells
                .iter()
                .map(|s| format!("{}/{}", s.os, s.version))
                .collect(),
        };
        let releases: Vec<Release> = all_releases
            .into_iter()
            .filter(|r| {
                manifest
                    .releases
                    .iter()
                    .any(|m| m.name == r.name && m.version == r.version)
            })
            .collect();
        let compilation = match &cloud {
            Some(cloud) => Ok(cloud.compilation.clone()),
            None => match resolved.manifest.get("compilation") {
                Some(node) => read_config(node),
                None => Ok(CompilationConfig::default()),
            },
        };
        let needed = needed_by(&releases, &manifest);
        Ok(Snapshot {
            text,
            placeholders,
            needed,
            manifest,
            cloud,
            runtime_versions,
            latest,
            releases,
            uploaded,
            compilation,
        })
    }

    /// The number each AZ has in DNS query names (`q-a1s0...`): the cloud config's AZs (or,
    /// without one, the manifest's) in name order, from 1.
    pub fn az_ids(&self) -> std::collections::BTreeMap<String, u32> {
        let names: std::collections::BTreeSet<String> =
            match self.cloud.as_ref().and_then(|c| c.facts.azs.clone()) {
                Some(azs) => azs,
                None => self
                    .manifest
                    .instance_groups
                    .iter()
                    .flat_map(|g| g.azs.iter().cloned())
                    .collect(),
            };
        names.into_iter().zip(1..).collect()
    }

    /// The stemcells the manifest deploys on, `os/version`, its `latest` resolved.
    pub fn stemcells(&self) -> std::collections::BTreeSet<String> {
        stemcells_of(&self.manifest)
    }

    /// The packages each stemcell's instances need.
    ///
    /// # Errors
    /// A dependency cycle or a missing package.
    pub fn needed(&self) -> Result<&[NeededOn], StepError> {
        self.needed
            .as_deref()
            .map_err(|e| StepError::from(e.clone()))
    }

    /// The cloud config's networks when there is one, else the manifest's.
    pub fn networking(&self) -> Networking {
        match &self.cloud {
            Some(cloud) => Networking::Global(cloud.networks.clone()),
            None => Networking::Local(self.manifest.networks.clone().unwrap_or_default()),
        }
    }

    /// What the CPI gets for each AZ, VM type, extension and disk type; none without a
    /// cloud config.
    pub fn cloud_properties(&self) -> CloudProperties {
        self.cloud
            .as_ref()
            .map(|c| c.properties.clone())
            .unwrap_or_default()
    }

    /// The names the cloud config (or the manifest's networks) define, for validation.
    pub fn facts(&self) -> CloudFacts {
        match &self.cloud {
            Some(cloud) => cloud.facts.clone(),
            None => CloudFacts {
                networks: self
                    .manifest
                    .networks
                    .iter()
                    .flatten()
                    .map(|n| n.name.clone())
                    .collect(),
                ..CloudFacts::default()
            },
        }
    }

    /// The cloud config's `compilation` section, else the manifest's, else one worker.
    ///
    /// # Errors
    /// An invalid `compilation` block of the manifest.
    pub fn compilation(&self) -> Result<CompilationConfig, StepError> {
        Ok(self.compilation.clone()?)
    }

    /// The version of the cloud config this deploy used.
    pub fn cloud_version(&self) -> Option<u64> {
        self.cloud.as_ref().map(|c| c.version)
    }
}

/// The stemcells `manifest` names, `os/version`.
pub fn stemcells_of(manifest: &Manifest) -> std::collections::BTreeSet<String> {
    manifest
        .stemcells
        .iter()
        .map(|s| format!("{}/{}", s.os, s.version))
        .collect()
}

/// The stemcells the deployment's last successful deploy used (its `latest` as it
/// resolved them then); `None` before its first. Read from the manifest's `stemcells`
/// alone, so that placeholders elsewhere in it do not hide them.
pub fn deployed_stemcells(
    record: &super::model::DeploymentRecord,
) -> Option<std::collections::BTreeSet<String>> {
    let root = fleet_yaml::load(record.manifest.as_deref()?, fleet_yaml::Limits::default()).ok()?;
    let list = root.get("stemcells")?.to_json();
    let text = |v: &serde_json::Value, key: &str| match v.get(key) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Some(
        list.as_array()?
            .iter()
            .filter_map(|s| {
                let alias = text(s, "alias").unwrap_or_default();
                let os = text(s, "os").or_else(|| text(s, "name"))?;
                let version = record
                    .latest
                    .iter()
                    .find(|r| r.kind == "stemcell" && r.name == alias)
                    .map(|r| r.version.clone())
                    .or_else(|| text(s, "version"))?;
                Some(format!("{os}/{version}"))
            })
            .collect(),
    )
}
