//! A release kept as source in a directory, built into a tarball as `bosh
//! create-release --tarball` would build it:
//!
//! ```text
//! release.yml                       name: RELEASE
//! jobs/JOB/spec                     the job's spec (job.MF in the archive)
//! jobs/JOB/monit
//! jobs/JOB/templates/...
//! packages/PACKAGE/spec             name and dependencies
//! packages/PACKAGE/packaging
//! packages/PACKAGE/...              the sources it builds from
//! ```
//!
//! Every package also gets a file `release-version` holding the version built, so that
//! each version's packages are compiled anew, as a new release's would be, and a job can
//! tell which version it runs.

use std::path::{Path, PathBuf};

use fleet_yaml::{Limits, load};

use super::archive::ReleaseError;
use super::builder::{File, ReleaseBuilder};

/// Builds the release in `dir` as version `version`; its tarball.
///
/// # Errors
/// A file that cannot be read, or a `release.yml` or package `spec` without what it
/// must say, named.
pub fn build_from_source(dir: &Path, version: &str) -> Result<Vec<u8>, ReleaseError> {
    let invalid = |file: &Path, problem: String| ReleaseError::Invalid {
        file: file.display().to_string(),
        problems: vec![problem],
    };
    let manifest = dir.join("release.yml");
    let name = yaml_text(&manifest, "name")?
        .ok_or_else(|| invalid(&manifest, "name: is missing".into()))?;
    let mut builder = ReleaseBuilder::new(&name, version);
    for job in subdirectories(&dir.join("jobs"))? {
        let job_name = file_name(&job);
        let mut files = Vec::new();
        for (path, bytes) in files_under(&job)? {
            let path = if path == "spec" {
                "job.MF".to_string()
            } else {
                path
            };
            files.push((path, bytes));
        }
        builder = builder.job(&job_name, files);
    }
    for package in subdirectories(&dir.join("packages"))? {
        let spec = package.join("spec");
        let package_name = yaml_text(&spec, "name")?.unwrap_or_else(|| file_name(&package));
        let dependencies = yaml_list(&spec, "dependencies")?;
        let mut files: Vec<File> = files_under(&package)?
            .into_iter()
            .filter(|(path, _)| path != "spec")
            .collect();
        files.push((
            "release-version".to_string(),
            format!("{version}\n").into_bytes(),
        ));
        let deps: Vec<&str> = dependencies.iter().map(String::as_str).collect();
        builder = builder.package(&package_name, &deps, files);
    }
    Ok(builder.build())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReleaseError + '_ {
    move |source| ReleaseError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>, ReleaseError> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(io(dir))?.path();
        if path.is_dir() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Every file under `dir`, by its path relative to it.
fn files_under(dir: &Path) -> Result<Vec<File>, ReleaseError> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).map_err(io(&at))? {
            let path = entry.map_err(io(&at))?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).map_err(io(&path))?;
                let relative = path
                    .strip_prefix(dir)
                    .expect("found under dir")
                    .to_string_lossy()
                    .into_owned();
                found.push((relative, bytes));
            }
        }
    }
    found.sort();
    Ok(found)
}

fn yaml_root(path: &Path) -> Result<Option<fleet_yaml::Node>, ReleaseError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    load(&text, Limits::default())
        .map(Some)
        .map_err(|e| ReleaseError::Invalid {
            file: path.display().to_string(),
            problems: vec![e.to_string()],
        })
}

fn yaml_text(path: &Path, key: &str) -> Result<Option<String>, ReleaseError> {
    Ok(
        yaml_root(path)?
            .and_then(|root| root.get(key).and_then(|n| n.as_str()).map(str::to_string)),
    )
}

fn yaml_list(path: &Path, key: &str) -> Result<Vec<String>, ReleaseError> {
    let Some(root) = yaml_root(path)? else {
        return Ok(Vec::new());
    };
    Ok(root
        .get(key)
        .map(|n| n.to_json())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_tree_builds_a_release_that_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("release.yml", "name: kv\n");
        write(
            "jobs/kv/spec",
            "name: kv\ntemplates: {ctl.erb: bin/ctl}\npackages: [server]\n",
        );
        write("jobs/kv/monit", "");
        write("jobs/kv/templates/ctl.erb", "#!/bin/sh\n");
        write(
            "packages/server/spec",
            "name: server\ndependencies: [lib]\n",
        );
        write(
            "packages/server/packaging",
            "cp -a . $BOSH_INSTALL_TARGET\n",
        );
        write("packages/server/src/main.c", "int main(){}\n");
        write("packages/lib/spec", "name: lib\n");
        write("packages/lib/packaging", "true\n");
        let one = crate::from_tarball(&build_from_source(dir.path(), "1").unwrap()).unwrap();
        assert_eq!(one.manifest.name, "kv");
        assert_eq!(one.jobs[0].files.spec.packages, ["server"]);
        let server = one
            .packages
            .iter()
            .find(|p| p.package.archive.name == "server")
            .unwrap();
        assert_eq!(server.package.dependencies, ["lib"]);
        let two = crate::from_tarball(&build_from_source(dir.path(), "2").unwrap()).unwrap();
        assert_eq!(
            one.jobs[0].archive.fingerprint, two.jobs[0].archive.fingerprint,
            "jobs alike"
        );
        assert_ne!(
            one.packages[0].package.archive.fingerprint,
            two.packages[0].package.archive.fingerprint,
            "packages stamped with their version"
        );
        let e = build_from_source(&dir.path().join("none"), "1").unwrap_err();
        assert!(e.to_string().contains("release.yml"), "{e}");
    }
}
