//! Logs fetched from instances, and the bundles they are kept in.

use crate::DirectorError;
use crate::logs;
use crate::model::{Task, TaskKind};

use super::Director;

impl Director {
    /// Packs the logs of the deployment's instances that `group` and `id` choose (`*` or
    /// none for all; an index or an instance id) into a bundle kept for ten days; the
    /// task's result is the bundle's id (`bosh logs`). It takes no lock.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, or when no instance with a
    /// VM is chosen.
    pub async fn fetch_logs(
        &self,
        deployment: &str,
        group: Option<&str>,
        id: Option<&str>,
        request: logs::LogRequest,
    ) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        let instances = self.records().instances(deployment).await?;
        let chosen: Vec<String> = logs::choose(&instances, group, id)
            .into_iter()
            .map(|i| i.id.clone())
            .collect();
        if chosen.is_empty() {
            return Err(DirectorError::NotFound {
                what: format!(
                    "an instance `{}/{}` of deployment `{deployment}` with a VM to fetch logs from",
                    group.unwrap_or("*"),
                    id.unwrap_or("*")
                ),
            });
        }
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::FetchLogs,
                Some(deployment),
                &self.origin,
                move |core, log| async move {
                    logs::fetch(&core.ports(), &log, &name, chosen, request).await
                },
            )
            .await
    }

    /// The deployment a kept log bundle's logs came from.
    ///
    /// # Errors
    /// A store failure.
    pub async fn log_bundle_deployment(&self, id: &str) -> Result<Option<String>, DirectorError> {
        Ok(self.records().log_bundle(id).await?.map(|b| b.deployment))
    }

    /// A kept log bundle's or exported release's bytes (`GET /resources/ID`); `None` for
    /// any other blob.
    ///
    /// # Errors
    /// A store failure.
    pub async fn log_bundle(&self, id: &str) -> Result<Option<Vec<u8>>, DirectorError> {
        if id.starts_with(crate::release_export::EXPORT_PREFIX) {
            return self.blob(id).await;
        }
        if !logs::is_bundle(id) {
            return Ok(None);
        }
        if self.records().log_bundle(id).await?.is_none() {
            return Ok(None);
        }
        self.blob(id).await
    }
}
