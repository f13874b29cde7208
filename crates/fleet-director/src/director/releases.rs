//! Releases and stemcells: uploads, deletions, and the blobs they are kept in.

use std::sync::Arc;

use crate::DirectorError;
use crate::model::{Release, Stemcell, Task, TaskKind};
use crate::records::change;
use crate::release_export::{self, ExportRequest};
use crate::{cleanup, identity, release_upload};

use super::Director;

impl Director {
    /// Packs a release a deployment uses, compiled for a stemcell, into a compiled release
    /// kept for download, as a task under the deployment's lock (`bosh export-release`).
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::Locked`].
    pub async fn export_release(&self, request: ExportRequest) -> Result<Task, DirectorError> {
        self.require_deployment(&request.deployment).await?;
        let deployment = request.deployment.clone();
        self.runner
            .start(
                TaskKind::ExportRelease,
                Some(&deployment),
                &self.origin,
                move |core, log| release_export::run(core.deploy_ports(), log, request),
            )
            .await
    }

    pub async fn upload_release(&self, release: &Release) -> Result<(), DirectorError> {
        Ok(self.records().write(vec![change::release(release)]).await?)
    }

    /// Keeps a release read from BOSH's format, as a task (`bosh upload-release`): its
    /// archives become blobs, its jobs' specs part of its record. The same release again
    /// is a no-op; the same version with other contents is refused unless `fix`, which
    /// replaces it.
    ///
    /// # Errors
    /// Only a store error starting the task; what the upload finds wrong fails the task.
    pub async fn upload_release_archive(
        &self,
        archive: fleet_release::ReleaseArchive,
        fix: bool,
    ) -> Result<Task, DirectorError> {
        self.runner
            .start(
                TaskKind::UpdateRelease,
                None,
                &self.origin,
                move |core, log| {
                    let uploads = Arc::clone(&core.release_uploads);
                    release_upload::run(core.records.clone(), uploads, log, archive, fix)
                },
            )
            .await
    }

    /// The fingerprints, of those given, of packages whose archives the director keeps:
    /// an upload may leave those out (`POST /packages/matches`).
    pub async fn matching_packages(
        &self,
        fingerprints: &[String],
    ) -> Result<Vec<String>, DirectorError> {
        let releases = self.releases().await?;
        // A compiled package's archive is no source to compile from.
        let known: std::collections::BTreeSet<&str> = releases
            .iter()
            .flat_map(|r| &r.packages)
            .filter(|p| p.compiled_for.is_empty())
            .filter_map(|p| p.archive.as_ref())
            .map(|a| a.fingerprint.as_str())
            .collect();
        Ok(fingerprints
            .iter()
            .filter(|f| known.contains(f.as_str()))
            .cloned()
            .collect())
    }

    /// Deletes a release's version, or every version without one, as a task (`bosh
    /// delete-release`); archives no other release shares go with it.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for a release or version the director lacks, and
    /// [`DirectorError::Invalid`] for one a deployment uses: nothing is deleted then.
    pub async fn delete_release(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Task, DirectorError> {
        let all = self.releases().await?;
        let doomed: Vec<Release> = all
            .iter()
            .filter(|r| r.name == name && version.is_none_or(|v| v == r.version))
            .cloned()
            .collect();
        if doomed.is_empty() {
            return Err(DirectorError::NotFound {
                what: match version {
                    Some(v) => format!("release `{name}/{v}`"),
                    None => format!("release `{name}`"),
                },
            });
        }
        let deployed = self.deployed_versions().await?;
        // A manifest naming `latest` uses the newest version.
        if let Some(used) = doomed.iter().find(|r| {
            deployed
                .releases
                .contains(&(r.name.clone(), r.version.clone()))
                || (deployed
                    .releases
                    .contains(&(r.name.clone(), "latest".into()))
                    && cleanup::is_newest(&all, r, |x| (&x.name, &x.version)))
        }) {
            return Err(DirectorError::Invalid(format!(
                "release `{}/{}` is still in use by a deployment",
                used.name, used.version
            )));
        }
        self.runner
            .start(
                TaskKind::DeleteRelease,
                None,
                &self.origin,
                move |core, log| async move {
                    let records = doomed
                        .iter()
                        .map(|r| (format!("{}/{}", r.name, r.version), change::release_gone(r)))
                        .collect();
                    cleanup::forget(&core.records, &log, "Deleting releases", records).await?;
                    cleanup::delete_unnamed_blobs(&core.records, &log).await?;
                    Ok(format!("Deleted {} release version(s)", doomed.len()))
                },
            )
            .await
    }

    /// A blob the director keeps (a job's or package's archive).
    pub async fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, DirectorError> {
        Ok(self.store().blob(id).await?)
    }

    /// Keeps a stemcell; the CPI makes its image known first (`create_stemcell`). The
    /// same stemcell again keeps what the CPI made of it the first time.
    ///
    /// # Errors
    /// The CPI refuses it, or the store fails: nothing is recorded then.
    pub async fn upload_stemcell(&self, stemcell: &Stemcell) -> Result<(), DirectorError> {
        let key = format!("{}/{}", stemcell.os, stemcell.version);
        let kept = self.records().stemcells().await?.into_iter().find(|s| {
            s.name == stemcell.name && s.os == stemcell.os && s.version == stemcell.version
        });
        if kept.is_some() {
            return Ok(());
        }
        let cid = self
            .core
            .cpi
            .create_stemcell(stemcell)
            .await
            .map_err(|e| DirectorError::Invalid(format!("stemcell {key}: {e}")))?;
        let record = Stemcell {
            cid,
            ..stemcell.clone()
        };
        Ok(self
            .records()
            .write(vec![change::stemcell(&record)])
            .await?)
    }

    pub async fn releases(&self) -> Result<Vec<Release>, DirectorError> {
        Ok(self.records().releases().await?)
    }

    /// What its CPI is called, for `/info`.
    pub fn cpi_name(&self) -> String {
        self.core.cpi.name()
    }

    /// The director's UUID, the same across restarts.
    pub async fn uuid(&self) -> Result<String, DirectorError> {
        Ok(identity::director_uuid(self.store()).await?)
    }

    pub async fn stemcells(&self) -> Result<Vec<Stemcell>, DirectorError> {
        Ok(self.records().stemcells().await?)
    }
}
