//! The result of a run as one JSON document (schema 1), and the dry-run plan.

use std::time::SystemTime;

use serde::{Serialize, Serializer};

use super::select::Plan;
use fleet_clock::rfc3339;

/// Timestamps stay `SystemTime` until written: a large fleet's report would otherwise hold
/// two strings per instance.
fn timestamp<S: Serializer>(at: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&rfc3339(*at))
}

fn optional_timestamp<S: Serializer>(
    at: &Option<SystemTime>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => timestamp(at, serializer),
        None => serializer.serialize_none(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Succeeded,
    Failed,
    /// Nothing failed, and the maintenance window closed with instances left for the next.
    Deferred,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Updated,
    SkippedBlocked,
    SkippedUpToDate,
    Deleted,
    Orphaned,
    /// Still busy after the last attempt, or not retried because the run stopped.
    Busy,
    Failed,
    /// Never triggered because the run stopped first.
    NotStarted,
    /// Still running when the run ended (interrupted beyond the grace period).
    Unfinished,
    /// Not started because the maintenance window closed: for the next window.
    Deferred,
    /// Done by an earlier run of the same intent (the journal says so): not touched again.
    DoneEarlier,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub selected: usize,
    pub updated: usize,
    pub skipped_blocked: usize,
    pub skipped_up_to_date: usize,
    pub deleted: usize,
    pub orphaned: usize,
    pub busy: usize,
    pub failed: usize,
    pub not_started: usize,
    pub unfinished: usize,
    pub deferred: usize,
    pub done_earlier: usize,
}

impl Counts {
    pub fn add(&mut self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Updated => &mut self.updated,
            Outcome::SkippedBlocked => &mut self.skipped_blocked,
            Outcome::SkippedUpToDate => &mut self.skipped_up_to_date,
            Outcome::Deleted => &mut self.deleted,
            Outcome::Orphaned => &mut self.orphaned,
            Outcome::Busy => &mut self.busy,
            Outcome::Failed => &mut self.failed,
            Outcome::NotStarted => &mut self.not_started,
            Outcome::Unfinished => &mut self.unfinished,
            Outcome::Deferred => &mut self.deferred,
            Outcome::DoneEarlier => &mut self.done_earlier,
        };
        *slot += 1;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceReport {
    pub id: String,
    pub canary: bool,
    pub outcome: Outcome,
    pub reason: Option<String>,
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// A canary's check: what it was and what it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(serialize_with = "optional_timestamp")]
    pub started_at: Option<SystemTime>,
    #[serde(serialize_with = "optional_timestamp")]
    pub finished_at: Option<SystemTime>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub schema: u32,
    pub status: Status,
    pub strategy: String,
    #[serde(serialize_with = "timestamp")]
    pub started_at: SystemTime,
    #[serde(serialize_with = "timestamp")]
    pub finished_at: SystemTime,
    pub interrupted: bool,
    pub counts: Counts,
    pub instances: Vec<InstanceReport>,
    /// What the operator's filter left out, and why: never touched.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<SkippedInstance>,
}

impl Report {
    pub fn succeeded(&self) -> bool {
        self.status == Status::Succeeded
    }

    /// Ids of the instances with this outcome, in report order.
    pub fn ids_with(&self, outcome: Outcome) -> Vec<&str> {
        self.instances
            .iter()
            .filter(|i| i.outcome == outcome)
            .map(|i| i.id.as_str())
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedInstance {
    pub id: String,
    pub plan_id: String,
    pub canary_candidate: bool,
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedInstance {
    pub id: String,
    pub reason: String,
}

/// What a dry run prints: the instances in the order they would be triggered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanReport {
    pub schema: u32,
    pub dry_run: bool,
    pub strategy: String,
    pub selected: usize,
    pub canaries: usize,
    pub max_in_parallel: usize,
    pub order: Vec<PlannedInstance>,
    pub skipped: Vec<SkippedInstance>,
    /// What the operator's filter left out, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<SkippedInstance>,
}

/// The instances a plan's filter left out, as reports list them.
pub fn excluded(plan: &Plan) -> Vec<SkippedInstance> {
    plan.excluded
        .iter()
        .map(|e| SkippedInstance {
            id: e.instance.id.0.clone(),
            reason: e.reason.clone(),
        })
        .collect()
}

impl PlanReport {
    pub fn new(plan: &Plan, max_in_parallel: usize) -> Self {
        PlanReport {
            schema: 1,
            dry_run: true,
            strategy: plan.strategy.name().into(),
            selected: plan.selected,
            canaries: plan.canaries,
            max_in_parallel,
            order: plan
                .order
                .iter()
                .enumerate()
                .map(|(i, c)| PlannedInstance {
                    id: c.instance.id.0.clone(),
                    plan_id: c.instance.plan_id.clone(),
                    canary_candidate: i < plan.canaries,
                    force: c.force,
                })
                .collect(),
            skipped: plan
                .skipped
                .iter()
                .map(|s| SkippedInstance {
                    id: s.instance.id.0.clone(),
                    reason: s.reason.describe().into(),
                })
                .collect(),
            excluded: excluded(plan),
        }
    }
}
