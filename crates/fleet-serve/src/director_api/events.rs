//! `/events`: the director's event log as `bosh events` reads and filters it.

use axum::Json;
use axum::extract::{Query, State};
use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult, code};
use super::query::{Params, number};
use crate::authorize::Visible;
use fleet_director::Director;
use fleet_director::audit::{AuditEvent, AuditFilter};

fn event_json(e: &AuditEvent) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(e.id.to_string()));
    if let Some(parent) = e.parent_id {
        out.insert("parent_id".into(), json!(parent.to_string()));
    }
    out.insert("timestamp".into(), json!(e.timestamp));
    out.insert("user".into(), json!(e.user));
    out.insert("action".into(), json!(e.action));
    out.insert("object_type".into(), json!(e.object_type));
    out.insert("object_name".into(), json!(e.object_name));
    out.insert("task".into(), json!(e.task.to_string()));
    out.insert("deployment".into(), json!(e.deployment));
    out.insert("instance".into(), json!(e.instance));
    out.insert(
        "context".into(),
        match &e.message {
            Some(message) => json!({ "message": message }),
            None => json!({}),
        },
    );
    if let Some(error) = &e.error {
        out.insert("error".into(), json!(error));
    }
    Value::Object(out)
}

/// A time as operators write it: Unix seconds, RFC 3339, or `2024-05-01 12:00:00` (UTC,
/// with or without ` UTC`).
fn time(params: &Params, name: &str) -> ApiResult<Option<u64>> {
    let Some(text) = params.get(name) else {
        return Ok(None);
    };
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Some(secs));
    }
    let rfc3339 = if text.contains('T') {
        text.to_string()
    } else {
        format!("{}Z", text.trim_end_matches(" UTC").replacen(' ', "T", 1))
    };
    humantime::parse_rfc3339_weak(&rfc3339)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| Some(d.as_secs()))
        .ok_or_else(|| {
            ApiError::bad_request(
                code::VALIDATION_INVALID_TYPE,
                format!(
                    "{name} must be a time (Unix seconds or 2024-05-01 12:00:00 UTC), got '{text}'"
                ),
            )
        })
}

pub async fn list(
    State(director): State<Director>,
    visible: Option<axum::Extension<Visible>>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    let visible = visible.map(|v| v.0);
    let text = |name: &str| params.get(name).filter(|v| !v.is_empty()).cloned();
    let filter = AuditFilter {
        before_id: number(&params, "before_id")?,
        before_time: time(&params, "before_time")?,
        after_time: time(&params, "after_time")?,
        deployment: text("deployment"),
        task: number(&params, "task")?,
        instance: text("instance"),
        user: text("user"),
        action: text("action"),
        object_type: text("object_type"),
        object_name: text("object_name"),
    };
    let events = director.audit_events(&filter).await?;
    Ok(Json(Value::Array(
        events
            .iter()
            .filter(|e| Visible::shows(visible.as_ref(), Some(&e.deployment)))
            .map(event_json)
            .collect(),
    )))
}
