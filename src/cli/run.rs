//! One run of the engine over an inventory: plan, execute or dry-run, print, report.

use std::sync::Arc;

use fleet_updater::clock::WallClock;
use fleet_updater::config::{Config, Format};
use fleet_updater::inventory::Inventory;
use fleet_updater::output::{TextOutput, plan_text, summary, write_json_file};
use fleet_updater::rollout::{PlanReport, Rollout};

use super::error::{CliError, DONE, INSTANCES_FAILED};
use super::{print_json, print_text, watch_signals};

/// Plans, then carries the plan out (or prints it for a dry run); the exit code tells
/// whether the fleet got where it should be.
pub async fn drive<I: Inventory>(inventory: Arc<I>, config: &Config) -> Result<u8, CliError> {
    let settings = config.settings();
    let max_in_parallel = settings.max_in_parallel;
    let rollout = Rollout::new(inventory, settings, WallClock::new());
    let mut interrupts = watch_signals();
    let plan = tokio::select! {
        planned = rollout.plan() => planned?,
        _ = interrupts.changed() => return Err(CliError::InterruptedListing),
    };
    let json = config.format == Format::Json;
    if config.dry_run {
        let report = PlanReport::new(&plan, max_in_parallel.get());
        if let Some(path) = &config.report_file {
            write_json_file(path, &report).map_err(|source| CliError::Report {
                what: "plan",
                path: path.clone(),
                source,
            })?;
        }
        if json {
            print_json(&report);
        } else {
            print_text(&plan_text(&report));
        }
        return Ok(DONE);
    }
    let report = if json {
        let mut observer = TextOutput::new(std::io::stderr());
        rollout.execute(plan, &mut observer, interrupts).await
    } else {
        let mut observer = TextOutput::new(std::io::stdout());
        rollout.execute(plan, &mut observer, interrupts).await
    };
    // The report file first: a closed stdout must not lose it.
    let written = config.report_file.as_ref().map(|path| {
        write_json_file(path, &report).map_err(|source| CliError::Report {
            what: "report",
            path: path.clone(),
            source,
        })
    });
    if json {
        eprint!("{}", fleet_updater::output::printable(&summary(&report)));
        print_json(&report);
    } else {
        print_text(&summary(&report));
    }
    written.transpose()?;
    Ok(if report.succeeded() {
        DONE
    } else {
        INSTANCES_FAILED
    })
}
