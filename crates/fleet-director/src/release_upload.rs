//! Keeping a release uploaded in BOSH's format: its job and package archives become
//! blobs of the store, and its record names them. Deciding what an upload changes is
//! pure ([`decide`]); the task ([`run`]) writes the blobs first and the record last, so
//! that a crash between them leaves only blobs nothing names, which clean-up removes,
//! and never a record naming a blob that is not there.

use std::collections::BTreeMap;
use std::sync::Arc;

use fleet_release::{Payload, ReleaseArchive};

use super::compile::cache_key;
use super::error::StepError;
use super::model::{
    Archived, CompiledPackage, LinkDef, Package, PropertySpec, Release, ReleaseJob,
};
use super::records::{Records, change};
use super::task::{JobError, TaskLog};
use super::upload_refusal::UploadRefusal;

/// What an upload comes to.
#[derive(Debug)]
pub enum Decision {
    /// The same release (every job and package fingerprint alike) is there already.
    AlreadyThere {
        name: String,
        version: String,
    },
    Keep(Upload),
}

/// A release to record and the blobs to write before it.
#[derive(Debug)]
pub struct Upload {
    pub release: Release,
    /// Package and job archives the upload brought, by blob id, each with what it is.
    pub packages: Vec<(String, String, Payload)>,
    pub jobs: Vec<(String, String, Payload)>,
    /// What a compiled release's packages put in the compilation cache, by cache key.
    pub compiled: Vec<(String, CompiledPackage)>,
}

/// Decides what an upload changes, given the releases the director has.
///
/// # Errors
/// The same version uploaded before with other contents (unless `fix`), or a package the
/// upload leaves out that no release the director has brought.
pub fn decide(
    archive: ReleaseArchive,
    existing: &[Release],
    fix: bool,
) -> Result<Decision, UploadRefusal> {
    let name = archive.manifest.name.clone();
    let version = archive.manifest.version.clone();
    if let Some(old) = existing
        .iter()
        .find(|r| r.name == name && r.version == version)
        && !fix
    {
        return match difference(old, &archive) {
            None => Ok(Decision::AlreadyThere { name, version }),
            Some(what) => Err(UploadRefusal::Changed {
                name,
                version,
                what,
            }),
        };
    }
    let mut packages = Vec::new();
    let mut release_packages = Vec::new();
    for package in archive.packages {
        let archived = |blob: String| Archived {
            version: package.package.archive.version.clone(),
            fingerprint: package.package.archive.fingerprint.clone(),
            sha1: package.package.archive.digest.as_str().to_string(),
            blob,
        };
        let kept = match package.bytes {
            Some(bytes) => {
                let blob = bytes.sha1().to_string();
                packages.push((blob.clone(), package.package.archive.name.clone(), bytes));
                archived(blob)
            }
            None => {
                let fingerprint = &package.package.archive.fingerprint;
                let known = existing
                    .iter()
                    .flat_map(|r| &r.packages)
                    .filter(|p| p.compiled_for.is_empty())
                    .filter_map(|p| p.archive.as_ref())
                    .find(|a| &a.fingerprint == fingerprint)
                    .ok_or_else(|| UploadRefusal::MissingPackage {
                        package: package.package.archive.name.clone(),
                        fingerprint: fingerprint.clone(),
                    })?;
                archived(known.blob.clone())
            }
        };
        release_packages.push(Package {
            name: package.package.archive.name,
            dependencies: package.package.dependencies,
            archive: Some(kept),
            compiled_for: Vec::new(),
        });
    }
    // A compiled release's packages: kept as blobs, and recorded in the compilation cache
    // for the stemcell each was compiled for, so that a deploy compiles none of them.
    let mut compiled = Vec::new();
    for entry in archive.compiled {
        let package = entry.compiled.package;
        let name = package.archive.name.clone();
        let blob = match entry.bytes {
            Some(bytes) => {
                let blob = bytes.sha1().to_string();
                packages.push((blob.clone(), name.clone(), bytes));
                blob
            }
            None => {
                return Err(UploadRefusal::MissingPackage {
                    package: name,
                    fingerprint: package.archive.fingerprint,
                });
            }
        };
        match release_packages.iter_mut().find(|p| p.name == name) {
            // A package the release also brings with its sources keeps them.
            Some(known) if known.compiled_for.is_empty() => {}
            Some(known) => known.compiled_for.push(entry.compiled.stemcell.clone()),
            None => release_packages.push(Package {
                name: name.clone(),
                dependencies: package.dependencies,
                archive: Some(Archived {
                    version: package.archive.version,
                    fingerprint: package.archive.fingerprint,
                    sha1: package.archive.digest.as_str().to_string(),
                    blob: blob.clone(),
                }),
                compiled_for: vec![entry.compiled.stemcell.clone()],
            }),
        }
        compiled.push((name, entry.compiled.stemcell, blob));
    }
    let mut jobs = Vec::new();
    let mut release_jobs = Vec::new();
    for job in archive.jobs {
        let bytes = Payload::memory(job.bytes);
        let blob = bytes.sha1().to_string();
        let spec = job.files.spec;
        release_jobs.push(ReleaseJob {
            name: job.archive.name.clone(),
            packages: spec.packages,
            archive: Some(Archived {
                version: job.archive.version,
                fingerprint: job.archive.fingerprint,
                sha1: job.archive.digest.as_str().to_string(),
                blob: blob.clone(),
            }),
            templates: spec.templates,
            properties: spec
                .properties
                .into_iter()
                .map(|(name, p)| {
                    let spec = PropertySpec {
                        default: p.default,
                        description: p.description,
                    };
                    (name, spec)
                })
                .collect(),
            provides: spec.provides.into_iter().map(link_def).collect(),
            consumes: spec.consumes.into_iter().map(link_def).collect(),
        });
        jobs.push((blob, job.archive.name, bytes));
    }
    let release = Release {
        name,
        version,
        jobs: release_jobs,
        packages: release_packages,
        commit_hash: archive.manifest.commit_hash,
        uncommitted_changes: archive.manifest.uncommitted_changes,
    };
    let compiled = compiled
        .into_iter()
        .map(|(package, stemcell, blob)| {
            let key = cache_key(&release, &package, &stemcell);
            let record = CompiledPackage {
                package: format!("{}/{}/{package}", release.name, release.version),
                stemcell,
                blob,
            };
            (key, record)
        })
        .collect();
    Ok(Decision::Keep(Upload {
        release,
        packages,
        jobs,
        compiled,
    }))
}

/// The first job or package whose fingerprint differs between a kept release and an
/// upload of the same version, or that one has and the other lacks.
fn difference(old: &Release, new: &ReleaseArchive) -> Option<String> {
    let old_prints = |kind: &str, items: Vec<(&str, Option<&Archived>)>| {
        items
            .into_iter()
            .map(|(n, a)| {
                let print = a.map_or("none (not uploaded as an archive)", |a| &a.fingerprint);
                ((kind.to_string(), n.to_string()), print.to_string())
            })
            .collect::<BTreeMap<_, _>>()
    };
    let mut before = old_prints(
        "job",
        old.jobs
            .iter()
            .map(|j| (j.name.as_str(), j.archive.as_ref()))
            .collect(),
    );
    before.extend(old_prints(
        "package",
        old.packages
            .iter()
            .map(|p| (p.name.as_str(), p.archive.as_ref()))
            .collect(),
    ));
    let mut after: BTreeMap<(String, String), String> = BTreeMap::new();
    for j in &new.jobs {
        after.insert(
            ("job".into(), j.archive.name.clone()),
            j.archive.fingerprint.clone(),
        );
    }
    for p in &new.packages {
        after.insert(
            ("package".into(), p.package.archive.name.clone()),
            p.package.archive.fingerprint.clone(),
        );
    }
    for c in &new.compiled {
        after.insert(
            ("package".into(), c.compiled.package.archive.name.clone()),
            c.compiled.package.archive.fingerprint.clone(),
        );
    }
    for ((kind, name), print) in &after {
        match before.get(&(kind.clone(), name.clone())) {
            None => return Some(format!("{kind} `{name}` is new")),
            Some(old) if old != print => {
                return Some(format!(
                    "{kind} `{name}` has fingerprint {old} there, {print} here"
                ));
            }
            Some(_) => {}
        }
    }
    before
        .keys()
        .find(|k| !after.contains_key(*k))
        .map(|(kind, name)| format!("{kind} `{name}` is left out"))
}

fn link_def(spec: fleet_release::LinkSpec) -> LinkDef {
    LinkDef {
        name: spec.name,
        link_type: spec.link_type,
        optional: spec.optional,
        properties: spec.properties,
    }
}

/// The task: blobs first, a step each, then the release record.
pub async fn run(
    records: Records,
    uploads: Arc<tokio::sync::Mutex<()>>,
    log: TaskLog,
    archive: ReleaseArchive,
    fix: bool,
) -> Result<String, JobError> {
    // Two uploads of one release must not both decide it is new.
    let _one_at_a_time = uploads.lock().await;
    let existing = records.releases().await?;
    let mut upload = match decide(archive, &existing, fix).map_err(StepError::from)? {
        Decision::AlreadyThere { name, version } => {
            let stage = log.stage("Release has been created", Vec::new(), 1);
            stage.start(format!("{name}/{version}")).finish();
            return Ok(format!("Release '{name}/{version}' already exists"));
        }
        Decision::Keep(upload) => upload,
    };
    for (stage_name, blobs) in [
        (
            "Creating new packages",
            std::mem::take(&mut upload.packages),
        ),
        ("Creating new jobs", std::mem::take(&mut upload.jobs)),
    ] {
        if blobs.is_empty() {
            continue;
        }
        let stage = log.stage(stage_name, Vec::new(), blobs.len() as u32);
        for (blob, name, bytes) in blobs {
            log.check()?;
            let step = stage.start(format!("{name}/{}", &blob[..blob.len().min(12)]));
            let kept = records.put_payload(&blob, bytes).await;
            step.end(kept.map_err(StepError::from))?;
        }
    }
    log.check()?;
    let release = &upload.release;
    let what = format!("{}/{}", release.name, release.version);
    let stage = log.stage("Release has been created", Vec::new(), 1);
    let step = stage.start(what.clone());
    let mut writes = vec![change::release(release)];
    writes.extend(
        upload
            .compiled
            .iter()
            .map(|(key, record)| change::compiled(key, record)),
    );
    let recorded = records.write(writes).await;
    step.end(recorded.map_err(StepError::from))?;
    Ok(format!("Created release '{what}'"))
}
