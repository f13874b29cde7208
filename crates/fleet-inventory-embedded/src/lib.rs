//! The embedded broker as an inventory, so that the rollout engine drives it through the
//! same trait as any other fleet.

use std::sync::Arc;

use serde_json::json;

use fleet_broker::{Answer, Broker, InstanceView, OperationStatus, State};
use fleet_director::model::TaskState;
use fleet_rollout::inventory::{
    Action, Instance, InstanceId, InstanceState, Inventory, InventoryError, LastOperation,
    LastOperationState, Operation, OperationState, Selection, Triggered,
};

pub struct EmbeddedInventory {
    broker: Arc<Broker>,
}

impl EmbeddedInventory {
    pub fn new(broker: Arc<Broker>) -> Self {
        EmbeddedInventory { broker }
    }
}

fn failure(e: impl std::fmt::Display) -> InventoryError {
    InventoryError::permanent(e.to_string())
}

fn instance(view: InstanceView) -> Instance {
    let last_operation = view.last_task.map(|task| LastOperation {
        kind: Some(task.description.clone()),
        state: match task.state {
            TaskState::Queued | TaskState::Processing | TaskState::Cancelling => {
                LastOperationState::InProgress
            }
            TaskState::Done => LastOperationState::Succeeded,
            TaskState::Error | TaskState::Cancelled => LastOperationState::Failed,
        },
        description: task.result.clone(),
        updated_at: None,
    });
    Instance {
        id: InstanceId(view.instance.id),
        plan_id: view.instance.plan_id,
        space_guid: view.instance.space_guid,
        deployment_name: Some(view.deployment),
        state: match view.state {
            State::Provisioned => InstanceState::Provisioned,
            State::Deploying => InstanceState::Deploying,
            State::Failed => InstanceState::Failed,
        },
        update_available: view.update_available,
        maintenance_updates_blocked: view.instance.maintenance_updates_blocked,
        last_operation,
    }
}

impl Inventory for EmbeddedInventory {
    async fn list(&self, selection: Selection) -> Result<Vec<Instance>, InventoryError> {
        Ok(self
            .broker
            .instances()
            .map_err(failure)?
            .into_iter()
            .map(instance)
            .filter(|i| selection.matches(i))
            .collect())
    }

    async fn instance(&self, id: &InstanceId) -> Result<Option<Instance>, InventoryError> {
        Ok(self.broker.instance(&id.0).map_err(failure)?.map(instance))
    }

    async fn trigger(
        &self,
        target: &Instance,
        action: Action,
        force: bool,
    ) -> Result<Triggered, InventoryError> {
        let id = &target.id.0;
        let (answer, kind) = match action {
            Action::Update => (self.broker.upgrade(id, force), "upgrade"),
            Action::Recreate { fix } => (self.broker.recreate(id, force, fix), "recreate"),
        };
        Ok(match answer.map_err(failure)? {
            Answer::Accepted { task } => Triggered::Accepted(Operation {
                instance: target.id.clone(),
                data: json!({ "BoshTaskID": task, "OperationType": kind }),
            }),
            Answer::UpToDate => Triggered::UpToDate,
            Answer::Blocked => Triggered::Blocked,
            Answer::Busy => Triggered::Busy,
            Answer::Deleted => Triggered::Deleted,
            Answer::Orphaned => Triggered::Orphaned,
        })
    }

    async fn poll(&self, operation: &Operation) -> Result<OperationState, InventoryError> {
        let task = operation
            .data
            .get("BoshTaskID")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| failure(format!("operation {} names no task", operation.data)))?;
        Ok(match self.broker.operation(task).map_err(failure)? {
            OperationStatus::InProgress => OperationState::InProgress { retry_after: None },
            OperationStatus::Succeeded => OperationState::Succeeded,
            OperationStatus::Failed(reason) => OperationState::Failed { reason },
        })
    }
}
