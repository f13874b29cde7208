//! `/deployments/:name/scans` and `/deployments/:name/problems`: cloud check as `bosh
//! cck` drives it (scan, list, resolve); the resurrector's `scan_and_fix` and
//! `/resurrection` (`bosh update-resurrection`).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Acting;
use super::deployments::redirect;
use super::error::{ApiError, ApiResult, code};
use fleet_director::Director;
use fleet_director::cloud_check::{Problem, Resolution};

pub async fn scan(Acting(director): Acting, Path(name): Path<String>) -> ApiResult<Response> {
    Ok(redirect(&director.scan(&name).await?))
}

fn problem_json(problem: &Problem) -> Value {
    let resolutions: Vec<Value> = problem
        .kind
        .resolutions()
        .iter()
        .map(|r| json!({ "name": r.name(), "plan": r.plan() }))
        .collect();
    json!({
        "id": problem.id,
        "type": problem.kind.name(),
        "description": problem.description,
        "instance_group": problem.group,
        "data": { "instance_id": problem.instance_id, "vm_cid": problem.vm_cid },
        "resolutions": resolutions,
    })
}

pub async fn list(Acting(director): Acting, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let problems = director.problems(&name).await?;
    Ok(Json(Value::Array(
        problems.iter().map(problem_json).collect(),
    )))
}

/// What `bosh cck` sends: a resolution name per problem id; `null` is the one `--auto`
/// applies. Its `max_in_flight_overrides` are not needed: VMs are recreated as the
/// deployment's update settings say.
#[derive(Deserialize)]
pub struct ResolveBody {
    resolutions: BTreeMap<String, Option<String>>,
}

pub async fn resolve(
    Acting(director): Acting,
    Path(name): Path<String>,
    body: String,
) -> ApiResult<Response> {
    let body: ResolveBody = serde_json::from_str(&body).map_err(|e| {
        ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("the body must be {{\"resolutions\": {{PROBLEM_ID: RESOLUTION}}}}: {e}"),
        )
    })?;
    let problems = director.problems(&name).await?;
    let mut choices = Vec::new();
    for (id, resolution) in &body.resolutions {
        let number: u64 = id.parse().map_err(|_| {
            ApiError::bad_request(
                code::VALIDATION_INVALID_TYPE,
                format!("resolutions: problem id '{id}' is not a number"),
            )
        })?;
        let resolution = match resolution {
            Some(name) => Resolution::parse(name).ok_or_else(|| {
                ApiError::bad_request(
                    code::VALIDATION_INVALID_TYPE,
                    format!(
                        "resolutions.{id}: '{name}' is not a resolution (ignore, reboot_vm, recreate_vm, delete_vm_reference)"
                    ),
                )
            })?,
            None => problems
                .iter()
                .find(|p| p.id == number)
                .map_or(Resolution::RecreateVm, |p| p.kind.auto_resolution()),
        };
        choices.push((number, resolution));
    }
    Ok(redirect(&director.resolve(&name, &choices).await?))
}

/// What a health monitor sends: instance ids (or indexes) by instance group.
#[derive(Deserialize)]
pub struct ScanAndFixBody {
    jobs: BTreeMap<String, Vec<String>>,
}

pub async fn scan_and_fix(
    Acting(director): Acting,
    Path(name): Path<String>,
    body: String,
) -> ApiResult<Response> {
    let body: ScanAndFixBody = serde_json::from_str(&body).map_err(|e| {
        ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("the body must be {{\"jobs\": {{INSTANCE_GROUP: [INSTANCE_ID]}}}}: {e}"),
        )
    })?;
    Ok(redirect(&director.scan_and_fix(&name, &body.jobs).await?))
}

pub async fn resurrection(State(director): State<Director>) -> ApiResult<Json<Value>> {
    let paused = director.resurrection_paused().await?;
    Ok(Json(json!({ "resurrection": !paused })))
}

#[derive(Deserialize)]
pub struct ResurrectionBody {
    resurrection_paused: bool,
}

pub async fn update_resurrection(
    State(director): State<Director>,
    body: String,
) -> ApiResult<Json<Value>> {
    let body: ResurrectionBody = serde_json::from_str(&body).map_err(|e| {
        ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("the body must be {{\"resurrection_paused\": true|false}}: {e}"),
        )
    })?;
    director
        .set_resurrection_paused(body.resurrection_paused)
        .await?;
    Ok(Json(json!({})))
}

/// The per-instance switch BOSH retired: resurrection is turned off for instances by a
/// resurrection config now.
pub async fn instance_resurrection() -> ApiError {
    ApiError {
        status: axum::http::StatusCode::GONE,
        code: code::GENERIC,
        description: "This endpoint has been removed. Please use \
                      `bosh update-config --type resurrection` to turn resurrection off for \
                      instance groups, or `bosh ignore` for an instance."
            .into(),
    }
}
