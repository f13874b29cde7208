use std::fmt::Write;

use fleet_rollout::{Outcome, Report, Status};

/// The closing lines: the status, every count, and the ids that need attention.
pub fn summary(report: &Report) -> String {
    let c = &report.counts;
    let status = match report.status {
        Status::Succeeded => "SUCCEEDED",
        Status::Failed => "FAILED",
        Status::Deferred => "DEFERRED",
    };
    let mut text = format!(
        "finished {}: {status}{}\n  selected {}: {} {}, skipped blocked {}, skipped up to date {}, deleted {}, orphaned {}, busy left {}, failed {}",
        report.strategy,
        if report.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        c.selected,
        // The JSON count keeps its one name; the errand line says what was done.
        if report.strategy == "recreate" {
            "recreated"
        } else {
            "updated"
        },
        c.updated,
        c.skipped_blocked,
        c.skipped_up_to_date,
        c.deleted,
        c.orphaned,
        c.busy,
        c.failed,
    );
    if c.not_started > 0 {
        let _ = write!(text, ", not started {}", c.not_started);
    }
    if c.unfinished > 0 {
        let _ = write!(text, ", unfinished {}", c.unfinished);
    }
    if c.deferred > 0 {
        let _ = write!(text, ", deferred {}", c.deferred);
    }
    if c.done_earlier > 0 {
        let _ = write!(text, ", done earlier {}", c.done_earlier);
    }
    if !report.excluded.is_empty() {
        let _ = write!(
            text,
            ", left out by the selection {}",
            report.excluded.len()
        );
    }
    text.push('\n');
    for (outcome, label) in [
        (Outcome::Failed, "failed"),
        (Outcome::Busy, "busy left"),
        (Outcome::Unfinished, "unfinished"),
        (Outcome::Deferred, "deferred"),
    ] {
        let ids = report.ids_with(outcome);
        if !ids.is_empty() {
            let _ = writeln!(text, "  {label}: {}", ids.join(" "));
        }
    }
    for instance in report
        .instances
        .iter()
        .filter(|i| i.outcome == Outcome::Failed)
    {
        let _ = writeln!(
            text,
            "  {}: {}",
            instance.id,
            instance.reason.as_deref().unwrap_or("no reason given")
        );
    }
    text
}
