//! A canary's smoke test through a director: `POST
//! /deployments/D/errands/NAME/runs`, the task followed to its end, and each instance's
//! exit code and output read from the task's result output, as `bosh run-errand` reads
//! them. Every instance it ran on must exit 0.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fleet_http_client::{Call, segment};
use fleet_rollout::check::{CanaryCheck, CheckResult, errand_verdict, overdue};
use fleet_rollout::inventory::{Instance, InventoryError};
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::DirectorInventory;
use super::wire::{self, Task};

/// One instance's run, as the result output gives it.
#[derive(Deserialize)]
struct Run {
    exit_code: i32,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
}

impl DirectorInventory {
    /// Starts `errand` on `deployment`: the task's id.
    async fn run_errand(&self, deployment: &str, errand: &str) -> Result<u64, InventoryError> {
        let path = format!(
            "{}/errands/{}/runs",
            Self::deployment_path(deployment)?,
            segment(errand)?
        );
        let body = json!({ "keep-alive": false, "when-changed": false, "instances": [] });
        let call = Call::write(Method::POST, self.http.url(&path));
        let answer = self.send(&call, |r| r.json(&body)).await?;
        let task = match answer.code() {
            300..=399 => answer.location().and_then(wire::task_id),
            _ => return Err(answer.failure()),
        }
        .ok_or_else(|| InventoryError::permanent("the director started no errand task"))?;
        Ok(task)
    }

    /// Waits for task `task` to end, polling every `poll`.
    async fn ended(&self, task: u64, poll: Duration) -> Result<Task, InventoryError> {
        loop {
            let state: Task = self.get(&format!("/tasks/{task}")).await?;
            if !matches!(state.state.as_str(), "queued" | "processing" | "cancelling") {
                return Ok(state);
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Waits for the errand task `task` to end: each instance's exit code and output.
    async fn errand_runs(
        &self,
        task: u64,
        poll: Duration,
    ) -> Result<Vec<(i32, String)>, InventoryError> {
        let ended = self.ended(task, poll).await?;
        if ended.state != "done" {
            return Err(InventoryError::permanent(format!(
                "task {task} {}: {}",
                ended.state,
                ended.result.unwrap_or_default()
            )));
        }
        let call = Call::get(self.http.url(&format!("/tasks/{task}/output")));
        let answer = self.send(&call, |r| r.query(&[("type", "result")])).await?;
        if !answer.status.is_success() {
            return Err(answer.failure());
        }
        let runs = answer
            .text()
            .lines()
            .filter_map(|l| serde_json::from_str::<Run>(l).ok())
            .map(|r| (r.exit_code, format!("{}\n{}", r.stdout, r.stderr)))
            .collect();
        Ok(runs)
    }

    /// Cancels a task (`DELETE /task/N`), as `bosh cancel-task` does.
    async fn cancel(&self, task: u64) -> Result<(), InventoryError> {
        let call = Call::write(Method::DELETE, self.http.url(&format!("/task/{task}")));
        let answer = self.send(&call, |r| r).await?;
        if answer.status.is_success() {
            Ok(())
        } else {
            Err(answer.failure())
        }
    }
}

/// An instance's VM as `GET /deployments/D/instances` lists it.
#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    ips: Vec<String>,
}

/// A director's deployments' addresses, as `bosh instances` lists them.
pub struct Addresses(pub Arc<DirectorInventory>);

impl fleet_rollout::check::AddressBook for Addresses {
    fn addresses(
        &self,
        instance: Instance,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>> {
        let inventory = Arc::clone(&self.0);
        Box::pin(async move {
            let deployment = instance.deployment_name.clone().unwrap_or(instance.id.0);
            let path = format!(
                "{}/instances",
                DirectorInventory::deployment_path(&deployment).map_err(|e| e.to_string())?
            );
            let listed: Vec<Listed> = inventory.get(&path).await.map_err(|e| e.to_string())?;
            Ok(listed.into_iter().flat_map(|l| l.ips).collect())
        })
    }
}

pub struct ErrandCheck {
    inventory: Arc<DirectorInventory>,
    errand: String,
    time_limit: Duration,
    poll: Duration,
}

impl ErrandCheck {
    pub fn new(
        inventory: Arc<DirectorInventory>,
        errand: &str,
        time_limit: Duration,
        poll: Duration,
    ) -> Self {
        ErrandCheck {
            inventory,
            errand: errand.to_string(),
            time_limit,
            poll,
        }
    }
}

impl CanaryCheck for ErrandCheck {
    fn check(
        &self,
        instance: Instance,
        deadline: tokio::time::Instant,
    ) -> Pin<Box<dyn Future<Output = CheckResult> + Send>> {
        let inventory = Arc::clone(&self.inventory);
        let (what, limit) = (self.describe(), self.time_limit);
        let (errand, poll) = (self.errand.clone(), self.poll);
        Box::pin(async move {
            // A director inventory's instance is its deployment.
            let deployment = instance.deployment_name.clone().unwrap_or(instance.id.0);
            let task = inventory
                .run_errand(&deployment, &errand)
                .await
                .map_err(|e| e.to_string())?;
            let Ok(runs) =
                tokio::time::timeout_at(deadline, inventory.errand_runs(task, poll)).await
            else {
                // Cancelled rather than left holding the deployment's lock, and its end
                // awaited (within the check's grace) so that it does not outlive the
                // canary.
                if inventory.cancel(task).await.is_ok() {
                    let _ = inventory.ended(task, poll).await;
                }
                return Err(overdue(&what, limit));
            };
            let runs = runs.map_err(|e| e.to_string())?;
            errand_verdict(task, &runs)
        })
    }

    fn time_limit(&self) -> Duration {
        self.time_limit
    }

    fn describe(&self) -> String {
        format!("errand {}", self.errand)
    }
}
