//! The director's JSON as far as the updater reads it, and the meanings of its task
//! states. Unknown fields are ignored: directors add fields between versions.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use fleet_rollout::inventory::OperationState;

/// `GET /deployments` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Deployment {
    pub name: String,
    #[serde(default)]
    pub releases: Vec<NameVersion>,
    #[serde(default)]
    pub stemcells: Vec<NameVersion>,
    /// Missing on directors older than the `locked` field, or with `exclude_lock`.
    #[serde(default)]
    pub locked: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NameVersion {
    pub name: String,
    #[serde(deserialize_with = "text")]
    pub version: String,
}

/// `GET /stemcells` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Stemcell {
    pub name: String,
    #[serde(default)]
    pub operating_system: Option<String>,
    #[serde(deserialize_with = "text")]
    pub version: String,
}

/// `GET /releases` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Release {
    pub name: String,
    #[serde(default)]
    pub release_versions: Vec<ReleaseVersion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReleaseVersion {
    #[serde(deserialize_with = "text")]
    pub version: String,
}

/// `GET /deployments/:name`.
#[derive(Deserialize)]
pub struct DeploymentManifest {
    #[serde(default)]
    pub manifest: Option<String>,
}

/// `GET /locks` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Lock {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub resource: Vec<String>,
}

impl Lock {
    /// The BOSH CLI's test for "a deployment operation is in progress".
    pub fn holds(&self, deployment: &str) -> bool {
        self.kind == "deployment" && self.resource.first().is_some_and(|r| r == deployment)
    }
}

/// `GET /tasks/:id` and the entries of `GET /tasks`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Task {
    pub id: u64,
    pub state: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub result: Option<String>,
}

/// `GET /info`, for the UAA that issues tokens for this director.
#[derive(Deserialize)]
pub struct Info {
    #[serde(default)]
    pub user_authentication: Option<UserAuthentication>,
}

#[derive(Deserialize)]
pub struct UserAuthentication {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub options: AuthenticationOptions,
}

#[derive(Default, Deserialize)]
pub struct AuthenticationOptions {
    #[serde(default)]
    pub url: Option<String>,
}

/// The UAA's token answer. Not `Debug`: it holds the token.
#[derive(Deserialize)]
pub struct Token {
    pub access_token: String,
    #[serde(default)]
    pub token_type: Option<String>,
}

/// Versions are strings in the director's JSON, but a number is read as its text rather
/// than refused.
fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "expected a version, found {other}"
        ))),
    }
}

/// The task a redirect points to: the director answers a long-running request with a
/// 302 or 303 to `/tasks/<id>`, and only the path is trusted (the host may be an address
/// the director knows itself by).
pub fn task_id(location: &str) -> Option<u64> {
    let path = match reqwest::Url::parse(location) {
        Ok(url) => url.path().to_string(),
        Err(_) => location.split(['?', '#']).next().unwrap_or("").to_string(),
    };
    let (_, id) = path.trim_end_matches('/').rsplit_once("/tasks/")?;
    id.parse().ok()
}

/// What a task's state means for the operation. `None` for a state this client does not
/// know, which is reported rather than guessed at.
pub fn operation_state(task: &Task) -> Option<OperationState> {
    Some(match task.state.as_str() {
        "queued" | "processing" | "cancelling" => OperationState::InProgress { retry_after: None },
        "done" => OperationState::Succeeded,
        "error" | "cancelled" | "timeout" => OperationState::Failed {
            reason: format!(
                "bosh task {} {}: {}",
                task.id,
                task.state,
                task.result
                    .as_deref()
                    .or(task.description.as_deref())
                    .unwrap_or("no result")
            ),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_id_is_read_from_an_absolute_or_relative_location() {
        assert_eq!(task_id("https://10.0.0.6:25555/tasks/42"), Some(42));
        assert_eq!(task_id("/tasks/7"), Some(7));
        assert_eq!(task_id("/tasks/7/"), Some(7));
        assert_eq!(task_id("/tasks/7?x=1"), Some(7));
    }

    #[test]
    fn a_location_without_a_task_gives_none() {
        assert_eq!(task_id("/deployments/x"), None);
        assert_eq!(task_id("/tasks/abc"), None);
        assert_eq!(task_id(""), None);
    }

    fn task(state: &str, result: Option<&str>) -> Task {
        Task {
            id: 9,
            state: state.into(),
            description: Some("create deployment".into()),
            result: result.map(str::to_string),
        }
    }

    #[test]
    fn running_task_states_are_in_progress() {
        for state in ["queued", "processing", "cancelling"] {
            assert_eq!(
                operation_state(&task(state, None)),
                Some(OperationState::InProgress { retry_after: None })
            );
        }
        assert_eq!(
            operation_state(&task("done", Some("/deployments/x"))),
            Some(OperationState::Succeeded)
        );
    }

    #[test]
    fn a_failed_task_names_its_id_state_and_result() {
        assert_eq!(
            operation_state(&task("error", Some("Failed to acquire lock"))),
            Some(OperationState::Failed {
                reason: "bosh task 9 error: Failed to acquire lock".into()
            })
        );
        assert_eq!(
            operation_state(&task("timeout", None)),
            Some(OperationState::Failed {
                reason: "bosh task 9 timeout: create deployment".into()
            })
        );
    }

    #[test]
    fn an_unknown_task_state_is_not_guessed() {
        assert_eq!(operation_state(&task("paused", None)), None);
    }

    #[test]
    fn a_version_may_be_a_number() {
        let entry: NameVersion = serde_json::from_str(r#"{"name": "a", "version": 3}"#).unwrap();
        assert_eq!(entry.version, "3");
    }

    #[test]
    fn a_deployment_lock_is_recognised_by_type_and_first_resource() {
        let lock: Lock =
            serde_json::from_str(r#"{"type": "deployment", "resource": ["pg"], "task_id": "4"}"#)
                .unwrap();
        assert!(lock.holds("pg"));
        assert!(!lock.holds("redis"));
    }

    #[test]
    fn a_deployment_listing_reads_with_or_without_lock_field() {
        let list: Vec<Deployment> = serde_json::from_str(
            r#"[{"name": "a", "releases": [{"name": "r", "version": "1"}],
                 "stemcells": [{"name": "s", "version": "2"}], "locked": true,
                 "teams": [], "cloud_config": "latest"},
                {"name": "b"}]"#,
        )
        .unwrap();
        assert_eq!(list[0].locked, Some(true));
        assert_eq!(list[1].locked, None);
        assert!(list[1].releases.is_empty());
    }
}
