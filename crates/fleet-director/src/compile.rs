//! The packages a deploy needs, as a dependency graph compiled dependencies first.
//! Pure: releases and the jobs in use in, an order out (or the cycle that prevents one).

use std::collections::{BTreeMap, BTreeSet};

use super::manifest::Manifest;
use super::model::Release;

/// A package of a release, as compiled for one stemcell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PackageKey {
    pub release: String,
    pub version: String,
    pub name: String,
}

impl PackageKey {
    /// `release/version/package`, also the cache key's prefix.
    pub fn describe(&self) -> String {
        format!("{}/{}/{}", self.release, self.version, self.name)
    }
}

/// Each package the deploy needs, with the packages it depends on.
pub type Graph = BTreeMap<PackageKey, BTreeSet<PackageKey>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("package dependency cycle in release {release}: {}", cycle.join(" -> "))]
    Cycle { release: String, cycle: Vec<String> },
    #[error(
        "package `{package}` of release {release} depends on `{missing}`, which the release does not have"
    )]
    MissingDependency {
        release: String,
        package: String,
        missing: String,
    },
    #[error("job `{job}` is not in release {release}")]
    UnknownJob { release: String, job: String },
}

/// Every package the jobs need (dependencies included), mapped to its dependencies.
pub fn needed(releases: &[Release], jobs: &[(String, String)]) -> Result<Graph, CompileError> {
    let mut graph = Graph::new();
    for (release_name, job_name) in jobs {
        let Some(release) = releases.iter().find(|r| &r.name == release_name) else {
            continue;
        };
        let job = release
            .jobs
            .iter()
            .find(|j| &j.name == job_name)
            .ok_or_else(|| CompileError::UnknownJob {
                release: format!("{}/{}", release.name, release.version),
                job: job_name.clone(),
            })?;
        let mut pending: Vec<String> = job.packages.clone();
        while let Some(name) = pending.pop() {
            let key = PackageKey {
                release: release.name.clone(),
                version: release.version.clone(),
                name: name.clone(),
            };
            if graph.contains_key(&key) {
                continue;
            }
            let package = release.packages.iter().find(|p| p.name == name);
            let dependencies = match package {
                Some(p) => p.dependencies.clone(),
                // A job may name a package the metadata leaves out; it has no dependencies.
                None => Vec::new(),
            };
            let mut deps = BTreeSet::new();
            for dep in dependencies {
                if !release.packages.iter().any(|p| p.name == dep) {
                    return Err(CompileError::MissingDependency {
                        release: format!("{}/{}", release.name, release.version),
                        package: name.clone(),
                        missing: dep,
                    });
                }
                deps.insert(PackageKey {
                    release: release.name.clone(),
                    version: release.version.clone(),
                    name: dep.clone(),
                });
                pending.push(dep);
            }
            graph.insert(key, deps);
        }
    }
    check_cycles(&graph)?;
    Ok(graph)
}

/// What a package's compilation is kept under, the stemcell aside (the cache key is
/// `{identity}@{stemcell}`). A package with an archive is known, as BOSH knows it, by its
/// name and fingerprint (a digest of its contents) and its dependencies' identities:
/// release versions that share a package share its compilation, and a package whose
/// contents or dependencies changed is compiled anew. A package the fleet configuration
/// describes, which has no contents, is known by its release's version.
pub fn identity(release: &Release, package: &str) -> String {
    identity_within(release, package, &mut Vec::new())
}

fn identity_within(release: &Release, package: &str, path: &mut Vec<String>) -> String {
    let found = release.packages.iter().find(|p| p.name == package);
    let Some((p, archive)) = found.and_then(|p| p.archive.as_ref().map(|a| (p, a))) else {
        return format!("{}/{}/{package}", release.name, release.version);
    };
    if p.dependencies.is_empty() || path.iter().any(|n| n == package) {
        return format!("{package}/{}", archive.fingerprint);
    }
    path.push(package.to_string());
    let mut dependencies: Vec<String> = p
        .dependencies
        .iter()
        .map(|d| identity_within(release, d, path))
        .collect();
    path.pop();
    dependencies.sort();
    let digest = fleet_release::sha1_hex(dependencies.join("\n").as_bytes());
    format!("{package}/{}+{digest}", archive.fingerprint)
}

/// Whether a package compiled for `compiled` (`os/version`) serves `stemcell`: the same
/// OS and major version, as BOSH's director matches stemcell versions.
pub fn compatible(compiled: &str, stemcell: &str) -> bool {
    let major = |v: &str| v.split('.').next().unwrap_or_default().to_string();
    match (compiled.split_once('/'), stemcell.split_once('/')) {
        (Some((os, v)), Some((other_os, other_v))) => os == other_os && major(v) == major(other_v),
        _ => false,
    }
}

/// What one stemcell's instances need compiled: every package their jobs use, with its
/// dependencies and its cache key.
#[derive(Debug, Clone, PartialEq)]
pub struct NeededOn {
    /// `os/version`.
    pub stemcell: String,
    pub graph: Graph,
    pub keys: BTreeMap<PackageKey, String>,
    /// For each package of a release the manifest says is `exported_from` stemcells:
    /// those of them that serve this one, each with the package's cache key there. Such a
    /// package is taken from there and never compiled.
    pub exported: BTreeMap<PackageKey, Vec<(String, String)>>,
}

/// The packages `manifest`'s jobs need on each stemcell, computed once per deploy.
///
/// # Errors
/// A dependency cycle or a missing package.
pub fn needed_by(releases: &[Release], manifest: &Manifest) -> Result<Vec<NeededOn>, CompileError> {
    let mut jobs: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for group in &manifest.instance_groups {
        let Some(stemcell) = manifest.stemcell(&group.stemcell) else {
            continue;
        };
        let entry = jobs
            .entry(format!("{}/{}", stemcell.os, stemcell.version))
            .or_default();
        for job in &group.jobs {
            entry.push((job.release.clone(), job.name.clone()));
        }
    }
    jobs.into_iter()
        .map(|(stemcell, jobs)| {
            let graph = needed(releases, &jobs)?;
            let keys = cache_keys(releases, &graph, &stemcell);
            let exported = exported(releases, manifest, &graph, &stemcell);
            Ok(NeededOn {
                stemcell,
                graph,
                keys,
                exported,
            })
        })
        .collect()
}

/// What `jobs` (release and job names) need compiled on `stemcell`, whatever deploys them:
/// what an export compiles.
///
/// # Errors
/// A dependency cycle or a missing package.
pub fn needed_for_jobs(
    releases: &[Release],
    jobs: &[(String, String)],
    stemcell: &str,
) -> Result<NeededOn, CompileError> {
    let graph = needed(releases, jobs)?;
    let keys = cache_keys(releases, &graph, stemcell);
    Ok(NeededOn {
        stemcell: stemcell.to_string(),
        graph,
        keys,
        exported: BTreeMap::new(),
    })
}

/// Where each package of `graph` whose release is `exported_from` stemcells is taken from
/// on `stemcell`: those of the stemcells that serve it, with the package's cache keys.
fn exported(
    releases: &[Release],
    manifest: &Manifest,
    graph: &Graph,
    stemcell: &str,
) -> BTreeMap<PackageKey, Vec<(String, String)>> {
    let mut found = BTreeMap::new();
    for package in graph.keys() {
        let Some(wanted) = manifest
            .releases
            .iter()
            .find(|r| r.name == package.release && r.version == package.version)
            .filter(|r| !r.exported_from.is_empty())
        else {
            continue;
        };
        let Some(release) = releases
            .iter()
            .find(|r| r.name == package.release && r.version == package.version)
        else {
            continue;
        };
        let from = wanted
            .exported_from
            .iter()
            .filter(|e| compatible(e, stemcell))
            .map(|e| (e.clone(), cache_key(release, &package.name, e)))
            .collect();
        found.insert(package.clone(), from);
    }
    found
}

/// The cache key of each package of `graph` compiled for `stemcell`.
fn cache_keys(releases: &[Release], graph: &Graph, stemcell: &str) -> BTreeMap<PackageKey, String> {
    graph
        .keys()
        .map(|package| {
            let release = releases
                .iter()
                .find(|r| r.name == package.release && r.version == package.version);
            let key = match release {
                Some(r) => cache_key(r, &package.name, stemcell),
                None => format!("{}@{stemcell}", package.describe()),
            };
            (package.clone(), key)
        })
        .collect()
}

/// The cache key of `package` compiled for `stemcell`.
pub fn cache_key(release: &Release, package: &str, stemcell: &str) -> String {
    format!("{}@{stemcell}", identity(release, package))
}

/// Fails with the full cycle path when the graph has one.
fn check_cycles(graph: &Graph) -> Result<(), CompileError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &PackageKey,
        graph: &Graph,
        marks: &mut BTreeMap<PackageKey, Mark>,
        path: &mut Vec<PackageKey>,
    ) -> Result<(), CompileError> {
        match marks.get(node) {
            Some(Mark::Done) => return Ok(()),
            Some(Mark::Open) => {
                let start = path.iter().position(|p| p == node).unwrap_or(0);
                let mut cycle: Vec<String> = path[start..].iter().map(|p| p.name.clone()).collect();
                cycle.push(node.name.clone());
                return Err(CompileError::Cycle {
                    release: format!("{}/{}", node.release, node.version),
                    cycle,
                });
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        path.push(node.clone());
        for dep in graph.get(node).into_iter().flatten() {
            visit(dep, graph, marks, path)?;
        }
        path.pop();
        marks.insert(node.clone(), Mark::Done);
        Ok(())
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        visit(node, graph, &mut marks, &mut Vec::new())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Package, ReleaseJob};

    fn release(packages: &[(&str, &[&str])], job_packages: &[&str]) -> Release {
        Release {
            name: "r".into(),
            version: "1".into(),
            jobs: vec![ReleaseJob {
                name: "j".into(),
                packages: job_packages.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            }],
            packages: packages
                .iter()
                .map(|(n, d)| Package {
                    name: n.to_string(),
                    dependencies: d.iter().map(|x| x.to_string()).collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_diamond_needs_each_package_once() {
        let r = release(
            &[
                ("app", &["left", "right"]),
                ("left", &["base"]),
                ("right", &["base"]),
                ("base", &[]),
            ],
            &["app"],
        );
        let graph = needed(&[r], &[("r".into(), "j".into())]).unwrap();
        assert_eq!(graph.len(), 4);
        let app = graph.keys().find(|k| k.name == "app").unwrap();
        assert_eq!(graph[app].len(), 2);
    }

    #[test]
    fn a_cycle_is_named_in_full() {
        let r = release(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])], &["a"]);
        let err = needed(&[r], &[("r".into(), "j".into())]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "package dependency cycle in release r/1: a -> b -> c -> a"
        );
    }

    #[test]
    fn a_missing_dependency_and_an_unknown_job_are_errors() {
        let r = release(&[("a", &["ghost"])], &["a"]);
        assert!(matches!(
            needed(std::slice::from_ref(&r), &[("r".into(), "j".into())]),
            Err(CompileError::MissingDependency { .. })
        ));
        assert!(matches!(
            needed(&[r], &[("r".into(), "nope".into())]),
            Err(CompileError::UnknownJob { .. })
        ));
    }

    fn archived(release_version: &str, packages: &[(&str, &str, &[&str])]) -> Release {
        Release {
            name: "r".into(),
            version: release_version.into(),
            packages: packages
                .iter()
                .map(|(name, fingerprint, deps)| Package {
                    name: name.to_string(),
                    dependencies: deps.iter().map(|d| d.to_string()).collect(),
                    archive: Some(crate::model::Archived {
                        // Old releases number their packages; the fingerprint tells.
                        version: "1".into(),
                        fingerprint: fingerprint.to_string(),
                        ..Default::default()
                    }),
                    compiled_for: Vec::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_compilation_is_shared_by_release_versions_and_redone_when_a_dependency_changes() {
        let one = archived("1", &[("app", "a1", &["base"]), ("base", "b1", &[])]);
        let two = archived("2", &[("app", "a1", &["base"]), ("base", "b1", &[])]);
        let three = archived("3", &[("app", "a1", &["base"]), ("base", "b2", &[])]);
        assert_eq!(cache_key(&one, "app", "s/1"), cache_key(&two, "app", "s/1"));
        assert_eq!(cache_key(&one, "base", "s/1"), "base/b1@s/1");
        assert_ne!(
            cache_key(&one, "app", "s/1"),
            cache_key(&three, "app", "s/1"),
            "the same app on another base is compiled anew"
        );
        assert_ne!(cache_key(&one, "app", "s/1"), cache_key(&one, "app", "s/2"));
        // Without archives, the release version tells packages apart.
        let described = release(&[("app", &[])], &["app"]);
        assert_eq!(cache_key(&described, "app", "s/1"), "r/1/app@s/1");
    }
}
