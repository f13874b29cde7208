//! The maintenance window at the start of a run: outside it the run does nothing and says
//! so (exit 0, with the metrics written, so monitoring sees the run); inside it, when it
//! closes, as the engine's clock counts.

use std::time::{Duration, SystemTime};

use fleet_updater::clock::{WallClock, rfc3339};
use fleet_updater::config::{Config, Format};
use fleet_updater::output::{outside_window_text, write_file};
use fleet_updater::rollout::WindowClose;
use fleet_updater::schedule::WindowState;

use super::error::{CliError, DONE};
use super::{print_json, print_text};

/// What the window says at the start of a run.
pub enum Start {
    /// Run; the window closes at this point of tokio's clock, if there is one.
    Run(Option<WindowClose>),
    /// Outside the window: nothing was done, and this is the exit code.
    Outside(u8),
}

pub fn check(config: &Config, clock: &WallClock) -> Result<Start, CliError> {
    let Some(schedule) = &config.schedule else {
        return Ok(Start::Run(None));
    };
    // A dry run shows what a run would do, whenever it is asked.
    if config.dry_run {
        return Ok(Start::Run(None));
    }
    let now = clock.now();
    let stamp = jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    match schedule.window.state_at(stamp) {
        WindowState::Open { closes_at } => {
            let left = closes_at
                .timestamp()
                .duration_since(stamp)
                .try_into()
                .unwrap_or(Duration::ZERO);
            Ok(Start::Run(Some(WindowClose {
                at: tokio::time::Instant::now() + left,
                grace: schedule.grace_period,
            })))
        }
        WindowState::Closed { opens_at } => {
            let opens = SystemTime::from(opens_at.timestamp());
            let strategy = config.settings().strategy.name();
            if config.format == Format::Json {
                print_json(&serde_json::json!({
                    "schema": 1,
                    "status": "outside_window",
                    "strategy": strategy,
                    "window": schedule.window.to_string(),
                    "opens_at": rfc3339(opens),
                }));
            } else {
                print_text(&format!(
                    "outside the maintenance window {}: nothing is done; it opens next at {} \
                     ({})\n",
                    schedule.window,
                    opens_at.strftime("%Y-%m-%d %H:%M %Z"),
                    rfc3339(opens),
                ));
            }
            if let Some(path) = &config.metrics_file {
                let previous = std::fs::read_to_string(path).ok();
                let text = outside_window_text(previous.as_deref(), strategy, now);
                write_file(path, text.as_bytes()).map_err(|source| CliError::Report {
                    what: "metrics",
                    path: path.clone(),
                    source,
                })?;
            }
            Ok(Start::Outside(DONE))
        }
    }
}
