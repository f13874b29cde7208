//! The director's facade, one file per feature: what the HTTP API, the broker and the
//! embedded fleet call. Each call checks what it is asked, then reads the store or starts
//! a task under the runner; the work itself lives in the modules below the facade.

mod audit;
mod configs;
mod deployments;
mod errands;
mod health;
mod inventory;
mod links;
mod logs;
mod orphans;
mod readiness;
mod releases;
mod ssh;
mod tasks;

pub use links::LinkView;
pub use readiness::Readiness;

use std::sync::Arc;

use fleet_store::AsyncStore;

use crate::model::TaskKind;
use crate::records::Records;
use crate::runner::{Origin, TaskRunner};
use crate::{Core, DirectorError, DirectorSettings, Infrastructure, lease_keeper};

#[derive(Clone)]
pub struct Director {
    pub(crate) core: Arc<Core>,
    runner: Arc<TaskRunner>,
    /// Who the tasks this handle starts are recorded for, and in what context.
    origin: Origin,
}

/// The reason recorded on tasks that a previous process left unfinished.
pub const RECOVERY_REASON: &str =
    "the director stopped while this task was running; its deployment is left as far as it got";

impl Director {
    /// A director over `store` that runs tasks. On a store this process holds alone,
    /// tasks a previous process left running are marked as errored and its locks
    /// released. On a database shared with other director processes, this one registers
    /// and keeps renewing its lease; only the tasks of processes whose lease ran out are
    /// errored, now and whenever one runs out later.
    ///
    /// # Errors
    /// When the store cannot be read or written.
    pub async fn new(
        store: impl Into<AsyncStore>,
        infrastructure: Infrastructure,
        settings: DirectorSettings,
    ) -> Result<Self, DirectorError> {
        let director = Self::observing(store, infrastructure, settings);
        let core = &director.core;
        let shared = core.store.blocking().shared();
        core.store.renew(core.lease()).await?;
        let recovery = if shared {
            fleet_store::Recovery::Expired
        } else {
            fleet_store::Recovery::AllOthers
        };
        let reason = if shared {
            lease_keeper::EXPIRED_REASON
        } else {
            RECOVERY_REASON
        };
        // Tasks stored without a kind are named by their description, before any is
        // listed or pruned by kind.
        let named = core
            .store
            .name_unnamed_tasks(&TaskKind::SPECS, TaskKind::UpdateDeployment.spec())
            .await?;
        if named > 0 {
            tracing::info!(
                tasks = named,
                "tasks stored without a kind were named by their description"
            );
        }
        let recovered = core.store.recover(reason, core.now_ms(), recovery).await?;
        if !recovered.is_empty() {
            tracing::warn!(tasks = ?recovered, "tasks left running by a previous process were marked as errored");
        }
        if shared {
            lease_keeper::spawn(&director.core, &director.runner);
        } else {
            director.delete_half_made_vms().await;
        }
        Ok(director)
    }

    /// Deletes the VMs a previous process left unrecorded when it died (see
    /// [`crate::unsettled`]), so that a crash leaks no VM. Only a process that holds the
    /// store alone does it for every deployment: on a shared database another process may
    /// be making them right now.
    async fn delete_half_made_vms(&self) {
        if let Err(e) = crate::unsettled::settle(&*self.core.cpi, self.records(), None).await {
            tracing::warn!(error = %e, "VMs a crash left unrecorded cannot be settled");
        }
    }

    /// A director that only looks: no recovery, so another process's running tasks stay
    /// as they are. For listings; it must not start tasks.
    pub fn observing(
        store: impl Into<AsyncStore>,
        infrastructure: Infrastructure,
        settings: DirectorSettings,
    ) -> Self {
        let core = Arc::new(Core::new(store.into(), infrastructure, settings));
        Director {
            runner: Arc::new(TaskRunner::new(Arc::clone(&core))),
            core,
            origin: Origin::default(),
        }
    }

    /// This director, recording the tasks it starts as started by `user`.
    pub fn acting_for(&self, user: Option<&str>) -> Director {
        let mut acting = self.clone();
        acting.origin.user = user.map(str::to_string);
        acting
    }

    /// This director, acting for a user who administers `teams` only (not the whole
    /// director): a deployment it creates belongs to them, and it may change only
    /// deployments of one of them.
    pub fn for_teams(&self, teams: Vec<String>) -> Director {
        let mut acting = self.clone();
        acting.origin.teams = Some(teams);
        acting
    }

    /// The teams of every deployment that has any, by deployment.
    pub async fn deployment_teams(
        &self,
    ) -> Result<std::collections::BTreeMap<String, Vec<String>>, DirectorError> {
        Ok(self.records().deployment_teams().await?)
    }

    /// The teams `deployment` belongs to.
    pub async fn teams_of(&self, deployment: &str) -> Result<Vec<String>, DirectorError> {
        Ok(self.records().teams_of(deployment).await?)
    }

    /// Refuses a team user a change to a deployment of none of its teams.
    ///
    /// # Errors
    /// [`DirectorError::NotPermitted`].
    pub(crate) async fn may_change(&self, deployment: &str) -> Result<(), DirectorError> {
        let Some(teams) = &self.origin.teams else {
            return Ok(());
        };
        let theirs = self.records().teams_of(deployment).await?;
        if theirs.iter().any(|t| teams.contains(t)) {
            Ok(())
        } else {
            Err(DirectorError::NotPermitted(format!(
                "Require one of the scopes: bosh.admin, {}",
                theirs
                    .iter()
                    .map(|t| format!("bosh.teams.{t}.admin"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    }

    /// This director, recording the tasks it starts in the client's context
    /// (`X-Bosh-Context-Id`), by which the client finds them again.
    pub fn in_context(&self, context_id: Option<&str>) -> Director {
        let mut acting = self.clone();
        acting.origin.context_id = context_id.map(str::to_string);
        acting
    }

    pub(crate) fn store(&self) -> &AsyncStore {
        &self.core.store
    }

    pub(crate) fn records(&self) -> &Records {
        &self.core.records
    }

    async fn require_deployment(&self, deployment: &str) -> Result<(), DirectorError> {
        match self.records().deployment(deployment).await? {
            Some(_) => Ok(()),
            None => Err(DirectorError::NotFound {
                what: format!("deployment `{deployment}`"),
            }),
        }
    }
}
