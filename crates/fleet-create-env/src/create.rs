//! `create-env`, seed 002's steps in their order: the manifest read and checked; nothing
//! done when neither it, the releases nor the stemcell changed; the CPI installed; the
//! stemcell uploaded; the VM before deleted; the VM made, its agent awaited, its disk
//! brought in; the job updated; what was deployed recorded; stemcells no longer in use
//! deleted.

use super::error::EnvError;
use super::jobs;
use super::prepare::{self, Options};
use super::state::{ReleaseRecord, StemcellRecord, uuid};
use super::vm;

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Deployed,
    /// Neither the manifest, the releases nor the stemcell changed.
    Skipped,
}

/// # Errors
/// Whatever step failed, named; the state file holds everything made up to it.
pub async fn create_env(
    options: &Options,
    progress: &mut dyn FnMut(String),
) -> Result<Outcome, EnvError> {
    let mut p = prepare::read(options).await?;
    progress(format!("Deployment state: '{}'", p.state.path().display()));
    p.load_releases().await?;
    let stemcell = p.stemcell().await?;
    let releases: Vec<(&str, &str)> = p
        .releases
        .iter()
        .map(|r| (r.manifest.name.as_str(), r.manifest.version.as_str()))
        .collect();
    let stemcell_id = (stemcell.name.as_str(), stemcell.version.as_str());
    if !options.recreate && p.state.state.deployed(&p.sha, stemcell_id, &releases) {
        progress("No deployment, stemcell or release changes. Skipping deploy.".into());
        return Ok(Outcome::Skipped);
    }
    let cpi = p.cpi(stemcell.api_version, progress).await?;
    let _registry = p.registry(progress).await?;
    if stemcell.api_version < 2 {
        return Err(EnvError::Input(format!(
            "stemcell {}/{} has API version {}; this CLI needs 2 or greater",
            stemcell.name, stemcell.version, stemcell.api_version
        )));
    }

    progress(format!(
        "Uploading stemcell '{}/{}'",
        stemcell.name, stemcell.version
    ));
    let uploaded = p
        .state
        .state
        .stemcells
        .iter()
        .find(|s| s.name == stemcell.name && s.version == stemcell.version)
        .cloned();
    let record = match uploaded {
        Some(record) => record,
        None => {
            let properties = stemcell
                .cloud_properties
                .as_object()
                .cloned()
                .unwrap_or_default();
            let cid = cpi
                .create_stemcell(&stemcell.image.display().to_string(), &properties)
                .await
                .map_err(EnvError::cpi("create_stemcell"))?;
            let record = StemcellRecord {
                id: uuid(),
                name: stemcell.name.clone(),
                version: stemcell.version.clone(),
                api_version: Some(stemcell.api_version),
                cid,
            };
            p.state.change(|s| s.stemcells.push(record.clone())).await?;
            record
        }
    };

    progress("Started deploying".into());
    p.state
        .change(|s| {
            s.current_manifest_sha.clear();
            s.releases.clear();
            s.current_release_ids.clear();
        })
        .await?;
    let agent = vm::agent(&p.manifest)?;
    vm::delete_current(&cpi, &agent, &mut p.state, progress).await?;
    let vm_cid = vm::create(
        &cpi,
        &agent,
        &p.manifest,
        &mut p.state,
        (&record.id, &record.cid),
        progress,
    )
    .await?;
    vm::converge_disk(&cpi, &agent, &p.manifest, &mut p.state, &vm_cid, progress).await?;
    jobs::update(&p.manifest, &p.releases, &agent, progress).await?;

    let releases: Vec<ReleaseRecord> = p
        .releases
        .iter()
        .map(|r| ReleaseRecord {
            id: uuid(),
            name: r.manifest.name.clone(),
            version: r.manifest.version.clone(),
        })
        .collect();
    let sha = p.sha.clone();
    p.state
        .change(|s| {
            s.current_manifest_sha = sha;
            s.current_release_ids = releases.iter().map(|r| r.id.clone()).collect();
            s.releases = releases;
        })
        .await?;
    let unused: Vec<StemcellRecord> = p
        .state
        .state
        .stemcells
        .iter()
        .filter(|s| s.id != p.state.state.current_stemcell_id)
        .cloned()
        .collect();
    for old in unused {
        progress(format!("Deleting unused stemcell '{}'", old.cid));
        match cpi.delete_stemcell(&old.cid).await {
            Err(e) if e.kind() != Some(fleet_cpi::protocol::kinds::STEMCELL_NOT_FOUND) => {
                return Err(EnvError::cpi(format!("delete_stemcell {}", old.cid))(e));
            }
            _ => {}
        }
        p.state
            .change(|s| s.stemcells.retain(|x| x.id != old.id))
            .await?;
    }
    progress("Finished deploying".into());
    Ok(Outcome::Deployed)
}
