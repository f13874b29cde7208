//! `/configs`, `/cloud_configs`, `/releases` and `/stemcells`. Only the cloud config is a
//! config here; other types are refused by name.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, code};
use super::query::Params;
use super::wire::{self, MAX_YAML_BYTES, require_yaml, yaml_limits};
use fleet_director::Director;
use fleet_director::model::CloudConfig;

const NAME: &str = "default";

fn config_json(config: &CloudConfig) -> Value {
    json!({
        "id": config.version.to_string(),
        "name": NAME,
        "type": "cloud",
        "content": config.text,
        "created_at": "",
        "team": null,
        "current": true,
    })
}

/// The CLI sends `name=` when no name is given: the default config.
fn is_default(name: &str) -> bool {
    name.is_empty() || name == NAME
}

fn only_cloud(kind: Option<&str>, name: Option<&str>) -> ApiResult<()> {
    if let Some(kind) = kind
        && kind != "cloud"
    {
        return Err(ApiError::bad_request(
            code::GENERIC,
            format!("config type '{kind}' is not supported; only 'cloud' is"),
        ));
    }
    if let Some(name) = name
        && !is_default(name)
    {
        return Err(ApiError::bad_request(
            code::GENERIC,
            format!("config name '{name}' is not supported; only '{NAME}' is"),
        ));
    }
    Ok(())
}

pub async fn list(
    State(director): State<Director>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let kind = params.get("type").map(String::as_str);
    let name = params.get("name").map(String::as_str);
    if kind.is_some_and(|k| k != "cloud") || name.is_some_and(|n| !is_default(n)) {
        return Ok(Json(json!([])));
    }
    let configs: Vec<Value> = director
        .cloud_config()
        .await?
        .iter()
        .map(config_json)
        .collect();
    Ok(Json(Value::Array(configs)))
}

#[derive(Deserialize)]
pub struct ConfigBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    content: String,
}

fn check_yaml(text: &str) -> ApiResult<()> {
    fleet_yaml::load(text, yaml_limits(MAX_YAML_BYTES))
        .map(|_| ())
        .map_err(|e| {
            ApiError::bad_request(
                code::GENERIC,
                format!(
                    "Config must be valid YAML: line {} column {}: {}",
                    e.at.line, e.at.column, e.message
                ),
            )
        })
}

fn parse_body(body: &str) -> ApiResult<ConfigBody> {
    let parsed: ConfigBody = serde_json::from_str(body).map_err(|e| {
        ApiError::bad_request(
            code::GENERIC,
            format!("the body must be JSON with `type`, `name` and `content`: {e}"),
        )
    })?;
    only_cloud(Some(&parsed.kind), parsed.name.as_deref())?;
    check_yaml(&parsed.content)?;
    Ok(parsed)
}

pub async fn update(State(director): State<Director>, body: String) -> ApiResult<Response> {
    let parsed = parse_body(&body)?;
    director.update_cloud_config(&parsed.content).await?;
    let current = director
        .cloud_config()
        .await?
        .ok_or_else(|| ApiError::bad_request(code::GENERIC, "the cloud config was not kept"))?;
    Ok((StatusCode::CREATED, Json(config_json(&current))).into_response())
}

pub async fn diff(State(director): State<Director>, body: String) -> ApiResult<Json<Value>> {
    let parsed = parse_body(&body)?;
    let old = director
        .cloud_config()
        .await?
        .map(|c| c.text)
        .unwrap_or_default();
    Ok(Json(json!({ "diff": wire::diff(&old, &parsed.content) })))
}

pub async fn cloud_configs(
    State(director): State<Director>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    only_cloud(None, params.get("name").map(String::as_str))?;
    let configs: Vec<Value> = director
        .cloud_config()
        .await?
        .iter()
        .map(|c| json!({ "properties": c.text, "created_at": "" }))
        .collect();
    Ok(Json(Value::Array(configs)))
}

/// `update-cloud-config` asks for the difference first.
pub async fn diff_cloud_config(
    State(director): State<Director>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: String,
) -> ApiResult<Json<Value>> {
    require_yaml(&headers)?;
    only_cloud(None, params.get("name").map(String::as_str))?;
    check_yaml(&body)?;
    let old = director
        .cloud_config()
        .await?
        .map(|c| c.text)
        .unwrap_or_default();
    Ok(Json(json!({ "diff": wire::diff(&old, &body) })))
}

pub async fn update_cloud_config(
    State(director): State<Director>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: String,
) -> ApiResult<Response> {
    require_yaml(&headers)?;
    only_cloud(None, params.get("name").map(String::as_str))?;
    check_yaml(&body)?;
    director.update_cloud_config(&body).await?;
    Ok(StatusCode::CREATED.into_response())
}

pub async fn releases(State(director): State<Director>) -> ApiResult<Json<Value>> {
    let deployed = director.deployed_versions().await?;
    let mut by_name: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for release in director.releases().await? {
        let in_use = deployed
            .releases
            .contains(&(release.name.clone(), release.version.clone()));
        by_name
            .entry(release.name.clone())
            .or_default()
            .push(json!({
                "version": release.version,
                "commit_hash": "",
                "uncommitted_changes": false,
                "currently_deployed": in_use,
                "job_names": release.jobs.iter().map(|j| j.name.clone()).collect::<Vec<_>>(),
            }));
    }
    Ok(Json(Value::Array(
        by_name
            .into_iter()
            .map(|(name, versions)| json!({ "name": name, "release_versions": versions }))
            .collect(),
    )))
}

pub async fn stemcells(State(director): State<Director>) -> ApiResult<Json<Value>> {
    let deployed = director.deployed_versions().await?;
    let stemcells: Vec<Value> = director
        .stemcells()
        .await?
        .into_iter()
        .map(|s| {
            let users: Vec<Value> = deployed
                .stemcells
                .iter()
                .filter(|(os, version, _)| *os == s.os && *version == s.version)
                .map(|(_, _, deployment)| json!({ "name": deployment }))
                .collect();
            json!({
                "name": s.name,
                "operating_system": s.os,
                "version": s.version,
                "cid": format!("stemcell-{}-{}", s.os, s.version),
                "cpi": "",
                "deployments": users,
                "api_version": 2,
            })
        })
        .collect();
    Ok(Json(Value::Array(stemcells)))
}
