use std::path::PathBuf;
use std::time::Duration;

use super::secret::Secret;
use crate::director::sim::Fault;
use crate::inventory::Selection;
use crate::rollout::{Backoff, Settings, Strategy};

/// The a9s `service_broker` properties.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceBroker {
    pub api_endpoint: String,
    pub username: String,
    pub password: Secret,
    pub skip_ssl_validation: bool,
    /// PEM, already checked to hold at least one certificate.
    pub ca: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// How the updater signs in to a BOSH director.
#[derive(Debug, Clone, PartialEq)]
pub enum DirectorAuth {
    /// HTTP basic authentication with a director user.
    Basic { username: String, password: Secret },
    /// UAA client credentials; the token endpoint is the UAA that the director's `/info`
    /// names.
    Uaa {
        client: String,
        client_secret: Secret,
    },
}

/// The `director` properties: a BOSH director whose deployments are the instances.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectorEndpoint {
    /// `https://host:25555`, without a path.
    pub url: String,
    pub auth: DirectorAuth,
    /// PEM, already checked to hold at least one certificate.
    pub ca: Option<String>,
    pub skip_ssl_validation: bool,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Which deployments are instances: a name pattern where `*` stands for any text.
    pub deployments: String,
}

/// A user of the APIs that `serve` offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeUser {
    pub name: String,
    pub password: Secret,
}

/// What one client may ask of `serve`, so that hostile input cannot exhaust it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Largest request body; a manifest or cloud config above it is refused with 413.
    pub max_body_bytes: usize,
    /// A request that takes longer is answered with 408.
    pub request_timeout: Duration,
    /// Connections served at once; more are answered with 429 and closed.
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_body_bytes: 4 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            max_connections: 256,
        }
    }
}

/// The `serve` block: where the director and broker APIs listen, their certificate and
/// users.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    pub director_listen: std::net::SocketAddr,
    pub broker_listen: std::net::SocketAddr,
    /// A PEM certificate chain and its key; without them a CA and a server certificate are
    /// generated in the state directory.
    pub certificate: Option<PathBuf>,
    pub private_key: Option<PathBuf>,
    /// Without users, credentials are generated in the state directory.
    pub users: Vec<ServeUser>,
    pub limits: ServeLimits,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            director_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 25555)),
            broker_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 25556)),
            certificate: None,
            private_key: None,
            users: Vec::new(),
            limits: ServeLimits::default(),
        }
    }
}

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
    pub max_in_parallel: usize,
    pub canaries: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RecreateConfig {
    pub max_in_parallel: usize,
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
    pub service_broker: Option<ServiceBroker>,
    pub director: Option<DirectorEndpoint>,
    pub serve: ServeConfig,
    pub strategy: StrategyKind,
    pub update: UpdateConfig,
    pub recreate: RecreateConfig,
    pub busy_attempts: u32,
    pub busy_interval: Duration,
    pub poll_interval: Duration,
    pub operation_timeout: Duration,
    pub requests_per_second: f64,
    pub grace_period: Duration,
    pub format: Format,
    pub report_file: Option<PathBuf>,
    pub inventory: InventoryKind,
    /// The scenario file of the scripted inventory, resolved against the config's folder.
    pub scenario: Option<PathBuf>,
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
            service_broker: None,
            director: None,
            serve: ServeConfig::default(),
            strategy: StrategyKind::Update,
            update: UpdateConfig {
                instance_type: Selection::Outdated,
                force_update: false,
                max_in_parallel: 1,
                canaries: 0,
            },
            recreate: RecreateConfig {
                max_in_parallel: 1,
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
            inventory: InventoryKind::Embedded,
            scenario: None,
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
