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

/// A background operation of the director, as `GET /tasks/:id` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: u64,
    pub state: TaskState,
    pub description: String,
    pub deployment: Option<String>,
    /// What happened, in one line: the outcome of a finished task or its error.
    pub result: Option<String>,
    /// Unix seconds.
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
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
