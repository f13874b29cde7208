//! Which version a release source (BOSH's layout) is uploaded as from the command line:
//! the uploaded version of that release with the very same jobs and packages, so that
//! uploading unchanged sources again changes nothing, or else a new dev version after
//! the newest uploaded one, as `bosh create-release` numbers them. Pure.

use fleet_updater::director::model::Release;
use fleet_updater::release::ReleaseArchive;

#[derive(Debug, PartialEq, Eq)]
pub enum SourceVersion {
    /// That version has these sources already.
    Uploaded(String),
    /// Build and upload as this version.
    New(String),
}

/// The version for `built` (built from source at any version), given the director's
/// releases and the version asked for, if any.
pub fn choose(built: &ReleaseArchive, uploaded: &[Release], asked: Option<&str>) -> SourceVersion {
    let name = &built.manifest.name;
    let same_name: Vec<&Release> = uploaded.iter().filter(|r| &r.name == name).collect();
    let parts = |jobs: Vec<(String, String)>, packages: Vec<(String, String)>| {
        let mut all: Vec<(String, String)> = jobs;
        all.extend(
            packages
                .into_iter()
                .map(|(n, f)| (format!("package {n}"), f)),
        );
        all.sort();
        all
    };
    let wanted = parts(
        built
            .jobs
            .iter()
            .map(|j| (j.archive.name.clone(), j.archive.fingerprint.clone()))
            .collect(),
        built
            .packages
            .iter()
            .map(|p| {
                let archive = &p.package.archive;
                (archive.name.clone(), archive.fingerprint.clone())
            })
            .collect(),
    );
    let has = |release: &Release| {
        parts(
            release
                .jobs
                .iter()
                .map(|j| {
                    let fingerprint = j.archive.as_ref().map(|a| a.fingerprint.clone());
                    (j.name.clone(), fingerprint.unwrap_or_default())
                })
                .collect(),
            release
                .packages
                .iter()
                .filter(|p| p.compiled_for.is_empty())
                .map(|p| {
                    let fingerprint = p.archive.as_ref().map(|a| a.fingerprint.clone());
                    (p.name.clone(), fingerprint.unwrap_or_default())
                })
                .collect(),
        ) == wanted
    };
    if let Some(version) = asked {
        return SourceVersion::New(version.to_string());
    }
    if let Some(same) = same_name.iter().find(|r| has(r)) {
        return SourceVersion::Uploaded(same.version.clone());
    }
    SourceVersion::New(fleet_versions::next_dev(
        same_name.iter().map(|r| r.version.as_str()),
    ))
}

#[cfg(test)]
mod tests {
    use fleet_updater::director::model::{Archived, Package, ReleaseJob};
    use fleet_updater::release::{ReleaseBuilder, from_tarball};

    use super::*;

    fn built(job_text: &str) -> ReleaseArchive {
        let tarball = ReleaseBuilder::new("kv", "0+dev.0")
            .job(
                "kv",
                vec![
                    (
                        "job.MF".into(),
                        format!("name: kv\n{job_text}").into_bytes(),
                    ),
                    ("monit".into(), Vec::new()),
                ],
            )
            .package("server", &[], vec![("packaging".into(), b"true".to_vec())])
            .build();
        from_tarball(&tarball).unwrap()
    }

    fn uploaded(version: &str, from: &ReleaseArchive) -> Release {
        let archived = |fingerprint: &str| Archived {
            version: fingerprint.into(),
            fingerprint: fingerprint.into(),
            sha1: String::new(),
            blob: String::new(),
        };
        Release {
            name: "kv".into(),
            version: version.into(),
            jobs: from
                .jobs
                .iter()
                .map(|j| ReleaseJob {
                    name: j.archive.name.clone(),
                    archive: Some(archived(&j.archive.fingerprint)),
                    ..ReleaseJob::default()
                })
                .collect(),
            packages: from
                .packages
                .iter()
                .map(|p| Package {
                    name: p.package.archive.name.clone(),
                    dependencies: Vec::new(),
                    archive: Some(archived(&p.package.archive.fingerprint)),
                    compiled_for: Vec::new(),
                })
                .collect(),
            commit_hash: None,
            uncommitted_changes: false,
        }
    }

    #[test]
    fn the_same_sources_are_the_uploaded_version_and_others_the_next_dev_one() {
        let first = built("");
        assert_eq!(
            choose(&first, &[], None),
            SourceVersion::New("0+dev.1".into())
        );
        let on_director = vec![
            uploaded("0+dev.1", &first),
            uploaded("0+dev.2", &built("# 2")),
        ];
        assert_eq!(
            choose(&first, &on_director, None),
            SourceVersion::Uploaded("0+dev.1".into())
        );
        assert_eq!(
            choose(&built("# 3"), &on_director, None),
            SourceVersion::New("0+dev.3".into())
        );
        assert_eq!(
            choose(&first, &on_director, Some("9")),
            SourceVersion::New("9".into()),
            "a version asked for is taken as asked"
        );
    }
}
