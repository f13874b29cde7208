//! The embedded fleet's state that the listing and task commands open: where it lives,
//! and the fleet opened from the configuration.

use std::path::{Path, PathBuf};

use clap::Args;
use fleet_updater::config::Config;
use fleet_updater::fleet::{self, Access, DEMO, Definition, EmbeddedFleet};

use super::error::CliError;
use super::load_config;

#[derive(Args)]
pub struct StateArgs {
    /// Configuration file naming the embedded fleet and its state directory; without one,
    /// the built-in demo.
    #[arg(short = 'c', long = "config", env = "FLEET_UPDATER_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Overrides `state_dir`.
    #[arg(long)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Overrides `store`: keep the director's and broker's state in this PostgreSQL
    /// database (postgres://USER@HOST[:PORT]/DATABASE; the password from
    /// `store.password_file` or FLEET_STORE_PASSWORD) instead of SQLite in the state
    /// directory.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
}

/// Opens the embedded fleet the configuration names; with exclusive access it is
/// provisioned on first use.
pub(crate) async fn open_fleet(config: &Config, access: Access) -> Result<EmbeddedFleet, CliError> {
    let (text, shown, dir) = match &config.fleet {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (
                text,
                path.display().to_string(),
                path.parent().map(Path::to_path_buf).unwrap_or_default(),
            ),
            Err(source) => {
                return Err(CliError::FleetFile {
                    path: path.clone(),
                    source,
                });
            }
        },
        None => (
            DEMO.to_string(),
            "the built-in demo fleet".to_string(),
            PathBuf::from("."),
        ),
    };
    let mut definition = Definition::parse_in(&text, &dir)
        .map_err(|source| CliError::FleetDefinition { shown, source })?;
    // Real processes are supervised by a process per VM, this program: they outlive the
    // command that started them.
    definition.supervisor = std::env::current_exe().ok();
    definition
        .simulation
        .faults
        .extend(config.faults.iter().cloned());
    let store = config
        .store
        .as_ref()
        .map(fleet_updater::config::StoreConfig::location)
        .transpose()
        .map_err(CliError::Store)?
        .unwrap_or(fleet_updater::store::StoreLocation::Sqlite);
    Ok(fleet::open(
        &config.state_dir,
        &definition,
        access,
        &store,
        &mut |line| super::notice(&line),
    )
    .await?)
}

pub(crate) fn settings_of(args: &StateArgs) -> Result<Config, CliError> {
    let mut config = load_config(args.config.as_deref())?;
    config.apply(&fleet_updater::config::Overrides {
        state_dir: args.state_dir.clone(),
        store: args.store.clone(),
        ..Default::default()
    });
    Ok(config)
}
