//! Placing an instance's jobs and packages on its VM, as `apply` does: every job's files
//! as the director rendered them (its `monit` file too) with `/var/vcap` paths pointed
//! into the VM, scripts under `bin/` made executable, and each compiled package unpacked
//! under `packages/`. A job's directory is replaced whole, so nothing of an older
//! version stays.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::sandbox::Sandbox;

pub struct PackageToPlace {
    pub name: String,
    pub compiled: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    #[error("job {job}: {message}")]
    Job { job: String, message: String },
    #[error("package {package}: {message}")]
    Package { package: String, message: String },
}

/// Writes every job's rendered files (job to path in its directory to contents), then
/// unpacks every package.
///
/// # Errors
/// A file that cannot be written; an archive that cannot be read.
pub async fn place(
    vm: &Sandbox,
    jobs: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    packages: Vec<PackageToPlace>,
) -> Result<(), PlaceError> {
    // Every job's files rewritten and written: off the async workers.
    let (sandbox, rendered) = (vm.clone(), jobs.clone());
    tokio::task::spawn_blocking(move || {
        rendered.iter().try_for_each(|(job, files)| {
            write_job(&sandbox, job, files).map_err(|e| PlaceError::Job {
                job: job.clone(),
                message: e.to_string(),
            })
        })
    })
    .await
    .map_err(|e| PlaceError::Job {
        job: jobs.keys().cloned().collect::<Vec<_>>().join(", "),
        message: e.to_string(),
    })??;
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
        .map_err(|e| PlaceError::Package {
            package: name,
            message: e.to_string(),
        })?;
    }
    Ok(())
}

/// Removes every job and package of the VM that `jobs` and `packages` do not name, as
/// BOSH's agent keeps only what the spec it applies lists.
///
/// # Errors
/// A directory that cannot be read or an entry that cannot be removed.
pub fn keep_only(vm: &Sandbox, jobs: &[String], packages: &[String]) -> std::io::Result<()> {
    for (dir, kept) in [(vm.jobs(), jobs), (vm.packages(), packages)] {
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            other => other?,
        };
        for entry in entries {
            let entry = entry?;
            if kept.iter().any(|k| entry.file_name() == k.as_str()) {
                continue;
            }
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

fn write_job(vm: &Sandbox, job: &str, files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    let dir = vm.job(job);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    for (relative, bytes) in files {
        let relative = Path::new(relative);
        if relative
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(std::io::Error::other(format!(
                "`{}` leaves the job's directory",
                relative.display()
            )));
        }
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, vm.rewrite(&String::from_utf8_lossy(bytes)))?;
        if is_script(relative) {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// BOSH makes a job's `bin/` executable.
fn is_script(relative: &Path) -> bool {
    relative
        .components()
        .next()
        .is_some_and(|c| c.as_os_str() == "bin")
}
