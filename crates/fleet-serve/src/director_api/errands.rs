//! `bosh errands` and `bosh run-errand`: the errands of a deployment, and a run of one as
//! a task whose result output holds each instance's exit code and output.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Value, json};

use super::Acting;
use super::deployments::redirect;
use super::error::{ApiError, ApiResult, code};
use fleet_director::Director;
use fleet_director::errand::{ErrandRequest, InstanceFilter};

pub async fn list(
    State(director): State<Director>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let names = director
        .errands(&name)
        .await
        .map_err(ApiError::of_deployment(&name))?;
    Ok(Json(Value::Array(
        names.into_iter().map(|n| json!({ "name": n })).collect(),
    )))
}

pub async fn run(
    Acting(director): Acting,
    Path((name, errand)): Path<(String, String)>,
    body: String,
) -> ApiResult<Response> {
    let request = read_request(errand, &body)?;
    let task = director
        .run_errand(&name, request)
        .await
        .map_err(ApiError::of_deployment(&name))?;
    Ok(redirect(&task))
}

fn invalid(description: String) -> ApiError {
    ApiError::bad_request(code::VALIDATION_INVALID_TYPE, description)
}

/// The run's body, `{"keep-alive": bool, "when-changed": bool, "instances": [{"group",
/// "id"}]}`; every key may be left out, and so may the body.
fn read_request(name: String, body: &str) -> ApiResult<ErrandRequest> {
    let mut request = ErrandRequest {
        name,
        ..ErrandRequest::default()
    };
    if body.trim().is_empty() {
        return Ok(request);
    }
    let value: Value = serde_json::from_str(body)
        .map_err(|e| invalid(format!("the body of an errand run is not JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(invalid(
            "the body of an errand run must be a JSON object".to_string(),
        ));
    };
    let flag = |key: &str| -> ApiResult<bool> {
        match fields.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(invalid(format!(
                "`{key}` must be true or false, found {other}"
            ))),
        }
    };
    request.keep_alive = flag("keep-alive")?;
    request.when_changed = flag("when-changed")?;
    match fields.get("instances") {
        None | Some(Value::Null) => {}
        Some(Value::Array(entries)) => {
            for (i, entry) in entries.iter().enumerate() {
                request.instances.push(filter(i, entry)?);
            }
        }
        Some(other) => {
            return Err(invalid(format!(
                "`instances` must be a list of {{\"group\", \"id\"}}, found {other}"
            )));
        }
    }
    Ok(request)
}

fn filter(i: usize, entry: &Value) -> ApiResult<InstanceFilter> {
    let text = |key: &str| match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(format!(
            "`instances[{i}].{key}` must be a string, found {other}"
        ))),
    };
    if !entry.is_object() {
        return Err(invalid(format!(
            "`instances[{i}]` must be {{\"group\", \"id\"}}, found {entry}"
        )));
    }
    let group = text("group")?.filter(|g| !g.is_empty()).ok_or_else(|| {
        ApiError::bad_request(
            code::VALIDATION_MISSING_FIELD,
            format!("`instances[{i}].group` is required"),
        )
    })?;
    Ok(InstanceFilter {
        group,
        id: text("id")?.filter(|id| !id.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_body_reads_its_flags_and_filters_and_names_what_is_wrong() {
        let r = read_request(
            "smoke".into(),
            r#"{"keep-alive":true,"when-changed":false,"instances":[{"group":"db","id":"0"},{"group":"web"}]}"#,
        )
        .unwrap();
        assert!(r.keep_alive && !r.when_changed);
        assert_eq!(r.instances[0].describe(), "db/0");
        assert_eq!(r.instances[1].describe(), "web");
        assert_eq!(read_request("e".into(), "").unwrap().instances, []);
        for (body, named) in [
            (r#"{"keep-alive":"yes"}"#, "`keep-alive`"),
            (r#"{"instances":{"group":"db"}}"#, "`instances`"),
            (r#"{"instances":[{"id":"0"}]}"#, "`instances[0].group`"),
            (
                r#"{"instances":[{"group":"db","id":3}]}"#,
                "`instances[0].id`",
            ),
            ("[1]", "JSON object"),
            ("{", "not JSON"),
        ] {
            let e = read_request("e".into(), body).unwrap_err();
            assert!(e.description.contains(named), "{body}: {}", e.description);
        }
    }
}
