//! A BOSH director as the inventory: its deployments (those matching a name pattern) are
//! the instances. A deployment is outdated when a newer version of a release or stemcell
//! it uses has been uploaded; `update` redeploys its manifest moved to those versions,
//! `recreate` recreates its VMs (`bosh recreate --fix`), and a locked deployment is busy.
//! Each operation is the director task it started.

mod auth;
mod errand;
mod glob;
mod manifest;
mod settings;
mod versions;
mod wire;

use std::time::Duration;

use reqwest::{Method, RequestBuilder};
use serde_json::json;

use auth::{Auth, authorize};
pub use errand::{Addresses, ErrandCheck};
use fleet_http_client::{Answer, Call, Endpoint, HttpClient, segment};
use fleet_rollout::RequestLimiter;
use fleet_rollout::inventory::{
    Action, Instance, InstanceId, InstanceState, Inventory, InventoryError, Operation,
    OperationState, Selection, Triggered,
};
pub use settings::{DirectorAuth, DirectorEndpoint};
use versions::Uploaded;
use wire::{Deployment, DeploymentManifest, Lock, Release, Stemcell, Task};

/// The plan of every instance: a director has deployments, not plans.
pub const PLAN: &str = "bosh-deployment";

pub struct DirectorInventory {
    http: HttpClient,
    auth: Auth,
    url: String,
    ca: Option<String>,
    skip_ssl_validation: bool,
    timeout: Duration,
    pattern: glob::DeploymentPattern,
    limiter: RequestLimiter,
}

impl DirectorInventory {
    /// # Errors
    /// A permanent error when the URL or the CA cannot be used.
    pub fn new(
        config: &DirectorEndpoint,
        limiter: RequestLimiter,
    ) -> Result<DirectorInventory, InventoryError> {
        let inventory = DirectorInventory {
            http: HttpClient::new(&Endpoint {
                url: &config.url,
                ca: config.ca.as_deref(),
                skip_ssl_validation: config.skip_ssl_validation,
                timeout: config.timeout,
                limiter: &limiter,
            })?,
            auth: Auth::new(config.auth.clone()),
            url: config.url.clone(),
            ca: config.ca.clone(),
            skip_ssl_validation: config.skip_ssl_validation,
            timeout: config.timeout,
            pattern: glob::DeploymentPattern::new(&config.deployments),
            limiter,
        };
        Ok(inventory)
    }

    fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            url: &self.url,
            ca: self.ca.as_deref(),
            skip_ssl_validation: self.skip_ssl_validation,
            timeout: self.timeout,
            limiter: &self.limiter,
        }
    }

    /// Sends with credentials; with UAA, a 401 fetches a new token and the request is
    /// sent once more (a 401 means the director refused it, so even a trigger is safe to
    /// repeat).
    async fn send<F>(&self, call: &Call, build: F) -> Result<Answer, InventoryError>
    where
        F: Fn(RequestBuilder) -> RequestBuilder + Send + Sync,
    {
        let header = self.auth.header(&self.http, &self.endpoint()).await?;
        let answer = self
            .http
            .send(call, |r| build(authorize(r, &header)))
            .await?;
        if answer.code() != 401 || !self.auth.is_uaa() {
            return Ok(answer);
        }
        self.auth.forget().await;
        let header = self.auth.header(&self.http, &self.endpoint()).await?;
        self.http.send(call, |r| build(authorize(r, &header))).await
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, InventoryError> {
        let answer = self.send(&Call::get(self.http.url(path)), |r| r).await?;
        if !answer.status.is_success() {
            return Err(answer.failure());
        }
        answer.json()
    }

    async fn uploaded(&self) -> Result<Uploaded, InventoryError> {
        let releases: Vec<Release> = self.get("/releases").await?;
        let stemcells: Vec<Stemcell> = self.get("/stemcells").await?;
        Ok(Uploaded::new(&releases, &stemcells))
    }

    async fn locked(&self, deployment: &str) -> Result<bool, InventoryError> {
        let locks: Vec<Lock> = self.get("/locks").await?;
        Ok(locks.iter().any(|l| l.holds(deployment)))
    }

    fn deployment_path(name: &str) -> Result<String, InventoryError> {
        Ok(format!("/deployments/{}", segment(name)?))
    }

    /// The task a long-running request started, from the director's redirect. A 404 means
    /// the deployment is gone only on routes that name it.
    fn started(
        answer: &Answer,
        kind: &str,
        id: &InstanceId,
        names_deployment: bool,
    ) -> Result<Triggered, InventoryError> {
        match answer.code() {
            300..=399 => {
                let task = answer.location().and_then(wire::task_id).ok_or_else(|| {
                    InventoryError::ambiguous(format!(
                        "{}: the director redirected to `{}`, which names no task; the \
                             request may have started one",
                        answer.what(),
                        answer.location().unwrap_or("")
                    ))
                })?;
                Ok(Triggered::Accepted(Operation {
                    instance: id.clone(),
                    data: json!({ "BoshTaskID": task, "OperationType": kind }),
                }))
            }
            404 if names_deployment => Ok(Triggered::Deleted),
            409 => Ok(Triggered::Busy),
            _ => Err(answer.failure()),
        }
    }

    /// The deployment as `GET /deployments` lists it, with the versions the director
    /// resolved (`latest` in a manifest is listed as the version it stands for).
    async fn listed(&self, name: &str) -> Result<Option<Deployment>, InventoryError> {
        let deployments: Vec<Deployment> = self.get("/deployments").await?;
        Ok(deployments.into_iter().find(|d| d.name == name))
    }

    /// Whether a task of the deployment is queued or running: a task the director has
    /// queued does not hold the lock yet, and a trigger whose answer was lost must see it.
    async fn task_running(&self, name: &str) -> Result<bool, InventoryError> {
        let call = Call::get(self.http.url("/tasks"));
        let answer = self
            .send(&call, |r| {
                r.query(&[
                    ("deployment", name),
                    ("state", "queued,processing,cancelling"),
                    ("verbose", "2"),
                    ("limit", "1"),
                ])
            })
            .await?;
        if !answer.status.is_success() {
            return Err(answer.failure());
        }
        let tasks: Vec<Task> = answer.json()?;
        Ok(!tasks.is_empty())
    }

    async fn update(&self, instance: &Instance) -> Result<Triggered, InventoryError> {
        let name = &instance.id.0;
        let answer = self
            .send(
                &Call::get(self.http.url(&Self::deployment_path(name)?)),
                |r| r,
            )
            .await?;
        match answer.code() {
            200..=299 => {}
            404 => return Ok(Triggered::Deleted),
            _ => return Err(answer.failure()),
        }
        let deployed: DeploymentManifest = answer.json()?;
        let Some(text) = deployed.manifest.filter(|m| !m.trim().is_empty()) else {
            return Ok(Triggered::Orphaned);
        };
        if self.locked(name).await? {
            return Ok(Triggered::Busy);
        }
        let uploaded = self.uploaded().await?;
        // Judged on the versions the director resolved, so that a manifest asking for
        // `latest` is not redeployed on every run.
        match self.listed(name).await? {
            None => return Ok(Triggered::Deleted),
            Some(listed) if !uploaded.outdated(&listed) => return Ok(Triggered::UpToDate),
            Some(_) => {}
        }
        let rewritten = manifest::rewrite(&text, &uploaded)
            .map_err(|e| InventoryError::permanent(format!("deployment `{name}`: {e}")))?;
        let Some(rewritten) = rewritten else {
            return Ok(Triggered::UpToDate);
        };
        let call = Call::write(Method::POST, self.http.url("/deployments"));
        let answer = self
            .send(&call, |r| {
                r.header(reqwest::header::CONTENT_TYPE, "text/yaml")
                    .body(rewritten.clone())
            })
            .await?;
        Self::started(&answer, "upgrade", &instance.id, false)
    }

    async fn recreate(&self, instance: &Instance, fix: bool) -> Result<Triggered, InventoryError> {
        let name = &instance.id.0;
        if self.locked(name).await? {
            return Ok(Triggered::Busy);
        }
        let path = format!("{}/jobs/%2A", Self::deployment_path(name)?);
        let call = Call::write(Method::PUT, self.http.url(&path));
        let fix = if fix { "true" } else { "false" };
        let answer = self
            .send(&call, |r| {
                r.query(&[("state", "recreate"), ("fix", fix)])
                    .header(reqwest::header::CONTENT_TYPE, "text/yaml")
                    .body("")
            })
            .await?;
        Self::started(&answer, "recreate", &instance.id, true)
    }
}

fn instance(deployment: &Deployment, uploaded: &Uploaded, locked: bool) -> Instance {
    let mut instance = Instance::new(deployment.name.clone(), PLAN);
    instance.deployment_name = Some(deployment.name.clone());
    instance.state = if locked {
        InstanceState::Deploying
    } else {
        InstanceState::Provisioned
    };
    instance.update_available = uploaded.outdated(deployment);
    instance
}

impl Inventory for DirectorInventory {
    fn limits_each_request(&self) -> bool {
        true
    }

    async fn list(&self, selection: Selection) -> Result<Vec<Instance>, InventoryError> {
        let deployments: Vec<Deployment> = self.get("/deployments").await?;
        let deployments: Vec<Deployment> = deployments
            .into_iter()
            .filter(|d| self.pattern.matches(&d.name))
            .collect();
        let uploaded = self.uploaded().await?;
        // Older directors do not say whether a deployment is locked; their locks do.
        let locks: Vec<Lock> = if deployments.iter().any(|d| d.locked.is_none()) {
            self.get("/locks").await?
        } else {
            Vec::new()
        };
        Ok(deployments
            .iter()
            .map(|d| {
                let locked = d
                    .locked
                    .unwrap_or_else(|| locks.iter().any(|l| l.holds(&d.name)));
                instance(d, &uploaded, locked)
            })
            .filter(|i| selection.matches(i))
            .collect())
    }

    /// Read back after a trigger whose answer was lost: a queued or running task of the
    /// deployment makes it busy, so the trigger is not sent twice.
    async fn instance(&self, id: &InstanceId) -> Result<Option<Instance>, InventoryError> {
        let Some(mut found) = self
            .list(Selection::All)
            .await?
            .into_iter()
            .find(|i| &i.id == id)
        else {
            return Ok(None);
        };
        if self.task_running(&id.0).await? {
            found.state = InstanceState::Deploying;
        }
        Ok(Some(found))
    }

    /// `force` has no meaning here: a director knows no owner who blocks updates.
    async fn trigger(
        &self,
        instance: &Instance,
        action: Action,
        _force: bool,
    ) -> Result<Triggered, InventoryError> {
        match action {
            Action::Update => self.update(instance).await,
            Action::Recreate { fix } => self.recreate(instance, fix).await,
        }
    }

    async fn poll(&self, operation: &Operation) -> Result<OperationState, InventoryError> {
        let id = operation.bosh_task()?;
        let task: Task = self.get(&format!("/tasks/{id}")).await?;
        wire::operation_state(&task).ok_or_else(|| {
            InventoryError::permanent(format!(
                "bosh task {id} is in state `{}`, which this client does not know",
                task.state
            ))
        })
    }
}
