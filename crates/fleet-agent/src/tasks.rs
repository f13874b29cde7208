//! The agent's long actions as tasks: each runs in the background, one at a time as on
//! BOSH's agent, and `get_task` tells whether it still runs, what it answered, or why it
//! failed.

use super::error::ActionError;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Running,
    Done(Value),
    Failed(String),
}

#[derive(Default, Clone)]
pub struct Tasks {
    states: Arc<Mutex<HashMap<String, TaskState>>>,
    /// Held while a task runs: the next waits for it.
    serial: Arc<tokio::sync::Mutex<()>>,
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

impl Tasks {
    /// Starts `work` after the tasks before it; its id.
    pub fn start<F>(&self, work: F) -> String
    where
        F: Future<Output = Result<Value, ActionError>> + Send + 'static,
    {
        let id = new_id();
        self.set(&id, TaskState::Running);
        let (tasks, task) = (self.clone(), id.clone());
        tokio::spawn(async move {
            let _turn = tasks.serial.lock().await;
            // Run apart, so that one that panics is a failed task, not one polled forever.
            let state = match tokio::spawn(work).await {
                Ok(Ok(value)) => TaskState::Done(value),
                Ok(Err(e)) => TaskState::Failed(e.to_string()),
                Err(e) => TaskState::Failed(format!("the action ended abruptly: {e}")),
            };
            tasks.set(&task, state);
        });
        id
    }

    fn set(&self, id: &str, state: TaskState) {
        self.states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), state);
    }

    pub fn state(&self, id: &str) -> Option<TaskState> {
        self.states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_is_failed_and_the_next_runs() {
        let tasks = Tasks::default();
        let panicked = tasks.start(async { panic!("a bug") });
        let next = tasks.start(async { Ok(Value::from("done")) });
        for _ in 0..200 {
            if tasks.state(&next) != Some(TaskState::Running) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            tasks.state(&next),
            Some(TaskState::Done(Value::from("done")))
        );
        match tasks.state(&panicked) {
            Some(TaskState::Failed(message)) => {
                assert!(message.contains("ended abruptly"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}
