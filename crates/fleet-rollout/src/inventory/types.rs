use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InstanceId(pub String);

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for InstanceId {
    fn from(s: &str) -> Self {
        InstanceId(s.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    Provisioned,
    Deploying,
    Failed,
    Stopped,
    Deleted,
    /// A state this client does not know; such an instance matches no state filter.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LastOperationState {
    #[serde(rename = "in progress")]
    InProgress,
    #[serde(rename = "succeeded")]
    Succeeded,
    #[serde(rename = "failed")]
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastOperation {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub state: LastOperationState,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

fn provisioned() -> InstanceState {
    InstanceState::Provisioned
}

fn yes() -> bool {
    true
}

/// A service instance as the broker management API lists it; missing optional fields take
/// that API's defaults, so a plain On-Demand Service Broker's answer reads correctly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    #[serde(rename = "service_instance_id")]
    pub id: InstanceId,
    pub plan_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_guid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_name: Option<String>,
    #[serde(default = "provisioned")]
    pub state: InstanceState,
    #[serde(default = "yes")]
    pub update_available: bool,
    #[serde(default)]
    pub maintenance_updates_blocked: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// Where the platform keeps it, as an Open Service Broker `context` gives it; what
    /// `cf_org` and `cf_space` listing criteria match. Brokers that list none leave it out.
    /// Boxed: most instances have none, and instances are cloned with every operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Box<InstanceContext>>,
}

/// A service instance's organization and space, by GUID and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization_guid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_guid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_name: Option<String>,
}

impl Instance {
    /// A provisioned, outdated, unblocked instance: the common case, for tests and tools.
    pub fn new(id: impl Into<String>, plan_id: impl Into<String>) -> Self {
        Instance {
            id: InstanceId(id.into()),
            plan_id: plan_id.into(),
            space_guid: None,
            deployment_name: None,
            state: InstanceState::Provisioned,
            update_available: true,
            maintenance_updates_blocked: false,
            last_operation: None,
            context: None,
        }
    }

    pub fn operation_in_progress(&self) -> bool {
        self.state == InstanceState::Deploying
            || self
                .last_operation
                .as_ref()
                .is_some_and(|op| op.state == LastOperationState::InProgress)
    }
}

/// Which instances to list; the names are the a9s `instance_type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    All,
    Outdated,
    Provisioned,
    Failed,
}

impl Selection {
    pub fn as_str(self) -> &'static str {
        match self {
            Selection::All => "all",
            Selection::Outdated => "outdated",
            Selection::Provisioned => "provisioned",
            Selection::Failed => "failed",
        }
    }

    /// The filter as the broker API defines it, applied again on our side because some
    /// servers ignore it.
    pub fn matches(self, instance: &Instance) -> bool {
        match self {
            Selection::All => true,
            Selection::Outdated => instance.update_available,
            Selection::Provisioned => instance.state == InstanceState::Provisioned,
            Selection::Failed => instance.state == InstanceState::Failed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Update,
    /// Recreates every VM; with `fix`, VMs with unresponsive agents are recreated too.
    Recreate {
        fix: bool,
    },
}

impl Action {
    pub fn verb(self) -> &'static str {
        match self {
            Action::Update => "update",
            Action::Recreate { .. } => "recreate",
        }
    }
}

/// An accepted operation, as opaque to the engine as the broker's 202 body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    pub instance: InstanceId,
    pub data: serde_json::Value,
}

impl Operation {
    fn task_id(&self) -> Option<u64> {
        self.data
            .get("BoshTaskID")
            .and_then(serde_json::Value::as_u64)
    }

    /// The director task the operation runs as, for inventories whose operations are
    /// BOSH tasks.
    ///
    /// # Errors
    /// A permanent error when the operation names none.
    pub fn bosh_task(&self) -> Result<u64, super::InventoryError> {
        self.task_id().ok_or_else(|| {
            super::InventoryError::permanent(format!("operation {} names no task", self.data))
        })
    }

    /// A short human description: the BOSH task when the broker names one.
    pub fn describe(&self) -> String {
        match self.task_id() {
            Some(task) => format!("bosh task {task}"),
            None => self.data.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Triggered {
    Accepted(Operation),
    UpToDate,
    Blocked,
    Busy,
    Deleted,
    Orphaned,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationState {
    InProgress {
        retry_after: Option<Duration>,
    },
    Succeeded,
    Failed {
        reason: String,
    },
    /// The instance disappeared while the operation ran.
    Deleted,
    Orphaned,
}
