use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use fleet_director::sim::Fault;
use fleet_inventory_broker::ServiceBroker;
use fleet_inventory_director::DirectorEndpoint;
use fleet_rollout::inventory::Selection;
use fleet_rollout::{Backoff, Rate, Settings, Strategy};
use fleet_serve::ServeConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    Update,
    Recreate,
}

impl StrategyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::Update => "update",
            StrategyKind::Recreate => "recreate",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpdateConfig {
    pub instance_type: Selection,
    pub force_update: bool,
    pub max_in_parallel: NonZeroUsize,
    pub canaries: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RecreateConfig {
    pub max_in_parallel: NonZeroUsize,
    pub canaries: usize,
    /// Recreate VMs with unresponsive agents too (`bosh recreate --fix`).
    pub fix: bool,
    /// Recreate instances whose owner blocked updates too (the default: recreating is
    /// what a NATS certificate rotation needs of every VM).
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InventoryKind {
    Embedded,
    Broker,
    Director,
    Scripted,
}

/// Which fleet a run drives, with what that fleet needs, as one value: a broker inventory
/// without its endpoint cannot be represented.
#[derive(Debug, Clone, PartialEq)]
pub enum InventoryConfig {
    /// The embedded default fleet, as the `embedded` block defines it.
    Embedded,
    Broker(ServiceBroker),
    Director(DirectorEndpoint),
    /// A scenario file, resolved against the config's folder.
    Scripted {
        scenario: PathBuf,
    },
}

impl InventoryConfig {
    pub fn kind(&self) -> InventoryKind {
        match self {
            InventoryConfig::Embedded => InventoryKind::Embedded,
            InventoryConfig::Broker(_) => InventoryKind::Broker,
            InventoryConfig::Director(_) => InventoryKind::Director,
            InventoryConfig::Scripted { .. } => InventoryKind::Scripted,
        }
    }
}

impl InventoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            InventoryKind::Embedded => "embedded",
            InventoryKind::Broker => "broker",
            InventoryKind::Director => "director",
            InventoryKind::Scripted => "scripted",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub serve: ServeConfig,
    pub strategy: StrategyKind,
    pub update: UpdateConfig,
    pub recreate: RecreateConfig,
    pub busy_attempts: u32,
    pub busy_interval: Duration,
    pub poll_interval: Duration,
    pub operation_timeout: Duration,
    pub requests_per_second: Rate,
    pub grace_period: Duration,
    pub format: Format,
    pub report_file: Option<PathBuf>,
    pub inventory: InventoryConfig,
    pub state_dir: PathBuf,
    /// The embedded fleet's definition; the built-in demo fleet when `None`.
    pub fleet: Option<PathBuf>,
    /// Faults added to the embedded fleet's simulation.
    pub faults: Vec<Fault>,
    /// Only from the command line: list and plan, trigger nothing.
    pub dry_run: bool,
}

impl Default for Config {
    fn default() -> Self {
        let settings = Settings::default();
        Config {
            serve: ServeConfig::default(),
            strategy: StrategyKind::Update,
            update: UpdateConfig {
                instance_type: Selection::Outdated,
                force_update: false,
                max_in_parallel: NonZeroUsize::MIN,
                canaries: 0,
            },
            recreate: RecreateConfig {
                max_in_parallel: NonZeroUsize::MIN,
                canaries: 0,
                fix: true,
                force: true,
            },
            busy_attempts: settings.busy_attempts,
            busy_interval: settings.busy_interval,
            poll_interval: settings.poll_interval,
            operation_timeout: settings.operation_timeout,
            requests_per_second: settings.requests_per_second,
            grace_period: settings.grace_period,
            format: Format::Text,
            report_file: None,
            inventory: InventoryConfig::Embedded,
            state_dir: PathBuf::from(".fleet-updater"),
            fleet: None,
            faults: Vec::new(),
            dry_run: false,
        }
    }
}

impl Config {
    /// The engine's settings for the chosen strategy.
    pub fn settings(&self) -> Settings {
        let (strategy, max_in_parallel, canaries) = match self.strategy {
            StrategyKind::Update => (
                Strategy::Update {
                    instance_type: self.update.instance_type,
                    force: self.update.force_update,
                },
                self.update.max_in_parallel,
                self.update.canaries,
            ),
            StrategyKind::Recreate => (
                Strategy::Recreate {
                    fix: self.recreate.fix,
                    force: self.recreate.force,
                },
                self.recreate.max_in_parallel,
                self.recreate.canaries,
            ),
        };
        Settings {
            strategy,
            max_in_parallel,
            canaries,
            busy_attempts: self.busy_attempts,
            busy_interval: self.busy_interval,
            poll_interval: self.poll_interval,
            operation_timeout: self.operation_timeout,
            requests_per_second: self.requests_per_second,
            backoff: Backoff::default(),
            progress_interval: Settings::default().progress_interval,
            grace_period: self.grace_period,
        }
    }
}
