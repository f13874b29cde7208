//! The configuration file: the a9s Deployment Updater's property names verbatim, plus
//! our additions, validated in one pass that reports every problem with its key and line.

mod duration;
mod model;
mod read;
mod read_director;
mod read_odb;
mod read_schedule;
mod read_serve;
mod read_store;
mod read_value;
mod render;
mod store;

use std::path::{Path, PathBuf};

pub use duration::{format as format_duration, parse_positive as parse_duration};
pub use fleet_inventory_broker::ServiceBroker;
pub use fleet_inventory_director::{DirectorAuth, DirectorEndpoint};
pub use fleet_secret::Secret;
pub use fleet_serve::{ServeConfig, ServeLimits, ServeUser};
pub use model::{
    CanaryCheckConfig, CanaryCheckKind, Config, Format, InventoryConfig, InventoryKind,
    RecreateConfig, Schedule, StoreConfig, StrategyKind, UpdateConfig,
};
pub use render::render;
pub use store::{PASSWORD_VARIABLE, StoreConfigError};

use fleet_yaml::{self as yaml, Checker, Problem};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{}:{}: {}", source.at.line, source.at.column, source.message)]
    Syntax {
        path: String,
        source: yaml::LoadError,
    },
    #[error("{}", invalid(path, problems))]
    Invalid {
        path: String,
        problems: Vec<Problem>,
    },
}

fn invalid(path: &str, problems: &[Problem]) -> String {
    let noun = if problems.len() == 1 {
        "problem"
    } else {
        "problems"
    };
    let mut text = format!("configuration {path} has {} {noun}:", problems.len());
    for p in problems {
        text.push_str(&format!(
            "\n  {path}:{}:{}: {}: {}",
            p.at.line, p.at.column, p.path, p.message
        ));
    }
    text
}

/// Values given on the command line; they win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub strategy: Option<StrategyKind>,
    pub max_in_parallel: Option<std::num::NonZeroUsize>,
    pub canaries: Option<usize>,
    pub dry_run: bool,
    pub format: Option<Format>,
    pub report_file: Option<PathBuf>,
    pub metrics_file: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    /// `--store URL`: the PostgreSQL database, its password and CA still as configured.
    pub store: Option<String>,
    pub fresh: bool,
}

impl Config {
    /// Reads and validates a configuration file.
    ///
    /// # Errors
    /// When the file cannot be read, is not YAML, or has any invalid key or value; in the
    /// last case every problem is listed.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, &shown, base)
    }

    /// Validates configuration text; `shown` names it in messages, `base` resolves relative
    /// paths.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str, shown: &str, base: &Path) -> Result<Config, ConfigError> {
        let limits = yaml::Limits {
            max_bytes: 1024 * 1024,
            ..yaml::Limits::default()
        };
        let root = yaml::load(text, limits).map_err(|source| ConfigError::Syntax {
            path: shown.to_string(),
            source,
        })?;
        let mut config = Config::default();
        let mut checker = Checker::new();
        if read_odb::is_odb(&root) {
            read_odb::read(&root, &mut config, &mut checker);
        } else {
            read::read(&root, base, &mut config, &mut checker);
        }
        if checker.is_clean() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                path: shown.to_string(),
                problems: checker.into_problems(),
            })
        }
    }

    pub fn apply(&mut self, overrides: &Overrides) {
        if let Some(strategy) = overrides.strategy {
            self.strategy = strategy;
        }
        let (max_in_parallel, canaries) = match self.strategy {
            StrategyKind::Update => (&mut self.update.max_in_parallel, &mut self.update.canaries),
            StrategyKind::Recreate => (
                &mut self.recreate.max_in_parallel,
                &mut self.recreate.canaries,
            ),
        };
        if let Some(n) = overrides.max_in_parallel {
            *max_in_parallel = n;
        }
        if let Some(n) = overrides.canaries {
            *canaries = n;
        }
        self.dry_run |= overrides.dry_run;
        if let Some(format) = overrides.format {
            self.format = format;
        }
        if let Some(report) = &overrides.report_file {
            self.report_file = Some(report.clone());
        }
        if let Some(dir) = &overrides.state_dir {
            self.state_dir = dir.clone();
        }
        if let Some(url) = &overrides.store {
            self.store.get_or_insert_default().url = Some(url.clone());
        }
        if let Some(metrics) = &overrides.metrics_file {
            self.metrics_file = Some(metrics.clone());
        }
        self.fresh |= overrides.fresh;
    }
}

#[cfg(test)]
mod tests;
