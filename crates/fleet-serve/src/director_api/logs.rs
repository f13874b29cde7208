//! `bosh logs` and the downloads it and `bosh run-errand --download-logs` make: a fetch
//! of instances' logs as a task whose result is a bundle's id, and the bundle itself at
//! `/resources/ID`.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::Acting;
use super::deployments::{exists, redirect};
use super::error::{ApiError, ApiResult, code};
use super::query::Params;
use fleet_director::Director;
use fleet_director::logs::LogRequest;

/// `GET /deployments/NAME/jobs/GROUP/ID/logs?type=job,agent&filters=a,b`; `*` for every
/// group or instance.
pub async fn fetch(
    Acting(director): Acting,
    Path((name, group, instance)): Path<(String, String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    let request = LogRequest::parse(
        params.get("type").map(String::as_str),
        params.get("filters").map(String::as_str),
    )
    .map_err(|e| ApiError::bad_request(code::VALIDATION_INVALID_TYPE, e.to_string()))?;
    exists(&director, &name).await?;
    let task = director
        .fetch_logs(&name, Some(&group), Some(&instance), request)
        .await?;
    Ok(redirect(&task))
}

/// A kept log bundle, as the `bosh` CLI downloads it (and checks it against the digest
/// it was given).
pub async fn resource(
    State(director): State<Director>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let Some(bytes) = director.log_bundle(&id).await? else {
        return Err(ApiError::not_found(
            code::GENERIC,
            format!("Resource '{id}' not found"),
        ));
    };
    Ok((
        [(header::CONTENT_TYPE, "application/x-gzip")],
        Body::from(bytes),
    )
        .into_response())
}
