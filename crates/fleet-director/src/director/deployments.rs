//! Deployments changed: deploy, recreate, stop, restart, start, delete, ignore, each a task
//! under the deployment's lock.

use crate::model::{DeploymentRecord, Task, TaskKind};
use crate::records::change;
use crate::{DeployOptions, DirectorError, RecreateOptions, Target, name_problem};
use crate::{deploy, manifest};

use super::Director;

impl Director {
    /// Starts a deploy of `manifest`. Text that is not YAML or has no name is refused at
    /// once; everything else is checked inside the task.
    ///
    /// # Errors
    /// [`DirectorError::Locked`] when another task holds the deployment, manifest errors
    /// when its name cannot be read.
    pub async fn deploy(
        &self,
        manifest: &str,
        options: DeployOptions,
    ) -> Result<Task, DirectorError> {
        let root = fleet_yaml::load(manifest, fleet_yaml::Limits::default())
            .map_err(|e| DirectorError::Manifest(manifest::ManifestError::Syntax(e)))?;
        let name = root
            .get("name")
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| DirectorError::Invalid("the manifest has no `name`".into()))?
            .to_string();
        // Refused before a task is made: the name would show in every task list.
        if let Some(problem) = name_problem(&name) {
            return Err(DirectorError::Invalid(format!(
                "the manifest's `name` {problem}"
            )));
        }
        let text = manifest.to_string();
        let known: Option<DeploymentRecord> = self.records().deployment(&name).await?;
        let kind = if known.is_some() {
            self.may_change(&name).await?;
            TaskKind::UpdateDeployment
        } else {
            TaskKind::CreateDeployment
        };
        // A new deployment belongs to the teams its creator administers; an existing one
        // keeps its own.
        let mut options = options;
        options.teams = match (&known, &self.origin.teams) {
            (None, Some(teams)) => teams.clone(),
            _ => Vec::new(),
        };
        self.runner
            .start(kind, Some(&name), &self.origin, move |core, log| {
                deploy::deploy(
                    core.deploy_ports(),
                    core.settings.limits,
                    log,
                    text,
                    options,
                )
            })
            .await
    }

    /// Recreates every VM of the deployment from its last deployed manifest.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for a deployment that never deployed successfully,
    /// [`DirectorError::Locked`] when another task holds it.
    pub async fn recreate(
        &self,
        deployment: &str,
        options: RecreateOptions,
    ) -> Result<Task, DirectorError> {
        self.check_target(deployment, &options.target).await?;
        let name = deployment.to_string();
        let deploy_options = DeployOptions {
            recreate: true,
            fix: options.fix,
            skip_drain: options.skip_drain,
            canaries: options.canaries,
            max_in_flight: options.max_in_flight,
            dry_run: options.dry_run,
            start: false,
            restart: false,
            target: options.target,
            teams: Vec::new(),
        };
        self.runner
            .start(
                TaskKind::RecreateDeployment,
                Some(deployment),
                &self.origin,
                move |core, log| {
                    let limits = core.settings.limits;
                    deploy::recreate_or_start(
                        core.deploy_ports(),
                        limits,
                        log,
                        name,
                        deploy_options,
                    )
                },
            )
            .await
    }

    /// Stops the deployment's jobs; `hard` deletes their VMs too (`bosh stop --hard`),
    /// keeping the instances' disks and addresses.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::Locked`].
    pub async fn stop(&self, deployment: &str, hard: bool) -> Result<Task, DirectorError> {
        self.stop_instances(deployment, hard, Target::all(), false)
            .await
    }

    /// Stops the targeted instances' jobs; `hard` deletes their VMs too.
    ///
    /// # Errors
    /// As [`Director::stop`].
    pub async fn stop_instances(
        &self,
        deployment: &str,
        hard: bool,
        target: Target,
        skip_drain: bool,
    ) -> Result<Task, DirectorError> {
        self.check_target(deployment, &target).await?;
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::StopDeployment,
                Some(deployment),
                &self.origin,
                move |core, log| deploy::stop(core.ports(), log, name, hard, target, skip_drain),
            )
            .await
    }

    /// Stops the targeted instances' jobs and starts them again, on the VMs they have.
    ///
    /// # Errors
    /// As [`Director::stop`].
    pub async fn restart(
        &self,
        deployment: &str,
        target: Target,
        skip_drain: bool,
    ) -> Result<Task, DirectorError> {
        self.check_target(deployment, &target).await?;
        let name = deployment.to_string();
        // Within the update procedure, as BOSH restarts: instance by instance under the
        // canaries and `max_in_flight`, so a cluster never has every member down at once.
        let options = DeployOptions {
            restart: true,
            skip_drain,
            target,
            ..DeployOptions::default()
        };
        self.runner
            .start(
                TaskKind::RestartDeployment,
                Some(deployment),
                &self.origin,
                move |core, log| {
                    let limits = core.settings.limits;
                    deploy::recreate_or_start(core.deploy_ports(), limits, log, name, options)
                },
            )
            .await
    }

    /// Starts stopped and detached instances: detached ones get new VMs on the addresses
    /// they kept.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::Locked`].
    pub async fn start(&self, deployment: &str) -> Result<Task, DirectorError> {
        self.start_instances(deployment, Target::all()).await
    }

    /// Starts the targeted stopped and detached instances.
    ///
    /// # Errors
    /// As [`Director::start`].
    pub async fn start_instances(
        &self,
        deployment: &str,
        target: Target,
    ) -> Result<Task, DirectorError> {
        self.check_target(deployment, &target).await?;
        let name = deployment.to_string();
        let options = DeployOptions {
            start: true,
            target,
            ..DeployOptions::default()
        };
        self.runner
            .start(
                TaskKind::StartDeployment,
                Some(deployment),
                &self.origin,
                move |core, log| {
                    let limits = core.settings.limits;
                    deploy::recreate_or_start(core.deploy_ports(), limits, log, name, options)
                },
            )
            .await
    }

    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown deployment, [`DirectorError::Locked`].
    pub async fn delete(&self, deployment: &str) -> Result<Task, DirectorError> {
        self.require_deployment(deployment).await?;
        let name = deployment.to_string();
        self.runner
            .start(
                TaskKind::DeleteDeployment,
                Some(deployment),
                &self.origin,
                move |core, log| deploy::delete(core.deploy_ports(), log, name),
            )
            .await
    }

    /// The manifest the deployment last deployed successfully.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] when it never deployed successfully.
    pub async fn deployed_manifest(&self, deployment: &str) -> Result<String, DirectorError> {
        self.records()
            .deployment(deployment)
            .await?
            .and_then(|d| d.manifest)
            .ok_or_else(|| DirectorError::NotDeployed {
                deployment: deployment.to_string(),
            })
    }

    /// What a state change may act on: a deployment that deployed successfully, a group
    /// of its manifest, an instance that exists.
    ///
    /// # Errors
    /// [`DirectorError::NotDeployed`], [`DirectorError::UnknownGroup`] or
    /// [`DirectorError::UnknownInstance`].
    pub async fn check_target(
        &self,
        deployment: &str,
        target: &Target,
    ) -> Result<(), DirectorError> {
        let deployed = self.deployed_manifest(deployment).await?;
        let Some(group) = &target.group else {
            return Ok(());
        };
        let known = manifest::parse(&deployed)
            .map(|m| m.instance_groups.iter().any(|g| &g.name == group))
            .unwrap_or(false);
        if !known {
            return Err(DirectorError::UnknownGroup {
                deployment: deployment.to_string(),
                group: group.clone(),
            });
        }
        if let Some(instance) = &target.instance
            && !self
                .instances(deployment)
                .await?
                .iter()
                .any(|i| target.matches(&i.group, i.index, &i.id))
        {
            return Err(DirectorError::UnknownInstance {
                deployment: deployment.to_string(),
                group: group.clone(),
                instance: instance.clone(),
            });
        }
        Ok(())
    }

    /// Sets an instance aside (`bosh ignore`) or takes it back (`bosh unignore`).
    ///
    /// # Errors
    /// [`DirectorError::UnknownGroup`] or [`DirectorError::UnknownInstance`] for what the
    /// deployment does not have, [`DirectorError::Locked`] while a task changes it.
    pub async fn set_ignore(
        &self,
        deployment: &str,
        group: &str,
        instance: &str,
        ignore: bool,
    ) -> Result<(), DirectorError> {
        // The group is checked here; the instance is looked up below, once.
        self.check_target(deployment, &Target::group(group)).await?;
        let target = Target::instance(group, instance);
        let mut record = self
            .instances(deployment)
            .await?
            .into_iter()
            .find(|i| target.matches(&i.group, i.index, &i.id))
            .ok_or_else(|| DirectorError::UnknownInstance {
                deployment: deployment.to_string(),
                group: group.to_string(),
                instance: instance.to_string(),
            })?;
        if let Some(task) = self.lock_holder(deployment).await? {
            return Err(DirectorError::Locked {
                deployment: deployment.to_string(),
                task,
            });
        }
        record.ignore = ignore;
        Ok(self
            .records()
            .write(vec![change::instance(&record)])
            .await?)
    }
}
