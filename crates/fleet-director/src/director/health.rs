//! Instances' health: details, the cloud check's scan, its problems and their resolutions.

use crate::DirectorError;
use crate::model::{Task, TaskKind};
use crate::records::change;
use crate::{cloud_check, details};

use super::Director;

impl Director {
    /// Whether this process watches the fleet's agents and resurrects their VMs for every
    /// director process on its database: one does, so that agents are asked once, an
    /// alert is raised once and a resurrection decided once (see [`fleet_store::Store::leads`]).
    ///
    /// # Errors
    /// A store error.
    pub async fn leads(&self) -> Result<bool, DirectorError> {
        Ok(self.core.store.leads(self.core.now_ms()).await?)
    }

    /// Starts a task that asks every agent of the deployment for its state and records one
    /// JSON line per instance as its result output (what `bosh instances` reads; only
    /// those with a VM for `bosh vms`). It takes no lock.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment.
    pub async fn instance_details(
        &self,
        deployment: &str,
        vms_only: bool,
    ) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::InstanceDetails,
                Some(deployment),
                &self.origin,
                move |core, log| async move {
                    let lines =
                        details::instance_lines(&core.records, &core.agents, name, vms_only);
                    let lines = lines.await?;
                    let count = lines.lines().count();
                    core.records
                        .write(vec![change::task_result(log.task(), &lines)])
                        .await?;
                    Ok(format!("retrieved the details of {count} instances"))
                },
            )
            .await
    }

    /// Cloud check's scan of the deployment (`bosh cck`); its problems are listed by
    /// [`Director::problems`] once it ends.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::Locked`]
    /// when another task holds it.
    pub async fn scan(&self, deployment: &str) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::ScanProblems,
                Some(deployment),
                &self.origin,
                move |core, log| cloud_check::scan(core.ports(), log, name),
            )
            .await
    }

    /// The resurrector's repair of the deployment (`PUT /deployments/:d/scan_and_fix`):
    /// the instances named by group whose agents do not answer or whose VMs are gone get
    /// new VMs; see [`cloud_check::scan_and_fix`].
    ///
    /// # Errors
    /// [`DirectorError::ResurrectionPaused`] when resurrection is paused,
    /// [`DirectorError::UnknownInstance`] for an instance the deployment does not have,
    /// [`DirectorError::Locked`] when another task holds the deployment.
    pub async fn scan_and_fix(
        &self,
        deployment: &str,
        jobs: &std::collections::BTreeMap<String, Vec<String>>,
    ) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        if self.resurrection_paused().await? {
            return Err(DirectorError::ResurrectionPaused);
        }
        let instances = self.records().instances(deployment).await?;
        let mut named = std::collections::BTreeSet::new();
        for (group, ids) in jobs {
            for id in ids {
                // An instance is named by its id or its index, as BOSH's API takes both.
                let found = instances
                    .iter()
                    .find(|i| &i.group == group && (&i.id == id || i.index.to_string() == *id));
                let Some(found) = found else {
                    return Err(DirectorError::UnknownInstance {
                        deployment: deployment.to_string(),
                        group: group.clone(),
                        instance: id.clone(),
                    });
                };
                named.insert(found.id.clone());
            }
        }
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::ScanAndFix,
                Some(deployment),
                &self.origin,
                move |core, log| {
                    let limits = core.settings.limits;
                    let stateful = core.settings.auto_fix_stateful_nodes;
                    let ports = core.deploy_ports();
                    cloud_check::scan_and_fix(ports, limits, log, name, named, stateful)
                },
            )
            .await
    }

    /// What the deployment's last scan found that is not resolved yet.
    pub async fn problems(
        &self,
        deployment: &str,
    ) -> Result<Vec<cloud_check::Problem>, DirectorError> {
        self.require_deployment(deployment).await?;
        Ok(self.records().problems(deployment).await?)
    }

    /// Applies a resolution to each problem named; problems not named stay.
    ///
    /// # Errors
    /// [`DirectorError::Invalid`] naming an unknown problem or a resolution that does not
    /// fit its problem, before anything is done.
    pub async fn resolve(
        &self,
        deployment: &str,
        choices: &[(u64, cloud_check::Resolution)],
    ) -> Result<Task, DirectorError> {
        let problems = self.problems(deployment).await?;
        let mut chosen = Vec::new();
        let mut wrong = Vec::new();
        for (id, resolution) in choices {
            match problems.iter().find(|p| p.id == *id) {
                None => wrong.push(format!("problem {id} is not one of the last scan's")),
                Some(p) if !p.kind.resolutions().contains(resolution) => wrong.push(format!(
                    "problem {id} ({}) cannot be resolved with `{}`; it can with {}",
                    p.kind.name(),
                    resolution.name(),
                    p.kind
                        .resolutions()
                        .iter()
                        .map(|r| format!("`{}`", r.name()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Some(p) => chosen.push((p.clone(), *resolution)),
            }
        }
        if !wrong.is_empty() {
            return Err(DirectorError::Invalid(wrong.join("; ")));
        }
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::ResolveProblems,
                Some(deployment),
                &self.origin,
                move |core, log| {
                    let limits = core.settings.limits;
                    cloud_check::resolve(core.deploy_ports(), limits, log, name, chosen)
                },
            )
            .await
    }
}
