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
            let state = match work.await {
                Ok(value) => TaskState::Done(value),
                Err(e) => TaskState::Failed(e.to_string()),
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
