//! `/disks` and `/cleanup`: orphaned disks as `bosh disks --orphaned` and `bosh
//! delete-disk` see them, and `bosh clean-up [--all]` with its dry run.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Acting;
use super::configs::{created_at, stemcell_json};
use super::deployments::redirect;
use super::error::{ApiError, ApiResult, code};
use super::query::{Params, strict_flag};
use fleet_director::Director;
use fleet_director::cleanup::{CleanUpOptions, CleanUpPlan};
use fleet_director::model::DiskRecord;

fn disk_json(disk: &DiskRecord) -> Value {
    json!({
        "disk_cid": disk.cid,
        "size": disk.size,
        "deployment_name": disk.deployment,
        "instance_name": disk.instance_name.as_deref().unwrap_or_default(),
        "az": disk.az.as_deref().unwrap_or_default(),
        "orphaned_at": created_at(disk.orphaned_at),
        "cid": disk.cid,
    })
}

pub async fn orphaned_disks(State(director): State<Director>) -> ApiResult<Json<Value>> {
    let disks = director.orphaned_disks().await?;
    Ok(Json(Value::Array(disks.iter().map(disk_json).collect())))
}

pub async fn delete_disk(Acting(director): Acting, Path(cid): Path<String>) -> ApiResult<Response> {
    Ok(redirect(&director.delete_orphaned_disk(&cid).await?))
}

fn plan_json(plan: &CleanUpPlan) -> Value {
    let mut releases: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for r in &plan.releases {
        releases.entry(&r.name).or_default().push(&r.version);
    }
    json!({
        "releases": releases
            .into_iter()
            .map(|(name, versions)| json!({ "name": name, "versions": versions }))
            .collect::<Vec<_>>(),
        "stemcells": plan.stemcells.iter().map(|s| stemcell_json(s, &[])).collect::<Vec<_>>(),
        "compiled_packages": [],
        "orphaned_disks": plan.disks.iter().map(disk_json).collect::<Vec<_>>(),
        "orphaned_vms": [],
        "exported_releases": [],
        "dns_blobs": [],
    })
}

/// `bosh clean-up` shows what would go before it asks.
pub async fn dry_run(
    State(director): State<Director>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let options = CleanUpOptions {
        remove_all: strict_flag(&params, "remove_all")?,
        keep_orphaned_disks: strict_flag(&params, "keep_orphaned_disks")?,
    };
    Ok(Json(plan_json(&director.clean_up_plan(options).await?)))
}

#[derive(Deserialize, Default)]
pub struct CleanUpBody {
    #[serde(default)]
    config: CleanUpConfig,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CleanUpConfig {
    #[serde(default)]
    remove_all: bool,
    #[serde(default)]
    keep_orphaned_disks: bool,
}

pub async fn clean_up(Acting(director): Acting, body: String) -> ApiResult<Response> {
    let body: CleanUpBody = if body.trim().is_empty() {
        CleanUpBody::default()
    } else {
        serde_json::from_str(&body).map_err(|e| {
            ApiError::bad_request(
                code::VALIDATION_INVALID_TYPE,
                format!("the body must be {{\"config\": {{\"remove_all\", \"keep_orphaned_disks\"}}}}: {e}"),
            )
        })?
    };
    let options = CleanUpOptions {
        remove_all: body.config.remove_all,
        keep_orphaned_disks: body.config.keep_orphaned_disks,
    };
    Ok(redirect(&director.clean_up(options).await?))
}
