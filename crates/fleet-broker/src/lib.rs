//! The embedded service broker: service instances are deployments named
//! `service-instance_<id>` on the embedded director. It knows which instances are
//! outdated (what a deployment runs against what its plan wants now), which are busy (the
//! deployment's lock is held) and which the owner blocked, and turns upgrade and recreate
//! requests into director tasks. It uses only the director's public facade.

pub mod catalog;
mod records;

use std::collections::HashMap;

pub use catalog::{Catalog, Plan, StemcellVersion, Version, Versions};
pub use records::{Placement, ServiceInstance, ServiceInstances};

use fleet_director::model::{ConfigsInForce, DeploymentRecord, Task, TaskKind, TaskState};
use fleet_director::{DeployOptions, manifest};
use fleet_director::{Director, DirectorError, RecreateOptions};
use fleet_store::{AsyncStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("unknown plan `{0}`")]
    UnknownPlan(String),
    #[error("service instance `{0}` already exists")]
    Exists(String),
    #[error("service instance `{0}` not found")]
    NotFound(String),
    #[error(transparent)]
    Director(#[from] DirectorError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A poll named a task that is not an operation of the instance polled.
    #[error("bosh task {task} is not an operation of service instance {instance}")]
    ForeignOperation { task: u64, instance: String },
}

/// Which instances a listing wants, as the management API names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    /// A redeploy would change them.
    Outdated,
    Provisioned,
    Failed,
}

impl Filter {
    /// The filter a `state` parameter names.
    pub fn named(name: &str) -> Option<Filter> {
        match name {
            "all" => Some(Filter::All),
            "outdated" => Some(Filter::Outdated),
            "provisioned" => Some(Filter::Provisioned),
            "failed" => Some(Filter::Failed),
            _ => None,
        }
    }

    pub fn admits(self, view: &InstanceView) -> bool {
        match self {
            Filter::All => true,
            Filter::Outdated => view.update_available,
            Filter::Provisioned => view.state == State::Provisioned,
            Filter::Failed => view.state == State::Failed,
        }
    }
}

impl BrokerError {
    /// Whether the same call may succeed later: the store was busy.
    pub fn is_transient(&self) -> bool {
        match self {
            BrokerError::Store(e) | BrokerError::Director(DirectorError::Store(e)) => {
                e.is_transient()
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Provisioned,
    Deploying,
    Failed,
}

/// An instance as the management API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceView {
    pub instance: ServiceInstance,
    pub deployment: String,
    pub state: State,
    pub update_available: bool,
    /// What the deployment last deployed successfully; `None` before that.
    pub running: Option<Versions>,
    /// The latest director task of the deployment.
    pub last_task: Option<Task>,
}

/// The broker's answer to an upgrade or recreate request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Accepted { task: u64 },
    UpToDate,
    Blocked,
    Busy,
    Deleted,
    Orphaned,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationStatus {
    InProgress,
    Succeeded,
    Failed(String),
}

pub struct Broker {
    director: Director,
    instances: ServiceInstances,
    catalog: Catalog,
}

pub fn deployment_name(id: &str) -> String {
    format!("service-instance_{id}")
}

/// The releases and stemcell a manifest names.
fn versions_of(manifest_text: &str) -> Option<Versions> {
    let m = manifest::parse(manifest_text).ok()?;
    let stemcell = m.stemcells.first()?;
    Some(Versions {
        releases: m
            .releases
            .iter()
            .map(|r| Version {
                name: r.name.clone(),
                version: r.version.clone(),
            })
            .collect(),
        stemcell: StemcellVersion {
            os: stemcell.os.clone(),
            version: stemcell.version.clone(),
        },
    })
}

impl Broker {
    pub fn new(director: Director, store: impl Into<AsyncStore>, catalog: Catalog) -> Self {
        Broker {
            director,
            instances: ServiceInstances::new(store.into()),
            catalog,
        }
    }

    pub fn director(&self) -> &Director {
        &self.director
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    fn plan(&self, id: &str) -> Result<&Plan, BrokerError> {
        self.catalog
            .plan(id)
            .ok_or_else(|| BrokerError::UnknownPlan(id.to_string()))
    }

    /// Creates a service instance and deploys it, on `versions` or the plan's current ones;
    /// `blocked` is the owner's choice about maintenance updates, recorded with it.
    ///
    /// # Errors
    /// An unknown plan, an existing id, or a director error.
    pub async fn provision(
        &self,
        id: &str,
        plan_id: &str,
        versions: Option<&Versions>,
        blocked: bool,
        placement: &Placement,
    ) -> Result<Task, BrokerError> {
        self.plan(plan_id)?;
        let instance = ServiceInstance::new(id, plan_id, blocked, placement);
        // Created in one step with the check, so that of two processes provisioning one id
        // at once, one gets it and the other hears it exists.
        if !self.instances.create(&instance).await? {
            return Err(BrokerError::Exists(id.to_string()));
        }
        self.deploy_recorded(&instance, versions, DeployOptions::default())
            .await
    }

    /// Provisioning that may be repeated, for a first use cut short: `None` when the
    /// instance is provisioned already (its blocked mark set as asked); otherwise it is
    /// recorded and deployed again on `versions`, replacing VMs whose agents do not answer
    /// (a create cut short may have left some).
    ///
    /// # Errors
    /// An unknown plan, or a store or director error.
    pub async fn provision_again(
        &self,
        id: &str,
        plan_id: &str,
        versions: Option<&Versions>,
        blocked: bool,
        placement: &Placement,
    ) -> Result<Option<Task>, BrokerError> {
        self.plan(plan_id)?;
        if let Some(view) = self.instance(id).await?
            && view.state == State::Provisioned
        {
            if view.instance.maintenance_updates_blocked != blocked {
                self.set_blocked(id, blocked).await?;
            }
            return Ok(None);
        }
        let options = DeployOptions {
            fix: true,
            ..DeployOptions::default()
        };
        let instance = ServiceInstance::new(id, plan_id, blocked, placement);
        self.record_and_deploy(&instance, versions, options)
            .await
            .map(Some)
    }

    async fn record_and_deploy(
        &self,
        instance: &ServiceInstance,
        versions: Option<&Versions>,
        options: DeployOptions,
    ) -> Result<Task, BrokerError> {
        self.instances.put(instance).await?;
        self.deploy_recorded(instance, versions, options).await
    }

    /// Deploys a recorded instance on `versions` or its plan's current ones.
    async fn deploy_recorded(
        &self,
        instance: &ServiceInstance,
        versions: Option<&Versions>,
        options: DeployOptions,
    ) -> Result<Task, BrokerError> {
        let plan = self.plan(&instance.plan_id)?;
        let deployment = deployment_name(&instance.id);
        let manifest = plan.manifest_for(&deployment, versions.unwrap_or(&plan.current));
        Ok(self.director.deploy(&manifest, options).await?)
    }

    /// The owner's switch for maintenance updates.
    ///
    /// # Errors
    /// An unknown instance or a store error.
    pub async fn set_blocked(&self, id: &str, blocked: bool) -> Result<(), BrokerError> {
        let mut instance = self
            .instances
            .get(id)
            .await?
            .ok_or_else(|| BrokerError::NotFound(id.to_string()))?;
        instance.maintenance_updates_blocked = blocked;
        Ok(self.instances.put(&instance).await?)
    }

    /// An instance as it stands, from its deployment's record, its last change and the
    /// configs in force.
    fn view(
        &self,
        instance: ServiceInstance,
        last_task: Option<Task>,
        record: Option<DeploymentRecord>,
        configs: &ConfigsInForce,
    ) -> InstanceView {
        let deployment = deployment_name(&instance.id);
        let update_available = self.outdated(&instance, record.as_ref(), configs);
        let deployed = record.and_then(|r| r.manifest);
        let running = deployed.as_deref().and_then(versions_of);
        let state = match &last_task {
            Some(task) if task.state.is_running() => State::Deploying,
            Some(task) if task.state != TaskState::Done => State::Failed,
            _ if deployed.is_none() => State::Failed,
            _ => State::Provisioned,
        };
        InstanceView {
            instance,
            deployment,
            state,
            update_available,
            running,
            last_task,
        }
    }

    /// Every service instance, in id order.
    ///
    /// # Errors
    /// A store or director error.
    pub async fn instances(&self) -> Result<Vec<InstanceView>, BrokerError> {
        let mut latest: HashMap<String, Task> = self
            .director
            .last_changes()
            .await?
            .into_iter()
            .filter_map(|task| Some((task.deployment.clone()?, task)))
            .collect();
        let mut records: HashMap<String, DeploymentRecord> = self
            .director
            .deployments()
            .await?
            .into_iter()
            .map(|record| (record.name.clone(), record))
            .collect();
        let configs = self.director.configs_in_force().await?;
        Ok(self
            .instances
            .all()
            .await?
            .into_iter()
            .map(|i| {
                let deployment = deployment_name(&i.id);
                let task = latest.remove(&deployment);
                let record = records.remove(&deployment);
                self.view(i, task, record, &configs)
            })
            .collect())
    }

    /// The instances `filter` admits, in id order.
    ///
    /// # Errors
    /// A store or director error.
    pub async fn instances_in(&self, filter: Filter) -> Result<Vec<InstanceView>, BrokerError> {
        let mut views = self.instances().await?;
        views.retain(|v| filter.admits(v));
        Ok(views)
    }

    /// The state of `task` as an operation of instance `id`: what a poll of
    /// `last_operation` asks, answered from the instance's record and the task alone.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for an unknown instance or task,
    /// [`BrokerError::ForeignOperation`] for a task of another instance.
    pub async fn last_operation(
        &self,
        id: &str,
        task: u64,
    ) -> Result<OperationStatus, BrokerError> {
        if self.instances.get(id).await?.is_none() {
            return Err(BrokerError::NotFound(format!("service instance {id}")));
        }
        // A task pruned long after it ended is unknown, not another instance's.
        let Some(found) = self.director.task(task).await? else {
            return Err(BrokerError::NotFound(format!("task {task}")));
        };
        if found.deployment.as_deref() != Some(&deployment_name(id)) {
            return Err(BrokerError::ForeignOperation {
                task,
                instance: id.to_string(),
            });
        }
        self.operation(task).await
    }

    /// The plan service instance `id` is on, from its record alone (none for an unknown
    /// instance): what a trigger's body is checked against.
    ///
    /// # Errors
    /// A store error.
    pub async fn plan_of(&self, id: &str) -> Result<Option<String>, BrokerError> {
        Ok(self.instances.get(id).await?.map(|i| i.plan_id))
    }

    /// # Errors
    /// A store or director error.
    pub async fn instance(&self, id: &str) -> Result<Option<InstanceView>, BrokerError> {
        let Some(instance) = self.instances.get(id).await? else {
            return Ok(None);
        };
        let deployment = deployment_name(id);
        let task = self.director.last_change(&deployment).await?;
        let record = self.director.deployment(&deployment).await?;
        let configs = self.director.configs_in_force().await?;
        Ok(Some(self.view(instance, task, record, &configs)))
    }

    /// Whether a redeploy would change the deployment: its plan renders another manifest
    /// now, or the cloud config or a runtime config changed since it deployed.
    fn outdated(
        &self,
        instance: &ServiceInstance,
        record: Option<&DeploymentRecord>,
        configs: &ConfigsInForce,
    ) -> bool {
        let Some(record) = record else {
            return true;
        };
        let (Some(plan), Some(deployed)) = (self.catalog.plan(&instance.plan_id), &record.manifest)
        else {
            return true;
        };
        *deployed != plan.manifest_for(&record.name, &plan.current) || configs.outdate(record)
    }

    /// What stands before any operation: gone, orphaned, blocked or busy. Passes on the
    /// instance and its deployment's record.
    async fn precheck(
        &self,
        id: &str,
        force: bool,
    ) -> Result<Result<(ServiceInstance, DeploymentRecord), Answer>, BrokerError> {
        let Some(instance) = self.instances.get(id).await? else {
            return Ok(Err(Answer::Deleted));
        };
        let deployment = deployment_name(id);
        // The lock is read before the record: an operation that ends between the two
        // reads leaves its record to be read, where the other way round a stale record
        // could pass for one to change and the same change be deployed twice.
        let busy = self.director.lock_holder(&deployment).await?.is_some();
        let record = match self.director.deployment(&deployment).await? {
            Some(record) => record,
            // A first deploy still being validated has no record yet.
            None if busy => return Ok(Err(Answer::Busy)),
            // A first deploy the director refused left no record but its task: the
            // instance was never deployed, and is deployed from its plan.
            None => match self.director.last_change(&deployment).await? {
                Some(task) if TaskKind::of(&task) != Some(TaskKind::DeleteDeployment) => {
                    DeploymentRecord {
                        name: deployment.clone(),
                        manifest: None,
                        cloud_config: None,
                        runtime_configs: Vec::new(),
                        latest: Vec::new(),
                        providers: Vec::new(),
                        consumers: Vec::new(),
                    }
                }
                _ => return Ok(Err(Answer::Orphaned)),
            },
        };
        if instance.maintenance_updates_blocked && !force {
            return Ok(Err(Answer::Blocked));
        }
        if busy {
            return Ok(Err(Answer::Busy));
        }
        Ok(Ok((instance, record)))
    }

    fn started(result: Result<Task, DirectorError>) -> Result<Answer, BrokerError> {
        match result {
            Ok(task) => Ok(Answer::Accepted { task: task.id }),
            // Another operation took the lock since the check: still busy.
            Err(DirectorError::Locked { .. }) => Ok(Answer::Busy),
            Err(e) => Err(e.into()),
        }
    }

    /// Redeploys with the plan's current releases, stemcell and manifest.
    ///
    /// # Errors
    /// A store or director error other than a held lock.
    pub async fn upgrade(&self, id: &str, force: bool) -> Result<Answer, BrokerError> {
        let (instance, record) = match self.precheck(id, force).await? {
            Ok(found) => found,
            Err(answer) => return Ok(answer),
        };
        let plan = self.plan(&instance.plan_id)?;
        let desired = plan.manifest_for(&record.name, &plan.current);
        let configs = self.director.configs_in_force().await?;
        if !self.outdated(&instance, Some(&record), &configs) {
            return Ok(Answer::UpToDate);
        }
        Self::started(
            self.director
                .deploy(&desired, DeployOptions::default())
                .await,
        )
    }

    /// Recreates every VM; with `fix`, VMs whose agents do not answer too (`recreate
    /// --fix`). An instance that never deployed successfully has no manifest to recreate
    /// from, so its plan's manifest is deployed with every VM recreated.
    ///
    /// # Errors
    /// A store or director error other than a held lock.
    pub async fn recreate(&self, id: &str, force: bool, fix: bool) -> Result<Answer, BrokerError> {
        let (instance, record) = match self.precheck(id, force).await? {
            Ok(found) => found,
            Err(answer) => return Ok(answer),
        };
        let deployment = record.name;
        if record.manifest.is_none() {
            let plan = self.plan(&instance.plan_id)?;
            let options = DeployOptions {
                recreate: true,
                fix,
                ..DeployOptions::default()
            };
            let manifest = plan.manifest_for(&deployment, &plan.current);
            return Self::started(self.director.deploy(&manifest, options).await);
        }
        let options = RecreateOptions {
            fix,
            ..RecreateOptions::default()
        };
        Self::started(self.director.recreate(&deployment, options).await)
    }

    /// The state of an operation, by its director task. An operation that ended is
    /// reported only once everything it wrote is durable: a caller that records it as
    /// done (a run's journal, its output) must not outlive a crash that takes it back.
    ///
    /// # Errors
    /// A store error, or [`BrokerError::NotFound`] for an unknown task.
    pub async fn operation(&self, task: u64) -> Result<OperationStatus, BrokerError> {
        let task = self
            .director
            .task(task)
            .await?
            .ok_or_else(|| BrokerError::NotFound(format!("task {task}")))?;
        if !task.state.is_running() {
            self.director.sync().await?;
        }
        Ok(match task.state {
            TaskState::Queued | TaskState::Processing | TaskState::Cancelling => {
                OperationStatus::InProgress
            }
            TaskState::Done => OperationStatus::Succeeded,
            TaskState::Error | TaskState::Cancelled => OperationStatus::Failed(format!(
                "bosh task {} {}: {}",
                task.id,
                task.state.as_str(),
                task.result.unwrap_or_default()
            )),
        })
    }
}

#[cfg(test)]
mod tests;
