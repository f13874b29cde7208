//! `version: latest` in a deployment manifest, resolved as BOSH's director resolves it when
//! a deploy starts: a release's or a stemcell's highest uploaded version, or, for
//! `PREFIX.latest`, the highest of those whose version starts with `PREFIX` and a
//! separator. A version nothing matches stays as written, for validation to name. Pure:
//! the manifest and the uploads in, the manifest with versions out.

use super::manifest::Manifest;
use super::model::{Release, Resolved, Stemcell};

/// Whether `version` asks for the latest: `latest`, or `PREFIX.latest` with its prefix.
pub fn asks_latest(version: &str) -> Option<Option<&str>> {
    if version == "latest" {
        return Some(None);
    }
    version
        .strip_suffix(".latest")
        .filter(|prefix| !prefix.is_empty())
        .map(Some)
}

/// Whether `version` carries `prefix`, as BOSH filters them: the prefix, then a `.`, `-`
/// or `+`, or nothing.
fn has_prefix(version: &str, prefix: Option<&str>) -> bool {
    let Some(prefix) = prefix else {
        return true;
    };
    match version.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with(['.', '-', '+']),
        None => false,
    }
}

fn highest<'a>(versions: impl Iterator<Item = &'a str>, prefix: Option<&str>) -> Option<&'a str> {
    versions
        .filter(|v| has_prefix(v, prefix))
        .max_by(|a, b| fleet_versions::compare(a, b))
}

/// Resolves every `latest` of `manifest` against the uploads; returns what each became.
pub fn resolve(
    manifest: &mut Manifest,
    releases: &[Release],
    stemcells: &[Stemcell],
) -> Vec<Resolved> {
    let mut resolved = Vec::new();
    for r in &mut manifest.releases {
        let uploaded = releases.iter().filter(|u| u.name == r.name);
        let uploaded = uploaded.map(|u| u.version.as_str());
        resolved.extend(resolve_one(&mut r.version, uploaded, "release", &r.name));
    }
    for s in &mut manifest.stemcells {
        let uploaded = stemcells.iter().filter(|u| u.os == s.os);
        let uploaded = uploaded.map(|u| u.version.as_str());
        resolved.extend(resolve_one(&mut s.version, uploaded, "stemcell", &s.alias));
    }
    resolved
}

/// `version` resolved among `uploaded` when it asks for the latest and one matches.
fn resolve_one<'a>(
    version: &mut String,
    uploaded: impl Iterator<Item = &'a str>,
    kind: &str,
    name: &str,
) -> Option<Resolved> {
    let prefix = asks_latest(version)?;
    *version = highest(uploaded, prefix)?.to_string();
    Some(Resolved {
        kind: kind.into(),
        name: name.to_string(),
        version: version.clone(),
    })
}

/// Puts back into a manifest read from a deployment's record the versions its `latest`
/// resolved to when it deployed: what `bosh deployments` and clean-up must see.
pub fn reapply(manifest: &mut Manifest, resolved: &[Resolved]) {
    for r in resolved {
        match r.kind.as_str() {
            "release" => {
                if let Some(m) = manifest.releases.iter_mut().find(|m| m.name == r.name) {
                    m.version = r.version.clone();
                }
            }
            _ => {
                if let Some(m) = manifest.stemcells.iter_mut().find(|m| m.alias == r.name) {
                    m.version = r.version.clone();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    fn release(name: &str, version: &str) -> Release {
        Release {
            name: name.into(),
            version: version.into(),
            ..Release::default()
        }
    }

    fn stemcell(os: &str, version: &str) -> Stemcell {
        Stemcell {
            name: format!("bosh-{os}"),
            os: os.into(),
            version: version.into(),
            cid: None,
        }
    }

    const MANIFEST: &str = "name: d\nreleases:\n- {name: kv, version: latest}\n- {name: os-conf, version: 22.latest}\n- {name: pinned, version: '3'}\nstemcells:\n- {alias: default, os: ubuntu-jammy, version: latest}\n- {alias: old, os: ubuntu-jammy, version: 1.latest}\ninstance_groups: []\nupdate: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}\n";

    #[test]
    fn latest_is_the_highest_uploaded_version_and_a_prefix_narrows_it() {
        let mut manifest = parse(MANIFEST).unwrap();
        let releases = [
            release("kv", "9"),
            release("kv", "10"),
            release("kv", "10.1-dev.2"),
            release("os-conf", "22.1.0"),
            release("os-conf", "22.3"),
            release("os-conf", "220"),
            release("os-conf", "23"),
            release("pinned", "4"),
        ];
        let stemcells = [
            stemcell("ubuntu-jammy", "1.99"),
            stemcell("ubuntu-jammy", "1.612"),
            stemcell("ubuntu-jammy", "2.1"),
            stemcell("ubuntu-noble", "9"),
        ];
        let resolved = resolve(&mut manifest, &releases, &stemcells);
        let versions: Vec<(&str, &str)> = manifest
            .releases
            .iter()
            .map(|r| (r.name.as_str(), r.version.as_str()))
            .collect();
        assert_eq!(
            versions,
            [("kv", "10.1-dev.2"), ("os-conf", "22.3"), ("pinned", "3")]
        );
        let stemcells: Vec<&str> = manifest
            .stemcells
            .iter()
            .map(|s| s.version.as_str())
            .collect();
        assert_eq!(stemcells, ["2.1", "1.612"]);
        assert_eq!(resolved.len(), 4, "{resolved:?}");
        assert_eq!(
            resolved[0],
            Resolved {
                kind: "release".into(),
                name: "kv".into(),
                version: "10.1-dev.2".into()
            }
        );

        // What the deployment's record keeps puts the versions back into its raw manifest.
        let mut again = parse(MANIFEST).unwrap();
        reapply(&mut again, &resolved);
        assert_eq!(again.releases, manifest.releases);
        assert_eq!(again.stemcells, manifest.stemcells);
    }

    #[test]
    fn a_latest_nothing_matches_stays_for_validation_to_name() {
        let mut manifest = parse(MANIFEST).unwrap();
        let resolved = resolve(&mut manifest, &[release("os-conf", "21.9")], &[]);
        assert!(resolved.is_empty());
        assert_eq!(manifest.releases[0].version, "latest");
        assert_eq!(manifest.releases[1].version, "22.latest");
        assert_eq!(manifest.stemcells[0].version, "latest");
        assert_eq!(asks_latest("latest"), Some(None));
        assert_eq!(asks_latest("1.latest"), Some(Some("1")));
        assert_eq!(asks_latest(".latest"), None);
        assert_eq!(asks_latest("latest-1"), None);
    }
}
