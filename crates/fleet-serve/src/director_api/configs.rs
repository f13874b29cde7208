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

fn config_json(config: &CloudConfig, current: bool) -> Value {
    json!({
        "id": config.version.to_string(),
        "name": NAME,
        "type": "cloud",
        "content": config.text,
        "created_at": created_at(config.created_at),
        "team": null,
        "current": current,
    })
}

/// `2024-05-01 12:00:00 UTC`, as the director writes a config's or an orphan's time.
pub fn created_at(unix: Option<u64>) -> String {
    unix.map(|secs| {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        humantime::format_rfc3339_seconds(at)
            .to_string()
            .replace('T', " ")
            .replace('Z', " UTC")
    })
    .unwrap_or_default()
}

/// The config of version `id`, with whether it is the one in force.
async fn version(director: &Director, id: &str) -> ApiResult<(CloudConfig, bool)> {
    let all = director.cloud_configs().await?;
    let latest = all.first().map(|c| c.version);
    id.parse::<u64>()
        .ok()
        .and_then(|v| all.into_iter().find(|c| c.version == v))
        .map(|c| {
            let current = Some(c.version) == latest;
            (c, current)
        })
        .ok_or_else(|| ApiError::not_found(code::GENERIC, format!("Config {id} not found")))
}

pub async fn one(
    State(director): State<Director>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult<Json<Value>> {
    let (config, current) = version(&director, &id).await?;
    Ok(Json(config_json(&config, current)))
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

/// `bosh configs` asks for the latest of each (`latest=true`); `--recent=N` for the last
/// N versions (`latest=false&limit=N`).
pub async fn list(
    State(director): State<Director>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let kind = params.get("type").map(String::as_str);
    let name = params.get("name").map(String::as_str);
    if kind.is_some_and(|k| k != "cloud") || name.is_some_and(|n| !is_default(n)) {
        return Ok(Json(json!([])));
    }
    let limit = match params.get("limit") {
        None => usize::MAX,
        Some(l) => l.parse::<usize>().map_err(|_| {
            ApiError::bad_request(
                code::VALIDATION_INVALID_TYPE,
                format!("limit must be a number, got '{l}'"),
            )
        })?,
    };
    let latest_only = params.get("latest").is_none_or(|l| l != "false");
    let all = director.cloud_configs().await?;
    let shown = if latest_only { 1 } else { limit };
    let configs: Vec<Value> = all
        .iter()
        .take(shown)
        .enumerate()
        .map(|(i, c)| config_json(c, i == 0))
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
    /// The version the client last saw: the update is refused when another came since.
    #[serde(default)]
    expected_latest_id: Option<String>,
}

/// What `bosh diff-config` compares: two kept versions, or a new content with the one in
/// force.
#[derive(Deserialize)]
#[serde(untagged)]
enum DiffBody {
    Versions { from: VersionRef, to: VersionRef },
    Content(ConfigBody),
}

#[derive(Deserialize)]
struct VersionRef {
    id: String,
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
    if let Some(expected) = &parsed.expected_latest_id {
        let latest = director
            .cloud_config()
            .await?
            .map(|c| c.version.to_string())
            .unwrap_or_default();
        if *expected != latest {
            return Ok((
                StatusCode::PRECONDITION_FAILED,
                Json(json!({ "latest_id": latest, "expected_latest_id": expected })),
            )
                .into_response());
        }
    }
    director.update_cloud_config(&parsed.content).await?;
    let current = director
        .cloud_config()
        .await?
        .ok_or_else(|| ApiError::bad_request(code::GENERIC, "the cloud config was not kept"))?;
    Ok((StatusCode::CREATED, Json(config_json(&current, true))).into_response())
}

pub async fn diff(State(director): State<Director>, body: String) -> ApiResult<Json<Value>> {
    let parsed: DiffBody = serde_json::from_str(&body).map_err(|e| {
        ApiError::bad_request(
            code::GENERIC,
            format!(
                "the body must be JSON with `type`, `name` and `content`, or `from` and `to` ids: {e}"
            ),
        )
    })?;
    match parsed {
        DiffBody::Versions { from, to } => {
            let (from, _) = version(&director, &from.id).await?;
            let (to, _) = version(&director, &to.id).await?;
            Ok(Json(json!({ "diff": wire::diff(&from.text, &to.text) })))
        }
        DiffBody::Content(parsed) => {
            only_cloud(Some(&parsed.kind), parsed.name.as_deref())?;
            check_yaml(&parsed.content)?;
            let current = director.cloud_config().await?;
            let old = current
                .as_ref()
                .map(|c| c.text.as_str())
                .unwrap_or_default();
            let mut answer = json!({ "diff": wire::diff(old, &parsed.content) });
            if let Some(current) = current {
                answer["from"] = json!({ "id": current.version.to_string() });
            }
            Ok(Json(answer))
        }
    }
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
        .map(|c| json!({ "properties": c.text, "created_at": created_at(c.created_at) }))
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

/// A stemcell as `bosh stemcells` reads it, with the deployments that use it.
pub fn stemcell_json(s: &fleet_director::model::Stemcell, users: &[Value]) -> Value {
    json!({
        "name": s.name,
        "operating_system": s.os,
        "version": s.version,
        "cid": format!("stemcell-{}-{}", s.os, s.version),
        "cpi": "",
        "deployments": users,
        "api_version": 2,
    })
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
            stemcell_json(&s, &users)
        })
        .collect();
    Ok(Json(Value::Array(stemcells)))
}
