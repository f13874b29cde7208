//! Tasks and their event logs, as the store keeps them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Processing,
    /// Cancellation was asked for; the task stops at its next safe point.
    Cancelling,
    Done,
    Error,
    Cancelled,
}

impl TaskState {
    pub const ALL: [TaskState; 6] = [
        TaskState::Queued,
        TaskState::Processing,
        TaskState::Cancelling,
        TaskState::Done,
        TaskState::Error,
        TaskState::Cancelled,
    ];

    pub fn is_running(self) -> bool {
        matches!(
            self,
            TaskState::Queued | TaskState::Processing | TaskState::Cancelling
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Processing => "processing",
            TaskState::Cancelling => "cancelling",
            TaskState::Done => "done",
            TaskState::Error => "error",
            TaskState::Cancelled => "cancelled",
        }
    }
}

/// A kind of task as the layer that runs it declares it (the director's task kinds): the
/// store keeps its name and description with each task, and whether it changes its
/// deployment (a read-only task is nobody's last operation), and knows no kind by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskKindSpec {
    /// Stored with each task and matched by [`Store::prune_tasks`](crate::Store::prune_tasks).
    pub name: &'static str,
    /// What the task shows as its description.
    pub description: &'static str,
    pub changes_deployment: bool,
}

/// Which tasks a listing wants, newest first; the store answers it with one query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub deployment: Option<String>,
    /// Any of these states; all states when `None`.
    pub states: Option<Vec<TaskState>>,
    /// Read-only tasks too; BOSH lists them only when asked (`verbose=2`).
    pub read_only: bool,
    /// Only the tasks started with this context id.
    pub context_id: Option<String>,
    pub limit: Option<usize>,
}

/// A background operation of the director, as `GET /tasks/:id` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: u64,
    pub state: TaskState,
    /// Its kind's [`TaskKindSpec::name`]; empty for a task written before kinds were
    /// stored, until [`Store::name_unnamed_tasks`](crate::Store::name_unnamed_tasks) names
    /// it.
    #[serde(default)]
    pub kind: String,
    pub description: String,
    pub deployment: Option<String>,
    /// What happened, in one line: the outcome of a finished task or its error.
    pub result: Option<String>,
    /// Unix seconds.
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
    /// Who asked for it: the signed-in user of the request that started it.
    #[serde(default)]
    pub user: Option<String>,
    /// What the client that started it groups its tasks by (`X-Bosh-Context-Id`): the
    /// ODB finds a service instance's deploy and lifecycle errands by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    Started,
    Finished,
    Failed,
}

/// One line of a task's event log, in the director's event format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub time: u64,
    pub stage: String,
    pub tags: Vec<String>,
    pub task: String,
    pub index: u32,
    pub total: u32,
    pub state: EventState,
    pub progress: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Task {
    /// A task as created: queued, started `started_at` (Unix seconds).
    pub(crate) fn queued(
        id: u64,
        kind: TaskKindSpec,
        deployment: Option<&str>,
        user: Option<&str>,
        started_at: u64,
    ) -> Task {
        Task {
            id,
            state: TaskState::Queued,
            kind: kind.name.to_string(),
            description: kind.description.to_string(),
            deployment: deployment.map(str::to_string),
            result: None,
            started_at: Some(started_at),
            finished_at: None,
            user: user.map(str::to_string),
            context_id: None,
        }
    }

    /// The task ended in error with `reason` at `at` (Unix seconds), as recovery ends
    /// the tasks of a process that is gone.
    pub(crate) fn errored(mut self, reason: &str, at: u64) -> Task {
        self.state = TaskState::Error;
        self.result = Some(reason.to_string());
        self.finished_at = Some(at);
        self
    }

    /// Marks a queued or processing task `cancelling`; whether it did.
    pub(crate) fn ask_to_cancel(&mut self) -> bool {
        let running = matches!(self.state, TaskState::Queued | TaskState::Processing);
        if running {
            self.state = TaskState::Cancelling;
        }
        running
    }
}

/// A task as the stores keep it, in JSON.
pub(crate) fn task_from(body: &str) -> Result<Task, crate::StoreError> {
    Ok(serde_json::from_str(body)?)
}

/// What a write of `task` over a stored task in state `stored` records, if anything: a
/// task asked to cancel stays `cancelling` while it runs (another process may have asked
/// while this one wrote), and a task that has ended stays ended (a process given up for
/// dead may still write its end after a survivor errored it).
pub(crate) fn written_over(stored: &str, mut task: Task) -> Option<Task> {
    let ended = |s: &str| matches!(s, "done" | "error" | "cancelled");
    if ended(stored) && task.state.as_str() != stored {
        return None;
    }
    if stored == "cancelling" && matches!(task.state, TaskState::Queued | TaskState::Processing) {
        task.state = TaskState::Cancelling;
    }
    Some(task)
}

/// A task's stored body named by its description, as one of `kinds` describes itself, else
/// as `fallback`: the kind and the body to store.
pub(crate) fn named(
    body: &str,
    kinds: &[TaskKindSpec],
    fallback: TaskKindSpec,
) -> Result<(TaskKindSpec, String), serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(body)?;
    let description = value["description"].as_str().unwrap_or_default();
    let kind = kinds
        .iter()
        .copied()
        .find(|k| k.description == description)
        .unwrap_or(fallback);
    value["kind"] = serde_json::Value::String(kind.name.to_string());
    Ok((kind, value.to_string()))
}
