//! Installing the CPI on this machine, as seed 002 describes it: the packages the CPI job
//! needs compiled here (dependencies first, each compilation kept by the package's
//! fingerprint and its dependencies', so that the next run compiles nothing again), the
//! job's templates rendered with `cloud_provider.properties`, all in an installation
//! directory of its own, keyed by the state's installation id. The CPI is the job's
//! `bin/cpi`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_cpi::CpiCommand;
use fleet_release::ReleaseArchive;
use fleet_render::{InstanceSpec, JobSource, render_archive, unpack};
use fleet_vm::compile::{self, CompileRequest};
use fleet_vm::sandbox::Sandbox;
use serde_json::Value as Json;

/// How long one CPI call may take.
pub const CPI_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The variable the CPI's scripts find this program by: a CPI release may run it
/// (`fleet-updater cpi`), as the demo's does.
pub const PROGRAM_VARIABLE: &str = "FLEET_UPDATER_PROGRAM";

/// Where installations are kept: `$FLEET_UPDATER_HOME/installations`, or
/// `~/.fleet-updater/installations`.
pub fn installations() -> PathBuf {
    let base = std::env::var_os("FLEET_UPDATER_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".fleet-updater")))
        .unwrap_or_else(|| PathBuf::from(".fleet-updater"));
    base.join("installations")
}

pub struct Installation {
    dir: PathBuf,
}

/// An installation id that is not a UUID, which could name a path outside installations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the state file's installation_id `{id}` is not a UUID")]
pub struct InstallationIdError {
    pub id: String,
}

/// Why the CPI could not be installed from its release.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cloud_provider.template: job `{job}` is not in release {release}")]
    NoJob { job: String, release: String },
    #[error("package dependency cycle: {0}")]
    Cycle(String),
    #[error("package `{package}` is not in release {release}")]
    NoPackage { package: String, release: String },
    #[error("package `{0}`: the release holds no archive of it")]
    NoArchive(String),
    #[error(transparent)]
    Compile(#[from] fleet_vm::compile::CompileError),
    #[error("package {package}: {source}")]
    Unpack {
        package: String,
        #[source]
        source: fleet_release::ArchiveError,
    },
    #[error("cloud_provider.properties: {0}")]
    Render(#[from] fleet_render::RenderError),
    #[error(transparent)]
    Rendered(#[from] fleet_render::UnpackError),
    #[error(transparent)]
    Place(#[from] fleet_vm::place::PlaceError),
    #[error("cloud_provider.template: job `{0}` has no template rendered to bin/cpi")]
    NoCpi(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unpacking the compiled packages was interrupted")]
    Interrupted,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The packages `wanted` need, dependencies before what depends on them.
fn in_order(release: &ReleaseArchive, wanted: &[String]) -> Result<Vec<String>, InstallError> {
    fn visit(
        release: &ReleaseArchive,
        name: &str,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Result<(), InstallError> {
        if done.iter().any(|d| d == name) {
            return Ok(());
        }
        if path.iter().any(|p| p == name) {
            return Err(InstallError::Cycle(format!(
                "{} -> {name}",
                path.join(" -> ")
            )));
        }
        let package = release
            .packages
            .iter()
            .find(|p| p.package.archive.name == name)
            .ok_or_else(|| InstallError::NoPackage {
                package: name.to_string(),
                release: release.manifest.name.clone(),
            })?;
        path.push(name.to_string());
        for dep in &package.package.dependencies {
            visit(release, dep, path, done)?;
        }
        path.pop();
        done.push(name.to_string());
        Ok(())
    }
    let mut done = Vec::new();
    for name in wanted {
        visit(release, name, &mut Vec::new(), &mut done)?;
    }
    Ok(done)
}

/// Whether `id` is a UUID, as the state file's ids are: anything else could name a path.
pub fn is_uuid(id: &str) -> bool {
    id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

impl Installation {
    /// The installation of `installation_id`.
    ///
    /// # Errors
    /// An id that is not a UUID (a state file edited by hand).
    pub fn new(installation_id: &str) -> Result<Self, InstallationIdError> {
        if !is_uuid(installation_id) {
            return Err(InstallationIdError {
                id: installation_id.to_string(),
            });
        }
        Ok(Installation {
            dir: installations().join(installation_id),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A scratch directory inside the installation.
    pub fn scratch(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// Installs the CPI job `job` of `release`, rendered with `properties`; the command
    /// that runs it.
    ///
    /// # Errors
    /// A job the release lacks, a package that does not compile (its output's tail), a
    /// template that does not render, or a job without `bin/cpi`.
    pub async fn install(
        &self,
        release: &ReleaseArchive,
        job: &str,
        properties: &Json,
        deployment: &str,
        progress: &mut dyn FnMut(String),
    ) -> Result<CpiCommand, InstallError> {
        let vm = Sandbox::create(&self.dir).map_err(io(&self.dir))?;
        let scratch = self.scratch();
        std::fs::create_dir_all(&scratch).map_err(io(&scratch))?;
        let cache = self.dir.join("compiled");
        std::fs::create_dir_all(&cache).map_err(io(&cache))?;
        let job_archive = release
            .jobs
            .iter()
            .find(|j| j.files.spec.name == job)
            .ok_or_else(|| InstallError::NoJob {
                job: job.to_string(),
                release: release.manifest.name.clone(),
            })?;
        let order = in_order(release, &job_archive.files.spec.packages)?;
        let program = std::env::current_exe().map_err(io(Path::new("the running program")))?;
        // Each package's cache key, its dependencies' in it.
        let mut keys: BTreeMap<String, String> = BTreeMap::new();
        let mut compiled: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for name in &order {
            let package = release
                .packages
                .iter()
                .find(|p| &p.package.archive.name == name)
                .expect("ordered packages are in the release");
            let mut deps: Vec<&str> = package
                .package
                .dependencies
                .iter()
                .map(|d| keys[d].as_str())
                .collect();
            deps.sort_unstable();
            let key = format!(
                "{name}-{}",
                fleet_release::sha1_hex(
                    format!(
                        "{}\n{}",
                        package.package.archive.fingerprint,
                        deps.join(",")
                    )
                    .as_bytes()
                )
            );
            let cached = cache.join(format!("{key}.tgz"));
            let bytes = match tokio::fs::read(&cached).await {
                Ok(bytes) => bytes,
                Err(_) => {
                    progress(format!(
                        "Compiling package '{name}/{}'",
                        package.package.archive.version
                    ));
                    let source = package
                        .bytes
                        .as_ref()
                        .ok_or_else(|| InstallError::NoArchive(name.clone()))?
                        .read()
                        .map_err(io(&cached))?;
                    let dependencies = package
                        .package
                        .dependencies
                        .iter()
                        .map(|d| (d.clone(), compiled[d].clone()))
                        .collect();
                    let (bytes, _) = compile::compile(
                        &vm,
                        CompileRequest {
                            name,
                            version: &package.package.archive.version,
                            source: &source,
                            dependencies,
                            env: vec![(PROGRAM_VARIABLE.into(), program.display().to_string())],
                        },
                    )
                    .await?;
                    // Written whole: a run killed while writing leaves no half archive
                    // for the next to take.
                    let (path, kept) = (cached.clone(), bytes);
                    tokio::task::spawn_blocking(move || {
                        fleet_file::write(&path, &kept, fleet_file::Mode::Private).map(|()| kept)
                    })
                    .await
                    .map_err(|e| io(&cached)(std::io::Error::other(e)))?
                    .map_err(io(&cached))?
                }
            };
            keys.insert(name.clone(), key);
            compiled.insert(name.clone(), bytes);
        }
        let packages = vm.packages();
        tokio::task::spawn_blocking(move || -> Result<(), InstallError> {
            for (name, bytes) in &compiled {
                let at = packages.join(name);
                let _ = std::fs::remove_dir_all(&at);
                fleet_release::unpack(bytes, &at, 16 << 30).map_err(|source| {
                    InstallError::Unpack {
                        package: name.clone(),
                        source,
                    }
                })?;
            }
            Ok(())
        })
        .await
        .map_err(|_| InstallError::Interrupted)??;
        progress(format!("Rendering job templates for '{job}'"));
        let spec = InstanceSpec {
            address: String::new(),
            ip: String::new(),
            id: "0".into(),
            index: 0,
            name: job.to_string(),
            az: Some("unknown".into()),
            deployment: deployment.to_string(),
            networks: [("default".to_string(), serde_json::json!({"ip": ""}))].into(),
            bootstrap: true,
        };
        let source = JobSource::from_files(&job_archive.files, properties.clone())
            .of_release(&release.manifest.name, &release.manifest.version);
        let (archive, _) = render_archive(&spec, &[source], fleet_render::Isolation::Host).await?;
        let jobs = unpack(&archive)?;
        fleet_vm::place::place(&vm, &jobs, Vec::new()).await?;
        let executable = vm.job(job).join("bin/cpi");
        if !executable.is_file() {
            return Err(InstallError::NoCpi(job.to_string()));
        }
        Ok(CpiCommand {
            executable,
            args: Vec::new(),
            env: vec![
                (
                    "BOSH_PACKAGES_DIR".into(),
                    vm.packages().display().to_string(),
                ),
                (
                    "BOSH_JOBS_DIR".into(),
                    self.dir.join("jobs").display().to_string(),
                ),
                (PROGRAM_VARIABLE.into(), program.display().to_string()),
            ],
            timeout: CPI_TIMEOUT,
        })
    }

    /// Removes the installation (`delete-env` is done), off the runtime: it holds
    /// compiled packages.
    pub async fn remove(&self) {
        let dir = self.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    }
}
