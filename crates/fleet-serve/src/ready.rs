//! `GET /ready`: whether `serve` can do its work now, for a readiness probe and an
//! operator: the store takes a write, no task's end waits for the store to heal, and the
//! state directory's disk is not full. 200 when ready, 503 with what is wrong when not.

use std::path::PathBuf;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use fleet_director::Director;

/// Past this share of its blocks or inodes used, the state directory's disk counts as
/// full: SQLite needs room for its log before a write can be refused cleanly.
const FULL_PERCENT: u64 = 99;

/// What a request the store failed answers: 503 (Service Unavailable, which clients try
/// again) when the database is down, restarting or busy and may answer the same request
/// in a moment, 500 otherwise.
pub(crate) fn store_failure_status(e: &fleet_store::StoreError) -> StatusCode {
    if e.is_transient() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

#[derive(Clone)]
struct Probed {
    director: Director,
    state_dir: PathBuf,
}

pub fn router(director: Director, state_dir: PathBuf) -> Router {
    Router::new()
        .route("/ready", get(ready))
        .with_state(Probed {
            director,
            state_dir,
        })
}

async fn ready(State(probed): State<Probed>) -> (StatusCode, Json<Value>) {
    let found = probed.director.readiness().await;
    let disk = fleet_file::disk_use(&probed.state_dir);
    let disk_full =
        disk.is_some_and(|(blocks, inodes)| blocks >= FULL_PERCENT || inodes >= FULL_PERCENT);
    let mut problems = Vec::new();
    if let Some(e) = &found.store_error {
        problems.push(format!("the store takes no writes: {e}"));
    }
    if !found.awaiting_store.is_empty() {
        problems.push(format!(
            "tasks {:?} wait for the store to record their ends; their deployments stay locked until it does",
            found.awaiting_store
        ));
    }
    if disk_full {
        problems.push(format!(
            "the disk of {} is full",
            probed.state_dir.display()
        ));
    }
    let status = if problems.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "ready": problems.is_empty(),
        "problems": problems,
        "store": found.store_error.as_deref().map_or("writable", |_| "failing"),
        "tasks_awaiting_store": found.awaiting_store,
        "state_dir_disk": disk.map(|(blocks, inodes)| json!({
            "used_percent": blocks,
            "inodes_used_percent": inodes,
        })),
    });
    (status, Json(body))
}
