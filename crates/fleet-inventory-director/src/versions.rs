//! Which uploaded releases and stemcells are newer than what a deployment runs.
//!
//! A director keeps every uploaded version; "update" means: deploy the newest one of each
//! release and stemcell the deployment uses. BOSH versions are dotted numbers with
//! optional suffixes (`621.125`, `1.10`, `3.1.0+dev.2`), which neither string order nor
//! semver parsing handles, hence a comparison of our own.

use std::cmp::Ordering;

use fleet_versions::{compare, replaces};
use std::collections::HashMap;

use super::wire::{Deployment, Release, Stemcell};

/// The newest uploaded version of every release and stemcell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uploaded {
    releases: HashMap<String, String>,
    stemcells_by_name: HashMap<String, String>,
    stemcells_by_os: HashMap<String, String>,
    os_of_stemcell: HashMap<String, String>,
}

impl Uploaded {
    pub fn new(releases: &[Release], stemcells: &[Stemcell]) -> Uploaded {
        let mut uploaded = Uploaded::default();
        for release in releases {
            for version in &release.release_versions {
                keep_newest(&mut uploaded.releases, &release.name, &version.version);
            }
        }
        for stemcell in stemcells {
            keep_newest(
                &mut uploaded.stemcells_by_name,
                &stemcell.name,
                &stemcell.version,
            );
            if let Some(os) = &stemcell.operating_system {
                keep_newest(&mut uploaded.stemcells_by_os, os, &stemcell.version);
                uploaded
                    .os_of_stemcell
                    .insert(stemcell.name.clone(), os.clone());
            }
        }
        uploaded
    }

    /// The newest uploaded version of a release, if it is newer than `current`.
    pub fn newer_release(&self, name: &str, current: &str) -> Option<&str> {
        newer(self.releases.get(name), current)
    }

    /// For a manifest's `stemcells` entry written with `name`.
    pub fn newer_stemcell_named(&self, name: &str, current: &str) -> Option<&str> {
        newer(self.stemcells_by_name.get(name), current)
    }

    /// For a manifest's `stemcells` entry written with `os`.
    pub fn newer_stemcell_for_os(&self, os: &str, current: &str) -> Option<&str> {
        newer(self.stemcells_by_os.get(os), current)
    }

    /// Whether a newer release or stemcell than the deployment runs has been uploaded.
    ///
    /// The director lists a deployment's stemcells by name only, while its manifest may
    /// ask for one by operating system; so a stemcell also counts as outdated when a
    /// newer one for the same operating system (looked up from the uploaded stemcell of
    /// that name) exists. If the manifest asked by name after all, the trigger finds
    /// nothing to change and reports the deployment as up to date.
    pub fn outdated(&self, deployment: &Deployment) -> bool {
        let release_outdated = deployment
            .releases
            .iter()
            .any(|r| self.newer_release(&r.name, &r.version).is_some());
        let stemcell_outdated = deployment.stemcells.iter().any(|s| {
            self.newer_stemcell_named(&s.name, &s.version).is_some()
                || self
                    .os_of_stemcell
                    .get(&s.name)
                    .is_some_and(|os| self.newer_stemcell_for_os(os, &s.version).is_some())
        });
        release_outdated || stemcell_outdated
    }
}

fn keep_newest(newest: &mut HashMap<String, String>, name: &str, version: &str) {
    match newest.get_mut(name) {
        Some(kept) if compare(version, kept) == Ordering::Greater => {
            *kept = version.to_string();
        }
        Some(_) => {}
        None => {
            newest.insert(name.to_string(), version.to_string());
        }
    }
}

fn newer<'a>(newest: Option<&'a String>, current: &str) -> Option<&'a str> {
    newest
        .map(String::as_str)
        .filter(|newest| replaces(newest, current))
}

#[cfg(test)]
mod tests {
    use super::super::wire::{NameVersion, ReleaseVersion};
    use super::*;

    fn release(name: &str, versions: &[&str]) -> Release {
        Release {
            name: name.into(),
            release_versions: versions
                .iter()
                .map(|v| ReleaseVersion {
                    version: v.to_string(),
                })
                .collect(),
        }
    }

    fn stemcell(name: &str, os: Option<&str>, version: &str) -> Stemcell {
        Stemcell {
            name: name.into(),
            operating_system: os.map(str::to_string),
            version: version.into(),
        }
    }

    fn deployment(releases: &[(&str, &str)], stemcells: &[(&str, &str)]) -> Deployment {
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(name, version)| NameVersion {
                    name: name.to_string(),
                    version: version.to_string(),
                })
                .collect()
        };
        Deployment {
            name: "d".into(),
            releases: pairs(releases),
            stemcells: pairs(stemcells),
            locked: None,
        }
    }

    fn uploaded() -> Uploaded {
        Uploaded::new(
            &[
                release("redis", &["1.9", "1.10", "1.2"]),
                release("bpm", &["1.1"]),
            ],
            &[
                stemcell("bosh-warden-ubuntu-jammy", Some("ubuntu-jammy"), "1.99"),
                stemcell("bosh-warden-ubuntu-jammy", Some("ubuntu-jammy"), "1.125"),
                stemcell("bosh-aws-ubuntu-jammy", Some("ubuntu-jammy"), "1.200"),
                stemcell("bosh-warden-ubuntu-noble", None, "2.0"),
            ],
        )
    }

    #[test]
    fn the_newest_uploaded_version_is_found_per_name_and_os() {
        let uploaded = uploaded();
        assert_eq!(uploaded.newer_release("redis", "1.9"), Some("1.10"));
        assert_eq!(uploaded.newer_release("redis", "1.10"), None);
        assert_eq!(uploaded.newer_release("unknown", "1"), None);
        assert_eq!(
            uploaded.newer_stemcell_named("bosh-warden-ubuntu-jammy", "1.99"),
            Some("1.125")
        );
        assert_eq!(
            uploaded.newer_stemcell_for_os("ubuntu-jammy", "1.125"),
            Some("1.200")
        );
    }

    #[test]
    fn a_deployment_on_the_newest_versions_is_current() {
        let current = deployment(
            &[("redis", "1.10"), ("bpm", "1.1")],
            &[("bosh-warden-ubuntu-noble", "2.0")],
        );
        assert!(!uploaded().outdated(&current));
    }

    #[test]
    fn a_newer_release_makes_a_deployment_outdated() {
        let old = deployment(&[("redis", "1.9")], &[]);
        assert!(uploaded().outdated(&old));
    }

    #[test]
    fn a_newer_stemcell_of_the_same_name_or_os_makes_a_deployment_outdated() {
        let by_name = deployment(&[], &[("bosh-aws-ubuntu-jammy", "1.100")]);
        assert!(uploaded().outdated(&by_name));
        let by_os = deployment(&[], &[("bosh-warden-ubuntu-jammy", "1.125")]);
        assert!(uploaded().outdated(&by_os));
    }
}
