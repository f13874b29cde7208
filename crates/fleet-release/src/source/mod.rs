//! A release kept as source in BOSH's layout, built into a dev release tarball as `bosh
//! create-release --tarball` builds it, with the CLI's fingerprints:
//!
//! ```text
//! config/final.yml                  name: RELEASE
//! config/blobs.yml                  the blobs `bosh add-blob` recorded (kept in blobs/)
//! jobs/JOB/spec                     the job's spec (job.MF in the archive)
//! jobs/JOB/monit
//! jobs/JOB/templates/...            the templates the spec names
//! packages/PACKAGE/spec             name, dependencies, files, excluded_files
//! packages/PACKAGE/packaging
//! src/...                           what packages' `files:` globs select, then
//! blobs/...                         the blobs config/blobs.yml records
//! ```
//!
//! A job's templates learn the release's version from `spec.release.version`, as on a
//! director.

mod disk;
mod package_files;

use std::path::Path;

use fleet_yaml::{Limits, load};

use super::archive::ReleaseError;
use super::builder::{ReleaseBuilder, SourceFile};
use disk::{file_name, files_under, read, subdirectories};
use package_files::PackageSpec;

/// Whether `dir` holds a release source (its `config/final.yml`).
pub fn is_release_source(dir: &Path) -> bool {
    dir.join("config/final.yml").is_file()
}

/// The release's name, from `config/final.yml` (`name`, or the older `final_name`).
///
/// # Errors
/// A missing or unreadable file, no name, or both keys.
pub fn source_name(dir: &Path) -> Result<String, ReleaseError> {
    let path = dir.join("config/final.yml");
    let root = yaml(&path)?.ok_or_else(|| ReleaseError::Invalid {
        file: path.display().to_string(),
        problems: vec![
            "is missing: a release source is in BOSH's layout, named by `name:` in \
             config/final.yml"
                .into(),
        ],
    })?;
    let text = |key: &str| {
        root.get(key)
            .and_then(|n| n.as_str())
            .filter(|s| !s.is_empty())
    };
    match (text("name"), text("final_name")) {
        (Some(name), None) | (None, Some(name)) => Ok(name.to_string()),
        (None, None) => Err(invalid(&path, "name: is missing")),
        (Some(_), Some(_)) => Err(invalid(&path, "give `name` or `final_name`, not both")),
    }
}

/// Builds the release source in `dir` as version `version`; its tarball.
///
/// # Errors
/// A file that cannot be read, or every problem of a job or package, named by its file.
pub fn build_from_source(dir: &Path, version: &str) -> Result<Vec<u8>, ReleaseError> {
    let name = source_name(dir)?;
    let tracked = tracked_blobs(dir)?;
    let mut builder = ReleaseBuilder::new(&name, version);
    for job in subdirectories(&dir.join("jobs"))? {
        let files = job_files(&job)?;
        builder = builder.job_source(&file_name(&job), files);
    }
    let src = files_under(&dir.join("src"))?;
    let mut blobs = files_under(&dir.join("blobs"))?;
    blobs.retain(|blob| tracked.contains(&blob.relative));
    for package in subdirectories(&dir.join("packages"))? {
        let (spec, files) = package_source(dir, &package, &src, &blobs)?;
        let deps: Vec<&str> = spec.dependencies.iter().map(String::as_str).collect();
        builder = builder.package_source(&spec.name, &deps, files);
    }
    Ok(builder.build())
}

/// A job's files as the CLI archives them: its spec as `job.MF`, `monit`,
/// `properties_schema.json` when there is one, and each template its spec names.
fn job_files(job: &Path) -> Result<Vec<SourceFile>, ReleaseError> {
    let spec_path = job.join("spec");
    let (spec_bytes, spec_mode) = read(&spec_path)?;
    let spec =
        super::job::parse_spec(&String::from_utf8_lossy(&spec_bytes)).map_err(|problems| {
            ReleaseError::Invalid {
                file: spec_path.display().to_string(),
                problems,
            }
        })?;
    if spec.name != file_name(job) {
        return Err(invalid(
            &spec_path,
            &format!(
                "name: `{}` is not the job's directory name `{}`",
                spec.name,
                file_name(job)
            ),
        ));
    }
    let mut files = vec![SourceFile {
        path: "job.MF".into(),
        bytes: spec_bytes,
        mode: spec_mode,
    }];
    for optional in ["monit", "properties_schema.json"] {
        let path = job.join(optional);
        if path.is_file() {
            let (bytes, mode) = read(&path)?;
            files.push(SourceFile {
                path: optional.into(),
                bytes,
                mode,
            });
        }
    }
    for source in spec.templates.keys() {
        let path = job.join("templates").join(source);
        if !path.is_file() {
            return Err(invalid(
                &spec_path,
                &format!("templates: `{source}` is not in templates/"),
            ));
        }
        let (bytes, mode) = read(&path)?;
        files.push(SourceFile {
            path: format!("templates/{source}"),
            bytes,
            mode,
        });
    }
    Ok(files)
}

/// A package's spec and files: `packaging`, and what its `files:` select.
fn package_source(
    release: &Path,
    package: &Path,
    src: &[disk::Found],
    blobs: &[disk::Found],
) -> Result<(PackageSpec, Vec<SourceFile>), ReleaseError> {
    let spec_path = package.join("spec");
    let root = yaml(&spec_path)?.ok_or_else(|| invalid(&spec_path, "is missing"))?;
    let spec: PackageSpec =
        serde_json::from_value(root.to_json()).map_err(|e| invalid(&spec_path, &e.to_string()))?;
    if spec.name.is_empty() {
        return Err(invalid(&spec_path, "name: is missing"));
    }
    for (file, why) in [
        (
            "spec.lock",
            "the package comes from a final release's blobstore, which is not fetched here; \
             build with `bosh create-release`",
        ),
        (
            "pre_packaging",
            "pre_packaging scripts are not run here; build with `bosh create-release`",
        ),
    ] {
        if package.join(file).exists() {
            return Err(invalid(&package.join(file), why));
        }
    }
    let packaging = package.join("packaging");
    if !packaging.is_file() {
        return Err(invalid(&packaging, "is missing"));
    }
    let (bytes, mode) = read(&packaging)?;
    let mut files = vec![SourceFile {
        path: "packaging".into(),
        bytes,
        mode,
    }];
    let chosen =
        package_files::select(&spec, src, blobs).map_err(|problems| ReleaseError::Invalid {
            file: spec_path.display().to_string(),
            problems,
        })?;
    for (root, path) in chosen {
        let (bytes, mode) = read(&release.join(root.dir()).join(&path))?;
        files.push(SourceFile { path, bytes, mode });
    }
    Ok((spec, files))
}

/// The blobs `config/blobs.yml` records, each of which must be in `blobs/` as `bosh
/// sync-blobs` leaves it. Other files in `blobs/` are not the release's: the CLI removes
/// them before it builds, and they are left out here.
fn tracked_blobs(dir: &Path) -> Result<Vec<String>, ReleaseError> {
    let path = dir.join("config/blobs.yml");
    let Some(root) = yaml(&path)? else {
        return Ok(Vec::new());
    };
    let tracked: Vec<String> = root
        .to_json()
        .as_object()
        .map(|blobs| blobs.keys().cloned().collect())
        .unwrap_or_default();
    let missing: Vec<String> = tracked
        .iter()
        .filter(|blob| !dir.join("blobs").join(blob.as_str()).is_file())
        .map(|blob| format!("blob `{blob}` is not in blobs/ (`bosh sync-blobs` fetches it)"))
        .collect();
    if missing.is_empty() {
        Ok(tracked)
    } else {
        Err(ReleaseError::Invalid {
            file: path.display().to_string(),
            problems: missing,
        })
    }
}

fn invalid(file: &Path, problem: &str) -> ReleaseError {
    ReleaseError::Invalid {
        file: file.display().to_string(),
        problems: vec![problem.to_string()],
    }
}

fn yaml(path: &Path) -> Result<Option<fleet_yaml::Node>, ReleaseError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(disk::io(path)(e)),
    };
    load(&text, Limits::default())
        .map(Some)
        .map_err(|e| invalid(path, &e.to_string()))
}

#[cfg(test)]
mod tests;
