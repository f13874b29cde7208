//! The embedded director's API in the BOSH director's wire format, so that the official
//! `bosh` CLI and our own director inventory can drive it. Handlers translate between
//! the wire and the [`Director`] facade; the rules live behind it.

mod cleanup;
mod configs;
mod deployments;
mod errands;
mod error;
mod events;
mod links;
mod logs;
mod problems;
mod query;
mod releases;
mod ssh;
mod tasks;
mod wire;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json};
use serde_json::{Value, json};

use crate::auth::SignedIn;
pub use error::{ApiError, code};
use fleet_director::Director;

/// The director acting for the request's signed-in user: the tasks it starts name them.
pub struct Acting(pub Director);

impl axum::extract::FromRequestParts<Director> for Acting {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        director: &Director,
    ) -> Result<Self, Self::Rejection> {
        let user = parts.extensions.get::<SignedIn>().map(|s| s.0.as_str());
        // The client's grouping of its tasks, kept as it was sent.
        let context = match parts.headers.get("x-bosh-context-id") {
            None => None,
            Some(v) => match v.to_str() {
                Ok(v) if v.len() <= CONTEXT_ID_MAX => Some(v).filter(|v| !v.is_empty()),
                _ => {
                    return Err(ApiError::bad_request(
                        code::GENERIC,
                        format!(
                            "X-Bosh-Context-Id must be printable text of at most {CONTEXT_ID_MAX} characters"
                        ),
                    ));
                }
            },
        };
        let mut acting = director.acting_for(user).in_context(context);
        if let Some(teams) = parts.extensions.get::<crate::authorize::TeamsActing>() {
            acting = acting.for_teams(teams.0.clone());
        }
        Ok(Acting(acting))
    }
}

/// The longest `X-Bosh-Context-Id` taken (the ODB sends a UUID).
const CONTEXT_ID_MAX: usize = 256;

/// Paths that need no credentials: `/info` tells clients how to sign in.
pub const OPEN_PATHS: &[&str] = &["/info"];

/// Whether releases uploaded through the API are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uploads {
    /// Taken, spooled to files under `spool` while they are read and kept.
    Taken { spool: std::path::PathBuf },
    /// The fleet's VMs are plain processes of this machine, and the configuration does
    /// not allow what such a release runs there.
    RefusedOnHost,
}

pub fn router(
    director: Director,
    uploads: Uploads,
    unpacking: fleet_release::UnpackLimits,
) -> Router {
    let upload = match uploads {
        Uploads::Taken { spool } => post(move |acting, query, headers, body| {
            releases::upload(acting, query, headers, body, unpacking, spool)
        }),
        Uploads::RefusedOnHost => post(releases::refused_on_host),
    };
    Router::new()
        .route("/info", get(info))
        .route(
            "/deployments",
            get(deployments::list).post(deployments::deploy),
        )
        .route(
            "/deployments/{name}",
            get(deployments::manifest).delete(deployments::delete),
        )
        .route("/deployments/{name}/diff", post(deployments::diff))
        .route("/deployments/{name}/instances", get(deployments::instances))
        .route("/deployments/{name}/vms", get(deployments::vms))
        .route("/deployments/{name}/variables", get(deployments::variables))
        .route("/deployments/{name}/errands", get(errands::list))
        .route(
            "/deployments/{name}/errands/{errand}/runs",
            post(errands::run),
        )
        .route(
            "/deployments/{name}/instance_groups/{group}/{instance}/ignore",
            put(deployments::ignore),
        )
        .route("/deployments/{name}/scans", post(problems::scan))
        .route(
            "/deployments/{name}/scan_and_fix",
            put(problems::scan_and_fix),
        )
        .route(
            "/deployments/{name}/jobs/{group}/{id}/resurrection",
            put(problems::instance_resurrection),
        )
        .route(
            "/resurrection",
            get(problems::resurrection).put(problems::update_resurrection),
        )
        .route("/deployments/{name}/ssh", post(ssh::ssh))
        .route(
            "/deployments/{name}/problems",
            get(problems::list).put(problems::resolve),
        )
        .route(
            "/deployments/{name}/jobs/{group}",
            put(deployments::change_group),
        )
        .route(
            "/deployments/{name}/jobs/{group}/{instance}",
            put(deployments::change_instance),
        )
        .route(
            "/deployments/{name}/jobs/{group}/{instance}/logs",
            get(logs::fetch),
        )
        .route("/resources/{id}", get(logs::resource))
        .route("/tasks", get(tasks::list))
        .route("/tasks/cancel", post(tasks::cancel_many))
        .route("/tasks/{id}", get(tasks::one))
        .route("/tasks/{id}/output", get(tasks::output))
        .route("/task/{id}", delete(tasks::cancel))
        .route("/locks", get(tasks::locks))
        .route("/events", get(events::list))
        .route("/configs", get(configs::list).post(configs::update))
        .route("/configs/diff", post(configs::diff))
        .route("/configs/{id}", get(configs::one))
        .route(
            "/cloud_configs",
            get(configs::cloud_configs).post(configs::update_cloud_config),
        )
        .route("/cloud_configs/diff", post(configs::diff_cloud_config))
        .route("/releases", get(releases::list).merge(upload))
        .route(
            "/releases/{name}",
            get(releases::one).delete(releases::delete),
        )
        .route("/releases/export", post(releases::export))
        .route("/packages/matches", post(releases::matches))
        .route(
            "/packages/matches_compiled",
            post(releases::matches_compiled),
        )
        .route("/stemcells", get(configs::stemcells))
        .route("/disks", get(cleanup::orphaned_disks))
        .route("/disks/{cid}", delete(cleanup::delete_disk))
        .route("/cleanup", post(cleanup::clean_up))
        .route("/cleanup/dryrun", get(cleanup::dry_run))
        .route("/link_providers", get(links::providers))
        .route("/link_consumers", get(links::consumers))
        .route("/link_address", get(links::address))
        .route("/links", get(links::list).post(links::create))
        .route("/links/{id}", delete(links::delete))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(director)
}

/// The BOSH director release whose API this one answers as: clients check it (the ODB
/// recreate-all errand wants 268.4.0 or later).
const BOSH_VERSION: &str = "282.0.0";

async fn info(
    State(director): State<Director>,
    signed_in: Option<Extension<SignedIn>>,
) -> Result<Json<Value>, ApiError> {
    let stemcell = director
        .stemcells()
        .await
        .ok()
        .and_then(|s| s.into_iter().last());
    Ok(Json(json!({
        "name": fleet_director::DIRECTOR_NAME,
        "uuid": director.uuid().await?,
        "version": format!("{BOSH_VERSION} (fleet-updater {})", env!("CARGO_PKG_VERSION")),
        // Who the credentials sent with this request name: `bosh log-in` checks it.
        "user": signed_in.map(|Extension(SignedIn(user))| user),
        "cpi": director.cpi_name(),
        "stemcell_os": stemcell.as_ref().map(|s| s.os.clone()),
        "stemcell_version": stemcell.as_ref().map(|s| s.version.clone()),
        "user_authentication": { "type": "basic", "options": {} },
        "features": {
            "local_dns": { "status": false, "extras": { "domain_name": "bosh" } },
            "snapshots": { "status": false },
            // The director generates and keeps variables itself; no external server has a URL.
            "config_server": { "status": true, "extras": { "urls": [] } },
        },
    })))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: code::GENERIC,
        description: format!("Method {method} is not allowed on '{}'", uri.path()),
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(
        code::GENERIC,
        format!("Endpoint '{}' not found", uri.path()),
    )
}
