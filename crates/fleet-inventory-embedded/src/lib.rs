//! The embedded broker as an inventory, so that the rollout engine drives it through the
//! same trait as any other fleet.

mod addresses;
mod errand_check;

use std::sync::Arc;

use serde_json::json;

pub use addresses::Addresses;
pub use errand_check::ErrandCheck;

use fleet_broker::{Answer, Broker, BrokerError, Filter, InstanceView, OperationStatus, State};
use fleet_director::model::TaskState;
use fleet_rollout::inventory::{
    Action, Instance, InstanceContext, InstanceId, InstanceState, Inventory, InventoryError,
    LastOperation, LastOperationState, Operation, OperationState, Selection, Triggered,
};

pub struct EmbeddedInventory {
    broker: Arc<Broker>,
}

impl EmbeddedInventory {
    pub fn new(broker: Arc<Broker>) -> Self {
        EmbeddedInventory { broker }
    }
}

/// A read that met a busy store may be repeated; a trigger that did may have written
/// part of its work, so only reading the instance back can tell (ambiguous). Everything
/// else will fail the same way again.
fn failure(e: BrokerError) -> InventoryError {
    if !e.is_transient() {
        InventoryError::permanent(e.to_string())
    } else {
        InventoryError::transient(e.to_string())
    }
}

fn trigger_failure(e: BrokerError) -> InventoryError {
    if e.is_transient() {
        InventoryError::ambiguous(e.to_string())
    } else {
        InventoryError::permanent(e.to_string())
    }
}

/// The instance's organization and space, as a broker's listing gives them; none when it
/// has no placement.
fn placed(placement: &fleet_broker::Placement) -> Option<Box<InstanceContext>> {
    (placement.organization_name.is_some() || placement.space_name.is_some()).then(|| {
        Box::new(InstanceContext {
            organization_name: placement.organization_name.clone(),
            space_name: placement.space_name.clone(),
            ..InstanceContext::default()
        })
    })
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
        context: placed(&view.instance.placement),
    }
}

impl Inventory for EmbeddedInventory {
    async fn list(&self, selection: Selection) -> Result<Vec<Instance>, InventoryError> {
        let filter = match selection {
            Selection::All => Filter::All,
            Selection::Outdated => Filter::Outdated,
            Selection::Provisioned => Filter::Provisioned,
            Selection::Failed => Filter::Failed,
        };
        Ok(self
            .broker
            .instances_in(filter)
            .await
            .map_err(failure)?
            .into_iter()
            .map(instance)
            .collect())
    }

    async fn instance(&self, id: &InstanceId) -> Result<Option<Instance>, InventoryError> {
        Ok(self
            .broker
            .instance(&id.0)
            .await
            .map_err(failure)?
            .map(instance))
    }

    async fn trigger(
        &self,
        target: &Instance,
        action: Action,
        force: bool,
    ) -> Result<Triggered, InventoryError> {
        let id = &target.id.0;
        let kind = match action {
            Action::Update => "upgrade",
            Action::Recreate { .. } => "recreate",
        };
        let answer = match action {
            Action::Update => self.broker.upgrade(id, force).await,
            Action::Recreate { fix } => self.broker.recreate(id, force, fix).await,
        };
        Ok(match answer.map_err(trigger_failure)? {
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
        let task = operation.bosh_task()?;
        Ok(match self.broker.operation(task).await.map_err(failure)? {
            OperationStatus::InProgress => OperationState::InProgress { retry_after: None },
            OperationStatus::Succeeded => OperationState::Succeeded,
            OperationStatus::Failed(reason) => OperationState::Failed { reason },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_rollout::inventory::ErrorKind;
    use fleet_store::StoreError;

    fn busy() -> BrokerError {
        let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
        BrokerError::Store(StoreError::from(rusqlite::Error::SqliteFailure(code, None)))
    }

    #[test]
    fn a_busy_store_is_transient_for_reads_and_ambiguous_for_triggers() {
        assert_eq!(failure(busy()).kind, ErrorKind::Transient);
        assert_eq!(trigger_failure(busy()).kind, ErrorKind::Ambiguous);
        let unknown = BrokerError::UnknownPlan("p".into());
        assert_eq!(failure(unknown).kind, ErrorKind::Permanent);
        let unknown = BrokerError::UnknownPlan("p".into());
        assert_eq!(trigger_failure(unknown).kind, ErrorKind::Permanent);
    }
}
