//! SSH sessions on a deployment's instances (`bosh ssh`, `bosh scp`).

use crate::DirectorError;
use crate::agent::SshRequest;
use crate::model::{Task, TaskKind};
use crate::ssh::{self, SshTarget};

use super::Director;

impl Director {
    /// Sets up (or cleans up) a session's user on the instances `target` chooses; the
    /// task's result is what each session is reached at. It takes no lock.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment.
    pub async fn ssh(
        &self,
        deployment: &str,
        target: SshTarget,
        request: SshRequest,
    ) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::Ssh,
                Some(deployment),
                &self.origin,
                move |core, log| async move {
                    ssh::run(&core.ports(), &log, &name, target, request).await
                },
            )
            .await
    }
}
