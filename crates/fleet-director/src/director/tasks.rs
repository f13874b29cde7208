//! Tasks: waiting, cancelling, their events, traces and results, and the locks they hold.

use crate::DirectorError;
use crate::model::{Task, TaskEvent, TaskFilter, TaskKind};
use crate::runner::lock_name;
use crate::trace;

use super::Director;

impl Director {
    /// Asks a running task to stop at its next safe point: what it started finishes,
    /// nothing new starts, and it ends as `cancelled`.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown task, [`DirectorError::Invalid`] for a
    /// task that has ended or that this process does not run.
    pub async fn cancel(&self, id: u64) -> Result<Task, DirectorError> {
        self.runner.cancel(id).await
    }

    /// Cancels every task this process runs, for a shutdown; returns their ids.
    pub async fn cancel_running(&self) -> Vec<u64> {
        self.runner.cancel_running().await
    }

    /// Waits until no task of this process runs.
    pub async fn idle(&self) {
        self.runner.idle().await;
    }

    /// Waits until the task has ended and returns it.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown task.
    pub async fn wait(&self, id: u64) -> Result<Task, DirectorError> {
        self.runner.wait(id).await
    }

    /// What a finished task wrote as its result output: an errand's results or the
    /// instances' details, one JSON line per instance (none for a skipped errand); else
    /// its one-line result.
    ///
    /// # Errors
    /// A store failure.
    pub async fn result_output(&self, task: &Task) -> Result<String, DirectorError> {
        let kept = self.records().task_result(task.id).await?;
        Ok(match TaskKind::of(task) {
            // Clients decode these as JSON: a skipped errand has no results at all.
            Some(TaskKind::RunErrand | TaskKind::InstanceDetails) => kept.unwrap_or_default(),
            _ => kept.or_else(|| task.result.clone()).unwrap_or_default(),
        })
    }

    /// The tasks the filter admits, newest first.
    pub async fn tasks(&self, filter: TaskFilter) -> Result<Vec<Task>, DirectorError> {
        Ok(self.store().tasks(filter).await?)
    }

    /// Makes every record written so far durable (the store's open group of commits is
    /// committed): what is about to be reported done must survive a crash.
    ///
    /// # Errors
    /// A store failure.
    pub async fn sync(&self) -> Result<(), DirectorError> {
        Ok(self.store().sync().await?)
    }

    /// Now in Unix seconds, by the director's clock (virtual under test).
    pub fn unix_now(&self) -> u64 {
        self.core.unix_now()
    }

    /// The newest task that changed the deployment: its last operation.
    pub async fn last_change(&self, deployment: &str) -> Result<Option<Task>, DirectorError> {
        Ok(self.store().last_change(deployment).await?)
    }

    /// The last operation of every deployment that has one.
    pub async fn last_changes(&self) -> Result<Vec<Task>, DirectorError> {
        Ok(self.store().last_changes().await?)
    }

    pub async fn task(&self, id: u64) -> Result<Option<Task>, DirectorError> {
        Ok(self.store().task(id).await?)
    }

    pub async fn events(&self, id: u64) -> Result<Vec<TaskEvent>, DirectorError> {
        Ok(self.store().events(id).await?)
    }

    /// A task's CPI and debug lines (`bosh task --cpi`, `--debug`).
    pub async fn trace(&self, id: u64) -> Result<Vec<trace::TraceLine>, DirectorError> {
        self.runner.trace(id).await
    }

    pub async fn locks(&self) -> Result<Vec<(String, u64)>, DirectorError> {
        Ok(self.store().locks().await?)
    }

    /// The task holding the deployment's lock, if any.
    pub async fn lock_holder(&self, deployment: &str) -> Result<Option<u64>, DirectorError> {
        Ok(self.store().lock_holder(&lock_name(deployment)).await?)
    }
}
