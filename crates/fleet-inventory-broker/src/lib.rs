//! A service broker's management API over HTTP (`shared/BROKER_API.md`), which our own
//! broker serves and which an On-Demand Service Broker speaks in part.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::{Method, RequestBuilder};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use fleet_http_client::{Answer, Call, Endpoint, HttpClient, segment};
use fleet_rollout::RequestLimiter;
use fleet_rollout::inventory::{
    Action, Criteria, Instance, InstanceId, Inventory, InventoryError, LastOperationState,
    Operation, OperationState, Selection, Triggered, admits,
};
use fleet_secret::Secret;

mod settings;

pub use settings::ServiceBroker;

/// The OSB version whose management extensions the API describes; servers accept any 2.x.
const API_VERSION: &str = "2.13";

pub struct BrokerInventory {
    http: HttpClient,
    username: String,
    password: Secret,
    /// Set once the broker refused the state filter: later listings of the run go
    /// without it at once, rather than failing on the broker (and in its log) each time.
    filter_refused: AtomicBool,
}

impl BrokerInventory {
    /// # Errors
    /// A permanent error when the endpoint or its CA cannot be used.
    pub fn new(
        config: &ServiceBroker,
        limiter: RequestLimiter,
    ) -> Result<BrokerInventory, InventoryError> {
        let http = HttpClient::new(&Endpoint {
            url: &config.api_endpoint,
            ca: config.ca.as_deref(),
            skip_ssl_validation: config.skip_ssl_validation,
            timeout: config.timeout,
            limiter: &limiter,
        })?;
        Ok(BrokerInventory {
            http,
            username: config.username.clone(),
            password: config.password.clone(),
            filter_refused: AtomicBool::new(false),
        })
    }

    fn authorize(&self, request: RequestBuilder) -> RequestBuilder {
        request
            .basic_auth(&self.username, Some(self.password.expose()))
            .header("X-Broker-API-Version", API_VERSION)
    }

    fn instance_path(id: &InstanceId) -> Result<String, InventoryError> {
        Ok(format!("/mgmt/service_instances/{}", segment(&id.0)?))
    }

    /// Every instance when `filter` is `None`, else those the server selects (if it
    /// filters at all).
    async fn fetch(&self, filter: Option<Selection>) -> Result<Answer, InventoryError> {
        let call = Call::get(self.http.url("/mgmt/service_instances"));
        self.http
            .send(&call, |request| {
                let request = self.authorize(request);
                match filter {
                    Some(selection) => request.query(&[("state", selection.as_str())]),
                    None => request,
                }
            })
            .await
    }

    async fn list_all(&self) -> Result<Vec<Instance>, InventoryError> {
        let answer = self.fetch(None).await?;
        if !answer.status.is_success() {
            return Err(answer.failure());
        }
        listing(&answer)
    }
}

/// A listing's instances. An ODB whose instance lister is Cloud Foundry answers `null`
/// when it has none: an empty fleet, not a broken answer.
fn listing(answer: &Answer) -> Result<Vec<Instance>, InventoryError> {
    Ok(answer.json::<Option<Vec<Instance>>>()?.unwrap_or_default())
}

/// The `last_operation` answer; `description` is optional in OSB.
#[derive(Deserialize)]
struct LastOperationAnswer {
    state: LastOperationState,
    #[serde(default)]
    description: Option<String>,
}

/// The trigger's body: the plan and the platform context the listing gave, with absent
/// context fields left out rather than sent as null.
fn trigger_body(instance: &Instance) -> Value {
    let mut context = Map::new();
    if let Some(space_guid) = &instance.space_guid {
        context.insert("space_guid".into(), Value::String(space_guid.clone()));
    }
    json!({ "plan_id": instance.plan_id, "context": context })
}

/// `operation_type`, and whether `force=true` goes along.
///
/// The API has no field for `fix`: its `recreate` is defined as `bosh recreate --fix`, so
/// VMs with unresponsive agents are recreated whatever `fix` says.
fn trigger_query(action: Action, force: bool) -> Vec<(&'static str, &'static str)> {
    let operation_type = match action {
        Action::Update => "upgrade",
        Action::Recreate { .. } => "recreate",
    };
    let mut query = vec![("operation_type", operation_type)];
    if force {
        query.push(("force", "true"));
    }
    query
}

/// What a trigger's status means; `None` for statuses the API does not give a meaning.
/// A blocked instance answers 204 with the error (so that clients that know only 204 go
/// on), or 422 with it, as other brokers do.
fn triggered(status: u16, error_code: Option<&str>) -> Option<Triggered> {
    match (status, error_code) {
        (204 | 422, Some("MaintenanceUpdatesBlocked")) => Some(Triggered::Blocked),
        (204, _) => Some(Triggered::UpToDate),
        (404, _) => Some(Triggered::Deleted),
        (409, _) => Some(Triggered::Busy),
        (410, _) => Some(Triggered::Orphaned),
        _ => None,
    }
}

fn operation_state(answer: LastOperationAnswer, retry_after: Option<Duration>) -> OperationState {
    match answer.state {
        LastOperationState::InProgress => OperationState::InProgress { retry_after },
        LastOperationState::Succeeded => OperationState::Succeeded,
        LastOperationState::Failed => OperationState::Failed {
            reason: answer
                .description
                .filter(|d| !d.trim().is_empty())
                .unwrap_or_else(|| "the broker reported the operation failed".to_string()),
        },
    }
}

impl Inventory for BrokerInventory {
    fn limits_each_request(&self) -> bool {
        true
    }

    /// Sends the filter, and filters again here because a server may ignore it. A plain
    /// ODB with the CF lister refuses unknown filters instead of ignoring them, so a
    /// filtered listing that fails with a status other than an authentication failure or
    /// 429 is asked again without the filter before it counts as failed.
    async fn list(&self, selection: Selection) -> Result<Vec<Instance>, InventoryError> {
        let instances =
            if selection == Selection::All || self.filter_refused.load(Ordering::Relaxed) {
                self.list_all().await?
            } else {
                let answer = self.fetch(Some(selection)).await?;
                if answer.status.is_success() {
                    listing(&answer)?
                } else if matches!(answer.code(), 401 | 403 | 429) {
                    // Not a refused filter: credentials, or a server asking for less load,
                    // which the engine's retry gives it.
                    return Err(answer.failure());
                } else {
                    tracing::debug!(
                        status = %answer.status,
                        "the broker refused the state filter; listing every instance from now on"
                    );
                    self.filter_refused.store(true, Ordering::Relaxed);
                    self.list_all().await?
                }
            };
        Ok(instances
            .into_iter()
            .filter(|instance| selection.matches(instance))
            .collect())
    }

    /// Sends the criteria as the listing's query, as ODB's errand sends its canary
    /// selection, and judges again here those this side can (a broker may ignore them).
    async fn list_matching(&self, criteria: &Criteria) -> Result<Vec<Instance>, InventoryError> {
        let call = Call::get(self.http.url("/mgmt/service_instances"));
        let answer = self
            .http
            .send(&call, |request| self.authorize(request).query(criteria))
            .await?;
        if !answer.status.is_success() {
            return Err(answer.failure());
        }
        Ok(listing(&answer)?
            .into_iter()
            .filter(|instance| admits(criteria, instance))
            .collect())
    }

    /// Asks the single-instance route, and on 404 searches the whole listing: a plain
    /// ODB has no such route, and its 404 for an unknown route looks like ours for an
    /// unknown instance.
    async fn instance(&self, id: &InstanceId) -> Result<Option<Instance>, InventoryError> {
        let call = Call::get(self.http.url(&Self::instance_path(id)?));
        let answer = self
            .http
            .send(&call, |request| self.authorize(request))
            .await?;
        match answer.code() {
            200..=299 => answer.json().map(Some),
            404 => Ok(self
                .list_all()
                .await?
                .into_iter()
                .find(|instance| &instance.id == id)),
            _ => Err(answer.failure()),
        }
    }

    async fn trigger(
        &self,
        instance: &Instance,
        action: Action,
        force: bool,
    ) -> Result<Triggered, InventoryError> {
        let call = Call::write(
            Method::PATCH,
            self.http.url(&Self::instance_path(&instance.id)?),
        );
        let query = trigger_query(action, force);
        let body = trigger_body(instance);
        let answer = self
            .http
            .send(&call, |request| {
                self.authorize(request).query(&query).json(&body)
            })
            .await?;
        if answer.code() == 202 {
            return Ok(Triggered::Accepted(Operation {
                instance: instance.id.clone(),
                data: answer.json_or_empty(),
            }));
        }
        let error_code = answer.error_code();
        triggered(answer.code(), error_code.as_deref()).ok_or_else(|| answer.failure())
    }

    async fn poll(&self, operation: &Operation) -> Result<OperationState, InventoryError> {
        let path = format!(
            "/v2/service_instances/{}/last_operation",
            segment(&operation.instance.0)?
        );
        let call = Call::get(self.http.url(&path));
        let data = operation.data.to_string();
        let answer = self
            .http
            .send(&call, |request| {
                self.authorize(request)
                    .query(&[("operation", data.as_str())])
            })
            .await?;
        match answer.code() {
            200 => Ok(operation_state(answer.json()?, answer.retry_after())),
            404 => Ok(OperationState::Deleted),
            410 => Ok(OperationState::Orphaned),
            _ => Err(answer.failure()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trigger_statuses_mean_what_the_api_says() {
        assert_eq!(triggered(204, None), Some(Triggered::UpToDate));
        assert_eq!(triggered(404, None), Some(Triggered::Deleted));
        assert_eq!(triggered(409, None), Some(Triggered::Busy));
        assert_eq!(triggered(410, None), Some(Triggered::Orphaned));
        assert_eq!(
            triggered(422, Some("MaintenanceUpdatesBlocked")),
            Some(Triggered::Blocked)
        );
        assert_eq!(
            triggered(204, Some("MaintenanceUpdatesBlocked")),
            Some(Triggered::Blocked)
        );
    }

    #[test]
    fn other_client_errors_have_no_meaning_of_their_own() {
        assert_eq!(triggered(422, Some("UnprocessableEntity")), None);
        assert_eq!(triggered(422, None), None);
        assert_eq!(triggered(400, None), None);
        assert_eq!(triggered(200, None), None);
    }

    #[test]
    fn the_body_carries_plan_and_space_and_leaves_out_what_is_unknown() {
        let mut instance = Instance::new("a", "small");
        assert_eq!(
            trigger_body(&instance),
            json!({"plan_id": "small", "context": {}})
        );
        instance.space_guid = Some("space-1".into());
        assert_eq!(
            trigger_body(&instance),
            json!({"plan_id": "small", "context": {"space_guid": "space-1"}})
        );
    }

    #[test]
    fn the_query_names_the_operation_and_force_only_when_given() {
        assert_eq!(
            trigger_query(Action::Update, false),
            vec![("operation_type", "upgrade")]
        );
        assert_eq!(
            trigger_query(Action::Recreate { fix: false }, true),
            vec![("operation_type", "recreate"), ("force", "true")]
        );
    }

    #[test]
    fn a_failed_operation_gives_the_brokers_description_as_reason() {
        let answer = LastOperationAnswer {
            state: LastOperationState::Failed,
            description: Some("bosh task 7 failed".into()),
        };
        assert_eq!(
            operation_state(answer, None),
            OperationState::Failed {
                reason: "bosh task 7 failed".into()
            }
        );
    }

    #[test]
    fn an_operation_in_progress_keeps_the_servers_pace() {
        let answer: LastOperationAnswer =
            serde_json::from_str(r#"{"state": "in progress", "extra": 1}"#).unwrap();
        assert_eq!(
            operation_state(answer, Some(Duration::from_secs(20))),
            OperationState::InProgress {
                retry_after: Some(Duration::from_secs(20))
            }
        );
    }

    #[test]
    fn an_odb_listing_decodes_with_the_apis_defaults() {
        let instances: Vec<Instance> = serde_json::from_str(
            r#"[{"service_instance_id": "a", "plan_id": "p", "space_guid": "s", "x": 1}]"#,
        )
        .unwrap();
        assert_eq!(instances.len(), 1);
        assert!(instances[0].update_available);
        assert!(Selection::Outdated.matches(&instances[0]));
    }
}
