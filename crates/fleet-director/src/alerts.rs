//! The health monitor's alerts: what it found wrong with an agent or a deployment, kept as
//! events of `bosh events` (object type `alert`), as BOSH's health monitor's event logger
//! records them, and logged.

use serde::{Deserialize, Serialize};

use crate::audit::AuditEvent;

/// How grave an alert is, in BOSH's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// 1: something needs an operator now (a meltdown, a process that does not run).
    Alert,
    /// 2: an agent timed out; what the resurrector acts on.
    Critical,
    /// 3.
    Error,
    /// 4: for information (the resurrector is at work).
    Warning,
}

impl Severity {
    pub fn number(self) -> u8 {
        match self {
            Severity::Alert => 1,
            Severity::Critical => 2,
            Severity::Error => 3,
            Severity::Warning => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Severity::Alert => "alert",
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// One instance's VM or agent.
    VmHealth,
    /// A deployment as a whole.
    DeploymentHealth,
}

/// An alert before it is kept: the monitor decides these without I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub category: Category,
    pub title: String,
    pub summary: String,
    /// `group/id` of the instance it is about; empty for a deployment.
    pub instance: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Its event id (see [`crate::audit::alert_id`]).
    pub id: u64,
    /// Unix seconds.
    pub created_at: u64,
    pub severity: Severity,
    pub category: Category,
    pub title: String,
    pub summary: String,
    pub deployment: String,
    pub instance: String,
}

/// The most alerts kept; older ones are deleted as new ones come.
pub const KEPT: usize = 1000;

/// Who raised the alerts, as `bosh events` shows it.
pub const USER: &str = "health_monitor";

impl Alert {
    /// The alert as `bosh events` lists it.
    pub fn event(&self) -> AuditEvent {
        AuditEvent {
            id: self.id,
            parent_id: None,
            timestamp: self.created_at,
            user: USER.to_string(),
            action: "create",
            object_type: "alert",
            object_name: self.id.to_string(),
            task: 0,
            deployment: self.deployment.clone(),
            instance: self.instance.clone(),
            error: None,
            message: Some(self.message()),
        }
    }

    /// One line: its title, severity and summary.
    pub fn message(&self) -> String {
        format!(
            "{}. Severity {}: {}",
            self.title,
            self.severity.number(),
            self.summary
        )
    }
}
