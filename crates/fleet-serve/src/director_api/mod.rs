//! The embedded director's API in the BOSH director's wire format, so that the official
//! `bosh` CLI and our own director inventory can drive it. Handlers translate between
//! the wire and the [`Director`] facade; the rules live behind it.

mod configs;
mod deployments;
mod error;
mod query;
mod tasks;
mod wire;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::Uri;
use axum::routing::{delete, get, post, put};
use serde_json::{Value, json};

pub use error::{ApiError, code};
use fleet_director::Director;

/// Paths that need no credentials: `/info` tells clients how to sign in.
pub const OPEN_PATHS: &[&str] = &["/info"];

pub fn router(director: Director) -> Router {
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
        .route(
            "/deployments/{name}/jobs/{group}",
            put(deployments::change_group),
        )
        .route(
            "/deployments/{name}/jobs/{group}/{instance}",
            put(deployments::change_instance),
        )
        .route("/tasks", get(tasks::list))
        .route("/tasks/{id}", get(tasks::one))
        .route("/tasks/{id}/output", get(tasks::output))
        .route("/task/{id}", delete(tasks::cancel))
        .route("/locks", get(tasks::locks))
        .route("/configs", get(configs::list).post(configs::update))
        .route("/configs/diff", post(configs::diff))
        .route(
            "/cloud_configs",
            get(configs::cloud_configs).post(configs::update_cloud_config),
        )
        .route("/cloud_configs/diff", post(configs::diff_cloud_config))
        .route("/releases", get(configs::releases))
        .route("/stemcells", get(configs::stemcells))
        .fallback(not_found)
        .with_state(director)
}

async fn info(State(director): State<Director>) -> Json<Value> {
    let stemcell = director
        .stemcells()
        .await
        .ok()
        .and_then(|s| s.into_iter().last());
    Json(json!({
        "name": "fleet-updater",
        "uuid": "fleet-updater-embedded-director",
        "version": concat!(env!("CARGO_PKG_VERSION"), " (fleet-updater)"),
        "user": null,
        "cpi": "simulated",
        "stemcell_os": stemcell.as_ref().map(|s| s.os.clone()),
        "stemcell_version": stemcell.as_ref().map(|s| s.version.clone()),
        "user_authentication": { "type": "basic", "options": {} },
        "features": {
            "local_dns": { "status": false, "extras": { "domain_name": "bosh" } },
            "snapshots": { "status": false },
            "config_server": { "status": false, "extras": { "urls": [] } },
        },
    }))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(
        code::GENERIC,
        format!("Endpoint '{}' not found", uri.path()),
    )
}
