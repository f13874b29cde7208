//! A canary's check: after its operation succeeded, something that proves the service
//! works (a smoke-test errand, a command) runs before the canary counts, and a failed
//! check is a failed canary. The engine knows only this seam and its time limit, so the
//! checks are tested in virtual time and implemented where their I/O lives.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::inventory::Instance;

/// What a check ended with: what it said (the tail of its output, its exit code) either
/// way.
pub type CheckResult = Result<String, String>;

pub trait CanaryCheck: Send + Sync + 'static {
    /// Checks `instance`, whose operation just succeeded, by `deadline`. A check that
    /// started work elsewhere (an errand's task) stops it once the deadline has passed and
    /// answers [`overdue`]; the stop is awaited, so nothing a check started outlives its
    /// canary (a future dropped at the limit could not await it). A check that does not
    /// stop by itself is dropped [`STOP_GRACE`] later.
    fn check(
        &self,
        instance: Instance,
        deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = CheckResult> + Send>>;

    /// How long a check may take; past it, it has failed.
    fn time_limit(&self) -> Duration;

    /// What the check is, for events and reports: `errand smoke-tests`, `command ./check`.
    fn describe(&self) -> String;
}

/// How long past its deadline a check may take to stop what it started.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// Runs `check` on `instance` within its time limit.
pub(crate) async fn run(check: &dyn CanaryCheck, instance: Instance) -> CheckResult {
    let limit = check.time_limit();
    let deadline = Instant::now() + limit;
    match tokio::time::timeout_at(deadline + STOP_GRACE, check.check(instance, deadline)).await {
        Ok(result) => result,
        Err(_) => Err(overdue(&check.describe(), limit)),
    }
}

/// What a check past its time limit failed with; `what` is its [`CanaryCheck::describe`].
pub fn overdue(what: &str, limit: Duration) -> String {
    format!("{what} did not finish within {}", fleet_clock::short(limit))
}

/// Where a fleet's instances are reached: what a command check hands its program. Only
/// the inventories that know (a director's, the embedded fleet's) have one.
pub trait AddressBook: Send + Sync + 'static {
    /// The instance's VMs' addresses.
    fn addresses(
        &self,
        instance: Instance,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>>;
}

/// How many lines of a check's output its result keeps.
const TAIL_LINES: usize = 10;

/// The last lines of a check's output, joined by ` | ` so that a report line holds them.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join(" | ")
}

/// What an errand task's runs come to, each an exit code and its output: passed when it
/// ran somewhere and every run exited 0; what each said (its exit code and the [`tail`]
/// of its output) either way.
pub fn errand_verdict(task: u64, runs: &[(i32, String)]) -> CheckResult {
    if runs.is_empty() {
        return Err(format!("task {task} ran the errand nowhere"));
    }
    let said: Vec<String> = runs
        .iter()
        .map(|(code, output)| format!("exit code {code}: {}", tail(output)))
        .collect();
    let said = format!("task {task}: {}", said.join("; "));
    if runs.iter().all(|(code, _)| *code == 0) {
        Ok(said)
    } else {
        Err(said)
    }
}
