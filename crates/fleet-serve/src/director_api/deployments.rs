//! `/deployments`: list, deploy, diff, manifest, delete, instances and VMs, and the
//! state changes of groups and instances (recreate, restart, stop, start).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Acting;
use super::error::{ApiError, ApiResult, code};
use super::query::{Params, count, flag, present};
use super::wire::{self, check_manifest, require_yaml};
use crate::authorize::Visible;
use fleet_director::manifest::Manifest;
use fleet_director::model::{DesiredState, InstanceRecord, Stemcell, Task};
use fleet_director::{DeployOptions, Director, RecreateOptions, Target};

/// Long operations answer with the task to follow, as the director does.
pub fn redirect(task: &Task) -> Response {
    (
        StatusCode::FOUND,
        [(header::LOCATION, format!("/tasks/{}", task.id))],
    )
        .into_response()
}

/// 404 with the director's code for an unknown deployment, before a call whose own
/// not-found could mean something else (an instance).
pub(super) async fn exists(director: &Director, name: &str) -> ApiResult<()> {
    match director.deployment(name).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::deployment_not_found(name)),
    }
}

/// The releases and stemcells a deployed manifest names, stemcells by their uploaded
/// name when it is known.
fn versions(manifest: Option<&Manifest>, uploaded: &[Stemcell]) -> (Value, Value) {
    let Some(m) = manifest else {
        return (json!([]), json!([]));
    };
    let releases: Vec<Value> = m
        .releases
        .iter()
        .map(|r| json!({ "name": r.name, "version": r.version }))
        .collect();
    let stemcells: Vec<Value> = m
        .stemcells
        .iter()
        .map(|s| {
            let name = uploaded
                .iter()
                .find(|u| u.os == s.os && u.version == s.version)
                .map_or(s.os.as_str(), |u| u.name.as_str());
            json!({ "name": name, "version": s.version })
        })
        .collect();
    (json!(releases), json!(stemcells))
}

pub async fn list(
    State(director): State<Director>,
    visible: Option<axum::Extension<Visible>>,
) -> ApiResult<Json<Value>> {
    let uploaded = director.stemcells().await?;
    let teams = director.deployment_teams().await?;
    let visible = visible.map(|v| v.0);
    let mut out = Vec::new();
    for d in director.deployment_summaries().await? {
        if !Visible::shows(visible.as_ref(), Some(&d.record.name)) {
            continue;
        }
        let (releases, stemcells) = versions(d.manifest.as_ref(), &uploaded);
        out.push(json!({
            "name": d.record.name,
            "cloud_config": d.cloud_config.as_str(),
            "releases": releases,
            "stemcells": stemcells,
            "teams": teams.get(&d.record.name).cloned().unwrap_or_default(),
            "locked": d.locked,
        }));
    }
    Ok(Json(Value::Array(out)))
}

fn deploy_options(params: &Params) -> ApiResult<DeployOptions> {
    Ok(DeployOptions {
        recreate: flag(params, "recreate"),
        fix: flag(params, "fix"),
        skip_drain: present(params, "skip_drain"),
        canaries: count(params, "canaries")?,
        max_in_flight: count(params, "max_in_flight")?,
        dry_run: flag(params, "dry_run"),
        ..DeployOptions::default()
    })
}

pub async fn deploy(
    Acting(director): Acting,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: String,
) -> ApiResult<Response> {
    require_yaml(&headers)?;
    check_manifest(&body)?;
    let options = deploy_options(&params)?;
    let task = director.deploy(&body, options).await?;
    Ok(redirect(&task))
}

pub async fn diff(
    State(director): State<Director>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: String,
) -> ApiResult<Json<Value>> {
    require_yaml(&headers)?;
    let context = json!({
        "cloud_config_ids": director.cloud_config().await?.map(|c| vec![c.version.to_string()]).unwrap_or_default(),
        "runtime_config_ids": [],
    });
    // The director answers a manifest it cannot read with 200 and an `error`.
    if let Err(e) = check_manifest(&body) {
        return Ok(Json(
            json!({ "context": context, "diff": [], "error": e.description }),
        ));
    }
    let old = director
        .deployment(&name)
        .await?
        .and_then(|d| d.manifest)
        .unwrap_or_default();
    Ok(Json(
        json!({ "context": context, "diff": wire::diff(&old, &body) }),
    ))
}

/// `bosh variables`: each variable the config server keeps for the deployment, by id and
/// full name; never a value.
pub async fn variables(
    State(director): State<Director>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    director
        .deployment(&name)
        .await?
        .ok_or_else(|| ApiError::deployment_not_found(&name))?;
    let kept = director.variables(&name).await?;
    Ok(Json(Value::Array(
        kept.iter()
            .map(|(id, name)| json!({ "id": id, "name": name }))
            .collect(),
    )))
}

pub async fn manifest(
    State(director): State<Director>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = director
        .deployment(&name)
        .await?
        .ok_or_else(|| ApiError::deployment_not_found(&name))?;
    Ok(Json(
        json!({ "manifest": record.manifest.unwrap_or_default() }),
    ))
}

pub async fn delete(Acting(director): Acting, Path(name): Path<String>) -> ApiResult<Response> {
    exists(&director, &name).await?;
    Ok(redirect(&director.delete(&name).await?))
}

fn ips(instance: &InstanceRecord) -> Vec<&str> {
    instance
        .vm_networks
        .iter()
        .filter_map(|n| n.split_once('/').map(|(_, ip)| ip))
        .collect()
}

fn instance_json(instance: &InstanceRecord) -> Value {
    json!({
        "agent_id": instance.agent_id,
        "cid": instance.vm_cid,
        "job": instance.group,
        "index": instance.index,
        "id": instance.id,
        "az": instance.az,
        "ips": ips(instance),
        "vm_created_at": null,
        "expects_vm": instance.state != DesiredState::Detached,
    })
}

/// Without `format=full` the records alone; with it, a task that asks the agents.
async fn records(
    director: &Director,
    name: &str,
    params: &Params,
    vms_only: bool,
) -> ApiResult<Response> {
    exists(director, name).await?;
    if params.get("format").is_some_and(|f| f == "full") {
        return Ok(redirect(&director.instance_details(name, vms_only).await?));
    }
    let list: Vec<Value> = director
        .instances(name)
        .await?
        .iter()
        .filter(|i| !vms_only || i.vm_cid.is_some())
        .map(|i| {
            let mut v = instance_json(i);
            if vms_only {
                v["active"] = json!(true);
            }
            v
        })
        .collect();
    Ok(Json(Value::Array(list)).into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreBody {
    ignore: bool,
}

/// `bosh ignore` and `bosh unignore`.
pub async fn ignore(
    State(director): State<Director>,
    Path((name, group, instance)): Path<(String, String, String)>,
    body: String,
) -> ApiResult<Response> {
    let body: IgnoreBody = serde_json::from_str(&body).map_err(|e| {
        ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("the body must be {{\"ignore\": true|false}}: {e}"),
        )
    })?;
    exists(&director, &name).await?;
    director
        .set_ignore(&name, &group, &instance, body.ignore)
        .await?;
    Ok(StatusCode::OK.into_response())
}

pub async fn instances(
    Acting(director): Acting,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    records(&director, &name, &params, false).await
}

pub async fn vms(
    Acting(director): Acting,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    records(&director, &name, &params, true).await
}

pub async fn change_group(
    Acting(director): Acting,
    Path((name, group)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: String,
) -> ApiResult<Response> {
    let target = if group == "*" {
        Target::all()
    } else {
        Target::group(group)
    };
    change(&director, &name, target, &params, &body).await
}

pub async fn change_instance(
    Acting(director): Acting,
    Path((name, group, instance)): Path<(String, String, String)>,
    Query(params): Query<Params>,
    body: String,
) -> ApiResult<Response> {
    change(
        &director,
        &name,
        Target::instance(group, instance),
        &params,
        &body,
    )
    .await
}

async fn change(
    director: &Director,
    name: &str,
    target: Target,
    params: &Params,
    body: &str,
) -> ApiResult<Response> {
    exists(director, name).await?;
    if !body.trim().is_empty() {
        return Err(ApiError::bad_request(
            code::GENERIC,
            "a manifest with a state change is not supported: POST /deployments to change \
             the manifest, then change the state with an empty body",
        ));
    }
    // The target first, as the director answers: an unknown group or instance is 404
    // whatever else the request asks.
    director.check_target(name, &target).await?;
    let state = params.get("state").map(String::as_str).unwrap_or("");
    let skip_drain = present(params, "skip_drain");
    if state != "recreate" {
        // Refused rather than ignored: a dry run that stopped instances would be worse
        // than an error.
        for option in ["dry_run", "canaries", "max_in_flight"] {
            if params.contains_key(option) {
                return Err(ApiError::bad_request(
                    code::GENERIC,
                    format!("{option} is supported with state=recreate only"),
                ));
            }
        }
    }
    let task = match state {
        "recreate" => {
            director
                .recreate(
                    name,
                    RecreateOptions {
                        fix: flag(params, "fix"),
                        skip_drain: present(params, "skip_drain"),
                        canaries: count(params, "canaries")?,
                        max_in_flight: count(params, "max_in_flight")?,
                        dry_run: flag(params, "dry_run"),
                        target,
                    },
                )
                .await?
        }
        "restart" => director.restart(name, target, skip_drain).await?,
        "stopped" => {
            director
                .stop_instances(name, false, target, skip_drain)
                .await?
        }
        "detached" => {
            director
                .stop_instances(name, true, target, skip_drain)
                .await?
        }
        "started" => director.start_instances(name, target).await?,
        other => {
            return Err(ApiError::bad_request(
                code::GENERIC,
                format!(
                    "state '{other}' is not one of started, stopped, detached, restart, recreate"
                ),
            ));
        }
    };
    Ok(redirect(&task))
}
