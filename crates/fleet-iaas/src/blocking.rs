//! Work on the process IaaS's records (files written and synced, trees copied or
//! removed) run on tokio's blocking pool: every CPI call that changes the IaaS does some,
//! whether the director makes it in process or `fleet-updater cpi` answers it.

use fleet_vm::iaas::{IaasError, ProcessIaas};
use tokio::task::JoinError;

/// Runs `work` on a clone of `iaas` on the blocking pool; the outer error is the pool's.
pub(crate) async fn on_iaas<T: Send + 'static>(
    iaas: &ProcessIaas,
    work: impl FnOnce(&ProcessIaas) -> Result<T, IaasError> + Send + 'static,
) -> Result<Result<T, IaasError>, JoinError> {
    let iaas = iaas.clone();
    tokio::task::spawn_blocking(move || work(&iaas)).await
}
