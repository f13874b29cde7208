//! The seam between the rollout engine and whatever knows the service instances.
//!
//! The engine sees only this trait, so one engine drives the embedded fleet, a real broker
//! and a real director, and is tested in virtual time against the scripted inventory.

mod criteria;
mod error;
mod types;

use std::future::Future;

pub use criteria::{Criteria, admits, describe as describe_criteria, matches};
pub use error::{ErrorKind, InventoryError};
pub use types::{
    Action, Instance, InstanceContext, InstanceId, InstanceState, LastOperation,
    LastOperationState, Operation, OperationState, Selection, Triggered,
};

/// Something that lists service instances and runs operations on them.
///
/// Futures are `Send` so that every accepted operation can be polled by its own task.
pub trait Inventory: Send + Sync + 'static {
    /// Lists the instances matching `selection`. Implementations whose server cannot
    /// filter return more and let the engine filter again.
    fn list(
        &self,
        selection: Selection,
    ) -> impl Future<Output = Result<Vec<Instance>, InventoryError>> + Send;

    /// Lists the instances that match `criteria`, listing parameters as the On-Demand
    /// Service Broker's management API takes them (`cf_org`, `cf_space`, `plan`, or a
    /// broker's own). Without a server that filters, every instance is listed and only
    /// those every criterion is judged true of here match (an instance without an org
    /// matches no `cf_org`).
    fn list_matching(
        &self,
        criteria: &Criteria,
    ) -> impl Future<Output = Result<Vec<Instance>, InventoryError>> + Send {
        async move {
            let all = self.list(Selection::All).await?;
            Ok(all.into_iter().filter(|i| matches(criteria, i)).collect())
        }
    }

    /// Reads one instance again, `None` when it no longer exists. Used after a trigger whose
    /// fate is unknown, so that it is never sent twice blindly.
    fn instance(
        &self,
        id: &InstanceId,
    ) -> impl Future<Output = Result<Option<Instance>, InventoryError>> + Send;

    /// Starts `action` on the instance. The whole listed instance is passed because brokers
    /// want its plan and context back with the request.
    fn trigger(
        &self,
        instance: &Instance,
        action: Action,
        force: bool,
    ) -> impl Future<Output = Result<Triggered, InventoryError>> + Send;

    fn poll(
        &self,
        operation: &Operation,
    ) -> impl Future<Output = Result<OperationState, InventoryError>> + Send;

    /// `true` when the inventory takes a token of the run's [`crate::RequestLimiter`] for
    /// every request it sends, because one call may send several (a token grant, a
    /// manifest, a task). The engine then takes none per call, so that the limit counts
    /// requests, as the operator means it.
    fn limits_each_request(&self) -> bool {
        false
    }
}
