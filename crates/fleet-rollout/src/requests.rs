//! Every inventory request of a run goes through here: one rate limiter, and retries with
//! backoff for faults that certainly had no effect.

use std::future::Future;
use std::sync::Arc;

use super::limiter::RequestLimiter;
use super::settings::{Backoff, Rate};
use crate::inventory::{
    Action, ErrorKind, Instance, InstanceId, Inventory, InventoryError, Operation, OperationState,
    Selection, Triggered,
};

pub struct Requests<I> {
    inventory: Arc<I>,
    limiter: RequestLimiter,
    backoff: Backoff,
}

impl<I: Inventory> Requests<I> {
    pub fn new(inventory: Arc<I>, requests_per_second: Rate, backoff: Backoff) -> Self {
        Requests {
            inventory,
            limiter: RequestLimiter::new(requests_per_second),
            backoff,
        }
    }

    /// Retries faults that had no effect; for reads (`idempotent`) also those whose fate is
    /// unknown, since reading twice harms nothing.
    async fn with_retries<T, F, Fut>(
        &self,
        idempotent: bool,
        mut request: F,
    ) -> Result<T, InventoryError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, InventoryError>>,
    {
        let waits = fleet_clock::Doubling {
            first: self.backoff.initial,
            max: self.backoff.max,
        };
        let mut attempt = 1;
        let pace_calls = !self.inventory.limits_each_request();
        loop {
            if pace_calls {
                self.limiter.acquire().await;
            }
            let retryable = |e: &InventoryError| {
                e.is_transient() || (idempotent && e.kind == ErrorKind::Ambiguous)
            };
            match request().await {
                Err(e) if retryable(&e) && attempt < self.backoff.attempts => {
                    tracing::warn!(error = %e, attempt, "inventory request failed; retrying");
                    tokio::time::sleep(waits.after(attempt)).await;
                    attempt += 1;
                }
                Err(e) if retryable(&e) => {
                    return Err(InventoryError {
                        message: format!("{} (after {attempt} attempts)", e.message),
                        ..e
                    });
                }
                other => return other,
            }
        }
    }

    pub async fn list(&self, selection: Selection) -> Result<Vec<Instance>, InventoryError> {
        self.with_retries(true, || self.inventory.list(selection))
            .await
    }

    pub async fn list_matching(
        &self,
        criteria: &crate::inventory::Criteria,
    ) -> Result<Vec<Instance>, InventoryError> {
        self.with_retries(true, || self.inventory.list_matching(criteria))
            .await
    }

    pub async fn instance(&self, id: &InstanceId) -> Result<Option<Instance>, InventoryError> {
        self.with_retries(true, || self.inventory.instance(id))
            .await
    }

    /// Transient faults are retried because they never reached the server; an ambiguous
    /// one is returned at once for the caller to read the instance back.
    pub async fn trigger(
        &self,
        instance: &Instance,
        action: Action,
        force: bool,
    ) -> Result<Triggered, InventoryError> {
        self.with_retries(false, || self.inventory.trigger(instance, action, force))
            .await
    }

    pub async fn poll(&self, operation: &Operation) -> Result<OperationState, InventoryError> {
        self.with_retries(true, || self.inventory.poll(operation))
            .await
    }
}
