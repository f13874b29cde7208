//! Errands: which a deployment has, and running one.

use crate::DirectorError;
use crate::errand;
use crate::model::{Task, TaskKind};

use super::Director;

impl Director {
    /// The errands of the deployment's deployed manifest (`bosh errands`): its errand
    /// groups and the jobs with `bin/run` it places.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::NotDeployed`]
    /// before its first successful deploy.
    pub async fn errands(&self, deployment: &str) -> Result<Vec<String>, DirectorError> {
        let record = self
            .records()
            .deployment(deployment)
            .await?
            .ok_or_else(|| DirectorError::NotFound {
                what: format!("deployment `{deployment}`"),
            })?;
        let text = record.manifest.ok_or_else(|| DirectorError::NotDeployed {
            deployment: deployment.to_string(),
        })?;
        errand::list(&self.core.records, text)
            .await
            .map_err(|e| DirectorError::Invalid(e.to_string()))
    }

    /// Starts a task that runs an errand (`bosh run-errand`) under the deployment's lock;
    /// its results are the task's result output ([`Director::result_output`]).
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::Locked`]
    /// when another task holds it. An unknown errand fails the task, as with BOSH.
    pub async fn run_errand(
        &self,
        deployment: &str,
        request: errand::ErrandRequest,
    ) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::RunErrand,
                Some(deployment),
                &self.origin,
                move |core, log| {
                    let limits = core.settings.limits;
                    errand::run(core.deploy_ports(), limits, log, name, request)
                },
            )
            .await
    }
}
