//! The life of one instance's attempt, run as its own task: trigger, and when accepted,
//! poll until the operation ends or runs out of time. The engine hears two messages:
//! the answer to the trigger (which frees the slot unless it was accepted), and, for an
//! accepted operation, how it completed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::time::{Instant, sleep_until};

use super::requests::Requests;
use crate::inventory::{
    Action, ErrorKind, Instance, InstanceState, Inventory, Operation, OperationState, Triggered,
};
use fleet_clock::short;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Accepted { operation: String },
    UpToDate,
    Blocked,
    Busy { reason: String },
    Deleted,
    Orphaned,
    Failed { reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    Succeeded,
    Failed { reason: String },
    Deleted,
    Orphaned,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Answered(Answer),
    Completed(Completion),
    /// A canary's check ended.
    Checked(crate::check::CheckResult),
}

pub struct Job {
    pub index: usize,
    pub instance: Instance,
    pub action: Action,
    pub force: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub poll_interval: Duration,
    pub operation_timeout: Duration,
}

pub async fn run<I: Inventory>(
    requests: Arc<Requests<I>>,
    job: Job,
    timing: Timing,
    report: UnboundedSender<(usize, Message)>,
) {
    let answer = trigger(&requests, &job, timing).await;
    let operation = match answer {
        Ok(operation) => operation,
        Err(answer) => {
            let _ = report.send((job.index, Message::Answered(answer)));
            return;
        }
    };
    let _ = report.send((
        job.index,
        Message::Answered(Answer::Accepted {
            operation: operation.describe(),
        }),
    ));
    let completion = watch(&requests, &operation, timing).await;
    let _ = report.send((job.index, Message::Completed(completion)));
}

/// The accepted operation, or the answer that ends this attempt.
async fn trigger<I: Inventory>(
    requests: &Requests<I>,
    job: &Job,
    timing: Timing,
) -> Result<Operation, Answer> {
    match requests.trigger(&job.instance, job.action, job.force).await {
        Ok(Triggered::Accepted(operation)) => Ok(operation),
        Ok(Triggered::UpToDate) => Err(Answer::UpToDate),
        Ok(Triggered::Blocked) => Err(Answer::Blocked),
        Ok(Triggered::Busy) => Err(Answer::Busy {
            reason: "another operation is in progress".into(),
        }),
        Ok(Triggered::Deleted) => Err(Answer::Deleted),
        Ok(Triggered::Orphaned) => Err(Answer::Orphaned),
        Err(e) if e.kind == ErrorKind::Ambiguous => {
            Err(read_back(requests, job, timing, &e.message).await)
        }
        Err(e) => Err(Answer::Failed {
            reason: format!("{} request failed: {e}", job.action.verb()),
        }),
    }
}

/// After a trigger that may or may not have arrived, the instance is read back rather than
/// triggered again. An operation in progress may be ours, so the slot stays taken and the
/// instance is read again every poll interval until the operation ends; then the instance
/// counts as busy and is tried again in the next round, where the broker says whether
/// anything is left to do.
async fn read_back<I: Inventory>(
    requests: &Requests<I>,
    job: &Job,
    timing: Timing,
    error: &str,
) -> Answer {
    let deadline = Instant::now() + timing.operation_timeout;
    let mut watched = false;
    loop {
        match requests.instance(&job.instance.id).await {
            Ok(None) => return Answer::Deleted,
            Ok(Some(instance)) if instance.state == InstanceState::Deleted => {
                return Answer::Deleted;
            }
            Ok(Some(instance)) if instance.operation_in_progress() => {
                if Instant::now() >= deadline {
                    return Answer::Failed {
                        reason: format!(
                            "the trigger's answer was lost ({error}) and the operation in progress \
                             did not end within {}",
                            short(timing.operation_timeout)
                        ),
                    };
                }
                watched = true;
                sleep_until((Instant::now() + timing.poll_interval).min(deadline)).await;
            }
            Ok(Some(_)) if watched => {
                return Answer::Busy {
                    reason: format!(
                        "the trigger's answer was lost ({error}); the operation in progress has \
                         ended and the instance is tried again in the next round"
                    ),
                };
            }
            Ok(Some(_)) => {
                return Answer::Busy {
                    reason: format!(
                        "the trigger's answer was lost ({error}) and no operation is in progress; \
                         it is sent again in the next round"
                    ),
                };
            }
            Err(e) => {
                return Answer::Failed {
                    reason: format!(
                        "the trigger's answer was lost ({error}) and the instance could not be read back: {e}"
                    ),
                };
            }
        }
    }
}

/// How soon after a trigger its operation is first polled (or after the interval, when
/// that is shorter).
const FIRST_POLL: Duration = Duration::from_secs(1);

/// Polls until the operation ends. A poll that fails without effect on the operation
/// (the broker briefly unreachable) is not the operation failing: polling goes on until
/// the deadline; only a permanent error ends it.
async fn watch<I: Inventory>(
    requests: &Requests<I>,
    operation: &Operation,
    timing: Timing,
) -> Completion {
    let deadline = Instant::now() + timing.operation_timeout;
    // The first poll comes soon after the trigger, so that a short operation is seen to
    // end soon; the waits then double up to the interval.
    let mut wait = FIRST_POLL.min(timing.poll_interval);
    loop {
        let next = Instant::now() + wait;
        let last = next >= deadline;
        sleep_until(next.min(deadline)).await;
        match requests.poll(operation).await {
            Ok(OperationState::InProgress { retry_after }) => {
                wait = match retry_after {
                    // The server's pace, never faster than the first poll's.
                    Some(asked) => asked.min(timing.operation_timeout).max(FIRST_POLL),
                    None => (wait * 2).min(timing.poll_interval),
                };
            }
            Ok(OperationState::Succeeded) => return Completion::Succeeded,
            Ok(OperationState::Failed { reason }) => return Completion::Failed { reason },
            Ok(OperationState::Deleted) => return Completion::Deleted,
            Ok(OperationState::Orphaned) => return Completion::Orphaned,
            Err(e) if e.kind == ErrorKind::Permanent => {
                return Completion::Failed {
                    reason: format!("polling {} failed: {e}", operation.describe()),
                };
            }
            Err(e) => {
                tracing::warn!(operation = %operation.describe(), error = %e, "polling failed; polling again");
                wait = timing.poll_interval;
            }
        }
        if last || Instant::now() >= deadline {
            return Completion::Failed {
                reason: format!(
                    "{} did not finish within {}; it may still be running",
                    operation.describe(),
                    short(timing.operation_timeout)
                ),
            };
        }
    }
}
