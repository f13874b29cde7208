//! One run of the engine over an inventory: plan (leaving alone what the journal says an
//! earlier run of the same rollout did), execute within the maintenance window or
//! dry-run, print, report, and write the metrics.

use std::sync::Arc;
use std::time::SystemTime;

use fleet_updater::clock::WallClock;
use fleet_updater::config::{Config, Format};
use fleet_updater::inventory::Inventory;
use fleet_updater::output::{
    RunMetrics, TextOutput, metrics_text, plan_text, summary, write_file, write_json_file,
};
use fleet_updater::rollout::check::CanaryCheck;
use fleet_updater::rollout::{PlanReport, Report, Rollout, Status, WindowClose};
use fleet_updater::schedule::{Journal, JournalObserver, Resume};

use super::error::{CliError, DEFERRED, DONE, INSTANCES_FAILED};
use super::{notice, print_json, print_text, watch_signals};

/// Plans, then carries the plan out (or prints it for a dry run); the exit code tells
/// whether the fleet got where it should be.
pub async fn drive<I: Inventory>(
    inventory: Arc<I>,
    config: &Config,
    check: Option<Arc<dyn CanaryCheck>>,
    window: Option<WindowClose>,
    started_at: SystemTime,
) -> Result<u8, CliError> {
    let settings = config.settings();
    let (max_in_parallel, strategy) = (settings.max_in_parallel, settings.strategy);
    let intent = config.intent();
    let mut journal = Journal::open(
        &config.state_dir,
        &intent,
        fleet_updater::clock::WallClock::new(),
    )?;
    if journal.expired() {
        notice(&format!(
            "the journal of an earlier {} of this fleet is older than {} days: starting over",
            strategy.name(),
            fleet_updater::schedule::journal::MAX_AGE.as_secs() / 86_400
        ));
    }
    // `--fresh` forgets the journal; a dry run only looks, and forgets nothing.
    if config.fresh && !config.dry_run {
        journal.forget()?;
    }
    let resumed = journal.is_resumed() && !config.fresh;
    let mut rollout = Rollout::new(inventory, settings, WallClock::new());
    if let Some(check) = check {
        rollout = rollout.with_canary_check(check);
    }
    let mut interrupts = watch_signals();
    let plan = tokio::select! {
        planned = rollout.plan() => planned?,
        _ = interrupts.changed() => return Err(CliError::InterruptedListing),
    };
    let resume = if resumed {
        journal.resume(plan.order.iter().map(|c| &c.instance), strategy)
    } else {
        Resume::default()
    };
    if resumed {
        notice(&format!(
            "continuing an earlier {} of this fleet ({}): {} instances done before{}; \
             `--fresh` starts over",
            strategy.name(),
            journal.path().display(),
            resume.done.len(),
            if resume.canaries_passed {
                ", canaries passed"
            } else if resume.target_moved {
                "; some are outdated again, so the canaries are tried again"
            } else {
                ""
            }
        ));
    }
    let plan = plan.without_done(&resume.done, resume.canaries_passed);
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
        let mut text = TextOutput::new(super::StderrLines::default());
        let mut observer = JournalObserver::new(&mut text, &mut journal);
        rollout
            .execute_within(plan, &mut observer, interrupts, window)
            .await
    } else {
        let mut text = TextOutput::new(std::io::stdout());
        let mut observer = JournalObserver::new(&mut text, &mut journal);
        rollout
            .execute_within(plan, &mut observer, interrupts, window)
            .await
    };
    if report.status == Status::Succeeded
        && let Err(e) = journal.complete()
    {
        tracing::warn!(error = %e, "the finished rollout's journal is left behind");
    }
    let code = match report.status {
        Status::Succeeded => DONE,
        Status::Deferred => DEFERRED,
        Status::Failed => INSTANCES_FAILED,
    };
    // The report file first: a closed stdout must not lose it.
    let written = config.report_file.as_ref().map(|path| {
        write_json_file(path, &report).map_err(|source| CliError::Report {
            what: "report",
            path: path.clone(),
            source,
        })
    });
    let metrics = write_metrics(config, &report_metrics(&report, started_at, code));
    if json {
        notice(&summary(&report));
        print_json(&report);
    } else {
        print_text(&summary(&report));
    }
    written.transpose()?;
    metrics?;
    Ok(code)
}

fn report_metrics(report: &Report, started_at: SystemTime, exit_code: u8) -> RunMetrics<'_> {
    RunMetrics {
        strategy: &report.strategy,
        status: match report.status {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Deferred => "deferred",
        },
        started_at,
        finished_at: report.finished_at,
        exit_code,
        counts: Some(&report.counts),
    }
}

/// Writes the metrics file, when one is asked for.
pub fn write_metrics(config: &Config, metrics: &RunMetrics<'_>) -> Result<(), CliError> {
    let Some(path) = &config.metrics_file else {
        return Ok(());
    };
    write_file(path, metrics_text(metrics).as_bytes()).map_err(|source| CliError::Report {
        what: "metrics",
        path: path.clone(),
        source,
    })
}
