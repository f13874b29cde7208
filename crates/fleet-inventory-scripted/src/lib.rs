//! An in-memory inventory that answers from per-instance scripts.
//!
//! The engine tests and benchmarks drive it in virtual time, and `inventory.type: scripted`
//! replays a scenario file through the real CLI, which rehearses a rollout's settings
//! (canaries, parallelism, retry rounds) without touching a fleet. It records every request
//! so that tests can check what the engine did, not just what it reported.

mod scenario;
mod step;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

pub use scenario::{ScenarioError, load_scenario};
pub use step::{Step, StepError, parse_steps};

use fleet_rollout::inventory::{
    Action, Instance, InstanceId, InstanceState, Inventory, InventoryError, LastOperation,
    LastOperationState, Operation, OperationState, Selection, Triggered,
};

/// What a `list` call answers, in order; once exhausted, listing succeeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStep {
    Unavailable,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallKind {
    List,
    Read(InstanceId),
    Trigger {
        id: InstanceId,
        action: Action,
        force: bool,
    },
    Poll(InstanceId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub at: Instant,
    pub kind: CallKind,
}

struct Scripted {
    instance: Instance,
    script: VecDeque<Step>,
    /// When a trigger whose answer was lost started an operation; it runs for the `runs`
    /// step that follows `lost` in the script, or ends at the first look.
    lost_operation: Option<Instant>,
}

struct RunningOperation {
    accepted_at: Instant,
}

#[derive(Default)]
struct State {
    instances: Vec<Scripted>,
    index: HashMap<InstanceId, usize>,
    list_script: VecDeque<ListStep>,
    calls: Vec<Call>,
    running: HashMap<InstanceId, RunningOperation>,
    peak_running: usize,
    next_operation: u64,
    /// Off for benchmarks, whose call log would otherwise dominate memory.
    quiet: bool,
}

/// Cloning shares the state, so a test keeps a handle while the engine owns another.
#[derive(Clone, Default)]
pub struct ScriptedInventory {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ScriptedInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedInventory")
            .field("instances", &self.lock().instances.len())
            .finish()
    }
}

impl ScriptedInventory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an instance with its script; a later instance with the same id replaces it.
    pub fn with(self, instance: Instance, script: impl IntoIterator<Item = Step>) -> Self {
        {
            let mut state = self.lock();
            let id = instance.id.clone();
            let scripted = Scripted {
                instance,
                script: script.into_iter().collect(),
                lost_operation: None,
            };
            match state.index.get(&id) {
                Some(&i) => state.instances[i] = scripted,
                None => {
                    let i = state.instances.len();
                    state.instances.push(scripted);
                    state.index.insert(id, i);
                }
            }
        }
        self
    }

    /// Stops recording calls; counts such as [`Self::peak_running`] are still kept.
    pub fn quiet(self) -> Self {
        self.lock().quiet = true;
        self
    }

    pub fn with_list_script(self, steps: impl IntoIterator<Item = ListStep>) -> Self {
        self.lock().list_script.extend(steps);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("scripted inventory lock poisoned")
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Trigger calls, in order, as (time, instance).
    pub fn triggers(&self) -> Vec<(Instant, InstanceId)> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match &c.kind {
                CallKind::Trigger { id, .. } => Some((c.at, id.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn triggers_of(&self, id: &str) -> Vec<Instant> {
        self.triggers()
            .into_iter()
            .filter(|(_, i)| i.0 == id)
            .map(|(at, _)| at)
            .collect()
    }

    /// The most operations that were running at once, as the inventory saw them.
    pub fn peak_running(&self) -> usize {
        self.lock().peak_running
    }

    fn record(state: &mut State, kind: CallKind) {
        if state.quiet {
            return;
        }
        state.calls.push(Call {
            at: Instant::now(),
            kind,
        });
    }
}

impl State {
    fn scripted(&mut self, id: &InstanceId) -> Option<&mut Scripted> {
        let i = *self.index.get(id)?;
        Some(&mut self.instances[i])
    }

    fn run_operation(&mut self, id: &InstanceId) {
        self.running.insert(
            id.clone(),
            RunningOperation {
                accepted_at: Instant::now(),
            },
        );
        self.peak_running = self.peak_running.max(self.running.len());
    }

    /// Ends the lost operation of `id` once its time is up; true while it still runs.
    fn lost_operation_running(&mut self, id: &InstanceId) -> bool {
        let Some(scripted) = self.scripted(id) else {
            return false;
        };
        let Some(started) = scripted.lost_operation else {
            return false;
        };
        if let Some(Step::Runs(d)) = scripted.script.front() {
            if Instant::now() < started + *d {
                return true;
            }
            scripted.script.pop_front();
        }
        scripted.lost_operation = None;
        scripted.instance.update_available = false;
        self.running.remove(id);
        false
    }

    fn start_operation(&mut self, id: &InstanceId) -> Operation {
        self.run_operation(id);
        self.next_operation += 1;
        Operation {
            instance: id.clone(),
            data: serde_json::json!({ "BoshTaskID": self.next_operation }),
        }
    }

    fn view(scripted: &Scripted) -> Instance {
        let mut instance = scripted.instance.clone();
        if scripted.lost_operation.is_some() {
            instance.last_operation = Some(LastOperation {
                kind: Some("update".into()),
                state: LastOperationState::InProgress,
                description: None,
                updated_at: None,
            });
        }
        instance
    }
}

impl Inventory for ScriptedInventory {
    async fn list(&self, selection: Selection) -> Result<Vec<Instance>, InventoryError> {
        let mut state = self.lock();
        Self::record(&mut state, CallKind::List);
        match state.list_script.pop_front() {
            Some(ListStep::Unavailable) => {
                return Err(InventoryError::transient("connection refused (scripted)"));
            }
            Some(ListStep::Error) => {
                return Err(InventoryError::permanent(
                    "listing answered 500 Internal Server Error (scripted)",
                ));
            }
            None => {}
        }
        let ids: Vec<InstanceId> = state
            .instances
            .iter()
            .map(|s| s.instance.id.clone())
            .collect();
        for id in &ids {
            state.lost_operation_running(id);
        }
        Ok(state
            .instances
            .iter()
            .map(State::view)
            .filter(|i| selection.matches(i))
            .collect())
    }

    async fn instance(&self, id: &InstanceId) -> Result<Option<Instance>, InventoryError> {
        let mut state = self.lock();
        Self::record(&mut state, CallKind::Read(id.clone()));
        state.lost_operation_running(id);
        Ok(state.scripted(id).map(|s| State::view(s)))
    }

    async fn trigger(
        &self,
        instance: &Instance,
        action: Action,
        force: bool,
    ) -> Result<Triggered, InventoryError> {
        let mut state = self.lock();
        let id = instance.id.clone();
        Self::record(
            &mut state,
            CallKind::Trigger {
                id: id.clone(),
                action,
                force,
            },
        );
        if state.lost_operation_running(&id) {
            return Ok(Triggered::Busy);
        }
        let Some(scripted) = state.scripted(&id) else {
            return Ok(Triggered::Deleted);
        };
        let blocked = scripted.instance.maintenance_updates_blocked && !force;
        let step = match scripted.script.front() {
            None => return Ok(Triggered::UpToDate),
            Some(step) if step.answers_poll() => Step::Accepted,
            Some(_) => scripted.script.pop_front().expect("front exists"),
        };
        if blocked && step == Step::Accepted {
            return Ok(Triggered::Blocked);
        }
        Ok(match step {
            Step::Accepted => Triggered::Accepted(state.start_operation(&id)),
            Step::Busy => Triggered::Busy,
            Step::UpToDate => Triggered::UpToDate,
            Step::Blocked => Triggered::Blocked,
            Step::Deleted => {
                if let Some(s) = state.scripted(&id) {
                    s.instance.state = InstanceState::Deleted;
                }
                Triggered::Deleted
            }
            Step::Orphaned => Triggered::Orphaned,
            Step::Error => {
                return Err(InventoryError::permanent(
                    "trigger answered 500: deployment failed to start (scripted)",
                ));
            }
            Step::Unavailable => {
                return Err(InventoryError::transient("connection refused (scripted)"));
            }
            Step::Lost => {
                state.run_operation(&id);
                if let Some(s) = state.scripted(&id) {
                    s.lost_operation = Some(Instant::now());
                }
                return Err(InventoryError::ambiguous(
                    "timed out after the trigger was sent (scripted)",
                ));
            }
            poll_step => unreachable!("poll step {poll_step} is never popped by a trigger"),
        })
    }

    async fn poll(&self, operation: &Operation) -> Result<OperationState, InventoryError> {
        let mut state = self.lock();
        let id = operation.instance.clone();
        Self::record(&mut state, CallKind::Poll(id.clone()));
        let Some(accepted_at) = state.running.get(&id).map(|r| r.accepted_at) else {
            return Err(InventoryError::permanent(format!(
                "no operation is running on {id}"
            )));
        };
        let answer = loop {
            let Some(scripted) = state.scripted(&id) else {
                break OperationState::Deleted;
            };
            let step = match scripted.script.front() {
                Some(step) if step.answers_poll() => step.clone(),
                _ => break OperationState::Succeeded,
            };
            if let Step::Runs(d) = step {
                if Instant::now() < accepted_at + d {
                    return Ok(OperationState::InProgress { retry_after: None });
                }
                scripted.script.pop_front();
                continue;
            }
            scripted.script.pop_front();
            break match step {
                Step::InProgress => return Ok(OperationState::InProgress { retry_after: None }),
                Step::InProgressRetryAfter(d) => {
                    return Ok(OperationState::InProgress {
                        retry_after: Some(d),
                    });
                }
                Step::PollUnavailable => {
                    return Err(InventoryError::transient("connection refused (scripted)"));
                }
                Step::Succeeded => OperationState::Succeeded,
                Step::Failed => OperationState::Failed {
                    reason: "bosh task failed: job failed to start (scripted)".into(),
                },
                Step::Gone => OperationState::Deleted,
                trigger_step => unreachable!("trigger step {trigger_step} answers no poll"),
            };
        };
        if let Some(scripted) = state.scripted(&id)
            && answer == OperationState::Succeeded
        {
            scripted.instance.update_available = false;
        }
        state.running.remove(&id);
        Ok(answer)
    }
}
