//! `/releases` and `/packages/matches`: listing, inspecting, uploading and deleting
//! releases as `bosh releases`, `inspect-release`, `upload-release` and `delete-release`
//! ask. An upload's tarball is read and checked before any task starts, so a malformed
//! one is refused at once, naming the file and field.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Acting;
use super::deployments::redirect;
use super::error::{ApiError, ApiResult, code};
use super::query::{Params, strict_flag};
use super::wire::require_yaml;
use fleet_director::Director;
use fleet_director::model::{Archived, Release};

/// The director's code for a release archive it cannot read.
const RELEASE_INVALID: u32 = 30_001;

pub async fn list(State(director): State<Director>) -> ApiResult<Json<Value>> {
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
                "commit_hash": release.commit_hash.clone().unwrap_or_default(),
                "uncommitted_changes": release.uncommitted_changes,
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

fn archive_json(name: &str, archive: Option<&Archived>) -> Value {
    json!({
        "name": name,
        "version": archive.map(|a| a.version.as_str()),
        "fingerprint": archive.map(|a| a.fingerprint.as_str()),
        "sha1": archive.map(|a| a.sha1.as_str()),
        "blobstore_id": archive.map(|a| a.blob.as_str()),
    })
}

/// One version's jobs and packages (`bosh inspect-release`), or the versions of the
/// release without `version`.
pub async fn one(
    State(director): State<Director>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let releases: Vec<Release> = director
        .releases()
        .await?
        .into_iter()
        .filter(|r| r.name == name)
        .collect();
    let not_found = |what: String| ApiError::not_found(code::GENERIC, format!("{what} not found"));
    if releases.is_empty() {
        return Err(not_found(format!("Release '{name}'")));
    }
    let Some(version) = params.get("version") else {
        let versions: Vec<&str> = releases.iter().map(|r| r.version.as_str()).collect();
        return Ok(Json(json!({ "name": name, "versions": versions })));
    };
    let release = releases
        .iter()
        .find(|r| &r.version == version)
        .ok_or_else(|| not_found(format!("Release version '{name}/{version}'")))?;
    let jobs: Vec<Value> = release
        .jobs
        .iter()
        .map(|j| {
            let mut job = archive_json(&j.name, j.archive.as_ref());
            job["consumes"] = json!([]);
            job["provides"] = json!([]);
            job
        })
        .collect();
    let packages: Vec<Value> = release
        .packages
        .iter()
        .map(|p| {
            let mut package = archive_json(&p.name, p.archive.as_ref());
            package["dependencies"] = json!(p.dependencies);
            package["compiled_packages"] = json!([]);
            package
        })
        .collect();
    Ok(Json(json!({ "jobs": jobs, "packages": packages })))
}

/// `POST /releases` where a release's code would run on this machine itself.
pub async fn refused_on_host() -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        code: code::GENERIC,
        description: "this director's VMs are plain processes of this machine: an uploaded \
                      release's jobs, packaging scripts and templates would run on it as the \
                      user serve runs as. Make the VMs containers (`vms: containers` in the \
                      fleet definition, as root with bubblewrap), or allow it with \
                      `serve.releases_on_host: true`"
            .into(),
    }
}

/// `bosh upload-release`: the tarball is the body (`application/x-compressed`). It is
/// written to a file under `spool` as it arrives and read from there, its package
/// archives to files of their own, so that what memory holds does not grow with the
/// release.
pub async fn upload(
    Acting(director): Acting,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Body,
    unpacking: fleet_release::UnpackLimits,
    spool: std::path::PathBuf,
) -> ApiResult<Response> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::bad_request(
            code::GENERIC,
            "uploading a release from a URL is not supported: download the tarball and \
             upload the file",
        ));
    }
    if strict_flag(&params, "rebase")? {
        return Err(ApiError::bad_request(
            code::GENERIC,
            "rebase is not supported: create the release with its final version and upload it",
        ));
    }
    let fix = strict_flag(&params, "fix")?;
    let tarball = match spooled(body, &spool).await {
        Ok(tarball) => tarball,
        // Past the upload limit: the limits layer answers in the API's shape, naming it.
        Err(Spooling::TooLarge) => return Ok(StatusCode::PAYLOAD_TOO_LARGE.into_response()),
        Err(Spooling::Unread(e)) => {
            return Err(ApiError::bad_request(
                code::GENERIC,
                format!("the release tarball could not be read: {e}"),
            ));
        }
        Err(Spooling::Unwritten(e)) => {
            tracing::error!(spool = %spool.display(), error = %e, "cannot spool an upload");
            return Err(ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: code::GENERIC,
                description: format!("the release tarball could not be kept while it is read: {e}"),
            });
        }
    };
    // Inflating and hashing a large release is CPU and disk work: kept off the async
    // workers. Within bounds checked while it inflates: a bomb is refused before it takes
    // the disk, and nothing of it is held in memory.
    let archive = tokio::task::spawn_blocking(move || {
        fleet_release::from_file_within(tarball.path(), &unpacking, &spool)
    })
    .await
    .map_err(|e| ApiError::bad_request(code::GENERIC, format!("reading the release failed: {e}")))?
    .map_err(|e| ApiError::bad_request(RELEASE_INVALID, e.to_string()))?;
    let task = director.upload_release_archive(archive, fix).await?;
    Ok(redirect(&task))
}

/// Why an upload's body could not be spooled.
enum Spooling {
    /// Past the upload limit.
    TooLarge,
    /// The client's body broke off.
    Unread(axum::Error),
    /// The spool could not be written (a full disk).
    Unwritten(std::io::Error),
}

/// The body, written to a new file under `spool` as it arrives (removed when dropped).
async fn spooled(
    mut body: Body,
    spool: &std::path::Path,
) -> Result<tempfile::NamedTempFile, Spooling> {
    use http_body_util::BodyExt;
    use tokio::io::AsyncWriteExt;
    let spool = spool.to_path_buf();
    let file = tokio::task::spawn_blocking(move || {
        tempfile::Builder::new()
            .prefix("upload-")
            .tempfile_in(spool)
    })
    .await
    .map_err(|e| Spooling::Unwritten(std::io::Error::other(e)))?
    .map_err(Spooling::Unwritten)?;
    let mut writer = tokio::fs::File::from_std(file.reopen().map_err(Spooling::Unwritten)?);
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if is_length_limit(&e) => return Err(Spooling::TooLarge),
            Err(e) => return Err(Spooling::Unread(e)),
        };
        if let Ok(data) = frame.into_data() {
            writer.write_all(&data).await.map_err(Spooling::Unwritten)?;
        }
    }
    writer.flush().await.map_err(Spooling::Unwritten)?;
    Ok(file)
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// `bosh delete-release NAME[/VERSION]`.
pub async fn delete(
    Acting(director): Acting,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Response> {
    strict_flag(&params, "force")?;
    let task = director
        .delete_release(&name, params.get("version").map(String::as_str))
        .await?;
    Ok(redirect(&task))
}

/// The fingerprints, of the packages a release manifest lists, that the director has:
/// `bosh upload-release` leaves their archives out.
pub async fn matches(
    State(director): State<Director>,
    headers: HeaderMap,
    body: String,
) -> ApiResult<Json<Vec<String>>> {
    require_yaml(&headers)?;
    let manifest = fleet_release::parse_manifest(&body).map_err(|problems| {
        ApiError::bad_request(
            RELEASE_INVALID,
            format!("release manifest: {}", problems.join("; ")),
        )
    })?;
    let fingerprints: Vec<String> = manifest
        .packages
        .iter()
        .map(|p| p.archive.fingerprint.clone())
        .collect();
    Ok(Json(director.matching_packages(&fingerprints).await?))
}

/// No compiled package is matched by fingerprint: the CLI then sends every one, and the
/// upload keeps them.
pub async fn matches_compiled(headers: HeaderMap) -> ApiResult<Json<Vec<String>>> {
    require_yaml(&headers)?;
    Ok(Json(Vec::new()))
}

/// `POST /releases/export` (`bosh export-release`): `{deployment_name, release_name,
/// release_version, stemcell_os, stemcell_version, jobs: [{name}]}`; the task's result
/// output names the blob to download from `/resources/ID`.
pub async fn export(Acting(director): Acting, body: String) -> ApiResult<Response> {
    let body: Value = serde_json::from_str(&body).map_err(|e| {
        ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("the body is not JSON: {e}"),
        )
    })?;
    let field = |key: &str| -> Result<String, ApiError> {
        body.get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                ApiError::bad_request(
                    code::VALIDATION_MISSING_FIELD,
                    format!("`{key}` is missing"),
                )
            })
    };
    let request = fleet_director::release_export::ExportRequest {
        deployment: field("deployment_name")?,
        release: field("release_name")?,
        version: field("release_version")?,
        stemcell: format!("{}/{}", field("stemcell_os")?, field("stemcell_version")?),
        jobs: body
            .get("jobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|j| j.get("name").and_then(Value::as_str).map(str::to_string))
            .collect(),
    };
    Ok(redirect(&director.export_release(request).await?))
}
