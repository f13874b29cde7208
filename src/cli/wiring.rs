//! Builds the inventory that the configuration names and hands it to the run: the one
//! place where configuration meets the adapters.

use std::sync::Arc;

use fleet_updater::canary_check::from_config;
use fleet_updater::config::{Config, InventoryConfig};
use fleet_updater::fleet::Access;
use fleet_updater::inventory::broker_http::BrokerInventory;
use fleet_updater::inventory::director_http::{
    Addresses as DirectorAddresses, DirectorInventory, ErrandCheck as DirectorErrandCheck,
};
use fleet_updater::inventory::embedded::{
    Addresses as EmbeddedAddresses, EmbeddedInventory, ErrandCheck,
};
use fleet_updater::inventory::scripted::load_scenario;
use fleet_updater::output::check_writable;
use fleet_updater::rollout::RequestLimiter;

use super::error::CliError;
use super::run::{drive, write_metrics};
use super::state::open_fleet;
use super::window;
use fleet_updater::clock::WallClock;
use fleet_updater::output::RunMetrics;

/// Runs the rollout over the configured inventory. The HTTP inventories take a token of
/// the run's one limiter for every request they send; the others are paced per call by
/// the engine.
pub async fn run(config: Config) -> Result<u8, CliError> {
    let outputs = [
        ("report", &config.report_file),
        ("metrics", &config.metrics_file),
    ];
    for (what, file) in outputs {
        if let Some(path) = file {
            check_writable(path).map_err(|source| CliError::Unwritable {
                what,
                path: path.clone(),
                source,
            })?;
        }
    }
    let clock = WallClock::new();
    let started_at = clock.now();
    let window = match window::check(&config, &clock)? {
        window::Start::Outside(code) => return Ok(code),
        window::Start::Run(window) => window,
    };
    let outcome = run_inventory(&config, window, started_at).await;
    // A run that ended in an error (a listing that failed, another run going on) is a run
    // monitoring must see too.
    if let Err(e) = &outcome
        && !config.dry_run
    {
        let metrics = RunMetrics {
            strategy: config.settings().strategy.name(),
            status: "failed",
            started_at,
            finished_at: clock.now(),
            exit_code: e.exit_code(),
            counts: None,
        };
        if let Err(e) = write_metrics(&config, &metrics) {
            tracing::warn!(error = %e, "the metrics of the failed run are not written");
        }
    }
    outcome
}

async fn run_inventory(
    config: &Config,
    window: Option<fleet_updater::rollout::WindowClose>,
    started_at: std::time::SystemTime,
) -> Result<u8, CliError> {
    let limiter = || RequestLimiter::new(config.requests_per_second);
    match &config.inventory {
        InventoryConfig::Scripted { scenario } => {
            let check = from_config(config.canary_check.as_ref(), None, |_, _| None);
            drive(
                Arc::new(load_scenario(scenario)?),
                config,
                check,
                window,
                started_at,
            )
            .await
        }
        InventoryConfig::Embedded => {
            let fleet = open_fleet(config, Access::RUN).await?;
            let broker = &fleet.broker;
            let check = from_config(
                config.canary_check.as_ref(),
                Some(Arc::new(EmbeddedAddresses(Arc::clone(broker)))),
                |name, limit| Some(Arc::new(ErrandCheck::new(Arc::clone(broker), name, limit))),
            );
            let inventory = EmbeddedInventory::new(Arc::clone(&fleet.broker));
            let code = drive(Arc::new(inventory), config, check, window, started_at).await;
            fleet.close().await;
            code
        }
        InventoryConfig::Broker(broker) => {
            let check = from_config(config.canary_check.as_ref(), None, |_, _| None);
            let inventory =
                BrokerInventory::new(broker, limiter()).map_err(CliError::InventorySetup)?;
            drive(Arc::new(inventory), config, check, window, started_at).await
        }
        InventoryConfig::Director(director) => {
            let inventory = Arc::new(
                DirectorInventory::new(director, limiter()).map_err(CliError::InventorySetup)?,
            );
            let check = from_config(
                config.canary_check.as_ref(),
                Some(Arc::new(DirectorAddresses(Arc::clone(&inventory)))),
                |name, limit| {
                    let errand = DirectorErrandCheck::new(
                        Arc::clone(&inventory),
                        name,
                        limit,
                        config.poll_interval,
                    );
                    Some(Arc::new(errand))
                },
            );
            drive(inventory, config, check, window, started_at).await
        }
    }
}
