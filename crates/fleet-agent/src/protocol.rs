//! The agent message protocol as it travels over HTTPS: a request names a method and its
//! arguments; an answer is a value or an exception. Long actions answer a task to poll
//! with `get_task`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub method: String,
    #[serde(default)]
    pub arguments: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exception {
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<Exception>,
}

impl Answer {
    pub fn value(value: Value) -> Self {
        Answer {
            value: Some(value),
            exception: None,
        }
    }

    pub fn exception(message: String) -> Self {
        Answer {
            value: None,
            exception: Some(Exception { message }),
        }
    }

    /// What an action still running answers.
    pub fn running(task_id: &str) -> Self {
        Answer::value(json!({"agent_task_id": task_id, "state": "running"}))
    }

    /// The task id of an answer that says its action still runs.
    pub fn running_task(&self) -> Option<&str> {
        let value = self.value.as_ref()?;
        (value.get("state")?.as_str()? == "running")
            .then(|| value.get("agent_task_id")?.as_str())
            .flatten()
    }
}

/// A blob the apply spec names: where it is in the agent's blobstore and its digest.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BlobRef {
    pub blobstore_id: String,
    pub sha1: String,
}

/// A package the apply spec names.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PackageRef {
    pub name: String,
    pub version: String,
    pub sha1: String,
    pub blobstore_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TemplateRef {
    pub name: String,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobRef {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub templates: Vec<TemplateRef>,
}

/// What `apply` is given: the jobs (their rendered files in one archive), the compiled
/// packages, the networks and the configuration hash, and who the instance is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ApplySpec {
    #[serde(default)]
    pub deployment: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub az: String,
    #[serde(default)]
    pub job: JobRef,
    #[serde(default)]
    pub packages: std::collections::BTreeMap<String, PackageRef>,
    #[serde(default)]
    pub networks: serde_json::Map<String, Value>,
    #[serde(default)]
    pub rendered_templates_archive: Option<BlobRef>,
    #[serde(default)]
    pub configuration_hash: String,
    #[serde(default)]
    pub persistent_disk: u64,
}

impl ApplySpec {
    /// The jobs it places, by their names.
    pub fn job_names(&self) -> Vec<String> {
        self.job.templates.iter().map(|t| t.name.clone()).collect()
    }
}
