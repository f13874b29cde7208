use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One scripted answer of an instance. Trigger steps answer `trigger`, poll steps answer
/// `poll`; a script reads like the fleet's history: `busy, accepted, in_progress x3, succeeded`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    // Answers to a trigger.
    Accepted,
    Busy,
    UpToDate,
    Blocked,
    Deleted,
    Orphaned,
    /// A permanent error (say, a 500 from the broker).
    Error,
    /// A transient fault: the request never arrived.
    Unavailable,
    /// The trigger started an operation, but its answer was lost (timeout after sending);
    /// a `runs` step right after it says how long that operation runs.
    Lost,
    // Answers to a poll.
    InProgress,
    InProgressRetryAfter(Duration),
    /// In progress until this long after it was accepted.
    Runs(Duration),
    Succeeded,
    Failed,
    PollUnavailable,
    Gone,
}

impl Step {
    pub fn answers_poll(&self) -> bool {
        matches!(
            self,
            Step::InProgress
                | Step::InProgressRetryAfter(_)
                | Step::Runs(_)
                | Step::Succeeded
                | Step::Failed
                | Step::PollUnavailable
                | Step::Gone
        )
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Accepted => f.write_str("accepted"),
            Step::Busy => f.write_str("busy"),
            Step::UpToDate => f.write_str("up_to_date"),
            Step::Blocked => f.write_str("blocked"),
            Step::Deleted => f.write_str("deleted"),
            Step::Orphaned => f.write_str("orphaned"),
            Step::Error => f.write_str("error"),
            Step::Unavailable => f.write_str("unavailable"),
            Step::Lost => f.write_str("lost"),
            Step::InProgress => f.write_str("in_progress"),
            Step::InProgressRetryAfter(d) => {
                write!(f, "retry_after {}", humantime::format_duration(*d))
            }
            Step::Runs(d) => write!(f, "runs {}", humantime::format_duration(*d)),
            Step::Succeeded => f.write_str("succeeded"),
            Step::Failed => f.write_str("failed"),
            Step::PollUnavailable => f.write_str("poll_unavailable"),
            Step::Gone => f.write_str("gone"),
        }
    }
}

pub const STEP_NAMES: &[&str] = &[
    "accepted",
    "busy",
    "up_to_date",
    "blocked",
    "deleted",
    "orphaned",
    "error",
    "unavailable",
    "lost",
    "in_progress",
    "retry_after DURATION",
    "runs DURATION",
    "succeeded",
    "failed",
    "poll_unavailable",
    "gone",
];

/// What is wrong with a step of a script; the script's reader names where it is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    #[error("`{text}`: a repeat count must be at least 1")]
    NoRepeats { text: String },
    #[error("`{text}`: `{duration}` is not a duration ({source})")]
    NotADuration {
        text: String,
        duration: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error("unknown step `{name}`; steps are: {}", STEP_NAMES.join(", "))]
    Unknown { name: String },
}

/// Parses `name [DURATION] [xN]` into the steps it stands for.
pub fn parse_steps(text: &str) -> Result<Vec<Step>, StepError> {
    let mut words: Vec<&str> = text.split_whitespace().collect();
    let mut repeat = 1usize;
    if let Some(last) = words.last()
        && let Some(n) = last.strip_prefix('x')
        && let Ok(n) = n.parse::<usize>()
    {
        if n == 0 {
            return Err(StepError::NoRepeats {
                text: text.to_string(),
            });
        }
        repeat = n;
        words.pop();
    }
    let step = match words.as_slice() {
        [name, duration] if matches!(*name, "runs" | "retry_after") => {
            let d =
                humantime::parse_duration(duration).map_err(|source| StepError::NotADuration {
                    text: text.to_string(),
                    duration: duration.to_string(),
                    source,
                })?;
            if *name == "runs" {
                Step::Runs(d)
            } else {
                Step::InProgressRetryAfter(d)
            }
        }
        _ => step_named(&words.join("_"))?,
    };
    Ok(vec![step; repeat])
}

impl FromStr for Step {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        step_named(name).map_err(|e| e.to_string())
    }
}

fn step_named(name: &str) -> Result<Step, StepError> {
    Ok(match name {
        "accepted" => Step::Accepted,
        "busy" => Step::Busy,
        "up_to_date" => Step::UpToDate,
        "blocked" => Step::Blocked,
        "deleted" => Step::Deleted,
        "orphaned" => Step::Orphaned,
        "error" => Step::Error,
        "unavailable" => Step::Unavailable,
        "lost" => Step::Lost,
        "in_progress" => Step::InProgress,
        "succeeded" => Step::Succeeded,
        "failed" => Step::Failed,
        "poll_unavailable" => Step::PollUnavailable,
        "gone" => Step::Gone,
        other => {
            return Err(StepError::Unknown {
                name: other.to_string(),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_parse_with_repeats_and_durations() {
        assert_eq!(
            parse_steps("in progress x3").unwrap(),
            vec![Step::InProgress; 3]
        );
        assert_eq!(
            parse_steps("runs 5m").unwrap(),
            vec![Step::Runs(Duration::from_secs(300))]
        );
        assert_eq!(parse_steps("up_to_date").unwrap(), vec![Step::UpToDate]);
        assert!(
            parse_steps("teleported")
                .unwrap_err()
                .to_string()
                .contains("unknown step")
        );
        assert!(
            parse_steps("runs soon")
                .unwrap_err()
                .to_string()
                .contains("not a duration")
        );
    }
}
