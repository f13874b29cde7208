//! `bosh ssh` and `bosh scp`: `POST /deployments/NAME/ssh` with the CLI's body sets up or
//! cleans up a session's user on the instances it targets, as a task whose result is one
//! JSON line naming each session's address and host key.

use axum::extract::Path;
use axum::response::Response;
use serde_json::Value;

use super::Acting;
use super::deployments::redirect;
use super::error::{ApiError, ApiResult, code};
use fleet_director::agent::SshRequest;
use fleet_director::ssh::SshTarget;

/// The longest user name or key taken: a session's user is `bosh_` and 15 hex digits,
/// an RSA public key a few hundred bytes.
const MAX_FIELD: usize = 16 * 1024;

pub async fn ssh(
    Acting(director): Acting,
    Path(name): Path<String>,
    body: String,
) -> ApiResult<Response> {
    let (target, request) = read(&body)?;
    let task = director
        .ssh(&name, target, request)
        .await
        .map_err(ApiError::of_deployment(&name))?;
    Ok(redirect(&task))
}

fn invalid(description: impl Into<String>) -> ApiError {
    ApiError::bad_request(code::VALIDATION_INVALID_TYPE, description)
}

/// A string field of `at`, named by its path when missing or of another type.
fn text(value: &Value, path: &str) -> ApiResult<String> {
    let found = path
        .split('.')
        .try_fold(value, |v, key| v.get(key))
        .ok_or_else(|| invalid(format!("`{path}` is missing")))?;
    let text = found
        .as_str()
        .ok_or_else(|| invalid(format!("`{path}` must be a string, not {found}")))?;
    if text.len() > MAX_FIELD {
        return Err(invalid(format!(
            "`{path}` is longer than {MAX_FIELD} bytes"
        )));
    }
    Ok(text.to_string())
}

/// The CLI's body: `{"command": "setup"|"cleanup", "target": {"job", "indexes", "ids"},
/// "params": {"user", "public_key"} | {"user_regex"}}`.
fn read(body: &str) -> ApiResult<(SshTarget, SshRequest)> {
    let value: Value =
        serde_json::from_str(body).map_err(|e| invalid(format!("the body is not JSON: {e}")))?;
    let request = match text(&value, "command")?.as_str() {
        "setup" => {
            let user = text(&value, "params.user")?;
            if !user.starts_with("bosh_")
                || !user[5..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                || user.len() > 32
            {
                return Err(invalid(format!(
                    "`params.user` `{user}` is not a session user (`bosh_` and letters or digits)"
                )));
            }
            SshRequest::Setup {
                user,
                public_key: text(&value, "params.public_key")?,
            }
        }
        "cleanup" => SshRequest::Cleanup {
            user_regex: text(&value, "params.user_regex")?,
        },
        other => {
            return Err(invalid(format!(
                "`command` `{other}` is neither `setup` nor `cleanup`"
            )));
        }
    };
    let target = value.get("target").cloned().unwrap_or(Value::Null);
    let group = match target.get("job") {
        None | Some(Value::Null) => None,
        Some(Value::String(g)) => Some(g.clone()),
        Some(other) => {
            return Err(invalid(format!(
                "`target.job` must be a string, not {other}"
            )));
        }
    };
    let mut ids = Vec::new();
    for key in ["ids", "indexes"] {
        match target.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    match item {
                        Value::String(s) => ids.push(s.clone()),
                        Value::Number(n) => ids.push(n.to_string()),
                        other => {
                            return Err(invalid(format!(
                                "`target.{key}` holds {other}, not an index or an id"
                            )));
                        }
                    }
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "`target.{key}` must be a list, not {other}"
                )));
            }
        }
    }
    ids.sort();
    ids.dedup();
    Ok((SshTarget { group, ids }, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clis_bodies_are_read_and_bad_ones_named() {
        let (target, request) = read(
            r#"{"deployment_name":"d","command":"setup","target":{"job":"kv","indexes":["0"],"ids":["0"]},"params":{"user":"bosh_0123456789abcde","public_key":"ssh-rsa AAAA"}}"#,
        )
        .unwrap();
        assert_eq!(target.group.as_deref(), Some("kv"));
        assert_eq!(target.ids, ["0"]);
        assert_eq!(
            request,
            SshRequest::Setup {
                user: "bosh_0123456789abcde".into(),
                public_key: "ssh-rsa AAAA".into()
            }
        );
        let (all, cleanup) = read(
            r#"{"command":"cleanup","target":{"job":"","indexes":[],"ids":[]},"params":{"user_regex":"^bosh_0123"}}"#,
        )
        .unwrap();
        assert!(all.ids.is_empty());
        assert_eq!(
            cleanup,
            SshRequest::Cleanup {
                user_regex: "^bosh_0123".into()
            }
        );
        for (body, named) in [
            (r#"{"command":"open"}"#, "`command` `open`"),
            (
                r#"{"command":"setup","params":{"user":"root","public_key":"k"}}"#,
                "`params.user` `root`",
            ),
            (
                r#"{"command":"setup","params":{"user":"bosh_1"}}"#,
                "`params.public_key` is missing",
            ),
            (
                r#"{"command":"cleanup","params":{"user_regex":1}}"#,
                "`params.user_regex` must be a string",
            ),
        ] {
            let e = read(body).unwrap_err();
            assert!(e.description.contains(named), "{}: {}", body, e.description);
        }
    }
}
