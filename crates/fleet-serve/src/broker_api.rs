//! The broker management API (shared/BROKER_API.md) over the embedded broker: what our
//! updater's broker inventory and the On-Demand Service Broker's errands speak.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use fleet_broker::{
    Answer, Broker, BrokerError, Filter, InstanceView, OperationStatus, State as InstanceState,
};
use fleet_director::DirectorError;
use fleet_director::model::TaskState;

type Params = std::collections::HashMap<String, String>;

pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/mgmt/service_instances", get(list))
        .route("/mgmt/service_instances/{id}", get(one).patch(trigger))
        .route(
            "/v2/service_instances/{id}/last_operation",
            get(last_operation),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "NotFound", "no such route") })
        .layer(from_fn(api_version))
        .with_state(broker)
}

/// The response header that carries a broker error code where no body may go.
const BROKER_ERROR: &str = "x-broker-error";

fn error(status: StatusCode, code: &str, description: impl Into<String>) -> Response {
    (
        status,
        Json(json!({ "error": code, "description": description.into() })),
    )
        .into_response()
}

fn failure(e: BrokerError) -> Response {
    match e {
        BrokerError::NotFound(what) => error(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{what} not found"),
        ),
        e @ BrokerError::ForeignOperation { .. } => {
            error(StatusCode::BAD_REQUEST, "BadRequest", e.to_string())
        }
        other => {
            tracing::error!(error = %other, "broker request failed");
            let status = match &other {
                BrokerError::Store(e) | BrokerError::Director(DirectorError::Store(e)) => {
                    crate::ready::store_failure_status(e)
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error(status, "InternalError", other.to_string())
        }
    }
}

/// Clients send `X-Broker-API-Version: 2.x` (the On-Demand Service Broker's errands and
/// this project's updater do): any 2.x is accepted, another version refused with 412, and
/// a request without the header with 400, as the Open Service Broker API allows.
async fn api_version(request: Request, next: Next) -> Response {
    let Some(v) = request.headers().get("x-broker-api-version") else {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the X-Broker-API-Version header is missing; this broker speaks 2.x",
        );
    };
    if !v.to_str().is_ok_and(|v| v.trim().starts_with("2.")) {
        return error(
            StatusCode::PRECONDITION_FAILED,
            "UnsupportedApiVersion",
            "X-Broker-API-Version must be 2.x",
        );
    }
    next.run(request).await
}

fn view_json(view: &InstanceView) -> Value {
    let last_operation = view.last_task.as_ref().map(|task| {
        let state = match task.state {
            TaskState::Queued | TaskState::Processing | TaskState::Cancelling => "in progress",
            TaskState::Done => "succeeded",
            TaskState::Error | TaskState::Cancelled => "failed",
        };
        json!({
            "type": task.description,
            "state": state,
            "description": task.result,
            "updated_at": task.finished_at.or(task.started_at).map(fleet_clock::rfc3339_unix),
        })
    });
    json!({
        "service_instance_id": view.instance.id,
        "plan_id": view.instance.plan_id,
        "space_guid": view.instance.space_guid,
        "deployment_name": view.deployment,
        "state": match view.state {
            InstanceState::Provisioned => "provisioned",
            InstanceState::Deploying => "deploying",
            InstanceState::Failed => "failed",
        },
        "update_available": view.update_available,
        "maintenance_updates_blocked": view.instance.maintenance_updates_blocked,
        "last_operation": last_operation,
        "context": placement_json(&view.instance.placement),
    })
}

/// The instance's organization and space as an Open Service Broker `context` gives them;
/// `null` without a placement.
fn placement_json(placement: &fleet_broker::Placement) -> Value {
    if placement.organization_name.is_none() && placement.space_name.is_none() {
        return Value::Null;
    }
    json!({
        "organization_name": placement.organization_name,
        "space_name": placement.space_name,
    })
}

/// The listing parameters beside `state` this broker filters by, as the On-Demand Service
/// Broker's do: `cf_org` and `cf_space` (names), and `plan` (a plan id).
const CRITERIA: &[&str] = &["cf_org", "cf_space", "plan"];

fn meets(view: &InstanceView, params: &Params) -> bool {
    let placement = &view.instance.placement;
    CRITERIA.iter().all(|key| {
        let Some(wanted) = params.get(*key) else {
            return true;
        };
        let have = match *key {
            "cf_org" => placement.organization_name.as_ref(),
            "cf_space" => placement.space_name.as_ref(),
            _ => Some(&view.instance.plan_id),
        };
        have == Some(wanted)
    })
}

async fn list(State(broker): State<Arc<Broker>>, Query(params): Query<Params>) -> Response {
    if let Some(unknown) = params
        .keys()
        .find(|k| *k != "state" && !CRITERIA.contains(&k.as_str()))
    {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "listing parameter '{unknown}' is not one this broker filters by (state, \
                 cf_org, cf_space, plan)"
            ),
        );
    }
    let filter = match params.get("state").map(String::as_str) {
        None => Filter::All,
        Some(name) => match Filter::named(name) {
            Some(filter) => filter,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("state '{name}' is not one of outdated, provisioned, failed, all"),
                );
            }
        },
    };
    match broker.instances_in(filter).await {
        Ok(views) => Json(Value::Array(
            views
                .iter()
                .filter(|v| meets(v, &params))
                .map(view_json)
                .collect(),
        ))
        .into_response(),
        Err(e) => failure(e),
    }
}

async fn one(State(broker): State<Arc<Broker>>, Path(id): Path<String>) -> Response {
    match broker.instance(&id).await {
        Ok(Some(view)) => Json(view_json(&view)).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("service instance {id} not found"),
        ),
        Err(e) => failure(e),
    }
}

async fn trigger(
    State(broker): State<Arc<Broker>>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let _ = headers;
    let body = match body.trim() {
        "" => Value::Object(Default::default()),
        text => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => value,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the body must be a JSON object like {\"plan_id\": \"...\", \"context\": {...}}",
                );
            }
        },
    };
    // The instance's own plan, as the listing gave it: a trigger changes no plan.
    if let Some(asked) = body.get("plan_id") {
        let recorded = match broker.plan_of(&id).await {
            Ok(plan) => plan,
            Err(e) => return failure(e),
        };
        if let Some(plan) = recorded
            && asked.as_str() != Some(plan.as_str())
        {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "PlanMismatch",
                format!(
                    "service instance {id} is on plan '{plan}', not {asked}: an upgrade or \
                     recreate keeps an instance's plan"
                ),
            );
        }
    }
    let force = params.get("force").is_some_and(|f| f == "true");
    let kind = params.get("operation_type").map(String::as_str);
    let answer = match kind {
        Some("upgrade") => broker.upgrade(&id, force).await,
        // Recreate as the management API defines it: unresponsive agents too.
        Some("recreate") => broker.recreate(&id, force, true).await,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "operation_type must be upgrade or recreate, got '{}'",
                    other.unwrap_or("")
                ),
            );
        }
    };
    match answer {
        Ok(Answer::Accepted { task }) => (
            StatusCode::ACCEPTED,
            Json(json!({ "BoshTaskID": task, "OperationType": kind.unwrap_or_default() })),
        )
            .into_response(),
        Ok(Answer::UpToDate) => StatusCode::NO_CONTENT.into_response(),
        Ok(Answer::Deleted) => error(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("service instance {id} not found"),
        ),
        Ok(Answer::Busy) => error(
            StatusCode::CONFLICT,
            "OperationInProgress",
            format!("another operation is in progress on service instance {id}"),
        ),
        Ok(Answer::Orphaned) => error(
            StatusCode::GONE,
            "Orphaned",
            format!("the deployment of service instance {id} does not exist"),
        ),
        // 204, so that clients that know only 204 (the ODB errands) count the instance
        // as skipped and go on. HTTP sends no body with a 204, so the error code that
        // tells blocked from up to date travels in a header.
        Ok(Answer::Blocked) => (
            StatusCode::NO_CONTENT,
            [(BROKER_ERROR, "MaintenanceUpdatesBlocked")],
        )
            .into_response(),
        Err(e) => failure(e),
    }
}

async fn last_operation(
    State(broker): State<Arc<Broker>>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Response {
    let Some(operation) = params.get("operation") else {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the `operation` parameter is missing",
        );
    };
    let Some(task) = serde_json::from_str::<Value>(operation)
        .ok()
        .and_then(|v| v.get("BoshTaskID").and_then(Value::as_u64))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the `operation` parameter must be the JSON of an accepted operation, with BoshTaskID",
        );
    };
    match broker.last_operation(&id, task).await {
        Ok(status) => {
            let (state, description) = match status {
                OperationStatus::InProgress => ("in progress", format!("bosh task {task} running")),
                OperationStatus::Succeeded => ("succeeded", format!("bosh task {task} done")),
                OperationStatus::Failed(reason) => ("failed", reason),
            };
            Json(json!({ "state": state, "description": description })).into_response()
        }
        Err(e) => failure(e),
    }
}
