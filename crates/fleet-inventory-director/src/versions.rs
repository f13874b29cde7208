//! Which uploaded releases and stemcells are newer than what a deployment runs.
//!
//! A director keeps every uploaded version; "update" means: deploy the newest one of each
//! release and stemcell the deployment uses. BOSH versions are dotted numbers with
//! optional suffixes (`621.125`, `1.10`, `3.1.0+dev.2`), which neither string order nor
//! semver parsing handles, hence a comparison of our own.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::wire::{Deployment, Release, Stemcell};

/// Orders BOSH versions: parts split at `.`, `-` and `+` are compared in turn, numbers
/// by value and other parts as text, a number before text (as semver ranks them). When
/// one version is a prefix of the other, the longer one is newer (`1.2+dev.3` follows
/// `1.2`). Versions whose parts are all equal are ordered as text so that the order is
/// total (`1.01` before `1.1`).
pub fn compare(a: &str, b: &str) -> Ordering {
    let mut left = a.split(['.', '-', '+']);
    let mut right = b.split(['.', '-', '+']);
    loop {
        match (left.next(), right.next()) {
            (None, None) => return a.cmp(b),
            (Some(_), None) => return Ordering::Greater,
            (None, Some(_)) => return Ordering::Less,
            (Some(x), Some(y)) => {
                let order = compare_part(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

fn compare_part(x: &str, y: &str) -> Ordering {
    match (is_number(x), is_number(y)) {
        (true, true) => {
            // By length first, so that numbers of any size compare without overflow.
            let x = x.trim_start_matches('0');
            let y = y.trim_start_matches('0');
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        }
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.cmp(y),
    }
}

fn is_number(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `candidate` should replace `current`: it is newer, or `current` is the
/// manifest shorthand `latest`, which the director resolves to the newest anyway.
pub fn replaces(candidate: &str, current: &str) -> bool {
    current == "latest" || compare(candidate, current) == Ordering::Greater
}

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

    #[test]
    fn numeric_parts_compare_by_value() {
        assert_eq!(compare("1.10", "1.9"), Ordering::Greater);
        assert_eq!(compare("621.125", "621.99"), Ordering::Greater);
        assert_eq!(compare("2", "10"), Ordering::Less);
        assert_eq!(compare("1.2.3", "1.2.3"), Ordering::Equal);
    }

    #[test]
    fn numbers_longer_than_any_integer_type_still_compare() {
        assert_eq!(
            compare(
                "1.100000000000000000000000000",
                "1.99999999999999999999999999"
            ),
            Ordering::Greater
        );
    }

    #[test]
    fn a_longer_version_with_the_same_start_is_newer() {
        assert_eq!(compare("1.2+dev.3", "1.2"), Ordering::Greater);
        assert_eq!(compare("1.2", "1.2.1"), Ordering::Less);
    }

    #[test]
    fn text_parts_compare_as_text_and_after_numbers() {
        assert_eq!(compare("1.0-beta", "1.0-alpha"), Ordering::Greater);
        assert_eq!(compare("1.a", "1.5"), Ordering::Greater);
        assert_eq!(compare("3.1+dev.10", "3.1+dev.9"), Ordering::Greater);
    }

    #[test]
    fn leading_zeros_do_not_change_the_value_but_keep_the_order_total() {
        assert_eq!(compare("1.01", "1.2"), Ordering::Less);
        assert_eq!(compare("1.01", "1.1"), Ordering::Less);
        assert_eq!(compare("1.1", "1.01"), Ordering::Greater);
    }

    #[test]
    fn latest_is_always_replaced() {
        assert!(replaces("1.0", "latest"));
        assert!(!replaces("1.0", "1.0"));
        assert!(!replaces("1.0", "1.1"));
    }

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
