//! Every way a command fails, each with its exit code: the one place where the contract
//! (0 done, 1 instances failed or busy or the run could not finish, 2 bad usage or
//! configuration, 3 the inventory could not be listed, 4 the maintenance window closed
//! with instances deferred to the next and nothing failed) is decided.

use std::path::PathBuf;

use fleet_updater::config::ConfigError;
use fleet_updater::director::DirectorError;
use fleet_updater::fleet::{DefinitionError, FleetError};
use fleet_updater::inventory::InventoryError;
use fleet_updater::inventory::scripted::ScenarioError;
use fleet_updater::rollout::RolloutError;
use fleet_updater::serve::ServeError;

pub const DONE: u8 = 0;
pub const INSTANCES_FAILED: u8 = 1;
pub const BAD_CONFIG: u8 = 2;
pub const LIST_FAILED: u8 = 3;
pub const DEFERRED: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read the fleet definition {}: {source}", path.display())]
    FleetFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{shown}: {source}")]
    FleetDefinition {
        shown: String,
        source: DefinitionError,
    },
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The inventory's endpoint or CA cannot be used; nothing was sent.
    #[error(transparent)]
    InventorySetup(InventoryError),
    #[error("{0}; nothing was triggered")]
    List(#[from] RolloutError),
    #[error("interrupted while listing the fleet; nothing was triggered")]
    InterruptedListing,
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write the {what} to {}: {source}", path.display())]
    Report {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// An output file that could not be written: found before anything was triggered.
    #[error("cannot write the {what} to {}: {source}; nothing was triggered", path.display())]
    Unwritable {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The journal of earlier runs cannot be read: nothing was triggered.
    #[error("{0}; nothing was triggered")]
    Journal(#[from] fleet_updater::schedule::JournalError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The configured store cannot be used: nothing was opened.
    #[error(transparent)]
    Store(fleet_updater::config::StoreConfigError),
    #[error(transparent)]
    Director(#[from] DirectorError),
    #[error("{0}")]
    Show(String),
    /// `create-env` or `delete-env` failed: its input was wrong (exit 2, nothing was
    /// made), or a step failed (exit 1, the state file holds what was made).
    #[error(transparent)]
    Env(#[from] fleet_updater::create_env::error::EnvError),
    /// A release to upload that cannot be read: nothing was uploaded.
    #[error("cannot upload {}: {source}", path.display())]
    Release {
        path: PathBuf,
        source: fleet_updater::release::ReleaseError,
    },
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_)
            | CliError::FleetFile { .. }
            | CliError::FleetDefinition { .. }
            | CliError::Scenario(_)
            | CliError::InventorySetup(_)
            | CliError::Unwritable { .. }
            | CliError::Journal(fleet_updater::schedule::JournalError::Damaged { .. })
            | CliError::Release { .. } => BAD_CONFIG,
            CliError::Env(e) if e.is_input() => BAD_CONFIG,
            CliError::Env(_) => INSTANCES_FAILED,
            CliError::Fleet(FleetError::NotProvisioned(_)) => INSTANCES_FAILED,
            CliError::Fleet(FleetError::NotADirectory(_)) => BAD_CONFIG,
            CliError::Fleet(_) | CliError::List(_) => LIST_FAILED,
            // Another run of the same rollout, as another run of the embedded fleet.
            CliError::Journal(fleet_updater::schedule::JournalError::InUse { .. }) => LIST_FAILED,
            CliError::Journal(_) => BAD_CONFIG,
            CliError::Serve(ServeError::Listen { .. }) => LIST_FAILED,
            CliError::Serve(_) => BAD_CONFIG,
            CliError::Store(_) => BAD_CONFIG,
            CliError::InterruptedListing
            | CliError::Runtime(_)
            | CliError::Report { .. }
            | CliError::Director(_)
            | CliError::Show(_) => INSTANCES_FAILED,
        }
    }
}
