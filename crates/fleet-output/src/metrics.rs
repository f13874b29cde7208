//! The run in Prometheus text format, for node_exporter's textfile collector: monitoring
//! sees every run (when, how long, how it ended, its counts). A start outside the
//! maintenance window shows as a check (`fleet_updater_last_check_*`) and keeps the last
//! real run's series as they were, so a failure stays visible until a run replaces it.

use std::fmt::Write;
use std::time::SystemTime;

use fleet_rollout::Counts;

/// Every status a run can end with; one series each, 1 for the one it ended with, so an
/// alert can watch a status that did not happen.
const STATUSES: &[&str] = &["succeeded", "failed", "deferred"];

const RUN_PREFIX: &str = "fleet_updater_last_run_";

#[derive(Debug, Clone)]
pub struct RunMetrics<'a> {
    pub strategy: &'a str,
    pub status: &'a str,
    pub started_at: SystemTime,
    pub finished_at: SystemTime,
    pub exit_code: u8,
    /// `None` for a run that did not start (outside its window).
    pub counts: Option<&'a Counts>,
}

fn seconds(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// When the updater last started, and whether it found itself outside its window.
fn check(out: &mut String, strategy: &str, at: SystemTime, outside: bool) {
    family(
        out,
        "fleet_updater_last_check_timestamp_seconds",
        "When the updater last started, a run or a start outside its window.",
    );
    let _ = writeln!(
        out,
        "fleet_updater_last_check_timestamp_seconds{{strategy=\"{strategy}\"}} {:.3}",
        seconds(at)
    );
    family(
        out,
        "fleet_updater_last_check_outside_window",
        "1 when the last start was outside the maintenance window and did nothing.",
    );
    let _ = writeln!(
        out,
        "fleet_updater_last_check_outside_window{{strategy=\"{strategy}\"}} {}",
        u8::from(outside)
    );
}

/// A start outside the window: the check, and the last run's series from `previous` (the
/// file as the last run left it) unchanged.
pub fn outside_window_text(previous: Option<&str>, strategy: &str, at: SystemTime) -> String {
    let mut out = String::new();
    for line in previous.unwrap_or_default().lines() {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line);
        if name.starts_with(RUN_PREFIX) {
            out.push_str(line);
            out.push('\n');
        }
    }
    check(&mut out, strategy, at, true);
    out
}

pub fn metrics_text(run: &RunMetrics<'_>) -> String {
    let s = run.strategy;
    let mut out = String::new();
    check(&mut out, s, run.finished_at, false);
    family(
        &mut out,
        "fleet_updater_last_run_timestamp_seconds",
        "When the last run ended, in seconds since the Unix epoch.",
    );
    let _ = writeln!(
        out,
        "fleet_updater_last_run_timestamp_seconds{{strategy=\"{s}\"}} {:.3}",
        seconds(run.finished_at)
    );
    family(
        &mut out,
        "fleet_updater_last_run_duration_seconds",
        "How long the last run took.",
    );
    let took = run
        .finished_at
        .duration_since(run.started_at)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "fleet_updater_last_run_duration_seconds{{strategy=\"{s}\"}} {took:.3}"
    );
    family(
        &mut out,
        "fleet_updater_last_run_status",
        "1 for the status the last run ended with, 0 for the others.",
    );
    for status in STATUSES {
        let _ = writeln!(
            out,
            "fleet_updater_last_run_status{{strategy=\"{s}\",status=\"{status}\"}} {}",
            u8::from(*status == run.status)
        );
    }
    family(
        &mut out,
        "fleet_updater_last_run_exit_code",
        "The exit code of the last run.",
    );
    let _ = writeln!(
        out,
        "fleet_updater_last_run_exit_code{{strategy=\"{s}\"}} {}",
        run.exit_code
    );
    if let Some(c) = run.counts {
        family(
            &mut out,
            "fleet_updater_last_run_instances",
            "Instances of the last run, by outcome.",
        );
        for (outcome, n) in [
            ("selected", c.selected),
            ("updated", c.updated),
            ("skipped_blocked", c.skipped_blocked),
            ("skipped_up_to_date", c.skipped_up_to_date),
            ("deleted", c.deleted),
            ("orphaned", c.orphaned),
            ("busy", c.busy),
            ("failed", c.failed),
            ("not_started", c.not_started),
            ("unfinished", c.unfinished),
            ("deferred", c.deferred),
            ("done_earlier", c.done_earlier),
        ] {
            let _ = writeln!(
                out,
                "fleet_updater_last_run_instances{{strategy=\"{s}\",outcome=\"{outcome}\"}} {n}"
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_outside_the_window_keeps_the_last_runs_series() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let failed = metrics_text(&RunMetrics {
            strategy: "update",
            status: "failed",
            started_at: at,
            finished_at: at,
            exit_code: 1,
            counts: None,
        });
        let later = at + std::time::Duration::from_secs(3600);
        let text = outside_window_text(Some(&failed), "update", later);
        assert!(text.contains("status=\"failed\"} 1\n"), "{text}");
        assert!(text.contains("exit_code{strategy=\"update\"} 1\n"));
        assert!(text.contains("outside_window{strategy=\"update\"} 1\n"));
        assert!(text.contains("last_check_timestamp_seconds{strategy=\"update\"} 1800003600.000"));
        assert_eq!(
            text.matches("# TYPE fleet_updater_last_check_timestamp_seconds")
                .count(),
            1
        );
        let first = outside_window_text(None, "update", later);
        assert!(!first.contains(RUN_PREFIX));
    }

    #[test]
    fn exactly_one_status_is_set_and_counts_follow() {
        let counts = Counts {
            selected: 3,
            updated: 2,
            deferred: 1,
            ..Counts::default()
        };
        let started = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let text = metrics_text(&RunMetrics {
            strategy: "recreate",
            status: "deferred",
            started_at: started,
            finished_at: started + std::time::Duration::from_millis(1500),
            exit_code: 4,
            counts: Some(&counts),
        });
        assert!(text.contains(
            "fleet_updater_last_run_status{strategy=\"recreate\",status=\"deferred\"} 1\n"
        ));
        let set = text
            .lines()
            .filter(|l| l.starts_with("fleet_updater_last_run_status{") && l.ends_with(" 1"))
            .count();
        assert_eq!(set, 1, "{text}");
        assert!(text.contains("duration_seconds{strategy=\"recreate\"} 1.500\n"));
        assert!(text.contains("outcome=\"deferred\"} 1\n"));
        assert!(text.contains("exit_code{strategy=\"recreate\"} 4\n"));
    }
}
