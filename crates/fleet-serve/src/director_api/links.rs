//! The links API (`/link_providers`, `/link_consumers`, `/links`, `/link_address`), as a
//! BOSH director answers it: what a deployment's jobs provide and consume, and the
//! external links a client makes to a shared provider for its DNS address, which the
//! ODB's `binding_with_dns` asks for.

use axum::Json;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::Acting;
use super::error::ApiResult;
use super::query::Params;
use fleet_director::{LinkError, LinkView};

fn deployment(params: &Params) -> String {
    params.get("deployment").cloned().unwrap_or_default()
}

pub async fn providers(
    Acting(director): Acting,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let found = director.link_providers(&deployment(&params)).await?;
    Ok(Json(Value::Array(
        found
            .into_iter()
            .map(|(id, p)| {
                json!({
                    "id": id,
                    "name": p.alias,
                    "shared": p.shared,
                    "deployment": p.deployment,
                    "link_provider_definition": { "type": p.link_type, "name": p.name },
                    "owner_object": {
                        "type": "job",
                        "name": p.job,
                        "info": { "instance_group": p.group },
                    },
                })
            })
            .collect(),
    )))
}

pub async fn consumers(
    Acting(director): Acting,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let name = deployment(&params);
    let found = director.link_consumers(&name).await?;
    Ok(Json(Value::Array(
        found
            .into_iter()
            .map(|(id, c)| {
                json!({
                    "id": id,
                    "name": c.name,
                    "optional": c.optional,
                    "deployment": name,
                    "owner_object": {
                        "type": "job",
                        "name": c.job,
                        "info": { "instance_group": c.group },
                    },
                    "link_consumer_definition": { "name": c.name, "type": c.link_type },
                })
            })
            .collect(),
    )))
}

fn link_json(link: &LinkView) -> Value {
    json!({
        "id": link.id,
        "name": link.name,
        "link_consumer_id": link.consumer_id,
        "link_provider_id": link.provider_id,
        "created_at": fleet_clock::rfc3339_unix(link.created_at),
    })
}

pub async fn list(
    Acting(director): Acting,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let links = director.links(&deployment(&params)).await?;
    Ok(Json(Value::Array(links.iter().map(link_json).collect())))
}

/// `POST /links`: `{"link_provider_id", "link_consumer": {"owner_object": {"name",
/// "type": "external"}}, "network"}`.
pub async fn create(Acting(director): Acting, body: String) -> ApiResult<Json<Value>> {
    let invalid = |what: &str| LinkError::Invalid(what.to_string());
    let body: Value =
        serde_json::from_str(&body).map_err(|e| invalid(&format!("the body is not JSON: {e}")))?;
    let provider = match body.get("link_provider_id") {
        None | Some(Value::Null) => {
            return Err(invalid("`link_provider_id` must be provided").into());
        }
        Some(Value::String(id)) => id.clone(),
        Some(_) => return Err(invalid("`link_provider_id` must be a String").into()),
    };
    let consumer = body
        .get("link_consumer")
        .ok_or_else(|| invalid("`link_consumer` section must be defined"))?;
    let owner = consumer
        .get("owner_object")
        .ok_or_else(|| invalid("`link_consumer.owner_object` section must be defined"))?;
    if owner.get("type").and_then(Value::as_str) != Some("external") {
        return Err(invalid("`link_consumer.owner_object.type` should be 'external'").into());
    }
    let name = owner
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let network = body.get("network").and_then(Value::as_str);
    let link = director.create_link(&provider, name, network).await?;
    Ok(Json(link_json(&LinkView {
        id: link.id,
        name: link.owner.clone(),
        consumer_id: format!("external:{}", link.owner),
        provider_id: link.provider_id,
        created_at: link.created_at,
    })))
}

pub async fn delete(Acting(director): Acting, Path(id): Path<String>) -> ApiResult<StatusCode> {
    director.delete_link(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `?link_id=ID[&azs[]=AZ...][&status=S]`: the AZs are repeated, so the query is read as
/// pairs.
pub async fn address(
    Acting(director): Acting,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let value = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let id = value("link_id").unwrap_or_default();
    let azs: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "azs[]" || k == "azs")
        .map(|(_, v)| v.clone())
        .collect();
    let address = director.link_address(id, &azs, value("status")).await?;
    Ok(Json(json!({ "address": address })))
}
