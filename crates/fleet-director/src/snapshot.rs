//! What a deploy works from, read once when its task starts: the manifest, the cloud
//! config's typed model, and the uploads it names. Validation, planning, IP planning and
//! compilation planning read this, so nothing re-reads or re-parses the cloud config
//! mid-deploy, and a cloud config uploaded meanwhile cannot change a deploy halfway.

use super::addresses::Networking;
use super::cloud::{self, CloudModel};
use super::cloud::{CompilationConfig, CompilationConfigError, read_config};
use super::cloud_properties::CloudProperties;
use super::compile::{CompileError, NeededOn, needed_by};
use super::error::StepError;
use super::manifest::{Manifest, parse};
use super::model::{Release, Resolved};
use super::records::{Records, Uploads};
use super::runtime;
use super::validate::{CloudFacts, Uploaded};

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
    /// Reads everything the deploy of `text` needs, once.
    ///
    /// # Errors
    /// An invalid manifest or stored cloud config, or a store failure.
    pub async fn take(records: &Records, text: String) -> Result<Snapshot, StepError> {
        let uploads = records.uploads().await?;
        Snapshot::of(text, uploads)
    }

    /// The snapshot of `text` against what is uploaded. Pure: what a plan is decided from
    /// in tests that need no director.
    ///
    /// # Errors
    /// An invalid manifest, runtime config or cloud config.
    pub fn of(text: String, uploads: Uploads) -> Result<Snapshot, StepError> {
        let mut manifest = parse(&text).map_err(StepError::Manifest)?;
        let (cloud, all_releases, stemcells) =
            (uploads.cloud_config, uploads.releases, uploads.stemcells);
        let latest = crate::latest::resolve(&mut manifest, &all_releases, &stemcells);
        // The newest of each runtime config places its addons before anything is planned.
        let in_force = runtime::latest(&uploads.runtime_configs);
        let runtime_versions = runtime::versions(&in_force);
        let addons = in_force
            .into_iter()
            .map(|c| {
                runtime::parse(&c.text).map_err(|source| StepError::RuntimeConfig {
                    name: c.name.clone(),
                    version: c.version,
                    source: Box::new(source),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        runtime::apply(&mut manifest, &addons);
        let cloud = cloud
            .map(|c| cloud::parse(&c.text, c.version))
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
            None => fleet_yaml::load(&text, fleet_yaml::Limits::default())
                .map_err(|e| CompilationConfigError::Yaml(e.to_string()))
                .and_then(|root| match root.get("compilation") {
                    Some(node) => read_config(node),
                    None => Ok(CompilationConfig::default()),
                }),
        };
        let needed = needed_by(&releases, &manifest);
        Ok(Snapshot {
            text,
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
