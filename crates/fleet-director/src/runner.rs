//! Runs the director's jobs as tasks: creates the task (taking the deployment's lock
//! unless the kind only reads), runs the job in the background, records how it ended and
//! releases the lock; cancels, waits for one task, or for all of them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::core::Core;
use super::error::{DirectorError, StepError};
use super::model::{Task, TaskKind, TaskState};
use super::task::{JobError, TaskLog};
use super::trace::{self, Trace, TraceLine};
use fleet_store::{StoreError, put};

/// The name of a deployment's lock in the store.
pub fn lock_name(deployment: &str) -> String {
    format!("lock:deployment:{deployment}")
}

/// Whether a task takes its deployment's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// Takes the deployment's lock (a new deployment's too: it is recorded once its
    /// manifest is found valid, so a refused one leaves nothing behind).
    Existing,
    /// Only reads: runs beside whatever holds the lock.
    None,
}

impl Locking {
    fn of(kind: TaskKind) -> Locking {
        match kind {
            TaskKind::InstanceDetails | TaskKind::FetchLogs | TaskKind::Ssh => Locking::None,
            _ => Locking::Existing,
        }
    }
}

/// Tries for a write at a task's start or end. The delays between tries double from
/// [`PERSIST_DELAY`] (3.1 s in all); each try may itself wait for the store's busy
/// timeout before it fails.
pub(crate) const PERSIST_ATTEMPTS: u32 = 6;
const PERSIST_DELAY: Duration = Duration::from_millis(100);

/// A write that a task's start or end must not lose: a deployment whose lock is not
/// released stays locked until the next start, and a task not recorded as ended looks
/// running. A failing store is tried again with backoff; what still fails is logged and
/// returned, and crash recovery at the next start repairs it.
async fn persist<F, Fut>(what: &str, task: u64, mut write: F) -> Result<(), StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    let waits = fleet_clock::Doubling {
        first: PERSIST_DELAY,
        max: Duration::MAX,
    };
    let mut attempt = 1;
    loop {
        match write().await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < PERSIST_ATTEMPTS => {
                tracing::warn!(task, attempt, error = %e, "cannot {what} task; trying again");
                tokio::time::sleep(waits.after(attempt)).await;
                attempt += 1;
            }
            Err(e) => {
                tracing::error!(
                    task,
                    error = %e,
                    "cannot {what} task; the next start of the director repairs it"
                );
                return Err(e);
            }
        }
    }
}

/// How often a task's end that the store could not record is tried again.
const HEAL_EVERY: Duration = Duration::from_secs(5);

/// How often a task another process runs is read again while waited for.
const OTHERS_POLLED_EVERY: Duration = Duration::from_millis(500);

/// Who started a task, and the context the client groups it in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub user: Option<String>,
    pub context_id: Option<String>,
    /// For a user whose scopes name teams (and who is no director admin): the teams it
    /// administers. A deployment it creates belongs to them; one of other teams it may
    /// not change. `None` for a director admin.
    pub teams: Option<Vec<String>>,
}

pub struct TaskRunner {
    core: Arc<Core>,
    /// The cancellation flag of every task this process runs.
    running: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    /// The trace of every task this process runs, readable while it runs.
    traces: Mutex<HashMap<u64, Trace>>,
    /// Tasks of this process whose end the store could not record yet: they look running
    /// in the store until it heals.
    unrecorded: Mutex<std::collections::HashSet<u64>>,
    /// Held by every write of a task's state (its start, its end, a cancellation), so
    /// that none overwrites another.
    state_writes: tokio::sync::Mutex<()>,
    finished: Notify,
}

impl TaskRunner {
    pub fn new(core: Arc<Core>) -> Self {
        TaskRunner {
            core,
            running: Mutex::new(HashMap::new()),
            traces: Mutex::new(HashMap::new()),
            unrecorded: Mutex::new(std::collections::HashSet::new()),
            state_writes: tokio::sync::Mutex::new(()),
            finished: Notify::new(),
        }
    }

    fn flags(&self) -> MutexGuard<'_, HashMap<u64, Arc<AtomicBool>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn traces_of(&self) -> MutexGuard<'_, HashMap<u64, Trace>> {
        self.traces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A task's CPI and debug lines: as far as they go while it runs, all of them once
    /// it has ended.
    pub async fn trace(&self, id: u64) -> Result<Vec<TraceLine>, DirectorError> {
        let live = self.traces_of().get(&id).map(Trace::lines);
        match live {
            Some(lines) => Ok(lines),
            None => Ok(self
                .core
                .store
                .get::<Vec<TraceLine>>(crate::collections::TASK_TRACES, &id.to_string())
                .await?
                .unwrap_or_default()),
        }
    }

    /// The task as the store has it.
    async fn recorded(&self, id: u64) -> Result<Task, DirectorError> {
        self.core
            .store
            .task(id)
            .await?
            .ok_or_else(|| DirectorError::NotFound {
                what: format!("task {id}"),
            })
    }

    /// Creates a task, taking the deployment's lock unless the kind only reads, and runs
    /// `job` in the background.
    ///
    /// # Errors
    /// [`DirectorError::Locked`] when another task holds the deployment, or a store error.
    pub async fn start<F, Fut>(
        self: &Arc<Self>,
        kind: TaskKind,
        deployment: Option<&str>,
        origin: &Origin,
        job: F,
    ) -> Result<Task, DirectorError>
    where
        F: FnOnce(Arc<Core>, TaskLog) -> Fut + Send + 'static,
        Fut: Future<Output = Result<String, JobError>> + Send + 'static,
    {
        let store = &self.core.store;
        let locking = Locking::of(kind);
        let lock = match (locking, deployment) {
            (Locking::None, _) | (_, None) => None,
            (_, Some(d)) => Some(lock_name(d)),
        };
        let user = origin.user.as_deref();
        let mut task = match store
            .create_task(
                kind.spec(),
                deployment,
                lock.as_deref(),
                user,
                self.core.lease(),
            )
            .await?
        {
            Ok(task) => task,
            Err(holder) => {
                return Err(DirectorError::Locked {
                    deployment: deployment.unwrap_or_default().to_string(),
                    task: holder,
                });
            }
        };
        // Recorded with the task's start, which follows at once.
        task.context_id = origin.context_id.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        self.flags().insert(task.id, Arc::clone(&cancel));
        metrics::gauge!("fleet_director_tasks_running", "kind" => kind.name()).increment(1.0);
        let runner = Arc::clone(self);
        let running = task.clone();
        tokio::spawn(async move { runner.run(kind, running, lock, cancel, job).await });
        Ok(task)
    }

    async fn run<F, Fut>(
        &self,
        kind: TaskKind,
        mut running: Task,
        lock: Option<String>,
        cancel: Arc<AtomicBool>,
        job: F,
    ) where
        F: FnOnce(Arc<Core>, TaskLog) -> Fut + Send + 'static,
        Fut: Future<Output = Result<String, JobError>> + Send + 'static,
    {
        let core = &self.core;
        running.started_at = Some(core.unix_now());
        let id = running.id;
        let started = persist("record the start of", id, || {
            let (mut started, cancel) = (running.clone(), &cancel);
            async move {
                let _writing = self.state_writes.lock().await;
                started.state = if cancel.load(Ordering::SeqCst) {
                    TaskState::Cancelling
                } else {
                    TaskState::Processing
                };
                core.store.put_task(&started).await
            }
        })
        .await;
        let mut kept_trace = None;
        let outcome = match started {
            // A task whose start cannot be recorded does not run: nothing it did could be
            // told apart from a task that never started.
            Err(e) => Err(JobError::from(StepError::NotStarted(e))),
            Ok(()) => {
                // On a shared database the deployment may have been changed by another
                // process since this one last held it: a cloud that keeps it in memory
                // reads it again first.
                if lock.is_some()
                    && core.store.blocking().shared()
                    && let Some(deployment) = running.deployment.as_deref()
                    && let Err(e) = core.cpi.deployment_taken(deployment).await
                {
                    tracing::warn!(task = id, error = %e, "the cloud could not read the deployment again");
                }
                let log = TaskLog::start(id, core.store.clone(), Arc::clone(&cancel), core.clock);
                let trace = Trace::new(core.clock);
                self.traces_of().insert(id, trace.clone());
                // The job runs as its own task so that a panic in it still ends this task
                // and releases the lock.
                let work = trace::run_with(trace.clone(), job(Arc::clone(core), log.clone()));
                let outcome = match tokio::spawn(work).await {
                    Ok(outcome) => outcome,
                    Err(e) => Err(JobError::from(StepError::from(e))),
                };
                // Every event of the job is in the store before the task shows as ended;
                // its trace goes with the end.
                log.flush().await;
                let lines = trace.lines();
                if !lines.is_empty() {
                    kept_trace = Some(put(
                        crate::collections::TASK_TRACES,
                        &id.to_string(),
                        "",
                        &lines,
                    ));
                }
                outcome
            }
        };
        let (state, result) = match outcome {
            Ok(result) => (TaskState::Done, result),
            Err(e @ JobError::Cancelled) => (TaskState::Cancelled, e.to_string()),
            Err(JobError::Failed(error)) => (TaskState::Error, error.to_string()),
        };
        running.state = state;
        running.result = Some(result);
        running.finished_at = Some(core.unix_now());
        // A VM the task had made and could not record (the store refused), and could not
        // delete either, is settled while the deployment's lock is still held; tried
        // again with the end's record when the store refuses that too.
        let held = lock.as_ref().and(running.deployment.clone());
        let settle = || async {
            let Some(deployment) = held.as_deref() else {
                return;
            };
            let settled = crate::unsettled::settle(&*core.cpi, &core.records, Some(deployment));
            if let Err(e) = settled.await {
                tracing::warn!(task = id, error = %e, "VMs the task left unrecorded cannot be settled yet");
            }
        };
        settle().await;
        let record_end = || {
            let (ended, trace, lock) = (running.clone(), kept_trace.clone(), lock.clone());
            async move {
                let _writing = self.state_writes.lock().await;
                core.store
                    .run(move |s| {
                        // A trace that cannot be kept must not keep the task from ending.
                        if let Some(trace) = trace
                            && let Err(e) = s.write(vec![trace])
                        {
                            tracing::warn!(task = id, error = %e, "the task's trace was not kept");
                        }
                        // The lock goes before the end is shown: a client that sees the
                        // task ended starts the next task on the deployment at once (the
                        // ODB runs a lifecycle errand right after its deploy), as BOSH's
                        // director lets it.
                        if let Some(lock) = &lock {
                            s.release_lock(lock, id)?;
                        }
                        s.put_task(&ended)
                    })
                    .await
            }
        };
        if persist("record the end of", id, record_end).await.is_err() {
            // The store cannot be written (a full disk, a database gone away): the task
            // stays this process's until its end and the release of its lock are
            // written, tried again until they are, so that the deployment is not left
            // locked by a task nobody runs once the store heals.
            self.unrecorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id);
            tracing::error!(
                task = id,
                "the store cannot record the end of the task; trying again every {}s until it can",
                HEAL_EVERY.as_secs()
            );
            loop {
                tokio::time::sleep(HEAL_EVERY).await;
                settle().await;
                if record_end().await.is_ok() {
                    break;
                }
            }
            tracing::info!(task = id, "the store healed: the task's end is recorded");
            self.unrecorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
        self.traces_of().remove(&id);
        // The oldest tasks of its kind go, as the director keeps the last of each type.
        match core
            .store
            .prune_tasks(
                kind.spec(),
                core.settings.tasks_kept,
                crate::collections::PER_TASK,
            )
            .await
        {
            Ok(pruned) if !pruned.is_empty() => {
                tracing::debug!(task = id, pruned = pruned.len(), "old tasks pruned")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(task = id, error = %e, "old tasks were not pruned"),
        }
        metrics::gauge!("fleet_director_tasks_running", "kind" => kind.name()).decrement(1.0);
        metrics::counter!(
            "fleet_director_tasks_total",
            "kind" => kind.name(),
            "state" => running.state.as_str(),
        )
        .increment(1);
        // Only now is the task over for `idle` and `wait`: its lock is released (or
        // cannot be).
        self.flags().remove(&id);
        self.finished.notify_waiters();
    }

    /// Asks a running task to stop at its next safe point: what it started finishes,
    /// nothing new starts, and it ends as `cancelled`.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown task, [`DirectorError::Invalid`] for a
    /// task that has ended or that this process does not run.
    pub async fn cancel(&self, id: u64) -> Result<Task, DirectorError> {
        // Held across the read and the write: the task cannot record its end in between.
        let _writing = self.state_writes.lock().await;
        let invalid = |task: &Task| {
            DirectorError::Invalid(format!(
                "Cannot cancel task {id}: invalid state ({})",
                task.state.as_str()
            ))
        };
        let task = self.recorded(id).await?;
        if !matches!(task.state, TaskState::Queued | TaskState::Processing) {
            return Err(invalid(&task));
        }
        let flag = self.flags().get(&id).cloned();
        if flag.is_none() && !self.core.store.blocking().shared() {
            return Err(DirectorError::Invalid(format!(
                "Cannot cancel task {id}: it is not run by this director"
            )));
        }
        // Marked in the store, where the process that runs it (this one, or another on a
        // shared database, at its next renewal) finds it.
        let task =
            self.core
                .store
                .request_cancel(id)
                .await?
                .ok_or_else(|| DirectorError::NotFound {
                    what: format!("task {id}"),
                })?;
        if task.state != TaskState::Cancelling {
            return Err(invalid(&task));
        }
        if let Some(flag) = flag {
            flag.store(true, Ordering::SeqCst);
        }
        Ok(task)
    }

    /// Sets the cancellation flags of those of `ids` this process runs: tasks another
    /// process asked to cancel through the store.
    pub fn cancel_asked(&self, ids: &[u64]) {
        let flags = self.flags();
        for id in ids {
            if let Some(flag) = flags.get(id)
                && !flag.swap(true, Ordering::SeqCst)
            {
                tracing::info!(
                    task = id,
                    "cancellation asked through another director process"
                );
            }
        }
    }

    /// Tasks of this process whose end waits for the store to heal.
    pub fn unrecorded(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .unrecorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The ids of the tasks this process runs.
    pub fn running_ids(&self) -> Vec<u64> {
        self.flags().keys().copied().collect()
    }

    /// Cancels every task this process runs, for a shutdown; returns their ids.
    pub async fn cancel_running(&self) -> Vec<u64> {
        let ids: Vec<u64> = self.flags().keys().copied().collect();
        let mut cancelled = Vec::new();
        for id in ids {
            if self.cancel(id).await.is_ok() {
                cancelled.push(id);
            }
        }
        cancelled
    }

    /// Waits until no task of this process runs.
    pub async fn idle(&self) {
        loop {
            let notified = self.finished.notified();
            if self.flags().is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// Waits until the task has ended and returns it.
    ///
    /// # Errors
    /// [`DirectorError::NotFound`] for an unknown task; [`DirectorError::Invalid`] for a
    /// task this process does not run, which would otherwise be waited for forever. A
    /// task whose end waits for the store to heal is waited for.
    pub async fn wait(&self, id: u64) -> Result<Task, DirectorError> {
        loop {
            let notified = self.finished.notified();
            let task = self.recorded(id).await?;
            if !task.state.is_running() {
                return Ok(task);
            }
            if !self.flags().contains_key(&id) {
                // It may have ended since it was read: its end is recorded before it
                // leaves the runner, so this read is final.
                let task = self.recorded(id).await?;
                if !task.state.is_running() {
                    return Ok(task);
                }
                if self.core.store.blocking().shared() {
                    // Another director process runs it: its end is seen in the store,
                    // or its lease runs out and a survivor ends it.
                    tokio::time::sleep(OTHERS_POLLED_EVERY).await;
                    continue;
                }
                return Err(DirectorError::Invalid(format!(
                    "task {id} is recorded as {} but this director does not run it",
                    task.state.as_str()
                )));
            }
            notified.await;
        }
    }
}
