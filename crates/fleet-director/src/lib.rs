//! The embedded director core: releases, stemcells, cloud config, deployments and their
//! instances, VMs and disks, and tasks with event logs, behind one facade. Operations run
//! as background tasks; one operation per deployment at a time (a second is refused at
//! once, naming the task that holds the lock). State lives in a [`store::Store`]; the IaaS
//! and the agents are behind the [`cpi::Cpi`] and [`agent::Agent`] traits.

pub mod addresses;
pub mod agent;
pub mod audit;
pub mod cleanup;
pub mod cloud;
pub mod cloud_check;
pub mod cloud_properties;
pub mod collections;
mod compilation;
pub mod compile;
pub mod core;
pub mod cpi;
mod cpi_trace;
mod deploy;
mod details;
pub mod disk_plan;
mod dry_run;
pub mod errand;
mod error;
mod gather;
mod identity;
mod ids;
mod lease_keeper;
pub mod limits;
pub mod log_request;
pub mod logs;
pub mod manifest;
pub mod model;
mod names;
pub mod network;
mod networking;
pub mod plan;
pub mod problem;
pub mod records;
mod release_upload;
pub mod renderer;
mod runner;
pub mod runtime;
pub mod sim;
mod snapshot;
mod target;
mod task;
pub mod task_kind;
pub mod templates;
pub mod trace;
mod update;
mod update_order;
mod upload_refusal;
pub mod validate;

#[cfg(test)]
mod shared_tests;

use records::{Records, change};
use std::sync::Arc;

pub use core::{Core, DirectorSettings, Infrastructure};
pub use deploy::DeployOptions;
pub use error::DirectorError;
pub use identity::director_uuid;
pub use limits::InstanceLimits;
pub use names::{MAX_NAME_LEN, name_problem};
pub use target::Target;
pub use task::JobError;

use fleet_store::AsyncStore;
use manifest::Count;
use model::{
    CloudConfig, CloudConfigUse, ConfigsInForce, DeployedVersions, DeploymentRecord,
    DeploymentSummary, DiskRecord, InstanceRecord, Release, Stemcell, Task, TaskEvent, TaskFilter,
    TaskKind, VmRecord,
};
use runner::{Origin, TaskRunner, lock_name};

/// Options of `recreate`, as `bosh recreate` takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecreateOptions {
    pub fix: bool,
    pub skip_drain: bool,
    pub canaries: Option<Count>,
    pub max_in_flight: Option<Count>,
    pub dry_run: bool,
    pub target: Target,
}

/// Whether two YAML texts mean the same to the director; text that is not YAML is compared
/// as it is.
fn same_document(a: &str, b: &str) -> bool {
    let read = |text: &str| fleet_yaml::load_as_director(text, fleet_yaml::Limits::default());
    match (read(a), read(b)) {
        (Ok(a), Ok(b)) => fleet_yaml::same(&a, &b),
        _ => a == b,
    }
}

#[derive(Clone)]
pub struct Director {
    core: Arc<Core>,
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
        }
        Ok(director)
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

    /// This director, recording the tasks it starts in the client's context
    /// (`X-Bosh-Context-Id`), by which the client finds them again.
    pub fn in_context(&self, context_id: Option<&str>) -> Director {
        let mut acting = self.clone();
        acting.origin.context_id = context_id.map(str::to_string);
        acting
    }

    fn store(&self) -> &AsyncStore {
        &self.core.store
    }

    fn records(&self) -> &Records {
        &self.core.records
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
                move |core, log| release_upload::run(core, log, archive, fix),
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
        let known: std::collections::BTreeSet<&str> = releases
            .iter()
            .flat_map(|r| &r.packages)
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
                    cleanup::forget(&core, &log, "Deleting releases", records).await?;
                    cleanup::delete_unnamed_blobs(&core, &log).await?;
                    Ok(format!("Deleted {} release version(s)", doomed.len()))
                },
            )
            .await
    }

    /// A blob the director keeps (a job's or package's archive).
    pub async fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, DirectorError> {
        Ok(self.store().run(|s| s.blob(id)).await?)
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

    /// The director's UUID, the same across restarts.
    pub async fn uuid(&self) -> Result<String, DirectorError> {
        Ok(identity::director_uuid(self.store()).await?)
    }

    pub async fn stemcells(&self) -> Result<Vec<Stemcell>, DirectorError> {
        Ok(self.records().stemcells().await?)
    }

    /// Replaces the cloud config with a new version, unless it is the same text.
    /// Deployments made with an older version are then out of date.
    ///
    /// # Errors
    /// [`DirectorError::CloudConfig`] with every problem of an invalid one, which is not
    /// stored: the next deploy must not be the first to find it.
    pub async fn update_cloud_config(&self, text: &str) -> Result<u64, DirectorError> {
        cloud::parse(text, 0)?;
        let current = self.cloud_config().await?;
        // The same config written another way (as `bosh cloud-config` prints it) is no new
        // version: a new one would mark every deployment outdated.
        if let Some(current) = &current
            && same_document(&current.text, text)
        {
            return Ok(current.version);
        }
        let config = CloudConfig {
            version: self.next_config_version().await?,
            text: text.to_string(),
            created_at: Some(self.core.unix_now()),
        };
        self.records()
            .write(change::cloud_config(&config).into())
            .await?;
        Ok(config.version)
    }

    /// Config versions are numbered in one sequence over every kind of config, so that
    /// a version names one config (`bosh config ID`).
    async fn next_config_version(&self) -> Result<u64, DirectorError> {
        let cloud = self.records().cloud_configs().await?;
        let runtime = self.records().runtime_configs().await?;
        let newest = cloud
            .iter()
            .map(|c| c.version)
            .chain(runtime.iter().map(|c| c.version))
            .max()
            .unwrap_or(0);
        Ok(newest + 1)
    }

    /// Uploads runtime config `name`; checked first, every problem at once. The same
    /// config written another way makes no new version.
    ///
    /// # Errors
    /// [`DirectorError::RuntimeConfig`] naming every invalid key.
    pub async fn update_runtime_config(
        &self,
        name: &str,
        text: &str,
    ) -> Result<u64, DirectorError> {
        runtime::parse(text)?;
        let all = self.records().runtime_configs().await?;
        if let Some(current) = all.iter().find(|c| c.name == name)
            && same_document(&current.text, text)
        {
            return Ok(current.version);
        }
        let config = runtime::RuntimeConfig {
            name: name.to_string(),
            version: self.next_config_version().await?,
            text: text.to_string(),
            created_at: Some(self.core.unix_now()),
        };
        self.records()
            .write(vec![change::runtime_config(&config)])
            .await?;
        Ok(config.version)
    }

    /// Every version of every runtime config, newest first.
    pub async fn runtime_configs(&self) -> Result<Vec<runtime::RuntimeConfig>, DirectorError> {
        Ok(self.records().runtime_configs().await?)
    }

    /// Every cloud config uploaded, newest first.
    pub async fn cloud_configs(&self) -> Result<Vec<CloudConfig>, DirectorError> {
        Ok(self.records().cloud_configs().await?)
    }

    pub async fn cloud_config(&self) -> Result<Option<CloudConfig>, DirectorError> {
        Ok(self.records().cloud_config().await?)
    }

    /// The cloud and runtime configs a deploy would apply now, by version.
    pub async fn configs_in_force(&self) -> Result<ConfigsInForce, DirectorError> {
        Ok(self.records().configs_in_force().await?)
    }

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
            TaskKind::UpdateDeployment
        } else {
            TaskKind::CreateDeployment
        };
        self.runner
            .start(kind, Some(&name), &self.origin, move |core, log| {
                deploy::deploy(core, log, text, options)
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
        };
        self.runner
            .start(
                TaskKind::RecreateDeployment,
                Some(deployment),
                &self.origin,
                move |core, log| deploy::recreate_or_start(core, log, name, deploy_options),
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
                move |core, log| deploy::stop(core, log, name, hard, target, skip_drain),
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
                move |core, log| deploy::recreate_or_start(core, log, name, options),
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
                move |core, log| deploy::recreate_or_start(core, log, name, options),
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
                move |core, log| deploy::delete(core, log, name),
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

    /// Asks a running task to stop at its next safe point: what it started finishes,
    /// nothing new starts, and it ends as `cancelled`.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown task, [`DirectorError::Invalid`] for a
    /// task that has ended or that this process does not run.
    pub async fn cancel(&self, id: u64) -> Result<Task, DirectorError> {
        self.runner.cancel(id).await
    }

    /// Cancels every task this process runs, for a shutdown; returns their ids.
    pub async fn cancel_running(&self) -> Vec<u64> {
        self.runner.cancel_running().await
    }

    /// Waits until no task of this process runs.
    pub async fn idle(&self) {
        self.runner.idle().await;
    }

    /// Waits until the task has ended and returns it.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown task.
    pub async fn wait(&self, id: u64) -> Result<Task, DirectorError> {
        self.runner.wait(id).await
    }

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
        errand::list(&self.core, text)
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
                move |core, log| errand::run(core, log, name, request),
            )
            .await
    }

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
                    logs::fetch(&core, &log, &name, chosen, request).await
                },
            )
            .await
    }

    /// A kept log bundle's bytes (`GET /resources/ID`); `None` for any other blob.
    ///
    /// # Errors
    /// A store failure.
    pub async fn log_bundle(&self, id: &str) -> Result<Option<Vec<u8>>, DirectorError> {
        if !logs::is_bundle(id) {
            return Ok(None);
        }
        if self.records().log_bundle(id).await?.is_none() {
            return Ok(None);
        }
        self.blob(id).await
    }

    /// What a finished task wrote as its result output: an errand's results or the
    /// instances' details, one JSON line per instance (none for a skipped errand); else
    /// its one-line result.
    ///
    /// # Errors
    /// A store failure.
    pub async fn result_output(&self, task: &Task) -> Result<String, DirectorError> {
        let kept = self.records().task_result(task.id).await?;
        Ok(match TaskKind::of(task) {
            // Clients decode these as JSON: a skipped errand has no results at all.
            Some(TaskKind::RunErrand | TaskKind::InstanceDetails) => kept.unwrap_or_default(),
            _ => kept.or_else(|| task.result.clone()).unwrap_or_default(),
        })
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
                    let lines = details::instance_lines(Arc::clone(&core), name, vms_only).await?;
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
                move |core, log| cloud_check::scan(core, log, name),
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
                move |core, log| cloud_check::resolve(core, log, name, chosen),
            )
            .await
    }

    /// Every orphaned disk, oldest orphan first.
    pub async fn orphaned_disks(&self) -> Result<Vec<DiskRecord>, DirectorError> {
        let mut disks = self.records().orphaned_disks().await?;
        disks.sort_by_key(|d| (d.orphaned_at, d.cid.clone()));
        Ok(disks)
    }

    /// Deletes one orphaned disk (`bosh delete-disk`).
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for a disk that is not an orphaned one.
    pub async fn delete_orphaned_disk(&self, cid: &str) -> Result<Task, DirectorError> {
        let disk = self
            .records()
            .disk(cid)
            .await?
            .filter(|d| d.orphaned)
            .ok_or_else(|| DirectorError::NotFound {
                what: format!("orphaned disk `{cid}`"),
            })?;
        self.runner
            .start(
                TaskKind::DeleteOrphanDisk,
                None,
                &self.origin,
                move |core, log| async move {
                    cleanup::delete_disks(&core, &log, std::slice::from_ref(&disk)).await?;
                    Ok(format!("orphaned disk {} deleted", disk.cid))
                },
            )
            .await
    }

    /// What `bosh clean-up` would delete now.
    pub async fn clean_up_plan(
        &self,
        options: cleanup::CleanUpOptions,
    ) -> Result<cleanup::CleanUpPlan, DirectorError> {
        let deployed = self.deployed_versions().await?;
        let (releases, stemcells) = (self.releases().await?, self.stemcells().await?);
        let orphaned = self.orphaned_disks().await?;
        Ok(cleanup::plan(
            &releases, &stemcells, &deployed, orphaned, options,
        ))
    }

    /// Deletes what [`Director::clean_up_plan`] names, as one task.
    pub async fn clean_up(&self, options: cleanup::CleanUpOptions) -> Result<Task, DirectorError> {
        let plan = self.clean_up_plan(options).await?;
        self.runner
            .start(TaskKind::CleanUp, None, &self.origin, move |core, log| {
                cleanup::clean_up(core, log, plan)
            })
            .await
    }

    /// The director's event log (`bosh events`), newest first, one page.
    pub async fn audit_events(
        &self,
        filter: &audit::AuditFilter,
    ) -> Result<Vec<audit::AuditEvent>, DirectorError> {
        let tasks = match filter.task {
            Some(id) => self.store().task(id).await?.into_iter().collect(),
            None => {
                self.store()
                    .tasks(TaskFilter {
                        deployment: filter.deployment.clone(),
                        states: None,
                        read_only: false,
                        context_id: None,
                        limit: None,
                    })
                    .await?
            }
        };
        let instances = audit::wants_instances(filter);
        let mut page = Vec::new();
        for task in tasks.iter().filter(|t| audit::may_admit(t, filter)) {
            let log = if instances {
                self.store().events(task.id).await?
            } else {
                Vec::new()
            };
            page.extend(
                audit::of(task, &log)
                    .into_iter()
                    .filter(|e| audit::admits(filter, e)),
            );
            if page.len() >= audit::PAGE {
                break;
            }
        }
        page.truncate(audit::PAGE);
        Ok(page)
    }

    async fn require_deployment(&self, deployment: &str) -> Result<(), DirectorError> {
        match self.records().deployment(deployment).await? {
            Some(_) => Ok(()),
            None => Err(DirectorError::NotFound {
                what: format!("deployment `{deployment}`"),
            }),
        }
    }

    pub async fn deployment(&self, name: &str) -> Result<Option<DeploymentRecord>, DirectorError> {
        Ok(self.records().deployment(name).await?)
    }

    pub async fn deployments(&self) -> Result<Vec<DeploymentRecord>, DirectorError> {
        Ok(self.records().deployments().await?)
    }

    /// Every deployment with its last successfully deployed manifest, parsed; `None`
    /// before a first success.
    pub async fn deployed_manifests(
        &self,
    ) -> Result<Vec<(DeploymentRecord, Option<manifest::Manifest>)>, DirectorError> {
        Ok(self
            .deployments()
            .await?
            .into_iter()
            .map(|record| {
                let parsed = record
                    .manifest
                    .as_deref()
                    .and_then(|m| manifest::parse(m).ok());
                (record, parsed)
            })
            .collect())
    }

    /// Every deployment with its parsed manifest, whether its cloud config is the one in
    /// force, and whether a task holds it.
    pub async fn deployment_summaries(&self) -> Result<Vec<DeploymentSummary>, DirectorError> {
        let current = self.cloud_config().await?.map(|c| c.version);
        let locked: std::collections::HashSet<String> = self
            .locks()
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        Ok(self
            .deployed_manifests()
            .await?
            .into_iter()
            .map(|(record, manifest)| {
                let cloud_config = match (current, record.cloud_config) {
                    (None, _) => CloudConfigUse::None,
                    (Some(c), Some(used)) if c == used => CloudConfigUse::Latest,
                    _ => CloudConfigUse::Outdated,
                };
                let locked = locked.contains(&lock_name(&record.name));
                DeploymentSummary {
                    record,
                    manifest,
                    cloud_config,
                    locked,
                }
            })
            .collect())
    }

    /// The releases and stemcells the deployed manifests use.
    pub async fn deployed_versions(&self) -> Result<DeployedVersions, DirectorError> {
        let mut deployed = DeployedVersions::default();
        for (record, manifest) in self.deployed_manifests().await? {
            let Some(m) = manifest else {
                continue;
            };
            for r in m.releases {
                deployed.releases.insert((r.name, r.version));
            }
            for s in m.stemcells {
                deployed
                    .stemcells
                    .push((s.os, s.version, record.name.clone()));
            }
        }
        Ok(deployed)
    }

    pub async fn instances(&self, deployment: &str) -> Result<Vec<InstanceRecord>, DirectorError> {
        let mut instances: Vec<InstanceRecord> = self.records().instances(deployment).await?;
        instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
        Ok(instances)
    }

    pub async fn vms(&self, deployment: &str) -> Result<Vec<VmRecord>, DirectorError> {
        Ok(self.records().vms(deployment).await?)
    }

    pub async fn disks(&self, deployment: &str) -> Result<Vec<DiskRecord>, DirectorError> {
        Ok(self.records().disks(deployment).await?)
    }

    /// The tasks the filter admits, newest first.
    pub async fn tasks(&self, filter: TaskFilter) -> Result<Vec<Task>, DirectorError> {
        Ok(self.store().tasks(filter).await?)
    }

    /// Makes every record written so far durable (the store's open group of commits is
    /// committed): what is about to be reported done must survive a crash.
    ///
    /// # Errors
    /// A store failure.
    pub async fn sync(&self) -> Result<(), DirectorError> {
        Ok(self.store().sync().await?)
    }

    /// Now in Unix seconds, by the director's clock (virtual under test).
    pub fn unix_now(&self) -> u64 {
        self.core.unix_now()
    }

    /// The newest task that changed the deployment: its last operation.
    pub async fn last_change(&self, deployment: &str) -> Result<Option<Task>, DirectorError> {
        Ok(self.store().last_change(deployment).await?)
    }

    /// The last operation of every deployment that has one.
    pub async fn last_changes(&self) -> Result<Vec<Task>, DirectorError> {
        Ok(self.store().last_changes().await?)
    }

    pub async fn task(&self, id: u64) -> Result<Option<Task>, DirectorError> {
        Ok(self.store().task(id).await?)
    }

    pub async fn events(&self, id: u64) -> Result<Vec<TaskEvent>, DirectorError> {
        Ok(self.store().events(id).await?)
    }

    /// A task's CPI and debug lines (`bosh task --cpi`, `--debug`).
    pub async fn trace(&self, id: u64) -> Result<Vec<trace::TraceLine>, DirectorError> {
        self.runner.trace(id).await
    }

    pub async fn locks(&self) -> Result<Vec<(String, u64)>, DirectorError> {
        Ok(self.store().locks().await?)
    }

    /// The task holding the deployment's lock, if any.
    pub async fn lock_holder(&self, deployment: &str) -> Result<Option<u64>, DirectorError> {
        Ok(self.store().lock_holder(&lock_name(deployment)).await?)
    }
}

#[cfg(test)]
mod cloud_properties_tests;
#[cfg(test)]
mod errand_tests;
#[cfg(test)]
mod logs_tests;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod stop_and_render_tests;
#[cfg(test)]
mod tests;
