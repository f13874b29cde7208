//! What both `create-env` and `delete-env` start from: the manifest read with its
//! variables (and the vars store written where it gained generated ones), the state file,
//! the releases and stemcell it names, and the CPI installed and answering.

use std::path::{Path, PathBuf};

use fleet_cpi::ExternalCpi;
use fleet_release::ReleaseArchive;

use super::error::EnvError;
use super::error::off_runtime;
use super::install::Installation;
use super::manifest::{self, EnvManifest};
use super::sources::{self, Stemcell};
use super::state::StateFile;
use super::variables::{self, VariableError};

/// What the command was given.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub manifest: PathBuf,
    /// The state file; `<manifest without its extension>-state.json` beside it when not
    /// given.
    pub state: Option<PathBuf>,
    /// Where variables are kept; beside the state file (`...-vars.yml`) when not given.
    pub vars_store: Option<PathBuf>,
    /// `-v NAME=VALUE`.
    pub vars: Vec<String>,
    /// Deploy even when nothing changed.
    pub recreate: bool,
}

impl Options {
    pub fn state_path(&self) -> PathBuf {
        self.state.clone().unwrap_or_else(|| {
            let stem = self
                .manifest
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "env".into());
            self.manifest.with_file_name(format!("{stem}-state.json"))
        })
    }

    pub fn vars_store_path(&self) -> PathBuf {
        self.vars_store.clone().unwrap_or_else(|| {
            let state = self.state_path();
            let stem = state
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "env".into());
            state.with_file_name(format!("{stem}-vars.yml"))
        })
    }
}

pub struct Prepared {
    pub manifest: EnvManifest,
    /// A digest of the manifest with its variables in: what tells whether it changed.
    pub sha: String,
    pub base: PathBuf,
    pub state: StateFile,
    pub releases: Vec<ReleaseArchive>,
    pub installation: Installation,
}

/// Reads the manifest and the state.
///
/// # Errors
/// A manifest that is not YAML, has variables no one gives, or is invalid; a state file
/// that cannot be read or written.
pub async fn read(options: &Options) -> Result<Prepared, EnvError> {
    let text = tokio::fs::read_to_string(&options.manifest)
        .await
        .map_err(|e| EnvError::Input(format!("cannot read {}: {e}", options.manifest.display())))?;
    let node = fleet_yaml::load(&text, fleet_yaml::Limits::default())
        .map_err(|e| EnvError::Input(format!("{}: {e}", options.manifest.display())))?;
    // What the store keeps, what the manifest declares and the store lacks generated
    // into it, and `-v` over both.
    let declared = node
        .get("variables")
        .map(|v| v.to_json())
        .unwrap_or_default();
    // Keys and certificates are generated, and the store written, on the blocking pool.
    let store = options.vars_store_path();
    let mut values = tokio::task::spawn_blocking(move || -> Result<_, EnvError> {
        let mut values = variables::load_store(&store)?;
        if variables::generate(&declared, &mut values).map_err(VariableError::from)? {
            variables::save_store(&store, &values)?;
        }
        Ok(values)
    })
    .await
    .map_err(|e| EnvError::Input(e.to_string()))??;
    for (name, value) in
        variables::from_flags(&options.vars).map_err(|e| EnvError::Input(e.to_string()))?
    {
        values.insert(name, value);
    }
    let interpolated = variables::interpolate(&node, &values).map_err(VariableError::from)?;
    let manifest = manifest::parse(&interpolated)?;
    let sha = fleet_release::sha256_hex(interpolated.to_json().to_string().as_bytes());
    let base = options
        .manifest
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let state = StateFile::open(&options.state_path()).await?;
    let installation = Installation::new(&state.state.installation_id)
        .map_err(|e| EnvError::Input(e.to_string()))?;
    Ok(Prepared {
        manifest,
        sha,
        base,
        state,
        releases: Vec::new(),
        installation,
    })
}

impl Prepared {
    /// Reads every release the manifest names.
    ///
    /// # Errors
    /// The first release that cannot be read.
    pub async fn load_releases(&mut self) -> Result<(), EnvError> {
        self.load(None).await
    }

    /// Reads only the release the CPI comes from: all `delete-env` needs (the others may
    /// be large, and built from source on every read).
    ///
    /// # Errors
    /// When it cannot be read.
    pub async fn load_cpi_release(&mut self) -> Result<(), EnvError> {
        let name = self.manifest.cloud_provider.release.clone();
        self.load(Some(name)).await
    }

    async fn load(&mut self, only: Option<String>) -> Result<(), EnvError> {
        let (entries, base) = (self.manifest.releases.clone(), self.base.clone());
        self.releases = off_runtime("reading the releases", move || {
            entries
                .iter()
                .enumerate()
                .filter(|(_, entry)| only.as_ref().is_none_or(|name| &entry.name == name))
                .map(|(i, entry)| sources::release(i, entry, &base))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
        self.check_jobs()
    }

    /// Every job the manifest names is in its release, with every package it needs:
    /// found before anything is made.
    fn check_jobs(&self) -> Result<(), EnvError> {
        let provider = &self.manifest.cloud_provider;
        let mut wanted: Vec<(String, &str, &str)> = self
            .manifest
            .job
            .templates
            .iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    format!("jobs[0].templates[{i}]"),
                    t.name.as_str(),
                    t.release.as_str(),
                )
            })
            .collect();
        wanted.push((
            "cloud_provider.template".into(),
            provider.job.as_str(),
            provider.release.as_str(),
        ));
        let mut problems = Vec::new();
        for (at, job, release_name) in wanted {
            let Some(release) = self.release(release_name) else {
                continue;
            };
            let Some(archive) = release.jobs.iter().find(|j| j.files.spec.name == job) else {
                problems.push(format!(
                    "{at}: job `{job}` is not in release {release_name}"
                ));
                continue;
            };
            let mut pending = archive.files.spec.packages.clone();
            let mut seen = Vec::new();
            while let Some(name) = pending.pop() {
                if seen.contains(&name) {
                    continue;
                }
                match release.packages.iter().find(|p| p.package.archive.name == name) {
                    Some(p) => pending.extend(p.package.dependencies.iter().cloned()),
                    None => problems.push(format!(
                        "{at}: job `{job}` needs package `{name}`, which release {release_name} does not have"
                    )),
                }
                seen.push(name);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(EnvError::Input(problems.join("\n")))
        }
    }

    /// Reads the stemcell the job's resource pool names.
    ///
    /// # Errors
    /// A stemcell that cannot be read.
    pub async fn stemcell(&self) -> Result<Stemcell, EnvError> {
        let scratch = self.installation.scratch();
        std::fs::create_dir_all(&scratch).map_err(|e| EnvError::Input(e.to_string()))?;
        let url = self.manifest.resource_pool().stemcell_url.clone();
        let base = self.base.clone();
        off_runtime("reading the stemcell", move || {
            sources::stemcell(&url, &base, &scratch)
        })
        .await
    }

    pub fn release(&self, name: &str) -> Option<&ReleaseArchive> {
        self.releases.iter().find(|r| r.manifest.name == name)
    }

    /// Installs the CPI and asks it what it speaks.
    ///
    /// # Errors
    /// The CPI release is not read, does not install, or its CPI is older than API
    /// version 2.
    pub async fn cpi(
        &self,
        stemcell_api_version: u32,
        progress: &mut dyn FnMut(String),
    ) -> Result<ExternalCpi, EnvError> {
        let provider = &self.manifest.cloud_provider;
        let release = self.release(&provider.release).ok_or_else(|| {
            EnvError::Input(format!("release `{}` is not read", provider.release))
        })?;
        progress("Installing CPI".into());
        let command = self
            .installation
            .install(
                release,
                &provider.job,
                &provider.properties,
                &self.manifest.name,
                progress,
            )
            .await
            .map_err(EnvError::Install)?;
        let cpi = ExternalCpi::new(command, &self.state.state.director_id, Default::default())
            .for_stemcell_api_version(stemcell_api_version);
        let info = cpi.info().await.map_err(|source| EnvError::Cpi {
            step: "asking the CPI what it speaks".into(),
            source,
        })?;
        if info.api_version < 2 {
            return Err(EnvError::Input(format!(
                "This CLI requires CPI v2.0 or greater, you are using {}",
                info.api_version
            )));
        }
        Ok(cpi)
    }

    /// Starts the registry the manifest names, for a CPI that keeps a VM's settings
    /// there; it lives while the returned value does, so for the whole run.
    ///
    /// # Errors
    /// Its address cannot be listened on.
    pub async fn registry(
        &self,
        progress: &mut dyn FnMut(String),
    ) -> Result<Option<super::registry::RunningRegistry>, EnvError> {
        let Some(settings) = &self.manifest.cloud_provider.registry else {
            return Ok(None);
        };
        progress(format!(
            "Starting registry on {}:{}",
            settings.host, settings.port
        ));
        super::registry::start(settings)
            .await
            .map(Some)
            .map_err(|e| EnvError::Input(e.to_string()))
    }
}
