use std::io::Write;
use std::time::SystemTime;

use fleet_clock::{rfc3339, short};
use fleet_rollout::{Event, Observer, Outcome, Phase};

/// Prints one line per event, each stamped with its time, flushed at once so that an
/// errand's or cron job's log shows progress as it happens.
pub struct TextOutput<W> {
    out: W,
}

impl<W: Write + Send> TextOutput<W> {
    pub fn new(out: W) -> Self {
        TextOutput { out }
    }
}

impl<W: Write + Send> Observer for TextOutput<W> {
    fn on_event(&mut self, at: SystemTime, event: &Event) {
        tracing::debug!(?event, "rollout event");
        // A closed stdout must not stop the rollout; the report still tells the result.
        let _ = writeln!(
            self.out,
            "{} {}",
            rfc3339(at),
            crate::printable(&line(event))
        );
        let _ = self.out.flush();
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Canaries => "canary phase",
        Phase::Main => "main phase",
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The text of one event, without its timestamp.
pub fn line(event: &Event) -> String {
    match event {
        Event::Started {
            strategy,
            selected,
            eligible,
            canaries,
            max_in_parallel,
        } if *eligible == 0 => format!(
            "starting {strategy}: {} selected; nothing to {strategy}",
            plural(*selected, "instance", "instances"),
        ),
        Event::Started {
            strategy,
            selected,
            eligible,
            canaries,
            max_in_parallel,
        } => format!(
            "starting {strategy}: {} selected, {eligible} to process, {}, at most {max_in_parallel} in parallel",
            plural(*selected, "instance", "instances"),
            plural(*canaries, "canary", "canaries"),
        ),
        Event::PhaseStarted {
            phase: Phase::Canaries,
            instances,
        } => format!(
            "canary phase: waiting for {} before the rest",
            plural(*instances, "canary", "canaries")
        ),
        Event::PhaseStarted {
            phase: Phase::Main,
            instances,
        } => format!(
            "main phase: {}",
            plural(*instances, "instance", "instances")
        ),
        Event::RoundStarted {
            phase,
            round,
            instances,
        } => format!(
            "{}: retry round {round}: {}",
            phase_name(*phase),
            plural(*instances, "busy instance", "busy instances")
        ),
        Event::Triggering {
            id,
            canary,
            attempt,
            max_attempts,
            position,
            total,
        } => {
            let role = if *canary { "canary, " } else { "" };
            if *attempt > 1 {
                format!("[{id}] starting again ({role}attempt {attempt}/{max_attempts})")
            } else {
                format!("[{id}] starting ({role}instance {position} of {total})")
            }
        }
        Event::Accepted { id, operation } => format!("[{id}] accepted: {operation}"),
        Event::Checking { id, check } => {
            format!("[{id}] canary operation succeeded; checking it: {check}")
        }
        Event::Succeeded { id, after } => format!("[{id}] succeeded after {}", short(*after)),
        Event::Failed { id, canary, reason } => {
            let what = if *canary { "canary FAILED" } else { "FAILED" };
            format!("[{id}] {what}: {reason}")
        }
        Event::Settled {
            id,
            outcome,
            reason,
        } => {
            let what = match outcome {
                Outcome::SkippedBlocked | Outcome::SkippedUpToDate => "skipped",
                Outcome::Deleted => "deleted",
                Outcome::Orphaned => "orphaned",
                Outcome::DoneEarlier => "done earlier",
                _ => "settled",
            };
            format!("[{id}] {what}: {reason}")
        }
        Event::Busy {
            id,
            reason,
            attempt,
            will_retry,
        } => {
            let next = if *will_retry {
                "retrying after the others"
            } else {
                "no attempts left"
            };
            format!("[{id}] busy (attempt {attempt}): {reason}; {next}")
        }
        Event::Stopping { reason } => format!("stopping: {reason}"),
        Event::Progress {
            in_flight,
            finished,
            pending,
            busy_waiting,
            elapsed,
        } => format!(
            "progress: {in_flight} in flight, {finished} finished, {pending} pending, {busy_waiting} waiting to retry ({} elapsed)",
            short(*elapsed)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lines_read_naturally() {
        let started = Event::Started {
            strategy: "update",
            selected: 30,
            eligible: 28,
            canaries: 2,
            max_in_parallel: 5,
        };
        assert_eq!(
            line(&started),
            "starting update: 30 instances selected, 28 to process, 2 canaries, at most 5 in parallel"
        );
        let triggering = Event::Triggering {
            id: "si-1".into(),
            canary: true,
            attempt: 2,
            max_attempts: 5,
            position: 1,
            total: 28,
        };
        assert_eq!(
            line(&triggering),
            "[si-1] starting again (canary, attempt 2/5)"
        );
        let done = Event::Succeeded {
            id: "si-1".into(),
            after: Duration::from_secs(65),
        };
        assert_eq!(line(&done), "[si-1] succeeded after 1m05s");
    }

    #[test]
    fn each_event_is_one_stamped_line() {
        let mut out = TextOutput::new(Vec::new());
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        out.on_event(
            at,
            &Event::Stopping {
                reason: "interrupted".into(),
            },
        );
        assert_eq!(
            String::from_utf8(out.out).unwrap(),
            "2027-01-15T08:00:00Z stopping: interrupted\n"
        );
    }
}
