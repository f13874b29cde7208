use std::fmt::Write;

use fleet_rollout::PlanReport;

/// A dry run's plan: what would be triggered, in which order, and what is skipped and why.
pub fn plan_text(plan: &PlanReport) -> String {
    let mut text = format!(
        "dry run: {} of {} selected instances, {} canaries, at most {} in parallel; nothing is triggered\n",
        plan.strategy, plan.selected, plan.canaries, plan.max_in_parallel
    );
    if plan.order.is_empty() {
        text.push_str("nothing to do\n");
    } else {
        text.push_str("order:\n");
    }
    for (i, instance) in plan.order.iter().enumerate() {
        let mut notes = Vec::new();
        if instance.canary_candidate {
            notes.push("canary");
        }
        if instance.force {
            notes.push("forced over the owner's block");
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" [{}]", notes.join(", "))
        };
        let _ = writeln!(
            text,
            "  {:>4}. {} (plan {}){notes}",
            i + 1,
            instance.id,
            instance.plan_id
        );
    }
    if !plan.skipped.is_empty() {
        text.push_str("skipped:\n");
        for skipped in &plan.skipped {
            let _ = writeln!(text, "  {}: {}", skipped.id, skipped.reason);
        }
    }
    if !plan.excluded.is_empty() {
        text.push_str("left out by the selection:\n");
        for excluded in &plan.excluded {
            let _ = writeln!(text, "  {}: {}", excluded.id, excluded.reason);
        }
    }
    if plan.canaries > 0 {
        text.push_str(
            "a canary that turns out to need nothing (up to date, busy, gone) is replaced by the next instance in order\n",
        );
    }
    text
}
