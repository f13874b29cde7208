//! `release.MF`: the release's name and version and, for each job and package, the
//! version, fingerprint and digest of its archive; a compiled release's
//! `compiled_packages` also name the stemcell (`os/version`) each was compiled for. Keys
//! BOSH added later (`license`) are left alone, so that manifests written by newer tools
//! still load.

use fleet_yaml::{Checker, Limits, Node, Value, join, load};

use super::digest::Digest;

/// A job's or package's archive as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveRef {
    pub name: String,
    pub version: String,
    /// What BOSH matches archives by across releases; the version when not given.
    pub fingerprint: String,
    pub digest: Digest,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRef {
    pub archive: ArchiveRef,
    pub dependencies: Vec<String>,
}

/// A package compiled for a stemcell, as a compiled release carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledRef {
    pub package: PackageRef,
    /// `os/version`.
    pub stemcell: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseManifest {
    pub name: String,
    pub version: String,
    pub commit_hash: Option<String>,
    pub uncommitted_changes: bool,
    pub jobs: Vec<ArchiveRef>,
    pub packages: Vec<PackageRef>,
    /// A compiled release's packages, with no sources.
    pub compiled: Vec<CompiledRef>,
}

/// Reads a release manifest.
///
/// # Errors
/// Every problem found, each naming its key and line.
pub fn parse(text: &str) -> Result<ReleaseManifest, Vec<String>> {
    let root = load(text, Limits::document(Limits::default().max_bytes))
        .map_err(|e| vec![e.to_string()])?;
    let mut check = Checker::new();
    let name = required_text(&mut check, &root, "", "name");
    let version = required_text(&mut check, &root, "", "version");
    let commit_hash = root
        .get("commit_hash")
        .filter(|n| n.value != Value::Null)
        .and_then(|n| scalar_text(&mut check, n, "commit_hash"));
    let uncommitted_changes = root
        .get("uncommitted_changes")
        .filter(|n| n.value != Value::Null)
        .and_then(|n| check.boolean(n, "uncommitted_changes"))
        .unwrap_or(false);
    let mut compiled = Vec::new();
    if let Some(list) = root
        .get("compiled_packages")
        .filter(|n| n.value != Value::Null)
    {
        for (i, item) in check.list(list, "compiled_packages").iter().enumerate() {
            let path = format!("compiled_packages[{i}]");
            let stemcell = required_text(&mut check, item, &path, "stemcell");
            if let Some(s) = &stemcell
                && !s.contains('/')
            {
                check.report(
                    &join(&path, "stemcell"),
                    item.at,
                    format!("`{s}` is not OS/VERSION"),
                );
            }
            if let (Some(package), Some(stemcell)) =
                (package_ref(&mut check, item, &path), stemcell)
            {
                compiled.push(CompiledRef { package, stemcell });
            }
        }
    }
    let mut jobs = Vec::new();
    if let Some(list) = root.get("jobs").filter(|n| n.value != Value::Null) {
        for (i, item) in check.list(list, "jobs").iter().enumerate() {
            if let Some(job) = archive_ref(&mut check, item, &format!("jobs[{i}]")) {
                jobs.push(job);
            }
        }
    }
    let mut packages = Vec::new();
    if let Some(list) = root.get("packages").filter(|n| n.value != Value::Null) {
        for (i, item) in check.list(list, "packages").iter().enumerate() {
            let path = format!("packages[{i}]");
            if let Some(package) = package_ref(&mut check, item, &path) {
                packages.push(package);
            }
        }
    }
    duplicates(&mut check, &root, "jobs", jobs.iter().map(|j| &j.name));
    duplicates(
        &mut check,
        &root,
        "packages",
        packages.iter().map(|p| &p.archive.name),
    );
    let known = |name: &String| {
        packages.iter().any(|p| &p.archive.name == name)
            || compiled.iter().any(|c| &c.package.archive.name == name)
    };
    let listed = packages
        .iter()
        .enumerate()
        .map(|(i, p)| ("packages", i, p))
        .chain(
            compiled
                .iter()
                .enumerate()
                .map(|(i, c)| ("compiled_packages", i, &c.package)),
        );
    for (key, i, package) in listed {
        for dep in &package.dependencies {
            if !known(dep) {
                check.report(
                    &format!("{key}[{i}].dependencies"),
                    root.at,
                    format!(
                        "package `{}` depends on `{dep}`, which the release does not have",
                        package.archive.name
                    ),
                );
            }
        }
    }
    let problems = check.into_problems();
    match (name, version) {
        (Some(name), Some(version)) if problems.is_empty() => Ok(ReleaseManifest {
            name,
            version,
            commit_hash,
            uncommitted_changes,
            jobs,
            packages,
            compiled,
        }),
        _ => Err(problems.iter().map(ToString::to_string).collect()),
    }
}

/// A package's archive with the packages it depends on.
fn package_ref(check: &mut Checker, item: &Node, path: &str) -> Option<PackageRef> {
    let archive = archive_ref(check, item, path)?;
    let mut dependencies = Vec::new();
    if let Some(deps) = item.get("dependencies").filter(|n| n.value != Value::Null) {
        let deps_path = join(path, "dependencies");
        for (j, dep) in check.list(deps, &deps_path).iter().enumerate() {
            if let Some(d) = check.string(dep, &format!("{deps_path}[{j}]")) {
                dependencies.push(d);
            }
        }
    }
    Some(PackageRef {
        archive,
        dependencies,
    })
}

fn archive_ref(check: &mut Checker, node: &Node, path: &str) -> Option<ArchiveRef> {
    if node.as_map().is_none() {
        check.report(
            path,
            node.at,
            "must be a mapping with name, version and sha1",
        );
        return None;
    }
    let name = required_text(check, node, path, "name");
    let version = required_text(check, node, path, "version");
    let fingerprint = match node.get("fingerprint").filter(|n| n.value != Value::Null) {
        Some(n) => scalar_text(check, n, &join(path, "fingerprint")),
        None => version.clone(),
    };
    let digest = required_text(check, node, path, "sha1").and_then(|text| {
        Digest::parse(&text)
            .map_err(|e| check.report(&join(path, "sha1"), node.at, e.to_string()))
            .ok()
    });
    if let Some(name) = &name
        && !valid_name(name)
    {
        check.report(
            &join(path, "name"),
            node.at,
            format!("`{name}` is not a name: letters, digits, `-`, `_` and `.` only"),
        );
    }
    Some(ArchiveRef {
        name: name?,
        version: version?,
        fingerprint: fingerprint?,
        digest: digest?,
    })
}

/// Names become file and directory names on a VM.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn required_text(check: &mut Checker, node: &Node, path: &str, key: &str) -> Option<String> {
    let full = join(path, key);
    match node.get(key).filter(|n| n.value != Value::Null) {
        Some(value) => {
            let text = scalar_text(check, value, &full)?;
            if text.trim().is_empty() {
                check.report(&full, value.at, "must not be empty");
                return None;
            }
            Some(text)
        }
        None => {
            check.report(&full, node.at, "is missing");
            None
        }
    }
}

/// A string, or a number written without quotes (`version: 3`).
fn scalar_text(check: &mut Checker, node: &Node, path: &str) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        _ => check.string(node, path),
    }
}

fn duplicates<'a>(
    check: &mut Checker,
    root: &Node,
    key: &str,
    names: impl Iterator<Item = &'a String>,
) {
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        if !seen.insert(name) {
            let at = root.get(key).map_or(root.at, |n| n.at);
            check.report(key, at, format!("`{name}` is listed twice"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "a9993e364706816aba3e25717850c26c9cd0d89d";

    fn manifest(jobs: &str, packages: &str) -> String {
        format!(
            "name: kv\nversion: '2'\ncommit_hash: abc\nuncommitted_changes: false\njobs:\n{jobs}packages:\n{packages}"
        )
    }

    /// An alias bomb in `release.MF` is refused while it is read, at the same bound as
    /// a deployment manifest's.
    #[test]
    fn an_alias_bomb_is_refused_at_a_manifests_bound() {
        // Each level doubles the last: 2^18 nodes from a few lines.
        let mut text = String::from("a0: &a0 [x, x]\n");
        for level in 1..=18 {
            let last = level - 1;
            text.push_str(&format!("a{level}: &a{level} [*a{last}, *a{last}]\n"));
        }
        text.push_str("name: kv\nversion: '1'\n");
        let problems = parse(&text).unwrap_err();
        assert!(problems.iter().any(|p| p.contains("nodes")), "{problems:?}");
    }

    #[test]
    fn a_manifest_as_bosh_writes_it_is_read() {
        let text = manifest(
            &format!("- name: kv\n  version: j1\n  fingerprint: j1\n  sha1: {SHA}\n"),
            &format!(
                "- name: server\n  version: p1\n  fingerprint: p1\n  sha1: sha256:{}\n  dependencies: [lib]\n- name: lib\n  version: p2\n  sha1: {SHA}\n",
                "0".repeat(64)
            ),
        );
        let m = parse(&text).unwrap();
        assert_eq!((m.name.as_str(), m.version.as_str()), ("kv", "2"));
        assert_eq!(m.commit_hash.as_deref(), Some("abc"));
        assert_eq!(m.jobs[0].fingerprint, "j1");
        assert_eq!(m.packages[0].dependencies, ["lib"]);
        // Without a fingerprint, the version is the fingerprint.
        assert_eq!(m.packages[1].archive.fingerprint, "p2");
    }

    #[test]
    fn every_problem_is_named_by_key() {
        let text = manifest(
            "- name: kv\n  version: j1\n- name: ../x\n  version: j2\n  sha1: nothex\n",
            "- name: server\n  version: p1\n  sha1: nothex\n  dependencies: [missing]\n",
        );
        let problems = parse(&text).unwrap_err().join("\n");
        for expected in [
            "jobs[0].sha1: is missing",
            "jobs[1].name: `../x` is not a name",
            "jobs[1].sha1: `nothex` is not a sha1 digest",
            "packages[0].sha1",
        ] {
            assert!(problems.contains(expected), "{expected} in:\n{problems}");
        }
    }

    #[test]
    fn missing_dependencies_and_duplicates_are_refused() {
        let text = manifest(
            &format!(
                "- name: kv\n  version: a\n  sha1: {SHA}\n- name: kv\n  version: b\n  sha1: {SHA}\n"
            ),
            &format!("- name: server\n  version: p1\n  sha1: {SHA}\n  dependencies: [lib]\n"),
        );
        let problems = parse(&text).unwrap_err().join("\n");
        assert!(problems.contains("`kv` is listed twice"), "{problems}");
        assert!(
            problems.contains("depends on `lib`, which the release does not have"),
            "{problems}"
        );
    }

    #[test]
    fn a_compiled_release_names_each_packages_stemcell() {
        let text = format!(
            "name: kv\nversion: '1'\ncompiled_packages:\n- name: a\n  version: b\n  sha1: {SHA}\n  stemcell: ubuntu-jammy/1.5\n  dependencies: [c]\n- name: c\n  version: d\n  sha1: {SHA}\n  stemcell: ubuntu-jammy/1.5\n"
        );
        let m = parse(&text).unwrap();
        assert!(m.packages.is_empty());
        assert_eq!(m.compiled.len(), 2);
        assert_eq!(m.compiled[0].stemcell, "ubuntu-jammy/1.5");
        assert_eq!(m.compiled[0].package.dependencies, ["c"]);
        let no_stemcell = format!(
            "name: kv\nversion: '1'\ncompiled_packages:\n- name: a\n  version: b\n  sha1: {SHA}\n  dependencies: [x]\n"
        );
        let problems = parse(&no_stemcell).unwrap_err().join("\n");
        assert!(
            problems.contains("compiled_packages[0].stemcell"),
            "{problems}"
        );
    }
}
