//! The project's own releases are kept in BOSH's release layout: built here as `bosh
//! create-release` builds them, each package archive holds `packaging` and exactly the
//! files its spec's `files:` names from `src/` (or `blobs/`), and each job archive its
//! spec, monit file and the templates its spec names.

use std::path::{Path, PathBuf};

use fleet_updater::release::{build_from_source, from_tarball, tgz_files};
use fleet_updater::yaml::{Limits, load};

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn list(path: &Path, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let json = load(&text, Limits::default()).unwrap().to_json();
    json[key]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Builds the source in `dir` and checks every archive against the source's files.
fn check(dir: &Path) {
    let archive = from_tarball(&build_from_source(dir, "1").unwrap()).unwrap();
    assert!(!archive.packages.is_empty(), "{}", dir.display());
    for package in &archive.packages {
        let name = &package.package.archive.name;
        let spec = dir.join("packages").join(name).join("spec");
        let files = list(&spec, "files");
        assert!(!files.is_empty(), "{} names its files", spec.display());
        let bytes = package.bytes.as_ref().unwrap().read().unwrap();
        let held = tgz_files(&bytes, u64::MAX).unwrap();
        let mut paths: Vec<&str> = held.iter().map(|e| e.path.as_str()).collect();
        paths.sort();
        let mut expected: Vec<&str> = files.iter().map(String::as_str).collect();
        expected.push("packaging");
        expected.sort();
        assert_eq!(paths, expected, "package {name} of {}", dir.display());
        for entry in &held {
            let from: PathBuf = if entry.path == "packaging" {
                dir.join("packages").join(name).join("packaging")
            } else {
                assert!(
                    !entry.path.contains(['*', '?', '[', '{']),
                    "this test reads literal paths"
                );
                let src = dir.join("src").join(&entry.path);
                if src.is_file() {
                    src
                } else {
                    dir.join("blobs").join(&entry.path)
                }
            };
            assert_eq!(entry.bytes, std::fs::read(&from).unwrap(), "{}", entry.path);
        }
    }
    for job in &archive.jobs {
        let spec = &job.files.spec;
        let source = dir.join("jobs").join(&spec.name);
        for template in spec.templates.keys() {
            assert_eq!(
                job.files.templates[template],
                std::fs::read(source.join("templates").join(template)).unwrap()
            );
        }
        assert_eq!(
            job.files.monit,
            std::fs::read_to_string(source.join("monit")).unwrap()
        );
    }
}

#[test]
fn the_kv_release_is_in_boshs_layout() {
    check(&repository().join("config/releases/kv"));
}

#[test]
fn the_create_env_cpi_release_is_in_boshs_layout() {
    check(&repository().join("config/create-env/cpi-release"));
}

#[test]
fn the_errand_release_is_in_boshs_layout_once_its_binary_is_added_as_a_blob() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::copy_tree(&repository().join("errand"), dir.path());
    // What `bosh add-blob TARGET/fleet-updater fleet-updater/fleet-updater` leaves.
    let blob = dir.path().join("blobs/fleet-updater/fleet-updater");
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    std::fs::write(&blob, b"\x7fELF a binary").unwrap();
    std::fs::write(
        dir.path().join("config/blobs.yml"),
        "fleet-updater/fleet-updater: {size: 14, sha: sha256:0}\n",
    )
    .unwrap();
    check(dir.path());
}
