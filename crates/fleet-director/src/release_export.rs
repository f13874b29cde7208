//! `bosh export-release`: a release a deployment uses, packed with its packages as they
//! were compiled for a stemcell into a compiled release, which a director takes without
//! compiling. What no deploy compiled for the stemcell yet is compiled first, on the
//! deployment's compilation VMs, as BOSH's export does. The tarball is kept as a blob for
//! download (`GET /resources/ID`); the task's result output names it and gives its
//! SHA-1, as BOSH's does.

use serde_json::json;

use super::compilation;
use super::compile::{NeededOn, needed_for_jobs};
use super::error::StepError;
use super::ids::new_id;
use super::latest;
use super::manifest;
use super::model::{CompiledPackage, Release};
use super::ports::DeployPorts;
use super::records::{Records, change};
use super::snapshot::Snapshot;
use super::task::{JobError, TaskLog};

/// What is exported: a release version a deployment uses, for a stemcell, optionally only
/// some of its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRequest {
    pub deployment: String,
    pub release: String,
    pub version: String,
    /// `os/version`.
    pub stemcell: String,
    /// Every job when empty.
    pub jobs: Vec<String>,
}

/// The blob ids of exported releases start with this, which tells `GET /resources/ID` it
/// may hand the blob out.
pub const EXPORT_PREFIX: &str = "exported-release-";

/// The task: checks the deployment uses the release, finds each package compiled for
/// the stemcell, packs them with the jobs, and keeps the tarball.
///
/// # Errors
/// A release the deployment does not use in that version, a stemcell not uploaded, a
/// package not compiled for it (a deploy on that stemcell compiles them), a store failure.
pub async fn run(
    deploy: DeployPorts,
    log: TaskLog,
    request: ExportRequest,
) -> Result<String, JobError> {
    let records = deploy.ports.records.clone();
    let ExportRequest {
        deployment,
        release: name,
        version,
        stemcell,
        jobs,
    } = request;
    let record = records
        .deployment(&deployment)
        .await?
        .ok_or_else(|| StepError::Failed(format!("Deployment '{deployment}' doesn't exist")))?;
    let text = record.manifest.clone().unwrap_or_default();
    let used = record
        .manifest
        .as_deref()
        .and_then(|m| manifest::parse(m).ok())
        .map(|mut m| {
            latest::reapply(&mut m, &record.latest);
            m.releases
        })
        .unwrap_or_default();
    if !used.iter().any(|r| r.name == name && r.version == version) {
        return Err(StepError::Failed(format!(
            "Release version '{name}/{version}' not found in deployment '{deployment}' manifest"
        ))
        .into());
    }
    if !records
        .stemcells()
        .await?
        .iter()
        .any(|s| format!("{}/{}", s.os, s.version) == stemcell)
    {
        return Err(StepError::Failed(format!("Stemcell '{stemcell}' doesn't exist")).into());
    }
    let release = records
        .releases()
        .await?
        .into_iter()
        .find(|r| r.name == name && r.version == version)
        .ok_or_else(|| StepError::Failed(format!("Release '{name}/{version}' doesn't exist")))?;
    // The packages the exported jobs need on the stemcell, with their cache keys: what
    // is compiled first, then packed.
    let wanted: Vec<(String, String)> = release
        .jobs
        .iter()
        .filter(|j| jobs.is_empty() || jobs.contains(&j.name))
        .map(|j| (release.name.clone(), j.name.clone()))
        .collect();
    let needed = needed_for_jobs(std::slice::from_ref(&release), &wanted, &stemcell)
        .map_err(StepError::from)?;
    compile_missing(&deploy, &log, &deployment, text, &release, &needed).await?;
    let stage = log.stage("Exporting release", Vec::new(), 1);
    let step = stage.start(format!("{name}/{version} for {stemcell}"));
    let packed = pack(&records, &release, &needed, &jobs).await;
    let (bytes, sha1) = step.end(packed)?;
    let id = format!("{EXPORT_PREFIX}{}", new_id("blob"));
    records.put_blob(&id, bytes).await?;
    let line = json!({ "blobstore_id": id, "sha1": sha1 }).to_string();
    records
        .write(vec![change::task_result(log.task(), &format!("{line}\n"))])
        .await?;
    Ok(format!("Exported release: {name}/{version} for {stemcell}"))
}

/// Compiles what the exported jobs need on `stemcell` and the cache lacks, on the
/// deployment's compilation VMs.
async fn compile_missing(
    deploy: &DeployPorts,
    log: &TaskLog,
    deployment: &str,
    manifest: String,
    release: &Release,
    needed: &NeededOn,
) -> Result<(), JobError> {
    let records = &deploy.ports.records;
    let releases = std::slice::from_ref(release);
    let needed = std::slice::from_ref(needed);
    let uncompiled = compilation::observe_for(records, needed).await?;
    let plan = compilation::decide_for(needed, releases, &uncompiled)?;
    if plan.is_empty() {
        return Ok(());
    }
    let snapshot = Snapshot::take(records, manifest, false).await?;
    let networking = snapshot.networking();
    // Without a cloud config, the compilation VMs keep clear of the instances' addresses.
    let taken: Vec<(String, u32)> = records
        .instances(deployment)
        .await?
        .iter()
        .flat_map(|i| &i.vm_networks)
        .filter_map(|n| {
            let (network, ip) = n.split_once('/')?;
            let ip: std::net::Ipv4Addr = ip.parse().ok()?;
            Some((network.to_string(), crate::network::to_u32(ip)))
        })
        .collect();
    let ports = &deploy.ports;
    let locks = &deploy.compile_locks;
    compilation::compile(ports, locks, log, &snapshot, &networking, &taken, &plan).await?;
    Ok(())
}

/// The compiled release's tarball and its SHA-1.
async fn pack(
    records: &Records,
    release: &Release,
    needed: &NeededOn,
    jobs: &[String],
) -> Result<(Vec<u8>, String), StepError> {
    let stemcell = &needed.stemcell;
    let mut manifest = format!(
        "name: {}\nversion: '{}'\ncommit_hash: {}\nuncommitted_changes: {}\njobs:\n",
        release.name,
        release.version,
        release.commit_hash.as_deref().unwrap_or("unknown"),
        release.uncommitted_changes
    );
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for job in release
        .jobs
        .iter()
        .filter(|j| jobs.is_empty() || jobs.contains(&j.name))
    {
        let archive = job.archive.as_ref().ok_or_else(|| {
            StepError::Failed(format!("job `{}` has no archive to export", job.name))
        })?;
        let bytes = blob(records, &archive.blob).await?;
        manifest.push_str(&format!(
            "- name: {}\n  version: {}\n  fingerprint: {}\n  sha1: {}\n",
            job.name, archive.version, archive.fingerprint, archive.sha1
        ));
        files.push((format!("jobs/{}.tgz", job.name), bytes));
    }
    manifest.push_str("compiled_packages:\n");
    let mut missing = Vec::new();
    for (package, key) in &needed.keys {
        let name = package.name.clone();
        let package = release
            .packages
            .iter()
            .find(|p| p.name == name)
            .expect("a package of the release");
        let compiled: Option<CompiledPackage> = records.compiled(key).await?;
        let (Some(compiled), Some(archive)) = (compiled, package.archive.as_ref()) else {
            missing.push(name);
            continue;
        };
        let bytes = blob(records, &compiled.blob).await?;
        manifest.push_str(&format!(
            "- name: {name}\n  version: {}\n  fingerprint: {}\n  sha1: {}\n  stemcell: {stemcell}\n  dependencies: [{}]\n",
            archive.version,
            archive.fingerprint,
            fleet_release::sha1_hex(&bytes),
            package.dependencies.join(", ")
        ));
        files.push((format!("compiled_packages/{name}.tgz"), bytes));
    }
    if !missing.is_empty() {
        return Err(StepError::Failed(format!(
            "packages of {}/{} not compiled for stemcell '{stemcell}': {}; a deploy on that \
             stemcell compiles them",
            release.name,
            release.version,
            missing.join(", ")
        )));
    }
    let mut entries: Vec<(&str, &[u8])> = vec![("release.MF", manifest.as_bytes())];
    entries.extend(files.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    let tarball = fleet_release::build_tgz(&entries);
    let sha1 = fleet_release::sha1_hex(&tarball);
    Ok((tarball, sha1))
}

async fn blob(records: &Records, id: &str) -> Result<Vec<u8>, StepError> {
    records
        .blob(id)
        .await?
        .ok_or_else(|| StepError::Failed(format!("blob {id} is missing from the store")))
}
