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

/// The maintenance window a run keeps to: outside it a run does nothing; when it closes,
/// nothing more starts and operations in flight get `grace_period`.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub window: fleet_schedule::Window,
    /// As written, for `check-config`.
    pub text: String,
    pub time_zone: String,
    pub weekdays: Vec<String>,
    pub grace_period: Duration,
}

impl Schedule {
    /// Long enough for a cluster's redeploy; a run still waiting after it reports the
    /// operations as unfinished.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(30 * 60);
}

/// A PostgreSQL store as configured: its URL (no password in it), where its password is
/// read from (else the FLEET_STORE_PASSWORD environment variable), and the CA that makes
/// the connection TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    pub url: Option<String>,
    pub password_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
}

/// A canary check as the configuration gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryCheckConfig {
    pub kind: CanaryCheckKind,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanaryCheckKind {
    /// A program (relative to the configuration's directory) and its arguments.
    Command { program: PathBuf, args: Vec<String> },
    /// An errand of the instance's deployment, run through the director.
    Errand(String),
}

/// How long a canary check may take unless the configuration says.
pub const CANARY_CHECK_TIMEOUT: Duration = Duration::from_secs(10 * 60);

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
    /// Listing criteria the canaries are chosen among (`canary_selection`).
    pub canary_selection: fleet_rollout::inventory::Criteria,
    /// Whether the recreate strategy chooses its canaries by `canary_selection` too; the
    /// ODB errands' recreate takes no canaries at all.
    pub recreate_selects_canaries: bool,
    /// Which instances the run may touch, and which go right after the canaries
    /// (`selection`).
    pub filter: fleet_rollout::filter::InstanceFilter,
    /// What each canary must pass once its operation succeeded (`canary_check`).
    pub canary_check: Option<CanaryCheckConfig>,
    pub format: Format,
    pub report_file: Option<PathBuf>,
    /// The run's figures in Prometheus text format, for node_exporter's textfile collector.
    pub metrics_file: Option<PathBuf>,
    pub schedule: Option<Schedule>,
    pub inventory: InventoryConfig,
    pub state_dir: PathBuf,
    /// Where the embedded director and broker keep their state: SQLite in the state
    /// directory when `None`.
    pub store: Option<StoreConfig>,
    /// The embedded fleet's definition; the built-in demo fleet when `None`.
    pub fleet: Option<PathBuf>,
    /// Faults added to the embedded fleet's simulation.
    pub faults: Vec<Fault>,
    /// Only from the command line: list and plan, trigger nothing.
    pub dry_run: bool,
    /// Only from the command line: forget what earlier runs of this intent did.
    pub fresh: bool,
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
            canary_selection: Default::default(),
            recreate_selects_canaries: true,
            filter: Default::default(),
            canary_check: None,
            format: Format::Text,
            report_file: None,
            metrics_file: None,
            schedule: None,
            inventory: InventoryConfig::Embedded,
            state_dir: PathBuf::from(".fleet-updater"),
            store: None,
            fleet: None,
            faults: Vec::new(),
            dry_run: false,
            fresh: false,
        }
    }
}

impl Config {
    /// What a run means to do, as the journal keys it: the strategy with its options, the
    /// selection and the inventory. A run of the same intent continues the last one.
    pub fn intent(&self) -> String {
        let strategy = match self.strategy {
            StrategyKind::Update => format!(
                "update instance_type={} force_update={}",
                self.update.instance_type.as_str(),
                self.update.force_update
            ),
            StrategyKind::Recreate => format!(
                "recreate fix={} force={}",
                self.recreate.fix, self.recreate.force
            ),
        };
        let inventory = match &self.inventory {
            InventoryConfig::Embedded => format!(
                "embedded {}",
                self.fleet
                    .as_deref()
                    .map_or("demo".into(), |p| p.display().to_string())
            ),
            InventoryConfig::Broker(b) => format!("broker {}", b.api_endpoint),
            InventoryConfig::Director(d) => format!("director {} {}", d.url, d.deployments),
            InventoryConfig::Scripted { scenario } => format!("scripted {}", scenario.display()),
        };
        let filter = &self.filter;
        let narrowed = if filter.include.is_empty() && filter.exclude.is_empty() {
            String::new()
        } else {
            format!(
                "; include {:?}; exclude {:?}",
                filter.include, filter.exclude
            )
        };
        format!("{strategy}; {inventory}{narrowed}")
    }

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
            canary_selection: match self.strategy {
                StrategyKind::Recreate if !self.recreate_selects_canaries => Default::default(),
                _ => self.canary_selection.clone(),
            },
            filter: self.filter.clone(),
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
