//! `/tasks`, `/task/:id` and `/locks`: following, reading and cancelling tasks.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, code};
use super::query::{Params, number};
use super::wire;
use crate::authorize::Visible;
use fleet_director::Director;
use fleet_director::model::{Task, TaskFilter, TaskState};

pub async fn list(
    State(director): State<Director>,
    visible: Option<axum::Extension<Visible>>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let visible = visible.map(|v| v.0);
    // A state no task can have matches nothing, as on the director.
    let states: Option<Vec<TaskState>> = params.get("state").map(|s| {
        s.split(',')
            .filter_map(|name| {
                TaskState::ALL
                    .into_iter()
                    .find(|t| t.as_str() == name.trim())
            })
            .collect()
    });
    let verbose = params.get("verbose").map_or(1, |v| v.parse().unwrap_or(1));
    let limit = number(&params, "limit")?.map(|l| l as usize);
    let filter = TaskFilter {
        deployment: params.get("deployment").cloned(),
        states,
        // Tasks that only read are listed with `verbose=2` alone, as the director does.
        read_only: verbose >= 2,
        context_id: params.get("context_id").cloned(),
        // A team user's tasks are those of its deployments: the limit counts those.
        limit: if visible.is_some() { None } else { limit },
    };
    let tasks: Vec<Value> = director
        .tasks(filter)
        .await?
        .iter()
        .filter(|t| Visible::shows(visible.as_ref(), t.deployment.as_deref()))
        .take(limit.unwrap_or(usize::MAX))
        .map(wire::task)
        .collect();
    Ok(Json(Value::Array(tasks)))
}

async fn find(director: &Director, id: u64) -> ApiResult<Task> {
    director
        .task(id)
        .await?
        .ok_or_else(|| ApiError::task_not_found(id))
}

pub async fn one(State(director): State<Director>, Path(id): Path<u64>) -> ApiResult<Json<Value>> {
    Ok(Json(wire::task(&find(&director, id).await?)))
}

/// The start of `Range: bytes=N-`, the only form clients use to tail output.
fn range_start(headers: &HeaderMap) -> ApiResult<Option<usize>> {
    let Some(value) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.strip_suffix('-'))
        .and_then(|v| v.parse::<usize>().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad_request(code::GENERIC, "Range must be of the form 'bytes=N-'"))
}

pub async fn output(
    State(director): State<Director>,
    Path(id): Path<u64>,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let task = find(&director, id).await?;
    let kind = params.get("type").map(String::as_str).unwrap_or("event");
    let text = match kind {
        "event" => wire::event_log(&task, &director.events(id).await?),
        "result" => {
            if task.state.is_running() {
                String::new()
            } else {
                director.result_output(&task).await?
            }
        }
        "debug" => wire::debug_log(
            &task,
            &director.events(id).await?,
            &director.trace(id).await?,
        ),
        "cpi" => wire::cpi_log(&director.trace(id).await?),
        "none" => String::new(),
        other => {
            return Err(ApiError::bad_request(
                code::GENERIC,
                format!("output type '{other}' is not one of event, result, debug, cpi, none"),
            ));
        }
    };
    let bytes = text.into_bytes();
    let plain = [(header::CONTENT_TYPE, "text/plain")];
    match range_start(&headers)? {
        None if bytes.is_empty() => Ok(StatusCode::NO_CONTENT.into_response()),
        None => Ok((plain, bytes).into_response()),
        // Nothing new since the offset.
        Some(start) if start >= bytes.len() => Ok((
            StatusCode::RANGE_NOT_SATISFIABLE,
            [(header::CONTENT_RANGE, format!("bytes */{}", bytes.len()))],
        )
            .into_response()),
        Some(start) => {
            let range = format!("bytes {start}-{}/{}", bytes.len() - 1, bytes.len());
            Ok((
                StatusCode::PARTIAL_CONTENT,
                [
                    (header::CONTENT_TYPE, "text/plain".to_string()),
                    (header::CONTENT_RANGE, range),
                ],
                bytes[start..].to_vec(),
            )
                .into_response())
        }
    }
}

pub async fn cancel(State(director): State<Director>, Path(id): Path<u64>) -> ApiResult<Response> {
    find(&director, id).await?;
    director.cancel(id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// What `bosh cancel-tasks` sends: every field may be left out.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelFilter {
    deployment: Option<String>,
    states: Option<Vec<String>>,
    types: Option<Vec<String>>,
}

/// `bosh cancel-tasks`: cancels the tasks of the given states (queued ones by default),
/// types (all by default) and deployment.
pub async fn cancel_many(
    State(director): State<Director>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let filter: CancelFilter = if body.iter().all(u8::is_ascii_whitespace) {
        CancelFilter::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(
                code::VALIDATION_INVALID_TYPE,
                format!("the cancel request is not {{deployment, states, types}}: {e}"),
            )
        })?
    };
    let names = filter.states.unwrap_or_else(|| vec!["queued".to_string()]);
    let mut states = Vec::new();
    for name in &names {
        match name.as_str() {
            "queued" => states.push(TaskState::Queued),
            "processing" => states.push(TaskState::Processing),
            other => {
                return Err(ApiError::bad_request(
                    code::VALIDATION_INVALID_TYPE,
                    format!(
                        "states: '{other}' is not a state a task can be cancelled in (queued, processing)"
                    ),
                ));
            }
        }
    }
    let tasks = director
        .tasks(TaskFilter {
            deployment: filter.deployment,
            states: Some(states),
            read_only: true,
            context_id: None,
            limit: None,
        })
        .await?;
    for task in tasks {
        let kind = wire::task_type(&task);
        if filter
            .types
            .as_ref()
            .is_some_and(|types| !types.iter().any(|t| t == kind))
        {
            continue;
        }
        // A task that ended meanwhile has nothing left to cancel.
        if let Err(e) = director.cancel(task.id).await {
            tracing::debug!(task = task.id, error = %e, "not cancelled");
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn locks(State(director): State<Director>) -> ApiResult<Json<Value>> {
    // Locks here last as long as their task; the director shows an expiry, so a minute
    // from now is shown, as a lock that is renewed would be.
    let expires = director.unix_now() + 60;
    let locks: Vec<Value> = director
        .locks()
        .await?
        .into_iter()
        .filter_map(|(name, task)| {
            let deployment = name.strip_prefix("lock:deployment:")?;
            Some(json!({
                "type": "deployment",
                "resource": [deployment],
                "timeout": format!("{expires}.000000"),
                "task_id": task.to_string(),
            }))
        })
        .collect();
    Ok(Json(Value::Array(locks)))
}
