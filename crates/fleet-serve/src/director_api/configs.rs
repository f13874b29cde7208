//! `/configs`, `/cloud_configs` and `/stemcells`. Cloud, runtime and resurrection
//! configs are configs here; other types are refused by name.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, code};
use super::query::{Params, number};
use super::wire::{self, MAX_YAML_BYTES, require_yaml, yaml_limits};
use fleet_director::Director;
use fleet_director::model::NamedConfig;

const NAME: &str = "default";

/// One version of a config of any kind, as `/configs` shows it.
struct Entry {
    id: u64,
    kind: &'static str,
    name: String,
    text: String,
    created_at: Option<u64>,
    current: bool,
}

fn entry_json(e: &Entry) -> Value {
    json!({
        "id": e.id.to_string(),
        "name": e.name,
        "type": e.kind,
        "content": e.text,
        "created_at": created_at(e.created_at),
        "team": null,
        "current": e.current,
    })
}

/// `2024-05-01 12:00:00 UTC`, as the director writes a config's or an orphan's time.
pub fn created_at(unix: Option<u64>) -> String {
    unix.map(|secs| {
        fleet_clock::rfc3339_unix(secs)
            .replace('T', " ")
            .replace('Z', " UTC")
    })
    .unwrap_or_default()
}

/// Every version of every config, newest first; the newest of each kind and name is
/// the current one.
async fn entries(director: &Director) -> ApiResult<Vec<Entry>> {
    let mut all: Vec<Entry> = director
        .cloud_configs()
        .await?
        .into_iter()
        .enumerate()
        .map(|(i, c)| Entry {
            id: c.version,
            kind: "cloud",
            name: NAME.to_string(),
            text: c.text,
            created_at: c.created_at,
            current: i == 0,
        })
        .collect();
    let runtime = director.runtime_configs().await?;
    all.extend(named("runtime", runtime));
    all.extend(named(
        "resurrection",
        director.resurrection_configs().await?,
    ));
    all.sort_by_key(|e| std::cmp::Reverse(e.id));
    Ok(all)
}

/// Versions of named configs, newest first; the first of each name is its current one.
fn named(kind: &'static str, versions: Vec<NamedConfig>) -> Vec<Entry> {
    let mut seen = std::collections::BTreeSet::new();
    versions
        .into_iter()
        .map(|c| Entry {
            id: c.version,
            kind,
            current: seen.insert(c.name.clone()),
            name: c.name,
            text: c.text,
            created_at: c.created_at,
        })
        .collect()
}

/// The config of version `id`.
async fn version(director: &Director, id: &str) -> ApiResult<Entry> {
    let wanted = id.parse::<u64>().ok();
    entries(director)
        .await?
        .into_iter()
        .find(|e| Some(e.id) == wanted)
        .ok_or_else(|| ApiError::not_found(code::GENERIC, format!("Config {id} not found")))
}

pub async fn one(
    State(director): State<Director>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(entry_json(&version(&director, &id).await?)))
}

/// The CLI sends `name=` when no name is given: the default config.
fn name_or_default(name: Option<&str>) -> String {
    name.filter(|n| !n.is_empty()).unwrap_or(NAME).to_string()
}

/// The kinds of config this director keeps, and why it keeps no other.
fn kind_of(kind: &str) -> ApiResult<&'static str> {
    match kind {
        "cloud" => Ok("cloud"),
        "runtime" => Ok("runtime"),
        "resurrection" => Ok("resurrection"),
        "cpi" => Err(ApiError::bad_request(
            code::GENERIC,
            "config type 'cpi' is not supported: this director has one CPI, the simulated cloud",
        )),
        other => Err(ApiError::bad_request(
            code::GENERIC,
            format!(
                "config type '{other}' is not supported; 'cloud', 'runtime' and 'resurrection' are"
            ),
        )),
    }
}

fn only_cloud(kind: Option<&str>, name: Option<&str>) -> ApiResult<()> {
    if let Some(kind) = kind
        && kind_of(kind)? != "cloud"
    {
        return Err(ApiError::bad_request(
            code::GENERIC,
            format!("config type '{kind}' has no cloud config route; use /configs"),
        ));
    }
    let name = name_or_default(name);
    if name != NAME {
        return Err(ApiError::bad_request(
            code::GENERIC,
            format!("cloud config name '{name}' is not supported; only '{NAME}' is"),
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
    let name = params
        .get("name")
        .map(String::as_str)
        .filter(|n| !n.is_empty());
    let limit = number(&params, "limit")?.map_or(usize::MAX, |l| l as usize);
    let latest_only = params.get("latest").is_none_or(|l| l != "false");
    let configs: Vec<Value> = entries(&director)
        .await?
        .iter()
        .filter(|e| kind.is_none_or(|k| k == e.kind))
        .filter(|e| name.is_none_or(|n| n == e.name))
        .filter(|e| !latest_only || e.current)
        .take(limit)
        .map(entry_json)
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

/// The current config of a kind and name.
async fn current(director: &Director, kind: &str, name: &str) -> ApiResult<Option<Entry>> {
    Ok(entries(director)
        .await?
        .into_iter()
        .find(|e| e.current && e.kind == kind && e.name == name))
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

/// The body of `POST /configs`, with its kind; the kind is checked before the content.
fn parse_body(body: &str) -> ApiResult<(ConfigBody, &'static str)> {
    let parsed: ConfigBody = serde_json::from_str(body).map_err(|e| {
        ApiError::bad_request(
            code::GENERIC,
            format!("the body must be JSON with `type`, `name` and `content`: {e}"),
        )
    })?;
    let kind = kind_of(&parsed.kind)?;
    check_yaml(&parsed.content)?;
    Ok((parsed, kind))
}

pub async fn update(State(director): State<Director>, body: String) -> ApiResult<Response> {
    let (parsed, kind) = parse_body(&body)?;
    let name = name_or_default(parsed.name.as_deref());
    if kind == "cloud" {
        only_cloud(None, Some(&name))?;
    }
    if let Some(expected) = &parsed.expected_latest_id {
        let latest = current(&director, kind, &name)
            .await?
            .map(|e| e.id.to_string())
            .unwrap_or_default();
        if *expected != latest {
            return Ok((
                StatusCode::PRECONDITION_FAILED,
                Json(json!({ "latest_id": latest, "expected_latest_id": expected })),
            )
                .into_response());
        }
    }
    let version = match kind {
        "cloud" => director.update_cloud_config(&parsed.content).await?,
        "resurrection" => {
            director
                .update_resurrection_config(&name, &parsed.content)
                .await?
        }
        _ => {
            director
                .update_runtime_config(&name, &parsed.content)
                .await?
        }
    };
    let kept = version_entry(&director, version).await?;
    Ok((StatusCode::CREATED, Json(entry_json(&kept))).into_response())
}

async fn version_entry(director: &Director, version: u64) -> ApiResult<Entry> {
    entries(director)
        .await?
        .into_iter()
        .find(|e| e.id == version)
        .ok_or_else(|| ApiError::bad_request(code::GENERIC, "the config was not kept"))
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
            let from = version(&director, &from.id).await?;
            let to = version(&director, &to.id).await?;
            Ok(Json(json!({ "diff": wire::diff(&from.text, &to.text) })))
        }
        DiffBody::Content(parsed) => {
            let kind = kind_of(&parsed.kind)?;
            let name = name_or_default(parsed.name.as_deref());
            check_yaml(&parsed.content)?;
            let now = current(&director, kind, &name).await?;
            let old = now.as_ref().map(|c| c.text.as_str()).unwrap_or_default();
            let mut answer = json!({ "diff": wire::diff(old, &parsed.content) });
            if let Some(now) = now {
                answer["from"] = json!({ "id": now.id.to_string() });
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
