//! Placing an instance's jobs and packages on its VM, as `apply` does: every job's
//! templates (its `monit` file too) rendered for the instance, `/var/vcap` paths pointed
//! into the VM, scripts under `bin/` made executable, and each compiled package unpacked
//! under `packages/`. A job's directory is replaced whole, so nothing of an older
//! version stays.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::render::{self, Declared, InstanceSpec, JobTemplates, RenderError};
use super::sandbox::Sandbox;

/// The key the monit file is rendered under, beside the templates' source names.
const MONIT: &str = "(monit)";

pub struct JobToPlace {
    pub name: String,
    /// The job's archive as its release brought it.
    pub archive: Vec<u8>,
    /// Template source to its destination in the job's directory.
    pub templates: BTreeMap<String, String>,
    pub declared: BTreeMap<String, Option<serde_json::Value>>,
    /// The job's properties as the manifest gives them.
    pub properties: serde_json::Value,
}

pub struct PackageToPlace {
    pub name: String,
    pub compiled: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error("job {job}: {message}")]
    Job { job: String, message: String },
    #[error("package {package}: {message}")]
    Package { package: String, message: String },
}

/// Renders and writes every job, then unpacks every package.
///
/// # Errors
/// Every template failure of the instance at once; an archive that cannot be read.
pub async fn place(
    vm: &Sandbox,
    spec: &InstanceSpec,
    jobs: Vec<JobToPlace>,
    packages: Vec<PackageToPlace>,
) -> Result<(), PlaceError> {
    let mut to_render = Vec::new();
    for job in &jobs {
        let entries = fleet_release::tgz_files(&job.archive, fleet_release_job_limit()).map_err(
            |message| PlaceError::Job {
                job: job.name.clone(),
                message,
            },
        )?;
        let text = |path: &str| {
            entries
                .iter()
                .find(|e| e.path == path)
                .map(|e| String::from_utf8_lossy(&e.bytes).into_owned())
        };
        let mut templates = BTreeMap::new();
        for source in job.templates.keys() {
            let body = text(&format!("templates/{source}")).ok_or_else(|| PlaceError::Job {
                job: job.name.clone(),
                message: format!("its archive has no templates/{source}"),
            })?;
            templates.insert(source.clone(), body);
        }
        templates.insert(MONIT.to_string(), text("monit").unwrap_or_default());
        to_render.push(JobTemplates {
            name: job.name.clone(),
            declared: job
                .declared
                .iter()
                .map(|(k, v)| (k.clone(), Declared { default: v.clone() }))
                .collect(),
            properties: job.properties.clone(),
            templates,
        });
    }
    let rendered = render::render(spec, &to_render).await?;
    for job in &jobs {
        let files = rendered.get(&job.name).cloned().unwrap_or_default();
        write_job(vm, job, &files).map_err(|e| PlaceError::Job {
            job: job.name.clone(),
            message: e.to_string(),
        })?;
    }
    for package in packages {
        let at = vm.packages().join(&package.name);
        let name = package.name.clone();
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(&at);
            fleet_release::unpack(&package.compiled, &at, 16 << 30)
        })
        .await
        .map_err(|e| PlaceError::Package {
            package: name.clone(),
            message: e.to_string(),
        })?
        .map_err(|message| PlaceError::Package {
            package: name,
            message,
        })?;
    }
    Ok(())
}

fn fleet_release_job_limit() -> u64 {
    64 * 1024 * 1024
}

fn write_job(
    vm: &Sandbox,
    job: &JobToPlace,
    rendered: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    let dir = vm.job(&job.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let monit = rendered.get(MONIT).map(String::as_str).unwrap_or_default();
    std::fs::write(dir.join("monit"), vm.rewrite(monit))?;
    for (source, dest) in &job.templates {
        let text = rendered.get(source).map(String::as_str).unwrap_or_default();
        let path = dir.join(dest);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, vm.rewrite(text))?;
        if is_script(Path::new(dest)) {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// BOSH makes a job's `bin/` executable.
fn is_script(dest: &Path) -> bool {
    dest.components()
        .next()
        .is_some_and(|c| c.as_os_str() == "bin")
}
