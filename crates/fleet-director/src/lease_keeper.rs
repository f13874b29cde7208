//! On a database shared with other director processes, this one proves it is alive: it
//! renews its lease (and with it its locks) every third of the lock timeout, takes up the
//! cancellations other processes asked for, and ends the tasks of processes whose lease
//! ran out, releasing their locks.

use std::sync::{Arc, Weak};

use super::core::Core;
use super::runner::TaskRunner;
use fleet_store::{Recovery, StoreError};

/// The reason recorded on the tasks of a director process that stopped renewing.
pub const EXPIRED_REASON: &str = "the director process running this task stopped renewing its \
     lease (it stopped, or lost the database); its deployment is left as far as it got";

/// Renews until the director is dropped.
pub fn spawn(core: &Arc<Core>, runner: &Arc<TaskRunner>) {
    let (core, runner) = (Arc::downgrade(core), Arc::downgrade(runner));
    tokio::spawn(async move { keep(core, runner).await });
}

async fn keep(core: Weak<Core>, runner: Weak<TaskRunner>) {
    let every = match core.upgrade() {
        Some(core) => core.settings.lock_timeout / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let (Some(core), Some(runner)) = (core.upgrade(), runner.upgrade()) else {
            return;
        };
        if let Err(e) = renew(&core, &runner).await {
            tracing::warn!(error = %e, "cannot renew this director's lease; trying again");
        }
    }
}

/// One renewal: the lease, the cancellations asked, the recovery of the expired.
///
/// # Errors
/// A store error; the next renewal tries again.
pub async fn renew(core: &Core, runner: &TaskRunner) -> Result<(), StoreError> {
    let renewal = core.store.renew(core.lease()).await?;
    if renewal.was_lost {
        // Another process gave this one up for dead: its tasks were errored and its
        // locks released, so what it still runs must stop before it changes anything
        // another task may now hold.
        let running = runner.running_ids();
        tracing::error!(
            tasks = ?running,
            "this director's lease ran out before it was renewed; its running tasks are cancelled"
        );
        runner.cancel_asked(&running);
    }
    runner.cancel_asked(&renewal.cancelling);
    let recovered = core
        .store
        .recover(EXPIRED_REASON, core.now_ms(), Recovery::Expired)
        .await?;
    if !recovered.is_empty() {
        tracing::warn!(
            tasks = ?recovered,
            "tasks of a director process whose lease ran out were marked as errored"
        );
    }
    Ok(())
}
