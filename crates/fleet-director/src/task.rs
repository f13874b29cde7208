//! A task's event log: stages of numbered steps, each started and then finished or
//! failed. A writer of its own puts them in the store as they happen, as many to a
//! transaction as have come while the last was written, so that steps never wait for the
//! disk and a large deploy does not pay one transaction per event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::error::StepError;
use super::model::{EventState, TaskEvent};
use fleet_clock::WallClock;
use fleet_store::AsyncStore;
use tokio::sync::{mpsc, oneshot};

/// How a task's job ends when it does not succeed. Cancellation is its own variant, so
/// that only the cancellation itself makes a task `cancelled`: a failure that came first
/// stays an error.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Cancellation was asked for and the job stopped at a safe point.
    #[error("the task was cancelled")]
    Cancelled,
    /// A step failed; its message becomes the task's result.
    #[error(transparent)]
    Failed(StepError),
}

impl From<StepError> for JobError {
    fn from(e: StepError) -> Self {
        match e {
            StepError::Stopped(_) => JobError::Cancelled,
            e => JobError::Failed(e),
        }
    }
}

impl From<fleet_store::StoreError> for JobError {
    fn from(e: fleet_store::StoreError) -> Self {
        JobError::Failed(e.into())
    }
}

/// What the writer of a task's events is handed.
enum Entry {
    Event(TaskEvent),
    /// Answered once every event sent before it is written (or failed to be).
    Flush(oneshot::Sender<()>),
}

/// How often a long step looks whether its task was cancelled.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(250);

#[derive(Clone)]
pub struct TaskLog {
    task: u64,
    entries: mpsc::UnboundedSender<Entry>,
    /// Set when cancellation is asked for; the job looks at it between steps, so that
    /// what it started finishes and nothing new starts.
    cancel: Arc<AtomicBool>,
    /// What events are stamped with.
    clock: WallClock,
}

impl TaskLog {
    /// The log of `task`, with its writer running until every copy of the log is gone.
    pub fn start(task: u64, store: AsyncStore, cancel: Arc<AtomicBool>, clock: WallClock) -> Self {
        let (entries, received) = mpsc::unbounded_channel();
        tokio::spawn(write_events(task, store, received));
        TaskLog {
            task,
            entries,
            cancel,
            clock,
        }
    }

    /// The task this is the log of.
    pub fn task(&self) -> u64 {
        self.task
    }

    /// Waits until every event logged so far is written.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.entries.send(Entry::Flush(done)).is_ok() {
            // A writer that is gone has nothing left to write.
            let _ = written.await;
        }
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// Returns once cancellation is asked for.
    async fn until_cancelled(&self) {
        while !self.cancelled() {
            tokio::time::sleep(CANCEL_POLL).await;
        }
    }

    /// `work`'s outcome, or [`StepError::Stopped`] naming `what` once the task is
    /// cancelled: what a step that waits long on an agent (an errand's run, a
    /// compilation, a log fetch) does, so that a cancelled task stops within a moment
    /// rather than at its next safe point. The work is dropped, which ends it: an
    /// agent's call ends with its future (a script's process group with it).
    ///
    /// # Errors
    /// [`StepError::Stopped`], which ends the task cancelled.
    pub async fn unless_cancelled<T>(
        &self,
        what: impl FnOnce() -> String,
        work: impl Future<Output = T>,
    ) -> Result<T, StepError> {
        tokio::select! {
            done = work => Ok(done),
            () = self.until_cancelled() => Err(StepError::Stopped(what())),
        }
    }

    /// A safe point: ends the job when cancellation was asked for.
    pub fn check(&self) -> Result<(), JobError> {
        if self.cancelled() {
            Err(JobError::Cancelled)
        } else {
            Ok(())
        }
    }

    pub fn stage(&self, name: &str, tags: Vec<String>, total: u32) -> Stage {
        Stage {
            log: self.clone(),
            name: name.to_string(),
            tags,
            total,
            next: Arc::new(AtomicU32::new(0)),
        }
    }

    fn write(&self, event: TaskEvent) {
        // The writer outlives every copy of the log, so a send cannot fail while one exists.
        let _ = self.entries.send(Entry::Event(event));
    }
}

/// Writes a task's events in the order logged, each batch in one transaction.
async fn write_events(task: u64, store: AsyncStore, mut received: mpsc::UnboundedReceiver<Entry>) {
    while let Some(first) = received.recv().await {
        let mut events = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(entry) = next {
            match entry {
                Entry::Event(event) => events.push(event),
                Entry::Flush(done) => flushes.push(done),
            }
            next = received.try_recv().ok();
        }
        // The event log is a record of what happened; failing to write it must not
        // change what happens.
        if !events.is_empty()
            && let Err(e) = store.append_events(task, events).await
        {
            tracing::warn!(task, error = %e, "cannot record task events");
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// One stage of a task, such as "Updating instance"; steps are numbered in start order.
#[derive(Clone)]
pub struct Stage {
    log: TaskLog,
    name: String,
    tags: Vec<String>,
    total: u32,
    next: Arc<AtomicU32>,
}

/// A started step; it ends as finished or failed.
pub struct Step {
    stage: Stage,
    task: String,
    index: u32,
}

impl Stage {
    pub fn cancelled(&self) -> bool {
        self.log.cancelled()
    }

    pub fn start(&self, task: impl Into<String>) -> Step {
        let index = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let step = Step {
            stage: self.clone(),
            task: task.into(),
            index,
        };
        step.write(EventState::Started, 0, None);
        step
    }
}

impl Step {
    fn write(&self, state: EventState, progress: u32, error: Option<String>) {
        self.stage.log.write(TaskEvent {
            time: self.stage.log.clock.unix_secs(),
            stage: self.stage.name.clone(),
            tags: self.stage.tags.clone(),
            task: self.task.clone(),
            index: self.index,
            total: self.stage.total,
            state,
            progress,
            error,
        });
    }

    pub fn finish(self) {
        self.write(EventState::Finished, 100, None);
    }

    pub fn fail(self, error: &str) {
        self.write(EventState::Failed, 100, Some(error.to_string()));
    }

    /// Ends the step by the outcome of `result`, passing it on.
    pub fn end<T>(self, result: Result<T, StepError>) -> Result<T, StepError> {
        match &result {
            Ok(_) => self.finish(),
            Err(e) => self.fail(&e.to_string()),
        }
        result
    }
}
