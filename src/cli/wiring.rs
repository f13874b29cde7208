//! Builds the inventory that the configuration names and hands it to the run: the one
//! place where configuration meets the adapters.

use std::sync::Arc;

use fleet_updater::config::{Config, InventoryConfig};
use fleet_updater::fleet::Access;
use fleet_updater::inventory::broker_http::BrokerInventory;
use fleet_updater::inventory::director_http::DirectorInventory;
use fleet_updater::inventory::embedded::EmbeddedInventory;
use fleet_updater::inventory::scripted::load_scenario;
use fleet_updater::output::check_writable;
use fleet_updater::rollout::RequestLimiter;

use super::error::CliError;
use super::listing::open_fleet;
use super::run::drive;

/// Runs the rollout over the configured inventory. The HTTP inventories take a token of
/// the run's one limiter for every request they send; the others are paced per call by
/// the engine.
pub async fn run(config: Config) -> Result<u8, CliError> {
    if let Some(path) = &config.report_file {
        check_writable(path).map_err(|source| CliError::Unwritable {
            what: "report",
            path: path.clone(),
            source,
        })?;
    }
    let limiter = || RequestLimiter::new(config.requests_per_second);
    match &config.inventory {
        InventoryConfig::Scripted { scenario } => {
            drive(Arc::new(load_scenario(scenario)?), &config).await
        }
        InventoryConfig::Embedded => {
            let fleet = open_fleet(&config, Access::RUN).await?;
            let inventory = EmbeddedInventory::new(Arc::clone(&fleet.broker));
            let code = drive(Arc::new(inventory), &config).await;
            fleet.close().await;
            code
        }
        InventoryConfig::Broker(broker) => {
            let inventory =
                BrokerInventory::new(broker, limiter()).map_err(CliError::InventorySetup)?;
            drive(Arc::new(inventory), &config).await
        }
        InventoryConfig::Director(director) => {
            let inventory =
                DirectorInventory::new(director, limiter()).map_err(CliError::InventorySetup)?;
            drive(Arc::new(inventory), &config).await
        }
    }
}
